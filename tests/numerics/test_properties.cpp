// Properties of R^d_{Theta,m}, checked on the reference matrix and through the kernels:
// orthogonality, norm preservation, composition, relative position, inverse, pairing permutation,
// and the alpha/rho score decomposition.
#include <Eigen/LU>
#include <cstring>

#include "support.hpp"

namespace {

using rotary::Direction;
using rotary::Pairing;
using rotary::reference::rotation_matrix;

constexpr std::int64_t kDim = 70;  // 64 rotated + 6 pass-through: exercises both parts

std::vector<double> theta(std::int64_t rotary_dim = 64, double base = 10000.0) {
  return rotary::default_frequencies(rotary_dim, base).theta;
}

class Property : public ::testing::TestWithParam<Pairing> {};

TEST_P(Property, OrthogonalWithUnitDeterminant) {
  for (std::int64_t m : {0, 1, 7, 1000, 123456}) {
    const Eigen::MatrixXd r = rotation_matrix(theta(), kDim, GetParam(), m);
    EXPECT_LE((r.transpose() * r - Eigen::MatrixXd::Identity(kDim, kDim)).cwiseAbs().maxCoeff(), 1e-15);
    EXPECT_NEAR(r.determinant(), 1.0, 1e-13);
    // R^T = R^-1 = R_{-m}
    EXPECT_LE((r.transpose() - rotation_matrix(theta(), kDim, GetParam(), -m)).cwiseAbs().maxCoeff(), 1e-15);
  }
}

TEST_P(Property, Composition) {
  for (auto [a, b] : {std::pair<std::int64_t, std::int64_t>{3, 4}, {100, -250}, {4096, 8191}}) {
    const Eigen::MatrixXd lhs = rotation_matrix(theta(), kDim, GetParam(), a) *
                                rotation_matrix(theta(), kDim, GetParam(), b);
    EXPECT_LE((lhs - rotation_matrix(theta(), kDim, GetParam(), a + b)).cwiseAbs().maxCoeff(), 1e-12)
        << a << " + " << b;
  }
}

// <R_m q, R_n k> = q^T R_{n-m} k with q, k rotated by the float kernels.
TEST_P(Property, RelativePositionThroughKernels) {
  const rotary::Rope<float> rope(rotary::RotarySpec(kDim, GetParam(), 10000.0, 64), 1 << 16);
  std::mt19937_64 rng(rotary_test::seed());
  std::uniform_int_distribution<std::int64_t> pos(0, (1 << 16) - 1);
  double worst = 0.0;
  for (int trial = 0; trial < 50; ++trial) {
    rotary::RowMatrix<float> q = rotary::RowMatrix<float>::Random(1, kDim);
    rotary::RowMatrix<float> k = rotary::RowMatrix<float>::Random(1, kDim);
    const Eigen::VectorXd q0 = q.row(0).transpose().cast<double>();
    const Eigen::VectorXd k0 = k.row(0).transpose().cast<double>();
    const std::int64_t m = pos(rng);
    const std::int64_t n = pos(rng);
    rotary::apply(rope, q, rotary::Positions::contiguous(m), 1);
    rotary::apply(rope, k, rotary::Positions::contiguous(n), 1);
    const double lhs = q.row(0).cast<double>().dot(k.row(0).cast<double>());
    const double rhs = q0.dot(rotation_matrix(rope.cache().theta(), kDim, GetParam(), n - m) * k0);
    const double rel = std::fabs(lhs - rhs) / (q0.norm() * k0.norm());
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-7) << "m " << m << " n " << n << " " << rotary_test::seed_note();
  }
  std::printf("relative-position property: max |<R_m q, R_n k> - q^T R_{n-m} k| / (|q||k|) = %.3g\n", worst);
}

TEST_P(Property, NormPreservedAndInverseUndoesForward) {
  const rotary::Rope<float> rope(rotary::RotarySpec(kDim, GetParam(), 500000.0, 64), 4096);
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(64 * 8, kDim);
  const rotary::RowMatrix<float> x0 = x;
  rotary::apply(rope, x, rotary::Positions::contiguous(4096 - 64), 8);
  double worst_norm = 0.0;
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    worst_norm = std::max(worst_norm, std::fabs(static_cast<double>(x.row(r).norm() / x0.row(r).norm()) - 1.0));
  EXPECT_LE(worst_norm, 4 * 0x1p-24);
  rotary::apply(rope, x, rotary::Positions::contiguous(4096 - 64), 8, Direction::inverse);
  const double back = (x - x0).cwiseAbs().maxCoeff();
  EXPECT_LE(back, 4 * 0x1p-24 * 2);  // |x| <= 1: a few float ulps after two roundings
  std::printf("norm drift %.3g, |inverse(forward(x)) - x| <= %.3g\n", worst_norm, back);
}

