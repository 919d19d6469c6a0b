// Guard pages around every entry point that reads or writes user memory, as tables: the helpers
// shared by test_guard_pages_rows.cpp, test_guard_pages_variants.cpp and test_guard_pages_fused.cpp
// (guarded buffers, shapes, the expected rows and their check, Fixture<T>, the sweep). Each of
// those files defines the Fixture methods of its entry points and its table, entry_points().
//
// A table has one row per entry point, or family of overloads swept together: its name, the shapes
// and pairings it meets, and a callable that runs it on guard-page buffers of one shape, storage
// type and ISA (a method of Fixture<T>). One loop sweeps a table: each test case is one (row, ISA)
// - every ISA of the registry (rotary::all_isas(): forced with set_max_isa for public entry points;
// the "kernels" row calls the registry's kernels of that ISA directly, detail::kernel_variants with
// the avx512 bf16 roundings pinned one by one), skipped where this CPU or build cannot run it - and
// sweeps f32, f64, f16, bf16 x both flush sides x the row's shapes x its pairings.
//
// Every tensor, position array and cu_seqlens array of a call lives in its own buffer between two
// PROT_NONE pages, sized to exactly the extent of its view: Flush::end puts the last element against
// the upper guard page (a read or write past the view faults: a missing tail mask, a full-width
// load of the last pair, a stray prefetch into the next row), Flush::begin puts the first element
// against the lower one (an under-run faults). Shapes: head_dim 6, 7, 10, 34, 67, 130 with full and
// partial rotary_dim (odd pass-through tails included; kTailShapes), or, for the kernels and
// apply_strided, every head_dim remainder the kernels' own test sweeps (2 ... 544) at 1/4 ... 1 of it
// (every_head_dim()); 3 tokens x 3 heads (odd, so no vector width divides the row count), GQA keys
// (1 head) and no key, int32 / int64 / contiguous positions, forward and inverse, in place and out
// of place.
//
// A call that does not fault must also be right: the test recomputes every rotated row itself
// (y0 = fma(x0, c, -(x1 s)), y1 = fma(x1, c, x0 s) in the compute type, with the cos/sin row the
// Rope's cache holds for the token's position, rounded to the storage type with Eigen's own
// conversions) and requires the output bit for bit, pass-through coordinates equal to the input,
// the input of an out-of-place call unchanged, and every element of the output buffer that is not
// part of a row (padding between rows) unchanged. Cache-free (OnTheFly) and re-rotation calls have
// no table to read the rows from; they are compared with rows from an exact table of the same
// frequencies (or, for re-rotation, the double-precision composition of two such tables) within
// 8 ulp of the compute type times |x0| + |x1| (+ one storage ulp for f16/bf16): the rows themselves
// are checked in test_on_the_fly and test_rerotate; here the point is memory access. The kernels
// row also requires the scalar kernel's bits (test_simd's contract).
//
// multi_axis.hpp, xpos.hpp, linear_attention.hpp and gradients.hpp (test_guard_pages_variants) are
// swept the same way, on every shape with one pairing each (alternating), and each of their calls
// also runs on ordinary heap copies of its buffers ("heap twins"): the guarded call must give the
// heap call's bits (so it computes what the headers' own tests check), besides its own checks:
// MultiAxisRope rows gathered pair by pair from the table (exact) or from an exact table
// (cache-free), xPos rows from the definition in long double, theta gradients against the formula
// summed in long double. Their position streams are guarded too (planar int32 / int64, token-major,
// one buffer per stream; the streams no pair uses point into a guard page). convert_weights.hpp has
// no kernels: its row runs once (as the scalar case) per storage type, flush side and shape.
//
// The fused prologues (fusion.hpp, kv_cache.hpp; test_guard_pages_fused) run on their own shapes
// (kFusedShapes: head_dim 64, 128, 256 and 2, 7, 18, 34, 100, the norm kernels' register and two-pass
// forms). norm_rows calls each ISA's per-head RMSNorm kernel of the registry directly (in place and
// out of place, with a guarded weight and without) and requires the scalar kernel's bits; prologue
// runs rope_prologue with q, k, v, the norm weights, the slot mapping, both caches and their scales
// each in a buffer of exactly their extent (paged NHD and HND caches whose first and last slots are
// written; caches of T and, for f32, int8 and fp8), with and without the norms before and after RoPE,
// and requires, byte for byte, the unfused composition's result on heap copies. Both rows, like every
// row, run with the minimum work per thread lowered (SplitAlways), so their threaded calls do split.
//
// Elsewhere: zero-sized calls on pointers into a PROT_NONE page (test_edge_integers,
// EdgeZeroSize.NoAccessNoThrow) and a dense head-major axial multi-axis call (test_multi_axis_calls,
// MultiAxisStrided.HeadMajorLayoutAndGuardPages). A caller's cos/sin table (row caller_table) sits in
// guarded buffers too; one of another element type (widened per block) is not swept here. Not
// covered: reads of rotary's own cos/sin table and of scratch rows (heap allocations: the ASan build
// catches over-reads of them).

