// rotary — threads through a caller-supplied parallel-for. Every entry point takes an optional
// trailing ParallelFor and splits its tokens over it; without one, a call runs on the calling thread.
//
//   ThreadPool            a persistent pool (the caller is one of its threads): what to pass when the
//                         engine has no pool of its own. Threads start once, in the constructor.
//   thread_parallel_for   starts std::threads on every call: examples and one-off
//                         large calls only; a ThreadPool is the same split without that cost.
//   openmp_parallel_for   the OpenMP runtime's team, when the including TU is built with -fopenmp.
//   your own pool         anything callable as a ParallelFor (below).
//
// Small calls run on the caller alone whatever is passed: handing part of a call to another thread
// costs a round trip between cores, more than rotating a few tokens takes. That cost is measured on
// the machine at hand, not assumed (HandOffCost): a call is split only into parts that each move at
// least min_parallel_bytes(parallel) (the driver's for_token_ranges, detail/driver/driver.hpp).
// Splitting never changes the result: each token is rotated by the same code with the same cos/sin.
#ifndef ROTARY_PARALLEL_HPP
#define ROTARY_PARALLEL_HPP

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"
#include "types.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace rotary {

// Must call body(begin, end) over disjoint ranges that cover [0, n) exactly, possibly concurrently,
// and return when all calls have returned. An empty ParallelFor runs body(0, n) on the caller.
// rotary's bodies throw only when called outside [0, n) (rotary::error: a broken ParallelFor);
// a ParallelFor that runs other bodies decides what a throw does.
using ParallelFor =
    std::function<void(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body)>;

// What handing part of a call to another thread costs on this machine, and the least work per part
// that makes it pay. Measured, not assumed, through the pool itself: the round trip is a ping-pong
// (the caller's range waits until a worker has started the other; a job's time is then the worker's
// reaction to a published job plus the caller's to its finish); the split overhead is what a job of
// real work loses by being split: two ranges that each copy a 64 KiB block, timed on the pool, against
// one of them on the caller alone. That is the round trip plus what the ping does not show (two
// ranges ending apart, two vCPUs that share one host core and run slower together than one alone).
// The speed is a copy of cache-resident rows (what a part's bytes cost a thread at best: a rotary
// kernel is no faster). A call of B bytes takes B / speed on one thread and B / (2 x speed) +
// overhead on two: two win from B = 2 x overhead x speed. min_part_bytes asks each part for
// 3 x overhead x speed (6x per 2-part call), so that the smallest call that splits runs ~1.5x faster
// in principle: a real call's body also walks state the caller has just written, and loses more
// than the copy job (docs/threads.md has the measurements); kernels slower than a copy (16-bit ones)
// only make splitting pay more.
struct HandOffCost {
  double round_trip_ns = 0;       // the measured jobs' lower quartile (a pool) or median (thread starts)
  double copy_bytes_per_ns = 0;   // bytes read + written per ns by one thread copying 64 KiB blocks
  std::int64_t min_part_bytes = 0;  // max(3 x max(round trip, split overhead) x copy speed, kMinPartFloor)
  double split_overhead_ns = 0;     // a job of two 64 KiB copies on the pool, minus one of them alone
};

// A part never moves less than this, however cheap the hand-off (below, a call's own fixed costs
// dominate).
inline constexpr std::int64_t kMinPartFloor = std::int64_t{16} * 1024;
// What a machine that cannot run two threads at once gets: no call is ever split.
inline constexpr std::int64_t kNeverSplit = std::numeric_limits<std::int64_t>::max() / 4;
inline constexpr HandOffCost kNoHandOff{0, 0, kNeverSplit, 0};

// Splits [0, n) into `parts` nearly equal ranges; range i is [bounds(i), bounds(i + 1)).
// Unchecked (ROTARY_ASSERT in debug builds): parts >= 1, n >= 0, 0 <= i <= parts.
inline std::int64_t split_bound(std::int64_t n, std::int64_t parts, std::int64_t i) noexcept {
  ROTARY_ASSERT(parts >= 1 && n >= 0 && i >= 0 && i <= parts);
  return n / parts * i + std::min(i, n % parts);
}

