// rotary — FlashAttention's apply_rotary_emb (flash_attn/layers/rotary.py, ops/triton/rotary.py) with
// its semantics, on rotary's kernels.
//
//   x            (batch, seqlen, nheads, headdim): apply_rotary_emb; or packed (total_seqlen, nheads,
//                headdim) with cu_seqlens (batch + 1 int32 offsets) and max_seqlen: apply_rotary_emb_varlen
//   cos, sin     (seqlen_ro, rotary_dim / 2); rotary_dim <= headdim, the rest of each head passes through
//   interleaved  true: pairs (x[2j], x[2j+1]) (GPT-J); false: (x[j], x[j + rotary_dim/2]) (GPT-NeoX)
//   seqlen_offsets: one shift for every sequence, or one per sequence (int32 or int64);
//                token s of sequence b sits at position s + offset_b
//   conjugate    sin negated: the inverse rotation (the backward pass)
//   out          may be x itself (inplace=True)
// FlashAttention's masking is kept: a token whose position is at or past seqlen_ro is left unchanged
// (its kernel loads cos = 1, sin = 0 there). Tables of any values and of f32, f64, f16 or bf16 are
// accepted (widened exactly, never narrowed). Inconsistent shapes, a negative offset, cu_seqlens that
// are not non-decreasing from 0 to total_seqlen, a sequence longer than max_seqlen, null pointers (a
// null seqlen_offsets array that holds values included), overlapping x/out (other than x == out) and
// an out that overlaps cos or sin throw rotary::error, as do shapes past PTRDIFF_MAX bytes (checked before
// any product of them). seqlen_offsets are all read before the first write, so out may even hold them.
#ifndef ROTARY_COMPAT_FLASH_ATTN_HPP
#define ROTARY_COMPAT_FLASH_ATTN_HPP

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../apply.hpp"
#include "../detail/driver/checks.hpp"
#include "../detail/format.hpp"
#include "../positions.hpp"
#include "../table.hpp"
#include "../types.hpp"

namespace rotary::flash_attn {

// seqlen_offsets: an int (the default 0) or a per-sequence array of int32 or int64. A plain view, as
// Positions: the calls check it (count = number of sequences; a null array that holds values throws,
// one of 0 values is empty and serves 0 sequences; a null array is never the shift 0).
class SeqlenOffsets {
 public:
  SeqlenOffsets(std::int64_t shift = 0) noexcept : shift_(shift) {}  // NOLINT(google-explicit-constructor)
  SeqlenOffsets(const std::int32_t* per_sequence, std::int64_t count) noexcept
      : i32_(per_sequence), count_(count), per_sequence_(true) {}
  SeqlenOffsets(const std::int64_t* per_sequence, std::int64_t count) noexcept
      : i64_(per_sequence), count_(count), per_sequence_(true) {}

  bool per_sequence() const noexcept { return per_sequence_; }
  bool is_null() const noexcept { return per_sequence_ && i32_ == nullptr && i64_ == nullptr; }
  std::int64_t count() const noexcept { return count_; }
  // Unchecked: b in [0, count()) of a non-null array (the calls check both first).
  std::int64_t operator[](std::int64_t b) const noexcept {
    if (i32_ != nullptr) return i32_[b];
    if (i64_ != nullptr) return i64_[b];
    return shift_;
  }

