// rotary — ggml's ggml_rope_ext argument list (modes NORMAL and NEOX) as a rotary::Rope.
//
//   rotary::ggml::RopeExtParams p;                  // the arguments llama.cpp passes, same names
//   p.mode = rotary::ggml::Mode::neox; p.n_dims = 128; p.freq_base = 1e6;
//   auto rope = rotary::ggml::make_rope<float>(128, p, 32768);   // head_dim = ggml's ne0
//   rotary::apply(rope, x, positions, heads);
//
// ggml's semantics (ggml-cpu rope_f32 / ggml_rope_cache_init / rope_yarn, ggml.c
// ggml_rope_yarn_corr_dims), for pair i < n_dims/2 at position p:
//   theta_extrap = base^(-2i/n_dims) / freq_factors[i]          (freq_factors: ggml's src2, else 1)
//   theta_interp = freq_scale * theta_extrap
//   ext_factor == 0:  theta = theta_interp;  mscale = attn_factor
//   ext_factor != 0:  corr(beta) = n_dims * ln(n_ctx_orig / (2*pi*beta)) / (2 * ln base)
//                     low = max(0, floor(corr(beta_fast))), high = min(n_dims - 1, ceil(corr(beta_slow)))
//                     ramp = 1 - clamp((i - low) / max(0.001, high - low), 0, 1),  mix = ramp * ext_factor
//                     theta = theta_interp * (1 - mix) + theta_extrap * mix
//                     mscale = attn_factor * (1 + 0.1 * ln(1 / freq_scale))
//   (x0, x1) -> (x0*c - x1*s, x0*s + x1*c),  c = mscale*cos(p*theta), s = mscale*sin(p*theta)
//   NORMAL pairs (x[2i], x[2i+1]) (rotary's interleaved), NEOX (x[i], x[i + n_dims/2]) (half_split);
//   coordinates [n_dims, head_dim) pass through.
// So with ext_factor 1, pairs i <= low keep theta_extrap (high frequencies), pairs i >= high get
// theta_interp, and the band between blends them: rotary's "yarn" rule (scaling.hpp) with factor
// 1/freq_scale, original_max_position_embeddings n_ctx_orig and the same floor/ceil corr dims (its
// theta bit for bit when 1/freq_scale is a power of two). A fractional ext_factor scales the mix.
//
// What differs from ggml, on purpose:
//   * Exact: theta in double (base^(-2i/n_dims) in long double, not a float powf and a running float
//     product), corr dims in double, angles p*theta reduced exactly and cos/sin rounded once (ggml:
//     float(p)*float(theta) and cosf/sinf, wrong in the second digit near p = 1e6). Only at a corr
//     dim within float rounding of an integer can ggml's floorf/ceilf pick the other integer.
//   * The attention factor is the whole magnitude ggml applies: attn_factor times
//     (1 + 0.1 ln(1/freq_scale)) whenever ext_factor != 0 (llama.cpp's DeepSeek-V2/V3 path divides
//     its attn_factor by 1 + 0.1 ln s to cancel that term). It must come out positive.
//   * Refused (rotary::error) where ggml asserts, proceeds or degenerates: n_dims odd, <= 0 or >
//     head_dim; freq_base <= 0 or non-finite (or 1 with ext_factor != 0: corr divides by ln base);
//     freq_scale <= 0 or non-finite; ext_factor outside [0, 1]; attn_factor <= 0 or non-finite;
//     freq_factors not exactly n_dims/2 positive finite values (ggml reads the first n_dims/2 of a
//     longer tensor); and with ext_factor != 0: n_ctx_orig <= 0 or beta_slow <= 0, beta_fast <=
//     beta_slow, non-finite betas (ggml then clamps corr dims of +-inf to a step ramp; its own
//     test-backend-ops rope cases pass n_ctx_orig 0 with beta 1/1 and a fractional ext_factor).
//   * Modes other than NORMAL (0) and NEOX (2) are not this front end's: MROPE (8), VISION (24) and
//     IMROPE (40) rotate several position streams (rotary/multi_axis.hpp, MultiAxisRope); mode bit 0
//     is no longer supported by ggml either.
// Forward rotation only, as ggml_rope_ext; its _back variant is rotary's Direction::inverse.
#ifndef ROTARY_COMPAT_GGML_HPP
#define ROTARY_COMPAT_GGML_HPP

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "../config.hpp"
#include "../detail/format.hpp"
#include "../frequencies.hpp"
#include "../rope.hpp"
#include "../types.hpp"

