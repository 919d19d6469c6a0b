// Bad input gets a clear rotary::error naming the argument and its value; unchecked entry points
// assert in debug builds.
#include <cstring>

#include "support.hpp"

namespace {

using rotary::Pairing;
using rotary::Positions;
using rotary::RotarySpec;

using rotary_test::expect_error;

TEST(Errors, Spec) {
  expect_error([] { rotary::compute_frequencies(RotarySpec(128, Pairing::half_split, 10000.0, 3)); },
               {"rotary_dim (3)", "even"});
  expect_error([] { rotary::compute_frequencies(RotarySpec(128, Pairing::half_split, 10000.0, 130)); },
               {"rotary_dim (130)", "head_dim (128)"});
  expect_error([] { rotary::compute_frequencies(RotarySpec(128, Pairing::half_split, 10000.0, -2)); },
               {"rotary_dim (-2)"});
  expect_error([] { rotary::compute_frequencies(RotarySpec(0)); }, {"head_dim (0)"});
  expect_error([] { rotary::compute_frequencies(RotarySpec(64, Pairing::half_split, 0.0)); }, {"base (0)"});
  expect_error([] { rotary::compute_frequencies(RotarySpec(64, Pairing::half_split, -5.0)); }, {"base (-5)"});
  expect_error([] { rotary::compute_frequencies(RotarySpec(64, Pairing::half_split, INFINITY)); }, {"base (inf)"});
  expect_error([] { rotary::compute_frequencies(RotarySpec(64, Pairing::half_split, NAN)); }, {"base (nan)"});
  expect_error([] { rotary::default_frequencies(7, 10000.0); }, {"rotary_dim (7)"});
  RotarySpec s(8);
  s.freq_factors = {1.0, 2.0};
  expect_error([&] { rotary::compute_frequencies(s); }, {"freq_factors has 2 entries", "4"});
  s.freq_factors = {1.0, 2.0, 0.0, 1.0};
  expect_error([&] { rotary::compute_frequencies(s); }, {"freq_factors[2] (0)"});
  s.freq_factors.clear();
  s.receptive_field = rotary::ReceptiveField{NAN, 1.0};
  expect_error([&] { rotary::compute_frequencies(s); }, {"alpha (nan)"});
  s.receptive_field = rotary::ReceptiveField{0.5, INFINITY};
  expect_error([&] { rotary::compute_frequencies(s); }, {"rho (inf)"});
  expect_error([] { rotary::parse_pairing("neox"); }, {"pairing (\"neox\")"});
  EXPECT_EQ(rotary::parse_pairing("interleaved"), Pairing::interleaved);
}

TEST(Errors, Cache) {
  const auto f = rotary::default_frequencies(8, 10000.0);
  expect_error([&] { rotary::CosSinCache<float>(f, -1, 4); }, {"begin position (-1)"});
  expect_error([&] { rotary::CosSinCache<float>(f, 5, 4); }, {"end position (4)", "begin position (5)"});
  expect_error([&] { rotary::CosSinCache<float>::for_positions(f, {3, -7}); }, {"position (-7)"});
  rotary::Frequencies bad = f;
  bad.attention_factor = 0.0;
  expect_error([&] { rotary::CosSinCache<float>(bad, 4); }, {"attention_factor (0)"});
  bad = f;
  bad.theta[1] = NAN;
  expect_error([&] { rotary::CosSinCache<float>(bad, 4); }, {"theta[1] (nan)"});
  const rotary::CosSinCache<float> c(f, 10, 20);
  expect_error([&] { c.row(20); }, {"position (20)", "[10, 20)"});
  expect_error([&] { c.row(9); }, {"position (9)"});
  expect_error([&] { rotary::Rope<float>(RotarySpec(16), c); }, {"cache rotary_dim (8)", "spec rotary_dim (16)"});
}

class CallErrors : public ::testing::Test {
 protected:
  rotary::Rope<float> rope{RotarySpec(8, Pairing::interleaved), 16};
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(6, 8);
  rotary::RowMatrix<float> y = rotary::RowMatrix<float>::Zero(6, 8);
};

TEST_F(CallErrors, Positions) {
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(14), 2); }, {"position (16)", "[0, 16)"});
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(-1), 2); }, {"position (-1)"});
  const std::vector<std::int32_t> neg = {0, -3, 1};
  expect_error([&] { rotary::apply(rope, x, neg, 2); }, {"positions[1] (-3)"});
  const std::vector<std::int64_t> outside = {0, 1, 99};
  expect_error([&] { rotary::apply(rope, x, outside, 2); }, {"positions[2]", "position (99)"});
  const std::vector<std::int64_t> few = {0, 1};
  expect_error([&] { rotary::apply(rope, x, few, 2); }, {"positions has 2 values for 3 tokens"});
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(INT64_MAX - 1), 2); }, {"overflows"});
  const rotary::Rope<float> listed(RotarySpec(8), rotary::CosSinCache<float>::for_positions(
                                                       rotary::default_frequencies(8, 1e4), {5, 9}));
  expect_error([&] { rotary::apply(listed, x, Positions::contiguous(5), 3); }, {"position (6)", "2 listed positions"});
}

TEST_F(CallErrors, Shapes) {
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(0), 4); }, {"6 rows", "heads (4)"});
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(0), 0); }, {"heads (0)"});
  rotary::RowMatrix<float> wide = rotary::RowMatrix<float>::Zero(6, 10);
  expect_error([&] { rotary::apply(rope, wide, Positions::contiguous(0), 2); }, {"10 columns", "head_dim is 8"});
  rotary::RowMatrix<float> short_out = rotary::RowMatrix<float>::Zero(4, 8);
  expect_error([&] { rotary::apply(rope, x, short_out, Positions::contiguous(0), 2); },
               {"shape mismatch", "3 tokens", "2 tokens"});
  std::vector<float> buf(64);
  expect_error([&] { rotary::apply_strided(rope, buf.data(), rotary::StridedLayout{2, 2, 16, 4}, Positions::contiguous(0)); },
               {"rows overlap", "head stride 4"});
  expect_error([&] { rotary::apply_strided(rope, buf.data(), rotary::StridedLayout{2, 2, -16, 8}, Positions::contiguous(0)); },
               {"strides (token -16"});
  expect_error([&] { rotary::apply_strided(rope, static_cast<float*>(nullptr), rotary::StridedLayout{1, 1, 8, 8}, Positions::contiguous(0)); },
               {"input is null"});
}

TEST_F(CallErrors, Aliasing) {
  std::vector<float> buf(6 * 8 + 1);
  const Eigen::Map<rotary::RowMatrix<float>> in(buf.data(), 6, 8);
  Eigen::Map<rotary::RowMatrix<float>> shifted(buf.data() + 1, 6, 8);
  expect_error([&] { rotary::apply(rope, in, shifted, Positions::contiguous(0), 2); }, {"partially overlap"});
  // The same view twice is in place, and allowed.
  Eigen::Map<rotary::RowMatrix<float>> same(buf.data(), 6, 8);
  EXPECT_NO_THROW(rotary::apply(rope, in, same, Positions::contiguous(0), 2));
}

#ifndef NDEBUG
TEST_F(CallErrors, UncheckedAssertsInDebugBuilds) {
  GTEST_FLAG_SET(death_test_style, rotary_test::death_test_style());
  EXPECT_DEATH(rotary::apply_unchecked(rope, x, Positions::contiguous(15), 2), "");
  EXPECT_DEATH(rotary::apply_unchecked(rope, x, y, Positions::contiguous(0), 4), "");
}
#endif

}  // namespace
