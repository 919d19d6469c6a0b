// fuzz_fusion: the fused attention prologues (fusion.hpp, kv_cache.hpp) against the unfused
// composition, byte for byte, on every supported ISA; refusals must agree. The case an input
// describes and how it is drawn: fusion_case.hpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "fusion_case.hpp"
#include "fuzz_support.hpp"

namespace {

// What the inputs exercised, printed at exit when ROTARY_FUZZ_STATS is set.
struct Stats {
  long equal = 0, both_refused = 0, fused_only = 0;
  long entries[kEntries] = {};
  long entries_equal[kEntries] = {};  // of those, compared equal (not refused)
  std::vector<std::pair<std::string, long>> messages;  // refusals by message start
  void note(const std::string& m) {
    const std::string key = m.substr(0, 48);
    for (auto& [k, n] : messages)
      if (k == key) {
        ++n;
        return;
      }
    if (messages.size() < 60) messages.emplace_back(key, 1);
  }
  ~Stats() {
    if (std::getenv("ROTARY_FUZZ_STATS") == nullptr) return;
    std::fprintf(stderr, "equal %ld, both refused %ld, fused-only refusals %ld\n", equal, both_refused, fused_only);
    for (int e = 0; e < kEntries; ++e)
      std::fprintf(stderr, "  %-16s %ld (%ld equal)\n", kEntryNames[e], entries[e], entries_equal[e]);
    for (const auto& [k, n] : messages) std::fprintf(stderr, "  %6ld  %s\n", n, k.c_str());
  }
};
Stats stats;

// ---- the composition --------------------------------------------------------------------------

// The oracle: the unfused ops one after another under the scalar ISA (rms_norm into a scratch
// tensor or the harness's own de-interleaving copy, apply_strided, rms_norm weightless in place for
// the L2 norm, write_kv_cache for K and V; for MLA, K and V are the two parts of the cache row), the
// same way test_fusion's check_composition computes it.
//  - If the composition throws rotary::error, the fused call must throw rotary::error too, and vice
//    versa; a fused call that throws must leave every buffer as it was.
//  - The fused call validates a superset; the extra refusals are predicted here and must happen
//    whatever the composition does: deinterleave with an interleaved rotator or with a norm before
//    RoPE; k given with neither k output nor K cache; a K cache whose head_dim is not the rotator's
//    (write_kv_cache alone accepts a narrower cache row); a norm before RoPE without weight for a q
//    or k that is there (rms_norm alone takes a null weight as weightless; an absent one's weight is
//    not read), and an invalid eps of the norm of an absent q or k (the composition never runs that
//    norm). Duplicate slots are
//    refused by both alike.
//  - If both succeed: on every supported ISA, every byte of every buffer (q outputs, k output, both
//    caches including the slots left untouched, the int8 scales, the inputs, sentinels around the
//    views) equal to the composition run on that same ISA, NaN payloads included; and equal to the
//    composition run on the scalar ISA except that a NaN may be another NaN (sign and payload of a
//    NaN are not part of the cross-ISA contract: docs/compiler-flags.md, fuzz_apply).
// Any other exception, a crash or a sanitizer report is a finding.

// DeepSeek's order: a row's pairs (x0, x1), (x2, x3).. become (x0, x2, .., x1, x3, ..), the rest copied.
template <class T>
void deinterleave_rows(const T* x, const StridedLayout& l, std::int64_t d, std::int64_t r, T* out) {
  for (std::int64_t t = 0; t < l.tokens; ++t)
    for (std::int64_t h = 0; h < l.heads; ++h) {
      const T* row = x + t * l.token_stride + h * l.head_stride;
      T* y = out + (t * l.heads + h) * d;
      for (std::int64_t j = 0; j < r / 2; ++j) {
        y[j] = row[2 * j];
        y[r / 2 + j] = row[2 * j + 1];
      }
      for (std::int64_t i = r; i < d; ++i) y[i] = row[i];
    }
}

template <class T, class W>
struct Norms {
  std::vector<W> wq, wk;
  HeadNorm<W> q, k, l2;
};

// The unfused ops on `isa`; throws what they throw.
template <class T, class E, class W>
void compose(const Case& c, const rotary::Rope<T>& rope, const Norms<T, W>& n, State<T, E>& st, rotary::Isa isa) {
  const IsaScope scope(isa);
  const std::int64_t d = c.spec.head_dim;
  const std::int64_t r = rope.rotary_dim();
  const Positions pos = c.positions();
  const Slots slots = c.slots();
  // Rows in: the caller's, or normalized / de-interleaved into a dense scratch tensor.
  const auto rotate = [&](const Tensor& x, const HeadNorm<W>& norm, T* out, const StridedLayout& ol,
                          std::vector<T>& scratch) {
    const T* src = ptr(st.bufs, x);
    StridedLayout sl = x.l;
    if (c.pre_norm() || c.deinterleave) {
      scratch.assign(static_cast<std::size_t>(std::max<std::int64_t>(x.l.tokens * x.l.heads * d, 1)), T(0));
      const StridedLayout dense{x.l.tokens, x.l.heads, x.l.heads * d, d};
      if (c.pre_norm()) {
        rotary::rms_norm(src, x.l, scratch.data(), dense, d, norm);
      } else {
        deinterleave_rows(src, x.l, d, r, scratch.data());
      }
      src = scratch.data();
      sl = dense;
    }
    rotary::apply_strided(rope, src, sl, out, ol, pos);
    if (c.post_norm()) rotary::rms_norm(out, ol, out, ol, d, n.l2);
  };
  std::vector<T> q_scratch, k_scratch, k_rot;
  if (c.q_heads > 0) rotate(c.q_in, n.q, ptr(st.bufs, c.q_out), c.q_out.l, q_scratch);
  if (c.kv_heads > 0) {
    T* out = nullptr;
    StridedLayout ol{};
    if (c.k_out) {
      out = ptr(st.bufs, c.k_o);
      ol = c.k_o.l;
    } else {
      k_rot.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.tokens * c.kv_heads * d, 1)), T(0));
      out = k_rot.data();
      ol = {c.tokens, c.kv_heads, c.kv_heads * d, d};
    }
    rotate(c.k, n.k, out, ol, k_scratch);
    if (c.has_k_cache)
      rotary::write_kv_cache(static_cast<const T*>(out), ol, slots, view_of(c.kc, c.mla ? st.vc : st.kc));
  }
  if (c.has_v) rotary::write_kv_cache(static_cast<const T*>(ptr(st.bufs, c.v)), c.v.l, slots, view_of(c.vc, st.vc));
}

