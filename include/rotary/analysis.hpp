// rotary — analysis of a frequency set: RoFormer's long-range decay bound and alpha/rho attention patterns.
//
//   decay_bound(theta, deltas)               RoFormer 3.4.3 relative upper bound (1/n) sum_j |S_j(D)|
//   decay_bound(freqs | spec | params+input, deltas)    the same for a spec, or a scaling rule's theta
//   score_bound(h, theta, D)                 the rigorous bound on |sum_j h_j e^{i D theta_j}|
//   attention_pattern(h, theta, {alpha, rho}, base, deltas)   a*(D), a'(D), b'(D) of the alpha/rho variant
//   attention_pattern(spec, deltas[, q, k])  q = k = all ones (RoFormer, the alpha/rho paper) or given
//   pair_products(q, k, pairing, pairs)      h_j = conj(zq_j) zk_j: the score is sum Re(h_j e^{i D theta_j})
//   linear_distances(first, last[, step]), log_distances(first, last, count)    grids of D for the above
//
// Decay. n = d/2 pairs, S_0 = 0, S_j(D) = sum_{i<j} e^{i D theta_i}. Abel summation (h_n = 0) gives
//   sum_{j<n} h_j e^{i D theta_j} = sum_{j<n} (h_j - h_{j+1}) S_{j+1}(D), hence
//   |sum_j h_j e^{i D theta_j}| <= max_j |h_j - h_{j+1}| * sum_{j=1..n} |S_j(D)|          (score_bound)
//                               =  max_j |h_j - h_{j+1}| * n * decay_bound(D)
//                               <= 2 max|h| * n * decay_bound(D).
// decay_bound(D) = (1/n) sum_{j=1..n} |S_j(D)| is the curve RoFormer plots (its Fig. 2): a bound only up
// to the factor n * max_j |h_j - h_{j+1}|. In particular |sum h e| <= max|h| * decay_bound is false
// (D = 0, h = 1: n against (n+1)/2). decay_bound(0) = (n+1)/2 and decay_bound(D) <= (n+1)/2 for every D.
//
// Attention patterns. For queries q at m and keys k at n, <R_m q, R_n k> = sum_j Re(h_j e^{i D theta*_j})
// (+ q.k over the pass-through tail, left out here), D = n - m, h_j = conj(zq_j) zk_j and
// z = x_first + i x_second. With the variant theta*_j = phi + theta'_j, phi = alpha / base^rho and
// theta'_j = (1 - alpha) theta_j:
//   a*(D) = Re sum_j h_j e^{i D theta*_j},   a'(D) + i b'(D) = sum_j h_j e^{i D theta'_j},
//   a*(D) = cos(D phi) a'(D) - sin(D phi) b'(D)      (a', b': a Hilbert-transform pair).
// phi and theta'_j are rounded to double as finish_frequencies() does (alpha / pow(base, rho) and
// (1 - alpha) * theta_j); theta*_j is then their exact sum, carried as a double-double in turns, so the
// identity holds to rounding at every D. (A cos/sin table rounds theta*_j to one double: its angles differ
// from these by at most |D| ulp(theta*_j) / 2, ~1e-10 rad at D = 1e6.)
//
// Angles: every D theta is reduced exactly (detail/exact_angle.hpp), for any int64 D; sums in double.
// Cost: one exact sincos per pair and distance: 1e6 distances x 64 pairs take on the order of a second.
// Every entry point is checked and throws rotary::error naming the bad argument.
#ifndef ROTARY_ANALYSIS_HPP
#define ROTARY_ANALYSIS_HPP

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <optional>
#include <vector>

#include "config.hpp"
#include "detail/exact_angle.hpp"
#include "detail/format.hpp"
#include "frequencies.hpp"
#include "scaling.hpp"
#include "types.hpp"

