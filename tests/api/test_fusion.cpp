// Fused attention prologues (fusion.hpp, kv_cache.hpp).
// - Every fused op equals, bit for bit, rotary's unfused ops run one after another (rms_norm,
//   apply_strided, rms_norm weightless, write_kv_cache): q outputs, every byte of the K and V caches
//   (untouched slots keep their bytes) and the int8 scales; for f32/f16/bf16/f64 vectors x cache
//   f32/f16/bf16/int8/fp8 (f64: f64/f32 caches), both pairings, partial rotary, the four cache layouts,
//   slot mappings with padding and per-sequence offsets, every norm variant, a cache-free Rope, one
//   and two threads, on every ISA this machine runs (the composition is computed once, on scalar).
// - Independent references: QK-norm + RoPE against the explicit rotation matrix R(m) applied to the
//   norm computed in double (bound stated below); the fp8 encoder against a nearest-value search over
//   all 256 codes; int8 rows against vLLM's formula (scale = absmax / 127, codes round-half-even
//   of x * (127.0f / absmax) in f32), and against double for rows whose f32 multiplier overflows.
// - The cache row kernels (int8, fp8, f16, bf16 codes): every ISA's bytes and int8 scales equal the
//   scalar kernel's, rows of 1..512 values (every SIMD tail), unaligned, ties, boundaries, subnormals,
//   NaN, infinities, random bits; nothing written past a row.
// - MLA: against an interleaved Rope followed by the de-interleaving permutation; the latent and
//   k_pe side by side in one slot row. QKV split: against the same call on separate q, k, v copies.
// - Refusals: slots outside the cache or twice, sequence overflow, scales missing or given, fp8
//   scale <= 0, shapes, head_dim, caches sharing memory with the vectors or each other, eps, weights,
//   deinterleave with an interleaved rotator, xPos keys, slot values inside the cache they place rows
//   in (the unfused write too). fp8's scales (only read) may share memory with inputs and weights.
// - Two caches in one buffer: the check of whether their rows meet against a byte-level overlap of
//   thousands of random view pairs; interleaved caches of 2^40 blocks or 2^30 slots decided without
//   walking them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <rotary/rotary.hpp>

#include "support.hpp"

namespace {

using rotary::fp8_e4m3;
using rotary::HeadNorm;
using rotary::KvCacheView;
using rotary::NormWeight;
using rotary::Pairing;
using rotary::Positions;
using rotary::Prologue;
using rotary::Slots;
using rotary::StridedLayout;

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  // memcmp's pointers must be non-null even for zero bytes; an empty vector's data() may be null.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---- fp8 and int8 rounding -----------------------------------------------------------------------

// The nearest finite e4m3 value by search (ties to the even code), saturating; NaN for NaN.
std::uint8_t fp8_by_search(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  const double a = std::fabs(static_cast<double>(x));
  std::uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double v = static_cast<double>(rotary::to_float(fp8_e4m3{static_cast<std::uint8_t>(c)}));
    const double d = std::fabs(v - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best_d = d;
      best = static_cast<std::uint8_t>(c);
    }
  }
  if (a >= 448.0) best = 0x7e;
  return static_cast<std::uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8E4m3, DecodesEveryCodeAndEncodesItBack) {
  for (int c = 0; c < 256; ++c) {
    const fp8_e4m3 v{static_cast<std::uint8_t>(c)};
    const float f = rotary::to_float(v);
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    const int e = (c >> 3) & 15;
    const int m = c & 7;
    const double expect = (e == 0 ? m / 512.0 : std::ldexp(1.0 + m / 8.0, e - 7)) * ((c & 0x80) ? -1 : 1);
    EXPECT_EQ(static_cast<double>(f), expect) << c;
    EXPECT_EQ(rotary::to_fp8_e4m3(f).bits, c) << c;
  }
}

TEST(Fp8E4m3, RoundsToNearestEvenAndSaturates) {
  struct Case {
    float x;
    std::uint8_t bits;
  };
  const Case cases[] = {
      {448.0f, 0x7e},  {449.0f, 0x7e},   {464.0f, 0x7e},    {1e30f, 0x7e}, {std::numeric_limits<float>::infinity(), 0x7e},
      {-std::numeric_limits<float>::infinity(), 0xfe},     {2.125f, 0x40}, {2.375f, 0x42},  // ties to even
      {std::ldexp(1.0f, -10), 0x00}, {std::ldexp(3.0f, -10), 0x02},    // subnormal ties
      {std::ldexp(1.0f, -6), 0x08},  {std::ldexp(15.5f, -10), 0x08},   // to the smallest normal
      {-0.0f, 0x80},   {std::numeric_limits<float>::quiet_NaN(), 0x7f}, {std::ldexp(1.0f, -12), 0x00}};
  for (const Case& c : cases) EXPECT_EQ(rotary::to_fp8_e4m3(c.x).bits, c.bits) << c.x;
  std::mt19937_64 rng(rotary_test::seed());
  std::uniform_real_distribution<double> exponent(-13.0, 10.0);
  for (int i = 0; i < 20000; ++i) {
    const auto x = static_cast<float>(std::exp2(exponent(rng)) * (i % 2 ? -1.0 : 1.0));
    ASSERT_EQ(rotary::to_fp8_e4m3(x).bits, fp8_by_search(x)) << x << " " << rotary_test::seed_note();
  }
}

// The scalar cache row kernel: the definition the other ISAs' must equal (CacheRowKernels below).
const rotary::detail::CacheRowKernel<float> kScalarRow = &rotary::detail::scalar::cache_row<float>;

TEST(Int8Rows, ScaleIsAbsmaxOver127AndRoundingIsHalfEven) {
  const std::vector<float> row = {1.0f, -127.0f, 63.5f, 64.5f, -0.5f, 0.0f, 126.4f, 2.5f};
  std::vector<std::int8_t> out(row.size());
  float scale = -1.0f;
  rotary::detail::store_row(out.data(), row.data(), 8, &scale, 1.0f, kScalarRow);
  EXPECT_EQ(scale, 1.0f);  // absmax 127
  const std::vector<std::int8_t> expect = {1, -127, 64, 64, 0, 0, 126, 2};
  EXPECT_EQ(out, expect);
  std::mt19937_64 rng(rotary_test::seed());
  for (int trial = 0; trial < 200; ++trial) {
    const auto x = rotary_test::random_vector<float>(64, rng, -3.0, 3.0);
    out.resize(64);
    rotary::detail::store_row(out.data(), x.data(), 64, &scale, 1.0f, kScalarRow);
    double absmax = 0.0;
    for (float v : x) absmax = std::max(absmax, std::fabs(static_cast<double>(v)));
    ASSERT_EQ(scale, static_cast<float>(absmax / 127.0));
    // vLLM's dynamic_scaled_int8_quant: 127.0f / absmax and the product in f32, then cvt.rni
    volatile float inv = 127.0f / static_cast<float>(absmax);
    for (std::size_t i = 0; i < 64; ++i) {
      volatile float product = x[i] * inv;
      const float q = std::nearbyint(static_cast<float>(product));  // default mode: half even
      ASSERT_EQ(out[i], static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f))) << i;
      // half a code, plus the f32 multiplier's and product's roundings (127 * 2^-23 codes at most)
      ASSERT_LE(std::fabs(out[i] * static_cast<double>(scale) - x[i]), (0.5 + 2e-5) * scale);
    }
  }
  out.assign(4, 9);
  const std::vector<float> zeros(4, 0.0f);
  rotary::detail::store_row(out.data(), zeros.data(), 4, &scale, 1.0f, kScalarRow);
  EXPECT_EQ(scale, 0.0f);
  EXPECT_EQ(out, std::vector<std::int8_t>(4, 0));
  // A subnormal absmax: 127 / absmax overflows f32, so these rows are scaled in double.
  const float d = std::numeric_limits<float>::denorm_min();
  const std::vector<float> tiny = {d, -d, 0.0f, 2 * d};
  rotary::detail::store_row(out.data(), tiny.data(), 4, &scale, 1.0f, kScalarRow);
  EXPECT_EQ(out, (std::vector<std::int8_t>{64, -64, 0, 127}));  // 63.5 rounds to even
  const std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 3.0f};
  rotary::detail::store_row(out.data(), bad.data(), 4, &scale, 1.0f, kScalarRow);
  EXPECT_TRUE(std::isnan(scale));  // the row dequantizes to NaN, never to plausible numbers
}

// The f32 multiplier's edge: rows just above absmax = 127 / FLT_MAX take the f32 formula, rows just
// below it the double one (where 127.0f / absmax would be +Inf and x * Inf would make every code
// +-127); both give codes within half a code of x / scale.
TEST(Int8Rows, MultiplierOverflowEdgeAndF32Ties) {
  const float edge = static_cast<float>(127.0 / static_cast<double>(std::numeric_limits<float>::max()));
  std::vector<std::int8_t> out(4);
  float scale = 0.0f;
  for (const float absmax : {std::nextafter(edge, 0.0f), edge, std::nextafter(edge, 1.0f), 1e-38f, 1e-40f}) {
    const std::vector<float> row = {absmax, -absmax * 0.25f, absmax * 0.5f, 0.0f};
    rotary::detail::store_row(out.data(), row.data(), 4, &scale, 1.0f, kScalarRow);
    const double s = static_cast<double>(absmax) / 127.0;
    for (std::size_t i = 0; i < 4; ++i) {
      const double exact = static_cast<double>(row[i]) / s;
      EXPECT_LE(std::fabs(out[i] - exact), 0.5 + 1e-4) << absmax << " " << i;
    }
    EXPECT_EQ(out[0], 127) << absmax;
    EXPECT_EQ(out[3], 0) << absmax;
  }
  // Values within an f32 rounding of k + 0.5 codes (found by search): the code is cvt.rni of fl(x * inv)
  // in f32, which here differs from rounding x * (127 / absmax) in double by one.
  struct Tie {
    float absmax, x;
    std::int8_t code;
  };
  const Tie ties[] = {{0x1.b14b94p-5f, 0x1.a3a5eap-6f, 62}, {0x1.eff214p-3f, 0x1.6b2c3cp-4f, 46},
                      {0x1.7818bcp+2f, 0x1.98ac04p+0f, 34}, {0x1.9efadcp+2f, 0x1.e054cp+1f, 74},
                      {0x1.e49b62p+1f, 0x1.e86c3cp-7f, 0},  {0x1.07263ap-1f, 0x1.c1a214p-2f, 108}};
  for (const Tie& t : ties) {
    const std::vector<float> row = {t.absmax, t.x, -t.x, 0.0f};
    rotary::detail::store_row(out.data(), row.data(), 4, &scale, 1.0f, kScalarRow);
    volatile float inv = 127.0f / t.absmax;  // volatile: the reference keeps its roundings under any flags
    volatile float product = t.x * inv;
    EXPECT_EQ(out[1], t.code) << t.x;
    EXPECT_EQ(out[2], -t.code) << t.x;
    EXPECT_EQ(out[1], static_cast<std::int8_t>(std::nearbyint(static_cast<float>(product)))) << t.x;
    EXPECT_NE(static_cast<double>(t.code), std::nearbyint(static_cast<double>(t.x) * (127.0 / t.absmax))) << t.x;
  }
}

