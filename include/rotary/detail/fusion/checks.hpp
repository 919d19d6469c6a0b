// The checks of a fused prologue call: its views, slots and caches, and the O(1) block arithmetic
// that tells whether two caches' rows share memory.
#ifndef ROTARY_DETAIL_FUSION_CHECKS_HPP
#define ROTARY_DETAIL_FUSION_CHECKS_HPP

#include "../guard.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../apply.hpp"
#include "../../kv_cache.hpp"
#include "../../prologue.hpp"
#include "../driver/checks.hpp"
#include "../geometry.hpp"

namespace rotary {

namespace detail {

// floor(x / d) and x - d * floor(x / d), in [0, d), for d > 0 (C++ division truncates toward zero).
// Offsets within one stride of zero (caches side by side in one row, a block's own rows) need no
// division: a 64-bit one costs more than the rest of a cache pair's test.
inline std::pair<std::int64_t, std::int64_t> floor_divmod(std::int64_t x, std::int64_t d) noexcept {
  if (x >= 0 && x < d) return {0, x};
  if (x < 0 && x >= -d) return {-1, x + d};
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
      return StridedRows(c.data, c.head_dim, StridedRows::Axis{"slot", c.block_size, c.slot_stride},
                         StridedRows::Axis{"head", c.heads, c.head_stride});
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
  for (const ReadExtent& r : reads)
    for (const auto& w : written)
      if (overlap(w.second, r.x))
        return concat(w.first, " and ", r.name, " share memory (", r.name, " is read while the call writes ",
                      w.first, ")");
  return {};
}

// The counts and options of a fused call: tokens and heads agree, each view has its cache, the norms
// are sound.
template <class T, class E, class W>
std::string check_prologue_shapes(const Prologue<T, E, W>& c, Pairing pairing) {
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
  if (std::string m = check_norm("q_norm", c.q_norm); !m.empty()) return m;
  if (std::string m = check_norm("k_norm", c.k_norm); !m.empty()) return m;
  if (std::string m = check_norm("l2_after", c.l2_after, false); !m.empty()) return m;
  // (a stream the call does not have reads no weight: a q-only qk_norm_rope may leave k's null)
  if (q && c.q_norm.enabled && c.q_norm.weight == nullptr) return "q_norm has no weight (use l2 for none)";
  if (k && c.k_norm.enabled && c.k_norm.weight == nullptr) return "k_norm has no weight (use l2 for none)";
  return {};
}

// The answer of a list of tests as Verdict asks for it: bool, the arithmetic alone (no string is
// built: check_fused_call's fast path), or std::string, the first fault's words (the message the
// sequence gives). fails(sound, message) runs the test's form for Verdict and says whether it failed;
// verdict() is the answer after a failure, pass() the answer when none failed.
template <class Verdict>
class FirstFault {
 public:
  static constexpr bool kArithmetic = std::is_same_v<Verdict, bool>;
  template <class Sound, class Message>
  bool fails(const Sound& sound, const Message& message) {
    if constexpr (kArithmetic) {
      return !sound();
    } else {
      words_ = message();
      return !words_.empty();
    }
  }
  Verdict verdict() {
    if constexpr (kArithmetic)
      return false;
    else
      return std::move(words_);
  }
  static Verdict pass() {
    if constexpr (kArithmetic)
      return true;
    else
      return {};
  }

