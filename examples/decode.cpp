// decode: a small multi-head attention with grouped-query attention (GQA) and a KV cache, the way
// an inference engine uses rotary. Prefill rotates the prompt's queries and keys with one fused
// apply_qk call and writes the rotated keys straight into the cache; each decode step rotates the
// new token's query and key at its position and appends the key. Keys are rotated once, on
// insertion, and never again.
//
// Check: every token's attention output (prompt and decode) is recomputed from scratch in double
// with the explicit rotation matrices R_m (rotary::reference::rotation_matrix), rotating all keys
// again at their positions, with full causal attention. Both paths start from the same projected
// (unrotated) q, k, v, so the difference is rotation plus float attention arithmetic only.
// Exit 0 if the max relative error is below 1e-5, 1 otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include <rotary/rotary.hpp>

namespace {

using Mat = rotary::RowMatrix<float>;

// Portable deterministic numbers (std distributions differ between standard libraries).
struct SplitMix {
  std::uint64_t state;
  double uniform() {  // [-1, 1)
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    z ^= z >> 31U;
    return static_cast<double>(z >> 11U) * 0x1.0p-52 - 1.0;
  }
};

Mat random_matrix(SplitMix& rng, std::int64_t rows, std::int64_t cols, double scale) {
  Mat m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) m(r, c) = static_cast<float>(scale * rng.uniform());
  return m;
}

struct Config {
  const char* name;
  std::int64_t hidden, q_heads, kv_heads, head_dim, rotary_dim;
  rotary::Pairing pairing;
  double base;
  std::int64_t prompt, decode;
};

struct Result {
  double max_rel = 0.0;
  double max_abs = 0.0;
};

// Causal attention of one token's queries (q_heads rows) over cache rows [0, len), in float as an
// engine would compute it. GQA: query head h reads kv head h / (q_heads / kv_heads).
void attend(const Config& c, const float* q, const std::vector<float>& k_cache,
            const std::vector<float>& v_cache, std::int64_t len, float* out) {
  const std::int64_t group = c.q_heads / c.kv_heads;
  const float scale = 1.0F / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> p(static_cast<std::size_t>(len));
  for (std::int64_t h = 0; h < c.q_heads; ++h) {
    const float* qh = q + h * c.head_dim;
    const std::int64_t g = h / group;
    float mx = -INFINITY;
    for (std::int64_t j = 0; j < len; ++j) {
      const float* kj = k_cache.data() + (j * c.kv_heads + g) * c.head_dim;
      float s = 0.0F;
      for (std::int64_t i = 0; i < c.head_dim; ++i) s += qh[i] * kj[i];
      p[static_cast<std::size_t>(j)] = s * scale;
      mx = std::max(mx, s * scale);
    }
    float sum = 0.0F;
    for (float& x : p) sum += (x = std::exp(x - mx));
    float* oh = out + h * c.head_dim;
    std::fill(oh, oh + c.head_dim, 0.0F);
    for (std::int64_t j = 0; j < len; ++j) {
      const float* vj = v_cache.data() + (j * c.kv_heads + g) * c.head_dim;
      const float w = p[static_cast<std::size_t>(j)] / sum;
      for (std::int64_t i = 0; i < c.head_dim; ++i) oh[i] += w * vj[i];
    }
  }
}