// ---- the cache row kernels ------------------------------------------------------------------------

// Rows of T for the cache row kernels: random values over 40 binades, the int8 and fp8 ties, the
// fp8 saturation and subnormal boundaries, f32 subnormals, zeros of both signs, infinities, NaN.
template <class T>
std::vector<std::vector<T>> cache_test_rows(std::int64_t n, std::mt19937_64& rng) {
  std::vector<std::vector<float>> rows;
  rows.reserve(16);
  std::uniform_real_distribution<double> binade(-20.0, 20.0);
  std::uniform_int_distribution<int> code(0, 0x7e);
  for (int r = 0; r < 6; ++r) {
    std::vector<float> x(static_cast<std::size_t>(n));
    const double top = std::exp2(binade(rng));
    for (auto& v : x) v = static_cast<float>(std::uniform_real_distribution<double>(-top, top)(rng));
    rows.push_back(x);
  }
  // int8 ties: absmax 127, so inv = 1 and k + 0.5 rounds to even
  std::vector<float> ties(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ties[static_cast<std::size_t>(i)] = static_cast<float>((i % 254) - 127) + (i % 3 ? 0.5f : 0.0f);
  ties[0] = 127.0f;
  rows.push_back(ties);
  // fp8: codes, the midpoints between neighbouring codes (ties), and the boundaries
  std::vector<float> fp8(static_cast<std::size_t>(n));
  const float specials[] = {448.0f, 464.0f, 465.0f, 480.0f, 1e30f, 0.015625f, 0.0146484375f, 0.001953125f,
                            0.0009765625f, 0.00097656f, 0.0029296875f, 1e-40f, -0.0f, 0.0f};
  for (std::int64_t i = 0; i < n; ++i) {
    const int c = code(rng);
    const float lo = rotary::to_float(fp8_e4m3{static_cast<std::uint8_t>(c)});
    const float hi = rotary::to_float(fp8_e4m3{static_cast<std::uint8_t>(c + 1)});
    float v = i % 3 == 0 ? lo : i % 3 == 1 ? (lo + hi) / 2 : specials[static_cast<std::size_t>(i) % std::size(specials)];
    fp8[static_cast<std::size_t>(i)] = i % 2 ? -v : v;
  }
  rows.push_back(fp8);
  // a subnormal absmax; a NaN; an infinity; all zeros (negative)
  std::vector<float> tiny(static_cast<std::size_t>(n), std::numeric_limits<float>::denorm_min());
  tiny[static_cast<std::size_t>(n / 2)] = -3 * std::numeric_limits<float>::denorm_min();
  rows.push_back(tiny);
  for (const float special : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), -0.0f}) {
    std::vector<float> x = rows[0];
    if (special == 0.0f) std::fill(x.begin(), x.end(), special);
    else x[static_cast<std::size_t>(n - 1)] = special;  // the last value: the SIMD tail or its last vector
    rows.push_back(x);
  }
  // random bit patterns (NaN payloads, subnormals, huge values)
  std::vector<float> bits(static_cast<std::size_t>(n));
  for (auto& v : bits) v = rotary::detail::bits_float(static_cast<std::uint32_t>(rng()));
  rows.push_back(bits);
  std::vector<std::vector<T>> out(rows.size(), std::vector<T>(static_cast<std::size_t>(n)));
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t i = 0; i < rows[r].size(); ++i) out[r][i] = rotary::detail::from_compute<T>(rows[r][i]);
  return out;
}

// Every ISA's cache row kernel gives the scalar kernel's bytes and int8 scales, for every code, row
// lengths around the vector widths (SIMD tails), unaligned rows, and no byte written past the row.
template <class T>
void check_cache_row_kernels(std::mt19937_64& rng) {
  using rotary::detail::CacheCode;
  using rotary::detail::CacheRowArgs;
  const std::pair<CacheCode, std::size_t> codes[] = {
      {CacheCode::int8, 1}, {CacheCode::fp8_e4m3, 1}, {CacheCode::f16, 2}, {CacheCode::bf16, 2}};
  for (const std::int64_t n : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 128, 130, 256, 512}) {
    for (const auto& row : cache_test_rows<T>(n, rng)) {
      std::vector<T> in(row.size() + 1);
      std::copy(row.begin(), row.end(), in.begin() + 1);  // unaligned
      for (const auto& [code, bytes] : codes) {
        for (const float inv_scale : {1.0f, 37.5f, 0.0123f}) {
          if (code != CacheCode::fp8_e4m3 && inv_scale != 1.0f) continue;
          SCOPED_TRACE(::testing::Message() << rotary::dtype_name<T>() << " code " << static_cast<int>(code) << " n "
                                            << n << " inv_scale " << inv_scale << " " << rotary_test::seed_note());
          const std::size_t size = static_cast<std::size_t>(n) * bytes;
          std::vector<unsigned char> ref(size + 64, 0xA5);
          float ref_scale = -7.0f;
          CacheRowArgs<T> a;
          a.in = in.data() + 1;
          a.n = n;
          a.code = code;
          a.inv_scale = inv_scale;
          a.out = ref.data() + bytes;  // one element in: unaligned for SIMD, aligned for the element type
          a.scale = &ref_scale;
          rotary::detail::scalar::cache_row<T>(a);
          for (const rotary::Isa isa : rotary_test::supported_isas()) {
            const rotary::detail::CacheRowKernel<T> k = rotary::detail::cache_row_kernel_for<T>(isa);
            ASSERT_NE(k, nullptr);
            std::vector<unsigned char> got(size + 64, 0xA5);
            float scale = -7.0f;
            a.out = got.data() + bytes;
            a.scale = &scale;
            k(a);
            ASSERT_EQ(got, ref) << rotary::to_string(isa);  // bytes past the row too: still 0xA5
            if (code == CacheCode::int8) {
              ASSERT_EQ(rotary::detail::float_bits(scale), rotary::detail::float_bits(ref_scale)) << rotary::to_string(isa);
            } else {
              ASSERT_EQ(scale, -7.0f) << rotary::to_string(isa);  // only int8 writes a scale
            }
          }
        }
      }
    }
  }
}

TEST(CacheRowKernels, EveryIsaGivesTheScalarBits) {
  std::mt19937_64 rng(rotary_test::seed() + 11);
  check_cache_row_kernels<float>(rng);
  check_cache_row_kernels<rotary::f16>(rng);
  check_cache_row_kernels<rotary::bf16>(rng);
}

// The scalar kernel's fp8 codes against the nearest-value search (the definition's independent
// check) for f32 values around every code and midpoint, scaled: x * inv_scale rounded once in f32.
TEST(CacheRowKernels, Fp8RowsAreTheNearestCodeOfTheScaledValue) {
  std::mt19937_64 rng(rotary_test::seed() + 13);
  const auto rows = cache_test_rows<float>(130, rng);
  for (const float inv_scale : {1.0f, 37.5f, 0.0123f}) {
    for (const auto& row : rows) {
      std::vector<std::uint8_t> out(row.size());
      rotary::detail::CacheRowArgs<float> a;
      a.in = row.data();
      a.n = static_cast<std::int64_t>(row.size());
      a.code = rotary::detail::CacheCode::fp8_e4m3;
      a.inv_scale = inv_scale;
      a.out = out.data();
      rotary::detail::scalar::cache_row<float>(a);
      for (std::size_t i = 0; i < row.size(); ++i) {
        const float y = row[i] * inv_scale;
        if (std::isnan(y)) {
          ASSERT_EQ(out[i] & 0x7f, 0x7f) << row[i];
        } else {
          ASSERT_EQ(out[i], fp8_by_search(std::clamp(y, -448.0f, 448.0f))) << row[i] << " * " << inv_scale;
        }
      }
    }
  }
}

// ---- the norm kernels ---------------------------------------------------------------------------

// Every ISA's norm_rows gives the scalar kernel's bits (row lengths with and without the register
// form and the scalar tail, unaligned rows, with and without weights, out of place and in place,
// 11 rows: batches of 4 and the rows left over), and the scalar kernel is
// within 4 ulp(compute type) of x / sqrt(mean(x^2) + eps) * w computed in double (relative to the
// row's largest |x * factor * w|, plus half an ulp of the storage type).
template <class T>
void check_norm_kernels(std::mt19937_64& rng) {
  using C = rotary::compute_t<T>;
  for (const std::int64_t n : {1, 2, 7, 16, 17, 33, 64, 80, 100, 128, 130, 200, 256, 300}) {
    SCOPED_TRACE(::testing::Message() << rotary::dtype_name<T>() << " n " << n << " " << rotary_test::seed_note());
    const std::int64_t rows = 11;
    const std::int64_t stride = n + 3;  // rows start unaligned
    const auto x = rotary_test::random_vector<T>(static_cast<std::size_t>(rows * stride + 1), rng, -4.0, 4.0);
    std::vector<C> w(static_cast<std::size_t>(n));
    for (auto& v : w) v = static_cast<C>(std::uniform_real_distribution<double>(-2.0, 2.0)(rng));
    for (const bool weighted : {false, true}) {
      rotary::detail::NormArgs<T> a;
      a.in = x.data() + 1;
      a.in_stride = stride;
      a.rows = rows;
      a.n = n;
      a.weight = weighted ? w.data() : nullptr;
      a.eps = 1e-6;
      a.inv_n = 1.0 / static_cast<double>(n);
      std::vector<T> ref(static_cast<std::size_t>(rows * stride + 1));
      a.out = ref.data() + 1;
      a.out_stride = stride;
      rotary::detail::scalar::norm_rows<T>(a);
      for (std::int64_t r = 0; r < rows; ++r) {
        const T* xr = a.in + r * stride;
        double ss = 0.0;
        for (std::int64_t i = 0; i < n; ++i) ss += rotary_test::to_d(xr[i]) * rotary_test::to_d(xr[i]);
        const double f = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-6);
        double top = 0.0;
        for (std::int64_t i = 0; i < n; ++i)
          top = std::max(top, std::fabs(rotary_test::to_d(xr[i]) * f * (weighted ? static_cast<double>(w[static_cast<std::size_t>(i)]) : 1.0)));
        for (std::int64_t i = 0; i < n; ++i) {
          const double expect =
              rotary_test::to_d(xr[i]) * f * (weighted ? static_cast<double>(w[static_cast<std::size_t>(i)]) : 1.0);
          const double got = rotary_test::to_d(ref[static_cast<std::size_t>(1 + r * stride + i)]);
          const double bound = 4.0 * rotary_test::ulp<C>(top) + 0.5 * rotary_test::ulp<T>(expect);
          ASSERT_LE(std::fabs(got - expect), bound) << "row " << r << " element " << i;
        }
      }
      std::vector<std::pair<std::string, rotary::detail::NormKernel<T>>> kernels;
      for (const rotary::Isa isa : rotary_test::supported_isas())
        kernels.emplace_back(std::string(rotary::to_string(isa)), rotary::detail::norm_kernel_for<T>(isa));
#if ROTARY_X86_KERNELS
      // avx512 bf16 dispatches to vcvtneps2bf16 where the CPU has it: the integer rounding too
      if (std::is_same_v<T, rotary::bf16> && rotary::isa_supported(rotary::Isa::avx512))
        kernels.emplace_back("avx512.bf16_integer", &rotary::detail::avx512::norm_rows<T>);
#endif
      for (const auto& [name, k] : kernels) {
        ASSERT_NE(k, nullptr);
        std::vector<T> out(ref.size());
        a.out = out.data() + 1;
        k(a);
        EXPECT_TRUE(same_bytes(out, ref)) << name;
        std::vector<T> in_place(x);  // in place (RMSNorm of q and k in the fused prologue)
        rotary::detail::NormArgs<T> b = a;
        b.in = in_place.data() + 1;
        b.out = in_place.data() + 1;
        k(b);
        for (std::int64_t r = 0; r < rows; ++r)
          EXPECT_EQ(std::memcmp(in_place.data() + 1 + r * stride, ref.data() + 1 + r * stride,
                                static_cast<std::size_t>(n) * sizeof(T)),
                    0)
              << name << " in place, row " << r;
      }
    }
  }
}

