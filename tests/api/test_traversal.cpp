// Memory-order traversal: head-major layouts (heads farther apart than tokens, e.g. BHSD) run in
// blocks of tokens over groups of heads, batches whose sequences interleave in memory (SBHD) run
// token by token across sequences, and threaded BHSD batches split all sequences' tokens at once. Neither may change a bit: each case here crosses the block
// and group boundaries (partial last block, partial last group, q and k groups) and is compared
// with calls that take the plain token-major path (one head per call, one sequence per call).
#include <cstring>

#include <rotary/layouts.hpp>

#include "support.hpp"

namespace {

using rotary::BatchShape;
using rotary::BatchView;
using rotary::Direction;
using rotary::Layout;
using rotary::Pairing;
using rotary::Positions;
using rotary::SequencePositions;
using rotary::StridedLayout;
using rotary::detail::kHeadMajorBlock;
using rotary::detail::kHeadMajorGroup;
using rotary_test::same_bits;

std::size_t elements(const BatchShape& s) {
  return static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
}

// Tokens that cross two block boundaries and end in a partial block; q heads that end in a partial
// group; k heads fewer than one group.
constexpr std::int64_t kTokens = 2 * kHeadMajorBlock + 37;
constexpr std::int64_t kQHeads = 2 * kHeadMajorGroup + 1;
constexpr std::int64_t kKHeads = kHeadMajorGroup - 1;
static_assert(kKHeads >= 2, "k must take the head-major path too");

// Head-major views: head h's tokens are one run of kTokens rows of `pad` elements (head_dim plus
// padding), heads one after another; q and k in one buffer (k after q).
template <class T>
void check_head_major(const rotary::Rope<T>& rope, const rotary::ParallelFor& parallel, Direction dir,
                      bool in_place) {
  const std::int64_t d = rope.head_dim();
  const std::int64_t pad = d + 3;
  const StridedLayout ql{kTokens, kQHeads, pad, kTokens * pad};
  const StridedLayout kl{kTokens, kKHeads, pad, kTokens * pad};
  const auto k_off = static_cast<std::size_t>(kQHeads * kTokens * pad);
  const auto n = static_cast<std::size_t>((kQHeads + kKHeads) * kTokens * pad);
  // The call must take the head-major path for this test to mean anything.
  const rotary::detail::StreamArgs<T> probe =
      rotary::detail::make_stream<T>(nullptr, ql, nullptr, ql);
  ASSERT_TRUE(rotary::detail::heads_farther_than_tokens(probe));

  std::mt19937_64 rng(rotary_test::seed());
  const std::vector<T> x = rotary_test::random_vector<T>(n, rng);
  const std::vector<std::int64_t> pos = rotary_test::random_positions(static_cast<std::size_t>(kTokens), 4095, rng);

  // Reference: one call per head (a single head always runs token-major), out of place.
  std::vector<T> want = x;
  for (std::int64_t h = 0; h < kQHeads + kKHeads; ++h) {
    const std::size_t off = h < kQHeads ? static_cast<std::size_t>(h * kTokens * pad)
                                        : k_off + static_cast<std::size_t>((h - kQHeads) * kTokens * pad);
    const StridedLayout one{kTokens, 1, pad, kTokens * pad};
    rotary::apply_strided(rope, x.data() + off, one, want.data() + off, one, Positions(pos), dir);
  }

  std::vector<T> got = x;
  if (in_place) {
    rotary::apply_qk_strided(rope, got.data(), ql, got.data(), ql, got.data() + k_off, kl, got.data() + k_off, kl,
                             Positions(pos), {dir, parallel});
  } else {
    rotary::apply_qk_strided(rope, x.data(), ql, got.data(), ql, x.data() + k_off, kl, got.data() + k_off, kl,
                             Positions(pos), {dir, parallel});
  }
  EXPECT_TRUE(same_bits(got, want)) << rotary::dtype_name<T>() << " " << rotary::to_string(rope.pairing())
                                    << (rope.on_the_fly() ? " cache-free" : " cached") << (in_place ? " in place" : "")
                                    << (parallel ? " threaded" : "") << " " << rotary_test::seed_note();
}

template <class T>
void head_major_for_type() {
  for (const Pairing pairing : {Pairing::interleaved, Pairing::half_split}) {
    const rotary::RotarySpec spec(64, pairing, 10000.0, 48);  // partial rotary: 16 pass-through values
    const rotary::Rope<T> cached(spec, 4096);
    const rotary::Rope<T> cache_free(spec, rotary::OnTheFly{});
    for (const rotary::Rope<T>* rope : {&cached, &cache_free}) {
      check_head_major(*rope, {}, Direction::forward, false);
      check_head_major(*rope, {}, Direction::inverse, true);
      check_head_major(*rope, rotary::thread_parallel_for(3), Direction::forward, true);
    }
  }
}

TEST(HeadMajor, SameBitsAsOneHeadPerCallF32) { head_major_for_type<float>(); }
TEST(HeadMajor, SameBitsAsOneHeadPerCallF64) { head_major_for_type<double>(); }
TEST(HeadMajor, SameBitsAsOneHeadPerCallF16) { head_major_for_type<rotary::f16>(); }
TEST(HeadMajor, SameBitsAsOneHeadPerCallBf16) { head_major_for_type<rotary::bf16>(); }

// Dense BHSD through apply_qk_batch: one dispatch per sequence, each head-major; with threads, one
// parallel region over all sequences whose ranges cross sequence boundaries (3 threads, 3 sequences
// of kTokens tokens).
TEST(HeadMajor, DenseBhsdBatch) {
  const rotary::Rope<float> rope(rotary::RotarySpec(128, Pairing::half_split), 8192);
  const std::int64_t batch = 3;
  const BatchShape qs{batch, kTokens, kQHeads, 128};
  const BatchShape ks{batch, kTokens, kKHeads, 128};
  std::mt19937_64 rng(rotary_test::seed());
  const std::vector<float> q = rotary_test::random_vector<float>(elements(qs), rng);
  const std::vector<float> k = rotary_test::random_vector<float>(elements(ks), rng);
  const std::vector<std::int64_t> starts = {5, 3000, 0};
  std::vector<float> q_want = q;
  std::vector<float> k_want = k;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto qo = static_cast<std::size_t>(b * kQHeads * kTokens * 128);
    const auto ko = static_cast<std::size_t>(b * kKHeads * kTokens * 128);
    const StridedLayout one{kTokens, 1, 128, kTokens * 128};
    for (std::int64_t h = 0; h < kQHeads; ++h)
      rotary::apply_strided(rope, q_want.data() + qo + static_cast<std::size_t>(h * kTokens * 128), one,
                            Positions::contiguous(starts[static_cast<std::size_t>(b)]));
    for (std::int64_t h = 0; h < kKHeads; ++h)
      rotary::apply_strided(rope, k_want.data() + ko + static_cast<std::size_t>(h * kTokens * 128), one,
                            Positions::contiguous(starts[static_cast<std::size_t>(b)]));
  }
  for (const rotary::ParallelFor& parallel : {rotary::ParallelFor(), rotary::thread_parallel_for(3)}) {
    std::vector<float> q_got = q;
    std::vector<float> k_got = k;
    rotary::apply_qk_batch(rope, BatchView<float>(q_got.data(), Layout::bhsd, qs),
                           BatchView<float>(k_got.data(), Layout::bhsd, ks), SequencePositions::starts(starts), {Direction::forward, parallel});
    EXPECT_TRUE(same_bits(q_got, q_want)) << (parallel ? "threaded " : "") << rotary_test::seed_note();
    EXPECT_TRUE(same_bits(k_got, k_want)) << (parallel ? "threaded " : "") << rotary_test::seed_note();
  }
}

