// Cache-free mode: rows computed per call equal the exact cache's rows (or differ by one float ulp
// on near-ties), at large and non-consecutive positions, and the rotated outputs agree.
#include <cmath>
#include <cstring>

#include "support.hpp"

namespace {

using rotary::Pairing;
using rotary::Positions;

// Generator rows vs exact cache rows for the same positions: max difference in float ulps, and
// how many entries differ at all.
TEST(OnTheFly, RowsMatchExactCache) {
  std::mt19937_64 rng(rotary_test::seed());
  for (double base : {1e4, 5e5, 1e6}) {
    const rotary::Frequencies f = rotary::default_frequencies(128, base);
    const rotary::detail::RowGenerator<float> gen(f.theta, 1.0);
    // runs of consecutive positions with jumps, near 2^31 and beyond int32
    std::vector<std::int64_t> pos;
    for (std::int64_t start : {std::int64_t{0}, std::int64_t{2147483647} - 40, std::int64_t{1} << 40,
                               std::int64_t{123456789}})
      for (std::int64_t k = 0; k < 45; ++k) pos.push_back(start + k);
    for (int k = 0; k < 40; ++k) pos.push_back(static_cast<std::int64_t>(rng() % 2147483647));
    const auto cache = rotary::CosSinCache<float>::for_positions(f, pos);
    std::vector<float> rows(static_cast<std::size_t>(32 * 128));
    std::vector<double> state(128);
    long differing = 0;
    long total = 0;
    const Positions p(pos);
    for (std::int64_t t0 = 0; t0 < static_cast<std::int64_t>(pos.size()); t0 += 32) {
      const std::int64_t t1 = std::min<std::int64_t>(t0 + 32, static_cast<std::int64_t>(pos.size()));
      gen.fill(p, t0, t1, rows.data(), state.data());
      for (std::int64_t t = t0; t < t1; ++t) {
        const float* want = cache.row(pos[static_cast<std::size_t>(t)]);
        const float* got = rows.data() + (t - t0) * 128;
        for (int k = 0; k < 128; ++k) {
          ++total;
          if (got[k] != want[k]) {
            ++differing;
            ASSERT_LE(std::fabs(got[k] - want[k]), rotary_test::ulp<float>(want[k]))
                << "position " << pos[static_cast<std::size_t>(t)] << " k " << k;
          }
        }
      }
    }
    std::printf("base %g: %ld of %ld on-the-fly entries differ from the exact cache (each by 1 ulp)\n", base,
                differing, total);
    EXPECT_LE(differing, total / 1000);
  }
}

template <class T>
void compare_modes(Pairing pairing, const Positions& pos, std::int64_t tokens) {
  const rotary::RotarySpec spec(96, pairing, 500000.0, 64);
  std::vector<std::int64_t> held(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) held[static_cast<std::size_t>(t)] = pos[t];
  const rotary::Rope<T> cached(spec, rotary::Rope<T>::cache_type::for_positions(rotary::compute_frequencies(spec), held));
  const rotary::Rope<T> fly(spec, rotary::OnTheFly{});
  EXPECT_TRUE(fly.on_the_fly());
  EXPECT_EQ(fly.cache().size(), 0);
  rotary::RowMatrix<T> x(tokens * 4, 96);
  std::mt19937_64 rng(rotary_test::seed());
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = T(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 250.0f);
  rotary::RowMatrix<T> a(x.rows(), 96);
  rotary::RowMatrix<T> b(x.rows(), 96);
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  rotary::apply(cached, x, a, pos, 4);
  rotary::apply(fly, x, b, pos, 4, {rotary::Direction::forward, rotary::thread_parallel_for(2)});
  double worst = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    const double da = static_cast<double>(a.data()[i]);
    const double db = static_cast<double>(b.data()[i]);
    worst = std::max(worst, std::fabs(da - db));
  }
  // Rows differ by at most 1 float ulp (<= 2^-24 for |v| < 1): outputs by <= 2^-23 * |x0|+|x1| <= 8.
  const double bound = std::is_same_v<T, double> ? 1e-12 : std::is_same_v<T, float> ? 8 * 0x1p-22 : 8 * 0x1p-9;
  EXPECT_LE(worst, bound) << rotary::dtype_name<T>() << " " << rotary::to_string(pairing);
}

