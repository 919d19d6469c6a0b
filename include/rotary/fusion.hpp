// rotary — fused attention prologues: RoPE with its neighbours in one pass over q, k and v.
//
// An engine's attention prologue is several passes over the same rows: a per-head norm of q and k
// (Qwen3, Gemma 3), RoPE, the key and value rows copied (converted, quantized) into the KV cache.
// Each call here does them all while a token's rows are in L1:
//
//   Prologue<T, E, W>               what one call does: q (rotated to q_out, in place allowed), k
//                                   (rotated to k_out and/or into k_cache), v (into v_cache), the
//                                   slots, a RMSNorm of q and k before RoPE (weight w or 1 + w), a
//                                   weightless RMS ("L2") norm after it (Llama 4), DeepSeek's
//                                   interleaved-in / half-split-out order
//   rope_prologue(rope, call, positions[, parallel])           checked; rope_prologue_unchecked
// and the named ops, each a Prologue filled in:
//   rope_kv_write(rope, q, q_layout, k, k_layout, v, v_layout, positions, slots, k_cache, v_cache)
//   qk_norm_rope(rope, q, q_layout, k, k_layout, QkNorm, positions)       (in place)
//   qkv_split_rope(rope, qkv, tokens, q_heads, kv_heads, positions, slots, k_cache, v_cache)
//   mla_rope(rope, q, MlaQuery, k_pe, latent, latent_dim, positions, slots, cache, interleaved_in)
//
// The result is, bit for bit, what rotary's unfused ops give one after another (rms_norm,
// apply_strided, write_kv_cache, then l2 norm): the same row functions and the same kernels in the
// same order, rounding to T between steps exactly where the unfused ops store a T tensor. So the
// fused ops are bit-identical across ISAs (scalar, AVX2, AVX-512, NEON) like every kernel.
// Rotation positions and storage slots are separate arguments: a token's position is where RoPE
// rotates it, its slot is where the cache stores it.
//
// Checked (rope_prologue and the named ops) refuse with rotary::error: shapes that disagree,
// head_dim other than the rotator's, slots outside the cache or written twice, sequence offsets that
// overflow a sequence, caches overlapping the vectors or each other, scales missing or given for a
// float cache, norm weights missing, eps <= 0, deinterleaving with an interleaved rotator, a rotator
// whose keys get rows of their own (xPos). The *_unchecked variants assert in debug builds only.
#ifndef ROTARY_FUSION_HPP
#define ROTARY_FUSION_HPP

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "apply.hpp"
#include "detail/aligned_buffer.hpp"
#include "detail/cpu.hpp"
#include "kv_cache.hpp"

namespace rotary {

// y = x / sqrt(mean(x^2) + eps) * w, or * (1 + w) (Gemma's convention, weights stored as w - 1).
enum class NormWeight { plain, unit_offset };

// A per-head RMSNorm over head_dim (q and k each have their own weight, head_dim values each).
// weight == nullptr: weightless.
template <class W>
struct HeadNorm {
  const W* weight = nullptr;
  float eps = 1e-6f;
  NormWeight convention = NormWeight::plain;
  bool enabled = false;

  static HeadNorm rms(const W* weight, float eps, NormWeight convention = NormWeight::plain) noexcept {
    return {weight, eps, convention, true};
  }
  static HeadNorm weightless(float eps) noexcept { return {nullptr, eps, NormWeight::plain, true}; }
};

namespace detail {

template <class W>
std::string check_norm(const char* name, const HeadNorm<W>& n, bool needs_weight_ok = true) {
  if (!n.enabled) return {};
  if (!(finite(n.eps) && n.eps > 0.0f))
    return concat(name, " eps (", n.eps, ") must be finite and > 0 (a zero row would give NaN)");
  if (!needs_weight_ok && n.weight != nullptr) return concat(name, " takes no weight");
  return {};
}

}  // namespace detail

// The QK-norm weights of a model (Qwen3, Gemma 3: q_norm / k_norm, one weight of head_dim each).
template <class W>
struct QkNorm {
  const W* q_weight;
  const W* k_weight;
  float eps;
  NormWeight convention = NormWeight::plain;
};

// What one fused call does. Layouts are [tokens, heads] rows (StridedLayout, element strides); a
// tensor with heads == 0 is absent. The rotator's head_dim is the row length of q and k; v rows
// are v_cache.head_dim long. k is rotated into k_out (if k_out_layout.heads > 0) and into k_cache
// (if k_cache.data) at each token's slot; v is written to v_cache (if v_cache.data).
template <class T, class E = T, class W = T>
struct Prologue {
  const T* q = nullptr;
  StridedLayout q_layout{};
  T* q_out = nullptr;  // may be q with the same layout: in place
  StridedLayout q_out_layout{};
  const T* k = nullptr;
  StridedLayout k_layout{};
  T* k_out = nullptr;
  StridedLayout k_out_layout{};
  const T* v = nullptr;
  StridedLayout v_layout{};
  KvCacheView<E> k_cache{};
  KvCacheView<E> v_cache{};
  Slots slots = Slots::mapping(nullptr, 0);
  HeadNorm<W> q_norm{};  // before RoPE
  HeadNorm<W> k_norm{};
  HeadNorm<W> l2_after{};  // weightless, after RoPE, q and k (Llama 4's qk_norm)
  bool deinterleave = false;  // rows (x0, x1), (x2, x3).. in, rotated and stored half-split (DeepSeek HF)

  // The parts of the common calls.
  void rotate_q_in_place(T* x, const StridedLayout& l) noexcept {
    q = x;
    q_layout = l;
    q_out = x;
    q_out_layout = l;
  }
  void write_kv(const T* k_in, const StridedLayout& kl, const T* v_in, const StridedLayout& vl,
                const KvCacheView<E>& kc, const KvCacheView<E>& vc, const Slots& s) noexcept {
    k = k_in;
    k_layout = kl;
    v = v_in;
    v_layout = vl;
    k_cache = kc;
    v_cache = vc;
    slots = s;
  }
  void norm_before_rope(const QkNorm<W>& n) noexcept {
    q_norm = HeadNorm<W>::rms(n.q_weight, n.eps, n.convention);
    k_norm = HeadNorm<W>::rms(n.k_weight, n.eps, n.convention);
  }

