// Validation of a whole call. Returns an empty string when the call is valid, else the message
// that the checked entry points throw and the unchecked ones assert on (debug builds only).
#ifndef ROTARY_DETAIL_CHECKS_HPP
#define ROTARY_DETAIL_CHECKS_HPP

#include "../guard.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "../checked_math.hpp"
#include "../format.hpp"
#include "../geometry.hpp"
#include "../kernels/kernel_args.hpp"

namespace rotary::detail {

// ROTARY_ASSERT_MESSAGE's condition (config.hpp): true for "", else prints the message to stderr,
// as the checked entry points would throw it, and returns false for the assertion to fail on.
inline bool valid_or_report(const std::string& message) noexcept {
  if (message.empty()) return true;
  std::fprintf(stderr, "rotary: %s\n", message.c_str());
  std::fflush(stderr);
  return false;
}

// Whether a non-empty view (axes of count >= 1 and stride >= 0, rows of head_dim elements) spans at
// most PTRDIFF_MAX bytes, computed without overflow. No buffer is larger, and past it the extent
// arithmetic here and the kernels' row addresses would overflow. (The general form, for messages
// and three-axis views; view_sound is the two-axis one every call runs.)
inline bool span_fits(std::initializer_list<std::pair<std::int64_t, std::ptrdiff_t>> axes,
                      std::int64_t head_dim, std::size_t element_size) noexcept {
  auto span = static_cast<std::uint64_t>(head_dim);
  for (const auto& [count, stride] : axes) {
    if (count <= 1 || stride == 0) continue;
    std::uint64_t step = 0;
    if (mul_overflows(static_cast<std::uint64_t>(count - 1), static_cast<std::uint64_t>(stride), step) ||
        add_overflows(span, step, span))
      return false;
  }
  return product_fits(span, span, element_size);
}

// Whether a view of tokens x heads rows of head_dim elements passes every test of check_view, in
// straight-line arithmetic without a string: every checked call tests each of its views, valid
// ones nearly always. Stricter where that costs nothing (no rows, head_dim < 1: false, and
// check_view runs its tests in order, for the message or for such a view's "").
inline bool view_sound(const void* p, std::int64_t tokens, std::int64_t heads, std::ptrdiff_t ts,
                       std::ptrdiff_t hs, std::int64_t head_dim, std::size_t element) noexcept {
  if (p == nullptr || tokens < 1 || heads < 1 || head_dim < 1 || ts < 0 || hs < 0) return false;
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  std::uint64_t span = 0;
  if (mul_overflows(static_cast<std::uint64_t>(tokens - 1), static_cast<std::uint64_t>(ts), a) ||
      mul_overflows(static_cast<std::uint64_t>(heads - 1), static_cast<std::uint64_t>(hs), b) ||
      add_overflows(a, b, span) || add_overflows(span, static_cast<std::uint64_t>(head_dim), span) ||
      !product_fits(span, span, element))
    return false;
  return two_axes_nest(tokens, ts, heads, hs, head_dim);
}

// ---- where rows share memory: for messages, computed only once a check has failed ----------------

// A view's name in messages ("x", "q", "q input", "k_cache"): up to two literal parts, made into a
// string only when a message is written (checks run on every checked call, messages almost never).
struct Name {
  const char* first = "";
  const char* second = "";  // after a space when both are non-empty
  Name() = default;
  Name(const char* s) noexcept : first(s) {}  // NOLINT(google-explicit-constructor): a literal names a view
  Name(const char* a, const char* b) noexcept : first(a), second(b) {}
  std::string str() const {
    std::string s(first);
    if (*first != '\0' && *second != '\0') s += ' ';
    return s += second;
  }
  operator std::string() const { return str(); }  // NOLINT(google-explicit-constructor): messages
};
inline std::ostream& operator<<(std::ostream& os, const Name& n) { return os << n.str(); }

// Where two views whose bounding ranges overlap meet: "<x> (token 0, head 1) element 3 is the same
// memory as <y> (token 0, head 0) element 0", or, when their rows interleave without sharing an
// element, the ranges each covers.
inline std::string where_views_meet(const std::string& x_name, const StridedRows& x, const std::string& y_name,
                                    const StridedRows& y) {
  SharedRows sh;
  if (first_shared(x, y, sh))
    return concat(x_name, " ", x.describe(sh.a), " element ", x.element_at(sh.a, sh.at),
                  " is the same memory as ", y_name, " ", y.describe(sh.b), " element ",
                  y.element_at(sh.b, sh.at));
  const auto bytes = static_cast<std::int64_t>(y.base - x.base);  // two's complement: may be negative
  const bool whole = bytes % static_cast<std::int64_t>(x.element) == 0;
  const std::int64_t off = whole ? bytes / static_cast<std::int64_t>(x.element) : bytes;
  const std::int64_t unit = whole ? 1 : static_cast<std::int64_t>(x.element);
  return concat(x_name, " spans ", whole ? "elements" : "bytes", " [0, ", x.span() * unit, ") and ", y_name,
                " [", off, ", ", off + y.span() * unit, ") counted from ", x_name,
                "'s first element; their rows interleave without sharing an element");
}

// Why the rows of one view are not disjoint: two rows that share memory, else (rows that interleave)
// only that the strides do not nest.
inline std::string rows_overlap_message(const std::string& name, const StridedRows& s,
                                        const std::string& geometry) {
  SharedRows sh;
  if (shared_rows(s, sh))
    return concat(name, " rows overlap: row ", s.describe(sh.b), " starts at element ",
                  s.element_at(sh.a, sh.at), " of row ", s.describe(sh.a), " (", geometry, ")");
  return concat(name, " rows overlap or interleave (", geometry,
                "): the rows of one axis must fit between those of the next (strides >= head_dim, nested)");
}

template <class T>
std::string check_view(const Name& name, const T* p, std::int64_t tokens, std::int64_t heads,
                       std::ptrdiff_t ts, std::ptrdiff_t hs, std::int64_t head_dim) {
  if (view_sound(p, tokens, heads, ts, hs, head_dim, sizeof(T))) return {};
  if (tokens < 0 || heads < 0)
    return concat(name, ": tokens (", tokens, ") and heads (", heads, ") must be >= 0");
  if (ts < 0 || hs < 0)
    return concat(name, " strides (token ", ts, ", head ", hs, ") must be >= 0");
  if (tokens > 0 && p == nullptr) return concat(name, " is null but holds ", tokens, " tokens");
  if (tokens > 0 && heads > 0 && !span_fits({{tokens, ts}, {heads, hs}}, head_dim, sizeof(T)))
    return concat(name, " spans more than PTRDIFF_MAX bytes (", tokens, " tokens x token stride ", ts, ", ",
                  heads, " heads x head stride ", hs, ", head_dim ", head_dim, "): no buffer is that large");
  const StridedRows rows(p, head_dim, StridedRows::Axis{"token", tokens, ts}, StridedRows::Axis{"head", heads, hs});
  if (!rows.rows_disjoint())
    return rows_overlap_message(name, rows,
                                concat("token stride ", ts, ", head stride ", hs, ", head_dim ", head_dim,
                                       "; ", tokens, " tokens x ", heads, " heads"));
  return {};
}

// What a row source reads from the caller besides the vectors (a positions array, a caller's cos/sin
// table): no output of the call may overlap it, or a value would be overwritten before it is read.
// A source adds at most kSourceReads; the fused calls add their slots after them. The most a source
// names: a multi-axis call over a caller's table reads up to 8 position streams (kMaxAxes, each its
// own array or not) and the cos and sin tables.
struct ReadExtent {
  const char* name = nullptr;
  Extent x;
};
inline constexpr std::size_t kSourceReads = 10;

// The list of them, in the order added. Its storage is left uninitialized (only the entries added
// are ever read): every checked call builds one, and zeroing a dozen entries and testing each cost
// about as much as the rest of a decode call's overlap tests.
class ReadExtents {
  struct Entry {  // (trivially constructible, unlike ReadExtent)
    const char* name;
    std::uintptr_t lo;
    std::uintptr_t hi;
  };

