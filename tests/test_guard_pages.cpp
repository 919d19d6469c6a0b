// Guard pages around every public entry point that reads or writes user memory.
//
// Every tensor, position array and cu_seqlens array of a call lives in its own buffer between two
// PROT_NONE pages, sized to exactly the extent of its view: Flush::end puts the last element against
// the upper guard page (a read or write past the view faults: a missing tail mask, a full-width
// load of the last pair, a stray prefetch into the next row), Flush::begin puts the first element
// against the lower one (an under-run faults). Each test case is one (ISA forced with set_max_isa,
// storage type, flush side); it sweeps head_dim 6, 7, 10, 34, 67, 130 with full and partial
// rotary_dim (odd pass-through tails included), both pairings, 3 tokens x 3 heads (odd, so no
// vector width divides the row count), GQA keys (1 head) and no key, int32 / int64 / contiguous
// positions, forward and inverse, in place and out of place.
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
// are checked in test_on_the_fly and test_rerotate; here the point is memory access.
//
// Not covered here: reads of rotary's own cos/sin table (a heap allocation: the ASan build catches
// over-reads of it), and headers that do not exist yet — see "Headers to add" at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <rotary/rotary.hpp>
#include <rotary/tensor_map.hpp>

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
using rotary_test::Flush;
using rotary_test::GuardedBuffer;

// ---- cases --------------------------------------------------------------------------------------

enum class DType { f32, f64, f16, bf16 };

struct GuardCase {
  Isa isa;
  DType dtype;
  Flush flush;
};

std::string dtype_name(DType d) {
  switch (d) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    default:
      return "bf16";
  }
}

std::string case_name(const GuardCase& c) {
  return std::string(rotary::to_string(c.isa)) + "_" + dtype_name(c.dtype) +
         (c.flush == Flush::end ? "_flush_end" : "_flush_begin");
}

void PrintTo(const GuardCase& c, std::ostream* os) { *os << case_name(c); }

std::vector<GuardCase> all_cases() {
  std::vector<GuardCase> v;
  for (const Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon})
    for (const DType d : {DType::f32, DType::f64, DType::f16, DType::bf16})
      for (const Flush f : {Flush::end, Flush::begin}) v.push_back({isa, d, f});
  return v;
}

