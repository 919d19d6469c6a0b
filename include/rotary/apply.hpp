// rotary — the entry points: rotate query/key vectors held in Eigen rows, strided buffers, batched
// 4-d views or packed variable-length sequences, with any rotator (rotator.hpp).
//
// One grid. Every family exists checked (namespace rotary) and unchecked (namespace
// rotary::unchecked, the same names), in place and out of place; the last argument is always an
// ApplyOptions (direction, thread pool), defaulted:
//   apply(r, x, positions, heads, opts)                        Eigen rows (tokens*heads) x head_dim
//   apply(r, in, out, positions, heads, opts)
//   apply_strided(r, x, layout, positions, opts)               raw pointer + StridedLayout
//   apply_strided(r, in, in_layout, out, out_layout, positions, opts)
//   apply_qk(r, q, k, positions, q_heads, k_heads, opts)       fused q+k (MHA, GQA, MQA)
//   apply_qk(r, q_in, q_out, k_in, k_out, positions, q_heads, k_heads, opts)
//   apply_qk_strided(r, q, q_layout, k, k_layout, positions, opts)
//   apply_qk_strided(r, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out, k_out_layout,
//                    positions, opts)
//   apply_batch(r, x, positions, opts)                         BatchView: bshd, bhsd, sbhd, any strides
//   apply_batch(r, in, out, positions, opts)
//   apply_qk_batch(r, q, k, positions, opts)
//   apply_qk_batch(r, q_in, q_out, k_in, k_out, positions, opts)
//   apply_varlen(r, x, layout, cu_seqlens, positions, opts)    packed THD
//   apply_varlen(r, in, in_layout, out, out_layout, cu_seqlens, positions, opts)
//   apply_qk_varlen(r, q, q_layout, k, k_layout, cu_seqlens, positions, opts)
//   apply_qk_varlen(r, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out, k_out_layout,
//                   cu_seqlens, positions, opts)
// and, for dense tensors, apply_batch(r, layout, x, shape, positions, opts),
// apply_qk_batch(r, layout, q, q_shape, k, k_heads, positions, opts), and the same with row-major
// Eigen::TensorMaps (tensor_map.hpp): apply_batch(r, layout, x4, ...), apply_qk_batch(r, layout, q4,
// k4, ...), apply_varlen(r, x3, cu_seqlens, ...).
// A token's rows all use the cos/sin of its position. In fused q+k calls k_heads == 0 (or an empty
// k view / layout) means no key. 1-D rotators take Positions per token (batch families:
// SequencePositions per sequence); multi-axis rotators take their own positions type.
//
// Checked (rotary::): every argument is validated before anything is written and a bad one throws
// rotary::error naming it and its value: shapes, strides, overlapping rows, partial input/output
// overlap, position counts, negative positions and positions outside the cache (O(tokens) for
// position arrays, O(1) otherwise).
// Unchecked (rotary::unchecked::): no validation in release builds; in debug builds (no NDEBUG) the
// same checks run and a failure prints the checked call's message and fails a ROTARY_ASSERT
// (config.hpp). Bad input there is undefined behaviour.
//
// The entry points are function objects (one definition serves both namespaces): call them
// qualified (rotary::apply, rotary::unchecked::apply) or after a using-declaration; argument-dependent
// lookup does not find them.
#ifndef ROTARY_APPLY_HPP
#define ROTARY_APPLY_HPP

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "config.hpp"
#include "detail/calls/batch.hpp"
#include "detail/calls/sequence.hpp"
#include "positions.hpp"
#include "rotator.hpp"
#include "sequence_positions.hpp"
#include "shape.hpp"
#include "types.hpp"

