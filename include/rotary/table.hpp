// rotary — bring your own cos/sin table: a non-owning view of a caller's table (ONNX, ORT, vLLM,
// FlashAttention, candle, HF) and TableRope, the rotator that runs every entry point on it.
//
// The table need not hold unit rotations (any values are applied as given) and may be stored in
// f32, f64, f16 or bf16. Rows are widened once, exactly, to the call's compute type (f32 for f32,
// f16 and bf16 vectors, f64 for f64 ones); a table wider than the compute type (f64 cos/sin for f32
// vectors) is refused at compile time rather than narrowed silently. The same kernels run as for a
// Rope, so results are the same bits on every ISA: a table whose rows equal a Rope's cache rows gives
// that Rope's results exactly.
#ifndef ROTARY_TABLE_HPP
#define ROTARY_TABLE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "apply.hpp"
#include "cache.hpp"
#include "config.hpp"
#include "detail/convert.hpp"
#include "detail/driver/checks.hpp"
#include "detail/driver/driver.hpp"
#include "detail/format.hpp"
#include "dtype.hpp"
#include "positions.hpp"
#include "types.hpp"

#if ROTARY_X86_KERNELS
#include <immintrin.h>
#endif

namespace rotary {

namespace detail {

// "" or why no buffer holds a table of `rows` rows, `row_stride` elements apart, each read over its
// first `width` elements of `element_size` bytes: it spans more than PTRDIFF_MAX bytes, past which
// its extent and the kernels' row addresses overflow. `name` names the table in the message (the
// caller's argument: "cos_sin_cache", "cos_cache and sin_cache"). Counts and strides the table's own
// checks refuse (rows or width <= 0, a negative stride) pass here.
inline std::string check_table_span(const char* name, std::int64_t rows, std::int64_t row_stride,
                                    std::int64_t width, std::size_t element_size) {
  if (rows <= 0 || width <= 0 || row_stride < 0 || span_fits({{rows, row_stride}}, width, element_size))
    return {};
  return concat(name, ": ", rows, " rows of ", width, " values (row stride ", row_stride,
                ") span more than PTRDIFF_MAX bytes: no buffer is that large");
}

}  // namespace detail

// A caller's cos/sin table, not owned: row r holds the cos and sin of position first_position() + r
// for pairs j = 0 .. half()-1. E is the element type (f32, f64, f16, bf16). The factories check their
// arguments and throw rotary::error.
template <class E>
class CosSinTableView {
  static_assert(is_storage_type_v<E>, "a cos/sin table holds f32, f64, f16 (Eigen::half) or bf16 (Eigen::bfloat16)");

 public:
  using element_type = E;

  // Separate tables cos[rows, half] and sin[rows, half] (ONNX, ORT, FlashAttention, candle): cos of
  // row r, pair j at cos[r * row_stride + j]; row_stride 0 means half.
  static CosSinTableView separate(const E* cos, const E* sin, std::int64_t rows, std::int64_t half,
                                  std::int64_t row_stride = 0) {
    return make(cos, sin, rows, half, row_stride == 0 ? half : row_stride, half, "separate table");
  }
  // One table cos_sin[rows, rotary_dim] = cat(cos, sin) per row (vLLM's cos_sin_cache, and the layout
  // of a rotary CosSinCache); row_stride 0 means rotary_dim.
  static CosSinTableView concatenated(const E* cos_sin, std::int64_t rows, std::int64_t rotary_dim,
                                      std::int64_t row_stride = 0) {
    const std::int64_t half = half_of(rotary_dim, "concatenated table");
    return make(cos_sin, cos_sin == nullptr ? nullptr : cos_sin + half, rows, half,
                row_stride == 0 ? rotary_dim : row_stride, rotary_dim, "concatenated table");
  }
  // HF's duplicated tables cos[rows, rotary_dim] and sin[rows, rotary_dim], each cat(v, v) per row
  // (emb = cat(freqs, freqs)). Only the first half of a row is read, so the factory checks, once,
  // that every row's second half repeats its first bit for bit: a table that does not is not this
  // layout and is refused rather than half-ignored.
  static CosSinTableView duplicated(const E* cos, const E* sin, std::int64_t rows, std::int64_t rotary_dim,
                                    std::int64_t row_stride = 0) {
    const std::int64_t half = half_of(rotary_dim, "duplicated table");
    CosSinTableView v = make(cos, sin, rows, half, row_stride == 0 ? rotary_dim : row_stride, rotary_dim,
                             "duplicated table");
    for (const auto& [table, name] : {std::pair<const E*, const char*>{cos, "cos"}, {sin, "sin"}})
      for (std::int64_t r = 0; r < rows; ++r) {
        const E* row = table + r * v.stride_;
        if (std::memcmp(row, row + half, static_cast<std::size_t>(half) * sizeof(E)) != 0)
          throw error(detail::concat("duplicated table: ", name, " row ", r,
                                     " is not cat(v, v) (its second half differs from its first); "
                                     "use CosSinTableView::separate for tables of rotary_dim/2 values"));
      }
    return v;
  }

