// Thread safety: what an engine does from many threads at once must give the single-threaded bits.
//
//   * 12 threads share one cached Rope (and one CosSinCache) and rotate disjoint outputs, in and out of
//     place, every storage type; 12 threads share one cache-free Rope.
//   * The first dispatch (active_isa(): ROTARY_MAX_ISA, CPU detection) races from 16 threads. ctest runs
//     each test in its own process, so there it is the process's first dispatch; run as one binary,
//     the test first resets the resolved ISA (CPU detection then is already done).
//   * One thread cycles set_max_isa() over every supported ISA while 8 others rotate (every ISA gives
//     the same bits, so the results cannot depend on the interleaving).
//   * ParallelFor hooks: thread_parallel_for with 2..16 threads, rotary::ThreadPool and an engine-style
//     persistent pool (mutex + condition variable), over apply, fused GQA q+k, cache-free ropes,
//     apply_batch on every layout, apply_varlen, shift_keys and rerotate_keys; and several callers
//     each splitting their own call over a pool at the same time. These calls are small, so they
//     lower the minimum work per thread (SplitEverything) to split at all.
//   * rotary::ThreadPool itself: every index of [0, n) exactly once at 1..4 threads, 10000 small
//     calls in a row, two callers sharing one pool, a call from inside a body, a body that throws,
//     std::ref(pool) as a ParallelFor; apply / apply_qk through a pool give the 1-thread bits on
//     random shapes from 1 token to a few MiB.
//   * The minimum work per thread: a ThreadPool measures its hand-off cost (HandOffCost) and the
//     gate follows it; at a fixed minimum, a recording ParallelFor is not called for calls too small
//     to split, is called with a few chunks just above the threshold (q and k bytes both count), and
//     with the tokens themselves for large calls; openmp_parallel_for(threads).
// The serial results themselves are checked against reference::rotate_complex (long double) on
// sampled rows, so a test cannot pass by two runs being equally wrong. Sizes stay small: the `tsan`
// preset runs this file under ThreadSanitizer on a 2-core machine.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {

using rotary::Direction;
using rotary::Pairing;
using rotary::Positions;
using rotary::RotarySpec;
using rotary_test::same_bits;

template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

// Runs f(i) on `threads` std::threads released together (a spin barrier), and joins them.
void run_concurrently(int threads, const std::function<void(int)>& f) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      ++ready;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      f(i);
    });
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  for (auto& t : pool) t.join();
}

// Sampled rows of x (tokens x heads x head_dim, dense) rotated to y at positions pos, against the
// complex form in long double with theta from the rope: the kernel rounds x1*s and the fma result
// (<= 1 ulp of |x0|+|x1| together), the cache entries are within 1 ulp of the exact cos/sin
// (<= (|x0|+|x1|) * ulp(1), i.e. <= 2 ulp of |x0|+|x1|). Bound: 3 ulp of |x0|+|x1| in the compute
// type, plus for f16/bf16 one storage ulp of the result (they round it once more; at least the
// smallest subnormal spacing, f16 2^-24, bf16 2^-126 where f32 subnormals flush to zero).
template <class T>
void expect_matches_reference(const rotary::Rope<T>& rope, const std::vector<T>& x, const std::vector<T>& y,
                              const std::vector<std::int64_t>& pos, std::int64_t heads, Direction dir) {
  using C = rotary::compute_t<T>;
  const std::int64_t d = rope.head_dim();
  const std::int64_t tokens = static_cast<std::int64_t>(pos.size());
  double worst = 0.0;
  for (std::int64_t t = 0; t < tokens; t += std::max<std::int64_t>(1, tokens / 7)) {
    for (std::int64_t h = 0; h < heads; h += std::max<std::int64_t>(1, heads - 1)) {
      const std::size_t o = static_cast<std::size_t>((t * heads + h) * d);
      Eigen::VectorXd xin(d);
      for (std::int64_t i = 0; i < d; ++i)
        xin(i) = static_cast<double>(rotary::detail::to_compute(x[o + static_cast<std::size_t>(i)]));
      const Eigen::VectorXd ref = rotary::reference::rotate_complex(xin, rope.cache().theta(), rope.pairing(),
                                                                    pos[static_cast<std::size_t>(t)], dir);
      for (std::int64_t i = 0; i < d; ++i) {
        const double got =
            static_cast<double>(rotary::detail::to_compute(y[o + static_cast<std::size_t>(i)]));
        double scale = std::fabs(xin(i));
        if (i < rope.rotary_dim()) {
          const std::int64_t pairs = rope.rotary_dim() / 2;
          const std::int64_t j = rope.pairing() == Pairing::interleaved ? i / 2 : i % pairs;
          scale = std::fabs(xin(rotary::reference::pair_first(rope.pairing(), j, pairs))) +
                  std::fabs(xin(rotary::reference::pair_second(rope.pairing(), j, pairs)));
        }
        double tol = 3.0 * rotary_test::ulp<C>(scale);
        if constexpr (std::is_same_v<T, rotary::f16>)
          tol += std::max(std::fabs(ref(i)) * 0x1.0p-10, 0x1.0p-24);
        if constexpr (std::is_same_v<T, rotary::bf16>)
          tol += std::max(std::fabs(ref(i)) * 0x1.0p-7, 0x1.0p-126);
        const double err = std::fabs(got - ref(i));
        worst = std::max(worst, err / tol);
        ASSERT_LE(err, tol) << "token " << t << " head " << h << " coordinate " << i << " position "
                            << pos[static_cast<std::size_t>(t)];
      }
    }
  }
  ::testing::Test::RecordProperty("max_error_over_bound", std::to_string(worst));  // <= 1 by the assert
}

// ---- one shared Rope, many threads ----------------------------------------------------------------

template <class T>
class SharedRope : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, double, rotary::f16, rotary::bf16>;
TYPED_TEST_SUITE(SharedRope, StorageTypes, );