namespace rotary {

// ---- arguments the entry points cannot take: a compile-time error naming the cause ----------------
// Without these, an Eigen::MatrixXf (column-major) or a const matrix as written rows, or rows of
// another scalar type, fails with "no matching function" and pages of candidates. Each misuse
// overload below is viable only where no real one is (SFINAE removes it whenever the rows bind),
// and its body is a static_assert. Read-only rows of another layout still bind: ConstRowsRef copies.
namespace detail {
template <class X>
inline constexpr bool is_eigen_v = std::is_base_of_v<Eigen::EigenBase<std::decay_t<X>>, std::decay_t<X>>;
// X is Eigen but cannot be written through RowsRef<T> / read through ConstRowsRef<T>.
template <class X, class T>
inline constexpr bool unwritable_rows_v = is_eigen_v<X> && !std::is_convertible_v<X, RowsRef<T>>;
template <class X, class T>
inline constexpr bool unreadable_rows_v = is_eigen_v<X> && !std::is_convertible_v<X, ConstRowsRef<T>>;
template <class...>
inline constexpr bool dependent_false_v = false;

// A row-major Eigen::TensorMap (or Tensor) of rank N over T, detected without the Tensor module.
template <class X, class = void>
struct tensor_rank : std::integral_constant<int, -1> {};
template <class X>
struct tensor_rank<X, std::void_t<decltype(X::NumDimensions), decltype(X::Layout), typename X::Scalar,
                                  decltype(std::declval<X&>().dimensions()), decltype(std::declval<X&>().data())>>
    : std::integral_constant<int, static_cast<int>(X::NumDimensions)> {};
template <class X, class T, int N, class = void>
struct is_tensor : std::false_type {};
template <class X, class T, int N>
struct is_tensor<X, T, N, std::enable_if_t<tensor_rank<X>::value == N>>
    : std::bool_constant<std::is_same_v<typename X::Scalar, T> &&
                         static_cast<int>(X::Layout) == static_cast<int>(Eigen::RowMajor)> {};
template <class X, class T, int N>
inline constexpr bool is_tensor_v = is_tensor<std::decay_t<X>, T, N>::value;

// The shape a dense row-major rank-4 tensor of `layout` has, from its dimensions.
template <class Dims>
BatchShape tensor_shape(Layout layout, const Dims& d) {
  switch (layout) {
    case Layout::bshd: return {d[0], d[1], d[2], d[3]};
    case Layout::bhsd: return {d[0], d[2], d[1], d[3]};
    case Layout::sbhd: return {d[1], d[0], d[2], d[3]};
    default: throw error("layout thd is rank 3: use apply_varlen with a TensorMap3");
  }
}
}  // namespace detail

#define ROTARY_DETAIL_ROWS_MISUSE_MESSAGE                                                                   \
  "rotary: Eigen rows must be row-major, of the rotator's storage type T, with inner stride 1 "           \
  "(rotary::RowMatrix<T>, or an Eigen::Map / Block of one), and rows the call writes must not be const. " \
  "Eigen::MatrixXf is column-major: declare rotary::RowMatrix<float>."

// ---- the families, each written once for both namespaces -------------------------------------------
// R is the rotator; T (never given) its storage type, P its positions type; Checked picks the namespace.
namespace detail {

template <bool Checked>
struct ApplyRows {
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, identity_t<RowsRef<T>> x, const P& positions, std::int64_t heads,
                  const ApplyOptions& o = {}) const {
    rows_sequence<R, T>(Checked, r, x, x, true, positions, heads, o.direction, o.parallel);
  }
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, identity_t<ConstRowsRef<T>> in, identity_t<RowsRef<T>> out, const P& positions,
                  std::int64_t heads, const ApplyOptions& o = {}) const {
    rows_sequence<R, T>(Checked, r, in, out, false, positions, heads, o.direction, o.parallel);
  }
  template <class R, class X, class P, class T = rotator_value_t<R>,
            std::enable_if_t<unwritable_rows_v<X, T> && !is_eigen_v<P>, int> = 0>
  void operator()(const R&, X&&, const P&, std::int64_t, const ApplyOptions& = {}) const {
    static_assert(dependent_false_v<X>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);
  }
  template <class R, class In, class Out, class P, class T = rotator_value_t<R>,
            std::enable_if_t<is_eigen_v<In> && !is_eigen_v<P> &&
                                 (unreadable_rows_v<In, T> || unwritable_rows_v<Out, T>),
                             int> = 0>
  void operator()(const R&, In&&, Out&&, const P&, std::int64_t, const ApplyOptions& = {}) const {
    static_assert(dependent_false_v<In>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);
  }
};

