// rotary — the batch driver: validates a whole batched (BSHD / BHSD / SBHD views) or packed (THD)
// call, then runs it as one dispatch where the batch folds into one token axis, else one dispatch
// per sequence. Nothing here is a kernel; every call reaches the kernels through driver.hpp.
#ifndef ROTARY_DETAIL_CALLS_BATCH_HPP
#define ROTARY_DETAIL_CALLS_BATCH_HPP

#include "../guard.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../config.hpp"
#include "../../parallel.hpp"
#include "../../positions.hpp"
#include "../../rotator.hpp"
#include "../../sequence_positions.hpp"
#include "../../shape.hpp"
#include "../../types.hpp"
#include "sequence.hpp"
#include "../driver/checks.hpp"
#include "../driver/driver.hpp"

namespace rotary {

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

// The rows of a batch view.
template <class T>
StridedRows batch_rows(const BatchView<T>& v) noexcept {
  return StridedRows(v.data, v.shape.head_dim,
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
  if (const StridedRows rows = batch_rows(v); !rows.rows_disjoint())
    return rows_overlap_message(
        name, rows,
        concat("strides (batch ", v.strides.batch, ", seq ", v.strides.seq, ", head ", v.strides.head,
               "), head_dim ", s.head_dim, "; shape ", s.batch, " x ", s.seq, " x ", s.heads));
  return {};
}

template <class T>
std::string check_in_out(const ViewNames& names, const BatchView<const T>& in, const BatchView<T>& out) {
  const BatchShape& a = in.shape;
  const BatchShape& b = out.shape;
  if (a.batch != b.batch || a.seq != b.seq || a.heads != b.heads)
    return concat(names.prefix(), "shape mismatch: input is ", a.batch, " x ", a.seq, " x ", a.heads,
                  ", output is ", b.batch, " x ", b.seq, " x ", b.heads, " (batch x seq x heads)");
  const StridedRows in_rows = batch_rows(in);
  const StridedRows out_rows = batch_rows(out);
  if (!in_rows.same(out_rows) && in_rows.overlaps(out_rows))
    return concat(names.in, " and ", names.out,
                  " overlap: ", where_views_meet(names.in, batch_rows(in), names.out, batch_rows(out)),
                  "; give the same view (in place) or disjoint buffers");
  return {};
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
  ReadExtents r;
  if (p.kind() == SequencePositions::Kind::per_token)
    r.add("per-token positions", positions_extent(p.token_array(), total));
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
    if (overlap(batch_rows(q_out).extent(), r.x))
      return concat(q_name, " and ", r.name, " share memory (", r.name, " is read while ", q_name, " is written)");
    if (k_out != nullptr && overlap(batch_rows(*k_out).extent(), r.x))
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

// "" or what is wrong with a batched call: every shape first (no arithmetic on a count before it
// is known to be sane), then the positions, then every output of the call apart from what it reads.
template <class T, class BP>
std::string check_batch_call(std::int64_t head_dim, const BatchView<const T>& q_in, const BatchView<T>& q_out,
                             const BatchView<const T>& k_in, const BatchView<T>& k_out, const ViewNames& qn,
                             const ViewNames& kn, const BP& pos) {
  const bool has_k = k_in.shape.heads != 0;
  std::string m = check_batch_view(qn.in, q_in, head_dim);
  if (m.empty()) m = check_batch_view(qn.out, q_out, head_dim);
  if (m.empty()) m = check_in_out(qn, q_in, q_out);
  if (m.empty() && has_k) {
    m = check_batch_view(kn.in, k_in, head_dim);
    if (m.empty()) m = check_batch_view(kn.out, k_out, head_dim);
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
    m = check_batch_reads_apart(q_out, qn.out, has_k ? &k_out : nullptr, kn.out, sequence_reads(pos, s.batch * s.seq));
  return m;
}

// q and k may be slices of one fused QKV buffer (heads side by side in every token): then one fused
// dispatch still rotates them, as long as no q output row is a k row or vice versa. The per-dispatch
// check sees one sequence at a time; this one sees the whole batch.
template <class T>
std::string check_batch_qk_apart(const BatchView<const T>& q_in, const BatchView<T>& q_out,
                                 const BatchView<const T>& k_in, const BatchView<T>& k_out, const ViewNames& qn,
                                 const ViewNames& kn) {
  std::string clash;
  const auto meet = [&clash](const auto& x, const std::string& x_name, const auto& y, const std::string& y_name) {
    if (clash.empty() && !batch_rows(x).apart(batch_rows(y)))
      clash = concat("q and k views overlap: ", where_views_meet(x_name, batch_rows(x), y_name, batch_rows(y)),
                     "; a q output may not share a row with k, nor a k output with q");
  };
  meet(q_out, qn.out, k_in, kn.in);
  meet(q_out, qn.out, k_out, kn.out);
  meet(k_out, kn.out, q_in, qn.in);
  return clash;
}

// The dispatches of a batch: one piece over the folded token axis (token strides `folded`: q in,
// q out, k in, k out), else one per sequence with the views' own sequence strides.
template <class T, class P, class Plan>
void add_batch_pieces(std::vector<Piece<T, P>>& pieces, const BatchView<const T>& q_in, const BatchView<T>& q_out,
                      const BatchView<const T>& k_in, const BatchView<T>& k_out, const Plan& plan, bool fold,
                      const std::array<std::ptrdiff_t, 4>& folded) {
  const bool has_k = k_in.shape.heads != 0;
  const BatchShape& s = q_in.shape;
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
    Piece<T, P> x = piece(0, s.batch * s.seq, plan.whole(s.seq));
    x.q_in_ts = folded[0];
    x.q_out_ts = folded[1];
    x.k_in_ts = folded[2];
    x.k_out_ts = folded[3];
    pieces.push_back(x);
    return;
  }
  for (std::int64_t b = 0; b < s.batch; ++b) {
    Piece<T, P> x = piece(b, s.seq, plan.piece(b, s.seq));
    x.q_in_ts = q_in.strides.seq;
    x.q_out_ts = q_out.strides.seq;
    x.k_in_ts = k_in.strides.seq;
    x.k_out_ts = k_out.strides.seq;
    pieces.push_back(x);
  }
}

// The kernel arguments of every piece, each checked with its row source (and, for a table, its
// rows set); false if some piece's rows are made per block (no table).
template <class R, class T, class P>
bool make_batch_calls(bool checked, const R& r, const std::vector<Piece<T, P>>& pieces, const BatchView<const T>& q_in,
                      const BatchView<T>& q_out, const BatchView<const T>& k_in, const BatchView<T>& k_out,
                      const ViewNames& qn, const ViewNames& kn, Direction dir, std::vector<KernelArgs<T>>& calls) {
  const bool has_k = k_in.shape.heads != 0;
  const std::int64_t heads = q_in.shape.heads;
  bool table = true;
  for (const Piece<T, P>& x : pieces) {
    StreamArgs<T> q = make_stream(x.q_in, StridedLayout{x.tokens, heads, x.q_in_ts, q_in.strides.head}, x.q_out,
                                  StridedLayout{x.tokens, heads, x.q_out_ts, q_out.strides.head});
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
  return table;
}

// The whole batched call of rotator r: validate everything, then dispatch.
template <class R, class T>
void batch_qk(bool checked, const R& r, const BatchView<const T>& q_in, const BatchView<T>& q_out,
              const BatchView<const T>& k_in, const BatchView<T>& k_out, const batch_positions_t<R>& pos,
              Direction dir, const ParallelFor& parallel) {
  using P = rotator_positions_t<R>;
  const bool has_k = k_in.shape.heads != 0;  // 0: no key; negative heads are refused below
  // Views are named after the arguments: x (one tensor in place), input and output, or q and k.
  const ViewNames qn = view_names(has_k ? "q" : "", batch_rows(q_in).same(batch_rows(q_out)), "x");
  const ViewNames kn = view_names("k", batch_rows(k_in).same(batch_rows(k_out)), "x");
  require(checked, [&] { return check_batch_call(r.head_dim(), q_in, q_out, k_in, k_out, qn, kn, pos); });
  if (q_in.shape.batch <= 0 || q_in.shape.seq <= 0) return;  // (<= 0: unchecked calls, release builds)

  const BatchShape& s = q_in.shape;
  std::array<std::ptrdiff_t, 4> folded{};
  bool fold = foldable(s, q_in.strides, folded[0]) && foldable(s, q_out.strides, folded[1]);
  if (has_k) fold = fold && foldable(s, k_in.strides, folded[2]) && foldable(s, k_out.strides, folded[3]);
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
  add_batch_pieces(pieces, q_in, q_out, k_in, k_out, *plan, fold, folded);
  if (has_k) require(checked, [&] { return check_batch_qk_apart(q_in, q_out, k_in, k_out, qn, kn); });
  const bool table = make_batch_calls(checked, r, pieces, q_in, q_out, k_in, k_out, qn, kn, dir, calls);
  if (calls.size() > 1 && table && q_in.strides.batch < q_in.strides.seq) {
    run_interleaved(calls, parallel);
  } else if (calls.size() > 1 && table && parallel) {
    run_sequences(calls, parallel);
  } else {
    for (std::size_t i = 0; i < calls.size(); ++i)
      rotator_traits<R>::with_rows(r, pieces[i].positions, dir,
                                   [&](const auto& src) { dispatch_call(src, calls[i], parallel); });
  }
}

// Packed THD: tokens x heads views; every sequence is a token range, so one dispatch.
template <class R, class T>
void varlen_qk(bool checked, const R& r, const T* q_in, const StridedLayout& qil, T* q_out, const StridedLayout& qol,
               const T* k_in, const StridedLayout& kil, T* k_out, const StridedLayout& kol, const CuSeqlens& cu,
               const batch_positions_t<R>& pos, Direction dir, const ParallelFor& parallel) {
  std::vector<std::int64_t> lengths;
  // The arguments are only copied here; the layouts are checked first below.
  KernelArgs<T> a = strided_qk_args(r, q_in, qil, q_out, qol, k_in, kil, k_out, kol, dir);
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
    dispatch_call(src, a, parallel);
  });
}

}  // namespace detail

}  // namespace rotary

#endif  // ROTARY_DETAIL_CALLS_BATCH_HPP
