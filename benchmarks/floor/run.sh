#!/usr/bin/env bash
# The 16-bit rotation's floor on this core (rotate_floor.cpp says what it measures). (g++ 12 warns of
# its own AVX-512 intrinsics' undefined start values, GCC PR 105593: that warning is off.)
#   bash benchmarks/floor/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/floor
mkdir -p "$out"
"${CXX:-g++}" -std=c++17 -O2 -Wall -Wextra -Werror -Wno-uninitialized -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c benchmarks/floor/rotate_floor.cpp -o "$out/rotate_floor"
grep -m1 'model name' /proc/cpuinfo || true
"$out/rotate_floor"
