// Guard pages around every entry point that reads or writes user memory, as one table.
//
// kEntryPoints (below, "the table") has one row per entry point, or family of overloads swept
// together: its name, the shapes and pairings it meets, and a callable that runs it on guard-page
// buffers of one shape, storage type and ISA (a method of Fixture<T>). One loop sweeps the table:
// each test case is one (row, ISA) - every ISA of the registry (rotary::all_isas(): forced with
// set_max_isa for public entry points; the "kernels" row calls the registry's kernels of that ISA
// directly, detail::kernel_variants with the avx512 bf16 roundings pinned one by one), skipped where
// this CPU or build cannot run it - and sweeps f32, f64, f16, bf16 x both flush sides x the row's
// shapes x its pairings.
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
// The newer headers (multi_axis.hpp, xpos.hpp, linear_attention.hpp, gradients.hpp) are swept the
// same way, on every shape with one pairing each (alternating), and each of their calls also runs
// on ordinary heap copies of its buffers ("heap twins"): the guarded call must give the heap call's
// bits (so it computes what the headers' own tests check), besides its own checks: MultiAxisRope
// rows gathered pair by pair from the table (exact) or from an exact table (cache-free), xPos rows
// from the definition in long double, theta gradients against the formula summed in long double.
// Their position streams are guarded too (planar int32 / int64, token-major, one buffer per stream;
// the streams no pair uses point into a guard page). convert_weights.hpp has no kernels: its row
// runs once (as the scalar case) per storage type, flush side and shape.
//
// The fused prologues (fusion.hpp, kv_cache.hpp) run on their own shapes (kFusedShapes: head_dim 64,
// 128, 256 and 2, 7, 18, 34, 100, the norm kernels' register and two-pass forms). norm_rows calls
// each ISA's per-head RMSNorm kernel of the registry directly (in place and out of place, with a
// guarded weight and without) and requires the scalar kernel's bits; prologue runs rope_prologue
// with q, k, v, the norm weights, the slot mapping, both caches and their scales each in a buffer of
// exactly their extent (paged NHD and HND caches whose first and last slots are written; caches of
// T and, for f32, int8 and fp8), with and without the norms before and after RoPE, and requires,
// byte for byte, the unfused composition's result on heap copies. Both rows, like every row, run
// with the minimum work per thread lowered (SplitAlways), so their threaded calls do split.
//
// Elsewhere: zero-sized calls on pointers into a PROT_NONE page (test_edge_cases,
// EdgeZeroSize.NoAccessNoThrow) and a dense head-major axial multi-axis call (test_multi_axis,
// MultiAxisStrided.HeadMajorLayoutAndGuardPages). A caller's cos/sin table (row caller_table) sits
// in guarded buffers too; one of another element type (widened per block) is not swept here. Not
// covered: reads of rotary's own cos/sin table
// and of scratch rows (heap allocations: the ASan build catches over-reads of them).
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