#ifndef ROTARY_TESTS_KERNELS_GUARD_PAGES_HPP
#define ROTARY_TESTS_KERNELS_GUARD_PAGES_HPP

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <rotary/gradients.hpp>
#include <rotary/linear_attention.hpp>
#include <rotary/multi_axis.hpp>
#include <rotary/rotary.hpp>
#include <rotary/tensor_map.hpp>
#include <rotary/xpos.hpp>

#include "support.hpp"

#if ROTARY_TEST_HAVE_MMAN

namespace guard_pages {

using rotary::BatchShape;
using rotary::BatchStrides;
using rotary::BatchView;
using rotary::CuSeqlens;
using rotary::Direction;
using rotary::Isa;
using rotary::Layout;
using rotary::Pairing;
using rotary::Positions;
using rotary::SequencePositions;
using rotary::StridedLayout;
using rotary_test::DType;
using rotary_test::dtype_name;
using rotary_test::Flush;
using rotary_test::GuardedBuffer;
using rotary_test::IsaScope;
using rotary_test::narrow;
using rotary_test::same_bits;

// ---- shapes ------------------------------------------------------------------------------------

struct Shape {
  std::int64_t head_dim;
  std::int64_t rotary_dim;
};
// Odd tails everywhere: pairs h = 3, 2, 3, 5, 3, 17, 9, 16, 65, 33 and pass-through runs of 0, 2, 1,
// 0, 4, 0, 16, 35, 0, 64 elements (the last lane group of a row always partial somewhere).
#if defined(ROTARY_TEST_EMULATED) && ROTARY_TEST_EMULATED
// Under qemu-user (cross builds) every instruction is emulated: keep one shape per tail kind.
const std::vector<Shape> kTailShapes = {{7, 6}, {34, 18}, {130, 66}};
#else
const std::vector<Shape> kTailShapes = {{6, 6},   {6, 4},   {7, 6},   {10, 10},   {10, 6},
                                        {34, 34}, {34, 18}, {67, 32}, {130, 130}, {130, 66}};
#endif

// The kernels' own shape list (test_simd): every remainder mod 4, 8 and 16 lanes (MLAS's 6/42/70),
// the odd 7 and 67 (odd pass-through runs), 258 and 544 (the AVX-512 f32 half_split streaming path,
// h > 128), each with rotary_dim at 1/4, 1/2, 3/4 and all of head_dim (even, at least 2, no repeats).
inline const std::vector<Shape>& every_head_dim() {
  static const std::vector<Shape> v = [] {
    std::vector<Shape> r;
    for (const std::int64_t head_dim :
         {2, 4, 6, 7, 8, 14, 16, 18, 30, 32, 34, 42, 62, 64, 66, 67, 70, 96, 128, 130, 256, 258, 544})
      for (const std::int64_t quarters : {1, 2, 3, 4}) {
        const std::int64_t d = std::max<std::int64_t>(2, (head_dim * quarters / 4) / 2 * 2);
        if (r.empty() || r.back().head_dim != head_dim || r.back().rotary_dim != d)
          r.push_back({head_dim, d});
      }
    return r;
  }();
  return v;
}

// The fused prologues' shapes (fusion.hpp): head_dim 64, 128 and 256 take the norm kernels'
// register form, the others (2, 7, 18, 34, 100) the two-pass form with a scalar tail of 2, 7, 2, 2,
// 4 elements; full and partial rotary_dim (pass-through tails of 1, 16, 4, 126).
#if defined(ROTARY_TEST_EMULATED) && ROTARY_TEST_EMULATED
const std::vector<Shape> kFusedShapes = {{7, 6}, {64, 64}, {100, 96}};
#else
const std::vector<Shape> kFusedShapes = {{2, 2},   {7, 6},    {18, 18},   {34, 18},
                                         {64, 64}, {100, 96}, {128, 128}, {256, 130}};
#endif

// One run of a table row: the ISA, storage type and flush side of the sweep, and one shape (its
// index in the row's shape list) with one pairing.
struct Where {
  Isa isa;
  DType dtype;
  Flush flush;
  int shape_index;
  Shape shape;
  Pairing pairing;
};

constexpr std::int64_t kTokens = 3;
constexpr std::int64_t kHeads = 3;
constexpr std::int64_t kKeyHeads = 1;
constexpr std::int64_t kCachePositions = 256;

// ---- storage types ------------------------------------------------------------------------------

template <class T>
using C = rotary::compute_t<T>;

template <class T>
C<T> widen(T x) {
  return static_cast<C<T>>(x);  // exact for every storage type
}

// Spacing of the 16-bit storage type at |v| (0 for f32/f64, whose rounding is the compute type's).
template <class T>
double storage_ulp(double v) {
  int digits = 0;
  double min_normal = 0.0;
  if constexpr (std::is_same_v<T, rotary::f16>) {
    digits = 11;
    min_normal = 0x1p-14;
  } else if constexpr (std::is_same_v<T, rotary::bf16>) {
    digits = 8;
    min_normal = 0x1p-126;
  } else {
    return 0.0;
  }
  int e = 0;
  std::frexp(std::max(std::fabs(v), min_normal), &e);
  return std::ldexp(1.0, e - digits);
}

// Rows computed another way than the kernels' (cache-free recurrence, re-rotation), off by at most
// row_error in each cos/sin: (row_error + 4 ulp of the compute type) times |x0| + |x1| (the kernel's
// two roundings and the recomputation's), plus one storage ulp for f16/bf16 (the two results may
// round to neighbours).
template <class T>
double tolerance(double row_error, double x0, double x1, double want) {
  const double eps = std::is_same_v<C<T>, double> ? 0x1p-53 : 0x1p-24;
  return (row_error + 4.0 * eps) * (std::fabs(x0) + std::fabs(x1)) + storage_ulp<T>(want);
}

// Largest |got - want| / (|x0| + |x1|) seen in tolerance comparisons, per compute type (printed).
inline double& worst_relative(bool f64) {
  static double w[2] = {0.0, 0.0};
  return w[f64 ? 1 : 0];
}

// ---- guarded memory -----------------------------------------------------------------------------

// Where the buffers of a call live: the guarded ones under test, or ordinary heap copies of their
// initial contents. The calls of multi_axis.hpp, xpos.hpp, linear_attention.hpp and gradients.hpp
// run on both ("heap twins"), and the guarded call must give the heap call's bits: it then computes
// what the header's own tests check.
enum class Mem { guarded, heap };

// A view's buffer: random contents, and a snapshot of them taken before the call under test.
template <class T>
struct Tensor {
  Tensor(std::size_t n, Flush flush, std::mt19937_64& rng) : buf(n, flush) {
    // Uniform in [-2, 2) from the top 53 bits (uniform_real_distribution calls logl per draw).
    for (std::size_t i = 0; i < n; ++i)
      buf.data()[i] = static_cast<T>(static_cast<double>(rng() >> 11) * 0x1p-51 - 2.0);
    before.assign(buf.data(), buf.data() + n);
  }
  T* data() const { return buf.data(); }
  std::size_t size() const { return buf.size(); }
  // The guarded buffer, or its heap twin (a copy of the initial contents, made on first use).
  T* at(Mem m) {
    if (m == Mem::guarded) return data();
    if (heap.size() != before.size()) heap = before;
    return heap.data();
  }
  GuardedBuffer<T> buf;
  std::vector<T> before;
  std::vector<T> heap;
};

// The guarded buffer holds the bits its heap twin holds after the same call.
template <class T>
void expect_same_as_heap(const std::string& what, Tensor<T>& t) {
  const T* heap = t.at(Mem::heap);
  for (std::size_t i = 0; i < t.size(); ++i)
    if (!same_bits(t.data()[i], heap[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << static_cast<double>(widen(t.data()[i]))
                    << " but the same call on heap copies gave " << static_cast<double>(widen(heap[i])) << " "
                    << rotary_test::seed_note();
      return;
    }
}

// An input buffer still holds its initial contents.
template <class T>
void expect_untouched(const std::string& what, const Tensor<T>& t) {
  for (std::size_t i = 0; i < t.size(); ++i)
    if (!same_bits(t.data()[i], t.before[i])) {
      ADD_FAILURE() << what << ": element " << i << " of an input changed";
      return;
    }
}

// Elements spanned by tokens x heads rows of head_dim (0 when empty).
inline std::size_t extent(std::int64_t tokens, std::int64_t heads, std::ptrdiff_t ts, std::ptrdiff_t hs,
                   std::int64_t head_dim) {
  if (tokens == 0 || heads == 0) return 0;
  return static_cast<std::size_t>((tokens - 1) * ts + (heads - 1) * hs + head_dim);
}
inline std::size_t extent(const BatchShape& s, const BatchStrides& st) {
  if (s.batch == 0 || s.seq == 0 || s.heads == 0) return 0;
  return static_cast<std::size_t>((s.batch - 1) * st.batch + (s.seq - 1) * st.seq + (s.heads - 1) * st.head +
                                  s.head_dim);
}
inline std::size_t extent(const StridedLayout& l, std::int64_t head_dim) {
  return extent(l.tokens, l.heads, l.token_stride, l.head_stride, head_dim);
}

// An int32/int64 array (positions, deltas, cu_seqlens) in its own guarded buffer.
template <class I>
std::unique_ptr<GuardedBuffer<I>> guarded_array(const std::vector<std::int64_t>& v, Flush flush) {
  auto b = std::make_unique<GuardedBuffer<I>>(v.size(), flush);
  for (std::size_t i = 0; i < v.size(); ++i) b->data()[i] = static_cast<I>(v[i]);
  return b;
}

// The positions of a call: a contiguous start (kind 0), or an int32 (1) / int64 (2) array in
// guarded memory; values() is what the test expects for each token.
class GuardedPositions {
 public:
  GuardedPositions(int kind, std::vector<std::int64_t> values, Flush flush)
      : kind_(kind), values_(std::move(values)) {
    if (kind_ == 1) {
      p32_ = guarded_array<std::int32_t>(values_, flush);
      h32_.assign(values_.begin(), values_.end());
    }
    if (kind_ == 2) p64_ = guarded_array<std::int64_t>(values_, flush);
  }
  static GuardedPositions contiguous(std::int64_t start, std::int64_t tokens) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) v[static_cast<std::size_t>(t)] = start + t;
    return GuardedPositions(0, std::move(v), Flush::end);
  }
  Positions get() const {
    if (kind_ == 1) return Positions(p32_->data(), static_cast<std::int64_t>(values_.size()));
    if (kind_ == 2) return Positions(p64_->data(), static_cast<std::int64_t>(values_.size()));
    return Positions::contiguous(values_.empty() ? 0 : values_[0]);
  }
  // The same positions for a call on guarded buffers or on their heap twins.
  Positions get(Mem m) const {
    if (m == Mem::guarded || kind_ == 0) return get();
    if (kind_ == 1) return Positions(h32_);
    return Positions(values_);
  }
  const std::vector<std::int64_t>& values() const { return values_; }
  std::int64_t operator[](std::int64_t t) const { return values_[static_cast<std::size_t>(t)]; }
  const char* kind_name() const { return kind_ == 0 ? "contiguous" : kind_ == 1 ? "int32" : "int64"; }

 private:
  int kind_;
  std::vector<std::int64_t> values_;
  std::shared_ptr<GuardedBuffer<std::int32_t>> p32_;
  std::shared_ptr<GuardedBuffer<std::int64_t>> p64_;
  std::vector<std::int32_t> h32_;
};

// ---- the expected result ------------------------------------------------------------------------

// One rotated row: where it is read, where it is written, and its position.
struct RowJob {
  std::ptrdiff_t in;
  std::ptrdiff_t out;
  std::int64_t position;
};

// cos/sin row (rotary_dim values in the cache layout) for a position, and whether the output must
// match the recomputation bit for bit (rows the kernels also read) or within tolerance().
template <class T>
struct CosSinRows {
  std::function<std::vector<C<T>>(std::int64_t)> row;
  bool exact = true;
  double row_error = 0.0;  // bound on |kernel's cos/sin - these| when not exact
};

template <class T>
CosSinRows<T> cache_rows(const rotary::CosSinCache<C<T>>& cache) {
  return {[&cache](std::int64_t m) {
            const C<T>* r = cache.row(m);
            return std::vector<C<T>>(r, r + cache.rotary_dim());
          },
          true};
}

struct Geometry {
  std::int64_t head_dim;
  std::int64_t rotary_dim;
  Pairing pairing;
};

// Checks one output buffer (and, out of place, its input) after a call. in_before/out_before are
// the snapshots; in place: in == out and in_before is out_before.
template <class T>
void verify(const std::string& what, const Geometry& g, Direction dir, const CosSinRows<T>& rows,
            const std::vector<RowJob>& jobs, const std::vector<T>& in_before, const T* in_now,
            const std::vector<T>& out_before, const T* out_now, bool in_place) {
  const std::int64_t h = g.rotary_dim / 2;
  std::vector<char> covered(out_before.size(), 0);
  std::vector<C<T>> cs;
  for (std::size_t n = 0; n < jobs.size(); ++n) {
    const RowJob& job = jobs[n];
    if (n == 0 || job.position != jobs[n - 1].position) cs = rows.row(job.position);  // heads share a row
    const T* x = in_before.data() + job.in;
    const T* y = out_now + job.out;
    for (std::int64_t j = 0; j < h; ++j) {
      const std::int64_t i0 = g.pairing == Pairing::interleaved ? 2 * j : j;
      const std::int64_t i1 = g.pairing == Pairing::interleaved ? 2 * j + 1 : j + h;
      const C<T> x0 = widen(x[i0]);
      const C<T> x1 = widen(x[i1]);
      const C<T> c = cs[static_cast<std::size_t>(j)];
      const C<T> s = dir == Direction::inverse ? -cs[static_cast<std::size_t>(h + j)]
                                               : cs[static_cast<std::size_t>(h + j)];
      const T want[2] = {narrow<T>(std::fma(x0, c, -(x1 * s))), narrow<T>(std::fma(x1, c, x0 * s))};
      const std::int64_t idx[2] = {i0, i1};
      for (int k = 0; k < 2; ++k) {
        const T got = y[idx[k]];
        bool ok = true;
        if (rows.exact) {
          ok = same_bits(got, want[k]);
        } else {
          const double diff =
              std::fabs(static_cast<double>(widen(got)) - static_cast<double>(widen(want[k])));
          const double scale = std::fabs(static_cast<double>(x0)) + std::fabs(static_cast<double>(x1));
          ok = diff <= tolerance<T>(rows.row_error, static_cast<double>(x0), static_cast<double>(x1),
                                    static_cast<double>(widen(want[k])));
          double& worst = worst_relative(std::is_same_v<T, double>);
          if (std::is_same_v<T, C<T>> && scale > 0.0) worst = std::max(worst, diff / scale);
        }
        if (!ok) {
          ADD_FAILURE() << what << ": position " << job.position << ", pair " << j << ", element " << idx[k]
                        << ": got " << static_cast<double>(widen(got)) << ", want "
                        << static_cast<double>(widen(want[k])) << " " << rotary_test::seed_note();
          return;
        }
      }
    }
    for (std::int64_t i = g.rotary_dim; i < g.head_dim; ++i)
      if (!same_bits(y[i], x[i])) {
        ADD_FAILURE() << what << ": pass-through element " << i << " of the row at " << job.out << " changed";
        return;
      }
    for (std::int64_t i = 0; i < g.head_dim; ++i) covered[static_cast<std::size_t>(job.out + i)] = 1;
  }
  for (std::size_t i = 0; i < out_before.size(); ++i)
    if (!covered[i] && !same_bits(out_now[i], out_before[i])) {
      ADD_FAILURE() << what << ": element " << i << " of the output buffer is in no row but was written";
      return;
    }
  if (!in_place)
    for (std::size_t i = 0; i < in_before.size(); ++i)
      if (!same_bits(in_now[i], in_before[i])) {
        ADD_FAILURE() << what << ": element " << i << " of the input changed in an out-of-place call";
        return;
      }
}

// Row jobs of a tokens x heads strided view (in and out layouts may differ); token t's row is
// looked up by key[t] (its position, or for multi-axis rows the token index itself).
inline std::vector<RowJob> strided_jobs(const StridedLayout& in, const StridedLayout& out,
                                 const std::vector<std::int64_t>& key) {
  std::vector<RowJob> v;
  for (std::int64_t t = 0; t < in.tokens; ++t)
    for (std::int64_t h = 0; h < in.heads; ++h)
      v.push_back({t * in.token_stride + h * in.head_stride, t * out.token_stride + h * out.head_stride,
                   key[static_cast<std::size_t>(t)]});
  return v;
}
inline std::vector<RowJob> strided_jobs(const StridedLayout& in, const StridedLayout& out,
                                 const GuardedPositions& pos) {
  return strided_jobs(in, out, pos.values());
}

// Row jobs of a 4-d view; token (b, s) has position pos[b * seq + s].
inline std::vector<RowJob> batch_jobs(const BatchShape& sh, const BatchStrides& in, const BatchStrides& out,
                               const std::vector<std::int64_t>& pos) {
  std::vector<RowJob> v;
  for (std::int64_t b = 0; b < sh.batch; ++b)
    for (std::int64_t s = 0; s < sh.seq; ++s)
      for (std::int64_t h = 0; h < sh.heads; ++h)
        v.push_back({b * in.batch + s * in.seq + h * in.head, b * out.batch + s * out.seq + h * out.head,
                     pos[static_cast<std::size_t>(b * sh.seq + s)]});
  return v;
}

// The cos/sin table of positions [0, kCachePositions) for a spec, built once per geometry and
// compute type (building it is most of a run's time on the 85 shapes of every_head_dim()); each
// Fixture's Rope holds a copy.
template <class Cc>
const rotary::CosSinCache<Cc>& shared_cache(const rotary::RotarySpec& spec) {
  static std::map<std::pair<std::int64_t, std::int64_t>, rotary::CosSinCache<Cc>> tables;
  const std::pair<std::int64_t, std::int64_t> key(spec.head_dim, spec.rotary_dim);
  auto it = tables.find(key);
  if (it == tables.end())
    it = tables.emplace(key, rotary::CosSinCache<Cc>(rotary::compute_frequencies(spec), 0, kCachePositions))
             .first;
  return it->second;
}

// ---- one run of a row ---------------------------------------------------------------------------

struct BatchPositions;  // test_guard_pages_rows.cpp
struct FormLayouts;     // test_guard_pages_variants.cpp
struct Variant;         // test_guard_pages_variants.cpp

// Guard-page buffers and everything else one run of a table row needs (its Where: ISA, storage type,
// flush side, shape, pairing). The public methods are the tables' callables, one per row; each
// test_guard_pages_*.cpp defines those of its own rows and the private helpers they use.
template <class T>
class Fixture {
 public:
  Fixture(const Where& w, std::mt19937_64& rng)
      : isa_(w.isa),
        flush_(w.flush),
        rng_(rng),
        g_{w.shape.head_dim, w.shape.rotary_dim, w.pairing},
        spec_(w.shape.head_dim, w.pairing, 10000.0, w.shape.rotary_dim),
        rope_(spec_, shared_cache<C<T>>(spec_)),
        fly_(spec_, rotary::OnTheFly{}),
        flip_(w.shape_index / 2 % 2 == 1) {
    std::ostringstream os;
    os << rotary::to_string(w.isa) << " " << dtype_name(w.dtype)
       << (w.flush == Flush::end ? " flush end " : " flush begin ") << rotary::to_string(w.pairing)
       << " head_dim " << w.shape.head_dim << " rotary_dim " << w.shape.rotary_dim;
    where_ = os.str();
  }

