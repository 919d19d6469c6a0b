// rotary — multi-axis RoPE: every rotated pair takes its position from one of several position
// streams ("axes"). M-RoPE (Qwen2-VL, Qwen2.5-VL), interleaved M-RoPE (Qwen3-VL), 2-D axial RoPE
// for image patches and 3-D (t, h, w) RoPE for video are all one mechanism:
//
//   pair j (j < rotary_dim/2, either pairing) of token t rotates by  p_{a(j)}(t) * theta_j
//
// with a = the AxisMap (axis_of_pair[j] < streams), p_0 .. p_{S-1} the token's S positions
// (AxisPositions) and theta_j the frequencies of the Rope. Each axis is an ordinary 1-D RoPE on its
// own subset of pairs, so R(t) is still block diagonal and orthogonal, and for every axis a:
//   <R(m) q, R(n) k> depends on p_a(n) - p_a(m) only, through the pairs of axis a.
// With all streams equal (text tokens) it is 1-D RoPE, bit for bit.
//
// How it runs. Nothing here rotates anything: a token's cos/sin row (the cache layout,
// [cos_0 .. cos_{h-1}, sin_0 .. sin_{h-1}]) is assembled pair by pair, for blocks of 32 tokens at a
// time (bounded scratch), then the ordinary kernels of apply.hpp (scalar, AVX2, AVX-512, NEON; f32,
// f64, f16, bf16; fused q+k; ParallelFor) rotate every head of the token with it:
//   table Rope:    entry j of the row of position p_{a(j)} in the Rope's exact CosSinCache (gather)
//   OnTheFly Rope: exact sincos of p_{a(j)} * theta_j (detail/exact_angle.hpp), advanced by the
//                  rotation recurrence where an axis steps by +1 and reused where it repeats, with
//                  the same anchoring rule as 1-D cache-free mode (so equal streams give 1-D's bits)
//
// Conventions (HF transformers is the reference; ggml noted where it differs):
//   mrope_axis_map(d, {16, 24, 24})             Qwen2-VL / Qwen2.5-VL language model (head_dim 128):
//       pairs [0,16) use t, [16,40) h, [40,64) w. HF applies `mrope_section * 2` to cos/sin of width
//       rotary_dim = cat(freqs, freqs): the sections index pairs j of the half-split layout and
//       cover both halves (x_j and x_{j+d/2}). Frequencies theta_j = base^(-2j/d) over the whole
//       rotary_dim (AxisFrequencies::shared, i.e. the spec's ordinary frequencies), base 1e6.
//   interleaved_mrope_axis_map(d, {24, 20, 20})  Qwen3-VL language model: HF's
//       apply_interleaved_mrope, pair j uses h if j % 3 == 1 and j < 3*s_h, w if j % 3 == 2 and
//       j < 3*s_w, else t (so pairs 60..63 of head_dim 128 use t). Shared frequencies, base 5e6.
//       ggml's IMROPE sends pairs failing all three tests (61, 62 here) to a 4th stream instead;
//       a 4-stream AxisMap reproduces that if needed.
//   axial_axis_map(d, 2, AxialLayout::split) + AxisFrequencies::per_axis   2-D vision encoders of
//       Qwen2-VL / Qwen2.5-VL (HF VisionRotaryEmbedding(head_dim/2), half_split over head_dim,
//       axis 0 = patch row, axis 1 = column) and ggml's GGML_ROPE_TYPE_VISION (per-section theta
//       restart): each axis is a 1-D RoPE of dimension d/2.
//   axial_axis_map(d, 2, AxialLayout::split) + AxisFrequencies::strided    Pixtral (Mistral's
//       vision encoder): row uses theta_0, theta_2, ..., column theta_1, theta_3, ... of
//       base^(-2i/d); interleaved pairs in mistral-inference's complex form (HF's checkpoints are
//       permuted to half_split / rotate_half).
//   3-D video: mrope or axial maps over 3 streams (t, h, w); grid_positions() makes the positions.
//
// Entry points: a MultiAxisRope is a rotator, so every entry point of apply.hpp and layouts.hpp
// takes it in place of a Rope, with AxisPositions in place of Positions (apply, apply_strided,
// apply_qk, apply_qk_strided, their out-of-place and *_unchecked forms, apply_batch and
// apply_varlen with per-token AxisPositions in the batch's memory order).
// Checked: everything apply() checks (shapes, strides, overlapping rows, partial in/out overlap, q/k
// overlap) plus: positions' stream count = the map's, tokens per stream = the tensor's tokens, every
// position of every axis the map uses >= 0 and held by the cache (O(streams x tokens)), and no output
// sharing memory with a position stream the map uses (or a TableMultiAxisRope's cos/sin table). Unchecked:
// the same checks via ROTARY_ASSERT in debug builds only; bad input is undefined behaviour.
// Constructors and helpers (AxisMap, the *_axis_map functions, axis_frequencies, AxisPositions,
// grid_positions, MropePositionBuilder, MultiAxisRope) always validate and throw rotary::error.
#ifndef ROTARY_MULTI_AXIS_HPP
#define ROTARY_MULTI_AXIS_HPP

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "apply.hpp"
#include "cache.hpp"
#include "config.hpp"
#include "detail/driver/checks.hpp"
#include "detail/exact_angle.hpp"
#include "detail/format.hpp"
#include "detail/kernels/kernel_args.hpp"
#include "dtype.hpp"
#include "frequencies.hpp"
#include "parallel.hpp"
#include "rope.hpp"
#include "table.hpp"
#include "types.hpp"

