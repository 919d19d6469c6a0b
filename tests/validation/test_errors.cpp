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
  // an integer cast to Pairing is neither pairing (the kernels took it for interleaved)
  const auto seven = static_cast<Pairing>(7);
  expect_error([&] { rotary::compute_frequencies(RotarySpec(64, seven)); }, {"pairing (7) is neither"});
  expect_error([&] { rotary::Rope<float>(RotarySpec(64, seven), 8); }, {"pairing (7)"});
  std::vector<float> table(8 * 64);
  expect_error(
      [&] {
        rotary::TableRope<float>(64, 64, seven,
                                 rotary::CosSinTableView<float>::concatenated(table.data(), 8, 64));
      },
      {"pairing (7) is neither"});
}

// Found by an adversarial review of the research entry points (UBSan): what they cannot compute is
// refused by name instead of overflowing or returning inf / NaN.
TEST(Errors, AnalysisAndGradientsRefuseWhatTheyCannotCompute) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  // theta past kMaxTheta: the exact reduction's domain (1e308 overflowed it: NaN to int64); a
  // freq_factor of 1e-308 makes one
  RotarySpec spec(4);
  spec.freq_factors = {1e-308, 1.0};
  expect_error([&] { rotary::Rope<float>(spec, 16); }, {"theta[0] (1e+308) exceeds kMaxTheta (64"});
  expect_error([] { rotary::decay_bound(std::vector<double>{1e308}, 4000000000LL); }, {"exceeds kMaxTheta"});
  expect_error(
      [] {
        rotary::CosSinCache<float>(rotary::Frequencies{{100.0, 1.0}, 1.0}, 0, 4);
      },
      {"theta[0] (100)"});
  EXPECT_NO_THROW(rotary::CosSinCache<float>(rotary::Frequencies{{-64.0, 64.0}, 1.0}, 0, 4));
  // theta gradients over contiguous positions that leave int64
  const rotary::RowMatrix<double> y = rotary::RowMatrix<double>::Ones(2, 4);
  const rotary::RowMatrix<double> dy = rotary::RowMatrix<double>::Ones(2, 4);
  std::vector<double> g(2);
  expect_error(
      [&] { rotary::accumulate_theta_gradient(RotarySpec(4), y, dy, Positions::contiguous(kMax), 1, g); },
      {"positions start (9223372036854775807) + 2 tokens overflows int64"});
  rotary::accumulate_theta_gradient(RotarySpec(4), y, dy, Positions::contiguous(kMax - 1), 1, g);  // fits
  // distance grids over the whole int64 range
  expect_error([] { rotary::linear_distances(0, kMax, 1); }, {"more than a vector can hold"});
  expect_error([] { rotary::linear_distances(std::numeric_limits<std::int64_t>::min(), kMax, 1); },
               {"more than a vector can hold"});
  EXPECT_EQ(rotary::linear_distances(-kMax, kMax, kMax), (std::vector<std::int64_t>{-kMax, 0, kMax}));
  EXPECT_EQ(rotary::linear_distances(3, 10, 3), (std::vector<std::int64_t>{3, 6, 9}));
  // pairs x 2 past int64, and Pairing values that are neither
  const Eigen::VectorXd q = Eigen::VectorXd::Ones(4);
  expect_error([&] { rotary::pair_products(q, q, Pairing::half_split, kMax / 2 + 1); },
               {"pairs need twice as many"});
  const auto seven = static_cast<Pairing>(7);
  expect_error([&] { rotary::pair_products(q, q, seven, 2); }, {"pair_products: pairing (7) is neither"});
  expect_error(
      [&] {
        rotary::score_gradient(rotary::Frequencies{{1.0, 0.1}, 1.0}, seven, q, 3, q, 10);
      },
      {"score_gradient: pairing (7)"});
  expect_error([&] { rotary::pairing_row_map(seven, Pairing::half_split, 1, 4, 4); },
               {"pairing_row_map: from"});
  expect_error([&] { rotary::pairing_row_map(Pairing::half_split, static_cast<Pairing>(9), 1, 4, 4); },
               {"pairing_row_map: to: pairing (9)"});
  // base^-rho beyond a double: refused, not returned as inf / NaN gradients
  expect_error(
      [] {
        rotary::receptive_field_gradient({1.0, 0.1}, 10000.0, rotary::ReceptiveField{0.5, -1e5}, {1, 1});
      },
      {"not finite"});
  // xPos factor at a position whose offset from the centre leaves int64 (was signed overflow)
  const rotary::XPos<float> xpos(RotarySpec(8));
  EXPECT_NO_THROW(static_cast<void>(xpos.scale(0, std::numeric_limits<std::int64_t>::min(), 1.0)));
}

