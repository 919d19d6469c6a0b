// Scalar kernels: the bit-exact reference for every SIMD kernel.
//
// One pair (x0, x1) with cos c and sin s (s negated for the inverse rotation, which is exact):
//   y0 = fma(x0, c, -(x1 * s))      y1 = fma(x1, c, x0 * s)
// The product x1*s (resp. x0*s) is rounded, then one fused multiply-add. This operation order is
// fixed: x86 fmaddsub(x, c, swap(x) * s) and NEON vfma/vfms compute exactly the same values, so the
// SIMD kernels must equal these bit for bit.
#ifndef ROTARY_DETAIL_KERNELS_SCALAR_HPP
#define ROTARY_DETAIL_KERNELS_SCALAR_HPP

#include "../guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "../convert.hpp"
#include "../quantize.hpp"
#include "entries.hpp"
#include "kernel_args.hpp"

namespace rotary::detail::scalar {

template <class T>
inline void rotate_pair(T x0, T x1, T c, T s, T& y0, T& y1) noexcept {
  y0 = fused_multiply_add(x0, c, -(x1 * s));
  y1 = fused_multiply_add(x1, c, x0 * s);
}

// One head row in storage type T, computed in C = compute_t<T>: cos_0..cos_{h-1} at cs.c,
// sin_0..sin_{h-1} at cs.s, h = rotary_dim/2; sign = +1 or -1. `in` and `out` are the same row or
// disjoint.
template <class T, class C = compute_t<T>>
inline void rotate_row(Pairing pairing, const CosSin<C>& cs, std::int64_t h, C sign, const T* in, T* out) noexcept {
  const C* c = cs.c;
  const C* s = cs.s;
  const std::int64_t step = pairing == Pairing::half_split ? 1 : 2;  // index of pair j's first element
  const std::int64_t second = pairing == Pairing::half_split ? h : 1;  // offset of its second element
  for (std::int64_t j = 0; j < h; ++j) {
    const std::int64_t i0 = j * step;
    C y0;
    C y1;
    rotate_pair<C>(to_compute(in[i0]), to_compute(in[i0 + second]), c[j], sign * s[j], y0, y1);
    out[i0] = from_compute<T>(y0);
    out[i0 + second] = from_compute<T>(y1);
  }
}

// Copies the pass-through coordinates [rotary_dim, head_dim) unless rotating in place.
template <class T>
inline void copy_tail(const T* in, T* out, std::int64_t rotary_dim, std::int64_t head_dim) noexcept {
  if (in != out && head_dim > rotary_dim)
    std::memcpy(static_cast<void*>(out + rotary_dim), static_cast<const void*>(in + rotary_dim),
                static_cast<std::size_t>(head_dim - rotary_dim) * sizeof(T));
}

// Tokens [t0, t1) of a call: each token's cos/sin row is looked up once and used for all its heads
// (q's, then k's). Not `inline`: ROTARY_SEPARATE_KERNELS declares it extern (registry.hpp).
template <class T>
void rotate_tokens(const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  using C = compute_t<T>;
  const std::int64_t h = a.rotary_dim / 2;
  const C sign = a.inverse ? C(-1) : C(1);
  const CallStreams<T> rows(a);
  for (std::int64_t t = t0; t < t1; ++t) {
    const CosSin<C> cs = a.cos_sin_row(t);
    for (TokenHeads<T> w(rows, t); w.next();) {
      rotate_row<T>(a.pairing, cs, h, sign, w.in(), w.out());
      copy_tail(w.in(), w.out(), a.rotary_dim, a.head_dim);
    }
  }
}

// Per-head RMSNorm rows (NormArgs): the accumulation order of kNormAccumulators, then
// y = round_T((x * factor) * weight). Not `inline`, like rotate_tokens.
template <class T>
void norm_rows(const NormArgs<T>& a) noexcept {
  using C = compute_t<T>;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const T* x = a.in + r * a.in_stride;
    T* y = a.out + r * a.out_stride;
    C acc[kNormAccumulators] = {};
    for (std::int64_t i = 0; i < a.n; ++i) {
      const C v = to_compute(x[i]);
      acc[i % kNormAccumulators] = fused_multiply_add(v, v, acc[i % kNormAccumulators]);
    }
    const C f = norm_factor(reduce_accumulators(acc), a.inv_n, a.eps);
    for (std::int64_t i = 0; i < a.n; ++i) {
      C v = opaque_register(to_compute(x[i]) * f);  // two roundings under any flags (simd_norm.hpp)
      if (a.weight != nullptr) v = v * a.weight[i];
      y[i] = from_compute<T>(v);
    }
  }
}

// One KV-cache row (CacheRowArgs): quantize.hpp's definitions, element by element. Not `inline`,
// like rotate_tokens.
template <class T>
void cache_row(const CacheRowArgs<T>& a) noexcept {
  Int8Inv inv;
  if (a.code == CacheCode::int8) {
    std::uint32_t m = 0;
    for (std::int64_t j = 0; j < a.n; ++j) m = std::max(m, abs_bits(a.in[j]));
    if (!int8_begin(a, m, inv)) return;
  }
  cache_codes(a, inv, 0);
}

}  // namespace rotary::detail::scalar

#endif  // ROTARY_DETAIL_KERNELS_SCALAR_HPP
