// Fused attention prologues (fusion.hpp, kv_cache.hpp), what they compute: the fp8 and int8 codes,
// every ISA's cache row and norm kernels against the scalar kernel's bits, every fused op against
// rotary's unfused ops run one after another (bit for bit), QK-norm + RoPE against the explicit
// rotation matrix, MLA and the QKV split against their unfused forms. Refusals: test_fusion_errors.
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

// The fp8 encoder against a nearest-value search over all 256 codes; int8 rows against vLLM's
// formula (scale = absmax / 127, codes round-half-even of x * (127.0f / absmax) in f32), and against
// double for rows whose f32 multiplier overflows.

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

// Every ISA's bytes and int8 scales equal the scalar kernel's, rows of 1..512 values (every SIMD
// tail), unaligned, ties, boundaries, subnormals, NaN, infinities, random bits; nothing written past
// a row.

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
// 1 row (no batch), 4 (one batch), 13 (three batches and a row left over), 37 and 70 (the kernels'
// blocks of up to 32 rows: one or more whole blocks, a part block, rows left over)), and the scalar kernel is
// within 4 ulp(compute type) of x / sqrt(mean(x^2) + eps) * w computed in long double (relative to the
// row's largest |x * factor * w|, plus half an ulp of the storage type).
template <class T>
void check_norm_kernels(std::mt19937_64& rng) {
  using C = rotary::compute_t<T>;
  for (const std::int64_t n : {1, 2, 7, 16, 17, 33, 64, 80, 100, 128, 130, 200, 256, 300}) {
    for (const std::int64_t rows :
         {std::int64_t{1}, std::int64_t{4}, std::int64_t{13}, std::int64_t{37}, std::int64_t{70}}) {
      SCOPED_TRACE(::testing::Message() << rotary::dtype_name<T>() << " n " << n << " rows " << rows << " "
                                        << rotary_test::seed_note());
      const std::int64_t stride = n + 3;  // rows start unaligned
      const auto x =
          rotary_test::random_vector<T>(static_cast<std::size_t>(rows * stride + 1), rng, -4.0, 4.0);
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
          // the reference in long double: for f64 rows a double reference rounds as much as the kernel
          const auto xl = [&](std::int64_t i) { return static_cast<long double>(rotary_test::to_d(xr[i])); };
          const auto wl = [&](std::int64_t i) {
            return weighted ? static_cast<long double>(w[static_cast<std::size_t>(i)]) : 1.0L;
          };
          long double ss = 0.0L;
          for (std::int64_t i = 0; i < n; ++i) ss += xl(i) * xl(i);
          const long double f =
              1.0L / std::sqrt(ss / static_cast<long double>(n) + static_cast<long double>(a.eps));
          long double top = 0.0L;
          for (std::int64_t i = 0; i < n; ++i) top = std::max(top, std::fabs(xl(i) * f * wl(i)));
          for (std::int64_t i = 0; i < n; ++i) {
            const long double expect = xl(i) * f * wl(i);
            const double got = rotary_test::to_d(ref[static_cast<std::size_t>(1 + r * stride + i)]);
            const double bound = 4.0 * rotary_test::ulp<C>(static_cast<double>(top)) +
                                 0.5 * rotary_test::ulp<T>(static_cast<double>(expect));
            ASSERT_LE(static_cast<double>(std::fabs(static_cast<long double>(got) - expect)), bound)
                << "row " << r << " element " << i;
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
}

TEST(NormKernels, EveryIsaGivesTheScalarBitsAndTheScalarIsWithinBounds) {
  std::mt19937_64 rng(rotary_test::seed() + 7);
  check_norm_kernels<float>(rng);
  check_norm_kernels<double>(rng);
  check_norm_kernels<rotary::f16>(rng);
  check_norm_kernels<rotary::bf16>(rng);
}

// ---- fused == composition -------------------------------------------------------------------------

// Every fused op equals, bit for bit, rotary's unfused ops run one after another (rms_norm,
// apply_strided, rms_norm weightless, write_kv_cache): q outputs, every byte of the K and V caches
// (untouched slots keep their bytes) and the int8 scales; for f32/f16/bf16/f64 vectors x cache
// f32/f16/bf16/int8/fp8 (f64: f64/f32 caches), both pairings, partial rotary, the four cache layouts,
// slot mappings with padding and per-sequence offsets, every norm variant, a cache-free Rope, one
// and two threads, on every ISA this machine runs (the composition is computed once, on scalar).

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

// MLA: against an interleaved Rope followed by the de-interleaving permutation; the latent and
// k_pe side by side in one slot row. QKV split: against the same call on separate q, k, v copies.

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

}  // namespace
