// fuzz_fusion's case: what one input describes (the fused call's types, shapes, layouts, slots,
// positions, Rope, norms, scales, entry point and threads), how it is drawn from the fuzz bytes, and
// the buffers and cache views it runs on. Included by fuzz_fusion.cpp alone (anonymous namespace: the
// harness's own functions, as coverage_ignore.txt names them).
//
// Each input describes one fused call: vector type T (f32, f64, f16, bf16), cache element type E
// (T, f32, f16, bf16, int8 with per-row scales, fp8 e4m3 with per-head scales; f64 vectors only
// into f64 or f32 caches), norm weight type W (T or f32), pairing, an even head_dim of 2..40 and a
// partial or full rotary_dim, a scaling rule now and then, 0..4 q heads and 0..4 kv heads (at least
// one of them), 0..24 tokens, q in place or out of place, k rotated into its own output (in place
// or not) and/or into the K cache, v into the V cache (its own row length) or no v, q, k and v as
// separate padded views (token- or head-major) or as head slices of one QKV buffer, K and V caches
// in the paged, paged_hnd, sequences_bhsd or sequences_bshd layout (padded strides now and then;
// the V cache with a geometry of its own now and then), slots as a slot_mapping (distinct slots,
// padding of any negative value, sometimes a duplicate, an out-of-range value or the wrong count)
// or as int32/int64 cache_seqlens (sometimes overflowing a sequence, negative or huge), positions
// contiguous or int32/int64 lists (sometimes beyond the Rope's cache, negative, or the wrong count),
// a range-cached, offset-range-cached or cache-free Rope, the norms (none, RMSNorm with w or 1 + w,
// the weightless L2 norm after RoPE, both, any eps including invalid ones, a missing weight now and
// then), deinterleaving (DeepSeek's order), fp8 scales from sane to subnormal or invalid, scales
// missing or given where they must not be, the entry point (rope_prologue, or rope_kv_write /
// qk_norm_rope / qkv_split_rope when the case has their shape, or mla_rope: the case reshaped into
// DeepSeek MLA's, q heads of nope_dim + rope_dim values with the rope slice rotated in place, one
// k_pe head and its latent of any length written side by side into one cache row [latent | k_pe],
// interleaved pairs in now and then), and no ParallelFor, a serial chunked
// one or a two-thread rotary::ThreadPool with the minimum work per thread lowered so that even a few
// tokens split. Input values come from a PRNG seeded by the input: O(1), spread exponents, special
// values (NaN, infinities, subnormals, near-overflow) or raw bit patterns.
#ifndef ROTARY_TESTS_FUZZ_FUSION_CASE_HPP
#define ROTARY_TESTS_FUZZ_FUSION_CASE_HPP

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "fuzz_support.hpp"

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
using rotary_test::TypeTag;
using namespace rotary_fuzz;

// ---- the case ---------------------------------------------------------------------------------

enum class CacheLayout { paged, paged_hnd, sequences_bhsd, sequences_bshd };
const char* const kLayoutNames[] = {"paged", "paged_hnd", "sequences_bhsd", "sequences_bshd"};
enum class NormMode { none, rms, unit_offset, l2_after, rms_and_l2 };
const char* const kNormNames[] = {"none", "rms", "rms 1+w", "l2_after", "rms+l2"};
enum class SlotMode { mapping, seqlens32, seqlens64 };
enum class PosMode { contiguous, int32, int64 };
enum class RopeMode { range0, range, cache_free };
enum class Threads { none, chunked, pool };
enum class Entry { prologue, rope_kv_write, qk_norm_rope, qkv_split_rope, mla_rope };
const char* const kEntryNames[] = {"rope_prologue", "rope_kv_write", "qk_norm_rope", "qkv_split_rope", "mla_rope"};
constexpr int kEntries = 5;

// A [tokens, heads] view of rows of `dim` elements in T buffer `buf`, first element at `off`.
struct Tensor {
  int buf = -1;
  std::ptrdiff_t off = 0;
  StridedLayout l{};
  std::int64_t dim = 0;
};

struct CacheGeom {
  CacheLayout layout = CacheLayout::paged;
  std::int64_t blocks = 1, block_size = 1, heads = 1, head_dim = 1;
  std::ptrdiff_t block_stride = 0, slot_stride = 0, head_stride = 0;
  std::size_t elements = 0;
  int scales = 0;  // 0: as the type needs, 1: the wrong way (given for float, missing for int8/fp8)
  std::ptrdiff_t offset = 0;  // of the view's first element in its buffer (MLA: k_pe behind the latent)