// ---- the fused call ---------------------------------------------------------------------------

rotary::ThreadPool& pool() {
  static rotary::ThreadPool p(2);
  return p;
}

// Lowers the minimum work per thread for a scope, so that small calls split too.
class MinParallelBytes {
 public:
  explicit MinParallelBytes(std::int64_t v) : saved_(rotary::detail::min_parallel_bytes_state().exchange(v)) {}
  ~MinParallelBytes() { rotary::detail::min_parallel_bytes_state().store(saved_); }
  MinParallelBytes(const MinParallelBytes&) = delete;
  MinParallelBytes& operator=(const MinParallelBytes&) = delete;

 private:
  std::int64_t saved_;
};

template <class T, class E, class W>
void fused(const Case& c, const rotary::Rope<T>& rope, const Norms<T, W>& n, State<T, E>& st,
           const rotary::ParallelFor& par) {
  const Positions pos = c.positions();
  const Slots slots = c.slots();
  const KvCacheView<E> kv = c.has_k_cache ? view_of(c.kc, c.mla ? st.vc : st.kc) : KvCacheView<E>{};
  const KvCacheView<E> vv = c.has_v ? view_of(c.vc, st.vc) : KvCacheView<E>{};
  const std::int64_t d = c.spec.head_dim;
  const StridedLayout none{c.tokens, 0, 0, d};
  switch (c.entry) {
    case Entry::rope_kv_write:
      rotary::rope_kv_write(rope, ptr(st.bufs, c.q_out), c.q_heads > 0 ? c.q_out.l : none, ptr(st.bufs, c.k), c.k.l,
                            ptr(st.bufs, c.v), c.has_v ? c.v.l : none, pos, slots, kv, vv, par);
      return;
    case Entry::qk_norm_rope:
      rotary::qk_norm_rope(rope, ptr(st.bufs, c.q_out), c.q_out.l, ptr(st.bufs, c.k), c.kv_heads > 0 ? c.k.l : none,
                           rotary::QkNorm<W>{n.q.weight, n.k.weight, c.q_norm.eps, c.convention()}, pos, par);
      return;
    case Entry::qkv_split_rope: {
      const rotary::QkNorm<W> qk{n.q.weight, n.k.weight, c.q_norm.eps, c.convention()};
      rotary::qkv_split_rope(rope, ptr(st.bufs, c.q_out), c.tokens, c.q_heads, c.kv_heads,
                             pos, slots, kv, vv, c.norm == NormMode::none ? nullptr : &qk, c.q_out.l.token_stride,
                             par);
      return;
    }
    case Entry::mla_rope:
      if constexpr (rotary::cache_scales_of<E>() != rotary::CacheScales::per_row) {  // (run skips int8)
        const rotary::MlaQuery q{c.tokens, c.q_heads, c.nope, c.q_in.l.token_stride};
        rotary::mla_rope(rope, ptr(st.bufs, c.q_in) - c.nope, q, ptr(st.bufs, c.k), c.k.l.token_stride,
                         ptr(st.bufs, c.v), c.v.l.token_stride, pos, slots, view_of(c.mc, st.vc), c.deinterleave,
                         par);
      }
      return;
    default:
      break;
  }
  Prologue<T, E, W> p;
  if (c.q_heads > 0) {
    p.q = ptr(st.bufs, c.q_in);
    p.q_layout = c.q_in.l;
    p.q_out = ptr(st.bufs, c.q_out);
    p.q_out_layout = c.q_out.l;
  }
  if (c.kv_heads > 0) {
    p.k = ptr(st.bufs, c.k);
    p.k_layout = c.k.l;
  }
  if (c.k_out) {
    p.k_out = ptr(st.bufs, c.k_o);
    p.k_out_layout = c.k_o.l;
  }
  if (c.has_v) {
    p.v = ptr(st.bufs, c.v);
    p.v_layout = c.v.l;
    p.v_cache = vv;
  }
  p.k_cache = kv;
  p.slots = slots;
  if (c.pre_norm()) {
    p.q_norm = n.q;
    p.k_norm = n.k;
  }
  if (c.post_norm()) p.l2_after = n.l2;
  p.deinterleave = c.deinterleave;
  rotary::rope_prologue(rope, p, pos, par);
}

