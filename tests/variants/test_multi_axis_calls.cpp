// Multi-axis RoPE (multi_axis.hpp) calls and properties: equal streams bit-identical to 1-D RoPE,
// every ISA the same bits, fused q+k with GQA and threads, strided layouts and guard pages, inverse
// undoing forward and relative position per axis, and what the checked entry points refuse.
#include <algorithm>
#include <complex>
#include <cstring>
#include <functional>
#include <limits>

#include "support.hpp"

namespace {

using rotary::AxisFrequencies;
using rotary::AxisMap;
using rotary::AxisPositions;
using rotary::bf16;
using rotary::Direction;
using rotary::f16;
using rotary::MultiAxisRope;
using rotary::Pairing;
using rotary::Positions;
using rotary::RowMatrix;
using rotary_test::random_rows;
using rotary_test::to_d;

using ld = long double;

// The map's axis of each pair, as a vector.
std::vector<int> axis_vector(const AxisMap& map) {
  return std::vector<int>(map.axis_of_pair().begin(), map.axis_of_pair().end());
}

template <class T>
bool same_bits(const RowMatrix<T>& a, const RowMatrix<T>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(T)) == 0;
}

// ---- equal streams are 1-D RoPE, bit for bit ---------------------------------------------------------

template <class T>
void equal_streams_case(Pairing pairing, bool on_the_fly) {
  std::mt19937_64 rng(rotary_test::seed());
  for (const std::int64_t head_dim : {128, 80, 70}) {
    const std::int64_t rotary_dim = head_dim == 70 ? 48 : head_dim;
    const rotary::RotarySpec spec(head_dim, pairing, 1e6, rotary_dim);
    const std::int64_t pairs = rotary_dim / 2;
    std::vector<AxisMap> maps = {
        rotary::mrope_axis_map(rotary_dim, {pairs / 4, pairs / 4, pairs - pairs / 2}),
        rotary::axial_axis_map(rotary_dim, 2, rotary::AxialLayout::interleaved)};
    maps.push_back(
        rotary::interleaved_mrope_axis_map(rotary_dim, {pairs - 2 * (pairs / 3), pairs / 3, pairs / 3}));
    if (pairs == 64) maps.push_back(rotary::interleaved_mrope_axis_map(rotary_dim, {24, 20, 20}));
    std::vector<std::uint8_t> random_axis(static_cast<std::size_t>(pairs));
    for (auto& a : random_axis) a = static_cast<std::uint8_t>(rng() % 4);
    maps.emplace_back(random_axis, 4);
    // 100 tokens: runs of +1 across block boundaries, repeats of an anchor, steps followed by
    // repeats (1-D re-anchors there: the repeat must not keep a recurrence value), jumps; beyond 2^40
    // on the fly
    const std::int64_t tokens = 100;
    const std::int64_t offset = on_the_fly ? (std::int64_t{1} << 40) + 12345 : 0;
    std::vector<std::int64_t> pos(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t)
      pos[static_cast<std::size_t>(t)] = offset + (t < 40   ? 1000 + t
                                                   : t < 50 ? 2000
                                                   : t < 60 ? 3000 + (t - 50) / 2
                                                            : static_cast<std::int64_t>(rng() % 4000));
    const std::int64_t heads = 3;
    const rotary::Rope<T> rope =
        on_the_fly ? rotary::Rope<T>(spec, rotary::OnTheFly{}) : rotary::Rope<T>(spec, 4000);
    for (const AxisMap& map : maps) {
      const MultiAxisRope<T> mrope(rope, map);
      std::vector<std::int64_t> planar;
      for (int a = 0; a < map.streams(); ++a) planar.insert(planar.end(), pos.begin(), pos.end());
      const RowMatrix<T> x = random_rows<T>(tokens * heads, head_dim, rng);
      RowMatrix<T> y1 = x;
      RowMatrix<T> ym = x;
      rotary::apply(mrope.rope(), y1, Positions(pos), heads);
      rotary::apply(mrope, ym, AxisPositions(planar, map.streams()), heads);
      EXPECT_TRUE(same_bits(y1, ym)) << "head_dim " << head_dim << " streams " << map.streams()
                                     << (on_the_fly ? " on the fly" : " table");
      rotary::apply(mrope.rope(), y1, Positions(pos), heads, Direction::inverse);
      rotary::apply(mrope, ym, AxisPositions(planar, map.streams()), heads, Direction::inverse);
      EXPECT_TRUE(same_bits(y1, ym)) << "inverse, head_dim " << head_dim;
    }
  }
}

