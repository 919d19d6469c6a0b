// rotary/compat/vllm.hpp and rotary/compat/flash_attn.hpp against independent references written
// here from each peer's documented semantics, in double:
// - vLLM (RotaryEmbedding.forward_native): cos, sin = cos_sin_cache[positions].chunk(2); the first
//   rot_dim coordinates of each head split into halves (is_neox) or even/odd (GPT-J);
//   o1 = x1 cos - x2 sin, o2 = x2 cos + x1 sin; query and (optional) key in place.
// - FlashAttention (apply_rotary_emb_torch): cos/sin (seqlen_ro, r/2) repeated to r; out = x cos +
//   rotate_half(x) sin on the first r coordinates, position s + seqlen_offsets[b]; conjugate negates
//   sin; positions at or past seqlen_ro are left unchanged (the Triton kernel's masking).
// Tolerance: 2 ulp of f32 on |c x1| + |s x2| plus half an ulp of the storage type. Shapes: vLLM's
// test_pos_encoding (heads 17, head_size 80/96/112/120/128/192/256, rotary_dim = head_size or 32,
// 7 tokens... here a representative subset) and engine shapes (Llama-3-8B 32/8 heads x 128);
// FlashAttention's test_rotary (batch 4, seqlen 217, nheads 3, headdim 128, rotary_fraction 0.5/1,
// seqlen_offsets 0 or per batch, varlen) in f32, f16, bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <rotary/compat/flash_attn.hpp>
#include <rotary/compat/vllm.hpp>

#include "support.hpp"

namespace {

// Checks out[...] = rotation of in[...] by (c, s) for one head: first r coordinates paired by
// `interleaved`, the rest bit-identical.
template <class T>
void check_head(const T* in, const T* out, std::int64_t head_dim, std::int64_t r, bool interleaved, const double* c,
                const double* s, double sign, const std::string& where) {
  const double ulp32 = std::ldexp(1.0, -23);
  const std::int64_t half = r / 2;
  for (std::int64_t j = 0; j < half; ++j) {
    const std::int64_t i1 = interleaved ? 2 * j : j;
    const std::int64_t i2 = interleaved ? 2 * j + 1 : j + half;
    const double x1 = rotary_test::to_d(in[i1]);
    const double x2 = rotary_test::to_d(in[i2]);
    const double sj = sign * s[j];
    const double o1 = x1 * c[j] - x2 * sj;
    const double o2 = x2 * c[j] + x1 * sj;
    for (const auto& [i, want, scale] : {std::tuple<std::int64_t, double, double>{i1, o1, std::abs(x1 * c[j]) + std::abs(x2 * sj)},
                                         {i2, o2, std::abs(x2 * c[j]) + std::abs(x1 * sj)}}) {
      const double got = rotary_test::to_d(out[i]);
      ASSERT_LE(std::abs(got - want), 2 * ulp32 * scale + rotary_test::ulp<T>(want) / 2) << where << " i " << i;
    }
  }
  for (std::int64_t i = r; i < head_dim; ++i) ASSERT_TRUE(rotary_test::same_bits(in[i], out[i])) << where << " tail " << i;
}

// ---- vLLM -----------------------------------------------------------------------------------------

struct VllmCase {
  std::int64_t tokens, heads, kv_heads, head_size, rot_dim;
  bool is_neox, with_key;
  std::int64_t max_position;
};

template <class T>
void run_vllm(const VllmCase& c, std::uint64_t salt) {
  std::mt19937_64 rng(rotary_test::seed() + salt);
  const std::vector<T> cache = rotary_test::random_vector<T>(static_cast<std::size_t>(c.max_position * c.rot_dim), rng, -1, 1);
  const std::vector<std::int64_t> pos =
      rotary_test::random_positions(static_cast<std::size_t>(c.tokens), c.max_position - 1, rng);
  const std::vector<T> q = rotary_test::random_vector<T>(static_cast<std::size_t>(c.tokens * c.heads * c.head_size), rng);
  const std::vector<T> k = rotary_test::random_vector<T>(static_cast<std::size_t>(c.tokens * c.kv_heads * c.head_size), rng);
  std::vector<T> q2 = q;
  std::vector<T> k2 = k;
  rotary::vllm::rotary_embedding(pos.data(), c.tokens, q2.data(), c.heads, c.with_key ? k2.data() : nullptr, c.kv_heads,
                                 c.head_size, cache.data(), c.max_position, c.rot_dim, c.is_neox);
  const std::int64_t half = c.rot_dim / 2;
  std::vector<double> cs(static_cast<std::size_t>(half));
  std::vector<double> sn(static_cast<std::size_t>(half));
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    const std::int64_t row = pos[static_cast<std::size_t>(t)] * c.rot_dim;
    for (std::int64_t j = 0; j < half; ++j) {
      cs[static_cast<std::size_t>(j)] = rotary_test::to_d(cache[static_cast<std::size_t>(row + j)]);
      sn[static_cast<std::size_t>(j)] = rotary_test::to_d(cache[static_cast<std::size_t>(row + half + j)]);
    }
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const std::size_t o = static_cast<std::size_t>((t * c.heads + h) * c.head_size);
      check_head(q.data() + o, q2.data() + o, c.head_size, c.rot_dim, !c.is_neox, cs.data(), sn.data(), 1.0,
                 "q t " + std::to_string(t) + " h " + std::to_string(h));
    }
    for (std::int64_t h = 0; h < c.kv_heads; ++h) {
      const std::size_t o = static_cast<std::size_t>((t * c.kv_heads + h) * c.head_size);
      if (c.with_key)
        check_head(k.data() + o, k2.data() + o, c.head_size, c.rot_dim, !c.is_neox, cs.data(), sn.data(), 1.0,
                   "k t " + std::to_string(t) + " h " + std::to_string(h));
    }
  }
  if (!c.with_key) {
    EXPECT_TRUE(rotary_test::same_bits(k, k2)) << "no key: untouched";
  }
}

