// The KV-cache element conversions of kv_cache.hpp, one value at a time: the definition every ISA's
// row kernel (CacheRowArgs, kernels/*) reproduces bit for bit.
//   int8:  q = round_half_even(x * inv) with x and inv in f32 and the product rounded to f32, where
//          inv = 127 / absmax correctly rounded to f32: vLLM's dynamic per-token int8 quantization
//          (dynamic_scaled_int8_quant: 127.0f / absmax, x * that, cvt.rni) bit for bit. Rows whose
//          f32 multiplier would overflow (absmax < 127 / FLT_MAX, about 3.7e-37) are scaled in double
//          instead, where 127 / absmax is finite for every absmax >= 2^-149. The row's scale and
//          multiplier are computed once per row by the caller (int8_begin).
//   fp8:   OCP FP8 E4M3 of an f32 value: round to nearest even, saturated to +-448 (infinities
//          too), NaN -> 0x7f | sign.
// Integer and explicit-rounding operations only: the bits do not depend on the rounding mode or on
// value-unsafe compiler flags.
#ifndef ROTARY_DETAIL_QUANTIZE_HPP
#define ROTARY_DETAIL_QUANTIZE_HPP

#include "guard.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "convert.hpp"
#include "fp.hpp"
#include "kernels/kernel_args.hpp"

namespace rotary::detail {

// a (0 <= a < 2^23) rounded half to even, by an integer conversion: independent of the rounding
// mode and of value-unsafe flags (no add-and-subtract trick that reassociation could fold).
inline std::uint32_t round_half_even(float a) noexcept {
  const auto whole = static_cast<std::uint32_t>(a);
  const float rest = a - static_cast<float>(whole);  // exact
  return whole + (rest > 0.5f || (rest == 0.5f && (whole & 1u) != 0) ? 1u : 0u);
}
// The same for 0 <= a < 2^52.
inline std::uint64_t round_half_even(double a) noexcept {
  const auto whole = static_cast<std::uint64_t>(a);
  const double rest = a - static_cast<double>(whole);  // exact
  return whole + (rest > 0.5 || (rest == 0.5 && (whole & 1u) != 0) ? 1u : 0u);
}

// One int8 code: v = x * inv (|v| <= 127 plus rounding), float or double, rounded to nearest even,
// at most 127 in magnitude.
template <class F>
inline std::int8_t int8_code(F v) noexcept {
  const auto q = static_cast<std::int32_t>(std::min<std::uint64_t>(127u, round_half_even(v < F(0) ? -v : v)));
  return static_cast<std::int8_t>(v < F(0) ? -q : q);
}

// The bits of x as OCP FP8 E4M3 (bias 7, no infinities, max 448).
inline std::uint8_t fp8_e4m3_code(float x) noexcept {
  const std::uint32_t u = float_bits(x);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7fu);  // NaN
  if (a >= 0x43e00000u) return static_cast<std::uint8_t>(sign | 0x7eu);  // >= 448 (and inf): 448
  if (a < 0x3c800000u) {  // below 2^-6, the smallest normal: a multiple of 2^-9, rounded to even
    const std::uint32_t m = round_half_even(bits_float(a) * 512.0f);  // exact scaling
    return static_cast<std::uint8_t>(sign | m);  // m = 8 is the smallest normal: the same bits
  }
  const std::uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);  // drop 20 mantissa bits, to even
  const std::uint32_t e = (rounded >> 20) - (120u << 3);           // rebias 127 -> 7
  return static_cast<std::uint8_t>(sign | std::min<std::uint32_t>(e, 0x7eu));
}

// The f32 quotient a / b computed in double and rounded once: the same bits under any flags
// (-freciprocal-math would otherwise turn x / c into x * (1 / c)).
inline float exact_quotient(float a, float b) noexcept {
  return static_cast<float>(strict_div(static_cast<double>(a), static_cast<double>(b)));
}

