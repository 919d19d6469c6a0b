// rotary — Rope<T>: one RoPE (spec + exact cos/sin cache), the object every apply() takes.
#ifndef ROTARY_ROPE_HPP
#define ROTARY_ROPE_HPP

#include <cstdint>
#include <utility>

#include "cache.hpp"
#include "config.hpp"
#include "frequencies.hpp"
#include "types.hpp"

namespace rotary {

template <class T>
class Rope {
 public:
  // The RoPE `spec` defines, with a cache for positions [0, max_position).
  Rope(const RotarySpec& spec, std::int64_t max_position)
      : Rope(spec, CosSinCache<T>(compute_frequencies(spec), 0, max_position)) {}

  // A RoPE with a cache built elsewhere, e.g. from scaled frequencies or for listed positions.
  // The cache must cover the spec's rotary_dim. Its theta need not be what `spec` alone gives.
  Rope(const RotarySpec& spec, CosSinCache<T> cache) : spec_(spec), cache_(std::move(cache)) {
    spec_.validate();
    if (cache_.rotary_dim() != spec_.effective_rotary_dim())
      throw error(detail::concat("cache rotary_dim (", cache_.rotary_dim(), ") != spec rotary_dim (",
                                 spec_.effective_rotary_dim(), ")"));
  }

  const RotarySpec& spec() const noexcept { return spec_; }
  const CosSinCache<T>& cache() const noexcept { return cache_; }
  std::int64_t head_dim() const noexcept { return spec_.head_dim; }
  std::int64_t rotary_dim() const noexcept { return cache_.rotary_dim(); }
  Pairing pairing() const noexcept { return spec_.pairing; }

 private:
  RotarySpec spec_;
  CosSinCache<T> cache_;
};

}  // namespace rotary

#endif  // ROTARY_ROPE_HPP
