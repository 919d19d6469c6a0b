// HfConfig -> resolve(): head_dim derivations, partial rotary, legacy keys, layer types, pairing by
// model family and the errors, on configs built in code (the JSON side is tested through
// rotary-inspect in tests/inspect).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include <rotary/hf_config.hpp>
#include <rotary/multi_axis.hpp>

#include "support.hpp"

namespace {

using rotary::HfConfig;
using rotary::Pairing;
using rotary::resolve;
using rotary::ResolveOptions;
using rotary::RopeParameters;

using rotary_test::expect_error;

HfConfig llama(std::int64_t hidden = 4096, std::int64_t heads = 32) {
  HfConfig c;
  c.model_type = "llama";
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.max_position_embeddings = 4096;
  return c;
}

double theta_j(std::int64_t j, std::int64_t d, double base) {
  return static_cast<double>(1.0L / std::pow(static_cast<long double>(base), static_cast<long double>(2 * j) / d));
}

TEST(HfConfig, HeadDimFromHiddenSizeOverHeads) {
  const auto r = resolve(llama());
  EXPECT_EQ(r.spec.head_dim, 128);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 128);
  EXPECT_EQ(r.freqs.theta.size(), 64u);
  EXPECT_EQ(r.params.rope_type, "default");
  EXPECT_EQ(r.spec.base, 10000.0);  // rope_theta absent: HF's default
  EXPECT_EQ(r.freqs.attention_factor, 1.0);
  EXPECT_EQ(r.freqs.theta[0], 1.0);
}

TEST(HfConfig, ExplicitHeadDimWins) {
  HfConfig c = llama(2560, 8);  // Gemma-3 4B: 2560/8 = 320, but head_dim is 256
  c.head_dim = 256;
  EXPECT_EQ(resolve(c).spec.head_dim, 256);
  c.head_dim = 0;  // HF: `head_dim or hidden_size // num_attention_heads`
  EXPECT_EQ(resolve(c).spec.head_dim, 320);
}

TEST(HfConfig, HeadDimFromNEmbdOverNHead) {
  HfConfig c;
  c.model_type = "gptj";
  c.n_embd = 4096;
  c.n_head = 16;
  c.rotary_dim = 64;
  c.n_positions = 2048;
  const auto r = resolve(c);
  EXPECT_EQ(r.spec.head_dim, 256);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 64);
  EXPECT_EQ(r.spec.pairing, Pairing::interleaved);
  EXPECT_EQ(r.input.max_position_embeddings, 2048);
  EXPECT_EQ(r.freqs.theta[1], theta_j(1, 64, 10000.0));  // frequencies over rotary_dim, not head_dim
}

TEST(HfConfig, QkRopeHeadDimIsTheRotatedHead) {
  HfConfig c = llama(7168, 128);  // DeepSeek-V3: 7168/128 = 56, the rope part is qk_rope_head_dim
  c.model_type = "deepseek_v3";
  c.qk_rope_head_dim = 64;
  const auto r = resolve(c);
  EXPECT_EQ(r.spec.head_dim, 64);
  EXPECT_EQ(r.spec.pairing, Pairing::interleaved);
  c.rope_interleave = false;  // HF's DeepSeek-V3 switch
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::half_split);
}

TEST(HfConfig, PartialRotaryFactorTruncatesLikePython) {
  HfConfig c = llama(2560, 32);  // Phi-2: head_dim 80
  c.model_type = "phi";
  c.partial_rotary_factor = 0.4;  // 80 * 0.4 = 32.000000000000004 -> 32
  auto r = resolve(c);
  EXPECT_EQ(r.spec.head_dim, 80);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 32);
  EXPECT_EQ(r.freqs.theta.size(), 16u);
  EXPECT_EQ(r.freqs.theta[15], theta_j(15, 32, 10000.0));
  c.partial_rotary_factor = 0.35;  // 80 * 0.35 = 28.000000000000004 -> 28
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 28);
  c.partial_rotary_factor = 0.3249;  // 25.992 -> 25: odd
  expect_error([&] { resolve(c); }, {"rotary_dim (25", "partial_rotary_factor 0.3249"});
}

TEST(HfConfig, RotaryPctAndRotaryEmbBase) {
  HfConfig c = llama(6144, 64);  // GPT-NeoX-20B
  c.model_type = "gpt_neox";
  c.rotary_pct = 0.25;
  c.rotary_emb_base = 20000.0;
  const auto r = resolve(c);
  EXPECT_EQ(r.spec.head_dim, 96);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 24);
  EXPECT_EQ(r.spec.base, 20000.0);
  EXPECT_EQ(r.spec.pairing, Pairing::half_split);
  c.rope_theta = 30000.0;  // rope_theta wins over rotary_emb_base
  EXPECT_EQ(resolve(c).spec.base, 30000.0);
}

TEST(HfConfig, PartialRotaryFactorPrecedence) {
  HfConfig c = llama();
  c.rope_scaling = RopeParameters{};
  c.rope_scaling->partial_rotary_factor = 0.5;  // inside rope_parameters (transformers 5)
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 64);
  c.partial_rotary_factor = 0.25;  // the top-level key wins, as HF's standardization does
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 32);
  c.rotary_dim = 16;  // an explicit rotary_dim wins over any factor
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 16);
}

