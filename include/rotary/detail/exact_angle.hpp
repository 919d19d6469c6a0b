// Exact angle reduction: sin/cos of m*theta for any int64 position m, correct to the double result.
//
// The angle m*theta reaches 2^31 rad at int32 positions, where one ulp of a double is 2^-22 rad and
// one ulp of a float is 256 rad. So we never form the angle. We work in turns: f = theta / (2 pi) is
// held as a double-double (about 106 bits), m is split into two 32-bit halves that are exact in a
// double, each partial product is formed exactly with fma (TwoProduct), and only the fractional
// part of every piece is kept. The sum of those fractions, reduced to [-1/2, 1/2) turns, is accurate
// to about 2^-50 turns for |m| < 2^63; converting it to radians and calling sin/cos in double then
// gives values within one double ulp of the truth, i.e. correctly rounded to float except on
// near-ties.
#ifndef ROTARY_DETAIL_EXACT_ANGLE_HPP
#define ROTARY_DETAIL_EXACT_ANGLE_HPP

#include "guard.hpp"

#include <cmath>
#include <cstdint>

namespace rotary::detail {

// 1/(2 pi) and 2 pi as double-doubles (hi + lo), from a 100-digit decimal expansion of pi.
inline constexpr double kInvTwoPiHi = 0x1.45f306dc9c883p-3;
inline constexpr double kInvTwoPiLo = -0x1.6b01ec5417056p-57;
inline constexpr double kTwoPiHi = 0x1.921fb54442d18p+2;
inline constexpr double kTwoPiLo = 0x1.1a62633145c07p-52;

// A frequency in turns per position, as an unevaluated sum hi + lo.
struct Turns {
  double hi;
  double lo;
};

inline Turns to_turns(double theta) noexcept {
  const double hi = theta * kInvTwoPiHi;
  const double err = std::fma(theta, kInvTwoPiHi, -hi);  // exact: theta*kInvTwoPiHi = hi + err
  const double lo = err + theta * kInvTwoPiLo;
  const double s = hi + lo;  // renormalise (Fast2Sum, |hi| >= |lo|)
  return {s, lo - (s - hi)};
}

// x - floor(x) is exact in binary floating point: the result is a subset of x's significand bits.
inline double frac(double x) noexcept { return x - std::floor(x); }

// Fractional part of a*b (both doubles), exactly as far as a double holds it.
inline double frac_product(double a, double b) noexcept {
  const double p = a * b;
  const double e = std::fma(a, b, -p);
  return frac(p) + frac(e);
}

// The angle m * (2 pi f) reduced to [-pi, pi), in radians, as a double.
inline double reduced_angle(std::int64_t m, Turns f) noexcept {
  // m = mh * 2^32 + ml with 0 <= ml < 2^32 and |mh| <= 2^31: both halves are exact doubles.
  const auto um = static_cast<std::uint64_t>(m);
  const double ml = static_cast<double>(um & 0xffffffffu);
  const double mh = std::ldexp(static_cast<double>(static_cast<std::int32_t>(um >> 32)), 32);
  double t = frac_product(mh, f.hi) + frac_product(mh, f.lo) + frac_product(ml, f.hi) +
             frac(ml * f.lo);
  t = frac(t);               // [0, 1)
  if (t >= 0.5) t -= 1.0;    // [-1/2, 1/2): exact
  return std::fma(t, kTwoPiHi, t * kTwoPiLo);
}

inline void exact_sincos(std::int64_t m, Turns f, double& s, double& c) noexcept {
  const double a = reduced_angle(m, f);
  s = std::sin(a);
  c = std::cos(a);
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_EXACT_ANGLE_HPP
