// What the fused prologues (fusion.hpp, kv_cache.hpp) refuse, by message: slots, sequence overflow,
// scales, shapes, eps, weights, memory shared between caches and vectors; and two caches in one
// buffer, whose rows meet exactly when their bytes do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <rotary/rotary.hpp>

#include "support.hpp"

namespace {

using rotary::fp8_e4m3;
using rotary::HeadNorm;
using rotary::KvCacheView;
using rotary::NormWeight;
using rotary::Pairing;
using rotary::Positions;
using rotary::Prologue;
using rotary::Slots;
using rotary::StridedLayout;

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  // memcmp's pointers must be non-null even for zero bytes; an empty vector's data() may be null.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---- refusals -----------------------------------------------------------------------------------------

// Slots outside the cache or twice, sequence overflow, scales missing or given, fp8 scale <= 0,
// shapes, head_dim, caches sharing memory with the vectors or each other, eps, weights, deinterleave
// with an interleaved rotator, xPos keys, slot values inside the cache they place rows in (the
// unfused write too). fp8's scales (only read) may share memory with inputs and weights.

// Duplicate slots are found both ways Slots::check looks for them: pairwise (up to 16 tokens, no
// allocation) and sorted (more); padding (negative) may repeat; the message names the slot.
TEST(FusedErrors, DuplicateSlotsAtEveryCallSize) {
  for (const std::int64_t tokens : {2, 3, 16, 17, 64}) {
    std::vector<std::int64_t> map(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) map[static_cast<std::size_t>(t)] = t % 3 == 1 ? -1 : 3 * t;
    EXPECT_EQ(Slots(map).check(tokens, 4 * tokens + 8, 8), "") << tokens << " tokens";
    for (const std::int64_t at : {std::int64_t{0}, tokens / 2, tokens - 1}) {
      std::vector<std::int64_t> dup = map;
      const std::int64_t other = at == 0 ? tokens - 1 : 0;
      dup[static_cast<std::size_t>(other)] = 3 * tokens + 5;
      dup[static_cast<std::size_t>(at)] = 3 * tokens + 5;
      const std::string m = Slots(dup).check(tokens, 4 * tokens + 8, 8);
      EXPECT_NE(m.find("writes slot " + std::to_string(3 * tokens + 5) + " twice"), std::string::npos)
          << tokens << " tokens, duplicate at " << other << " and " << at << ": \"" << m << "\"";
    }
  }
}

TEST(FusedErrors, RefusesBadCallsWithClearMessages) {
  using rotary_test::expect_error;
  const std::int64_t T_ = 3, H = 2, D = 8;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::vector<float> q(T_ * H * D, 1.0f), k(T_ * H * D, 1.0f), v(T_ * H * D, 1.0f);
  std::vector<float> kc(2 * 4 * H * D), vc(kc.size());
  const StridedLayout l{T_, H, H * D, D};
  const auto kv = KvCacheView<float>::paged(kc.data(), 2, 4, H, D);
  const auto vv = KvCacheView<float>::paged(vc.data(), 2, 4, H, D);
  const auto call = [&](const std::vector<std::int64_t>& slots, const KvCacheView<float>& kcache,
                        const KvCacheView<float>& vcache) {
    rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0), Slots(slots), kcache,
                          vcache);
  };
  expect_error([&] { call({0, 8, 1}, kv, vv); }, {"slot_mapping[1] (8)", "outside the cache's 8 slots"});
  expect_error([&] { call({2, 5, 2}, kv, vv); }, {"slot 2 twice"});
  expect_error([&] { call({0, 1}, kv, vv); }, {"slot_mapping has 2 values for 3 tokens"});
  expect_error([&] { call({0, 1, 2}, kv, kv); }, {"k_cache and v_cache share memory"});
  expect_error([&] { call({0, 1, 2}, KvCacheView<float>::paged(q.data(), 1, 3, H, D), vv); }, {"share memory"});
  // inputs apart from the other tensor's cache too: k read while v_cache is written, v while k_cache is
  expect_error([&] { call({0, 1, 2}, kv, KvCacheView<float>::paged(k.data(), 1, 3, H, D)); },
               {"k and v_cache share memory"});
  expect_error([&] { call({0, 1, 2}, KvCacheView<float>::paged(v.data(), 1, 3, H, D), vv); },
               {"v and k_cache share memory"});
  {  // k rotated to its own output over v, which is still to be read into v_cache
    const std::vector<std::int64_t> slots = {0, 1, 2};
    rotary::Prologue<float, float, float> c;
    c.rotate_q_in_place(q.data(), l);
    c.write_kv(k.data(), l, v.data(), l, kv, vv, Slots(slots));
    c.k_out = v.data();
    c.k_out_layout = l;
    expect_error([&] { rotary::rope_prologue(rope, c, Positions::contiguous(0)); }, {"k output and v share memory"});
  }
  expect_error([&] { KvCacheView<float>::paged(kc.data(), 2, 4, H, D, kc.data()); }, {"scales given"});
  expect_error([&] { KvCacheView<std::int8_t>::paged(nullptr, 2, 4, H, D); }, {"data is null"});
  std::vector<std::int8_t> k8(kc.size());
  expect_error([&] { KvCacheView<std::int8_t>::paged(k8.data(), 2, 4, H, D); }, {"int8 KV cache needs scales"});
  std::vector<fp8_e4m3> k8f(kc.size());
  std::vector<float> bad_scales = {1.0f, 0.0f};
  expect_error([&] { KvCacheView<fp8_e4m3>::paged(k8f.data(), 2, 4, H, D, bad_scales.data()); },
               {"fp8 KV cache scales[1] (0)", "> 0"});
  bad_scales[1] = 1e-40f;  // subnormal: 1 / scale would be infinite
  expect_error([&] { KvCacheView<fp8_e4m3>::paged(k8f.data(), 2, 4, H, D, bad_scales.data()); },
               {"fp8 KV cache scales[1]", "not subnormal"});
  expect_error([&] { KvCacheView<float>::strided(kc.data(), 2, 4, H, D, 64, 8, 4); }, {"rows of one block overlap"});
  expect_error([&] { call({0, 1, 2}, kv, KvCacheView<float>::paged(vc.data(), 1, 4, H, 16)); },
               {"v rows overlap"});  // v's rows read as 16 wide
  std::vector<std::int32_t> seqlens = {2};
  expect_error(
      [&] {
        rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0),
                              Slots::sequences(seqlens.data(), 1, 3), kv, vv);
      },
      {"cache_seqlens[0] (2) + 3 new tokens does not fit the 4 slots"});
  expect_error([&] { call({0, 1, 2}, KvCacheView<float>::paged(kc.data(), 2, 4, H, 6), vv); },
               {"k_cache head_dim (6) is not the rotator's (8)"});
  const std::vector<float> w(D, 1.0f);
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{w.data(), w.data(), 0.0f},
                             Positions::contiguous(0));
      },
      {"q_norm eps (0) must be finite and > 0"});
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{w.data(), nullptr, 1e-6f},
                             Positions::contiguous(0));
      },
      {"k_norm has no weight"});
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, q.data() + D, l, rotary::QkNorm<float>{w.data(), w.data(), 1e-6f},
                             Positions::contiguous(0));
      },
      {"overlap"});
  expect_error(
      [&] {
        rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(62),
                              Slots(std::vector<std::int64_t>{0, 1, 2}), kv, vv);
      },
      {"position 64", "outside the cache"});
  const rotary::Rope<float> inter(rotary::RotarySpec(D, Pairing::interleaved), 64);
  std::vector<float> mla(2 * 4 * (16 + D));
  expect_error(
      [&] {
        rotary::mla_rope(inter, q.data(), rotary::MlaQuery{T_, 1, 8}, k.data(), 0, v.data(), 0,
                         Positions::contiguous(0), Slots(std::vector<std::int64_t>{0, 1, 2}),
                         KvCacheView<float>::paged(mla.data(), 2, 4, 1, 16 + D), true);
      },
      {"deinterleave", "half_split rotator"});
}

