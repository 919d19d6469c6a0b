// Analysis (analysis.hpp): the long-range decay bound against brute-force sums and its closed form, and the
// alpha/rho attention patterns against direct long double sums, the Hilbert-pair identity and the score
// computed with explicit rotation matrices.
//
// Long double references form the angle D*theta in 80-bit arithmetic: its error is about
// eps_L * |D theta| = 5.4e-20 * |D theta| rad (5e-14 at D = 1e6, theta = 1), so they are used for D <= 1e6
// with tolerances of 1e-12 relative to sum |h_j| (or to n for the bound); larger D only in the inequality
// checks, whose slack is far larger than that error.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <string>
#include <vector>

#include <rotary/analysis.hpp>

#include "support.hpp"

namespace {

using rotary::Pairing;
using rotary::ReceptiveField;
using rotary::RopeParameters;
using rotary::RotarySpec;
using rotary::ScalingInput;
using LD = long double;
using CLD = std::complex<LD>;

// (1/n) sum_{j=1..n} |S_j(D)| with S_j = sum_{i<j} e^{i D theta_i}, in long double.
LD bound_ld(const std::vector<double>& theta, std::int64_t delta) {
  CLD s = 0;
  LD total = 0;
  for (double t : theta) {
    s += std::polar(1.0L, static_cast<LD>(delta) * static_cast<LD>(t));
    total += std::abs(s);
  }
  return total / static_cast<LD>(theta.size());
}

CLD sum_ld(const std::vector<std::complex<double>>& h, const std::vector<LD>& theta, std::int64_t delta) {
  CLD s = 0;
  for (std::size_t j = 0; j < h.size(); ++j)
    s += CLD(h[j].real(), h[j].imag()) * std::polar(1.0L, static_cast<LD>(delta) * theta[j]);
  return s;
}

RopeParameters yarn_params() {  // Qwen-style: factor 4 over L0 32768, rope_theta 1e6
  RopeParameters p;
  p.rope_type = "yarn";
  p.rope_theta = 1e6;
  p.factor = 4.0;
  p.original_max_position_embeddings = 32768;
  return p;
}

RopeParameters llama3_params() {  // Llama-3.1
  RopeParameters p;
  p.rope_type = "llama3";
  p.rope_theta = 500000.0;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  return p;
}

ScalingInput input128(std::int64_t max_positions) {
  ScalingInput in;
  in.head_dim = 128;
  in.max_position_embeddings = max_positions;
  return in;
}

struct NamedTheta {
  std::string name;
  std::vector<double> theta;
};

std::vector<NamedTheta> frequency_sets() {
  std::vector<NamedTheta> v;
  v.push_back({"default 1e4", rotary::default_frequencies(128, 1e4).theta});
  v.push_back({"default 5e5", rotary::default_frequencies(128, 5e5).theta});
  v.push_back({"yarn", rotary::scaled_frequencies(yarn_params(), input128(131072)).theta});
  v.push_back({"llama3", rotary::scaled_frequencies(llama3_params(), input128(131072)).theta});
  RotarySpec rf(64, Pairing::half_split, 1e4);
  rf.receptive_field = ReceptiveField{0.1, 1.0};
  v.push_back({"alpha 0.1 rho 1", rotary::compute_frequencies(rf).theta});
  std::mt19937_64 rng(rotary_test::seed());
  v.push_back({"random", rotary_test::random_vector<double>(16, rng, 0.0, 1.0)});
  return v;
}

const std::vector<std::int64_t>& test_deltas() {
  static const std::vector<std::int64_t> d = {0, 1, 2, 3, 10, 100, 1000, 12345, 1000000, 2147483647};
  return d;
}

// |sum_j h_j e^{i D theta_j}| <= max_j |h_j - h_{j+1}| * n * decay_bound(D) (Abel summation), for random h
// of three kinds: iid in the unit disc, slowly varying (random walk, small steps: the bound is tight
// only when consecutive h_j differ little) and the ramp h_j = (n - j)/n (all steps 1/n; it attains the
// bound at D = 0: both sides are (n+1)/2). Also the coarser 2 max|h| n decay_bound. The slack 1e-9 covers
// the long double reference at D = 2^31 (angle error 1e-10).
TEST(DecayBound, BoundsEveryScore) {
  std::mt19937_64 rng(rotary_test::seed() + 1);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const NamedTheta& f : frequency_sets()) {
    const std::size_t n = f.theta.size();
    const std::vector<LD> th(f.theta.begin(), f.theta.end());
    double worst = 0.0;  // max |sum| / score_bound over all trials
    for (std::int64_t delta : test_deltas()) {
      const double b = rotary::decay_bound(f.theta, delta);
      for (int trial = 0; trial < 60; ++trial) {
        std::vector<std::complex<double>> h(n);
        const int kind = trial % 3;
        std::complex<double> walk(u(rng), u(rng));
        for (std::size_t j = 0; j < n; ++j) {
          if (kind == 0) {
            h[j] = {u(rng), u(rng)};
          } else if (kind == 1) {
            walk += std::complex<double>(u(rng), u(rng)) * 0.02;
            h[j] = walk;
          } else {
            h[j] = static_cast<double>(n - j) / static_cast<double>(n);
          }
        }
        double hmax = 0.0;
        for (const auto& z : h) hmax = std::max(hmax, std::abs(z));
        const double lhs = static_cast<double>(std::abs(sum_ld(h, th, delta)));
        const double bound = rotary::score_bound(h, f.theta, delta);
        EXPECT_LE(lhs, bound * (1 + 1e-9)) << f.name << " D " << delta << " kind " << kind;
        EXPECT_LE(lhs, 2 * hmax * static_cast<double>(n) * b * (1 + 1e-9)) << f.name << " D " << delta;
        worst = std::max(worst, lhs / bound);
      }
    }
    std::printf("decay bound %-16s max |score| / bound = %.3f\n", f.name.c_str(), worst);
    EXPECT_GT(worst, 1 - 1e-12) << "the ramp attains the bound at D = 0";
  }
}

