// Input validation audit: every checked public entry point rejects bad input with a rotary::error
// whose message names the argument and its value, before touching any output; the *_unchecked
// variants assert the same conditions in debug builds. This file covers the checks no other test
// pins down by message (test_errors: spec, cache, apply; test_layouts: batch and varlen shapes,
// cu_seqlens, sequence positions; test_scaling / test_hf_config: rope parameters and configs;
// test_dispatch: ISA names and set_max_isa; test_edge_integers: negative and int64-limit positions).
// README's "Checked and unchecked entry points" table lists what each entry point validates.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <rotary/rotary.hpp>
#include <rotary/tensor_map.hpp>

#include "support.hpp"

namespace {

using rotary::BatchShape;
using rotary::BatchStrides;
using rotary::BatchView;
using rotary::Layout;
using rotary::Pairing;
using rotary::Positions;
using rotary::RotarySpec;
using rotary::RowMatrix;
using rotary::SequencePositions;
using rotary::StridedLayout;
using rotary_test::expect_error;

class Validation : public ::testing::Test {
 protected:
  rotary::Rope<float> rope{RotarySpec(8, Pairing::interleaved), 16};
  RowMatrix<float> q = RowMatrix<float>::Random(6, 8);  // 3 tokens x 2 heads
  RowMatrix<float> k = RowMatrix<float>::Random(3, 8);  // 3 tokens x 1 head
  std::vector<float> buf = std::vector<float>(256, 0.25f);
  const std::vector<float> buf0 = buf;
  const RowMatrix<float> q0 = q;
  const RowMatrix<float> k0 = k;
  // A rejected call must not have written anything.
  void expect_untouched() const {
    EXPECT_EQ(buf, buf0);
    EXPECT_TRUE(q == q0);
    EXPECT_TRUE(k == k0);
  }
};

TEST_F(Validation, ApplyQkEigen) {
  RowMatrix<float> k4 = RowMatrix<float>::Random(4, 8);
  const RowMatrix<float> k40 = k4;
  RowMatrix<float> wide = RowMatrix<float>::Random(3, 10);
  expect_error([&] { rotary::apply_qk(rope, q, k4, Positions::contiguous(0), 2, 1); },
               {"q has 3 tokens but k has 4"});
  expect_error([&] { rotary::apply_qk(rope, q, k, Positions::contiguous(0), 2, -1); },
               {"k: heads (-1) must be >= 1"});
  expect_error([&] { rotary::apply_qk(rope, q, k, Positions::contiguous(0), 0, 1); },
               {"q: heads (0) must be >= 1"});
  expect_error([&] { rotary::apply_qk(rope, q, wide, Positions::contiguous(0), 2, 1); },
               {"k has 10 columns", "head_dim is 8"});
  expect_error([&] { rotary::apply_qk(rope, q, k, Positions::contiguous(14), 2, 1); },
               {"position 16 (start 14 + token 2) is outside the cache [0, 16)"});
  expect_error(
      [&] {
        rotary::apply_qk(rope, q, k, std::vector<std::int32_t>{0, -1, 2}, 2, 1);
      },
      {"positions[1] (-1)"});
  RowMatrix<float> qo(6, 8);
  RowMatrix<float> ko(3, 8);
  RowMatrix<float> short_q(3, 8);
  expect_error([&] { rotary::apply_qk(rope, q, short_q, k, ko, Positions::contiguous(0), 2, 1); },
               {"q output has 3 rows, not a multiple of heads (2)"});
  expect_error([&] { rotary::apply_qk(rope, q, qo, k, k4, Positions::contiguous(0), 2, 1); },
               {"k shape mismatch", "3 tokens x 1 heads", "4 tokens x 1 heads"});
  // k's output sharing q's memory.
  Eigen::Map<RowMatrix<float>> q_alias(qo.data(), 3, 8);
  expect_error([&] { rotary::apply_qk(rope, q, qo, k, q_alias, Positions::contiguous(0), 2, 1); },
               {"q and k views overlap"});
  expect_untouched();
  EXPECT_TRUE(k4 == k40);
}

TEST_F(Validation, ApplyQkStrided) {
  float* p = buf.data();
  const StridedLayout ql{3, 2, 16, 8};
  const StridedLayout kl{3, 1, 8, 8};
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p + 100, StridedLayout{2, 2, 16, 8}, p + 60, kl, p + 60, kl,
                                 Positions::contiguous(0));
      },
      {"q shape mismatch", "3 tokens x 2 heads", "2 tokens x 2 heads"});
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p, ql, p + 60, kl, p + 60, StridedLayout{3, 2, 16, 8},
                                 Positions::contiguous(0));
      },
      {"k shape mismatch"});
  // q and k sharing memory (p, p + 40): CallErrors.OverlapMessagesSayWhere, with the whole message.
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p, ql, static_cast<const float*>(nullptr), kl,
                                 static_cast<float*>(nullptr), kl, Positions::contiguous(0));
      },
      {"k is null but holds 3 tokens"});
  const StridedLayout back{3, 1, -8, 8};
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p, ql, p + 60, back, p + 60, back, Positions::contiguous(0));
      },
      {"k strides (token -8, head 8) must be >= 0"});
  const StridedLayout two{2, 1, 8, 8};
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p, ql, p + 60, two, p + 60, two, Positions::contiguous(0));
      },
      {"q has 3 tokens but k has 2"});
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, ql, p, ql, p + 60, kl, p + 60, kl, std::vector<std::int64_t>{1, 2});
      },
      {"positions has 2 values for 3 tokens"});
  expect_untouched();
}

