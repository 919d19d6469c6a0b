// A caller's cos/sin table (table.hpp): CosSinTableView in each layout (separate, concatenated,
// HF-duplicated; row strides; f32/f64/f16/bf16 elements) and TableRope through the entry points.
// - A view of a Rope's own cache gives that Rope's results bit for bit, for f32, f16 and bf16 vectors
//   sharing one CosSinCache<float>, on every ISA this machine runs.
// - Every layout and element type equals, bit for bit, the same values as compute-type [cos | sin]
//   rows (read in place like a Rope's cache; widening is exact), and equals an independent reference: each pair rotated by the 2x2
//   block [[c, -s], [s, c]] of the table's own (not necessarily unit) values, in double; tolerance
//   2 ulp of the compute type on |x0 c| + |x1 s| plus half an ulp of the storage type.
// - Refusals: positions outside the table (below its first position too), a width that does not
//   match rotary_dim, a "duplicated" table that is not, null pointers, short strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <rotary/rotary.hpp>

#include "support.hpp"

namespace {

using rotary::CosSinTableView;
using rotary::Direction;
using rotary::Pairing;
using rotary::Positions;
using rotary::StridedLayout;
using rotary::TableRope;
using rotary_test::same_bits;

template <class R, class T>
std::vector<T> rotate_with(const R& r, std::vector<T> x,
                           const StridedLayout& l, const Positions& p, Direction dir) {
  rotary::apply_strided(r, x.data(), l, p, dir);
  return x;
}

// Independent reference: pair j of head row `in` (pairing) rotated by the table values c[j], s[j].
template <class T>
void reference_row(Pairing pairing, const std::vector<double>& c, const std::vector<double>& s, double sign,
                   const T* in, std::int64_t head_dim, std::vector<double>& out, std::vector<double>& scale) {
  const auto h = static_cast<std::int64_t>(c.size());
  out.assign(static_cast<std::size_t>(head_dim), 0.0);
  scale.assign(static_cast<std::size_t>(head_dim), 0.0);
  for (std::int64_t i = 0; i < head_dim; ++i) out[static_cast<std::size_t>(i)] = rotary_test::to_d(in[i]);
  for (std::int64_t j = 0; j < h; ++j) {
    const std::int64_t i0 = pairing == Pairing::half_split ? j : 2 * j;
    const std::int64_t i1 = pairing == Pairing::half_split ? j + h : 2 * j + 1;
    const double x0 = rotary_test::to_d(in[i0]);
    const double x1 = rotary_test::to_d(in[i1]);
    const double cj = c[static_cast<std::size_t>(j)];
    const double sj = sign * s[static_cast<std::size_t>(j)];
    out[static_cast<std::size_t>(i0)] = x0 * cj - x1 * sj;
    out[static_cast<std::size_t>(i1)] = x1 * cj + x0 * sj;
    scale[static_cast<std::size_t>(i0)] = std::abs(x0 * cj) + std::abs(x1 * sj);
    scale[static_cast<std::size_t>(i1)] = std::abs(x1 * cj) + std::abs(x0 * sj);
  }
}

// A random table of `rows` rows in each layout, the same values everywhere (any values: ONNX's tests
// use random caches, so do we).
template <class E>
struct Tables {
  std::int64_t rows;
  std::int64_t half;
  std::int64_t stride;                // separate / duplicated row stride (padded)
  std::vector<E> cos, sin;            // separate, padded rows
  std::vector<E> cat;                 // concatenated, padded rows
  std::vector<E> dup_cos, dup_sin;    // duplicated, rows of 2*half
  Tables(std::int64_t rows_, std::int64_t half_, std::mt19937_64& rng) : rows(rows_), half(half_), stride(half_ + 3) {
    const std::vector<E> c = rotary_test::random_vector<E>(static_cast<std::size_t>(rows * half), rng, -1.5, 1.5);
    const std::vector<E> s = rotary_test::random_vector<E>(static_cast<std::size_t>(rows * half), rng, -1.5, 1.5);
    cos.assign(static_cast<std::size_t>(rows * stride), E(0));
    sin = cos;
    cat.assign(static_cast<std::size_t>(rows * (2 * half + 5)), E(0));
    dup_cos.assign(static_cast<std::size_t>(rows * 2 * half), E(0));
    dup_sin = dup_cos;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < half; ++j) {
        const auto v = static_cast<std::size_t>(r * half + j);
        cos[static_cast<std::size_t>(r * stride + j)] = c[v];
        sin[static_cast<std::size_t>(r * stride + j)] = s[v];
        cat[static_cast<std::size_t>(r * (2 * half + 5) + j)] = c[v];
        cat[static_cast<std::size_t>(r * (2 * half + 5) + half + j)] = s[v];
        for (const std::int64_t k : {j, j + half}) {
          dup_cos[static_cast<std::size_t>(r * 2 * half + k)] = c[v];
          dup_sin[static_cast<std::size_t>(r * 2 * half + k)] = s[v];
        }
      }
  }
  std::vector<CosSinTableView<E>> views() const {
    return {CosSinTableView<E>::separate(cos.data(), sin.data(), rows, half, stride),
            CosSinTableView<E>::concatenated(cat.data(), rows, 2 * half, 2 * half + 5),
            CosSinTableView<E>::duplicated(dup_cos.data(), dup_sin.data(), rows, 2 * half)};
  }
  void row(std::int64_t r, std::vector<double>& c, std::vector<double>& s) const {
    c.resize(static_cast<std::size_t>(half));
    s.resize(static_cast<std::size_t>(half));
    for (std::int64_t j = 0; j < half; ++j) {
      c[static_cast<std::size_t>(j)] = rotary_test::to_d(cos[static_cast<std::size_t>(r * stride + j)]);
      s[static_cast<std::size_t>(j)] = rotary_test::to_d(sin[static_cast<std::size_t>(r * stride + j)]);
    }
  }
};

