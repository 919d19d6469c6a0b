// Shared helpers for rotary's tests: seeded random data, ulp arithmetic, shapes; and, from
// support_core.hpp (shared with the fuzz harnesses), storage types chosen at run time, bit patterns,
// IsaScope and SplitAlways.
#ifndef ROTARY_TESTS_SUPPORT_HPP
#define ROTARY_TESTS_SUPPORT_HPP

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <rotary/rotary.hpp>

#include "support_core.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define ROTARY_TEST_HAVE_MMAN 1
#endif

namespace rotary_test {

// Every random test draws from this seed; ROTARY_TEST_SEED overrides it, and failures print it.
inline std::uint64_t seed() {
  static const std::uint64_t s = [] {
    const char* env = std::getenv("ROTARY_TEST_SEED");
    return env ? std::strtoull(env, nullptr, 10) : std::uint64_t{20261121};
  }();
  return s;
}

inline std::string seed_note() { return "(ROTARY_TEST_SEED=" + std::to_string(seed()) + ")"; }

// Built to run under a user-mode emulator (qemu-aarch64 for the cross build): the few tests whose
// cost is thousands of emulated table rows take a documented subset there.
#if defined(ROTARY_TEST_EMULATED) && ROTARY_TEST_EMULATED
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

// Death tests re-execute the test binary for each statement ("threadsafe": a fresh process). Under a
// user-mode emulator (qemu-aarch64 for the cross build, ROTARY_TEST_EMULATED) the host cannot exec
// a target binary, so they fork only ("fast"); tests that need fresh process state reset it.
inline const char* death_test_style() { return kEmulated ? "fast" : "threadsafe"; }

// Head sizes covering every remainder modulo 4, 8 and 16 lanes (MLAS tests 6/42/70 on purpose).
inline const std::vector<std::int64_t>& head_dims() {
  static const std::vector<std::int64_t> v = {2,  4,  6,  8,  14, 16, 18, 30,  32,  34,
                                              42, 62, 64, 66, 70, 96, 128, 130, 256};
  return v;
}

// rotary_dim = fraction * head_dim rounded down to even, at least 2.
inline std::int64_t rotary_dim_for(std::int64_t head_dim, double fraction) {
  auto d = static_cast<std::int64_t>(fraction * static_cast<double>(head_dim));
  d -= d % 2;
  return d < 2 ? 2 : d;
}

// ulp of a float/double of magnitude |v| (the spacing at v; ulp(0) = smallest normal spacing).
template <class T>
double ulp(double v) {
  v = std::fabs(v);
  const double tiny = std::numeric_limits<T>::min();
  if (v < tiny) v = tiny;
  int e = 0;
  std::frexp(v, &e);  // v = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0, e - std::numeric_limits<T>::digits);
}

template <class T>
std::vector<T> random_vector(std::size_t n, std::mt19937_64& rng, double lo = -2.0, double hi = 2.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

template <class T>
rotary::RowMatrix<T> random_rows(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  rotary::RowMatrix<T> x(rows, cols);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<T>(d(rng));
  return x;
}

// Random positions in [0, max_position], always including the end points 0 and max_position.
inline std::vector<std::int64_t> random_positions(std::size_t n, std::int64_t max_position,
                                                  std::mt19937_64& rng) {
  std::uniform_int_distribution<std::int64_t> d(0, max_position);
  std::vector<std::int64_t> v(n);
  for (auto& p : v) p = d(rng);
  if (n > 0) v[0] = max_position;
  if (n > 1) v[1] = 0;
  return v;
}

// A storage value as double (f16/bf16 through float: exact).
template <class T>
double to_d(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

// The storage rounding rotary documents: Eigen's round-to-nearest-even conversions, except that bf16
// flushes f32-subnormal results to a signed zero (as AVX512-BF16 does; see dtype.hpp / README).
template <class T>
T narrow(rotary::compute_t<T> y) {
  if constexpr (std::is_same_v<T, rotary::bf16>) {
    if (y != 0.0f && std::fabs(y) < std::numeric_limits<float>::min())
      return T(std::signbit(y) ? -0.0f : 0.0f);
  }
  return static_cast<T>(y);
}

// The same bits (signed zeros and NaN payloads included, which == cannot tell apart).
template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(static_cast<const void*>(a.data()), static_cast<const void*>(b.data()),
                                   a.size() * sizeof(T)) == 0);
}

// cos/sin of the cache row for `position`, widened to double.
template <class T>
void cache_row(const rotary::CosSinCache<T>& c, std::int64_t position, std::vector<double>& cos,
               std::vector<double>& sin) {
  const T* r = c.row(position);
  const auto h = static_cast<std::size_t>(c.pairs());
  cos.assign(r, r + h);
  sin.assign(r + h, r + 2 * h);
}

// Runs f, expects rotary::error whose message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "no rotary::error thrown; expected one mentioning " << *fragments.begin();
  } catch (const rotary::error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("rotary: ", 0), 0u) << what;
    for (const char* frag : fragments)
      EXPECT_NE(what.find(frag), std::string::npos) << "missing \"" << frag << "\" in: " << what;
  }
}

#if ROTARY_TEST_HAVE_MMAN
// Which end of a GuardedBuffer touches its guard page exactly (the other end has up to a page of
// readable slack before its guard page, unless the size is a multiple of the page size).
enum class Flush { end, begin };

// n elements between two PROT_NONE pages, flush against the upper one (Flush::end: a read or write
// one element past the end faults) or the lower one (Flush::begin: one element before the start
// faults); MLAS's MatrixGuardBuffer idea. Run a test with both to catch over- and under-runs.
template <class T>
class GuardedBuffer {
 public:
  explicit GuardedBuffer(std::size_t n, Flush flush = Flush::end) : n_(n) {
    page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t bytes = n * sizeof(T);
    body_ = (bytes + page_ - 1) / page_ * page_;
    total_ = body_ + 2 * page_;
    void* p = mmap(nullptr, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<char*>(p);
    if (body_ > 0 && mprotect(base_ + page_, body_, PROT_READ | PROT_WRITE) != 0)
      throw std::runtime_error("mprotect failed");
    // Flush::end: ends at the upper guard page; Flush::begin: starts right after the lower one.
    data_ = reinterpret_cast<T*>(base_ + page_ + (flush == Flush::end ? body_ - bytes : 0));
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  ~GuardedBuffer() { munmap(base_, total_); }
  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return n_; }

 private:
  std::size_t n_ = 0;
  std::size_t page_ = 0;
  std::size_t body_ = 0;
  std::size_t total_ = 0;
  char* base_ = nullptr;
  T* data_ = nullptr;
};
#endif

}  // namespace rotary_test

#endif  // ROTARY_TESTS_SUPPORT_HPP
