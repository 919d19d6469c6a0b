// Checkpoint conventions: row permutations of W_q / W_k / biases between interleaved and half-split
// pairings (exact, both directions, partial rotary, GQA), the defining identity with the rotation,
// and the heuristic convention probe on synthetic weights of a known convention.
#include <cstdio>
#include <cstdint>
#include <limits>

#include <rotary/convert_weights.hpp>

#include "support.hpp"

namespace {

using rotary::Pairing;
using rotary::Positions;
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// blockdiag(P, ..., P) for `heads` heads.
Eigen::MatrixXd block_p(std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim) {
  const Eigen::MatrixXd p = rotary::reference::pairing_permutation(head_dim, rotary_dim);
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(heads * head_dim, heads * head_dim);
  for (std::int64_t h = 0; h < heads; ++h) b.block(h * head_dim, h * head_dim, head_dim, head_dim) = p;
  return b;
}

// rope(W x [+ bias]) for one token at position m: heads rows of head_dim.
MatD project_and_rotate(const rotary::Rope<double>& rope, const MatD& w, const Eigen::VectorXd& bias,
                        const Eigen::VectorXd& x, std::int64_t heads, std::int64_t m) {
  Eigen::VectorXd y = w * x + bias;
  MatD rows = Eigen::Map<MatD>(y.data(), heads, rope.head_dim());
  rotary::apply(rope, rows, Positions::contiguous(m), heads);
  return rows;
}

Eigen::VectorXd flat(const MatD& m) { return Eigen::Map<const Eigen::VectorXd>(m.data(), m.size()); }

TEST(ConvertWeights, RotationIdentityGqaPartialRotaryBiases) {
  std::mt19937_64 rng(rotary_test::seed());
  std::normal_distribution<double> n01;
  for (auto [q_heads, kv_heads, head_dim, rotary_dim] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>{4, 2, 64, 64}, {8, 1, 70, 32}, {3, 3, 16, 8}}) {
    SCOPED_TRACE(std::to_string(q_heads) + "/" + std::to_string(kv_heads) + " head_dim " + std::to_string(head_dim) +
                 " rotary_dim " + std::to_string(rotary_dim));
    const std::int64_t hidden = 48;
    const rotary::Rope<double> rope_i(rotary::RotarySpec(head_dim, Pairing::interleaved, 10000.0, rotary_dim), 600);
    const rotary::Rope<double> rope_h(rotary::RotarySpec(head_dim, Pairing::half_split, 10000.0, rotary_dim), 600);
    const auto random = [&](Eigen::Index r, Eigen::Index c) {
      MatD m(r, c);
      for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n01(rng);
      return m;
    };
    // an interleaved checkpoint (RoFormer / Meta's complex form) converted for a half-split runtime
    const MatD wq_i = random(q_heads * head_dim, hidden);
    const MatD wk_i = random(kv_heads * head_dim, hidden);
    const Eigen::VectorXd bq_i = flat(random(q_heads * head_dim, 1));
    const Eigen::VectorXd bk_i = flat(random(kv_heads * head_dim, 1));
    const MatD wq_h = rotary::permute_rows_interleaved_to_half_split(wq_i, q_heads, head_dim, rotary_dim);
    const MatD wk_h = rotary::permute_rows_interleaved_to_half_split(wk_i, kv_heads, head_dim, rotary_dim);
    const Eigen::VectorXd bq_h = rotary::permute_rows_interleaved_to_half_split(bq_i, q_heads, head_dim, rotary_dim);
    const Eigen::VectorXd bk_h = rotary::permute_rows_interleaved_to_half_split(bk_i, kv_heads, head_dim, rotary_dim);

    // the permutation is P^T (per head), exactly; pass-through rows stay
    EXPECT_EQ(MatD(block_p(q_heads, head_dim, rotary_dim).transpose() * wq_i), wq_h);
    for (std::int64_t h = 0; h < q_heads; ++h)
      EXPECT_EQ(wq_h.middleRows(h * head_dim + rotary_dim, head_dim - rotary_dim),
                wq_i.middleRows(h * head_dim + rotary_dim, head_dim - rotary_dim));
    // round trips, both directions, bit for bit
    EXPECT_EQ(rotary::permute_rows_half_split_to_interleaved(wq_h, q_heads, head_dim, rotary_dim), wq_i);
    EXPECT_EQ(rotary::permute_rows_half_split_to_interleaved(bk_h, kv_heads, head_dim, rotary_dim), bk_i);
    EXPECT_EQ(rotary::permute_rows_interleaved_to_half_split(
                  rotary::permute_rows_half_split_to_interleaved(wk_i, kv_heads, head_dim, rotary_dim), kv_heads,
                  head_dim, rotary_dim),
              wk_i);

    // rope_interleaved(W_i x + b_i) == P rope_half_split(W_h x + b_h) per head, and q.k scores match
    const Eigen::MatrixXd p = rotary::reference::pairing_permutation(head_dim, rotary_dim);
    double worst = 0.0;
    double worst_score = 0.0;
    for (std::int64_t m : {0, 1, 37, 599}) {
      const Eigen::VectorXd x = flat(random(hidden, 1));
      const Eigen::VectorXd xk = flat(random(hidden, 1));
      const MatD qi = project_and_rotate(rope_i, wq_i, bq_i, x, q_heads, m);
      const MatD qh = project_and_rotate(rope_h, wq_h, bq_h, x, q_heads, m);
      const std::int64_t n = m / 2;
      const MatD ki = project_and_rotate(rope_i, wk_i, bk_i, xk, kv_heads, n);
      const MatD kh = project_and_rotate(rope_h, wk_h, bk_h, xk, kv_heads, n);
      for (std::int64_t h = 0; h < q_heads; ++h) {
        const Eigen::VectorXd a = qi.row(h).transpose();
        const Eigen::VectorXd b = p * qh.row(h).transpose();
        worst = std::max(worst, (a - b).cwiseAbs().maxCoeff());
        const std::int64_t g = h / (q_heads / kv_heads);  // GQA group
        const double si = qi.row(h).dot(ki.row(g));
        const double sh = qh.row(h).dot(kh.row(g));
        worst_score = std::max(worst_score, std::fabs(si - sh) / (1.0 + std::fabs(si)));
      }
    }
    EXPECT_LT(worst, 1e-12);
    EXPECT_LT(worst_score, 1e-12);
  }
}

