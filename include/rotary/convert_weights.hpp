// rotary — checkpoint conventions: permute W_q / W_k rows (and biases) between the interleaved and
// half-split pairings, and a heuristic probe of which pairing a layer's weights were trained with.
//
// With P the permutation of reference::pairing_permutation (x_interleaved = P x_half_split) and
// R_interleaved = P R_half_split P^T, a half-split checkpoint W_h serves an interleaved runtime as
// W_i = P W_h (per head), and back as W_h = P^T W_i. Then
//     rope_interleaved(W_i x) == P rope_half_split(W_h x)      and      q.k scores are unchanged,
// so attention is identical. Pass-through rows (partial rotary, rows >= rotary_dim of each head) stay
// where they are. W_k under GQA/MQA has kv_heads * head_dim rows: call the same function with
// kv_heads. Biases are vectors of the same rows.
//
// The silent mismatch — a checkpoint loaded with the wrong pairing still runs and produces fluent-
// looking garbage — cannot be detected from RoPE alone: both pairings preserve relative position
// for any W (rotations are orthogonal). probe_convention() is therefore a HEURISTIC over the
// weights' trained structure (see its comment); treat its verdict as a warning sign, not a proof.
#ifndef ROTARY_CONVERT_WEIGHTS_HPP
#define ROTARY_CONVERT_WEIGHTS_HPP

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "types.hpp"

