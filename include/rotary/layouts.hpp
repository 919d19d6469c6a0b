// rotary — batched tensor layouts (BSHD, BHSD, SBHD, packed THD with cu_seqlens) and per-sequence
// positions (start offsets, restart per sequence, per-token arrays, context-parallel chunks).
//
// Nothing here is a new kernel: every call is validated whole first, then reaches the same
// strided / fused entry points as apply.hpp (one dispatch for the whole batch where the batch folds
// into one token axis — BSHD/THD dense, SBHD or any layout with seq == 1 or batch == 1 — else one
// dispatch per sequence). Every entry point takes a Direction (inverse = the backward pass: the
// gradient with respect to the input is the inverse rotation of the output gradient) and an
// optional ParallelFor.
//
//   apply_batch(rope, layout, x, shape, positions[, dir, parallel])            in place, dense
//   apply_batch(rope, in_view, out_view, positions[, dir, parallel])            any strides
//   apply_qk_batch(rope, layout, q, q_shape, k, k_heads, positions[, ...])     fused, GQA/MQA; k_heads 0: no key
//   apply_qk_batch(rope, q_in, q_out, k_in, k_out, positions[, ...])            views, out of place
//   apply_varlen(rope, x, layout, cu_seqlens, positions[, ...])                 packed THD
//   apply_qk_varlen(rope, q, q_layout, k, k_layout, cu_seqlens, positions[, ...])
//   token_positions(positions, lengths)   the per-token positions a call uses (for checks/tests)
#ifndef ROTARY_LAYOUTS_HPP
#define ROTARY_LAYOUTS_HPP

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "apply.hpp"
#include "config.hpp"
#include "positions.hpp"
#include "types.hpp"

namespace rotary {

// Memory order of a 4-d activation tensor (outermost first; head_dim is innermost, stride 1).
//   bshd: [batch, seq, heads, head_dim]   (HF / flash-attn q before transpose)
//   bhsd: [batch, heads, seq, head_dim]   (HF after transpose(1, 2), SDPA)
//   sbhd: [seq, batch, heads, head_dim]   (Megatron)
//   thd:  [total_tokens, heads, head_dim] packed variable-length sequences (apply_varlen). As a
//         dense batch of equal-length sequences it is laid out exactly as bshd.
enum class Layout { bshd, bhsd, sbhd, thd };

constexpr std::string_view to_string(Layout l) noexcept {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::bhsd: return "bhsd";
    case Layout::sbhd: return "sbhd";
    default: return "thd";
  }
}

struct BatchShape {
  std::int64_t batch = 0;
  std::int64_t seq = 0;  // tokens per sequence (a rank's local tokens under context parallelism)
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
};

// Element strides of the batch, sequence and head axes (head_dim has stride 1).
struct BatchStrides {
  std::ptrdiff_t batch = 0;
  std::ptrdiff_t seq = 0;
  std::ptrdiff_t head = 0;
};

// Strides of a dense (contiguous) tensor in `layout`.
inline BatchStrides dense_strides(Layout layout, const BatchShape& s) noexcept {
  const std::ptrdiff_t d = s.head_dim;
  switch (layout) {
    case Layout::bhsd: return {s.heads * s.seq * d, d, s.seq * d};
    case Layout::sbhd: return {s.heads * d, s.batch * s.heads * d, d};
    default: return {s.seq * s.heads * d, s.heads * d, d};  // bshd, thd
  }
}

// Sequence b of a batch: element offset of its first row and its tokens x heads layout, for use
// with apply_strided / apply_qk_strided directly.
inline std::ptrdiff_t batch_offset(const BatchStrides& st, std::int64_t b) noexcept { return st.batch * b; }
inline StridedLayout sequence_layout(const BatchShape& s, const BatchStrides& st) noexcept {
  return StridedLayout{s.seq, s.heads, st.seq, st.head};
}
inline std::ptrdiff_t batch_offset(Layout layout, const BatchShape& s, std::int64_t b) noexcept {
  return batch_offset(dense_strides(layout, s), b);
}
inline StridedLayout layout_of(Layout layout, const BatchShape& s) noexcept {
  return sequence_layout(s, dense_strides(layout, s));
}

// A strided 4-d view: data, shape and strides. BatchView<T> converts to BatchView<const T>.
template <class T>
struct BatchView {
  T* data = nullptr;
  BatchShape shape;
  BatchStrides strides;

  BatchView() = default;
  BatchView(T* d, const BatchShape& s, const BatchStrides& st) noexcept : data(d), shape(s), strides(st) {}
  BatchView(T* d, Layout layout, const BatchShape& s) noexcept : data(d), shape(s), strides(dense_strides(layout, s)) {}
  // Implicit, like T* to const T*: a mutable view passes where a read-only one is expected.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  BatchView(const BatchView<U>& v) noexcept  // NOLINT(google-explicit-constructor)
      : data(v.data), shape(v.shape), strides(v.strides) {}
};

// Offsets to cu_seqlens-style boundaries: batch + 1 non-decreasing values from 0 to total tokens.
// A non-owning view of int32 or int64 values.
class CuSeqlens {
 public:
  CuSeqlens(const std::int32_t* v, std::int64_t count) noexcept : p32_(v), count_(count), wide_(false) {}
  CuSeqlens(const std::int64_t* v, std::int64_t count) noexcept : p64_(v), count_(count), wide_(true) {}
  // Implicit on purpose, like Positions: apply_varlen(..., cu_seqlens_vector, ...).
  CuSeqlens(const std::vector<std::int32_t>& v) noexcept  // NOLINT(google-explicit-constructor)
      : CuSeqlens(v.data(), static_cast<std::int64_t>(v.size())) {}
  CuSeqlens(const std::vector<std::int64_t>& v) noexcept  // NOLINT(google-explicit-constructor)
      : CuSeqlens(v.data(), static_cast<std::int64_t>(v.size())) {}
  std::int64_t count() const noexcept { return count_; }
  // Whether the pointer is null; checked entry points reject that for count() > 0.
  bool is_null() const noexcept { return wide_ ? p64_ == nullptr : p32_ == nullptr; }
  // The caller's values (int32 or int64, element_size() bytes each), for overlap checks.
  const void* data() const noexcept { return wide_ ? static_cast<const void*>(p64_) : static_cast<const void*>(p32_); }
  std::size_t element_size() const noexcept { return wide_ ? sizeof(std::int64_t) : sizeof(std::int32_t); }
  // Unchecked (ROTARY_ASSERT in debug builds): i in [0, count()) of a non-null array.
  std::int64_t operator[](std::int64_t i) const noexcept {
    ROTARY_ASSERT(i >= 0 && i < count_ && !is_null());
    return wide_ ? p64_[i] : p32_[i];
  }

