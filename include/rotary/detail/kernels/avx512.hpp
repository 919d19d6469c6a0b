// AVX-512 (F+VL+BW+DQ) kernels: f32, f16 and bf16 in 16 lanes, f64 in 8. Bit-identical to
// kernels/scalar.hpp.
//
// This file holds the lane operations only: the kernels (math, register-resident and streamed
// cos/sin, blocking, tails, pass-through) are simd_body.hpp's, instantiated here twice: for the
// avx512 target, and (namespace bf16_hw) for the avx512 set plus avx512bf16.
// Tails: the last vector of every stream (x, y, cos, sin) uses masked loads/stores, so nothing
// outside the rows or the cache row is read or written. Pass-through coordinates are copied inline.
// f16/bf16 storage (F16, BF16, BF16Hw): 16 stored values per vector, widened exactly to f32 on load
// (vcvtph2ps; bf16: zero-extend and shift left 16), the f32 math unchanged, and each f32 result
// rounded once on store by convert.hpp's rules: f16 vcvtps2ph with round-to-nearest-even; bf16 either
// vcvtneps2bf16 (AVX512_BF16, namespace bf16_hw) or the same rounding in integer ops. 16-bit tails
// use the AVX512BW masked forms; pass-through bits are moved, not converted.
// rotate_tokens<bf16> picks the BF16Hw instance per call at run time where the CPU has AVX512_BF16.
#ifndef ROTARY_DETAIL_KERNELS_AVX512_HPP
#define ROTARY_DETAIL_KERNELS_AVX512_HPP

#include "../guard.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../convert.hpp"
#include "../cpu.hpp"
#include "entries.hpp"
#include "kernel_args.hpp"
#include "scalar.hpp"

#if ROTARY_X86_KERNELS
#include <immintrin.h>

#define ROTARY_AVX512_INLINE ROTARY_ALWAYS_INLINE ROTARY_TARGET_AVX512

namespace rotary::detail::avx512 {

// Lane operations per element type. Masks: `mask(n)` selects the first n lanes of a data vector
// (0 < n <= L), `half_mask(n)` the first n of the L/2 cos or sin values duplicated into one vector.
struct F32 {
  using T = float;  // storage
  using C = float;  // cos/sin and arithmetic
  using V = __m512;
  using Mask = __mmask16;
  using HalfMask = __mmask8;
  static constexpr int L = 16;
  static constexpr Mask all = 0xFFFF;
  static constexpr bool packed_pairs = false;
  static constexpr bool kMasked = true;
  static constexpr bool kInterleavedPairs = false;  // interleaved rows: duplicated cos/sin, fmaddsub  // see BF16