namespace rotary {

namespace detail {

inline void check_theta(const std::vector<double>& theta, const char* what) {
  if (theta.empty()) throw error(concat(what, ": theta is empty (rotary_dim must be > 0)"));
  for (std::size_t j = 0; j < theta.size(); ++j) {
    if (!detail::finite(theta[j]))
      throw error(concat(what, ": theta[", j, "] (", theta[j], ") must be finite"));
    if (!(std::fabs(theta[j]) <= kMaxTheta))
      throw error(concat(what, ": theta[", j, "] (", theta[j], ") exceeds kMaxTheta (", kMaxTheta,
                         "), where the exact angle reduction ends; reduce it mod 2 pi"));
  }
}

inline std::vector<Turns> analysis_turns(const std::vector<double>& theta) {
  std::vector<Turns> t(theta.size());
  for (std::size_t j = 0; j < theta.size(); ++j) t[j] = to_turns(theta[j]);
  return t;
}

// a + b as a renormalised double-double (|lo| <= ulp(hi)/2).
inline Turns add_turns(Turns a, Turns b) noexcept {
  double s = 0.0;
  double e = 0.0;
  two_sum(a.hi, b.hi, s, e);
  e += a.lo + b.lo;
  const double hi = s + e;
  return {hi, e - (hi - s)};
}

inline double decay_bound_at(const std::vector<Turns>& turns, std::int64_t delta) {
  double sr = 0.0;  // S_j
  double si = 0.0;
  double total = 0.0;
  for (const Turns& t : turns) {
    double s = 0.0;
    double c = 0.0;
    exact_sincos(delta, t, s, c);
    sr += c;
    si += s;
    total += std::hypot(sr, si);
  }
  return total / static_cast<double>(turns.size());
}

// sum_j h_j e^{i D f_j}.
inline std::complex<double> rotated_sum(const std::vector<std::complex<double>>& h,
                                        const std::vector<Turns>& f, std::int64_t delta) {
  double re = 0.0;
  double im = 0.0;
  for (std::size_t j = 0; j < f.size(); ++j) {
    double s = 0.0;
    double c = 0.0;
    exact_sincos(delta, f[j], s, c);
    re += h[j].real() * c - h[j].imag() * s;
    im += h[j].real() * s + h[j].imag() * c;
  }
  return {re, im};
}

}  // namespace detail

// ---- distance grids ----------------------------------------------------------------------------

// first, first + step, ... up to last (inclusive when reached); step > 0, first <= last.
inline std::vector<std::int64_t> linear_distances(std::int64_t first, std::int64_t last,
                                                  std::int64_t step = 1) {
  using detail::concat;
  if (step <= 0) throw error(concat("step (", step, ") must be positive"));
  if (last < first) throw error(concat("last (", last, ") must be >= first (", first, ")"));
  // In uint64 (last - first fits there for any int64 pair): the count, refused past a vector's size
  const std::uint64_t span = static_cast<std::uint64_t>(last) - static_cast<std::uint64_t>(first);
  const std::uint64_t steps = span / static_cast<std::uint64_t>(step);  // count - 1 (count may be 2^64)
  if (steps >= std::vector<std::int64_t>().max_size() / 2)
    throw error(concat("linear_distances [", first, ", ", last, "] step ", step, " has ", steps,
                       " + 1 values: more than a vector can hold"));
  const std::uint64_t count = steps + 1;
  std::vector<std::int64_t> d(static_cast<std::size_t>(count));
  for (std::uint64_t i = 0; i < count; ++i)  // first + i x step <= last: exact in int64
    d[static_cast<std::size_t>(i)] =
        static_cast<std::int64_t>(static_cast<std::uint64_t>(first) + i * static_cast<std::uint64_t>(step));
  return d;
}

// About `count` distances spaced evenly in log(D) from first to last (both included, 1 <= first <= last),
// rounded to integers with duplicates removed (so fewer than count near small D).
inline std::vector<std::int64_t> log_distances(std::int64_t first, std::int64_t last, std::int64_t count) {
  using detail::concat;
  if (first < 1) throw error(concat("first (", first, ") must be >= 1 for log spacing"));
  if (last < first) throw error(concat("last (", last, ") must be >= first (", first, ")"));
  if (count < 2) throw error(concat("count (", count, ") must be >= 2"));
  const long double l0 = std::log(static_cast<long double>(first));
  const long double l1 = std::log(static_cast<long double>(last));
  std::vector<std::int64_t> d;
  d.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const long double x =
        std::exp(l0 + (l1 - l0) * static_cast<long double>(i) / static_cast<long double>(count - 1));
    const auto v = std::clamp(static_cast<std::int64_t>(std::llround(x)), first, last);
    if (d.empty() || v > d.back()) d.push_back(v);
  }
  if (d.back() != last) d.push_back(last);
  return d;
}