TEST_F(Validation, ApplyStridedViews) {
  float* p = buf.data();
  const StridedLayout l{3, 2, 16, 8};
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, l, p + 100, StridedLayout{3, 2, 16, 4}, Positions::contiguous(0));
      },
      {"output rows overlap", "head stride 4"});
  expect_error(
      [&] { rotary::apply_strided(rope, p, l, static_cast<float*>(nullptr), l, Positions::contiguous(0)); },
      {"output is null but holds 3 tokens"});
  expect_error([&] { rotary::apply_strided(rope, p, l, p + 1, l, Positions::contiguous(0)); },
               {"partially overlap"});
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, StridedLayout{-1, 2, 16, 8}, Positions::contiguous(0));
      },
      {"tokens (-1) must be >= 0"});
  expect_error(
      [&] {
        rotary::apply_strided(rope, p, l, p + 100, StridedLayout{3, 1, 16, 8}, Positions::contiguous(0));
      },
      {"shape mismatch", "3 tokens x 2 heads", "3 tokens x 1 heads"});
  expect_untouched();
}

TEST_F(Validation, ShiftAndRerotate) {
  float* p = buf.data();
  expect_error(
      [&] {
        rotary::shift_keys(rope, q, std::vector<std::int64_t>{1, 2}, 2);
      },
      {"deltas has 2 values for 3 tokens"});
  expect_error([&] { rotary::shift_keys(rope, q, Positions::contiguous(3), 2); },
               {"deltas must be an int32/int64 array"});
  expect_error([&] { rotary::shift_keys(rope, q, std::int64_t{1}, 4); },
               {"keys has 6 rows, not a multiple of heads (4)"});
  RowMatrix<float> wide = RowMatrix<float>::Random(3, 10);
  expect_error([&] { rotary::shift_keys(rope, wide, std::int64_t{1}, 3); },
               {"keys has 10 columns", "head_dim is 8"});
  expect_error(
      [&] {
        rotary::shift_keys_strided(rope, p, StridedLayout{3, 2, -16, 8}, std::int64_t{1});
      },
      {"strides (token -16, head 8) must be >= 0"});
  expect_error(
      [&] {
        rotary::shift_keys_strided(rope, p, StridedLayout{3, 2, 16, 4}, std::int64_t{1});
      },
      {"rows overlap", "head stride 4"});
  expect_error(
      [&] {
        rotary::shift_keys_strided(rope, p, StridedLayout{3, 0, 16, 8}, std::int64_t{1});
      },
      {"heads (0) must be >= 1"});
  expect_error(
      [&] {
        rotary::shift_keys_strided(rope, p, StridedLayout{3, 2, 16, 8}, std::vector<std::int32_t>{1});
      },
      {"deltas has 1 values for 3 tokens"});
  const rotary::Rope<float> other(RotarySpec(8, Pairing::half_split), 16);
  const rotary::Rope<float> narrow(RotarySpec(8, Pairing::interleaved, 1e4, 4), 16);
  const rotary::Rope<float> longer(RotarySpec(10, Pairing::interleaved, 1e4, 8), 16);
  expect_error([&] { rotary::rerotate_keys(rope, other, q, Positions::contiguous(0), 2); },
               {"differ in geometry", "pairing different"});
  expect_error([&] { rotary::rerotate_keys(rope, narrow, q, Positions::contiguous(0), 2); },
               {"differ in geometry", "rotary_dim 8 vs 4"});
  expect_error([&] { rotary::rerotate_keys(rope, longer, q, Positions::contiguous(0), 2); },
               {"differ in geometry", "head_dim 8 vs 10"});
  expect_error(
      [&] {
        rotary::rerotate_keys(rope, rope, q, std::vector<std::int64_t>{1, -2, 3}, 2);
      },
      {"positions[1] (-2) must be >= 0"});
  expect_error(
      [&] {
        rotary::rerotate_keys(rope, rope, q, std::vector<std::int64_t>{1, 2}, 2);
      },
      {"positions has 2 values for 3 tokens"});
  expect_error([&] { rotary::rerotate_keys(rope, rope, q, Positions::contiguous(-4), 2); },
               {"positions start (-4) must be >= 0"});
  expect_error([&] { rotary::rerotate_keys(rope, rope, q, Positions::contiguous(0), 5); },
               {"keys has 6 rows, not a multiple of heads (5)"});
  expect_error(
      [&] {
        rotary::rerotate_keys_strided(rope, rope, p, StridedLayout{3, 2, -1, 8}, Positions::contiguous(0));
      },
      {"strides (token -1, head 8) must be >= 0"});
  expect_untouched();
}