namespace {

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
const std::vector<Shape>& every_head_dim() {
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
double& worst_relative(bool f64) {
  static double w[2] = {0.0, 0.0};
  return w[f64 ? 1 : 0];
}

// ---- guarded memory -----------------------------------------------------------------------------

// Where the buffers of a call live: the guarded ones under test, or ordinary heap copies of their
// initial contents. The calls of the newer headers run on both ("heap twins"), and the guarded
// call must give the heap call's bits: it then computes what the header's own tests check.
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
std::size_t extent(std::int64_t tokens, std::int64_t heads, std::ptrdiff_t ts, std::ptrdiff_t hs,
                   std::int64_t head_dim) {
  if (tokens == 0 || heads == 0) return 0;
  return static_cast<std::size_t>((tokens - 1) * ts + (heads - 1) * hs + head_dim);
}
std::size_t extent(const BatchShape& s, const BatchStrides& st) {
  if (s.batch == 0 || s.seq == 0 || s.heads == 0) return 0;
  return static_cast<std::size_t>((s.batch - 1) * st.batch + (s.seq - 1) * st.seq + (s.heads - 1) * st.head +
                                  s.head_dim);
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

// The S position streams of a multi-axis call (values[a][t]) in guarded memory, in one of four
// layouts: 0 planar int32 [S x tokens], 1 planar int64, 2 token-major int32 [tokens x S], 3 one int64
// buffer per used stream, the streams no pair uses pointing into a guard page (multi_axis.hpp
// promises never to read them). The heap twin has the same values, type and layout (planar int64
// for layout 3).
class GuardedAxisPositions {
 public:
  GuardedAxisPositions(int kind, const rotary::AxisMap& map, std::vector<std::vector<std::int64_t>> values,
                       Flush flush)
      : kind_(kind), streams_(map.streams()), values_(std::move(values)) {
    tokens_ = static_cast<std::int64_t>(values_.front().size());
    std::vector<std::int64_t> flat;  // planar, or token-major for layout 2
    for (std::int64_t i = 0; i < streams_ * tokens_; ++i)
      flat.push_back(kind_ == 2 ? (*this)(static_cast<int>(i % streams_), i / streams_)
                                : (*this)(static_cast<int>(i / tokens_), i % tokens_));
    if (kind_ == 0 || kind_ == 2) {
      g32_ = guarded_array<std::int32_t>(flat, flush);
      h32_.assign(flat.begin(), flat.end());
    } else {
      h64_ = flat;
      if (kind_ == 1) g64_ = guarded_array<std::int64_t>(flat, flush);
    }
    if (kind_ == 3)
      for (int a = 0; a < streams_; ++a)
        per_stream_.push_back(guarded_array<std::int64_t>(
            map.uses(a) ? values_[static_cast<std::size_t>(a)]
                        : std::vector<std::int64_t>{},  // data() is in the guard page
            flush));
  }
  rotary::AxisPositions get(Mem m) const {
    using rotary::AxisPositions;
    switch (kind_) {
      case 0:
        return AxisPositions(m == Mem::guarded ? g32_->data() : h32_.data(), streams_, tokens_);
      case 1:
        return AxisPositions(m == Mem::guarded ? g64_->data() : h64_.data(), streams_, tokens_);
      case 2:
        return AxisPositions::token_major(m == Mem::guarded ? g32_->data() : h32_.data(), streams_, tokens_);
      default:
        if (m == Mem::heap) return AxisPositions(h64_.data(), streams_, tokens_);
        const auto s = [this](int a) -> const std::int64_t* {
          return per_stream_[static_cast<std::size_t>(a)]->data();
        };
        if (streams_ == 3) return AxisPositions::of_streams<std::int64_t>({s(0), s(1), s(2)}, tokens_);
        return AxisPositions::of_streams<std::int64_t>({s(0), s(1), s(2), s(3)}, tokens_);
    }
  }
  std::int64_t operator()(int axis, std::int64_t t) const {
    return values_[static_cast<std::size_t>(axis)][static_cast<std::size_t>(t)];
  }
  std::vector<std::int64_t> all() const {
    std::vector<std::int64_t> v;
    for (const auto& s : values_) v.insert(v.end(), s.begin(), s.end());
    return v;
  }
  const char* kind_name() const {
    static const char* const names[] = {"planar int32", "planar int64", "token-major int32",
                                        "separate int64 streams"};
    return names[kind_];
  }

 private:
  int kind_;
  int streams_;
  std::int64_t tokens_ = 0;
  std::vector<std::vector<std::int64_t>> values_;
  std::shared_ptr<GuardedBuffer<std::int32_t>> g32_;
  std::shared_ptr<GuardedBuffer<std::int64_t>> g64_;
  std::vector<std::shared_ptr<GuardedBuffer<std::int64_t>>> per_stream_;
  std::vector<std::int32_t> h32_;
  std::vector<std::int64_t> h64_;
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
struct RowSource {
  std::function<std::vector<C<T>>(std::int64_t)> row;
  bool exact = true;
  double row_error = 0.0;  // bound on |kernel's cos/sin - these| when not exact
};

template <class T>
RowSource<T> cache_rows(const rotary::CosSinCache<C<T>>& cache) {
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
void verify(const std::string& what, const Geometry& g, Direction dir, const RowSource<T>& rows,
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
std::vector<RowJob> strided_jobs(const StridedLayout& in, const StridedLayout& out,
                                 const std::vector<std::int64_t>& key) {
  std::vector<RowJob> v;
  for (std::int64_t t = 0; t < in.tokens; ++t)
    for (std::int64_t h = 0; h < in.heads; ++h)
      v.push_back({t * in.token_stride + h * in.head_stride, t * out.token_stride + h * out.head_stride,
                   key[static_cast<std::size_t>(t)]});
  return v;
}
std::vector<RowJob> strided_jobs(const StridedLayout& in, const StridedLayout& out,
                                 const GuardedPositions& pos) {
  return strided_jobs(in, out, pos.values());
}

// Row jobs of a 4-d view; token (b, s) has position pos[b * seq + s].
std::vector<RowJob> batch_jobs(const BatchShape& sh, const BatchStrides& in, const BatchStrides& out,
                               const std::vector<std::int64_t>& pos) {
  std::vector<RowJob> v;
  for (std::int64_t b = 0; b < sh.batch; ++b)
    for (std::int64_t s = 0; s < sh.seq; ++s)
      for (std::int64_t h = 0; h < sh.heads; ++h)
        v.push_back({b * in.batch + s * in.seq + h * in.head, b * out.batch + s * out.seq + h * out.head,
                     pos[static_cast<std::size_t>(b * sh.seq + s)]});
  return v;
}

// Entry-point forms of multi_axis.hpp and xpos.hpp (their signatures mirror apply.hpp's): Eigen rows
// or raw pointers + StridedLayout, one tensor or fused q+k; checked or *_unchecked; in place or out
// of place; with a GQA key (1 head) or none (k_heads 0).
enum class Form { eigen, strided, qk_eigen, qk_strided };
struct Variant {
  Form form;
  bool unchecked;
  bool in_place;
  bool with_key;
};

std::string variant_name(const char* base, const Variant& v) {
  static const char* const forms[] = {"", "_strided", "_qk", "_qk_strided"};
  return std::string(base) + forms[static_cast<int>(v.form)] + (v.unchecked ? "_unchecked" : "") +
         (v.in_place ? " in place" : " out of place") +
         ((v.form == Form::qk_eigen || v.form == Form::qk_strided) && !v.with_key ? " no key" : "");
}

// Every form of a header whose signatures mirror apply.hpp's (multi_axis.hpp, xpos.hpp): each
// one-tensor form (Eigen rows, then strided) checked then unchecked, in place then out of place; then
// the fused q+k forms: Eigen rows in place with a key and without, out of place, and unchecked in
// place where the header has that form; strided out of place, in place without a key, and
// unchecked in place and out of place.
std::vector<Variant> every_form(bool unchecked_qk_eigen) {
  std::vector<Variant> v;
  for (const Form f : {Form::eigen, Form::strided})
    for (const bool unchecked : {false, true})
      for (const bool in_place : {true, false}) v.push_back({f, unchecked, in_place, false});
  v.push_back({Form::qk_eigen, false, true, true});
  v.push_back({Form::qk_eigen, false, true, false});
  v.push_back({Form::qk_eigen, false, false, true});
  if (unchecked_qk_eigen) v.push_back({Form::qk_eigen, true, true, true});
  v.push_back({Form::qk_strided, false, false, true});
  v.push_back({Form::qk_strided, false, true, false});
  v.push_back({Form::qk_strided, true, true, true});
  v.push_back({Form::qk_strided, true, false, true});
  return v;
}

// Rows of a tensor of tokens x heads, each row ld elements apart (what an Eigen row view describes).
StridedLayout rows_layout(std::int64_t tokens, std::int64_t heads, std::int64_t ld) {
  return {tokens, heads, heads * ld, ld};
}

// A tensor's input and output layouts for a form: Eigen forms need row views; strided forms go
// from head-major to token-major, both padded. Key layouts (1 head) are padded differently.
struct FormLayouts {
  StridedLayout qi, qo, ki, ko;
};
FormLayouts form_layouts(Form f, std::int64_t tokens, std::int64_t d, bool with_key) {
  FormLayouts l;
  if (f == Form::eigen || f == Form::qk_eigen) {
    l = {rows_layout(tokens, kHeads, d + 3), rows_layout(tokens, kHeads, d),
         rows_layout(tokens, kKeyHeads, d), rows_layout(tokens, kKeyHeads, d + 1)};
  } else {
    l = {{tokens, kHeads, d + 1, tokens * (d + 1)},
         {tokens, kHeads, kHeads * d + 2, d},
         {tokens, kKeyHeads, kKeyHeads * d + 1, d},
         {tokens, kKeyHeads, d + 2, tokens * (d + 2)}};
  }
  if (!with_key) l.ki = l.ko = {tokens, 0, 0, 0};
  return l;
}

std::size_t extent(const StridedLayout& l, std::int64_t head_dim) {
  return extent(l.tokens, l.heads, l.token_stride, l.head_stride, head_dim);
}

std::vector<std::int64_t> token_indices(std::int64_t tokens) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) v[static_cast<std::size_t>(t)] = t;
  return v;
}

// ---- convert_weights.hpp (no kernels) -----------------------------------------------------------

// The permuted rows must be P W per head (half_split -> interleaved) or P^T W (back), with P from
// reference::pairing_permutation; W is a guarded row-major or column-major map, the bias a vector.
template <class T, int Order>
void convert_guarded(Flush flush, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;
  const Eigen::Index rows = heads * head_dim;
  const Eigen::Index cols = 5;
  GuardedBuffer<T> wb(static_cast<std::size_t>(rows * cols), flush);
  GuardedBuffer<T> bb(static_cast<std::size_t>(rows), flush);
  for (Eigen::Index i = 0; i < rows * cols; ++i)
    wb.data()[i] = static_cast<T>(static_cast<float>(i % 251) - 125.0f);
  for (Eigen::Index i = 0; i < rows; ++i) bb.data()[i] = static_cast<T>(static_cast<float>(i));
  const Eigen::Map<const Matrix> w(wb.data(), rows, cols);
  const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> bias(bb.data(), rows);
  const Eigen::MatrixXd p = rotary::reference::pairing_permutation(head_dim, rotary_dim);
  const auto source_row = [&p, head_dim](Eigen::Index i, bool to_interleaved) {
    const Eigen::Index head = i / head_dim;
    const Eigen::Index a = i % head_dim;
    for (Eigen::Index b = 0; b < head_dim; ++b)
      if ((to_interleaved ? p(a, b) : p(b, a)) == 1.0) return head * head_dim + b;
    return Eigen::Index{-1};
  };
  const Matrix wi = rotary::permute_rows_half_split_to_interleaved(w, heads, head_dim, rotary_dim);
  const Matrix wh = rotary::permute_rows_interleaved_to_half_split(w, heads, head_dim, rotary_dim);
  const Matrix wc =
      rotary::convert_pairing(w, Pairing::interleaved, Pairing::interleaved, heads, head_dim, rotary_dim);
  const Eigen::Matrix<T, Eigen::Dynamic, 1> bi =
      rotary::convert_pairing(bias, Pairing::half_split, Pairing::interleaved, heads, head_dim, rotary_dim);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const Eigen::Index si = source_row(i, true);
    const Eigen::Index sh = source_row(i, false);
    ASSERT_GE(si, 0);
    ASSERT_GE(sh, 0);
    for (Eigen::Index j = 0; j < cols; ++j) {
      ASSERT_TRUE(same_bits(wi(i, j), w(si, j))) << "half_split -> interleaved row " << i;
      ASSERT_TRUE(same_bits(wh(i, j), w(sh, j))) << "interleaved -> half_split row " << i;
      ASSERT_TRUE(same_bits(wc(i, j), w(i, j))) << "identity conversion row " << i;
    }
    ASSERT_TRUE(same_bits(bi(i), bias(si))) << "bias row " << i;
  }
  // probe_convention reads every row of W_q and W_k: same verdict as on heap copies.
  const Matrix wq_copy = w;
  const rotary::ConventionReport guarded =
      rotary::probe_convention(w, w.topRows(head_dim), heads, 1, head_dim, rotary_dim);
  const rotary::ConventionReport heap =
      rotary::probe_convention(wq_copy, wq_copy.topRows(head_dim), heads, 1, head_dim, rotary_dim);
  EXPECT_EQ(guarded.score_interleaved, heap.score_interleaved);
  EXPECT_EQ(guarded.score_half_split, heap.score_half_split);
  EXPECT_TRUE(std::isfinite(guarded.score_interleaved) && std::isfinite(guarded.score_half_split));
  const rotary::ConventionReport q_only =
      rotary::probe_convention(w, Eigen::Map<const Matrix>(nullptr, 0, cols), heads, 0, head_dim, rotary_dim);
  EXPECT_TRUE(std::isfinite(q_only.score_interleaved));
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

// Guard-page buffers and everything else one run of a table row needs (its Where: ISA, storage type,
// flush side, shape, pairing). The public methods are the table's callables, one per row.
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

 public:
  // detail/kernels/registry.hpp: the kernels of this ISA, called directly (no dispatch) - every
  // kernel_variants<T>() row of the ISA that runs here: its kernel and, for avx512 bf16, each
  // rounding pinned on its own. Rows packed up to the guard page (dense token-major input; the
  // output head-major with padding, or in place), positions contiguous or in guarded int32 / int64
  // arrays. Besides verify(): the scalar kernel's bits on heap copies (test_simd's contract).
  void kernels() {
    const std::int64_t d = g_.head_dim;
    const StridedLayout il{kTokens, kHeads, kHeads * d, d};
    const StridedLayout hl{kTokens, kHeads, d + 1, kTokens * (d + 1)};
    int call = 0;
    for (const auto& v : rotary::detail::kernel_variants<T>()) {
      if (v.isa != isa_ || !v.runs) continue;
      for (const bool in_place : {false, true}) {
        const GuardedPositions pos = positions(static_cast<int>(rng_() % 3), kTokens);
        const Direction dir = dir_for(call++);
        const StridedLayout& ol = in_place ? il : hl;
        Tensor<T> in = tensor(extent(il, d));
        Tensor<T> out = tensor(in_place ? 0 : extent(ol, d));
        T* got = in_place ? in.data() : out.data();
        const std::vector<T>& before = in_place ? in.before : out.before;
        std::vector<T> want = before;  // the scalar kernel's result on heap copies
        std::vector<T> heap_in = in.before;
        rotary::detail::scalar::rotate_tokens<T>(
            kernel_args(il, in_place ? want.data() : heap_in.data(), ol, want.data(), pos.get(), dir), 0,
            kTokens);
        v.kernel(kernel_args(il, in.data(), ol, got, pos.get(), dir), 0, kTokens);
        const std::string name = "kernel " + v.name + (in_place ? " in place" : " out of place");
        verify<T>(where(name, &pos), g_, dir, cache_rows<T>(rope_.cache()), strided_jobs(il, ol, pos),
                  in.before, in.data(), before, got, in_place);
        for (std::size_t i = 0; i < want.size(); ++i)
          if (!same_bits(got[i], want[i])) {
            ADD_FAILURE() << where(name, &pos) << ": element " << i << " is "
                          << static_cast<double>(widen(got[i])) << " but the scalar kernel gave "
                          << static_cast<double>(widen(want[i])) << " " << rotary_test::seed_note();
            break;
          }
      }
    }
  }

  // apply / apply_unchecked over Eigen rows with an outer stride (padding between rows).
  void apply_eigen() {
    const std::int64_t rows = kTokens * kHeads;
    const std::int64_t d = g_.head_dim;
    for (int variant = 0; variant < 4; ++variant) {
      const std::int64_t ld_in = d + (variant % 2 == 0 ? 0 : 3);
      const std::int64_t ld_out = d + (variant % 2 == 0 ? 5 : 0);
      const GuardedPositions pos = positions(variant % 3, kTokens);
      const Direction dir = dir_for(variant);
      const bool unchecked = variant >= 2;
      const StridedLayout il{kTokens, kHeads, ld_in * kHeads, ld_in};
      const StridedLayout ol{kTokens, kHeads, ld_out * kHeads, ld_out};
      {  // in place
        Tensor<T> x = tensor(extent(kTokens, kHeads, il.token_stride, il.head_stride, d));
        Map m(x.data(), rows, d, Eigen::OuterStride<>(ld_in));
        if (unchecked) {
          rotary::unchecked::apply(rope_, m, pos.get(), kHeads, dir);
        } else {
          rotary::apply(rope_, m, pos.get(), kHeads, dir);
        }
        verify<T>(where(unchecked ? "apply_unchecked in place" : "apply in place", &pos), g_, dir,
                  cache_rows<T>(rope_.cache()), strided_jobs(il, il, pos), x.before, x.data(), x.before,
                  x.data(), true);
      }
      {  // out of place
        Tensor<T> in = tensor(extent(kTokens, kHeads, il.token_stride, il.head_stride, d));
        Tensor<T> out = tensor(extent(kTokens, kHeads, ol.token_stride, ol.head_stride, d));
        const ConstMap mi(in.data(), rows, d, Eigen::OuterStride<>(ld_in));
        Map mo(out.data(), rows, d, Eigen::OuterStride<>(ld_out));
        if (unchecked) {
          rotary::unchecked::apply(rope_, mi, mo, pos.get(), kHeads, dir);
        } else {
          rotary::apply(rope_, mi, mo, pos.get(), kHeads, dir);
        }
        verify<T>(where(unchecked ? "apply_unchecked out of place" : "apply out of place", &pos), g_, dir,
                  cache_rows<T>(rope_.cache()), strided_jobs(il, ol, pos), in.before, in.data(), out.before,
                  out.data(), false);
      }
    }
  }

  // apply_strided (both overloads) and apply_strided_unchecked; token-major and head-major layouts
  // with padding.
  void apply_strided() {
    const std::int64_t d = g_.head_dim;
    const StridedLayout token_major{kTokens, kHeads, kHeads * d + 2, d};
    const StridedLayout head_major{kTokens, kHeads, d + 1, kTokens * (d + 1)};
    for (int variant = 0; variant < 3; ++variant) {
      const GuardedPositions pos = positions((variant + 1) % 3, kTokens);
      const Direction dir = dir_for(variant + 1);
      const StridedLayout& il = variant == 1 ? token_major : head_major;
      const StridedLayout& ol = variant == 1 ? head_major : token_major;
      Tensor<T> in = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
      Tensor<T> out = tensor(extent(ol.tokens, ol.heads, ol.token_stride, ol.head_stride, d));
      if (variant == 2) {
        rotary::unchecked::apply_strided(rope_, in.data(), il, out.data(), ol, pos.get(), dir);
      } else {
        rotary::apply_strided(rope_, in.data(), il, out.data(), ol, pos.get(), dir);
      }
      verify<T>(where(variant == 2 ? "apply_strided_unchecked" : "apply_strided out of place", &pos), g_, dir,
                cache_rows<T>(rope_.cache()), strided_jobs(il, ol, pos), in.before, in.data(), out.before,
                out.data(), false);
      Tensor<T> x = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
      if (variant == 2) {
        rotary::unchecked::apply_strided(rope_, x.data(), il, x.data(), il, pos.get(), dir);
      } else {
        rotary::apply_strided(rope_, x.data(), il, pos.get(), dir);
      }
      verify<T>(where("apply_strided in place", &pos), g_, dir, cache_rows<T>(rope_.cache()),
                strided_jobs(il, il, pos), x.before, x.data(), x.before, x.data(), true);
    }
  }

  // A caller's table (table.hpp): TableRope over separate cos and sin tables, each in its own
  // guarded buffer holding exactly rows [p_min, p_max] of the call's positions (the Rope's own
  // values, so the Rope's rows are the reference): Flush::end puts the last row's sin against the
  // guard page, Flush::begin the first row's cos. Token-major and head-major layouts, out of place
  // and in place, with a thread hook.
  void caller_table() {
    using Cc = C<T>;
    const std::int64_t d = g_.head_dim;
    const std::int64_t h = g_.rotary_dim / 2;
    const StridedLayout token_major{kTokens, kHeads, kHeads * d + 2, d};
    const StridedLayout head_major{kTokens, kHeads, d + 1, kTokens * (d + 1)};
    for (int variant = 0; variant < 3; ++variant) {
      const GuardedPositions pos = positions(variant, kTokens);
      const auto [lo, hi] = std::minmax_element(pos.values().begin(), pos.values().end());
      const std::int64_t rows = *hi - *lo + 1;
      GuardedBuffer<Cc> cos(static_cast<std::size_t>(rows * h), flush_);
      GuardedBuffer<Cc> sin(static_cast<std::size_t>(rows * h), flush_);
      for (std::int64_t r = 0; r < rows; ++r) {
        const Cc* row = rope_.cache().row(*lo + r);
        std::copy(row, row + h, cos.data() + r * h);
        std::copy(row + h, row + 2 * h, sin.data() + r * h);
      }
      const rotary::TableRope<T, Cc> rope(
          d, g_.rotary_dim, g_.pairing,
          rotary::CosSinTableView<Cc>::separate(cos.data(), sin.data(), rows, h).with_first_position(*lo));
      const Direction dir = dir_for(variant);
      const StridedLayout& il = variant == 1 ? token_major : head_major;
      const StridedLayout& ol = variant == 1 ? head_major : token_major;
      Tensor<T> in = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
      Tensor<T> out = tensor(extent(ol.tokens, ol.heads, ol.token_stride, ol.head_stride, d));
      rotary::apply_strided(rope, in.data(), il, out.data(), ol, pos.get(), {dir, rotary::thread_parallel_for(2)});
      verify<T>(where("caller table out of place", &pos), g_, dir, cache_rows<T>(rope_.cache()),
                strided_jobs(il, ol, pos), in.before, in.data(), out.before, out.data(), false);
      Tensor<T> x = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
      rotary::apply_strided(rope, x.data(), il, pos.get(), dir);
      verify<T>(where("caller table in place", &pos), g_, dir, cache_rows<T>(rope_.cache()),
                strided_jobs(il, il, pos), x.before, x.data(), x.before, x.data(), true);
    }
  }

  // apply_qk over Eigen rows: in place and out of place, with a GQA key (1 head) and without key.
  void apply_qk_eigen() {
    const std::int64_t d = g_.head_dim;
    const StridedLayout ql{kTokens, kHeads, kHeads * d, d};
    const StridedLayout kl{kTokens, kKeyHeads, kKeyHeads * d, d};
    for (int variant = 0; variant < 4; ++variant) {
      const bool with_key = variant < 2;
      const GuardedPositions pos = positions(variant % 3, kTokens);
      const Direction dir = dir_for(variant);
      const std::int64_t k_heads = with_key ? kKeyHeads : 0;
      const std::int64_t k_rows = kTokens * k_heads;
      {  // in place
        Tensor<T> q = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
        Tensor<T> k = tensor(extent(kTokens, k_heads, kl.token_stride, kl.head_stride, d));
        Map mq(q.data(), kTokens * kHeads, d, Eigen::OuterStride<>(d));
        Map mk(k.data(), k_rows, d, Eigen::OuterStride<>(d));
        rotary::apply_qk(rope_, mq, mk, pos.get(), kHeads, k_heads, dir);
        const RowSource<T> rows = cache_rows<T>(rope_.cache());
        verify<T>(where("apply_qk in place q", &pos), g_, dir, rows, strided_jobs(ql, ql, pos), q.before,
                  q.data(), q.before, q.data(), true);
        if (with_key)
          verify<T>(where("apply_qk in place k", &pos), g_, dir, rows, strided_jobs(kl, kl, pos), k.before,
                    k.data(), k.before, k.data(), true);
      }
      {  // out of place
        Tensor<T> qi = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
        Tensor<T> qo = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
        Tensor<T> ki = tensor(extent(kTokens, k_heads, kl.token_stride, kl.head_stride, d));
        Tensor<T> ko = tensor(extent(kTokens, k_heads, kl.token_stride, kl.head_stride, d));
        const ConstMap mqi(qi.data(), kTokens * kHeads, d, Eigen::OuterStride<>(d));
        Map mqo(qo.data(), kTokens * kHeads, d, Eigen::OuterStride<>(d));
        const ConstMap mki(ki.data(), k_rows, d, Eigen::OuterStride<>(d));
        Map mko(ko.data(), k_rows, d, Eigen::OuterStride<>(d));
        rotary::apply_qk(rope_, mqi, mqo, mki, mko, pos.get(), kHeads, k_heads, dir);
        const RowSource<T> rows = cache_rows<T>(rope_.cache());
        verify<T>(where("apply_qk out of place q", &pos), g_, dir, rows, strided_jobs(ql, ql, pos), qi.before,
                  qi.data(), qo.before, qo.data(), false);
        if (with_key)
          verify<T>(where("apply_qk out of place k", &pos), g_, dir, rows, strided_jobs(kl, kl, pos),
                    ki.before, ki.data(), ko.before, ko.data(), false);
      }
    }
  }

  // apply_qk_strided and apply_qk_strided_unchecked; q head-major with padding, k token-major.
  void apply_qk_strided() {
    const std::int64_t d = g_.head_dim;
    const StridedLayout ql{kTokens, kHeads, d + 2, kTokens * (d + 2)};
    const StridedLayout kl{kTokens, kKeyHeads, kKeyHeads * d + 1, d};
    const StridedLayout none{kTokens, 0, 0, 0};
    for (int variant = 0; variant < 4; ++variant) {
      const bool with_key = variant != 3;
      const bool unchecked = variant == 1;
      const bool in_place = variant == 2;
      const GuardedPositions pos = positions((variant + 2) % 3, kTokens);
      const Direction dir = dir_for(variant + 1);
      const StridedLayout& kla = with_key ? kl : none;
      Tensor<T> qi = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> qo = tensor(in_place ? 0 : extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> ki = tensor(with_key ? extent(kTokens, kKeyHeads, kl.token_stride, kl.head_stride, d) : 0);
      Tensor<T> ko =
          tensor(with_key && !in_place ? extent(kTokens, kKeyHeads, kl.token_stride, kl.head_stride, d) : 0);
      T* q_out = in_place ? qi.data() : qo.data();
      T* k_out = in_place ? ki.data() : ko.data();
      if (unchecked) {
        rotary::unchecked::apply_qk_strided(rope_, qi.data(), ql, q_out, ql, ki.data(), kla, k_out, kla,
                                           pos.get(), dir);
      } else {
        rotary::apply_qk_strided(rope_, qi.data(), ql, q_out, ql, ki.data(), kla, k_out, kla, pos.get(), dir);
      }
      const std::string name = std::string(unchecked ? "apply_qk_strided_unchecked" : "apply_qk_strided") +
                               (in_place ? " in place" : " out of place") + (with_key ? "" : " no key");
      const RowSource<T> rows = cache_rows<T>(rope_.cache());
      verify<T>(where(name + " q", &pos), g_, dir, rows, strided_jobs(ql, ql, pos), qi.before, qi.data(),
                in_place ? qi.before : qo.before, q_out, in_place);
      if (with_key)
        verify<T>(where(name + " k", &pos), g_, dir, rows, strided_jobs(kl, kl, pos), ki.before, ki.data(),
                  in_place ? ki.before : ko.before, k_out, in_place);
    }
  }

  // A Rope over a cache built from a position list (CosSinCache::for_positions), read through
  // guarded int32 and int64 position arrays.
  void listed_cache() {
    const rotary::Frequencies f = rotary::compute_frequencies(spec_);
    const std::vector<std::int64_t> listed = {7, 1000003, 2147483647, 123456789012, 5};
    const rotary::Rope<T> rope(spec_, rotary::CosSinCache<C<T>>::for_positions(f, listed));
    const std::int64_t d = g_.head_dim;
    const StridedLayout l{kTokens, kHeads, kHeads * d, d};
    for (int kind = 1; kind <= 2; ++kind) {
      const GuardedPositions pos(kind,
                                 kind == 1 ? std::vector<std::int64_t>{2147483647, 7, 1000003}
                                           : std::vector<std::int64_t>{123456789012, 5, 2147483647},
                                 flush_);
      Tensor<T> x = tensor(extent(kTokens, kHeads, l.token_stride, l.head_stride, d));
      rotary::apply_strided(rope, x.data(), l, pos.get(), dir_for(kind));
      verify<T>(where("apply_strided on a for_positions cache", &pos), g_, dir_for(kind),
                cache_rows<T>(rope.cache()), strided_jobs(l, l, pos), x.before, x.data(), x.before, x.data(),
                true);
    }
  }

  // Cache-free Rope: 35 tokens cross a 32-token row block; with and without a ParallelFor.
  void on_the_fly() {
    const std::int64_t tokens = 35;
    const std::int64_t d = g_.head_dim;
    const StridedLayout l{tokens, 1, d, d};
    const rotary::Frequencies f = rotary::compute_frequencies(spec_);
    for (int kind = 0; kind < 3; ++kind) {
      const GuardedPositions pos = positions(kind, tokens, std::int64_t{1} << 40);
      const auto table = rotary::CosSinCache<C<T>>::for_positions(f, pos.values());
      RowSource<T> rows = cache_rows<T>(table);
      // Recurrence rows: in f32 1 ulp from the table on near-ties; in f64 the double recurrence
      // drifts a few ulp per step over a 32-token block (rows_on_the_fly.hpp: ~1e-14).
      rows.exact = false;
      rows.row_error = std::is_same_v<C<T>, double> ? 0x1p-45 : 0x1p-24;
      Tensor<T> in = tensor(extent(tokens, 1, d, d, d));
      Tensor<T> out = tensor(extent(tokens, 1, d, d, d));
      const rotary::ParallelFor parallel = kind == 1 ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
      rotary::apply_strided(fly_, in.data(), l, out.data(), l, pos.get(), {dir_for(kind), parallel});
      verify<T>(where("OnTheFly apply_strided", &pos), g_, dir_for(kind), rows, strided_jobs(l, l, pos),
                in.before, in.data(), out.before, out.data(), false);
      Tensor<T> x = tensor(extent(tokens, 1, d, d, d));
      Map m(x.data(), tokens, d, Eigen::OuterStride<>(d));
      rotary::apply(fly_, m, pos.get(), 1, {dir_for(kind + 1), parallel});
      verify<T>(where("OnTheFly apply in place", &pos), g_, dir_for(kind + 1), rows, strided_jobs(l, l, pos),
                x.before, x.data(), x.before, x.data(), true);
    }
  }

 private:
  // Sequence positions of a batch of `batch` sequences of `seq` tokens, and the positions the test
  // expects (memory order b * seq + t), computed here from the definitions in layouts.hpp.
  struct BatchPositions {
    SequencePositions sp;
    std::vector<std::int64_t> expected;
    std::shared_ptr<GuardedPositions> array;
    std::string name;
  };
  BatchPositions batch_positions(int mode, std::int64_t batch, std::int64_t seq) {
    const std::int64_t n = batch * seq;
    std::vector<std::int64_t> e(static_cast<std::size_t>(n));
    const int kind = mode % 4;
    switch (kind) {
      case 0: {  // one start per sequence
        std::vector<std::int64_t> starts(static_cast<std::size_t>(batch));
        for (std::int64_t b = 0; b < batch; ++b) starts[static_cast<std::size_t>(b)] = 11 * b + 3;
        for (std::int64_t i = 0; i < n; ++i) e[static_cast<std::size_t>(i)] = 11 * (i / seq) + 3 + i % seq;
        return {SequencePositions::starts(starts), e, nullptr, "starts"};
      }
      case 1:
      case 2: {  // per-token int32 / int64 arrays in guarded memory
        auto p = std::make_shared<GuardedPositions>(positions(kind, n));
        return {SequencePositions::per_token(p->get()), p->values(), p,
                kind == 1 ? "per_token int32" : "per_token int64"};
      }
      default: {  // context parallel, contiguous split: rank 1 of 3 holds tokens [seq, 2 seq) of each
                  // sequence
        for (std::int64_t i = 0; i < n; ++i) e[static_cast<std::size_t>(i)] = 20 + seq + i % seq;
        return {SequencePositions::context_parallel(rotary::ContextSplit::contiguous, 1, 3, {20}), e, nullptr,
                "context_parallel"};
      }
    }
  }

 public:
  // apply_batch: the dense-layout overload, the in-place view overload, the out-of-place view
  // overload (a layout change on the way out) and apply_batch_unchecked.
  void batch() {
    const BatchShape sh{3, kTokens, kHeads, g_.head_dim};
    int mode = 0;
    for (const Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
      const BatchStrides st = rotary::dense_strides(layout, sh);
      const Direction dir = dir_for(mode);
      {
        BatchPositions bp = batch_positions(mode++, sh.batch, sh.seq);
        Tensor<T> x = tensor(extent(sh, st));
        rotary::apply_batch(rope_, layout, x.data(), sh, bp.sp, dir);
        verify<T>(where("apply_batch " + std::string(rotary::to_string(layout)) + " " + bp.name), g_, dir,
                  cache_rows<T>(rope_.cache()), batch_jobs(sh, st, st, bp.expected), x.before, x.data(),
                  x.before, x.data(), true);
      }
      {
        BatchPositions bp = batch_positions(mode++, sh.batch, sh.seq);
        Tensor<T> x = tensor(extent(sh, st));
        rotary::apply_batch(rope_, BatchView<T>(x.data(), sh, st), bp.sp, dir);
        verify<T>(
            where("apply_batch view in place " + std::string(rotary::to_string(layout)) + " " + bp.name), g_,
            dir, cache_rows<T>(rope_.cache()), batch_jobs(sh, st, st, bp.expected), x.before, x.data(),
            x.before, x.data(), true);
      }
      for (const bool unchecked : {false, true}) {
        BatchPositions bp = batch_positions(mode++, sh.batch, sh.seq);
        // Output padded: a gap of 2 elements after every row.
        const BatchStrides ost{sh.seq * sh.heads * (g_.head_dim + 2), sh.heads * (g_.head_dim + 2),
                               g_.head_dim + 2};
        Tensor<T> in = tensor(extent(sh, st));
        Tensor<T> out = tensor(extent(sh, ost));
        const BatchView<const T> iv(in.data(), sh, st);
        const BatchView<T> ov(out.data(), sh, ost);
        if (unchecked) {
          rotary::unchecked::apply_batch(rope_, iv, ov, bp.sp, dir);
        } else {
          rotary::apply_batch(rope_, iv, ov, bp.sp, dir);
        }
        verify<T>(where(std::string(unchecked ? "apply_batch_unchecked " : "apply_batch out of place ") +
                        std::string(rotary::to_string(layout)) + " " + bp.name),
                  g_, dir, cache_rows<T>(rope_.cache()), batch_jobs(sh, st, ost, bp.expected), in.before,
                  in.data(), out.before, out.data(), false);
      }
    }
  }

  // apply_qk_batch: dense overload (with and without key), view overloads in and out of place,
  // apply_qk_batch_unchecked.
  void qk_batch() {
    const BatchShape qs{3, kTokens, kHeads, g_.head_dim};
    const BatchShape ks{3, kTokens, kKeyHeads, g_.head_dim};
    int mode = 1;
    for (const Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
      const BatchStrides qst = rotary::dense_strides(layout, qs);
      const BatchStrides kst = rotary::dense_strides(layout, ks);
      const RowSource<T> rows = cache_rows<T>(rope_.cache());
      const std::string ln(rotary::to_string(layout));
      for (const bool with_key : {true, false}) {
        BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
        const Direction dir = dir_for(mode);
        Tensor<T> q = tensor(extent(qs, qst));
        Tensor<T> k = tensor(with_key ? extent(ks, kst) : 0);
        rotary::apply_qk_batch(rope_, layout, q.data(), qs, k.data(), with_key ? kKeyHeads : 0, bp.sp, dir);
        const std::string name = "apply_qk_batch " + ln + (with_key ? " " : " no key ") + bp.name;
        verify<T>(where(name + " q"), g_, dir, rows, batch_jobs(qs, qst, qst, bp.expected), q.before,
                  q.data(), q.before, q.data(), true);
        if (with_key)
          verify<T>(where(name + " k"), g_, dir, rows, batch_jobs(ks, kst, kst, bp.expected), k.before,
                    k.data(), k.before, k.data(), true);
      }
      {
        BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
        const Direction dir = dir_for(mode);
        Tensor<T> q = tensor(extent(qs, qst));
        Tensor<T> k = tensor(extent(ks, kst));
        rotary::apply_qk_batch(rope_, BatchView<T>(q.data(), qs, qst), BatchView<T>(k.data(), ks, kst), bp.sp,
                               dir);
        verify<T>(where("apply_qk_batch view in place " + ln + " q " + bp.name), g_, dir, rows,
                  batch_jobs(qs, qst, qst, bp.expected), q.before, q.data(), q.before, q.data(), true);
        verify<T>(where("apply_qk_batch view in place " + ln + " k " + bp.name), g_, dir, rows,
                  batch_jobs(ks, kst, kst, bp.expected), k.before, k.data(), k.before, k.data(), true);
      }
      for (const bool unchecked : {false, true}) {
        BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
        const Direction dir = dir_for(mode);
        Tensor<T> qi = tensor(extent(qs, qst));
        Tensor<T> qo = tensor(extent(qs, qst));
        Tensor<T> ki = tensor(extent(ks, kst));
        Tensor<T> ko = tensor(extent(ks, kst));
        const BatchView<const T> qiv(qi.data(), qs, qst);
        const BatchView<T> qov(qo.data(), qs, qst);
        const BatchView<const T> kiv(ki.data(), ks, kst);
        const BatchView<T> kov(ko.data(), ks, kst);
        if (unchecked) {
          rotary::unchecked::apply_qk_batch(rope_, qiv, qov, kiv, kov, bp.sp, dir);
        } else {
          rotary::apply_qk_batch(rope_, qiv, qov, kiv, kov, bp.sp, dir);
        }
        const std::string name =
            std::string(unchecked ? "apply_qk_batch_unchecked " : "apply_qk_batch out of place ") + ln + " " +
            bp.name;
        verify<T>(where(name + " q"), g_, dir, rows, batch_jobs(qs, qst, qst, bp.expected), qi.before,
                  qi.data(), qo.before, qo.data(), false);
        verify<T>(where(name + " k"), g_, dir, rows, batch_jobs(ks, kst, kst, bp.expected), ki.before,
                  ki.data(), ko.before, ko.data(), false);
      }
    }
  }

  // apply_varlen and apply_qk_varlen (both overloads each) with guarded int32 and int64 cu_seqlens
  // that include an empty sequence.
  void varlen() {
    const std::vector<std::int64_t> cu = {0, 2, 2, 5};
    const std::int64_t total = 5;
    const std::int64_t d = g_.head_dim;
    const StridedLayout ql{total, kHeads, kHeads * d + 1, d};
    const StridedLayout kl{total, kKeyHeads, d, d};
    const RowSource<T> rows = cache_rows<T>(rope_.cache());
    for (int variant = 0; variant < 4; ++variant) {
      const bool i32 = variant % 2 == 0;
      const auto cu32 = guarded_array<std::int32_t>(cu, flush_);
      const auto cu64 = guarded_array<std::int64_t>(cu, flush_);
      const CuSeqlens c = i32 ? CuSeqlens(cu32->data(), 4) : CuSeqlens(cu64->data(), 4);
      // restart (each sequence from 0), or per-token positions in guarded memory.
      std::shared_ptr<GuardedPositions> arr;
      SequencePositions sp = SequencePositions::restart();
      std::vector<std::int64_t> expected = {0, 1, 0, 1, 2};
      if (variant >= 2) {
        arr = std::make_shared<GuardedPositions>(positions(variant - 1, total));
        sp = SequencePositions::per_token(arr->get());
        expected = arr->values();
      }
      const GuardedPositions pos(0, expected, flush_);  // expected values only (contiguous kind unused)
      const Direction dir = dir_for(variant);
      const std::string cn =
          std::string(i32 ? " int32" : " int64") + " cu_seqlens" + (variant >= 2 ? " per_token" : " restart");
      {
        Tensor<T> in = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
        Tensor<T> out = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
        rotary::apply_varlen(rope_, in.data(), ql, out.data(), ql, c, sp, dir);
        verify<T>(where("apply_varlen out of place" + cn), g_, dir, rows, strided_jobs(ql, ql, pos),
                  in.before, in.data(), out.before, out.data(), false);
        Tensor<T> x = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
        rotary::apply_varlen(rope_, x.data(), ql, c, sp, dir);
        verify<T>(where("apply_varlen in place" + cn), g_, dir, rows, strided_jobs(ql, ql, pos), x.before,
                  x.data(), x.before, x.data(), true);
      }
      {
        Tensor<T> qi = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
        Tensor<T> qo = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
        Tensor<T> ki = tensor(extent(total, kKeyHeads, kl.token_stride, kl.head_stride, d));
        Tensor<T> ko = tensor(extent(total, kKeyHeads, kl.token_stride, kl.head_stride, d));
        rotary::apply_qk_varlen(rope_, qi.data(), ql, qo.data(), ql, ki.data(), kl, ko.data(), kl, c, sp,
                                dir);
        verify<T>(where("apply_qk_varlen out of place q" + cn), g_, dir, rows, strided_jobs(ql, ql, pos),
                  qi.before, qi.data(), qo.before, qo.data(), false);
        verify<T>(where("apply_qk_varlen out of place k" + cn), g_, dir, rows, strided_jobs(kl, kl, pos),
                  ki.before, ki.data(), ko.before, ko.data(), false);
        Tensor<T> q = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
        Tensor<T> k = tensor(extent(total, kKeyHeads, kl.token_stride, kl.head_stride, d));
        rotary::apply_qk_varlen(rope_, q.data(), ql, k.data(), kl, c, sp, dir);
        verify<T>(where("apply_qk_varlen in place q" + cn), g_, dir, rows, strided_jobs(ql, ql, pos),
                  q.before, q.data(), q.before, q.data(), true);
        verify<T>(where("apply_qk_varlen in place k" + cn), g_, dir, rows, strided_jobs(kl, kl, pos),
                  k.before, k.data(), k.before, k.data(), true);
      }
    }
  }

  // tensor_map.hpp: apply_batch / apply_qk_batch over TensorMap4, apply_varlen over TensorMap3.
  void tensor_maps() {
    const BatchShape qs{3, kTokens, kHeads, g_.head_dim};
    const BatchShape ks{3, kTokens, kKeyHeads, g_.head_dim};
    const RowSource<T> rows = cache_rows<T>(rope_.cache());
    int mode = 2;
    for (const Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
      const auto dims = [layout](const BatchShape& s) -> Eigen::array<Eigen::Index, 4> {
        switch (layout) {
          case Layout::bhsd:
            return {s.batch, s.heads, s.seq, s.head_dim};
          case Layout::sbhd:
            return {s.seq, s.batch, s.heads, s.head_dim};
          default:
            return {s.batch, s.seq, s.heads, s.head_dim};
        }
      };
      const BatchStrides qst = rotary::dense_strides(layout, qs);
      const BatchStrides kst = rotary::dense_strides(layout, ks);
      const std::string ln(rotary::to_string(layout));
      {
        BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
        Tensor<T> x = tensor(extent(qs, qst));
        rotary::apply_batch(rope_, layout, rotary::TensorMap4<T>(x.data(), dims(qs)), bp.sp, dir_for(mode));
        verify<T>(where("apply_batch(TensorMap4) " + ln + " " + bp.name), g_, dir_for(mode), rows,
                  batch_jobs(qs, qst, qst, bp.expected), x.before, x.data(), x.before, x.data(), true);
      }
      {
        BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
        Tensor<T> q = tensor(extent(qs, qst));
        Tensor<T> k = tensor(extent(ks, kst));
        rotary::apply_qk_batch(rope_, layout, rotary::TensorMap4<T>(q.data(), dims(qs)),
                               rotary::TensorMap4<T>(k.data(), dims(ks)), bp.sp, dir_for(mode));
        verify<T>(where("apply_qk_batch(TensorMap4) " + ln + " q " + bp.name), g_, dir_for(mode), rows,
                  batch_jobs(qs, qst, qst, bp.expected), q.before, q.data(), q.before, q.data(), true);
        verify<T>(where("apply_qk_batch(TensorMap4) " + ln + " k " + bp.name), g_, dir_for(mode), rows,
                  batch_jobs(ks, kst, kst, bp.expected), k.before, k.data(), k.before, k.data(), true);
      }
    }
    const std::vector<std::int64_t> cu = {0, 3, 3, 4};
    const auto cu32 = guarded_array<std::int32_t>(cu, flush_);
    const std::int64_t total = 4;
    const StridedLayout l{total, kHeads, kHeads * g_.head_dim, g_.head_dim};
    Tensor<T> x = tensor(extent(total, kHeads, l.token_stride, l.head_stride, g_.head_dim));
    rotary::apply_varlen(rope_, rotary::TensorMap3<T>(x.data(), total, kHeads, g_.head_dim),
                         CuSeqlens(cu32->data(), 4), SequencePositions::start(40), Direction::inverse);
    const GuardedPositions pos(0, {40, 41, 42, 40}, flush_);
    verify<T>(where("apply_varlen(TensorMap3)"), g_, Direction::inverse, rows, strided_jobs(l, l, pos),
              x.before, x.data(), x.before, x.data(), true);
  }

  // rerotate.hpp: shift_keys (one delta, per-token deltas), their strided forms, rerotate_keys and
  // rerotate_keys_strided.
  void rerotate() {
    const std::int64_t d = g_.head_dim;
    const std::int64_t rows_n = kTokens * kHeads;
    const StridedLayout dense{kTokens, kHeads, kHeads * d, d};
    const StridedLayout padded{kTokens, kHeads, d + 3, kTokens * (d + 3)};
    const rotary::Frequencies fa = rotary::compute_frequencies(spec_);
    // The rows below are double values rounded once to the compute type: half an ulp, plus the
    // double composition for the change of frequencies (a few 1e-16).
    const double eps = std::is_same_v<C<T>, double> ? 0x1p-50 : 0x1p-24;
    // Rows of a rotation by delta * theta (any sign), from a double table at |delta|.
    const auto shift_rows = [&fa, eps]() {
      return RowSource<T>{
          [&fa](std::int64_t delta) {
            const auto t = rotary::CosSinCache<double>::for_positions(fa, {delta < 0 ? -delta : delta});
            const double* r = t.row(delta < 0 ? -delta : delta);
            const std::int64_t h = t.pairs();
            std::vector<C<T>> v(static_cast<std::size_t>(2 * h));
            for (std::int64_t j = 0; j < h; ++j) {
              v[static_cast<std::size_t>(j)] = static_cast<C<T>>(r[j]);
              v[static_cast<std::size_t>(h + j)] = static_cast<C<T>>(delta < 0 ? -r[h + j] : r[h + j]);
            }
            return v;
          },
          false, 4.0 * eps};
    };
    {  // one delta for every token, Eigen rows and strided
      const std::int64_t delta = -1234567;
      const GuardedPositions same(0, std::vector<std::int64_t>(kTokens, delta), flush_);
      Tensor<T> x = tensor(extent(kTokens, kHeads, dense.token_stride, dense.head_stride, d));
      Map m(x.data(), rows_n, d, Eigen::OuterStride<>(d));
      rotary::shift_keys(rope_, m, delta, kHeads);
      verify<T>(where("shift_keys(delta)"), g_, Direction::forward, shift_rows(),
                strided_jobs(dense, dense, same), x.before, x.data(), x.before, x.data(), true);
      Tensor<T> y = tensor(extent(kTokens, kHeads, padded.token_stride, padded.head_stride, d));
      rotary::shift_keys_strided(rope_, y.data(), padded, delta, rotary::thread_parallel_for(2));
      verify<T>(where("shift_keys_strided(delta)"), g_, Direction::forward, shift_rows(),
                strided_jobs(padded, padded, same), y.before, y.data(), y.before, y.data(), true);
    }
    for (int kind = 1; kind <= 2; ++kind) {  // per-token deltas in guarded int32 / int64 arrays
      const GuardedPositions deltas(kind, {-5, 77, kind == 1 ? -2147483647 : std::int64_t{1} << 45}, flush_);
      Tensor<T> x = tensor(extent(kTokens, kHeads, dense.token_stride, dense.head_stride, d));
      Map m(x.data(), rows_n, d, Eigen::OuterStride<>(d));
      rotary::shift_keys(rope_, m, deltas.get(), kHeads);
      verify<T>(where("shift_keys(deltas)", &deltas), g_, Direction::forward, shift_rows(),
                strided_jobs(dense, dense, deltas), x.before, x.data(), x.before, x.data(), true);
      Tensor<T> y = tensor(extent(kTokens, kHeads, padded.token_stride, padded.head_stride, d));
      rotary::shift_keys_strided(rope_, y.data(), padded, deltas.get());
      verify<T>(where("shift_keys_strided(deltas)", &deltas), g_, Direction::forward, shift_rows(),
                strided_jobs(padded, padded, deltas), y.before, y.data(), y.before, y.data(), true);
    }
    // From the spec's base to another base (both without attention factor): the rotation by
    // m * (thetaB - thetaA), from double tables of both.
    rotary::RotarySpec other = spec_;
    other.base = 500000.0;
    const rotary::Rope<T> to(other, rotary::OnTheFly{});
    const rotary::Frequencies fb = rotary::compute_frequencies(other);
    const RowSource<T> change{
        [&fa, &fb](std::int64_t m) {
          const auto ta = rotary::CosSinCache<double>::for_positions(fa, {m});
          const auto tb = rotary::CosSinCache<double>::for_positions(fb, {m});
          const double* a = ta.row(m);
          const double* b = tb.row(m);
          const std::int64_t h = ta.pairs();
          std::vector<C<T>> v(static_cast<std::size_t>(2 * h));
          for (std::int64_t j = 0; j < h; ++j) {
            v[static_cast<std::size_t>(j)] = static_cast<C<T>>(b[j] * a[j] + b[h + j] * a[h + j]);
            v[static_cast<std::size_t>(h + j)] = static_cast<C<T>>(b[h + j] * a[j] - b[j] * a[h + j]);
          }
          return v;
        },
        false, 4.0 * eps};
    for (int kind = 0; kind < 3; ++kind) {
      const GuardedPositions pos = positions(kind, kTokens, 1 << 20);
      Tensor<T> x = tensor(extent(kTokens, kHeads, dense.token_stride, dense.head_stride, d));
      Map m(x.data(), rows_n, d, Eigen::OuterStride<>(d));
      rotary::rerotate_keys(rope_, to, m, pos.get(), kHeads);
      verify<T>(where("rerotate_keys", &pos), g_, Direction::forward, change, strided_jobs(dense, dense, pos),
                x.before, x.data(), x.before, x.data(), true);
      Tensor<T> y = tensor(extent(kTokens, kHeads, padded.token_stride, padded.head_stride, d));
      rotary::rerotate_keys_strided(rope_, to, y.data(), padded, pos.get());
      verify<T>(where("rerotate_keys_strided", &pos), g_, Direction::forward, change,
                strided_jobs(padded, padded, pos), y.before, y.data(), y.before, y.data(), true);
    }
  }

 private:
  // One call on q rows (and k rows when l.ki.heads > 0) in the layouts l: makes the guarded buffers,
  // runs call(mem, q_in, q_out, k_in, k_out) on them and then on their heap twins, and checks each
  // output against its rows (verify: rotation, pass-through, padding, untouched input) and against
  // the heap twin, bit for bit. In place: the out pointers are the in pointers, l.qo/l.ko unused.
  template <class Call>
  void check_call(const std::string& name, Direction dir, const std::vector<std::int64_t>& keys,
                  const RowSource<T>& q_rows, const RowSource<T>& k_rows, const FormLayouts& l, bool in_place,
                  const Call& call) {
    const std::int64_t d = g_.head_dim;
    const bool with_key = l.ki.heads > 0;
    // Absent buffers (no key, in place) are null: a mapping per call is what the sweep's time goes to.
    const auto make = [this, d](bool needed, const StridedLayout& sl) {
      return needed ? std::make_unique<Tensor<T>>(extent(sl, d), flush_, rng_) : nullptr;
    };
    const auto qi = make(true, l.qi);
    const auto qo = make(!in_place, l.qo);
    const auto ki = make(with_key, l.ki);
    const auto ko = make(with_key && !in_place, l.ko);
    Tensor<T>* q_out = in_place ? qi.get() : qo.get();
    Tensor<T>* k_out = in_place ? ki.get() : ko.get();
    const auto at = [](Tensor<T>* t, Mem m) { return t != nullptr ? t->at(m) : nullptr; };
    for (const Mem m : {Mem::guarded, Mem::heap})
      call(m, qi->at(m), q_out->at(m), at(ki.get(), m), at(k_out, m));
    const StridedLayout& qol = in_place ? l.qi : l.qo;
    const StridedLayout& kol = in_place ? l.ki : l.ko;
    verify<T>(where(name + " q"), g_, dir, q_rows, strided_jobs(l.qi, qol, keys), qi->before, qi->data(),
              q_out->before, q_out->data(), in_place);
    expect_same_as_heap(where(name + " q"), *q_out);
    if (!with_key) return;
    verify<T>(where(name + " k"), g_, dir, k_rows, strided_jobs(l.ki, kol, keys), ki->before, ki->data(),
              k_out->before, k_out->data(), in_place);
    expect_same_as_heap(where(name + " k"), *k_out);
  }

  // Position streams of a multi-axis call: each a random walk of +1 steps, repeats and jumps (the
  // three row modes of the cache-free fill) in [0, limit).
  std::vector<std::vector<std::int64_t>> axis_streams(int streams, std::int64_t tokens, std::int64_t limit) {
    std::uniform_int_distribution<std::int64_t> anywhere(0, limit - 1);
    std::vector<std::vector<std::int64_t>> v(static_cast<std::size_t>(streams));
    for (auto& s : v) {
      s.push_back(anywhere(rng_));
      for (std::int64_t t = 1; t < tokens; ++t) {
        const std::uint64_t move = rng_() % 4;  // 0, 1: step; 2: repeat; 3: jump
        const std::int64_t next = move == 3 ? anywhere(rng_) : s.back() + (move < 2 ? 1 : 0);
        s.push_back(next < limit ? next : 0);
      }
    }
    return v;
  }

 public:
  // multi_axis.hpp: every entry point (Variant forms), over table and cache-free MultiAxisRopes of
  // three maps: M-RoPE sections (Qwen2-VL; a section is empty when rotary_dim/2 = 2), interleaved
  // M-RoPE (Qwen3-VL) and a scattered 4-stream map whose stream 2 drives no pair. Calls rotate
  // through the maps and the four position layouts. Table rows: each pair's entry of the table row
  // of its own axis' position, gathered here, exact. Cache-free rows: the same gather from an exact
  // table of the same frequencies, within the cache-free bound of on_the_fly().
  void multi_axis() {
    const std::int64_t h = g_.rotary_dim / 2;
    std::vector<std::uint8_t> scattered(static_cast<std::size_t>(h));
    for (std::int64_t j = 0; j < h; ++j) {
      static const std::uint8_t axes[] = {3, 0, 1, 1, 3};
      scattered[static_cast<std::size_t>(j)] = axes[(j * 3 + j / 5) % 5];
    }
    const rotary::AxisMap maps[] = {
        rotary::mrope_axis_map(g_.rotary_dim, {(h + 2) / 3, (h + 1) / 3, h / 3}),
        rotary::interleaved_mrope_axis_map(g_.rotary_dim, {h - 2 * (h / 3), h / 3, h / 3}),
        rotary::AxisMap(scattered, 4)};
    static const char* const map_names[] = {"mrope", "interleaved mrope", "scattered"};
    const rotary::Frequencies f = rotary::compute_frequencies(spec_);
    static const std::vector<Variant> table_calls = every_form(false);  // no unchecked Eigen q+k form
    // Cache-free: 35 tokens cross a 32-token row block; threads split them mid-block.
    static const Variant fly_calls[] = {{Form::strided, false, false, false},
                                        {Form::eigen, false, true, false},
                                        {Form::qk_strided, false, false, true}};
    const int n_table = static_cast<int>(table_calls.size());
    for (int i = 0; i < n_table + static_cast<int>(std::size(fly_calls)); ++i) {
      const bool fly = i >= n_table;
      const Variant& v = fly ? fly_calls[i - n_table] : table_calls[static_cast<std::size_t>(i)];
      const rotary::AxisMap& map = maps[i % 3];
      const rotary::MultiAxisRope<T> mrope(fly ? fly_ : rope_, map);
      const std::int64_t tokens = fly ? 35 : kTokens;
      const GuardedAxisPositions pos(
          i % 4, map, axis_streams(map.streams(), tokens, fly ? std::int64_t{1} << 30 : kCachePositions),
          flush_);
      std::unique_ptr<rotary::CosSinCache<C<T>>> exact;
      if (fly)
        exact = std::make_unique<rotary::CosSinCache<C<T>>>(
            rotary::CosSinCache<C<T>>::for_positions(f, pos.all()));
      const rotary::CosSinCache<C<T>>& table = fly ? *exact : rope_.cache();
      RowSource<T> rows{[&table, &pos, &map, h](std::int64_t t) {
                          std::vector<C<T>> r(static_cast<std::size_t>(2 * h));
                          for (std::int64_t j = 0; j < h; ++j) {
                            const C<T>* src = table.row(pos(map[j], t));
                            r[static_cast<std::size_t>(j)] = src[j];
                            r[static_cast<std::size_t>(h + j)] = src[h + j];
                          }
                          return r;
                        },
                        !fly, std::is_same_v<C<T>, double> ? 0x1p-45 : 0x1p-24};
      const Direction dir = dir_for(i);
      const rotary::ParallelFor parallel =
          fly && i % 2 == 0 ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
      const FormLayouts l = form_layouts(v.form, tokens, g_.head_dim, v.with_key);
      const std::string name =
          variant_name(fly ? "MultiAxisRope(OnTheFly) apply" : "MultiAxisRope apply", v) + " (" +
          map_names[i % 3] + " map, " + pos.kind_name() + " positions)";
      check_call(name, dir, token_indices(tokens), rows, rows, l, v.in_place,
                 [&](Mem m, T* qi, T* qo, T* ki, T* ko) {
                   multi_axis_call(mrope, v, l, qi, qo, ki, ko, pos.get(m), dir, parallel);
                 });
    }
  }

 private:
  void multi_axis_call(const rotary::MultiAxisRope<T>& r, const Variant& v, const FormLayouts& l, T* qi,
                       T* qo, T* ki, T* ko, const rotary::AxisPositions& p, Direction dir,
                       const rotary::ParallelFor& parallel) const {
    switch (v.form) {
      case Form::eigen: {
        Map in = row_map(qi, l.qi);
        if (v.in_place) {
          if (v.unchecked) {
            rotary::unchecked::apply(r, in, p, kHeads, {dir, parallel});
          } else {
            rotary::apply(r, in, p, kHeads, {dir, parallel});
          }
        } else {
          Map out = row_map(qo, l.qo);
          if (v.unchecked) {
            rotary::unchecked::apply(r, in, out, p, kHeads, {dir, parallel});
          } else {
            rotary::apply(r, in, out, p, kHeads, {dir, parallel});
          }
        }
        break;
      }
      case Form::strided:
        if (v.unchecked) {
          rotary::unchecked::apply_strided(r, qi, l.qi, qo, v.in_place ? l.qi : l.qo, p, {dir, parallel});
        } else if (v.in_place) {
          rotary::apply_strided(r, qi, l.qi, p, {dir, parallel});
        } else {
          rotary::apply_strided(r, qi, l.qi, qo, l.qo, p, {dir, parallel});
        }
        break;
      case Form::qk_eigen: {  // no unchecked Eigen form for q+k
        Map q = row_map(qi, l.qi);
        Map k = row_map(ki, l.ki);
        const std::int64_t k_heads = l.ki.heads;
        if (v.in_place) {
          rotary::apply_qk(r, q, k, p, kHeads, k_heads, {dir, parallel});
        } else {
          Map q_out = row_map(qo, l.qo);
          Map k_out = row_map(ko, l.ko);
          rotary::apply_qk(r, q, q_out, k, k_out, p, kHeads, k_heads, {dir, parallel});
        }
        break;
      }
      default: {
        const StridedLayout& qol = v.in_place ? l.qi : l.qo;
        const StridedLayout& kol = v.in_place ? l.ki : l.ko;
        if (v.unchecked) {
          rotary::unchecked::apply_qk_strided(r, qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
        } else {
          rotary::apply_qk_strided(r, qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
        }
        break;
      }
    }
  }

  // xPos rows of one role, direction and centre from the definition (xpos.hpp's header):
  // cos/sin(p theta_j) * zeta_j^(s (p - c)/B), zeta_j = (2j/d + gamma)/(1 + gamma), s = +1 for forward
  // queries and inverse keys, else -1 (attention factor 1), formed in long double for f64 and in
  // double otherwise and rounded once to the compute type. The library's rows are within about one
  // ulp of the compute type, ours half an ulp; both scale with the factor (< 2 here: |p - c| < 300,
  // zeta_0^(-300/512) = 1.9), and so do the kernel's two roundings of |x0| + |x1|: 16 ulp of the
  // compute type at magnitude 1 bound the row and output differences together.
  RowSource<T> xpos_rows(const rotary::XPos<T>& xp, bool query, Direction dir, double center) const {
    using R = std::conditional_t<std::is_same_v<C<T>, double>, long double, double>;
    const std::int64_t h = xp.pairs();
    const auto d = static_cast<R>(xp.rotary_dim());
    const auto gamma = static_cast<R>(xp.gamma());
    std::vector<R> log2_zeta(static_cast<std::size_t>(h));
    for (std::int64_t j = 0; j < h; ++j)
      log2_zeta[static_cast<std::size_t>(j)] =
          std::log2((2 * static_cast<R>(j) + gamma * d) / (d * (1 + gamma)));
    const R sign = query == (dir == Direction::forward) ? 1 : -1;
    const R scale_base = static_cast<R>(xp.scale_base());
    const std::vector<double>& theta = xp.frequencies().theta;
    return {[log2_zeta, sign, center, scale_base, &theta, h](std::int64_t p) {
              const R exponent = sign * (static_cast<R>(p) - static_cast<R>(center)) / scale_base;
              std::vector<C<T>> r(static_cast<std::size_t>(2 * h));
              for (std::int64_t j = 0; j < h; ++j) {
                const auto u = static_cast<std::size_t>(j);
                const R factor = std::exp2(log2_zeta[u] * exponent);
                const R angle = static_cast<R>(p) * static_cast<R>(theta[u]);  // exact in long double
                r[u] = static_cast<C<T>>(std::cos(angle) * factor);
                r[static_cast<std::size_t>(h + j)] = static_cast<C<T>>(std::sin(angle) * factor);
              }
              return r;
            },
            false, std::is_same_v<C<T>, double> ? 16 * 0x1p-53 : 16 * 0x1p-24};
  }

 public:
  // xpos.hpp: every member of XPos<T> (apply_q / apply_k / apply_qk, their _strided and _unchecked
  // forms, in and out of place), contiguous / int32 / int64 guarded positions, centres 0, 100.5 and
  // -7.25; the last two calls take 35 tokens over two threads (blocks anchored mid-range).
  void xpos() {
    const rotary::XPos<T> xp(spec_);
    static const std::vector<Variant> calls = [] {
      std::vector<Variant> v = every_form(true);
      v.push_back({Form::qk_strided, false, false, true});  // these two: 35 tokens over two threads
      v.push_back({Form::eigen, false, true, false});
      return v;
    }();
    const int n_calls = static_cast<int>(calls.size());
    static const double centers[] = {0.0, 100.5, -7.25};
    for (int i = 0; i < n_calls; ++i) {
      const Variant& v = calls[static_cast<std::size_t>(i)];
      const bool many = i >= n_calls - 2;
      const std::int64_t tokens = many ? 35 : kTokens;
      const GuardedPositions pos = positions(i % 3, tokens);
      const double center = centers[(i / 3) % 3];
      const Direction dir = dir_for(i / 2);
      // One-tensor forms: queries or keys, swapped from one shape of this pairing to the next.
      const bool single = v.form == Form::eigen || v.form == Form::strided;
      const bool query = !single || (i + (flip_ ? 1 : 0)) % 2 == 0;
      const rotary::ParallelFor parallel = many ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
      const FormLayouts l = form_layouts(v.form, tokens, g_.head_dim, v.with_key);
      std::ostringstream name;
      name << variant_name(single ? (query ? "XPos::apply_q" : "XPos::apply_k") : "XPos::apply", v) << " ("
           << pos.kind_name() << " positions, center " << center << ")";
      check_call(name.str(), dir, pos.values(), xpos_rows(xp, query, dir, center),
                 xpos_rows(xp, false, dir, center), l, v.in_place, [&](Mem m, T* qi, T* qo, T* ki, T* ko) {
                   xpos_call(xp, v, query, l, qi, qo, ki, ko, pos.get(m), center, dir, parallel);
                 });
    }
  }

 private:
  void xpos_call(const rotary::XPos<T>& xp, const Variant& v, bool query, const FormLayouts& l, T* qi, T* qo,
                 T* ki, T* ko, const Positions& p, double c, Direction dir,
                 const rotary::ParallelFor& parallel) const {
    switch (v.form) {
      case Form::eigen: {
        Map in = row_map(qi, l.qi);
        if (v.in_place) {
          if (v.unchecked) {
            query ? rotary::unchecked::apply(xp.queries(c), in, p, kHeads, {dir, parallel})
                  : rotary::unchecked::apply(xp.keys(c), in, p, kHeads, {dir, parallel});
          } else {
            query ? rotary::apply(xp.queries(c), in, p, kHeads, {dir, parallel}) : rotary::apply(xp.keys(c), in, p, kHeads, {dir, parallel});
          }
        } else {
          Map out = row_map(qo, l.qo);
          if (v.unchecked) {
            query ? rotary::unchecked::apply(xp.queries(c), in, out, p, kHeads, {dir, parallel})
                  : rotary::unchecked::apply(xp.keys(c), in, out, p, kHeads, {dir, parallel});
          } else {
            query ? rotary::apply(xp.queries(c), in, out, p, kHeads, {dir, parallel})
                  : rotary::apply(xp.keys(c), in, out, p, kHeads, {dir, parallel});
          }
        }
        break;
      }
      case Form::strided: {
        const StridedLayout& ol = v.in_place ? l.qi : l.qo;
        if (v.unchecked) {  // the unchecked forms take in and out (in place: the same buffer)
          query ? rotary::unchecked::apply_strided(xp.queries(c), qi, l.qi, qo, ol, p, {dir, parallel})
                : rotary::unchecked::apply_strided(xp.keys(c), qi, l.qi, qo, ol, p, {dir, parallel});
        } else if (v.in_place) {
          query ? rotary::apply_strided(xp.queries(c), qi, l.qi, p, {dir, parallel})
                : rotary::apply_strided(xp.keys(c), qi, l.qi, p, {dir, parallel});
        } else {
          query ? rotary::apply_strided(xp.queries(c), qi, l.qi, qo, ol, p, {dir, parallel})
                : rotary::apply_strided(xp.keys(c), qi, l.qi, qo, ol, p, {dir, parallel});
        }
        break;
      }
      case Form::qk_eigen: {
        Map q = row_map(qi, l.qi);
        Map k = row_map(ki, l.ki);
        const std::int64_t k_heads = l.ki.heads;
        if (v.in_place) {
          if (v.unchecked) {
            rotary::unchecked::apply_qk(xp.queries(c), q, k, p, kHeads, k_heads, {dir, parallel});
          } else {
            rotary::apply_qk(xp.queries(c), q, k, p, kHeads, k_heads, {dir, parallel});
          }
        } else {  // no unchecked out-of-place Eigen form
          Map q_out = row_map(qo, l.qo);
          Map k_out = row_map(ko, l.ko);
          rotary::apply_qk(xp.queries(c), q, q_out, k, k_out, p, kHeads, k_heads, {dir, parallel});
        }
        break;
      }
      default: {
        const StridedLayout& qol = v.in_place ? l.qi : l.qo;
        const StridedLayout& kol = v.in_place ? l.ki : l.ko;
        if (v.unchecked) {
          rotary::unchecked::apply_qk_strided(xp.queries(c), qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
        } else {
          rotary::apply_qk_strided(xp.queries(c), qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
        }
        break;
      }
    }
  }

 public:
  // linear_attention.hpp (float and double only): self and cross attention, causal and not, default
  // and explicit feature maps, over guarded q, k, v row views with padding and guarded positions. No
  // output buffer is the caller's (the result is a new matrix): the result must equal the heap
  // twin's bit for bit, and q, k, v stay untouched.
  void linear_attention() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const std::int64_t d = g_.head_dim;
      const std::int64_t dv = 5;
      for (int variant = 0; variant < 4; ++variant) {
        const bool cross = variant >= 2;
        rotary::LinearAttentionOptions options;
        options.causal = variant % 2 == 1;
        const std::int64_t nk = 5;
        const std::int64_t nq = cross && !options.causal ? 3 : nk;  // causal needs nq == nk
        const GuardedPositions qpos = positions(variant % 3, nq);
        const GuardedPositions kpos = positions((variant + 1) % 3, nk);
        Tensor<T> q = tensor(extent(nq, 1, d + 1, 0, d));
        Tensor<T> k = tensor(extent(nk, 1, d, 0, d));
        Tensor<T> v = tensor(extent(nk, 1, dv + 2, 0, dv));
        rotary::RowMatrix<T> out[2];
        for (const Mem m : {Mem::guarded, Mem::heap}) {
          const ConstMap qm(q.at(m), nq, d, Eigen::OuterStride<>(d + 1));
          const ConstMap km(k.at(m), nk, d, Eigen::OuterStride<>(d));
          const ConstMap vm(v.at(m), nk, dv, Eigen::OuterStride<>(dv + 2));
          rotary::RowMatrix<T>& o = out[m == Mem::guarded ? 0 : 1];
          if (!cross) {
            o = variant == 0
                    ? rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), options)
                    : rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), options, rotary::Relu{});
          } else {
            o = variant == 2
                    ? rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), kpos.get(m), options)
                    : rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), kpos.get(m), options,
                                                    rotary::Relu{}, rotary::EluPlusOne{});
          }
        }
        const std::string name = where(std::string("rope_linear_attention ") + (cross ? "cross" : "self") +
                                           (options.causal ? " causal" : ""),
                                       &qpos);
        ASSERT_EQ(out[0].rows(), nq) << name;
        ASSERT_EQ(out[0].cols(), dv) << name;
        ASSERT_TRUE(out[0].allFinite()) << name;
        for (Eigen::Index r = 0; r < nq; ++r)
          for (Eigen::Index c = 0; c < dv; ++c)
            ASSERT_TRUE(same_bits(out[0](r, c), out[1](r, c)))
                << name << ": out(" << r << ", " << c << ") = " << out[0](r, c) << " but the heap twin gave "
                << out[1](r, c) << " " << rotary_test::seed_note();
        expect_untouched(name + " q", q);
        expect_untouched(name + " k", k);
        expect_untouched(name + " v", v);
      }
    }
  }

  // gradients.hpp. theta_gradient, accumulate_theta_gradient, theta_gradient_qk (GQA key, no key)
  // and accumulate_theta_gradient_strided read y and dy from guarded views (Eigen rows with padding,
  // or head-major / token-major layouts) with positions of either sign: the gradient must equal the
  // heap twin's bit for bit and the sum of gradients.hpp's formula taken here in long double within
  // its rounding bound, and y, dy stay untouched. input_gradient (both forms) is the rotation in the
  // opposite direction: check_call with the cache's rows.
  void gradients() {
    const std::int64_t d = g_.head_dim;
    const std::int64_t pairs = g_.rotary_dim / 2;
    const auto signed_positions = [this](int kind, std::int64_t tokens) {
      if (kind == 0) return GuardedPositions::contiguous(-5, tokens);
      std::uniform_int_distribution<std::int64_t> any(-3000, 3000);
      std::vector<std::int64_t> v(static_cast<std::size_t>(tokens));
      for (auto& p : v) p = any(rng_);
      return GuardedPositions(kind, std::move(v), flush_);
    };
    for (int variant = 0; variant < 5; ++variant) {
      const GuardedPositions pos = signed_positions((variant + 1) % 3, kTokens);
      const Direction dir = dir_for(variant);
      const bool qk = variant == 2 || variant == 3;
      const std::int64_t k_heads = variant == 2 ? kKeyHeads : 0;
      // variant 4 is the strided form: y head-major, dy token-major, both padded.
      const StridedLayout yl = variant == 4 ? StridedLayout{kTokens, kHeads, d + 2, kTokens * (d + 2)}
                                            : rows_layout(kTokens, kHeads, d + 2);
      const StridedLayout dl =
          variant == 4 ? StridedLayout{kTokens, kHeads, kHeads * d + 1, d} : rows_layout(kTokens, kHeads, d);
      const StridedLayout kl = rows_layout(kTokens, k_heads, d + 1);
      Tensor<T> y = tensor(extent(yl, d));
      Tensor<T> dy = tensor(extent(dl, d));
      std::unique_ptr<Tensor<T>> ky;
      std::unique_ptr<Tensor<T>> kdy;
      if (k_heads > 0) {
        ky = std::make_unique<Tensor<T>>(extent(kl, d), flush_, rng_);
        kdy = std::make_unique<Tensor<T>>(extent(kl, d), flush_, rng_);
      }
      const auto at = [](const std::unique_ptr<Tensor<T>>& t, Mem m) { return t ? t->at(m) : nullptr; };
      std::vector<double> start(static_cast<std::size_t>(pairs));
      for (std::int64_t j = 0; j < pairs; ++j)
        start[static_cast<std::size_t>(j)] = 0.25 * static_cast<double>(j) - 1.0;
      const bool accumulates = variant == 1 || variant == 4;
      std::vector<double> grad[2];
      for (const Mem m : {Mem::guarded, Mem::heap}) {
        std::vector<double>& gr = grad[m == Mem::guarded ? 0 : 1];
        const auto rows = [d](const T* x, const StridedLayout& l) {
          return ConstMap(x, l.tokens * l.heads, d, Eigen::OuterStride<>(l.head_stride));
        };
        if (variant == 0) {
          gr = rotary::theta_gradient(spec_, rows(y.at(m), yl), rows(dy.at(m), dl), pos.get(m), kHeads, dir);
        } else if (variant == 1) {
          gr = start;
          rotary::accumulate_theta_gradient(spec_, rows(y.at(m), yl), rows(dy.at(m), dl), pos.get(m), kHeads,
                                            gr, dir);
        } else if (qk) {
          gr = rotary::theta_gradient_qk(spec_, rows(y.at(m), yl), rows(dy.at(m), dl), rows(at(ky, m), kl),
                                         rows(at(kdy, m), kl), pos.get(m), kHeads, k_heads, dir);
        } else {
          gr = start;
          rotary::accumulate_theta_gradient_strided(spec_, y.at(m), yl, dy.at(m), dl, pos.get(m), gr, dir);
        }
      }
      static const char* const names[] = {"theta_gradient", "accumulate_theta_gradient", "theta_gradient_qk",
                                          "theta_gradient_qk no key", "accumulate_theta_gradient_strided"};
      const std::string name = where(names[variant], &pos);
      // gradients.hpp's sum in long double, and the sum of the absolute values of its terms: each term
      // is formed in double (3 roundings), summed over heads, scaled by m_t and summed over tokens,
      // so 4 * (rows + 2) unit roundoffs of that sum bound the library's error (rows = head rows).
      std::vector<long double> want(static_cast<std::size_t>(pairs), 0.0L);
      std::vector<long double> mag(static_cast<std::size_t>(pairs), 0.0L);
      if (accumulates)
        for (std::size_t j = 0; j < want.size(); ++j) {
          want[j] = start[j];
          mag[j] = std::fabs(start[j]);
        }
      theta_reference(y.data(), yl, dy.data(), dl, pos.values(), dir, want, mag);
      if (k_heads > 0) theta_reference(ky->data(), kl, kdy->data(), kl, pos.values(), dir, want, mag);
      const double rows_n = static_cast<double>(kTokens * (kHeads + k_heads));
      ASSERT_EQ(grad[0].size(), static_cast<std::size_t>(pairs)) << name;
      for (std::int64_t j = 0; j < pairs; ++j) {
        const auto u = static_cast<std::size_t>(j);
        ASSERT_EQ(std::memcmp(&grad[0][u], &grad[1][u], sizeof(double)), 0)
            << name << ": grad[" << j << "] = " << grad[0][u] << " but the heap twin gave " << grad[1][u];
        const double bound = 4.0 * (rows_n + 2.0) * 0x1p-53 * static_cast<double>(mag[u]);
        ASSERT_LE(std::fabs(static_cast<double>(static_cast<long double>(grad[0][u]) - want[u])), bound)
            << name << ": grad[" << j << "] = " << grad[0][u] << ", long double sum "
            << static_cast<double>(want[u]) << " " << rotary_test::seed_note();
      }
      expect_untouched(name + " y", y);
      expect_untouched(name + " dy", dy);
      if (k_heads > 0) {
        expect_untouched(name + " k y", *ky);
        expect_untouched(name + " k dy", *kdy);
      }
    }
    // input_gradient: dL/dx = R^T dL/dy, i.e. the table's rows in the opposite direction.
    const RowSource<T> rows = cache_rows<T>(rope_.cache());
    for (const bool in_place : {false, true}) {
      const GuardedPositions pos = positions(in_place ? 2 : 1, kTokens);
      const Direction forward_dir = in_place ? Direction::forward : Direction::inverse;
      const FormLayouts l = form_layouts(Form::eigen, kTokens, d, false);
      check_call(std::string("input_gradient ") + (in_place ? "in place" : "out of place") + " (" +
                     pos.kind_name() + " positions)",
                 rotary::opposite(forward_dir), pos.values(), rows, rows, l, in_place,
                 [&](Mem m, T* gi, T* go, T*, T*) {
                   if (in_place) {
                     Map g(gi, kTokens * kHeads, d, Eigen::OuterStride<>(l.qi.head_stride));
                     rotary::input_gradient(rope_, g, pos.get(m), kHeads, forward_dir);
                   } else {
                     const ConstMap dy(gi, kTokens * kHeads, d, Eigen::OuterStride<>(l.qi.head_stride));
                     Map dx(go, kTokens * kHeads, d, Eigen::OuterStride<>(l.qo.head_stride));
                     rotary::input_gradient(rope_, dy, dx, pos.get(m), kHeads, forward_dir,
                                            rotary::thread_parallel_for(2));
                   }
                 });
    }
  }

  // convert_weights.hpp (no kernels): row permutations of weights and biases (row- and column-major,
  // 3 heads and 1) and probe_convention, on guarded W and bias buffers.
  void convert_weights() {
    convert_guarded<T, Eigen::RowMajor>(flush_, 3, g_.head_dim, g_.rotary_dim);
    convert_guarded<T, Eigen::ColMajor>(flush_, 1, g_.head_dim, g_.rotary_dim);
  }

  // ---- fusion.hpp and kv_cache.hpp ----

  // detail/kernels/registry.hpp: this ISA's per-head RMSNorm kernel (norm_kernel_for, called
  // directly) on 3 rows of n = head_dim values (the fused shapes: 64, 128 and 256 take the register
  // form, the others the two-pass form with a scalar tail), dense or with padding between rows, in
  // place and out of place, weightless and with a weight in the compute type (its own guarded
  // buffer). Besides not faulting: the scalar kernel's bits on heap copies (test_fusion checks the
  // scalar kernel against double), the padding, the weight and an out-of-place input unchanged.
  void norm_rows() {
    using Cc = C<T>;
    const std::int64_t n = g_.head_dim;
    constexpr std::int64_t rows = 3;
    const rotary::detail::NormKernel<T> kernel = rotary::detail::norm_kernel_for<T>(isa_);
    if (kernel == nullptr) {
      ADD_FAILURE() << where("norm_rows") << ": no norm kernel for a supported ISA";
      return;
    }
    int call = 0;
    for (const bool weighted : {false, true})
      for (const bool in_place : {false, true}) {
        const bool padded = call == 1 || call == 2;  // each of in place / out of place both ways
        ++call;
        const std::ptrdiff_t in_stride = n + (padded ? 1 : 0);
        const std::ptrdiff_t out_stride = in_place ? in_stride : n + (padded ? 0 : 3);
        const auto span = [n](std::ptrdiff_t stride) {
          return static_cast<std::size_t>((rows - 1) * stride + n);
        };
        Tensor<T> in = tensor(span(in_stride));
        Tensor<T> out = tensor(in_place ? 0 : span(out_stride));
        GuardedBuffer<Cc> w(weighted ? static_cast<std::size_t>(n) : 0, flush_);
        for (std::size_t i = 0; i < w.size(); ++i)
          w.data()[i] = static_cast<Cc>(static_cast<double>(rng_() >> 11) * 0x1p-51 - 2.0);
        const std::vector<Cc> w_before(w.data(), w.data() + w.size());
        rotary::detail::NormArgs<T> a;
        a.in = in.data();
        a.in_stride = in_stride;
        a.out = in_place ? in.data() : out.data();
        a.out_stride = out_stride;
        a.rows = rows;
        a.n = n;
        a.weight = weighted ? w.data() : nullptr;
        a.eps = 1e-6;
        a.inv_n = 1.0 / static_cast<double>(n);
        // The scalar kernel on heap copies.
        std::vector<T> want = in_place ? in.before : out.before;
        const std::vector<T> heap_in = in.before;
        rotary::detail::NormArgs<T> r = a;
        r.in = in_place ? want.data() : heap_in.data();
        r.out = want.data();
        r.weight = weighted ? w_before.data() : nullptr;
        rotary::detail::scalar::norm_rows<T>(r);
        kernel(a);
        const std::string name = std::string("norm_rows n ") + std::to_string(n) +
                                 (weighted ? " weighted" : "") + (padded ? " padded" : " dense") +
                                 (in_place ? " in place" : " out of place");
        expect_bytes(where(name), a.out, want, "the scalar kernel on heap copies gave");
        if (!in_place) expect_untouched(where(name), in);
        expect_bytes(where(name + " weight"), w.data(), w_before, "it was before the call");
      }
  }

  // fusion.hpp: rope_prologue (checked; the named ops are Prologues filled in) on guarded buffers
  // holding exactly their rows: q (rotated out of place, into padded token-major or head-major rows),
  // k and v (a GQA pair of heads each), k rotated into a k output on some calls, the q_norm / k_norm
  // weights, the slot mapping and the k and v caches (paged NHD and HND, exactly the cache: 2 blocks
  // of 4 slots; the mapping {6, 7, 0, padding, 3} writes the first slot, a run into the last two and
  // the last of block 0, so both ends of each cache are touched), for a cache of T and, for f32
  // vectors, an int8 cache with its guarded per-row scales and an fp8 cache with guarded per-head
  // scales (head 0 saturating). Without norm, RMSNorm before RoPE (w and 1 + w), the L2 norm after it,
  // and both; one call of each set on 2 threads. The result must be, byte for byte (caches, scales,
  // q and k outputs with their padding), what the unfused composition gives on heap copies on the
  // scalar kernels (rms_norm, apply_strided, rms_norm weightless, write_kv_cache: test_fusion's
  // contract), every input unchanged.
  void prologue() {
    prologue_into<T>();
    if constexpr (std::is_same_v<T, float>) {
      prologue_into<std::int8_t>();
      prologue_into<rotary::fp8_e4m3>();
    }
  }

 private:
  // got[0, want.size()) holds want's bits.
  template <class E>
  static void expect_bytes(const std::string& what, const E* got, const std::vector<E>& want,
                           const char* whose) {
    for (std::size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(static_cast<const void*>(got + i), static_cast<const void*>(&want[i]), sizeof(E))) {
        ADD_FAILURE() << what << ": element " << i << " is not what " << whose << " "
                      << rotary_test::seed_note();
        return;
      }
  }

  // A guarded buffer of n elements of a cache type E, random bytes, and a copy of them.
  template <class E>
  struct CacheBuffer {
    CacheBuffer(std::size_t n, Flush flush, std::mt19937_64& rng) : buf(n, flush), before(n) {
      auto* bytes = reinterpret_cast<unsigned char*>(buf.data());
      for (std::size_t i = 0; i < n * sizeof(E); ++i) bytes[i] = static_cast<unsigned char>(rng());
      if (n > 0)
        std::memcpy(static_cast<void*>(before.data()), static_cast<const void*>(buf.data()), n * sizeof(E));
    }
    GuardedBuffer<E> buf;
    std::vector<E> before;
  };

  template <class E>
  static std::string cache_type_name() {
    if constexpr (std::is_same_v<E, std::int8_t>) {
      return "int8";
    } else if constexpr (std::is_same_v<E, rotary::fp8_e4m3>) {
      return "fp8_e4m3";
    } else {
      return std::string(rotary::dtype_name<E>());
    }
  }

  template <class E>
  void prologue_into() {
    using rotary::CacheScales;
    using rotary::HeadNorm;
    using rotary::KvCacheView;
    using rotary::NormWeight;
    constexpr CacheScales kScales = rotary::cache_scales_of<E>();
    const std::int64_t d = g_.head_dim;
    const std::int64_t tokens = 5;
    const std::int64_t kv = 2;
    const std::int64_t blocks = 2;
    const std::int64_t block_size = 4;
    const std::vector<std::int64_t> mapping = {6, 7, 0, -1, 3};
    const auto cache_size = static_cast<std::size_t>(blocks * block_size * kv * d);
    const StridedLayout ql{tokens, kHeads, kHeads * d, d};
    const StridedLayout kl{tokens, kv, kv * d, d};
    for (int variant = 0; variant < 4; ++variant) {
      const bool pre = variant % 2 == 1;
      const bool post = variant >= 2;
      const bool k_out = variant == 1 || variant == 2;
      const bool hnd = variant == 1 || variant == 3;
      const NormWeight convention = variant == 3 ? NormWeight::unit_offset : NormWeight::plain;
      const StridedLayout qol = variant % 2 == 0 ? StridedLayout{tokens, kHeads, kHeads * (d + 1) + 2, d + 1}
                                                 : StridedLayout{tokens, kHeads, d, tokens * d};
      const GuardedPositions pos = positions(variant % 3, tokens);
      Tensor<T> q = tensor(extent(ql, d));
      Tensor<T> qo = tensor(extent(qol, d));
      Tensor<T> k = tensor(extent(kl, d));
      Tensor<T> ko = tensor(k_out ? extent(kl, d) : 0);
      Tensor<T> v = tensor(extent(kl, d));
      Tensor<T> wq = tensor(pre ? static_cast<std::size_t>(d) : 0);
      Tensor<T> wk = tensor(pre ? static_cast<std::size_t>(d) : 0);
      const auto slots = guarded_array<std::int64_t>(mapping, flush_);
      CacheBuffer<E> kc(cache_size, flush_, rng_);
      CacheBuffer<E> vc(cache_size, flush_, rng_);
      // int8: one scale per (slot, head), written; fp8: one per head, read (head 0 saturates).
      std::size_t scale_count = 0;
      if (kScales == CacheScales::per_row) scale_count = static_cast<std::size_t>(blocks * block_size * kv);
      if (kScales == CacheScales::per_head) scale_count = static_cast<std::size_t>(kv);
      GuardedBuffer<float> ks(scale_count, flush_);
      GuardedBuffer<float> vs(scale_count, flush_);
      for (std::size_t i = 0; i < scale_count; ++i) {
        const auto f = static_cast<float>(i);
        ks.data()[i] = kScales == CacheScales::per_row ? -7.0f : (i == 0 ? 0.002f : 0.01f * f);
        vs.data()[i] = kScales == CacheScales::per_row ? -5.0f : 0.004f * (f + 1.0f);
      }
      const std::vector<float> ks_before(ks.data(), ks.data() + scale_count);
      const std::vector<float> vs_before(vs.data(), vs.data() + scale_count);
      const auto view = [&](E* data, float* scales) {
        return hnd ? KvCacheView<E>::paged_hnd(data, blocks, block_size, kv, d,
                                               scale_count > 0 ? scales : nullptr)
                   : KvCacheView<E>::paged(data, blocks, block_size, kv, d,
                                           scale_count > 0 ? scales : nullptr);
      };
      const auto rms = [&](const T* w, float eps) { return HeadNorm<T>::rms(w, eps, convention); };
      const HeadNorm<T> l2 = HeadNorm<T>::weightless(1e-6f);

      rotary::Prologue<T, E, T> c;
      c.q = q.data();
      c.q_layout = ql;
      c.q_out = qo.data();
      c.q_out_layout = qol;
      c.write_kv(k.data(), kl, v.data(), kl, view(kc.buf.data(), ks.data()), view(vc.buf.data(), vs.data()),
                 rotary::Slots::mapping(slots->data(), tokens));
      if (k_out) {
        c.k_out = ko.data();
        c.k_out_layout = kl;
      }
      if (pre) {
        c.q_norm = rms(wq.data(), 1e-6f);
        c.k_norm = rms(wk.data(), 1e-5f);
      }
      if (post) c.l2_after = l2;
      const rotary::ParallelFor parallel =
          variant == 3 ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
      rotary::rope_prologue(rope_, c, pos.get(), parallel);

      // The unfused composition on heap copies, on the scalar kernels.
      std::vector<T> q_want = qo.before;
      std::vector<T> k_want(k.size());
      std::vector<E> kc_want = kc.before;
      std::vector<E> vc_want = vc.before;
      std::vector<float> ks_want = ks_before;
      std::vector<float> vs_want = vs_before;
      {
        const IsaScope scalar(Isa::scalar);
        std::vector<T> qn = q.before;
        std::vector<T> kn = k.before;
        if (pre) {
          rotary::rms_norm(q.before.data(), ql, qn.data(), ql, d, rms(wq.before.data(), 1e-6f));
          rotary::rms_norm(k.before.data(), kl, kn.data(), kl, d, rms(wk.before.data(), 1e-5f));
        }
        rotary::apply_strided(rope_, qn.data(), ql, q_want.data(), qol, Positions(pos.values()));
        rotary::apply_strided(rope_, kn.data(), kl, k_want.data(), kl, Positions(pos.values()));
        if (post) {
          rotary::rms_norm(q_want.data(), qol, q_want.data(), qol, d, l2);
          rotary::rms_norm(k_want.data(), kl, k_want.data(), kl, d, l2);
        }
        rotary::write_kv_cache(k_want.data(), kl, rotary::Slots(mapping),
                               view(kc_want.data(), ks_want.data()));
        rotary::write_kv_cache(v.before.data(), kl, rotary::Slots(mapping),
                               view(vc_want.data(), vs_want.data()));
      }

      const std::string name =
          "rope_prologue into a " + cache_type_name<E>() + (hnd ? " HND" : " NHD") + " cache" +
          (pre ? (variant == 3 ? ", norm (1 + w) before" : ", norm before") : "") +
          (post ? ", l2 after" : "") + (k_out ? ", k out" : "") + (variant == 3 ? ", 2 threads" : "");
      const char* whose = "the unfused composition on heap copies gave";
      expect_bytes(where(name + ": q output", &pos), qo.data(), q_want, whose);
      if (k_out) expect_bytes(where(name + ": k output", &pos), ko.data(), k_want, whose);
      expect_bytes(where(name + ": k cache", &pos), kc.buf.data(), kc_want, whose);
      expect_bytes(where(name + ": v cache", &pos), vc.buf.data(), vc_want, whose);
      expect_bytes(where(name + ": k scales", &pos), ks.data(), ks_want, whose);
      expect_bytes(where(name + ": v scales", &pos), vs.data(), vs_want, whose);
      for (const Tensor<T>* input : {&q, &k, &v, &wq, &wk}) expect_untouched(where(name, &pos), *input);
      expect_bytes(where(name + ": slot mapping", &pos), slots->data(), mapping, "it was before the call");
    }
  }

  // The KernelArgs dispatch builds for one tensor of rows (input layout il, output layout ol) read
  // through this fixture's cache.
  rotary::detail::KernelArgs<T> kernel_args(const StridedLayout& il, const T* in, const StridedLayout& ol,
                                            T* out, const Positions& p, Direction dir) const {
    rotary::detail::KernelArgs<T> a;
    a.tokens = il.tokens;
    a.q.heads = il.heads;
    a.head_dim = g_.head_dim;
    a.rotary_dim = g_.rotary_dim;
    a.pairing = g_.pairing;
    a.inverse = dir == Direction::inverse;
    a.rows = rotary::detail::RowSource<C<T>>::table(rope_.cache(), p);
    a.q.in = in;
    a.q.out = out;
    a.q.in_token_stride = il.token_stride;
    a.q.in_head_stride = il.head_stride;
    a.q.out_token_stride = ol.token_stride;
    a.q.out_head_stride = ol.head_stride;
    return a;
  }

  // Adds sign * sum_t m_t sum_h (g1 y0 - g0 y1) per pair to want, and the same sum of absolute
  // values to mag, in long double (gradients.hpp's formula; pairs as the pairing defines them).
  void theta_reference(const T* y, const StridedLayout& yl, const T* dy, const StridedLayout& dl,
                       const std::vector<std::int64_t>& pos, Direction dir, std::vector<long double>& want,
                       std::vector<long double>& mag) const {
    const std::int64_t h = g_.rotary_dim / 2;
    const long double sign = dir == Direction::forward ? 1.0L : -1.0L;
    for (std::int64_t t = 0; t < yl.tokens; ++t)
      for (std::int64_t hd = 0; hd < yl.heads; ++hd)
        for (std::int64_t j = 0; j < h; ++j) {
          const std::int64_t a = g_.pairing == Pairing::interleaved ? 2 * j : j;
          const std::int64_t b = g_.pairing == Pairing::interleaved ? 2 * j + 1 : j + h;
          const auto at = [t, hd](const T* x, const StridedLayout& l, std::int64_t i) {
            return static_cast<long double>(widen(x[t * l.token_stride + hd * l.head_stride + i]));
          };
          const long double m = static_cast<long double>(pos[static_cast<std::size_t>(t)]);
          const long double p1 = at(dy, dl, b) * at(y, yl, a);
          const long double p0 = at(dy, dl, a) * at(y, yl, b);
          want[static_cast<std::size_t>(j)] += sign * m * (p1 - p0);
          mag[static_cast<std::size_t>(j)] += std::fabs(m) * (std::fabs(p1) + std::fabs(p0));
        }
  }

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

