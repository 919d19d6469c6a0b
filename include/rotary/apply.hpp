// rotary — public entry points: rotate query/key vectors held in Eigen maps or strided buffers.
//
// A block of vectors is `tokens x heads` rows of head_dim elements (inner stride 1). Token t's
// rows all use the cos/sin of position positions[t]. Overloads:
//   apply(rope, x, positions, heads[, dir])               in place, Eigen rows (rows = tokens*heads)
//   apply(rope, in, out, positions, heads[, dir])          out of place (or in place if out is in)
//   apply_strided(rope, in, in_layout, out, out_layout, positions[, dir])   raw pointers + strides
//   apply_strided(rope, x, layout, positions[, dir])      raw, in place
//   apply_qk(rope, q, k, positions, q_heads, k_heads[, dir])          fused q+k, in place
//   apply_qk(rope, q_in, q_out, k_in, k_out, positions, q_heads, k_heads[, dir])   out of place
//   apply_qk_strided(rope, q_in, q_in_layout, q_out, q_out_layout, k_in, ..., positions[, dir])
// Fused q+k rotates a token's query heads and key heads (any counts: MHA, GQA, MQA; k_heads == 0
// means no key) with the token's cos/sin loaded once. Every entry point takes an optional trailing
// ParallelFor (parallel.hpp) to split the tokens over the caller's threads.
// Checked: all of the above validate every argument first and throw rotary::error (message names
// the argument and its value): shapes, strides, overlapping rows, partial input/output overlap,
// position counts, negative positions and positions outside the cache. Validation is O(tokens) for
// position arrays and O(1) otherwise.
// Unchecked: the *_unchecked variants skip validation; in debug builds (no NDEBUG) they run the
// same checks and fail a ROTARY_ASSERT after printing the checked variant's message to stderr
// (ROTARY_ASSERT_MESSAGE, config.hpp). Bad input there is undefined behaviour.
#ifndef ROTARY_APPLY_HPP
#define ROTARY_APPLY_HPP

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cache.hpp"
#include "config.hpp"
#include "detail/checks.hpp"
#include "detail/kernel_args.hpp"
#include "detail/convert.hpp"
#include "detail/kernels/registry.hpp"
#include "detail/kernels/scalar.hpp"
#include "dispatch.hpp"
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
StreamArgs<T> make_stream(const T* in, const StridedLayout& il, T* out, const StridedLayout& ol) noexcept {
  StreamArgs<T> s;
  s.in = in;
  s.out = out;
  s.in_token_stride = il.token_stride;
  s.in_head_stride = il.head_stride;
  s.out_token_stride = ol.token_stride;
  s.out_head_stride = ol.head_stride;
  s.heads = il.heads;
  return s;
}

template <class T>
KernelArgs<T> make_args(const Rope<T>& rope, const StreamArgs<T>& q, const StreamArgs<T>& k,
                        std::int64_t tokens, const Positions& positions, Direction dir) noexcept {
  KernelArgs<T> a;
  a.q = q;
  a.k = k;
  a.tokens = tokens;
  a.head_dim = rope.head_dim();
  a.rotary_dim = rope.rotary_dim();
  a.pairing = rope.pairing();
  a.inverse = dir == Direction::inverse;
  if (rope.on_the_fly()) {
    a.generator = &rope.row_generator();
  } else {
    a.cache = &rope.cache();
  }
  a.positions = positions;
  return a;
}

// One tensor, in and out.
template <class T>
KernelArgs<T> make_args(const Rope<T>& rope, const T* in, const StridedLayout& il, T* out,
                        const StridedLayout& ol, const Positions& positions, Direction dir) noexcept {
  return make_args(rope, make_stream(in, il, out, ol), StreamArgs<T>{}, il.tokens, positions, dir);
}