  // test_guard_pages_rows.cpp: the registry's kernels, apply.hpp, table.hpp, layouts.hpp,
  // tensor_map.hpp, rerotate.hpp.
  void kernels();
  void apply_eigen();
  void apply_strided();
  void caller_table();
  void apply_qk_eigen();
  void apply_qk_strided();
  void listed_cache();
  void on_the_fly();
  void batch();
  void qk_batch();
  void varlen();
  void tensor_maps();
  void rerotate();
  // test_guard_pages_variants.cpp: multi_axis.hpp, xpos.hpp, linear_attention.hpp, gradients.hpp,
  // convert_weights.hpp.
  void multi_axis();
  void xpos();
  void linear_attention();
  void gradients();
  void convert_weights();
  // test_guard_pages_fused.cpp: fusion.hpp and kv_cache.hpp.
  void norm_rows();
  void prologue();

 private:
  // Eigen rows with an outer stride (padding between rows).
  using Map = Eigen::Map<rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
  using ConstMap = Eigen::Map<const rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;

  // The tokens x heads rows of a rows layout (form_layouts' Eigen forms: a head stride per row).
  Map row_map(T* x, const StridedLayout& sl) const {
    return Map(x, sl.tokens * sl.heads, g_.head_dim, Eigen::OuterStride<>(sl.head_stride));
  }