// Dense batch strides are products of the shape: past PTRDIFF_MAX they are refused by name, before
// they are formed (signed overflow before, and a message quoting the wrapped stride).
TEST(Errors, DenseBatchStridesBeyondMemory) {
  const rotary::Rope<float> rope(RotarySpec(8), 16);
  std::vector<float> x(64);
  expect_error(
      [&] {
        rotary::BatchView<float>(x.data(), rotary::Layout::bhsd,
                                 rotary::BatchShape{1, std::int64_t{1} << 40, std::int64_t{1} << 30, 8});
      },
      {"dense bhsd tensor", "stride past PTRDIFF_MAX"});
  expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::Layout::sbhd, x.data(),
                            rotary::BatchShape{std::int64_t{1} << 40, 1, std::int64_t{1} << 30, 8},
                            rotary::SequencePositions::restart());
      },
      {"dense sbhd tensor", "heads 1073741824"});
  // sizes the view refuses by name are left to it (negative: strides 0, no product formed)
  expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::Layout::bshd, x.data(), rotary::BatchShape{1, -2, 1, 8},
                            rotary::SequencePositions::restart());
      },
      {"-2"});
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
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(14), 2); },
               {"position 16 (start 14 + token 2) is outside the cache [0, 16)"});
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(-1), 2); },
               {"positions start (-1) must be >= 0"});
  const std::vector<std::int32_t> neg = {0, -3, 1};
  expect_error([&] { rotary::apply(rope, x, neg, 2); }, {"positions[1] (-3)"});
  const std::vector<std::int64_t> outside = {0, 1, 99};
  expect_error([&] { rotary::apply(rope, x, outside, 2); }, {"positions[2]", "position (99)"});
  const std::vector<std::int64_t> few = {0, 1};
  expect_error([&] { rotary::apply(rope, x, few, 2); }, {"positions has 2 values for 3 tokens"});
  expect_error([&] { rotary::apply(rope, x, Positions::contiguous(INT64_MAX - 1), 2); }, {"overflows"});
  const rotary::Rope<float> listed(RotarySpec(8), rotary::CosSinCache<float>::for_positions(
                                                       rotary::default_frequencies(8, 1e4), {5, 9}));
  expect_error([&] { rotary::apply(listed, x, Positions::contiguous(5), 3); },
               {"position 6 (start 5 + token 1) is not one of the cache's 2 listed positions"});
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
  // Overlapping rows ({2, 2, 16, 4}): OverlapMessagesSayWhere, with the whole message.
  expect_error([&] { rotary::apply_strided(rope, buf.data(), rotary::StridedLayout{2, 2, -16, 8}, Positions::contiguous(0)); },
               {"strides (token -16"});
  expect_error(
      [&] {
        rotary::apply_strided(rope, static_cast<float*>(nullptr), rotary::StridedLayout{1, 1, 8, 8},
                              Positions::contiguous(0));
      },
      {"x is null but holds 1 tokens"});
}

TEST_F(CallErrors, Aliasing) {
  std::vector<float> buf(6 * 8 + 1);
  const Eigen::Map<rotary::RowMatrix<float>> in(buf.data(), 6, 8);
  // Views one element apart are refused (OverlapMessagesSayWhere); the same view twice is in place,
  // and allowed.
  Eigen::Map<rotary::RowMatrix<float>> same(buf.data(), 6, 8);
  EXPECT_NO_THROW(rotary::apply(rope, in, same, Positions::contiguous(0), 2));
}

