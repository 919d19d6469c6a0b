#!/usr/bin/env bash
# Builds rotary and runs its whole test suite: g++ and clang++ with -Werror, then the suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then an AArch64 cross build whose tests
# (NEON kernels included) run under qemu-aarch64, then the threaded tests under ThreadSanitizer
# (preset tsan) and each libFuzzer harness for ROTARY_FUZZ_SECONDS (default here 30) under ASan +
# UBSan (preset fuzz), and last static analysis (tests/lint.sh: clang-tidy and cppcheck, both must be
# clean). The gcc preset builds everything at -O3 -DNDEBUG (CMake's Release flags), clang at -O2 with
# assertions; both rebuild the core tests
# under six value-unsafe flag sets (tests/flags); tests/build_types.sh compiles the strict consumer
# under every CMake build type with both compilers. Installs missing Debian packages first; prints
# each stage's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash cmake/deps.sh tests cross fuzz lint
export ROTARY_FUZZ_SECONDS="${ROTARY_FUZZ_SECONDS:-30}"  # read by tests/fuzz/run_fuzzer.sh
for preset in gcc clang sanitize aarch64 tsan fuzz; do
  echo "=== rotary: workflow preset '$preset' ==="
  start=$SECONDS
  cmake --workflow --preset "$preset"
  echo "=== rotary: workflow preset '$preset' passed in $((SECONDS - start)) s ==="
done
echo "=== rotary: every CMake build type, both compilers (tests/build_types.sh) ==="
start=$SECONDS
bash tests/build_types.sh
echo "=== rotary: build types passed in $((SECONDS - start)) s ==="
echo "=== rotary: static analysis (tests/lint.sh) ==="
start=$SECONDS
bash tests/lint.sh
echo "=== rotary: static analysis passed in $((SECONDS - start)) s ==="
echo "=== rotary: all test workflows and static analysis passed ==="
