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

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "detail/cpu.hpp"
#include "types.hpp"

namespace rotary {

enum class Isa { scalar, avx2, avx512, neon };

// The one table of ISAs. Dispatch, ROTARY_MAX_ISA, set_max_isa(), the kernel registry
// (detail/kernels/registry.hpp), every ISA sweep in the tests and the benchmark's kernel list read
// it; adding an ISA is one row here, one lane-op header and one row in the kernel registry.
struct IsaInfo {
  Isa isa;
  std::string_view name;   // as ROTARY_MAX_ISA and to_string() spell it
  std::string_view needs;  // what the CPU and build must have
  bool (*runs)() noexcept;  // this build has the kernels and this CPU (and OS) can run them
};

namespace detail {
inline bool runs_scalar() noexcept { return true; }
inline bool runs_avx2() noexcept { return ROTARY_X86_KERNELS && cpu_features().avx2_set(); }
inline bool runs_avx512() noexcept { return ROTARY_X86_KERNELS && cpu_features().avx512_set(); }
inline bool runs_neon() noexcept { return ROTARY_NEON_KERNELS != 0; }  // AdvSIMD: every AArch64 CPU has it
}  // namespace detail

// In order of preference, worst first: best_isa() is the last supported row.
inline constexpr IsaInfo kIsaTable[] = {
    {Isa::scalar, "scalar", "nothing", &detail::runs_scalar},
    {Isa::avx2, "avx2", "AVX2+FMA+F16C", &detail::runs_avx2},
    {Isa::avx512, "avx512", "AVX-512 F+VL+BW+DQ", &detail::runs_avx512},
    {Isa::neon, "neon", "an AArch64 build with NEON kernels", &detail::runs_neon},
};
inline constexpr std::size_t kIsaCount = sizeof(kIsaTable) / sizeof(kIsaTable[0]);

constexpr const IsaInfo& isa_info(Isa isa) noexcept {
  for (const IsaInfo& row : kIsaTable)
    if (row.isa == isa) return row;
  return kIsaTable[0];
}

constexpr std::string_view to_string(Isa isa) noexcept { return isa_info(isa).name; }

// Every ISA rotary knows, whether or not this build or CPU runs it (tests skip those it cannot).
inline constexpr std::array<Isa, kIsaCount> all_isas() noexcept {
  std::array<Isa, kIsaCount> out{};
  for (std::size_t i = 0; i < kIsaCount; ++i) out[i] = kIsaTable[i].isa;
  return out;
}

// True if this build has kernels for `isa` and this CPU (and OS) can run them.
inline bool isa_supported(Isa isa) noexcept { return isa_info(isa).runs(); }

// The ISAs this build and CPU run, in the table's order.
inline std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (const IsaInfo& row : kIsaTable)
    if (row.runs()) out.push_back(row.isa);
  return out;
}

// The fastest supported ISA.
inline Isa best_isa() noexcept {
  Isa best = Isa::scalar;
  for (const IsaInfo& row : kIsaTable)
    if (row.runs()) best = row.isa;
  return best;
}

namespace detail {

// "\"scalar\", \"avx2\", \"avx512\" or \"neon\"" (quoted) / "scalar, avx2, avx512 or neon".
inline std::string isa_names(bool quoted) {
  std::string out;
  for (std::size_t i = 0; i < kIsaCount; ++i) {
    if (i > 0) out += i + 1 == kIsaCount ? " or " : ", ";
    if (quoted) out += '"';
    out += kIsaTable[i].name;
    if (quoted) out += '"';
  }
  return out;
}

}  // namespace detail

inline Isa parse_isa(std::string_view name) {
  for (const IsaInfo& row : kIsaTable)
    if (name == row.name) return row.isa;
  throw error("isa (\"" + std::string(name) + "\") must be " + detail::isa_names(true));
}

