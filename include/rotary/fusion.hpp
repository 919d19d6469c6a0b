// rotary — fused attention prologues: RoPE with its neighbours in one pass over q, k and v.
//
// An engine's attention prologue is several passes over the same rows: a per-head norm of q and k
// (Qwen3, Gemma 3), RoPE, the key and value rows copied (converted, quantized) into the KV cache.
// Each call here does them all while a token's rows are in L1:
//
//   Prologue<T, E, W>               what one call does: q (rotated to q_out, in place allowed), k
//                                   (rotated to k_out and/or into k_cache), v (into v_cache), the
//                                   slots, a RMSNorm of q and k before RoPE (weight w or 1 + w), a
//                                   weightless RMS ("L2") norm after it (Llama 4), DeepSeek's
//                                   interleaved-in / half-split-out order
//   rope_prologue(rope, call, positions[, parallel])           checked; rope_prologue_unchecked
// and the named ops, each a Prologue filled in:
//   rope_kv_write(rope, q, q_layout, k, k_layout, v, v_layout, positions, slots, k_cache, v_cache)
//   qk_norm_rope(rope, q, q_layout, k, k_layout, QkNorm, positions)       (in place)
//   qkv_split_rope(rope, qkv, tokens, q_heads, kv_heads, positions, slots, k_cache, v_cache)
//   mla_rope(rope, q, MlaQuery, k_pe, latent, latent_dim, positions, slots, cache, interleaved_in)
//
// The result is, bit for bit, what rotary's unfused ops give one after another (rms_norm,
// apply_strided, write_kv_cache, then l2 norm): the same row functions and the same kernels in the
// same order, rounding to T between steps exactly where the unfused ops store a T tensor. So the
// fused ops are bit-identical across ISAs (scalar, AVX2, AVX-512, NEON) like every kernel.
// Rotation positions and storage slots are separate arguments: a token's position is where RoPE
// rotates it, its slot is where the cache stores it.
//
// Checked (rope_prologue and the named ops) refuse with rotary::error: shapes that disagree,
// head_dim other than the rotator's, slots outside the cache or written twice, sequence offsets that
// overflow a sequence, caches overlapping the vectors or each other, scales missing or given for a
// float cache, norm weights missing, eps <= 0, deinterleaving with an interleaved rotator, a rotator
// whose keys get rows of their own (xPos). The *_unchecked variants assert in debug builds only.
#ifndef ROTARY_FUSION_HPP
#define ROTARY_FUSION_HPP

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "apply.hpp"
#include "detail/fusion/checks.hpp"
#include "detail/fusion/runner.hpp"
#include "kv_cache.hpp"
#include "prologue.hpp"

