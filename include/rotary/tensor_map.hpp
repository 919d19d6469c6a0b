// rotary — Eigen::TensorMap overloads of the batched entry points (layouts.hpp). Separate from the
// umbrella header so that only users who want them pull in Eigen's unsupported Tensor module.
//
// A row-major rank-4 TensorMap's dimensions follow the layout: bshd (batch, seq, heads, head_dim),
// bhsd (batch, heads, seq, head_dim), sbhd (seq, batch, heads, head_dim). thd is rank 3:
// (total_tokens, heads, head_dim), with apply_varlen.
#ifndef ROTARY_TENSOR_MAP_HPP
#define ROTARY_TENSOR_MAP_HPP

#include <unsupported/Eigen/CXX11/Tensor>

#include "layouts.hpp"

namespace rotary {

template <class T>
using TensorMap4 = Eigen::TensorMap<Eigen::Tensor<T, 4, Eigen::RowMajor>>;
template <class T>
using TensorMap3 = Eigen::TensorMap<Eigen::Tensor<T, 3, Eigen::RowMajor>>;

// The shape a dense row-major tensor of `layout` has, from its dimensions.
template <class Dims>
BatchShape shape_of(Layout layout, const Dims& d) {
  switch (layout) {
    case Layout::bshd: return {d[0], d[1], d[2], d[3]};
    case Layout::bhsd: return {d[0], d[2], d[1], d[3]};
    case Layout::sbhd: return {d[1], d[0], d[2], d[3]};
    default: throw error("layout thd is rank 3: use apply_varlen with a TensorMap3");
  }
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_batch(const R& rope, Layout layout, TensorMap4<detail::identity_t<T>> x,
                 const detail::batch_positions_t<R>& positions, Direction dir = Direction::forward,
                 const ParallelFor& parallel = {}) {
  apply_batch(rope, layout, x.data(), shape_of(layout, x.dimensions()), positions, dir, parallel);
}

// Fused q+k in place; k may be an empty map (no key, e.g. TensorMap4<T>(nullptr, 0, 0, 0, 0)).
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_batch(const R& rope, Layout layout, TensorMap4<detail::identity_t<T>> q,
                    TensorMap4<detail::identity_t<T>> k, const detail::batch_positions_t<R>& positions,
                    Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  const BatchShape qs = shape_of(layout, q.dimensions());
  const BatchView<T> qv(q.data(), layout, qs);
  BatchView<T> kv;
  if (k.size() != 0) kv = BatchView<T>(k.data(), layout, shape_of(layout, k.dimensions()));
  apply_qk_batch(rope, qv, kv, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_varlen(const R& rope, TensorMap3<detail::identity_t<T>> x, const CuSeqlens& cu_seqlens,
                  const detail::batch_positions_t<R>& positions, Direction dir = Direction::forward,
                  const ParallelFor& parallel = {}) {
  if (x.dimension(2) != rope.head_dim())
    throw error(detail::concat("thd tensor head_dim (", x.dimension(2), ") != rope head_dim (", rope.head_dim(), ")"));
  const StridedLayout l{x.dimension(0), x.dimension(1), x.dimension(1) * x.dimension(2), x.dimension(2)};
  apply_varlen(rope, x.data(), l, cu_seqlens, positions, dir, parallel);
}

}  // namespace rotary

#endif  // ROTARY_TENSOR_MAP_HPP
