// NEON (AArch64 Advanced SIMD) kernels: f32, f16 and bf16 computed in 4 f32 lanes, f64 in 2.
// Bit-identical to kernels/scalar.hpp.
//
// Math, per pair (x0, x1) with cos c and sign-adjusted sin s (s negated once per token for the
// inverse, which is exact). Both pairings load the pairs of L consecutive j into two vectors
// x0 = [x0_j ..], x1 = [x1_j ..], so the arithmetic is one complex multiply:
//   p = x1*s (rounded)    y0 = vfmaq(-p, x0, c)    one rounding of -p + x0*c = fma(x0, c, -(x1*s))
//   q = x0*s (rounded)    y1 = vfmaq( q, x1, c)    one rounding of  q + x1*c = fma(x1, c, x0*s)
// FMLA adds the unrounded product to its accumulator, exactly like fma. -p is an exact negation
// (RNE is symmetric). Not vnegq(vfmsq(p, x0, c)): where x0*c == p it gives -0, fma gives +0.
//   half_split   x0 = row[j..], x1 = row[h+j..]: plain loads (vld1).
//   interleaved  row = [x0_j, x1_j, x0_j+1, ...]: vld2 deinterleaves into x0 and x1, vst2
//                reinterleaves y0 and y1; cos/sin are used as stored (no duplication).
// Storage types (conversions as in detail/convert.hpp, bit for bit):
//   f16   FCVTL / FCVTN (vcvt_f32_f16, vcvt_f16_f32). Base AArch64 AdvSIMD, no +fp16 needed. Exact
//         widening (subnormals kept; a signalling NaN is quieted with its payload kept) and IEEE
//         round-to-nearest-even narrowing with FPCR's default mode (RNE, FZ = DN = 0: what Linux and
//         every ABI start a thread with; the scalar fma depends on that mode as well).
//   bf16  integer ops: widening is `bits << 16` (vshll); narrowing emulates f32_to_bf16_bits (flush
//         f32 subnormals to a signed zero, add 0x7fff + lsb, NaN -> (u >> 16) | 0x40).
// This file holds the lane operations only; the kernels are simd_body.hpp's (half_split: HalfSplit,
// interleaved: InterleavedPairs over vld2/vst2): the cos/sin of the full vectors (h / L of them,
// h = rotary_dim/2) stay in registers for up to kMaxRegs vectors per stream.
// Tails: NEON has no masked loads, so the last h % L pairs run the scalar formula (scalar::
// rotate_pair with the scalar conversions: the same bits by construction). Nothing outside the
// rows or the cache row is read or written. Pass-through coordinates are copied inline.
#ifndef ROTARY_DETAIL_KERNELS_NEON_HPP
#define ROTARY_DETAIL_KERNELS_NEON_HPP

#include "../guard.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../convert.hpp"
#include "entries.hpp"
#include "kernel_args.hpp"
#include "scalar.hpp"

#if ROTARY_NEON_KERNELS
#include <arm_neon.h>

namespace rotary::detail::neon {

// ---- lane operations --------------------------------------------------------------------------
// Arithmetic per compute type (V), then storage per element type: load/store of L values
// (load2/store2: L interleaved pairs, split into / merged from two vectors).

struct MathF32 {
  using C = float;
  using V = float32x4_t;
  using Bits = uint32x4_t;
  static constexpr int L = 4;
  static constexpr bool kMasked = false;           // tails by the scalar formula
  using Mask = int;                                // (no masked loads: a placeholder type)
  static constexpr bool kInterleavedPairs = true;  // interleaved rows: vld2/vst2
  static constexpr bool packed_pairs = false;
  static ROTARY_ALWAYS_INLINE V load(const C* p) noexcept { return vld1q_f32(p); }
  static ROTARY_ALWAYS_INLINE V set1(C v) noexcept { return vdupq_n_f32(v); }
  static ROTARY_ALWAYS_INLINE V add(V a, V b) noexcept { return vaddq_f32(a, b); }
  // The lanes' sum by halving: lane i + lane i + 2, then + 1 (simd_norm.hpp's order).
  static ROTARY_ALWAYS_INLINE C reduce(V v) noexcept {
    const float32x2_t h2 = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(h2, 0) + vget_lane_f32(h2, 1);
  }
  static ROTARY_ALWAYS_INLINE Bits sign(bool negative) noexcept { return vdupq_n_u32(negative ? 0x80000000u : 0u); }
  static ROTARY_ALWAYS_INLINE V flip(V v, Bits sign_bits) noexcept {
    return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(v), sign_bits));
  }
  static ROTARY_ALWAYS_INLINE V mul(V a, V b) noexcept { return vmulq_f32(a, b); }
  // FMLA adds the unrounded product to its accumulator; -c is an exact negation.
  static ROTARY_ALWAYS_INLINE V fmadd(V a, V b, V c) noexcept { return vfmaq_f32(c, a, b); }
  static ROTARY_ALWAYS_INLINE V fmsub(V a, V b, V c) noexcept { return vfmaq_f32(vnegq_f32(c), a, b); }
};

