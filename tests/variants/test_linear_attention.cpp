// RoPE linear attention (RoFormer eq. 19) against the quadratic form computed independently in long
// double: features elu(x)+1 / relu / custom written out here, rotations by the long double angle
// m*theta_j, every (m, n) weight summed explicitly:
//   ref_m = sum_n (R_m phi(q_m))^T (R_n psi(k_n)) v_n / (sum_n phi(q_m)^T psi(k_n) + eps)
// over all n (non-causal) or n <= m (causal).
//
// Tolerance (relative, per output element). With u the unit roundoff of T (2^-24 float, 2^-53 double),
// W_mn = sum over pairs (|phi_a| + |phi_b|)(|psi_a| + |psi_b|) + sum over pass-through |phi_i psi_i| (the
// magnitude of weight (m, n) before cancellation) and den_m the reference denominator:
//   |out - ref| <= 16 u (sum_n W_mn |v_n| / den_m + |ref|) + angle_err terms
// 16 u: the features in T (1 u each, elu's exp within 1 ulp = 2 u), the rotations in T (apply()'s
// 2 ulp + the row's 1/2 ulp = 5 u on each side), the double arithmetic (~N * 2^-53, negligible for
// float and covered for double by the 16), and the final rounding to T (1 u). The denominator's
// relative error (<= 4 u: features only) feeds the |ref| term.
#include <array>
#include <cstdio>
#include <cstring>
#include <functional>

#include "support.hpp"

namespace {

using rotary::LinearAttentionOptions;
using rotary::Pairing;
using rotary::Positions;
using rotary::RowMatrix;
using LD = long double;

template <class T>
double unit() {
  return std::is_same_v<T, double> ? 0x1p-53 : 0x1p-24;
}

using FeatureLD = std::function<LD(LD)>;
LD elu1(LD x) { return x > 0 ? x + 1.0L : std::exp(x); }
LD relu(LD x) { return x > 0 ? x : 0.0L; }

struct Problem {
  std::int64_t head_dim = 8;
  std::int64_t rotary_dim = 8;
  Pairing pairing = Pairing::half_split;
  bool causal = false;
  double eps = 1e-6;
};

// Rotates a feature row (long double) by R_p.
std::vector<LD> rotate_ld(const std::vector<LD>& x, const std::vector<double>& theta, Pairing pairing,
                          std::int64_t rotary_dim, std::int64_t p) {
  std::vector<LD> y = x;
  const std::int64_t h = rotary_dim / 2;
  for (std::int64_t j = 0; j < h; ++j) {
    const std::int64_t a = pairing == Pairing::interleaved ? 2 * j : j;
    const std::int64_t b = pairing == Pairing::interleaved ? 2 * j + 1 : j + h;
    const LD angle = static_cast<LD>(p) * static_cast<LD>(theta[static_cast<std::size_t>(j)]);
    const LD c = std::cos(angle);
    const LD s = std::sin(angle);
    y[static_cast<std::size_t>(a)] = c * x[static_cast<std::size_t>(a)] - s * x[static_cast<std::size_t>(b)];
    y[static_cast<std::size_t>(b)] = s * x[static_cast<std::size_t>(a)] + c * x[static_cast<std::size_t>(b)];
  }
  return y;
}

// Feature rows in long double: either an elementwise map, or a given matrix (custom maps whose
// long double form the test writes out).
template <class T>
std::vector<std::vector<LD>> feature_rows(const RowMatrix<T>& x, const FeatureLD& f) {
  std::vector<std::vector<LD>> rows(static_cast<std::size_t>(x.rows()));
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    rows[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(x.cols()));
    for (Eigen::Index c = 0; c < x.cols(); ++c)
      rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] = f(static_cast<LD>(x(r, c)));
  }
  return rows;
}

struct Reference {
  std::vector<std::vector<LD>> out;
  std::vector<std::vector<LD>> scale;  // sum_n W_mn |v_n| / den_m, per element
};