INSTANTIATE_TEST_SUITE_P(BothPairings, Property,
                         ::testing::Values(Pairing::interleaved, Pairing::half_split),
                         [](const auto& p) { return std::string(rotary::to_string(p.param)); });

// R_interleaved = P R_half_split P^T, and the kernels agree bit for bit: rope_i(P x) = P rope_h(x).
TEST(Pairings, InterleavedIsPermutedHalfSplit) {
  const Eigen::MatrixXd p = rotary::reference::pairing_permutation(kDim, 64);
  EXPECT_LE((p * p.transpose() - Eigen::MatrixXd::Identity(kDim, kDim)).cwiseAbs().maxCoeff(), 0.0);
  for (std::int64_t m : {1, 99, 65535}) {
    const Eigen::MatrixXd ri = rotation_matrix(theta(), kDim, Pairing::interleaved, m);
    const Eigen::MatrixXd rh = rotation_matrix(theta(), kDim, Pairing::half_split, m);
    EXPECT_LE((ri - p * rh * p.transpose()).cwiseAbs().maxCoeff(), 0.0) << m;
  }
  const rotary::Rope<float> inter(rotary::RotarySpec(kDim, Pairing::interleaved, 10000.0, 64), 100);
  const rotary::Rope<float> half(rotary::RotarySpec(kDim, Pairing::half_split, 10000.0, 64), 100);
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(12, kDim);
  const Eigen::MatrixXf pf = p.cast<float>();
  rotary::RowMatrix<float> px = x * pf.transpose();  // each row permuted: (P x)^T = x^T P^T
  rotary::apply(inter, px, rotary::Positions::contiguous(40), 4);
  rotary::apply(half, x, rotary::Positions::contiguous(40), 4);
  const rotary::RowMatrix<float> p_half = x * pf.transpose();
  EXPECT_EQ(0, std::memcmp(px.data(), p_half.data(), px.size() * sizeof(float)));
}

// alpha/rho: with theta*_j = phi + (1 - alpha) theta_j, phi = alpha / base^rho, the score splits as
//   a*(D) = cos(D phi) a'(D) - sin(D phi) b'(D),  D = m - n,
// where a' is the RoPE score with frequencies (1 - alpha) theta_j and b' its Hilbert pair: the same
// score with q's pairs turned by -90 degrees ((x0, x1) -> (x1, -x0)). Checked in double kernels.
TEST(ReceptiveField, ScoreDecomposition) {
  const double alpha = 0.3;
  const double rho = 0.75;
  const std::int64_t d = 32;
  rotary::RotarySpec star(d, Pairing::half_split);
  star.receptive_field = rotary::ReceptiveField{alpha, rho};
  rotary::RotarySpec prime(d, Pairing::half_split);
  prime.freq_factors.assign(d / 2, 1.0 / (1.0 - alpha));  // theta_j / c_j = (1 - alpha) theta_j
  const rotary::Rope<double> r_star(star, 2048);
  const rotary::Rope<double> r_prime(prime, 2048);
  const double phi = alpha / std::pow(10000.0, rho);

  std::mt19937_64 rng(rotary_test::seed());
  auto score = [&](const rotary::Rope<double>& rope, rotary::RowMatrix<double> q, rotary::RowMatrix<double> k,
                   std::int64_t m, std::int64_t n) {
    rotary::apply(rope, q, rotary::Positions::contiguous(m), 1);
    rotary::apply(rope, k, rotary::Positions::contiguous(n), 1);
    return q.row(0).dot(k.row(0));
  };
  double worst = 0.0;
  for (int trial = 0; trial < 40; ++trial) {
    const rotary::RowMatrix<double> q = rotary::RowMatrix<double>::Random(1, d);
    const rotary::RowMatrix<double> k = rotary::RowMatrix<double>::Random(1, d);
    rotary::RowMatrix<double> jq(1, d);  // pairs turned by -90 degrees
    jq.leftCols(d / 2) = q.rightCols(d / 2);
    jq.rightCols(d / 2) = -q.leftCols(d / 2);
    const std::int64_t m = static_cast<std::int64_t>(rng() % 2048);
    const std::int64_t n = static_cast<std::int64_t>(rng() % 2048);
    const double delta = static_cast<double>(m - n);
    const double a_star = score(r_star, q, k, m, n);
    const double a_prime = score(r_prime, q, k, m, n);
    const double b_prime = score(r_prime, jq, k, m, n);
    const double rhs = std::cos(delta * phi) * a_prime - std::sin(delta * phi) * b_prime;
    worst = std::max(worst, std::fabs(a_star - rhs));
    EXPECT_NEAR(a_star, rhs, 1e-12) << "m " << m << " n " << n;
  }
  std::printf("alpha/rho decomposition: max |a* - (cos a' - sin b')| = %.3g\n", worst);
}

}  // namespace