// Found by an adversarial review (2026-12-03): arguments that reached pointer or size arithmetic before
// any check (UBSan: signed overflow; ASan: writes before q, reads past a packed qkv buffer), negative
// counts the unfused steps accepted as no-ops, and a q-only qk_norm_rope refused for k's weight.
TEST(FusedErrors, ShapesAreCheckedBeforeTheirArithmetic) {
  using rotary_test::expect_error;
  constexpr std::int64_t D = 8;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::vector<float> buf(4 + 2 * D, 1.0f), k_pe(2 * D, 1.0f), latent(8, 1.0f), mla(4 * 12);
  // mla_rope: q's view starts nope_dim into each head; a negative nope_dim would rotate the 4 floats
  // before q (they changed, unrefused)
  for (std::size_t i = 0; i < 4; ++i) buf[i] = 100.0f + static_cast<float>(i);
  float* const q = buf.data() + 4;
  const std::vector<std::int64_t> one_slot = {0};
  const auto mla_cache = KvCacheView<float>::paged(mla.data(), 1, 4, 1, 4 + D);
  expect_error(
      [&] {
        rotary::mla_rope(rope, q, rotary::MlaQuery{1, 1, -4}, k_pe.data(), 0, latent.data(), 0,
                         Positions::contiguous(5), Slots(one_slot), mla_cache, false);
      },
      {"MLA query", "nope_dim (-4) must be >= 0"});
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(buf[i], 100.0f + static_cast<float>(i)) << "written before q";
  expect_error(
      [&] {
        rotary::mla_rope(rope, q, rotary::MlaQuery{1, std::int64_t{1} << 61, 8}, k_pe.data(), 0,
                         latent.data(), 0, Positions::contiguous(5), Slots(one_slot), mla_cache, false);
      },
      {"MLA query", "overflows ptrdiff_t"});
  // qkv_split_rope: v_cache rows must be the packed heads' head_dim (wider read past the buffer or
  // into padding, narrower dropped values); counts before the dense row's product
  std::vector<float> qkv(2 * 3 * D, 1.0f), kc(4 * D), vc_wide(4 * 2 * D), vc_narrow(4 * D / 2);
  const std::vector<std::int64_t> slots = {0, 1};
  const auto k_cache = KvCacheView<float>::paged(kc.data(), 1, 4, 1, D);
  expect_error(
      [&] {
        rotary::qkv_split_rope(rope, qkv.data(), 2, 0, 1, Positions::contiguous(0), Slots(slots), k_cache,
                               KvCacheView<float>::paged(vc_wide.data(), 1, 4, 1, 2 * D));
      },
      {"v_cache rows are 16 values; the packed v heads are head_dim (8)"});
  expect_error(
      [&] {
        rotary::qkv_split_rope(rope, qkv.data(), 1, 1, 1, Positions::contiguous(0), Slots(one_slot), k_cache,
                               KvCacheView<float>::paged(vc_narrow.data(), 1, 4, 1, D / 2));
      },
      {"v_cache rows are 4 values"});
  expect_error(
      [&] {
        rotary::qkv_split_rope(rope, qkv.data(), 1, std::int64_t{1} << 61, 1, Positions::contiguous(0),
                               Slots(one_slot), k_cache, k_cache);
      },
      {"qkv_split_rope", "overflows ptrdiff_t"});
  expect_error(
      [&] {
        rotary::qkv_split_rope(rope, qkv.data(), 1, -1, 1, Positions::contiguous(0), Slots(one_slot), k_cache,
                               k_cache);
      },
      {"q_heads (-1)", "must be >= 0"});
  // dense cache strides past PTRDIFF_MAX: refused by name, never computed
  expect_error(
      [&] { KvCacheView<float>::paged(kc.data(), 1, std::int64_t{1} << 40, std::int64_t{1} << 20, 1024); },
      {"paged cache: block_size (1099511627776) x heads (1048576) x head_dim (1024) overflows"});
  expect_error(
      [&] {
        KvCacheView<float>::paged_hnd(kc.data(), 1, std::int64_t{1} << 40, std::int64_t{1} << 20, 1024);
      },
      {"paged_hnd cache", "overflows"});
  // the unfused steps refuse negative counts as the fused calls do (they did nothing, silently)
  std::vector<float> x(2 * D, 1.0f);
  const HeadNorm<float> l2 = HeadNorm<float>::weightless(1e-6f);
  expect_error(
      [&] {
        rotary::rms_norm(x.data(), StridedLayout{-1, 1, D, D}, x.data(), StridedLayout{-1, 1, D, D}, D, l2);
      },
      {"tokens (-1) and heads (1) must be >= 0"});
  expect_error(
      [&] {
        rotary::rms_norm(x.data(), StridedLayout{2, -1, D, D}, x.data(), StridedLayout{2, -1, D, D}, D, l2);
      },
      {"heads (-1) must be >= 0"});
  std::int64_t slot = 0;
  expect_error(
      [&] {
        rotary::write_kv_cache(x.data(), StridedLayout{-1, 1, D, D}, Slots::mapping(&slot, -1), k_cache);
      },
      {"tokens (-1) and heads (1) must be >= 0"});
  // q-only qk_norm_rope: k's weight is not read, so it may be null; the result is q's rms_norm then RoPE
  std::vector<float> w(D, 1.5f), q1(2 * D), q2(2 * D);
  for (std::size_t i = 0; i < q1.size(); ++i) q1[i] = q2[i] = 0.25f * static_cast<float>(i) - 1.0f;
  const StridedLayout ql{2, 1, D, D};
  rotary::qk_norm_rope(rope, q1.data(), ql, static_cast<float*>(nullptr), StridedLayout{2, 0, 0, 0},
                       rotary::QkNorm<float>{w.data(), nullptr, 1e-6f}, Positions::contiguous(3));
  rotary::rms_norm(q2.data(), ql, q2.data(), ql, D, HeadNorm<float>::rms(w.data(), 1e-6f));
  rotary::apply_strided(rope, q2.data(), ql, Positions::contiguous(3));
  EXPECT_TRUE(same_bytes(q1, q2));
}

// Packed rows [q | k | v | padding] whose v heads are narrower than q's (v_cache.head_dim 4 < 8): q's
// output and v share no element, so the call is served (it was refused: "q output and v share
// memory", a test that needed equal row lengths), bit for bit as its unfused steps; v over q's rows
// is still refused.
TEST(Fused, NarrowerPackedVHeadsAreApartFromQ) {
  constexpr std::int64_t D = 8, T = 3, R = 24, Dv = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::mt19937_64 rng(rotary_test::seed() + 1210);
  const std::vector<float> packed = rotary_test::random_vector<float>(static_cast<std::size_t>(T * R), rng);
  const std::vector<std::int64_t> slots = {3, 0, 5};
  const auto run = [&](bool fused, std::vector<float>& buf, std::vector<float>& kc, std::vector<float>& vc) {
    const StridedLayout q{T, 1, R, D}, v{T, 1, R, Dv};
    const auto k_cache = KvCacheView<float>::paged(kc.data(), 2, 4, 1, D);
    const auto v_cache = KvCacheView<float>::paged(vc.data(), 2, 4, 1, Dv);
    if (fused) {
      rotary::rope_kv_write(rope, buf.data(), q, buf.data() + D, q, buf.data() + 2 * D, v,
                            Positions::contiguous(7), Slots(slots), k_cache, v_cache);
    } else {
      rotary::apply_qk_strided(rope, buf.data(), q, buf.data(), q, buf.data() + D, q, buf.data() + D, q,
                               Positions::contiguous(7));
      rotary::write_kv_cache(buf.data() + D, q, Slots(slots), k_cache);
      rotary::write_kv_cache(buf.data() + 2 * D, v, Slots(slots), v_cache);
    }
  };
  std::vector<float> b1 = packed, b2 = packed, k1(8 * D), k2(8 * D), v1(8 * Dv), v2(8 * Dv);
  run(true, b1, k1, v1);
  run(false, b2, k2, v2);
  for (std::int64_t t = 0; t < T; ++t)  // q rotated in place; the fused call leaves k's rows as they were
    for (std::int64_t i = 0; i < D; ++i)
      EXPECT_EQ(b1[static_cast<std::size_t>(t * R + i)], b2[static_cast<std::size_t>(t * R + i)]);
  EXPECT_TRUE(same_bytes(k1, k2));
  EXPECT_TRUE(same_bytes(v1, v2));
  std::vector<float> b3 = packed, k3(8 * D), v3(8 * Dv);
  rotary_test::expect_error(
      [&] {
        rotary::rope_kv_write(rope, b3.data(), StridedLayout{T, 1, R, D}, b3.data() + D,
                              StridedLayout{T, 1, R, D}, b3.data() + 6, StridedLayout{T, 1, R, Dv},
                              Positions::contiguous(7), Slots(slots),
                              KvCacheView<float>::paged(k3.data(), 2, 4, 1, D),
                              KvCacheView<float>::paged(v3.data(), 2, 4, 1, Dv));
      },
      {"q output and v share memory"});
}

