// rotary — gradients: learnable frequencies theta_j, the alpha/rho variant, attention scores, inputs.
//
//   theta_gradient(spec, y, dy, positions, heads)          dL/dtheta_j from the forward output y and dL/dy
//   accumulate_theta_gradient(spec, y, dy, positions, heads, grad)      grad += the same (q, k, layers, ...)
//   theta_gradient_qk(spec, q_out, dq, k_out, dk, positions, q_heads, k_heads)          q and k together
//   accumulate_theta_gradient_strided(spec, y, y_layout, dy, dy_layout, positions, grad)   raw buffers
//   input_gradient(rope, dy, dx, positions, heads)         dL/dx: the inverse rotation of dL/dy
//   score_gradient(freqs, pairing, q, m, k, n)             s = <R_m q, R_n k> and ds/dtheta_j
//   receptive_field_gradient(theta, base, {alpha, rho}, dL_dtheta_star)    dL/dalpha, dL/drho, dL/dtheta_j
//
// The math. Pair j of a head at position m maps (a, b) to
//   (y0, y1) = c * (a cos phi - b sin phi, a sin phi + b cos phi),   phi = m theta_j
// (c: an attention factor folded into cos/sin, else 1). d(y0, y1)/dphi = (-y1, y0), the rotation of y by
// 90 degrees, and dphi/dtheta_j = m, so for any scalar loss L with g = dL/dy on the pair
//   dL/dtheta_j = sum over tokens t of m_t * sum over heads of (g1 y0 - g0 y1).
// Only y and g enter (not x, theta or c), so the gradient comes straight from what a training step keeps.
// A forward pass run with Direction::inverse (phi = -m theta) flips the sign. Each head contributes
// in double; the head sum is multiplied by m_t (exact in double for |m| < 2^53) and added in double.
// Every pair gets its gradient, including pairs with theta_j = 0 (HF 'proportional').
//
// Scores. With z = x_first + i x_second per pair, <R_m q, R_n k> = sum_j Re(conj(zq_j) zk_j e^{i D theta_j})
// + q.k over the pass-through tail, D = n - m, so ds/dtheta_j = -D c^2 Im(conj(zq_j) zk_j e^{i D theta_j}).
// The angle D theta_j is reduced exactly (detail/exact_angle.hpp): right at any int64 distance.
//
// Alpha/rho. theta*_j = alpha base^-rho + (1 - alpha) theta_j, so with G_j = dL/dtheta*_j
//   dL/dalpha = sum_j G_j (base^-rho - theta_j),  dL/drho = -alpha ln(base) base^-rho sum_j G_j,
//   dL/dtheta_j = (1 - alpha) G_j   (theta_j: the frequencies before the variant, scaled or not).
//
// Every entry point here is checked: it validates its arguments (O(1), plus the position count) and throws
// rotary::error naming the bad argument. Positions may have any sign (no cache is involved).
#ifndef ROTARY_GRADIENTS_HPP
#define ROTARY_GRADIENTS_HPP

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

#include "apply.hpp"
#include "config.hpp"
#include "detail/driver/checks.hpp"
#include "detail/exact_angle.hpp"
#include "detail/format.hpp"
#include "frequencies.hpp"
#include "parallel.hpp"
#include "positions.hpp"
#include "rope.hpp"
#include "types.hpp"

namespace rotary {

// The direction whose rotation is the transpose of dir's: the backward pass of a forward rotation.
constexpr Direction opposite(Direction dir) noexcept {
  return dir == Direction::forward ? Direction::inverse : Direction::forward;
}

namespace detail {

template <class T>
double as_double(const T& v) noexcept {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));  // f16 / bf16
  }
}

inline std::int64_t checked_pairs(const RotarySpec& spec, const std::vector<double>& grad) {
  spec.validate();
  const std::int64_t pairs = spec.effective_rotary_dim() / 2;
  if (static_cast<std::int64_t>(grad.size()) != pairs)
    throw error(concat("grad has ", grad.size(), " entries; rotary_dim/2 = ", pairs, " are needed"));
  return pairs;
}

