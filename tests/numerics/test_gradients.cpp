// Gradients (gradients.hpp) against central finite differences of losses evaluated in long double, and
// the input gradient against the transposed explicit rotation matrix.
//
// Finite differences. For a loss L(theta_j) built from rotations by m*theta_j, a step h in theta_j turns
// every angle by m*h; with M the largest |m| we step h = u/M, i.e. an angle step u. The central difference
// then errs by (a) truncation, at most about u^2/6 of the derivative's scale (the third derivative of
// cos(phi0 + m h) in h is m^3), and (b) rounding: each long double evaluation of L is off by about
// eps_L * (1 + M theta) of its scale (the angle m*theta carries a relative error eps_L = 2^-64 and sinl/cosl
// see that error scaled by the angle), which the difference divides by 2h. u = cbrt(3 eps_L (2 + M theta))
// balances the two, and the tolerance is a few times their sum (plus the double rounding of the output
// that feeds the code under test). Only the terms of pair j enter L_j, so the other pairs cannot add
// rounding to the difference. Errors are relative to the derivative's scale M * sum |w||x| over pair j.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <vector>

#include <rotary/gradients.hpp>

#include "support.hpp"

namespace {

using rotary::CosSinCache;
using rotary::Direction;
using rotary::Frequencies;
using rotary::Pairing;
using rotary::Positions;
using rotary::ReceptiveField;
using rotary::Rope;
using rotary::RotarySpec;
using rotary::RowMatrix;
using rotary::reference::pair_first;
using rotary::reference::pair_second;
using LD = long double;

// Precision assumed for the finite differences: long double, but never finer than x86's 64-bit
// significand. Where long double is IEEE quad (AArch64), its epsilon would shrink the step to ~1e-11,
// where the double-precision parts of the evaluated function (θ* in double) dominate the error.
constexpr LD kEpsL = std::max(std::numeric_limits<LD>::epsilon(), static_cast<LD>(0x1p-63L));
constexpr double kEpsD = std::numeric_limits<double>::epsilon();

// One rotation problem: x rotated at positions, weights w = dL/dy of the linear loss L = sum w.y.
struct Problem {
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;
  Pairing pairing = Pairing::half_split;
  std::int64_t heads = 1;
  std::vector<std::int64_t> positions;
  RowMatrix<double> x, w;

  std::int64_t tokens() const { return static_cast<std::int64_t>(positions.size()); }
  std::int64_t pairs() const { return rotary_dim / 2; }
  LD max_position() const {
    LD m = 1;
    for (std::int64_t p : positions) m = std::max(m, static_cast<LD>(std::llabs(p)));
    return m;
  }
  RotarySpec spec() const { return RotarySpec(head_dim, pairing, 10000.0, rotary_dim); }

  // L_j: the part of sum w.y that depends on pair j, for pair frequency theta (angle sign*m*theta),
  // times the attention factor c, all in long double.
  LD pair_loss(std::int64_t j, LD theta, LD c = 1, LD sign = 1) const {
    const std::int64_t a = pair_first(pairing, j, pairs());
    const std::int64_t b = pair_second(pairing, j, pairs());
    LD sum = 0;
    for (std::int64_t t = 0; t < tokens(); ++t) {
      const LD angle = sign * static_cast<LD>(positions[static_cast<std::size_t>(t)]) * theta;
      const LD cs = std::cos(angle);
      const LD sn = std::sin(angle);
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t r = t * heads + h;
        const LD xa = x(r, a);
        const LD xb = x(r, b);
        sum += static_cast<LD>(w(r, a)) * c * (xa * cs - xb * sn) +
               static_cast<LD>(w(r, b)) * c * (xa * sn + xb * cs);
      }
    }
    return sum;
  }

  // M * sum |w||x| over pair j: the scale of dL/dtheta_j.
  double scale(std::int64_t j) const {
    const std::int64_t a = pair_first(pairing, j, pairs());
    const std::int64_t b = pair_second(pairing, j, pairs());
    double s = 0.0;
    for (Eigen::Index r = 0; r < x.rows(); ++r)
      s += (std::fabs(w(r, a)) + std::fabs(w(r, b))) * (std::fabs(x(r, a)) + std::fabs(x(r, b)));
    return static_cast<double>(max_position()) * s;
  }
};

