// rotary — ONNX RotaryEmbedding (opset 23, domain ai.onnx) and ONNX Runtime's com.microsoft
// RotaryEmbedding contrib op, with their semantics, on rotary's kernels.
//
// ai.onnx RotaryEmbedding-23 (rotary::onnx::rotary_embedding):
//   input     3-D [B, S, H*D] (attrs.num_heads = H required) or 4-D [B, H, S, D] (num_heads not read)
//   cos/sin   [max_pos, r/2] indexed by position_ids [B, S]; or, with position_ids null,
//             [B, S, r/2]: one row per (batch, token)
//   r         attrs.rotary_embedding_dim, 0 for the whole head (D); coordinates [r, D) pass through
//   pairing   attrs.interleaved: pairs (x[2j], x[2j+1]); else halves (x[j], x[j + r/2])
//   output    the input's shape; output == input rotates in place
//   out_j = cos_j * x1_j - sin_j * x2_j,   out'_j = sin_j * x1_j + cos_j * x2_j  (the reference op's
//   formula; rotary rounds once per output from f32, where the reference rounds each f16/bf16 step)
// The caches may hold any values (they are not checked to be rotations). Every inconsistency throws
// rotary::error: a rank other than 3 or 4, a non-positive or non-dividing num_heads, an odd or
// oversized r, a cache width other than r/2, cache rows that do not match [B, S] without
// position_ids, a position outside [0, max_pos), null pointers, int64 overflow of a shape, an
// output that overlaps the input without being it, an output that overlaps cos_cache, sin_cache or
// position_ids. All of it is checked over the whole call before any batch is written: a throwing call
// leaves every buffer unchanged (in place too).
//
// com.microsoft RotaryEmbedding (rotary::onnx::contrib::rotary_embedding): the same math; input 3-D
// [B, S, H*D] or 4-D [B, H, S, D]; cos/sin [max_pos, r/2]; position_ids [B, S], or of shape [1] (or
// a scalar, shape []): a start offset, positions start + s for every batch. With 3-D input, num_heads 0
// (the op's default) and rotary_embedding_dim 0, the head size is twice the cache width and num_heads
// hidden / head size, as ONNX Runtime infers them. More tokens than cache rows are served when every
// position is inside the cache (ORT refuses them; the rotation is well defined).
#ifndef ROTARY_COMPAT_ONNX_HPP
#define ROTARY_COMPAT_ONNX_HPP

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../apply.hpp"
#include "../detail/driver/checks.hpp"
#include "../detail/format.hpp"
#include "../dtype.hpp"
#include "../layouts.hpp"
#include "../positions.hpp"
#include "../table.hpp"
#include "../types.hpp"