  static ROTARY_AVX512_INLINE Mask mask(int n) noexcept { return static_cast<Mask>((1u << n) - 1u); }
  static ROTARY_AVX512_INLINE HalfMask half_mask(int n) noexcept {
    return static_cast<HalfMask>((1u << n) - 1u);
  }
  static ROTARY_AVX512_INLINE V load(const T* p) noexcept { return _mm512_loadu_ps(p); }
  static ROTARY_AVX512_INLINE V set1(C v) noexcept { return _mm512_set1_ps(v); }
  static ROTARY_AVX512_INLINE V add(V a, V b) noexcept { return _mm512_add_ps(a, b); }
  // The lanes' sum by halving: lane i + lane i + 8, then + 4, + 2, + 1 (simd_norm.hpp's order).
  // Masked extracts for both halves: g++ 12's unmasked forms trip -Wmaybe-uninitialized.
  static ROTARY_AVX512_INLINE C reduce(V v) noexcept {
    const __m256 h8 = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xff, v, 0), _mm512_maskz_extractf32x8_ps(0xff, v, 1));
    const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
  }
  static ROTARY_AVX512_INLINE V load(const T* p, Mask m) noexcept { return _mm512_maskz_loadu_ps(m, p); }
  static ROTARY_AVX512_INLINE void store(T* p, V v) noexcept { _mm512_storeu_ps(p, v); }
  // Non-temporal (simd_body.hpp's Streamed): p aligned to 64 bytes.
  static ROTARY_AVX512_INLINE void stream(T* p, V v) noexcept { _mm512_stream_ps(p, v); }
  static ROTARY_AVX512_INLINE void store(T* p, Mask m, V v) noexcept { _mm512_mask_storeu_ps(p, m, v); }
  // [p0, p0, p1, p1, ..., p7, p7]. The all-lanes maskz forms here and in swap_pairs compile to the
  // plain instructions; g++ 12's unmasked forms trip -Wmaybe-uninitialized (_mm512_undefined_ps).
  static ROTARY_AVX512_INLINE V dup(__m256 h) noexcept {
    const __m512i idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_maskz_permutexvar_ps(all, idx, _mm512_castps256_ps512(h));
  }
  static ROTARY_AVX512_INLINE V load_dup(const T* p) noexcept { return dup(_mm256_loadu_ps(p)); }
  static ROTARY_AVX512_INLINE V load_dup(const T* p, HalfMask m) noexcept {
    return dup(_mm256_maskz_loadu_ps(m, p));
  }
  // Sign masks from integer bit patterns: -fno-signed-zeros may fold a -0.0f constant to +0.0f.
  static ROTARY_AVX512_INLINE V sign(bool negative) noexcept {
    return _mm512_castsi512_ps(_mm512_set1_epi32(negative ? INT32_MIN : 0));
  }
  static ROTARY_AVX512_INLINE V flip(V v, V sign_bits) noexcept { return _mm512_xor_ps(v, sign_bits); }
  static ROTARY_AVX512_INLINE V mul(V a, V b) noexcept { return _mm512_mul_ps(a, b); }
  static ROTARY_AVX512_INLINE V fmadd(V a, V b, V c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  static ROTARY_AVX512_INLINE V fmsub(V a, V b, V c) noexcept { return _mm512_fmsub_ps(a, b, c); }
  static ROTARY_AVX512_INLINE V fmaddsub(V a, V b, V c) noexcept { return _mm512_fmaddsub_ps(a, b, c); }
  static ROTARY_AVX512_INLINE V swap_pairs(V v) noexcept { return _mm512_maskz_permute_ps(all, v, 0xB1); }
};

struct F64 {
  using T = double;
  using C = double;
  using V = __m512d;
  using Mask = __mmask8;
  using HalfMask = __mmask8;
  static constexpr int L = 8;
  static constexpr Mask all = 0xFF;
  static constexpr bool packed_pairs = false;
  static constexpr bool kMasked = true;
  static constexpr bool kInterleavedPairs = false;  // interleaved rows: duplicated cos/sin, fmaddsub

