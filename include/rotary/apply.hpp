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
#include <cstdint>
#include <type_traits>

#include "cache.hpp"
#include "config.hpp"
#include "detail/driver/checks.hpp"
#include "detail/driver/driver.hpp"
#include "detail/kernels/kernel_args.hpp"
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

// ---- rotators -----------------------------------------------------------------------------------
// A rotator is anything the entry points below accept as their first argument: Rope<T> (here),
// MultiAxisRope<T> (multi_axis.hpp), XPos<T>'s query and key views (xpos.hpp). It has head_dim(),
// rotary_dim() and pairing(), and a rotator_traits specialisation naming its storage type, its
// positions type and how it makes a call's row source (detail/driver/driver.hpp):
//   template <class F> static void with_rows(const R&, const positions_type&, Direction, F&& f)
// calls f(source) once. Every entry point family (in place / out of place, Eigen rows / strided /
// batch / varlen, q / q+k, checked / unchecked) is written once, below and in layouts.hpp, for all.
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

// One call of rotator r: streams q and (optional) k, validated and run by the driver.
template <class R, class T>
void rotate(bool checked, const R& r, const StreamArgs<T>& q, const StreamArgs<T>& k, std::int64_t tokens,
            const rotator_positions_t<R>& p, Direction dir, const ParallelFor& parallel) {
  const KernelArgs<T> a = call_args(r.head_dim(), r.rotary_dim(), r.pairing(), q, k, tokens, dir);
  rotator_traits<R>::with_rows(r, p, dir, [&](const auto& src) { drive(checked, src, a, parallel); });
}

template <class R, class T>
void strided(bool checked, const R& r, const T* in, const StridedLayout& il, T* out, const StridedLayout& ol,
             const rotator_positions_t<R>& p, Direction dir, const ParallelFor& parallel) {
  require(checked, [&] { return check_layouts("", il, ol); });
  rotate(checked, r, make_stream(in, il, out, ol), StreamArgs<T>{}, il.tokens, p, dir, parallel);
}

// q and k layouts of a fused strided call: k_in.heads == 0 means no key; negative is refused (it
// must never read as "no key" and leave k unrotated).
inline std::string check_strided_qk_layouts(const StridedLayout& qil, const StridedLayout& qol,
                                            const StridedLayout& kil, const StridedLayout& kol) {
  if (kil.heads < 0) return concat("k heads (", kil.heads, ") must be >= 0 (0: no key)");
  return check_qk_layouts(qil, qol, kil, kol);
}

// The kernel arguments of a fused strided call (layouts checked by check_strided_qk_layouts).
template <class R, class T>
KernelArgs<T> strided_qk_args(const R& r, const T* q_in, const StridedLayout& qil, T* q_out, const StridedLayout& qol,
                              const T* k_in, const StridedLayout& kil, T* k_out, const StridedLayout& kol,
                              Direction dir) noexcept {
  StreamArgs<T> k;
  if (kil.heads != 0) k = make_stream(k_in, kil, k_out, kol);
  return call_args(r.head_dim(), r.rotary_dim(), r.pairing(), make_stream(q_in, qil, q_out, qol), k, qil.tokens, dir);
}

template <class R, class T>
void strided_qk(bool checked, const R& r, const T* q_in, const StridedLayout& qil, T* q_out,
                const StridedLayout& qol, const T* k_in, const StridedLayout& kil, T* k_out,
                const StridedLayout& kol, const rotator_positions_t<R>& p, Direction dir,
                const ParallelFor& parallel) {
  require(checked, [&] { return check_strided_qk_layouts(qil, qol, kil, kol); });
  const KernelArgs<T> a = strided_qk_args(r, q_in, qil, q_out, qol, k_in, kil, k_out, kol, dir);
  rotator_traits<R>::with_rows(r, p, dir, [&](const auto& src) { drive(checked, src, a, parallel); });
}

