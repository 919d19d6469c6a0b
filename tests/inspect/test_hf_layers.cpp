// rotary/hf_layers.hpp: every layer of a published model gets the RoPE transformers gives it, none
// (NoPE), or a refusal naming why. The layer-type rules HF applies are each a test here: Gemma 3's
// five local-RoPE sliding layers per global one (sliding_window_pattern, class default 6), Gemma 4's
// layer_types with a rope_parameters entry per type, OLMo 3's scaling on full-attention layers only,
// Llama 4's and SmolLM3's NoPE layers by index (no_rope_layers, else every 4th), Qwen3-Next's
// linear-attention layers without RoPE. Expectations are written from the HF configuration classes'
// derivations (index arithmetic here, not rotary's), and each RoPE layer's answer is compared with
// resolve() for its layer type, which tests/inspect checks against the independent derivation.
#include <gtest/gtest.h>

#include <cmath>
#include <climits>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <rotary/apply.hpp>
#include <rotary/hf_json.hpp>
#include <rotary/hf_layers.hpp>
#include <rotary/reference.hpp>
#include <rotary/rope.hpp>

#include "support.hpp"

namespace {

using nlohmann::json;
using rotary::HfConfig;
using rotary::LayerRope;
using rotary::LayerRopeKind;
using rotary::resolve_layers;

json published(const std::string& name) {
  std::ifstream in(std::string(ROTARY_PUBLISHED_CONFIGS) + "/" + name + ".json");
  EXPECT_TRUE(in.good()) << name;
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

std::vector<LayerRope> layers_of(const json& j, const rotary::ResolveOptions& o = {}) {
  return resolve_layers(rotary::hf_config_from_json(j), o);
}

// Layer i's answer equals resolve() for its layer type, bit for bit (theta, attention factor, spec).
void expect_same_as_resolve(const json& j, const LayerRope& l) {
  ASSERT_EQ(l.kind, LayerRopeKind::rope) << "layer " << l.index << ": " << l.reason;
  ASSERT_TRUE(l.rope != nullptr);
  rotary::ResolveOptions o;
  o.layer_type = l.layer_type;
  const rotary::ResolvedRope r = rotary::resolve(rotary::hf_config_from_json(j), o);
  EXPECT_EQ(l.rope->freqs.theta, r.freqs.theta) << "layer " << l.index;
  EXPECT_EQ(l.rope->freqs.attention_factor, r.freqs.attention_factor);
  EXPECT_EQ(l.rope->spec.effective_rotary_dim(), r.spec.effective_rotary_dim());
  EXPECT_EQ(l.rope->spec.pairing, r.spec.pairing);
  EXPECT_EQ(l.rope->params.rope_type, r.params.rope_type);
}

TEST(HfLayers, Gemma3SlidingPatternFromTheClassDefault) {
  const json j = published("gemma-3-27b-it");  // 62 layers, no layer_types, no sliding_window_pattern
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 62u);
  for (const LayerRope& l : layers) {
    const bool full = (l.index + 1) % 6 == 0;  // Gemma3TextConfig: sliding unless (i + 1) % 6 == 0
    EXPECT_EQ(l.layer_type, full ? "full_attention" : "sliding_attention") << l.index;
    expect_same_as_resolve(j, l);
    EXPECT_EQ(l.rope->params.rope_type, full ? "linear" : "default") << l.index;  // x8 on global layers only
    EXPECT_EQ(l.rope->params.rope_theta, full ? 1e6 : 1e4) << l.index;
  }
  EXPECT_EQ(layers[0].rope, layers[1].rope);  // one resolution per layer type, shared by its layers
  EXPECT_NE(layers[0].rope, layers[5].rope);
  json pattern = j;  // an explicit pattern wins over the class default
  pattern["text_config"]["sliding_window_pattern"] = 4;
  for (const LayerRope& l : layers_of(pattern))
    EXPECT_EQ(l.layer_type, (l.index + 1) % 4 == 0 ? "full_attention" : "sliding_attention") << l.index;
}

TEST(HfLayers, Gemma4LayerTypesFromTheFile) {
  const json j = published("gemma-4-31b-it");
  const auto layers = layers_of(j);
  const auto& types = j["text_config"]["layer_types"];
  ASSERT_EQ(layers.size(), types.size());
  int full = 0;
  for (const LayerRope& l : layers) {
    EXPECT_EQ(l.layer_type, types[static_cast<std::size_t>(l.index)].get<std::string>());
    expect_same_as_resolve(j, l);
    const bool is_full = l.layer_type == "full_attention";
    full += is_full ? 1 : 0;
    EXPECT_EQ(l.rope->params.rope_type, is_full ? "proportional" : "default") << l.index;
  }
  EXPECT_EQ(full, 10);  // 60 layers, every sixth global
}

TEST(HfLayers, Olmo3ScalesFullAttentionLayersOnly) {
  const json j = published("olmo-3-7b");
  for (const LayerRope& l : layers_of(j)) {
    expect_same_as_resolve(j, l);
    EXPECT_EQ(l.rope->params.rope_type, l.layer_type == "full_attention" ? "yarn" : "default") << l.index;
  }
}

TEST(HfLayers, Llama4NoPEEveryFourthLayer) {
  const json j = published("llama-4-scout-17b-16e-instruct");
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 48u);
  for (const LayerRope& l : layers) {
    const bool nope = (l.index + 1) % 4 == 0;  // the file's no_rope_layers: 1, 1, 1, 0, ...
    EXPECT_EQ(l.layer_type, nope ? "full_attention" : "chunked_attention") << l.index;
    if (nope) {
      EXPECT_EQ(l.kind, LayerRopeKind::nope) << l.index;
      EXPECT_EQ(l.rope, nullptr);
      EXPECT_NE(l.reason.find("no_rope_layers[" + std::to_string(l.index) + "] is 0"), std::string::npos) << l.reason;
    } else {
      expect_same_as_resolve(j, l);
      EXPECT_EQ(l.rope->params.rope_type, "llama3");
      EXPECT_EQ(l.rope->spec.pairing, rotary::Pairing::interleaved);
    }
  }
  // Without the list: the class default (NoPE every no_rope_layer_interval-th layer, 4), then 3.
  json derived = j;
  derived["text_config"].erase("no_rope_layers");
  for (const std::int64_t every : {4, 3}) {
    if (every != 4) derived["text_config"]["no_rope_layer_interval"] = every;
    for (const LayerRope& l : layers_of(derived))
      EXPECT_EQ(l.kind == LayerRopeKind::nope, (l.index + 1) % every == 0) << "interval " << every << " layer " << l.index;
  }
}

