// qwen3_decode: a Qwen3-shaped attention layer served the way a paged-attention engine serves it.
// Two sequences share one paged KV cache ([blocks, 16, kv_heads, head_dim], blocks handed out in
// a scrambled order); each step's tokens of both sequences go through ONE fused call
// (rotary::qkv_split_rope): the packed QKV projection output is split, q and k get Qwen3's per-head
// RMSNorm (q_norm / k_norm), RoPE rotates them at each token's position, q in place and k straight
// into its cache slot (slot_mapping from the block table), v copied next to it. Then attention
// reads the cache through the block table. Prefill (a prompt per sequence) and decode steps (one
// token per sequence, at different positions) use the same call.
//
// Shape: Qwen3-0.6B's attention (16 query / 8 KV heads x 128, rope_theta 1e6, rms_norm_eps 1e-6),
// fewer layers' worth of work: one layer, random weights.
//
// Check: every token's attention output is recomputed from scratch in double from the same
// unrotated projections: RMSNorm in double, the explicit rotation matrix R_m
// (rotary::reference::rotation_matrix), causal attention over the sequence's keys. Exit 0 if the
// max relative error is below 1e-4, 1 otherwise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include <rotary/rotary.hpp>

namespace {

constexpr std::int64_t kQHeads = 16, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16, kBlocks = 12;
constexpr double kTheta = 1000000.0;
constexpr float kEps = 1e-6f;
constexpr std::int64_t kRow = (kQHeads + 2 * kKvHeads) * kHeadDim;  // one token's packed q | k | v

struct SplitMix {  // portable deterministic numbers
  std::uint64_t state;
  double uniform() {  // [-1, 1)
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    z ^= z >> 31U;
    return static_cast<double>(z >> 11U) * 0x1.0p-52 - 1.0;
  }
};

struct Sequence {
  std::vector<std::int64_t> blocks;  // block table: logical block b -> physical block
  std::int64_t length = 0;           // tokens in the cache
  std::vector<std::vector<float>> projections;  // every token's unrotated q | k | v (the reference's input)
  std::int64_t slot(std::int64_t position) const {
    return blocks[static_cast<std::size_t>(position / kBlockSize)] * kBlockSize + position % kBlockSize;
  }
};

// Attention of one token's (rotated, normed) queries over its sequence's cache rows [0, len).
void attend(const float* q, const Sequence& s, std::int64_t len, const rotary::KvCacheView<float>& kv,
            const rotary::KvCacheView<float>& vv, std::vector<float>& out) {
  out.assign(static_cast<std::size_t>(kQHeads * kHeadDim), 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  std::vector<float> w(static_cast<std::size_t>(len));
  for (std::int64_t h = 0; h < kQHeads; ++h) {
    const std::int64_t g = h / (kQHeads / kKvHeads);
    float top = -INFINITY;
    for (std::int64_t p = 0; p < len; ++p) {
      const float* k = kv.row(s.slot(p), g);
      float dot = 0.0f;
      for (std::int64_t i = 0; i < kHeadDim; ++i) dot += q[h * kHeadDim + i] * k[i];
      w[static_cast<std::size_t>(p)] = dot * scale;
      top = std::max(top, dot * scale);
    }
    float sum = 0.0f;
    for (auto& x : w) sum += (x = std::exp(x - top));
    for (std::int64_t p = 0; p < len; ++p) {
      const float* v = vv.row(s.slot(p), g);
      for (std::int64_t i = 0; i < kHeadDim; ++i)
        out[static_cast<std::size_t>(h * kHeadDim + i)] += w[static_cast<std::size_t>(p)] / sum * v[i];
    }
  }
}

// The same output from scratch in double: norm, R_m, causal attention over positions [0, position].
std::vector<double> reference(const Sequence& s, std::int64_t position, const std::vector<float>& wq,
                              const std::vector<float>& wk, const std::vector<double>& theta) {
  const auto norm_rotate = [&](const float* x, const std::vector<float>& w, std::int64_t pos) {
    double ss = 0.0;
    for (std::int64_t i = 0; i < kHeadDim; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double f = 1.0 / std::sqrt(ss / kHeadDim + kEps);
    Eigen::VectorXd n(kHeadDim);
    for (std::int64_t i = 0; i < kHeadDim; ++i) n(i) = x[i] * f * w[static_cast<std::size_t>(i)];
    return Eigen::VectorXd(rotary::reference::rotation_matrix(theta, kHeadDim, rotary::Pairing::half_split, pos) * n);
  };
  std::vector<double> out(static_cast<std::size_t>(kQHeads * kHeadDim), 0.0);
  const auto& me = s.projections[static_cast<std::size_t>(position)];
  for (std::int64_t h = 0; h < kQHeads; ++h) {
    const std::int64_t g = h / (kQHeads / kKvHeads);
    const Eigen::VectorXd q = norm_rotate(me.data() + h * kHeadDim, wq, position);
    std::vector<double> logits(static_cast<std::size_t>(position + 1));
    double top = -INFINITY;
    for (std::int64_t p = 0; p <= position; ++p) {
      const auto& row = s.projections[static_cast<std::size_t>(p)];
      const Eigen::VectorXd k = norm_rotate(row.data() + (kQHeads + g) * kHeadDim, wk, p);
      logits[static_cast<std::size_t>(p)] = q.dot(k) / std::sqrt(static_cast<double>(kHeadDim));
      top = std::max(top, logits[static_cast<std::size_t>(p)]);
    }
    double sum = 0.0;
    for (auto& x : logits) sum += (x = std::exp(x - top));
    for (std::int64_t p = 0; p <= position; ++p) {
      const float* v = s.projections[static_cast<std::size_t>(p)].data() + (kQHeads + kKvHeads + g) * kHeadDim;
      for (std::int64_t i = 0; i < kHeadDim; ++i)
        out[static_cast<std::size_t>(h * kHeadDim + i)] += logits[static_cast<std::size_t>(p)] / sum * v[i];
    }
  }
  return out;
}

int run() {
  SplitMix rng{2026};
  const rotary::Rope<float> rope(rotary::RotarySpec(kHeadDim, rotary::Pairing::half_split, kTheta), 4096);
  const std::vector<double> theta = rotary::compute_frequencies(rope.spec()).theta;
  std::vector<float> wq(kHeadDim), wk(kHeadDim);  // q_norm / k_norm weights
  for (auto& x : wq) x = static_cast<float>(1.0 + 0.3 * rng.uniform());
  for (auto& x : wk) x = static_cast<float>(1.0 + 0.3 * rng.uniform());
  const rotary::QkNorm<float> qk_norm{wq.data(), wk.data(), kEps};

  std::vector<float> k_cache(static_cast<std::size_t>(kBlocks * kBlockSize * kKvHeads * kHeadDim));
  std::vector<float> v_cache(k_cache.size());
  const auto kc = rotary::KvCacheView<float>::paged(k_cache.data(), kBlocks, kBlockSize, kKvHeads, kHeadDim);
  const auto vc = rotary::KvCacheView<float>::paged(v_cache.data(), kBlocks, kBlockSize, kKvHeads, kHeadDim);
  std::vector<Sequence> seqs(2);
  seqs[0].blocks = {7, 2, 9};   // physical blocks, scrambled as an allocator hands them out
  seqs[1].blocks = {4, 11, 0};
  const std::int64_t prompts[2] = {21, 5};
  const int decode_steps = 12;

  double worst = 0.0;
  for (int step = -1; step < decode_steps; ++step) {
    // This step's tokens: each sequence's prompt (step -1), then one token per sequence.
    std::vector<std::int64_t> owner, positions, slots;
    for (std::size_t b = 0; b < seqs.size(); ++b) {
      const std::int64_t n = step < 0 ? prompts[b] : 1;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t pos = seqs[b].length + i;
        owner.push_back(static_cast<std::int64_t>(b));
        positions.push_back(pos);
        slots.push_back(seqs[b].slot(pos));
      }
    }
    const auto tokens = static_cast<std::int64_t>(owner.size());
    std::vector<float> qkv(static_cast<std::size_t>(tokens * kRow));  // the projection's output
    for (auto& x : qkv) x = static_cast<float>(rng.uniform());
    for (std::int64_t t = 0; t < tokens; ++t) {
      auto& s = seqs[static_cast<std::size_t>(owner[static_cast<std::size_t>(t)])];
      s.projections.emplace_back(qkv.begin() + t * kRow, qkv.begin() + (t + 1) * kRow);
    }
    // One fused call: QK-norm + RoPE at `positions`, k and v into the cache at `slots`.
    rotary::qkv_split_rope(rope, qkv.data(), tokens, kQHeads, kKvHeads, rotary::Positions(positions),
                           rotary::Slots(slots), kc, vc, &qk_norm);
    for (std::int64_t t = 0; t < tokens; ++t) seqs[static_cast<std::size_t>(owner[static_cast<std::size_t>(t)])].length++;
    std::vector<float> out;
    for (std::int64_t t = 0; t < tokens; ++t) {
      const auto& s = seqs[static_cast<std::size_t>(owner[static_cast<std::size_t>(t)])];
      const std::int64_t pos = positions[static_cast<std::size_t>(t)];
      attend(qkv.data() + t * kRow, s, pos + 1, kc, vc, out);  // causal: keys up to pos
      const std::vector<double> expect = reference(s, pos, wq, wk, theta);
      double top = 0.0, err = 0.0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        top = std::max(top, std::fabs(expect[i]));
        err = std::max(err, std::fabs(out[i] - expect[i]));
      }
      worst = std::max(worst, err / top);
    }
    if (step < 0 || step == decode_steps - 1)
      std::printf("%s: %lld tokens in one fused call (positions %lld.., slots %lld..); max relative error so far %.2e\n",
                  step < 0 ? "prefill" : "decode ", static_cast<long long>(tokens),
                  static_cast<long long>(positions[0]), static_cast<long long>(slots[0]), worst);
  }
  const bool ok = worst < 1e-4;
  std::printf("qwen3_decode: 2 sequences, paged cache (block 16), %d decode steps: max relative error %.2e vs "
              "attention from scratch in double: %s\n",
              decode_steps, worst, ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qwen3_decode: %s\n", e.what());
    return 1;
  }
}
