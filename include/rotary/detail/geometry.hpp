// The one view geometry behind every overlap and in-place check: StridedRows, rows of head_dim
// contiguous elements at base + sum_a i_a * stride_a (0 <= i_a < count_a) over up to three named
// axes, the last the head axis. Its tests (extent, rows_disjoint, same, apart) are arithmetic on
// counts and strides, O(1) in the number of rows; the walks below list rows in address order for
// the messages written once a check has failed.
#ifndef ROTARY_DETAIL_GEOMETRY_HPP
#define ROTARY_DETAIL_GEOMETRY_HPP

#include "guard.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "format.hpp"

namespace rotary::detail {

// Byte extent [lo, hi) spanned by a set of rows; {0, 0} when empty.
struct Extent {
  std::uintptr_t lo = 0;
  std::uintptr_t hi = 0;
};

inline bool overlap(const Extent& x, const Extent& y) noexcept { return x.lo < y.hi && y.lo < x.hi; }

// The rows of a strided view: n axes (name, count, stride in elements >= 0) and rows of head_dim
// elements of `element` bytes each, the first at `base`. Counts >= 0 and strides >= 0 (the entry
// points' shape checks come first).
struct StridedRows {
  struct Axis {
    const char* name;
    std::int64_t count;
    std::ptrdiff_t stride;
  };
  using Index = std::array<std::int64_t, 3>;

  std::uintptr_t base = 0;
  std::size_t element = 1;
  std::int64_t head_dim = 0;
  int n = 0;
  std::array<Axis, 3> axes{};

  StridedRows() = default;
  template <class T>
  StridedRows(const T* p, std::int64_t hd, std::initializer_list<Axis> list) noexcept
      : base(reinterpret_cast<std::uintptr_t>(p)), element(sizeof(T)), head_dim(hd) {
    for (const Axis& a : list)
      if (n < 3) axes[static_cast<std::size_t>(n++)] = a;
  }

  // The common two-axis view (token_rows), without the list's loop.
  template <class T>
  StridedRows(const T* p, std::int64_t hd, const Axis& outer, const Axis& inner) noexcept
      : base(reinterpret_cast<std::uintptr_t>(p)), element(sizeof(T)), head_dim(hd), n(2), axes{outer, inner, Axis{}} {}

  const Axis& axis(int a) const noexcept { return axes[static_cast<std::size_t>(a)]; }
  bool empty() const noexcept {
    for (int a = 0; a < n; ++a)
      if (axis(a).count == 0) return true;
    return false;
  }
  std::int64_t rows() const noexcept {
    std::int64_t r = 1;
    for (int a = 0; a < n; ++a) {
      if (axis(a).count <= 0) return 0;
      r = axis(a).count > std::numeric_limits<std::int64_t>::max() / r
              ? std::numeric_limits<std::int64_t>::max()
              : r * axis(a).count;
    }
    return r;
  }
  // Elements from the first row's start to the end of the last row.
  std::int64_t span() const noexcept {
    std::int64_t e = head_dim;
    for (int a = 0; a < n; ++a) e += (axis(a).count - 1) * axis(a).stride;
    return e;
  }
  Extent extent() const noexcept {
    if (empty()) return {};
    return {base, base + static_cast<std::uintptr_t>(span()) * element};
  }
  std::uintptr_t start(const Index& i) const noexcept {
    std::ptrdiff_t e = 0;
    for (int a = 0; a < n; ++a) e += i[static_cast<std::size_t>(a)] * axis(a).stride;
    return base + static_cast<std::uintptr_t>(e) * element;
  }
  // "(token 1, head 0)"
  std::string describe(const Index& i) const {
    std::string s = "(";
    for (int a = 0; a < n; ++a)
      s += concat(a > 0 ? ", " : "", axis(a).name, " ", i[static_cast<std::size_t>(a)]);
    return s + ")";
  }
  // The element of row i that holds byte `at`.
  std::int64_t element_at(const Index& i, std::uintptr_t at) const noexcept {
    return static_cast<std::int64_t>((at - start(i)) / element);
  }

  // Rows pairwise disjoint: with the axes sorted by stride, each stride reaches past the block of
  // the inner axes (strides nest). Sufficient; an empty view has no rows (its strides may be 0).
  bool rows_disjoint() const noexcept {
    if (empty()) return true;
    // (count, stride) of the three axes in registers (unused axes have count 0: sorted in, then
    // skipped), ordered by stride then count with three compare-exchanges: every checked call sorts a
    // few of these, and moving whole named axes through memory cost more than the rest of the check
    std::int64_t c0 = axes[0].count, c1 = axes[1].count, c2 = axes[2].count;
    std::ptrdiff_t s0 = axes[0].stride, s1 = axes[1].stride, s2 = axes[2].stride;
    const auto order = [](std::int64_t& cx, std::ptrdiff_t& sx, std::int64_t& cy, std::ptrdiff_t& sy) {
      if (sy < sx || (sy == sx && cy < cx)) {
        std::swap(cx, cy);
        std::swap(sx, sy);
      }
    };
    order(c0, s0, c1, s1);
    order(c1, s1, c2, s2);
    order(c0, s0, c1, s1);
    std::ptrdiff_t reach = head_dim;
    for (const auto& [count, stride] : {std::pair{c0, s0}, std::pair{c1, s1}, std::pair{c2, s2}}) {
      if (count <= 1) continue;
      if (stride < reach) return false;
      reach += stride * (count - 1);
    }
    return true;
  }

