#!/usr/bin/env bash
# The main job: builds rotary_bench (-O3) and prints the throughput summary (GB/s and ratio to
# memcpy of the same bytes, measured in the same run). Extra arguments go to rotary_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
bash cmake/deps.sh bench
cmake --workflow --preset bench >/dev/null
./build/bench/benchmarks/rotary_bench "$@"
