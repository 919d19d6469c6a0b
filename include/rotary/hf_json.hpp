// rotary — Hugging Face config.json -> rotary::HfConfig with nlohmann-json. Optional: the only rotary
// header that needs nlohmann-json (Debian nlohmann-json3-dev); rotary.hpp does not include it.
//
//   rotary::HfConfig c = rotary::load_hf_config("config.json");      // or parse_hf_config(text),
//   rotary::ResolvedRope r = rotary::resolve(c);                      //    hf_config_from_json(json)
//   for (const auto& w : r.warnings) std::cerr << "warning: " << w << "\n";
//
// Errors are rotary::error naming the key with its path: not JSON, a key of the wrong type, a head or
// hidden size no model has. Values are checked by resolve(). What the reader does, as transformers:
//   * text_config (Gemma-3, Llama 4, Qwen3-VL, LLaVA, ...): the language model is built from
//     text_config alone plus its class defaults; top-level rope keys are not read (a warning names
//     any that text_config lacks or contradicts). A text_config without model_type takes the text
//     model type of the composite (gemma3 -> gemma3_text, llama4 -> llama4_text, ...).
//   * rope_scaling, else rope_parameters (flat, or keyed by layer type); the legacy `type` key is
//     rope_type. A dict's rope_theta wins over the top-level one (transformers 5 keeps it there).
//     A dict with neither rope_type nor type is default RoPE only when that drops nothing (it is empty
//     or holds only rope_theta, partial_rotary_factor, mrope_section, mrope_interleaved); one that
//     sets anything else ({"factor": 4.0}) is an error. transformers 4 raises KeyError on it;
//     transformers 5 reads it as default RoPE and only warns of the unrecognized keys. rotary does not
//     guess which scaling was meant.
//     "rope_scaling": null is default RoPE (it overrides a class default such as gpt-oss's yarn).
//   * n_embed (Falcon) is read as n_embd.
//   * Warnings (HfConfig::warnings): keys inside a rope dict that are no rope parameter, and keys
//     within a small edit distance of a rope-relevant key ("rope_thetaa", "rope_scalling",
//     "partial_rotary_facor"): transformers would ignore them silently and use a default.
#ifndef ROTARY_HF_JSON_HPP
#define ROTARY_HF_JSON_HPP

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf_config.hpp"
#include "types.hpp"

namespace rotary {

namespace detail {

using hf_json = nlohmann::json;

inline std::string hf_show(const hf_json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

[[noreturn]] inline void hf_bad_type(const std::string& key, const hf_json& v, const char* expected) {
  throw error("\"" + key + "\" must be " + expected + ", got " + std::string(v.type_name()) + " " + hf_show(v));
}

// Readers: absent or null -> nullopt; a value of the wrong type -> rotary::error naming the key.
inline std::optional<double> hf_get_double(const hf_json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) hf_bad_type(where + name, *it, "a number");
  return it->get<double>();
}

// An integer, also written as a float with an integral value (4096.0), as Python's json reads it.
inline std::int64_t hf_as_int(const hf_json& v, const std::string& key) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    hf_bad_type(key, v, "an integer below 2^63");
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (finite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<std::int64_t>(d);
  }
  hf_bad_type(key, v, "an integer");
}

inline std::optional<std::int64_t> hf_get_int(const hf_json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  return hf_as_int(*it, where + name);
}

inline std::optional<bool> hf_get_bool(const hf_json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) hf_bad_type(where + name, *it, "true or false");
  return it->get<bool>();
}

inline std::optional<std::string> hf_get_string(const hf_json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) hf_bad_type(where + name, *it, "a string");
  return it->get<std::string>();
}

inline std::vector<double> hf_get_doubles(const hf_json& obj, const char* name, const std::string& where) {
  std::vector<double> out;
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) hf_bad_type(where + name, *it, "an array of numbers");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const hf_json& v = (*it)[i];
    if (!v.is_number()) hf_bad_type(where + name + "[" + std::to_string(i) + "]", v, "a number");
    out.push_back(v.get<double>());
  }
  return out;
}

inline std::vector<std::int64_t> hf_get_ints(const hf_json& obj, const char* name, const std::string& where) {
  std::vector<std::int64_t> out;
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) hf_bad_type(where + name, *it, "an array of integers");
  for (std::size_t i = 0; i < it->size(); ++i)
    out.push_back(hf_as_int((*it)[i], where + name + "[" + std::to_string(i) + "]"));
  return out;
}

