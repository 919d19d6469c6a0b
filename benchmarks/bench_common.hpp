// rotary_bench: throughput of rotary's kernels, of what a user would otherwise write, and of a
// memcpy of the same bytes (the ceiling of a memory-bound operation; DESIGN.md §5). One executable,
// built from:
//   bench_common.hpp/.cpp  what the rest shares: shapes, dtypes, buffers, the registry of cases
//                          (CaseInfo), the timed loop (run_prepared), the thread pools
//   kernels.cpp            apply/<pairing>/<dtype>/<impl>/tokens:<T>/heads:<H>/head_dim:<D>: every
//                          kernel, per ISA, dispatch, the user's alternatives and memcpy
//   layouts.cpp            apply/<pairing>/<dtype>/<impl>/<layout>/.../threads:<N>: batch layouts,
//                          fused q+k and threads
//   report.cpp             main(), the own flags, the summary table, key ratios, the build comparison
//   targets.hpp            the speed targets the summary evaluates, one table row each
// Every case moves tokens*heads*head_dim elements from one buffer into another (out of place),
// token t at position t unless its layout says otherwise. Bytes processed = vectors read + written;
// the cos/sin table is not counted. Names are a contract (scripts and users filter on them).
#pragma once

#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <tuple>
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

namespace rotary_bench {

using rotary::Pairing;

// ---- shapes ---------------------------------------------------------------------------------

struct Shape {
  std::int64_t tokens;
  std::int64_t heads;     // head rows per token (fused shapes: query + key heads)
  std::int64_t head_dim;
  std::int64_t kv_heads;  // fused q+k shapes: how many of `heads` are key heads; 0: one tensor

