// Batched layouts (BSHD, BHSD, SBHD, packed THD) and per-sequence positions: every entry point must
// give exactly the bits of the plain per-token apply on a re-laid-out copy with independently
// computed positions.
#include <cstring>

#include <rotary/layouts.hpp>
#include <rotary/table.hpp>
#include <rotary/tensor_map.hpp>

#include "support.hpp"

namespace {

using rotary::BatchShape;
using rotary::BatchStrides;
using rotary::BatchView;
using rotary::ContextSplit;
using rotary::Direction;
using rotary::Layout;
using rotary::Pairing;
using rotary::Positions;
using rotary::SequencePositions;
using rotary::StridedLayout;
using rotary_test::expect_error;
using rotary_test::same_bits;

// Element offset of row (b, s, h) in a view.
inline std::ptrdiff_t at(const BatchStrides& st, std::int64_t b, std::int64_t s, std::int64_t h) {
  return b * st.batch + s * st.seq + h * st.head;
}

// Gathers a batch view into token-major rows (token b*seq+s, head h), rotates with the plain
// per-token apply_strided at `pos` (one per token), and scatters into `out` (same strides as x).
template <class T>
std::vector<T> reference(const rotary::Rope<T>& rope, const std::vector<T>& x, const BatchShape& sh,
                         const BatchStrides& st, const std::vector<std::int64_t>& pos, Direction dir) {
  const std::int64_t d = sh.head_dim;
  std::vector<T> rows(static_cast<std::size_t>(sh.batch * sh.seq * sh.heads * d));
  for (std::int64_t b = 0; b < sh.batch; ++b)
    for (std::int64_t s = 0; s < sh.seq; ++s)
      for (std::int64_t h = 0; h < sh.heads; ++h)
        std::memcpy(&rows[static_cast<std::size_t>(((b * sh.seq + s) * sh.heads + h) * d)],
                    &x[static_cast<std::size_t>(at(st, b, s, h))], static_cast<std::size_t>(d) * sizeof(T));
  const StridedLayout l{sh.batch * sh.seq, sh.heads, sh.heads * d, d};
  rotary::apply_strided(rope, rows.data(), l, Positions(pos), dir);
  std::vector<T> out = x;
  for (std::int64_t b = 0; b < sh.batch; ++b)
    for (std::int64_t s = 0; s < sh.seq; ++s)
      for (std::int64_t h = 0; h < sh.heads; ++h)
        std::memcpy(&out[static_cast<std::size_t>(at(st, b, s, h))],
                    &rows[static_cast<std::size_t>(((b * sh.seq + s) * sh.heads + h) * d)],
                    static_cast<std::size_t>(d) * sizeof(T));
  return out;
}

// A position mode, with the positions the test expects for each token (computed here directly, not
// via rotary::token_positions).
struct Mode {
  std::string name;
  SequencePositions pos;
  std::vector<std::int64_t> expected;
};

// Storage for per-token arrays, kept alive for the calls.
struct ModeData {
  std::vector<std::int32_t> p32;
  std::vector<std::int64_t> p64;
};

std::vector<Mode> modes(const std::vector<std::int64_t>& lengths, ModeData& data, std::mt19937_64& rng) {
  std::int64_t total = 0;
  for (auto l : lengths) total += l;
  const auto n = lengths.size();
  std::vector<Mode> m;
  const auto fill = [&](auto f) {
    std::vector<std::int64_t> e;
    for (std::size_t b = 0; b < n; ++b)
      for (std::int64_t t = 0; t < lengths[b]; ++t) e.push_back(f(b, t, lengths[b]));
    return e;
  };
  m.push_back({"start", SequencePositions::start(17), fill([](auto, auto t, auto) { return 17 + t; })});
  m.push_back({"restart", SequencePositions::restart(), fill([](auto, auto t, auto) { return t; })});
  std::vector<std::int64_t> starts;
  for (std::size_t b = 0; b < n; ++b) starts.push_back(static_cast<std::int64_t>(5 * b * b + 3));
  m.push_back({"starts", SequencePositions::starts(starts),
               fill([&](auto b, auto t, auto) { return starts[b] + t; })});
  data.p64 = rotary_test::random_positions(static_cast<std::size_t>(total), 399, rng);
  data.p32.assign(data.p64.begin(), data.p64.end());
  m.push_back({"per_token_i64", SequencePositions::per_token(Positions(data.p64)), data.p64});
  m.push_back({"per_token_i32", SequencePositions::per_token(Positions(data.p32)), data.p64});
  m.push_back({"per_token_contiguous", SequencePositions::per_token(Positions::contiguous(9)),
               fill([&, i = std::int64_t{0}](auto, auto, auto) mutable { return 9 + i++; })});
  // rank 2 of 3, contiguous: local token t is full-sequence token 2*len + t
  m.push_back({"cp_contiguous", SequencePositions::context_parallel(ContextSplit::contiguous, 2, 3, starts),
               fill([&](auto b, auto t, auto len) { return starts[b] + 2 * len + t; })});
  bool even = true;
  for (auto l : lengths) even = even && l % 2 == 0;
  if (even)  // rank 1 of 4, zigzag: chunks 1 and 6 of 8, each len/2 tokens
    m.push_back({"cp_load_balanced", SequencePositions::context_parallel(ContextSplit::load_balanced, 1, 4, {7}),
                 fill([](auto, auto t, auto len) { return t < len / 2 ? 7 + len / 2 + t : 7 + 6 * (len / 2) + t - len / 2; })});
  return m;
}

template <class T>
void check_layouts_for_type() {
  std::mt19937_64 rng(rotary_test::seed());
  for (Pairing pairing : {Pairing::interleaved, Pairing::half_split}) {
    const rotary::Rope<T> rope(rotary::RotarySpec(70, pairing, 10000.0, 64), 400);
    for (const BatchShape sh : {BatchShape{3, 6, 4, 70}, BatchShape{1, 5, 2, 70}, BatchShape{4, 1, 3, 70}}) {
      const std::vector<std::int64_t> lengths(static_cast<std::size_t>(sh.batch), sh.seq);
      ModeData data;
      for (const Mode& mode : modes(lengths, data, rng)) {
        for (Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd, Layout::thd}) {
          SCOPED_TRACE(std::string(rotary::to_string(layout)) + " " + mode.name + " batch " + std::to_string(sh.batch) +
                       " seq " + std::to_string(sh.seq) + " " + std::string(rotary::to_string(pairing)) + " " +
                       rotary_test::seed_note());
          const BatchStrides st = rotary::dense_strides(layout, sh);
          const std::vector<T> x = rotary_test::random_vector<T>(
              static_cast<std::size_t>(sh.batch * sh.seq * sh.heads * sh.head_dim), rng);
          for (Direction dir : {Direction::forward, Direction::inverse}) {
            const std::vector<T> want = reference(rope, x, sh, st, mode.expected, dir);
            std::vector<T> got = x;
            rotary::apply_batch(rope, layout, got.data(), sh, mode.pos, dir);  // in place
            EXPECT_TRUE(same_bits(got, want));
            // out of place into a bhsd (or bshd) tensor: a layout change on the way
            const Layout out_layout = layout == Layout::bhsd ? Layout::bshd : Layout::bhsd;
            std::vector<T> out(x.size());
            rotary::apply_batch(rope, BatchView<const T>(x.data(), layout, sh),
                                BatchView<T>(out.data(), out_layout, sh), mode.pos, dir);
            const std::vector<T> want_out =
                reference(rope, [&] {  // x re-laid-out
                  std::vector<T> y(x.size());
                  const BatchStrides ot = rotary::dense_strides(out_layout, sh);
                  for (std::int64_t b = 0; b < sh.batch; ++b)
                    for (std::int64_t s = 0; s < sh.seq; ++s)
                      for (std::int64_t h = 0; h < sh.heads; ++h)
                        std::memcpy(&y[static_cast<std::size_t>(at(ot, b, s, h))],
                                    &x[static_cast<std::size_t>(at(st, b, s, h))],
                                    static_cast<std::size_t>(sh.head_dim) * sizeof(T));
                  return y;
                }(), sh, rotary::dense_strides(out_layout, sh), mode.expected, dir);
            EXPECT_TRUE(same_bits(out, want_out));
          }
        }
      }
    }
  }
}

