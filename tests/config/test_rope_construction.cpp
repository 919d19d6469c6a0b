// Building a Rope cannot silently lose or contradict its frequencies: a resolved config's spec carries
// the scaled frequencies, so Rope<T>(r.spec, n) and Rope<T>(r.spec, OnTheFly{}) rotate with them; a
// cache or theta that differs from compute_frequencies(spec) throws; per-pair factors cannot be
// skipped. Each of these traps gave wrong numbers without a word before (see each test's comment).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <rotary/analysis.hpp>
#include <rotary/hf_config.hpp>
#include <rotary/multi_axis.hpp>
#include <rotary/rotary.hpp>
#include <rotary/xpos.hpp>

#include "support.hpp"

namespace {

using rotary::CosSinCache;
using rotary::Frequencies;
using rotary::OnTheFly;
using rotary::Pairing;
using rotary::Rope;
using rotary::RotarySpec;
using rotary_test::expect_error;
using rotary_test::same_bits;

// meta-llama/Llama-3.1-8B's config.json, rope keys only.
rotary::HfConfig llama31() {
  rotary::HfConfig c;
  c.model_type = "llama";
  c.hidden_size = 4096;
  c.num_attention_heads = 32;
  c.max_position_embeddings = 131072;
  c.rope_theta = 500000.0;
  rotary::RopeParameters p;
  p.rope_type = "llama3";
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  c.rope_scaling = p;
  return c;
}

// A YaRN model (Qwen2.5 long-context recipe): attention factor 0.1 ln 4 + 1.
rotary::HfConfig qwen_yarn() {
  rotary::HfConfig c;
  c.model_type = "qwen2";
  c.hidden_size = 3584;
  c.num_attention_heads = 28;
  c.max_position_embeddings = 131072;
  c.rope_theta = 1e6;
  rotary::RopeParameters p;
  p.rope_type = "yarn";
  p.factor = 4.0;
  p.original_max_position_embeddings = 32768;
  c.rope_scaling = p;
  return c;
}

// Before: Rope<bf16>(r.spec, n) used base^(-2j/d) and dropped the llama3 rule (theta_63 2.455e-6).
TEST(RopeConstruction, ResolvedSpecKeepsLlama3Scaling) {
  const rotary::ResolvedRope r = rotary::resolve(llama31());
  ASSERT_EQ(r.freqs.theta.size(), 64u);
  EXPECT_NEAR(r.freqs.theta[63], 3.069e-7, 0.0005e-7);
  EXPECT_TRUE(same_bits(rotary::compute_frequencies(r.spec).theta, r.freqs.theta));

  const Rope<rotary::bf16> rope(r.spec, 8192);
  const Rope<rotary::bf16> fly(r.spec, OnTheFly{});
  EXPECT_TRUE(same_bits(rope.cache().theta(), r.freqs.theta));
  EXPECT_TRUE(same_bits(fly.cache().theta(), r.freqs.theta));
  std::printf("Llama-3.1-8B: Rope(r.spec, n) theta_63 = %.4g (unscaled base^(-126/128) = %.4g)\n",
              rope.cache().theta()[63], rotary::default_frequencies(128, 500000.0).theta[63]);
  EXPECT_NEAR(rope.cache().theta()[63], 3.069e-7, 0.0005e-7);

  // The table equals one built the long way from r.freqs, bit for bit.
  const CosSinCache<float> direct(r.freqs, 0, 8192);
  for (const std::int64_t m : {0, 1, 100, 8191})
    for (std::int64_t j = 0; j < 128; ++j)
      EXPECT_TRUE(same_bits(rope.cache().row(m)[j], direct.row(m)[j])) << "m " << m << " j " << j;

  // And rotation differs from unscaled RoPE where llama3 rescales (low frequencies, long distance).
  const Rope<float> scaled(r.spec, 8192);
  const Rope<float> unscaled(RotarySpec(128, Pairing::half_split, 500000.0), 8192);
  rotary::RowMatrix<float> a = rotary::RowMatrix<float>::Ones(1, 128);
  rotary::RowMatrix<float> b = a;
  rotary::apply(scaled, a, rotary::Positions::contiguous(8000), 1);
  rotary::apply(unscaled, b, rotary::Positions::contiguous(8000), 1);
  EXPECT_GT((a - b).cwiseAbs().maxCoeff(), 1e-3f);
}

// Before: Rope(r.spec, n) of a YaRN config left cos/sin unscaled (attention factor 1).
TEST(RopeConstruction, ResolvedSpecKeepsYarnAttentionFactor) {
  const rotary::ResolvedRope r = rotary::resolve(qwen_yarn());
  EXPECT_NEAR(r.freqs.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-15);
  const Rope<float> rope(r.spec, 16);
  const Rope<float> fly(r.spec, OnTheFly{});
  EXPECT_EQ(rope.cache().attention_factor(), r.freqs.attention_factor);
  EXPECT_EQ(fly.cache().attention_factor(), r.freqs.attention_factor);
  // Position 0: cos = a, sin = 0 for every pair.
  EXPECT_EQ(rope.cache().cos(0)[5], static_cast<float>(r.freqs.attention_factor));
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Ones(1, r.spec.head_dim);
  rotary::RowMatrix<float> y = x;
  rotary::apply(rope, x, rotary::Positions::contiguous(7), 1);
  rotary::apply(fly, y, rotary::Positions::contiguous(7), 1);
  EXPECT_TRUE(same_bits(std::vector<float>(x.data(), x.data() + x.size()),
                        std::vector<float>(y.data(), y.data() + y.size())));
  const double norm = static_cast<double>(x.norm()) / std::sqrt(static_cast<double>(r.spec.head_dim));
  EXPECT_NEAR(norm, r.freqs.attention_factor, 1e-6);  // rotation keeps the norm; a scales it
}

// Before: Rope(spec, cache) accepted any cache of the right width.
TEST(RopeConstruction, CacheThatContradictsTheSpecThrows) {
  const rotary::ResolvedRope r = rotary::resolve(llama31());
  // Unscaled table under the scaled spec, and the other way round.
  expect_error([&] { Rope<float>(r.spec, CosSinCache<float>(rotary::default_frequencies(128, 5e5), 0, 16)); },
               {"cache theta[", "differs from the spec's", "spec.frequencies"});
  expect_error([&] { Rope<float>(RotarySpec(128, Pairing::half_split, 5e5), CosSinCache<float>(r.freqs, 0, 16)); },
               {"cache theta[", "differs from the spec's"});
  // Another base.
  expect_error([] { Rope<float>(RotarySpec(64), CosSinCache<float>(rotary::default_frequencies(64, 5e5), 16)); },
               {"cache theta[1]"});
  // Same theta, another attention factor (YaRN's a dropped from the table).
  const rotary::ResolvedRope y = rotary::resolve(qwen_yarn());
  Frequencies no_factor = y.freqs;
  no_factor.attention_factor = 1.0;
  expect_error([&] { Rope<float>(y.spec, CosSinCache<float>(no_factor, 0, 16)); },
               {"cache attention_factor (1)", "differs from the spec's (1.13"});
  // Agreeing caches are fine: range, listed positions, factor kept separate, shared between Ropes.
  EXPECT_NO_THROW(Rope<float>(r.spec, CosSinCache<float>(r.freqs, 0, 16)));
  EXPECT_NO_THROW(Rope<float>(y.spec, CosSinCache<float>::for_positions(y.freqs, {5, 70000},
                                                                         rotary::AttentionFactor::separate)));
  const Rope<double> shared(r.spec, 16);
  EXPECT_NO_THROW(Rope<double>(r.spec, shared.cache()));
}

// Before: Rope(spec, f, OnTheFly) rotated with f whatever the spec said.
TEST(RopeConstruction, OnTheFlyFrequenciesThatContradictTheSpecThrow) {
  const rotary::ResolvedRope r = rotary::resolve(llama31());
  expect_error([&] { Rope<float>(RotarySpec(128, Pairing::half_split, 5e5), r.freqs, OnTheFly{}); },
               {"frequencies theta[", "differs from the spec's"});
  expect_error([&] { Rope<float>(r.spec, rotary::default_frequencies(128, 5e5), OnTheFly{}); },
               {"frequencies theta["});
  EXPECT_NO_THROW(Rope<float>(r.spec, r.freqs, OnTheFly{}));
  // Frequencies of another rotary_dim: ValidationConstruction.RopeCacheFrequencies (test_validation).
}

// Before: a cache from scaled_frequencies (or default_frequencies) without finish_frequencies lost
// the spec's freq_factors silently.
TEST(RopeConstruction, FreqFactorsCannotBeSkipped) {
  RotarySpec spec(8);
  spec.freq_factors = {1.0, 2.0, 4.0, 8.0};
  expect_error([&] { Rope<float>(spec, CosSinCache<float>(rotary::default_frequencies(8, 1e4), 4)); },
               {"cache theta[1]"});
  expect_error([&] { Rope<float>(spec, rotary::default_frequencies(8, 1e4), OnTheFly{}); }, {"theta[1]"});
  EXPECT_NO_THROW(Rope<float>(spec, CosSinCache<float>(rotary::compute_frequencies(spec), 4)));

  // Scaled frequencies in the spec: the factors still compose on top (scaling, then c_j).
  rotary::ResolvedRope r = rotary::resolve(llama31());
  r.spec.freq_factors.assign(64, 2.0);
  const Rope<float> rope(r.spec, 4);
  for (std::size_t j = 0; j < 64; ++j) EXPECT_EQ(rope.cache().theta()[j], r.freqs.theta[j] / 2.0) << j;
  expect_error([&] { Rope<float>(r.spec, CosSinCache<float>(r.freqs, 4)); }, {"cache theta[0]"});
}

TEST(RopeConstruction, FinishFrequenciesOfASpecWithFrequenciesTakesOnlyThose) {
  const rotary::ResolvedRope r = rotary::resolve(llama31());
  EXPECT_TRUE(same_bits(rotary::finish_frequencies(r.spec, r.freqs).theta, r.freqs.theta));
  expect_error([&] { rotary::finish_frequencies(r.spec, rotary::default_frequencies(128, 5e5)); },
               {"finish_frequencies: theta[", "differs from spec.frequencies"});
  // A spec without frequencies of its own finishes whatever it is given (the scaling pipeline).
  const RotarySpec plain(128, Pairing::half_split, 5e5);
  EXPECT_TRUE(same_bits(rotary::finish_frequencies(plain, r.freqs).theta, r.freqs.theta));
}

TEST(RopeConstruction, SpecFrequenciesAreValidated) {
  RotarySpec spec(8);
  spec.frequencies = rotary::default_frequencies(4, 1e4);
  expect_error([&] { spec.validate(); }, {"spec.frequencies has 2 theta (rotary_dim 4) but rotary_dim is 8"});
  spec.frequencies = rotary::default_frequencies(8, 1e4);
  spec.frequencies.theta[2] = std::nan("");
  expect_error([&] { Rope<float>(spec, 4); }, {"theta[2] (nan) must be finite"});
  spec.frequencies = Frequencies{};
  spec.frequencies.attention_factor = 0.0;
  expect_error([&] { Rope<float>(spec, 4); }, {"spec.frequencies.attention_factor (0) must be positive"});
  // An attention factor alone scales the default frequencies' cos/sin.
  spec.frequencies.attention_factor = 0.5;
  const Rope<float> half(spec, 1);
  EXPECT_TRUE(same_bits(half.cache().theta(), rotary::default_frequencies(8, 1e4).theta));
  EXPECT_EQ(half.cache().cos(0)[0], 0.5f);
}

// A head wider than kMaxHeadDim (2^24) is refused as rotary::error by everything built from a spec,
// before an allocation could throw std::bad_alloc (2^40) or std::length_error (2^62) instead.
TEST(RopeConstruction, AbsurdHeadDimIsRefused) {
  for (const std::int64_t d : {rotary::kMaxHeadDim + 2, std::int64_t{1} << 40, std::int64_t{1} << 62}) {
    const RotarySpec spec(d);
    expect_error([&] { spec.validate(); }, {"exceeds kMaxHeadDim (2^24"});
    expect_error([&] { (void)rotary::compute_frequencies(spec); }, {"exceeds kMaxHeadDim"});
    expect_error([&] { Rope<float>(spec, 4); }, {"exceeds kMaxHeadDim"});
    expect_error([&] { Rope<float>(spec, OnTheFly{}); }, {"exceeds kMaxHeadDim"});
    expect_error([&] { rotary::XPos<float>{spec}; }, {"exceeds kMaxHeadDim"});
    expect_error([&] { (void)rotary::default_frequencies(d, 1e4); }, {"at most kMaxHeadDim"});
  }
  EXPECT_NO_THROW(RotarySpec(rotary::kMaxHeadDim).validate());
}

// Everything else built from a spec follows its frequencies too.
TEST(RopeConstruction, MultiAxisXPosAnalysisFollowTheSpec) {
  const std::int64_t d = 16;
  const rotary::AxisMap map = rotary::axial_axis_map(d, 2, rotary::AxialLayout::split);
  const Frequencies f = rotary::axis_frequencies(map, 1e4, rotary::AxisFrequencies::per_axis);
  const RotarySpec plain(d);
  expect_error([&] { rotary::MultiAxisRope<float>(plain, f, map, 8); }, {"cache theta["});
  expect_error([&] { rotary::MultiAxisRope<float>(plain, f, map, OnTheFly{}); }, {"frequencies theta["});
  RotarySpec spec = plain;
  spec.frequencies = f;
  const rotary::MultiAxisRope<float> mrope(spec, map, 8);
  EXPECT_TRUE(same_bits(mrope.rope().cache().theta(), f.theta));
  EXPECT_NO_THROW(rotary::MultiAxisRope<float>(spec, f, map, OnTheFly{}));

  const rotary::ResolvedRope r = rotary::resolve(llama31());
  expect_error([&] { rotary::XPos<float>(RotarySpec(128, Pairing::half_split, 5e5), r.freqs); },
               {"frequencies theta["});
  EXPECT_TRUE(same_bits(rotary::XPos<float>(r.spec).frequencies().theta, r.freqs.theta));
  const std::vector<std::int64_t> deltas = {1000, 100000};
  EXPECT_TRUE(same_bits(rotary::decay_bound(r.spec, deltas), rotary::decay_bound(r.freqs, deltas)));
}

TEST(RopeConstruction, Messages) {
  // max_position (-1): ValidationConstruction.RopeCacheFrequencies (test_validation).
  expect_error([] { Rope<float>(RotarySpec(127), 4); }, {"head_dim (127) is odd"});
  try {
    RotarySpec(127).validate();
    ADD_FAILURE() << "no error";
  } catch (const rotary::error& e) {
    EXPECT_EQ(std::string(e.what()).find("rotary_dim (127)"), std::string::npos) << e.what();
  }
  // An explicit odd rotary_dim is still named as such.
  expect_error([] { RotarySpec(128, Pairing::half_split, 1e4, 63).validate(); }, {"rotary_dim (63) must be even"});
  // A partial rotary_dim makes an odd head_dim fine.
  EXPECT_NO_THROW(RotarySpec(127, Pairing::half_split, 1e4, 64).validate());
}

}  // namespace
