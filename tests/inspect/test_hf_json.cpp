// rotary/hf_json.hpp: config.json text -> HfConfig as transformers reads it (text_config, legacy keys,
// explicit nulls), the warnings for misspelt and ignored keys, and the errors naming a key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <rotary/hf_json.hpp>

#include "support.hpp"

namespace {

using rotary::HfConfig;
using rotary::parse_hf_config;
using rotary::Pairing;
using rotary::resolve;
using rotary_test::expect_error;

bool has_warning(const std::vector<std::string>& warnings, const std::string& fragment) {
  for (const auto& w : warnings)
    if (w.find(fragment) != std::string::npos) return true;
  return false;
}

TEST(HfJson, MisspeltTopLevelKeysWarn) {
  const HfConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "rope_thetaa": 500000,
      "rope_scalling": {"rope_type": "linear", "factor": 2.0}, "partial_rotary_facor": 0.5,
      "Max_Position_Embeddings": 8192, "num_key_value_heads": 8, "v_head_dim": 128, "hidden_sizes": [1, 2]})");
  EXPECT_TRUE(has_warning(c.warnings, "rope_thetaa is not a key transformers reads (did you mean rope_theta?)"));
  EXPECT_TRUE(has_warning(c.warnings, "rope_scalling is not a key transformers reads (did you mean rope_scaling?)"));
  EXPECT_TRUE(has_warning(c.warnings, "partial_rotary_facor"));
  EXPECT_TRUE(has_warning(c.warnings, "Max_Position_Embeddings"));  // case counts: HF's keys are case-sensitive
  EXPECT_EQ(c.warnings.size(), 4u) << ::testing::PrintToString(c.warnings);  // real keys near rope keys: quiet
  const auto r = resolve(c);
  EXPECT_EQ(r.spec.base, 10000.0);  // what transformers uses: the misspelt keys are ignored
  EXPECT_EQ(r.params.rope_type, "default");
  EXPECT_EQ(r.warnings.size(), 4u);  // passed on by resolve()
}

TEST(HfJson, UnknownRopeParametersWarn) {
  const HfConfig c = parse_hf_config(R"({"model_type": "llama", "max_position_embeddings": 4096,
      "rope_scaling": {"type": "dynamic", "factr": 2.0, "factor": 2.0, "finetuned": true}})");
  EXPECT_TRUE(has_warning(c.warnings, "rope_scaling.factr is not a rope parameter (did you mean factor?); ignored"));
  EXPECT_TRUE(has_warning(c.warnings, "rope_scaling.finetuned is not a rope parameter; ignored"));
  EXPECT_EQ(resolve(c).params.rope_type, "dynamic");
}

TEST(HfJson, PublishedConfigsRaiseNoWarnings) {
  // DeepSeek's MLA dims, the MoE keys and a vision tower sit next to rope keys without being misspellings.
  const HfConfig c = parse_hf_config(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
      "num_attention_heads": 128, "num_key_value_heads": 128, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "v_head_dim": 128, "kv_lora_rank": 512, "q_lora_rank": 1536, "max_position_embeddings": 163840,
      "rope_theta": 10000, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
      "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"}})");
  EXPECT_TRUE(c.warnings.empty()) << ::testing::PrintToString(c.warnings);
  EXPECT_TRUE(resolve(c).warnings.empty());
}