inline std::string check_layouts(const char* name, const StridedLayout& il, const StridedLayout& ol) {
  if (il.tokens != ol.tokens || il.heads != ol.heads)
    return concat(name, "shape mismatch: input is ", il.tokens, " tokens x ", il.heads,
                  " heads, output is ", ol.tokens, " tokens x ", ol.heads, " heads");
  return {};
}

// Eigen rows (tokens*heads) x head_dim -> strided layout.
inline std::string eigen_layout(Eigen::Index rows, Eigen::Index cols, Eigen::Index outer,
                                std::int64_t heads, std::int64_t head_dim, const char* name,
                                StridedLayout& out) {
  if (heads < 1) return concat(name, ": heads (", heads, ") must be >= 1");
  if (cols != head_dim) return concat(name, " has ", cols, " columns; head_dim is ", head_dim);
  if (rows % heads != 0)
    return concat(name, " has ", rows, " rows, not a multiple of heads (", heads, ")");
  out.tokens = rows / heads;
  out.heads = heads;
  out.head_stride = outer;
  out.token_stride = outer * heads;
  return {};
}

// The kernel for this call, chosen once from active_isa() (which validates ROTARY_MAX_ISA even
// where only scalar exists). Every kernel gives the same bits, so the choice changes speed only.
template <class T>
Kernel<T> select_kernel() {
  const Kernel<T> k = kernel_for<T>(active_isa());
  return k != nullptr ? k : &scalar::rotate_tokens<T>;
}

// Tokens [t0, t1) of a call, in an order that walks memory the way it is laid out. Kernels go
// token by token, each token's heads in turn: right for rows, BSHD, THD and fused QKV, whose heads
// sit side by side in a token. Where a stream's heads lie farther apart than its tokens (BHSD: each
// head's tokens are one contiguous run) that order touches every head at once: 2 x heads streams
// at a large, usually power-of-two, stride, which defeats hardware prefetchers (a plain row copy in
// that order runs at 0.7x memcpy). One head at a time walks memory in order but reloads a cos/sin
// row per row rotated, an extra stream as large as the input (0.5-0.6x memcpy). So the call goes
// over blocks of kHeadMajorBlock tokens, kHeadMajorGroup heads at a time: a few streams, each
// cos/sin row loaded once per group, the block's rows (128 KiB for rotary_dim 128 in f32) in L2
// for the next group. Measured on a Zen 4 VM, 512 tokens x 40 heads x 128 f32: groups of 1, 2, 4,
// 8 heads ran at 0.6-0.7, 0.85, 0.95-1.1, 0.75x memcpy; blocks of 64-1024 tokens within noise.
// Every row gets the same cos/sin and arithmetic in either order, so the bits are the same.
constexpr std::int64_t kHeadMajorBlock = 256;
constexpr std::int64_t kHeadMajorGroup = 4;

template <class T>
bool heads_farther_than_tokens(const StreamArgs<T>& s) noexcept {
  const auto far = [](std::ptrdiff_t head, std::ptrdiff_t token) {
    return (head < 0 ? -head : head) > (token < 0 ? -token : token);
  };
  return s.heads > 1 && (far(s.in_head_stride, s.in_token_stride) || far(s.out_head_stride, s.out_token_stride));
}

template <class T>
void run_tokens(Kernel<T> kernel, const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) {
  if (t1 - t0 < 2 || (!heads_farther_than_tokens(a.q) && !heads_farther_than_tokens(a.k))) {
    kernel(a, t0, t1);  // one token (decode): one call over all its heads
    return;
  }
  KernelArgs<T> one = a;  // a group of q's or k's heads
  one.k = StreamArgs<T>{};
  for (std::int64_t b = t0; b < t1; b += kHeadMajorBlock) {
    const std::int64_t e = std::min(t1, b + kHeadMajorBlock);
    for (const StreamArgs<T>* s : {&a.q, &a.k}) {
      for (std::int64_t h = 0; h < s->heads; h += kHeadMajorGroup) {
        one.q = *s;
        one.q.in = s->in_row(0, h);
        one.q.out = s->out_row(0, h);
        one.q.heads = std::min(kHeadMajorGroup, s->heads - h);
        kernel(one, b, e);
      }
    }
  }
}