// Forces one ISA for the lifetime of the object, then restores the previous one.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) : saved_(rotary::active_isa()) { rotary::set_max_isa(isa); }
  ~IsaScope() { rotary::set_max_isa(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa saved_;
};

struct Shape {
  std::int64_t head_dim;
  std::int64_t rotary_dim;
};
// Odd tails everywhere: pairs h = 3, 2, 3, 5, 3, 17, 9, 16, 65, 33 and pass-through runs of 0, 2, 1,
// 0, 4, 0, 16, 35, 0, 64 elements (the last lane group of a row always partial somewhere).
#if defined(ROTARY_TEST_EMULATED) && ROTARY_TEST_EMULATED
// Under qemu-user (cross builds) every instruction is emulated: keep one shape per tail kind.
constexpr Shape kShapes[] = {{7, 6}, {34, 18}, {130, 66}};
#else
constexpr Shape kShapes[] = {{6, 6},   {6, 4},   {7, 6},   {10, 10},   {10, 6},
                             {34, 34}, {34, 18}, {67, 32}, {130, 130}, {130, 66}};
#endif
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

// The storage rounding rotary documents: Eigen's round-to-nearest-even conversions, except that bf16
// flushes f32-subnormal results to a signed zero (as AVX512-BF16 does; see dtype.hpp / README).
template <class T>
T narrow(C<T> y) {
  if constexpr (std::is_same_v<T, rotary::bf16>) {
    if (y != 0.0f && std::fabs(y) < std::numeric_limits<float>::min())
      return T(std::signbit(y) ? -0.0f : 0.0f);
  }
  return static_cast<T>(y);
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
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
  GuardedBuffer<T> buf;
  std::vector<T> before;
};

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
    if (kind_ == 1) p32_ = guarded_array<std::int32_t>(values_, flush);
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
  const std::vector<std::int64_t>& values() const { return values_; }
  std::int64_t operator[](std::int64_t t) const { return values_[static_cast<std::size_t>(t)]; }
  const char* kind_name() const { return kind_ == 0 ? "contiguous" : kind_ == 1 ? "int32" : "int64"; }

 private:
  int kind_;
  std::vector<std::int64_t> values_;
  std::shared_ptr<GuardedBuffer<std::int32_t>> p32_;
  std::shared_ptr<GuardedBuffer<std::int64_t>> p64_;
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
  for (const RowJob& job : jobs) {
    const std::vector<C<T>> cs = rows.row(job.position);
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

// Row jobs of a tokens x heads strided view (in and out layouts may differ) with per-token positions.
std::vector<RowJob> strided_jobs(const StridedLayout& in, const StridedLayout& out,
                                 const GuardedPositions& pos) {
  std::vector<RowJob> v;
  for (std::int64_t t = 0; t < in.tokens; ++t)
    for (std::int64_t h = 0; h < in.heads; ++h)
      v.push_back(
          {t * in.token_stride + h * in.head_stride, t * out.token_stride + h * out.head_stride, pos[t]});
  return v;
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

// ---- the sweep ----------------------------------------------------------------------------------

// Everything one (shape, pairing) of a case needs.
template <class T>
class Sweep {
 public:
  Sweep(const GuardCase& c, const Shape& shape, Pairing pairing, std::mt19937_64& rng)
      : flush_(c.flush),
        rng_(rng),
        g_{shape.head_dim, shape.rotary_dim, pairing},
        spec_(shape.head_dim, pairing, 10000.0, shape.rotary_dim),
        rope_(spec_, kCachePositions),
        fly_(spec_, rotary::OnTheFly{}) {
    std::ostringstream os;
    os << case_name(c) << " " << rotary::to_string(pairing) << " head_dim " << shape.head_dim
       << " rotary_dim " << shape.rotary_dim;
    where_ = os.str();
  }

  void run_all() {
    apply_eigen();
    apply_strided();
    apply_qk_eigen();
    apply_qk_strided();
    listed_cache();
    on_the_fly();
    batch();
    qk_batch();
    varlen();
    tensor_maps();
    rerotate();
  }

 private:
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

  // apply / apply_unchecked over Eigen rows with an outer stride (padding between rows).
  void apply_eigen() {
    using Map = Eigen::Map<rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
    using ConstMap = Eigen::Map<const rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
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
          rotary::apply_unchecked(rope_, m, pos.get(), kHeads, dir);
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
          rotary::apply_unchecked(rope_, mi, mo, pos.get(), kHeads, dir);
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
        rotary::apply_strided_unchecked(rope_, in.data(), il, out.data(), ol, pos.get(), dir);
      } else {
        rotary::apply_strided(rope_, in.data(), il, out.data(), ol, pos.get(), dir);
      }
      verify<T>(where(variant == 2 ? "apply_strided_unchecked" : "apply_strided out of place", &pos), g_, dir,
                cache_rows<T>(rope_.cache()), strided_jobs(il, ol, pos), in.before, in.data(), out.before,
                out.data(), false);
      Tensor<T> x = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
      if (variant == 2) {
        rotary::apply_strided_unchecked(rope_, x.data(), il, x.data(), il, pos.get(), dir);
      } else {
        rotary::apply_strided(rope_, x.data(), il, pos.get(), dir);
      }
      verify<T>(where("apply_strided in place", &pos), g_, dir, cache_rows<T>(rope_.cache()),
                strided_jobs(il, il, pos), x.before, x.data(), x.before, x.data(), true);
    }
  }

  // apply_qk over Eigen rows: in place and out of place, with a GQA key (1 head) and without key.
  void apply_qk_eigen() {
    using Map = Eigen::Map<rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
    using ConstMap = Eigen::Map<const rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
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
        rotary::apply_qk_strided_unchecked(rope_, qi.data(), ql, q_out, ql, ki.data(), kla, k_out, kla,
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
      rotary::apply_strided(fly_, in.data(), l, out.data(), l, pos.get(), dir_for(kind), parallel);
      verify<T>(where("OnTheFly apply_strided", &pos), g_, dir_for(kind), rows, strided_jobs(l, l, pos),
                in.before, in.data(), out.before, out.data(), false);
      Tensor<T> x = tensor(extent(tokens, 1, d, d, d));
      using Map = Eigen::Map<rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
      Map m(x.data(), tokens, d, Eigen::OuterStride<>(d));
      rotary::apply(fly_, m, pos.get(), 1, dir_for(kind + 1), parallel);
      verify<T>(where("OnTheFly apply in place", &pos), g_, dir_for(kind + 1), rows, strided_jobs(l, l, pos),
                x.before, x.data(), x.before, x.data(), true);
    }
  }

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
          rotary::apply_batch_unchecked(rope_, iv, ov, bp.sp, dir);
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
          rotary::apply_qk_batch_unchecked(rope_, qiv, qov, kiv, kov, bp.sp, dir);
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
    using Map = Eigen::Map<rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
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

  Flush flush_;
  std::mt19937_64& rng_;
  Geometry g_;
  rotary::RotarySpec spec_;
  rotary::Rope<T> rope_;
  rotary::Rope<T> fly_;
  std::string where_;
};

template <class T>
void sweep(const GuardCase& c) {
  std::mt19937_64 rng(rotary_test::seed() + static_cast<std::uint64_t>(c.dtype) * 7 +
                      static_cast<std::uint64_t>(c.isa));
  for (const Shape& shape : kShapes)
    for (const Pairing pairing : {Pairing::interleaved, Pairing::half_split}) {
      Sweep<T> s(c, shape, pairing, rng);
      s.run_all();
      if (::testing::Test::HasFailure()) return;  // one shape's failures are enough to read
    }
}

class GuardPages : public ::testing::TestWithParam<GuardCase> {};

TEST_P(GuardPages, EveryEntryPoint) {
  const GuardCase c = GetParam();
  if (!rotary::isa_supported(c.isa)) GTEST_SKIP() << rotary::to_string(c.isa) << " is not supported here";
  const IsaScope scope(c.isa);
  switch (c.dtype) {
    case DType::f32:
      sweep<float>(c);
      break;
    case DType::f64:
      sweep<double>(c);
      break;
    case DType::f16:
      sweep<rotary::f16>(c);
      break;
    default:
      sweep<rotary::bf16>(c);
      break;
  }
  if (c.dtype == DType::f32 || c.dtype == DType::f64)
    std::printf("[          ] cache-free / re-rotation rows: max |y - y_ref| / (|x0| + |x1|) so far %.3g\n",
                worst_relative(c.dtype == DType::f64));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, GuardPages, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<GuardCase>& p) { return case_name(p.param); });

