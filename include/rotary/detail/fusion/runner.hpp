// The runner of a fused prologue: per thread, chunks of tokens through the norm, rotation,
// conversion and cache-write kernels, rows straight into the cache where nothing comes between.
#ifndef ROTARY_DETAIL_FUSION_RUNNER_HPP
#define ROTARY_DETAIL_FUSION_RUNNER_HPP

#include "../guard.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../apply.hpp"
#include "../../kv_cache.hpp"
#include "../../prologue.hpp"
#include "../aligned_buffer.hpp"
#include "../cpu.hpp"
#include "checks.hpp"

namespace rotary {
namespace detail {

// Rows for tokens [begin, end): the source's table, or rows made per block as the driver makes them
// (anchored at multiples of kBlock, so the bits do not depend on the threads' ranges).
template <class C, class Src, class F>
void for_row_blocks(const Src& src, std::int64_t rotary_dim, std::int64_t begin, std::int64_t end, const F& f) {
  if constexpr (Src::kTable) {
    f(src.rows(), begin, end);
  } else {
    constexpr std::int64_t kBlock = Src::kBlock;
    const std::int64_t first = begin / kBlock * kBlock;
    ScratchBuffer<C> rows(static_cast<std::size_t>(std::min(kBlock, end - first) * rotary_dim));
    auto scratch = src.scratch();
    for (std::int64_t t = first; t < end; t += kBlock) {
      const std::int64_t from = std::max(t, begin);
      const std::int64_t stop = std::min(end, t + kBlock);
      src.fill(t, from, stop, rows.data(), nullptr, scratch);
      f(CosSinRows<C>::block(rows.data(), rotary_dim, t), from, stop);
    }
  }
}

// DeepSeek's HF order: a row's first rotary_dim values (x0, x1), (x2, x3).. become the half-split
// pairs (x0, x2, .., x1, x3, ..); the rest is copied.
template <class T>
void deinterleave_row(const T* x, T* y, std::int64_t head_dim, std::int64_t rotary_dim) noexcept {
  const std::int64_t h = rotary_dim / 2;
  for (std::int64_t j = 0; j < h; ++j) {
    y[j] = x[2 * j];
    y[h + j] = x[2 * j + 1];
  }
  for (std::int64_t i = rotary_dim; i < head_dim; ++i) y[i] = x[i];
}

template <class T>
NormKernel<T> select_norm_kernel() {
  const NormKernel<T> k = norm_kernel_for<T>(active_isa());
  return k != nullptr ? k : &scalar::norm_rows<T>;
}

// A HeadNorm ready for the kernels: its weight in the compute type, 1 + w already added for Gemma's
// convention (in the compute type, as HF's Gemma3RMSNorm does), eps as double.
template <class T>
struct PreparedNorm {
  bool enabled = false;
  const compute_t<T>* borrowed = nullptr;  // the caller's weights, where they are already the factors
  std::vector<compute_t<T>> owned;         // else the factors made from them; both empty: weightless
  double eps = 0.0;