 private:
  // The width is a flag, not "whichever pointer is non-null": an empty std::vector may give a null
  // data(), which must still read as that vector's width.
  const std::int32_t* p32_ = nullptr;
  const std::int64_t* p64_ = nullptr;
  std::int64_t count_ = 0;
  bool wide_ = false;
};

// How context parallelism splits each full sequence of length L = ranks * local_len:
//   contiguous:    rank r holds tokens [r*local_len, (r+1)*local_len)
//   load_balanced: the sequence is cut into 2*ranks chunks of local_len/2 tokens; rank r holds
//                  chunk r then chunk 2*ranks-1-r (the zigzag split of ring attention /
//                  Megatron-CP, balancing causal-attention work). local_len must be even.
enum class ContextSplit { contiguous, load_balanced };

// Positions of the tokens of a batch of sequences. Token t (0-based within its sequence b, local
// length len_b) gets:
//   start(s):          s + t                           (one offset for every sequence)
//   starts({s_b}):     s_b + t                         (one per sequence: decode with different past
//                                                       lengths, or prefill after a cached prefix)
//   restart():         t                               (packed sequences each start at 0)
//   per_token(p):      p[token index in memory order of the batch: b*seq + t, or the packed index]
//   context_parallel(split, rank, ranks[, starts]):
//                      s_b + the position in the unsplit sequence of the rank's local token t
class SequencePositions {
 public:
  enum class Kind { starts, per_token, context_parallel };

  static SequencePositions restart() { return start(0); }
  static SequencePositions start(std::int64_t s) {
    SequencePositions p;
    p.starts_ = {s};
    return p;
  }
  static SequencePositions starts(std::vector<std::int64_t> s) {
    SequencePositions p;
    p.starts_ = std::move(s);
    return p;
  }
  // The array must outlive the call.
  static SequencePositions per_token(const Positions& positions) {
    SequencePositions p;
    p.kind_ = Kind::per_token;
    p.tokens_ = positions;
    return p;
  }
  static SequencePositions context_parallel(ContextSplit split, std::int64_t rank, std::int64_t ranks,
                                            std::vector<std::int64_t> sequence_starts = {0}) {
    SequencePositions p;
    p.kind_ = Kind::context_parallel;
    p.split_ = split;
    p.rank_ = rank;
    p.ranks_ = ranks;
    p.starts_ = std::move(sequence_starts);
    return p;
  }

  Kind kind() const noexcept { return kind_; }
  const std::vector<std::int64_t>& start_offsets() const noexcept { return starts_; }
  const Positions& token_array() const noexcept { return tokens_; }
  ContextSplit split() const noexcept { return split_; }
  std::int64_t rank() const noexcept { return rank_; }
  std::int64_t ranks() const noexcept { return ranks_; }

  // "" or what is wrong for sequences of these local lengths.
  std::string check(const std::vector<std::int64_t>& lengths, std::int64_t total) const {
    if (kind_ == Kind::per_token) return check_token_array(total);
    const auto n = static_cast<std::int64_t>(lengths.size());
    if (std::string m = check_rule(n); !m.empty()) return m;
    if (kind_ == Kind::context_parallel && split_ == ContextSplit::load_balanced)
      for (std::int64_t b = 0; b < n; ++b)
        if (std::string m = check_even(b, lengths[static_cast<std::size_t>(b)]); !m.empty()) return m;
    for (std::int64_t b = 0; b < n; ++b)
      if (std::string m = check_last(b, lengths[static_cast<std::size_t>(b)]); !m.empty()) return m;
    return {};
  }
  // The same for a dense batch: `sequences` sequences of `seq` local tokens each, without a vector of
  // lengths (O(1), or O(sequences) for one start per sequence).
  std::string check(std::int64_t sequences, std::int64_t seq) const {
    using detail::concat;
    if (sequences < 0 || seq < 0) return concat("sequences (", sequences, ") and seq (", seq, ") must be >= 0");
    if (seq > 0 && sequences > std::numeric_limits<std::int64_t>::max() / seq)
      return concat(sequences, " sequences x ", seq, " tokens overflows int64");
    if (kind_ == Kind::per_token) return check_token_array(sequences * seq);
    if (std::string m = check_rule(sequences); !m.empty()) return m;
    if (sequences == 0 || seq == 0) return {};
    if (kind_ == Kind::context_parallel && split_ == ContextSplit::load_balanced)
      if (std::string m = check_even(0, seq); !m.empty()) return m;
    // One start for every sequence: the first sequence's last position is every sequence's.
    const std::int64_t n = starts_.size() == 1 ? 1 : sequences;
    for (std::int64_t b = 0; b < n; ++b)
      if (std::string m = check_last(b, seq); !m.empty()) return m;
    return {};
  }

  // Position of local token t of sequence b (length len), `index` its index in memory order.
  std::int64_t operator()(std::size_t b, std::int64_t t, std::int64_t len, std::int64_t index) const noexcept {
    if (kind_ == Kind::per_token) return tokens_[index];
    const std::int64_t s = starts_.size() == 1 ? starts_[0] : starts_[b];
    if (kind_ == Kind::starts) return s + t;
    if (split_ == ContextSplit::contiguous) return s + rank_ * len + t;
    const std::int64_t c = len / 2;
    return t < c ? s + rank_ * c + t : s + (2 * ranks_ - 1 - rank_) * c + (t - c);
  }

