// rotary — frequency scaling rules (context extension) with HF transformers semantics.
//
//   Frequencies f = scaled_frequencies(params, input[, quirks]);   // theta_i (double) + attention factor
//   f = finish_frequencies(spec, f);        // then per-pair factors c_i and the alpha/rho variant compose
//   CosSinCache<float> cache(f, 0, n, AttentionFactor::fold);       // HF folds the factor into cos/sin
//
// Notation: d = rotary dim, b = rope_theta, s = factor, L = max_position_embeddings,
// L0 = original_max_position_embeddings, inv_i = b^(-2i/d) (i < d/2). Every rule follows
// src/transformers/modeling_rope_utils.py (the per-layer `rope_parameters` era) formula for formula,
// but in double/long double where HF works in float32 (so theta_i here is the exact value of HF's
// formula, not HF's float32 rounding of it):
//   default       theta_i = inv_i
//   linear        theta_i = inv_i / s
//   dynamic       n = max(seq_len, L) (seq_len absent: L); b' = b * (s*n/L - (s-1))^(d/(d-2)); theta_i = b'^(-2i/d)
//   ntk           fixed NTK-aware (not an HF rope_type; vLLM/ExLlama "NTK"): b' = b * s^(d/(d-2))
//   yarn          L0 defaults to L; s defaults to L/L0. corr(beta) = d*ln(L0/(2*pi*beta)) / (2*ln b);
//                 low = floor(corr(beta_fast)), high = ceil(corr(beta_slow)) (no rounding if truncate is
//                 false), clamped to [0, d-1]; ramp_i = clamp((i-low)/(high-low), 0, 1) (high += 0.001 if
//                 equal); theta_i = (inv_i/s)*ramp_i + inv_i*(1-ramp_i). Attention factor: attention_factor,
//                 else m(s,mscale)/m(s,mscale_all_dim) if both are non-zero, else m(s,1), with
//                 m(s,k) = 1 if s <= 1 else 1 + 0.1*k*ln s. beta_fast/beta_slow: 0 or absent -> 32 / 1 (HF `or`).
//   longrope      L0 defaults to L; theta_i = inv_i / f_i with f = long_factor when seq_len > L0, else
//                 short_factor; attention factor: attention_factor, else (s = factor, or L/L0 if absent)
//                 1 if s <= 1 else sqrt(1 + ln s / ln L0).
//   llama3        lambda_i = 2*pi/inv_i; lambda_lo = L0/low_freq_factor, lambda_hi = L0/high_freq_factor;
//                 lambda_i > lambda_lo: inv_i/s; lambda_i < lambda_hi: inv_i; otherwise (both bounds
//                 inclusive) sm = (L0/lambda_i - low)/(high - low), theta_i = (1-sm)*inv_i/s + sm*inv_i.
//   proportional  (Gemma) over the whole head: k = floor(partial_rotary_factor*head_dim/2) pairs get
//                 theta_i = b^(-2i/head_dim), the other head_dim/2 - k pairs 0 (they pass through); all / s
//                 (s defaults to 1). rotary_dim must be head_dim.
//
// seq_len is the current sequence length as HF's dynamic_rope_update sees it: max(position_ids) + 1.
// HF's dynamic cache only grows (it recomputes when seq_len exceeds the largest length seen, and resets
// once seq_len falls back to <= L): to mirror it exactly, pass the largest length seen since the reset.
//
// Errors (rotary::error) where HF only logs a warning — and why:
//   * factor < 1 for linear/dynamic/ntk/yarn/llama3/longrope (HF: "must be a float >= 1"): every
//     published checkpoint satisfies it, and a value below 1 is in practice a reciprocal typo (0.25 for 4)
//     that silently shrinks the usable context instead of extending it.
//   * attention_factor <= 0 (HF: "< 0" warns): 0 zeroes every logit, negative flips them.
//   * beta_fast < beta_slow (HF warns): the YaRN ramp inverts and the rule no longer interpolates.
//   * llama3 high_freq_factor < low_freq_factor (HF warns): the smooth band is inverted (a swapped
//     pair). Equal factors (Llama 4: 1 and 1) are accepted: the band is empty, wavelengths above
//     L0/low_freq_factor are divided by factor and the rest kept (HF's torch.where gives the same; its
//     smooth factor would be 0/0 only for a wavelength exactly L0/low_freq_factor, which we keep).
//   * longrope short/long_factor of the wrong length (HF warns, torch then fails or broadcasts a
//     length-1 list): the rotation would silently use the wrong per-pair factor.
//   * odd rotary_dim (HF raises only for a fully rotated odd head_dim > 4; an odd partial dim it rounds
//     up to ceil(d/2) pairs with an odd d in the exponent): rotary pairs coordinates, an odd d has no
//     pairing; round the partial dim yourself if you really mean HF's convention.
//   * llama3 without original_max_position_embeddings (HF fills it with L and then warns that L0 >= L):
//     the band edges are meaningless without the pre-training length.
// Kept permissive (as HF): llama3 L0 >= L; yarn factor != L/L0 (the explicit factor is used);
// proportional without partial_rotary_factor (= 1: linear scaling over the whole head); keys a rule
// does not use are ignored (the config front end reports unknown keys).
//
// Engine quirks (EngineQuirks; all off = HF):
//   * vllm_dynamic_fixed_table: vLLM's "dynamic" computes one table at n = L*s (b' = b*(s^2-s+1)^(d/(d-2)))
//     and never changes it; HF recomputes at the current length (n = max(seq_len, L)).
//   * ggml_yarn_magnitude: the attention factor is 1 + 0.1*ln s, the term ggml's rope multiplies into
//     cos/sin whenever ext_factor != 0 (HF's attention_factor, mscale/mscale_all_dim are not consulted).
//     ggml multiplies it by its attn_factor argument, which llama.cpp sets per model (1 by default;
//     DeepSeek-V2/V3 divide it by 1 + 0.1*ln s to cancel the term and put their mscale into the KQ
//     scale), so this reproduces attn_factor = 1 and ext_factor = 1 only; rotary/compat/ggml.hpp
//     takes ggml_rope_ext's whole argument list.
//   * vllm_longrope_always_long: vLLM's longrope uses the long factors for the whole run (also for
//     sequences <= L0); HF switches at seq_len > L0 (and keys cached before the switch were rotated
//     with the short factors — see rerotate.hpp to convert them).
//   * vllm_minimax_rotary_dim (read by hf_config.hpp's resolve, not by the rules here): MiniMax-Text-01
//     (model_type "minimax") rotates the config's rotary_dim (64 of 128 in MiniMax's own config) in
//     vLLM; transformers' MiniMaxRotaryEmbedding rotates the whole head_dim and reads neither
//     rotary_dim nor partial_rotary_factor.
#ifndef ROTARY_SCALING_HPP
#define ROTARY_SCALING_HPP

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "frequencies.hpp"
#include "types.hpp"