 private:
  std::conditional_t<kArithmetic, bool, std::string> words_{};
};

// One stream's views sound and its input and output the same view or disjoint: check_stream's
// verdict in arithmetic.
template <class T>
bool stream_sound(const StreamArgs<T>& s, std::int64_t tokens, std::int64_t head_dim) noexcept {
  const auto sound = [&](const T* p, std::ptrdiff_t ts, std::ptrdiff_t hs) {
    return view_sound(p, tokens, s.heads, ts, hs, head_dim, sizeof(T));
  };
  if (!sound(s.in, s.in_token_stride, s.in_head_stride)) return false;
  return in_place(s) || (sound(s.out, s.out_token_stride, s.out_head_stride) &&
                         !overlap(in_extent(s, tokens, head_dim), out_extent(s, tokens, head_dim)));
}

// Each buffer of a fused call on its own, after its shapes: rotary_dim; q's and k's views in and out
// (k with no output: read only), each the same view as its output or disjoint from it; v's view;
// each cache, its heads and the slots (once where both caches have the same). The one list of these
// tests, for both verdicts (FirstFault): check_prologue_steps asks for the words, check_fused_call
// for the arithmetic (prologue_steps_sound).
template <class Verdict, class T, class E, class W>
Verdict prologue_buffers(const Prologue<T, E, W>& c, std::int64_t head_dim, std::int64_t rotary_dim) {
  FirstFault<Verdict> f;
  const std::int64_t tokens = c.tokens();
  const bool q = c.q_layout.heads > 0;
  const bool k = c.k_layout.heads > 0;
  // the names check_call gives: "q"/"k" where both are rotated, else the one tensor's own
  const char* x_name = q ? "q" : "k";
  const bool both = q && k;
  const bool rotary_dim_ok = rotary_dim % 2 == 0 && rotary_dim <= head_dim && rotary_dim > 0;
  if ((q || k) && f.fails([&] { return rotary_dim_ok; },
                          [&] {
                            return rotary_dim_ok
                                       ? std::string()
                                       : concat("rotary_dim (", rotary_dim,
                                                ") must be even, positive and <= head_dim (", head_dim, ")");
                          }))
    return f.verdict();
  const auto stream_fails = [&](const char* tensor, const StreamArgs<T>& s) {
    return f.fails([&] { return stream_sound(s, tokens, head_dim); },
                   [&] { return check_stream(tensor, s, tokens, head_dim, x_name); });
  };
  if (q && stream_fails(both ? "q" : "", make_stream(c.q, c.q_layout, c.q_out, c.q_out_layout)))
    return f.verdict();
  // (k with no output: read only, checked as a stream rotated in place)
  if (k && stream_fails(both ? "k" : "", c.k_out_layout.heads > 0
                                             ? make_stream(c.k, c.k_layout, c.k_out, c.k_out_layout)
                                             : make_stream(c.k, c.k_layout, const_cast<T*>(c.k), c.k_layout)))
    return f.verdict();
  const StridedLayout& vl = c.v_layout;
  if (vl.heads > 0 && f.fails(
                          [&] {
                            return view_sound(c.v, tokens, vl.heads, vl.token_stride, vl.head_stride,
                                              c.v_cache.head_dim, sizeof(T));
                          },
                          [&] {
                            return check_view("v", c.v, tokens, vl.heads, vl.token_stride, vl.head_stride,
                                              c.v_cache.head_dim);
                          }))
    return f.verdict();
  // the caches' own tests (KvCacheView::check and the slots' answer from their arithmetic first)
  const auto target_sound = [&](const StridedLayout& l, const KvCacheView<E>& cache, bool check_slots) {
    return l.heads == cache.heads && cache.check().empty() &&
           (!check_slots || c.slots.check(l.tokens, cache.slots(), cache.block_size).empty());
  };
  if (c.has_k_cache() &&
      f.fails([&] { return c.k_cache.head_dim == head_dim && target_sound(c.k_layout, c.k_cache, true); },
              [&] {
                if (c.k_cache.head_dim != head_dim)
                  return concat("k_cache head_dim (", c.k_cache.head_dim, ") is not the rotator's (",
                                head_dim, ")");
                // (k's view was checked above with head_dim, which is k_cache's)
                return check_cache_target("k", c.k, c.k_layout, c.slots, "k_cache", c.k_cache, true, false);
              }))
    return f.verdict();
  // the slots once where both caches have the same slots and blocks (blocks and block sizes
  // compared, not their products: v_cache is not checked yet); v's view above
  const bool same_slots =
      c.has_k_cache() && c.k_cache.blocks == c.v_cache.blocks && c.k_cache.block_size == c.v_cache.block_size;
  if (c.has_v_cache() && f.fails([&] { return target_sound(c.v_layout, c.v_cache, !same_slots); },
                                 [&] {
                                   return check_cache_target("v", c.v, c.v_layout, c.slots, "v_cache",
                                                             c.v_cache, !same_slots, false);
                                 }))
    return f.verdict();
  return f.pass();
}

// q and k apart (the driver's qk_clash), v apart from the outputs written while it is read, and every
// input and output apart from every cache (each buffer sound on its own: prologue_buffers).
template <class T, class E, class W>
std::string check_prologue_views_apart(const Prologue<T, E, W>& c, std::int64_t head_dim) {
  const std::int64_t tokens = c.tokens();
  const bool q = c.q_layout.heads > 0;
  const bool k = c.k_layout.heads > 0;
  const bool v = c.v_layout.heads > 0;
  const bool k_out = c.k_out_layout.heads > 0;
  if (q && k) {
    KernelArgs<T> a;
    a.tokens = tokens;
    a.head_dim = head_dim;
    a.q = make_stream(c.q, c.q_layout, c.q_out, c.q_out_layout);
    a.k = k_out ? make_stream(c.k, c.k_layout, c.k_out, c.k_out_layout)
                : make_stream(c.k, c.k_layout, const_cast<T*>(c.k), c.k_layout);  // read only
    if (std::string m = qk_clash(a); !m.empty()) return m;
  }
  if (v) {
    // an output written while v is read: apart, or other heads of the same token rows (packed qkv)
    const StridedRows v_rows =
        token_rows(c.v, c.v_cache.head_dim, tokens, c.v_layout.token_stride, c.v_layout.heads, c.v_layout.head_stride);
    const auto clashes = [&](const T* out, std::int64_t heads, const StridedLayout& ol) {
      return !token_rows(out, head_dim, tokens, ol.token_stride, heads, ol.head_stride).apart(v_rows);
    };
    if (q && clashes(c.q_out, c.q_layout.heads, c.q_out_layout)) return "q output and v share memory";
    if (k_out && clashes(c.k_out, c.k_layout.heads, c.k_out_layout)) return "k output and v share memory";
  }
  // each cache's own write: the slot values and its input apart from it
  if (c.has_k_cache()) {
    if (std::string m = check_cache_write_apart("k", c.k, c.k_layout, c.slots, "k_cache", c.k_cache);
        !m.empty())
      return m;
  }
  if (c.has_v_cache()) {
    if (std::string m = check_cache_write_apart("v", c.v, c.v_layout, c.slots, "v_cache", c.v_cache);
        !m.empty())
      return m;
  }
  // Every other input and output apart from every cache (q in place once); the two caches apart, or
  // side by side in the same rows (MLA).
  const bool q_in_place =
      q && token_rows(c.q, head_dim, tokens, c.q_layout.token_stride, c.q_layout.heads, c.q_layout.head_stride)
               .same(q_out_rows(c, head_dim));
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
  return {};
}

// Norm weights are read for every row: apart from everything the call writes (int8's scales, not
// fp8's, which are only read).
template <class T, class E, class W>
std::string check_prologue_weights(const Prologue<T, E, W>& c, std::int64_t head_dim) {
  const bool q = c.q_layout.heads > 0;
  const bool k_out = c.k_out_layout.heads > 0;
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
  return {};
}

// Every test of one buffer against another, in order (each buffer sound on its own).
template <class T, class E, class W>
std::string check_prologue_apart(const Prologue<T, E, W>& c, std::int64_t head_dim) {
  if (std::string m = check_prologue_views_apart(c, head_dim); !m.empty()) return m;
  if (std::string m = check_prologue_weights(c, head_dim); !m.empty()) return m;
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

// Every check of a fused call's own arguments, in order: its shapes, each buffer on its own, then
// the buffers against one another.
template <class T, class E, class W>
std::string check_prologue_steps(const Prologue<T, E, W>& c, std::int64_t head_dim, std::int64_t rotary_dim,
                                 Pairing pairing) {
  if (std::string m = check_prologue_shapes(c, pairing); !m.empty()) return m;
  if (std::string m = prologue_buffers<std::string>(c, head_dim, rotary_dim); !m.empty()) return m;
  return check_prologue_apart(c, head_dim);
}

// Whether every test of check_prologue_steps of one buffer on its own passes (the shapes, then
// prologue_buffers in arithmetic). The tests of one buffer against another are
// prologue_buffers_apart's to spare.
template <class T, class E, class W>
bool prologue_steps_sound(const Prologue<T, E, W>& c, std::int64_t head_dim, std::int64_t rotary_dim,
                          Pairing pairing) {
  return check_prologue_shapes(c, pairing).empty() && prologue_buffers<bool>(c, head_dim, rotary_dim);
}

// How a fused call's two caches came to it: as given (any two views), or cut by the call itself from one
// checked cache view as two column ranges of its rows (MLA's [latent | k_pe]), whose rows cannot meet.
enum class CachePair { given, columns_of_one };

// Whether no buffer the call writes shares a byte with any other buffer it touches, by byte extents
// (every buffer valid on its own: prologue_steps_sound). Then no check of one
// buffer against another can fail. A view given as input and output counts once; buffers only read
// may overlap one another; the two caches count as one written region where their rows are apart
// (caches_share_rows: MLA's latent and k_pe side by side in one row); reads: the row source's and the
// slot values. Conservative: an overlap the pairwise checks allow (the heads of a packed qkv tensor)
// answers false. Every written region against every other region: a few dozen comparisons, no
// allocation, no sort.
template <class T, class E, class W>
bool prologue_buffers_apart(const Prologue<T, E, W>& c, std::int64_t head_dim, const ReadExtents& reads,
                            CachePair caches = CachePair::given) noexcept {
  // (plain arrays of ends, left uninitialized: zeroing a dozen Extents cost more than the comparisons)
  // written: q out, k out, two caches, two scales; read: q, k, v, two weights, two scales and the reads
  constexpr int kWritten = 8;
  constexpr int kRead = 8 + static_cast<int>(ReadExtents::kCapacity);
  std::uintptr_t w_lo[kWritten], w_hi[kWritten], r_lo[kRead], r_hi[kRead];  // NOLINT: filled up to the counts
  int n_written = 0;
  int n_read = 0;
  const auto add = [&](const Extent& x, bool is_written) {
    if (x.lo >= x.hi) return;
    if (is_written) {
      w_lo[n_written] = x.lo;
      w_hi[n_written++] = x.hi;
    } else {
      r_lo[n_read] = x.lo;
      r_hi[n_read++] = x.hi;
    }
  };
  // [tokens, heads] rows of d elements (a valid view: the arithmetic cannot overflow)
  const auto rows = [](const auto* p, std::int64_t d, const StridedLayout& l) {
    if (l.tokens <= 0 || l.heads <= 0) return Extent{};
    const std::int64_t span = (l.tokens - 1) * l.token_stride + (l.heads - 1) * l.head_stride + d;
    const auto lo = reinterpret_cast<std::uintptr_t>(p);
    return Extent{lo, lo + static_cast<std::uintptr_t>(span) * sizeof(*p)};
  };
  const auto same = [](const void* a, const StridedLayout& la, const void* b, const StridedLayout& lb) {
    return a == b && la.tokens == lb.tokens && la.heads == lb.heads && la.token_stride == lb.token_stride &&
           la.head_stride == lb.head_stride;
  };
  Extent q_read_only;  // q's input where the call only reads it
  if (c.q_layout.heads > 0) {
    const bool in_place = same(c.q, c.q_layout, c.q_out, c.q_out_layout);
    const Extent q = rows(c.q, head_dim, c.q_layout);
    add(q, in_place);
    if (!in_place) {
      add(rows(c.q_out, head_dim, c.q_out_layout), true);
      q_read_only = q;
    }
  }
  if (c.k_layout.heads > 0) {
    const Extent k = rows(c.k, head_dim, c.k_layout);
    if (c.k_out_layout.heads == 0) {
      // k only read (rotated into the cache alone: MLA's k_pe beside its latent in one row), but
      // checked as a stream rotated in place (prologue_buffers), whose output q's input may
      // not meet, even where the call only reads both
      add(k, false);
      if (overlap(k, q_read_only)) return false;
    } else {
      const bool in_place = same(c.k, c.k_layout, c.k_out, c.k_out_layout);
      add(k, in_place);
      if (!in_place) add(rows(c.k_out, head_dim, c.k_out_layout), true);
    }
  }
  if (c.v_layout.heads > 0) add(rows(c.v, c.v_cache.head_dim, c.v_layout), false);
  const Extent k_cache = c.k_cache.extent();
  const Extent v_cache = c.v_cache.extent();
  if (overlap(k_cache, v_cache)) {
    if (caches == CachePair::given && caches_share_rows(c.k_cache, c.v_cache)) return false;
    add(Extent{std::min(k_cache.lo, v_cache.lo), std::max(k_cache.hi, v_cache.hi)}, true);
  } else {
    add(k_cache, true);
    add(v_cache, true);
  }
  constexpr bool kScalesWritten = cache_scales_of<E>() == CacheScales::per_row;
  add(c.k_cache.scales_extent(), kScalesWritten);
  add(c.v_cache.scales_extent(), kScalesWritten);
  for (const ReadExtent& r : reads) add(r.x, false);
  for (const HeadNorm<W>* norm : {&c.q_norm, &c.k_norm})
    if (norm->enabled && norm->weight != nullptr) {
      const auto lo = reinterpret_cast<std::uintptr_t>(norm->weight);
      add(Extent{lo, lo + static_cast<std::uintptr_t>(head_dim) * sizeof(W)}, false);
    }
  bool apart = true;  // (no early exit: a handful of comparisons cost less than their branches)
  for (int i = 0; i < n_written; ++i) {
    for (int j = i + 1; j < n_written; ++j) apart &= w_hi[j] <= w_lo[i] || w_hi[i] <= w_lo[j];
    for (int j = 0; j < n_read; ++j) apart &= r_hi[j] <= w_lo[i] || w_hi[i] <= r_lo[j];
  }
  return apart;
}

}  // namespace detail
}  // namespace rotary

#endif  // ROTARY_DETAIL_FUSION_CHECKS_HPP
