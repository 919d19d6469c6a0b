// rotary-inspect: what RoPE a Hugging Face config.json defines, as one JSON object.
//
//   rotary-inspect CONFIG.json [--positions P1,P2,...] [--seq-len N] [--layer-type NAME]
//                              [--pairing interleaved|half_split]
//
// Prints rope_type, head_dim, rotary_dim, pairing, inv_freq (theta_j, rotary_dim/2 values, "%.17g" so
// they round trip), attention_factor, and for each requested position one row of cos and one of sin
// (rotary_dim/2 float values each, per frequency, WITHOUT the attention factor, "%.9g" so they round
// trip as float). --seq-len is the sequence length length-dependent rules see (dynamic NTK, longrope
// short/long switching); --layer-type picks per-layer-type parameters (default full_attention).
// Exit status: 0 on success, 1 for a bad file or config, 2 for bad arguments.
//
// The JSON -> rotary::HfConfig mapping lives here; rotary's headers need no JSON library.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rotary/cache.hpp"
#include "rotary/hf_config.hpp"

namespace {

using nlohmann::json;

// A config error: the message names the key.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

[[noreturn]] void bad_type(const std::string& key, const json& v, const char* expected) {
  throw ConfigError("\"" + key + "\" must be " + expected + ", got " + std::string(v.type_name()) + " " +
                    show(v));
}

// Readers: absent or null -> nullopt; a value of the wrong type -> ConfigError naming the key.
std::optional<double> get_double(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) bad_type(where + name, *it, "a number");
  return it->get<double>();
}

std::optional<std::int64_t> get_int(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_number_float()) {  // e.g. 4096.0
    const double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<std::int64_t>(d);
  }
  bad_type(where + name, *it, "an integer");
}

std::optional<bool> get_bool(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) bad_type(where + name, *it, "true or false");
  return it->get<bool>();
}

std::optional<std::string> get_string(const json& obj, const char* name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) bad_type(where + name, *it, "a string");
  return it->get<std::string>();
}

std::vector<double> get_doubles(const json& obj, const char* name, const std::string& where) {
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
rotary::RopeParameters parse_rope_parameters(const json& obj, const std::string& where,
                                             std::optional<double>* theta_in_dict) {
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
  static const char* const known[] = {"rope_type", "type", "rope_theta", "factor",
                                      "original_max_position_embeddings", "attention_factor", "beta_fast",
                                      "beta_slow", "mscale", "mscale_all_dim", "truncate", "short_factor",
                                      "long_factor", "low_freq_factor", "high_freq_factor",
                                      "partial_rotary_factor"};
  for (const auto& kv : obj.items()) {
    bool is_known = false;
    for (const char* k : known) is_known = is_known || kv.key() == k;
    if (!is_known)
      std::cerr << "rotary-inspect: warning: " << where << kv.key() << " is not a rope parameter; ignored\n";
  }
  return p;
}

// Nested rope_parameters: a non-empty object whose every value is an object (or null).
bool is_per_layer(const json& rp) {
  if (!rp.is_object() || rp.empty()) return false;
  for (const auto& kv : rp.items())
    if (!kv.value().is_object() && !kv.value().is_null()) return false;
  return true;
}

rotary::HfConfig parse_config(const json& root) {
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
    h.rope_scaling = parse_rope_parameters(flat, where, &theta);
    if (theta) h.rope_theta = theta;  // HF: the dict's rope_theta wins over the top-level one
  } else if (has_rp) {
    for (const auto& kv : rp->items()) {
      if (kv.value().is_null()) continue;
      std::optional<double> theta;
      auto p = parse_rope_parameters(kv.value(), "rope_parameters." + kv.key() + ".", &theta);
      if (!theta) p.rope_theta = h.rope_theta ? *h.rope_theta : h.rotary_emb_base.value_or(10000.0);
      h.per_layer_type.emplace(kv.key(), std::move(p));
    }
  }
  return h;
}

std::int64_t parse_int(const std::string& s, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || v < 0)
    throw UsageError(what + " (\"" + s + "\") must be a non-negative integer");
  return static_cast<std::int64_t>(v);
}

