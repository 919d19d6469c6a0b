# bf16 rotation: widen by vpmovzxwd + vpslld, round with AVX512_BF16 vcvtne2ps2bf16 (what the kernels do where the CPU has it)
# Registers and addresses stand in for the kernel's; one iteration = 16 pairs of one row.
vpmovzxwd (%rdi,%rax), %zmm0
vpslld $16, %zmm0, %zmm0
vpmovzxwd 32(%rdi,%rax), %zmm1
vpslld $16, %zmm1, %zmm1
vmovups (%rsi,%rcx), %zmm2
vmovups 256(%rsi,%rcx), %zmm3
vmulps %zmm3, %zmm1, %zmm4
vfmsub231ps %zmm2, %zmm0, %zmm4
vmulps %zmm3, %zmm0, %zmm5
vfmadd231ps %zmm2, %zmm1, %zmm5
vcvtne2ps2bf16 %zmm5, %zmm4, %zmm6
vmovdqu64 %zmm6, (%rdx,%rax)