namespace detail {

// The gate's threshold override: -1 (none) uses the measured costs; a test sets 0 to split every
// call it can (test_threads) or a fixed value to check the gate's arithmetic. Not an interface.
inline std::atomic<std::int64_t>& min_parallel_bytes_state() noexcept {
  static std::atomic<std::int64_t> bytes{-1};
  return bytes;
}

// One thread's copy speed over cache-resident blocks (best of 5 rounds of 32 copies of 64 KiB).
inline double measure_copy_bytes_per_ns() {
  constexpr std::size_t kBytes = std::size_t{64} * 1024;
  std::vector<unsigned char> from(kBytes, 1), to(kBytes, 0);
  double best = 0;
  for (int round = 0; round < 6; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 32; ++i) {
      from[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i + round);
      std::memcpy(to.data(), from.data(), kBytes);
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    if (round > 0 && ns > 0) best = std::max(best, 2.0 * 32 * static_cast<double>(kBytes) / ns);  // round 0 warms
  }
  volatile unsigned char sink = to[kBytes / 2];  // keeps the copies
  (void)sink;
  return best > 0 ? best : 1.0;
}

// The q-quantile of v (0 <= q < 1), 0 if empty.
inline double quantile_of(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size()))];
}

// Each part carries this many hand-offs' worth of copying (HandOffCost).
inline constexpr double kPartOverheads = 3.0;

inline HandOffCost hand_off_cost(double round_trip_ns, double copy_bytes_per_ns,
                                 double split_overhead_ns = 0) {
  HandOffCost c{round_trip_ns, copy_bytes_per_ns, kNeverSplit, split_overhead_ns};
  const double bytes = kPartOverheads * std::max(round_trip_ns, split_overhead_ns) * copy_bytes_per_ns;
  if (bytes < static_cast<double>(kNeverSplit))
    c.min_part_bytes = std::max(static_cast<std::int64_t>(bytes), kMinPartFloor);
  return c;
}

// A spinning thread's pause: lets the sibling hyperthread run and saves power.
inline void spin_pause() noexcept {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_ia32_pause();
#elif defined(__GNUC__) && defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

}  // namespace detail

// A persistent pool of `threads` threads, the caller being one of them: threads - 1 std::threads
// start in the constructor and are joined by the destructor. pool(n, body) splits [0, n) into
// min(threads, n) nearly equal ranges (split_bound) and runs them on the caller and the workers.
// Use it as the ParallelFor of any entry point, either way:
//   rotary::ThreadPool pool(4);
//   rotary::apply(rope, x, positions, heads, {rotary::Direction::forward, pool.parallel_for()});
//   rotary::apply(rope, x, positions, heads, {rotary::Direction::forward, std::ref(pool)});
// The pool must outlive every ParallelFor made from it.
//
// Idle workers spin for up to kSpin after each job (back-to-back calls, a model's layers, find them
// awake), pausing between checks, then sleep on a condition variable: a pool left idle costs no CPU.
// Each thread has its own range (the caller range 0, worker k range k), so back-to-back calls on the
// same buffers find each part's rows in the cache of the core that rotated them last time; but
// ranges are claimed, not assigned: a thread done with its own takes any range no other thread has
// started. So a call whose workers are still waking up (or descheduled) runs on the caller, about
// as fast as without the pool, rather than waiting for them.
// One job at a time: a call made while the pool is busy (from another thread, or from inside a body)
// runs its whole body(0, n) on its own calling thread instead of waiting, so concurrent callers
// never block each other and nested calls cannot deadlock.
// If body throws, on any thread, the call still waits for every range to finish, then rethrows the
// first exception on the caller (rotary's own bodies do not throw).
class ThreadPool {
 public:
  static constexpr std::chrono::microseconds kSpin{500};
  static constexpr unsigned kMaxThreads = 0xffff;  // ranges are counted in 16 bits

