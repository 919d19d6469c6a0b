// quickstart: rotate queries and keys held in Eigen maps, then check the property RoPE exists for:
// the score <R_m q, R_n k> depends on the positions only through n - m.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include <rotary/rotary.hpp>

static int run() {
  const std::int64_t tokens = 8;
  const std::int64_t heads = 4;
  const std::int64_t head_dim = 128;

  // Plain RoPE (no rope_scaling, as Llama-3-8B): half-split pairs, base 500000, a cache for positions
  // [0, 4096). A model with scaling (Llama 3.1: llama3) comes from its config: examples/llama31.cpp.
  const rotary::Rope<float> rope(rotary::RotarySpec(head_dim, rotary::Pairing::half_split, 500000.0), 4096);

  // q and k as an engine holds them: [tokens, heads, head_dim], row-major, viewed as
  // (tokens*heads) x head_dim matrices.
  std::vector<float> q_buf(static_cast<std::size_t>(tokens * heads * head_dim));
  std::vector<float> k_buf(q_buf.size());
  for (std::size_t i = 0; i < q_buf.size(); ++i) {
    q_buf[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    k_buf[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
  }
  Eigen::Map<rotary::RowMatrix<float>> q(q_buf.data(), tokens * heads, head_dim);
  Eigen::Map<rotary::RowMatrix<float>> k(k_buf.data(), tokens * heads, head_dim);

  // The same vectors at two position offsets: 100 + t and 3000 + t.
  rotary::RowMatrix<float> q2 = q;
  rotary::RowMatrix<float> k2 = k;
  rotary::apply(rope, q, rotary::Positions::contiguous(100), heads);   // in place
  rotary::apply(rope, k, rotary::Positions::contiguous(100), heads);
  rotary::apply(rope, q2, rotary::Positions::contiguous(3000), heads);
  rotary::apply(rope, k2, rotary::Positions::contiguous(3000), heads);

  // Scores between token 7 (query) and token 2 (key), head 0: shifted by 2900 positions, equal.
  const double s1 = q.row(7 * heads).cast<double>().dot(k.row(2 * heads).cast<double>());
  const double s2 = q2.row(7 * heads).cast<double>().dot(k2.row(2 * heads).cast<double>());
  std::printf("score(q@107, k@102)   = %.7f\n", s1);
  std::printf("score(q@3007, k@3002) = %.7f\n", s2);
  const double rel = std::fabs(s1 - s2) / std::fabs(s1);
  std::printf("relative difference   = %.2g (float rounding only)\n", rel);

  // Undo the rotation: the inverse is also the backward pass.
  rotary::apply(rope, q, rotary::Positions::contiguous(100), heads, rotary::Direction::inverse);
  const double back = std::fabs(q(0, 0) - static_cast<float>(std::sin(0.0)));
  std::printf("inverse(forward(q)) - q at [0,0] = %.2g\n", back);
  return rel < 1e-5 && back < 1e-6 ? 0 : 1;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {  // rotary::error and allocation failures: say what, exit 1
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 1;
  }
}