  void finish(Source& in) {
    const bool pad = in.ConsumeIntegralInRange<int>(0, 3) == 0;
    const auto gap = [&] { return pad ? in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 3) : 0; };
    if (layout == CacheLayout::paged || layout == CacheLayout::sequences_bshd) {  // [blocks, slots, heads, d]
      head_stride = head_dim + gap();
      slot_stride = heads * head_stride + gap();
      block_stride = block_size * slot_stride + gap();
    } else {  // [blocks, heads, slots, d]
      slot_stride = head_dim + gap();
      head_stride = block_size * slot_stride + gap();
      block_stride = heads * head_stride + gap();
    }
    elements = static_cast<std::size_t>((blocks - 1) * block_stride + (block_size - 1) * slot_stride +
                                        (heads - 1) * head_stride + head_dim) +
               kSlack;
  }
  std::string describe() const {
    char b[160];
    std::snprintf(b, sizeof b, "%s blocks %lld x %lld slots, %lld heads x %lld (strides %td %td %td)%s",
                  kLayoutNames[static_cast<int>(layout)], static_cast<long long>(blocks),
                  static_cast<long long>(block_size), static_cast<long long>(heads), static_cast<long long>(head_dim),
                  block_stride, slot_stride, head_stride, scales ? " scales the wrong way" : "");
    return b;
  }
};

struct NormChoice {
  float eps = 1e-6f;
  bool null_weight = false;
};

struct Case {
  std::string dtype, cache_type, weight_type;
  rotary::RotarySpec spec;
  std::string rule = "spec";
  RopeMode rope_mode = RopeMode::range0;
  std::int64_t cache_lo = 0, cache_hi = 0;
  std::int64_t tokens = 0, q_heads = 0, kv_heads = 0, v_dim = 0;
  bool in_place_q = true, k_out = false, k_in_place = false, has_v = false, has_k_cache = false, qkv = false;
  Tensor q_in, q_out, k, k_o, v;
  std::vector<std::size_t> buffer_sizes;  // T buffers, in elements
  CacheGeom kc, vc;
  // MLA (entry mla_rope): q_in's rows are the rope slices of heads of nope + head_dim values; the
  // K and V caches (kc, vc) are views of one cache, mc (rows [v_dim | head_dim]), held in vc's buffer
  bool mla = false;
  std::int64_t nope = 0;
  CacheGeom mc;
  // slots
  SlotMode slot_mode = SlotMode::mapping;
  std::vector<std::int64_t> mapping;
  std::vector<std::int32_t> seqlens32;
  std::vector<std::int64_t> seqlens64;
  std::int64_t batch = 0, per_seq = 0;
  // positions
  PosMode pos_mode = PosMode::contiguous;
  std::int64_t start = 0;
  std::vector<std::int32_t> p32;
  std::vector<std::int64_t> p64;
  // norms
  NormMode norm = NormMode::none;
  NormChoice q_norm, k_norm, l2;
  bool deinterleave = false;
  // how
  Entry entry = Entry::prologue;
  Threads threads = Threads::none;
  int parts = 0;
  std::int64_t min_bytes = 0;
  int values = 0;
  std::uint64_t seed = 0;

  bool pre_norm() const { return norm == NormMode::rms || norm == NormMode::unit_offset || norm == NormMode::rms_and_l2; }
  bool post_norm() const { return norm == NormMode::l2_after || norm == NormMode::rms_and_l2; }
  NormWeight convention() const { return norm == NormMode::unit_offset ? NormWeight::unit_offset : NormWeight::plain; }

  Slots slots() const {
    switch (slot_mode) {
      case SlotMode::seqlens32:
        return Slots::sequences(seqlens32.data(), batch, per_seq);
      case SlotMode::seqlens64:
        return Slots::sequences(seqlens64.data(), batch, per_seq);
      default:
        return Slots::mapping(mapping.data(), static_cast<std::int64_t>(mapping.size()));
    }
  }
  Positions positions() const {
    switch (pos_mode) {
      case PosMode::int32:
        return Positions(p32);
      case PosMode::int64:
        return Positions(p64);
      default:
        return Positions::contiguous(start);
    }
  }

