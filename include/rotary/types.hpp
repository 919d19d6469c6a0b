// rotary — basic vocabulary: pairings, directions and the error type.
#ifndef ROTARY_TYPES_HPP
#define ROTARY_TYPES_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "config.hpp"
#include "detail/fp.hpp"

namespace rotary {

// Which coordinates of a head form a rotated pair. Pair j has frequency theta_j either way.
//   interleaved: (x[2j], x[2j+1])          RoFormer, GPT-J, Meta Llama's complex form
//   half_split:  (x[j], x[j + rotary_dim/2]) GPT-NeoX, HF rotate_half (Llama, Qwen, Phi, ...)
enum class Pairing { interleaved, half_split };

// forward rotates by +m*theta; inverse by -m*theta. The inverse is also the backward pass: the
// gradient of a rotation is its transpose.
enum class Direction { forward, inverse };

// Geometry of a raw buffer: head row (t, h) starts at ptr + t*token_stride + h*head_stride
// (elements), and holds head_dim contiguous elements.
struct StridedLayout {
  std::int64_t tokens = 0;
  std::int64_t heads = 0;
  std::ptrdiff_t token_stride = 0;
  std::ptrdiff_t head_stride = 0;
};

// Every checked entry point reports bad input with this type; the message names the argument and
// its value.
class error : public std::invalid_argument {
 public:
  explicit error(const std::string& what) : std::invalid_argument("rotary: " + what) {}
};

constexpr std::string_view to_string(Pairing p) noexcept {
  return p == Pairing::interleaved ? "interleaved" : "half_split";
}

namespace detail {
// Refuses a Pairing that is neither enumerator (an integer cast to it): kernels and permutations
// would take it for one of the two. `what` prefixes the message ("" for none).
inline void check_pairing(Pairing p, std::string_view what = "") {
  if (p != Pairing::interleaved && p != Pairing::half_split)
    throw error(std::string(what) + (what.empty() ? "" : ": ") + "pairing (" +
                std::to_string(static_cast<int>(p)) + ") is neither interleaved nor half_split");
}
}  // namespace detail

inline Pairing parse_pairing(std::string_view name) {
  if (name == "interleaved") return Pairing::interleaved;
  if (name == "half_split") return Pairing::half_split;
  throw error("pairing (\"" + std::string(name) + "\") must be \"interleaved\" or \"half_split\"");
}

}  // namespace rotary

#endif  // ROTARY_TYPES_HPP