// The single place where a validated call reaches the kernels: the kernel is chosen once per call
// (never per row), and the tokens are split over the caller's threads if it supplied a ParallelFor.
// Runs the kernel over blocks of RowGenerator::kBlock tokens whose cos/sin rows are computed per
// block: fill_block(begin, end, rows, scratch) writes rows for tokens [begin, end) in the cache
// layout (scratch: rotary_dim doubles). Used by cache-free calls and key re-rotation. fill_block
// must be safe to call concurrently.
template <class T, class FillBlock>
void run_with_row_blocks(const KernelArgs<T>& a, const FillBlock& fill_block, const ParallelFor& parallel) {
  using C = compute_t<T>;
  const Kernel<T> kernel = select_kernel<T>();
  const auto blocks = [&a, &fill_block, kernel](std::int64_t begin, std::int64_t end) {
    // Blocks start at multiples of kBlock whatever range a thread gets, so rows (exact anchors, then
    // a recurrence) and hence the output bits do not depend on how a ParallelFor splits the tokens.
    // A range starting inside a block fills that block from its start and rotates from `begin`.
    constexpr std::int64_t kBlock = RowGenerator<C>::kBlock;
    const std::int64_t first = begin / kBlock * kBlock;
    // Scratch for one block, no larger than the range needs (a decode step fills one row).
    const std::int64_t rows_needed = std::min(kBlock, end - first);
    std::vector<C> rows(static_cast<std::size_t>(rows_needed * a.rotary_dim));
    std::vector<double> scratch(static_cast<std::size_t>(a.rotary_dim));
    KernelArgs<T> b = a;
    b.rows = rows.data();
    for (std::int64_t t = first; t < end; t += kBlock) {
      const std::int64_t stop = std::min(end, t + kBlock);
      fill_block(t, stop, rows.data(), scratch.data());
      b.rows_token0 = t;
      run_tokens(kernel, b, std::max(t, begin), stop);
    }
  };
  if (!parallel || a.tokens < 2) {
    blocks(0, a.tokens);
  } else {
    parallel(a.tokens, blocks);
  }
}

template <class T>
void run(const KernelArgs<T>& a, const ParallelFor& parallel = {}) {
  if (a.generator != nullptr) {  // cache-free: rows computed per block
    run_with_row_blocks(
        a,
        [&a](std::int64_t begin, std::int64_t end, compute_t<T>* rows, double* scratch) {
          a.generator->fill(a.positions, begin, end, rows, scratch);
        },
        parallel);
    return;
  }
  const Kernel<T> kernel = select_kernel<T>();
  if (!parallel || a.tokens < 2) {
    run_tokens(kernel, a, 0, a.tokens);
    return;
  }
  parallel(a.tokens, [&a, kernel](std::int64_t begin, std::int64_t end) { run_tokens(kernel, a, begin, end); });
}

inline void throw_if(const std::string& message) {
  if (!message.empty()) throw error(message);
}

// Validates (throwing, or asserting when unchecked) and runs.
template <class T>
void execute(const KernelArgs<T>& a, bool checked, const ParallelFor& parallel) {
  if (checked) {
    throw_if(check_call(a));
  } else {
    ROTARY_ASSERT_MESSAGE(check_call(a));
  }
  run(a, parallel);
}

template <class T>
void strided(bool checked, const Rope<T>& rope, const T* in, const StridedLayout& il, T* out,
             const StridedLayout& ol, const Positions& positions, Direction dir, const ParallelFor& parallel) {
  const std::string m = check_layouts("", il, ol);
  if (checked) {
    throw_if(m);
  } else {
    ROTARY_ASSERT_MESSAGE(m);
  }
  execute(make_args(rope, in, il, out, ol, positions, dir), checked, parallel);
}

