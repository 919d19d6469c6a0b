#!/usr/bin/env bash
# Builds rotary and runs its whole test suite: g++ and clang++ with -Werror, then the suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then an AArch64 cross build whose tests
# (NEON kernels included) run under qemu-aarch64. Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash cmake/deps.sh tests cross
for preset in gcc clang sanitize aarch64; do
  echo "=== rotary: workflow preset '$preset' ==="
  cmake --workflow --preset "$preset"
done
echo "=== rotary: all test workflows passed ==="