  std::int64_t tokens() const noexcept {
    return q_layout.heads > 0 ? q_layout.tokens : k_layout.heads > 0 ? k_layout.tokens : v_layout.tokens;
  }
  bool has_k_cache() const noexcept { return k_cache.data != nullptr; }
  bool has_v_cache() const noexcept { return v_cache.data != nullptr; }
};

namespace detail {

// floor(x / d) and x - d * floor(x / d), in [0, d), for d > 0 (C++ division truncates toward zero).
inline std::pair<std::int64_t, std::int64_t> floor_divmod(std::int64_t x, std::int64_t d) noexcept {
  std::int64_t q = x / d;
  std::int64_t r = x % d;
  if (r < 0) {
    r += d;
    --q;
  }
  return {q, r};
}

// One block of a cache in bytes: the axes with more than one row ((count, stride), inner first; an
// axis of one row places nothing and its stride is unchecked), the row length and the block's span.
struct BlockAxes {
  std::array<std::pair<std::int64_t, std::int64_t>, 2> axes{};
  int n = 0;
  std::int64_t row = 0;
  std::int64_t span = 0;

  template <class E>
  explicit BlockAxes(const KvCacheView<E>& c) noexcept {
    const auto es = static_cast<std::int64_t>(sizeof(E));
    row = c.head_dim * es;
    span = row;
    for (const auto& [count, stride] : {std::pair<std::int64_t, std::int64_t>{c.block_size, c.slot_stride},
                                        {c.heads, c.head_stride}}) {
      if (count <= 1) continue;
      axes[static_cast<std::size_t>(n++)] = {count, stride * es};
      span += (count - 1) * stride * es;  // the view's span fits PTRDIFF_MAX bytes (checked)
    }
    if (n == 2 && axes[0].second > axes[1].second) std::swap(axes[0], axes[1]);
  }
  bool same_axes(const BlockAxes& o) const noexcept { return n == o.n && axes == o.axes; }
};

// Whether a row of one block shares a byte with a row of another block with the same axes, starting
// `off` bytes after it; rows of la and lb bytes. Exact, at most two candidates per axis:
// The rows start at L = {sum i_k s_k : 0 <= i_k < n_k} and off + L. Rows at x and off + y share a
// byte iff -lb < off + y - x < la, so the blocks share one iff off - d is in (-lb, la) for some
// d = x - y = sum m_k s_k, |m_k| < n_k (every such m_k occurs). Take the outermost axis (n, s) left
// in the sum; the axes inside it give |d'| <= W = sum (n_k - 1) s_k, so off - m s must lie in
// (-lb - W, la + W). Each view's rows nest (an axis' stride is at least the span of the axes inside
// it plus a row of the view), so s >= W + la and s >= W + lb. With off = q s + r, 0 <= r < s:
// m <= q - 1 gives off - m s >= s >= la + W, m >= q + 2 gives off - m s < -s <= -lb - W; only
// m = q (off - m s = r) and m = q + 1 (r - s) remain, each if |m| < n, and the same question for
// the axes inside with r or r - s. Every offset stays within (-s, s) of the axis above: no overflow.
inline bool block_rows_meet(const BlockAxes& x, int axis, std::int64_t off, std::int64_t la,
                            std::int64_t lb) noexcept {
  if (axis < 0) return -lb < off && off < la;
  const auto [count, stride] = x.axes[static_cast<std::size_t>(axis)];
  const auto [q, r] = floor_divmod(off, stride);
  return (q > -count && q < count && block_rows_meet(x, axis - 1, r, la, lb)) ||
         (q + 1 > -count && q + 1 < count && block_rows_meet(x, axis - 1, r - stride, la, lb));
}

// Whether two caches' rows share memory (both views checked). Caches apart: O(1). Caches that repeat
// with the same block stride (FlashInfer's [blocks, 2, block_size, heads, D] pages, k and v heads
// alternating in one slot row [heads, 2, D], MLA's [latent | k_pe] side by side): a block of b meets
// at most two blocks of a, found by one division; two blocks of the same slot and head axes (any row
// lengths, the layouts above) are compared in O(1) (block_rows_meet), others by merging their rows
// in address order, O(block_size x heads). Any other overlap (block counts or strides that differ)
// counts as shared.
template <class E>
bool caches_share_rows(const KvCacheView<E>& a, const KvCacheView<E>& b) noexcept {
  if (!overlap(a.extent(), b.extent())) return false;
  if (a.blocks != b.blocks || (a.blocks > 1 && a.block_stride != b.block_stride)) return true;
  const BlockAxes xa(a);
  const BlockAxes xb(b);
  // b's block j starts delta - k * period bytes after a's block j + k, |k| < blocks; the extents
  // overlap, so -(b's extent) < delta < a's extent
  const std::int64_t delta = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(b.data) -
                                                       reinterpret_cast<std::uintptr_t>(a.data));
  const auto blocks_meet = [&](std::int64_t off) {
    if (off >= xa.span || off <= -xb.span) return false;  // these two blocks' spans are apart
    if (xa.same_axes(xb)) return block_rows_meet(xa, xa.n - 1, off, xa.row, xb.row);
    const auto block_rows = [](const KvCacheView<E>& c) {
      return StridedRows(c.data, c.head_dim, {{"slot", c.block_size, c.slot_stride}, {"head", c.heads, c.head_stride}});
    };
    const StridedRows ra = block_rows(a);
    StridedRows rb = block_rows(b);
    rb.base = ra.base + static_cast<std::uintptr_t>(off);
    SharedRows shared;
    return first_shared(ra, rb, shared);
  };
  if (a.blocks == 1) return blocks_meet(delta);
  // The blocks repeat every period bytes and each fits its period (span <= period, checked). With
  // delta = q * period + r, 0 <= r < period, b's blocks start r bytes after a's blocks q further on
  // (k = q) and r - period after those q + 1 further on; k = q - 1 would put them period + r >= span_a
  // past a's, k = q + 2 end them by r - 2 period + span_b < 0 before. These two are the k of
  // ceil((delta - span_a + 1) / period) <= k <= floor((delta + span_b - 1) / period), kept if |k| <
  // blocks; r and r - period need no product k * period.
  const std::int64_t period = a.block_stride * static_cast<std::int64_t>(sizeof(E));
  const std::int64_t reach = a.blocks - 1;
  const auto [q, r] = floor_divmod(delta, period);
  return (q >= -reach && q <= reach && blocks_meet(r)) ||
         (q + 1 >= -reach && q + 1 <= reach && blocks_meet(r - period));
}

// The rows a prologue writes for q and k (no heads: empty).
template <class T, class E, class W>
StridedRows q_out_rows(const Prologue<T, E, W>& c, std::int64_t head_dim) noexcept {
  return token_rows(c.q_out, head_dim, c.tokens(), c.q_out_layout.token_stride, c.q_layout.heads,
                    c.q_out_layout.head_stride);
}
template <class T, class E, class W>
StridedRows k_out_rows(const Prologue<T, E, W>& c, std::int64_t head_dim) noexcept {
  return token_rows(c.k_out, head_dim, c.tokens(), c.k_out_layout.token_stride, c.k_layout.heads,
                    c.k_out_layout.head_stride);
}

// "" or which buffer the call writes (outputs, caches, int8 scales) overlaps which read (positions,
// a caller's table, the slots).
template <class T, class E, class W>
std::string check_prologue_reads(const Prologue<T, E, W>& c, std::int64_t head_dim, const ReadExtents& reads) {
  const Extent q_out = q_out_rows(c, head_dim).extent();
  const Extent k_out = c.k_out_layout.heads > 0 ? k_out_rows(c, head_dim).extent() : Extent{};
  const std::pair<const char*, Extent> written[] = {{"q output", q_out},
                                                    {"k output", k_out},
                                                    {"k_cache", c.k_cache.extent()},
                                                    {"v_cache", c.v_cache.extent()},
                                                    {"k_cache's scales", c.k_cache.written_scales_extent()},
                                                    {"v_cache's scales", c.v_cache.written_scales_extent()}};
  for (const ReadExtent& r : reads) {
    if (r.name == nullptr) continue;
    for (const auto& w : written)
      if (overlap(w.second, r.x))
        return concat(w.first, " and ", r.name, " share memory (", r.name, " is read while the call writes ",
                      w.first, ")");
  }
  return {};
}

template <class T, class E, class W>
std::string check_prologue(const Prologue<T, E, W>& c, std::int64_t head_dim, std::int64_t rotary_dim,
                           Pairing pairing) {
  const std::int64_t tokens = c.tokens();
  const bool q = c.q_layout.heads > 0;
  const bool k = c.k_layout.heads > 0;
  const bool v = c.v_layout.heads > 0;
  const bool k_out = c.k_out_layout.heads > 0;
  if (!q && !k && !v) return "fused call has no q, k or v (every layout has 0 heads)";
  if (c.q_layout.heads < 0 || c.k_layout.heads < 0 || c.v_layout.heads < 0 || c.k_out_layout.heads < 0)
    return "fused call: heads must be >= 0";
  if (tokens < 0) return concat("tokens (", tokens, ") must be >= 0");
  for (const auto& [name, l] : {std::pair<const char*, const StridedLayout&>{"q", c.q_layout},
                                {"k", c.k_layout}, {"v", c.v_layout}})
    if (l.heads > 0 && l.tokens != tokens)
      return concat(name, " has ", l.tokens, " tokens but the call has ", tokens);
  if (q && (c.q_out_layout.heads != c.q_layout.heads || c.q_out_layout.tokens != tokens))
    return concat("q output is ", c.q_out_layout.tokens, " tokens x ", c.q_out_layout.heads, " heads, q is ",
                  tokens, " x ", c.q_layout.heads);
  if (k_out && (!k || c.k_out_layout.heads != c.k_layout.heads || c.k_out_layout.tokens != tokens))
    return concat("k output is ", c.k_out_layout.tokens, " tokens x ", c.k_out_layout.heads, " heads, k is ",
                  c.k_layout.tokens, " x ", c.k_layout.heads);
  if (k && !k_out && !c.has_k_cache()) return "k is given but neither k output nor k_cache";
  if (!k && c.has_k_cache()) return "k_cache is given but no k";
  if (v != c.has_v_cache()) return v ? "v is given but no v_cache" : "v_cache is given but no v";
  if (c.deinterleave && pairing != Pairing::half_split)
    return "deinterleave (pairs in interleaved order, out in half-split order) needs a half_split rotator";
  if (c.deinterleave && (c.q_norm.enabled || c.k_norm.enabled))
    return "deinterleave with a q/k norm before RoPE is not supported (norm the rows, then call again)";
  // Each step returns its message as soon as it has one (no string assigned on the way: at decode
  // size the checks are a sizeable share of a fused call, so they must stay cheap).
  if (std::string m = check_norm("q_norm", c.q_norm); !m.empty()) return m;
  if (std::string m = check_norm("k_norm", c.k_norm); !m.empty()) return m;
  if (std::string m = check_norm("l2_after", c.l2_after, false); !m.empty()) return m;
  if (c.q_norm.enabled && c.q_norm.weight == nullptr) return "q_norm has no weight (use l2 for none)";
  if (c.k_norm.enabled && c.k_norm.weight == nullptr) return "k_norm has no weight (use l2 for none)";

  // q and k through the driver's own checks (views, in place or disjoint, q outputs apart from k).
  KernelArgs<T> a;
  a.tokens = tokens;
  a.head_dim = head_dim;
  a.rotary_dim = rotary_dim;
  a.pairing = pairing;
  const auto stream = [](const T* in, const StridedLayout& il, T* out, const StridedLayout& ol) {
    return make_stream(in, il, out, ol);
  };
  if (q) a.q = stream(c.q, c.q_layout, c.q_out, c.q_out_layout);
  if (k) a.k = k_out ? stream(c.k, c.k_layout, c.k_out, c.k_out_layout)
                     : stream(c.k, c.k_layout, const_cast<T*>(c.k), c.k_layout);  // read only
  if (!q) std::swap(a.q, a.k);
  if (q || k) {
    if (std::string m = check_call(a, q ? "q" : "k"); !m.empty()) return m;
  }
  if (v) {
    if (std::string m = check_view("v", c.v, tokens, c.v_layout.heads, c.v_layout.token_stride,
                                   c.v_layout.head_stride, c.v_cache.head_dim);
        !m.empty())
      return m;
    // an output written while v is read: apart, or other heads of the same token rows (packed qkv)
    const StridedRows v_rows =
        token_rows(c.v, c.v_cache.head_dim, tokens, c.v_layout.token_stride, c.v_layout.heads, c.v_layout.head_stride);
    const auto clashes = [&](const T* out, std::int64_t heads, const StridedLayout& ol) {
      return !token_rows(out, head_dim, tokens, ol.token_stride, heads, ol.head_stride)
                  .apart(v_rows);
    };
    if (q && clashes(c.q_out, c.q_layout.heads, c.q_out_layout)) return "q output and v share memory";
    if (k_out && clashes(c.k_out, c.k_layout.heads, c.k_out_layout)) return "k output and v share memory";
  }
  if (c.has_k_cache()) {
    if (c.k_cache.head_dim != head_dim)
      return concat("k_cache head_dim (", c.k_cache.head_dim, ") is not the rotator's (", head_dim, ")");
    // (k's view was checked above with head_dim, which is k_cache's)
    if (std::string m = check_cache_write("k", c.k, c.k_layout, c.slots, "k_cache", c.k_cache, true, false);
        !m.empty())
      return m;
  }
  if (c.has_v_cache()) {  // the slots once where both caches have the same slots and blocks; v's view above
    const bool same_slots = c.has_k_cache() && c.k_cache.slots() == c.v_cache.slots() &&
                            c.k_cache.block_size == c.v_cache.block_size;
    if (std::string m = check_cache_write("v", c.v, c.v_layout, c.slots, "v_cache", c.v_cache, !same_slots, false);
        !m.empty())
      return m;
  }
  // Every input and output apart from every cache (k from k_cache and v from v_cache were checked
  // above; q in place once); the two caches apart, or side by side in the same rows (MLA).
  const bool q_in_place = q && c.q == c.q_out && c.q_layout.token_stride == c.q_out_layout.token_stride &&
                          c.q_layout.head_stride == c.q_out_layout.head_stride;
  for (const auto* cache : {&c.k_cache, &c.v_cache}) {
    if (cache->data == nullptr) continue;
    const bool k_own = cache == &c.k_cache;
    const char* cname = k_own ? "k_cache" : "v_cache";
    const auto apart = [&](const char* name, const T* p, const StridedLayout& l, std::int64_t n, bool written) {
      return check_cache_apart(name, p, l, n, cname, *cache, written);
    };
    if (q) {
      if (std::string m = apart("q output", c.q_out, c.q_out_layout, head_dim, true); !m.empty()) return m;
    }
    if (k_out) {
      if (std::string m = apart("k output", c.k_out, c.k_out_layout, head_dim, true); !m.empty()) return m;
    }
    if (q && !q_in_place) {
      if (std::string m = apart("q", c.q, c.q_layout, head_dim, false); !m.empty()) return m;
    }
    if (k && !k_own) {
      if (std::string m = apart("k", c.k, c.k_layout, head_dim, false); !m.empty()) return m;
    }
    if (v && k_own) {
      if (std::string m = apart("v", c.v, c.v_layout, c.v_cache.head_dim, false); !m.empty()) return m;
    }
  }
  // norm weights are read for every row: apart from everything the call writes (int8's scales, not
  // fp8's, which are only read)
  for (const auto& named : {std::pair<const char*, const HeadNorm<W>&>{"q_norm weight", c.q_norm},
                            {"k_norm weight", c.k_norm}}) {
    const char* wname = named.first;  // (not a structured binding: C++17 lambdas cannot capture those)
    const HeadNorm<W>& norm = named.second;
    if (!norm.enabled || norm.weight == nullptr) continue;
    const Extent w = StridedRows(norm.weight, head_dim, {}).extent();
    const auto hits = [&](const char* other, const char* part, const Extent& x) {
      return overlap(w, x) ? concat(wname, " and ", other, part, " share memory (the call writes them)")
                           : std::string();
    };
    if (std::string m = q ? hits("q output", "", q_out_rows(c, head_dim).extent()) : std::string();
        !m.empty())
      return m;
    if (std::string m = k_out ? hits("k output", "", k_out_rows(c, head_dim).extent()) : std::string();
        !m.empty())
      return m;
    for (const auto& [cname, cache] : {std::pair<const char*, const KvCacheView<E>&>{"k_cache", c.k_cache},
                                       {"v_cache", c.v_cache}}) {
      if (std::string m = hits(cname, "", cache.extent()); !m.empty()) return m;
      if (std::string m = hits(cname, "'s scales", cache.written_scales_extent()); !m.empty()) return m;
    }
  }
  if (c.has_k_cache() && c.has_v_cache()) {
    if (caches_share_rows(c.k_cache, c.v_cache))
      return "k_cache and v_cache share memory (a row of one overlaps a row of the other)";
    if (overlap(c.k_cache.scales_extent(), c.v_cache.extent())) return "k_cache's scales and v_cache share memory";
    if (overlap(c.v_cache.scales_extent(), c.k_cache.extent())) return "v_cache's scales and k_cache share memory";
    // int8 scales are written: one array each (fp8's per-head scales are only read and may be shared)
    if (cache_scales_of<E>() == CacheScales::per_row && overlap(c.k_cache.scales_extent(), c.v_cache.scales_extent()))
      return "k_cache and v_cache share scales (an int8 cache writes a scale per row: give each its own)";
  }
  return {};
}

// Rows for tokens [begin, end): the source's table, or rows made per block as the driver makes them
// (anchored at multiples of kBlock, so the bits do not depend on the threads' ranges).
template <class C, class Src, class F>
void for_row_blocks(const Src& src, std::int64_t rotary_dim, std::int64_t begin, std::int64_t end, const F& f) {
  if constexpr (Src::kTable) {
    f(src.rows(), begin, end);
  } else {
    constexpr std::int64_t kBlock = Src::kBlock;
    const std::int64_t first = begin / kBlock * kBlock;
    ScratchBuffer<C> rows(static_cast<std::size_t>(std::min(kBlock, end - first) * rotary_dim));
    auto scratch = src.scratch();
    for (std::int64_t t = first; t < end; t += kBlock) {
      const std::int64_t from = std::max(t, begin);
      const std::int64_t stop = std::min(end, t + kBlock);
      src.fill(t, from, stop, rows.data(), nullptr, scratch);
      f(RowSource<C>::block(rows.data(), rotary_dim, t), from, stop);
    }
  }
}

// DeepSeek's HF order: a row's first rotary_dim values (x0, x1), (x2, x3).. become the half-split
// pairs (x0, x2, .., x1, x3, ..); the rest is copied.
template <class T>
void deinterleave_row(const T* x, T* y, std::int64_t head_dim, std::int64_t rotary_dim) noexcept {
  const std::int64_t h = rotary_dim / 2;
  for (std::int64_t j = 0; j < h; ++j) {
    y[j] = x[2 * j];
    y[h + j] = x[2 * j + 1];
  }
  for (std::int64_t i = rotary_dim; i < head_dim; ++i) y[i] = x[i];
}

template <class T>
NormKernel<T> select_norm_kernel() {
  const NormKernel<T> k = norm_kernel_for<T>(active_isa());
  return k != nullptr ? k : &scalar::norm_rows<T>;
}

// A HeadNorm ready for the kernels: its weight in the compute type, 1 + w already added for Gemma's
// convention (in the compute type, as HF's Gemma3RMSNorm does), eps as double.
template <class T>
struct PreparedNorm {
  bool enabled = false;
  const compute_t<T>* borrowed = nullptr;  // the caller's weights, where they are already the factors
  std::vector<compute_t<T>> owned;         // else the factors made from them; both empty: weightless
  double eps = 0.0;

