// f16 and bf16 storage: conversions bit for bit, and kernels that compute in f32 and round to
// nearest even once. Bounds: |y - R x| <= 1/2 ulp_storage(R x) + 2 ulp_f32(|R||x|) per coordinate
// (the f32 kernel's own bound, then one rounding to the storage type).
#include <cstring>

#include "support.hpp"

namespace {

using rotary::bf16;
using rotary::f16;
using rotary::Pairing;
namespace rd = rotary::detail;

template <class T>
std::uint16_t bits(T x) {
  return Eigen::numext::bit_cast<std::uint16_t>(x);
}

// Our conversions against Eigen's on all finite values (f16: every pattern; bf16 every pattern;
// f32 -> f16/bf16 on a sweep of f32 patterns). Eigen agrees except where rotary's documented
// rules differ: bf16 flushes f32 subnormals to zero (as AVX512-BF16 does); NaN payloads.
TEST(Conversions, AgreeWithEigenOnFiniteValues) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto u = static_cast<std::uint16_t>(h);
    const float a = rd::f16_bits_to_f32(u);
    const float b = static_cast<float>(Eigen::numext::bit_cast<f16>(u));
    if (rotary::detail::is_nan(b)) {
      EXPECT_TRUE(rotary::detail::is_nan(a)) << std::hex << h;
    } else {
      EXPECT_EQ(rd::float_bits(a), rd::float_bits(b)) << std::hex << h;
    }
    const float c = rd::bf16_bits_to_f32(u);
    const float d = static_cast<float>(Eigen::numext::bit_cast<bf16>(u));
    if (!rotary::detail::is_nan(d)) {
      EXPECT_EQ(rd::float_bits(c), rd::float_bits(d)) << std::hex << h;
    }
  }
  long checked = 0;
  for (std::uint64_t i = 0; i < (std::uint64_t{1} << 32); i += 65521) {  // prime stride: all exponents
    const auto u = static_cast<std::uint32_t>(i);
    const float f = rd::bits_float(u);
    if (rotary::detail::is_nan(f)) continue;
    EXPECT_EQ(rd::f32_to_f16_bits(f), bits(f16(f))) << std::hex << u;
    const bool subnormal = (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
    if (!subnormal) {
      EXPECT_EQ(rd::f32_to_bf16_bits(f), bits(bf16(f))) << std::hex << u;
    } else {
      EXPECT_EQ(rd::f32_to_bf16_bits(f), static_cast<std::uint16_t>((u >> 16) & 0x8000u));
    }
    ++checked;
  }
  EXPECT_GT(checked, 60000);
  EXPECT_TRUE(rotary::detail::is_nan(rd::f16_bits_to_f32(rd::f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(rotary::detail::is_nan(rd::bf16_bits_to_f32(rd::f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

// The row widenings a caller's f16 cos/sin table goes through (table.hpp): the branch-free loop and,
// where the CPU has it, F16C's vcvtph2ps give f16_bits_to_f32's bits for every pattern, NaNs
// included (quiet, payload kept), at every length and misalignment (the vector body and its tail).
TEST(Conversions, F16RowWideningIsBitExact) {
  std::vector<f16> all(65536 + 7);
  for (std::uint32_t h = 0; h < all.size(); ++h) all[h] = Eigen::numext::bit_cast<f16>(static_cast<std::uint16_t>(h));
  for (const bool f16c : {false, rotary::detail::cpu_features().avx2_set()}) {
    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      std::vector<float> out(65536, -1.0f);
      rd::widen_f16_row(all.data() + offset, out.data(), 65536, f16c);
      int bad = 0;
      for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto u = static_cast<std::uint16_t>(i + offset);
        if (rd::float_bits(out[i]) != rd::float_bits(rd::f16_bits_to_f32(u)) && ++bad < 5)
          ADD_FAILURE() << std::hex << u << (f16c ? " (F16C)" : " (loop)") << " offset " << offset;
      }
      EXPECT_EQ(bad, 0);
    }
    for (std::int64_t n = 0; n < 20; ++n) {  // short rows: only the tail, or one vector and a tail
      std::vector<float> out(static_cast<std::size_t>(n) + 1, 7.0f);
      rd::widen_f16_row(all.data() + 0x3c00, out.data(), n, f16c);
      for (std::int64_t i = 0; i < n; ++i)
        EXPECT_EQ(rd::float_bits(out[static_cast<std::size_t>(i)]),
                  rd::float_bits(rd::f16_bits_to_f32(static_cast<std::uint16_t>(0x3c00 + i))));
      EXPECT_EQ(out[static_cast<std::size_t>(n)], 7.0f) << "wrote past " << n << " values";
    }
  }
}

template <class T>
void check_dtype(Pairing pairing) {
  std::mt19937_64 rng(rotary_test::seed());
  double worst = 0.0;  // in ulps of the storage type
  for (std::int64_t head_dim : rotary_test::head_dims()) {
    const std::int64_t rd_ = rotary_test::rotary_dim_for(head_dim, 0.75);
    const rotary::RotarySpec spec(head_dim, pairing, 10000.0, rd_);
    const auto positions = rotary_test::random_positions(5, 2147483647, rng);
    const auto cache = rotary::CosSinCache<float>::for_positions(rotary::compute_frequencies(spec), positions);
    const rotary::Rope<T> rope(spec, cache);
    const rotary::Rope<float> rope32(spec, cache);
    const std::int64_t heads = 3;
    const std::int64_t rows = 5 * heads;
    rotary::RowMatrix<T> x(rows, head_dim);
    rotary::RowMatrix<float> x32(rows, head_dim);
    std::uniform_real_distribution<float> d(-4.0f, 4.0f);
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      x.data()[i] = T(d(rng));
      x32.data()[i] = static_cast<float>(x.data()[i]);
    }
    rotary::RowMatrix<T> y(rows, head_dim);
    rotary::apply(rope, x, y, rotary::Positions(positions), heads);
    rotary::apply(rope32, x32, rotary::Positions(positions), heads);
    for (Eigen::Index r = 0; r < rows; ++r) {
      std::vector<double> c;
      std::vector<double> s;
      rotary_test::cache_row(cache, positions[static_cast<std::size_t>(r / heads)], c, s);
      const Eigen::MatrixXd m = rotary::reference::rotation_matrix_from(c, s, head_dim, pairing);
      Eigen::VectorXd xv(head_dim);
      for (std::int64_t k = 0; k < head_dim; ++k) xv(k) = static_cast<double>(static_cast<float>(x(r, k)));
      const Eigen::VectorXd ref = m * xv;
      const Eigen::VectorXd scale = m.cwiseAbs() * xv.cwiseAbs();
      for (std::int64_t k = 0; k < head_dim; ++k) {
        // bit for bit: the storage result is the f32 kernel's result rounded once
        ASSERT_EQ(bits(y(r, k)), bits(T(x32(r, k)))) << "row " << r << " k " << k << " head_dim " << head_dim;
        const double got = static_cast<double>(static_cast<float>(y(r, k)));
        // ulp of the storage type at ref: f32's scaled by the missing significand bits (f16 has a
        // fixed spacing of 2^-24 below its smallest normal, 2^-14)
        const double ulp_t = std::is_same_v<T, f16>
                                 ? std::max(rotary_test::ulp<float>(ref(k)) * 8192.0, 0x1p-24)
                                 : rotary_test::ulp<float>(ref(k)) * 65536.0;
        const double bound = 0.5 * ulp_t + 2.0 * rotary_test::ulp<float>(scale(k));
        if (k < rd_) {
          worst = std::max(worst, std::fabs(got - ref(k)) / ulp_t);
          ASSERT_LE(std::fabs(got - ref(k)), bound) << "row " << r << " k " << k << " head_dim " << head_dim;
        } else {
          ASSERT_EQ(bits(y(r, k)), bits(x(r, k))) << "pass-through changed";
        }
      }
    }
  }
  std::printf("%s %s: max %.3f ulp of the storage type vs the matrix in double\n",
              std::string(rotary::dtype_name<T>()).c_str(), std::string(rotary::to_string(pairing)).c_str(), worst);
}

TEST(Dtypes, F16InterleavedMatchesRoundedF32) { check_dtype<f16>(Pairing::interleaved); }
TEST(Dtypes, F16HalfSplitMatchesRoundedF32) { check_dtype<f16>(Pairing::half_split); }
TEST(Dtypes, Bf16InterleavedMatchesRoundedF32) { check_dtype<bf16>(Pairing::interleaved); }
TEST(Dtypes, Bf16HalfSplitMatchesRoundedF32) { check_dtype<bf16>(Pairing::half_split); }

}  // namespace
