// SIMD kernels against the scalar kernel, bit for bit: every ISA x dtype x pairing x direction x in
// or out of place on every shape (SimdVsScalar), f16/bf16 stores rounding like convert.hpp, and the
// rows the 16-bit kernels ask for ahead (prefetch) right at a guard page. Streaming stores, dispatch
// and the upper vector state after a kernel: test_dispatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <rotary/dispatch.hpp>
#include <rotary/rotary.hpp>

#include "simd_inputs.hpp"
#include "support.hpp"

namespace {

using rotary::Direction;
using rotary::Isa;
using rotary::Pairing;
using rotary::detail::KernelArgs;
using rotary_test::Bits;
using rotary_test::DType;
using rotary_test::dtype_name;
using rotary_test::from_bits;
using rotary_test::is_nan;
using rotary_test::IsaScope;
using rotary_test::to_bits;
using simd_inputs::base_seed;
using simd_inputs::kAllIsas;
using simd_inputs::random_value;

// ---- kernels under test -------------------------------------------------------------------------

// The kernels come from the registry (detail/kernels/registry.hpp), as dispatch takes them.
using rotary::detail::Kernel;
using rotary::detail::kernel_for;

// Each SimdVsScalar test (ISA x dtype x pairing x direction x in/out of place) sweeps every shape:
// head_dim with every remainder mod the lane widths, rotary_dim at 1/4..1 of it, 1/3/32 heads,
// 1/3/17 tokens, padded strides in token-major and head-major layouts, base pointers one element
// off alignment, random cached positions. Outputs must equal the scalar kernel's byte for byte,
// pass-through coordinates must equal the input, and an out-of-place call must leave everything
// outside its output rows (gaps between rows, slack before and after) untouched.
// f16/bf16 inputs also hold signed zeros, subnormals of the storage type, values near overflow (f16
// +-60000, whose rotation may round to inf), infinities and a few NaNs: a rotated coordinate where
// the scalar kernel gives NaN only has to be NaN (payloads are not part of the contract); every
// other element, infinities included, must match bit for bit.
// Set ROTARY_TEST_SEED to replay other random inputs; failures print the seed and the shape.

// ---- parameters ---------------------------------------------------------------------------------

struct SimdCase {
  Isa isa;
  DType dtype;
  Pairing pairing;
  Direction dir;
  bool in_place;
};

std::string case_name(const SimdCase& c) {
  std::string s = std::string(rotary::to_string(c.pairing)) + "_" + dtype_name(c.dtype) + "_" +
                  std::string(rotary::to_string(c.isa)) +
                  (c.dir == Direction::forward ? "_forward" : "_inverse") +
                  (c.in_place ? "_in_place" : "_out_of_place");
  return s;
}

void PrintTo(const SimdCase& c, std::ostream* os) { *os << case_name(c); }

std::vector<SimdCase> all_cases() {
  std::vector<SimdCase> v;
  for (const Isa isa : kAllIsas)
    if (isa != Isa::scalar)
    for (const DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16})
      for (const Pairing p : {Pairing::half_split, Pairing::interleaved})
        for (const Direction d : {Direction::forward, Direction::inverse})
          for (const bool ip : {false, true}) v.push_back({isa, dt, p, d, ip});
  return v;
}

// ---- shapes -------------------------------------------------------------------------------------

// The design list (every remainder mod 4, 8 and 16 lanes; MLAS's 6/42/70), plus 258 and 544: their
// larger rotary_dims (h = rotary_dim/2 > 128) take the AVX-512 f32 half_split kernel's streaming path,
// with a tail (h = 129, 136, 204) and without (h = 272), as does 256 (h = 128: 512-byte halves, the
// blocked order); and the odd 7 and 67: pass-through runs of odd length (the 16-bit copies' odd last
// element).
constexpr std::int64_t kHeadDims[] = {2,  4,  6,  7,  8,  14, 16,  18,  30,  32,  34, 42,
                                      62, 64, 66, 67, 70, 96, 128, 130, 256, 258, 544};
// Heads are swept one after another with the token's cos/sin (no kernel path depends on their
// count past 1). Unoptimized builds (the flag matrix's -O0 set) leave out the 32: there this
// checker runs ~10x slower (107 s on Zen 4, 14 s without the 32), and every shape, pairing and tail
// class is still swept.
#if defined(__OPTIMIZE__)
constexpr std::int64_t kHeads[] = {1, 3, 32};
#else
constexpr std::int64_t kHeads[] = {1, 3};
#endif
constexpr std::int64_t kTokens[] = {1, 3, 17};

// rotary_dim at 1/4, 1/2, 3/4 and all of head_dim, rounded down to even, at least 2, deduplicated.
std::vector<std::int64_t> rotary_dims(std::int64_t head_dim) {
  std::vector<std::int64_t> v;
  for (const std::int64_t quarters : {1, 2, 3, 4}) {
    const std::int64_t d = std::max<std::int64_t>(2, (head_dim * quarters / 4) / 2 * 2);
    if (std::find(v.begin(), v.end(), d) == v.end()) v.push_back(d);
  }
  return v;
}