namespace rotary {

// Most position streams one call may use (ggml uses 4; video needs 3).
inline constexpr int kMaxAxes = 8;

namespace detail {

inline std::string list_string(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

inline void check_streams(const char* what, std::int64_t streams) {
  if (streams < 1 || streams > kMaxAxes)
    throw error(concat(what, " (", streams, ") must be in [1, ", kMaxAxes, "]"));
}

inline void check_rotary_dim(std::int64_t rotary_dim) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0)
    throw error(concat("rotary_dim (", rotary_dim, ") must be even and positive"));
}

// Sections of rotary_dim/2 pairs: 1..kMaxAxes of them, each >= 0, summing to rotary_dim/2.
inline void check_sections(std::int64_t rotary_dim, const std::vector<std::int64_t>& sections) {
  check_rotary_dim(rotary_dim);
  const std::int64_t pairs = rotary_dim / 2;
  if (sections.empty() || sections.size() > static_cast<std::size_t>(kMaxAxes))
    throw error(concat("mrope_section has ", sections.size(), " entries; 1 to ", kMaxAxes, " are supported"));
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    if (sections[i] < 0 || sections[i] > pairs)
      throw error(
          concat("mrope_section[", i, "] (", sections[i], ") must be in [0, rotary_dim/2 = ", pairs, "]"));
    sum += sections[i];
  }
  if (sum != pairs)
    throw error(concat("mrope_section ", list_string(sections), " sums to ", sum, " but rotary_dim/2 is ",
                       pairs, " (rotary_dim ", rotary_dim, ")"));
}

}  // namespace detail

// ---- which axis drives each pair ----------------------------------------------------------------

class AxisMap {
 public:
  // A maximal run of consecutive pairs [begin, end) driven by one axis (M-RoPE: one per section).
  struct Run {
    std::int64_t begin = 0;
    std::int64_t end = 0;
    int axis = 0;
  };

  AxisMap() = default;

  // axis_of_pair[j]: the position stream that drives pair j (j < rotary_dim/2). `streams` is the
  // number of streams a call's positions must have; streams no pair uses are never read.
  // Throws if streams is not in [1, kMaxAxes], the map is empty, or a value is >= streams.
  AxisMap(std::vector<std::uint8_t> axis_of_pair, int streams)
      : axis_(std::move(axis_of_pair)), streams_(streams) {
    using detail::concat;
    detail::check_streams("axis map streams", streams);
    if (axis_.empty()) throw error("axis_of_pair is empty (rotary_dim must be > 0)");
    counts_.assign(static_cast<std::size_t>(streams), 0);
    for (std::size_t j = 0; j < axis_.size(); ++j) {
      if (axis_[j] >= streams)
        throw error(concat("axis_of_pair[", j, "] (", static_cast<int>(axis_[j]), ") must be < streams (",
                           streams, ")"));
      ++counts_[axis_[j]];
      const auto jj = static_cast<std::int64_t>(j);
      if (runs_.empty() || runs_.back().axis != axis_[j]) {
        runs_.push_back(Run{jj, jj + 1, axis_[j]});
      } else {
        runs_.back().end = jj + 1;
      }
    }
  }