const std::vector<VllmCase> kVllm{
    {7, 17, 17, 80, 80, true, true, 8192},     {7, 17, 17, 96, 32, false, true, 8192},
    {7, 17, 17, 120, 120, false, false, 8192}, {7, 17, 17, 256, 32, true, true, 8192},
    {512, 32, 8, 128, 128, true, true, 8192},  {1, 32, 8, 128, 128, false, true, 131072},
};

TEST(Vllm, ReferenceF32) {
  std::uint64_t salt = 500;
  for (const VllmCase& c : kVllm) run_vllm<float>(c, ++salt);
}
TEST(Vllm, ReferenceF16) {
  std::uint64_t salt = 600;
  for (const VllmCase& c : kVllm) run_vllm<rotary::f16>(c, ++salt);
}
TEST(Vllm, ReferenceBf16) {
  std::uint64_t salt = 700;
  for (const VllmCase& c : kVllm) run_vllm<rotary::bf16>(c, ++salt);
}

// The strided form on a fused QKV buffer [T, (Hq + 2 Hkv) * D]: q and k rotated in place, v untouched,
// the same bits as the dense form on separate buffers.
TEST(Vllm, StridedFusedQkv) {
  std::mt19937_64 rng(rotary_test::seed() + 800);
  const std::int64_t t = 9, hq = 4, hkv = 2, d = 64, max_pos = 100;
  const std::vector<float> cache = rotary_test::random_vector<float>(static_cast<std::size_t>(max_pos * d), rng, -1, 1);
  const std::vector<std::int64_t> pos = rotary_test::random_positions(static_cast<std::size_t>(t), max_pos - 1, rng);
  const std::int64_t row = (hq + 2 * hkv) * d;
  const std::vector<float> qkv = rotary_test::random_vector<float>(static_cast<std::size_t>(t * row), rng);
  std::vector<float> fused = qkv;
  rotary::vllm::rotary_embedding_strided(pos.data(), t, fused.data(), hq, row, d, fused.data() + hq * d, hkv, row, d, d,
                                         cache.data(), max_pos, d, true);
  std::vector<float> q, k;
  for (std::int64_t i = 0; i < t; ++i) {
    q.insert(q.end(), qkv.begin() + i * row, qkv.begin() + i * row + hq * d);
    k.insert(k.end(), qkv.begin() + i * row + hq * d, qkv.begin() + i * row + (hq + hkv) * d);
  }
  rotary::vllm::rotary_embedding(pos.data(), t, q.data(), hq, k.data(), hkv, d, cache.data(), max_pos, d, true);
  for (std::int64_t i = 0; i < t; ++i) {
    const auto at = [&](std::int64_t off) { return fused.begin() + i * row + off; };
    EXPECT_TRUE(std::equal(q.begin() + i * hq * d, q.begin() + (i + 1) * hq * d, at(0)));
    EXPECT_TRUE(std::equal(k.begin() + i * hkv * d, k.begin() + (i + 1) * hkv * d, at(hq * d)));
    EXPECT_TRUE(std::equal(at((hq + hkv) * d), at(row), qkv.begin() + i * row + (hq + hkv) * d)) << "v untouched";
  }
}

