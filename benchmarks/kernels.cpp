// rotary_bench, the kernel table: one tensor (or one fused q+k pair) per call, 1 thread, named
//   apply/<pairing>/<dtype>/<impl>/tokens:<T>/heads:<H>/head_dim:<D>
//   pairing  interleaved | half_split
//   dtype    f32 | f16 | bf16
//   impl     memcpy      std::memcpy of the same bytes, same buffers (every case's baseline)
//            copy_loop   an AVX-512 copy loop with the kernels' access pattern (copy_loop.hpp): the
//                        rows in the pairing's order and each token's cos/sin row, plain 64-byte
//                        loads and stores (x86 CPUs with AVX-512 only; the second baseline)
//            convert_loop  (f16, bf16) the copy loop with the kernels' storage conversions on the way:
//                        each value widened to f32 and rounded back with the AVX-512 kernels'
//                        instructions, no arithmetic (the third baseline: the conversion floor)
//            matrix      y = R_m x with the explicit head_dim x head_dim rotation matrix (f32 only)
//            eigen_expr  the Eigen array expression a user would write (f32 only)
//            scalar      rotary's scalar kernel, called directly (the bit-exact reference)
//            avx2 avx512 rotary's x86 kernels, called directly (only where the CPU has the ISA;
//                        for f16/bf16 only when ROTARY_BENCH_X86_HALF is 1, see bench_common.hpp)
//            neon        rotary's NEON kernel, called directly (AArch64 builds)
//            dispatch    rotary::apply_unchecked out of place: whatever kernel active_isa() picks
//            checked     the same call through the checked rotary::apply (decode shape only: its
//                        checks cost O(1) per call for contiguous positions, visible at 1 token)
//            onthefly    the same call with a cache-free Rope<T>(spec, rotary::OnTheFly{})
//            table_vllm  the same call with a TableRope over the Rope's rows as vLLM's cat(cos, sin)
//            table_separate  ... over separate cos and sin tables (ONNX / FlashAttention style)
//            dispatch_qk rotary::apply_qk out of place: fused q+k (GQA shapes only, see below)
// over kShapes (bench_common.hpp), rows = tokens*heads, row-major, token t at position t.
//
// Batched decode (decode_cases.hpp): tokens:64/heads:32/head_dim:128 is also 64 sequences decoding
// one token each at scattered positions (seeded, below the Rope's cache size), passed as an int32
// rotary::Positions array:
//   dispatch_scattered  rotary::apply_unchecked with those positions
//   checked_scattered   rotary::apply with those positions (checks every position: O(tokens))
//   dispatch, memcpy    as above (dispatch at positions 0..63), for comparison
// No other impl is registered at that shape.
//
// GQA (fused q+k) shapes: heads:40 means 32 query + 8 key heads of head_dim 128 per token. The
// query block (tokens x 32 rows) and the key block (tokens x 8 rows) are separate arrays, laid out
// one after the other in the input buffer and likewise in the output buffer, so:
//   dispatch_qk  one rotary::apply_qk(rope, q_in, q_out, k_in, k_out, positions, 32, 8) call
//   dispatch     two rotary::apply_unchecked calls, q then k (what a caller without apply_qk does)
//   memcpy       one memcpy over both blocks: exactly the bytes the other two read and write
// No other impl is registered at heads:40 (a plain 512 x 8 x 128 shape covers the key heads alone).
//
// Extending: an implementation is one entry in make_impls<T>(). Before anything is registered,
// every implementation's output is checked against the scalar kernel's on small inputs: bit for bit
// for the rotary kernels, within a few ulps for the Eigen formulations and the cache-free rows
// (equal to the cached ones except on near-ties).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>

#include "bench_common.hpp"
#include "copy_loop.hpp"
#include "decode_cases.hpp"

namespace rotary_bench {
namespace {

using Index = Eigen::Index;

template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));  // f16/bf16 convert through float
}

// Bit-for-bit equality: Expect::copy and Expect::bit_exact promise identical bits, signed zeros and
// NaN payloads included, which == cannot check.
template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;  // NOLINT(bugprone-suspicious-memory-comparison)
}

// ---- implementations ------------------------------------------------------------------------