  std::int64_t pairs() const noexcept { return static_cast<std::int64_t>(axis_.size()); }
  int streams() const noexcept { return streams_; }
  const std::vector<std::uint8_t>& axis_of_pair() const noexcept { return axis_; }
  int operator[](std::int64_t j) const noexcept { return axis_[static_cast<std::size_t>(j)]; }
  // Number of pairs driven by `axis` (0 for an unused stream).
  std::int64_t count(int axis) const noexcept { return counts_[static_cast<std::size_t>(axis)]; }
  bool uses(int axis) const noexcept { return count(axis) > 0; }
  const std::vector<Run>& runs() const noexcept { return runs_; }

  friend bool operator==(const AxisMap& a, const AxisMap& b) noexcept {
    return a.streams_ == b.streams_ && a.axis_ == b.axis_;
  }
  friend bool operator!=(const AxisMap& a, const AxisMap& b) noexcept { return !(a == b); }

 private:
  std::vector<std::uint8_t> axis_;
  int streams_ = 0;
  std::vector<std::int64_t> counts_;
  std::vector<Run> runs_;
};

// M-RoPE (Qwen2-VL, Qwen2.5-VL): consecutive sections of pairs, section i driven by stream i.
// mrope_section must sum to rotary_dim/2 (HF's torch.split would fail otherwise); one stream per
// section (zero-length sections allowed).
inline AxisMap mrope_axis_map(std::int64_t rotary_dim, const std::vector<std::int64_t>& mrope_section) {
  detail::check_sections(rotary_dim, mrope_section);
  std::vector<std::uint8_t> axis;
  axis.reserve(static_cast<std::size_t>(rotary_dim / 2));
  for (std::size_t i = 0; i < mrope_section.size(); ++i)
    axis.insert(axis.end(), static_cast<std::size_t>(mrope_section[i]), static_cast<std::uint8_t>(i));
  return AxisMap(std::move(axis), static_cast<int>(mrope_section.size()));
}

// Interleaved M-RoPE (Qwen3-VL's apply_interleaved_mrope, generalised from 3 to S sections): pair j
// uses stream a >= 1 if j % S == a and j < S * mrope_section[a], else stream 0. Throws unless every
// stream then drives exactly mrope_section[a] pairs (e.g. [10, 27, 27] cannot be honoured on 64
// pairs: stream 1 would get 21).
inline AxisMap interleaved_mrope_axis_map(std::int64_t rotary_dim,
                                          const std::vector<std::int64_t>& mrope_section) {
  using detail::concat;
  detail::check_sections(rotary_dim, mrope_section);
  const auto streams = static_cast<std::int64_t>(mrope_section.size());
  const std::int64_t pairs = rotary_dim / 2;
  std::vector<std::uint8_t> axis(static_cast<std::size_t>(pairs), 0);
  for (std::int64_t j = 0; j < pairs; ++j) {
    const std::int64_t a = j % streams;
    if (a != 0 && j < streams * mrope_section[static_cast<std::size_t>(a)])
      axis[static_cast<std::size_t>(j)] = static_cast<std::uint8_t>(a);
  }
  AxisMap map(std::move(axis), static_cast<int>(streams));
  for (int a = 1; a < map.streams(); ++a)  // then stream 0 holds the rest: exactly its section
    if (map.count(a) != mrope_section[static_cast<std::size_t>(a)])
      throw error(concat("interleaved mrope_section ", detail::list_string(mrope_section),
                         " cannot be honoured on ", pairs, " pairs: stream ", a, " gets ", map.count(a),
                         " pairs, not ", mrope_section[static_cast<std::size_t>(a)]));
  return map;
}

