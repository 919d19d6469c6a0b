// rotary — the rotation frequencies theta_j, in double precision.
//
// Pipeline (each step optional, in this order):
//   theta_j = base^(-2j/d)                 j = 0 .. d/2-1, d = rotary_dim      (RoFormer)
//   theta_j <- scaling rule(theta_j)       context extension; produces an attention factor too
//   theta_j <- theta_j / c_j               per-pair frequency factors (ggml freq_factors)
//   theta_j <- alpha / base^rho + (1 - alpha) * theta_j                       (alpha/rho variant)
// Scaling rules (linear, NTK, YaRN, llama3, longrope, ...) plug in as functions that map the default
// Frequencies to scaled ones; they are not part of this header. Their result (or any frequencies of
// the caller's, e.g. multi-axis ones) goes into RotarySpec::frequencies, which replaces the first two
// steps, so the spec alone defines the rotation: compute_frequencies(spec) is the one place theta is
// formed, and a Rope, cache-free or not, refuses a table or theta that differs from it.
#ifndef ROTARY_FREQUENCIES_HPP
#define ROTARY_FREQUENCIES_HPP

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "types.hpp"

namespace rotary {

// The alpha/rho receptive-field variant: theta*_j = alpha / base^rho + (1 - alpha) * theta_j.
// With phi = alpha / base^rho every pair gains a common frequency phi, and the attention score
// becomes a*(D) = cos(D phi) a'(D) - sin(D phi) b'(D), where a' + i b' is the RoPE score with
// frequencies (1 - alpha) theta_j. alpha trades global against local attention.
struct ReceptiveField {
  double alpha = 0.0;
  double rho = 1.0;
};

// The largest |theta_j| rotary accepts, in radians per position. The exact angle reduction
// (detail/exact_angle.hpp) holds m * theta / (2 pi) to ~2^-106 relative: at |m| up to 2^63 that is
// ~2^-40 turns for |theta| <= 64, far below a float's rounding, while larger theta lose turns
// (and from ~1e290 overflow the reduction). Rotations at integer positions depend only on theta
// mod 2 pi, and every rule rotary implements gives |theta| <= 1 (alpha / base^rho aside), so a
// larger theta is refused rather than served inexactly: reduce it mod 2 pi.
inline constexpr double kMaxTheta = 64.0;

// The widest head (and so rotary_dim) a spec may name: 2^24 values. Real heads hold 64 to 576; a
// larger count is a mistake (a tensor's element count passed as head_dim), and its frequency table
// alone would need gigabytes or more than any vector can hold: refused as rotary::error up front
// rather than as std::bad_alloc or std::length_error from an allocation.
inline constexpr std::int64_t kMaxHeadDim = std::int64_t{1} << 24;

// theta_j for j < rotary_dim/2, and the factor by which cos and sin are scaled (1 unless a scaling
// rule such as YaRN or longrope says otherwise; logits then scale by its square).
struct Frequencies {
  std::vector<double> theta;
  double attention_factor = 1.0;

  std::int64_t rotary_dim() const noexcept { return 2 * static_cast<std::int64_t>(theta.size()); }

  void validate() const {
    using detail::concat;
    if (theta.empty()) throw error("frequencies: theta is empty (rotary_dim must be > 0)");
    for (std::size_t j = 0; j < theta.size(); ++j) {
      if (!detail::finite(theta[j]))
        throw error(concat("theta[", j, "] (", theta[j], ") must be finite"));
      if (!(std::fabs(theta[j]) <= kMaxTheta))
        throw error(concat("theta[", j, "] (", theta[j], ") exceeds kMaxTheta (", kMaxTheta,
                           " rad per position), where the exact angle reduction ends; rotations at integer "
                           "positions depend only on theta mod 2 pi: reduce it"));
    }
    if (!(attention_factor > 0.0) || !detail::finite(attention_factor))
      throw error(concat("attention_factor (", attention_factor, ") must be positive and finite"));
  }
};

// Everything that defines one RoPE: the head geometry, the pairing and the frequencies.
struct RotarySpec {
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;  // 0 means head_dim; must be even and <= head_dim
  double base = 10000.0;
  Pairing pairing = Pairing::half_split;
  std::optional<ReceptiveField> receptive_field;  // the alpha/rho variant, off by default
  std::vector<double> freq_factors;               // empty, or rotary_dim/2 divisors c_j > 0
  // theta_j and attention factor in place of base^(-2j/d) and 1: what a scaling rule produced
  // (resolve() sets them), or the caller's own (e.g. axis_frequencies). theta empty (the default)
  // means base^(-2j/d); otherwise it holds rotary_dim/2 values. freq_factors and the alpha/rho variant
  // still apply on top, so put the frequencies from *before* those here; base stays the base of
  // alpha/base^rho. Held by the spec so that nothing built from it (Rope, cache-free Rope, XPos,
  // analysis, gradients) can quietly fall back to the unscaled frequencies. (A plain member, not an
  // optional: GCC 12 -O2 warns maybe-uninitialized on destroying an optional holding a vector.)
  Frequencies frequencies;

