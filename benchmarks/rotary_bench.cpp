// rotary_bench: throughput of rotary's kernels, of what a user would otherwise write, and of a
// memcpy of the same bytes (the ceiling of a memory-bound operation; DESIGN.md §5).
//
// Every benchmark is named
//   apply/<pairing>/<dtype>/<impl>/tokens:<T>/heads:<H>/head_dim:<D>
// and moves tokens*heads*head_dim elements from one 64-byte aligned buffer into another (out of
// place). Bytes processed = vectors read + written; the cos/sin table is not counted.
// After Google Benchmark's own report, a summary prints GB/s and the ratio to the memcpy of the
// same pairing, dtype and shape measured in the same run (the median when
// --benchmark_repetitions > 1).
//
// Extending: a dtype is one line in kDtypes, an implementation one line in impls<T>(), a shape one
// line in kShapes. Before anything runs, every implementation's output is checked against the
// scalar kernel's on small inputs: bit for bit for the rotary kernels (dispatch and, later, every
// SIMD kernel), within a few ulps for the Eigen formulations.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
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
#include <new>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <rotary/rotary.hpp>

namespace {

using rotary::Pairing;
using Index = Eigen::Index;

// ---- shapes ---------------------------------------------------------------------------------

struct Shape {
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t head_dim;