  PreparedNorm() = default;
  template <class W>
  PreparedNorm(const HeadNorm<W>& n, std::int64_t d) : enabled(n.enabled), eps(static_cast<double>(n.eps)) {
    using C = compute_t<T>;
    if (!n.enabled || n.weight == nullptr) return;
    if constexpr (std::is_same_v<W, C>) {
      // plain weights of the compute type are used where they are (no copy: at decode size the two
      // copies and their allocations are a noticeable part of a QK-norm + RoPE call)
      if (n.convention == NormWeight::plain) {
        borrowed = n.weight;
        return;
      }
    }
    owned.resize(static_cast<std::size_t>(d));
    for (std::int64_t i = 0; i < d; ++i) {
      const auto w = static_cast<C>(to_compute(n.weight[i]));
      owned[static_cast<std::size_t>(i)] = n.convention == NormWeight::unit_offset ? C(1) + w : w;
    }
  }
  const compute_t<T>* weight() const noexcept { return owned.empty() ? borrowed : owned.data(); }
  // rows of d values from in (stride in_stride) to out (stride out_stride).
  void run(NormKernel<T> k, const T* in, std::ptrdiff_t in_stride, T* out, std::ptrdiff_t out_stride,
           std::int64_t rows, std::int64_t d) const noexcept {
    NormArgs<T> a;
    a.in = in;
    a.in_stride = in_stride;
    a.out = out;
    a.out_stride = out_stride;
    a.rows = rows;
    a.n = d;
    a.inv_n = strict_div(1.0, static_cast<double>(d));
    a.weight = weight();
    a.eps = eps;
    k(a);
  }
};

// What a call needs once, shared by its threads: kernels and prepared norms.
template <class T>
struct PrologueKernels {
  Kernel<T> rotate;
  NormKernel<T> norm;
  CacheRowKernel<T> cache_row;  // rows into an int8, fp8 or 16-bit cache of another type
  PreparedNorm<T> q_norm;
  PreparedNorm<T> k_norm;
  PreparedNorm<T> l2_after;
};

// Tokens of a call in chunks: a run of tokens whose cache slots are consecutive in one block (or
// padding alike) goes through the rotation kernel in one call, its key rows written straight into
// the cache when nothing comes between (same type, no norm after RoPE). A norm before RoPE writes
// its rows into the rows RoPE writes, which are then rotated in place while still in cache, in
// chunks of up to norm_chunk_bytes() of rows: 32 KiB on Intel CPUs, where the second pass is
// cheapest from L1, and 192 KiB elsewhere, where smaller chunks' per-chunk calls cost more than L1
// saves. No chunk size changes a result: each row is normalized, rounded, then rotated.
// Deinterleaving fills per-thread scratch rows, and steps after RoPE (the L2 norm, a conversion or
// quantization into the cache) read its rows from scratch rows too, up to kScratchBytes of them per
// chunk: chunks as long as the cache blocks cut them beat short ones.
template <class T, class E, class W>
class PrologueRunner {
 public:
  static constexpr std::int64_t kScratchBytes = std::int64_t{128} * 1024;
  static std::int64_t norm_chunk_bytes() noexcept {
    return std::int64_t{cpu_features().genuine_intel ? 32 : 192} * 1024;
  }
  static constexpr std::int64_t kMaxChunk = 64;  // tokens

