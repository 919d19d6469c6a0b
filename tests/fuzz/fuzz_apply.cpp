// fuzz_apply: differential fuzzer for the single-call entry points of apply.hpp.
//
// Each input describes one call: storage type (f32/f64/f16/bf16), pairing, head_dim (odd ones too)
// and rotary_dim (full or partial), a scaling rule with its parameters (scaling.hpp), per-pair
// factors and alpha/rho, tokens, query heads and optional key heads (MHA/GQA/MQA, fused q+k), padded
// token-major or head-major strides, element offsets (unaligned views), separate q/k buffers or
// slices of one QKV buffer, in or out of place, positions (contiguous start, int32 or int64 arrays,
// small or huge), direction, a range cache, a listed cache or cache-free rows, an optional serial
// ParallelFor splitting the tokens, and the entry point (strided, fused, Eigen, checked or
// unchecked). Then:
//   1. every supported ISA (set_max_isa) gives the scalar kernel's result bit for bit (a NaN where
//      the scalar kernel gives NaN only has to be NaN), as tests/kernels/test_simd.cpp asserts;
//   2. the scalar result equals the reference rotation: pass-through coordinates bit for bit, rotated
//      ones (a) within rotation_tolerance (1 ulp of the compute type of |x0 c| + |x1 s|, plus 1/2 ulp
//      of f16/bf16 storage) of the long double rotation by the cos/sin row the kernel used, and (b)
//      within that plus (|x0| + |x1|) * e_cs of the rotation by long double cos/sin of m*theta_j times
//      the attention factor, where e_cs = 3 ulp_C(attention factor) + factor * (1e-12 + |m| theta_j
//      2^-63 + 2^-52) bounds one cos/sin entry (1/2 ulp rounding, 1 ulp at near-ties for cache-free
//      rows, their double recurrence drift < 1e-12, and the long double angle's own rounding; (b) is
//      skipped where that angle error exceeds 1e-6). On up to two tokens x two heads the same bounds
//      are checked through the explicit matrices of reference.hpp (rotation_matrix_from with the
//      kernel's row, rotation_matrix from theta), multiplied out in long double;
//   3. nothing outside the output rows changes (sentinels around and between rows, const inputs);
//   4. a call split by the ParallelFor equals the unsplit call bit for bit (cache-free rows too:
//      they are anchored at fixed 32-token blocks, not at the split).
// Some inputs instead break one argument in a way that is certainly invalid (a position outside the
// cache or negative, a wrong position count, overlapping rows, partial input/output overlap, q and k
// sharing rows, mismatched layouts, negative tokens or strides, null data, a null positions array, a
// view too large for any address space): the checked entry point must throw rotary::error and leave
// every buffer untouched.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using rotary::Direction;
using rotary::Pairing;
using rotary::Positions;
using rotary::StridedLayout;
using namespace rotary_fuzz;

enum class Entry { strided, strided_unchecked, qk_strided, qk_strided_unchecked, eigen, eigen_qk };
enum class CacheMode { range, listed, on_the_fly };
enum class Breakage {
  none,
  position_outside_cache,
  negative_position,
  position_count,
  zero_heads,
  rows_overlap,
  partial_in_out_overlap,
  q_k_share_rows,
  layout_mismatch,
  negative_tokens,
  negative_stride,
  start_overflow,
  view_too_large,
  null_data,
  null_positions,  // drawn through null_data (see apply_breakage), so kBreakages stays 14
};
constexpr int kBreakages = 14;      // kinds draw_breakage picks from (older seeds decode as before)
constexpr int kBreakageKinds = 15;  // every kind, for the rejection report

const char* name(Breakage b) {
  static const char* const names[] = {"none",
                                      "position_outside_cache",
                                      "negative_position",
                                      "position_count",
                                      "zero_heads",
                                      "rows_overlap",
                                      "partial_in_out_overlap",
                                      "q_k_share_rows",
                                      "layout_mismatch",
                                      "negative_tokens",
                                      "negative_stride",
                                      "start_overflow",
                                      "view_too_large",
                                      "null_data",
                                      "null_positions"};
  return names[static_cast<int>(b)];
}

// What the inputs exercised, printed at exit when ROTARY_FUZZ_STATS is set (to see that every
// breakage and mode is reached, and what the library said).
struct Stats {
  long valid = 0;
  long by_entry[6] = {};
  long by_cache[3] = {};
  Rejections<Breakage, kBreakageKinds> rejected{name};
  ~Stats() {
    if (std::getenv("ROTARY_FUZZ_STATS") == nullptr) return;
    std::fprintf(stderr, "valid calls %ld; entries", valid);
    for (const long n : by_entry) std::fprintf(stderr, " %ld", n);
    std::fprintf(stderr, "; caches %ld %ld %ld\n", by_cache[0], by_cache[1], by_cache[2]);
    rejected.print();
  }
};
Stats stats;

// Where one tensor's input and output rows live: buffer index, element offset, strides.
struct View {
  int buf = 0;
  std::ptrdiff_t off = 0;
  std::ptrdiff_t ts = 0;
  std::ptrdiff_t hs = 0;
  bool null = false;  // pass nullptr (breakage)
};

