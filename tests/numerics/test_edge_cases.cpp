// Numerical edge cases, as rotary documents them (README "Numerical edge cases"):
//
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
//   * Positions: negative ones are rejected by every checked entry point (rotary::error naming the
//     value); INT32_MAX, 2^53+1, INT64_MAX - 1 and INT64_MAX are exact (checked against an
//     independent Payne-Hanek reduction written here), in tables and cache-free alike.
//   * Zero-sized calls (0 tokens, 0 batch or sequences, empty position and cu_seqlens arrays) touch
//     no memory and throw nothing; heads == 0 is an error where the head count is an argument.
// Every case runs on every ISA this machine has (set_max_isa) and must equal the scalar kernel bit
// for bit (NaN: only NaN-ness, payloads are not part of the contract).
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

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kInt32Min = std::numeric_limits<std::int32_t>::min();

// ---- values -------------------------------------------------------------------------------------

template <class T>
using C = rotary::compute_t<T>;

template <class T>
C<T> widen(T x) {
  return static_cast<C<T>>(x);
}

template <class T>
bool is_nan(T x) {
  return std::isnan(static_cast<double>(widen(x)));
}

// got equals want bit for bit, or both are NaN.
template <class T>
bool matches(T got, T want) {
  return is_nan(want) ? is_nan(got) : same_bits(got, want);
}

template <class T>
std::string show(T x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(widen(x)));
  return buf;
}

template <class T>
T from_bits(std::uint16_t b) {
  return Eigen::numext::bit_cast<T>(b);
}

// ---- running a call and recomputing it ------------------------------------------------------------

struct Block {
  std::int64_t heads;
  std::int64_t head_dim;
  std::vector<std::int64_t> positions;  // one per token
  std::int64_t tokens() const { return static_cast<std::int64_t>(positions.size()); }
  StridedLayout layout() const { return {tokens(), heads, heads * head_dim, head_dim}; }
};

// The public entry point under `isa`, out of place or in place (on a copy), int64 positions.
template <class T>
std::vector<T> rotate(Isa isa, const rotary::Rope<T>& rope, const Block& b, const std::vector<T>& x,
                      Direction dir, bool in_place) {
  const IsaScope scope(isa);
  std::vector<T> y = x;
  if (in_place) {
    rotary::apply_strided(rope, y.data(), b.layout(), Positions(b.positions), dir);
  } else {
    rotary::apply_strided(rope, x.data(), b.layout(), y.data(), b.layout(), Positions(b.positions), dir);
  }
  return y;
}

// The test's own evaluation of the documented formula with the table's cos/sin, per element.
template <class T>
void pair_formula(T x0, T x1, C<T> c, C<T> s, T& y0, T& y1) {
  const C<T> a = widen(x0);
  const C<T> b = widen(x1);
  y0 = narrow<T>(std::fma(a, c, -(b * s)));
  y1 = narrow<T>(std::fma(b, c, a * s));
}

template <class T>
std::vector<T> formula(const rotary::Rope<T>& rope, const Block& b, const std::vector<T>& x, Direction dir) {
  std::vector<T> y = x;
  const std::int64_t h = rope.rotary_dim() / 2;
  const bool il = rope.pairing() == Pairing::interleaved;
  for (std::int64_t t = 0; t < b.tokens(); ++t) {
    const C<T>* cs = rope.cache().row(b.positions[static_cast<std::size_t>(t)]);
    for (std::int64_t hd = 0; hd < b.heads; ++hd) {
      const std::size_t o = static_cast<std::size_t>((t * b.heads + hd) * b.head_dim);
      for (std::int64_t j = 0; j < h; ++j) {
        const std::size_t i0 = o + static_cast<std::size_t>(il ? 2 * j : j);
        const std::size_t i1 = o + static_cast<std::size_t>(il ? 2 * j + 1 : j + h);
        const C<T> s = dir == Direction::inverse ? -cs[h + j] : cs[h + j];
        pair_formula<T>(x[i0], x[i1], cs[j], s, y[i0], y[i1]);
      }
    }
  }
  return y;
}

// Every element of got against want (NaN-aware); reports the first few mismatches.
template <class T>
::testing::AssertionResult all_match(const std::vector<T>& got, const std::vector<T>& want) {
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!matches(got[i], want[i]) && bad++ < 4)
      r << "element " << i << ": got " << show(got[i]) << ", want " << show(want[i]) << "; ";
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << bad << " mismatches";
}

