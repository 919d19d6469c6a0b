// Exact angle reduction: sin/cos of m*theta for any int64 position m, correct to the double result.
//
// The angle m*theta reaches 2^31 rad at int32 positions, where one ulp of a double is 2^-22 rad and
// one ulp of a float is 256 rad. So we never form the angle. We work in turns: f = theta / (2 pi) is
// held as a double-double (about 106 bits), m is split into two 32-bit halves that are exact in a
// double, each partial product is formed exactly (TwoProduct, fp.hpp), and only the fractional
// part of every piece is kept. The sum of those fractions, reduced to [-1/2, 1/2) turns, is accurate
// to about 2^-100 turns (pieces accumulated in double-double); converting it to radians and calling
// sin/cos in double (with a first-order correction for the low part) gives values within about one
// double ulp of the truth, i.e. correctly rounded to float except on near-ties.
#ifndef ROTARY_DETAIL_EXACT_ANGLE_HPP
#define ROTARY_DETAIL_EXACT_ANGLE_HPP

#include "guard.hpp"

#include <cmath>
#include <cstdint>

#include "../types.hpp"
#include "fp.hpp"

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
  const double hi = opaque(theta * kInvTwoPiHi);
  const double err = product_error(theta, kInvTwoPiHi, hi);  // exact: theta*kInvTwoPiHi = hi + err
  const double lo = opaque(err + opaque(theta * kInvTwoPiLo));
  const double s = opaque(hi + lo);  // renormalise (Fast2Sum, |hi| >= |lo|)
  return {s, lo - opaque(s - hi)};
}

// x minus the nearest integer: exact in binary floating point (the result keeps a subset of x's
// significand bits), and in [-1/2, 1/2] so small pieces stay small. The integer comes from an
// int64 conversion (fp.hpp: no add-and-subtract of 1.5 * 2^52, which -fassociative-math folds to
// x and so would make every fraction 0); |x| >= 2^52 is already an integer.
inline double centred_frac(double x) noexcept {
  if (!(std::fabs(x) < 0x1p52)) return 0.0;
  return x - nearest_integer(x);
}

// Error-free sum: a + b = s + e exactly (Knuth's TwoSum, no ordering assumption). Each step goes
// through opaque(), so reassociation cannot rewrite (a + b) - a as b and e as 0.
inline void two_sum(double a, double b, double& s, double& e) noexcept {
  s = opaque(a + b);
  const double bb = opaque(s - a);
  e = opaque(a - opaque(s - bb)) + opaque(b - bb);
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
  // a*b as the exact pair (p, e), both pieces reduced.
  void add_product(double a, double b) noexcept {
    const double p = opaque(a * b);
    add(p);
    add(product_error(a, b, p));
  }
};