TEST(Layouts, DenseEveryLayoutAndPositionModeF32) { check_layouts_for_type<float>(); }
TEST(Layouts, DenseEveryLayoutAndPositionModeF16) { check_layouts_for_type<rotary::f16>(); }
TEST(Layouts, DenseEveryLayoutAndPositionModeBf16) { check_layouts_for_type<rotary::bf16>(); }
TEST(Layouts, DenseEveryLayoutAndPositionModeF64) { check_layouts_for_type<double>(); }

// Fused QKV buffer [b, s, q_heads + 2*kv_heads, d] (strided q and k views inside one allocation),
// GQA, MQA and key absent, in place and out of place, every layout of the output.
template <class T>
void check_qk_for_type() {
  std::mt19937_64 rng(rotary_test::seed() + 1);
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  const std::int64_t d = 64;
  const rotary::Rope<T> rope(rotary::RotarySpec(d, Pairing::half_split, 1e6), 300);
  for (auto [qh, kh] : {std::pair<std::int64_t, std::int64_t>{8, 2}, {4, 1}, {4, 4}, {3, 0}}) {
    const BatchShape qs{3, 5, qh, d};
    const BatchShape ks{3, 5, kh, d};
    const std::int64_t all = qh + 2 * kh;
    const BatchStrides st{5 * all * d, all * d, d};
    std::vector<T> qkv = rotary_test::random_vector<T>(static_cast<std::size_t>(3 * 5 * all * d), rng);
    const std::vector<std::int64_t> starts{4, 0, 250};
    const SequencePositions pos = SequencePositions::starts(starts);
    std::vector<std::int64_t> expected;
    for (auto s0 : starts)
      for (std::int64_t t = 0; t < 5; ++t) expected.push_back(s0 + t);
    SCOPED_TRACE(std::to_string(qh) + "/" + std::to_string(kh) + " " + rotary_test::seed_note());
    std::vector<T> want = reference(rope, qkv, qs, st, expected, Direction::forward);
    if (kh > 0) {
      // k starts after q in each token: shift by qh*d and reuse the same strides
      std::vector<T> shifted(want.begin() + qh * d, want.end());
      shifted.resize(want.size());  // tail padding, never read by k rows
      std::vector<T> kref = reference(rope, shifted, ks, st, expected, Direction::forward);
      std::copy(kref.begin(), kref.begin() + static_cast<std::ptrdiff_t>(want.size() - qh * d), want.begin() + qh * d);
    }
    // out of place into separate dense bhsd q and k
    std::vector<T> q_out(static_cast<std::size_t>(3 * 5 * qh * d));
    std::vector<T> k_out(static_cast<std::size_t>(3 * 5 * std::max<std::int64_t>(kh, 1) * d));
    BatchView<const T> k_in_view;
    BatchView<T> k_out_view;
    if (kh > 0) {
      k_in_view = BatchView<const T>(qkv.data() + qh * d, ks, st);
      k_out_view = BatchView<T>(k_out.data(), Layout::bhsd, ks);
    }
    rotary::apply_qk_batch(rope, BatchView<const T>(qkv.data(), qs, st), BatchView<T>(q_out.data(), Layout::bhsd, qs),
                           k_in_view, k_out_view, pos);
    const BatchStrides qo = rotary::dense_strides(Layout::bhsd, qs);
    const BatchStrides ko = rotary::dense_strides(Layout::bhsd, ks);
    bool ok = true;
    for (std::int64_t b = 0; b < 3; ++b)
      for (std::int64_t s = 0; s < 5; ++s) {
        for (std::int64_t h = 0; h < qh; ++h)
          ok = ok && std::memcmp(&q_out[static_cast<std::size_t>(at(qo, b, s, h))],
                                 &want[static_cast<std::size_t>(at(st, b, s, h))], d * sizeof(T)) == 0;
        for (std::int64_t h = 0; h < kh; ++h)
          ok = ok && std::memcmp(&k_out[static_cast<std::size_t>(at(ko, b, s, h))],
                                 &want[static_cast<std::size_t>(at(st, b, s, qh + h))], d * sizeof(T)) == 0;
      }
    EXPECT_TRUE(ok);
    // in place on the fused buffer; v untouched
    std::vector<T> inplace = qkv;
    BatchView<T> kv;
    if (kh > 0) kv = BatchView<T>(inplace.data() + qh * d, ks, st);
    rotary::apply_qk_batch(rope, BatchView<T>(inplace.data(), qs, st), kv, pos);
    EXPECT_TRUE(same_bits(inplace, want));
    // dense convenience overload on every layout, with threads
    for (Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
      std::vector<T> q = rotary_test::random_vector<T>(static_cast<std::size_t>(3 * 5 * qh * d), rng);
      std::vector<T> k = rotary_test::random_vector<T>(static_cast<std::size_t>(3 * 5 * std::max<std::int64_t>(kh, 1) * d), rng);
      const std::vector<T> q_want = reference(rope, q, qs, rotary::dense_strides(layout, qs), expected, Direction::forward);
      const std::vector<T> k_want =
          kh > 0 ? reference(rope, k, ks, rotary::dense_strides(layout, ks), expected, Direction::forward) : k;
      rotary::apply_qk_batch(rope, layout, q.data(), qs, k.data(), kh, pos, {Direction::forward, rotary::thread_parallel_for(2)});
      EXPECT_TRUE(same_bits(q, q_want)) << rotary::to_string(layout);
      EXPECT_TRUE(same_bits(k, k_want)) << rotary::to_string(layout);
    }
  }
}

