// rotary_bench: throughput of rotary's kernels, of what a user would otherwise write, and of a
// memcpy of the same bytes (the ceiling of a memory-bound operation; DESIGN.md §5).
//
// Every benchmark is named
//   apply/<pairing>/<dtype>/<impl>/tokens:<T>/heads:<H>/head_dim:<D>
//   pairing  interleaved | half_split
//   dtype    f32 | f16 | bf16
//   impl     memcpy      std::memcpy of the same bytes, same buffers (every case's baseline)
//            matrix      y = R_m x with the explicit head_dim x head_dim rotation matrix (f32 only)
//            eigen_expr  the Eigen array expression a user would write (f32 only)
//            scalar      rotary's scalar kernel, called directly (the bit-exact reference)
//            avx2 avx512 rotary's x86 kernels, called directly (only where the CPU has the ISA;
//                        for f16/bf16 only when ROTARY_BENCH_X86_HALF is 1, see below)
//            neon        rotary's NEON kernel, called directly (AArch64 builds)
//            dispatch    rotary::apply_unchecked out of place: whatever kernel active_isa() picks
//            onthefly    the same call with a cache-free Rope<T>(spec, rotary::OnTheFly{})
//            dispatch_qk rotary::apply_qk out of place: fused q+k (GQA shapes only, see below)
// and moves tokens*heads*head_dim elements from one buffer into another (out of place), token t at
// position t. Bytes processed = vectors read + written; the cos/sin table is not counted.
//
// GQA (fused q+k) shapes: heads:40 means 32 query + 8 key heads of head_dim 128 per token. The
// query block (tokens x 32 rows) and the key block (tokens x 8 rows) are separate arrays, laid out
// one after the other in the input buffer and likewise in the output buffer, so:
//   dispatch_qk  one rotary::apply_qk(rope, q_in, q_out, k_in, k_out, positions, 32, 8) call
//   dispatch     two rotary::apply_unchecked calls, q then k (what a caller without apply_qk does)
//   memcpy       one memcpy over both blocks: exactly the bytes the other two read and write
// No other impl is registered at heads:40 (a plain 512 x 8 x 128 shape covers the key heads alone).
//
// A second family adds batch layouts (bshd, bhsd, sbhd, packed thd, slices of a fused qkv buffer),
// fused q+k through those entry points, and a thread count:
//   apply/<pairing>/<dtype>/<impl>/<layout>/tokens:<T>/heads:<H>/head_dim:<D>/threads:<N>
// with a memcpy of the same bytes on the same number of threads as the baseline (see "layouts,
// fused q+k and threads" below).
//
// After Google Benchmark's own report, a summary prints GB/s and the ratio to the memcpy of the
// same pairing, dtype and shape measured in the same run (the median when
// --benchmark_repetitions > 1), then evaluates the performance targets on those numbers
// (MET / NOT MET). Own flags (taken out before Google Benchmark sees the command line):
//   --rotary_key_repetitions=N    run each key case (the cases the targets read) N times, in N
//                                 interleaved rounds per shape, and report the median
//                                 (benchmarks/run.sh: 3). Repeated runs share one name.
//   --rotary_key_ratios_out=FILE  write dispatch/memcpy at 512 x 32 x 128 per pairing and dtype
//   --rotary_compare_with=FILE    instead of the targets, compare this run's ratios with such a file
//                                 (benchmarks/run.sh: the default-flags build against -march=native)
//
// Extending: a dtype is one line in kDtypes, an implementation one entry in make_impls<T>(), a
// shape one line in kShapes. Before anything runs, every implementation's output is checked
// against the scalar kernel's on small inputs: bit for bit for the rotary kernels, within a few
// ulps for the Eigen formulations and the cache-free rows (equal to the cached ones except on
// near-ties).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <rotary/rotary.hpp>

// The avx2/avx512 impls for f16 and bf16 call rotary::detail::{avx2,avx512}::rotate_tokens<f16|bf16>
// directly, which only compiles with the x86 kernels that take 16-bit storage; config.hpp defines
// ROTARY_AVX512_BF16_KERNELS (0 or 1) alongside them, so its presence turns these rows on. Override
// with -DROTARY_BENCH_X86_HALF=0 or 1. Off, the f16/bf16 tables have no avx2/avx512 rows (dispatch
// still runs whatever kernel it picks); the summary's build line says which.
#ifndef ROTARY_BENCH_X86_HALF
#if defined(ROTARY_AVX512_BF16_KERNELS)
#define ROTARY_BENCH_X86_HALF 1
#else
#define ROTARY_BENCH_X86_HALF 0
#endif
#endif

namespace {

using rotary::Pairing;
using Index = Eigen::Index;

// ---- shapes ---------------------------------------------------------------------------------

struct Shape {
  std::int64_t tokens;
  std::int64_t heads;     // head rows per token (fused shapes: query + key heads)
  std::int64_t head_dim;
  std::int64_t kv_heads;  // fused q+k shapes: how many of `heads` are key heads; 0: one tensor

  constexpr std::int64_t elements() const { return tokens * heads * head_dim; }
  constexpr bool fused() const { return kv_heads > 0; }
  constexpr std::int64_t q_heads() const { return heads - kv_heads; }
};

// Real model shapes, working sets from L1 (decode) to DRAM (long prefill).
constexpr Shape kShapes[] = {
    {1, 32, 128, 0},     // decode: one token, 32 heads x 128 (Llama-style)
    {16, 32, 128, 0},    // short prefill
    {512, 32, 128, 0},   // prefill (L3-resident in f32: 16 MiB moved)
    {4096, 32, 128, 0},  // long prefill (DRAM)
    {8192, 32, 128, 0},  // longer prefill (DRAM)
    {512, 32, 64, 0},    // small heads
    {512, 32, 256, 0},   // large heads (Gemma-style)
    {512, 8, 128, 0},    // GQA key heads alone
    {1, 40, 128, 8},     // GQA decode, fused: 32 query + 8 key heads
    {512, 40, 128, 8},   // GQA prefill, fused: 32 query + 8 key heads
};

constexpr std::int64_t max_tokens() {
  std::int64_t m = 0;
  for (const Shape& s : kShapes) m = s.tokens > m ? s.tokens : m;
  return m;
}

constexpr std::int64_t max_elements() {
  std::int64_t m = 0;
  for (const Shape& s : kShapes) m = s.elements() > m ? s.elements() : m;
  return m;
}

constexpr Pairing kPairings[] = {Pairing::interleaved, Pairing::half_split};

// The shape the targets, the key-ratio file and run.sh's -march=native comparison are about.
constexpr Shape kKeyShape = {512, 32, 128, 0};

// ---- data: one RoPE per (pairing, head_dim), one pair of buffers per dtype -------------------

template <class T>
const rotary::Rope<T>& rope_for(Pairing pairing, std::int64_t head_dim) {
  static std::map<std::pair<Pairing, std::int64_t>, std::unique_ptr<rotary::Rope<T>>> ropes;
  auto& slot = ropes[{pairing, head_dim}];
  if (!slot) slot = std::make_unique<rotary::Rope<T>>(rotary::RotarySpec(head_dim, pairing), max_tokens());
  return *slot;
}

template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));  // f16/bf16 convert through float
}

// Bit-for-bit equality: Expect::copy and Expect::bit_exact promise identical bits, signed zeros and
// NaN payloads included, which == cannot check.
template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;  // NOLINT(bugprone-suspicious-memory-comparison)
}

template <class T>
void fill_random(T* data, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<T>(dist(rng));
}

// The input and output buffers of every benchmark of a dtype: one reservation sized for the largest
// shape, so a case sees the same addresses whatever ran before it (or was filtered out). The output
// sits 2 KiB off the input modulo 4 KiB, so no case streams with input and output at equal page
// offsets (4K aliasing: loads falsely wait on earlier stores; glibc's memcpy also picks its path by
// this distance). It matters: on the dev VM (512 x 32 x 256 f32, 32 MiB moved) out - in = 0, 64 or
// 3072 mod 4 KiB gave memcpy ~21 GB/s and interleaved dispatch ~16-21 GB/s, against ~35-37 and
// ~28-32 GB/s at 512, 1024 or 2048 (median of 5; half_split stayed at ~15-17 GB/s at every offset).
// Pages are touched (input filled with seeded random values, output zeroed) the first time a case
// needs them, never inside a timed loop.
template <class T>
class Buffers {
 public:
  static constexpr std::size_t kPage = 4096;
  static constexpr std::size_t kOutputSkew = 2048;

