// Numerical edge cases at the integer limits, as rotary documents them (README "Numerical edge
// cases"): negative positions refused, INT32_MAX, 2^53+1 and INT64_MAX positions exact (against a
// Payne-Hanek reduction written here), extreme deltas and sequence starts, and zero-sized calls
// that touch no memory and throw nothing (heads == 0 an error).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <rotary/rotary.hpp>

#include "edge_cases.hpp"
#include "support.hpp"

namespace {

using rotary::Direction;
using rotary::Isa;
using rotary::Pairing;
using rotary::Positions;
using rotary::RotarySpec;
using rotary::StridedLayout;
using rotary_test::IsaScope;
using rotary_test::narrow;
using rotary_test::same_bits;
using rotary_test::supported_isas;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kInt32Min = std::numeric_limits<std::int32_t>::min();

using edge_cases::Block;
using edge_cases::formula;
using edge_cases::all_match;

// As documented:
//   * Positions: negative ones are rejected by every checked entry point (rotary::error naming the
//     value); INT32_MAX, 2^53+1, INT64_MAX - 1 and INT64_MAX are exact (checked against an
//     independent Payne-Hanek reduction written here), in tables and cache-free alike.
//   * Zero-sized calls (0 tokens, 0 batch or sequences, empty position and cu_seqlens arrays) touch
//     no memory and throw nothing; heads == 0 is an error where the head count is an argument.
// Every case runs on every ISA this machine has (set_max_isa) and must equal the scalar kernel bit
// for bit (NaN: only NaN-ness, payloads are not part of the contract).

// ---- 4. positions at the integer limits ---------------------------------------------------------

// cos/sin(m theta) for any int64 m, independent of rotary's double-double reduction (Payne-Hanek):
// theta = M 2^E exactly (M an integer < 2^53), so m theta / (2 pi) = |m| M (2/pi) 2^(E-2) with 2/pi
// as its first 256 bits (0.a2f9836e...; error < 2^-256): an exact integer product of < 2^372, whose
// 64 bits below the binary point are the angle in turns (error < 2^-63 turns); sinl/cosl in long
// double on an angle reduced to [-pi, pi] finish it (about 1e-18 absolute).
__extension__ typedef unsigned __int128 U128;
constexpr std::uint64_t kTwoOverPi[4] = {0xa2f9836e4e441529ull, 0xfc2757d1f534ddc0ull, 0xdb6295993c439041ull,
                                         0xfe5163abdebbc561ull};  // most significant first

void reference_sincos(std::int64_t m, double theta, long double& s, long double& c) {
  if (m == 0 || theta == 0.0) {
    s = 0.0L;
    c = 1.0L;
    return;
  }
  int e = 0;
  const double f = std::frexp(theta, &e);  // theta = f 2^e, f in [0.5, 1)
  const auto mant = static_cast<std::uint64_t>(std::ldexp(f, 53));
  const int exp2 = e - 53;  // theta = mant 2^exp2
  const U128 am = m < 0 ? static_cast<U128>(-(m + 1)) + 1 : static_cast<U128>(m);
  const U128 n = am * mant;
  const std::uint64_t nl[2] = {static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(n >> 64)};
  std::uint64_t p[6] = {0, 0, 0, 0, 0, 0};  // n * K, little-endian limbs; K = 2/pi * 2^256
  for (int i = 0; i < 2; ++i) {
    U128 carry = 0;
    for (int j = 0; j < 4; ++j) {
      const U128 t = static_cast<U128>(nl[i]) * kTwoOverPi[3 - j] + p[i + j] + carry;
      p[i + j] = static_cast<std::uint64_t>(t);
      carry = t >> 64;
    }
    p[i + 4] = static_cast<std::uint64_t>(carry);
  }
  // turns = P 2^(exp2 - 2 - 256): the fraction is bits [point - 64, point) of P, point = 258 - exp2.
  const int lowest = 258 - exp2 - 64;
  std::uint64_t frac = 0;
  for (int k = 0; k < 64; ++k) {
    const int bit = lowest + k;
    if (bit >= 0 && bit < 384 && ((p[bit / 64] >> (bit % 64)) & 1u)) frac |= std::uint64_t{1} << k;
  }
  long double turns = static_cast<long double>(frac) * 0x1p-64L;  // exact
  if (turns > 0.5L) turns -= 1.0L;
  if (m < 0) turns = -turns;
  const long double angle = turns * 6.283185307179586476925286766559005768L;
  s = std::sin(angle);
  c = std::cos(angle);
}

// The reference itself, where long double is exact: theta = 1 makes the angle m itself, and glibc's
// sinl/cosl reduce any long double argument exactly.
TEST(EdgePositions, ReferenceReductionSelfCheck) {
  long double worst = 0.0L;
  for (const std::int64_t m :
       {std::int64_t{1}, std::int64_t{12345}, kInt32Max, (std::int64_t{1} << 53) + 1,
        (std::int64_t{1} << 62) + 7, kInt64Max - 1, kInt64Max, kInt64Min + 1, std::int64_t{-99}}) {
    for (const double theta : {1.0, 0.5, 0x1p-20}) {  // dyadic: m * theta exact in long double below 2^64
      long double s = 0.0L;
      long double c = 0.0L;
      reference_sincos(m, theta, s, c);
      const long double angle = static_cast<long double>(m) * theta;
      worst = std::max({worst, std::fabs(s - std::sin(angle)), std::fabs(c - std::cos(angle))});
    }
  }
  std::printf("[          ] Payne-Hanek reference vs sinl/cosl at dyadic frequencies: max difference %.3Lg\n",
              worst);
  EXPECT_LE(worst, 1e-17L);
}

// Tables at positions up to INT64_MAX - 1 (INT64_MAX itself: end positions are exclusive) against
// the reference: f32 entries correctly rounded (half an ulp, plus a little for near-ties), f64
// entries within 2 ulp of 1.0 plus the documented m * 2^-100 rad of the double-double theta/(2 pi).
TEST(EdgePositions, TablesExactAtInt64Positions) {
  const std::vector<std::int64_t> positions = {kInt32Max, (std::int64_t{1} << 53) + 1, std::int64_t{1} << 62,
                                               kInt64Max - 1};
  double worst_f32_ulps = 0.0;
  double worst_f64 = 0.0;
  for (const double base : {1e4, 5e5}) {
    const rotary::Frequencies f = rotary::default_frequencies(128, base);
    const auto t32 = rotary::CosSinCache<float>::for_positions(f, positions);
    const auto t64 = rotary::CosSinCache<double>::for_positions(f, positions);
    for (const std::int64_t m : positions)
      for (std::int64_t j = 0; j < 64; ++j) {
        long double s = 0.0L;
        long double c = 0.0L;
        reference_sincos(m, f.theta[static_cast<std::size_t>(j)], s, c);
        for (int k = 0; k < 2; ++k) {
          const long double want = k == 0 ? c : s;
          const float got32 = t32.row(m)[j + 64 * k];
          const double err32 = static_cast<double>(std::fabs(static_cast<long double>(got32) - want));
          const double u = rotary_test::ulp<float>(static_cast<double>(want));
          worst_f32_ulps = std::max(worst_f32_ulps, err32 / u);
          EXPECT_LE(err32, 0.5 * u + 0x1p-50) << "f32 table, position " << m << " pair " << j;
          const double err64 =
              static_cast<double>(std::fabs(static_cast<long double>(t64.row(m)[j + 64 * k]) - want));
          worst_f64 = std::max(worst_f64, err64);
          EXPECT_LE(err64, 2.5e-16 + static_cast<double>(m) * 0x1p-100)
              << "f64 table, position " << m << " pair " << j;
        }
      }
  }
  std::printf("[          ] tables up to INT64_MAX-1: f32 max error %.3f ulp, f64 max error %.3g\n",
              worst_f32_ulps, worst_f64);
}

// INT32_MAX through an int32 array, a table and the cache-free path: identical bits (every row an
// exact anchor); INT32_MIN and any negative position: rotary::error naming it.
TEST(EdgePositions, Int32Limits) {
  const RotarySpec spec(64, Pairing::interleaved, 10000.0, 48);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const rotary::Rope<float> table(
      spec, rotary::CosSinCache<float>::for_positions(f, {kInt32Max, kInt32Max - 1, 0}));
  const rotary::Rope<float> fly(spec, rotary::OnTheFly{});
  const std::vector<std::int32_t> pos = {static_cast<std::int32_t>(kInt32Max), 0,
                                         static_cast<std::int32_t>(kInt32Max - 1)};
  std::mt19937_64 rng(rotary_test::seed() + 6);
  const std::vector<float> x = rotary_test::random_vector<float>(3 * 2 * 64, rng);
  const StridedLayout l{3, 2, 128, 64};
  const Block b{2, 64, {kInt32Max, 0, kInt32Max - 1}};
  const std::vector<float> want = formula(table, b, x, Direction::forward);
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    std::vector<float> a(x.size());
    std::vector<float> c(x.size());
    rotary::apply_strided(table, x.data(), l, a.data(), l, Positions(pos));
    rotary::apply_strided(fly, x.data(), l, c.data(), l, Positions(pos));
    EXPECT_TRUE(all_match(a, want)) << rotary::to_string(isa);
    EXPECT_TRUE(all_match(c, want)) << rotary::to_string(isa) << " cache-free";
  }
  // The table rows at INT32_MAX against the reference.
  for (std::int64_t j = 0; j < 24; ++j) {
    long double s = 0.0L;
    long double cc = 0.0L;
    reference_sincos(kInt32Max, f.theta[static_cast<std::size_t>(j)], s, cc);
    EXPECT_LE(std::fabs(table.cache().row(kInt32Max)[j] - cc),
              0.5 * rotary_test::ulp<float>(static_cast<double>(cc)) + 0x1p-50);
    EXPECT_LE(std::fabs(table.cache().row(kInt32Max)[24 + j] - s),
              0.5 * rotary_test::ulp<float>(static_cast<double>(s)) + 0x1p-50);
  }
  std::vector<float> y = x;
  const std::vector<std::int32_t> negative = {0, static_cast<std::int32_t>(kInt32Min), 0};
  rotary_test::expect_error([&] { rotary::apply_strided(table, y.data(), l, Positions(negative)); },
                            {"positions[1] (-2147483648) must be >= 0"});
  rotary_test::expect_error([&] { rotary::apply_strided(fly, y.data(), l, Positions(negative)); },
                            {"positions[1] (-2147483648) must be >= 0"});
  rotary_test::expect_error([&] { rotary::apply_strided(fly, y.data(), l, Positions::contiguous(-1)); },
                            {"positions start (-1) must be >= 0"});
  rotary_test::expect_error(
      [&] {
        rotary::CosSinCache<float>::for_positions(f, {3, kInt32Min});
      },
      {"cache position (-2147483648) must be >= 0"});
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, kInt32Min, 0); },
                            {"cache begin position (-2147483648) must be >= 0"});
  EXPECT_TRUE(y == x) << "a rejected call wrote its output";
}

