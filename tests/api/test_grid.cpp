// The API grid (apply.hpp): every family — apply, apply_strided, apply_qk, apply_qk_strided,
// apply_batch, apply_qk_batch, apply_varlen, apply_qk_varlen — checked (rotary::) and unchecked
// (rotary::unchecked::), in place and out of place, for every rotator (table and cache-free Rope,
// a caller's TableRope, MultiAxisRope, the xPos query view). A cell missing from the grid fails to
// compile here. Each cell rotates the same tokens x heads rows (as rows, a strided buffer, a one-
// sequence bshd batch and a one-sequence packed batch) and must give the bits of the checked
// in-place call of its kind (apply for q alone, apply_qk for q+k), so a cell wired to the wrong
// path, direction or role fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <rotary/apply.hpp>
#include <rotary/multi_axis.hpp>
#include <rotary/table.hpp>
#include <rotary/xpos.hpp>

#include "support.hpp"

namespace {

using rotary::BatchShape;
using rotary::BatchView;
using rotary::Direction;
using rotary::Layout;
using rotary::Pairing;
using rotary::Positions;
using rotary::RowMatrix;
using rotary::SequencePositions;
using rotary::StridedLayout;

constexpr std::int64_t kHeadDim = 32;
constexpr std::int64_t kTokens = 5;
constexpr std::int64_t kQHeads = 3;
constexpr std::int64_t kKHeads = 2;

// One namespace of the grid, as values: the entry points are function objects.
struct Checked {
  static constexpr const auto& apply = rotary::apply;
  static constexpr const auto& apply_strided = rotary::apply_strided;
  static constexpr const auto& apply_qk = rotary::apply_qk;
  static constexpr const auto& apply_qk_strided = rotary::apply_qk_strided;
  static constexpr const auto& apply_batch = rotary::apply_batch;
  static constexpr const auto& apply_qk_batch = rotary::apply_qk_batch;
  static constexpr const auto& apply_varlen = rotary::apply_varlen;
  static constexpr const auto& apply_qk_varlen = rotary::apply_qk_varlen;
  static constexpr const char* name = "rotary::";
};
struct Unchecked {
  static constexpr const auto& apply = rotary::unchecked::apply;
  static constexpr const auto& apply_strided = rotary::unchecked::apply_strided;
  static constexpr const auto& apply_qk = rotary::unchecked::apply_qk;
  static constexpr const auto& apply_qk_strided = rotary::unchecked::apply_qk_strided;
  static constexpr const auto& apply_batch = rotary::unchecked::apply_batch;
  static constexpr const auto& apply_qk_batch = rotary::unchecked::apply_qk_batch;
  static constexpr const auto& apply_varlen = rotary::unchecked::apply_varlen;
  static constexpr const auto& apply_qk_varlen = rotary::unchecked::apply_qk_varlen;
  static constexpr const char* name = "rotary::unchecked::";
};

// The same bits, element for element (signed zeros and NaN payloads included).
bool same_bits(const RowMatrix<float>& a, const RowMatrix<float>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

StridedLayout dense(std::int64_t heads) { return StridedLayout{kTokens, heads, heads * kHeadDim, kHeadDim}; }
BatchView<float> view(RowMatrix<float>& x, std::int64_t heads) {
  return BatchView<float>(x.data(), Layout::bshd, BatchShape{1, kTokens, heads, kHeadDim});
}
BatchView<const float> view(const RowMatrix<float>& x, std::int64_t heads) {
  return BatchView<const float>(x.data(), Layout::bshd, BatchShape{1, kTokens, heads, kHeadDim});
}

// Rows (p) and batch (bp) positions of the same tokens.
template <class G, class R, class P, class BP>
void check_cells(const R& r, const P& p, const BP& bp, Direction dir) {
  std::mt19937_64 rng(rotary_test::seed() + 40);
  const RowMatrix<float> q0 = rotary_test::random_rows<float>(kTokens * kQHeads, kHeadDim, rng);
  const RowMatrix<float> k0 = rotary_test::random_rows<float>(kTokens * kKHeads, kHeadDim, rng);
  const std::vector<std::int64_t> cu{0, kTokens};
  RowMatrix<float> want_q = q0;
  rotary::apply(r, want_q, p, kQHeads, dir);
  RowMatrix<float> want_fq = q0;
  RowMatrix<float> want_fk = k0;
  rotary::apply_qk(r, want_fq, want_fk, p, kQHeads, kKHeads, dir);

  const auto one = [&](const char* cell, const auto& call) {
    SCOPED_TRACE(std::string(G::name) + cell);
    RowMatrix<float> q = q0;
    RowMatrix<float> out = RowMatrix<float>::Constant(q0.rows(), q0.cols(), -7.0f);
    const bool in_place = call(q, out);
    EXPECT_TRUE(same_bits(in_place ? q : out, want_q)) << rotary_test::seed_note();
  };
  one("apply, in place", [&](RowMatrix<float>& q, RowMatrix<float>&) {
    G::apply(r, q, p, kQHeads, dir);
    return true;
  });
  one("apply, out of place", [&](RowMatrix<float>& q, RowMatrix<float>& out) {
    G::apply(r, q, out, p, kQHeads, dir);
    return false;
  });
  one("apply_strided, in place", [&](RowMatrix<float>& q, RowMatrix<float>&) {
    G::apply_strided(r, q.data(), dense(kQHeads), p, dir);
    return true;
  });
  one("apply_strided, out of place", [&](RowMatrix<float>& q, RowMatrix<float>& out) {
    G::apply_strided(r, q.data(), dense(kQHeads), out.data(), dense(kQHeads), p, dir);
    return false;
  });
  one("apply_batch, in place", [&](RowMatrix<float>& q, RowMatrix<float>&) {
    G::apply_batch(r, view(q, kQHeads), bp, dir);
    return true;
  });
  one("apply_batch, out of place", [&](RowMatrix<float>& q, RowMatrix<float>& out) {
    G::apply_batch(r, view(static_cast<const RowMatrix<float>&>(q), kQHeads), view(out, kQHeads), bp, dir);
    return false;
  });
  one("apply_batch, dense", [&](RowMatrix<float>& q, RowMatrix<float>&) {
    G::apply_batch(r, Layout::bshd, q.data(), BatchShape{1, kTokens, kQHeads, kHeadDim}, bp, dir);
    return true;
  });
  one("apply_varlen, in place", [&](RowMatrix<float>& q, RowMatrix<float>&) {
    G::apply_varlen(r, q.data(), dense(kQHeads), cu, bp, dir);
    return true;
  });
  one("apply_varlen, out of place", [&](RowMatrix<float>& q, RowMatrix<float>& out) {
    G::apply_varlen(r, q.data(), dense(kQHeads), out.data(), dense(kQHeads), cu, bp, dir);
    return false;
  });

  const auto two = [&](const char* cell, const auto& call) {
    SCOPED_TRACE(std::string(G::name) + cell);
    RowMatrix<float> q = q0;
    RowMatrix<float> k = k0;
    RowMatrix<float> qo = RowMatrix<float>::Constant(q0.rows(), q0.cols(), -7.0f);
    RowMatrix<float> ko = RowMatrix<float>::Constant(k0.rows(), k0.cols(), -7.0f);
    const bool in_place = call(q, k, qo, ko);
    EXPECT_TRUE(same_bits(in_place ? q : qo, want_fq)) << rotary_test::seed_note();
    EXPECT_TRUE(same_bits(in_place ? k : ko, want_fk)) << rotary_test::seed_note();
  };
  two("apply_qk, in place", [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>&, RowMatrix<float>&) {
    G::apply_qk(r, q, k, p, kQHeads, kKHeads, dir);
    return true;
  });
  two("apply_qk, out of place",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>& qo, RowMatrix<float>& ko) {
        G::apply_qk(r, q, qo, k, ko, p, kQHeads, kKHeads, dir);
        return false;
      });
  two("apply_qk_strided, in place",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>&, RowMatrix<float>&) {
        G::apply_qk_strided(r, q.data(), dense(kQHeads), k.data(), dense(kKHeads), p, dir);
        return true;
      });
  two("apply_qk_strided, out of place",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>& qo, RowMatrix<float>& ko) {
        G::apply_qk_strided(r, q.data(), dense(kQHeads), qo.data(), dense(kQHeads), k.data(), dense(kKHeads),
                            ko.data(), dense(kKHeads), p, dir);
        return false;
      });
  two("apply_qk_batch, in place",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>&, RowMatrix<float>&) {
        G::apply_qk_batch(r, view(q, kQHeads), view(k, kKHeads), bp, dir);
        return true;
      });
  two("apply_qk_batch, out of place",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>& qo, RowMatrix<float>& ko) {
        G::apply_qk_batch(r, view(static_cast<const RowMatrix<float>&>(q), kQHeads), view(qo, kQHeads),
                          view(static_cast<const RowMatrix<float>&>(k), kKHeads), view(ko, kKHeads), bp, dir);
        return false;
      });
  two("apply_qk_batch, dense",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>&, RowMatrix<float>&) {
        G::apply_qk_batch(r, Layout::bshd, q.data(), BatchShape{1, kTokens, kQHeads, kHeadDim}, k.data(), kKHeads, bp,
                          dir);
        return true;
      });
  two("apply_qk_varlen, in place",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>&, RowMatrix<float>&) {
        G::apply_qk_varlen(r, q.data(), dense(kQHeads), k.data(), dense(kKHeads), cu, bp, dir);
        return true;
      });
  two("apply_qk_varlen, out of place",
      [&](RowMatrix<float>& q, RowMatrix<float>& k, RowMatrix<float>& qo, RowMatrix<float>& ko) {
        G::apply_qk_varlen(r, q.data(), dense(kQHeads), qo.data(), dense(kQHeads), k.data(), dense(kKHeads), ko.data(),
                           dense(kKHeads), cu, bp, dir);
        return false;
      });
}