  // The refusals only the fused call makes (see the header); "" if none.
  const char* fused_only_refusal() const {
    const bool rotates_q = q_heads > 0, rotates_k = kv_heads > 0;
    if (deinterleave && spec.pairing != Pairing::half_split) return "deinterleave with an interleaved rotator";
    if (deinterleave && pre_norm()) return "deinterleave with a norm before RoPE";
    if (rotates_k && !k_out && !has_k_cache) return "k without k output or K cache";
    if (rotates_k && has_k_cache && kc.head_dim != spec.head_dim) return "K cache head_dim is not the rotator's";
    // The weight of a norm whose tensor is there (an absent q's or k's weight is not read: a q-only
    // qk_norm_rope may leave k's null); both norms' eps are checked either way (below).
    if (pre_norm() && ((rotates_q && q_norm.null_weight) || (rotates_k && k_norm.null_weight)))
      return "norm before RoPE without weight";
    const auto bad = [](float eps) { return !(std::isfinite(eps) && eps > 0.0f); };
    if (pre_norm() && ((!rotates_q && bad(q_norm.eps)) || (!rotates_k && bad(k_norm.eps))))
      return "invalid eps of the norm of an absent q or k";
    return "";
  }

  std::string describe() const {
    std::string s;
    char b[600];
    std::snprintf(b, sizeof b,
                  "%s vectors -> %s cache, %s weights; %s head_dim %lld rotary_dim %lld rule %s; rope %s [%lld, %lld); "
                  "tokens %lld q_heads %lld kv_heads %lld v %s (dim %lld); q %s, k out %s, qkv buffer %d; "
                  "norm %s (eps q %g%s k %g%s l2 %g) deinterleave %d; entry %s; threads %d (parts %d, min bytes "
                  "%lld); values %d",
                  dtype.c_str(), cache_type.c_str(), weight_type.c_str(),
                  std::string(rotary::to_string(spec.pairing)).c_str(), static_cast<long long>(spec.head_dim),
                  static_cast<long long>(spec.effective_rotary_dim()), rule.c_str(),
                  rope_mode == RopeMode::cache_free ? "cache-free" : "cached", static_cast<long long>(cache_lo),
                  static_cast<long long>(cache_hi), static_cast<long long>(tokens), static_cast<long long>(q_heads),
                  static_cast<long long>(kv_heads), has_v ? "yes" : "no", static_cast<long long>(v_dim),
                  in_place_q ? "in place" : "out of place", k_out ? (k_in_place ? "in place" : "own") : "none", qkv,
                  kNormNames[static_cast<int>(norm)], static_cast<double>(q_norm.eps),
                  q_norm.null_weight ? " (null w)" : "", static_cast<double>(k_norm.eps),
                  k_norm.null_weight ? " (null w)" : "", static_cast<double>(l2.eps), deinterleave,
                  kEntryNames[static_cast<int>(entry)], static_cast<int>(threads), parts,
                  static_cast<long long>(min_bytes), values);
    s += b;
    const auto layout = [](const char* name, const Tensor& x) {
      char t[160];
      std::snprintf(t, sizeof t, "\n  %s: buffer %d off %td, %lld x %lld, strides %td %td, dim %lld", name, x.buf,
                    x.off, static_cast<long long>(x.l.tokens), static_cast<long long>(x.l.heads), x.l.token_stride,
                    x.l.head_stride, static_cast<long long>(x.dim));
      return std::string(t);
    };
    if (q_heads > 0) s += layout("q in", q_in) + layout("q out", q_out);
    if (kv_heads > 0) s += layout("k", k);
    if (k_out) s += layout("k out", k_o);
    if (has_v) s += layout("v", v);
    if (mla) s += "\n  MLA nope_dim " + std::to_string(nope) + ", cache: " + mc.describe();
    if (has_k_cache) s += "\n  K cache: " + kc.describe();
    if (has_v) s += "\n  V cache: " + vc.describe();
    s += "\n  slots: ";
    if (slot_mode == SlotMode::mapping) {
      s += "mapping";
      for (const auto x : mapping) s += " " + std::to_string(x);
    } else {
      s += slot_mode == SlotMode::seqlens32 ? "cache_seqlens32" : "cache_seqlens64";
      s += " batch " + std::to_string(batch) + " x " + std::to_string(per_seq) + ":";
      if (slot_mode == SlotMode::seqlens32) {
        for (const auto x : seqlens32) s += " " + std::to_string(x);
      } else {
        for (const auto x : seqlens64) s += " " + std::to_string(x);
      }
    }
    s += "\n  positions: ";
    if (pos_mode == PosMode::contiguous) {
      s += "from " + std::to_string(start);
    } else {
      s += pos_mode == PosMode::int32 ? "int32" : "int64";
      for (const auto x : p64) s += " " + std::to_string(x);
    }
    return s;
  }
};

