#!/usr/bin/env bash
# Every standard CMake build type compiles rotary's headers without a warning, with g++ and clang++:
# for each compiler x {Debug, Release, RelWithDebInfo, MinSizeRel}, configure with that build type's
# own default flags (nothing overridden) and build the strict consumer (tests/strict: every public
# header instantiated for f32/f64/f16/bf16 and both pairings under -Wall -Wextra -Wpedantic -Wshadow
# -Wconversion -Wsign-conversion -Wold-style-cast -Werror), then run it. The whole project (tests,
# examples, benchmark) is built at -O3 by the gcc and clang presets and at -O1 by sanitize.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/types
for cxx in g++ clang++; do
  for bt in Debug Release RelWithDebInfo MinSizeRel; do
    dir="build/types/${cxx}-${bt}"
    start=$SECONDS
    cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$bt" -DROTARY_STRICT_OPT= \
      -DROTARY_BUILD_BENCHMARKS=OFF -DROTARY_BUILD_EXAMPLES=OFF -DROTARY_PACKAGE_TESTS=OFF >"$dir.log" 2>&1 ||
      { cat "$dir.log"; exit 1; }
    cmake --build "$dir" -j2 --target test_strict_consumer
    "$dir/tests/strict/test_strict_consumer"
    echo "=== rotary: $cxx $bt: strict consumer built without warnings and ran ($((SECONDS - start)) s) ==="
  done
done
# The NEON code paths under the same flags (AArch64 cross compiler, compile only).
if command -v aarch64-linux-gnu-g++ >/dev/null; then
  aarch64-linux-gnu-g++ -std=c++17 -O3 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion \
    -Wold-style-cast -Werror -Iinclude -isystem /usr/include/eigen3 -c tests/strict/strict_consumer.cpp -o /dev/null
  echo "=== rotary: aarch64-linux-gnu-g++ -O3: strict consumer compiled without warnings ==="
fi
