# f32 half-split rotation, 16 pairs (32 values) of one row: x1, x2, cos, sin loads; y1 = x1 c - x2 s, y2 = x2 c + x1 s; 2 stores (AVX-512)
# Registers and addresses stand in for the kernel's; one iteration = 16 pairs of one row.
vmovups (%rdi,%rax), %zmm0
vmovups 256(%rdi,%rax), %zmm1
vmovups (%rsi,%rcx), %zmm2
vmovups 256(%rsi,%rcx), %zmm3
vmulps %zmm3, %zmm1, %zmm4
vfmsub231ps %zmm2, %zmm0, %zmm4
vmulps %zmm3, %zmm0, %zmm5
vfmadd231ps %zmm2, %zmm1, %zmm5
vmovups %zmm4, (%rdx,%rax)
vmovups %zmm5, 256(%rdx,%rax)
