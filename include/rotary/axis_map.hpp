// rotary — which position stream drives each rotated pair: AxisMap, its factories (M-RoPE,
// interleaved M-RoPE, N-D axial) and the frequencies of a map (axis_frequencies). The mechanism
// and the models' conventions are described at the top of multi_axis.hpp.
#ifndef ROTARY_AXIS_MAP_HPP
#define ROTARY_AXIS_MAP_HPP

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "detail/format.hpp"
#include "frequencies.hpp"
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

}  // namespace rotary

#endif  // ROTARY_AXIS_MAP_HPP
