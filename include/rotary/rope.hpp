// rotary — Rope<T>: one RoPE (spec + exact cos/sin cache), the object every apply() takes.
#ifndef ROTARY_ROPE_HPP
#define ROTARY_ROPE_HPP

#include <cstdint>
#include <utility>

#include "cache.hpp"
#include "config.hpp"
#include "detail/rows_on_the_fly.hpp"
#include "dtype.hpp"
#include "frequencies.hpp"
#include "types.hpp"

namespace rotary {

// T is the storage type of the vectors (f32, f64, f16, bf16); the cache holds compute_t<T> (double
// for f64, float otherwise), so one CosSinCache<float> can serve f32, f16 and bf16 ropes alike.
// Tag: build a Rope without a cos/sin table (cache-free mode; see detail/rows_on_the_fly.hpp).
struct OnTheFly {};

template <class T>
class Rope {
  static_assert(is_storage_type_v<T>, "rotary stores f32, f64, f16 (Eigen::half) or bf16 (Eigen::bfloat16)");

 public:
  using cache_type = CosSinCache<compute_t<T>>;

  // Every constructor gives a Rope whose frequencies are compute_frequencies(spec()), bit for bit:
  // scaled or custom frequencies travel inside the spec (RotarySpec::frequencies; resolve() fills it),
  // never beside it, so no combination of arguments can disagree with itself. A table or theta that
  // differs from the spec's throws.

  // The RoPE `spec` defines, with a cache for positions [0, max_position).
  Rope(const RotarySpec& spec, std::int64_t max_position)
      : Rope(spec, cache_type(compute_frequencies(spec), 0, checked_max_position(max_position))) {}

  // Cache-free: cos/sin computed per call from the spec's frequencies, exact to the output precision
  // at any position; for contexts where a table is too big (1M positions x rotary_dim 128 is 512 MB
  // in f32). The attention factor is folded in, as a cache would.
  Rope(const RotarySpec& spec, OnTheFly tag) : Rope(spec, compute_frequencies(spec), tag) {}
  // The same, given the spec's frequencies (checked: they must be compute_frequencies(spec)).
  Rope(const RotarySpec& spec, const Frequencies& f, OnTheFly)
      : Rope(spec, cache_type(f, 0, 0), "frequencies") {
    on_the_fly_ = true;
    generator_ = detail::RowGenerator<compute_t<T>>(f.theta, f.attention_factor);
  }

  // A RoPE with a cache built elsewhere: listed positions (CosSinCache::for_positions), another
  // range, the attention factor kept separate, or a table shared between Ropes. Its theta and
  // attention factor must be the spec's (compute_frequencies(spec)), bit for bit.
  Rope(const RotarySpec& spec, cache_type cache) : Rope(spec, std::move(cache), "cache") {}

  const RotarySpec& spec() const noexcept { return spec_; }
  const cache_type& cache() const noexcept { return cache_; }
  std::int64_t head_dim() const noexcept { return spec_.head_dim; }
  std::int64_t rotary_dim() const noexcept { return cache_.rotary_dim(); }
  Pairing pairing() const noexcept { return spec_.pairing; }
  // True for a cache-free Rope: cache() then holds the frequencies but no rows.
  bool on_the_fly() const noexcept { return on_the_fly_; }
  const detail::RowGenerator<compute_t<T>>& row_generator() const noexcept { return generator_; }

 private:
  Rope(const RotarySpec& spec, cache_type cache, const char* what) : spec_(spec), cache_(std::move(cache)) {
    detail::check_frequencies_match(spec_, cache_.theta(), cache_.attention_factor(), what);
  }

  static std::int64_t checked_max_position(std::int64_t max_position) {
    if (max_position < 0) throw error(detail::concat("max_position (", max_position, ") must be >= 0"));
    return max_position;
  }

  RotarySpec spec_;
  cache_type cache_;
  bool on_the_fly_ = false;
  detail::RowGenerator<compute_t<T>> generator_;
};

}  // namespace rotary

#endif  // ROTARY_ROPE_HPP