namespace rotary {

namespace detail {

// heads, head_dim and rotary_dim valid; returns the rows they make, heads x head_dim, refused where the
// product overflows int64 (wrapped, it could even match a matrix's rows: 0 for an empty one).
inline std::int64_t checked_geometry(std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim,
                                     const char* name) {
  if (heads < 1) throw error(concat(name, ": heads (", heads, ") must be >= 1"));
  if (head_dim < 1) throw error(concat(name, ": head_dim (", head_dim, ") must be >= 1"));
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    throw error(concat(name, ": rotary_dim (", rotary_dim, ") must be even, positive and <= head_dim (", head_dim,
                       ")"));
  if (head_dim > std::numeric_limits<std::int64_t>::max() / heads)
    throw error(concat(name, ": heads (", heads, ") x head_dim (", head_dim, ") overflows int64"));
  return heads * head_dim;
}

inline void check_rows(std::int64_t rows, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim,
                       const char* name) {
  const std::int64_t expected = checked_geometry(heads, head_dim, rotary_dim, name);
  if (rows != expected)
    throw error(concat(name, " has ", rows, " rows; heads (", heads, ") x head_dim (", head_dim, ") = ", expected));
}

}  // namespace detail

// Source row of each destination row: dst.row(i) = src.row(map[i]) converts `from` -> `to`.
inline std::vector<std::int64_t> pairing_row_map(Pairing from, Pairing to, std::int64_t heads, std::int64_t head_dim,
                                                 std::int64_t rotary_dim) {
  detail::check_pairing(from, "pairing_row_map: from");
  detail::check_pairing(to, "pairing_row_map: to");
  const std::int64_t rows = detail::checked_geometry(heads, head_dim, rotary_dim, "pairing_row_map");
  if (static_cast<std::uint64_t>(rows) > std::vector<std::int64_t>().max_size())
    throw error(detail::concat("pairing_row_map: ", rows, " rows (heads ", heads, " x head_dim ", head_dim,
                               ") are more than a vector can hold"));
  std::vector<std::int64_t> map(static_cast<std::size_t>(rows));
  const std::int64_t h = rotary_dim / 2;
  for (std::int64_t o = 0; o < rows; o += head_dim) {  // o: the head's first row (rows = heads x head_dim)
    for (std::int64_t k = 0; k < head_dim; ++k) map[static_cast<std::size_t>(o + k)] = o + k;
    if (from == to) continue;
    for (std::int64_t j = 0; j < h; ++j) {
      if (to == Pairing::interleaved) {  // dst 2j <- src j, dst 2j+1 <- src j+h
        map[static_cast<std::size_t>(o + 2 * j)] = o + j;
        map[static_cast<std::size_t>(o + 2 * j + 1)] = o + j + h;
      } else {  // dst j <- src 2j, dst j+h <- src 2j+1
        map[static_cast<std::size_t>(o + j)] = o + 2 * j;
        map[static_cast<std::size_t>(o + j + h)] = o + 2 * j + 1;
      }
    }
  }
  return map;
}

// W (rows = heads * head_dim; any column count, row- or column-major; a bias is a column vector)
// with its rows reordered from `from` to `to`. Returns a new plain matrix/vector of the same kind.
template <class Derived>
typename Derived::PlainObject convert_pairing(const Eigen::MatrixBase<Derived>& w, Pairing from, Pairing to,
                                              std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim) {
  detail::check_rows(w.rows(), heads, head_dim, rotary_dim, "weights");
  const std::vector<std::int64_t> map = pairing_row_map(from, to, heads, head_dim, rotary_dim);
  typename Derived::PlainObject out(w.rows(), w.cols());
  for (Eigen::Index i = 0; i < w.rows(); ++i) out.row(i) = w.row(static_cast<Eigen::Index>(map[static_cast<std::size_t>(i)]));
  return out;
}

template <class Derived>
typename Derived::PlainObject permute_rows_half_split_to_interleaved(const Eigen::MatrixBase<Derived>& w,
                                                                     std::int64_t heads, std::int64_t head_dim,
                                                                     std::int64_t rotary_dim) {
  return convert_pairing(w, Pairing::half_split, Pairing::interleaved, heads, head_dim, rotary_dim);
}

template <class Derived>
typename Derived::PlainObject permute_rows_interleaved_to_half_split(const Eigen::MatrixBase<Derived>& w,
                                                                     std::int64_t heads, std::int64_t head_dim,
                                                                     std::int64_t rotary_dim) {
  return convert_pairing(w, Pairing::interleaved, Pairing::half_split, heads, head_dim, rotary_dim);
}

// Verdict of probe_convention. Scores are >= 0; lower = the weights look more like that pairing.
struct ConventionReport {
  Pairing likely = Pairing::half_split;
  double score_interleaved = 0.0;
  double score_half_split = 0.0;
  double margin = 0.0;     // (worse - better) / worse, in [0, 1]
  bool confident = false;  // margin >= the min_margin asked for
  // True when the probe is confident the weights expect the other pairing than `p`.
  bool contradicts(Pairing p) const noexcept { return confident && likely != p; }
  std::string summary() const {
    return detail::concat("weights look ", to_string(likely), " (score interleaved ", score_interleaved,
                          ", half_split ", score_half_split, ", margin ", margin,
                          confident ? ")" : ", NOT confident)");
  }
};

namespace detail {

// Score of one matrix under one pairing hypothesis: mean |log u_j - log v_j| (the two rows of a pair
// carry equal energy) + mean |log e_{j+1} - log e_j| (pair energy varies smoothly with frequency),
// with row energies summed over heads.
template <class Derived>
double pairing_score(const Eigen::MatrixBase<Derived>& w, Pairing p, std::int64_t heads, std::int64_t head_dim,
                     std::int64_t rotary_dim) {
  const std::int64_t h = rotary_dim / 2;
  std::vector<double> u(static_cast<std::size_t>(h), 0.0);
  std::vector<double> v(static_cast<std::size_t>(h), 0.0);
  for (std::int64_t head = 0; head < heads; ++head) {
    for (std::int64_t j = 0; j < h; ++j) {
      const std::int64_t a = head * head_dim + (p == Pairing::interleaved ? 2 * j : j);
      const std::int64_t b = head * head_dim + (p == Pairing::interleaved ? 2 * j + 1 : j + h);
      u[static_cast<std::size_t>(j)] += static_cast<double>(w.row(a).template cast<double>().squaredNorm());
      v[static_cast<std::size_t>(j)] += static_cast<double>(w.row(b).template cast<double>().squaredNorm());
    }
  }
  constexpr double tiny = 1e-300;
  double balance = 0.0;
  double smooth = 0.0;
  for (std::size_t j = 0; j < u.size(); ++j) {
    balance += std::fabs(std::log(u[j] + tiny) - std::log(v[j] + tiny));
    if (j + 1 < u.size())
      smooth += std::fabs(std::log(u[j + 1] + v[j + 1] + tiny) - std::log(u[j] + v[j] + tiny));
  }
  return balance / static_cast<double>(h) + (h > 1 ? smooth / static_cast<double>(h - 1) : 0.0);
}

}  // namespace detail

// Which pairing do these W_q (q_heads * head_dim rows) and W_k (kv_heads * head_dim rows; 0 rows
// and kv_heads 0 to probe W_q alone) expect?
//
// Heuristic (the function does not depend on it being right, only the verdict does): RoPE makes
// the two coordinates of a pair interchangeable up to a rotation, so training leaves the two rows of
// a pair with about equal energy, and pair energy follows the pair's frequency smoothly (in trained
// LLMs low-frequency pairs carry more norm). Grouping rows into pairs the wrong way either pairs
// rows of distant frequencies (interleaved weights read as half-split: rows j, j + d/2 are pairs
// j/2 and j/2 + d/4 — unbalanced) or folds the spectrum (half-split weights read as interleaved:
// the pair energies run through the even pairs, jump back, run through them again — not smooth).
// The score per pairing is the mean log-imbalance within pairs plus the mean |log| step of pair
// energy across j, summed over W_q and W_k. Weights with no frequency trend and no within-pair
// balance (e.g. random, or a pairing-agnostic init) give a small margin: not confident.
template <class DQ, class DK>
ConventionReport probe_convention(const Eigen::MatrixBase<DQ>& wq, const Eigen::MatrixBase<DK>& wk,
                                  std::int64_t q_heads, std::int64_t kv_heads, std::int64_t head_dim,
                                  std::int64_t rotary_dim, double min_margin = 0.25) {
  detail::check_rows(wq.rows(), q_heads, head_dim, rotary_dim, "W_q");
  if (kv_heads != 0 || wk.rows() != 0) detail::check_rows(wk.rows(), kv_heads, head_dim, rotary_dim, "W_k");
  ConventionReport r;
  for (Pairing p : {Pairing::interleaved, Pairing::half_split}) {
    double s = detail::pairing_score(wq, p, q_heads, head_dim, rotary_dim);
    if (kv_heads != 0) s += detail::pairing_score(wk, p, kv_heads, head_dim, rotary_dim);
    (p == Pairing::interleaved ? r.score_interleaved : r.score_half_split) = s;
  }
  r.likely = r.score_interleaved < r.score_half_split ? Pairing::interleaved : Pairing::half_split;
  const double worse = std::max(r.score_interleaved, r.score_half_split);
  const double better = std::min(r.score_interleaved, r.score_half_split);
  r.margin = worse > 0.0 ? (worse - better) / worse : 0.0;
  r.confident = r.margin >= min_margin;
  return r;
}

}  // namespace rotary

#endif  // ROTARY_CONVERT_WEIGHTS_HPP