// INT64_MAX: cache-free calls accept it (contiguous start with one token, or in arrays, also right
// after another large position: the block recurrence must not step from INT64_MAX); a table cannot
// list it (its end position would overflow) and says so; a contiguous run past it is an error.
TEST(EdgePositions, Int64Limits) {
  const RotarySpec spec(40, Pairing::half_split, 10000.0, 32);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const rotary::Rope<float> fly(spec, rotary::OnTheFly{});
  const rotary::Rope<float> table(spec, rotary::CosSinCache<float>::for_positions(f, {kInt64Max - 1, 0, 1}));
  std::mt19937_64 rng(rotary_test::seed() + 7);
  const std::vector<std::int64_t> pos = {kInt64Max, 0, kInt64Max - 1, kInt64Max, 1, kInt64Max};
  const std::int64_t tokens = static_cast<std::int64_t>(pos.size());
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(tokens * 40), rng);
  const StridedLayout l{tokens, 1, 40, 40};
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    std::vector<float> y(x.size());
    rotary::apply_strided(fly, x.data(), l, y.data(), l, Positions(pos));
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t m = pos[static_cast<std::size_t>(t)];
      for (std::int64_t j = 0; j < 16; ++j) {
        long double s = 0.0L;
        long double c = 0.0L;
        reference_sincos(m, f.theta[static_cast<std::size_t>(j)], s, c);
        const std::size_t i0 = static_cast<std::size_t>(t * 40 + j);
        const std::size_t i1 = i0 + 16;
        const long double w0 = x[i0] * c - x[i1] * s;
        const long double w1 = x[i1] * c + x[i0] * s;
        // cos/sin correctly rounded (half an ulp, < 2^-25 each) plus the kernel's two roundings
        // (half an ulp of x1 s and of y, each < 2^-24 (|x0| + |x1|)): < 2^-22 (|x0| + |x1|).
        const double tol = 0x1p-22 * (std::fabs(x[i0]) + std::fabs(x[i1]));
        EXPECT_LE(std::fabs(y[i0] - w0), tol) << rotary::to_string(isa) << " position " << m << " pair " << j;
        EXPECT_LE(std::fabs(y[i1] - w1), tol) << rotary::to_string(isa) << " position " << m << " pair " << j;
      }
      for (std::size_t i = 32; i < 40; ++i)
        EXPECT_TRUE(
            same_bits(y[static_cast<std::size_t>(t * 40) + i], x[static_cast<std::size_t>(t * 40) + i]));
    }
    // Tokens whose positions a table holds: the table's bits (no position follows its predecessor
    // + 1, so every cache-free row is an exact anchor, not a recurrence step).
    std::vector<float> z(x.size());
    const std::vector<std::int64_t> held = {kInt64Max - 1, 1, 0, kInt64Max - 1, 1, 0};
    rotary::apply_strided(table, x.data(), l, z.data(), l, Positions(held));
    std::vector<float> w(x.size());
    rotary::apply_strided(fly, x.data(), l, w.data(), l, Positions(held));
    EXPECT_TRUE(all_match(w, z)) << rotary::to_string(isa)
                                 << ": cache-free equals the table at INT64_MAX - 1";
    // One token at INT64_MAX as a contiguous start.
    std::vector<float> one(x.begin(), x.begin() + 40);
    std::vector<float> from_array(40);
    rotary::apply_strided(fly, one.data(), StridedLayout{1, 1, 40, 40}, Positions::contiguous(kInt64Max));
    rotary::apply_strided(fly, x.data(), StridedLayout{1, 1, 40, 40}, from_array.data(),
                          StridedLayout{1, 1, 40, 40}, Positions(std::vector<std::int64_t>{kInt64Max}));
    EXPECT_TRUE(all_match(one, from_array));
  }
  std::vector<float> y = x;
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(fly, y.data(), StridedLayout{2, 1, 40, 40}, Positions::contiguous(kInt64Max));
      },
      {"positions start (9223372036854775807) + 2 tokens overflows int64"});
  rotary_test::expect_error(
      [&] {
        rotary::CosSinCache<float>::for_positions(f, {5, kInt64Max});
      },
      {"cache position (9223372036854775807)"});
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, 0, kInt64Max); }, {"does not fit in memory"});
  // A size that fits int64 but no address space is refused before allocating (std::bad_alloc before).
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, 0, kInt64Max / 64); },
                            {"does not fit in memory: it needs more than 2^47 bytes"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(fly, y.data(), StridedLayout{1, 1, 40, 40},
                              Positions(std::vector<std::int64_t>{kInt64Min}));
      },
      {"positions[0] (-9223372036854775808) must be >= 0"});
}