  Buffers() {
    const std::size_t in_bytes = round_up(capacity_ * sizeof(T));
    bytes_ = in_bytes + kOutputSkew + round_up(capacity_ * sizeof(T));
    base_ = static_cast<unsigned char*>(::operator new(bytes_, std::align_val_t{kPage}));
    in_ = reinterpret_cast<T*>(base_);
    out_ = reinterpret_cast<T*>(base_ + in_bytes + kOutputSkew);
  }
  ~Buffers() { ::operator delete(base_, std::align_val_t{kPage}); }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  // Makes the first n elements of both buffers ready; returns false if n exceeds the reservation.
  bool prepare(std::size_t n) {
    if (n > capacity_) return false;
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (; ready_ < n; ++ready_) {  // one seeded sequence, generated in order: same data always
      in_[ready_] = static_cast<T>(dist(rng_));
      out_[ready_] = T(0);
    }
    return true;
  }
  const T* in() const { return in_; }
  T* out() const { return out_; }

 private:
  static std::size_t round_up(std::size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

  std::size_t capacity_ = static_cast<std::size_t>(max_elements());
  std::size_t bytes_ = 0;
  std::size_t ready_ = 0;
  unsigned char* base_ = nullptr;
  T* in_ = nullptr;
  T* out_ = nullptr;
  std::mt19937 rng_{20261121u};
};

template <class T>
Buffers<T>& buffers() {
  static Buffers<T> b;
  return b;
}

// ---- implementations ------------------------------------------------------------------------

// One call: rotate (or copy) `shape` from `in` to `out`, rows = tokens*heads, row-major, token t
// at position t (rotary::Positions::contiguous(0)). Fused shapes: the query block (tokens x
// q_heads rows) starts at in/out, the key block (tokens x kv_heads rows) right after it.
template <class T>
struct Case {
  Pairing pairing;
  Shape shape;
  const rotary::Rope<T>* rope;
  const T* in;
  T* out;

  std::int64_t k_offset() const { return shape.tokens * shape.q_heads() * shape.head_dim; }
};

// What an implementation's prepare step returns: one pass over the whole tensor. Everything that
// is not part of the operation (matrices, broadcast tables, a cache-free Rope) is built by prepare,
// outside timing.
using Runner = std::function<void()>;

template <class T>
using Prepare = Runner (*)(const Case<T>&);

// What the startup check demands of an implementation's output.
enum class Expect {
  copy,       // equals the input (memcpy)
  reference,  // the reference the others are compared with (the scalar kernel)
  bit_exact,  // equals the reference bit for bit (every rotary kernel: same operation order)
  close,      // within a few ulps of the reference (other formulations, cache-free rows)
};

// Which shapes an implementation is registered (and checked) on.
enum class Shapes {
  plain,  // one tensor per call
  fused,  // q+k shapes only
  any,
};

template <class T>
struct Impl {
  const char* name;
  Prepare<T> prepare;
  Expect expect;
  Shapes shapes;
  bool (*runs_on)(const Shape&);  // nullptr: every shape of its kind

  bool registered_on(const Shape& s) const {
    if (shapes == Shapes::plain && s.fused()) return false;
    if (shapes == Shapes::fused && !s.fused()) return false;
    return runs_on == nullptr || runs_on(s);
  }
};

template <class T>
Runner prepare_memcpy(const Case<T>& c) {
  const T* in = c.in;
  T* out = c.out;
  const auto bytes = static_cast<std::size_t>(c.shape.elements()) * sizeof(T);
  return [in, out, bytes] { std::memcpy(static_cast<void*>(out), static_cast<const void*>(in), bytes); };
}

rotary::StridedLayout contiguous_layout(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim) {
  rotary::StridedLayout layout;
  layout.tokens = tokens;
  layout.heads = heads;
  layout.head_stride = head_dim;
  layout.token_stride = heads * head_dim;
  return layout;
}

// A rotary kernel called directly (no dispatch, no checks): Kernel(args, token_begin, token_end).
// Fused shapes pass the key block as the kernel's second stream, as apply_qk does.
template <class T, auto Kernel>
Runner prepare_kernel(const Case<T>& c) {
  const Shape& s = c.shape;
  const rotary::StridedLayout q = contiguous_layout(s.tokens, s.q_heads(), s.head_dim);
  rotary::detail::StreamArgs<T> k;
  if (s.fused()) {
    const rotary::StridedLayout kl = contiguous_layout(s.tokens, s.kv_heads, s.head_dim);
    k = rotary::detail::make_stream(c.in + c.k_offset(), kl, c.out + c.k_offset(), kl);
  }
  const rotary::detail::KernelArgs<T> args =
      rotary::detail::make_args(*c.rope, rotary::detail::make_stream(c.in, q, c.out, q), k, s.tokens,
                                rotary::Positions::contiguous(0), rotary::Direction::forward);
  return [args] { Kernel(args, 0, args.tokens); };
}

// rotary::apply_unchecked out of place over Eigen rows (tokens*heads x head_dim).
template <class T>
void apply_rows(const rotary::Rope<T>& rope, const T* in, T* out, std::int64_t tokens, std::int64_t heads,
                std::int64_t head_dim) {
  Eigen::Map<const rotary::RowMatrix<T>> x(in, tokens * heads, head_dim);
  Eigen::Map<rotary::RowMatrix<T>> y(out, tokens * heads, head_dim);
  rotary::apply_unchecked(rope, x, y, rotary::Positions::contiguous(0), heads);
}

// The public unchecked entry point: whatever kernel it dispatches to. Fused shapes: two calls, the
// query block then the key block.
template <class T>
Runner prepare_dispatch(const Case<T>& c) {
  const Case<T> k = c;
  return [k] {
    const Shape& s = k.shape;
    apply_rows(*k.rope, k.in, k.out, s.tokens, s.q_heads(), s.head_dim);
    if (s.fused()) apply_rows(*k.rope, k.in + k.k_offset(), k.out + k.k_offset(), s.tokens, s.kv_heads, s.head_dim);
  };
}

// The same call with a cache-free Rope of the same spec (built here, outside timing).
template <class T>
Runner prepare_onthefly(const Case<T>& c) {
  auto rope = std::make_shared<const rotary::Rope<T>>(c.rope->spec(), rotary::OnTheFly{});
  Case<T> k = c;
  k.rope = rope.get();
  return [k, rope] { apply_rows(*k.rope, k.in, k.out, k.shape.tokens, k.shape.heads, k.shape.head_dim); };
}

// Fused q+k: one checked rotary::apply_qk out of place (its checks are O(1) for contiguous positions).
template <class T>
Runner prepare_dispatch_qk(const Case<T>& c) {
  const Case<T> k = c;
  return [k] {
    const Shape& s = k.shape;
    Eigen::Map<const rotary::RowMatrix<T>> q_in(k.in, s.tokens * s.q_heads(), s.head_dim);
    Eigen::Map<rotary::RowMatrix<T>> q_out(k.out, s.tokens * s.q_heads(), s.head_dim);
    Eigen::Map<const rotary::RowMatrix<T>> k_in(k.in + k.k_offset(), s.tokens * s.kv_heads, s.head_dim);
    Eigen::Map<rotary::RowMatrix<T>> k_out(k.out + k.k_offset(), s.tokens * s.kv_heads, s.head_dim);
    rotary::apply_qk(*k.rope, q_in, q_out, k_in, k_out, rotary::Positions::contiguous(0), s.q_heads(),
                     s.kv_heads);
  };
}

// The textbook form: y = R_m x per row, with R_m the explicit head_dim x head_dim rotation matrix
// of token m (built from the cache's own cos/sin, so it rotates by the same angles).
template <class T>
bool matrix_fits(const Shape& s) {
  constexpr double kMaxBytes = 256.0 * 1024 * 1024;
  const double bytes = static_cast<double>(s.tokens) * static_cast<double>(s.head_dim) *
                       static_cast<double>(s.head_dim) * static_cast<double>(sizeof(T));
  return s.tokens <= 512 && bytes < kMaxBytes;  // beyond 512 tokens it only costs suite time
}

template <class T>
Runner prepare_matrix(const Case<T>& c) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const auto& cache = c.rope->cache();
  const std::int64_t h = cache.pairs();
  auto matrices = std::make_shared<std::vector<Matrix>>();
  matrices->reserve(static_cast<std::size_t>(c.shape.tokens));
  std::vector<double> cos_row(static_cast<std::size_t>(h));
  std::vector<double> sin_row(static_cast<std::size_t>(h));
  for (std::int64_t t = 0; t < c.shape.tokens; ++t) {
    const auto* row = cache.row(t);
    for (std::int64_t j = 0; j < h; ++j) {
      cos_row[static_cast<std::size_t>(j)] = static_cast<double>(row[j]);
      sin_row[static_cast<std::size_t>(j)] = static_cast<double>(row[h + j]);
    }
    matrices->push_back(
        rotary::reference::rotation_matrix_from(cos_row, sin_row, c.shape.head_dim, c.pairing).template cast<T>());
  }
  const Case<T> k = c;
  return [k, matrices] {
    const Index d = k.shape.head_dim;
    for (std::int64_t t = 0; t < k.shape.tokens; ++t) {
      const Matrix& r = (*matrices)[static_cast<std::size_t>(t)];
      for (std::int64_t head = 0; head < k.shape.heads; ++head) {
        const Index offset = (t * k.shape.heads + head) * d;
        Eigen::Map<const Vector> x(k.in + offset, d);
        Eigen::Map<Vector> y(k.out + offset, d);
        y.noalias() = r * x;
      }
    }
  };
}