// S_j(0) = j, so decay_bound(0) = (1/n) sum_{j=1..n} j = (n+1)/2 exactly; |S_j| <= j bounds it everywhere.
// The normalised reading "|score| <= max|h| * decay_bound" is false: h = 1 at D = 0 gives n > (n+1)/2.
TEST(DecayBound, ClosedFormAtZeroAndCeiling) {
  for (const NamedTheta& f : frequency_sets()) {
    const auto n = static_cast<double>(f.theta.size());
    EXPECT_EQ(rotary::decay_bound(f.theta, 0), (n + 1) / 2) << f.name;
    for (double b : rotary::decay_bound(f.theta, rotary::log_distances(1, 1000000, 200)))
      EXPECT_LE(b, (n + 1) / 2 * (1 + 1e-15)) << f.name;
    const std::vector<std::complex<double>> ones(f.theta.size(), 1.0);
    const double score =
        static_cast<double>(std::abs(sum_ld(ones, std::vector<LD>(f.theta.begin(), f.theta.end()), 0)));
    EXPECT_GT(score, rotary::decay_bound(f.theta, 0)) << "normalised bound is not a bound";
    EXPECT_LE(score, rotary::score_bound(ones, f.theta, 0));
  }
}

// Against the long double brute force (the code under test reduces angles exactly; the reference does not,
// hence D <= 1e6), for a theta vector, Frequencies, a spec with alpha/rho and per-pair factors, and the
// scaling rules through RopeParameters. Tolerance 1e-12 relative to n (each |S_j| <= j <= n).
TEST(DecayBound, MatchesBruteForceForEveryFrequencySource) {
  const std::vector<std::int64_t> deltas = rotary::log_distances(1, 1000000, 300);
  const auto check = [&](const std::vector<double>& got, const std::vector<double>& theta, const char* what) {
    ASSERT_EQ(got.size(), deltas.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < deltas.size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - static_cast<double>(bound_ld(theta, deltas[i]))));
    worst /= static_cast<double>(theta.size());
    EXPECT_LE(worst, 1e-12) << what;
    std::printf("decay bound vs long double (%s): max err / n = %.2e\n", what, worst);
  };
  const std::vector<double> base = rotary::default_frequencies(128, 1e4).theta;
  check(rotary::decay_bound(base, deltas), base, "theta vector");
  check(rotary::decay_bound(rotary::default_frequencies(128, 1e4), deltas), base, "Frequencies");

  RotarySpec spec(96, Pairing::interleaved, 5e5, 64);
  spec.receptive_field = ReceptiveField{0.2, 0.5};
  for (int j = 0; j < 32; ++j) spec.freq_factors.push_back(1.0 + 0.1 * j);
  check(rotary::decay_bound(spec, deltas), rotary::compute_frequencies(spec).theta,
        "spec alpha/rho + factors");

  for (const RopeParameters& p : {yarn_params(), llama3_params()}) {
    const ScalingInput in = input128(131072);
    check(rotary::decay_bound(p, in, deltas), rotary::scaled_frequencies(p, in).theta, p.rope_type.c_str());
  }
}