  // tokens: how many this runner will see (its scratch rows are never longer; at decode, one token's)
  PrologueRunner(const Prologue<T, E, W>& c, const PrologueKernels<T>& kernels, std::int64_t head_dim,
                 std::int64_t rotary_dim, Pairing pairing, std::int64_t tokens)
      : c_(c), kern_(kernels), d_(head_dim), r_(rotary_dim), pairing_(pairing) {
    pre_q_ = c.q_layout.heads > 0 && c.deinterleave;
    pre_k_ = c.k_layout.heads > 0 && c.deinterleave;
    k_direct_ = std::is_same_v<E, T> && !c.l2_after.enabled;
    k_scratch_out_ = c.k_layout.heads > 0 && c.k_out_layout.heads == 0 && !k_direct_;
    block_size_ = c.has_k_cache() ? c.k_cache.block_size : c.has_v_cache() ? c.v_cache.block_size : 0;
    const auto row_bytes = [this](std::int64_t heads) { return heads * d_ * static_cast<std::int64_t>(sizeof(T)); };
    const auto tokens_in = [](std::int64_t budget, std::int64_t bytes) {
      return std::clamp<std::int64_t>(budget / std::max<std::int64_t>(bytes, 1), 1, kMaxChunk);
    };
    if (c.q_norm.enabled || c.k_norm.enabled) {
      chunk_ = tokens_in(norm_chunk_bytes(), row_bytes(c.q_layout.heads + c.k_layout.heads));
    } else if (pre_q_ || pre_k_ || k_scratch_out_) {
      chunk_ = tokens_in(kScratchBytes, row_bytes((pre_q_ ? c.q_layout.heads : 0) + (pre_k_ ? c.k_layout.heads : 0) +
                                                  (k_scratch_out_ ? c.k_layout.heads : 0)));
    }
    if (chunk_ > 0) chunk_ = std::clamp<std::int64_t>(tokens, 1, chunk_);
    // RoPE reads the caller's rows itself (no norm or deinterleaving before it) from beyond the caches
    const StridedLayout& ql = c.q_layout;
    const StridedLayout& kl = c.k_layout;
    if (!c.q_norm.enabled && !c.k_norm.enabled && !pre_q_ && !pre_k_)
      prefetch_ = prefetch_pays<T>(tokens, rotary_dim, {ql.heads, ql.token_stride, ql.head_stride},
                                   {kl.heads, kl.token_stride, kl.head_stride});
    // scratch rows for chunk_ tokens (a norm before RoPE and deinterleaving are never combined)
    // (uninitialized, on the stack at decode sizes: a decode step allocates nothing)
    if (pre_q_) q_in_.reset(static_cast<std::size_t>(chunk_ * c.q_layout.heads * d_));
    if (pre_k_) k_in_.reset(static_cast<std::size_t>(chunk_ * c.k_layout.heads * d_));
    if (k_scratch_out_) k_out_.reset(static_cast<std::size_t>(chunk_ * c.k_layout.heads * d_));
  }