template <class T>
const char* dtype() {
  return rotary::dtype_name<T>().data();
}

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

// ---- 4. positions at the integer limits ---------------------------------------------------------

// cos/sin(m theta) for any int64 m, independent of rotary's double-double reduction (Payne-Hanek):
// theta = M 2^E exactly (M an integer < 2^53), so m theta / (2 pi) = |m| M (2/pi) 2^(E-2) with 2/pi
// as its first 256 bits (0.a2f9836e...; error < 2^-256): an exact integer product of < 2^372, whose
// 64 bits below the binary point are the angle in turns (error < 2^-63 turns); sinl/cosl in long
// double on an angle reduced to [-pi, pi] finish it (about 1e-18 absolute).
__extension__ typedef unsigned __int128 U128;
constexpr std::uint64_t kTwoOverPi[4] = {0xa2f9836e4e441529ull, 0xfc2757d1f534ddc0ull, 0xdb6295993c439041ull,
                                         0xfe5163abdebbc561ull};  // most significant first

void reference_sincos(std::int64_t m, double theta, long double& s, long double& c) {
  if (m == 0 || theta == 0.0) {
    s = 0.0L;
    c = 1.0L;
    return;
  }
  int e = 0;
  const double f = std::frexp(theta, &e);  // theta = f 2^e, f in [0.5, 1)
  const auto mant = static_cast<std::uint64_t>(std::ldexp(f, 53));
  const int exp2 = e - 53;  // theta = mant 2^exp2
  const U128 am = m < 0 ? static_cast<U128>(-(m + 1)) + 1 : static_cast<U128>(m);
  const U128 n = am * mant;
  const std::uint64_t nl[2] = {static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(n >> 64)};
  std::uint64_t p[6] = {0, 0, 0, 0, 0, 0};  // n * K, little-endian limbs; K = 2/pi * 2^256
  for (int i = 0; i < 2; ++i) {
    U128 carry = 0;
    for (int j = 0; j < 4; ++j) {
      const U128 t = static_cast<U128>(nl[i]) * kTwoOverPi[3 - j] + p[i + j] + carry;
      p[i + j] = static_cast<std::uint64_t>(t);
      carry = t >> 64;
    }
    p[i + 4] = static_cast<std::uint64_t>(carry);
  }
  // turns = P 2^(exp2 - 2 - 256): the fraction is bits [point - 64, point) of P, point = 258 - exp2.
  const int lowest = 258 - exp2 - 64;
  std::uint64_t frac = 0;
  for (int k = 0; k < 64; ++k) {
    const int bit = lowest + k;
    if (bit >= 0 && bit < 384 && ((p[bit / 64] >> (bit % 64)) & 1u)) frac |= std::uint64_t{1} << k;
  }
  long double turns = static_cast<long double>(frac) * 0x1p-64L;  // exact
  if (turns > 0.5L) turns -= 1.0L;
  if (m < 0) turns = -turns;
  const long double angle = turns * 6.283185307179586476925286766559005768L;
  s = std::sin(angle);
  c = std::cos(angle);
}

// The reference itself, where long double is exact: theta = 1 makes the angle m itself, and glibc's
// sinl/cosl reduce any long double argument exactly.
TEST(EdgePositions, ReferenceReductionSelfCheck) {
  long double worst = 0.0L;
  for (const std::int64_t m :
       {std::int64_t{1}, std::int64_t{12345}, kInt32Max, (std::int64_t{1} << 53) + 1,
        (std::int64_t{1} << 62) + 7, kInt64Max - 1, kInt64Max, kInt64Min + 1, std::int64_t{-99}}) {
    for (const double theta : {1.0, 0.5, 0x1p-20}) {  // dyadic: m * theta exact in long double below 2^64
      long double s = 0.0L;
      long double c = 0.0L;
      reference_sincos(m, theta, s, c);
      const long double angle = static_cast<long double>(m) * theta;
      worst = std::max({worst, std::fabs(s - std::sin(angle)), std::fabs(c - std::cos(angle))});
    }
  }
  std::printf("[          ] Payne-Hanek reference vs sinl/cosl at dyadic frequencies: max difference %.3Lg\n",
              worst);
  EXPECT_LE(worst, 1e-17L);
}

