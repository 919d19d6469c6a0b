// rotary — public entry points: rotate query/key vectors held in Eigen maps or strided buffers.
//
// A block of vectors is `tokens x heads` rows of head_dim elements (inner stride 1). Token t's
// rows all use the cos/sin of position positions[t]. Overloads:
//   apply(rope, x, positions, heads[, dir])               in place, Eigen rows (rows = tokens*heads)
//   apply(rope, in, out, positions, heads[, dir])          out of place (or in place if out is in)
//   apply_strided(rope, in, in_layout, out, out_layout, positions[, dir])   raw pointers + strides
//   apply_strided(rope, x, layout, positions[, dir])      raw, in place
// Checked: all of the above validate every argument first and throw rotary::error (message names
// the argument and its value): shapes, strides, overlapping rows, partial input/output overlap,
// position counts, negative positions and positions outside the cache. Validation is O(tokens) for
// position arrays and O(1) otherwise.
// Unchecked: the *_unchecked variants skip validation; in debug builds (no NDEBUG) they run the
// same checks and ROTARY_ASSERT on failure. Bad input there is undefined behaviour.
#ifndef ROTARY_APPLY_HPP
#define ROTARY_APPLY_HPP

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>

#include "cache.hpp"
#include "config.hpp"
#include "detail/checks.hpp"
#include "detail/kernel_args.hpp"
#include "detail/kernels/avx2.hpp"
#include "detail/kernels/avx512.hpp"
#include "detail/kernels/scalar.hpp"
#include "dispatch.hpp"
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

// Geometry of a raw buffer: head row (t, h) starts at ptr + t*token_stride + h*head_stride
// (elements, >= 0), and holds head_dim contiguous elements.
struct StridedLayout {
  std::int64_t tokens = 0;
  std::int64_t heads = 0;
  std::ptrdiff_t token_stride = 0;
  std::ptrdiff_t head_stride = 0;
};

namespace detail {

template <class U>
struct type_identity {
  using type = U;
};
template <class U>
using identity_t = typename type_identity<U>::type;  // blocks deduction: T comes from Rope<T>

template <class T>
KernelArgs<T> make_args(const Rope<T>& rope, const T* in, const StridedLayout& il, T* out,
                        const StridedLayout& ol, const Positions& positions, Direction dir) {
  KernelArgs<T> a;
  a.in = in;
  a.out = out;
  a.in_token_stride = il.token_stride;
  a.in_head_stride = il.head_stride;
  a.out_token_stride = ol.token_stride;
  a.out_head_stride = ol.head_stride;
  a.tokens = il.tokens;
  a.heads = il.heads;
  a.head_dim = rope.head_dim();
  a.rotary_dim = rope.rotary_dim();
  a.pairing = rope.pairing();
  a.inverse = dir == Direction::inverse;
  a.cache = &rope.cache();
  a.positions = positions;
  return a;
}

inline std::string check_layouts(const StridedLayout& il, const StridedLayout& ol) {
  if (il.tokens != ol.tokens || il.heads != ol.heads)
    return concat("shape mismatch: input is ", il.tokens, " tokens x ", il.heads, " heads, output is ",
                  ol.tokens, " tokens x ", ol.heads, " heads");
  return {};
}

// Eigen rows (tokens*heads) x head_dim -> strided layout.
inline std::string eigen_layout(Eigen::Index rows, Eigen::Index cols, Eigen::Index outer,
                                std::int64_t heads, std::int64_t head_dim, const char* name,
                                StridedLayout& out) {
  if (heads < 1) return concat("heads (", heads, ") must be >= 1");
  if (cols != head_dim) return concat(name, " has ", cols, " columns; head_dim is ", head_dim);
  if (rows % heads != 0)
    return concat(name, " has ", rows, " rows, not a multiple of heads (", heads, ")");
  out.tokens = rows / heads;
  out.heads = heads;
  out.head_stride = outer;
  out.token_stride = outer * heads;
  return {};
}

// The single place where a validated call reaches the kernels.
// The kernel is chosen once per call (never per row) from active_isa(); every kernel gives the
// same bits, so the choice only changes speed.
template <class T>
void run(const KernelArgs<T>& a) {
#if ROTARY_X86_KERNELS
  switch (active_isa()) {
    case Isa::avx512:
      avx512::rotate_tokens(a, 0, a.tokens);
      return;
    case Isa::avx2:
      avx2::rotate_tokens(a, 0, a.tokens);
      return;
    default:
      break;
  }
#else
  (void)active_isa();  // still validates ROTARY_MAX_ISA
#endif
  scalar::rotate_tokens(a, 0, a.tokens);
}

inline void throw_if(const std::string& message) {
  if (!message.empty()) throw error(message);
}

template <class T>
void checked(const Rope<T>& rope, const T* in, const StridedLayout& il, T* out,
             const StridedLayout& ol, const Positions& positions, Direction dir) {
  throw_if(check_layouts(il, ol));
  const KernelArgs<T> a = make_args(rope, in, il, out, ol, positions, dir);
  throw_if(check_call(a));
  run(a);
}

template <class T>
void unchecked(const Rope<T>& rope, const T* in, const StridedLayout& il, T* out,
               const StridedLayout& ol, const Positions& positions, Direction dir) {
  ROTARY_ASSERT(check_layouts(il, ol).empty());
  const KernelArgs<T> a = make_args(rope, in, il, out, ol, positions, dir);
  ROTARY_ASSERT(check_call(a).empty());
  run(a);
}

}  // namespace detail