template <class T>
void strided_qk(bool checked, const Rope<T>& rope, const T* q_in, const StridedLayout& qil, T* q_out,
                const StridedLayout& qol, const T* k_in, const StridedLayout& kil, T* k_out,
                const StridedLayout& kol, const Positions& positions, Direction dir,
                const ParallelFor& parallel) {
  std::string m = check_layouts("q ", qil, qol);
  if (m.empty()) m = check_layouts("k ", kil, kol);
  if (m.empty() && kil.heads > 0 && kil.tokens != qil.tokens)
    m = concat("q has ", qil.tokens, " tokens but k has ", kil.tokens);
  if (checked) {
    throw_if(m);
  } else {
    ROTARY_ASSERT_MESSAGE(m);
  }
  StreamArgs<T> k;
  if (kil.heads > 0) k = make_stream(k_in, kil, k_out, kol);
  execute(make_args(rope, make_stream(q_in, qil, q_out, qol), k, qil.tokens, positions, dir), checked,
          parallel);
}

// Eigen views to layouts; throws or asserts on a bad shape.
template <class In>
StridedLayout layout_of(bool checked, const In& x, std::int64_t heads, std::int64_t head_dim,
                        const char* name) {
  StridedLayout l;
  const std::string m = eigen_layout(x.rows(), x.cols(), x.outerStride(), heads, head_dim, name, l);
  if (checked) {
    throw_if(m);
  } else {
    ROTARY_ASSERT_MESSAGE(m);
  }
  return l;
}

}  // namespace detail

// ---- raw pointers + strides -------------------------------------------------------------------

template <class T>
void apply_strided(const Rope<T>& rope, const detail::identity_t<T>* in, const StridedLayout& in_layout,
                   detail::identity_t<T>* out, const StridedLayout& out_layout,
                   const Positions& positions, Direction dir = Direction::forward,
                   const ParallelFor& parallel = {}) {
  detail::strided<T>(true, rope, in, in_layout, out, out_layout, positions, dir, parallel);
}

template <class T>
void apply_strided(const Rope<T>& rope, detail::identity_t<T>* x, const StridedLayout& layout,
                   const Positions& positions, Direction dir = Direction::forward,
                   const ParallelFor& parallel = {}) {
  detail::strided<T>(true, rope, x, layout, x, layout, positions, dir, parallel);
}

template <class T>
void apply_strided_unchecked(const Rope<T>& rope, const detail::identity_t<T>* in,
                             const StridedLayout& in_layout, detail::identity_t<T>* out,
                             const StridedLayout& out_layout, const Positions& positions,
                             Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::strided<T>(false, rope, in, in_layout, out, out_layout, positions, dir, parallel);
}

// Fused q+k over raw buffers. k_in_layout.heads == 0: no key (k pointers ignored).
template <class T>
void apply_qk_strided(const Rope<T>& rope, const detail::identity_t<T>* q_in, const StridedLayout& q_in_layout,
                      detail::identity_t<T>* q_out, const StridedLayout& q_out_layout,
                      const detail::identity_t<T>* k_in, const StridedLayout& k_in_layout,
                      detail::identity_t<T>* k_out, const StridedLayout& k_out_layout,
                      const Positions& positions, Direction dir = Direction::forward,
                      const ParallelFor& parallel = {}) {
  detail::strided_qk<T>(true, rope, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out,
                        k_out_layout, positions, dir, parallel);
}

template <class T>
void apply_qk_strided_unchecked(const Rope<T>& rope, const detail::identity_t<T>* q_in,
                                const StridedLayout& q_in_layout, detail::identity_t<T>* q_out,
                                const StridedLayout& q_out_layout, const detail::identity_t<T>* k_in,
                                const StridedLayout& k_in_layout, detail::identity_t<T>* k_out,
                                const StridedLayout& k_out_layout, const Positions& positions,
                                Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::strided_qk<T>(false, rope, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out,
                        k_out_layout, positions, dir, parallel);
}

