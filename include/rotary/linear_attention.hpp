// rotary — RoPE with linear attention (RoFormer, Su et al. 2021, eq. 19).
//
// With non-negative feature maps phi (queries) and psi (keys), RoFormer rotates the features in the
// numerator only:
//   out_m = sum_n (R_m phi(q_m))^T (R_n psi(k_n)) v_n  /  (sum_n phi(q_m)^T psi(k_n) + eps)
// where R_p is the RoPE rotation of `rope` at position p. Because (R_m a)^T (R_n b) is bilinear, the
// sums factor through two running states (Katharopoulos et al. 2020):
//   S = sum_n (R_n psi(k_n)) v_n^T   (D x d_v)        z = sum_n psi(k_n)   (D)
//   out_m = (R_m phi(q_m))^T S / (phi(q_m)^T z + eps)
// Non-causal: n runs over all keys, S and z are built once: O((N_q + N_k) * D * d_v) time and
// O(D * d_v) state instead of the O(N_q * N_k * (D + d_v)) of the quadratic form. Causal: n <= m in
// row (token) order, not in position order (positions only enter the rotations); computed in chunks of
// 64 tokens: each chunk sees the state of all earlier chunks through S and z, and its own tokens
// through a masked 64 x 64 product, so the cost is O(N * D * d_v + N * 64 * (D + d_v)).
//
// Numerator and denominator. The denominator is not rotated: it is the plain linear-attention
// normaliser, positive for non-negative features. The numerator's weights
// phi(q_m)^T R_{n-m} psi(k_n) carry the relative position and can be negative (RoFormer notes this):
// the output is not a convex combination of the values, and its rows need not lie in their hull.
// The denominator approaches 0 when a query's features, or all keys' features, do (ReLU features
// that are all zero; ELU+1 features of very negative inputs): eps (default 1e-6, like the reference
// linear-attention code) is added to every denominator, so a zero denominator gives 0 / eps = 0 for a
// zero numerator and a large but finite value otherwise. eps = 0 gives the exact formula (and inf or
// NaN on a zero denominator).
//
// Feature maps. Any callable f with f(const RowMatrix<T>& x) -> an expression assignable to
// RowMatrix<T>, mapping each row (N x d) to features (N x D); D must equal rope.head_dim(), and
// rope's rotary_dim pairs are rotated (partial rotary: the rest pass through). Provided: EluPlusOne
// (elu(x) + 1, the default; strictly positive) and Relu (max(x, 0)). psi defaults to phi. The result
// is checked: every feature finite and >= 0.
//
// Precision. phi, psi and the rotations run in T (float or double) through rope's kernels; S, z, the
// products and the divisions are accumulated in double and rounded once to T.
#ifndef ROTARY_LINEAR_ATTENTION_HPP
#define ROTARY_LINEAR_ATTENTION_HPP

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "apply.hpp"
#include "config.hpp"
#include "detail/format.hpp"
#include "positions.hpp"
#include "rope.hpp"
#include "types.hpp"

namespace rotary {

// elu(x) + 1: x + 1 for x > 0, e^x otherwise. Strictly positive (e^x > 0 until it underflows).
struct EluPlusOne {
  template <class T>
  RowMatrix<T> operator()(const RowMatrix<T>& x) const {
    return x.unaryExpr([](T v) { return v > T(0) ? v + T(1) : std::exp(v); });
  }
};

// max(x, 0). Zero rows give zero denominators: see eps.
struct Relu {
  template <class T>
  RowMatrix<T> operator()(const RowMatrix<T>& x) const {
    return x.cwiseMax(T(0));
  }
};

// The default psi: the keys use the queries' feature map phi.
struct SameFeatureMap {};

struct LinearAttentionOptions {
  bool causal = false;  // query m sees keys n <= m (row order); needs as many queries as keys
  double eps = 1e-6;    // added to every denominator; >= 0 and finite
};

namespace detail {

template <class T, class Map>
RowMatrix<T> features(const Map& map, const RowMatrix<T>& x, std::int64_t head_dim, const char* name) {
  RowMatrix<T> f = map(x);
  if (f.rows() != x.rows() || f.cols() != head_dim)
    throw error(concat("feature map of ", name, " returned ", f.rows(), " x ", f.cols(), " for ", x.rows(),
                       " rows; ", x.rows(), " x head_dim (", head_dim, ") expected"));
  for (Eigen::Index r = 0; r < f.rows(); ++r)
    for (Eigen::Index c = 0; c < f.cols(); ++c) {
      const T v = f(r, c);
      if (!(v >= T(0)) || !detail::finite(v))
        throw error(concat("feature map of ", name, " gave ", v, " at row ", r, ", column ", c,
                           ": linear attention needs finite, non-negative features"));
    }
  return f;
}

inline void check_count(const Positions& p, Eigen::Index rows, const char* name) {
  if (!p.is_contiguous() && p.is_null() && p.count() > 0)
    throw error(concat(name, " is null but holds ", p.count(), " values"));
  if (!p.is_contiguous() && p.count() != static_cast<std::int64_t>(rows))
    throw error(concat(name, " has ", p.count(), " values for ", rows, " rows"));
}

}  // namespace detail

// Queries q (N_q x d) at q_positions attend to keys k (N_k x d) at k_positions with values v
// (N_k x d_v); returns N_q x d_v. Checked: shapes, position counts (and everything apply() checks
// about positions), eps, and the features (shape, finite, >= 0); throws rotary::error.
template <class T, class PhiQ = EluPlusOne, class PsiK = SameFeatureMap>
RowMatrix<T> rope_linear_attention(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> q,
                                   detail::identity_t<ConstRowsRef<T>> k,
                                   detail::identity_t<ConstRowsRef<T>> v, const Positions& q_positions,
                                   const Positions& k_positions, const LinearAttentionOptions& options = {},
                                   const PhiQ& phi = PhiQ{}, const PsiK& psi = PsiK{}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "rope_linear_attention computes in float or double");
  using detail::concat;
  using Md = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Index nq = q.rows();
  const Eigen::Index nk = k.rows();
  if (q.cols() != k.cols()) throw error(concat("q has ", q.cols(), " columns but k has ", k.cols()));
  if (v.rows() != nk) throw error(concat("v has ", v.rows(), " rows but k has ", nk));
  if (v.cols() < 1) throw error(concat("v has ", v.cols(), " columns; at least 1 is needed"));
  if (options.causal && nq != nk)
    throw error(concat("causal linear attention needs as many queries as keys (q has ", nq, " rows, k has ",
                       nk, ")"));
  if (!(options.eps >= 0.0) || !detail::finite(options.eps))
    throw error(concat("eps (", options.eps, ") must be >= 0 and finite"));
  detail::check_count(q_positions, nq, "q_positions");
  detail::check_count(k_positions, nk, "k_positions");