Problem make_problem(std::int64_t head_dim, std::int64_t rotary_dim, Pairing pairing, std::int64_t heads,
                     std::vector<std::int64_t> positions, std::mt19937_64& rng) {
  Problem p;
  p.head_dim = head_dim;
  p.rotary_dim = rotary_dim;
  p.pairing = pairing;
  p.heads = heads;
  p.positions = std::move(positions);
  const auto rows = static_cast<Eigen::Index>(p.tokens() * heads);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  p.x = RowMatrix<double>::NullaryExpr(rows, head_dim, [&] { return d(rng); });
  p.w = RowMatrix<double>::NullaryExpr(rows, head_dim, [&] { return d(rng); });
  return p;
}

// Angle step u and the tolerance it implies for a problem whose largest |m * theta| is m_theta.
struct Step {
  LD u;
  double tol;
};
Step step_for(LD m_theta, double output_rounding = 64 * kEpsD) {
  const LD u = std::cbrt(3 * kEpsL * (2 + m_theta));
  const LD bound = u * u / 6 + kEpsL * (2 + m_theta) / u;
  return {u, static_cast<double>(8 * bound) + output_rounding};
}

// Central difference of f(v) at v with step h.
template <class F>
LD central(const F& f, LD v, LD h) {
  return (f(v + h) - f(v - h)) / (2 * h);
}

template <class T>
RowMatrix<T> forward(const Problem& p, const Frequencies& f, Direction dir = Direction::forward) {
  RotarySpec spec = p.spec();
  spec.frequencies = f;  // a Rope takes only its spec's frequencies
  const Rope<T> rope(spec, CosSinCache<rotary::compute_t<T>>::for_positions(f, p.positions));
  const RowMatrix<T> xt = p.x.cast<T>();
  RowMatrix<T> y(xt.rows(), xt.cols());
  rotary::apply(rope, xt, y, Positions(p.positions), p.heads, dir);
  return y;
}

struct Case {
  std::int64_t head_dim, rotary_dim;
  Pairing pairing;
  std::int64_t heads;
  std::vector<std::int64_t> positions;
};

std::vector<Case> cases() {
  const std::int64_t big = 2147483647;  // 2^31 - 1
  return {
      {64, 64, Pairing::half_split, 3, {0, 1, 7, 100, 4096}},
      {64, 64, Pairing::interleaved, 3, {0, 1, 7, 100, 4096}},
      {10, 6, Pairing::half_split, 2, {3, 1000000, 12345, 0}},  // partial rotary: 4 pass-through dims
      {12, 8, Pairing::interleaved, 2, {5, 1 << 24, big, 77}},  // partial, positions to 2^31 - 1
      {128, 32, Pairing::half_split, 4, {big, big - 1, 1 << 20}},
  };
}

TEST(ThetaGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(rotary_test::seed());
  for (const Direction dir : {Direction::forward, Direction::inverse}) {
    for (const Case& c : cases()) {
      const Problem p = make_problem(c.head_dim, c.rotary_dim, c.pairing, c.heads, c.positions, rng);
      const Frequencies f = rotary::default_frequencies(c.rotary_dim, 10000.0);
      const RowMatrix<double> y = forward<double>(p, f, dir);
      const std::vector<double> grad =
          rotary::theta_gradient(p.spec(), y, p.w, Positions(p.positions), p.heads, dir);
      ASSERT_EQ(grad.size(), static_cast<std::size_t>(p.pairs()));
      const LD sign = dir == Direction::forward ? 1 : -1;
      double worst = 0.0;  // max rel error, and max rel error / its tolerance
      double worst_ratio = 0.0;
      for (std::int64_t j = 0; j < p.pairs(); ++j) {
        const LD theta = f.theta[static_cast<std::size_t>(j)];
        const Step s = step_for(p.max_position() * theta);
        const LD fd =
            central([&](LD v) { return p.pair_loss(j, v, 1, sign); }, theta, s.u / p.max_position());
        const double rel =
            std::fabs(grad[static_cast<std::size_t>(j)] - static_cast<double>(fd)) / p.scale(j);
        EXPECT_LE(rel, s.tol) << "pair " << j << " head_dim " << c.head_dim << " rotary_dim " << c.rotary_dim
                              << " " << rotary::to_string(c.pairing) << " " << rotary_test::seed_note();
        worst = std::max(worst, rel);
        worst_ratio = std::max(worst_ratio, rel / s.tol);
      }
      std::printf("theta gradient %s d=%lld/%lld %s M=%.3g: max rel err %.2e, max err/tol %.3f\n",
                  dir == Direction::forward ? "fwd" : "inv", static_cast<long long>(c.rotary_dim),
                  static_cast<long long>(c.head_dim), std::string(rotary::to_string(c.pairing)).c_str(),
                  static_cast<double>(p.max_position()), worst, worst_ratio);
    }
  }
}

