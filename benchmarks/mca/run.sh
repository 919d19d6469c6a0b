#!/usr/bin/env bash
# Predicted cycles of the kernels' inner loops on cores we may not have (issue 40): one iteration (16
# pairs = 32 values of one row, AVX-512) of the rotation, or of its conversion floor (the same loads,
# widening, rounding and stores without the arithmetic: the convert-only loop), composed below from
# the instructions the kernels compile to (objdump -d of rotary_bench: vcvtph2ps loads, vcvtps2ph into
# a register then a store, vpmovzxwd + vpslld for bf16, vcvtne2ps2bf16 where AVX512_BF16 exists),
# and the alternatives issue 40 asks about (vcvtps2ph to memory, 256-bit forms, bf16 rounded in
# integer ops). llvm-mca-19 models each on Sapphire Rapids, Zen 4 and Zen 5; printed: cycles per
# iteration (its total / iterations) and its block reciprocal throughput. A row of 128 values is 4
# iterations. Registers and addresses stand in for the kernel's.
# A second table models qk_norm_rope's ceiling (issue 40 asks 1.6x its unfused steps at 512 tokens):
# per 64 values of a 128-value row (32 half-split pairs), the three passes of the unfused steps (the
# norm's sums of squares, its scaling with the rounding to the storage type, RoPE) against the least
# an exact fusion must still do, every value kept in registers from one load to its store.
#   bash benchmarks/mca/run.sh          (installs llvm-19 for llvm-mca-19 if missing: cmake/deps.sh mca)
set -euo pipefail
command -v llvm-mca-19 >/dev/null || bash "$(dirname "$0")/../../cmake/deps.sh" mca
mca=$(command -v llvm-mca-19 || command -v llvm-mca || true)
if [ -z "$mca" ]; then
  echo "llvm-mca not found: apt-get install llvm-19" >&2
  exit 2
fi

# cos and sin of the 16 pairs (f32 rows of the cache)
cossin='vmovups (%rsi,%rcx), %zmm2
vmovups 256(%rsi,%rcx), %zmm3'
# y1 = x1 c - x2 s, y2 = x2 c + x1 s (half-split pairs in zmm0 / zmm1)
rotate='vmulps %zmm3, %zmm1, %zmm4
vfmsub231ps %zmm2, %zmm0, %zmm4
vmulps %zmm3, %zmm0, %zmm5
vfmadd231ps %zmm2, %zmm1, %zmm5'
f16_in='vcvtph2ps (%rdi,%rax), %zmm0
vcvtph2ps 128(%rdi,%rax), %zmm1'
bf16_in='vpmovzxwd (%rdi,%rax), %zmm0
vpslld $16, %zmm0, %zmm0
vpmovzxwd 32(%rdi,%rax), %zmm1
vpslld $16, %zmm1, %zmm1'
# f16 out, register form then a store; $1 $2: the two f32 vectors
f16_out() { printf 'vcvtps2ph $4, %%%s, %%ymm6\nvcvtps2ph $4, %%%s, %%ymm7\nvmovdqu %%ymm6, (%%rdx,%%rax)\nvmovdqu %%ymm7, 128(%%rdx,%%rax)\n' "$1" "$2"; }
bf16_hw_out() { printf 'vcvtne2ps2bf16 %%%s, %%%s, %%zmm6\nvmovdqu64 %%zmm6, (%%rdx,%%rax)\n' "$2" "$1"; }
# round to nearest even in integer ops, NaN kept quiet (the kernels' fallback without AVX512_BF16)
bf16_round() {  # $1: f32 vector, $2 $3: scratch, $4: mask register
  printf 'vpsrld $16, %%%s, %%%s\nvpandd %%zmm9, %%%s, %%%s\nvpaddd %%zmm10, %%%s, %%%s\nvpaddd %%%s, %%%s, %%%s\n' \
    "$1" "$2" "$2" "$2" "$1" "$3" "$2" "$3" "$3"
  printf 'vcmpunordps %%%s, %%%s, %%%s\nvpord %%zmm12, %%%s, %%%s {%%%s}\nvpsrld $16, %%%s, %%%s\n' \
    "$1" "$1" "$4" "$1" "$3" "$4" "$3" "$3"
}
ymm_loop() {  # the f16 loop in 256-bit registers; $1 = yes: with the rotation
  printf 'vcvtph2ps (%%rdi,%%rax), %%ymm0\nvcvtph2ps 16(%%rdi,%%rax), %%ymm8\nvcvtph2ps 64(%%rdi,%%rax), %%ymm1\nvcvtph2ps 80(%%rdi,%%rax), %%ymm9\n'
  printf 'vmovups (%%rsi,%%rcx), %%ymm2\nvmovups 32(%%rsi,%%rcx), %%ymm10\nvmovups 256(%%rsi,%%rcx), %%ymm3\nvmovups 288(%%rsi,%%rcx), %%ymm11\n'
  local a=ymm0 b=ymm1 c=ymm8 d=ymm9
  if [ "$1" = yes ]; then
    printf 'vmulps %%ymm3, %%ymm1, %%ymm4\nvfmsub231ps %%ymm2, %%ymm0, %%ymm4\nvmulps %%ymm3, %%ymm0, %%ymm5\nvfmadd231ps %%ymm2, %%ymm1, %%ymm5\n'
    printf 'vmulps %%ymm11, %%ymm9, %%ymm12\nvfmsub231ps %%ymm10, %%ymm8, %%ymm12\nvmulps %%ymm11, %%ymm8, %%ymm13\nvfmadd231ps %%ymm10, %%ymm9, %%ymm13\n'
    a=ymm4 b=ymm5 c=ymm12 d=ymm13
  fi
  printf 'vcvtps2ph $4, %%%s, %%xmm6\nvcvtps2ph $4, %%%s, %%xmm7\nvcvtps2ph $4, %%%s, %%xmm14\nvcvtps2ph $4, %%%s, %%xmm15\n' $a $b $c $d
  printf 'vmovdqu %%xmm6, (%%rdx,%%rax)\nvmovdqu %%xmm14, 16(%%rdx,%%rax)\nvmovdqu %%xmm7, 64(%%rdx,%%rax)\nvmovdqu %%xmm15, 80(%%rdx,%%rax)\n'
}

