// fuzz_config: rotary-inspect's config path on arbitrary bytes.
//
// Input: config.json text, optionally followed by a NUL byte and option bytes (layer type, seq_len,
// pairing override, engine quirks, up to 8 positions). The seeds are plain config files (ours in
// examples/configs and tests/inspect/configs, and broken ones), so the fuzzer starts from real
// structure and appends options itself.
// Runs what the tool runs: rotary::parse_hf_config (rotary/hf_json.hpp) -> rotary::resolve -> a
// cos/sin cache for the positions, and rotary::resolve_layers (every layer). Each step may reject
// the input, but only in the documented way: rotary::error ("rotary: ..." naming the key or value:
// not JSON, a key of the wrong type, a bad value) with a non-empty message. Anything else — another
// exception type (nlohmann type errors, bad_alloc, length_error), a crash, a sanitizer report, a
// hang (-timeout) — is a finding. Accepted configs must resolve to something usable: an even
// rotary_dim <= head_dim, rotary_dim/2 finite frequencies, a positive finite attention factor, and
// cos/sin rows with |cos|, |sin| <= 1 and cos^2 + sin^2 within 1e-6 of 1.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <typeinfo>
#include <vector>

#include "fuzz_support.hpp"
#include "rotary/hf_json.hpp"
#include "rotary/hf_layers.hpp"

namespace {

using rotary_fuzz::fail;

rotary::ResolveOptions draw_options(FuzzedDataProvider& in, std::vector<std::int64_t>& positions) {
  static const char* const layer_types[] = {"full_attention", "sliding_attention", "chunked_attention",
                                            "linear_attention", ""};  // "": the model's RoPE layers
  rotary::ResolveOptions o;
  if (in.remaining_bytes() == 0) return o;
  o.layer_type = layer_types[in.ConsumeIntegralInRange<int>(0, 4)];
  if (in.ConsumeBool()) o.seq_len = in.ConsumeIntegralInRange<std::int64_t>(-1, 1 << 24);
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 1:
      o.pairing = rotary::Pairing::interleaved;
      break;
    case 2:
      o.pairing = rotary::Pairing::half_split;
      break;
    default:
      break;
  }
  o.quirks.vllm_dynamic_fixed_table = in.ConsumeBool();
  o.quirks.ggml_yarn_magnitude = in.ConsumeBool();
  o.quirks.vllm_longrope_always_long = in.ConsumeBool();
  for (int n = in.ConsumeIntegralInRange<int>(0, 8); n > 0; --n)
    positions.push_back(in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(0, 1 << 20)
                                         : in.ConsumeIntegralInRange<std::int64_t>(0, INT64_MAX - 1));
  return o;
}

void check_resolved(const rotary::ResolvedRope& r, const std::vector<std::int64_t>& positions) {
  const std::int64_t d = r.spec.effective_rotary_dim();
  if (d <= 0 || d % 2 != 0 || d > r.spec.head_dim)
    fail("resolved rotary_dim %lld for head_dim %lld", static_cast<long long>(d),
         static_cast<long long>(r.spec.head_dim));
  if (static_cast<std::int64_t>(r.freqs.theta.size()) != d / 2)
    fail("%zu frequencies for rotary_dim %lld", r.freqs.theta.size(), static_cast<long long>(d));
  for (const double t : r.freqs.theta)
    if (!std::isfinite(t)) fail("non-finite frequency %g", t);
  if (!(r.freqs.attention_factor > 0.0) || !std::isfinite(r.freqs.attention_factor))
    fail("attention factor %g", r.freqs.attention_factor);
  const auto cache =
      rotary::CosSinCache<float>::for_positions(r.freqs, positions, rotary::AttentionFactor::separate);
  for (const std::int64_t p : positions) {
    const float* row = cache.row(p);
    for (std::int64_t j = 0; j < cache.pairs(); ++j) {
      const double c = row[j];
      const double s = row[cache.pairs() + j];
      if (!(std::fabs(c) <= 1.0 && std::fabs(s) <= 1.0 && std::fabs(c * c + s * s - 1.0) <= 1e-6))
        fail("position %lld pair %lld: cos %.9g sin %.9g", static_cast<long long>(p),
             static_cast<long long>(j), c, s);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* bytes = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(bytes, '\0', size);
  const std::size_t text_size = nul ? static_cast<std::size_t>(static_cast<const char*>(nul) - bytes) : size;
  const std::string text(bytes, text_size);
  FuzzedDataProvider in(data + text_size, size - text_size);
  if (nul) in.ConsumeIntegral<std::uint8_t>();  // the NUL itself
  std::vector<std::int64_t> positions;
  const rotary::ResolveOptions options = draw_options(in, positions);

  const auto refused_only_with_a_message = [](const auto& step) {
    try {
      step();
    } catch (const rotary::error& e) {
      if (std::string(e.what()).rfind("rotary: ", 0) != 0 || std::strlen(e.what()) <= 8)
        fail("rotary::error without a message: \"%s\"", e.what());
    } catch (const std::exception& e) {
      fail("unexpected exception (%s): %s", typeid(e).name(), e.what());
    }
  };
  rotary::HfConfig config;
  bool parsed = false;
  refused_only_with_a_message([&] {
    config = rotary::parse_hf_config(text);
    parsed = true;
  });
  if (!parsed) return 0;
  refused_only_with_a_message([&] {
    const rotary::ResolvedRope r = rotary::resolve(config, options);
    check_resolved(r, positions);
    for (const std::string& w : r.warnings)
      if (w.empty()) fail("empty warning");
  });
  // Every layer (rotary-inspect --layers): each RoPE layer usable, each other one with its reason.
  refused_only_with_a_message([&] {
    for (const rotary::LayerRope& l : rotary::resolve_layers(config, options)) {
      if (l.kind == rotary::LayerRopeKind::rope) {
        if (!l.rope) fail("layer %lld: a RoPE layer without its rotation", static_cast<long long>(l.index));
        check_resolved(*l.rope, {});
      } else if (l.reason.empty() || l.rope) {
        fail("layer %lld (%s): no reason, or a rotation it does not apply", static_cast<long long>(l.index),
             rotary::to_string(l.kind));
      }
    }
  });
  return 0;
}