TEST(LayoutsQk, FusedQkvGqaMqaNoKeyF32) { check_qk_for_type<float>(); }
TEST(LayoutsQk, FusedQkvGqaMqaNoKeyF16) { check_qk_for_type<rotary::f16>(); }
TEST(LayoutsQk, FusedQkvGqaMqaNoKeyBf16) { check_qk_for_type<rotary::bf16>(); }

// Packed THD with uneven lengths including empty sequences, int32 and int64 cu_seqlens.
template <class T>
void check_varlen_for_type() {
  std::mt19937_64 rng(rotary_test::seed() + 2);
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  const std::int64_t d = 42;
  const rotary::Rope<T> rope(rotary::RotarySpec(d, Pairing::interleaved, 10000.0, 32), 400);
  for (const std::vector<std::int64_t>& lengths :
       {std::vector<std::int64_t>{3, 0, 7, 1, 0, 9}, std::vector<std::int64_t>{4, 0, 2, 6}, std::vector<std::int64_t>{},
        std::vector<std::int64_t>{0}}) {
    std::vector<std::int64_t> cu64{0};
    for (auto l : lengths) cu64.push_back(cu64.back() + l);
    const std::vector<std::int32_t> cu32(cu64.begin(), cu64.end());
    const std::int64_t total = cu64.back();
    const std::int64_t qh = 4;
    const std::int64_t kh = 2;
    // q rows padded: head stride 48 > head_dim
    const StridedLayout ql{total, qh, qh * 48, 48};
    const StridedLayout kl{total, kh, kh * d, d};
    ModeData data;
    for (const Mode& mode : modes(lengths, data, rng)) {
      SCOPED_TRACE(mode.name + " " + std::to_string(lengths.size()) + " sequences " + rotary_test::seed_note());
      const std::vector<T> q = rotary_test::random_vector<T>(static_cast<std::size_t>(total * qh * 48), rng);
      const std::vector<T> k = rotary_test::random_vector<T>(static_cast<std::size_t>(total * kh * d), rng);
      for (Direction dir : {Direction::forward, Direction::inverse}) {
        std::vector<T> q_want = q;
        std::vector<T> k_want = k;
        rotary::apply_strided(rope, q_want.data(), ql, Positions(mode.expected), dir);
        rotary::apply_strided(rope, k_want.data(), kl, Positions(mode.expected), dir);
        std::vector<T> q_got = q;
        std::vector<T> k_got = k;
        rotary::apply_qk_varlen(rope, q_got.data(), ql, k_got.data(), kl, cu32, mode.pos, dir);
        EXPECT_TRUE(same_bits(q_got, q_want));
        EXPECT_TRUE(same_bits(k_got, k_want));
        std::vector<T> q1 = q;
        rotary::apply_varlen(rope, q1.data(), ql, cu64, mode.pos, {dir, rotary::thread_parallel_for(2)});
        EXPECT_TRUE(same_bits(q1, q_want));
        std::vector<T> q2 = q;  // out of place, key absent
        rotary::apply_qk_varlen(rope, q.data(), ql, q2.data(), ql, static_cast<const T*>(nullptr), StridedLayout{},
                                static_cast<T*>(nullptr), StridedLayout{}, cu64, mode.pos, dir);
        EXPECT_TRUE(same_bits(q2, q_want));
      }
    }
  }
}

