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
#include <cstring>
#include <functional>
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

// The contrib op with position_ids of shape [1] or [] equals the opset-23 op with ids start + s.
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
    std::vector<float> got3(x.size());  // ONNX Runtime also takes the start as a scalar (shape [])
    rotary::onnx::contrib::rotary_embedding(x.data(), shape, &start_id, {}, cos.data(), sin.data(),
                                            {max_pos, d / 2}, got3.data(), attrs);
    EXPECT_TRUE(rotary_test::same_bits(got3, want)) << (four_d ? "4-D" : "3-D") << " scalar start";
  }
}

// ONNX Runtime's contrib op reads num_heads 0 with 3-D input (the attribute's default) as head_size =
// twice the cache width; a 4-D input's num_heads attribute is not read by either op (its shape says
// it). Each form equals the call with the attribute spelled out, bit for bit; what ORT itself refuses
// or gets wrong stays refused.
TEST(Onnx, NumHeadsDefaults) {
  std::mt19937_64 rng(rotary_test::seed() + 450);
  const std::int64_t b = 2, s = 3, h = 4, d = 16, max_pos = 20;
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(b * s * h * d), rng);
  const std::vector<float> cos = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * d / 2), rng);
  const std::vector<float> sin = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * d / 2), rng);
  const std::vector<std::int64_t> ids = {3, 0, 19, 7, 7, 1};
  const auto contrib = [&](const std::vector<std::int64_t>& shape, const RotaryEmbeddingAttrs& a) {
    std::vector<float> out(x.size());
    rotary::onnx::contrib::rotary_embedding(x.data(), shape, ids.data(), {b, s}, cos.data(), sin.data(),
                                            {max_pos, d / 2}, out.data(), a);
    return out;
  };
  const auto opset = [&](const std::vector<std::int64_t>& shape, const RotaryEmbeddingAttrs& a) {
    std::vector<float> out(x.size());
    rotary::onnx::rotary_embedding(x.data(), shape, cos.data(), sin.data(), {max_pos, d / 2}, ids.data(),
                                   out.data(), a);
    return out;
  };
  for (const bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "half_split");
    const RotaryEmbeddingAttrs given{interleaved, 0, h};
    const RotaryEmbeddingAttrs none{interleaved, 0, 0};
    const std::vector<float> want3 = contrib({b, s, h * d}, given);
    EXPECT_FALSE(rotary_test::same_bits(want3, x));
    EXPECT_TRUE(rotary_test::same_bits(contrib({b, s, h * d}, none), want3)) << "contrib 3-D, num_heads 0";
    const std::vector<float> want4 = opset({b, h, s, d}, none);
    for (const std::int64_t wrong : {std::int64_t{1}, std::int64_t{3}, std::int64_t{5}, std::int64_t{-2}}) {
      const RotaryEmbeddingAttrs stray{interleaved, 0, wrong};
      EXPECT_TRUE(rotary_test::same_bits(opset({b, h, s, d}, stray), want4)) << "opset 4-D, num_heads " << wrong;
      EXPECT_TRUE(rotary_test::same_bits(contrib({b, h, s, d}, stray), want4)) << "contrib 4-D, num_heads " << wrong;
    }
  }
  using rotary_test::expect_error;
  std::vector<float> out(x.size());
  // The opset-23 op has no such default: the spec requires num_heads for 3-D input.
  expect_error([&] { opset({b, s, h * d}, RotaryEmbeddingAttrs{}); }, {"needs num_heads > 0"});
  // ORT refuses num_heads 0 with a rotary_embedding_dim, and so do we.
  expect_error([&] { contrib({b, s, h * d}, RotaryEmbeddingAttrs{false, 8, 0}); },
               {"onnx::contrib::rotary_embedding: 3-D input [2, 3, 64] with rotary_embedding_dim 8 needs num_heads > 0"});
  // A hidden size that is not a multiple of twice the cache width: ORT would leave its tail unwritten.
  expect_error(
      [&] {
        rotary::onnx::contrib::rotary_embedding(x.data(), {b, s, h * d - 8}, ids.data(), {b, s}, cos.data(),
                                                sin.data(), {max_pos, d / 2}, out.data(),
                                                RotaryEmbeddingAttrs{});
      },
      {"head_size = 2 * 8", "hidden size 56 is not a positive multiple of that"});
  expect_error([&] {
    rotary::onnx::contrib::rotary_embedding(x.data(), {b, s, h * d}, ids.data(), {b, s}, cos.data(), sin.data(),
                                            {max_pos, 0}, out.data(), RotaryEmbeddingAttrs{});
  }, {"twice the cos/sin cache width"});
  // a cache width whose double overflows int64 ([1, 2^62] passes the element count): refused, no UB
  expect_error(
      [&] {
        rotary::onnx::contrib::rotary_embedding(x.data(), {b, s, h * d}, ids.data(), {b, s}, cos.data(),
                                                sin.data(), {1, std::int64_t{1} << 62}, out.data(),
                                                RotaryEmbeddingAttrs{});
      },
      {"head_size = 2 * 4611686018427387904"});
}