// Float storage: y from the f32 kernels (within 2 float ulps of the exact rotation, the kernel bound), the
// weights rounded to float and the finite difference taken with the rounded weights. Each term of the
// gradient then errs by at most 2 * 2^-24 relative to |w||x|, so the sum by 1.2e-7 of the scale; 5e-7.
TEST(ThetaGradient, FloatStorage) {
  std::mt19937_64 rng(rotary_test::seed() + 1);
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    Problem p = make_problem(48, 40, pairing, 4, {0, 3, 200, 65536, 1000000}, rng);
    p.w = p.w.cast<float>().cast<double>();
    const Frequencies f = rotary::default_frequencies(40, 10000.0);
    const RowMatrix<float> y = forward<float>(p, f);
    const RowMatrix<float> wf = p.w.cast<float>();
    const std::vector<double> grad = rotary::theta_gradient(p.spec(), y, wf, Positions(p.positions), p.heads);
    double worst = 0.0;
    for (std::int64_t j = 0; j < p.pairs(); ++j) {
      const LD theta = f.theta[static_cast<std::size_t>(j)];
      const Step s = step_for(p.max_position() * theta);
      const LD fd = central([&](LD v) { return p.pair_loss(j, v); }, theta, s.u / p.max_position());
      worst = std::max(worst,
                       std::fabs(grad[static_cast<std::size_t>(j)] - static_cast<double>(fd)) / p.scale(j));
    }
    EXPECT_LE(worst, 5e-7) << rotary_test::seed_note();
    std::printf("theta gradient f32 %s: max rel err %.2e\n", std::string(rotary::to_string(pairing)).c_str(),
                worst);
  }
}

// Learned frequencies: any theta (here random, some zero or negative) and a folded attention factor c,
// which the gradient formula does not need (it uses y only).
TEST(ThetaGradient, ArbitraryThetaWithAttentionFactor) {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  const Problem p = make_problem(20, 16, Pairing::interleaved, 2, {0, 9, 31, 500, 70000}, rng);
  Frequencies f;
  std::uniform_real_distribution<double> d(-0.5, 1.5);
  for (std::int64_t j = 0; j < p.pairs(); ++j) f.theta.push_back(j == 3 ? 0.0 : d(rng));
  f.attention_factor = 1.25;
  const RowMatrix<double> y = forward<double>(p, f);
  const std::vector<double> grad = rotary::theta_gradient(p.spec(), y, p.w, Positions(p.positions), p.heads);
  for (std::int64_t j = 0; j < p.pairs(); ++j) {
    const LD theta = f.theta[static_cast<std::size_t>(j)];
    const Step s = step_for(p.max_position() * std::fabs(theta));
    const LD fd = central([&](LD v) { return p.pair_loss(j, v, 1.25L); }, theta, s.u / p.max_position());
    EXPECT_LE(std::fabs(grad[static_cast<std::size_t>(j)] - static_cast<double>(fd)) / (1.25 * p.scale(j)),
              s.tol)
        << "pair " << j;
  }
}