  void run(const RowSource<compute_t<T>>& rows, std::int64_t t0, std::int64_t t1) {
    const std::int64_t per_chunk = chunk_ > 0 ? chunk_ : t1 - t0;
    std::int64_t t = t0;
    while (t < t1) {
      const std::int64_t slot = slot_of(t);
      const std::int64_t limit = std::min(t1, t + per_chunk);
      std::int64_t e = t + 1;
      if (block_size_ > 0) {
        for (; e < limit; ++e) {
          const std::int64_t next = slot_of(e);
          const bool both_padding = slot < 0 && next < 0;
          const bool consecutive = slot >= 0 && next == slot + (e - t) && next % block_size_ != 0;
          if (!both_padding && !consecutive) break;
        }
      } else {
        e = limit;
      }
      chunk(rows, t, e, slot);
      t = e;
    }
  }

 private:
  std::int64_t slot_of(std::int64_t t) const noexcept {
    return block_size_ > 0 ? c_.slots.slot(t, block_size_) : -1;
  }

  // Input rows of tokens [t, t + n): the caller's, or scratch rows deinterleaved first.
  StreamArgs<T> input(const T* x, const StridedLayout& l, bool pre, ScratchBuffer<T>& scratch, std::int64_t t,
                      std::int64_t n) const noexcept {
    StreamArgs<T> s;
    s.heads = l.heads;
    const T* first = x + t * l.token_stride;
    if (!pre) {
      s.in = first;
      s.in_token_stride = l.token_stride;
      s.in_head_stride = l.head_stride;
      return s;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      T* rows = scratch.data() + i * l.heads * d_;
      const T* src = first + i * l.token_stride;
      for (std::int64_t h = 0; h < l.heads; ++h) deinterleave_row(src + h * l.head_stride, rows + h * d_, d_, r_);
    }
    s.in = scratch.data();
    s.in_token_stride = l.heads * d_;
    s.in_head_stride = d_;
    return s;
  }