// The Eigen array expression a user would write: per token, the heads x head_dim block, with the
// token's cos/sin rows broadcast over its heads. Half-split works on the left/right column halves,
// interleaved on strided maps of the even and odd columns.
template <class T>
Runner prepare_eigen_expr(const Case<T>& c) {
  using RowArray = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto& cache = c.rope->cache();
  const Index h = cache.pairs();
  if (2 * h != c.shape.head_dim) {
    std::fprintf(stderr, "rotary_bench: eigen_expr assumes rotary_dim == head_dim\n");
    std::exit(EXIT_FAILURE);
  }
  // C(t, j) = cos of token t, pair j; S likewise (a user's own tables, tokens x head_dim/2).
  auto table = std::make_shared<std::pair<RowArray, RowArray>>(RowArray(c.shape.tokens, h),
                                                                RowArray(c.shape.tokens, h));
  for (Index t = 0; t < c.shape.tokens; ++t) {
    table->first.row(t) = Eigen::Map<const RowArray>(cache.cos(t), 1, h);
    table->second.row(t) = Eigen::Map<const RowArray>(cache.sin(t), 1, h);
  }
  const Case<T> k = c;
  if (c.pairing == Pairing::half_split) {
    return [k, table, h] {
      const Index heads = k.shape.heads;
      const Index d = k.shape.head_dim;
      for (Index t = 0; t < k.shape.tokens; ++t) {
        Eigen::Map<const RowArray> x(k.in + t * heads * d, heads, d);
        Eigen::Map<RowArray> y(k.out + t * heads * d, heads, d);
        const auto cos_t = table->first.row(t);
        const auto sin_t = table->second.row(t);
        y.leftCols(h) = x.leftCols(h).rowwise() * cos_t - x.rightCols(h).rowwise() * sin_t;
        y.rightCols(h) = x.rightCols(h).rowwise() * cos_t + x.leftCols(h).rowwise() * sin_t;
      }
    };
  }
  return [k, table, h] {
    using Stride = Eigen::Stride<Eigen::Dynamic, 2>;  // outer: next head row; inner: every 2nd
    using ConstPairs = Eigen::Map<const RowArray, 0, Stride>;
    using Pairs = Eigen::Map<RowArray, 0, Stride>;
    const Index heads = k.shape.heads;
    const Index d = k.shape.head_dim;
    const Stride stride(d, 2);
    for (Index t = 0; t < k.shape.tokens; ++t) {
      const T* x = k.in + t * heads * d;
      T* y = k.out + t * heads * d;
      ConstPairs x_even(x, heads, h, stride);
      ConstPairs x_odd(x + 1, heads, h, stride);
      Pairs y_even(y, heads, h, stride);
      Pairs y_odd(y + 1, heads, h, stride);
      const auto cos_t = table->first.row(t);
      const auto sin_t = table->second.row(t);
      y_even = x_even.rowwise() * cos_t - x_odd.rowwise() * sin_t;
      y_odd = x_odd.rowwise() * cos_t + x_even.rowwise() * sin_t;
    }
  };
}

// Whether the x86 kernels are registered for storage type T (see ROTARY_BENCH_X86_HALF).
template <class T>
constexpr bool kX86Impls = std::is_same_v<T, float> || std::is_same_v<T, double> || ROTARY_BENCH_X86_HALF != 0;

// The kernel of kIsaTable's row I for T (the registry's), named as the ISA: scalar is the reference
// the others must equal bit for bit; a row this build has no kernel for (or, see kX86Impls, does not
// benchmark) is left out; runs_on asks the CPU.
template <class T, std::size_t I>
void add_isa_impl(std::vector<Impl<T>>& t) {
  constexpr rotary::IsaInfo row = rotary::kIsaTable[I];
  constexpr rotary::detail::Kernel<T> kernel = rotary::detail::kernel_for<T>(row.isa);
  constexpr bool x86 = row.isa == rotary::Isa::avx2 || row.isa == rotary::Isa::avx512;
  if constexpr (kernel != nullptr && (!x86 || kX86Impls<T>)) {
    const bool scalar = row.isa == rotary::Isa::scalar;
    bool (*runs_on)(const Shape&) = nullptr;
    if (!scalar) runs_on = [](const Shape&) { return rotary::kIsaTable[I].runs(); };
    t.push_back({row.name.data(), &prepare_kernel<T, kernel>, scalar ? Expect::reference : Expect::bit_exact,
                 Shapes::plain, runs_on});
  }
}

template <class T, std::size_t... I>
void add_isa_impls(std::vector<Impl<T>>& t, std::index_sequence<I...>) {
  (add_isa_impl<T, I>(t), ...);
}

// Every implementation benchmarked for dtype T, in the order the tables list them. runs_on also
// guards the startup check, so an ISA this CPU lacks is neither checked nor run.
template <class T>
std::vector<Impl<T>> make_impls() {
  std::vector<Impl<T>> t;
  t.push_back({"memcpy", &prepare_memcpy<T>, Expect::copy, Shapes::any, nullptr});
  if constexpr (std::is_same_v<T, float>) {
    t.push_back({"matrix", &prepare_matrix<T>, Expect::close, Shapes::plain, &matrix_fits<T>});
    t.push_back({"eigen_expr", &prepare_eigen_expr<T>, Expect::close, Shapes::plain, nullptr});
  }
  add_isa_impls<T>(t, std::make_index_sequence<rotary::kIsaCount>{});
  t.push_back({"dispatch", &prepare_dispatch<T>, Expect::bit_exact, Shapes::any, nullptr});
  t.push_back({"onthefly", &prepare_onthefly<T>, Expect::close, Shapes::plain, nullptr});
  t.push_back({"dispatch_qk", &prepare_dispatch_qk<T>, Expect::bit_exact, Shapes::fused, nullptr});
  return t;
}

template <class T>
const std::vector<Impl<T>>& impls() {
  static const std::vector<Impl<T>> table = make_impls<T>();
  return table;
}

// ---- startup check: every implementation computes what the scalar kernel computes ------------

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "rotary_bench: sanity check failed: %s\n", message.c_str());
  std::exit(EXIT_FAILURE);
}