TEST(HfLayers, SmolLM3NoPEByIndex) {
  const json j = published("smollm3-3b");
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 36u);
  for (const LayerRope& l : layers) {
    EXPECT_EQ(l.layer_type, "full_attention");
    if ((l.index + 1) % 4 == 0) {
      EXPECT_EQ(l.kind, LayerRopeKind::nope) << l.index;
    } else {
      expect_same_as_resolve(j, l);
      EXPECT_EQ(l.rope->params.rope_theta, 5e6);
    }
  }
  json edited = j;  // a list from the file is read entry by entry, not as a pattern
  edited["no_rope_layers"][0] = 0;
  edited["no_rope_layers"][3] = 1;
  const auto e = layers_of(edited);
  EXPECT_EQ(e[0].kind, LayerRopeKind::nope);
  EXPECT_EQ(e[3].kind, LayerRopeKind::rope);
  // SmolLM3Config without layer_types: NoPE layers are sliding when use_sliding_window and sliding_window say so.
  edited.erase("layer_types");
  edited["use_sliding_window"] = true;
  edited["sliding_window"] = 4096;
  const auto s = layers_of(edited);
  EXPECT_EQ(s[0].layer_type, "sliding_attention");
  EXPECT_EQ(s[1].layer_type, "full_attention");
}

TEST(HfLayers, Qwen3NextLinearAttentionLayersHaveNoRoPE) {
  const json j = published("qwen3-coder-next");
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 48u);
  for (const LayerRope& l : layers) {
    if (l.layer_type == "linear_attention") {
      EXPECT_EQ(l.kind, LayerRopeKind::nope) << l.index;
      EXPECT_NE(l.reason.find("\"linear_attention\""), std::string::npos) << l.reason;
    } else {
      EXPECT_EQ((l.index + 1) % 4, 0) << l.index;  // full_attention_interval 4
      expect_same_as_resolve(j, l);
    }
  }
  json derived = j;  // without layer_types: Qwen3NextConfig's full_attention_interval
  derived.erase("layer_types");
  derived["full_attention_interval"] = 3;
  for (const LayerRope& l : layers_of(derived))
    EXPECT_EQ(l.layer_type, (l.index + 1) % 3 == 0 ? "full_attention" : "linear_attention") << l.index;
}

TEST(HfLayers, OneFamilyOneRotationOnEveryLayer) {
  for (const char* name : {"llama-3.1-8b-instruct", "qwen3-8b", "deepseek-v3", "gpt-oss-20b"}) {
    const json j = published(name);
    const auto layers = layers_of(j);
    const json& t = j.contains("text_config") ? j["text_config"] : j;
    ASSERT_EQ(static_cast<std::int64_t>(layers.size()), t["num_hidden_layers"].get<std::int64_t>()) << name;
    for (const LayerRope& l : layers) expect_same_as_resolve(j, l);
  }
}

TEST(HfLayers, CountUnknownGivesOneRowPerLayerType) {
  json j = published("qwen3-coder-next");
  j.erase("num_hidden_layers");
  j.erase("layer_types");
  const auto rows = layers_of(j);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].index, -1);
  EXPECT_EQ(rows[0].layer_type, "full_attention");
  EXPECT_EQ(rows[0].kind, LayerRopeKind::rope);
  EXPECT_EQ(rows[1].layer_type, "linear_attention");
  EXPECT_EQ(rows[1].kind, LayerRopeKind::nope);
}

TEST(HfLayers, RefusalsNameTheirCause) {
  using rotary_test::expect_error;
  json j = published("olmo-3-7b");
  j["layer_types"].erase(0);
  expect_error([&] { layers_of(j); }, {"layer_types has 31 entries; num_hidden_layers is 32"});
  json s = published("smollm3-3b");
  s["no_rope_layers"].erase(0);
  expect_error([&] { layers_of(s); }, {"no_rope_layers has 35 entries for 36 layers"});
  s.erase("no_rope_layers");
  s["no_rope_layer_interval"] = 0;
  expect_error([&] { layers_of(s); }, {"no_rope_layer_interval (0) must be positive"});
  json big = published("qwen3-8b");
  big["num_hidden_layers"] = 1 << 20;
  expect_error([&] { layers_of(big); }, {"num_hidden_layers (1048576) must be in [0, 16384]"});
  // A family rotary has not checked: every layer refused, each with resolve()'s message.
  json unknown = published("qwen3-8b");
  unknown["model_type"] = "not_a_family";
  for (const LayerRope& l : layers_of(unknown)) {
    EXPECT_EQ(l.kind, LayerRopeKind::refused) << l.index;
    EXPECT_NE(l.reason.find("does not say how its RoPE pairs"), std::string::npos) << l.reason;
  }
  rotary::ResolveOptions o;  // the caller's pairing resolves them
  o.pairing = rotary::Pairing::half_split;
  for (const LayerRope& l : layers_of(unknown, o)) EXPECT_EQ(l.kind, LayerRopeKind::rope) << l.index;
}

}  // namespace