// Vectors T, table elements E: every layout, both pairings and directions, on every ISA, equal the
// compute-type concatenated table bit for bit and the reference within its bound.
template <class T, class E>
void check_layouts(std::uint64_t salt) {
  using C = rotary::compute_t<T>;
  std::mt19937_64 rng(rotary_test::seed() + salt);
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  const std::int64_t head_dim = 40;
  const std::int64_t rotary_dim = 30;  // odd number of pairs, pass-through tail of 10
  const std::int64_t half = rotary_dim / 2;
  const std::int64_t rows = 50;
  const std::int64_t tokens = 23;
  const std::int64_t heads = 3;
  const Tables<E> tables(rows, half, rng);
  // The same values as compute-type [cos | sin] rows, which the kernels read in place.
  std::vector<C> direct(static_cast<std::size_t>(rows * rotary_dim));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < half; ++j) {
      direct[static_cast<std::size_t>(r * rotary_dim + j)] =
          static_cast<C>(rotary_test::to_d(tables.cos[static_cast<std::size_t>(r * tables.stride + j)]));
      direct[static_cast<std::size_t>(r * rotary_dim + half + j)] =
          static_cast<C>(rotary_test::to_d(tables.sin[static_cast<std::size_t>(r * tables.stride + j)]));
    }
  const std::vector<std::int64_t> pos = rotary_test::random_positions(static_cast<std::size_t>(tokens), rows - 8, rng);
  std::vector<std::int64_t> shifted = pos;  // the table starts at position 7
  for (auto& p : shifted) p += 7;
  const StridedLayout l{tokens, heads, heads * head_dim + 4, head_dim};
  const std::vector<T> x = rotary_test::random_vector<T>(static_cast<std::size_t>(tokens * l.token_stride), rng);
  const double ulp_c = std::ldexp(1.0, -std::numeric_limits<C>::digits + 1);
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved})
    for (const Direction dir : {Direction::forward, Direction::inverse}) {
      SCOPED_TRACE(std::string(rotary::to_string(pairing)) + (dir == Direction::inverse ? " inverse" : " forward"));
      const TableRope<T, C> want_rope(head_dim, rotary_dim, pairing,
                                      CosSinTableView<C>::concatenated(direct.data(), rows, rotary_dim));
      std::vector<T> want = x;
      {
        rotary_test::IsaScope scalar(rotary::Isa::scalar);
        rotary::apply_strided(want_rope, want.data(), l, Positions(pos), dir);
      }
      // the reference
      std::vector<double> c, s, ref, scale;
      for (std::int64_t t = 0; t < tokens; ++t) {
        tables.row(pos[static_cast<std::size_t>(t)], c, s);
        for (std::int64_t h = 0; h < heads; ++h) {
          const std::int64_t o = t * l.token_stride + h * head_dim;
          reference_row(pairing, c, s, dir == Direction::inverse ? -1.0 : 1.0, x.data() + o, head_dim, ref, scale);
          for (std::int64_t i = 0; i < head_dim; ++i) {
            const double got = rotary_test::to_d(want[static_cast<std::size_t>(o + i)]);
            const double r = ref[static_cast<std::size_t>(i)];
            const double bound = 2 * ulp_c * scale[static_cast<std::size_t>(i)] + rotary_test::ulp<T>(r) / 2;
            ASSERT_LE(std::abs(got - r), bound) << "token " << t << " head " << h << " index " << i;
          }
        }
      }
      for (const rotary::Isa isa : rotary_test::supported_isas()) {
        rotary_test::IsaScope scope(isa);
        for (const CosSinTableView<E>& v : tables.views()) {
          const TableRope<T, E> r(head_dim, rotary_dim, pairing, v);
          EXPECT_TRUE(same_bits(rotate_with(r, x, l, Positions(pos), dir), want)) << rotary::to_string(isa);
          const TableRope<T, E> r7(head_dim, rotary_dim, pairing, v.with_first_position(7));
          std::vector<T> got = x;
          rotary::apply_strided(r7, got.data(), l, Positions(shifted), {dir, rotary::thread_parallel_for(2)});
          EXPECT_TRUE(same_bits(got, want)) << rotary::to_string(isa) << " first position 7, 2 threads";
        }
      }
    }
}