// Two caches interleaved in one buffer without sharing a row are one cache pair: FlashInfer's pages
// [blocks, 2, block_size, heads, D] (k's block, then v's) and slot rows [heads, 2, D] (k's head h,
// then v's). Both were refused ("share memory"); they give the bytes of two separate caches.
TEST(Fused, InterleavedCachePairsEqualSeparateCaches) {
  const std::int64_t T_ = 5, H = 2, D = 8, B = 3, S = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::mt19937_64 rng(rotary_test::seed() + 77);
  const std::vector<float> q0 = rotary_test::random_vector<float>(static_cast<std::size_t>(T_ * H * D), rng);
  const std::vector<float> k = rotary_test::random_vector<float>(q0.size(), rng);
  const std::vector<float> v = rotary_test::random_vector<float>(q0.size(), rng);
  const StridedLayout l{T_, H, H * D, D};
  const std::vector<std::int64_t> slots = {0, 5, 6, 11, -1};
  std::vector<float> q = q0;
  std::vector<float> kc(B * S * H * D), vc(kc.size());
  rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(3), Slots(slots),
                        KvCacheView<float>::paged(kc.data(), B, S, H, D),
                        KvCacheView<float>::paged(vc.data(), B, S, H, D));
  struct Pair {
    const char* name;
    std::ptrdiff_t v_offset, block_stride, slot_stride, head_stride;
  };
  for (const Pair& p : {Pair{"FlashInfer pages", S * H * D, 2 * S * H * D, H * D, D},
                        Pair{"heads [2, D]", D, S * H * 2 * D, H * 2 * D, 2 * D}}) {
    SCOPED_TRACE(p.name);
    std::vector<float> buf(static_cast<std::size_t>(2 * B * S * H * D), 0.0f);  // as kc and vc
    const auto kp = KvCacheView<float>::strided(buf.data(), B, S, H, D, p.block_stride, p.slot_stride, p.head_stride);
    const auto vp = KvCacheView<float>::strided(buf.data() + p.v_offset, B, S, H, D, p.block_stride, p.slot_stride,
                                                p.head_stride);
    std::vector<float> q2 = q0;
    rotary::rope_kv_write(rope, q2.data(), l, k.data(), l, v.data(), l, Positions::contiguous(3), Slots(slots), kp, vp);
    EXPECT_TRUE(rotary_test::same_bits(q2, q));
    for (std::int64_t slot = 0; slot < B * S; ++slot)
      for (std::int64_t h = 0; h < H; ++h) {
        EXPECT_EQ(std::memcmp(kp.row(slot, h), kc.data() + (slot * H + h) * D, D * sizeof(float)), 0) << slot;
        EXPECT_EQ(std::memcmp(vp.row(slot, h), vc.data() + (slot * H + h) * D, D * sizeof(float)), 0) << slot;
      }
  }
}