  PreparedNorm() = default;
  template <class W>
  PreparedNorm(const HeadNorm<W>& n, std::int64_t d) : enabled(n.enabled), eps(static_cast<double>(n.eps)) {
    using C = compute_t<T>;
    if (!n.enabled || n.weight == nullptr) return;
    if constexpr (std::is_same_v<W, C>) {
      // plain weights of the compute type are used where they are (no copy: at decode size the two
      // copies and their allocations are a noticeable part of a QK-norm + RoPE call)
      if (n.convention == NormWeight::plain) {
        borrowed = n.weight;
        return;
      }
    }
    owned.resize(static_cast<std::size_t>(d));
    for (std::int64_t i = 0; i < d; ++i) {
      const auto w = static_cast<C>(to_compute(n.weight[i]));
      owned[static_cast<std::size_t>(i)] = n.convention == NormWeight::unit_offset ? C(1) + w : w;
    }
  }
  const compute_t<T>* weight() const noexcept { return owned.empty() ? borrowed : owned.data(); }
  // rows of d values from in (stride in_stride) to out (stride out_stride).
  void run(NormKernel<T> k, const T* in, std::ptrdiff_t in_stride, T* out, std::ptrdiff_t out_stride,
           std::int64_t rows, std::int64_t d) const noexcept {
    NormArgs<T> a;
    a.in = in;
    a.in_stride = in_stride;
    a.out = out;
    a.out_stride = out_stride;
    a.rows = rows;
    a.n = d;
    a.inv_n = strict_div(1.0, static_cast<double>(d));
    a.weight = weight();
    a.eps = eps;
    k(a);
  }
};

// What a call needs once, shared by its threads: kernels and prepared norms.
template <class T>
struct PrologueKernels {
  Kernel<T> rotate;
  NormKernel<T> norm;
  CacheRowKernel<T> cache_row;  // rows into an int8, fp8 or 16-bit cache of another type
  PreparedNorm<T> q_norm;
  PreparedNorm<T> k_norm;
  PreparedNorm<T> l2_after;
};

// Tokens of a call in chunks: a run of tokens whose cache slots are consecutive in one block (or
// padding alike) goes through the rotation kernel in one call, its key rows written straight into
// the cache when nothing comes between (same type, no norm after RoPE). A norm before RoPE writes
// its rows into the rows RoPE writes, which are then rotated in place while still in cache, in
// chunks of up to norm_chunk_bytes() of rows, chosen by the level-1 data cache cpuid reports: with
// 48 KiB or more, two thirds of it, so that the second pass reads L1; with less (under two
// 32-64-head tokens' rows beside the cos/sin and weights) the second pass comes from L2 whatever the
// chunk, and 192 KiB chunks amortize the per-chunk calls (docs/benchmarks.md has the measurements).
// No chunk size changes a result: each row is normalized, rounded, then rotated.
// Deinterleaving fills per-thread scratch rows, and steps after RoPE (the L2 norm, a conversion or
// quantization into the cache) read its rows from scratch rows too, up to kScratchBytes of them per
// chunk: chunks as long as the cache blocks cut them beat short ones.
template <class T, class E, class W>
class PrologueRunner {
 public:
  static constexpr std::int64_t kScratchBytes = std::int64_t{128} * 1024;
  static std::int64_t norm_chunk_bytes() noexcept {
    const std::int64_t l1 = cpu_features().l1_data_cache_bytes;
    return l1 >= std::int64_t{48} * 1024 ? l1 / 3 * 2 : std::int64_t{192} * 1024;
  }
  static constexpr std::int64_t kMaxChunk = 64;  // tokens

  // tokens: how many this runner will see (its scratch rows are never longer; at decode, one token's)
  PrologueRunner(const Prologue<T, E, W>& c, const PrologueKernels<T>& kernels, std::int64_t head_dim,
                 std::int64_t rotary_dim, Pairing pairing, std::int64_t tokens)
      : c_(c), kern_(kernels), d_(head_dim), r_(rotary_dim), pairing_(pairing) {
    pre_q_ = c.q_layout.heads > 0 && c.deinterleave;
    pre_k_ = c.k_layout.heads > 0 && c.deinterleave;
    k_direct_ = std::is_same_v<E, T> && !c.l2_after.enabled;
    k_scratch_out_ = c.k_layout.heads > 0 && c.k_out_layout.heads == 0 && !k_direct_;
    block_size_ = c.has_k_cache() ? c.k_cache.block_size : c.has_v_cache() ? c.v_cache.block_size : 0;
    const auto row_bytes = [this](std::int64_t heads) { return heads * d_ * static_cast<std::int64_t>(sizeof(T)); };
    const auto tokens_in = [](std::int64_t budget, std::int64_t bytes) {
      return std::clamp<std::int64_t>(budget / std::max<std::int64_t>(bytes, 1), 1, kMaxChunk);
    };
    if (c.q_norm.enabled || c.k_norm.enabled) {
      chunk_ = tokens_in(norm_chunk_bytes(), row_bytes(c.q_layout.heads + c.k_layout.heads));
    } else if (pre_q_ || pre_k_ || k_scratch_out_) {
      chunk_ = tokens_in(kScratchBytes, row_bytes((pre_q_ ? c.q_layout.heads : 0) + (pre_k_ ? c.k_layout.heads : 0) +
                                                  (k_scratch_out_ ? c.k_layout.heads : 0)));
    }
    if (chunk_ > 0) chunk_ = std::clamp<std::int64_t>(tokens, 1, chunk_);
    // RoPE reads the caller's rows itself (no norm or deinterleaving before it) from beyond the caches
    const StridedLayout& ql = c.q_layout;
    const StridedLayout& kl = c.k_layout;
    if (!c.q_norm.enabled && !c.k_norm.enabled && !pre_q_ && !pre_k_)
      prefetch_ = prefetch_pays<T>(tokens, rotary_dim, {ql.heads, ql.token_stride, ql.head_stride},
                                   {kl.heads, kl.token_stride, kl.head_stride});
    // scratch rows for chunk_ tokens (a norm before RoPE and deinterleaving are never combined)
    // (uninitialized, on the stack at decode sizes: a decode step allocates nothing)
    if (pre_q_) q_in_.reset(static_cast<std::size_t>(chunk_ * c.q_layout.heads * d_));
    if (pre_k_) k_in_.reset(static_cast<std::size_t>(chunk_ * c.k_layout.heads * d_));
    if (k_scratch_out_) k_out_.reset(static_cast<std::size_t>(chunk_ * c.k_layout.heads * d_));
  }