namespace rotary {

// HF rope_scaling / rope_parameters for one layer type, as parsed from config.json.
struct RopeParameters {
  std::string rope_type = "default";  // default|linear|dynamic|yarn|longrope|llama3|proportional, plus "ntk" = fixed NTK-aware
  double rope_theta = 10000.0;
  std::optional<double> factor;
  std::optional<std::int64_t> original_max_position_embeddings;
  std::optional<double> attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim;
  std::optional<bool> truncate;
  std::vector<double> short_factor, long_factor;
  std::optional<double> low_freq_factor, high_freq_factor;
  std::optional<double> partial_rotary_factor;  // 'proportional' (Gemma): fraction of head_dim/2 pairs with nonzero frequency
  // M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): pairs per position stream; not a rule of its own (HF
  // treats {"type": "mrope"} as default RoPE), resolve() reports them. Ignored by scaled_frequencies.
  std::vector<std::int64_t> mrope_section;
  std::optional<bool> mrope_interleaved;  // Qwen3-VL: sections interleave pair by pair
  // Ministral 3: the query scaling after RoPE (QueryScale, hf_keys.hpp); not a frequency rule, ignored here.
  std::optional<double> llama_4_scaling_beta;
};

struct ScalingInput {
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;                 // pairs rotated = rotary_dim/2; 0 means head_dim
  std::int64_t max_position_embeddings = 0;    // L
  std::optional<std::int64_t> seq_len;         // current sequence length seen by dynamic / longrope
};

struct EngineQuirks {  // reproduce other engines on purpose; all off = HF
  bool vllm_dynamic_fixed_table = false;   // dynamic NTK computed once at L*s
  bool ggml_yarn_magnitude = false;        // yarn attention factor 1 + 0.1 ln s (ggml with attn_factor 1; see above)
  bool vllm_longrope_always_long = false;  // long factors for the whole run
  bool vllm_minimax_rotary_dim = false;    // MiniMax (minimax): rotate rotary_dim, not the whole head
};

namespace detail {

inline bool is_known_rope_type(const std::string& t) {
  return t == "default" || t == "linear" || t == "dynamic" || t == "ntk" || t == "yarn" || t == "longrope" ||
         t == "llama3" || t == "proportional";
}

inline std::int64_t scaling_rotary_dim(const ScalingInput& in) {
  return in.rotary_dim == 0 ? in.head_dim : in.rotary_dim;
}

// L0 for yarn/longrope (HF's standardisation: original_max_position_embeddings, else L).
inline std::int64_t scaling_l0(const RopeParameters& p, const ScalingInput& in) {
  return p.original_max_position_embeddings ? *p.original_max_position_embeddings : in.max_position_embeddings;
}

inline void require_finite_positive(const char* rope_type, const char* name, const std::optional<double>& v) {
  if (v && (!(*v > 0.0) || !detail::finite(*v)))
    throw error(concat("rope_type '", rope_type, "': ", name, " (", *v, ") must be positive and finite"));
}

inline void require_key(const std::string& rope_type, const char* name, bool present) {
  if (!present)
    throw error(concat("rope_type '", rope_type, "' requires '", name, "' (missing in rope_parameters)"));
}

inline void require_factor_at_least_one(const std::string& rope_type, const std::optional<double>& f) {
  if (f && detail::finite(*f) && *f > 0.0 && *f < 1.0)
    throw error(concat("rope_type '", rope_type, "': factor (", *f,
                       ") must be >= 1 (HF only warns; a factor below 1 shrinks the context — did you mean ",
                       1.0 / *f, "?)"));
}

inline void check_factor_list(const std::string& rope_type, const char* name, const std::vector<double>& v,
                              std::int64_t pairs) {
  if (static_cast<std::int64_t>(v.size()) != pairs)
    throw error(concat("rope_type '", rope_type, "': ", name, " has ", v.size(), " entries; rotary_dim/2 = ", pairs,
                       " are needed"));
  for (std::size_t j = 0; j < v.size(); ++j)
    if (!(v[j] > 0.0) || !detail::finite(v[j]))
      throw error(concat("rope_type '", rope_type, "': ", name, "[", j, "] (", v[j], ") must be positive and finite"));
}

// inv_i = base^(-2i/d) for a possibly non-default base, in long double (as default_frequencies).
inline std::vector<double> inverse_frequencies(std::int64_t d, long double base, std::int64_t pairs) {
  std::vector<double> t(static_cast<std::size_t>(pairs));
  for (std::int64_t j = 0; j < pairs; ++j) {
    const long double e = detail::strict_div(static_cast<long double>(2 * j), static_cast<long double>(d));
    t[static_cast<std::size_t>(j)] = static_cast<double>(detail::strict_div(1.0L, detail::libm_powl(base, e)));
  }
  return t;
}

// YaRN's m(s, k).
inline double yarn_mscale(double s, double k) {
  return s <= 1.0 ? 1.0 : strict_add(strict_mul(strict_mul(0.1, k), libm_log(s)), 1.0);
}

}  // namespace detail

namespace detail {

// validate(), step 1: the rule's name and the shapes every rule needs.
inline void validate_scaling_shape(const RopeParameters& p, const ScalingInput& in) {
  const std::string& t = p.rope_type;
  if (!is_known_rope_type(t))
    throw error(concat("unknown rope_type '", t,
                       "' (known: default, linear, dynamic, ntk, yarn, longrope, llama3, proportional)"));
  if (in.head_dim <= 0) throw error(concat("head_dim (", in.head_dim, ") must be positive"));
  const std::int64_t d = scaling_rotary_dim(in);
  if (d <= 0 || d > in.head_dim)
    throw error(concat("rotary_dim (", d, ") must be positive and <= head_dim (", in.head_dim, ")"));
  if (d % 2 != 0)
    throw error(concat("rotary_dim (", d, ") is odd", d == in.head_dim ? " (fully rotated head)" : "",
                       ": RoPE rotates pairs of coordinates; use an even rotary_dim"));
  if (!(p.rope_theta > 0.0) || !finite(p.rope_theta))
    throw error(concat("rope_theta (", p.rope_theta, ") must be positive and finite"));
  if (in.max_position_embeddings < 0)
    throw error(concat("max_position_embeddings (", in.max_position_embeddings, ") must be >= 0"));
  if (in.seq_len && *in.seq_len < 0) throw error(concat("seq_len (", *in.seq_len, ") must be >= 0"));
  if (p.original_max_position_embeddings && *p.original_max_position_embeddings <= 0)
    throw error(concat("original_max_position_embeddings (", *p.original_max_position_embeddings,
                       ") must be positive"));
}

// validate(), step 2: each optional value in its range, whatever the rule.
inline void validate_scaling_values(const RopeParameters& p) {
  const std::string& t = p.rope_type;
  const char* tc = t.c_str();
  require_finite_positive(tc, "factor", p.factor);
  require_finite_positive(tc, "attention_factor", p.attention_factor);
  require_finite_positive(tc, "low_freq_factor", p.low_freq_factor);
  require_finite_positive(tc, "high_freq_factor", p.high_freq_factor);
  const auto non_negative = [&t](const char* name, const std::optional<double>& v) {
    if (v && (!(*v >= 0.0) || !finite(*v)))
      throw error(concat("rope_type '", t, "': ", name, " (", *v, ") must be >= 0 and finite (0 = HF's default)"));
  };
  non_negative("beta_fast", p.beta_fast);
  non_negative("beta_slow", p.beta_slow);
  non_negative("mscale", p.mscale);
  non_negative("mscale_all_dim", p.mscale_all_dim);
  if (p.partial_rotary_factor &&
      (!(*p.partial_rotary_factor >= 0.0) || !(*p.partial_rotary_factor <= 1.0)))
    throw error(concat("partial_rotary_factor (", *p.partial_rotary_factor, ") must be in [0, 1]"));
}

// validate(), step 3 for yarn: its ramp's order and the logarithm of its base.
inline void validate_yarn(const RopeParameters& p) {
  const double bf = (p.beta_fast && *p.beta_fast != 0.0) ? *p.beta_fast : 32.0;
  const double bs = (p.beta_slow && *p.beta_slow != 0.0) ? *p.beta_slow : 1.0;
  if (bf < bs)
    throw error(concat("rope_type 'yarn': beta_fast (", bf, ") must be >= beta_slow (", bs,
                       ") (HF only warns; the ramp would invert)"));
  // The correction range d*ln(L0/(2*pi*beta)) / (2*ln rope_theta) divides by ln(rope_theta): 0 at 1
  // (NaN frequencies), negative below 1 (the range inverts and no pair is interpolated). No other
  // rule takes the logarithm of the base. resolve() relies on this check too.
  if (!(p.rope_theta > 1.0))
    throw error(concat("rope_type 'yarn': rope_theta (", p.rope_theta,
                       ") must be > 1: its correction range divides by ln(rope_theta)"));
}

// validate(), step 3 for longrope: both factor lists, one per pair, and a default attention factor
// that exists.
inline void validate_longrope(const RopeParameters& p, const ScalingInput& in) {
  const std::string& t = p.rope_type;
  const std::int64_t d = scaling_rotary_dim(in);
  require_key(t, "short_factor", !p.short_factor.empty());
  require_key(t, "long_factor", !p.long_factor.empty());
  check_factor_list(t, "short_factor", p.short_factor, d / 2);
  check_factor_list(t, "long_factor", p.long_factor, d / 2);
  if (!p.attention_factor) {
    const double s = p.factor ? *p.factor
                              : static_cast<double>(in.max_position_embeddings) /
                                    static_cast<double>(scaling_l0(p, in));
    if (s > 1.0 && scaling_l0(p, in) < 2)
      throw error("rope_type 'longrope': the default attention factor sqrt(1 + ln s / ln L0) needs L0 >= 2");
  }
}

// validate(), step 3 for llama3: its three keys and the order of its band.
inline void validate_llama3(const RopeParameters& p) {
  const std::string& t = p.rope_type;
  require_key(t, "low_freq_factor", p.low_freq_factor.has_value());
  require_key(t, "high_freq_factor", p.high_freq_factor.has_value());
  require_key(t, "original_max_position_embeddings", p.original_max_position_embeddings.has_value());
  if (!(*p.high_freq_factor >= *p.low_freq_factor))
    throw error(concat("rope_type 'llama3': high_freq_factor (", *p.high_freq_factor,
                       ") must be >= low_freq_factor (", *p.low_freq_factor,
                       ") (HF only warns; swapped values invert the smoothing band)"));
}

// validate(), step 3: what the named rule needs beyond steps 1 and 2.
inline void validate_scaling_rule(const RopeParameters& p, const ScalingInput& in) {
  const std::string& t = p.rope_type;
  const std::int64_t d = scaling_rotary_dim(in);
  const std::int64_t L = in.max_position_embeddings;
  if (t == "linear" || t == "dynamic" || t == "ntk" || t == "llama3") require_key(t, "factor", p.factor.has_value());
  if (t != "default" && t != "proportional") require_factor_at_least_one(t, p.factor);
  if (t == "dynamic" && L <= 0)
    throw error("rope_type 'dynamic' needs max_position_embeddings (L) > 0: b' = b*(s*n/L - (s-1))^(d/(d-2))");
  if ((t == "dynamic" || t == "ntk") && d == 2)
    throw error(concat("rope_type '", t, "' needs rotary_dim > 2 (the exponent d/(d-2) is singular at d = 2)"));
  if (t == "yarn" || t == "longrope") {
    if (scaling_l0(p, in) <= 0)
      throw error(concat("rope_type '", t,
                         "' needs original_max_position_embeddings or max_position_embeddings (both missing)"));
    if (!p.factor && L <= 0)
      throw error(concat("rope_type '", t, "' without 'factor' needs max_position_embeddings (factor = L/L0)"));
  }
  if (t == "yarn") validate_yarn(p);
  if (t == "longrope") validate_longrope(p, in);
  if (t == "llama3") validate_llama3(p);
  if (t == "proportional" && d != in.head_dim)
    throw error(concat("rope_type 'proportional' spans the whole head: rotary_dim (", d, ") must equal head_dim (",
                       in.head_dim, "); partial_rotary_factor selects the pairs with nonzero frequency"));
}

}  // namespace detail

// Throws rotary::error naming the first problem. scaled_frequencies() calls it first.
inline void validate(const RopeParameters& p, const ScalingInput& in) {
  detail::validate_scaling_shape(p, in);
  detail::validate_scaling_values(p);
  detail::validate_scaling_rule(p, in);
}

namespace detail {

// One function per rule of scaled_frequencies() (the table at the top of this header). Each runs
// after validate(), so the keys its rule requires are present. They fill f.theta and, where the
// rule has one, f.attention_factor (which starts at 1).

// dynamic and ntk: a larger base b' (b * mult^(d/(d-2))).
inline void dynamic_ntk_frequencies(const RopeParameters& p, const ScalingInput& in, const EngineQuirks& q,
                                    Frequencies& f) {
  const std::int64_t d = scaling_rotary_dim(in);
  const long double s = *p.factor;
  const long double L = static_cast<long double>(in.max_position_embeddings);
  long double mult = s;  // ntk: b' = b * s^(d/(d-2))
  if (p.rope_type == "dynamic") {
    long double n = L;
    if (q.vllm_dynamic_fixed_table) {
      n = strict_mul(L, s);
    } else if (in.seq_len && static_cast<long double>(*in.seq_len) > L) {
      n = static_cast<long double>(*in.seq_len);
    }
    mult = strict_sub(strict_div(strict_mul(s, n), L), strict_sub(s, 1.0L));
  }
  const long double dd = static_cast<long double>(d);
  const long double base =
      strict_mul(static_cast<long double>(p.rope_theta), libm_powl(mult, strict_div(dd, strict_sub(dd, 2.0L))));
  f.theta = inverse_frequencies(d, base, d / 2);
}

// s for yarn and longrope: factor, else L / L0.
inline double context_factor(const RopeParameters& p, const ScalingInput& in) {
  return p.factor ? *p.factor
                  : strict_div(static_cast<double>(in.max_position_embeddings),
                               static_cast<double>(scaling_l0(p, in)));
}

// yarn's attention factor (the order of precedence in the table at the top of this header).
inline double yarn_attention_factor(const RopeParameters& p, const EngineQuirks& q, double s) {
  if (q.ggml_yarn_magnitude) return strict_add(1.0, strict_mul(0.1, libm_log(s)));
  if (p.attention_factor) return *p.attention_factor;
  if (p.mscale && p.mscale_all_dim && *p.mscale != 0.0 && *p.mscale_all_dim != 0.0)
    return strict_div(yarn_mscale(s, *p.mscale), yarn_mscale(s, *p.mscale_all_dim));
  return yarn_mscale(s, 1.0);
}

inline void yarn_frequencies(const RopeParameters& p, const ScalingInput& in, const EngineQuirks& q,
                             Frequencies& f) {
  const std::int64_t d = scaling_rotary_dim(in);
  const std::int64_t l0 = scaling_l0(p, in);
  const double s = context_factor(p, in);
  const double beta_fast = (p.beta_fast && *p.beta_fast != 0.0) ? *p.beta_fast : 32.0;
  const double beta_slow = (p.beta_slow && *p.beta_slow != 0.0) ? *p.beta_slow : 1.0;
  const double dd = static_cast<double>(d);
  const double pi = 3.14159265358979323846;
  const auto corr = [&](double beta) {
    const double ln = libm_log(strict_div(static_cast<double>(l0), strict_mul(strict_mul(beta, 2.0), pi)));
    return strict_div(strict_mul(dd, ln), strict_mul(2.0, libm_log(p.rope_theta)));
  };
  double low = corr(beta_fast);
  double high = corr(beta_slow);
  if (p.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dd - 1.0);
  if (low == high) high = strict_add(high, 0.001);
  const std::vector<double> inv = inverse_frequencies(d, p.rope_theta, d / 2);
  f.theta.resize(inv.size());
  for (std::size_t i = 0; i < inv.size(); ++i) {
    const double ramp =
        std::clamp(strict_div(strict_sub(static_cast<double>(i), low), strict_sub(high, low)), 0.0, 1.0);
    const double extrapolation = strict_sub(1.0, ramp);  // HF's inv_freq_extrapolation_factor
    f.theta[i] = strict_add(strict_mul(strict_div(inv[i], s), strict_sub(1.0, extrapolation)),
                            strict_mul(inv[i], extrapolation));
  }
  f.attention_factor = yarn_attention_factor(p, q, s);
}

inline void longrope_frequencies(const RopeParameters& p, const ScalingInput& in, const EngineQuirks& q,
                                 Frequencies& f) {
  const std::int64_t d = scaling_rotary_dim(in);
  const std::int64_t l0 = scaling_l0(p, in);
  const double s = context_factor(p, in);
  const bool use_long = q.vllm_longrope_always_long || (in.seq_len && *in.seq_len > l0);
  const std::vector<double>& ext = use_long ? p.long_factor : p.short_factor;
  f.theta = inverse_frequencies(d, p.rope_theta, d / 2);
  for (std::size_t i = 0; i < f.theta.size(); ++i) f.theta[i] = strict_div(f.theta[i], ext[i]);
  if (p.attention_factor) {
    f.attention_factor = *p.attention_factor;
  } else if (s > 1.0) {
    f.attention_factor =
        std::sqrt(strict_add(1.0, strict_div(libm_log(s), libm_log(static_cast<double>(l0)))));
  }
}

inline void llama3_frequencies(const RopeParameters& p, const ScalingInput& in, Frequencies& f) {
  const std::int64_t d = scaling_rotary_dim(in);
  const double s = *p.factor;
  const double lo = *p.low_freq_factor;
  const double hi = *p.high_freq_factor;
  const double l0 = static_cast<double>(*p.original_max_position_embeddings);
  const double low_wavelen = strict_div(l0, lo);
  const double high_wavelen = strict_div(l0, hi);
  const double two_pi = 6.283185307179586476925;
  f.theta = inverse_frequencies(d, p.rope_theta, d / 2);
  for (double& x : f.theta) {
    const double wavelen = strict_div(two_pi, x);
    if (wavelen > low_wavelen) {
      x = strict_div(x, s);
    } else if (hi > lo && wavelen >= high_wavelen) {  // medium band, both ends inclusive; empty if hi == lo
      const double sm = strict_div(strict_sub(strict_div(l0, wavelen), lo), strict_sub(hi, lo));
      x = strict_add(strict_div(strict_mul(strict_sub(1.0, sm), x), s), strict_mul(sm, x));
    }  // else high frequency: unchanged
  }
}

inline void proportional_frequencies(const RopeParameters& p, const ScalingInput& in, Frequencies& f) {
  const double s = p.factor.value_or(1.0);
  const double frac = p.partial_rotary_factor.value_or(1.0);
  const auto rope_angles =
      static_cast<std::int64_t>(std::floor(strict_div(strict_mul(frac, static_cast<double>(in.head_dim)), 2.0)));
  const std::vector<double> rotated = inverse_frequencies(in.head_dim, p.rope_theta, rope_angles);
  f.theta.assign(static_cast<std::size_t>(in.head_dim / 2), 0.0);
  for (std::size_t i = 0; i < rotated.size(); ++i) f.theta[i] = strict_div(rotated[i], s);
}

}  // namespace detail

// theta_i and the attention factor of rule p.rope_type (see the table at the top of this header).
// The arithmetic runs through detail::strict_* and libm_* (detail/fp.hpp): value-unsafe flags
// (-ffast-math, -freciprocal-math, -ffp-contract=fast with FMA hardware) would otherwise change
// theta in its last bits, and the tables with it; tests/flags checks the bits.
inline Frequencies scaled_frequencies(const RopeParameters& p, const ScalingInput& in, const EngineQuirks& q = {}) {
  validate(p, in);
  const std::string& t = p.rope_type;
  const std::int64_t d = detail::scaling_rotary_dim(in);
  Frequencies f;
  f.attention_factor = 1.0;
  if (t == "default") {
    f.theta = detail::inverse_frequencies(d, p.rope_theta, d / 2);
  } else if (t == "linear") {
    f.theta = detail::inverse_frequencies(d, p.rope_theta, d / 2);
    for (double& x : f.theta) x = detail::strict_div(x, *p.factor);
  } else if (t == "dynamic" || t == "ntk") {
    detail::dynamic_ntk_frequencies(p, in, q, f);
  } else if (t == "yarn") {
    detail::yarn_frequencies(p, in, q, f);
  } else if (t == "longrope") {
    detail::longrope_frequencies(p, in, q, f);
  } else if (t == "llama3") {
    detail::llama3_frequencies(p, in, f);
  } else {
    detail::proportional_frequencies(p, in, f);
  }
  f.validate();
  return f;
}

}  // namespace rotary

#endif  // ROTARY_SCALING_HPP