 private:
  std::int64_t shift_ = 0;
  const std::int32_t* i32_ = nullptr;
  const std::int64_t* i64_ = nullptr;
  std::int64_t count_ = 0;
  bool per_sequence_ = false;
};

// The shape of cos and of sin: (seqlen_ro, rotary_dim / 2).
struct TableShape {
  std::int64_t seqlen_ro = 0;
  std::int64_t half = 0;  // rotary_dim / 2
};

struct Options {
  bool interleaved = false;
  SeqlenOffsets seqlen_offsets = {};
  bool conjugate = false;
};

namespace detail {

using rotary::detail::concat;

// Sequences b = 0..count-1 of `starts` (count + 1 token offsets), heads x headdim per token, dense.
template <class T, class E>
void run_sequences(const char* op, const T* x, T* out, const std::vector<std::int64_t>& starts, std::int64_t nheads,
                   std::int64_t headdim, const E* cos, const E* sin, const TableShape& ts, const Options& o) {
  if (nheads < 0 || headdim <= 0)
    throw error(concat(op, ": nheads (", nheads, ") must be >= 0 and headdim (", headdim, ") > 0"));
  if (ts.seqlen_ro < 0 || ts.half <= 0)
    throw error(concat(op, ": cos/sin shape (", ts.seqlen_ro, ", ", ts.half, ") must be (seqlen_ro >= 0, rotary_dim/2 > 0)"));
  if (ts.half > headdim / 2)  // rotary_dim = 2 x half <= headdim, without the product (half may be any int64)
    throw error(concat(op, ": rotary_dim (2 x ", ts.half, ") must be <= headdim (", headdim, ")"));
  if (cos == nullptr || sin == nullptr) throw error(concat(op, ": null cos or sin"));
  const auto count = static_cast<std::int64_t>(starts.size()) - 1;
  if (o.seqlen_offsets.is_null() && o.seqlen_offsets.count() > 0)
    throw error(concat(op, ": seqlen_offsets is null but holds ", o.seqlen_offsets.count(), " values"));
  if (o.seqlen_offsets.per_sequence() && o.seqlen_offsets.count() != count)
    throw error(concat(op, ": seqlen_offsets holds ", o.seqlen_offsets.count(), " values for ", count, " sequences"));
  namespace rd = rotary::detail;
  // Shapes before any product of them: tokens x nheads x headdim elements must fit one buffer.
  if (!rd::span_fits({{nheads, headdim}}, headdim, sizeof(T)) ||
      !rd::span_fits({{starts.back(), nheads * headdim}}, nheads * headdim, sizeof(T)))
    throw error(concat(op, ": x of ", starts.back(), " tokens x ", nheads, " heads x headdim ", headdim,
                       " spans more than PTRDIFF_MAX bytes: no buffer is that large"));
  const std::int64_t token = nheads * headdim;  // elements per token
  const std::int64_t n = starts.back() * token;
  if (n > 0 && (x == nullptr || out == nullptr)) throw error(concat(op, ": null x or out"));
  const std::less<const T*> before;  // a total order, also for unrelated buffers
  if (n > 0 && x != out && before(x, out + n) && before(out, x + n))
    throw error(concat(op, ": out overlaps x without being x (in place is out == x)"));
  // Every sequence's call reads cos and sin, and checks x and out but not the table: out shares no
  // memory with either, checked once over the whole tensor before any work.
  if (std::string m = rd::check_table_span("cos and sin", ts.seqlen_ro, ts.half, ts.half, sizeof(E)); !m.empty())
    throw error(concat(op, ": ", m));
  const rd::Extent written = rd::token_rows(out, headdim, starts.back(), token, nheads, headdim).extent();
  for (const auto& [table, name] : {std::pair<const E*, const char*>{cos, "cos"}, {sin, "sin"}})
    if (rd::overlap(written, rd::StridedRows(table, ts.half, {{"row", ts.seqlen_ro, ts.half}}).extent()))
      throw error(concat(op, ": out overlaps ", name, ": out must not share memory with cos or sin (both are read "
                         "while out is written)"));
  // The offsets are read once, here, before any write: out may even hold them (a sequence written
  // before the next one's offset is read cannot change it).
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(count));
  for (std::int64_t b = 0; b < count; ++b) {
    offsets[static_cast<std::size_t>(b)] = o.seqlen_offsets[b];
    if (offsets[static_cast<std::size_t>(b)] < 0)
      throw error(concat(op, ": seqlen_offsets[", b, "] (", offsets[static_cast<std::size_t>(b)], ") must be >= 0"));
  }
  const TableRope<T, E> rope(headdim, 2 * ts.half, o.interleaved ? Pairing::interleaved : Pairing::half_split,
                             CosSinTableView<E>::separate(cos, sin, ts.seqlen_ro, ts.half));
  const Direction dir = o.conjugate ? Direction::inverse : Direction::forward;
  for (std::int64_t b = 0; b < count; ++b) {
    const std::int64_t first = starts[static_cast<std::size_t>(b)];
    const std::int64_t len = starts[static_cast<std::size_t>(b) + 1] - first;
    const std::int64_t offset = offsets[static_cast<std::size_t>(b)];
    // FlashAttention's masking: positions at or past seqlen_ro keep their values.
    const std::int64_t rotated = offset >= ts.seqlen_ro ? 0 : std::min(len, ts.seqlen_ro - offset);
    if (rotated > 0 && nheads > 0) {  // (no heads: an empty tensor, nothing to rotate)
      const StridedLayout l{rotated, nheads, token, headdim};
      apply_strided(rope, x + first * token, l, out + first * token, l, Positions::contiguous(offset), dir);
    }
    if (out != x && len > rotated)
      std::memcpy(static_cast<void*>(out + (first + rotated) * token), static_cast<const void*>(x + (first + rotated) * token),
                  static_cast<std::size_t>((len - rotated) * token) * sizeof(T));
  }
}

}  // namespace detail