// ---- raw pointers + strides -------------------------------------------------------------------

template <class T>
void apply_strided(const Rope<T>& rope, const detail::identity_t<T>* in, const StridedLayout& in_layout,
                   detail::identity_t<T>* out, const StridedLayout& out_layout,
                   const Positions& positions, Direction dir = Direction::forward) {
  detail::checked(rope, in, in_layout, out, out_layout, positions, dir);
}

template <class T>
void apply_strided(const Rope<T>& rope, detail::identity_t<T>* x, const StridedLayout& layout,
                   const Positions& positions, Direction dir = Direction::forward) {
  detail::checked<T>(rope, x, layout, x, layout, positions, dir);
}

template <class T>
void apply_strided_unchecked(const Rope<T>& rope, const detail::identity_t<T>* in,
                             const StridedLayout& in_layout, detail::identity_t<T>* out,
                             const StridedLayout& out_layout, const Positions& positions,
                             Direction dir = Direction::forward) {
  detail::unchecked(rope, in, in_layout, out, out_layout, positions, dir);
}

// ---- Eigen rows: (tokens * heads) x head_dim, row-major, outer stride allowed ---------------

template <class T>
void apply(const Rope<T>& rope, detail::identity_t<RowsRef<T>> x, const Positions& positions,
           std::int64_t heads, Direction dir = Direction::forward) {
  StridedLayout l;
  detail::throw_if(detail::eigen_layout(x.rows(), x.cols(), x.outerStride(), heads, rope.head_dim(), "x", l));
  detail::checked<T>(rope, x.data(), l, x.data(), l, positions, dir);
}

template <class T>
void apply(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> in,
           detail::identity_t<RowsRef<T>> out, const Positions& positions, std::int64_t heads,
           Direction dir = Direction::forward) {
  StridedLayout il;
  StridedLayout ol;
  detail::throw_if(detail::eigen_layout(in.rows(), in.cols(), in.outerStride(), heads, rope.head_dim(), "input", il));
  detail::throw_if(detail::eigen_layout(out.rows(), out.cols(), out.outerStride(), heads, rope.head_dim(), "output", ol));
  detail::checked<T>(rope, in.data(), il, out.data(), ol, positions, dir);
}

template <class T>
void apply_unchecked(const Rope<T>& rope, detail::identity_t<RowsRef<T>> x, const Positions& positions,
                     std::int64_t heads, Direction dir = Direction::forward) {
  StridedLayout l;
  [[maybe_unused]] const std::string m =
      detail::eigen_layout(x.rows(), x.cols(), x.outerStride(), heads, rope.head_dim(), "x", l);
  ROTARY_ASSERT(m.empty());
  detail::unchecked<T>(rope, x.data(), l, x.data(), l, positions, dir);
}

template <class T>
void apply_unchecked(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> in,
                     detail::identity_t<RowsRef<T>> out, const Positions& positions,
                     std::int64_t heads, Direction dir = Direction::forward) {
  StridedLayout il;
  StridedLayout ol;
  [[maybe_unused]] const std::string mi =
      detail::eigen_layout(in.rows(), in.cols(), in.outerStride(), heads, rope.head_dim(), "input", il);
  [[maybe_unused]] const std::string mo =
      detail::eigen_layout(out.rows(), out.cols(), out.outerStride(), heads, rope.head_dim(), "output", ol);
  ROTARY_ASSERT(mi.empty() && mo.empty());
  detail::unchecked<T>(rope, in.data(), il, out.data(), ol, positions, dir);
}

}  // namespace rotary

#endif  // ROTARY_APPLY_HPP