TEST(OnTheFly, OutputsMatchCachedMode) {
  std::vector<std::int64_t> jumps = {5, 6, 7, 1000, 1001, 3, 4, 4, 999, 100000};
  for (Pairing pairing : {Pairing::interleaved, Pairing::half_split}) {
    const auto n = static_cast<std::int64_t>(jumps.size());
    compare_modes<float>(pairing, Positions::contiguous(2147483000), 150);
    compare_modes<float>(pairing, Positions(jumps), n);
    compare_modes<double>(pairing, Positions::contiguous(77), 100);
    compare_modes<rotary::f16>(pairing, Positions::contiguous(0), 70);
    compare_modes<rotary::bf16>(pairing, Positions(jumps), n);
  }
}

// A spec carrying a scaling rule's frequencies (YaRN: theta ramp and attention factor 1 + 0.1 ln 4):
// the cache-free Rope uses them, not base^(-2j/d), and agrees with the table of the same spec.
// fill()'s vectorized row advance (two pairs per vector) gives advance()'s bits pair by pair, the
// pieces the multi-axis drivers use one pair at a time: f64 rows (no rounding to hide a last-bit
// difference), an odd number of pairs (the scalar tail), runs of consecutive positions.
TEST(OnTheFly, RowAdvanceEqualsPairByPair) {
  for (const std::int64_t pairs : {1, 2, 31, 64}) {
    std::vector<double> theta;
    for (std::int64_t j = 0; j < pairs; ++j)
      theta.push_back(std::pow(1e4, -2.0 * static_cast<double>(j) / static_cast<double>(2 * pairs)));
    const rotary::detail::RowGenerator<double> gen(theta, 1.25);
    for (const std::int64_t start : {std::int64_t{0}, std::int64_t{77777}, std::int64_t{1} << 40}) {
      const std::int64_t tokens = rotary::detail::RowGenerator<double>::kBlock;
      std::vector<double> rows(static_cast<std::size_t>(tokens * 2 * pairs));
      std::vector<double> state(static_cast<std::size_t>(2 * pairs));
      gen.fill(Positions::contiguous(start), 0, tokens, rows.data(), state.data());
      std::vector<double> c(static_cast<std::size_t>(pairs));
      std::vector<double> s(static_cast<std::size_t>(pairs));
      std::vector<double> want(static_cast<std::size_t>(2 * pairs));
      for (std::int64_t t = 0; t < tokens; ++t) {
        for (std::int64_t j = 0; j < pairs; ++j) {
          const auto k = static_cast<std::size_t>(j);
          if (t == 0)
            gen.anchor(j, start, c[k], s[k]);
          else
            gen.advance(j, c[k], s[k]);
        }
        gen.store_row(c.data(), s.data(), want.data());
        ASSERT_EQ(std::memcmp(want.data(), rows.data() + t * 2 * pairs, want.size() * sizeof(double)), 0)
            << pairs << " pairs from " << start << ", token " << t;
      }
    }
  }
}