// ---- Eigen rows: (tokens * heads) x head_dim, row-major, outer stride allowed ---------------

template <class T>
void apply(const Rope<T>& rope, detail::identity_t<RowsRef<T>> x, const Positions& positions,
           std::int64_t heads, Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  const StridedLayout l = detail::layout_of(true, x, heads, rope.head_dim(), "x");
  detail::strided<T>(true, rope, x.data(), l, x.data(), l, positions, dir, parallel);
}

template <class T>
void apply(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> in, detail::identity_t<RowsRef<T>> out,
           const Positions& positions, std::int64_t heads, Direction dir = Direction::forward,
           const ParallelFor& parallel = {}) {
  const StridedLayout il = detail::layout_of(true, in, heads, rope.head_dim(), "input");
  const StridedLayout ol = detail::layout_of(true, out, heads, rope.head_dim(), "output");
  detail::strided<T>(true, rope, in.data(), il, out.data(), ol, positions, dir, parallel);
}

template <class T>
void apply_unchecked(const Rope<T>& rope, detail::identity_t<RowsRef<T>> x, const Positions& positions,
                     std::int64_t heads, Direction dir = Direction::forward,
                     const ParallelFor& parallel = {}) {
  const StridedLayout l = detail::layout_of(false, x, heads, rope.head_dim(), "x");
  detail::strided<T>(false, rope, x.data(), l, x.data(), l, positions, dir, parallel);
}

template <class T>
void apply_unchecked(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> in,
                     detail::identity_t<RowsRef<T>> out, const Positions& positions, std::int64_t heads,
                     Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  const StridedLayout il = detail::layout_of(false, in, heads, rope.head_dim(), "input");
  const StridedLayout ol = detail::layout_of(false, out, heads, rope.head_dim(), "output");
  detail::strided<T>(false, rope, in.data(), il, out.data(), ol, positions, dir, parallel);
}

// Fused q+k in place: q is (tokens*q_heads) x head_dim, k is (tokens*k_heads) x head_dim.
// k_heads == 0: no key (k is ignored).
template <class T>
void apply_qk(const Rope<T>& rope, detail::identity_t<RowsRef<T>> q, detail::identity_t<RowsRef<T>> k,
              const Positions& positions, std::int64_t q_heads, std::int64_t k_heads,
              Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  const StridedLayout ql = detail::layout_of(true, q, q_heads, rope.head_dim(), "q");
  StridedLayout kl;
  if (k_heads != 0) kl = detail::layout_of(true, k, k_heads, rope.head_dim(), "k");
  detail::strided_qk<T>(true, rope, q.data(), ql, q.data(), ql, k.data(), kl, k.data(), kl, positions, dir,
                        parallel);
}

// Fused q+k out of place.
template <class T>
void apply_qk(const Rope<T>& rope, detail::identity_t<ConstRowsRef<T>> q_in, detail::identity_t<RowsRef<T>> q_out,
              detail::identity_t<ConstRowsRef<T>> k_in, detail::identity_t<RowsRef<T>> k_out,
              const Positions& positions, std::int64_t q_heads, std::int64_t k_heads,
              Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  const StridedLayout qil = detail::layout_of(true, q_in, q_heads, rope.head_dim(), "q input");
  const StridedLayout qol = detail::layout_of(true, q_out, q_heads, rope.head_dim(), "q output");
  StridedLayout kil;
  StridedLayout kol;
  if (k_heads != 0) {
    kil = detail::layout_of(true, k_in, k_heads, rope.head_dim(), "k input");
    kol = detail::layout_of(true, k_out, k_heads, rope.head_dim(), "k output");
  }
  detail::strided_qk<T>(true, rope, q_in.data(), qil, q_out.data(), qol, k_in.data(), kil, k_out.data(), kol,
                        positions, dir, parallel);
}

}  // namespace rotary

#endif  // ROTARY_APPLY_HPP