// What a call reads while it writes other buffers: cache scales, norm weights, a second cache beside
// the first, sequence counts. Each case below was accepted before (wrong values or UB, no error).
TEST(FusedErrors, ScalesWeightsAndCachesSideBySide) {
  using rotary_test::expect_error;
  using I8 = KvCacheView<std::int8_t>;
  const std::int64_t T_ = 3, H = 2, D = 8, B = 2, S = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::vector<float> q(T_ * H * D, 1.0f), k(q.size(), 1.0f), v(q.size(), 1.0f);
  const StridedLayout l{T_, H, H * D, D};
  const std::vector<std::int64_t> slots = {0, 1, 2};
  std::vector<std::int8_t> kc(B * S * H * D), vc(kc.size());
  std::vector<float> ks(B * S * H), vs(ks.size());
  const auto call = [&](const auto& kcache, const auto& vcache) {
    rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0), Slots(slots), kcache,
                          vcache);
  };
  const auto kv = I8::paged(kc.data(), B, S, H, D, ks.data());
  const auto vv = I8::paged(vc.data(), B, S, H, D, vs.data());
  // int8 scales are written: one array per cache, apart from every tensor and from both caches' codes
  expect_error([&] { call(kv, I8::paged(vc.data(), B, S, H, D, ks.data())); }, {"k_cache and v_cache share scales"});
  expect_error([&] { call(I8::paged(kc.data(), B, S, H, D, q.data()), vv); },
               {"q output and k_cache's scales share memory"});
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  expect_error([&] { call(I8::paged(kc.data(), B, S, H, D, reinterpret_cast<float*>(vc.data())), vv); },
               {"k_cache's scales and v_cache share memory"});
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  expect_error([&] { call(kv, I8::paged(vc.data(), B, S, H, D, reinterpret_cast<float*>(kc.data()))); },
               {"v_cache's scales and k_cache share memory"});
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  expect_error([&] { I8::paged(kc.data(), B, S, H, D, reinterpret_cast<float*>(kc.data() + 64)); },
               {"KV cache scales share memory with its data"});
  expect_error([&] { rotary::write_kv_cache(k.data(), l, Slots(slots), I8::paged(kc.data(), B, S, H, D, k.data())); },
               {"x and cache's scales share memory"});
  {  // fp8's per-head scales are only read: one array for both caches gives the bytes of two
    std::vector<fp8_e4m3> k8(kc.size()), v8(kc.size()), k8b(kc.size()), v8b(kc.size());
    std::vector<float> hs = {0.5f, 0.25f}, hs2 = hs;
    using F8 = KvCacheView<fp8_e4m3>;
    call(F8::paged(k8.data(), B, S, H, D, hs.data()), F8::paged(v8.data(), B, S, H, D, hs.data()));
    call(F8::paged(k8b.data(), B, S, H, D, hs.data()), F8::paged(v8b.data(), B, S, H, D, hs2.data()));
    EXPECT_EQ(std::memcmp(k8.data(), k8b.data(), k8.size()), 0);
    EXPECT_EQ(std::memcmp(v8.data(), v8b.data(), v8.size()), 0);
  }
  // norm weights are read for every row: not inside anything the call writes
  const std::vector<float> w(D, 1.0f);
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{q.data() + D, w.data(), 1e-6f},
                             Positions::contiguous(0));
      },
      {"q_norm weight and q output share memory"});
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{w.data(), k.data() + 3, 1e-6f},
                             Positions::contiguous(0));
      },
      {"k_norm weight and k output share memory"});
  expect_error([&] { rotary::rms_norm(q.data(), l, q.data(), l, D, HeadNorm<float>::rms(q.data() + 5, 1e-6f)); },
               {"norm weight and out share memory"});
  {  // two caches in the same slot rows, but a block of the pair is longer than the block stride: k's
     // slot 1 is v's slot 0 (each view alone is valid)
    const StridedLayout one{T_, 1, D, D};
    std::vector<float> buf(10 * D);
    const auto kb = KvCacheView<float>::strided(buf.data(), 8, 1, 1, D, D, 4 * D, D);
    const auto vb = KvCacheView<float>::strided(buf.data() + D, 8, 1, 1, D, D, 4 * D, D);
    expect_error(
        [&] {
          rotary::rope_kv_write(rope, q.data(), one, k.data(), one, v.data(), one, Positions::contiguous(0),
                                Slots(slots), kb, vb);
        },
        {"k_cache and v_cache share memory"});
    // side by side within blocks long enough: accepted (k's and v's heads alternating in one slot row,
    // and FlashInfer's pages [blocks, 2, block_size, heads, D], are below)
    const auto kw = KvCacheView<float>::strided(buf.data(), 4, 1, 1, D, 2 * D, 4 * D, D);
    const auto vw = KvCacheView<float>::strided(buf.data() + D, 4, 1, 1, D, 2 * D, 4 * D, D);
    rotary::rope_kv_write(rope, q.data(), one, k.data(), one, v.data(), one, Positions::contiguous(0), Slots(slots),
                          kw, vw);
  }
  {  // mla_rope checks the whole cache it is given (a view filled field by field skips the factory)
    std::vector<float> mla(2 * 2 * (8 + D));
    KvCacheView<float> cv;
    cv.data = mla.data();
    cv.blocks = 2;
    cv.block_size = 2;
    cv.heads = 1;
    cv.head_dim = 8 + D;
    cv.slot_stride = 8 + D;
    cv.head_stride = 8 + D;
    cv.block_stride = 28;  // < the 32 values a block spans (the latent's and k_pe's parts, 24 each, fit)
    expect_error(
        [&] {
          rotary::mla_rope(rope, q.data(), rotary::MlaQuery{T_, 1, 8}, k.data(), 0, v.data(), 0,
                           Positions::contiguous(0), Slots(slots), cv, false);
        },
        {"MLA cache: KV cache blocks overlap"});
  }
  // sequence slots: counts whose product overflows int64 are refused, not wrapped; 0 tokens per
  // sequence is a sequence count, not a mapping
  const std::vector<std::int32_t> seqlens = {0, 0};
  EXPECT_NE(Slots::sequences(seqlens.data(), std::int64_t{1} << 32, std::int64_t{1} << 32).check(0, 16, 4), "");
  EXPECT_NE(Slots::sequences(seqlens.data(), (std::int64_t{1} << 62) + 1, 4).check(4, 64, 16).find("sequences x 4"),
            std::string::npos);
  EXPECT_EQ(Slots::sequences(seqlens.data(), 2, 0).check(0, 16, 4), "");
  EXPECT_EQ(Slots::sequences(seqlens.data(), 2, 0).check(2, 16, 4), "sequence slots: 2 sequences x 0 tokens != 2 tokens");
  // read_cache_row is checked
  std::vector<float> row(D);
  expect_error([&] { rotary::read_cache_row(kv, 999, 0, row.data()); }, {"read_cache_row: slot 999"});
  expect_error([&] { rotary::read_cache_row(kv, 0, H, row.data()); }, {"outside the cache's 8 slots x 2 heads"});
  {  // the slot mapping and a positions array are read while the call writes: apart from every output
    std::vector<float> fc(B * S * H * D), fv(fc.size());
    const auto fk = KvCacheView<float>::paged(fc.data(), B, S, H, D);
    const auto fvv = KvCacheView<float>::paged(fv.data(), B, S, H, D);
    std::memcpy(fc.data() + 40, slots.data(), slots.size() * sizeof(std::int64_t));
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    const auto* in_cache = reinterpret_cast<const std::int64_t*>(fc.data() + 40);
    expect_error(
        [&] {
          rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0),
                                Slots::mapping(in_cache, T_), fk, fvv);
        },
        {"k_cache and the slots share memory"});
    std::memcpy(q.data() + 20, slots.data(), slots.size() * sizeof(std::int64_t));
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    const auto* in_q = reinterpret_cast<const std::int64_t*>(q.data() + 20);
    expect_error(
        [&] {
          rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions(in_q, T_), Slots(slots), fk,
                                fvv);
        },
        {"q output and positions share memory"});
    std::fill(q.begin(), q.end(), 1.0f);
  }
  {  // with no q, k's problems are named as k's
    Prologue<float, float, float> c;
    c.k = k.data();
    c.k_layout = {T_, H, H * D, 4};
    c.k_out = k.data();
    c.k_out_layout = c.k_layout;
    try {
      rotary::rope_prologue(rope, c, Positions::contiguous(0));
      ADD_FAILURE() << "overlapping k rows accepted";
    } catch (const rotary::error& e) {
      EXPECT_EQ(std::string(e.what()).find("q "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("k "), std::string::npos) << e.what();
    }
  }
}