  void run(const CosSinRows<compute_t<T>>& rows, std::int64_t t0, std::int64_t t1) {
    const std::int64_t per_chunk = chunk_ > 0 ? chunk_ : t1 - t0;
    std::int64_t t = t0;
    while (t < t1) {
      const std::int64_t slot = slot_of(t);
      const std::int64_t limit = std::min(t1, t + per_chunk);
      std::int64_t e = t + 1;
      if (block_size_ > 0) {
        for (; e < limit; ++e) {
          const std::int64_t next = slot_of(e);
          const bool both_padding = slot < 0 && next < 0;
          const bool consecutive = slot >= 0 && next == slot + (e - t) && next % block_size_ != 0;
          if (!both_padding && !consecutive) break;
        }
      } else {
        e = limit;
      }
      chunk(rows, t, e, slot);
      t = e;
    }
  }

 private:
  std::int64_t slot_of(std::int64_t t) const noexcept {
    return block_size_ > 0 ? c_.slots.slot(t, block_size_) : -1;
  }

  // s's input rows of tokens [t, t + n): the caller's, or scratch rows deinterleaved first. (Set field
  // by field in the KernelArgs the kernel reads: a StreamArgs built apart and copied in reloads its
  // fresh 8-byte stores 16 bytes at a time, which the store buffer cannot forward.)
  void set_input(StreamArgs<T>& s, const T* x, const StridedLayout& l, bool pre, ScratchBuffer<T>& scratch,
                 std::int64_t t, std::int64_t n) const noexcept {
    s.heads = l.heads;
    const T* first = x + t * l.token_stride;
    if (!pre) {
      s.in = first;
      s.in_token_stride = l.token_stride;
      s.in_head_stride = l.head_stride;
      return;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      T* rows = scratch.data() + i * l.heads * d_;
      const T* src = first + i * l.token_stride;
      for (std::int64_t h = 0; h < l.heads; ++h) deinterleave_row(src + h * l.head_stride, rows + h * d_, d_, r_);
    }
    s.in = scratch.data();
    s.in_token_stride = l.heads * d_;
    s.in_head_stride = d_;
  }

  static void set_out(StreamArgs<T>& s, T* out, std::ptrdiff_t token_stride, std::ptrdiff_t head_stride) noexcept {
    s.out = out;
    s.out_token_stride = token_stride;
    s.out_head_stride = head_stride;
  }

  // A norm before RoPE: the n tokens' rows normalized from the stream's input into its output rows,
  // which RoPE then rotates in place (the unfused composition's rounding to T included).
  void norm_into_out(StreamArgs<T>& s, const PreparedNorm<T>& norm, std::int64_t n) const noexcept {
    if (!norm.enabled) return;
    for (std::int64_t i = 0; i < n; ++i)
      norm.run(kern_.norm, s.in + i * s.in_token_stride, s.in_head_stride, s.out_row(i, 0), s.out_head_stride,
               s.heads, d_);
    s.in = s.out;
    s.in_token_stride = s.out_token_stride;
    s.in_head_stride = s.out_head_stride;
  }