TEST(MultiAxisEqualStreams, BitIdenticalTo1D) {
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved})
    for (const bool otf : {false, true}) {
      equal_streams_case<float>(pairing, otf);
      equal_streams_case<double>(pairing, otf);
      equal_streams_case<f16>(pairing, otf);
      equal_streams_case<bf16>(pairing, otf);
    }
}

// ---- SIMD reuse, fused q+k, threads, strided layouts, guard pages ---------------------------------

TEST(MultiAxisKernels, EveryIsaGivesTheSameBits) {
  std::mt19937_64 rng(rotary_test::seed());
  const rotary::RotarySpec spec(130, Pairing::interleaved, 1e6, 126);  // odd tails on every lane width
  const MultiAxisRope<float> mrope(spec, rotary::mrope_axis_map(126, {21, 21, 21}), 3000);
  const std::int64_t tokens = 37;
  std::vector<std::int64_t> planar(3 * tokens);
  for (auto& v : planar) v = static_cast<std::int64_t>(rng() % 3000);
  const RowMatrix<float> x = random_rows<float>(tokens * 5, 130, rng);
  RowMatrix<float> reference;
  for (const rotary::Isa isa : rotary::all_isas()) {
    if (!rotary::isa_supported(isa)) continue;
    const rotary_test::IsaScope scope(isa);
    RowMatrix<float> y(x.rows(), x.cols());
    rotary::apply(mrope, x, y, AxisPositions(planar, 3), 5);
    if (isa == rotary::Isa::scalar) {
      reference = y;
    } else {
      EXPECT_TRUE(same_bits(y, reference)) << rotary::to_string(isa);
    }
  }
}

TEST(MultiAxisFused, GqaEqualsSeparateCallsAndThreadsDoNotChangeBits) {
  std::mt19937_64 rng(rotary_test::seed());
  const rotary::RotarySpec spec(128, Pairing::half_split, 1e6);
  const MultiAxisRope<bf16> mrope(spec, rotary::interleaved_mrope_axis_map(128, {24, 20, 20}), 5000);
  rotary::MropePositionBuilder b;
  b.add_text(30).add_grid(1, 8, 12).add_text(47);
  const AxisPositions pos = b.positions();
  const std::int64_t tokens = b.tokens();
  const std::int64_t qh = 8;
  const std::int64_t kh = 2;
  const RowMatrix<bf16> q = random_rows<bf16>(tokens * qh, 128, rng);
  const RowMatrix<bf16> k = random_rows<bf16>(tokens * kh, 128, rng);
  RowMatrix<bf16> q1 = q;
  RowMatrix<bf16> k1 = k;
  rotary::apply(mrope, q1, pos, qh);
  rotary::apply(mrope, k1, pos, kh);
  RowMatrix<bf16> q2(q.rows(), 128);
  RowMatrix<bf16> k2(k.rows(), 128);
  rotary::apply_qk(mrope, q, q2, k, k2, pos, qh, kh);
  EXPECT_TRUE(same_bits(q1, q2));
  EXPECT_TRUE(same_bits(k1, k2));
  RowMatrix<bf16> q3 = q;
  RowMatrix<bf16> k3 = k;
  {
    const rotary_test::SplitAlways split;  // small enough that the gate would keep it on one thread
    rotary::apply_qk(mrope, q3, k3, pos, qh, kh, {Direction::forward, rotary::thread_parallel_for(3)});
  }
  EXPECT_TRUE(same_bits(q1, q3));
  EXPECT_TRUE(same_bits(k1, k3));
  // no key
  RowMatrix<bf16> q4 = q;
  rotary::apply_qk(mrope, q4, k3, pos, qh, 0);
  EXPECT_TRUE(same_bits(q1, q4));
}

