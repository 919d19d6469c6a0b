// fuzz_layouts: the batched entry points of layouts.hpp against per-token apply_strided calls.
//
// Each input describes one call of apply_batch / apply_qk_batch (BSHD, BHSD, SBHD, THD-as-BSHD or
// arbitrary nested strides with padding; dense convenience overloads, views, unchecked variants;
// in or out of place; q and k in separate buffers or as head slices of one QKV buffer) or of
// apply_varlen / apply_qk_varlen (packed tokens, int32 or int64 cu_seqlens with empty sequences),
// with SequencePositions start / starts / restart / per_token (contiguous, int32, int64 arrays) /
// context_parallel (contiguous and load-balanced splits), any storage type, any scaling rule, a
// range, listed or cache-free Rope, a forced ISA and an optional serial ParallelFor.
// The expected result is built token by token: the harness computes every token's position from the
// documented rules (its own code, not token_positions()) and rotates that token's heads with one
// apply_strided call of one token at Positions::contiguous(position). With a cache the batched call
// must give exactly those bits (a NaN where the reference has one may be any NaN); cache-free rows
// are anchored per block in the batched call but per token in the reference, so there each rotated
// coordinate may differ by the error of one cos/sin entry each (<= 2 ulp_C of the attention factor,
// plus 1e-12 relative for the double recurrence): |diff| <= (|x0|+|x1|)(4 ulp_C(af) + 1e-12 af) +
// 2 * rotation_tolerance. Nothing outside the output rows may change.
// Some inputs break one argument in a certainly invalid way (cu_seqlens not starting at 0,
// decreasing, or not ending at the token count; start offsets neither 1 nor one per sequence;
// context-parallel rank/ranks out of range or odd local lengths for the load-balanced split;
// per-token positions of the wrong count; a position outside the cache or negative; a head_dim,
// shape or stride that does not fit; rows that overlap; q and k sharing rows; input and output
// partially overlapping; q and k of different batch or length; a null per-token array or cu_seqlens):
// the checked entry point must throw rotary::error and leave every buffer untouched.
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

using rotary::BatchShape;
using rotary::BatchStrides;
using rotary::ContextSplit;
using rotary::Direction;
using rotary::Layout;
using rotary::Positions;
using rotary::SequencePositions;
using rotary::StridedLayout;
using namespace rotary_fuzz;

enum class Breakage {
  none,
  cu_first,
  cu_decreasing,
  cu_last,
  starts_count,
  cp_ranks,
  cp_rank,
  cp_odd_length,
  per_token_count,
  position_outside_cache,
  negative_start,
  head_dim_mismatch,
  negative_shape,
  negative_stride,
  rows_overlap,
  q_k_share_rows,
  partial_in_out_overlap,
  q_k_length_mismatch,
  varlen_token_mismatch,
  view_too_large,
  // Drawn through per_token_count and cu_last (see apply_breakage), so kBreakages stays 20:
  null_per_token,
  null_cu_seqlens,
};
constexpr int kBreakages = 20;      // kinds draw_breakage picks from (older seeds decode as before)
constexpr int kBreakageKinds = 22;  // every kind, for the rejection report

const char* name(Breakage b) {
  static const char* const names[] = {"none",
                                      "cu_first",
                                      "cu_decreasing",
                                      "cu_last",
                                      "starts_count",
                                      "cp_ranks",
                                      "cp_rank",
                                      "cp_odd_length",
                                      "per_token_count",
                                      "position_outside_cache",
                                      "negative_start",
                                      "head_dim_mismatch",
                                      "negative_shape",
                                      "negative_stride",
                                      "rows_overlap",
                                      "q_k_share_rows",
                                      "partial_in_out_overlap",
                                      "q_k_length_mismatch",
                                      "varlen_token_mismatch",
                                      "view_too_large",
                                      "null_per_token",
                                      "null_cu_seqlens"};
  return names[static_cast<int>(b)];
}

// What the inputs exercised, printed at exit when ROTARY_FUZZ_STATS is set.
struct Stats {
  long valid = 0;
  long varlen = 0;
  Rejections<Breakage, kBreakageKinds> rejected{name};
  ~Stats() {
    if (std::getenv("ROTARY_FUZZ_STATS") == nullptr) return;
    std::fprintf(stderr, "valid calls %ld (varlen %ld)\n", valid, varlen);
    rejected.print();
  }
};
Stats stats;

// One tensor's view: buffer, offset of element (0, 0, 0, 0), strides of batch, seq, head (varlen:
// seq = token stride, batch unused).
struct View {
  int buf = 0;
  std::ptrdiff_t off = 0;
  BatchStrides st;
  BatchShape shape;
};

enum class PosMode { start, starts, restart, per_token, context_parallel };