// SBHD: token s of every sequence before token s+1. Compared with one apply_qk_strided call per
// sequence; positions differ per sequence (starts), so rows may not be shared across sequences.
template <class T>
void check_sbhd(const rotary::Rope<T>& rope, const rotary::ParallelFor& parallel) {
  const std::int64_t d = rope.head_dim();
  const std::int64_t batch = 3;
  const std::int64_t seq = 45;
  const BatchShape qs{batch, seq, kQHeads, d};
  const BatchShape ks{batch, seq, kKHeads, d};
  std::mt19937_64 rng(rotary_test::seed());
  const std::vector<T> q = rotary_test::random_vector<T>(elements(qs), rng);
  const std::vector<T> k = rotary_test::random_vector<T>(elements(ks), rng);
  const std::vector<std::int64_t> starts = {0, 77, 3000};

  std::vector<T> q_want(q.size());
  std::vector<T> k_want(k.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    const StridedLayout ql{seq, kQHeads, batch * kQHeads * d, d};
    const StridedLayout kl{seq, kKHeads, batch * kKHeads * d, d};
    const auto qo = static_cast<std::size_t>(b * kQHeads * d);
    const auto ko = static_cast<std::size_t>(b * kKHeads * d);
    rotary::apply_qk_strided(rope, q.data() + qo, ql, q_want.data() + qo, ql, k.data() + ko, kl, k_want.data() + ko,
                             kl, Positions::contiguous(starts[static_cast<std::size_t>(b)]));
  }
  std::vector<T> q_got(q.size());
  std::vector<T> k_got(k.size());
  rotary::apply_qk_batch(rope, BatchView<const T>(q.data(), Layout::sbhd, qs), BatchView<T>(q_got.data(), Layout::sbhd, qs),
                         BatchView<const T>(k.data(), Layout::sbhd, ks), BatchView<T>(k_got.data(), Layout::sbhd, ks),
                         SequencePositions::starts(starts), {Direction::forward, parallel});
  const std::string what = std::string(rotary::dtype_name<T>()) + (rope.on_the_fly() ? " cache-free" : " cached") +
                           (parallel ? " threaded " : " ") + rotary_test::seed_note();
  EXPECT_TRUE(same_bits(q_got, q_want)) << what;
  EXPECT_TRUE(same_bits(k_got, k_want)) << what;
}

template <class T>
void sbhd_for_type() {
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  const rotary::RotarySpec spec(96, Pairing::interleaved, 500000.0, 80);
  const rotary::Rope<T> cached(spec, 4096);
  const rotary::Rope<T> cache_free(spec, rotary::OnTheFly{});
  for (const rotary::Rope<T>* rope : {&cached, &cache_free}) {
    check_sbhd(*rope, {});
    check_sbhd(*rope, rotary::thread_parallel_for(2));
  }
}

TEST(InterleavedSequences, SbhdSameBitsAsOneSequencePerCallF32) { sbhd_for_type<float>(); }
TEST(InterleavedSequences, SbhdSameBitsAsOneSequencePerCallBf16) { sbhd_for_type<rotary::bf16>(); }

}  // namespace