  // The same rows in the same order: one view given twice (as input and output: in place).
  bool same(const StridedRows& o) const noexcept {
    if (base != o.base || element != o.element || head_dim != o.head_dim || n != o.n) return false;
    for (int a = 0; a < n; ++a)
      if (axis(a).count != o.axis(a).count || axis(a).stride != o.axis(a).stride) return false;
    return true;
  }

  bool overlaps(const StridedRows& o) const noexcept { return overlap(extent(), o.extent()); }

  // Two views of one buffer with equal strides and rows whose heads sit side by side inside every
  // token (the q and k heads of a fused QKV projection): disjoint when all of one's heads come
  // before all of the other's, i.e. when their union, one view of gap + heads heads, has disjoint
  // rows. Bounding extents of such views always overlap.
  bool heads_apart(const StridedRows& o) const noexcept {
    if (n == 0 || n != o.n || element != o.element || head_dim != o.head_dim) return false;
    for (int a = 0; a < n; ++a)
      if (axis(a).stride != o.axis(a).stride || (a + 1 < n && axis(a).count != o.axis(a).count)) return false;
    const std::ptrdiff_t hs = axis(n - 1).stride;
    if (hs <= 0) return false;
    const bool this_first = base <= o.base;
    const std::uintptr_t bytes = this_first ? o.base - base : base - o.base;
    const std::uintptr_t head_bytes = static_cast<std::uintptr_t>(hs) * element;
    if (bytes % head_bytes != 0) return false;
    const auto gap = static_cast<std::int64_t>(bytes / head_bytes);
    const StridedRows& first = this_first ? *this : o;
    const StridedRows& second = this_first ? o : *this;
    if (gap < first.axis(n - 1).count) return false;
    StridedRows u = first;
    u.axes[static_cast<std::size_t>(n - 1)].count = gap + second.axis(n - 1).count;
    return u.rows_disjoint();
  }

  // Two views that repeat with one outer stride (axis 0: the tokens), the rows of each outer step in
  // one block of inner_span() elements (strides >= 0): disjoint when, within that stride, the first
  // view's block ends before the other's begins and the other's ends before the first's next one.
  // Any row lengths: the q heads and the narrower v heads of one packed row (heads_apart needs equal
  // ones). Bounding extents of such views overlap too.
  std::int64_t inner_span() const noexcept {
    std::int64_t e = head_dim;
    for (int a = 1; a < n; ++a) e += (axis(a).count - 1) * axis(a).stride;
    return e;
  }
  bool blocks_apart(const StridedRows& o) const noexcept {
    if (n == 0 || o.n == 0 || element != o.element || empty() || o.empty()) return false;
    const std::ptrdiff_t ts = axis(0).stride;
    if (ts <= 0 || o.axis(0).stride != ts) return false;
    for (const StridedRows* v : {this, &o})
      for (int a = 1; a < v->n; ++a)
        if (v->axis(a).stride < 0) return false;
    const bool this_first = base <= o.base;
    const std::uintptr_t bytes = this_first ? o.base - base : base - o.base;
    if (bytes % element != 0) return false;
    const std::uintptr_t delta = bytes / element;
    const auto first = static_cast<std::uintptr_t>((this_first ? *this : o).inner_span());
    const auto second = static_cast<std::uintptr_t>((this_first ? o : *this).inner_span());
    const auto stride = static_cast<std::uintptr_t>(ts);
    return first <= delta && delta <= stride && second <= stride - delta;
  }