// Tables at positions up to INT64_MAX - 1 (INT64_MAX itself: end positions are exclusive) against
// the reference: f32 entries correctly rounded (half an ulp, plus a little for near-ties), f64
// entries within 2 ulp of 1.0 plus the documented m * 2^-100 rad of the double-double theta/(2 pi).
TEST(EdgePositions, TablesExactAtInt64Positions) {
  const std::vector<std::int64_t> positions = {kInt32Max, (std::int64_t{1} << 53) + 1, std::int64_t{1} << 62,
                                               kInt64Max - 1};
  double worst_f32_ulps = 0.0;
  double worst_f64 = 0.0;
  for (const double base : {1e4, 5e5}) {
    const rotary::Frequencies f = rotary::default_frequencies(128, base);
    const auto t32 = rotary::CosSinCache<float>::for_positions(f, positions);
    const auto t64 = rotary::CosSinCache<double>::for_positions(f, positions);
    for (const std::int64_t m : positions)
      for (std::int64_t j = 0; j < 64; ++j) {
        long double s = 0.0L;
        long double c = 0.0L;
        reference_sincos(m, f.theta[static_cast<std::size_t>(j)], s, c);
        for (int k = 0; k < 2; ++k) {
          const long double want = k == 0 ? c : s;
          const float got32 = t32.row(m)[j + 64 * k];
          const double err32 = static_cast<double>(std::fabs(static_cast<long double>(got32) - want));
          const double u = rotary_test::ulp<float>(static_cast<double>(want));
          worst_f32_ulps = std::max(worst_f32_ulps, err32 / u);
          EXPECT_LE(err32, 0.5 * u + 0x1p-50) << "f32 table, position " << m << " pair " << j;
          const double err64 =
              static_cast<double>(std::fabs(static_cast<long double>(t64.row(m)[j + 64 * k]) - want));
          worst_f64 = std::max(worst_f64, err64);
          EXPECT_LE(err64, 2.5e-16 + static_cast<double>(m) * 0x1p-100)
              << "f64 table, position " << m << " pair " << j;
        }
      }
  }
  std::printf("[          ] tables up to INT64_MAX-1: f32 max error %.3f ulp, f64 max error %.3g\n",
              worst_f32_ulps, worst_f64);
}

// INT32_MAX through an int32 array, a table and the cache-free path: identical bits (every row an
// exact anchor); INT32_MIN and any negative position: rotary::error naming it.
TEST(EdgePositions, Int32Limits) {
  const RotarySpec spec(64, Pairing::interleaved, 10000.0, 48);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const rotary::Rope<float> table(
      spec, rotary::CosSinCache<float>::for_positions(f, {kInt32Max, kInt32Max - 1, 0}));
  const rotary::Rope<float> fly(spec, rotary::OnTheFly{});
  const std::vector<std::int32_t> pos = {static_cast<std::int32_t>(kInt32Max), 0,
                                         static_cast<std::int32_t>(kInt32Max - 1)};
  std::mt19937_64 rng(rotary_test::seed() + 6);
  const std::vector<float> x = rotary_test::random_vector<float>(3 * 2 * 64, rng);
  const StridedLayout l{3, 2, 128, 64};
  const Block b{2, 64, {kInt32Max, 0, kInt32Max - 1}};
  const std::vector<float> want = formula(table, b, x, Direction::forward);
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    std::vector<float> a(x.size());
    std::vector<float> c(x.size());
    rotary::apply_strided(table, x.data(), l, a.data(), l, Positions(pos));
    rotary::apply_strided(fly, x.data(), l, c.data(), l, Positions(pos));
    EXPECT_TRUE(all_match(a, want)) << rotary::to_string(isa);
    EXPECT_TRUE(all_match(c, want)) << rotary::to_string(isa) << " cache-free";
  }
  // The table rows at INT32_MAX against the reference.
  for (std::int64_t j = 0; j < 24; ++j) {
    long double s = 0.0L;
    long double cc = 0.0L;
    reference_sincos(kInt32Max, f.theta[static_cast<std::size_t>(j)], s, cc);
    EXPECT_LE(std::fabs(table.cache().row(kInt32Max)[j] - cc),
              0.5 * rotary_test::ulp<float>(static_cast<double>(cc)) + 0x1p-50);
    EXPECT_LE(std::fabs(table.cache().row(kInt32Max)[24 + j] - s),
              0.5 * rotary_test::ulp<float>(static_cast<double>(s)) + 0x1p-50);
  }
  std::vector<float> y = x;
  const std::vector<std::int32_t> negative = {0, static_cast<std::int32_t>(kInt32Min), 0};
  rotary_test::expect_error([&] { rotary::apply_strided(table, y.data(), l, Positions(negative)); },
                            {"positions[1] (-2147483648) must be >= 0"});
  rotary_test::expect_error([&] { rotary::apply_strided(fly, y.data(), l, Positions(negative)); },
                            {"positions[1] (-2147483648) must be >= 0"});
  rotary_test::expect_error([&] { rotary::apply_strided(fly, y.data(), l, Positions::contiguous(-1)); },
                            {"positions start (-1) must be >= 0"});
  rotary_test::expect_error(
      [&] {
        rotary::CosSinCache<float>::for_positions(f, {3, kInt32Min});
      },
      {"cache position (-2147483648) must be >= 0"});
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, kInt32Min, 0); },
                            {"cache begin position (-2147483648) must be >= 0"});
  EXPECT_TRUE(y == x) << "a rejected call wrote its output";
}