struct Stream {
  std::int64_t heads = 0;
  std::int64_t tokens = 0;  // as passed (may differ from the call's for a breakage)
  View in;
  View out;
};

template <class T>
struct Case {
  rotary::RotarySpec spec;
  std::string rule;
  rotary::Frequencies freqs;
  CacheMode cache_mode = CacheMode::range;
  std::int64_t tokens = 0;
  Stream q;
  Stream k;  // k.heads == 0: no key
  Direction dir = Direction::forward;
  Entry entry = Entry::strided;
  Positions::Kind pos_kind = Positions::Kind::contiguous;
  std::int64_t start = 0;
  std::vector<std::int32_t> p32;
  std::vector<std::int64_t> p64;
  std::vector<std::int64_t> pos;  // the position of every token (what the harness expects)
  bool null_positions = false;    // pass a null array of tokens values (breakage)
  Breakage breakage = Breakage::none;
  int parts = 0;
  std::vector<Buffer<T>> bufs;

  Positions positions() const {
    if (null_positions && pos_kind == Positions::Kind::int32)
      return Positions(static_cast<const std::int32_t*>(nullptr), tokens);
    if (null_positions) return Positions(static_cast<const std::int64_t*>(nullptr), tokens);
    if (pos_kind == Positions::Kind::int32) return Positions(p32);
    if (pos_kind == Positions::Kind::int64) return Positions(p64);
    return Positions::contiguous(start);
  }
  bool fused() const {
    return entry == Entry::qk_strided || entry == Entry::qk_strided_unchecked || entry == Entry::eigen_qk;
  }

  std::string describe() const {
    char b[512];
    std::snprintf(
        b, sizeof b,
        "%s %s head_dim %lld rotary_dim %lld rule %s tokens %lld q_heads %lld k_heads %lld entry %d "
        "cache %d positions %d start %lld dir %s parts %d q{in buf %d off %td ts %td hs %td, out buf %d "
        "off %td ts %td hs %td} breakage %s",
        std::string(rotary::dtype_name<T>()).c_str(), std::string(rotary::to_string(spec.pairing)).c_str(),
        static_cast<long long>(spec.head_dim), static_cast<long long>(spec.effective_rotary_dim()),
        rule.c_str(), static_cast<long long>(tokens), static_cast<long long>(q.heads),
        static_cast<long long>(k.heads), static_cast<int>(entry), static_cast<int>(cache_mode),
        static_cast<int>(pos_kind), static_cast<long long>(start),
        dir == Direction::forward ? "forward" : "inverse", parts, q.in.buf, q.in.off, q.in.ts, q.in.hs,
        q.out.buf, q.out.off, q.out.ts, q.out.hs, name(breakage));
    return b;
  }
};

// ---- building a case ----------------------------------------------------------------------------

// Strides of a tokens x heads view with rows of head_dim: dense, padded token-major or head-major;
// a stride whose count is <= 1 may be 0.
void draw_strides(Source& in, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                  bool token_major_dense_rows, View& v) {
  const std::ptrdiff_t row =
      head_dim + (in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 9));
  if (token_major_dense_rows) {  // Eigen rows: token stride = heads * row stride
    v.hs = row;
    v.ts = heads * row;
    return;
  }
  const std::ptrdiff_t pad = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 17);
  if (in.ConsumeBool()) {
    v.hs = row;
    v.ts = heads * row + pad;
  } else {
    v.ts = row;
    v.hs = std::max<std::int64_t>(tokens, 1) * row + pad;
  }
  if (tokens <= 1 && in.ConsumeIntegralInRange<int>(0, 3) == 0) v.ts = 0;
  if (heads == 1 && in.ConsumeIntegralInRange<int>(0, 3) == 0) v.hs = 0;
}

template <class T>
int new_buffer(Case<T>& c, std::size_t size) {
  c.bufs.emplace_back(size);
  return static_cast<int>(c.bufs.size()) - 1;
}

// Separate buffers for one stream's input and output (or in place).
template <class T>
void place_stream(Source& in, Case<T>& c, Stream& s, bool in_place, bool eigen) {
  const std::int64_t d = c.spec.head_dim;
  draw_strides(in, c.tokens, s.heads, d, eigen, s.in);
  s.in.off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 15);
  s.in.buf = new_buffer(
      c, static_cast<std::size_t>(s.in.off + span_of(c.tokens, s.heads, s.in.ts, s.in.hs, d) + kSlack));
  if (in_place) {
    s.out = s.in;
    return;
  }
  draw_strides(in, c.tokens, s.heads, d, eigen, s.out);
  s.out.off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 15);
  s.out.buf = new_buffer(
      c, static_cast<std::size_t>(s.out.off + span_of(c.tokens, s.heads, s.out.ts, s.out.hs, d) + kSlack));
}

