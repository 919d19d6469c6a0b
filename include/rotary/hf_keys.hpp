// rotary — the rope-relevant keys of a Hugging Face config.json (HfConfig), and what they say about
// which layers rotate: default_layer_type, nope_layer_type, model_nope_reason; and QueryScale, the
// position-dependent query scaling some families apply beside RoPE. Filled by rotary/hf_json.hpp (or
// by hand); resolved by hf_config.hpp (one layer type) and hf_layers.hpp (every layer).
#ifndef ROTARY_HF_KEYS_HPP
#define ROTARY_HF_KEYS_HPP

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "detail/fp.hpp"
#include "hf_families.hpp"
#include "scaling.hpp"
#include "types.hpp"

namespace rotary {

// The largest head and hidden sizes accepted: no model comes close (the largest heads are 256 wide,
// hidden sizes ~2^15); beyond them resolve() would allocate tables of that size. resolve() caps
// head_dim however it is obtained; the JSON reader (hf_json.hpp) also caps the keys as it reads them.
inline constexpr std::int64_t kHfMaxHeadDim = 1 << 16;
inline constexpr std::int64_t kHfMaxHiddenSize = 1 << 20;

// The rope-relevant keys of a Hugging Face config.json (for multimodal configs: of text_config).
struct HfConfig {
  std::optional<std::string> model_type;  // of the language model (text_config's, for composite configs)

  // Head geometry.
  std::optional<std::int64_t> head_dim;
  // "head_dim": null in the file (set by hf_json.hpp): the class gets None, not its default, and reads
  // hidden_size / num_attention_heads (ERNIE 4.5, Llama, ...; published ERNIE-4.5 MoE configs say null)
  bool head_dim_null = false;
  // The other rope-relevant keys the file sets to null. The class gets None for them, not the default
  // rotary would otherwise take, and its rotary code does not compute with None (TypeError), so
  // resolve() refuses a null exactly where it would have used a class default (hf_config.hpp).
  std::vector<std::string> null_keys;
  // Gemma 4: the head_dim of its full_attention layers (512 against head_dim 256 on its sliding ones);
  // HF's proportional RoPE of those layers spans it (head_dim_key="global_head_dim")
  std::optional<std::int64_t> global_head_dim;
  std::optional<std::int64_t> qk_rope_head_dim;  // DeepSeek-V2/V3, Kimi-K2: rope part of q/k heads
  std::optional<std::int64_t> hidden_size, num_attention_heads;
  std::optional<std::int64_t> n_embd, n_head;  // GPT-J, CodeGen, GPT-2 style names (Falcon's n_embed: n_embd)

  // Which part of the head rotates.
  std::optional<std::int64_t> rotary_dim;          // GPT-J, CodeGen: an explicit count
  std::optional<double> partial_rotary_factor;     // Phi, StableLM, GLM, ...
  std::optional<double> rotary_pct;                // GPT-NeoX, Pythia

  // Frequencies.
  std::optional<double> rope_theta;
  std::optional<double> rotary_emb_base;       // GPT-NeoX, Pythia name of rope_theta
  std::optional<double> rope_local_base_freq;  // Gemma-3: theta of the sliding-window layers
  std::optional<double> compress_rope_theta;   // DeepSeek-V4: theta of its compressed-attention layers
  std::optional<std::int64_t> max_position_embeddings;
  std::optional<std::int64_t> n_positions;     // GPT-J, CodeGen name of max_position_embeddings
  std::optional<std::int64_t> original_max_position_embeddings;  // Phi-3 keeps it at the top level

  // rope_scaling (or a flat rope_parameters): one set of parameters for every layer. Map HF's legacy
  // `type` key to rope_type. An explicit JSON null is RopeParameters{} (default RoPE: it overrides a
  // class default such as gpt-oss's yarn), an absent key is nullopt.
  std::optional<RopeParameters> rope_scaling;
  // rope_parameters keyed by layer type (transformers 5: {"full_attention": {...},
  // "sliding_attention": {...}}); each entry is complete, rope_theta included.
  std::map<std::string, RopeParameters> per_layer_type;
  std::vector<std::string> layer_types;  // the config's per-layer list, if any (names are checked)

