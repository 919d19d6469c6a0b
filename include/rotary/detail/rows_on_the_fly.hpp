// Cache-free mode: cos/sin rows computed per call for blocks of tokens, exact to the output
// precision. The first token of each block (and any token whose position is not its predecessor's
// plus one) is anchored with the exact reduction (exact_angle.hpp); the others advance by the
// rotation recurrence e^{i(m+1)theta} = e^{i m theta} e^{i theta} in double, whose drift over a block
// (< 32 steps, a few double ulps each) is ~1e-14: far below float's half ulp, so rows equal the
// cached ones except on near-ties (then within 1 float ulp).
#ifndef ROTARY_DETAIL_ROWS_ON_THE_FLY_HPP
#define ROTARY_DETAIL_ROWS_ON_THE_FLY_HPP

#include "guard.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../positions.hpp"
#include "exact_angle.hpp"

namespace rotary::detail {

template <class C>
class RowGenerator {
 public:
  // Tokens per block: the recurrence never runs longer than this before re-anchoring, and a block
  // of float rows for rotary_dim 128 (16 KiB) stays in L1.
  static constexpr std::int64_t kBlock = 32;

  RowGenerator() = default;
  RowGenerator(const std::vector<double>& theta, double scale) : scale_(scale) {
    check_exact_angle();
    turns_.reserve(theta.size());
    step_cos_.reserve(theta.size());
    step_sin_.reserve(theta.size());
    for (const double t : theta) {
      turns_.push_back(to_turns(t));
      double s = 0.0;
      double c = 0.0;
      exact_sincos(1, turns_.back(), s, c);
      step_cos_.push_back(c);
      step_sin_.push_back(s);
    }
  }

  std::int64_t pairs() const noexcept { return static_cast<std::int64_t>(turns_.size()); }

  // Rows of tokens [t0, t1) (t1 - t0 <= kBlock) into out (row stride 2*pairs(), the cache layout).
  // state: 2*pairs() doubles of scratch.
  void fill(const Positions& p, std::int64_t t0, std::int64_t t1, C* out, double* state) const noexcept {
    const std::int64_t h = pairs();
    double* c = state;
    double* s = state + h;
    std::int64_t prev = 0;
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t m = p[t];
      if (t == t0 || prev == std::numeric_limits<std::int64_t>::max() || m != prev + 1) {
        for (std::int64_t j = 0; j < h; ++j) anchor(j, m, c[j], s[j]);
      } else {
        advance_row(c, s);
      }
      store_row(c, s, out + (t - t0) * 2 * h);
      prev = m;
    }
  }

  // The pieces fill is made of, for drivers that pick per pair (multi-axis RoPE): (c, s) = (cos, sin)
  // of m * theta_j by the exact reduction; (c, s) advanced by one step of theta_j, in double; and the
  // row [c_0..c_{h-1}, s_0..s_{h-1}] scaled by the attention factor and rounded to C. One definition,
  // so every driver produces the same bits for the same sequence of anchors and steps.
  void anchor(std::int64_t j, std::int64_t m, double& c, double& s) const noexcept {
    exact_sincos(m, turns_[static_cast<std::size_t>(j)], s, c);
  }
  void advance(std::int64_t j, double& c, double& s) const noexcept {
    const double sc = step_cos_[static_cast<std::size_t>(j)];
    const double ss = step_sin_[static_cast<std::size_t>(j)];
    // Products through opaque(): -ffp-contract=fast must not fuse them (same bits in every build).
    const double nc = opaque(c * sc) - opaque(s * ss);
    const double ns = opaque(s * sc) + opaque(c * ss);
    c = nc;
    s = ns;
  }
  // advance() for every pair of a row, two pairs per vector where the compiler has vector types
  // (GCC and Clang on x86-64 and AArch64): the same products and sums, each rounded once (every
  // product through opaque(): no contraction), so the same bits as advance() pair by pair.
  void advance_row(double* c, double* s) const noexcept {
    const std::int64_t h = pairs();
    std::int64_t j = 0;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__))
    typedef double Pair __attribute__((vector_size(16)));  // GNU vector type: two doubles
    const auto load = [](const double* p) {
      Pair v;
      std::memcpy(&v, p, sizeof v);
      return v;
    };
    const auto opaque_pair = [](Pair v) {
#if defined(__x86_64__)
      __asm__("" : "+x"(v));
#else
      __asm__("" : "+w"(v));
#endif
      return v;
    };
    for (; j + 2 <= h; j += 2) {
      const Pair cj = load(c + j);
      const Pair sj = load(s + j);
      const Pair sc = load(step_cos_.data() + j);
      const Pair ss = load(step_sin_.data() + j);
      const Pair nc = opaque_pair(cj * sc) - opaque_pair(sj * ss);
      const Pair ns = opaque_pair(sj * sc) + opaque_pair(cj * ss);
      std::memcpy(c + j, &nc, sizeof nc);
      std::memcpy(s + j, &ns, sizeof ns);
    }
#endif
    for (; j < h; ++j) advance(j, c[j], s[j]);
  }
  void store_row(const double* c, const double* s, C* row) const noexcept {
    const std::int64_t h = pairs();
    for (std::int64_t j = 0; j < h; ++j) {
      row[j] = static_cast<C>(c[j] * scale_);
      row[h + j] = static_cast<C>(s[j] * scale_);
    }
  }

 private:
  std::vector<Turns> turns_;
  std::vector<double> step_cos_;
  std::vector<double> step_sin_;
  double scale_ = 1.0;
};

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_ROWS_ON_THE_FLY_HPP
