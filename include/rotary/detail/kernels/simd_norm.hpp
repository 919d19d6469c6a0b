// The per-head RMSNorm kernel body (norm_rows), written once over lane operations. Included like
// simd_body.hpp, right after it and inside the same namespace (no include guard): it uses its
// LanesOf and the including namespace's F32/F64 lanes (set1, add, reduce) and leave_kernel().
#if !defined(ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED)
#error "simd_norm.hpp is included by the ISA kernel headers only; include a public rotary header"
#endif
#if !defined(ROTARY_KERNEL_TARGET) || !defined(ROTARY_KERNEL_INLINE)
#error "simd_norm.hpp: define ROTARY_KERNEL_TARGET and ROTARY_KERNEL_INLINE first"
#endif

// ---- per-head RMSNorm ----------------------------------------------------------------------------

// v, unknown to the optimizer (fp.hpp's opaque_register for a vector, and as free): each rounding
// of the norm stays where it is written. Without it -Ofast (GCC and Clang) turned (x * factor) *
// weight into x * (factor * weight), and the kernels' bits changed with the flags. A copy of its
// own because it carries the kernel's target: opaque_register has none, and a ymm or zmm operand
// there breaks the build wherever it is not inlined.
template <class V>
ROTARY_KERNEL_INLINE V opaque_lanes(V v) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(v));
#elif defined(__aarch64__)
  __asm__("" : "+w"(v));
#else
  volatile V copy = v;
  v = copy;
#endif
  return v;
}

// Per-head RMSNorm rows with lane ops S, scalar::norm_rows' bits: the accumulators of
// kNormAccumulators in 16 / L vectors (lane l of vector v is accumulator v * L + l, so each sees the
// same elements in the same order as the scalar kernel's), reduced in its order (whole vectors, then
// S's reduce), the factor by the shared norm_factor, then (x * factor) * weight per lane, rounded
// by S's store. CS: the lane ops of C vectors (loads, set1, add, reduce).
template <class S>
using NormLanes = std::conditional_t<std::is_same_v<typename S::C, double>, F64, F32>;

template <class S>
ROTARY_KERNEL_INLINE typename S::C reduce_vectors(typename S::V* acc) noexcept {
  using CS = NormLanes<S>;
  constexpr int kVectors = kNormAccumulators / S::L;
  for (int m = kVectors / 2; m >= 1; m /= 2)
    for (int v = 0; v < m; ++v) acc[v] = opaque_lanes(CS::add(acc[v], acc[v + m]));
  return CS::reduce(acc[0]);
}

// (x * factor) * weight of elements [j, n), L at a time, the rest by the scalar formula.
template <class S>
ROTARY_KERNEL_INLINE void scale_row(const typename S::T* x, typename S::T* y, const typename S::C* w,
                                    std::int64_t j, std::int64_t n, typename S::C f) noexcept {
  using C = typename S::C;
  using V = typename S::V;
  using CS = NormLanes<S>;
  const V fv = CS::set1(f);
  for (; j + S::L <= n; j += S::L) {
    V v = opaque_lanes(S::mul(S::load(x + j), fv));
    if (w != nullptr) v = S::mul(v, CS::load(w + j));
    S::store(y + j, v);
  }
  if (j < n) leave_kernel();  // the scalar tail's conversions may be out of line (cache_row_impl says why)
  for (; j < n; ++j) {
    C v = opaque_register(to_compute(x[j]) * f);
    if (w != nullptr) v = v * w[j];
    y[j] = from_compute<typename S::T>(v);
  }
}