// q and k as head slices of one QKV buffer per token ([tokens][q heads, gap, k heads, v heads][row]),
// in place or out of place into a second buffer of the same kind.
template <class T>
void place_qkv(Source& in, Case<T>& c, bool in_place) {
  const std::int64_t d = c.spec.head_dim;
  const auto one = [&](View& q, View& k) {
    const std::ptrdiff_t row = d + (in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 5));
    const std::int64_t gap = in.ConsumeIntegralInRange<std::int64_t>(0, 2);
    const std::int64_t v = in.ConsumeIntegralInRange<std::int64_t>(0, 2);
    const std::ptrdiff_t ts =
        (c.q.heads + gap + c.k.heads + v) * row + in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 7);
    const std::ptrdiff_t off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 15);
    const bool k_first = in.ConsumeBool();
    q.ts = k.ts = ts;
    q.hs = k.hs = row;
    q.off = off + (k_first ? (c.k.heads + gap) * row : 0);
    k.off = off + (k_first ? 0 : (c.q.heads + gap) * row);
    q.buf = k.buf =
        new_buffer(c, static_cast<std::size_t>(off + std::max<std::int64_t>(c.tokens, 1) * ts + kSlack));
  };
  one(c.q.in, c.k.in);
  if (in_place) {
    c.q.out = c.q.in;
    c.k.out = c.k.in;
  } else {
    one(c.q.out, c.k.out);
  }
}

// Positions of the tokens; returns false if this input cannot make them.
template <class T>
void draw_positions(Source& in, Case<T>& c) {
  const int kind = in.ConsumeIntegralInRange<int>(0, 2);
  const bool huge = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  c.pos_kind = kind == 0   ? Positions::Kind::contiguous
               : kind == 1 ? Positions::Kind::int32
                           : Positions::Kind::int64;
  const std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
  if (c.pos_kind == Positions::Kind::contiguous) {
    const std::int64_t hi = huge ? max64 - c.tokens : 1 << 16;
    c.start = in.ConsumeIntegralInRange<std::int64_t>(0, std::max<std::int64_t>(hi, 0));
    for (std::int64_t t = 0; t < c.tokens; ++t) c.pos.push_back(c.start + t);
    return;
  }
  const std::int64_t hi =
      huge ? (c.pos_kind == Positions::Kind::int32 ? std::numeric_limits<std::int32_t>::max() : max64)
           : 1 << 16;
  const std::int64_t first = in.ConsumeIntegralInRange<std::int64_t>(0, hi);
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    std::int64_t p = first;
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:  // decode-like runs: the previous position plus one
        p = t == 0 ? first : std::min(c.pos.back(), hi - 1) + 1;
        break;
      case 1:  // repeated
        p = t == 0 ? first : c.pos.back();
        break;
      default:
        p = in.ConsumeIntegralInRange<std::int64_t>(0, hi);
    }
    c.pos.push_back(p);
  }
  for (const std::int64_t p : c.pos) {
    c.p32.push_back(static_cast<std::int32_t>(p));
    c.p64.push_back(p);
  }
}

template <class T>
void fill_inputs(Case<T>& c, Rng& rng, ValueMode mode) {
  const std::int64_t d = c.spec.head_dim;
  for (const Stream* s : {&c.q, &c.k}) {
    for (std::int64_t t = 0; t < c.tokens; ++t)
      for (std::int64_t h = 0; h < s->heads; ++h) {
        T* row =
            c.bufs[static_cast<std::size_t>(s->in.buf)].data.data() + s->in.off + t * s->in.ts + h * s->in.hs;
        for (std::int64_t j = 0; j < d; ++j) row[j] = random_value<T>(rng, mode);
      }
  }
}

// ---- the call ------------------------------------------------------------------------------------

template <class T>
T* ptr(std::vector<Buffer<T>>& bufs, const View& v) {
  if (v.null) return nullptr;
  return bufs[static_cast<std::size_t>(v.buf)].data.data() + v.off;
}

template <class T>
using RowMap = Eigen::Map<rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ConstRowMap = Eigen::Map<const rotary::RowMatrix<T>, 0, Eigen::OuterStride<>>;