// More tokens than cache rows: ORT refuses the call, but every position here is inside the cache, so the
// rotation is defined and rotary serves it (each token equals its own one-token call).
TEST(Onnx, MoreTokensThanCacheRows) {
  std::mt19937_64 rng(rotary_test::seed() + 460);
  const std::int64_t b = 1, s = 9, h = 2, d = 8, max_pos = 4;
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(b * s * h * d), rng);
  const std::vector<float> cos = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * d / 2), rng);
  const std::vector<float> sin = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * d / 2), rng);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(s));
  for (std::int64_t t = 0; t < s; ++t) ids[static_cast<std::size_t>(t)] = (t * 3) % max_pos;
  std::vector<float> out(x.size());
  rotary::onnx::contrib::rotary_embedding(x.data(), {b, s, h * d}, ids.data(), {b, s}, cos.data(), sin.data(),
                                          {max_pos, d / 2}, out.data(), RotaryEmbeddingAttrs{false, 0, h});
  for (std::int64_t t = 0; t < s; ++t) {
    std::vector<float> one(static_cast<std::size_t>(h * d));
    const float* xt = x.data() + t * h * d;
    rotary::onnx::contrib::rotary_embedding(xt, {1, 1, h * d}, &ids[static_cast<std::size_t>(t)], {1, 1},
                                            cos.data(), sin.data(), {max_pos, d / 2}, one.data(),
                                            RotaryEmbeddingAttrs{false, 0, h});
    EXPECT_EQ(std::memcmp(one.data(), out.data() + t * h * d, one.size() * sizeof(float)), 0) << "token " << t;
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
  // an empty tensor whose other dimensions overflow int64 (their products are strides): refused before
  // any is formed; an empty one that fits does nothing, 0 heads as 0 tokens
  RotaryEmbeddingAttrs one_head = a;
  one_head.num_heads = 1;
  expect_error(
      [&] {
        call({0, std::int64_t{1} << 62, 8}, {50, 4}, ids.data(), one_head);
      },
      {"overflows int64"});
  expect_error([&] { call({0, 1, std::int64_t{1} << 62, 8}, {50, 4}, ids.data(), a); }, {"overflows int64"});
  EXPECT_NO_THROW(call({2, 0, 3, 8}, {50, 4}, ids.data(), a));
  EXPECT_NO_THROW(call({2, 0, 3, 8}, {2, 3, 4}, nullptr, a));
  RotaryEmbeddingAttrs five = a;
  five.num_heads = 5;
  expect_error([&] { call({2, 4, 24}, {50, 4}, ids.data(), five); }, {"hidden size 24", "num_heads (5)"});
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
  ids[5] = 50;  // batch 1, token 1
  expect_error([&] { call({2, 3, 4, 8}, {50, 4}, ids.data(), a); },
               {"position_ids[1][1] (50) is outside the cos/sin cache of 50 rows [0, 50)"});
  ids[5] = -1;
  expect_error([&] { call({2, 3, 4, 8}, {50, 4}, ids.data(), a); }, {"position_ids[1][1] (-1) is outside"});
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
      {"position_ids [2, 3] must be [1] or [2, 4] (or a scalar, shape [])"});
  // caches no buffer can hold (2^59 rows x 4 f32 values: 2^63 bytes), refused naming them
  const std::int64_t rows = std::int64_t{1} << 59;
  expect_error([&] { call({2, 3, 4, 8}, {rows, 4}, ids.data(), a); },
               {"onnx::rotary_embedding: cos_cache and sin_cache: 576460752303423488 rows of 4 values",
                "span more than PTRDIFF_MAX bytes"});
  expect_error(
      [&] {
        rotary::onnx::contrib::rotary_embedding(x.data(), {2, 3, 4, 8}, ids.data(), {1}, cache.data(),
                                                cache.data(), {rows, 4}, out.data(), a);
      },
      {"onnx::contrib::rotary_embedding: cos_cache and sin_cache", "PTRDIFF_MAX"});
  // partial overlap of input and output (not the same buffer) is refused by the driver
  expect_error(
      [&] {
        rotary::onnx::rotary_embedding(x.data(), {2, 3, 4, 8}, cache.data(), cache.data(), {50, 4}, ids.data(),
                                       x.data() + 1, a);
      },
      {"overlap"});
}