TEST(MultiAxisStrided, HeadMajorLayoutAndGuardPages) {
  std::mt19937_64 rng(rotary_test::seed());
  const std::int64_t head_dim = 42;
  const std::int64_t tokens = 19;
  const std::int64_t heads = 3;
  const rotary::RotarySpec spec(head_dim, Pairing::half_split, 1e4, 36);
  const MultiAxisRope<float> mrope(spec, rotary::axial_axis_map(36, 3, rotary::AxialLayout::split), 64);
  const std::vector<std::int64_t> planar = rotary::grid_positions(1, 1, tokens, 3);  // t = h = 0, w = 0..18
  const AxisPositions pos(planar, 3);
  // [heads, tokens, head_dim] in a buffer flush against a guard page, rotated in place; the same
  // data as [tokens, heads, head_dim] rows through apply() must give the same bits.
  for (const rotary_test::Flush flush : {rotary_test::Flush::end, rotary_test::Flush::begin}) {
    rotary_test::GuardedBuffer<float> buf(static_cast<std::size_t>(heads * tokens * head_dim), flush);
    const RowMatrix<float> x = random_rows<float>(tokens * heads, head_dim, rng);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t h = 0; h < heads; ++h)
        std::memcpy(buf.data() + (h * tokens + t) * head_dim, x.row(t * heads + h).data(),
                    static_cast<std::size_t>(head_dim) * sizeof(float));
    rotary::apply_strided(mrope, buf.data(),
                          rotary::StridedLayout{tokens, heads, head_dim, tokens * head_dim}, pos);
    RowMatrix<float> y = x;
    rotary::apply(mrope, y, pos, heads);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t h = 0; h < heads; ++h)
        ASSERT_EQ(std::memcmp(buf.data() + (h * tokens + t) * head_dim, y.row(t * heads + h).data(),
                              static_cast<std::size_t>(head_dim) * sizeof(float)),
                  0)
            << "token " << t << " head " << h;
  }
}

// ---- properties -----------------------------------------------------------------------------------

TEST(MultiAxisProperties, InverseUndoesForward) {
  std::mt19937_64 rng(rotary_test::seed());
  const rotary::RotarySpec spec(96, Pairing::interleaved, 1e4, 64);
  const MultiAxisRope<float> mrope(spec, rotary::interleaved_mrope_axis_map(64, {12, 10, 10}),
                                   rotary::OnTheFly{});
  const std::int64_t tokens = 50;
  std::vector<std::int64_t> planar(3 * tokens);
  for (auto& v : planar) v = static_cast<std::int64_t>(rng() % 2000000000);
  const RowMatrix<float> x = random_rows<float>(tokens * 4, 96, rng);
  RowMatrix<float> y = x;
  rotary::apply(mrope, y, AxisPositions(planar, 3), 4);
  rotary::apply(mrope, y, AxisPositions(planar, 3), 4, Direction::inverse);
  // Each pass: cos/sin within 2^-25 and two roundings of the kernel (<= 2^-23 (|x0| + |x1|)), and
  // R^T R = 1 up to the cos^2 + sin^2 rounding: 2^-21 (|x0| + |x1|) covers both passes.
  double worst = 0.0;
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    for (std::int64_t j = 0; j < 32; ++j) {
      const double scale = std::fabs(x(r, 2 * j)) + std::fabs(x(r, 2 * j + 1));
      for (const std::int64_t k : {2 * j, 2 * j + 1}) {
        const double e = std::fabs(static_cast<double>(y(r, k)) - static_cast<double>(x(r, k)));
        worst = std::max(worst, e / (0x1p-21 * scale));
      }
    }
  std::printf("inverse(forward(x)): max error %.3f of 2^-21 (|x0| + |x1|)\n", worst);
  EXPECT_LE(worst, 1.0);
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    for (std::int64_t k = 64; k < 96; ++k) ASSERT_EQ(y(r, k), x(r, k));
}