 private:
  SequencePositions() = default;
  std::string check_token_array(std::int64_t total) const {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (tokens_.is_contiguous()) {
      if (total > 0 && tokens_.start() > kMax - (total - 1))
        return detail::concat("per-token positions start (", tokens_.start(), ") + ", total,
                              " tokens overflows int64");
      return {};
    }
    return detail::check_position_array(tokens_, total, "per-token positions");
  }
  // The start offsets and context-parallel split fit n sequences.
  std::string check_rule(std::int64_t n) const {
    using detail::concat;
    if (starts_.size() != 1 && static_cast<std::int64_t>(starts_.size()) != n)
      return concat("sequence start offsets has ", starts_.size(), " values for ", n,
                    " sequences (give 1 or one per sequence)");
    if (kind_ == Kind::context_parallel) {
      if (ranks_ < 1) return concat("context-parallel ranks (", ranks_, ") must be >= 1");
      if (rank_ < 0 || rank_ >= ranks_) return concat("context-parallel rank (", rank_, ") must be in [0, ", ranks_, ")");
    }
    return {};
  }
  std::string check_even(std::int64_t b, std::int64_t length) const {
    if (length % 2 == 0) return {};
    return detail::concat("load-balanced context parallelism: sequence ", b, " has ", length,
                          " local tokens, which must be even (two chunks per rank)");
  }
  // Sequence b's last position, s_b + span - 1 (span: its local length, times the ranks under context
  // parallelism), must fit in int64; negative positions are rejected per token later.
  std::string check_last(std::int64_t b, std::int64_t length) const {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (length <= 0) return {};
    const std::int64_t s = starts_.size() == 1 ? starts_[0] : starts_[static_cast<std::size_t>(b)];
    const std::int64_t ranks = kind_ == Kind::context_parallel ? ranks_ : 1;
    if (ranks > kMax / length || (s > 0 && ranks * length - 1 > kMax - s))
      return ranks == 1 ? detail::concat("sequence ", b, ": start (", s, ") + ", length, " tokens overflows int64")
                        : detail::concat("sequence ", b, ": start (", s, ") + ", ranks, " ranks x ", length,
                                         " local tokens overflows int64");
    return {};
  }

  Kind kind_ = Kind::starts;
  std::vector<std::int64_t> starts_{0};
  Positions tokens_ = Positions::contiguous(0);
  ContextSplit split_ = ContextSplit::contiguous;
  std::int64_t rank_ = 0;
  std::int64_t ranks_ = 1;
};

namespace detail {

// make() allocates memory for n values of `what`: a claim of more than any allocation can hold (a
// view's shape that spans no real buffer) is refused as rotary::error, before anything is written.
template <class Make>
auto allocate_or_refuse(const char* what, std::int64_t n, const Make& make) -> decltype(make()) {
  try {
    return make();
  } catch (const std::length_error&) {
  } catch (const std::bad_alloc&) {
  }
  throw error(concat("the call's ", what, " (", n, " values) do not fit in memory"));
}

}  // namespace detail

// The positions of every token (memory order: sequence after sequence) for sequences of these
// local lengths. Throws rotary::error if `p` does not fit the lengths.
inline std::vector<std::int64_t> token_positions(const SequencePositions& p, const std::vector<std::int64_t>& lengths) {
  std::int64_t total = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    const std::int64_t l = lengths[b];
    if (l < 0) throw error(detail::concat("sequence ", b, " has ", l, " tokens; lengths must be >= 0"));
    if (l > std::numeric_limits<std::int64_t>::max() - total)
      throw error(detail::concat("sequence lengths overflow int64 at sequence ", b, " (", total, " + ", l, ")"));
    total += l;
  }
  const std::string m = p.check(lengths, total);
  if (!m.empty()) throw error(m);
  std::vector<std::int64_t> out = detail::allocate_or_refuse("positions", total, [total] {
    return std::vector<std::int64_t>(static_cast<std::size_t>(total));
  });
  std::int64_t i = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (std::int64_t t = 0; t < lengths[b]; ++t, ++i) out[static_cast<std::size_t>(i)] = p(b, t, lengths[b], i);
  return out;
}