namespace rotary::ggml {

// GGML_ROPE_TYPE_NORMAL and GGML_ROPE_TYPE_NEOX, with ggml's values.
enum class Mode : int { normal = 0, neox = 2 };

// The ggml_rope_ext arguments after the tensors, with llama.cpp's names and defaults (ggml's src2,
// the per-pair frequency factors, as a vector: empty = none).
struct RopeExtParams {
  Mode mode = Mode::normal;
  std::int64_t n_dims = 0;      // rotated dims (even, <= head_dim); the rest pass through
  std::int64_t n_ctx_orig = 0;  // training context, for YaRN's corr dims (used only if ext_factor != 0)
  double freq_base = 10000.0;
  double freq_scale = 1.0;   // 1/s: theta_interp = freq_scale * theta_extrap
  double ext_factor = 0.0;   // 0: no YaRN ramp; 1: YaRN (llama.cpp's default for yarn); in [0, 1]
  double attn_factor = 1.0;  // multiplies cos/sin (times 1 + 0.1 ln(1/freq_scale) if ext_factor != 0)
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // Empty, or n_dims/2 divisors of theta (ggml's src2: Llama 3's rope_freqs, Phi-3's LongRoPE factors).
  std::vector<double> freq_factors;
};

// YaRN's correction range, in pairs: theta_extrap for i <= low, theta_interp for i >= high.
struct CorrDims {
  double low = 0.0;
  double high = 0.0;
};

namespace detail {

// YaRN's magnitude term 1 + 0.1 ln(1/freq_scale), with ln(1/x) as -ln(x): no rounded reciprocal.
inline double yarn_magnitude(double freq_scale) {
  return rotary::detail::strict_add(1.0,
                                    rotary::detail::strict_mul(0.1, -rotary::detail::libm_log(freq_scale)));
}

}  // namespace detail

// ggml's int mode as a Mode; rotary::error for the multi-stream modes and unknown values.
inline Mode mode_from_ggml(int mode) {
  using rotary::detail::concat;
  switch (mode) {
    case 0:
      return Mode::normal;
    case 2:
      return Mode::neox;
    case 8:
    case 24:
    case 40:
      throw error(concat("ggml rope mode ", mode, " (",
                         mode == 8 ? "MROPE" : (mode == 24 ? "VISION" : "IMROPE"),
                         ") rotates several position streams: not this front end's (NORMAL 0, NEOX 2); "
                         "use rotary/multi_axis.hpp (MultiAxisRope)"));
    default:
      throw error(concat("ggml rope mode ", mode, " is unknown to this front end (NORMAL 0, NEOX 2)"));
  }
}

constexpr Pairing pairing(Mode m) noexcept {
  return m == Mode::normal ? Pairing::interleaved : Pairing::half_split;
}

// Throws rotary::error naming the first bad argument (the list at the top of this header).
inline void validate(std::int64_t head_dim, const RopeExtParams& p) {
  using rotary::detail::concat;
  using rotary::detail::finite;
  if (p.mode != Mode::normal && p.mode != Mode::neox)
    static_cast<void>(mode_from_ggml(static_cast<int>(p.mode)));
  if (head_dim <= 0) throw error(concat("ggml rope: head_dim (", head_dim, ") must be positive"));
  if (p.n_dims <= 0 || p.n_dims % 2 != 0 || p.n_dims > head_dim)
    throw error(
        concat("ggml rope: n_dims (", p.n_dims, ") must be even, > 0 and <= head_dim (", head_dim, ")"));
  if (!(p.freq_base > 0.0) || !finite(p.freq_base))
    throw error(concat("ggml rope: freq_base (", p.freq_base, ") must be positive and finite"));
  if (!(p.freq_scale > 0.0) || !finite(p.freq_scale))
    throw error(concat("ggml rope: freq_scale (", p.freq_scale, ") must be positive and finite"));
  if (!(p.ext_factor >= 0.0 && p.ext_factor <= 1.0))
    throw error(
        concat("ggml rope: ext_factor (", p.ext_factor, ") must be in [0, 1] (0: no YaRN ramp, 1: YaRN)"));
  if (!(p.attn_factor > 0.0) || !finite(p.attn_factor))
    throw error(
        concat("ggml rope: attn_factor (", p.attn_factor,
               ") must be positive and finite (it scales cos/sin: 0 zeroes every logit, < 0 flips them)"));
  const auto pairs = static_cast<std::size_t>(p.n_dims / 2);
  if (!p.freq_factors.empty() && p.freq_factors.size() != pairs)
    throw error(concat("ggml rope: freq_factors has ", p.freq_factors.size(), " entries; n_dims/2 = ", pairs,
                       " are needed"));
  for (std::size_t i = 0; i < p.freq_factors.size(); ++i)
    if (!(p.freq_factors[i] > 0.0) || !finite(p.freq_factors[i]))
      throw error(
          concat("ggml rope: freq_factors[", i, "] (", p.freq_factors[i], ") must be positive and finite"));
  if (p.ext_factor == 0.0) return;
  // YaRN's ramp and magnitude.
  if (p.n_ctx_orig <= 0)
    throw error(concat("ggml rope: n_ctx_orig (", p.n_ctx_orig, ") must be positive when ext_factor (",
                       p.ext_factor, ") != 0: YaRN's corr dims are ln(n_ctx_orig / (2 pi beta))"));
  if (p.freq_base == 1.0)
    throw error(
        "ggml rope: freq_base (1) must not be 1 when ext_factor != 0: YaRN's corr dims divide by "
        "ln(freq_base)");
  if (!finite(p.beta_fast) || !finite(p.beta_slow) || !(p.beta_slow > 0.0) || !(p.beta_fast > p.beta_slow))
    throw error(concat("ggml rope: beta_fast (", p.beta_fast, ") must be > beta_slow (", p.beta_slow,
                       ") > 0, both finite, when ext_factor != 0 (else the YaRN ramp is empty or inverted)"));
  const double magnitude = detail::yarn_magnitude(p.freq_scale);
  if (!(magnitude > 0.0))
    throw error(concat("ggml rope: freq_scale (", p.freq_scale,
                       ") gives a YaRN magnitude 1 + 0.1 ln(1/freq_scale) = ", magnitude,
                       " <= 0 (freq_scale must be < e^10 when ext_factor != 0)"));
}

// YaRN's corr dims of p (n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow), ggml's
// ggml_rope_yarn_corr_dims in double. Requires what validate() requires of them for ext_factor != 0.
inline CorrDims yarn_corr_dims(const RopeExtParams& p) {
  using rotary::detail::strict_div;
  using rotary::detail::strict_mul;
  const double pi = 3.14159265358979323846;
  const double d = static_cast<double>(p.n_dims);
  const auto corr = [&](double beta) {
    const double ln = rotary::detail::libm_log(
        strict_div(static_cast<double>(p.n_ctx_orig), strict_mul(strict_mul(beta, 2.0), pi)));
    return strict_div(strict_mul(d, ln), strict_mul(2.0, rotary::detail::libm_log(p.freq_base)));
  };
  return {std::max(0.0, std::floor(corr(p.beta_fast))), std::min(d - 1.0, std::ceil(corr(p.beta_slow)))};
}

// The spec of ggml_rope_ext(p) for rows of head_dim (ggml's ne0): pairing from the mode, rotary_dim
// n_dims, freq_factors as the spec's per-pair divisors, and spec.frequencies = theta before the
// divisors plus the attention factor (theta left empty, i.e. base^(-2i/n_dims), when freq_scale is 1
// and ext_factor 0).
inline RotarySpec spec(std::int64_t head_dim, const RopeExtParams& p) {
  using rotary::detail::strict_add;
  using rotary::detail::strict_div;
  using rotary::detail::strict_mul;
  using rotary::detail::strict_sub;
  validate(head_dim, p);
  RotarySpec s(head_dim, pairing(p.mode), p.freq_base, p.n_dims);
  s.freq_factors = p.freq_factors;
  s.frequencies.attention_factor = p.attn_factor;
  if (p.freq_scale == 1.0 && p.ext_factor == 0.0) return s;

  Frequencies f = default_frequencies(p.n_dims, p.freq_base);  // theta_extrap (without freq_factors)
  const bool yarn = p.ext_factor != 0.0;
  const CorrDims corr = yarn ? yarn_corr_dims(p) : CorrDims{};
  for (std::size_t i = 0; i < f.theta.size(); ++i) {
    const double extrap = f.theta[i];
    const double interp = strict_mul(p.freq_scale, extrap);
    if (!yarn) {
      f.theta[i] = interp;
      continue;
    }
    const double y = strict_div(strict_sub(static_cast<double>(i), corr.low),
                                std::max(0.001, strict_sub(corr.high, corr.low)));
    const double mix = strict_mul(strict_sub(1.0, std::clamp(y, 0.0, 1.0)), p.ext_factor);
    f.theta[i] = strict_add(strict_mul(interp, strict_sub(1.0, mix)), strict_mul(extrap, mix));
  }
  if (yarn) s.frequencies.attention_factor = strict_mul(p.attn_factor, detail::yarn_magnitude(p.freq_scale));
  f.attention_factor = s.frequencies.attention_factor;
  s.frequencies = std::move(f);
  s.validate();
  return s;
}

// ggml_rope_ext(p) as a Rope with a cos/sin table for positions [0, max_position).
template <class T>
Rope<T> make_rope(std::int64_t head_dim, const RopeExtParams& p, std::int64_t max_position) {
  return Rope<T>(spec(head_dim, p), max_position);
}

// The same, cache-free: cos/sin made per call, exact at any position (ggml's int32 range and beyond).
template <class T>
Rope<T> make_rope(std::int64_t head_dim, const RopeExtParams& p, OnTheFly tag) {
  return Rope<T>(spec(head_dim, p), tag);
}

}  // namespace rotary::ggml

#endif  // ROTARY_COMPAT_GGML_HPP