TEST(HfConfig, LegacySuIsLongrope) {
  HfConfig c = llama(3072, 32);  // Phi-3: head_dim 96
  c.max_position_embeddings = 131072;
  c.original_max_position_embeddings = 4096;
  RopeParameters p;
  p.rope_type = "su";  // what a parser puts there from {"type": "su"}
  p.short_factor.assign(48, 2.0);
  p.long_factor.assign(48, 4.0);
  c.rope_scaling = p;
  auto r = resolve(c);
  EXPECT_EQ(r.params.rope_type, "longrope");
  EXPECT_EQ(r.params.original_max_position_embeddings, 4096);
  EXPECT_EQ(r.freqs.theta[1], theta_j(1, 96, 10000.0) / 2.0);
  EXPECT_NEAR(r.freqs.attention_factor, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-15);
  ResolveOptions o;
  o.seq_len = 4097;  // longer than original_max_position_embeddings: the long factors
  EXPECT_EQ(resolve(c, o).freqs.theta[1], theta_j(1, 96, 10000.0) / 4.0);
}

TEST(HfConfig, TopLevelOriginalMaxPositionEmbeddingsWins) {
  HfConfig c = llama();
  c.max_position_embeddings = 131072;
  RopeParameters p;
  p.rope_type = "yarn";
  p.factor = 4.0;
  p.original_max_position_embeddings = 8192;
  c.rope_scaling = p;
  EXPECT_EQ(resolve(c).params.original_max_position_embeddings, 8192);
  c.original_max_position_embeddings = 32768;  // Phi-3 style top-level key: HF gives it priority
  EXPECT_EQ(resolve(c).params.original_max_position_embeddings, 32768);
  c.original_max_position_embeddings.reset();
  c.rope_scaling->original_max_position_embeddings.reset();  // yarn: L0 defaults to L
  EXPECT_EQ(resolve(c).params.original_max_position_embeddings, 131072);
}

TEST(HfConfig, RopeThetaPrecedence) {
  HfConfig c = llama();
  RopeParameters p;
  p.rope_type = "linear";
  p.factor = 2.0;
  p.rope_theta = 123456.0;  // used only when the config has no top-level theta
  c.rope_scaling = p;
  auto r = resolve(c);
  EXPECT_EQ(r.spec.base, 123456.0);
  EXPECT_EQ(r.freqs.theta[0], 0.5);
  c.rope_theta = 500000.0;
  r = resolve(c);
  EXPECT_EQ(r.spec.base, 500000.0);
  EXPECT_EQ(r.params.rope_theta, 500000.0);
  EXPECT_EQ(r.freqs.theta[1], theta_j(1, 128, 500000.0) / 2.0);
}

TEST(HfConfig, Llama3) {
  HfConfig c = llama();
  c.max_position_embeddings = 131072;
  c.rope_theta = 500000.0;
  RopeParameters p;
  p.rope_type = "llama3";
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  c.rope_scaling = p;
  const auto r = resolve(c);
  EXPECT_EQ(r.freqs.theta[0], 1.0);                                // high frequency: kept
  EXPECT_EQ(r.freqs.theta[63], theta_j(63, 128, 500000.0) / 8.0);  // low frequency: / factor
  c.rope_scaling->original_max_position_embeddings.reset();        // llama3 needs it (no fallback to L)
  expect_error([&] { resolve(c); }, {"original_max_position_embeddings"});
}

TEST(HfConfig, GemmaLocalBaseFreqForSlidingLayers) {
  HfConfig c = llama(2560, 8);
  c.model_type = "gemma3_text";
  c.head_dim = 256;
  c.rope_theta = 1000000.0;
  c.rope_local_base_freq = 10000.0;
  RopeParameters p;
  p.rope_type = "linear";
  p.factor = 8.0;
  c.rope_scaling = p;
  auto full = resolve(c);
  EXPECT_EQ(full.params.rope_type, "linear");
  EXPECT_EQ(full.spec.base, 1000000.0);
  EXPECT_EQ(full.freqs.theta[0], 0.125);
  ResolveOptions o;
  o.layer_type = "sliding_attention";
  auto local = resolve(c, o);
  EXPECT_EQ(local.params.rope_type, "default");
  EXPECT_EQ(local.spec.base, 10000.0);
  EXPECT_EQ(local.freqs.theta[1], theta_j(1, 256, 10000.0));
  c.rope_local_base_freq.reset();  // Gemma3TextConfig's class default is 1e4: the same
  EXPECT_EQ(resolve(c, o).params.rope_type, "default");
  EXPECT_EQ(resolve(c, o).spec.base, 10000.0);
  c.model_type = "mistral";  // no local base: sliding layers share the global rope
  EXPECT_EQ(resolve(c, o).params.rope_type, "linear");
}