  // threads == 0 is taken as 1 (the caller alone: no threads started). More than kMaxThreads throws
  // rotary::error before any thread starts (ThreadPool(-1) would otherwise ask for 65534 of them).
  explicit ThreadPool(unsigned threads)
      : size_(checked_size(threads)), claims_(new std::atomic<std::uint32_t>[size_]) {
    for (unsigned i = 0; i < size_; ++i) claims_[i].store(0, std::memory_order_relaxed);
    workers_.reserve(size_ - 1);
    try {
      for (unsigned i = 1; i < size_; ++i) workers_.emplace_back([this, i] { work(i); });
    } catch (...) {  // a thread failed to start: stop those that did before giving up
      stop_and_join();
      throw;
    }
    cost_ = size_ >= 2 && std::thread::hardware_concurrency() != 1 ? calibrate() : kNoHandOff;
  }
  ~ThreadPool() { stop_and_join(); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const noexcept { return size_; }

  // What handing a part of a call to this pool's workers costs, measured in the constructor (a ping-pong
  // of 96 jobs; docs/threads.md): rotary splits a call over this pool only into parts of at least
  // hand_off().min_part_bytes. A 1-thread pool, or any pool on a 1-CPU machine, never splits.
  const HandOffCost& hand_off() const noexcept { return cost_; }

  // Calls this pool has split over its threads so far, modulo 2^32 (its calibration's 96 included);
  // a call run on the caller alone (too small to split, or made while the pool was busy) does not.
  std::uint64_t jobs() const noexcept { return job_ticket_.load(std::memory_order_acquire) >> 32; }

  // The ParallelFor contract: body(begin, end) over [0, n), returning when every range is done.
  void operator()(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
    const std::int64_t parts = std::min<std::int64_t>(size_, n);
    if (parts <= 1 || busy_.exchange(true, std::memory_order_acquire)) {
      if (n > 0) body(0, n);  // too small to split, or the pool is busy
      return;
    }
    body_ = &body;
    n_ = n;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    const std::uint64_t job = ((job_ticket_.load(std::memory_order_relaxed) >> 32) + 1) << 32 |
                              static_cast<std::uint64_t>(parts) << 16;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      job_ticket_.store(job, std::memory_order_release);  // publishes the job to the workers
    }
    wake_.notify_all();
    help(static_cast<std::uint32_t>(job >> 32), 0);
    wait_until_done(parts);
    body_ = nullptr;
    std::exception_ptr error = error_;
    error_ = nullptr;
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
  }

  // The pool as a ParallelFor (a reference to it: the pool must outlive it).
  ParallelFor parallel_for();

 private:
  static unsigned checked_size(unsigned threads) {
    if (threads > kMaxThreads)
      throw error("ThreadPool of " + std::to_string(threads) + " threads: at most " +
                  std::to_string(kMaxThreads) + " (its ranges are counted in 16 bits)");
    return std::max(threads, 1u);
  }

  // Runs ranges of job `generation`: first range `own` (the caller's is 0, worker k's is k), then
  // any other range no thread has claimed. Each thread thus takes the same part of the tokens on
  // every call while all are awake (the part's rows stay in its core's cache from call to call,
  // like OpenMP's static schedule), and a thread still waking up or descheduled loses its range
  // to the others instead of holding the call up. job_ticket_ holds the generation (bits 32-63)
  // and the range count (16-31); claims_[i] holds the generation that last claimed range i, so a
  // claim names its job: a worker arriving after its job ended finds every range of it claimed and
  // never reads the fields of the next (generations compare modulo 2^32, as serial numbers).
  void help(std::uint32_t generation, std::uint64_t own) noexcept {
    const std::uint64_t t = job_ticket_.load(std::memory_order_acquire);
    if ((t >> 32) != generation) return;
    const std::uint64_t parts = (t >> 16) & 0xffff;
    if (own < parts) run_if_claimed(generation, own, parts);
    for (std::uint64_t i = 0; i < parts; ++i)
      if (i != own) run_if_claimed(generation, i, parts);
  }

  void run_if_claimed(std::uint32_t generation, std::uint64_t range, std::uint64_t parts) noexcept {
    std::atomic<std::uint32_t>& claim = claims_[range];
    std::uint32_t seen = claim.load(std::memory_order_acquire);
    for (;;) {  // claimed by this job or (after it ended) a later one: not ours
      if (static_cast<std::int32_t>(generation - seen) <= 0) return;
      if (claim.compare_exchange_weak(seen, generation, std::memory_order_acq_rel, std::memory_order_acquire))
        break;
    }
    // The job cannot end before this range is done, so its fields stay as published.
    const auto p = static_cast<std::int64_t>(parts);
    const auto i = static_cast<std::int64_t>(range);
    try {
      (*body_)(split_bound(n_, p, i), split_bound(n_, p, i + 1));
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == p) {
      // The last range: wake a caller that stopped spinning. Taking the mutex orders this after
      // the caller's last check of done_, so the notification cannot be lost.
      { const std::lock_guard<std::mutex> lock(mutex_); }
      finished_.notify_one();
    }
  }

