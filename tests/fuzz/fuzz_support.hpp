// Shared pieces of rotary's libFuzzer harnesses: failure reporting, the storage type, ulps, buffers
// with sentinels, invalid calls, a deterministic serial ParallelFor, and frequency/Rope construction
// from fuzz bytes (every scaling rule of scaling.hpp, per-pair factors and the alpha/rho variant).
// Bit patterns, the ISAs and IsaScope come from ../support_core.hpp (shared with the GoogleTest tests).
//
// Harnesses draw their parameters through Source (clang's FuzzedDataProvider, continued by a PRNG
// once the bytes run out) and fill large buffers from a PRNG seeded by the input, so that an input
// stays a few dozen bytes.
#ifndef ROTARY_TESTS_FUZZ_SUPPORT_HPP
#define ROTARY_TESTS_FUZZ_SUPPORT_HPP

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <rotary/rotary.hpp>

#include "../support_core.hpp"

namespace rotary_fuzz {

using rotary_test::Bits;
using rotary_test::DType;
using rotary_test::from_bits;
using rotary_test::is_nan;
using rotary_test::IsaScope;
using rotary_test::supported_isas;
using rotary_test::to_bits;
using rotary_test::with_dtype;

// A finding: print what was being checked and abort, so libFuzzer stores the input as a crash.
[[noreturn]] inline void fail(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fprintf(stderr, "\n==== rotary fuzz finding: ");
  std::vfprintf(stderr, format, args);
  std::fprintf(stderr, "\n");
  va_end(args);
  std::fflush(stderr);
  std::abort();
}

// ROTARY_FUZZ_DESCRIBE set: harnesses print each input's case (used to pick seed files).
inline bool describe_inputs() {
  static const bool on = std::getenv("ROTARY_FUZZ_DESCRIBE") != nullptr;
  return on;
}

// ---- drawing parameters -------------------------------------------------------------------------

// splitmix64: cheap, good enough to fill buffers from a 64-bit seed taken from the input.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::int64_t below(std::int64_t n) {
    return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }
};