// q and k with different head counts (GQA) at shared positions: L = w_q.y_q + w_k.y_k. Also the strided
// entry point on a [heads, tokens, head_dim] copy with padding must give the same sums (same terms, same
// order: bit-identical).
TEST(ThetaGradient, QueriesAndKeysTogetherAndStrided) {
  std::mt19937_64 rng(rotary_test::seed() + 3);
  const std::vector<std::int64_t> pos = {2, 40, 41, 3000, 123456};
  const Problem q = make_problem(34, 34, Pairing::half_split, 4, pos, rng);
  const Problem k = make_problem(34, 34, Pairing::half_split, 2, pos, rng);
  const Frequencies f = rotary::default_frequencies(34, 10000.0);
  const RowMatrix<double> yq = forward<double>(q, f);
  const RowMatrix<double> yk = forward<double>(k, f);
  const std::vector<double> grad =
      rotary::theta_gradient_qk(q.spec(), yq, q.w, yk, k.w, Positions(pos), q.heads, k.heads);
  for (std::int64_t j = 0; j < q.pairs(); ++j) {
    const LD theta = f.theta[static_cast<std::size_t>(j)];
    const Step s = step_for(q.max_position() * theta);
    const LD fd =
        central([&](LD v) { return q.pair_loss(j, v) + k.pair_loss(j, v); }, theta, s.u / q.max_position());
    EXPECT_LE(
        std::fabs(grad[static_cast<std::size_t>(j)] - static_cast<double>(fd)) / (q.scale(j) + k.scale(j)),
        s.tol)
        << "pair " << j;
  }

  // [heads, tokens, head_dim + 5] copies of yq and w.
  const std::int64_t tokens = q.tokens();
  const std::int64_t row = 34 + 5;
  std::vector<double> ys(static_cast<std::size_t>(q.heads * tokens * row), 1e300);
  std::vector<double> ws(ys.size(), 1e300);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < q.heads; ++h)
      for (std::int64_t i = 0; i < 34; ++i) {
        const auto at = static_cast<std::size_t>(h * tokens * row + t * row + i);
        ys[at] = yq(t * q.heads + h, i);
        ws[at] = q.w(t * q.heads + h, i);
      }
  const rotary::StridedLayout l{tokens, q.heads, row, tokens * row};
  std::vector<double> strided(static_cast<std::size_t>(q.pairs()), 0.0);
  rotary::accumulate_theta_gradient_strided(q.spec(), ys.data(), l, ws.data(), l, Positions(pos), strided);
  EXPECT_EQ(strided, rotary::theta_gradient(q.spec(), yq, q.w, Positions(pos), q.heads));
}

// dL/dx = c R_m^T dL/dy: against the explicit matrix (long double angles) transposed, for both pairings,
// partial rotary, a folded attention factor and both forward directions. Error bound: each output
// coordinate is c*(g_a cos + g_b sin) with cos/sin correctly rounded from exact angles on both sides; a few
// double ulps of c*(|g_a| + |g_b|), 1e-15 relative to max|g| with margin. In place equals out of place.
TEST(InputGradient, IsTheTransposedRotation) {
  std::mt19937_64 rng(rotary_test::seed() + 4);
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    for (const Direction dir : {Direction::forward, Direction::inverse}) {
      RotarySpec spec(30, pairing, 10000.0, 24);
      const std::vector<std::int64_t> pos = {0, 1, 999, 1 << 22};
      Frequencies f = rotary::default_frequencies(24, 10000.0);
      f.attention_factor = 1.1;
      spec.frequencies = f;
      const Rope<double> rope(spec, CosSinCache<double>::for_positions(f, pos));
      const Problem p = make_problem(30, 24, pairing, 3, pos, rng);
      RowMatrix<double> dx(p.w.rows(), p.w.cols());
      rotary::input_gradient(rope, p.w, dx, Positions(pos), 3, dir);
      RowMatrix<double> in_place = p.w;
      rotary::input_gradient(rope, in_place, Positions(pos), 3, dir);
      EXPECT_EQ(in_place, dx);
      double worst = 0.0;
      for (std::int64_t t = 0; t < p.tokens(); ++t) {
        const std::int64_t m =
            dir == Direction::forward ? pos[static_cast<std::size_t>(t)] : -pos[static_cast<std::size_t>(t)];
        Eigen::MatrixXd r = rotary::reference::rotation_matrix(f.theta, 30, pairing, m);
        r.topLeftCorner(24, 24) *= 1.1;  // the factor scales the rotated block only
        for (std::int64_t h = 0; h < 3; ++h) {
          const Eigen::VectorXd g = p.w.row(t * 3 + h).transpose();
          const Eigen::VectorXd want = r.transpose() * g;
          worst = std::max(
              worst, (dx.row(t * 3 + h).transpose() - want).cwiseAbs().maxCoeff() / g.cwiseAbs().maxCoeff());
        }
      }
      EXPECT_LE(worst, 1e-15);
      std::printf("input gradient %s %s: max rel err %.2e\n", std::string(rotary::to_string(pairing)).c_str(),
                  dir == Direction::forward ? "fwd" : "inv", worst);
    }
  }
}

