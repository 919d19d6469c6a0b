// KV-cache re-rotation: context shift by a position delta, and a change of frequency set at fixed
// positions, both against rotating the original keys directly (and against a long-double reference).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

using rotary::AttentionFactor;
using rotary::CosSinCache;
using rotary::Frequencies;
using rotary::Pairing;
using rotary::Rope;
using rotary::RopeParameters;
using rotary::RotarySpec;
using rotary::ScalingInput;
using rotary_test::to_d;

template <class T>
using C = rotary::compute_t<T>;

template <class T>
Rope<T> rope_for(const RotarySpec& spec, const Frequencies& f, std::vector<std::int64_t> positions,
                 AttentionFactor factor = AttentionFactor::fold) {
  RotarySpec with_f = spec;
  with_f.frequencies = f;  // a Rope takes only its spec's frequencies
  return Rope<T>(with_f, CosSinCache<C<T>>::for_positions(f, std::move(positions), factor));
}

Frequencies yarn(double s, std::int64_t d) {
  RopeParameters p;
  p.rope_type = "yarn";
  p.rope_theta = 1e6;
  p.factor = s;
  p.original_max_position_embeddings = 4096;
  ScalingInput in;
  in.head_dim = d;
  in.max_position_embeddings = 4096 * static_cast<std::int64_t>(s);
  return rotary::scaled_frequencies(p, in);
}

// Phi-3-style longrope over `pairs` pairs; short or long set chosen by seq_len.
Frequencies longrope(std::int64_t d, std::int64_t seq_len) {
  RopeParameters p;
  p.rope_type = "longrope";
  p.original_max_position_embeddings = 4096;
  for (std::int64_t i = 0; i < d / 2; ++i) {
    p.short_factor.push_back(1.0 + 0.05 * static_cast<double>(i));
    p.long_factor.push_back(1.0 + 1.5 * static_cast<double>(i));
  }
  ScalingInput in;
  in.head_dim = d;
  in.max_position_embeddings = 131072;
  in.seq_len = seq_len;
  return rotary::scaled_frequencies(p, in);
}

Frequencies dynamic(std::int64_t d, std::int64_t seq_len) {
  RopeParameters p;
  p.rope_type = "dynamic";
  p.factor = 4.0;
  ScalingInput in;
  in.head_dim = d;
  in.max_position_embeddings = 4096;
  in.seq_len = seq_len;
  return rotary::scaled_frequencies(p, in);
}

// max over rows of max_i |got - want| / ulp<T>(row scale), row scale = max_i |want| over the head.
template <class T>
double ulps_apart(const rotary::RowMatrix<T>& got, const rotary::RowMatrix<T>& want) {
  double worst = 0.0;
  for (Eigen::Index r = 0; r < got.rows(); ++r) {
    double scale = 0.0;
    for (Eigen::Index c = 0; c < got.cols(); ++c) scale = std::max(scale, std::fabs(to_d(want(r, c))));
    const double u = rotary_test::ulp<T>(scale);
    for (Eigen::Index c = 0; c < got.cols(); ++c)
      worst = std::max(worst, std::fabs(to_d(got(r, c)) - to_d(want(r, c))) / u);
  }
  return worst;
}

template <class T>
rotary::RowMatrix<T> random_keys(std::int64_t rows, std::int64_t head_dim, std::mt19937_64& rng) {
  rotary::RowMatrix<T> x(rows, head_dim);
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    for (Eigen::Index c = 0; c < x.cols(); ++c) x(r, c) = static_cast<T>(d(rng));
  return x;
}

