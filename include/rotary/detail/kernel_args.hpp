// What every kernel receives: the whole call, already validated (or asserted) by the driver.
#ifndef ROTARY_DETAIL_KERNEL_ARGS_HPP
#define ROTARY_DETAIL_KERNEL_ARGS_HPP

#include "guard.hpp"

#include <cstddef>
#include <cstdint>

#include "../cache.hpp"
#include "../positions.hpp"
#include "../types.hpp"

namespace rotary::detail {

// Element strides; a head row is head_dim contiguous elements at
//   in + t * in_token_stride + h * in_head_stride.
template <class T>
struct KernelArgs {
  const T* in = nullptr;
  T* out = nullptr;
  std::ptrdiff_t in_token_stride = 0;
  std::ptrdiff_t in_head_stride = 0;
  std::ptrdiff_t out_token_stride = 0;
  std::ptrdiff_t out_head_stride = 0;
  std::int64_t tokens = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;
  Pairing pairing = Pairing::half_split;
  bool inverse = false;
  const CosSinCache<T>* cache = nullptr;
  Positions positions = Positions::contiguous();

  // The cos/sin row of token t: rotary_dim/2 cos values, then rotary_dim/2 sin values.
  const T* cos_sin_row(std::int64_t t) const noexcept {
    return cache->row_at(cache->row_index(positions[t]));
  }
  const T* in_row(std::int64_t t, std::int64_t h) const noexcept {
    return in + t * in_token_stride + h * in_head_stride;
  }
  T* out_row(std::int64_t t, std::int64_t h) const noexcept {
    return out + t * out_token_stride + h * out_head_stride;
  }
};

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_KERNEL_ARGS_HPP