// From scratch for the token at position `pos`: rotate its queries and ALL keys 0..pos with the
// explicit matrices, in double; causal softmax attention; compare with the engine's output.
void check_token(const Config& c, const std::vector<double>& theta, const Mat& q_raw, const Mat& k_raw,
                 const Mat& v_raw, std::int64_t pos, const float* engine_out, Result& res) {
  const Eigen::MatrixXd r_pos = rotary::reference::rotation_matrix(theta, c.head_dim, c.pairing, pos);
  std::vector<Eigen::VectorXd> keys;
  for (std::int64_t j = 0; j <= pos; ++j) {
    const Eigen::MatrixXd r_j = rotary::reference::rotation_matrix(theta, c.head_dim, c.pairing, j);
    for (std::int64_t g = 0; g < c.kv_heads; ++g)
      keys.emplace_back(r_j * k_raw.row(j * c.kv_heads + g).transpose().cast<double>());
  }
  const std::int64_t group = c.q_heads / c.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  for (std::int64_t h = 0; h < c.q_heads; ++h) {
    const std::int64_t g = h / group;
    const Eigen::VectorXd q = r_pos * q_raw.row(pos * c.q_heads + h).transpose().cast<double>();
    Eigen::VectorXd s(pos + 1);
    for (std::int64_t j = 0; j <= pos; ++j) s(j) = scale * q.dot(keys[static_cast<std::size_t>(j * c.kv_heads + g)]);
    s = (s.array() - s.maxCoeff()).exp();
    s /= s.sum();
    Eigen::VectorXd ref = Eigen::VectorXd::Zero(c.head_dim);
    for (std::int64_t j = 0; j <= pos; ++j) ref += s(j) * v_raw.row(j * c.kv_heads + g).transpose().cast<double>();
    double diff = 0.0;
    for (std::int64_t i = 0; i < c.head_dim; ++i)
      diff = std::max(diff, std::fabs(static_cast<double>(engine_out[h * c.head_dim + i]) - ref(i)));
    res.max_abs = std::max(res.max_abs, diff);
    res.max_rel = std::max(res.max_rel, diff / ref.cwiseAbs().maxCoeff());
  }
}

