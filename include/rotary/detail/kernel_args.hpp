// What every kernel receives: the whole call, already validated (or asserted) by the driver.
#ifndef ROTARY_DETAIL_KERNEL_ARGS_HPP
#define ROTARY_DETAIL_KERNEL_ARGS_HPP

#include "guard.hpp"

#include <cstddef>
#include <cstdint>

#include "../cache.hpp"
#include "../config.hpp"
#include "../dtype.hpp"
#include "../positions.hpp"
#include "../types.hpp"
#include "rows_on_the_fly.hpp"

namespace rotary::detail {

// One tensor of a call (the queries, or the keys). Element strides; head row (t, h) is head_dim
// contiguous elements at in + t * in_token_stride + h * in_head_stride. heads == 0: absent.
template <class T>
struct StreamArgs {
  const T* in = nullptr;
  T* out = nullptr;
  std::ptrdiff_t in_token_stride = 0;
  std::ptrdiff_t in_head_stride = 0;
  std::ptrdiff_t out_token_stride = 0;
  std::ptrdiff_t out_head_stride = 0;
  std::int64_t heads = 0;

  const T* in_row(std::int64_t t, std::int64_t h) const noexcept {
    return in + t * in_token_stride + h * in_head_stride;
  }
  T* out_row(std::int64_t t, std::int64_t h) const noexcept {
    return out + t * out_token_stride + h * out_head_stride;
  }
};

// T is the storage type; C = compute_t<T> the type of cos/sin and of the arithmetic.
template <class T>
struct KernelArgs {
  using C = compute_t<T>;
  StreamArgs<T> q;  // always present
  StreamArgs<T> k;  // fused key heads, rotated with the same cos/sin right after q's (optional)
  std::int64_t tokens = 0;
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;
  Pairing pairing = Pairing::half_split;
  bool inverse = false;
  // cos/sin rows: looked up in `cache` by position, unless `rows` is set: then token t's row is
  // rows + (t - rows_token0) * rotary_dim (rows computed on the fly for a block of tokens).
  const CosSinCache<C>* cache = nullptr;
  Positions positions = Positions::contiguous();
  const C* rows = nullptr;
  std::int64_t rows_token0 = 0;
  // Cache-free calls: the driver fills `rows` block by block from this generator; cache is null.
  const RowGenerator<C>* generator = nullptr;

  std::int64_t total_heads() const noexcept { return q.heads + k.heads; }

  // The cos/sin row of token t: rotary_dim/2 cos values, then rotary_dim/2 sin values.
  const C* cos_sin_row(std::int64_t t) const noexcept {
    if (rows != nullptr) return rows + (t - rows_token0) * rotary_dim;
    ROTARY_ASSERT(cache != nullptr);  // cache-free calls reach kernels only with rows filled
    return cache->row_at(cache->row_index(positions[t]));
  }
};

// Head h of token t over q's heads then k's: h < q.heads is q's head h, else k's head h - q.heads.
// Kernels copy this into locals so that their stores never force reloads of the KernelArgs.
template <class T>
struct Rows {
  StreamArgs<T> q;
  StreamArgs<T> k;
  explicit Rows(const KernelArgs<T>& a) noexcept : q(a.q), k(a.k) {}
  const T* in_row(std::int64_t t, std::int64_t h) const noexcept {
    return h < q.heads ? q.in_row(t, h) : k.in_row(t, h - q.heads);
  }
  T* out_row(std::int64_t t, std::int64_t h) const noexcept {
    return h < q.heads ? q.out_row(t, h) : k.out_row(t, h - q.heads);
  }
};

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_KERNEL_ARGS_HPP