// s = c^2 sum_j Re(conj(zq) zk e^{i D theta_j}) + tail in long double, D = n - m; only pair `only` (no tail)
// when only >= 0.
LD score_ld(const Eigen::VectorXd& q, const Eigen::VectorXd& k, const std::vector<LD>& theta, Pairing pairing,
            std::int64_t m, std::int64_t n, LD c, std::int64_t only = -1) {
  const auto pairs = static_cast<std::int64_t>(theta.size());
  LD s = 0;
  for (std::int64_t j = 0; j < pairs; ++j) {
    if (only >= 0 && j != only) continue;
    const std::int64_t a = pair_first(pairing, j, pairs);
    const std::int64_t b = pair_second(pairing, j, pairs);
    const std::complex<LD> zq(q(a), q(b));
    const std::complex<LD> zk(k(a), k(b));
    s += c * c *
         (std::conj(zq) * zk * std::polar(1.0L, static_cast<LD>(n - m) * theta[static_cast<std::size_t>(j)]))
             .real();
  }
  if (only < 0)
    for (Eigen::Index i = 2 * pairs; i < q.size(); ++i) s += static_cast<LD>(q(i)) * k(i);
  return s;
}

// ds/dtheta_j by central differences of pair j's term of the long double score (the step rule above with
// M = |n - m|), relative to |D| c^2 |zq_j||zk_j|; the score itself against q^T R_m^T R_n k with explicit
// matrices.
TEST(ScoreGradient, MatchesFiniteDifferencesAndTheMatrices) {
  std::mt19937_64 rng(rotary_test::seed() + 5);
  const std::int64_t big = 2147483647;
  const std::vector<std::pair<std::int64_t, std::int64_t>> mn = {
      {0, 0}, {5, 3}, {3, 5}, {1000, 70000}, {-20, 4096}, {big, 3}, {1 << 20, big}};
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    const std::int64_t head_dim = 64;
    const std::int64_t rotary_dim = 48;
    Frequencies f = rotary::default_frequencies(rotary_dim, 500000.0);
    f.attention_factor = 1.2;
    std::vector<LD> theta(f.theta.begin(), f.theta.end());
    double worst = 0.0;
    double worst_ratio = 0.0;
    for (const auto& pair : mn) {
      const std::int64_t m = pair.first;  // not structured bindings: C++17 lambdas cannot capture them
      const std::int64_t n = pair.second;
      const Eigen::VectorXd q = Eigen::VectorXd::NullaryExpr(
          head_dim, [&] { return std::uniform_real_distribution<double>(-1, 1)(rng); });
      const Eigen::VectorXd k = Eigen::VectorXd::NullaryExpr(
          head_dim, [&] { return std::uniform_real_distribution<double>(-1, 1)(rng); });
      const rotary::ScoreGradient g = rotary::score_gradient(f, pairing, q, m, k, n);
      ASSERT_EQ(g.d_theta.size(), theta.size());
      const LD delta = std::max<LD>(1, std::fabs(static_cast<LD>(n - m)));
      for (std::size_t j = 0; j < theta.size(); ++j) {
        const Step s = step_for(delta * theta[j]);
        std::vector<LD> th = theta;
        const LD fd = central(
            [&](LD v) {
              th[j] = v;
              return score_ld(q, k, th, pairing, m, n, 1.2L, static_cast<std::int64_t>(j));
            },
            theta[j], s.u / delta);
        const std::int64_t a = pair_first(pairing, static_cast<std::int64_t>(j), rotary_dim / 2);
        const std::int64_t b = pair_second(pairing, static_cast<std::int64_t>(j), rotary_dim / 2);
        const double scale =
            static_cast<double>(delta) * 1.44 * std::hypot(q(a), q(b)) * std::hypot(k(a), k(b));
        const double rel = std::fabs(g.d_theta[j] - static_cast<double>(fd)) / scale;
        EXPECT_LE(rel, s.tol) << "pair " << j << " m " << m << " n " << n;
        worst = std::max(worst, rel);
        worst_ratio = std::max(worst_ratio, rel / s.tol);
      }
      // The score against explicit matrices; long double angles in rotation_matrix are good to ~1e-10 rad
      // at 2^31, so only moderate positions here (1e-13 relative to |q||k|).
      if (std::llabs(m) < 100000 && std::llabs(n) < 100000) {
        Eigen::MatrixXd rm = rotary::reference::rotation_matrix(f.theta, head_dim, pairing, m);
        Eigen::MatrixXd rn = rotary::reference::rotation_matrix(f.theta, head_dim, pairing, n);
        rm.topLeftCorner(rotary_dim, rotary_dim) *= 1.2;
        rn.topLeftCorner(rotary_dim, rotary_dim) *= 1.2;
        const double want = (rm * q).dot(rn * k);
        EXPECT_LE(std::fabs(g.score - want), 1e-13 * q.norm() * k.norm()) << "m " << m << " n " << n;
      }
    }
    std::printf("score gradient %s: max rel err %.2e, max err/tol %.3f\n",
                std::string(rotary::to_string(pairing)).c_str(), worst, worst_ratio);
  }
}