  std::string where(const std::string& what, const GuardedPositions* p = nullptr) const {
    return where_ + " " + what + (p != nullptr ? std::string(" (") + p->kind_name() + " positions)" : "");
  }
  Tensor<T> tensor(std::size_t n) { return Tensor<T>(n, flush_, rng_); }

  // Random positions in [0, limit - tokens): kind 0 contiguous, 1 int32, 2 int64 (guarded).
  GuardedPositions positions(int kind, std::int64_t tokens, std::int64_t limit = kCachePositions) {
    if (kind == 1) limit = std::min<std::int64_t>(limit, std::numeric_limits<std::int32_t>::max());
    std::uniform_int_distribution<std::int64_t> d(0, limit - tokens - 1);
    if (kind == 0) return GuardedPositions::contiguous(d(rng_), tokens);
    std::vector<std::int64_t> v(static_cast<std::size_t>(tokens));
    for (auto& p : v) p = d(rng_);
    return GuardedPositions(kind, std::move(v), flush_);
  }

  Direction dir_for(int i) const { return i % 2 == 0 ? Direction::forward : Direction::inverse; }

  // Helpers of one file's rows, defined there (see each definition).
  BatchPositions batch_positions(int mode, std::int64_t batch, std::int64_t seq);
  rotary::detail::KernelArgs<T> kernel_args(const StridedLayout& il, const T* in, const StridedLayout& ol,
                                            T* out, const Positions& p, Direction dir) const;
  template <class Call>
  void check_call(const std::string& name, Direction dir, const std::vector<std::int64_t>& keys,
                  const CosSinRows<T>& q_rows, const CosSinRows<T>& k_rows, const FormLayouts& l, bool in_place,
                  const Call& call);
  std::vector<std::vector<std::int64_t>> axis_streams(int streams, std::int64_t tokens, std::int64_t limit);
  void multi_axis_call(const rotary::MultiAxisRope<T>& r, const Variant& v, const FormLayouts& l, T* qi,
                       T* qo, T* ki, T* ko, const rotary::AxisPositions& p, Direction dir,
                       const rotary::ParallelFor& parallel) const;
  CosSinRows<T> xpos_rows(const rotary::XPos<T>& xp, bool query, Direction dir, double center) const;
  void xpos_call(const rotary::XPos<T>& xp, const Variant& v, bool query, const FormLayouts& l, T* qi, T* qo,
                 T* ki, T* ko, const Positions& p, double c, Direction dir,
                 const rotary::ParallelFor& parallel) const;
  void theta_reference(const T* y, const StridedLayout& yl, const T* dy, const StridedLayout& dl,
                       const std::vector<std::int64_t>& pos, Direction dir, std::vector<long double>& want,
                       std::vector<long double>& mag) const;
  template <class E>
  void prologue_into();

