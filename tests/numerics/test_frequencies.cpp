// Frequencies: theta_j = base^(-2j/d), per-pair factors, the alpha/rho variant.
#include <cmath>

#include "support.hpp"

namespace {

using rotary::Pairing;
using rotary::RotarySpec;

// Relative error of the library's theta_j against powl, over bases and dims: within 1 ulp(double).
TEST(Frequencies, DefaultMatchesPowInLongDouble) {
  double worst = 0.0;
  for (double base : {10000.0, 500000.0, 1e6, 1e7, 2.5}) {
    for (std::int64_t d : {2, 8, 64, 96, 128, 256}) {
      const auto f = rotary::default_frequencies(d, base);
      ASSERT_EQ(static_cast<std::int64_t>(f.theta.size()), d / 2);
      EXPECT_EQ(f.theta[0], 1.0);
      EXPECT_EQ(f.attention_factor, 1.0);
      for (std::int64_t j = 0; j < d / 2; ++j) {
        const long double ref = std::pow(static_cast<long double>(base), -2.0L * j / d);
        const double rel = static_cast<double>(std::fabs((f.theta[j] - ref) / ref));
        worst = std::max(worst, rel);
        EXPECT_LE(rel, 0x1p-52) << "base " << base << " d " << d << " j " << j;
      }
    }
  }
  std::printf("theta_j vs powl: max relative error %.3g (1 ulp = %.3g)\n", worst, 0x1p-52);
}

TEST(Frequencies, StrictlyDecreasingAndRotaryDimDefaultsToHeadDim) {
  RotarySpec spec(128);
  EXPECT_EQ(spec.effective_rotary_dim(), 128);
  const auto f = rotary::compute_frequencies(spec);
  ASSERT_EQ(f.theta.size(), 64u);
  for (std::size_t j = 1; j < f.theta.size(); ++j) EXPECT_LT(f.theta[j], f.theta[j - 1]);
  // Last frequency base^(-(d-2)/d): one full turn takes ~ 2 pi * base^(126/128) positions.
  EXPECT_NEAR(f.theta[63], std::pow(10000.0, -126.0 / 128.0), 1e-18);
}

TEST(Frequencies, PartialRotaryUsesRotaryDimInTheExponent) {
  RotarySpec spec(256, Pairing::interleaved, 10000.0, 64);  // GPT-J: 64 of 256
  const auto f = rotary::compute_frequencies(spec);
  ASSERT_EQ(f.theta.size(), 32u);
  EXPECT_DOUBLE_EQ(f.theta[1], std::pow(10000.0, -2.0 / 64.0));
}

TEST(Frequencies, PerPairFactorsDivide) {
  RotarySpec spec(8);
  spec.freq_factors = {1.0, 2.0, 4.0, 0.5};
  const auto plain = rotary::default_frequencies(8, 10000.0);
  const auto f = rotary::compute_frequencies(spec);
  for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(f.theta[j], plain.theta[j] / spec.freq_factors[j]);
}

TEST(Frequencies, ReceptiveFieldVariant) {
  RotarySpec spec(64);
  spec.receptive_field = rotary::ReceptiveField{0.25, 0.5};
  const auto plain = rotary::default_frequencies(64, 10000.0);
  const auto f = rotary::compute_frequencies(spec);
  const double phi = 0.25 / std::pow(10000.0, 0.5);
  for (std::size_t j = 0; j < plain.theta.size(); ++j)
    EXPECT_DOUBLE_EQ(f.theta[j], phi + 0.75 * plain.theta[j]) << "j " << j;

  spec.receptive_field = rotary::ReceptiveField{0.0, 3.0};  // alpha = 0 is plain RoPE
  const auto same = rotary::compute_frequencies(spec);
  EXPECT_EQ(same.theta, plain.theta);

  spec.receptive_field = rotary::ReceptiveField{1.0, 1.0};  // alpha = 1: one shared frequency
  const auto flat = rotary::compute_frequencies(spec);
  for (double t : flat.theta) EXPECT_DOUBLE_EQ(t, 1e-4);
}

TEST(Frequencies, FinishAppliesFactorsThenVariantToScaledFrequencies) {
  RotarySpec spec(4);
  spec.freq_factors = {2.0, 2.0};
  spec.receptive_field = rotary::ReceptiveField{0.5, 1.0};
  rotary::Frequencies scaled{{0.8, 0.4}, 1.5};  // as a scaling rule would produce
  const auto f = rotary::finish_frequencies(spec, scaled);
  EXPECT_DOUBLE_EQ(f.theta[0], 0.5e-4 + 0.5 * 0.4);
  EXPECT_DOUBLE_EQ(f.theta[1], 0.5e-4 + 0.5 * 0.2);
  EXPECT_EQ(f.attention_factor, 1.5);
}

// spec.frequencies replaces base^(-2j/d) (and the attention factor 1); factors and alpha/rho still
// compose on top, exactly as finish_frequencies does for the same input.
TEST(Frequencies, SpecFrequenciesReplaceTheDefaultAndStillFinish) {
  RotarySpec spec(4);
  spec.frequencies = rotary::Frequencies{{0.8, 0.4}, 1.5};
  const auto own = rotary::compute_frequencies(spec);
  EXPECT_EQ(own.theta, (std::vector<double>{0.8, 0.4}));
  EXPECT_EQ(own.attention_factor, 1.5);
  spec.freq_factors = {2.0, 2.0};
  spec.receptive_field = rotary::ReceptiveField{0.5, 1.0};
  const auto f = rotary::compute_frequencies(spec);
  RotarySpec plain(4);
  plain.freq_factors = spec.freq_factors;
  plain.receptive_field = spec.receptive_field;
  const auto g = rotary::finish_frequencies(plain, rotary::Frequencies{{0.8, 0.4}, 1.5});
  EXPECT_TRUE(rotary_test::same_bits(f.theta, g.theta));
  EXPECT_EQ(f.attention_factor, 1.5);
  EXPECT_DOUBLE_EQ(f.theta[1], 0.5e-4 + 0.5 * 0.2);
}

}  // namespace
