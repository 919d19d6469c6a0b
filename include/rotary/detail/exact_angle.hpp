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
// Rounding by adding and subtracting 1.5 * 2^52 is exact under round-to-nearest and needs no libm
// call (std::nearbyint is one on baseline x86-64); |x| >= 2^52 is already an integer.
inline double centred_frac(double x) noexcept {
  constexpr double kRound = 0x1.8p52;
  if (!(std::fabs(x) < 0x1p52)) return 0.0;
  const double n = (x + kRound) - kRound;
  return x - n;
}

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

// m * f reduced to turns in about [-1/2, 1/2], as a double-double th + tl.
inline void reduced_turns(std::int64_t m, Turns f, double& th, double& tl) noexcept {
  // m = mh * 2^32 + ml with 0 <= ml < 2^32 and |mh| <= 2^31: both halves are exact doubles.
  const auto um = static_cast<std::uint64_t>(m);
  const double ml = static_cast<double>(um & 0xffffffffu);
  const double mh = static_cast<double>(static_cast<std::int32_t>(um >> 32)) * 0x1p32;
  if (mh == 0.0) {  // 0 <= m < 2^32, the common case: a short dependency chain
    const double p = ml * f.hi;
    const double e = std::fma(ml, f.hi, -p);  // |e| <= 2^-24: no reduction needed
    two_sum(centred_frac(p), e + ml * f.lo, th, tl);
    return;
  }
  TurnAccumulator t;
  t.add_product(mh, f.hi);
  t.add_product(mh, f.lo);
  t.add_product(ml, f.hi);
  t.add(ml * f.lo);  // < 2^-21 in size: its rounding error is below 2^-74 turns
  two_sum(t.hi, t.lo, th, tl);
}

// sin and cos on |x| <= pi/4 + tiny, by their Taylor series to x^19 / x^20 (truncation below
// 1e-19 there), evaluated by Horner in x^2: within about one double ulp.
inline void sincos_kernel(double x, double& s, double& c) noexcept {
  const double z = x * x;
  double ps = -1.0 / 121645100408832000.0;  // -1/19!
  ps = ps * z + 1.0 / 355687428096000.0;     // 1/17!
  ps = ps * z - 1.0 / 1307674368000.0;       // -1/15!
  ps = ps * z + 1.0 / 6227020800.0;          // 1/13!
  ps = ps * z - 1.0 / 39916800.0;            // -1/11!
  ps = ps * z + 1.0 / 362880.0;              // 1/9!
  ps = ps * z - 1.0 / 5040.0;                // -1/7!
  ps = ps * z + 1.0 / 120.0;                 // 1/5!
  ps = ps * z - 1.0 / 6.0;                   // -1/3!
  s = x + x * z * ps;
  double pc = 1.0 / 2432902008176640000.0;   // 1/20!
  pc = pc * z - 1.0 / 6402373705728000.0;    // -1/18!
  pc = pc * z + 1.0 / 20922789888000.0;      // 1/16!
  pc = pc * z - 1.0 / 87178291200.0;         // -1/14!
  pc = pc * z + 1.0 / 479001600.0;           // 1/12!
  pc = pc * z - 1.0 / 3628800.0;             // -1/10!
  pc = pc * z + 1.0 / 40320.0;               // 1/8!
  pc = pc * z - 1.0 / 720.0;                 // -1/6!
  pc = pc * z + 1.0 / 24.0;                  // 1/4!
  c = 1.0 - 0.5 * z + z * z * pc;
}

// sin and cos of m * 2 pi f. The turns are split into a quadrant q (multiples of 1/4 turn, exact)
// and a remainder r in [-1/8, 1/8] turn, i.e. |x| <= pi/4 rad, where the series converge fast;
// the low part x_lo (< 2^-50) enters to first order: sin(x + d) = sin x + cos x * d.
inline void exact_sincos(std::int64_t m, Turns f, double& s, double& c) noexcept {
  double th = 0.0;
  double tl = 0.0;
  reduced_turns(m, f, th, tl);
  const double q4 = 4.0 * th;                // exact
  const double q = (q4 + 0x1.8p52) - 0x1.8p52;  // nearest integer, |q4| <= 2 + tiny
  const double rh = (q4 - q) * 0.25;         // exact: in [-1/8, 1/8]
  const double xh = rh * kTwoPiHi;
  const double xl = std::fma(rh, kTwoPiHi, -xh) + (rh * kTwoPiLo + tl * kTwoPiHi);
  double sk = 0.0;
  double ck = 0.0;
  sincos_kernel(xh, sk, ck);
  const double sx = sk + ck * xl;
  const double cx = ck - sk * xl;
  switch (static_cast<int>(q) & 3) {  // q in {-2, ..., 2}; & 3 maps -1 -> 3, -2 -> 2
    case 0:
      s = sx;
      c = cx;
      break;
    case 1:
      s = cx;
      c = -sx;
      break;
    case 2:
      s = -sx;
      c = -cx;
      break;
    default:
      s = -cx;
      c = sx;
      break;
  }
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_EXACT_ANGLE_HPP