// N-D axial RoPE with equal shares: `axes` streams of rotary_dim/2/axes pairs each.
//   split:       pairs [a*n, (a+1)*n) use axis a (first half x/row, second half y/column for 2-D)
//   interleaved: pair j uses axis j % axes
enum class AxialLayout { split, interleaved };

inline AxisMap axial_axis_map(std::int64_t rotary_dim, int axes, AxialLayout layout) {
  using detail::concat;
  detail::check_rotary_dim(rotary_dim);
  detail::check_streams("axes", axes);
  const std::int64_t pairs = rotary_dim / 2;
  if (pairs % axes != 0)
    throw error(concat("rotary_dim/2 (", pairs, ") must be a multiple of axes (", axes, ")"));
  const std::int64_t n = pairs / axes;
  std::vector<std::uint8_t> axis(static_cast<std::size_t>(pairs));
  for (std::int64_t j = 0; j < pairs; ++j)
    axis[static_cast<std::size_t>(j)] =
        static_cast<std::uint8_t>(layout == AxialLayout::split ? j / n : j % axes);
  return AxisMap(std::move(axis), axes);
}

// Frequencies for a map (attention factor 1; scale or finish them like any Frequencies):
//   shared:   theta_j = base^(-2j/d) over the whole rotary_dim d, whatever the axis (M-RoPE)
//   per_axis: each axis is a 1-D RoPE of its own: its k-th pair (in pair order) gets
//             base^(-2k/d_a), d_a = 2 * (pairs of that axis)   (Qwen2-VL vision, ggml VISION)
//   strided:  with S streams of equal size, the k-th pair of axis a gets theta_{S*k + a} of the
//             shared set (Pixtral: rows the even, columns the odd frequencies)
enum class AxisFrequencies { shared, per_axis, strided };