std::vector<std::int64_t> parse_positions(const std::string& list) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(parse_int(item, "--positions entry"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

void print_usage(std::ostream& os) {
  os << "usage: rotary-inspect CONFIG.json [--positions P1,P2,...] [--seq-len N] [--layer-type NAME]\n"
        "                      [--pairing interleaved|half_split]\n"
        "Prints the RoPE a Hugging Face config.json defines as one JSON object: rope_type, head_dim,\n"
        "rotary_dim, pairing, inv_freq, attention_factor and, per position, cos and sin (without the\n"
        "attention factor).\n";
}

struct Args {
  std::string config_path;
  std::vector<std::int64_t> positions;
  rotary::ResolveOptions options;
};

Args parse_args(int argc, char** argv) {
  Args a;
  bool have_path = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool inline_value = false;
    if (arg.rfind("--", 0) == 0) {
      if (const auto eq = arg.find('='); eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inline_value = true;
      }
    }
    auto take = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--positions") {
      a.positions = parse_positions(take());
    } else if (arg == "--seq-len") {
      a.options.seq_len = parse_int(take(), "--seq-len");
    } else if (arg == "--layer-type") {
      a.options.layer_type = take();
      if (a.options.layer_type.empty()) throw UsageError("--layer-type needs a name");
    } else if (arg == "--pairing") {
      const std::string p = take();
      try {
        a.options.pairing = rotary::parse_pairing(p);
      } catch (const rotary::error& e) {
        throw UsageError(std::string("--pairing: ") + e.what());
      }
    } else if (arg.rfind("--", 0) == 0 || (arg.size() > 1 && arg[0] == '-')) {
      throw UsageError("unknown option " + arg);
    } else if (!have_path) {
      a.config_path = arg;
      have_path = true;
    } else {
      throw UsageError("more than one config file (" + a.config_path + ", " + arg + ")");
    }
  }
  if (!have_path) throw UsageError("no config file given");
  return a;
}

int run(const Args& args) {
  std::ifstream in(args.config_path);
  if (!in) throw ConfigError("cannot open the file");
  json root;
  try {
    root = json::parse(in);
  } catch (const json::parse_error& e) {
    throw ConfigError(std::string("not valid JSON: ") + e.what());
  }
  const rotary::HfConfig config = parse_config(root);
  const rotary::ResolvedRope r = rotary::resolve(config, args.options);

  const auto cache = rotary::CosSinCache<float>::for_positions(r.freqs, args.positions,
                                                               rotary::AttentionFactor::separate);
  const std::int64_t h = cache.pairs();

  std::ostringstream o;
  o << "{\n";
  o << "  \"model_type\": " << (config.model_type ? json(*config.model_type).dump() : "null") << ",\n";
  o << "  \"layer_type\": " << json(args.options.layer_type).dump() << ",\n";
  o << "  \"rope_type\": " << json(r.params.rope_type).dump() << ",\n";
  o << "  \"rope_theta\": " << fmt("%.17g", r.params.rope_theta) << ",\n";
  o << "  \"head_dim\": " << r.spec.head_dim << ",\n";
  o << "  \"rotary_dim\": " << r.spec.effective_rotary_dim() << ",\n";
  o << "  \"pairing\": " << json(std::string(rotary::to_string(r.spec.pairing))).dump() << ",\n";
  o << "  \"max_position_embeddings\": " << r.input.max_position_embeddings << ",\n";
  o << "  \"seq_len\": " << (r.input.seq_len ? std::to_string(*r.input.seq_len) : "null") << ",\n";
  o << "  \"attention_factor\": " << fmt("%.17g", r.freqs.attention_factor) << ",\n";
  o << "  \"inv_freq\": [";
  for (std::size_t j = 0; j < r.freqs.theta.size(); ++j)
    o << (j ? ", " : "") << fmt("%.17g", r.freqs.theta[j]);
  o << "],\n";
  o << "  \"positions\": [";
  for (std::size_t i = 0; i < args.positions.size(); ++i) o << (i ? ", " : "") << args.positions[i];
  o << "],\n";
  for (int part = 0; part < 2; ++part) {
    o << "  \"" << (part == 0 ? "cos" : "sin") << "\": [";
    for (std::size_t i = 0; i < args.positions.size(); ++i) {
      const float* row = cache.row(args.positions[i]) + part * h;
      o << (i ? ",\n    [" : "\n    [");
      for (std::int64_t j = 0; j < h; ++j) o << (j ? ", " : "") << fmt("%.9g", static_cast<double>(row[j]));
      o << "]";
    }
    o << (args.positions.empty() ? "]" : "\n  ]") << (part == 0 ? ",\n" : "\n");
  }
  o << "}\n";
  std::cout << o.str();
  return std::cout.good() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      print_usage(std::cout);
      return 0;
    }
  }
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "rotary-inspect: " << e.what() << "\n";
    print_usage(std::cerr);
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {  // ConfigError, rotary::error (already "rotary: ..."), json errors
    std::cerr << "rotary-inspect: " << args.config_path << ": " << e.what() << "\n";
    return 1;
  }
}
