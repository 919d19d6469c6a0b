// rotary — every layer of a Hugging Face model: the RoPE it applies, none (NoPE), or a refusal.
//
//   std::vector<rotary::LayerRope> layers = rotary::resolve_layers(config);   // one row per layer
//   for (const auto& l : layers)
//     if (l.kind == rotary::LayerRopeKind::rope) use(l.index, l.rope->spec);  // else l.reason says why
//
// resolve() answers for one layer type; a model mixes them (Gemma 3: five sliding-window layers of
// local RoPE per global one; Llama 4 and SmolLM3: every fourth layer without RoPE; Qwen3-Next: three
// linear-attention layers without RoPE per full-attention one). resolve_layers() gives each layer its
// answer, as transformers builds the model:
//   layer count   num_hidden_layers (n_layer), else the length of layer_types, else of no_rope_layers;
//                 none of them: one row per layer type the family has (index -1), the count unknown.
//                 LongCat-Flash: 2 * num_layers where the file has it (two attention blocks per layer,
//                 LongcatFlashModel's override of num_hidden_layers).
//   layer types   layer_types from the file (its length must be the layer count, as HF checks), else
//                 the class's derivation: Llama 4 "chunked_attention" on RoPE layers, "full_attention"
//                 on NoPE layers; Gemma 2 alternating sliding/full; Gemma 3 and Command R7B every
//                 sliding_window_pattern-th layer (6, 4) "full_attention", the others
//                 "sliding_attention"; Qwen3-Next and Qwen3.5 every full_attention_interval-th (4)
//                 "full_attention", the others "linear_attention"; EXAONE 4 every sliding_window_pattern-th
//                 (4) "full_attention", the others "sliding_attention", or a pattern string ("LLLG") read
//                 as vLLM does, layer i's letter pattern[i % length] (transformers derives nothing from
//                 a string: such configs carry layer_types); LFM2 "full_attention" on
//                 full_attn_idxs (default all), "conv" elsewhere; Granite 4.0-H "mamba" (its
//                 layers_block_type without layer_types); Kimi-Linear "linear_attention" on its
//                 linear_attn_config.kda_layers (1-based), "full_attention" (MLA) elsewhere; SmolLM3 "sliding_attention" on NoPE
//                 layers when use_sliding_window and sliding_window are set; every other family the
//                 layer type resolve() picks by default, on every layer.
//   NoPE          SmolLM3 and Llama 4: no_rope_layers[i] == 0 (the list, else the class default:
//                 NoPE every no_rope_layer_interval-th layer, 4); any family: a layer type it runs
//                 without RoPE (nope_layer_type(): Llama 4 full_attention, Command R7B full_attention,
//                 Qwen3-Next / Qwen3.5 linear_attention, LFM2 conv, EXAONE 4 full_attention unless
//                 "sliding_window" is null, Granite 4.0-H mamba); every layer of a Granite 4.0-H
//                 whose position_embedding_type is not "rope", and of a Kimi-Linear with mla_use_nope
//                 (model_nope_reason()).
//   RoPE          resolve(config, options with that layer type), once per layer type; a layer type it
//                 refuses is a refusal on each of its layers, with resolve()'s message as the reason.
// Throws rotary::error only for a stack that cannot be read: a layer_types or no_rope_layers list of
// the wrong length, a non-positive interval or pattern, more than kHfMaxLayers layers.
#ifndef ROTARY_HF_LAYERS_HPP
#define ROTARY_HF_LAYERS_HPP

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "hf_config.hpp"
#include "types.hpp"