template <class T>
struct Case {
  rotary::RotarySpec spec;
  std::string rule;
  rotary::Frequencies freqs;
  int cache_mode = 0;  // 0 range, 1 listed, 2 cache-free
  bool varlen = false;
  bool dense_overload = false;
  bool unchecked = false;
  bool in_place = true;
  Layout layout = Layout::bshd;
  std::int64_t batch = 0, seq = 0, q_heads = 1, k_heads = 0;
  std::vector<std::int64_t> lengths;  // varlen: per sequence
  std::vector<std::int64_t> cu;
  bool cu32 = false;
  std::vector<std::int32_t> cu_32;
  bool null_cu = false;  // pass a null cu_seqlens of cu.size() values (breakage)
  View q_in, q_out, k_in, k_out;
  // positions
  PosMode pos_mode = PosMode::start;
  std::vector<std::int64_t> starts{0};
  std::int64_t per_token_start = 0;
  Positions::Kind per_token_kind = Positions::Kind::contiguous;
  std::vector<std::int32_t> p32;
  std::vector<std::int64_t> p64;
  bool null_per_token = false;  // pass a null per-token array of total() values (breakage)
  ContextSplit split = ContextSplit::contiguous;
  std::int64_t rank = 0, ranks = 1;
  Direction dir = Direction::forward;
  rotary::Isa isa = rotary::Isa::scalar;
  int parts = 0;
  Breakage breakage = Breakage::none;
  std::vector<Buffer<T>> bufs;

  std::int64_t total() const {
    if (!varlen) return batch * seq;
    std::int64_t n = 0;
    for (auto l : lengths) n += l;
    return n;
  }
  SequencePositions positions() const {
    switch (pos_mode) {
      case PosMode::start:
        return SequencePositions::start(starts[0]);
      case PosMode::starts:
        return SequencePositions::starts(starts);
      case PosMode::restart:
        return SequencePositions::restart();
      case PosMode::per_token:
        if (null_per_token && per_token_kind == Positions::Kind::int32)
          return SequencePositions::per_token(Positions(static_cast<const std::int32_t*>(nullptr), total()));
        if (null_per_token)
          return SequencePositions::per_token(Positions(static_cast<const std::int64_t*>(nullptr), total()));
        if (per_token_kind == Positions::Kind::int32) return SequencePositions::per_token(Positions(p32));
        if (per_token_kind == Positions::Kind::int64) return SequencePositions::per_token(Positions(p64));
        return SequencePositions::per_token(Positions::contiguous(per_token_start));
      default:
        return SequencePositions::context_parallel(split, rank, ranks, starts);
    }
  }
  std::string describe() const {
    char b[400];
    std::snprintf(
        b, sizeof b,
        "%s %s head_dim %lld rotary_dim %lld rule %s cache %d %s layout %s dense %d unchecked %d in_place %d "
        "batch %lld seq %lld q_heads %lld k_heads %lld pos_mode %d split %d rank %lld/%lld isa %s parts %d "
        "breakage %s",
        std::string(rotary::dtype_name<T>()).c_str(), std::string(rotary::to_string(spec.pairing)).c_str(),
        static_cast<long long>(spec.head_dim), static_cast<long long>(spec.effective_rotary_dim()),
        rule.c_str(), cache_mode, varlen ? "varlen" : "batch", std::string(rotary::to_string(layout)).c_str(),
        dense_overload, unchecked, in_place, static_cast<long long>(batch), static_cast<long long>(seq),
        static_cast<long long>(q_heads), static_cast<long long>(k_heads), static_cast<int>(pos_mode),
        static_cast<int>(split), static_cast<long long>(rank), static_cast<long long>(ranks),
        std::string(rotary::to_string(isa)).c_str(), parts, name(breakage));
    return b;
  }
};

// ---- the expected positions, from the documented rules ---------------------------------------------

// Position of local token t of sequence b (local length len), `index` its index in memory order
// (b*seq + t for batches, the packed index for varlen).
template <class T>
std::int64_t expected_position(const Case<T>& c, std::size_t b, std::int64_t t, std::int64_t len,
                               std::int64_t index) {
  const std::int64_t s = c.starts.size() == 1 ? c.starts[0] : c.starts[b];
  switch (c.pos_mode) {
    case PosMode::start:
      return c.starts[0] + t;
    case PosMode::starts:
      return s + t;
    case PosMode::restart:
      return t;
    case PosMode::per_token:
      if (c.per_token_kind == Positions::Kind::int32) return c.p32[static_cast<std::size_t>(index)];
      if (c.per_token_kind == Positions::Kind::int64) return c.p64[static_cast<std::size_t>(index)];
      return c.per_token_start + index;
    default:
      if (c.split == ContextSplit::contiguous)
        return s + c.rank * len + t;  // rank r holds [r*len, (r+1)*len)
      // load-balanced: 2*ranks chunks of len/2; rank r holds chunk r, then chunk 2*ranks-1-r
      return t < len / 2 ? s + c.rank * (len / 2) + t
                         : s + (2 * c.ranks - 1 - c.rank) * (len / 2) + (t - len / 2);
  }
}

// One token of the call: its position and where its q and k heads are.
struct Token {
  std::int64_t position;
  std::ptrdiff_t q_in, q_out, k_in, k_out;  // element offsets (within the views' buffers)
};