TEST(HfJson, TextConfigAloneBuildsTheLanguageModel) {
  // Gemma-3 as published: text_config without rope_theta; a top-level rope_theta is not read by HF.
  const HfConfig c = parse_hf_config(R"({"model_type": "gemma3", "rope_theta": 500000.0,
      "text_config": {"hidden_size": 2560, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})");
  EXPECT_EQ(c.model_type, "gemma3_text");  // the composite's text model type
  EXPECT_FALSE(c.rope_theta.has_value());
  EXPECT_TRUE(has_warning(c.warnings, "rope_theta at the top level is not read"));
  EXPECT_TRUE(has_warning(c.warnings, "class default"));
  const auto r = resolve(c);
  EXPECT_EQ(r.spec.base, 1e6);
  EXPECT_EQ(r.spec.head_dim, 256);
  // The same key on both levels with the same value: nothing to warn about.
  const HfConfig same = parse_hf_config(R"({"model_type": "qwen2_5_vl", "rope_theta": 1000000.0,
      "text_config": {"model_type": "qwen2_5_vl_text", "rope_theta": 1000000.0}})");
  EXPECT_TRUE(same.warnings.empty()) << ::testing::PrintToString(same.warnings);
  // A misspelling inside text_config is named with its path.
  const HfConfig bad = parse_hf_config(R"({"model_type": "llama4",
      "text_config": {"hidden_size": 5120, "rope_theta_": 500000.0}})");
  EXPECT_EQ(bad.model_type, "llama4_text");
  EXPECT_TRUE(has_warning(bad.warnings, "text_config.rope_theta_ is not a key"));
  EXPECT_EQ(resolve(bad).spec.pairing, Pairing::interleaved);
}

TEST(HfJson, LegacyKeysAndNulls) {
  HfConfig c = parse_hf_config(R"({"model_type": "falcon", "n_embed": 4544, "n_head": 71, "alibi": false})");
  EXPECT_EQ(resolve(c).spec.head_dim, 64);  // Falcon's legacy n_embed
  c = parse_hf_config(R"({"model_type": "falcon", "hidden_size": 2048, "n_head": 32, "alibi": true})");
  expect_error([&] { resolve(c); }, {"alibi (true)"});
  c = parse_hf_config(R"({"model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28,
      "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})");
  auto r = resolve(c);
  EXPECT_EQ(r.params.rope_type, "default");
  EXPECT_EQ(r.spec.base, 1e6);  // Qwen2VLConfig's class default
  EXPECT_EQ(r.mrope_section, (std::vector<std::int64_t>{16, 24, 24}));
  // "head_dim": null reaches the class as None, which takes hidden_size / num_attention_heads, not its
  // default (Ernie4_5Config: head_dim 128, None -> hidden_size // num_attention_heads)
  c = parse_hf_config(R"({"model_type": "ernie4_5", "hidden_size": 1024, "num_attention_heads": 16,
      "head_dim": null})");
  EXPECT_EQ(resolve(c).spec.head_dim, 64);
  c = parse_hf_config(R"({"model_type": "ernie4_5", "hidden_size": 1024, "num_attention_heads": 16})");
  EXPECT_EQ(resolve(c).spec.head_dim, 128);  // absent: the class default
  // Gemma 4's composite config: text_config's keys, global_head_dim among them
  c = parse_hf_config(R"({"model_type": "gemma4", "text_config": {"head_dim": 256, "global_head_dim": 512,
      "rope_parameters": {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
      "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default"}}}})");
  EXPECT_TRUE(c.warnings.empty()) << ::testing::PrintToString(c.warnings);
  EXPECT_EQ(c.model_type, "gemma4_text");
  EXPECT_EQ(resolve(c).spec.head_dim, 512);
  {
    rotary::ResolveOptions sliding;
    sliding.layer_type = "sliding_attention";
    EXPECT_EQ(resolve(c, sliding).spec.base, 1e4);  // the class default of the sliding layers
  }
  // Qwen3.5's composite config without text_config's own model_type: the text model's
  c = parse_hf_config(R"({"model_type": "qwen3_5", "text_config": {"head_dim": 256, "rope_parameters":
      {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25, "mrope_interleaved": true,
      "mrope_section": [11, 11, 10]}}})");
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 64);
  c = parse_hf_config(R"({"model_type": "gpt_oss"})");  // the class default rope_scaling: yarn
  EXPECT_EQ(resolve(c).params.rope_type, "yarn");
  c = parse_hf_config(R"({"model_type": "gpt_oss", "rope_scaling": null})");  // HF: None -> default RoPE
  EXPECT_EQ(resolve(c).params.rope_type, "default");
  c = parse_hf_config(R"({"model_type": "gemma3_text", "rope_parameters": {"full_attention": {"rope_type": "default"},
      "sliding_attention": {"rope_type": "default"}}})");  // entries without theta: the class defaults
  rotary::ResolveOptions o;
  EXPECT_EQ(resolve(c, o).spec.base, 1e6);
  o.layer_type = "sliding_attention";
  EXPECT_EQ(resolve(c, o).spec.base, 1e4);
}

