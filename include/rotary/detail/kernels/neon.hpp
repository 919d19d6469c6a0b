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
// Structure: per token, the cos/sin of the full vectors (K = h / L of them, h = rotary_dim/2) stay in
// registers while all of the token's heads are swept, for K <= kMaxRegs; longer rows stream cos/sin
// from the (L1-resident) cache row per head and vector.
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
#include "../kernel_args.hpp"
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
  static ROTARY_ALWAYS_INLINE V load_cs(const C* p) noexcept { return vld1q_f32(p); }
  static ROTARY_ALWAYS_INLINE Bits sign(bool negative) noexcept { return vdupq_n_u32(negative ? 0x80000000u : 0u); }
  static ROTARY_ALWAYS_INLINE V flip(V v, Bits sign_bits) noexcept {
    return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(v), sign_bits));
  }
  static ROTARY_ALWAYS_INLINE V mul(V a, V b) noexcept { return vmulq_f32(a, b); }
  static ROTARY_ALWAYS_INLINE V neg(V a) noexcept { return vnegq_f32(a); }
  static ROTARY_ALWAYS_INLINE V fma(V acc, V a, V b) noexcept { return vfmaq_f32(acc, a, b); }  // acc + a*b
};

struct MathF64 {
  using C = double;
  using V = float64x2_t;
  using Bits = uint64x2_t;
  static constexpr int L = 2;
  static ROTARY_ALWAYS_INLINE V load_cs(const C* p) noexcept { return vld1q_f64(p); }
  static ROTARY_ALWAYS_INLINE Bits sign(bool negative) noexcept {
    return vdupq_n_u64(negative ? 0x8000000000000000ull : 0ull);
  }
  static ROTARY_ALWAYS_INLINE V flip(V v, Bits sign_bits) noexcept {
    return vreinterpretq_f64_u64(veorq_u64(vreinterpretq_u64_f64(v), sign_bits));
  }
  static ROTARY_ALWAYS_INLINE V mul(V a, V b) noexcept { return vmulq_f64(a, b); }
  static ROTARY_ALWAYS_INLINE V neg(V a) noexcept { return vnegq_f64(a); }
  static ROTARY_ALWAYS_INLINE V fma(V acc, V a, V b) noexcept { return vfmaq_f64(acc, a, b); }
};