struct Layout {
  std::ptrdiff_t token_stride;
  std::ptrdiff_t head_stride;
  std::string describe() const {
    return "token_stride " + std::to_string(token_stride) + ", head_stride " + std::to_string(head_stride);
  }
};

// Padded strides: token-major ([tokens][heads][>head_dim]) or head-major ([heads][tokens][>head_dim]).
Layout random_layout(std::mt19937_64& rng, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim) {
  std::uniform_int_distribution<std::ptrdiff_t> pad(1, 9);
  std::ptrdiff_t row = head_dim + pad(rng);
  if (rng() % 2 == 0) return {heads * row + pad(rng) - 1, row};
  return {row, tokens * row + pad(rng) - 1};
}

// Number of elements from the first row's start to the last row's end.
std::ptrdiff_t span(const Layout& l, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim) {
  return (tokens - 1) * l.token_stride + (heads - 1) * l.head_stride + head_dim;
}

// ---- buffers ------------------------------------------------------------------------------------

// A view of `span` elements with `slack` sentinel elements on both sides, whose first element sits
// one element past a 64-byte boundary (every vector access is unaligned).
template <class T>
class Buffer {
 public:
  static constexpr std::ptrdiff_t kSlack = 48;
  explicit Buffer(std::ptrdiff_t span) : n_(span + 2 * kSlack) {
    const std::size_t bytes = static_cast<std::size_t>(n_ + 1) * sizeof(T) + 64;
    raw_.reset(new unsigned char[bytes]);
    // Offset the allocation itself (no integer-to-pointer cast): to the next 64-byte boundary, plus one T.
    const auto addr = reinterpret_cast<std::uintptr_t>(raw_.get());
    all_ = reinterpret_cast<T*>(raw_.get() + ((addr + 63) / 64 * 64 - addr) + sizeof(T));
    fill_sentinel();
  }
  void fill_sentinel() {
    for (std::ptrdiff_t i = 0; i < n_; ++i) all_[i] = from_bits<T>(Bits<T>::sentinel);
  }
  T* view() { return all_ + kSlack; }
  T* all() { return all_; }
  std::ptrdiff_t size() const { return n_; }
  void copy_from(const Buffer& o) {
    std::memcpy(static_cast<void*>(all_), static_cast<const void*>(o.all_),
                static_cast<std::size_t>(n_) * sizeof(T));
  }

 private:
  std::ptrdiff_t n_;
  std::unique_ptr<unsigned char[]> raw_;
  T* all_;
};

// ---- caches -------------------------------------------------------------------------------------

constexpr std::int64_t kCacheBegin = 1000003;  // large positions
constexpr std::int64_t kCacheRows = 64;

template <class T>
const rotary::CosSinCache<T>& cache_for(std::int64_t rotary_dim) {
  static std::map<std::int64_t, rotary::CosSinCache<T>> caches;
  auto it = caches.find(rotary_dim);
  if (it == caches.end())
    it = caches
             .emplace(rotary_dim, rotary::CosSinCache<T>(rotary::default_frequencies(rotary_dim, 10000.0),
                                                         kCacheBegin, kCacheBegin + kCacheRows))
             .first;
  return it->second;
}

// ---- one shape ----------------------------------------------------------------------------------

struct Shape {
  std::int64_t head_dim, rotary_dim, heads, tokens;
  Layout in, out;
  std::string describe() const {
    std::ostringstream s;
    s << "head_dim " << head_dim << ", rotary_dim " << rotary_dim << ", heads " << heads << ", tokens "
      << tokens << ", input {" << in.describe() << "}, output {" << out.describe() << "}";
    return s.str();
  }
};

// Where element i of a view lies: "token t, head h, coordinate j" or "outside the rows".
std::string locate(std::ptrdiff_t i, const Layout& l, const Shape& s) {
  for (std::int64_t t = 0; t < s.tokens; ++t)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::ptrdiff_t j = i - (t * l.token_stride + h * l.head_stride);
      if (j >= 0 && j < s.head_dim)
        return "token " + std::to_string(t) + ", head " + std::to_string(h) + ", coordinate " +
               std::to_string(j) + (j >= s.rotary_dim ? " (pass-through)" : "");
    }
  return "outside the rows (element " + std::to_string(i) + " of the view)";
}

template <class T>
std::string hex(T x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g (0x%llx)", static_cast<double>(rotary::detail::to_compute(x)),
                static_cast<unsigned long long>(to_bits(x)));
  return b;
}

// What a sweep compared: NaN outputs of the scalar kernel, and how many of them the kernel under test
// gave with other NaN bits (accepted: only NaN-ness is part of the contract).
struct NanStats {
  std::int64_t nan_outputs = 0;
  std::int64_t other_payload = 0;
};