// A table under the 2^47-byte limit that no address space can hold (2^47 - 2^40 bytes: a 47-bit user
// address space already holds this program) fails its allocation: rotary::error naming the bytes, not
// std::bad_alloc. Nothing is touched before the allocation fails, so no page is committed. Not
// under ASan or TSan, whose allocators report a request this size as an error and abort.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ROTARY_TEST_ALLOCATOR_ABORTS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define ROTARY_TEST_ALLOCATOR_ABORTS 1
#endif
#endif
TEST(EdgePositions, CacheTheAllocatorCannotProvideIsRotaryError) {
#if defined(ROTARY_TEST_ALLOCATOR_ABORTS)
  GTEST_SKIP() << "a sanitizer's allocator aborts on this request instead of failing it";
#else
  const RotarySpec spec(16, Pairing::interleaved);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const std::int64_t bytes = (std::int64_t{1} << 47) - (std::int64_t{1} << 40);
  const std::int64_t rows = bytes / (16 * static_cast<std::int64_t>(sizeof(float)));
  rotary_test::expect_error([&] { rotary::CosSinCache<float>(f, 0, rows); },
                            {"cache of 2181843386368 positions x rotary_dim 16 (139637976727552 bytes) could not be "
                             "allocated"});
#endif
}

// Context shifts accept any int64 delta, INT64_MIN and INT64_MAX included: exact against the
// reference (the rotation by delta theta_j).
TEST(EdgePositions, ShiftByExtremeDeltas) {
  const RotarySpec spec(16, Pairing::interleaved);
  const rotary::Frequencies f = rotary::compute_frequencies(spec);
  const rotary::Rope<float> rope(spec, rotary::OnTheFly{});
  std::mt19937_64 rng(rotary_test::seed() + 8);
  const std::vector<std::int64_t> deltas = {kInt64Min, kInt64Max, -1, kInt32Min, kInt64Min + 1};
  const std::int64_t tokens = static_cast<std::int64_t>(deltas.size());
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(tokens * 16), rng);
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    std::vector<float> per_token = x;
    rotary::shift_keys_strided(rope, per_token.data(), StridedLayout{tokens, 1, 16, 16}, Positions(deltas));
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::vector<float> single(x.begin() + t * 16, x.begin() + (t + 1) * 16);
      rotary::shift_keys_strided(rope, single.data(), StridedLayout{1, 1, 16, 16},
                                 deltas[static_cast<std::size_t>(t)]);
      for (std::int64_t j = 0; j < 8; ++j) {
        long double s = 0.0L;
        long double c = 0.0L;
        reference_sincos(deltas[static_cast<std::size_t>(t)], f.theta[static_cast<std::size_t>(j)], s, c);
        const std::size_t i0 = static_cast<std::size_t>(t * 16 + 2 * j);
        const long double w0 = x[i0] * c - x[i0 + 1] * s;
        const long double w1 = x[i0 + 1] * c + x[i0] * s;
        const double tol = 0x1p-22 * (std::fabs(x[i0]) + std::fabs(x[i0 + 1]));  // as in Int64Limits
        EXPECT_LE(std::fabs(per_token[i0] - w0), tol)
            << rotary::to_string(isa) << " delta " << deltas[static_cast<std::size_t>(t)];
        EXPECT_LE(std::fabs(per_token[i0 + 1] - w1), tol)
            << rotary::to_string(isa) << " delta " << deltas[static_cast<std::size_t>(t)];
        EXPECT_TRUE(same_bits(single[static_cast<std::size_t>(2 * j)], per_token[i0]));
        EXPECT_TRUE(same_bits(single[static_cast<std::size_t>(2 * j + 1)], per_token[i0 + 1]));
      }
    }
  }
}