// 12 threads, one cached Rope: thread i rotates its own copy of slice i in place (positions and
// direction differ per thread), then slice 0 of the shared const input out of place into its own
// buffer (every thread reads the same input rows at once); each result equals the call made alone.
TYPED_TEST(SharedRope, CachedRopeFromTwelveThreads) {
  using T = TypeParam;
  constexpr int kThreads = 12;
  constexpr std::int64_t kTokens = 24, kHeads = 4, kDim = 64;
  std::mt19937_64 rng(rotary_test::seed());
  const rotary::Rope<T> rope(RotarySpec(kDim, Pairing::half_split, 10000.0, 48), 4096);
  const std::size_t n = static_cast<std::size_t>(kTokens * kHeads * kDim);
  const rotary::StridedLayout l{kTokens, kHeads, kHeads * kDim, kDim};
  const std::vector<T> input = random_values<T>(n * kThreads, rng);
  const auto slice = [&](int i) {
    return std::vector<T>(input.begin() + static_cast<std::ptrdiff_t>(n) * i,
                          input.begin() + static_cast<std::ptrdiff_t>(n) * (i + 1));
  };
  std::vector<std::vector<std::int64_t>> pos(kThreads);
  for (int i = 0; i < kThreads; ++i)
    pos[static_cast<std::size_t>(i)] = rotary_test::random_positions(kTokens, 4095, rng);
  const auto dir_of = [](int i) { return i % 4 < 2 ? Direction::forward : Direction::inverse; };

  std::vector<std::vector<T>> serial(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    std::vector<T>& out = serial[static_cast<std::size_t>(i)];
    out = slice(i);
    rotary::apply_strided(rope, out.data(), l, pos[static_cast<std::size_t>(i)], dir_of(i));
    expect_matches_reference(rope, slice(i), out, pos[static_cast<std::size_t>(i)], kHeads, dir_of(i));
  }

  std::vector<std::vector<T>> own(kThreads), shared(kThreads, std::vector<T>(n));
  for (int i = 0; i < kThreads; ++i) own[static_cast<std::size_t>(i)] = slice(i);
  run_concurrently(kThreads, [&](int i) {
    const auto u = static_cast<std::size_t>(i);
    rotary::apply_strided(rope, own[u].data(), l, pos[u], dir_of(i));
    rotary::apply_strided(rope, input.data(), l, shared[u].data(), l, pos[0], dir_of(0));
  });
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_TRUE(same_bits(own[static_cast<std::size_t>(i)], serial[static_cast<std::size_t>(i)]))
        << "thread " << i;
    EXPECT_TRUE(same_bits(shared[static_cast<std::size_t>(i)], serial[0]))
        << "thread " << i << ", shared input";
  }
}

// One CosSinCache read by 12 threads at once: rows looked up directly and Ropes copied from it.
TEST(SharedCache, RowsAndRopesFromTwelveThreads) {
  constexpr int kThreads = 12;
  const rotary::CosSinCache<float> cache(rotary::default_frequencies(64, 1e4), 100, 1100);
  const RotarySpec spec(64, Pairing::interleaved);
  std::mt19937_64 rng(rotary_test::seed() + 1);
  const std::vector<float> x = random_values<float>(static_cast<std::size_t>(50 * 2 * 64), rng);
  std::vector<float> want = x;
  rotary::Rope<float> alone(spec, cache);
  rotary::apply(alone, Eigen::Map<rotary::RowMatrix<float>>(want.data(), 100, 64),
                Positions::contiguous(1000), 2);
  std::vector<std::int64_t> want_pos(50);
  for (std::int64_t t = 0; t < 50; ++t) want_pos[static_cast<std::size_t>(t)] = 1000 + t;
  expect_matches_reference(alone, x, want, want_pos, 2, Direction::forward);

  std::vector<std::vector<float>> got(kThreads, x);
  std::atomic<int> bad_rows{0};
  run_concurrently(kThreads, [&](int i) {
    for (std::int64_t p = 100 + i; p < 1100; p += 97)  // every thread reads rows of the one table
      if (cache.row(p) != cache.data() + (p - 100) * 64) ++bad_rows;
    const rotary::Rope<float> rope(spec, cache);  // copies the shared table
    rotary::apply(rope,
                  Eigen::Map<rotary::RowMatrix<float>>(got[static_cast<std::size_t>(i)].data(), 100, 64),
                  Positions::contiguous(1000), 2);
  });
  EXPECT_EQ(bad_rows.load(), 0);
  for (int i = 0; i < kThreads; ++i)
    EXPECT_TRUE(same_bits(got[static_cast<std::size_t>(i)], want)) << "thread " << i;
}

// A cache-free Rope shared by 12 threads: each computes its own rows per block (positions past 2^40).
TEST(SharedRope, OnTheFlyRopeFromTwelveThreads) {
  constexpr int kThreads = 12;
  constexpr std::int64_t kTokens = 40, kHeads = 3, kDim = 32;
  const rotary::Rope<float> rope(RotarySpec(kDim, Pairing::interleaved, 5e5), rotary::OnTheFly{});
  std::mt19937_64 rng(rotary_test::seed() + 2);
  const std::size_t n = static_cast<std::size_t>(kTokens * kHeads * kDim);
  const std::vector<float> x = random_values<float>(n, rng);
  std::vector<std::vector<std::int64_t>> pos(kThreads);
  std::vector<std::vector<float>> serial(kThreads, x);
  for (int i = 0; i < kThreads; ++i) {
    auto& p = pos[static_cast<std::size_t>(i)];
    const std::int64_t start = (std::int64_t{1} << 40) + 1000003 * i;
    for (std::int64_t t = 0; t < kTokens; ++t)
      p.push_back(t % 9 == 8 ? start + 5 * t : start + t);  // runs and jumps
    rotary::apply(rope,
                  Eigen::Map<rotary::RowMatrix<float>>(serial[static_cast<std::size_t>(i)].data(),
                                                       kTokens * kHeads, kDim),
                  p, kHeads);
  }
  // rotate_complex forms angles in long double: exact enough below 2^31, so check one thread's
  // rotation at small positions instead (same code path, other positions).
  {
    std::vector<std::int64_t> small(kTokens);
    for (std::int64_t t = 0; t < kTokens; ++t) small[static_cast<std::size_t>(t)] = 70000 + 3 * t;
    std::vector<float> y = x;
    rotary::apply(rope, Eigen::Map<rotary::RowMatrix<float>>(y.data(), kTokens * kHeads, kDim), small,
                  kHeads);
    expect_matches_reference(rope, x, y, small, kHeads, Direction::forward);
  }
  std::vector<std::vector<float>> got(kThreads, x);
  run_concurrently(kThreads, [&](int i) {
    rotary::apply(
        rope,
        Eigen::Map<rotary::RowMatrix<float>>(got[static_cast<std::size_t>(i)].data(), kTokens * kHeads, kDim),
        pos[static_cast<std::size_t>(i)], kHeads);
  });
  for (int i = 0; i < kThreads; ++i)
    EXPECT_TRUE(same_bits(got[static_cast<std::size_t>(i)], serial[static_cast<std::size_t>(i)]))
        << "thread " << i;
}

