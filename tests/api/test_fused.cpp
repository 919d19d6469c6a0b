// Fused q+k (GQA/MQA, key optional, in place and out of place) and the ParallelFor hook: both
// must give exactly the bits of separate single-tensor, single-thread calls.
#include <atomic>
#include <cstring>

#include "support.hpp"

namespace {

using rotary::Direction;
using rotary::Pairing;
using rotary::Positions;

bool same_bits(const rotary::RowMatrix<float>& a, const rotary::RowMatrix<float>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

class Fused : public ::testing::TestWithParam<std::tuple<Pairing, rotary::Isa>> {};

TEST_P(Fused, EqualsSeparateCalls) {
  const auto [pairing, isa] = GetParam();
  if (!rotary::isa_supported(isa)) GTEST_SKIP() << rotary::to_string(isa) << " not supported here";
  const rotary_test::IsaScope scope(isa);
  std::mt19937_64 rng(rotary_test::seed());
  for (auto [qh, kh] : {std::pair<std::int64_t, std::int64_t>{32, 8}, {8, 1}, {4, 4}, {3, 0}}) {
    for (std::int64_t head_dim : {64, 70, 128}) {
      const rotary::Rope<float> rope(rotary::RotarySpec(head_dim, pairing, 1e6, head_dim - head_dim % 16), 600);
      const std::int64_t tokens = 37;
      const std::vector<std::int64_t> pos = rotary_test::random_positions(tokens, 599, rng);
      rotary::RowMatrix<float> q = rotary::RowMatrix<float>::Random(tokens * qh, head_dim);
      rotary::RowMatrix<float> k = rotary::RowMatrix<float>::Random(tokens * std::max<std::int64_t>(kh, 1), head_dim);
      rotary::RowMatrix<float> q_sep = q;
      rotary::RowMatrix<float> k_sep = k;
      rotary::apply(rope, q_sep, pos, qh);
      if (kh > 0) rotary::apply(rope, k_sep, pos, kh);
      // out of place first (q, k untouched), then in place
      rotary::RowMatrix<float> q_out(q.rows(), head_dim);
      rotary::RowMatrix<float> k_out = k;
      rotary::apply_qk(rope, q, q_out, k, k_out, pos, qh, kh);
      EXPECT_TRUE(same_bits(q_out, q_sep)) << qh << "/" << kh << " head_dim " << head_dim;
      EXPECT_TRUE(same_bits(k_out, k_sep)) << qh << "/" << kh << " head_dim " << head_dim;
      rotary::apply_qk(rope, q, k, pos, qh, kh);
      EXPECT_TRUE(same_bits(q, q_sep));
      EXPECT_TRUE(same_bits(k, k_sep));
      // and back: the fused inverse undoes the fused forward up to rounding
      rotary::apply_qk(rope, q, k, pos, qh, kh, Direction::inverse);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, Fused,
                         ::testing::Combine(::testing::Values(Pairing::interleaved, Pairing::half_split),
                                            ::testing::ValuesIn(rotary::all_isas())),
                         [](const auto& p) {
                           return std::string(rotary::to_string(std::get<0>(p.param))) + "_" +
                                  std::string(rotary::to_string(std::get<1>(p.param)));
                         });

TEST(FusedErrors, OverlapAndShapes) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8), 16);
  rotary::RowMatrix<float> q = rotary::RowMatrix<float>::Random(8, 8);
  rotary::RowMatrix<float> k = rotary::RowMatrix<float>::Random(3, 8);
  EXPECT_THROW(rotary::apply_qk(rope, q, k, Positions::contiguous(0), 2, 1), rotary::error);  // 4 vs 3 tokens
  Eigen::Map<rotary::RowMatrix<float>> k_alias(q.data() + 8, 4, 8);  // k inside q
  try {
    rotary::apply_qk(rope, q, k_alias, Positions::contiguous(0), 2, 1);
    ADD_FAILURE() << "overlapping q and k accepted";
  } catch (const rotary::error& e) {
    EXPECT_NE(std::string(e.what()).find("q and k views overlap"), std::string::npos) << e.what();
  }
}

// Only k_heads 0 means "no key": a negative count left k unrotated. And a head count is checked
// before the token stride (heads x outer stride) is computed from it: 2^62 heads over 0 rows overflowed.
TEST(FusedErrors, NegativeKeyHeadsAndHeadCountOverflow) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8), 16);
  std::vector<float> q(4 * 8, 1.0f);
  std::vector<float> k(4 * 8, 1.0f);
  const std::vector<float> q0 = q;
  const std::vector<float> k0 = k;
  const rotary::StridedLayout ql{4, 1, 8, 8};
  const rotary::StridedLayout kl{4, -1, 8, 8};
  rotary_test::expect_error(
      [&] { rotary::apply_qk_strided(rope, q.data(), ql, q.data(), ql, k.data(), kl, k.data(), kl, Positions::contiguous(1)); },
      {"k heads (-1) must be >= 0"});
  EXPECT_EQ(q, q0);
  EXPECT_EQ(k, k0);
  rotary::RowMatrix<float> none(0, 8);
  rotary_test::expect_error([&] { rotary::apply(rope, none, Positions::contiguous(0), std::int64_t{1} << 62); },
                            {"heads (4611686018427387904) x outer stride (8) overflows"});
  EXPECT_NO_THROW(rotary::apply(rope, none, Positions::contiguous(0), 3));
}