TEST(Varlen, UnevenAndEmptySequencesF32) { check_varlen_for_type<float>(); }
TEST(Varlen, UnevenAndEmptySequencesF16) { check_varlen_for_type<rotary::f16>(); }
TEST(Varlen, UnevenAndEmptySequencesBf16) { check_varlen_for_type<rotary::bf16>(); }

// Each rank's chunk, rotated with context-parallel positions, equals the same tokens of the unsplit
// sequence rotated with plain positions: every split, rank count and rank.
TEST(ContextParallel, ChunksReproduceTheUnsplitSequence) {
  std::mt19937_64 rng(rotary_test::seed() + 3);
  const std::int64_t d = 32;
  const std::int64_t heads = 2;
  const rotary::Rope<float> rope(rotary::RotarySpec(d, Pairing::half_split), 1000);
  const std::vector<std::int64_t> starts{0, 100};  // two sequences, the second after a cached prefix
  for (ContextSplit split : {ContextSplit::contiguous, ContextSplit::load_balanced}) {
    for (std::int64_t ranks : {1, 2, 3, 4}) {
      const std::int64_t local = 6;
      const std::int64_t full = local * ranks;
      const BatchShape full_shape{2, full, heads, d};
      std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(2 * full * heads * d), rng);
      std::vector<float> rotated = x;
      rotary::apply_batch(rope, Layout::bshd, rotated.data(), full_shape, SequencePositions::starts(starts));
      for (std::int64_t r = 0; r < ranks; ++r) {
        // the full-sequence token indices rank r holds, from the split's definition
        std::vector<std::int64_t> held;
        for (std::int64_t t = 0; t < local; ++t) {
          if (split == ContextSplit::contiguous) {
            held.push_back(r * local + t);
          } else {
            const std::int64_t c = local / 2;
            held.push_back(t < c ? r * c + t : (2 * ranks - 1 - r) * c + t - c);
          }
        }
        std::vector<float> mine(static_cast<std::size_t>(2 * local * heads * d));
        std::vector<float> want(mine.size());
        for (std::int64_t b = 0; b < 2; ++b)
          for (std::int64_t t = 0; t < local; ++t) {
            const auto src = static_cast<std::size_t>((b * full + held[static_cast<std::size_t>(t)]) * heads * d);
            const auto dst = static_cast<std::size_t>((b * local + t) * heads * d);
            std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(src), heads * d, mine.begin() + static_cast<std::ptrdiff_t>(dst));
            std::copy_n(rotated.begin() + static_cast<std::ptrdiff_t>(src), heads * d, want.begin() + static_cast<std::ptrdiff_t>(dst));
          }
        const SequencePositions cp = SequencePositions::context_parallel(split, r, ranks, starts);
        rotary::apply_batch(rope, Layout::bshd, mine.data(), BatchShape{2, local, heads, d}, cp);
        EXPECT_TRUE(same_bits(mine, want)) << "split " << static_cast<int>(split) << " rank " << r << "/" << ranks;
        // and the positions themselves
        const std::vector<std::int64_t> p = rotary::token_positions(cp, {local, local});
        for (std::int64_t b = 0; b < 2; ++b)
          for (std::int64_t t = 0; t < local; ++t)
            EXPECT_EQ(p[static_cast<std::size_t>(b * local + t)], starts[static_cast<std::size_t>(b)] + held[static_cast<std::size_t>(t)]);
      }
    }
  }
}

// Backward: inverse(forward(x)) ~ x, and <F x, g> == <x, F^T g> with F^T = the inverse call.
TEST(Backward, InverseAndAdjointOnEveryLayout) {
  std::mt19937_64 rng(rotary_test::seed() + 4);
  const rotary::Rope<double> rope(rotary::RotarySpec(66, Pairing::interleaved, 10000.0, 60), 500);
  const BatchShape sh{3, 7, 3, 66};
  for (Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    for (const SequencePositions& pos :
         {SequencePositions::starts({1, 40, 300}), SequencePositions::context_parallel(ContextSplit::contiguous, 1, 2)}) {
      const std::vector<double> x = rotary_test::random_vector<double>(static_cast<std::size_t>(3 * 7 * 3 * 66), rng);
      const std::vector<double> g = rotary_test::random_vector<double>(x.size(), rng);
      std::vector<double> fx = x;
      rotary::apply_batch(rope, layout, fx.data(), sh, pos);
      std::vector<double> back = fx;
      rotary::apply_batch(rope, layout, back.data(), sh, pos, Direction::inverse);
      double err = 0.0;
      for (std::size_t i = 0; i < x.size(); ++i) err = std::max(err, std::fabs(back[i] - x[i]));
      EXPECT_LT(err, 1e-13) << rotary::to_string(layout);
      std::vector<double> gt = g;
      rotary::apply_batch(rope, layout, gt.data(), sh, pos, Direction::inverse);
      double lhs = 0.0;
      double rhs = 0.0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        lhs += fx[i] * g[i];
        rhs += x[i] * gt[i];
      }
      EXPECT_NEAR(lhs, rhs, 1e-11 * (1.0 + std::fabs(lhs))) << rotary::to_string(layout);
    }
  }
  // varlen, f32
  const rotary::Rope<float> rf(rotary::RotarySpec(64), 100);
  const std::vector<std::int64_t> cu{0, 5, 5, 12};
  const StridedLayout l{12, 2, 128, 64};
  const std::vector<float> x = rotary_test::random_vector<float>(12 * 128, rng);
  const std::vector<float> g = rotary_test::random_vector<float>(12 * 128, rng);
  std::vector<float> fx = x;
  rotary::apply_varlen(rf, fx.data(), l, cu, SequencePositions::starts({3, 9, 50}));
  std::vector<float> gt = g;
  rotary::apply_varlen(rf, gt.data(), l, cu, SequencePositions::starts({3, 9, 50}), Direction::inverse);
  std::vector<float> back = fx;
  rotary::apply_varlen(rf, back.data(), l, cu, SequencePositions::starts({3, 9, 50}), Direction::inverse);
  double lhs = 0.0;
  double rhs = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    lhs += static_cast<double>(fx[i]) * g[i];
    rhs += static_cast<double>(x[i]) * gt[i];
    EXPECT_NEAR(back[i], x[i], 1e-5f);
  }
  EXPECT_NEAR(lhs, rhs, 1e-4 * (1.0 + std::fabs(lhs)));
}