loop() {  # the loop named $1, on stdout
  case $1 in
    f32) printf 'vmovups (%%rdi,%%rax), %%zmm0\nvmovups 256(%%rdi,%%rax), %%zmm1\n%s\n%s\n' "$cossin" "$rotate"
         printf 'vmovups %%zmm4, (%%rdx,%%rax)\nvmovups %%zmm5, 256(%%rdx,%%rax)\n' ;;
    f16) printf '%s\n%s\n%s\n' "$f16_in" "$cossin" "$rotate"; f16_out zmm4 zmm5 ;;
    f16_mem) printf '%s\n%s\n%s\n' "$f16_in" "$cossin" "$rotate"
             printf 'vcvtps2ph $4, %%zmm4, (%%rdx,%%rax)\nvcvtps2ph $4, %%zmm5, 128(%%rdx,%%rax)\n' ;;
    f16_floor) printf '%s\n%s\n' "$f16_in" "$cossin"; f16_out zmm0 zmm1 ;;
    f16_ymm) ymm_loop yes ;;
    f16_ymm_floor) ymm_loop no ;;
    bf16) printf '%s\n%s\n%s\n' "$bf16_in" "$cossin" "$rotate"; bf16_hw_out zmm4 zmm5 ;;
    bf16_int) printf '%s\n%s\n%s\n' "$bf16_in" "$cossin" "$rotate"
              bf16_round zmm4 zmm8 zmm11 k1; bf16_round zmm5 zmm13 zmm14 k2
              printf 'vpmovdw %%zmm11, (%%rdx,%%rax)\nvpmovdw %%zmm14, 32(%%rdx,%%rax)\n' ;;
    bf16_int_pack) printf '%s\n%s\n%s\n' "$bf16_in" "$cossin" "$rotate"
                   bf16_round zmm4 zmm8 zmm11 k1; bf16_round zmm5 zmm13 zmm14 k2
                   printf 'vpackusdw %%zmm14, %%zmm11, %%zmm15\nvpermq %%zmm15, %%zmm16, %%zmm15\nvmovdqu64 %%zmm15, (%%rdx,%%rax)\n' ;;
    bf16_floor) printf '%s\n%s\n' "$bf16_in" "$cossin"; bf16_hw_out zmm0 zmm1 ;;
  esac
}