// One call: rotate (or copy) `shape` from `in` to `out`, rows = tokens*heads, row-major, token t
// at positions[t] (token t at t unless a scattered impl or the startup check says otherwise).
// Fused shapes: the query block (tokens x q_heads rows) starts at in/out, the key block (tokens x
// kv_heads rows) right after it.
template <class T>
struct Case {
  Pairing pairing;
  Shape shape;
  const rotary::Rope<T>* rope;
  const T* in;
  T* out;
  rotary::Positions positions = rotary::Positions::contiguous(0);

  std::int64_t k_offset() const { return shape.tokens * shape.q_heads() * shape.head_dim; }
};

// An implementation's prepare step: builds what the call needs (matrices, broadcast tables, a
// cache-free Rope) and returns the Runner, one pass over the whole tensor.
template <class T>
using Prepare = Runner (*)(const Case<T>&);

// What the startup check demands of an implementation's output.
enum class Expect {
  copy,       // equals the input (memcpy)
  reference,  // the reference the others are compared with (the scalar kernel)
  bit_exact,  // equals the reference bit for bit (every rotary kernel: same operation order)
  close,      // within a few ulps of the reference (other formulations, cache-free rows)
};

// Which shapes an implementation is registered (and checked) on: a set of kinds.
enum Shapes : unsigned {
  kPlain = 1,      // one tensor per call (kShapes)
  kFused = 2,      // q+k shapes (kShapes)
  kScattered = 4,  // kScatteredShape (decode_cases.hpp)
  kEvery = kPlain | kFused | kScattered,
};

unsigned shape_kind(const Shape& s) {
  if (s == kScatteredShape) return kScattered;
  return s.fused() ? kFused : kPlain;
}

template <class T>
struct Impl {
  const char* name;
  Prepare<T> prepare;
  Expect expect;
  unsigned shapes;                // Shapes
  bool (*runs_on)(const Shape&);  // nullptr: every shape of its kinds

  bool registered_on(const Shape& s) const {
    if ((shapes & shape_kind(s)) == 0) return false;
    return runs_on == nullptr || runs_on(s);
  }
};

template <class T>
Runner prepare_memcpy(const Case<T>& c) {
  const T* in = c.in;
  T* out = c.out;
  const auto bytes = static_cast<std::size_t>(c.shape.elements()) * sizeof(T);
  return [in, out, bytes] { std::memcpy(static_cast<void*>(out), static_cast<const void*>(in), bytes); };
}

// The copy loop over the same rows, reading token t's row of the Rope's cache (position t); Trip:
// the 16-bit round trip on the way (convert_loop) or none (copy_loop).
template <class T, RoundTrip Trip = RoundTrip::none>
Runner prepare_copy_loop(const Case<T>& c) {
  using C = rotary::compute_t<T>;
  const Shape& s = c.shape;
  const auto& cache = c.rope->cache();
  const void* table = cache.row(0);
  const auto table_row_bytes = static_cast<std::int64_t>(2 * cache.pairs() * static_cast<std::int64_t>(sizeof(C)));
  const T* in = c.in;
  T* out = c.out;
  const bool half_split = c.pairing == Pairing::half_split;
  return [in, out, s, half_split, table, table_row_bytes] {
    copy_loop(in, out, s.tokens, s.heads, s.head_dim * static_cast<std::int64_t>(sizeof(T)), half_split, table,
              table_row_bytes, table_row_bytes, Trip);
  };
}

template <RoundTrip Trip>
bool runs_copy_loop(const Shape&) {
  return copy_loop_available(Trip);
}

// The round trip of T's kernels: none for f32.
template <class T>
constexpr RoundTrip round_trip_of() {
  if constexpr (std::is_same_v<T, rotary::f16>) return RoundTrip::f16;
  else if constexpr (std::is_same_v<T, rotary::bf16>) return RoundTrip::bf16;
  else return RoundTrip::none;
}

// A rotary kernel called directly (no dispatch, no checks): Kernel(args, token_begin, token_end).
// Fused shapes pass the key block as the kernel's second stream, as apply_qk does.
template <class T, auto Kernel>
Runner prepare_kernel(const Case<T>& c) {
  const Shape& s = c.shape;
  const rotary::StridedLayout q = contiguous_layout(s.tokens, s.q_heads(), s.head_dim);
  rotary::detail::StreamArgs<T> k;
  if (s.fused()) {
    const rotary::StridedLayout kl = contiguous_layout(s.tokens, s.kv_heads, s.head_dim);
    k = rotary::detail::make_stream(c.in + c.k_offset(), kl, c.out + c.k_offset(), kl);
  }
  const rotary::detail::KernelArgs<T> args =
      rotary::detail::make_args(*c.rope, rotary::detail::make_stream(c.in, q, c.out, q), k, s.tokens,
                                c.positions, rotary::Direction::forward);
  return [args] { Kernel(args, 0, args.tokens); };
}