// ---- dispatch ---------------------------------------------------------------------------------------

// 16 threads make the first dispatch at once; all must resolve the same ISA and rotate identically.
// Nothing in this test dispatches before the race (Rope construction does not).
TEST(Dispatch, FirstCallRacesFromSixteenThreads) {
  constexpr int kThreads = 16;
  const rotary::Rope<float> rope(RotarySpec(64, Pairing::half_split), 256);
  std::mt19937_64 rng(rotary_test::seed() + 3);
  const std::vector<float> x = random_values<float>(8 * 2 * 64, rng);
  for (int round = 0; round < 3; ++round) {
    // Unresolved again (a no-op in a fresh process, whose first dispatch this then is).
    rotary::detail::active_isa_state().store(rotary::detail::kIsaUnresolved);
    std::vector<rotary::Isa> seen(kThreads);
    std::vector<std::vector<float>> got(kThreads, x);
    run_concurrently(kThreads, [&](int i) {
      if (i % 2 == 0) seen[static_cast<std::size_t>(i)] = rotary::active_isa();
      rotary::apply(rope,
                    Eigen::Map<rotary::RowMatrix<float>>(got[static_cast<std::size_t>(i)].data(), 16, 64),
                    Positions::contiguous(100), 2);
      if (i % 2 != 0) seen[static_cast<std::size_t>(i)] = rotary::active_isa();
    });
    const rotary::Isa expected = rotary::detail::isa_from_environment();
    for (int i = 0; i < kThreads; ++i) {
      EXPECT_EQ(seen[static_cast<std::size_t>(i)], expected) << "thread " << i << " round " << round;
      EXPECT_TRUE(same_bits(got[static_cast<std::size_t>(i)], got[0]))
          << "thread " << i << " round " << round;
    }
    std::vector<std::int64_t> p(8);
    for (std::int64_t t = 0; t < 8; ++t) p[static_cast<std::size_t>(t)] = 100 + t;
    expect_matches_reference(rope, x, got[0], p, 2, Direction::forward);
  }
}

// set_max_isa() from one thread while 8 others rotate: every call picks some ISA, all give the same bits.
TEST(Dispatch, SetMaxIsaWhileOthersRotate) {
  const std::vector<rotary::Isa>& isas = rotary_test::supported_isas();
  const rotary::Rope<rotary::bf16> rope(RotarySpec(70, Pairing::interleaved, 1e4, 64), 512);
  std::mt19937_64 rng(rotary_test::seed() + 4);
  const std::vector<rotary::bf16> x = random_values<rotary::bf16>(20 * 3 * 70, rng);
  std::vector<rotary::bf16> want = x;
  const rotary::StridedLayout l{20, 3, 3 * 70, 70};
  const rotary_test::IsaScope scope(rotary::Isa::scalar);  // `want` from scalar; undoes the switcher
  rotary::apply_strided(rope, want.data(), l, Positions::contiguous(300));
  std::vector<std::int64_t> p(20);
  for (std::int64_t t = 0; t < 20; ++t) p[static_cast<std::size_t>(t)] = 300 + t;
  expect_matches_reference(rope, x, want, p, 3, Direction::forward);

  constexpr int kRotators = 8;
  std::vector<int> mismatches(kRotators + 1, 0);
  std::atomic<int> running{kRotators};
  run_concurrently(kRotators + 1, [&](int i) {
    if (i == kRotators) {  // the switcher
      for (std::size_t k = 0; running.load() > 0; ++k) rotary::set_max_isa(isas[k % isas.size()]);
      return;
    }
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<rotary::bf16> y = x;
      rotary::apply_strided(rope, y.data(), l, Positions::contiguous(300));
      if (!same_bits(y, want)) ++mismatches[static_cast<std::size_t>(i)];
    }
    --running;
  });
  for (int i = 0; i < kRotators; ++i) EXPECT_EQ(mismatches[static_cast<std::size_t>(i)], 0) << "thread " << i;
}

// ---- ParallelFor hooks ------------------------------------------------------------------------------

// A persistent pool, as engines have: `workers` threads wait on a condition variable; each call splits
// [0, n) into workers + 1 parts (the caller runs the first) and returns when every part is done.
// One call at a time per pool (callers serialise on call_mutex_).
class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { work(i + 1); });
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  rotary::ParallelFor parallel_for() {
    return [this](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
      std::lock_guard<std::mutex> call(call_mutex_);
      const auto parts = static_cast<std::int64_t>(threads_.size() + 1);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        body_ = &body;
        n_ = n;
        parts_ = parts;
        pending_ = static_cast<int>(threads_.size());
        ++generation_;
      }
      wake_.notify_all();
      run_part(body, n, parts, 0);
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return pending_ == 0; });
      body_ = nullptr;
    };
  }

 private:
  static void run_part(const std::function<void(std::int64_t, std::int64_t)>& body, std::int64_t n,
                       std::int64_t parts, std::int64_t i) {
    const std::int64_t b = rotary::split_bound(n, parts, i);
    const std::int64_t e = rotary::split_bound(n, parts, i + 1);
    if (b < e) body(b, e);
  }

  void work(std::int64_t index) {
    std::uint64_t seen = 0;
    while (true) {
      const std::function<void(std::int64_t, std::int64_t)>* body = nullptr;
      std::int64_t n = 0;
      std::int64_t parts = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        body = body_;
        n = n_;
        parts = parts_;
      }
      run_part(*body, n, parts, index);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --pending_;
      }
      done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex call_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::int64_t, std::int64_t)>* body_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t parts_ = 1;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

// Splits every call with two tokens or more, however little work it is (rotary's default runs small
// calls on the caller alone), so small test shapes still exercise the threads; restores the default.
using SplitEverything = rotary_test::SplitAlways;