template <class T>
std::vector<Token> tokens_of(const Case<T>& c) {
  std::vector<Token> v;
  const auto add = [&](std::size_t b, std::int64_t t, std::int64_t len, std::int64_t index,
                       std::ptrdiff_t q_in, std::ptrdiff_t q_out, std::ptrdiff_t k_in, std::ptrdiff_t k_out) {
    v.push_back({expected_position(c, b, t, len, index), q_in, q_out, k_in, k_out});
  };
  if (c.varlen) {
    std::int64_t index = 0;
    for (std::size_t b = 0; b < c.lengths.size(); ++b)
      for (std::int64_t t = 0; t < c.lengths[b]; ++t, ++index)
        add(b, t, c.lengths[b], index, c.q_in.off + index * c.q_in.st.seq,
            c.q_out.off + index * c.q_out.st.seq, c.k_in.off + index * c.k_in.st.seq,
            c.k_out.off + index * c.k_out.st.seq);
    return v;
  }
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t t = 0; t < c.seq; ++t) {
      const auto at = [b, t](const View& w) { return w.off + b * w.st.batch + t * w.st.seq; };
      add(static_cast<std::size_t>(b), t, c.seq, b * c.seq + t, at(c.q_in), at(c.q_out), at(c.k_in),
          at(c.k_out));
    }
  return v;
}

// ---- building a case --------------------------------------------------------------------------------

template <class T>
int new_buffer(Case<T>& c, std::ptrdiff_t size) {
  c.bufs.emplace_back(static_cast<std::size_t>(size + kSlack));
  return static_cast<int>(c.bufs.size()) - 1;
}

std::ptrdiff_t batch_span(const BatchShape& s, const BatchStrides& st) {
  if (s.batch <= 0 || s.seq <= 0 || s.heads <= 0) return 0;
  return (s.batch - 1) * st.batch + (s.seq - 1) * st.seq + (s.heads - 1) * st.head + s.head_dim;
}

// Strides for a batch view: a dense layout, or the axes nested in a random order with padding.
BatchStrides draw_batch_strides(Source& in, const BatchShape& s, Layout layout, bool dense) {
  if (dense) return rotary::dense_strides(layout, s);
  std::ptrdiff_t reach =
      s.head_dim + (in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 5));
  std::ptrdiff_t* order[3];
  BatchStrides st;
  std::int64_t counts[3] = {s.batch, s.seq, s.heads};
  std::ptrdiff_t* axes[3] = {&st.batch, &st.seq, &st.head};
  int perm[3] = {0, 1, 2};
  for (int i = 2; i > 0; --i) std::swap(perm[i], perm[in.ConsumeIntegralInRange<int>(0, i)]);
  for (int i = 0; i < 3; ++i) order[i] = axes[perm[i]];
  for (int i = 0; i < 3; ++i) {
    *order[i] = reach;
    reach = reach * std::max<std::int64_t>(counts[perm[i]], 1) +
            (in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 7));
  }
  return st;
}

// q's (and k's) input and output views from view(heads), each its own buffer; in place: one view.
template <class T, class MakeView>
void place_views(Case<T>& c, const MakeView& view) {
  c.q_in = view(c.q_heads);
  c.q_out = c.in_place ? c.q_in : view(c.q_heads);
  if (c.k_heads > 0) {
    c.k_in = view(c.k_heads);
    c.k_out = c.in_place ? c.k_in : view(c.k_heads);
  }
}

template <class T>
void place_batch(Source& in, Case<T>& c) {
  const std::int64_t d = c.spec.head_dim;
  const bool dense = c.dense_overload || in.ConsumeBool();
  const bool qkv = c.k_heads > 0 && !c.dense_overload && in.ConsumeBool();
  const auto view = [&](std::int64_t heads) {
    View v;
    v.shape = BatchShape{c.batch, c.seq, heads, d};
    v.st = draw_batch_strides(in, v.shape, c.layout, dense);
    v.off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 15);
    v.buf = new_buffer(c, v.off + batch_span(v.shape, v.st));
    return v;
  };
  if (qkv) {  // [.., q heads | gap | k heads | v heads, head_dim] per token, same strides for q and k
    const auto fused = [&](View& q, View& k) {
      const std::int64_t gap = in.ConsumeIntegralInRange<std::int64_t>(0, 2);
      const std::int64_t all = c.q_heads + gap + c.k_heads + in.ConsumeIntegralInRange<std::int64_t>(0, 2);
      View u;
      u.shape = BatchShape{c.batch, c.seq, all, d};
      u.st = draw_batch_strides(in, u.shape, c.layout, false);
      u.off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 15);
      u.buf = new_buffer(c, u.off + batch_span(u.shape, u.st));
      q = u;
      k = u;
      q.shape.heads = c.q_heads;
      k.shape.heads = c.k_heads;
      if (in.ConsumeBool()) {
        k.off += (c.q_heads + gap) * u.st.head;
      } else {
        q.off += (c.k_heads + gap) * u.st.head;
      }
    };
    fused(c.q_in, c.k_in);
    if (c.in_place) {
      c.q_out = c.q_in;
      c.k_out = c.k_in;
    } else {
      fused(c.q_out, c.k_out);
    }
    return;
  }
  place_views(c, view);
}

