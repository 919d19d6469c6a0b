#!/usr/bin/env bash
# Predicted cycles of the kernels' inner loops on cores we may not have (issue 40): each .s here is
# one iteration (16 pairs = 32 values of one row) of a rotation or of its conversion floor, written
# after the instructions the AVX-512 kernels compile to (objdump of rotary_bench); llvm-mca-19
# models it on Sapphire Rapids, Zen 4 and Zen 5. Prints cycles per iteration (llvm-mca's total /
# iterations) and its block reciprocal throughput, per core. A row of 128 values is 4 iterations.
#   bash benchmarks/mca/run.sh          (needs llvm-mca-19: apt-get install llvm-19)
set -euo pipefail
cd "$(dirname "$0")"
mca=$(command -v llvm-mca-19 || command -v llvm-mca || true)
if [ -z "$mca" ]; then
  echo "llvm-mca not found: apt-get install llvm-19" >&2
  exit 2
fi
cpus=(sapphirerapids znver4 znver5)
printf '%-16s' "loop"
for c in "${cpus[@]}"; do printf ' %18s' "$c"; done
printf '   (cycles per 16 pairs / block rthroughput)\n'
for f in f32 f16_reg f16_mem f16_floor f16_ymm f16_ymm_floor bf16_hw bf16_int bf16_int_packus bf16_floor; do
  printf '%-16s' "$f"
  for c in "${cpus[@]}"; do
    "$mca" -mcpu="$c" -iterations=200 "$f.s" 2>/dev/null |
      awk '/Total Cycles/{t=$3} /Block RThroughput/{b=$3} END{printf " %11.2f / %-4s", t/200, b}'
  done
  echo
done