namespace {

// Families read from their modeling code (no verbatim published config here: these configs are written
// from the keys their published files use, each named in the test).

// EXAONE 4 (Exaone4Attention: "We use global NoPE for hybrid attention model"): RoPE on a layer iff
// sliding_window is None or the layer is sliding. The class default sliding_window is 4096.
TEST(HfLayers, Exaone4GlobalNoPEWhenHybrid) {
  json j = json::parse(R"({"model_type": "exaone4", "hidden_size": 5120, "num_attention_heads": 40,
      "head_dim": 128, "num_hidden_layers": 8, "max_position_embeddings": 131072, "rope_theta": 1000000,
      "sliding_window": 4096, "sliding_window_pattern": "LLLG",
      "rope_scaling": {"factor": 16.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  for (const bool with_types : {false, true}) {
    if (with_types) {  // the published form: layer_types spelled out; "LLLG" read as vLLM does without them
      j["layer_types"] = json::array();
      for (int i = 0; i < 8; ++i) j["layer_types"].push_back((i + 1) % 4 == 0 ? "full_attention" : "sliding_attention");
    }
    for (const LayerRope& l : layers_of(j)) {
      const bool global = (l.index + 1) % 4 == 0;
      EXPECT_EQ(l.layer_type, global ? "full_attention" : "sliding_attention") << l.index;
      EXPECT_EQ(l.kind, global ? LayerRopeKind::nope : LayerRopeKind::rope) << l.index;
      if (!global) {
        expect_same_as_resolve(j, l);
        EXPECT_EQ(l.rope->params.rope_type, "llama3");
        EXPECT_EQ(l.rope->spec.pairing, rotary::Pairing::half_split);
      }
    }
  }
  // resolve() alone: the RoPE layers by default, the global ones refused as NoPE.
  const HfConfig c = rotary::hf_config_from_json(j);
  EXPECT_EQ(rotary::resolve(c).layer_type, "sliding_attention");
  rotary::ResolveOptions full;
  full.layer_type = "full_attention";
  rotary_test::expect_error([&] { rotary::resolve(c, full); }, {"exaone4 applies no rotary embedding"});
  // The class default sliding_window (4096) is hybrid too: an absent key is not null.
  json absent = j;
  absent.erase("sliding_window");
  EXPECT_EQ(layers_of(absent)[3].kind, LayerRopeKind::nope);
  // "sliding_window": null (EXAONE 4.0 1.2B): no hybrid attention, RoPE on every layer.
  json global = j;
  global["sliding_window"] = nullptr;
  for (const LayerRope& l : layers_of(global)) EXPECT_EQ(l.kind, LayerRopeKind::rope) << l.index;
  global.erase("layer_types");  // and no pattern to derive them from: transformers divides by 0
  rotary_test::expect_error([&] { layers_of(global); }, {"give layer_types"});
  json bad = j;
  bad["sliding_window_pattern"] = "LLXG";
  rotary_test::expect_error([&] { layers_of(bad); }, {"sliding_window_pattern", "a string of L and G"});
}

// Apertus: ApertusConfig's default rope_parameters is llama3 (factor 8, low 1, high 4, L0 8192) at 1.2e7.
TEST(HfLayers, ApertusClassDefaultLlama3) {
  const json j = json::parse(R"({"model_type": "apertus", "hidden_size": 4096, "num_attention_heads": 32,
      "num_hidden_layers": 32, "max_position_embeddings": 65536})");
  const rotary::ResolvedRope r = rotary::resolve(rotary::hf_config_from_json(j));
  EXPECT_EQ(r.params.rope_type, "llama3");
  EXPECT_EQ(r.params.rope_theta, 1.2e7);
  EXPECT_EQ(*r.params.factor, 8.0);
  EXPECT_EQ(*r.params.original_max_position_embeddings, 8192);
  EXPECT_EQ(r.spec.pairing, rotary::Pairing::half_split);
  // The llama3 rule over head_dim 128 at 1.2e7, written out: pair 0 (wavelength 2*pi < 8192/4) kept,
  // pair 63 (wavelength far above 8192) divided by 8.
  EXPECT_EQ(r.freqs.theta[0], 1.0);
  const double inv63 = 1.0 / std::pow(1.2e7, 126.0 / 128.0);
  EXPECT_NEAR(r.freqs.theta[63], inv63 / 8.0, 1e-15 * inv63);
  json null_scaling = j;  // an explicit null is default RoPE, whatever the class default
  null_scaling["rope_scaling"] = nullptr;
  EXPECT_EQ(rotary::resolve(rotary::hf_config_from_json(null_scaling)).params.rope_type, "default");
}

// LFM2: convolution layers (not in full_attn_idxs) have no attention; the original key "theta" wins.
TEST(HfLayers, Lfm2ConvLayersAndTheta) {
  const json j = json::parse(R"({"model_type": "lfm2", "hidden_size": 1024, "num_attention_heads": 16,
      "num_hidden_layers": 16, "max_position_embeddings": 128000, "rope_theta": 1000000.0,
      "full_attn_idxs": [2, 5, 8, 10, 12, 14]})");
  int attention = 0;
  for (const LayerRope& l : layers_of(j)) {
    const bool attends = l.index == 2 || l.index == 5 || l.index == 8 || l.index == 10 || l.index == 12 || l.index == 14;
    EXPECT_EQ(l.layer_type, attends ? "full_attention" : "conv") << l.index;
    EXPECT_EQ(l.kind, attends ? LayerRopeKind::rope : LayerRopeKind::nope) << l.index;
    if (attends) {
      ++attention;
      EXPECT_EQ(l.rope->params.rope_theta, 1e6);
      EXPECT_EQ(l.rope->spec.head_dim, 64);
    }
  }
  EXPECT_EQ(attention, 6);
  json theta = j;  // Lfm2Config: rope_theta = kwargs.get("theta", rope_theta)
  theta["theta"] = 5e5;
  EXPECT_EQ(rotary::resolve(rotary::hf_config_from_json(theta)).params.rope_theta, 5e5);
  json types = j;  // LFM2.5's form: layer_types
  types.erase("full_attn_idxs");
  types["layer_types"] = json::array();
  for (int i = 0; i < 16; ++i) types["layer_types"].push_back(i == 2 ? "full_attention" : "conv");
  const auto t = layers_of(types);
  EXPECT_EQ(t[2].kind, LayerRopeKind::rope);
  EXPECT_EQ(t[3].kind, LayerRopeKind::nope);
}

// MiniMax-Text-01 (model_type minimax, transformers' MiniMaxConfig / MiniMaxRotaryEmbedding): without
// layer_types, layer i is "full_attention" where i + 1 is odd and "linear_attention" (lightning
// attention, no RoPE) otherwise; the rotary embedding spans the whole head_dim and reads neither
// rotary_dim nor partial_rotary_factor (a warning says so); vLLM's MiniMaxText01 rotates rotary_dim
// (EngineQuirks::vllm_minimax_rotary_dim). The shape is MiniMax-Text-01's (its own config carries
// rotary_dim 64 of head_dim 128).
TEST(HfLayers, MiniMaxLightningLayersAndWidth) {
  const json j = json::parse(R"({"model_type": "minimax", "hidden_size": 6144, "num_attention_heads": 64,
      "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 6, "rope_theta": 10000000,
      "max_position_embeddings": 10240000, "rotary_dim": 64})");
  for (const LayerRope& l : layers_of(j)) {
    const bool softmax = (l.index + 1) % 2 == 1;
    EXPECT_EQ(l.layer_type, softmax ? "full_attention" : "linear_attention") << l.index;
    EXPECT_EQ(l.kind, softmax ? LayerRopeKind::rope : LayerRopeKind::nope) << l.index;
    if (softmax) expect_same_as_resolve(j, l);
  }
  const rotary::ResolvedRope hf = rotary::resolve(rotary::hf_config_from_json(j));
  EXPECT_EQ(hf.spec.pairing, rotary::Pairing::half_split);
  EXPECT_EQ(hf.spec.effective_rotary_dim(), 128);
  EXPECT_EQ(hf.params.rope_theta, 1e7);
  ASSERT_EQ(hf.freqs.theta.size(), 64u);
  EXPECT_DOUBLE_EQ(hf.freqs.theta[1], 1.0 / std::pow(1e7, 2.0 / 128.0));
  bool warned = false;
  for (const std::string& w : hf.warnings) warned = warned || w.find("rotary_dim 64 is not read") != std::string::npos;
  EXPECT_TRUE(warned);