// ---- drawing the case -------------------------------------------------------------------------

Tensor place(Source& in, Case& c, std::int64_t heads, std::int64_t dim) {
  Tensor x;
  x.dim = dim;
  const std::ptrdiff_t row = dim + (in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<int>(1, 4) : 0);
  const std::ptrdiff_t pad = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<int>(1, 3) : 0;
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0) {  // token-major
    x.l = {c.tokens, heads, heads * row + pad, row};
  } else {  // head-major
    x.l = {c.tokens, heads, row, std::max<std::int64_t>(c.tokens, 1) * row + pad};
  }
  x.off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 3);
  x.buf = static_cast<int>(c.buffer_sizes.size());
  c.buffer_sizes.push_back(
      static_cast<std::size_t>(x.off + span_of(c.tokens, heads, x.l.token_stride, x.l.head_stride, dim) + kSlack));
  return x;
}

CacheGeom draw_cache_geom(Source& in, const Case& c, std::int64_t heads, std::int64_t head_dim) {
  CacheGeom g;
  g.layout = static_cast<CacheLayout>(in.ConsumeIntegralInRange<int>(0, 3));
  g.heads = heads;
  g.head_dim = head_dim;
  if (c.slot_mode == SlotMode::mapping) {
    g.block_size = in.ConsumeIntegralInRange<std::int64_t>(1, 8);
    g.blocks = (c.tokens + g.block_size - 1) / g.block_size + in.ConsumeIntegralInRange<std::int64_t>(0, 2);
    if (g.blocks == 0) g.blocks = 1;
  } else {
    g.block_size = c.per_seq + in.ConsumeIntegralInRange<std::int64_t>(0, 4);
    g.blocks = c.batch + (in.ConsumeIntegralInRange<int>(0, 15) == 0 ? -1 : in.ConsumeIntegralInRange<int>(0, 1));
    if (g.block_size == 0) g.block_size = 1;
    if (g.blocks <= 0) g.blocks = 1;
  }
  g.scales = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? 1 : 0;
  g.finish(in);
  return g;
}

// Reshapes a drawn case into DeepSeek MLA's (entry mla_rope), keeping its tokens, q heads, slots,
// positions, the cache's blocks and layout, deinterleaving (interleaved pairs in) and threads: q in
// place as rope slices of heads of nope + head_dim values (padded token stride now and then), one
// k_pe head, the latent as v (its own length), no norm, no k output; the cache one head of
// [latent | k_pe] rows, viewed as the V cache (the latent) and the K cache (k_pe behind it).
void make_mla(Source& in, Case& c) {
  const std::int64_t d = c.spec.head_dim;
  c.entry = Entry::mla_rope;
  c.mla = true;
  c.kv_heads = 1;
  c.has_k_cache = c.has_v = true;
  c.k_out = c.k_in_place = c.qkv = false;
  c.in_place_q = true;
  c.norm = NormMode::none;
  c.nope = in.ConsumeIntegralInRange<std::int64_t>(0, 8);
  c.buffer_sizes.clear();
  Tensor q;
  q.buf = 0;
  q.dim = d;
  const std::ptrdiff_t head = c.nope + d;
  const std::ptrdiff_t pad = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<int>(1, 3) : 0;
  q.l = {c.tokens, c.q_heads, c.q_heads * head + pad, head};
  const std::ptrdiff_t base = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 3);
  q.off = base + c.nope;
  c.buffer_sizes.push_back(static_cast<std::size_t>(base + std::max<std::int64_t>(c.tokens, 1) * q.l.token_stride +
                                                    head + kSlack));
  c.q_in = c.q_out = q;
  c.k = place(in, c, 1, d);
  c.v_dim = in.ConsumeIntegralInRange<std::int64_t>(1, 40);
  c.v = place(in, c, 1, c.v_dim);
  c.mc = c.kc;  // the blocks the slots were drawn for
  c.mc.heads = 1;
  c.mc.head_dim = c.v_dim + d;
  c.mc.finish(in);
  c.vc = c.mc;
  c.vc.head_dim = c.v_dim;
  c.kc = c.mc;
  c.kc.head_dim = d;
  c.kc.offset = c.v_dim;
}