// q and k as slices of one fused QKV buffer [tokens, q_heads + 2 kv_heads, head_dim]: their
// bounding extents overlap but no row is shared, so one fused call must accept them, in place and
// out of place, and give the bits of separate calls; v stays untouched. Views sharing a row throw.
TEST(Fused, SlicesOfOneQkvBuffer) {
  std::mt19937_64 rng(rotary_test::seed());
  for (const Pairing pairing : {Pairing::interleaved, Pairing::half_split}) {
    const std::int64_t d = 64, qh = 6, kh = 2, all = qh + 2 * kh, tokens = 19;
    const rotary::Rope<float> rope(rotary::RotarySpec(d, pairing), 64);
    const std::vector<std::int64_t> pos = rotary_test::random_positions(tokens, 63, rng);
    const std::vector<float> qkv = rotary_test::random_vector<float>(static_cast<std::size_t>(tokens * all * d), rng);
    const rotary::StridedLayout ql{tokens, qh, all * d, d};
    const rotary::StridedLayout kl{tokens, kh, all * d, d};
    std::vector<float> want = qkv;
    rotary::apply_strided(rope, want.data(), ql, pos);
    rotary::apply_strided(rope, want.data() + qh * d, kl, pos);

    std::vector<float> in_place = qkv;
    rotary::apply_qk_strided(rope, in_place.data(), ql, in_place.data(), ql, in_place.data() + qh * d, kl,
                             in_place.data() + qh * d, kl, pos);
    EXPECT_EQ(0, std::memcmp(in_place.data(), want.data(), want.size() * sizeof(float)));

    std::vector<float> out(qkv.size(), -7.0f);  // out of place into another fused buffer
    rotary::apply_qk_strided(rope, qkv.data(), ql, out.data(), ql, qkv.data() + qh * d, kl, out.data() + qh * d,
                             kl, pos);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t i = 0; i < all * d; ++i) {
        const auto at = static_cast<std::size_t>(t * all * d + i);
        ASSERT_EQ(out[at], i < (qh + kh) * d ? want[at] : -7.0f) << "token " << t << " element " << i;
      }

    // k starting one head early shares its first row with q's last: rejected before any write
    std::vector<float> clash = qkv;
    const rotary::StridedLayout kl_early{tokens, kh, all * d, d};
    try {
      rotary::apply_qk_strided(rope, clash.data(), ql, clash.data(), ql, clash.data() + (qh - 1) * d, kl_early,
                               clash.data() + (qh - 1) * d, kl_early, pos);
      ADD_FAILURE() << "q and k sharing a row accepted";
    } catch (const rotary::error& e) {
      EXPECT_NE(std::string(e.what()).find("q and k views overlap"), std::string::npos) << e.what();
    }
    EXPECT_EQ(clash, qkv);
  }
}

TEST(Parallel, ThreadedEqualsSerialAndCoversEveryToken) {
  const rotary::Rope<float> rope(rotary::RotarySpec(128, Pairing::half_split), 2048);
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Random(1000 * 8, 128);
  rotary::RowMatrix<float> serial = x;
  rotary::RowMatrix<float> threaded = x;
  rotary::apply(rope, serial, Positions::contiguous(3), 8);
  rotary::apply(rope, threaded, Positions::contiguous(3), 8, {Direction::forward, rotary::thread_parallel_for(3)});
  EXPECT_TRUE(same_bits(serial, threaded));

  // A counting executor: every token exactly once, over disjoint chunks (the call given the tokens
  // themselves, whatever this machine's measured hand-off: the gate split at its floor of 0).
  const rotary_test::SplitAlways split;
  std::atomic<std::int64_t> covered{0};
  std::atomic<int> chunks{0};
  const rotary::ParallelFor counting = [&](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
    for (std::int64_t b = 0; b < n; b += 97) {
      const std::int64_t e = std::min(n, b + 97);
      body(b, e);
      covered += e - b;
      ++chunks;
    }
  };
  rotary::RowMatrix<float> chunked = x;
  rotary::apply(rope, chunked, Positions::contiguous(3), 8, {Direction::forward, counting});
  EXPECT_TRUE(same_bits(serial, chunked));
  EXPECT_EQ(covered.load(), 1000);
  EXPECT_EQ(chunks.load(), 11);
#if defined(_OPENMP)
  rotary::RowMatrix<float> omp = x;
  rotary::apply(rope, omp, Positions::contiguous(3), 8, {Direction::forward, rotary::openmp_parallel_for()});
  EXPECT_TRUE(same_bits(serial, omp));
#endif
}

}  // namespace
