// Validation of a whole call. Returns an empty string when the call is valid, else the message
// that the checked entry points throw and the unchecked ones assert on (debug builds only).
#ifndef ROTARY_DETAIL_CHECKS_HPP
#define ROTARY_DETAIL_CHECKS_HPP

#include "guard.hpp"

#include <cstdint>
#include <string>

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
// a >= head_dim and b >= a*(na-1) + head_dim whenever the counts exceed one.
inline bool rows_disjoint(std::int64_t tokens, std::int64_t heads, std::ptrdiff_t ts,
                          std::ptrdiff_t hs, std::int64_t head_dim) noexcept {
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

template <class T>
std::string check_view(const char* name, const T* p, std::int64_t tokens, std::int64_t heads,
                       std::ptrdiff_t ts, std::ptrdiff_t hs, std::int64_t head_dim) {
  if (ts < 0 || hs < 0)
    return concat(name, " strides (token ", ts, ", head ", hs, ") must be >= 0");
  if (tokens > 0 && p == nullptr) return concat(name, " is null but holds ", tokens, " tokens");
  if (!rows_disjoint(tokens, heads, ts, hs, head_dim))
    return concat(name, " rows overlap: token stride ", ts, ", head stride ", hs, ", head_dim ",
                  head_dim, " (", tokens, " tokens x ", heads, " heads)");
  return {};
}

template <class T>
std::string check_call(const KernelArgs<T>& a) {
  if (a.cache == nullptr) return "no cos/sin cache";
  if (a.tokens < 0) return concat("tokens (", a.tokens, ") must be >= 0");
  if (a.heads < 1) return concat("heads (", a.heads, ") must be >= 1");
  if (a.rotary_dim != a.cache->rotary_dim())
    return concat("rotary_dim (", a.rotary_dim, ") != cache rotary_dim (", a.cache->rotary_dim(), ")");
  if (a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim || a.rotary_dim <= 0)
    return concat("rotary_dim (", a.rotary_dim, ") must be even, positive and <= head_dim (",
                  a.head_dim, ")");
  std::string m =
      check_view("input", a.in, a.tokens, a.heads, a.in_token_stride, a.in_head_stride, a.head_dim);
  if (!m.empty()) return m;
  m = check_view("output", a.out, a.tokens, a.heads, a.out_token_stride, a.out_head_stride,
                 a.head_dim);
  if (!m.empty()) return m;

  const bool same = a.in == a.out && a.in_token_stride == a.out_token_stride &&
                    a.in_head_stride == a.out_head_stride;
  if (!same) {
    const Extent i = extent_of(a.in, a.tokens, a.heads, a.in_token_stride, a.in_head_stride, a.head_dim);
    const Extent o =
        extent_of(a.out, a.tokens, a.heads, a.out_token_stride, a.out_head_stride, a.head_dim);
    if (i.lo < o.hi && o.lo < i.hi)
      return "input and output partially overlap: pass the same view (same pointer and strides) to "
             "rotate in place, or disjoint views";
  }

  const Positions& p = a.positions;
  if (!p.is_contiguous() && p.count() != a.tokens)
    return concat("positions has ", p.count(), " values for ", a.tokens, " tokens");
  if (p.is_contiguous() && a.cache->is_range()) {  // check the two ends only
    if (a.tokens > 0) {
      const std::int64_t first = p.start();
      if (first < 0) return concat("position (", first, ") must be >= 0");
      if (first > INT64_MAX - (a.tokens - 1))
        return concat("positions start (", first, ") + ", a.tokens, " tokens overflows int64");
      for (const std::int64_t pos : {first, first + a.tokens - 1})
        if (!a.cache->contains(pos)) return a.cache->out_of_cache_message(pos);
    }
    return {};
  }
  if (p.is_contiguous() && a.tokens > 0 && p.start() > INT64_MAX - (a.tokens - 1))
    return concat("positions start (", p.start(), ") + ", a.tokens, " tokens overflows int64");
  for (std::int64_t t = 0; t < a.tokens; ++t) {
    const std::int64_t pos = p[t];
    if (pos < 0) return concat("positions[", t, "] (", pos, ") must be >= 0");
    if (!a.cache->contains(pos))
      return concat("positions[", t, "]: ", a.cache->out_of_cache_message(pos));
  }
  return {};
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_CHECKS_HPP
