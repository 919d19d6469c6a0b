// AVX2 (+FMA, F16C) kernels: f32, f16 and bf16 in 8 lanes, f64 in 4. Bit-identical to
// kernels/scalar.hpp.
//
// This file holds the lane operations only; the kernels are simd_body.hpp's, with 16 ymm registers:
// a token's cos/sin stays in registers while it fits in kMaxRegs = 4 vectors per stream (8
// registers; f32: half_split rotary_dim <= 64, interleaved <= 32), no blocked order.
// Tails: vmaskmov loads/stores on every stream (x, y, cos, sin), so nothing outside the rows or the
// cache row is touched. A last vector that happens to be full is stored with a plain store
// (vmaskmov stores are slow on AMD cores).
// f16/bf16 storage (F16, BF16): 8 stored values per vector, widened exactly to f32 on load
// (vcvtph2ps; bf16: zero-extend and shift left 16), the f32 math unchanged, each result rounded once
// on store by convert.hpp's rules (f16: vcvtps2ph, round to nearest even; bf16: the same rounding in
// integer ops, as vcvtneps2bf16 does). AVX2 has no 16-bit masked load/store: a 16-bit tail moves its
// whole 32-bit pairs with vpmaskmovd and an odd last element with a 16-bit scalar access, so it
// stays inside the row too. Pass-through bits are moved, never converted.
#ifndef ROTARY_DETAIL_KERNELS_AVX2_HPP
#define ROTARY_DETAIL_KERNELS_AVX2_HPP

#include "../guard.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../convert.hpp"
#include "entries.hpp"
#include "kernel_args.hpp"
#include "scalar.hpp"

#if ROTARY_X86_KERNELS
#include <immintrin.h>

#define ROTARY_AVX2_INLINE ROTARY_ALWAYS_INLINE ROTARY_TARGET_AVX2

namespace rotary::detail::avx2 {

// Lane operations per element type. Masks: `mask(n)` selects the first n lanes of a data vector
// (0 < n <= L), `half_mask(n)` the first n of the L/2 cos or sin values duplicated into one vector.
struct F32 {
  using T = float;  // storage
  using C = float;  // cos/sin and arithmetic
  using V = __m256;
  using Mask = __m256i;
  using HalfMask = __m128i;
  static constexpr int L = 8;
  static constexpr bool kMasked = true;
  static constexpr bool kInterleavedPairs = false;  // interleaved rows: duplicated cos/sin, fmaddsub
  static constexpr bool packed_pairs = false;

