// rotary-inspect's config reader: Hugging Face config.json text -> rotary::HfConfig, shared by the
// tool (rotary_inspect.cpp) and its fuzzer (tests/fuzz/fuzz_config.cpp). Needs nlohmann-json;
// rotary's own headers never do.
//
//   json root = rotary_inspect::parse_json(text_or_stream);   // ConfigError if it is not JSON
//   rotary::HfConfig c = rotary_inspect::parse_config(root);   // ConfigError naming a mistyped key
//   rotary::resolve(c, options);                               // rotary::error naming a bad value
#ifndef ROTARY_EXAMPLES_INSPECT_CONFIG_HPP
#define ROTARY_EXAMPLES_INSPECT_CONFIG_HPP

#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rotary/hf_config.hpp"

namespace rotary_inspect {

using nlohmann::json;

// The largest head and hidden sizes parse_config accepts (see there).
inline constexpr std::int64_t kMaxHeadDim = 1 << 16;
inline constexpr std::int64_t kMaxHiddenSize = 1 << 20;

// A config error: the message names the key.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

[[noreturn]] inline void bad_type(const std::string& key, const json& v, const char* expected) {
  throw ConfigError("\"" + key + "\" must be " + expected + ", got " + std::string(v.type_name()) + " " +
                    show(v));
}

// Readers: absent or null -> nullopt; a value of the wrong type -> ConfigError naming the key.
inline std::optional<double> get_double(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad_type(where + name, *it, "a number");
  return it->get<double>();
}

inline std::optional<std::int64_t> get_int(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    bad_type(where + name, *it, "an integer below 2^63");
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_number_float()) {  // e.g. 4096.0
    const double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<std::int64_t>(d);
  }
  bad_type(where + name, *it, "an integer");
}

inline std::optional<bool> get_bool(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) bad_type(where + name, *it, "true or false");
  return it->get<bool>();
}

inline std::optional<std::string> get_string(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) bad_type(where + name, *it, "a string");
  return it->get<std::string>();
}

inline std::vector<double> get_doubles(const json& obj, const char* name, const std::string& where) {
  std::vector<double> out;
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) bad_type(where + name, *it, "an array of numbers");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number()) bad_type(where + name + "[" + std::to_string(i) + "]", v, "a number");
    out.push_back(v.get<double>());
  }
  return out;
}

// One rope_scaling / rope_parameters dict. `where` prefixes key names in messages.
inline rotary::RopeParameters parse_rope_parameters(const json& obj, const std::string& where,
                                                    std::optional<double>* theta_in_dict,
                                                    std::ostream& warnings) {
  if (!obj.is_object()) bad_type(where.substr(0, where.size() - 1), obj, "an object");
  rotary::RopeParameters p;
  // transformers: rope_type, else the legacy `type`, else "default".
  if (auto t = get_string(obj, "rope_type", where))
    p.rope_type = *t;
  else if (auto legacy = get_string(obj, "type", where))
    p.rope_type = *legacy;
  const auto theta = get_double(obj, "rope_theta", where);
  if (theta) p.rope_theta = *theta;
  if (theta_in_dict) *theta_in_dict = theta;
  p.factor = get_double(obj, "factor", where);
  p.original_max_position_embeddings = get_int(obj, "original_max_position_embeddings", where);
  p.attention_factor = get_double(obj, "attention_factor", where);
  p.beta_fast = get_double(obj, "beta_fast", where);
  p.beta_slow = get_double(obj, "beta_slow", where);
  p.mscale = get_double(obj, "mscale", where);
  p.mscale_all_dim = get_double(obj, "mscale_all_dim", where);
  p.truncate = get_bool(obj, "truncate", where);
  p.short_factor = get_doubles(obj, "short_factor", where);
  p.long_factor = get_doubles(obj, "long_factor", where);
  p.low_freq_factor = get_double(obj, "low_freq_factor", where);
  p.high_freq_factor = get_double(obj, "high_freq_factor", where);
  p.partial_rotary_factor = get_double(obj, "partial_rotary_factor", where);
  // HF warns about keys a rule does not know (e.g. Qwen2-VL's mrope_section); so do we.
  static const char* const known[] = {"rope_type",
                                      "type",
                                      "rope_theta",
                                      "factor",
                                      "original_max_position_embeddings",
                                      "attention_factor",
                                      "beta_fast",
                                      "beta_slow",
                                      "mscale",
                                      "mscale_all_dim",
                                      "truncate",
                                      "short_factor",
                                      "long_factor",
                                      "low_freq_factor",
                                      "high_freq_factor",
                                      "partial_rotary_factor"};
  for (const auto& kv : obj.items()) {
    bool is_known = false;
    for (const char* k : known) is_known = is_known || kv.key() == k;
    if (!is_known)
      warnings << "rotary-inspect: warning: " << where << kv.key() << " is not a rope parameter; ignored\n";
  }
  return p;
}

// Nested rope_parameters: a non-empty object whose every value is an object (or null).
inline bool is_per_layer(const json& rp) {
  if (!rp.is_object() || rp.empty()) return false;
  for (const auto& kv : rp.items())
    if (!kv.value().is_object() && !kv.value().is_null()) return false;
  return true;
}

