// rotary — Hugging Face model configs: the rope-relevant fields of config.json and how they resolve
// to a RotarySpec, scaling parameters and frequencies, as transformers reads them.
//
// No JSON here: fill HfConfig from whatever parser you use (examples/rotary_inspect.cpp does it with
// nlohmann::json). Every field is optional, exactly as in config.json; resolve() applies HF's
// defaults and precedence:
//
//   head_dim      qk_rope_head_dim (DeepSeek-V2/V3 MLA: the rotated slice of each head), else
//                 head_dim (if > 0), else hidden_size / num_attention_heads, else n_embd / n_head
//                 (integer division, as HF does)
//   rotary_dim    rotary_dim (GPT-J, CodeGen), else int(head_dim * f) with f = partial_rotary_factor
//                 (top level, else inside the rope parameters), else rotary_pct (GPT-NeoX), else 1;
//                 int() truncates as Python does; the result must be even. rope_type "proportional"
//                 (Gemma 4) rotates the whole head_dim: the rule itself zeroes the frequencies of the
//                 pairs past f * head_dim / 2, so its rotary_dim is head_dim.
//   rope_theta    rope_theta, else rotary_emb_base (GPT-NeoX, Pythia), else the rope_scaling value,
//                 i.e. 10000. A per-layer-type entry carries its own rope_theta.
//   max positions max_position_embeddings, else n_positions (GPT-J, CodeGen)
//   original_max_position_embeddings (llama3, yarn, longrope): the top-level key wins over the one in
//                 rope_scaling (Phi-3 keeps it at the top level), else the rope_scaling value, else
//                 (yarn, longrope) max_position_embeddings; llama3 without it is an error (see
//                 scaling.hpp). For per-layer-type entries the entry's own value wins.
//   rope_type     HF's legacy `type` key is the same field (map it to rope_type when parsing);
//                 "su" (early Phi-3 configs) means "longrope".
//   layer types   per_layer_type (the new nested `rope_parameters`, keyed "full_attention",
//                 "sliding_attention", ...) picks the entry of ResolveOptions::layer_type. Without it,
//                 Gemma-3's rope_local_base_freq gives "sliding_attention" layers plain RoPE with that
//                 theta (no scaling), as HF's Gemma3 does; every other layer type uses rope_scaling.
//   pairing       ResolveOptions::pairing, else rope_interleave (DeepSeek-V3 in HF), else
//                 pairing_for_model_type(model_type).
#ifndef ROTARY_HF_CONFIG_HPP
#define ROTARY_HF_CONFIG_HPP

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "frequencies.hpp"
#include "scaling.hpp"
#include "types.hpp"

namespace rotary {

// The rope-relevant keys of a Hugging Face config.json (for multimodal configs: of text_config).
struct HfConfig {
  std::optional<std::string> model_type;

  // Head geometry.
  std::optional<std::int64_t> head_dim;
  std::optional<std::int64_t> qk_rope_head_dim;  // DeepSeek-V2/V3, Kimi-K2: rope part of q/k heads
  std::optional<std::int64_t> hidden_size, num_attention_heads;
  std::optional<std::int64_t> n_embd, n_head;  // GPT-J, CodeGen, GPT-2 style names

  // Which part of the head rotates.
  std::optional<std::int64_t> rotary_dim;          // GPT-J, CodeGen: an explicit count
  std::optional<double> partial_rotary_factor;     // Phi, StableLM, GLM, ...
  std::optional<double> rotary_pct;                // GPT-NeoX, Pythia

  // Frequencies.
  std::optional<double> rope_theta;
  std::optional<double> rotary_emb_base;       // GPT-NeoX, Pythia name of rope_theta
  std::optional<double> rope_local_base_freq;  // Gemma-3: theta of the sliding-window layers
  std::optional<std::int64_t> max_position_embeddings;
  std::optional<std::int64_t> n_positions;     // GPT-J, CodeGen name of max_position_embeddings
  std::optional<std::int64_t> original_max_position_embeddings;  // Phi-3 keeps it at the top level

  // rope_scaling (or a flat rope_parameters): one set of parameters for every layer. Map HF's legacy
  // `type` key to rope_type. Its rope_theta is used only when rope_theta/rotary_emb_base are absent.
  std::optional<RopeParameters> rope_scaling;
  // rope_parameters keyed by layer type (transformers 5: {"full_attention": {...},
  // "sliding_attention": {...}}); each entry is complete, rope_theta included.
  std::map<std::string, RopeParameters> per_layer_type;
  std::vector<std::string> layer_types;  // the config's per-layer list, if any (names are checked)

