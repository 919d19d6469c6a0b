// rotary — threads through a caller-supplied parallel-for. rotary starts no threads of its own:
// engines pass their thread pool as a ParallelFor; work is split over tokens.
#ifndef ROTARY_PARALLEL_HPP
#define ROTARY_PARALLEL_HPP

#include <algorithm>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "config.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace rotary {

// Must call body(begin, end) over disjoint ranges that cover [0, n) exactly, possibly concurrently,
// and return when all calls have returned. An empty ParallelFor runs body(0, n) on the caller.
using ParallelFor =
    std::function<void(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body)>;

// Splits [0, n) into `parts` nearly equal ranges; range i is [bounds(i), bounds(i + 1)).
// Unchecked (ROTARY_ASSERT in debug builds): parts >= 1, n >= 0, 0 <= i <= parts.
inline std::int64_t split_bound(std::int64_t n, std::int64_t parts, std::int64_t i) noexcept {
  ROTARY_ASSERT(parts >= 1 && n >= 0 && i >= 0 && i <= parts);
  return n / parts * i + std::min(i, n % parts);
}

// A ParallelFor on std::thread: `threads` workers per call (the caller is one of them). Threads are
// created per call: fine for large calls and examples; engines should pass their own pool instead.
inline ParallelFor thread_parallel_for(unsigned threads) {
  return [threads](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
    const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n));
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(parts - 1));
    for (std::int64_t i = 1; i < parts; ++i)
      pool.emplace_back([&body, n, parts, i] { body(split_bound(n, parts, i), split_bound(n, parts, i + 1)); });
    body(0, split_bound(n, parts, 1));
    for (auto& t : pool) t.join();
  };
}

#if defined(_OPENMP)
// A ParallelFor on the OpenMP runtime (available when the including TU is built with -fopenmp).
inline ParallelFor openmp_parallel_for() {
  return [](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
#pragma omp parallel
    {
      const auto parts = static_cast<std::int64_t>(omp_get_num_threads());
      const auto i = static_cast<std::int64_t>(omp_get_thread_num());
      const std::int64_t b = split_bound(n, parts, i);
      const std::int64_t e = split_bound(n, parts, i + 1);
      if (b < e) body(b, e);
    }
  };
}
#endif

}  // namespace rotary

#endif  // ROTARY_PARALLEL_HPP