// L(alpha, rho) = sum w.y with y rotated by theta*_j = alpha base^-rho + (1 - alpha) theta_j, all in long
// double; the library's chain: y from the spec's frequencies, G = theta_gradient, then
// receptive_field_gradient. The step rule above applies with the angle step M * |dtheta*/dparam| * h
// (for rho the chain adds derivatives of base^-rho, ln(base) per order, which the tolerance's factor 8
// absorbs for ln(1e4) * h << 1). Scale: M * sum |w||x| * max_j |dtheta*_j/dparam|.
TEST(ReceptiveFieldGradient, MatchesFiniteDifferences) {
  std::mt19937_64 rng(rotary_test::seed() + 6);
  const double base = 10000.0;
  for (const ReceptiveField rf :
       {ReceptiveField{0.1, 1.0}, ReceptiveField{0.5, 0.0}, ReceptiveField{0.3, 0.5}}) {
    for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
      Problem p = make_problem(24, 20, pairing, 2, {0, 11, 300, 4096, 100000}, rng);
      RotarySpec spec = p.spec();
      spec.receptive_field = rf;
      const Frequencies star = rotary::compute_frequencies(spec);
      const RowMatrix<double> y = forward<double>(p, star);
      const std::vector<double> g_star =
          rotary::theta_gradient(spec, y, p.w, Positions(p.positions), p.heads);
      const rotary::ReceptiveFieldGradient g = rotary::receptive_field_gradient(spec, g_star);
      const std::vector<double> theta = rotary::default_frequencies(20, base).theta;

      const auto loss = [&](LD alpha, LD rho, std::int64_t only_pair = -1, LD theta_j = 0) {
        const LD bp = std::pow(static_cast<LD>(base), -rho);
        LD sum = 0;
        for (std::int64_t j = 0; j < p.pairs(); ++j) {
          const LD th = j == only_pair ? theta_j : static_cast<LD>(theta[static_cast<std::size_t>(j)]);
          if (only_pair < 0 || j == only_pair) sum += p.pair_loss(j, alpha * bp + (1 - alpha) * th);
        }
        return sum;
      };
      double wx = 0.0;
      for (std::int64_t j = 0; j < p.pairs(); ++j) wx += p.scale(j);  // M * sum |w||x|
      const LD bp = std::pow(static_cast<LD>(base), -static_cast<LD>(rf.rho));
      const LD M = p.max_position();

      // alpha: |dtheta*/dalpha| = |base^-rho - theta_j| <= 1.
      {
        LD dmax = 0;
        for (double t : theta) dmax = std::max(dmax, std::fabs(bp - t));
        const Step s = step_for(M * 1.5L);
        const LD fd = central([&](LD a) { return loss(a, rf.rho); }, rf.alpha, s.u / (M * dmax));
        const double rel = std::fabs(g.d_alpha - static_cast<double>(fd)) / (wx * static_cast<double>(dmax));
        EXPECT_LE(rel, s.tol) << "alpha " << rf.alpha << " rho " << rf.rho;
        std::printf("d/dalpha (alpha %.1f rho %.1f %s): rel err %.2e\n", rf.alpha, rf.rho,
                    std::string(rotary::to_string(pairing)).c_str(), rel);
      }
      // rho: |dtheta*/drho| = alpha ln(base) base^-rho for every pair.
      {
        const LD dth = rf.alpha * std::log(static_cast<LD>(base)) * bp;
        const Step s = step_for(M * 1.5L);
        const LD fd = central([&](LD r) { return loss(rf.alpha, r); }, rf.rho, s.u / (M * dth));
        const double rel = std::fabs(g.d_rho - static_cast<double>(fd)) / (wx * static_cast<double>(dth));
        EXPECT_LE(rel, s.tol) << "alpha " << rf.alpha << " rho " << rf.rho;
        std::printf("d/drho   (alpha %.1f rho %.1f %s): rel err %.2e\n", rf.alpha, rf.rho,
                    std::string(rotary::to_string(pairing)).c_str(), rel);
      }
      // theta_j before the variant: dtheta*_j/dtheta_j = 1 - alpha.
      for (std::int64_t j : {std::int64_t{0}, p.pairs() / 2, p.pairs() - 1}) {
        const LD tj = theta[static_cast<std::size_t>(j)];
        const Step s = step_for(M * 1.5L);
        const LD fd =
            central([&](LD v) { return loss(rf.alpha, rf.rho, j, v); }, tj, s.u / (M * (1 - rf.alpha)));
        EXPECT_LE(std::fabs(g.d_theta[static_cast<std::size_t>(j)] - static_cast<double>(fd)) /
                      (p.scale(j) * (1 - rf.alpha)),
                  s.tol)
            << "pair " << j;
      }
    }
  }
}

