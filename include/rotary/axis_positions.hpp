// rotary — the positions of a multi-axis call: AxisPositions (S streams of one position per
// token), the positions of patch grids (grid_positions) and the M-RoPE index builder of sequences
// mixing text and vision tokens (MropePositionBuilder).
#ifndef ROTARY_AXIS_POSITIONS_HPP
#define ROTARY_AXIS_POSITIONS_HPP

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

#include "axis_map.hpp"
#include "config.hpp"
#include "detail/driver/checks.hpp"
#include "detail/format.hpp"
#include "types.hpp"

namespace rotary {

// ---- positions: S streams of one position per token --------------------------------------------

// A non-owning view of S position streams over `tokens` tokens: p(a, t) is token t's position on
// axis a. int32 or int64; any element strides (planar [S x tokens] like Qwen's position_ids of
// shape (3, seq), token-major [tokens x S], or S separate arrays). The data must outlive the call.
class AxisPositions {
 public:
  enum class Kind { int32, int64 };

  // Planar [streams x tokens]: stream a is data[a * tokens + t].
  AxisPositions(const std::int64_t* data, int streams, std::int64_t tokens)
      : AxisPositions(strided(data, streams, tokens, tokens, 1)) {}
  AxisPositions(const std::int32_t* data, int streams, std::int64_t tokens)
      : AxisPositions(strided(data, streams, tokens, tokens, 1)) {}
  // A planar vector of streams * tokens values (throws if its size is not a multiple of streams).
  AxisPositions(const std::vector<std::int64_t>& planar, int streams)
      : AxisPositions(planar.data(), streams, tokens_of(planar.size(), streams)) {}
  AxisPositions(const std::vector<std::int32_t>& planar, int streams)
      : AxisPositions(planar.data(), streams, tokens_of(planar.size(), streams)) {}
  // An Eigen int32/int64 matrix (or Map) with one row per stream and one column per token, in either
  // storage order (a (3, seq) position_ids tensor). Implicit on purpose, like Positions'.
  template <class Derived, class = std::enable_if_t<std::is_same_v<typename Derived::Scalar, std::int32_t> ||
                                                    std::is_same_v<typename Derived::Scalar, std::int64_t>>>
  AxisPositions(const Eigen::PlainObjectBase<Derived>& m)  // NOLINT(google-explicit-constructor)
      : AxisPositions(strided(m.data(), static_cast<int>(m.rows()), m.cols(), m.rowStride(), m.colStride())) {
  }
  template <class Plain, int Options, class StrideType,
            class = std::enable_if_t<std::is_same_v<typename Plain::Scalar, std::int32_t> ||
                                     std::is_same_v<typename Plain::Scalar, std::int64_t>>>
  AxisPositions(const Eigen::Map<Plain, Options, StrideType>& m)  // NOLINT(google-explicit-constructor)
      : AxisPositions(strided(m.data(), static_cast<int>(m.rows()), m.cols(), m.rowStride(), m.colStride())) {
  }

  // Any strides (elements, >= 0): p(a, t) = data[a * stream_stride + t * token_stride].
  // Token-major [tokens x streams] is stream_stride 1, token_stride streams.
  template <class I>
  static AxisPositions strided(const I* data, int streams, std::int64_t tokens, std::ptrdiff_t stream_stride,
                               std::ptrdiff_t token_stride) {
    static_assert(std::is_same_v<I, std::int32_t> || std::is_same_v<I, std::int64_t>,
                  "positions are int32 or int64");
    detail::check_streams("position streams", streams);
    check_strides(tokens, stream_stride, token_stride);
    check_span(streams, stream_stride, tokens, token_stride, sizeof(I));
    AxisPositions p;
    p.streams_ = streams;
    p.tokens_ = tokens;
    p.token_stride_ = token_stride;
    for (int a = 0; a < streams && a < kMaxAxes; ++a)
      p.set(a, data == nullptr ? nullptr : data + a * stream_stride);
    return p;
  }
  template <class I>
  static AxisPositions token_major(const I* data, int streams, std::int64_t tokens) {
    return strided(data, streams, tokens, 1, streams);
  }
  // One array per stream (each `tokens` values, contiguous).
  template <class I>
  static AxisPositions of_streams(std::initializer_list<const I*> streams, std::int64_t tokens) {
    static_assert(std::is_same_v<I, std::int32_t> || std::is_same_v<I, std::int64_t>,
                  "positions are int32 or int64");
    detail::check_streams("position streams", static_cast<std::int64_t>(streams.size()));
    check_strides(tokens, 0, 1);
    check_span(1, 0, tokens, 1, sizeof(I));
    AxisPositions p;
    p.streams_ = static_cast<int>(streams.size());
    p.tokens_ = tokens;
    p.token_stride_ = 1;
    int a = 0;
    for (const I* s : streams)
      if (a < kMaxAxes) p.set(a++, s);
    return p;
  }

