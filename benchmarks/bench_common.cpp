// rotary_bench: the shared pieces declared in bench_common.hpp that are not templates: the
// registry of cases and their names, the prepared-runner slot, the startup checks' failure exit and
// the thread pool.
#include "bench_common.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace rotary_bench {

std::string shape_args(const Shape& s) {
  return "tokens:" + std::to_string(s.tokens) + "/heads:" + std::to_string(s.heads) +
         "/head_dim:" + std::to_string(s.head_dim);
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "rotary_bench: sanity check failed: %s\n", message.c_str());
  std::exit(EXIT_FAILURE);
}

std::string CaseInfo::function_name() const {
  std::string name = "apply/" + pairing + "/" + dtype + "/" + impl;
  if (!layout.empty()) name.append("/").append(layout);
  return name;
}

std::string CaseInfo::run_name() const {
  std::string name = function_name() + "/" + shape_args(shape);
  if (threads > 0) name += "/threads:" + std::to_string(threads);
  return name;
}

std::map<std::string, CaseInfo>& registered() {
  static std::map<std::string, CaseInfo> cases;
  return cases;
}

void register_case(const CaseInfo& info, const std::function<void(benchmark::State&, int id)>& run) {
  static int next_id = 0;  // one per registration (PreparedSlot), whatever the family and dtype
  const int id = next_id++;
  auto* b = benchmark::RegisterBenchmark(info.function_name().c_str(),
                                         [id, run](benchmark::State& state) { run(state, id); });
  if (info.threads > 0) {
    b->Args({info.shape.tokens, info.shape.heads, info.shape.head_dim, info.threads})
        ->ArgNames({"tokens", "heads", "head_dim", "threads"});
  } else {
    b->Args({info.shape.tokens, info.shape.heads, info.shape.head_dim})->ArgNames({"tokens", "heads", "head_dim"});
  }
  b->Unit(benchmark::kMicrosecond);
  if (info.threads > 1) b->UseRealTime();
  registered()[info.run_name()] = info;
}

int& key_repetitions() {
  static int n = 1;
  return n;
}

PreparedSlot& prepared_slot() {
  static PreparedSlot slot;
  return slot;
}

// ---- Pool -----------------------------------------------------------------------------------

namespace {

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

Pool::Pool(int threads) : size_(threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

Pool::~Pool() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void Pool::run(const std::function<void(int)>& body) {
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

rotary::ParallelFor Pool::parallel_for() {
  return [this](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
    const std::int64_t parts = size_;
    run([n, parts, &body](int i) {
      const std::int64_t begin = rotary::split_bound(n, parts, i);
      const std::int64_t end = rotary::split_bound(n, parts, i + 1);
      if (begin < end) body(begin, end);
    });
  };
}

void Pool::work(int id) {
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

Pool* pool_for(int threads) {
  static std::map<int, std::unique_ptr<Pool>> pools;
  if (threads <= 1) return nullptr;
  auto& slot = pools[threads];
  if (!slot) slot = std::make_unique<Pool>(threads);
  return slot.get();
}

}  // namespace rotary_bench
