// rotary — Hugging Face model configs: the rope-relevant fields of config.json and how they resolve
// to a RotarySpec, scaling parameters and frequencies, as transformers reads them.
//
// No JSON here: fill HfConfig from whatever parser you use, or use rotary/hf_json.hpp (optional,
// needs nlohmann-json; not included by rotary.hpp). Every field is optional, exactly as in
// config.json; resolve() applies the model family's class defaults (the values transformers'
// configuration_<family>.py gives a key the file omits, see hf_families()) and HF's precedence:
//
//   head_dim      qk_rope_head_dim (DeepSeek-V2/V3 MLA: the rotated slice of each head), else
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
//                 linear_attention layers) throw. SmolLM3 picks its NoPE layers by index
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

  std::optional<bool> rope_interleave;  // DeepSeek-V3 in HF: true = interleaved pairs
  std::optional<bool> alibi;            // Falcon: true = ALiBi, no rotary embedding

  std::vector<std::string> warnings;  // from the parser (misspelt or ignored keys); resolve() passes them on
};

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
  std::vector<std::string> warnings;  // the config's, then resolve()'s
};

// What transformers' configuration class of a family supplies when config.json omits a key, and how
// its modeling code pairs coordinates. 0 / empty = the class has no such default. Sources:
// src/transformers/models/<family>/configuration_<family>.py (defaults) and modeling_<family>.py
// (pairing: rotate_half = half_split; rotate_every_two, complex view_as_complex(...reshape(.., 2)),
// GLM/Cohere's stack((-x2, x1)).flatten = interleaved). Values marked "?" in hf_families() are ones
// we could not check against the source and which published configs always set explicitly.
struct HfFamily {
  std::string_view model_type;
  Pairing pairing;
  double rope_theta;  // 0: 10000
  std::int64_t max_position_embeddings;
  std::int64_t hidden_size, num_attention_heads, head_dim, qk_rope_head_dim;
  double partial_rotary_factor;  // 0: none (1)
  std::int64_t rotary_dim;       // 0: none
  double rope_local_base_freq;   // 0: none
  std::int64_t original_max_position_embeddings;
  std::string_view rope_layer_type;  // the layer type resolve() picks by default
  std::string_view nope_layer_type;  // layers of this type carry no RoPE ("" = none)
};