// <R(P_q) q, R(P_k) k> per pair j depends on p_{a(j)}(k) - p_{a(j)}(q) only. Shifting every token's
// h position by delta leaves all scores unchanged; shifting only the key's h changes the per-pair
// scores of h's pairs (to the rotation by the new difference) and no other pair's.
TEST(MultiAxisProperties, RelativePositionPerAxis) {
  std::mt19937_64 rng(rotary_test::seed());
  constexpr std::int64_t d = 128;
  const rotary::RotarySpec spec(d, Pairing::half_split, 1e6);
  const MultiAxisRope<double> mrope(spec, rotary::mrope_axis_map(d, {16, 24, 24}), rotary::OnTheFly{});
  const std::vector<int> axis = axis_vector(mrope.axis_map());
  const std::vector<double>& theta = mrope.rope().cache().theta();
  const std::int64_t delta = 123457;
  const RowMatrix<double> q = random_rows<double>(1, d, rng);
  const RowMatrix<double> k = random_rows<double>(1, d, rng);
  const std::vector<std::int64_t> pq = {40, 3, 9};
  const std::vector<std::int64_t> pk = {12, 7, 2};
  const auto rotate = [&mrope](const RowMatrix<double>& x, const std::vector<std::int64_t>& p) {
    RowMatrix<double> y(1, x.cols());
    rotary::apply(mrope, x, y, AxisPositions(p, 3), 1);
    return y;
  };
  const auto pair_scores = [](const RowMatrix<double>& a, const RowMatrix<double>& b) {
    std::vector<double> s(static_cast<std::size_t>(d / 2));
    for (std::int64_t j = 0; j < d / 2; ++j)
      s[static_cast<std::size_t>(j)] = a(0, j) * b(0, j) + a(0, j + d / 2) * b(0, j + d / 2);
    return s;
  };
  const std::vector<double> base = pair_scores(rotate(q, pq), rotate(k, pk));
  // both shifted on h: every per-pair score unchanged (f64: |error| <= 1e-13 for |q|,|k| <= 2, m ~ 1e5)
  const std::vector<double> both =
      pair_scores(rotate(q, {pq[0], pq[1] + delta, pq[2]}), rotate(k, {pk[0], pk[1] + delta, pk[2]}));
  // key alone shifted on h
  const std::vector<std::int64_t> pk2 = {pk[0], pk[1] + delta, pk[2]};
  const std::vector<double> key = pair_scores(rotate(q, pq), rotate(k, pk2));
  double worst_both = 0.0;
  double worst_other = 0.0;
  double worst_h = 0.0;
  for (std::int64_t j = 0; j < d / 2; ++j) {
    const auto jj = static_cast<std::size_t>(j);
    worst_both = std::max(worst_both, std::fabs(both[jj] - base[jj]));
    if (axis[jj] != 1) {
      worst_other = std::max(worst_other, std::fabs(key[jj] - base[jj]));
    } else {
      // q^T R_{(pk_h + delta - pq_h) theta_j} k on this pair, in long double
      const ld ang = static_cast<ld>(pk2[1] - pq[1]) * static_cast<ld>(theta[jj]);
      const ld q0 = q(0, j), q1 = q(0, j + d / 2), k0 = k(0, j), k1 = k(0, j + d / 2);
      const ld expect =
          q0 * (k0 * std::cos(ang) - k1 * std::sin(ang)) + q1 * (k0 * std::sin(ang) + k1 * std::cos(ang));
      worst_h = std::max(worst_h, std::fabs(key[jj] - static_cast<double>(expect)));
    }
  }
  std::printf("relative position: shift both %.3g, other axes %.3g, h pairs vs reference %.3g\n", worst_both,
              worst_other, worst_h);
  EXPECT_LE(worst_both, 1e-12);
  EXPECT_LE(worst_other, 1e-12);
  EXPECT_LE(worst_h, 1e-12);
  // and the shift is visible: some h pair changed by far more than rounding
  double moved = 0.0;
  for (std::size_t j = 16; j < 40; ++j) moved = std::max(moved, std::fabs(key[j] - base[j]));
  EXPECT_GT(moved, 1e-3);
}

// ---- errors -----------------------------------------------------------------------------------------