template <class T>
void place_varlen(Source& in, Case<T>& c) {
  const std::int64_t d = c.spec.head_dim;
  const std::int64_t total = c.total();
  const auto view = [&](std::int64_t heads) {
    View v;
    const std::ptrdiff_t row = d + (in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 5));
    if (in.ConsumeBool()) {
      v.st.head = row;
      v.st.seq = heads * row + in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 5);
    } else {
      v.st.seq = row;
      v.st.head = std::max<std::int64_t>(total, 1) * row + in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 5);
    }
    v.shape = BatchShape{1, total, heads, d};
    v.off = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, 15);
    v.buf = new_buffer(c, v.off + batch_span(v.shape, v.st));
    return v;
  };
  place_views(c, view);
}

template <class T>
void draw_positions(Source& in, Case<T>& c) {
  c.pos_mode = static_cast<PosMode>(in.ConsumeIntegralInRange<int>(0, 4));
  const std::int64_t nseq = c.varlen ? static_cast<std::int64_t>(c.lengths.size()) : c.batch;
  const bool huge = c.cache_mode == 2 && in.ConsumeIntegralInRange<int>(0, 3) == 0;  // cache-free: any int64
  const std::int64_t hi = huge ? (std::int64_t{1} << 62) : (1 << 16);
  const auto draw_starts = [&] {
    c.starts.clear();
    const std::int64_t n = in.ConsumeBool() || nseq == 0 ? 1 : nseq;
    for (std::int64_t i = 0; i < n; ++i) c.starts.push_back(in.ConsumeIntegralInRange<std::int64_t>(0, hi));
  };
  switch (c.pos_mode) {
    case PosMode::start:
      c.starts = {in.ConsumeIntegralInRange<std::int64_t>(0, hi)};
      break;
    case PosMode::starts:
      draw_starts();
      break;
    case PosMode::restart:
      c.starts = {0};
      break;
    case PosMode::per_token: {
      c.per_token_kind = static_cast<Positions::Kind>(in.ConsumeIntegralInRange<int>(0, 2));
      c.per_token_start = in.ConsumeIntegralInRange<std::int64_t>(0, hi);
      const std::int64_t cap =
          c.per_token_kind == Positions::Kind::int32 ? std::min<std::int64_t>(hi, INT32_MAX) : hi;
      for (std::int64_t i = 0; i < c.total(); ++i) {
        const std::int64_t p = in.ConsumeIntegralInRange<std::int64_t>(0, cap);
        c.p32.push_back(static_cast<std::int32_t>(p));
        c.p64.push_back(p);
      }
      break;
    }
    default:
      c.split = in.ConsumeBool() ? ContextSplit::load_balanced : ContextSplit::contiguous;
      c.ranks = in.ConsumeIntegralInRange<std::int64_t>(1, 8);
      c.rank = in.ConsumeIntegralInRange<std::int64_t>(0, c.ranks - 1);
      draw_starts();
      break;
  }
}

// ---- the calls ----------------------------------------------------------------------------------

template <class T>
rotary::BatchView<T> batch_view(std::vector<Buffer<T>>& bufs, const View& v) {
  return rotary::BatchView<T>(bufs[static_cast<std::size_t>(v.buf)].data.data() + v.off, v.shape, v.st);
}
template <class T>
StridedLayout varlen_layout(const View& v) {
  return StridedLayout{v.shape.seq, v.shape.heads, v.st.seq, v.st.head};
}

template <class T>
bool in_place_hint(const Case<T>& c) {
  return c.q_in.buf == c.q_out.buf && c.q_in.off == c.q_out.off;
}

