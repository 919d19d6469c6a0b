# f16 conversion floor: the loads, widening, rounding and stores of f16_reg, no arithmetic (the convert-only loop)
# Registers and addresses stand in for the kernel's; one iteration = 16 pairs of one row.
vcvtph2ps (%rdi,%rax), %zmm0
vcvtph2ps 128(%rdi,%rax), %zmm1
vmovups (%rsi,%rcx), %zmm2
vmovups 256(%rsi,%rcx), %zmm3
vcvtps2ph $4, %zmm0, %ymm6
vcvtps2ph $4, %zmm1, %ymm7
vmovdqu %ymm6, (%rdx,%rax)
vmovdqu %ymm7, 128(%rdx,%rax)
