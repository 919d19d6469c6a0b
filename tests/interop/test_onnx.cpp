// rotary/compat/onnx.hpp against an independent reference written here from the ONNX
// RotaryEmbedding-23 reference operator's semantics (onnx/reference/ops/op_rotary_embedding.py): the
// input viewed as [B, S, H, D] (4-D [B, H, S, D] transposed, 3-D [B, S, H*D] reshaped), cos/sin
// gathered by position_ids (or taken per (batch, token) without them), x1/x2 the halves or the
// even/odd coordinates of the first r, real = cos*x1 - sin*x2, imag = sin*x1 + cos*x2, the rest
// passed through. The reference computes in double; rotary must be within 2 ulp of f32 on
// |cos*x1| + |sin*x2| plus half an ulp of the storage type (f32, f16, bf16).
// Shapes: the eight variants of ONNX's node tests (4-D and 3-D input, interleaved, rotary_dim, with
// and without position_ids) at their sizes (B 2, H 3, S 4, D 8 / hidden 3*8, caches of 50 random
// rows), and engine-sized ones (Llama-3-8B: 32 heads x 128, 512 and 1 tokens). Random caches: ONNX's
// tests use random values, which are not rotations. Also the com.microsoft contrib op (scalar start)
// and every refusal the header documents.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <rotary/compat/onnx.hpp>

#include "support.hpp"

namespace {

using rotary::onnx::RotaryEmbeddingAttrs;

struct Case {
  std::string name;
  bool four_d;
  std::int64_t batch, heads, seq, head_dim;
  bool interleaved;
  std::int64_t rotary_dim;  // attribute (0: whole head)
  bool position_ids;
  std::int64_t max_pos;
};

// Element offset of (b, s, h, i) in the input's own layout.
std::int64_t at(const Case& c, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t i) {
  if (c.four_d) return ((b * c.heads + h) * c.seq + s) * c.head_dim + i;
  return ((b * c.seq + s) * c.heads + h) * c.head_dim + i;
}

template <class T>
void run_case(const Case& c, std::uint64_t salt) {
  SCOPED_TRACE(c.name + " " + std::string(rotary::dtype_name<T>()));
  std::mt19937_64 rng(rotary_test::seed() + salt);
  const std::int64_t r = c.rotary_dim == 0 ? c.head_dim : c.rotary_dim;
  const std::int64_t half = r / 2;
  const std::int64_t n = c.batch * c.heads * c.seq * c.head_dim;
  const std::vector<T> x = rotary_test::random_vector<T>(static_cast<std::size_t>(n), rng);
  const std::int64_t rows = c.position_ids ? c.max_pos : c.batch * c.seq;
  const std::vector<T> cos = rotary_test::random_vector<T>(static_cast<std::size_t>(rows * half), rng, -1.0, 1.0);
  const std::vector<T> sin = rotary_test::random_vector<T>(static_cast<std::size_t>(rows * half), rng, -1.0, 1.0);
  const std::vector<std::int64_t> ids =
      rotary_test::random_positions(static_cast<std::size_t>(c.batch * c.seq), c.max_pos - 1, rng);
  const std::vector<std::int64_t> shape =
      c.four_d ? std::vector<std::int64_t>{c.batch, c.heads, c.seq, c.head_dim}
               : std::vector<std::int64_t>{c.batch, c.seq, c.heads * c.head_dim};
  const std::vector<std::int64_t> cache_shape =
      c.position_ids ? std::vector<std::int64_t>{c.max_pos, half} : std::vector<std::int64_t>{c.batch, c.seq, half};
  RotaryEmbeddingAttrs attrs;
  attrs.interleaved = c.interleaved;
  attrs.rotary_embedding_dim = c.rotary_dim;
  attrs.num_heads = c.four_d ? 0 : c.heads;

  std::vector<T> out(x.size());
  rotary::onnx::rotary_embedding(x.data(), shape, cos.data(), sin.data(), cache_shape,
                                 c.position_ids ? ids.data() : nullptr, out.data(), attrs);
  std::vector<T> in_place = x;
  rotary::onnx::rotary_embedding(in_place.data(), shape, cos.data(), sin.data(), cache_shape,
                                 c.position_ids ? ids.data() : nullptr, in_place.data(), attrs);
  EXPECT_TRUE(rotary_test::same_bits(in_place, out)) << "in place";

  const double ulp32 = std::ldexp(1.0, -23);
  double worst = 0;  // in units of the bound
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t s = 0; s < c.seq; ++s) {
      const std::int64_t row = c.position_ids ? ids[static_cast<std::size_t>(b * c.seq + s)] : b * c.seq + s;
      for (std::int64_t h = 0; h < c.heads; ++h) {
        for (std::int64_t j = 0; j < half; ++j) {
          const std::int64_t i1 = c.interleaved ? 2 * j : j;
          const std::int64_t i2 = c.interleaved ? 2 * j + 1 : j + half;
          const double x1 = rotary_test::to_d(x[static_cast<std::size_t>(at(c, b, s, h, i1))]);
          const double x2 = rotary_test::to_d(x[static_cast<std::size_t>(at(c, b, s, h, i2))]);
          const double cj = rotary_test::to_d(cos[static_cast<std::size_t>(row * half + j)]);
          const double sj = rotary_test::to_d(sin[static_cast<std::size_t>(row * half + j)]);
          const double real = cj * x1 - sj * x2;
          const double imag = sj * x1 + cj * x2;
          const double real_scale = std::abs(cj * x1) + std::abs(sj * x2);
          const double imag_scale = std::abs(sj * x1) + std::abs(cj * x2);
          for (const auto& [i, want, scale] : {std::tuple<std::int64_t, double, double>{i1, real, real_scale},
                                               {i2, imag, imag_scale}}) {
            const double got = rotary_test::to_d(out[static_cast<std::size_t>(at(c, b, s, h, i))]);
            const double bound = 2 * ulp32 * scale + rotary_test::ulp<T>(want) / 2;
            ASSERT_LE(std::abs(got - want), bound) << "b " << b << " s " << s << " h " << h << " i " << i;
            worst = std::max(worst, std::abs(got - want) / bound);
          }
        }
        for (std::int64_t i = r; i < c.head_dim; ++i)  // pass-through, bit for bit
          ASSERT_TRUE(rotary_test::same_bits(out[static_cast<std::size_t>(at(c, b, s, h, i))],
                                             x[static_cast<std::size_t>(at(c, b, s, h, i))]));
      }
    }
  ::testing::Test::RecordProperty(c.name + "_worst_error_per_mille_of_bound", static_cast<int>(worst * 1000));
}