// Any int64 positions (negative ones too), but a contiguous run must not leave int64.
inline void check_grad_positions(const Positions& positions, std::int64_t tokens) {
  require(true, [&] { return check_position_array(positions, tokens, "positions"); });
  if (positions.is_contiguous() && tokens > 1 &&
      positions.start() > std::numeric_limits<std::int64_t>::max() - (tokens - 1))
    throw error(concat("positions start (", positions.start(), ") + ", tokens, " tokens overflows int64"));
}

// grad[j] += sign * sum_t m_t sum_h (g1 y0 - g0 y1); y(t, h, i) and g(t, h, i) read coordinate i of head
// row (t, h) as double.
template <class GetY, class GetG>
void theta_gradient_core(std::int64_t pairs, Pairing pairing, std::int64_t tokens, std::int64_t heads,
                         const Positions& positions, Direction dir, const GetY& y, const GetG& g,
                         double* grad) {
  const double sign = dir == Direction::forward ? 1.0 : -1.0;
  std::vector<double> token_sum(static_cast<std::size_t>(pairs));
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::fill(token_sum.begin(), token_sum.end(), 0.0);
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t j = 0; j < pairs; ++j) {
        const std::int64_t a = pairing == Pairing::interleaved ? 2 * j : j;
        const std::int64_t b = pairing == Pairing::interleaved ? 2 * j + 1 : j + pairs;
        token_sum[static_cast<std::size_t>(j)] += g(t, h, b) * y(t, h, a) - g(t, h, a) * y(t, h, b);
      }
    }
    const double m = sign * static_cast<double>(positions[t]);
    for (std::int64_t j = 0; j < pairs; ++j) grad[j] += m * token_sum[static_cast<std::size_t>(j)];
  }
}

template <class DY, class DG>
void accumulate_theta_gradient_eigen(const RotarySpec& spec, const Eigen::MatrixBase<DY>& y,
                                     const Eigen::MatrixBase<DG>& dy, const Positions& positions,
                                     std::int64_t heads, std::vector<double>& grad, Direction dir,
                                     const char* name) {
  const std::int64_t pairs = checked_pairs(spec, grad);
  if (heads <= 0) throw error(concat(name, "heads (", heads, ") must be positive"));
  if (y.cols() != spec.head_dim || dy.cols() != spec.head_dim)
    throw error(
        concat(name, "y has ", y.cols(), " and dy ", dy.cols(), " columns; head_dim is ", spec.head_dim));
  if (y.rows() != dy.rows()) throw error(concat(name, "y has ", y.rows(), " rows but dy has ", dy.rows()));
  if (y.rows() % heads != 0)
    throw error(concat(name, "rows (", y.rows(), ") must be a multiple of heads (", heads, ")"));
  const std::int64_t tokens = y.rows() / heads;
  check_grad_positions(positions, tokens);
  theta_gradient_core(
      pairs, spec.pairing, tokens, heads, positions, dir,
      [&y, heads](std::int64_t t, std::int64_t h, std::int64_t i) {
        return as_double(y.derived().coeff(t * heads + h, i));
      },
      [&dy, heads](std::int64_t t, std::int64_t h, std::int64_t i) {
        return as_double(dy.derived().coeff(t * heads + h, i));
      },
      grad.data());
}

}  // namespace detail

// ---- dL/dtheta from the forward output ----------------------------------------------------------
// y: the forward output (tokens*heads) x head_dim, head row (t, h) = row t*heads + h, any Eigen matrix or
// expression of float/double/f16/bf16; dy = dL/dy, same shape. grad (size rotary_dim/2) is added to.

template <class DY, class DG>
void accumulate_theta_gradient(const RotarySpec& spec, const Eigen::MatrixBase<DY>& y,
                               const Eigen::MatrixBase<DG>& dy, const Positions& positions,
                               std::int64_t heads, std::vector<double>& grad,
                               Direction dir = Direction::forward) {
  detail::accumulate_theta_gradient_eigen(spec, y, dy, positions, heads, grad, dir, "");
}