// Decay is not monotone pointwise (the bound oscillates), but its mean over each decade of D falls until
// every pair has wrapped (base 1e4, d = 128: theta_min = 1.2e-4, so up to D ~ 1e4), and a larger base
// decays later: on D in [1e3, 1e4) the mean is higher for base 1e6 than for 1e4.
TEST(DecayBound, DecaysOnAverage) {
  const auto decade_means = [](const std::vector<double>& theta) {
    std::vector<double> means;
    for (std::int64_t lo = 1; lo < 100000; lo *= 10) {
      const std::int64_t step = std::max<std::int64_t>(1, 9 * lo / 1000);
      const std::vector<double> b =
          rotary::decay_bound(theta, rotary::linear_distances(lo, 10 * lo - 1, step));
      double s = 0.0;
      for (double v : b) s += v;
      means.push_back(s / static_cast<double>(b.size()));
    }
    return means;
  };
  const std::vector<double> m4 = decade_means(rotary::default_frequencies(128, 1e4).theta);
  const std::vector<double> m6 = decade_means(rotary::default_frequencies(128, 1e6).theta);
  std::printf("decade means of the decay bound, base 1e4:");
  for (double v : m4) std::printf(" %.3f", v);
  std::printf("\ndecade means of the decay bound, base 1e6:");
  for (double v : m6) std::printf(" %.3f", v);
  std::printf("\n");
  for (std::size_t k = 0; k + 1 < 4; ++k) EXPECT_GT(m4[k], m4[k + 1]) << "decade " << k;
  for (std::size_t k = 0; k + 1 < m6.size(); ++k) EXPECT_GT(m6[k], m6[k + 1]) << "decade " << k;
  EXPECT_GT(m6[3], m4[3]);
}

// a*, a', b' against direct long double sums with theta'_j = (1 - alpha) theta_j rounded to double and
// theta*_j = phi + theta'_j formed in long double, for given h (random) and several alpha/rho, including a
// scaled (yarn) frequency set; then the identity a* = cos(D phi) a' - sin(D phi) b' on the library's
// outputs with cos/sin(D phi) from long double. Tolerance 1e-12 relative to sum |h_j|.
TEST(AttentionPattern, MatchesDirectSumsAndTheHilbertIdentity) {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const std::vector<std::int64_t> deltas = [] {
    std::vector<std::int64_t> d = rotary::linear_distances(-64, 300);
    for (std::int64_t v : rotary::log_distances(301, 1000000, 200)) d.push_back(v);
    return d;
  }();
  struct Variant {
    ReceptiveField rf;
    double base;
    std::vector<double> theta;
  };
  const std::vector<Variant> variants = {
      {{0.0, 1.0}, 1e4, rotary::default_frequencies(64, 1e4).theta},
      {{0.1, 0.0}, 1e4, rotary::default_frequencies(64, 1e4).theta},
      {{0.1, 1.0}, 1e4, rotary::default_frequencies(64, 1e4).theta},
      {{0.5, 0.0}, 1e4, rotary::default_frequencies(64, 1e4).theta},
      {{0.5, 1.0}, 1e4, rotary::default_frequencies(64, 1e4).theta},
      {{0.3, 0.7}, 1e6, rotary::scaled_frequencies(yarn_params(), input128(131072)).theta},
  };
  for (const Variant& v : variants) {
    std::vector<std::complex<double>> h(v.theta.size());
    double habs = 0.0;
    for (auto& z : h) {
      z = {u(rng), u(rng)};
      habs += std::abs(z);
    }
    const rotary::AttentionPattern p = rotary::attention_pattern(h, v.theta, v.rf, v.base, deltas);
    ASSERT_EQ(p.a_star.size(), deltas.size());
    EXPECT_EQ(p.phi, v.rf.alpha / std::pow(v.base, v.rf.rho));
    std::vector<LD> prime(v.theta.size());
    std::vector<LD> star(v.theta.size());
    for (std::size_t j = 0; j < v.theta.size(); ++j) {
      const double tp = (1.0 - v.rf.alpha) * v.theta[j];  // rounded to double, as documented
      EXPECT_EQ(p.theta_prime[j], tp);
      prime[j] = tp;
      star[j] = static_cast<LD>(p.phi) + static_cast<LD>(tp);
    }
    double err_direct = 0.0;
    double err_identity = 0.0;
    for (std::size_t i = 0; i < deltas.size(); ++i) {
      const CLD w = sum_ld(h, prime, deltas[i]);
      const LD a_star = sum_ld(h, star, deltas[i]).real();
      err_direct = std::max({err_direct, std::fabs(p.a_prime[i] - static_cast<double>(w.real())),
                             std::fabs(p.b_prime[i] - static_cast<double>(w.imag())),
                             std::fabs(p.a_star[i] - static_cast<double>(a_star))});
      const LD dphi = static_cast<LD>(deltas[i]) * static_cast<LD>(p.phi);
      const LD identity = std::cos(dphi) * p.a_prime[i] - std::sin(dphi) * p.b_prime[i];
      err_identity = std::max(err_identity, std::fabs(p.a_star[i] - static_cast<double>(identity)));
    }
    err_direct /= habs;
    err_identity /= habs;
    EXPECT_LE(err_direct, 1e-12) << "alpha " << v.rf.alpha << " rho " << v.rf.rho;
    EXPECT_LE(err_identity, 1e-12) << "alpha " << v.rf.alpha << " rho " << v.rf.rho;
    std::printf("pattern alpha %.1f rho %.1f base %.0e: vs long double %.2e, identity %.2e (of sum|h|)\n",
                v.rf.alpha, v.rf.rho, v.base, err_direct, err_identity);
  }
}

