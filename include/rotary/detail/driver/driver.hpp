// The one driver: every call of every rotator (Rope, MultiAxisRope, XPos, key re-rotation) reaches
// the kernels here, after one validation, in one traversal order, split over the caller's threads.
//
// A row source gives the driver each token's cos/sin row and owns the checks of its positions:
//   std::string check(std::int64_t tokens, bool fused) const   "" or what is wrong with the
//                                                     positions (fused: the call has key heads)
//   ReadExtents reads(std::int64_t tokens) const       the caller's memory it reads: a positions
//                                                     array, a caller's table; no output may
//                                                     overlap it (checks.hpp). Required, even of a
//                                                     source that reads none (it returns {}).
//   static constexpr bool kTable
//   kTable:  CosSinRows<C> rows() const                 the kernels read a table directly (a cache)
//   !kTable: rows are made per block of kBlock tokens:
//            static constexpr std::int64_t kBlock
//            Scratch scratch() const                   per-thread working memory
//            bool separate_key_rows() const            fused keys get rows of their own (xPos)
//            void fill(from, t0, t1, C* rows, C* key_rows, Scratch&) const
//                 rows of tokens [from, t1) at rows + (t - from) * rotary_dim (tokens before t0 may
//                 be skipped), anchored at `from`: blocks start at multiples of kBlock whatever range
//                 a thread gets, so the rows, and the output bits, do not depend on the threads.
// The sources: TableRows and GeneratedRows (below: a Rope's cache, or cache-free), multi-axis
// gathering (multi_axis.hpp), xPos scaled rows (xpos.hpp), re-rotation rows (rerotate.hpp).
#ifndef ROTARY_DETAIL_DRIVER_HPP
#define ROTARY_DETAIL_DRIVER_HPP

#include "../guard.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../cache.hpp"
#include "../../dispatch.hpp"
#include "../../dtype.hpp"
#include "../../parallel.hpp"
#include "../../positions.hpp"
#include "../../types.hpp"
#include "checks.hpp"
#include "../aligned_buffer.hpp"
#include "../kernels/kernel_args.hpp"
#include "../kernels/registry.hpp"
#include "../rows_on_the_fly.hpp"