TEST(ConvertWeights, ColumnMajorFloatAndRowMap) {
  const Eigen::MatrixXf w = Eigen::MatrixXf::Random(2 * 8, 5);  // column-major
  const Eigen::MatrixXf wi = rotary::convert_pairing(w, Pairing::half_split, Pairing::interleaved, 2, 8, 6);
  const std::vector<std::int64_t> map = rotary::pairing_row_map(Pairing::half_split, Pairing::interleaved, 2, 8, 6);
  EXPECT_EQ(map, (std::vector<std::int64_t>{0, 3, 1, 4, 2, 5, 6, 7, 8, 11, 9, 12, 10, 13, 14, 15}));
  for (Eigen::Index r = 0; r < w.rows(); ++r) EXPECT_EQ(wi.row(r), w.row(map[static_cast<std::size_t>(r)]));
  EXPECT_EQ(rotary::convert_pairing(wi, Pairing::interleaved, Pairing::half_split, 2, 8, 6), w);
  EXPECT_EQ(rotary::convert_pairing(w, Pairing::half_split, Pairing::half_split, 2, 8, 6), w);
}

TEST(ConvertWeights, Errors) {
  const Eigen::MatrixXf w = Eigen::MatrixXf::Random(24, 4);
  rotary_test::expect_error([&] { (void)rotary::permute_rows_half_split_to_interleaved(w, 4, 8, 8); },
                            {"weights has 24 rows", "heads (4) x head_dim (8) = 32"});
  rotary_test::expect_error([&] { (void)rotary::permute_rows_half_split_to_interleaved(w, 3, 8, 7); },
                            {"rotary_dim (7)"});
  rotary_test::expect_error([&] { (void)rotary::permute_rows_half_split_to_interleaved(w, 3, 8, 10); },
                            {"rotary_dim (10)", "head_dim (8)"});
  rotary_test::expect_error([&] { (void)rotary::probe_convention(w, w, 3, 2, 8, 8); }, {"W_k has 24 rows"});
}