// Runs one shape; returns an empty string or a description of the first difference.
template <class T>
std::string check_shape(const SimdCase& c, Kernel<T> kernel, const Shape& s, std::mt19937_64& rng,
                        NanStats& nans) {
  const rotary::CosSinCache<rotary::compute_t<T>>& cache = cache_for<rotary::compute_t<T>>(s.rotary_dim);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(s.tokens));
  for (auto& p : pos) p = kCacheBegin + static_cast<std::int64_t>(rng() % kCacheRows);

  Buffer<T> in(span(s.in, s.tokens, s.heads, s.head_dim));
  for (std::int64_t t = 0; t < s.tokens; ++t)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t j = 0; j < s.head_dim; ++j)
        in.view()[t * s.in.token_stride + h * s.in.head_stride + j] = random_value<T>(rng);

  KernelArgs<T> a;
  a.tokens = s.tokens;
  a.q.heads = s.heads;
  a.head_dim = s.head_dim;
  a.rotary_dim = s.rotary_dim;
  a.pairing = c.pairing;
  a.inverse = c.dir == Direction::inverse;
  a.rows = rotary::detail::CosSinRows<rotary::compute_t<T>>::table(cache, rotary::Positions(pos));
  a.q.in_token_stride = s.in.token_stride;
  a.q.in_head_stride = s.in.head_stride;
  const Layout& ol = c.in_place ? s.in : s.out;
  a.q.out_token_stride = ol.token_stride;
  a.q.out_head_stride = ol.head_stride;

  // want: the scalar kernel's result; got: the kernel under test. Same starting bytes.
  Buffer<T> want(c.in_place ? in.size() - 2 * Buffer<T>::kSlack : span(ol, s.tokens, s.heads, s.head_dim));
  Buffer<T> got(want.size() - 2 * Buffer<T>::kSlack);
  Buffer<T> in_copy(in.size() - 2 * Buffer<T>::kSlack);
  if (c.in_place) {
    want.copy_from(in);
    got.copy_from(in);
  }
  in_copy.copy_from(in);

  a.q.in = c.in_place ? want.view() : in.view();
  a.q.out = want.view();
  const std::string invalid = rotary::detail::check_call(a);
  if (!invalid.empty()) return "bad test shape: " + invalid;
  rotary::detail::scalar::rotate_tokens(a, 0, s.tokens);
  a.q.in = c.in_place ? got.view() : in.view();
  a.q.out = got.view();
  kernel(a, 0, s.tokens);

  const auto in_bytes = static_cast<std::size_t>(in.size()) * sizeof(T);
  if (!c.in_place && std::memcmp(in.all(), in_copy.all(), in_bytes) != 0)
    return "the kernel wrote to its (const) input";
  // Rotated coordinates: where the scalar kernel gives NaN, any NaN will do.
  std::vector<bool> rotated(static_cast<std::size_t>(got.size()), false);
  for (std::int64_t t = 0; t < s.tokens; ++t)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t j = 0; j < s.rotary_dim; ++j)
        rotated[static_cast<std::size_t>(Buffer<T>::kSlack + t * ol.token_stride + h * ol.head_stride + j)] =
            true;
  for (std::ptrdiff_t i = 0; i < got.size(); ++i) {
    const bool nan = rotated[static_cast<std::size_t>(i)] && is_nan(want.all()[i]);
    nans.nan_outputs += nan;
    if (to_bits(got.all()[i]) == to_bits(want.all()[i])) continue;
    if (nan && is_nan(got.all()[i])) {
      ++nans.other_payload;
      continue;
    }
    const std::ptrdiff_t v = i - Buffer<T>::kSlack;
    return "first difference at " + locate(v, ol, s) + ": got " + hex(got.all()[i]) + ", scalar " +
           hex(want.all()[i]);
  }
  // Equal to scalar; next, the contract itself: pass-through equals the input, nothing else written.
  std::vector<bool> in_rows(static_cast<std::size_t>(got.size()), false);
  for (std::int64_t t = 0; t < s.tokens; ++t)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::ptrdiff_t o = Buffer<T>::kSlack + t * ol.token_stride + h * ol.head_stride;
      const T* x = in_copy.view() + t * s.in.token_stride + h * s.in.head_stride;
      for (std::int64_t j = 0; j < s.head_dim; ++j) in_rows[static_cast<std::size_t>(o + j)] = true;
      for (std::int64_t j = s.rotary_dim; j < s.head_dim; ++j)
        if (to_bits(got.all()[o + j]) != to_bits(x[j]))
          return "pass-through differs from the input at " + locate(o + j - Buffer<T>::kSlack, ol, s);
    }
  if (!c.in_place)
    for (std::ptrdiff_t i = 0; i < got.size(); ++i)
      if (!in_rows[static_cast<std::size_t>(i)] && to_bits(got.all()[i]) != Bits<T>::sentinel)
        return "wrote outside the output rows at " + locate(i - Buffer<T>::kSlack, ol, s);
  return {};
}

class SimdVsScalar : public ::testing::TestWithParam<SimdCase> {};