// ---- (a) long-range decay -----------------------------------------------------------------------

inline double decay_bound(const std::vector<double>& theta, std::int64_t delta) {
  detail::check_theta(theta, "decay_bound");
  return detail::decay_bound_at(detail::analysis_turns(theta), delta);
}

inline std::vector<double> decay_bound(const std::vector<double>& theta,
                                       const std::vector<std::int64_t>& deltas) {
  detail::check_theta(theta, "decay_bound");
  const std::vector<detail::Turns> turns = detail::analysis_turns(theta);
  std::vector<double> b(deltas.size());
  for (std::size_t i = 0; i < deltas.size(); ++i) b[i] = detail::decay_bound_at(turns, deltas[i]);
  return b;
}

// The attention factor plays no part (the bound is relative).
inline std::vector<double> decay_bound(const Frequencies& f, const std::vector<std::int64_t>& deltas) {
  f.validate();
  return decay_bound(f.theta, deltas);
}

// theta*_j of the spec: per-pair factors and the alpha/rho variant included.
inline std::vector<double> decay_bound(const RotarySpec& spec, const std::vector<std::int64_t>& deltas) {
  return decay_bound(compute_frequencies(spec).theta, deltas);
}

// A scaling rule's frequencies (yarn, llama3, ...; scaling.hpp).
inline std::vector<double> decay_bound(const RopeParameters& params, const ScalingInput& input,
                                       const std::vector<std::int64_t>& deltas) {
  return decay_bound(scaled_frequencies(params, input).theta, deltas);
}

// max_j |h_j - h_{j+1}| (h_n = 0) times sum_{j=1..n} |S_j(D)|: bounds |sum_j h_j e^{i D theta_j}|.
inline double score_bound(const std::vector<std::complex<double>>& h, const std::vector<double>& theta,
                          std::int64_t delta) {
  detail::check_theta(theta, "score_bound");
  if (h.size() != theta.size())
    throw error(detail::concat("score_bound: h has ", h.size(), " entries; theta has ", theta.size()));
  double step = 0.0;
  for (std::size_t j = 0; j < h.size(); ++j)
    step = std::max(step, std::abs(h[j] - (j + 1 < h.size() ? h[j + 1] : std::complex<double>(0.0, 0.0))));
  return step * static_cast<double>(theta.size()) * decay_bound(theta, delta);
}

// ---- (b) attention patterns of the alpha/rho variant ------------------------------------------

struct AttentionPattern {
  std::vector<std::int64_t> deltas;  // D = n - m (key position minus query position)
  std::vector<double> a_star;        // Re sum_j h_j e^{i D theta*_j}: the score (rotated part)
  std::vector<double> a_prime;       // Re sum_j h_j e^{i D theta'_j}, theta'_j = (1 - alpha) theta_j
  std::vector<double> b_prime;       // Im of the same
  double phi = 0.0;                  // alpha / base^rho
  std::vector<double> theta_prime;   // theta'_j
};

// h_j = conj(zq_j) zk_j for pair j of q and k (z = x_first + i x_second under `pairing`, `pairs` pairs).
template <class DQ, class DK>
std::vector<std::complex<double>> pair_products(const Eigen::MatrixBase<DQ>& q,
                                                const Eigen::MatrixBase<DK>& k, Pairing pairing,
                                                std::int64_t pairs) {
  using detail::concat;
  detail::check_pairing(pairing, "pair_products");
  if (pairs <= 0) throw error(concat("pairs (", pairs, ") must be positive"));
  if (q.size() != k.size()) throw error(concat("q has ", q.size(), " coordinates but k has ", k.size()));
  if (pairs > q.size() / 2)  // (2 x pairs could overflow)
    throw error(concat("q and k have ", q.size(), " coordinates; ", pairs, " pairs need twice as many"));
  std::vector<std::complex<double>> h(static_cast<std::size_t>(pairs));
  for (std::int64_t j = 0; j < pairs; ++j) {
    const std::int64_t a = pairing == Pairing::interleaved ? 2 * j : j;
    const std::int64_t b = pairing == Pairing::interleaved ? 2 * j + 1 : j + pairs;
    const double qa = static_cast<double>(q.derived().coeff(a));
    const double qb = static_cast<double>(q.derived().coeff(b));
    const double ka = static_cast<double>(k.derived().coeff(a));
    const double kb = static_cast<double>(k.derived().coeff(b));
    h[static_cast<std::size_t>(j)] = {qa * ka + qb * kb, qa * kb - qb * ka};
  }
  return h;
}

