# f16, vcvtps2ph straight to memory (the memory form) instead
# Registers and addresses stand in for the kernel's; one iteration = 16 pairs of one row.
vcvtph2ps (%rdi,%rax), %zmm0
vcvtph2ps 128(%rdi,%rax), %zmm1
vmovups (%rsi,%rcx), %zmm2
vmovups 256(%rsi,%rcx), %zmm3
vmulps %zmm3, %zmm1, %zmm4
vfmsub231ps %zmm2, %zmm0, %zmm4
vmulps %zmm3, %zmm0, %zmm5
vfmadd231ps %zmm2, %zmm1, %zmm5
vcvtps2ph $4, %zmm4, (%rdx,%rax)
vcvtps2ph $4, %zmm5, 128(%rdx,%rax)