TEST(MultiAxisErrors, ThrowRotaryError) {
  using rotary_test::expect_error;
  expect_error(
      [] {
        rotary::mrope_axis_map(128, {16, 24, 20});
      },
      {"mrope_section [16, 24, 20] sums to 60", "64"});
  expect_error([] { rotary::mrope_axis_map(128, {}); }, {"mrope_section has 0 entries"});
  expect_error([] { rotary::mrope_axis_map(128, {70, -6}); }, {"mrope_section[0] (70)"});
  expect_error([] { rotary::mrope_axis_map(127, {63}); }, {"rotary_dim (127)"});
  expect_error(
      [] {
        rotary::interleaved_mrope_axis_map(128, {10, 27, 27});
      },
      {"cannot be honoured", "stream 1 gets 21 pairs, not 27"});
  expect_error([] { rotary::axial_axis_map(100, 3, rotary::AxialLayout::split); },
               {"rotary_dim/2 (50)", "axes (3)"});
  expect_error([] { rotary::axial_axis_map(64, 9, rotary::AxialLayout::split); }, {"axes (9)"});
  expect_error([] { AxisMap({0, 1, 3}, 3); }, {"axis_of_pair[2] (3) must be < streams (3)"});
  expect_error([] { AxisMap({}, 1); }, {"axis_of_pair is empty"});
  expect_error(
      [] {
        rotary::axis_frequencies(rotary::mrope_axis_map(64, {8, 24}), 1e4, AxisFrequencies::strided);
      },
      {"strided axis frequencies need equal axes"});
  expect_error(
      [] { rotary::axis_frequencies(rotary::mrope_axis_map(64, {32}), -1.0, AxisFrequencies::shared); },
      {"base (-1)"});
  expect_error([] { rotary::grid_positions(1, 3, 4, 2, rotary::GridOptions{0, 1.0, 2}); }, {"merge (2)"});
  expect_error([] { rotary::grid_positions(1, 0, 4, 3); }, {"grid (1 x 0 x 4)"});
  expect_error([] { rotary::grid_positions(1, 2, 4, 4); }, {"grid axes (4)"});
  expect_error([] { rotary::MropePositionBuilder().add_text(-1); }, {"text token count (-1)"});
  // sizes and coordinates past int64 are refused before any arithmetic overflows (UBSan watches)
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  expect_error([] { rotary::grid_positions(1, std::int64_t{1} << 32, std::int64_t{1} << 32, 2); },
               {"more positions than a vector can hold"});
  expect_error([] { rotary::grid_positions(7, 7905747460161236407, 1, 3); },
               {"more positions than a vector can hold"});
  expect_error(
      [] {
        rotary::grid_positions(3, 1, 1, 3, rotary::GridOptions{0, 1e300, 1});
      },
      {"overflows int64"});
  expect_error(
      [] {
        rotary::grid_positions(1, 2, 1, 2, rotary::GridOptions{kMax, 1.0, 1});
      },
      {"overflows int64"});
  expect_error(
      [] {
        rotary::grid_positions(2, 1, 1, 3, rotary::GridOptions{kMax - 1, 4.0, 1});
      },
      {"grid start (9223372036854775806)", "overflows int64"});
  EXPECT_EQ(rotary::grid_positions(1, 1, 1, 3, rotary::GridOptions{kMax, 1.0, 1}),
            (std::vector<std::int64_t>{kMax, kMax, kMax}));  // the largest position itself is valid
  EXPECT_EQ(rotary::grid_positions(1, 1, 2, 2, rotary::GridOptions{kMax - 1, 1e300, 1}),
            (std::vector<std::int64_t>{kMax - 1, kMax - 1, kMax - 1, kMax}));  // (2 axes: no t coordinate)
  // a video grid whose last frame sits at 2^63 - 1024 (the largest double below 2^63): the next text
  // position is 2^63 - 1023; 1022 text tokens reach INT64_MAX, one more overflows
  rotary::MropePositionBuilder near_max;
  near_max.add_grid(2, 1, 1, 9223372036854774784.0);
  EXPECT_EQ(near_max.next_position(), kMax - 1022);
  expect_error([&] { rotary::MropePositionBuilder(near_max).add_text(1023); }, {"overflow int64"});
  near_max.add_text(1022);
  EXPECT_EQ(near_max.next_position(), kMax);
  expect_error([&] { near_max.add_grid(1, 1, 1); },
               {"largest position (9223372036854775807) leaves no next"});
  std::vector<std::int64_t> seven(7, 0);
  expect_error([&] { AxisPositions(seven, 3); }, {"7 values, not a multiple of streams (3)"});
  expect_error([&] { AxisPositions(seven.data(), 9, 1); }, {"position streams (9)"});

  const rotary::RotarySpec spec(64, Pairing::half_split, 1e4);
  expect_error(
      [&] {
        MultiAxisRope<float>(spec, rotary::mrope_axis_map(48, {8, 8, 8}), 100);
      },
      {"axis map has 24 pairs but rotary_dim/2 is 32"});
  const MultiAxisRope<float> mrope(spec, rotary::mrope_axis_map(64, {8, 12, 12}), 100);
  const std::int64_t tokens = 4;
  RowMatrix<float> x = RowMatrix<float>::Random(tokens * 2, 64);
  std::vector<std::int64_t> ok(3 * tokens, 5);
  expect_error([&] { rotary::apply(mrope, x, AxisPositions(ok.data(), 2, tokens), 2); },
               {"positions have 2 streams but the axis map has 3"});
  expect_error([&] { rotary::apply(mrope, x, AxisPositions(ok.data(), 3, tokens - 1), 2); },
               {"positions have 3 tokens per stream for 4 tokens"});
  std::vector<std::int64_t> far = ok;
  far[2 * tokens + 1] = 100;  // w of token 1
  expect_error([&] { rotary::apply(mrope, x, AxisPositions(far, 3), 2); },
               {"positions[stream 2][token 1]", "position (100) is outside the cache [0, 100)"});
  std::vector<std::int64_t> negative = ok;
  negative[tokens + 3] = -1;
  expect_error([&] { rotary::apply(mrope, x, AxisPositions(negative, 3), 2); },
               {"positions[stream 1][token 3] (-1) must be >= 0"});
  const MultiAxisRope<float> otf(spec, rotary::mrope_axis_map(64, {8, 12, 12}), rotary::OnTheFly{});
  expect_error([&] { rotary::apply(otf, x, AxisPositions(negative, 3), 2); }, {"(-1) must be >= 0"});
  expect_error([&] { rotary::apply(mrope, x, AxisPositions(ok, 3), 3); },
               {"x has 8 rows, not a multiple of heads (3)"});
  RowMatrix<float> wrong = RowMatrix<float>::Random(tokens * 2, 60);
  expect_error([&] { rotary::apply(mrope, wrong, AxisPositions(ok, 3), 2); },
               {"x has 60 columns; head_dim is 64"});
  // partial overlap of input and output
  std::vector<float> buf(static_cast<std::size_t>(tokens * 2 * 64 + 64), 0.5f);
  const Eigen::Map<const RowMatrix<float>> in(buf.data(), tokens * 2, 64);
  Eigen::Map<RowMatrix<float>> out(buf.data() + 64, tokens * 2, 64);
  expect_error([&] { rotary::apply(mrope, in, out, AxisPositions(ok, 3), 2); }, {"partially overlap"});
  // q and k sharing rows
  Eigen::Map<RowMatrix<float>> k_alias(x.data() + 64, tokens, 64);
  expect_error([&] { rotary::apply_qk(mrope, x, k_alias, AxisPositions(ok, 3), 2, 1); },
               {"q and k views overlap"});
  // null positions
  expect_error(
      [&] {
        rotary::apply(mrope, x, AxisPositions(static_cast<const std::int64_t*>(nullptr), 3, tokens), 2);
      },
      {"positions stream 0 is null"});
  // an unused stream is not validated
  std::vector<std::uint8_t> two(32, 0);
  two[5] = 1;
  const MultiAxisRope<float> sparse(spec, AxisMap(two, 3), 100);
  std::vector<std::int64_t> junk = ok;
  junk[2 * tokens] = -7;
  EXPECT_NO_THROW(rotary::apply(sparse, x, AxisPositions(junk, 3), 2));
}