// ---- convert_weights.hpp (no kernels: once per storage type and flush side) -------------------

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

template <class T>
void convert_all(Flush flush) {
  for (const Shape& s : kShapes) {
    convert_guarded<T, Eigen::RowMajor>(flush, 3, s.head_dim, s.rotary_dim);
    convert_guarded<T, Eigen::ColMajor>(flush, 1, s.head_dim, s.rotary_dim);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(GuardPagesConvertWeights, PermuteAndProbe) {
  for (const Flush flush : {Flush::end, Flush::begin}) {
    SCOPED_TRACE(flush == Flush::end ? "flush end" : "flush begin");
    convert_all<float>(flush);
    convert_all<double>(flush);
    convert_all<rotary::f16>(flush);
    convert_all<rotary::bf16>(flush);
  }
}

// ---- Headers to add ------------------------------------------------------------------------------
// multi_axis.hpp, xpos.hpp, linear_attention.hpp and gradients.hpp are being written; when they land,
// add their entry points here the same way:
//   * a method of Sweep<T> per header (it then runs for every ISA, storage type and flush side),
//     taking every user buffer as a Tensor<T> (tensor(extent(...))) and every index array as a
//     guarded_array / GuardedPositions, and listed in Sweep::run_all();
//   * check the result with verify<T>() where the output is a RoPE rotation of known rows (cache_rows
//     for table reads; a RowSource with exact = false for rows computed another way), or against the
//     header's own independent reference otherwise — a call that merely does not fault is not enough.
//   * entry points without kernels (weights, analysis) go in a TEST like GuardPagesConvertWeights.

}  // namespace

#else
TEST(GuardPages, NeedsMmap) { GTEST_SKIP() << "no mmap/mprotect on this platform"; }
#endif