// rotary::apply_unchecked (or, Checked, rotary::apply) out of place over Eigen rows
// (tokens*heads x head_dim), token t at positions[t].
template <bool Checked = false, class R, class T>
void apply_rows(const R& rope, const T* in, T* out, std::int64_t tokens, std::int64_t heads,
                std::int64_t head_dim, const rotary::Positions& positions = rotary::Positions::contiguous(0)) {
  Eigen::Map<const rotary::RowMatrix<T>> x(in, tokens * heads, head_dim);
  Eigen::Map<rotary::RowMatrix<T>> y(out, tokens * heads, head_dim);
  if constexpr (Checked)
    rotary::apply(rope, x, y, positions, heads);
  else
    rotary::unchecked::apply(rope, x, y, positions, heads);
}

// The public unchecked entry point: whatever kernel it dispatches to. Fused shapes: two calls, the
// query block then the key block. Checked: the checked entry point, plain shapes only.
template <class T, bool Checked = false>
Runner prepare_dispatch(const Case<T>& c) {
  const Case<T> k = c;
  return [k] {
    const Shape& s = k.shape;
    apply_rows<Checked>(*k.rope, k.in, k.out, s.tokens, s.q_heads(), s.head_dim, k.positions);
    if (s.fused()) apply_rows(*k.rope, k.in + k.k_offset(), k.out + k.k_offset(), s.tokens, s.kv_heads, s.head_dim);
  };
}

// The scattered positions of a batch of `tokens` sequences decoding one token each, over a cache
// of `cache_size` rows (the same values for every dtype and pairing).
std::vector<std::int32_t> scattered_positions(std::int64_t tokens, std::int64_t cache_size) {
  std::mt19937 rng(kScatteredSeed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(cache_size - 1));
  std::vector<std::int32_t> p(static_cast<std::size_t>(tokens));
  for (std::int32_t& v : p) v = dist(rng);
  return p;
}

// dispatch (or checked) with each token at its scattered position; the array lives in the runner.
template <class T, bool Checked>
Runner prepare_scattered(const Case<T>& c) {
  auto positions =
      std::make_shared<const std::vector<std::int32_t>>(scattered_positions(c.shape.tokens, c.rope->cache().size()));
  Case<T> k = c;
  k.positions = rotary::Positions(*positions);
  return [k, positions] {
    apply_rows<Checked>(*k.rope, k.in, k.out, k.shape.tokens, k.shape.heads, k.shape.head_dim, k.positions);
  };
}

bool is_decode_shape(const Shape& s) { return s == kDecodeShape; }

// The same call with a cache-free Rope of the same spec (built here, outside timing).
template <class T>
Runner prepare_onthefly(const Case<T>& c) {
  auto rope = std::make_shared<const rotary::Rope<T>>(c.rope->spec(), rotary::OnTheFly{});
  Case<T> k = c;
  k.rope = rope.get();
  return [k, rope] { apply_rows(*k.rope, k.in, k.out, k.shape.tokens, k.shape.heads, k.shape.head_dim); };
}

// The same call through a caller's table (rotary::TableRope) holding the Rope's own rows, so the bits
// are the same: table_vllm views the cache itself as vLLM's cat(cos, sin) rows (read in place);
// table_separate holds separate cos and sin copies, ONNX-style (rows gathered per block).
template <class T>
Runner prepare_table_vllm(const Case<T>& c) {
  using C = rotary::compute_t<T>;
  auto rope = std::make_shared<const rotary::TableRope<T, C>>(c.rope->head_dim(), c.rope->rotary_dim(),
                                                              c.rope->pairing(), rotary::table_view(c.rope->cache()));
  const Case<T> k = c;
  return [k, rope] { apply_rows(*rope, k.in, k.out, k.shape.tokens, k.shape.heads, k.shape.head_dim); };
}

