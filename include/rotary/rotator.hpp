// rotary — what every entry point (apply.hpp) takes besides tensors and positions: the rotator
// concept, the Eigen row types, and the options of a call.
//
// A rotator is anything the entry points accept as their first argument: Rope<T> (here),
// TableRope (table.hpp), MultiAxisRope (multi_axis.hpp), XPos<T>'s query and key views (xpos.hpp).
// It has head_dim(), rotary_dim() and pairing(), and a rotator_traits specialisation naming its
// storage type, its positions type and how it makes a call's row source (detail/driver/driver.hpp):
//   template <class F> static void with_rows(const R&, const positions_type&, Direction, F&& f)
// calls f(source) once.
#ifndef ROTARY_ROTATOR_HPP
#define ROTARY_ROTATOR_HPP

#include <Eigen/Core>
#include <utility>

#include "config.hpp"
#include "detail/driver/driver.hpp"
#include "dtype.hpp"
#include "parallel.hpp"
#include "positions.hpp"
#include "rope.hpp"
#include "types.hpp"

namespace rotary {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Writable rows: any row-major dense block with inner stride 1 binds without a copy.
template <class T>
using RowsRef = Eigen::Ref<RowMatrix<T>, 0, Eigen::OuterStride<>>;
// Read-only rows. Binding an expression of another layout makes a temporary copy (correct, slower).
template <class T>
using ConstRowsRef = Eigen::Ref<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

// What varies per call beyond tensors and positions; the last argument of every entry point.
// A Direction or a ParallelFor alone converts: apply(rope, x, p, heads, Direction::inverse).
struct ApplyOptions {
  Direction direction = Direction::forward;  // inverse: the backward pass (R^T = R_{-m})
  ParallelFor parallel;                      // empty: the call runs on the calling thread

  ApplyOptions() = default;
  ApplyOptions(Direction d) noexcept : direction(d) {}                          // NOLINT(google-explicit-constructor)
  ApplyOptions(ParallelFor p) noexcept : parallel(std::move(p)) {}              // NOLINT(google-explicit-constructor)
  ApplyOptions(Direction d, ParallelFor p) noexcept : direction(d), parallel(std::move(p)) {}
};

template <class R>
struct rotator_traits;  // not a rotator

template <class T>
struct rotator_traits<Rope<T>> {
  using value_type = T;
  using positions_type = Positions;
  template <class F>
  static void with_rows(const Rope<T>& r, const Positions& p, Direction /*dir*/, F&& f) {
    if (r.on_the_fly()) {
      f(detail::GeneratedRows<compute_t<T>>{&r.row_generator(), p});
    } else {
      f(detail::TableRows<compute_t<T>>{&r.cache(), p});
    }
  }
};

namespace detail {
template <class R>
using rotator_value_t = typename rotator_traits<R>::value_type;
template <class R>
using rotator_positions_t = typename rotator_traits<R>::positions_type;
}  // namespace detail

}  // namespace rotary

#endif  // ROTARY_ROTATOR_HPP