TEST(NormKernels, EveryIsaGivesTheScalarBitsAndTheScalarIsWithinBounds) {
  std::mt19937_64 rng(rotary_test::seed() + 7);
  check_norm_kernels<float>(rng);
  check_norm_kernels<double>(rng);
  check_norm_kernels<rotary::f16>(rng);
  check_norm_kernels<rotary::bf16>(rng);
}

// ---- fused == composition -------------------------------------------------------------------------

enum class CacheKind { paged, paged_hnd, bhsd, bshd };
enum class NormKind { none, rms, gemma, l2_after, rms_and_l2 };

struct Shape {
  std::int64_t tokens, q_heads, kv_heads, head_dim, rotary_dim;
};

template <class E>
struct Cache {
  std::vector<E> data;
  std::vector<float> scales;
  KvCacheView<E> view;

  Cache(CacheKind kind, std::int64_t blocks, std::int64_t block_size, std::int64_t heads, std::int64_t d,
        std::mt19937_64& rng) {
    data.resize(static_cast<std::size_t>(blocks * block_size * heads * d));
    std::vector<unsigned char> junk(data.size() * sizeof(E));
    for (auto& b : junk) b = static_cast<unsigned char>(rng());
    std::memcpy(static_cast<void*>(data.data()), junk.data(), junk.size());  // untouched bytes must survive
    float* s = nullptr;
    if constexpr (rotary::cache_scales_of<E>() == rotary::CacheScales::per_row) {
      scales.assign(static_cast<std::size_t>(blocks * block_size * heads), -7.0f);
      s = scales.data();
    } else if constexpr (rotary::cache_scales_of<E>() == rotary::CacheScales::per_head) {
      for (std::int64_t h = 0; h < heads; ++h) scales.push_back(h == 0 ? 0.002f : 0.01f * static_cast<float>(h));
      s = scales.data();  // head 0 saturates (|x| / 0.002 > 448)
    }
    switch (kind) {
      case CacheKind::paged: view = KvCacheView<E>::paged(data.data(), blocks, block_size, heads, d, s); break;
      case CacheKind::paged_hnd: view = KvCacheView<E>::paged_hnd(data.data(), blocks, block_size, heads, d, s); break;
      case CacheKind::bhsd: view = KvCacheView<E>::sequences_bhsd(data.data(), blocks, heads, block_size, d, s); break;
      case CacheKind::bshd: view = KvCacheView<E>::sequences_bshd(data.data(), blocks, block_size, heads, d, s); break;
    }
  }
};

struct Options {
  CacheKind kind = CacheKind::paged;
  NormKind norm = NormKind::none;
  bool sequences = false;  // Slots::sequences instead of a mapping
  bool on_the_fly = false;
  bool k_out = false;       // also write the rotated k to its own tensor
  bool in_place_q = false;
  int threads = 1;
};

template <class T, class E>
void check_composition(const Shape& s, Pairing pairing, const Options& o, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << rotary::dtype_name<T>() << " -> cache of " << sizeof(E) << "-byte E, "
                                    << rotary::to_string(pairing) << " T" << s.tokens << " q" << s.q_heads << " kv"
                                    << s.kv_heads << " d" << s.head_dim << " r" << s.rotary_dim << " kind "
                                    << static_cast<int>(o.kind) << " norm " << static_cast<int>(o.norm)
                                    << " seq " << o.sequences << " threads " << o.threads << " "
                                    << rotary_test::seed_note());
  const std::int64_t T_ = s.tokens, D = s.head_dim;
  rotary::RotarySpec spec(D, pairing, 10000.0, s.rotary_dim);
  const rotary::Rope<T> rope = o.on_the_fly ? rotary::Rope<T>(spec, rotary::OnTheFly{}) : rotary::Rope<T>(spec, 1024);
  const auto q = rotary_test::random_vector<T>(static_cast<std::size_t>(T_ * s.q_heads * D), rng);
  const auto k = rotary_test::random_vector<T>(static_cast<std::size_t>(T_ * s.kv_heads * D), rng);
  const auto v = rotary_test::random_vector<T>(static_cast<std::size_t>(T_ * s.kv_heads * D), rng);
  const auto wq = rotary_test::random_vector<T>(static_cast<std::size_t>(D), rng, 0.5, 1.5);
  const auto wk = rotary_test::random_vector<T>(static_cast<std::size_t>(D), rng, -0.5, 0.5);
  const StridedLayout ql{T_, s.q_heads, s.q_heads * D, D};
  const StridedLayout kl{T_, s.kv_heads, s.kv_heads * D, D};
  const std::vector<std::int64_t> positions = rotary_test::random_positions(static_cast<std::size_t>(T_), 1023, rng);

  // Slots: a mapping (random distinct slots, about one token in five padding) or sequence offsets.
  const std::int64_t seqs = o.sequences ? 2 : 3;
  const std::int64_t block_size = o.sequences ? T_ / 2 + 5 : 4;
  const std::int64_t blocks = o.sequences ? seqs : (T_ + 3) / 4 * 2 + 1;
  std::vector<std::int64_t> mapping;
  std::vector<std::int32_t> seqlens;
  Slots slots = Slots::mapping(nullptr, 0);
  if (o.sequences) {
    seqlens = {3, 5};
    slots = Slots::sequences(seqlens.data(), 2, T_ / 2);
  } else {
    std::vector<std::int64_t> all(static_cast<std::size_t>(blocks * block_size));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    mapping.assign(all.begin(), all.begin() + T_);
    for (std::size_t t = 0; t < mapping.size(); ++t)
      if (rng() % 5 == 0) mapping[t] = -1 - static_cast<std::int64_t>(rng() % 3);
    slots = Slots(mapping);
  }

  const HeadNorm<T> rms_q = HeadNorm<T>::rms(wq.data(), 1e-6f, o.norm == NormKind::gemma ? NormWeight::unit_offset
                                                                                         : NormWeight::plain);
  const HeadNorm<T> rms_k = HeadNorm<T>::rms(wk.data(), 1e-5f, o.norm == NormKind::gemma ? NormWeight::unit_offset
                                                                                         : NormWeight::plain);
  const bool pre = o.norm == NormKind::rms || o.norm == NormKind::gemma || o.norm == NormKind::rms_and_l2;
  const bool post = o.norm == NormKind::l2_after || o.norm == NormKind::rms_and_l2;
  const HeadNorm<T> l2 = HeadNorm<T>::weightless(1e-6f);

  // The composition, on the scalar kernels.
  std::mt19937_64 cache_rng(rng());
  const auto cache_seed = cache_rng();
  std::mt19937_64 r1(cache_seed);
  Cache<E> ref_k(o.kind, blocks, block_size, s.kv_heads, D, r1);
  Cache<E> ref_v(o.kind, blocks, block_size, s.kv_heads, D, r1);
  std::vector<T> ref_q(q.size());
  std::vector<T> ref_krot(k.size());
  {
    const rotary_test::IsaScope scalar(rotary::Isa::scalar);
    std::vector<T> qn = q;
    std::vector<T> kn = k;
    if (pre) {
      rotary::rms_norm(q.data(), ql, qn.data(), ql, D, rms_q);
      rotary::rms_norm(k.data(), kl, kn.data(), kl, D, rms_k);
    }
    rotary::apply_strided(rope, qn.data(), ql, ref_q.data(), ql, Positions(positions));
    rotary::apply_strided(rope, kn.data(), kl, ref_krot.data(), kl, Positions(positions));
    if (post) {
      rotary::rms_norm(ref_q.data(), ql, ref_q.data(), ql, D, l2);
      rotary::rms_norm(ref_krot.data(), kl, ref_krot.data(), kl, D, l2);
    }
    rotary::write_kv_cache(ref_krot.data(), kl, slots, ref_k.view);
    rotary::write_kv_cache(v.data(), kl, slots, ref_v.view);
  }

  rotary::ThreadPool pool(static_cast<unsigned>(o.threads));
  const rotary::ParallelFor parallel = o.threads > 1 ? pool.parallel_for() : rotary::ParallelFor();
  for (const rotary::Isa isa : rotary_test::supported_isas()) {
    SCOPED_TRACE(rotary::to_string(isa));
    const rotary_test::IsaScope scope(isa);
    std::mt19937_64 r2(cache_seed);
    Cache<E> kc(o.kind, blocks, block_size, s.kv_heads, D, r2);
    Cache<E> vc(o.kind, blocks, block_size, s.kv_heads, D, r2);
    std::vector<T> q_out = o.in_place_q ? q : std::vector<T>(q.size());
    std::vector<T> k_out(k.size());
    Prologue<T, E, T> c;
    c.q = q_out.data();
    if (!o.in_place_q) c.q = q.data();
    c.q_layout = ql;
    c.q_out = q_out.data();
    c.q_out_layout = ql;
    c.k = k.data();
    c.k_layout = kl;
    if (o.k_out) {
      c.k_out = k_out.data();
      c.k_out_layout = kl;
    }
    c.v = v.data();
    c.v_layout = kl;
    c.k_cache = kc.view;
    c.v_cache = vc.view;
    c.slots = slots;
    if (pre) {
      c.q_norm = rms_q;
      c.k_norm = rms_k;
    }
    if (post) c.l2_after = l2;
    {
      const rotary_test::SplitAlways split;  // the small shapes split too
      rotary::rope_prologue(rope, c, Positions(positions), parallel);
    }
    EXPECT_TRUE(same_bytes(q_out, ref_q)) << "q";
    if (o.k_out) {
      EXPECT_TRUE(same_bytes(k_out, ref_krot)) << "k output";
    }
    EXPECT_TRUE(same_bytes(kc.data, ref_k.data)) << "k cache";
    EXPECT_TRUE(same_bytes(vc.data, ref_v.data)) << "v cache";
    EXPECT_TRUE(same_bytes(kc.scales, ref_k.scales)) << "k scales";
    EXPECT_TRUE(same_bytes(vc.scales, ref_v.scales)) << "v scales";
  }
}