  rotary::ResolveOptions vllm;
  vllm.quirks.vllm_minimax_rotary_dim = true;
  const rotary::ResolvedRope v = rotary::resolve(rotary::hf_config_from_json(j), vllm);
  EXPECT_EQ(v.spec.effective_rotary_dim(), 64);
  ASSERT_EQ(v.freqs.theta.size(), 32u);
  EXPECT_DOUBLE_EQ(v.freqs.theta[1], 1.0 / std::pow(1e7, 2.0 / 64.0));
  json no_key = j;  // vLLM without rotary_dim: the whole head
  no_key.erase("rotary_dim");
  EXPECT_EQ(rotary::resolve(rotary::hf_config_from_json(no_key), vllm).spec.effective_rotary_dim(), 128);
  EXPECT_TRUE(rotary::resolve(rotary::hf_config_from_json(no_key)).warnings.empty());

  json defaults = json::parse(R"({"model_type": "minimax"})");  // MiniMaxConfig's defaults
  const rotary::ResolvedRope d = rotary::resolve(rotary::hf_config_from_json(defaults));
  EXPECT_EQ(d.params.rope_theta, 1e6);
  EXPECT_EQ(d.spec.head_dim, 128);  // 4096 / 32
  const auto types = layers_of(defaults);  // no num_hidden_layers: one row per layer type
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0].layer_type, "full_attention");
  EXPECT_EQ(types[0].kind, LayerRopeKind::rope);
  EXPECT_EQ(types[1].layer_type, "linear_attention");
  EXPECT_EQ(types[1].kind, LayerRopeKind::nope);

  json partial = j;  // another rope_type over a narrower table: HF's q * cos would not broadcast
  partial.erase("rotary_dim");
  partial["partial_rotary_factor"] = 0.5;
  partial["rope_scaling"] = json::parse(R"({"rope_type": "linear", "factor": 2.0})");
  rotary_test::expect_error([&] { rotary::resolve(rotary::hf_config_from_json(partial)); },
                            {"minimax", "partial_rotary_factor 0.5", "linear"});
  rotary::ResolveOptions lightning;
  lightning.layer_type = "linear_attention";
  rotary_test::expect_error([&] { rotary::resolve(rotary::hf_config_from_json(j), lightning); },
                            {"linear_attention", "NoPE"});
}