template <class T>
// `kernel` overrides kernel_for(c.isa) (e.g. one of the two avx512 bf16 roundings), named `variant`.
void sweep(const SimdCase& c, Kernel<T> kernel = nullptr, const std::string& variant = "") {
  const std::string name = case_name(c) + variant;
  if (kernel == nullptr) kernel = kernel_for<T>(c.isa);
  ASSERT_NE(kernel, nullptr);
  const std::uint64_t seed = base_seed() ^ std::hash<std::string>{}(case_name(c));
  std::mt19937_64 rng(seed);
  int shapes = 0;
  NanStats nans;
  for (const std::int64_t head_dim : kHeadDims)
    for (const std::int64_t rotary_dim : rotary_dims(head_dim))
      for (const std::int64_t heads : kHeads)
        for (const std::int64_t tokens : kTokens) {
          Shape s{head_dim, rotary_dim, heads, tokens, {}, {}};
          s.in = random_layout(rng, tokens, heads, head_dim);
          s.out = random_layout(rng, tokens, heads, head_dim);
          const std::string failure = check_shape<T>(c, kernel, s, rng, nans);
          ++shapes;
          if (!failure.empty()) {
            ADD_FAILURE() << name << ": " << failure << "\n  shape: " << s.describe() << "\n  seed: 0x"
                          << std::hex << seed << std::dec << " " << rotary_test::seed_note();
            return;  // one report per test, not hundreds
          }
        }
  if (nans.nan_outputs == 0) {
    std::printf("[          ] %s: %d shapes bit-identical to scalar\n", name.c_str(), shapes);
  } else {
    std::printf(
        "[          ] %s: %d shapes bit-identical to scalar except NaN bits (%lld NaN outputs, %lld with "
        "other NaN bits)\n",
        name.c_str(), shapes, static_cast<long long>(nans.nan_outputs),
        static_cast<long long>(nans.other_payload));
  }
}

TEST_P(SimdVsScalar, BitExact) {
  const SimdCase c = GetParam();
  if (!rotary::isa_supported(c.isa))
    GTEST_SKIP() << "ISA " << rotary::to_string(c.isa) << " is not supported on this CPU/build";
  rotary_test::with_dtype(c.dtype, [&c](auto tag) {
    using T = typename decltype(tag)::type;
    // An ISA with named variants for T (the registry's: avx512 bf16 in each rounding) runs each of
    // them explicitly; the dispatched kernel is one of them.
    bool variants = false;
    for (const auto& v : rotary::detail::kernel_variants<T>()) {
      if (v.isa != c.isa || v.name == rotary::to_string(c.isa)) continue;
      variants = true;
      if (v.runs)
        sweep<T>(c, v.kernel, " (" + v.name + ")");
      else
        std::printf("[          ] %s: %s does not run on this CPU or build\n", case_name(c).c_str(), v.name.c_str());
    }
    if (!variants) sweep<T>(c);
  });
}

INSTANTIATE_TEST_SUITE_P(Kernels, SimdVsScalar, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<SimdCase>& p) { return case_name(p.param); });

// Guard pages: every kernel of the registry (named variants included) on rows packed up to a
// PROT_NONE page, against the scalar kernel's bits, is the "kernels" row of test_guard_pages' table.

// ---- f16/bf16 rounding --------------------------------------------------------------------------

// f32 values that probe a store's rounding: a sweep over the f32 bit patterns (every exponent), every
// bf16 tie (each upper half with low half 0x8000) and its neighbours, every f16 tie (the midpoint of
// each pair of adjacent finite f16 values, subnormals and the 65504 | 65536 overflow boundary
// included) and its f32 neighbours, both signs; f32 subnormals, infinities and NaNs among them.
std::vector<float> rounding_probes() {
  std::vector<std::uint32_t> u;
  for (std::uint64_t i = 0; i < (std::uint64_t{1} << 32); i += 4099)
    u.push_back(static_cast<std::uint32_t>(i));
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (const std::uint32_t lo : {0x7FFFu, 0x8000u, 0x8001u}) u.push_back(hi << 16 | lo);
  for (std::uint32_t h = 0; h < 0x7C00u; ++h) {
    const double a = rotary::detail::f16_bits_to_f32(static_cast<std::uint16_t>(h));
    const double b =
        h + 1 == 0x7C00u ? 65536.0 : rotary::detail::f16_bits_to_f32(static_cast<std::uint16_t>(h + 1));
    const std::uint32_t mid = rotary::detail::float_bits(static_cast<float>((a + b) / 2));  // exact
    for (const std::uint32_t sign : {0u, 0x80000000u})
      for (const std::uint32_t m : {mid - 1, mid, mid + 1}) u.push_back(sign | m);
  }
  for (const std::uint32_t special : {0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u,
                                      0x7F800001u, 0x7FA00000u, 0x7FC00000u, 0x7FFFFFFFu, 0x477FF000u})
    for (const std::uint32_t sign : {0u, 0x80000000u}) u.push_back(sign | special);
  std::vector<float> f(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) f[i] = rotary::detail::bits_float(u[i]);
  return f;
}

constexpr std::int64_t kProbeHalf = 64;  // probes per row