// The front ends rotate one batch per call and each call checks only its own batch, so the whole
// tensors are checked first. An output shifted from the input by whole batches (each batch would read
// input that the previous batch's output overwrote) is refused before anything is written, for the
// opset-23 op with and without position_ids and the contrib op, 3-D and 4-D; in place, and outputs
// that end where the input starts or start where it ends, give the out-of-place bits.
TEST(Onnx, OutputShiftedByWholeBatches) {
  const std::int64_t b = 3, s = 2, h = 2, d = 4, max_pos = 8, half = d / 2;
  const std::int64_t n = b * s * h * d, batch = s * h * d;
  std::mt19937_64 rng(rotary_test::seed() + 500);
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(n), rng);
  const std::vector<float> cos = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * half), rng);
  const std::vector<float> sin = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * half), rng);
  const std::vector<std::int64_t> ids =
      rotary_test::random_positions(static_cast<std::size_t>(b * s), max_pos - 1, rng);
  const std::int64_t start = 3;
  using Op = std::function<void(const float*, float*)>;
  for (const bool four_d : {false, true}) {
    const std::vector<std::int64_t> shape = four_d ? std::vector<std::int64_t>{b, h, s, d}
                                                   : std::vector<std::int64_t>{b, s, h * d};
    RotaryEmbeddingAttrs a;
    a.num_heads = four_d ? 0 : h;
    const std::vector<std::tuple<const char*, Op>> ops = {
        {"onnx::rotary_embedding",
         [&](const float* in, float* out) {
           rotary::onnx::rotary_embedding(in, shape, cos.data(), sin.data(), {max_pos, half}, ids.data(), out, a);
         }},
        {"onnx::rotary_embedding",  // no position_ids: cos/sin [B, S, r/2], one row per (batch, token)
         [&](const float* in, float* out) {
           rotary::onnx::rotary_embedding(in, shape, cos.data(), sin.data(), {b, s, half}, nullptr, out, a);
         }},
        {"onnx::contrib::rotary_embedding",
         [&](const float* in, float* out) {
           rotary::onnx::contrib::rotary_embedding(in, shape, &start, {1}, cos.data(), sin.data(), {max_pos, half},
                                                   out, a);
         }},
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const char* op = std::get<0>(ops[i]);
      const Op& run = std::get<1>(ops[i]);
      SCOPED_TRACE(std::string(op) + (four_d ? " 4-D" : " 3-D") + " op " + std::to_string(i));
      std::vector<float> want(x.size());
      run(x.data(), want.data());
      // buf = [n spare | input | n spare]: the output may start anywhere in it
      std::vector<float> buf(static_cast<std::size_t>(3 * n));
      std::copy(x.begin(), x.end(), buf.begin() + n);
      const std::vector<float> before = buf;
      for (const std::int64_t shift : {batch, 2 * batch, -batch, -2 * batch, n - 1, 1 - n}) {
        rotary_test::expect_error([&] { run(buf.data() + n, buf.data() + n + shift); },
                                  {op, ": input and output overlap"});
        EXPECT_TRUE(rotary_test::same_bits(buf, before)) << "written before the refusal, shift " << shift;
      }
      for (const std::int64_t shift : {std::int64_t{0}, n, -n}) {  // in place; adjacent, apart
        std::vector<float> v = before;
        run(v.data() + n, v.data() + n + shift);
        const auto out = v.begin() + n + shift;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), out,
                               [](float p, float q) { return rotary_test::same_bits(p, q); }))
            << "shift " << shift;
      }
    }
  }
}