TEST_F(Validation, TensorMaps) {
  float* p = buf.data();
  expect_error(
      [&] {
        rotary::apply_batch(rope, Layout::thd, rotary::TensorMap4<float>(p, 1, 2, 3, 8),
                            SequencePositions::restart());
      },
      {"layout thd is rank 3"});
  expect_error(
      [&] {
        rotary::apply_varlen(rope, rotary::TensorMap3<float>(p, 2, 3, 6), std::vector<std::int64_t>{0, 2},
                             SequencePositions::restart());
      },
      {"thd tensor head_dim (6) != rope head_dim (8)"});
  expect_error(
      [&] {
        rotary::apply_batch(rope, Layout::bshd, rotary::TensorMap4<float>(p, 1, 2, 3, 6),
                            SequencePositions::restart());
      },
      {"head_dim (6) != rope head_dim (8)"});
  expect_error(
      [&] {
        rotary::apply_qk_batch(rope, Layout::bshd, rotary::TensorMap4<float>(p, 1, 2, 3, 8),
                               rotary::TensorMap4<float>(p + 64, 1, 3, 1, 8), SequencePositions::restart());
      },
      {"q is 1 x 2 but k is 1 x 3 (batch x seq)"});
  expect_error(
      [&] {
        rotary::apply_varlen(rope, rotary::TensorMap3<float>(p, 2, 3, 8), std::vector<std::int64_t>{0, 3},
                             SequencePositions::restart());
      },
      {"cu_seqlens[1] (3) != total tokens (2)"});
  expect_untouched();
}

TEST_F(Validation, LayoutsNotCoveredElsewhere) {
  float* p = buf.data();
  expect_error(
      [&] {
        rotary::token_positions(SequencePositions::starts({1, 2, 3}), {2, 2});
      },
      {"sequence start offsets has 3 values for 2 sequences"});
  expect_error(
      [&] {
        rotary::token_positions(
            SequencePositions::context_parallel(rotary::ContextSplit::load_balanced, 0, 2), {3});
      },
      {"sequence 0 has 3 local tokens, which must be even"});
  expect_error(
      [&] {
        rotary::token_positions(SequencePositions::start(std::numeric_limits<std::int64_t>::max()), {2});
      },
      {"sequence 0: start (9223372036854775807) + 2 tokens overflows int64"});
  expect_error(
      [&] {
        rotary::apply_batch(rope, BatchView<float>(p, BatchShape{1, 2, 2, 8}, BatchStrides{32, -16, 8}),
                            SequencePositions::restart());
      },
      {"strides (batch 32, seq -16, head 8) must be >= 0"});
  expect_error(
      [&] {
        rotary::apply_qk_batch(rope, BatchView<float>(p, Layout::bshd, BatchShape{1, 2, 2, 8}),
                               BatchView<float>(p + 64, Layout::bshd, BatchShape{1, 2, 1, 6}),
                               SequencePositions::restart());
      },
      {"k head_dim (6) != rope head_dim (8)"});
  expect_error(
      [&] {
        rotary::apply_qk_batch(rope, BatchView<float>(p, Layout::bshd, BatchShape{1, 2, 2, 8}),
                               BatchView<float>(p + 8, Layout::bshd, BatchShape{1, 2, 1, 8}),
                               SequencePositions::restart());
      },
      {"q and k views overlap"});
  expect_error(
      [&] {
        rotary::apply_qk_varlen(rope, p, StridedLayout{4, 1, 8, 8}, p + 100, StridedLayout{3, 1, 8, 8},
                                std::vector<std::int64_t>{0, 4}, SequencePositions::restart());
      },
      {"q has 4 tokens but k has 3"});
  expect_error(
      [&] {
        rotary::apply_varlen(rope, p, StridedLayout{0, 2, 16, 8},
                             rotary::CuSeqlens(static_cast<const std::int64_t*>(nullptr), -1),
                             SequencePositions::restart());
      },
      {"cu_seqlens has -1 values"});
  expect_error(
      [&] {
        rotary::apply_batch(
            rope, Layout::bshd, p, BatchShape{1, 2, 2, 8},
            SequencePositions::per_token(Positions::contiguous(std::numeric_limits<std::int64_t>::max())));
      },
      {"per-token positions start (9223372036854775807) + 2 tokens overflows int64"});
  expect_untouched();
}

