// rotary — the rotation frequencies theta_j, in double precision.
//
// Pipeline (each step optional, in this order):
//   theta_j = base^(-2j/d)                 j = 0 .. d/2-1, d = rotary_dim      (RoFormer)
//   theta_j <- scaling rule(theta_j)       context extension; produces an attention factor too
//   theta_j <- theta_j / c_j               per-pair frequency factors (ggml freq_factors)
//   theta_j <- alpha / base^rho + (1 - alpha) * theta_j                       (alpha/rho variant)
// Scaling rules (linear, NTK, YaRN, llama3, longrope, ...) plug in as functions that map the default
// Frequencies to scaled ones; they are not part of this header.
#ifndef ROTARY_FREQUENCIES_HPP
#define ROTARY_FREQUENCIES_HPP

#include <cmath>
#include <cstdint>
#include <optional>
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

// Everything that defines one RoPE: the head geometry, the pairing and the frequencies.
struct RotarySpec {
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;  // 0 means head_dim; must be even and <= head_dim
  double base = 10000.0;
  Pairing pairing = Pairing::half_split;
  std::optional<ReceptiveField> receptive_field;  // the alpha/rho variant, off by default
  std::vector<double> freq_factors;               // empty, or rotary_dim/2 divisors c_j > 0

  RotarySpec() = default;
  explicit RotarySpec(std::int64_t head_dim_, Pairing pairing_ = Pairing::half_split,
                      double base_ = 10000.0, std::int64_t rotary_dim_ = 0)
      : head_dim(head_dim_), rotary_dim(rotary_dim_), base(base_), pairing(pairing_) {}

  std::int64_t effective_rotary_dim() const noexcept { return rotary_dim == 0 ? head_dim : rotary_dim; }

  // Throws rotary::error naming the first bad field.
  void validate() const {
    using detail::concat;
    if (head_dim <= 0) throw error(concat("head_dim (", head_dim, ") must be positive"));
    const std::int64_t d = effective_rotary_dim();
    if (d < 0 || d % 2 != 0 || d > head_dim)
      throw error(concat("rotary_dim (", d, ") must be even, positive and <= head_dim (", head_dim, ")"));
    if (!(base > 0.0) || !detail::finite(base))
      throw error(concat("base (", base, ") must be positive and finite"));
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
  }
};

// theta_j for j < rotary_dim/2, and the factor by which cos and sin are scaled (1 unless a scaling
// rule such as YaRN or longrope says otherwise; logits then scale by its square).
struct Frequencies {
  std::vector<double> theta;
  double attention_factor = 1.0;

  std::int64_t rotary_dim() const noexcept { return 2 * static_cast<std::int64_t>(theta.size()); }

  void validate() const {
    using detail::concat;
    if (theta.empty()) throw error("frequencies: theta is empty (rotary_dim must be > 0)");
    for (std::size_t j = 0; j < theta.size(); ++j)
      if (!detail::finite(theta[j]))
        throw error(concat("theta[", j, "] (", theta[j], ") must be finite"));
    if (!(attention_factor > 0.0) || !detail::finite(attention_factor))
      throw error(concat("attention_factor (", attention_factor, ") must be positive and finite"));
  }
};

// theta_j = base^(-2j/d) = 1 / base^(2j/d), j = 0 .. d/2-1 (HF's inv_freq formula), rounded to double.
inline Frequencies default_frequencies(std::int64_t rotary_dim, double base) {
  using detail::concat;
  if (rotary_dim <= 0 || rotary_dim % 2 != 0)
    throw error(concat("rotary_dim (", rotary_dim, ") must be even and positive"));
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

// Applies the per-pair divisors and the alpha/rho variant of `spec` to already computed (possibly
// scaled) frequencies. Scaling rules call this after producing their theta.
inline Frequencies finish_frequencies(const RotarySpec& spec, Frequencies f) {
  spec.validate();
  if (f.rotary_dim() != spec.effective_rotary_dim())
    throw error(detail::concat("frequencies cover rotary_dim ", f.rotary_dim(), " but the spec says ",
                               spec.effective_rotary_dim()));
  for (std::size_t j = 0; j < spec.freq_factors.size(); ++j) f.theta[j] /= spec.freq_factors[j];
  if (spec.receptive_field) {
    const double phi = spec.receptive_field->alpha / std::pow(spec.base, spec.receptive_field->rho);
    const double keep = 1.0 - spec.receptive_field->alpha;
    for (double& t : f.theta) t = phi + keep * t;
  }
  f.validate();
  return f;
}

// The frequencies `spec` defines (no scaling rule).
inline Frequencies compute_frequencies(const RotarySpec& spec) {
  spec.validate();
  return finish_frequencies(spec, default_frequencies(spec.effective_rotary_dim(), spec.base));
}

}  // namespace rotary

#endif  // ROTARY_FREQUENCIES_HPP