// The chain rule also applies to score gradients: d s / d alpha through score_gradient's d_theta.
TEST(ReceptiveFieldGradient, ThroughTheScore) {
  std::mt19937_64 rng(rotary_test::seed() + 7);
  RotarySpec spec(16, Pairing::interleaved, 10000.0);
  spec.receptive_field = ReceptiveField{0.25, 0.75};
  const Eigen::VectorXd q =
      Eigen::VectorXd::NullaryExpr(16, [&] { return std::uniform_real_distribution<double>(-1, 1)(rng); });
  const Eigen::VectorXd k =
      Eigen::VectorXd::NullaryExpr(16, [&] { return std::uniform_real_distribution<double>(-1, 1)(rng); });
  const std::int64_t m = 17;
  const std::int64_t n = 5000;
  const rotary::ScoreGradient sg = rotary::score_gradient(spec, q, m, k, n);
  const rotary::ReceptiveFieldGradient g = rotary::receptive_field_gradient(spec, sg.d_theta);
  const std::vector<double> theta = rotary::default_frequencies(16, 10000.0).theta;
  const auto score = [&](LD alpha, LD rho) {
    std::vector<LD> star(theta.size());
    for (std::size_t j = 0; j < theta.size(); ++j)
      star[j] = alpha * std::pow(10000.0L, -rho) + (1 - alpha) * static_cast<LD>(theta[j]);
    return score_ld(q, k, star, Pairing::interleaved, m, n, 1);
  };
  const LD delta = n - m;
  const Step s = step_for(delta * 1.5L);
  const LD fa = central([&](LD a) { return score(a, 0.75L); }, 0.25L, s.u / delta);
  const LD dth = 0.25L * std::log(10000.0L) * std::pow(10000.0L, -0.75L);
  const LD fr = central([&](LD r) { return score(0.25L, r); }, 0.75L, s.u / (delta * dth));
  const double scale = static_cast<double>(delta) * q.norm() * k.norm() * 8;  // sum_j |zq_j||zk_j| <= |q||k|
  EXPECT_LE(std::fabs(g.d_alpha - static_cast<double>(fa)) / scale, s.tol);
  EXPECT_LE(std::fabs(g.d_rho - static_cast<double>(fr)) / (scale * static_cast<double>(dth)), s.tol);
}