// Null index arrays: every checked entry point that takes positions, cu_seqlens, AxisPositions or
// deltas throws rather than reading through the null pointer. A null array of 0 values is an empty
// array (an empty std::vector's data() may be null): fine for 0 tokens, a count error otherwise.
const std::int32_t* const kNull32 = nullptr;
const std::int64_t* const kNull64 = nullptr;

TEST_F(Validation, NullPositionsApply) {
  float* p = buf.data();
  const StridedLayout l{3, 2, 16, 8};
  const char* null3 = "positions is null but holds 3 values";
  expect_error([&] { rotary::apply(rope, q, Positions(kNull32, 3), 2); }, {null3});
  expect_error([&] { rotary::apply(rope, RowMatrix<float>(q0), q, Positions(kNull64, 3), 2); }, {null3});
  expect_error([&] { rotary::apply_strided(rope, p, l, Positions(kNull64, 3)); }, {null3});
  expect_error([&] { rotary::apply_strided(rope, p, l, p + 100, l, Positions(kNull32, 3)); }, {null3});
  expect_error([&] { rotary::apply_qk(rope, q, k, Positions(kNull32, 3), 2, 1); }, {null3});
  expect_error(
      [&] {
        rotary::apply_qk_strided(rope, p, l, p, l, p + 60, StridedLayout{3, 1, 8, 8}, p + 60,
                                 StridedLayout{3, 1, 8, 8}, Positions(kNull64, 3));
      },
      {null3});
  // A null pointer with another count is first of all the wrong count.
  expect_error([&] { rotary::apply(rope, q, Positions(kNull32, 0), 2); },
               {"positions has 0 values for 3 tokens"});
  // Short arrays whose length the API knows (std::vector, Eigen vectors): a count error, never a read past
  // them.
  const Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> two = Eigen::Matrix<std::int64_t, 2, 1>(0, 1);
  expect_error([&] { rotary::apply(rope, q, two, 2); }, {"positions has 2 values for 3 tokens"});
  expect_error([&] { rotary::apply(rope, q, std::vector<std::int32_t>{}, 2); },
               {"positions has 0 values for 3 tokens"});
  expect_untouched();
  // An empty call with an empty (null) array is fine.
  EXPECT_NO_THROW(rotary::apply_strided(rope, p, StridedLayout{0, 2, 16, 8}, Positions(kNull32, 0)));
  EXPECT_NO_THROW(rotary::apply_strided(rope, p, StridedLayout{0, 2, 16, 8}, std::vector<std::int64_t>{}));
  // Cache-free ropes validate the same way.
  const rotary::Rope<float> otf(RotarySpec(8, Pairing::interleaved), rotary::OnTheFly{});
  expect_error([&] { rotary::apply(otf, q, Positions(kNull64, 3), 2); }, {null3});
  expect_untouched();
}