// The unfused write reads each token's slot again when it writes that token's rows, after the rows
// (and int8 scales) of the tokens before it: slot values inside the cache were checked once, then
// written over. Below, token 0's row lands on slot_mapping[1] and makes it negative (token 1 was
// dropped without an error); other row values sent token 1's row outside the cache. Each view is
// valid alone; the call is refused, and slots just past the cache are accepted.
TEST(FusedErrors, UnfusedWriteRefusesSlotsInsideTheCache) {
  using rotary_test::expect_error;
  const std::int64_t D = 4;
  const StridedLayout two{2, 1, D, D};
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, -1.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  const std::vector<std::int64_t> map = {1, 2};
  std::vector<float> buf(5 * D, 0.0f);  // 4 slots of one head, then room for the mapping
  const auto cache = KvCacheView<float>::paged(buf.data(), 1, 4, 1, D);
  std::memcpy(buf.data() + D, map.data(), map.size() * sizeof(std::int64_t));  // slot 1's row
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* in_row = reinterpret_cast<const std::int64_t*>(buf.data() + D);
  expect_error([&] { rotary::write_kv_cache(x.data(), two, Slots::mapping(in_row, 2), cache); },
               {"cache and the slots share memory"});
  std::memcpy(buf.data() + 4 * D, map.data(), map.size() * sizeof(std::int64_t));  // past the cache
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* after = reinterpret_cast<const std::int64_t*>(buf.data() + 4 * D);
  rotary::write_kv_cache(x.data(), two, Slots::mapping(after, 2), cache);
  EXPECT_EQ(std::memcmp(cache.row(1, 0), x.data(), D * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(cache.row(2, 0), x.data() + D, D * sizeof(float)), 0);
  {  // an int8 cache writes a scale per row: the mapping inside the scales (token 0 writes scales[2],
     // the low half of slot_mapping[1])
    std::vector<std::int8_t> codes(4 * D);
    std::vector<float> scales(4, 0.0f);
    const std::vector<std::int64_t> down = {2, 0};
    std::memcpy(scales.data(), down.data(), down.size() * sizeof(std::int64_t));
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    const auto* in_scales = reinterpret_cast<const std::int64_t*>(scales.data());
    const std::vector<float> zeros(2 * D, 0.0f);
    expect_error(
        [&] {
          rotary::write_kv_cache(zeros.data(), two, Slots::mapping(in_scales, 2),
                                 KvCacheView<std::int8_t>::paged(codes.data(), 1, 4, 1, D, scales.data()));
        },
        {"cache's scales and the slots share memory"});
  }
  // cache_seqlens (int32 and int64) inside the cache: read for every token too
  std::vector<float> seq(2 * 4 * D, 0.0f);  // zeros: every sequence holds 0 tokens
  const auto seq_cache = KvCacheView<float>::paged(seq.data(), 2, 4, 1, D);
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* lens32 = reinterpret_cast<const std::int32_t*>(seq.data() + 7 * D);
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* lens64 = reinterpret_cast<const std::int64_t*>(seq.data() + 6 * D);
  expect_error([&] { rotary::write_kv_cache(x.data(), two, Slots::sequences(lens32, 1, 2), seq_cache); },
               {"cache and the slots share memory"});
  expect_error([&] { rotary::write_kv_cache(x.data(), two, Slots::sequences(lens64, 2, 1), seq_cache); },
               {"cache and the slots share memory"});
}

// fp8's per-head scales are only read: a norm weight or an input in the same memory is only read
// too. Both were refused ("q_norm weight and k_cache's scales share memory (the call writes them)",
// "v and v_cache's scales share memory"); they give the bytes of separate copies. An output over
// them is still refused.
TEST(Fused, Fp8ScalesMayShareMemoryWithWhatIsRead) {
  using F8 = KvCacheView<fp8_e4m3>;
  const std::int64_t T_ = 3, H = 2, D = 8, B = 2, S = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::mt19937_64 rng(rotary_test::seed() + 91);
  const auto n = static_cast<std::size_t>(T_ * H * D);
  const std::vector<float> q0 = rotary_test::random_vector<float>(n, rng);
  const std::vector<float> k = rotary_test::random_vector<float>(n, rng);
  // > 0: the first values of v and of the norm weights are fp8 scales too (a view's scales are float*)
  std::vector<float> v = rotary_test::random_vector<float>(n, rng, 0.25, 2.0);
  std::vector<float> w = rotary_test::random_vector<float>(static_cast<std::size_t>(D), rng, 0.25, 2.0);
  const std::vector<float> v_copy = v, w_copy = w;
  const StridedLayout l{T_, H, H * D, D};
  const std::vector<std::int64_t> slots = {0, 5, 6};
  struct Out {
    std::vector<float> q;
    std::vector<fp8_e4m3> kc, vc;
  };
  // k_cache's scales are the norm weights' first values, v_cache's those of v's first row
  const auto run = [&](const float* weight, float* k_scales, float* v_scales) {
    Out o{q0, std::vector<fp8_e4m3>(static_cast<std::size_t>(B * S * H * D)), {}};
    o.vc = o.kc;
    Prologue<float, fp8_e4m3, float> c;
    c.rotate_q_in_place(o.q.data(), l);
    c.write_kv(k.data(), l, v.data(), l, F8::paged(o.kc.data(), B, S, H, D, k_scales),
               F8::paged(o.vc.data(), B, S, H, D, v_scales), Slots(slots));
    c.norm_before_rope(rotary::QkNorm<float>{weight, weight, 1e-6f});
    rotary::rope_prologue(rope, c, Positions::contiguous(2));
    return o;
  };
  std::vector<float> k_scales = {w[0], w[1]}, v_scales = {v[0], v[1]};  // the same values, apart
  const Out apart = run(w_copy.data(), k_scales.data(), v_scales.data());
  const auto same_as_apart = [&](const char* what, const float* weight, float* ks, float* vs) {
    try {
      const Out o = run(weight, ks, vs);
      EXPECT_TRUE(same_bytes(o.q, apart.q) && same_bytes(o.kc, apart.kc) && same_bytes(o.vc, apart.vc)) << what;
    } catch (const rotary::error& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  };
  same_as_apart("norm weights holding k_cache's scales", w.data(), w.data(), v_scales.data());
  same_as_apart("v holding v_cache's scales", w_copy.data(), k_scales.data(), v.data());
  same_as_apart("both", w.data(), w.data(), v.data());
  // other scales give other codes (the comparison above is not vacuous)
  std::vector<float> swapped = {v[1], v[0]};
  EXPECT_FALSE(same_bytes(run(w_copy.data(), k_scales.data(), swapped.data()).vc, apart.vc));
  {  // the unfused write: x holding the scales
    std::vector<fp8_e4m3> a(static_cast<std::size_t>(B * S * H * D)), b(a.size());
    rotary::write_kv_cache(v.data(), l, Slots(slots), F8::paged(a.data(), B, S, H, D, v.data() + D));
    std::vector<float> x_scales = {v[D], v[D + 1]};
    rotary::write_kv_cache(v_copy.data(), l, Slots(slots), F8::paged(b.data(), B, S, H, D, x_scales.data()));
    EXPECT_TRUE(same_bytes(a, b));
  }
  std::vector<float> q = q0;  // q rotated in place is written: its rows may not hold scales
  q[D] = 0.5f;
  q[D + 1] = 0.25f;
  std::vector<fp8_e4m3> kc(static_cast<std::size_t>(B * S * H * D)), vc(kc.size());
  rotary_test::expect_error(
      [&] {
        rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(2), Slots(slots),
                              F8::paged(kc.data(), B, S, H, D, q.data() + D), F8::paged(vc.data(), B, S, H, D, w.data()));
      },
      {"q output and k_cache's scales share memory"});
}

// ---- two caches in one buffer -----------------------------------------------------------------------

// The check of whether two caches' rows meet against a byte-level overlap of thousands of random
// view pairs; interleaved caches of 2^40 blocks or 2^30 slots decided without walking them.

// One block's geometry: block_size slots x heads rows of head_dim, element strides.
struct BlockShape {
  std::int64_t block_size = 1, heads = 1, head_dim = 1;
  std::ptrdiff_t slot_stride = 0, head_stride = 0;
  std::int64_t span() const { return (block_size - 1) * slot_stride + (heads - 1) * head_stride + head_dim; }
};

// A random block whose rows nest (either axis inside), with slack between rows that is sometimes wide
// enough for another cache's rows to sit in it; an axis of one row gets any stride.
BlockShape random_block(std::mt19937_64& rng) {
  const auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  BlockShape s;
  s.block_size = pick(1, 4);
  s.heads = pick(1, 3);
  s.head_dim = pick(1, 5);
  const bool heads_inside = pick(0, 1) == 1;
  const std::int64_t n_inner = heads_inside ? s.heads : s.block_size;
  const std::int64_t n_outer = heads_inside ? s.block_size : s.heads;
  const std::ptrdiff_t inner = n_inner > 1 ? s.head_dim + pick(0, 2 * s.head_dim) : pick(0, 9);
  const std::ptrdiff_t outer =
      n_outer > 1 ? (n_inner - 1) * inner + s.head_dim + pick(0, 2 * s.head_dim + 2) : pick(0, 40);
  (heads_inside ? s.head_stride : s.slot_stride) = inner;
  (heads_inside ? s.slot_stride : s.head_stride) = outer;
  return s;
}

// b: the same slot and head axes as a (as they are, or with the two axes' roles swapped) with its own
// head_dim that still nests in them, or a random block of its own.
BlockShape partner_block(const BlockShape& a, std::mt19937_64& rng) {
  const auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  if (pick(0, 3) == 0) return random_block(rng);
  BlockShape b = a;
  if (pick(0, 1) == 1) {
    std::swap(b.block_size, b.heads);
    std::swap(b.slot_stride, b.head_stride);
  }
  // the largest head_dim whose rows still nest: below every stride of an axis of more than one row,
  // and within the outer stride after the inner axis' rows
  std::int64_t most = 8;
  const bool slot_inner = b.slot_stride <= b.head_stride;
  if (b.block_size > 1) most = std::min<std::int64_t>(most, b.slot_stride);
  if (b.heads > 1) most = std::min<std::int64_t>(most, b.head_stride);
  if (b.block_size > 1 && b.heads > 1)
    most = std::min<std::int64_t>(most, slot_inner ? b.head_stride - (b.block_size - 1) * b.slot_stride
                                                   : b.slot_stride - (b.heads - 1) * b.head_stride);
  b.head_dim = pick(1, most);
  return b;
}

template <class E>
KvCacheView<E> view_of(E* data, std::int64_t blocks, std::ptrdiff_t block_stride, const BlockShape& s) {
  return KvCacheView<E>::strided(data, blocks, s.block_size, s.heads, s.head_dim, block_stride, s.slot_stride,
                                 s.head_stride);
}

// Whether two views of one buffer share a byte, by marking every byte of the first's rows.
template <class E>
bool bytes_shared(const E* buf, std::size_t size, const KvCacheView<E>& a, const KvCacheView<E>& b) {
  std::vector<char> used(size * sizeof(E), 0);
  const auto bytes = [&](const KvCacheView<E>& c, bool mark) {
    for (std::int64_t slot = 0; slot < c.slots(); ++slot)
      for (std::int64_t h = 0; h < c.heads; ++h) {
        const auto at = static_cast<std::size_t>(reinterpret_cast<const char*>(c.row(slot, h)) -
                                                 reinterpret_cast<const char*>(buf));
        for (std::size_t i = 0; i < static_cast<std::size_t>(c.head_dim) * sizeof(E); ++i) {
          if (!mark && used[at + i] != 0) return true;
          used[at + i] = 1;
        }
      }
    return false;
  };
  bytes(a, true);
  return bytes(b, false);
}

template <class E>
void check_cache_pairs(std::mt19937_64& rng) {
  const auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  int apart = 0, interleaved = 0, shared = 0;
  for (int i = 0; i < 4000; ++i) {
    const BlockShape sa = random_block(rng);
    const BlockShape sb = partner_block(sa, rng);
    const std::int64_t blocks = pick(1, 4);
    // one block stride for both: each block within it, sometimes room for the other cache's block
    const std::ptrdiff_t block_stride = std::max(sa.span(), sb.span()) + pick(0, sb.span() + 3);
    const bool same_blocks = pick(0, 7) != 0;  // else block counts or strides differ: refusal allowed
    const std::int64_t blocks_b = same_blocks ? blocks : pick(1, 4);
    const std::ptrdiff_t stride_b = same_blocks ? block_stride : block_stride + pick(0, 3);
    const std::int64_t at_a = pick(0, 3);
    const std::int64_t at_b = pick(0, std::max(sa.span(), block_stride) + 3);
    const std::size_t size = static_cast<std::size_t>(
        std::max(at_a + (blocks - 1) * block_stride + sa.span(), at_b + (blocks_b - 1) * stride_b + sb.span()));
    std::vector<E> buf(size);
    const auto a = view_of(buf.data() + at_a, blocks, block_stride, sa);
    const auto b = view_of(buf.data() + at_b, blocks_b, stride_b, sb);
    const bool bytes = bytes_shared(buf.data(), size, a, b);
    const bool rows_ab = rotary::detail::caches_share_rows(a, b);
    const bool rows_ba = rotary::detail::caches_share_rows(b, a);
    const auto what = [&] {
      return rotary::detail::concat("case ", i, ": blocks ", blocks, "/", blocks_b, " x stride ", block_stride, "/",
                                    stride_b, "; a at ", at_a, ": ", sa.block_size, " slots x ", sa.heads,
                                    " heads of ", sa.head_dim, ", strides ", sa.slot_stride, "/", sa.head_stride,
                                    "; b at ", at_b, ": ", sb.block_size, " x ", sb.heads, " of ", sb.head_dim, ", ",
                                    sb.slot_stride, "/", sb.head_stride, " ", rotary_test::seed_note());
    };
    if (same_blocks) {
      ASSERT_EQ(rows_ab, bytes) << what();
      ASSERT_EQ(rows_ba, bytes) << what();
    } else if (bytes) {  // never accepted when rows meet
      ASSERT_TRUE(rows_ab && rows_ba) << what();
    }
    const bool extents_meet = rotary::detail::overlap(a.extent(), b.extent());
    apart += extents_meet ? 0 : 1;
    interleaved += extents_meet && !bytes ? 1 : 0;
    shared += bytes ? 1 : 0;
  }
  // each kind occurs often enough to mean something
  EXPECT_GT(apart, 200);
  EXPECT_GT(interleaved, 200);
  EXPECT_GT(shared, 200);
}

TEST(CachePairs, RowsMeetExactlyWhenBytesDo) {
  std::mt19937_64 rng(rotary_test::seed() + 5);
  check_cache_pairs<float>(rng);
  check_cache_pairs<rotary::f16>(rng);
  check_cache_pairs<double>(rng);
}

// Interleaved caches of model sizes, as views (nothing is read or written through them; one block
// pair of memory backs their first rows): FlashInfer's pages [blocks, 2, 16, 8, 128] at 100k and 2^40
// blocks, k and v heads alternating ([heads, 2, 128]) in one block of 2^30 slots, MLA's [512 | 64]
// rows in 2^40 blocks. The check walked every block (2^40 did not finish) and every row of a block;
// it is O(1) now. Moved by one element, the caches share rows. Then a 1-token call over 100k pages.
TEST(CachePairs, ManyBlocksAndSlotsAreDecidedWithoutAWalk) {
  if (sizeof(void*) < 8) GTEST_SKIP() << "views of more than 4 GiB";
  using rotary::detail::caches_share_rows;
  const std::int64_t S = 16, H = 8, D = 128;
  std::vector<float> pair(static_cast<std::size_t>(2 * S * H * D));
  for (const std::int64_t blocks : {std::int64_t{100000}, std::int64_t{1} << 40}) {
    const auto view = [&](std::ptrdiff_t at) {
      return KvCacheView<float>::strided(pair.data() + at, blocks, S, H, D, 2 * S * H * D, H * D, D);
    };
    EXPECT_FALSE(caches_share_rows(view(0), view(S * H * D))) << blocks;
    EXPECT_FALSE(caches_share_rows(view(S * H * D), view(0))) << blocks;
    EXPECT_TRUE(caches_share_rows(view(0), view(S * H * D - 1))) << blocks;
    EXPECT_TRUE(caches_share_rows(view(1), view(S * H * D))) << blocks;
  }
  const std::int64_t slots = std::int64_t{1} << 30;
  const auto alternating = [&](std::ptrdiff_t at) {
    return KvCacheView<float>::strided(pair.data() + at, 1, slots, H, D, slots * H * 2 * D, H * 2 * D, 2 * D);
  };
  EXPECT_FALSE(caches_share_rows(alternating(0), alternating(D)));
  EXPECT_TRUE(caches_share_rows(alternating(0), alternating(D - 1)));
  EXPECT_TRUE(caches_share_rows(alternating(D + 1), alternating(0)));
  const std::int64_t mla_blocks = std::int64_t{1} << 40, mla_slots = 4;  // [blocks, 4, 512 + 64]
  const auto mla = [&](std::ptrdiff_t at, std::int64_t dim) {
    return KvCacheView<float>::strided(pair.data() + at, mla_blocks, mla_slots, 1, dim, mla_slots * 576, 576, dim);
  };
  EXPECT_FALSE(caches_share_rows(mla(0, 512), mla(512, 64)));
  EXPECT_TRUE(caches_share_rows(mla(0, 512), mla(511, 64)));

  // a decode step over 100k FlashInfer pages (2 slots of one head of 4): the bytes of separate caches
  const std::int64_t B = 100000, P = 2, d = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(d), 64);
  const std::vector<float> q0 = {0.5f, -1.0f, 2.0f, 0.25f}, k = {1.0f, 2.0f, -3.0f, 4.0f}, v = {5.0f, 6.0f, 7.0f, 8.0f};
  const StridedLayout one{1, 1, d, d};
  const std::vector<std::int64_t> slot = {2 * B - 1};
  std::vector<float> buf(static_cast<std::size_t>(B * 2 * P * d), 0.0f), kc(buf.size() / 2), vc(kc.size());
  std::vector<float> q = q0, q_sep = q0;
  rotary::rope_kv_write(rope, q.data(), one, k.data(), one, v.data(), one, Positions::contiguous(9), Slots(slot),
                        KvCacheView<float>::strided(buf.data(), B, P, 1, d, 2 * P * d, d, d),
                        KvCacheView<float>::strided(buf.data() + P * d, B, P, 1, d, 2 * P * d, d, d));
  rotary::rope_kv_write(rope, q_sep.data(), one, k.data(), one, v.data(), one, Positions::contiguous(9), Slots(slot),
                        KvCacheView<float>::paged(kc.data(), B, P, 1, d), KvCacheView<float>::paged(vc.data(), B, P, 1, d));
  EXPECT_TRUE(same_bytes(q, q_sep));
  const std::size_t last = buf.size() - 2 * P * d;  // the last page: k's 2 slots, then v's
  EXPECT_EQ(std::memcmp(buf.data() + last + d, kc.data() + kc.size() - d, d * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(buf.data() + last + 3 * d, vc.data() + vc.size() - d, d * sizeof(float)), 0);
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0.0f), static_cast<std::ptrdiff_t>(buf.size()) - 2 * d);
}

}  // namespace