template <class T>
void invoke(const Case<T>& c, const rotary::Rope<T>& rope, std::vector<Buffer<T>>& bufs,
            const rotary::ParallelFor& par) {
  const SequencePositions pos = c.positions();
  const bool has_k = c.k_heads > 0;
  if (c.varlen) {
    T* qi = bufs[static_cast<std::size_t>(c.q_in.buf)].data.data() + c.q_in.off;
    T* qo = bufs[static_cast<std::size_t>(c.q_out.buf)].data.data() + c.q_out.off;
    const auto size = static_cast<std::int64_t>(c.cu.size());
    const rotary::CuSeqlens cu =
        c.null_cu ? (c.cu32 ? rotary::CuSeqlens(static_cast<const std::int32_t*>(nullptr), size)
                            : rotary::CuSeqlens(static_cast<const std::int64_t*>(nullptr), size))
        : c.cu32  ? rotary::CuSeqlens(c.cu_32)
                  : rotary::CuSeqlens(c.cu);
    if (!has_k) {
      if (c.in_place) {
        rotary::apply_varlen(rope, qo, varlen_layout<T>(c.q_out), cu, pos, {c.dir, par});
      } else {
        rotary::apply_varlen(rope, qi, varlen_layout<T>(c.q_in), qo, varlen_layout<T>(c.q_out), cu, pos, {c.dir, par});
      }
      return;
    }
    T* ki = bufs[static_cast<std::size_t>(c.k_in.buf)].data.data() + c.k_in.off;
    T* ko = bufs[static_cast<std::size_t>(c.k_out.buf)].data.data() + c.k_out.off;
    if (c.in_place) {
      rotary::apply_qk_varlen(rope, qo, varlen_layout<T>(c.q_out), ko, varlen_layout<T>(c.k_out), cu, pos, {c.dir, par});
    } else {
      rotary::apply_qk_varlen(rope, qi, varlen_layout<T>(c.q_in), qo, varlen_layout<T>(c.q_out), ki,
                              varlen_layout<T>(c.k_in), ko, varlen_layout<T>(c.k_out), cu, pos, {c.dir, par});
    }
    return;
  }
  if (c.dense_overload) {  // in place, dense `layout`
    T* q = bufs[static_cast<std::size_t>(c.q_in.buf)].data.data() + c.q_in.off;
    if (!has_k) {
      rotary::apply_batch(rope, c.layout, q, c.q_in.shape, pos, {c.dir, par});
    } else {
      T* k = bufs[static_cast<std::size_t>(c.k_in.buf)].data.data() + c.k_in.off;
      rotary::apply_qk_batch(rope, c.layout, q, c.q_in.shape, k, c.k_heads, pos, {c.dir, par});
    }
    return;
  }
  const rotary::BatchView<T> qo = batch_view(bufs, c.q_out);
  const rotary::BatchView<const T> qi = batch_view(bufs, c.q_in);
  const rotary::BatchView<T> ko = has_k ? batch_view(bufs, c.k_out) : rotary::BatchView<T>();
  const rotary::BatchView<const T> ki =
      has_k ? rotary::BatchView<const T>(batch_view(bufs, c.k_in)) : rotary::BatchView<const T>();
  if (c.unchecked) {
    if (!has_k) {
      rotary::unchecked::apply_batch(rope, qi, qo, pos, {c.dir, par});
    } else {
      rotary::unchecked::apply_qk_batch(rope, qi, qo, ki, ko, pos, {c.dir, par});
    }
    return;
  }
  if (!has_k) {
    if (c.in_place && in_place_hint(c)) {
      rotary::apply_batch(rope, qo, pos, {c.dir, par});
    } else {
      rotary::apply_batch(rope, qi, qo, pos, {c.dir, par});
    }
  } else {
    rotary::apply_qk_batch(rope, qi, qo, ki, ko, pos, {c.dir, par});
  }
}

// ---- checking ---------------------------------------------------------------------------------

// The expected buffers: every token rotated alone by apply_strided at its own position.
template <class T>
std::vector<Buffer<T>> per_token_reference(const Case<T>& c, const rotary::Rope<T>& rope,
                                           const std::vector<Buffer<T>>& initial,
                                           const std::vector<Token>& tokens) {
  std::vector<Buffer<T>> want = initial;
  // Inputs are read from `initial`, so in-place and fused-buffer cases see the original rows.
  for (const Token& tok : tokens) {
    const auto one = [&](const View& vi, const View& vo, std::ptrdiff_t oi, std::ptrdiff_t oo,
                         std::int64_t heads) {
      const T* x = initial[static_cast<std::size_t>(vi.buf)].data.data() + oi;
      T* y = want[static_cast<std::size_t>(vo.buf)].data.data() + oo;
      rotary::apply_strided(rope, x, StridedLayout{1, heads, 0, vi.st.head}, y,
                            StridedLayout{1, heads, 0, vo.st.head}, Positions::contiguous(tok.position),
                            c.dir);
    };
    one(c.q_in, c.q_out, tok.q_in, tok.q_out, c.q_heads);
    if (c.k_heads > 0) one(c.k_in, c.k_out, tok.k_in, tok.k_out, c.k_heads);
  }
  return want;
}