// The identity at distances a long double angle cannot resolve (to 2^40): cos/sin(D phi) from the exact
// reduction in turns (the library's detail/exact_angle.hpp, tested on its own in test_cache), a* from a
// separate reduction of D theta*_j. Same tolerance.
TEST(AttentionPattern, IdentityAtLargeDistances) {
  const std::vector<std::int64_t> deltas = {1LL << 31, (1LL << 31) + 12345, 1LL << 35, 999999999999LL,
                                            1LL << 40};
  RotarySpec spec(128, Pairing::half_split, 1e4);
  for (const ReceptiveField rf : {ReceptiveField{0.1, 0.0}, ReceptiveField{0.5, 1.0}}) {
    spec.receptive_field = rf;
    const rotary::AttentionPattern p = rotary::attention_pattern(spec, deltas);
    double worst = 0.0;
    for (std::size_t i = 0; i < deltas.size(); ++i) {
      double s = 0.0;
      double c = 0.0;
      rotary::detail::exact_sincos(deltas[i], rotary::detail::to_turns(p.phi), s, c);
      worst = std::max(worst, std::fabs(p.a_star[i] - (c * p.a_prime[i] - s * p.b_prime[i])));
    }
    EXPECT_LE(worst / 128.0, 1e-12);  // h_j = 2 for 64 pairs: sum |h| = 128
    std::printf("identity at D to 2^40, alpha %.1f rho %.1f: max err / sum|h| %.2e\n", rf.alpha, rf.rho,
                worst / 128);
  }
}

// h from q and k: a*(n - m) + q.k over the tail = <R_m q, R_n k> with explicit matrices built from the
// spec's theta*_j (rounded to double: differs from the exact sum by |D| ulp(theta*) / 2 rad, < 1e-13 for
// |D| <= 5000). Both pairings, partial rotary. 1e-12 relative to |q||k|.
TEST(AttentionPattern, IsTheAttentionScore) {
  std::mt19937_64 rng(rotary_test::seed() + 3);
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    RotarySpec spec(40, pairing, 1e4, 32);
    spec.receptive_field = ReceptiveField{0.2, 0.5};
    const std::vector<double> theta_star = rotary::compute_frequencies(spec).theta;
    const Eigen::VectorXd q =
        Eigen::Map<const Eigen::VectorXd>(rotary_test::random_vector<double>(40, rng).data(), 40);
    const Eigen::VectorXd k =
        Eigen::Map<const Eigen::VectorXd>(rotary_test::random_vector<double>(40, rng).data(), 40);
    const double tail = q.tail(8).dot(k.tail(8));
    const std::vector<std::pair<std::int64_t, std::int64_t>> mn = {
        {0, 0}, {7, 3}, {3, 7}, {100, 4000}, {5000, 2}};
    std::vector<std::int64_t> deltas;
    deltas.reserve(mn.size());
    for (const auto& [m, n] : mn) deltas.push_back(n - m);
    const rotary::AttentionPattern p = rotary::attention_pattern(spec, deltas, q, k);
    for (std::size_t i = 0; i < mn.size(); ++i) {
      const auto [m, n] = mn[i];
      const Eigen::VectorXd rq = rotary::reference::rotation_matrix(theta_star, 40, pairing, m) * q;
      const Eigen::VectorXd rk = rotary::reference::rotation_matrix(theta_star, 40, pairing, n) * k;
      EXPECT_LE(std::fabs(p.a_star[i] + tail - rq.dot(rk)), 1e-12 * q.norm() * k.norm())
          << rotary::to_string(pairing) << " m " << m << " n " << n;
    }
  }
}

