// A consumer's strictest warning flags over every public header (tests/strict/CMakeLists.txt:
// -O3 -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast -Werror,
// headers on a plain -I, not -isystem). Warnings inside templates appear only where they are
// instantiated, so this instantiates the main entry points for every storage type, and main() runs
// them on tiny shapes with both pairings: a forward then inverse rotation must give back the input.
#include <rotary/rotary.hpp>
#include <rotary/compat/flash_attn.hpp>
#include <rotary/compat/ggml.hpp>
#include <rotary/compat/onnx.hpp>
#include <rotary/compat/vllm.hpp>
#include <rotary/tensor_map.hpp>
#if ROTARY_STRICT_HF_JSON  // the optional header, when CMake found nlohmann-json
#include <rotary/hf_json.hpp>
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <type_traits>
#include <vector>

namespace {

using rotary::Direction;
using rotary::Pairing;

constexpr std::int64_t kTokens = 5;
constexpr std::int64_t kHeads = 2;
constexpr std::int64_t kHeadDim = 38;  // an AVX-512 f32 vector, an AVX2 one and a masked tail
constexpr std::int64_t kRows = kTokens * kHeads;

template <class T>
rotary::RowMatrix<T> sample(std::int64_t rows, std::int64_t cols, double phase) {
  rotary::RowMatrix<T> m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      m(r, c) = static_cast<T>(std::sin(phase + 0.37 * static_cast<double>(r * cols + c)));
  return m;
}

template <class T>
double max_abs_diff(const rotary::RowMatrix<T>& a, const rotary::RowMatrix<T>& b) {
  double worst = 0.0;
  for (std::int64_t r = 0; r < a.rows(); ++r)
    for (std::int64_t c = 0; c < a.cols(); ++c)
      worst = std::max(worst, std::fabs(static_cast<double>(a(r, c)) - static_cast<double>(b(r, c))));
  return worst;
}

// Worst |x - inverse(forward(x))| over every entry point exercised for T and `pairing`.
template <class T>
double round_trips(Pairing pairing) {
  using Matrix = rotary::RowMatrix<T>;
  const rotary::RotarySpec spec(kHeadDim, pairing, 10000.0, kHeadDim - 4);  // 4 pass-through dims
  const rotary::Rope<T> rope(spec, 64);
  const rotary::Rope<T> lazy(spec, rotary::OnTheFly{});
  const Matrix q0 = sample<T>(kRows, kHeadDim, 0.0);
  const Matrix k0 = sample<T>(kRows, kHeadDim, 1.0);
  const std::vector<std::int32_t> pos32 = {3, 1, 4, 1, 5};
  const std::vector<std::int64_t> pos64 = {9, 2, 6, 5, 3};
  double worst = 0.0;
  Matrix q = q0, k = k0, out(kRows, kHeadDim);
  const auto check = [&](const char* what, const Matrix& got, const Matrix& want) {
    const double d = max_abs_diff<T>(got, want);
    if (d > 0.1) std::printf("  %s: max difference %.3g\n", what, d);
    worst = std::max(worst, d);
  };

  // Eigen maps: in place, out of place, q and k together, unchecked, cache-free.
  rotary::apply(rope, q, rotary::Positions::contiguous(7), kHeads);
  rotary::apply(rope, q, out, rotary::Positions::contiguous(7), kHeads, Direction::inverse);
  check("apply", out, q0);
  q = q0;
  rotary::unchecked::apply(rope, q, pos32, kHeads);
  rotary::unchecked::apply(rope, q, out, pos32, kHeads, Direction::inverse);
  check("apply_unchecked", out, q0);
  q = q0;
  rotary::apply_qk(rope, q, k, pos64, kHeads, kHeads);
  rotary::apply_qk(lazy, q, k, pos64, kHeads, kHeads, Direction::inverse);
  check("apply_qk q", q, q0);
  check("apply_qk k", k, k0);

  // Strided views: [tokens, heads, head_dim] with a padded head stride.
  const rotary::StridedLayout wide{kTokens, kHeads, 2 * (kHeadDim + 3), kHeadDim + 3};
  std::vector<T> buf0(static_cast<std::size_t>(kTokens * wide.token_stride));
  for (std::size_t i = 0; i < buf0.size(); ++i) buf0[i] = static_cast<T>(std::sin(0.01 * static_cast<double>(i)));
  std::vector<T> buf = buf0, kbuf = buf0;
  rotary::apply_strided(rope, buf.data(), wide, pos32);
  rotary::unchecked::apply_strided(rope, buf.data(), wide, buf.data(), wide, pos32, Direction::inverse);
  rotary::apply_qk_strided(rope, buf.data(), wide, buf.data(), wide, kbuf.data(), wide, kbuf.data(), wide, pos64);
  rotary::unchecked::apply_qk_strided(rope, buf.data(), wide, buf.data(), wide, kbuf.data(), wide, kbuf.data(), wide,
                                     pos64, Direction::inverse);
  rotary::shift_keys_strided(rope, kbuf.data(), wide, 5);
  rotary::shift_keys_strided(rope, kbuf.data(), wide, -5);
  double strided = 0.0;
  for (std::size_t i = 0; i < buf.size(); ++i)
    strided = std::max({strided, std::fabs(static_cast<double>(buf[i]) - static_cast<double>(buf0[i])),
                        std::fabs(static_cast<double>(kbuf[i]) - static_cast<double>(buf0[i]))});
  if (strided > 0.1) std::printf("  strided: max difference %.3g\n", strided);
  worst = std::max(worst, strided);

  // Batches (dense layouts), varlen (cu_seqlens) and Eigen TensorMaps.
  const rotary::BatchShape shape{1, kTokens, kHeads, kHeadDim};
  const rotary::StridedLayout dense{kTokens, kHeads, kHeads * kHeadDim, kHeadDim};
  q = q0;
  k = k0;
  rotary::apply_batch(rope, rotary::Layout::bshd, q.data(), shape, rotary::SequencePositions::start(2));
  rotary::apply_varlen(rope, q.data(), dense, std::vector<std::int32_t>{0, kTokens},
                       rotary::SequencePositions::start(2), Direction::inverse);
  check("apply_batch / apply_varlen", q, q0);
  rotary::apply_qk_batch(rope, rotary::Layout::bshd, q.data(), shape, k.data(), kHeads,
                         rotary::SequencePositions::restart());
  rotary::apply_qk_batch(rope, rotary::Layout::bshd, q.data(), shape, k.data(), kHeads,
                         rotary::SequencePositions::restart(), Direction::inverse);
  check("apply_qk_batch q", q, q0);
  check("apply_qk_batch k", k, k0);
  rotary::TensorMap4<T> tq(q.data(), 1, kTokens, kHeads, kHeadDim);
  rotary::apply_batch(rope, rotary::Layout::bshd, tq, rotary::SequencePositions::restart());
  rotary::apply_batch(rope, rotary::Layout::bshd, tq, rotary::SequencePositions::restart(), Direction::inverse);
  check("TensorMap", q, q0);

  // Multi-axis (M-RoPE sections over rotary_dim/2 = 17 pairs) and xPos.
  const rotary::MultiAxisRope<T> mrope(spec, rotary::mrope_axis_map(kHeadDim - 4, {5, 6, 6}), 64);
  const std::vector<std::int64_t> planar = rotary::grid_positions(1, 1, kTokens, 3);
  const rotary::AxisPositions axes(planar, 3);
  rotary::apply_qk(mrope, q, k, axes, kHeads, kHeads);
  rotary::apply(mrope, q, out, axes, kHeads, Direction::inverse);
  rotary::unchecked::apply(mrope, k, axes, kHeads, Direction::inverse);
  check("multi-axis q", out, q0);
  check("multi-axis k", k, k0);
  const rotary::XPos<T> xpos(spec);
  q = q0;
  rotary::apply(xpos.queries(), q, pos32, kHeads);
  rotary::apply(xpos.queries(0.0), q, pos32, kHeads, Direction::inverse);
  check("xpos", q, q0);

  // Rerotation, gradients, linear attention (their results are checked by the unit tests).
  rotary::rerotate_keys(rope, lazy, k, pos32, kHeads);
  rotary::input_gradient(rope, k, pos32, kHeads);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {  // it computes in f32/f64 only
    const Matrix v = sample<T>(kTokens, 4, 2.0);
    const Matrix att = rotary::rope_linear_attention(rope, q0.topRows(kTokens), k0.topRows(kTokens), v, pos32, pos32);
    if (att.rows() != kTokens) worst = 1e9;
  }
  return worst;
}

// Non-template parts that still take templates: Eigen expressions in double.
double analysis_and_weights() {
  const rotary::RotarySpec spec(16, Pairing::interleaved);
  const Eigen::MatrixXd y = Eigen::MatrixXd::Ones(3, 16);
  const std::vector<double> grad = rotary::theta_gradient(spec, y, y, rotary::Positions::contiguous(), 1);
  const Eigen::MatrixXd w = Eigen::MatrixXd::Ones(32, 4);
  const Eigen::MatrixXd w2 = rotary::convert_pairing(w, Pairing::interleaved, Pairing::half_split, 2, 16, 16);
  const rotary::ConventionReport report = rotary::probe_convention(w2, w2, 2, 2, 16, 16);
  const Eigen::VectorXd qv = Eigen::VectorXd::Ones(16);
  const rotary::ScoreGradient sg = rotary::score_gradient(spec, qv, 3, qv, 1);
  const rotary::AttentionPattern pattern = rotary::attention_pattern(spec, rotary::log_distances(1, 100, 5));
#if ROTARY_STRICT_HF_JSON
  const rotary::HfConfig config = rotary::parse_hf_config(R"({"model_type": "llama", "head_dim": 64, "rope_theta": 500000.0})");
#else
  rotary::HfConfig config;
  config.model_type = "llama";
  config.head_dim = 64;
  config.rope_theta = 500000.0;
#endif
  const rotary::ResolvedRope resolved = rotary::resolve(config);
  rotary::RopeParameters yarn;
  yarn.rope_type = "yarn";
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 4096;
  const rotary::Frequencies f = rotary::scaled_frequencies(yarn, rotary::ScalingInput{64, 0, 16384, {}});
  (void)report;
  (void)sg;
  (void)pattern;
  (void)resolved;
  return static_cast<double>(grad.size() + f.theta.size()) + w2.sum();
}

// The ONNX, vLLM, FlashAttention and ggml front ends and a caller's table for each ONNX element type: a rotation by the identity
// table (cos 1, sin 0) must give back the input exactly.
template <class T>
bool compat_identity() {
  const std::vector<std::int64_t> shape{1, 2, 2, 8};  // [B, H, S, D]
  std::vector<T> x(32);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = T(static_cast<float>(i) * 0.25f);
  const std::vector<T> cos(4 * 4, T(1.0f));
  const std::vector<T> sin(4 * 4, T(0.0f));
  const std::vector<std::int64_t> ids{3, 1};
  std::vector<T> y(x.size());
  rotary::onnx::rotary_embedding(x.data(), shape, cos.data(), sin.data(), {4, 4}, ids.data(), y.data(),
                                 rotary::onnx::RotaryEmbeddingAttrs{});
  const rotary::TableRope<T, T> r(8, 8, Pairing::interleaved,
                                  rotary::CosSinTableView<T>::separate(cos.data(), sin.data(), 4, 4));
  rotary::apply_strided(r, y.data(), rotary::StridedLayout{4, 1, 8, 8}, rotary::Positions::contiguous(0));
  std::vector<T> cat(4 * 4);  // vLLM's cat(cos, sin) rows, rot_dim 4
  for (std::size_t i = 0; i < cat.size(); ++i) cat[i] = T(i % 4 < 2 ? 1.0f : 0.0f);
  rotary::vllm::rotary_embedding(ids.data(), 2, y.data(), 2, y.data() + 16, 2, 4, cat.data(), 4, 4, false);
  rotary::flash_attn::apply_rotary_emb(y.data(), y.data(), 1, 2, 2, 8, cos.data(), sin.data(), {4, 4});
  rotary::ggml::RopeExtParams g;  // ggml at position 0 is the identity too
  g.mode = rotary::ggml::Mode::neox;
  g.n_dims = 8;
  g.freq_scale = 0.5;
  g.ext_factor = 1.0;
  g.n_ctx_orig = 64;
  g.attn_factor = 1.0 / (1.0 + 0.1 * std::log(2.0));  // cancels ggml's YaRN magnitude (to rounding)
  const rotary::Rope<T> gr = rotary::ggml::make_rope<T>(8, g, 1);
  std::vector<T> z(8, T(0.0f));
  rotary::apply_strided(gr, z.data(), rotary::StridedLayout{1, 1, 8, 8}, rotary::Positions::contiguous(0));
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(static_cast<float>(y[i]) == static_cast<float>(x[i]))) return false;
  return true;
}