template <class T>
Reference quadratic(const Problem& pr, const std::vector<std::vector<LD>>& fq,
                    const std::vector<std::vector<LD>>& fk, const RowMatrix<T>& v,
                    const std::vector<std::int64_t>& qpos, const std::vector<std::int64_t>& kpos) {
  const auto theta =
      rotary::compute_frequencies(rotary::RotarySpec(pr.head_dim, pr.pairing, 10000.0, pr.rotary_dim)).theta;
  const std::size_t nq = fq.size();
  const std::size_t nk = fk.size();
  const std::int64_t h = pr.rotary_dim / 2;
  std::vector<std::vector<LD>> rq(nq);
  std::vector<std::vector<LD>> rk(nk);
  for (std::size_t m = 0; m < nq; ++m) rq[m] = rotate_ld(fq[m], theta, pr.pairing, pr.rotary_dim, qpos[m]);
  for (std::size_t n = 0; n < nk; ++n) rk[n] = rotate_ld(fk[n], theta, pr.pairing, pr.rotary_dim, kpos[n]);
  Reference ref;
  const auto dv = static_cast<std::size_t>(v.cols());
  ref.out.assign(nq, std::vector<LD>(dv, 0.0L));
  ref.scale.assign(nq, std::vector<LD>(dv, 0.0L));
  for (std::size_t m = 0; m < nq; ++m) {
    LD den = 0;
    std::vector<LD> num(dv, 0.0L);
    std::vector<LD> mag(dv, 0.0L);
    const std::size_t last = pr.causal ? m + 1 : nk;
    for (std::size_t n = 0; n < last; ++n) {
      LD w = 0;
      LD d = 0;
      LD wmag = 0;
      for (std::size_t i = 0; i < static_cast<std::size_t>(pr.head_dim); ++i) {
        w += rq[m][i] * rk[n][i];
        d += fq[m][i] * fk[n][i];
      }
      for (std::int64_t j = 0; j < h; ++j) {
        const auto a = static_cast<std::size_t>(pr.pairing == Pairing::interleaved ? 2 * j : j);
        const auto b = static_cast<std::size_t>(pr.pairing == Pairing::interleaved ? 2 * j + 1 : j + h);
        wmag += (std::fabs(fq[m][a]) + std::fabs(fq[m][b])) * (std::fabs(fk[n][a]) + std::fabs(fk[n][b]));
      }
      for (auto i = static_cast<std::size_t>(pr.rotary_dim); i < static_cast<std::size_t>(pr.head_dim); ++i)
        wmag += std::fabs(fq[m][i] * fk[n][i]);
      den += d;
      for (std::size_t c = 0; c < dv; ++c) {
        const LD vn = static_cast<LD>(v(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(c)));
        num[c] += w * vn;
        mag[c] += wmag * std::fabs(vn);
      }
    }
    den += static_cast<LD>(pr.eps);
    for (std::size_t c = 0; c < dv; ++c) {
      ref.out[m][c] = num[c] / den;
      ref.scale[m][c] = mag[c] / den;
    }
  }
  return ref;
}

template <class T>
RowMatrix<T> random_rows(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng, double lo = -2.0,
                         double hi = 2.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  RowMatrix<T> x(rows, cols);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(d(rng));
  return x;
}

// Compares and returns the worst |error| / bound.
template <class T>
double compare(const RowMatrix<T>& got, const Reference& ref, std::int64_t max_position,
               const std::string& what) {
  double worst = 0.0;
  // The reference's angle is rounded to 64 bits: error <= 2^-63 * p, which moves each weight by at
  // most that relative to W_mn (both rotations).
  const LD angle = 2.0L * 0x1p-63L * static_cast<LD>(max_position + 1);
  for (std::size_t m = 0; m < ref.out.size(); ++m)
    for (std::size_t c = 0; c < ref.out[m].size(); ++c) {
      const LD want = ref.out[m][c];
      const LD bound = (16.0L * unit<T>() + angle) * (ref.scale[m][c] + std::fabs(want)) + 1e-300L;
      const LD err =
          std::fabs(static_cast<LD>(got(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(c))) - want);
      worst = std::max(worst, static_cast<double>(err / bound));
      EXPECT_LE(err, bound) << what << " m " << m << " c " << c << " got "
                            << static_cast<double>(
                                   got(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(c)))
                            << " want " << static_cast<double>(want) << " " << rotary_test::seed_note();
      if (err > bound) return worst;
    }
  return worst;
}

template <class T>
class LinearAttentionTyped : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(LinearAttentionTyped, Types, );