// LongCat-Flash (model_type longcat_flash, LongcatFlashConfig / LongcatFlashMLA): DeepSeek-V3's MLA, adjacent
// pairs on the 64-value rope slice of each head, θ 1e7 by class default; two attention blocks per layer
// (num_hidden_layers = 2 * num_layers), every one rotated; yarn's mscale(factor, mscale_all_dim)^2 on the
// softmax scale, as DeepSeek's. The shape is LongCat-Flash's (the class defaults).
TEST(HfLayers, LongcatFlashTwoBlocksPerLayer) {
  const json j = json::parse(R"({"model_type": "longcat_flash", "hidden_size": 6144, "num_attention_heads": 64,
      "num_layers": 28, "num_hidden_layers": 56, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
      "head_dim": 64, "max_position_embeddings": 131072})");
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 56u);
  for (const LayerRope& l : layers) expect_same_as_resolve(j, l);
  const rotary::ResolvedRope r = rotary::resolve(rotary::hf_config_from_json(j));
  EXPECT_EQ(r.spec.pairing, rotary::Pairing::interleaved);
  EXPECT_EQ(r.spec.head_dim, 64);
  EXPECT_EQ(r.params.rope_theta, 1e7);
  EXPECT_EQ(r.softmax_scale_factor, 1.0);
  json fewer = j;  // the file's num_hidden_layers does not count: transformers sets 2 * num_layers
  fewer["num_hidden_layers"] = 28;
  EXPECT_EQ(layers_of(fewer).size(), 56u);
  fewer.erase("num_layers");
  EXPECT_EQ(layers_of(fewer).size(), 28u);

  json yarn = j;  // DeepSeek's yarn softmax scale: mscale(40, 1)^2
  yarn["rope_scaling"] = json::parse(R"({"rope_type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
      "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1})");
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(rotary::resolve(rotary::hf_config_from_json(yarn)).softmax_scale_factor, m * m);

  json wider = j;  // HF's table over head_dim 128 would not match the 64-value slice
  wider["head_dim"] = 128;
  rotary_test::expect_error([&] { rotary::resolve(rotary::hf_config_from_json(wider)); },
                            {"longcat_flash", "head_dim (128)", "qk_rope_head_dim (64)"});
  json huge = j;
  huge["num_layers"] = 1 << 20;
  rotary_test::expect_error([&] { layers_of(huge); }, {"num_layers (1048576)"});
}

// DeepSeek-V4 (model_type deepseek_v4, DeepseekV4Config / DeepseekV4Attention): adjacent pairs on the last 64
// values of each 512-value head (64 = int(512 * qk_rope_head_dim / head_dim)); sliding_attention layers
// (compress ratio 0) use "main": default RoPE at rope_theta; the compressed layers (ratios 4, 128) use
// "compress": the config's yarn at compress_rope_theta with attention_factor 1; the attention output is
// rotated back at the query positions. The keys are DeepSeek-V4-Flash's.
TEST(HfLayers, DeepseekV4MainAndCompressRopes) {
  const json j = json::parse(R"({"model_type": "deepseek_v4", "head_dim": 512, "qk_rope_head_dim": 64,
      "rope_theta": 10000, "compress_rope_theta": 160000, "max_position_embeddings": 1048576,
      "num_hidden_layers": 6, "compress_ratios": [0, 0, 4, 128, 4, 128, 0],
      "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16,
                       "original_max_position_embeddings": 65536, "type": "yarn"}})");
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 6u);
  const char* types[] = {"sliding_attention", "sliding_attention", "compressed_sparse_attention",
                         "heavily_compressed_attention", "compressed_sparse_attention", "heavily_compressed_attention"};
  rotary::RopeParameters yarn;  // what DeepseekV4Config hands the compress rope
  yarn.rope_type = "yarn";
  yarn.rope_theta = 160000.0;
  yarn.factor = 16.0;
  yarn.original_max_position_embeddings = 65536;
  yarn.beta_fast = 32.0;
  yarn.beta_slow = 1.0;
  yarn.attention_factor = 1.0;
  rotary::ScalingInput in;
  in.head_dim = 64;
  in.rotary_dim = 64;
  in.max_position_embeddings = 1048576;
  const rotary::Frequencies compress = rotary::scaled_frequencies(yarn, in);
  for (const LayerRope& l : layers) {
    EXPECT_EQ(l.layer_type, types[l.index]) << l.index;
    expect_same_as_resolve(j, l);
    EXPECT_EQ(l.rope->spec.pairing, rotary::Pairing::interleaved);
    EXPECT_EQ(l.rope->spec.head_dim, 64);
    EXPECT_EQ(l.rope->spec.effective_rotary_dim(), 64);
    EXPECT_TRUE(l.rope->inverse_on_output);
    EXPECT_EQ(l.rope->softmax_scale_factor, 1.0);
    if (l.index < 2) {
      EXPECT_EQ(l.rope->params.rope_type, "default");
      EXPECT_EQ(l.rope->params.rope_theta, 1e4);
      EXPECT_DOUBLE_EQ(l.rope->freqs.theta[1], std::pow(1e4, -2.0 / 64.0));
    } else {
      EXPECT_EQ(l.rope->params.rope_type, "yarn");
      EXPECT_EQ(l.rope->params.rope_theta, 160000.0);
      EXPECT_EQ(l.rope->freqs.theta, compress.theta);
      EXPECT_EQ(l.rope->freqs.attention_factor, 1.0);
    }
  }
  const rotary::ResolvedRope r = rotary::resolve(rotary::hf_config_from_json(j));  // the family's layer type
  EXPECT_EQ(r.layer_type, "compressed_sparse_attention");

  json nested = j;  // rope_parameters with both entries: used as they stand
  nested.erase("rope_scaling");
  nested["rope_parameters"] = json::parse(R"({"main": {"rope_type": "default", "rope_theta": 20000},
      "compress": {"rope_type": "linear", "factor": 2.0, "rope_theta": 40000}})");
  const auto n = layers_of(nested);
  EXPECT_EQ(n[0].rope->params.rope_theta, 20000.0);
  EXPECT_EQ(n[2].rope->params.rope_type, "linear");
  EXPECT_EQ(n[2].rope->params.rope_theta, 40000.0);
  json half = nested;
  half["rope_parameters"].erase("main");
  for (const LayerRope& l : layers_of(half)) {  // each layer refused, naming the missing entry
    EXPECT_EQ(l.kind, LayerRopeKind::refused) << l.index;
    EXPECT_NE(l.reason.find("\"main\" and \"compress\""), std::string::npos) << l.reason;
  }

  json wider = j;  // partial_rotary_factor wins over qk_rope_head_dim
  wider["partial_rotary_factor"] = 0.25;
  EXPECT_EQ(rotary::resolve(rotary::hf_config_from_json(wider)).spec.head_dim, 128);
  json odd = j;
  odd["compress_ratios"][3] = 8;
  rotary_test::expect_error([&] { layers_of(odd); }, {"compress_ratios[3] (8)", "0, 4 and 128"});
  json none = j;
  none.erase("compress_ratios");
  rotary_test::expect_error([&] { layers_of(none); }, {"deepseek_v4", "compress_ratios", "6 layers"});
  rotary::ResolveOptions full;
  full.layer_type = "full_attention";
  rotary_test::expect_error([&] { rotary::resolve(rotary::hf_config_from_json(j), full); },
                            {"layer_type (\"full_attention\")", "deepseek_v4's layer types"});
}