// ---- checking ---------------------------------------------------------------------------------

// First byte where two arrays differ, or -1.
std::ptrdiff_t first_difference(const void* a, const void* b, std::size_t bytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < bytes; ++i)
    if (x[i] != y[i]) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

// Whether an element is a NaN (fp8: S.1111.111; int8 has none).
template <class X>
bool nan_element(const X& x) {
  if constexpr (std::is_same_v<X, std::int8_t>) {
    return false;
  } else if constexpr (std::is_same_v<X, fp8_e4m3>) {
    return (x.bits & 0x7f) == 0x7f;
  } else {
    return is_nan(x);
  }
}

// The first element where two arrays differ in their bytes (nan_any: unless both are NaNs), or -1.
template <class X>
std::ptrdiff_t first_difference(const std::vector<X>& a, const std::vector<X>& b, bool nan_any) {
  std::ptrdiff_t at = first_difference(a.data(), b.data(), a.size() * sizeof(X));
  if (at < 0 || !nan_any) return at < 0 ? -1 : at / static_cast<std::ptrdiff_t>(sizeof(X));
  for (std::size_t i = static_cast<std::size_t>(at) / sizeof(X); i < a.size(); ++i)
    if (std::memcmp(static_cast<const void*>(&a[i]), static_cast<const void*>(&b[i]), sizeof(X)) != 0 &&
        !(nan_element(a[i]) && nan_element(b[i])))
      return static_cast<std::ptrdiff_t>(i);
  return -1;
}