namespace detail {

// "" or what is wrong with cu_seqlens for `total` packed tokens; fills lengths.
inline std::string check_cu_seqlens(const CuSeqlens& cu, std::int64_t total, std::vector<std::int64_t>& lengths) {
  if (cu.count() < 1) return concat("cu_seqlens has ", cu.count(), " values; it needs batch + 1 >= 1");
  if (cu.is_null()) return concat("cu_seqlens is null but holds ", cu.count(), " values");
  if (cu[0] != 0) return concat("cu_seqlens[0] (", cu[0], ") must be 0");
  lengths.resize(static_cast<std::size_t>(cu.count() - 1));
  for (std::int64_t i = 1; i < cu.count(); ++i) {
    if (cu[i] < cu[i - 1])
      return concat("cu_seqlens[", i, "] (", cu[i], ") < cu_seqlens[", i - 1, "] (", cu[i - 1],
                    "): offsets must be non-decreasing");
    lengths[static_cast<std::size_t>(i - 1)] = cu[i] - cu[i - 1];
  }
  if (cu[cu.count() - 1] != total)
    return concat("cu_seqlens[", cu.count() - 1, "] (", cu[cu.count() - 1], ") != total tokens (", total, ")");
  return {};
}

// Rows of a 4-d view are pairwise disjoint (sufficient condition: strides nest).
inline bool batch_rows_disjoint(const BatchShape& s, const BatchStrides& st) noexcept {
  if (s.batch == 0 || s.seq == 0 || s.heads == 0) return true;  // no rows (dense strides may be 0)
  std::array<std::pair<std::ptrdiff_t, std::int64_t>, 3> ax{
      {{st.batch, s.batch}, {st.seq, s.seq}, {st.head, s.heads}}};
  std::sort(ax.begin(), ax.end());
  std::ptrdiff_t reach = s.head_dim;  // extent of one block of the inner axes
  for (const auto& [stride, count] : ax) {
    if (count <= 1) continue;
    if (stride < reach) return false;
    reach += stride * (count - 1);
  }
  return true;
}

template <class T>
Extent batch_extent(const T* p, const BatchShape& s, const BatchStrides& st) noexcept {
  if (s.batch == 0 || s.seq == 0 || s.heads == 0) return {};
  const auto lo = reinterpret_cast<std::uintptr_t>(p);
  const std::int64_t last = (s.batch - 1) * st.batch + (s.seq - 1) * st.seq + (s.heads - 1) * st.head + s.head_dim;
  return {lo, lo + static_cast<std::uintptr_t>(last) * sizeof(T)};
}

// The rows of a batch view, for overlap messages.
template <class T>
RowSet batch_rows(const BatchView<T>& v) noexcept {
  return RowSet(v.data, v.shape.head_dim,
                {{"batch", v.shape.batch, v.strides.batch},
                 {"token", v.shape.seq, v.strides.seq},
                 {"head", v.shape.heads, v.strides.head}});
}

template <class T>
std::string check_batch_view(const std::string& name, const BatchView<T>& v, std::int64_t head_dim) {
  const BatchShape& s = v.shape;
  if (s.batch < 0 || s.seq < 0 || s.heads < 0)
    return concat(name, " shape (batch ", s.batch, ", seq ", s.seq, ", heads ", s.heads, ") must be >= 0");
  if (s.head_dim != head_dim) return concat(name, " head_dim (", s.head_dim, ") != rope head_dim (", head_dim, ")");
  if (v.strides.batch < 0 || v.strides.seq < 0 || v.strides.head < 0)
    return concat(name, " strides (batch ", v.strides.batch, ", seq ", v.strides.seq, ", head ", v.strides.head,
                  ") must be >= 0");
  if (s.batch > 0 && s.seq > 0 && s.heads > 0 &&
      !span_fits({{s.batch, v.strides.batch}, {s.seq, v.strides.seq}, {s.heads, v.strides.head}}, s.head_dim,
                 sizeof(T)))
    return concat(name, " spans more than PTRDIFF_MAX bytes (strides: batch ", v.strides.batch, ", seq ",
                  v.strides.seq, ", head ", v.strides.head, "; shape ", s.batch, " x ", s.seq, " x ", s.heads,
                  "): no buffer is that large");
  if (!batch_rows_disjoint(s, v.strides))
    return rows_overlap_message(
        name, batch_rows(v),
        concat("strides (batch ", v.strides.batch, ", seq ", v.strides.seq, ", head ", v.strides.head,
               "), head_dim ", s.head_dim, "; shape ", s.batch, " x ", s.seq, " x ", s.heads));
  return {};
}

template <class T>
bool same_view(const BatchView<const T>& in, const BatchView<T>& out) noexcept {
  return in.data == out.data && in.strides.batch == out.strides.batch && in.strides.seq == out.strides.seq &&
         in.strides.head == out.strides.head && in.shape.batch == out.shape.batch &&
         in.shape.seq == out.shape.seq && in.shape.heads == out.shape.heads &&
         in.shape.head_dim == out.shape.head_dim;
}

template <class T>
std::string check_in_out(const ViewNames& names, const BatchView<const T>& in, const BatchView<T>& out) {
  const BatchShape& a = in.shape;
  const BatchShape& b = out.shape;
  if (a.batch != b.batch || a.seq != b.seq || a.heads != b.heads)
    return concat(names.prefix(), "shape mismatch: input is ", a.batch, " x ", a.seq, " x ", a.heads,
                  ", output is ", b.batch, " x ", b.seq, " x ", b.heads, " (batch x seq x heads)");
  const bool same = in.data == out.data && in.strides.batch == out.strides.batch &&
                    in.strides.seq == out.strides.seq && in.strides.head == out.strides.head;
  if (!same && overlap(batch_extent(in.data, a, in.strides), batch_extent(out.data, b, out.strides)))
    return concat(names.in, " and ", names.out,
                  " overlap: ", where_views_meet(names.in, batch_rows(in), names.out, batch_rows(out)),
                  "; give the same view (in place) or disjoint buffers");
  return {};
}

// Rows of views a and b (same strides; e.g. q and k heads of one fused QKV buffer) are disjoint
// when b's heads follow a's (or a's follow b's) inside every token: the union is one view whose
// rows do not overlap (detail::heads_apart is the same test on one dispatch's tokens x heads views).
template <class A, class B>
bool heads_interleave_disjointly(const BatchView<A>& a, const BatchView<B>& b) noexcept {
  if (a.strides.batch != b.strides.batch || a.strides.seq != b.strides.seq || a.strides.head != b.strides.head ||
      a.strides.head <= 0)
    return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a.data);
  const auto pb = reinterpret_cast<std::uintptr_t>(b.data);
  const bool a_first = pa <= pb;
  const std::uintptr_t bytes = a_first ? pb - pa : pa - pb;
  using E = std::remove_const_t<A>;
  if (bytes % sizeof(E) != 0) return false;
  const auto e = static_cast<std::ptrdiff_t>(bytes / sizeof(E));
  if (e % a.strides.head != 0) return false;
  const std::int64_t gap = e / a.strides.head;
  const std::int64_t first_heads = a_first ? a.shape.heads : b.shape.heads;
  if (gap < first_heads) return false;
  BatchShape u = a.shape;
  u.heads = gap + (a_first ? b.shape.heads : a.shape.heads);
  return batch_rows_disjoint(u, a.strides);
}

template <class A, class B>
bool rows_apart(const BatchView<A>& a, const BatchView<B>& b) noexcept {
  return !overlap(batch_extent(a.data, a.shape, a.strides), batch_extent(b.data, b.shape, b.strides)) ||
         heads_interleave_disjointly(a, b);
}

// ---- positions of a batch ------------------------------------------------------------------------
// 1-D rotators take SequencePositions (per-sequence rules); rotators with per-token positions of
// their own type P (multi-axis: AxisPositions) take one P over the batch's tokens in memory order
// (b * seq + t; the packed index for varlen), which needs P::tokens() and P::slice(first, count).