template <class T>
void invoke(const Case<T>& c, Entry entry, const rotary::Rope<T>& rope, std::vector<Buffer<T>>& bufs,
            const rotary::ParallelFor& parallel) {
  const Positions pos = c.positions();
  const std::int64_t d = c.spec.head_dim;
  T* qi = ptr(bufs, c.q.in);
  T* qo = ptr(bufs, c.q.out);
  T* ki = c.k.heads > 0 ? ptr(bufs, c.k.in) : nullptr;
  T* ko = c.k.heads > 0 ? ptr(bufs, c.k.out) : nullptr;
  const StridedLayout qil{c.q.tokens, c.q.heads, c.q.in.ts, c.q.in.hs};
  const StridedLayout qol{c.tokens, c.q.heads, c.q.out.ts, c.q.out.hs};
  const StridedLayout kil{c.k.tokens, c.k.heads, c.k.in.ts, c.k.in.hs};
  const StridedLayout kol{c.tokens, c.k.heads, c.k.out.ts, c.k.out.hs};
  const bool in_place = qi == qo && c.q.in.ts == c.q.out.ts && c.q.in.hs == c.q.out.hs;
  switch (entry) {
    case Entry::strided:
      if (in_place && qil.tokens == qol.tokens) {
        rotary::apply_strided(rope, qo, qol, pos, {c.dir, parallel});
      } else {
        rotary::apply_strided(rope, qi, qil, qo, qol, pos, {c.dir, parallel});
      }
      break;
    case Entry::strided_unchecked:
      rotary::unchecked::apply_strided(rope, qi, qil, qo, qol, pos, {c.dir, parallel});
      break;
    case Entry::qk_strided:
      rotary::apply_qk_strided(rope, qi, qil, qo, qol, ki, kil, ko, kol, pos, {c.dir, parallel});
      break;
    case Entry::qk_strided_unchecked:
      rotary::unchecked::apply_qk_strided(rope, qi, qil, qo, qol, ki, kil, ko, kol, pos, {c.dir, parallel});
      break;
    case Entry::eigen: {
      RowMap<T> out(qo, c.tokens * c.q.heads, d,
                    Eigen::OuterStride<>(std::max<std::ptrdiff_t>(c.q.out.hs, d)));
      if (in_place) {
        rotary::apply(rope, out, pos, c.q.heads, {c.dir, parallel});
      } else {
        ConstRowMap<T> x(qi, c.tokens * c.q.heads, d,
                         Eigen::OuterStride<>(std::max<std::ptrdiff_t>(c.q.in.hs, d)));
        rotary::apply(rope, x, out, pos, c.q.heads, {c.dir, parallel});
      }
      break;
    }
    case Entry::eigen_qk: {
      const auto stride = [d](const View& v) {
        return Eigen::OuterStride<>(std::max<std::ptrdiff_t>(v.hs, d));
      };
      RowMap<T> q_out(qo, c.tokens * c.q.heads, d, stride(c.q.out));
      T* k_dummy = qo;  // k_heads == 0: k is ignored but must bind
      RowMap<T> k_out(ko ? ko : k_dummy, c.k.heads > 0 ? c.tokens * c.k.heads : 0, d, stride(c.k.out));
      if (in_place) {
        rotary::apply_qk(rope, q_out, k_out, pos, c.q.heads, c.k.heads, {c.dir, parallel});
      } else {
        ConstRowMap<T> q_in(qi, c.tokens * c.q.heads, d, stride(c.q.in));
        ConstRowMap<T> k_in(ki ? ki : k_dummy, c.k.heads > 0 ? c.tokens * c.k.heads : 0, d, stride(c.k.in));
        rotary::apply_qk(rope, q_in, q_out, k_in, k_out, pos, c.q.heads, c.k.heads, {c.dir, parallel});
      }
      break;
    }
  }
}

// ---- checking a result ---------------------------------------------------------------------------

struct PairIndex {
  std::int64_t first;
  std::int64_t second;
};
inline PairIndex pair_of(Pairing p, std::int64_t j, std::int64_t pairs) {
  return {rotary::reference::pair_first(p, j, pairs), rotary::reference::pair_second(p, j, pairs)};
}

// One rotated coordinate against a long double reference; `extra` widens the bound (cos/sin error).
template <class T>
void expect_close(const Case<T>& c, const char* what, std::int64_t t, std::int64_t h, std::int64_t i, T got,
                  long double ref, long double mag, long double extra) {
  if (!std::isfinite(static_cast<double>(mag)) || mag > 0.25L * Format<T>::max()) return;  // may overflow
  const double tol =
      rotation_tolerance<T>(static_cast<double>(mag), static_cast<double>(ref)) + static_cast<double>(extra);
  const double y = widen(got);
  if (!(std::fabs(static_cast<double>(static_cast<long double>(y) - ref)) <= tol))
    fail(
        "%s: token %lld head %lld coordinate %lld: got %.17g, reference %.20Lg, |diff| %.3g > tolerance "
        "%.3g\n  %s",
        what, static_cast<long long>(t), static_cast<long long>(h), static_cast<long long>(i), y, ref,
        std::fabs(static_cast<double>(static_cast<long double>(y) - ref)), tol, c.describe().c_str());
}

// The cos/sin rows the kernels used, token by token (rotary_dim values each, in C).
template <class T>
std::vector<rotary::compute_t<T>> kernel_rows(const Case<T>& c, const rotary::Rope<T>& rope) {
  using C = rotary::compute_t<T>;
  const std::int64_t r = rope.rotary_dim();
  std::vector<C> rows(static_cast<std::size_t>(c.tokens * r));
  if (!rope.on_the_fly()) {
    for (std::int64_t t = 0; t < c.tokens; ++t) {
      const C* row = rope.cache().row(c.pos[static_cast<std::size_t>(t)]);
      std::copy(row, row + r, rows.begin() + t * r);
    }
    return rows;
  }
  // Cache-free: blocks of kBlock tokens anchored at multiples of kBlock, however a ParallelFor
  // splits the call (apply.hpp, run_with_row_blocks).
  std::vector<double> scratch(static_cast<std::size_t>(r));
  constexpr std::int64_t kBlock = rotary::detail::RowGenerator<C>::kBlock;
  for (std::int64_t t = 0; t < c.tokens; t += kBlock)
    rope.row_generator().fill(c.positions(), t, std::min(c.tokens, t + kBlock), rows.data() + t * r,
                              scratch.data());
  return rows;
}