  constexpr std::int64_t elements() const { return tokens * heads * head_dim; }
  constexpr bool fused() const { return kv_heads > 0; }
  constexpr std::int64_t q_heads() const { return heads - kv_heads; }
  constexpr bool operator==(const Shape& o) const {
    return tokens == o.tokens && heads == o.heads && head_dim == o.head_dim && kv_heads == o.kv_heads;
  }
};

// The shapes the targets read (the key shapes) and the batch cases use.
constexpr Shape kDecodeShape = {1, 32, 128, 0};   // decode: one token, 32 heads x 128 (Llama-style)
constexpr Shape kKeyShape = {512, 32, 128, 0};    // prefill (L3-resident in f32: 16 MiB moved); the key
                                                  // ratios and run.sh's -march=native comparison
constexpr Shape kShortShape = {16, 32, 128, 0};   // short prefill (512 KiB moved in f32)
constexpr Shape kMidShape = {64, 32, 128, 0};     // a prefill chunk (2 MiB moved in f32; threads only)
constexpr Shape kLongShape = {4096, 32, 128, 0};  // long prefill (DRAM)
constexpr Shape kDramShape = {8192, 32, 128, 0};  // longer prefill (DRAM)
constexpr Shape kGqaShape = {512, 40, 128, 8};    // GQA prefill, fused: 32 query + 8 key heads

// Real model shapes, working sets from L1 (decode) to DRAM (long prefill). Extending: one line.
constexpr Shape kShapes[] = {
    kDecodeShape,
    kShortShape,
    kKeyShape,
    kLongShape,
    kDramShape,
    {512, 32, 64, 0},    // small heads
    {512, 32, 256, 0},   // large heads (Gemma-style)
    {512, 8, 128, 0},    // GQA key heads alone
    {1, 40, 128, 8},     // GQA decode, fused: 32 query + 8 key heads
    kGqaShape,
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

// "tokens:T/heads:H/head_dim:D", as Google Benchmark names the arguments.
std::string shape_args(const Shape& s);

// ---- dtypes ---------------------------------------------------------------------------------

template <class T>
struct Dtype {
  using type = T;
  const char* name;
};

// Every dtype benchmarked, in the order the tables list them. Extending: one entry.
inline constexpr std::tuple kDtypes{Dtype<float>{"f32"}, Dtype<rotary::f16>{"f16"}, Dtype<rotary::bf16>{"bf16"}};

inline constexpr auto kDtypeNames = std::apply(
    [](const auto&... d) { return std::array<const char*, sizeof...(d)>{d.name...}; }, kDtypes);

// f(Dtype<T>{name}) for every dtype, in order.
template <class F>
void for_each_dtype(const F& f) {
  std::apply([&f](const auto&... d) { (f(d), ...); }, kDtypes);
}

// ---- data: one RoPE per (pairing, head_dim), one pair of buffers per dtype -------------------

template <class T>
const rotary::Rope<T>& rope_for(Pairing pairing, std::int64_t head_dim) {
  static std::map<std::pair<Pairing, std::int64_t>, std::unique_ptr<rotary::Rope<T>>> ropes;
  auto& slot = ropes[{pairing, head_dim}];
  if (!slot) slot = std::make_unique<rotary::Rope<T>>(rotary::RotarySpec(head_dim, pairing), max_tokens());
  return *slot;
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

inline rotary::StridedLayout contiguous_layout(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim) {
  rotary::StridedLayout layout;
  layout.tokens = tokens;
  layout.heads = heads;
  layout.head_stride = head_dim;
  layout.token_stride = heads * head_dim;
  return layout;
}

// The startup checks' verdict: prints the message and exits.
[[noreturn]] void fail(const std::string& message);

// ---- registration and the timed loop --------------------------------------------------------

// What each registered name stands for; the summary looks runs up here by name.
struct CaseInfo {
  std::string pairing;
  std::string dtype;
  std::string impl;
  Shape shape;
  std::size_t element_bytes;
  std::string layout;  // batch cases only ("" for the apply/ table)
  int threads;         // batch cases only (0 for the apply/ table)

  // apply/<pairing>/<dtype>/<impl>[/<layout>]: the name registered with Google Benchmark.
  std::string function_name() const;
  // The name Google Benchmark reports: function_name()/tokens:T/heads:H/head_dim:D[/threads:N].
  std::string run_name() const;
};

// Every registered case by run_name().
std::map<std::string, CaseInfo>& registered();

// One call of a case over its whole tensor. Everything that is not part of the operation
// (matrices, broadcast tables, a cache-free Rope, positions) is built before, outside timing.
using Runner = std::function<void()>;

// Registers a benchmark for `info` (arguments tokens, heads, head_dim, and threads for batch cases;
// microseconds; wall time when threads > 1) that calls run(state, id) with a program-wide unique id,
// and records info in registered().
void register_case(const CaseInfo& info, const std::function<void(benchmark::State&, int id)>& run);

// Registers `name` as a benchmark whose runner is built once per benchmark (make(), outside timing;
// PreparedSlot) and moves `bytes` per call (bytes_per_second), in microseconds: the fusion/ rows.
void register_runner(const std::string& name, std::int64_t bytes, const std::function<Runner()>& make);

// Key cases: what the targets read. With --rotary_key_repetitions=N (benchmarks/run.sh: 3) each is
// registered N times under its own name, in N interleaved rounds, so a ratio's two sides are
// measured close together in time; the summary takes the median of all runs of a name.
int& key_repetitions();

// Which benchmark's prepared runner is alive. Google Benchmark calls a benchmark function several
// times (iteration estimation, repetitions); preparing once per benchmark keeps the matrix impl's
// setup out of the suite time, and holding one at a time bounds memory.
struct PreparedSlot {
  int id = -1;
  Runner run;
};

PreparedSlot& prepared_slot();

// The body of every benchmark: makes the first `buffer_elements` of T's buffers ready and builds
// the runner, make_runner(in, out), once per benchmark id; times it; counts 2 * moved_elements
// elements (read + written) per call.
template <class T, class MakeRunner>
void run_prepared(benchmark::State& state, int id, std::int64_t buffer_elements, std::int64_t moved_elements,
                  const MakeRunner& make_runner) {
  Buffers<T>& buf = buffers<T>();
  PreparedSlot& slot = prepared_slot();
  if (slot.id != id) {
    slot.run = nullptr;  // free the previous benchmark's state before building this one's
    slot.id = -1;
    if (!buf.prepare(static_cast<std::size_t>(buffer_elements))) {
      state.SkipWithError("shape larger than the buffers (max_elements)");
      return;
    }
    slot.run = make_runner(buf.in(), buf.out());
    slot.id = id;
  }
  const Runner& run = slot.run;
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 * moved_elements *
                          static_cast<std::int64_t>(sizeof(T)));
}

// Registers every case of each family (checking each implementation's output first), in the order
// the tables list them: kernels.cpp, then layouts.cpp.
void register_kernel_cases();
void register_layout_cases();

// ---- threads --------------------------------------------------------------------------------

// One persistent rotary::ThreadPool per thread count (the caller and threads - 1 workers, started on
// first use); nullptr for 1 thread (no ParallelFor at all).
rotary::ThreadPool* pool_for(int threads);

}  // namespace rotary_bench