const std::vector<Case>& cases() {
  static const std::vector<Case> v{
      // ONNX's node tests: (name, 4-D?, B, H, S, D, interleaved, rotary_dim, position_ids?, max_pos)
      {"rotary_embedding", true, 2, 3, 4, 8, false, 0, true, 50},
      {"3d_input", false, 2, 3, 4, 8, false, 0, true, 50},
      {"interleaved", true, 2, 3, 4, 8, true, 0, true, 50},
      {"with_rotary_dim", true, 2, 3, 4, 8, false, 4, true, 50},
      {"with_interleaved_rotary_dim", true, 2, 3, 4, 8, true, 4, true, 50},
      {"no_position_ids", true, 2, 3, 4, 8, false, 0, false, 50},
      {"no_position_ids_interleaved", true, 2, 3, 4, 8, true, 0, false, 50},
      {"no_position_ids_rotary_dim", true, 2, 3, 4, 8, false, 4, false, 50},
      // engine-sized: Llama-3-8B heads, prefill and decode; Phi-style partial rotary
      {"llama3_prefill_bshd", false, 1, 32, 512, 128, false, 0, true, 8192},
      {"llama3_decode_bhsd", true, 4, 32, 1, 128, false, 0, true, 8192},
      {"partial_64_of_96_interleaved", false, 2, 8, 33, 96, true, 64, true, 4096},
  };
  return v;
}

TEST(Onnx, ReferenceF32) {
  std::uint64_t salt = 100;
  for (const Case& c : cases()) run_case<float>(c, ++salt);
}
TEST(Onnx, ReferenceF16) {
  std::uint64_t salt = 200;
  for (const Case& c : cases()) run_case<rotary::f16>(c, ++salt);
}
TEST(Onnx, ReferenceBf16) {
  std::uint64_t salt = 300;
  for (const Case& c : cases()) run_case<rotary::bf16>(c, ++salt);
}

// The contrib op with position_ids of shape [1] equals the opset-23 op with ids start + s.
TEST(Onnx, ContribScalarStart) {
  std::mt19937_64 rng(rotary_test::seed() + 400);
  const std::int64_t b = 2, s = 5, h = 4, d = 16, max_pos = 64, start = 30;
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(b * s * h * d), rng);
  const std::vector<float> cos = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * d / 2), rng);
  const std::vector<float> sin = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * d / 2), rng);
  RotaryEmbeddingAttrs attrs;
  attrs.num_heads = h;
  attrs.interleaved = true;
  for (const bool four_d : {false, true}) {
    const std::vector<std::int64_t> shape = four_d ? std::vector<std::int64_t>{b, h, s, d}
                                                   : std::vector<std::int64_t>{b, s, h * d};
    if (four_d) attrs.num_heads = 0;
    std::vector<std::int64_t> ids;
    for (std::int64_t bb = 0; bb < b; ++bb)
      for (std::int64_t ss = 0; ss < s; ++ss) ids.push_back(start + ss);
    std::vector<float> want(x.size());
    rotary::onnx::rotary_embedding(x.data(), shape, cos.data(), sin.data(), {max_pos, d / 2}, ids.data(),
                                   want.data(), attrs);
    std::vector<float> got(x.size());
    const std::int64_t start_id = start;
    rotary::onnx::contrib::rotary_embedding(x.data(), shape, &start_id, {1}, cos.data(), sin.data(),
                                            {max_pos, d / 2}, got.data(), attrs);
    EXPECT_TRUE(rotary_test::same_bits(got, want)) << (four_d ? "4-D" : "3-D");
    std::vector<float> got2(x.size());
    rotary::onnx::contrib::rotary_embedding(x.data(), shape, ids.data(), {b, s}, cos.data(), sin.data(),
                                            {max_pos, d / 2}, got2.data(), attrs);
    EXPECT_TRUE(rotary_test::same_bits(got2, want)) << (four_d ? "4-D" : "3-D") << " [B, S] ids";
  }
}