// Every byte of `got` as in `want`; nan_any: a NaN where `want` has one may be any NaN (NaN sign and
// payload bits are not part of the cross-ISA contract: docs/compiler-flags.md, fuzz_apply).
template <class T, class E>
void expect_same(const Case& c, const char* what, rotary::Isa isa, const State<T, E>& got, const State<T, E>& want,
                 bool nan_any = false) {
  const auto report = [&](const char* name, std::size_t index, const auto& gv, const auto& wv) {
    const std::ptrdiff_t at = first_difference(gv, wv, nan_any);
    if (at < 0) return;
    const std::size_t e = static_cast<std::size_t>(at);
    const std::size_t elem = sizeof(gv[0]);
    const void* g = gv.data();
    const void* w = wv.data();
    unsigned long long gb = 0, wb = 0;
    std::memcpy(&gb, static_cast<const unsigned char*>(g) + e * elem, std::min<std::size_t>(elem, 8));
    std::memcpy(&wb, static_cast<const unsigned char*>(w) + e * elem, std::min<std::size_t>(elem, 8));
    fail("%s on %s: %s %zu element %zu differs: got bits 0x%llx, expected 0x%llx\n  %s", what,
         std::string(rotary::to_string(isa)).c_str(), name, index, e, gb, wb, c.describe().c_str());
  };
  for (std::size_t b = 0; b < want.bufs.size(); ++b) report("T buffer", b, got.bufs[b].data, want.bufs[b].data);
  report("K cache", 0, got.kc.data, want.kc.data);
  report("V cache", 0, got.vc.data, want.vc.data);
  report("K scales", 0, got.kc.scales, want.kc.scales);
  report("V scales", 0, got.vc.scales, want.vc.scales);
}

// ---- one input ---------------------------------------------------------------------------------

template <class T, class E, class W>
void run(Case& c) {
  using C = rotary::compute_t<T>;
  c.dtype = std::string(rotary::dtype_name<T>());
  if constexpr (std::is_same_v<E, std::int8_t>) c.cache_type = "int8";
  else if constexpr (std::is_same_v<E, fp8_e4m3>) c.cache_type = "fp8_e4m3";
  else c.cache_type = std::string(rotary::dtype_name<E>());
  c.weight_type = std::string(rotary::dtype_name<W>());

  // An int8 MLA cache does not compile (a static_assert: it would need two scales per slot).
  if (c.mla && rotary::cache_scales_of<E>() == rotary::CacheScales::per_row) return;
  std::optional<rotary::Rope<T>> rope;
  try {
    const rotary::Frequencies f = rotary::compute_frequencies(c.spec);
    if (c.rope_mode == RopeMode::cache_free) {
      rope.emplace(c.spec, rotary::OnTheFly{});
    } else {
      rope.emplace(c.spec, rotary::CosSinCache<C>(f, c.cache_lo, c.cache_hi));
    }
  } catch (const rotary::error&) {
    return;  // a spec the library refuses: nothing to compare
  }
  Rng rng{c.seed};
  State<T, E> initial;
  for (const std::size_t size : c.buffer_sizes) initial.bufs.emplace_back(size);
  const auto fill = [&](const Tensor& x) {
    T* p = ptr(initial.bufs, x);
    for (std::int64_t t = 0; t < x.l.tokens; ++t)
      for (std::int64_t h = 0; h < x.l.heads; ++h)
        for (std::int64_t i = 0; i < x.dim; ++i) p[t * x.l.token_stride + h * x.l.head_stride + i] = draw_value<T>(rng, c.values);
  };
  if (c.q_heads > 0) fill(c.q_in);
  if (c.kv_heads > 0) fill(c.k);
  if (c.has_v) fill(c.v);
  if (c.has_k_cache && !c.mla) initial.kc = make_cache<E>(c.kc, rng, c.values);
  if (c.has_v) initial.vc = make_cache<E>(c.mla ? c.mc : c.vc, rng, c.values);
  Norms<T, W> n;
  const std::int64_t d = c.spec.head_dim;
  for (std::int64_t i = 0; i < d; ++i) {
    n.wq.push_back(draw_value<W>(rng, c.values == 3 ? 2 : c.values));
    n.wk.push_back(draw_value<W>(rng, c.values == 3 ? 2 : c.values));
  }
  n.q = HeadNorm<W>::rms(c.q_norm.null_weight ? nullptr : n.wq.data(), c.q_norm.eps, c.convention());
  n.k = HeadNorm<W>::rms(c.k_norm.null_weight ? nullptr : n.wk.data(), c.k_norm.eps, c.convention());
  n.l2 = HeadNorm<W>::weightless(c.l2.eps);
  if (describe_inputs()) std::fprintf(stderr, "case: %s\n", c.describe().c_str());
  ++stats.entries[static_cast<int>(c.entry)];

  const char* fused_only = c.fused_only_refusal();
  State<T, E> want = initial;
  bool composition_threw = false;
  std::string composition_error;
  if (*fused_only == '\0') {
    try {
      compose<T, E, W>(c, *rope, n, want, rotary::Isa::scalar);
    } catch (const rotary::error& e) {
      composition_threw = true;
      composition_error = e.what();
    } catch (const std::exception& e) {
      fail("the composition threw a non-rotary exception: %s\n  %s", e.what(), c.describe().c_str());
    }
  }

  ChunkedFor chunks;
  chunks.parts = c.parts;
  for (const rotary::Isa isa : supported_isas()) {
    // The composition on this ISA too: fused and unfused must agree to the byte on the same ISA.
    std::optional<State<T, E>> want_here;
    if (*fused_only == '\0' && !composition_threw && isa != rotary::Isa::scalar) {
      want_here.emplace(initial);
      try {
        compose<T, E, W>(c, *rope, n, *want_here, isa);
      } catch (const std::exception& e) {
        fail("the composition threw on %s only: %s\n  %s", std::string(rotary::to_string(isa)).c_str(), e.what(),
             c.describe().c_str());
      }
    }
    State<T, E> got = initial;
    bool threw = false;
    std::string message;
    {
      const IsaScope scope(isa);
      const MinParallelBytes min_bytes(c.threads == Threads::none ? std::int64_t{-1} : c.min_bytes);
      const rotary::ParallelFor par = c.threads == Threads::pool      ? pool().parallel_for()
                                      : c.threads == Threads::chunked ? chunks.get()
                                                                      : rotary::ParallelFor();
      try {
        fused<T, E, W>(c, *rope, n, got, par);
      } catch (const rotary::error& e) {
        threw = true;
        message = e.what();
      } catch (const std::exception& e) {
        fail("the fused call threw a non-rotary exception: %s\n  %s", e.what(), c.describe().c_str());
      }
    }
    if (threw && message.rfind("rotary: ", 0) != 0) fail("error message without prefix: %s", message.c_str());
    if (*fused_only != '\0') {
      if (!threw) fail("the fused call accepted a call it must refuse (%s)\n  %s", fused_only, c.describe().c_str());
    } else if (threw != composition_threw) {
      fail("the fused call %s but the composition %s\n  %s",
           threw ? ("threw \"" + message + "\"").c_str() : "succeeded",
           composition_threw ? ("threw \"" + composition_error + "\"").c_str() : "succeeded", c.describe().c_str());
    }
    if (threw) {
      expect_same(c, "a refused fused call changed a buffer", isa, got, initial);
      if (isa == rotary::Isa::scalar) {
        stats.note(message);
        ++(*fused_only != '\0' ? stats.fused_only : stats.both_refused);
      }
      continue;
    }
    if (want_here) {
      expect_same(c, "fused != composition on the same ISA", isa, got, *want_here);
      expect_same(c, "fused != the scalar composition", isa, got, want, true);
    } else {
      expect_same(c, "fused != composition", isa, got, want);
    }
    if (isa == rotary::Isa::scalar) {
      ++stats.equal;
      ++stats.entries_equal[static_cast<int>(c.entry)];
    }
  }
}