// Self-attention with the default elu+1 features: causal and not, both pairings, partial rotary,
// contiguous and non-contiguous positions, N across the causal chunk size (64).
TYPED_TEST(LinearAttentionTyped, MatchesQuadraticForm) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed());
  double worst = 0.0;
  int cases = 0;
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    for (const bool causal : {false, true}) {
      for (const auto& dims :
           {std::array<std::int64_t, 3>{8, 8, 3}, std::array<std::int64_t, 3>{16, 12, 1},
            std::array<std::int64_t, 3>{64, 64, 32}, std::array<std::int64_t, 3>{34, 16, 5}}) {
        for (const std::int64_t n : {1, 7, 64, 130}) {
          Problem pr;
          pr.head_dim = dims[0];
          pr.rotary_dim = dims[1];
          pr.pairing = pairing;
          pr.causal = causal;
          const rotary::Rope<T> rope(rotary::RotarySpec(pr.head_dim, pairing, 10000.0, pr.rotary_dim),
                                     rotary::OnTheFly{});
          const RowMatrix<T> q = random_rows<T>(n, pr.head_dim, rng);
          const RowMatrix<T> k = random_rows<T>(n, pr.head_dim, rng);
          const RowMatrix<T> v = random_rows<T>(n, dims[2], rng);
          // Non-contiguous positions (gaps, repeats, out of order) for odd n; an offset range otherwise.
          std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
          if (n % 2 == 1) {
            std::uniform_int_distribution<std::int64_t> d(0, 5000);
            for (auto& p : pos) p = d(rng);
          } else {
            for (std::int64_t t = 0; t < n; ++t) pos[static_cast<std::size_t>(t)] = 300 + t;
          }
          const Positions positions = n % 2 == 1 ? Positions(pos) : Positions::contiguous(300);
          LinearAttentionOptions opt;
          opt.causal = causal;
          const RowMatrix<T> out = rotary::rope_linear_attention(rope, q, k, v, positions, opt);
          ASSERT_EQ(out.rows(), n);
          ASSERT_EQ(out.cols(), dims[2]);
          const Reference ref = quadratic<T>(pr, feature_rows(q, elu1), feature_rows(k, elu1), v, pos, pos);
          const std::string what = std::string(rotary::to_string(pairing)) + (causal ? " causal" : " full") +
                                   " d " + std::to_string(pr.head_dim) + " N " + std::to_string(n);
          worst = std::max(worst, compare<T>(out, ref, 5000, what));
          ++cases;
        }
      }
    }
  }
  std::printf("[ linear attention %s ] %d cases, max |error| / bound = %.4f\n",
              rotary::dtype_name<T>().data(), cases, worst);
}

// Cross attention (N_q != N_k, separate positions), relu features, and a custom feature map that
// changes the dimension (d = 8 inputs -> D = 16 features [relu(x), relu(-x)] + 0.05), with a
// different psi (x^2 + 0.1 on 16 inputs would not fit: psi here is the same split map, squared).
TYPED_TEST(LinearAttentionTyped, CrossAttentionAndCustomFeatureMaps) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed() + 1);
  double worst = 0.0;
  {
    Problem pr;
    pr.head_dim = 32;
    pr.rotary_dim = 32;
    pr.pairing = Pairing::interleaved;
    const rotary::Rope<T> rope(rotary::RotarySpec(32, pr.pairing), 10000);
    const RowMatrix<T> q = random_rows<T>(9, 32, rng);
    const RowMatrix<T> k = random_rows<T>(40, 32, rng);
    const RowMatrix<T> v = random_rows<T>(40, 6, rng);
    std::vector<std::int64_t> qpos(9);
    std::vector<std::int64_t> kpos(40);
    for (std::size_t i = 0; i < qpos.size(); ++i) qpos[i] = 9000 + 7 * static_cast<std::int64_t>(i);
    for (std::size_t i = 0; i < kpos.size(); ++i) kpos[i] = 3 * static_cast<std::int64_t>(i);
    const RowMatrix<T> out = rotary::rope_linear_attention(rope, q, k, v, Positions(qpos), Positions(kpos),
                                                           LinearAttentionOptions{}, rotary::Relu{});
    const Reference ref = quadratic<T>(pr, feature_rows(q, relu), feature_rows(k, relu), v, qpos, kpos);
    worst = std::max(worst, compare<T>(out, ref, 9999, "cross relu"));
  }
  {
    Problem pr;
    pr.head_dim = 16;
    pr.rotary_dim = 16;
    pr.causal = true;
    pr.eps = 1e-3;
    const rotary::Rope<T> rope(rotary::RotarySpec(16, pr.pairing), 1000);
    const auto split = [](const RowMatrix<T>& x) {
      RowMatrix<T> f(x.rows(), 2 * x.cols());
      f.leftCols(x.cols()) = x.cwiseMax(T(0)).array() + T(0.05);
      f.rightCols(x.cols()) = (-x).cwiseMax(T(0)).array() + T(0.05);
      return f;
    };
    const auto split_sq = [&split](const RowMatrix<T>& x) -> RowMatrix<T> {
      return split(x).array().square().matrix();
    };
    const RowMatrix<T> q = random_rows<T>(70, 8, rng);
    const RowMatrix<T> k = random_rows<T>(70, 8, rng);
    const RowMatrix<T> v = random_rows<T>(70, 4, rng);
    std::vector<std::int64_t> pos(70);
    for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int64_t>((i * 37) % 1000);
    LinearAttentionOptions opt;
    opt.causal = true;
    opt.eps = pr.eps;
    const RowMatrix<T> out =
        rotary::rope_linear_attention(rope, q, k, v, Positions(pos), opt, split, split_sq);
    const auto split_ld = [](const RowMatrix<T>& x, bool square) {
      std::vector<std::vector<LD>> rows(static_cast<std::size_t>(x.rows()));
      for (Eigen::Index r = 0; r < x.rows(); ++r) {
        auto& row = rows[static_cast<std::size_t>(r)];
        row.resize(static_cast<std::size_t>(2 * x.cols()));
        for (Eigen::Index c = 0; c < x.cols(); ++c) {
          // The map adds 0.05 in T: use that rounded constant.
          const LD add = static_cast<LD>(T(0.05));
          const LD a = relu(static_cast<LD>(x(r, c))) + add;
          const LD b = relu(-static_cast<LD>(x(r, c))) + add;
          row[static_cast<std::size_t>(c)] = square ? a * a : a;
          row[static_cast<std::size_t>(c + x.cols())] = square ? b * b : b;
        }
      }
      return rows;
    };
    const Reference ref = quadratic<T>(pr, split_ld(q, false), split_ld(k, true), v, pos, pos);
    worst = std::max(worst, compare<T>(out, ref, 1000, "custom causal"));
  }
  std::printf("[ linear attention %s cross/custom ] max |error| / bound = %.4f\n",
              rotary::dtype_name<T>().data(), worst);
}