// Every ParallelFor under test: thread_parallel_for at several widths, rotary::ThreadPool and two
// engine-style pools; calls split however small.
struct Hooks {
  SplitEverything split;
  Pool pool3{3};
  Pool pool7{7};
  rotary::ThreadPool thread_pool2{2};
  rotary::ThreadPool thread_pool4{4};
  std::vector<std::pair<std::string, rotary::ParallelFor>> all() {
    return {{"thread_parallel_for(2)", rotary::thread_parallel_for(2)},
            {"thread_parallel_for(5)", rotary::thread_parallel_for(5)},
            {"thread_parallel_for(16)", rotary::thread_parallel_for(16)},
            {"pool(4)", pool3.parallel_for()},
            {"pool(8)", pool7.parallel_for()},
            {"ThreadPool(2)", thread_pool2.parallel_for()},
            {"std::ref(ThreadPool(4))", std::ref(thread_pool4)}};
  }
};

TEST(ParallelForHooks, ApplyFusedAndOnTheFly) {
  Hooks hooks;
  std::mt19937_64 rng(rotary_test::seed() + 5);
  constexpr std::int64_t kTokens = 67, kQ = 8, kK = 2, kDim = 64;
  const rotary::Rope<float> cached(RotarySpec(kDim, Pairing::half_split, 5e5), 1 << 12);
  const rotary::Rope<float> fly(RotarySpec(kDim, Pairing::interleaved, 1e4, 32), rotary::OnTheFly{});
  const std::vector<std::int64_t> pos = rotary_test::random_positions(kTokens, 4095, rng);
  const std::vector<float> q0 = random_values<float>(static_cast<std::size_t>(kTokens * kQ * kDim), rng);
  const std::vector<float> k0 = random_values<float>(static_cast<std::size_t>(kTokens * kK * kDim), rng);
  const auto rows = [](std::vector<float>& v, std::int64_t heads) {
    return Eigen::Map<rotary::RowMatrix<float>>(v.data(), kTokens * heads, kDim);
  };
  for (const rotary::Rope<float>* rope : {&cached, &fly}) {
    std::vector<float> q_serial = q0, k_serial = k0;
    rotary::apply_qk(*rope, rows(q_serial, kQ), rows(k_serial, kK), pos, kQ, kK);
    expect_matches_reference(*rope, q0, q_serial, pos, kQ, Direction::forward);
    expect_matches_reference(*rope, k0, k_serial, pos, kK, Direction::forward);
    for (auto& [name, hook] : hooks.all()) {
      std::vector<float> q = q0, k = k0;
      rotary::apply_qk(*rope, rows(q, kQ), rows(k, kK), pos, kQ, kK, {Direction::forward, hook});
      EXPECT_TRUE(same_bits(q, q_serial) && same_bits(k, k_serial))
          << name << (rope == &fly ? " on the fly" : "");
      std::vector<float> one = q0;
      rotary::apply(*rope, rows(one, kQ), pos, kQ, {Direction::forward, hook});
      EXPECT_TRUE(same_bits(one, q_serial)) << name;
    }
  }
}

TEST(ParallelForHooks, BatchLayoutsAndVarlen) {
  Hooks hooks;
  std::mt19937_64 rng(rotary_test::seed() + 6);
  const rotary::Rope<rotary::f16> rope(RotarySpec(48, Pairing::half_split), 2048);
  const rotary::BatchShape sh{3, 37, 4, 48};
  const std::size_t n = static_cast<std::size_t>(3 * 37 * 4 * 48);
  const std::vector<rotary::f16> x = random_values<rotary::f16>(n, rng);
  const rotary::SequencePositions pos = rotary::SequencePositions::starts({5, 900, 0});
  for (const rotary::Layout layout : {rotary::Layout::bshd, rotary::Layout::bhsd, rotary::Layout::sbhd}) {
    std::vector<rotary::f16> serial = x;
    rotary::apply_batch(rope, layout, serial.data(), sh, pos);
    if (layout == rotary::Layout::bshd) {  // bshd: token-major rows; check sequence 1 against the reference
      const std::size_t seq = static_cast<std::size_t>(37 * 4 * 48);
      const std::vector<rotary::f16> xin(x.begin() + seq, x.begin() + 2 * seq);
      const std::vector<rotary::f16> yout(serial.begin() + seq, serial.begin() + 2 * seq);
      std::vector<std::int64_t> p(37);
      for (std::int64_t t = 0; t < 37; ++t) p[static_cast<std::size_t>(t)] = 900 + t;
      expect_matches_reference(rope, xin, yout, p, 4, Direction::forward);
    }
    for (auto& [name, hook] : hooks.all()) {
      std::vector<rotary::f16> y = x;
      rotary::apply_batch(rope, layout, y.data(), sh, pos, {Direction::forward, hook});
      EXPECT_TRUE(same_bits(y, serial)) << name << " " << rotary::to_string(layout);
    }
  }
  // Packed varlen: sequences of 0, 50, 1 and 60 tokens, restarting at 0.
  const std::vector<std::int64_t> cu{0, 0, 50, 51, 111};
  const std::size_t total = static_cast<std::size_t>(111 * 4 * 48);
  const std::vector<rotary::f16> packed = random_values<rotary::f16>(total, rng);
  const rotary::StridedLayout l{111, 4, 4 * 48, 48};
  std::vector<rotary::f16> serial = packed;
  rotary::apply_varlen(rope, serial.data(), l, cu, rotary::SequencePositions::restart());
  for (auto& [name, hook] : hooks.all()) {
    std::vector<rotary::f16> y = packed;
    rotary::apply_varlen(rope, y.data(), l, cu, rotary::SequencePositions::restart(), {Direction::forward, hook});
    EXPECT_TRUE(same_bits(y, serial)) << name << " varlen";
  }
}

TEST(ParallelForHooks, ShiftAndRerotateKeys) {
  Hooks hooks;
  std::mt19937_64 rng(rotary_test::seed() + 7);
  constexpr std::int64_t kTokens = 45, kHeads = 2, kDim = 64;
  const rotary::Rope<float> from(RotarySpec(kDim, Pairing::half_split, 1e4), 64);
  const rotary::Rope<float> to(RotarySpec(kDim, Pairing::half_split, 5e5), 64);
  const std::vector<float> keys =
      random_values<float>(static_cast<std::size_t>(kTokens * kHeads * kDim), rng);
  const std::vector<std::int64_t> pos = rotary_test::random_positions(kTokens, 100000, rng);
  const auto rows = [](std::vector<float>& v) {
    return Eigen::Map<rotary::RowMatrix<float>>(v.data(), kTokens * kHeads, kDim);
  };
  std::vector<float> shifted = keys, rerotated = keys;
  rotary::shift_keys(from, rows(shifted), -37, kHeads);
  rotary::rerotate_keys(from, to, rows(rerotated), pos, kHeads);
  for (auto& [name, hook] : hooks.all()) {
    std::vector<float> s = keys, r = keys;
    rotary::shift_keys(from, rows(s), -37, kHeads, hook);
    rotary::rerotate_keys(from, to, rows(r), pos, kHeads, hook);
    EXPECT_TRUE(same_bits(s, shifted)) << name << " shift_keys";
    EXPECT_TRUE(same_bits(r, rerotated)) << name << " rerotate_keys";
  }
}