TEST_F(Validation, NullIndexArraysLayouts) {
  float* p = buf.data();
  const BatchShape s{2, 3, 1, 8};  // 6 tokens
  const auto null_tokens = SequencePositions::per_token(Positions(kNull32, 6));
  expect_error([&] { rotary::apply_batch(rope, Layout::bshd, p, s, null_tokens); },
               {"per-token positions is null but holds 6 values"});
  expect_error([&] { rotary::apply_batch(rope, BatchView<float>(p, Layout::bhsd, s), null_tokens); },
               {"per-token positions is null"});
  expect_error(
      [&] {
        rotary::apply_qk_batch(rope, BatchView<float>(p, Layout::bshd, s),
                               BatchView<float>(p + 100, Layout::bshd, s),
                               SequencePositions::per_token(Positions(kNull64, 6)));
      },
      {"per-token positions is null"});
  expect_error([&] { rotary::token_positions(null_tokens, {3, 3}); }, {"per-token positions is null"});
  const StridedLayout l{6, 1, 8, 8};
  expect_error(
      [&] {
        rotary::apply_varlen(rope, p, l, std::vector<std::int64_t>{0, 2, 6}, null_tokens);
      },
      {"per-token positions is null"});
  expect_error(
      [&] { rotary::apply_varlen(rope, p, l, rotary::CuSeqlens(kNull32, 3), SequencePositions::restart()); },
      {"cu_seqlens is null but holds 3 values"});
  expect_error(
      [&] {
        rotary::apply_qk_varlen(rope, p, l, p + 100, l, rotary::CuSeqlens(kNull64, 2),
                                SequencePositions::restart());
      },
      {"cu_seqlens is null but holds 2 values"});
  expect_error(
      [&] {
        rotary::apply_varlen(rope, rotary::TensorMap3<float>(p, 6, 1, 8), rotary::CuSeqlens(kNull64, 2),
                             SequencePositions::restart());
      },
      {"cu_seqlens is null"});
  // A short per-token array is a count error.
  expect_error(
      [&] {
        rotary::apply_batch(rope, Layout::bshd, p, s,
                            SequencePositions::per_token(std::vector<std::int64_t>(5, 0)));
      },
      {"per-token positions has 5 values for 6 tokens"});
  expect_untouched();
  // An empty batch with an empty (null) per-token array is fine.
  EXPECT_NO_THROW(rotary::apply_batch(rope, Layout::bshd, p, BatchShape{0, 3, 1, 8},
                                      SequencePositions::per_token(Positions(kNull32, 0))));
}

TEST_F(Validation, NullIndexArraysOtherEntryPoints) {
  float* p = buf.data();
  // rerotate: deltas and positions
  expect_error([&] { rotary::shift_keys(rope, q, Positions(kNull32, 3), 2); },
               {"deltas is null but holds 3 values"});
  expect_error(
      [&] {
        rotary::shift_keys_strided(rope, p, StridedLayout{3, 2, 16, 8}, Positions(kNull64, 3));
      },
      {"deltas is null"});
  expect_error([&] { rotary::rerotate_keys(rope, rope, q, Positions(kNull64, 3), 2); },
               {"positions is null but holds 3 values"});
  // xPos
  const rotary::XPos<float> xpos(RotarySpec(8, Pairing::interleaved));
  expect_error([&] { rotary::apply(xpos.queries(), q, Positions(kNull32, 3), 2); }, {"positions is null"});
  expect_error([&] { rotary::apply_qk(xpos.queries(), q, k, Positions(kNull64, 3), 2, 1); }, {"positions is null"});
  // linear attention
  const RowMatrix<float> v = RowMatrix<float>::Random(3, 4);
  expect_error([&] { (void)rotary::rope_linear_attention(rope, k, k, v, Positions(kNull32, 3)); },
               {"positions is null"});
  expect_error(
      [&] {
        (void)rotary::rope_linear_attention(rope, k, k, v, Positions::contiguous(0), Positions(kNull64, 3));
      },
      {"k_positions is null but holds 3 values"});
  // gradients
  const RowMatrix<float> dy = RowMatrix<float>::Random(6, 8);
  expect_error(
      [&] {
        (void)rotary::theta_gradient(RotarySpec(8, Pairing::interleaved), q, dy, Positions(kNull32, 3), 2);
      },
      {"positions is null but holds 3 values"});
  std::vector<double> grad(4, 0.0);
  expect_error(
      [&] {
        rotary::accumulate_theta_gradient_strided(RotarySpec(8, Pairing::interleaved), p,
                                                  StridedLayout{3, 2, 16, 8}, p, StridedLayout{3, 2, 16, 8},
                                                  Positions(kNull64, 3), grad);
      },
      {"positions is null"});
  expect_error([&] { rotary::input_gradient(rope, q, Positions(kNull32, 3), 2); }, {"positions is null"});
  // multi-axis: a null planar array, a null stream among several, an Eigen matrix of the wrong width
  const rotary::MultiAxisRope<float> mrope(RotarySpec(8, Pairing::half_split),
                                           rotary::mrope_axis_map(8, {2, 1, 1}), 16);
  expect_error([&] { rotary::apply(mrope, q, rotary::AxisPositions(kNull64, 3, 3), 2); },
               {"positions stream 0 is null but holds 3 tokens"});
  const std::vector<std::int32_t> row = {0, 1, 2};
  expect_error(
      [&] {
        rotary::apply(mrope, q,
                      rotary::AxisPositions::of_streams<std::int32_t>({row.data(), nullptr, row.data()}, 3),
                      2);
      },
      {"positions stream 1 is null"});
  const Eigen::Matrix<std::int64_t, 3, 2> narrow = Eigen::Matrix<std::int64_t, 3, 2>::Zero();
  expect_error([&] { rotary::apply(mrope, q, narrow, 2); },
               {"positions have 2 tokens per stream for 3 tokens"});
  expect_untouched();
  EXPECT_EQ(grad, std::vector<double>(4, 0.0));
}