  constexpr std::int64_t elements() const { return tokens * heads * head_dim; }
};

// Real model shapes, working sets from L1 (decode) to DRAM (long prefill).
constexpr Shape kShapes[] = {
    {1, 32, 128},     // decode: one token, 32 heads x 128 (Llama-style)
    {16, 32, 128},    // short prefill
    {512, 32, 128},   // prefill
    {4096, 32, 128},  // long prefill (DRAM)
    {8192, 32, 128},  // longer prefill (DRAM)
    {512, 32, 64},    // small heads
    {512, 32, 256},   // large heads (Gemma-style)
    {512, 8, 128},    // GQA key/value heads
};

constexpr std::int64_t max_tokens() {
  std::int64_t m = 0;
  for (const Shape& s : kShapes) m = s.tokens > m ? s.tokens : m;
  return m;
}

constexpr Pairing kPairings[] = {Pairing::interleaved, Pairing::half_split};

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

constexpr std::int64_t max_elements() {
  std::int64_t m = 0;
  for (const Shape& s : kShapes) m = s.elements() > m ? s.elements() : m;
  return m;
}

// The input and output buffers of every benchmark of a dtype: one reservation sized for the largest
// shape, so a case sees the same addresses whatever ran before it (or was filtered out). The output
// sits 2 KiB off the input modulo 4 KiB, so no case streams with input and output at equal page
// offsets (4K aliasing: loads falsely wait on earlier stores; glibc's memcpy also picks its path by
// this distance). On the dev VM the effect was within run-to-run noise; this keeps it out by design.
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

// One call: rotate (or copy) `shape` from `in` to `out`, rows = tokens*heads, row-major,
// token t at position t (rotary::Positions::contiguous(0)).
template <class T>
struct Case {
  Pairing pairing;
  Shape shape;
  const rotary::Rope<T>* rope;
  const T* in;
  T* out;
};

// What an implementation's prepare step returns: one pass over the whole tensor. Everything that
// is not part of the operation (matrices, broadcast tables) is built by prepare, outside timing.
using Runner = std::function<void()>;

template <class T>
using Prepare = Runner (*)(const Case<T>&);

// What the startup check demands of an implementation's output.
enum class Expect {
  copy,       // equals the input (memcpy)
  reference,  // the reference the others are compared with (the scalar kernel)
  bit_exact,  // equals the reference bit for bit (every rotary kernel: same operation order)
  close,      // within a few ulps of the reference (other formulations)
};

template <class T>
struct Impl {
  const char* name;
  Prepare<T> prepare;
  Expect expect;
  bool (*runs_on)(const Shape&);  // nullptr: every shape
};

template <class T>
Runner prepare_memcpy(const Case<T>& c) {
  const T* in = c.in;
  T* out = c.out;
  const auto bytes = static_cast<std::size_t>(c.shape.elements()) * sizeof(T);
  return [in, out, bytes] { std::memcpy(out, in, bytes); };
}

// A rotary kernel called directly (no dispatch, no checks): Kernel(args, token_begin, token_end).
template <class T, auto Kernel>
Runner prepare_kernel(const Case<T>& c) {
  rotary::StridedLayout layout;
  layout.tokens = c.shape.tokens;
  layout.heads = c.shape.heads;
  layout.head_stride = c.shape.head_dim;
  layout.token_stride = c.shape.heads * c.shape.head_dim;
  const rotary::detail::KernelArgs<T> args =
      rotary::detail::make_args(*c.rope, c.in, layout, c.out, layout,
                                rotary::Positions::contiguous(0), rotary::Direction::forward);
  return [args] { Kernel(args, 0, args.tokens); };
}

// The public unchecked entry point, out of place over Eigen rows: whatever kernel it dispatches to.
template <class T>
Runner prepare_dispatch(const Case<T>& c) {
  const rotary::Rope<T>* rope = c.rope;
  const T* in = c.in;
  T* out = c.out;
  const Index rows = c.shape.tokens * c.shape.heads;
  const Index cols = c.shape.head_dim;
  const std::int64_t heads = c.shape.heads;
  return [rope, in, out, rows, cols, heads] {
    Eigen::Map<const rotary::RowMatrix<T>> x(in, rows, cols);
    Eigen::Map<rotary::RowMatrix<T>> y(out, rows, cols);
    rotary::apply_unchecked(*rope, x, y, rotary::Positions::contiguous(0), heads);
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
    const T* row = cache.row(t);
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

// Every implementation benchmarked for dtype T; adding one (avx2, avx512, neon) is one line, e.g.
//   {"avx512", &prepare_kernel<T, &rotary::detail::avx512::rotate_tokens<T>>, Expect::bit_exact,
//    [](const Shape&) { return rotary::isa_supported(rotary::Isa::avx512); }},
// runs_on also guards the startup check, so an ISA this CPU lacks is neither checked nor run.
template <class T>
const std::vector<Impl<T>>& impls() {
  static const std::vector<Impl<T>> table = {
      {"memcpy", &prepare_memcpy<T>, Expect::copy, nullptr},
      {"matrix", &prepare_matrix<T>, Expect::close, &matrix_fits<T>},
      {"eigen_expr", &prepare_eigen_expr<T>, Expect::close, nullptr},
      {"scalar", &prepare_kernel<T, &rotary::detail::scalar::rotate_tokens<T>>, Expect::reference, nullptr},
#if ROTARY_X86_KERNELS
      {"avx2", &prepare_kernel<T, &rotary::detail::avx2::rotate_tokens<T>>, Expect::bit_exact,
       [](const Shape&) { return rotary::isa_supported(rotary::Isa::avx2); }},
      {"avx512", &prepare_kernel<T, &rotary::detail::avx512::rotate_tokens<T>>, Expect::bit_exact,
       [](const Shape&) { return rotary::isa_supported(rotary::Isa::avx512); }},
#endif
      {"dispatch", &prepare_dispatch<T>, Expect::bit_exact, nullptr},
  };
  return table;
}

// ---- startup check: every implementation computes what the scalar kernel computes ------------

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "rotary_bench: sanity check failed: %s\n", message.c_str());
  std::exit(EXIT_FAILURE);
}

template <class T>
void check_dtype(const char* dtype) {
  std::vector<std::int64_t> head_dims;
  for (const Shape& s : kShapes)
    if (std::find(head_dims.begin(), head_dims.end(), s.head_dim) == head_dims.end())
      head_dims.push_back(s.head_dim);
  const auto& table = impls<T>();
  const auto reference = std::find_if(table.begin(), table.end(),
                                      [](const Impl<T>& i) { return i.expect == Expect::reference; });
  if (reference == table.end()) fail("no implementation is marked Expect::reference");
  // close: |y - y_ref| <= 16 ulp(1); inputs lie in [-1, 1], so outputs in [-sqrt 2, sqrt 2].
  const double tolerance = 16.0 * static_cast<double>(std::numeric_limits<T>::epsilon());

  for (const Pairing pairing : kPairings) {
    for (const std::int64_t head_dim : head_dims) {
      const Shape shape{17, 3, head_dim};
      const auto n = static_cast<std::size_t>(shape.elements());
      const rotary::Rope<T> rope(rotary::RotarySpec(head_dim, pairing), shape.tokens);
      rotary::detail::AlignedVector<T> in(n);
      rotary::detail::AlignedVector<T> want(n, T(0));
      rotary::detail::AlignedVector<T> got(n, T(0));
      fill_random(in.data(), n, 7u);
      reference->prepare(Case<T>{pairing, shape, &rope, in.data(), want.data()})();

      for (const Impl<T>& impl : table) {
        if (impl.expect == Expect::reference) continue;
        if (impl.runs_on != nullptr && !impl.runs_on(shape)) continue;
        std::fill(got.begin(), got.end(), T(0));
        impl.prepare(Case<T>{pairing, shape, &rope, in.data(), got.data()})();
        const rotary::detail::AlignedVector<T>& expected = impl.expect == Expect::copy ? in : want;
        for (std::size_t i = 0; i < n; ++i) {
          const auto g = static_cast<double>(got[i]);
          const auto e = static_cast<double>(expected[i]);
          const bool ok = impl.expect == Expect::close
                              ? std::fabs(g - e) <= tolerance
                              : std::memcmp(&got[i], &expected[i], sizeof(T)) == 0;
          if (!ok) {
            const auto d = static_cast<std::size_t>(head_dim);
            const auto heads = static_cast<std::size_t>(shape.heads);
            char message[512];
            std::snprintf(message, sizeof message,
                          "%s/%s/%s, %lld tokens x %lld heads x head_dim %lld: token %zu head %zu "
                          "column %zu is %.9g, %s %.9g (%s)",
                          rotary::to_string(pairing).data(), dtype, impl.name,
                          static_cast<long long>(shape.tokens), static_cast<long long>(shape.heads),
                          static_cast<long long>(head_dim), i / d / heads, i / d % heads, i % d, g,
                          impl.expect == Expect::copy ? "input" : reference->name, e,
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

template <class T>
void register_dtype(const char* dtype) {
  check_dtype<T>(dtype);
  const auto& table = impls<T>();
  for (const Pairing pairing : kPairings) {
    for (const Shape& shape : kShapes) {
      for (std::size_t i = 0; i < table.size(); ++i) {
        const Impl<T>& impl = table[i];
        if (impl.runs_on != nullptr && !impl.runs_on(shape)) continue;
        const std::string pairing_name(rotary::to_string(pairing));
        const std::string name = "apply/" + pairing_name + "/" + dtype + "/" + impl.name;
        const int id = static_cast<int>(registered().size());
        benchmark::RegisterBenchmark(name.c_str(),
                                     [id, i, pairing, shape](benchmark::State& state) {
                                       run_case<T>(state, id, i, pairing, shape);
                                     })
            ->Args({shape.tokens, shape.heads, shape.head_dim})
            ->ArgNames({"tokens", "heads", "head_dim"})
            ->Unit(benchmark::kMicrosecond);
        const std::string full = name + "/tokens:" + std::to_string(shape.tokens) + "/heads:" +
                                 std::to_string(shape.heads) + "/head_dim:" + std::to_string(shape.head_dim);
        registered()[full] = CaseInfo{pairing_name, dtype, impl.name, shape, sizeof(T)};
      }
    }
  }
}

// Every dtype benchmarked; adding one (f16, bf16) is one line: {"bf16", &register_dtype<bf16>}.
struct Dtype {
  const char* name;
  void (*register_all)(const char* name);
};

constexpr Dtype kDtypes[] = {
    {"f32", &register_dtype<float>},
};

// ---- summary --------------------------------------------------------------------------------

struct Result {
  std::string name;
  std::vector<double> bytes_per_second;  // one per repetition
  double median_aggregate = -1;          // Google Benchmark's median, when it computed one
  std::int64_t repetitions = 1;
  std::string error;
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
        r.median_aggregate = bps->second.value;
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
    results_.push_back(Result{name, {}, -1, 1, {}});
    return results_.back();
  }

  benchmark::BenchmarkReporter* display_;
  const benchmark::CPUInfo* cpu_ = nullptr;
  std::vector<Result> results_;
  std::map<std::string, std::size_t> index_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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

void print_summary(const RecordingReporter& rec, std::FILE* out) {
  struct Row {
    const CaseInfo* info;
    double bps;
    std::string error;
  };
  std::vector<Row> rows;
  std::map<std::string, double> baseline;  // "pairing/dtype/shape" -> memcpy bytes/s
  std::int64_t repetitions = 1;
  auto key = [](const CaseInfo& c) {
    return c.pairing + "/" + c.dtype + "/" + std::to_string(c.shape.tokens) + "/" +
           std::to_string(c.shape.heads) + "/" + std::to_string(c.shape.head_dim);
  };
  for (const Result& r : rec.results()) {
    const auto it = registered().find(r.name);
    if (it == registered().end()) {
      std::fprintf(out, "rotary_bench: warning: run '%s' matches no registered case\n", r.name.c_str());
      continue;
    }
    double bps = -1;
    if (r.median_aggregate >= 0) {
      bps = r.median_aggregate;
    } else if (!r.bytes_per_second.empty()) {
      bps = median(r.bytes_per_second);
    }
    repetitions = std::max(repetitions, r.repetitions);
    rows.push_back(Row{&it->second, bps, r.error});
    if (it->second.impl == "memcpy" && bps > 0) baseline[key(it->second)] = bps;
  }
  if (rows.empty()) return;

  if (repetitions > 1)
    std::fprintf(out, "\nrotary_bench summary: 1 thread, out of place, median of %lld repetitions\n",
                 static_cast<long long>(repetitions));
  else
    std::fprintf(out, "\nrotary_bench summary: 1 thread, out of place, single run each\n");
  std::fprintf(out, "  GB/s = 1e9 B/s of vectors read + written (cos/sin table not counted), per CPU time\n");
  std::fprintf(out, "  x memcpy = GB/s / memcpy GB/s of the same pairing, dtype and shape, in this run\n");
  std::fprintf(out, "machine: %s\n", machine_description(rec.cpu()).c_str());
  std::fprintf(out, "build:   %s\n\n", build_description().c_str());
  std::fprintf(out, "%-12s %-5s %-10s %6s %5s %8s %9s %9s %9s\n", "pairing", "dtype", "impl", "tokens",
               "heads", "head_dim", "MiB", "GB/s", "x memcpy");
  std::string previous_group;
  for (const Row& row : rows) {
    const CaseInfo& c = *row.info;
    const std::string group = key(c);
    if (!previous_group.empty() && group != previous_group) std::fprintf(out, "\n");
    previous_group = group;
    const double mib = 2.0 * static_cast<double>(c.shape.elements()) *
                       static_cast<double>(c.element_bytes) / (1024.0 * 1024.0);
    std::fprintf(out, "%-12s %-5s %-10s %6lld %5lld %8lld %9.2f ", c.pairing.c_str(), c.dtype.c_str(),
                 c.impl.c_str(), static_cast<long long>(c.shape.tokens),
                 static_cast<long long>(c.shape.heads), static_cast<long long>(c.shape.head_dim), mib);
    if (!row.error.empty() || row.bps < 0) {
      std::fprintf(out, "%9s %9s  %s\n", "-", "-", row.error.empty() ? "no result" : row.error.c_str());
      continue;
    }
    const auto base = baseline.find(group);
    if (base == baseline.end())
      std::fprintf(out, "%9.2f %9s\n", row.bps / 1e9, "-");
    else
      std::fprintf(out, "%9.2f %9.3f\n", row.bps / 1e9, row.bps / base->second);
  }
  std::fflush(out);
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
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

  for (const Dtype& dtype : kDtypes) dtype.register_all(dtype.name);

  RecordingReporter reporter(benchmark::CreateDefaultDisplayReporter());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::cout.flush();
  // Machine-readable output on stdout stays parseable: the summary goes to stderr then.
  print_summary(reporter, reporter.display_is_console() ? stdout : stderr);
  benchmark::Shutdown();
  return 0;
}