namespace rotary {

// ---- entry points -----------------------------------------------------------------------------------

template <class R, class E, class W, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void rope_prologue(const R& rope, const Prologue<detail::identity_t<T>, E, W>& call, const P& positions,
                   const ParallelFor& parallel = {}) {
  detail::prologue(true, rope, call, positions, parallel);
}

template <class R, class E, class W, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void rope_prologue_unchecked(const R& rope, const Prologue<detail::identity_t<T>, E, W>& call, const P& positions,
                             const ParallelFor& parallel = {}) {
  detail::prologue(false, rope, call, positions, parallel);
}

// RoPE + KV-cache write (vLLM's fused rotary + reshape_and_cache): q rotated in place (q_layout.heads
// == 0: no q), k rotated into k_cache and v copied into v_cache at each token's slot (slot < 0, a
// padding token: q is still rotated, nothing is written to the caches).
template <class R, class E, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void rope_kv_write(const R& rope, detail::identity_t<T>* q, const StridedLayout& q_layout,
                   const detail::identity_t<T>* k, const StridedLayout& k_layout, const detail::identity_t<T>* v,
                   const StridedLayout& v_layout, const P& positions, const Slots& slots,
                   const KvCacheView<E>& k_cache, const KvCacheView<E>& v_cache, const ParallelFor& parallel = {}) {
  Prologue<T, E, T> c;
  c.rotate_q_in_place(q, q_layout);
  c.write_kv(k, k_layout, v, v_layout, k_cache, v_cache, slots);
  detail::prologue(true, rope, c, positions, parallel);
}

// QK RMSNorm + RoPE in place (Qwen3 / Gemma 3 / OLMo-style prologue): every q and k head row
// normalized with its weight, rounded to T, rotated. k_layout.heads == 0: q only.
template <class R, class W, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void qk_norm_rope(const R& rope, detail::identity_t<T>* q, const StridedLayout& q_layout, detail::identity_t<T>* k,
                  const StridedLayout& k_layout, const QkNorm<W>& norm, const P& positions,
                  const ParallelFor& parallel = {}) {
  Prologue<T, T, W> c;
  c.rotate_q_in_place(q, q_layout);
  c.k = k;
  c.k_layout = k_layout;
  c.k_out = k;
  c.k_out_layout = k_layout;
  c.norm_before_rope(norm);
  detail::prologue(true, rope, c, positions, parallel);
}

// Fused QKV split: qkv is [tokens, (q_heads + 2 * kv_heads) * head_dim] as the projection writes it
// (row stride qkv_stride >= that; 0: dense). q is rotated in place, k rotated into k_cache, v copied
// into v_cache. norm: optional QK-norm before RoPE (nullptr: none).
template <class R, class E, class W = detail::rotator_value_t<R>, class T = detail::rotator_value_t<R>,
          class P = detail::rotator_positions_t<R>>
void qkv_split_rope(const R& rope, detail::identity_t<T>* qkv, std::int64_t tokens, std::int64_t q_heads,
                    std::int64_t kv_heads, const P& positions, const Slots& slots, const KvCacheView<E>& k_cache,
                    const KvCacheView<E>& v_cache, const QkNorm<W>* norm = nullptr, std::ptrdiff_t qkv_stride = 0,
                    const ParallelFor& parallel = {}) {
  const std::int64_t d = rope.head_dim();
  // Before any arithmetic on the counts: negative ones, and a dense row past PTRDIFF_MAX, are refused
  // here (the prologue's checks see the views made from them). The packed v heads are d wide: a
  // v_cache of other rows would copy past them (the next head, the padding, the buffer's end).
  using detail::concat;
  if (tokens < 0 || q_heads < 0 || kv_heads < 0)
    throw error(concat("qkv_split_rope: tokens (", tokens, "), q_heads (", q_heads, ") and kv_heads (",
                       kv_heads, ") must be >= 0"));
  std::uint64_t heads_u = 0;
  std::uint64_t row_u = 0;
  if (detail::mul_overflows(2, static_cast<std::uint64_t>(kv_heads), heads_u) ||
      detail::add_overflows(heads_u, static_cast<std::uint64_t>(q_heads), heads_u) ||
      !detail::product_fits(row_u, heads_u, static_cast<std::uint64_t>(d)))
    throw error(concat("qkv_split_rope: (q_heads (", q_heads, ") + 2 x kv_heads (", kv_heads,
                       ")) x head_dim (", d, ") overflows ptrdiff_t: no buffer is that large"));
  if (kv_heads > 0 && v_cache.head_dim != d)
    throw error(concat("qkv_split_rope: v_cache rows are ", v_cache.head_dim,
                       " values; the packed v heads are head_dim (", d, ")"));
  const std::ptrdiff_t row = qkv_stride != 0 ? qkv_stride : static_cast<std::ptrdiff_t>(row_u);
  Prologue<T, E, W> c;
  c.rotate_q_in_place(qkv, {tokens, q_heads, row, d});
  c.write_kv(qkv + q_heads * d, {tokens, kv_heads, row, d}, qkv + (q_heads + kv_heads) * d,
             {tokens, kv_heads, row, d}, k_cache, v_cache, slots);
  if (norm != nullptr) c.norm_before_rope(*norm);
  detail::prologue(true, rope, c, positions, parallel);
}

// DeepSeek MLA's query: heads of nope_dim + rope_dim values each ([tokens, heads, nope_dim +
// rope_dim], token stride token_stride, 0: dense); RoPE acts on the last rope_dim of each head.
struct MlaQuery {
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t nope_dim;
  std::ptrdiff_t token_stride = 0;
};

// DeepSeek MLA decoupled RoPE: the rope slice of every query head rotated in place; the shared k_pe
// head ([tokens, rope_dim], row stride k_pe_stride) rotated into `cache` behind the compressed
// latent ([tokens, latent_dim], row stride latent_stride), which is copied in front of it: cache
// slots are rows [latent_dim | rope_dim] (a KvCacheView of one head of latent_dim + rope_dim
// values). interleaved_in: HF DeepSeek's convention, pairs (x0, x1).. in, half-split order out (the
// rotator must be half_split). The rotator's head_dim is rope_dim.
template <class R, class E, class T = detail::rotator_value_t<R>, class P = detail::rotator_positions_t<R>>
void mla_rope(const R& rope, detail::identity_t<T>* q, const MlaQuery& shape, const detail::identity_t<T>* k_pe,
              std::ptrdiff_t k_pe_stride, const detail::identity_t<T>* latent, std::ptrdiff_t latent_stride,
              const P& positions, const Slots& slots, const KvCacheView<E>& cache, bool interleaved_in,
              const ParallelFor& parallel = {}) {
  static_assert(cache_scales_of<E>() != CacheScales::per_row,
                "an int8 MLA cache would need one scale for the latent and one for k_pe per slot; use fp8 or 16-bit");
  if (std::string m = cache.check(); !m.empty()) throw error(detail::concat("MLA cache: ", m));
  const std::int64_t rope_dim = rope.head_dim();
  const std::int64_t latent_dim = cache.head_dim - rope_dim;
  if (cache.heads != 1 || latent_dim < 1)
    throw error(detail::concat("MLA cache must be one head of latent_dim + rope_dim (", rope_dim,
                               ") values per slot; it has ", cache.heads, " heads of ", cache.head_dim));
  // Before any arithmetic on the shape: q's view starts nope_dim values into each head
  if (shape.tokens < 0 || shape.heads < 0 || shape.nope_dim < 0)
    throw error(detail::concat("MLA query: tokens (", shape.tokens, "), heads (", shape.heads,
                               ") and nope_dim (", shape.nope_dim, ") must be >= 0"));
  std::uint64_t dense_u = 0;
  if (shape.nope_dim > std::numeric_limits<std::ptrdiff_t>::max() - rope_dim ||
      !detail::product_fits(dense_u, static_cast<std::uint64_t>(shape.heads),
                            static_cast<std::uint64_t>(shape.nope_dim + rope_dim)))
    throw error(detail::concat("MLA query: heads (", shape.heads, ") x (nope_dim (", shape.nope_dim,
                               ") + rope_dim (", rope_dim,
                               ")) overflows ptrdiff_t: no buffer is that large"));
  const std::ptrdiff_t head = shape.nope_dim + rope_dim;
  // The two side-by-side views of the checked cache: a view's column range of valid rows is valid (the
  // same strides, scales and blocks), so they are cut without strided()'s checks, which the call's own
  // cache checks repeat.
  KvCacheView<E> k_pe_view = cache;
  k_pe_view.data = cache.data + latent_dim;
  k_pe_view.head_dim = rope_dim;
  k_pe_view.head_stride = rope_dim;
  KvCacheView<E> latent_view = cache;
  latent_view.head_dim = latent_dim;
  latent_view.head_stride = latent_dim;
  Prologue<T, E, T> c;
  c.rotate_q_in_place(
      q + shape.nope_dim,
      {shape.tokens, shape.heads,
       shape.token_stride != 0 ? shape.token_stride : static_cast<std::ptrdiff_t>(dense_u), head});
  c.write_kv(k_pe, {shape.tokens, 1, k_pe_stride != 0 ? k_pe_stride : rope_dim, rope_dim}, latent,
             {shape.tokens, 1, latent_stride != 0 ? latent_stride : latent_dim, latent_dim}, k_pe_view,
             latent_view, slots);
  c.deinterleave = interleaved_in;
  detail::prologue(true, rope, c, positions, parallel, detail::CachePair::columns_of_one);
}

// ---- the unfused ops (the reference composition, and for engines that need one step alone) --------

// Per-head RMSNorm: rows [tokens, heads] of n values of x into out (in place allowed: the same
// pointer and layout), with weight (n values) and eps; weight == nullptr: weightless (Llama 4's L2
// norm). Checked: views, eps > 0.
template <class T, class W>
void rms_norm(const T* x, const StridedLayout& x_layout, T* out, const StridedLayout& out_layout, std::int64_t n,
              const HeadNorm<W>& norm) {
  using detail::concat;
  const detail::StreamArgs<T> s = detail::make_stream(x, x_layout, out, out_layout);
  std::string m = detail::check_layouts("", x_layout, out_layout);
  if (m.empty() && n < 1) m = concat("row length (", n, ") must be >= 1");
  if (m.empty()) m = detail::check_stream("", s, x_layout.tokens, n, "x");
  if (m.empty()) m = detail::check_norm("norm", norm);
  if (m.empty() && !norm.enabled) m = "norm is not enabled (HeadNorm::rms or HeadNorm::weightless)";
  if (m.empty() && norm.weight != nullptr &&
      detail::overlap(detail::StridedRows(norm.weight, n, {}).extent(),
                      detail::token_rows(out, n, out_layout.tokens, out_layout.token_stride, out_layout.heads,
                                         out_layout.head_stride)
                          .extent()))
    m = "norm weight and out share memory (the weight is read for every row)";
  if (!m.empty()) throw error(m);
  const detail::PreparedNorm<T> prepared(norm, n);
  const detail::NormKernel<T> kernel = detail::select_norm_kernel<T>();
  for (std::int64_t t = 0; t < x_layout.tokens; ++t)
    prepared.run(kernel, s.in_row(t, 0), x_layout.head_stride, s.out_row(t, 0), out_layout.head_stride, x_layout.heads,
                 n);
}

}  // namespace rotary

#endif  // ROTARY_FUSION_HPP