struct MathF64 {
  using C = double;
  using V = float64x2_t;
  using Bits = uint64x2_t;
  static constexpr int L = 2;
  static constexpr bool kMasked = false;
  using Mask = int;
  static constexpr bool kInterleavedPairs = true;
  static constexpr bool packed_pairs = false;
  static ROTARY_ALWAYS_INLINE V load(const C* p) noexcept { return vld1q_f64(p); }
  static ROTARY_ALWAYS_INLINE V set1(C v) noexcept { return vdupq_n_f64(v); }
  static ROTARY_ALWAYS_INLINE V add(V a, V b) noexcept { return vaddq_f64(a, b); }
  static ROTARY_ALWAYS_INLINE C reduce(V v) noexcept { return vgetq_lane_f64(v, 0) + vgetq_lane_f64(v, 1); }
  static ROTARY_ALWAYS_INLINE Bits sign(bool negative) noexcept {
    return vdupq_n_u64(negative ? 0x8000000000000000ull : 0ull);
  }
  static ROTARY_ALWAYS_INLINE V flip(V v, Bits sign_bits) noexcept {
    return vreinterpretq_f64_u64(veorq_u64(vreinterpretq_u64_f64(v), sign_bits));
  }
  static ROTARY_ALWAYS_INLINE V mul(V a, V b) noexcept { return vmulq_f64(a, b); }
  static ROTARY_ALWAYS_INLINE V fmadd(V a, V b, V c) noexcept { return vfmaq_f64(c, a, b); }
  static ROTARY_ALWAYS_INLINE V fmsub(V a, V b, V c) noexcept { return vfmaq_f64(vnegq_f64(c), a, b); }
};

struct F32 : MathF32 {
  using T = float;
  static ROTARY_ALWAYS_INLINE void store(T* p, V v) noexcept { vst1q_f32(p, v); }
  static ROTARY_ALWAYS_INLINE void load2(const T* p, V& x0, V& x1) noexcept {
    const float32x4x2_t x = vld2q_f32(p);
    x0 = x.val[0];
    x1 = x.val[1];
  }
  static ROTARY_ALWAYS_INLINE void store2(T* p, V y0, V y1) noexcept {
    float32x4x2_t y;
    y.val[0] = y0;
    y.val[1] = y1;
    vst2q_f32(p, y);
  }
};

struct F64 : MathF64 {
  using T = double;
  static ROTARY_ALWAYS_INLINE void store(T* p, V v) noexcept { vst1q_f64(p, v); }
  static ROTARY_ALWAYS_INLINE void load2(const T* p, V& x0, V& x1) noexcept {
    const float64x2x2_t x = vld2q_f64(p);
    x0 = x.val[0];
    x1 = x.val[1];
  }
  static ROTARY_ALWAYS_INLINE void store2(T* p, V y0, V y1) noexcept {
    float64x2x2_t y;
    y.val[0] = y0;
    y.val[1] = y1;
    vst2q_f64(p, y);
  }
};

// 16-bit storage (f16, bf16): four raw values per vector, converted by `Wide`.
template <class Storage, class Wide>
struct Half16 : MathF32 {
  using T = Storage;
  using MathF32::load;  // the f32 cos/sin
  static ROTARY_ALWAYS_INLINE const std::uint16_t* raw(const T* p) noexcept {
    return reinterpret_cast<const std::uint16_t*>(p);
  }
  static ROTARY_ALWAYS_INLINE std::uint16_t* raw(T* p) noexcept { return reinterpret_cast<std::uint16_t*>(p); }
  static ROTARY_ALWAYS_INLINE V load(const T* p) noexcept { return Wide::widen(vld1_u16(raw(p))); }
  static ROTARY_ALWAYS_INLINE void store(T* p, V v) noexcept { vst1_u16(raw(p), Wide::narrow(v)); }
  static ROTARY_ALWAYS_INLINE void load2(const T* p, V& x0, V& x1) noexcept {
    const uint16x4x2_t x = vld2_u16(raw(p));
    x0 = Wide::widen(x.val[0]);
    x1 = Wide::widen(x.val[1]);
  }
  static ROTARY_ALWAYS_INLINE void store2(T* p, V y0, V y1) noexcept {
    uint16x4x2_t y;
    y.val[0] = Wide::narrow(y0);
    y.val[1] = Wide::narrow(y1);
    vst2_u16(raw(p), y);
  }
};