  static ROTARY_AVX512_INLINE Mask mask(int n) noexcept { return static_cast<Mask>((1u << n) - 1u); }
  static ROTARY_AVX512_INLINE HalfMask half_mask(int n) noexcept {
    return static_cast<HalfMask>((1u << n) - 1u);
  }
  static ROTARY_AVX512_INLINE V load(const T* p) noexcept { return _mm512_loadu_pd(p); }
  static ROTARY_AVX512_INLINE V set1(C v) noexcept { return _mm512_set1_pd(v); }
  static ROTARY_AVX512_INLINE V add(V a, V b) noexcept { return _mm512_add_pd(a, b); }
  static ROTARY_AVX512_INLINE C reduce(V v) noexcept {  // lane i + lane i + 4, then + 2, + 1
    const __m256d h4 = _mm256_add_pd(_mm512_maskz_extractf64x4_pd(0xf, v, 0), _mm512_maskz_extractf64x4_pd(0xf, v, 1));
    const __m128d h2 = _mm_add_pd(_mm256_castpd256_pd128(h4), _mm256_extractf128_pd(h4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h2, _mm_unpackhi_pd(h2, h2)));
  }
  static ROTARY_AVX512_INLINE V load(const T* p, Mask m) noexcept { return _mm512_maskz_loadu_pd(m, p); }
  static ROTARY_AVX512_INLINE void store(T* p, V v) noexcept { _mm512_storeu_pd(p, v); }
  static ROTARY_AVX512_INLINE void stream(T* p, V v) noexcept { _mm512_stream_pd(p, v); }  // p aligned to 64
  static ROTARY_AVX512_INLINE void store(T* p, Mask m, V v) noexcept { _mm512_mask_storeu_pd(p, m, v); }
  static ROTARY_AVX512_INLINE V dup(__m256d h) noexcept {
    const __m512i idx = _mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3);
    return _mm512_maskz_permutexvar_pd(all, idx, _mm512_castpd256_pd512(h));
  }
  static ROTARY_AVX512_INLINE V load_dup(const T* p) noexcept { return dup(_mm256_loadu_pd(p)); }
  static ROTARY_AVX512_INLINE V load_dup(const T* p, HalfMask m) noexcept {
    return dup(_mm256_maskz_loadu_pd(m, p));
  }
  static ROTARY_AVX512_INLINE V sign(bool negative) noexcept {
    return _mm512_castsi512_pd(_mm512_set1_epi64(negative ? INT64_MIN : 0));
  }
  static ROTARY_AVX512_INLINE V flip(V v, V sign_bits) noexcept { return _mm512_xor_pd(v, sign_bits); }
  static ROTARY_AVX512_INLINE V mul(V a, V b) noexcept { return _mm512_mul_pd(a, b); }
  static ROTARY_AVX512_INLINE V fmadd(V a, V b, V c) noexcept { return _mm512_fmadd_pd(a, b, c); }
  static ROTARY_AVX512_INLINE V fmsub(V a, V b, V c) noexcept { return _mm512_fmsub_pd(a, b, c); }
  static ROTARY_AVX512_INLINE V fmaddsub(V a, V b, V c) noexcept { return _mm512_fmaddsub_pd(a, b, c); }
  static ROTARY_AVX512_INLINE V swap_pairs(V v) noexcept { return _mm512_maskz_permute_pd(all, v, 0x55); }
};

// ---- f16 and bf16 storage -----------------------------------------------------------------------