// heads x head_dim is checked before it is used: 2^33 x 2^31 overflowed int64 (undefined behaviour; it
// wrapped to 0, so an empty matrix passed the row check and the map was written out of bounds).
// A value the optimizer cannot see through: with the sizes below as constants, g++ -O3 inlines the
// calls and warns (-Waggressive-loop-optimizations, an error under -Werror) about loops the checks
// never let run.
std::int64_t opaque(std::int64_t v) {
  volatile std::int64_t hidden = v;
  return hidden;
}

TEST(ConvertWeights, RowCountOverflowRefused) {
  using rotary_test::expect_error;
  const std::int64_t heads = opaque(std::int64_t{1} << 33);
  const std::int64_t head_dim = opaque(std::int64_t{1} << 31);
  expect_error([&] { (void)rotary::pairing_row_map(Pairing::half_split, Pairing::interleaved, heads, head_dim, 2); },
               {"pairing_row_map: heads (8589934592) x head_dim (2147483648) overflows int64"});
  const Eigen::MatrixXf empty(0, 3);
  expect_error([&] { (void)rotary::convert_pairing(empty, Pairing::half_split, Pairing::interleaved, heads, head_dim, 2); },
               {"weights: heads (8589934592) x head_dim (2147483648) overflows int64"});
  expect_error([&] { (void)rotary::permute_rows_interleaved_to_half_split(empty, heads, head_dim, 2); },
               {"overflows int64"});
  expect_error([&] { (void)rotary::probe_convention(empty, empty, heads, 0, head_dim, 2); },
               {"W_q: heads (8589934592) x head_dim (2147483648) overflows int64"});
  const Eigen::MatrixXf wq = Eigen::MatrixXf::Random(16, 4);
  const std::int64_t kv_heads = opaque(std::numeric_limits<std::int64_t>::max() / 4);
  expect_error([&] { (void)rotary::probe_convention(wq, empty, 2, kv_heads, 8, 8); },
               {"W_k: heads (2305843009213693951) x head_dim (8) overflows int64"});
  // a product that fits int64 but no vector
  expect_error(
      [&] {
        (void)rotary::pairing_row_map(Pairing::half_split, Pairing::interleaved, opaque(std::int64_t{1} << 40),
                                      opaque(std::int64_t{1} << 22), 2);
      },
      {"pairing_row_map: 4611686018427387904 rows", "more than a vector can hold"});
}

// Synthetic "trained" weights of a known convention: the two rows of pair j share a scale that
// grows smoothly with j (low-frequency pairs carry more norm, as in trained LLMs), times per-head
// jitter; pass-through rows have scale 1.
MatD synthetic(Pairing convention, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim,
               std::int64_t hidden, double log_range, std::mt19937_64& rng) {
  std::normal_distribution<double> n01;
  std::uniform_real_distribution<double> jitter(-0.15, 0.15);
  const std::int64_t h = rotary_dim / 2;
  MatD w(heads * head_dim, hidden);
  for (std::int64_t head = 0; head < heads; ++head) {
    for (std::int64_t j = 0; j < h; ++j) {
      const double scale = std::exp(log_range * static_cast<double>(j) / static_cast<double>(std::max<std::int64_t>(h - 1, 1)) + jitter(rng));
      for (std::int64_t r : {rotary::reference::pair_first(convention, j, h), rotary::reference::pair_second(convention, j, h)})
        for (std::int64_t c = 0; c < hidden; ++c) w(head * head_dim + r, c) = scale * n01(rng);
    }
    for (std::int64_t r = rotary_dim; r < head_dim; ++r)
      for (std::int64_t c = 0; c < hidden; ++c) w(head * head_dim + r, c) = n01(rng);
  }
  return w;
}