// INT64_MAX: cache-free calls accept it (contiguous start with one token, or in arrays, also right
// after another large position: the block recurrence must not step from INT64_MAX); a table cannot
// list it (its end position would overflow) and says so; a contiguous run past it is an error.
TEST(EdgePositions, Int64Limits) {
  const RotarySpec spec(40, Pairing::half_split, 10000.0, 32);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const rotary::Rope<float> fly(spec, rotary::OnTheFly{});
  const rotary::Rope<float> table(spec, rotary::CosSinCache<float>::for_positions(f, {kInt64Max - 1, 0, 1}));
  std::mt19937_64 rng(rotary_test::seed() + 7);
  const std::vector<std::int64_t> pos = {kInt64Max, 0, kInt64Max - 1, kInt64Max, 1, kInt64Max};
  const std::int64_t tokens = static_cast<std::int64_t>(pos.size());
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(tokens * 40), rng);
  const StridedLayout l{tokens, 1, 40, 40};
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    std::vector<float> y(x.size());
    rotary::apply_strided(fly, x.data(), l, y.data(), l, Positions(pos));
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t m = pos[static_cast<std::size_t>(t)];
      for (std::int64_t j = 0; j < 16; ++j) {
        long double s = 0.0L;
        long double c = 0.0L;
        reference_sincos(m, f.theta[static_cast<std::size_t>(j)], s, c);
        const std::size_t i0 = static_cast<std::size_t>(t * 40 + j);
        const std::size_t i1 = i0 + 16;
        const long double w0 = x[i0] * c - x[i1] * s;
        const long double w1 = x[i1] * c + x[i0] * s;
        // cos/sin correctly rounded (half an ulp, < 2^-25 each) plus the kernel's two roundings
        // (half an ulp of x1 s and of y, each < 2^-24 (|x0| + |x1|)): < 2^-22 (|x0| + |x1|).
        const double tol = 0x1p-22 * (std::fabs(x[i0]) + std::fabs(x[i1]));
        EXPECT_LE(std::fabs(y[i0] - w0), tol) << rotary::to_string(isa) << " position " << m << " pair " << j;
        EXPECT_LE(std::fabs(y[i1] - w1), tol) << rotary::to_string(isa) << " position " << m << " pair " << j;
      }
      for (std::size_t i = 32; i < 40; ++i)
        EXPECT_TRUE(
            same_bits(y[static_cast<std::size_t>(t * 40) + i], x[static_cast<std::size_t>(t * 40) + i]));
    }
    // Tokens whose positions a table holds: the table's bits (no position follows its predecessor
    // + 1, so every cache-free row is an exact anchor, not a recurrence step).
    std::vector<float> z(x.size());
    const std::vector<std::int64_t> held = {kInt64Max - 1, 1, 0, kInt64Max - 1, 1, 0};
    rotary::apply_strided(table, x.data(), l, z.data(), l, Positions(held));
    std::vector<float> w(x.size());
    rotary::apply_strided(fly, x.data(), l, w.data(), l, Positions(held));
    EXPECT_TRUE(all_match(w, z)) << rotary::to_string(isa)
                                 << ": cache-free equals the table at INT64_MAX - 1";
    // One token at INT64_MAX as a contiguous start.
    std::vector<float> one(x.begin(), x.begin() + 40);
    std::vector<float> from_array(40);
    rotary::apply_strided(fly, one.data(), StridedLayout{1, 1, 40, 40}, Positions::contiguous(kInt64Max));
    rotary::apply_strided(fly, x.data(), StridedLayout{1, 1, 40, 40}, from_array.data(),
                          StridedLayout{1, 1, 40, 40}, Positions(std::vector<std::int64_t>{kInt64Max}));
    EXPECT_TRUE(all_match(one, from_array));
  }
  std::vector<float> y = x;
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(fly, y.data(), StridedLayout{2, 1, 40, 40}, Positions::contiguous(kInt64Max));
      },
      {"positions start (9223372036854775807) + 2 tokens overflows int64"});
  rotary_test::expect_error(
      [&] {
        rotary::CosSinCache<float>::for_positions(f, {5, kInt64Max});
      },
      {"cache position (9223372036854775807)"});
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, 0, kInt64Max); }, {"does not fit in memory"});
  // A size that fits int64 but no address space is refused before allocating (std::bad_alloc before).
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, 0, kInt64Max / 64); },
                            {"does not fit in memory: it needs more than 2^47 bytes"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(fly, y.data(), StridedLayout{1, 1, 40, 40},
                              Positions(std::vector<std::int64_t>{kInt64Min}));
      },
      {"positions[0] (-9223372036854775808) must be >= 0"});
}