// Storage <-> f32 for 16 values (a ymm of 16-bit elements <-> a zmm of f32). Conversions to storage
// follow convert.hpp bit for bit. The maskz forms with all lanes compile to the plain instructions
// and keep g++ 12's -Wmaybe-uninitialized quiet (see F32::dup).
struct F16Convert {
  // exact; a signalling NaN comes out quiet, as f16_bits_to_f32 does
  static ROTARY_AVX512_INLINE __m512 widen(__m256i h) noexcept { return _mm512_maskz_cvtph_ps(F32::all, h); }
  // IEEE round to nearest even (imm, not MXCSR), subnormals kept, overflow to inf, NaN quiet with
  // sign and top payload bits: f32_to_f16_bits
  static ROTARY_AVX512_INLINE __m256i narrow(__m512 v) noexcept {
    return _mm512_maskz_cvtps_ph(F32::all, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
};

struct BF16Convert {
  // exact: the bits are the top half of the f32
  static ROTARY_AVX512_INLINE __m512 widen(__m256i h) noexcept {
    return _mm512_castsi512_ps(
        _mm512_maskz_slli_epi32(F32::all, _mm512_maskz_cvtepu16_epi32(F32::all, h), 16));
  }
  // f32_to_bf16_bits in integer ops (what vcvtneps2bf16 computes):
  //   f32 subnormals (exponent 0) flush to a signed zero;
  //   round to nearest even at bit 16: u + 0x7fff + lsb, then >> 16 (no carry out of bit 31 for a
  //   non-NaN u: the largest, -inf, is 0xff800000);
  //   NaN: the quiet bit (f32 bit 22) set and truncated, i.e. (u >> 16) | 0x40.
  static ROTARY_AVX512_INLINE __m256i narrow(__m512 v) noexcept {
    return _mm512_maskz_cvtepi32_epi16(F32::all, _mm512_maskz_srli_epi32(F32::all, round_bits(v), 16));
  }
  // The rounded bf16 of each lane in its top 16 bits (the low 16 bits are garbage).
  static ROTARY_AVX512_INLINE __m512i round_bits(__m512 v) noexcept {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 tiny = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    const __m512i x = _mm512_mask_and_epi32(u, tiny, u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(F32::all, x, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
    // NaN from the bits (|u| > inf as int32), not cmp_ps(v, v, UNORD): -ffinite-math-only folds that to false.
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  }
};

// F32's lanes and math over 16-bit storage: load(const T*) widens, store(T*, ...) rounds once;
// load(const float*) (inherited) reads the f32 cos/sin rows.
template <class Storage, class Convert>
struct Narrow : F32 {
  using T = Storage;
  using C = float;
  using F32::load;
  static ROTARY_AVX512_INLINE V load(const T* p) noexcept {
    return Convert::widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static ROTARY_AVX512_INLINE V load(const T* p, Mask m) noexcept {
    return Convert::widen(_mm256_maskz_loadu_epi16(m, p));
  }
  static ROTARY_AVX512_INLINE void store(T* p, V v) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Convert::narrow(v));
  }
  static ROTARY_AVX512_INLINE void store(T* p, Mask m, V v) noexcept {
    _mm256_mask_storeu_epi16(p, m, Convert::narrow(v));
  }
  // Non-temporal (simd_body.hpp's Streamed): p aligned to 32 bytes.
  static ROTARY_AVX512_INLINE void stream(T* p, V v) noexcept {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), Convert::narrow(v));
  }
};

using F16 = Narrow<f16, F16Convert>;
// bf16 with the integer rounding: any AVX-512 CPU.
// Packed pairs (packed_pairs = true): 32 stored values per zmm, element 2i in the low and 2i+1 in the
// high half of 32-bit lane i. Widening is then a shift or a mask (no shuffle): even(u) = u << 16,
// odd(u) = u & 0xffff0000, both exact; pack(lo, hi) rounds each f32 lane once and puts lo's bf16 back
// in the low, hi's in the high half. The pair policies of simd_body.hpp compute on these
// de-interleaved lanes (interleaved: even = x0, odd = x1 with cos/sin used as loaded, no duplication
// and no swap; half_split: cos/sin de-interleaved once per token).
struct BF16 : Narrow<bf16, BF16Convert> {
  // Hides Narrow's packed_pairs on purpose: the kernels read S::packed_pairs as a compile-time trait.
  // cppcheck-suppress duplInheritedMember
  static constexpr bool packed_pairs = true;
  static constexpr int PL = 32;  // stored values per packed vector
  using PMask = __mmask32;
  using Raw = __m512i;
  static ROTARY_AVX512_INLINE PMask pmask(int n) noexcept {
    return n >= 32 ? static_cast<PMask>(0xFFFFFFFFu) : static_cast<PMask>((1u << n) - 1u);
  }
  static ROTARY_AVX512_INLINE Raw load_raw(const T* p) noexcept { return _mm512_loadu_si512(p); }
  static ROTARY_AVX512_INLINE Raw load_raw(const T* p, PMask m) noexcept { return _mm512_maskz_loadu_epi16(m, p); }
  static ROTARY_AVX512_INLINE void store_raw(T* p, Raw r) noexcept { _mm512_storeu_si512(p, r); }
  static ROTARY_AVX512_INLINE void store_raw(T* p, PMask m, Raw r) noexcept { _mm512_mask_storeu_epi16(p, m, r); }
  static ROTARY_AVX512_INLINE V even(Raw u) noexcept { return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(F32::all, u, 16)); }
  static ROTARY_AVX512_INLINE V odd(Raw u) noexcept {
    return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // The 32 stored values of u in element order: [0, 16) to lo, [16, 32) to hi (one vpermw each,
  // value i's bits to the top half of 32-bit lane i % 16 and zeros below; exact). Where the order
  // matters (the norm's sums), at a shuffle per 16 values rather than a widening load and a shift.
  static ROTARY_AVX512_INLINE void widen_ordered(Raw u, V& lo, V& hi) noexcept {
    constexpr auto odd_words = static_cast<PMask>(0xAAAAAAAAu);
    const __m512i ilo = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0,
                                         4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i ihi = _mm512_add_epi16(ilo, _mm512_set1_epi16(16));
    lo = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(odd_words, ilo, u));
    hi = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(odd_words, ihi, u));
  }
  static ROTARY_AVX512_INLINE Raw pack(V lo, V hi) noexcept {
    return _mm512_or_si512(_mm512_maskz_srli_epi32(F32::all, BF16Convert::round_bits(lo), 16),
                           _mm512_and_si512(BF16Convert::round_bits(hi),
                                            _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // The pair policies' view (simd_body.hpp): 16 pairs of stored values <-> x0 = even, x1 = odd.
  static ROTARY_AVX512_INLINE void load2(const T* p, V& x0, V& x1) noexcept {
    const Raw u = load_raw(p);
    x0 = even(u);
    x1 = odd(u);
  }
  static ROTARY_AVX512_INLINE void load2(const T* p, PMask m, V& x0, V& x1) noexcept {
    const Raw u = load_raw(p, m);
    x0 = even(u);
    x1 = odd(u);
  }
  static ROTARY_AVX512_INLINE void store2(T* p, V y0, V y1) noexcept { store_raw(p, pack(y0, y1)); }
  static ROTARY_AVX512_INLINE void store2(T* p, PMask m, V y0, V y1) noexcept { store_raw(p, m, pack(y0, y1)); }
  // 32 f32 cos (or sin) values at p (the first n < 32 of them, nothing past them read) -> the even-
  // and the odd-indexed ones.
  static ROTARY_AVX512_INLINE void load2(const C* p, int n, V& ev, V& od) noexcept {
    const V lo = n >= 16 ? load(p) : load(p, mask(n > 0 ? n : 1));
    const V hi = n >= 32 ? load(p + 16) : (n > 16 ? load(p + 16, mask(n - 16)) : sign(false));
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    ev = _mm512_permutex2var_ps(lo, ie, hi);
    od = _mm512_permutex2var_ps(lo, io, hi);
  }
};

#if ROTARY_AVX512_BF16_KERNELS
#define ROTARY_AVX512_BF16_INLINE ROTARY_ALWAYS_INLINE ROTARY_TARGET_AVX512_BF16
// bf16 with the AVX512_BF16 conversion: vcvtneps2bf16 rounds to nearest even (ignoring MXCSR),
// flushes f32 subnormal inputs to a signed zero and makes NaN quiet, i.e. f32_to_bf16_bits exactly.
// Only kernels compiled with ROTARY_TARGET_AVX512_BF16 (namespace bf16_hw) can use it.
struct BF16Hw : BF16 {
  static ROTARY_AVX512_BF16_INLINE __m256i narrow(V v) noexcept {
    // __m256bh -> __m256i: a same-size vector reinterpretation (GNU vector types allow it)
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  }
  static ROTARY_AVX512_BF16_INLINE void store(T* p, V v) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v));
  }
  static ROTARY_AVX512_BF16_INLINE void store(T* p, Mask m, V v) noexcept {
    _mm256_mask_storeu_epi16(p, m, narrow(v));
  }
  static ROTARY_AVX512_BF16_INLINE void stream(T* p, V v) noexcept {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), narrow(v));
  }
  // vcvtne2ps2bf16 (the same rounding as vcvtneps2bf16) gives [lo's 16 | hi's 16]; one vpermw
  // interleaves them.
  static ROTARY_AVX512_BF16_INLINE Raw pack(V lo, V hi) noexcept {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                         6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_maskz_permutexvar_epi16(static_cast<PMask>(0xFFFFFFFFu), idx,
                                          reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  static ROTARY_AVX512_BF16_INLINE void store2(T* p, V y0, V y1) noexcept { store_raw(p, pack(y0, y1)); }
  static ROTARY_AVX512_BF16_INLINE void store2(T* p, PMask m, V y0, V y1) noexcept {
    store_raw(p, m, pack(y0, y1));
  }
};
#undef ROTARY_AVX512_BF16_INLINE
#endif

// n 16-bit elements, bit for bit: 32 per zmm, the tail with a BW mask.
ROTARY_AVX512_INLINE void copy_u16(const void* in, void* out, std::int64_t n) noexcept {
  const auto* src = static_cast<const std::uint16_t*>(in);
  auto* dst = static_cast<std::uint16_t*>(out);
  std::int64_t j = 0;
  for (; j + 32 <= n; j += 32) _mm512_storeu_si512(dst + j, _mm512_loadu_si512(src + j));
  if (j < n) {
    const auto m = static_cast<__mmask32>((1u << (n - j)) - 1u);
    _mm512_mask_storeu_epi16(dst + j, m, _mm512_maskz_loadu_epi16(m, src + j));
  }
}

// KV-cache codes of 16 f32 values (simd_cache_row.hpp's cache_row_impl; quantize.hpp's definitions):
// rounding by the conversions' embedded rounding (nearest even, not MXCSR), NaN and range tests on
// the bits.
struct CacheOps {
  // All-lanes maskz forms throughout: g++ 12's unmasked ones trip -Wmaybe-uninitialized. Except
  // without optimization (no __OPTIMIZE__), where g++'s intrinsics with an immediate rounding
  // argument are macros that pass our mask to a builtin's signed char / short parameter
  // (-Wsign-conversion in a -Werror consumer's Debug build); the unmasked forms pass -1 there, and
  // -Wmaybe-uninitialized does not run at -O0.
  static constexpr int L = 16;
  static constexpr __mmask16 all = 0xFFFF;
  static constexpr __mmask8 all8 = 0xFF;
  using Acc = __m512i;
  static ROTARY_AVX512_INLINE Acc zero() noexcept { return _mm512_setzero_si512(); }
  static ROTARY_AVX512_INLINE Acc max_abs(Acc acc, __m512 v) noexcept {
    return _mm512_maskz_max_epu32(all, acc, _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
  }
  static ROTARY_AVX512_INLINE std::uint32_t reduce_max(Acc acc) noexcept {
    const __m256i h8 = _mm256_max_epu32(_mm512_maskz_extracti64x4_epi64(0xF, acc, 0), _mm512_maskz_extracti64x4_epi64(0xF, acc, 1));
    __m128i h4 = _mm_max_epu32(_mm256_castsi256_si128(h8), _mm256_extracti128_si256(h8, 1));
    h4 = _mm_max_epu32(h4, _mm_shuffle_epi32(h4, 0x4E));
    h4 = _mm_max_epu32(h4, _mm_shuffle_epi32(h4, 0xB1));
    return static_cast<std::uint32_t>(_mm_cvtsi128_si32(h4));
  }
  // 16 codes of int8_code(y), y = x * inv rounded to f32: the conversion's own rounding (nearest
  // even, not MXCSR). No clamp: |x| <= absmax, so |y| <= 127 (1 + 2^-24) rounds to at most 127.
  static ROTARY_AVX512_INLINE __m512i int8_codes(__m512 y) noexcept {
#ifdef __OPTIMIZE__
    return _mm512_maskz_cvt_roundps_epi32(all, y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else  // see above
    return _mm512_cvt_roundps_epi32(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
  }
  static ROTARY_AVX512_INLINE void int8(__m512 y, std::int8_t* out) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_maskz_cvtepi32_epi8(all, int8_codes(y)));
  }
  // The codes of kPack vectors are narrowed together (cache_row_impl): two packs of dwords to words,
  // one of words to bytes, a dword permute and one 64-byte store, cheaper than each vector's own
  // narrowing (vpmovdb) on the cores measured (docs/fusion.md).
  static constexpr std::size_t kPack = 4;
  // The packs work within 128-bit lanes: dword 4i + k of theirs holds vector k's codes 4i..4i+3.
  static ROTARY_AVX512_INLINE void store_packed(void* out, __m512i b) noexcept {
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_storeu_si512(out, _mm512_maskz_permutexvar_epi32(all, order, b));
  }
  static ROTARY_AVX512_INLINE void int8_n(const __m512 (&y)[kPack], std::int8_t* out) noexcept {
    const __m512i w01 = _mm512_maskz_packs_epi32(~__mmask32{0}, int8_codes(y[0]), int8_codes(y[1]));
    const __m512i w23 = _mm512_maskz_packs_epi32(~__mmask32{0}, int8_codes(y[2]), int8_codes(y[3]));
    store_packed(out, _mm512_maskz_packs_epi16(~__mmask64{0}, w01, w23));  // (|codes| <= 127: no saturation)
  }
  static ROTARY_AVX512_INLINE void fp8_n(const __m512 (&y)[kPack], std::uint8_t* out) noexcept {
    const __m512i w01 = _mm512_maskz_packus_epi32(~__mmask32{0}, fp8_codes(y[0]), fp8_codes(y[1]));
    const __m512i w23 = _mm512_maskz_packus_epi32(~__mmask32{0}, fp8_codes(y[2]), fp8_codes(y[3]));
    store_packed(out, _mm512_maskz_packus_epi16(~__mmask64{0}, w01, w23));  // (codes 0..255: no saturation)
  }
  static ROTARY_AVX512_INLINE void fp8(__m512 y, std::uint8_t* out) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_maskz_cvtepi32_epi8(all, fp8_codes(y)));
  }
  // 16 codes of fp8_e4m3_code(y), one a dword.
  static ROTARY_AVX512_INLINE __m512i fp8_codes(__m512 y) noexcept {
    const __m512i u = _mm512_castps_si512(y);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    // normal results: drop 20 mantissa bits to even, rebias, at most 0x7e (448: the min clamps larger
    // values and infinities too, whose rebiased exponents stay positive: a + 0x80000 < 2^32)
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(all, a, 20), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7ffff)), lsb);
    __m512i r = _mm512_maskz_min_epi32(
        all, _mm512_sub_epi32(_mm512_maskz_srli_epi32(all, rounded, 20), _mm512_set1_epi32(120 << 3)),
        _mm512_set1_epi32(0x7e));
    // below 2^-6: a multiple of 2^-9, rounded to even: |y| + 2^14 rounded to nearest even (embedded,
    // not MXCSR) lies in [2^14, 2^15), where the f32 spacing is 2^-9, so its bits are those of 2^14
    // plus the code (a subnormal |y|, or one flushed by DAZ, gives 0 either way); other lanes untouched
    const __mmask16 small = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x3c800000));