// ---- the checks' fast path -----------------------------------------------------------------------

// check_fused_call skips the checks of one buffer against another when the byte extents show every
// buffer apart (prologue_buffers_apart). Over random placements of q, q's output, k, v, two int8
// caches with their scales, the slot values and the norm weights in one arena (so that they often
// overlap, partly, in place, or side by side), and packed qkv rows: its message is always the one the
// whole sequence of checks gives (check_prologue_steps, the positions, check_prologue_reads), and
// where the extents say apart, the whole sequence finds nothing. Both kinds of call occur often.
TEST(FusedErrors, SkippedPairChecksWouldAllPass) {
  using E = std::int8_t;
  const std::int64_t T_ = 2, H = 2, D = 8, B = 2, S = 2;
  const rotary::Rope<float> rope(rotary::RotarySpec(D, Pairing::half_split), 64);
  constexpr std::int64_t kArena = 640;  // floats; a view spans up to 32, a cache 64
  std::vector<float> arena(kArena + 64, 0.5f);
  std::vector<std::int8_t> codes(4 * B * S * H * D);
  std::mt19937_64 rng(rotary_test::seed() + 17);
  const auto at = [&](std::int64_t span) {  // a float offset in the arena, on 4-float steps
    return std::uniform_int_distribution<std::int64_t>(0, (kArena - span) / 4)(rng) * 4;
  };
  const auto coin = [&](int in) { return std::uniform_int_distribution<int>(0, in - 1)(rng) == 0; };
  int apart = 0, refused = 0, cases = 0;
  for (int i = 0; i < 20000; ++i) {
    const StridedLayout l{T_, H, H * D, D};
    Prologue<float, E, float> c;
    float* q = arena.data() + at(T_ * H * D);
    c.q = q;
    c.q_layout = l;
    c.q_out = coin(2) ? q : arena.data() + at(T_ * H * D);
    c.q_out_layout = l;
    c.k = arena.data() + at(T_ * H * D);
    c.k_layout = l;
    if (coin(3)) {
      c.k_out = arena.data() + at(T_ * H * D);
      c.k_out_layout = l;
    }
    c.v = arena.data() + at(T_ * H * D);
    c.v_layout = l;
    if (coin(8)) {  // one packed qkv projection (q rotated in place): q's rows meet k's and v's extents
      const StridedLayout packed{T_, H, 3 * H * D, D};
      float* row = arena.data() + at(3 * T_ * H * D);
      c.q = row;
      c.q_out = row;
      c.q_layout = c.q_out_layout = packed;
      c.k = row + H * D;
      c.k_layout = packed;
      c.k_out = nullptr;
      c.k_out_layout = {};
      c.v = row + 2 * H * D;
      c.v_layout = packed;
    }
    // caches of codes: apart, or side by side in one buffer (k and v heads alternating per slot);
    // scales in the arena (written: they may meet anything)
    const bool side_by_side = coin(4);
    E* kc = codes.data() + (coin(8) ? 3 * B * S * H * D : 0);
    E* vc = side_by_side ? codes.data() + D : codes.data() + (coin(8) ? 0 : 2 * B * S * H * D);
    float* ks = arena.data() + at(B * S * H);
    float* vs = arena.data() + at(B * S * H);
    if (side_by_side) {
      c.k_cache = KvCacheView<E>::strided(kc, B, S, H, D, S * H * 2 * D, H * 2 * D, 2 * D, ks);
      c.v_cache = KvCacheView<E>::strided(vc, B, S, H, D, S * H * 2 * D, H * 2 * D, 2 * D, vs);
    } else {
      c.k_cache = KvCacheView<E>::paged(kc, B, S, H, D, ks);
      c.v_cache = KvCacheView<E>::paged(vc, B, S, H, D, vs);
    }
    // the slot values: their own array, or in the arena's bytes (read: they may meet other reads)
    std::int64_t own_slots[2] = {1, 2};
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    auto* slots = coin(3) ? reinterpret_cast<std::int64_t*>(arena.data() + at(4)) : own_slots;  // NOLINT
    if (slots != own_slots) std::memcpy(slots, own_slots, sizeof(own_slots));
    c.slots = Slots::mapping(slots, T_);
    if (coin(2)) c.norm_before_rope(rotary::QkNorm<float>{arena.data() + at(D), arena.data() + at(D), 1e-6f});
    const rotary::detail::TableRows<float> src{&rope.cache(), Positions::contiguous(3)};
    // the whole sequence, as the fused call ran it before the fast path
    std::string whole = rotary::detail::check_prologue_steps(c, D, D, Pairing::half_split);
    rotary::detail::ReadExtents reads = rotary::detail::reads_of(src, T_);
    reads.add("the slots", c.slots.values_extent());
    if (whole.empty()) whole = src.check(T_, true);
    if (whole.empty()) whole = rotary::detail::check_prologue_reads(c, D, reads);
    const bool skip_passes = rotary::detail::prologue_steps_sound(c, D, D, Pairing::half_split);
    ASSERT_EQ(skip_passes, rotary::detail::check_prologue_shapes(c, Pairing::half_split).empty() &&
                               rotary::detail::prologue_buffers<std::string>(c, D, D).empty())
        << "case " << i << ": the two forms of the per-buffer tests disagree";
    const bool extents_apart = rotary::detail::prologue_buffers_apart(c, D, reads);
    ASSERT_EQ(rotary::detail::check_fused_call(rope, c, src, true), whole) << "case " << i;
    if (skip_passes && extents_apart) {
      ASSERT_EQ(whole, "") << "case " << i << ": apart by extents, yet a pair check refuses";
      ++apart;
    }
    refused += whole.empty() ? 0 : 1;
    ++cases;
  }
  EXPECT_GT(apart, cases / 20);
  EXPECT_GT(refused, cases / 4);
  EXPECT_GT(cases - refused - apart, cases / 100);  // valid, yet only the whole sequence can say so
}

