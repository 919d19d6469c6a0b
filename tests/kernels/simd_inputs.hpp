// Random inputs shared by test_simd and test_dispatch: every ISA of the registry, the base seed,
// and random values of each storage type (f16/bf16 with signed zeros, subnormals, values near
// overflow, infinities and NaNs).
#ifndef ROTARY_TESTS_KERNELS_SIMD_INPUTS_HPP
#define ROTARY_TESTS_KERNELS_SIMD_INPUTS_HPP

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>

#include <rotary/rotary.hpp>

#include "support.hpp"

namespace simd_inputs {

using rotary_test::Bits;
using rotary_test::from_bits;

// Every ISA of the registry (dispatch.hpp's kIsaTable), supported here or not.
const auto kAllIsas = rotary::all_isas();

inline std::uint64_t base_seed() { return rotary_test::seed(); }

// f16/bf16: mostly O(1) values and values across the exponent range, with signed zeros, subnormals
// of the storage type, values near overflow (f16 +-[57344, 65504]: a rotation may round to inf; bf16
// beyond 1.7e38: the f32 arithmetic may overflow), infinities (1/128) and NaNs (1/128, quiet and
// signalling, random payloads).
template <class T>
T random_storage(std::mt19937_64& rng) {
  constexpr bool half = std::is_same_v<T, rotary::f16>;
  constexpr std::uint16_t inf = half ? 0x7C00u : 0x7F80u;
  constexpr std::uint16_t mantissa = half ? 0x03FFu : 0x007Fu;
  const auto bits = [](unsigned b) { return from_bits<T>(static_cast<std::uint16_t>(b)); };
  const auto u = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-50 - 4.0; };
  const unsigned sign = (rng() & 1u) != 0 ? 0x8000u : 0u;
  const unsigned kind = static_cast<unsigned>(rng() % 128);
  if (kind == 0) return bits(0);
  if (kind == 1) return bits(0x8000u);
  if (kind < 5) return bits(sign | static_cast<unsigned>(1 + rng() % mantissa));  // subnormal
  if (kind < 9) {
    if (half) return bits(sign | static_cast<unsigned>(0x7B00u + rng() % 0x100u));  // 57344 .. 65504
    return bits(sign | static_cast<unsigned>(0x7F00u + rng() % 0x80u));             // 1.7e38 .. 3.4e38
  }
  if (kind == 9) return bits(sign | inf);
  if (kind == 10) return bits(sign | inf | static_cast<unsigned>(1 + rng() % mantissa));  // NaN
  if (kind < 24) {
    const int e = half ? static_cast<int>(rng() % 40) - 27 : static_cast<int>(rng() % 120) - 60;
    return rotary::detail::from_compute<T>(static_cast<float>(std::ldexp(u(), e)));
  }
  return rotary::detail::from_compute<T>(static_cast<float>(u()));
}

// Mostly O(1) values, with some across the exponent range, signed zeros and subnormals (f32/f64: no
// NaN or infinity, which the arithmetic never produces from these; f16/bf16: random_storage).
template <class T>
T random_value(std::mt19937_64& rng) {
  if constexpr (sizeof(T) == 2) return random_storage<T>(rng);
  // Uniform in [-4, 4); not std::uniform_real_distribution, which costs a logl per draw with clang.
  const auto u = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-50 - 4.0; };
  const unsigned kind = static_cast<unsigned>(rng() % 64);
  if (kind == 0) return T(0);
  if (kind == 1) return -T(0);
  if (kind == 2) return static_cast<T>(u()) * std::numeric_limits<T>::denorm_min() * T(1000);
  if (kind < 8) return static_cast<T>(std::ldexp(u(), static_cast<int>(rng() % 60) - 30));
  return static_cast<T>(u());
}

}  // namespace simd_inputs

#endif  // ROTARY_TESTS_KERNELS_SIMD_INPUTS_HPP
