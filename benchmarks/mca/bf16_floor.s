# bf16 conversion floor: widen, vcvtne2ps2bf16, store; no arithmetic
# Registers and addresses stand in for the kernel's; one iteration = 16 pairs of one row.
vpmovzxwd (%rdi,%rax), %zmm0
vpslld $16, %zmm0, %zmm0
vpmovzxwd 32(%rdi,%rax), %zmm1
vpslld $16, %zmm1, %zmm1
vmovups (%rsi,%rcx), %zmm2
vmovups 256(%rsi,%rcx), %zmm3
vcvtne2ps2bf16 %zmm1, %zmm0, %zmm6
vmovdqu64 %zmm6, (%rdx,%rax)