// check_fused_call tests each buffer on its own in arithmetic (prologue_steps_sound: prologue_buffers
// asked for a bool) and runs the whole sequence of checks only where that answers false. Over valid
// calls with one to three fields made wrong (a layout's counts or strides, a null pointer, a cache's
// sizes, strides, data or scales, the slot values and their count, deinterleaving, a norm's eps or
// weight), the buffers in arrays of their own: the message is always the whole sequence's, and the
// arithmetic passes exactly the calls whose per-buffer words are empty. Both outcomes occur often.
TEST(FusedErrors, SoundStepsNeverPassWhatTheSequenceRefuses) {
  const std::int64_t D = 8, B = 2, S = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D, Pairing::half_split), 64);
  std::vector<std::vector<float>> bufs(7, std::vector<float>(256, 0.5f));
  std::vector<float> weight(D, 1.0f);
  std::vector<float> scales(64, 1.0f);
  std::mt19937_64 rng(rotary_test::seed() + 23);
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  constexpr std::int64_t kBig = std::numeric_limits<std::int64_t>::max();
  const std::int64_t extremes[] = {kBig,
                                   kBig / 2,
                                   kBig / 4 + 1,
                                   std::int64_t{1} << 40,
                                   std::int64_t{1} << 62,
                                   std::numeric_limits<std::int64_t>::min(),
                                   -kBig / 3};
  const auto value = [&]() -> std::int64_t {
    return pick(0, 3) == 0 ? extremes[pick(0, std::size(extremes) - 1)] : pick(-2, 20);
  };
  int sound = 0, refused = 0, cases = 0;
  for (int i = 0; i < 30000; ++i) {
    // one or two tokens and heads: an axis of one row leaves its stride unused, but not unchecked
    const std::int64_t T_ = pick(1, 2), H = pick(1, 2), KV = pick(1, 2);
    Prologue<float, float, float> c;
    std::int64_t slot_values[16];
    for (std::int64_t& v : slot_values) v = pick(-1, B * S - 1);
    slot_values[1] = slot_values[0] >= 0 ? (slot_values[0] + 1) % (B * S) : slot_values[1];
    const StridedLayout l{T_, H, H * D, D}, kvl{T_, KV, KV * D, D};
    const bool with_q = pick(0, 5) != 0;
    const bool with_k = pick(0, 5) != 0;
    if (with_q) c.rotate_q_in_place(bufs[0].data(), l);
    if (with_q && pick(0, 2) == 0) {
      c.q_out = bufs[1].data();
      c.q_out_layout = l;
    }
    if (with_k) {
      c.k = bufs[2].data();
      c.k_layout = kvl;
      if (pick(0, 2) == 0) {
        c.k_out = bufs[3].data();
        c.k_out_layout = kvl;
      }
      if (c.k_out_layout.heads == 0 || pick(0, 1) == 0)
        c.k_cache = KvCacheView<float>::paged(bufs[5].data(), B, S, KV, D);
    }
    if (pick(0, 3) != 0 || (!with_q && !with_k)) {
      c.v = bufs[4].data();
      c.v_layout = kvl;
      c.v_cache = KvCacheView<float>::paged(bufs[6].data(), B, S, KV, D);
    }
    c.slots = Slots::mapping(slot_values, T_);
    if (pick(0, 3) == 0) c.norm_before_rope(rotary::QkNorm<float>{weight.data(), weight.data(), 1e-6f});
    const int wrongs = static_cast<int>(pick(1, 3));
    for (int w = 0; w < wrongs; ++w) {
      StridedLayout* layouts[] = {&c.q_layout, &c.q_out_layout, &c.k_layout, &c.k_out_layout, &c.v_layout};
      KvCacheView<float>* caches[] = {&c.k_cache, &c.v_cache};
      switch (pick(0, 7)) {
        case 0: {
          StridedLayout& x = *layouts[pick(0, 4)];
          std::int64_t* fields[] = {&x.tokens, &x.heads, &x.token_stride, &x.head_stride};
          *fields[pick(0, 3)] = value();
          break;
        }
        case 1: {
          const float** inputs[] = {&c.q, &c.k, &c.v};
          *inputs[pick(0, 2)] = nullptr;
          break;
        }
        case 2:
          (pick(0, 1) == 0 ? c.q_out : c.k_out) = nullptr;
          break;
        case 3:
        case 4: {
          KvCacheView<float>& x = *caches[pick(0, 1)];
          std::int64_t* fields[] = {&x.blocks,       &x.block_size,  &x.heads,      &x.head_dim,
                                    &x.block_stride, &x.slot_stride, &x.head_stride};
          const std::int64_t f = pick(0, 7);
          if (f < 7)
            *fields[f] = value();
          else if (pick(0, 1) == 0)
            x.data = nullptr;
          else
            x.scales = scales.data();
          break;
        }
        case 5:
          if (pick(0, 1) == 0)
            c.slots = Slots::mapping(pick(0, 3) == 0 ? nullptr : slot_values, pick(0, 3));
          else
            slot_values[pick(0, 1)] = pick(0, 1) == 0 ? value() : slot_values[1 - pick(0, 1)];
          break;
        case 6:
          c.deinterleave = true;
          break;
        default: {
          HeadNorm<float>& n = pick(0, 1) == 0 ? c.q_norm : c.k_norm;
          if (pick(0, 1) == 0)
            n.eps = pick(0, 1) == 0 ? 0.0f : std::numeric_limits<float>::quiet_NaN();
          else
            n.weight = nullptr;
          break;
        }
      }
    }
    const rotary::detail::TableRows<float> src{&rope.cache(), Positions::contiguous(3)};
    const bool rotates = c.q_layout.heads > 0 || c.k_layout.heads > 0;  // as rotary::detail::prologue
    std::string whole = rotary::detail::check_prologue_steps(c, D, D, Pairing::half_split);
    rotary::detail::ReadExtents reads =
        rotates ? rotary::detail::reads_of(src, c.tokens()) : rotary::detail::ReadExtents{};
    if (c.has_k_cache() || c.has_v_cache()) reads.add("the slots", c.slots.values_extent());
    if (whole.empty() && rotates) whole = src.check(c.tokens(), c.q_layout.heads > 0 && c.k_layout.heads > 0);
    if (whole.empty()) whole = rotary::detail::check_prologue_reads(c, D, reads);
    ASSERT_EQ(rotary::detail::check_fused_call(rope, c, src, rotates), whole) << "case " << i;
    const bool arithmetic = rotary::detail::prologue_steps_sound(c, D, D, Pairing::half_split);
    const bool words = rotary::detail::check_prologue_shapes(c, Pairing::half_split).empty() &&
                       rotary::detail::prologue_buffers<std::string>(c, D, D).empty();
    ASSERT_EQ(arithmetic, words) << "case " << i << ": " << whole;
    sound += arithmetic ? 1 : 0;
    refused += whole.empty() ? 0 : 1;
    ++cases;
  }
  EXPECT_GT(sound, cases / 10);
  EXPECT_GT(refused, cases / 2);
}