template <bool Checked>
struct ApplyQkRows {
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, identity_t<RowsRef<T>> q, identity_t<RowsRef<T>> k, const P& positions,
                  std::int64_t q_heads, std::int64_t k_heads, const ApplyOptions& o = {}) const {
    rows_qk_sequence<R, T>(Checked, r, nullptr, q, nullptr, k, positions, q_heads, k_heads, o.direction, o.parallel);
  }
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, identity_t<ConstRowsRef<T>> q_in, identity_t<RowsRef<T>> q_out,
                  identity_t<ConstRowsRef<T>> k_in, identity_t<RowsRef<T>> k_out, const P& positions,
                  std::int64_t q_heads, std::int64_t k_heads, const ApplyOptions& o = {}) const {
    rows_qk_sequence<R, T>(Checked, r, &q_in, q_out, &k_in, k_out, positions, q_heads, k_heads, o.direction, o.parallel);
  }
  template <class R, class Q, class K, class P, class T = rotator_value_t<R>,
            std::enable_if_t<is_eigen_v<Q> && is_eigen_v<K> && !is_eigen_v<P> &&
                                 (unwritable_rows_v<Q, T> || unwritable_rows_v<K, T>),
                             int> = 0>
  void operator()(const R&, Q&&, K&&, const P&, std::int64_t, std::int64_t, const ApplyOptions& = {}) const {
    static_assert(dependent_false_v<Q>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);
  }
  template <class R, class QI, class QO, class KI, class KO, class P, class T = rotator_value_t<R>,
            std::enable_if_t<is_eigen_v<QI> && is_eigen_v<KI> && !is_eigen_v<P> &&
                                 (unreadable_rows_v<QI, T> || unwritable_rows_v<QO, T> ||
                                  unreadable_rows_v<KI, T> || unwritable_rows_v<KO, T>),
                             int> = 0>
  void operator()(const R&, QI&&, QO&&, KI&&, KO&&, const P&, std::int64_t, std::int64_t,
                  const ApplyOptions& = {}) const {
    static_assert(dependent_false_v<QI>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);
  }
};

template <bool Checked>
struct ApplyStrided {
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, identity_t<T>* x, const StridedLayout& layout, const P& positions,
                  const ApplyOptions& o = {}) const {
    strided_sequence<R, T>(Checked, r, x, layout, x, layout, positions, o.direction, o.parallel);
  }
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, const identity_t<T>* in, const StridedLayout& in_layout, identity_t<T>* out,
                  const StridedLayout& out_layout, const P& positions, const ApplyOptions& o = {}) const {
    strided_sequence<R, T>(Checked, r, in, in_layout, out, out_layout, positions, o.direction, o.parallel);
  }
};

// k_layout.heads == 0: no key (the k pointers are ignored); negative is refused.
template <bool Checked>
struct ApplyQkStrided {
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, identity_t<T>* q, const StridedLayout& q_layout, identity_t<T>* k,
                  const StridedLayout& k_layout, const P& positions, const ApplyOptions& o = {}) const {
    strided_qk_sequence<R, T>(Checked, r, q, q_layout, q, q_layout, k, k_layout, k, k_layout, positions, o.direction,
                     o.parallel);
  }
  template <class R, class T = rotator_value_t<R>, class P = rotator_positions_t<R>>
  void operator()(const R& r, const identity_t<T>* q_in, const StridedLayout& q_in_layout, identity_t<T>* q_out,
                  const StridedLayout& q_out_layout, const identity_t<T>* k_in, const StridedLayout& k_in_layout,
                  identity_t<T>* k_out, const StridedLayout& k_out_layout, const P& positions,
                  const ApplyOptions& o = {}) const {
    strided_qk_sequence<R, T>(Checked, r, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out, k_out_layout,
                     positions, o.direction, o.parallel);
  }
};