// Checks the scalar result against the references and the untouched regions (header, items 2-3).
template <class T>
void check_result(const Case<T>& c, const rotary::Rope<T>& rope, const std::vector<Buffer<T>>& initial,
                  const std::vector<Buffer<T>>& result, const std::vector<rotary::compute_t<T>>& rows) {
  const std::int64_t d = c.spec.head_dim;
  const std::int64_t r = rope.rotary_dim();
  const std::int64_t pairs = r / 2;
  const Pairing pairing = c.spec.pairing;
  const long double sign = c.dir == Direction::inverse ? -1.0L : 1.0L;
  const double af = c.freqs.attention_factor;
  using C = rotary::compute_t<T>;

  std::vector<std::vector<char>> written = element_flags(result);

  int matrix_checks = 0;
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    const std::int64_t m = c.pos[static_cast<std::size_t>(t)];
    const C* row = rows.data() + t * r;
    // (b): long double cos/sin of the angle, scaled, and the bound on one cached entry.
    std::vector<long double> cr(static_cast<std::size_t>(pairs)), sr(static_cast<std::size_t>(pairs));
    std::vector<long double> ecs(static_cast<std::size_t>(pairs));
    for (std::int64_t j = 0; j < pairs; ++j) {
      const double theta = c.freqs.theta[static_cast<std::size_t>(j)];
      const long double angle = static_cast<long double>(m) * static_cast<long double>(theta);
      const long double angle_error = std::fabs(angle) * 0x1.0p-63L + 0x1.0p-52L;
      cr[static_cast<std::size_t>(j)] = std::cos(angle) * af;
      sr[static_cast<std::size_t>(j)] = sign * std::sin(angle) * af;
      ecs[static_cast<std::size_t>(j)] = angle_error > 1e-6L
                                             ? -1.0L  // reference meaningless: skip (b)
                                             : 3.0L * ulp<C>(af) + af * (1e-12L + angle_error);
    }
    for (const Stream* s : {&c.q, &c.k}) {
      for (std::int64_t h = 0; h < s->heads; ++h) {
        const auto ib = static_cast<std::size_t>(s->in.buf);
        const auto ob = static_cast<std::size_t>(s->out.buf);
        const std::ptrdiff_t io = s->in.off + t * s->in.ts + h * s->in.hs;
        const std::ptrdiff_t oo = s->out.off + t * s->out.ts + h * s->out.hs;
        const T* x = initial[ib].data.data() + io;
        const T* y = result[ob].data.data() + oo;
        for (std::int64_t i = 0; i < d; ++i) {
          if (written[ob][static_cast<std::size_t>(oo + i)])
            fail("two output rows share element %td\n  %s", oo + i, c.describe().c_str());
          written[ob][static_cast<std::size_t>(oo + i)] = 1;
        }
        for (std::int64_t i = r; i < d; ++i)
          if (to_bits(y[i]) != to_bits(x[i]))
            fail("pass-through coordinate %lld of token %lld head %lld changed\n  %s",
                 static_cast<long long>(i), static_cast<long long>(t), static_cast<long long>(h),
                 c.describe().c_str());
        for (std::int64_t j = 0; j < pairs; ++j) {
          const PairIndex p = pair_of(pairing, j, pairs);
          const long double x0 = widen(x[p.first]);
          const long double x1 = widen(x[p.second]);
          if (!std::isfinite(static_cast<double>(x0)) || !std::isfinite(static_cast<double>(x1))) continue;
          // (a) the kernel's own row
          const long double cc = row[j];
          const long double ss = sign * static_cast<long double>(row[pairs + j]);
          const long double mag0 = std::fabs(x0 * cc) + std::fabs(x1 * ss);
          const long double mag1 = std::fabs(x1 * cc) + std::fabs(x0 * ss);
          expect_close(c, "row reference", t, h, p.first, y[p.first], x0 * cc - x1 * ss, mag0, 0.0L);
          expect_close(c, "row reference", t, h, p.second, y[p.second], x1 * cc + x0 * ss, mag1, 0.0L);
          // (b) long double cos/sin of m * theta_j
          const long double e = ecs[static_cast<std::size_t>(j)];
          if (e < 0) continue;
          const long double c2 = cr[static_cast<std::size_t>(j)];
          const long double s2 = sr[static_cast<std::size_t>(j)];
          const long double extra = (std::fabs(x0) + std::fabs(x1)) * e;
          expect_close(c, "angle reference", t, h, p.first, y[p.first], x0 * c2 - x1 * s2,
                       std::fabs(x0 * c2) + std::fabs(x1 * s2) + extra, extra);
          expect_close(c, "angle reference", t, h, p.second, y[p.second], x1 * c2 + x0 * s2,
                       std::fabs(x1 * c2) + std::fabs(x0 * s2) + extra, extra);
        }
        // The explicit matrices of reference.hpp on a few rows (they cost head_dim^2 each).
        if (matrix_checks < 4 && d <= 160 && (t == 0 || t == c.tokens - 1) && h < 2) {
          ++matrix_checks;
          std::vector<double> cos_row(static_cast<std::size_t>(pairs)),
              sin_row(static_cast<std::size_t>(pairs));
          for (std::int64_t j = 0; j < pairs; ++j) {
            cos_row[static_cast<std::size_t>(j)] = static_cast<double>(row[j]);
            sin_row[static_cast<std::size_t>(j)] =
                static_cast<double>(sign) * static_cast<double>(row[pairs + j]);
          }
          const Eigen::MatrixXd ra = rotary::reference::rotation_matrix_from(cos_row, sin_row, d, pairing);
          Eigen::MatrixXd rb = rotary::reference::rotation_matrix(c.freqs.theta, d, pairing, m);
          if (c.dir == Direction::inverse) rb.transposeInPlace();  // R_{-m} = R_m^T
          bool finite = true;
          for (std::int64_t i = 0; i < d; ++i) finite = finite && std::isfinite(widen(x[i]));
          if (!finite) continue;
          for (std::int64_t i = 0; i < d; ++i) {
            long double ya = 0, yb = 0, ma = 0, mb = 0, xs = 0;
            for (std::int64_t k = 0; k < d; ++k) {
              const long double xk = widen(x[k]);
              ya += static_cast<long double>(ra(i, k)) * xk;
              ma += std::fabs(static_cast<long double>(ra(i, k)) * xk);
              yb += static_cast<long double>(rb(i, k)) * af * xk;
              mb += std::fabs(static_cast<long double>(rb(i, k)) * af * xk);
              if (rb(i, k) != 0.0) xs += std::fabs(xk);
            }
            if (i >= r) {
              if (to_bits(y[i]) != to_bits(x[i]))
                fail("matrix: pass-through %lld changed\n  %s", static_cast<long long>(i),
                     c.describe().c_str());
              continue;
            }
            expect_close(c, "rotation_matrix_from", t, h, i, y[i], ya, ma, 0.0L);
            // rotation_matrix rounds cos/sin to double: one more 2^-52 per entry, inside e_cs.
            const std::int64_t j = pairing == Pairing::interleaved ? i / 2 : (i < pairs ? i : i - pairs);
            const long double e = ecs[static_cast<std::size_t>(j)];
            if (e >= 0) expect_close(c, "rotation_matrix", t, h, i, y[i], yb, mb + xs * e, xs * e);
          }
        }
      }
    }
  }
  expect_untouched_outside(c, written, result, initial);
}