// Relative position: shifting every position by the same amount changes nothing (beyond rounding),
// while a change of relative positions does change the output.
TEST(LinearAttention, DependsOnRelativePositionsOnly) {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  const rotary::Rope<double> rope(rotary::RotarySpec(16, Pairing::half_split), rotary::OnTheFly{});
  const RowMatrix<double> q = random_rows<double>(20, 16, rng);
  const RowMatrix<double> k = random_rows<double>(20, 16, rng);
  const RowMatrix<double> v = random_rows<double>(20, 3, rng);
  std::vector<std::int64_t> pos(20);
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int64_t>(i * i);
  std::vector<std::int64_t> shifted = pos;
  for (auto& p : shifted) p += 123456;
  for (const bool causal : {false, true}) {
    LinearAttentionOptions opt;
    opt.causal = causal;
    const RowMatrix<double> a = rotary::rope_linear_attention(rope, q, k, v, Positions(pos), opt);
    const RowMatrix<double> b = rotary::rope_linear_attention(rope, q, k, v, Positions(shifted), opt);
    // Double rotations (5 u each, rows exact at any position) and sums over 20 tokens of weights
    // ~|phi|.|psi| ~ 16 * 4: far below 1e-11 of the output scale.
    EXPECT_LT((a - b).cwiseAbs().maxCoeff(), 1e-11 * (1.0 + a.cwiseAbs().maxCoeff()));
    std::vector<std::int64_t> other = pos;
    other[3] += 1;
    const RowMatrix<double> c = rotary::rope_linear_attention(rope, q, k, v, Positions(other), opt);
    EXPECT_GT((a - c).cwiseAbs().maxCoeff(), 1e-6);
  }
}

// A query whose relu features vanish has a zero denominator: eps turns 0/0 into exactly 0.
TEST(LinearAttention, ZeroDenominatorIsGuardedByEps) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8, Pairing::half_split), 100);
  RowMatrix<float> q = RowMatrix<float>::Constant(3, 8, 0.5f);
  q.row(1).setConstant(-1.0f);  // relu -> all zero
  const RowMatrix<float> k = RowMatrix<float>::Constant(3, 8, 0.25f);
  const RowMatrix<float> v = RowMatrix<float>::Constant(3, 2, 4.0f);
  const RowMatrix<float> out = rotary::rope_linear_attention(rope, q, k, v, Positions::contiguous(0),
                                                             LinearAttentionOptions{}, rotary::Relu{});
  EXPECT_EQ(out(1, 0), 0.0f);
  EXPECT_EQ(out(1, 1), 0.0f);
  EXPECT_TRUE(std::isfinite(out(0, 0)));
  // eps = 0 is the exact formula: 0/0.
  LinearAttentionOptions exact;
  exact.eps = 0.0;
  const RowMatrix<float> nan_out =
      rotary::rope_linear_attention(rope, q, k, v, Positions::contiguous(0), exact, rotary::Relu{});
  EXPECT_TRUE(std::isnan(nan_out(1, 0)));
}