template <class T>
Runner prepare_table_separate(const Case<T>& c) {
  using C = rotary::compute_t<T>;
  const auto& cache = c.rope->cache();
  const std::int64_t h = cache.pairs();
  auto tables = std::make_shared<std::pair<std::vector<C>, std::vector<C>>>();
  for (std::int64_t r = 0; r < cache.size(); ++r) {
    tables->first.insert(tables->first.end(), cache.row_at(r), cache.row_at(r) + h);
    tables->second.insert(tables->second.end(), cache.row_at(r) + h, cache.row_at(r) + 2 * h);
  }
  auto rope = std::make_shared<const rotary::TableRope<T, C>>(
      c.rope->head_dim(), c.rope->rotary_dim(), c.rope->pairing(),
      rotary::CosSinTableView<C>::separate(tables->first.data(), tables->second.data(), cache.size(), h));
  const Case<T> k = c;
  return [k, rope, tables] { apply_rows(*rope, k.in, k.out, k.shape.tokens, k.shape.heads, k.shape.head_dim); };
}

// Fused q+k: one checked rotary::apply_qk out of place (its checks are O(1) for contiguous positions).
template <class T>
Runner prepare_dispatch_qk(const Case<T>& c) {
  const Case<T> k = c;
  return [k] {
    const Shape& s = k.shape;
    Eigen::Map<const rotary::RowMatrix<T>> q_in(k.in, s.tokens * s.q_heads(), s.head_dim);
    Eigen::Map<rotary::RowMatrix<T>> q_out(k.out, s.tokens * s.q_heads(), s.head_dim);
    Eigen::Map<const rotary::RowMatrix<T>> k_in(k.in + k.k_offset(), s.tokens * s.kv_heads, s.head_dim);
    Eigen::Map<rotary::RowMatrix<T>> k_out(k.out + k.k_offset(), s.tokens * s.kv_heads, s.head_dim);
    rotary::apply_qk(*k.rope, q_in, q_out, k_in, k_out, rotary::Positions::contiguous(0), s.q_heads(),
                     s.kv_heads);
  };
}

// The textbook form: y = R_m x per row, with R_m the explicit head_dim x head_dim rotation matrix
// of token m (built from the cache's own cos/sin, so it rotates by the same angles).
template <class T>
bool matrix_fits(const Shape& s) {
  constexpr double kMaxBytes = 256.0 * 1024 * 1024;
  const double bytes = static_cast<double>(s.tokens) * static_cast<double>(s.head_dim) *
                       static_cast<double>(s.head_dim) * static_cast<double>(sizeof(T));
  return s.tokens <= 512 && bytes < kMaxBytes;  // beyond 512 tokens it only costs suite time
}

template <class T>
Runner prepare_matrix(const Case<T>& c) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const auto& cache = c.rope->cache();
  const std::int64_t h = cache.pairs();
  auto matrices = std::make_shared<std::vector<Matrix>>();
  matrices->reserve(static_cast<std::size_t>(c.shape.tokens));
  std::vector<double> cos_row(static_cast<std::size_t>(h));
  std::vector<double> sin_row(static_cast<std::size_t>(h));
  for (std::int64_t t = 0; t < c.shape.tokens; ++t) {
    const auto* row = cache.row(t);
    for (std::int64_t j = 0; j < h; ++j) {
      cos_row[static_cast<std::size_t>(j)] = static_cast<double>(row[j]);
      sin_row[static_cast<std::size_t>(j)] = static_cast<double>(row[h + j]);
    }
    matrices->push_back(
        rotary::reference::rotation_matrix_from(cos_row, sin_row, c.shape.head_dim, c.pairing).template cast<T>());
  }
  const Case<T> k = c;
  return [k, matrices] {
    const Index d = k.shape.head_dim;
    for (std::int64_t t = 0; t < k.shape.tokens; ++t) {
      const Matrix& r = (*matrices)[static_cast<std::size_t>(t)];
      for (std::int64_t head = 0; head < k.shape.heads; ++head) {
        const Index offset = (t * k.shape.heads + head) * d;
        Eigen::Map<const Vector> x(k.in + offset, d);
        Eigen::Map<Vector> y(k.out + offset, d);
        y.noalias() = r * x;
      }
    }
  };
}