  static void set_out(StreamArgs<T>& s, T* out, std::ptrdiff_t token_stride, std::ptrdiff_t head_stride) noexcept {
    s.out = out;
    s.out_token_stride = token_stride;
    s.out_head_stride = head_stride;
  }

  // A norm before RoPE: the n tokens' rows normalized from the stream's input into its output rows,
  // which RoPE then rotates in place (the unfused composition's rounding to T included).
  void norm_into_out(StreamArgs<T>& s, const PreparedNorm<T>& norm, std::int64_t n) const noexcept {
    if (!norm.enabled) return;
    for (std::int64_t i = 0; i < n; ++i)
      norm.run(kern_.norm, s.in + i * s.in_token_stride, s.in_head_stride, s.out_row(i, 0), s.out_head_stride,
               s.heads, d_);
    s.in = s.out;
    s.in_token_stride = s.out_token_stride;
    s.in_head_stride = s.out_head_stride;
  }

  // Tokens [t, e): k_cache slots slot, slot + 1, .. (all >= 0), or all padding (slot < 0); runs are cut
  // by the k cache's slots when there is one, else by the v cache's.
  void chunk(const RowSource<compute_t<T>>& rows, std::int64_t t, std::int64_t e, std::int64_t slot) {
    const std::int64_t n = e - t;
    const bool q = c_.q_layout.heads > 0;
    const bool k_out = c_.k_out_layout.heads > 0;
    const bool k_cache = c_.has_k_cache() && slot >= 0;
    const bool k = c_.k_layout.heads > 0 && (k_out || k_cache);
    const std::int64_t hk = c_.k_layout.heads;
    if (q || k) {
      KernelArgs<T> a;
      a.tokens = n;
      a.head_dim = d_;
      a.rotary_dim = r_;
      a.pairing = pairing_;
      a.rows = rows.skip(t);
      a.prefetch = prefetch_;
      if (q) {
        a.q = input(c_.q, c_.q_layout, pre_q_, q_in_, t, n);
        set_out(a.q, c_.q_out + t * c_.q_out_layout.token_stride, c_.q_out_layout.token_stride,
                c_.q_out_layout.head_stride);
        norm_into_out(a.q, kern_.q_norm, n);
      }
      if (k) {
        a.k = input(c_.k, c_.k_layout, pre_k_, k_in_, t, n);
        if (k_out)
          set_out(a.k, c_.k_out + t * c_.k_out_layout.token_stride, c_.k_out_layout.token_stride,
                  c_.k_out_layout.head_stride);
        else if (k_direct_)
          set_out(a.k, reinterpret_cast<T*>(c_.k_cache.row(slot, 0)), c_.k_cache.slot_stride, c_.k_cache.head_stride);
        else
          set_out(a.k, k_out_.data(), hk * d_, d_);
        norm_into_out(a.k, kern_.k_norm, n);
      }
      const StreamArgs<T> q_stream = a.q;
      const StreamArgs<T> k_stream = a.k;
      if (!q) std::swap(a.q, a.k);
      kern_.rotate(a, 0, n);
      for (std::int64_t i = 0; i < n; ++i) {
        if (kern_.l2_after.enabled) {
          if (q)
            kern_.l2_after.run(kern_.norm, q_stream.out_row(i, 0), q_stream.out_head_stride, q_stream.out_row(i, 0),
                               q_stream.out_head_stride, c_.q_layout.heads, d_);
          if (k)
            kern_.l2_after.run(kern_.norm, k_stream.out_row(i, 0), k_stream.out_head_stride, k_stream.out_row(i, 0),
                               k_stream.out_head_stride, hk, d_);
        }
        if (k_cache && !(k_direct_ && !k_out))
          for (std::int64_t h = 0; h < hk; ++h)
            store_row(c_.k_cache.row(slot + i, h), k_stream.out_row(i, h), d_, c_.k_cache.row_scale(slot + i, h),
                      inverse_head_scale(c_.k_cache, h), kern_.cache_row);
      }
    }
    if (c_.has_v_cache())  // v's own slots: per-sequence slots depend on the cache's block size
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t v_slot = c_.slots.slot(t + i, c_.v_cache.block_size);
        if (v_slot < 0) continue;
        for (std::int64_t h = 0; h < c_.v_layout.heads; ++h)
          store_row(c_.v_cache.row(v_slot, h),
                    c_.v + (t + i) * c_.v_layout.token_stride + h * c_.v_layout.head_stride, c_.v_cache.head_dim,
                    c_.v_cache.row_scale(v_slot, h), inverse_head_scale(c_.v_cache, h), kern_.cache_row);
      }
  }