  RotarySpec() = default;
  explicit RotarySpec(std::int64_t head_dim_, Pairing pairing_ = Pairing::half_split,
                      double base_ = 10000.0, std::int64_t rotary_dim_ = 0)
      : head_dim(head_dim_), rotary_dim(rotary_dim_), base(base_), pairing(pairing_) {}

  std::int64_t effective_rotary_dim() const noexcept { return rotary_dim == 0 ? head_dim : rotary_dim; }

  // Throws rotary::error naming the first bad field.
  void validate() const {
    using detail::concat;
    if (head_dim <= 0) throw error(concat("head_dim (", head_dim, ") must be positive"));
    if (head_dim > kMaxHeadDim)
      throw error(concat("head_dim (", head_dim, ") exceeds kMaxHeadDim (2^24 = ", kMaxHeadDim,
                         "): no attention head is that wide (an element count passed as head_dim?)"));
    // rotary_dim 0 stands for head_dim: name the field the caller actually set.
    if (rotary_dim == 0 && head_dim % 2 != 0)
      throw error(concat("head_dim (", head_dim,
                         ") is odd: a fully rotated head needs an even head_dim (pairs of coordinates); "
                         "set an even rotary_dim < head_dim to rotate only part of it"));
    const std::int64_t d = effective_rotary_dim();
    if (d < 0 || d % 2 != 0 || d > head_dim)
      throw error(concat("rotary_dim (", d, ") must be even, positive and <= head_dim (", head_dim, ")"));
    if (!(base > 0.0) || !detail::finite(base))
      throw error(concat("base (", base, ") must be positive and finite"));
    detail::check_pairing(pairing);
    if (!freq_factors.empty() && static_cast<std::int64_t>(freq_factors.size()) != d / 2)
      throw error(concat("freq_factors has ", freq_factors.size(), " entries; rotary_dim/2 = ", d / 2,
                         " are needed"));
    for (std::size_t j = 0; j < freq_factors.size(); ++j)
      if (!(freq_factors[j] > 0.0) || !detail::finite(freq_factors[j]))
        throw error(concat("freq_factors[", j, "] (", freq_factors[j], ") must be positive and finite"));
    if (receptive_field) {
      if (!detail::finite(receptive_field->alpha))
        throw error(concat("alpha (", receptive_field->alpha, ") must be finite"));
      if (!detail::finite(receptive_field->rho))
        throw error(concat("rho (", receptive_field->rho, ") must be finite"));
    }
    if (!frequencies.theta.empty()) {
      frequencies.validate();
      if (frequencies.rotary_dim() != d)
        throw error(concat("spec.frequencies has ", frequencies.theta.size(), " theta (rotary_dim ",
                           frequencies.rotary_dim(), ") but rotary_dim is ", d));
    }
    if (!(frequencies.attention_factor > 0.0) || !detail::finite(frequencies.attention_factor))
      throw error(concat("spec.frequencies.attention_factor (", frequencies.attention_factor,
                         ") must be positive and finite"));
  }
};

// theta_j = base^(-2j/d) = 1 / base^(2j/d), j = 0 .. d/2-1 (HF's inv_freq formula), rounded to double.
inline Frequencies default_frequencies(std::int64_t rotary_dim, double base) {
  using detail::concat;
  if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > kMaxHeadDim)
    throw error(concat("rotary_dim (", rotary_dim, ") must be even, positive and at most kMaxHeadDim (",
                       kMaxHeadDim, ")"));
  if (!(base > 0.0) || !detail::finite(base))
    throw error(concat("base (", base, ") must be positive and finite"));
  Frequencies f;
  f.theta.resize(static_cast<std::size_t>(rotary_dim / 2));
  // In long double: the exponent 2j/d is inexact in double, and base^e magnifies its rounding by
  // ln(base) (~9 ulp at base 1e4), so double pow would leave theta several ulps off. libm_powl:
  // the same bits under value-unsafe flags (detail/fp.hpp).
  for (std::int64_t j = 0; j < rotary_dim / 2; ++j) {
    const long double e = static_cast<long double>(2 * j) / static_cast<long double>(rotary_dim);
    f.theta[static_cast<std::size_t>(j)] =
        static_cast<double>(1.0L / detail::libm_powl(static_cast<long double>(base), e));
  }
  return f;
}