// FuzzedDataProvider's interface, but once the input's bytes are used up the choices continue from
// a PRNG seeded with a hash of the whole input, instead of all collapsing to their minimum: short
// inputs (most of what libFuzzer tries) then still spread over every mode, while longer ones steer
// each choice byte by byte.
class Source {
 public:
  Source(const std::uint8_t* data, std::size_t size) : in_(data, size), rng_{0xC0FFEEull} {
    for (std::size_t i = 0; i < size; ++i) rng_.s = (rng_.s ^ data[i]) * 0x100000001B3ull;  // FNV-1a
  }
  template <class T>
  T ConsumeIntegralInRange(T min, T max) {
    if (in_.remaining_bytes() > 0) return in_.ConsumeIntegralInRange<T>(min, max);
    const auto span = static_cast<std::uint64_t>(max) - static_cast<std::uint64_t>(min);
    const std::uint64_t r = span == ~std::uint64_t{0} ? rng_.next() : rng_.next() % (span + 1);
    return static_cast<T>(static_cast<std::uint64_t>(min) + r);
  }
  template <class T>
  T ConsumeIntegral() {
    return ConsumeIntegralInRange<T>(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
  }
  bool ConsumeBool() { return (ConsumeIntegral<std::uint8_t>() & 1) != 0; }
  template <class T>
  T ConsumeFloatingPointInRange(T min, T max) {
    if (in_.remaining_bytes() > 0) return in_.ConsumeFloatingPointInRange<T>(min, max);
    return min + (max - min) * static_cast<T>(rng_.uniform());
  }
  template <class T>
  T ConsumeProbability() {
    return ConsumeFloatingPointInRange<T>(0, 1);
  }

 private:
  FuzzedDataProvider in_;
  Rng rng_;
};

// The storage type: the first choice of every harness (f32, f64, f16 or bf16), for with_dtype.
inline DType draw_dtype(Source& in) { return static_cast<DType>(in.ConsumeIntegralInRange<int>(0, 3)); }

// ---- ulps ---------------------------------------------------------------------------------------

template <class T>
double widen(T x) {
  return static_cast<double>(rotary::detail::to_compute(x));
}

// Precision (significand bits) and smallest normal of each type, storage types included.
template <class T>
struct Format {
  static constexpr int digits = std::numeric_limits<T>::digits;
  static double min_normal() { return static_cast<double>(std::numeric_limits<T>::min()); }
  static double max() { return static_cast<double>(std::numeric_limits<T>::max()); }
};
template <>
struct Format<rotary::f16> {
  static constexpr int digits = 11;
  static double min_normal() { return 0x1.0p-14; }
  static double max() { return 65504.0; }
};
template <>
struct Format<rotary::bf16> {
  static constexpr int digits = 8;
  static double min_normal() { return 0x1.0p-126; }
  static double max() { return 0x1.FEp127; }
};

// The spacing of T's values at magnitude |v| (below the normal range: the subnormal spacing).
template <class T>
double ulp(double v) {
  v = std::fabs(v);
  if (v < Format<T>::min_normal()) v = Format<T>::min_normal();
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(1.0, e - Format<T>::digits);
}

// Error bound for one rotated coordinate y = x0*c - x1*s (or x1*c + x0*s) computed by the kernels as
// fma(x0, c, -(x1*s)) in C = compute_t<T> and stored in T, against the exact value y_ref from the
// same c and s: the product rounds (<= 1/2 ulp_C(|x1*s|)), the fma rounds (<= 1/2 ulp_C(|y|)), both
// at most 1/2 ulp_C(mag) with mag = |x0*c| + |x1*s|: 1 ulp_C(mag). f16/bf16 then round to nearest
// (+1/2 ulp_T of the result); bf16 flushes f32 subnormal results to zero (+ FLT_MIN).
template <class T>
double rotation_tolerance(double mag, double y_ref) {
  using C = rotary::compute_t<T>;
  double tol = ulp<C>(mag);
  if constexpr (!std::is_same_v<T, C>) tol += 0.5 * ulp<T>(std::fabs(y_ref) + tol);
  if constexpr (std::is_same_v<T, rotary::bf16>)
    tol += static_cast<double>(std::numeric_limits<float>::min());
  return tol;
}

// ---- random values ------------------------------------------------------------------------------

// How input values are drawn: plain O(1) values, a spread of exponents, or that plus special values
// (signed zeros, subnormals, infinities, NaNs, values near the storage type's overflow).
enum class ValueMode { unit, exponents, specials };

template <class T>
T special_value(Rng& rng) {
  using L = std::numeric_limits<double>;
  const double sign = (rng.next() & 1) ? -1.0 : 1.0;
  switch (rng.below(6)) {
    case 0:
      return static_cast<T>(sign * 0.0);
    case 1:  // a subnormal of T (f16/bf16: of the storage type)
      return rotary::detail::from_compute<T>(
          static_cast<rotary::compute_t<T>>(sign * Format<T>::min_normal() * rng.uniform()));
    case 2:
      return static_cast<T>(sign * L::infinity());
    case 3:
      return static_cast<T>(L::quiet_NaN());
    case 4:  // within a factor 1.25 of T's largest value: a rotation may overflow
      return static_cast<T>(sign * Format<T>::max() * (0.8 + 0.2 * rng.uniform()));
    default:
      return static_cast<T>(sign * Format<T>::min_normal() * (1.0 + rng.uniform()));
  }
}

template <class T>
T random_value(Rng& rng, ValueMode mode) {
  const double u = 4.0 * rng.uniform() - 2.0;
  if (mode == ValueMode::specials && rng.below(16) == 0) return special_value<T>(rng);
  if (mode != ValueMode::unit && rng.below(4) == 0) {
    // 2^-20 .. 2^12 (f16: stays below its overflow with room for a rotation)
    return static_cast<T>(std::ldexp(u, static_cast<int>(rng.below(33)) - 20));
  }
  return static_cast<T>(u);
}

// ---- buffers ------------------------------------------------------------------------------------

// One allocation: `size` elements, every one a sentinel until written. Views live at offsets in it;
// whatever a call must not touch keeps its bits.
template <class T>
struct Buffer {
  std::vector<T> data;
  explicit Buffer(std::size_t size = 0) : data(size, from_bits<T>(Bits<T>::sentinel)) {}
  bool same_bits(const Buffer& o) const {
    return data.size() == o.data.size() &&
           std::memcmp(static_cast<const void*>(data.data()), static_cast<const void*>(o.data.data()),
                       data.size() * sizeof(T)) == 0;
  }
};

constexpr std::ptrdiff_t kSlack = 8;  // sentinels after the last row of every buffer

// Element count from a view's first element to the end of its last row.
inline std::ptrdiff_t span_of(std::int64_t tokens, std::int64_t heads, std::ptrdiff_t ts, std::ptrdiff_t hs,
                              std::int64_t head_dim) {
  if (tokens <= 0 || heads <= 0) return 0;
  return (tokens - 1) * ts + (heads - 1) * hs + head_dim;
}

// One flag per element of each buffer, all clear (which elements a call writes, or rotates).
template <class T>
std::vector<std::vector<char>> element_flags(const std::vector<Buffer<T>>& bufs) {
  std::vector<std::vector<char>> flags(bufs.size());
  for (std::size_t b = 0; b < bufs.size(); ++b) flags[b].assign(bufs[b].data.size(), 0);
  return flags;
}

// Every element that `written` does not flag keeps its initial bits (sentinels, gaps between rows,
// const inputs, the other heads of a QKV buffer).
template <class T, class Case>
void expect_untouched_outside(const Case& c, const std::vector<std::vector<char>>& written,
                              const std::vector<Buffer<T>>& got, const std::vector<Buffer<T>>& initial) {
  for (std::size_t b = 0; b < got.size(); ++b)
    for (std::size_t i = 0; i < got[b].data.size(); ++i)
      if (!written[b][i] && to_bits(got[b].data[i]) != to_bits(initial[b].data[i]))
        fail("buffer %zu element %zu changed outside the output rows\n  %s", b, i, c.describe().c_str());
}

// ---- valid and invalid calls --------------------------------------------------------------------

// A valid call: it must not throw. (Case: a harness's case, with describe().)
template <class Case, class Call>
void expect_accepted(const Case& c, Call&& call) {
  try {
    call();
  } catch (const rotary::error& e) {
    fail("valid call threw: %s\n  %s", e.what(), c.describe().c_str());
  }
}

// For one input in four, a breakage (an enum of `count` kinds, 0 = none) that makes the call invalid.
template <class Breakage>
Breakage draw_breakage(Source& in, int count) {
  return in.ConsumeIntegralInRange<int>(0, 3) == 0
             ? static_cast<Breakage>(in.ConsumeIntegralInRange<int>(1, count - 1))
             : Breakage::none;
}

// Invalid calls by breakage kind: each must be rejected, and is counted with its first messages for
// the report printed at exit when ROTARY_FUZZ_STATS is set (to see that every breakage is reached,
// and what the library said).
template <class Breakage, int N>
class Rejections {
 public:
  explicit Rejections(const char* (*name)(Breakage)) : name_(name) {}