namespace detail {

inline std::string unsupported_isa_message(Isa isa) {
  return std::string(to_string(isa)) + " is not supported by this CPU or build (needs " +
         std::string(isa_info(isa).needs) + "); best supported is " + std::string(to_string(best_isa()));
}

// The ISA named by ROTARY_MAX_ISA, or best_isa() if it is unset or empty. Throws on a bad value.
inline Isa isa_from_environment() {
  const char* value = std::getenv("ROTARY_MAX_ISA");
  if (value == nullptr || *value == '\0') return best_isa();
  Isa isa = Isa::scalar;
  try {
    isa = parse_isa(value);
  } catch (const error&) {
    throw error("environment variable ROTARY_MAX_ISA (\"" + std::string(value) + "\") must be " +
                isa_names(false));
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

// ---- streaming stores ---------------------------------------------------------------------------
// A plain store reads its cache line before writing it, so writing N bytes out of place moves 2N
// through memory; a streaming (non-temporal) store writes whole lines without reading them, and
// leaves them out of the caches. The AVX-512 kernels write a call's outputs (f32, f64, f16, bf16)
// with streaming stores when the call writes at least stream_min_bytes() bytes, all of them out of
// place, rotary_dim == head_dim and a multiple of 128 bytes, and every output row starts on a 64-byte
// boundary (pointer and strides); 16-bit rows further need rotary_dim 64 or 128 (256 half-split).
// Other calls, other ISAs and the fused ops use plain stores. The bits are the same either way.
// The default is 3/8 of the CPU's last-level cache as cpuid describes it: from there a call's output
// and its input (as much again) fill more than 3/4 of that cache, so the output cannot stay in it for
// the next op anyway; never where cpuid describes none. memcpy makes the same choice at its own
// threshold (glibc 2.36: 3/4 of the last-level cache's share per thread, which is 3/8 of it where two
// threads share it).
//   environment  ROTARY_STREAM_MIN_BYTES=<bytes>|never   read once, at the first call that runs
//   code         rotary::set_stream_min_bytes(bytes)     overrides the environment
// A value that is not a decimal count of bytes (or "never") throws rotary::error, from the first
// call (and each after it) until fixed or overridden, as ROTARY_MAX_ISA does.
inline constexpr std::int64_t kStreamNever = std::numeric_limits<std::int64_t>::max();

namespace detail {

inline constexpr std::int64_t kStreamUnresolved = -1;

inline std::atomic<std::int64_t>& stream_min_bytes_state() noexcept {
  static std::atomic<std::int64_t> bytes{kStreamUnresolved};
  return bytes;
}

inline std::int64_t default_stream_min_bytes() noexcept {
  const std::int64_t llc = cpu_features().last_level_cache_bytes;
  return llc > 0 ? llc / 8 * 3 : kStreamNever;
}

// ROTARY_STREAM_MIN_BYTES, or the default if it is unset or empty. Throws on a bad value.
inline std::int64_t stream_min_bytes_from_environment() {
  const char* value = std::getenv("ROTARY_STREAM_MIN_BYTES");
  if (value == nullptr || *value == '\0') return default_stream_min_bytes();
  const std::string_view v(value);
  if (v == "never") return kStreamNever;
  std::int64_t n = 0;
  for (const char ch : v) {
    const int digit = ch - '0';
    if (digit < 0 || digit > 9 || n > (kStreamNever - digit) / 10)
      throw error("environment variable ROTARY_STREAM_MIN_BYTES (\"" + std::string(v) +
                  "\") must be a count of bytes (decimal digits, at most 2^63 - 1) or never");
    n = n * 10 + digit;
  }
  return n;
}

}  // namespace detail

// Streams the outputs of calls that write at least `bytes` (>= 0; kStreamNever: never), overriding
// ROTARY_STREAM_MIN_BYTES. Thread-safe; calls already running keep their choice.
inline void set_stream_min_bytes(std::int64_t bytes) {
  if (bytes < 0) throw error("set_stream_min_bytes: bytes (" + std::to_string(bytes) + ") must be >= 0");
  detail::stream_min_bytes_state().store(bytes, std::memory_order_relaxed);
}

// The threshold the next call uses. The first call reads ROTARY_STREAM_MIN_BYTES (and throws
// rotary::error if it is invalid, again on every call until fixed or overridden).
inline std::int64_t stream_min_bytes() {
  std::atomic<std::int64_t>& state = detail::stream_min_bytes_state();
  std::int64_t v = state.load(std::memory_order_relaxed);
  if (v == detail::kStreamUnresolved) {
    const std::int64_t from_env = detail::stream_min_bytes_from_environment();
    if (state.compare_exchange_strong(v, from_env, std::memory_order_relaxed)) v = from_env;
  }
  return v;
}

}  // namespace rotary

#endif  // ROTARY_DISPATCH_HPP
