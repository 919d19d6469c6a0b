// Numerical edge cases of the rotation itself, as rotary documents them (README "Numerical edge
// cases"): NaN and infinities stay in their pair, Inf * 0, signed zeros, subnormals (not flushed,
// exactly rounded; MXCSR), magnitudes near the largest values; every ISA against the scalar kernel.
// Positions at the integer limits and zero-sized calls: test_edge_integers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <rotary/rotary.hpp>

#include "edge_cases.hpp"
#include "support.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define ROTARY_TEST_HAVE_MXCSR 1
#else
#define ROTARY_TEST_HAVE_MXCSR 0
#endif

namespace {

using rotary::Direction;
using rotary::Isa;
using rotary::Pairing;
using rotary::Positions;
using rotary::RotarySpec;
using rotary::StridedLayout;
using rotary_test::IsaScope;
using rotary_test::narrow;
using rotary_test::same_bits;
using rotary_test::supported_isas;

using edge_cases::C;
using edge_cases::widen;
using edge_cases::is_nan;
using edge_cases::matches;
using edge_cases::show;
using edge_cases::from_bits;
using edge_cases::Block;
using edge_cases::rotate;
using edge_cases::formula;
using edge_cases::all_match;
using edge_cases::dtype;

// As documented:
//   * NaN and +-Inf stay in their own pair: every other pair, head, token and every pass-through
//     coordinate comes out exactly as without them (pass-through bits are copied, NaN payloads and
//     signalling 16-bit NaNs included).
//   * Inf * 0: a pair is y0 = fma(x0, c, -(x1 s)), y1 = fma(x1, c, x0 s). At position 0 (c = 1,
//     s = +0) the rotation is the identity on finite values, but an infinite coordinate makes its
//     partner NaN: (a, Inf) -> (NaN, Inf), because Inf * 0 = NaN. Elsewhere (c, s != 0) an infinite
//     coordinate gives +-Inf in both outputs, and (Inf, Inf) gives one NaN (Inf - Inf).
//   * Signed zeros follow IEEE sums in that fixed order; at position 0, (-0, -0) -> (+0, -0) and
//     (+0, -0) -> (+0, +0): the identity rotation is not a bitwise identity on zeros.
//   * Subnormals are not flushed: f32 and f64 results are the exactly rounded values of that formula
//     (checked against a long double model), f16 keeps its subnormals; bf16 alone flushes
//     f32-subnormal results to a signed zero (documented in dtype.hpp: what AVX512-BF16 does).
//     The kernels never touch MXCSR; a caller who sets FTZ/DAZ gets them in every kernel alike.
//   * Near FLT_MAX: no intermediate overflow beyond the rounded product x1*s (|s| <= 1 unless an
//     attention factor > 1 is folded into the table); a result overflows to Inf exactly when the
//     formula's rounded value exceeds FLT_MAX. With a folded attention factor a > 1, x*s*a can
//     overflow although the rotated value is finite (a spurious Inf, documented and tested).
// Every case runs on every ISA this machine has (set_max_isa) and must equal the scalar kernel bit
// for bit (NaN: only NaN-ness, payloads are not part of the contract).

// ---- 1. NaN and infinities stay in their pair ---------------------------------------------------

template <class T>
void non_finite_case(Pairing pairing) {
  const std::int64_t head_dim = 34;
  const std::int64_t rotary_dim = 18;
  const rotary::Rope<T> rope(RotarySpec(head_dim, pairing, 10000.0, rotary_dim), 2048);
  const Block b{3, head_dim, {0, 7, 1000}};
  std::mt19937_64 rng(rotary_test::seed());
  std::vector<T> x =
      rotary_test::random_vector<T>(static_cast<std::size_t>(b.tokens() * b.heads * head_dim), rng);
  const std::int64_t h = rotary_dim / 2;
  const auto at = [&](std::int64_t t, std::int64_t hd, std::int64_t i) {
    return static_cast<std::size_t>((t * b.heads + hd) * head_dim + i);
  };
  const auto first = [&](std::int64_t j) { return pairing == Pairing::interleaved ? 2 * j : j; };
  const auto second = [&](std::int64_t j) { return pairing == Pairing::interleaved ? 2 * j + 1 : j + h; };
  const T inf = std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // A NaN with a payload, and for 16-bit storage a signalling NaN pattern: pass-through copies bits.
  T payload_nan = nan;
  if constexpr (std::is_same_v<T, float>) {
    const std::uint32_t u = 0x7fc12345u;
    std::memcpy(&payload_nan, &u, sizeof u);
  } else if constexpr (std::is_same_v<T, double>) {
    const std::uint64_t u = 0xfff8000012345678ull;
    std::memcpy(&payload_nan, &u, sizeof u);
  } else if constexpr (std::is_same_v<T, rotary::f16>) {
    payload_nan = from_bits<T>(0x7c01);  // signalling
  } else {
    payload_nan = from_bits<T>(0x7f81);  // signalling
  }
  x[at(1, 1, first(2))] = nan;                // position 7
  x[at(1, 1, second(5))] = inf;               // position 7, another pair of the same row
  x[at(2, 0, first(0))] = -inf;               // position 1000
  x[at(0, 2, second(3))] = inf;               // position 0: partner becomes NaN
  x[at(0, 1, first(8))] = inf;                // position 0, the other coordinate
  x[at(2, 2, rotary_dim + 1)] = payload_nan;  // pass-through
  x[at(1, 0, head_dim - 1)] = -inf;           // pass-through, last element of a row
  const std::vector<T> want = formula(rope, b, x, Direction::forward);

  // The documented outcomes: NaN-ness and infinity here; the signs of the infinities follow the signs
  // of c and s and are checked through the formula below.
  EXPECT_TRUE(is_nan(want[at(1, 1, first(2))]) && is_nan(want[at(1, 1, second(2))]));
  EXPECT_TRUE(std::isinf(static_cast<double>(widen(want[at(1, 1, first(5))]))));
  EXPECT_TRUE(std::isinf(static_cast<double>(widen(want[at(1, 1, second(5))]))));
  EXPECT_TRUE(is_nan(want[at(0, 2, first(3))])) << "position 0: x0 * 1 - Inf * 0 is NaN";
  EXPECT_TRUE(same_bits(want[at(0, 2, second(3))], inf));
  EXPECT_TRUE(same_bits(want[at(0, 1, first(8))], inf));
  EXPECT_TRUE(is_nan(want[at(0, 1, second(8))]));

  // Every pair with two finite inputs has finite outputs; pass-through equals the input's bits.
  std::size_t non_finite = 0;
  for (std::int64_t t = 0; t < b.tokens(); ++t)
    for (std::int64_t hd = 0; hd < b.heads; ++hd) {
      for (std::int64_t j = 0; j < h; ++j) {
        const bool clean = std::isfinite(static_cast<double>(widen(x[at(t, hd, first(j))]))) &&
                           std::isfinite(static_cast<double>(widen(x[at(t, hd, second(j))])));
        const bool out_finite = std::isfinite(static_cast<double>(widen(want[at(t, hd, first(j))]))) &&
                                std::isfinite(static_cast<double>(widen(want[at(t, hd, second(j))])));
        EXPECT_EQ(clean, out_finite) << "token " << t << " head " << hd << " pair " << j;
        non_finite += clean ? 0 : 1;
      }
    }
  EXPECT_EQ(non_finite, 5u);

  for (const Isa isa : supported_isas())
    for (const Direction dir : {Direction::forward, Direction::inverse})
      for (const bool in_place : {false, true}) {
        const std::vector<T> expect = dir == Direction::forward ? want : formula(rope, b, x, dir);
        const std::vector<T> got = rotate(isa, rope, b, x, dir, in_place);
        EXPECT_TRUE(all_match(got, expect)) << dtype<T>() << " " << rotary::to_string(isa) << " "
                                            << rotary::to_string(pairing) << (in_place ? " in place" : "");
        // Pass-through coordinates: the input's bits exactly, NaN payloads and sNaN included.
        for (std::int64_t r = 0; r < b.tokens() * b.heads; ++r)
          for (std::int64_t i = rotary_dim; i < head_dim; ++i) {
            const std::size_t k = static_cast<std::size_t>(r * head_dim + i);
            EXPECT_TRUE(same_bits(got[k], x[k])) << rotary::to_string(isa) << " pass-through " << k;
          }
      }
}

TEST(EdgeNonFinite, StayInTheirPair) {
  for (const Pairing p : {Pairing::interleaved, Pairing::half_split}) {
    non_finite_case<float>(p);
    non_finite_case<double>(p);
    non_finite_case<rotary::f16>(p);
    non_finite_case<rotary::bf16>(p);
  }
}

// The Inf * 0 table, literally, on one pair (head_dim 2, theta_0 = 1 rad: position 1 has
// c = cos 1 > 0, s = sin 1 > 0).
template <class T>
void inf_times_zero() {
  const rotary::Rope<T> rope(RotarySpec(2, Pairing::interleaved), 4);
  ASSERT_TRUE(rope.cache().row(0)[0] == C<T>(1) && rope.cache().row(0)[1] == C<T>(0) &&
              !std::signbit(rope.cache().row(0)[1]))
      << "position 0 must have c = 1, s = +0 exactly";
  const T inf = std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T a = T(0.75f);
  struct Row {
    std::int64_t position;
    Direction dir;
    T x0, x1;
    T y0, y1;  // NaN means "any NaN"
  };
  const Row table[] = {
      {0, Direction::forward, a, inf, nan, inf},  // a*1 - Inf*0 = NaN; Inf*1 + a*0 = Inf
      {0, Direction::forward, inf, a, inf, nan},  // Inf*1 - a*0 = Inf; a*1 + Inf*0 = NaN
      {0, Direction::forward, -inf, a, -inf, nan},
      {0, Direction::forward, inf, inf, nan, nan},
      {0, Direction::inverse, a, inf, nan, inf},  // s = -0: same NaN
      {0, Direction::forward, nan, a, nan, nan},
      {0, Direction::forward, a, nan, nan, nan},
      {1, Direction::forward, a, inf, -inf, inf},  // a c - Inf s = -Inf; Inf c + a s = +Inf
      {1, Direction::forward, inf, a, inf, inf},
      {1, Direction::forward, inf, inf, nan, inf},  // Inf c - Inf s = NaN; Inf c + Inf s = Inf
      {1, Direction::forward, inf, -inf, inf, nan},
      {1, Direction::inverse, a, inf, inf, inf},  // s -> -s
  };
  for (const Isa isa : supported_isas())
    for (const Row& r : table) {
      const Block b{1, 2, {r.position}};
      const std::vector<T> got = rotate(isa, rope, b, {r.x0, r.x1}, r.dir, false);
      EXPECT_TRUE(matches(got[0], r.y0) && matches(got[1], r.y1))
          << dtype<T>() << " " << rotary::to_string(isa) << " position " << r.position << " (" << show(r.x0)
          << ", " << show(r.x1) << ") -> (" << show(got[0]) << ", " << show(got[1]) << "), want ("
          << show(r.y0) << ", " << show(r.y1) << ")";
    }
}

TEST(EdgeNonFinite, InfTimesZeroTable) {
  inf_times_zero<float>();
  inf_times_zero<double>();
  inf_times_zero<rotary::f16>();
  inf_times_zero<rotary::bf16>();
}

// ---- 2. signed zeros ----------------------------------------------------------------------------

template <class T>
void signed_zeros() {
  const rotary::Rope<T> rope(RotarySpec(2, Pairing::half_split), 4);
  const T pz = T(0.0f);
  const T nz = T(-0.0f);
  const T one = T(1.0f);
  // Position 0, forward (c = 1, s = +0): y0 = x0 + -(x1 * +0), y1 = x1 + x0 * +0, IEEE signed sums.
  struct Row {
    T x0, x1, y0, y1;
  };
  const Row forward0[] = {{pz, pz, pz, pz}, {pz, nz, pz, pz},   {nz, pz, nz, pz},
                          {nz, nz, pz, nz}, {one, nz, one, pz}, {nz, one, nz, one}};
  // Inverse (s = -0): y0 = x0 + -(x1 * -0), y1 = x1 + x0 * -0.
  const Row inverse0[] = {{pz, pz, pz, pz}, {pz, nz, pz, nz}, {nz, pz, pz, pz}, {nz, nz, nz, pz}};
  std::vector<T> zeros;
  for (const T u : {pz, nz, one, T(-1.0f)})
    for (const T v : {pz, nz}) {
      zeros.push_back(u);
      zeros.push_back(v);
      zeros.push_back(v);
      zeros.push_back(u);
    }
  const Block all{1, 2, std::vector<std::int64_t>(zeros.size() / 2, 0)};
  const Block moved{1, 2, std::vector<std::int64_t>(zeros.size() / 2, 3)};
  for (const Isa isa : supported_isas()) {
    for (const Row& r : forward0) {
      const std::vector<T> got = rotate(isa, rope, Block{1, 2, {0}}, {r.x0, r.x1}, Direction::forward, false);
      EXPECT_TRUE(same_bits(got[0], r.y0) && same_bits(got[1], r.y1))
          << dtype<T>() << " " << rotary::to_string(isa) << " forward (" << show(r.x0) << ", " << show(r.x1)
          << ") -> (" << show(got[0]) << ", " << show(got[1]) << ")";
    }
    for (const Row& r : inverse0) {
      const std::vector<T> got = rotate(isa, rope, Block{1, 2, {0}}, {r.x0, r.x1}, Direction::inverse, true);
      EXPECT_TRUE(same_bits(got[0], r.y0) && same_bits(got[1], r.y1))
          << dtype<T>() << " " << rotary::to_string(isa) << " inverse (" << show(r.x0) << ", " << show(r.x1)
          << ") -> (" << show(got[0]) << ", " << show(got[1]) << ")";
    }
    // Every combination at positions 0 and 3, both directions: the formula's bits, signs included.
    for (const Block* b : {&all, &moved})
      for (const Direction dir : {Direction::forward, Direction::inverse})
        EXPECT_TRUE(all_match(rotate(isa, rope, *b, zeros, dir, false), formula(rope, *b, zeros, dir)))
            << dtype<T>() << " " << rotary::to_string(isa) << " position " << b->positions[0];
  }
}

TEST(EdgeSignedZero, SignsFollowTheFormula) {
  signed_zeros<float>();
  signed_zeros<double>();
  signed_zeros<rotary::f16>();
  signed_zeros<rotary::bf16>();
}

// ---- 3. subnormals, MXCSR, and magnitudes near the top of the range ------------------------------

#if ROTARY_TEST_HAVE_MXCSR
constexpr unsigned kFtz = 0x8000;      // MXCSR flush-to-zero
constexpr unsigned kDaz = 0x0040;      // MXCSR denormals-are-zero
constexpr unsigned kControl = 0xffc0;  // MXCSR modes (DAZ, exception masks, rounding, FTZ); the low 6
                                       // bits are sticky exception flags that arithmetic sets
#endif

// The exact f32 pair: y0 = round(x0 c - round(x1 s)) in long double, where x0 c (48 bits) is exact;
// returns false if the long double sum itself was inexact (then the model would round twice).
bool exact_f32_model(float x0, float x1, float c, float s, float& y0, float& y1) {
  const auto one = [](float a, float b, float p, float& y) {
    const long double u = static_cast<long double>(a) * static_cast<long double>(b);  // exact
    const long double v = static_cast<long double>(p);
    const volatile long double sum = u + v;
    const long double bb = sum - u;
    const long double err = (u - (sum - bb)) + (v - bb);
    y = static_cast<float>(sum);
    return err == 0.0L || std::isinf(static_cast<double>(v));
  };
  const float p1 = static_cast<float>(static_cast<long double>(x1) * static_cast<long double>(s));
  const float p0 = static_cast<float>(static_cast<long double>(x0) * static_cast<long double>(s));
  const bool exact0 = one(x0, c, -p1, y0);
  const bool exact1 = one(x1, c, p0, y1);
  return exact0 && exact1;
}

std::vector<float> random_scaled(std::size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (auto& x : v) x = neg(rng) ? -mag(rng) : mag(rng);
  return v;
}

TEST(EdgeSubnormal, F32NotFlushedAndExactlyRounded) {
#if ROTARY_TEST_HAVE_MXCSR
  const unsigned csr = _mm_getcsr() & kControl;
  ASSERT_EQ(csr & (kFtz | kDaz), 0u) << "the test process starts with FTZ/DAZ set";
#endif
  std::mt19937_64 rng(rotary_test::seed() + 1);
  for (const Pairing p : {Pairing::interleaved, Pairing::half_split}) {
    const rotary::Rope<float> rope(RotarySpec(70, p, 10000.0, 64), 4096);
    const Block b{3, 70, rotary_test::random_positions(17, 4095, rng)};
    // |x| in [2^-149, 2^-126): every input subnormal.
    const std::vector<float> x =
        random_scaled(static_cast<std::size_t>(b.tokens() * 3 * 70), rng, 0x1p-149f, 0x1p-126f);
    const std::vector<float> want = formula(rope, b, x, Direction::forward);
    std::size_t checked = 0;
    std::size_t subnormal_out = 0;
    std::size_t total = 0;
    for (std::int64_t t = 0; t < b.tokens(); ++t) {
      const float* cs = rope.cache().row(b.positions[static_cast<std::size_t>(t)]);
      for (std::int64_t hd = 0; hd < 3; ++hd)
        for (std::int64_t j = 0; j < 32; ++j) {
          const std::size_t o = static_cast<std::size_t>((t * 3 + hd) * 70);
          const std::size_t i0 = o + static_cast<std::size_t>(p == Pairing::interleaved ? 2 * j : j);
          const std::size_t i1 = o + static_cast<std::size_t>(p == Pairing::interleaved ? 2 * j + 1 : j + 32);
          float m0 = 0.0f;
          float m1 = 0.0f;
          ++total;
          if (!exact_f32_model(x[i0], x[i1], cs[j], cs[32 + j], m0, m1)) continue;
          ++checked;
          EXPECT_TRUE(same_bits(want[i0], m0) && same_bits(want[i1], m1)) << "pair " << j;
          subnormal_out += (m0 != 0.0f && std::fabs(m0) < FLT_MIN) + (m1 != 0.0f && std::fabs(m1) < FLT_MIN);
        }
    }
    EXPECT_GE(checked, total * 9 / 10) << "the long double model was inexact too often";
    EXPECT_GE(subnormal_out, checked) << "most results of subnormal inputs are subnormal";
    for (const Isa isa : supported_isas()) {
      EXPECT_TRUE(all_match(rotate(isa, rope, b, x, Direction::forward, false), want))
          << rotary::to_string(isa);
      EXPECT_TRUE(all_match(rotate(isa, rope, b, x, Direction::inverse, true),
                            formula(rope, b, x, Direction::inverse)))
          << rotary::to_string(isa);
#if ROTARY_TEST_HAVE_MXCSR
      EXPECT_EQ(_mm_getcsr() & kControl, csr) << rotary::to_string(isa) << " changed the MXCSR modes";
#endif
      // Position 0 is the identity: subnormals come back unchanged (no DAZ on input, no FTZ on output).
      const Block zero{3, 70, std::vector<std::int64_t>(17, 0)};
      const std::vector<float> id = rotate(isa, rope, zero, x, Direction::forward, false);
      for (std::size_t i = 0; i < x.size(); ++i)
        ASSERT_TRUE(same_bits(id[i], x[i])) << rotary::to_string(isa) << " " << i;
    }
    std::printf(
        "[          ] f32 subnormal inputs (%s): %zu of %zu pairs checked against the exact model, %zu "
        "subnormal outputs\n",
        std::string(rotary::to_string(p)).c_str(), checked, total, subnormal_out);
  }
}

// f64, f16, bf16 subnormals: the formula's bits on every ISA; what survives is documented per type.
template <class T>
void subnormals_other(double lo, double hi, bool flushed) {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  const rotary::Rope<T> rope(RotarySpec(66, Pairing::half_split, 10000.0, 64), 512);
  const Block b{3, 66, rotary_test::random_positions(9, 511, rng)};
  const std::size_t n = static_cast<std::size_t>(b.tokens() * 3 * 66);
  std::vector<T> x(n);
  std::uniform_real_distribution<double> mag(lo, hi);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>((i % 3 == 0 ? -1.0 : 1.0) * mag(rng));
  const std::vector<T> want = formula(rope, b, x, Direction::forward);
  const double smallest_normal = std::is_same_v<T, rotary::f16> ? 0x1p-14
                                 : std::is_same_v<T, double>    ? DBL_MIN
                                                                : FLT_MIN;
  std::size_t subnormal_out = 0;
  std::size_t zero_out = 0;
  const auto rotated = [](std::size_t i) { return i % 66 < 64; };  // pass-through: the last 2 of a row
  for (std::size_t i = 0; i < n; ++i) {
    const double v = std::fabs(static_cast<double>(widen(want[i])));
    subnormal_out += rotated(i) && v != 0.0 && v < smallest_normal;
    zero_out += rotated(i) && v == 0.0;
  }
  const std::size_t n_rotated = n / 66 * 64;
  if (flushed) {
    EXPECT_EQ(zero_out, n_rotated) << dtype<T>() << ": f32-subnormal results flush to zero";
  } else {
    EXPECT_GE(subnormal_out, n_rotated / 2) << dtype<T>() << ": subnormal results survive";
  }
  const Block zero{3, 66, std::vector<std::int64_t>(9, 0)};
  for (const Isa isa : supported_isas()) {
    EXPECT_TRUE(all_match(rotate(isa, rope, b, x, Direction::forward, false), want))
        << dtype<T>() << " " << rotary::to_string(isa);
    const std::vector<T> id = rotate(isa, rope, zero, x, Direction::forward, true);
    for (std::size_t i = 0; i < n; ++i) {
      // Position 0: the identity, except that bf16 turns its (f32-subnormal) rotated values into
      // signed zeros; pass-through coordinates are copied, never converted.
      const T expect =
          flushed && rotated(i) ? T(std::signbit(static_cast<float>(widen(x[i]))) ? -0.0f : 0.0f) : x[i];
      ASSERT_TRUE(same_bits(id[i], expect)) << dtype<T>() << " " << rotary::to_string(isa) << " " << i << ": "
                                            << show(id[i]) << " from " << show(x[i]);
    }
  }
  std::printf("[          ] %s subnormal inputs: %zu of %zu rotated outputs subnormal, %zu zero\n",
              dtype<T>(), subnormal_out, n_rotated, zero_out);
}

TEST(EdgeSubnormal, F64F16Bf16) {
  subnormals_other<double>(0x1p-1074, 0x1p-1023, false);
  subnormals_other<rotary::f16>(0x1p-24, 0x1p-15, false);
  subnormals_other<rotary::bf16>(0x1p-133, 0x1p-127, true);
}

#if ROTARY_TEST_HAVE_MXCSR
// A caller that sets FTZ and DAZ (common in inference engines) gets them in every kernel alike:
// rotary neither overrides nor restores the caller's MXCSR.
TEST(EdgeSubnormal, CallerFtzDazAppliesToEveryIsa) {
  struct Restore {
    unsigned csr = _mm_getcsr();
    ~Restore() { _mm_setcsr(csr); }
  } restore;
  std::mt19937_64 rng(rotary_test::seed() + 3);
  const rotary::Rope<float> rope(RotarySpec(34, Pairing::interleaved), 64);
  const Block b{3, 34, {5, 9, 60}};
  const std::vector<float> x = random_scaled(static_cast<std::size_t>(3 * 3 * 34), rng, 0x1p-149f, 0x1p-126f);
  _mm_setcsr(restore.csr | kFtz | kDaz);
  const std::vector<float> ref = rotate(Isa::scalar, rope, b, x, Direction::forward, false);
  for (const float v : ref) EXPECT_EQ(v, 0.0f) << "FTZ/DAZ: subnormal inputs are read as zero";
  for (const Isa isa : supported_isas()) {
    EXPECT_TRUE(all_match(rotate(isa, rope, b, x, Direction::forward, false), ref)) << rotary::to_string(isa);
    EXPECT_EQ(_mm_getcsr() & kControl, (restore.csr | kFtz | kDaz) & kControl) << rotary::to_string(isa);
  }
}
#endif

// Near FLT_MAX, with the table's own c, s (|c|, |s| <= 1): the output is the exactly rounded
// formula (overflowing to Inf only when that rounding does), so never Inf where the exact rotation
// is below FLT_MAX by more than the product's rounding.
TEST(EdgeHuge, F32NearFltMax) {
  std::mt19937_64 rng(rotary_test::seed() + 4);
  const rotary::Rope<float> rope(RotarySpec(64, Pairing::half_split), 4096);
  const Block b{2, 64, rotary_test::random_positions(33, 4095, rng)};
  const std::vector<float> x =
      random_scaled(static_cast<std::size_t>(b.tokens() * 2 * 64), rng, 0.5f * FLT_MAX, FLT_MAX);
  const std::vector<float> want = formula(rope, b, x, Direction::forward);
  std::size_t overflows = 0;
  std::size_t checked = 0;
  for (std::int64_t t = 0; t < b.tokens(); ++t) {
    const float* cs = rope.cache().row(b.positions[static_cast<std::size_t>(t)]);
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t j = 0; j < 32; ++j) {
        const std::size_t i0 = static_cast<std::size_t>((t * 2 + r) * 64 + j);
        const std::size_t i1 = i0 + 32;
        float m0 = 0.0f;
        float m1 = 0.0f;
        if (!exact_f32_model(x[i0], x[i1], cs[j], cs[32 + j], m0, m1)) continue;
        ++checked;
        EXPECT_TRUE(same_bits(want[i0], m0) && same_bits(want[i1], m1));
        // The ideal rotation with these c, s, no intermediate rounding.
        const long double e0 =
            static_cast<long double>(x[i0]) * cs[j] - static_cast<long double>(x[i1]) * cs[32 + j];
        const long double e1 =
            static_cast<long double>(x[i1]) * cs[j] + static_cast<long double>(x[i0]) * cs[32 + j];
        for (const auto& [y, e] : {std::pair<float, long double>{want[i0], e0}, {want[i1], e1}}) {
          const long double a = std::fabs(e);
          if (a < static_cast<long double>(FLT_MAX) * (1.0L - 0x1p-22L)) {
            EXPECT_TRUE(std::isfinite(y)) << "spurious Inf";
          }
          if (a > static_cast<long double>(FLT_MAX) * (1.0L + 0x1p-22L)) {
            EXPECT_TRUE(std::isinf(y));
          }
          overflows += std::isinf(y);
        }
      }
  }
  EXPECT_GT(overflows, 0u) << "some rotated values do exceed FLT_MAX (|y| can reach sqrt(2) max |x|)";
  for (const Isa isa : supported_isas())
    EXPECT_TRUE(all_match(rotate(isa, rope, b, x, Direction::forward, false), want))
        << rotary::to_string(isa);
  std::printf(
      "[          ] near FLT_MAX: %zu pairs checked against the exact model, %zu outputs overflow (true "
      "value > FLT_MAX)\n",
      checked, overflows);
}

