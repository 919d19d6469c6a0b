// rotary — the call paths of one sequence (a tokens x heads block, q alone or q and k): each entry
// point of apply.hpp reaches the driver through one of these, checked or not. Also the list of
// paths compiled once under ROTARY_SEPARATE_KERNELS (instantiate_kernels.hpp).
#ifndef ROTARY_DETAIL_CALLS_SEQUENCE_HPP
#define ROTARY_DETAIL_CALLS_SEQUENCE_HPP

#include "../guard.hpp"

#include <cstdint>
#include <string>

#include "../../cache.hpp"
#include "../../dtype.hpp"
#include "../../parallel.hpp"
#include "../../positions.hpp"
#include "../../rope.hpp"
#include "../../rotator.hpp"
#include "../../types.hpp"
#include "../kernels/kernel_args.hpp"
#include "../driver/checks.hpp"
#include "../driver/driver.hpp"

namespace rotary {

namespace detail {

template <class R>
using rotator_value_t = typename rotator_traits<R>::value_type;
template <class R>
using rotator_positions_t = typename rotator_traits<R>::positions_type;

// One call of rotator r: streams q and (optional) k, validated and run by the driver.
template <class R, class T>
void rotate_sequence(bool checked, const R& r, const StreamArgs<T>& q, const StreamArgs<T>& k, std::int64_t tokens,
            const rotator_positions_t<R>& p, Direction dir, const ParallelFor& parallel) {
  KernelArgs<T> a = call_args(r.head_dim(), r.rotary_dim(), r.pairing(), q, k, tokens, dir);
  rotator_traits<R>::with_rows(r, p, dir, [&](const auto& src) { check_and_dispatch(checked, src, a, parallel); });
}

template <class R, class T>
void strided_sequence(bool checked, const R& r, const T* in, const StridedLayout& il, T* out, const StridedLayout& ol,
             const rotator_positions_t<R>& p, Direction dir, const ParallelFor& parallel) {
  require(checked, [&] { return check_layouts("", il, ol); });
  rotate_sequence(checked, r, make_stream(in, il, out, ol), StreamArgs<T>{}, il.tokens, p, dir, parallel);
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
void strided_qk_sequence(bool checked, const R& r, const T* q_in, const StridedLayout& qil, T* q_out,
                const StridedLayout& qol, const T* k_in, const StridedLayout& kil, T* k_out,
                const StridedLayout& kol, const rotator_positions_t<R>& p, Direction dir,
                const ParallelFor& parallel) {
  require(checked, [&] { return check_strided_qk_layouts(qil, qol, kil, kol); });
  KernelArgs<T> a = strided_qk_args(r, q_in, qil, q_out, qol, k_in, kil, k_out, kol, dir);
  rotator_traits<R>::with_rows(r, p, dir, [&](const auto& src) { check_and_dispatch(checked, src, a, parallel); });
}

// The kernel arguments of a call on a table Rope, rows included: for tests and benchmarks that
// drive kernels directly (no validation).
template <class T>
KernelArgs<T> make_args(const Rope<T>& rope, const StreamArgs<T>& q, const StreamArgs<T>& k, std::int64_t tokens,
                        const Positions& positions, Direction dir) noexcept {
  KernelArgs<T> a = call_args(rope.head_dim(), rope.rotary_dim(), rope.pairing(), q, k, tokens, dir);
  a.rows = CosSinRows<compute_t<T>>::table(rope.cache(), positions);
  return a;
}
template <class T>
KernelArgs<T> make_args(const Rope<T>& rope, const T* in, const StridedLayout& il, T* out, const StridedLayout& ol,
                        const Positions& positions, Direction dir) noexcept {
  return make_args(rope, make_stream(in, il, out, ol), StreamArgs<T>{}, il.tokens, positions, dir);
}

// Eigen rows: in and out views (the same view for in place).
template <class R, class T>
void rows_sequence(bool checked, const R& r, const ConstRowsRef<T>& in, RowsRef<T>& out, bool in_place,
          const rotator_positions_t<R>& p, std::int64_t heads, Direction dir, const ParallelFor& parallel) {
  const StridedLayout il = rows_layout(checked, in, heads, r.head_dim(), in_place ? "x" : "input");
  const StridedLayout ol = in_place ? il : rows_layout(checked, out, heads, r.head_dim(), "output");
  strided_sequence<R, T>(checked, r, in_place ? out.data() : in.data(), il, out.data(), ol, p, dir, parallel);
}

template <class R, class T>
void rows_qk_sequence(bool checked, const R& r, const ConstRowsRef<T>* q_in, RowsRef<T>& q_out,
             const ConstRowsRef<T>* k_in, RowsRef<T>& k_out, const rotator_positions_t<R>& p,
             std::int64_t q_heads, std::int64_t k_heads, Direction dir, const ParallelFor& parallel) {
  const bool in_place = q_in == nullptr;  // then k_in is null too
  const StridedLayout qil = in_place ? rows_layout(checked, q_out, q_heads, r.head_dim(), "q")
                                     : rows_layout(checked, *q_in, q_heads, r.head_dim(), "q input");
  const StridedLayout qol = in_place ? qil : rows_layout(checked, q_out, q_heads, r.head_dim(), "q output");
  StridedLayout kil;
  StridedLayout kol;
  if (k_heads != 0) {
    kil = in_place ? rows_layout(checked, k_out, k_heads, r.head_dim(), "k")
                   : rows_layout(checked, *k_in, k_heads, r.head_dim(), "k input");
    kol = in_place ? kil : rows_layout(checked, k_out, k_heads, r.head_dim(), "k output");
  }
  strided_qk_sequence<R, T>(checked, r, in_place ? q_out.data() : q_in->data(), qil, q_out.data(), qol,
                   in_place ? k_out.data() : k_in->data(), kil, k_out.data(), kol, p, dir, parallel);
}

}  // namespace detail

// ---- compiled once (optional) ----------------------------------------------------------------------
// A Rope's call paths for each storage type (drivers, checks, row sources), listed like the kernels
// (registry.hpp): KW is `extern template` under ROTARY_SEPARATE_KERNELS, `template` in the one TU that
// includes <rotary/instantiate_kernels.hpp>. A TU with a few calls then compiles only the thin entry
// points above (docs/compile-time.md).
// NOLINTBEGIN(bugprone-macro-parentheses): T is a type, KW a keyword
#define ROTARY_DETAIL_ROPE_PATHS(KW, T)                                                                     \
  KW class Rope<T>;                                                                                         \
  KW void detail::rotate_sequence<Rope<T>, T>(bool, const Rope<T>&, const detail::StreamArgs<T>&,                   \
                                     const detail::StreamArgs<T>&, std::int64_t, const Positions&, Direction, \
                                     const ParallelFor&);                                                    \
  KW void detail::strided_sequence<Rope<T>, T>(bool, const Rope<T>&, const T*, const StridedLayout&, T*,             \
                                      const StridedLayout&, const Positions&, Direction, const ParallelFor&); \
  KW void detail::strided_qk_sequence<Rope<T>, T>(bool, const Rope<T>&, const T*, const StridedLayout&, T*,          \
                                         const StridedLayout&, const T*, const StridedLayout&, T*,           \
                                         const StridedLayout&, const Positions&, Direction, const ParallelFor&); \
  KW void detail::rows_sequence<Rope<T>, T>(bool, const Rope<T>&, const ConstRowsRef<T>&, RowsRef<T>&, bool,         \
                                   const Positions&, std::int64_t, Direction, const ParallelFor&);          \
  KW void detail::rows_qk_sequence<Rope<T>, T>(bool, const Rope<T>&, const ConstRowsRef<T>*, RowsRef<T>&,            \
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

#endif  // ROTARY_DETAIL_CALLS_SEQUENCE_HPP