// Several callers at once, each splitting its own call over its own pool or thread_parallel_for
// (threads inside threads), two of them over one shared ThreadPool, on one shared Rope.
TEST(ParallelForHooks, ConcurrentCallersEachSplitting) {
  constexpr int kCallers = 6;
  constexpr std::int64_t kTokens = 50, kHeads = 4, kDim = 32;
  const rotary::Rope<double> rope(RotarySpec(kDim, Pairing::interleaved), 1024);
  std::mt19937_64 rng(rotary_test::seed() + 8);
  const std::vector<double> x = random_values<double>(static_cast<std::size_t>(kTokens * kHeads * kDim), rng);
  std::vector<double> serial = x;
  const rotary::StridedLayout l{kTokens, kHeads, kHeads * kDim, kDim};
  rotary::apply_strided(rope, serial.data(), l, Positions::contiguous(77));
  std::vector<std::int64_t> p(kTokens);
  for (std::int64_t t = 0; t < kTokens; ++t) p[static_cast<std::size_t>(t)] = 77 + t;
  expect_matches_reference(rope, x, serial, p, kHeads, Direction::forward);

  const SplitEverything split;
  std::vector<std::unique_ptr<Pool>> pools;
  pools.reserve(kCallers);
  for (int i = 0; i < kCallers; ++i) pools.push_back(std::make_unique<Pool>(1 + i % 3));
  rotary::ThreadPool shared(3);  // callers 1 and 5 share it
  std::vector<std::vector<double>> got(kCallers, x);
  run_concurrently(kCallers, [&](int i) {
    const rotary::ParallelFor hook = i % 4 == 1   ? shared.parallel_for()
                                     : i % 2 == 0 ? pools[static_cast<std::size_t>(i)]->parallel_for()
                                                  : rotary::thread_parallel_for(3);
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<double> y = x;
      rotary::apply_strided(rope, y.data(), l, Positions::contiguous(77), {Direction::forward, hook});
      if (rep == 0) got[static_cast<std::size_t>(i)] = y;
    }
  });
  for (int i = 0; i < kCallers; ++i)
    EXPECT_TRUE(same_bits(got[static_cast<std::size_t>(i)], serial)) << "caller " << i;
}

// ---- rotary::ThreadPool -----------------------------------------------------------------------------

// Runs pool(n, ...) and checks that the ranges are non-empty, disjoint, cover [0, n) exactly once and
// number at most pool.size().
void expect_covers_once(rotary::ThreadPool& pool, std::int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  std::atomic<int> ranges{0};
  std::atomic<int> empty{0};
  pool(n, [&](std::int64_t begin, std::int64_t end) {
    ++ranges;
    if (begin >= end || begin < 0 || end > n) ++empty;
    for (std::int64_t i = std::max<std::int64_t>(begin, 0); i < std::min(end, n); ++i)
      ++hits[static_cast<std::size_t>(i)];
  });
  EXPECT_EQ(empty.load(), 0) << "n " << n << ", " << pool.size() << " threads";
  EXPECT_LE(ranges.load(), static_cast<int>(std::min<std::int64_t>(pool.size(), std::max<std::int64_t>(n, 1))))
      << "n " << n << ", " << pool.size() << " threads";
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1) << "index " << i << " of " << n << ", " << pool.size()
                                                           << " threads";
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (unsigned threads = 1; threads <= 4; ++threads) {
    rotary::ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (const std::int64_t n : {0, 1, 2, 3, 17, 1000, 3, 0, 1}) expect_covers_once(pool, n);
  }
  rotary::ThreadPool none(0);  // 0 is taken as 1: the caller alone
  EXPECT_EQ(none.size(), 1u);
  expect_covers_once(none, 17);
}

// A count past kMaxThreads (ThreadPool(-1) among them) is refused before any thread starts, not
// clamped to 65535 threads.
TEST(ThreadPool, RefusesMoreThreadsThanItCanCount) {
  for (const unsigned threads : {rotary::ThreadPool::kMaxThreads + 1, static_cast<unsigned>(-1)}) {
    try {
      rotary::ThreadPool pool(threads);
      ADD_FAILURE() << "ThreadPool(" << threads << ") started " << pool.size() << " threads";
    } catch (const rotary::error& e) {
      EXPECT_NE(std::string(e.what()).find("at most 65535"), std::string::npos) << e.what();
    }
  }
}

// n > 1 on a pool of several threads runs ranges on other threads (not only on the caller).
TEST(ThreadPool, RunsRangesOnItsWorkers) {
  rotary::ThreadPool pool(3);
  bool other = false;
  for (int attempt = 0; attempt < 200 && !other; ++attempt) {
    std::mutex m;
    std::vector<std::thread::id> ids;
    pool(3, [&](std::int64_t, std::int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // long enough for a worker to claim one
      const std::lock_guard<std::mutex> lock(m);
      ids.push_back(std::this_thread::get_id());
    });
    for (const std::thread::id id : ids) other = other || id != std::this_thread::get_id();
  }
  EXPECT_TRUE(other) << "every range ran on the caller in 200 calls";
}

