#!/usr/bin/env bash
# Every standard CMake build type compiles rotary's headers without a warning, with g++ and clang++:
# for each compiler x {Debug, Release, RelWithDebInfo, MinSizeRel}, configure with that build type's
# own default flags (nothing overridden) and build the strict consumer (tests/strict: every public
# header instantiated for f32/f64/f16/bf16 and both pairings under -Wall -Wextra -Wpedantic -Wshadow
# -Wconversion -Wsign-conversion -Wold-style-cast -Werror), then run it. Two of the ten are built by
# the presets CI runs anyway and are not built again here: g++ Release (the gcc preset's flags are
# CMake's GNU Release default, -O3 -DNDEBUG) and the AArch64 cross build (the aarch64 preset builds the
# consumer at -O3 and runs it under qemu). The whole project (tests, examples, benchmark) is built at
# -O3 by the gcc and clang presets and at -O1 by sanitize.
# Each job is a single translation unit, so the jobs run $(nproc) at a time (slowest first), each
# printing its output in one piece when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/types

one() {  # one COMPILER BUILD_TYPE: configure, build and run one strict consumer
  local cxx=$1 bt=$2 start=$SECONDS
  local dir="build/types/${cxx}-${bt}"
  cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$bt" -DROTARY_STRICT_OPT= \
    -DROTARY_BUILD_BENCHMARKS=OFF -DROTARY_BUILD_EXAMPLES=OFF -DROTARY_PACKAGE_TESTS=OFF >"$dir.log" 2>&1 ||
    { cat "$dir.log"; return 1; }
  cmake --build "$dir" --target test_strict_consumer || return 1
  "$dir/tests/strict/test_strict_consumer" || return 1
  echo "=== rotary: $cxx $bt: strict consumer built without warnings and ran ($((SECONDS - start)) s) ==="
}
export -f one

# Slowest first (measured on one Zen 4 core: g++ RelWithDebInfo ~95 s ... clang++ Debug ~25 s).
jobs=("g++ RelWithDebInfo" "clang++ RelWithDebInfo" "clang++ Release" "g++ MinSizeRel" "g++ Debug"
      "clang++ MinSizeRel" "clang++ Debug")
status=0
printf '%s\n' "${jobs[@]}" |
  xargs -P "$(nproc)" -I{} bash -c 'out=$(one {} 2>&1); rc=$?; printf "%s\n" "$out"; [ $rc -eq 0 ] ||
    { echo "=== rotary: strict consumer FAILED: {} ==="; exit 1; }' || status=1
exit $status