// Sequence start offsets near INT64_MAX: a sequence that would run past it is an error naming the
// start, never a silent signed overflow.
TEST(EdgePositions, SequenceStartsNearInt64Max) {
  const rotary::Rope<float> fly(RotarySpec(8), rotary::OnTheFly{});
  std::vector<float> x(4 * 2 * 8, 0.5f);
  const StridedLayout l{4, 2, 16, 8};
  const std::vector<std::int64_t> cu = {0, 2, 4};
  rotary_test::expect_error(
      [&] { rotary::apply_varlen(fly, x.data(), l, cu, rotary::SequencePositions::start(kInt64Max)); },
      {"9223372036854775807", "overflows int64"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_varlen(fly, x.data(), l, cu, rotary::SequencePositions::starts({0, kInt64Max}));
      },
      {"sequence 1", "9223372036854775807", "overflows int64"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_batch(fly, rotary::Layout::bshd, x.data(), rotary::BatchShape{2, 2, 2, 8},
                            rotary::SequencePositions::context_parallel(rotary::ContextSplit::contiguous, 1,
                                                                        2, {kInt64Max - 2}));
      },
      {"overflows int64"});
  // The largest start that fits: the last token at INT64_MAX.
  EXPECT_NO_THROW(
      rotary::apply_varlen(fly, x.data(), l, cu, rotary::SequencePositions::start(kInt64Max - 1)));
}