namespace rotary::onnx {

struct RotaryEmbeddingAttrs {
  bool interleaved = false;
  std::int64_t rotary_embedding_dim = 0;  // 0: the whole head
  std::int64_t num_heads = 0;             // 3-D input: required (contrib op: 0 infers it); 4-D: not read
};

namespace detail {

using rotary::detail::concat;

inline std::string shape_string(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The element count of a shape, refusing negative dimensions and int64 overflow, also of the
// nonzero dimensions of an empty shape: the strides of [0, 2^62, 8] overflow all the same.
inline std::int64_t elements(const std::vector<std::int64_t>& s, const char* name) {
  std::int64_t n = 1;
  bool empty = false;
  for (const std::int64_t d : s) {
    if (d < 0) throw error(concat(name, " shape ", shape_string(s), " has a negative dimension"));
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > std::numeric_limits<std::int64_t>::max() / d)
      throw error(concat(name, " shape ", shape_string(s), " overflows int64"));
    n *= d;
  }
  return empty ? 0 : n;
}

// An input tensor as batches of strided tokens x heads, and the rotation dimension.
struct Geometry {
  std::int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  StridedLayout per_batch;        // one batch's tokens x heads
  std::int64_t batch_stride = 0;  // elements between batches
};

inline Geometry geometry(const std::vector<std::int64_t>& shape, const RotaryEmbeddingAttrs& attrs, const char* op) {
  Geometry g;
  static_cast<void>(elements(shape, "input"));
  if (shape.size() == 3) {
    if (attrs.num_heads <= 0)
      throw error(concat(op, ": 3-D input ", shape_string(shape), " needs num_heads > 0 (got ", attrs.num_heads, ")"));
    if (shape[2] % attrs.num_heads != 0)
      throw error(concat(op, ": hidden size ", shape[2], " of input ", shape_string(shape),
                         " is not a multiple of num_heads (", attrs.num_heads, ")"));
    g.batch = shape[0];
    g.seq = shape[1];
    g.heads = attrs.num_heads;
    g.head_dim = shape[2] / attrs.num_heads;
    g.per_batch = StridedLayout{g.seq, g.heads, g.heads * g.head_dim, g.head_dim};  // [S, H, D]
  } else if (shape.size() == 4) {  // num_heads is not read: the shape says it (as the spec and ORT)
    g.batch = shape[0];
    g.heads = shape[1];
    g.seq = shape[2];
    g.head_dim = shape[3];
    g.per_batch = StridedLayout{g.seq, g.heads, g.head_dim, g.seq * g.head_dim};  // [H, S, D]
  } else {
    throw error(concat(op, ": input ", shape_string(shape), " must be 3-D [batch, seq, hidden] or 4-D "
                       "[batch, num_heads, seq, head_size]"));
  }
  g.batch_stride = g.seq * g.heads * g.head_dim;
  g.rotary_dim = attrs.rotary_embedding_dim == 0 ? g.head_dim : attrs.rotary_embedding_dim;
  if (g.rotary_dim <= 0 || g.rotary_dim % 2 != 0 || g.rotary_dim > g.head_dim)
    throw error(concat(op, ": rotary_embedding_dim (", g.rotary_dim, ") must be even, > 0 and <= head_size (",
                       g.head_dim, ")"));
  return g;
}

// The contrib op's defaults for 3-D input (ONNX Runtime's rotary_embedding_helper): num_heads 0
// with rotary_embedding_dim 0 means head_size = twice the cache width and num_heads = hidden /
// head_size; num_heads 0 with rotary_embedding_dim > 0 is an error there too. A hidden size that is not
// a multiple of that head size is refused (ORT rounds num_heads down and leaves the rest unwritten).
inline RotaryEmbeddingAttrs contrib_attrs(const std::vector<std::int64_t>& shape,
                                          const std::vector<std::int64_t>& cache_shape,
                                          const RotaryEmbeddingAttrs& attrs, const char* op) {
  if (shape.size() != 3 || attrs.num_heads != 0 || cache_shape.size() != 2) return attrs;
  if (attrs.rotary_embedding_dim != 0)
    throw error(concat(op, ": 3-D input ", shape_string(shape), " with rotary_embedding_dim ",
                       attrs.rotary_embedding_dim, " needs num_heads > 0 (num_heads 0 infers the head size "
                       "from the cos/sin cache only when rotary_embedding_dim is 0)"));
  // 0 where twice the width (>= 0: elements() refused negative dimensions) would overflow int64; a
  // [1, 2^62] or [0, 2^62] cache passes elements(), so its product alone does not bound the width
  const std::int64_t width = cache_shape[1];
  const std::int64_t head = width <= std::numeric_limits<std::int64_t>::max() / 2 ? 2 * width : 0;
  if (head <= 0 || shape[2] % head != 0 || shape[2] == 0)
    throw error(concat(op, ": 3-D input ", shape_string(shape), " with num_heads 0 takes head_size = 2 * ",
                       width, " (twice the cos/sin cache width), and its hidden size ", shape[2],
                       " is not a positive multiple of that; give num_heads"));
  RotaryEmbeddingAttrs inferred = attrs;
  inferred.num_heads = shape[2] / head;
  return inferred;
}

inline void check_cache_width(const std::vector<std::int64_t>& cache_shape, std::int64_t rotary_dim, const char* op) {
  if (cache_shape.back() != rotary_dim / 2)
    throw error(concat(op, ": cos/sin cache ", shape_string(cache_shape), " has rows of ", cache_shape.back(),
                       " values; rotary_embedding_dim ", rotary_dim, " needs ", rotary_dim / 2));
}

// Rotates each batch b with positions_of(b) into table rows table_of(b).
template <class T, class TableOf, class PositionsOf>
void run_batches(const T* input, T* output, const Geometry& g, bool interleaved, const TableOf& table_of,
                 const PositionsOf& positions_of) {
  const Pairing pairing = interleaved ? Pairing::interleaved : Pairing::half_split;
  if (g.heads == 0) return;  // an empty tensor ([B, 0, S, D]): nothing to rotate, as for S or B = 0
  for (std::int64_t b = 0; b < g.batch; ++b) {
    const TableRope<T, T> rope(g.head_dim, g.rotary_dim, pairing, table_of(b));
    apply_strided(rope, input + b * g.batch_stride, g.per_batch, output + b * g.batch_stride, g.per_batch,
                  positions_of(b));
  }
}

// The whole tensor as one view: g.batch batches of g.per_batch.
template <class T>
BatchView<T> whole_view(T* p, const Geometry& g) noexcept {
  return BatchView<T>(p, BatchShape{g.batch, g.seq, g.heads, g.head_dim},
                      BatchStrides{g.batch_stride, g.per_batch.token_stride, g.per_batch.head_stride});
}

// Before any work, over the whole tensors: run_batches makes one call per batch, and each call checks
// only its own batch. The output is the input (in place) or disjoint from it, else a batch would read
// input that an earlier batch's output overwrote; the caches, cache_rows rows of r/2 values, fit in memory;
// and the output shares no memory with them, which every batch reads. Returns the caches as a table.
template <class T>
CosSinTableView<T> checked_table(const T* input, T* output, const Geometry& g, const T* cos_cache,
                                 const T* sin_cache, std::int64_t cache_rows, const char* op) {
  namespace rd = rotary::detail;
  const BatchView<const T> in = whole_view(input, g);
  const BatchView<T> out = whole_view(output, g);
  const rd::ViewNames names{"input", "output"};
  std::string m = rd::check_batch_view(names.in, in, g.head_dim);
  if (m.empty()) m = rd::check_batch_view(names.out, out, g.head_dim);
  if (m.empty()) m = rd::check_in_out(names, in, out);
  const std::int64_t half = g.rotary_dim / 2;
  if (m.empty()) m = rd::check_table_span("cos_cache and sin_cache", cache_rows, half, half, sizeof(T));
  if (!m.empty()) throw error(concat(op, ": ", m));
  const auto table = CosSinTableView<T>::separate(cos_cache, sin_cache, cache_rows, half);
  const rd::Extent written = rd::batch_rows(out).extent();
  for (const auto& [cache, name] :
       {std::pair<const T*, const char*>{table.cos(), "cos_cache"}, {table.sin(), "sin_cache"}}) {
    const rd::StridedRows rows(cache, table.half(), {{"row", table.rows(), table.row_stride()}});
    if (!rd::overlap(written, rows.extent())) continue;
    throw error(concat(op, ": output overlaps ", name, ": ",
                       rd::where_views_meet("output", rd::batch_rows(out), name, rows),
                       "; output must not share memory with cos_cache or sin_cache (both are read while "
                       "output is written)"));
  }
  return table;
}

// The position ids, checked over the whole call before any batch is written: run_batches rotates one
// batch per call, and each call checks only its own positions, so a bad id in a later batch would throw
// after earlier batches were written (in place: after the input was destroyed). Messages name the entry
// of the caller's position_ids tensor, not a token of one batch. A call of no tokens reads no positions.

// [B, S] ids: each in [0, rows).
inline void check_position_ids(const std::int64_t* ids, const Geometry& g, std::int64_t rows, const char* op) {
  if (g.batch == 0 || g.seq == 0) return;
  for (std::int64_t b = 0; b < g.batch; ++b)
    for (std::int64_t s = 0; s < g.seq; ++s) {
      const std::int64_t p = ids[b * g.seq + s];
      if (p < 0 || p >= rows)
        throw error(concat(op, ": position_ids[", b, "][", s, "] (", p, ") is outside the cos/sin cache of ", rows,
                           " rows [0, ", rows, ")"));
    }
}

// A start offset: positions start + s, s in [0, S), in [0, rows). Computed without forming start + s for
// a start past the cache (start + S - 1 may overflow int64); the message names the first token outside.
inline void check_start_position(std::int64_t start, const Geometry& g, std::int64_t rows, const char* op) {
  if (g.batch == 0 || g.seq == 0) return;
  std::int64_t token = -1;
  if (start < 0 || start >= rows) token = 0;
  else if (g.seq > rows - start) token = rows - start;  // start < rows: no overflow
  if (token < 0) return;
  throw error(concat(op, ": position_ids[0] (start ", start, ") puts token ", token, " at position ",
                     token == 0 ? start : rows, ", outside the cos/sin cache of ", rows, " rows [0, ", rows, ")"));
}

// position_ids are read by every batch while output is written: they must not share memory. count:
// the int64 values the call reads. Output is dense, so its bounding range is exactly its memory.
template <class T>
void check_ids_apart(const std::int64_t* ids, std::int64_t count, const T* output, const Geometry& g,
                     const char* op) {
  namespace rd = rotary::detail;
  if (count == 0) return;
  const BatchView<const T> out = whole_view(output, g);
  const rd::Extent written = rd::batch_rows(out).extent();
  const auto lo = reinterpret_cast<std::uintptr_t>(ids);
  const rd::Extent read{lo, lo + static_cast<std::uintptr_t>(count) * sizeof(std::int64_t)};
  if (!rd::overlap(written, read)) return;
  const std::uintptr_t at = std::max(written.lo, read.lo);
  const auto out_element = static_cast<std::int64_t>((at - written.lo) / sizeof(T));
  const auto id = static_cast<std::int64_t>((at - read.lo) / sizeof(std::int64_t));
  throw error(concat(op, ": output and position_ids share memory: output element ", out_element,
                     " (in memory order) overlaps position_ids element ", id, count == 1 ? "" : " (row-major)",
                     "; output must not share memory with position_ids (they are read while output is written)"));
}

template <class T>
void check_pointers(const T* input, const T* cos_cache, const T* sin_cache, const T* output, std::int64_t n,
                    const char* op) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>,
                "ONNX RotaryEmbedding takes float, float16 (rotary::f16) or bfloat16 (rotary::bf16)");
  if (n > 0 && (input == nullptr || output == nullptr)) throw error(concat(op, ": null input or output"));
  if (cos_cache == nullptr || sin_cache == nullptr) throw error(concat(op, ": null cos_cache or sin_cache"));
}

}  // namespace detail