// The rope-relevant keys of a parsed config.json. Throws ConfigError (a key of the wrong type, named
// with its path, or a head/hidden size beyond kMaxHeadDim/kMaxHiddenSize) and nothing else from the
// JSON side; warnings (unknown rope parameters) go to `warnings`.
inline rotary::HfConfig parse_config(const json& root, std::ostream& warnings = std::cerr) {
  if (!root.is_object()) bad_type("(top level)", root, "an object");
  // Multimodal configs (Gemma-3, Llava, ...) keep the language model's keys in text_config; keys
  // missing there fall back to the top level.
  json c = root;
  if (const auto tc = root.find("text_config"); tc != root.end() && !tc->is_null()) {
    if (!tc->is_object()) bad_type("text_config", *tc, "an object");
    for (const auto& kv : tc->items()) c[kv.key()] = kv.value();
  }
  const std::string top;
  rotary::HfConfig h;
  h.model_type = get_string(c, "model_type", top);
  h.head_dim = get_int(c, "head_dim", top);
  h.qk_rope_head_dim = get_int(c, "qk_rope_head_dim", top);
  h.hidden_size = get_int(c, "hidden_size", top);
  h.num_attention_heads = get_int(c, "num_attention_heads", top);
  h.n_embd = get_int(c, "n_embd", top);
  h.n_head = get_int(c, "n_head", top);
  h.rotary_dim = get_int(c, "rotary_dim", top);
  h.partial_rotary_factor = get_double(c, "partial_rotary_factor", top);
  h.rotary_pct = get_double(c, "rotary_pct", top);
  h.rope_theta = get_double(c, "rope_theta", top);
  h.rotary_emb_base = get_double(c, "rotary_emb_base", top);
  h.rope_local_base_freq = get_double(c, "rope_local_base_freq", top);
  h.max_position_embeddings = get_int(c, "max_position_embeddings", top);
  h.n_positions = get_int(c, "n_positions", top);
  h.original_max_position_embeddings = get_int(c, "original_max_position_embeddings", top);
  h.rope_interleave = get_bool(c, "rope_interleave", top);
  // Sizes no model has (the largest heads are 256 wide, hidden sizes ~2^15): refuse them here, where
  // the key is known, instead of letting resolve() allocate and fill tables of that size.
  const auto cap = [](const char* key, const std::optional<std::int64_t>& v, std::int64_t max) {
    if (v && *v > max)
      throw ConfigError("\"" + std::string(key) + "\" (" + std::to_string(*v) +
                        ") is larger than any model's (at most " + std::to_string(max) + " accepted)");
  };
  cap("head_dim", h.head_dim, kMaxHeadDim);
  cap("qk_rope_head_dim", h.qk_rope_head_dim, kMaxHeadDim);
  cap("rotary_dim", h.rotary_dim, kMaxHeadDim);
  cap("hidden_size", h.hidden_size, kMaxHiddenSize);
  cap("n_embd", h.n_embd, kMaxHiddenSize);
  if (const auto lt = c.find("layer_types"); lt != c.end() && !lt->is_null()) {
    if (!lt->is_array()) bad_type("layer_types", *lt, "an array of strings");
    for (std::size_t i = 0; i < lt->size(); ++i) {
      if (!(*lt)[i].is_string()) bad_type("layer_types[" + std::to_string(i) + "]", (*lt)[i], "a string");
      h.layer_types.push_back((*lt)[i].get<std::string>());
    }
  }

  // transformers 5 reads rope_scaling first, then rope_parameters.
  const auto rs = c.find("rope_scaling");
  const auto rp = c.find("rope_parameters");
  const bool has_rs = rs != c.end() && !rs->is_null();
  const bool has_rp = rp != c.end() && !rp->is_null();
  if (has_rs || (has_rp && !is_per_layer(*rp))) {
    const json& flat = has_rs ? *rs : *rp;
    const std::string where = has_rs ? "rope_scaling." : "rope_parameters.";
    std::optional<double> theta;
    h.rope_scaling = parse_rope_parameters(flat, where, &theta, warnings);
    if (theta) h.rope_theta = theta;  // HF: the dict's rope_theta wins over the top-level one
  } else if (has_rp) {
    for (const auto& kv : rp->items()) {
      if (kv.value().is_null()) continue;
      std::optional<double> theta;
      auto p = parse_rope_parameters(kv.value(), "rope_parameters." + kv.key() + ".", &theta, warnings);
      if (!theta) p.rope_theta = h.rope_theta ? *h.rope_theta : h.rotary_emb_base.value_or(10000.0);
      h.per_layer_type.emplace(kv.key(), std::move(p));
    }
  }
  return h;
}

// JSON text (a string or an input stream) -> json. A syntax error, and a number JSON allows but a
// double cannot hold (1e400: nlohmann's out_of_range 406, not a parse_error), become a ConfigError.
template <class Input>
json parse_json(Input&& input) {
  try {
    return json::parse(std::forward<Input>(input));
  } catch (const json::exception& e) {
    throw ConfigError(std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace rotary_inspect

#endif  // ROTARY_EXAMPLES_INSPECT_CONFIG_HPP