// ---- the table of entry points ------------------------------------------------------------------

// The shapes a row meets: kTailShapes, every_head_dim() (the kernels' own list; for rows cheap
// enough to run on its 85 shapes) or kFusedShapes (the norm kernels' two forms).
enum class Shapes { tails, every, fused };
// The pairings a row meets on each shape: both, or one, alternating from shape to shape (each pairing
// meets every other shape: for the newer headers, which reach the kernels the rows with both sweep,
// at half the run time; a guarded buffer is 3 system calls), or only the first (no rotation).
enum class Pairings { both, alternate, first };
// The ISAs a row runs under: every ISA of the registry, or none (no kernels: once, as the scalar case).
enum class Isas { every, none };

template <class T>
using RunFn = void (*)(Fixture<T>&);

// A row: a name (the test name's first part), its shapes, pairings and ISAs, and what runs it on one
// Fixture, for each storage type.
struct EntryPoint {
  const char* name;
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
EntryPoint row(const char* name, Shapes shapes, Pairings pairings, Isas isas, Run run) {
  return {name, shapes, pairings, isas, run, run, run, run};
}

// Every entry point that reads or writes user memory. Adding a header: see the end of this file.
const std::vector<EntryPoint>& entry_points() {
  using P = Pairings;
  static const std::vector<EntryPoint> table = {
      // detail kernels from the registry, every variant of the ISA (avx512 bf16: both roundings)
      row("kernels", Shapes::every, P::both, Isas::every, [](auto& f) { f.kernels(); }),
      // apply.hpp
      row("apply", Shapes::tails, P::both, Isas::every, [](auto& f) { f.apply_eigen(); }),
      row("apply_strided", Shapes::every, P::both, Isas::every, [](auto& f) { f.apply_strided(); }),
      row("apply_qk", Shapes::tails, P::both, Isas::every, [](auto& f) { f.apply_qk_eigen(); }),
      row("apply_qk_strided", Shapes::tails, P::both, Isas::every, [](auto& f) { f.apply_qk_strided(); }),
      row("for_positions_cache", Shapes::tails, P::both, Isas::every, [](auto& f) { f.listed_cache(); }),
      row("on_the_fly", Shapes::tails, P::both, Isas::every, [](auto& f) { f.on_the_fly(); }),
      // table.hpp
      row("caller_table", Shapes::tails, P::both, Isas::every, [](auto& f) { f.caller_table(); }),
      // layouts.hpp and tensor_map.hpp
      row("apply_batch", Shapes::tails, P::both, Isas::every, [](auto& f) { f.batch(); }),
      row("apply_qk_batch", Shapes::tails, P::both, Isas::every, [](auto& f) { f.qk_batch(); }),
      row("varlen", Shapes::tails, P::both, Isas::every, [](auto& f) { f.varlen(); }),
      row("tensor_map", Shapes::tails, P::both, Isas::every, [](auto& f) { f.tensor_maps(); }),
      // rerotate.hpp
      row("rerotate", Shapes::tails, P::both, Isas::every, [](auto& f) { f.rerotate(); }),
      // the newer headers
      row("multi_axis", Shapes::tails, P::alternate, Isas::every, [](auto& f) { f.multi_axis(); }),
      row("xpos", Shapes::tails, P::alternate, Isas::every, [](auto& f) { f.xpos(); }),
      row("linear_attention", Shapes::tails, P::alternate, Isas::every,
          [](auto& f) { f.linear_attention(); }),
      row("gradients", Shapes::tails, P::alternate, Isas::every, [](auto& f) { f.gradients(); }),
      // fusion.hpp and kv_cache.hpp: the norm kernels of the registry, and the fused prologue
      row("norm_rows", Shapes::fused, P::first, Isas::every, [](auto& f) { f.norm_rows(); }),
      row("prologue", Shapes::fused, P::both, Isas::every, [](auto& f) { f.prologue(); }),
      // convert_weights.hpp (no kernels)
      row("convert_weights", Shapes::tails, P::first, Isas::none, [](auto& f) { f.convert_weights(); }),
  };
  return table;
}

// ---- the sweep ----------------------------------------------------------------------------------

// A test case: one row of the table under one ISA of the registry.
struct GuardCase {
  std::size_t row;
  Isa isa;
};

std::string case_name(const GuardCase& c) {
  const EntryPoint& e = entry_points()[c.row];
  return e.isas == Isas::none ? std::string(e.name)
                              : std::string(e.name) + "_" + std::string(rotary::to_string(c.isa));
}

void PrintTo(const GuardCase& c, std::ostream* os) { *os << case_name(c); }

std::vector<GuardCase> all_cases() {
  std::vector<GuardCase> v;
  for (std::size_t r = 0; r < entry_points().size(); ++r)
    for (const Isa isa : rotary::all_isas()) {
      if (entry_points()[r].isas == Isas::none && isa != rotary::all_isas().front()) continue;
      v.push_back({r, isa});
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

class GuardPages : public ::testing::TestWithParam<GuardCase> {};

TEST_P(GuardPages, Sweep) {
  const GuardCase c = GetParam();
  const EntryPoint& e = entry_points()[c.row];
  if (!rotary::isa_supported(c.isa)) GTEST_SKIP() << rotary::to_string(c.isa) << " is not supported here";
  const IsaScope scope(c.isa);
  const rotary_test::SplitAlways always_split;  // small threaded calls: split them anyway
  for (const DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    std::mt19937_64 rng(rotary_test::seed() + 1000 * static_cast<std::uint64_t>(c.row) +
                        7 * static_cast<std::uint64_t>(dtype) + static_cast<std::uint64_t>(c.isa));
    rotary_test::with_dtype(dtype,
                            [&](auto tag) { sweep<typename decltype(tag)::type>(e, c.isa, dtype, rng); });
    if (HasFailure()) return;
  }
  if (worst_relative(false) > 0.0 || worst_relative(true) > 0.0)
    std::printf(
        "[          ] rows computed another way: max |y - y_ref| / (|x0| + |x1|) f32 %.3g, f64 %.3g\n",
        worst_relative(false), worst_relative(true));
}

INSTANTIATE_TEST_SUITE_P(EntryPoints, GuardPages, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<GuardCase>& p) { return case_name(p.param); });

// ---- Adding a header ----------------------------------------------------------------------------
// A new header's entry points go in the same way:
//   * a public method of Fixture<T> and a row of entry_points() naming it (it then runs for every
//     ISA, storage type, flush side and shape), taking every user buffer as a Tensor<T> and every
//     index array as a guarded_array / GuardedPositions (GuardedAxisPositions for position streams);
//   * calls that rotate q (and k) rows: check_call(), which runs the call on the guarded buffers and
//     on heap twins and checks rows (verify: exact cache_rows for table reads, a RowSource with
//     exact = false for rows computed another way), padding, inputs and the twin, bit for bit;
//   * other results: equal to the heap twin bit for bit and to an independent reference, inputs
//     untouched (expect_untouched) — a call that merely does not fault is not enough;
//   * entry points without kernels (weights, analysis): a row with Isas::none, like convert_weights.

}  // namespace

#else
TEST(GuardPages, NeedsMmap) { GTEST_SKIP() << "no mmap/mprotect on this platform"; }
#endif
