// rotary — reference forms: the explicit block-diagonal rotation matrix and the complex form.
//
// Slow and obvious on purpose: the tests check every kernel against them, and users can check
// their own pipelines the same way. Angles here are formed in long double, (long double)m * theta
// (80-bit on x86: the angle is exact to ~1e-10 rad for |m| < 2^31; on platforms where long double
// is double, large positions lose accuracy exactly as a double-angle pipeline would).
#ifndef ROTARY_REFERENCE_HPP
#define ROTARY_REFERENCE_HPP

#include <Eigen/Core>
#include <cmath>
#include <complex>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "types.hpp"

namespace rotary::reference {

// Coordinates of pair j inside a head: (first, second).
inline std::int64_t pair_first(Pairing p, std::int64_t j, std::int64_t /*pairs*/) noexcept {
  return p == Pairing::interleaved ? 2 * j : j;
}
inline std::int64_t pair_second(Pairing p, std::int64_t j, std::int64_t pairs) noexcept {
  return p == Pairing::interleaved ? 2 * j + 1 : j + pairs;
}

// R built from given cos/sin values (e.g. a cache row): block [[c, -s], [s, c]] on each pair,
// identity on the pass-through coordinates [2*pairs, head_dim).
inline Eigen::MatrixXd rotation_matrix_from(const std::vector<double>& cos,
                                            const std::vector<double>& sin, std::int64_t head_dim,
                                            Pairing pairing) {
  const auto h = static_cast<std::int64_t>(cos.size());
  if (sin.size() != cos.size() || 2 * h > head_dim)
    throw error(detail::concat("rotation_matrix_from: ", cos.size(), " cos and ", sin.size(),
                               " sin values for head_dim ", head_dim));
  Eigen::MatrixXd r = Eigen::MatrixXd::Identity(head_dim, head_dim);
  for (std::int64_t j = 0; j < h; ++j) {
    const std::int64_t a = pair_first(pairing, j, h);
    const std::int64_t b = pair_second(pairing, j, h);
    const auto c = cos[static_cast<std::size_t>(j)];
    const auto s = sin[static_cast<std::size_t>(j)];
    r(a, a) = c;
    r(a, b) = -s;
    r(b, a) = s;
    r(b, b) = c;
  }
  return r;
}

// R^d_{Theta,m} for frequencies theta (one per pair) at position m, angles in long double.
inline Eigen::MatrixXd rotation_matrix(const std::vector<double>& theta, std::int64_t head_dim,
                                       Pairing pairing, std::int64_t m) {
  std::vector<double> c(theta.size());
  std::vector<double> s(theta.size());
  for (std::size_t j = 0; j < theta.size(); ++j) {
    const long double angle = static_cast<long double>(m) * static_cast<long double>(theta[j]);
    c[j] = static_cast<double>(detail::libm_cosl(angle));  // libm: flag-proof (detail/fp.hpp)
    s[j] = static_cast<double>(detail::libm_sinl(angle));
  }
  return rotation_matrix_from(c, s, head_dim, pairing);
}

// The permutation P with x_interleaved = P * x_half_split: half-split coordinate j goes to 2j and
// j + pairs goes to 2j+1; pass-through coordinates stay. Then R_interleaved = P R_half_split P^T,
// and checkpoint converters permute the rows of W_q, W_k with P.
inline Eigen::MatrixXd pairing_permutation(std::int64_t head_dim, std::int64_t rotary_dim) {
  if (rotary_dim % 2 != 0 || rotary_dim > head_dim || rotary_dim < 0)
    throw error(detail::concat("rotary_dim (", rotary_dim, ") must be even and <= head_dim (", head_dim, ")"));
  const std::int64_t h = rotary_dim / 2;
  Eigen::MatrixXd p = Eigen::MatrixXd::Zero(head_dim, head_dim);
  for (std::int64_t j = 0; j < h; ++j) {
    p(2 * j, j) = 1.0;
    p(2 * j + 1, j + h) = 1.0;
  }
  for (std::int64_t k = rotary_dim; k < head_dim; ++k) p(k, k) = 1.0;
  return p;
}

// The complex form: pair j is z_j = x_first + i x_second, rotated as z_j * e^{i m theta_j}
// (e^{-i m theta_j} for the inverse), in std::complex<long double>.
inline Eigen::VectorXd rotate_complex(const Eigen::VectorXd& x, const std::vector<double>& theta,
                                      Pairing pairing, std::int64_t m,
                                      Direction dir = Direction::forward) {
  const auto h = static_cast<std::int64_t>(theta.size());
  if (2 * h > x.size())
    throw error(detail::concat("rotate_complex: ", h, " pairs do not fit in ", x.size(), " coordinates"));
  Eigen::VectorXd y = x;
  const long double sign = dir == Direction::forward ? 1.0L : -1.0L;
  for (std::int64_t j = 0; j < h; ++j) {
    const std::int64_t a = pair_first(pairing, j, h);
    const std::int64_t b = pair_second(pairing, j, h);
    const long double angle = sign * static_cast<long double>(m) * static_cast<long double>(theta[static_cast<std::size_t>(j)]);
    const std::complex<long double> z(x(a), x(b));
    const std::complex<long double> w = z * std::complex<long double>(detail::libm_cosl(angle), detail::libm_sinl(angle));
    y(a) = static_cast<double>(w.real());
    y(b) = static_cast<double>(w.imag());
  }
  return y;
}

}  // namespace rotary::reference

#endif  // ROTARY_REFERENCE_HPP