// Granite 4.0-H (GraniteMoeHybridModel): a rotary embedding only for position_embedding_type "rope"
// (its published configs say "nope"); "mamba" layers have no attention at all.
TEST(HfLayers, Granite4HybridNoPE) {
  json j = json::parse(R"({"model_type": "granitemoehybrid", "hidden_size": 1536, "num_attention_heads": 12,
      "num_hidden_layers": 4, "max_position_embeddings": 131072, "position_embedding_type": "nope",
      "rope_theta": 10000, "layer_types": ["mamba", "attention", "mamba", "mamba"]})");
  for (const LayerRope& l : layers_of(j)) {
    EXPECT_EQ(l.kind, LayerRopeKind::nope) << l.index;
    EXPECT_NE(l.reason.find(l.index == 1 ? "position_embedding_type \"nope\"" : "\"mamba\" layers"),
              std::string::npos) << l.reason;
  }
  rotary_test::expect_error([&] { rotary::resolve(rotary::hf_config_from_json(j)); },
                            {"granitemoehybrid with position_embedding_type \"nope\" builds no rotary embedding"});
  j["position_embedding_type"] = "rope";
  const auto rope = layers_of(j);
  EXPECT_EQ(rope[1].kind, LayerRopeKind::rope);
  expect_same_as_resolve(j, rope[1]);
  EXPECT_EQ(rope[1].rope->spec.pairing, rotary::Pairing::half_split);
  EXPECT_EQ(rope[1].rope->spec.head_dim, 128);
  EXPECT_EQ(rope[0].kind, LayerRopeKind::nope);
}

// Kimi-Linear (model_type kimi_linear, Moonshot's remote code): mla_use_nope true, as its published
// config sets, rotates nothing on any layer; without it the family is one rotary has not checked.
TEST(HfLayers, KimiLinearNoPE) {
  json j = json::parse(R"({"model_type": "kimi_linear", "hidden_size": 2304, "num_attention_heads": 32,
      "num_hidden_layers": 8, "mla_use_nope": true, "qk_rope_head_dim": 64, "kv_lora_rank": 512,
      "linear_attn_config": {"kda_layers": [1, 2, 3, 5, 6, 7], "full_attn_layers": [4, 8]}})");
  for (const LayerRope& l : layers_of(j)) {
    EXPECT_EQ(l.layer_type, (l.index + 1) % 4 == 0 ? "full_attention" : "linear_attention") << l.index;
    EXPECT_EQ(l.kind, LayerRopeKind::nope) << l.index;
    EXPECT_NE(l.reason.find("mla_use_nope true"), std::string::npos) << l.reason;
  }
  rotary_test::expect_error([&] { rotary::resolve(rotary::hf_config_from_json(j)); }, {"kimi_linear", "NoPE"});
  j["mla_use_nope"] = false;
  for (const LayerRope& l : layers_of(j)) {
    EXPECT_EQ(l.kind, LayerRopeKind::refused) << l.index;
    if (l.layer_type == "full_attention") {  // its MLA layers: a pairing nobody checked
      EXPECT_NE(l.reason.find("not a family rotary has checked"), std::string::npos) << l.reason;
    }
  }
}