  static ROTARY_AVX2_INLINE Mask mask(int n) noexcept {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static ROTARY_AVX2_INLINE HalfMask half_mask(int n) noexcept {
    return _mm_cmpgt_epi32(_mm_set1_epi32(n), _mm_setr_epi32(0, 1, 2, 3));
  }
  static ROTARY_AVX2_INLINE V load(const T* p) noexcept { return _mm256_loadu_ps(p); }
  static ROTARY_AVX2_INLINE V set1(C v) noexcept { return _mm256_set1_ps(v); }
  static ROTARY_AVX2_INLINE V add(V a, V b) noexcept { return _mm256_add_ps(a, b); }
  // The lanes' sum by halving: lane i + lane i + 4, then + 2, then + 1 (simd_norm.hpp's order).
  static ROTARY_AVX2_INLINE C reduce(V v) noexcept {
    const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
  }
  static ROTARY_AVX2_INLINE V load(const T* p, Mask m) noexcept { return _mm256_maskload_ps(p, m); }
  static ROTARY_AVX2_INLINE void store(T* p, V v) noexcept { _mm256_storeu_ps(p, v); }
  static ROTARY_AVX2_INLINE void store(T* p, Mask m, V v) noexcept { _mm256_maskstore_ps(p, m, v); }
  // [p0, p0, p1, p1, p2, p2, p3, p3]
  static ROTARY_AVX2_INLINE V dup(__m128 h) noexcept {
    const __m256i idx = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(h), idx);
  }
  static ROTARY_AVX2_INLINE V load_dup(const T* p) noexcept { return dup(_mm_loadu_ps(p)); }
  static ROTARY_AVX2_INLINE V load_dup(const T* p, HalfMask m) noexcept { return dup(_mm_maskload_ps(p, m)); }
  // Sign masks from integer bit patterns: -fno-signed-zeros may fold a -0.0f constant to +0.0f.
  static ROTARY_AVX2_INLINE V sign(bool negative) noexcept {
    return _mm256_castsi256_ps(_mm256_set1_epi32(negative ? INT32_MIN : 0));
  }
  static ROTARY_AVX2_INLINE V flip(V v, V sign_bits) noexcept { return _mm256_xor_ps(v, sign_bits); }
  static ROTARY_AVX2_INLINE V mul(V a, V b) noexcept { return _mm256_mul_ps(a, b); }
  static ROTARY_AVX2_INLINE V fmadd(V a, V b, V c) noexcept { return _mm256_fmadd_ps(a, b, c); }
  static ROTARY_AVX2_INLINE V fmsub(V a, V b, V c) noexcept { return _mm256_fmsub_ps(a, b, c); }
  static ROTARY_AVX2_INLINE V fmaddsub(V a, V b, V c) noexcept { return _mm256_fmaddsub_ps(a, b, c); }
  static ROTARY_AVX2_INLINE V swap_pairs(V v) noexcept { return _mm256_permute_ps(v, 0xB1); }
};

struct F64 {
  using T = double;
  using C = double;
  using V = __m256d;
  using Mask = __m256i;
  using HalfMask = __m128i;
  static constexpr int L = 4;
  static constexpr bool kMasked = true;
  static constexpr bool kInterleavedPairs = false;
  static constexpr bool packed_pairs = false;

  static ROTARY_AVX2_INLINE Mask mask(int n) noexcept {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static ROTARY_AVX2_INLINE HalfMask half_mask(int n) noexcept {
    return _mm_cmpgt_epi64(_mm_set1_epi64x(n), _mm_set_epi64x(1, 0));
  }
  static ROTARY_AVX2_INLINE V load(const T* p) noexcept { return _mm256_loadu_pd(p); }
  static ROTARY_AVX2_INLINE V set1(C v) noexcept { return _mm256_set1_pd(v); }
  static ROTARY_AVX2_INLINE V add(V a, V b) noexcept { return _mm256_add_pd(a, b); }
  static ROTARY_AVX2_INLINE C reduce(V v) noexcept {  // lane i + lane i + 2, then + 1
    const __m128d h2 = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h2, _mm_unpackhi_pd(h2, h2)));
  }
  static ROTARY_AVX2_INLINE V load(const T* p, Mask m) noexcept { return _mm256_maskload_pd(p, m); }
  static ROTARY_AVX2_INLINE void store(T* p, V v) noexcept { _mm256_storeu_pd(p, v); }
  static ROTARY_AVX2_INLINE void store(T* p, Mask m, V v) noexcept { _mm256_maskstore_pd(p, m, v); }
  // [p0, p0, p1, p1]
  static ROTARY_AVX2_INLINE V dup(__m128d h) noexcept {
    return _mm256_permute4x64_pd(_mm256_castpd128_pd256(h), 0x50);
  }
  static ROTARY_AVX2_INLINE V load_dup(const T* p) noexcept { return dup(_mm_loadu_pd(p)); }
  static ROTARY_AVX2_INLINE V load_dup(const T* p, HalfMask m) noexcept { return dup(_mm_maskload_pd(p, m)); }
  static ROTARY_AVX2_INLINE V sign(bool negative) noexcept {
    return _mm256_castsi256_pd(_mm256_set1_epi64x(negative ? INT64_MIN : 0));
  }
  static ROTARY_AVX2_INLINE V flip(V v, V sign_bits) noexcept { return _mm256_xor_pd(v, sign_bits); }
  static ROTARY_AVX2_INLINE V mul(V a, V b) noexcept { return _mm256_mul_pd(a, b); }
  static ROTARY_AVX2_INLINE V fmadd(V a, V b, V c) noexcept { return _mm256_fmadd_pd(a, b, c); }
  static ROTARY_AVX2_INLINE V fmsub(V a, V b, V c) noexcept { return _mm256_fmsub_pd(a, b, c); }
  static ROTARY_AVX2_INLINE V fmaddsub(V a, V b, V c) noexcept { return _mm256_fmaddsub_pd(a, b, c); }
  static ROTARY_AVX2_INLINE V swap_pairs(V v) noexcept { return _mm256_permute_pd(v, 0x5); }
};