// Storage ulps (of the row's largest element) allowed between re-rotated keys and keys rotated
// directly. Both paths compute in compute_t<T> with the same kernels; the re-rotated key went through
// one more rounded rotation (float FMA/rounding, about 1 ulp each, and the stored key's own rounding),
// so for f32/f64, whose storage and compute precision agree, the two can differ by up to 3 ulps
// (observed: f32 <= 3, usually 2; f64 <= 4 in double ulps). Against the exact (f64) rotation of the
// original keys, shifted f32 keys stay within 2 ulps (asserted below). For f16/bf16 the storage rounding
// dominates and the paths agree within 1 storage ulp (bound 2).
template <class T>
double tolerance() {
  if constexpr (std::is_same_v<T, float>) {
    return 3.0;
  } else if constexpr (std::is_same_v<T, double>) {
    return 6.0;  // double tables are within ~1 double ulp (not correctly rounded), plus the identity's few ulps
  } else {
    return 2.0;
  }
}

template <class T>
class Rerotate : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, double, rotary::f16, rotary::bf16>;
TYPED_TEST_SUITE(Rerotate, StorageTypes, );

TYPED_TEST(Rerotate, ShiftEqualsRotatingAtTheShiftedPosition) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed());
  double worst = 0.0;
  double worst_exact_shift = 0.0;
  double worst_exact_direct = 0.0;
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    for (const auto& [head_dim, rotary_dim] : {std::pair<std::int64_t, std::int64_t>{128, 128}, {70, 64}}) {
      const RotarySpec spec(head_dim, pairing, 1e6, rotary_dim);
      const Frequencies f = yarn(8.0, rotary_dim);
      const std::int64_t tokens = 9;
      const std::int64_t heads = 3;
      for (const std::int64_t delta : {std::int64_t{-5}, std::int64_t{7}, std::int64_t{-4096}, std::int64_t{1} << 24,
                                       std::int64_t{-1000000}}) {
        // positions m with m and m + delta both in [0, 2^31 - 1]
        const std::int64_t lo = std::max<std::int64_t>(0, -delta);
        const std::int64_t hi = std::min<std::int64_t>(2147483647, 2147483647 - delta);
        std::uniform_int_distribution<std::int64_t> pos(lo, hi);
        std::vector<std::int64_t> m(static_cast<std::size_t>(tokens));
        for (auto& v : m) v = pos(rng);
        m[0] = lo;
        m[1] = hi;
        std::vector<std::int64_t> shifted(m);
        for (auto& v : shifted) v += delta;
        std::vector<std::int64_t> all(m);
        all.insert(all.end(), shifted.begin(), shifted.end());
        const Rope<T> rope = rope_for<T>(spec, f, all);

        const auto x = random_keys<T>(tokens * heads, head_dim, rng);
        rotary::RowMatrix<T> keys = x;
        rotary::apply(rope, keys, m, heads);           // cached keys, rotated at m
        rotary::shift_keys(rope, keys, delta, heads);  // context shift
        rotary::RowMatrix<T> want = x;
        rotary::apply(rope, want, shifted, heads);     // rotated at m + delta directly
        const double e = ulps_apart<T>(keys, want);
        worst = std::max(worst, e);
        if constexpr (std::is_same_v<T, float>) {
          // Both against the double-precision rotation of the original keys at m + delta.
          const RotarySpec& sp = spec;
          const Rope<double> exact = rope_for<double>(sp, f, shifted);
          rotary::RowMatrix<double> xd = x.template cast<double>();
          rotary::apply(exact, xd, shifted, heads);
          const rotary::RowMatrix<float> xr = xd.cast<float>();
          worst_exact_shift = std::max(worst_exact_shift, ulps_apart<float>(keys, xr));
          worst_exact_direct = std::max(worst_exact_direct, ulps_apart<float>(want, xr));
          EXPECT_LE(ulps_apart<float>(keys, xr), 2.0) << "delta " << delta << " " << rotary_test::seed_note();
        }
        EXPECT_LE(e, tolerance<T>()) << "delta " << delta << " head_dim " << head_dim << " " << rotary_test::seed_note();

        // Per-token deltas: each token its own shift (here: token t by delta + t, where still in range).
        std::vector<std::int64_t> deltas(static_cast<std::size_t>(tokens));
        std::vector<std::int64_t> target(static_cast<std::size_t>(tokens));
        for (std::size_t t = 0; t < deltas.size(); ++t) {
          deltas[t] = (m[t] + delta + static_cast<std::int64_t>(t) <= 2147483647) ? delta + static_cast<std::int64_t>(t)
                                                                                   : delta;
          target[t] = m[t] + deltas[t];
        }
        std::vector<std::int64_t> both(m);
        both.insert(both.end(), target.begin(), target.end());
        const Rope<T> rope2 = rope_for<T>(spec, f, both);
        rotary::RowMatrix<T> k2 = x;
        rotary::apply(rope2, k2, m, heads);
        rotary::shift_keys(rope2, k2, rotary::Positions(deltas), heads);
        rotary::RowMatrix<T> w2 = x;
        rotary::apply(rope2, w2, target, heads);
        const double e2 = ulps_apart<T>(k2, w2);
        worst = std::max(worst, e2);
        EXPECT_LE(e2, tolerance<T>()) << "per-token deltas around " << delta;
      }
    }
  }
  std::printf("shift_keys<%s>: max %.2f ulp (of the row scale) from rotating at m + delta directly\n",
              std::string(rotary::dtype_name<T>()).c_str(), worst);
  if constexpr (std::is_same_v<T, float>)
    std::printf("  vs f64 rotation of the original keys at m + delta: shifted %.2f ulp, rotated directly %.2f ulp\n",
                worst_exact_shift, worst_exact_direct);
}