// The factors of four rows at once: norm_factor's steps (widen to double, * inv_n, + eps, sqrt,
// 1 / that, round to C) on four lanes, each step IEEE-exact as the scalar one is, so the same bits;
// every step through opaque_lanes (as strict_* go through opaque): no flag reassociates or
// contracts them. One vsqrtpd and one vdivpd instead of four sqrtsd and four divsd, whose
// throughput bounded the factor pass (docs/benchmarks.md, "Measurements behind kernel choices").
#if defined(__x86_64__) || defined(__i386__)
template <class C>
ROTARY_KERNEL_INLINE void norm_factors4(const C* sums, double inv_n, double eps, C* f) noexcept {
  __m256d d;
  if constexpr (std::is_same_v<C, float>)
    d = _mm256_cvtps_pd(_mm_loadu_ps(sums));
  else
    d = _mm256_loadu_pd(sums);
  d = opaque_lanes(_mm256_mul_pd(opaque_lanes(d), _mm256_set1_pd(inv_n)));
  d = opaque_lanes(_mm256_add_pd(d, _mm256_set1_pd(eps)));
  d = opaque_lanes(_mm256_sqrt_pd(d));
  d = opaque_lanes(_mm256_div_pd(_mm256_set1_pd(1.0), d));
  if constexpr (std::is_same_v<C, float>)
    _mm_storeu_ps(f, _mm256_cvtpd_ps(d));
  else
    _mm256_storeu_pd(f, d);
}
#elif defined(__aarch64__)
template <class C>
ROTARY_KERNEL_INLINE void norm_factors4(const C* sums, double inv_n, double eps, C* f) noexcept {
  for (int h = 0; h < 4; h += 2) {
    float64x2_t d;
    if constexpr (std::is_same_v<C, float>)
      d = vcvt_f64_f32(vld1_f32(sums + h));
    else
      d = vld1q_f64(sums + h);
    d = opaque_lanes(vmulq_f64(opaque_lanes(d), vdupq_n_f64(inv_n)));
    d = opaque_lanes(vaddq_f64(d, vdupq_n_f64(eps)));
    d = opaque_lanes(vsqrtq_f64(d));
    d = opaque_lanes(vdivq_f64(vdupq_n_f64(1.0), d));
    if constexpr (std::is_same_v<C, float>)
      vst1_f32(f + h, vcvt_f32_f64(d));
    else
      vst1q_f64(f + h, d);
  }
}
#else
template <class C>
ROTARY_KERNEL_INLINE void norm_factors4(const C* sums, double inv_n, double eps, C* f) noexcept {
  for (int g = 0; g < 4; ++g) f[g] = norm_factor(sums[g], inv_n, eps);
}
#endif

// The factors of B rows of exactly K vectors each (K * L a multiple of 16) from r0 on: B independent
// chains of fma and reduction that overlap, then the B factors (four at once where B is 4).
template <class S, int K, int B>
ROTARY_KERNEL_INLINE void norm_batch_factors(const NormArgs<typename S::T>& a, std::int64_t r0,
                                             typename S::C* f) noexcept {
  using C = typename S::C;
  using V = typename S::V;
  using CS = NormLanes<S>;
  constexpr int kVectors = kNormAccumulators / S::L;
  C sums[std::size_t{B}];
#pragma GCC unroll 4
  for (int g = 0; g < B; ++g) {
    const typename S::T* x = a.in + (r0 + g) * a.in_stride;
    V acc[std::size_t{kVectors}];
    for (int v = 0; v < kVectors; ++v) acc[v] = CS::set1(C(0));
    if constexpr (S::packed_pairs) {
      // 32 stored values a load, widened in element order (vectors k and k + 1): the same sums.
#pragma GCC unroll 8
      for (int k = 0; k < K; k += 2) {
        V lo;
        V hi;
        S::widen_ordered(S::load_raw(x + std::int64_t{k} * S::L), lo, hi);
        acc[k % kVectors] = S::fmadd(lo, lo, acc[k % kVectors]);
        acc[(k + 1) % kVectors] = S::fmadd(hi, hi, acc[(k + 1) % kVectors]);
      }
    } else {
#pragma GCC unroll 16
      for (int k = 0; k < K; ++k) {
        const V xv = S::load(x + std::int64_t{k} * S::L);
        acc[k % kVectors] = S::fmadd(xv, xv, acc[k % kVectors]);
      }
    }
    sums[g] = reduce_vectors<S>(acc);
  }
  if constexpr (B == 4) {
    norm_factors4(sums, a.inv_n, a.eps, f);
  } else {
    for (int g = 0; g < B; ++g) f[g] = norm_factor(sums[g], a.inv_n, a.eps);
  }
}