TEST(HfConfig, PerLayerTypeParameters) {
  HfConfig c = llama(2560, 8);
  c.head_dim = 256;
  RopeParameters full;
  full.rope_type = "linear";
  full.factor = 8.0;
  full.rope_theta = 1000000.0;
  RopeParameters sliding;
  sliding.rope_theta = 10000.0;
  c.per_layer_type = {{"full_attention", full}, {"sliding_attention", sliding}};
  c.rope_theta = 42.0;  // per-layer entries carry their own theta
  EXPECT_EQ(resolve(c).spec.base, 1000000.0);
  ResolveOptions o;
  o.layer_type = "sliding_attention";
  EXPECT_EQ(resolve(c, o).spec.base, 10000.0);
  EXPECT_EQ(resolve(c, o).params.rope_type, "default");
  o.layer_type = "chunked_attention";
  expect_error([&] { resolve(c, o); }, {"layer_type (\"chunked_attention\")", "full_attention, sliding_attention"});
}

TEST(HfConfig, LayerTypeNamesAreChecked) {
  HfConfig c = llama();
  ResolveOptions o;
  o.layer_type = "chunked_attention";
  expect_error([&] { resolve(c, o); }, {"layer_type (\"chunked_attention\")"});
  c.layer_types = {"chunked_attention", "full_attention"};  // Llama-4 style list: accepted
  EXPECT_EQ(resolve(c, o).spec.head_dim, 128);
}

TEST(HfConfig, ProportionalSpansTheWholeHead) {
  HfConfig c = llama(2048, 8);
  c.head_dim = 512;
  RopeParameters p;
  p.rope_type = "proportional";
  p.rope_theta = 1000000.0;
  p.partial_rotary_factor = 0.25;
  c.per_layer_type = {{"full_attention", p}};
  const auto r = resolve(c);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 512);
  EXPECT_EQ(r.freqs.theta.size(), 256u);
  EXPECT_GT(r.freqs.theta[63], 0.0);
  EXPECT_EQ(r.freqs.theta[64], 0.0);  // pairs past 0.25 * 512 / 2 = 64 pass through
}

TEST(HfConfig, SeqLenDrivesDynamicNtk) {
  HfConfig c = llama();
  RopeParameters p;
  p.rope_type = "dynamic";
  p.factor = 2.0;
  c.rope_scaling = p;
  EXPECT_EQ(resolve(c).freqs.theta[1], theta_j(1, 128, 10000.0));  // n = L: unscaled
  ResolveOptions o;
  o.seq_len = 8192;
  const double b = 10000.0 * std::pow(2.0 * 8192 / 4096 - 1.0, 128.0 / 126.0);
  EXPECT_NEAR(resolve(c, o).freqs.theta[1], theta_j(1, 128, b), 1e-15);
}

TEST(HfConfig, PairingByModelFamily) {
  for (const char* m : {"gptj", "codegen", "cohere", "cohere2", "glm", "glm4", "chatglm", "deepseek_v2", "deepseek_v3",
                        "llama4_text", "llama4", "ernie4_5", "ernie4_5_moe", "helium", "kimi_k2", "longcat_flash", "deepseek_v4"})
    EXPECT_EQ(rotary::pairing_for_model_type(m), Pairing::interleaved) << m;
  for (const char* m : {"llama", "mistral", "qwen2", "qwen3", "phi", "phi3", "gpt_neox", "gemma3_text", "stablelm",
                        "falcon", "gpt_oss", "qwen2_vl", "qwen3_vl_text", "glm4_moe", "qwen3_next", "minimax_m2",
                        "seed_oss", "smollm3", "olmo3", "hunyuan_v1_dense", "hunyuan_v1_moe", "gemma4_text",
                        "qwen3_5_text", "qwen3_5_moe_text", "minimax"})
    EXPECT_EQ(rotary::pairing_for_model_type(m), Pairing::half_split) << m;
  // config.json does not say how a model pairs its values: no guess for a family nobody has checked
  for (const char* m : {"", "some_future_model", "Llama", "llama "})
    expect_error([&] { rotary::pairing_for_model_type(m); }, {"config.json does not say", "ResolveOptions::pairing"});
  HfConfig c = llama();
  c.model_type = "cohere";
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::interleaved);
  ResolveOptions o;
  o.pairing = Pairing::half_split;  // the override wins
  EXPECT_EQ(resolve(c, o).spec.pairing, Pairing::half_split);
  c.rope_interleave = false;  // so does the config's own key (DeepSeek-V3's), over the family
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::half_split);
  o.pairing = Pairing::interleaved;  // and the caller's over both
  EXPECT_EQ(resolve(c, o).spec.pairing, Pairing::interleaved);
}

// ---- class defaults, families, M-RoPE (issue 12 §5) ------------------------------------------

bool has_warning(const rotary::ResolvedRope& r, const std::string& fragment) {
  for (const auto& w : r.warnings)
    if (w.find(fragment) != std::string::npos) return true;
  return false;
}