// m * f reduced to turns in about [-1/2, 1/2], as a double-double th + tl.
inline void reduced_turns(std::int64_t m, Turns f, double& th, double& tl) noexcept {
  // m = mh * 2^32 + ml with 0 <= ml < 2^32 and |mh| <= 2^31: both halves are exact doubles.
  const auto um = static_cast<std::uint64_t>(m);
  const double ml = static_cast<double>(um & 0xffffffffu);
  const double mh = static_cast<double>(static_cast<std::int32_t>(um >> 32)) * 0x1p32;
  if (mh == 0.0) {  // 0 <= m < 2^32, the common case: a short dependency chain
    const double p = opaque(ml * f.hi);
    const double e = product_error(ml, f.hi, p);  // |e| <= 2^-24: no reduction needed
    two_sum(centred_frac(p), e + opaque(ml * f.lo), th, tl);
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
// 1e-19 there), evaluated by Horner in x^2: within about one double ulp. Every product goes
// through opaque(): no flag (-ffp-contract=fast with FMA hardware, -fassociative-math) can fuse or
// reorder a step, so the double result is the same in every build.
inline void sincos_kernel(double x, double& s, double& c) noexcept {
  const double z = x * x;
  double ps = -1.0 / 121645100408832000.0;  // -1/19!
  ps = opaque(ps * z) + 1.0 / 355687428096000.0;     // 1/17!
  ps = opaque(ps * z) - 1.0 / 1307674368000.0;       // -1/15!
  ps = opaque(ps * z) + 1.0 / 6227020800.0;          // 1/13!
  ps = opaque(ps * z) - 1.0 / 39916800.0;            // -1/11!
  ps = opaque(ps * z) + 1.0 / 362880.0;              // 1/9!
  ps = opaque(ps * z) - 1.0 / 5040.0;                // -1/7!
  ps = opaque(ps * z) + 1.0 / 120.0;                 // 1/5!
  ps = opaque(ps * z) - 1.0 / 6.0;                   // -1/3!
  s = x + opaque(opaque(x * z) * ps);
  double pc = 1.0 / 2432902008176640000.0;   // 1/20!
  pc = opaque(pc * z) - 1.0 / 6402373705728000.0;    // -1/18!
  pc = opaque(pc * z) + 1.0 / 20922789888000.0;      // 1/16!
  pc = opaque(pc * z) - 1.0 / 87178291200.0;         // -1/14!
  pc = opaque(pc * z) + 1.0 / 479001600.0;           // 1/12!
  pc = opaque(pc * z) - 1.0 / 3628800.0;             // -1/10!
  pc = opaque(pc * z) + 1.0 / 40320.0;               // 1/8!
  pc = opaque(pc * z) - 1.0 / 720.0;                 // -1/6!
  pc = opaque(pc * z) + 1.0 / 24.0;                  // 1/4!
  c = opaque(1.0 - opaque(0.5 * z)) + opaque(opaque(z * z) * pc);
}

// sin and cos of m * 2 pi f. The turns are split into a quadrant q (multiples of 1/4 turn, exact)
// and a remainder r in [-1/8, 1/8] turn, i.e. |x| <= pi/4 rad, where the series converge fast;
// the low part x_lo (< 2^-50) enters to first order: sin(x + d) = sin x + cos x * d.
inline void exact_sincos(std::int64_t m, Turns f, double& s, double& c) noexcept {
  double th = 0.0;
  double tl = 0.0;
  reduced_turns(m, f, th, tl);
  const double q4 = 4.0 * th;                // exact
  const double q = nearest_integer(q4);      // |q4| <= 2 + tiny
  const double rh = (q4 - q) * 0.25;         // exact: in [-1/8, 1/8]
  const double xh = opaque(rh * kTwoPiHi);
  const double xl = product_error(rh, kTwoPiHi, xh) + opaque(opaque(rh * kTwoPiLo) + opaque(tl * kTwoPiHi));
  double sk = 0.0;
  double ck = 0.0;
  sincos_kernel(xh, sk, ck);
  const double sx = sk + opaque(ck * xl);
  const double cx = ck - opaque(sk * xl);
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

// Self-check, run once per process before the first table or cache-free rope is built: four
// known angles (both reduction paths, an int64 position, a negative one), against glibc's
// correctly reduced sin/cos of the same exact double angles. A build whose flags broke the
// reduction (a reassociation that the barriers above failed to stop, an unforeseen flag) gets
// rotary::error instead of a table of wrong rows. The inputs pass through volatile so the check
// runs the same machine code as the tables, not a compile-time evaluation of it.
inline bool exact_angle_works() noexcept {
  struct Known {
    std::int64_t m;
    double theta, sin, cos;
  };
  static const Known known[] = {
      {2147483647, 1.0, -0x1.7328434159860p-1, -0x1.60af33efcd1b2p-1},
      {1099511640121, 1.0, 0x1.b9e868b63c492p-1, -0x1.029368dc924e8p-1},
      {123456789, 0x1p-10, 0x1.ff146f36c5296p-1, 0x1.eaeb80d192469p-5},
      {-3000000000, 0x1.8p-9, 0x1.ff5b38375865ap-1, -0x1.9aa50b1fdd8aap-5},
  };
  for (const Known& k : known) {
    volatile std::int64_t m = k.m;
    volatile double theta = k.theta;
    double s = 0.0;
    double c = 0.0;
    exact_sincos(m, to_turns(theta), s, c);
    // One float ulp of 1 is 1.2e-7; a broken reduction is off by O(1). 1e-12 leaves room for any
    // libm and contraction differences and none for a wrong reduction.
    if (!(std::fabs(s - k.sin) <= 1e-12) || !(std::fabs(c - k.cos) <= 1e-12)) return false;
  }
  return true;
}

inline void check_exact_angle() {
  static const bool works = exact_angle_works();
  if (!works)
    throw error(
        "exact angle self-check failed: this build computes wrong cos/sin (a value-unsafe compiler "
        "flag such as -ffast-math or -fassociative-math defeated the error-free reduction in "
        "rotary/detail/exact_angle.hpp); please report the compiler and flags");
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_EXACT_ANGLE_HPP