// ---- 5. zero-sized calls ------------------------------------------------------------------------

#if ROTARY_TEST_HAVE_MMAN
TEST(EdgeZeroSize, NoAccessNoThrow) {
  using rotary_test::GuardedBuffer;
  const rotary::Rope<float> rope(RotarySpec(8, Pairing::interleaved), 16);
  const rotary::Rope<float> fly(RotarySpec(8, Pairing::interleaved), rotary::OnTheFly{});
  GuardedBuffer<float> none(0);  // a pointer into a PROT_NONE page: any access faults
  GuardedBuffer<std::int32_t> no32(0);
  GuardedBuffer<std::int64_t> no64(0);
  float* p = none.data();
  using Map = Eigen::Map<rotary::RowMatrix<float>>;
  Map empty(p, 0, 8);
  const StridedLayout zero{0, 3, 24, 8};
  const StridedLayout no_key{0, 0, 0, 0};
  const std::vector<std::int64_t> no_values;
  for (const Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    for (const rotary::Rope<float>* r : {&rope, &fly}) {
      for (const Positions& pos :
           {Positions::contiguous(0), Positions::contiguous(kInt64Max), Positions(no32.data(), 0),
            Positions(no64.data(), 0), Positions(no_values)}) {
        EXPECT_NO_THROW(rotary::apply(*r, empty, pos, 2));
        EXPECT_NO_THROW(rotary::apply(*r, empty, empty, pos, 2, Direction::inverse));
        EXPECT_NO_THROW(rotary::unchecked::apply(*r, empty, pos, 2));
        EXPECT_NO_THROW(rotary::apply_strided(*r, p, zero, pos));
        // Strides derived from the empty shape (head-major: head stride = tokens * head_dim = 0).
        EXPECT_NO_THROW(rotary::apply_strided(*r, p, StridedLayout{0, 3, 8, 0}, pos));
        EXPECT_NO_THROW(rotary::apply_strided(*r, static_cast<float*>(nullptr), zero, pos));
        EXPECT_NO_THROW(rotary::unchecked::apply_strided(*r, p, zero, p, zero, pos));
        EXPECT_NO_THROW(rotary::apply_qk(*r, empty, empty, pos, 3, 1));
        EXPECT_NO_THROW(rotary::apply_qk(*r, empty, empty, pos, 3, 0));
        EXPECT_NO_THROW(rotary::apply_qk_strided(*r, p, zero, p, zero, p, zero, p, zero, pos));
        EXPECT_NO_THROW(rotary::unchecked::apply_qk_strided(*r, p, zero, p, zero, p, no_key, p, no_key, pos));
        EXPECT_NO_THROW(rotary::shift_keys(*r, empty, std::int64_t{5}, 2));
        EXPECT_NO_THROW(rotary::shift_keys_strided(*r, p, zero, Positions(no64.data(), 0)));
        EXPECT_NO_THROW(rotary::rerotate_keys(*r, fly, empty, pos, 2));
      }
      // Batches with no sequences or empty sequences.
      for (const rotary::BatchShape& s : {rotary::BatchShape{0, 4, 2, 8}, rotary::BatchShape{3, 0, 2, 8}}) {
        for (const rotary::Layout layout :
             {rotary::Layout::bshd, rotary::Layout::bhsd, rotary::Layout::sbhd}) {
          EXPECT_NO_THROW(rotary::apply_batch(*r, layout, p, s, rotary::SequencePositions::restart()));
          EXPECT_NO_THROW(rotary::apply_batch(
              *r, layout, p, s, rotary::SequencePositions::per_token(Positions(no32.data(), 0))));
          EXPECT_NO_THROW(
              rotary::apply_qk_batch(*r, layout, p, s, p, 1, rotary::SequencePositions::start(3)));
        }
      }
      for (const std::vector<std::int64_t>& cu :
           {std::vector<std::int64_t>{0}, std::vector<std::int64_t>{0, 0, 0}}) {
        GuardedBuffer<std::int64_t> cu_buf(cu.size());
        std::copy(cu.begin(), cu.end(), cu_buf.data());
        const rotary::CuSeqlens c(cu_buf.data(), static_cast<std::int64_t>(cu.size()));
        EXPECT_NO_THROW(rotary::apply_varlen(*r, p, zero, c, rotary::SequencePositions::restart()));
        EXPECT_NO_THROW(rotary::apply_varlen(
            *r, p, zero, p, zero, c, rotary::SequencePositions::per_token(Positions(no64.data(), 0))));
        EXPECT_NO_THROW(rotary::apply_qk_varlen(*r, p, zero, p, StridedLayout{0, 1, 8, 8}, c,
                                                rotary::SequencePositions::start(7)));
      }
    }
  }
  // Weights with no columns, and position lists with no positions.
  const Eigen::Map<const Eigen::MatrixXf> w(p, 16, 0);
  EXPECT_EQ(rotary::permute_rows_half_split_to_interleaved(w, 2, 8, 8).cols(), 0);
  const auto listed = rotary::CosSinCache<float>::for_positions(rotary::default_frequencies(8, 1e4), {});
  EXPECT_TRUE(listed.empty());
  const rotary::Rope<float> nothing(RotarySpec(8, Pairing::interleaved), listed);
  EXPECT_NO_THROW(rotary::apply(nothing, empty, Positions(no64.data(), 0), 2));
}
#endif

