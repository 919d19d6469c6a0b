// rotary — the Hugging Face model families rotary has checked: what each transformers configuration
// class supplies when config.json omits a key, its RoPE layer types, and how its modeling code pairs
// the values it rotates (hf_families(), find_hf_family, pairing_for_model_type). hf_config.hpp uses them.
#ifndef ROTARY_HF_FAMILIES_HPP
#define ROTARY_HF_FAMILIES_HPP

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "types.hpp"

namespace rotary {

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

namespace detail::hf_table {
inline constexpr Pairing H = Pairing::half_split, I = Pairing::interleaved;
inline constexpr std::string_view F = "full_attention";
// The families, one row each (hf_families() serves them as a vector).
// clang-format off
inline constexpr HfFamily kFamilies[] = {
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
    // LongCat-Flash (LongcatFlashConfig, default_theta 1e7): DeepSeek-V3's MLA, adjacent pairs
    // (apply_rotary_pos_emb_interleave) on the last 64 values of each q/k head; two attention blocks
    // per layer, both rotated (layer count 2 * num_layers). hidden ?
    {"longcat_flash",    I, 1e7,    131072, 6144,  64,  64,  64, 0,    0,   0,     0,    F, ""},
    // DeepSeek-V4 (DeepseekV4Config): adjacent pairs (GLM's rotate_half, repeat_interleave'd cos) on
    // the last int(head_dim * partial_rotary_factor) = 64 of each 512-value head; sliding_attention
    // layers at rope_theta, the compressed ones (and the compressor, the indexer) at
    // compress_rope_theta 160000 with the config's scaling (hf_config.hpp). hidden, heads ?
    {"deepseek_v4",      I, 1e4,    1048576, 0,    0,   512, 0,  0,    0,   0,     0,    "compressed_sparse_attention", ""},
    // gpt-oss: _apply_rotary_emb chunks x in two halves (half_split); the class default rope_scaling
    // is yarn (factor 32, beta 32/1, truncate false, L0 4096), see resolve().
    {"gpt_oss",          H, 150000, 131072, 2880,  64,  64,  0,  0,    0,   0,     0,    F, ""},
    // GLM / GLM-4: rotate_half on x[..., 0::2], x[..., 1::2] with repeat_interleave'd cos/sin.
    {"glm",              I, 1e4,    131072, 4096,  32,  128, 0,  0.5,  0,   0,     0,    F, ""},
    {"glm4",             I, 1e4,    131072, 4096,  32,  128, 0,  0.5,  0,   0,     0,    F, ""},
    // GLM-4.1V (glm4v_text) and GLM-OCR (glm_ocr_text): M-RoPE whose sections pick the streams per
    // frequency (as Qwen2-VL's), then repeat_interleave'd onto adjacent pairs rotated by
    // rotate_half_llm (x[..., 0::2], x[..., 1::2]): interleaved pairing with mrope_axis_map. GLM-4.5V
    // (glm4v_moe_text) does not: Glm4vMoeTextAttention's rotate_half on the halves.
    {"glm4v_text",       I, 1e4,    32768,  4096,  32,  0,   0,  0.5,  0,   0,     0,    F, ""},  // max_pos ?
    {"glm4v_moe_text",   H, 1e4,    65536,  4096,  96,  128, 0,  0.5,  0,   0,     0,    F, ""},  // max_pos, heads ?
    {"glm_ocr_text",     I, 1e4,    131072, 1536,  16,  128, 0,  0,    0,   0,     0,    F, ""},  // remote code ?
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
    // MiniMax-Text-01 as transformers has it (MiniMaxConfig, default_theta 1e6): its rotary embedding
    // rotates the whole head, reading neither rotary_dim nor partial_rotary_factor (vLLM rotates
    // rotary_dim: EngineQuirks::vllm_minimax_rotary_dim); its lightning layers carry no RoPE.
    {"minimax",          H, 1e6,    131072, 4096,  32,  0,   0,  0,    0,   0,     0,    F, "linear_attention"},
    {"seed_oss",         H, 1e4,    524288, 4096,  80,  128, 0,  0,    0,   0,     0,    F, ""},
    // SmolLM3: rotate_half; which layers skip RoPE is no_rope_layers' per-layer list, not a layer type.
    {"smollm3",          H, 2e6,    32768,  2048,  16,  0,   0,  0,    0,   0,     0,    F, ""},
    // OLMo 3: rotate_half; its sliding_attention layers use default RoPE (rope_theta, no scaling) and
    // only its full_attention layers rope_scaling (resolve()).
    {"olmo3",            H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    // HunYuan: Llama's rotate_half; its NTK-alpha rope_scaling is read as rope_type "ntk" (hf_json.hpp).
    {"hunyuan_v1_dense", H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    {"hunyuan_v1_moe",   H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    // HunYuan-A13B as released (remote code, HunYuanConfig / hunyuan.py): rotate_half over
    // attention_head_dim (hf_head_dim()), the same NTK-alpha; qk_rope_head_dim (64) is its MLA path's.
    {"hunyuan",          H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    // EXAONE 4: Llama's rotate_half; hybrid (sliding_window set, class default 4096) models apply RoPE
    // on their sliding_attention layers only; "sliding_window": null, on every layer (nope_layer_type()).
    {"exaone4",          H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    "sliding_attention", F},
    // Apertus: LlamaAttention (rotate_half); the class default rope_parameters is llama3 (factor 8,
    // low/high 1/4, L0 8192) at 1.2e7, see resolve().
    {"apertus",          H, 1.2e7,  65536,  4096,  32,  0,   0,  0,    0,   0,     0,    F, ""},
    // LFM2: Llama's apply_rotary_pos_emb (rotate_half) on its attention layers; its "conv" layers have
    // no attention. The original key "theta" wins over rope_theta (hf_json.hpp).
    {"lfm2",             H, 1e6,    128000, 2560,  32,  0,   0,  0,    0,   0,     0,    F, "conv"},
    // Ministral 3 (Mistral 3's text_config): MistralAttention's rotate_half; the class default
    // rope_parameters is yarn (factor 16, L0 16384) at 1e6 with llama_4_scaling_beta 0.1, see resolve().
    {"ministral3",       H, 1e6,    262144, 4096,  32,  128, 0,  0,    0,   0,     0,    F, ""},
    // Granite 4.0-H: GraniteMoeShared's rotate_half on its "attention" layers, and only with
    // position_embedding_type "rope" (model_nope_reason()); "mamba" layers have no attention.
    {"granitemoehybrid", H, 1e4,    2048,   4096,  32,  0,   0,  0,    0,   0,     0,    "attention", "mamba"},
};
// clang-format on
}  // namespace detail::hf_table

inline const std::vector<HfFamily>& hf_families() {
  static const std::vector<HfFamily> families(std::begin(detail::hf_table::kFamilies),
                                              std::end(detail::hf_table::kFamilies));
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
//   interleaved: llama4_text, deepseek_v2, deepseek_v3, deepseek_v4, kimi_k2, longcat_flash, glm, glm4, chatglm,
//                cohere, cohere2, gptj, codegen, ernie4_5, ernie4_5_moe, helium, glm4v_text, glm_ocr_text
inline Pairing pairing_for_model_type(std::string_view model_type) {
  const std::optional<Pairing> p = detail::known_pairing(model_type);
  if (!p) throw error(detail::unknown_pairing_message(model_type));
  return *p;
}

}  // namespace rotary

#endif  // ROTARY_HF_FAMILIES_HPP