// The rotated coordinates of every output row, per buffer.
template <class T>
std::vector<std::vector<char>> rotated_mask(const Case<T>& c, std::int64_t rotary_dim) {
  std::vector<std::vector<char>> mask = element_flags(c.bufs);
  for (const Stream* s : {&c.q, &c.k})
    for (std::int64_t t = 0; t < c.tokens; ++t)
      for (std::int64_t h = 0; h < s->heads; ++h)
        for (std::int64_t i = 0; i < rotary_dim; ++i)
          mask[static_cast<std::size_t>(s->out.buf)]
              [static_cast<std::size_t>(s->out.off + t * s->out.ts + h * s->out.hs + i)] = 1;
  return mask;
}

// Bits of two results, except that where `want` holds a NaN in a rotated coordinate, any NaN will do
// (NaN payloads are not part of the contract).
template <class T>
void expect_same_bits(const Case<T>& c, const char* what, const std::vector<Buffer<T>>& got,
                      const std::vector<Buffer<T>>& want, const std::vector<std::vector<char>>& rotated) {
  for (std::size_t b = 0; b < got.size(); ++b) {
    if (got[b].same_bits(want[b])) continue;
    for (std::size_t i = 0; i < got[b].data.size(); ++i) {
      const T g = got[b].data[i];
      const T w = want[b].data[i];
      if (to_bits(g) == to_bits(w)) continue;
      if (rotated[b][i] && is_nan(w) && is_nan(g)) continue;
      fail("%s: buffer %zu element %zu: %.17g (0x%llx) vs scalar %.17g (0x%llx)\n  %s", what, b, i, widen(g),
           static_cast<unsigned long long>(to_bits(g)), widen(w), static_cast<unsigned long long>(to_bits(w)),
           c.describe().c_str());
    }
  }
}

// ---- breaking one argument -----------------------------------------------------------------------