const Shape kShapes[] = {
    {9, 4, 2, 64, 64}, {1, 8, 1, 128, 128}, {17, 3, 3, 80, 32}, {6, 5, 1, 18, 10}, {33, 2, 2, 34, 34}};

template <class T, class E>
void sweep(std::mt19937_64& rng) {
  int i = 0;
  for (const Shape& s : kShapes)
    for (const Pairing p : {Pairing::half_split, Pairing::interleaved}) {
      Options o;
      o.kind = static_cast<CacheKind>(i % 4);
      o.norm = static_cast<NormKind>(i % 5);
      o.sequences = i % 3 == 2 && s.tokens % 2 == 0;
      o.on_the_fly = i % 4 == 3;
      o.k_out = i % 3 == 1;
      o.in_place_q = i % 2 == 1;
      o.threads = i % 5 == 4 ? 2 : 1;
      check_composition<T, E>(s, p, o, rng);
      ++i;
    }
  Options big;  // large enough for the pool to split
  big.threads = 2;
  big.norm = NormKind::rms;
  check_composition<T, E>({300, 8, 2, 64, 64}, Pairing::half_split, big, rng);
}

TEST(FusedComposition, F32Vectors) {
  std::mt19937_64 rng(rotary_test::seed());
  sweep<float, float>(rng);
  sweep<float, rotary::f16>(rng);
  sweep<float, rotary::bf16>(rng);
  sweep<float, std::int8_t>(rng);
  sweep<float, fp8_e4m3>(rng);
}
TEST(FusedComposition, F16Vectors) {
  std::mt19937_64 rng(rotary_test::seed() + 1);
  sweep<rotary::f16, rotary::f16>(rng);
  sweep<rotary::f16, float>(rng);
  sweep<rotary::f16, rotary::bf16>(rng);
  sweep<rotary::f16, std::int8_t>(rng);
  sweep<rotary::f16, fp8_e4m3>(rng);
}
TEST(FusedComposition, Bf16Vectors) {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  sweep<rotary::bf16, rotary::bf16>(rng);
  sweep<rotary::bf16, float>(rng);
  sweep<rotary::bf16, rotary::f16>(rng);
  sweep<rotary::bf16, std::int8_t>(rng);
  sweep<rotary::bf16, fp8_e4m3>(rng);
}
TEST(FusedComposition, F64Vectors) {
  std::mt19937_64 rng(rotary_test::seed() + 3);
  sweep<double, double>(rng);
  sweep<double, float>(rng);
}

// ---- independent reference -------------------------------------------------------------------------

// QK-norm + RoPE (f32) against R(m) * (x / sqrt(mean(x^2) + eps) * w) in double. The fused op
// rounds the norm's product (2 roundings of f32 plus the factor's) and the rotation (2 of f32 with
// a cos/sin table correct to 1 ulp): bound 8 ulp(f32) of the row's largest |value| .
TEST(FusedReference, QkNormRopeAgainstRotationMatrix) {
  std::mt19937_64 rng(rotary_test::seed() + 4);
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved})
    for (const NormWeight conv : {NormWeight::plain, NormWeight::unit_offset}) {
      const std::int64_t D = 128, R = 96, Hq = 4, Hk = 2, T_ = 7;
      rotary::RotarySpec spec(D, pairing, 1000000.0, R);
      const rotary::Rope<float> rope(spec, rotary::OnTheFly{});  // exact rows at any position, no table
      const std::vector<double> theta = rotary::compute_frequencies(spec).theta;
      auto q = rotary_test::random_vector<float>(static_cast<std::size_t>(T_ * Hq * D), rng);
      auto k = rotary_test::random_vector<float>(static_cast<std::size_t>(T_ * Hk * D), rng);
      const auto q0 = q;
      const auto k0 = k;
      const auto wq = rotary_test::random_vector<float>(static_cast<std::size_t>(D), rng, -0.5, 1.5);
      const auto wk = rotary_test::random_vector<float>(static_cast<std::size_t>(D), rng, -0.5, 1.5);
      const auto positions = rotary_test::random_positions(static_cast<std::size_t>(T_), 99999, rng);
      const float eps = 1e-6f;
      rotary::qk_norm_rope(rope, q.data(), {T_, Hq, Hq * D, D}, k.data(), {T_, Hk, Hk * D, D},
                           rotary::QkNorm<float>{wq.data(), wk.data(), eps, conv}, Positions(positions));
      double worst = 0.0;
      for (std::int64_t t = 0; t < T_; ++t) {
        const Eigen::MatrixXd rm = rotary::reference::rotation_matrix(theta, D, pairing, positions[static_cast<std::size_t>(t)]);
        for (std::int64_t h = 0; h < Hq + Hk; ++h) {
          const bool is_q = h < Hq;
          const float* x0 = is_q ? &q0[static_cast<std::size_t>((t * Hq + h) * D)]
                                 : &k0[static_cast<std::size_t>((t * Hk + h - Hq) * D)];
          const float* y = is_q ? &q[static_cast<std::size_t>((t * Hq + h) * D)]
                                : &k[static_cast<std::size_t>((t * Hk + h - Hq) * D)];
          const auto& w = is_q ? wq : wk;
          double ss = 0.0;
          for (std::int64_t i = 0; i < D; ++i) ss += static_cast<double>(x0[i]) * x0[i];
          const double f = 1.0 / std::sqrt(ss / D + eps);
          Eigen::VectorXd n(D);
          for (std::int64_t i = 0; i < D; ++i)
            n(i) = x0[i] * f * (conv == NormWeight::unit_offset ? 1.0 + w[static_cast<std::size_t>(i)]
                                                                : w[static_cast<std::size_t>(i)]);
          const Eigen::VectorXd expect = rm * n;
          const double scale = n.cwiseAbs().maxCoeff();
          for (std::int64_t i = 0; i < D; ++i)
            worst = std::max(worst, std::fabs(y[i] - expect(i)) / (scale * std::ldexp(1.0, -24)));
        }
      }
      EXPECT_LE(worst, 8.0) << "ulp of the row's largest |value| " << rotary_test::seed_note();
      std::cout << "qk_norm_rope " << rotary::to_string(pairing) << (conv == NormWeight::plain ? " w" : " 1+w")
                << ": max error " << worst << " ulp(f32) of the row's largest |value|\n";
    }
}

// ---- MLA and QKV split ---------------------------------------------------------------------------------

template <class T>
void check_mla(bool interleaved_in, std::mt19937_64& rng) {
  const std::int64_t T_ = 5, H = 3, nope = 16, rope_dim = 8, latent = 24, blocks = 2, bs = 4;
  const Pairing p = interleaved_in ? Pairing::half_split : Pairing::interleaved;
  const rotary::Rope<T> rope(rotary::RotarySpec(rope_dim, p, 10000.0), 512);
  const rotary::Rope<T> inter(rotary::RotarySpec(rope_dim, Pairing::interleaved, 10000.0), 512);
  auto q = rotary_test::random_vector<T>(static_cast<std::size_t>(T_ * H * (nope + rope_dim)), rng);
  const auto kv = rotary_test::random_vector<T>(static_cast<std::size_t>(T_ * (latent + rope_dim)), rng);
  const std::vector<std::int64_t> positions = {7, 0, 511, 3, 3};
  const std::vector<std::int64_t> mapping = {6, 1, -1, 0, 7};
  std::vector<T> cache(static_cast<std::size_t>(blocks * bs * (latent + rope_dim)), T(0));
  const auto view = KvCacheView<T>::paged(cache.data(), blocks, bs, 1, latent + rope_dim);
  auto q_ref = q;
  rotary::mla_rope(rope, q.data(), rotary::MlaQuery{T_, H, nope}, kv.data() + latent, latent + rope_dim, kv.data(),
                   latent + rope_dim, Positions(positions), Slots(mapping), view, interleaved_in);
  // The reference: the rope slices rotated as interleaved pairs, then (HF) de-interleaved.
  const auto permute = [&](T* row) {
    if (!interleaved_in) return;
    std::vector<T> tmp(row, row + rope_dim);
    for (std::int64_t j = 0; j < rope_dim / 2; ++j) {
      row[j] = tmp[static_cast<std::size_t>(2 * j)];
      row[rope_dim / 2 + j] = tmp[static_cast<std::size_t>(2 * j + 1)];
    }
  };
  rotary::apply_strided(inter, q_ref.data() + nope, {T_, H, H * (nope + rope_dim), nope + rope_dim},
                        Positions(positions));
  for (std::int64_t r = 0; r < T_ * H; ++r) permute(q_ref.data() + r * (nope + rope_dim) + nope);
  EXPECT_TRUE(same_bytes(q, q_ref));
  std::vector<T> kpe(static_cast<std::size_t>(T_ * rope_dim));
  rotary::apply_strided(inter, kv.data() + latent, {T_, 1, latent + rope_dim, rope_dim}, kpe.data(),
                        {T_, 1, rope_dim, rope_dim}, Positions(positions));
  for (std::int64_t t = 0; t < T_; ++t) {
    const std::int64_t slot = mapping[static_cast<std::size_t>(t)];
    if (slot < 0) continue;
    permute(kpe.data() + t * rope_dim);
    const T* row = cache.data() + slot * (latent + rope_dim);
    EXPECT_EQ(std::memcmp(row, kv.data() + t * (latent + rope_dim), latent * sizeof(T)), 0) << "latent " << t;
    EXPECT_EQ(std::memcmp(row + latent, kpe.data() + t * rope_dim, rope_dim * sizeof(T)), 0) << "k_pe " << t;
  }
  for (const std::int64_t slot : {2, 3, 4, 5})
    for (std::int64_t i = 0; i < latent + rope_dim; ++i)
      EXPECT_EQ(rotary_test::to_d(cache[static_cast<std::size_t>(slot * (latent + rope_dim) + i)]), 0.0);
}