template <class DY, class DG>
std::vector<double> theta_gradient(const RotarySpec& spec, const Eigen::MatrixBase<DY>& y,
                                   const Eigen::MatrixBase<DG>& dy, const Positions& positions,
                                   std::int64_t heads, Direction dir = Direction::forward) {
  spec.validate();
  std::vector<double> grad(static_cast<std::size_t>(spec.effective_rotary_dim() / 2), 0.0);
  accumulate_theta_gradient(spec, y, dy, positions, heads, grad, dir);
  return grad;
}

// Queries and keys share theta: their contributions add. k_heads == 0: no key (k_out, dk ignored).
template <class DQ, class DGQ, class DK, class DGK>
std::vector<double> theta_gradient_qk(const RotarySpec& spec, const Eigen::MatrixBase<DQ>& q_out,
                                      const Eigen::MatrixBase<DGQ>& dq, const Eigen::MatrixBase<DK>& k_out,
                                      const Eigen::MatrixBase<DGK>& dk, const Positions& positions,
                                      std::int64_t q_heads, std::int64_t k_heads,
                                      Direction dir = Direction::forward) {
  spec.validate();
  std::vector<double> grad(static_cast<std::size_t>(spec.effective_rotary_dim() / 2), 0.0);
  detail::accumulate_theta_gradient_eigen(spec, q_out, dq, positions, q_heads, grad, dir, "q: ");
  if (k_heads != 0) {
    if (k_heads > 0 && q_out.rows() / q_heads != k_out.rows() / k_heads)
      throw error(
          detail::concat("q has ", q_out.rows() / q_heads, " tokens but k has ", k_out.rows() / k_heads));
    detail::accumulate_theta_gradient_eigen(spec, k_out, dk, positions, k_heads, grad, dir, "k: ");
  }
  return grad;
}

// Raw buffers: head row (t, h) at ptr + t*token_stride + h*head_stride, head_dim contiguous elements.
template <class T>
void accumulate_theta_gradient_strided(const RotarySpec& spec, const T* y, const StridedLayout& y_layout,
                                       const T* dy, const StridedLayout& dy_layout,
                                       const Positions& positions, std::vector<double>& grad,
                                       Direction dir = Direction::forward) {
  using detail::concat;
  const std::int64_t pairs = detail::checked_pairs(spec, grad);
  if (y_layout.tokens != dy_layout.tokens || y_layout.heads != dy_layout.heads)
    throw error(concat("y is ", y_layout.tokens, " tokens x ", y_layout.heads, " heads but dy is ",
                       dy_layout.tokens, " x ", dy_layout.heads));
  if (y_layout.tokens < 0 || y_layout.heads < 0)
    throw error(concat("tokens (", y_layout.tokens, ") and heads (", y_layout.heads, ") must be >= 0"));
  for (const StridedLayout* l : {&y_layout, &dy_layout})
    if (l->token_stride < 0 || l->head_stride < 0)
      throw error(concat(l == &y_layout ? "y" : "dy", " strides (token ", l->token_stride, ", head ",
                         l->head_stride, ") must be >= 0"));
  if (y_layout.tokens > 0 && y_layout.heads > 0 && (y == nullptr || dy == nullptr))
    throw error("y or dy is null");
  // Rows are only read, so they may overlap (dy broadcast over tokens with token stride 0), but every
  // row must lie within one buffer: past PTRDIFF_MAX bytes the offsets overflow (as apply_strided's
  // check_view refuses).
  for (const StridedLayout* l : {&y_layout, &dy_layout})
    if (l->tokens > 0 && l->heads > 0 &&
        !detail::span_fits({{l->tokens, l->token_stride}, {l->heads, l->head_stride}}, spec.head_dim, sizeof(T)))
      throw error(concat(l == &y_layout ? "y" : "dy", " spans more than PTRDIFF_MAX bytes (", l->tokens,
                         " tokens x token stride ", l->token_stride, ", ", l->heads, " heads x head stride ",
                         l->head_stride, ", head_dim ", spec.head_dim, "): no buffer is that large"));
  detail::check_grad_positions(positions, y_layout.tokens);
  detail::theta_gradient_core(
      pairs, spec.pairing, y_layout.tokens, y_layout.heads, positions, dir,
      [y, &y_layout](std::int64_t t, std::int64_t h, std::int64_t i) {
        return detail::as_double(y[t * y_layout.token_stride + h * y_layout.head_stride + i]);
      },
      [dy, &dy_layout](std::int64_t t, std::int64_t h, std::int64_t i) {
        return detail::as_double(dy[t * dy_layout.token_stride + h * dy_layout.head_stride + i]);
      },
      grad.data());
}

