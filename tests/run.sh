#!/usr/bin/env bash
# Builds rotary and runs its whole test suite: g++ and clang++ with -Werror, then the suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then an AArch64 cross build whose tests
# (NEON kernels included) run under qemu-aarch64, then the threaded tests under ThreadSanitizer
# (preset tsan) and each libFuzzer harness for ROTARY_FUZZ_SECONDS (default here 30) under ASan +
# UBSan (preset fuzz). Installs missing Debian packages first; prints each stage's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash cmake/deps.sh tests cross fuzz
export ROTARY_FUZZ_SECONDS="${ROTARY_FUZZ_SECONDS:-30}"  # read by tests/fuzz/run_fuzzer.sh
for preset in gcc clang sanitize aarch64 tsan fuzz; do
  echo "=== rotary: workflow preset '$preset' ==="
  start=$SECONDS
  cmake --workflow --preset "$preset"
  echo "=== rotary: workflow preset '$preset' passed in $((SECONDS - start)) s ==="
done
echo "=== rotary: all test workflows passed ==="