  // Tokens [t, e): k_cache slots slot, slot + 1, .. (all >= 0), or all padding (slot < 0); runs are cut
  // by the k cache's slots when there is one, else by the v cache's.
  void chunk(const CosSinRows<compute_t<T>>& rows, std::int64_t t, std::int64_t e, std::int64_t slot) {
    const std::int64_t n = e - t;
    const bool q = c_.q_layout.heads > 0;
    const bool k_out = c_.k_out_layout.heads > 0;
    const bool k_cache = c_.has_k_cache() && slot >= 0;
    const bool k = c_.k_layout.heads > 0 && (k_out || k_cache);
    const std::int64_t hk = c_.k_layout.heads;
    if (q || k) {
      KernelArgs<T> a;
      a.tokens = n;
      a.head_dim = d_;
      a.rotary_dim = r_;
      a.pairing = pairing_;
      a.rows = rows.skip(t);
      a.prefetch = prefetch_;
      // k's heads are the kernel's first stream when q has none (a kernel's q is always present)
      StreamArgs<T>& ks = q ? a.k : a.q;
      if (q) {
        set_input(a.q, c_.q, c_.q_layout, pre_q_, q_in_, t, n);
        set_out(a.q, c_.q_out + t * c_.q_out_layout.token_stride, c_.q_out_layout.token_stride,
                c_.q_out_layout.head_stride);
        norm_into_out(a.q, kern_.q_norm, n);
      }
      if (k) {
        set_input(ks, c_.k, c_.k_layout, pre_k_, k_in_, t, n);
        if (k_out)
          set_out(ks, c_.k_out + t * c_.k_out_layout.token_stride, c_.k_out_layout.token_stride,
                  c_.k_out_layout.head_stride);
        else if (k_direct_)
          set_out(ks, reinterpret_cast<T*>(c_.k_cache.row(slot, 0)), c_.k_cache.slot_stride,
                  c_.k_cache.head_stride);
        else
          set_out(ks, k_out_.data(), hk * d_, d_);
        norm_into_out(ks, kern_.k_norm, n);
      }
      kern_.rotate(a, 0, n);
      const StreamArgs<T>& q_stream = a.q;
      const StreamArgs<T>& k_stream = ks;
      for (std::int64_t i = 0; i < n; ++i) {
        if (kern_.l2_after.enabled) {
          if (q)
            kern_.l2_after.run(kern_.norm, q_stream.out_row(i, 0), q_stream.out_head_stride, q_stream.out_row(i, 0),
                               q_stream.out_head_stride, c_.q_layout.heads, d_);
          if (k)
            kern_.l2_after.run(kern_.norm, k_stream.out_row(i, 0), k_stream.out_head_stride, k_stream.out_row(i, 0),
                               k_stream.out_head_stride, hk, d_);
        }
        if (k_cache && !(k_direct_ && !k_out)) {
          E* const first = c_.k_cache.row(slot + i, 0);  // (one division per token, not per head)
          for (std::int64_t h = 0; h < hk; ++h)
            store_row(first + h * c_.k_cache.head_stride, k_stream.out_row(i, h), d_,
                      c_.k_cache.row_scale(slot + i, h), inverse_head_scale(c_.k_cache, h), kern_.cache_row);
        }
      }
    }
    if (c_.has_v_cache())  // v's own slots: per-sequence slots depend on the cache's block size
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t v_slot = c_.slots.slot(t + i, c_.v_cache.block_size);
        if (v_slot < 0) continue;
        E* const first = c_.v_cache.row(v_slot, 0);
        for (std::int64_t h = 0; h < c_.v_layout.heads; ++h)
          store_row(first + h * c_.v_cache.head_stride,
                    c_.v + (t + i) * c_.v_layout.token_stride + h * c_.v_layout.head_stride,
                    c_.v_cache.head_dim, c_.v_cache.row_scale(v_slot, h), inverse_head_scale(c_.v_cache, h),
                    kern_.cache_row);
      }
  }