template <class T>
void check(const Case<T>& c, const rotary::Rope<T>& rope, const std::vector<Buffer<T>>& initial,
           const std::vector<Buffer<T>>& got, const std::vector<Buffer<T>>& want,
           const std::vector<Token>& tokens) {
  using C = rotary::compute_t<T>;
  const std::int64_t d = c.spec.head_dim;
  const std::int64_t r = rope.rotary_dim();
  const std::int64_t pairs = r / 2;
  const double af = c.freqs.attention_factor;
  // Rotated coordinates: exact with a cache; within one entry's error per cos/sin when cache-free.
  std::vector<std::vector<char>> written = element_flags(got);
  for (const Token& tok : tokens) {
    const auto rows = [&](const View& vi, const View& vo, std::ptrdiff_t oi, std::ptrdiff_t oo,
                          std::int64_t heads) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const auto ob = static_cast<std::size_t>(vo.buf);
        const std::ptrdiff_t o = oo + h * vo.st.head;
        const T* x = initial[static_cast<std::size_t>(vi.buf)].data.data() + oi + h * vi.st.head;
        for (std::int64_t i = 0; i < d; ++i) {
          const auto at = static_cast<std::size_t>(o + i);
          written[ob][at] = 1;
          const T g = got[ob].data[at];
          const T w = want[ob].data[at];
          if (to_bits(g) == to_bits(w)) continue;
          if (i < r && is_nan(g) && is_nan(w)) continue;
          if (i < r && c.cache_mode == 2) {
            const std::int64_t j = c.spec.pairing == rotary::Pairing::interleaved ? i / 2 : i % pairs;
            const double x0 = widen(x[rotary::reference::pair_first(c.spec.pairing, j, pairs)]);
            const double x1 = widen(x[rotary::reference::pair_second(c.spec.pairing, j, pairs)]);
            const double e = (std::fabs(x0) + std::fabs(x1)) * (4.0 * ulp<C>(af) + 1e-12 * af);
            const double tol =
                2.0 * rotation_tolerance<T>((std::fabs(x0) + std::fabs(x1)) * af, widen(w)) + e;
            if (std::fabs(widen(g) - widen(w)) <= tol) continue;
            if (!std::isfinite(x0) || !std::isfinite(x1) ||
                (std::fabs(x0) + std::fabs(x1)) * af > 0.25 * Format<T>::max())
              continue;  // overflow territory
          }
          fail(
              "position %lld, head %lld, coordinate %lld: got %.17g (0x%llx), per-token %.17g (0x%llx)\n  %s",
              static_cast<long long>(tok.position), static_cast<long long>(h), static_cast<long long>(i),
              widen(g), static_cast<unsigned long long>(to_bits(g)), widen(w),
              static_cast<unsigned long long>(to_bits(w)), c.describe().c_str());
        }
      }
    };
    rows(c.q_in, c.q_out, tok.q_in, tok.q_out, c.q_heads);
    if (c.k_heads > 0) rows(c.k_in, c.k_out, tok.k_in, tok.k_out, c.k_heads);
  }
  expect_untouched_outside(c, written, got, initial);
}

// ---- breaking one argument ----------------------------------------------------------------------

