// What every kernel receives: the whole call, already validated (or asserted) by the driver.
#ifndef ROTARY_DETAIL_KERNEL_ARGS_HPP
#define ROTARY_DETAIL_KERNEL_ARGS_HPP

#include "../guard.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "../../cache.hpp"
#include "../../config.hpp"
#include "../../dtype.hpp"
#include "../../positions.hpp"
#include "../../types.hpp"
#include "../fp.hpp"

namespace rotary::detail {

// One tensor of a call (the queries, or the keys). Element strides; head row (t, h) is head_dim
// contiguous elements at in + t * in_token_stride + h * in_head_stride. heads == 0: absent.
template <class T>
struct StreamArgs {
  const T* in = nullptr;
  T* out = nullptr;
  std::ptrdiff_t in_token_stride = 0;
  std::ptrdiff_t in_head_stride = 0;
  std::ptrdiff_t out_token_stride = 0;
  std::ptrdiff_t out_head_stride = 0;
  std::int64_t heads = 0;

  const T* in_row(std::int64_t t, std::int64_t h) const noexcept {
    return in + t * in_token_stride + h * in_head_stride;
  }
  T* out_row(std::int64_t t, std::int64_t h) const noexcept {
    return out + t * out_token_stride + h * out_head_stride;
  }
};

// Token t's rotary_dim/2 cos values (at c) and rotary_dim/2 sin values (at s).
template <class C>
struct CosSin {
  const C* c;
  const C* s;
};

// Where a kernel reads token t's cos and sin values: the one row source every kernel sees, whatever
// produced the rows.
//   a table indexed by position (a CosSinCache, or a caller's table): row r = positions[t] - first
//     has its cos values at base + r * stride and its sin values at sin_base + r * stride; a cache of
//     listed positions (CosSinCache::for_positions) is looked up through `listed` instead;
//   rows made for a block of tokens (cache-free, multi-axis, xPos, re-rotation): [cos | sin] rows,
//     positions contiguous from 0 and first = the block's first token, so r = t - first.
template <class C>
struct CosSinRows {
  const C* base = nullptr;      // cos of row 0
  const C* sin_base = nullptr;  // sin of row 0
  std::ptrdiff_t stride = 0;
  std::int64_t first = 0;
  const CosSinCache<C>* listed = nullptr;
  Positions positions = Positions::contiguous();

  // The rows of a cache, looked up by these positions.
  static CosSinRows table(const CosSinCache<C>& cache, const Positions& p) noexcept {
    CosSinRows s;
    s.base = cache.data();
    s.sin_base = cache.empty() ? nullptr : cache.data() + cache.pairs();  // no arithmetic on null
    s.stride = cache.rotary_dim();
    s.first = cache.begin_position();
    s.listed = cache.is_range() ? nullptr : &cache;
    s.positions = p;
    return s;
  }
  // [cos | sin] rows of rotary_dim values, consecutive tokens from token0 on.
  static CosSinRows block(const C* rows, std::int64_t rotary_dim, std::int64_t token0) noexcept {
    CosSinRows s;
    s.base = rows;
    s.sin_base = rows == nullptr ? nullptr : rows + rotary_dim / 2;  // no arithmetic on null (no rows)
    s.stride = rotary_dim;
    s.first = token0;
    return s;
  }

  // The rows of tokens t, t + 1, ... as tokens 0, 1, ...: a kernel call over a sub-range.
  CosSinRows skip(std::int64_t t) const noexcept {
    CosSinRows s = *this;
    s.positions = positions.skip(t);
    return s;
  }

  CosSin<C> row(std::int64_t t) const noexcept {
    const std::int64_t p = positions[t];
    const std::int64_t r = listed != nullptr ? listed->row_index(p) : p - first;
    ROTARY_ASSERT(r >= 0);
    return {base + r * stride, sin_base + r * stride};
  }
};

// Which rows a call asks for ahead (KernelArgs::prefetch; prefetch_pays says when).
enum class Ahead : std::uint8_t {
  none,
  gapped,      // rows with a cache line or more unread between them: rotate_stream asks for them
  contiguous,  // each stream's rows one after another, token after token: rotate_registers asks
};

// T is the storage type; C = compute_t<T> the type of cos/sin and of the arithmetic.
template <class T>
struct KernelArgs {
  using C = compute_t<T>;
  StreamArgs<T> q;  // always present
  StreamArgs<T> k;  // fused key heads, rotated with the same cos/sin right after q's (optional)
  std::int64_t tokens = 0;
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;
  Pairing pairing = Pairing::half_split;
  bool inverse = false;
  CosSinRows<C> rows;  // set by the driver just before the kernels run
  // 16-bit rows read straight from more memory than the caches hold (prefetch_pays, set by the
  // driver): the kernels then ask for rows ahead (simd_body.hpp). Speed only, never a result.
  Ahead prefetch = Ahead::none;
  // Outputs written past the caches (stream_pays, set by the driver): kernels with streaming stores
  // (kStreamStores) write them non-temporally. Speed only, never a result.
  bool stream_out = false;

