// rotary — re-rotating keys that are already rotated (KV-cache maintenance), exact in double angles.
//
//   shift_keys(rope, keys, delta, heads)             context shift: keys rotated at m become keys at m+delta
//   shift_keys(rope, keys, deltas, heads)            one delta per token (int64 array; any sign)
//   rerotate_keys(from, to, keys, positions, heads)  keys rotated with from's frequencies at m become keys
//                                                    rotated with to's frequencies at m (longrope short->long
//                                                    switch, dynamic-NTK base change, any theta_A -> theta_B)
// plus *_strided variants over raw pointers + StridedLayout, all in place, f32/f64/f16/bf16 storage
// (the Rope<T> storage type), with an optional trailing ParallelFor.
//
// Math. R_{m+delta} = R_delta R_m, so a shift is one rotation by delta*theta_j; from A to B at position m
// the rotation is R^B_m (R^A_m)^-1, i.e. by m*(thetaB_j - thetaA_j). Neither angle is ever formed in
// float: delta*theta_j is reduced exactly (detail/exact_angle.hpp, any int64 delta); for A->B both
// m*thetaA_j and m*thetaB_j are reduced exactly and combined in double with the angle-difference
// identities cos(b-a) = cos b cos a + sin b sin a, sin(b-a) = sin b cos a - cos b sin a (error a few
// double ulps), then rounded once to the compute type. The keys are never un-rotated through float:
// each stored key is read once, rotated once by the combined angle, and rounded once, so the result
// equals rotating the original key with B at m up to the rounding already in the stored key
// (about 2 ulp of the key's scale in float; the stored-precision rounding for f16/bf16).
//
// Attention factor. A table built with AttentionFactor::fold leaves its factor a in the keys it
// rotated. rerotate_keys scales by (to folds ? a_B : 1) / (from folds ? a_A : 1), so the result carries
// exactly what `to` would have put there. shift_keys never scales (same frequencies).
//
// Only the Rope's spec (head_dim, rotary_dim, pairing) and frequencies (cache().theta(),
// attention_factor()) are used: its cached positions do not limit m or delta.
#ifndef ROTARY_REROTATE_HPP
#define ROTARY_REROTATE_HPP

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "apply.hpp"
#include "config.hpp"
#include "detail/exact_angle.hpp"
#include "detail/format.hpp"
#include "detail/driver/driver.hpp"
#include "detail/kernels/kernel_args.hpp"
#include "dtype.hpp"
#include "parallel.hpp"
#include "positions.hpp"
#include "rope.hpp"
#include "types.hpp"