inline const std::vector<HfFamily>& hf_families() {
  constexpr Pairing H = Pairing::half_split, I = Pairing::interleaved;
  constexpr std::string_view F = "full_attention";
  // clang-format off
  static const std::vector<HfFamily> families = {
  // model_type       pair theta   max_pos  hidden heads hd  qk_rope prf  rdim local  L0    rope layer           NoPE layer
    {"llama",            H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    // Llama 4: Llama4TextRotaryEmbedding's complex freqs_cis, view_as_complex over adjacent pairs;
    // every 4th layer (no_rope_layers 0) has no RoPE and is the "full_attention" one.
    {"llama4_text",      I, 5e5,    131072, 5120,  40,  128, 0,  0,    0,   0,     0,    "chunked_attention", F},
    {"mistral",          H, 1e4,    131072, 4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"mixtral",          H, 1e6,    131072, 4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"qwen2",            H, 1e4,    32768,  4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"qwen2_moe",        H, 1e4,    32768,  2048,  16,  0,   0,  0,    0,   0,     0,    F, ""},  // hidden/heads ?
    {"qwen3",            H, 1e4,    32768,  4096,  32,  128, 0,  0,    0,   0,     0,    F, ""},
    {"qwen3_moe",        H, 1e4,    32768,  2048,  32,  0,   0,  0,    0,   0,     0,    F, ""},  // head_dim ?
    // Qwen2-VL / Qwen2.5-VL: rotate_half with mrope_section over cat(freqs, freqs) (half_split).
    {"qwen2_vl",         H, 1e6,    32768,  8192,  64,  0,   0,  0,    0,   0,     0,    F, ""},
    {"qwen2_vl_text",    H, 1e6,    32768,  8192,  64,  0,   0,  0,    0,   0,     0,    F, ""},
    {"qwen2_5_vl",       H, 1e6,    32768,  8192,  64,  0,   0,  0,    0,   0,     0,    F, ""},
    {"qwen2_5_vl_text",  H, 1e6,    32768,  8192,  64,  0,   0,  0,    0,   0,     0,    F, ""},
    // Qwen3-VL: apply_interleaved_mrope picks the sections, rotate_half rotates (half_split).
    {"qwen3_vl_text",    H, 5e6,    128000, 4096,  32,  128, 0,  0,    0,   0,     0,    F, ""},  // max_pos ?
    // Qwen3.5: Qwen3-Next's attention (rotate_half on a quarter of each 256-value head, RoPE on the
    // full_attention layers only) with Qwen3-VL's interleaved M-RoPE, always interleaved (resolve()).
    {"qwen3_5_text",     H, 1e4,    32768,  4096,  16,  256, 0,  0.25, 0,   0,     0,    F, "linear_attention"},
    {"qwen3_5_moe_text", H, 1e4,    32768,  2048,  16,  256, 0,  0.25, 0,   0,     0,    F, "linear_attention"},
    {"gemma",            H, 1e4,    8192,   3072,  16,  256, 0,  0,    0,   0,     0,    F, ""},
    {"gemma2",           H, 1e4,    8192,   2304,  8,   256, 0,  0,    0,   0,     0,    F, ""},
    {"gemma3_text",      H, 1e6,    131072, 2304,  8,   256, 0,  0,    0,   1e4,   0,    F, ""},
    {"gemma3n_text",     H, 1e6,    32768,  2048,  8,   256, 0,  0,    0,   1e4,   0,    F, ""},  // max_pos ?
    // Gemma 4: rotate_half; per layer type its own RoPE (class default: sliding_attention default at
    // 1e4 over head_dim 256, full_attention proportional 0.25 at 1e6 over global_head_dim 512).
    {"gemma4_text",      H, 1e6,    131072, 2304,  8,   256, 0,  0,    0,   1e4,   0,    F, ""},  // heads ?
    {"phi",              H, 1e4,    2048,   2048,  32,  0,   0,  0.5,  0,   0,     0,    F, ""},
    {"phi3",             H, 1e4,    4096,   3072,  32,  0,   0,  0,    0,   0,     4096, F, ""},
    {"phimoe",           H, 1e6,    131072, 4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},  // max_pos ?
    // DeepSeek-V2: apply_rotary_emb on view_as_complex(x.reshape(..., -1, 2)); V3: rope_interleave
    // (true by default) de-interleaves before rotate_half, i.e. interleaved pairs.
    {"deepseek_v2",      I, 1e4,    2048,   5120,  128, 0,   64, 0,    0,   0,     0,    F, ""},
    {"deepseek_v3",      I, 1e4,    4096,   7168,  128, 0,   64, 0,    0,   0,     0,    F, ""},
    // Kimi K2 (and K2.5's text_config): DeepseekV3ForCausalLM under its own model_type (Moonshot's
    // deployment guide: "change model_type to deepseek_v3" where an engine lacks it); DeepseekV3Config.
    {"kimi_k2",          I, 1e4,    4096,   7168,  128, 0,   64, 0,    0,   0,     0,    F, ""},
    // gpt-oss: _apply_rotary_emb chunks x in two halves (half_split); the class default rope_scaling
    // is yarn (factor 32, beta 32/1, truncate false, L0 4096), see resolve().
    {"gpt_oss",          H, 150000, 131072, 2880,  64,  64,  0,  0,    0,   0,     0,    F, ""},
    // GLM / GLM-4: rotate_half on x[..., 0::2], x[..., 1::2] with repeat_interleave'd cos/sin.
    {"glm",              I, 1e4,    131072, 4096,  32,  128, 0,  0.5,  0,   0,     0,    F, ""},
    {"glm4",             I, 1e4,    131072, 4096,  32,  128, 0,  0.5,  0,   0,     0,    F, ""},
    {"chatglm",          I, 1e4,    0,      4096,  32,  0,   0,  0.5,  0,   0,     0,    F, ""},  // remote code
    // Cohere: rotate_half = stack((-x[..., 1::2], x[..., ::2])).flatten (interleaved). Command R7B
    // (cohere2) applies RoPE on its sliding-window layers only.
    {"cohere",           I, 1e4,    8192,   8192,  64,  0,   0,  0,    0,   0,     0,    F, ""},
    {"cohere2",          I, 1e4,    8192,   4096,  32,  0,   0,  0,    0,   0,     0,    "sliding_attention", F},
    // GPT-J / CodeGen: rotate_every_two (interleaved); base 10000 is hard-coded in the model.
    {"gptj",             I, 1e4,    2048,   4096,  16,  0,   0,  0,    64,  0,     0,    F, ""},
    {"codegen",          I, 1e4,    2048,   4096,  16,  0,   0,  0,    64,  0,     0,    F, ""},
    {"gpt_neox",         H, 1e4,    2048,   6144,  64,  0,   0,  0.25, 0,   0,     0,    F, ""},
    {"falcon",           H, 1e4,    2048,   4544,  71,  0,   0,  0,    0,   0,     0,    F, ""},
    {"RefinedWebModel",  H, 1e4,    2048,   4544,  71,  0,   0,  0,    0,   0,     0,    F, ""},  // Falcon's old name
    {"RefinedWeb",       H, 1e4,    2048,   4544,  71,  0,   0,  0,    0,   0,     0,    F, ""},
    {"stablelm",         H, 1e4,    4096,   2560,  32,  0,   0,  0.25, 0,   0,     0,    F, ""},
    {"olmo",             H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"olmo2",            H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"granite",          H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"granitemoe",       H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"starcoder2",       H, 1e4,    4096,   3072,  24,  0,   0,  0,    0,   0,     0,    F, ""},
    {"minicpm",          H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},  // remote code ?
    // Families of 2025, each pairing read from its modeling code (transformers), and vLLM's
    // is_neox_style where it has one. ERNIE 4.5 and Helium: GLM's rotate_half on x[..., 0::2],
    // x[..., 1::2] with repeat_interleave'd cos/sin (interleaved; vLLM is_neox_style=False for ERNIE).
    {"ernie4_5",         I, 5e5,    131072, 1024,  16,  128, 0,  0,    0,   0,     0,    F, ""},
    {"ernie4_5_moe",     I, 5e5,    131072, 2560,  20,  0,   0,  0,    0,   0,     0,    F, ""},
    {"helium",           I, 1e5,    4096,   2560,  20,  128, 0,  0,    0,   0,     0,    F, ""},
    // GLM-4.5 (glm4_moe) left GLM-4's pairs: rotate_half (x[..., :d/2], x[..., d/2:]) on the first
    // partial_rotary_factor of each head. Qwen3-Next: the same on a quarter of each head, and its
    // linear_attention (Gated DeltaNet) layers carry no RoPE.
    {"glm4_moe",         H, 1e4,    131072, 4096,  96,  0,   0,  0.5,  0,   0,     0,    F, ""},
    {"qwen3_next",       H, 1e4,    32768,  2048,  16,  256, 0,  0.25, 0,   0,     0,    F, "linear_attention"},
    // MiniMax-M2: rotary_dim (class default head_dim / 2) of each head, rotate_half within it.
    {"minimax_m2",       H, 5e6,    196608, 3072,  48,  128, 0,  0.5,  0,   0,     0,    F, ""},
    {"seed_oss",         H, 1e4,    524288, 4096,  80,  128, 0,  0,    0,   0,     0,    F, ""},
    // SmolLM3: rotate_half; which layers skip RoPE is no_rope_layers' per-layer list, not a layer type.
    {"smollm3",          H, 2e6,    32768,  2048,  16,  0,   0,  0,    0,   0,     0,    F, ""},
    // OLMo 3: rotate_half; its sliding_attention layers use default RoPE (rope_theta, no scaling) and
    // only its full_attention layers rope_scaling (resolve()).
    {"olmo3",            H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    // HunYuan: Llama's rotate_half; its NTK-alpha rope_scaling is read as rope_type "ntk" (hf_json.hpp).
    {"hunyuan_v1_dense", H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"hunyuan_v1_moe",   H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
  };
  // clang-format on
  return families;
}

// The family entry of `model_type`, or nullptr.
inline const HfFamily* find_hf_family(std::string_view model_type) {
  for (const HfFamily& f : hf_families())
    if (f.model_type == model_type) return &f;
  return nullptr;
}

namespace detail {
// The pairing of a family rotary has checked (hf_families(), and Llama 4's composite model_type),
// else nothing: config.json does not say how a model pairs the values it rotates.
inline std::optional<Pairing> known_pairing(std::string_view model_type) {
  if (model_type == "llama4") return Pairing::interleaved;  // the composite config's own model_type
  const HfFamily* f = find_hf_family(model_type);
  if (f == nullptr) return std::nullopt;
  return f->pairing;
}

ROTARY_COLD inline std::string unknown_pairing_message(std::string_view model_type) {
  return concat(model_type.empty() ? std::string("model_type is absent")
                                   : concat("model_type '", model_type, "' is not a family rotary has checked"),
                ", and config.json does not say how its RoPE pairs the values it rotates (adjacent pairs, as "
                "GPT-J, GLM-4 and DeepSeek do, or the two halves, as Llama's rotate_half does); read its modeling "
                "code and pass ResolveOptions::pairing (rotary-inspect: --pairing interleaved|half_split)");
}
}  // namespace detail

// The pairing a model family's reference implementation uses (hf_families(), each checked against
// its modeling code). Throws rotary::error for an unknown or empty model_type: guessing rotate_half
// would give silently wrong rotations for a model that rotates adjacent pairs.
//   interleaved: llama4_text, deepseek_v2, deepseek_v3, kimi_k2, glm, glm4, chatglm, cohere, cohere2, gptj,
//                codegen, ernie4_5, ernie4_5_moe, helium
inline Pairing pairing_for_model_type(std::string_view model_type) {
  const std::optional<Pairing> p = detail::known_pairing(model_type);
  if (!p) throw error(detail::unknown_pairing_message(model_type));
  return *p;
}

// The layer type resolve() uses when ResolveOptions::layer_type is empty: the family's RoPE layers.
inline std::string default_layer_type(const HfConfig& config) {
  const HfFamily* f = find_hf_family(config.model_type.value_or(""));
  return std::string(f ? f->rope_layer_type : std::string_view("full_attention"));
}

namespace detail {

inline std::int64_t hf_positive(const char* key, std::int64_t v) {
  if (v <= 0) throw error(concat(key, " (", v, ") must be positive"));
  return v;
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
  const std::optional<std::int64_t> qk = hf_or(c.qk_rope_head_dim, f ? f->qk_rope_head_dim : 0);
  if (qk) return hf_head_dim_capped("qk_rope_head_dim", *qk);
  // HF: `head_dim or hidden_size // num_attention_heads`.
  if (c.head_dim && *c.head_dim != 0) return hf_head_dim_capped("head_dim", *c.head_dim);
  // class default (an explicit 0 or null falls through)
  if (!c.head_dim && !c.head_dim_null && f && f->head_dim != 0) return f->head_dim;
  const char* hidden_key = c.hidden_size ? "hidden_size" : "n_embd";
  const char* heads_key = c.num_attention_heads ? "num_attention_heads" : "n_head";
  std::optional<std::int64_t> hidden = c.hidden_size ? c.hidden_size : c.n_embd;
  std::optional<std::int64_t> heads = c.num_attention_heads ? c.num_attention_heads : c.n_head;
  if (!hidden && f && f->hidden_size) {
    hidden = f->hidden_size;
    hidden_key = "hidden_size (class default)";
  }
  if (!heads && f && f->num_attention_heads) {
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

inline bool hf_needs_original_max(const std::string& t) {
  return t == "llama3" || t == "yarn" || t == "longrope";
}

inline bool hf_is_deepseek(std::string_view m) {
  return m == "deepseek_v2" || m == "deepseek_v3" || m == "kimi_k2";
}

}  // namespace detail

// Resolves `config` for one layer type: head geometry, pairing, HF-standardized parameters, then
// validate() + scaled_frequencies(). Throws rotary::error naming the offending key and its value.
inline ResolvedRope resolve(const HfConfig& config, const ResolveOptions& options = {}) {
  using detail::concat;
  const std::string model_type = config.model_type.value_or("");
  const HfFamily* family = find_hf_family(model_type);
  ResolvedRope r;
  r.warnings = config.warnings;
  if (!family)
    r.warnings.push_back(concat(
        model_type.empty() ? std::string("model_type is absent")
                           : concat("model_type '", model_type, "' is not a family rotary has checked"),
        ": no class defaults (rope_theta 10000 where the config has none)"));
  if (config.alibi && *config.alibi)
    throw error(concat("alibi (true): model_type '", model_type,
                       "' with ALiBi has no rotary position embedding"));
  std::int64_t head_dim = detail::hf_head_dim(config, family);

  // 1. The parameters of this layer type.
  const std::string layer_type = options.layer_type.empty() ? default_layer_type(config) : options.layer_type;
  if (family && !family->nope_layer_type.empty() && layer_type == family->nope_layer_type)
    throw error(concat("layer_type (\"", layer_type, "\"): ", model_type,
                       " applies no rotary embedding on these layers (NoPE); its RoPE layers are \"",
                       family->rope_layer_type, "\""));
  const double class_theta = family && family->rope_theta > 0.0 ? family->rope_theta : 10000.0;
  RopeParameters p;
  bool per_layer = false;
  if (!config.per_layer_type.empty()) {
    const auto it = config.per_layer_type.find(layer_type);
    if (it == config.per_layer_type.end()) {
      std::string have;
      for (const auto& kv : config.per_layer_type) have += (have.empty() ? "" : ", ") + kv.first;
      throw error(concat("layer_type (\"", layer_type, "\") has no entry in rope_parameters (", have, ")"));
    }
    p = it->second;
    per_layer = true;
  } else {
    bool known = layer_type == "full_attention" || layer_type == "sliding_attention" ||
                 (family && layer_type == family->rope_layer_type);
    for (const auto& t : config.layer_types) known = known || t == layer_type;
    if (!known)
      throw error(concat("layer_type (\"", layer_type, "\") is neither full_attention, sliding_attention nor in ",
                         "layer_types"));
    std::optional<double> local = config.rope_local_base_freq;
    if (!local && family && family->rope_local_base_freq > 0.0) local = family->rope_local_base_freq;
    if (layer_type == "sliding_attention" && local) {
      p.rope_theta = *local;  // Gemma-3: local layers use default RoPE
    } else {
      if (config.rope_scaling) {
        p = *config.rope_scaling;
      } else if (model_type == "gemma4_text" && layer_type == "full_attention") {  // Gemma4TextConfig's default
        p.rope_type = "proportional";
        p.partial_rotary_factor = 0.25;
      } else if (model_type == "gpt_oss") {  // GptOssConfig's rope_scaling default
        p.rope_type = "yarn";
        p.factor = 32.0;
        p.beta_fast = 32.0;
        p.beta_slow = 1.0;
        p.truncate = false;
        p.original_max_position_embeddings = 4096;
      }
      const bool dict_theta = config.rope_scaling && config.rope_scaling->rope_theta != RopeParameters{}.rope_theta;
      if (config.rope_theta)
        p.rope_theta = *config.rope_theta;
      else if (config.rotary_emb_base)
        p.rope_theta = *config.rotary_emb_base;
      else if (!dict_theta)
        p.rope_theta = class_theta;
      // OLMo 3's sliding-window layers: Olmo3RotaryEmbedding(config, rope_type="default"), the same
      // rope_theta without the rope_scaling
      if (layer_type == "sliding_attention" && model_type == "olmo3") {
        const double theta = p.rope_theta;
        p = RopeParameters{};
        p.rope_theta = theta;
      }
    }
  }
  if (p.rope_type.empty()) p.rope_type = "default";
  if (p.rope_type == "su") p.rope_type = "longrope";
  if (p.rope_type == "mrope") {  // Qwen2VLConfig: {"type": "mrope"} is default RoPE over sections
    if (p.mrope_section.empty())
      throw error("rope_type 'mrope' needs mrope_section (the pairs each position stream drives)");
    p.rope_type = "default";
  }
  if (!(p.rope_theta > 0.0) || !detail::finite(p.rope_theta))
    throw error(concat("rope_theta (", p.rope_theta, ") must be positive and finite"));
  // rope_type 'yarn' needs rope_theta > 1 as well: validate() (step 6) refuses it with the other rules.

  // Gemma 4's full_attention heads are global_head_dim wide (class default 512), and HF's
  // Gemma4TextRotaryEmbedding builds their frequencies over it (head_dim_key="global_head_dim") for
  // rope_type 'proportional' only: any other rule would span head_dim, which does not fit them.
  if (model_type == "gemma4_text" && layer_type == "full_attention") {
    const std::int64_t g =
        config.global_head_dim ? detail::hf_head_dim_capped("global_head_dim", *config.global_head_dim) : 512;
    if (g != head_dim) {
      if (p.rope_type != "proportional")
        throw error(concat("layer_type (\"full_attention\"): gemma4_text's full_attention heads are global_head_dim (",
                           g, ") wide, and HF builds their frequencies over it for rope_type 'proportional' only; "
                           "rope_type '", p.rope_type, "' would span head_dim (", head_dim, "), which does not fit them"));
      head_dim = g;
    }
  }

  // 2. max_position_embeddings and the pre-extension length.
  std::optional<std::int64_t> max_pos = config.max_position_embeddings;
  const char* max_key = "max_position_embeddings";
  if (!max_pos && config.n_positions) {
    max_pos = config.n_positions;
    max_key = "n_positions";
  }
  if (!max_pos && family && family->max_position_embeddings) max_pos = family->max_position_embeddings;
  if (max_pos) detail::hf_positive(max_key, *max_pos);
  if (detail::hf_needs_original_max(p.rope_type)) {
    const std::optional<std::int64_t> top_l0 =
        detail::hf_or(config.original_max_position_embeddings, family ? family->original_max_position_embeddings : 0);
    // The top-level attribute (the file's, else Phi-3's class default 4096) wins, as HF 4.x's
    // `hasattr(config, "original_max_position_embeddings")` does; a per-layer entry's own value wins.
    if (top_l0 && !(per_layer && p.original_max_position_embeddings)) p.original_max_position_embeddings = top_l0;
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
  const std::optional<std::int64_t> explicit_rotary_dim =
      factor ? config.rotary_dim : detail::hf_or(config.rotary_dim, family ? family->rotary_dim : 0);
  if (!factor && !explicit_rotary_dim && family && family->partial_rotary_factor > 0.0) {
    factor = family->partial_rotary_factor;
    factor_key = "partial_rotary_factor (class default)";
  }
  if (factor && (!(*factor > 0.0) || !(*factor <= 1.0)))
    throw error(concat(factor_key, " (", *factor, ") must be in (0, 1]"));
  std::int64_t rotary_dim = 0;
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

  // 4. Pairing: the caller's, else the config's rope_interleave (DeepSeek-V3), else the family's; a
  // model nobody has checked is refused rather than given rotate_half's pairs.
  std::optional<Pairing> pairing = options.pairing;
  if (!pairing && config.rope_interleave)
    pairing = *config.rope_interleave ? Pairing::interleaved : Pairing::half_split;
  if (!pairing) pairing = detail::known_pairing(model_type);
  if (!pairing) throw error(detail::unknown_pairing_message(model_type));

  // Qwen3.5's rotary embedding takes mrope_section [11, 11, 10] when the config has none and always
  // interleaves the sections (Qwen3VLTextRotaryEmbedding's layout; it never reads mrope_interleaved,
  // which vLLM does read: a config saying false is warned about).
  if (model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text") {
    if (p.mrope_section.empty()) p.mrope_section = {11, 11, 10};
    if (p.mrope_interleaved && !*p.mrope_interleaved)
      r.warnings.push_back(concat("mrope_interleaved (false): ", model_type,
                                  "'s modeling code interleaves the M-RoPE sections whatever it says (vLLM "
                                  "reads it); resolved interleaved"));
    p.mrope_interleaved = true;
  }

  // 5. M-RoPE sections: they must cover the rotated pairs (HF's torch.split would fail otherwise).
  // Each entry is at most rotary_dim/2 and the sum stops once it passes rotary_dim/2, so it stays
  // below 2 * rotary_dim/2 and cannot overflow.
  if (!p.mrope_section.empty()) {
    const std::int64_t pairs = rotary_dim / 2;
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < p.mrope_section.size() && sum <= pairs; ++i) {
      const std::int64_t s = p.mrope_section[i];
      if (s < 0 || s > pairs)
        throw error(concat("mrope_section[", i, "] (", s, ") must be in [0, rotary_dim/2 = ", pairs, "]"));
      sum += s;
    }
    if (sum > pairs) throw error(concat("mrope_section sums to more than rotary_dim/2 (", pairs, ")"));
    if (sum != pairs) throw error(concat("mrope_section sums to ", sum, " but rotary_dim/2 is ", pairs));
  }

  // 6. Frequencies.
  if (options.seq_len && *options.seq_len < 0)
    throw error(concat("seq_len (", *options.seq_len, ") must be >= 0"));
  r.layer_type = layer_type;
  r.spec = RotarySpec(head_dim, *pairing, p.rope_theta, rotary_dim);
  r.spec.validate();
  r.input.head_dim = head_dim;
  r.input.rotary_dim = rotary_dim;
  r.input.max_position_embeddings = max_pos.value_or(0);
  r.input.seq_len = options.seq_len;
  validate(p, r.input);
  r.freqs = scaled_frequencies(p, r.input, options.quirks);
  r.spec.frequencies = r.freqs;  // so Rope<T>(r.spec, n) and everything built from the spec keep the scaling
  r.mrope_section = p.mrope_section;
  r.mrope_interleaved = p.mrope_interleaved.value_or(false);
  if (detail::hf_is_deepseek(model_type) && p.rope_type != "default" && p.factor && p.mscale_all_dim &&
      *p.mscale_all_dim != 0.0) {
    const double m = detail::yarn_mscale(*p.factor, *p.mscale_all_dim);
    r.softmax_scale_factor = m * m;
  }
  r.params = std::move(p);
  return r;
}

}  // namespace rotary

#endif  // ROTARY_HF_CONFIG_HPP
