// Every kernel path against the explicit rotation matrix and the complex form, over every head_dim
// remainder, partial rotary, strides, unaligned pointers, in place / out of place, random int32
// positions. Tolerances:
//   vs matrix (same rounded cos/sin, in double):  |y - Rx| <= 2 ulp_T(|R| |x|) per coordinate
//     (|R||x| = |x0 c| + |x1 s|: the two terms can cancel, so ulps of y itself mean nothing)
//   vs complex<long double> (exact angle):       |y - y*| <= tol_T * (|x0| + |x1|)
//     with tol_f32 = 2^-22 (cache <= 2^-24 plus kernel rounding), tol_f64 = 1e-13 + m 2^-62
//     (the reference's own long double angle error)
//   pass-through coordinates: bit for bit; in place == out of place: bit for bit.
#include <cstring>

#include "support.hpp"

namespace {

using rotary::Direction;
using rotary::Pairing;

struct Stats {
  double max_ulps = 0.0;
  double max_rel_complex = 0.0;
  long cases = 0;
};

template <class T>
using StridedMap = Eigen::Map<rotary::RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// The long double reference angle (long double)m * theta carries up to m * 2^-64 rad of error
// itself, which dominates for double outputs at large positions.
template <class T>
double complex_tolerance(std::int64_t m) {
  return std::is_same_v<T, float> ? 0x1p-22 : 1e-13 + static_cast<double>(m) * 0x1p-62;
}

struct Case {
  std::int64_t head_dim;
  std::int64_t rotary_dim;
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t pad;        // row stride = head_dim + pad
  std::size_t misalign;    // elements: pointers off the allocation's alignment
  Pairing pairing;
  Direction dir;
  bool int32_positions;
};

std::string describe(const Case& c) {
  return rotary::detail::concat("head_dim ", c.head_dim, " rotary_dim ", c.rotary_dim, " tokens ",
                                c.tokens, " heads ", c.heads, " pad ", c.pad, " misalign ", c.misalign,
                                " ", rotary::to_string(c.pairing),
                                c.dir == Direction::inverse ? " inverse " : " forward ",
                                rotary_test::seed_note());
}

template <class T>
void check_case(const Case& c, std::mt19937_64& rng, Stats& stats) {
  const std::string what = describe(c);
  const double base = std::array<double, 3>{1e4, 5e5, 1e6}[rng() % 3];
  const rotary::RotarySpec spec(c.head_dim, c.pairing, base, c.rotary_dim);
  const auto positions64 = rotary_test::random_positions(static_cast<std::size_t>(c.tokens), 2147483647, rng);
  const std::vector<std::int32_t> positions32(positions64.begin(), positions64.end());
  const rotary::Positions positions =
      c.int32_positions ? rotary::Positions(positions32) : rotary::Positions(positions64);
  const rotary::Rope<T> rope(spec, rotary::CosSinCache<T>::for_positions(rotary::compute_frequencies(spec), positions64));

  const std::int64_t rows = c.tokens * c.heads;
  const std::int64_t stride = c.head_dim + c.pad;
  const auto n = static_cast<std::size_t>(rows * stride) + c.misalign;
  std::vector<T> in_buf = rotary_test::random_vector<T>(n, rng);
  std::vector<T> out_buf(n, std::numeric_limits<T>::quiet_NaN());
  std::vector<T> inplace_buf = in_buf;
  const StridedMap<T> in(in_buf.data() + c.misalign, rows, c.head_dim, Eigen::OuterStride<>(stride));
  StridedMap<T> out(out_buf.data() + c.misalign, rows, c.head_dim, Eigen::OuterStride<>(stride));
  StridedMap<T> inplace(inplace_buf.data() + c.misalign, rows, c.head_dim, Eigen::OuterStride<>(stride));

  rotary::apply(rope, in, out, positions, c.heads, c.dir);
  rotary::apply(rope, inplace, positions, c.heads, c.dir);

  const std::int64_t h = c.rotary_dim / 2;
  std::vector<double> cs;
  std::vector<double> sn;
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    rotary_test::cache_row(rope.cache(), positions64[t], cs, sn);
    Eigen::MatrixXd r = rotary::reference::rotation_matrix_from(cs, sn, c.head_dim, c.pairing);
    if (c.dir == Direction::inverse) r.transposeInPlace();
    for (std::int64_t head = 0; head < c.heads; ++head) {
      const std::int64_t row = t * c.heads + head;
      const Eigen::VectorXd x = in.row(row).transpose().template cast<double>();
      const Eigen::VectorXd y = out.row(row).transpose().template cast<double>();
      const Eigen::VectorXd y_ref = r * x;
      const Eigen::VectorXd scale = r.cwiseAbs() * x.cwiseAbs();
      const Eigen::VectorXd y_cplx =
          rotary::reference::rotate_complex(x, rope.cache().theta(), c.pairing, positions64[t], c.dir);
      ASSERT_EQ(0, std::memcmp(out.row(row).data(), inplace.row(row).data(), c.head_dim * sizeof(T)))
          << "in place != out of place at row " << row << ": " << what;
      for (std::int64_t k = 0; k < c.rotary_dim; ++k) {
        const double ulps = std::fabs(y(k) - y_ref(k)) / rotary_test::ulp<T>(scale(k));
        stats.max_ulps = std::max(stats.max_ulps, ulps);
        ASSERT_LE(ulps, 2.0) << "coordinate " << k << " row " << row << ": y " << y(k) << " Rx "
                             << y_ref(k) << ": " << what;
      }
      for (std::int64_t j = 0; j < h; ++j) {
        const std::int64_t a = rotary::reference::pair_first(c.pairing, j, h);
        const std::int64_t b = rotary::reference::pair_second(c.pairing, j, h);
        const double mag = std::fabs(x(a)) + std::fabs(x(b));
        const double err = std::max(std::fabs(y(a) - y_cplx(a)), std::fabs(y(b) - y_cplx(b)));
        if (mag > 0) stats.max_rel_complex = std::max(stats.max_rel_complex, err / mag);
        ASSERT_LE(err, complex_tolerance<T>(positions64[t]) * mag) << "pair " << j << " row " << row << ": " << what;
      }
      ASSERT_EQ(0, std::memcmp(out.row(row).data() + c.rotary_dim, in.row(row).data() + c.rotary_dim,
                               (c.head_dim - c.rotary_dim) * sizeof(T)))
          << "pass-through changed at row " << row << ": " << what;
      for (std::int64_t k = c.head_dim; k < stride && row + 1 < rows; ++k)  // gaps between rows
        ASSERT_TRUE(rotary_test::is_nan(out.data()[row * stride + k])) << "wrote into the row gap: " << what;
    }
  }
  ++stats.cases;
}