TEST(Tables, F32VectorsF32Table) { check_layouts<float, float>(1); }
TEST(Tables, F32VectorsF16Table) { check_layouts<float, rotary::f16>(2); }
TEST(Tables, F32VectorsBf16Table) { check_layouts<float, rotary::bf16>(3); }
TEST(Tables, F16VectorsF16Table) { check_layouts<rotary::f16, rotary::f16>(4); }
TEST(Tables, Bf16VectorsBf16Table) { check_layouts<rotary::bf16, rotary::bf16>(5); }
TEST(Tables, Bf16VectorsF32Table) { check_layouts<rotary::bf16, float>(6); }
TEST(Tables, F64VectorsF64Table) { check_layouts<double, double>(7); }
TEST(Tables, F64VectorsF32Table) { check_layouts<double, float>(8); }

// One Rope<float> table serves f32, f16 and bf16 vectors without a copy, with that Rope's bits.
template <class T>
void check_shared(const rotary::Rope<float>& owner, std::uint64_t salt) {
  std::mt19937_64 rng(rotary_test::seed() + salt);
  const rotary::Rope<T> own(owner.spec(), owner.cache());  // a copy of the table: the old way
  const TableRope<T, float> shared(owner.head_dim(), owner.rotary_dim(), owner.pairing(),
                                   rotary::table_view(owner.cache()));
  const std::int64_t tokens = 37;
  const std::int64_t qh = 4;
  const std::int64_t kh = 2;
  const std::vector<std::int64_t> pos = rotary_test::random_positions(static_cast<std::size_t>(tokens), 4095, rng);
  for (const rotary::Isa isa : rotary_test::supported_isas()) {
    rotary_test::IsaScope scope(isa);
    const rotary::RowMatrix<T> q = rotary_test::random_rows<T>(tokens * qh, owner.head_dim(), rng);
    const rotary::RowMatrix<T> k = rotary_test::random_rows<T>(tokens * kh, owner.head_dim(), rng);
    rotary::RowMatrix<T> q1 = q, k1 = k, q2 = q, k2 = k;
    rotary::apply_qk(own, q1, k1, Positions(pos), qh, kh);
    rotary::apply_qk(shared, q2, k2, Positions(pos), qh, kh);
    EXPECT_TRUE(q1 == q2 && k1 == k2) << rotary::to_string(isa);
  }
}

TEST(Tables, OneRopeTableSharedByEveryDtype) {
  const rotary::Rope<float> owner(rotary::RotarySpec(128, Pairing::half_split, 500000.0, 64), 4096);
  check_shared<float>(owner, 11);
  check_shared<rotary::f16>(owner, 12);
  check_shared<rotary::bf16>(owner, 13);
  EXPECT_EQ(rotary::table_view(owner.cache()).cos(), owner.cache().data()) << "a view, not a copy";
}