TEST(Layouts, ParallelForEqualsSerial) {
  std::mt19937_64 rng(rotary_test::seed() + 5);
  const rotary::Rope<float> rope(rotary::RotarySpec(128, Pairing::half_split), 2048);
  const BatchShape sh{4, 200, 8, 128};
  for (Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(4 * 200 * 8 * 128), rng);
    std::vector<float> serial = x;
    std::vector<float> threaded = x;
    const SequencePositions pos = SequencePositions::starts({0, 7, 1000, 3});
    rotary::apply_batch(rope, layout, serial.data(), sh, pos);
    rotary::apply_batch(rope, layout, threaded.data(), sh, pos, {Direction::forward, rotary::thread_parallel_for(3)});
    EXPECT_TRUE(same_bits(serial, threaded)) << rotary::to_string(layout);
  }
}

// Cache-free ropes and the unchecked entry points go through the same path.
TEST(Layouts, OnTheFlyAndUnchecked) {
  std::mt19937_64 rng(rotary_test::seed() + 9);
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  const rotary::Rope<float> rope(rotary::RotarySpec(64, Pairing::interleaved, 5e5), rotary::OnTheFly{});
  const BatchShape sh{3, 40, 2, 64};
  const std::vector<std::int64_t> starts{0, 1000000, 77};
  std::vector<std::int64_t> expected;
  for (auto s0 : starts)
    for (std::int64_t t = 0; t < 40; ++t) expected.push_back(s0 + t);
  for (Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(3 * 40 * 2 * 64), rng);
    const BatchStrides st = rotary::dense_strides(layout, sh);
    const std::vector<float> want = reference(rope, x, sh, st, expected, Direction::forward);
    std::vector<float> got = x;
    rotary::apply_batch(rope, layout, got.data(), sh, SequencePositions::starts(starts), {Direction::forward, rotary::thread_parallel_for(2)});
    EXPECT_TRUE(same_bits(got, want)) << rotary::to_string(layout);
    std::vector<float> out(x.size());
    rotary::unchecked::apply_batch(rope, BatchView<const float>(x.data(), sh, st), BatchView<float>(out.data(), sh, st),
                                  SequencePositions::starts(starts));
    EXPECT_TRUE(same_bits(out, want)) << rotary::to_string(layout);
    std::vector<float> q = x;
    rotary::unchecked::apply_qk_batch(rope, BatchView<const float>(x.data(), sh, st), BatchView<float>(q.data(), sh, st),
                                     BatchView<const float>(), BatchView<float>(), SequencePositions::starts(starts));
    EXPECT_TRUE(same_bits(q, want)) << rotary::to_string(layout);
  }
}

// Every ISA gives the same bits through the batched path (bhsd: one dispatch per sequence; bshd: one).
TEST(Layouts, EveryIsaSameBits) {
  std::mt19937_64 rng(rotary_test::seed() + 10);
  const rotary::Rope<rotary::bf16> rope(rotary::RotarySpec(70, Pairing::half_split, 1e4, 64), 300);
  const BatchShape sh{2, 9, 3, 70};
  const std::vector<rotary::bf16> x = rotary_test::random_vector<rotary::bf16>(static_cast<std::size_t>(2 * 9 * 3 * 70), rng);
  for (Layout layout : {Layout::bshd, Layout::bhsd}) {
    std::vector<rotary::bf16> first;
    for (rotary::Isa isa : rotary::all_isas()) {
      if (!rotary::isa_supported(isa)) continue;
      const rotary_test::IsaScope scope(isa);
      std::vector<rotary::bf16> y = x;
      rotary::apply_batch(rope, layout, y.data(), sh, SequencePositions::starts({5, 200}));
      if (first.empty()) {
        first = y;
      } else {
        EXPECT_TRUE(same_bits(y, first)) << rotary::to_string(isa) << " " << rotary::to_string(layout);
      }
    }
  }
}

