// rotary-inspect: what RoPE a Hugging Face config.json defines, as one JSON object.
//
//   rotary-inspect CONFIG.json [--positions P1,P2,...] [--seq-len N] [--layer-type NAME]
//                              [--pairing interleaved|half_split]
//   rotary-inspect CONFIG.json --layers [--seq-len N] [--pairing interleaved|half_split]
//
// Prints rope_type, head_dim, rotary_dim, pairing, inv_freq (theta_j, rotary_dim/2 values, "%.17g" so
// they round trip), attention_factor, and for each requested position one row of cos and one of sin
// (rotary_dim/2 float values each, per frequency, WITHOUT the attention factor, "%.9g" so they round
// trip as float). --seq-len is the sequence length length-dependent rules see (dynamic NTK, longrope
// short/long switching); --layer-type picks per-layer-type parameters (default: the model's RoPE
// layers, full_attention for most, chunked_attention for Llama 4). Also printed: mrope_section and
// mrope_interleaved (M-RoPE models), softmax_scale_factor (DeepSeek's yarn mscale on the softmax
// scale), inverse_on_output (DeepSeek-V4 rotates its attention output back), query_scale (Ministral
// 3's scaling of queries by position, null for others) and the warnings (misspelt or ignored keys,
// unknown families), which also go to stderr.
// --layers prints instead what every layer gets (resolve_layers, rotary/hf_layers.hpp): a JSON array,
// one object per layer (index, layer_type, kind "rope" / "nope" / "refused", and rope_type, rope_theta,
// rotary_dim, attention_factor for RoPE layers, reason for the others).
// Exit status: 0 on success, 1 for a bad file or config, 2 for bad arguments.
//
// The JSON -> rotary::HfConfig mapping is rotary/hf_json.hpp (optional, needs nlohmann-json).
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rotary/cache.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/hf_json.hpp"
#include "rotary/hf_layers.hpp"

namespace {

using nlohmann::json;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
        "       rotary-inspect CONFIG.json --layers [--seq-len N] [--pairing interleaved|half_split]\n"
        "Prints the RoPE a Hugging Face config.json defines as one JSON object: rope_type, head_dim,\n"
        "rotary_dim, pairing, inv_freq, attention_factor and, per position, cos and sin (without the\n"
        "attention factor). --layers: what every layer gets (RoPE, NoPE or a refusal), one object each.\n";
}

struct Args {
  std::string config_path;
  std::vector<std::int64_t> positions;
  rotary::ResolveOptions options;
  bool layers = false;
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
        arg.resize(eq);
        inline_value = true;
      }
    }
    auto take = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--layers") {
      if (inline_value) throw UsageError("--layers takes no value");
      a.layers = true;
    } else if (arg == "--positions") {
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
  if (a.layers && (!a.positions.empty() || !a.options.layer_type.empty()))
    throw UsageError("--layers prints every layer: it takes no --positions or --layer-type");
  return a;
}

// QueryScale (rotary/hf_keys.hpp) as {"beta", "period", "offset"}, or null when inactive.
std::string query_scale_json(const rotary::QueryScale& q) {
  if (!q.active()) return "null";
  return "{\"beta\": " + fmt("%.17g", q.beta) + ", \"period\": " + std::to_string(q.period) +
         ", \"offset\": " + std::to_string(q.offset) + "}";
}

int run_layers(const rotary::HfConfig& config, const Args& args) {
  for (const std::string& w : config.warnings) std::cerr << "rotary-inspect: warning: " << w << "\n";
  std::ostringstream o;
  o << "[";
  bool first = true;
  for (const rotary::LayerRope& l : rotary::resolve_layers(config, args.options)) {
    o << (first ? "\n" : ",\n") << "  {\"index\": " << l.index << ", \"layer_type\": " << json(l.layer_type).dump()
      << ", \"kind\": \"" << rotary::to_string(l.kind) << "\"";
    if (l.rope) {
      const rotary::ResolvedRope& r = *l.rope;
      o << ", \"rope_type\": " << json(r.params.rope_type).dump() << ", \"rope_theta\": "
        << fmt("%.17g", r.params.rope_theta) << ", \"rotary_dim\": " << r.spec.effective_rotary_dim()
        << ", \"pairing\": \"" << rotary::to_string(r.spec.pairing) << "\", \"attention_factor\": "
        << fmt("%.17g", r.freqs.attention_factor);
    } else {
      o << ", \"reason\": " << json(l.reason).dump();
    }
    if (l.query_scale.active()) o << ", \"query_scale\": " << query_scale_json(l.query_scale);
    o << "}";
    first = false;
  }
  o << (first ? "]\n" : "\n]\n");
  std::cout << o.str();
  return std::cout.good() ? 0 : 1;
}

int run(const Args& args) {
  const rotary::HfConfig config = rotary::load_hf_config(args.config_path);
  if (args.layers) return run_layers(config, args);
  const rotary::ResolvedRope r = rotary::resolve(config, args.options);
  for (const std::string& w : r.warnings) std::cerr << "rotary-inspect: warning: " << w << "\n";

  const auto cache = rotary::CosSinCache<float>::for_positions(r.freqs, args.positions,
                                                               rotary::AttentionFactor::separate);
  const std::int64_t h = cache.pairs();

  std::ostringstream o;
  o << "{\n";
  o << "  \"model_type\": " << (config.model_type ? json(*config.model_type).dump() : "null") << ",\n";
  o << "  \"layer_type\": " << json(r.layer_type).dump() << ",\n";
  o << "  \"rope_type\": " << json(r.params.rope_type).dump() << ",\n";
  o << "  \"rope_theta\": " << fmt("%.17g", r.params.rope_theta) << ",\n";
  o << "  \"head_dim\": " << r.spec.head_dim << ",\n";
  o << "  \"rotary_dim\": " << r.spec.effective_rotary_dim() << ",\n";
  o << "  \"pairing\": " << json(std::string(rotary::to_string(r.spec.pairing))).dump() << ",\n";
  o << "  \"max_position_embeddings\": " << r.input.max_position_embeddings << ",\n";
  o << "  \"seq_len\": " << (r.input.seq_len ? std::to_string(*r.input.seq_len) : "null") << ",\n";
  o << "  \"attention_factor\": " << fmt("%.17g", r.freqs.attention_factor) << ",\n";
  o << "  \"softmax_scale_factor\": " << fmt("%.17g", r.softmax_scale_factor) << ",\n";
  o << "  \"inverse_on_output\": " << (r.inverse_on_output ? "true" : "false") << ",\n";
  o << "  \"query_scale\": " << query_scale_json(r.query_scale) << ",\n";
  o << "  \"mrope_section\": " << json(r.mrope_section).dump() << ",\n";
  o << "  \"mrope_interleaved\": " << (r.mrope_interleaved ? "true" : "false") << ",\n";
  o << "  \"warnings\": " << json(r.warnings).dump() << ",\n";
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
  } catch (const std::exception& e) {  // rotary::error (already "rotary: ...")
    std::cerr << "rotary-inspect: " << args.config_path << ": " << e.what() << "\n";
    return 1;
  }
}
