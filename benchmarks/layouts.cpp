// rotary_bench, the layout table: batch layouts, fused q+k through those entry points, and a
// thread count, named
//   apply/<pairing>/<dtype>/<impl>/<layout>/tokens:<T>/heads:<H>/head_dim:<D>/threads:<N>
// (the layout is the extra path part after the impl; threads:N is the thread count). heads:40 is
// 32 query + 8 key heads per token; heads:32 a single tensor.
//   impl table_onnx (f16, rows, 1 thread): rotary::apply on a TableRope<f16, f16> over ONNX
//           RotaryEmbedding's f16 cos_cache / sin_cache (the Rope's rows rounded to f16), read as
//           given; its target compares it with dispatch on rotary's own table
//   layout  flat  memcpy only: the q and k bytes (one buffer) copied by N threads, each a slice
//           rows  q and k as separate [tokens*heads, head_dim] arrays: rotary::apply_qk (fused
//                 shapes) or rotary::apply (single tensor), contiguous positions from 0
//           bshd, bhsd, sbhd  a batch of 4 sequences of tokens/4, per-sequence start offsets
//                 {0, 1000, 17, 3000}: rotary::apply_qk_batch with the layout's dense strides
//           thd   4 packed sequences of unequal lengths (cu_seqlens), positions restarting at 0 in
//                 each: rotary::apply_qk_varlen
//           qkv   bshd where q and k are slices of one fused QKV projection output
//                 [batch, seq, 32 + 2*8 heads, head_dim] (v untouched; out of place into another
//                 such buffer): rotary::apply_qk_batch on the strided views
// Threads: a persistent rotary::ThreadPool of N-1 workers plus the caller (pool_for,
// bench_common.hpp), passed as the rotary::ParallelFor; idle workers sleep. threads:1 passes no
// ParallelFor at all and is timed, like the kernel table, by the CPU time of the calling thread;
// threads:N > 1 by wall time (Google Benchmark's UseRealTime, which appends /real_time to the names
// it prints), so a worker descheduled by another process shows as lost throughput instead of
// hiding behind the caller's CPU time. On a loaded machine the threaded ratios are meaningless: run
// them on a quiet one. Every impl's ratio is to the flat memcpy of the same dtype, shape and thread
// count in this run (none for the rows-only shapes below).
// Thread scaling: dispatch/rows of 32 heads x 128 at 1, 16, 64, 512, 4096 and 8192 tokens (decode to
// DRAM prefill), 1 and 2 threads: rotary's minimum work per thread (measured from the pool's
// hand-off, parallel.hpp) must keep 2 threads at least as fast as 1 at every size; targets.hpp
// compares them.
#include <Eigen/Core>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "bench_common.hpp"