// The fused prologues (fusion.hpp) for every cache element type: at position 0 RoPE is the identity,
// so k lands in a cache of its own type unchanged.
template <class T>
bool fusion_identity() {
  constexpr std::int64_t kD = 8;
  const rotary::Rope<T> rope(rotary::RotarySpec(kD), 16);
  std::vector<T> q(2 * kD), k(kD), v(kD), qkv(4 * kD), mla_q(2 * (4 + kD)), kv(8 + kD);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = T(static_cast<float>(i) * 0.5f);
  for (auto* b : {&q, &v, &qkv, &mla_q, &kv})
    for (std::size_t i = 0; i < b->size(); ++i) (*b)[i] = T(static_cast<float>(i) * 0.125f);
  const std::vector<std::int64_t> slots{3};
  std::vector<T> kc(2 * 4 * kD), vc(kc.size());
  rotary::rope_kv_write(rope, q.data(), rotary::StridedLayout{1, 2, 2 * kD, kD}, k.data(),
                        rotary::StridedLayout{1, 1, kD, kD}, v.data(), rotary::StridedLayout{1, 1, kD, kD},
                        rotary::Positions::contiguous(0), rotary::Slots(slots),
                        rotary::KvCacheView<T>::paged(kc.data(), 2, 4, 1, kD),
                        rotary::KvCacheView<T>::paged(vc.data(), 2, 4, 1, kD));
  std::vector<std::int8_t> k8(kc.size()), v8(kc.size());
  std::vector<float> k8s(8), v8s(8);
  const std::vector<T> w(kD, T(1.0f));
  const rotary::QkNorm<T> norm{w.data(), w.data(), 1e-6f, rotary::NormWeight::unit_offset};
  rotary::qkv_split_rope(rope, qkv.data(), 1, 2, 1, rotary::Positions::contiguous(0), rotary::Slots(slots),
                         rotary::KvCacheView<std::int8_t>::paged(k8.data(), 2, 4, 1, kD, k8s.data()),
                         rotary::KvCacheView<std::int8_t>::paged(v8.data(), 2, 4, 1, kD, v8s.data()), &norm);
  std::vector<rotary::fp8_e4m3> f8(2 * 4 * (8 + kD));
  float scale = 0.5f;
  rotary::mla_rope(rope, mla_q.data(), rotary::MlaQuery{1, 2, 4}, kv.data() + 8, 0, kv.data(), 0,
                   rotary::Positions::contiguous(0), rotary::Slots(slots),
                   rotary::KvCacheView<rotary::fp8_e4m3>::paged(f8.data(), 2, 4, 1, 8 + kD, &scale), false);
  for (std::int64_t i = 0; i < kD; ++i)
    if (!(static_cast<float>(kc[static_cast<std::size_t>(3 * kD + i)]) == static_cast<float>(k[static_cast<std::size_t>(i)])))
      return false;
  return k8s[3] > 0.0f;
}

}  // namespace

