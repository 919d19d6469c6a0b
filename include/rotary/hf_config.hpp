// rotary — Hugging Face model configs: the rope-relevant fields of config.json and how they resolve
// to a RotarySpec, scaling parameters and frequencies, as transformers reads them.
//
// No JSON here: fill HfConfig from whatever parser you use, or use rotary/hf_json.hpp (optional,
// needs nlohmann-json; not included by rotary.hpp). Every field is optional, exactly as in
// config.json; resolve() applies the model family's class defaults (the values transformers'
// configuration_<family>.py gives a key the file omits, see hf_families.hpp) and HF's precedence:
//
//   head_dim      DeepSeek-V4: its rotated slice, int(head_dim * partial_rotary_factor), the last values
//                 of each head (hf_keys.hpp); else
//                 qk_rope_head_dim (DeepSeek-V2/V3 MLA: the rotated slice of each head), else
//                 head_dim (if > 0), else hidden_size / num_attention_heads (integer division, as HF
//                 does). n_embd and n_embed are names of hidden_size, n_head of num_attention_heads
//                 (GPT-J, CodeGen, Falcon's attribute maps). Each from the file, else the class default.
//                 At most kHfMaxHeadDim (2^16) however obtained: hidden_size 2^20 over 1 head is refused.
//                 Gemma 4's full_attention layers: global_head_dim (class default 512), over which HF
//                 builds their proportional RoPE; another rope_type there is refused.
//   rotary_dim    rotary_dim (GPT-J, CodeGen), else int(head_dim * f) with f = partial_rotary_factor
//                 (top level, else inside the rope parameters), else rotary_pct (GPT-NeoX), else the
//                 class default, else 1; int() truncates as Python does; the result must be even.
//                 rope_type "proportional" (Gemma 4) rotates the whole head_dim: the rule itself
//                 zeroes the frequencies of the pairs past f * head_dim / 2, so its rotary_dim is head_dim.
//                 MiniMax (minimax): the whole head_dim, as transformers (rotary_dim with
//                 EngineQuirks::vllm_minimax_rotary_dim, as vLLM; a rotary_dim key is a warning).
//   rope_theta    rope_theta, else rotary_emb_base (GPT-NeoX, Pythia), else rope_scaling->rope_theta
//                 when it differs from RopeParameters' 10000 (the JSON adapter moves a dict's theta to
//                 rope_theta, so this only serves callers filling HfConfig by hand), else the class
//                 default (Gemma-3 1e6, Mixtral 1e6, gpt-oss 150000, ...), else 10000.
//                 A per-layer-type entry carries its own rope_theta. It must be > 0 and finite, and
//                 > 1 for yarn (its correction range divides by ln rope_theta).
//   max positions max_position_embeddings, else n_positions (GPT-J, CodeGen), else the class default.
//   original_max_position_embeddings (llama3, yarn, longrope): the top-level key wins over the one in
//                 rope_scaling (Phi-3 keeps it at the top level), else the rope_scaling value, else
//                 (yarn, longrope) max_position_embeddings; llama3 without it is an error (see
//                 scaling.hpp). For per-layer-type entries the entry's own value wins.
//   rope_type     HF's legacy `type` key is the same field (map it to rope_type when parsing);
//                 "su" (early Phi-3 configs) means "longrope"; "mrope" (Qwen2-VL, Qwen2.5-VL) means
//                 "default" (Qwen2VLConfig rewrites it so) and needs mrope_section.
//   M-RoPE        mrope_section (and mrope_interleaved, Qwen3-VL) in the rope parameters are reported
//                 in ResolvedRope, checked: each entry in [0, rotary_dim/2], summing to rotary_dim/2.
//                 The MultiAxisRope (multi_axis.hpp):
//                   AxisMap map = r.mrope_interleaved
//                       ? interleaved_mrope_axis_map(r.spec.effective_rotary_dim(), r.mrope_section)
//                       : mrope_axis_map(r.spec.effective_rotary_dim(), r.mrope_section);
//                   MultiAxisRope<float> mrope(r.spec, std::move(map), max_position);
//   layer types   ResolveOptions::layer_type, empty = the family's RoPE layer type (full_attention;
//                 Llama 4: chunked_attention; Command R7B: sliding_attention). per_layer_type (the
//                 nested `rope_parameters`, keyed "full_attention", "sliding_attention", ...) picks that
//                 entry. Without it, Gemma-3's rope_local_base_freq (class default 1e4) gives
//                 "sliding_attention" layers plain RoPE with that theta (no scaling), as HF's Gemma3
//                 does; OLMo 3's "sliding_attention" layers take plain RoPE with its rope_theta (no
//                 scaling); every other layer type uses rope_scaling. Layer types a family runs without
//                 RoPE (Llama 4's full_attention layers, Command R7B's full_attention layers, Qwen3-Next's
//                 linear_attention layers, LFM2's conv layers, hybrid EXAONE 4's full_attention layers:
//                 nope_layer_type()) throw; rotary::resolve_layers (hf_layers.hpp) answers per layer. SmolLM3 picks its NoPE layers by index
//                 (no_rope_layers), which resolve() does not read: its RoPE layers are full_attention.
//   pairing       ResolveOptions::pairing, else rope_interleave (DeepSeek-V3 in HF), else the family's
//                 (hf_families(); checked against each family's modeling code). An unknown or absent
//                 model_type without one of the first two is refused: config.json does not say.
//   ALiBi         alibi: true (Falcon-RW) has no rotary embedding: an error.
// Warnings (ResolvedRope::warnings, after HfConfig::warnings from the parser): things transformers
// would also accept but a caller should see (unknown family, misspelt keys found by the parser, ...).
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
#include "hf_families.hpp"  // IWYU pragma: export
#include "hf_keys.hpp"      // IWYU pragma: export
#include "scaling.hpp"
#include "types.hpp"

