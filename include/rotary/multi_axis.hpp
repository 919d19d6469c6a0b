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
//
// This header holds the two rotators (MultiAxisRope, TableMultiAxisRope), their row sources and
// rotator_traits; it includes axis_map.hpp and axis_positions.hpp, so it gives the whole API above.
#ifndef ROTARY_MULTI_AXIS_HPP
#define ROTARY_MULTI_AXIS_HPP

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "apply.hpp"
#include "axis_map.hpp"       // IWYU pragma: export
#include "axis_positions.hpp" // IWYU pragma: export
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

// The caller's position arrays a call over `tokens` tokens reads, added to out: one extent per stream the map
// uses (streams of one planar or token-major array each cover their part of it; separate arrays stay apart,
// so memory between them is never claimed), named by stream.
static_assert(static_cast<std::size_t>(kMaxAxes) + 2 <= kSourceReads,
              "ReadExtents holds every position stream and a caller's cos and sin tables");
inline void axis_positions_reads(const AxisMap& map, const AxisPositions& p, std::int64_t tokens,
                                 ReadExtents& out) noexcept {
  static constexpr std::array<const char*, kMaxAxes> kNames = {
      "positions stream 0", "positions stream 1", "positions stream 2", "positions stream 3",
      "positions stream 4", "positions stream 5", "positions stream 6", "positions stream 7"};
  const std::int64_t n_tokens = std::min(tokens, p.tokens());  // equal once check() passed
  if (n_tokens <= 0) return;
  const int streams = std::min(map.streams(), p.streams());
  for (int a = 0; a < streams; ++a) {
    if (!map.uses(a) || p.is_null(a)) continue;
    // the constructors checked that the span fits PTRDIFF_MAX bytes: no wrap-around
    const auto lo = reinterpret_cast<std::uintptr_t>(p.data(a));
    const auto last = static_cast<std::uintptr_t>(n_tokens - 1) * static_cast<std::uintptr_t>(p.token_stride());
    out.add(kNames[static_cast<std::size_t>(a)], Extent{lo, lo + (last + 1) * p.element_size()});
  }
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
    ReadExtents r;
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
    ReadExtents r;
    axis_positions_reads(rope->axis_map(), *positions, tokens, r);
    const CosSinTableView<E>& tab = rope->table();
    const auto rows = [&tab](const E* p) {
      return tab.rows() > 0 ? StridedRows(p, tab.half(), {{"row", tab.rows(), tab.row_stride()}}).extent() : Extent{};
    };
    r.add("the cos table", rows(tab.cos()));
    r.add("the sin table", rows(tab.sin()));
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