TEST(Layouts, TensorMapOverloads) {
  std::mt19937_64 rng(rotary_test::seed() + 6);
  const rotary::Rope<float> rope(rotary::RotarySpec(16), 64);
  const BatchShape sh{2, 3, 4, 16};
  const std::vector<float> x = rotary_test::random_vector<float>(2 * 3 * 4 * 16, rng);
  const SequencePositions pos = SequencePositions::starts({2, 9});
  for (Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    std::vector<float> want = x;
    rotary::apply_batch(rope, layout, want.data(), sh, pos);
    std::vector<float> got = x;
    const std::array<Eigen::Index, 4> dims =
        layout == Layout::bshd ? std::array<Eigen::Index, 4>{2, 3, 4, 16}
                               : layout == Layout::bhsd ? std::array<Eigen::Index, 4>{2, 4, 3, 16}
                                                        : std::array<Eigen::Index, 4>{3, 2, 4, 16};
    rotary::TensorMap4<float> t(got.data(), dims);
    rotary::apply_batch(rope, layout, t, pos);
    EXPECT_TRUE(same_bits(got, want)) << rotary::to_string(layout);
    std::vector<float> q = x;
    std::vector<float> k = x;
    rotary::apply_qk_batch(rope, layout, rotary::TensorMap4<float>(q.data(), dims),
                           rotary::TensorMap4<float>(k.data(), dims), pos);
    EXPECT_TRUE(same_bits(q, want));
    EXPECT_TRUE(same_bits(k, want));
  }
  std::vector<float> packed = x;  // 6 tokens x 4 heads x 16
  std::vector<float> want = x;
  const std::vector<std::int32_t> cu{0, 2, 6};
  rotary::apply_strided(rope, want.data(), StridedLayout{6, 4, 64, 16}, Positions(std::vector<std::int64_t>{0, 1, 0, 1, 2, 3}));
  rotary::apply_varlen(rope, rotary::TensorMap3<float>(packed.data(), 6, 4, 16), cu, SequencePositions::restart());
  EXPECT_TRUE(same_bits(packed, want));
}

TEST(LayoutsErrors, NameTheArgumentAndValue) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8), 16);
  std::vector<float> x(6 * 2 * 8, 0.5f);
  const StridedLayout l{6, 2, 16, 8};
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{1, 6}, SequencePositions::restart()); },
               {"cu_seqlens[0] (1) must be 0"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int32_t>{0, 4, 3, 6}, SequencePositions::restart()); },
               {"cu_seqlens[2] (3) < cu_seqlens[1] (4)"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 2, 5}, SequencePositions::restart()); },
               {"cu_seqlens[2] (5) != total tokens (6)"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{}, SequencePositions::restart()); },
               {"cu_seqlens has 0 values"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 3, 6}, SequencePositions::starts({1, 2, 3})); },
               {"start offsets has 3 values for 2 sequences"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 3, 6}, SequencePositions::starts({1, 14})); },
               {"positions[5]", "16"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 3, 6},
                                          SequencePositions::context_parallel(ContextSplit::contiguous, 2, 2)); },
               {"context-parallel rank (2)"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 3, 6},
                                          SequencePositions::context_parallel(ContextSplit::contiguous, 0, 0)); },
               {"context-parallel ranks (0)"});
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 3, 6},
                                          SequencePositions::context_parallel(ContextSplit::load_balanced, 0, 2)); },
               {"sequence 0 has 3 local tokens"});
  const std::vector<std::int64_t> five{0, 1, 2, 3, 4};
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 3, 6}, SequencePositions::per_token(Positions(five))); },
               {"per-token positions has 5 values for 6 tokens"});
  std::vector<std::int64_t> bad = {0, 1, 2, 3, -4, 5};
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int64_t>{0, 3, 6}, SequencePositions::per_token(Positions(bad))); },
               {"positions[4] (-4) must be >= 0"});

  // batch views
  const BatchShape sh{2, 3, 2, 8};
  std::vector<float> y(2 * 3 * 2 * 8, 0.5f);
  const std::vector<float> y0 = y;
  expect_error([&] { rotary::apply_batch(rope, Layout::bhsd, y.data(), sh, SequencePositions::starts({0, 14})); },
               {"sequence 1: ", "16"});
  EXPECT_EQ(y, y0) << "a failed call must not have rotated sequence 0";
  expect_error([&] { rotary::apply_batch(rope, Layout::bshd, y.data(), BatchShape{2, 3, 2, 6}, SequencePositions::restart()); },
               {"head_dim (6) != rope head_dim (8)"});
  expect_error([&] { rotary::apply_batch(rope, BatchView<float>(y.data(), sh, BatchStrides{8, 8, 48}), SequencePositions::restart()); },
               {"rows overlap", "batch 8"});
  expect_error([&] { rotary::apply_batch(rope, BatchView<const float>(y.data(), Layout::bshd, sh),
                                         BatchView<float>(y.data() + 8, Layout::bshd, sh), SequencePositions::restart()); },
               {"input and output overlap"});
  expect_error([&] { rotary::apply_batch(rope, BatchView<const float>(y.data(), Layout::bshd, sh),
                                         BatchView<float>(x.data(), Layout::bshd, BatchShape{2, 2, 2, 8}),
                                         SequencePositions::restart()); },
               {"shape mismatch"});
  expect_error([&] { rotary::apply_qk_batch(rope, BatchView<float>(y.data(), Layout::bshd, sh),
                                            BatchView<float>(x.data(), Layout::bshd, BatchShape{2, 2, 1, 8}),
                                            SequencePositions::restart()); },
               {"(batch x seq)"});
  expect_error([&] { rotary::apply_batch(rope, Layout::bshd, y.data(), BatchShape{-1, 3, 2, 8}, SequencePositions::restart()); },
               {"batch -1"});
}