template <class T>
void check_dtype(const char* dtype) {
  // One small shape per head_dim and kind (plain, fused) of the registered shapes.
  std::vector<Shape> shapes;
  for (const Shape& s : kShapes) {
    const Shape small = s.fused() ? Shape{17, 5, s.head_dim, 2} : Shape{17, 3, s.head_dim, 0};
    const bool seen = std::any_of(shapes.begin(), shapes.end(), [&small](const Shape& x) {
      return x.head_dim == small.head_dim && x.kv_heads == small.kv_heads;
    });
    if (!seen) shapes.push_back(small);
  }
  const auto& table = impls<T>();
  const auto reference = std::find_if(table.begin(), table.end(),
                                      [](const Impl<T>& i) { return i.expect == Expect::reference; });
  if (reference == table.end()) fail("no implementation is marked Expect::reference");
  // close: |y - y_ref| <= 16 ulp(1); inputs lie in [-1, 1], so outputs in [-sqrt 2, sqrt 2].
  const double tolerance = 16.0 * to_double(std::numeric_limits<T>::epsilon());

  for (const Pairing pairing : kPairings) {
    for (const Shape& shape : shapes) {
      const std::int64_t head_dim = shape.head_dim;
      const auto n = static_cast<std::size_t>(shape.elements());
      const rotary::Rope<T> rope(rotary::RotarySpec(head_dim, pairing), shape.tokens);
      rotary::detail::AlignedVector<T> in(n);
      rotary::detail::AlignedVector<T> want(n, T(0));
      rotary::detail::AlignedVector<T> got(n, T(0));
      fill_random(in.data(), n, 7u);
      reference->prepare(Case<T>{pairing, shape, &rope, in.data(), want.data()})();

      for (const Impl<T>& impl : table) {
        if (impl.expect == Expect::reference) continue;
        if (!impl.registered_on(shape)) continue;
        std::fill(got.begin(), got.end(), T(0));
        impl.prepare(Case<T>{pairing, shape, &rope, in.data(), got.data()})();
        const rotary::detail::AlignedVector<T>& expected = impl.expect == Expect::copy ? in : want;
        for (std::size_t i = 0; i < n; ++i) {
          const double g = to_double(got[i]);
          const double e = to_double(expected[i]);
          const bool ok = impl.expect == Expect::close
                              ? std::fabs(g - e) <= tolerance
                              : same_bits(got[i], expected[i]);
          if (!ok) {
            const auto d = static_cast<std::size_t>(head_dim);
            char message[512];
            std::snprintf(message, sizeof message,
                          "%s/%s/%s, %lld tokens x %lld heads (%lld of them key heads) x head_dim %lld: "
                          "element %zu (row %zu, column %zu) is %.9g, %s %.9g (%s)",
                          rotary::to_string(pairing).data(), dtype, impl.name,
                          static_cast<long long>(shape.tokens), static_cast<long long>(shape.heads),
                          static_cast<long long>(shape.kv_heads), static_cast<long long>(head_dim), i,
                          i / d, i % d, g, impl.expect == Expect::copy ? "input" : reference->name, e,
                          impl.expect == Expect::close ? "beyond tolerance" : "not bit-identical");
            fail(message);
          }
        }
      }
    }
  }
}

// ---- registration ---------------------------------------------------------------------------

// What each registered name stands for; the summary looks runs up here by name.
struct CaseInfo {
  std::string pairing;
  std::string dtype;
  std::string impl;
  Shape shape;
  std::size_t element_bytes;
  std::string layout;  // batch cases only ("" for the apply/ table)
  int threads;         // batch cases only (0 for the apply/ table)
};

std::map<std::string, CaseInfo>& registered() {
  static std::map<std::string, CaseInfo> cases;
  return cases;
}

// Which benchmark's prepared runner is alive. Google Benchmark calls a benchmark function several
// times (iteration estimation, repetitions); preparing once per benchmark keeps the matrix impl's
// setup out of the suite time, and holding one at a time bounds memory.
struct PreparedSlot {
  int id = -1;
  Runner run;
};

PreparedSlot& prepared_slot() {
  static PreparedSlot slot;
  return slot;
}

template <class T>
void run_case(benchmark::State& state, int id, std::size_t impl_index, Pairing pairing, Shape shape) {
  const Impl<T>& impl = impls<T>()[impl_index];
  const auto n = static_cast<std::size_t>(shape.elements());
  Buffers<T>& buf = buffers<T>();
  PreparedSlot& slot = prepared_slot();
  if (slot.id != id) {
    slot.run = nullptr;  // free the previous benchmark's state before building this one's
    slot.id = -1;
    if (!buf.prepare(n)) {
      state.SkipWithError("shape larger than the buffers (max_elements)");
      return;
    }
    slot.run = impl.prepare(Case<T>{pairing, shape, &rope_for<T>(pairing, shape.head_dim),
                                    buf.in(), buf.out()});
    slot.id = id;
  }
  const Runner& run = slot.run;
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * shape.elements() *
                          static_cast<std::int64_t>(sizeof(T)));
}

std::string shape_args(const Shape& s) {
  return "tokens:" + std::to_string(s.tokens) + "/heads:" + std::to_string(s.heads) +
         "/head_dim:" + std::to_string(s.head_dim);
}

// Key cases: what the targets read. With --rotary_key_repetitions=N (benchmarks/run.sh: 3) each is
// registered N times under its own name, in N interleaved rounds over its shape's key impls (memcpy,
// dispatch, ... memcpy, dispatch, ...), so a ratio's two sides are measured close together in time;
// the summary takes the median of all runs of a name.
bool is_key_shape(const Shape& s) {
  const Shape key[] = {{1, 32, 128, 0}, kKeyShape, {8192, 32, 128, 0}, {512, 40, 128, 8}};
  return std::any_of(std::begin(key), std::end(key), [&s](const Shape& k) {
    return k.tokens == s.tokens && k.heads == s.heads && k.head_dim == s.head_dim && k.kv_heads == s.kv_heads;
  });
}

bool is_key_impl(const std::string& impl) {
  return impl == "memcpy" || impl == "dispatch" || impl == "matrix" || impl == "onthefly" ||
         impl == "dispatch_qk";
}

int& key_repetitions() {
  static int n = 1;
  return n;
}

template <class T>
void register_dtype(const char* dtype) {
  check_dtype<T>(dtype);
  static int next_id = 0;  // one per registration (PreparedSlot), shared by all dtypes
  const auto& table = impls<T>();
  for (const Pairing pairing : kPairings) {
    for (const Shape& shape : kShapes) {
      const int rounds = is_key_shape(shape) ? key_repetitions() : 1;
      for (int round = 0; round < rounds; ++round) {
        for (std::size_t i = 0; i < table.size(); ++i) {
          const Impl<T>& impl = table[i];
          if (!impl.registered_on(shape)) continue;
          if (round > 0 && !is_key_impl(impl.name)) continue;
          const std::string pairing_name(rotary::to_string(pairing));
          const std::string name = "apply/" + pairing_name + "/" + dtype + "/" + impl.name;
          const int id = next_id++;
          benchmark::RegisterBenchmark(name.c_str(),
                                       [id, i, pairing, shape](benchmark::State& state) {
                                         run_case<T>(state, id, i, pairing, shape);
                                       })
              ->Args({shape.tokens, shape.heads, shape.head_dim})
              ->ArgNames({"tokens", "heads", "head_dim"})
              ->Unit(benchmark::kMicrosecond);
          registered()[name + "/" + shape_args(shape)] =
              CaseInfo{pairing_name, dtype, impl.name, shape, sizeof(T), std::string(), 0};
        }
      }
    }
  }
}

// ---- layouts, fused q+k and threads ---------------------------------------------------------
//
// A second family of cases, named
//   apply/<pairing>/<dtype>/<impl>/<layout>/tokens:<T>/heads:<H>/head_dim:<D>/threads:<N>
// (the layout is the extra path part after the impl; threads:N is the thread count). heads:40 is
// again 32 query + 8 key heads per token; heads:32 a single tensor.
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
// Threads: a persistent pool of N-1 workers plus the caller, passed as the rotary::ParallelFor
// (rotary starts no threads); idle workers sleep. threads:1 passes no ParallelFor at all and is
// timed, like the apply/ cases, by the CPU time of the calling thread; threads:N > 1 by wall time
// (Google Benchmark's UseRealTime, which appends /real_time to the names it prints), so a worker
// descheduled by another process shows as lost throughput instead of hiding behind the caller's
// CPU time. On a loaded machine the threaded ratios are meaningless: run them on a quiet one. Every impl's ratio is to the flat memcpy of the same dtype, shape and thread
// count in this run.