TEST(HfJson, RopeDictWithoutTypeIsRefusedUnlessNothingIsLost) {
  // transformers 4 raises KeyError for a rope_scaling without rope_type/type; transformers 5 reads it
  // as default RoPE and only warns. Default RoPE would drop the factor: the 4x extension the file asks
  // for would not be what runs, so it is refused rather than guessed.
  expect_error([] { parse_hf_config(R"({"model_type": "llama", "rope_scaling": {"factor": 4.0}})"); },
               {"rope_scaling", "neither \"rope_type\" nor \"type\"", "factor", "transformers 4 raises KeyError",
                "transformers 5", "add the rope_type"});
  expect_error(
      [] { parse_hf_config(R"({"rope_scaling": {"type": null, "rope_type": null, "factor": 4.0}})"); },
      {"rope_scaling", "neither \"rope_type\" nor \"type\""});
  expect_error(
      [] { parse_hf_config(R"({"text_config": {"rope_parameters": {"rope_theta": 1e6, "factr": 2}}})"); },
      {"text_config.rope_parameters", "factr"});
  const char* per_layer = R"({"model_type": "gemma3_text", "rope_parameters": {
      "full_attention": {"rope_theta": 1e6, "factor": 8.0}, "sliding_attention": {"rope_type": "default"}}})";
  expect_error([&] { parse_hf_config(per_layer); }, {"rope_parameters.full_attention", "factor"});
  expect_error([] { parse_hf_config(R"({"rope_scaling": {"rope_type": "", "factor": 4.0}})"); },
               {"rope_scaling.rope_type", "empty"});
  // Nothing only a scaling rule reads: default RoPE, nothing is lost.
  HfConfig c = parse_hf_config(R"({"model_type": "llama", "rope_scaling": {}})");
  EXPECT_EQ(resolve(c).params.rope_type, "default");
  c = parse_hf_config(R"({"model_type": "llama", "rope_parameters": {"rope_theta": 500000.0}})");
  EXPECT_EQ(resolve(c).spec.base, 500000.0);
  c = parse_hf_config(R"({"model_type": "qwen3_vl_text", "rope_scaling": {"mrope_section": [24, 20, 20],
      "mrope_interleaved": true}})");
  EXPECT_TRUE(resolve(c).mrope_interleaved);
}

// HunYuan's NTK-alpha: {"type": "dynamic", "alpha": 1000, "factor": 1} is the fixed base
// rope_theta * alpha^(d / (d - 2)) in its modeling code and in vLLM; read as dynamic NTK with factor 1
// it would leave every frequency unscaled.
TEST(HfJson, HunyuanAlphaIsAFixedNtkBase) {
  HfConfig c = parse_hf_config(R"({"model_type": "hunyuan_v1_dense", "hidden_size": 4096, "num_attention_heads": 32,
      "head_dim": 128, "max_position_embeddings": 262144, "rope_theta": 10000.0,
      "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0, "beta_fast": 32, "beta_slow": 1,
                       "mscale": 1.0, "mscale_all_dim": 1.0}})");
  EXPECT_TRUE(c.warnings.empty()) << ::testing::PrintToString(c.warnings);
  const auto r = resolve(c);
  EXPECT_EQ(r.params.rope_type, "ntk");
  EXPECT_EQ(r.freqs.attention_factor, 1.0);
  const double base = 10000.0 * std::pow(1000.0, 128.0 / 126.0);
  for (const std::int64_t j : {1, 10, 63}) {
    const double want = std::pow(base, -2.0 * static_cast<double>(j) / 128.0);
    // the double reference's own error: (2j/d) ln(base) 2^-53 <= 1.9e-15 relative
    EXPECT_NEAR(r.freqs.theta[static_cast<std::size_t>(j)], want, 4e-15 * want) << j;
  }
  rotary::ResolveOptions o;
  o.seq_len = 1 << 20;  // fixed: no growth with the sequence
  EXPECT_EQ(resolve(c, o).freqs.theta[63], r.freqs.theta[63]);
  // alpha 0 is falsy in HunYuan's code: plain dynamic NTK
  c = parse_hf_config(R"({"model_type": "hunyuan_v1_moe", "rope_scaling": {"type": "dynamic", "alpha": 0,
      "factor": 2.0}})");
  EXPECT_EQ(resolve(c).params.rope_type, "dynamic");
  // any other rope_type with an alpha: nobody reads it that way
  expect_error([] { parse_hf_config(R"({"rope_scaling": {"rope_type": "linear", "alpha": 1000, "factor": 2}})"); },
               {"rope_scaling.alpha (1000)", "HunYuan", "\"linear\""});
}