inline Frequencies axis_frequencies(const AxisMap& map, double base, AxisFrequencies kind) {
  using detail::concat;
  if (map.pairs() == 0) throw error("axis_frequencies: the axis map is empty");
  Frequencies shared = default_frequencies(2 * map.pairs(), base);  // validates base
  if (kind == AxisFrequencies::shared) return shared;
  const int streams = map.streams();
  if (kind == AxisFrequencies::strided) {
    for (int a = 0; a < streams; ++a)
      if (map.count(a) * streams != map.pairs())
        throw error(concat("strided axis frequencies need equal axes: stream ", a, " has ", map.count(a),
                           " of ", map.pairs(), " pairs over ", streams, " streams"));
  }
  std::vector<std::vector<double>> per_axis(static_cast<std::size_t>(streams));
  if (kind == AxisFrequencies::per_axis)
    for (int a = 0; a < streams; ++a)
      if (map.uses(a))
        per_axis[static_cast<std::size_t>(a)] = default_frequencies(2 * map.count(a), base).theta;
  Frequencies f;
  f.theta.resize(static_cast<std::size_t>(map.pairs()));
  std::array<std::int64_t, kMaxAxes> rank{};
  for (std::int64_t j = 0; j < map.pairs(); ++j) {
    const int a = map[j];
    const std::int64_t k = rank[static_cast<std::size_t>(a)]++;
    f.theta[static_cast<std::size_t>(j)] =
        kind == AxisFrequencies::per_axis ? per_axis[static_cast<std::size_t>(a)][static_cast<std::size_t>(k)]
                                          : shared.theta[static_cast<std::size_t>(streams * k + a)];
  }
  return f;
}

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
  const std::int64_t per_frame = rows * cols;
  const std::int64_t tokens = frames * per_frame;
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
    std::int64_t last = next_ - 1;
    for (std::size_t a = 0; a < 3; ++a) {
      const auto first = g.begin() + static_cast<std::ptrdiff_t>(a * n);
      streams_[a].insert(streams_[a].end(), first, first + static_cast<std::ptrdiff_t>(n));
      last = std::max(last, *std::max_element(first, first + static_cast<std::ptrdiff_t>(n)));
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

// ---- the rotation ---------------------------------------------------------------------------------

// A Rope (spec, frequencies, exact cos/sin table or cache-free) plus an AxisMap. A table serves every
// axis: size it for the largest position of any axis.
template <class T>
class MultiAxisRope {
 public:
  using C = compute_t<T>;
  using cache_type = CosSinCache<C>;
  // Tokens per block of assembled cos/sin rows (the scratch a call allocates per thread).
  static constexpr std::int64_t kBlock = detail::RowGenerator<C>::kBlock;

  // Throws if the map does not cover rotary_dim/2 pairs.
  MultiAxisRope(Rope<T> rope, AxisMap map) : rope_(std::move(rope)), map_(std::move(map)) {
    if (map_.pairs() != rope_.rotary_dim() / 2)
      throw error(detail::concat("axis map has ", map_.pairs(), " pairs but rotary_dim/2 is ",
                                 rope_.rotary_dim() / 2));
    few_runs_ =
        map_.runs().size() * 8 <= static_cast<std::size_t>(map_.pairs());  // runs of >= 8 pairs on average
  }
  // The spec's own frequencies, a table for positions [0, max_position) of every axis.
  MultiAxisRope(const RotarySpec& spec, AxisMap map, std::int64_t max_position)
      : MultiAxisRope(Rope<T>(spec, max_position), std::move(map)) {}
  // The spec's frequencies given explicitly (checked against compute_frequencies(spec), like Rope's):
  // custom ones such as axis_frequencies go in spec.frequencies first.
  MultiAxisRope(const RotarySpec& spec, const Frequencies& f, AxisMap map, std::int64_t max_position)
      : MultiAxisRope(Rope<T>(spec, cache_type(f, 0, max_position)), std::move(map)) {}
  // Cache-free: exact cos/sin per call, any position.
  MultiAxisRope(const RotarySpec& spec, AxisMap map, OnTheFly tag)
      : MultiAxisRope(Rope<T>(spec, tag), std::move(map)) {}
  MultiAxisRope(const RotarySpec& spec, const Frequencies& f, AxisMap map, OnTheFly tag)
      : MultiAxisRope(Rope<T>(spec, f, tag), std::move(map)) {}

  // The 1-D Rope underneath: apply(mrope.rope(), x, Positions, heads) rotates text tokens (equal
  // streams) with exactly the bits a multi-axis call would give.
  const Rope<T>& rope() const noexcept { return rope_; }
  const AxisMap& axis_map() const noexcept { return map_; }
  std::int64_t head_dim() const noexcept { return rope_.head_dim(); }
  std::int64_t rotary_dim() const noexcept { return rope_.rotary_dim(); }
  Pairing pairing() const noexcept { return rope_.pairing(); }
  int streams() const noexcept { return map_.streams(); }
  bool on_the_fly() const noexcept { return rope_.on_the_fly(); }

  // The cos/sin rows (cache layout, rotary_dim values per token) of tokens [t0, t1), at most kBlock
  // of them, into out; scratch holds rotary_dim doubles. Unchecked: positions must be valid for
  // this rope (what the checked entry points verify). For custom drivers and inspection.
  void fill_rows(const AxisPositions& p, std::int64_t t0, std::int64_t t1, C* out,
                 double* scratch) const noexcept {
    ROTARY_ASSERT(t1 - t0 <= kBlock);
    if (rope_.on_the_fly()) {
      fill_exact(p, t0, t1, out, scratch);
    } else {
      fill_gathered(p, t0, t1, out);
    }
  }

 private:
  void fill_gathered(const AxisPositions& p, std::int64_t t0, std::int64_t t1, C* out) const noexcept {
    const cache_type& cache = rope_.cache();
    const std::int64_t h = map_.pairs();
    std::array<const C*, kMaxAxes> src{};
    for (std::int64_t t = t0; t < t1; ++t) {
      for (int a = 0; a < map_.streams(); ++a)
        if (map_.uses(a)) src[static_cast<std::size_t>(a)] = cache.row_at(cache.row_index(p(a, t)));
      C* row = out + (t - t0) * 2 * h;
      if (few_runs_) {  // sections: a few long copies
        for (const AxisMap::Run& run : map_.runs()) {
          const C* s = src[static_cast<std::size_t>(run.axis)];
          std::copy(s + run.begin, s + run.end, row + run.begin);
          std::copy(s + h + run.begin, s + h + run.end, row + h + run.begin);
        }
      } else {  // interleaved maps: one pick per pair beats a copy call per one-pair run
        const std::uint8_t* axis = map_.axis_of_pair().data();
        for (std::int64_t j = 0; j < h; ++j) {
          const C* s = src[axis[j]];
          row[j] = s[j];
          row[h + j] = s[h + j];
        }
      }
    }
  }

  // Per axis and token: anchor (exact reduction) at the block's first token or after a jump; step
  // (one rotation by theta_j, in double) where the axis advanced by one; keep where it repeated an
  // anchored position (the anchor again, so the same bits as recomputing it). This is 1-D
  // cache-free mode's rule with "keep" added, so equal streams reproduce its rows exactly; the
  // recurrence runs < kBlock steps before re-anchoring (drift ~1e-14, far below float's ulp).
  void fill_exact(const AxisPositions& p, std::int64_t t0, std::int64_t t1, C* out,
                  double* state) const noexcept {
    enum Mode : std::uint8_t { anchor, step, keep };
    const std::int64_t h = map_.pairs();
    double* c = state;
    double* s = state + h;
    std::array<std::int64_t, kMaxAxes> m{};
    std::array<std::int64_t, kMaxAxes> prev{};
    std::array<bool, kMaxAxes> exact{};
    std::array<Mode, kMaxAxes> mode{};
    const std::uint8_t* axis = map_.axis_of_pair().data();
    for (std::int64_t t = t0; t < t1; ++t) {
      for (int a = 0; a < map_.streams(); ++a) {
        if (!map_.uses(a)) continue;
        const auto i = static_cast<std::size_t>(a);
        m[i] = p(a, t);
        const bool first = t == t0;
        if (!first && m[i] - 1 == prev[i]) {  // m >= 0: no overflow
          mode[i] = step;
        } else if (!first && m[i] == prev[i] && exact[i]) {
          mode[i] = keep;
        } else {
          mode[i] = anchor;  // the first token, or a jump
        }
        exact[i] = mode[i] != step;
        prev[i] = m[i];
      }
      const detail::RowGenerator<C>& g = rope_.row_generator();  // the 1-D cache-free tables
      for (std::int64_t j = 0; j < h; ++j) {
        const std::size_t a = axis[static_cast<std::size_t>(j)];
        if (mode[a] == anchor) {
          g.anchor(j, m[a], c[j], s[j]);
        } else if (mode[a] == step) {
          g.advance(j, c[j], s[j]);
        }
      }
      g.store_row(c, s, out + (t - t0) * 2 * h);
    }
  }

  Rope<T> rope_;
  AxisMap map_;
  bool few_runs_ = true;
};

namespace detail {

// Streams match the map, one position per token on each, every used position >= 0 and held:
// outside(v) is "" for a position the rows hold, else why not.
template <class Outside>
std::string check_axis_positions(const AxisMap& map, const AxisPositions& p, std::int64_t tokens,
                                 const Outside& outside) {
  if (p.streams() != map.streams())
    return concat("positions have ", p.streams(), " streams but the axis map has ", map.streams());
  if (p.tokens() != tokens)
    return concat("positions have ", p.tokens(), " tokens per stream for ", tokens, " tokens");
  if (tokens == 0) return {};
  for (int a = 0; a < map.streams(); ++a) {
    if (!map.uses(a)) continue;
    if (p.is_null(a)) return concat("positions stream ", a, " is null but holds ", tokens, " tokens");
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t v = p(a, t);
      if (v < 0) return concat("positions[stream ", a, "][token ", t, "] (", v, ") must be >= 0");
      std::string m = outside(v);
      if (!m.empty()) return concat("positions[stream ", a, "][token ", t, "]: ", m);
    }
  }
  return {};
}

template <class T>
std::string check_axis_positions(const MultiAxisRope<T>& r, const AxisPositions& p, std::int64_t tokens) {
  const auto* cache = r.on_the_fly() ? nullptr : &r.rope().cache();
  return check_axis_positions(r.axis_map(), p, tokens, [cache](std::int64_t v) {
    return cache == nullptr || cache->contains(v) ? std::string() : cache->out_of_cache_message(v);
  });
}

// The caller's position arrays a call over `tokens` tokens reads, into out[0, n), n returned: one
// extent per stream the map uses (streams of one planar or token-major array each cover their part of
// it; separate arrays stay apart, so memory between them is never claimed), named by stream.
static_assert(static_cast<std::size_t>(kMaxAxes) + 2 <= kSourceReads,
              "ReadExtents holds every position stream and a caller's cos and sin tables");
inline std::size_t axis_positions_reads(const AxisMap& map, const AxisPositions& p, std::int64_t tokens,
                                        ReadExtents& out) noexcept {
  static constexpr std::array<const char*, kMaxAxes> kNames = {
      "positions stream 0", "positions stream 1", "positions stream 2", "positions stream 3",
      "positions stream 4", "positions stream 5", "positions stream 6", "positions stream 7"};
  const std::int64_t n_tokens = std::min(tokens, p.tokens());  // equal once check() passed
  std::size_t n = 0;
  if (n_tokens <= 0) return n;
  const int streams = std::min(map.streams(), p.streams());
  for (int a = 0; a < streams; ++a) {
    if (!map.uses(a) || p.is_null(a)) continue;
    // the constructors checked that the span fits PTRDIFF_MAX bytes: no wrap-around
    const auto lo = reinterpret_cast<std::uintptr_t>(p.data(a));
    const auto last = static_cast<std::uintptr_t>(n_tokens - 1) * static_cast<std::uintptr_t>(p.token_stride());
    out[n++] = ReadExtent{kNames[static_cast<std::size_t>(a)], Extent{lo, lo + (last + 1) * p.element_size()}};
  }
  return n;
}

// The driver's row source of a multi-axis call: each block's rows gathered from the table, or
// exact (MultiAxisRope::fill_rows).
template <class T>
struct AxisRows {
  using C = compute_t<T>;
  static constexpr bool kTable = false;
  static constexpr std::int64_t kBlock = MultiAxisRope<T>::kBlock;
  using Scratch = std::vector<double>;
  const MultiAxisRope<T>* rope;
  const AxisPositions* positions;
  std::string check(std::int64_t tokens, bool /*fused*/) const {
    return check_axis_positions(*rope, *positions, tokens);
  }
  ReadExtents reads(std::int64_t tokens) const noexcept {
    ReadExtents r{};
    axis_positions_reads(rope->axis_map(), *positions, tokens, r);
    return r;
  }
  Scratch scratch() const { return Scratch(static_cast<std::size_t>(rope->rotary_dim())); }
  static constexpr bool separate_key_rows() noexcept { return false; }
  void fill(std::int64_t from, std::int64_t /*t0*/, std::int64_t t1, C* rows, C* /*key_rows*/,
            Scratch& scratch) const noexcept {
    rope->fill_rows(*positions, from, t1, rows, scratch.data());
  }
};

}  // namespace detail