template <bool Checked>
struct ApplyBatch {
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, const BatchView<identity_t<T>>& x, const batch_positions_t<R>& positions,
                  const ApplyOptions& o = {}) const {
    batch_qk<R, T>(Checked, r, x, x, {}, {}, positions, o.direction, o.parallel);
  }
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, const BatchView<const identity_t<T>>& in, const BatchView<identity_t<T>>& out,
                  const batch_positions_t<R>& positions, const ApplyOptions& o = {}) const {
    batch_qk<R, T>(Checked, r, in, out, {}, {}, positions, o.direction, o.parallel);
  }
  // A dense tensor of `layout`, in place.
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, Layout layout, identity_t<T>* x, const BatchShape& shape,
                  const batch_positions_t<R>& positions, const ApplyOptions& o = {}) const {
    (*this)(r, BatchView<T>(x, layout, shape), positions, o);
  }
  // A row-major rank-4 Eigen::TensorMap whose dimensions follow `layout`, in place.
  template <class R, class X, class T = rotator_value_t<R>, std::enable_if_t<is_tensor_v<X, T, 4>, int> = 0>
  void operator()(const R& r, Layout layout, X&& x, const batch_positions_t<R>& positions,
                  const ApplyOptions& o = {}) const {
    (*this)(r, BatchView<T>(x.data(), layout, tensor_shape(layout, x.dimensions())), positions, o);
  }
};

// Fused q+k: q and k share batch and seq, each with its own heads (GQA/MQA). k.shape.heads == 0: no key.
template <bool Checked>
struct ApplyQkBatch {
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, const BatchView<identity_t<T>>& q, const BatchView<identity_t<T>>& k,
                  const batch_positions_t<R>& positions, const ApplyOptions& o = {}) const {
    batch_qk<R, T>(Checked, r, q, q, k, k, positions, o.direction, o.parallel);
  }
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, const BatchView<const identity_t<T>>& q_in, const BatchView<identity_t<T>>& q_out,
                  const BatchView<const identity_t<T>>& k_in, const BatchView<identity_t<T>>& k_out,
                  const batch_positions_t<R>& positions, const ApplyOptions& o = {}) const {
    batch_qk<R, T>(Checked, r, q_in, q_out, k_in, k_out, positions, o.direction, o.parallel);
  }
  // Dense q (q_shape) and k (same batch, seq and head_dim; k_heads heads, 0: no key), in place.
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, Layout layout, identity_t<T>* q, const BatchShape& q_shape, identity_t<T>* k,
                  std::int64_t k_heads, const batch_positions_t<R>& positions, const ApplyOptions& o = {}) const {
    const BatchView<T> qv(q, layout, q_shape);
    BatchView<T> kv;
    if (k_heads != 0) kv = BatchView<T>(k, layout, BatchShape{q_shape.batch, q_shape.seq, k_heads, q_shape.head_dim});
    (*this)(r, qv, kv, positions, o);
  }
  // Row-major rank-4 Eigen::TensorMaps, in place; k may be empty (no key).
  template <class R, class Q, class K, class T = rotator_value_t<R>,
            std::enable_if_t<is_tensor_v<Q, T, 4> && is_tensor_v<K, T, 4>, int> = 0>
  void operator()(const R& r, Layout layout, Q&& q, K&& k, const batch_positions_t<R>& positions,
                  const ApplyOptions& o = {}) const {
    const BatchView<T> qv(q.data(), layout, tensor_shape(layout, q.dimensions()));
    BatchView<T> kv;
    if (k.size() != 0) kv = BatchView<T>(k.data(), layout, tensor_shape(layout, k.dimensions()));
    (*this)(r, qv, kv, positions, o);
  }
};