#ifdef __OPTIMIZE__
    const __m512 biased = _mm512_maskz_add_round_ps(small, _mm512_castsi512_ps(a), _mm512_set1_ps(16384.0f),
                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else  // see above; only the small lanes are kept
    const __m512 biased = _mm512_add_round_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(16384.0f),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
    r = _mm512_mask_sub_epi32(r, small, _mm512_castps_si512(biased), _mm512_set1_epi32(0x46800000));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7f));
    // r | (u >> 24 & 0x80): the sign, in one ternary-logic operation
    return _mm512_maskz_ternarylogic_epi32(all, r, _mm512_maskz_srli_epi32(all, u, 24),
                                           _mm512_set1_epi32(0x80), 0xF8);
  }
};

// Rows whose cos/sin fit in kMaxRegs cos + kMaxRegs sin vectors keep them in registers: 2*8 of the
// 32 zmm registers. f32: half_split rotary_dim <= 256, interleaved <= 128.
inline constexpr int kMaxRegs = 8;
// Half rows of at least this many bytes take the blocked load/store order, kVectorsPerBlock vectors at a time
// (simd_body.hpp, HalfSplit::block): a 512-byte f32 half (head_dim 256) in one block. Shorter
// halves keep the step order, which is the faster one for them.
inline constexpr std::int64_t kBlockHalfBytes = 512;
inline constexpr int kVectorsPerBlock = 8;
// 16-bit gapped rows of calls that exceed the caches (KernelArgs::prefetch): rotate_stream asks for
// the row this many rows ahead, since their conversions leave the out-of-order window too few rows
// to overlap misses in. Not f32 rows, which gain nothing from the hint and can lose.
inline constexpr int kPrefetchRows16 = 16;
// 16-bit rows that follow on, from kPrefetchContiguousBytes on (Ahead::contiguous): rotate_registers
// asks for the row kPrefetchRows16 on before each row, in instantiations of its own (power-of-two
// step counts), so that the decode kernel, which never asks, carries no hint code. They add a
// little to the compile time of a TU that instantiates the kernels.
inline constexpr bool kAheadInRegisters = true;
// 16-bit half-split rows are written a line at a time (simd_body.hpp, line_steps): the two 32-byte
// vectors of a half's line, then the two of the other half's, rather than half lines alternating
// between the halves, so that no line is left half written while another line's stores come
// between. bf16 takes its packed-pair steps of whole lines where they fit; f32 vectors are whole
// lines.
inline constexpr bool kLineOrder16 = true;