namespace detail {

// Bit equality: == cannot tell -0.0 from 0.0, and agreement here means "the same computation".
inline bool same_double_bits(double a, double b) noexcept {
  std::uint64_t x = 0;
  std::uint64_t y = 0;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}

}  // namespace detail

// Applies the per-pair divisors and the alpha/rho variant of `spec` to already computed (possibly
// scaled) frequencies. Scaling rules call this after producing their theta. A spec that carries its
// own theta accepts only those (compute_frequencies(spec) is the shorter way to say it).
inline Frequencies finish_frequencies(const RotarySpec& spec, Frequencies f) {
  spec.validate();
  if (f.rotary_dim() != spec.effective_rotary_dim())
    throw error(detail::concat("frequencies cover rotary_dim ", f.rotary_dim(), " but the spec says ",
                               spec.effective_rotary_dim()));
  if (!spec.frequencies.theta.empty()) {
    for (std::size_t j = 0; j < f.theta.size(); ++j)
      if (!detail::same_double_bits(f.theta[j], spec.frequencies.theta[j]))
        throw error(detail::concat("finish_frequencies: theta[", j, "] (", f.theta[j],
                                   ") differs from spec.frequencies (", spec.frequencies.theta[j], ")"));
    if (!detail::same_double_bits(f.attention_factor, spec.frequencies.attention_factor))
      throw error(detail::concat("finish_frequencies: attention_factor (", f.attention_factor,
                                 ") differs from spec.frequencies (", spec.frequencies.attention_factor, ")"));
  }
  for (std::size_t j = 0; j < spec.freq_factors.size(); ++j)
    f.theta[j] = detail::strict_div(f.theta[j], spec.freq_factors[j]);
  if (spec.receptive_field) {
    // strict_* and libm_pow (detail/fp.hpp): theta keeps its bits under value-unsafe flags.
    const double phi =
        detail::strict_div(spec.receptive_field->alpha, detail::libm_pow(spec.base, spec.receptive_field->rho));
    const double keep = detail::strict_sub(1.0, spec.receptive_field->alpha);
    for (double& t : f.theta) t = detail::strict_add(phi, detail::strict_mul(keep, t));
  }
  f.validate();
  return f;
}

// The frequencies `spec` defines: spec.frequencies (theta empty: base^(-2j/d)), then freq_factors and
// the alpha/rho variant.
inline Frequencies compute_frequencies(const RotarySpec& spec) {
  spec.validate();
  if (!spec.frequencies.theta.empty()) return finish_frequencies(spec, spec.frequencies);
  Frequencies f = default_frequencies(spec.effective_rotary_dim(), spec.base);
  f.attention_factor = spec.frequencies.attention_factor;
  return finish_frequencies(spec, std::move(f));
}

namespace detail {

// Throws unless `theta` and `attention_factor` (of a cache, or frequencies passed beside a spec) are
// bit for bit compute_frequencies(spec): a Rope's spec is its single source of truth, so a table built
// from other frequencies (unscaled, or scaled without the spec's freq_factors) cannot ride along.
inline void check_frequencies_match(const RotarySpec& spec, const std::vector<double>& theta,
                                    double attention_factor, const char* what) {
  const Frequencies want = compute_frequencies(spec);
  const char* fix =
      "; build it from compute_frequencies(spec), or put your frequencies (before freq_factors and "
      "alpha/rho) in spec.frequencies";
  if (theta.size() != want.theta.size())
    throw error(concat(what, " rotary_dim (", 2 * theta.size(), ") != spec rotary_dim (", want.rotary_dim(), ")"));
  for (std::size_t j = 0; j < theta.size(); ++j)
    if (!same_double_bits(theta[j], want.theta[j]))
      throw error(concat(what, " theta[", j, "] (", theta[j], ") differs from the spec's (", want.theta[j],
                         ")", fix));
  if (!same_double_bits(attention_factor, want.attention_factor))
    throw error(concat(what, " attention_factor (", attention_factor, ") differs from the spec's (",
                       want.attention_factor, ")", fix));
}

}  // namespace detail

}  // namespace rotary

#endif  // ROTARY_FREQUENCIES_HPP