  std::int64_t total_heads() const noexcept { return q.heads + k.heads; }

  // The cos and sin values of token t (rotary_dim/2 each).
  CosSin<C> cos_sin_row(std::int64_t t) const noexcept { return rows.row(t); }
};

// Input rows of a call spanning at least this many bytes are assumed not to be in a core's caches
// (a core's L2 is typically 1-2 MiB).
inline constexpr std::int64_t kPrefetchSpanBytes = std::int64_t{1} << 20;
// Rows that follow on are asked for from 8 MiB on: below, they are often in L3 still (an engine's
// previous step wrote them), where the hints only cost time; rows read from memory gain from them.
inline constexpr std::int64_t kPrefetchContiguousBytes = std::int64_t{8} << 20;

// One stream's input rows, as prefetch_pays sees them (element strides).
struct RowSpan {
  std::int64_t heads;
  std::ptrdiff_t token_stride;
  std::ptrdiff_t head_stride;
};

// The elements rows q and k span (prefetch_pays' span in elements), exact in integers where every
// value lies within (-2^30, 2^30), as at decode and in short prefills; -1 for any other call, which
// prefetch_pays estimates in double instead. (The streams are read through pointers: copying a
// RowSpan the caller has just written loads it 16 bytes at a time from 8-byte stores, which the
// store buffer cannot forward.)
inline std::int64_t small_span(std::int64_t tokens, const RowSpan& q, const RowSpan& k) noexcept {
  constexpr std::int64_t kBound = std::int64_t{1} << 30;
  const auto small = [](std::int64_t v) { return v > -kBound && v < kBound; };
  if (!small(tokens)) return -1;
  std::int64_t span = 0;
  for (const RowSpan* s : {&q, &k}) {
    if (!small(s->heads) || !small(s->token_stride) || !small(s->head_stride)) return -1;
    if (s->heads > 0 && tokens > 0)
      span += tokens * (s->token_stride < 0 ? -s->token_stride : s->token_stride) +
              s->heads * (s->head_stride < 0 ? -s->head_stride : s->head_stride);
  }
  return span;
}

// KernelArgs::prefetch for `tokens` tokens of rows q and k of which rotary_dim values of T are read:
// none unless T is 16-bit and the rows span kPrefetchSpanBytes or more; then gapped where the rows of
// q or of k leave at least a cache line unread between one row's values and the next row's (a rope
// slice of longer heads, a partial rotary_dim), contiguous where every stream's rows follow on, head
// after head and token after token (token stride = heads x head stride, less than a line unread
// between rows: [T, H, D] tensors) and span kPrefetchContiguousBytes or more, else none. The 16-bit
// conversions put more instructions per row in the out-of-order window, which then holds fewer rows'
// misses at once; asking for rows 16 on restores that overlap. Never f32, whose rows keep enough
// misses in flight without it: the hint gains them nothing and can cost.
// Called before the driver validates the call, with any int64 values: small calls decided exactly in
// integers (small_span), others in double (no overflow, no abs of INT64_MIN; an estimate is enough
// for a hint).
template <class T>
Ahead prefetch_pays(std::int64_t tokens, std::int64_t rotary_dim, const RowSpan& q, const RowSpan& k) noexcept {
  if constexpr (sizeof(T) != 2) return Ahead::none;
  const std::int64_t elements = small_span(tokens, q, k);
  if (elements >= 0 && elements * static_cast<std::int64_t>(sizeof(T)) < kPrefetchSpanBytes)
    return Ahead::none;
  const auto magnitude = [](std::int64_t v) { return std::fabs(static_cast<double>(v)); };
  const double size = sizeof(T);
  double span = 0;
  bool gaps = false;
  bool follow_on = true;
  for (const RowSpan& s : {q, k}) {
    if (s.heads <= 0 || tokens <= 0) continue;
    span += (static_cast<double>(tokens) * magnitude(s.token_stride) +
             static_cast<double>(s.heads) * magnitude(s.head_stride)) * size;
    const double unread = (static_cast<double>(s.head_stride) - static_cast<double>(rotary_dim)) * size;
    gaps = gaps || (s.heads > 1 && (magnitude(s.head_stride) - static_cast<double>(rotary_dim)) * size >= 64);
    const double row_after_row = static_cast<double>(s.heads) * static_cast<double>(s.head_stride);
    follow_on = follow_on && unread >= 0 && unread < 64 && static_cast<double>(s.token_stride) == row_after_row;
  }
  if (span < static_cast<double>(kPrefetchSpanBytes)) return Ahead::none;
  if (gaps) return Ahead::gapped;
  const bool large = span >= static_cast<double>(kPrefetchContiguousBytes);
  return follow_on && large ? Ahead::contiguous : Ahead::none;
}

// The two streams of a call (q's heads, then k's). Kernels copy this into locals so that their
// stores never force reloads of the KernelArgs.
template <class T>
struct CallStreams {
  static constexpr int kStreams = 2;
  StreamArgs<T> q;
  StreamArgs<T> k;
  explicit CallStreams(const KernelArgs<T>& a) noexcept : q(a.q), k(a.k) {}
  const StreamArgs<T>& stream(int i) const noexcept { return i == 0 ? q : k; }
};

// Token t's rows in order, q's heads then k's:
//   for (TokenHeads<T> w(rows, t); w.next();) { w.in() ... w.out() ... }
// Each step adds the head strides and a stream's first row takes one multiply: at decode sizes that
// is cheaper than looking each row up by one head index over both streams (a branch and two
// multiplies per head).
template <class T>
class TokenHeads {
 public:
  TokenHeads(const CallStreams<T>& rows, std::int64_t t) noexcept : rows_(rows), t_(t) {}
  // To the next row; false after the last.
  bool next() noexcept {
    if (++head_ < heads_) {
      in_ += in_stride_;
      out_ += out_stride_;
      return true;
    }
    while (++stream_ < CallStreams<T>::kStreams) {
      const StreamArgs<T>& s = rows_.stream(stream_);
      if (s.heads == 0) continue;  // (an absent stream's pointers may be null)
      heads_ = s.heads;
      head_ = 0;
      in_ = s.in_row(t_, 0);
      out_ = s.out_row(t_, 0);
      in_stride_ = s.in_head_stride;
      out_stride_ = s.out_head_stride;
      return true;
    }
    return false;
  }
  const T* in() const noexcept { return in_; }
  T* out() const noexcept { return out_; }
  // Asks for the cache lines of the first `bytes` of the input row `ahead` rows on in this stream (the
  // next token's rows where its heads follow on). A hint only: the address may lie past the tensor,
  // which a prefetch never faults on, and it is computed as an integer (no pointer out of range).
  void prefetch_ahead(int ahead, std::int64_t bytes) const noexcept {
#if defined(__GNUC__) || defined(__clang__)
    // (unsigned: wraps rather than overflows, and a negative stride steps back)
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(in_) + static_cast<std::uintptr_t>(in_stride_) *
                                                                         static_cast<std::uintptr_t>(ahead) * sizeof(T);
    const std::uintptr_t line = 64;
    const std::uintptr_t last = (at + static_cast<std::uintptr_t>(bytes) - 1) & ~(line - 1);
    // (the cast back is the point: a pointer formed by arithmetic past the tensor would be undefined)
    // The empty asm keeps the loop: g++ 12 at -O2 and -Os deletes it otherwise (a loop whose only
    // statements are prefetches has no effect it must keep).
    for (std::uintptr_t p = at & ~(line - 1); p <= last; p += line) {
      __builtin_prefetch(reinterpret_cast<const void*>(p), 0, 3);  // NOLINT(performance-no-int-to-ptr)
      __asm__ volatile("" : : "r"(p));
    }
#else
    (void)ahead;
    (void)bytes;
#endif
  }

