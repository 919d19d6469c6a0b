// Exact angle reduction: sin/cos of m*theta for any int64 position m, correct to the double result.
//
// The angle m*theta reaches 2^31 rad at int32 positions, where one ulp of a double is 2^-22 rad and
// one ulp of a float is 256 rad. So we never form the angle. We work in turns: f = theta / (2 pi) is
// held as a double-double (about 106 bits), m is split into two 32-bit halves that are exact in a
// double, each partial product is formed exactly with fma (TwoProduct), and only the fractional
// part of every piece is kept. The sum of those fractions, reduced to [-1/2, 1/2) turns, is accurate
// to about 2^-100 turns (pieces accumulated in double-double); converting it to radians and calling
// sin/cos in double (with a first-order correction for the low part) gives values within about one
// double ulp of the truth, i.e. correctly rounded to float except on near-ties.
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

// x minus the nearest integer: exact in binary floating point (the result keeps a subset of x's
// significand bits), and in [-1/2, 1/2] so small pieces stay small.
inline double centred_frac(double x) noexcept { return x - std::nearbyint(x); }

// Error-free sum: a + b = s + e exactly (Knuth's TwoSum, no ordering assumption).
inline void two_sum(double a, double b, double& s, double& e) noexcept {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

// Accumulates fractional pieces of the product in double-double, keeping only the fraction.
struct TurnAccumulator {
  double hi = 0.0;
  double lo = 0.0;
  void add(double x) noexcept {
    double s = 0.0;
    double e = 0.0;
    two_sum(hi, centred_frac(x), s, e);
    hi = centred_frac(s);
    lo += e;
  }
  // a*b as the exact pair (p, e) with fma, both pieces reduced.
  void add_product(double a, double b) noexcept {
    const double p = a * b;
    add(p);
    add(std::fma(a, b, -p));
  }
};

// The angle m * (2 pi f) reduced to about [-pi, pi], in radians, as a double-double hi + lo.
inline void reduced_angle(std::int64_t m, Turns f, double& hi, double& lo) noexcept {
  // m = mh * 2^32 + ml with 0 <= ml < 2^32 and |mh| <= 2^31: both halves are exact doubles.
  const auto um = static_cast<std::uint64_t>(m);
  const double ml = static_cast<double>(um & 0xffffffffu);
  const double mh = std::ldexp(static_cast<double>(static_cast<std::int32_t>(um >> 32)), 32);
  TurnAccumulator t;
  t.add_product(mh, f.hi);
  t.add_product(mh, f.lo);
  t.add_product(ml, f.hi);
  t.add(ml * f.lo);  // < 2^-21 in size: its rounding error is below 2^-74 turns
  double th = 0.0;
  double tl = 0.0;
  two_sum(t.hi, t.lo, th, tl);
  // (th + tl) * (kTwoPiHi + kTwoPiLo), dropping the tl * kTwoPiLo term (< 2^-100).
  hi = th * kTwoPiHi;
  lo = std::fma(th, kTwoPiHi, -hi) + (th * kTwoPiLo + tl * kTwoPiHi);
}

// sin and cos of m * 2 pi f: sin(hi + lo) = sin(hi) + cos(hi) lo to first order (lo < 2^-50).
inline void exact_sincos(std::int64_t m, Turns f, double& s, double& c) noexcept {
  double hi = 0.0;
  double lo = 0.0;
  reduced_angle(m, f, hi, lo);
  const double sh = std::sin(hi);
  const double ch = std::cos(hi);
  s = std::fma(ch, lo, sh);
  c = std::fma(-sh, lo, ch);
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_EXACT_ANGLE_HPP