TEST(HfConfig, Gemma3ClassDefaultsWhereThePublishedFileIsSilent) {
  // google/gemma-3-4b-it's text_config: hidden_size, rope_scaling linear x8, no rope_theta,
  // rope_local_base_freq, head_dim or max_position_embeddings (Gemma3TextConfig: 1e6, 1e4, 256, 131072).
  HfConfig c;
  c.model_type = "gemma3_text";
  c.hidden_size = 2560;
  RopeParameters p;
  p.rope_type = "linear";
  p.factor = 8.0;
  c.rope_scaling = p;
  const auto full = resolve(c);
  EXPECT_EQ(full.spec.head_dim, 256);  // not 2560 / 8
  EXPECT_EQ(full.spec.base, 1e6);
  EXPECT_EQ(full.params.rope_type, "linear");
  EXPECT_EQ(full.input.max_position_embeddings, 131072);
  EXPECT_EQ(full.freqs.theta[1], theta_j(1, 256, 1e6) / 8.0);
  EXPECT_TRUE(full.warnings.empty());
  ResolveOptions o;
  o.layer_type = "sliding_attention";
  const auto local = resolve(c, o);
  EXPECT_EQ(local.params.rope_type, "default");  // unscaled
  EXPECT_EQ(local.spec.base, 1e4);
  EXPECT_EQ(local.freqs.theta[1], theta_j(1, 256, 1e4));
}

TEST(HfConfig, ClassDefaultsOfOtherFamilies) {
  HfConfig c;
  c.model_type = "qwen3";  // Qwen3Config: head_dim 128 whatever hidden_size / heads says
  c.hidden_size = 2560;
  c.num_attention_heads = 32;
  EXPECT_EQ(resolve(c).spec.head_dim, 128);
  c.head_dim = 0;  // HF's `head_dim or hidden_size // num_attention_heads`
  EXPECT_EQ(resolve(c).spec.head_dim, 80);
  c = HfConfig{};
  c.model_type = "mixtral";
  EXPECT_EQ(resolve(c).spec.base, 1e6);
  EXPECT_EQ(resolve(c).spec.head_dim, 128);
  c.model_type = "phi";  // PhiConfig: partial_rotary_factor 0.5, hidden 2048 / 32 heads
  EXPECT_EQ(resolve(c).spec.head_dim, 64);
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 32);
  c.model_type = "gpt_neox";  // rotary_pct 0.25 of 6144 / 64
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 24);
  c.model_type = "gptj";  // rotary_dim 64 of n_embd 4096 / n_head 16
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 64);
  EXPECT_EQ(resolve(c).spec.head_dim, 256);
  c.model_type = "deepseek_v3";  // qk_rope_head_dim 64, interleaved
  EXPECT_EQ(resolve(c).spec.head_dim, 64);
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::interleaved);
  c.model_type = "glm4";  // head_dim 128, partial_rotary_factor 0.5, interleaved
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 64);
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::interleaved);
  c = HfConfig{};
  c.model_type = "phi3";  // longrope without original_max_position_embeddings: Phi3Config's 4096
  c.max_position_embeddings = 131072;
  RopeParameters lr;
  lr.rope_type = "longrope";
  lr.short_factor.assign(48, 1.0);
  lr.long_factor.assign(48, 2.0);
  c.rope_scaling = lr;
  EXPECT_EQ(resolve(c).params.original_max_position_embeddings, 4096);
  EXPECT_NEAR(resolve(c).freqs.attention_factor, std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)), 1e-15);
}

TEST(HfConfig, GptOssDefaultsToYarnUnlessRopeScalingIsNull) {
  HfConfig c;
  c.model_type = "gpt_oss";
  auto r = resolve(c);
  EXPECT_EQ(r.spec.head_dim, 64);
  EXPECT_EQ(r.spec.base, 150000.0);
  EXPECT_EQ(r.params.rope_type, "yarn");
  EXPECT_EQ(r.params.factor, 32.0);
  EXPECT_EQ(r.params.truncate, false);
  EXPECT_EQ(r.params.original_max_position_embeddings, 4096);
  EXPECT_NEAR(r.freqs.attention_factor, 1.0 + 0.1 * std::log(32.0), 1e-15);
  c.rope_scaling = RopeParameters{};  // "rope_scaling": null overrides the class default
  r = resolve(c);
  EXPECT_EQ(r.params.rope_type, "default");
  EXPECT_EQ(r.spec.base, 150000.0);
  EXPECT_EQ(r.freqs.attention_factor, 1.0);
}

TEST(HfConfig, Llama4IsInterleavedWithNopeFullAttentionLayers) {
  HfConfig c;  // meta-llama/Llama-4-Scout-17B-16E text_config
  c.model_type = "llama4_text";
  c.hidden_size = 5120;
  c.num_attention_heads = 40;
  c.head_dim = 128;
  c.max_position_embeddings = 10485760;
  c.rope_theta = 500000.0;
  RopeParameters p;
  p.rope_type = "llama3";
  p.factor = 16.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 1.0;  // equal: HF accepts it (no smoothing band)
  p.original_max_position_embeddings = 8192;
  c.rope_scaling = p;
  const auto r = resolve(c);
  EXPECT_EQ(r.layer_type, "chunked_attention");
  EXPECT_EQ(r.spec.pairing, Pairing::interleaved);
  EXPECT_EQ(r.freqs.theta[0], 1.0);
  EXPECT_EQ(r.freqs.theta[63], theta_j(63, 128, 500000.0) / 16.0);
  ResolveOptions o;
  o.layer_type = "full_attention";
  expect_error([&] { resolve(c, o); }, {"layer_type (\"full_attention\")", "llama4_text", "NoPE", "chunked_attention"});
  c.rope_scaling->high_freq_factor = 0.5;  // swapped factors stay an error
  expect_error([&] { resolve(c); }, {"high_freq_factor (0.5)", "low_freq_factor (1)"});
}