// Ministral 3 (Ministral3Attention): q *= 1 + beta * ln(1 + floor(position / L0)) after RoPE, with
// beta = rope_parameters.llama_4_scaling_beta and L0 its original_max_position_embeddings. Llama 4's
// NoPE layers: q *= 1 + attn_scale * ln(1 + floor((position + 1) / floor_scale)) (temperature tuning).
TEST(HfLayers, QueryScales) {
  const json ministral = json::parse(R"({"model_type": "mistral3", "text_config": {"model_type": "ministral3",
      "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128, "num_hidden_layers": 2,
      "max_position_embeddings": 262144, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0,
      "factor": 16.0, "original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0,
      "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1, "max_position_embeddings": 262144}}})");
  const HfConfig mc = rotary::hf_config_from_json(ministral);
  EXPECT_TRUE(mc.warnings.empty()) << ::testing::PrintToString(mc.warnings);
  const rotary::ResolvedRope r = rotary::resolve(mc);
  EXPECT_EQ(r.params.rope_type, "yarn");
  EXPECT_EQ(r.spec.pairing, rotary::Pairing::half_split);
  ASSERT_TRUE(r.query_scale.active());
  EXPECT_EQ(r.query_scale.at(0), 1.0);
  EXPECT_EQ(r.query_scale.at(16383), 1.0);
  EXPECT_DOUBLE_EQ(r.query_scale.at(16384), 1.0 + 0.1 * std::log(2.0));
  EXPECT_DOUBLE_EQ(r.query_scale.at(3 * 16384 + 5), 1.0 + 0.1 * std::log(4.0));
  EXPECT_DOUBLE_EQ(r.query_scale.at(INT64_MAX), 1.0 + 0.1 * std::log(1.0 + static_cast<double>(INT64_MAX / 16384)));
  for (const LayerRope& l : layers_of(ministral)) EXPECT_EQ(l.query_scale.at(16384), r.query_scale.at(16384));
  json defaults = json::parse(R"({"model_type": "ministral3"})");  // the class default rope_parameters
  const rotary::ResolvedRope d = rotary::resolve(rotary::hf_config_from_json(defaults));
  EXPECT_EQ(d.freqs.theta, r.freqs.theta);
  EXPECT_EQ(d.query_scale.beta, 0.1);
  EXPECT_EQ(d.query_scale.period, 16384);
  json missing = json::parse(R"({"model_type": "llama", "rope_scaling": {"rope_type": "default",
      "llama_4_scaling_beta": 0.1}})");
  rotary_test::expect_error([&] { rotary::resolve(rotary::hf_config_from_json(missing)); },
                            {"llama_4_scaling_beta (0.1", "original_max_position_embeddings"});

  json llama4 = published("llama-4-scout-17b-16e-instruct");
  const auto layers = layers_of(llama4);
  EXPECT_FALSE(layers[0].query_scale.active());  // RoPE layers: none
  ASSERT_TRUE(layers[3].query_scale.active());   // NoPE layers: the class default tuning
  EXPECT_EQ(layers[3].query_scale.at(8190), 1.0);
  EXPECT_DOUBLE_EQ(layers[3].query_scale.at(8191), 1.0 + 0.1 * std::log(2.0));
  llama4["text_config"]["attn_temperature_tuning"] = 4;  // a published form: any nonzero number is on
  llama4["text_config"]["floor_scale"] = 4096;
  EXPECT_DOUBLE_EQ(layers_of(llama4)[3].query_scale.at(4095), 1.0 + 0.1 * std::log(2.0));
  llama4["text_config"]["attn_temperature_tuning"] = false;
  EXPECT_FALSE(layers_of(llama4)[3].query_scale.active());
}

// GLM-4.1V and GLM-OCR: M-RoPE on adjacent pairs (apply_multimodal_rotary_pos_emb's repeat_interleave
// and rotate_half_llm); GLM-4.5V rotates halves. The sections are reported for the MultiAxisRope.
TEST(HfLayers, GlmVisionPairings) {
  const json glm41v = json::parse(R"({"model_type": "glm4v", "text_config": {"model_type": "glm4v_text",
      "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 40, "partial_rotary_factor": 0.5,
      "max_position_embeddings": 65536, "rope_theta": 10000,
      "rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]}}})");
  const rotary::ResolvedRope r = rotary::resolve(rotary::hf_config_from_json(glm41v));
  EXPECT_EQ(r.spec.pairing, rotary::Pairing::interleaved);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 64);
  EXPECT_EQ(r.mrope_section, (std::vector<std::int64_t>{8, 12, 12}));
  EXPECT_FALSE(r.mrope_interleaved);
  json composite_only = glm41v;  // a text_config without model_type: the composite's text model
  composite_only["text_config"].erase("model_type");
  EXPECT_EQ(rotary::resolve(rotary::hf_config_from_json(composite_only)).spec.pairing, rotary::Pairing::interleaved);
  json ocr = json::parse(R"({"model_type": "glm_ocr", "text_config": {"model_type": "glm_ocr_text",
      "hidden_size": 1536, "num_attention_heads": 16, "head_dim": 128, "num_hidden_layers": 16,
      "max_position_embeddings": 131072,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000, "mrope_section": [16, 24, 24]}}})");
  const rotary::ResolvedRope o = rotary::resolve(rotary::hf_config_from_json(ocr));
  EXPECT_EQ(o.spec.pairing, rotary::Pairing::interleaved);
  EXPECT_EQ(o.spec.effective_rotary_dim(), 128);
  EXPECT_EQ(o.mrope_section, (std::vector<std::int64_t>{16, 24, 24}));
  json moe = glm41v;
  moe["model_type"] = "glm4v_moe";
  moe["text_config"]["model_type"] = "glm4v_moe_text";
  moe["text_config"]["head_dim"] = 128;
  EXPECT_EQ(rotary::resolve(rotary::hf_config_from_json(moe)).spec.pairing, rotary::Pairing::half_split);
}

}  // namespace

namespace {

// HunYuan-A13B as released (model_type "hunyuan", its remote HunYuanConfig and hunyuan.py): rotate_half
// over attention_head_dim (128; the class: hidden_size // num_attention_heads without it, head_dim never
// read), NTK-alpha base rope_theta * alpha^(d / (d - 2)) on every one of its 32 layers.
TEST(HfLayers, HunyuanRemoteCodeReadsAttentionHeadDim) {
  json j = published("hunyuan-a13b-instruct");
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 32u);
  for (const LayerRope& l : layers) expect_same_as_resolve(j, l);
  const rotary::ResolvedRope r = rotary::resolve(rotary::hf_config_from_json(j));
  EXPECT_EQ(r.spec.head_dim, 128);
  EXPECT_EQ(r.spec.effective_rotary_dim(), 128);
  EXPECT_EQ(r.spec.pairing, rotary::Pairing::half_split);
  EXPECT_EQ(r.params.rope_type, "ntk");
  EXPECT_TRUE(r.warnings.empty());  // use_cla is its own key, not a misspelt use_mla
  // θ_j = (1e4 · 1000^(128/126))^(-2j/128), from the formula, in long double.
  const long double base = 1e4L * std::pow(1000.0L, 128.0L / 126.0L);
  EXPECT_NEAR(r.freqs.theta[10], static_cast<double>(std::pow(base, -20.0L / 128.0L)),
              1e-15);
  json head = j;  // without attention_head_dim: hidden_size // num_attention_heads, head_dim ignored
  head.erase("attention_head_dim");
  head["hidden_size"] = 3072;
  head["head_dim"] = 64;
  EXPECT_EQ(rotary::resolve(rotary::hf_config_from_json(head)).spec.head_dim, 96);
  json off = j;
  off["use_rotary_pos_emb"] = false;
  for (const LayerRope& l : layers_of(off)) EXPECT_EQ(l.kind, LayerRopeKind::nope) << l.index;
  using rotary_test::expect_error;
  json xd = j;
  xd["position_embedding_xdrope"] = true;
  expect_error([&] { rotary::resolve(rotary::hf_config_from_json(xd)); },
               {"hunyuan with position_embedding_xdrope true", "not checked"});
  json mla = j;
  mla["use_mla"] = true;
  expect_error([&] { rotary::resolve(rotary::hf_config_from_json(mla)); }, {"hunyuan with use_mla true"});
  json yarn = j;
  yarn["rope_scaling"] = json::parse(R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192})");
  expect_error([&] { rotary::resolve(rotary::hf_config_from_json(yarn)); }, {"hunyuan with rope_scaling yarn"});
}

