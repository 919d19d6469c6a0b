// The view geometry behind every overlap and in-place check (detail/geometry.hpp), held against a
// byte-level brute force: random views of up to three axes over a small arena, every row's elements
// marked one by one. The O(1) answers must never claim less than the bytes show: an extent covers
// exactly the rows' bytes, "rows disjoint" means no element is shared, "apart" means two views share
// no element, "same" means the same rows in the same order; and where strides nest (the views the
// entry points accept), "rows disjoint" is exact.
#include <gtest/gtest.h>

#include <rotary/config.hpp>  // the private headers below need a public one first
#include <rotary/detail/driver/checks.hpp>
#include <rotary/detail/geometry.hpp>
#include <rotary/kv_cache.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "support.hpp"

namespace {

using rotary::detail::StridedRows;

struct Axis {
  std::int64_t count = 0;
  std::ptrdiff_t stride = 0;
};

constexpr std::ptrdiff_t kArena = 4096;

struct View {
  std::ptrdiff_t offset = 0;  // elements from the arena's start
  std::int64_t row_len = 1;
  std::vector<Axis> axes;

  template <class T>
  StridedRows geometry(const T* arena) const {
    const auto ax = [this](std::size_t k) { return StridedRows::Axis{"axis", axes[k].count, axes[k].stride}; };
    switch (axes.size()) {
      case 1: return StridedRows(arena + offset, row_len, {ax(0)});
      case 2: return StridedRows(arena + offset, row_len, {ax(0), ax(1)});
      default: return StridedRows(arena + offset, row_len, {ax(0), ax(1), ax(2)});
    }
  }
  // Element index of every element of every row, rows in order.
  std::vector<std::ptrdiff_t> elements() const {
    std::vector<std::ptrdiff_t> out;
    std::vector<std::int64_t> i(axes.size(), 0);
    for (const Axis& a : axes)
      if (a.count == 0) return out;
    while (true) {
      std::ptrdiff_t start = offset;
      for (std::size_t k = 0; k < axes.size(); ++k) start += i[k] * axes[k].stride;
      for (std::int64_t e = 0; e < row_len; ++e) out.push_back(start + e);
      std::size_t k = axes.size();
      while (k > 0 && ++i[k - 1] == axes[k - 1].count) i[--k] = 0;
      if (k == 0) return out;
    }
  }
};

View random_view(std::mt19937_64& rng, std::size_t n_axes, std::int64_t row_len) {
  View v;
  v.row_len = row_len;
  std::uniform_int_distribution<std::int64_t> count(0, 4);
  std::uniform_int_distribution<std::ptrdiff_t> stride(0, 24);
  std::uniform_int_distribution<std::ptrdiff_t> offset(0, 256);
  v.offset = offset(rng);
  for (std::size_t k = 0; k < n_axes; ++k) v.axes.push_back({count(rng) == 0 ? 0 : 1 + count(rng), stride(rng)});
  return v;
}

bool brute_rows_disjoint(const View& v) {
  std::vector<int> seen(kArena, 0);
  for (const std::ptrdiff_t e : v.elements())
    if (seen[static_cast<std::size_t>(e)]++ != 0) return false;
  return true;
}

bool brute_apart(const View& a, const View& b) {
  std::vector<char> in_a(kArena, 0);
  for (const std::ptrdiff_t e : a.elements()) in_a[static_cast<std::size_t>(e)] = 1;
  for (const std::ptrdiff_t e : b.elements())
    if (in_a[static_cast<std::size_t>(e)] != 0) return false;
  return true;
}

// Strides nest when, sorted, each reaches past the inner block: the layouts rotary accepts.
template <class T>
void check_one(const View& a, const View& b, const T* arena) {
  const StridedRows ga = a.geometry(arena);
  const StridedRows gb = b.geometry(arena);
  const std::vector<std::ptrdiff_t> ea = a.elements();
  const auto ex = ga.extent();
  if (ea.empty()) {
    EXPECT_EQ(ex.lo, ex.hi);
  } else {
    const auto [lo, hi] = std::minmax_element(ea.begin(), ea.end());
    EXPECT_EQ(ex.lo, reinterpret_cast<std::uintptr_t>(arena + *lo));
    EXPECT_EQ(ex.hi, reinterpret_cast<std::uintptr_t>(arena + *hi + 1));
  }
  const bool disjoint = brute_rows_disjoint(a);
  if (ga.rows_disjoint()) {
    EXPECT_TRUE(disjoint);
  }
  if (ga.apart(gb)) {
    EXPECT_TRUE(brute_apart(a, b));
  }
  if (ga.same(gb)) {
    EXPECT_EQ(ea, b.elements());
  }
  if (ga.heads_apart(gb)) {
    EXPECT_TRUE(brute_apart(a, b));
  }
  if (ga.blocks_apart(gb)) {
    EXPECT_TRUE(brute_apart(a, b));
  }
}

template <class T>
void sweep(std::uint64_t seed_offset) {
  std::mt19937_64 rng(rotary_test::seed() + seed_offset);
  std::vector<T> arena(static_cast<std::size_t>(kArena));
  std::uniform_int_distribution<std::int64_t> row_len(1, 8);
  std::int64_t exact = 0;
  std::int64_t by_blocks = 0;  // pairs whose extents overlap, found apart by blocks_apart
  for (int i = 0; i < 20000; ++i) {
    const std::size_t n = 1 + static_cast<std::size_t>(i % 3);
    const std::int64_t len = row_len(rng);
    const View a = random_view(rng, n, len);
    View b = random_view(rng, n, len);
    if (i % 4 == 0) {  // b: the heads next to a's, same strides (a fused QKV buffer), or a itself
      b.axes = a.axes;
      b.offset = a.offset + (i % 8 == 0 ? 0 : a.axes.back().stride * (a.axes.back().count + (i % 3)));
    } else if (i % 4 == 1) {  // b: rows of another length in the same outer steps, at or near the end
      b.axes[0].stride = a.axes[0].stride;  // of a's block in each (packed q and narrower v heads)
      b.row_len = row_len(rng);
      std::ptrdiff_t block = a.row_len;
      for (std::size_t k = 1; k < a.axes.size(); ++k)
        block += a.axes[k].count > 0 ? (a.axes[k].count - 1) * a.axes[k].stride : 0;
      b.offset = a.offset + block + static_cast<std::ptrdiff_t>(i % 3) - 1;
    }
    SCOPED_TRACE(testing::Message() << "case " << i << " " << rotary_test::seed_note());
    check_one(a, b, arena.data());
    const StridedRows ga = a.geometry(arena.data());
    const StridedRows gb = b.geometry(arena.data());
    if (ga.overlaps(gb) && ga.blocks_apart(gb)) ++by_blocks;
    // Nesting strides: the O(1) answer is exact.
    std::vector<Axis> sorted = a.axes;
    std::sort(sorted.begin(), sorted.end(), [](const Axis& x, const Axis& y) { return x.stride < y.stride; });
    std::ptrdiff_t reach = a.row_len;
    bool nests = true;
    for (const Axis& x : sorted) {
      if (x.count <= 1) continue;
      nests = nests && x.stride >= reach;
      reach += x.stride * (x.count - 1);
    }
    if (nests || a.elements().empty()) {
      EXPECT_TRUE(a.geometry(arena.data()).rows_disjoint());
      ++exact;
    } else {
      EXPECT_FALSE(a.geometry(arena.data()).rows_disjoint());
    }
  }
  EXPECT_GT(exact, 1000);  // the sweep reaches both answers
  EXPECT_GT(by_blocks, 20);  // 50-85 of the 20,000 cases
}

TEST(Geometry, AgreesWithBytesF32) { sweep<float>(1); }
TEST(Geometry, AgreesWithBytes16Bit) { sweep<std::uint16_t>(2); }

// The q and k heads of one fused QKV buffer: interleaved inside every token, bounding extents
// overlapping, rows apart.
TEST(Geometry, FusedQkvHeadsAreApart) {
  std::vector<float> qkv(static_cast<std::size_t>(7 * (8 + 2 + 2) * 16));
  const std::ptrdiff_t ts = (8 + 2 + 2) * 16;
  const StridedRows q(qkv.data(), 16, {{"token", 7, ts}, {"head", 8, 16}});
  const StridedRows k(qkv.data() + 8 * 16, 16, {{"token", 7, ts}, {"head", 2, 16}});
  const StridedRows k_late(qkv.data() + 7 * 16, 16, {{"token", 7, ts}, {"head", 2, 16}});  // on q's last head
  EXPECT_TRUE(q.overlaps(k));
  EXPECT_TRUE(q.apart(k));
  EXPECT_TRUE(k.apart(q));
  EXPECT_FALSE(q.apart(k_late));
  EXPECT_TRUE(q.same(StridedRows(qkv.data(), 16, {{"token", 7, ts}, {"head", 8, 16}})));
  EXPECT_FALSE(q.same(StridedRows(qkv.data(), 16, {{"token", 7, ts}, {"head", 7, 16}})));
}

}  // namespace