TEST(Onnx, Refusals) {
  std::vector<float> x(2 * 3 * 4 * 8 + 1);  // + 1: room for the overlapping output below
  std::vector<float> out(x.size());
  std::vector<float> cache(50 * 4);
  std::vector<std::int64_t> ids(2 * 4, 1);
  RotaryEmbeddingAttrs a;
  const auto call = [&](const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& cache_shape,
                        const std::int64_t* p, const RotaryEmbeddingAttrs& at) {
    rotary::onnx::rotary_embedding(x.data(), shape, cache.data(), cache.data(), cache_shape, p, out.data(), at);
  };
  using rotary_test::expect_error;
  expect_error([&] { call({2, 4, 24}, {50, 4}, ids.data(), a); }, {"3-D input [2, 4, 24] needs num_heads > 0"});
  RotaryEmbeddingAttrs five = a;
  five.num_heads = 5;
  expect_error([&] { call({2, 4, 24}, {50, 4}, ids.data(), five); }, {"hidden size 24", "num_heads (5)"});
  expect_error([&] { call({2, 3, 4, 8}, {50, 4}, ids.data(), five); }, {"num_heads (5) disagrees"});
  expect_error([&] { call({2, 3, 32}, {50, 4}, ids.data(), a); }, {"3-D input"});
  expect_error([&] { call({48, 4}, {50, 4}, ids.data(), a); }, {"must be 3-D", "or 4-D"});
  RotaryEmbeddingAttrs odd = a;
  odd.rotary_embedding_dim = 5;
  expect_error([&] { call({2, 3, 4, 8}, {50, 4}, ids.data(), odd); }, {"rotary_embedding_dim (5)"});
  RotaryEmbeddingAttrs big = a;
  big.rotary_embedding_dim = 10;
  expect_error([&] { call({2, 3, 4, 8}, {50, 5}, ids.data(), big); }, {"<= head_size (8)"});
  expect_error([&] { call({2, 3, 4, 8}, {50, 3}, ids.data(), a); }, {"rows of 3 values", "needs 4"});
  expect_error([&] { call({2, 3, 4, 8}, {50, 4}, nullptr, a); }, {"must be 3-D [batch, seq, rotary_dim / 2]"});
  expect_error([&] { call({2, 3, 4, 8}, {2, 5, 4}, nullptr, a); }, {"[batch, seq, rotary_dim / 2] = [2, 4, 4]"});
  expect_error([&] { call({2, 3, 4, 8}, {2, 4, 4}, ids.data(), a); }, {"must be 2-D"});
  ids[5] = 50;
  expect_error([&] { call({2, 3, 4, 8}, {50, 4}, ids.data(), a); }, {"positions[1] (50)", "outside the table [0, 50)"});
  ids[5] = -1;
  expect_error([&] { call({2, 3, 4, 8}, {50, 4}, ids.data(), a); }, {"positions[1] (-1) must be >= 0"});
  ids[5] = 1;
  expect_error([&] { call({2, -3, 4, 8}, {50, 4}, ids.data(), a); }, {"negative dimension"});
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max() / 2;
  expect_error([&] { call({huge, 3, 4, 8}, {50, 4}, ids.data(), a); }, {"overflows int64"});
  expect_error(
      [&] {
        rotary::onnx::rotary_embedding<float>(x.data(), {2, 3, 4, 8}, nullptr, cache.data(), {50, 4}, ids.data(),
                                              out.data(), a);
      },
      {"null cos_cache or sin_cache"});
  expect_error(
      [&] {
        rotary::onnx::contrib::rotary_embedding(x.data(), {2, 3, 4, 8}, ids.data(), {2, 3}, cache.data(),
                                                cache.data(), {50, 4}, out.data(), a);
      },
      {"position_ids [2, 3] must be [1] or [2, 4]"});
  // partial overlap of input and output (not the same buffer) is refused by the driver
  expect_error(
      [&] {
        rotary::onnx::rotary_embedding(x.data(), {2, 3, 4, 8}, cache.data(), cache.data(), {50, 4}, ids.data(),
                                       x.data() + 1, a);
      },
      {"overlap"});
}

}  // namespace