void draw_slots(Source& in, Case& c) {
  if (c.slot_mode == SlotMode::mapping) {
    // Distinct slots of the K cache (the V cache may be smaller), some padding; rarely a duplicate,
    // an out-of-range slot, or one value too many / too few.
    const std::int64_t slots = c.kc.blocks * c.kc.block_size;
    std::vector<std::int64_t> all(static_cast<std::size_t>(slots));
    for (std::int64_t s = 0; s < slots; ++s) all[static_cast<std::size_t>(s)] = s;
    for (std::int64_t i = slots - 1; i > 0; --i)
      std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(in.ConsumeIntegralInRange<std::int64_t>(0, i))]);
    const bool sorted = in.ConsumeBool();  // consecutive slots: the fused call's runs
    const std::int64_t first = in.ConsumeIntegralInRange<std::int64_t>(0, std::max<std::int64_t>(slots - c.tokens, 0));
    const int padding = in.ConsumeIntegralInRange<int>(0, 3);  // about one token in 2^padding
    for (std::int64_t t = 0; t < c.tokens; ++t) {
      std::int64_t s = sorted ? first + t : (t < slots ? all[static_cast<std::size_t>(t)] : t);
      if (padding > 0 && in.ConsumeIntegralInRange<int>(0, (1 << padding) - 1) == 0) {
        static const std::int64_t pads[] = {-1, -2, -7, std::numeric_limits<std::int64_t>::min()};
        s = pads[in.ConsumeIntegralInRange<int>(0, 3)];
      }
      c.mapping.push_back(s);
    }
    if (c.tokens > 0 && in.ConsumeIntegralInRange<int>(0, 15) == 0) {
      const auto i = static_cast<std::size_t>(in.ConsumeIntegralInRange<std::int64_t>(0, c.tokens - 1));
      const auto j = static_cast<std::size_t>(in.ConsumeIntegralInRange<std::int64_t>(0, c.tokens - 1));
      c.mapping[i] = c.mapping[j];  // a duplicate, unless i == j or padding
    }
    if (c.tokens > 0 && in.ConsumeIntegralInRange<int>(0, 15) == 0) {
      const std::int64_t outside[] = {slots, slots + 1, slots + 5, std::numeric_limits<std::int64_t>::max()};
      c.mapping[static_cast<std::size_t>(in.ConsumeIntegralInRange<std::int64_t>(0, c.tokens - 1))] =
          outside[in.ConsumeIntegralInRange<int>(0, 3)];
    }
    if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
      if (!c.mapping.empty() && in.ConsumeBool()) {
        c.mapping.pop_back();
      } else {
        c.mapping.push_back(0);
      }
    }
    return;
  }
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t room = c.kc.block_size - c.per_seq;
    std::int64_t s = in.ConsumeIntegralInRange<std::int64_t>(0, std::max<std::int64_t>(room, 0));
    if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
      static const std::int64_t bad[] = {-1, 1, 2, std::numeric_limits<std::int32_t>::max(),
                                         std::numeric_limits<std::int32_t>::min(),
                                         std::numeric_limits<std::int64_t>::max(),
                                         std::numeric_limits<std::int64_t>::min()};
      const std::int64_t x = bad[in.ConsumeIntegralInRange<int>(0, 6)];
      s = x == 1 || x == 2 ? room + x : x;  // just past the sequence's slots, or far out
    }
    c.seqlens64.push_back(s);
    c.seqlens32.push_back(static_cast<std::int32_t>(
        std::clamp<std::int64_t>(s, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max())));
  }
  if (c.slot_mode == SlotMode::seqlens32)  // the two arrays hold the same values
    for (std::size_t b = 0; b < c.seqlens64.size(); ++b) c.seqlens64[b] = c.seqlens32[b];
}