class KernelShapes : public ::testing::TestWithParam<std::tuple<std::int64_t, Pairing>> {};

template <class T>
void sweep(std::int64_t head_dim, Pairing pairing) {
  std::mt19937_64 rng(rotary_test::seed() + static_cast<std::uint64_t>(head_dim) * 2 +
                      (pairing == Pairing::interleaved ? 1 : 0));
  Stats stats;
  for (double fraction : {0.25, 0.5, 0.75, 1.0}) {
    const std::int64_t rd = rotary_test::rotary_dim_for(head_dim, fraction);
    for (std::int64_t tokens : {1, 3, 17}) {
      for (std::int64_t heads : {1, 3}) {
        for (Direction dir : {Direction::forward, Direction::inverse}) {
          const Case c{head_dim, rd, tokens, heads, static_cast<std::int64_t>(rng() % 3) * 5,
                       static_cast<std::size_t>(rng() % 2), pairing, dir, (rng() & 1) != 0};
          check_case<T>(c, rng, stats);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
  std::printf("%s head_dim %lld %s: %ld cases, max %.2f ulp vs matrix, max %.3g rel vs complex\n",
              std::is_same_v<T, float> ? "f32" : "f64", static_cast<long long>(head_dim),
              std::string(rotary::to_string(pairing)).c_str(), stats.cases, stats.max_ulps,
              stats.max_rel_complex);
}

TEST_P(KernelShapes, Float) { sweep<float>(std::get<0>(GetParam()), std::get<1>(GetParam())); }
TEST_P(KernelShapes, Double) { sweep<double>(std::get<0>(GetParam()), std::get<1>(GetParam())); }

INSTANTIATE_TEST_SUITE_P(
    AllRemainders, KernelShapes,
    ::testing::Combine(::testing::ValuesIn(rotary_test::head_dims()),
                       ::testing::Values(Pairing::interleaved, Pairing::half_split)),
    [](const auto& p) {
      return std::string(rotary::to_string(std::get<1>(p.param))) + "_" +
             std::to_string(std::get<0>(p.param));
    });

// 32 heads x 1000 tokens of contiguous positions from an offset: the prefill shape.
TEST(Kernels, PrefillFromOffsetMatchesPerTokenPositions) {
  const rotary::RotarySpec spec(128, Pairing::half_split);
  const rotary::Rope<float> rope(spec, 5000);
  std::mt19937_64 rng(rotary_test::seed());
  const std::int64_t tokens = 1000;
  const std::int64_t heads = 32;
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(tokens * heads, 128);
  rotary::RowMatrix<float> a(tokens * heads, 128);
  rotary::RowMatrix<float> b(tokens * heads, 128);
  rotary::apply(rope, x, a, rotary::Positions::contiguous(4000), heads);
  std::vector<std::int64_t> pos(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) pos[t] = 4000 + t;
  rotary::apply(rope, x, b, rotary::Positions(pos), heads);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  // Eigen int vectors work as positions too.
  Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> epos = Eigen::Map<Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>>(pos.data(), tokens);
  rotary::apply(rope, x, b, epos, heads);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(Kernels, StridedRawFormMatchesEigenForm) {
  // BHSD-like layout: heads outermost, token stride smaller than head stride.
  const rotary::RotarySpec spec(64, Pairing::interleaved, 10000.0, 32);
  const rotary::Rope<float> rope(spec, 64);
  const std::int64_t tokens = 5;
  const std::int64_t heads = 4;
  std::mt19937_64 rng(rotary_test::seed());
  auto bhsd = rotary_test::random_vector<float>(static_cast<std::size_t>(heads * tokens * 64), rng);
  auto bshd = bhsd;  // same values, re-laid out below
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      std::memcpy(&bshd[(t * heads + h) * 64], &bhsd[(h * tokens + t) * 64], 64 * sizeof(float));
  rotary::apply_strided(rope, bhsd.data(), rotary::StridedLayout{tokens, heads, 64, tokens * 64},
                        rotary::Positions::contiguous(7));
  Eigen::Map<rotary::RowMatrix<float>> x(bshd.data(), tokens * heads, 64);
  rotary::apply(rope, x, rotary::Positions::contiguous(7), heads);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      EXPECT_EQ(0, std::memcmp(&bshd[(t * heads + h) * 64], &bhsd[(h * tokens + t) * 64], 64 * sizeof(float)));
}

TEST(Kernels, UncheckedEqualsChecked) {
  const rotary::Rope<float> rope(rotary::RotarySpec(96, Pairing::interleaved), 100);
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(24, 96);
  rotary::RowMatrix<float> a(24, 96);
  rotary::RowMatrix<float> b(24, 96);
  rotary::apply(rope, x, a, rotary::Positions::contiguous(50), 8);
  rotary::unchecked::apply(rope, x, b, rotary::Positions::contiguous(50), 8);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Buffers ending at guard pages: the apply_strided row of test_guard_pages_rows' table (every head_dim
// here and more, every ISA and storage type, both ends of the buffers).

TEST(Kernels, ZeroTokensIsANoOp) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8), 4);
  rotary::RowMatrix<float> x(0, 8);
  EXPECT_NO_THROW(rotary::apply(rope, x, rotary::Positions::contiguous(0), 2));
}

}  // namespace