// ONNX without position_ids: cos/sin [B, S, r/2], one row per (batch, token) in memory order, and
// positions contiguous from 0 over the batch's tokens.
TEST(Tables, PerBatchTokenRows) {
  std::mt19937_64 rng(rotary_test::seed() + 21);
  const std::int64_t b = 3, s = 5, heads = 2, d = 16;
  const Tables<float> t(b * s, d / 2, rng);
  const TableRope<float> r(d, d, Pairing::interleaved, t.views()[0]);
  const std::vector<float> x = rotary_test::random_vector<float>(static_cast<std::size_t>(b * s * heads * d), rng);
  std::vector<float> got = x;
  rotary::apply_strided(r, got.data(), StridedLayout{b * s, heads, heads * d, d}, Positions::contiguous(0));
  std::vector<float> want = x;
  for (std::int64_t bb = 0; bb < b; ++bb) {  // batch bb alone, on its own rows of the table
    const TableRope<float> rb(d, d, Pairing::interleaved, t.views()[0].rows_from(bb * s, s));
    rotary::apply_strided(rb, want.data() + bb * s * heads * d, StridedLayout{s, heads, heads * d, d},
                          Positions::contiguous(0));
  }
  EXPECT_TRUE(same_bits(got, want));
}

TEST(Tables, Refusals) {
  std::mt19937_64 rng(rotary_test::seed() + 31);
  const Tables<float> t(10, 4, rng);
  const CosSinTableView<float> v = t.views()[0];
  const TableRope<float> r(12, 8, Pairing::half_split, v);
  std::vector<float> x(static_cast<std::size_t>(3 * 12));
  const StridedLayout l{3, 1, 12, 12};
  rotary_test::expect_error([&] { rotary::apply_strided(r, x.data(), l, Positions::contiguous(8)); },
                            {"position 10", "outside the table [0, 10)"});
  const std::vector<std::int64_t> below{5, 6, 2};
  const TableRope<float> r3(12, 8, Pairing::half_split, v.with_first_position(3));
  rotary_test::expect_error([&] { rotary::apply_strided(r3, x.data(), l, Positions(below)); },
                            {"positions[2] (2)", "outside the table [3, 13)"});
  rotary_test::expect_error([&] { TableRope<float>(12, 10, Pairing::half_split, v); },
                            {"holds 4 cos/sin values", "rotary_dim 10 needs 5"});
  rotary_test::expect_error([&] { TableRope<float>(12, 7, Pairing::half_split, v); }, {"rotary_dim (7)"});
  rotary_test::expect_error([&] { TableRope<float>(6, 8, Pairing::half_split, v); }, {"<= head_dim (6)"});
  std::vector<float> not_dup = t.dup_cos;
  not_dup[static_cast<std::size_t>(2 * 8 + 5)] += 1.0f;  // row 2, second half
  rotary_test::expect_error(
      [&] { CosSinTableView<float>::duplicated(not_dup.data(), t.dup_sin.data(), 10, 8); },
      {"cos row 2 is not cat(v, v)"});
  rotary_test::expect_error([&] { CosSinTableView<float>::separate(nullptr, t.sin.data(), 10, 4); },
                            {"null cos or sin pointer"});
  rotary_test::expect_error([&] { CosSinTableView<float>::separate(t.cos.data(), t.sin.data(), 10, 4, 3); },
                            {"row_stride (3) is less than a row's 4 values"});
  rotary_test::expect_error([&] { CosSinTableView<float>::concatenated(t.cat.data(), 10, 7); },
                            {"rotary_dim (7) must be even"});
  rotary_test::expect_error([&] { static_cast<void>(v.rows_from(8, 3)); }, {"rows [8, 8 + 3)", "its 10 rows"});
  const rotary::CosSinCache<float> listed =
      rotary::CosSinCache<float>::for_positions(rotary::default_frequencies(8, 10000.0), {3, 9});
  rotary_test::expect_error([&] { static_cast<void>(rotary::table_view(listed)); }, {"listed positions"});
}