// Rotates the pairs x = (1, 0) with cos = probe and sin = 0 (half_split, cos/sin rows given through
// KernelArgs::rows): y0 = fma(1, c, -(0*0)) = c exactly and y1 = fma(0, c, 1*0), so the stores
// round exactly the probes. Row t holds probes [64t, 64t + 64) in its first half.
template <class T>
std::vector<T> round_through(Kernel<T> kernel, const std::vector<float>& probes) {
  const std::int64_t d = 2 * kProbeHalf;
  const auto n = static_cast<std::int64_t>(probes.size());
  const std::int64_t tokens = (n + kProbeHalf - 1) / kProbeHalf;
  std::vector<float> rows(static_cast<std::size_t>(tokens * d), 0.0f);
  for (std::int64_t i = 0; i < n; ++i)
    rows[static_cast<std::size_t>(i / kProbeHalf * d + i % kProbeHalf)] = probes[static_cast<std::size_t>(i)];
  std::vector<T> x(static_cast<std::size_t>(d));
  for (std::int64_t j = 0; j < d; ++j)
    x[static_cast<std::size_t>(j)] = rotary::detail::from_compute<T>(j < kProbeHalf ? 1.0f : 0.0f);
  std::vector<T> y(static_cast<std::size_t>(tokens * d));
  KernelArgs<T> a;
  a.tokens = tokens;
  a.head_dim = a.rotary_dim = d;
  a.pairing = Pairing::half_split;
  a.rows = rotary::detail::CosSinRows<float>::block(rows.data(), d, 0);
  a.q.heads = 1;
  a.q.in = x.data();
  a.q.in_token_stride = 0;  // every token rotates the same input row
  a.q.in_head_stride = d;
  a.q.out = y.data();
  a.q.out_token_stride = a.q.out_head_stride = d;
  kernel(a, 0, tokens);
  return y;
}

// The kernel's stores give convert.hpp's bits for every probe (NaN for NaN), and equal the scalar
// kernel everywhere else (y1) up to NaN bits. The kernel's output goes to `got`.
template <class T>
void check_rounding(const std::string& name, Kernel<T> kernel, const std::vector<float>& probes,
                    std::vector<T>& got) {
  const std::vector<T> want = round_through<T>(&rotary::detail::scalar::rotate_tokens<T>, probes);
  got = round_through<T>(kernel, probes);
  long long nans = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const auto row = static_cast<std::int64_t>(k) / (2 * kProbeHalf);
    const auto j = static_cast<std::int64_t>(k) % (2 * kProbeHalf);
    const auto i = static_cast<std::size_t>(row * kProbeHalf + j);
    if (j < kProbeHalf && i < probes.size()) {
      const float c = probes[i];
      if (rotary::detail::is_nan(c)) {
        ++nans;
        EXPECT_TRUE(is_nan(got[k]) && is_nan(want[k]))
            << name << ": NaN 0x" << std::hex << rotary::detail::float_bits(c);
        continue;
      }
      const auto expect = to_bits(rotary::detail::from_compute<T>(c));
      ASSERT_EQ(to_bits(want[k]), expect)
          << "scalar kernel, f32 0x" << std::hex << rotary::detail::float_bits(c);
      ASSERT_EQ(to_bits(got[k]), expect) << name << " rounds f32 " << hex(c) << " to 0x" << std::hex
                                         << to_bits(got[k]) << ", convert.hpp to 0x" << expect;
    } else if (is_nan(want[k])) {
      ASSERT_TRUE(is_nan(got[k])) << name << " at output " << k;
    } else {
      ASSERT_EQ(to_bits(got[k]), to_bits(want[k])) << name << " at output " << k;
    }
  }
  std::printf("[          ] %s: %zu f32 values rounded as convert.hpp rounds them (%lld NaN)\n", name.c_str(),
              probes.size(), nans);
}