TEST(Vllm, Refusals) {
  std::vector<float> q(4 * 2 * 16), k(4 * 16), cache(10 * 16);
  std::vector<std::int64_t> pos{0, 3, 9, 10};
  using rotary_test::expect_error;
  const auto call = [&](std::int64_t rot, std::int64_t max_pos, float* key, std::int64_t kv) {
    rotary::vllm::rotary_embedding(pos.data(), 4, q.data(), 2, key, kv, 16, cache.data(), max_pos, rot, true);
  };
  expect_error([&] { call(16, 10, k.data(), 1); }, {"positions[3] (10)", "outside the table [0, 10)"});
  expect_error([&] { call(15, 10, k.data(), 1); }, {"rot_dim (15)"});
  expect_error([&] { call(18, 10, k.data(), 1); }, {"rotary_dim (18)", "<= head_dim (16)"});
  expect_error(
      [&] {
        rotary::vllm::rotary_embedding_strided(pos.data(), 4, q.data(), 2, 32, 16, static_cast<float*>(nullptr), 1, 16, 16,
                                               16, cache.data(), 10, 16, true);
      },
      {"key is null but num_kv_heads is 1"});
  expect_error(
      [&] {
        rotary::vllm::rotary_embedding<float, float>(pos.data(), 4, q.data(), 2, k.data(), 1, 16, nullptr, 10, 16, true);
      },
      {"null cos_sin_cache"});
  expect_error(
      [&] {
        const std::vector<std::int64_t> ok{0, 3, 9, 9};
        rotary::vllm::rotary_embedding_strided(ok.data(), 4, q.data(), 2, 32, 16, q.data() + 16, 1, 32, 16, 16,
                                               cache.data(), 10, 16, true);
      },
      {"overlap"});
  // The cache is read while query and key are rotated in place: it may share memory with neither
  // (nothing is written before the refusal); next to them it is accepted.
  const std::vector<std::int64_t> ok{0, 3, 2, 1};
  std::mt19937_64 rng(rotary_test::seed() + 700);
  std::vector<float> qr = rotary_test::random_vector<float>(q.size(), rng);
  std::vector<float> kr = rotary_test::random_vector<float>(k.size(), rng);
  const std::vector<float> q0 = qr, k0 = kr;
  const std::vector<float> small_cache(8, 1.0f);
  const auto call_with_cache = [&](const float* c) {
    rotary::vllm::rotary_embedding(ok.data(), 4, qr.data(), 2, kr.data(), 1, 16, c, 4, 16, true);
  };
  expect_error([&] { call_with_cache(qr.data()); },
               {"query overlaps cos_sin_cache", "must not share memory with the cache"});
  expect_error([&] { call_with_cache(qr.data() + 64); }, {"query overlaps cos_sin_cache"});  // q's last 4 heads
  expect_error([&] { call_with_cache(kr.data()); }, {"key overlaps cos_sin_cache"});
  expect_error(  // without a key
      [&] {
        rotary::vllm::rotary_embedding(ok.data(), 4, qr.data(), 2, static_cast<float*>(nullptr), 0, 16,
                                       qr.data() + 32, 4, 16, true);
      },
      {"vllm::rotary_embedding: query overlaps cos_sin_cache", "must not share memory with the cache"});
  // A cache no buffer can hold (2^58 rows x 8 f32 values: 2^63 bytes) is refused, naming it.
  expect_error(
      [&] {
        rotary::vllm::rotary_embedding(ok.data(), 4, qr.data(), 2, kr.data(), 1, 16, small_cache.data(),
                                       std::int64_t{1} << 58, 8, true);
      },
      {"vllm::rotary_embedding: cos_sin_cache: 288230376151711744 rows of 8 values",
       "span more than PTRDIFF_MAX bytes"});
  EXPECT_TRUE(rotary_test::same_bits(qr, q0) && rotary_test::same_bits(kr, k0)) << "written before the refusal";
  const std::vector<float> c1 = rotary_test::random_vector<float>(4 * 16, rng, -1.0, 1.0);
  std::vector<float> want = q0;
  rotary::vllm::rotary_embedding(ok.data(), 4, want.data(), 2, static_cast<float*>(nullptr), 0, 16, c1.data(), 4, 16,
                                 true);
  std::vector<float> qc = q0;  // [query | cache]
  qc.insert(qc.end(), c1.begin(), c1.end());
  rotary::vllm::rotary_embedding(ok.data(), 4, qc.data(), 2, static_cast<float*>(nullptr), 0, 16,
                                 qc.data() + q.size(), 4, 16, true);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), qc.begin()));
}