// x and out (batch, seqlen, nheads, headdim), dense; out == x rotates in place.
template <class T, class E>
void apply_rotary_emb(const T* x, T* out, std::int64_t batch, std::int64_t seqlen, std::int64_t nheads,
                      std::int64_t headdim, const E* cos, const E* sin, const TableShape& cos_shape,
                      const Options& options = {}) {
  const char* op = "flash_attn::apply_rotary_emb";
  if (batch < 0 || seqlen < 0)
    throw error(detail::concat(op, ": batch (", batch, ") and seqlen (", seqlen, ") must be >= 0"));
  if (seqlen > 0 && batch > std::numeric_limits<std::int64_t>::max() / seqlen)
    throw error(detail::concat(op, ": batch (", batch, ") x seqlen (", seqlen, ") overflows int64"));
  // Empty sequences hold nothing to rotate: without per-sequence offsets (whose count must still
  // match batch) any number of them is one empty batch, and no list of batch + 1 starts is built.
  const std::int64_t sequences = seqlen == 0 && !options.seqlen_offsets.per_sequence() ? 0 : batch;
  std::vector<std::int64_t> starts;
  starts.reserve(static_cast<std::size_t>(sequences) + 1);
  for (std::int64_t b = 0; b <= sequences; ++b) starts.push_back(b * seqlen);
  detail::run_sequences(op, x, out, starts, nheads, headdim, cos, sin, cos_shape, options);
}

// Packed x and out (total_seqlen, nheads, headdim); sequence b holds tokens [cu_seqlens[b],
// cu_seqlens[b + 1]) and none is longer than max_seqlen; cu_seqlens has batch + 1 values.
template <class T, class E>
void apply_rotary_emb_varlen(const T* x, T* out, std::int64_t total_seqlen, std::int64_t nheads, std::int64_t headdim,
                             const std::int32_t* cu_seqlens, std::int64_t batch, std::int64_t max_seqlen, const E* cos,
                             const E* sin, const TableShape& cos_shape, const Options& options = {}) {
  const char* op = "flash_attn::apply_rotary_emb_varlen";
  if (batch < 0 || total_seqlen < 0)
    throw error(detail::concat(op, ": batch (", batch, ") and total_seqlen (", total_seqlen, ") must be >= 0"));
  if (cu_seqlens == nullptr) throw error(detail::concat(op, ": null cu_seqlens"));
  if (max_seqlen < 0) throw error(detail::concat(op, ": max_seqlen (", max_seqlen, ") must be >= 0"));
  std::vector<std::int64_t> starts;
  for (std::int64_t b = 0; b <= batch; ++b) {
    const std::int64_t v = cu_seqlens[b];
    if (b == 0 && v != 0) throw error(detail::concat(op, ": cu_seqlens[0] (", v, ") must be 0"));
    if (b > 0 && v < starts.back())
      throw error(detail::concat(op, ": cu_seqlens must not decrease (cu_seqlens[", b, "] = ", v, " < ", starts.back(), ")"));
    if (b > 0 && v - starts.back() > max_seqlen)
      throw error(detail::concat(op, ": sequence ", b - 1, " has ", v - starts.back(), " tokens, more than max_seqlen (",
                                 max_seqlen, ")"));
    starts.push_back(v);
  }
  if (starts.back() != total_seqlen)
    throw error(detail::concat(op, ": cu_seqlens[batch] (", starts.back(), ") must equal total_seqlen (", total_seqlen, ")"));
  detail::run_sequences(op, x, out, starts, nheads, headdim, cos, sin, cos_shape, options);
}

}  // namespace rotary::flash_attn

#endif  // ROTARY_COMPAT_FLASH_ATTN_HPP