// A folded attention factor a > 1 scales c and s: the product x1 * s can overflow although the
// rotated value is finite. rotary does not guard against it (documented); every ISA does the same.
TEST(EdgeHuge, FoldedAttentionFactorCanOverflowTheProduct) {
  RotarySpec spec(2, Pairing::interleaved);
  spec.frequencies.attention_factor = 1.5;
  const rotary::Rope<float> rope(spec, 8);
  // Position 1: theta_0 = 1 rad, c = 1.5 cos 1 = 0.81, s = 1.5 sin 1 = 1.26.
  const float big = 0.9f * FLT_MAX;
  const Block b{1, 2, {1}};
  const std::vector<float> x = {big, big};
  const float* cs = rope.cache().row(1);
  const long double ideal0 = static_cast<long double>(big) * cs[0] - static_cast<long double>(big) * cs[1];
  ASSERT_LT(std::fabs(ideal0), static_cast<long double>(FLT_MAX)) << "y0 is finite in exact arithmetic";
  ASSERT_TRUE(std::isinf(big * cs[1])) << "but x1 * s overflows in float";
  for (const Isa isa : supported_isas()) {
    const std::vector<float> y = rotate(isa, rope, b, x, Direction::forward, false);
    EXPECT_TRUE(std::isinf(y[0]) && y[0] < 0.0f) << rotary::to_string(isa) << ": y0 = " << y[0];
    EXPECT_TRUE(std::isinf(y[1]) && y[1] > 0.0f) << rotary::to_string(isa) << ": y1 = " << y[1];
  }
}