TEST(LinearAttention, Errors) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8, Pairing::half_split), 100);
  const RowMatrix<float> q = RowMatrix<float>::Ones(4, 8);
  const RowMatrix<float> k = RowMatrix<float>::Ones(4, 8);
  const RowMatrix<float> v = RowMatrix<float>::Ones(4, 2);
  const Positions p0 = Positions::contiguous(0);
  rotary_test::expect_error(
      [&] { rotary::rope_linear_attention(rope, q, RowMatrix<float>::Ones(4, 6), v, p0); },
      {"q has 8 columns but k has 6"});
  rotary_test::expect_error(
      [&] { rotary::rope_linear_attention(rope, q, k, RowMatrix<float>::Ones(3, 2), p0); },
      {"v has 3 rows but k has 4"});
  rotary_test::expect_error([&] { rotary::rope_linear_attention(rope, q, k, RowMatrix<float>(4, 0), p0); },
                            {"v has 0 columns"});
  rotary_test::expect_error(
      [&] {
        rotary::rope_linear_attention(rope, q, RowMatrix<float>::Ones(3, 8), RowMatrix<float>::Ones(3, 2),
                                      p0);
      },
      {"q has 4 rows but k has 3"});
  LinearAttentionOptions causal;
  causal.causal = true;
  rotary_test::expect_error(
      [&] {
        rotary::rope_linear_attention(rope, q, RowMatrix<float>::Ones(3, 8), RowMatrix<float>::Ones(3, 2), p0,
                                      p0, causal);
      },
      {"causal linear attention needs as many queries as keys"});
  for (const double eps : {-1e-6, std::nan(""), std::numeric_limits<double>::infinity()}) {
    LinearAttentionOptions bad;
    bad.eps = eps;
    rotary_test::expect_error([&] { rotary::rope_linear_attention(rope, q, k, v, p0, bad); }, {"eps ("});
  }
  const std::vector<std::int64_t> three = {0, 1, 2};
  rotary_test::expect_error([&] { rotary::rope_linear_attention(rope, q, k, v, Positions(three), p0); },
                            {"q_positions has 3 values for 4 rows"});
  rotary_test::expect_error([&] { rotary::rope_linear_attention(rope, q, k, v, p0, Positions(three)); },
                            {"k_positions has 3 values for 4 rows"});
  // Positions beyond the rope's cache: apply()'s check.
  rotary_test::expect_error([&] { rotary::rope_linear_attention(rope, q, k, v, Positions::contiguous(98)); },
                            {"outside the cache"});
  // Column count against the rope (odd d cannot even make a rope).
  rotary_test::expect_error(
      [&] {
        rotary::rope_linear_attention(rope, RowMatrix<float>::Ones(4, 6), RowMatrix<float>::Ones(4, 6), v,
                                      p0);
      },
      {"feature map of q", "head_dim (8)"});
  rotary_test::expect_error([] { rotary::Rope<float> r(rotary::RotarySpec(7), 10); }, {"head_dim (7) is odd"});
  // Feature maps that break the contract.
  const auto identity = [](const RowMatrix<float>& x) { return x; };
  RowMatrix<float> mixed = q;
  mixed(2, 5) = -0.5f;
  rotary_test::expect_error(
      [&] { rotary::rope_linear_attention(rope, mixed, k, v, p0, LinearAttentionOptions{}, identity); },
      {"feature map of q gave -0.5 at row 2, column 5", "non-negative"});
  const auto nan_map = [](const RowMatrix<float>& x) {
    RowMatrix<float> f = x.cwiseAbs();
    f(0, 0) = std::nanf("");
    return f;
  };
  rotary_test::expect_error(
      [&] {
        rotary::rope_linear_attention(rope, q, k, v, p0, LinearAttentionOptions{}, rotary::EluPlusOne{},
                                      nan_map);
      },
      {"feature map of k gave nan"});
}

}  // namespace
