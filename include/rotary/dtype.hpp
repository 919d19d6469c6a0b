// rotary — storage types. Vectors may be stored as f32, f64, f16 (Eigen::half) or bf16
// (Eigen::bfloat16); f16 and bf16 are computed in f32 with f32 cos/sin and rounded back to nearest
// even, so compute precision and storage precision are separate choices.
#ifndef ROTARY_DTYPE_HPP
#define ROTARY_DTYPE_HPP

#include <Eigen/Core>
#include <string_view>
#include <type_traits>

#include "config.hpp"

namespace rotary {

using f16 = Eigen::half;
using bf16 = Eigen::bfloat16;

template <class T>
inline constexpr bool is_storage_type_v = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                          std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

// The type arithmetic and the cos/sin cache use for storage type T: double for f64, else float.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
constexpr std::string_view dtype_name() noexcept {
  static_assert(is_storage_type_v<T>, "rotary stores f32, f64, f16 (Eigen::half) or bf16 (Eigen::bfloat16)");
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, double>) return "f64";
  if constexpr (std::is_same_v<T, f16>) return "f16";
  if constexpr (std::is_same_v<T, bf16>) return "bf16";
  return "";
}

}  // namespace rotary

#endif  // ROTARY_DTYPE_HPP