// ---- FlashAttention ---------------------------------------------------------------------------------

struct FaCase {
  std::int64_t batch, seqlen, heads, head_dim, half, seqlen_ro;
  bool interleaved, conjugate, per_batch_offsets, varlen, in_place;
};

template <class T>
void run_fa(const FaCase& c, std::uint64_t salt) {
  std::mt19937_64 rng(rotary_test::seed() + salt);
  const std::vector<T> cos = rotary_test::random_vector<T>(static_cast<std::size_t>(c.seqlen_ro * c.half), rng, -1, 1);
  const std::vector<T> sin = rotary_test::random_vector<T>(static_cast<std::size_t>(c.seqlen_ro * c.half), rng, -1, 1);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(c.batch), c.seqlen);
  if (c.varlen)
    for (auto& l : lengths) l = std::uniform_int_distribution<std::int64_t>(0, c.seqlen)(rng);
  std::vector<std::int32_t> cu{0};
  for (const std::int64_t l : lengths) cu.push_back(cu.back() + static_cast<std::int32_t>(l));
  const std::int64_t total = cu.back();
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(c.batch));
  for (auto& o : offsets) o = std::uniform_int_distribution<std::int64_t>(0, c.seqlen_ro)(rng);  // some masked
  const std::int64_t token = c.heads * c.head_dim;
  const std::vector<T> x = rotary_test::random_vector<T>(static_cast<std::size_t>(total * token), rng);
  rotary::flash_attn::Options o;
  o.interleaved = c.interleaved;
  o.conjugate = c.conjugate;
  o.seqlen_offsets = c.per_batch_offsets ? rotary::flash_attn::SeqlenOffsets(offsets.data(), c.batch)
                                         : rotary::flash_attn::SeqlenOffsets(offsets[0]);
  std::vector<T> out = c.in_place ? x : std::vector<T>(x.size());
  const rotary::flash_attn::TableShape ts{c.seqlen_ro, c.half};
  if (c.varlen)
    rotary::flash_attn::apply_rotary_emb_varlen(c.in_place ? out.data() : x.data(), out.data(), total, c.heads,
                                                c.head_dim, cu.data(), c.batch, c.seqlen, cos.data(), sin.data(), ts, o);
  else
    rotary::flash_attn::apply_rotary_emb(c.in_place ? out.data() : x.data(), out.data(), c.batch, c.seqlen, c.heads,
                                         c.head_dim, cos.data(), sin.data(), ts, o);
  std::vector<double> cs(static_cast<std::size_t>(c.half), 1.0);
  std::vector<double> sn(static_cast<std::size_t>(c.half), 0.0);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t s = 0; s < lengths[static_cast<std::size_t>(b)]; ++s) {
      const std::int64_t p = s + (c.per_batch_offsets ? offsets[static_cast<std::size_t>(b)] : offsets[0]);
      for (std::int64_t j = 0; j < c.half; ++j) {  // masked past seqlen_ro: cos 1, sin 0
        cs[static_cast<std::size_t>(j)] = p < c.seqlen_ro ? rotary_test::to_d(cos[static_cast<std::size_t>(p * c.half + j)]) : 1.0;
        sn[static_cast<std::size_t>(j)] = p < c.seqlen_ro ? rotary_test::to_d(sin[static_cast<std::size_t>(p * c.half + j)]) : 0.0;
      }
      for (std::int64_t h = 0; h < c.heads; ++h) {
        const std::size_t at = static_cast<std::size_t>((cu[static_cast<std::size_t>(b)] + s) * token + h * c.head_dim);
        check_head(x.data() + at, out.data() + at, c.head_dim, 2 * c.half, c.interleaved, cs.data(), sn.data(),
                   c.conjugate ? -1.0 : 1.0, "b " + std::to_string(b) + " s " + std::to_string(s) + " h " + std::to_string(h));
        if (p >= c.seqlen_ro) {
          ASSERT_TRUE(std::equal(x.begin() + static_cast<std::ptrdiff_t>(at), x.begin() + static_cast<std::ptrdiff_t>(at) + c.head_dim,
                                 out.begin() + static_cast<std::ptrdiff_t>(at),
                                 [](T a, T b2) { return rotary_test::same_bits(a, b2); }))
              << "masked position " << p << " must be unchanged";
        }
      }
    }
}