template <class P>
struct batch_positions {
  using type = P;
};
template <>
struct batch_positions<Positions> {
  using type = SequencePositions;
};
template <class R>
using batch_positions_t = typename batch_positions<rotator_positions_t<R>>::type;

inline std::string check_batch_positions(const SequencePositions& p, const std::vector<std::int64_t>& lengths,
                                         std::int64_t total) {
  return p.check(lengths, total);
}
template <class P>
std::string check_batch_positions(const P& p, const std::vector<std::int64_t>& /*lengths*/, std::int64_t total) {
  if (p.tokens() != total)
    return concat("positions have ", p.tokens(), " tokens per stream for the ", total,
                  " tokens of the batch (one per token, in memory order)");
  return {};
}
// A dense batch: `batch` sequences of `seq` tokens (batch x seq already known to fit in int64).
inline std::string check_batch_positions(const SequencePositions& p, std::int64_t batch, std::int64_t seq) {
  return p.check(batch, seq);
}
template <class P>
std::string check_batch_positions(const P& p, std::int64_t batch, std::int64_t seq) {
  return check_batch_positions(p, std::vector<std::int64_t>{}, batch * seq);
}

// What a batched call reads from the caller besides its inputs and what its rotator's source
// reports: a per-token positions array, read by every dispatch (each reads its own slice, so the
// whole array is checked here). No output may overlap it. Nothing else needs the check: start
// offsets are SequencePositions' own copy, and cu_seqlens is read into the lengths before anything
// is written (an output over it is rotated correctly).
inline ReadExtents sequence_reads(const SequencePositions& p, std::int64_t total) noexcept {
  ReadExtents r{};
  if (p.kind() == SequencePositions::Kind::per_token)
    r[0] = ReadExtent{"per-token positions", positions_extent(p.token_array(), total)};
  return r;
}
// Rotators with positions of their own type: the source's reads() covers them (each dispatch's slice).
template <class P>
ReadExtents sequence_reads(const P& /*p*/, std::int64_t /*total*/) noexcept {
  return {};
}

// "" or which output of a batched call (q's, k's: each batch view whole, every sequence) shares
// memory with which read; checked before any sequence is written.
template <class T>
std::string check_batch_reads_apart(const BatchView<T>& q_out, const Name& q_name, const BatchView<T>* k_out,
                                    const Name& k_name, const ReadExtents& reads) {
  for (const ReadExtent& r : reads) {
    if (r.name == nullptr) continue;
    if (overlap(batch_extent(q_out.data, q_out.shape, q_out.strides), r.x))
      return concat(q_name, " and ", r.name, " share memory (", r.name, " is read while ", q_name, " is written)");
    if (k_out != nullptr && overlap(batch_extent(k_out->data, k_out->shape, k_out->strides), r.x))
      return concat(k_name, " and ", r.name, " share memory (", r.name, " is read while ", k_name, " is written)");
  }
  return {};
}

// The Positions of each dispatch: contiguous where possible, else expanded to int64 per token.
class SequencePlan {
 public:
  SequencePlan(const SequencePositions& pos, const std::vector<std::int64_t>& lengths, bool fold) : pos_(&pos) {
    const bool starts = pos.kind() == SequencePositions::Kind::starts;
    per_token_ = pos.kind() == SequencePositions::Kind::per_token;
    const bool expand = per_token_ ? !fold && !pos.token_array().is_contiguous()
                                   : !(starts && (lengths.size() == 1 || !fold));
    if (expand) expanded_ = token_positions(pos, lengths);
    expanded_mode_ = expand;
  }
  // Every token, in memory order (one dispatch); seq: the first sequence's length.
  Positions whole(std::int64_t seq) const {
    if (per_token_) return pos_->token_array();
    if (!expanded_mode_) return Positions::contiguous((*pos_)(0, 0, seq, 0));
    return Positions(expanded_);
  }
  // Sequence b of a batch of sequences of seq tokens each.
  Positions piece(std::int64_t b, std::int64_t seq) const {
    if (per_token_ && pos_->token_array().is_contiguous())
      return Positions::contiguous(pos_->token_array().start() + b * seq);
    if (!expanded_mode_) return Positions::contiguous((*pos_)(static_cast<std::size_t>(b), 0, seq, b * seq));
    return Positions(expanded_.data() + b * seq, seq);
  }

 private:
  const SequencePositions* pos_;
  bool per_token_ = false;
  bool expanded_mode_ = false;
  std::vector<std::int64_t> expanded_;
};

template <class P>
struct TokenPlan {
  const P* pos;
  P whole(std::int64_t /*seq*/) const { return *pos; }
  P piece(std::int64_t b, std::int64_t seq) const { return pos->slice(b * seq, seq); }
};

inline SequencePlan plan_positions(const SequencePositions& p, const std::vector<std::int64_t>& lengths, bool fold) {
  return SequencePlan(p, lengths, fold);
}
template <class P>
TokenPlan<P> plan_positions(const P& p, const std::vector<std::int64_t>& /*lengths*/, bool /*fold*/) {
  return TokenPlan<P>{&p};
}

// ---- the batch driver ---------------------------------------------------------------------------

// One dispatch's worth: a q (and optional k) token range with its positions.
template <class T, class P>
struct Piece {
  const T* q_in;
  T* q_out;
  const T* k_in;
  T* k_out;
  std::int64_t tokens;
  std::ptrdiff_t q_in_ts, q_out_ts, k_in_ts, k_out_ts;
  P positions;
};

// The batch folds into one token axis of stride `ts` if every sequence follows the previous one.
inline bool foldable(const BatchShape& s, const BatchStrides& st, std::ptrdiff_t& ts) noexcept {
  if (s.batch <= 1) {
    ts = st.seq;
    return true;
  }
  if (s.seq == 1) {
    ts = st.batch;
    return true;
  }
  ts = st.seq;
  return st.batch == s.seq * st.seq;
}