// A fixed set of workers; run(body) calls body(i) for i in [0, size()) concurrently, i = 0 on the
// caller, and returns when all have returned.
class Pool {
 public:
  explicit Pool(int threads) : size_(threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~Pool() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int size() const { return size_; }

  void run(const std::function<void(int)>& body) {
    job_ = &body;
    pending_.store(size_ - 1, std::memory_order_relaxed);
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    body(0);
    while (pending_.load(std::memory_order_acquire) != 0) relax();
  }

  // The pool as the hook rotary's entry points take: [0, n) in size() nearly equal ranges.
  rotary::ParallelFor parallel_for() {
    return [this](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
      const std::int64_t parts = size_;
      run([n, parts, &body](int i) {
        const std::int64_t begin = rotary::split_bound(n, parts, i);
        const std::int64_t end = rotary::split_bound(n, parts, i + 1);
        if (begin < end) body(begin, end);
      });
    };
  }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  // Spins on the generation for a while after each job (back-to-back benchmark iterations), then
  // sleeps (so a pool left idle costs the single-thread cases nothing).
  void work(int id) {
    std::uint64_t seen = 0;
    for (;;) {
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
      std::uint64_t g = generation_.load(std::memory_order_acquire);
      while (g == seen && !stop_.load() && std::chrono::steady_clock::now() < spin_until) {
        for (int i = 0; i < 64; ++i) relax();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
        g = generation_.load(std::memory_order_acquire);
      }
      if (stop_.load()) return;
      seen = g;
      (*job_)(id);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  int size_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int)>* job_ = nullptr;
};

Pool* pool_for(int threads) {
  static std::map<int, std::unique_ptr<Pool>> pools;
  if (threads <= 1) return nullptr;
  auto& slot = pools[threads];
  if (!slot) slot = std::make_unique<Pool>(threads);
  return slot.get();
}

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

// One call of `c` (out of place, in -> out), with `parallel` (empty: one thread).
template <class T>
Runner prepare_batch(const BatchCase& c, const rotary::Rope<T>& rope, const T* in, T* out) {
  const Shape s = c.shape;
  const std::int64_t d = s.head_dim;
  Pool* pool = pool_for(c.threads);
  const rotary::ParallelFor parallel = pool != nullptr ? pool->parallel_for() : rotary::ParallelFor();
  constexpr rotary::Direction fwd = rotary::Direction::forward;
  const rotary::Rope<T>* r = &rope;
  if (c.layout == BatchLayout::flat) {
    const auto bytes = static_cast<std::size_t>(rotated_elements(s)) * sizeof(T);
    if (pool == nullptr)
      return [in, out, bytes] { std::memcpy(static_cast<void*>(out), static_cast<const void*>(in), bytes); };
    return [pool, in, out, bytes] {
      const auto parts = static_cast<std::size_t>(pool->size());
      pool->run([=](int i) {
        const auto u = static_cast<std::size_t>(i);
        const std::size_t lo = bytes / parts * u / 64 * 64;  // cache-line aligned slices
        const std::size_t hi = u + 1 == parts ? bytes : bytes / parts * (u + 1) / 64 * 64;
        std::memcpy(reinterpret_cast<unsigned char*>(out) + lo, reinterpret_cast<const unsigned char*>(in) + lo,
                    hi - lo);
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
        rotary::apply(*r, x, y, rotary::Positions::contiguous(0), s.heads, fwd, parallel);
      };
    return [r, in, out, k_in, k_out, s, qh, kh, parallel] {
      Eigen::Map<const rotary::RowMatrix<T>> q_i(in, s.tokens * qh, s.head_dim);
      Eigen::Map<rotary::RowMatrix<T>> q_o(out, s.tokens * qh, s.head_dim);
      Eigen::Map<const rotary::RowMatrix<T>> k_i(k_in, s.tokens * kh, s.head_dim);
      Eigen::Map<rotary::RowMatrix<T>> k_o(k_out, s.tokens * kh, s.head_dim);
      rotary::apply_qk(*r, q_i, q_o, k_i, k_o, rotary::Positions::contiguous(0), qh, kh, fwd, parallel);
    };
  }
  if (c.layout == BatchLayout::thd) {
    auto cu = std::make_shared<std::vector<std::int64_t>>(packed_cu_seqlens(s.tokens));
    const rotary::StridedLayout ql = contiguous_layout(s.tokens, qh, d);
    const rotary::StridedLayout kl = contiguous_layout(s.tokens, kh, d);
    return [r, in, out, k_in, k_out, ql, kl, cu, parallel] {
      rotary::apply_qk_varlen(*r, in, ql, out, ql, k_in, kl, k_out, kl, rotary::CuSeqlens(*cu),
                              rotary::SequencePositions::restart(), fwd, parallel);
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
    rotary::apply_qk_batch(*r, qi, qo, ki, ko, *positions, fwd, parallel);
  };
}

// The batch cases: fused GQA prefill in every layout at 1 and 2 threads, and the single-tensor
// DRAM shape (8192 tokens) at 1 and 2 threads.
std::vector<BatchCase> batch_cases() {
  std::vector<BatchCase> v;
  const Shape gqa{512, 40, 128, 8};
  const Shape dram{8192, 32, 128, 0};
  for (const int threads : {1, 2}) {
    for (const BatchLayout l : {BatchLayout::flat, BatchLayout::rows, BatchLayout::bshd, BatchLayout::bhsd,
                                BatchLayout::sbhd, BatchLayout::thd, BatchLayout::qkv})
      v.push_back({l, gqa, threads});
    v.push_back({BatchLayout::flat, dram, threads});
    v.push_back({BatchLayout::rows, dram, threads});
  }
  return v;
}

std::string batch_impl_name(const BatchCase& c) {
  if (c.layout == BatchLayout::flat) return "memcpy";
  return c.shape.fused() ? "dispatch_qk" : "dispatch";
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
  Buffers<T>& buf = buffers<T>();
  PreparedSlot& slot = prepared_slot();
  if (slot.id != id) {
    slot.run = nullptr;
    slot.id = -1;
    if (!buf.prepare(static_cast<std::size_t>(buffer_elements(c)))) {
      state.SkipWithError("shape larger than the buffers (max_elements)");
      return;
    }
    slot.run = prepare_batch<T>(c, rope_for<T>(pairing, c.shape.head_dim), buf.in(), buf.out());
    slot.id = id;
  }
  const Runner& run = slot.run;
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * rotated_elements(c.shape) *
                          static_cast<std::int64_t>(sizeof(T)));
}

std::string batch_key(const std::string& name, const Shape& s, int threads) {
  return name + "/" + shape_args(s) + "/threads:" + std::to_string(threads);
}

// f32 cases feed the targets: with --rotary_key_repetitions=N they run in N interleaved rounds
// (memcpy and the layouts of one shape and thread count side by side), like the key cases above.
template <class T>
void register_batch(const char* dtype) {
  check_batch<T>(dtype);
  static int next_id = 1 << 20;  // apart from register_dtype's ids
  const int rounds = std::is_same_v<T, float> ? key_repetitions() : 1;
  for (const Pairing pairing : kPairings) {
    const std::string pairing_name(rotary::to_string(pairing));
    for (int round = 0; round < rounds; ++round) {
      for (const BatchCase& c : batch_cases()) {
        const std::string impl = batch_impl_name(c);
        std::string name = "apply/" + pairing_name;
        name.append("/").append(dtype).append("/").append(impl).append("/").append(to_string(c.layout));
        const int id = next_id++;
        auto* b = benchmark::RegisterBenchmark(name.c_str(),
                                               [id, c, pairing](benchmark::State& state) {
                                                 run_batch_case<T>(state, id, c, pairing);
                                               })
                      ->Args({c.shape.tokens, c.shape.heads, c.shape.head_dim, c.threads})
                      ->ArgNames({"tokens", "heads", "head_dim", "threads"})
                      ->Unit(benchmark::kMicrosecond);
        if (c.threads > 1) b->UseRealTime();
        registered()[batch_key(name, c.shape, c.threads)] =
            CaseInfo{pairing_name, dtype, impl, c.shape, sizeof(T), to_string(c.layout), c.threads};
      }
    }
  }
}

// Every dtype benchmarked, one line each.
struct Dtype {
  const char* name;
  void (*register_all)(const char* name);
  void (*register_batch)(const char* name);
};

constexpr Dtype kDtypes[] = {
    {"f32", &register_dtype<float>, &register_batch<float>},
    {"f16", &register_dtype<rotary::f16>, &register_batch<rotary::f16>},
    {"bf16", &register_dtype<rotary::bf16>, &register_batch<rotary::bf16>},
};

// ---- summary --------------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Every run of one name: Google Benchmark's repetitions of it, and its key-case rounds.
struct Result {
  std::string name;
  std::vector<double> bytes_per_second;   // one per run
  std::vector<double> median_aggregates;  // Google Benchmark's medians (one per registration)
  std::int64_t repetitions = 1;
  std::string error;

  // The median of the runs (or of the medians, when only aggregates were reported); < 0: none.
  double value() const {
    if (!bytes_per_second.empty()) return median(bytes_per_second);
    if (!median_aggregates.empty()) return median(median_aggregates);
    return -1;
  }
  std::size_t runs() const {
    if (!bytes_per_second.empty()) return bytes_per_second.size();
    return median_aggregates.size() * static_cast<std::size_t>(repetitions);
  }
};

// Forwards everything to the display reporter --benchmark_format asks for, and keeps the runs.
class RecordingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit RecordingReporter(benchmark::BenchmarkReporter* display) : display_(display) {}

  bool ReportContext(const Context& context) override {
    cpu_ = &context.cpu_info;
    return display_->ReportContext(context);
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const std::string name = run.run_name.function_name + "/" + run.run_name.args;
      Result& r = find(name);
      r.repetitions = std::max<std::int64_t>(r.repetitions, run.repetitions);
      if (run.error_occurred) {
        r.error = run.error_message;
        continue;
      }
      const auto bps = run.counters.find("bytes_per_second");
      if (bps == run.counters.end()) continue;
      if (run.run_type == Run::RT_Iteration)
        r.bytes_per_second.push_back(bps->second.value);
      else if (run.aggregate_name == "median")
        r.median_aggregates.push_back(bps->second.value);
    }
    display_->ReportRuns(runs);
  }

  void Finalize() override { display_->Finalize(); }

  const std::vector<Result>& results() const { return results_; }
  const benchmark::CPUInfo* cpu() const { return cpu_; }
  bool display_is_console() const {
    return dynamic_cast<benchmark::ConsoleReporter*>(display_) != nullptr;
  }

 private:
  Result& find(const std::string& name) {
    const auto it = index_.find(name);
    if (it != index_.end()) return results_[it->second];
    index_[name] = results_.size();
    results_.push_back(Result{name, {}, {}, 1, {}});
    return results_.back();
  }

  benchmark::BenchmarkReporter* display_;
  const benchmark::CPUInfo* cpu_ = nullptr;
  std::vector<Result> results_;
  std::map<std::string, std::size_t> index_;
};

// "model name" from /proc/cpuinfo, with the x86 family/model numbers when present (virtual machines
// often report a generic name such as "AMD EPYC").
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string name;
  std::string family;
  std::string model;
  std::string line;
  auto value = [&line] {
    const auto colon = line.find(':');
    const auto start = colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  };
  while (std::getline(cpuinfo, line)) {  // first occurrence of each key (the first processor)
    if (name.empty() && (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0))
      name = value();
    else if (family.empty() && line.rfind("cpu family", 0) == 0)
      family = value();
    else if (model.empty() && (line.rfind("model\t", 0) == 0 || line.rfind("model ", 0) == 0))
      model = value();
  }
  if (name.empty()) name = "unknown CPU";
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

std::string build_description() {
  std::string s;
#if defined(__clang__)
  s += "clang++ " __clang_version__;
  while (!s.empty() && s.back() == ' ') s.pop_back();
#elif defined(__GNUC__)
  s += "g++ " __VERSION__;
#else
  s += "unknown compiler";
#endif
#if defined(__OPTIMIZE__)
  s += ", optimized";
#else
  s += ", NOT optimized";
#endif
#if defined(NDEBUG)
  s += ", NDEBUG";
#else
  s += ", assertions ON";
#endif
  s += ", compiled for";
#if defined(__AVX512F__)
  s += " AVX-512F";
#elif defined(__AVX2__)
  s += " AVX2";
#elif defined(__SSE2__)
  s += " SSE2 (baseline x86-64)";
#elif defined(__ARM_NEON)
  s += " NEON";
#else
  s += " generic";
#endif
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  s += " with FMA";
#else
  s += " without FMA instructions (std::fma is a libm call)";
#endif
  try {
    s += "; dispatch runs " + std::string(rotary::to_string(rotary::active_isa()));
  } catch (const rotary::error& e) {
    s += std::string("; dispatch: ") + e.what();
  }
#if ROTARY_X86_KERNELS
  s += ROTARY_BENCH_X86_HALF ? "; f16/bf16 avx2/avx512 impls on" : "; f16/bf16 avx2/avx512 impls off (ROTARY_BENCH_X86_HALF=0)";
#endif
  return s;
}

std::string machine_description(const benchmark::CPUInfo* cpu) {
  std::string s = cpu_model();
  if (cpu != nullptr) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ", %d CPUs @ %.0f MHz", cpu->num_cpus, cpu->cycles_per_second / 1e6);
    s += buf;
    for (const auto& cache : cpu->caches) {
      if (cache.type == "Instruction") continue;
      const int kib = cache.size / 1024;
      std::snprintf(buf, sizeof buf, ", L%d%s %d %s", cache.level, cache.level == 1 ? "d" : "",
                    kib >= 1024 ? kib / 1024 : kib, kib >= 1024 ? "MiB" : "KiB");
      s += buf;
    }
  }
  return s;
}