namespace rotary {

// The most layers resolve_layers() accepts (the deepest published models have under 200).
inline constexpr std::int64_t kHfMaxLayers = 1 << 14;

enum class LayerRopeKind { rope, nope, refused };

inline const char* to_string(LayerRopeKind k) noexcept {
  return k == LayerRopeKind::rope ? "rope" : k == LayerRopeKind::nope ? "nope" : "refused";
}

// What one layer (or, with the layer count unknown, one layer type) gets.
struct LayerRope {
  std::int64_t index = -1;  // the layer's index in the stack; -1: a row per layer type
  std::string layer_type;
  LayerRopeKind kind = LayerRopeKind::rope;
  // kind == rope: resolve() for this layer type, shared by every layer of that type (a model of 2^14
  // layers with 2^15 frequencies holds one copy per layer type, not per layer)
  std::shared_ptr<const ResolvedRope> rope;
  std::string reason;                // nope: the rule that says so; refused: resolve()'s message
  // The query scaling this layer applies beside RoPE (hf_keys.hpp): a RoPE layer's is
  // rope->query_scale (Ministral 3); Llama 4's NoPE layers have their temperature tuning.
  QueryScale query_scale;
};

namespace detail {

inline std::int64_t hf_positive_key(const char* key, const std::optional<std::int64_t>& v, std::int64_t fallback) {
  const std::int64_t x = v.value_or(fallback);
  if (x <= 0) throw error(concat(key, " (", x, ") must be positive"));
  return x;
}

// Families whose attention reads no_rope_layers[layer_idx] (SmolLM3Attention, Llama4TextAttention).
inline bool hf_reads_no_rope_layers(const std::string& model_type) {
  return model_type == "smollm3" || model_type == "llama4_text";
}

// The layer count, or nothing when the config does not say.
inline std::optional<std::int64_t> hf_layer_count(const HfConfig& c) {
  std::optional<std::int64_t> n = c.num_hidden_layers;
  if (c.model_type.value_or("") == "longcat_flash" && c.num_layers) {  // LongcatFlashModel overrides the key
    if (*c.num_layers < 0 || *c.num_layers > kHfMaxLayers / 2)
      throw error(concat("num_layers (", *c.num_layers, ") must be in [0, ", kHfMaxLayers / 2, "]"));
    n = 2 * *c.num_layers;
  }
  if (!n && !c.layer_types.empty()) n = static_cast<std::int64_t>(c.layer_types.size());
  if (!n && !c.no_rope_layers.empty()) n = static_cast<std::int64_t>(c.no_rope_layers.size());
  if (n && (*n < 0 || *n > kHfMaxLayers))
    throw error(concat("num_hidden_layers (", *n, ") must be in [0, ", kHfMaxLayers, "]"));
  return n;
}

// Per layer, whether it applies RoPE by no_rope_layers (SmolLM3, Llama 4), else all true.
inline std::vector<bool> hf_rope_by_index(const HfConfig& c, const std::string& model_type, std::int64_t n) {
  std::vector<bool> rope(static_cast<std::size_t>(n), true);
  if (!hf_reads_no_rope_layers(model_type)) return rope;
  if (c.no_rope_layers.empty()) {  // the class default: NoPE every interval-th layer
    const std::int64_t every = hf_positive_key("no_rope_layer_interval", c.no_rope_layer_interval, 4);
    for (std::int64_t i = 0; i < n; ++i) rope[static_cast<std::size_t>(i)] = (i + 1) % every != 0;
    return rope;
  }
  if (static_cast<std::int64_t>(c.no_rope_layers.size()) < n)
    throw error(concat("no_rope_layers has ", c.no_rope_layers.size(), " entries for ", n,
                       " layers (transformers indexes it by layer)"));
  for (std::int64_t i = 0; i < n; ++i)
    rope[static_cast<std::size_t>(i)] = c.no_rope_layers[static_cast<std::size_t>(i)] != 0;
  return rope;
}

// Layer i's type: layer_types[i], else the class's derivation (the table at the top of this header).
inline std::vector<std::string> hf_layer_types(const HfConfig& c, const std::string& model_type,
                                               const std::vector<bool>& rope, std::int64_t n) {
  if (!c.layer_types.empty()) {
    if (static_cast<std::int64_t>(c.layer_types.size()) != n)
      throw error(concat("layer_types has ", c.layer_types.size(), " entries; num_hidden_layers is ", n,
                         " (transformers refuses the config)"));
    return c.layer_types;
  }
  if (!c.sliding_window_pattern_text.empty() && model_type != "exaone4")
    throw error(concat("sliding_window_pattern (\"", c.sliding_window_pattern_text, "\") is a string; ", model_type,
                       " derives its layer types from an integer pattern (give layer_types)"));
  const std::string fallback = default_layer_type(c);
  const auto every = [&](const char* key, const std::optional<std::int64_t>& v, std::int64_t dflt,
                         const char* other) {
    const std::int64_t k = hf_positive_key(key, v, dflt);
    std::vector<std::string> t;
    for (std::int64_t i = 0; i < n; ++i) t.emplace_back((i + 1) % k != 0 ? other : "full_attention");
    return t;
  };
  if (model_type == "gemma2") return every("sliding_window_pattern", std::nullopt, 2, "sliding_attention");
  if (model_type == "gemma3_text") return every("sliding_window_pattern", c.sliding_window_pattern, 6, "sliding_attention");
  if (model_type == "cohere2") return every("sliding_window_pattern", c.sliding_window_pattern, 4, "sliding_attention");
  if (model_type == "qwen3_next" || model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text")
    return every("full_attention_interval", c.full_attention_interval, 4, "linear_attention");
  if (model_type == "exaone4") {
    if (c.sliding_window_null)  // Exaone4Config takes (i + 1) % 0: ZeroDivisionError
      throw error("exaone4 without layer_types and with \"sliding_window\": null: transformers' Exaone4Config "
                  "cannot derive the layer types (it divides by a pattern of 0); give layer_types");
    if (!c.sliding_window_pattern_text.empty()) {  // "LLLG": vLLM's reading (transformers needs layer_types)
      const std::string& pattern = c.sliding_window_pattern_text;
      std::vector<std::string> t;
      for (std::int64_t i = 0; i < n; ++i)
        t.emplace_back(pattern[static_cast<std::size_t>(i) % pattern.size()] == 'L' ? "sliding_attention"
                                                                                     : "full_attention");
      return t;
    }
    return every("sliding_window_pattern", c.sliding_window_pattern, 4, "sliding_attention");
  }
  if (model_type == "granitemoehybrid") return std::vector<std::string>(static_cast<std::size_t>(n), "mamba");
  if (model_type == "deepseek_v4") {  // DeepseekV4Config: compress_ratios 0 / 4 / 128, any other value a KeyError
    if (static_cast<std::int64_t>(c.compress_ratios.size()) < n)
      throw error(concat("deepseek_v4 without layer_types needs compress_ratios for its ", n, " layers (has ",
                         c.compress_ratios.size(), ")"));
    std::vector<std::string> t;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t r = c.compress_ratios[static_cast<std::size_t>(i)];
      if (r != 0 && r != 4 && r != 128)
        throw error(concat("compress_ratios[", i, "] (", r, "): deepseek_v4 knows 0, 4 and 128"));
      t.emplace_back(r == 0 ? "sliding_attention" : r == 4 ? "compressed_sparse_attention" : "heavily_compressed_attention");
    }
    return t;
  }
  if (model_type == "minimax") {  // MiniMaxConfig: layer i attends with softmax where i + 1 is odd
    std::vector<std::string> t;
    for (std::int64_t i = 0; i < n; ++i) t.emplace_back((i + 1) % 2 != 0 ? "full_attention" : "linear_attention");
    return t;
  }
  if (model_type == "kimi_linear" && !c.kda_layers.empty()) {  // kda_layers are 1-based
    std::vector<std::string> t(static_cast<std::size_t>(n), "full_attention");
    for (const std::int64_t k : c.kda_layers)
      if (k >= 1 && k <= n) t[static_cast<std::size_t>(k - 1)] = "linear_attention";
    return t;
  }
  if (model_type == "lfm2") {  // Lfm2Config: full_attn_idxs (default: every layer) attend, the rest convolve
    std::vector<std::string> t(static_cast<std::size_t>(n), c.full_attn_idxs.empty() ? "full_attention" : "conv");
    for (const std::int64_t i : c.full_attn_idxs)
      if (i >= 0 && i < n) t[static_cast<std::size_t>(i)] = "full_attention";
    return t;
  }
  std::vector<std::string> t(static_cast<std::size_t>(n), fallback);
  for (std::int64_t i = 0; i < n; ++i) {
    const bool r = rope[static_cast<std::size_t>(i)];
    if (model_type == "llama4_text") t[static_cast<std::size_t>(i)] = r ? "chunked_attention" : "full_attention";
    if (model_type == "smollm3")
      t[static_cast<std::size_t>(i)] =
          c.use_sliding_window.value_or(false) && c.has_sliding_window && !r ? "sliding_attention" : "full_attention";
  }
  return t;
}

// Llama 4's temperature tuning of its NoPE layers (Llama4TextAttention), if on; else none.
inline QueryScale hf_nope_query_scale(const HfConfig& c, const std::string& model_type) {
  if (model_type != "llama4_text" || !c.attn_temperature_tuning.value_or(true)) return {};
  const double beta = c.attn_scale.value_or(0.1);
  const std::int64_t period = c.floor_scale.value_or(8192);
  if (!finite(beta) || period < 2)
    throw error(concat("attn_scale (", beta, ") must be finite and floor_scale (", period, ") at least 2"));
  return QueryScale{beta, period, 1};
}

// The answer for one layer type, with the layer's own NoPE rule already applied.
inline LayerRope hf_layer_answer(const HfConfig& c, const ResolveOptions& options, const std::string& layer_type) {
  LayerRope l;
  l.layer_type = layer_type;
  const std::string nope = nope_layer_type(c);
  if (!nope.empty() && layer_type == nope) {
    l.kind = LayerRopeKind::nope;
    l.reason = concat(c.model_type.value_or(""), " applies no rotary embedding on its \"", layer_type, "\" layers");
    l.query_scale = hf_nope_query_scale(c, c.model_type.value_or(""));
    return l;
  }
  if (std::string why = model_nope_reason(c); !why.empty()) {
    l.kind = LayerRopeKind::nope;
    l.reason = std::move(why);
    return l;
  }
  ResolveOptions o = options;
  o.layer_type = layer_type;
  try {
    l.rope = std::make_shared<const ResolvedRope>(resolve(c, o));
    l.query_scale = l.rope->query_scale;
  } catch (const error& e) {
    l.kind = LayerRopeKind::refused;
    l.reason = e.what();
  }
  return l;
}

}  // namespace detail

// Every layer's RoPE (see the top of this header). options.layer_type is ignored: each layer has its own.
inline std::vector<LayerRope> resolve_layers(const HfConfig& config, const ResolveOptions& options = {}) {
  const std::string model_type = config.model_type.value_or("");
  const std::optional<std::int64_t> count = detail::hf_layer_count(config);
  std::vector<LayerRope> out;
  if (!count) {  // one row per layer type the config or the family names
    std::vector<std::string> types{default_layer_type(config)};
    for (const auto& kv : config.per_layer_type) types.push_back(kv.first);
    if (const std::string nope = nope_layer_type(config); !nope.empty()) types.push_back(nope);
    for (const std::string& t : types) {
      bool seen = false;
      for (const LayerRope& l : out) seen = seen || l.layer_type == t;
      if (!seen) out.push_back(detail::hf_layer_answer(config, options, t));
    }
    return out;
  }
  const std::vector<bool> rope = detail::hf_rope_by_index(config, model_type, *count);
  const std::vector<std::string> types = detail::hf_layer_types(config, model_type, rope, *count);
  std::map<std::string, LayerRope> by_type;
  for (std::int64_t i = 0; i < *count; ++i) {
    const std::string& t = types[static_cast<std::size_t>(i)];
    LayerRope l;
    if (!rope[static_cast<std::size_t>(i)]) {
      l.layer_type = t;
      l.kind = LayerRopeKind::nope;
      l.reason = detail::concat("no_rope_layers[", i, "] is 0: ", model_type, " applies no rotary embedding here");
      l.query_scale = detail::hf_nope_query_scale(config, model_type);
    } else {
      auto it = by_type.find(t);
      if (it == by_type.end()) it = by_type.emplace(t, detail::hf_layer_answer(config, options, t)).first;
      l = it->second;
    }
    l.index = i;
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace rotary

#endif  // ROTARY_HF_LAYERS_HPP