// theta: the frequencies before the variant (default, scaled or learned); rf = {0, any}: plain RoPE.
inline AttentionPattern attention_pattern(const std::vector<std::complex<double>>& h,
                                          const std::vector<double>& theta, const ReceptiveField& rf,
                                          double base, const std::vector<std::int64_t>& deltas) {
  using detail::concat;
  detail::check_theta(theta, "attention_pattern");
  if (h.size() != theta.size())
    throw error(concat("attention_pattern: h has ", h.size(), " entries; theta has ", theta.size()));
  if (!(base > 0.0) || !detail::finite(base))
    throw error(concat("base (", base, ") must be positive and finite"));
  if (!detail::finite(rf.alpha)) throw error(concat("alpha (", rf.alpha, ") must be finite"));
  if (!detail::finite(rf.rho)) throw error(concat("rho (", rf.rho, ") must be finite"));
  AttentionPattern p;
  p.deltas = deltas;
  p.phi = rf.alpha / std::pow(base, rf.rho);  // as finish_frequencies()
  if (!detail::finite(p.phi)) throw error(concat("alpha / base^rho (", p.phi, ") must be finite"));
  const double keep = 1.0 - rf.alpha;
  p.theta_prime.resize(theta.size());
  for (std::size_t j = 0; j < theta.size(); ++j) p.theta_prime[j] = keep * theta[j];
  const std::vector<detail::Turns> prime = detail::analysis_turns(p.theta_prime);
  std::vector<detail::Turns> star(prime.size());
  const detail::Turns phi_turns = detail::to_turns(p.phi);
  for (std::size_t j = 0; j < prime.size(); ++j) star[j] = detail::add_turns(phi_turns, prime[j]);
  p.a_star.resize(deltas.size());
  p.a_prime.resize(deltas.size());
  p.b_prime.resize(deltas.size());
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    const std::complex<double> w = detail::rotated_sum(h, prime, deltas[i]);
    p.a_prime[i] = w.real();
    p.b_prime[i] = w.imag();
    p.a_star[i] = detail::rotated_sum(h, star, deltas[i]).real();
  }
  return p;
}

// q and k (head_dim coordinates) under the spec: its pairing, its frequencies without the variant
// (per-pair factors included) and its variant (none: alpha = 0).
template <class DQ, class DK>
AttentionPattern attention_pattern(const RotarySpec& spec, const std::vector<std::int64_t>& deltas,
                                   const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k) {
  spec.validate();
  if (q.size() != spec.head_dim)
    throw error(detail::concat("q has ", q.size(), " coordinates; head_dim is ", spec.head_dim));
  RotarySpec plain = spec;
  plain.receptive_field.reset();
  const std::vector<double> theta = compute_frequencies(plain).theta;
  const ReceptiveField rf = spec.receptive_field.value_or(ReceptiveField{0.0, 1.0});
  return attention_pattern(pair_products(q, k, spec.pairing, static_cast<std::int64_t>(theta.size())), theta,
                           rf, spec.base, deltas);
}

// q = k = all ones: h_j = 2 for every pair, a*(0) = d.
inline AttentionPattern attention_pattern(const RotarySpec& spec, const std::vector<std::int64_t>& deltas) {
  spec.validate();
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(spec.head_dim);
  return attention_pattern(spec, deltas, ones, ones);
}

}  // namespace rotary

#endif  // ROTARY_ANALYSIS_HPP