template <class T>
void check_rounding_all_isas() {
  const std::vector<float> probes = rounding_probes();
  std::vector<T> got;
  int ran = 0;
  const std::string dtype(rotary::dtype_name<T>());
  for (const auto& v : rotary::detail::kernel_variants<T>()) {
    if (v.isa == Isa::scalar || !v.runs) continue;
    check_rounding<T>(dtype + "." + v.name, v.kernel, probes, got);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no SIMD ISA is supported on this CPU/build";
}

TEST(SimdRounding, F16StoresRoundLikeConvertHpp) { check_rounding_all_isas<rotary::f16>(); }
TEST(SimdRounding, Bf16StoresRoundLikeConvertHpp) { check_rounding_all_isas<rotary::bf16>(); }

// ---- rows asked for ahead -----------------------------------------------------------------------

// Which calls ask for rows ahead (KernelArgs::prefetch): 16-bit rows beyond the caches, gapped rows
// (rotate_stream) or rows that follow on (rotate_registers).
TEST(PrefetchRows, Only16BitRowsBeyondTheCaches) {
  using rotary::detail::Ahead;
  using rotary::detail::prefetch_pays;
  using B = rotary::bf16;
  const rotary::detail::RowSpan none{0, 0, 0};
  // DeepSeek's 64-value rope slices of 128 heads x 192: 512 tokens (25 MB) yes, 16 (0.8 MB) no
  EXPECT_EQ((prefetch_pays<B>(512, 64, {128, 128 * 192, 192}, none)), Ahead::gapped);
  EXPECT_EQ((prefetch_pays<B>(16, 64, {128, 128 * 192, 192}, none)), Ahead::none);
  EXPECT_EQ((prefetch_pays<float>(512, 64, {128, 128 * 192, 192}, none)), Ahead::none);  // f32: never
  EXPECT_EQ((prefetch_pays<float>(8192, 128, {32, 32 * 128, 128}, none)), Ahead::none);
  // contiguous [T, 32, 128] rows from 8 MiB on (1024 tokens), q and k or k alone; not below
  EXPECT_EQ((prefetch_pays<B>(8192, 128, {32, 32 * 128, 128}, {8, 8 * 128, 128})), Ahead::contiguous);
  EXPECT_EQ((prefetch_pays<B>(1024, 128, {32, 32 * 128, 128}, none)), Ahead::contiguous);
  EXPECT_EQ((prefetch_pays<B>(1000, 128, {32, 32 * 128, 128}, none)), Ahead::none);
  EXPECT_EQ((prefetch_pays<rotary::f16>(8192, 128, none, {8, 8 * 128, 128})), Ahead::contiguous);
  EXPECT_EQ((prefetch_pays<B>(512, 128, {32, 32 * 128, 128}, {8, 8 * 128, 128})), Ahead::none);
  // half of each 128-value head rotated (one line skipped per bf16 row), k's rows gapped, q's not
  EXPECT_EQ((prefetch_pays<B>(512, 64, {32, 32 * 128, 128}, none)), Ahead::gapped);
  EXPECT_EQ((prefetch_pays<B>(512, 128, {32, 32 * 128, 128}, {8, 8 * 256, 256})), Ahead::gapped);
  // a gap shorter than a line does not count: such rows still follow on
  EXPECT_EQ((prefetch_pays<B>(2048, 128, {32, 32 * 144, 144}, none)), Ahead::contiguous);
  EXPECT_EQ((prefetch_pays<B>(512, 128, {32, 32 * 144, 144}, none)), Ahead::none);
  // rows that do not follow on token after token (a padded token stride; one head per token with most
  // of each token unread): left to the hardware
  EXPECT_EQ((prefetch_pays<B>(512, 128, {32, 33 * 128, 128}, none)), Ahead::none);
  EXPECT_EQ((prefetch_pays<B>(100000, 64, {1, 576, 576}, none)), Ahead::none);
  // the driver asks before it validates: any int64 values, without overflow (UBSan halts on one)
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ((prefetch_pays<B>(kMax, 64, {kMax, kMin, kMin}, {kMax, kMax, kMax})), Ahead::gapped);
  EXPECT_EQ((prefetch_pays<B>(kMin, kMin, {kMin, kMin, kMin}, none)), Ahead::none);
  // at the span threshold (1 MiB): 2 gapped heads of 64 rotated values a token, 512 (n + 1) bytes for
  // n tokens, whichever way the strides run: small calls decide in integers (small_span), exactly
  EXPECT_EQ((prefetch_pays<B>(2047, 64, {2, 256, 128}, none)), Ahead::gapped);
  EXPECT_EQ((prefetch_pays<B>(2046, 64, {2, 256, 128}, none)), Ahead::none);
  EXPECT_EQ((prefetch_pays<B>(2047, 64, none, {2, -256, -128})), Ahead::gapped);
  EXPECT_EQ((prefetch_pays<B>(2046, 64, none, {2, -256, -128})), Ahead::none);
}

// small_span: the elements q and k span, exact in integers while every value lies within
// (-2^30, 2^30); -1 (the double estimate's turn) from there on.
TEST(PrefetchRows, SmallSpanIsExactWithinItsBounds) {
  using rotary::detail::small_span;
  const rotary::detail::RowSpan none{0, 0, 0};
  constexpr std::int64_t kEdge = (std::int64_t{1} << 30) - 1;
  EXPECT_EQ(small_span(2047, {2, 256, 128}, none), 256 * 2048);
  EXPECT_EQ(small_span(2047, {2, -256, -128}, {8, 8 * 128, 128}), 256 * 2048 + 2047 * 8 * 128 + 8 * 128);
  EXPECT_EQ(small_span(0, {32, 4096, 128}, none), 0);
  EXPECT_EQ(small_span(5, {0, 4096, 128}, none), 0);  // no heads: nothing read
  EXPECT_EQ(small_span(kEdge, {kEdge, -kEdge, kEdge}, {kEdge, kEdge, -kEdge}), 4 * kEdge * kEdge);
  EXPECT_EQ(small_span(kEdge + 1, {1, 1, 1}, none), -1);
  EXPECT_EQ(small_span(1, {1, -kEdge - 1, 1}, none), -1);
  EXPECT_EQ(small_span(1, none, {kEdge + 1, 1, 1}), -1);
  EXPECT_EQ(small_span(1, none, {1, 1, std::numeric_limits<std::int64_t>::min()}), -1);
}

// apply_strided(rope of rotary_dim, x + offset, l) in place under every ISA from the same random
// start, x (n values) ending at a guard page: every ISA gives the scalar kernel's bits, and more than
// min_moved values change.
template <class T>
void check_strided_rows_at_guard_page(Pairing pairing, std::size_t n, std::int64_t rotary_dim, std::int64_t offset,
                                      const rotary::StridedLayout& l, std::uint64_t seed, std::size_t min_moved) {
  rotary_test::GuardedBuffer<T> x(n, rotary_test::Flush::end);
  std::mt19937_64 rng(base_seed() ^ seed);
  std::vector<T> start(n);
  for (T& v : start) v = T(static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-50 - 4.0));
  const rotary::Rope<T> r(rotary::RotarySpec(rotary_dim, pairing), 4096);
  const auto pos = rotary::Positions::contiguous(3000);
  std::vector<T> want;
  for (const Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (!rotary::isa_supported(isa)) continue;
    IsaScope scope(isa);
    std::copy(start.begin(), start.end(), x.data());
    rotary::apply_strided(r, x.data() + offset, l, pos);
    if (isa == Isa::scalar) {
      want.assign(x.data(), x.data() + n);
      continue;
    }
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += to_bits(x.data()[i]) != to_bits(want[i]) ? 1 : 0;
    EXPECT_EQ(differ, 0u) << rotary::to_string(isa) << " " << rotary::to_string(pairing);
  }
  std::size_t moved = 0;
  for (std::size_t i = 0; i < n; ++i) moved += to_bits(want[i]) != to_bits(start[i]) ? 1 : 0;
  EXPECT_GT(moved, min_moved);
}