// A MultiAxisRope is a rotator (apply.hpp): every entry point takes it, with AxisPositions.
template <class T>
struct rotator_traits<MultiAxisRope<T>> {
  using value_type = T;
  using positions_type = AxisPositions;
  template <class F>
  static void with_rows(const MultiAxisRope<T>& r, const AxisPositions& p, Direction /*dir*/, F&& f) {
    f(detail::AxisRows<T>{&r, &p});
  }
};

// Multi-axis RoPE over a caller's cos/sin table (table.hpp): pair j takes its cos/sin from the table
// row of the position of stream map.axis_of_pair()[j], as MultiAxisRope does from its own table
// (M-RoPE engines that hold one cos/sin table indexed by position). E as for TableRope: widened
// exactly, never narrowed. The table must outlive the calls.
template <class T, class E = compute_t<T>>
class TableMultiAxisRope {
  static_assert(sizeof(E) <= sizeof(compute_t<T>),
                "the cos/sin table is wider than the compute type: rotary never narrows it silently");

 public:
  TableMultiAxisRope(std::int64_t head_dim, Pairing pairing, AxisMap map, const CosSinTableView<E>& table)
      : rope_(head_dim, 2 * map.pairs(), pairing, table), map_(std::move(map)) {}

  std::int64_t head_dim() const noexcept { return rope_.head_dim(); }
  std::int64_t rotary_dim() const noexcept { return rope_.rotary_dim(); }
  Pairing pairing() const noexcept { return rope_.pairing(); }
  const AxisMap& axis_map() const noexcept { return map_; }
  const CosSinTableView<E>& table() const noexcept { return rope_.table(); }