TEST(HfConfig, MropeIsDefaultRopeWithSections) {
  HfConfig c;  // Qwen/Qwen2-VL-7B-Instruct: {"type": "mrope", "mrope_section": [16, 24, 24]}
  c.model_type = "qwen2_vl";
  c.hidden_size = 3584;
  c.num_attention_heads = 28;
  c.rope_theta = 1e6;
  RopeParameters p;
  p.rope_type = "mrope";
  p.mrope_section = {16, 24, 24};
  c.rope_scaling = p;
  const auto r = resolve(c);
  EXPECT_EQ(r.params.rope_type, "default");
  EXPECT_EQ(r.mrope_section, (std::vector<std::int64_t>{16, 24, 24}));
  EXPECT_FALSE(r.mrope_interleaved);
  EXPECT_EQ(r.spec.pairing, Pairing::half_split);
  EXPECT_EQ(r.freqs.theta[5], theta_j(5, 128, 1e6));
  // The MultiAxisRope of the library's M-RoPE: pairs [0,16) t, [16,40) h, [40,64) w.
  const rotary::MultiAxisRope<float> mrope(r.spec, rotary::mrope_axis_map(128, r.mrope_section), 64);
  EXPECT_EQ(mrope.streams(), 3);
  EXPECT_EQ(mrope.axis_map().count(0), 16);
  EXPECT_EQ(mrope.axis_map().count(1), 24);
  c.rope_scaling->mrope_section = {16, 24, 23};
  expect_error([&] { resolve(c); }, {"mrope_section sums to 63", "rotary_dim/2 is 64"});
  c.rope_scaling->mrope_section.clear();
  expect_error([&] { resolve(c); }, {"'mrope' needs mrope_section"});
  // Qwen3-VL: rope_type default with interleaved sections [24, 20, 20], theta 5e6.
  c = HfConfig{};
  c.model_type = "qwen3_vl_text";
  c.rope_theta = 5e6;
  p = RopeParameters{};
  p.mrope_section = {24, 20, 20};
  p.mrope_interleaved = true;
  c.rope_scaling = p;
  const auto q = resolve(c);
  EXPECT_TRUE(q.mrope_interleaved);
  EXPECT_EQ(q.spec.head_dim, 128);
  const auto map = rotary::interleaved_mrope_axis_map(128, q.mrope_section);
  EXPECT_EQ(map.count(1), 20);
  EXPECT_EQ(map.count(2), 20);
}

TEST(HfConfig, MropeSectionsAreCheckedWithoutOverflow) {
  HfConfig c = llama(3584, 28);  // head_dim 128: 64 pairs
  c.model_type = "qwen2_vl";
  RopeParameters p;
  p.rope_type = "mrope";
  // INT64_MAX + INT64_MAX + 66 wraps to 64 = rotary_dim/2 in int64 (and is undefined behaviour).
  p.mrope_section = {INT64_MAX, INT64_MAX, 66};
  c.rope_scaling = p;
  expect_error([&] { resolve(c); }, {"mrope_section[0] (9223372036854775807)", "[0, rotary_dim/2 = 64]"});
  c.rope_scaling->mrope_section = {16, 24, INT64_MAX};
  expect_error([&] { resolve(c); }, {"mrope_section[2] (9223372036854775807)", "[0, rotary_dim/2 = 64]"});
  c.rope_scaling->mrope_section = {16, -24, 72};
  expect_error([&] { resolve(c); }, {"mrope_section[1] (-24)"});
  c.rope_scaling->mrope_section = {64, 64, 0};
  expect_error([&] { resolve(c); }, {"mrope_section sums to more than rotary_dim/2 (64)"});
  c.rope_scaling->mrope_section = {0, 64, 0};  // one stream drives every pair: accepted
  EXPECT_EQ(resolve(c).mrope_section, (std::vector<std::int64_t>{0, 64, 0}));
}

TEST(HfConfig, YarnNeedsRopeThetaAboveOne) {
  // YaRN's correction range divides by ln(rope_theta): 0 at 1, negative below (the ramp inverts and
  // no pair would be interpolated).
  HfConfig c = llama();
  RopeParameters p;
  p.rope_type = "yarn";
  p.factor = 4.0;
  c.rope_scaling = p;
  c.rope_theta = 1.0;
  // One rule, one message, whichever entry point: resolve() here, scaled_frequencies() (test_scaling).
  expect_error([&] { resolve(c); },
               {"rope_type 'yarn': rope_theta (1) must be > 1: its correction range divides by ln(rope_theta)"});
  c.rope_theta = 0.5;
  expect_error([&] { resolve(c); }, {"rope_type 'yarn': rope_theta (0.5) must be > 1"});
  c.rope_theta = 1.5;  // any base above 1 works
  EXPECT_EQ(resolve(c).params.rope_type, "yarn");
  // A per-layer-type entry carries its own theta.
  c = llama();
  p.rope_theta = 1.0;
  c.per_layer_type["full_attention"] = p;
  expect_error([&] { resolve(c); }, {"rope_theta (1)", "rope_type 'yarn'"});
  // Rules that do not take ln(rope_theta) keep accepting base 1 (every theta_j = 1).
  c = llama();
  c.rope_theta = 1.0;
  EXPECT_EQ(resolve(c).freqs.theta.back(), 1.0);
  c.rope_scaling = RopeParameters{};
  c.rope_scaling->rope_type = "linear";
  c.rope_scaling->factor = 2.0;
  EXPECT_EQ(resolve(c).freqs.theta.back(), 0.5);
}