// Each thread takes its own range first (the caller range 0, worker k range k), on every call, so
// back-to-back calls over the same buffers find each part in the cache of the core that rotated it
// last time (on a 2-vCPU Xeon, 16 tokens x 32 x 128 ran 15-20% faster on 2 threads than when the
// first thread to arrive took range 0). Each range here waits until all three have started, so
// all three run at once, on three threads, whatever the timing; which thread runs which is then the
// pool's choice alone.
TEST(ThreadPool, EachThreadTakesItsOwnRange) {
  rotary::ThreadPool pool(3);
  std::vector<std::thread::id> first(3);
  for (int call = 0; call < 50; ++call) {
    std::atomic<int> started{0};
    std::vector<std::thread::id> ids(3);
    bool together = true;
    std::mutex m;
    pool(3, [&](std::int64_t begin, std::int64_t end) {
      ASSERT_EQ(end, begin + 1);
      ids[static_cast<std::size_t>(begin)] = std::this_thread::get_id();
      started.fetch_add(1);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < 3 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      const std::lock_guard<std::mutex> lock(m);
      together = together && started.load() == 3;
    });
    ASSERT_TRUE(together) << "call " << call << ": three ranges did not run at once within 10 s";
    ASSERT_EQ(ids[0], std::this_thread::get_id()) << "call " << call << ": range 0 ran on a worker";
    ASSERT_NE(ids[1], ids[0]);
    ASSERT_NE(ids[2], ids[0]);
    ASSERT_NE(ids[1], ids[2]);
    if (call == 0) first = ids;
    EXPECT_EQ(ids, first) << "call " << call << ": a worker ran another worker's range";
  }
}
// 10000 small calls back to back (workers spinning and claiming, or asleep and racing to wake):
// no deadlock, every index every time.
TEST(ThreadPool, TenThousandSmallCalls) {
  for (const unsigned threads : {2u, 3u}) {
    rotary::ThreadPool pool(threads);
    std::atomic<std::int64_t> sum{0};
    std::int64_t want = 0;
    for (int call = 0; call < 10000; ++call) {
      const std::int64_t n = 1 + call % 7;
      want += n * (n - 1) / 2;
      pool(n, [&sum](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) sum += i;
      });
      if (call % 2500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // let workers sleep
    }
    EXPECT_EQ(sum.load(), want) << threads << " threads";
  }
}

// Two std::threads call one pool at once, 2000 times each: one of them gets the pool, the other runs
// its call on itself; both get every index once every time.
TEST(ThreadPool, TwoCallersShareOnePool) {
  rotary::ThreadPool pool(3);
  std::vector<int> bad(2, 0);
  run_concurrently(2, [&](int c) {
    std::vector<int> hits(64);
    for (int call = 0; call < 2000; ++call) {
      std::fill(hits.begin(), hits.end(), 0);
      pool(64, [&hits](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];  // disjoint ranges
      });
      if (std::count(hits.begin(), hits.end(), 1) != 64) ++bad[static_cast<std::size_t>(c)];
    }
  });
  EXPECT_EQ(bad[0], 0);
  EXPECT_EQ(bad[1], 0);
}

// A body that calls the same pool (the pool is busy with the outer call): the inner call runs on the
// thread that makes it, instead of deadlocking.
TEST(ThreadPool, CallFromInsideABody) {
  rotary::ThreadPool pool(2);
  std::atomic<std::int64_t> inner{0};
  pool(4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      pool(10, [&inner](std::int64_t b, std::int64_t e) { inner += e - b; });
  });
  EXPECT_EQ(inner.load(), 40);
}

// A throw in any range, worker or caller: the call waits for the other ranges, then rethrows on the
// caller; the pool still works afterwards.
TEST(ThreadPool, RethrowsABodysException) {
  rotary::ThreadPool pool(4);
  for (std::int64_t thrower = 0; thrower < 4; ++thrower) {
    std::atomic<int> finished{0};
    try {
      pool(4, [&](std::int64_t begin, std::int64_t) {
        if (begin == thrower) throw std::runtime_error("range " + std::to_string(begin));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++finished;
      });
      ADD_FAILURE() << "no exception from range " << thrower;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "range " + std::to_string(thrower));
    }
    EXPECT_EQ(finished.load(), 3) << "returned before the other ranges finished";
    expect_covers_once(pool, 1000);
  }
}

// ---- rotary::apply through a ThreadPool ---------------------------------------------------------------

// apply and apply_qk through a ThreadPool give the 1-thread bits, on random shapes from one token to a
// few MiB (large enough to pass the minimum work per thread), and the pool is used where the call is
// large enough to split.
template <class T>
void check_apply_through_pool(std::mt19937_64& rng) {
  const rotary::Rope<T> rope(RotarySpec(128, Pairing::half_split, 5e5, 96), 4096);
  const rotary::Rope<T> fly(RotarySpec(64, Pairing::interleaved), rotary::OnTheFly{});
  rotary::ThreadPool pool2(2);
  rotary::ThreadPool pool3(3);
  std::uniform_int_distribution<std::int64_t> heads_d(1, 12);
  const std::int64_t token_counts[] = {1, 1, 2, 7, 33, 300, 1500};
  for (const std::int64_t tokens : token_counts) {
    for (const rotary::Rope<T>* r : {&rope, &fly}) {
      const std::int64_t d = r->head_dim();
      const std::int64_t qh = tokens >= 300 ? 16 : heads_d(rng);
      const std::int64_t kh = 1 + qh / 4;
      const std::vector<std::int64_t> pos = rotary_test::random_positions(static_cast<std::size_t>(tokens), 4095, rng);
      const std::vector<T> q0 = random_values<T>(static_cast<std::size_t>(tokens * qh * d), rng);
      const std::vector<T> k0 = random_values<T>(static_cast<std::size_t>(tokens * kh * d), rng);
      const auto rows = [tokens, d](std::vector<T>& v, std::int64_t heads) {
        return Eigen::Map<rotary::RowMatrix<T>>(v.data(), tokens * heads, d);
      };
      std::vector<T> q1 = q0, k1 = k0, only1 = q0;
      rotary::apply_qk(*r, rows(q1, qh), rows(k1, kh), pos, qh, kh);
      rotary::apply(*r, rows(only1, qh), pos, qh);
      expect_matches_reference(*r, q0, only1, pos, qh, Direction::forward);
      for (rotary::ThreadPool* pool : {&pool2, &pool3}) {
        int calls = 0;
        const rotary::ParallelFor counted = [&calls, pool](std::int64_t n,
                                                           const std::function<void(std::int64_t, std::int64_t)>& body) {
          ++calls;
          (*pool)(n, body);
        };
        // a wrapper is a ParallelFor rotary cannot measure: the process-wide estimate gates it, in
        // whole tokens (the gate's arithmetic: at least two parts of ceil(minimum / token bytes) tokens;
        // q alone for apply, and apply_qk's tokens carry more)
        const std::int64_t min_bytes = rotary::min_parallel_bytes(counted);
        const std::int64_t per_token = qh * d * 2 * static_cast<std::int64_t>(sizeof(T));
        const std::int64_t min_tokens = std::max<std::int64_t>(min_bytes / per_token + (min_bytes % per_token != 0), 1);
        const bool large = tokens / min_tokens >= 2;
        std::vector<T> q = q0, k = k0, only = q0;
        rotary::apply_qk(*r, rows(q, qh), rows(k, kh), pos, qh, kh, {Direction::forward, counted});
        rotary::apply(*r, rows(only, qh), pos, qh, {Direction::forward, counted});
        const std::string what = std::to_string(tokens) + " tokens x (" + std::to_string(qh) + " + " +
                                 std::to_string(kh) + ") heads x " + std::to_string(d) + ", " +
                                 std::to_string(pool->size()) + " threads" + (r == &fly ? ", on the fly" : "");
        EXPECT_TRUE(same_bits(q, q1) && same_bits(k, k1)) << what << " apply_qk";
        EXPECT_TRUE(same_bits(only, only1)) << what << " apply";
        if (large) {
          EXPECT_EQ(calls, 2) << what << ": the pool was not used";
        }
        if (tokens == 1) {
          EXPECT_EQ(calls, 0) << what << ": one token split";
        }
      }
    }
  }
}

