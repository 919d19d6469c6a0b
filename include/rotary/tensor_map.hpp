// rotary — Eigen::TensorMap aliases for the batched entry points (apply.hpp takes row-major
// TensorMaps directly: apply_batch(r, layout, x4, ...), apply_qk_batch(r, layout, q4, k4, ...),
// apply_varlen(r, x3, cu_seqlens, ...)). Separate from the umbrella header so that only users who
// want them pull in Eigen's unsupported Tensor module.
//
// A row-major rank-4 TensorMap's dimensions follow the layout: bshd (batch, seq, heads, head_dim),
// bhsd (batch, heads, seq, head_dim), sbhd (seq, batch, heads, head_dim). thd is rank 3:
// (total_tokens, heads, head_dim), with apply_varlen.
#ifndef ROTARY_TENSOR_MAP_HPP
#define ROTARY_TENSOR_MAP_HPP

#include <unsupported/Eigen/CXX11/Tensor>

#include "apply.hpp"
#include "shape.hpp"

namespace rotary {

template <class T>
using TensorMap4 = Eigen::TensorMap<Eigen::Tensor<T, 4, Eigen::RowMajor>>;
template <class T>
using TensorMap3 = Eigen::TensorMap<Eigen::Tensor<T, 3, Eigen::RowMajor>>;

// The shape a dense row-major tensor of `layout` has, from its dimensions.
template <class Dims>
BatchShape shape_of(Layout layout, const Dims& d) {
  return detail::tensor_shape(layout, d);
}

}  // namespace rotary

#endif  // ROTARY_TENSOR_MAP_HPP
