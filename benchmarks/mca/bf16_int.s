# bf16 rotation rounding in integer ops (RNE: + 0x7fff + lsb, NaN kept quiet), vpmovdw stores
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
vpsrld $16, %zmm4, %zmm8
vpandd %zmm9, %zmm8, %zmm8
vpaddd %zmm10, %zmm4, %zmm11
vpaddd %zmm8, %zmm11, %zmm11
vcmpunordps %zmm4, %zmm4, %k1
vpord %zmm12, %zmm4, %zmm11 {%k1}
vpsrld $16, %zmm5, %zmm13
vpandd %zmm9, %zmm13, %zmm13
vpaddd %zmm10, %zmm5, %zmm14
vpaddd %zmm13, %zmm14, %zmm14
vcmpunordps %zmm5, %zmm5, %k2
vpord %zmm12, %zmm5, %zmm14 {%k2}
vpsrld $16, %zmm11, %zmm11
vpsrld $16, %zmm14, %zmm14
vpmovdw %zmm11, (%rdx,%rax)
vpmovdw %zmm14, 32(%rdx,%rax)