  std::optional<bool> rope_interleave;  // DeepSeek-V3 in HF: true = interleaved pairs
};

struct ResolveOptions {
  std::string layer_type = "full_attention";
  std::optional<std::int64_t> seq_len;  // the length dynamic NTK and longrope switching see
  std::optional<Pairing> pairing;       // overrides the model family's pairing
  EngineQuirks quirks{};
};

struct ResolvedRope {
  RotarySpec spec;        // head_dim, rotary_dim, base = rope_theta, pairing
  RopeParameters params;  // after HF's defaults: rope_type, rope_theta, original_max_position_embeddings
  ScalingInput input;     // what scaled_frequencies saw
  Frequencies freqs;      // theta_j (rotary_dim/2 values) and the attention factor
};

// The pairing a model family's reference implementation uses:
//   interleaved: gptj, codegen, cohere, cohere2, glm, glm4, chatglm, deepseek_v2, deepseek_v3
//                (HF's DeepSeek-V3 applies rope_interleave, true by default)
//   half_split:  everything else (HF rotate_half: llama, mistral, qwen2, qwen3, phi, phi3, gemma*,
//                gpt_neox, stablelm, falcon, olmo, ...). An unknown or empty model_type is half_split
//                too: rotate_half is what transformers uses unless a model overrides it.
inline Pairing pairing_for_model_type(std::string_view model_type) {
  constexpr std::string_view interleaved[] = {"gptj",  "codegen", "cohere",      "cohere2",    "glm",
                                              "glm4",  "chatglm", "deepseek_v2", "deepseek_v3"};
  for (std::string_view m : interleaved)
    if (model_type == m) return Pairing::interleaved;
  return Pairing::half_split;
}

namespace detail {

inline std::int64_t hf_positive(const char* key, std::int64_t v) {
  if (v <= 0) throw error(concat(key, " (", v, ") must be positive"));
  return v;
}

inline std::int64_t hf_head_dim(const HfConfig& c) {
  if (c.qk_rope_head_dim) return hf_positive("qk_rope_head_dim", *c.qk_rope_head_dim);
  if (c.head_dim && *c.head_dim != 0) return hf_positive("head_dim", *c.head_dim);  // HF: `head_dim or ...`
  if (c.hidden_size && c.num_attention_heads) {
    const std::int64_t h = hf_positive("hidden_size", *c.hidden_size);
    const std::int64_t n = hf_positive("num_attention_heads", *c.num_attention_heads);
    return hf_positive("hidden_size / num_attention_heads", h / n);
  }
  if (c.n_embd && c.n_head) {
    const std::int64_t h = hf_positive("n_embd", *c.n_embd);
    const std::int64_t n = hf_positive("n_head", *c.n_head);
    return hf_positive("n_embd / n_head", h / n);
  }
  throw error(
      "head_dim: the config has none of head_dim, qk_rope_head_dim, hidden_size + num_attention_heads, "
      "n_embd + n_head");
}

inline bool hf_needs_original_max(const std::string& t) {
  return t == "llama3" || t == "yarn" || t == "longrope";
}

}  // namespace detail

// Resolves `config` for one layer type: head geometry, pairing, HF-standardized parameters, then
// validate() + scaled_frequencies(). Throws rotary::error naming the offending key and its value.
inline ResolvedRope resolve(const HfConfig& config, const ResolveOptions& options = {}) {
  using detail::concat;
  const std::int64_t head_dim = detail::hf_head_dim(config);

  // 1. The parameters of this layer type.
  RopeParameters p;
  bool per_layer = false;
  if (!config.per_layer_type.empty()) {
    const auto it = config.per_layer_type.find(options.layer_type);
    if (it == config.per_layer_type.end()) {
      std::string have;
      for (const auto& kv : config.per_layer_type) have += (have.empty() ? "" : ", ") + kv.first;
      throw error(concat("layer_type (\"", options.layer_type, "\") has no entry in rope_parameters (",
                         have, ")"));
    }
    p = it->second;
    per_layer = true;
  } else {
    bool known = options.layer_type == "full_attention" || options.layer_type == "sliding_attention";
    for (const auto& t : config.layer_types) known = known || t == options.layer_type;
    if (!known)
      throw error(concat("layer_type (\"", options.layer_type,
                         "\") is neither full_attention, sliding_attention nor in layer_types"));
    if (options.layer_type == "sliding_attention" && config.rope_local_base_freq) {
      p.rope_theta = *config.rope_local_base_freq;  // Gemma-3: local layers use default RoPE
    } else {
      if (config.rope_scaling) p = *config.rope_scaling;
      if (config.rope_theta)
        p.rope_theta = *config.rope_theta;
      else if (config.rotary_emb_base)
        p.rope_theta = *config.rotary_emb_base;
    }
  }
  if (p.rope_type.empty()) p.rope_type = "default";
  if (p.rope_type == "su") p.rope_type = "longrope";
  if (!(p.rope_theta > 0.0) || !detail::finite(p.rope_theta))
    throw error(concat("rope_theta (", p.rope_theta, ") must be positive and finite"));

  // 2. max_position_embeddings and the pre-extension length.
  std::optional<std::int64_t> max_pos = config.max_position_embeddings;
  if (!max_pos) max_pos = config.n_positions;
  if (max_pos) detail::hf_positive(config.max_position_embeddings ? "max_position_embeddings" : "n_positions",
                                   *max_pos);
  if (detail::hf_needs_original_max(p.rope_type)) {
    if (config.original_max_position_embeddings && !(per_layer && p.original_max_position_embeddings))
      p.original_max_position_embeddings = config.original_max_position_embeddings;
    // yarn/longrope: L0 defaults to L (as HF). llama3 keeps it required: scaling.hpp rejects a llama3
    // without its pre-training length, where HF would fill in L and warn.
    if (!p.original_max_position_embeddings && p.rope_type != "llama3") p.original_max_position_embeddings = max_pos;
  }
  if (!max_pos && (p.rope_type == "dynamic" || p.rope_type == "longrope" ||
                   (p.rope_type == "yarn" && !(p.factor && p.original_max_position_embeddings))))
    throw error(concat("max_position_embeddings: rope_type '", p.rope_type,
                       "' needs it and the config has neither it nor n_positions"));

  // 3. rotary_dim.
  std::optional<double> factor = config.partial_rotary_factor;
  const char* factor_key = "partial_rotary_factor";
  if (!factor) factor = p.partial_rotary_factor;
  if (!factor && config.rotary_pct) {
    factor = config.rotary_pct;
    factor_key = "rotary_pct";
  }
  if (factor && (!(*factor > 0.0) || !(*factor <= 1.0)))
    throw error(concat(factor_key, " (", *factor, ") must be in (0, 1]"));
  std::int64_t rotary_dim = 0;
  if (p.rope_type == "proportional") {
    rotary_dim = head_dim;
    if (factor) p.partial_rotary_factor = factor;
  } else if (config.rotary_dim) {
    rotary_dim = *config.rotary_dim;
    if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
      throw error(concat("rotary_dim (", rotary_dim, ") must be even, positive and <= head_dim (", head_dim,
                         ")"));
  } else {
    // Python's int(head_dim * factor): the double product, truncated toward zero.
    rotary_dim = factor ? static_cast<std::int64_t>(static_cast<double>(head_dim) * *factor) : head_dim;
    if (factor) p.partial_rotary_factor = factor;
    if (rotary_dim <= 0 || rotary_dim % 2 != 0)
      throw error(concat("rotary_dim (", rotary_dim, " = int(head_dim ", head_dim, " * ", factor_key, " ",
                         factor.value_or(1.0), ")) must be even and positive"));
  }

  // 4. Pairing.
  Pairing pairing = pairing_for_model_type(config.model_type.value_or(""));
  if (config.rope_interleave) pairing = *config.rope_interleave ? Pairing::interleaved : Pairing::half_split;
  if (options.pairing) pairing = *options.pairing;

  // 5. Frequencies.
  if (options.seq_len && *options.seq_len < 0)
    throw error(concat("seq_len (", *options.seq_len, ") must be >= 0"));
  ResolvedRope r;
  r.spec = RotarySpec(head_dim, pairing, p.rope_theta, rotary_dim);
  r.spec.validate();
  r.input.head_dim = head_dim;
  r.input.rotary_dim = rotary_dim;
  r.input.max_position_embeddings = max_pos.value_or(0);
  r.input.seq_len = options.seq_len;
  validate(p, r.input);
  r.freqs = scaled_frequencies(p, r.input, options.quirks);
  r.params = std::move(p);
  return r;
}

}  // namespace rotary

#endif  // ROTARY_HF_CONFIG_HPP