template <class R, class P, class BP>
void check_grid(const R& r, const P& p, const BP& bp) {
  for (const Direction dir : {Direction::forward, Direction::inverse}) {
    SCOPED_TRACE(dir == Direction::forward ? "forward" : "inverse");
    check_cells<Checked>(r, p, bp, dir);
    check_cells<Unchecked>(r, p, bp, dir);
  }
}

rotary::RotarySpec spec(Pairing pairing) { return rotary::RotarySpec(kHeadDim, pairing, 10000.0, 24); }

TEST(Grid, TableRope) {
  const rotary::Rope<float> r(spec(Pairing::half_split), 256);
  check_grid(r, Positions::contiguous(17), SequencePositions::start(17));
}

TEST(Grid, CacheFreeRope) {
  const rotary::Rope<float> r(spec(Pairing::interleaved), rotary::OnTheFly{});
  const std::vector<std::int64_t> pos{3, 1000, 7, 0, 123456};
  check_grid(r, Positions(pos), SequencePositions::per_token(Positions(pos)));
}

TEST(Grid, CallerTable) {
  const rotary::Rope<float> own(spec(Pairing::half_split), 256);
  const rotary::TableRope<float> r(kHeadDim, 24, Pairing::half_split, rotary::table_view(own.cache()));
  check_grid(r, Positions::contiguous(40), SequencePositions::start(40));
}

TEST(Grid, MultiAxisRope) {
  const rotary::MultiAxisRope<float> r(spec(Pairing::half_split), rotary::mrope_axis_map(24, {4, 4, 4}), 256);
  std::mt19937_64 rng(rotary_test::seed() + 41);
  const std::vector<std::int64_t> streams = rotary_test::random_positions(3 * kTokens, 200, rng);
  const rotary::AxisPositions p = rotary::AxisPositions::strided(streams.data(), 3, kTokens, kTokens, 1);
  check_grid(r, p, p);
}

TEST(Grid, XPosQueries) {
  const rotary::XPos<float> x(spec(Pairing::half_split));
  check_grid(x.queries(3.5), Positions::contiguous(9), SequencePositions::start(9));
}

}  // namespace
