#!/usr/bin/env bash
# Static analysis; both tools must be clean.
#   clang-tidy 14: the checked-in .clang-tidy files (tests/.clang-tidy relaxes two checks for test
#     TUs); warnings are errors, and diagnostics inside include/rotary count (HeaderFilterRegex).
#   cppcheck 2.10: warning, performance, portability; inline suppressions only; GoogleTest's macros
#     come from tests/lint_gtest.cfg (cppcheck does not read system headers). It checks the two
#     configurations the kernels are built for, x86-64 (AVX2/AVX-512 kernels) and AArch64 (NEON
#     kernels), rather than guessing #ifdef combinations (its default never defines __GNUC__ and
#     __x86_64__ together, so it skipped every x86 kernel). rotary's headers are checked once per
#     configuration, through tests/strict, which includes every public header and instantiates it for
#     every dtype; every example, benchmark and test is then checked for its own code, without
#     include/ on the path (each would re-analyse all of rotary's headers, ~8-12 CPU-s a file, the
#     same tokens as tests/strict: 190 s -> under 60 s of lint, measured on a 2-vCPU Xeon).
# Usage: tests/lint.sh [--all]
#   default  clang-tidy over the examples, the benchmark and the tests of the headers those leave
#            out (every public header is included by each TU via rotary.hpp; these TUs also call
#            into each of them, which the analyzer needs to reach header code); cppcheck over every
#            example, benchmark and test. ~14 CPU-minutes: about 7 minutes on 2 idle cores.
#   --all    clang-tidy over every test too (measured before the analyzer budget below: 26
#            CPU-minutes; less now).
# Installs missing Debian packages first (cmake/deps.sh tests lint).
set -euo pipefail
cd "$(dirname "$0")/.."

all=0
case "${1:-}" in
  "") ;;
  --all) all=1 ;;
  *) echo "usage: tests/lint.sh [--all]" >&2; exit 2 ;;
esac

bash cmake/deps.sh tests lint
build=build/lint
bash cmake/clear_stale_build.sh "$build"
# Header-only (ROTARY_DEV_SEPARATE_KERNELS off): each TU then holds the kernel bodies it calls, where
# clang-tidy's checks see them.
# No precompiled header (ROTARY_DEV_PCH): nothing is built here, and clang-tidy reads each TU whole.
cmake --preset clang -B "$build" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DROTARY_PACKAGE_TESTS=OFF \
  -DROTARY_DEV_SEPARATE_KERNELS=OFF -DROTARY_DEV_PCH=OFF >/dev/null
jobs=$(nproc)