TYPED_TEST(Rerotate, ChangeOfFrequenciesEqualsRotatingWithTheNewSet) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed() + 1);
  const std::int64_t head_dim = 96;
  const std::int64_t tokens = 12;
  const std::int64_t heads = 2;
  struct Case {
    const char* name;
    Frequencies a;
    Frequencies b;
    std::int64_t max_m;
  };
  const std::vector<Case> cases = {
      // longrope: keys cached while seq_len <= L0 used the short factors; past L0 HF switches to long.
      {"longrope short->long", longrope(head_dim, 100), longrope(head_dim, 5000), 4096},
      // dynamic NTK: the base moves with the sequence length.
      {"dynamic n=5000->9000", dynamic(head_dim, 5000), dynamic(head_dim, 9000), 9000},
      // yarn 4 -> 8: different theta and a different folded attention factor
      {"yarn s=4->8 (factor)", yarn(4.0, head_dim), yarn(8.0, head_dim), 2147483647},
      {"default->yarn s=16", rotary::default_frequencies(head_dim, 1e6), yarn(16.0, head_dim), 2147483647},
  };
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    const RotarySpec spec(head_dim, pairing, 1e6);
    for (const auto& c : cases) {
      ASSERT_FALSE(c.a.theta == c.b.theta) << c.name;
      const auto m = rotary_test::random_positions(static_cast<std::size_t>(tokens), c.max_m, rng);
      for (const AttentionFactor af : {AttentionFactor::fold, AttentionFactor::separate}) {
        const Rope<T> from = rope_for<T>(spec, c.a, m, af);
        const Rope<T> to = rope_for<T>(spec, c.b, m, af);
        const auto x = random_keys<T>(tokens * heads, head_dim, rng);
        rotary::RowMatrix<T> keys = x;
        rotary::apply(from, keys, m, heads);
        rotary::rerotate_keys(from, to, keys, m, heads);
        rotary::RowMatrix<T> want = x;
        rotary::apply(to, want, m, heads);
        const double e = ulps_apart<T>(keys, want);
        EXPECT_LE(e, tolerance<T>()) << c.name << " " << rotary_test::seed_note();
        std::printf("rerotate_keys<%s> %-22s %-9s %s: %.2f ulp from rotating with B directly\n",
                    std::string(rotary::dtype_name<T>()).c_str(), c.name,
                    af == AttentionFactor::fold ? "fold" : "separate",
                    pairing == Pairing::half_split ? "half-split " : "interleaved", e);
      }
    }
  }
}