// A table under the 2^47-byte limit that no address space can hold (2^47 - 2^40 bytes: a 47-bit user
// address space already holds this program) fails its allocation: rotary::error naming the bytes, not
// std::bad_alloc. Nothing is touched before the allocation fails, so no page is committed. Not
// under ASan or TSan, whose allocators report a request this size as an error and abort.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ROTARY_TEST_ALLOCATOR_ABORTS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define ROTARY_TEST_ALLOCATOR_ABORTS 1
#endif
#endif
TEST(EdgePositions, CacheTheAllocatorCannotProvideIsRotaryError) {
#if defined(ROTARY_TEST_ALLOCATOR_ABORTS)
  GTEST_SKIP() << "a sanitizer's allocator aborts on this request instead of failing it";
#else
  const RotarySpec spec(16, Pairing::interleaved);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const std::int64_t bytes = (std::int64_t{1} << 47) - (std::int64_t{1} << 40);
  const std::int64_t rows = bytes / (16 * static_cast<std::int64_t>(sizeof(float)));
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, 0, rows); },
                            {"cache of 2181843386368 positions x rotary_dim 16 (139637976727552 bytes) could not be "
                             "allocated"});
#endif
}

// Context shifts accept any int64 delta, INT64_MIN and INT64_MAX included: exact against the
// reference (the rotation by delta theta_j).
TEST(EdgePositions, ShiftByExtremeDeltas) {
  const RotarySpec spec(16, Pairing::interleaved);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const rotary::Rope<float> rope(spec, rotary::OnTheFly{});
  std::mt19937_64 rng(rotary_test::seed() + 8);
  const std::vector<std::int64_t> deltas = {kInt64Min, kInt64Max, -1, kInt32Min, kInt64Min + 1};
  const std::int64_t tokens = static_cast<std::int64_t>(deltas.size());
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(tokens * 16), rng);
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    std::vector<float> per_token = x;
    rotary::shift_keys_strided(rope, per_token.data(), StridedLayout{tokens, 1, 16, 16}, Positions(deltas));
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::vector<float> single(x.begin() + t * 16, x.begin() + (t + 1) * 16);
      rotary::shift_keys_strided(rope, single.data(), StridedLayout{1, 1, 16, 16},
                                 deltas[static_cast<std::size_t>(t)]);
      for (std::int64_t j = 0; j < 8; ++j) {
        long double s = 0.0L;
        long double c = 0.0L;
        reference_sincos(deltas[static_cast<std::size_t>(t)], f.theta[static_cast<std::size_t>(j)], s, c);
        const std::size_t i0 = static_cast<std::size_t>(t * 16 + 2 * j);
        const long double w0 = x[i0] * c - x[i0 + 1] * s;
        const long double w1 = x[i0 + 1] * c + x[i0] * s;
        const double tol = 0x1p-22 * (std::fabs(x[i0]) + std::fabs(x[i0 + 1]));  // as in Int64Limits
        EXPECT_LE(std::fabs(per_token[i0] - w0), tol)
            << rotary::to_string(isa) << " delta " << deltas[static_cast<std::size_t>(t)];
        EXPECT_LE(std::fabs(per_token[i0 + 1] - w1), tol)
            << rotary::to_string(isa) << " delta " << deltas[static_cast<std::size_t>(t)];
        EXPECT_TRUE(same_bits(single[static_cast<std::size_t>(2 * j)], per_token[i0]));
        EXPECT_TRUE(same_bits(single[static_cast<std::size_t>(2 * j + 1)], per_token[i0 + 1]));
      }
    }
  }
}