// Every batch reads cos_cache and sin_cache: an output that shares memory with either is refused
// before anything is written (the tables would be overwritten while being read); caches next to the
// output, not in it, are accepted.
TEST(Onnx, OutputOverlapsCaches) {
  const std::int64_t b = 2, s = 2, h = 2, d = 4, max_pos = 8, half = d / 2;
  const std::int64_t n = b * s * h * d, table = max_pos * half;  // 32 and 16
  std::mt19937_64 rng(rotary_test::seed() + 600);
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(n), rng);
  const std::vector<std::int64_t> ids =
      rotary_test::random_positions(static_cast<std::size_t>(b * s), max_pos - 1, rng);
  const std::int64_t start = 1;
  RotaryEmbeddingAttrs a;
  a.num_heads = h;
  const std::vector<std::int64_t> shape{b, s, h * d};
  // buf = [output (n) | n more]; the caches are placed in it
  std::vector<float> buf = rotary_test::random_vector<float>(static_cast<std::size_t>(2 * n), rng, -1.0, 1.0);
  const std::vector<float> before = buf;
  float* out = buf.data();
  using rotary_test::expect_error;
  struct Placement {
    std::int64_t cos, sin;  // offsets into buf
    const char* hit;        // the first cache the output overlaps
  };
  for (const Placement& p : {Placement{0, 16, "cos_cache"},            // the audit's case
                             Placement{n, n - 4, "sin_cache"},         // sin's first row in the last head
                             Placement{n - 1, n + table, "cos_cache"},  // one element shared
                             Placement{2, 2, "cos_cache"}}) {          // one table for both
    SCOPED_TRACE(std::string("cos at ") + std::to_string(p.cos) + ", sin at " + std::to_string(p.sin));
    const float* c = buf.data() + p.cos;
    const float* sn = buf.data() + p.sin;
    const std::string hit = std::string("output overlaps ") + p.hit;
    expect_error([&] { rotary::onnx::rotary_embedding(x.data(), shape, c, sn, {max_pos, half}, ids.data(), out, a); },
                 {"onnx::rotary_embedding: ", hit.c_str(), "must not share memory with cos_cache or sin_cache"});
    expect_error([&] { rotary::onnx::rotary_embedding(x.data(), shape, c, sn, {b, s, half}, nullptr, out, a); },
                 {"onnx::rotary_embedding: ", hit.c_str()});
    expect_error(
        [&] {
          rotary::onnx::contrib::rotary_embedding(x.data(), shape, &start, {1}, c, sn, {max_pos, half}, out, a);
        },
        {"onnx::contrib::rotary_embedding: ", hit.c_str()});
    EXPECT_TRUE(rotary_test::same_bits(buf, before)) << "written before the refusal";
  }
  // [x | cos | sin] in one buffer, rotated in place: the caches touch the output but do not overlap it.
  std::vector<float> packed(x);
  packed.insert(packed.end(), before.begin(), before.begin() + 2 * table);
  std::vector<float> want(x.size());
  rotary::onnx::rotary_embedding(x.data(), shape, packed.data() + n, packed.data() + n + table, {max_pos, half},
                                 ids.data(), want.data(), a);
  rotary::onnx::rotary_embedding(packed.data(), shape, packed.data() + n, packed.data() + n + table,
                                 {max_pos, half}, ids.data(), packed.data(), a);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), packed.begin(),
                         [](float p, float q) { return rotary_test::same_bits(p, q); }));
}