  // Runs `call`, whose case c breaks one argument (c.breakage) in a certainly invalid way, on `bufs`
  // (a copy of `initial`): it must throw rotary::error, with the "rotary: " prefix, before touching
  // any buffer.
  template <class T, class Case, class Call>
  void expect(const Case& c, const std::vector<Buffer<T>>& bufs, const std::vector<Buffer<T>>& initial,
              Call&& call) {
    try {
      call();
    } catch (const rotary::error& e) {
      if (std::string(e.what()).rfind("rotary: ", 0) != 0) fail("error message without prefix: %s", e.what());
      const int kind = static_cast<int>(c.breakage);
      ++count_[kind];
      if (samples_[kind].size() < 3) samples_[kind].push_back(e.what());
      for (std::size_t b = 0; b < bufs.size(); ++b)
        if (!bufs[b].same_bits(initial[b]))
          fail("a rejected call changed buffer %zu\n  %s", b, c.describe().c_str());
      return;
    }
    fail("invalid call (%s) was accepted\n  %s", name_(c.breakage), c.describe().c_str());
  }

  void print() const {
    for (int b = 1; b < N; ++b) {
      std::fprintf(stderr, "rejected %-24s %ld\n", name_(static_cast<Breakage>(b)), count_[b]);
      for (const auto& m : samples_[b]) std::fprintf(stderr, "    %s\n", m.c_str());
    }
  }