template <class T>
void huge_other(double lo, double hi) {
  std::mt19937_64 rng(rotary_test::seed() + 5);
  const rotary::Rope<T> rope(RotarySpec(34, Pairing::interleaved, 10000.0, 30), 1024);
  const Block b{3, 34, rotary_test::random_positions(11, 1023, rng)};
  const std::size_t n = static_cast<std::size_t>(b.tokens() * 3 * 34);
  std::vector<T> x(n);
  std::uniform_real_distribution<double> mag(lo, hi);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>((i % 2 == 0 ? -1.0 : 1.0) * mag(rng));
  const std::vector<T> want = formula(rope, b, x, Direction::forward);
  std::size_t inf = 0;
  for (const T v : want) inf += std::isinf(static_cast<double>(widen(v)));
  EXPECT_GT(inf, 0u) << dtype<T>();
  for (const Isa isa : supported_isas())
    EXPECT_TRUE(all_match(rotate(isa, rope, b, x, Direction::forward, false), want))
        << dtype<T>() << " " << rotary::to_string(isa);
  std::printf("[          ] %s near its largest value: %zu of %zu outputs overflow\n", dtype<T>(), inf, n);
}

TEST(EdgeHuge, F64F16Bf16NearTheirLargestValues) {
  huge_other<double>(0.5 * DBL_MAX, DBL_MAX);
  huge_other<rotary::f16>(30000.0, 65504.0);  // computed in f32: only the final f16 rounding overflows
  huge_other<rotary::bf16>(1.0e38, 3.38e38);
}

}  // namespace