struct F16Convert {
  // FCVTL: exact; FCVTN: round to nearest even (FPCR default), overflow to inf, NaN quieted with its
  // sign and upper payload — convert.hpp's f16_bits_to_f32 / f32_to_f16_bits.
  static ROTARY_ALWAYS_INLINE float32x4_t widen(uint16x4_t h) noexcept {
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
  }
  static ROTARY_ALWAYS_INLINE uint16x4_t narrow(float32x4_t f) noexcept {
    return vreinterpret_u16_f16(vcvt_f16_f32(f));
  }
};

struct BF16Convert {
  static ROTARY_ALWAYS_INLINE float32x4_t widen(uint16x4_t h) noexcept {
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
  }
  // convert.hpp's f32_to_bf16_bits, lane by lane, in integer ops: BFCVTN needs FEAT_BF16, which
  // baseline armv8-a lacks.
  static ROTARY_ALWAYS_INLINE uint16x4_t narrow(float32x4_t f) noexcept {
    const uint32x4_t u = vreinterpretq_u32_f32(f);
    const uint32x4_t is_nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    // Zero exponent (zero or subnormal): keep the sign only.
    const uint32x4_t normal = vtstq_u32(u, vdupq_n_u32(0x7f800000u));
    const uint32x4_t v = vbslq_u32(normal, u, vandq_u32(u, vdupq_n_u32(0x80000000u)));
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(v, 16), vdupq_n_u32(1u));
    const uint32x4_t rounded = vaddq_u32(v, vaddq_u32(lsb, vdupq_n_u32(0x7fffu)));
    const uint16x4_t quiet_nan = vorr_u16(vshrn_n_u32(u, 16), vdup_n_u16(0x0040u));
    return vbsl_u16(vmovn_u32(is_nan), quiet_nan, vshrn_n_u32(rounded, 16));
  }
};

using F16 = Half16<f16, F16Convert>;
using BF16 = Half16<bf16, BF16Convert>;

// n 16-bit elements, bit for bit: 16 bytes per q register, then fixed-size moves.
ROTARY_ALWAYS_INLINE void copy_u16(const void* in, void* out, std::int64_t n) noexcept {
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  std::int64_t bytes = 2 * n;
  for (; bytes >= 16; bytes -= 16, src += 16, dst += 16) vst1q_u8(dst, vld1q_u8(src));
  // bytes is now < 16 and even; fixed-size copies compile to single moves.
  if (bytes & 8) {
    std::memcpy(dst, src, 8);
    src += 8;
    dst += 8;
  }
  if (bytes & 4) {
    std::memcpy(dst, src, 4);
    src += 4;
    dst += 4;
  }
  if (bytes & 2) std::memcpy(dst, src, 2);
}