void draw_positions(Source& in, Case& c) {
  c.pos_mode = static_cast<PosMode>(in.ConsumeIntegralInRange<int>(0, 2));
  const bool free = c.rope_mode == RopeMode::cache_free;
  // Mostly inside the cache; now and then past its end, below its start, or (cache-free) huge.
  const auto draw = [&](bool allow_huge) -> std::int64_t {
    const int k = in.ConsumeIntegralInRange<int>(0, 31);
    if (k == 0) return -in.ConsumeIntegralInRange<std::int64_t>(1, 3);
    if (k == 1) return c.cache_hi + in.ConsumeIntegralInRange<std::int64_t>(0, 2);
    if (k == 2 && c.cache_lo > 0) return c.cache_lo - 1;
    if (k == 3 && free && allow_huge)
      return in.ConsumeIntegralInRange<std::int64_t>(0, std::numeric_limits<std::int64_t>::max() / 2);
    return in.ConsumeIntegralInRange<std::int64_t>(c.cache_lo, std::max(c.cache_lo, c.cache_hi - 1));
  };
  if (c.pos_mode == PosMode::contiguous) {
    c.start = draw(true);
    if (c.start >= c.cache_lo && c.start < c.cache_hi && in.ConsumeIntegralInRange<int>(0, 3) != 0)
      c.start = std::min(c.start, std::max(c.cache_lo, c.cache_hi - c.tokens));  // the run fits
    return;
  }
  std::int64_t n = c.tokens;
  if (in.ConsumeIntegralInRange<int>(0, 31) == 0) n += in.ConsumeBool() || n == 0 ? 1 : -1;
  for (std::int64_t t = 0; t < n; ++t) {
    std::int64_t p = draw(c.pos_mode == PosMode::int64);
    if (c.pos_mode == PosMode::int32) p = std::min<std::int64_t>(p, std::numeric_limits<std::int32_t>::max());
    c.p32.push_back(static_cast<std::int32_t>(p));
    c.p64.push_back(p);
  }
}

float draw_eps(Source& in) {
  static const float eps[] = {1e-6f,
                              1e-5f,
                              1e-6f,
                              1.0f,
                              1e-30f,
                              std::numeric_limits<float>::denorm_min(),
                              0.0f,
                              -1e-6f,
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity()};
  return in.ConsumeIntegralInRange<int>(0, 7) != 0 ? eps[in.ConsumeIntegralInRange<int>(0, 2)]
                                                   : eps[in.ConsumeIntegralInRange<int>(3, 9)];
}