// The Eigen array expression a user would write: per token, the heads x head_dim block, with the
// token's cos/sin rows broadcast over its heads. Half-split works on the left/right column halves,
// interleaved on strided maps of the even and odd columns.
template <class T>
Runner prepare_eigen_expr(const Case<T>& c) {
  using RowArray = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto& cache = c.rope->cache();
  const Index h = cache.pairs();
  if (2 * h != c.shape.head_dim) {
    std::fprintf(stderr, "rotary_bench: eigen_expr assumes rotary_dim == head_dim\n");
    std::exit(EXIT_FAILURE);
  }
  // C(t, j) = cos of token t, pair j; S likewise (a user's own tables, tokens x head_dim/2).
  auto table = std::make_shared<std::pair<RowArray, RowArray>>(RowArray(c.shape.tokens, h),
                                                                RowArray(c.shape.tokens, h));
  for (Index t = 0; t < c.shape.tokens; ++t) {
    table->first.row(t) = Eigen::Map<const RowArray>(cache.cos(t), 1, h);
    table->second.row(t) = Eigen::Map<const RowArray>(cache.sin(t), 1, h);
  }
  const Case<T> k = c;
  if (c.pairing == Pairing::half_split) {
    return [k, table, h] {
      const Index heads = k.shape.heads;
      const Index d = k.shape.head_dim;
      for (Index t = 0; t < k.shape.tokens; ++t) {
        Eigen::Map<const RowArray> x(k.in + t * heads * d, heads, d);
        Eigen::Map<RowArray> y(k.out + t * heads * d, heads, d);
        const auto cos_t = table->first.row(t);
        const auto sin_t = table->second.row(t);
        y.leftCols(h) = x.leftCols(h).rowwise() * cos_t - x.rightCols(h).rowwise() * sin_t;
        y.rightCols(h) = x.rightCols(h).rowwise() * cos_t + x.leftCols(h).rowwise() * sin_t;
      }
    };
  }
  return [k, table, h] {
    using Stride = Eigen::Stride<Eigen::Dynamic, 2>;  // outer: next head row; inner: every 2nd
    using ConstPairs = Eigen::Map<const RowArray, 0, Stride>;
    using Pairs = Eigen::Map<RowArray, 0, Stride>;
    const Index heads = k.shape.heads;
    const Index d = k.shape.head_dim;
    const Stride stride(d, 2);
    for (Index t = 0; t < k.shape.tokens; ++t) {
      const T* x = k.in + t * heads * d;
      T* y = k.out + t * heads * d;
      ConstPairs x_even(x, heads, h, stride);
      ConstPairs x_odd(x + 1, heads, h, stride);
      Pairs y_even(y, heads, h, stride);
      Pairs y_odd(y + 1, heads, h, stride);
      const auto cos_t = table->first.row(t);
      const auto sin_t = table->second.row(t);
      y_even = x_even.rowwise() * cos_t - x_odd.rowwise() * sin_t;
      y_odd = x_odd.rowwise() * cos_t + x_even.rowwise() * sin_t;
    }
  };
}

// Whether the x86 kernels are registered for storage type T (see ROTARY_BENCH_X86_HALF).
template <class T>
constexpr bool kX86Impls = std::is_same_v<T, float> || std::is_same_v<T, double> || ROTARY_BENCH_X86_HALF != 0;

// The kernel of kIsaTable's row I for T (the registry's), named as the ISA: scalar is the reference
// the others must equal bit for bit; a row this build has no kernel for (or, see kX86Impls, does not
// benchmark) is left out; runs_on asks the CPU.
template <class T, std::size_t I>
void add_isa_impl(std::vector<Impl<T>>& t) {
  constexpr rotary::IsaInfo row = rotary::kIsaTable[I];
  constexpr rotary::detail::Kernel<T> kernel = rotary::detail::kernel_for<T>(row.isa);
  constexpr bool x86 = row.isa == rotary::Isa::avx2 || row.isa == rotary::Isa::avx512;
  if constexpr (kernel != nullptr && (!x86 || kX86Impls<T>)) {
    const bool scalar = row.isa == rotary::Isa::scalar;
    bool (*runs_on)(const Shape&) = nullptr;
    if (!scalar) runs_on = [](const Shape&) { return rotary::kIsaTable[I].runs(); };
    t.push_back({row.name.data(), &prepare_kernel<T, kernel>, scalar ? Expect::reference : Expect::bit_exact,
                 kPlain, runs_on});
  }
}

template <class T, std::size_t... I>
void add_isa_impls(std::vector<Impl<T>>& t, std::index_sequence<I...>) {
  (add_isa_impl<T, I>(t), ...);
}