// All-ones q = k: h_j = 2, so a*(0) = rotary_dim; without the variant a' = a* and b'(0) = 0. At alpha = 1
// every theta*_j is phi (= 1e4^-0.5 = 0.01 at rho = 0.5): a*(D) = rotary_dim * cos(D phi) in closed form.
TEST(AttentionPattern, AllOnes) {
  const std::vector<std::int64_t> deltas = rotary::linear_distances(0, 100);
  RotarySpec spec(64, Pairing::half_split, 1e4, 48);
  const rotary::AttentionPattern plain = rotary::attention_pattern(spec, deltas);
  EXPECT_EQ(plain.a_star[0], 48.0);
  EXPECT_EQ(plain.b_prime[0], 0.0);
  EXPECT_EQ(plain.phi, 0.0);
  for (std::size_t i = 0; i < deltas.size(); ++i) EXPECT_NEAR(plain.a_star[i], plain.a_prime[i], 1e-13);
  spec.receptive_field = ReceptiveField{1.0, 0.5};
  const rotary::AttentionPattern all = rotary::attention_pattern(spec, deltas);
  for (std::size_t i = 0; i < deltas.size(); ++i)
    EXPECT_NEAR(all.a_star[i], 48.0 * std::cos(static_cast<double>(deltas[i]) * 1e-2), 1e-12) << deltas[i];
}

TEST(Distances, Grids) {
  EXPECT_EQ(rotary::linear_distances(0, 10, 3), (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(rotary::linear_distances(-2, 2), (std::vector<std::int64_t>{-2, -1, 0, 1, 2}));
  const std::vector<std::int64_t> g = rotary::log_distances(1, 1000000, 600);
  EXPECT_EQ(g.front(), 1);
  EXPECT_EQ(g.back(), 1000000);
  EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
  EXPECT_EQ(std::adjacent_find(g.begin(), g.end()), g.end());
  EXPECT_GT(g.size(), 450u);  // duplicates only below D ~ 43, where neighbours (ratio 1.023) round together
  EXPECT_LE(g.size(), 600u);
}

TEST(Analysis, ErrorsNameTheArgument) {
  using rotary_test::expect_error;
  expect_error([] { rotary::decay_bound(std::vector<double>{}, 3); }, {"decay_bound: theta is empty"});
  expect_error(
      [] {
        rotary::decay_bound(std::vector<double>{1.0, NAN}, 3);
      },
      {"theta[1] (nan) must be finite"});
  expect_error([] { rotary::score_bound({1.0, 2.0}, {1.0}, 0); }, {"h has 2 entries; theta has 1"});
  expect_error([] { rotary::log_distances(0, 10, 5); }, {"first (0) must be >= 1"});
  expect_error([] { rotary::log_distances(5, 4, 5); }, {"last (4) must be >= first (5)"});
  expect_error([] { rotary::log_distances(1, 4, 1); }, {"count (1) must be >= 2"});
  expect_error([] { rotary::linear_distances(0, 4, 0); }, {"step (0) must be positive"});
  expect_error(
      [] {
        rotary::attention_pattern({1.0}, {1.0}, ReceptiveField{0.1, 1.0}, 0.0, {1});
      },
      {"base (0) must be positive"});
  expect_error(
      [] {
        rotary::attention_pattern({1.0}, {1.0}, ReceptiveField{NAN, 1.0}, 10.0, {1});
      },
      {"alpha (nan) must be finite"});
  expect_error(
      [] {
        rotary::attention_pattern({1.0, 1.0}, {1.0}, ReceptiveField{}, 10.0, {1});
      },
      {"h has 2 entries; theta has 1"});
  const Eigen::VectorXd v = Eigen::VectorXd::Ones(8);
  expect_error([&] { rotary::attention_pattern(RotarySpec(6), {1}, v, v); },
               {"q has 8 coordinates; head_dim is 6"});
  expect_error([&] { rotary::pair_products(v, Eigen::VectorXd::Ones(6), Pairing::half_split, 3); },
               {"q has 8 coordinates but k has 6"});
  RopeParameters bad = yarn_params();
  bad.factor = 0.5;
  expect_error([&] { rotary::decay_bound(bad, input128(4096), {1}); }, {"factor (0.5) must be >= 1"});
}

}  // namespace