  const Prologue<T, E, W>& c_;
  const PrologueKernels<T>& kern_;
  std::int64_t d_;
  std::int64_t r_;
  Pairing pairing_;
  std::int64_t block_size_ = 0;
  bool pre_q_ = false;
  bool pre_k_ = false;
  bool k_direct_ = false;
  bool k_scratch_out_ = false;
  Ahead prefetch_ = Ahead::none;  // KernelArgs::prefetch for every chunk
  std::int64_t chunk_ = 0;  // tokens per chunk at most (0: no limit)
  ScratchBuffer<T> q_in_;  // deinterleaved q rows
  ScratchBuffer<T> k_in_;  // deinterleaved k rows
  ScratchBuffer<T> k_out_;  // rotated k rows on their way into a cache of another type (or the L2 norm)
};

template <class R, class T, class E, class W>
void prologue(bool checked, const R& r, const Prologue<T, E, W>& c, const rotator_positions_t<R>& p,
              const ParallelFor& parallel) {
  require(checked, [&] { return check_prologue(c, r.head_dim(), r.rotary_dim(), r.pairing()); });
  const std::int64_t tokens = c.tokens();
  const bool rotates = c.q_layout.heads > 0 || c.k_layout.heads > 0;
  rotator_traits<R>::with_rows(r, p, Direction::forward, [&](const auto& src) {
    using Src = std::decay_t<decltype(src)>;
    if constexpr (!Src::kTable) {
      require(checked, [&] {
        return src.separate_key_rows() && c.k_layout.heads > 0
                   ? std::string("fused prologue: this rotator gives keys rows of their own (xPos); use apply_qk")
                   : std::string();
      });
    }
    // the positions (when something is rotated), then what the call writes apart from what it reads
    require(checked, [&] {
      std::string m = rotates ? src.check(tokens, c.q_layout.heads > 0 && c.k_layout.heads > 0) : std::string();
      if (!m.empty()) return m;
      ReadExtents reads = rotates ? reads_of(src, tokens) : ReadExtents{};
      if (c.has_k_cache() || c.has_v_cache()) reads.back() = ReadExtent{"the slots", c.slots.values_extent()};
      return check_prologue_reads(c, r.head_dim(), reads);
    });
    PrologueKernels<T> kernels;
    kernels.rotate = select_kernel<T>();
    kernels.norm = select_norm_kernel<T>();
    kernels.cache_row = select_cache_row_kernel<T>();
    kernels.q_norm = PreparedNorm<T>(c.q_norm, r.head_dim());
    kernels.k_norm = PreparedNorm<T>(c.k_norm, r.head_dim());
    kernels.l2_after = PreparedNorm<T>(c.l2_after, r.head_dim());
    const std::int64_t rotary_dim = r.rotary_dim();
    const std::int64_t per_token =
        ((c.q_layout.heads + c.k_layout.heads) * r.head_dim() + c.v_layout.heads * c.v_cache.head_dim) * 2 *
        static_cast<std::int64_t>(sizeof(T));
    for_token_ranges(tokens, per_token, parallel, [&](std::int64_t begin, std::int64_t end) {
      PrologueRunner<T, E, W> runner(c, kernels, r.head_dim(), rotary_dim, r.pairing(), end - begin);
      if (!rotates) {  // v only: no rows needed
        runner.run(RowSource<compute_t<T>>{}, begin, end);
        return;
      }
      for_row_blocks<compute_t<T>>(src, rotary_dim, begin, end,
                                   [&runner](const RowSource<compute_t<T>>& rows, std::int64_t from,
                                             std::int64_t stop) { runner.run(rows, from, stop); });
    });
  });
}

}  // namespace detail

// ---- entry points -----------------------------------------------------------------------------------

template <class R, class E, class W, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void rope_prologue(const R& rope, const Prologue<detail::identity_t<T>, E, W>& call, const P& positions,
                   const ParallelFor& parallel = {}) {
  detail::prologue(true, rope, call, positions, parallel);
}

template <class R, class E, class W, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void rope_prologue_unchecked(const R& rope, const Prologue<detail::identity_t<T>, E, W>& call, const P& positions,
                             const ParallelFor& parallel = {}) {
  detail::prologue(false, rope, call, positions, parallel);
}

// RoPE + KV-cache write (vLLM's fused rotary + reshape_and_cache): q rotated in place (q_layout.heads
// == 0: no q), k rotated into k_cache and v copied into v_cache at each token's slot (slot < 0, a
// padding token: q is still rotated, nothing is written to the caches).
template <class R, class E, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void rope_kv_write(const R& rope, detail::identity_t<T>* q, const StridedLayout& q_layout,
                   const detail::identity_t<T>* k, const StridedLayout& k_layout, const detail::identity_t<T>* v,
                   const StridedLayout& v_layout, const P& positions, const Slots& slots,
                   const KvCacheView<E>& k_cache, const KvCacheView<E>& v_cache, const ParallelFor& parallel = {}) {
  Prologue<T, E, T> c;
  c.rotate_q_in_place(q, q_layout);
  c.write_kv(k, k_layout, v, v_layout, k_cache, v_cache, slots);
  detail::prologue(true, rope, c, positions, parallel);
}

// QK RMSNorm + RoPE in place (Qwen3 / Gemma 3 / OLMo-style prologue): every q and k head row
// normalized with its weight, rounded to T, rotated. k_layout.heads == 0: q only.
template <class R, class W, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void qk_norm_rope(const R& rope, detail::identity_t<T>* q, const StridedLayout& q_layout, detail::identity_t<T>* k,
                  const StridedLayout& k_layout, const QkNorm<W>& norm, const P& positions,
                  const ParallelFor& parallel = {}) {
  Prologue<T, T, W> c;
  c.rotate_q_in_place(q, q_layout);
  c.k = k;
  c.k_layout = k_layout;
  c.k_out = k;
  c.k_out_layout = k_layout;
  c.norm_before_rope(norm);
  detail::prologue(true, rope, c, positions, parallel);
}

