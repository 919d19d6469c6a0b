// What every kernel receives: the whole call, already validated (or asserted) by the driver.
#ifndef ROTARY_DETAIL_KERNEL_ARGS_HPP
#define ROTARY_DETAIL_KERNEL_ARGS_HPP

#include "../guard.hpp"

#include <cstddef>
#include <cstdint>

#include "../../cache.hpp"
#include "../../config.hpp"
#include "../../dtype.hpp"
#include "../../positions.hpp"
#include "../../types.hpp"

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

// Token t's rotary_dim/2 cos values (at c) and rotary_dim/2 sin values (at s).
template <class C>
struct CosSin {
  const C* c;
  const C* s;
};

// Where a kernel reads token t's cos and sin values: the one row source every kernel sees, whatever
// produced the rows.
//   a table indexed by position (a CosSinCache, or a caller's table): row r = positions[t] - first
//     has its cos values at base + r * stride and its sin values at sin_base + r * stride; a cache of
//     listed positions (CosSinCache::for_positions) is looked up through `listed` instead;
//   rows made for a block of tokens (cache-free, multi-axis, xPos, re-rotation): [cos | sin] rows,
//     positions contiguous from 0 and first = the block's first token, so r = t - first.
template <class C>
struct RowSource {
  const C* base = nullptr;      // cos of row 0
  const C* sin_base = nullptr;  // sin of row 0
  std::ptrdiff_t stride = 0;
  std::int64_t first = 0;
  const CosSinCache<C>* listed = nullptr;
  Positions positions = Positions::contiguous();

  // The rows of a cache, looked up by these positions.
  static RowSource table(const CosSinCache<C>& cache, const Positions& p) noexcept {
    RowSource s;
    s.base = cache.data();
    s.sin_base = cache.empty() ? nullptr : cache.data() + cache.pairs();  // no arithmetic on null
    s.stride = cache.rotary_dim();
    s.first = cache.begin_position();
    s.listed = cache.is_range() ? nullptr : &cache;
    s.positions = p;
    return s;
  }
  // [cos | sin] rows of rotary_dim values, consecutive tokens from token0 on.
  static RowSource block(const C* rows, std::int64_t rotary_dim, std::int64_t token0) noexcept {
    RowSource s;
    s.base = rows;
    s.sin_base = rows == nullptr ? nullptr : rows + rotary_dim / 2;  // no arithmetic on null (no rows)
    s.stride = rotary_dim;
    s.first = token0;
    return s;
  }

  CosSin<C> row(std::int64_t t) const noexcept {
    const std::int64_t p = positions[t];
    const std::int64_t r = listed != nullptr ? listed->row_index(p) : p - first;
    ROTARY_ASSERT(r >= 0);
    return {base + r * stride, sin_base + r * stride};
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
  RowSource<C> rows;  // set by the driver just before the kernels run

  std::int64_t total_heads() const noexcept { return q.heads + k.heads; }

  // The cos and sin values of token t (rotary_dim/2 each).
  CosSin<C> cos_sin_row(std::int64_t t) const noexcept { return rows.row(t); }
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