  // Features, then their rotations (the library's kernels; positions validated there).
  const RowMatrix<T> fq = detail::features<T>(phi, RowMatrix<T>(q), rope.head_dim(), "q");
  RowMatrix<T> fk;
  if constexpr (std::is_same_v<PsiK, SameFeatureMap>) {
    fk = detail::features<T>(phi, RowMatrix<T>(k), rope.head_dim(), "k");
  } else {
    fk = detail::features<T>(psi, RowMatrix<T>(k), rope.head_dim(), "k");
  }
  RowMatrix<T> rq = fq;
  RowMatrix<T> rk = fk;
  if (nq > 0) apply(rope, rq, q_positions, 1);
  if (nk > 0) apply(rope, rk, k_positions, 1);

  // References: no copy when T is double (cast<double>() is then the input itself); for float they
  // bind the converted temporaries.
  const Md& fqd = fq.template cast<double>();
  const Md& fkd = fk.template cast<double>();
  const Md& rqd = rq.template cast<double>();
  const Md& rkd = rk.template cast<double>();
  const Md& vd = v.template cast<double>();
  const double eps = options.eps;
  Md out(nq, v.cols());

  if (!options.causal) {
    const Md s = rkd.transpose() * vd;                          // D x d_v
    const Eigen::VectorXd z = fkd.colwise().sum().transpose();  // D
    out.noalias() = rqd * s;
    const Eigen::VectorXd den = (fqd * z).array() + eps;
    out.array().colwise() /= den.array();
    return out.template cast<T>();
  }

  constexpr Eigen::Index kChunk = 64;
  Md s = Md::Zero(fkd.cols(), vd.cols());
  Eigen::VectorXd z = Eigen::VectorXd::Zero(fkd.cols());
  for (Eigen::Index c0 = 0; c0 < nq; c0 += kChunk) {
    const Eigen::Index len = std::min(kChunk, nq - c0);
    const auto rq_c = rqd.middleRows(c0, len);
    const auto rk_c = rkd.middleRows(c0, len);
    const auto fq_c = fqd.middleRows(c0, len);
    const auto fk_c = fkd.middleRows(c0, len);
    const auto v_c = vd.middleRows(c0, len);
    // Earlier chunks through the state, this chunk's keys n <= m through lower-triangular weights.
    Md num_w = rq_c * rk_c.transpose();
    Md den_w = fq_c * fk_c.transpose();
    num_w.template triangularView<Eigen::StrictlyUpper>().setZero();
    den_w.template triangularView<Eigen::StrictlyUpper>().setZero();
    auto o = out.middleRows(c0, len);
    o.noalias() = rq_c * s;
    o.noalias() += num_w * v_c;
    const Eigen::VectorXd den = (fq_c * z + den_w.rowwise().sum()).array() + eps;
    o.array().colwise() /= den.array();
    s.noalias() += rk_c.transpose() * v_c;
    z += fk_c.colwise().sum().transpose();
  }
  return out.template cast<T>();
}

// Self-attention: queries and keys are the same tokens, at the same positions.
template <class T, class PhiQ = EluPlusOne, class PsiK = SameFeatureMap>
RowMatrix<T> rope_linear_attention(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> q,
                                   detail::identity_t<ConstRowsRef<T>> k,
                                   detail::identity_t<ConstRowsRef<T>> v, const Positions& positions,
                                   const LinearAttentionOptions& options = {}, const PhiQ& phi = PhiQ{},
                                   const PsiK& psi = PsiK{}) {
  if (q.rows() != k.rows())
    throw error(detail::concat("q has ", q.rows(), " rows but k has ", k.rows(),
                               " (one positions list serves both: pass q_positions and k_positions)"));
  return rope_linear_attention<T, PhiQ, PsiK>(rope, q, k, v, positions, positions, options, phi, psi);
}

}  // namespace rotary

#endif  // ROTARY_LINEAR_ATTENTION_HPP