template <class T>
bool apply_breakage(Source& in, Case<T>& c, const rotary::Rope<T>& rope) {
  const std::int64_t nseq = c.varlen ? static_cast<std::int64_t>(c.lengths.size()) : c.batch;
  const bool views = !c.varlen && !c.dense_overload;
  switch (c.breakage) {
    case Breakage::none:
      return true;
    case Breakage::cu_first:
      if (!c.varlen || c.cu.size() < 2 || c.cu[1] == 0) return false;
      c.cu[0] = c.cu_32[0] = 1;  // cu[1] >= 1 keeps it non-decreasing: only the start is wrong
      return true;
    case Breakage::cu_decreasing: {
      if (!c.varlen || c.cu.size() < 3) return false;
      const std::size_t i =
          static_cast<std::size_t>(in.ConsumeIntegralInRange<std::size_t>(1, c.cu.size() - 2));
      c.cu[i] = c.cu[i + 1] + 1;  // then cu[i+1] < cu[i]
      c.cu_32[i] = static_cast<std::int32_t>(c.cu[i]);
      return true;
    }
    case Breakage::cu_last:
      if (!c.varlen) return false;
      if (in.ConsumeBool()) {  // or a null cu_seqlens: the check must not read through it
        c.breakage = Breakage::null_cu_seqlens;
        c.null_cu = true;
        return true;
      }
      c.cu.push_back(c.cu.back() + in.ConsumeIntegralInRange<std::int64_t>(1, 3));
      c.cu_32.push_back(static_cast<std::int32_t>(c.cu.back()));
      return true;
    case Breakage::starts_count: {
      if (c.pos_mode != PosMode::starts && c.pos_mode != PosMode::context_parallel) return false;
      const std::int64_t n = in.ConsumeIntegralInRange<std::int64_t>(2, 6);
      if (n == nseq) return false;
      c.starts.assign(static_cast<std::size_t>(n), 0);
      return true;
    }
    case Breakage::cp_ranks:
      if (c.pos_mode != PosMode::context_parallel) return false;
      c.ranks = -in.ConsumeIntegralInRange<std::int64_t>(0, 3);
      c.rank = 0;
      return true;
    case Breakage::cp_rank:
      if (c.pos_mode != PosMode::context_parallel) return false;
      c.rank = in.ConsumeBool() ? c.ranks + in.ConsumeIntegralInRange<std::int64_t>(0, 3)
                                : -in.ConsumeIntegralInRange<std::int64_t>(1, 3);
      return true;
    case Breakage::cp_odd_length: {
      if (c.pos_mode != PosMode::context_parallel || c.split != ContextSplit::load_balanced) return false;
      bool odd = false;
      if (c.varlen) {
        for (auto l : c.lengths) odd = odd || l % 2 != 0;
      } else {
        odd = c.batch > 0 && c.seq % 2 != 0;
      }
      return odd;  // drawn with odd lengths already: that is the breakage
    }
    case Breakage::per_token_count:
      if (c.pos_mode != PosMode::per_token || c.per_token_kind == Positions::Kind::contiguous) return false;
      if (c.total() > 0 && in.ConsumeBool()) {  // or a null array of one value per token
        c.breakage = Breakage::null_per_token;
        c.null_per_token = true;
        return true;
      }
      break_position_count(in, c.p32, c.p64);
      return true;
    case Breakage::null_per_token:
    case Breakage::null_cu_seqlens:
      return false;  // only through per_token_count and cu_last
    case Breakage::position_outside_cache: {
      if (c.cache_mode == 2 || c.total() == 0) return false;
      if (c.pos_mode == PosMode::per_token && c.per_token_kind != Positions::Kind::contiguous) {
        const std::int64_t bad = rope.cache().end_position();
        if (bad > INT32_MAX) return false;
        const auto i = static_cast<std::size_t>(in.ConsumeIntegralInRange<std::int64_t>(0, c.total() - 1));
        c.p32[i] = static_cast<std::int32_t>(bad);
        c.p64[i] = bad;
        return true;
      }
      if (c.pos_mode == PosMode::start || c.pos_mode == PosMode::starts) {
        for (auto& s : c.starts) s = rope.cache().end_position();
        return true;
      }
      return false;
    }
    case Breakage::negative_start:
      if (c.total() == 0) return false;
      if (c.pos_mode == PosMode::start || c.pos_mode == PosMode::starts) {
        for (auto& s : c.starts)
          s = -in.ConsumeIntegralInRange<std::int64_t>(1 + 1000, 1 << 20);  // past any length
        return true;
      }
      return false;
    case Breakage::head_dim_mismatch:
      if (!views) return false;
      c.q_in.shape.head_dim = c.q_out.shape.head_dim = c.spec.head_dim - 1;
      return true;
    case Breakage::negative_shape:
      if (!views) return false;
      (in.ConsumeBool() ? c.q_in.shape.seq : c.q_in.shape.heads) =
          -in.ConsumeIntegralInRange<std::int64_t>(1, 5);
      if (c.in_place) c.q_out.shape = c.q_in.shape;
      return true;
    case Breakage::negative_stride:
      if (!views) return false;
      c.q_in.st.head = -in.ConsumeIntegralInRange<std::ptrdiff_t>(1, 1000);
      if (c.in_place) c.q_out.st = c.q_in.st;
      return true;
    case Breakage::rows_overlap: {
      if (c.dense_overload || c.total() == 0) return false;
      View& v = c.q_in;
      if (c.q_heads >= 2) {
        v.st.head = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, c.spec.head_dim - 1);
      } else if (c.varlen ? c.total() >= 2 : c.seq >= 2) {  // two tokens of one sequence
        v.st.seq = in.ConsumeIntegralInRange<std::ptrdiff_t>(0, c.spec.head_dim - 1);
      } else {
        return false;
      }
      if (c.in_place) c.q_out = c.q_in;
      return true;
    }
    case Breakage::q_k_share_rows:
      if (c.k_heads == 0 || c.k_heads > c.q_heads || c.total() == 0 || c.dense_overload) return false;
      c.k_out = c.q_out;
      c.k_out.shape.heads = c.k_heads;
      if (c.in_place) c.k_in = c.k_out;
      return true;
    case Breakage::partial_in_out_overlap:
      if (c.dense_overload || c.total() == 0 || c.in_place) return false;
      c.q_out = c.q_in;
      c.q_out.off += partial_overlap_shift(in, c.spec.head_dim);
      return true;
    case Breakage::q_k_length_mismatch:
      if (!views || c.k_heads == 0 || c.batch == 0) return false;
      c.k_in.shape.seq = c.k_out.shape.seq = c.seq - 1;  // shorter: stays inside k's buffers
      return true;
    case Breakage::view_too_large: {
      // A huge stride on an axis with two or more entries; the other strides stay valid.
      const std::ptrdiff_t huge = huge_stride<T>(in);
      if (c.varlen) {
        if (c.total() < 2) return false;
        c.q_in.st.seq = huge;
      } else {
        if (!views || c.total() == 0) return false;
        if (c.batch >= 2) {
          c.q_in.st.batch = huge;
        } else if (c.seq >= 2) {
          c.q_in.st.seq = huge;
        } else {
          return false;
        }
      }
      if (c.in_place) c.q_out = c.q_in;
      return true;
    }
    case Breakage::varlen_token_mismatch:
      if (!c.varlen || c.total() == 0) return false;
      c.q_in.shape.seq = c.q_out.shape.seq = c.total() - 1;
      return true;
  }
  return false;
}

// ---- one input ---------------------------------------------------------------------------------