// The kernel arguments of a call on a table Rope, rows included: for tests and benchmarks that
// drive kernels directly (no validation).
template <class T>
KernelArgs<T> make_args(const Rope<T>& rope, const StreamArgs<T>& q, const StreamArgs<T>& k, std::int64_t tokens,
                        const Positions& positions, Direction dir) noexcept {
  KernelArgs<T> a = call_args(rope.head_dim(), rope.rotary_dim(), rope.pairing(), q, k, tokens, dir);
  a.rows = RowSource<compute_t<T>>::table(rope.cache(), positions);
  return a;
}
template <class T>
KernelArgs<T> make_args(const Rope<T>& rope, const T* in, const StridedLayout& il, T* out, const StridedLayout& ol,
                        const Positions& positions, Direction dir) noexcept {
  return make_args(rope, make_stream(in, il, out, ol), StreamArgs<T>{}, il.tokens, positions, dir);
}

// Eigen rows: in and out views (the same view for in place).
template <class R, class T>
void rows(bool checked, const R& r, const ConstRowsRef<T>& in, RowsRef<T>& out, bool in_place,
          const rotator_positions_t<R>& p, std::int64_t heads, Direction dir, const ParallelFor& parallel) {
  const StridedLayout il = layout_of(checked, in, heads, r.head_dim(), in_place ? "x" : "input");
  const StridedLayout ol = in_place ? il : layout_of(checked, out, heads, r.head_dim(), "output");
  strided<R, T>(checked, r, in_place ? out.data() : in.data(), il, out.data(), ol, p, dir, parallel);
}

template <class R, class T>
void rows_qk(bool checked, const R& r, const ConstRowsRef<T>* q_in, RowsRef<T>& q_out,
             const ConstRowsRef<T>* k_in, RowsRef<T>& k_out, const rotator_positions_t<R>& p,
             std::int64_t q_heads, std::int64_t k_heads, Direction dir, const ParallelFor& parallel) {
  const bool in_place = q_in == nullptr;  // then k_in is null too
  const StridedLayout qil = in_place ? layout_of(checked, q_out, q_heads, r.head_dim(), "q")
                                     : layout_of(checked, *q_in, q_heads, r.head_dim(), "q input");
  const StridedLayout qol = in_place ? qil : layout_of(checked, q_out, q_heads, r.head_dim(), "q output");
  StridedLayout kil;
  StridedLayout kol;
  if (k_heads != 0) {
    kil = in_place ? layout_of(checked, k_out, k_heads, r.head_dim(), "k")
                   : layout_of(checked, *k_in, k_heads, r.head_dim(), "k input");
    kol = in_place ? kil : layout_of(checked, k_out, k_heads, r.head_dim(), "k output");
  }
  strided_qk<R, T>(checked, r, in_place ? q_out.data() : q_in->data(), qil, q_out.data(), qol,
                   in_place ? k_out.data() : k_in->data(), kil, k_out.data(), kol, p, dir, parallel);
}

}  // namespace detail

// ---- the entry points, for every rotator ----------------------------------------------------------
// R is the rotator; T (never given) its storage type, P its positions type.
#define ROTARY_DETAIL_ROTATOR_TEMPLATE                                       \
  template <class R, class T = detail::rotator_value_t<R>,                   \
            class P = detail::rotator_positions_t<R>>

