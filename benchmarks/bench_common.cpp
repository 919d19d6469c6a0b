// rotary_bench: the shared pieces declared in bench_common.hpp that are not templates: the
// registry of cases and their names, the prepared-runner slot, the startup checks' failure exit and
// the thread pools.
#include "bench_common.hpp"

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

void register_runner(const std::string& name, std::int64_t bytes, const std::function<Runner()>& make) {
  static int next_id = 1 << 24;  // apart from register_case's ids
  const int id = next_id++;
  // Google Benchmark owns what it registers (the analyzer cannot see it).
  // NOLINTNEXTLINE(clang-analyzer-cplusplus.NewDeleteLeaks)
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [id, bytes, make](benchmark::State& state) {
    PreparedSlot& slot = prepared_slot();
    if (slot.id != id) {
      slot.run = nullptr;
      slot.id = -1;
      slot.run = make();
      slot.id = id;
    }
    for (auto _ : state) {
      slot.run();
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
  });
  b->Unit(benchmark::kMicrosecond);
}

int& key_repetitions() {
  static int n = 1;
  return n;
}

PreparedSlot& prepared_slot() {
  static PreparedSlot slot;
  return slot;
}

rotary::ThreadPool* pool_for(int threads) {
  static std::map<int, std::unique_ptr<rotary::ThreadPool>> pools;
  if (threads <= 1) return nullptr;
  auto& slot = pools[threads];
  if (!slot) slot = std::make_unique<rotary::ThreadPool>(static_cast<unsigned>(threads));
  return slot.get();
}

}  // namespace rotary_bench