namespace rotary {

struct ResolveOptions {
  std::string layer_type;               // empty: the family's RoPE layer type (default_layer_type)
  std::optional<std::int64_t> seq_len;  // the length dynamic NTK and longrope switching see
  std::optional<Pairing> pairing;       // overrides the model family's pairing
  EngineQuirks quirks{};
};

struct ResolvedRope {
  RotarySpec spec;        // head_dim, rotary_dim, base = rope_theta, pairing, frequencies
  RopeParameters params;  // after HF's defaults: rope_type, rope_theta, original_max_position_embeddings
  ScalingInput input;     // what scaled_frequencies saw
  Frequencies freqs;      // theta_j (rotary_dim/2 values) and the attention factor
  std::string layer_type;  // the layer type resolved
  // M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5): the rope parameters' mrope_section (empty for
  // 1-D RoPE) and whether the sections interleave (Qwen3-VL, Qwen3.5); the AxisMap recipe is at the
  // top of this header.
  std::vector<std::int64_t> mrope_section;
  bool mrope_interleaved = false;
  // Not RoPE but decided by the same keys: DeepSeek-V2/V3 multiply the softmax scale
  // 1/sqrt(qk_head_dim) by m(factor, mscale_all_dim)^2 whenever rope_scaling is yarn (HF's
  // DeepseekV3Attention and DeepSeek's own code). 1 for every other family. An engine that takes
  // attention_factor from here and the softmax scale from head_dim alone misses this factor.
  double softmax_scale_factor = 1.0;
  // Also beside the rotation: Ministral 3 scales its queries by position (llama_4_scaling_beta,
  // QueryScale in hf_keys.hpp); inactive (beta 0) for every other family.
  QueryScale query_scale;
  // DeepSeek-V4 (K = V): the attention output's rope slice (the last head_dim values of each head)
  // picked up the keys' rotation; DeepseekV4Attention rotates it back at the query positions with this
  // layer's cos/sin: apply(..., Direction::inverse) on that slice. false for every other family.
  bool inverse_on_output = false;
  std::vector<std::string> warnings;  // the config's, then resolve()'s
};

namespace detail {

inline bool hf_needs_original_max(const std::string& t) {
  return t == "llama3" || t == "yarn" || t == "longrope";
}

// DeepSeek's MLA: yarn's mscale(factor, mscale_all_dim)^2 on the softmax scale (LongCat-Flash's
// attention is DeepSeek-V3's, yarn_apply_mscale).
inline bool hf_is_deepseek(std::string_view m) {
  return m == "deepseek_v2" || m == "deepseek_v3" || m == "kimi_k2" || m == "longcat_flash";
}

}  // namespace detail

// ---- resolve(): HF's rules, one step each ----------------------------------------------------------

namespace detail {

// What resolve() has decided so far. Each step below reads it and adds to it; they run in the
// order of kHfResolveSteps, which is HF's precedence and the order of resolve()'s errors.
struct HfResolution {
  HfResolution(const HfConfig& c, const ResolveOptions& o)
      : config(c), options(o), model_type(c.model_type.value_or("")), family(find_hf_family(model_type)) {}