// Applies c.breakage if this case can express it; false if not (the input is then run as valid).
template <class T>
bool apply_breakage(Source& in, Case<T>& c, const rotary::Rope<T>& rope) {
  const std::int64_t d = c.spec.head_dim;
  const bool arrays = c.pos_kind != Positions::Kind::contiguous;
  switch (c.breakage) {
    case Breakage::none:
      return true;
    case Breakage::position_outside_cache: {
      if (rope.on_the_fly() || c.tokens == 0) return false;
      const auto& cache = rope.cache();
      std::int64_t bad = cache.end_position();  // the first position past a range cache
      if (!cache.is_range()) {
        bad = -1;
        for (std::int64_t p = cache.begin_position(); p < cache.end_position() && bad < 0; ++p)
          if (!cache.contains(p)) bad = p;
        if (bad < 0) bad = cache.end_position();
      }
      if (bad < 0 || bad == std::numeric_limits<std::int64_t>::max()) return false;
      if (!arrays) {
        const std::int64_t start = bad - in.ConsumeIntegralInRange<std::int64_t>(0, c.tokens - 1);
        if (start < 0) return false;
        c.start = start;  // the last token(s) fall outside
        return true;
      }
      if (c.pos_kind == Positions::Kind::int32 && bad > std::numeric_limits<std::int32_t>::max())
        return false;
      const auto t = static_cast<std::size_t>(in.ConsumeIntegralInRange<std::int64_t>(0, c.tokens - 1));
      c.p32[t] = static_cast<std::int32_t>(bad);
      c.p64[t] = bad;
      return true;
    }
    case Breakage::negative_position: {
      if (c.tokens == 0) return false;
      const std::int64_t neg =
          -in.ConsumeIntegralInRange<std::int64_t>(1, std::numeric_limits<std::int32_t>::max());
      if (!arrays) {
        c.start = neg;
        return true;
      }
      const auto t = static_cast<std::size_t>(in.ConsumeIntegralInRange<std::int64_t>(0, c.tokens - 1));
      c.p32[t] = static_cast<std::int32_t>(neg);
      c.p64[t] = neg;
      return true;
    }
    case Breakage::position_count:
      if (!arrays) return false;
      break_position_count(in, c.p32, c.p64);  // one per token: empty when there are no tokens
      return true;
    case Breakage::zero_heads:
      if (c.entry == Entry::eigen || c.entry == Entry::eigen_qk) return false;
      c.q.heads = 0;
      return true;
    case Breakage::rows_overlap: {
      // Two rows of q's input start less than head_dim apart: they overlap.
      if (c.entry == Entry::eigen || c.entry == Entry::eigen_qk || c.tokens == 0) return false;  // no rows
      if (c.tokens >= 2 && (c.q.heads == 1 || in.ConsumeBool())) {
        c.q.in.ts = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, d - 1);
      } else if (c.q.heads >= 2) {
        c.q.in.hs = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, d - 1);
      } else {
        return false;
      }
      if (c.q.out.buf == c.q.in.buf && c.q.out.off == c.q.in.off) c.q.out = c.q.in;  // keep in place in place
      return true;
    }
    case Breakage::partial_in_out_overlap: {
      // The output starts a few elements after the input, same strides: shared memory, not the same view.
      if (c.tokens == 0) return false;
      c.q.out = c.q.in;
      c.q.out.off += partial_overlap_shift(in, d);
      return true;
    }
    case Breakage::q_k_share_rows: {
      // k's output rows are q's first output rows (k_heads <= q_heads keeps them inside q's buffer).
      if (c.k.heads == 0 || c.tokens == 0 || !c.fused() || c.k.heads > c.q.heads) return false;
      c.k.out = c.q.out;
      return true;
    }
    case Breakage::layout_mismatch:
      if (c.entry == Entry::eigen || c.entry == Entry::eigen_qk) return false;
      c.q.tokens = c.tokens + (c.tokens > 0 && in.ConsumeBool() ? -1 : 1);
      return true;
    case Breakage::negative_tokens:
      if (c.entry == Entry::eigen || c.entry == Entry::eigen_qk) return false;
      c.tokens = -in.ConsumeIntegralInRange<std::int64_t>(1, 1000);
      c.q.tokens = c.k.tokens = c.tokens;
      return true;
    case Breakage::negative_stride:
      if (c.entry == Entry::eigen || c.entry == Entry::eigen_qk) return false;
      if (in.ConsumeBool()) {
        c.q.in.ts = -in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 1 << 20);
      } else {
        c.q.in.hs = -in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 1 << 20);
      }
      return true;
    case Breakage::start_overflow:
      if (arrays || c.tokens < 2 || !rope.on_the_fly()) return false;
      c.start =
          std::numeric_limits<std::int64_t>::max() - in.ConsumeIntegralInRange<std::int64_t>(0, c.tokens - 2);
      return true;
    case Breakage::view_too_large: {
      // A stride so large that the view spans more than any address space; no buffer can back it.
      if (c.entry == Entry::eigen || c.entry == Entry::eigen_qk || c.tokens < 2) return false;
      c.q.in.ts = huge_stride<T>(in);  // two tokens span more bytes than any object can
      c.q.in.hs = d;                   // rows of one token stay disjoint: only the size is wrong
      if (c.q.out.buf == c.q.in.buf && c.q.out.off == c.q.in.off) c.q.out = c.q.in;
      return true;
    }
    case Breakage::null_data:
      // Null data, or, with position arrays, one time in two (Eigen entry points: always) a null
      // positions array of one value per token: the check must not read through it.
      if (c.tokens == 0) return false;
      if (arrays && (c.entry == Entry::eigen || c.entry == Entry::eigen_qk || in.ConsumeBool())) {
        c.breakage = Breakage::null_positions;
        c.null_positions = true;
        return true;
      }
      if (c.entry == Entry::eigen || c.entry == Entry::eigen_qk) return false;
      c.q.in.null = true;
      return true;
    case Breakage::null_positions:
      return false;  // only through null_data
  }
  return false;
}

// ---- one input -----------------------------------------------------------------------------------