// A key set to null reaches transformers' class as None, not as the class default (head_dim's None has
// its own meaning, above). Where rotary would have taken that default, it refuses, naming the key; where
// the value is not needed, or the family has no default for it, the null is harmless.
TEST(HfJson, NullWhereTheClassHasADefaultIsRefused) {
  const auto refused = [](const char* json, const char* key) {
    const HfConfig c = parse_hf_config(json);
    expect_error([&] { resolve(c); }, {key, "is null in config.json", "gets None"});
  };
  refused(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": null})",
          "rope_theta");
  refused(R"({"model_type": "llama", "hidden_size": null, "num_attention_heads": 32})", "hidden_size");
  refused(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": null})", "num_attention_heads");
  refused(R"({"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32, "partial_rotary_factor": null})",
          "partial_rotary_factor");
  refused(R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": null})", "rotary_dim");
  refused(R"({"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
      "qk_rope_head_dim": null})", "qk_rope_head_dim");
  refused(R"({"model_type": "gemma3_text", "head_dim": 256, "rope_local_base_freq": null})", "rope_local_base_freq");
  refused(R"({"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 2, "max_position_embeddings": 8192,
      "original_max_position_embeddings": null, "rope_scaling": {"type": "longrope",
      "short_factor": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
      "long_factor": [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]}})", "original_max_position_embeddings");
  // max_position_embeddings: null is refused where the rope type reads it, and harmless where not
  HfConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "max_position_embeddings": null, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})");
  expect_error([&] { resolve(c); }, {"max_position_embeddings", "as null"});
  c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "max_position_embeddings": null})");
  EXPECT_EQ(resolve(c).spec.base, 1e4);
  // No class default to stand in for: a null partial_rotary_factor rotates the whole head, as transformers 5
  c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
      "partial_rotary_factor": null})");
  EXPECT_EQ(resolve(c).spec.effective_rotary_dim(), 128);
  // A value given another way: rope_theta null beside rotary_emb_base is not needed
  c = parse_hf_config(R"({"model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64,
      "rope_theta": null, "rotary_emb_base": 10000})");
  EXPECT_EQ(resolve(c).spec.base, 1e4);
}

TEST(HfJson, ErrorsNameTheKey) {
  expect_error([] { parse_hf_config("{\"model_type\": "); }, {"not valid JSON"});
  expect_error([] { parse_hf_config("[1, 2]"); }, {"(top level)", "an object"});
  expect_error([] { parse_hf_config(R"({"rope_theta": "1e4"})"); }, {"\"rope_theta\" must be a number"});
  expect_error([] { parse_hf_config(R"({"text_config": {"head_dim": 1.5}})"); },
               {"\"text_config.head_dim\" must be an integer"});
  expect_error([] { parse_hf_config(R"({"rope_scaling": {"mrope_section": [16, "x"]}})"); },
               {"rope_scaling.mrope_section[1]"});
  expect_error([] { parse_hf_config(R"({"head_dim": 100000000})"); }, {"\"head_dim\" (100000000)", "larger"});
  expect_error([] { rotary::load_hf_config("/nonexistent/config.json"); }, {"cannot open the file"});
}

}  // namespace