cpus=(sapphirerapids znver4 znver5)
printf '%-15s' "loop"
for c in "${cpus[@]}"; do printf ' %17s' "$c"; done
printf '   (cycles per 16 pairs / block rthroughput)\n'
for name in f32 f16 f16_mem f16_floor f16_ymm f16_ymm_floor bf16 bf16_int bf16_int_pack bf16_floor; do
  printf '%-15s' "$name"
  for c in "${cpus[@]}"; do
    loop "$name" | "$mca" -mcpu="$c" -iterations=200 - 2>/dev/null |
      awk '/Total Cycles/{t=$3} /Block RThroughput/{b=$3} END{printf " %10.2f / %-4s", t/200, b}'
  done
  echo
done

# ---- qk_norm_rope: per 64 values (32 half-split pairs) of a weighted 128-value row ----------------
# bf16 (AVX512_BF16 kernels): the norm's sums read 32 values a load in element order (vpermw to the
# high halves of f32 lanes, its order of accumulation); its scaling widens with a shift and a mask
# (even/odd lanes), multiplies by the factor and the weight, rounds (vcvtne2ps2bf16, vpermw back to
# the stored order); RoPE widens the same way, rotates with cos/sin de-interleaved per token, rounds.
# An exact fusion still rounds the normalized values to bf16 before rotating them (the unfused
# result's bits): in registers that is vcvtne2ps2bf16 and a vpermw back to f32 lanes per 16 values.
bf16_raw='vmovdqu64 (%rdi,%rax), %zmm0
vmovdqu64 128(%rdi,%rax), %zmm1'
bf16_ordered='vpermw %zmm0, %zmm20, %zmm2 {%k1} {z}
vpermw %zmm0, %zmm21, %zmm3 {%k1} {z}
vpermw %zmm1, %zmm20, %zmm4 {%k1} {z}
vpermw %zmm1, %zmm21, %zmm5 {%k1} {z}'
bf16_evenodd='vpslld $16, %zmm0, %zmm2
vpandd %zmm22, %zmm0, %zmm3
vpslld $16, %zmm1, %zmm4
vpandd %zmm22, %zmm1, %zmm5'
sums='vfmadd231ps %zmm2, %zmm2, %zmm24
vfmadd231ps %zmm3, %zmm3, %zmm25
vfmadd231ps %zmm4, %zmm4, %zmm26
vfmadd231ps %zmm5, %zmm5, %zmm27'
scale4='vmulps %zmm23, %zmm2, %zmm2
vmulps %zmm23, %zmm3, %zmm3
vmulps %zmm23, %zmm4, %zmm4
vmulps %zmm23, %zmm5, %zmm5
vmulps (%r8,%rax,2), %zmm2, %zmm2
vmulps 64(%r8,%rax,2), %zmm3, %zmm3
vmulps 256(%r8,%rax,2), %zmm4, %zmm4
vmulps 320(%r8,%rax,2), %zmm5, %zmm5'
# x0 = zmm2, zmm3 (values j..j+31), x1 = zmm4, zmm5 (64+j..): y in zmm12..15
rotate4='vmovups (%rsi,%rax,2), %zmm8
vmovups 64(%rsi,%rax,2), %zmm9
vmovups 256(%rsi,%rax,2), %zmm10
vmovups 320(%rsi,%rax,2), %zmm11
vmulps %zmm10, %zmm4, %zmm12
vfmsub231ps %zmm8, %zmm2, %zmm12
vmulps %zmm11, %zmm5, %zmm13
vfmsub231ps %zmm9, %zmm3, %zmm13
vmulps %zmm10, %zmm2, %zmm14
vfmadd231ps %zmm8, %zmm4, %zmm14
vmulps %zmm11, %zmm3, %zmm15
vfmadd231ps %zmm9, %zmm5, %zmm15'
bf16_pack_store() {  # $1 $2 $3 $4: f32 vectors; $5 = yes: vpermw into the stored order
  printf 'vcvtne2ps2bf16 %%%s, %%%s, %%zmm6\nvcvtne2ps2bf16 %%%s, %%%s, %%zmm7\n' "$2" "$1" "$4" "$3"
  [ "$5" = yes ] && printf 'vpermw %%zmm6, %%zmm28, %%zmm6\nvpermw %%zmm7, %%zmm28, %%zmm7\n'
  printf 'vmovdqu64 %%zmm6, (%%rdx,%%rax)\nvmovdqu64 %%zmm7, 128(%%rdx,%%rax)\n'
}
f32_rows() {  # 4 vectors from register $1 into zmm$2..
  for i in 0 1 2 3; do printf 'vmovups %d(%%%s,%%rax), %%zmm%d\n' $((i * 64)) "$1" $((i + $2)); done
}
f32_store() { for i in 0 1 2 3; do printf 'vmovups %%zmm%d, %d(%%rdx,%%rax)\n' $((i + $1)) $((i * 64)); done; }
norm_loop() {  # the loop named $1, on stdout
  case $1 in
    bf16_sums) printf '%s\n%s\n%s\n' "$bf16_raw" "$bf16_ordered" "$sums" ;;
    bf16_scale) printf '%s\n%s\n%s\n' "$bf16_raw" "$bf16_evenodd" "$scale4"; bf16_pack_store zmm2 zmm3 zmm4 zmm5 yes ;;
    bf16_rope) printf '%s\n%s\n%s\n' "${bf16_raw//rdi/rdx}" "$bf16_evenodd" "$rotate4"
               bf16_pack_store zmm12 zmm13 zmm14 zmm15 yes ;;
    bf16_fused | bf16_second)  # second: the sums in a pass of their own, this pass reads the row again
                [ "$1" = bf16_fused ] && s=$sums || s=''
                printf '%s\n%s\n%s\n%s\n' "$bf16_raw" "$bf16_ordered" "$s" "$scale4"
                printf 'vcvtne2ps2bf16 %%zmm3, %%zmm2, %%zmm0\nvcvtne2ps2bf16 %%zmm5, %%zmm4, %%zmm1\n%s\n%s\n' \
                  "$bf16_ordered" "$rotate4"
                bf16_pack_store zmm12 zmm13 zmm14 zmm15 no ;;
    f32_sums) f32_rows rdi 2; printf '%s\n' "$sums" ;;
    f32_scale) f32_rows rdi 2; printf '%s\n' "$scale4"; f32_store 2 ;;
    f32_rope) f32_rows rdx 2; printf '%s\n' "$rotate4"; f32_store 12 ;;
    f32_fused) f32_rows rdi 2; printf '%s\n%s\n%s\n' "$sums" "$scale4" "$rotate4"; f32_store 12 ;;
    f32_second) f32_rows rdi 2; printf '%s\n%s\n' "$scale4" "$rotate4"; f32_store 12 ;;
  esac
}

echo
echo "qk_norm_rope, 64 values of a weighted 128-value row (cycles; unfused = sums + scale + rope; fused: all"
echo "in registers; ceiling = unfused / fused, the most an exact fusion can gain where the core, not memory,"
echo "bounds both; two-pass: the sums, then one pass that reads the row again for the rest)"
printf '%-6s %-15s %8s %8s %8s %8s %8s %8s %9s %8s\n' dtype cpu sums scale rope unfused fused ceiling two-pass ceiling
for t in bf16 f32; do
  for c in "${cpus[@]}"; do
    printf '%-6s %-15s' "$t" "$c"
    for part in sums scale rope fused second; do
      norm_loop "${t}_$part" | "$mca" -mcpu="$c" -iterations=200 - 2>/dev/null | awk '/Total Cycles/{print $3 / 200}'
    done | awk '{v[NR] = $1} END{u = v[1] + v[2] + v[3]; p = v[1] + v[5]
      printf " %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %8.2f\n", v[1], v[2], v[3], u, v[4], u / v[4], p, u / p}'
  done
done
