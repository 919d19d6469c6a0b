// rotary — exact cos/sin tables in the layout the kernels read.
//
// Layout: one row per position, row = [cos_0 .. cos_{h-1}, sin_0 .. sin_{h-1}], h = rotary_dim/2,
// rows contiguous (row stride = rotary_dim elements), the table 64-byte aligned. That is
//   bytes per position = rotary_dim * sizeof(T)     (512 B for rotary_dim 128 in float)
// and the same table serves both pairings: a token's row is read once and reused for every head.
//
// Exactness: the angle m*theta_j is reduced in double-double turns (detail/exact_angle.hpp), so each
// float entry is the correctly rounded cos/sin of the exact angle at any int64 position. Double
// entries are within about 2 ulp up to |m| ~ 2^53; beyond, the ~106-bit theta/(2 pi) bounds them by
// about |m| * 2^-100 (5e-14 at INT64_MAX - 1; tests/numerics/test_edge_integers.cpp). Float-angle
// pipelines (HF, ggml: float(m)*float(theta)) are off in the first digit by position 2^24.
#ifndef ROTARY_CACHE_HPP
#define ROTARY_CACHE_HPP

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.hpp"
#include "detail/aligned_buffer.hpp"
#include "detail/exact_angle.hpp"
#include "detail/format.hpp"
#include "frequencies.hpp"
#include "types.hpp"

namespace rotary {

// Whether cos and sin carry the attention factor of the frequencies (HF folds it in: logits scale by
// its square) or leave it to the caller (who may scale q, or the logits, instead).
enum class AttentionFactor { fold, separate };

template <class T>
class CosSinCache {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "CosSinCache stores float or double");

 public:
  CosSinCache() = default;

  // Rows for positions [begin, end).
  CosSinCache(const Frequencies& f, std::int64_t begin, std::int64_t end,
              AttentionFactor factor = AttentionFactor::fold)
      : theta_(f.theta), attention_factor_(f.attention_factor), folded_(factor == AttentionFactor::fold),
        begin_(begin), end_(end) {
    using detail::concat;
    f.validate();
    if (begin < 0) throw error(concat("cache begin position (", begin, ") must be >= 0"));
    if (end < begin)
      throw error(concat("cache end position (", end, ") must be >= begin position (", begin, ")"));
    check_size(end - begin);
    fill_rows(end - begin, [begin](std::int64_t r) { return begin + r; });
  }

  // Rows for positions [0, end).
  CosSinCache(const Frequencies& f, std::int64_t end) : CosSinCache(f, 0, end) {}

  // Rows for an explicit set of positions (any order; duplicates are stored once), each in
  // [0, INT64_MAX). Lookups then search the sorted list, so apply() accepts exactly these positions.
  static CosSinCache for_positions(const Frequencies& f, std::vector<std::int64_t> positions,
                                   AttentionFactor factor = AttentionFactor::fold) {
    using detail::concat;
    f.validate();
    std::sort(positions.begin(), positions.end());
    positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
    if (!positions.empty() && positions.front() < 0)
      throw error(concat("cache position (", positions.front(), ") must be >= 0"));
    // end_position() = last + 1 must exist (a range cache cannot hold INT64_MAX either).
    if (!positions.empty() && positions.back() == std::numeric_limits<std::int64_t>::max())
      throw error(concat("cache position (", positions.back(), ") must be < ", positions.back(),
                         " (INT64_MAX): end positions are exclusive"));
    CosSinCache c;
    c.theta_ = f.theta;
    c.attention_factor_ = f.attention_factor;
    c.folded_ = factor == AttentionFactor::fold;
    c.listed_mode_ = true;
    c.listed_ = std::move(positions);
    c.begin_ = c.listed_.empty() ? 0 : c.listed_.front();
    c.end_ = c.listed_.empty() ? 0 : c.listed_.back() + 1;
    const auto n = static_cast<std::int64_t>(c.listed_.size());
    c.check_size(n);
    c.fill_rows(n, [&c](std::int64_t r) { return c.listed_[static_cast<std::size_t>(r)]; });
    return c;
  }