  Isa isa_;
  Flush flush_;
  std::mt19937_64& rng_;
  Geometry g_;
  rotary::RotarySpec spec_;
  rotary::Rope<T> rope_;
  rotary::Rope<T> fly_;
  std::string where_;
  bool flip_ = false;  // swap the xPos roles of one-tensor forms
};

// ---- the tables of entry points -----------------------------------------------------------------

// The shapes a row meets: kTailShapes, every_head_dim() (the kernels' own list; for rows cheap
// enough to run on its 85 shapes) or kFusedShapes (the norm kernels' two forms).
enum class Shapes { tails, every, fused };
// The pairings a row meets on each shape: both, or one, alternating from shape to shape (each pairing
// meets every other shape: for multi_axis.hpp, xpos.hpp, linear_attention.hpp and gradients.hpp,
// which reach the kernels the rows with both sweep, at half the run time; a guarded buffer is 3
// system calls), or only the first (no rotation).
enum class Pairings { both, alternate, first };
// The ISAs a row runs under: every ISA of the registry, or none (no kernels: once, as the scalar case).
enum class Isas { every, none };

template <class T>
using RunFn = void (*)(Fixture<T>&);

// A row: a name (the test name's first part), an id (distinct across the three files' tables: it
// seeds the row's random streams), its shapes, pairings and ISAs, and what runs it on one Fixture,
// for each storage type.
struct EntryPoint {
  const char* name;
  int id;
  Shapes shapes;
  Pairings pairings;
  Isas isas;
  RunFn<float> f32;
  RunFn<double> f64;
  RunFn<rotary::f16> f16;
  RunFn<rotary::bf16> bf16;