// Random x (n values) and cos/sin tables (m values each) for the refusal tests below.
struct SmallCase {
  SmallCase(std::int64_t n, std::int64_t m, int seed) {
    std::mt19937_64 rng(rotary_test::seed() + static_cast<std::uint64_t>(seed));
    x = rotary_test::random_vector<float>(static_cast<std::size_t>(n), rng);
    cos = rotary_test::random_vector<float>(static_cast<std::size_t>(m), rng);
    sin = rotary_test::random_vector<float>(static_cast<std::size_t>(m), rng);
  }
  std::vector<float> x, cos, sin;
};

// position_ids are checked over the whole call before any batch is written. The front ends rotate one
// batch per call: a bad id in the last batch must throw before the first batch is written (in place,
// that would destroy the input) and be named by its entry of position_ids, not by its index within its
// batch ("positions[1]" for position_ids[1][1]). For the opset-23 op and the contrib op with [B, S]
// ids, 3-D and 4-D, in place and out of place: the call throws, names the entry of position_ids and
// the cache size, and changes no buffer.
TEST(Onnx, BadPositionIdInLastBatchWritesNothing) {
  const std::int64_t b = 2, s = 2, h = 2, d = 4, max_pos = 3, half = d / 2;
  const SmallCase c(b * s * h * d, max_pos * half, 700);
  const std::vector<float>& x = c.x;
  const std::vector<float>& cos = c.cos;
  const std::vector<float>& sin = c.sin;
  const std::vector<float> x_before = x;
  using rotary_test::expect_error;
  using rotary_test::same_bits;
  struct Bad {
    std::size_t at;  // row-major index into position_ids [2, 2]
    std::int64_t value;
    const char* message;
  };
  for (const Bad& bad : {Bad{3, 99, "position_ids[1][1] (99) is outside the cos/sin cache of 3 rows [0, 3)"},
                         Bad{3, -1, "position_ids[1][1] (-1) is outside the cos/sin cache of 3 rows [0, 3)"},
                         Bad{2, 3, "position_ids[1][0] (3) is outside the cos/sin cache of 3 rows [0, 3)"}}) {
    std::vector<std::int64_t> ids{1, 1, 1, 1};  // the audit's {1, 1, 1, 99}, and others
    ids[bad.at] = bad.value;
    const std::vector<std::int64_t> ids_before = ids;
    for (const bool four_d : {false, true}) {
      const std::vector<std::int64_t> shape = four_d ? std::vector<std::int64_t>{b, h, s, d}
                                                     : std::vector<std::int64_t>{b, s, h * d};
      RotaryEmbeddingAttrs a;
      a.num_heads = four_d ? 0 : h;
      for (const bool contrib : {false, true}) {
        SCOPED_TRACE(std::string(contrib ? "contrib" : "opset 23") + (four_d ? " 4-D " : " 3-D ") + bad.message);
        const char* op = contrib ? "onnx::contrib::rotary_embedding: " : "onnx::rotary_embedding: ";
        const auto run = [&](const float* in, float* out) {
          if (contrib)
            rotary::onnx::contrib::rotary_embedding(in, shape, ids.data(), {b, s}, cos.data(), sin.data(),
                                                    {max_pos, half}, out, a);
          else
            rotary::onnx::rotary_embedding(in, shape, cos.data(), sin.data(), {max_pos, half}, ids.data(), out, a);
        };
        std::vector<float> v = x;
        expect_error([&] { run(v.data(), v.data()); }, {op, bad.message});
        EXPECT_TRUE(same_bits(v, x_before)) << "in place: the input was written before the refusal";
        std::vector<float> out(x.size(), -7.0f);
        const std::vector<float> out_before = out;
        expect_error([&] { run(x.data(), out.data()); }, {op, bad.message});
        EXPECT_TRUE(same_bits(out, out_before)) << "out of place: the output was written before the refusal";
        EXPECT_TRUE(same_bits(x, x_before));
        EXPECT_EQ(ids, ids_before);
      }
    }
  }
}