  // The same table with row 0 holding position p (default 0): positions [p, p + rows()).
  CosSinTableView with_first_position(std::int64_t p) const {
    if (p < 0 || p > std::numeric_limits<std::int64_t>::max() - rows_)
      throw error(detail::concat("table first position (", p, ") must be >= 0 and first + rows must fit int64"));
    CosSinTableView v = *this;
    v.first_ = p;
    return v;
  }
  // Rows [from, from + count) of this table, as a table of their own (positions restart at 0): e.g.
  // batch b's rows of a per-(batch, token) table.
  CosSinTableView rows_from(std::int64_t from, std::int64_t count) const {
    if (from < 0 || count < 0 || from > rows_ - count)
      throw error(detail::concat("table rows [", from, ", ", from, " + ", count, ") are outside its ", rows_, " rows"));
    CosSinTableView v = *this;
    v.cos_ += from * stride_;
    v.sin_ += from * stride_;
    v.rows_ = count;
    v.first_ = 0;
    return v;
  }

  const E* cos() const noexcept { return cos_; }
  const E* sin() const noexcept { return sin_; }
  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t half() const noexcept { return half_; }
  std::int64_t rotary_dim() const noexcept { return 2 * half_; }
  std::int64_t row_stride() const noexcept { return stride_; }
  std::int64_t first_position() const noexcept { return first_; }
  // True where each row is [cos half | sin half] contiguous, the layout kernels read directly.
  bool concatenated_rows() const noexcept { return rows_ > 0 && sin_ == cos_ + half_; }

 private:
  // `table` names the factory in messages: "separate table", ...
  static std::int64_t half_of(std::int64_t rotary_dim, const char* table) {
    if (rotary_dim <= 0 || rotary_dim % 2 != 0)
      throw error(detail::concat(table, ": rotary_dim (", rotary_dim, ") must be even and > 0"));
    return rotary_dim / 2;
  }
  static CosSinTableView make(const E* cos, const E* sin, std::int64_t rows, std::int64_t half,
                              std::int64_t stride, std::int64_t width, const char* table) {
    if (half <= 0) throw error(detail::concat(table, ": half (", half, ") must be > 0"));
    if (rows < 0) throw error(detail::concat(table, ": rows (", rows, ") must be >= 0"));
    if (stride < width)
      throw error(detail::concat(table, ": row_stride (", stride, ") is less than a row's ", width, " values"));
    if (rows > 0 && (cos == nullptr || sin == nullptr))
      throw error(detail::concat(table, ": null cos or sin pointer for ", rows, " rows"));
    // In bytes, not elements: the rows must fit in PTRDIFF_MAX bytes (which keeps rows x row_stride
    // within int64 too, E being 2 bytes or more).
    if (std::string m = detail::check_table_span(table, rows, stride, width, sizeof(E)); !m.empty())
      throw error(m);
    CosSinTableView v;
    v.cos_ = cos;
    v.sin_ = sin;
    v.rows_ = rows;
    v.half_ = half;
    v.stride_ = stride;
    return v;
  }