// The measured bytes/s of each case by (pairing, dtype, impl, shape); < 0 where it did not run.
class Measurements {
 public:
  void add(const CaseInfo& c, double bps) {
    bps_[key(c.pairing, c.dtype, c.impl, c.shape, c.layout, c.threads)] = bps;
  }
  double get(const std::string& pairing, const std::string& dtype, const std::string& impl,
             const Shape& s) const {
    return find(key(pairing, dtype, impl, s, std::string(), 0));
  }
  double get_batch(const std::string& pairing, const std::string& dtype, const std::string& impl,
                   const std::string& layout, const Shape& s, int threads) const {
    return find(key(pairing, dtype, impl, s, layout, threads));
  }

 private:
  double find(const std::string& k) const {
    const auto it = bps_.find(k);
    return it == bps_.end() ? -1 : it->second;
  }
  static std::string key(const std::string& pairing, const std::string& dtype, const std::string& impl,
                         const Shape& s, const std::string& layout, int threads) {
    return pairing + "/" + dtype + "/" + impl + "/" + layout + "/" + shape_args(s) + "/" + std::to_string(threads);
  }
  std::map<std::string, double> bps_;
};

const char* const kDtypeNames[] = {"f32", "f16", "bf16"};
const char* const kPairingNames[] = {"interleaved", "half_split"};