  std::int64_t rotary_dim() const noexcept { return 2 * pairs(); }
  std::int64_t pairs() const noexcept { return static_cast<std::int64_t>(theta_.size()); }
  // Number of rows (positions) held.
  std::int64_t size() const noexcept { return rows_; }
  bool empty() const noexcept { return rows_ == 0; }
  // Held positions lie in [begin_position(), end_position()); for a listed cache not all of them.
  std::int64_t begin_position() const noexcept { return begin_; }
  std::int64_t end_position() const noexcept { return end_; }
  bool is_range() const noexcept { return !listed_mode_; }
  const std::vector<std::int64_t>& listed_positions() const noexcept { return listed_; }
  std::size_t bytes_per_position() const noexcept {
    return static_cast<std::size_t>(rotary_dim()) * sizeof(T);
  }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(rows_) * bytes_per_position(); }

  const std::vector<double>& theta() const noexcept { return theta_; }
  double attention_factor() const noexcept { return attention_factor_; }
  bool attention_factor_folded() const noexcept { return folded_; }

  // Row index of `position`, or -1 if the cache does not hold it.
  std::int64_t row_index(std::int64_t position) const noexcept {
    if (position < begin_ || position >= end_) return -1;
    if (!listed_mode_) return position - begin_;
    const auto it = std::lower_bound(listed_.begin(), listed_.end(), position);
    return (it != listed_.end() && *it == position) ? static_cast<std::int64_t>(it - listed_.begin())
                                                     : -1;
  }
  bool contains(std::int64_t position) const noexcept { return row_index(position) >= 0; }

  // The row of `position`: pairs() cos values, then pairs() sin values. Throws if not held.
  const T* row(std::int64_t position) const {
    const std::int64_t r = row_index(position);
    if (r < 0) throw error(out_of_cache_message(position));
    return row_at(r);
  }
  const T* cos(std::int64_t position) const { return row(position); }
  const T* sin(std::int64_t position) const { return row(position) + pairs(); }

  // Unchecked access by row index.
  const T* row_at(std::int64_t r) const noexcept {
    ROTARY_ASSERT(r >= 0 && r < rows_);
    return table_.data() + r * rotary_dim();
  }
  const T* data() const noexcept { return table_.data(); }

  std::string out_of_cache_message(std::int64_t position) const {
    if (!listed_mode_)
      return detail::concat("position (", position, ") is outside the cache [", begin_, ", ", end_, ")");
    return detail::concat("position (", position, ") is not one of the cache's ", listed_.size(),
                          " listed positions");
  }

 private:
  // A table past 2^47 bytes (128 TiB, a whole 4-level-paged x86-64 or AArch64 address space) is
  // refused before anything is allocated; a smaller one the allocator cannot provide throws
  // rotary::error from fill_rows, not std::bad_alloc.
  static constexpr std::int64_t kMaxTableBytes = std::int64_t{1} << 47;

  void check_size(std::int64_t rows) const {
    const std::int64_t per_row = rotary_dim();
    if (rows > 0 && per_row > kMaxTableBytes / static_cast<std::int64_t>(sizeof(T)) / rows)
      throw error(detail::concat("cache of ", rows, " positions x rotary_dim ", per_row,
                                 " does not fit in memory: it needs more than 2^47 bytes (128 TiB)"));
  }

  template <class PositionOf>
  void fill_rows(std::int64_t rows, PositionOf position_of) {
    detail::check_exact_angle();
    const std::int64_t h = pairs();
    try {
      table_.assign(static_cast<std::size_t>(rows * 2 * h), T(0));
    } catch (const std::bad_alloc&) {
      throw error(detail::concat("cache of ", rows, " positions x rotary_dim ", 2 * h, " (",
                                 rows * 2 * h * static_cast<std::int64_t>(sizeof(T)), " bytes) could not be allocated"));
    }
    rows_ = rows;
    std::vector<detail::Turns> turns(theta_.size());
    for (std::size_t j = 0; j < theta_.size(); ++j) turns[j] = detail::to_turns(theta_[j]);
    const double scale = folded_ ? attention_factor_ : 1.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t m = position_of(r);
      T* out = table_.data() + r * 2 * h;
      for (std::int64_t j = 0; j < h; ++j) {
        double s = 0.0;
        double c = 0.0;
        detail::exact_sincos(m, turns[static_cast<std::size_t>(j)], s, c);
        out[j] = static_cast<T>(c * scale);
        out[h + j] = static_cast<T>(s * scale);
      }
    }
  }

  std::vector<double> theta_;
  double attention_factor_ = 1.0;
  bool folded_ = true;
  std::int64_t begin_ = 0;
  std::int64_t end_ = 0;
  std::int64_t rows_ = 0;
  bool listed_mode_ = false;
  std::vector<std::int64_t> listed_;
  detail::AlignedVector<T> table_;
};

}  // namespace rotary

#endif  // ROTARY_CACHE_HPP