// ---- f16 and bf16 storage -----------------------------------------------------------------------

// Storage <-> f32 for 8 values (an xmm of 16-bit elements <-> a ymm of f32). Conversions to storage
// follow convert.hpp bit for bit.
struct F16Convert {
  // exact; a signalling NaN comes out quiet, as f16_bits_to_f32 does
  static ROTARY_AVX2_INLINE __m256 widen(__m128i h) noexcept { return _mm256_cvtph_ps(h); }
  // IEEE round to nearest even (imm, not MXCSR), subnormals kept, overflow to inf, NaN quiet with
  // sign and top payload bits: f32_to_f16_bits
  static ROTARY_AVX2_INLINE __m128i narrow(__m256 v) noexcept {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
};

struct BF16Convert {
  // exact: the bits are the top half of the f32
  static ROTARY_AVX2_INLINE __m256 widen(__m128i h) noexcept {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  // f32_to_bf16_bits in integer ops (what vcvtneps2bf16 computes):
  //   f32 subnormals (exponent 0) flush to a signed zero;
  //   round to nearest even at bit 16: u + 0x7fff + lsb, then >> 16 (no carry out of bit 31 for a
  //   non-NaN u: the largest, -inf, is 0xff800000);
  //   NaN: the quiet bit (f32 bit 22) set and truncated, i.e. (u >> 16) | 0x40.
  // The results fit in 16 bits, so the unsigned-saturating pack is exact.
  static ROTARY_AVX2_INLINE __m128i narrow(__m256 v) noexcept {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i tiny =
        _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    const __m256i x = _mm256_andnot_si256(_mm256_and_si256(tiny, _mm256_set1_epi32(0x7fffffff)), u);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
    // NaN from the bits (|u| > inf as int32), not cmp_ps(v, v, UNORD): -ffinite-math-only folds that to false.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }
};

// The first n (0 <= n <= 8) lanes of a vector, for the f32 cos/sin streams and the 16-bit data.
struct Tail16 {
  __m256i lanes;  // f32 lanes [0, n): the cos/sin mask
  __m128i pairs;  // 32-bit lanes [0, n/2): the whole pairs of 16-bit elements (vpmaskmovd)
  __m128i odd;    // 16-bit lane n-1 (used when n is odd)
  __m128i pick;   // pshufb control moving 16-bit lane n-1 to lane 0 (used when n is odd)
  int n;
};

// F32's lanes and math over 16-bit storage: load(const T*) widens, store(T*, ...) rounds once;
// load(const float*) reads the f32 cos/sin rows.
template <class Storage, class Convert>
struct Narrow : F32 {
  using T = Storage;
  using C = float;
  using Mask = Tail16;

  static ROTARY_AVX2_INLINE Mask mask(int n) noexcept {
    const auto last = static_cast<short>(n - 1);
    return {F32::mask(n), _mm_cmpgt_epi32(_mm_set1_epi32(n / 2), _mm_setr_epi32(0, 1, 2, 3)),
            _mm_cmpeq_epi16(_mm_set1_epi16(last), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7)),
            _mm_set1_epi16(static_cast<short>(0x0100 + 0x0202 * last)), n};
  }
  static ROTARY_AVX2_INLINE V load(const float* p) noexcept { return _mm256_loadu_ps(p); }
  static ROTARY_AVX2_INLINE V load(const float* p, const Mask& m) noexcept {
    return _mm256_maskload_ps(p, m.lanes);
  }
  static ROTARY_AVX2_INLINE V load(const T* p) noexcept {
    return Convert::widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static ROTARY_AVX2_INLINE V load(const T* p, const Mask& m) noexcept {
    __m128i h = _mm_maskload_epi32(reinterpret_cast<const int*>(p), m.pairs);
    if (m.n & 1) {
      std::uint16_t e = 0;
      std::memcpy(&e, static_cast<const void*>(p + (m.n - 1)), sizeof e);
      h = _mm_blendv_epi8(h, _mm_set1_epi16(static_cast<short>(e)), m.odd);
    }
    return Convert::widen(h);
  }
  static ROTARY_AVX2_INLINE void store(T* p, V v) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Convert::narrow(v));
  }
  static ROTARY_AVX2_INLINE void store(T* p, const Mask& m, V v) noexcept {
    const __m128i h = Convert::narrow(v);
    _mm_maskstore_epi32(reinterpret_cast<int*>(p), m.pairs, h);
    if (m.n & 1) {
      const auto e = static_cast<std::uint16_t>(_mm_cvtsi128_si32(_mm_shuffle_epi8(h, m.pick)));
      std::memcpy(static_cast<void*>(p + (m.n - 1)), &e, sizeof e);
    }
  }
};

using F16 = Narrow<f16, F16Convert>;
using BF16 = Narrow<bf16, BF16Convert>;

// n 16-bit elements, bit for bit: 16 per ymm; the tail's whole pairs with vpmaskmovd, an odd last
// element with a 16-bit scalar copy.
ROTARY_AVX2_INLINE void copy_u16(const void* in, void* out, std::int64_t n) noexcept {
  const auto* src = static_cast<const std::uint16_t*>(in);
  auto* dst = static_cast<std::uint16_t*>(out);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j)));
  const auto rest = static_cast<int>(n - j);  // 0 .. 15
  if (rest >= 2) {
    const __m256i m = F32::mask(rest / 2);
    _mm256_maskstore_epi32(reinterpret_cast<int*>(dst + j), m,
                           _mm256_maskload_epi32(reinterpret_cast<const int*>(src + j), m));
  }
  if (rest & 1) std::memcpy(dst + (n - 1), src + (n - 1), sizeof(std::uint16_t));
}