 public:
  static constexpr std::size_t kCapacity = kSourceReads + 1;
  // cppcheck-suppress uninitMemberVar  ; entries_ is read up to n_ only
  ReadExtents() noexcept {}  // NOLINT(modernize-use-equals-default): = default would zero the entries
  // The sources' counts are bounded above (static_assert-ed on the largest); past kCapacity a debug
  // build stops here, a release build adds nothing more.
  void add(const char* name, const Extent& x) noexcept {
    ROTARY_ASSERT(n_ < kCapacity && "ReadExtents: more reads than kCapacity");
    if (n_ < kCapacity) entries_[n_++] = Entry{name, x.lo, x.hi};
  }
  std::size_t size() const noexcept { return n_; }

  class Iterator {
   public:
    explicit Iterator(const Entry* e) noexcept : e_(e) {}
    ReadExtent operator*() const noexcept { return {e_->name, Extent{e_->lo, e_->hi}}; }
    Iterator& operator++() noexcept {
      ++e_;
      return *this;
    }
    bool operator!=(const Iterator& o) const noexcept { return e_ != o.e_; }

   private:
    const Entry* e_;
  };
  Iterator begin() const noexcept { return Iterator(entries_); }
  Iterator end() const noexcept { return Iterator(entries_ + n_); }