TEST(ValidationConstruction, RopeCacheFrequencies) {
  expect_error([] { rotary::Rope<float>(RotarySpec(0), rotary::OnTheFly{}); },
               {"head_dim (0) must be positive"});
  expect_error([] { rotary::Rope<float>(RotarySpec(8, Pairing::half_split, 1e4, 7), rotary::OnTheFly{}); },
               {"rotary_dim (7) must be even"});
  expect_error(
      [] { rotary::Rope<float>(RotarySpec(8), rotary::default_frequencies(4, 1e4), rotary::OnTheFly{}); },
      {"frequencies rotary_dim (4) != spec rotary_dim (8)"});
  expect_error([] { rotary::Rope<double>(RotarySpec(8), -1); }, {"max_position (-1) must be >= 0"});
  expect_error([] { rotary::Frequencies().validate(); }, {"theta is empty"});
  expect_error([] { rotary::CosSinCache<float>(rotary::Frequencies{}, 4); }, {"theta is empty"});
  expect_error([] { rotary::CosSinCache<double>::for_positions(rotary::Frequencies{}, {1}); },
               {"theta is empty"});
  rotary::Frequencies inf = rotary::default_frequencies(4, 1e4);
  inf.attention_factor = INFINITY;
  expect_error([&] { rotary::CosSinCache<float>::for_positions(inf, {1}); }, {"attention_factor (inf)"});
  expect_error([] { rotary::finish_frequencies(RotarySpec(8), rotary::default_frequencies(6, 1e4)); },
               {"frequencies cover rotary_dim 6 but the spec says 8"});
  const rotary::CosSinCache<float> listed =
      rotary::CosSinCache<float>::for_positions(rotary::default_frequencies(4, 1e4), {2, 9});
  expect_error([&] { listed.row(5); }, {"position (5) is not one of the cache's 2 listed positions"});
  expect_error([&] { listed.sin(10); }, {"position (10)"});
}

TEST(ValidationReference, MatricesAndWeights) {
  expect_error(
      [] {
        rotary::reference::rotation_matrix_from({1, 2}, {1, 2, 3}, 8, Pairing::interleaved);
      },
      {"rotation_matrix_from: 2 cos and 3 sin values for head_dim 8"});
  expect_error(
      [] { rotary::reference::rotation_matrix(std::vector<double>(5, 0.1), 8, Pairing::half_split, 3); },
      {"5 cos and 5 sin values for head_dim 8"});
  expect_error(
      [] {
        rotary::reference::rotate_complex(Eigen::VectorXd::Zero(8), std::vector<double>(5, 1.0),
                                          Pairing::interleaved, 3);
      },
      {"rotate_complex: 5 pairs do not fit in 8 coordinates"});
  expect_error([] { rotary::reference::pairing_permutation(8, 3); }, {"rotary_dim (3) must be even"});
  expect_error([] { rotary::reference::pairing_permutation(8, 10); }, {"rotary_dim (10)", "head_dim (8)"});
  expect_error([] { rotary::pairing_row_map(Pairing::interleaved, Pairing::half_split, 0, 8, 8); },
               {"pairing_row_map: heads (0) must be >= 1"});
  expect_error([] { rotary::pairing_row_map(Pairing::interleaved, Pairing::half_split, 2, 0, 8); },
               {"pairing_row_map: head_dim (0) must be >= 1"});
  expect_error([] { rotary::pairing_row_map(Pairing::interleaved, Pairing::half_split, 2, 8, 0); },
               {"pairing_row_map: rotary_dim (0)"});
  const Eigen::MatrixXf w = Eigen::MatrixXf::Random(16, 4);
  expect_error([&] { (void)rotary::convert_pairing(w, Pairing::half_split, Pairing::interleaved, 3, 8, 8); },
               {"weights has 16 rows; heads (3) x head_dim (8) = 24"});
  expect_error([&] { (void)rotary::probe_convention(w, w, 3, 2, 8, 8); }, {"W_q has 16 rows"});
  expect_error([&] { (void)rotary::probe_convention(w, w.topRows(0), 2, 1, 8, 8); },
               {"W_k has 0 rows; heads (1)"});
  expect_error([] { rotary::parse_isa("sse"); }, {"isa (\"sse\")"});  // parse_pairing: Errors.Spec
}