// Position streams and a TableMultiAxisRope's cos/sin table are read block by block while the output is
// written: an output sharing memory with one is refused, naming it, and nothing is written. Such calls
// ran before, reading overwritten positions (out-of-bounds table rows, or silently wrong rotations).
TEST(MultiAxisErrors, OutputApartFromPositionStreamsAndTable) {
  using rotary_test::expect_error;
  using rotary_test::same_bits;
  const std::int64_t D = 8;
  const std::int64_t T = 96;
  const rotary::RotarySpec spec(D);
  const AxisMap map = rotary::mrope_axis_map(D, {2, 1, 1});
  const MultiAxisRope<float> table(spec, map, 256);
  const MultiAxisRope<float> otf(spec, map, rotary::OnTheFly{});
  const rotary::StridedLayout l{T, 1, D, D};
  std::vector<float> buf(static_cast<std::size_t>(T * D));
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = 0.25f + 0.01f * static_cast<float>(i % 13);
  float* x = buf.data();
  Eigen::Map<RowMatrix<float>> xm(x, T, D);
  // valid positions (else the positions check would refuse first) stored at element `at` of x
  const auto put64 = [x](std::int64_t at, const std::vector<std::int64_t>& v) {
    std::memcpy(x + at, v.data(), v.size() * sizeof(std::int64_t));
    // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
    return reinterpret_cast<const std::int64_t*>(x + at);
  };
  std::vector<std::int64_t> planar(static_cast<std::size_t>(3 * T));
  for (std::size_t i = 0; i < planar.size(); ++i) planar[i] = static_cast<std::int64_t>(i) % T;

  // planar [3 x T] int64 in x's first rows: stream 0 is hit first
  const std::int64_t* inside = put64(0, planar);
  std::vector<float> before = buf;
  for (const MultiAxisRope<float>* r : {&table, &otf}) {
    expect_error([&] { rotary::apply(*r, xm, AxisPositions(inside, 3, T), 1); },
                 {"output of x and positions stream 0 share memory"});
    expect_error([&] { rotary::apply_strided(*r, x, l, AxisPositions(inside, 3, T)); },
                 {"output of x and positions stream 0 share memory"});
  }
  EXPECT_TRUE(same_bits(buf, before));

  // separate streams, only the third inside x: the message names it
  const std::vector<std::int64_t> s0(planar.begin(), planar.begin() + T);
  const std::vector<std::int64_t> s1(planar.begin() + T, planar.begin() + 2 * T);
  const std::int64_t* s2 = put64(60 * D, std::vector<std::int64_t>(planar.begin() + 2 * T, planar.end()));
  before = buf;
  expect_error([&] { rotary::apply(table, xm, AxisPositions::of_streams({s0.data(), s1.data(), s2}, T), 1); },
               {"output of x and positions stream 2 share memory"});
  EXPECT_TRUE(same_bits(buf, before));

  // token-major int32 inside x
  std::vector<std::int32_t> major(static_cast<std::size_t>(3 * T));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t a = 0; a < 3; ++a) major[static_cast<std::size_t>(t * 3 + a)] = static_cast<std::int32_t>(t);
  std::memcpy(x + 10 * D, major.data(), major.size() * sizeof(std::int32_t));
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* major_inside = reinterpret_cast<const std::int32_t*>(x + 10 * D);
  before = buf;
  expect_error([&] { rotary::apply(otf, xm, AxisPositions::token_major(major_inside, 3, T), 1); },
               {"output of x and positions stream 0 share memory"});
  EXPECT_TRUE(same_bits(buf, before));

  // fused: a stream inside k's rows (q apart)
  RowMatrix<float> q = RowMatrix<float>::Constant(T, D, 0.5f);
  expect_error([&] { rotary::apply_qk(table, q, xm, AxisPositions::of_streams({s0.data(), s2, s1.data()}, T), 1, 1); },
               {"output of k and positions stream 1 share memory"});
  EXPECT_TRUE(same_bits(buf, before));

  // out of place: positions inside the input only are just read (accepted, the same bits as a copy);
  // inside the output they are refused
  std::vector<float> src(buf.size(), 0.5f);
  std::memcpy(src.data(), planar.data(), planar.size() * sizeof(std::int64_t));
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  const auto* src_pos = reinterpret_cast<const std::int64_t*>(src.data());
  std::vector<float> out(buf.size(), 0.0f);
  std::vector<float> expect(buf.size(), 0.0f);
  rotary::apply_strided(table, src.data(), l, out.data(), l, AxisPositions(src_pos, 3, T));
  rotary::apply_strided(table, src.data(), l, expect.data(), l, AxisPositions(planar, 3));
  EXPECT_TRUE(same_bits(out, expect));
  const std::vector<float> src_before = src;
  expect_error([&] { rotary::apply_strided(table, out.data(), l, src.data(), l, AxisPositions(src_pos, 3, T)); },
               {"output of x and positions stream 0 share memory"});
  EXPECT_TRUE(same_bits(src, src_before));

  // a stream the map does not use is never read: it may lie in the output
  std::vector<std::uint8_t> two(static_cast<std::size_t>(D / 2), 0);
  two[1] = 1;
  const MultiAxisRope<float> sparse(spec, AxisMap(two, 3), 256);
  RowMatrix<float> y = xm;
  rotary::apply(sparse, xm, AxisPositions::of_streams({s0.data(), s1.data(), s2}, T), 1);
  rotary::apply(sparse, y, AxisPositions::of_streams({s0.data(), s1.data(), s0.data()}, T), 1);
  EXPECT_EQ(xm, y);

  // separate streams around x in one buffer: only the streams' own bytes count, not what lies between
  std::vector<std::int64_t> around(static_cast<std::size_t>(T + T * D / 2 + 2 * T));
  std::copy(s0.begin(), s0.end(), around.begin());
  std::copy(planar.begin() + T, planar.end(), around.begin() + T + T * D / 2);
  // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
  float* mid = reinterpret_cast<float*>(around.data() + T);
  std::fill(mid, mid + T * D, 0.5f);
  const std::int64_t* p1 = around.data() + T + T * D / 2;
  rotary::apply_strided(table, mid, l, AxisPositions::of_streams({around.data(), p1, p1 + T}, T));
  RowMatrix<float> z = RowMatrix<float>::Constant(T, D, 0.5f);
  rotary::apply(table, z, AxisPositions(planar, 3), 1);
  EXPECT_EQ(Eigen::Map<RowMatrix<float>>(mid, T, D), z);

  // a caller's table: its cos or sin rows, or the positions, in the output
  const std::int64_t rows = 16;
  std::vector<float> cs(static_cast<std::size_t>(rows * D), 0.5f);
  const std::vector<std::int64_t> zeros(static_cast<std::size_t>(3 * T), 0);
  const auto concat = [](const float* p) { return rotary::CosSinTableView<float>::concatenated(p, rows, D); };
  const auto separate = [](const float* c, const float* s) {
    return rotary::CosSinTableView<float>::separate(c, s, rows, D / 2);
  };
  using TableMultiAxis = rotary::TableMultiAxisRope<float>;
  before = buf;
  expect_error([&] { rotary::apply_strided(TableMultiAxis(D, Pairing::half_split, map, concat(x)), x, l,
                                           AxisPositions(zeros, 3)); },
               {"output of x and the cos table share memory"});
  expect_error([&] { rotary::apply_strided(TableMultiAxis(D, Pairing::half_split, map, separate(cs.data(), x + 8 * D)),
                                           x, l, AxisPositions(zeros, 3)); },
               {"output of x and the sin table share memory"});
  const std::int64_t* zeros_inside = put64(0, zeros);
  before = buf;
  expect_error([&] { rotary::apply(TableMultiAxis(D, Pairing::half_split, map, concat(cs.data())), xm,
                                   AxisPositions(zeros_inside, 3, T), 1); },
               {"output of x and positions stream 0 share memory"});
  EXPECT_TRUE(same_bits(buf, before));
}