// Sequences that interleave in memory (SBHD: each token holds every sequence's heads side by side)
// run token by token across the sequences, so the call walks the buffer in order instead of once
// per sequence at a stride of batch x heads rows. Table rows only (sources that make rows per
// block run one sequence after another). Same bits either way.
template <class T>
void run_interleaved(const std::vector<KernelArgs<T>>& calls, const ParallelFor& parallel) {
  const Kernel<T> kernel = select_kernel<T>();
  const std::int64_t tokens = calls.front().tokens;  // every sequence of a batch has seq tokens
  std::int64_t bytes = 0;
  for (const KernelArgs<T>& a : calls) bytes += token_bytes(a);
  for_token_ranges(tokens, bytes, parallel, [&calls, kernel](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t)
      for (const KernelArgs<T>& a : calls) run_tokens(kernel, a, t, t + 1);
  });
}

// Sequences one after another in memory (BHSD), with threads: one parallel region over the batch's
// tokens in sequence order rather than one per sequence, so each thread takes whole sequences where
// it can (long head-major runs) and the threads meet once per call, not once per sequence. Table
// rows only, as above. Same bits: each row is rotated exactly once with the same cos/sin.
template <class T>
void run_sequences(const std::vector<KernelArgs<T>>& calls, const ParallelFor& parallel) {
  const Kernel<T> kernel = select_kernel<T>();
  const std::int64_t seq = calls.front().tokens;  // every sequence of a batch has seq tokens
  const auto total = static_cast<std::int64_t>(calls.size()) * seq;
  if (total == 0) return;
  const auto body = [&calls, kernel, seq](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin / seq; b * seq < end; ++b) {
      const std::int64_t lo = std::max(begin, b * seq) - b * seq;
      const std::int64_t hi = std::min(end, (b + 1) * seq) - b * seq;
      if (lo < hi) run_tokens(kernel, calls[static_cast<std::size_t>(b)], lo, hi);
    }
  };
  for_token_ranges(total, token_bytes(calls.front()), parallel, body);
}