// ---- the straight-line paths of the view checks ------------------------------------------------------

// check_view and KvCacheView::check answer most calls with straight-line arithmetic (view_sound, the
// cache's own) and run their tests one by one only for a message. Both held against their rules as
// the tests spell them, written here with the general helpers (span_fits, StridedRows::rows_disjoint):
// random counts, strides and row lengths around one another, negatives, zeros and values whose
// products overflow. The answer must be the rule's, and the straight-line one exact where it answers.
namespace {

std::int64_t edge_value(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t extremes[] = {kMax,
                                   kMax / 2,
                                   kMax / 4 + 1,
                                   kMax / 16,
                                   std::int64_t{1} << 31,
                                   std::int64_t{1} << 40,
                                   std::numeric_limits<std::int64_t>::min(),
                                   -kMax / 3};
  if (std::uniform_int_distribution<int>(0, 4)(rng) == 0)
    return extremes[std::uniform_int_distribution<std::size_t>(0, std::size(extremes) - 1)(rng)];
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

}  // namespace

TEST(Geometry, ViewSoundIsCheckViewsRule) {
  using rotary::detail::span_fits;
  std::mt19937_64 rng(rotary_test::seed() + 3);
  const float cell = 0.0f;
  int valid = 0, answered = 0;
  for (int i = 0; i < 200000; ++i) {
    const float* p = std::uniform_int_distribution<int>(0, 15)(rng) == 0 ? nullptr : &cell;
    const std::int64_t tokens = edge_value(rng, -1, 3), heads = edge_value(rng, -1, 3);
    const std::ptrdiff_t ts = edge_value(rng, -1, 20), hs = edge_value(rng, -1, 20);
    const std::int64_t d = edge_value(rng, -1, 8);
    // check_view's tests, in the order it runs them (each only where the ones before passed)
    const bool rule =
        tokens >= 0 && heads >= 0 && ts >= 0 && hs >= 0 && (tokens == 0 || p != nullptr) &&
        (tokens == 0 || heads == 0 || span_fits({{tokens, ts}, {heads, hs}}, d, sizeof(float))) &&
        StridedRows(p, d, StridedRows::Axis{"token", tokens, ts}, StridedRows::Axis{"head", heads, hs})
            .rows_disjoint();
    const bool sound = rotary::detail::view_sound(p, tokens, heads, ts, hs, d, sizeof(float));
    ASSERT_EQ(rotary::detail::check_view("x", p, tokens, heads, ts, hs, d).empty(), rule)
        << "case " << i << ": tokens " << tokens << " heads " << heads << " strides " << ts << ", " << hs
        << " head_dim " << d << (p == nullptr ? " null" : "");
    if (sound) {
      ASSERT_TRUE(rule) << "case " << i;
    }
    // exact wherever the view has rows
    if (rule && tokens >= 1 && heads >= 1 && d >= 1 && p != nullptr) {
      ASSERT_TRUE(sound) << "case " << i;
      ++answered;
    }
    valid += rule ? 1 : 0;
  }
  EXPECT_GT(valid, 20000);
  EXPECT_GT(answered, 10000);
  EXPECT_LT(valid, 180000);
}

template <class E>
void cache_check_sweep(std::uint64_t seed_offset) {
  using rotary::detail::span_fits;
  std::mt19937_64 rng(rotary_test::seed() + seed_offset);
  std::vector<E> data(1024);  // holds every cache of counts <= 3 and strides <= 120
  std::vector<float> scales(8);
  constexpr bool kScales = rotary::cache_scales_of<E>() != rotary::CacheScales::none;
  int valid = 0;
  for (int i = 0; i < 200000; ++i) {
    rotary::KvCacheView<E> c;
    c.data = std::uniform_int_distribution<int>(0, 15)(rng) == 0 ? nullptr : data.data();
    c.blocks = edge_value(rng, -1, 3);
    c.block_size = edge_value(rng, -1, 3);
    c.heads = edge_value(rng, -1, 3);
    c.head_dim = edge_value(rng, -1, 6);
    c.block_stride = edge_value(rng, -1, 120);
    c.slot_stride = edge_value(rng, -1, 30);
    c.head_stride = edge_value(rng, -1, 30);
    if (i % 2 == 0 && c.block_size >= 1 && c.block_size <= 3 && c.heads >= 1 && c.heads <= 3 &&
        c.head_dim >= 1 && c.head_dim <= 6) {  // near a dense layout: the strides at their edges
      const auto near = [&] { return std::uniform_int_distribution<std::int64_t>(-1, 2)(rng); };
      c.head_stride = c.head_dim + near();
      c.slot_stride = c.heads * c.head_stride + near();
      c.block_stride = c.block_size * c.slot_stride + near();
    }
    const bool with_scales = std::uniform_int_distribution<int>(0, 7)(rng) != 0 ? kScales : !kScales;
    c.scales = with_scales ? scales.data() : nullptr;
    bool rule =
        c.blocks >= 1 && c.block_size >= 1 && c.heads >= 1 && c.head_dim >= 1 && c.data != nullptr &&
        c.block_stride >= 0 && c.slot_stride >= 0 && c.head_stride >= 0 &&
        span_fits({{c.blocks, c.block_stride}, {c.block_size, c.slot_stride}, {c.heads, c.head_stride}},
                  c.head_dim, sizeof(E)) &&
        StridedRows(c.data, c.head_dim, StridedRows::Axis{"slot", c.block_size, c.slot_stride},
                    StridedRows::Axis{"head", c.heads, c.head_stride})
            .rows_disjoint();
    if (rule && c.blocks > 1)
      rule =
          c.block_stride >= (c.block_size - 1) * c.slot_stride + (c.heads - 1) * c.head_stride + c.head_dim;
    rule = rule && with_scales == kScales;
    if (rule && kScales)  // (int8: one scale per row; the scales never inside the codes)
      rule = c.blocks * c.block_size * c.heads <= std::numeric_limits<std::ptrdiff_t>::max() / 4 &&
             !rotary::detail::overlap(c.scales_extent(), c.extent());
    ASSERT_EQ(c.check().empty(), rule)
        << "case " << i << ": blocks " << c.blocks << " x " << c.block_size << " x " << c.heads << " x "
        << c.head_dim << ", strides " << c.block_stride << ", " << c.slot_stride << ", " << c.head_stride;
    valid += rule ? 1 : 0;
  }
  EXPECT_GT(valid, 4000);  // 6,500-7,000 of the 200,000
  EXPECT_LT(valid, 190000);
}

TEST(Geometry, CacheCheckIsItsRuleF32) { cache_check_sweep<float>(5); }
TEST(Geometry, CacheCheckIsItsRuleInt8) { cache_check_sweep<std::int8_t>(7); }