namespace rotary_bench {
namespace {

enum class BatchLayout { flat, rows, bshd, bhsd, sbhd, thd, qkv };

constexpr const char* to_string(BatchLayout l) {
  switch (l) {
    case BatchLayout::flat: return "flat";
    case BatchLayout::rows: return "rows";
    case BatchLayout::bshd: return "bshd";
    case BatchLayout::bhsd: return "bhsd";
    case BatchLayout::sbhd: return "sbhd";
    case BatchLayout::thd: return "thd";
    case BatchLayout::qkv: return "qkv";
  }
  return "?";
}

struct BatchCase {
  BatchLayout layout;
  Shape shape;  // tokens = batch * seq (4 sequences); fused when kv_heads > 0
  int threads;
  bool onnx_table = false;  // table_onnx (f16 rows only): the call on ONNX-style f16 cos/sin caches
};

constexpr std::int64_t kBatch = 4;
const std::vector<std::int64_t> kBatchStarts = {0, 1000, 17, 3000};

// The packed (thd) sequences: 4 unequal lengths summing to tokens.
std::vector<std::int64_t> packed_cu_seqlens(std::int64_t tokens) {
  const std::int64_t a = tokens * 3 / 16;
  const std::int64_t b = tokens * 7 / 16;
  const std::int64_t c = tokens * 1 / 16;
  return {0, a, a + b, a + b + c, tokens};
}

// Elements one call reads (and, out of place, writes): the q and k rows.
std::int64_t rotated_elements(const Shape& s) { return s.elements(); }

// Elements the input buffer must hold (the qkv layout also holds v).
std::int64_t buffer_elements(const BatchCase& c) {
  const Shape& s = c.shape;
  return c.layout == BatchLayout::qkv ? s.tokens * (s.heads + s.kv_heads) * s.head_dim : s.elements();
}

// ONNX RotaryEmbedding's cos_cache and sin_cache, [max_position, rotary_dim / 2] each in the input's
// type (f16): the Rope's rows rounded to f16, read as given through a TableRope<f16, E>. E = f16 is
// the benchmark (table_onnx); E = float over the same values widened is the startup check's reference.
template <class E>
Runner prepare_onnx_table(const Shape& s, const rotary::Rope<rotary::f16>& rope, const rotary::f16* in,
                          rotary::f16* out) {
  const auto& cache = rope.cache();
  const std::int64_t h = cache.pairs();
  auto tables = std::make_shared<std::pair<std::vector<E>, std::vector<E>>>();
  for (std::int64_t r = 0; r < cache.size(); ++r) {
    for (std::int64_t j = 0; j < h; ++j) {
      tables->first.push_back(E(rotary::f16(cache.row_at(r)[j])));
      tables->second.push_back(E(rotary::f16(cache.row_at(r)[h + j])));
    }
  }
  auto table = std::make_shared<const rotary::TableRope<rotary::f16, E>>(
      rope.head_dim(), rope.rotary_dim(), rope.pairing(),
      rotary::CosSinTableView<E>::separate(tables->first.data(), tables->second.data(), cache.size(), h));
  return [table, tables, in, out, s] {
    Eigen::Map<const rotary::RowMatrix<rotary::f16>> x(in, s.tokens * s.heads, s.head_dim);
    Eigen::Map<rotary::RowMatrix<rotary::f16>> y(out, s.tokens * s.heads, s.head_dim);
    rotary::apply(*table, x, y, rotary::Positions::contiguous(0), s.heads);
  };
}

// One call of `c` (out of place, in -> out), with `parallel` (empty: one thread).
template <class T>
Runner prepare_batch(const BatchCase& c, const rotary::Rope<T>& rope, const T* in, T* out) {
  const Shape s = c.shape;
  const std::int64_t d = s.head_dim;
  if constexpr (std::is_same_v<T, rotary::f16>) {
    if (c.onnx_table) return prepare_onnx_table<rotary::f16>(s, rope, in, out);
  }
  rotary::ThreadPool* pool = pool_for(c.threads);
  const rotary::ParallelFor parallel = pool != nullptr ? pool->parallel_for() : rotary::ParallelFor();
  constexpr rotary::Direction fwd = rotary::Direction::forward;
  const rotary::Rope<T>* r = &rope;
  if (c.layout == BatchLayout::flat) {
    const auto bytes = static_cast<std::size_t>(rotated_elements(s)) * sizeof(T);
    if (pool == nullptr)
      return [in, out, bytes] { std::memcpy(static_cast<void*>(out), static_cast<const void*>(in), bytes); };
    return [pool, in, out, bytes] {
      const auto parts = static_cast<std::size_t>(pool->size());
      (*pool)(static_cast<std::int64_t>(parts), [=](std::int64_t first, std::int64_t last) {  // one slice each
        for (auto u = static_cast<std::size_t>(first); u < static_cast<std::size_t>(last); ++u) {
          const std::size_t lo = bytes / parts * u / 64 * 64;  // cache-line aligned slices
          const std::size_t hi = u + 1 == parts ? bytes : bytes / parts * (u + 1) / 64 * 64;
          std::memcpy(reinterpret_cast<unsigned char*>(out) + lo, reinterpret_cast<const unsigned char*>(in) + lo,
                      hi - lo);
        }
      });
    };
  }
  const std::int64_t qh = s.q_heads();
  const std::int64_t kh = s.kv_heads;
  const T* k_in = in + s.tokens * qh * d;
  T* k_out = out + s.tokens * qh * d;
  if (c.layout == BatchLayout::rows) {
    if (kh == 0)
      return [r, in, out, s, parallel] {
        Eigen::Map<const rotary::RowMatrix<T>> x(in, s.tokens * s.heads, s.head_dim);
        Eigen::Map<rotary::RowMatrix<T>> y(out, s.tokens * s.heads, s.head_dim);
        rotary::apply(*r, x, y, rotary::Positions::contiguous(0), s.heads, {fwd, parallel});
      };
    return [r, in, out, k_in, k_out, s, qh, kh, parallel] {
      Eigen::Map<const rotary::RowMatrix<T>> q_i(in, s.tokens * qh, s.head_dim);
      Eigen::Map<rotary::RowMatrix<T>> q_o(out, s.tokens * qh, s.head_dim);
      Eigen::Map<const rotary::RowMatrix<T>> k_i(k_in, s.tokens * kh, s.head_dim);
      Eigen::Map<rotary::RowMatrix<T>> k_o(k_out, s.tokens * kh, s.head_dim);
      rotary::apply_qk(*r, q_i, q_o, k_i, k_o, rotary::Positions::contiguous(0), qh, kh, {fwd, parallel});
    };
  }
  if (c.layout == BatchLayout::thd) {
    auto cu = std::make_shared<std::vector<std::int64_t>>(packed_cu_seqlens(s.tokens));
    const rotary::StridedLayout ql = contiguous_layout(s.tokens, qh, d);
    const rotary::StridedLayout kl = contiguous_layout(s.tokens, kh, d);
    return [r, in, out, k_in, k_out, ql, kl, cu, parallel] {
      rotary::apply_qk_varlen(*r, in, ql, out, ql, k_in, kl, k_out, kl, rotary::CuSeqlens(*cu),
                              rotary::SequencePositions::restart(), {fwd, parallel});
    };
  }
  using rotary::BatchView;
  const rotary::BatchShape q_shape{kBatch, s.tokens / kBatch, qh, d};
  const rotary::BatchShape k_shape{kBatch, s.tokens / kBatch, kh, d};
  BatchView<const T> qi, ki;
  BatchView<T> qo, ko;
  if (c.layout == BatchLayout::qkv) {
    const std::int64_t all = qh + 2 * kh;
    const rotary::BatchStrides st{q_shape.seq * all * d, all * d, d};
    qi = BatchView<const T>(in, q_shape, st);
    qo = BatchView<T>(out, q_shape, st);
    ki = BatchView<const T>(in + qh * d, k_shape, st);
    ko = BatchView<T>(out + qh * d, k_shape, st);
  } else {
    const rotary::Layout l = c.layout == BatchLayout::bshd   ? rotary::Layout::bshd
                             : c.layout == BatchLayout::bhsd ? rotary::Layout::bhsd
                                                             : rotary::Layout::sbhd;
    qi = BatchView<const T>(in, l, q_shape);
    qo = BatchView<T>(out, l, q_shape);
    ki = BatchView<const T>(k_in, l, k_shape);
    ko = BatchView<T>(k_out, l, k_shape);
  }
  auto positions = std::make_shared<rotary::SequencePositions>(rotary::SequencePositions::starts(kBatchStarts));
  return [r, qi, qo, ki, ko, positions, parallel] {
    rotary::apply_qk_batch(*r, qi, qo, ki, ko, *positions, {fwd, parallel});
  };
}

// The single-tensor rows of the thread scaling rows (32 heads x 128): every token count of the main
// sweep, decode to DRAM prefill. The last is kDramShape, which also has a flat memcpy.
constexpr Shape kThreadShapes[] = {kDecodeShape, kShortShape, kMidShape, kKeyShape, kLongShape, kDramShape};

// The batch cases: fused GQA prefill in every layout at 1 and 2 threads, the single-tensor DRAM
// shape's memcpy and the thread scaling rows at 1 and 2 threads.
std::vector<BatchCase> batch_cases() {
  std::vector<BatchCase> v;
  for (const int threads : {1, 2}) {
    for (const BatchLayout l : {BatchLayout::flat, BatchLayout::rows, BatchLayout::bshd, BatchLayout::bhsd,
                                BatchLayout::sbhd, BatchLayout::thd, BatchLayout::qkv})
      v.push_back({l, kGqaShape, threads});
    v.push_back({BatchLayout::flat, kDramShape, threads});
    for (const Shape& s : kThreadShapes) v.push_back({BatchLayout::rows, s, threads});
  }
  for (const Shape& s : kThreadShapes) v.push_back({BatchLayout::rows, s, 1, true});  // f16 only
  return v;
}

std::string batch_impl_name(const BatchCase& c) {
  if (c.onnx_table) return "table_onnx";
  if (c.layout == BatchLayout::flat) return "memcpy";
  return c.shape.fused() ? "dispatch_qk" : "dispatch";
}

// table_onnx gives the bits of the same values read from an f32 table (the f16 table widened exactly).
void check_onnx_table(const rotary::Rope<rotary::f16>& rope) {
  const Shape s{19, 3, 128, 0};
  const auto n = static_cast<std::size_t>(s.elements());
  rotary::detail::AlignedVector<rotary::f16> in(n), want(n), got(n);
  fill_random(in.data(), n, 13u);
  prepare_onnx_table<float>(s, rope, in.data(), want.data())();
  prepare_onnx_table<rotary::f16>(s, rope, in.data(), got.data())();
  if (std::memcmp(want.data(), got.data(), n * sizeof(rotary::f16)) != 0)
    fail("table_onnx/f16: the f16 table's results differ from the same table widened to f32");
}

// Startup check: every layout's threaded call gives the single-thread call's bits, every
// single-thread layout call matches the per-sequence rotary::apply_qk_strided calls it stands for,
// and flat copies. On a small shape (64 tokens, 5 + 2 heads) per dtype and pairing.
template <class T>
void check_batch(const char* dtype) {
  for (const Pairing pairing : kPairings) {
    const rotary::Rope<T> rope(rotary::RotarySpec(128, pairing), max_tokens());
    for (const BatchLayout l : {BatchLayout::flat, BatchLayout::rows, BatchLayout::bshd, BatchLayout::bhsd,
                                BatchLayout::sbhd, BatchLayout::thd, BatchLayout::qkv}) {
      const BatchCase one{l, Shape{64, 7, 128, 2}, 1};
      if constexpr (std::is_same_v<T, rotary::f16>) {
        if (l == BatchLayout::rows) check_onnx_table(rope);
      }
      const BatchCase two{l, one.shape, 2};
      const auto n = static_cast<std::size_t>(buffer_elements(one));
      rotary::detail::AlignedVector<T> in(n);
      rotary::detail::AlignedVector<T> want(n, T(0));
      rotary::detail::AlignedVector<T> got(n, T(0));
      fill_random(in.data(), n, 11u);
      prepare_batch<T>(one, rope, in.data(), want.data())();
      prepare_batch<T>(two, rope, in.data(), got.data())();
      if (std::memcmp(want.data(), got.data(), n * sizeof(T)) != 0)
        fail(std::string(to_string(l)) + "/" + dtype + ": 2 threads differ from 1 thread");
      if (l == BatchLayout::flat) {
        if (std::memcmp(want.data(), in.data(), static_cast<std::size_t>(rotated_elements(one.shape)) * sizeof(T)) != 0)
          fail(std::string("flat/") + dtype + ": memcpy is not a copy");
        continue;
      }
      // Reference: each sequence's q and k rows by apply_qk_strided with that sequence's positions.
      const Shape& s = one.shape;
      const std::int64_t d = s.head_dim, qh = s.q_heads(), kh = s.kv_heads;
      rotary::detail::AlignedVector<T> ref(n, T(0));
      const std::vector<std::int64_t> cu = l == BatchLayout::thd ? packed_cu_seqlens(s.tokens)
                                           : l == BatchLayout::rows ? std::vector<std::int64_t>{0, s.tokens}
                                                                     : std::vector<std::int64_t>{0, 16, 32, 48, 64};
      for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
        const std::int64_t len = cu[b + 1] - cu[b];
        const std::int64_t start = l == BatchLayout::rows || l == BatchLayout::thd ? 0 : kBatchStarts[b];
        std::ptrdiff_t q_off = 0, k_off = 0, ts = 0, hs = d, kts = 0;
        const std::int64_t bi = static_cast<std::int64_t>(b);
        switch (l) {
          case BatchLayout::rows:
          case BatchLayout::thd:
          case BatchLayout::bshd:
            q_off = cu[b] * qh * d, k_off = s.tokens * qh * d + cu[b] * kh * d, ts = qh * d, kts = kh * d;
            break;
          case BatchLayout::bhsd:
            q_off = bi * qh * len * d, k_off = s.tokens * qh * d + bi * kh * len * d, ts = d, kts = d, hs = len * d;
            break;
          case BatchLayout::sbhd:
            q_off = bi * qh * d, k_off = s.tokens * qh * d + bi * kh * d, ts = kBatch * qh * d, kts = kBatch * kh * d;
            break;
          case BatchLayout::qkv:
            q_off = cu[b] * (qh + 2 * kh) * d, k_off = q_off + qh * d, ts = kts = (qh + 2 * kh) * d;
            break;
          case BatchLayout::flat:
            break;
        }
        const rotary::StridedLayout ql{len, qh, ts, hs};
        const rotary::StridedLayout kl{len, kh, kts, hs};
        rotary::apply_qk_strided(rope, in.data() + q_off, ql, ref.data() + q_off, ql, in.data() + k_off, kl,
                                 ref.data() + k_off, kl, rotary::Positions::contiguous(start));
      }
      if (std::memcmp(want.data(), ref.data(), n * sizeof(T)) != 0)
        fail(std::string(to_string(l)) + "/" + dtype + "/" + std::string(rotary::to_string(pairing)) +
             ": differs from per-sequence apply_qk_strided");
    }
  }
}

template <class T>
void run_batch_case(benchmark::State& state, int id, BatchCase c, Pairing pairing) {
  run_prepared<T>(state, id, buffer_elements(c), rotated_elements(c.shape), [&](const T* in, T* out) {
    return prepare_batch<T>(c, rope_for<T>(pairing, c.shape.head_dim), in, out);
  });
}

// f32 cases, and the 16-bit single-tensor rows, feed the targets: with --rotary_key_repetitions=N
// they run in N interleaved rounds (memcpy and the layouts of one shape and thread count side by
// side), like the kernel table's key cases (kernels.cpp).
template <class T>
void register_batch(const char* dtype) {
  check_batch<T>(dtype);
  const int rounds = key_repetitions();
  for (const Pairing pairing : kPairings) {
    const std::string pairing_name(rotary::to_string(pairing));
    for (int round = 0; round < rounds; ++round) {
      for (const BatchCase& c : batch_cases()) {
        if (c.onnx_table && !std::is_same_v<T, rotary::f16>) continue;
        // 16-bit: only the single-tensor rows (threads, ONNX tables) feed targets and repeat
        if (round > 0 && !std::is_same_v<T, float> && (c.layout != BatchLayout::rows || c.shape.fused())) continue;
        const CaseInfo info{pairing_name, dtype, batch_impl_name(c), c.shape, sizeof(T), to_string(c.layout),
                            c.threads};
        register_case(info, [c, pairing](benchmark::State& state, int id) {
          run_batch_case<T>(state, id, c, pairing);
        });
      }
    }
  }
}

}  // namespace

void register_layout_cases() {
  for_each_dtype([](const auto& dtype) { register_batch<typename std::decay_t<decltype(dtype)>::type>(dtype.name); });
}

}  // namespace rotary_bench
