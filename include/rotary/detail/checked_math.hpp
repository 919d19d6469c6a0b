// Integer arithmetic that says when it wraps: what a check computes from a caller's counts and
// strides before it knows they are sane (a product of sizes, a dense stride), without undefined
// behaviour on any int64 input.
#ifndef ROTARY_DETAIL_CHECKED_MATH_HPP
#define ROTARY_DETAIL_CHECKED_MATH_HPP

#include "guard.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>

namespace rotary::detail {

// a * b or a + b into out, true where it wraps (uint64).
inline bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
#if defined(__GNUC__)
  return __builtin_mul_overflow(a, b, &out);
#else
  out = a * b;
  return a != 0 && out / a != b;
#endif
}
inline bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) noexcept {
  out = a + b;
  return out < a;
}

inline constexpr auto kPtrdiffMax = static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max());

// a * b * c into out, true where it fits PTRDIFF_MAX (no wrap on the way): a dense stride or row
// length from a caller's sizes (each >= 0), refused before it becomes a pointer's offset.
inline bool product_fits(std::uint64_t& out, std::uint64_t a, std::uint64_t b, std::uint64_t c = 1) noexcept {
  return !mul_overflows(a, b, out) && !mul_overflows(out, c, out) && out <= kPtrdiffMax;
}

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_CHECKED_MATH_HPP