// The targets (dispatch impl, 1 thread) evaluated on this run's numbers. Targets whose
// cases were filtered out are skipped. Returns {met, evaluated}.
std::pair<int, int> print_targets(const Measurements& m, std::FILE* out) {
  int met = 0;
  int total = 0;
  auto verdict = [&](bool ok) {
    ++total;
    met += ok ? 1 : 0;
    return ok ? "MET" : "NOT MET";
  };
  const Shape decode{1, 32, 128, 0};
  const Shape dram{8192, 32, 128, 0};
  const Shape k = kKeyShape;
  std::fprintf(out, "\ntargets (dispatch impl unless named; ratios of GB/s on the same bytes, this run):\n");
  // Throughput ratio impl/base on `shape`, against a lower bound.
  auto at_least = [&](const char* dtype, const char* pairing, const Shape& s, const char* what,
                      const char* impl, const char* base, double bound) {
    const double a = m.get(pairing, dtype, impl, s);
    const double b = m.get(pairing, dtype, base, s);
    if (a <= 0 || b <= 0) return;
    const double r = a / b;
    std::fprintf(out, "  %-4s %-11s %-18s %s %6.2fx %-8s (%6.2f vs %6.2f GB/s; target >= %g) %s\n", dtype, pairing,
                 what, impl, r, base, a / 1e9, b / 1e9, bound, verdict(r >= bound));
  };
  // Time ratio impl/base (= base GB/s / impl GB/s), against an upper bound.
  auto at_most_time = [&](const char* dtype, const char* pairing, const Shape& s, const char* what,
                          const char* impl, const char* base, double bound) {
    const double a = m.get(pairing, dtype, impl, s);
    const double b = m.get(pairing, dtype, base, s);
    if (a <= 0 || b <= 0) return;
    const double r = b / a;
    std::fprintf(out, "  %-4s %-11s %-18s %s %6.2fx %s time (%6.2f vs %6.2f GB/s; target <= %g) %s\n", dtype,
                 pairing, what, impl, r, base, a / 1e9, b / 1e9, bound, verdict(r <= bound));
  };
  for (const char* p : kPairingNames) at_least("f32", p, k, "512 tok (L3)", "dispatch", "memcpy", 0.85);
  for (const char* p : kPairingNames) at_least("f32", p, dram, "8192 tok (DRAM)", "dispatch", "memcpy", 0.9);
  for (const char* d : {"f16", "bf16"})
    for (const char* p : kPairingNames) at_least(d, p, k, "512 tok", "dispatch", "memcpy", 0.8);
  for (const char* d : kDtypeNames)
    for (const char* p : kPairingNames) at_most_time(d, p, decode, "decode (1 tok)", "dispatch", "memcpy", 2.0);
  for (const char* p : kPairingNames) at_least("f32", p, k, "512 tok", "dispatch", "matrix", 10.0);
  for (const char* d : kDtypeNames)
    for (const char* p : kPairingNames) at_most_time(d, p, k, "512 tok", "onthefly", "dispatch", 1.5);
  // Fused q+k: no target, for information.
  const Shape gqa{512, 40, 128, 8};
  bool header = false;
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      const double qk = m.get(p, d, "dispatch_qk", gqa);
      const double two = m.get(p, d, "dispatch", gqa);
      const double base = m.get(p, d, "memcpy", gqa);
      if (qk <= 0 || two <= 0 || base <= 0) continue;
      if (!header) std::fprintf(out, "  (info) GQA 512 tok x (32 q + 8 kv) x 128, fused apply_qk vs two apply calls:\n");
      header = true;
      std::fprintf(out, "  %-4s %-11s dispatch_qk %5.2fx memcpy, two calls %5.2fx memcpy (%6.2f / %6.2f / %6.2f GB/s)\n",
                   d, p, qk / base, two / base, qk / 1e9, two / 1e9, base / 1e9);
    }
  }
  // Layouts, fused q+k and threads (batch cases, f32): ratio to the flat memcpy of the same
  // bytes and thread count.
  const char* const layouts[] = {"rows", "bshd", "bhsd", "sbhd", "thd", "qkv"};
  auto batch_at_least = [&](const char* pairing, const char* impl, const char* layout, const Shape& s,
                            int threads, const char* what, double bound) {
    const double a = m.get_batch(pairing, "f32", impl, layout, s, threads);
    const double b = m.get_batch(pairing, "f32", "memcpy", "flat", s, threads);
    if (a <= 0 || b <= 0) return;
    const double r = a / b;
    std::fprintf(out, "  f32  %-11s %-18s %s/%-4s %5.2fx memcpy %d thr (%6.2f vs %6.2f GB/s; target >= %g) %s\n",
                 pairing, what, impl, layout, r, threads, a / 1e9, b / 1e9, bound, verdict(r >= bound));
  };
  for (const char* p : kPairingNames) batch_at_least(p, "dispatch_qk", "rows", gqa, 1, "GQA 512 tok fused", 0.85);
  for (const char* p : kPairingNames) batch_at_least(p, "dispatch", "rows", dram, 2, "8192 tok 2 threads", 0.85);
  header = false;
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      std::string line;
      bool any = false;
      for (const int threads : {1, 2}) {
        line += threads == 1 ? "" : " |";
        for (const char* l : layouts) {
          const double x = m.get_batch(p, d, "dispatch_qk", l, gqa, threads);
          const double base = m.get_batch(p, d, "memcpy", "flat", gqa, threads);
          char cell[16];
          if (x > 0 && base > 0) {
            std::snprintf(cell, sizeof cell, " %5.2f", x / base);
            any = true;
          } else {
            std::snprintf(cell, sizeof cell, " %5s", "-");
          }
          line += cell;
        }
      }
      if (!any) continue;
      if (!header)
        std::fprintf(out, "  (info) GQA 512 tok fused q+k per layout, x memcpy of the same bytes and threads:\n"
                          "                   rows  bshd  bhsd  sbhd   thd   qkv (1 thread) | the same, 2 threads\n");
      header = true;
      std::fprintf(out, "  %-4s %-11s%s\n", d, p, line.c_str());
    }
  }
  header = false;
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      const double one = m.get_batch(p, d, "dispatch", "rows", dram, 1);
      const double two = m.get_batch(p, d, "dispatch", "rows", dram, 2);
      const double c1 = m.get_batch(p, d, "memcpy", "flat", dram, 1);
      const double c2 = m.get_batch(p, d, "memcpy", "flat", dram, 2);
      if (one <= 0 || two <= 0 || c1 <= 0 || c2 <= 0) continue;
      if (!header) std::fprintf(out, "  (info) 8192 tok x 32 x 128, 2 threads against 1 (speed-up of dispatch and of memcpy):\n");
      header = true;
      std::fprintf(out, "  %-4s %-11s dispatch %5.2fx, memcpy %5.2fx (2 threads: %6.2f / %6.2f GB/s)\n", d, p,
                   two / one, c2 / c1, two / 1e9, c2 / 1e9);
    }
  }
  if (total > 0) std::fprintf(out, "  %d of %d targets MET\n", met, total);
  return {met, total};
}

// Key ratios (dispatch / memcpy at kKeyShape) for run.sh's default-vs-native comparison.
void write_key_ratios(const Measurements& m, const std::string& path) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "rotary_bench: cannot write %s\n", path.c_str());
    return;
  }
  f << "# build: " << build_description() << "\n";
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      const double a = m.get(p, d, "dispatch", kKeyShape);
      const double b = m.get(p, d, "memcpy", kKeyShape);
      if (a > 0 && b > 0) f << p << ' ' << d << ' ' << a << ' ' << b << '\n';
    }
  }
}

void print_comparison(const Measurements& m, const std::string& path, std::FILE* out) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(out, "\nrotary_bench: cannot read %s: no build comparison\n", path.c_str());
    return;
  }
  std::string line;
  std::fprintf(out,
               "\nbuild comparison, dispatch at 512 tok x 32 x 128 (each ratio to memcpy of its own run):\n"
               "  target: the build in %s (no -m flags) within 5%% of this build\n",
               path.c_str());
  int met = 0;
  int total = 0;
  while (std::getline(f, line)) {
    if (line.rfind("# build: ", 0) == 0) {
      std::fprintf(out, "  that build: %s\n  this build: %s\n", line.c_str() + 9, build_description().c_str());
      continue;
    }
    std::istringstream in(line);
    std::string p;
    std::string d;
    double other_dispatch = 0;
    double other_memcpy = 0;
    if (!(in >> p >> d >> other_dispatch >> other_memcpy) || other_memcpy <= 0) continue;
    const double a = m.get(p, d, "dispatch", kKeyShape);
    const double b = m.get(p, d, "memcpy", kKeyShape);
    if (a <= 0 || b <= 0) continue;
    const double that_ratio = other_dispatch / other_memcpy;
    const double this_ratio = a / b;
    const double rel = that_ratio / this_ratio;
    const bool ok = rel >= 0.95;
    ++total;
    met += ok ? 1 : 0;
    std::fprintf(out, "  %-4s %-11s default %.3fx memcpy, native %.3fx memcpy: default/native %.3f (target >= 0.95) %s\n",
                 d.c_str(), p.c_str(), that_ratio, this_ratio, rel, ok ? "MET" : "NOT MET");
  }
  if (total > 0)
    std::fprintf(out, "  %d of %d MET\n", met, total);
  else
    std::fprintf(out, "  no case in common (was the key shape filtered out of either run?)\n");
}

