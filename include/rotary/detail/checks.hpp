// Validation of a whole call. Returns an empty string when the call is valid, else the message
// that the checked entry points throw and the unchecked ones assert on (debug builds only).
#ifndef ROTARY_DETAIL_CHECKS_HPP
#define ROTARY_DETAIL_CHECKS_HPP

#include "guard.hpp"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "format.hpp"
#include "kernel_args.hpp"

namespace rotary::detail {

// Element extent [first, last) spanned by a strided set of rows; {0, 0} when empty.
struct Extent {
  std::uintptr_t lo = 0;
  std::uintptr_t hi = 0;
};

template <class T>
Extent extent_of(const T* p, std::int64_t tokens, std::int64_t heads, std::ptrdiff_t ts,
                 std::ptrdiff_t hs, std::int64_t head_dim) noexcept {
  if (tokens == 0 || heads == 0) return {};
  const auto lo = reinterpret_cast<std::uintptr_t>(p);
  const std::int64_t last = (tokens - 1) * ts + (heads - 1) * hs + head_dim;
  return {lo, lo + static_cast<std::uintptr_t>(last) * sizeof(T)};
}

// Rows of one view must not overlap each other: with strides sorted as a (count na) <= b (count nb),
// a >= head_dim and b >= a*(na-1) + head_dim whenever the counts exceed one. An empty view has no
// rows (strides computed from a zero-sized shape are often 0).
inline bool rows_disjoint(std::int64_t tokens, std::int64_t heads, std::ptrdiff_t ts,
                          std::ptrdiff_t hs, std::int64_t head_dim) noexcept {
  if (tokens == 0 || heads == 0) return true;
  std::int64_t n1 = tokens;
  std::int64_t n2 = heads;
  std::ptrdiff_t s1 = ts;
  std::ptrdiff_t s2 = hs;
  if (n1 <= 1) return n2 <= 1 || s2 >= head_dim;
  if (n2 <= 1) return s1 >= head_dim;
  if (s1 > s2) {
    std::swap(s1, s2);
    std::swap(n1, n2);
  }
  return s1 >= head_dim && s2 >= s1 * (n1 - 1) + head_dim;
}

// Whether a non-empty view (axes of count >= 1 and stride >= 0, rows of head_dim elements) spans at
// most PTRDIFF_MAX bytes, computed without overflow. No buffer is larger, and past it the extent
// arithmetic here and the kernels' row addresses would overflow.
inline bool span_fits(std::initializer_list<std::pair<std::int64_t, std::ptrdiff_t>> axes, std::int64_t head_dim,
                      std::size_t element_size) noexcept {
  const std::uint64_t max = static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()) / element_size;
  auto span = static_cast<std::uint64_t>(head_dim);
  if (span > max) return false;
  for (const auto& [count, stride] : axes) {
    if (count <= 1 || stride == 0) continue;
    const auto c = static_cast<std::uint64_t>(count - 1);
    const auto s = static_cast<std::uint64_t>(stride);
    if (c > (max - span) / s) return false;
    span += c * s;
  }
  return true;
}

template <class T>
std::string check_view(const char* name, const T* p, std::int64_t tokens, std::int64_t heads,
                       std::ptrdiff_t ts, std::ptrdiff_t hs, std::int64_t head_dim) {
  if (ts < 0 || hs < 0)
    return concat(name, " strides (token ", ts, ", head ", hs, ") must be >= 0");
  if (tokens > 0 && p == nullptr) return concat(name, " is null but holds ", tokens, " tokens");
  if (tokens > 0 && heads > 0 && !span_fits({{tokens, ts}, {heads, hs}}, head_dim, sizeof(T)))
    return concat(name, " spans more than PTRDIFF_MAX bytes (", tokens, " tokens x token stride ", ts, ", ",
                  heads, " heads x head stride ", hs, ", head_dim ", head_dim, "): no buffer is that large");
  if (!rows_disjoint(tokens, heads, ts, hs, head_dim))
    return concat(name, " rows overlap: token stride ", ts, ", head stride ", hs, ", head_dim ",
                  head_dim, " (", tokens, " tokens x ", heads, " heads)");
  return {};
}

inline bool overlap(const Extent& x, const Extent& y) noexcept { return x.lo < y.hi && y.lo < x.hi; }

template <class T>
Extent in_extent(const StreamArgs<T>& s, std::int64_t tokens, std::int64_t head_dim) noexcept {
  return extent_of(s.in, tokens, s.heads, s.in_token_stride, s.in_head_stride, head_dim);
}
template <class T>
Extent out_extent(const StreamArgs<T>& s, std::int64_t tokens, std::int64_t head_dim) noexcept {
  return extent_of(s.out, tokens, s.heads, s.out_token_stride, s.out_head_stride, head_dim);
}

// One tensor: its views are sound, and input and output are the same view or disjoint.
template <class T>
std::string check_stream(const std::string& name, const StreamArgs<T>& s, std::int64_t tokens,
                         std::int64_t head_dim) {
  std::string m = check_view((name + "input").c_str(), s.in, tokens, s.heads, s.in_token_stride,
                             s.in_head_stride, head_dim);
  if (!m.empty()) return m;
  m = check_view((name + "output").c_str(), s.out, tokens, s.heads, s.out_token_stride,
                 s.out_head_stride, head_dim);
  if (!m.empty()) return m;
  const bool same = s.in == s.out && s.in_token_stride == s.out_token_stride &&
                    s.in_head_stride == s.out_head_stride;
  if (!same && overlap(in_extent(s, tokens, head_dim), out_extent(s, tokens, head_dim)))
    return name + "input and " + name +
           "output partially overlap: pass the same view (same pointer and strides) to rotate in "
           "place, or disjoint views";
  return {};
}