 private:
  TableRope<T, E> rope_;  // the shape checks and the table
  AxisMap map_;
};

namespace detail {

// Each block's rows gathered pair by pair from the caller's table, widened to the compute type.
template <class T, class E>
struct TableAxisRows {
  using C = compute_t<T>;
  static constexpr bool kTable = false;
  static constexpr std::int64_t kBlock = 64;
  struct Scratch {};
  const TableMultiAxisRope<T, E>* rope;
  const AxisPositions* positions;
  std::string check(std::int64_t tokens, bool /*fused*/) const {
    const CosSinTableView<E>& tab = rope->table();
    return check_axis_positions(rope->axis_map(), *positions, tokens, [&tab](std::int64_t v) {
      return v >= tab.first_position() && v - tab.first_position() < tab.rows()
                 ? std::string()
                 : concat("position ", v, " is outside the table [", tab.first_position(), ", ",
                          tab.first_position() + tab.rows(), ")");
    });
  }
  // The position streams and the caller's cos and sin rows (as table_reads does for a TableRope).
  ReadExtents reads(std::int64_t tokens) const noexcept {
    ReadExtents r{};
    std::size_t n = axis_positions_reads(rope->axis_map(), *positions, tokens, r);
    const CosSinTableView<E>& tab = rope->table();
    const auto rows = [&tab](const E* p) {
      return tab.rows() > 0 ? StridedRows(p, tab.half(), {{"row", tab.rows(), tab.row_stride()}}).extent() : Extent{};
    };
    r[n++] = ReadExtent{"the cos table", rows(tab.cos())};
    r[n] = ReadExtent{"the sin table", rows(tab.sin())};
    return r;
  }
  static Scratch scratch() noexcept { return {}; }
  static constexpr bool separate_key_rows() noexcept { return false; }
  void fill(std::int64_t from, std::int64_t t0, std::int64_t t1, C* rows, C* /*key_rows*/,
            Scratch& /*scratch*/) const noexcept {
    const CosSinTableView<E>& tab = rope->table();
    const std::int64_t h = tab.half();
    const std::uint8_t* axis = rope->axis_map().axis_of_pair().data();
    for (std::int64_t t = t0; t < t1; ++t) {
      C* row = rows + (t - from) * 2 * h;
      for (std::int64_t j = 0; j < h; ++j) {
        const std::int64_t r = (*positions)(axis[j], t) - tab.first_position();
        ROTARY_ASSERT(r >= 0 && r < tab.rows());
        row[j] = GatheredRows<C, E>::widen(tab.cos()[r * tab.row_stride() + j]);
        row[h + j] = GatheredRows<C, E>::widen(tab.sin()[r * tab.row_stride() + j]);
      }
    }
  }
};

}  // namespace detail

template <class T, class E>
struct rotator_traits<TableMultiAxisRope<T, E>> {
  using value_type = T;
  using positions_type = AxisPositions;
  template <class F>
  static void with_rows(const TableMultiAxisRope<T, E>& r, const AxisPositions& p, Direction /*dir*/, F&& f) {
    f(detail::TableAxisRows<T, E>{&r, &p});
  }
};

}  // namespace rotary

#endif  // ROTARY_MULTI_AXIS_HPP