 private:
  Entry entries_[kCapacity];  // NOLINT(cppcoreguidelines-pro-type-member-init): read up to n_ only
  std::size_t n_ = 0;
};

// The values of tokens [0, tokens) of a positions array; empty for contiguous positions.
inline Extent positions_extent(const Positions& p, std::int64_t tokens) noexcept {
  if (p.is_contiguous() || p.is_null() || tokens <= 0) return {};
  const auto lo = reinterpret_cast<std::uintptr_t>(p.data());
  return {lo, lo + static_cast<std::uintptr_t>(tokens) * p.element_size()};
}
inline ReadExtents positions_read(const Positions& p, std::int64_t tokens) noexcept {
  ReadExtents r;
  r.add("positions", positions_extent(p, tokens));
  return r;
}

// "" or which output overlaps which read: q's (or the single stream's, x_name) and k's outputs.
template <class T>
std::string check_reads_apart(const KernelArgs<T>& a, const ReadExtents& reads, const char* x_name) {
  const bool fused = a.k.heads > 0;
  const Extent q_out = out_extent(a.q, a.tokens, a.head_dim);  // (once, not per read)
  const Extent k_out = fused ? out_extent(a.k, a.tokens, a.head_dim) : Extent{};
  for (const ReadExtent& r : reads) {
    const bool q_meets = overlap(q_out, r.x);
    if (!q_meets && !overlap(k_out, r.x)) continue;
    const char* out = !q_meets ? "k" : fused ? "q" : x_name;
    return concat("output of ", out, " and ", r.name, " share memory (", r.name,
                  " is read while the output is written)");
  }
  return {};
}

// The input and output views of a stream.
template <class T>
StridedRows in_rows(const StreamArgs<T>& s, std::int64_t tokens, std::int64_t head_dim) noexcept {
  return token_rows(s.in, head_dim, tokens, s.in_token_stride, s.heads, s.in_head_stride);
}
template <class T>
StridedRows out_rows(const StreamArgs<T>& s, std::int64_t tokens, std::int64_t head_dim) noexcept {
  return token_rows(static_cast<const T*>(s.out), head_dim, tokens, s.out_token_stride, s.heads, s.out_head_stride);
}

// Their byte extents (the views checked).
template <class T>
Extent in_extent(const StreamArgs<T>& s, std::int64_t tokens, std::int64_t head_dim) noexcept {
  return token_rows_extent(s.in, head_dim, tokens, s.in_token_stride, s.heads, s.in_head_stride);
}
template <class T>
Extent out_extent(const StreamArgs<T>& s, std::int64_t tokens, std::int64_t head_dim) noexcept {
  return token_rows_extent(static_cast<const T*>(s.out), head_dim, tokens, s.out_token_stride, s.heads,
                           s.out_head_stride);
}

// One view given as input and output: the stream rotates in place (in_rows(..).same(out_rows(..)):
// both have the stream's counts and row length).
template <class T>
bool in_place(const StreamArgs<T>& s) noexcept {
  return static_cast<const void*>(s.in) == static_cast<const void*>(s.out) &&
         s.in_token_stride == s.out_token_stride && s.in_head_stride == s.out_head_stride;
}

// The names of a tensor's views in messages, after the caller's arguments: one view rotated in place
// is `x` (or "q" / "k" of a fused call), else "input" and "output" ("q input", ...).
struct ViewNames {
  Name in;
  Name out;
  const char* tensor = "";  // "", "q" or "k"
  std::string prefix() const { return *tensor == '\0' ? std::string() : std::string(tensor) + " "; }
};
inline ViewNames view_names(const char* tensor, bool same, const char* x_name) noexcept {
  if (same) {
    const char* x = *tensor == '\0' ? x_name : tensor;
    return {Name(x), Name(x), tensor};
  }
  return {Name(tensor, "input"), Name(tensor, "output"), tensor};
}

// One tensor ("" alone, or "q" / "k" of a fused call): its views are sound, and input and output
// are the same view or disjoint.
template <class T>
std::string check_stream(const char* tensor, const StreamArgs<T>& s, std::int64_t tokens,
                         std::int64_t head_dim, const char* x_name) {
  const bool same = in_place(s);
  const ViewNames names = view_names(tensor, same, x_name);
  if (std::string m = check_view(names.in, s.in, tokens, s.heads, s.in_token_stride, s.in_head_stride, head_dim);
      !m.empty() || same)
    return m;
  if (std::string m = check_view(names.out, s.out, tokens, s.heads, s.out_token_stride, s.out_head_stride, head_dim);
      !m.empty())
    return m;
  if (overlap(in_extent(s, tokens, head_dim), out_extent(s, tokens, head_dim)))
    return concat(
        names.in, " and ", names.out, " partially overlap: ",
        where_views_meet(names.in, in_rows(s, tokens, head_dim), names.out, out_rows(s, tokens, head_dim)),
        "; pass the same view (same pointer and strides) to rotate in place, or disjoint views");
  return {};
}

// Where a cache does not hold `what` (a position described by the caller).
template <class C>
std::string outside_cache(const CosSinCache<C>& cache, const std::string& what) {
  if (cache.is_range())
    return concat(what, " is outside the cache [", cache.begin_position(), ", ", cache.end_position(), ")");
  return concat(what, " is not one of the cache's ", cache.listed_positions().size(), " listed positions");
}

// An array of `name` must hold one value per token and not be null. "" for contiguous positions.
inline std::string check_position_array(const Positions& p, std::int64_t tokens, const char* name) {
  if (p.is_contiguous()) return {};
  if (p.is_null() && p.count() > 0) return concat(name, " is null but holds ", p.count(), " values");
  if (p.count() != tokens) return concat(name, " has ", p.count(), " values for ", tokens, " tokens");
  return {};
}

// Positions: one per token for arrays (not null); each >= 0 (no int64 overflow for contiguous ones)
// and held by the cache if there is one (cache-free calls compute any position). O(1) for contiguous
// positions over a range cache, O(tokens) otherwise.
template <class C>
std::string check_positions(const Positions& p, std::int64_t tokens, const CosSinCache<C>* cache) {
  std::string m = check_position_array(p, tokens, "positions");
  if (!m.empty() || tokens == 0) return m;
  if (p.is_contiguous()) {
    const std::int64_t first = p.start();
    if (first < 0) return concat("positions start (", first, ") must be >= 0");
    if (first > std::numeric_limits<std::int64_t>::max() - (tokens - 1))
      return concat("positions start (", first, ") + ", tokens, " tokens overflows int64");
    if (cache == nullptr) return {};
    const auto at = [first](std::int64_t t) {
      return concat("position ", first + t, " (start ", first, " + token ", t, ")");
    };
    if (cache->is_range()) {  // the two ends suffice
      for (const std::int64_t t : {std::int64_t{0}, tokens - 1})
        if (!cache->contains(first + t)) return outside_cache(*cache, at(t));
      return {};
    }
    for (std::int64_t t = 0; t < tokens; ++t)
      if (!cache->contains(first + t)) return outside_cache(*cache, at(t));
    return {};
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t pos = p[t];
    if (pos < 0) return concat("positions[", t, "] (", pos, ") must be >= 0");
    if (cache != nullptr && !cache->contains(pos))
      return concat("positions[", t, "]: ", cache->out_of_cache_message(pos));
  }
  return {};
}

// The message for two of q's and k's views that share a row the call would write (qk_clash found
// them). Out of line: the check itself stays small where calls are valid.
template <class T>
ROTARY_COLD std::string qk_clash_message(const KernelArgs<T>& a, int x_view, int y_view) {
  const ViewNames qn = view_names("q", in_place(a.q), "");
  const ViewNames kn = view_names("k", in_place(a.k), "");
  const auto rows = [&a](int view) {  // 0: q in, 1: q out, 2: k in, 3: k out
    const StreamArgs<T>& s = view < 2 ? a.q : a.k;
    return view % 2 == 0 ? in_rows(s, a.tokens, a.head_dim) : out_rows(s, a.tokens, a.head_dim);
  };
  const Name names[] = {qn.in, qn.out, kn.in, kn.out};
  return concat("q and k views overlap: ", where_views_meet(names[x_view], rows(x_view), names[y_view], rows(y_view)),
                "; a q output may not share a row with k, nor a k output with q");
}

// The first of q's and k's views that share a row the call would write (a q output with a k view, or
// a k output with q's input), and where; "" if none.
template <class T>
std::string qk_clash(const KernelArgs<T>& a) {
  // byte extents first: views apart there are apart (q and k in buffers of their own, in place)
  const Extent q_in = in_extent(a.q, a.tokens, a.head_dim);
  const Extent q_out = out_extent(a.q, a.tokens, a.head_dim);
  const Extent k_in = in_extent(a.k, a.tokens, a.head_dim);
  const Extent k_out = out_extent(a.k, a.tokens, a.head_dim);
  if (!overlap(q_out, k_in) && !overlap(q_out, k_out) && !overlap(k_out, q_in)) return {};
  const StridedRows views[] = {in_rows(a.q, a.tokens, a.head_dim), out_rows(a.q, a.tokens, a.head_dim),
                               in_rows(a.k, a.tokens, a.head_dim), out_rows(a.k, a.tokens, a.head_dim)};
  constexpr int kPairs[3][2] = {{1, 2}, {1, 3}, {3, 0}};  // q out with k in, q out with k out, k out with q in
  for (const auto& [i, j] : kPairs)
    if (!views[i].apart(views[j])) return qk_clash_message(a, i, j);
  return {};
}

// The shapes of a call: counts, rotary_dim, every stream's strides and extents, in/out and q/k
// overlap. Positions are the row source's to check (driver.hpp). x_name: what the caller calls a
// single tensor rotated in place ("x", "keys").
template <class T>
std::string check_call(const KernelArgs<T>& a, const char* x_name = "x") {
  if (a.tokens < 0) return concat("tokens (", a.tokens, ") must be >= 0");
  if (a.q.heads < 1) return concat("heads (", a.q.heads, ") must be >= 1");
  if (a.k.heads < 0) return concat("key heads (", a.k.heads, ") must be >= 0");
  if (a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim || a.rotary_dim <= 0)
    return concat("rotary_dim (", a.rotary_dim, ") must be even, positive and <= head_dim (",
                  a.head_dim, ")");
  const bool fused = a.k.heads > 0;
  if (std::string m = check_stream(fused ? "q" : "", a.q, a.tokens, a.head_dim, x_name); !m.empty() || !fused)
    return m;
  if (std::string m = check_stream("k", a.k, a.tokens, a.head_dim, x_name); !m.empty()) return m;
  return qk_clash(a);
}

// The one throw-or-assert idiom: `check` returns "" or what is wrong. Checked calls run it and
// throw rotary::error with its message; unchecked ones run it only in debug builds (no NDEBUG),
// printing the message and failing a ROTARY_ASSERT, so release builds pay nothing.
template <class Check>
void require(bool checked, const Check& check) {
  if (checked) {
    const auto& message = check();  // a string, or a reference to one
    if (!message.empty()) throw error(message);
  } else {
    ROTARY_ASSERT_MESSAGE(check());
  }
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_CHECKS_HPP