// KV-cache codes of 8 f32 values (simd_cache_row.hpp's cache_row_impl; quantize.hpp's definitions):
// rounding by vroundpd/vroundps's immediate (nearest even, not MXCSR), NaN and range tests on the
// bits (|y| bits are non-negative int32, so the signed compares order them).
struct CacheOps {
  static constexpr int L = 8;
  using Acc = __m256i;
  static ROTARY_AVX2_INLINE Acc zero() noexcept { return _mm256_setzero_si256(); }
  static ROTARY_AVX2_INLINE Acc max_abs(Acc acc, __m256 v) noexcept {
    return _mm256_max_epu32(acc, _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff)));
  }
  static ROTARY_AVX2_INLINE std::uint32_t reduce_max(Acc acc) noexcept {
    __m128i h4 = _mm_max_epu32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    h4 = _mm_max_epu32(h4, _mm_shuffle_epi32(h4, 0x4E));
    h4 = _mm_max_epu32(h4, _mm_shuffle_epi32(h4, 0xB1));
    return static_cast<std::uint32_t>(_mm_cvtsi128_si32(h4));
  }
  // 8 codes of int8_code(y), y = x * inv rounded to f32: rounded to nearest even by vroundps's
  // immediate, then converted exactly; |y| rounds to at most 127, so the saturating packs keep it.
  static ROTARY_AVX2_INLINE void int8(__m256 y, std::int8_t* out) noexcept {
    const __m256i q = _mm256_cvttps_epi32(_mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packs_epi16(w, w));
  }
  // Each vector's codes narrowed on their own (avx512.hpp's kPack).
  static constexpr std::size_t kPack = 1;
  static ROTARY_AVX2_INLINE void int8_n(const __m256 (&y)[kPack], std::int8_t* out) noexcept {
    int8(y[0], out);
  }
  static ROTARY_AVX2_INLINE void fp8_n(const __m256 (&y)[kPack], std::uint8_t* out) noexcept {
    fp8(y[0], out);
  }
  // 8 codes of fp8_e4m3_code(y).
  static ROTARY_AVX2_INLINE void fp8(__m256 y, std::uint8_t* out) noexcept {
    const __m256i u = _mm256_castps_si256(y);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    // normal results: drop 20 mantissa bits to even, rebias, at most 0x7e (448: the min clamps larger
    // values and infinities too, whose rebiased exponents stay positive: a + 0x80000 < 2^32)
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7ffff)),
                                             _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1)));
    __m256i r = _mm256_min_epi32(_mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3)),
                                 _mm256_set1_epi32(0x7e));
    // below 2^-6: a multiple of 2^-9, rounded to even (|y| * 512 is exact; other lanes zeroed first)
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), a);
    const __m256 scaled = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(a, small)), _mm256_set1_ps(512.0f));
    const __m256i sub = _mm256_cvttps_epi32(_mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    r = _mm256_blendv_epi8(r, sub, small);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7f), _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000)));
    r = _mm256_or_si256(r, _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
  }
};