TEST(FusedMla, DecoupledRopeNextToTheLatent) {
  std::mt19937_64 rng(rotary_test::seed() + 5);
  for (const rotary::Isa isa : rotary_test::supported_isas()) {
    const rotary_test::IsaScope scope(isa);
    for (const bool hf : {false, true}) {
      check_mla<float>(hf, rng);
      check_mla<rotary::bf16>(hf, rng);
    }
  }
}

TEST(FusedQkvSplit, EqualsTheCallOnSeparateTensors) {
  std::mt19937_64 rng(rotary_test::seed() + 6);
  using T = rotary::bf16;
  const std::int64_t T_ = 11, Hq = 4, Hk = 2, D = 64;
  const rotary::Rope<T> rope(rotary::RotarySpec(D), 2048);
  auto qkv = rotary_test::random_vector<T>(static_cast<std::size_t>(T_ * (Hq + 2 * Hk) * D), rng);
  std::vector<T> q(static_cast<std::size_t>(T_ * Hq * D));
  std::vector<T> k(static_cast<std::size_t>(T_ * Hk * D));
  std::vector<T> v(k.size());
  for (std::int64_t t = 0; t < T_; ++t) {
    const T* row = qkv.data() + t * (Hq + 2 * Hk) * D;
    std::copy(row, row + Hq * D, q.data() + t * Hq * D);
    std::copy(row + Hq * D, row + (Hq + Hk) * D, k.data() + t * Hk * D);
    std::copy(row + (Hq + Hk) * D, row + (Hq + 2 * Hk) * D, v.data() + t * Hk * D);
  }
  const auto wq = rotary_test::random_vector<T>(static_cast<std::size_t>(D), rng);
  const auto wk = rotary_test::random_vector<T>(static_cast<std::size_t>(D), rng);
  const rotary::QkNorm<T> norm{wq.data(), wk.data(), 1e-6f};
  const std::vector<std::int64_t> positions = rotary_test::random_positions(static_cast<std::size_t>(T_), 2047, rng);
  std::vector<std::int64_t> mapping(static_cast<std::size_t>(T_));
  std::iota(mapping.begin(), mapping.end(), 3);
  mapping[4] = -1;
  std::vector<std::int8_t> kc1(static_cast<std::size_t>(4 * 8 * Hk * D)), vc1(kc1.size()), kc2(kc1.size()),
      vc2(kc1.size());
  std::vector<float> ks1(static_cast<std::size_t>(4 * 8 * Hk)), vs1(ks1.size()), ks2(ks1.size()), vs2(ks1.size());
  using V = KvCacheView<std::int8_t>;
  rotary::qkv_split_rope(rope, qkv.data(), T_, Hq, Hk, Positions(positions), Slots(mapping),
                         V::paged(kc1.data(), 4, 8, Hk, D, ks1.data()), V::paged(vc1.data(), 4, 8, Hk, D, vs1.data()),
                         &norm);
  Prologue<T, std::int8_t, T> c;
  c.q = q.data();
  c.q_layout = {T_, Hq, Hq * D, D};
  c.q_out = q.data();
  c.q_out_layout = c.q_layout;
  c.k = k.data();
  c.k_layout = {T_, Hk, Hk * D, D};
  c.v = v.data();
  c.v_layout = c.k_layout;
  c.k_cache = V::paged(kc2.data(), 4, 8, Hk, D, ks2.data());
  c.v_cache = V::paged(vc2.data(), 4, 8, Hk, D, vs2.data());
  c.slots = Slots(mapping);
  c.q_norm = HeadNorm<T>::rms(wq.data(), 1e-6f);
  c.k_norm = HeadNorm<T>::rms(wk.data(), 1e-6f);
  rotary::rope_prologue(rope, c, Positions(positions));
  for (std::int64_t t = 0; t < T_; ++t)
    EXPECT_EQ(std::memcmp(qkv.data() + t * (Hq + 2 * Hk) * D, q.data() + t * Hq * D, Hq * D * sizeof(T)), 0) << t;
  EXPECT_TRUE(same_bytes(kc1, kc2));
  EXPECT_TRUE(same_bytes(vc1, vc2));
  EXPECT_TRUE(same_bytes(ks1, ks2));
  EXPECT_TRUE(same_bytes(vs1, vs2));
}

// ---- refusals -----------------------------------------------------------------------------------------

// Duplicate slots are found both ways Slots::check looks for them: pairwise (up to 16 tokens, no
// allocation) and sorted (more); padding (negative) may repeat; the message names the slot.
TEST(FusedErrors, DuplicateSlotsAtEveryCallSize) {
  for (const std::int64_t tokens : {2, 3, 16, 17, 64}) {
    std::vector<std::int64_t> map(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) map[static_cast<std::size_t>(t)] = t % 3 == 1 ? -1 : 3 * t;
    EXPECT_EQ(Slots(map).check(tokens, 4 * tokens + 8, 8), "") << tokens << " tokens";
    for (const std::int64_t at : {std::int64_t{0}, tokens / 2, tokens - 1}) {
      std::vector<std::int64_t> dup = map;
      const std::int64_t other = at == 0 ? tokens - 1 : 0;
      dup[static_cast<std::size_t>(other)] = 3 * tokens + 5;
      dup[static_cast<std::size_t>(at)] = 3 * tokens + 5;
      const std::string m = Slots(dup).check(tokens, 4 * tokens + 8, 8);
      EXPECT_NE(m.find("writes slot " + std::to_string(3 * tokens + 5) + " twice"), std::string::npos)
          << tokens << " tokens, duplicate at " << other << " and " << at << ": \"" << m << "\"";
    }
  }
}

TEST(FusedErrors, RefusesBadCallsWithClearMessages) {
  using rotary_test::expect_error;
  const std::int64_t T_ = 3, H = 2, D = 8;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::vector<float> q(T_ * H * D, 1.0f), k(T_ * H * D, 1.0f), v(T_ * H * D, 1.0f);
  std::vector<float> kc(2 * 4 * H * D), vc(kc.size());
  const StridedLayout l{T_, H, H * D, D};
  const auto kv = KvCacheView<float>::paged(kc.data(), 2, 4, H, D);
  const auto vv = KvCacheView<float>::paged(vc.data(), 2, 4, H, D);
  const auto call = [&](const std::vector<std::int64_t>& slots, const KvCacheView<float>& kcache,
                        const KvCacheView<float>& vcache) {
    rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0), Slots(slots), kcache,
                          vcache);
  };
  expect_error([&] { call({0, 8, 1}, kv, vv); }, {"slot_mapping[1] (8)", "outside the cache's 8 slots"});
  expect_error([&] { call({2, 5, 2}, kv, vv); }, {"slot 2 twice"});
  expect_error([&] { call({0, 1}, kv, vv); }, {"slot_mapping has 2 values for 3 tokens"});
  expect_error([&] { call({0, 1, 2}, kv, kv); }, {"k_cache and v_cache share memory"});
  expect_error([&] { call({0, 1, 2}, KvCacheView<float>::paged(q.data(), 1, 3, H, D), vv); }, {"share memory"});
  // inputs apart from the other tensor's cache too: k read while v_cache is written, v while k_cache is
  expect_error([&] { call({0, 1, 2}, kv, KvCacheView<float>::paged(k.data(), 1, 3, H, D)); },
               {"k and v_cache share memory"});
  expect_error([&] { call({0, 1, 2}, KvCacheView<float>::paged(v.data(), 1, 3, H, D), vv); },
               {"v and k_cache share memory"});
  {  // k rotated to its own output over v, which is still to be read into v_cache
    const std::vector<std::int64_t> slots = {0, 1, 2};
    rotary::Prologue<float, float, float> c;
    c.rotate_q_in_place(q.data(), l);
    c.write_kv(k.data(), l, v.data(), l, kv, vv, Slots(slots));
    c.k_out = v.data();
    c.k_out_layout = l;
    expect_error([&] { rotary::rope_prologue(rope, c, Positions::contiguous(0)); }, {"k output and v share memory"});
  }
  expect_error([&] { KvCacheView<float>::paged(kc.data(), 2, 4, H, D, kc.data()); }, {"scales given"});
  expect_error([&] { KvCacheView<std::int8_t>::paged(nullptr, 2, 4, H, D); }, {"data is null"});
  std::vector<std::int8_t> k8(kc.size());
  expect_error([&] { KvCacheView<std::int8_t>::paged(k8.data(), 2, 4, H, D); }, {"int8 KV cache needs scales"});
  std::vector<fp8_e4m3> k8f(kc.size());
  std::vector<float> bad_scales = {1.0f, 0.0f};
  expect_error([&] { KvCacheView<fp8_e4m3>::paged(k8f.data(), 2, 4, H, D, bad_scales.data()); },
               {"fp8 KV cache scales[1] (0)", "> 0"});
  bad_scales[1] = 1e-40f;  // subnormal: 1 / scale would be infinite
  expect_error([&] { KvCacheView<fp8_e4m3>::paged(k8f.data(), 2, 4, H, D, bad_scales.data()); },
               {"fp8 KV cache scales[1]", "not subnormal"});
  expect_error([&] { KvCacheView<float>::strided(kc.data(), 2, 4, H, D, 64, 8, 4); }, {"rows of one block overlap"});
  expect_error([&] { call({0, 1, 2}, kv, KvCacheView<float>::paged(vc.data(), 1, 4, H, 16)); },
               {"v rows overlap"});  // v's rows read as 16 wide
  std::vector<std::int32_t> seqlens = {2};
  expect_error(
      [&] {
        rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0),
                              Slots::sequences(seqlens.data(), 1, 3), kv, vv);
      },
      {"cache_seqlens[0] (2) + 3 new tokens does not fit the 4 slots"});
  expect_error([&] { call({0, 1, 2}, KvCacheView<float>::paged(kc.data(), 2, 4, H, 6), vv); },
               {"k_cache head_dim (6) is not the rotator's (8)"});
  const std::vector<float> w(D, 1.0f);
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{w.data(), w.data(), 0.0f},
                             Positions::contiguous(0));
      },
      {"q_norm eps (0) must be finite and > 0"});
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{w.data(), nullptr, 1e-6f},
                             Positions::contiguous(0));
      },
      {"k_norm has no weight"});
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, q.data() + D, l, rotary::QkNorm<float>{w.data(), w.data(), 1e-6f},
                             Positions::contiguous(0));
      },
      {"overlap"});
  expect_error(
      [&] {
        rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(62),
                              Slots(std::vector<std::int64_t>{0, 1, 2}), kv, vv);
      },
      {"position 64", "outside the cache"});
  const rotary::Rope<float> inter(rotary::RotarySpec(D, Pairing::interleaved), 64);
  std::vector<float> mla(2 * 4 * (16 + D));
  expect_error(
      [&] {
        rotary::mla_rope(inter, q.data(), rotary::MlaQuery{T_, 1, 8}, k.data(), 0, v.data(), 0,
                         Positions::contiguous(0), Slots(std::vector<std::int64_t>{0, 1, 2}),
                         KvCacheView<float>::paged(mla.data(), 2, 4, 1, 16 + D), true);
      },
      {"deinterleave", "half_split rotator"});
}