TEST(ProbeConvention, KnownConventionsBothDirections) {
  std::mt19937_64 rng(rotary_test::seed() + 7);
  struct Case {
    std::int64_t q_heads, kv_heads, head_dim, rotary_dim, hidden;
    double log_range;
  };
  double min_margin = 1.0;
  for (const Case c : {Case{32, 8, 128, 128, 512, std::log(4.0)}, Case{8, 1, 64, 64, 256, std::log(2.0)},
                       Case{16, 16, 64, 32, 256, std::log(8.0)}, Case{12, 4, 80, 80, 384, std::log(1.5)}}) {
    for (Pairing truth : {Pairing::interleaved, Pairing::half_split}) {
      const MatD wq = synthetic(truth, c.q_heads, c.head_dim, c.rotary_dim, c.hidden, c.log_range, rng);
      const MatD wk = synthetic(truth, c.kv_heads, c.head_dim, c.rotary_dim, c.hidden, c.log_range, rng);
      const rotary::ConventionReport r =
          rotary::probe_convention(wq, wk, c.q_heads, c.kv_heads, c.head_dim, c.rotary_dim);
      std::printf("  probe %lld/%lld heads, head_dim %lld, rotary_dim %lld, range x%.1f, truth %s: %s\n",
                  static_cast<long long>(c.q_heads), static_cast<long long>(c.kv_heads),
                  static_cast<long long>(c.head_dim), static_cast<long long>(c.rotary_dim), std::exp(c.log_range),
                  std::string(rotary::to_string(truth)).c_str(), r.summary().c_str());
      EXPECT_EQ(r.likely, truth) << r.summary();
      EXPECT_TRUE(r.confident) << r.summary();
      EXPECT_FALSE(r.contradicts(truth));
      EXPECT_TRUE(r.contradicts(truth == Pairing::interleaved ? Pairing::half_split : Pairing::interleaved));
      min_margin = std::min(min_margin, r.margin);
      // converting the weights flips the verdict
      const Pairing other = truth == Pairing::interleaved ? Pairing::half_split : Pairing::interleaved;
      const rotary::ConventionReport flipped = rotary::probe_convention(
          rotary::convert_pairing(wq, truth, other, c.q_heads, c.head_dim, c.rotary_dim),
          rotary::convert_pairing(wk, truth, other, c.kv_heads, c.head_dim, c.rotary_dim), c.q_heads, c.kv_heads,
          c.head_dim, c.rotary_dim);
      EXPECT_EQ(flipped.likely, other) << flipped.summary();
      EXPECT_TRUE(flipped.confident) << flipped.summary();
      // W_q alone
      const MatD none(0, c.hidden);
      EXPECT_EQ(rotary::probe_convention(wq, none, c.q_heads, 0, c.head_dim, c.rotary_dim).likely, truth);
    }
  }
  std::printf("  smallest margin: %.3f\n", min_margin);
}

TEST(ProbeConvention, StructurelessWeightsAreNotConfident) {
  std::mt19937_64 rng(rotary_test::seed() + 8);
  // no frequency trend and no pair structure: iid rows
  const MatD wq = synthetic(Pairing::half_split, 32, 128, 128, 512, 0.0, rng);
  std::normal_distribution<double> n01;
  MatD iid(wq.rows(), wq.cols());
  for (Eigen::Index i = 0; i < iid.size(); ++i) iid.data()[i] = n01(rng);
  const rotary::ConventionReport r = rotary::probe_convention(iid, MatD(0, 512), 32, 0, 128, 128);
  std::printf("  iid weights: %s\n", r.summary().c_str());
  EXPECT_FALSE(r.confident) << r.summary();
  EXPECT_FALSE(r.contradicts(Pairing::interleaved));
  EXPECT_FALSE(r.contradicts(Pairing::half_split));
}

}  // namespace