// Messages point at the mistake: the argument as the caller named it, the token behind a position,
// and where views share memory (row and element of each).
TEST_F(CallErrors, MessagesNameTheArgument) {
  std::vector<float> buf(512, 0.5f);
  float* p = buf.data();
  // One tensor of a batch is "x" in place, "input" / "output" out of place; q and k only when fused.
  const rotary::BatchShape narrow{1, 2, 2, 6};
  expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::BatchView<float>(p, rotary::Layout::bshd, narrow),
                            rotary::SequencePositions::restart());
      },
      {"rotary: x head_dim (6) != rope head_dim (8)"});
  expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::BatchView<const float>(p, rotary::Layout::bshd, narrow),
                            rotary::BatchView<float>(p + 100, rotary::Layout::bshd, narrow),
                            rotary::SequencePositions::restart());
      },
      {"rotary: input head_dim (6) != rope head_dim (8)"});
  expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::Layout::bhsd, p, narrow, rotary::SequencePositions::restart());
      },
      {"rotary: x head_dim (6)"});
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, rotary::StridedLayout{2, 1, -8, 8}, Positions::contiguous(0));
      },
      {"rotary: x strides (token -8, head 8) must be >= 0"});
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, rotary::StridedLayout{2, 1, 8, 8}, p + 100,
                              rotary::StridedLayout{2, 1, -8, 8}, Positions::contiguous(0));
      },
      {"rotary: output strides (token -8, head 8) must be >= 0"});
  expect_error(
      [&] {
        rotary::shift_keys_strided(rope, static_cast<float*>(nullptr), rotary::StridedLayout{2, 1, 8, 8},
                                   std::int64_t{1});
      },
      {"rotary: keys is null but holds 2 tokens"});
  // Contiguous positions name the start and the token.
  const rotary::Rope<float> table(RotarySpec(8, Pairing::interleaved), 256);
  rotary::RowMatrix<float> ten = rotary::RowMatrix<float>::Zero(10, 8);
  expect_error([&] { rotary::apply(table, ten, Positions::contiguous(250), 1); },
               {"rotary: position 259 (start 250 + token 9) is outside the cache [0, 256)"});
  EXPECT_TRUE(ten.isZero());
}

TEST_F(CallErrors, OverlapMessagesSayWhere) {
  std::vector<float> buf(512, 0.5f);
  float* p = buf.data();
  // Input and output one element apart: the first shared element of each.
  const Eigen::Map<rotary::RowMatrix<float>> in(p, 6, 8);
  Eigen::Map<rotary::RowMatrix<float>> shifted(p + 1, 6, 8);
  expect_error(
      [&] { rotary::apply(rope, in, shifted, Positions::contiguous(0), 2); },
      {"input and output partially overlap: input (token 0, head 0) element 1 is the same memory as output "
       "(token 0, head 0) element 0"});
  // Rows that interleave without sharing an element: the ranges each view covers.
  const rotary::StridedLayout gaps{1, 2, 16, 16};
  expect_error(
      [&] { rotary::apply_strided(rope, p, gaps, p + 8, gaps, Positions::contiguous(0)); },
      {"input spans elements [0, 24) and output [8, 32) counted from input's first element; their rows "
       "interleave without sharing an element"});
  // Rows of one view: which row starts inside which.
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, rotary::StridedLayout{2, 2, 16, 4}, Positions::contiguous(0));
      },
      {"x rows overlap: row (token 0, head 1) starts at element 4 of row (token 0, head 0) (token stride 16, "
       "head "
       "stride 4, head_dim 8; 2 tokens x 2 heads)"});
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, rotary::StridedLayout{3, 2, 12, 16}, Positions::contiguous(0));
      },
      {"x rows overlap: row (token 0, head 1) starts at element 4 of row (token 1, head 0)"});
  // Disjoint rows whose strides do not nest: rejected, and said so.
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, rotary::StridedLayout{3, 2, 16, 24}, Positions::contiguous(0));
      },
      {"x rows overlap or interleave (token stride 16, head stride 24, head_dim 8; 3 tokens x 2 heads)"});
  // Fused q and k: which views, and where.
  const rotary::StridedLayout ql{3, 2, 16, 8};
  const rotary::StridedLayout kl{3, 1, 8, 8};
  expect_error(
      [&] { rotary::apply_qk_strided(rope, p, ql, p, ql, p + 40, kl, p + 40, kl, Positions::contiguous(0)); },
      {"q and k views overlap: q (token 2, head 1) element 0 is the same memory as k (token 0, head 0) "
       "element 0"});
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p + 200, ql, p + 236, kl, p + 300, kl,
                                 Positions::contiguous(0));
      },
      {"q and k views overlap: q output (token 2, head 0) element 4 is the same memory as k input (token 0, "
       "head 0) "
       "element 0"});
  // The other two pairs the check compares: q and k outputs, and a k output over q's input.
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p + 200, ql, p + 300, kl, p + 236, kl, Positions::contiguous(0));
      },
      {"q and k views overlap: q output (token 2, head 0) element 4 is the same memory as k output (token 0, "
       "head 0) element 0"});
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p + 200, ql, p + 300, kl, p + 8, kl, Positions::contiguous(0));
      },
      {"q and k views overlap: k output (token 0, head 0) element 0 is the same memory as q input (token 0, "
       "head 1) element 0"});
  // Batches: batch, token and head of each view.
  const rotary::BatchShape s{2, 2, 2, 8};
  expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::BatchView<const float>(p, rotary::Layout::bshd, s),
                            rotary::BatchView<float>(p + 36, rotary::Layout::bshd, s),
                            rotary::SequencePositions::restart());
      },
      {"input and output overlap: input (batch 1, token 0, head 0) element 4 is the same memory as output "
       "(batch 0, "
       "token 0, head 0) element 0"});
  expect_error(
      [&] {
        rotary::apply_qk_batch(
            rope, rotary::BatchView<float>(p, rotary::Layout::bshd, s),
            rotary::BatchView<float>(p + 56, rotary::Layout::bshd, rotary::BatchShape{2, 2, 1, 8}),
            rotary::SequencePositions::restart());
      },
      {"q and k views overlap: q (batch 1, token 1, head 1) element 0 is the same memory as k (batch 0, "
       "token 0, head "
       "0) element 0"});
  expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::BatchView<float>(p, s, rotary::BatchStrides{32, 16, 4}),
                            rotary::SequencePositions::restart());
      },
      {"x rows overlap: row (batch 0, token 0, head 1) starts at element 4 of row (batch 0, token 0, head "
       "0)"});
  EXPECT_EQ(buf, std::vector<float>(512, 0.5f));
}