// Two caches interleaved in one buffer without sharing a row are one cache pair: FlashInfer's pages
// [blocks, 2, block_size, heads, D] (k's block, then v's) and slot rows [heads, 2, D] (k's head h,
// then v's). Both were refused ("share memory"); they give the bytes of two separate caches.
TEST(Fused, InterleavedCachePairsEqualSeparateCaches) {
  const std::int64_t T_ = 5, H = 2, D = 8, B = 3, S = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::mt19937_64 rng(rotary_test::seed() + 77);
  const std::vector<float> q0 = rotary_test::random_vector<float>(static_cast<std::size_t>(T_ * H * D), rng);
  const std::vector<float> k = rotary_test::random_vector<float>(q0.size(), rng);
  const std::vector<float> v = rotary_test::random_vector<float>(q0.size(), rng);
  const StridedLayout l{T_, H, H * D, D};
  const std::vector<std::int64_t> slots = {0, 5, 6, 11, -1};
  std::vector<float> q = q0;
  std::vector<float> kc(B * S * H * D), vc(kc.size());
  rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(3), Slots(slots),
                        KvCacheView<float>::paged(kc.data(), B, S, H, D),
                        KvCacheView<float>::paged(vc.data(), B, S, H, D));
  struct Pair {
    const char* name;
    std::ptrdiff_t v_offset, block_stride, slot_stride, head_stride;
  };
  for (const Pair& p : {Pair{"FlashInfer pages", S * H * D, 2 * S * H * D, H * D, D},
                        Pair{"heads [2, D]", D, S * H * 2 * D, H * 2 * D, 2 * D}}) {
    SCOPED_TRACE(p.name);
    std::vector<float> buf(static_cast<std::size_t>(2 * B * S * H * D), 0.0f);  // as kc and vc
    const auto kp = KvCacheView<float>::strided(buf.data(), B, S, H, D, p.block_stride, p.slot_stride, p.head_stride);
    const auto vp = KvCacheView<float>::strided(buf.data() + p.v_offset, B, S, H, D, p.block_stride, p.slot_stride,
                                                p.head_stride);
    std::vector<float> q2 = q0;
    rotary::rope_kv_write(rope, q2.data(), l, k.data(), l, v.data(), l, Positions::contiguous(3), Slots(slots), kp, vp);
    EXPECT_TRUE(rotary_test::same_bits(q2, q));
    for (std::int64_t slot = 0; slot < B * S; ++slot)
      for (std::int64_t h = 0; h < H; ++h) {
        EXPECT_EQ(std::memcmp(kp.row(slot, h), kc.data() + (slot * H + h) * D, D * sizeof(float)), 0) << slot;
        EXPECT_EQ(std::memcmp(vp.row(slot, h), vc.data() + (slot * H + h) * D, D * sizeof(float)), 0) << slot;
      }
  }
}

// What a call reads while it writes other buffers: cache scales, norm weights, a second cache beside
// the first, sequence counts. Each case below was accepted before (wrong values or UB, no error).
TEST(FusedErrors, ScalesWeightsAndCachesSideBySide) {
  using rotary_test::expect_error;
  using I8 = KvCacheView<std::int8_t>;
  const std::int64_t T_ = 3, H = 2, D = 8, B = 2, S = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::vector<float> q(T_ * H * D, 1.0f), k(q.size(), 1.0f), v(q.size(), 1.0f);
  const StridedLayout l{T_, H, H * D, D};
  const std::vector<std::int64_t> slots = {0, 1, 2};
  std::vector<std::int8_t> kc(B * S * H * D), vc(kc.size());
  std::vector<float> ks(B * S * H), vs(ks.size());
  const auto call = [&](const auto& kcache, const auto& vcache) {
    rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0), Slots(slots), kcache,
                          vcache);
  };
  const auto kv = I8::paged(kc.data(), B, S, H, D, ks.data());
  const auto vv = I8::paged(vc.data(), B, S, H, D, vs.data());
  // int8 scales are written: one array per cache, apart from every tensor and from both caches' codes
  expect_error([&] { call(kv, I8::paged(vc.data(), B, S, H, D, ks.data())); }, {"k_cache and v_cache share scales"});
  expect_error([&] { call(I8::paged(kc.data(), B, S, H, D, q.data()), vv); },
               {"q output and k_cache's scales share memory"});
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  expect_error([&] { call(I8::paged(kc.data(), B, S, H, D, reinterpret_cast<float*>(vc.data())), vv); },
               {"k_cache's scales and v_cache share memory"});
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  expect_error([&] { call(kv, I8::paged(vc.data(), B, S, H, D, reinterpret_cast<float*>(kc.data()))); },
               {"v_cache's scales and k_cache share memory"});
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  expect_error([&] { I8::paged(kc.data(), B, S, H, D, reinterpret_cast<float*>(kc.data() + 64)); },
               {"KV cache scales share memory with its data"});
  expect_error([&] { rotary::write_kv_cache(k.data(), l, Slots(slots), I8::paged(kc.data(), B, S, H, D, k.data())); },
               {"x and cache's scales share memory"});
  {  // fp8's per-head scales are only read: one array for both caches gives the bytes of two
    std::vector<fp8_e4m3> k8(kc.size()), v8(kc.size()), k8b(kc.size()), v8b(kc.size());
    std::vector<float> hs = {0.5f, 0.25f}, hs2 = hs;
    using F8 = KvCacheView<fp8_e4m3>;
    call(F8::paged(k8.data(), B, S, H, D, hs.data()), F8::paged(v8.data(), B, S, H, D, hs.data()));
    call(F8::paged(k8b.data(), B, S, H, D, hs.data()), F8::paged(v8b.data(), B, S, H, D, hs2.data()));
    EXPECT_EQ(std::memcmp(k8.data(), k8b.data(), k8.size()), 0);
    EXPECT_EQ(std::memcmp(v8.data(), v8b.data(), v8.size()), 0);
  }
  // norm weights are read for every row: not inside anything the call writes
  const std::vector<float> w(D, 1.0f);
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{q.data() + D, w.data(), 1e-6f},
                             Positions::contiguous(0));
      },
      {"q_norm weight and q output share memory"});
  expect_error(
      [&] {
        rotary::qk_norm_rope(rope, q.data(), l, k.data(), l, rotary::QkNorm<float>{w.data(), k.data() + 3, 1e-6f},
                             Positions::contiguous(0));
      },
      {"k_norm weight and k output share memory"});
  expect_error([&] { rotary::rms_norm(q.data(), l, q.data(), l, D, HeadNorm<float>::rms(q.data() + 5, 1e-6f)); },
               {"norm weight and out share memory"});
  {  // two caches in the same slot rows, but a block of the pair is longer than the block stride: k's
     // slot 1 is v's slot 0 (each view alone is valid)
    const StridedLayout one{T_, 1, D, D};
    std::vector<float> buf(10 * D);
    const auto kb = KvCacheView<float>::strided(buf.data(), 8, 1, 1, D, D, 4 * D, D);
    const auto vb = KvCacheView<float>::strided(buf.data() + D, 8, 1, 1, D, D, 4 * D, D);
    expect_error(
        [&] {
          rotary::rope_kv_write(rope, q.data(), one, k.data(), one, v.data(), one, Positions::contiguous(0),
                                Slots(slots), kb, vb);
        },
        {"k_cache and v_cache share memory"});
    // side by side within blocks long enough: accepted (k's and v's heads alternating in one slot row,
    // and FlashInfer's pages [blocks, 2, block_size, heads, D], are below)
    const auto kw = KvCacheView<float>::strided(buf.data(), 4, 1, 1, D, 2 * D, 4 * D, D);
    const auto vw = KvCacheView<float>::strided(buf.data() + D, 4, 1, 1, D, 2 * D, 4 * D, D);
    rotary::rope_kv_write(rope, q.data(), one, k.data(), one, v.data(), one, Positions::contiguous(0), Slots(slots),
                          kw, vw);
  }
  {  // mla_rope checks the whole cache it is given (a view filled field by field skips the factory)
    std::vector<float> mla(2 * 2 * (8 + D));
    KvCacheView<float> cv;
    cv.data = mla.data();
    cv.blocks = 2;
    cv.block_size = 2;
    cv.heads = 1;
    cv.head_dim = 8 + D;
    cv.slot_stride = 8 + D;
    cv.head_stride = 8 + D;
    cv.block_stride = 28;  // < the 32 values a block spans (the latent's and k_pe's parts, 24 each, fit)
    expect_error(
        [&] {
          rotary::mla_rope(rope, q.data(), rotary::MlaQuery{T_, 1, 8}, k.data(), 0, v.data(), 0,
                           Positions::contiguous(0), Slots(slots), cv, false);
        },
        {"MLA cache: KV cache blocks overlap"});
  }
  // sequence slots: counts whose product overflows int64 are refused, not wrapped; 0 tokens per
  // sequence is a sequence count, not a mapping
  const std::vector<std::int32_t> seqlens = {0, 0};
  EXPECT_NE(Slots::sequences(seqlens.data(), std::int64_t{1} << 32, std::int64_t{1} << 32).check(0, 16, 4), "");
  EXPECT_NE(Slots::sequences(seqlens.data(), (std::int64_t{1} << 62) + 1, 4).check(4, 64, 16).find("sequences x 4"),
            std::string::npos);
  EXPECT_EQ(Slots::sequences(seqlens.data(), 2, 0).check(0, 16, 4), "");
  EXPECT_EQ(Slots::sequences(seqlens.data(), 2, 0).check(2, 16, 4), "sequence slots: 2 sequences x 0 tokens != 2 tokens");
  // read_cache_row is checked
  std::vector<float> row(D);
  expect_error([&] { rotary::read_cache_row(kv, 999, 0, row.data()); }, {"read_cache_row: slot 999"});
  expect_error([&] { rotary::read_cache_row(kv, 0, H, row.data()); }, {"outside the cache's 8 slots x 2 heads"});
  {  // the slot mapping and a positions array are read while the call writes: apart from every output
    std::vector<float> fc(B * S * H * D), fv(fc.size());
    const auto fk = KvCacheView<float>::paged(fc.data(), B, S, H, D);
    const auto fvv = KvCacheView<float>::paged(fv.data(), B, S, H, D);
    std::memcpy(fc.data() + 40, slots.data(), slots.size() * sizeof(std::int64_t));
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    const auto* in_cache = reinterpret_cast<const std::int64_t*>(fc.data() + 40);
    expect_error(
        [&] {
          rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(0),
                                Slots::mapping(in_cache, T_), fk, fvv);
        },
        {"k_cache and the slots share memory"});
    std::memcpy(q.data() + 20, slots.data(), slots.size() * sizeof(std::int64_t));
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    const auto* in_q = reinterpret_cast<const std::int64_t*>(q.data() + 20);
    expect_error(
        [&] {
          rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions(in_q, T_), Slots(slots), fk,
                                fvv);
        },
        {"q output and positions share memory"});
    std::fill(q.begin(), q.end(), 1.0f);
  }
  {  // with no q, k's problems are named as k's
    Prologue<float, float, float> c;
    c.k = k.data();
    c.k_layout = {T_, H, H * D, 4};
    c.k_out = k.data();
    c.k_out_layout = c.k_layout;
    try {
      rotary::rope_prologue(rope, c, Positions::contiguous(0));
      ADD_FAILURE() << "overlapping k rows accepted";
    } catch (const rotary::error& e) {
      EXPECT_EQ(std::string(e.what()).find("q "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("k "), std::string::npos) << e.what();
    }
  }
}