// Everything but the values: returns false if the case is not worth running (a Rope that cannot be
// built).
bool draw_case(Source& in, Case& c) {
  rotary::RotarySpec& s = c.spec;
  s.pairing = in.ConsumeBool() ? Pairing::interleaved : Pairing::half_split;
  s.head_dim = 2 * in.ConsumeIntegralInRange<std::int64_t>(1, 20);
  s.rotary_dim = in.ConsumeBool() ? 0 : 2 * in.ConsumeIntegralInRange<std::int64_t>(1, s.head_dim / 2);
  static const double bases[] = {10000.0, 500000.0, 1e6, 100.0, 2.0};
  s.base = bases[in.ConsumeIntegralInRange<int>(0, 4)];
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    (void)fuzz_frequencies(in, s, &c.rule);
  }
  c.rope_mode = static_cast<RopeMode>(in.ConsumeIntegralInRange<int>(0, 2));
  if (c.rope_mode == RopeMode::range) c.cache_lo = in.ConsumeIntegralInRange<std::int64_t>(0, 100);
  c.cache_hi = c.cache_lo + in.ConsumeIntegralInRange<std::int64_t>(0, 64);
  if (c.rope_mode == RopeMode::cache_free) c.cache_hi = c.cache_lo + 1000;

  c.slot_mode = in.ConsumeIntegralInRange<int>(0, 2) == 0
                    ? static_cast<SlotMode>(in.ConsumeIntegralInRange<int>(1, 2))
                    : SlotMode::mapping;
  if (c.slot_mode == SlotMode::mapping) {
    c.tokens = in.ConsumeIntegralInRange<std::int64_t>(0, 24);
  } else {
    c.batch = in.ConsumeIntegralInRange<std::int64_t>(0, 4);
    c.per_seq = in.ConsumeIntegralInRange<std::int64_t>(0, 6);
    c.tokens = c.batch * c.per_seq;
  }
  c.q_heads = in.ConsumeIntegralInRange<std::int64_t>(0, 4);
  c.kv_heads = in.ConsumeIntegralInRange<std::int64_t>(c.q_heads == 0 ? 1 : 0, 4);
  const std::int64_t d = s.head_dim;
  c.has_k_cache = c.kv_heads > 0 && in.ConsumeIntegralInRange<int>(0, 31) != 0;
  c.k_out = c.kv_heads > 0 && (!c.has_k_cache || in.ConsumeIntegralInRange<int>(0, 2) == 0);
  if (c.kv_heads > 0 && !c.has_k_cache && in.ConsumeIntegralInRange<int>(0, 31) == 0) c.k_out = false;
  c.k_in_place = c.k_out && in.ConsumeBool();
  c.has_v = c.kv_heads > 0 && in.ConsumeIntegralInRange<int>(0, 3) != 0;
  c.v_dim = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<std::int64_t>(1, 40) : d;
  c.in_place_q = in.ConsumeBool();

  c.norm = static_cast<NormMode>(in.ConsumeIntegralInRange<int>(0, 4));
  c.q_norm.eps = draw_eps(in);
  c.k_norm.eps = in.ConsumeBool() ? c.q_norm.eps : draw_eps(in);
  c.l2.eps = draw_eps(in);
  c.q_norm.null_weight = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  c.k_norm.null_weight = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  c.deinterleave = in.ConsumeIntegralInRange<int>(0, 4) == 0;
  if (c.deinterleave && in.ConsumeIntegralInRange<int>(0, 7) != 0) {  // mostly the valid combination
    s.pairing = Pairing::half_split;
    if (c.pre_norm()) c.norm = c.post_norm() ? NormMode::l2_after : NormMode::none;
  }

  // One QKV buffer: q in place, k into the cache only, v of head_dim.
  c.qkv = c.in_place_q && c.kv_heads > 0 && c.has_v && !c.k_out && in.ConsumeIntegralInRange<int>(0, 2) == 0;
  if (c.qkv) {
    c.v_dim = d;
    const std::ptrdiff_t row = (c.q_heads + 2 * c.kv_heads) * d + (in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<int>(1, 5));
    const std::ptrdiff_t off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 3);
    const auto slice = [&](std::int64_t heads, std::int64_t first) {
      Tensor x;
      x.buf = 0;
      x.off = off + first * d;
      x.l = {c.tokens, heads, row, d};
      x.dim = d;
      return x;
    };
    c.q_in = c.q_out = slice(c.q_heads, 0);
    c.k = slice(c.kv_heads, c.q_heads);
    c.v = slice(c.kv_heads, c.q_heads + c.kv_heads);
    c.buffer_sizes.push_back(static_cast<std::size_t>(off + std::max<std::int64_t>(c.tokens, 1) * row + kSlack));
  } else {
    if (c.q_heads > 0) {
      c.q_in = place(in, c, c.q_heads, d);
      c.q_out = c.in_place_q ? c.q_in : place(in, c, c.q_heads, d);
    }
    if (c.kv_heads > 0) c.k = place(in, c, c.kv_heads, d);
    if (c.k_out) c.k_o = c.k_in_place ? c.k : place(in, c, c.kv_heads, d);
    if (c.has_v) c.v = place(in, c, c.kv_heads, c.v_dim);
  }

  // Caches: the K cache's heads and head_dim are k's (rarely not), the V cache like it or its own.
  if (c.has_k_cache) {
    const std::int64_t heads = c.kv_heads + (in.ConsumeIntegralInRange<int>(0, 63) == 0 ? 1 : 0);
    const std::int64_t hd = in.ConsumeIntegralInRange<int>(0, 63) == 0 ? in.ConsumeIntegralInRange<std::int64_t>(1, 41) : d;
    c.kc = draw_cache_geom(in, c, heads, hd);
  } else {
    c.kc = draw_cache_geom(in, c, std::max<std::int64_t>(c.kv_heads, 1), d);  // slots are drawn for it
  }
  if (c.has_v) {
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
      c.vc = draw_cache_geom(in, c, c.kv_heads, c.v_dim);
    } else {
      c.vc = c.kc;
      c.vc.heads = c.kv_heads;
      c.vc.head_dim = c.v_dim;
      c.vc.scales = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? 1 : 0;
      c.vc.finish(in);
    }
  }
  draw_slots(in, c);
  draw_positions(in, c);

  // The entry point: a named op where the case has its shape (else rope_prologue).
  const auto named = static_cast<Entry>(in.ConsumeIntegralInRange<int>(0, 4));
  const bool same_eps = c.q_norm.eps == c.k_norm.eps || (std::isnan(c.q_norm.eps) && std::isnan(c.k_norm.eps));
  const bool qk_norm_only = (c.norm == NormMode::rms || c.norm == NormMode::unit_offset) && same_eps && !c.deinterleave;
  switch (named) {
    case Entry::rope_kv_write:
      if (!c.qkv && (c.in_place_q || c.q_heads == 0) && !c.k_out && c.norm == NormMode::none && !c.deinterleave &&
          c.kv_heads > 0)
        c.entry = named;
      break;
    case Entry::qk_norm_rope:
      if (!c.qkv && (c.in_place_q || c.q_heads == 0) && (c.kv_heads == 0 || c.k_in_place) && !c.has_k_cache &&
          !c.has_v && qk_norm_only && c.q_heads > 0)
        c.entry = named;
      break;
    case Entry::qkv_split_rope:
      if (c.qkv && c.has_k_cache && !c.deinterleave && (c.norm == NormMode::none || qk_norm_only)) c.entry = named;
      break;
    case Entry::mla_rope:
      make_mla(in, c);
      break;
    default:
      break;
  }

  c.threads = static_cast<Threads>(in.ConsumeIntegralInRange<int>(0, 2));
  c.parts = in.ConsumeIntegralInRange<int>(2, 4);
  c.min_bytes = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::int64_t>(1, 4096);
  c.values = in.ConsumeIntegralInRange<int>(0, 3);
  c.seed = in.ConsumeIntegral<std::uint64_t>();
  return true;
}