TEST(HfConfig, HeadDimIsCappedHoweverItIsDerived) {
  // hidden_size / num_attention_heads: 2^20 / 1 would build a 2^19-entry frequency table.
  HfConfig c = llama(1 << 20, 1);
  expect_error([&] { resolve(c); }, {"hidden_size (1048576)", "num_attention_heads (1)", "at most 65536"});
  c.num_attention_heads.reset();  // n_embd / n_head name the keys the config used
  c.hidden_size.reset();
  c.n_embd = 1 << 20;
  c.n_head = 4;
  expect_error([&] { resolve(c); }, {"n_embd (1048576)", "n_head (4)", "262144", "at most 65536"});
  c.n_head = 16;  // 2^16 exactly: accepted
  EXPECT_EQ(resolve(c).spec.head_dim, 65536);
  // An explicit head_dim or qk_rope_head_dim set in code gets the cap the JSON reader applies.
  c = llama();
  c.head_dim = (1 << 16) + 2;
  expect_error([&] { resolve(c); }, {"head_dim (65538)", "at most 65536"});
  c = llama();
  c.qk_rope_head_dim = 1 << 17;
  expect_error([&] { resolve(c); }, {"qk_rope_head_dim (131072)", "at most 65536"});
}

TEST(HfConfig, DeepseekSoftmaxScaleFactor) {
  HfConfig c;
  c.model_type = "deepseek_v3";
  c.max_position_embeddings = 163840;
  RopeParameters p;
  p.rope_type = "yarn";
  p.factor = 40.0;
  p.mscale = 1.0;
  p.mscale_all_dim = 1.0;
  p.original_max_position_embeddings = 4096;
  c.rope_scaling = p;
  const double m = 1.0 + 0.1 * std::log(40.0);
  EXPECT_NEAR(resolve(c).softmax_scale_factor, m * m, 1e-15);
  EXPECT_EQ(resolve(c).freqs.attention_factor, 1.0);  // m(s, 1) / m(s, 1)
  c.model_type = "kimi_k2";  // DeepSeek-V3's architecture under its own name (Kimi K2, K2.5's text_config)
  EXPECT_NEAR(resolve(c).softmax_scale_factor, m * m, 1e-15);
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::interleaved);
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 64);  // qk_rope_head_dim's class default
  c.model_type = "llama";  // only DeepSeek's attention does this
  EXPECT_EQ(resolve(c).softmax_scale_factor, 1.0);
}

TEST(HfConfig, UnknownFamilyAndAlibi) {
  HfConfig c = llama();
  c.model_type = "some_future_model";
  c.warnings = {"from the parser"};
  // refused, not resolved with rotate_half's pairs: the pairing comes from the caller ...
  expect_error([&] { resolve(c); },
               {"model_type 'some_future_model' is not a family rotary has checked", "config.json does not say",
                "ResolveOptions::pairing", "--pairing"});
  ResolveOptions o;
  o.pairing = Pairing::interleaved;
  const auto r = resolve(c, o);
  EXPECT_EQ(r.spec.pairing, Pairing::interleaved);
  EXPECT_EQ(r.warnings.front(), "from the parser");
  EXPECT_TRUE(has_warning(r, "model_type 'some_future_model' is not a family rotary has checked: no class defaults"));
  // ... or from the config's rope_interleave
  c.rope_interleave = true;
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::interleaved);
  c.rope_interleave.reset();
  c.model_type.reset();
  expect_error([&] { resolve(c); }, {"model_type is absent", "ResolveOptions::pairing"});
  EXPECT_TRUE(has_warning(resolve(c, o), "model_type is absent: no class defaults"));
  c.model_type = "llama";
  c.warnings.clear();
  EXPECT_TRUE(resolve(c).warnings.empty());
  c.model_type = "falcon";
  c.alibi = true;  // tiiuae/falcon-rw-1b
  expect_error([&] { resolve(c); }, {"alibi (true)", "no rotary position embedding"});
  c.alibi = false;
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::half_split);
}