TEST(ThreadPool, ApplyGivesTheOneThreadBits) {
  std::mt19937_64 rng(rotary_test::seed() + 9);
  check_apply_through_pool<float>(rng);
  check_apply_through_pool<rotary::bf16>(rng);
}

// ---- the minimum work per thread --------------------------------------------------------------------

// A serial ParallelFor that records each n it is given and runs the body over [0, n) in three ranges
// (last first), so a test sees whether and how the driver split the call.
struct Recorder {
  std::vector<std::int64_t> calls;
  rotary::ParallelFor get() {
    return [this](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
      calls.push_back(n);
      for (std::int64_t i = 2; i >= 0; --i) {
        const std::int64_t b = rotary::split_bound(n, 3, i), e = rotary::split_bound(n, 3, i + 1);
        if (b < e) body(b, e);
      }
    };
  }
};

// f32 rows of 1 head x 64 move 512 bytes per token (read + written). The gate's arithmetic is checked
// at a fixed minimum of 128 KiB per part (MinPartBytes), whatever this machine's hand-off costs.
constexpr std::int64_t kRowBytes = 64 * 2 * 4;
constexpr std::int64_t kFixedMinimum = std::int64_t{128} * 1024;
constexpr std::int64_t kTokensPerPart = kFixedMinimum / kRowBytes;
static_assert(kFixedMinimum % kRowBytes == 0, "the shapes below assume whole tokens per part");


// apply over `tokens` x 1 head x 64 f32 through a Recorder; checks the bits against the plain call.
std::vector<std::int64_t> recorded_calls(std::int64_t tokens) {
  const rotary::Rope<float> rope(RotarySpec(64, Pairing::half_split), 1 << 14);
  std::mt19937_64 rng(rotary_test::seed() + 10);
  const std::vector<float> x = random_values<float>(static_cast<std::size_t>(tokens * 64), rng);
  std::vector<float> serial = x, got = x;
  rotary::apply(rope, Eigen::Map<rotary::RowMatrix<float>>(serial.data(), tokens, 64), Positions::contiguous(5), 1);
  Recorder rec;
  rotary::apply(rope, Eigen::Map<rotary::RowMatrix<float>>(got.data(), tokens, 64), Positions::contiguous(5), 1, {Direction::forward, rec.get()});
  EXPECT_TRUE(same_bits(got, serial)) << tokens << " tokens";
  return rec.calls;
}

TEST(MinimumWork, SmallCallsRunOnTheCaller) {
  const rotary_test::MinPartBytes fixed(kFixedMinimum);
  EXPECT_TRUE(recorded_calls(1).empty()) << "1 token x 1 head x 64";
  EXPECT_TRUE(recorded_calls(16).empty()) << "16 tokens x 1 head x 64 (8 KiB)";
  EXPECT_TRUE(recorded_calls(2 * kTokensPerPart - 1).empty()) << "just under two parts' worth";
}

TEST(MinimumWork, LargerCallsSplitIntoChunksOfAtLeastTheMinimum) {
  const rotary_test::MinPartBytes fixed(kFixedMinimum);
  EXPECT_EQ(recorded_calls(2 * kTokensPerPart), std::vector<std::int64_t>{2});
  EXPECT_EQ(recorded_calls(3 * kTokensPerPart + 5), std::vector<std::int64_t>{3});
  // Plenty of parts' worth: the ParallelFor gets the tokens themselves.
  EXPECT_EQ(recorded_calls(40 * kTokensPerPart), std::vector<std::int64_t>{40 * kTokensPerPart});
}

// A ParallelFor that calls the body outside [0, n) (a broken pool) is refused by name before any
// row is touched (it rotated memory past the tensors: ASan SEGV), on both paths: the tokens
// themselves, and a few chunks of them. Nothing of the tensor is written.
TEST(MinimumWork, BodyRangesOutsideTheCallAreRefused) {
  const rotary_test::MinPartBytes fixed(kFixedMinimum);
  const rotary::Rope<float> rope(RotarySpec(64, Pairing::half_split), 1 << 14);
  for (const std::int64_t tokens : {40 * kTokensPerPart, 3 * kTokensPerPart}) {
    for (const int broken : {0, 1, 2}) {  // past the end, before the start, reversed
      const rotary::ParallelFor bad = [broken](std::int64_t n,
                                               const std::function<void(std::int64_t, std::int64_t)>& body) {
        if (broken == 0) body(0, n + 64);
        if (broken == 1) body(-1, n);
        if (broken == 2) body(n, 0);
      };
      std::vector<float> x(static_cast<std::size_t>(tokens * 64), 0.5f);
      const std::vector<float> before = x;
      rotary_test::expect_error(
          [&] {
            rotary::apply(rope, Eigen::Map<rotary::RowMatrix<float>>(x.data(), tokens, 64),
                          Positions::contiguous(5), 1, {Direction::forward, bad});
          },
          {"the ParallelFor called the body over", "outside [0, "});
      EXPECT_TRUE(same_bits(x, before)) << tokens << " tokens, broken " << broken;
    }
  }
}