// The unfused write reads each token's slot again when it writes that token's rows, after the rows
// (and int8 scales) of the tokens before it: slot values inside the cache were checked once, then
// written over. Below, token 0's row lands on slot_mapping[1] and makes it negative (token 1 was
// dropped without an error); other row values sent token 1's row outside the cache. Each view is
// valid alone; the call is refused, and slots just past the cache are accepted.
TEST(FusedErrors, UnfusedWriteRefusesSlotsInsideTheCache) {
  using rotary_test::expect_error;
  const std::int64_t D = 4;
  const StridedLayout two{2, 1, D, D};
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, -1.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  const std::vector<std::int64_t> map = {1, 2};
  std::vector<float> buf(5 * D, 0.0f);  // 4 slots of one head, then room for the mapping
  const auto cache = KvCacheView<float>::paged(buf.data(), 1, 4, 1, D);
  std::memcpy(buf.data() + D, map.data(), map.size() * sizeof(std::int64_t));  // slot 1's row
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* in_row = reinterpret_cast<const std::int64_t*>(buf.data() + D);
  expect_error([&] { rotary::write_kv_cache(x.data(), two, Slots::mapping(in_row, 2), cache); },
               {"cache and the slots share memory"});
  std::memcpy(buf.data() + 4 * D, map.data(), map.size() * sizeof(std::int64_t));  // past the cache
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* after = reinterpret_cast<const std::int64_t*>(buf.data() + 4 * D);
  rotary::write_kv_cache(x.data(), two, Slots::mapping(after, 2), cache);
  EXPECT_EQ(std::memcmp(cache.row(1, 0), x.data(), D * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(cache.row(2, 0), x.data() + D, D * sizeof(float)), 0);
  {  // an int8 cache writes a scale per row: the mapping inside the scales (token 0 writes scales[2],
     // the low half of slot_mapping[1])
    std::vector<std::int8_t> codes(4 * D);
    std::vector<float> scales(4, 0.0f);
    const std::vector<std::int64_t> down = {2, 0};
    std::memcpy(scales.data(), down.data(), down.size() * sizeof(std::int64_t));
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    const auto* in_scales = reinterpret_cast<const std::int64_t*>(scales.data());
    const std::vector<float> zeros(2 * D, 0.0f);
    expect_error(
        [&] {
          rotary::write_kv_cache(zeros.data(), two, Slots::mapping(in_scales, 2),
                                 KvCacheView<std::int8_t>::paged(codes.data(), 1, 4, 1, D, scales.data()));
        },
        {"cache's scales and the slots share memory"});
  }
  // cache_seqlens (int32 and int64) inside the cache: read for every token too
  std::vector<float> seq(2 * 4 * D, 0.0f);  // zeros: every sequence holds 0 tokens
  const auto seq_cache = KvCacheView<float>::paged(seq.data(), 2, 4, 1, D);
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* lens32 = reinterpret_cast<const std::int32_t*>(seq.data() + 7 * D);
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* lens64 = reinterpret_cast<const std::int64_t*>(seq.data() + 6 * D);
  expect_error([&] { rotary::write_kv_cache(x.data(), two, Slots::sequences(lens32, 1, 2), seq_cache); },
               {"cache and the slots share memory"});
  expect_error([&] { rotary::write_kv_cache(x.data(), two, Slots::sequences(lens64, 2, 1), seq_cache); },
               {"cache and the slots share memory"});
}

// fp8's per-head scales are only read: a norm weight or an input in the same memory is only read
// too. Both were refused ("q_norm weight and k_cache's scales share memory (the call writes them)",
// "v and v_cache's scales share memory"); they give the bytes of separate copies. An output over
// them is still refused.
TEST(Fused, Fp8ScalesMayShareMemoryWithWhatIsRead) {
  using F8 = KvCacheView<fp8_e4m3>;
  const std::int64_t T_ = 3, H = 2, D = 8, B = 2, S = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 64);
  std::mt19937_64 rng(rotary_test::seed() + 91);
  const auto n = static_cast<std::size_t>(T_ * H * D);
  const std::vector<float> q0 = rotary_test::random_vector<float>(n, rng);
  const std::vector<float> k = rotary_test::random_vector<float>(n, rng);
  // > 0: the first values of v and of the norm weights are fp8 scales too (a view's scales are float*)
  std::vector<float> v = rotary_test::random_vector<float>(n, rng, 0.25, 2.0);
  std::vector<float> w = rotary_test::random_vector<float>(static_cast<std::size_t>(D), rng, 0.25, 2.0);
  const std::vector<float> v_copy = v, w_copy = w;
  const StridedLayout l{T_, H, H * D, D};
  const std::vector<std::int64_t> slots = {0, 5, 6};
  struct Out {
    std::vector<float> q;
    std::vector<fp8_e4m3> kc, vc;
  };
  // k_cache's scales are the norm weights' first values, v_cache's those of v's first row
  const auto run = [&](const float* weight, float* k_scales, float* v_scales) {
    Out o{q0, std::vector<fp8_e4m3>(static_cast<std::size_t>(B * S * H * D)), {}};
    o.vc = o.kc;
    Prologue<float, fp8_e4m3, float> c;
    c.rotate_q_in_place(o.q.data(), l);
    c.write_kv(k.data(), l, v.data(), l, F8::paged(o.kc.data(), B, S, H, D, k_scales),
               F8::paged(o.vc.data(), B, S, H, D, v_scales), Slots(slots));
    c.norm_before_rope(rotary::QkNorm<float>{weight, weight, 1e-6f});
    rotary::rope_prologue(rope, c, Positions::contiguous(2));
    return o;
  };
  std::vector<float> k_scales = {w[0], w[1]}, v_scales = {v[0], v[1]};  // the same values, apart
  const Out apart = run(w_copy.data(), k_scales.data(), v_scales.data());
  const auto same_as_apart = [&](const char* what, const float* weight, float* ks, float* vs) {
    try {
      const Out o = run(weight, ks, vs);
      EXPECT_TRUE(same_bytes(o.q, apart.q) && same_bytes(o.kc, apart.kc) && same_bytes(o.vc, apart.vc)) << what;
    } catch (const rotary::error& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  };
  same_as_apart("norm weights holding k_cache's scales", w.data(), w.data(), v_scales.data());
  same_as_apart("v holding v_cache's scales", w_copy.data(), k_scales.data(), v.data());
  same_as_apart("both", w.data(), w.data(), v.data());
  // other scales give other codes (the comparison above is not vacuous)
  std::vector<float> swapped = {v[1], v[0]};
  EXPECT_FALSE(same_bytes(run(w_copy.data(), k_scales.data(), swapped.data()).vc, apart.vc));
  {  // the unfused write: x holding the scales
    std::vector<fp8_e4m3> a(static_cast<std::size_t>(B * S * H * D)), b(a.size());
    rotary::write_kv_cache(v.data(), l, Slots(slots), F8::paged(a.data(), B, S, H, D, v.data() + D));
    std::vector<float> x_scales = {v[D], v[D + 1]};
    rotary::write_kv_cache(v_copy.data(), l, Slots(slots), F8::paged(b.data(), B, S, H, D, x_scales.data()));
    EXPECT_TRUE(same_bytes(a, b));
  }
  std::vector<float> q = q0;  // q rotated in place is written: its rows may not hold scales
  q[D] = 0.5f;
  q[D + 1] = 0.25f;
  std::vector<fp8_e4m3> kc(static_cast<std::size_t>(B * S * H * D)), vc(kc.size());
  rotary_test::expect_error(
      [&] {
        rotary::rope_kv_write(rope, q.data(), l, k.data(), l, v.data(), l, Positions::contiguous(2), Slots(slots),
                              F8::paged(kc.data(), B, S, H, D, q.data() + D), F8::paged(vc.data(), B, S, H, D, w.data()));
      },
      {"q output and k_cache's scales share memory"});
}

// ---- two caches in one buffer -----------------------------------------------------------------------

// One block's geometry: block_size slots x heads rows of head_dim, element strides.
struct BlockShape {
  std::int64_t block_size = 1, heads = 1, head_dim = 1;
  std::ptrdiff_t slot_stride = 0, head_stride = 0;
  std::int64_t span() const { return (block_size - 1) * slot_stride + (heads - 1) * head_stride + head_dim; }
};

// A random block whose rows nest (either axis inside), with slack between rows that is sometimes wide
// enough for another cache's rows to sit in it; an axis of one row gets any stride.
BlockShape random_block(std::mt19937_64& rng) {
  const auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  BlockShape s;
  s.block_size = pick(1, 4);
  s.heads = pick(1, 3);
  s.head_dim = pick(1, 5);
  const bool heads_inside = pick(0, 1) == 1;
  const std::int64_t n_inner = heads_inside ? s.heads : s.block_size;
  const std::int64_t n_outer = heads_inside ? s.block_size : s.heads;
  const std::ptrdiff_t inner = n_inner > 1 ? s.head_dim + pick(0, 2 * s.head_dim) : pick(0, 9);
  const std::ptrdiff_t outer =
      n_outer > 1 ? (n_inner - 1) * inner + s.head_dim + pick(0, 2 * s.head_dim + 2) : pick(0, 40);
  (heads_inside ? s.head_stride : s.slot_stride) = inner;
  (heads_inside ? s.slot_stride : s.head_stride) = outer;
  return s;
}

// b: the same slot and head axes as a (as they are, or with the two axes' roles swapped) with its own
// head_dim that still nests in them, or a random block of its own.
BlockShape partner_block(const BlockShape& a, std::mt19937_64& rng) {
  const auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  if (pick(0, 3) == 0) return random_block(rng);
  BlockShape b = a;
  if (pick(0, 1) == 1) {
    std::swap(b.block_size, b.heads);
    std::swap(b.slot_stride, b.head_stride);
  }
  // the largest head_dim whose rows still nest: below every stride of an axis of more than one row,
  // and within the outer stride after the inner axis' rows
  std::int64_t most = 8;
  const bool slot_inner = b.slot_stride <= b.head_stride;
  if (b.block_size > 1) most = std::min<std::int64_t>(most, b.slot_stride);
  if (b.heads > 1) most = std::min<std::int64_t>(most, b.head_stride);
  if (b.block_size > 1 && b.heads > 1)
    most = std::min<std::int64_t>(most, slot_inner ? b.head_stride - (b.block_size - 1) * b.slot_stride
                                                   : b.slot_stride - (b.heads - 1) * b.head_stride);
  b.head_dim = pick(1, most);
  return b;
}

template <class E>
KvCacheView<E> view_of(E* data, std::int64_t blocks, std::ptrdiff_t block_stride, const BlockShape& s) {
  return KvCacheView<E>::strided(data, blocks, s.block_size, s.heads, s.head_dim, block_stride, s.slot_stride,
                                 s.head_stride);
}

// Whether two views of one buffer share a byte, by marking every byte of the first's rows.
template <class E>
bool bytes_shared(const E* buf, std::size_t size, const KvCacheView<E>& a, const KvCacheView<E>& b) {
  std::vector<char> used(size * sizeof(E), 0);
  const auto bytes = [&](const KvCacheView<E>& c, bool mark) {
    for (std::int64_t slot = 0; slot < c.slots(); ++slot)
      for (std::int64_t h = 0; h < c.heads; ++h) {
        const auto at = static_cast<std::size_t>(reinterpret_cast<const char*>(c.row(slot, h)) -
                                                 reinterpret_cast<const char*>(buf));
        for (std::size_t i = 0; i < static_cast<std::size_t>(c.head_dim) * sizeof(E); ++i) {
          if (!mark && used[at + i] != 0) return true;
          used[at + i] = 1;
        }
      }
    return false;
  };
  bytes(a, true);
  return bytes(b, false);
}

template <class E>
void check_cache_pairs(std::mt19937_64& rng) {
  const auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  int apart = 0, interleaved = 0, shared = 0;
  for (int i = 0; i < 4000; ++i) {
    const BlockShape sa = random_block(rng);
    const BlockShape sb = partner_block(sa, rng);
    const std::int64_t blocks = pick(1, 4);
    // one block stride for both: each block within it, sometimes room for the other cache's block
    const std::ptrdiff_t block_stride = std::max(sa.span(), sb.span()) + pick(0, sb.span() + 3);
    const bool same_blocks = pick(0, 7) != 0;  // else block counts or strides differ: refusal allowed
    const std::int64_t blocks_b = same_blocks ? blocks : pick(1, 4);
    const std::ptrdiff_t stride_b = same_blocks ? block_stride : block_stride + pick(0, 3);
    const std::int64_t at_a = pick(0, 3);
    const std::int64_t at_b = pick(0, std::max(sa.span(), block_stride) + 3);
    const std::size_t size = static_cast<std::size_t>(
        std::max(at_a + (blocks - 1) * block_stride + sa.span(), at_b + (blocks_b - 1) * stride_b + sb.span()));
    std::vector<E> buf(size);
    const auto a = view_of(buf.data() + at_a, blocks, block_stride, sa);
    const auto b = view_of(buf.data() + at_b, blocks_b, stride_b, sb);
    const bool bytes = bytes_shared(buf.data(), size, a, b);
    const bool rows_ab = rotary::detail::caches_share_rows(a, b);
    const bool rows_ba = rotary::detail::caches_share_rows(b, a);
    const auto what = [&] {
      return rotary::detail::concat("case ", i, ": blocks ", blocks, "/", blocks_b, " x stride ", block_stride, "/",
                                    stride_b, "; a at ", at_a, ": ", sa.block_size, " slots x ", sa.heads,
                                    " heads of ", sa.head_dim, ", strides ", sa.slot_stride, "/", sa.head_stride,
                                    "; b at ", at_b, ": ", sb.block_size, " x ", sb.heads, " of ", sb.head_dim, ", ",
                                    sb.slot_stride, "/", sb.head_stride, " ", rotary_test::seed_note());
    };
    if (same_blocks) {
      ASSERT_EQ(rows_ab, bytes) << what();
      ASSERT_EQ(rows_ba, bytes) << what();
    } else if (bytes) {  // never accepted when rows meet
      ASSERT_TRUE(rows_ab && rows_ba) << what();
    }
    const bool extents_meet = rotary::detail::overlap(a.extent(), b.extent());
    apart += extents_meet ? 0 : 1;
    interleaved += extents_meet && !bytes ? 1 : 0;
    shared += bytes ? 1 : 0;
  }
  // each kind occurs often enough to mean something
  EXPECT_GT(apart, 200);
  EXPECT_GT(interleaved, 200);
  EXPECT_GT(shared, 200);
}

TEST(CachePairs, RowsMeetExactlyWhenBytesDo) {
  std::mt19937_64 rng(rotary_test::seed() + 5);
  check_cache_pairs<float>(rng);
  check_cache_pairs<rotary::f16>(rng);
  check_cache_pairs<double>(rng);
}

// Interleaved caches of model sizes, as views (nothing is read or written through them; one block
// pair of memory backs their first rows): FlashInfer's pages [blocks, 2, 16, 8, 128] at 100k and 2^40
// blocks, k and v heads alternating ([heads, 2, 128]) in one block of 2^30 slots, MLA's [512 | 64]
// rows in 2^40 blocks. The check walked every block (2^40 did not finish) and every row of a block;
// it is O(1) now. Moved by one element, the caches share rows. Then a 1-token call over 100k pages.
TEST(CachePairs, ManyBlocksAndSlotsAreDecidedWithoutAWalk) {
  if (sizeof(void*) < 8) GTEST_SKIP() << "views of more than 4 GiB";
  using rotary::detail::caches_share_rows;
  const std::int64_t S = 16, H = 8, D = 128;
  std::vector<float> pair(static_cast<std::size_t>(2 * S * H * D));
  for (const std::int64_t blocks : {std::int64_t{100000}, std::int64_t{1} << 40}) {
    const auto view = [&](std::ptrdiff_t at) {
      return KvCacheView<float>::strided(pair.data() + at, blocks, S, H, D, 2 * S * H * D, H * D, D);
    };
    EXPECT_FALSE(caches_share_rows(view(0), view(S * H * D))) << blocks;
    EXPECT_FALSE(caches_share_rows(view(S * H * D), view(0))) << blocks;
    EXPECT_TRUE(caches_share_rows(view(0), view(S * H * D - 1))) << blocks;
    EXPECT_TRUE(caches_share_rows(view(1), view(S * H * D))) << blocks;
  }
  const std::int64_t slots = std::int64_t{1} << 30;
  const auto alternating = [&](std::ptrdiff_t at) {
    return KvCacheView<float>::strided(pair.data() + at, 1, slots, H, D, slots * H * 2 * D, H * 2 * D, 2 * D);
  };
  EXPECT_FALSE(caches_share_rows(alternating(0), alternating(D)));
  EXPECT_TRUE(caches_share_rows(alternating(0), alternating(D - 1)));
  EXPECT_TRUE(caches_share_rows(alternating(D + 1), alternating(0)));
  const std::int64_t mla_blocks = std::int64_t{1} << 40, mla_slots = 4;  // [blocks, 4, 512 + 64]
  const auto mla = [&](std::ptrdiff_t at, std::int64_t dim) {
    return KvCacheView<float>::strided(pair.data() + at, mla_blocks, mla_slots, 1, dim, mla_slots * 576, 576, dim);
  };
  EXPECT_FALSE(caches_share_rows(mla(0, 512), mla(512, 64)));
  EXPECT_TRUE(caches_share_rows(mla(0, 512), mla(511, 64)));

  // a decode step over 100k FlashInfer pages (2 slots of one head of 4): the bytes of separate caches
  const std::int64_t B = 100000, P = 2, d = 4;
  const rotary::Rope<float> rope(rotary::RotarySpec(d), 64);
  const std::vector<float> q0 = {0.5f, -1.0f, 2.0f, 0.25f}, k = {1.0f, 2.0f, -3.0f, 4.0f}, v = {5.0f, 6.0f, 7.0f, 8.0f};
  const StridedLayout one{1, 1, d, d};
  const std::vector<std::int64_t> slot = {2 * B - 1};
  std::vector<float> buf(static_cast<std::size_t>(B * 2 * P * d), 0.0f), kc(buf.size() / 2), vc(kc.size());
  std::vector<float> q = q0, q_sep = q0;
  rotary::rope_kv_write(rope, q.data(), one, k.data(), one, v.data(), one, Positions::contiguous(9), Slots(slot),
                        KvCacheView<float>::strided(buf.data(), B, P, 1, d, 2 * P * d, d, d),
                        KvCacheView<float>::strided(buf.data() + P * d, B, P, 1, d, 2 * P * d, d, d));
  rotary::rope_kv_write(rope, q_sep.data(), one, k.data(), one, v.data(), one, Positions::contiguous(9), Slots(slot),
                        KvCacheView<float>::paged(kc.data(), B, P, 1, d), KvCacheView<float>::paged(vc.data(), B, P, 1, d));
  EXPECT_TRUE(same_bytes(q, q_sep));
  const std::size_t last = buf.size() - 2 * P * d;  // the last page: k's 2 slots, then v's
  EXPECT_EQ(std::memcmp(buf.data() + last + d, kc.data() + kc.size() - d, d * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(buf.data() + last + 3 * d, vc.data() + vc.size() - d, d * sizeof(float)), 0);
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 0.0f), static_cast<std::ptrdiff_t>(buf.size()) - 2 * d);
}

}  // namespace