// DeepSeek-V4 (K = V): each head's last 64 values of the attention output are a weighted sum of keys
// rotated at their own positions; DeepseekV4Attention rotates that slice back at the query's position
// (ResolvedRope::inverse_on_output). With rotary it is one in-place call on the slice alone (the 448
// other values of each head are neither read nor written): apply_strided with Direction::inverse. The
// result is relative, sum_n p_hn R(n - m) k_n, checked against the explicit rotation matrices.
TEST(HfLayers, DeepseekV4OutputInverseIsRelative) {
  const rotary::ResolvedRope r = rotary::resolve(rotary::hf_config_from_json(published("deepseek-v4-flash-nvfp4")));
  ASSERT_TRUE(r.inverse_on_output);
  constexpr std::int64_t kHead = 512, kHeads = 3, kKeys = 4, kQuery = 70000;
  const std::int64_t d = r.spec.head_dim;
  ASSERT_EQ(d, 64);
  const rotary::Rope<double> rope(r.spec, rotary::OnTheFly{});
  const std::int64_t key_pos[kKeys] = {3, 1000, 65536, 69999};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Eigen::MatrixXd k(kKeys, d);
  for (std::int64_t i = 0; i < k.size(); ++i) k.data()[i] = u(rng);
  Eigen::MatrixXd p(kHeads, kKeys);
  for (std::int64_t i = 0; i < p.size(); ++i) p.data()[i] = u(rng);
  std::vector<double> o(static_cast<std::size_t>(kHeads * kHead));
  for (double& v : o) v = u(rng);
  Eigen::MatrixXd want(kHeads, d);
  for (std::int64_t h = 0; h < kHeads; ++h) {
    Eigen::VectorXd slice = Eigen::VectorXd::Zero(d);
    Eigen::VectorXd rel = Eigen::VectorXd::Zero(d);
    for (std::int64_t n = 0; n < kKeys; ++n) {
      const Eigen::VectorXd kn = k.row(n).transpose();
      slice += p(h, n) * rotary::reference::rotation_matrix(r.freqs.theta, d, r.spec.pairing, key_pos[n]) * kn;
      rel += p(h, n) * rotary::reference::rotation_matrix(r.freqs.theta, d, r.spec.pairing, key_pos[n] - kQuery) * kn;
    }
    for (std::int64_t i = 0; i < d; ++i) o[static_cast<std::size_t>(h * kHead + kHead - d + i)] = slice(i);
    want.row(h) = rel.transpose();
  }
  const std::vector<double> before = o;
  const std::int64_t query[1] = {kQuery};
  rotary::apply_strided(rope, o.data() + (kHead - d), rotary::StridedLayout{1, kHeads, kHeads * kHead, kHead},
                        rotary::Positions(query, 1), rotary::Direction::inverse);
  for (std::int64_t h = 0; h < kHeads; ++h) {
    for (std::int64_t i = 0; i < kHead - d; ++i)  // the rest of the head: untouched, bit for bit
      EXPECT_EQ(o[static_cast<std::size_t>(h * kHead + i)], before[static_cast<std::size_t>(h * kHead + i)]);
    for (std::int64_t i = 0; i < d; ++i)  // |values| < 4: 1e-12 is a few thousand ulps of headroom
      EXPECT_NEAR(o[static_cast<std::size_t>(h * kHead + kHead - d + i)], want(h, i), 1e-12) << h << " " << i;
  }
}

// DeepSeek-V4-Flash as published (NVIDIA's NVFP4 upload): compress_ratios lists 44 entries for 43
// layers (the last is the MTP block's); 0 is a sliding_attention layer (default RoPE at rope_theta),
// 4 and 128 the compressed ones (YaRN at compress_rope_theta).
TEST(HfLayers, DeepseekV4PublishedCompressRatios) {
  const json j = published("deepseek-v4-flash-nvfp4");
  const auto layers = layers_of(j);
  ASSERT_EQ(layers.size(), 43u);
  const std::vector<std::int64_t> ratios = j["compress_ratios"].get<std::vector<std::int64_t>>();
  for (const LayerRope& l : layers) {
    const std::int64_t r = ratios[static_cast<std::size_t>(l.index)];
    EXPECT_EQ(l.layer_type, r == 0 ? "sliding_attention" : r == 4 ? "compressed_sparse_attention"
                                                                  : "heavily_compressed_attention") << l.index;
    expect_same_as_resolve(j, l);
    EXPECT_EQ(l.rope->params.rope_theta, r == 0 ? 1e4 : 160000.0) << l.index;
    EXPECT_EQ(l.rope->params.rope_type, r == 0 ? "default" : "yarn") << l.index;
  }
}

}  // namespace
