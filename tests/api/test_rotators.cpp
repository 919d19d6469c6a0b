// Every rotator takes every entry point family (one driver, apply.hpp / layouts.hpp): a table Rope,
// a cache-free Rope, multi-axis ropes (table and cache-free) and xPos query / key views, through
// apply_batch / apply_qk_batch (bshd, bhsd, sbhd; in and out of place; threads) and apply_varlen /
// apply_qk_varlen (uneven and empty sequences). Each result must equal, bit for bit, the same rotator
// applied to each sequence alone after gathering it into a dense tokens x heads buffer (so neither the
// batch folding nor the traversal order nor the threads can change a bit), and the fused key heads
// of an xPos query view must equal the key view's own call.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <rotary/layouts.hpp>
#include <rotary/multi_axis.hpp>
#include <rotary/table.hpp>
#include <rotary/xpos.hpp>

#include "support.hpp"

namespace {

using rotary::AxisPositions;
using rotary::BatchShape;
using rotary::Direction;
using rotary::Layout;
using rotary::Pairing;
using rotary::Positions;
using rotary::SequencePositions;
using rotary::StridedLayout;
using rotary_test::same_bits;

constexpr std::int64_t kHeadDim = 32;
constexpr std::int64_t kMaxTokens = 64;

// 1-D rotators: sequence b starts at starts[b].
struct OneD {
  std::vector<std::int64_t> starts{0, 7, 100, 3};
  SequencePositions all(std::size_t sequences) const {
    return SequencePositions::starts({starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(sequences)});
  }
  Positions sequence(std::size_t b, std::int64_t /*first*/, std::int64_t /*count*/) const {
    return Positions::contiguous(starts[b]);
  }
};

// Multi-axis rotators: three streams of random positions, one per token in memory order.
struct ThreeAxes {
  std::vector<std::int64_t> data;  // [3 x kMaxTokens]
  explicit ThreeAxes(std::mt19937_64& rng) : data(rotary_test::random_positions(3 * kMaxTokens, 200, rng)) {}
  AxisPositions at(std::int64_t first, std::int64_t count) const {
    return AxisPositions::strided(data.data() + first, 3, count, kMaxTokens, 1);
  }
  AxisPositions all(std::size_t /*sequences*/, std::int64_t total) const { return at(0, total); }
  AxisPositions sequence(std::size_t /*b*/, std::int64_t first, std::int64_t count) const { return at(first, count); }
};

template <class Pos>
auto batch_positions(const Pos& p, std::size_t sequences, std::int64_t total) {
  if constexpr (std::is_same_v<Pos, OneD>) {
    static_cast<void>(total);
    return p.all(sequences);
  } else {
    return p.all(sequences, total);
  }
}

// Element offset of (b, t, h) in a dense tensor of `layout`.
std::int64_t offset(Layout layout, const BatchShape& s, std::int64_t b, std::int64_t t, std::int64_t h) {
  switch (layout) {
    case Layout::bhsd: return ((b * s.heads + h) * s.seq + t) * s.head_dim;
    case Layout::sbhd: return ((t * s.batch + b) * s.heads + h) * s.head_dim;
    default: return ((b * s.seq + t) * s.heads + h) * s.head_dim;
  }
}

// Rotates sequence b of x (tokens [first, first + count) of the memory order) alone: gathered into a
// dense buffer, rotated there, scattered back.
template <class T, class R, class P, class Where>
void rotate_alone(const R& r, std::vector<T>& x, std::int64_t count, std::int64_t heads, const P& positions,
                  Direction dir, const Where& where) {
  std::vector<T> dense(static_cast<std::size_t>(count * heads * kHeadDim));
  for (std::int64_t t = 0; t < count; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t j = 0; j < kHeadDim; ++j)
        dense[static_cast<std::size_t>((t * heads + h) * kHeadDim + j)] = x[static_cast<std::size_t>(where(t, h) + j)];
  rotary::apply_strided(r, dense.data(), StridedLayout{count, heads, heads * kHeadDim, kHeadDim}, positions, dir);
  for (std::int64_t t = 0; t < count; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t j = 0; j < kHeadDim; ++j)
        x[static_cast<std::size_t>(where(t, h) + j)] = dense[static_cast<std::size_t>((t * heads + h) * kHeadDim + j)];
}

// Batches of every dense layout: apply_batch (in place, out of place, threaded) and apply_qk_batch
// (GQA: 4 query heads, 2 key heads) against each sequence alone. kr: the rotator of fused keys.
template <class T, class R, class KR, class Pos>
void check_batches(const R& r, const KR& kr, const Pos& pos, std::mt19937_64& rng) {
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  const std::int64_t batch = 3;
  const std::int64_t seq = 5;
  const std::int64_t qh = 4;
  const std::int64_t kh = 2;
  for (const Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    for (const Direction dir : {Direction::forward, Direction::inverse}) {
      SCOPED_TRACE(std::string(rotary::to_string(layout)) + (dir == Direction::inverse ? " inverse" : " forward"));
      const BatchShape qs{batch, seq, qh, kHeadDim};
      const BatchShape ks{batch, seq, kh, kHeadDim};
      const std::vector<T> q = rotary_test::random_vector<T>(static_cast<std::size_t>(batch * seq * qh * kHeadDim), rng);
      const std::vector<T> k = rotary_test::random_vector<T>(static_cast<std::size_t>(batch * seq * kh * kHeadDim), rng);
      std::vector<T> q_want = q;
      std::vector<T> k_want = k;
      for (std::int64_t b = 0; b < batch; ++b) {
        const auto p = pos.sequence(static_cast<std::size_t>(b), b * seq, seq);
        rotate_alone(r, q_want, seq, qh, p, dir, [&](std::int64_t t, std::int64_t h) { return offset(layout, qs, b, t, h); });
        rotate_alone(kr, k_want, seq, kh, p, dir, [&](std::int64_t t, std::int64_t h) { return offset(layout, ks, b, t, h); });
      }
      const auto all = batch_positions(pos, static_cast<std::size_t>(batch), batch * seq);

      std::vector<T> q_got = q;
      rotary::apply_batch(r, layout, q_got.data(), qs, all, dir);
      EXPECT_TRUE(same_bits(q_got, q_want)) << "apply_batch in place";

      std::vector<T> q_out(q.size());
      const rotary::BatchView<const T> in(q.data(), layout, qs);
      rotary::apply_batch(r, in, rotary::BatchView<T>(q_out.data(), layout, qs), all, {dir, rotary::thread_parallel_for(2)});
      EXPECT_TRUE(same_bits(q_out, q_want)) << "apply_batch out of place, 2 threads";

      std::vector<T> q_un(q.size());
      rotary::unchecked::apply_batch(r, in, rotary::BatchView<T>(q_un.data(), layout, qs), all, dir);
      EXPECT_TRUE(same_bits(q_un, q_want)) << "apply_batch_unchecked";

      std::vector<T> q_f = q;
      std::vector<T> k_f = k;
      rotary::apply_qk_batch(r, layout, q_f.data(), qs, k_f.data(), kh, all, dir);
      EXPECT_TRUE(same_bits(q_f, q_want)) << "apply_qk_batch q";
      EXPECT_TRUE(same_bits(k_f, k_want)) << "apply_qk_batch k";
    }
  }
}

// Packed THD, uneven lengths with empty sequences: apply_varlen and apply_qk_varlen (padded q rows).
template <class T, class R, class KR, class Pos>
void check_varlen(const R& r, const KR& kr, const Pos& pos, std::mt19937_64& rng) {
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  const std::vector<std::int64_t> lengths{3, 0, 6, 2};
  std::vector<std::int64_t> cu{0};
  for (const std::int64_t l : lengths) cu.push_back(cu.back() + l);
  const std::int64_t total = cu.back();
  const std::int64_t qh = 3;
  const std::int64_t kh = 1;
  const std::int64_t q_stride = qh * (kHeadDim + 8);  // padded token rows
  const StridedLayout ql{total, qh, q_stride, kHeadDim + 8};
  const StridedLayout kl{total, kh, kh * kHeadDim, kHeadDim};
  for (const Direction dir : {Direction::forward, Direction::inverse}) {
    const std::vector<T> q = rotary_test::random_vector<T>(static_cast<std::size_t>(total * q_stride), rng);
    const std::vector<T> k = rotary_test::random_vector<T>(static_cast<std::size_t>(total * kh * kHeadDim), rng);
    std::vector<T> q_want = q;
    std::vector<T> k_want = k;
    for (std::size_t b = 0; b < lengths.size(); ++b) {
      const std::int64_t first = cu[b];
      const auto p = pos.sequence(b, first, lengths[b]);
      rotate_alone(r, q_want, lengths[b], qh, p, dir,
                   [&](std::int64_t t, std::int64_t h) { return (first + t) * q_stride + h * (kHeadDim + 8); });
      rotate_alone(kr, k_want, lengths[b], kh, p, dir,
                   [&](std::int64_t t, std::int64_t h) { return ((first + t) * kh + h) * kHeadDim; });
    }
    const auto all = batch_positions(pos, lengths.size(), total);
    std::vector<T> q_got = q;
    rotary::apply_varlen(r, q_got.data(), ql, rotary::CuSeqlens(cu), all, {dir, rotary::thread_parallel_for(2)});
    EXPECT_TRUE(same_bits(q_got, q_want)) << "apply_varlen";
    std::vector<T> q_f = q;
    std::vector<T> k_f = k;
    rotary::apply_qk_varlen(r, q_f.data(), ql, k_f.data(), kl, rotary::CuSeqlens(cu), all, dir);
    EXPECT_TRUE(same_bits(q_f, q_want)) << "apply_qk_varlen q";
    EXPECT_TRUE(same_bits(k_f, k_want)) << "apply_qk_varlen k";
  }
}

template <class T, class R, class KR, class Pos>
void check_all(const R& r, const KR& kr, const Pos& pos, std::mt19937_64& rng) {
  check_batches<T>(r, kr, pos, rng);
  check_varlen<T>(r, kr, pos, rng);
}

rotary::RotarySpec spec(Pairing pairing) { return rotary::RotarySpec(kHeadDim, pairing, 10000.0, 24); }

TEST(Rotators, TableRope) {
  std::mt19937_64 rng(rotary_test::seed() + 1);
  const rotary::Rope<float> r(spec(Pairing::half_split), 256);
  check_all<float>(r, r, OneD{}, rng);
}

TEST(Rotators, CacheFreeRopeBf16) {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  const rotary::Rope<rotary::bf16> r(spec(Pairing::interleaved), rotary::OnTheFly{});
  check_all<rotary::bf16>(r, r, OneD{}, rng);
}

TEST(Rotators, MultiAxisTable) {
  std::mt19937_64 rng(rotary_test::seed() + 3);
  const rotary::MultiAxisRope<float> r(spec(Pairing::half_split), rotary::mrope_axis_map(24, {4, 4, 4}), 256);
  check_all<float>(r, r, ThreeAxes(rng), rng);
}

TEST(Rotators, MultiAxisCacheFreeF16) {
  std::mt19937_64 rng(rotary_test::seed() + 4);
  const rotary::MultiAxisRope<rotary::f16> r(spec(Pairing::interleaved),
                                             rotary::interleaved_mrope_axis_map(24, {4, 4, 4}), rotary::OnTheFly{});
  check_all<rotary::f16>(r, r, ThreeAxes(rng), rng);
}

TEST(Rotators, XPosQueriesFuseKeys) {
  std::mt19937_64 rng(rotary_test::seed() + 5);
  const rotary::XPos<float> x(spec(Pairing::half_split));
  check_all<float>(x.queries(3.5), x.keys(3.5), OneD{}, rng);
}

TEST(Rotators, XPosKeysBf16) {
  std::mt19937_64 rng(rotary_test::seed() + 6);
  const rotary::XPos<rotary::bf16> x(spec(Pairing::interleaved), 0.5, 256.0);
  check_all<rotary::bf16>(x.keys(-2.0), x.keys(-2.0), OneD{}, rng);
}

TEST(Rotators, CallerTableBf16SeparateF16) {
  std::mt19937_64 rng(rotary_test::seed() + 9);
  const std::int64_t half = kHeadDim / 2 - 4;  // rotary_dim 24
  const std::vector<rotary::f16> cos = rotary_test::random_vector<rotary::f16>(static_cast<std::size_t>(256 * half), rng);
  const std::vector<rotary::f16> sin = rotary_test::random_vector<rotary::f16>(static_cast<std::size_t>(256 * half), rng);
  const rotary::TableRope<rotary::bf16, rotary::f16> r(
      kHeadDim, 2 * half, Pairing::interleaved, rotary::CosSinTableView<rotary::f16>::separate(cos.data(), sin.data(), 256, half));
  check_all<rotary::bf16>(r, r, OneD{}, rng);
}

TEST(Rotators, CallerTableF32Concatenated) {
  std::mt19937_64 rng(rotary_test::seed() + 10);
  const std::vector<float> cs = rotary_test::random_vector<float>(static_cast<std::size_t>(256 * 24), rng);
  const rotary::TableRope<float> r(kHeadDim, 24, Pairing::half_split,
                                   rotary::CosSinTableView<float>::concatenated(cs.data(), 256, 24));
  check_all<float>(r, r, OneD{}, rng);
}

// A caller's table driving a multi-axis rope: over a view of a MultiAxisRope's own table it must give
// that rope's bits in every batch layout and varlen (the MultiAxisRope is the reference rotator).
TEST(Rotators, CallerTableMultiAxisEqualsOwnTable) {
  std::mt19937_64 rng(rotary_test::seed() + 11);
  const rotary::MultiAxisRope<rotary::f16> own(spec(Pairing::half_split), rotary::mrope_axis_map(24, {4, 4, 4}), 256);
  const rotary::TableMultiAxisRope<rotary::f16, float> caller(kHeadDim, Pairing::half_split,
                                                              rotary::mrope_axis_map(24, {4, 4, 4}),
                                                              rotary::table_view(own.rope().cache()));
  const ThreeAxes axes(rng);
  check_all<rotary::f16>(caller, caller, axes, rng);
  const rotary::RowMatrix<rotary::f16> x = rotary_test::random_rows<rotary::f16>(5 * 3, kHeadDim, rng);
  rotary::RowMatrix<rotary::f16> a = x;
  rotary::RowMatrix<rotary::f16> b = x;
  rotary::apply(own, a, axes.at(0, 5), 3);
  rotary::apply(caller, b, axes.at(0, 5), 3);
  EXPECT_TRUE(a == b);
  const std::vector<float> small(static_cast<std::size_t>(10 * 24));
  const rotary::TableMultiAxisRope<float> tiny(kHeadDim, Pairing::interleaved, rotary::mrope_axis_map(24, {4, 4, 4}),
                                               rotary::CosSinTableView<float>::concatenated(small.data(), 10, 24));
  rotary::RowMatrix<float> y = rotary_test::random_rows<float>(5, kHeadDim, rng);
  rotary_test::expect_error([&] { rotary::apply(tiny, y, axes.at(0, 5), 1); },
                            {"positions[stream", "is outside the table [0, 10)"});
}

// The member API and the views are one path: same bits.
TEST(Rotators, XPosMembersEqualViews) {
  std::mt19937_64 rng(rotary_test::seed() + 7);
  const rotary::XPos<float> x(spec(Pairing::half_split));
  const rotary::RowMatrix<float> q = rotary_test::random_rows<float>(6 * 4, kHeadDim, rng);
  const rotary::RowMatrix<float> k = rotary_test::random_rows<float>(6 * 2, kHeadDim, rng);
  rotary::RowMatrix<float> q1 = q;
  rotary::RowMatrix<float> k1 = k;
  rotary::apply_qk(x.queries(7.0), q1, k1, Positions::contiguous(40), 4, 2);
  rotary::RowMatrix<float> q2 = q;
  rotary::RowMatrix<float> k2 = k;
  rotary::apply(x.queries(7.0), q2, Positions::contiguous(40), 4);
  rotary::apply(x.keys(7.0), k2, Positions::contiguous(40), 2);
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(k1, k2);
}

// Refusals reach the batch entry points of every rotator.
TEST(Rotators, BatchRefusals) {
  std::mt19937_64 rng(rotary_test::seed() + 8);
  const ThreeAxes axes(rng);
  const rotary::MultiAxisRope<float> m(spec(Pairing::half_split), rotary::mrope_axis_map(24, {4, 4, 4}), 256);
  std::vector<float> x(static_cast<std::size_t>(2 * 3 * 2 * kHeadDim));
  rotary_test::expect_error(
      [&] { rotary::apply_batch(m, Layout::bshd, x.data(), BatchShape{2, 3, 2, kHeadDim}, axes.at(0, 5)); },
      {"positions have 5 tokens", "6 tokens of the batch"});
  const rotary::XPos<rotary::f16> xp(spec(Pairing::half_split));
  std::vector<rotary::f16> h(x.size());
  rotary_test::expect_error(
      [&] {
        rotary::apply_batch(xp.keys(), Layout::bshd, h.data(), BatchShape{2, 3, 2, kHeadDim},
                            SequencePositions::start(1000000));
      },
      {"xpos key scale factor", "overflows f16"});
}

}  // namespace