 private:
  const char* (*name_)(Breakage);
  long count_[N] = {};
  std::vector<std::string> samples_[N];
};

// Position arrays (the int32 and int64 copies) one entry too long, or one too short if not empty.
inline void break_position_count(Source& in, std::vector<std::int32_t>& p32, std::vector<std::int64_t>& p64) {
  if (!p64.empty() && in.ConsumeBool()) {
    p32.pop_back();
    p64.pop_back();
  } else {
    p32.push_back(0);
    p64.push_back(0);
  }
}

// An element offset that moves an output view onto part of its input view: less than head_dim, so
// that even a single row shares memory with its shifted self, and within the slack after the last row.
inline std::ptrdiff_t partial_overlap_shift(Source& in, std::int64_t head_dim) {
  return in.ConsumeIntegralInRange<std::ptrdiff_t>(1, std::min<std::ptrdiff_t>(head_dim - 1, kSlack));
}

// A stride of PTRDIFF_MAX / sizeof(T) elements or more: two entries along it span more bytes than any
// object can have (more than PTRDIFF_MAX), so no buffer can back the view.
template <class T>
std::ptrdiff_t huge_stride(Source& in) {
  constexpr std::ptrdiff_t kMax = std::numeric_limits<std::ptrdiff_t>::max();
  return in.ConsumeIntegralInRange<std::ptrdiff_t>(kMax / static_cast<std::ptrdiff_t>(sizeof(T)), kMax);
}

// ---- threads ------------------------------------------------------------------------------------

// A serial ParallelFor that splits [0, n) into `parts` ranges and runs them last first (any order
// must do), recording the ranges. From the first get() with parts > 0 until it is destroyed, calls
// split however small (SplitAlways): the fuzzers' shapes are far below the minimum work per thread,
// which would otherwise run every call on the caller alone and never reach this ParallelFor.
struct ChunkedFor {
  int parts = 0;  // 0: no ParallelFor at all
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  std::unique_ptr<rotary_test::SplitAlways> always_split = nullptr;