  const HfConfig& config;
  const ResolveOptions& options;
  const std::string model_type;
  const HfFamily* const family;
  std::int64_t head_dim = 0;
  std::string layer_type;
  RopeParameters p;        // the rope parameters of this layer type, HF's defaults filled in
  bool per_layer = false;  // p is an entry of per_layer_type
  std::optional<std::int64_t> max_pos;
  std::int64_t rotary_dim = 0;
  std::optional<Pairing> pairing;
  ResolvedRope r;
};

// The config's warnings, an unknown family's, the ALiBi refusal and the head geometry.
inline void hf_resolve_family(HfResolution& s) {
  s.r.warnings = s.config.warnings;
  if (!s.family)
    s.r.warnings.push_back(concat(
        s.model_type.empty() ? std::string("model_type is absent")
                             : concat("model_type '", s.model_type, "' is not a family rotary has checked"),
        ": no class defaults (rope_theta 10000 where the config has none)"));
  if (s.config.alibi && *s.config.alibi)
    throw error(concat("alibi (true): model_type '", s.model_type,
                       "' with ALiBi has no rotary position embedding"));
  if (s.model_type == "hunyuan") {  // the paths of HunYuan's remote code rotary has not checked
    const HfConfig& c = s.config;
    if (c.position_embedding_xdrope.value_or(false) || c.use_mla.value_or(false))
      throw error(concat("hunyuan with ", c.use_mla.value_or(false) ? "use_mla" : "position_embedding_xdrope",
                         " true: a path of HunYuan's remote code rotary has not checked"));
    if (c.rope_scaling && c.rope_scaling->rope_type == "yarn")
      throw error("hunyuan with rope_scaling yarn: HunYuan's remote yarn rotary embedding is not one rotary has "
                  "checked");
  }
  s.head_dim = hf_head_dim(s.config, s.family);
  // LongcatFlashRotaryEmbedding sizes its table by head_dim while the attention rotates the
  // qk_rope_head_dim slice (vLLM and Meituan's code use qk_rope_head_dim): equal in every config, or
  // transformers' cos/sin would not match the slice.
  if (s.model_type == "longcat_flash" && s.config.head_dim && *s.config.head_dim != 0 &&
      *s.config.head_dim != s.head_dim)
    throw error(concat("longcat_flash: head_dim (", *s.config.head_dim, ") differs from qk_rope_head_dim (",
                       s.head_dim, "): transformers builds the rotary table over head_dim and applies it to the "
                       "qk_rope_head_dim slice"));
}

// 1. The layer type: the caller's, else the family's RoPE layer type; a NoPE layer type is refused.
inline void hf_resolve_layer_type(HfResolution& s) {
  s.layer_type = s.options.layer_type.empty() ? default_layer_type(s.config) : s.options.layer_type;
  if (const std::string why = model_nope_reason(s.config); !why.empty()) throw error(why);
  const std::string nope = nope_layer_type(s.config);
  if (!nope.empty() && s.layer_type == nope)
    throw error(concat("layer_type (\"", s.layer_type, "\"): ", s.model_type,
                       " applies no rotary embedding on these layers (NoPE); its RoPE layers are \"",
                       default_layer_type(s.config), "\""));
}

// Its entry of the nested rope_parameters, complete as it stands.
inline void hf_layer_entry(HfResolution& s) {
  const auto it = s.config.per_layer_type.find(s.layer_type);
  if (it == s.config.per_layer_type.end()) {
    std::string have;
    for (const auto& kv : s.config.per_layer_type) have += (have.empty() ? "" : ", ") + kv.first;
    throw error(concat("layer_type (\"", s.layer_type, "\") has no entry in rope_parameters (", have, ")"));
  }
  s.p = it->second;
  s.per_layer = true;
}

// rope_scaling, else the class's default rope_scaling (Gemma 4's full_attention layers, Apertus,
// Ministral 3, gpt-oss).
inline void hf_shared_scaling(HfResolution& s) {
  RopeParameters& p = s.p;
  if (s.config.rope_scaling) {
    p = *s.config.rope_scaling;
  } else if (s.model_type == "gemma4_text" && s.layer_type == "full_attention") {  // Gemma4TextConfig's default
    p.rope_type = "proportional";
    p.partial_rotary_factor = 0.25;
  } else if (s.model_type == "apertus") {  // ApertusConfig's rope_parameters default
    p.rope_type = "llama3";
    p.factor = 8.0;
    p.original_max_position_embeddings = 8192;
    p.low_freq_factor = 1.0;
    p.high_freq_factor = 4.0;
  } else if (s.model_type == "ministral3") {  // Ministral3Config's rope_parameters default
    p.rope_type = "yarn";
    p.factor = 16.0;
    p.original_max_position_embeddings = 16384;
    p.beta_fast = 32.0;
    p.beta_slow = 1.0;
    p.mscale = 1.0;
    p.mscale_all_dim = 1.0;
    p.llama_4_scaling_beta = 0.1;
  } else if (s.model_type == "gpt_oss") {  // GptOssConfig's rope_scaling default
    p.rope_type = "yarn";
    p.factor = 32.0;
    p.beta_fast = 32.0;
    p.beta_slow = 1.0;
    p.truncate = false;
    p.original_max_position_embeddings = 4096;
  }
}

// rope_theta, else rotary_emb_base, else the dict's own theta, else the class default (else 10000).
inline void hf_shared_theta(HfResolution& s) {
  const HfConfig& config = s.config;
  const double class_theta = s.family && s.family->rope_theta > 0.0 ? s.family->rope_theta : 10000.0;
  const bool dict_theta = config.rope_scaling && config.rope_scaling->rope_theta != RopeParameters{}.rope_theta;
  if (config.rope_theta)
    s.p.rope_theta = *config.rope_theta;
  else if (config.rotary_emb_base)
    s.p.rope_theta = *config.rotary_emb_base;
  else if (!dict_theta) {
    hf_no_null_default(config, "rope_theta");
    s.p.rope_theta = class_theta;
  }
}

// The top-level keys, one set for every layer type the config knows: Gemma-3's local layers take
// default RoPE at rope_local_base_freq, the others rope_scaling and the shared theta.
inline void hf_shared_parameters(HfResolution& s) {
  const HfConfig& config = s.config;
  const std::string& layer_type = s.layer_type;
  bool known = layer_type == "full_attention" || layer_type == "sliding_attention" ||
               (s.family && layer_type == s.family->rope_layer_type);
  for (const auto& t : config.layer_types) known = known || t == layer_type;
  if (!known)
    throw error(concat("layer_type (\"", layer_type, "\") is neither full_attention, sliding_attention nor in ",
                       "layer_types"));
  std::optional<double> local = config.rope_local_base_freq;
  if (!local && s.family && s.family->rope_local_base_freq > 0.0) {
    hf_no_null_default(config, "rope_local_base_freq");
    local = s.family->rope_local_base_freq;
  }
  if (layer_type == "sliding_attention" && local) {
    s.p.rope_theta = *local;  // Gemma-3: local layers use default RoPE
    return;
  }
  hf_shared_scaling(s);
  hf_shared_theta(s);
  // OLMo 3's sliding-window layers: Olmo3RotaryEmbedding(config, rope_type="default"), the same
  // rope_theta without the rope_scaling
  if (layer_type == "sliding_attention" && s.model_type == "olmo3") {
    const double theta = s.p.rope_theta;
    s.p = RopeParameters{};
    s.p.rope_theta = theta;
  }
}

// The parameters of this layer type: its per-layer-type entry, else the top-level keys.
inline void hf_resolve_parameters(HfResolution& s) {
  if (s.model_type == "deepseek_v4")
    s.p = deepseek_v4_parameters(s.config, s.layer_type);
  else if (!s.config.per_layer_type.empty())
    hf_layer_entry(s);
  else
    hf_shared_parameters(s);
}

// rope_type's aliases ("su", "mrope"), and rope_theta positive and finite.
inline void hf_resolve_rope_type(HfResolution& s) {
  RopeParameters& p = s.p;
  if (p.rope_type.empty()) p.rope_type = "default";
  if (p.rope_type == "su") p.rope_type = "longrope";
  if (p.rope_type == "mrope") {  // Qwen2VLConfig: {"type": "mrope"} is default RoPE over sections
    if (p.mrope_section.empty())
      throw error("rope_type 'mrope' needs mrope_section (the pairs each position stream drives)");
    p.rope_type = "default";
  }
  if (!(p.rope_theta > 0.0) || !finite(p.rope_theta))
    throw error(concat("rope_theta (", p.rope_theta, ") must be positive and finite"));
  // rope_type 'yarn' needs rope_theta > 1 as well: validate() (step 6) refuses it with the other rules.
}

// Gemma 4's full_attention heads are global_head_dim wide (class default 512), and HF's
// Gemma4TextRotaryEmbedding builds their frequencies over it (head_dim_key="global_head_dim") for
// rope_type 'proportional' only: any other rule would span head_dim, which does not fit them.
inline void hf_resolve_global_head_dim(HfResolution& s) {
  if (s.model_type != "gemma4_text" || s.layer_type != "full_attention") return;
  const std::int64_t g =
      s.config.global_head_dim ? hf_head_dim_capped("global_head_dim", *s.config.global_head_dim) : 512;
  if (g == s.head_dim) return;
  if (s.p.rope_type != "proportional")
    throw error(concat("layer_type (\"full_attention\"): gemma4_text's full_attention heads are global_head_dim (",
                       g, ") wide, and HF builds their frequencies over it for rope_type 'proportional' only; "
                       "rope_type '", s.p.rope_type, "' would span head_dim (", s.head_dim,
                       "), which does not fit them"));
  s.head_dim = g;
}

// 2. max_position_embeddings and the pre-extension length.
inline void hf_resolve_max_positions(HfResolution& s) {
  const HfConfig& config = s.config;
  RopeParameters& p = s.p;
  std::optional<std::int64_t>& max_pos = s.max_pos;
  max_pos = config.max_position_embeddings;
  const char* max_key = "max_position_embeddings";
  if (!max_pos && config.n_positions) {
    max_pos = config.n_positions;
    max_key = "n_positions";
  }
  // A null max_position_embeddings stays unset: refused below where the rope type needs it.
  const bool max_null = hf_null(config, max_key);
  if (!max_pos && !max_null && s.family && s.family->max_position_embeddings)
    max_pos = s.family->max_position_embeddings;
  if (max_pos) hf_positive(max_key, *max_pos);
  if (hf_needs_original_max(p.rope_type)) {
    if (!config.original_max_position_embeddings && s.family && s.family->original_max_position_embeddings)
      hf_no_null_default(config, "original_max_position_embeddings");
    const std::optional<std::int64_t> top_l0 =
        hf_or(config.original_max_position_embeddings, s.family ? s.family->original_max_position_embeddings : 0);
    // The top-level attribute (the file's, else Phi-3's class default 4096) wins, as HF 4.x's
    // `hasattr(config, "original_max_position_embeddings")` does; a per-layer entry's own value wins.
    if (top_l0 && !(s.per_layer && p.original_max_position_embeddings)) p.original_max_position_embeddings = top_l0;
    // yarn/longrope: L0 defaults to L (as HF). llama3 keeps it required: scaling.hpp rejects a llama3
    // without its pre-training length, where HF would fill in L and warn.
    if (!p.original_max_position_embeddings && p.rope_type != "llama3") p.original_max_position_embeddings = max_pos;
  }
  if (!max_pos && (p.rope_type == "dynamic" || p.rope_type == "longrope" ||
                   (p.rope_type == "yarn" && !(p.factor && p.original_max_position_embeddings))))
    throw error(concat("max_position_embeddings: rope_type '", p.rope_type, "' needs it and the config has ",
                       max_null ? "it as null (transformers' class gets None)" : "neither it nor n_positions"));
}

// 3. rotary_dim. MiniMax first: transformers' MiniMaxRotaryEmbedding builds its default frequencies
// over the whole head_dim and reads neither rotary_dim nor partial_rotary_factor (its attention
// rotates q and k whole, so a narrower table from another rope_type would not broadcast: refused);
// vLLM's MiniMaxText01 rotates config.rotary_dim where the config has one (EngineQuirks).
inline bool hf_resolve_minimax_rotary_dim(HfResolution& s) {
  if (s.model_type != "minimax") return false;
  const HfConfig& config = s.config;
  const std::int64_t head_dim = s.head_dim;
  if (s.options.quirks.vllm_minimax_rotary_dim) {
    s.rotary_dim = config.rotary_dim.value_or(head_dim);
    if (s.rotary_dim <= 0 || s.rotary_dim % 2 != 0 || s.rotary_dim > head_dim)
      throw error(concat("rotary_dim (", s.rotary_dim, ") must be even, positive and <= head_dim (", head_dim, ")"));
    return true;
  }
  const std::optional<double> factor = config.partial_rotary_factor ? config.partial_rotary_factor
                                                                     : s.p.partial_rotary_factor;
  if (factor && *factor != 1.0 && s.p.rope_type != "default")
    throw error(concat("minimax with partial_rotary_factor ", *factor, " and rope_type '", s.p.rope_type,
                       "': transformers' MiniMax rotates the whole head, which that table would not cover"));
  s.rotary_dim = head_dim;
  if (config.rotary_dim && *config.rotary_dim != head_dim)
    s.r.warnings.push_back(concat("minimax: rotary_dim ", *config.rotary_dim, " is not read by transformers, which "
                                  "rotates the whole head_dim ", head_dim, "; vLLM rotates ", *config.rotary_dim,
                                  " (ResolveOptions::quirks.vllm_minimax_rotary_dim)"));
  if (factor && *factor != 1.0)
    s.r.warnings.push_back(concat("minimax: partial_rotary_factor ", *factor, " is not read by transformers' "
                                  "MiniMax, which rotates the whole head_dim ", head_dim));
  return true;
}

inline void hf_resolve_rotary_dim(HfResolution& s) {
  if (hf_resolve_minimax_rotary_dim(s)) return;
  if (s.model_type == "deepseek_v4") {  // head_dim is already the rotated slice
    s.rotary_dim = s.head_dim;
    return;
  }
  const HfConfig& config = s.config;
  RopeParameters& p = s.p;
  const std::int64_t head_dim = s.head_dim;
  std::optional<double> factor = config.partial_rotary_factor;
  const char* factor_key = "partial_rotary_factor";
  if (!factor) factor = p.partial_rotary_factor;
  if (!factor && config.rotary_pct) {
    factor = config.rotary_pct;
    factor_key = "rotary_pct";
  }
  if (!factor && !config.rotary_dim && s.family && s.family->rotary_dim != 0) hf_no_null_default(config, "rotary_dim");
  const std::optional<std::int64_t> explicit_rotary_dim =
      factor ? config.rotary_dim : hf_or(config.rotary_dim, s.family ? s.family->rotary_dim : 0);
  if (!factor && !explicit_rotary_dim && s.family && s.family->partial_rotary_factor > 0.0) {
    hf_no_null_default(config, "partial_rotary_factor");
    factor = s.family->partial_rotary_factor;
    factor_key = "partial_rotary_factor (class default)";
  }
  if (factor && (!(*factor > 0.0) || !(*factor <= 1.0)))
    throw error(concat(factor_key, " (", *factor, ") must be in (0, 1]"));
  std::int64_t& rotary_dim = s.rotary_dim;
  if (p.rope_type == "proportional") {
    rotary_dim = head_dim;
    if (factor) p.partial_rotary_factor = factor;
  } else if (explicit_rotary_dim) {
    rotary_dim = *explicit_rotary_dim;
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
}

// 4. Pairing: the caller's, else the config's rope_interleave (DeepSeek-V3), else the family's; a
// model nobody has checked is refused rather than given rotate_half's pairs.
inline void hf_resolve_pairing(HfResolution& s) {
  s.pairing = s.options.pairing;
  if (!s.pairing && s.config.rope_interleave)
    s.pairing = *s.config.rope_interleave ? Pairing::interleaved : Pairing::half_split;
  if (!s.pairing) s.pairing = known_pairing(s.model_type);
  if (!s.pairing) throw error(unknown_pairing_message(s.model_type));
}

// Qwen3.5's rotary embedding takes mrope_section [11, 11, 10] when the config has none and always
// interleaves the sections (Qwen3VLTextRotaryEmbedding's layout; it never reads mrope_interleaved,
// which vLLM does read: a config saying false is warned about).
inline void hf_resolve_qwen3_5_mrope(HfResolution& s) {
  if (s.model_type != "qwen3_5_text" && s.model_type != "qwen3_5_moe_text") return;
  RopeParameters& p = s.p;
  if (p.mrope_section.empty()) p.mrope_section = {11, 11, 10};
  if (p.mrope_interleaved && !*p.mrope_interleaved)
    s.r.warnings.push_back(concat("mrope_interleaved (false): ", s.model_type,
                                  "'s modeling code interleaves the M-RoPE sections whatever it says (vLLM "
                                  "reads it); resolved interleaved"));
  p.mrope_interleaved = true;
}

// 5. M-RoPE sections: they must cover the rotated pairs (HF's torch.split would fail otherwise).
// Each entry is at most rotary_dim/2 and the sum stops once it passes rotary_dim/2, so it stays
// below 2 * rotary_dim/2 and cannot overflow.
inline void hf_resolve_mrope_sections(HfResolution& s) {
  const std::vector<std::int64_t>& sections = s.p.mrope_section;
  if (sections.empty()) return;
  const std::int64_t pairs = s.rotary_dim / 2;
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < sections.size() && sum <= pairs; ++i) {
    const std::int64_t v = sections[i];
    if (v < 0 || v > pairs)
      throw error(concat("mrope_section[", i, "] (", v, ") must be in [0, rotary_dim/2 = ", pairs, "]"));
    sum += v;
  }
  if (sum > pairs) throw error(concat("mrope_section sums to more than rotary_dim/2 (", pairs, ")"));
  if (sum != pairs) throw error(concat("mrope_section sums to ", sum, " but rotary_dim/2 is ", pairs));
}

// 6. Frequencies: the spec, validate() and scaled_frequencies(), and DeepSeek's softmax factor.
// Ministral 3's query scaling: llama_4_scaling_beta over the dict's original_max_position_embeddings.
inline void hf_resolve_query_scale(HfResolution& s) {
  const RopeParameters& p = s.p;
  if (!p.llama_4_scaling_beta || *p.llama_4_scaling_beta == 0.0) return;
  if (!finite(*p.llama_4_scaling_beta))
    throw error(concat("llama_4_scaling_beta (", *p.llama_4_scaling_beta, ") must be finite"));
  if (!p.original_max_position_embeddings)
    throw error(concat("llama_4_scaling_beta (", *p.llama_4_scaling_beta, ") scales queries by position over "
                       "original_max_position_embeddings, which the rope parameters do not give"));
  s.r.query_scale = QueryScale{*p.llama_4_scaling_beta, *p.original_max_position_embeddings, 0};
}

inline void hf_resolve_frequencies(HfResolution& s) {
  const ResolveOptions& options = s.options;
  RopeParameters& p = s.p;
  ResolvedRope& r = s.r;
  if (options.seq_len && *options.seq_len < 0)
    throw error(concat("seq_len (", *options.seq_len, ") must be >= 0"));
  r.layer_type = s.layer_type;
  r.spec = RotarySpec(s.head_dim, *s.pairing, p.rope_theta, s.rotary_dim);
  r.spec.validate();
  r.input.head_dim = s.head_dim;
  r.input.rotary_dim = s.rotary_dim;
  r.input.max_position_embeddings = s.max_pos.value_or(0);
  r.input.seq_len = options.seq_len;
  validate(p, r.input);
  r.freqs = scaled_frequencies(p, r.input, options.quirks);
  r.spec.frequencies = r.freqs;  // so Rope<T>(r.spec, n) and everything built from the spec keep the scaling
  r.mrope_section = p.mrope_section;
  r.mrope_interleaved = p.mrope_interleaved.value_or(false);
  if (hf_is_deepseek(s.model_type) && p.rope_type != "default" && p.factor && p.mscale_all_dim &&
      *p.mscale_all_dim != 0.0) {
    const double m = yarn_mscale(*p.factor, *p.mscale_all_dim);
    r.softmax_scale_factor = m * m;
  }
  hf_resolve_query_scale(s);
  r.inverse_on_output = s.model_type == "deepseek_v4";
  r.params = std::move(p);
}

// resolve()'s steps in order: each may throw, and the first rule a config breaks names the error.
using HfResolveStep = void (*)(HfResolution&);
inline constexpr HfResolveStep kHfResolveSteps[] = {
    hf_resolve_family,          hf_resolve_layer_type, hf_resolve_parameters,   hf_resolve_rope_type,
    hf_resolve_global_head_dim, hf_resolve_max_positions, hf_resolve_rotary_dim, hf_resolve_pairing,
    hf_resolve_qwen3_5_mrope,   hf_resolve_mrope_sections, hf_resolve_frequencies,
};

}  // namespace detail

// Resolves `config` for one layer type: head geometry, pairing, HF-standardized parameters, then
// validate() + scaled_frequencies(). Throws rotary::error naming the offending key and its value.
inline ResolvedRope resolve(const HfConfig& config, const ResolveOptions& options = {}) {
  detail::HfResolution s(config, options);
  for (const detail::HfResolveStep step : detail::kHfResolveSteps) step(s);
  return std::move(s.r);
}

}  // namespace rotary

#endif  // ROTARY_HF_CONFIG_HPP
