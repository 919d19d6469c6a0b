// Floating-point facts read from bit patterns, and an optimisation barrier: the parts of rotary's
// numerics that value-unsafe compiler flags must not change.
//
// -ffinite-math-only (part of -ffast-math) lets the compiler fold std::isfinite/std::isnan to
// constants, so a NaN base would pass validation; -fno-signed-zeros lets it fold -0.0 to +0.0, so a
// sign mask built from -0.0f would be empty; -fassociative-math (clang: -funsafe-math-optimizations,
// which defines no macro) lets it simplify (a + b) - a to b, which erases the rounding error that
// error-free transformations (TwoSum, round-to-integer tricks) exist to capture. Integer views of the
// bits and an empty asm that hides a value from the optimiser are immune to all of these.
#ifndef ROTARY_DETAIL_FP_HPP
#define ROTARY_DETAIL_FP_HPP

#include "guard.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#include <math.h>  // ::fma, ::fmaf by address

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>  // strict_sqrt
#endif

namespace rotary::detail {

inline std::uint64_t bits_of(double x) noexcept {
  std::uint64_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline std::uint32_t bits_of(float x) noexcept {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Finite (not NaN, not ±Inf): the exponent field is not all ones. Flag-proof std::isfinite.
inline bool finite(double x) noexcept {
  return (bits_of(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}
inline bool finite(float x) noexcept { return (bits_of(x) & 0x7f800000u) != 0x7f800000u; }

// NaN: exponent all ones and a non-zero significand. Flag-proof std::isnan.
inline bool is_nan(double x) noexcept { return (bits_of(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
inline bool is_nan(float x) noexcept { return (bits_of(x) & 0x7fffffffu) > 0x7f800000u; }

// x, unknown to the optimiser: an expression through opaque() is evaluated as written, so
// reassociation cannot cancel a rounding error that an error-free transformation captures.
template <class F>
inline F opaque_register(F x) noexcept {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(x));  // stays in its SSE register: free
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__("" : "+w"(x));
#elif defined(__GNUC__)
  __asm__("" : "+m"(x));
#else
  volatile F v = x;
  x = v;
#endif
  return x;
}
inline double opaque(double x) noexcept { return opaque_register(x); }
// The same for a float (its own name: an opaque(float) overload would change which opaque() existing
// calls with float arguments pick).
inline float opaque_f32(float x) noexcept { return opaque_register(x); }

inline long double opaque(long double x) noexcept {
#if defined(__GNUC__)
  __asm__("" : "+m"(x));  // through memory: works for x87 and software long doubles alike
#else
  volatile long double v = x;
  x = v;
#endif
  return x;
}

// The nearest integer to x (ties to either neighbour) as a double, for |x| < 2^62, by an integer
// conversion: no add-and-subtract trick that reassociation could fold.
inline double nearest_integer(double x) noexcept {
  const auto n = static_cast<std::int64_t>(x);  // truncation toward zero: exact
  const double t = static_cast<double>(n);
  const double f = x - t;                       // exact: |f| < 1 and f shares x's ulp grid
  if (f > 0.5) return t + 1.0;
  if (f < -0.5) return t - 1.0;
  return t;
}


// The rounding error of the product p = a * b (p as rounded): a * b = p + product_error(a, b, p)
// exactly, for |a|, |b| < 2^995 and a product that does not underflow. Dekker's TwoProduct with
// Veltkamp splitting, every step behind opaque(), instead of fma(a, b, -p): clang lowers std::fma
// to a separate multiply and add under -ffast-math / -funsafe-math-optimizations when the target
// has no FMA instruction (baseline x86-64), which makes this error 0. The partial products are
// exact, so -ffp-contract cannot change them either.
inline double product_error(double a, double b, double p) noexcept {
  constexpr double kSplit = 134217729.0;  // 2^27 + 1
  const double ca = opaque(kSplit * a);
  const double ah = opaque(ca - opaque(ca - a));
  const double al = opaque(a - ah);
  const double cb = opaque(kSplit * b);
  const double bh = opaque(cb - opaque(cb - b));
  const double bl = opaque(b - bh);
  const double e1 = opaque(opaque(ah * bh) - p);
  const double e2 = opaque(e1 + opaque(ah * bl));
  const double e3 = opaque(e2 + opaque(al * bh));
  return e3 + opaque(al * bl);
}

// fma(a, b, c) with a single rounding under every flag set. Where the target has an FMA
// instruction (x86 with -mfma or a target("fma") region, AArch64) std::fma is that instruction.
// Without one, clang's value-unsafe modes turn std::fma into a multiply and an add (see above), so
// the call goes through a pointer the optimiser cannot see through, to libm's correctly rounded
// software fma: slow, but only the scalar reference kernel of such builds pays it.
#if defined(__clang__) && !defined(__FMA__) && !defined(__aarch64__)
inline double fused_multiply_add(double a, double b, double c) noexcept {
  static double (*volatile const fn)(double, double, double) = &::fma;
  return fn(a, b, c);
}
inline float fused_multiply_add(float a, float b, float c) noexcept {
  static float (*volatile const fn)(float, float, float) = &::fmaf;
  return fn(a, b, c);
}
#else
inline double fused_multiply_add(double a, double b, double c) noexcept { return std::fma(a, b, c); }
inline float fused_multiply_add(float a, float b, float c) noexcept { return std::fma(a, b, c); }
#endif

// libm's powl, called where the optimiser cannot rewrite it: value-unsafe flags otherwise let the
// compiler replace pow by exp(e * log(b)), by a vectorised libmvec variant (up to 4 ulp) or fold
// the division around it, and theta_j would change in its last bits with the flags. theta is
// computed once per table, so the indirect call costs nothing measurable.
inline long double libm_powl(long double b, long double e) noexcept {
  static long double (*volatile const fn)(long double, long double) = &::powl;
  return fn(b, e);
}

// libm's sinl/cosl, for the long double references (reference.hpp, the tests): g++'s
// -funsafe-math-optimizations otherwise inlines x87 fsin/fcos, whose range reduction with a 66-bit
// pi is wrong by up to 1e-3 rad at angles near 2^62.
inline long double libm_sinl(long double x) noexcept {
  static long double (*volatile const fn)(long double) = &::sinl;
  return fn(x);
}
inline long double libm_cosl(long double x) noexcept {
  static long double (*volatile const fn)(long double) = &::cosl;
  return fn(x);
}

// libm's pow and log in double, for the scaling rules (scaling.hpp, frequencies.hpp): the same calls
// under every flag set (no libmvec variant in a vectorised loop, no exp/log rewriting).
inline double libm_pow(double b, double e) noexcept {
  static double (*volatile const fn)(double, double) = &::pow;
  return fn(b, e);
}
inline double libm_log(double x) noexcept {
  static double (*volatile const fn)(double) = &::log;
  return fn(x);
}
inline long double libm_logl(long double x) noexcept {
  static long double (*volatile const fn)(long double) = &::logl;
  return fn(x);
}

// Rounded arithmetic that value-unsafe flags cannot reorder, fuse or turn into a reciprocal
// multiply: for the few formulas (scaling rules) whose double result must not depend on flags.
inline float strict_mul_f32(float a, float b) noexcept { return opaque_f32(opaque_f32(a) * opaque_f32(b)); }
inline double strict_mul(double a, double b) noexcept { return opaque(opaque(a) * opaque(b)); }
inline double strict_div(double a, double b) noexcept { return opaque(opaque(a) / opaque(b)); }
inline double strict_add(double a, double b) noexcept { return opaque(opaque(a) + opaque(b)); }
inline double strict_sub(double a, double b) noexcept { return opaque(opaque(a) - opaque(b)); }
// The square root (IEEE 754: correctly rounded, the bits of std::sqrt), inline at every optimization
// level: std::sqrt is a libm call at -O0 and -Os (errno), and from inside an AVX kernel that call
// runs baseline code with the vector registers' upper halves dirty (cpu.hpp: clear_upper_state).
// On x86-64 the SSE2 intrinsic takes the encoding of the function it is inlined into (VEX in an AVX
// kernel).
#if defined(__x86_64__) && defined(__SSE2__)
ROTARY_ALWAYS_INLINE double strict_sqrt(double x) noexcept {
  const __m128d v = _mm_set_sd(opaque(x));
  return opaque(_mm_cvtsd_f64(_mm_sqrt_sd(v, v)));
}
#else
inline double strict_sqrt(double x) noexcept { return opaque(std::sqrt(opaque(x))); }
#endif
inline long double strict_mul(long double a, long double b) noexcept { return opaque(opaque(a) * opaque(b)); }
inline long double strict_div(long double a, long double b) noexcept { return opaque(opaque(a) / opaque(b)); }
inline long double strict_sub(long double a, long double b) noexcept { return opaque(opaque(a) - opaque(b)); }

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_FP_HPP