template <class T, class F>
void with_cache_type(int code, F&& f) {
  if constexpr (std::is_same_v<T, double>) {
    if (code % 2 == 0) {
      f(TypeTag<double>{});
    } else {
      f(TypeTag<float>{});
    }
  } else {
    switch (code) {
      case 0:
        f(TypeTag<T>{});
        break;
      case 1:
        f(TypeTag<float>{});
        break;
      case 2:
        f(TypeTag<rotary::f16>{});
        break;
      case 3:
        f(TypeTag<rotary::bf16>{});
        break;
      case 4:
        f(TypeTag<std::int8_t>{});
        break;
      default:
        f(TypeTag<fp8_e4m3>{});
        break;
    }
  }
}

template <class T>
void run_dtype(Source& in) {
  const int cache_code = in.ConsumeIntegralInRange<int>(0, 5);
  const bool float_weights = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  Case c;
  if (!draw_case(in, c)) return;
  with_cache_type<T>(cache_code, [&](auto etag) {
    using E = typename decltype(etag)::type;
    if (float_weights) {
      run<T, E, float>(c);
    } else {
      run<T, E, T>(c);
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Source in(data, size);
  with_dtype(draw_dtype(in), [&in](auto tag) { run_dtype<typename decltype(tag)::type>(in); });
  return 0;
}
