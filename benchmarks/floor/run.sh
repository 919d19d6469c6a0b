#!/usr/bin/env bash
# What bounds two of issue 40's targets on this machine, each program's head says how it measures:
#   rotate_floor     the 16-bit rotation's floor: minimal loops, the rotation against the convert-only loop
#   decode_layouts   fused against unfused at one token, over 16 buffer layouts
# (g++ 12 warns of its own AVX-512 intrinsics' undefined start values in rotate_floor, GCC PR 105593:
# that warning is off there.) ROTARY_LAYOUTS_DETAIL=1 prints each layout's ratio.
#   bash benchmarks/floor/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash cmake/deps.sh bench >/dev/null  # Eigen and the compilers, as benchmarks/run.sh installs them
out=build/floor
mkdir -p "$out"
"${CXX:-g++}" -std=c++17 -O2 -Wall -Wextra -Werror -Wno-uninitialized \
  -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c benchmarks/floor/rotate_floor.cpp -o "$out/rotate_floor"
grep -m1 'model name' /proc/cpuinfo || true
"$out/rotate_floor"
"${CXX:-g++}" -std=c++17 -O3 -DNDEBUG -Wall -Wextra -Wpedantic -Werror -Iinclude -isystem /usr/include/eigen3 \
  benchmarks/floor/decode_layouts.cpp -o "$out/decode_layouts" -lpthread
"$out/decode_layouts"