  // The caller, with nothing left to claim: spin while the workers finish their ranges (started at
  // about the same time), then sleep if one of them is slow (descheduled, or a long range).
  void wait_until_done(std::int64_t parts) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (done_.load(std::memory_order_acquire) != parts) {
      for (int k = 0; k < 16; ++k) detail::spin_pause();
      if (std::chrono::steady_clock::now() >= until) {
        std::unique_lock<std::mutex> lock(mutex_);
        finished_.wait(lock, [this, parts] { return done_.load(std::memory_order_acquire) == parts; });
        return;
      }
    }
  }

  void work(unsigned own) {
    std::uint64_t seen = 0;  // the last generation this worker helped with
    const auto generation = [this] { return job_ticket_.load(std::memory_order_acquire) >> 32; };
    // A new worker sleeps until the first job instead of spinning: the calibration's copy speed is
    // measured meanwhile, and a spinning vCPU that shares a host core with the caller's would halve it.
    bool started = false;
    for (;;) {
      std::uint64_t g = generation();
      const auto until =
          started ? std::chrono::steady_clock::now() + kSpin : std::chrono::steady_clock::now();
      started = true;
      while (g == seen && !stop_.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 16; ++k) detail::spin_pause();
        g = generation();
        if (g == seen && std::chrono::steady_clock::now() >= until) {
          std::unique_lock<std::mutex> lock(mutex_);
          wake_.wait(lock, [&] { return stop_.load(std::memory_order_relaxed) || generation() != seen; });
          g = generation();
        }
      }
      if (stop_.load(std::memory_order_relaxed)) return;
      seen = g;
      help(static_cast<std::uint32_t>(g), own);
    }
  }

  // The round trip: range 0 (the caller's) waits until another thread has started range 1, so a job
  // takes a worker's reaction to it and the caller's to its end; the lower quartile of 64 after 32 to
  // warm, so that a pool started while other threads load the machine still measures the round trip
  // of workers that are running (a worker descheduled later loses its range to the caller, so a call
  // split too small costs little). A worker that does not come within 1 ms is not waited for.
  HandOffCost calibrate() {
    const double copy_speed = detail::measure_copy_bytes_per_ns();  // first: the workers are asleep
    std::atomic<bool> started{false};
    const std::function<void(std::int64_t, std::int64_t)> ping = [&started](std::int64_t begin, std::int64_t) {
      if (begin != 0) {
        started.store(true, std::memory_order_release);
        return;
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      while (!started.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
        detail::spin_pause();
    };
    std::vector<double> times;
    for (int i = 0; i < 96; ++i) {
      started.store(false, std::memory_order_relaxed);
      const auto t0 = std::chrono::steady_clock::now();
      (*this)(2, ping);
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= 32) times.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    }
    const double round_trip = detail::quantile_of(times, 0.25);
    const double overhead = split_overhead();
    return detail::hand_off_cost(round_trip, copy_speed, overhead);
  }

  // The split overhead (HandOffCost): jobs of two ranges that each copy their own 64 KiB block, on
  // the pool, against range 0 alone on the caller; the lower quartile of each over 64 after 32 to
  // warm (each block then sits in the cache of the thread that owns its range, as a real call's rows
  // do). split - solo, at least 0.
  double split_overhead() {
    constexpr std::size_t kBlock = std::size_t{64} * 1024;
    std::vector<unsigned char> blocks(4 * kBlock, 1);  // per range: a block and its copy
    const std::function<void(std::int64_t, std::int64_t)> copy = [&blocks](std::int64_t begin,
                                                                           std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        unsigned char* from = blocks.data() + static_cast<std::size_t>(2 * i) * kBlock;
        std::memcpy(from + kBlock, from, kBlock);
      }
    };
    std::vector<double> solo, split;
    for (int i = 0; i < 96; ++i) {
      blocks[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
      const auto t0 = std::chrono::steady_clock::now();
      copy(0, 1);
      const auto t1 = std::chrono::steady_clock::now();
      (*this)(2, copy);
      const auto t2 = std::chrono::steady_clock::now();
      if (i < 32) continue;
      solo.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
      split.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count());
    }
    volatile unsigned char sink = blocks[kBlock + 7];  // keeps the copies
    (void)sink;
    return std::max(0.0, detail::quantile_of(split, 0.25) - detail::quantile_of(solo, 0.25));
  }

  void stop_and_join() noexcept {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  unsigned size_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;  // the sleeping paths (wake_, finished_) and error_
  std::condition_variable wake_;
  std::condition_variable finished_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> claims_;  // per range: the generation that claimed it
  std::atomic<std::uint64_t> job_ticket_{0};              // generation | ranges (help())
  std::atomic<std::int64_t> done_{0};                     // ranges of the current job finished
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};  // a job is running (its caller owns the fields below)
  const std::function<void(std::int64_t, std::int64_t)>* body_ = nullptr;
  std::int64_t n_ = 0;
  std::exception_ptr error_;
  HandOffCost cost_;
};