// ---- values and buffers -----------------------------------------------------------------------

template <class T>
T draw_value(Rng& rng, int mode) {
  if (mode == 3) return from_bits<T>(static_cast<typename Bits<T>::U>(rng.next()));  // raw bits
  return random_value<T>(rng, static_cast<ValueMode>(mode));
}

template <class E>
struct CacheBuf {
  std::vector<E> data;
  std::vector<float> scales;
};

template <class T, class E>
struct State {
  std::vector<Buffer<T>> bufs;
  CacheBuf<E> kc, vc;
};

template <class E>
CacheBuf<E> make_cache(const CacheGeom& g, Rng& rng, int mode) {
  CacheBuf<E> b;
  b.data.resize(g.elements);
  std::vector<unsigned char> junk(g.elements * sizeof(E));
  for (auto& x : junk) x = static_cast<unsigned char>(rng.next());
  if (!junk.empty()) std::memcpy(static_cast<void*>(b.data.data()), junk.data(), junk.size());
  constexpr rotary::CacheScales kind = rotary::cache_scales_of<E>();
  if (kind == rotary::CacheScales::per_row) {
    b.scales.resize(static_cast<std::size_t>(g.blocks * g.block_size * g.heads));
    for (auto& s : b.scales) s = from_bits<float>(static_cast<std::uint32_t>(rng.next()));  // junk
  } else if (kind == rotary::CacheScales::per_head) {
    for (std::int64_t h = 0; h < g.heads; ++h) {
      float s = 1.0f;
      switch (rng.below(mode == 3 ? 6 : 4)) {
        case 0: s = 1.0f; break;
        case 1: s = 0.002f; break;  // saturates
        case 2: s = static_cast<float>(std::ldexp(0.5 + rng.uniform(), static_cast<int>(rng.below(20)) - 10)); break;
        case 3: s = 0.01f * static_cast<float>(h + 1); break;
        case 4: s = std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + rng.below(8)); break;
        default: s = from_bits<float>(static_cast<std::uint32_t>(rng.next())); break;  // maybe invalid
      }
      b.scales.push_back(s);
    }
  }
  return b;
}

template <class E>
KvCacheView<E> view_of(const CacheGeom& g, CacheBuf<E>& b) {
  KvCacheView<E> v;  // the fields directly: an invalid one reaches the calls (both check it)
  v.data = b.data.data() + g.offset;
  v.blocks = g.blocks;
  v.block_size = g.block_size;
  v.heads = g.heads;
  v.head_dim = g.head_dim;
  v.block_stride = g.block_stride;
  v.slot_stride = g.slot_stride;
  v.head_stride = g.head_stride;
  static float stray = 1.0f;
  const bool wants = rotary::cache_scales_of<E>() != rotary::CacheScales::none;
  v.scales = wants != (g.scales != 0) ? (b.scales.empty() ? &stray : b.scales.data()) : nullptr;
  return v;
}

template <class T>
T* ptr(std::vector<Buffer<T>>& bufs, const Tensor& x) {
  return x.buf < 0 ? nullptr : bufs[static_cast<std::size_t>(x.buf)].data.data() + x.off;
}

}  // namespace

#endif  // ROTARY_TESTS_FUZZ_FUSION_CASE_HPP