  // The layer stack, read by resolve_layers (hf_layers.hpp) only.
  std::optional<std::int64_t> num_hidden_layers;  // n_layer (GPT-J, CodeGen) is its name there
  // LongCat-Flash: its layers, each with two attention blocks; LongcatFlashModel sets
  // num_hidden_layers = 2 * num_layers (the blocks are the layers its cache and rope count)
  std::optional<std::int64_t> num_layers;
  // DeepSeek-V4's per-layer compression (0 sliding, 4 compressed sparse, 128 heavily compressed): its
  // layer types where the file has no layer_types
  std::vector<std::int64_t> compress_ratios;
  // SmolLM3, Llama 4: one entry per layer, nonzero = the layer applies RoPE, 0 = NoPE (HF's
  // attention reads use_rope = no_rope_layers[layer_idx]); empty: the class's default list, NoPE
  // every no_rope_layer_interval-th layer (class default 4).
  std::vector<std::int64_t> no_rope_layers;
  std::optional<std::int64_t> no_rope_layer_interval;
  // Without layer_types, the classes derive them: Gemma 3 and Command R7B from sliding_window_pattern
  // (every pattern-th layer full attention; class defaults 6 and 4), Qwen3-Next and Qwen3.5 from
  // full_attention_interval (class default 4), SmolLM3 from use_sliding_window and sliding_window.
  std::optional<std::int64_t> sliding_window_pattern, full_attention_interval;
  // EXAONE 4's published form of the pattern: a string of 'L' (local, sliding) and 'G' (global)
  // per layer, repeated ("LLLG"). transformers stores it without deriving from it (layer_types
  // says); vLLM reads layer i as pattern[i % length].
  std::string sliding_window_pattern_text;
  std::optional<bool> use_sliding_window;
  bool has_sliding_window = false;   // "sliding_window" holds a value (not absent, not null)
  bool sliding_window_null = false;  // "sliding_window": null (EXAONE 4: no hybrid attention, RoPE everywhere)
  std::vector<std::int64_t> full_attn_idxs;  // LFM2: its attention layers (the others are convolutions)

  // Granite 4.0-H (granitemoehybrid): "rope" builds a rotary embedding; anything else (its published
  // configs say "nope"; the class default is None) leaves every layer without one.
  std::optional<std::string> position_embedding_type;
  // Kimi-Linear (kimi_linear, Moonshot's modeling_kimi.py): mla_use_nope true = its MLA layers rotate
  // nothing; linear_attn_config.kda_layers lists its KDA (linear attention) layers, 1-based.
  std::optional<bool> mla_use_nope;
  std::vector<std::int64_t> kda_layers;
  // HunYuan's remote code (model_type "hunyuan": HunYuanConfig and hunyuan.py of the A13B release):
  // attention_head_dim is its head width (else hidden_size // num_attention_heads); use_rotary_pos_emb
  // false builds no rotary embedding; its XD-RoPE (position_embedding_xdrope) and MLA (use_mla)
  // paths are not checked by rotary and refused.
  std::optional<std::int64_t> attention_head_dim;
  std::optional<bool> use_rotary_pos_emb, position_embedding_xdrope, use_mla;
  // Llama 4's temperature tuning of its NoPE layers (QueryScale): on unless false (published configs
  // may say 4: any nonzero number is on); attn_scale (class default 0.1), floor_scale (8192).
  std::optional<bool> attn_temperature_tuning;
  std::optional<double> attn_scale;
  std::optional<std::int64_t> floor_scale;
  std::optional<bool> rope_interleave;  // DeepSeek-V3 in HF: true = interleaved pairs
  std::optional<bool> alibi;            // Falcon: true = ALiBi, no rotary embedding