  const E* cos_ = nullptr;
  const E* sin_ = nullptr;
  std::int64_t rows_ = 0;
  std::int64_t half_ = 0;
  std::int64_t stride_ = 0;
  std::int64_t first_ = 0;
};

// A view of a range cache's rows (e.g. one Rope<float>'s table, shared by Rope-shaped rotators of
// f32, f16 and bf16 vectors without a copy). The cache must outlive the view.
template <class C>
CosSinTableView<C> table_view(const CosSinCache<C>& cache) {
  if (!cache.is_range())
    throw error("table_view: a cache of listed positions has no table indexed by position");
  return CosSinTableView<C>::concatenated(cache.data(), cache.size(), cache.rotary_dim())
      .with_first_position(cache.begin_position());
}

// The rotator over a caller's table: vectors of storage type T (head_dim values per head, the first
// rotary_dim rotated with `pairing`, the rest passed through), cos/sin from `table` indexed by
// position. Accepted by every entry point that takes a Rope (apply, apply_qk, strided, batches,
// varlen, TensorMap). The table must outlive the calls.
template <class T, class E = compute_t<T>>
class TableRope {
  static_assert(is_storage_type_v<T>, "rotary stores f32, f64, f16 (Eigen::half) or bf16 (Eigen::bfloat16)");
  static_assert(sizeof(E) <= sizeof(compute_t<T>),
                "the cos/sin table is wider than the compute type (f64 table for f32/f16/bf16 vectors): "
                "rotary never narrows it silently; convert the table to f32 yourself if that is intended");

 public:
  using value_type = T;

  TableRope(std::int64_t head_dim, std::int64_t rotary_dim, Pairing pairing, const CosSinTableView<E>& table)
      : head_dim_(head_dim), rotary_dim_(rotary_dim), pairing_(pairing), table_(table) {
    if (head_dim <= 0) throw error(detail::concat("head_dim (", head_dim, ") must be > 0"));
    if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
      throw error(detail::concat("rotary_dim (", rotary_dim, ") must be even, > 0 and <= head_dim (", head_dim, ")"));
    detail::check_pairing(pairing);
    if (table.half() != rotary_dim / 2)
      throw error(detail::concat("the table holds ", table.half(), " cos/sin values per row; rotary_dim ", rotary_dim,
                                 " needs ", rotary_dim / 2));
  }

  std::int64_t head_dim() const noexcept { return head_dim_; }
  std::int64_t rotary_dim() const noexcept { return rotary_dim_; }
  Pairing pairing() const noexcept { return pairing_; }
  const CosSinTableView<E>& table() const noexcept { return table_; }