// Sequence start offsets near INT64_MAX: a sequence that would run past it is an error naming the
// start, never a silent signed overflow.
TEST(EdgePositions, SequenceStartsNearInt64Max) {
  const rotary::Rope<float> fly(RotarySpec(8), rotary::OnTheFly{});
  std::vector<float> x(4 * 2 * 8, 0.5f);
  const StridedLayout l{4, 2, 16, 8};
  const std::vector<std::int64_t> cu = {0, 2, 4};
  rotary_test::expect_error(
      [&] { rotary::apply_varlen(fly, x.data(), l, cu, rotary::SequencePositions::start(kInt64Max)); },
      {"9223372036854775807", "overflows int64"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_varlen(fly, x.data(), l, cu, rotary::SequencePositions::starts({0, kInt64Max}));
      },
      {"sequence 1", "9223372036854775807", "overflows int64"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_batch(fly, rotary::Layout::bshd, x.data(), rotary::BatchShape{2, 2, 2, 8},
                            rotary::SequencePositions::context_parallel(rotary::ContextSplit::contiguous, 1,
                                                                        2, {kInt64Max - 2}));
      },
      {"overflows int64"});
  // The largest start that fits: the last token at INT64_MAX.
  EXPECT_NO_THROW(
      rotary::apply_varlen(fly, x.data(), l, cu, rotary::SequencePositions::start(kInt64Max - 1)));
}

// ---- 5. zero-sized calls ------------------------------------------------------------------------