const std::vector<FaCase> kFa{
    // test_rotary's shape: batch 4, seqlen 217, nheads 3, headdim 128, rotary_fraction 1 / 0.5
    {4, 217, 3, 128, 64, 217 + 30, false, false, false, false, false},
    {4, 217, 3, 128, 32, 217 + 30, true, false, true, false, true},
    {4, 217, 3, 128, 64, 217 + 30, false, true, true, true, false},
    {4, 217, 3, 128, 32, 217 + 30, true, true, false, true, true},
    // decode-like: one token per sequence, offsets near the end of the table (some masked)
    {8, 1, 32, 128, 64, 64, false, false, true, false, true},
};

TEST(FlashAttn, ReferenceF32) {
  std::uint64_t salt = 900;
  for (const FaCase& c : kFa) run_fa<float>(c, ++salt);
}
TEST(FlashAttn, ReferenceF16) {
  std::uint64_t salt = 1000;
  for (const FaCase& c : kFa) run_fa<rotary::f16>(c, ++salt);
}
TEST(FlashAttn, ReferenceBf16) {
  std::uint64_t salt = 1100;
  for (const FaCase& c : kFa) run_fa<rotary::bf16>(c, ++salt);
}

TEST(FlashAttn, Refusals) {
  std::vector<float> x(2 * 5 * 2 * 16), out(x.size()), cos(8 * 8), sin(8 * 8);
  using rotary_test::expect_error;
  namespace fa = rotary::flash_attn;
  expect_error(
      [&] {
        fa::apply_rotary_emb(x.data(), out.data(), 2, 5, 2, 16, cos.data(), sin.data(), {8, 9});
      },
      {"rotary_dim (2 x 9) must be <= headdim (16)"});
  expect_error([&] { fa::apply_rotary_emb(x.data(), x.data() + 1, 2, 5, 2, 16, cos.data(), sin.data(), {8, 8}); },
               {"out overlaps x"});
  const std::vector<std::int64_t> neg{0, -1};
  fa::Options o;
  o.seqlen_offsets = fa::SeqlenOffsets(neg.data(), 2);
  expect_error([&] { fa::apply_rotary_emb(x.data(), out.data(), 2, 5, 2, 16, cos.data(), sin.data(), {8, 8}, o); },
               {"seqlen_offsets[1] (-1) must be >= 0"});
  o.seqlen_offsets = fa::SeqlenOffsets(neg.data(), 1);
  expect_error([&] { fa::apply_rotary_emb(x.data(), out.data(), 2, 5, 2, 16, cos.data(), sin.data(), {8, 8}, o); },
               {"holds 1 values for 2 sequences"});
  const std::vector<std::int32_t> cu_bad{0, 6, 4};
  expect_error(
      [&] { fa::apply_rotary_emb_varlen(x.data(), out.data(), 10, 2, 16, cu_bad.data(), 2, 6, cos.data(), sin.data(), {8, 8}); },
      {"must not decrease"});
  const std::vector<std::int32_t> cu{0, 7, 10};
  expect_error(
      [&] { fa::apply_rotary_emb_varlen(x.data(), out.data(), 10, 2, 16, cu.data(), 2, 5, cos.data(), sin.data(), {8, 8}); },
      {"sequence 0 has 7 tokens, more than max_seqlen (5)"});
  expect_error(
      [&] { fa::apply_rotary_emb_varlen(x.data(), out.data(), 9, 2, 16, cu.data(), 2, 7, cos.data(), sin.data(), {8, 8}); },
      {"cu_seqlens[batch] (10) must equal total_seqlen (9)"});
  expect_error([&] { fa::apply_rotary_emb<float, float>(x.data(), out.data(), 2, 5, 2, 16, nullptr, sin.data(), {8, 8}); },
               {"null cos or sin"});
  // Every sequence reads cos and sin while out is written: out may share memory with neither (nothing is
  // written before the refusal), in place or not; tables next to it are accepted.
  std::mt19937_64 rng(rotary_test::seed() + 800);
  const std::vector<float> x1 = rotary_test::random_vector<float>(x.size(), rng);
  std::vector<float> buf = rotary_test::random_vector<float>(x.size() + 2 * 64, rng, -1.0, 1.0);  // [out | cos | sin]
  const std::vector<float> before = buf;
  float* const o0 = buf.data();
  const float* const c0 = buf.data() + x.size();
  expect_error([&] { fa::apply_rotary_emb(x.data(), o0, 2, 5, 2, 16, o0 + 8, c0 + 64, {8, 8}); },
               {"out overlaps cos", "must not share memory with cos or sin"});
  expect_error([&] { fa::apply_rotary_emb(x.data(), o0, 2, 5, 2, 16, c0, c0 - 1, {8, 8}); }, {"out overlaps sin"});
  expect_error([&] { fa::apply_rotary_emb(o0, o0, 2, 5, 2, 16, o0, c0 + 64, {8, 8}); }, {"out overlaps cos"});
  const std::vector<std::int32_t> cu2{0, 4, 10};
  expect_error(
      [&] { fa::apply_rotary_emb_varlen(x.data(), o0, 10, 2, 16, cu2.data(), 2, 6, c0, o0 + 300, {8, 8}); },
      {"flash_attn::apply_rotary_emb_varlen: out overlaps sin"});
  EXPECT_TRUE(rotary_test::same_bits(buf, before)) << "written before the refusal";
  std::vector<float> want(x.size());
  fa::apply_rotary_emb(x1.data(), want.data(), 2, 5, 2, 16, c0, c0 + 64, {8, 8});
  std::copy(x1.begin(), x1.end(), buf.begin());
  fa::apply_rotary_emb(o0, o0, 2, 5, 2, 16, c0, c0 + 64, {8, 8});
  EXPECT_TRUE(std::equal(want.begin(), want.end(), buf.begin()));
}