// An int8 row's scale and multiplier from the bits of its largest |x| (the largest of the values'
// bits with the sign cleared: infinities and NaN compare above every finite value).
//   all zeros:                scale 0, codes 0
//   a NaN or an infinity:     scale NaN (the row dequantizes to NaN, never to plausible numbers),
//                             codes 0
//   otherwise:                scale = absmax / 127 and inv = 127 / absmax, each correctly rounded to
//                             f32 (a quotient of floats computed in double and rounded once is the
//                             correctly rounded f32 quotient: 53 >= 2 * 24 + 2 bits); where 127 / absmax
//                             exceeds FLT_MAX, inv is 0 and wide = 127 / absmax in double
struct Int8Inv {
  float f = 0.0f;      // the f32 multiplier, or 0
  double wide = 0.0;   // the double multiplier of a row whose f32 one would overflow, or 0
};
struct Int8Row {
  float scale = 0.0f;
  Int8Inv inv;
  bool zeros = true;
};
ROTARY_ALWAYS_INLINE Int8Row int8_row(std::uint32_t absmax_bits) noexcept {
  if (absmax_bits >= 0x7f800000u) return {bits_float(0x7fc00000u), {}, true};
  if (absmax_bits == 0) return {0.0f, {}, true};
  const float absmax = bits_float(absmax_bits);
  const double inv = strict_div(127.0, static_cast<double>(absmax));
  Int8Row r{exact_quotient(absmax, 127.0f), {}, false};
  if (inv < static_cast<double>(std::numeric_limits<float>::max()))
    r.inv.f = static_cast<float>(inv);
  else
    r.inv.wide = inv;
  return r;
}

template <class T>
inline std::uint32_t abs_bits(T x) noexcept {
  return float_bits(static_cast<float>(to_compute(x))) & 0x7fffffffu;
}

// Elements [j, a.n) of a cache row by the definitions above (inv: the row's int8 multiplier); the
// SIMD kernels' tails and the scalar kernel. Always inlined: compiled out of line (for the TU's
// baseline, SSE2 without -m flags) g++ 12 tail-calls it from the AVX2 / AVX-512 row kernels with a
// jmp and no vzeroupper, so the kernels return to baseline code with the upper halves of the vector
// registers dirty, and every row then pays SSE/AVX transitions (cpu.hpp's clear_upper_state).
template <class T>
ROTARY_ALWAYS_INLINE void cache_codes(const CacheRowArgs<T>& a, const Int8Inv& inv, std::int64_t j) noexcept {
  for (; j < a.n; ++j) {
    const auto x = static_cast<float>(to_compute(a.in[j]));
    switch (a.code) {
      case CacheCode::int8:
        static_cast<std::int8_t*>(a.out)[j] = inv.wide != 0.0 ? int8_code(strict_mul(static_cast<double>(x), inv.wide))
                                                              : int8_code(strict_mul_f32(x, inv.f));
        break;
      case CacheCode::fp8_e4m3:
        static_cast<std::uint8_t*>(a.out)[j] = fp8_e4m3_code(x * a.inv_scale);
        break;
      case CacheCode::f16:
        static_cast<f16*>(a.out)[j] = from_compute<f16>(x);
        break;
      case CacheCode::bf16:
        static_cast<bf16*>(a.out)[j] = from_compute<bf16>(x);
        break;
    }
  }
}

// An int8 row's first step, once its largest |x| bits are known: writes the scale, and the zeros of
// a row without codes (false: the row is done). inv: the multiplier for cache_codes (the SIMD kernels
// take rows with inv.wide != 0, all below 3.7e-37, to cache_codes whole).
template <class T>
ROTARY_ALWAYS_INLINE bool int8_begin(const CacheRowArgs<T>& a, std::uint32_t absmax_bits,
                                     Int8Inv& inv) noexcept {
  const Int8Row r = int8_row(absmax_bits);
  *a.scale = r.scale;
  inv = r.inv;
  if (r.zeros) std::memset(a.out, 0, static_cast<std::size_t>(a.n));
  return !r.zeros;
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_QUANTIZE_HPP