// A batched call reads more than its inputs: a per-token positions array, a caller's cos/sin table.
// When the batch folds into one run the caller's array reaches the kernels as it is, so an output
// over it would be overwritten before it is read (wrong rows, out-of-cache reads): the whole call is
// checked, every output against every read, before any sequence is written. cu_seqlens is read into
// the sequence lengths before any write: an output over it is no hazard and is accepted.
TEST(LayoutsErrors, OutputsApartFromWhatTheCallReads) {
  constexpr std::int64_t kD = 8;
  const rotary::Rope<float> rope(rotary::RotarySpec(kD), 256);
  const BatchShape sh{2, 40, 1, kD};
  std::vector<float> x(2 * 40 * kD);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.3f + 0.001f * static_cast<float>(i % 97);
  // int32 positions (one per token) stored inside x's rows from token 10 on.
  const auto put_positions = [](float* at, std::int64_t n) {
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    auto* p = reinterpret_cast<std::int32_t*>(at);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::int32_t>((i * 13) % 200);
      std::memcpy(p + i, &v, sizeof v);
    }
    return Positions(p, n);
  };
  const Positions inside = put_positions(x.data() + 10 * kD, 80);
  const std::vector<float> x0 = x;

  // bshd folds into one run: the array went to the kernels as it is
  expect_error([&] { rotary::apply_batch(rope, Layout::bshd, x.data(), sh, SequencePositions::per_token(inside)); },
               {"x and per-token positions share memory", "is read while x is written"});
  EXPECT_EQ(x, x0) << "a refused call must write nothing";
  // bhsd with heads > 1 does not fold: still refused (the rule does not depend on the traversal)
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const Positions first40(reinterpret_cast<const std::int32_t*>(x.data() + 10 * kD), 40);
  expect_error([&] { rotary::apply_batch(rope, Layout::bhsd, x.data(), BatchShape{2, 20, 2, kD},
                                         SequencePositions::per_token(first40)); },
               {"x and per-token positions share memory"});
  EXPECT_EQ(x, x0);
  // out of place: the output over the positions
  std::vector<float> out(x.size(), 0.0f);
  const Positions in_out = put_positions(out.data() + 10 * kD, 80);
  const std::vector<float> out0 = out;
  expect_error([&] { rotary::apply_batch(rope, BatchView<const float>(x.data(), Layout::bshd, sh),
                                         BatchView<float>(out.data(), Layout::bshd, sh),
                                         SequencePositions::per_token(in_out)); },
               {"output and per-token positions share memory"});
  EXPECT_EQ(out, out0);
  // fused: k's output over the positions (q elsewhere)
  std::vector<float> q(x.size(), 0.5f);
  const std::vector<float> q0 = q;
  expect_error([&] { rotary::apply_qk_batch(rope, Layout::bshd, q.data(), sh, x.data(), 1,
                                            SequencePositions::per_token(inside)); },
               {"k and per-token positions share memory"});
  EXPECT_EQ(q, q0);
  EXPECT_EQ(x, x0);

  // a caller's table inside the rotated rows
  const rotary::TableRope<float> table(kD, kD, Pairing::half_split,
                                       rotary::CosSinTableView<float>::concatenated(x.data(), 16, kD));
  expect_error([&] { rotary::apply_batch(table, Layout::bshd, x.data(), BatchShape{2, 8, 1, kD},
                                         SequencePositions::start(0)); },
               {"x and the cos table share memory"});
  EXPECT_EQ(x, x0);

  // varlen: per-token positions inside the output
  const StridedLayout l{80, 1, kD, kD};
  const std::vector<float> x1 = x;
  expect_error([&] { rotary::apply_varlen(rope, x.data(), l, std::vector<std::int32_t>{0, 40, 80},
                                          SequencePositions::per_token(inside)); },
               {"per-token positions share memory"});
  EXPECT_EQ(x, x1);
  // varlen: cu_seqlens inside the output (int32 and int64 values), in place and out of place. It is
  // read into the sequence lengths before anything is written, so the call is accepted and gives the
  // bits of the same call with cu_seqlens in a buffer of its own.
  const std::vector<std::int32_t> cu32{0, 40, 80};
  const std::vector<std::int64_t> cu64{0, 40, 80};
  for (const bool wide : {false, true})
    for (const bool in_place : {true, false})
      for (const SequencePositions& p : {SequencePositions::restart(), SequencePositions::starts({0, 5})}) {
        std::vector<float> got = in_place ? x0 : std::vector<float>(x0.size(), 0.25f);
        float* const at = got.data() + 70 * kD;  // in the last sequence's rows
        if (wide)
          std::memcpy(at, cu64.data(), cu64.size() * sizeof(std::int64_t));
        else
          std::memcpy(at, cu32.data(), cu32.size() * sizeof(std::int32_t));
        // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
        const auto* const at64 = reinterpret_cast<const std::int64_t*>(at);
        // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
        const auto* const at32 = reinterpret_cast<const std::int32_t*>(at);
        const rotary::CuSeqlens cu = wide ? rotary::CuSeqlens(at64, 3) : rotary::CuSeqlens(at32, 3);
        std::vector<float> want = got;
        if (in_place) {
          rotary::apply_varlen(rope, want.data(), l, cu32, p);
          EXPECT_NO_THROW(rotary::apply_varlen(rope, got.data(), l, cu, p));
        } else {
          rotary::apply_varlen(rope, x0.data(), l, want.data(), l, cu32, p);
          EXPECT_NO_THROW(rotary::apply_varlen(rope, x0.data(), l, got.data(), l, cu, p));
        }
        EXPECT_TRUE(same_bits(got, want))
            << (wide ? "int64" : "int32") << (in_place ? ", in place" : ", out of place");
      }

  // positions held apart from the outputs (here: inside the read-only input) still pass
  std::vector<float> in2 = x0;
  const Positions in_input = put_positions(in2.data() + 10 * kD, 80);
  std::vector<float> out2(x.size());
  EXPECT_NO_THROW(rotary::apply_batch(rope, BatchView<const float>(in2.data(), Layout::bshd, sh),
                                      BatchView<float>(out2.data(), Layout::bshd, sh),
                                      SequencePositions::per_token(in_input)));
}