  // No row of one view shares an element with a row of the other (sufficient).
  bool apart(const StridedRows& o) const noexcept {
    return !overlaps(o) || heads_apart(o) || blocks_apart(o);
  }
};

// The rows of `tokens` x `heads` rows of head_dim elements at p (the common two-axis view).
template <class T>
StridedRows token_rows(const T* p, std::int64_t head_dim, std::int64_t tokens, std::ptrdiff_t token_stride,
                       std::int64_t heads, std::ptrdiff_t head_stride) noexcept {
  return StridedRows(p, head_dim, StridedRows::Axis{"token", tokens, token_stride},
                     StridedRows::Axis{"head", heads, head_stride});
}

// StridedRows::rows_disjoint of a two-axis view (counts >= 1, strides >= 0, the span within
// PTRDIFF_MAX bytes), the axes ordered as it orders them, in registers: for the checks every call
// runs on its views (view_sound, KvCacheView::check), held against rows_disjoint by tests.
inline bool two_axes_nest(std::int64_t c0, std::ptrdiff_t s0, std::int64_t c1, std::ptrdiff_t s1,
                          std::int64_t head_dim) noexcept {
  if (s1 < s0 || (s1 == s0 && c1 < c0)) {
    std::swap(c0, c1);
    std::swap(s0, s1);
  }
  std::ptrdiff_t reach = head_dim;
  if (c0 > 1) {
    if (s0 < reach) return false;
    reach += s0 * (c0 - 1);
  }
  return c1 <= 1 || s1 >= reach;
}

// token_rows(...).extent() of a view whose span fits (a checked one), without StridedRows' loops:
// the byte tests every checked call runs on its views.
template <class T>
Extent token_rows_extent(const T* p, std::int64_t head_dim, std::int64_t tokens, std::ptrdiff_t token_stride,
                         std::int64_t heads, std::ptrdiff_t head_stride) noexcept {
  if (tokens <= 0 || heads <= 0) return {};
  const auto lo = reinterpret_cast<std::uintptr_t>(p);
  const std::int64_t span = (tokens - 1) * token_stride + (heads - 1) * head_stride + head_dim;
  return {lo, lo + static_cast<std::uintptr_t>(span) * sizeof(T)};
}

// The rows of a view whose rows nest (rows_disjoint passed), in address order: the axes from the
// largest stride to the smallest, like digits.
class RowWalk {
 public:
  explicit RowWalk(const StridedRows& s) noexcept : s_(s), done_(s.rows() == 0) {
    for (int a = 0; a < s.n; ++a) order_[static_cast<std::size_t>(a)] = a;
    std::sort(order_.begin(), order_.begin() + s.n,
              [&s](int x, int y) { return s.axis(x).stride > s.axis(y).stride; });
  }
  bool done() const noexcept { return done_; }
  const StridedRows::Index& index() const noexcept { return i_; }
  std::uintptr_t begin() const noexcept { return s_.start(i_); }
  std::uintptr_t end() const noexcept {
    return begin() + static_cast<std::uintptr_t>(s_.head_dim) * s_.element;
  }
  void next() noexcept {
    for (int k = s_.n - 1; k >= 0; --k) {
      const int a = order_[static_cast<std::size_t>(k)];
      if (++i_[static_cast<std::size_t>(a)] < s_.axis(a).count) return;
      i_[static_cast<std::size_t>(a)] = 0;
    }
    done_ = true;
  }

 private:
  const StridedRows& s_;
  std::array<int, 3> order_{};
  StridedRows::Index i_{};
  bool done_;
};

// A byte two rows share: row `a` of one view (or of the view), row `b` of the other (or another).
struct SharedRows {
  StridedRows::Index a{};
  StridedRows::Index b{};
  std::uintptr_t at = 0;
};

// The lowest byte where a row of `x` and a row of `y` share memory, if any; both views' rows must
// nest. One merge of the two address-ordered walks: O(rows), no allocation.
inline bool first_shared(const StridedRows& x, const StridedRows& y, SharedRows& out) noexcept {
  RowWalk a(x);
  RowWalk b(y);
  while (!a.done() && !b.done()) {
    if (a.end() <= b.begin()) {
      a.next();
    } else if (b.end() <= a.begin()) {
      b.next();
    } else {
      out = {a.index(), b.index(), std::max(a.begin(), b.begin())};
      return true;
    }
  }
  return false;
}

// Two rows of one view that share memory, with b starting inside a; false if none was found (rows
// that interleave without sharing, or too many rows to sort).
inline bool shared_rows(const StridedRows& s, SharedRows& out) {
  const auto row_bytes = static_cast<std::uintptr_t>(s.head_dim) * s.element;
  for (int a = 0; a < s.n; ++a) {  // the usual mistake: one stride below head_dim
    if (s.axis(a).count > 1 && s.axis(a).stride < s.head_dim) {
      out = {};
      out.b[static_cast<std::size_t>(a)] = 1;
      out.at = s.start(out.b);
      return true;
    }
  }
  constexpr std::int64_t kMaxRows = std::int64_t{1} << 16;
  const std::int64_t rows = s.rows();
  if (rows > kMaxRows) return false;
  std::vector<std::pair<std::uintptr_t, StridedRows::Index>> starts;
  starts.reserve(static_cast<std::size_t>(rows));
  StridedRows::Index i{};
  for (std::int64_t r = 0; r < rows; ++r) {
    starts.emplace_back(s.start(i), i);
    for (int a = s.n - 1; a >= 0; --a) {
      if (++i[static_cast<std::size_t>(a)] < s.axis(a).count) break;
      i[static_cast<std::size_t>(a)] = 0;
    }
  }
  std::sort(starts.begin(), starts.end());
  // If any row starts inside an earlier one, some row starts inside the one just before it.
  for (std::size_t k = 1; k < starts.size(); ++k) {
    if (starts[k].first < starts[k - 1].first + row_bytes) {
      out = {starts[k - 1].second, starts[k].second, starts[k].first};
      return true;
    }
  }
  return false;
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_GEOMETRY_HPP