  const Prologue<T, E, W>& c_;
  const PrologueKernels<T>& kern_;
  std::int64_t d_;
  std::int64_t r_;
  Pairing pairing_;
  std::int64_t block_size_ = 0;
  bool pre_q_ = false;
  bool pre_k_ = false;
  bool k_direct_ = false;
  bool k_scratch_out_ = false;
  Ahead prefetch_ = Ahead::none;  // KernelArgs::prefetch for every chunk
  std::int64_t chunk_ = 0;  // tokens per chunk at most (0: no limit)
  ScratchBuffer<T> q_in_;  // deinterleaved q rows
  ScratchBuffer<T> k_in_;  // deinterleaved k rows
  ScratchBuffer<T> k_out_;  // rotated k rows on their way into a cache of another type (or the L2 norm)
};

// Every check of a fused call over row source src, in the order of its messages: the call's own
// (check_prologue_steps: its shapes and each buffer on its own, then the buffers against one
// another), the source's (no rows of the keys' own, its positions), then what the call writes apart
// from what it reads (the source's reads, the slot values). A decode-sized call spends as much on its
// checks as on its work, and most of them test one buffer against another: where every buffer is
// sound on its own (prologue_steps_sound: the same tests in arithmetic) and the byte extents show
// every buffer apart (prologue_buffers_apart), nothing else of check_prologue_steps can fail and
// none of it runs. Otherwise the whole sequence does, so a message is always the first the whole
// sequence finds.
template <class R, class T, class E, class W, class Source>
std::string check_fused_call(const R& r, const Prologue<T, E, W>& c, const Source& src, bool rotates,
                             CachePair caches = CachePair::given) {
  const std::int64_t tokens = c.tokens();
  ReadExtents reads = rotates ? reads_of(src, tokens) : ReadExtents{};
  if (c.has_k_cache() || c.has_v_cache()) reads.add("the slots", c.slots.values_extent());
  const bool apart = prologue_steps_sound(c, r.head_dim(), r.rotary_dim(), r.pairing()) &&
                     prologue_buffers_apart(c, r.head_dim(), reads, caches);
  if (!apart) {
    if (std::string m = check_prologue_steps(c, r.head_dim(), r.rotary_dim(), r.pairing()); !m.empty())
      return m;
  }
  if constexpr (!Source::kTable) {
    if (src.separate_key_rows() && c.k_layout.heads > 0)
      return "fused prologue: this rotator gives keys rows of their own (xPos); use apply_qk";
  }
  if (rotates) {
    if (std::string m = src.check(tokens, c.q_layout.heads > 0 && c.k_layout.heads > 0); !m.empty()) return m;
  }
  return apart ? std::string() : check_prologue_reads(c, r.head_dim(), reads);
}

template <class R, class T, class E, class W>
void prologue(bool checked, const R& r, const Prologue<T, E, W>& c, const rotator_positions_t<R>& p,
              const ParallelFor& parallel, CachePair caches = CachePair::given) {
  const std::int64_t tokens = c.tokens();
  const bool rotates = c.q_layout.heads > 0 || c.k_layout.heads > 0;
  rotator_traits<R>::with_rows(r, p, Direction::forward, [&](const auto& src) {
    require(checked, [&] { return check_fused_call(r, c, src, rotates, caches); });
    PrologueKernels<T> kernels;
    kernels.rotate = select_kernel<T>();
    kernels.norm = select_norm_kernel<T>();
    kernels.cache_row = select_cache_row_kernel<T>();
    kernels.q_norm = PreparedNorm<T>(c.q_norm, r.head_dim());
    kernels.k_norm = PreparedNorm<T>(c.k_norm, r.head_dim());
    kernels.l2_after = PreparedNorm<T>(c.l2_after, r.head_dim());
    const std::int64_t rotary_dim = r.rotary_dim();
    const std::int64_t per_token =
        ((c.q_layout.heads + c.k_layout.heads) * r.head_dim() + c.v_layout.heads * c.v_cache.head_dim) * 2 *
        static_cast<std::int64_t>(sizeof(T));
    for_token_ranges(tokens, per_token, parallel, [&](std::int64_t begin, std::int64_t end) {
      PrologueRunner<T, E, W> runner(c, kernels, r.head_dim(), rotary_dim, r.pairing(), end - begin);
      if (!rotates) {  // v only: no rows needed
        runner.run(CosSinRows<compute_t<T>>{}, begin, end);
        return;
      }
      for_row_blocks<compute_t<T>>(src, rotary_dim, begin, end,
                                   [&runner](const CosSinRows<compute_t<T>>& rows, std::int64_t from,
                                             std::int64_t stop) { runner.run(rows, from, stop); });
    });
  });
}

}  // namespace detail
}  // namespace rotary

#endif  // ROTARY_DETAIL_FUSION_RUNNER_HPP