Result run(const Config& c, std::uint64_t seed) {
  SplitMix rng{seed};
  const std::int64_t total = c.prompt + c.decode;
  const double w_scale = std::sqrt(3.0 / static_cast<double>(c.hidden));  // unit-variance outputs
  const Mat w_q = random_matrix(rng, c.q_heads * c.head_dim, c.hidden, w_scale);
  const Mat w_k = random_matrix(rng, c.kv_heads * c.head_dim, c.hidden, w_scale);
  const Mat w_v = random_matrix(rng, c.kv_heads * c.head_dim, c.hidden, w_scale);
  const Mat x = random_matrix(rng, total, c.hidden, std::sqrt(3.0));  // token embeddings

  const rotary::Rope<float> rope(rotary::RotarySpec(c.head_dim, c.pairing, c.base, c.rotary_dim), 4096);

  // Projections, unrotated: [tokens, heads, head_dim] viewed as (tokens*heads) x head_dim rows.
  // Kept for the reference; the engine projects token by token below.
  Mat q_raw = x * w_q.transpose();
  Mat k_raw = x * w_k.transpose();
  Mat v_raw = x * w_v.transpose();
  q_raw.resize(total * c.q_heads, c.head_dim);
  k_raw.resize(total * c.kv_heads, c.head_dim);
  v_raw.resize(total * c.kv_heads, c.head_dim);

  // The KV cache: rotated keys and values, [position, kv_head, head_dim].
  const std::int64_t row = c.kv_heads * c.head_dim;
  std::vector<float> k_cache(static_cast<std::size_t>(total * row));
  std::vector<float> v_cache(k_cache.size());
  std::vector<float> out(static_cast<std::size_t>(total * c.q_heads * c.head_dim));
  std::int64_t rotated_keys = 0;

  // Prefill: project the prompt, rotate q and k (positions 0..prompt-1) in one fused call whose key
  // output is the cache itself, then causal attention for every prompt token.
  {
    const auto xp = x.topRows(c.prompt);
    Mat q = xp * w_q.transpose();
    Mat k = xp * w_k.transpose();
    Mat v = xp * w_v.transpose();
    q.resize(c.prompt * c.q_heads, c.head_dim);
    k.resize(c.prompt * c.kv_heads, c.head_dim);
    Eigen::Map<Mat> k_slot(k_cache.data(), c.prompt * c.kv_heads, c.head_dim);
    rotary::apply_qk(rope, q, q, k, k_slot, rotary::Positions::contiguous(0), c.q_heads, c.kv_heads);
    rotated_keys += c.prompt;
    std::copy(v.data(), v.data() + v.size(), v_cache.begin());
    for (std::int64_t t = 0; t < c.prompt; ++t)
      attend(c, q.data() + t * c.q_heads * c.head_dim, k_cache, v_cache, t + 1,
             out.data() + t * c.q_heads * c.head_dim);
  }

  // Decode: one token at a time; rotate its q and k at its position, append k and v, attend.
  for (std::int64_t pos = c.prompt; pos < total; ++pos) {
    const auto xt = x.row(pos);
    Mat q = xt * w_q.transpose();
    Mat k = xt * w_k.transpose();
    const Mat v = xt * w_v.transpose();
    q.resize(c.q_heads, c.head_dim);
    k.resize(c.kv_heads, c.head_dim);
    Eigen::Map<Mat> k_slot(k_cache.data() + pos * row, c.kv_heads, c.head_dim);
    rotary::apply_qk(rope, q, q, k, k_slot, rotary::Positions::contiguous(pos), c.q_heads, c.kv_heads);
    rotated_keys += 1;
    std::copy(v.data(), v.data() + v.size(), v_cache.begin() + pos * row);
    attend(c, q.data(), k_cache, v_cache, pos + 1, out.data() + pos * c.q_heads * c.head_dim);
  }

  // Verify every token against attention recomputed from scratch with explicit rotation matrices.
  Result res;
  const std::vector<double>& theta = rope.cache().theta();
  for (std::int64_t pos = 0; pos < total; ++pos)
    check_token(c, theta, q_raw, k_raw, v_raw, pos, out.data() + pos * c.q_heads * c.head_dim, res);

  // Without a cache of rotated keys, every forward pass re-rotates all keys seen so far: the
  // prefill pass rotates `prompt` keys and the decode step at position p rotates p + 1.
  std::int64_t rerotate = c.prompt;
  for (std::int64_t pos = c.prompt; pos < total; ++pos) rerotate += pos + 1;
  std::printf("%s\n", c.name);
  std::printf("  %lld q heads, %lld kv heads (GQA), head_dim %lld, rotary_dim %lld, hidden %lld, base %g\n",
              static_cast<long long>(c.q_heads), static_cast<long long>(c.kv_heads),
              static_cast<long long>(c.head_dim), static_cast<long long>(c.rotary_dim),
              static_cast<long long>(c.hidden), c.base);
  std::printf("  tokens: %lld prompt (prefill) + %lld decoded one at a time\n",
              static_cast<long long>(c.prompt), static_cast<long long>(c.decode));
  std::printf("  key head vectors rotated: %lld with the KV cache (once, on insertion) vs %lld re-rotating "
              "all keys at every step (%.1fx fewer)\n",
              static_cast<long long>(rotated_keys) * c.kv_heads, static_cast<long long>(rerotate) * c.kv_heads,
              static_cast<double>(rerotate) / static_cast<double>(rotated_keys));
  std::printf("  vs explicit-R double attention: max rel error %.3g, max abs error %.3g\n", res.max_rel,
              res.max_abs);
  return res;
}

}  // namespace

static int run() {
  const Config configs[] = {
      {"half_split, full rotary", 128, 8, 2, 64, 64, rotary::Pairing::half_split, 10000.0, 20, 30},
      {"interleaved, partial rotary", 128, 8, 2, 64, 32, rotary::Pairing::interleaved, 10000.0, 20, 30},
  };
  const double tolerance = 1e-5;
  bool ok = true;
  std::uint64_t seed = 2024;
  for (const Config& c : configs) {
    const Result r = run(c, seed++);
    if (!(r.max_rel < tolerance)) {
      std::printf("  FAIL: max relative error %.3g >= %.0e\n", r.max_rel, tolerance);
      ok = false;
    }
  }
  std::printf("%s\n", ok ? "OK: KV-cache decode matches full attention with explicit rotation matrices"
                         : "MISMATCH");
  return ok ? 0 : 1;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {  // rotary::error and allocation failures: say what, exit 1
    std::fprintf(stderr, "decode: %s\n", e.what());
    return 1;
  }
}
