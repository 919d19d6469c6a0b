// HfConfig -> resolve(): head_dim derivations, partial rotary, legacy keys, layer types, pairing by
// model family and the errors, on configs built in code (the JSON side is tested through
// rotary-inspect in tests/inspect).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include <rotary/hf_config.hpp>

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
  c.rope_local_base_freq.reset();  // without it, sliding layers share the global rope (Mistral, ...)
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
  for (const char* m : {"gptj", "codegen", "cohere", "cohere2", "glm", "glm4", "chatglm", "deepseek_v2", "deepseek_v3"})
    EXPECT_EQ(rotary::pairing_for_model_type(m), Pairing::interleaved) << m;
  for (const char* m : {"llama", "mistral", "qwen2", "qwen3", "phi", "phi3", "gpt_neox", "gemma3_text", "stablelm",
                        "falcon", "", "some_future_model"})
    EXPECT_EQ(rotary::pairing_for_model_type(m), Pairing::half_split) << m;
  HfConfig c = llama();
  c.model_type = "cohere";
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::interleaved);
  c.model_type.reset();
  EXPECT_EQ(resolve(c).spec.pairing, Pairing::half_split);
  ResolveOptions o;
  o.pairing = Pairing::interleaved;  // the override wins
  EXPECT_EQ(resolve(c, o).spec.pairing, Pairing::interleaved);
}

TEST(HfConfig, Errors) {
  HfConfig c;
  expect_error([&] { resolve(c); }, {"head_dim", "hidden_size + num_attention_heads", "n_embd + n_head"});
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