// mla_rope cuts its two caches from the caller's checked cache view, [latent | k_pe] column ranges of
// each slot row, without checking them again (CachePair::columns_of_one: no test of one against the
// other). Over random geometries (strides with and without gaps, rows that fill their slot or not,
// one or many blocks), every cache that passes its check gives two views that pass theirs and whose
// rows never meet; and some caches are refused, so the geometries reach the checks' edges.
TEST(FusedErrors, MlaColumnRangesOfACheckedCacheNeverMeet) {
  std::mt19937_64 rng(rotary_test::seed() + 29);
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::vector<float> arena(4096);
  int valid = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::int64_t rope_dim = 2 * pick(1, 4), latent = pick(1, 12), d = latent + rope_dim;
    const std::int64_t blocks = pick(1, 4), block_size = pick(1, 4);
    const std::int64_t slot_stride = pick(d - 3, d + 4);
    const std::int64_t block_stride = pick((block_size - 1) * slot_stride, block_size * slot_stride + 8);
    KvCacheView<float> cache;
    cache.data = arena.data() + pick(0, 16);
    cache.blocks = blocks;
    cache.block_size = block_size;
    cache.heads = 1;
    cache.head_dim = d;
    cache.block_stride = block_stride;
    cache.slot_stride = slot_stride;
    cache.head_stride = d;
    if (!cache.check().empty()) {
      ++refused;
      continue;
    }
    ++valid;
    KvCacheView<float> k_pe = cache, lat = cache;  // as mla_rope cuts them
    k_pe.data = cache.data + latent;
    k_pe.head_dim = k_pe.head_stride = rope_dim;
    lat.head_dim = lat.head_stride = latent;
    ASSERT_EQ(k_pe.check(), "") << "case " << i;
    ASSERT_EQ(lat.check(), "") << "case " << i;
    ASSERT_FALSE(rotary::detail::caches_share_rows(k_pe, lat)) << "case " << i;
    ASSERT_FALSE(rotary::detail::caches_share_rows(lat, k_pe)) << "case " << i;
  }
  EXPECT_GT(valid, 2000);
  EXPECT_GT(refused, 2000);
}