// The contrib op's start form (position_ids [1], or a scalar []): token t of every batch at start + t.
// A start that puts any token outside the cache is refused before anything is written, naming
// position_ids[0], the first token outside and the cache size; a start near INT64_MAX (start + t
// overflows) is outside at token 0, never wrapped.
TEST(Onnx, ContribStartOutsideCacheWritesNothing) {
  const std::int64_t b = 2, s = 2, h = 2, d = 4, max_pos = 3, half = d / 2;
  const SmallCase c(b * s * h * d, max_pos * half, 800);
  const std::vector<float>& x = c.x;
  const std::vector<float>& cos = c.cos;
  const std::vector<float>& sin = c.sin;
  const std::vector<float> x_before = x;
  using rotary_test::expect_error;
  using rotary_test::same_bits;
  const std::int64_t top = std::numeric_limits<std::int64_t>::max();
  struct Bad {
    std::int64_t start;
    std::string message;
  };
  const std::vector<Bad> bads{
      {2, "position_ids[0] (start 2) puts token 1 at position 3, outside the cos/sin cache of 3 rows [0, 3)"},
      {3, "position_ids[0] (start 3) puts token 0 at position 3, outside the cos/sin cache of 3 rows [0, 3)"},
      {-1, "position_ids[0] (start -1) puts token 0 at position -1, outside the cos/sin cache of 3 rows [0, 3)"},
      {top, "position_ids[0] (start " + std::to_string(top) + ") puts token 0 at position " + std::to_string(top) +
                ", outside the cos/sin cache of 3 rows [0, 3)"}};
  for (const Bad& bad : bads) {
    const std::int64_t start = bad.start;
    for (const bool four_d : {false, true}) {
      const std::vector<std::int64_t> shape = four_d ? std::vector<std::int64_t>{b, h, s, d}
                                                     : std::vector<std::int64_t>{b, s, h * d};
      RotaryEmbeddingAttrs a;
      a.num_heads = four_d ? 0 : h;
      for (const bool scalar : {false, true}) {
        SCOPED_TRACE(std::string(scalar ? "[]" : "[1]") + (four_d ? " 4-D " : " 3-D ") + bad.message);
        const std::vector<std::int64_t> ids_shape = scalar ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{1};
        const auto run = [&](const float* in, float* out) {
          rotary::onnx::contrib::rotary_embedding(in, shape, &start, ids_shape, cos.data(), sin.data(),
                                                  {max_pos, half}, out, a);
        };
        std::vector<float> v = x;
        expect_error([&] { run(v.data(), v.data()); }, {"onnx::contrib::rotary_embedding: ", bad.message.c_str()});
        EXPECT_TRUE(same_bits(v, x_before)) << "in place: the input was written before the refusal";
        std::vector<float> out(x.size(), -7.0f);
        const std::vector<float> out_before = out;
        expect_error([&] { run(x.data(), out.data()); }, {"onnx::contrib::rotary_embedding: ", bad.message.c_str()});
        EXPECT_TRUE(same_bits(out, out_before)) << "out of place: the output was written before the refusal";
        EXPECT_TRUE(same_bits(x, x_before));
        EXPECT_EQ(start, bad.start);
      }
    }
  }
  // The last start that fits: tokens at 1 and 2.
  const std::int64_t fits = max_pos - s;
  std::vector<float> out(x.size());
  rotary::onnx::contrib::rotary_embedding(x.data(), {b, s, h * d}, &fits, {1}, cos.data(), sin.data(),
                                          {max_pos, half}, out.data(), RotaryEmbeddingAttrs{false, 0, h});
  EXPECT_FALSE(same_bits(out, x));
}