TEST(OnTheFly, ScaledSpecUsesItsFrequencies) {
  rotary::RopeParameters p;
  p.rope_type = "yarn";
  p.factor = 4.0;
  p.original_max_position_embeddings = 32768;
  rotary::ScalingInput in;
  in.head_dim = 64;
  in.max_position_embeddings = 131072;
  rotary::RotarySpec spec(64, Pairing::half_split, 1e6);
  spec.frequencies = rotary::scaled_frequencies(p, in);
  ASSERT_GT(spec.frequencies.attention_factor, 1.1);
  const rotary::Rope<float> fly(spec, rotary::OnTheFly{});
  EXPECT_TRUE(rotary_test::same_bits(fly.cache().theta(), spec.frequencies.theta));
  EXPECT_EQ(fly.cache().attention_factor(), spec.frequencies.attention_factor);
  std::vector<std::int64_t> pos;
  for (std::int64_t k = 0; k < 40; ++k) pos.push_back(131000 + k);
  const rotary::Rope<float> table(spec, rotary::CosSinCache<float>::for_positions(spec.frequencies, pos));
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(40 * 2, 64);
  rotary::RowMatrix<float> a(x.rows(), 64);
  rotary::RowMatrix<float> b(x.rows(), 64);
  rotary::apply(table, x, a, Positions(pos), 2);
  rotary::apply(fly, x, b, Positions(pos), 2);
  // Rows within 1 ulp of each other (|cos|, |sin| <= a < 2): outputs within 2 * 2^-23 * 2.
  EXPECT_LE((a - b).cwiseAbs().maxCoeff(), 4 * 0x1p-23f);
  // Unscaled RoPE rotates visibly differently at these positions.
  const rotary::Rope<float> plain(rotary::RotarySpec(64, Pairing::half_split, 1e6), rotary::OnTheFly{});
  rotary::apply(plain, x, b, Positions(pos), 2);
  EXPECT_GT((a - b).cwiseAbs().maxCoeff(), 0.1f);
}

TEST(OnTheFly, AnyPositionAcceptedNegativeRejected) {
  const rotary::Rope<float> fly(rotary::RotarySpec(8), rotary::OnTheFly{});
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(2, 8);
  EXPECT_NO_THROW(rotary::apply(fly, x, Positions::contiguous(std::int64_t{1} << 50), 1));
  EXPECT_THROW(rotary::apply(fly, x, Positions::contiguous(-3), 1), rotary::error);
}

}  // namespace

// Cache-free rows start from exact anchors at multiples of the block size whatever token range a
// thread gets, so the bits cannot depend on the split: f64 (where the recurrence and a fresh anchor
// differ in the last bits) and f32, serial against 2, 3 and 7 threads, contiguous and listed positions.
TEST(OnTheFly, ThreadSplitDoesNotChangeBits) {
  const rotary::RotarySpec spec(64, rotary::Pairing::interleaved, 1e6);
  const rotary::Rope<double> fly64(spec, rotary::OnTheFly{});
  const rotary::Rope<float> fly32(spec, rotary::OnTheFly{});
  const std::int64_t tokens = 101;  // ranges of 2, 3 and 7 threads start inside 32-token blocks
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  std::mt19937_64 rng(rotary_test::seed());
  const std::vector<std::int64_t> listed = rotary_test::random_positions(static_cast<std::size_t>(tokens), 1 << 30, rng);
  rotary::RowMatrix<double> x = rotary::RowMatrix<double>::Random(tokens * 2, 64);
  const rotary::RowMatrix<float> xf = x.cast<float>();
  for (const rotary::Positions& pos : {rotary::Positions::contiguous(123456789), rotary::Positions(listed)}) {
    rotary::RowMatrix<double> serial(x.rows(), 64);
    rotary::RowMatrix<float> serial32(x.rows(), 64);
    rotary::apply(fly64, x, serial, pos, 2);
    rotary::apply(fly32, xf, serial32, pos, 2);
    for (const unsigned threads : {2u, 3u, 7u}) {
      rotary::RowMatrix<double> split(x.rows(), 64);
      rotary::RowMatrix<float> split32(x.rows(), 64);
      rotary::apply(fly64, x, split, pos, 2, {rotary::Direction::forward, rotary::thread_parallel_for(threads)});
      rotary::apply(fly32, xf, split32, pos, 2, {rotary::Direction::forward, rotary::thread_parallel_for(threads)});
      EXPECT_EQ(0, std::memcmp(serial.data(), split.data(), sizeof(double) * static_cast<std::size_t>(x.size())))
          << threads << " threads (f64)";
      EXPECT_EQ(0, std::memcmp(serial32.data(), split32.data(), sizeof(float) * static_cast<std::size_t>(x.size())))
          << threads << " threads (f32)";
    }
  }
}