#ifndef NDEBUG
TEST_F(CallErrors, UncheckedAssertsInDebugBuilds) {
  GTEST_FLAG_SET(death_test_style, rotary_test::death_test_style());
  EXPECT_DEATH(rotary::unchecked::apply(rope, x, Positions::contiguous(15), 2), "");
  EXPECT_DEATH(rotary::unchecked::apply(rope, x, y, Positions::contiguous(0), 4), "");
}
#endif

#if !defined(NDEBUG) && !(defined(ROTARY_TEST_EMULATED) && ROTARY_TEST_EMULATED)
// The failed assertion of an unchecked call prints the message the checked call would throw.
TEST_F(CallErrors, UncheckedAssertionsPrintTheMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(rotary::unchecked::apply(rope, x, Positions::contiguous(15), 2),
               "rotary: position 17 .start 15 . token 2. is outside the cache .0, 16.");
  EXPECT_DEATH(rotary::unchecked::apply(rope, x, Positions(static_cast<const std::int64_t*>(nullptr), 3), 2),
               "rotary: positions is null but holds 3 values");
  EXPECT_DEATH(rotary::unchecked::apply(rope, x, y, Positions::contiguous(0), 4),
               "rotary: input has 6 rows, not a multiple of heads .4.");
  std::vector<float> buf(256);
  const rotary::StridedLayout l{3, 2, 16, 8};
  EXPECT_DEATH(
      rotary::unchecked::apply_strided(rope, buf.data(), l, buf.data() + 1, l, Positions::contiguous(0)),
      "rotary: input and output partially overlap: input .token 0, head 0. element 1");
  EXPECT_DEATH(
      rotary::unchecked::apply_batch(
          rope,
          rotary::BatchView<const float>(buf.data(), rotary::Layout::bshd, rotary::BatchShape{1, 3, 2, 8}),
          rotary::BatchView<float>(buf.data(), rotary::Layout::bshd, rotary::BatchShape{1, 3, 2, 8}),
          rotary::SequencePositions::per_token(Positions(static_cast<const std::int32_t*>(nullptr), 3))),
      "rotary: per-token positions is null but holds 3 values");
}
#endif

}  // namespace