// ai.onnx RotaryEmbedding-23 (see the top of this file). cache_shape is the shape of cos_cache and
// of sin_cache: [max_pos, r/2] with position_ids ([B, S] values), [B, S, r/2] without.
template <class T>  // float, rotary::f16, rotary::bf16
void rotary_embedding(const T* input, const std::vector<std::int64_t>& input_shape, const T* cos_cache,
                      const T* sin_cache, const std::vector<std::int64_t>& cache_shape,
                      const std::int64_t* position_ids,  // [B, S], or nullptr: cos/sin are [B, S, r/2]
                      T* output, const RotaryEmbeddingAttrs& attrs) {
  const char* op = "onnx::rotary_embedding";
  const detail::Geometry g = detail::geometry(input_shape, attrs, op);
  detail::check_pointers(input, cos_cache, sin_cache, output, g.batch_stride * g.batch, op);
  static_cast<void>(detail::elements(cache_shape, "cos/sin cache"));
  const bool with_ids = position_ids != nullptr;
  if (cache_shape.size() != (with_ids ? 2u : 3u))
    throw error(detail::concat(op, ": cos/sin cache ", detail::shape_string(cache_shape), " must be ",
                               with_ids ? "2-D [max_position_id + 1, rotary_dim / 2] with position_ids"
                                        : "3-D [batch, seq, rotary_dim / 2] without position_ids"));
  detail::check_cache_width(cache_shape, g.rotary_dim, op);
  const std::int64_t half = g.rotary_dim / 2;
  if (with_ids) {
    const auto table = detail::checked_table(input, output, g, cos_cache, sin_cache, cache_shape[0], op);
    detail::check_ids_apart(position_ids, detail::elements({g.batch, g.seq}, "position_ids"), output, g, op);
    detail::check_position_ids(position_ids, g, cache_shape[0], op);
    detail::run_batches(
        input, output, g, attrs.interleaved, [&](std::int64_t) { return table; },
        [&](std::int64_t b) { return Positions(position_ids + b * g.seq, g.seq); });
  } else {
    if (cache_shape[0] != g.batch || cache_shape[1] != g.seq)
      throw error(detail::concat(op, ": without position_ids the cos/sin cache ", detail::shape_string(cache_shape),
                                 " must be [batch, seq, rotary_dim / 2] = [", g.batch, ", ", g.seq, ", ", half, "]"));
    const auto table = detail::checked_table(input, output, g, cos_cache, sin_cache, g.batch * g.seq, op);
    detail::run_batches(
        input, output, g, attrs.interleaved, [&](std::int64_t b) { return table.rows_from(b * g.seq, g.seq); },
        [](std::int64_t) { return Positions::contiguous(0); });
  }
}