// Only 0 key heads means "no key": a negative count was taken as none and k came back unrotated.
TEST(LayoutsErrors, NegativeKeyHeadsAreRefused) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8), 16);
  std::vector<float> q(4 * 8, 1.0f);
  std::vector<float> k(8 * 8, 1.0f);
  const std::vector<float> q0 = q;
  const std::vector<float> k0 = k;
  expect_error([&] { rotary::apply_qk_batch(rope, Layout::bshd, q.data(), BatchShape{1, 4, 1, 8}, k.data(), -2,
                                            SequencePositions::start(1)); },
               {"k ", "heads -2", "must be >= 0"});
  expect_error([&] { rotary::apply_qk_batch(rope, BatchView<float>(q.data(), Layout::bshd, BatchShape{1, 4, 1, 8}),
                                            BatchView<float>(k.data(), Layout::bshd, BatchShape{1, 4, -1, 8}),
                                            SequencePositions::start(1)); },
               {"k ", "heads -1", "must be >= 0"});
  expect_error([&] { rotary::apply_qk_varlen(rope, q.data(), StridedLayout{4, 1, 8, 8}, k.data(), StridedLayout{4, -1, 8, 8},
                                             std::vector<std::int32_t>{0, 4}, SequencePositions::start(1)); },
               {"k heads (-1) must be >= 0"});
  // A k input of 0 heads is no key only with a k output of 0 heads: k_out was left unrotated.
  std::vector<float> k_out(8 * 8, 2.0f);
  const std::vector<float> k_out0 = k_out;
  expect_error([&] { rotary::apply_qk_batch(rope, BatchView<const float>(q.data(), Layout::bshd, BatchShape{1, 4, 1, 8}),
                                            BatchView<float>(q.data(), Layout::bshd, BatchShape{1, 4, 1, 8}),
                                            BatchView<const float>(k.data(), Layout::bshd, BatchShape{1, 4, 0, 8}),
                                            BatchView<float>(k_out.data(), Layout::bshd, BatchShape{1, 4, 2, 8}),
                                            SequencePositions::start(1)); },
               {"k input has 0 heads (no key) but k output has 2"});
  EXPECT_EQ(q, q0);
  EXPECT_EQ(k, k0);
  EXPECT_EQ(k_out, k_out0);
}

// Shapes are checked before anything is computed or allocated from them: batch x seq overflowed
// int64 with 0 heads (undefined behaviour), a vector of 2^61 sequence lengths threw std::length_error,
// and 2^50 packed tokens with 0 heads had their positions expanded before the heads were checked.
TEST(LayoutsErrors, AbsurdShapesRefusedBeforeArithmetic) {
  const rotary::Rope<float> rope(rotary::RotarySpec(8), 16);
  std::vector<float> x(8, 0.5f);
  const std::vector<float> x0 = x;
  expect_error([&] { rotary::apply_batch(rope, Layout::bshd, x.data(), BatchShape{2, std::int64_t{1} << 62, 0, 8},
                                         SequencePositions::start(0)); },
               {"batch (2) x seq (4611686018427387904) overflows int64"});
  expect_error([&] { rotary::apply_batch(rope, Layout::bshd, x.data(), BatchShape{std::int64_t{1} << 61, 1, 0, 8},
                                         SequencePositions::start(0)); },
               {"heads (0) must be >= 1"});
  // no tokens: nothing to do, however many (empty) sequences
  EXPECT_NO_THROW(rotary::apply_batch(rope, Layout::bshd, x.data(), BatchShape{std::int64_t{1} << 62, 0, 1, 8},
                                      SequencePositions::start(0)));
  EXPECT_NO_THROW(rotary::apply_batch(rope, Layout::bshd, x.data(), BatchShape{std::int64_t{1} << 62, 0, 1, 8},
                                      SequencePositions::context_parallel(ContextSplit::load_balanced, 1, 2)));
  expect_error([&] { rotary::apply_batch(rope, Layout::bshd, x.data(), BatchShape{std::int64_t{1} << 62, 0, 1, 8},
                                         SequencePositions::starts({0, 1})); },
               {"start offsets has 2 values for 4611686018427387904 sequences"});
  // a view that spans under PTRDIFF_MAX bytes but claims 2^61 - 1 sequences (no real buffer)
  const rotary::Rope<rotary::f16> small(rotary::RotarySpec(2), 16);
  std::vector<rotary::f16> h(2);
  expect_error([&] { rotary::apply_batch(small, Layout::bshd, h.data(), BatchShape{(std::int64_t{1} << 61) - 1, 1, 1, 2},
                                         SequencePositions::per_token(Positions::contiguous(0))); },
               {"do not fit in memory"});
  // packed: the layout is checked before the per-sequence starts are expanded to every token
  const std::int64_t n = std::int64_t{1} << 50;
  expect_error([&] { rotary::apply_varlen(rope, x.data(), StridedLayout{n, 0, 0, 0}, std::vector<std::int64_t>{0, n / 2, n},
                                          SequencePositions::starts({0, 5})); },
               {"heads (0) must be >= 1"});
  EXPECT_EQ(x, x0);
  // 16-bit strides whose span overflows int64: refused (the rows-ahead decision, made before the
  // checks, once multiplied them in int64: found by fuzz_layouts under UBSan)
  const std::vector<rotary::f16> h0 = h;
  expect_error([&] { rotary::apply_strided(small, h.data(), StridedLayout{std::int64_t{1} << 40, 2, std::int64_t{1} << 60, 2},
                                           Positions::contiguous(0)); },
               {"spans more than PTRDIFF_MAX bytes"});
  EXPECT_EQ(h, h0);
}

}  // namespace