// Fused QKV split: qkv is [tokens, (q_heads + 2 * kv_heads) * head_dim] as the projection writes it
// (row stride qkv_stride >= that; 0: dense). q is rotated in place, k rotated into k_cache, v copied
// into v_cache. norm: optional QK-norm before RoPE (nullptr: none).
template <class R, class E, class W = detail::rotator_value_t<R>, class T = detail::rotator_value_t<R>,
          class P = detail::rotator_positions_t<R>>
void qkv_split_rope(const R& rope, detail::identity_t<T>* qkv, std::int64_t tokens, std::int64_t q_heads,
                    std::int64_t kv_heads, const P& positions, const Slots& slots, const KvCacheView<E>& k_cache,
                    const KvCacheView<E>& v_cache, const QkNorm<W>* norm = nullptr, std::ptrdiff_t qkv_stride = 0,
                    const ParallelFor& parallel = {}) {
  const std::int64_t d = rope.head_dim();
  const std::ptrdiff_t row = qkv_stride != 0 ? qkv_stride : (q_heads + 2 * kv_heads) * d;
  Prologue<T, E, W> c;
  c.rotate_q_in_place(qkv, {tokens, q_heads, row, d});
  c.write_kv(qkv + q_heads * d, {tokens, kv_heads, row, d}, qkv + (q_heads + kv_heads) * d,
             {tokens, kv_heads, row, d}, k_cache, v_cache, slots);
  if (norm != nullptr) c.norm_before_rope(*norm);
  detail::prologue(true, rope, c, positions, parallel);
}

// DeepSeek MLA's query: heads of nope_dim + rope_dim values each ([tokens, heads, nope_dim +
// rope_dim], token stride token_stride, 0: dense); RoPE acts on the last rope_dim of each head.
struct MlaQuery {
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t nope_dim;
  std::ptrdiff_t token_stride = 0;
};

// DeepSeek MLA decoupled RoPE: the rope slice of every query head rotated in place; the shared k_pe
// head ([tokens, rope_dim], row stride k_pe_stride) rotated into `cache` behind the compressed
// latent ([tokens, latent_dim], row stride latent_stride), which is copied in front of it: cache
// slots are rows [latent_dim | rope_dim] (a KvCacheView of one head of latent_dim + rope_dim
// values). interleaved_in: HF DeepSeek's convention, pairs (x0, x1).. in, half-split order out (the
// rotator must be half_split). The rotator's head_dim is rope_dim.
template <class R, class E, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void mla_rope(const R& rope, detail::identity_t<T>* q, const MlaQuery& shape, const detail::identity_t<T>* k_pe,
              std::ptrdiff_t k_pe_stride, const detail::identity_t<T>* latent, std::ptrdiff_t latent_stride,
              const P& positions, const Slots& slots, const KvCacheView<E>& cache, bool interleaved_in,
              const ParallelFor& parallel = {}) {
  static_assert(cache_scales_of<E>() != CacheScales::per_row,
                "an int8 MLA cache would need one scale for the latent and one for k_pe per slot; use fp8 or 16-bit");
  if (std::string m = cache.check(); !m.empty()) throw error(detail::concat("MLA cache: ", m));
  const std::int64_t rope_dim = rope.head_dim();
  const std::int64_t latent_dim = cache.head_dim - rope_dim;
  if (cache.heads != 1 || latent_dim < 1)
    throw error(detail::concat("MLA cache must be one head of latent_dim + rope_dim (", rope_dim,
                               ") values per slot; it has ", cache.heads, " heads of ", cache.head_dim));
  const std::ptrdiff_t head = shape.nope_dim + rope_dim;
  Prologue<T, E, T> c;
  c.rotate_q_in_place(q + shape.nope_dim,
                      {shape.tokens, shape.heads, shape.token_stride != 0 ? shape.token_stride : shape.heads * head, head});
  c.write_kv(k_pe, {shape.tokens, 1, k_pe_stride != 0 ? k_pe_stride : rope_dim, rope_dim}, latent,
             {shape.tokens, 1, latent_stride != 0 ? latent_stride : latent_dim, latent_dim},
             KvCacheView<E>::strided(cache.data + latent_dim, cache.blocks, cache.block_size, 1, rope_dim,
                                     cache.block_stride, cache.slot_stride, rope_dim, cache.scales),
             KvCacheView<E>::strided(cache.data, cache.blocks, cache.block_size, 1, latent_dim, cache.block_stride,
                                     cache.slot_stride, latent_dim, cache.scales),
             slots);
  c.deinterleave = interleaved_in;
  detail::prologue(true, rope, c, positions, parallel);
}

// ---- the unfused ops (the reference composition, and for engines that need one step alone) --------

// Per-head RMSNorm: rows [tokens, heads] of n values of x into out (in place allowed: the same
// pointer and layout), with weight (n values) and eps; weight == nullptr: weightless (Llama 4's L2
// norm). Checked: views, eps > 0.
template <class T, class W>
void rms_norm(const T* x, const StridedLayout& x_layout, T* out, const StridedLayout& out_layout, std::int64_t n,
              const HeadNorm<W>& norm) {
  using detail::concat;
  const detail::StreamArgs<T> s = detail::make_stream(x, x_layout, out, out_layout);
  std::string m = detail::check_layouts("", x_layout, out_layout);
  if (m.empty() && n < 1) m = concat("row length (", n, ") must be >= 1");
  if (m.empty()) m = detail::check_stream("", s, x_layout.tokens, n, "x");
  if (m.empty()) m = detail::check_norm("norm", norm);
  if (m.empty() && !norm.enabled) m = "norm is not enabled (HeadNorm::rms or HeadNorm::weightless)";
  if (m.empty() && norm.weight != nullptr &&
      detail::overlap(detail::StridedRows(norm.weight, n, {}).extent(),
                      detail::token_rows(out, n, out_layout.tokens, out_layout.token_stride, out_layout.heads,
                                         out_layout.head_stride)
                          .extent()))
    m = "norm weight and out share memory (the weight is read for every row)";
  if (!m.empty()) throw error(m);
  const detail::PreparedNorm<T> prepared(norm, n);
  const detail::NormKernel<T> kernel = detail::select_norm_kernel<T>();
  for (std::int64_t t = 0; t < x_layout.tokens; ++t)
    prepared.run(kernel, s.in_row(t, 0), x_layout.head_stride, s.out_row(t, 0), out_layout.head_stride, x_layout.heads,
                 n);
}

}  // namespace rotary

#endif  // ROTARY_FUSION_HPP