// Packed THD: layout.tokens = cu_seqlens[batch]; sequence b is tokens [cu_seqlens[b], cu_seqlens[b+1]).
template <bool Checked>
struct ApplyVarlen {
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, identity_t<T>* x, const StridedLayout& layout, const CuSeqlens& cu_seqlens,
                  const batch_positions_t<R>& positions, const ApplyOptions& o = {}) const {
    varlen_qk<R, T>(Checked, r, x, layout, x, layout, nullptr, StridedLayout{}, nullptr, StridedLayout{}, cu_seqlens,
                    positions, o.direction, o.parallel);
  }
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, const identity_t<T>* in, const StridedLayout& in_layout, identity_t<T>* out,
                  const StridedLayout& out_layout, const CuSeqlens& cu_seqlens, const batch_positions_t<R>& positions,
                  const ApplyOptions& o = {}) const {
    varlen_qk<R, T>(Checked, r, in, in_layout, out, out_layout, nullptr, StridedLayout{}, nullptr, StridedLayout{},
                    cu_seqlens, positions, o.direction, o.parallel);
  }
  // A row-major rank-3 Eigen::TensorMap (total_tokens, heads, head_dim), in place.
  template <class R, class X, class T = rotator_value_t<R>, std::enable_if_t<is_tensor_v<X, T, 3>, int> = 0>
  void operator()(const R& r, X&& x, const CuSeqlens& cu_seqlens, const batch_positions_t<R>& positions,
                  const ApplyOptions& o = {}) const {
    if (x.dimension(2) != r.head_dim())
      throw error(concat("thd tensor head_dim (", x.dimension(2), ") != rope head_dim (", r.head_dim(), ")"));
    const StridedLayout l{x.dimension(0), x.dimension(1), x.dimension(1) * x.dimension(2), x.dimension(2)};
    (*this)(r, x.data(), l, cu_seqlens, positions, o);
  }
};

// Fused q+k; k_layout.heads == 0: no key.
template <bool Checked>
struct ApplyQkVarlen {
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, identity_t<T>* q, const StridedLayout& q_layout, identity_t<T>* k,
                  const StridedLayout& k_layout, const CuSeqlens& cu_seqlens, const batch_positions_t<R>& positions,
                  const ApplyOptions& o = {}) const {
    varlen_qk<R, T>(Checked, r, q, q_layout, q, q_layout, k, k_layout, k, k_layout, cu_seqlens, positions,
                    o.direction, o.parallel);
  }
  template <class R, class T = rotator_value_t<R>>
  void operator()(const R& r, const identity_t<T>* q_in, const StridedLayout& q_in_layout, identity_t<T>* q_out,
                  const StridedLayout& q_out_layout, const identity_t<T>* k_in, const StridedLayout& k_in_layout,
                  identity_t<T>* k_out, const StridedLayout& k_out_layout, const CuSeqlens& cu_seqlens,
                  const batch_positions_t<R>& positions, const ApplyOptions& o = {}) const {
    varlen_qk<R, T>(Checked, r, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out, k_out_layout,
                    cu_seqlens, positions, o.direction, o.parallel);
  }
};

}  // namespace detail

// ---- the grid ------------------------------------------------------------------------------------------
inline constexpr detail::ApplyRows<true> apply{};
inline constexpr detail::ApplyStrided<true> apply_strided{};
inline constexpr detail::ApplyQkRows<true> apply_qk{};
inline constexpr detail::ApplyQkStrided<true> apply_qk_strided{};
inline constexpr detail::ApplyBatch<true> apply_batch{};
inline constexpr detail::ApplyQkBatch<true> apply_qk_batch{};
inline constexpr detail::ApplyVarlen<true> apply_varlen{};
inline constexpr detail::ApplyQkVarlen<true> apply_qk_varlen{};

namespace unchecked {
inline constexpr detail::ApplyRows<false> apply{};
inline constexpr detail::ApplyStrided<false> apply_strided{};
inline constexpr detail::ApplyQkRows<false> apply_qk{};
inline constexpr detail::ApplyQkStrided<false> apply_qk_strided{};
inline constexpr detail::ApplyBatch<false> apply_batch{};
inline constexpr detail::ApplyQkBatch<false> apply_qk_batch{};
inline constexpr detail::ApplyVarlen<false> apply_varlen{};
inline constexpr detail::ApplyQkVarlen<false> apply_qk_varlen{};
}  // namespace unchecked

}  // namespace rotary

#endif  // ROTARY_APPLY_HPP
