#!/usr/bin/env bash
# rotary's tests, at two speeds. Installs missing Debian packages first; prints each stage's wall time.
#
#   bash tests/run.sh          the quick suite: g++ -O1 with assertions (preset `quick`), every test,
#                              example and packaging check once, the kernels compiled once
#                              (rotary::kernels); a few minutes on 2 cores
#   bash tests/run.sh --full   everything CI runs (.ci/run): g++ -O3 -DNDEBUG and clang++ -O2 with
#                              -Werror, each also rebuilding the core tests header-only, plain and
#                              under six value-unsafe flag sets (tests/flags); the suite under
#                              AddressSanitizer + UndefinedBehaviorSanitizer; an AArch64 cross build
#                              (NEON kernels) with its tests under qemu-aarch64; the threaded tests
#                              under ThreadSanitizer; each libFuzzer harness for ROTARY_FUZZ_SECONDS
#                              (default 30) under ASan + UBSan; the strict consumer under every CMake
#                              build type with both compilers (tests/build_types.sh); static analysis
#                              (tests/lint.sh: clang-tidy and cppcheck, both must be clean); the
#                              PyTorch extension's tests (examples/torch, in the gcc preset). Every
#                              preset but fuzz links the kernels compiled once (rotary::kernels);
#                              about 45 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
mode=quick
case "${1:-}" in
  "") ;;
  --full) mode=full ;;
  *) echo "usage: bash tests/run.sh [--full]" >&2; exit 2 ;;
esac

stage() {  # stage NAME COMMAND...: run, time, and say so
  local name=$1 start=$SECONDS
  shift
  echo "=== rotary: $name ==="
  "$@"
  echo "=== rotary: $name passed in $((SECONDS - start)) s ==="
}

if [[ $mode == quick ]]; then
  bash cmake/deps.sh tests
  bash cmake/clear_stale_build.sh build/quick
  stage "quick suite (workflow preset 'quick')" cmake --workflow --preset quick
  echo "=== rotary: quick suite passed (bash tests/run.sh --full runs everything CI runs) ==="
  exit 0
fi

bash cmake/deps.sh tests cross fuzz lint torch
export ROTARY_FUZZ_SECONDS="${ROTARY_FUZZ_SECONDS:-30}"  # read by tests/fuzz/run_fuzzer.sh
for preset in gcc clang sanitize aarch64 tsan fuzz; do
  bash cmake/clear_stale_build.sh "build/$preset"
  stage "workflow preset '$preset'" cmake --workflow --preset "$preset"
done
stage "every CMake build type, both compilers (tests/build_types.sh)" bash tests/build_types.sh
stage "static analysis (tests/lint.sh)" bash tests/lint.sh
echo "=== rotary: all test workflows and static analysis passed ==="