// position_ids are read by every batch while output is written: an output that shares memory with them
// (the ids would be overwritten while still needed) is refused before anything is written, for the
// opset-23 op and the contrib op ([B, S] ids and the [1] start), out of place and in place. An output
// next to the ids, not on them, is accepted and gives the usual bits.
TEST(Onnx, OutputOverlapsPositionIds) {
  const std::int64_t b = 2, s = 2, h = 2, d = 4, max_pos = 8, half = d / 2;
  const std::int64_t n = b * s * h * d;  // 32 floats: 16 int64 slots
  const auto slots = static_cast<std::int64_t>(static_cast<std::size_t>(n) * sizeof(float) / sizeof(std::int64_t));
  std::mt19937_64 rng(rotary_test::seed() + 900);
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(n), rng);
  const std::vector<float> cos = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * half), rng);
  const std::vector<float> sin = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * half), rng);
  const std::vector<std::int64_t> ids =
      rotary_test::random_positions(static_cast<std::size_t>(b * s), max_pos - 1, rng);
  const std::vector<std::int64_t> start{5};
  const std::vector<std::int64_t> shape{b, s, h * d};
  RotaryEmbeddingAttrs a;
  a.num_heads = h;
  using rotary_test::expect_error;
  using rotary_test::same_bits;
  struct Op {
    const char* name;
    const std::vector<std::int64_t>* values;  // what the caller's position_ids hold
    int form;                                 // 0: opset 23 [B, S]; 1: contrib [B, S]; 2: contrib [1]
  };
  for (const Op& op : {Op{"onnx::rotary_embedding: ", &ids, 0}, Op{"onnx::contrib::rotary_embedding: ", &ids, 1},
                       Op{"onnx::contrib::rotary_embedding: ", &start, 2}}) {
    const auto count = static_cast<std::int64_t>(op.values->size());
    SCOPED_TRACE(std::string(op.name) + "form " + std::to_string(op.form));
    const auto run = [&](const std::int64_t* p, const float* in, float* out) {
      if (op.form == 0)
        rotary::onnx::rotary_embedding(in, shape, cos.data(), sin.data(), {max_pos, half}, p, out, a);
      else
        rotary::onnx::contrib::rotary_embedding(in, shape, p, op.form == 1 ? std::vector<std::int64_t>{b, s}
                                                                           : std::vector<std::int64_t>{1},
                                                cos.data(), sin.data(), {max_pos, half}, out, a);
    };
    std::vector<float> want(x.size());
    run(op.values->data(), x.data(), want.data());
    struct Placement {
      std::int64_t ids, out;  // in int64 slots of mem
      std::string message;    // "" : apart, accepted
    };
    std::vector<Placement> places{
        {0, 0, "output element 0 (in memory order) overlaps position_ids element 0"},
        {1, 0, "output element 2 (in memory order) overlaps position_ids element 0"},
        {slots + 1, 2, "output element 30 (in memory order) overlaps position_ids element 0"},  // last 2 floats
        {0, count, ""},  // the output starts where the ids end
        {slots, 0, ""}};  // the ids start where the output ends
    if (count > 1) places.push_back({0, 3, "output element 0 (in memory order) overlaps position_ids element 3"});
    for (const Placement& p : places) {
      SCOPED_TRACE("ids at slot " + std::to_string(p.ids) + ", output at slot " + std::to_string(p.out));
      // int64 storage holding the ids, with the float output laid over it
      std::vector<std::int64_t> mem(static_cast<std::size_t>(2 * slots + count + 4), 0x5a5a5a5a5a5a5a5a);
      std::copy(op.values->begin(), op.values->end(), mem.begin() + p.ids);
      const std::int64_t* pid = mem.data() + p.ids;
      // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
      auto* out = reinterpret_cast<float*>(mem.data() + p.out);
      const std::vector<std::int64_t> before = mem;
      if (!p.message.empty()) {
        const std::string full = std::string(op.name) + "output and position_ids share memory: " + p.message;
        expect_error([&] { run(pid, x.data(), out); }, {full.c_str(), "must not share memory with position_ids"});
        EXPECT_EQ(mem, before) << "out of place: written before the refusal";
        // In place: x copied over the output region (and so over the ids it covers), rotated in place.
        std::vector<std::int64_t> in_place = before;
        // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
        auto* xo = reinterpret_cast<float*>(in_place.data() + p.out);
        std::memcpy(xo, x.data(), x.size() * sizeof(float));
        const std::int64_t* pid2 = in_place.data() + p.ids;
        const std::vector<std::int64_t> in_place_before = in_place;
        expect_error([&] { run(pid2, xo, xo); }, {full.c_str()});
        EXPECT_EQ(in_place, in_place_before) << "in place: written before the refusal";
      } else {
        run(pid, x.data(), out);
        std::vector<float> got(x.size());
        std::memcpy(got.data(), out, got.size() * sizeof(float));
        EXPECT_TRUE(same_bits(got, want));
        EXPECT_TRUE(std::equal(op.values->begin(), op.values->end(), pid)) << "position_ids written";
      }
    }
  }
}

}  // namespace
