// The cos/sin cache: exact at any position, layout, listed positions, attention factor folding.
#include <cmath>
#include <cstdio>

#include "support.hpp"

namespace {

using rotary::CosSinCache;
using rotary::Frequencies;

// Long double reference for cos/sin(m * theta): (long double)m * theta is exact to ~1e-10 rad for
// m < 2^31 (64-bit significand), and glibc's sinl/cosl reduce their argument exactly.
// Through libm pointers: the flag-matrix builds (tests/flags) must not turn these into x87 fsin.
long double ref_cos(std::int64_t m, double theta) {
  return rotary::detail::libm_cosl(static_cast<long double>(m) * theta);
}
long double ref_sin(std::int64_t m, double theta) {
  return rotary::detail::libm_sinl(static_cast<long double>(m) * theta);
}

// What HF and ggml compute: the angle as float(m) * float(theta), then cos/sin.
double float_angle_error(std::int64_t m, const std::vector<double>& theta) {
  double worst = 0.0;
  for (double t : theta) {
    const float angle = static_cast<float>(m) * static_cast<float>(t);
    const double c = static_cast<float>(std::cos(static_cast<double>(angle)));
    const double s = static_cast<float>(std::sin(static_cast<double>(angle)));
    worst = std::max({worst, static_cast<double>(std::fabs(c - ref_cos(m, t))),
                      static_cast<double>(std::fabs(s - ref_sin(m, t)))});
  }
  return worst;
}

template <class T>
double cache_error(const CosSinCache<T>& c, std::int64_t m) {
  const T* row = c.row(m);
  double worst = 0.0;
  for (std::int64_t j = 0; j < c.pairs(); ++j) {
    const double t = c.theta()[j];
    worst = std::max({worst, static_cast<double>(std::fabs(row[j] - ref_cos(m, t))),
                      static_cast<double>(std::fabs(row[c.pairs() + j] - ref_sin(m, t)))});
  }
  return worst;
}

// The headline table: max |cache - long double| at 2^10, 2^20, 2^24, 2^31-1 over bases 1e4..1e7 and
// rotary_dim 64..256, beside a float-angle pipeline. Every float entry within 2^-24 (half an ulp of
// 1.0f, i.e. <= 6e-8): correctly rounded cos/sin of the exact angle.
TEST(Cache, FloatEntriesExactAtAnyInt32Position) {
  const std::vector<std::int64_t> positions = {1 << 10, 1 << 20, 1 << 24, 2147483647};
  std::printf("%-12s %-9s %-11s %-14s %-14s\n", "position", "base", "rotary_dim", "rotary max err",
              "float-angle err");
  for (std::int64_t m : positions) {
    double ours = 0.0;
    double theirs = 0.0;
    for (double base : {1e4, 5e5, 1e6, 1e7}) {
      for (std::int64_t d : {64, 128, 256}) {
        const Frequencies f = rotary::default_frequencies(d, base);
        const auto c = CosSinCache<float>::for_positions(f, {m, m - 1, m / 3});
        for (std::int64_t p : {m, m - 1, m / 3}) {
          const double e = cache_error(c, p);
          ASSERT_LE(e, 0x1p-24) << "position " << p << " base " << base << " d " << d;
          ours = std::max(ours, e);
        }
        theirs = std::max(theirs, float_angle_error(m, f.theta));
      }
    }
    std::printf("%-12lld %-9s %-11s %-14.3g %-14.3g\n", static_cast<long long>(m), "1e4..1e7",
                "64..256", ours, theirs);
    if (m == (1 << 24)) {
      EXPECT_GT(theirs, 0.1) << "the float-angle contrast should be visible";
    }
  }
}

TEST(Cache, FloatEntriesExactAtRandomPositions) {
  std::mt19937_64 rng(rotary_test::seed());
  const auto positions = rotary_test::random_positions(200, 2147483647, rng);
  double worst = 0.0;
  for (double base : {1e4, 1e6}) {
    const Frequencies f = rotary::default_frequencies(128, base);
    const auto c = CosSinCache<float>::for_positions(f, positions);
    for (std::int64_t p : positions) worst = std::max(worst, cache_error(c, p));
  }
  std::printf("random int32 positions: max error %.3g\n", worst);
  EXPECT_LE(worst, 0x1p-24) << rotary_test::seed_note();
}

// Beyond int32: with theta = k * 2^-e the product m * theta is exact in long double for m < 2^62,
// so the reference stays exact and the reduction in turns is checked at int64 positions.
TEST(Cache, ExactAtInt64PositionsForDyadicFrequencies) {
  Frequencies f;
  f.theta = {1.0, 0.5, 0x1p-10, 3 * 0x1p-20, 0.75};
  const std::vector<std::int64_t> positions = {std::int64_t{1} << 40, (std::int64_t{1} << 52) + 12345,
                                               (std::int64_t{1} << 61) - 1, std::int64_t{4611686018427387903}};
  const auto c = CosSinCache<float>::for_positions(f, positions);
  double worst = 0.0;
  for (std::int64_t p : positions) worst = std::max(worst, cache_error(c, p));
  std::printf("int64 positions up to 2^62: max error %.3g\n", worst);
  EXPECT_LE(worst, 0x1p-24);
}

// Double tables. The long double reference is itself exact only where (long double)m * theta is:
// dyadic frequencies at any position, or any frequency at small positions (error m * 2^-64).
// Bound: 2.5e-16 (about 2 ulp of 1.0) plus m * 2^-100 rad, the double-double precision of
// theta / (2 pi) that the reduction works with (visible only beyond 2^40).
TEST(Cache, DoubleEntriesAccurate) {
  Frequencies dyadic;
  dyadic.theta = {1.0, 0.5, 0x1p-10, 3 * 0x1p-20, 0.75};
  const std::vector<std::int64_t> large = {1 << 24, 2147483647, std::int64_t{1} << 40,
                                           (std::int64_t{1} << 61) - 1};
  const auto c1 = CosSinCache<double>::for_positions(dyadic, large);
  for (std::int64_t p : large) {
    const double e = cache_error(c1, p);
    std::printf("double cache, dyadic theta, position %lld: max error %.3g\n", static_cast<long long>(p), e);
    EXPECT_LE(e, 2.5e-16 + static_cast<double>(p) * 0x1p-100) << "position " << p;
  }
  const Frequencies f = rotary::default_frequencies(128, 10000.0);
  const CosSinCache<double> c2(f, 0, 1 << 12);
  double worst_small = 0.0;
  for (std::int64_t p = 0; p < (1 << 12); ++p) worst_small = std::max(worst_small, cache_error(c2, p));
  std::printf("double cache, base 1e4, positions < 2^12: max error %.3g\n", worst_small);
  EXPECT_LE(worst_small, 2.5e-16);
}

TEST(Cache, LayoutRangeAndListedAgree) {
  const Frequencies f = rotary::default_frequencies(64, 10000.0);
  const CosSinCache<float> range(f, 10, 50);
  EXPECT_EQ(range.size(), 40);
  EXPECT_EQ(range.begin_position(), 10);
  EXPECT_EQ(range.end_position(), 50);
  EXPECT_EQ(range.bytes_per_position(), 64 * sizeof(float));
  EXPECT_EQ(range.bytes(), 40 * 64 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(range.data()) % 64, 0u);
  EXPECT_TRUE(range.is_range());
  EXPECT_FALSE(range.contains(9));
  EXPECT_FALSE(range.contains(50));
  EXPECT_EQ(range.row(11), range.data() + 64);
  EXPECT_EQ(range.sin(11), range.cos(11) + 32);

  const auto listed = CosSinCache<float>::for_positions(f, {42, 17, 42, 33});
  EXPECT_FALSE(listed.is_range());
  EXPECT_EQ(listed.size(), 3);  // duplicates stored once
  EXPECT_FALSE(listed.contains(18));
  for (std::int64_t p : {17, 33, 42})
    for (std::int64_t k = 0; k < 64; ++k) EXPECT_EQ(listed.row(p)[k], range.row(p)[k]) << p << " " << k;

  // Position 0: cos 1, sin 0 exactly.
  const CosSinCache<float> zero(f, 1);
  for (std::int64_t j = 0; j < 32; ++j) {
    EXPECT_EQ(zero.cos(0)[j], 1.0f);
    EXPECT_EQ(zero.sin(0)[j], 0.0f);
  }
}

TEST(Cache, AttentionFactorFoldedOrSeparate) {
  Frequencies f = rotary::default_frequencies(16, 10000.0);
  f.attention_factor = 1.25;
  const CosSinCache<double> folded(f, 8);
  const CosSinCache<double> separate(f, 0, 8, rotary::AttentionFactor::separate);
  EXPECT_TRUE(folded.attention_factor_folded());
  EXPECT_FALSE(separate.attention_factor_folded());
  EXPECT_EQ(separate.attention_factor(), 1.25);
  for (std::int64_t p = 0; p < 8; ++p)
    for (std::int64_t k = 0; k < 16; ++k)
      EXPECT_NEAR(folded.row(p)[k], 1.25 * separate.row(p)[k], 1e-15);
}

TEST(Cache, SinCosIdentityAtEveryEntry) {
  const Frequencies f = rotary::default_frequencies(256, 500000.0);
  const CosSinCache<float> c(f, 4096);
  double worst = 0.0;
  for (std::int64_t p = 0; p < 4096; ++p)
    for (std::int64_t j = 0; j < 128; ++j) {
      const double co = c.cos(p)[j];
      const double si = c.sin(p)[j];
      worst = std::max(worst, std::fabs(co * co + si * si - 1.0));
    }
  EXPECT_LE(worst, 2 * 0x1p-24);
}

}  // namespace