// Every implementation benchmarked for dtype T, in the order the tables list them. runs_on also
// guards the startup check, so an ISA this CPU lacks is neither checked nor run.
template <class T>
std::vector<Impl<T>> make_impls() {
  std::vector<Impl<T>> t;
  t.push_back({"memcpy", &prepare_memcpy<T>, Expect::copy, kEvery, nullptr});
  t.push_back({"copy_loop", &prepare_copy_loop<T>, Expect::copy, kPlain, &runs_copy_loop<RoundTrip::none>});
  if constexpr (round_trip_of<T>() != RoundTrip::none)
    t.push_back({"convert_loop", &prepare_copy_loop<T, round_trip_of<T>()>, Expect::copy, kPlain,
                 &runs_copy_loop<round_trip_of<T>()>});
  if constexpr (std::is_same_v<T, float>) {
    t.push_back({"matrix", &prepare_matrix<T>, Expect::close, kPlain, &matrix_fits<T>});
    t.push_back({"eigen_expr", &prepare_eigen_expr<T>, Expect::close, kPlain, nullptr});
  }
  add_isa_impls<T>(t, std::make_index_sequence<rotary::kIsaCount>{});
  t.push_back({"dispatch", &prepare_dispatch<T>, Expect::bit_exact, kEvery, nullptr});
  t.push_back({"checked", &prepare_dispatch<T, true>, Expect::bit_exact, kPlain, &is_decode_shape});
  t.push_back({"onthefly", &prepare_onthefly<T>, Expect::close, kPlain, nullptr});
  t.push_back({"table_vllm", &prepare_table_vllm<T>, Expect::bit_exact, kPlain, nullptr});
  t.push_back({"table_separate", &prepare_table_separate<T>, Expect::bit_exact, kPlain, nullptr});
  t.push_back({"dispatch_qk", &prepare_dispatch_qk<T>, Expect::bit_exact, kFused, nullptr});
  t.push_back({"dispatch_scattered", &prepare_scattered<T, false>, Expect::bit_exact, kScattered, nullptr});
  t.push_back({"checked_scattered", &prepare_scattered<T, true>, Expect::bit_exact, kScattered, nullptr});
  return t;
}

template <class T>
const std::vector<Impl<T>>& impls() {
  static const std::vector<Impl<T>> table = make_impls<T>();
  return table;
}

// ---- startup check: every implementation computes what the scalar kernel computes ------------

template <class T>
void check_dtype(const char* dtype) {
  // One small shape per head_dim and kind (plain, fused) of the registered shapes.
  std::vector<Shape> shapes;
  for (const Shape& s : kShapes) {
    const Shape small = s.fused() ? Shape{17, 5, s.head_dim, 2} : Shape{17, 3, s.head_dim, 0};
    const bool seen = std::any_of(shapes.begin(), shapes.end(), [&small](const Shape& x) {
      return x.head_dim == small.head_dim && x.kv_heads == small.kv_heads;
    });
    if (!seen) shapes.push_back(small);
  }
  // The decode rows at their own (small) shapes: `checked` runs on the decode shape only, the
  // scattered impls on kScatteredShape only.
  shapes.push_back(kDecodeShape);
  shapes.push_back(kScatteredShape);
  const auto& table = impls<T>();
  const auto reference = std::find_if(table.begin(), table.end(),
                                      [](const Impl<T>& i) { return i.expect == Expect::reference; });
  if (reference == table.end()) fail("no implementation is marked Expect::reference");
  // close: |y - y_ref| <= 16 ulp(1); inputs lie in [-1, 1], so outputs in [-sqrt 2, sqrt 2].
  const double tolerance = 16.0 * to_double(std::numeric_limits<T>::epsilon());

  for (const Pairing pairing : kPairings) {
    for (const Shape& shape : shapes) {
      const std::int64_t head_dim = shape.head_dim;
      const auto n = static_cast<std::size_t>(shape.elements());
      const rotary::Rope<T> rope(rotary::RotarySpec(head_dim, pairing), shape.tokens);
      rotary::detail::AlignedVector<T> in(n);
      rotary::detail::AlignedVector<T> want(n, T(0));
      rotary::detail::AlignedVector<T> got(n, T(0));
      fill_random(in.data(), n, 7u);
      reference->prepare(Case<T>{pairing, shape, &rope, in.data(), want.data()})();
      // The scattered impls against the reference at the same positions (the ones they draw).
      rotary::detail::AlignedVector<T> want_scattered(n, T(0));
      const std::vector<std::int32_t> scattered = scattered_positions(shape.tokens, rope.cache().size());
      if (shape_kind(shape) == kScattered)
        reference->prepare(Case<T>{pairing, shape, &rope, in.data(), want_scattered.data(), scattered})();

      for (const Impl<T>& impl : table) {
        if (impl.expect == Expect::reference) continue;
        if (!impl.registered_on(shape)) continue;
        std::fill(got.begin(), got.end(), T(0));
        impl.prepare(Case<T>{pairing, shape, &rope, in.data(), got.data()})();
        const rotary::detail::AlignedVector<T>& expected =
            impl.expect == Expect::copy ? in : impl.shapes == kScattered ? want_scattered : want;
        for (std::size_t i = 0; i < n; ++i) {
          const double g = to_double(got[i]);
          const double e = to_double(expected[i]);
          const bool ok = impl.expect == Expect::close
                              ? std::fabs(g - e) <= tolerance
                              : same_bits(got[i], expected[i]);
          if (!ok) {
            const auto d = static_cast<std::size_t>(head_dim);
            char message[512];
            std::snprintf(message, sizeof message,
                          "%s/%s/%s, %lld tokens x %lld heads (%lld of them key heads) x head_dim %lld: "
                          "element %zu (row %zu, column %zu) is %.9g, %s %.9g (%s)",
                          rotary::to_string(pairing).data(), dtype, impl.name,
                          static_cast<long long>(shape.tokens), static_cast<long long>(shape.heads),
                          static_cast<long long>(shape.kv_heads), static_cast<long long>(head_dim), i,
                          i / d, i % d, g, impl.expect == Expect::copy ? "input" : reference->name, e,
                          impl.expect == Expect::close ? "beyond tolerance" : "not bit-identical");
            fail(message);
          }
        }
      }
    }
  }
}