// Optimal string alignment distance (an adjacent transposition counts 1), ASCII case folded.
inline std::size_t hf_edit_distance(std::string_view a, std::string_view b) {
  const auto low = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = low(a[i - 1]) == low(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && low(a[i - 1]) == low(b[j - 2]) && low(a[i - 2]) == low(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The known key `key` is probably a misspelling of (within 1 edit for names under 8 characters, 2
// otherwise; case differences count), or nullptr.
template <std::size_t N>
const char* hf_near_key(std::string_view key, const char* const (&known)[N]) {
  for (const char* k : known) {
    const std::string_view kv(k);
    if (kv == key) return nullptr;
  }
  for (const char* k : known) {
    const std::string_view kv(k);
    if (hf_edit_distance(key, kv) <= (kv.size() >= 8 ? 2u : 1u)) return k;
  }
  return nullptr;
}

// Top-level keys the reader takes (or that matter for RoPE).
inline constexpr const char* kHfTopKeys[] = {
    "model_type", "text_config", "head_dim", "qk_rope_head_dim", "hidden_size", "num_attention_heads", "n_embd",
    "n_embed", "n_head", "rotary_dim", "partial_rotary_factor", "rotary_pct", "rope_theta", "rotary_emb_base",
    "rope_local_base_freq", "max_position_embeddings", "n_positions", "original_max_position_embeddings",
    "rope_interleave", "layer_types", "rope_scaling", "rope_parameters", "alibi", "global_head_dim",
    "num_hidden_layers", "no_rope_layers", "no_rope_layer_interval", "sliding_window_pattern",
    "full_attention_interval", "use_sliding_window", "sliding_window", "full_attn_idxs", "theta",
    "position_embedding_type", "mla_use_nope", "linear_attn_config", "attn_temperature_tuning", "attn_scale",
    "floor_scale", "num_layers", "compress_rope_theta", "compress_ratios", "attention_head_dim",
    "use_rotary_pos_emb", "position_embedding_xdrope", "use_mla"};
// Real config keys within edit distance of those (DeepSeek's MLA dims, vision hidden_sizes,
// MPT/OLMo-1's n_heads): not misspellings.
inline constexpr const char* kHfTopNearMisses[] = {"qk_nope_head_dim", "v_head_dim",  "qk_head_dim",
                                                   "hidden_sizes",     "n_heads",     "mrope_interleaved",
                                                   "rope_type",        "n_layer",     "n_inner",
                                                   "use_cla"};
// Rope-relevant top-level keys a text_config hides (a warning names them when they would matter).
inline constexpr const char* kHfTextKeys[] = {
    "head_dim", "qk_rope_head_dim", "hidden_size", "num_attention_heads", "rotary_dim", "partial_rotary_factor",
    "rope_theta", "rope_local_base_freq", "max_position_embeddings", "original_max_position_embeddings",
    "rope_scaling", "rope_parameters"};
inline constexpr const char* kHfRopeKeys[] = {
    "rope_type",  "type",           "rope_theta",      "factor",          "original_max_position_embeddings",
    "attention_factor", "beta_fast", "beta_slow",     "mscale",          "mscale_all_dim",
    "truncate",   "short_factor",   "long_factor",     "low_freq_factor", "high_freq_factor",
    "partial_rotary_factor", "mrope_section", "mrope_interleaved", "alpha", "llama_4_scaling_beta",
    "max_position_embeddings"};

// The text model type of a composite config whose text_config names none.
inline std::string hf_text_model_type(const std::string& composite) {
  static const std::pair<const char*, const char*> map[] = {
      {"gemma3", "gemma3_text"}, {"gemma3n", "gemma3n_text"}, {"gemma4", "gemma4_text"}, {"llama4", "llama4_text"},
      {"qwen2_vl", "qwen2_vl_text"}, {"qwen2_5_vl", "qwen2_5_vl_text"}, {"qwen3_vl", "qwen3_vl_text"},
      {"qwen3_5", "qwen3_5_text"}, {"qwen3_5_moe", "qwen3_5_moe_text"},
      {"glm4v", "glm4v_text"}, {"glm4v_moe", "glm4v_moe_text"}, {"glm_ocr", "glm_ocr_text"},
      {"llava", "llama"}, {"mistral3", "mistral"}};
  for (const auto& [c, t] : map)
    if (composite == c) return t;
  return composite;
}

inline void hf_check_spelling(const hf_json& obj, const std::string& where, std::vector<std::string>& warnings) {
  for (const auto& kv : obj.items()) {
    bool near_miss = false;
    for (const char* k : kHfTopNearMisses) near_miss = near_miss || kv.key() == k;
    if (near_miss) continue;
    if (const char* k = hf_near_key(kv.key(), kHfTopKeys))
      warnings.push_back(where + kv.key() + " is not a key transformers reads (did you mean " + k +
                         "?); ignored, so " + k + " takes its default");
  }
}

// One rope_scaling / rope_parameters dict. `where` prefixes key names in messages.
inline RopeParameters hf_rope_parameters(const hf_json& obj, const std::string& where,
                                         std::optional<double>* theta_in_dict, std::vector<std::string>& warnings) {
  // The dict's name: "rope_scaling", "rope_parameters.full_attention", ...
  const std::string name = where.substr(0, where.size() - 1);
  if (!obj.is_object()) hf_bad_type(name, obj, "an object");
  RopeParameters p;
  // transformers: rope_type, else the legacy `type`.
  if (auto t = hf_get_string(obj, "rope_type", where)) {
    if (t->empty()) throw error("\"" + where + "rope_type\" is an empty string: name the rope_type");
    p.rope_type = *t;
  } else if (auto legacy = hf_get_string(obj, "type", where)) {
    if (legacy->empty()) throw error("\"" + where + "type\" is an empty string: name the rope_type");
    p.rope_type = *legacy;
  } else {
    // Neither. transformers 4 raises KeyError (its rope init functions have no entry for None);
    // transformers 5 defaults rope_type to "default" and logs the keys default RoPE does not read as
    // unrecognized. Either way the scaling the file asks for is not applied, and which rule was meant
    // is a guess, so default RoPE is read only when nothing is dropped: the dict is empty or holds only
    // keys default RoPE reads as well (rope_theta, partial_rotary_factor, the M-RoPE sections); a
    // factor, or any other key (a misspelt "type" included), is refused.
    for (const auto& kv : obj.items()) {
      const std::string& k = kv.key();
      if (kv.value().is_null() || k == "rope_theta" || k == "partial_rotary_factor" || k == "mrope_section" ||
          k == "mrope_interleaved")
        continue;
      throw error(concat(name, " names neither \"rope_type\" nor \"type\" but sets \"", k, "\" (",
                         hf_show(kv.value()),
                         "), which default RoPE would ignore (transformers 4 raises KeyError, transformers 5 "
                         "drops it with a warning); add the rope_type it is meant for"));
    }
  }
  const auto theta = hf_get_double(obj, "rope_theta", where);
  if (theta) p.rope_theta = *theta;
  if (theta_in_dict) *theta_in_dict = theta;
  p.factor = hf_get_double(obj, "factor", where);
  p.original_max_position_embeddings = hf_get_int(obj, "original_max_position_embeddings", where);
  p.attention_factor = hf_get_double(obj, "attention_factor", where);
  p.beta_fast = hf_get_double(obj, "beta_fast", where);
  p.beta_slow = hf_get_double(obj, "beta_slow", where);
  p.mscale = hf_get_double(obj, "mscale", where);
  p.mscale_all_dim = hf_get_double(obj, "mscale_all_dim", where);
  p.truncate = hf_get_bool(obj, "truncate", where);
  p.short_factor = hf_get_doubles(obj, "short_factor", where);
  p.long_factor = hf_get_doubles(obj, "long_factor", where);
  p.low_freq_factor = hf_get_double(obj, "low_freq_factor", where);
  p.high_freq_factor = hf_get_double(obj, "high_freq_factor", where);
  p.partial_rotary_factor = hf_get_double(obj, "partial_rotary_factor", where);
  p.mrope_section = hf_get_ints(obj, "mrope_section", where);
  p.mrope_interleaved = hf_get_bool(obj, "mrope_interleaved", where);
  p.llama_4_scaling_beta = hf_get_double(obj, "llama_4_scaling_beta", where);
  // HunYuan's NTK-alpha (hunyuan_v1_dense / hunyuan_v1_moe: {"type": "dynamic", "alpha": 1000, "factor": 1}):
  // its rotary embedding, like vLLM's get_rope, takes a dynamic dict with a nonzero alpha as the fixed
  // base rope_theta * alpha^(d / (d - 2)), whatever the factor: rotary's "ntk" rule with factor alpha.
  // Read as plain dynamic NTK it would leave every frequency unscaled up to max_position_embeddings.
  if (const auto alpha = hf_get_double(obj, "alpha", where); alpha && *alpha != 0.0) {
    if (p.rope_type != "dynamic")
      throw error(concat(where, "alpha (", *alpha, ") is HunYuan's NTK-alpha, which its code reads with rope_type "
                         "\"dynamic\" only; here rope_type is \"", p.rope_type, "\""));
    p.rope_type = "ntk";
    p.factor = *alpha;
  }
  for (const auto& kv : obj.items()) {
    bool known = false;
    for (const char* k : kHfRopeKeys) known = known || kv.key() == k;
    if (known) continue;
    const char* near = hf_near_key(kv.key(), kHfRopeKeys);
    warnings.push_back(where + kv.key() + " is not a rope parameter" +
                       (near ? std::string(" (did you mean ") + near + "?)" : std::string()) + "; ignored");
  }
  return p;
}

// Nested rope_parameters: a non-empty object whose every value is an object (or null).
inline bool hf_is_per_layer(const hf_json& rp) {
  if (!rp.is_object() || rp.empty()) return false;
  for (const auto& kv : rp.items())
    if (!kv.value().is_object() && !kv.value().is_null()) return false;
  return true;
}

// hf_config_from_json, step 1: the object transformers builds the language model from (text_config
// when there is one, `top` its key prefix), with the composite's model_type and warnings for the keys
// its top level sets in vain.
inline const hf_json& hf_text_scope(const hf_json& root, std::string& top, HfConfig& h) {
  const auto tc = root.find("text_config");
  if (tc == root.end() || tc->is_null()) {
    h.model_type = hf_get_string(root, "model_type", top);
    return root;
  }
  if (!tc->is_object()) hf_bad_type("text_config", *tc, "an object");
  const hf_json& c = *tc;
  top = "text_config.";
  h.model_type = hf_get_string(c, "model_type", top);
  const auto composite = hf_get_string(root, "model_type", "");
  if (!h.model_type && composite) h.model_type = hf_text_model_type(*composite);
  for (const char* k : kHfTextKeys) {
    const auto it = root.find(k);
    if (it == root.end() || it->is_null()) continue;
    const auto in = c.find(k);
    if (in != c.end() && *in == *it) continue;
    h.warnings.push_back(std::string(k) + " at the top level is not read: transformers builds the language " +
                         "model from text_config" +
                         (in == c.end() ? std::string(" (which lacks it: the class default applies)")
                                        : " (which says " + hf_show(*in) + ")"));
  }
  hf_check_spelling(root, "", h.warnings);
  return c;
}

// hf_config_from_json, step 2: head geometry, rotated part, frequencies and context keys, each
// capped where a larger value is no model's.
inline void hf_read_scalars(const hf_json& c, const std::string& top, HfConfig& h) {
  h.head_dim = hf_get_int(c, "head_dim", top);
  if (const auto hd = c.find("head_dim"); hd != c.end() && hd->is_null()) h.head_dim_null = true;
  for (const char* k : {"rope_theta", "rope_local_base_freq", "partial_rotary_factor", "rotary_dim",
                        "qk_rope_head_dim", "hidden_size", "num_attention_heads", "max_position_embeddings",
                        "original_max_position_embeddings"})
    if (const auto it = c.find(k); it != c.end() && it->is_null()) h.null_keys.emplace_back(k);
  h.global_head_dim = hf_get_int(c, "global_head_dim", top);
  h.qk_rope_head_dim = hf_get_int(c, "qk_rope_head_dim", top);
  h.hidden_size = hf_get_int(c, "hidden_size", top);
  h.num_attention_heads = hf_get_int(c, "num_attention_heads", top);
  h.n_embd = hf_get_int(c, "n_embd", top);
  if (!h.n_embd) h.n_embd = hf_get_int(c, "n_embed", top);  // Falcon's legacy name
  h.n_head = hf_get_int(c, "n_head", top);
  h.rotary_dim = hf_get_int(c, "rotary_dim", top);
  h.partial_rotary_factor = hf_get_double(c, "partial_rotary_factor", top);
  h.rotary_pct = hf_get_double(c, "rotary_pct", top);
  h.rope_theta = hf_get_double(c, "rope_theta", top);
  // LFM2's original key: Lfm2Config reads kwargs.get("theta", rope_theta), so it wins.
  if (const auto theta = hf_get_double(c, "theta", top); theta && h.model_type.value_or("") == "lfm2")
    h.rope_theta = theta;
  h.rotary_emb_base = hf_get_double(c, "rotary_emb_base", top);
  h.rope_local_base_freq = hf_get_double(c, "rope_local_base_freq", top);
  h.max_position_embeddings = hf_get_int(c, "max_position_embeddings", top);
  h.n_positions = hf_get_int(c, "n_positions", top);
  h.original_max_position_embeddings = hf_get_int(c, "original_max_position_embeddings", top);
  h.rope_interleave = hf_get_bool(c, "rope_interleave", top);
  h.alibi = hf_get_bool(c, "alibi", top);
  h.position_embedding_type = hf_get_string(c, "position_embedding_type", top);
  h.mla_use_nope = hf_get_bool(c, "mla_use_nope", top);
  h.attention_head_dim = hf_get_int(c, "attention_head_dim", top);
  h.use_rotary_pos_emb = hf_get_bool(c, "use_rotary_pos_emb", top);
  h.position_embedding_xdrope = hf_get_bool(c, "position_embedding_xdrope", top);
  h.use_mla = hf_get_bool(c, "use_mla", top);
  if (const auto t = c.find("attn_temperature_tuning"); t != c.end() && !t->is_null())  // true, or 4 (on)
    h.attn_temperature_tuning = t->is_number() ? hf_as_int(*t, top + "attn_temperature_tuning") != 0
                                               : *hf_get_bool(c, "attn_temperature_tuning", top);
  h.attn_scale = hf_get_double(c, "attn_scale", top);
  h.floor_scale = hf_get_int(c, "floor_scale", top);
  if (const auto la = c.find("linear_attn_config"); la != c.end() && !la->is_null()) {
    if (!la->is_object()) hf_bad_type(top + "linear_attn_config", *la, "an object");
    h.kda_layers = hf_get_ints(*la, "kda_layers", top + "linear_attn_config.");
  }
  const auto cap = [&top](const char* key, const std::optional<std::int64_t>& v, std::int64_t max) {
    if (v && *v > max)
      throw error("\"" + top + key + "\" (" + std::to_string(*v) + ") is larger than any model's (at most " +
                  std::to_string(max) + " accepted)");
  };
  cap("head_dim", h.head_dim, kHfMaxHeadDim);
  cap("global_head_dim", h.global_head_dim, kHfMaxHeadDim);
  cap("attention_head_dim", h.attention_head_dim, kHfMaxHeadDim);
  cap("qk_rope_head_dim", h.qk_rope_head_dim, kHfMaxHeadDim);
  cap("rotary_dim", h.rotary_dim, kHfMaxHeadDim);
  cap("hidden_size", h.hidden_size, kHfMaxHiddenSize);
  cap("n_embd", h.n_embd, kHfMaxHiddenSize);
}

// hf_config_from_json, step 3: the layer stack: layer_types (an array of strings), the layer count and
// the keys the classes derive per-layer lists from (resolve_layers, hf_layers.hpp).
inline void hf_read_layer_types(const hf_json& c, const std::string& top, HfConfig& h) {
  if (const auto lt = c.find("layer_types"); lt != c.end() && !lt->is_null()) {
    if (!lt->is_array()) hf_bad_type(top + "layer_types", *lt, "an array of strings");
    for (std::size_t i = 0; i < lt->size(); ++i) {
      if (!(*lt)[i].is_string()) hf_bad_type(top + "layer_types[" + std::to_string(i) + "]", (*lt)[i], "a string");
      h.layer_types.push_back((*lt)[i].get<std::string>());
    }
  }
  h.num_hidden_layers = hf_get_int(c, "num_hidden_layers", top);
  if (!h.num_hidden_layers) h.num_hidden_layers = hf_get_int(c, "n_layer", top);
  h.num_layers = hf_get_int(c, "num_layers", top);
  h.compress_rope_theta = hf_get_double(c, "compress_rope_theta", top);
  h.compress_ratios = hf_get_ints(c, "compress_ratios", top);
  h.no_rope_layers = hf_get_ints(c, "no_rope_layers", top);
  h.no_rope_layer_interval = hf_get_int(c, "no_rope_layer_interval", top);
  if (const auto swp = c.find("sliding_window_pattern"); swp != c.end() && swp->is_string()) {
    h.sliding_window_pattern_text = swp->get<std::string>();  // EXAONE 4: "LLLG"
    if (h.sliding_window_pattern_text.empty() ||
        h.sliding_window_pattern_text.find_first_not_of("LG") != std::string::npos)
      hf_bad_type(top + "sliding_window_pattern", *swp, "an integer or a string of L and G");
  } else {
    h.sliding_window_pattern = hf_get_int(c, "sliding_window_pattern", top);
  }
  h.full_attention_interval = hf_get_int(c, "full_attention_interval", top);
  h.use_sliding_window = hf_get_bool(c, "use_sliding_window", top);
  const auto sw = c.find("sliding_window");
  h.has_sliding_window = sw != c.end() && !sw->is_null();
  h.sliding_window_null = sw != c.end() && sw->is_null();
  h.full_attn_idxs = hf_get_ints(c, "full_attn_idxs", top);
}

// hf_config_from_json, step 4 for rope_parameters keyed by layer type: each entry, its rope_theta
// (the dict's, else the top-level one, else the class default of that layer type).
inline void hf_read_per_layer(const hf_json& rp, const std::string& top, HfConfig& h) {
  const HfFamily* family = find_hf_family(h.model_type.value_or(""));
  for (const auto& kv : rp.items()) {
    if (kv.value().is_null()) continue;
    std::optional<double> theta;
    auto p = hf_rope_parameters(kv.value(), top + "rope_parameters." + kv.key() + ".", &theta, h.warnings);
    if (!theta) {
      if (h.rope_theta)
        p.rope_theta = *h.rope_theta;
      else if (h.rotary_emb_base)
        p.rope_theta = *h.rotary_emb_base;
      else if (family && kv.key() == "sliding_attention" && family->rope_local_base_freq > 0.0)
        p.rope_theta = family->rope_local_base_freq;
      else if (family && family->rope_theta > 0.0)
        p.rope_theta = family->rope_theta;
    }
    h.per_layer_type.emplace(kv.key(), std::move(p));
  }
}

// hf_config_from_json, step 4: rope_scaling or rope_parameters (transformers 5 reads rope_scaling
// first), flat or keyed by layer type; an explicit null rope_scaling is default RoPE.
inline void hf_read_rope_dicts(const hf_json& c, const std::string& top, HfConfig& h) {
  const auto rs = c.find("rope_scaling");
  const auto rp = c.find("rope_parameters");
  const bool has_rs = rs != c.end() && !rs->is_null();
  const bool has_rp = rp != c.end() && !rp->is_null();
  if (has_rs || (has_rp && !hf_is_per_layer(*rp))) {
    const hf_json& flat = has_rs ? *rs : *rp;
    const std::string where = top + (has_rs ? "rope_scaling." : "rope_parameters.");
    std::optional<double> theta;
    h.rope_scaling = hf_rope_parameters(flat, where, &theta, h.warnings);
    if (theta) h.rope_theta = theta;  // HF: the dict's rope_theta wins over the top-level one
  } else if (has_rp) {
    hf_read_per_layer(*rp, top, h);
  } else if (rs != c.end() && rs->is_null()) {
    h.rope_scaling = RopeParameters{};  // an explicit null: default RoPE, whatever the class default
  }
}

}  // namespace detail

// The rope-relevant keys of a parsed config.json (see the top of this header).
inline HfConfig hf_config_from_json(const nlohmann::json& root) {
  if (!root.is_object()) detail::hf_bad_type("(top level)", root, "an object");
  HfConfig h;
  std::string top;
  const detail::hf_json& c = detail::hf_text_scope(root, top, h);
  detail::hf_check_spelling(c, top, h.warnings);
  detail::hf_read_scalars(c, top, h);
  detail::hf_read_layer_types(c, top, h);
  detail::hf_read_rope_dicts(c, top, h);
  return h;
}

// config.json text -> HfConfig. A syntax error, and a number JSON allows but a double cannot hold
// (1e400: nlohmann's out_of_range 406, not a parse_error), become a rotary::error.
inline HfConfig parse_hf_config(std::string_view text) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw error(std::string("not valid JSON: ") + e.what());
  }
  return hf_config_from_json(root);
}

// Reads and parses the file at `path`.
inline HfConfig load_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("cannot open the file " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw error("cannot read the file " + path);
  return parse_hf_config(text);
}

}  // namespace rotary

#endif  // ROTARY_HF_JSON_HPP