template <class T>
void run(Source& in) {
  using C = rotary::compute_t<T>;
  Case<T> c;
  c.spec = fuzz_spec(in, 70);
  if (in.ConsumeBool()) {
    c.freqs = fuzz_frequencies(in, c.spec, &c.rule);
  } else {
    c.freqs = rotary::compute_frequencies(c.spec);
    c.rule = "spec";
  }
  c.cache_mode = in.ConsumeIntegralInRange<int>(0, 2);
  c.varlen = in.ConsumeIntegralInRange<int>(0, 2) == 0;
  c.q_heads = in.ConsumeIntegralInRange<std::int64_t>(1, 4);
  c.k_heads = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int64_t>(1, 4) : 0;
  c.in_place = in.ConsumeBool();
  c.dir = in.ConsumeBool() ? Direction::inverse : Direction::forward;
  if (c.varlen) {
    c.cu = {0};
    for (int n = in.ConsumeIntegralInRange<int>(0, 5); n > 0; --n) {
      c.lengths.push_back(in.ConsumeIntegralInRange<std::int64_t>(0, 12));
      c.cu.push_back(c.cu.back() + c.lengths.back());
    }
    c.cu32 = in.ConsumeBool();
    for (auto v : c.cu) c.cu_32.push_back(static_cast<std::int32_t>(v));
    place_varlen(in, c);
  } else {
    c.layout = static_cast<Layout>(in.ConsumeIntegralInRange<int>(0, 3));
    c.batch = in.ConsumeIntegralInRange<std::int64_t>(0, 4);
    c.seq = in.ConsumeIntegralInRange<std::int64_t>(0, 12);
    c.dense_overload = c.in_place && in.ConsumeIntegralInRange<int>(0, 2) == 0;
    c.unchecked = !c.dense_overload && in.ConsumeIntegralInRange<int>(0, 3) == 0;
    place_batch(in, c);
  }
  draw_positions(in, c);
  const auto& isas = supported_isas();
  c.isa = isas[in.ConsumeIntegralInRange<std::size_t>(0, isas.size() - 1)];
  c.parts = in.ConsumeIntegralInRange<int>(0, 3);
  c.breakage = draw_breakage<Breakage>(in, kBreakages);
  const ValueMode values = static_cast<ValueMode>(in.ConsumeIntegralInRange<int>(0, 2));
  Rng rng{in.ConsumeIntegral<std::uint64_t>()};

  // Valid positions first (a load-balanced split needs even lengths; an odd one is a breakage).
  bool odd = false;
  if (c.pos_mode == PosMode::context_parallel && c.split == ContextSplit::load_balanced) {
    if (c.varlen) {
      for (auto l : c.lengths) odd = odd || l % 2 != 0;
    } else {
      odd = c.batch > 0 && c.seq % 2 != 0;
    }
  }
  if (odd && c.breakage != Breakage::cp_odd_length) c.split = ContextSplit::contiguous;
  if (!odd && c.breakage == Breakage::cp_odd_length) c.breakage = Breakage::none;
  const std::vector<Token> tokens = tokens_of(c);
  std::vector<std::int64_t> positions;
  positions.reserve(tokens.size());
  for (const Token& t : tokens) positions.push_back(t.position);

  std::optional<rotary::Rope<T>> rope;
  if (c.cache_mode == 2) {
    rope.emplace(c.spec, c.freqs, rotary::OnTheFly{});
  } else if (c.cache_mode == 1 || positions.empty() ||
             *std::max_element(positions.begin(), positions.end()) -
                     *std::min_element(positions.begin(), positions.end()) >
                 (1 << 14)) {
    c.cache_mode = 1;
    rope.emplace(c.spec, rotary::CosSinCache<C>::for_positions(c.freqs, positions));
  } else {
    const std::int64_t lo = *std::min_element(positions.begin(), positions.end());
    const std::int64_t hi = *std::max_element(positions.begin(), positions.end()) + 1;
    rope.emplace(c.spec,
                 rotary::CosSinCache<C>(c.freqs, lo, hi + in.ConsumeIntegralInRange<std::int64_t>(0, 2)));
  }

  for (const Token& tok : tokens) {
    const auto fill = [&](const View& v, std::ptrdiff_t o, std::int64_t heads) {
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t i = 0; i < c.spec.head_dim; ++i)
          c.bufs[static_cast<std::size_t>(v.buf)].data[static_cast<std::size_t>(o + h * v.st.head + i)] =
              random_value<T>(rng, values);
    };
    fill(c.q_in, tok.q_in, c.q_heads);
    if (c.k_heads > 0) fill(c.k_in, tok.k_in, c.k_heads);
  }
  const std::vector<Buffer<T>> initial = c.bufs;
  const IsaScope scope(c.isa);
  ChunkedFor chunks{c.parts, {}};

  if (c.breakage != Breakage::none && !apply_breakage(in, c, *rope)) c.breakage = Breakage::none;
  if (describe_inputs()) std::fprintf(stderr, "case: %s\n", c.describe().c_str());
  if (c.breakage != Breakage::none) {
    c.unchecked = false;
    std::vector<Buffer<T>> bufs = initial;
    stats.rejected.expect(c, bufs, initial, [&] { invoke(c, *rope, bufs, chunks.get()); });
    return;
  }
  c.breakage = Breakage::none;
  ++stats.valid;
  stats.varlen += c.varlen;

  std::vector<Buffer<T>> got = initial;
  expect_accepted(c, [&] { invoke(c, *rope, got, chunks.get()); });
  check(c, *rope, initial, got, per_token_reference(c, *rope, initial, tokens), tokens);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Source in(data, size);
  with_dtype(draw_dtype(in), [&in](auto tag) { run<typename decltype(tag)::type>(in); });
  return 0;
}