// ---- registration ---------------------------------------------------------------------------

// kShapes, then the batched-decode shape.
std::vector<Shape> kernel_shapes() {
  std::vector<Shape> s(std::begin(kShapes), std::end(kShapes));
  s.push_back(kScatteredShape);
  return s;
}

template <class T>
void run_case(benchmark::State& state, int id, std::size_t impl_index, Pairing pairing, Shape shape) {
  const Impl<T>& impl = impls<T>()[impl_index];
  run_prepared<T>(state, id, shape.elements(), shape.elements(), [&](const T* in, T* out) {
    return impl.prepare(Case<T>{pairing, shape, &rope_for<T>(pairing, shape.head_dim), in, out});
  });
}

// Key cases (see key_repetitions()): the key shapes' key impls, registered in interleaved rounds
// over the shape's key impls (memcpy, dispatch, ... memcpy, dispatch, ...).
bool is_key_shape(const Shape& s) {
  const Shape key[] = {kDecodeShape, kKeyShape, kDramShape, kGqaShape, kScatteredShape};
  return std::find(std::begin(key), std::end(key), s) != std::end(key);
}

bool is_key_impl(const std::string& impl) {
  return impl == "memcpy" || impl == "copy_loop" || impl == "convert_loop" || impl == "dispatch" ||
         impl == "matrix" || impl == "onthefly" || impl == "dispatch_qk" || impl == "table_vllm" ||
         impl == "table_separate" || impl == "checked" || impl == "dispatch_scattered" ||
         impl == "checked_scattered";
}

template <class T>
void register_dtype(const char* dtype) {
  check_dtype<T>(dtype);
  const auto& table = impls<T>();
  for (const Pairing pairing : kPairings) {
    for (const Shape& shape : kernel_shapes()) {
      const int rounds = is_key_shape(shape) ? key_repetitions() : 1;
      for (int round = 0; round < rounds; ++round) {
        for (std::size_t i = 0; i < table.size(); ++i) {
          const Impl<T>& impl = table[i];
          if (!impl.registered_on(shape)) continue;
          if (round > 0 && !is_key_impl(impl.name)) continue;
          const CaseInfo info{std::string(rotary::to_string(pairing)), dtype, impl.name, shape, sizeof(T),
                              std::string(), 0};
          register_case(info, [i, pairing, shape](benchmark::State& state, int id) {
            run_case<T>(state, id, i, pairing, shape);
          });
        }
      }
    }
  }
}

}  // namespace

void register_kernel_cases() {
  for_each_dtype([](const auto& dtype) { register_dtype<typename std::decay_t<decltype(dtype)>::type>(dtype.name); });
}

}  // namespace rotary_bench