 private:
  std::int64_t head_dim_;
  std::int64_t rotary_dim_;
  Pairing pairing_;
  CosSinTableView<E> table_;
};

namespace detail {

// Positions within [first, first + rows) of a caller's table (and the array/overflow checks every
// call makes).
inline std::string check_table_positions(const Positions& p, std::int64_t tokens, std::int64_t first,
                                         std::int64_t rows) {
  std::string m = check_positions(p, tokens, static_cast<const CosSinCache<float>*>(nullptr));
  if (!m.empty() || tokens == 0) return m;
  const auto outside = [first, rows](std::int64_t pos) { return pos < first || pos - first >= rows; };
  const auto where = [first, rows] { return concat(" is outside the table [", first, ", ", first + rows, ")"); };
  if (p.is_contiguous()) {
    for (const std::int64_t t : {std::int64_t{0}, tokens - 1})
      if (outside(p.start() + t)) return concat("position ", p.start() + t, " (token ", t, ")", where());
    return {};
  }
  for (std::int64_t t = 0; t < tokens; ++t)
    if (outside(p[t])) return concat("positions[", t, "] (", p[t], ")", where());
  return {};
}

// The caller's memory a table call reads: the positions array and the cos and sin rows.
template <class E>
ReadExtents table_reads(const CosSinTableView<E>& table, const Positions& positions, std::int64_t tokens) noexcept {
  const auto rows = [&table](const E* p) {
    if (table.rows() <= 0) return Extent{};
    return StridedRows(p, table.half(), {{"row", table.rows(), table.row_stride()}}).extent();
  };
  ReadExtents r;
  r.add("positions", positions_extent(positions, tokens));
  r.add("the cos table", rows(table.cos()));
  r.add("the sin table", rows(table.sin()));
  return r;
}

// A caller's table in the compute type, any layout: the kernels read it in place.
template <class C>
struct ViewRows {
  static constexpr bool kTable = true;
  CosSinTableView<C> table;
  Positions positions;
  std::string check(std::int64_t tokens, bool /*fused*/) const {
    return check_table_positions(positions, tokens, table.first_position(), table.rows());
  }
  ReadExtents reads(std::int64_t tokens) const noexcept { return table_reads(table, positions, tokens); }
  CosSinRows<C> rows() const noexcept {
    CosSinRows<C> s;
    s.base = table.cos();
    s.sin_base = table.sin();
    s.stride = table.row_stride();
    s.first = table.first_position();
    s.positions = positions;
    return s;
  }
};

#if ROTARY_X86_KERNELS
// f16 -> f32 with F16C's vcvtph2ps, 8 values an instruction: the bits of f16_to_f32_n (convert.hpp).
ROTARY_TARGET_AVX2 inline void f16_to_f32_n_f16c(const f16* in, float* out, std::int64_t n) noexcept {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  clear_upper_state();
  if (i < n) f16_to_f32_n(in + i, out + i, n - i);
}
#endif

// Whether the ISA calls dispatch to has F16C (avx2 and avx512 both do).
inline bool dispatch_has_f16c() {
  const Isa isa = active_isa();
  return isa == Isa::avx2 || isa == Isa::avx512;
}

// A caller's f16 table row widened: F16C where the dispatched ISA has it, else the branch-free loop.
inline void widen_f16_row(const f16* in, float* out, std::int64_t n, bool f16c) noexcept {
#if ROTARY_X86_KERNELS
  if (f16c) {
    f16_to_f32_n_f16c(in, out, n);
    return;
  }
#else
  (void)f16c;
#endif
  f16_to_f32_n(in, out, n);
}

// A table of another element type: each block's rows gathered into [cos | sin] rows of the compute type C, widened
// exactly from E (f16 rows by widen_f16_row).
template <class C, class E>
struct GatheredRows {
  static constexpr bool kTable = false;
  static constexpr std::int64_t kBlock = 64;
  struct Scratch {};
  CosSinTableView<E> table;
  Positions positions;
  bool f16c = false;  // f16 rows: the dispatched ISA has F16C (avx2 or avx512)
  std::string check(std::int64_t tokens, bool /*fused*/) const {
    return check_table_positions(positions, tokens, table.first_position(), table.rows());
  }
  ReadExtents reads(std::int64_t tokens) const noexcept { return table_reads(table, positions, tokens); }
  static Scratch scratch() noexcept { return {}; }
  static constexpr bool separate_key_rows() noexcept { return false; }
  void fill(std::int64_t from, std::int64_t t0, std::int64_t t1, C* rows, C* /*key_rows*/,
            Scratch& /*scratch*/) const noexcept {
    const std::int64_t h = table.half();
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t r = positions[t] - table.first_position();
      ROTARY_ASSERT(r >= 0 && r < table.rows());
      const E* c = table.cos() + r * table.row_stride();
      const E* s = table.sin() + r * table.row_stride();
      C* out = rows + (t - from) * 2 * h;
      widen_row(c, out, h);
      widen_row(s, out + h, h);
    }
  }
  void widen_row(const E* in, C* out, std::int64_t n) const noexcept {
    if constexpr (std::is_same_v<E, f16> && std::is_same_v<C, float>) {
      widen_f16_row(in, out, n, f16c);  // vectorized, the same bits
    } else {
      for (std::int64_t j = 0; j < n; ++j) out[j] = widen(in[j]);
    }
  }
  static C widen(E v) noexcept {
    if constexpr (std::is_same_v<E, f16> || std::is_same_v<E, bf16>)
      return static_cast<C>(to_compute(v));  // exact: f16/bf16 -> f32 (-> f64)
    else
      return static_cast<C>(v);  // same type, or f32 -> f64: exact
  }
};

}  // namespace detail

template <class T, class E>
struct rotator_traits<TableRope<T, E>> {
  using value_type = T;
  using positions_type = Positions;
  template <class F>
  static void with_rows(const TableRope<T, E>& r, const Positions& p, Direction /*dir*/, F&& f) {
    using C = compute_t<T>;
    if constexpr (std::is_same_v<E, C>)
      f(detail::ViewRows<C>{r.table(), p});
    else if constexpr (std::is_same_v<E, f16>)
      f(detail::GatheredRows<C, E>{r.table(), p, detail::dispatch_has_f16c()});
    else
      f(detail::GatheredRows<C, E>{r.table(), p});
  }
};

}  // namespace rotary

#endif  // ROTARY_TABLE_HPP