// The whole batched call of rotator r: validate everything, then dispatch.
template <class R, class T>
void batch_qk(bool checked, const R& r, const BatchView<const T>& q_in, const BatchView<T>& q_out,
              const BatchView<const T>& k_in, const BatchView<T>& k_out, const batch_positions_t<R>& pos,
              Direction dir, const ParallelFor& parallel) {
  using P = rotator_positions_t<R>;
  const bool has_k = k_in.shape.heads != 0;  // 0: no key; negative heads are refused below
  // Views are named after the arguments: x (one tensor in place), input and output, or q and k.
  const ViewNames qn = view_names(has_k ? "q" : "", same_view(q_in, q_out), "x");
  const ViewNames kn = view_names("k", same_view(k_in, k_out), "x");
  // Every shape first (no arithmetic on a count before it is known to be sane), then the positions,
  // then every output of the call apart from what the call reads.
  require(checked, [&] {
    std::string m = check_batch_view(qn.in, q_in, r.head_dim());
    if (m.empty()) m = check_batch_view(qn.out, q_out, r.head_dim());
    if (m.empty()) m = check_in_out(qn, q_in, q_out);
    if (m.empty() && has_k) {
      m = check_batch_view(kn.in, k_in, r.head_dim());
      if (m.empty()) m = check_batch_view(kn.out, k_out, r.head_dim());
      if (m.empty()) m = check_in_out(kn, k_in, k_out);
      if (m.empty() && (k_in.shape.batch != q_in.shape.batch || k_in.shape.seq != q_in.shape.seq))
        m = concat("q is ", q_in.shape.batch, " x ", q_in.shape.seq, " but k is ", k_in.shape.batch, " x ",
                   k_in.shape.seq, " (batch x seq)");
    }
    // No key is both k views empty: a k output with heads to an input of none would stay unrotated.
    if (m.empty() && !has_k && k_out.shape.heads != 0)
      m = concat("k input has 0 heads (no key) but k output has ", k_out.shape.heads,
                 ": for no key, give both 0 heads");
    if (!m.empty()) return m;
    const BatchShape& s = q_in.shape;
    if (s.seq > 0 && s.batch > std::numeric_limits<std::int64_t>::max() / s.seq)
      return concat(qn.in, " batch (", s.batch, ") x seq (", s.seq, ") overflows int64");
    if (s.batch > 0 && s.seq > 0 && s.heads < 1)
      return concat(qn.in, " heads (", s.heads, ") must be >= 1 (the batch has ", s.batch * s.seq, " tokens)");
    m = check_batch_positions(pos, s.batch, s.seq);
    if (m.empty())
      m = check_batch_reads_apart(q_out, qn.out, has_k ? &k_out : nullptr, kn.out,
                                  sequence_reads(pos, s.batch * s.seq));
    return m;
  });
  if (q_in.shape.batch <= 0 || q_in.shape.seq <= 0) return;  // (<= 0: unchecked calls, release builds)

  const BatchShape& s = q_in.shape;
  std::ptrdiff_t qi = 0, qo = 0, ki = 0, ko = 0;
  bool fold = foldable(s, q_in.strides, qi) && foldable(s, q_out.strides, qo);
  if (has_k) fold = fold && foldable(s, k_in.strides, ki) && foldable(s, k_out.strides, ko);
  // The batch has tokens and its views fit in memory, so it has at most one sequence per token; the
  // allocations below still refuse a shape no real buffer has (a view claiming 2^61 sequences).
  std::vector<std::int64_t> lengths;
  std::optional<decltype(plan_positions(pos, lengths, fold))> plan;
  std::vector<Piece<T, P>> pieces;
  std::vector<KernelArgs<T>> calls;
  allocate_or_refuse("sequences", s.batch, [&] {
    lengths.assign(static_cast<std::size_t>(s.batch), s.seq);
    plan.emplace(plan_positions(pos, lengths, fold));
    pieces.reserve(fold ? 1 : static_cast<std::size_t>(s.batch));
    calls.reserve(pieces.capacity());
    return 0;
  });

  const auto piece = [&](std::int64_t b, std::int64_t tokens, P p) {
    Piece<T, P> x{q_in.data + b * q_in.strides.batch, q_out.data + b * q_out.strides.batch, nullptr, nullptr,
                  tokens, 0, 0, 0, 0, p};
    if (has_k) {
      x.k_in = k_in.data + b * k_in.strides.batch;
      x.k_out = k_out.data + b * k_out.strides.batch;
    }
    return x;
  };
  if (fold) {
    Piece<T, P> x = piece(0, s.batch * s.seq, plan->whole(s.seq));
    x.q_in_ts = qi;
    x.q_out_ts = qo;
    x.k_in_ts = ki;
    x.k_out_ts = ko;
    pieces.push_back(x);
  } else {
    for (std::int64_t b = 0; b < s.batch; ++b) {
      Piece<T, P> x = piece(b, s.seq, plan->piece(b, s.seq));
      x.q_in_ts = q_in.strides.seq;
      x.q_out_ts = q_out.strides.seq;
      x.k_in_ts = k_in.strides.seq;
      x.k_out_ts = k_out.strides.seq;
      pieces.push_back(x);
    }
  }

  // q and k may be slices of one fused QKV buffer (heads side by side in every token): then one
  // fused dispatch still rotates them, as long as no q output row is a k row or vice versa. The
  // per-dispatch check below sees one sequence at a time; this one sees the whole batch.
  if (has_k) {
    require(checked, [&] {
      std::string clash;
      const auto meet = [&clash](const auto& x, const std::string& x_name, const auto& y, const std::string& y_name) {
        if (clash.empty() && !rows_apart(x, y))
          clash =
              concat("q and k views overlap: ", where_views_meet(x_name, batch_rows(x), y_name, batch_rows(y)),
                     "; a q output may not share a row with k, nor a k output with q");
      };
      meet(q_out, qn.out, k_in, kn.in);
      meet(q_out, qn.out, k_out, kn.out);
      meet(k_out, kn.out, q_in, qn.in);
      return clash;
    });
  }

  bool table = true;  // every piece reads a table: its rows can be set now
  for (const Piece<T, P>& x : pieces) {
    StreamArgs<T> q = make_stream(x.q_in, StridedLayout{x.tokens, s.heads, x.q_in_ts, q_in.strides.head}, x.q_out,
                                  StridedLayout{x.tokens, s.heads, x.q_out_ts, q_out.strides.head});
    StreamArgs<T> k;
    if (has_k)
      k = make_stream(x.k_in, StridedLayout{x.tokens, k_in.shape.heads, x.k_in_ts, k_in.strides.head}, x.k_out,
                      StridedLayout{x.tokens, k_in.shape.heads, x.k_out_ts, k_out.strides.head});
    KernelArgs<T> a = call_args(r.head_dim(), r.rotary_dim(), r.pairing(), q, k, x.tokens, dir);
    rotator_traits<R>::with_rows(r, x.positions, dir, [&](const auto& src) {
      require(checked, [&] {
        std::string e = check_call(a);
        if (e.empty()) e = src.check(a.tokens, has_k);
        if (!e.empty() && pieces.size() > 1) e = concat("sequence ", &x - pieces.data(), ": ", e);
        // What this dispatch's source reads (a caller's table, positions) against every output of the
        // call: a later sequence's rows may be written before another dispatch reads them.
        if (e.empty())
          e = check_batch_reads_apart(q_out, qn.out, has_k ? &k_out : nullptr, kn.out, reads_of(src, a.tokens));
        return e;
      });
      if constexpr (std::decay_t<decltype(src)>::kTable) {
        a.rows = src.rows();
      } else {
        table = false;
      }
    });
    calls.push_back(a);
  }
  if (calls.size() > 1 && table && q_in.strides.batch < q_in.strides.seq) {
    run_interleaved(calls, parallel);
  } else if (calls.size() > 1 && table && parallel) {
    run_sequences(calls, parallel);
  } else {
    for (std::size_t i = 0; i < calls.size(); ++i)
      rotator_traits<R>::with_rows(r, pieces[i].positions, dir,
                                   [&](const auto& src) { run(src, calls[i], parallel); });
  }
}

// Packed THD: tokens x heads views; every sequence is a token range, so one dispatch.
template <class R, class T>
void varlen_qk(bool checked, const R& r, const T* q_in, const StridedLayout& qil, T* q_out, const StridedLayout& qol,
               const T* k_in, const StridedLayout& kil, T* k_out, const StridedLayout& kol, const CuSeqlens& cu,
               const batch_positions_t<R>& pos, Direction dir, const ParallelFor& parallel) {
  std::vector<std::int64_t> lengths;
  // The arguments are only copied here; the layouts are checked first below.
  const KernelArgs<T> a = strided_qk_args(r, q_in, qil, q_out, qol, k_in, kil, k_out, kol, dir);
  // The shapes first (before anything is sized by the token count), then cu_seqlens and the
  // positions, then the outputs apart from what the call reads besides the source's rows (checked
  // with the source below: the per-token array it is handed, a caller's table). All before any write.
  require(checked, [&] {
    std::string m = check_strided_qk_layouts(qil, qol, kil, kol);
    if (m.empty()) m = check_call(a);
    if (m.empty()) m = check_cu_seqlens(cu, qil.tokens, lengths);
    if (m.empty()) m = check_batch_positions(pos, lengths, qil.tokens);
    if (m.empty()) m = check_reads_apart(a, sequence_reads(pos, qil.tokens), "x");
    return m;
  });
  if (!checked) check_cu_seqlens(cu, qil.tokens, lengths);  // the lengths, unvalidated in release builds
  const auto plan = allocate_or_refuse("positions", qil.tokens, [&] { return plan_positions(pos, lengths, true); });
  // The shapes are checked above: only the source's own checks remain (drive would repeat check_call).
  const auto positions = plan.whole(lengths.empty() ? 0 : lengths.front());
  rotator_traits<R>::with_rows(r, positions, dir, [&](const auto& src) {
    require(checked, [&] { return check_source(src, a); });
    run(src, a, parallel);
  });
}

}  // namespace detail

