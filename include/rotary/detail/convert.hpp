// Conversions between storage types and f32, defined bit for bit so that every ISA agrees:
//   f16 -> f32, bf16 -> f32: exact (a signalling f16 NaN becomes quiet, as in F16C).
//   f32 -> f16: IEEE round to nearest even, subnormals kept, overflow to infinity; NaN stays NaN
//               (quiet, sign and upper payload kept) — what x86 F16C (vcvtps2ph, imm 0) and
//               AArch64 FCVT do.
//   f32 -> bf16: round to nearest even; NaN -> quiet NaN (sign and upper payload kept); f32
//               subnormal inputs flush to a signed zero — what AVX512-BF16 (vcvtneps2bf16) does,
//               so that the hardware instruction and the other ISAs give the same bits.
#ifndef ROTARY_DETAIL_CONVERT_HPP
#define ROTARY_DETAIL_CONVERT_HPP

#include "guard.hpp"

#include <cstdint>
#include <cstring>

#include "../dtype.hpp"

namespace rotary::detail {

inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) noexcept {
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t f32_to_bf16_bits(float f) noexcept {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;  // subnormal (or zero) -> signed zero
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_bits_to_f32(std::uint16_t h) noexcept { return bits_float(static_cast<std::uint32_t>(h) << 16); }

inline std::uint16_t f32_to_f16_bits(float f) noexcept {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet, keep the top 9 payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a >= 0x38800000u) {  // normal half: rebias exponent (127 -> 15), round 13 bits away
    const std::uint32_t r = a - 0x38000000u;
    const std::uint32_t rounded = r + 0x0fffu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
  // Subnormal half: value = m * 2^-24 with m = mantissa(with hidden bit) >> shift, rounded to even.
  const std::uint32_t exp = a >> 23;                       // 102 .. 112
  const std::uint32_t mant = (a & 0x007fffffu) | 0x00800000u;
  const std::uint32_t shift = 126u - exp;                  // 14 .. 24
  const std::uint32_t half_ulp = 1u << (shift - 1);
  const std::uint32_t q = mant >> shift;
  const std::uint32_t rest = mant & ((1u << shift) - 1u);
  const std::uint32_t up = rest > half_ulp || (rest == half_ulp && (q & 1u));
  return static_cast<std::uint16_t>(sign | (q + up));
}

inline float f16_bits_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x03ffu;
  if (exp == 0x1f)  // inf, or NaN made quiet with its payload kept (as F16C and FCVT do)
    return bits_float(sign | 0x7f800000u | (mant != 0 ? 0x00400000u : 0u) | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  int e = -1;  // normalise the subnormal
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x0400u) == 0);
  return bits_float(sign | ((112u - static_cast<std::uint32_t>(e)) << 23) | ((mant & 0x03ffu) << 13));
}

// n f16 values widened to f32, exactly as f16_bits_to_f32 does each (NaNs quiet, payload
// kept), without branches, so that compilers vectorize the loop with the target's integer and
// int-to-float instructions (SSE2 in a baseline build): a caller's f16 cos/sin table is widened
// per block on every call. Subnormals
// are em x 2^-24 computed in float, exact (em < 2^10) and normal in f32, so flushing modes
// (-ffast-math's FTZ/DAZ) do not touch them.
inline void f16_to_f32_n(const f16* in, float* out, std::int64_t n) noexcept {
  static_assert(sizeof(f16) == 2, "f16 is two bytes");
  const auto* raw = reinterpret_cast<const unsigned char*>(in);
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t u = 0;
    std::memcpy(&u, raw + 2 * i, sizeof u);
    const std::uint32_t em = u & 0x7fffu;
    // all-ones masks: em < 0x400 (zero, subnormal), >= 0x7c00 (inf, NaN), > 0x7c00 (NaN)
    const std::uint32_t small = 0u - static_cast<std::uint32_t>(em < 0x0400u);
    const std::uint32_t special = 0u - static_cast<std::uint32_t>(em >= 0x7c00u);
    const std::uint32_t nan = 0u - static_cast<std::uint32_t>(em > 0x7c00u);
    const std::uint32_t normal = ((em << 13) + (112u << 23) + (special & (112u << 23))) | (nan & 0x00400000u);
    const float tiny = static_cast<float>(static_cast<std::int32_t>(em)) * 0x1p-24f;  // (int32: cvtdq2ps)
    std::uint32_t tiny_bits = 0;
    std::memcpy(&tiny_bits, &tiny, sizeof tiny_bits);
    const std::uint32_t bits = (tiny_bits & small) | (normal & ~small) | ((u & 0x8000u) << 16);
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

// Storage <-> compute (float for f16/bf16; identity for f32/f64).
template <class T>
inline compute_t<T> to_compute(T x) noexcept {
  if constexpr (std::is_same_v<T, f16>) return f16_bits_to_f32(Eigen::numext::bit_cast<std::uint16_t>(x));
  else if constexpr (std::is_same_v<T, bf16>) return bf16_bits_to_f32(Eigen::numext::bit_cast<std::uint16_t>(x));
  else return x;
}

template <class T>
inline T from_compute(compute_t<T> x) noexcept {
  if constexpr (std::is_same_v<T, f16>) return Eigen::numext::bit_cast<f16>(f32_to_f16_bits(x));
  else if constexpr (std::is_same_v<T, bf16>) return Eigen::numext::bit_cast<bf16>(f32_to_bf16_bits(x));
  else return x;
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_CONVERT_HPP