namespace rotary::detail {

template <class U>
struct type_identity {
  using type = U;
};
template <class U>
using identity_t = typename type_identity<U>::type;  // blocks deduction: T comes from the rotator

// ---- streams and shapes -------------------------------------------------------------------------

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

inline std::string check_layouts(const char* name, const StridedLayout& il, const StridedLayout& ol) {
  if (il.tokens != ol.tokens || il.heads != ol.heads)
    return concat(name, "shape mismatch: input is ", il.tokens, " tokens x ", il.heads,
                  " heads, output is ", ol.tokens, " tokens x ", ol.heads, " heads");
  return {};
}

// q (and optional k: k_in.heads == 0 means none) in and out layouts agree with each other.
inline std::string check_qk_layouts(const StridedLayout& qil, const StridedLayout& qol, const StridedLayout& kil,
                                    const StridedLayout& kol) {
  std::string m = check_layouts("q ", qil, qol);
  if (m.empty() && kil.heads > 0) m = check_layouts("k ", kil, kol);
  if (m.empty() && kil.heads > 0 && kil.tokens != qil.tokens)
    m = concat("q has ", qil.tokens, " tokens but k has ", kil.tokens);
  return m;
}

// Eigen rows (tokens*heads) x head_dim -> strided layout.
inline std::string eigen_layout(std::int64_t rows, std::int64_t cols, std::int64_t outer, std::int64_t heads,
                                std::int64_t head_dim, const char* name, StridedLayout& out) {
  if (heads < 1) return concat(name, ": heads (", heads, ") must be >= 1");
  if (cols != head_dim) return concat(name, " has ", cols, " columns; head_dim is ", head_dim);
  if (rows % heads != 0) return concat(name, " has ", rows, " rows, not a multiple of heads (", heads, ")");
  if (outer > 0 && heads > std::numeric_limits<std::ptrdiff_t>::max() / outer)
    return concat(name, ": heads (", heads, ") x outer stride (", outer, ") overflows ptrdiff_t (the token stride)");
  out.tokens = rows / heads;
  out.heads = heads;
  out.head_stride = outer;
  out.token_stride = outer * heads;
  return {};
}

// Eigen views to layouts; throws or asserts on a bad shape.
template <class In>
StridedLayout rows_layout(bool checked, const In& x, std::int64_t heads, std::int64_t head_dim, const char* name) {
  StridedLayout l;
  const std::string m = eigen_layout(x.rows(), x.cols(), x.outerStride(), heads, head_dim, name, l);
  require(checked, [&m]() -> const std::string& { return m; });
  return l;
}

// The kernel arguments of a call, before the driver adds the rows.
template <class T>
KernelArgs<T> call_args(std::int64_t head_dim, std::int64_t rotary_dim, Pairing pairing, const StreamArgs<T>& q,
                        const StreamArgs<T>& k, std::int64_t tokens, Direction dir) noexcept {
  KernelArgs<T> a;
  a.q = q;
  a.k = k;
  a.tokens = tokens;
  a.head_dim = head_dim;
  a.rotary_dim = rotary_dim;
  a.pairing = pairing;
  a.inverse = dir == Direction::inverse;
  a.prefetch = prefetch_pays<T>(tokens, rotary_dim, {q.heads, q.in_token_stride, q.in_head_stride},
                                {k.heads, k.in_token_stride, k.in_head_stride});
  return a;
}

// ---- kernel choice and traversal ----------------------------------------------------------------

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
// at a large, usually power-of-two, stride, which defeats hardware prefetchers. One head at a time
// walks memory in order but reloads a cos/sin row per row rotated, an extra stream as large as the
// input. So the call goes over blocks of kHeadMajorBlock tokens, kHeadMajorGroup heads at a time: a
// few streams, each cos/sin row loaded once per group, the block's rows (128 KiB for rotary_dim 128
// in f32) in L2 for the next group. Four heads is the balance: fewer reload cos/sin rows more often,
// more are again too many streams for the prefetchers; the block length hardly matters.
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

// Whether a stream's input rows follow on token after token (less than a cache line unread between
// one token's row and the next's), as they do in BHSD.
template <class T>
bool rows_follow_on(const StreamArgs<T>& s, std::int64_t rotary_dim) noexcept {
  const std::int64_t unread = (s.in_token_stride - rotary_dim) * static_cast<std::int64_t>(sizeof(T));
  return unread >= 0 && unread < 64;
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
      // prefetch_pays calls rows a head stride apart gapped, but walked this way each head's input
      // rows follow on token after token (BHSD): a few streams the hardware prefetchers follow. The
      // gapped hint is then not asked for, since rotate_stream would only slow those rows down.
      one.prefetch = a.prefetch == Ahead::gapped && rows_follow_on(*s, a.rotary_dim) ? Ahead::none : a.prefetch;
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

// Bytes a call moves per token (vectors read + written, q and k): what for_token_ranges weighs.
template <class T>
std::int64_t token_bytes(const KernelArgs<T>& a) noexcept {
  return (a.q.heads + a.k.heads) * a.head_dim * 2 * static_cast<std::int64_t>(sizeof(T));
}

// With at least this many minimum-size parts of work, the ParallelFor gets the tokens themselves
// and splits them its own way (an engine's pool may balance finer than equal ranges); pools are
// rarely wider, so each thread still gets about the minimum or more.
constexpr std::int64_t kTokenSplitParts = 32;

// body(begin, end) over [0, n), on the caller's threads if it supplied a ParallelFor and the call
// is worth splitting: each part must move at least min_parallel_bytes(parallel) (parallel.hpp: what a
// hand-off costs on this machine, measured), since handing work to another thread costs more than
// a few tokens take. Too little for two parts runs on the caller alone; a few parts' worth calls
// `parallel` over that many chunks (contiguous token ranges of at least the minimum each), so a
// wider pool leaves its extra threads idle instead of splitting finer; more (kTokenSplitParts)
// hands it the n tokens. The split never changes the bits: kernels go per token. Every entry point
// that threads (apply, fused q+k, batches, varlen, the fused prologues) splits here.
// A ParallelFor must call the body over ranges within [0, n) (parallel.hpp); one that does not is a
// bug in the caller's pool, refused by name instead of rotating memory past the tensors. (From a
// worker thread the exception ends the program: loud either way.)
[[noreturn]] ROTARY_COLD inline void bad_parallel_range(std::int64_t begin, std::int64_t end,
                                                        std::int64_t n) {
  throw error(concat("the ParallelFor called the body over [", begin, ", ", end, "), outside [0, ", n, ")"));
}

template <class Body>
void for_token_ranges(std::int64_t n, std::int64_t bytes_per_token, const ParallelFor& parallel, const Body& body) {
  if (!parallel || n < 2) {
    body(std::int64_t{0}, n);
    return;
  }
  const std::int64_t min_bytes = min_parallel_bytes(parallel);
  const std::int64_t per_token = std::max<std::int64_t>(bytes_per_token, 1);
  const std::int64_t min_tokens = std::max<std::int64_t>(min_bytes / per_token + (min_bytes % per_token != 0), 1);
  const std::int64_t parts = n / min_tokens;
  if (parts < 2) {
    body(std::int64_t{0}, n);
  } else if (parts >= kTokenSplitParts || parts >= n) {
    parallel(n, [n, &body](std::int64_t begin, std::int64_t end) {
      if (begin < 0 || begin > end || end > n) bad_parallel_range(begin, end, n);
      body(begin, end);
    });
  } else {
    parallel(parts, [n, parts, &body](std::int64_t first, std::int64_t last) {
      if (first < 0 || first > last || last > parts) bad_parallel_range(first, last, parts);
      body(split_bound(n, parts, first), split_bound(n, parts, last));
    });
  }
}

// ---- the row sources of a Rope ------------------------------------------------------------------

// A cache's rows, looked up by position.
template <class C>
struct TableRows {
  static constexpr bool kTable = true;
  const CosSinCache<C>* cache;
  Positions positions;
  std::string check(std::int64_t tokens, bool /*fused*/) const { return check_positions(positions, tokens, cache); }
  ReadExtents reads(std::int64_t tokens) const noexcept { return positions_read(positions, tokens); }
  CosSinRows<C> rows() const noexcept { return CosSinRows<C>::table(*cache, positions); }
};

// Cache-free: exact rows computed per block (rows_on_the_fly.hpp).
template <class C>
struct GeneratedRows {
  static constexpr bool kTable = false;
  static constexpr std::int64_t kBlock = RowGenerator<C>::kBlock;
  using Scratch = std::vector<double>;
  const RowGenerator<C>* generator;
  Positions positions;
  std::string check(std::int64_t tokens, bool /*fused*/) const {
    return check_positions(positions, tokens, static_cast<const CosSinCache<C>*>(nullptr));
  }
  ReadExtents reads(std::int64_t tokens) const noexcept { return positions_read(positions, tokens); }
  Scratch scratch() const { return Scratch(static_cast<std::size_t>(2 * generator->pairs())); }
  static constexpr bool separate_key_rows() noexcept { return false; }
  void fill(std::int64_t from, std::int64_t /*t0*/, std::int64_t t1, C* rows, C* /*key_rows*/,
            Scratch& scratch) const noexcept {
    generator->fill(positions, from, t1, rows, scratch.data());
  }
};

// ---- the driver ---------------------------------------------------------------------------------

// Runs a validated call: the kernel is chosen once per call (never per row); rows come from the
// source, per block where it makes them. `a` is completed in place (stream_out, the rows) and run
// from there: a copy taken here would reload the caller's fresh 8-byte stores 16 bytes at a time,
// which the store buffer cannot forward.
template <class T, class Source>
void dispatch_call(const Source& src, KernelArgs<T>& a, const ParallelFor& parallel) {
  using C = compute_t<T>;
  const Kernel<T> kernel = select_kernel<T>();
  a.stream_out = stream_pays(a, stream_min_bytes());
  if constexpr (Source::kTable) {
    a.rows = src.rows();
    for_token_ranges(a.tokens, token_bytes(a), parallel,
                     [&a, kernel](std::int64_t begin, std::int64_t end) { run_tokens(kernel, a, begin, end); });
  } else {
    const bool split = a.k.heads > 0 && src.separate_key_rows();
    // Tokens [begin, end) from qa (a's streams; with split rows, q's only), rows made per block.
    const auto run_blocks = [&src, &a, kernel, split](KernelArgs<T>& qa, std::int64_t begin,
                                                      std::int64_t end) {
      constexpr std::int64_t kBlock = Source::kBlock;
      const std::int64_t first = begin / kBlock * kBlock;
      // Scratch for one block, no larger than the range needs (a decode step fills one row).
      const std::int64_t rows_needed = std::min(kBlock, end - first);
      const auto per_stream = static_cast<std::size_t>(rows_needed * a.rotary_dim);
      ScratchBuffer<C> rows(split ? 2 * per_stream : per_stream);
      C* key_rows = split ? rows.data() + per_stream : nullptr;
      auto scratch = src.scratch();
      for (std::int64_t t = first; t < end; t += kBlock) {
        const std::int64_t from = std::max(t, begin);
        const std::int64_t stop = std::min(end, t + kBlock);
        src.fill(t, from, stop, rows.data(), key_rows, scratch);
        qa.rows = CosSinRows<C>::block(rows.data(), a.rotary_dim, t);
        run_tokens(kernel, qa, from, stop);
        if (split) {
          KernelArgs<T> ka = a;
          ka.q = a.k;
          ka.k = StreamArgs<T>{};
          ka.rows = CosSinRows<C>::block(key_rows, a.rotary_dim, t);
          run_tokens(kernel, ka, from, stop);
        }
      }
    };
    // A call that runs on the caller alone (no ParallelFor, or one token: for_token_ranges would not
    // split it) runs from `a` itself. Threads each need a copy of their own, and a copy reloads a's
    // fresh 8-byte stores 16 bytes at a time, which the store buffer cannot forward.
    if (!split && (!parallel || a.tokens < 2)) {
      run_blocks(a, 0, a.tokens);
      return;
    }
    for_token_ranges(a.tokens, token_bytes(a), parallel,
                     [&a, &run_blocks, split](std::int64_t begin, std::int64_t end) {
                       KernelArgs<T> qa = a;
                       if (split) qa.k = StreamArgs<T>{};
                       run_blocks(qa, begin, end);
                     });
  }
}

// The caller's memory a source reads. Every source must say, even one that reads none: a source
// without reads() would lose the output-overlap checks silently, so it does not compile.
template <class S, class = void>
struct has_reads : std::false_type {};
template <class S>
struct has_reads<S, std::void_t<decltype(std::declval<const S&>().reads(std::int64_t{}))>>
    : std::is_same<decltype(std::declval<const S&>().reads(std::int64_t{})), ReadExtents> {};
template <class Source>
ReadExtents reads_of(const Source& src, std::int64_t tokens) noexcept {
  static_assert(has_reads<Source>::value,
                "a row source must define `ReadExtents reads(std::int64_t tokens) const`: the caller's memory "
                "it reads (positions, a caller's table), which no output may overlap; return {} if none");
  return src.reads(tokens);
}

// The checks of a call that depend on its row source, after check_call: the source's positions,
// then the outputs apart from what the source reads. For callers that ran check_call themselves.
template <class T, class Source>
std::string check_source(const Source& src, const KernelArgs<T>& a, const char* x_name = "x") {
  // (each step returns its own string: no assignment of an empty one on a valid call's way)
  if (std::string m = src.check(a.tokens, a.k.heads > 0); !m.empty()) return m;
  return check_reads_apart(a, reads_of(src, a.tokens), x_name);
}

// Validates the call (shapes, then the source's positions, then the outputs apart from what the
// source reads), throwing or asserting, and runs it.
template <class T, class Source>
void check_and_dispatch(bool checked, const Source& src, KernelArgs<T>& a, const ParallelFor& parallel,
                        const char* x_name = "x") {
  require(checked, [&] {
    if (std::string m = check_call(a, x_name); !m.empty()) return m;
    return check_source(src, a, x_name);
  });
  dispatch_call(src, a, parallel);
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_DRIVER_HPP