// Rows whose cos/sin fit in kMaxRegs cos + kMaxRegs sin vectors keep them in registers: 2*4 of the
// 16 ymm registers. No blocked order (kBlockHalfBytes 0).
inline constexpr int kMaxRegs = 4;
inline constexpr std::int64_t kBlockHalfBytes = 0;
inline constexpr int kVectorsPerBlock = 1;
// 16-bit gapped rows of calls that exceed the caches: rows asked for ahead as in avx512.hpp, for the
// same reason.
inline constexpr int kPrefetchRows16 = 16;
// Rows that follow on are not asked for ahead here: not measured on an AVX2-only CPU, and the
// instantiations would add to every TU's compile time.
inline constexpr bool kAheadInRegisters = false;
// 16-bit half-split rows keep the step order (avx512.hpp's kLineOrder16): the conversions bind
// these kernels, so the line order gains little from beyond L2, and from L2 it loses, since a
// whole-half block of 4 needs more than the 16 ymm registers.
inline constexpr bool kLineOrder16 = false;
// Plain stores only (avx512.hpp's kStreamStores): not measured on AVX2-only CPUs.
inline constexpr bool kStreamStores = false;
inline void store_fence() noexcept {}

// After each kernel: vzeroupper (cpu.hpp's clear_upper_state says why).
inline void leave_kernel() noexcept { clear_upper_state(); }

}  // namespace rotary::detail::avx2

#define ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED
#define ROTARY_KERNEL_TARGET ROTARY_TARGET_AVX2
#define ROTARY_KERNEL_INLINE ROTARY_AVX2_INLINE
namespace rotary::detail::avx2 {
#include "simd_body.hpp"
#include "simd_norm.hpp"
#include "simd_cache_row.hpp"
}  // namespace rotary::detail::avx2
#undef ROTARY_KERNEL_TARGET
#undef ROTARY_KERNEL_INLINE
#undef ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED

#undef ROTARY_AVX2_INLINE

#endif  // ROTARY_X86_KERNELS

#endif  // ROTARY_DETAIL_KERNELS_AVX2_HPP