// The 2025 families: what each one's modeling code rotates, from the class defaults and a config's keys.
TEST(HfConfig, FamiliesOf2025) {
  HfConfig c;
  c.model_type = "ernie4_5";  // baidu/ERNIE-4.5-0.3B-PT: adjacent pairs over all 128 values of each head
  auto r = resolve(c);
  EXPECT_EQ(r.spec.pairing, Pairing::interleaved);
  EXPECT_EQ(r.spec.head_dim, 128);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 128);
  EXPECT_EQ(r.freqs.theta[1], theta_j(1, 128, 500000.0));

  c = HfConfig{};
  c.model_type = "glm4_moe";  // zai-org/GLM-4.5-Air: rotate_half on the first half of each head
  c.head_dim = 128;
  c.rope_theta = 1e6;
  r = resolve(c);
  EXPECT_EQ(r.spec.pairing, Pairing::half_split);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 64);
  EXPECT_EQ(r.freqs.theta[3], theta_j(3, 64, 1e6));

  c = HfConfig{};
  c.model_type = "qwen3_next";  // a quarter of each 256-value head; no RoPE in its linear_attention layers
  c.rope_theta = 5e6;
  r = resolve(c);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 64);
  EXPECT_EQ(r.freqs.theta[5], theta_j(5, 64, 5e6));
  ResolveOptions o;
  o.layer_type = "linear_attention";
  expect_error([&] { resolve(c, o); }, {"layer_type (\"linear_attention\")", "qwen3_next", "NoPE"});

  c = HfConfig{};
  c.model_type = "qwen3_5_text";  // Qwen3.5-27B's text_config: Qwen3-Next's attention, interleaved M-RoPE
  c.head_dim = 256;
  RopeParameters q35;
  q35.rope_theta = 1e7;
  q35.partial_rotary_factor = 0.25;
  c.rope_scaling = q35;  // no sections: the rotary embedding's [11, 11, 10], always interleaved
  r = resolve(c);
  EXPECT_EQ(r.spec.pairing, Pairing::half_split);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 64);
  EXPECT_EQ(r.freqs.theta[31], theta_j(31, 64, 1e7));
  EXPECT_EQ(r.mrope_section, (std::vector<std::int64_t>{11, 11, 10}));
  EXPECT_TRUE(r.mrope_interleaved);
  EXPECT_TRUE(r.warnings.empty());
  c.rope_scaling->mrope_interleaved = false;  // its code interleaves whatever the key says (vLLM reads it)
  r = resolve(c);
  EXPECT_TRUE(r.mrope_interleaved);
  EXPECT_TRUE(has_warning(r, "mrope_interleaved (false): qwen3_5_text's modeling code interleaves"));
  c.model_type = "qwen3_5_moe_text";
  expect_error([&] { resolve(c, o); }, {"layer_type (\"linear_attention\")", "NoPE"});

  c = HfConfig{};
  c.model_type = "minimax_m2";  // rotary_dim: the file's key, else half of head_dim
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 64);
  c.head_dim = 256;
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 128);
  c.rotary_dim = 64;
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 64);
}

// Gemma 4: sliding_attention layers default RoPE at 1e4 over head_dim (256); full_attention layers
// proportional RoPE (a quarter of the pairs, the rest at frequency 0) over global_head_dim (512),
// HF's head_dim_key="global_head_dim": read over 256 every rotated frequency would be wrong.
TEST(HfConfig, Gemma4FullLayersSpanGlobalHeadDim) {
  HfConfig c;
  c.model_type = "gemma4_text";  // the class defaults alone
  auto r = resolve(c);
  EXPECT_EQ(r.layer_type, "full_attention");
  EXPECT_EQ(r.params.rope_type, "proportional");
  EXPECT_EQ(r.spec.head_dim, 512);
  ASSERT_EQ(r.freqs.theta.size(), 256u);
  for (std::int64_t j = 0; j < 64; ++j) EXPECT_EQ(r.freqs.theta[j], theta_j(j, 512, 1e6)) << j;
  for (std::int64_t j = 64; j < 256; ++j) EXPECT_EQ(r.freqs.theta[j], 0.0) << j;
  ResolveOptions o;
  o.layer_type = "sliding_attention";
  r = resolve(c, o);
  EXPECT_EQ(r.params.rope_type, "default");
  EXPECT_EQ(r.spec.head_dim, 256);
  EXPECT_EQ(r.freqs.theta[7], theta_j(7, 256, 1e4));
  // google/gemma-4-31B-it's text_config: per-layer rope_parameters, global_head_dim 512
  c.head_dim = 256;
  c.global_head_dim = 512;
  RopeParameters full;
  full.rope_type = "proportional";
  full.partial_rotary_factor = 0.25;
  full.rope_theta = 1e6;
  RopeParameters sliding;
  sliding.rope_theta = 1e4;
  c.per_layer_type = {{"full_attention", full}, {"sliding_attention", sliding}};
  r = resolve(c);
  EXPECT_EQ(r.spec.head_dim, 512);
  EXPECT_EQ(r.freqs.theta[63], theta_j(63, 512, 1e6));
  EXPECT_EQ(resolve(c, o).spec.head_dim, 256);
  // any other rule on the full_attention layers would span head_dim, which does not fit their heads
  c.per_layer_type["full_attention"].rope_type = "default";
  expect_error([&] { resolve(c); }, {"global_head_dim (512)", "'proportional' only", "rope_type 'default'"});
  c.global_head_dim = 256;  // heads of one width: nothing to choose
  EXPECT_EQ(resolve(c).spec.head_dim, 256);
}