// ---- dL/dx ------------------------------------------------------------------------------------
// y = c R_m x has dL/dx = c R_m^T dL/dy = c R_{-m} dL/dy: the rotation in the opposite direction with the
// same table (its folded attention factor c included). forward_dir is the direction of the forward pass.
// Checked exactly like apply(); apply_qk(..., opposite(dir)) does q and k together.

template <class T>
void input_gradient(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> dy,
                    detail::identity_t<RowsRef<T>> dx, const Positions& positions, std::int64_t heads,
                    Direction forward_dir = Direction::forward, const ParallelFor& parallel = {}) {
  apply(rope, dy, dx, positions, heads, {opposite(forward_dir), parallel});
}

// In place: g holds dL/dy on entry and dL/dx on return.
template <class T>
void input_gradient(const Rope<T>& rope, detail::identity_t<RowsRef<T>> g, const Positions& positions,
                    std::int64_t heads, Direction forward_dir = Direction::forward,
                    const ParallelFor& parallel = {}) {
  apply(rope, g, positions, heads, {opposite(forward_dir), parallel});
}

// ---- attention scores -------------------------------------------------------------------------

struct ScoreGradient {
  double score = 0.0;           // <R_m q, R_n k>: c^2 * (rotated part) + q.k over the pass-through tail
  std::vector<double> d_theta;  // ds/dtheta_j
};

// q and k: head vectors (length head_dim >= f.rotary_dim(), any Eigen vector expression) at positions m
// and n. f.attention_factor is c (folded into both rotations); pass f with attention_factor 1 when the
// factor is applied elsewhere.
template <class DQ, class DK>
ScoreGradient score_gradient(const Frequencies& f, Pairing pairing, const Eigen::MatrixBase<DQ>& q,
                             std::int64_t m, const Eigen::MatrixBase<DK>& k, std::int64_t n) {
  using detail::concat;
  f.validate();
  detail::check_pairing(pairing, "score_gradient");
  const auto pairs = static_cast<std::int64_t>(f.theta.size());
  if (q.size() != k.size()) throw error(concat("q has ", q.size(), " coordinates but k has ", k.size()));
  if (q.size() < 2 * pairs)
    throw error(concat("q and k have ", q.size(), " coordinates; rotary_dim is ", 2 * pairs));
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  if ((m < 0 && n > kMax + m) || (m > 0 && n < kMin + m))
    throw error(concat("distance n - m overflows int64 (m = ", m, ", n = ", n, ")"));
  const std::int64_t delta = n - m;
  const double c2 = f.attention_factor * f.attention_factor;
  ScoreGradient r;
  r.d_theta.resize(f.theta.size());
  double rotated = 0.0;
  for (std::int64_t j = 0; j < pairs; ++j) {
    const std::int64_t a = pairing == Pairing::interleaved ? 2 * j : j;
    const std::int64_t b = pairing == Pairing::interleaved ? 2 * j + 1 : j + pairs;
    const double qa = detail::as_double(q.derived().coeff(a));
    const double qb = detail::as_double(q.derived().coeff(b));
    const double ka = detail::as_double(k.derived().coeff(a));
    const double kb = detail::as_double(k.derived().coeff(b));
    const double wr = qa * ka + qb * kb;  // conj(zq) zk
    const double wi = qa * kb - qb * ka;
    double s = 0.0;
    double c = 0.0;
    detail::exact_sincos(delta, detail::to_turns(f.theta[static_cast<std::size_t>(j)]), s, c);
    rotated += wr * c - wi * s;
    r.d_theta[static_cast<std::size_t>(j)] = -static_cast<double>(delta) * c2 * (wr * s + wi * c);
  }
  double tail = 0.0;
  for (Eigen::Index i = 2 * pairs; i < q.size(); ++i)
    tail += detail::as_double(q.derived().coeff(i)) * detail::as_double(k.derived().coeff(i));
  r.score = c2 * rotated + tail;
  return r;
}