// Exactness of the combined angle itself (f32 rows vs long double): rotate unit pairs.
TEST(RerotateExact, CombinedAngleRowsAreCorrectlyRoundedAtLargePositions) {
  const std::int64_t head_dim = 64;
  const RotarySpec spec(head_dim, Pairing::half_split, 1e6);
  const Frequencies a = yarn(4.0, head_dim);
  const Frequencies b = yarn(32.0, head_dim);
  const std::vector<std::int64_t> m = {0, 1, 1 << 24, 2147483647, std::int64_t{1} << 40};
  const Rope<float> from = rope_for<float>(spec, a, m, AttentionFactor::separate);
  const Rope<float> to = rope_for<float>(spec, b, m, AttentionFactor::separate);
  // keys = (1, 0) in every pair: after re-rotation they hold (cos, sin) of m*(thetaB - thetaA).
  rotary::RowMatrix<float> keys = rotary::RowMatrix<float>::Zero(static_cast<Eigen::Index>(m.size()), head_dim);
  keys.leftCols(head_dim / 2).setOnes();
  rotary::rerotate_keys(from, to, keys, m, 1);
  double worst = 0.0;
  for (std::size_t t = 0; t < m.size(); ++t)
    for (std::int64_t j = 0; j < head_dim / 2; ++j) {
      const long double ang = static_cast<long double>(m[t]) * static_cast<long double>(b.theta[static_cast<std::size_t>(j)]) -
                              static_cast<long double>(m[t]) * static_cast<long double>(a.theta[static_cast<std::size_t>(j)]);
      // m*theta in long double: 64-bit products, error <= 2^40 * 2^-64 rad at m = 2^40; fine at the
      // positions <= 2^31 where the bound below is asserted.
      const double ec = static_cast<double>(std::fabs(keys(static_cast<Eigen::Index>(t), j) - std::cos(ang)));
      const double es =
          static_cast<double>(std::fabs(keys(static_cast<Eigen::Index>(t), j + head_dim / 2) - std::sin(ang)));
      if (m[t] <= 2147483647) {
        EXPECT_LE(ec, 0x1p-24) << "m " << m[t] << " j " << j;
        EXPECT_LE(es, 0x1p-24) << "m " << m[t] << " j " << j;
        worst = std::max({worst, ec, es});
      }
    }
  std::printf("rerotate rows (yarn s=4 -> s=32, f32): max |err| %.3e vs long double up to m = 2^31-1 (2^-24 = %.3e)\n",
              worst, 0x1p-24);
}

TEST(RerotateExact, RoundTripAndShiftInverse) {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  const RotarySpec spec(128, Pairing::half_split, 1e6);
  const Frequencies a = longrope(128, 10);
  const Frequencies b = longrope(128, 10000);
  const auto m = rotary_test::random_positions(16, 4096, rng);
  const Rope<double> from = rope_for<double>(spec, a, m);
  const Rope<double> to = rope_for<double>(spec, b, m);
  const auto x = random_keys<double>(16 * 4, 128, rng);
  rotary::RowMatrix<double> k = x;
  rotary::rerotate_keys(from, to, k, m, 4);
  rotary::rerotate_keys(to, from, k, m, 4);
  EXPECT_LE((k - x).cwiseAbs().maxCoeff(), 1e-14);
  rotary::shift_keys(from, k, std::int64_t{-123456789}, 4);
  rotary::shift_keys(from, k, std::int64_t{123456789}, 4);
  EXPECT_LE((k - x).cwiseAbs().maxCoeff(), 1e-14);
  // A zero shift and a same-set re-rotation are the identity up to rounding of cos = 1, sin = 0 (exact).
  rotary::shift_keys(from, k, std::int64_t{0}, 4);
  rotary::rerotate_keys(from, from, k, m, 4);
  EXPECT_LE((k - x).cwiseAbs().maxCoeff(), 1e-14);
}