// A table's rows must fit in one buffer: at most PTRDIFF_MAX bytes, counted in bytes. rows x row_stride
// in elements fitting int64 is not enough (the byte extent wrapped, and so did the overlap checks).
TEST(Tables, SpanBeyondMemoryRefused) {
  using rotary_test::expect_error;
  const std::vector<float> f(16, 0.5f);
  const std::int64_t rows = std::int64_t{1} << 58;  // x 8 values: 2^61 elements, 2^63 bytes of f32
  expect_error([&] { CosSinTableView<float>::concatenated(f.data(), rows, 8); },
               {"concatenated table: 288230376151711744 rows of 8 values (row stride 8)",
                "span more than PTRDIFF_MAX bytes"});
  expect_error([&] { CosSinTableView<float>::separate(f.data(), f.data() + 8, rows, 8); },
               {"separate table: 288230376151711744 rows of 8 values (row stride 8)", "PTRDIFF_MAX"});
  // reading 4 values of each row, the same rows fit: the span ends 4 values past the last row's start
  // (2^61 - 4 elements), not a whole stride
  EXPECT_EQ(CosSinTableView<float>::separate(f.data(), f.data() + 4, rows, 4, 8).rows(), rows);
  // refused before a row is read (duplicated compares every row's halves)
  expect_error([&] { CosSinTableView<float>::duplicated(f.data(), f.data() + 8, rows, 8); },
               {"duplicated table: 288230376151711744 rows", "PTRDIFF_MAX"});
  // the same rows in f16 are 2^62 bytes: they fit (making the view reads nothing)
  const std::vector<rotary::f16> h(16);
  EXPECT_EQ(CosSinTableView<rotary::f16>::concatenated(h.data(), rows, 8).rows(), rows);
  // one row may sit at any stride, two that far apart may not
  const std::int64_t far = std::int64_t{1} << 61;
  EXPECT_EQ(CosSinTableView<float>::separate(f.data(), f.data() + 4, 1, 4, far).rows(), 1);
  expect_error([&] { CosSinTableView<float>::separate(f.data(), f.data() + 4, 2, 4, far); },
               {"separate table: 2 rows of 4 values (row stride 2305843009213693952)", "PTRDIFF_MAX"});
  // the helper the compat headers name their arguments with
  EXPECT_EQ(rotary::detail::check_table_span("cos", rows, 8, 8, sizeof(rotary::f16)), "");
  EXPECT_EQ(rotary::detail::check_table_span("cos", rows, 8, 8, sizeof(float)),
            "cos: 288230376151711744 rows of 8 values (row stride 8) span more than PTRDIFF_MAX bytes: no buffer "
            "is that large");
  EXPECT_EQ(rotary::detail::check_table_span("cos", 0, far, 8, sizeof(float)), "");
}

// An output over what the call reads (the caller's table, a positions array) would overwrite values
// before they are read: refused, with nothing written. Accepted before (the results were wrong).
TEST(Tables, OutputApartFromTableAndPositions) {
  const std::int64_t D = 8, T = 3;
  const StridedLayout l{T, 1, D, D};
  std::vector<float> buf(static_cast<std::size_t>(T * D + 10 * 4 * 2), 0.5f);
  float* x = buf.data();
  float* cos = x + T * D;  // the table right after x: apart, accepted
  float* sin = cos + 10 * 4;
  for (std::int64_t i = 0; i < 10 * 4; ++i) {
    cos[i] = 1.0f;
    sin[i] = 0.0f;
  }
  const TableRope<float> after(D, D, Pairing::half_split, CosSinTableView<float>::separate(cos, sin, 10, 4));
  rotary::apply_strided(after, x, l, Positions::contiguous(0));
  EXPECT_EQ(x[0], 0.5f);  // cos 1, sin 0: unchanged
  // the table inside the rotated rows
  const TableRope<float> inside(D, D, Pairing::half_split, CosSinTableView<float>::separate(x + D, sin, 10, 4));
  const std::vector<float> before = buf;
  rotary_test::expect_error([&] { rotary::apply_strided(inside, x, l, Positions::contiguous(0)); },
                            {"output of x and the cos table share memory"});
  EXPECT_EQ(buf, before);
  // a positions array inside the rotated rows (its values valid: the call would otherwise run)
  const std::int64_t pos[T] = {0, 1, 2};
  std::memcpy(x + D, pos, sizeof pos);
  const std::vector<float> before2 = buf;
  const rotary::Rope<float> rope(rotary::RotarySpec(D), 16);
  rotary_test::expect_error(
      [&] {
        // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
        rotary::apply_strided(rope, x, l, Positions(reinterpret_cast<const std::int64_t*>(x + D), T));
      },
      {"output of x and positions share memory"});
  rotary_test::expect_error(
      [&] {
        // cppcheck-suppress invalidPointerCast  ; deliberate: a value array placed inside another buffer
        rotary::apply_strided(after, x, l, Positions(reinterpret_cast<const std::int64_t*>(x + D), T));
      },
      {"output of x and positions share memory"});
  EXPECT_EQ(buf, before2);
}

}  // namespace