#if ROTARY_TEST_HAVE_MMAN
TEST(EdgeZeroSize, NoAccessNoThrow) {
  using rotary_test::GuardedBuffer;
  const rotary::Rope<float> rope(RotarySpec(8, Pairing::interleaved), 16);
  const rotary::Rope<float> fly(RotarySpec(8, Pairing::interleaved), rotary::OnTheFly{});
  GuardedBuffer<float> none(0);  // a pointer into a PROT_NONE page: any access faults
  GuardedBuffer<std::int32_t> no32(0);
  GuardedBuffer<std::int64_t> no64(0);
  float* p = none.data();
  using Map = Eigen::Map<rotary::RowMatrix<float>>;
  Map empty(p, 0, 8);
  const StridedLayout zero{0, 3, 24, 8};
  const StridedLayout no_key{0, 0, 0, 0};
  const std::vector<std::int64_t> no_values;
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    for (const rotary::Rope<float>* r : {&rope, &fly}) {
      for (const Positions& pos :
           {Positions::contiguous(0), Positions::contiguous(kInt64Max), Positions(no32.data(), 0),
            Positions(no64.data(), 0), Positions(no_values)}) {
        EXPECT_NO_THROW(rotary::apply(*r, empty, pos, 2));
        EXPECT_NO_THROW(rotary::apply(*r, empty, empty, pos, 2, Direction::inverse));
        EXPECT_NO_THROW(rotary::unchecked::apply(*r, empty, pos, 2));
        EXPECT_NO_THROW(rotary::apply_strided(*r, p, zero, pos));
        // Strides derived from the empty shape (head-major: head stride = tokens * head_dim = 0).
        EXPECT_NO_THROW(rotary::apply_strided(*r, p, StridedLayout{0, 3, 8, 0}, pos));
        EXPECT_NO_THROW(rotary::apply_strided(*r, static_cast<float*>(nullptr), zero, pos));
        EXPECT_NO_THROW(rotary::unchecked::apply_strided(*r, p, zero, p, zero, pos));
        EXPECT_NO_THROW(rotary::apply_qk(*r, empty, empty, pos, 3, 1));
        EXPECT_NO_THROW(rotary::apply_qk(*r, empty, empty, pos, 3, 0));
        EXPECT_NO_THROW(rotary::apply_qk_strided(*r, p, zero, p, zero, p, zero, p, zero, pos));
        EXPECT_NO_THROW(rotary::unchecked::apply_qk_strided(*r, p, zero, p, zero, p, no_key, p, no_key, pos));
        EXPECT_NO_THROW(rotary::shift_keys(*r, empty, std::int64_t{5}, 2));
        EXPECT_NO_THROW(rotary::shift_keys_strided(*r, p, zero, Positions(no64.data(), 0)));
        EXPECT_NO_THROW(rotary::rerotate_keys(*r, fly, empty, pos, 2));
      }
      // Batches with no sequences or empty sequences.
      for (const rotary::BatchShape& s : {rotary::BatchShape{0, 4, 2, 8}, rotary::BatchShape{3, 0, 2, 8}}) {
        for (const rotary::Layout layout :
             {rotary::Layout::bshd, rotary::Layout::bhsd, rotary::Layout::sbhd}) {
          EXPECT_NO_THROW(rotary::apply_batch(*r, layout, p, s, rotary::SequencePositions::restart()));
          EXPECT_NO_THROW(rotary::apply_batch(
              *r, layout, p, s, rotary::SequencePositions::per_token(Positions(no32.data(), 0))));
          EXPECT_NO_THROW(
              rotary::apply_qk_batch(*r, layout, p, s, p, 1, rotary::SequencePositions::start(3)));
        }
      }
      for (const std::vector<std::int64_t>& cu :
           {std::vector<std::int64_t>{0}, std::vector<std::int64_t>{0, 0, 0}}) {
        GuardedBuffer<std::int64_t> cu_buf(cu.size());
        std::copy(cu.begin(), cu.end(), cu_buf.data());
        const rotary::CuSeqlens c(cu_buf.data(), static_cast<std::int64_t>(cu.size()));
        EXPECT_NO_THROW(rotary::apply_varlen(*r, p, zero, c, rotary::SequencePositions::restart()));
        EXPECT_NO_THROW(rotary::apply_varlen(
            *r, p, zero, p, zero, c, rotary::SequencePositions::per_token(Positions(no64.data(), 0))));
        EXPECT_NO_THROW(rotary::apply_qk_varlen(*r, p, zero, p, StridedLayout{0, 1, 8, 8}, c,
                                                rotary::SequencePositions::start(7)));
      }
    }
  }
  // Weights with no columns, and position lists with no positions.
  const Eigen::Map<const Eigen::MatrixXf> w(p, 16, 0);
  EXPECT_EQ(rotary::permute_rows_half_split_to_interleaved(w, 2, 8, 8).cols(), 0);
  const auto listed = rotary::CosSinCache<float>::for_positions(rotary::default_frequencies(8, 1e4), {});
  EXPECT_TRUE(listed.empty());
  const rotary::Rope<float> nothing(RotarySpec(8, Pairing::interleaved), listed);
  EXPECT_NO_THROW(rotary::apply(nothing, empty, Positions(no64.data(), 0), 2));
}
#endif

// Head counts are arguments where they can be 0 by mistake: apply/apply_strided need >= 1 (a
// key count of 0 means "no key"); a 4-d batch with 0 heads is a shape (error only if it has tokens).
TEST(EdgeZeroSize, ZeroHeads) {
  const rotary::Rope<float> rope(RotarySpec(8), 16);
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Zero(0, 8);
  rotary_test::expect_error([&] { rotary::apply(rope, x, Positions::contiguous(0), 0); },
                            {"heads (0) must be >= 1"});
  std::vector<float> buf(16);
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(rope, buf.data(), StridedLayout{2, 0, 8, 8}, Positions::contiguous(0));
      },
      {"heads (0) must be >= 1"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(rope, buf.data(), StridedLayout{0, 0, 8, 8}, Positions::contiguous(0));
      },
      {"heads (0) must be >= 1"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::Layout::bshd, buf.data(), rotary::BatchShape{1, 2, 0, 8},
                            rotary::SequencePositions::restart());
      },
      {"heads (0) must be >= 1"});
  EXPECT_NO_THROW(rotary::apply_batch(rope, rotary::Layout::bshd, buf.data(), rotary::BatchShape{0, 2, 0, 8},
                                      rotary::SequencePositions::restart()));
}

}  // namespace