// 16-bit rope slices of 2.4 MB take rotate_stream with rows asked for 16 ahead: the last rows' hints
// point past the tensor, which ends at a guard page, and must not fault; every ISA gives the scalar
// kernel's bits.
template <class T>
void check_prefetched_rows(Pairing pairing) {
  const std::int64_t tokens = 96, heads = 64, nope = 128, rope = 64, d = nope + rope;
  const auto n = static_cast<std::size_t>(tokens * heads * d);
  ASSERT_EQ((rotary::detail::prefetch_pays<T>(tokens, rope, {heads, heads * d, d}, {0, 0, 0})),
            rotary::detail::Ahead::gapped);
  // the slices were rotated (a third of the values)
  check_strided_rows_at_guard_page<T>(pairing, n, rope, nope, {tokens, heads, heads * d, d}, 0x5eedu, n / 4);
}

TEST(PrefetchRows, Bf16SlicesMatchScalarAtTheGuardPage) {
  check_prefetched_rows<rotary::bf16>(Pairing::half_split);
  check_prefetched_rows<rotary::bf16>(Pairing::interleaved);
}
TEST(PrefetchRows, F16SlicesMatchScalarAtTheGuardPage) {
  check_prefetched_rows<rotary::f16>(Pairing::half_split);
  check_prefetched_rows<rotary::f16>(Pairing::interleaved);
}

// Contiguous 16-bit [T, H, D] rows of 8.1 MiB stay in rotate_registers and ask for the row 16 on
// before each row: q and k (GQA) in place, both ending at guard pages, so the last rows' hints
// point past the tensors; every ISA gives the scalar kernel's bits.
template <class T>
void check_prefetched_contiguous_rows(Pairing pairing) {
  const std::int64_t tokens = 830, q_heads = 32, kv_heads = 8, d = 128;
  const auto nq = static_cast<std::size_t>(tokens * q_heads * d);
  const auto nk = static_cast<std::size_t>(tokens * kv_heads * d);
  ASSERT_EQ((rotary::detail::prefetch_pays<T>(tokens, d, {q_heads, q_heads * d, d}, {kv_heads, kv_heads * d, d})),
            rotary::detail::Ahead::contiguous);
  rotary_test::GuardedBuffer<T> q(nq, rotary_test::Flush::end);
  rotary_test::GuardedBuffer<T> k(nk, rotary_test::Flush::end);
  std::mt19937_64 rng(base_seed() ^ 0xa4eadu);
  std::vector<T> start(nq + nk);
  for (T& v : start) v = T(static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-50 - 4.0));
  const rotary::Rope<T> r(rotary::RotarySpec(d, pairing), 4096);
  const rotary::StridedLayout ql{tokens, q_heads, q_heads * d, d};
  const rotary::StridedLayout kl{tokens, kv_heads, kv_heads * d, d};
  const auto pos = rotary::Positions::contiguous(2000);
  std::vector<T> want;
  for (const Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (!rotary::isa_supported(isa)) continue;
    IsaScope scope(isa);
    std::copy(start.begin(), start.begin() + static_cast<std::ptrdiff_t>(nq), q.data());
    std::copy(start.begin() + static_cast<std::ptrdiff_t>(nq), start.end(), k.data());
    rotary::apply_qk_strided(r, q.data(), ql, q.data(), ql, k.data(), kl, k.data(), kl, pos);
    std::vector<T> got(q.data(), q.data() + nq);
    got.insert(got.end(), k.data(), k.data() + nk);
    if (isa == Isa::scalar) {
      want = got;
      continue;
    }
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += to_bits(got[i]) != to_bits(want[i]) ? 1 : 0;
    EXPECT_EQ(differ, 0u) << rotary::to_string(isa) << " " << rotary::to_string(pairing);
  }
  std::size_t moved = 0;
  for (std::size_t i = 0; i < want.size(); ++i) moved += to_bits(want[i]) != to_bits(start[i]) ? 1 : 0;
  EXPECT_GT(moved, want.size() / 2);
}