// Outputs past the caches are written with streaming stores (simd_body.hpp's rotate_streamed; the
// driver decides per call, stream_pays): a plain store reads its line before writing it, so an
// output that cannot stay in the caches anyway would cross the memory bus twice.
inline constexpr bool kStreamStores = true;
inline void store_fence() noexcept { _mm_sfence(); }

// After each kernel: vzeroupper (cpu.hpp's clear_upper_state says why).
inline void leave_kernel() noexcept { clear_upper_state(); }

}  // namespace rotary::detail::avx512

// ---- kernels ------------------------------------------------------------------------------------

#define ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED
#define ROTARY_KERNEL_TARGET ROTARY_TARGET_AVX512
#define ROTARY_KERNEL_INLINE ROTARY_ALWAYS_INLINE ROTARY_TARGET_AVX512
namespace rotary::detail::avx512 {
#include "simd_body.hpp"
#include "simd_norm.hpp"
#include "simd_cache_row.hpp"
}  // namespace rotary::detail::avx512
#undef ROTARY_KERNEL_TARGET
#undef ROTARY_KERNEL_INLINE

// The same body again for BF16Hw's lane ops, whose vcvtneps2bf16 needs the avx512bf16 target on
// every function that inlines them.
#if ROTARY_AVX512_BF16_KERNELS
#define ROTARY_KERNEL_TARGET ROTARY_TARGET_AVX512_BF16
#define ROTARY_KERNEL_INLINE ROTARY_ALWAYS_INLINE ROTARY_TARGET_AVX512_BF16
// (Its rotate_tokens<T> is never used: only rotate_tokens_impl<BF16Hw>.)
namespace rotary::detail::avx512::bf16_hw {
#include "simd_body.hpp"
#include "simd_norm.hpp"
#include "simd_cache_row.hpp"
}  // namespace rotary::detail::avx512::bf16_hw
#undef ROTARY_KERNEL_TARGET
#undef ROTARY_KERNEL_INLINE
#endif
#undef ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED

namespace rotary::detail::avx512 {

ROTARY_DETAIL_KERNEL_LINKAGE void rotate_tokens_bf16_integer(const KernelArgs<bf16>& a, std::int64_t t0,
                                                             std::int64_t t1) noexcept {
  rotate_tokens<bf16>(a, t0, t1);
}

#if ROTARY_AVX512_BF16_KERNELS
ROTARY_DETAIL_KERNEL_LINKAGE void rotate_tokens_bf16_hardware(const KernelArgs<bf16>& a, std::int64_t t0,
                                                              std::int64_t t1) noexcept {
  bf16_hw::rotate_tokens_impl<BF16Hw>(a, t0, t1);
  leave_kernel();
}
#endif

ROTARY_DETAIL_KERNEL_LINKAGE void rotate_tokens_bf16(const KernelArgs<bf16>& a, std::int64_t t0,
                                                     std::int64_t t1) noexcept {
#if ROTARY_AVX512_BF16_KERNELS
  if (cpu_features().avx512bf16) {
    rotate_tokens_bf16_hardware(a, t0, t1);
    return;
  }
#endif
  rotate_tokens_bf16_integer(a, t0, t1);
}

// The bf16 norm rows likewise: vcvtneps2bf16 where the CPU has it, else the integer rounding.
ROTARY_DETAIL_KERNEL_LINKAGE void norm_rows_bf16(const NormArgs<bf16>& a) noexcept {
#if ROTARY_AVX512_BF16_KERNELS
  if (cpu_features().avx512bf16) {
    bf16_hw::norm_rows_impl<BF16Hw>(a);
    leave_kernel();
    return;
  }
#endif
  norm_rows<bf16>(a);
}

}  // namespace rotary::detail::avx512

#undef ROTARY_AVX512_INLINE

#endif  // ROTARY_X86_KERNELS

#endif  // ROTARY_DETAIL_KERNELS_AVX512_HPP