// B rows from r0 on read again (from L1) and scaled by their factors f.
template <class S, int K, int B, bool kWeighted>
ROTARY_KERNEL_INLINE void norm_batch_scale(const NormArgs<typename S::T>& a, std::int64_t r0,
                                           const typename S::C* w, const typename S::C* f) noexcept {
  using V = typename S::V;
  using CS = NormLanes<S>;
#pragma GCC unroll 4
  for (int g = 0; g < B; ++g) {
    const typename S::T* x = a.in + (r0 + g) * a.in_stride;
    typename S::T* y = a.out + (r0 + g) * a.out_stride;
    const V fv = CS::set1(f[g]);
    if constexpr (S::packed_pairs) {
      // the even- and odd-indexed values of 32 (a shift and a mask), scaled, rounded back in pairs;
      // w: the weights de-interleaved the same way
#pragma GCC unroll 8
      for (int k = 0; k < K; k += 2) {
        const auto u = S::load_raw(x + std::int64_t{k} * S::L);
        V ev = opaque_lanes(S::mul(S::even(u), fv));
        V od = opaque_lanes(S::mul(S::odd(u), fv));
        if constexpr (kWeighted) {
          ev = S::mul(ev, CS::load(w + std::int64_t{k} * S::L));
          od = S::mul(od, CS::load(w + std::int64_t{k + 1} * S::L));
        }
        S::store2(y + std::int64_t{k} * S::L, ev, od);
      }
    } else {
#pragma GCC unroll 16
      for (int k = 0; k < K; ++k) {
        V v = opaque_lanes(S::mul(S::load(x + std::int64_t{k} * S::L), fv));
        if constexpr (kWeighted) v = S::mul(v, CS::load(w + std::int64_t{k} * S::L));
        S::store(y + std::int64_t{k} * S::L, v);
      }
    }
  }
}

// Rows [0, a.rows) of K vectors: in blocks, the factors of all of a block's rows first (four rows'
// chains of K / (16 / L) dependent fmas, the reduction, a double sqrt and division at a time, every
// chain independent of the scaling), then the scaling of those rows; the last rows % 4 one by one.
// Interleaving the two (a batch's factors two batches before its scaling) kept the core waiting on
// those chains; keeping a row in registers until its factor is known is slower still: its
// multiplies wait for the chain and fill the scheduler (docs/benchmarks.md). Rows are in place or
// apart (NormArgs), so reading later rows before writing these changes nothing.
template <class S, int K, bool kWeighted>
ROTARY_KERNEL_INLINE void norm_rows_batches(const NormArgs<typename S::T>& a) noexcept {
  using C = typename S::C;
  constexpr int kBatch = 4;
  constexpr bool kSplit = S::packed_pairs && kWeighted;
  // Packed lanes scale the even- and odd-indexed values of 32 apart: their weights in that order,
  // per 32 the 16 even-indexed, then the 16 odd-indexed.
  alignas(64) C split[kSplit ? std::size_t{K} * S::L : 1];
  const C* w = a.weight;
  if constexpr (kSplit) {
    static_assert(K % 2 == 0, "whole packed vectors");
    for (int k = 0; k < K; k += 2) {
      typename S::V ev;
      typename S::V od;
      S::load2(a.weight + std::int64_t{k} * S::L, 2 * S::L, ev, od);
      NormLanes<S>::store(split + std::int64_t{k} * S::L, ev);
      NormLanes<S>::store(split + std::int64_t{k + 1} * S::L, od);
    }
    w = split;
  }
  // Blocks of up to kBlockRows rows (16 KiB at most, so the second pass reads them from L1): the
  // factors of every row of the block, then the scaling of every row.
  constexpr std::int64_t kRowBytes =
      std::int64_t{K} * S::L * static_cast<std::int64_t>(sizeof(typename S::T));
  constexpr std::int64_t kFit = (std::int64_t{16384} / kRowBytes) / kBatch * kBatch;
  constexpr std::int64_t kBlockRows = kFit < kBatch ? kBatch : (kFit > 32 ? 32 : kFit);
  const std::int64_t whole = a.rows - a.rows % kBatch;
  C f[std::size_t{kBlockRows}];
  for (std::int64_t r0 = 0; r0 < whole; r0 += kBlockRows) {
    const std::int64_t n = whole - r0 < kBlockRows ? whole - r0 : kBlockRows;
    for (std::int64_t r = 0; r < n; r += kBatch) norm_batch_factors<S, K, kBatch>(a, r0 + r, f + r);
    for (std::int64_t r = 0; r < n; r += kBatch)
      norm_batch_scale<S, K, kBatch, kWeighted>(a, r0 + r, w, f + r);
  }
  std::int64_t r = whole;
  for (; r < a.rows; ++r) {
    C one[1];
    norm_batch_factors<S, K, 1>(a, r, one);
    norm_batch_scale<S, K, 1, kWeighted>(a, r, w, one);
  }
}