struct F32 : MathF32 {
  using T = float;
  static ROTARY_ALWAYS_INLINE V load(const T* p) noexcept { return vld1q_f32(p); }
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
  static ROTARY_ALWAYS_INLINE V load(const T* p) noexcept { return vld1q_f64(p); }
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

// ---- pairings ---------------------------------------------------------------------------------
// Pair j of a row of h pairs: elements index(j) and index(j) + second(h).

struct HalfSplit {
  static constexpr std::int64_t index(std::int64_t j) noexcept { return j; }
  static constexpr std::int64_t second(std::int64_t h) noexcept { return h; }
  template <class S>
  static ROTARY_ALWAYS_INLINE void load(const typename S::T* row, std::int64_t j, std::int64_t h,
                                        typename S::V& x0, typename S::V& x1) noexcept {
    x0 = S::load(row + j);
    x1 = S::load(row + h + j);
  }
  template <class S>
  static ROTARY_ALWAYS_INLINE void store(typename S::T* row, std::int64_t j, std::int64_t h, typename S::V y0,
                                         typename S::V y1) noexcept {
    S::store(row + j, y0);
    S::store(row + h + j, y1);
  }
};

struct Interleaved {
  static constexpr std::int64_t index(std::int64_t j) noexcept { return 2 * j; }
  static constexpr std::int64_t second(std::int64_t) noexcept { return 1; }
  template <class S>
  static ROTARY_ALWAYS_INLINE void load(const typename S::T* row, std::int64_t j, std::int64_t,
                                        typename S::V& x0, typename S::V& x1) noexcept {
    S::load2(row + 2 * j, x0, x1);
  }
  template <class S>
  static ROTARY_ALWAYS_INLINE void store(typename S::T* row, std::int64_t j, std::int64_t, typename S::V y0,
                                         typename S::V y1) noexcept {
    S::store2(row + 2 * j, y0, y1);
  }
};

// ---- building blocks --------------------------------------------------------------------------

// Pairs [j, j + L) of one row. All loads before the stores: `in` may be `out`.
template <class S, class P>
ROTARY_ALWAYS_INLINE void step(const typename S::T* in, typename S::T* out, std::int64_t j, std::int64_t h,
                               typename S::V c, typename S::V s) noexcept {
  using V = typename S::V;
  V x0;
  V x1;
  P::template load<S>(in, j, h, x0, x1);
  const V y0 = S::fma(S::neg(S::mul(x1, s)), x0, c);  // fma(x0, c, -(x1*s))
  const V y1 = S::fma(S::mul(x0, s), x1, c);          // fma(x1, c, x0*s)
  P::template store<S>(out, j, h, y0, y1);
}

// Pairs [j0, h) of one row with the scalar kernel's own formula and conversions.
template <class S, class P>
ROTARY_ALWAYS_INLINE void scalar_pairs(const typename S::T* in, typename S::T* out, const typename S::C* cs,
                                       std::int64_t j0, std::int64_t h, typename S::C sign) noexcept {
  using T = typename S::T;
  using C = typename S::C;
  const std::int64_t second = P::second(h);
  for (std::int64_t j = j0; j < h; ++j) {
    const std::int64_t i0 = P::index(j);
    C y0;
    C y1;
    scalar::rotate_pair<C>(to_compute(in[i0]), to_compute(in[i0 + second]), cs[j], sign * cs[h + j], y0, y1);
    out[i0] = from_compute<T>(y0);
    out[i0 + second] = from_compute<T>(y1);
  }
}

// Pass-through coordinates [rotary_dim, head_dim) when out of place: copied inline (a memcpy call
// would spill the register-resident cos/sin of the token around it).
template <class T>
ROTARY_ALWAYS_INLINE void copy_pass_through(const T* in, T* out, std::int64_t n) noexcept {
  const auto* src = reinterpret_cast<const unsigned char*>(in);
  auto* dst = reinterpret_cast<unsigned char*>(out);
  std::int64_t bytes = n * static_cast<std::int64_t>(sizeof(T));
  for (; bytes >= 16; bytes -= 16, src += 16, dst += 16) vst1q_u8(dst, vld1q_u8(src));
  // bytes is now < 16 and a multiple of sizeof(T) >= 2; fixed-size copies compile to single moves.
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

// Rows whose cos (or sin) values fill at most this many full vectors keep them in registers: 2*8 of
// the 32 q registers, the rest for data and temporaries. f32/f16/bf16: rotary_dim <= 70 (8 vectors
// + up to 3 scalar pairs), f64: rotary_dim <= 34 (8 vectors + 1 pair).
inline constexpr int kMaxRegs = 8;

// ---- kernels ----------------------------------------------------------------------------------

// h pairs: K full vectors held in registers, then h - K*L < L pairs by the scalar formula.
template <class S, class P, int K>
void rotate_registers(const KernelArgs<typename S::T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  using T = typename S::T;
  using C = typename S::C;
  using V = typename S::V;
  constexpr int L = S::L;
  const Rows<T> rows(a);
  const std::int64_t heads = a.total_heads();
  const std::int64_t h = a.rotary_dim / 2;
  const std::int64_t d = a.rotary_dim;
  const std::int64_t pass = a.head_dim - d;
  const C sign = a.inverse ? C(-1) : C(1);
  const auto neg = S::sign(a.inverse);
  for (std::int64_t t = t0; t < t1; ++t) {
    const C* cs = a.cos_sin_row(t);
    V c[std::size_t{K}];
    V s[std::size_t{K}];
#pragma GCC unroll 16
    for (int k = 0; k < K; ++k) {
      c[k] = S::load_cs(cs + k * L);
      s[k] = S::flip(S::load_cs(cs + h + k * L), neg);
    }
    for (std::int64_t head = 0; head < heads; ++head) {
      const T* in = rows.in_row(t, head);
      T* out = rows.out_row(t, head);
#pragma GCC unroll 16
      for (int k = 0; k < K; ++k) step<S, P>(in, out, k * L, h, c[k], s[k]);
      if (K * L < h) scalar_pairs<S, P>(in, out, cs, K * L, h, sign);
      if (pass > 0 && in != out) copy_pass_through(in + d, out + d, pass);
    }
  }
}

// Any h: one vector at a time, cos/sin reloaded per head from the cache row, then the scalar tail.
template <class S, class P>
void rotate_stream(const KernelArgs<typename S::T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  using T = typename S::T;
  using C = typename S::C;
  constexpr int L = S::L;
  const Rows<T> rows(a);
  const std::int64_t heads = a.total_heads();
  const std::int64_t h = a.rotary_dim / 2;
  const std::int64_t d = a.rotary_dim;
  const std::int64_t pass = a.head_dim - d;
  const std::int64_t full = h - h % L;
  const C sign = a.inverse ? C(-1) : C(1);
  const auto neg = S::sign(a.inverse);
  for (std::int64_t t = t0; t < t1; ++t) {
    const C* cs = a.cos_sin_row(t);
    for (std::int64_t head = 0; head < heads; ++head) {
      const T* in = rows.in_row(t, head);
      T* out = rows.out_row(t, head);
      for (std::int64_t j = 0; j < full; j += L)
        step<S, P>(in, out, j, h, S::load_cs(cs + j), S::flip(S::load_cs(cs + h + j), neg));
      if (full < h) scalar_pairs<S, P>(in, out, cs, full, h, sign);
      if (pass > 0 && in != out) copy_pass_through(in + d, out + d, pass);
    }
  }
}

// ---- entry --------------------------------------------------------------------------------------

// The kernel for rows of `vectors` full vectors per stream: the K-register variant, or (none, or
// past kMaxRegs) the streaming one.
template <class S, class P, int K = 1>
void select_kernel(const KernelArgs<typename S::T>& a, std::int64_t vectors, std::int64_t t0,
                   std::int64_t t1) noexcept {
  if constexpr (K > kMaxRegs) {
    rotate_stream<S, P>(a, t0, t1);
  } else {
    if (vectors == K)
      rotate_registers<S, P, K>(a, t0, t1);
    else if (vectors < 1)
      rotate_stream<S, P>(a, t0, t1);  // fewer than L pairs: the scalar tail only
    else
      select_kernel<S, P, K + 1>(a, vectors, t0, t1);
  }
}

template <class S>
void rotate_tokens_impl(const KernelArgs<typename S::T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  const std::int64_t vectors = (a.rotary_dim / 2) / S::L;
  if (a.pairing == Pairing::half_split)
    select_kernel<S, HalfSplit>(a, vectors, t0, t1);
  else
    select_kernel<S, Interleaved>(a, vectors, t0, t1);
}

// Tokens [t0, t1) of a call; same contract as scalar::rotate_tokens. AdvSIMD is part of every
// AArch64 CPU, so this runs wherever it compiles.
template <class T>
void rotate_tokens(const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  static_assert(is_storage_type_v<T>, "f32, f64, f16 or bf16");
  if constexpr (std::is_same_v<T, float>) {
    rotate_tokens_impl<F32>(a, t0, t1);
  } else if constexpr (std::is_same_v<T, double>) {
    rotate_tokens_impl<F64>(a, t0, t1);
  } else if constexpr (std::is_same_v<T, f16>) {
    rotate_tokens_impl<F16>(a, t0, t1);
  } else {
    rotate_tokens_impl<BF16>(a, t0, t1);
  }
}

}  // namespace rotary::detail::neon

#endif  // ROTARY_NEON_KERNELS

#endif  // ROTARY_DETAIL_KERNELS_NEON_HPP
