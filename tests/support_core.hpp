// The part of the tests' helpers that needs no GoogleTest, shared by support.hpp (the GoogleTest
// tests) and fuzz/fuzz_support.hpp (the libFuzzer harnesses): storage types chosen at run time,
// bit patterns, the ISAs with a scope that forces one and restores the dispatch state, and a scope
// that lets small calls split over a ParallelFor (SplitAlways).
#ifndef ROTARY_TESTS_SUPPORT_CORE_HPP
#define ROTARY_TESTS_SUPPORT_CORE_HPP

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <rotary/rotary.hpp>

namespace rotary_test {

// ---- storage types chosen at run time -----------------------------------------------------------

// A storage type as a value: a test parameter, or a fuzz input's first choice (in this order).
enum class DType { f32, f64, f16, bf16 };

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the storage type T that d names (f is a generic lambda; it reads T as
// typename decltype(tag)::type) and returns its result.
template <class F>
auto with_dtype(DType d, F&& f) {
  switch (d) {
    case DType::f32:
      return f(TypeTag<float>{});
    case DType::f64:
      return f(TypeTag<double>{});
    case DType::f16:
      return f(TypeTag<rotary::f16>{});
    default:
      return f(TypeTag<rotary::bf16>{});
  }
}

// "f32", "f64", "f16" or "bf16" (rotary::dtype_name of the type).
inline std::string dtype_name(DType d) {
  return with_dtype(d, [](auto tag) {
    using T = typename decltype(tag)::type;
    return std::string(rotary::dtype_name<T>());
  });
}

// ---- bit patterns -------------------------------------------------------------------------------

// Each storage type's bits, and a sentinel to fill memory a call must not write.
template <class T>
struct Bits;
template <>
struct Bits<float> {
  using U = std::uint32_t;
  static constexpr U sentinel = 0x7FA5A5A5u;  // a signalling NaN: no arithmetic or copy produces it
};
template <>
struct Bits<double> {
  using U = std::uint64_t;
  static constexpr U sentinel = 0x7FF4A5A5A5A5A5A5ull;
};
template <>
struct Bits<rotary::f16> {
  using U = std::uint16_t;
  static constexpr U sentinel = 0x7D5Au;  // signalling: stores only ever write quiet NaNs
};
template <>
struct Bits<rotary::bf16> {
  using U = std::uint16_t;
  static constexpr U sentinel = 0x7FA5u;
};

template <class T>
T from_bits(typename Bits<T>::U u) {
  T x;
  std::memcpy(static_cast<void*>(&x), &u, sizeof x);
  return x;
}
template <class T>
typename Bits<T>::U to_bits(T x) {
  typename Bits<T>::U u;
  std::memcpy(&u, static_cast<const void*>(&x), sizeof u);
  return u;
}

template <class T>
bool is_nan(T x) {
  return rotary::detail::is_nan(static_cast<double>(rotary::detail::to_compute(x)));
}

// ---- ISAs ---------------------------------------------------------------------------------------

// The ISAs this machine and build can run, scalar first.
inline const std::vector<rotary::Isa>& supported_isas() {
  static const std::vector<rotary::Isa> v = [] {
    std::vector<rotary::Isa> r;
    for (const rotary::Isa isa : rotary::all_isas())
      if (rotary::isa_supported(isa)) r.push_back(isa);
    return r;
  }();
  return v;
}

// Saves the dispatch state (the active ISA, or "not resolved yet") and restores it when the scope
// ends; IsaScope(isa) also forces `isa` (set_max_isa: it must be supported) meanwhile. The raw state
// is saved rather than active_isa(), so that "not resolved yet" comes back as such (the next
// dispatch reads ROTARY_MAX_ISA again), and stored back rather than passed to set_max_isa, which may
// throw, from the destructor.
class IsaScope {
 public:
  IsaScope() noexcept : saved_(rotary::detail::active_isa_state().load()) {}
  explicit IsaScope(rotary::Isa isa) : IsaScope() { rotary::set_max_isa(isa); }
  ~IsaScope() { rotary::detail::active_isa_state().store(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  int saved_;
};

// ---- threads ------------------------------------------------------------------------------------

// Sets the driver's minimum work per thread (detail::min_parallel_bytes_state(); by default the
// ParallelFor's measured hand-off, parallel.hpp) to `bytes` while the scope lives and restores the
// saved value when it ends (scopes nest): a fixed minimum for tests of the gate's arithmetic.
class MinPartBytes {
 public:
  explicit MinPartBytes(std::int64_t bytes) noexcept
      : saved_(rotary::detail::min_parallel_bytes_state().exchange(bytes)) {}
  ~MinPartBytes() { rotary::detail::min_parallel_bytes_state().store(saved_); }
  MinPartBytes(const MinPartBytes&) = delete;
  MinPartBytes& operator=(const MinPartBytes&) = delete;

 private:
  std::int64_t saved_;
};

// The minimum at 0: a call given a ParallelFor splits from two tokens on however little work it
// is. Tests that pass a ParallelFor on small shapes hold one where they want the split exercised;
// without it such calls run on the caller alone and never reach the ParallelFor. Not for tests of
// the gate itself (test_threads' MinimumWork), which need the real default.
class SplitAlways : public MinPartBytes {
 public:
  SplitAlways() noexcept : MinPartBytes(0) {}
};

}  // namespace rotary_test

#endif  // ROTARY_TESTS_SUPPORT_CORE_HPP