// Frequencies from the spec (variant and per-pair factors included); q and k have head_dim coordinates.
template <class DQ, class DK>
ScoreGradient score_gradient(const RotarySpec& spec, const Eigen::MatrixBase<DQ>& q, std::int64_t m,
                             const Eigen::MatrixBase<DK>& k, std::int64_t n) {
  spec.validate();
  if (q.size() != spec.head_dim)
    throw error(detail::concat("q has ", q.size(), " coordinates; head_dim is ", spec.head_dim));
  return score_gradient(compute_frequencies(spec), spec.pairing, q, m, k, n);
}

// ---- the alpha/rho variant ----------------------------------------------------------------------

struct ReceptiveFieldGradient {
  double d_alpha = 0.0;
  double d_rho = 0.0;
  std::vector<double> d_theta;  // dL/dtheta_j of the frequencies before the variant: (1 - alpha) G_j
};

// theta: the frequencies before the variant (default, scaled, or learned); base: the base in base^-rho;
// d_theta_star: G_j = dL/dtheta*_j, e.g. from theta_gradient on outputs rotated with theta*.
inline ReceptiveFieldGradient receptive_field_gradient(const std::vector<double>& theta, double base,
                                                       const ReceptiveField& rf,
                                                       const std::vector<double>& d_theta_star) {
  using detail::concat;
  if (theta.empty()) throw error("receptive_field_gradient: theta is empty");
  if (d_theta_star.size() != theta.size())
    throw error(concat("d_theta_star has ", d_theta_star.size(), " entries; theta has ", theta.size()));
  if (!(base > 0.0) || !detail::finite(base))
    throw error(concat("base (", base, ") must be positive and finite"));
  if (!detail::finite(rf.alpha)) throw error(concat("alpha (", rf.alpha, ") must be finite"));
  if (!detail::finite(rf.rho)) throw error(concat("rho (", rf.rho, ") must be finite"));
  const long double log_base = std::log(static_cast<long double>(base));
  const long double base_pow = std::exp(-static_cast<long double>(rf.rho) * log_base);  // base^-rho
  long double d_alpha = 0.0L;
  long double g_sum = 0.0L;
  ReceptiveFieldGradient r;
  r.d_theta.resize(theta.size());
  for (std::size_t j = 0; j < theta.size(); ++j) {
    const long double g = d_theta_star[j];
    d_alpha += g * (base_pow - static_cast<long double>(theta[j]));
    g_sum += g;
    r.d_theta[j] = static_cast<double>((1.0L - static_cast<long double>(rf.alpha)) * g);
  }
  r.d_alpha = static_cast<double>(d_alpha);
  r.d_rho = static_cast<double>(-static_cast<long double>(rf.alpha) * log_base * base_pow * g_sum);
  // base^-rho beyond the range of a double (rho = -1e5), or gradients that overflow: refused, as
  // attention_pattern refuses that phi, rather than returned as inf / NaN
  if (!detail::finite(static_cast<double>(base_pow)) || !detail::finite(r.d_alpha) ||
      !detail::finite(r.d_rho))
    throw error(concat("receptive_field_gradient: base^-rho (", static_cast<double>(base_pow),
                       ") or the gradients (d_alpha ", r.d_alpha, ", d_rho ", r.d_rho, ") are not finite"));
  return r;
}

// The spec's variant (spec.receptive_field must be set) over the spec's frequencies without it.
inline ReceptiveFieldGradient receptive_field_gradient(const RotarySpec& spec,
                                                       const std::vector<double>& d_theta_star) {
  spec.validate();
  if (!spec.receptive_field)
    throw error("receptive_field_gradient: spec.receptive_field is not set (no alpha/rho to differentiate)");
  RotarySpec plain = spec;
  plain.receptive_field.reset();
  return receptive_field_gradient(compute_frequencies(plain).theta, spec.base, *spec.receptive_field,
                                  d_theta_star);
}

}  // namespace rotary

#endif  // ROTARY_GRADIENTS_HPP
