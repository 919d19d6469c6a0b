# f16 conversion floor in 256-bit registers
# Registers and addresses stand in for the kernel's; one iteration = 16 pairs of one row.
vcvtph2ps (%rdi,%rax), %ymm0
vcvtph2ps 16(%rdi,%rax), %ymm8
vcvtph2ps 64(%rdi,%rax), %ymm1
vcvtph2ps 80(%rdi,%rax), %ymm9
vmovups (%rsi,%rcx), %ymm2
vmovups 32(%rsi,%rcx), %ymm10
vmovups 256(%rsi,%rcx), %ymm3
vmovups 288(%rsi,%rcx), %ymm11
vcvtps2ph $4, %ymm0, %xmm6
vcvtps2ph $4, %ymm1, %xmm7
vcvtps2ph $4, %ymm8, %xmm14
vcvtps2ph $4, %ymm9, %xmm15
vmovdqu %xmm6, (%rdx,%rax)
vmovdqu %xmm14, 16(%rdx,%rax)
vmovdqu %xmm7, 64(%rdx,%rax)
vmovdqu %xmm15, 80(%rdx,%rax)
