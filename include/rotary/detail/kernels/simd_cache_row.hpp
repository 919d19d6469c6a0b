// The KV-cache row conversion kernel body (cache_row: int8, fp8, f16, bf16 codes), written once over
// lane operations. Included like simd_body.hpp, after it and inside the same namespace (no include
// guard): it uses its LanesOf and the including namespace's CacheOps, F16/BF16 stores and leave_kernel().
#if !defined(ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED)
#error "simd_cache_row.hpp is included by the ISA kernel headers only; include a public rotary header"
#endif
#if !defined(ROTARY_KERNEL_TARGET) || !defined(ROTARY_KERNEL_INLINE)
#error "simd_cache_row.hpp: define ROTARY_KERNEL_TARGET and ROTARY_KERNEL_INLINE first"
#endif

// ---- KV-cache rows -------------------------------------------------------------------------------

// P vectors of values from `in`, each multiplied by f (the int8 / fp8 codes' input).
template <class S, std::size_t P>
struct Scaled {
  typename S::V y[P];
};
template <class S, std::size_t P>
ROTARY_KERNEL_INLINE Scaled<S, P> scaled(const typename S::T* in, typename S::V f) noexcept {
  Scaled<S, P> r;
  for (std::size_t p = 0; p < P; ++p)
    r.y[p] = F32::mul(S::load(in + static_cast<std::ptrdiff_t>(p) * S::L), f);
  return r;
}

// One cache row (CacheRowArgs) with lane ops S for the input and the ISA's CacheOps for the codes,
// scalar::cache_row's bits: whole vectors of L values, the last n % L by quantize.hpp's cache_codes.
// int8 takes two passes: the largest |x| bits by unsigned integer maxima (their order cannot change
// the result), then per value the f32 multiply and explicitly rounded conversion of int8_code (rows
// below absmax 3.7e-37, whose multiplier is kept in double, go to cache_codes whole).
// f16 and bf16 codes use the ISA's own storage lanes (the rotate kernels' rounding).
template <class S>
ROTARY_KERNEL_TARGET void cache_row_impl(const CacheRowArgs<typename S::T>& a) noexcept {
  static_assert(S::L == CacheOps::L, "one f32 vector of input per vector of codes");
  constexpr int L = S::L;
  // vectors whose int8 / fp8 codes are narrowed and stored together
  constexpr std::size_t P = CacheOps::kPack;
  constexpr auto PL = static_cast<std::int64_t>(P) * L;
  const typename S::T* in = a.in;
  const std::int64_t full = a.n - a.n % L;
  Int8Inv inv;
  if (a.code == CacheCode::int8) {
    typename CacheOps::Acc acc = CacheOps::zero();
    for (std::int64_t j = 0; j < full; j += L) acc = CacheOps::max_abs(acc, S::load(in + j));
    std::uint32_t m = CacheOps::reduce_max(acc);
    leave_kernel();  // (the scalar code up to the next vector loop may call out-of-line helpers: below)
    for (std::int64_t j = full; j < a.n; ++j) m = std::max(m, abs_bits(in[j]));
    if (!int8_begin(a, m, inv)) return;
    if (inv.wide != 0.0) {
      leave_kernel();  // (int8_begin's copies may use vector registers)
      cache_codes(a, inv, 0);
      return;
    }
    auto* out = static_cast<std::int8_t*>(a.out);
    const typename S::V f = F32::set1(inv.f);
    std::int64_t j = 0;
    for (; j + PL <= full; j += PL) CacheOps::int8_n(scaled<S, P>(in + j, f).y, out + j);
    for (; j < full; j += L) CacheOps::int8(F32::mul(S::load(in + j), f), out + j);
  } else if (a.code == CacheCode::fp8_e4m3) {
    const typename S::V f = F32::set1(a.inv_scale);
    auto* out = static_cast<std::uint8_t*>(a.out);
    std::int64_t j = 0;
    for (; j + PL <= full; j += PL) CacheOps::fp8_n(scaled<S, P>(in + j, f).y, out + j);
    for (; j < full; j += L) CacheOps::fp8(F32::mul(S::load(in + j), f), out + j);
  } else if (a.code == CacheCode::f16) {
    auto* out = static_cast<f16*>(a.out);
    for (std::int64_t j = 0; j < full; j += L) F16::store(out + j, S::load(in + j));
  } else {
    auto* out = static_cast<bf16*>(a.out);
    for (std::int64_t j = 0; j < full; j += L) BF16::store(out + j, S::load(in + j));
  }
  // The last n % L values by the scalar definitions, whose helpers (int8_code, fp8_e4m3_code, the
  // 16-bit conversions, memset) may be compiled out of line for the TU's baseline: g++ puts no
  // vzeroupper before calls at -O1 / -Os, so the upper state is cleared here when there is a tail.
  if (full < a.n) leave_kernel();
  cache_codes(a, inv, full);
}

template <class T>
void cache_row(const CacheRowArgs<T>& a) noexcept {
  static_assert(is_storage_type_v<T>, "f32, f64, f16 or bf16");
  if constexpr (std::is_same_v<T, double>)
    scalar::cache_row(a);  // (no double row reaches a 16- or 8-bit cache: kv_cache.hpp refuses it)
  else
    cache_row_impl<LanesOf<T>>(a);
  leave_kernel();
}