// Head counts are arguments where they can be 0 by mistake: apply/apply_strided need >= 1 (a
// key count of 0 means "no key"); a 4-d batch with 0 heads is a shape (error only if it has tokens).
TEST(EdgeZeroSize, ZeroHeads) {
  const rotary::Rope<float> rope(RotarySpec(8), 16);
  rotary::RowMatrix<float> x = rotary::RowMatrix<float>::Zero(0, 8);
  rotary_test::expect_error([&] { rotary::apply(rope, x, Positions::contiguous(0), 0); },
                            {"heads (0) must be >= 1"});
  std::vector<float> buf(16);
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(rope, buf.data(), StridedLayout{2, 0, 8, 8}, Positions::contiguous(0));
      },
      {"heads (0) must be >= 1"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_strided(rope, buf.data(), StridedLayout{0, 0, 8, 8}, Positions::contiguous(0));
      },
      {"heads (0) must be >= 1"});
  rotary_test::expect_error(
      [&] {
        rotary::apply_batch(rope, rotary::Layout::bshd, buf.data(), rotary::BatchShape{1, 2, 0, 8},
                            rotary::SequencePositions::restart());
      },
      {"heads (0) must be >= 1"});
  EXPECT_NO_THROW(rotary::apply_batch(rope, rotary::Layout::bshd, buf.data(), rotary::BatchShape{0, 2, 0, 8},
                                      rotary::SequencePositions::restart()));
}

}  // namespace
