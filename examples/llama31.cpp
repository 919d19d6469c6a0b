// llama31: a real model from its config. Llama-3.1-8B's config.json -> HfConfig -> resolve() -> Rope.
// The resolved spec carries the llama3 rule's frequencies, so Rope<T>(r.spec, n) and
// Rope<T>(r.spec, OnTheFly{}) rotate as transformers does; a RotarySpec(128, half_split, 500000) alone
// would be Llama 3.0's unscaled RoPE, and a table of one paired with the spec of the other throws.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include <rotary/rotary.hpp>

static int run() {
  // The rope keys of meta-llama/Llama-3.1-8B/config.json (fill HfConfig from any JSON parser, or
  // rotary::load_hf_config("config.json") from rotary/hf_json.hpp, which uses nlohmann-json).
  rotary::HfConfig cfg;
  cfg.model_type = "llama";
  cfg.hidden_size = 4096;
  cfg.num_attention_heads = 32;  // head_dim = 4096 / 32 = 128
  cfg.max_position_embeddings = 131072;
  cfg.rope_theta = 500000.0;
  rotary::RopeParameters scaling;
  scaling.rope_type = "llama3";
  scaling.factor = 8.0;
  scaling.low_freq_factor = 1.0;
  scaling.high_freq_factor = 4.0;
  scaling.original_max_position_embeddings = 8192;
  cfg.rope_scaling = scaling;

  const rotary::ResolvedRope r = rotary::resolve(cfg);
  const rotary::Rope<rotary::bf16> rope(r.spec, 8192);             // exact table for [0, 8192)
  const rotary::Rope<rotary::bf16> fly(r.spec, rotary::OnTheFly{});  // any position up to 131071 and beyond

  const std::vector<double>& theta = rope.cache().theta();
  const std::vector<double> plain = rotary::default_frequencies(128, 500000.0).theta;
  int kept = 0;
  int divided = 0;
  for (std::size_t j = 0; j < theta.size(); ++j) {
    kept += theta[j] == plain[j];
    divided += theta[j] == plain[j] / 8.0;
  }
  std::printf("Llama-3.1-8B: head_dim %lld, rotary_dim %lld, %s, attention factor %g\n",
              static_cast<long long>(r.spec.head_dim), static_cast<long long>(rope.rotary_dim()),
              rotary::to_string(rope.pairing()).data(), rope.cache().attention_factor());
  std::printf("theta_63 = %.4g (unscaled 500000^(-126/128) = %.4g)\n", theta[63], plain[63]);
  std::printf("pairs kept: %d, divided by 8: %d, smoothed: %d\n", kept, divided,
              static_cast<int>(theta.size()) - kept - divided);

  // Rotate 4 heads of one token at position 5000 with the table and cache-free: the same bits.
  const std::int64_t heads = 4;
  rotary::RowMatrix<rotary::bf16> a(heads, 128);
  for (Eigen::Index i = 0; i < a.size(); ++i) a.data()[i] = rotary::bf16(std::sin(0.1 * static_cast<double>(i)));
  rotary::RowMatrix<rotary::bf16> b = a;
  rotary::apply(rope, a, rotary::Positions::contiguous(5000), heads);
  rotary::apply(fly, b, rotary::Positions::contiguous(5000), heads);
  const bool same = a == b;
  std::printf("table and cache-free rotation at position 5000: %s\n", same ? "same bits" : "DIFFERENT");

  // A table of unscaled frequencies cannot be paired with the resolved spec.
  bool refused = false;
  try {
    const rotary::Rope<float> wrong(r.spec, rotary::CosSinCache<float>(rotary::default_frequencies(128, 5e5), 16));
  } catch (const rotary::error& e) {
    refused = true;
    std::printf("unscaled table with the Llama-3.1 spec: %s\n", e.what());
  }
  return std::fabs(theta[63] - 3.069e-7) < 5e-11 && same && refused ? 0 : 1;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {  // rotary::error and allocation failures: say what, exit 1
    std::fprintf(stderr, "llama31: %s\n", e.what());
    return 1;
  }
}