template <class T>
void run(Source& in) {
  using C = rotary::compute_t<T>;
  Case<T> c;
  c.spec = fuzz_spec(in, 140);
  c.freqs = fuzz_frequencies(in, c.spec, &c.rule);
  const int mode = in.ConsumeIntegralInRange<int>(0, 2);
  c.cache_mode = mode == 0 ? CacheMode::range : mode == 1 ? CacheMode::listed : CacheMode::on_the_fly;
  c.tokens = in.ConsumeIntegralInRange<std::int64_t>(0, in.ConsumeBool() ? 40 : 5);
  c.q.heads = in.ConsumeIntegralInRange<std::int64_t>(1, 8);
  c.entry = static_cast<Entry>(in.ConsumeIntegralInRange<int>(0, 5));
  if (c.fused()) c.k.heads = in.ConsumeIntegralInRange<std::int64_t>(0, 8);
  c.q.tokens = c.k.tokens = c.tokens;
  c.dir = in.ConsumeBool() ? Direction::inverse : Direction::forward;
  const bool in_place = in.ConsumeBool();
  const bool eigen = c.entry == Entry::eigen || c.entry == Entry::eigen_qk;
  if (c.k.heads > 0 && !eigen && in.ConsumeBool()) {
    place_qkv(in, c, in_place);
  } else {
    place_stream(in, c, c.q, in_place, eigen);
    if (c.k.heads > 0) place_stream(in, c, c.k, in_place, eigen);
  }
  draw_positions(in, c);
  c.parts = in.ConsumeIntegralInRange<int>(0, 4);
  c.breakage = draw_breakage<Breakage>(in, kBreakages);
  const ValueMode values = static_cast<ValueMode>(in.ConsumeIntegralInRange<int>(0, 2));
  Rng rng{in.ConsumeIntegral<std::uint64_t>()};

  // The rope: a range cache around the positions (when they are close together), the listed
  // positions (plus a few others), or cache-free.
  std::optional<rotary::Rope<T>> rope;
  if (c.cache_mode == CacheMode::range && c.tokens > 0) {
    const std::int64_t lo = *std::min_element(c.pos.begin(), c.pos.end());
    const std::int64_t hi = *std::max_element(c.pos.begin(), c.pos.end());
    if (hi - lo > (1 << 14) || hi == std::numeric_limits<std::int64_t>::max())
      c.cache_mode = CacheMode::listed;
  }
  if (c.cache_mode == CacheMode::on_the_fly) {
    rope.emplace(c.spec, c.freqs, rotary::OnTheFly{});
  } else if (c.cache_mode == CacheMode::listed) {
    std::vector<std::int64_t> listed = c.pos;
    for (int i = in.ConsumeIntegralInRange<int>(0, 3); i > 0; --i)
      listed.push_back(in.ConsumeIntegralInRange<std::int64_t>(0, 1 << 20));
    rope.emplace(c.spec, rotary::CosSinCache<C>::for_positions(c.freqs, listed));
  } else {
    std::int64_t lo = c.pos.empty() ? 0 : *std::min_element(c.pos.begin(), c.pos.end());
    std::int64_t hi = c.pos.empty() ? 0 : *std::max_element(c.pos.begin(), c.pos.end()) + 1;
    lo -= std::min<std::int64_t>(lo, in.ConsumeIntegralInRange<std::int64_t>(0, 3));
    if (hi < std::numeric_limits<std::int64_t>::max() - 3)
      hi += in.ConsumeIntegralInRange<std::int64_t>(0, 3);
    rope.emplace(c.spec, rotary::CosSinCache<C>(c.freqs, lo, hi));
  }

  fill_inputs(c, rng, values);
  const std::vector<Buffer<T>> initial = c.bufs;

  if (c.breakage != Breakage::none && !apply_breakage(in, c, *rope)) c.breakage = Breakage::none;
  if (describe_inputs()) std::fprintf(stderr, "case: %s\n", c.describe().c_str());
  if (c.breakage != Breakage::none) {
    // Checked entry points only; must throw rotary::error before touching any buffer.
    Entry entry = c.entry;
    if (entry == Entry::strided_unchecked) entry = Entry::strided;
    if (entry == Entry::qk_strided_unchecked) entry = Entry::qk_strided;
    std::vector<Buffer<T>> bufs = initial;
    ChunkedFor chunks{c.parts, {}};
    stats.rejected.expect(c, bufs, initial, [&] { invoke(c, entry, *rope, bufs, chunks.get()); });
    return;
  }
  c.breakage = Breakage::none;

  ++stats.valid;
  ++stats.by_entry[static_cast<int>(c.entry)];
  ++stats.by_cache[static_cast<int>(c.cache_mode)];

  // Every ISA, the same ParallelFor split; the first is scalar.
  const std::vector<std::vector<char>> rotated = rotated_mask(c, rope->rotary_dim());
  std::vector<Buffer<T>> scalar;
  for (const rotary::Isa isa : supported_isas()) {
    const IsaScope scope(isa);
    std::vector<Buffer<T>> bufs = initial;
    ChunkedFor chunks{c.parts, {}};
    expect_accepted(c, [&] { invoke(c, c.entry, *rope, bufs, chunks.get()); });
    if (isa == rotary::Isa::scalar) {
      scalar = std::move(bufs);
    } else {
      expect_same_bits(c, std::string(rotary::to_string(isa)).c_str(), bufs, scalar, rotated);
    }
  }
  check_result(c, *rope, initial, scalar, kernel_rows(c, *rope));

  // The split cannot matter (cache-free rows too are anchored at fixed blocks); compare with one
  // unsplit call on the default ISA.
  if (c.parts > 0) {
    std::vector<Buffer<T>> bufs = initial;
    invoke(c, c.entry, *rope, bufs, {});
    expect_same_bits(c, "unsplit", bufs, scalar, rotated);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Source in(data, size);
  with_dtype(draw_dtype(in), [&in](auto tag) { run<typename decltype(tag)::type>(in); });
  return 0;
}