TEST(Gradients, ErrorsNameTheArgument) {
  using rotary_test::expect_error;
  const RotarySpec spec(8, Pairing::half_split);
  const RowMatrix<double> y = RowMatrix<double>::Zero(6, 8);
  const std::vector<std::int64_t> pos = {0, 1, 2};
  std::vector<double> grad(3);
  expect_error([&] { rotary::accumulate_theta_gradient(spec, y, y, Positions(pos), 2, grad); },
               {"grad has 3 entries", "4 are needed"});
  expect_error([&] { rotary::theta_gradient(spec, y, RowMatrix<double>::Zero(4, 8), Positions(pos), 2); },
               {"y has 6 rows but dy has 4"});
  expect_error([&] { rotary::theta_gradient(spec, y, y, Positions(pos), 4); },
               {"rows (6) must be a multiple of heads (4)"});
  expect_error([&] { rotary::theta_gradient(spec, y, y, Positions(pos), 0); },
               {"heads (0) must be positive"});
  expect_error([&] { rotary::theta_gradient(spec, y, y, Positions(pos), 3); },
               {"positions has 3 values for 2 tokens"});
  expect_error([&] { rotary::theta_gradient(spec, RowMatrix<double>::Zero(6, 6), y, Positions(pos), 2); },
               {"y has 6 and dy 8 columns; head_dim is 8"});
  expect_error([&] { rotary::theta_gradient_qk(spec, y, y, y, y, Positions::contiguous(0), 2, 1); },
               {"q has 3 tokens but k has 6"});
  expect_error([&] { rotary::receptive_field_gradient(spec, std::vector<double>(4)); },
               {"spec.receptive_field is not set"});
  expect_error(
      [&] {
        rotary::receptive_field_gradient({1.0, 0.1}, 10000.0, ReceptiveField{}, {1.0});
      },
      {"d_theta_star has 1 entries; theta has 2"});
  expect_error([&] { rotary::receptive_field_gradient({1.0}, -1.0, ReceptiveField{}, {1.0}); },
               {"base (-1) must be positive"});
  const Eigen::VectorXd v = Eigen::VectorXd::Zero(8);
  expect_error([&] { rotary::score_gradient(spec, Eigen::VectorXd::Zero(6), 0, v, 1); },
               {"q has 6 coordinates; head_dim is 8"});
  expect_error([&] { rotary::score_gradient(spec, v, -2, v, std::numeric_limits<std::int64_t>::max()); },
               {"overflows int64"});
  const rotary::StridedLayout l{2, 3, 8, 16};
  const rotary::StridedLayout bad{2, 2, 8, 16};
  std::vector<double> buf(64), g4(4);
  expect_error(
      [&] {
        rotary::accumulate_theta_gradient_strided(spec, buf.data(), l, buf.data(), bad, Positions(pos), g4);
      },
      {"y is 2 tokens x 3 heads but dy is 2 x 2"});
  expect_error(
      [&] {
        rotary::accumulate_theta_gradient_strided(spec, buf.data(), rotary::StridedLayout{2, 3, -8, 16},
                                                  buf.data(), rotary::StridedLayout{2, 3, -8, 16},
                                                  Positions(pos), g4);
      },
      {"y strides (token -8, head 16) must be >= 0"});
}

// Strided views are checked like apply_strided's: strides that put a row past PTRDIFF_MAX bytes are
// refused (the reads ran out of bounds), with grad untouched. Rows are only read, so they may overlap:
// dy broadcast over tokens (token stride 0) is accepted.
TEST(Gradients, StridedViewsSpanOneBuffer) {
  using rotary_test::expect_error;
  const RotarySpec spec(8, Pairing::half_split);
  constexpr std::ptrdiff_t kHuge = std::numeric_limits<std::ptrdiff_t>::max() / 2;
  const rotary::StridedLayout ok{3, 1, 8, 8};
  std::vector<float> buf(64, 0.5f);
  std::vector<double> grad(4, 1.0);
  expect_error(
      [&] {
        rotary::accumulate_theta_gradient_strided(spec, buf.data(), rotary::StridedLayout{3, 1, kHuge, 8}, buf.data(),
                                                  ok, Positions::contiguous(0), grad);
      },
      {"y spans more than PTRDIFF_MAX bytes", "3 tokens x token stride 4611686018427387903"});
  expect_error(
      [&] {
        rotary::accumulate_theta_gradient_strided(spec, buf.data(), rotary::StridedLayout{1, 3, 8, 8}, buf.data(),
                                                  rotary::StridedLayout{1, 3, 8, kHuge}, Positions::contiguous(0),
                                                  grad);
      },
      {"dy spans more than PTRDIFF_MAX bytes", "3 heads x head stride 4611686018427387903"});
  EXPECT_EQ(grad, std::vector<double>(4, 1.0));
  // one dy row for every token: the same gradient as the rows copied out
  std::vector<float> y(24);
  std::vector<float> dy(24);
  for (std::size_t i = 0; i < y.size(); ++i) {
    y[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    dy[i] = 0.05f * static_cast<float>(i % 8) + 0.1f;
  }
  std::vector<float> dy_copies(dy.begin(), dy.begin() + 8);
  for (int t = 1; t < 3; ++t) dy_copies.insert(dy_copies.end(), dy.begin(), dy.begin() + 8);
  std::vector<double> broadcast(4, 0.0);
  std::vector<double> copied(4, 0.0);
  const std::vector<std::int64_t> pos = {3, 5, 7};
  rotary::accumulate_theta_gradient_strided(spec, y.data(), ok, dy.data(), rotary::StridedLayout{3, 1, 0, 8},
                                            Positions(pos), broadcast);
  rotary::accumulate_theta_gradient_strided(spec, y.data(), ok, dy_copies.data(), ok, Positions(pos), copied);
  EXPECT_EQ(broadcast, copied);
}

}  // namespace