#if !defined(NDEBUG) && !(defined(ROTARY_TEST_EMULATED) && ROTARY_TEST_EMULATED)
// The unchecked variants run the same checks as ROTARY_ASSERTs in debug builds.
TEST_F(Validation, UncheckedVariantsAssertInDebugBuilds) {
  GTEST_FLAG_SET(death_test_style, rotary_test::death_test_style());
  float* p = buf.data();
  const StridedLayout l{3, 2, 16, 8};
  // Each prints the message the checked variant throws before the assertion fails.
  // (Input and output one element apart: CallErrors.UncheckedAssertionsPrintTheMessage.)
  EXPECT_DEATH(rotary::unchecked::apply_strided(rope, p, l, p + 100, l, Positions::contiguous(15)),
               "rotary: position 17 .start 15 . token 2. is outside the cache");
  EXPECT_DEATH(rotary::unchecked::apply_qk_strided(rope, p, l, p, l, p + 40, StridedLayout{3, 1, 8, 8}, p + 40,
                                                  StridedLayout{3, 1, 8, 8}, Positions::contiguous(0)),
               "rotary: q and k views overlap: q .token 2, head 1. element 0 is the same memory as k");
  EXPECT_DEATH(
      rotary::unchecked::apply_batch(rope, BatchView<const float>(p, Layout::bshd, BatchShape{1, 2, 2, 8}),
                                    BatchView<float>(p + 4, Layout::bshd, BatchShape{1, 2, 2, 8}),
                                    SequencePositions::restart()),
      "rotary: input and output overlap: input .batch 0, token 0, head 0. element 4");
  EXPECT_DEATH(
      rotary::unchecked::apply_qk_batch(rope, BatchView<const float>(p, Layout::bshd, BatchShape{1, 2, 2, 8}),
                                       BatchView<float>(p, Layout::bshd, BatchShape{1, 2, 2, 8}),
                                       BatchView<const float>(p + 128, Layout::bshd, BatchShape{1, 2, 1, 8}),
                                       BatchView<float>(p + 128, Layout::bshd, BatchShape{1, 2, 1, 8}),
                                       SequencePositions::start(15)),
      "rotary: position 16 .start 15 . token 1. is outside the cache");
  // Null index arrays too.
  EXPECT_DEATH(rotary::unchecked::apply_strided(rope, p, l, p + 100, l, Positions(kNull32, 3)),
               "rotary: positions is null but holds 3 values");
  EXPECT_DEATH(
      rotary::unchecked::apply_batch(rope, BatchView<const float>(p, Layout::bshd, BatchShape{1, 3, 1, 8}),
                                    BatchView<float>(p, Layout::bshd, BatchShape{1, 3, 1, 8}),
                                    SequencePositions::per_token(Positions(kNull64, 3))),
      "rotary: per-token positions is null but holds 3 values");
  const rotary::MultiAxisRope<float> mrope(RotarySpec(8, Pairing::half_split),
                                           rotary::mrope_axis_map(8, {2, 1, 1}), 16);
  EXPECT_DEATH(rotary::unchecked::apply(mrope, q, rotary::AxisPositions(kNull64, 3, 3), 2),
               "rotary: positions stream 0 is null but holds 3 tokens");
}
#endif

}  // namespace