// KV-cache codes of 4 f32 values (simd_cache_row.hpp's cache_row_impl; quantize.hpp's definitions):
// FRINTN (nearest even, whatever FPCR says), NaN and range tests on the bits.
struct CacheOps {
  static constexpr int L = 4;
  using Acc = uint32x4_t;
  static ROTARY_ALWAYS_INLINE Acc zero() noexcept { return vdupq_n_u32(0); }
  static ROTARY_ALWAYS_INLINE Acc max_abs(Acc acc, float32x4_t v) noexcept {
    return vmaxq_u32(acc, vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x7fffffffu)));
  }
  static ROTARY_ALWAYS_INLINE std::uint32_t reduce_max(Acc acc) noexcept { return vmaxvq_u32(acc); }
  // 4 codes of int8_code(y), y = x * inv rounded to f32: FCVTNS (nearest even, whatever FPCR
  // says); |y| rounds to at most 127, so the narrowing moves keep it.
  static ROTARY_ALWAYS_INLINE void int8(float32x4_t y, std::int8_t* out) noexcept {
    const int16x4_t w = vmovn_s32(vcvtnq_s32_f32(y));
    const int8x8_t b = vmovn_s16(vcombine_s16(w, w));
    const std::uint32_t w4 = vget_lane_u32(vreinterpret_u32_s8(b), 0);
    std::memcpy(out, &w4, sizeof w4);
  }
  // Each vector's codes narrowed on their own (avx512.hpp's kPack).
  static constexpr std::size_t kPack = 1;
  static ROTARY_ALWAYS_INLINE void int8_n(const float32x4_t (&y)[kPack], std::int8_t* out) noexcept {
    int8(y[0], out);
  }
  static ROTARY_ALWAYS_INLINE void fp8_n(const float32x4_t (&y)[kPack], std::uint8_t* out) noexcept {
    fp8(y[0], out);
  }
  // 4 codes of fp8_e4m3_code(y).
  static ROTARY_ALWAYS_INLINE void fp8(float32x4_t y, std::uint8_t* out) noexcept {
    const uint32x4_t u = vreinterpretq_u32_f32(y);
    const uint32x4_t a = vandq_u32(u, vdupq_n_u32(0x7fffffffu));
    // normal results: drop 20 mantissa bits to even, rebias, at most 0x7e (448: the min clamps larger
    // values and infinities too, whose rebiased exponents stay positive: a + 0x80000 < 2^32)
    const uint32x4_t rounded = vaddq_u32(vaddq_u32(a, vdupq_n_u32(0x7ffffu)), vandq_u32(vshrq_n_u32(a, 20), vdupq_n_u32(1u)));
    uint32x4_t r = vreinterpretq_u32_s32(vminq_s32(
        vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(rounded, 20)), vdupq_n_s32(120 << 3)), vdupq_n_s32(0x7e)));
    // below 2^-6: a multiple of 2^-9, rounded to even (|y| * 512 is exact; other lanes zeroed first)
    const uint32x4_t small = vcltq_u32(a, vdupq_n_u32(0x3c800000u));
    const float32x4_t scaled = vmulq_n_f32(vreinterpretq_f32_u32(vandq_u32(a, small)), 512.0f);
    r = vbslq_u32(small, vcvtq_u32_f32(vrndnq_f32(scaled)), r);
    r = vbslq_u32(vcgtq_u32(a, vdupq_n_u32(0x7f800000u)), vdupq_n_u32(0x7fu), r);
    r = vorrq_u32(r, vandq_u32(vshrq_n_u32(u, 24), vdupq_n_u32(0x80u)));
    const uint16x4_t h = vmovn_u32(r);
    const uint8x8_t b = vmovn_u16(vcombine_u16(h, h));
    const std::uint32_t w4 = vget_lane_u32(vreinterpret_u32_u8(b), 0);
    std::memcpy(out, &w4, sizeof w4);
  }
};

// Rows whose cos (or sin) values fill at most this many full vectors keep them in registers: 2*8 of
// the 32 q registers, the rest for data and temporaries. f32/f16/bf16: rotary_dim <= 70 (8 vectors
// + up to 3 scalar pairs), f64: rotary_dim <= 34 (8 vectors + 1 pair). No blocked order.
inline constexpr int kMaxRegs = 8;
inline constexpr std::int64_t kBlockHalfBytes = 0;
inline constexpr int kVectorsPerBlock = 1;
// No rows asked for ahead (not measured on an AArch64 core).
inline constexpr int kPrefetchRows16 = 0;
inline constexpr bool kAheadInRegisters = false;  // (kPrefetchRows16 is 0)
// 16-bit half-split rows keep the step order (avx512.hpp's kLineOrder16): not measured on NEON.
inline constexpr bool kLineOrder16 = false;
// Plain stores only (avx512.hpp's kStreamStores): not measured on an AArch64 core.
inline constexpr bool kStreamStores = false;
inline void store_fence() noexcept {}

// After each kernel: nothing (AArch64 has no upper-state transitions).
inline void leave_kernel() noexcept {}

}  // namespace rotary::detail::neon

// AdvSIMD needs no target attribute.
#define ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED
#define ROTARY_KERNEL_TARGET
#define ROTARY_KERNEL_INLINE ROTARY_ALWAYS_INLINE
namespace rotary::detail::neon {
#include "simd_body.hpp"
#include "simd_norm.hpp"
#include "simd_cache_row.hpp"
}  // namespace rotary::detail::neon
#undef ROTARY_KERNEL_TARGET
#undef ROTARY_KERNEL_INLINE
#undef ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED

#endif  // ROTARY_NEON_KERNELS

#endif  // ROTARY_DETAIL_KERNELS_NEON_HPP