// OLMo 3: yarn on its full_attention layers only; its sliding_attention layers use default RoPE at the
// same rope_theta (Olmo3RotaryEmbedding(config, rope_type="default")), unlike Gemma-3's local theta.
TEST(HfConfig, Olmo3SlidingLayersAreUnscaled) {
  HfConfig c;
  c.model_type = "olmo3";  // allenai/Olmo-3-7B's rope keys
  c.max_position_embeddings = 65536;
  c.rope_theta = 500000.0;
  RopeParameters y;
  y.rope_type = "yarn";
  y.factor = 8.0;
  y.original_max_position_embeddings = 8192;
  y.beta_fast = 32.0;
  y.beta_slow = 1.0;
  y.attention_factor = 1.2079441541679836;
  c.rope_scaling = y;
  const auto full = resolve(c);
  EXPECT_EQ(full.layer_type, "full_attention");
  EXPECT_EQ(full.params.rope_type, "yarn");
  EXPECT_EQ(full.freqs.attention_factor, 1.2079441541679836);
  EXPECT_LT(full.freqs.theta[63], theta_j(63, 128, 500000.0));  // the lowest frequency interpolated
  ResolveOptions o;
  o.layer_type = "sliding_attention";
  const auto sliding = resolve(c, o);
  EXPECT_EQ(sliding.params.rope_type, "default");
  EXPECT_EQ(sliding.spec.base, 500000.0);
  EXPECT_EQ(sliding.freqs.attention_factor, 1.0);
  for (std::int64_t j = 0; j < 64; ++j) EXPECT_EQ(sliding.freqs.theta[j], theta_j(j, 128, 500000.0)) << j;
  c.rope_theta.reset();  // a theta inside the flat rope_parameters dict (transformers 5) holds for both
  c.rope_scaling->rope_theta = 500000.0;
  EXPECT_EQ(resolve(c, o).spec.base, 500000.0);
  c.rope_scaling.reset();  // neither: the class default
  EXPECT_EQ(resolve(c, o).spec.base, 10000.0);
  c.model_type = "olmo2";  // every other family's sliding layers keep rope_scaling
  c.rope_scaling = y;
  EXPECT_EQ(resolve(c, o).params.rope_type, "yarn");
}

TEST(HfConfig, FamilyTableIsConsistent) {
  for (const rotary::HfFamily& f : rotary::hf_families()) {
    HfConfig c;
    c.model_type = std::string(f.model_type);
    if (f.model_type == "glm4_moe") {
      // Glm4MoeConfig's defaults alone give head_dim 4096 / 96 = 42 and rotary_dim 21 (HF too); every
      // GLM-4.5 config.json sets head_dim 128
      expect_error([&] { resolve(c); }, {"rotary_dim (21 = int(head_dim 42"});
      c.head_dim = 128;
    }
    if (f.model_type == "granitemoehybrid") {
      // GraniteMoeHybridConfig's position_embedding_type defaults to None: no rotary embedding at all
      expect_error([&] { resolve(c); }, {"position_embedding_type absent (None) builds no rotary embedding"});
      c.position_embedding_type = "rope";
    }
    const auto r = resolve(c);  // every other family resolves from its class defaults alone
    EXPECT_EQ(r.spec.pairing, f.pairing) << f.model_type;
    EXPECT_EQ(r.layer_type, f.rope_layer_type) << f.model_type;
    EXPECT_TRUE(r.warnings.empty()) << f.model_type;
    EXPECT_EQ(rotary::find_hf_family(f.model_type), &f);
  }
}

TEST(HfConfig, Errors) {
  HfConfig c;
  expect_error([&] { resolve(c); }, {"head_dim", "hidden_size (n_embd)", "num_attention_heads (n_head)"});
  c.hidden_size = 4096;  // llama's class default supplies num_attention_heads (32), an unknown family none
  c.model_type = "llama";
  EXPECT_EQ(resolve(c).spec.head_dim, 128);
  c.model_type = "mystery";
  expect_error([&] { resolve(c); }, {"head_dim", "model_type 'mystery' has no class defaults"});
  c = llama();
  c.num_attention_heads = 0;
  expect_error([&] { resolve(c); }, {"num_attention_heads (0)"});
  c = llama();
  c.head_dim = -8;
  expect_error([&] { resolve(c); }, {"head_dim (-8)"});
  c = llama();
  c.rope_theta = -1.0;
  expect_error([&] { resolve(c); }, {"rope_theta (-1)"});
  c = llama();
  c.rotary_dim = 130;
  expect_error([&] { resolve(c); }, {"rotary_dim (130)", "head_dim (128)"});
  c = llama();
  c.rotary_pct = 1.5;
  expect_error([&] { resolve(c); }, {"rotary_pct (1.5)"});
  c = llama();
  c.rope_scaling = RopeParameters{};
  c.rope_scaling->rope_type = "foo";
  expect_error([&] { resolve(c); }, {"rope_type 'foo'"});
  c = llama();
  c.model_type = "mystery";  // llama would supply its class default 2048
  c.max_position_embeddings.reset();
  c.rope_scaling = RopeParameters{};
  c.rope_scaling->rope_type = "dynamic";
  c.rope_scaling->factor = 2.0;
  expect_error([&] { resolve(c); }, {"max_position_embeddings", "dynamic"});
  c = llama();
  ResolveOptions o;
  o.seq_len = -1;
  expect_error([&] { resolve(c, o); }, {"seq_len (-1)"});
}

}  // namespace