// Fused q+k: the key heads' bytes count too (1 + 1 heads: half the tokens per part), and so do the
// batch entry points (BHSD batches run one region over all sequences).
TEST(MinimumWork, KeysAndBatchesCount) {
  const rotary_test::MinPartBytes fixed(kFixedMinimum);
  const rotary::Rope<float> rope(RotarySpec(64, Pairing::half_split), 1 << 14);
  for (const std::int64_t tokens : {kTokensPerPart - 1, kTokensPerPart}) {
    std::vector<float> q(static_cast<std::size_t>(tokens * 64), 0.5f), k = q;
    Recorder rec;
    rotary::apply_qk(rope, Eigen::Map<rotary::RowMatrix<float>>(q.data(), tokens, 64),
                     Eigen::Map<rotary::RowMatrix<float>>(k.data(), tokens, 64), Positions::contiguous(0), 1, 1, {Direction::forward, rec.get()});
    EXPECT_EQ(rec.calls, tokens < kTokensPerPart ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{2})
        << tokens << " tokens, q and k";
  }
  for (const std::int64_t seq : {std::int64_t{8}, kTokensPerPart}) {  // seq tokens in all: none, then 2 parts
    const rotary::BatchShape sh{4, seq / 4, 2, 64};
    std::vector<float> x(static_cast<std::size_t>(seq * 2 * 64), 0.25f), serial = x;
    rotary::apply_batch(rope, rotary::Layout::bhsd, serial.data(), sh, rotary::SequencePositions::starts({0, 9, 3, 1}));
    Recorder rec;
    rotary::apply_batch(rope, rotary::Layout::bhsd, x.data(), sh, rotary::SequencePositions::starts({0, 9, 3, 1}), {Direction::forward, rec.get()});
    EXPECT_EQ(rec.calls, seq == 8 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{2}) << seq << " bhsd";
    EXPECT_TRUE(same_bits(x, serial)) << seq << " bhsd";
  }
}

// The measured minimum: each ThreadPool's own ping-pong and split copy job, the rule 3 x the larger of
// round trip and split overhead x copy speed per part,
// and which measurement gates which ParallelFor.
TEST(MinimumWork, ThreadPoolMeasuresItsHandOff) {
  const rotary::ThreadPool one(1);
  EXPECT_EQ(one.hand_off().min_part_bytes, rotary::kNeverSplit) << "a 1-thread pool must never split";
  rotary::ThreadPool pool(2);
  const rotary::HandOffCost& c = pool.hand_off();
  if (std::thread::hardware_concurrency() == 1) {
    EXPECT_EQ(c.min_part_bytes, rotary::kNeverSplit) << "one CPU: two threads cannot run at once";
    return;
  }
  EXPECT_GT(c.round_trip_ns, 0.0);
  EXPECT_LT(c.round_trip_ns, 2e6) << "a ping-pong job waits at most 1 ms for a worker";
  EXPECT_GT(c.copy_bytes_per_ns, 0.0);
  EXPECT_GE(c.split_overhead_ns, 0.0);
  const double rule =
      rotary::detail::kPartOverheads * std::max(c.round_trip_ns, c.split_overhead_ns) * c.copy_bytes_per_ns;
  EXPECT_EQ(c.min_part_bytes, std::max(static_cast<std::int64_t>(rule), rotary::kMinPartFloor));
  std::printf(
      "[ measured ] 2-thread pool: round trip %.0f ns, split overhead %.0f ns, copy %.1f B/ns -> at least "
      "%lld KiB a part\n",
      c.round_trip_ns, c.split_overhead_ns, c.copy_bytes_per_ns,
      static_cast<long long>(c.min_part_bytes / 1024));
  EXPECT_EQ(rotary::min_parallel_bytes(pool.parallel_for()), c.min_part_bytes);
  EXPECT_EQ(rotary::min_parallel_bytes(std::ref(pool)), c.min_part_bytes);
  EXPECT_EQ(rotary::min_parallel_bytes(rotary::thread_parallel_for(2)), rotary::thread_start_cost().min_part_bytes);
  const rotary::ParallelFor foreign = [](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
    body(0, n);
  };
  EXPECT_EQ(rotary::min_parallel_bytes(foreign), rotary::measured_hand_off().min_part_bytes);
  EXPECT_EQ(rotary::min_parallel_bytes(rotary::ParallelFor()), rotary::kNeverSplit);
}

// The gate at the pool's own measurement: a call just under two parts' worth stays on the caller,
// one of two parts' worth is split over the pool (ThreadPool::jobs() counts the calls it split).
TEST(MinimumWork, TheGateFollowsThePoolsMeasurement) {
  rotary::ThreadPool pool(2);
  const std::int64_t min_part = pool.hand_off().min_part_bytes;
  if (min_part >= std::int64_t{1} << 26) GTEST_SKIP() << "this machine's pool splits no call this test makes (64 MiB)";
  const std::int64_t per_part = (min_part + kRowBytes - 1) / kRowBytes;  // tokens of 1 head x 64 f32
  const rotary::Rope<float> rope(RotarySpec(64, Pairing::half_split), 1 << 12);
  for (const std::int64_t tokens : {std::int64_t{1}, 2 * per_part - 1, 2 * per_part, 5 * per_part}) {
    std::vector<float> x(static_cast<std::size_t>(tokens * 64), 0.5f), serial = x;
    std::vector<std::int64_t> positions(static_cast<std::size_t>(tokens));
    for (std::size_t t = 0; t < positions.size(); ++t) positions[t] = static_cast<std::int64_t>((t * 7 + 3) % 4096);
    const Positions pos(positions.data(), tokens);
    rotary::apply(rope, Eigen::Map<rotary::RowMatrix<float>>(serial.data(), tokens, 64), pos, 1);
    const std::uint64_t before = pool.jobs();
    rotary::apply(rope, Eigen::Map<rotary::RowMatrix<float>>(x.data(), tokens, 64), pos, 1,
                  {Direction::forward, pool.parallel_for()});
    EXPECT_EQ(pool.jobs() - before, tokens >= 2 * per_part ? 1u : 0u)
        << tokens << " tokens x 512 bytes against " << min_part << " bytes a part";
    EXPECT_TRUE(same_bits(x, serial)) << tokens << " tokens";
  }
}

#if defined(_OPENMP)
TEST(OpenMp, ThreadCountOverload) {
  for (const int threads : {1, 2, 3}) {
    const rotary::ParallelFor omp = rotary::openmp_parallel_for(threads);
    std::vector<std::atomic<int>> hits(100);
    std::atomic<int> ranges{0};
    omp(100, [&](std::int64_t b, std::int64_t e) {
      ++ranges;
      for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
    });
    EXPECT_LE(ranges.load(), threads);
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads";
  }
}
#endif

}  // namespace