template <class S, int K>
ROTARY_KERNEL_INLINE void norm_rows_of(const NormArgs<typename S::T>& a) noexcept {
  if (a.weight != nullptr)
    norm_rows_batches<S, K, true>(a);
  else
    norm_rows_batches<S, K, false>(a);
}

// Any row: the sum over whole groups of 16, a scalar tail into the stored accumulators, then the
// scaling pass reads the row again.
template <class S>
ROTARY_KERNEL_INLINE void norm_row_two_pass(const typename S::T* x, typename S::T* y,
                                            const NormArgs<typename S::T>& a) noexcept {
  using C = typename S::C;
  using V = typename S::V;
  using CS = NormLanes<S>;
  constexpr int kVectors = kNormAccumulators / S::L;
  V acc[std::size_t{kVectors}];
  for (int v = 0; v < kVectors; ++v) acc[v] = CS::set1(C(0));
  std::int64_t i = 0;
  for (; i + kNormAccumulators <= a.n; i += kNormAccumulators)
    for (int v = 0; v < kVectors; ++v) {
      const V xv = S::load(x + i + v * S::L);
      acc[v] = S::fmadd(xv, xv, acc[v]);
    }
  C sums[kNormAccumulators];
  for (int v = 0; v < kVectors; ++v) CS::store(sums + v * S::L, acc[v]);
  if (i < a.n) leave_kernel();  // (as in scale_row)
  for (; i < a.n; ++i) {
    const C xi = to_compute(x[i]);
    sums[i % kNormAccumulators] = fused_multiply_add(xi, xi, sums[i % kNormAccumulators]);
  }
  scale_row<S>(x, y, a.weight, 0, a.n, norm_factor(reduce_accumulators(sums), a.inv_n, a.eps));
}

// Rows of the common head_dims (64, 128, 256 values: 16 vectors at most) take the batched form.
template <class S>
ROTARY_KERNEL_TARGET void norm_rows_impl(const NormArgs<typename S::T>& a) noexcept {
  static_assert(kNormAccumulators % S::L == 0, "16 accumulators in whole vectors");
  constexpr int k64 = 64 / S::L;
  constexpr int k128 = 128 / S::L;
  constexpr int k256 = 256 / S::L;
  if (a.n == 64) {
    norm_rows_of<S, k64>(a);
  } else if (a.n == 128) {
    norm_rows_of<S, k128>(a);
  } else if (a.n == 256 && k256 <= 16) {
    norm_rows_of<S, (k256 <= 16 ? k256 : 1)>(a);
  } else {
    for (std::int64_t r = 0; r < a.rows; ++r) norm_row_two_pass<S>(a.in + r * a.in_stride, a.out + r * a.out_stride, a);
  }
}

template <class T>
void norm_rows(const NormArgs<T>& a) noexcept {
  static_assert(is_storage_type_v<T>, "f32, f64, f16 or bf16");
  norm_rows_impl<LanesOf<T>>(a);
  leave_kernel();
}