struct SummaryOptions {
  std::string key_ratios_out;
  std::string compare_with;
};

void print_summary(const RecordingReporter& rec, const SummaryOptions& options, std::FILE* out) {
  struct Row {
    const CaseInfo* info;
    double bps;
    std::size_t runs;
    std::string error;
  };
  std::vector<Row> rows;
  Measurements measured;
  std::size_t min_runs = 0;
  std::size_t max_runs = 0;
  auto group_key = [](const CaseInfo& c) {
    std::string g = c.pairing + "/" + c.dtype + "/" + shape_args(c.shape);
    if (!c.layout.empty()) g += "/threads:" + std::to_string(c.threads);
    return g;
  };
  std::map<std::string, double> baseline;  // group -> memcpy bytes/s
  for (const Result& r : rec.results()) {
    const auto it = registered().find(r.name);
    if (it == registered().end()) {
      std::fprintf(out, "rotary_bench: warning: run '%s' matches no registered case\n", r.name.c_str());
      continue;
    }
    const double bps = r.value();
    const std::size_t runs = r.runs();
    min_runs = rows.empty() ? runs : std::min(min_runs, runs);
    max_runs = std::max(max_runs, runs);
    rows.push_back(Row{&it->second, bps, runs, r.error});
    if (bps > 0) measured.add(it->second, bps);
    if (it->second.impl == "memcpy" && bps > 0) baseline[group_key(it->second)] = bps;
  }
  if (rows.empty()) return;

  if (max_runs <= 1)
    std::fprintf(out, "\nrotary_bench summary: out of place, 1 thread unless a threads column says otherwise, single run each\n");
  else if (min_runs == max_runs)
    std::fprintf(out, "\nrotary_bench summary: out of place, 1 thread unless a threads column says otherwise, median of %zu runs each\n", max_runs);
  else
    std::fprintf(out, "\nrotary_bench summary: out of place, 1 thread unless a threads column says otherwise, median of the runs column (key cases: %zu)\n",
                 max_runs);
  std::fprintf(out, "  GB/s = 1e9 B/s of vectors read + written (cos/sin table not counted), per CPU time\n");
  std::fprintf(out, "  x memcpy = GB/s / memcpy GB/s of the same pairing, dtype and shape, in this run\n");
  std::fprintf(out, "  heads 40 = 32 query + 8 key heads per token, separate q and k arrays (fused shapes)\n");
  std::fprintf(out, "machine: %s\n", machine_description(rec.cpu()).c_str());
  std::fprintf(out, "build:   %s\n\n", build_description().c_str());
  auto ratio_columns = [&](const Row& row, const std::string& group) {
    if (!row.error.empty() || row.bps < 0) {
      std::fprintf(out, "%9s %9s  %s\n", "-", "-", row.error.empty() ? "no result" : row.error.c_str());
      return;
    }
    const auto base = baseline.find(group);
    if (base == baseline.end())
      std::fprintf(out, "%9.2f %9s\n", row.bps / 1e9, "-");
    else
      std::fprintf(out, "%9.2f %9.3f\n", row.bps / 1e9, row.bps / base->second);
  };
  auto mib = [](const CaseInfo& c) {
    return 2.0 * static_cast<double>(c.shape.elements()) * static_cast<double>(c.element_bytes) / (1024.0 * 1024.0);
  };
  std::fprintf(out, "%-12s %-5s %-11s %6s %5s %8s %9s %4s %9s %9s\n", "pairing", "dtype", "impl", "tokens",
               "heads", "head_dim", "MiB", "runs", "GB/s", "x memcpy");
  std::string previous_group;
  bool any_batch = false;
  for (const Row& row : rows) {
    const CaseInfo& c = *row.info;
    if (!c.layout.empty()) {
      any_batch = true;
      continue;
    }
    const std::string group = group_key(c);
    if (!previous_group.empty() && group != previous_group) std::fprintf(out, "\n");
    previous_group = group;
    std::fprintf(out, "%-12s %-5s %-11s %6lld %5lld %8lld %9.2f %4zu ", c.pairing.c_str(), c.dtype.c_str(),
                 c.impl.c_str(), static_cast<long long>(c.shape.tokens),
                 static_cast<long long>(c.shape.heads), static_cast<long long>(c.shape.head_dim), mib(c), row.runs);
    ratio_columns(row, group);
  }
  if (any_batch) {
    std::fprintf(out,
                 "\nlayouts, fused q+k and threads (apply/<pairing>/<dtype>/<impl>/<layout>/.../threads:N;\n"
                 "  x memcpy = against the flat memcpy of the same bytes with the same thread count):\n");
    std::fprintf(out, "%-12s %-5s %-11s %-6s %6s %5s %8s %7s %9s %4s %9s %9s\n", "pairing", "dtype", "impl",
                 "layout", "tokens", "heads", "head_dim", "threads", "MiB", "runs", "GB/s", "x memcpy");
    previous_group.clear();
    for (const Row& row : rows) {
      const CaseInfo& c = *row.info;
      if (c.layout.empty()) continue;
      const std::string group = group_key(c);
      if (!previous_group.empty() && group != previous_group) std::fprintf(out, "\n");
      previous_group = group;
      std::fprintf(out, "%-12s %-5s %-11s %-6s %6lld %5lld %8lld %7d %9.2f %4zu ", c.pairing.c_str(),
                   c.dtype.c_str(), c.impl.c_str(), c.layout.c_str(), static_cast<long long>(c.shape.tokens),
                   static_cast<long long>(c.shape.heads), static_cast<long long>(c.shape.head_dim), c.threads,
                   mib(c), row.runs);
      ratio_columns(row, group);
    }
  }
  if (options.compare_with.empty())
    print_targets(measured, out);
  else
    print_comparison(measured, options.compare_with, out);
  if (!options.key_ratios_out.empty()) write_key_ratios(measured, options.key_ratios_out);
  std::fflush(out);
}

// Takes `--name=value` out of args (the last one wins); returns value or "".
std::string take_flag(std::vector<char*>& args, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  std::string value;
  for (auto it = args.begin(); it != args.end();) {
    if (*it != nullptr && std::string(*it).rfind(prefix, 0) == 0) {
      value = std::string(*it).substr(prefix.size());
      it = args.erase(it);
    } else {
      ++it;
    }
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  // The suite's default minimum time per benchmark; a --benchmark_min_time given by the user comes
  // later on the command line and wins.
  std::string min_time = std::string("--benchmark_min_time=") + ROTARY_BENCH_MIN_TIME;
  std::vector<char*> args;
  args.push_back(argv[0]);
  args.push_back(min_time.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  SummaryOptions options;
  options.key_ratios_out = take_flag(args, "rotary_key_ratios_out");
  options.compare_with = take_flag(args, "rotary_compare_with");
  const std::string key_reps = take_flag(args, "rotary_key_repetitions");
  if (!key_reps.empty()) {
    char* end = nullptr;
    const long n = std::strtol(key_reps.c_str(), &end, 10);
    if (end == key_reps.c_str() || *end != '\0' || n < 1 || n > 100) {
      std::fprintf(stderr, "rotary_bench: --rotary_key_repetitions wants 1..100, got '%s'\n", key_reps.c_str());
      return 1;
    }
    key_repetitions() = static_cast<int>(n);
  }
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

  for (const Dtype& dtype : kDtypes) dtype.register_all(dtype.name);
  for (const Dtype& dtype : kDtypes) dtype.register_batch(dtype.name);

  RecordingReporter reporter(benchmark::CreateDefaultDisplayReporter());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::cout.flush();
  // Machine-readable output on stdout stays parseable: the summary goes to stderr then.
  print_summary(reporter, options, reporter.display_is_console() ? stdout : stderr);
  benchmark::Shutdown();
  return 0;
}
