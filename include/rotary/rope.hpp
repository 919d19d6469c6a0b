// rotary — Rope<T>: one RoPE (spec + exact cos/sin cache), the object every apply() takes.
#ifndef ROTARY_ROPE_HPP
#define ROTARY_ROPE_HPP

#include <cstdint>
#include <utility>

#include "cache.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "frequencies.hpp"
#include "types.hpp"

namespace rotary {

// T is the storage type of the vectors (f32, f64, f16, bf16); the cache holds compute_t<T> (double
// for f64, float otherwise), so one CosSinCache<float> can serve f32, f16 and bf16 ropes alike.
template <class T>
class Rope {
  static_assert(is_storage_type_v<T>, "rotary stores f32, f64, f16 (Eigen::half) or bf16 (Eigen::bfloat16)");

 public:
  using cache_type = CosSinCache<compute_t<T>>;

  // The RoPE `spec` defines, with a cache for positions [0, max_position).
  Rope(const RotarySpec& spec, std::int64_t max_position)
      : Rope(spec, cache_type(compute_frequencies(spec), 0, max_position)) {}

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

 private:
  RotarySpec spec_;
  cache_type cache_;
};

}  // namespace rotary

#endif  // ROTARY_ROPE_HPP