  rotary::ParallelFor get() {
    if (parts == 0) return {};
    if (!always_split) always_split = std::make_unique<rotary_test::SplitAlways>();
    return [this](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
      ranges.clear();
      const std::int64_t p = std::max<std::int64_t>(1, std::min<std::int64_t>(parts, n));
      for (std::int64_t i = p - 1; i >= 0; --i) {
        const std::int64_t b = rotary::split_bound(n, p, i);
        const std::int64_t e = rotary::split_bound(n, p, i + 1);
        ranges.emplace_back(b, e);
        body(b, e);
      }
    };
  }
};

// ---- frequencies --------------------------------------------------------------------------------

// A scaling rule from the input: rope type and every parameter, mostly in the ranges real configs
// use, sometimes absent. Stores them in spec.frequencies and returns the finished frequencies
// (per-pair factors and alpha/rho from `spec`); the defaults when the drawn parameters are invalid
// (which must be a rotary::error).
// The attention factor is kept in [0.1, 4] so that rotated values stay far from overflow.
inline rotary::Frequencies fuzz_frequencies(Source& in, rotary::RotarySpec& spec, std::string* rule) {
  static const char* const types[] = {"default", "linear",   "dynamic", "ntk",
                                      "yarn",    "longrope", "llama3",  "proportional"};
  rotary::RopeParameters p;
  p.rope_type = types[in.ConsumeIntegralInRange<int>(0, 7)];
  p.rope_theta = spec.base;
  const auto maybe = [&in](double lo, double hi) -> std::optional<double> {
    if (in.ConsumeBool()) return std::nullopt;
    return in.ConsumeFloatingPointInRange<double>(lo, hi);
  };
  p.factor = maybe(1.0, 64.0);
  if (in.ConsumeBool())
    p.original_max_position_embeddings = in.ConsumeIntegralInRange<std::int64_t>(1, 1 << 20);
  p.attention_factor = maybe(0.1, 4.0);
  p.beta_fast = maybe(0.0, 64.0);
  p.beta_slow = maybe(0.0, 4.0);
  p.mscale = maybe(0.0, 4.0);
  p.mscale_all_dim = maybe(0.0, 4.0);
  if (in.ConsumeBool()) p.truncate = in.ConsumeBool();
  p.low_freq_factor = maybe(0.5, 2.0);
  p.high_freq_factor = maybe(1.0, 8.0);
  p.partial_rotary_factor = maybe(0.0, 1.0);
  const std::int64_t pairs = spec.effective_rotary_dim() / 2;
  if (p.rope_type == "longrope") {
    const bool wrong = in.ConsumeIntegralInRange<int>(0, 15) == 0;  // a list of the wrong length
    for (auto* list : {&p.short_factor, &p.long_factor}) {
      const std::int64_t n = wrong ? in.ConsumeIntegralInRange<std::int64_t>(0, pairs + 1) : pairs;
      for (std::int64_t j = 0; j < n; ++j) list->push_back(in.ConsumeFloatingPointInRange<double>(1.0, 64.0));
    }
  }
  rotary::ScalingInput si;
  si.head_dim = spec.head_dim;
  si.rotary_dim = spec.rotary_dim;
  si.max_position_embeddings = in.ConsumeIntegralInRange<std::int64_t>(0, 1 << 20);
  if (in.ConsumeBool()) si.seq_len = in.ConsumeIntegralInRange<std::int64_t>(0, 1 << 22);
  rotary::EngineQuirks q;
  q.vllm_dynamic_fixed_table = in.ConsumeBool();
  q.ggml_yarn_magnitude = in.ConsumeBool();
  q.vllm_longrope_always_long = in.ConsumeBool();

  rotary::Frequencies f;
  try {
    f = rotary::scaled_frequencies(p, si, q);
    *rule = p.rope_type;
  } catch (const rotary::error&) {  // an invalid parameter set: the library said so; use defaults
    f = rotary::default_frequencies(spec.effective_rotary_dim(), spec.base);
    *rule = "default (" + p.rope_type + " rejected)";
  }
  if (!(f.attention_factor >= 0.1 && f.attention_factor <= 4.0)) f.attention_factor = 1.0;
  spec.frequencies = f;  // a Rope takes only its spec's frequencies
  return rotary::compute_frequencies(spec);
}

// A spec from the input: pairing, head_dim (odd ones too: their last coordinate passes through),
// rotary_dim (full or partial, even), base, and optionally per-pair factors and alpha/rho.
inline rotary::RotarySpec fuzz_spec(Source& in, std::int64_t max_head_dim) {
  rotary::RotarySpec s;
  s.pairing = in.ConsumeBool() ? rotary::Pairing::interleaved : rotary::Pairing::half_split;
  // Mostly small heads; now and then the long-half streaming sizes of the AVX-512 kernels.
  static const std::int64_t big[] = {128, 130, 256, 258, 544};
  s.head_dim = in.ConsumeIntegralInRange<int>(0, 7) == 0
                   ? big[in.ConsumeIntegralInRange<int>(0, 4)]
                   : in.ConsumeIntegralInRange<std::int64_t>(2, max_head_dim);
  s.rotary_dim = in.ConsumeBool() ? 0 : 2 * in.ConsumeIntegralInRange<std::int64_t>(1, s.head_dim / 2);
  if (s.rotary_dim == 0 && s.head_dim % 2 != 0) s.rotary_dim = s.head_dim - 1;
  static const double bases[] = {10000.0, 500000.0, 1e6, 100.0, 2.0};
  s.base = bases[in.ConsumeIntegralInRange<int>(0, 4)];
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    s.freq_factors.resize(static_cast<std::size_t>(s.effective_rotary_dim() / 2));
    for (double& c : s.freq_factors) c = in.ConsumeFloatingPointInRange<double>(0.25, 64.0);
  }
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0)
    s.receptive_field = rotary::ReceptiveField{in.ConsumeProbability<double>(),
                                               in.ConsumeFloatingPointInRange<double>(0.5, 2.0)};
  return s;
}

}  // namespace rotary_fuzz

#endif  // ROTARY_TESTS_FUZZ_SUPPORT_HPP