TEST(PrefetchRows, Bf16ContiguousRowsMatchScalarAtTheGuardPage) {
  check_prefetched_contiguous_rows<rotary::bf16>(Pairing::half_split);
  check_prefetched_contiguous_rows<rotary::bf16>(Pairing::interleaved);
}
TEST(PrefetchRows, F16ContiguousRowsMatchScalarAtTheGuardPage) {
  check_prefetched_contiguous_rows<rotary::f16>(Pairing::half_split);
  check_prefetched_contiguous_rows<rotary::f16>(Pairing::interleaved);
}

// BHSD rows ([heads, tokens, D] per sequence) are a head stride apart, which prefetch_pays calls
// gapped, but the driver walks them head by head (run_tokens), where each head's rows follow on
// token after token: those are not asked for ahead (rows_follow_on); rows with a line or more unread
// between one token's and the next's still are.
TEST(PrefetchRows, HeadMajorRowsThatFollowOn) {
  using B = rotary::bf16;
  using rotary::detail::rows_follow_on;
  const std::int64_t tokens = 512, heads = 32, d = 128;
  ASSERT_EQ((rotary::detail::prefetch_pays<B>(tokens, d, {heads, d, tokens * d}, {0, 0, 0})),
            rotary::detail::Ahead::gapped);
  std::vector<B> buf(1);
  const auto stream = [&](std::int64_t token_stride, std::int64_t head_stride) {
    const rotary::StridedLayout l{tokens, heads, token_stride, head_stride};
    return rotary::detail::make_stream(static_cast<const B*>(buf.data()), l, buf.data(), l);
  };
  EXPECT_TRUE(rows_follow_on(stream(d, tokens * d), d));                     // BHSD
  EXPECT_TRUE(rows_follow_on(stream(d + 16, tokens * (d + 16)), d));         // 32 bytes unread
  EXPECT_FALSE(rows_follow_on(stream(d + 32, tokens * (d + 32)), d));        // a line unread
  EXPECT_FALSE(rows_follow_on(stream(d, tokens * d), d / 2));                // half of each row rotated
  EXPECT_FALSE(rows_follow_on(stream(heads * d, d), d));                     // BSHD: a token's heads between
}

// 16-bit BHSD rows of 2 MiB (gapped by prefetch_pays, walked head by head without the hint) in place,
// ending at a guard page: every ISA gives the scalar kernel's bits.
template <class T>
void check_head_major_rows(Pairing pairing) {
  const std::int64_t tokens = 256, heads = 32, d = 128;
  const auto n = static_cast<std::size_t>(tokens * heads * d);
  ASSERT_EQ((rotary::detail::prefetch_pays<T>(tokens, d, {heads, d, tokens * d}, {0, 0, 0})),
            rotary::detail::Ahead::gapped);
  check_strided_rows_at_guard_page<T>(pairing, n, d, 0, {tokens, heads, d, tokens * d}, 0xb45du, n / 2);
}

TEST(PrefetchRows, Bf16HeadMajorRowsMatchScalarAtTheGuardPage) {
  check_head_major_rows<rotary::bf16>(Pairing::half_split);
  check_head_major_rows<rotary::bf16>(Pairing::interleaved);
}
TEST(PrefetchRows, F16HeadMajorRowsMatchScalarAtTheGuardPage) {
  check_head_major_rows<rotary::f16>(Pairing::half_split);
  check_head_major_rows<rotary::f16>(Pairing::interleaved);
}

// AVX512_BF16's vcvtneps2bf16 against the integer rounding the other bf16 kernels use: the same bits
// for every probe, NaN payloads included (both compute (u >> 16) | 0x40), and for the bit-exact sweep
// and guard-page shapes (run for both in SimdVsScalar.*bf16_avx512* and test_guard_pages' kernels row).
TEST(SimdRounding, Bf16HardwareMatchesIntegerRounding) {
#if ROTARY_AVX512_BF16_KERNELS
  if (!rotary::isa_supported(Isa::avx512) || !rotary::detail::avx512::bf16_hardware_rounding())
    GTEST_SKIP() << "this CPU has no AVX-512 with AVX512_BF16";
  const std::vector<float> probes = rounding_probes();
  std::vector<rotary::bf16> hw;
  std::vector<rotary::bf16> integer;
  check_rounding<rotary::bf16>("bf16.avx512 (vcvtneps2bf16)",
                               &rotary::detail::avx512::rotate_tokens_bf16_hardware, probes, hw);
  check_rounding<rotary::bf16>("bf16.avx512 (integer rounding)",
                               &rotary::detail::avx512::rotate_tokens_bf16_integer, probes, integer);
  if (HasFatalFailure()) return;
  ASSERT_EQ(hw.size(), integer.size());
  for (std::size_t k = 0; k < hw.size(); ++k)
    ASSERT_EQ(to_bits(hw[k]), to_bits(integer[k])) << "output " << k;
  // The entry point picks the hardware rounding here.
  const std::vector<rotary::bf16> entry =
      round_through<rotary::bf16>(kernel_for<rotary::bf16>(Isa::avx512), probes);
  EXPECT_EQ(0, std::memcmp(entry.data(), hw.data(), hw.size() * sizeof(rotary::bf16)));
#else
  GTEST_SKIP() << "this compiler has no avx512bf16 target";
#endif
}

}  // namespace
