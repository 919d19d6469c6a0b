#!/usr/bin/env bash
# The main job: builds rotary_bench twice (preset `bench`: g++ -O3 -DNDEBUG, no -m flags; preset
# `bench-native`: the same plus -march=native), then
#   1. runs the default build's full suite: the main table (GB/s and ratio to memcpy of the same
#      bytes, measured in the same run) and the issue's targets, MET / NOT MET; the key cases the
#      targets read run 3 times in interleaved rounds and report the median;
#   2. runs the -march=native build on the key shape only (512 tokens x 32 heads x 128, memcpy and
#      dispatch) and compares, per pairing and dtype, the two builds' dispatch/memcpy ratios
#      (target: the default build within 5% of the native one).
# Extra arguments go to the main run (step 1), after the defaults, so they win, e.g.
#   bash benchmarks/run.sh --benchmark_repetitions=3            every case 3 times (slow: ~4x)
#   bash benchmarks/run.sh --benchmark_filter=tokens:512/       a subset
# About 2-3 minutes on the 2-vCPU dev VM (builds included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash cmake/deps.sh bench
echo "rotary: building build/bench (no -m flags) and build/bench-native (-march=native)" >&2
cmake --workflow --preset bench >/dev/null
cmake --workflow --preset bench-native >/dev/null

key_ratios=build/bench/key_ratios.txt
rm -f "$key_ratios"
./build/bench/benchmarks/rotary_bench --rotary_key_repetitions=3 --rotary_key_ratios_out="$key_ratios" "$@"

echo
echo "==== -march=native build (build/bench-native), key shape only, against the run above ===="
./build/bench-native/benchmarks/rotary_bench --rotary_key_repetitions=3 \
  --benchmark_filter='/(memcpy|dispatch)/tokens:512/heads:32/head_dim:128$' \
  --rotary_compare_with="$key_ratios"
