// rotary — runtime ISA selection.
//
// Every apply() picks its kernel once per call from active_isa():
//   avx512  AVX-512 F+VL+BW+DQ (with the avx2 set)   x86-64
//   avx2    AVX2 + FMA + F16C                         x86-64
//   neon    Advanced SIMD (mandatory in AArch64)      AArch64
//   scalar  portable C++, the bit-exact reference    everywhere
// All kernels give bit-identical results (one fixed fma order), so the choice changes speed only.
//
// By default active_isa() is best_isa(), the best ISA that this build has kernels for and this CPU
// runs. To cap it (tests, fair benchmarks, bisecting a suspected kernel bug):
//   environment  ROTARY_MAX_ISA=scalar|avx2|avx512|neon   read once, at the first dispatch
//   code         rotary::set_max_isa(Isa)                  overrides the environment
// An unknown name or an ISA this build/CPU cannot run throws rotary::error (the environment variable
// from the first call that dispatches); there is no silent fallback. An empty ROTARY_MAX_ISA counts
// as unset.
#ifndef ROTARY_DISPATCH_HPP
#define ROTARY_DISPATCH_HPP

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config.hpp"
#include "detail/cpu.hpp"
#include "types.hpp"

namespace rotary {

enum class Isa { scalar, avx2, avx512, neon };

constexpr std::string_view to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::neon:
      return "neon";
    default:
      return "scalar";
  }
}

inline Isa parse_isa(std::string_view name) {
  for (const Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon})
    if (name == to_string(isa)) return isa;
  throw error("isa (\"" + std::string(name) + "\") must be \"scalar\", \"avx2\", \"avx512\" or \"neon\"");
}

// True if this build has kernels for `isa` and this CPU (and OS) can run them.
inline bool isa_supported(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return ROTARY_X86_KERNELS && detail::cpu_features().avx2_set();
    case Isa::avx512:
      return ROTARY_X86_KERNELS && detail::cpu_features().avx512_set();
    case Isa::neon:
      return ROTARY_NEON_KERNELS != 0;  // AdvSIMD: every AArch64 CPU has it
    default:
      return false;
  }
}

// The fastest supported ISA.
inline Isa best_isa() noexcept {
  if (isa_supported(Isa::neon)) return Isa::neon;
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

namespace detail {

inline std::string unsupported_isa_message(Isa isa) {
  std::string what;
  switch (isa) {
    case Isa::avx2:
      what = "AVX2+FMA+F16C";
      break;
    case Isa::avx512:
      what = "AVX-512 F+VL+BW+DQ";
      break;
    case Isa::neon:
      what = "an AArch64 build with NEON kernels";
      break;
    default:
      break;
  }
  return std::string(to_string(isa)) + " is not supported by this CPU or build (needs " + what +
         "); best supported is " + std::string(to_string(best_isa()));
}

// The ISA named by ROTARY_MAX_ISA, or best_isa() if it is unset or empty. Throws on a bad value.
inline Isa isa_from_environment() {
  const char* value = std::getenv("ROTARY_MAX_ISA");
  if (value == nullptr || *value == '\0') return best_isa();
  Isa isa = Isa::scalar;
  try {
    isa = parse_isa(value);
  } catch (const error&) {
    throw error("environment variable ROTARY_MAX_ISA (\"" + std::string(value) +
                "\") must be scalar, avx2, avx512 or neon");
  }
  if (!isa_supported(isa))
    throw error("environment variable ROTARY_MAX_ISA (\"" + std::string(value) +
                "\"): " + unsupported_isa_message(isa));
  return isa;
}

inline constexpr int kIsaUnresolved = -1;

// The active ISA as an int, or kIsaUnresolved until the first dispatch or set_max_isa().
inline std::atomic<int>& active_isa_state() noexcept {
  static std::atomic<int> state{kIsaUnresolved};
  return state;
}

}  // namespace detail

// Caps dispatch at `isa` (which must be supported), overriding ROTARY_MAX_ISA. Thread-safe, but
// calls already running keep the kernel they picked.
inline void set_max_isa(Isa isa) {
  if (!isa_supported(isa)) throw error("set_max_isa: " + detail::unsupported_isa_message(isa));
  detail::active_isa_state().store(static_cast<int>(isa), std::memory_order_relaxed);
}

// The ISA the next call will run. The first call reads ROTARY_MAX_ISA (and throws rotary::error if
// it is invalid, again on every call until fixed or overridden by set_max_isa()).
inline Isa active_isa() {
  std::atomic<int>& state = detail::active_isa_state();
  int v = state.load(std::memory_order_relaxed);
  if (v == detail::kIsaUnresolved) {
    const int from_env = static_cast<int>(detail::isa_from_environment());
    // A concurrent set_max_isa() wins over the environment.
    if (state.compare_exchange_strong(v, from_env, std::memory_order_relaxed)) v = from_env;
  }
  return static_cast<Isa>(v);
}

}  // namespace rotary

#endif  // ROTARY_DISPATCH_HPP