TEST(RerotateExact, StridedThreadedAndOnTheFlyAgree) {
  std::mt19937_64 rng(rotary_test::seed() + 3);
  const std::int64_t head_dim = 64;
  const std::int64_t tokens = 100;
  const std::int64_t heads = 4;
  const RotarySpec spec(head_dim, Pairing::interleaved, 1e6);
  const Frequencies a = dynamic(head_dim, 5000);
  const Frequencies b = dynamic(head_dim, 50000);
  std::vector<std::int64_t> m(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) m[static_cast<std::size_t>(t)] = 1000 + 7 * t;
  RotarySpec spec_a = spec;
  RotarySpec spec_b = spec;
  spec_a.frequencies = a;
  spec_b.frequencies = b;
  const Rope<float> from(spec_a, rotary::OnTheFly{});  // cache-free ropes carry their theta too
  const Rope<float> to(spec_b, rotary::OnTheFly{});
  const auto x = random_keys<float>(tokens * heads, head_dim, rng);
  rotary::RowMatrix<float> serial = x;
  rotary::rerotate_keys(from, to, serial, m, heads);
  rotary::RowMatrix<float> threaded = x;
  {
    const rotary_test::SplitAlways split;  // 100 x 4 x 64 f32: below the minimum work for two threads
    rotary::rerotate_keys(from, to, threaded, m, heads, rotary::thread_parallel_for(2));
  }
  EXPECT_EQ(serial, threaded);
  // Strided: [heads][tokens][head_dim] layout (token stride head_dim, head stride tokens*head_dim).
  std::vector<float> buf(static_cast<std::size_t>(tokens * heads * head_dim));
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < head_dim; ++i)
        buf[static_cast<std::size_t>((h * tokens + t) * head_dim + i)] = x(t * heads + h, i);
  rotary::StridedLayout l{tokens, heads, head_dim, tokens * head_dim};
  rotary::rerotate_keys_strided(from, to, buf.data(), l, rotary::Positions(m));
  rotary::shift_keys_strided(from, buf.data(), l, std::int64_t{3});
  rotary::RowMatrix<float> eig = x;
  rotary::rerotate_keys(from, to, eig, m, heads);
  rotary::shift_keys(from, eig, std::int64_t{3}, heads);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < head_dim; ++i)
        ASSERT_EQ(buf[static_cast<std::size_t>((h * tokens + t) * head_dim + i)], eig(t * heads + h, i));
}

TEST(RerotateErrors, BadArgumentsThrow) {
  const RotarySpec spec(64);
  const Frequencies f = rotary::default_frequencies(64, 1e4);
  const Rope<float> r(spec, 10);
  rotary::RowMatrix<float> k = rotary::RowMatrix<float>::Zero(6, 64);
  const std::vector<std::int64_t> m = {1, 2, 3};
  EXPECT_THROW(rotary::shift_keys(r, k, std::vector<std::int64_t>{1, 2}, 2), rotary::error);  // 2 deltas, 3 tokens
  EXPECT_THROW(rotary::shift_keys(r, k, rotary::Positions::contiguous(5), 2), rotary::error);
  EXPECT_THROW(rotary::shift_keys(r, k, std::int64_t{1}, 4), rotary::error);  // 6 rows, 4 heads
  const Rope<float> other(RotarySpec(64, Pairing::interleaved), 10);
  EXPECT_THROW(rotary::rerotate_keys(r, other, k, m, 2), rotary::error);      // pairing differs
  const Rope<float> narrow(RotarySpec(64, Pairing::half_split, 1e4, 32), 10);
  EXPECT_THROW(rotary::rerotate_keys(r, narrow, k, m, 2), rotary::error);     // rotary_dim differs
  EXPECT_THROW(rotary::rerotate_keys(r, r, k, std::vector<std::int64_t>{1, -2, 3}, 2), rotary::error);
  EXPECT_THROW(rotary::rerotate_keys(r, r, k, std::vector<std::int64_t>{1, 2}, 2), rotary::error);
  EXPECT_NO_THROW(rotary::rerotate_keys(r, r, k, m, 2));
  EXPECT_NO_THROW(rotary::shift_keys(r, k, std::int64_t{-1000}, 2));  // negative deltas are fine
  (void)f;
}