 private:
  const CallStreams<T>& rows_;
  std::int64_t t_;
  int stream_ = -1;
  std::int64_t head_ = 0;
  std::int64_t heads_ = 0;
  const T* in_ = nullptr;
  T* out_ = nullptr;
  std::ptrdiff_t in_stride_ = 0;
  std::ptrdiff_t out_stride_ = 0;
};

// ---- per-head RMSNorm (fusion.hpp) ----------------------------------------------------------------

// Rows r in [0, rows) of n values: y = x * factor * weight, factor = 1 / sqrt(mean(x^2) + eps).
// weight: n compute-type values (the caller's w, or 1 + w, prepared once per call), or null.
template <class T>
struct NormArgs {
  const T* in = nullptr;
  std::ptrdiff_t in_stride = 0;  // row r at in + r * in_stride
  T* out = nullptr;              // may be in (same stride)
  std::ptrdiff_t out_stride = 0;
  std::int64_t rows = 0;
  std::int64_t n = 0;
  const compute_t<T>* weight = nullptr;
  double eps = 0.0;
  double inv_n = 0.0;  // 1 / n (strict_div), set with n
};

// The sum of squares has one fixed order on every ISA: element i goes to accumulator i % 16 with a
// fused multiply-add (each accumulator in element order), then the 16 are added by halving (i with
// i + 8, then + 4, + 2, + 1). SIMD kernels hold the accumulators in 16 / L vectors, add whole
// vectors while more than one is left, then halve within the last (the lane ops' reduce).
constexpr int kNormAccumulators = 16;

// The 16 accumulators' sum in that order.
template <class C>
ROTARY_ALWAYS_INLINE C reduce_accumulators(const C* acc) noexcept {
  C s[kNormAccumulators];
  for (int i = 0; i < kNormAccumulators; ++i) s[i] = acc[i];
  for (int w = kNormAccumulators / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) s[i] = opaque_register(s[i] + s[i + w]);  // in this order under any flags
  return s[0];
}

// factor = 1 / sqrt(sum * (1 / n) + eps), in double (1 / n computed once per call: inv_n), rounded
// once to the compute type C. The divisions go through strict_div, so value-unsafe flags cannot
// swap them for reciprocal approximations that would differ between ISAs.
// Always inlined: the SIMD norm kernels call it once per row, and an out-of-line copy is baseline code
// (cpu.hpp: clear_upper_state).
template <class C>
ROTARY_ALWAYS_INLINE C norm_factor(C sum, double inv_n, double eps) noexcept {
  // strict_add(strict_mul(..)): a compiler contracting sum * inv_n + eps into one fma in the FMA-enabled
  // kernels (and not in the scalar one) would make the ISAs differ in the last bit.
  return static_cast<C>(strict_div(1.0, strict_sqrt(strict_add(strict_mul(static_cast<double>(sum), inv_n), eps))));
}

// ---- KV-cache rows (kv_cache.hpp) ------------------------------------------------------------------

// The element type a cache row kernel writes (float and double caches take a copy or a plain
// conversion instead).
enum class CacheCode : std::uint8_t { int8, fp8_e4m3, f16, bf16 };

// One row of n values of T (f32, f16 or bf16) into a cache row of `code` elements at out
// (std::int8_t, std::uint8_t fp8 bits, f16 or bf16), by quantize.hpp's definitions.
template <class T>
struct CacheRowArgs {
  const T* in = nullptr;
  std::int64_t n = 0;
  void* out = nullptr;
  CacheCode code = CacheCode::f16;
  float* scale = nullptr;   // int8: the row's scale, written
  float inv_scale = 1.0f;   // fp8: 1 / the head's scale, applied in f32 before rounding
};

// KernelArgs::stream_out for a call the driver validated: it writes min_bytes or more (dispatch.hpp's
// stream_min_bytes); every stream with heads writes out of place; rotary_dim == head_dim, a multiple
// of 128 bytes (each half of a row, and so every vector, whole: no masked or partial stores, no
// pass-through copies); output rows start on 64-byte boundaries (pointer and both strides), so every
// vector store is aligned. Bytes in double: an unchecked call's values may be anything. (A kernel
// may still decline: 16-bit rows stream only through the register-resident kernels of a few step
// counts, simd_body.hpp's rotate_streamed.)
template <class T>
bool stream_pays(const KernelArgs<T>& a, std::int64_t min_bytes) noexcept {
  constexpr auto size = static_cast<std::int64_t>(sizeof(T));
  if (a.tokens <= 0 || a.rotary_dim != a.head_dim || a.rotary_dim <= 0 || (a.rotary_dim * size) % 128 != 0)
    return false;
  // a multiple of 64 bytes, in unsigned arithmetic (modulo 2^64, a multiple of 64: exact for any value)
  const auto lines = [](std::uint64_t bytes) { return bytes % 64 == 0; };
  double written = 0;
  for (const StreamArgs<T>* s : {&a.q, &a.k}) {
    if (s->heads <= 0) continue;
    if (s->out == nullptr || static_cast<const void*>(s->in) == static_cast<const void*>(s->out)) return false;
    if (!lines(reinterpret_cast<std::uintptr_t>(s->out)) ||
        !lines(static_cast<std::uint64_t>(s->out_token_stride) * sizeof(T)) ||
        !lines(static_cast<std::uint64_t>(s->out_head_stride) * sizeof(T)))
      return false;
    written += static_cast<double>(a.tokens) * static_cast<double>(s->heads) * static_cast<double>(a.rotary_dim * size);
  }
  return written > 0 && written >= static_cast<double>(min_bytes);
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_KERNEL_ARGS_HPP