# The test sources, by topic folder (tests/README.md).
tests=(tests/{kernels,api,numerics,validation,config,variants,interop}/*.cpp)
everything=(examples/*.cpp benchmarks/*.cpp "${tests[@]}")
if [ "$all" -eq 1 ]; then
  tidy_files=("${everything[@]}")
else
  # The examples and the benchmark reach apply*, layouts (batch, varlen), cache, on-the-fly rows,
  # dtypes, dispatch and every kernel, parallel, reference, hf_config, scaling and analysis. These
  # tests cover the rest: rerotate, multi_axis, xpos, linear_attention, gradients, convert_weights,
  # tensor_map and context parallelism (test_layouts), the fused prologues, norm kernels and their
  # refusals (test_fusion, test_fusion_errors), and the caller tables and compat/ front ends
  # (tests/interop).
  tidy_files=(examples/*.cpp benchmarks/*.cpp
              tests/numerics/test_rerotate.cpp tests/variants/test_multi_axis.cpp
              tests/variants/test_multi_axis_calls.cpp tests/variants/test_xpos.cpp
              tests/variants/test_linear_attention.cpp tests/numerics/test_gradients.cpp
              tests/variants/test_convert_weights.cpp tests/api/test_layouts.cpp
              tests/api/test_fusion.cpp tests/api/test_fusion_errors.cpp tests/interop/*.cpp)
fi

# Slowest first, so that the two jobs end together (clang-tidy seconds on a 2-vCPU Xeon, in brackets):
# benchmarks/kernels.cpp (62), test_xpos (60), test_multi_axis_calls (42), test_fusion (42),
# benchmarks/fusion.cpp (41), test_fusion_errors (39), test_linear_attention (38), test_tables (37),
# test_layouts (36), benchmarks/layouts.cpp (28); the rest take under 45 s. Nearly all of it is the
# path-sensitive analyzer, bounded per function (the node budget below).
slow=(benchmarks/kernels.cpp tests/variants/test_xpos.cpp tests/variants/test_multi_axis_calls.cpp
      benchmarks/fusion.cpp tests/api/test_fusion.cpp tests/interop/test_tables.cpp
      tests/api/test_fusion_errors.cpp tests/api/test_layouts.cpp benchmarks/layouts.cpp
      tests/variants/test_linear_attention.cpp)
ordered=()
for f in "${slow[@]}"; do
  for g in "${tidy_files[@]}"; do [ "$f" = "$g" ] && ordered+=("$f"); done
done
for g in "${tidy_files[@]}"; do
  case " ${slow[*]} " in *" $g "*) ;; *) ordered+=("$g") ;; esac
done
tidy_files=("${ordered[@]}")

# The path-sensitive analyzer's node budget per function: 75,000 (its "shallow" mode's value) instead
# of the default 225,000. Nearly all of clang-tidy's time is test bodies that exhaust the budget,
# exploring combinations of their own EXPECT branches; a third of it halves the time (test_xpos:
# 140 s -> 64 s, the same findings) and still follows each call into rotary's headers.
export analyzer_args="--extra-arg=-Xclang --extra-arg=-analyzer-config --extra-arg=-Xclang --extra-arg=max-nodes=75000"
status=0
echo "=== rotary: clang-tidy $(clang-tidy --version | sed -n 's/.*LLVM version \([0-9.]*\).*/\1/p')" \
     "over ${#tidy_files[@]} files, $jobs at a time ==="
# One job per file; each prints its findings in one piece (parallel jobs do not interleave). A crash
# (exit status >= 128: clang-tidy 14 has segfaulted here, rarely, on a header rewritten while it
# was read) is retried once before it counts.
tidy_one='
  start=$(date +%s)
  for attempt in 1 2; do
    rc=0
    out=$(clang-tidy -p "$0" --quiet $analyzer_args "$1" 2>/dev/null) || rc=$?
    [ "$rc" -lt 128 ] && break
  done
  secs=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ]; then printf "  ok  %4ss  %s\n" "$secs" "$1"; exit 0; fi
  [ "$rc" -ge 128 ] && out="$out
clang-tidy crashed (exit status $rc) twice"
  printf "%s\n  FAIL %4ss  %s\n" "$out" "$secs" "$1"
  exit 1'
printf '%s\n' "${tidy_files[@]}" | xargs -P "$jobs" -I{} sh -c "$tidy_one" "$build" {} || status=1

echo "=== rotary: $(cppcheck --version): rotary's headers through tests/strict, every file's own code;" \
     "x86-64 and AArch64 ==="
cppcheck_args=(--std=c++17 --language=c++ --enable=warning,performance,portability --inline-suppr
               --suppress=missingIncludeSystem --error-exitcode=1 --quiet -j "$jobs" -I tests
               --library=tests/lint_gtest.cfg -D__GNUC__=12)
for arch in "-D__x86_64__ -D_OPENMP" "-D__aarch64__ -D__ARM_NEON"; do
  # shellcheck disable=SC2086  # $arch: two -D options
  cppcheck "${cppcheck_args[@]}" -I include $arch tests/strict/*.cpp || status=1
  # shellcheck disable=SC2086
  cppcheck "${cppcheck_args[@]}" --suppress=missingInclude $arch "${everything[@]}" || status=1
done
if [ "$status" -ne 0 ]; then
  echo "=== rotary: static analysis found problems (above) ===" >&2
  exit 1
fi
echo "=== rotary: static analysis clean ==="