  Kind kind() const noexcept { return kind_; }
  int streams() const noexcept { return streams_; }
  std::int64_t tokens() const noexcept { return tokens_; }
  bool is_null(int axis) const noexcept { return p_[static_cast<std::size_t>(axis)] == nullptr; }
  // Where stream `axis` starts (p(axis, 0)), the elements between its tokens, and the bytes of one
  // value: where the checked calls find the arrays, which no output may overlap.
  // cppcheck-suppress CastIntegerToAddressAtReturn  ; p_ holds pointers (a false positive)
  const void* data(int axis) const noexcept { return p_[static_cast<std::size_t>(axis)]; }
  std::ptrdiff_t token_stride() const noexcept { return token_stride_; }
  std::size_t element_size() const noexcept {
    return kind_ == Kind::int32 ? sizeof(std::int32_t) : sizeof(std::int64_t);
  }

  // Tokens [first, first + count) of every stream (unchecked: within tokens()).
  AxisPositions slice(std::int64_t first, std::int64_t count) const noexcept {
    ROTARY_ASSERT(first >= 0 && count >= 0 && first + count <= tokens_);
    AxisPositions p = *this;
    p.tokens_ = count;
    for (int a = 0; a < streams_; ++a) {
      const void* q = p_[static_cast<std::size_t>(a)];
      if (q == nullptr) continue;
      p.p_[static_cast<std::size_t>(a)] =
          kind_ == Kind::int32
              ? static_cast<const void*>(static_cast<const std::int32_t*>(q) + first * token_stride_)
              : static_cast<const void*>(static_cast<const std::int64_t*>(q) + first * token_stride_);
    }
    return p;
  }

  // Token t's position on `axis` (unchecked).
  std::int64_t operator()(int axis, std::int64_t t) const noexcept {
    const void* p = p_[static_cast<std::size_t>(axis)];
    return kind_ == Kind::int32 ? static_cast<const std::int32_t*>(p)[t * token_stride_]
                                : static_cast<const std::int64_t*>(p)[t * token_stride_];
  }

 private:
  AxisPositions() = default;
  static std::int64_t tokens_of(std::size_t size, int streams) {
    detail::check_streams("position streams", streams);
    if (size % static_cast<std::size_t>(streams) != 0)
      throw error(detail::concat("planar positions have ", size, " values, not a multiple of streams (",
                                 streams, ")"));
    return static_cast<std::int64_t>(size / static_cast<std::size_t>(streams));
  }
  static void check_strides(std::int64_t tokens, std::ptrdiff_t stream_stride, std::ptrdiff_t token_stride) {
    using detail::concat;
    if (tokens < 0) throw error(concat("position tokens (", tokens, ") must be >= 0"));
    if (stream_stride < 0 || token_stride < 0)
      throw error(
          concat("position strides (stream ", stream_stride, ", token ", token_stride, ") must be >= 0"));
  }
  // No array spans more than PTRDIFF_MAX bytes: past that, p(a, t)'s offsets would overflow.
  static void check_span(int streams, std::ptrdiff_t stream_stride, std::int64_t tokens,
                         std::ptrdiff_t token_stride, std::size_t element_size) {
    if (tokens > 0 && !detail::span_fits({{streams, stream_stride}, {tokens, token_stride}}, 1, element_size))
      throw error(detail::concat("positions span more than PTRDIFF_MAX bytes (", streams,
                                 " streams x stream stride ", stream_stride, ", ", tokens, " tokens x token stride ",
                                 token_stride, "): no array is that large"));
  }
  template <class I>
  void set(int a, const I* p) noexcept {
    kind_ = std::is_same_v<I, std::int32_t> ? Kind::int32 : Kind::int64;
    p_[static_cast<std::size_t>(a)] = p;
  }