  std::vector<std::string> warnings;  // from the parser (misspelt or ignored keys); resolve() passes them on
};

// A query scaling by position that a family applies beside RoPE (q is multiplied after the rotation,
// k is not): 1 + beta * ln(1 + floor((position + offset) / period)) for position >= 0; beta 0 = none.
//   Ministral 3 (rope_parameters.llama_4_scaling_beta): beta, period original_max_position_embeddings,
//     offset 0, on its RoPE layers (Ministral3Attention's _get_llama_4_attn_scale).
//   Llama 4 temperature tuning (attn_temperature_tuning, class default on): beta attn_scale (0.1),
//     period floor_scale (8192), offset 1, on its NoPE layers only (Llama4TextAttention).
// rotary does not apply it (it is not a rotation): at() gives the factor, in double where the
// models compute in float32.
struct QueryScale {
  double beta = 0.0;
  std::int64_t period = 1;
  std::int64_t offset = 0;

  bool active() const noexcept { return beta != 0.0; }
  double at(std::int64_t position) const noexcept {
    ROTARY_ASSERT(position >= 0 && period >= 1 && offset >= 0 && offset < period);
    // floor((position + offset) / period) without forming position + offset (no overflow)
    const std::int64_t k = position / period + (position % period + offset) / period;
    return detail::strict_add(1.0, detail::strict_mul(beta, detail::libm_log(1.0 + static_cast<double>(k))));
  }
};

namespace detail {

// DeepSeek-V4 (DeepseekV4Config, DeepseekV4Attention). The rotated slice: int(head_dim * f) values at
// the end of each head, f = partial_rotary_factor, else qk_rope_head_dim / head_dim, else 64 / 512
// (head_dim: class default 512). resolve() describes that slice (its head_dim and rotary_dim).
inline std::int64_t deepseek_v4_rope_dim(const HfConfig& c) {
  const std::int64_t head = c.head_dim && *c.head_dim > 0 ? *c.head_dim : 512;
  if (head > kHfMaxHeadDim) throw error(concat("head_dim (", head, ") is larger than any model's"));
  double f = 64.0 / 512.0;
  const char* key = "the class default 64 / 512";
  if (c.partial_rotary_factor) {
    f = *c.partial_rotary_factor;
    key = "partial_rotary_factor";
  } else if (c.qk_rope_head_dim) {
    f = static_cast<double>(*c.qk_rope_head_dim) / static_cast<double>(head);
    key = "qk_rope_head_dim / head_dim";
  }
  if (!(f > 0.0 && f <= 1.0)) throw error(concat("deepseek_v4: ", key, " (", f, ") must be in (0, 1]"));
  const auto d = static_cast<std::int64_t>(static_cast<double>(head) * f);
  if (d <= 0 || d % 2 != 0)
    throw error(concat("deepseek_v4: int(head_dim ", head, " * ", key, " ", f, ") = ", d, " must be even and positive"));
  return d;
}

// Which of DeepSeek-V4's two rope parameter sets a layer type uses (DeepseekV4Attention:
// "main" for sliding_attention, "compress" for the compressed layer types, their compressor and
// indexer alike).
inline const char* deepseek_v4_rope_key(const std::string& layer_type) {
  if (layer_type == "sliding_attention") return "main";
  if (layer_type == "compressed_sparse_attention" || layer_type == "heavily_compressed_attention") return "compress";
  throw error(concat("layer_type (\"", layer_type, "\"): deepseek_v4's layer types are sliding_attention, "
                     "compressed_sparse_attention and heavily_compressed_attention"));
}

// A layer type's rope parameters: rope_parameters' "main" / "compress" entries where the file has both
// (used as they stand); else "main" is default RoPE at rope_theta (class default 1e4) and "compress"
// the config's flat scaling dict at compress_rope_theta (class default 160000), rope_type default where
// it has none, a yarn attention_factor of 1 where it has none. No other mix is read.
inline RopeParameters deepseek_v4_parameters(const HfConfig& c, const std::string& layer_type) {
  const std::string key = deepseek_v4_rope_key(layer_type);
  if (!c.per_layer_type.empty()) {
    const auto it = c.per_layer_type.find(key);
    if (it == c.per_layer_type.end() || c.per_layer_type.size() != 2 || !c.per_layer_type.count("main"))
      throw error("deepseek_v4: a nested rope_parameters needs exactly the entries \"main\" and \"compress\"");
    return it->second;
  }
  RopeParameters p;
  if (key == "main") {
    p.rope_theta = c.rope_theta.value_or(10000.0);
    return p;
  }
  if (c.rope_scaling) p = *c.rope_scaling;
  p.rope_theta = c.compress_rope_theta.value_or(160000.0);
  if (p.rope_type.empty()) p.rope_type = "default";
  if (p.rope_type == "yarn" && !p.attention_factor) p.attention_factor = 1.0;
  return p;
}

// EXAONE 4 with "sliding_window": null has no hybrid attention: RoPE on every (full_attention) layer,
// where its class default (sliding_window 4096) applies RoPE on sliding_attention layers only.
inline bool exaone4_not_hybrid(const HfConfig& config) {
  return config.model_type.value_or("") == "exaone4" && config.sliding_window_null;
}

// Head geometry: the checks and defaults resolve() reads head_dim with (hf_config.hpp).
inline std::int64_t hf_positive(const char* key, std::int64_t v) {
  if (v <= 0) throw error(concat(key, " (", v, ") must be positive"));
  return v;
}

// Whether the file sets `key` to null (HfConfig::null_keys).
inline bool hf_null(const HfConfig& c, const char* key) {
  for (const std::string& k : c.null_keys)
    if (k == key) return true;
  return false;
}

// Before taking `key`'s class default: a null in the file is not that default (the class gets None,
// which its rotary code cannot compute with), so it is refused, naming the key.
inline void hf_no_null_default(const HfConfig& c, const char* key) {
  if (hf_null(c, key))
    throw error(concat(key, " is null in config.json: transformers' ", c.model_type.value_or("(no model_type)"),
                       " class gets None, not its default, and its rotary code cannot compute with None; give ",
                       "the value, or leave the key out for the default"));
}

// The file's value, else the class default (0 = none).
inline std::optional<std::int64_t> hf_or(const std::optional<std::int64_t>& v, std::int64_t fallback) {
  if (v) return v;
  if (fallback != 0) return fallback;
  return std::nullopt;
}

inline std::int64_t hf_head_dim_capped(const char* key, std::int64_t v) {
  hf_positive(key, v);
  if (v > kHfMaxHeadDim)
    throw error(concat(key, " (", v, ") is larger than any model's (at most ", kHfMaxHeadDim, " accepted)"));
  return v;
}

inline std::int64_t hf_head_dim(const HfConfig& c, const HfFamily* f) {
  if (c.model_type.value_or("") == "deepseek_v4") return deepseek_v4_rope_dim(c);  // its rope slice
  // HunYuan's remote code: self.head_dim = config.attention_head_dim, which the class sets to
  // hidden_size // num_attention_heads when absent; it reads neither head_dim nor (without MLA)
  // qk_rope_head_dim.
  const bool hunyuan = c.model_type.value_or("") == "hunyuan";
  if (hunyuan && c.attention_head_dim) return hf_head_dim_capped("attention_head_dim", *c.attention_head_dim);
  if (!hunyuan && !c.qk_rope_head_dim && f && f->qk_rope_head_dim != 0) hf_no_null_default(c, "qk_rope_head_dim");
  const std::optional<std::int64_t> qk = hf_or(c.qk_rope_head_dim, f ? f->qk_rope_head_dim : 0);
  if (qk && !hunyuan) return hf_head_dim_capped("qk_rope_head_dim", *qk);
  // HF: `head_dim or hidden_size // num_attention_heads`.
  if (c.head_dim && *c.head_dim != 0 && !hunyuan) return hf_head_dim_capped("head_dim", *c.head_dim);
  // class default (an explicit 0 or null falls through)
  if (!c.head_dim && !c.head_dim_null && f && f->head_dim != 0) return f->head_dim;
  const char* hidden_key = c.hidden_size ? "hidden_size" : "n_embd";
  const char* heads_key = c.num_attention_heads ? "num_attention_heads" : "n_head";
  std::optional<std::int64_t> hidden = c.hidden_size ? c.hidden_size : c.n_embd;
  std::optional<std::int64_t> heads = c.num_attention_heads ? c.num_attention_heads : c.n_head;
  if (!hidden && f && f->hidden_size) {
    hf_no_null_default(c, "hidden_size");
    hidden = f->hidden_size;
    hidden_key = "hidden_size (class default)";
  }
  if (!heads && f && f->num_attention_heads) {
    hf_no_null_default(c, "num_attention_heads");
    heads = f->num_attention_heads;
    heads_key = "num_attention_heads (class default)";
  }
  if (hidden && heads) {
    const std::int64_t h = hf_positive(hidden_key, *hidden);
    const std::int64_t n = hf_positive(heads_key, *heads);
    const std::int64_t d = hf_positive("hidden_size / num_attention_heads", h / n);
    if (d > kHfMaxHeadDim)
      throw error(concat("head_dim = ", hidden_key, " (", h, ") / ", heads_key, " (", n, ") = ", d,
                         " is larger than any model's (at most ", kHfMaxHeadDim, " accepted)"));
    return d;
  }
  throw error(concat(
      "head_dim: the config has none of head_dim, qk_rope_head_dim, hidden_size (n_embd) + "
      "num_attention_heads (n_head), and model_type '",
      c.model_type.value_or(""), "' has no class defaults for them"));
}
}  // namespace detail

// The layer type resolve() uses when ResolveOptions::layer_type is empty: the family's RoPE layers.
inline std::string default_layer_type(const HfConfig& config) {
  if (detail::exaone4_not_hybrid(config)) return "full_attention";
  const HfFamily* f = find_hf_family(config.model_type.value_or(""));
  return std::string(f ? f->rope_layer_type : std::string_view("full_attention"));
}

// Why no layer of the model applies RoPE, or "" when some do: Granite 4.0-H builds its rotary
// embedding only for position_embedding_type "rope" (GraniteMoeHybridModel); Kimi-Linear with
// mla_use_nope true rotates nothing (without it, it is a family rotary has not checked).
inline std::string model_nope_reason(const HfConfig& config) {
  const std::string model_type = config.model_type.value_or("");
  if (model_type == "hunyuan" && !config.use_rotary_pos_emb.value_or(true))
    return "hunyuan with use_rotary_pos_emb false builds no rotary embedding (NoPE on every layer)";
  if (model_type == "kimi_linear" && config.mla_use_nope.value_or(false))
    return "kimi_linear with mla_use_nope true: its MLA layers rotate nothing and its KDA layers have no "
           "positional encoding (NoPE on every layer)";
  if (model_type != "granitemoehybrid" || config.position_embedding_type.value_or("") == "rope") return "";
  return detail::concat("granitemoehybrid with position_embedding_type ",
                        config.position_embedding_type ? "\"" + *config.position_embedding_type + "\""
                                                       : std::string("absent (None)"),
                        " builds no rotary embedding (NoPE on every layer; \"rope\" would build one)");
}

// The layer type the config's family runs without RoPE ("" = none): hf_families()' entry, none for
// EXAONE 4 without hybrid attention.
inline std::string nope_layer_type(const HfConfig& config) {
  if (detail::exaone4_not_hybrid(config)) return "";
  const HfFamily* f = find_hf_family(config.model_type.value_or(""));
  return std::string(f ? f->nope_layer_type : std::string_view());
}

}  // namespace rotary

#endif  // ROTARY_HF_KEYS_HPP