TEST(FlashAttn, NullSeqlenOffsetsArray) {
  // A null per-sequence array is not the scalar offset 0: it throws unless it holds no values.
  std::vector<float> x(2 * 5 * 2 * 16, 1.0f), out(x.size()), cos(8 * 8, 0.5f), sin(8 * 8, 0.5f);
  using rotary_test::expect_error;
  namespace fa = rotary::flash_attn;
  const std::vector<std::int32_t> cu{0, 5, 10};
  for (const bool wide : {false, true}) {
    SCOPED_TRACE(wide ? "int64" : "int32");
    const auto null_offsets = [wide](std::int64_t count) {
      return wide ? fa::SeqlenOffsets(static_cast<const std::int64_t*>(nullptr), count)
                  : fa::SeqlenOffsets(static_cast<const std::int32_t*>(nullptr), count);
    };
    fa::Options o;
    o.seqlen_offsets = null_offsets(2);
    EXPECT_TRUE(o.seqlen_offsets.per_sequence());
    expect_error([&] { fa::apply_rotary_emb(x.data(), out.data(), 2, 5, 2, 16, cos.data(), sin.data(), {8, 8}, o); },
                 {"flash_attn::apply_rotary_emb", "seqlen_offsets is null but holds 2 values"});
    expect_error(
        [&] { fa::apply_rotary_emb_varlen(x.data(), out.data(), 10, 2, 16, cu.data(), 2, 5, cos.data(), sin.data(), {8, 8}, o); },
        {"flash_attn::apply_rotary_emb_varlen", "seqlen_offsets is null but holds 2 values"});
    // Null with 0 values is an empty per-sequence array: it serves 0 sequences, not 2.
    o.seqlen_offsets = null_offsets(0);
    expect_error([&] { fa::apply_rotary_emb(x.data(), out.data(), 2, 5, 2, 16, cos.data(), sin.data(), {8, 8}, o); },
                 {"seqlen_offsets holds 0 values for 2 sequences"});
    EXPECT_NO_THROW(fa::apply_rotary_emb(x.data(), out.data(), 0, 5, 2, 16, cos.data(), sin.data(), {8, 8}, o));
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));  // nothing written
  }
}