// Positions: one per token for arrays; each >= 0 (no int64 overflow for contiguous ones) and held
// by the cache if there is one (cache-free calls compute any position). O(1) for contiguous
// positions over a range cache, O(tokens) otherwise.
template <class C>
std::string check_positions(const Positions& p, std::int64_t tokens, const CosSinCache<C>* cache) {
  if (!p.is_contiguous() && p.count() != tokens)
    return concat("positions has ", p.count(), " values for ", tokens, " tokens");
  if (tokens == 0) return {};
  if (p.is_contiguous()) {
    const std::int64_t first = p.start();
    if (first < 0) return concat("position (", first, ") must be >= 0");
    if (first > std::numeric_limits<std::int64_t>::max() - (tokens - 1))
      return concat("positions start (", first, ") + ", tokens, " tokens overflows int64");
    if (cache == nullptr) return {};
    if (cache->is_range()) {  // the two ends suffice
      for (const std::int64_t pos : {first, first + tokens - 1})
        if (!cache->contains(pos)) return cache->out_of_cache_message(pos);
      return {};
    }
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t pos = p[t];
    if (pos < 0) return concat("positions[", t, "] (", pos, ") must be >= 0");
    if (cache != nullptr && !cache->contains(pos))
      return concat("positions[", t, "]: ", cache->out_of_cache_message(pos));
  }
  return {};
}

// Two views of one buffer with equal strides whose heads sit side by side inside every token (the
// q and k heads of a fused QKV projection, [tokens, q_heads + 2 * kv_heads, head_dim]): their rows
// are disjoint when all of one's heads come before all of the other's, i.e. when the union, one
// view of gap + heads_b heads, has disjoint rows. Bounding extents of such views always overlap.
template <class T>
bool heads_apart(const T* a, std::int64_t a_heads, std::ptrdiff_t a_ts, std::ptrdiff_t a_hs, const T* b,
                 std::int64_t b_heads, std::ptrdiff_t b_ts, std::ptrdiff_t b_hs, std::int64_t tokens,
                 std::int64_t head_dim) noexcept {
  if (a_ts != b_ts || a_hs != b_hs || a_hs <= 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  const bool a_first = pa <= pb;
  const std::uintptr_t bytes = a_first ? pb - pa : pa - pb;
  const std::uintptr_t head_bytes = static_cast<std::uintptr_t>(a_hs) * sizeof(T);
  if (bytes % head_bytes != 0) return false;
  const auto gap = static_cast<std::int64_t>(bytes / head_bytes);
  if (gap < (a_first ? a_heads : b_heads)) return false;
  return rows_disjoint(tokens, gap + (a_first ? b_heads : a_heads), a_ts, a_hs, head_dim);
}

template <class T>
std::string check_call(const KernelArgs<T>& a) {
  if (a.cache == nullptr && a.rows == nullptr && a.generator == nullptr) return "no cos/sin cache";
  if (a.tokens < 0) return concat("tokens (", a.tokens, ") must be >= 0");
  if (a.q.heads < 1) return concat("heads (", a.q.heads, ") must be >= 1");
  if (a.k.heads < 0) return concat("key heads (", a.k.heads, ") must be >= 0");
  if (a.cache != nullptr && a.rotary_dim != a.cache->rotary_dim())
    return concat("rotary_dim (", a.rotary_dim, ") != cache rotary_dim (", a.cache->rotary_dim(), ")");
  if (a.generator != nullptr && a.rotary_dim != 2 * a.generator->pairs())
    return concat("rotary_dim (", a.rotary_dim, ") != frequencies' rotary_dim (", 2 * a.generator->pairs(), ")");
  if (a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim || a.rotary_dim <= 0)
    return concat("rotary_dim (", a.rotary_dim, ") must be even, positive and <= head_dim (",
                  a.head_dim, ")");
  const bool fused = a.k.heads > 0;
  std::string m = check_stream(fused ? "q " : "", a.q, a.tokens, a.head_dim);
  if (!m.empty()) return m;
  if (fused) {
    m = check_stream("k ", a.k, a.tokens, a.head_dim);
    if (!m.empty()) return m;
    const Extent qi = in_extent(a.q, a.tokens, a.head_dim);
    const Extent qo = out_extent(a.q, a.tokens, a.head_dim);
    const Extent ki = in_extent(a.k, a.tokens, a.head_dim);
    const Extent ko = out_extent(a.k, a.tokens, a.head_dim);
    const auto apart = [&a](const T* x, const StreamArgs<T>& xs, bool x_out, const T* y,
                            const StreamArgs<T>& ys, bool y_out) {
      return heads_apart<T>(x, xs.heads, x_out ? xs.out_token_stride : xs.in_token_stride,
                            x_out ? xs.out_head_stride : xs.in_head_stride, y, ys.heads,
                            y_out ? ys.out_token_stride : ys.in_token_stride,
                            y_out ? ys.out_head_stride : ys.in_head_stride, a.tokens, a.head_dim);
    };
    const bool clash = (overlap(qo, ki) && !apart(a.q.out, a.q, true, a.k.in, a.k, false)) ||
                       (overlap(qo, ko) && !apart(a.q.out, a.q, true, a.k.out, a.k, true)) ||
                       (overlap(ko, qi) && !apart(a.k.out, a.k, true, a.q.in, a.q, false));
    if (clash)
      return "q and k views overlap: a q output may not share a row with k, nor a k output with q";
  }

  return check_positions(a.positions, a.tokens, a.cache);
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_CHECKS_HPP