// AxisPositions' strides must keep every position within one array (PTRDIFF_MAX bytes): p(a, t)'s
// offsets, and the extents the calls check against the output, would overflow.
TEST(MultiAxisErrors, PositionSpanFitsOneArray) {
  using rotary_test::expect_error;
  const std::vector<std::int64_t> p(9, 0);
  constexpr std::ptrdiff_t kHuge = std::numeric_limits<std::ptrdiff_t>::max() / 2;
  expect_error([&] { AxisPositions::strided(p.data(), 3, 3, 1, kHuge); },
               {"positions span more than PTRDIFF_MAX bytes", "3 tokens x token stride 4611686018427387903"});
  expect_error([&] { AxisPositions::strided(p.data(), 3, 3, kHuge, 1); },
               {"positions span more than PTRDIFF_MAX bytes", "3 streams x stream stride 4611686018427387903"});
  expect_error([&] { AxisPositions::of_streams<std::int64_t>({p.data()}, kHuge); },
               {"positions span more than PTRDIFF_MAX bytes"});
  EXPECT_NO_THROW(AxisPositions::strided(p.data(), 3, 3, 1, 3));
  EXPECT_NO_THROW(AxisPositions::strided(p.data(), 3, 0, kHuge, kHuge));  // no tokens: nothing is read
}

#if !defined(NDEBUG) && GTEST_HAS_DEATH_TEST
TEST(MultiAxisErrors, UncheckedAssertsInDebug) {
  ::testing::FLAGS_gtest_death_test_style = rotary_test::death_test_style();
  const rotary::RotarySpec spec(64, Pairing::half_split, 1e4);
  const MultiAxisRope<float> mrope(spec, rotary::mrope_axis_map(64, {8, 12, 12}), 100);
  RowMatrix<float> x = RowMatrix<float>::Random(8, 64);
  std::vector<std::int64_t> far(12, 500);
  EXPECT_DEATH(rotary::unchecked::apply(mrope, x, AxisPositions(far, 3), 2), "");
}
#endif

}  // namespace