  Kind kind_ = Kind::int64;
  int streams_ = 0;
  std::int64_t tokens_ = 0;
  std::ptrdiff_t token_stride_ = 1;
  std::array<const void*, kMaxAxes> p_{};  // const int32_t* or const int64_t*, as kind_ says
};

// ---- positions of patch grids ---------------------------------------------------------------------

struct GridOptions {
  std::int64_t start = 0;       // added to every coordinate (the next text position before an image)
  double temporal_scale = 1.0;  // t coordinate = trunc(frame * temporal_scale) (Qwen2.5-VL:
                                // second_per_grid_t * tokens_per_second; HF multiplies in float32)
  std::int64_t merge = 1;       // token order: raster (1), or merge x merge windows in raster order
                                // of windows (the Qwen2-VL vision encoder, spatial_merge_size 2)
};

// Positions of a frames x rows x cols patch grid, one token per patch (frame after frame), as a
// planar vector for AxisPositions(v, axes):
//   axes 3: streams (t, h, w) = (start + trunc(frame * temporal_scale), start + row, start + col)
//   axes 2: streams (h, w)    = (start + row, start + col); every frame repeats them
inline std::vector<std::int64_t> grid_positions(std::int64_t frames, std::int64_t rows, std::int64_t cols,
                                                int axes, const GridOptions& options = {}) {
  using detail::concat;
  if (frames < 1 || rows < 1 || cols < 1)
    throw error(concat("grid (", frames, " x ", rows, " x ", cols, ") must be at least 1 x 1 x 1"));
  if (axes != 2 && axes != 3) throw error(concat("grid axes (", axes, ") must be 2 (h, w) or 3 (t, h, w)"));
  const std::int64_t m = options.merge;
  if (m < 1 || rows % m != 0 || cols % m != 0)
    throw error(concat("merge (", m, ") must be >= 1 and divide rows (", rows, ") and cols (", cols, ")"));
  if (!(options.temporal_scale >= 0.0) || !detail::finite(options.temporal_scale))
    throw error(concat("temporal_scale (", options.temporal_scale, ") must be finite and >= 0"));
  if (options.start < 0) throw error(concat("grid start (", options.start, ") must be >= 0"));
  // The vector's size and every coordinate must be representable: axes x tokens values, no larger
  // than a vector can hold; start + rows - 1, start + cols - 1 and (3 axes) start + trunc((frames - 1)
  // x scale) within int64 (the product first in double: no conversion of a value int64 cannot hold).
  std::uint64_t per_frame_u = 0;
  std::uint64_t tokens_u = 0;
  std::uint64_t values = 0;
  if (detail::mul_overflows(static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
                            per_frame_u) ||
      detail::mul_overflows(static_cast<std::uint64_t>(frames), per_frame_u, tokens_u) ||
      detail::mul_overflows(tokens_u, static_cast<std::uint64_t>(axes), values) ||
      values > std::vector<std::int64_t>().max_size())
    throw error(concat("grid (", frames, " x ", rows, " x ", cols, ") x ", axes,
                       " axes has more positions than a vector can hold"));
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const double t_last = axes == 3 ? static_cast<double>(frames - 1) * options.temporal_scale : 0.0;
  // 2^63 exactly in double: every double below it converts to int64
  if (!(t_last < 9223372036854775808.0) || static_cast<std::int64_t>(t_last) > kMax - options.start ||
      std::max(rows, cols) - 1 > kMax - options.start)
    throw error(concat("grid start (", options.start, ") + its largest coordinate (frames ", frames,
                       " x scale ", options.temporal_scale, ", rows ", rows, ", cols ", cols,
                       ") overflows int64"));
  const auto tokens = static_cast<std::int64_t>(tokens_u);
  // Indices into v, not pointers to its streams: GCC 12 at -O3 turns the constant h-stream stores
  // of a rows = 1 grid into a memset through a pointer it traces to a possibly empty vector and
  // reports a false -Warray-bounds "out of the bounds [0, 0]", which fails -Werror builds.
  const auto n = static_cast<std::size_t>(tokens);
  std::vector<std::int64_t> v(static_cast<std::size_t>(axes) * n);
  const std::size_t h_first = static_cast<std::size_t>(axes - 2) * n;
  std::size_t i = 0;
  for (std::int64_t f = 0; f < frames; ++f) {
    const auto tf = static_cast<std::int64_t>(static_cast<double>(f) * options.temporal_scale);
    for (std::int64_t br = 0; br < rows / m; ++br)
      for (std::int64_t bc = 0; bc < cols / m; ++bc)
        for (std::int64_t ir = 0; ir < m; ++ir)
          for (std::int64_t ic = 0; ic < m; ++ic, ++i) {
            if (axes == 3) v[i] = options.start + tf;
            v[h_first + i] = options.start + br * m + ir;
            v[h_first + n + i] = options.start + bc * m + ic;
          }
  }
  return v;
}

// The 3 M-RoPE streams (t, h, w) of one sequence mixing text and vision tokens, with the rule of
// Qwen2-VL's get_rope_index: text tokens take the next position on all three axes; a vision grid
// (frames x rows x cols tokens after spatial merging) takes start + (trunc(frame * scale), row, col)
// in raster order with start = the next position; afterwards the next position is the largest
// position so far + 1.
class MropePositionBuilder {
 public:
  MropePositionBuilder& add_text(std::int64_t count) {
    if (count < 0) throw error(detail::concat("text token count (", count, ") must be >= 0"));
    if (count > std::numeric_limits<std::int64_t>::max() - next_)
      throw error(detail::concat("text tokens (", count, ") from position ", next_, " overflow int64"));
    for (std::int64_t i = 0; i < count; ++i)
      for (auto& s : streams_) s.push_back(next_ + i);
    next_ += count;
    return *this;
  }
  MropePositionBuilder& add_grid(std::int64_t frames, std::int64_t rows, std::int64_t cols,
                                 double temporal_scale = 1.0) {
    GridOptions o;
    o.start = next_;
    o.temporal_scale = temporal_scale;
    const std::vector<std::int64_t> g = grid_positions(frames, rows, cols, 3, o);
    const std::size_t n = g.size() / 3;
    // (>= next_) checked before any stream grows: a refused grid leaves the builder as it was
    const std::int64_t last = *std::max_element(g.begin(), g.end());
    if (last == std::numeric_limits<std::int64_t>::max())
      throw error(
          detail::concat("the grid's largest position (", last, ") leaves no next position in int64"));
    for (std::size_t a = 0; a < 3; ++a) {
      const auto first = g.begin() + static_cast<std::ptrdiff_t>(a * n);
      streams_[a].insert(streams_[a].end(), first, first + static_cast<std::ptrdiff_t>(n));
    }
    next_ = last + 1;
    return *this;
  }

  std::int64_t tokens() const noexcept { return static_cast<std::int64_t>(streams_[0].size()); }
  // Where the next text token starts (on every axis).
  std::int64_t next_position() const noexcept { return next_; }
  // HF's rope_deltas: a later text token at sequence index i (e.g. a decode step) has position
  // i + rope_delta() on every axis.
  std::int64_t rope_delta() const noexcept { return next_ - tokens(); }
  const std::vector<std::int64_t>& stream(int axis) const {
    return streams_.at(static_cast<std::size_t>(axis));
  }
  // A view of the three streams; valid until the builder changes or dies.
  AxisPositions positions() const {
    return AxisPositions::of_streams<std::int64_t>(
        {streams_[0].data(), streams_[1].data(), streams_[2].data()}, tokens());
  }

 private:
  std::array<std::vector<std::int64_t>, 3> streams_;
  std::int64_t next_ = 0;
};

}  // namespace rotary

#endif  // ROTARY_AXIS_POSITIONS_HPP
