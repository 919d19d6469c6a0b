# f16 rotation in 256-bit registers (AVX2 forms, two iterations per 16 pairs)
# Registers and addresses stand in for the kernel's; one iteration = 16 pairs of one row.
vcvtph2ps (%rdi,%rax), %ymm0
vcvtph2ps 16(%rdi,%rax), %ymm8
vcvtph2ps 64(%rdi,%rax), %ymm1
vcvtph2ps 80(%rdi,%rax), %ymm9
vmovups (%rsi,%rcx), %ymm2
vmovups 32(%rsi,%rcx), %ymm10
vmovups 256(%rsi,%rcx), %ymm3
vmovups 288(%rsi,%rcx), %ymm11
vmulps %ymm3, %ymm1, %ymm4
vfmsub231ps %ymm2, %ymm0, %ymm4
vmulps %ymm3, %ymm0, %ymm5
vfmadd231ps %ymm2, %ymm1, %ymm5
vmulps %ymm11, %ymm9, %ymm12
vfmsub231ps %ymm10, %ymm8, %ymm12
vmulps %ymm11, %ymm8, %ymm13
vfmadd231ps %ymm10, %ymm9, %ymm13
vcvtps2ph $4, %ymm4, %xmm6
vcvtps2ph $4, %ymm5, %xmm7
vcvtps2ph $4, %ymm12, %xmm14
vcvtps2ph $4, %ymm13, %xmm15
vmovdqu %xmm6, (%rdx,%rax)
vmovdqu %xmm14, 16(%rdx,%rax)
vmovdqu %xmm7, 64(%rdx,%rax)
vmovdqu %xmm15, 80(%rdx,%rax)