namespace rotary {

namespace detail {

inline std::vector<Turns> turns_of(const std::vector<double>& theta) {
  std::vector<Turns> t(theta.size());
  for (std::size_t j = 0; j < theta.size(); ++j) t[j] = to_turns(theta[j]);
  return t;
}

// The driver's row source of a re-rotation: token t's row from row_of(t, row) (rotary_dim values in
// the cache layout; safe to call concurrently), made per block like cache-free rows.
template <class C, class RowOf>
struct PerTokenRows {
  static constexpr bool kTable = false;
  static constexpr std::int64_t kBlock = RowGenerator<C>::kBlock;
  struct Scratch {};
  const RowOf* row_of;
  std::int64_t rotary_dim;
  Positions positions;  // checked like apply()'s (the re-rotation's positions, or contiguous)
  Positions deltas;     // shift_keys' per-token deltas (checked by the caller), or contiguous: none
  std::string check(std::int64_t tokens, bool /*fused*/) const {
    return check_positions(positions, tokens, static_cast<const CosSinCache<C>*>(nullptr));
  }
  // row_of reads the positions or the deltas block by block while the keys are written.
  ReadExtents reads(std::int64_t tokens) const noexcept {
    ReadExtents r = positions_read(positions, tokens);
    r.add("deltas", positions_extent(deltas, tokens));
    return r;
  }
  static Scratch scratch() noexcept { return {}; }
  static constexpr bool separate_key_rows() noexcept { return false; }
  void fill(std::int64_t from, std::int64_t t0, std::int64_t t1, C* rows, C* /*key_rows*/,
            Scratch& /*scratch*/) const {
    for (std::int64_t t = t0; t < t1; ++t) (*row_of)(t, rows + (t - from) * rotary_dim);
  }
};

// Keys in place, validated like apply() ("keys"), rows from row_of, which reads positions or deltas
// (arrays, or contiguous for none): no key may share memory with either.
template <class T, class RowOf>
void rerotate_rows(const Rope<T>& rope, T* x, const StridedLayout& l, const Positions& positions,
                   const Positions& deltas, const RowOf& row_of, const ParallelFor& parallel) {
  KernelArgs<T> a = call_args(rope.head_dim(), rope.rotary_dim(), rope.pairing(), make_stream<T>(x, l, x, l),
                              StreamArgs<T>{}, l.tokens, Direction::forward);
  check_and_dispatch(true, PerTokenRows<compute_t<T>, RowOf>{&row_of, rope.rotary_dim(), positions, deltas}, a, parallel,
        "keys");
}

// Row of the rotation by delta*theta_j (exact for any int64 delta).
template <class C>
void shift_row(std::int64_t delta, const std::vector<Turns>& turns, C* row) noexcept {
  const auto h = static_cast<std::int64_t>(turns.size());
  for (std::int64_t j = 0; j < h; ++j) {
    double s = 0.0;
    double c = 0.0;
    exact_sincos(delta, turns[static_cast<std::size_t>(j)], s, c);
    row[j] = static_cast<C>(c);
    row[h + j] = static_cast<C>(s);
  }
}

// Row of the rotation by m*(thetaB_j - thetaA_j), times scale.
template <class C>
void rerotate_row(std::int64_t m, const std::vector<Turns>& a, const std::vector<Turns>& b, double scale,
                  C* row) noexcept {
  const auto h = static_cast<std::int64_t>(a.size());
  for (std::int64_t j = 0; j < h; ++j) {
    double sa = 0.0;
    double ca = 0.0;
    double sb = 0.0;
    double cb = 0.0;
    exact_sincos(m, a[static_cast<std::size_t>(j)], sa, ca);
    exact_sincos(m, b[static_cast<std::size_t>(j)], sb, cb);
    const double c = cb * ca + sb * sa;  // cos(b - a)
    const double s = sb * ca - cb * sa;  // sin(b - a)
    row[j] = static_cast<C>(c * scale);
    row[h + j] = static_cast<C>(s * scale);
  }
}

template <class T>
void shift_impl(const Rope<T>& rope, T* x, const StridedLayout& l, std::int64_t delta, const ParallelFor& parallel) {
  using C = compute_t<T>;
  std::vector<C> row(static_cast<std::size_t>(rope.rotary_dim()));
  shift_row(delta, turns_of(rope.cache().theta()), row.data());
  const std::size_t bytes = row.size() * sizeof(C);
  const auto row_of = [&row, bytes](std::int64_t, C* out) { std::memcpy(out, row.data(), bytes); };
  rerotate_rows(rope, x, l, Positions::contiguous(0), Positions::contiguous(0), row_of, parallel);
}

template <class T>
void shift_impl(const Rope<T>& rope, T* x, const StridedLayout& l, const Positions& deltas,
                const ParallelFor& parallel) {
  using C = compute_t<T>;
  if (deltas.is_contiguous())
    throw error("deltas must be an int32/int64 array, one per token (for one shift of all tokens pass an integer)");
  require(true, [&] { return check_position_array(deltas, l.tokens, "deltas"); });
  const std::vector<Turns> turns = turns_of(rope.cache().theta());
  const auto row_of = [&turns, &deltas](std::int64_t t, C* out) { shift_row(deltas[t], turns, out); };
  rerotate_rows(rope, x, l, Positions::contiguous(0), deltas, row_of, parallel);
}

template <class T>
void rerotate_impl(const Rope<T>& from, const Rope<T>& to, T* x, const StridedLayout& l, const Positions& positions,
                   const ParallelFor& parallel) {
  using C = compute_t<T>;
  if (from.head_dim() != to.head_dim() || from.rotary_dim() != to.rotary_dim() || from.pairing() != to.pairing())
    throw error(concat("rerotate: the two ropes differ in geometry (head_dim ", from.head_dim(), " vs ",
                       to.head_dim(), ", rotary_dim ", from.rotary_dim(), " vs ", to.rotary_dim(),
                       ", pairing ", from.pairing() == to.pairing() ? "same" : "different", ")"));
  const double scale = (to.cache().attention_factor_folded() ? to.cache().attention_factor() : 1.0) /
                       (from.cache().attention_factor_folded() ? from.cache().attention_factor() : 1.0);
  const std::vector<Turns> ta = turns_of(from.cache().theta());
  const std::vector<Turns> tb = turns_of(to.cache().theta());
  const auto row_of = [&ta, &tb, &positions, scale](std::int64_t t, C* out) {
    rerotate_row(positions[t], ta, tb, scale, out);
  };
  rerotate_rows(from, x, l, positions, Positions::contiguous(0), row_of, parallel);
}

}  // namespace detail

// ---- context shift ------------------------------------------------------------------------------

// Keys (tokens*heads rows of head_dim, already rotated by `rope` at some positions m) become the keys
// at m + delta. delta may be negative (the usual context shift discards a prefix: delta < 0).
template <class T>
void shift_keys(const Rope<T>& rope, detail::identity_t<RowsRef<T>> keys, std::int64_t delta, std::int64_t heads,
                const ParallelFor& parallel = {}) {
  const StridedLayout l = detail::rows_layout(true, keys, heads, rope.head_dim(), "keys");
  detail::shift_impl<T>(rope, keys.data(), l, delta, parallel);
}

// One delta per token (deltas: an int32/int64 array of `tokens` values, any sign).
template <class T>
void shift_keys(const Rope<T>& rope, detail::identity_t<RowsRef<T>> keys, const Positions& deltas,
                std::int64_t heads, const ParallelFor& parallel = {}) {
  const StridedLayout l = detail::rows_layout(true, keys, heads, rope.head_dim(), "keys");
  detail::shift_impl<T>(rope, keys.data(), l, deltas, parallel);
}

template <class T>
void shift_keys_strided(const Rope<T>& rope, detail::identity_t<T>* keys, const StridedLayout& layout,
                        std::int64_t delta, const ParallelFor& parallel = {}) {
  detail::shift_impl<T>(rope, keys, layout, delta, parallel);
}

template <class T>
void shift_keys_strided(const Rope<T>& rope, detail::identity_t<T>* keys, const StridedLayout& layout,
                        const Positions& deltas, const ParallelFor& parallel = {}) {
  detail::shift_impl<T>(rope, keys, layout, deltas, parallel);
}

// ---- change of frequencies --------------------------------------------------------------------

// Keys rotated by `from` at positions[t] become the keys `to` would have produced at positions[t].
// from and to must share head_dim, rotary_dim and pairing; only their frequencies (and folded
// attention factors) differ.
template <class T>
void rerotate_keys(const Rope<T>& from, const Rope<T>& to, detail::identity_t<RowsRef<T>> keys,
                   const Positions& positions, std::int64_t heads, const ParallelFor& parallel = {}) {
  const StridedLayout l = detail::rows_layout(true, keys, heads, from.head_dim(), "keys");
  detail::rerotate_impl<T>(from, to, keys.data(), l, positions, parallel);
}

template <class T>
void rerotate_keys_strided(const Rope<T>& from, const Rope<T>& to, detail::identity_t<T>* keys,
                           const StridedLayout& layout, const Positions& positions,
                           const ParallelFor& parallel = {}) {
  detail::rerotate_impl<T>(from, to, keys, layout, positions, parallel);
}

}  // namespace rotary

#endif  // ROTARY_REROTATE_HPP