namespace contrib {

// com.microsoft RotaryEmbedding (see the top of this file): position_ids_shape [B, S], or [1] or []
// for a start offset shared by every batch; cache_shape [max_pos, r/2].
template <class T>  // float, rotary::f16, rotary::bf16
void rotary_embedding(const T* input, const std::vector<std::int64_t>& input_shape, const std::int64_t* position_ids,
                      const std::vector<std::int64_t>& position_ids_shape, const T* cos_cache, const T* sin_cache,
                      const std::vector<std::int64_t>& cache_shape, T* output, const RotaryEmbeddingAttrs& attrs) {
  const char* op = "onnx::contrib::rotary_embedding";
  static_cast<void>(detail::elements(input_shape, "input"));
  static_cast<void>(detail::elements(cache_shape, "cos/sin cache"));
  if (cache_shape.size() != 2)
    throw error(detail::concat(op, ": cos/sin cache ", detail::shape_string(cache_shape),
                               " must be 2-D [max_sequence_length, rotary_dim / 2]"));
  const detail::Geometry g =
      detail::geometry(input_shape, detail::contrib_attrs(input_shape, cache_shape, attrs, op), op);
  detail::check_pointers(input, cos_cache, sin_cache, output, g.batch_stride * g.batch, op);
  detail::check_cache_width(cache_shape, g.rotary_dim, op);
  if (position_ids == nullptr) throw error(detail::concat(op, ": null position_ids"));
  // ONNX Runtime's start form is a scalar or a one-element vector (IsScalarOr1ElementVector)
  const bool start_only = position_ids_shape.empty() || position_ids_shape == std::vector<std::int64_t>{1};
  if (!start_only && position_ids_shape != std::vector<std::int64_t>{g.batch, g.seq})
    throw error(detail::concat(op, ": position_ids ", detail::shape_string(position_ids_shape), " must be [1] or [",
                               g.batch, ", ", g.seq, "] (or a scalar, shape [])"));
  const auto table = detail::checked_table(input, output, g, cos_cache, sin_cache, cache_shape[0], op);
  detail::check_ids_apart(position_ids, start_only ? 1 : detail::elements({g.batch, g.seq}, "position_ids"),
                          output, g, op);
  if (start_only)
    detail::check_start_position(position_ids[0], g, cache_shape[0], op);
  else
    detail::check_position_ids(position_ids, g, cache_shape[0], op);
  detail::run_batches(
      input, output, g, attrs.interleaved, [&](std::int64_t) { return table; },
      [&](std::int64_t b) {
        return start_only ? Positions::contiguous(position_ids[0]) : Positions(position_ids + b * g.seq, g.seq);
      });
}

}  // namespace contrib

}  // namespace rotary::onnx

#endif  // ROTARY_COMPAT_ONNX_HPP