// Raw pointers + strides.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_strided(const R& rope, const detail::identity_t<T>* in, const StridedLayout& in_layout,
                   detail::identity_t<T>* out, const StridedLayout& out_layout, const P& positions,
                   Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::strided<R, T>(true, rope, in, in_layout, out, out_layout, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_strided(const R& rope, detail::identity_t<T>* x, const StridedLayout& layout, const P& positions,
                   Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::strided<R, T>(true, rope, x, layout, x, layout, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_strided_unchecked(const R& rope, const detail::identity_t<T>* in, const StridedLayout& in_layout,
                             detail::identity_t<T>* out, const StridedLayout& out_layout, const P& positions,
                             Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::strided<R, T>(false, rope, in, in_layout, out, out_layout, positions, dir, parallel);
}

// Fused q+k over raw buffers. k_in_layout.heads == 0: no key (k pointers ignored); negative is refused.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_strided(const R& rope, const detail::identity_t<T>* q_in, const StridedLayout& q_in_layout,
                      detail::identity_t<T>* q_out, const StridedLayout& q_out_layout,
                      const detail::identity_t<T>* k_in, const StridedLayout& k_in_layout,
                      detail::identity_t<T>* k_out, const StridedLayout& k_out_layout, const P& positions,
                      Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::strided_qk<R, T>(true, rope, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out,
                           k_out_layout, positions, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_strided_unchecked(const R& rope, const detail::identity_t<T>* q_in, const StridedLayout& q_in_layout,
                                detail::identity_t<T>* q_out, const StridedLayout& q_out_layout,
                                const detail::identity_t<T>* k_in, const StridedLayout& k_in_layout,
                                detail::identity_t<T>* k_out, const StridedLayout& k_out_layout,
                                const P& positions, Direction dir = Direction::forward,
                                const ParallelFor& parallel = {}) {
  detail::strided_qk<R, T>(false, rope, q_in, q_in_layout, q_out, q_out_layout, k_in, k_in_layout, k_out,
                           k_out_layout, positions, dir, parallel);
}

// Eigen rows: (tokens * heads) x head_dim, row-major, outer stride allowed.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply(const R& rope, detail::identity_t<RowsRef<T>> x, const P& positions, std::int64_t heads,
           Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::rows<R, T>(true, rope, x, x, true, positions, heads, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply(const R& rope, detail::identity_t<ConstRowsRef<T>> in, detail::identity_t<RowsRef<T>> out,
           const P& positions, std::int64_t heads, Direction dir = Direction::forward,
           const ParallelFor& parallel = {}) {
  detail::rows<R, T>(true, rope, in, out, false, positions, heads, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_unchecked(const R& rope, detail::identity_t<RowsRef<T>> x, const P& positions, std::int64_t heads,
                     Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::rows<R, T>(false, rope, x, x, true, positions, heads, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_unchecked(const R& rope, detail::identity_t<ConstRowsRef<T>> in, detail::identity_t<RowsRef<T>> out,
                     const P& positions, std::int64_t heads, Direction dir = Direction::forward,
                     const ParallelFor& parallel = {}) {
  detail::rows<R, T>(false, rope, in, out, false, positions, heads, dir, parallel);
}

// Fused q+k in place: q is (tokens*q_heads) x head_dim, k is (tokens*k_heads) x head_dim.
// k_heads == 0: no key (k is ignored).
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk(const R& rope, detail::identity_t<RowsRef<T>> q, detail::identity_t<RowsRef<T>> k,
              const P& positions, std::int64_t q_heads, std::int64_t k_heads, Direction dir = Direction::forward,
              const ParallelFor& parallel = {}) {
  detail::rows_qk<R, T>(true, rope, nullptr, q, nullptr, k, positions, q_heads, k_heads, dir, parallel);
}

// Fused q+k out of place.
ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk(const R& rope, detail::identity_t<ConstRowsRef<T>> q_in, detail::identity_t<RowsRef<T>> q_out,
              detail::identity_t<ConstRowsRef<T>> k_in, detail::identity_t<RowsRef<T>> k_out, const P& positions,
              std::int64_t q_heads, std::int64_t k_heads, Direction dir = Direction::forward,
              const ParallelFor& parallel = {}) {
  detail::rows_qk<R, T>(true, rope, &q_in, q_out, &k_in, k_out, positions, q_heads, k_heads, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_unchecked(const R& rope, detail::identity_t<RowsRef<T>> q, detail::identity_t<RowsRef<T>> k,
                        const P& positions, std::int64_t q_heads, std::int64_t k_heads,
                        Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::rows_qk<R, T>(false, rope, nullptr, q, nullptr, k, positions, q_heads, k_heads, dir, parallel);
}

ROTARY_DETAIL_ROTATOR_TEMPLATE
void apply_qk_unchecked(const R& rope, detail::identity_t<ConstRowsRef<T>> q_in,
                        detail::identity_t<RowsRef<T>> q_out, detail::identity_t<ConstRowsRef<T>> k_in,
                        detail::identity_t<RowsRef<T>> k_out, const P& positions, std::int64_t q_heads,
                        std::int64_t k_heads, Direction dir = Direction::forward, const ParallelFor& parallel = {}) {
  detail::rows_qk<R, T>(false, rope, &q_in, q_out, &k_in, k_out, positions, q_heads, k_heads, dir, parallel);
}

// ---- Eigen rows the overloads above cannot take: a compile-time error naming the cause ----------------
// Without these, an Eigen::MatrixXf (column-major) or a const matrix as written rows, or rows of
// another scalar type, fails with "no matching function" and pages of candidates. Each overload below
// is viable only where no real one is (it is removed by SFINAE whenever the rows bind), and its body
// is a static_assert. Read-only rows of another layout still bind: ConstRowsRef copies them.
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
}  // namespace detail

#define ROTARY_DETAIL_ROWS_MISUSE_MESSAGE                                                                \
  "rotary: Eigen rows must be row-major, of the rotator's storage type T, with inner stride 1 "        \
  "(rotary::RowMatrix<T>, or an Eigen::Map / Block of one), and rows the call writes must not be const. " \
  "Eigen::MatrixXf is column-major: declare rotary::RowMatrix<float>."
#define ROTARY_DETAIL_ROWS_MISUSE(name)                                                                     \
  template <class R, class X, class P, class T = detail::rotator_value_t<R>,                               \
            std::enable_if_t<detail::unwritable_rows_v<X, T> && !detail::is_eigen_v<P>, int> = 0>          \
  void name(const R&, X&&, const P&, std::int64_t, Direction = Direction::forward, const ParallelFor& = {}) { \
    static_assert(detail::dependent_false_v<X>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);                        \
  }                                                                                                        \
  template <class R, class In, class Out, class P, class T = detail::rotator_value_t<R>,                   \
            std::enable_if_t<detail::is_eigen_v<In> && !detail::is_eigen_v<P> &&                          \
                                 (detail::unreadable_rows_v<In, T> || detail::unwritable_rows_v<Out, T>),  \
                             int> = 0>                                                                     \
  void name(const R&, In&&, Out&&, const P&, std::int64_t, Direction = Direction::forward,                 \
            const ParallelFor& = {}) {                                                                     \
    static_assert(detail::dependent_false_v<In>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);                       \
  }
#define ROTARY_DETAIL_QK_ROWS_MISUSE(name)                                                                  \
  template <class R, class Q, class K, class P, class T = detail::rotator_value_t<R>,                      \
            std::enable_if_t<detail::is_eigen_v<Q> && detail::is_eigen_v<K> && !detail::is_eigen_v<P> &&   \
                                 (detail::unwritable_rows_v<Q, T> || detail::unwritable_rows_v<K, T>),     \
                             int> = 0>                                                                     \
  void name(const R&, Q&&, K&&, const P&, std::int64_t, std::int64_t, Direction = Direction::forward,      \
            const ParallelFor& = {}) {                                                                     \
    static_assert(detail::dependent_false_v<Q>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);                        \
  }                                                                                                        \
  template <class R, class QI, class QO, class KI, class KO, class P, class T = detail::rotator_value_t<R>, \
            std::enable_if_t<detail::is_eigen_v<QI> && detail::is_eigen_v<KI> && !detail::is_eigen_v<P> && \
                                 (detail::unreadable_rows_v<QI, T> || detail::unwritable_rows_v<QO, T> ||  \
                                  detail::unreadable_rows_v<KI, T> || detail::unwritable_rows_v<KO, T>),   \
                             int> = 0>                                                                     \
  void name(const R&, QI&&, QO&&, KI&&, KO&&, const P&, std::int64_t, std::int64_t,                        \
            Direction = Direction::forward, const ParallelFor& = {}) {                                     \
    static_assert(detail::dependent_false_v<QI>, ROTARY_DETAIL_ROWS_MISUSE_MESSAGE);                       \
  }

ROTARY_DETAIL_ROWS_MISUSE(apply)
ROTARY_DETAIL_ROWS_MISUSE(apply_unchecked)
ROTARY_DETAIL_QK_ROWS_MISUSE(apply_qk)
ROTARY_DETAIL_QK_ROWS_MISUSE(apply_qk_unchecked)
#undef ROTARY_DETAIL_QK_ROWS_MISUSE
#undef ROTARY_DETAIL_ROWS_MISUSE
// (ROTARY_DETAIL_ROWS_MISUSE_MESSAGE stays defined: XPos's members refuse the same rows with it.)

// ---- compiled once (optional) ----------------------------------------------------------------------
// A Rope's call paths for each storage type (drivers, checks, row sources), listed like the kernels
// (registry.hpp): KW is `extern template` under ROTARY_SEPARATE_KERNELS, `template` in the one TU that
// includes <rotary/instantiate_kernels.hpp>. A TU with a few calls then compiles only the thin entry
// points above (docs/compile-time.md).
// NOLINTBEGIN(bugprone-macro-parentheses): T is a type, KW a keyword
#define ROTARY_DETAIL_ROPE_PATHS(KW, T)                                                                     \
  KW class Rope<T>;                                                                                         \
  KW void detail::rotate<Rope<T>, T>(bool, const Rope<T>&, const detail::StreamArgs<T>&,                   \
                                     const detail::StreamArgs<T>&, std::int64_t, const Positions&, Direction, \
                                     const ParallelFor&);                                                    \
  KW void detail::strided<Rope<T>, T>(bool, const Rope<T>&, const T*, const StridedLayout&, T*,             \
                                      const StridedLayout&, const Positions&, Direction, const ParallelFor&); \
  KW void detail::strided_qk<Rope<T>, T>(bool, const Rope<T>&, const T*, const StridedLayout&, T*,          \
                                         const StridedLayout&, const T*, const StridedLayout&, T*,           \
                                         const StridedLayout&, const Positions&, Direction, const ParallelFor&); \
  KW void detail::rows<Rope<T>, T>(bool, const Rope<T>&, const ConstRowsRef<T>&, RowsRef<T>&, bool,         \
                                   const Positions&, std::int64_t, Direction, const ParallelFor&);          \
  KW void detail::rows_qk<Rope<T>, T>(bool, const Rope<T>&, const ConstRowsRef<T>*, RowsRef<T>&,            \
                                      const ConstRowsRef<T>*, RowsRef<T>&, const Positions&, std::int64_t,  \
                                      std::int64_t, Direction, const ParallelFor&);
#define ROTARY_DETAIL_API_INSTANCES(KW)          \
  KW class CosSinCache<float>;                   \
  KW class CosSinCache<double>;                  \
  ROTARY_DETAIL_ROPE_PATHS(KW, float)            \
  ROTARY_DETAIL_ROPE_PATHS(KW, double)           \
  ROTARY_DETAIL_ROPE_PATHS(KW, ::rotary::f16)    \
  ROTARY_DETAIL_ROPE_PATHS(KW, ::rotary::bf16)
// NOLINTEND(bugprone-macro-parentheses)

#if ROTARY_DETAIL_DECLARE_KERNELS_ONLY
ROTARY_DETAIL_API_INSTANCES(extern template)
#endif

}  // namespace rotary

#endif  // ROTARY_APPLY_HPP
