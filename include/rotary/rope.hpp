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

  // The RoPE `spec` defines, with a cache for positions [0, max_position).
  Rope(const RotarySpec& spec, std::int64_t max_position)
      : Rope(spec, cache_type(compute_frequencies(spec), 0, max_position)) {}

  // Cache-free: cos/sin computed per call from the spec's frequencies (or given ones), exact to the
  // output precision at any position; for contexts where a table is too big (1M positions x
  // rotary_dim 128 is 512 MB in f32). The attention factor is folded in, as a cache would.
  Rope(const RotarySpec& spec, OnTheFly tag) : Rope(spec, compute_frequencies(spec), tag) {}
  Rope(const RotarySpec& spec, const Frequencies& f, OnTheFly)
      : Rope(spec, cache_type(f, 0, 0)) {
    on_the_fly_ = true;
    generator_ = detail::RowGenerator<compute_t<T>>(f.theta, f.attention_factor);
  }

  // A RoPE with a cache built elsewhere, e.g. from scaled frequencies or for listed positions.
  // The cache must cover the spec's rotary_dim. Its theta need not be what `spec` alone gives.
  Rope(const RotarySpec& spec, cache_type cache) : spec_(spec), cache_(std::move(cache)) {
    spec_.validate();
    if (cache_.rotary_dim() != spec_.effective_rotary_dim())
      throw error(detail::concat("cache rotary_dim (", cache_.rotary_dim(), ") != spec rotary_dim (",
                                 spec_.effective_rotary_dim(), ")"));
  }

  const RotarySpec& spec() const noexcept { return spec_; }
  const cache_type& cache() const noexcept { return cache_; }
  std::int64_t head_dim() const noexcept { return spec_.head_dim; }
  std::int64_t rotary_dim() const noexcept { return cache_.rotary_dim(); }
  Pairing pairing() const noexcept { return spec_.pairing; }
  // True for a cache-free Rope: cache() then holds the frequencies but no rows.
  bool on_the_fly() const noexcept { return on_the_fly_; }
  const detail::RowGenerator<compute_t<T>>& row_generator() const noexcept { return generator_; }

 private:
  RotarySpec spec_;
  cache_type cache_;
  bool on_the_fly_ = false;
  detail::RowGenerator<compute_t<T>> generator_;
};

}  // namespace rotary

#endif  // ROTARY_ROPE_HPP