TEST(FlashAttn, OffsetsInsideOutAreReadBeforeAnyWrite) {
  // seqlen_offsets held in sequence 0's rows, rotated in place: every offset is read before sequence 0
  // is written, so sequence 1 still sits at its offset (3), as with the offsets in their own buffer.
  namespace fa = rotary::flash_attn;
  std::mt19937_64 rng(rotary_test::seed() + 810);
  const std::vector<float> cos = rotary_test::random_vector<float>(8 * 2, rng, -1.0, 1.0);
  const std::vector<float> sin = rotary_test::random_vector<float>(8 * 2, rng, -1.0, 1.0);
  std::vector<float> buf = rotary_test::random_vector<float>(2 * 4, rng, -1.0, 1.0);  // 2 sequences x 1 token x 4
  const std::int32_t held[2] = {1, 3};
  std::memcpy(static_cast<void*>(buf.data() + 2), static_cast<const void*>(held), sizeof(held));
  std::vector<float> want = buf;
  fa::Options separate;
  separate.seqlen_offsets = fa::SeqlenOffsets(held, 2);
  fa::apply_rotary_emb(want.data(), want.data(), 2, 1, 1, 4, cos.data(), sin.data(), {8, 2}, separate);
  fa::Options inside;
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  std::int32_t* const offsets = reinterpret_cast<std::int32_t*>(buf.data() + 2);  // NOLINT: the buffer is the test
  inside.seqlen_offsets = fa::SeqlenOffsets(offsets, 2);
  fa::apply_rotary_emb(buf.data(), buf.data(), 2, 1, 1, 4, cos.data(), sin.data(), {8, 2}, inside);
  EXPECT_TRUE(rotary_test::same_bits(buf, want));
}

TEST(FlashAttn, ShapesBeyondMemoryRefusedBeforeArithmetic) {
  // tokens x nheads x headdim and batch x seqlen are checked before they are multiplied (signed
  // overflow before); empty sequences build no list of batch + 1 starts.
  namespace fa = rotary::flash_attn;
  std::vector<float> x(64), cos(8 * 4), sin(8 * 4);
  using rotary_test::expect_error;
  expect_error([&] { fa::apply_rotary_emb(x.data(), x.data(), 1, std::int64_t{1} << 40, std::int64_t{1} << 20, 1024,
                                          cos.data(), sin.data(), {8, 4}); },
               {"flash_attn::apply_rotary_emb", "spans more than PTRDIFF_MAX bytes"});
  expect_error([&] { fa::apply_rotary_emb(x.data(), x.data(), std::numeric_limits<std::int64_t>::max(), 2, 1, 8,
                                          cos.data(), sin.data(), {8, 4}); },
               {"batch (9223372036854775807) x seqlen (2) overflows int64"});
  const std::int32_t cu[2] = {0, std::numeric_limits<std::int32_t>::max()};
  expect_error([&] { fa::apply_rotary_emb_varlen(x.data(), x.data(), cu[1], std::int64_t{1} << 40, 1024, cu, 1,
                                                 cu[1], cos.data(), sin.data(), {8, 4}); },
               {"flash_attn::apply_rotary_emb_varlen", "spans more than PTRDIFF_MAX bytes"});
  EXPECT_NO_THROW(fa::apply_rotary_emb(x.data(), x.data(), std::int64_t{1} << 61, 0, 1, 8, cos.data(), sin.data(),
                                       {8, 4}));
  // a table half past INT64_MAX / 2: compared with headdim / 2, not doubled (signed overflow before)
  expect_error(
      [&] {
        fa::apply_rotary_emb(x.data(), x.data(), 1, 1, 1, 8, cos.data(), sin.data(),
                             {4, std::numeric_limits<std::int64_t>::max() / 2 + 1});
      },
      {"rotary_dim (2 x 4611686018427387904) must be <= headdim (8)"});
  // no heads: an empty tensor, as with no tokens (it was refused by an inner call's message)
  EXPECT_NO_THROW(fa::apply_rotary_emb(x.data(), x.data(), 2, 3, 0, 8, cos.data(), sin.data(), {8, 4}));
  // vLLM's dense form: num_heads x head_size is refused by name before it is a stride
  std::vector<std::int64_t> pos(1, 0);
  expect_error(
      [&] {
        rotary::vllm::rotary_embedding(pos.data(), 1, x.data(),
                                       std::numeric_limits<std::int64_t>::max() / 4 + 1,
                                       static_cast<float*>(nullptr), 0, 8, cos.data(), 4, 8, true);
      },
      {"vllm::rotary_embedding: num_heads (2305843009213693952) x head_size (8) overflows ptrdiff_t"});
}

}  // namespace