  template <class T>
  RunFn<T> run() const {
    if constexpr (std::is_same_v<T, float>) return f32;
    if constexpr (std::is_same_v<T, double>) return f64;
    if constexpr (std::is_same_v<T, rotary::f16>) return f16;
    if constexpr (std::is_same_v<T, rotary::bf16>) return bf16;
  }
  const std::vector<Shape>& shape_list() const {
    return shapes == Shapes::every ? every_head_dim() : shapes == Shapes::fused ? kFusedShapes : kTailShapes;
  }
  bool meets(int shape_index, Pairing p) const {
    switch (pairings) {
      case Pairings::both:
        return true;
      case Pairings::alternate:
        return (shape_index + (p == Pairing::interleaved ? 1 : 0)) % 2 == 0;
      default:
        return p == Pairing::interleaved;
    }
  }
};

// `run` is a generic lambda without captures, [](auto& f) { f.method(); }: it converts to a RunFn<T>
// for each storage type.
template <class Run>
EntryPoint row(const char* name, int id, Shapes shapes, Pairings pairings, Isas isas, Run run) {
  return {name, id, shapes, pairings, isas, run, run, run, run};
}

// ---- the sweep ----------------------------------------------------------------------------------

// A test case: one row of a table under one ISA of the registry.
struct GuardCase {
  const EntryPoint* row;
  Isa isa;
};

inline std::string case_name(const GuardCase& c) {
  const EntryPoint& e = *c.row;
  return e.isas == Isas::none ? std::string(e.name)
                              : std::string(e.name) + "_" + std::string(rotary::to_string(c.isa));
}

inline void PrintTo(const GuardCase& c, std::ostream* os) { *os << case_name(c); }

inline std::vector<GuardCase> all_cases(const std::vector<EntryPoint>& table) {
  std::vector<GuardCase> v;
  for (const EntryPoint& e : table)
    for (const Isa isa : rotary::all_isas()) {
      if (e.isas == Isas::none && isa != rotary::all_isas().front()) continue;
      v.push_back({&e, isa});
    }
  return v;
}

// One row under one ISA and storage type: both flush sides x the row's shapes x its pairings.
template <class T>
void sweep(const EntryPoint& e, Isa isa, DType dtype, std::mt19937_64& rng) {
  const RunFn<T> run = e.run<T>();
  const std::vector<Shape>& shapes = e.shape_list();
  for (const Flush flush : {Flush::end, Flush::begin})
    for (int i = 0; i < static_cast<int>(shapes.size()); ++i)
      for (const Pairing pairing : {Pairing::interleaved, Pairing::half_split}) {
        if (!e.meets(i, pairing)) continue;
        Fixture<T> f(Where{isa, dtype, flush, i, shapes[static_cast<std::size_t>(i)], pairing}, rng);
        run(f);
        if (::testing::Test::HasFailure()) return;  // one shape's failures are enough to read
      }
}

// Each file's cases: TEST_P(GuardPages, Sweep) { sweep_case(GetParam()); } instantiated as
// EntryPoints over all_cases(its table), named by case_name: EntryPoints/GuardPages.Sweep/<row>_<isa>.
class GuardPages : public ::testing::TestWithParam<GuardCase> {};

// One case: its row under its ISA (skipped where this CPU or build cannot run it), every storage type.
inline void sweep_case(const GuardCase& c) {
  const EntryPoint& e = *c.row;
  if (!rotary::isa_supported(c.isa)) GTEST_SKIP() << rotary::to_string(c.isa) << " is not supported here";
  const IsaScope scope(c.isa);
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  for (const DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    std::mt19937_64 rng(rotary_test::seed() + 1000 * static_cast<std::uint64_t>(e.id) +
                        7 * static_cast<std::uint64_t>(dtype) + static_cast<std::uint64_t>(c.isa));
    rotary_test::with_dtype(dtype,
                            [&](auto tag) { sweep<typename decltype(tag)::type>(e, c.isa, dtype, rng); });
    if (::testing::Test::HasFailure()) return;
  }
  if (worst_relative(false) > 0.0 || worst_relative(true) > 0.0)
    std::printf(
        "[          ] rows computed another way: max |y - y_ref| / (|x0| + |x1|) f32 %.3g, f64 %.3g\n",
        worst_relative(false), worst_relative(true));
}

// ---- Adding a header ----------------------------------------------------------------------------
// A new header's entry points go in the same way, in the file of its topic (or a new
// test_guard_pages_<topic>.cpp with its own table, TEST_P and rotary_add_test):
//   * a public method of Fixture<T> (declared above, defined in that file) and a row of the file's
//     entry_points() naming it, with an id no other row has (it then runs for every ISA, storage
//     type, flush side and shape), taking every user buffer as a Tensor<T> and every index array as a
//     guarded_array / GuardedPositions (GuardedAxisPositions for position streams);
//   * calls that rotate q (and k) rows: check_call(), which runs the call on the guarded buffers and
//     on heap twins and checks rows (verify: exact cache_rows for table reads, a CosSinRows with
//     exact = false for rows computed another way), padding, inputs and the twin, bit for bit;
//   * other results: equal to the heap twin bit for bit and to an independent reference, inputs
//     untouched (expect_untouched) — a call that merely does not fault is not enough;
//   * entry points without kernels (weights, analysis): a row with Isas::none, like convert_weights.

}  // namespace guard_pages

#endif  // ROTARY_TEST_HAVE_MMAN

#endif  // ROTARY_TESTS_KERNELS_GUARD_PAGES_HPP