int main() {
  try {
    const double limits[] = {1e-5, 1e-12, 4e-3, 3.2e-2};  // f32, f64, f16, bf16: a few ulps of 1
    const char* const names[] = {"f32", "f64", "f16", "bf16"};
    const Pairing pairings[] = {Pairing::interleaved, Pairing::half_split};
    int failures = 0;
    for (const Pairing p : pairings) {
      const double worst[] = {round_trips<float>(p), round_trips<double>(p), round_trips<Eigen::half>(p),
                              round_trips<Eigen::bfloat16>(p)};
      for (int i = 0; i < 4; ++i) {
        std::printf("%s.%s: max |x - inverse(forward(x))| = %.3g (limit %.2g)\n",
                    p == Pairing::interleaved ? "interleaved" : "half_split", names[i], worst[i], limits[i]);
        if (!(worst[i] <= limits[i])) ++failures;
      }
    }
    if (!(analysis_and_weights() > 0.0)) ++failures;
    if (!compat_identity<float>() || !compat_identity<Eigen::half>() || !compat_identity<Eigen::bfloat16>()) {
      std::printf("compat_identity: the identity table changed a value\n");
      ++failures;
    }
    if (!fusion_identity<float>() || !fusion_identity<Eigen::half>() || !fusion_identity<Eigen::bfloat16>()) {
      std::printf("fusion_identity: a fused call at position 0 changed k\n");
      ++failures;
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strict_consumer: %s\n", e.what());
    return 1;
  }
}