namespace detail {
// What ThreadPool::parallel_for() wraps: a named type, so that min_parallel_bytes finds the pool.
struct PoolCall {
  ThreadPool* pool;
  void operator()(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) const {
    (*pool)(n, body);
  }
};

// thread_parallel_for's ParallelFor: threads started per call.
struct ThreadsPerCall {
  unsigned threads;
  void operator()(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) const {
    const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n));
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(parts - 1));
    for (std::int64_t i = 1; i < parts; ++i)
      pool.emplace_back([&body, n, parts, i] { body(split_bound(n, parts, i), split_bound(n, parts, i + 1)); });
    body(0, split_bound(n, parts, 1));
    for (auto& t : pool) t.join();
  }
};
}  // namespace detail

inline ParallelFor ThreadPool::parallel_for() { return detail::PoolCall{this}; }

// A rotary ThreadPool's hand-off cost measured once per process (a 2-thread pool started and stopped
// on first use): the estimate for a ParallelFor rotary cannot measure (an engine's pool, OpenMP's
// team), whose workers wait the same way (spinning after a job) or slower. An engine whose pool
// reacts more slowly than that should gate small calls itself (pass no ParallelFor).
inline const HandOffCost& measured_hand_off() {
  static const HandOffCost cost = [] {
    if (std::thread::hardware_concurrency() == 1) return kNoHandOff;
    try {
      const ThreadPool pool(2);
      return pool.hand_off();
    } catch (...) {  // no threads to be had: never split
      return kNoHandOff;
    }
  }();
  return cost;
}

// The same for thread_parallel_for: starting and joining a std::thread (median of 9), once per process.
inline const HandOffCost& thread_start_cost() {
  static const HandOffCost cost = [] {
    if (std::thread::hardware_concurrency() == 1) return kNoHandOff;
    std::vector<double> times;
    try {
      for (int i = 0; i < 10; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        std::thread([] {}).join();
        const auto t1 = std::chrono::steady_clock::now();
        if (i > 0) times.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
      }
    } catch (...) {
      return kNoHandOff;
    }
    return detail::hand_off_cost(detail::quantile_of(times, 0.5), detail::measure_copy_bytes_per_ns());
  }();
  return cost;
}

// The least bytes (vectors read + written) each part of a call split over `parallel` must move: the
// pool's own measurement for a rotary ThreadPool (parallel_for() or std::ref(pool)), the thread start
// cost for thread_parallel_for, measured_hand_off() for any other ParallelFor; kNeverSplit without one.
// A call moving less than twice this runs on the caller alone.
inline std::int64_t min_parallel_bytes(const ParallelFor& parallel) {
  const std::int64_t forced = detail::min_parallel_bytes_state().load(std::memory_order_relaxed);
  if (!parallel) return kNeverSplit;
  if (forced >= 0) return forced;
  if (const auto* call = parallel.target<detail::PoolCall>()) return call->pool->hand_off().min_part_bytes;
  if (const auto* ref = parallel.target<std::reference_wrapper<ThreadPool>>()) return ref->get().hand_off().min_part_bytes;
  if (parallel.target<detail::ThreadsPerCall>() != nullptr) return thread_start_cost().min_part_bytes;
  return measured_hand_off().min_part_bytes;
}

// A ParallelFor on std::thread: `threads` workers per call (the caller is one of them). Threads are
// created per call (each start costs more than a short call takes): prefer a ThreadPool, which starts
// them once, or the engine's own pool.
inline ParallelFor thread_parallel_for(unsigned threads) { return detail::ThreadsPerCall{threads}; }

#if defined(_OPENMP)
namespace detail {
inline void omp_split(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
  const auto parts = static_cast<std::int64_t>(omp_get_num_threads());
  const auto i = static_cast<std::int64_t>(omp_get_thread_num());
  const std::int64_t b = split_bound(n, parts, i);
  const std::int64_t e = split_bound(n, parts, i + 1);
  if (b < e) body(b, e);
}
}  // namespace detail

// A ParallelFor on the OpenMP runtime (available when the including TU is built with -fopenmp):
// a team of the runtime's default size (OMP_NUM_THREADS).
inline ParallelFor openmp_parallel_for() {
  return [](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
#pragma omp parallel
    detail::omp_split(n, body);
  };
}

// The same on a team of `threads` threads (at least 1; the runtime may give fewer).
inline ParallelFor openmp_parallel_for(int threads) {
  const int team = std::max(threads, 1);
  return [team](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
#pragma omp parallel num_threads(team)
    detail::omp_split(n, body);
  };
}
#endif

}  // namespace rotary

#endif  // ROTARY_PARALLEL_HPP