// ---- batched 4-d tensors ----------------------------------------------------------------------

// Out of place (or in place when out is the same view as in), any strides with inner stride 1.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_batch(const R& rope, const BatchView<const detail::identity_t<T>>& in,
                 const BatchView<detail::identity_t<T>>& out, const detail::batch_positions_t<R>& positions,
                 Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::batch_qk<R, T>(true, rope, in, out, {}, {}, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_batch(const R& rope, const BatchView<detail::identity_t<T>>& x, const detail::batch_positions_t<R>& positions,
                 Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::batch_qk<R, T>(true, rope, x, x, {}, {}, positions, dir, parallel);
}

// In place on a dense tensor of `layout` (bshd, bhsd, sbhd; thd = bshd for equal lengths).
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_batch(const R& rope, Layout layout, detail::identity_t<T>* x, const BatchShape& shape,
                 const detail::batch_positions_t<R>& positions, Direction dir = Direction::forward,
                 const ParallelFor& parallel = {}) {
  const BatchView<T> v(x, layout, shape);
  detail::batch_qk<R, T>(true, rope, v, v, {}, {}, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_batch_unchecked(const R& rope, const BatchView<const detail::identity_t<T>>& in,
                           const BatchView<detail::identity_t<T>>& out, const detail::batch_positions_t<R>& positions,
                           Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::batch_qk<R, T>(false, rope, in, out, {}, {}, positions, dir, parallel);
}

// Fused q+k: q and k share batch and seq, each with its own heads (GQA/MQA). k_in.shape.heads == 0:
// no key.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_batch(const R& rope, const BatchView<const detail::identity_t<T>>& q_in,
                    const BatchView<detail::identity_t<T>>& q_out, const BatchView<const detail::identity_t<T>>& k_in,
                    const BatchView<detail::identity_t<T>>& k_out, const detail::batch_positions_t<R>& positions,
                    Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::batch_qk<R, T>(true, rope, q_in, q_out, k_in, k_out, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_batch(const R& rope, const BatchView<detail::identity_t<T>>& q,
                    const BatchView<detail::identity_t<T>>& k, const detail::batch_positions_t<R>& positions,
                    Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::batch_qk<R, T>(true, rope, q, q, k, k, positions, dir, parallel);
}

// Dense q (q_shape) and k (same batch, seq, head_dim; k_heads heads; 0 = no key, k ignored), in place.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_batch(const R& rope, Layout layout, detail::identity_t<T>* q, const BatchShape& q_shape,
                    detail::identity_t<T>* k, std::int64_t k_heads, const detail::batch_positions_t<R>& positions,
                    Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  const BatchView<T> qv(q, layout, q_shape);
  BatchView<T> kv;
  if (k_heads != 0) kv = BatchView<T>(k, layout, BatchShape{q_shape.batch, q_shape.seq, k_heads, q_shape.head_dim});
  detail::batch_qk<R, T>(true, rope, qv, qv, kv, kv, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_batch_unchecked(const R& rope, const BatchView<const detail::identity_t<T>>& q_in,
                              const BatchView<detail::identity_t<T>>& q_out,
                              const BatchView<const detail::identity_t<T>>& k_in,
                              const BatchView<detail::identity_t<T>>& k_out, const detail::batch_positions_t<R>& positions,
                              Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::batch_qk<R, T>(false, rope, q_in, q_out, k_in, k_out, positions, dir, parallel);
}

// ---- packed variable-length sequences (THD) ---------------------------------------------------

// x: total_tokens x heads rows (layout.tokens = cu_seqlens[batch]); sequence b is tokens
// [cu_seqlens[b], cu_seqlens[b+1]). Empty sequences are allowed.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_varlen(const R& rope, const detail::identity_t<T>* in, const StridedLayout& in_layout,
                  detail::identity_t<T>* out, const StridedLayout& out_layout, const CuSeqlens& cu_seqlens,
                  const detail::batch_positions_t<R>& positions, Direction dir = Direction::forward,
                  const ParallelFor& parallel = {}) {
  detail::varlen_qk<R, T>(true, rope, in, in_layout, out, out_layout, nullptr, StridedLayout{}, nullptr,
                       StridedLayout{}, cu_seqlens, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_varlen(const R& rope, detail::identity_t<T>* x, const StridedLayout& layout,
                  const CuSeqlens& cu_seqlens, const detail::batch_positions_t<R>& positions,
                  Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::varlen_qk<R, T>(true, rope, x, layout, x, layout, nullptr, StridedLayout{}, nullptr, StridedLayout{},
                       cu_seqlens, positions, dir, parallel);
}

// Fused q+k; k_layout.heads == 0: no key.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_varlen(const R& rope, const detail::identity_t<T>* q_in, const StridedLayout& q_in_layout,
                     detail::identity_t<T>* q_out, const StridedLayout& q_out_layout,
                     const detail::identity_t<T>* k_in, const StridedLayout& k_in_layout,
                     detail::identity_t<T>* k_out, const StridedLayout& k_out_layout, const CuSeqlens& cu_seqlens,
                     const detail::batch_positions_t<R>& positions, Direction dir = Direction::forward,
                     const ParallelFor& parallel = {}) {
  detail::varlen_qk<R, T>(true, rope, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out, k_out_layout,
                       cu_seqlens, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_varlen(const R& rope, detail::identity_t<T>* q, const StridedLayout& q_layout,
                     detail::identity_t<T>* k, const StridedLayout& k_layout, const CuSeqlens& cu_seqlens,
                     const detail::batch_positions_t<R>& positions, Direction dir = Direction::forward,
                     const ParallelFor& parallel = {}) {
  detail::varlen_qk<R, T>(true, rope, q, q_layout, q, q_layout, k, k_layout, k, k_layout, cu_seqlens, positions, dir,
                       parallel);
}

}  // namespace rotary

#endif  // ROTARY_LAYOUTS_HPP