// shift_keys reads its deltas (rerotate_keys its positions) block by block while the keys are
// rotated in place: keys sharing memory with them are refused, naming the array, and nothing is written.
// shift_keys accepted this before and gave wrong keys (deltas overwritten before they were read).
TEST(RerotateErrors, KeysApartFromDeltasAndPositions) {
  using rotary_test::expect_error;
  using rotary_test::same_bits;
  const std::int64_t D = 8;
  const std::int64_t T = 64;
  const Rope<float> r(RotarySpec(D), 16);
  const Rope<float> other(RotarySpec(D, Pairing::half_split, 5e5), 16);
  rotary::RowMatrix<float> k(T, D);
  for (Eigen::Index i = 0; i < k.size(); ++i) k.data()[i] = 0.25f + 0.01f * static_cast<float>(i % 13);
  const rotary::StridedLayout l{T, 1, D, D};
  const auto bytes = [&k] {
    return std::vector<float>(k.data(), k.data() + k.size());
  };
  // int64 deltas in rows 8.. of the keys
  std::vector<std::int64_t> d64(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < T; ++i) d64[static_cast<std::size_t>(i)] = 1000 + 17 * i;
  std::memcpy(k.data() + 8 * D, d64.data(), d64.size() * sizeof(std::int64_t));
  const auto* d64_inside = reinterpret_cast<const std::int64_t*>(k.data() + 8 * D);
  std::vector<float> before = bytes();
  expect_error([&] { rotary::shift_keys(r, k, rotary::Positions(d64_inside, T), 1); },
               {"output of keys and deltas share memory"});
  expect_error([&] { rotary::shift_keys_strided(r, k.data(), l, rotary::Positions(d64_inside, T)); },
               {"output of keys and deltas share memory"});
  EXPECT_TRUE(same_bits(bytes(), before));
  // int32 deltas in the last rows
  const std::vector<std::int32_t> d32(static_cast<std::size_t>(T), -3);
  std::memcpy(k.data() + (T - 8) * D, d32.data(), d32.size() * sizeof(std::int32_t));
  const auto* d32_inside = reinterpret_cast<const std::int32_t*>(k.data() + (T - 8) * D);
  before = bytes();
  expect_error([&] { rotary::shift_keys(r, k, rotary::Positions(d32_inside, T), 1); },
               {"output of keys and deltas share memory"});
  EXPECT_TRUE(same_bits(bytes(), before));
  // rerotate_keys' positions likewise
  std::vector<std::int64_t> m(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < T; ++i) m[static_cast<std::size_t>(i)] = i;
  std::memcpy(k.data() + 8 * D, m.data(), m.size() * sizeof(std::int64_t));
  const auto* m_inside = reinterpret_cast<const std::int64_t*>(k.data() + 8 * D);
  before = bytes();
  expect_error([&] { rotary::rerotate_keys(r, other, k, rotary::Positions(m_inside, T), 1); },
               {"output of keys and positions share memory"});
  expect_error([&] { rotary::rerotate_keys_strided(r, other, k.data(), l, rotary::Positions(m_inside, T)); },
               {"output of keys and positions share memory"});
  EXPECT_TRUE(same_bits(bytes(), before));
  // deltas right after the keys (apart): accepted, the same keys as a copy of the deltas gives
  std::vector<float> joined(static_cast<std::size_t>(T * D + 2 * T), 0.5f);
  std::memcpy(joined.data() + T * D, d64.data(), d64.size() * sizeof(std::int64_t));
  rotary::shift_keys_strided(r, joined.data(), l,
                             // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
                             rotary::Positions(reinterpret_cast<const std::int64_t*>(joined.data() + T * D), T));
  rotary::RowMatrix<float> expect = rotary::RowMatrix<float>::Constant(T, D, 0.5f);
  rotary::shift_keys(r, expect, rotary::Positions(d64), 1);
  EXPECT_EQ(Eigen::Map<rotary::RowMatrix<float>>(joined.data(), T, D), expect);
}

}  // namespace
