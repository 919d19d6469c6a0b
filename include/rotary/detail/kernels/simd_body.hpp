// The SIMD rotation body: every rotation algorithm (pairings, register-resident and streamed cos/sin,
// tails, blocking, pass-through) written once over lane operations; simd_norm.hpp (per-head RMSNorm)
// and simd_cache_row.hpp (KV-cache rows) are the other two bodies. Each ISA header (avx2.hpp,
// avx512.hpp, neon.hpp) defines its lane-op structs and traits in its own namespace and then includes
// the three bodies, this one first, inside that namespace, once per target region (no include guard,
// like Highway's -inl.h files):
//   ROTARY_KERNEL_TARGET   attribute of the kernels (the ISA's target, or empty)
//   ROTARY_KERNEL_INLINE   attribute of the building blocks (always_inline + the same target)
// Every function that executes a lane op of S after inlining must carry a target that contains S's:
// always_inline callees are only inlined into callers whose target covers their own.
//
// What the including namespace provides:
//   kMaxRegs          cos + sin vectors a token keeps in registers: 2 * kMaxRegs of them
//   kBlockHalfBytes   half rows of at least this many bytes take the blocked order (0: never)
//   kVectorsPerBlock  vectors per block
//   copy_u16(in, out, n)   n 16-bit elements, bit for bit, nothing outside them touched
//   kStreamStores     whether every lane-op struct has stream(p, v) (a non-temporal full-vector
//                     store) and KernelArgs::stream_out is honoured; store_fence() orders them (sfence)
//   leave_kernel()    what the entry points (rotate_tokens, norm_rows, cache_row) run after the
//                     kernel, and the norm and cache-row kernels before a scalar tail whose helpers
//                     may be compiled out of line: x86, clear_upper_state() (cpu.hpp says why); NEON,
//                     nothing
// and per element type a lane-op struct S:
//   T (storage), C (cos/sin and arithmetic), V, L (lanes), kMasked (masked tails exist),
//   kInterleavedPairs (interleaved rows via load2/store2 rather than duplicated cos/sin),
//   packed_pairs (try the load2 policies first while the row fits in registers; the norm then reads
//   32 stored values a load: load_raw, even/odd, store2, and widen_ordered for its sums in element order),
//   load/store of T and load of C (plain, and with a Mask of n lanes when kMasked), mask(n), set1(c)
//   (F32 and F64: every lane c),
//   sign(negative) / flip(v, sign) (an exact negation), mul, fmadd(a, b, c) = a*b + c and
//   fmsub(a, b, c) = a*b - c each with one rounding; for the duplicated-cos/sin interleaved policy
//   load_dup, half_mask, fmaddsub, swap_pairs; for the pair policies load2/store2 (L pairs split into
//   x0 and x1 vectors, and back), with pmask(n) when masked.
//
// Math, per pair (x0, x1) with cos c and sign-adjusted sin s (s negated once per token for the
// inverse, which is exact): y0 = fmsub(x0, c, x1*s), y1 = fmadd(x1, c, x0*s), i.e. the scalar
// kernel's fma(x0, c, -(x1*s)) and fma(x1, c, x0*s) bit for bit. The duplicated-cos/sin interleaved
// form computes fmaddsub(x, [c0,c0,..], swap_pairs(x) * [s0,s0,..]): even lane x0*c - round(x1*s),
// odd lane x1*c + round(x0*s), the same values.
#if !defined(ROTARY_DETAIL_KERNELS_SIMD_BODY_ALLOWED)
#error "simd_body.hpp is included by the ISA kernel headers only; include a public rotary header"
#endif
#if !defined(ROTARY_KERNEL_TARGET) || !defined(ROTARY_KERNEL_INLINE)
#error "simd_body.hpp: define ROTARY_KERNEL_TARGET and ROTARY_KERNEL_INLINE first"
#endif

// ---- pairing policies ---------------------------------------------------------------------------
// A policy P cuts the h = rotary_dim/2 pairs of a row into steps of P::kPairs pairs. Pair j's
// elements are index(j) and index(j) + second(h). Coef holds the cos/sin of one step in the form
// its step uses; Tail the masks of a last, partial step of n < kPairs pairs (kMasked lanes only).
// Every step loads all its inputs before it stores: `in` may be `out`.

// A block's coefficients held in rotate_registers' registers: step i of the block takes k[i]
// (the HeldCoefs of the policies that have a block()).
template <class Coef>
struct RegisterCoefs {
  const Coef* k;
  ROTARY_KERNEL_INLINE Coef operator()(std::int64_t, int i) const noexcept { return k[i]; }
};

// half_split: x0 = row[j..j+L), x1 = row[h+j..h+j+L); a complex multiply, no shuffles.
template <class Lanes>
struct HalfSplit {
  using S = Lanes;
  using T = typename S::T;
  using C = typename S::C;
  using V = typename S::V;
  static constexpr int kPairs = S::L;
  static constexpr int kCoefVectors = 2;
  static constexpr bool kBlocked = true;
  struct Coef {
    V c;
    V s;
  };
  static constexpr std::int64_t index(std::int64_t j) noexcept { return j; }
  static constexpr std::int64_t second(std::int64_t h) noexcept { return h; }

  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg) noexcept {
    return {S::load(cs.c + j), S::flip(S::load(cs.s + j), neg)};
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t h, std::int64_t j,
                                        const Coef& k) noexcept {
    const V x0 = S::load(in + j);
    const V x1 = S::load(in + h + j);
    S::store(out + j, S::fmsub(x0, k.c, S::mul(x1, k.s)));
    S::store(out + h + j, S::fmadd(x1, k.c, S::mul(x0, k.s)));
  }
  // Where block() takes a step's cos/sin from: the (L1-resident) cache row, loaded where used, or
  // the registers of rotate_registers (step i of the block: k[i]).
  template <class Sign>
  struct RowCoefs {
    const CosSin<C>& cs;
    Sign neg;
    ROTARY_KERNEL_INLINE Coef operator()(std::int64_t j, int) const noexcept { return coef(cs, j, neg); }
  };
  using HeldCoefs = RegisterCoefs<Coef>;
  // N consecutive steps from pair j, grouped: the N vectors of the first half, then the N of the
  // second, loaded in that order; the N results of the first half stored, then the N of the second.
  // The 2N data vectors and N results take the registers. The empty asm (a compiler barrier) keeps
  // the two store groups apart, which the compiler would interleave again. Two uses:
  // * long halves (kBlockHalfBytes), N = kVectorsPerBlock, in the order the hardware prefetchers follow:
  //   the step order reads and writes x0 and x1 as two streams a half row apart, which they follow
  //   poorly, and whole halves beat smaller blocks.
  // * vectors narrower than a cache line (16-bit storage), N = line_steps(): each half's line
  //   written whole before the other half's, the step order of f32 at line granularity, instead
  //   of half lines alternating between the two halves (line_steps, the ISA's kLineOrder16).
  template <int N, class Coefs>
  static ROTARY_KERNEL_INLINE void block(const T* in, T* out, std::int64_t h, std::int64_t j,
                                         const Coefs& coefs) noexcept {
    constexpr int L = S::L;
    V x0[std::size_t{N}];
    V x1[std::size_t{N}];
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) x0[i] = S::load(in + j + std::int64_t{i} * L);
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) x1[i] = S::load(in + h + j + std::int64_t{i} * L);
    V y1[std::size_t{N}];
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) {
      const Coef k = coefs(j + std::int64_t{i} * L, i);
      S::store(out + j + std::int64_t{i} * L, S::fmsub(x0[i], k.c, S::mul(x1[i], k.s)));
      y1[i] = S::fmadd(x1[i], k.c, S::mul(x0[i], k.s));
    }
    asm volatile("" ::: "memory");
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) S::store(out + h + j + std::int64_t{i} * L, y1[i]);
  }

  using Tail = typename S::Mask;
  static ROTARY_KERNEL_INLINE Tail tail(int n) noexcept { return S::mask(n); }
  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg,
                                        const Tail& m) noexcept {
    return {S::load(cs.c + j, m), S::flip(S::load(cs.s + j, m), neg)};
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t h, std::int64_t j, const Coef& k,
                                        const Tail& m) noexcept {
    const V x0 = S::load(in + j, m);
    const V x1 = S::load(in + h + j, m);
    S::store(out + j, m, S::fmsub(x0, k.c, S::mul(x1, k.s)));
    S::store(out + h + j, m, S::fmadd(x1, k.c, S::mul(x0, k.s)));
  }
};

// interleaved, x86 form: one vector holds L/2 pairs as stored; cos/sin duplicated into both lanes
// of each pair, y = fmaddsub(x, cd, swap_pairs(x) * sd).
template <class Lanes>
struct InterleavedDup {
  using S = Lanes;
  using T = typename S::T;
  using C = typename S::C;
  using V = typename S::V;
  static constexpr int kPairs = S::L / 2;
  static constexpr int kCoefVectors = 2;
  static constexpr bool kBlocked = false;
  struct Coef {
    V c;
    V s;
  };
  static constexpr std::int64_t index(std::int64_t j) noexcept { return 2 * j; }
  static constexpr std::int64_t second(std::int64_t) noexcept { return 1; }

  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg) noexcept {
    return {S::load_dup(cs.c + j), S::flip(S::load_dup(cs.s + j), neg)};
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t, std::int64_t j,
                                        const Coef& k) noexcept {
    const V x = S::load(in + 2 * j);
    S::store(out + 2 * j, S::fmaddsub(x, k.c, S::mul(S::swap_pairs(x), k.s)));
  }

  struct Tail {
    typename S::Mask m;       // 2n data lanes
    typename S::HalfMask hm;  // n cos (or sin) values
  };
  static ROTARY_KERNEL_INLINE Tail tail(int n) noexcept { return {S::mask(2 * n), S::half_mask(n)}; }
  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg,
                                        const Tail& m) noexcept {
    return {S::load_dup(cs.c + j, m.hm), S::flip(S::load_dup(cs.s + j, m.hm), neg)};
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t, std::int64_t j, const Coef& k,
                                        const Tail& m) noexcept {
    const V x = S::load(in + 2 * j, m.m);
    S::store(out + 2 * j, m.m, S::fmaddsub(x, k.c, S::mul(S::swap_pairs(x), k.s)));
  }
};

// interleaved, pair form: load2 splits 2L stored values into x0 = [x0_j ..] and x1 = [x1_j ..]
// (NEON vld2; AVX-512 bf16: the even and odd 16-bit halves of each 32-bit lane), cos/sin as stored.
template <class Lanes>
struct InterleavedPairs {
  using S = Lanes;
  using T = typename S::T;
  using C = typename S::C;
  using V = typename S::V;
  static constexpr int kPairs = S::L;
  static constexpr int kCoefVectors = 2;
  static constexpr bool kBlocked = false;
  using Coef = typename HalfSplit<S>::Coef;
  static constexpr std::int64_t index(std::int64_t j) noexcept { return 2 * j; }
  static constexpr std::int64_t second(std::int64_t) noexcept { return 1; }

  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg) noexcept {
    return {S::load(cs.c + j), S::flip(S::load(cs.s + j), neg)};
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t, std::int64_t j,
                                        const Coef& k) noexcept {
    V x0;
    V x1;
    S::load2(in + 2 * j, x0, x1);
    S::store2(out + 2 * j, S::fmsub(x0, k.c, S::mul(x1, k.s)), S::fmadd(x1, k.c, S::mul(x0, k.s)));
  }

  struct Tail {
    typename S::PMask pm;  // 2n stored values
    typename S::Mask cm;   // n cos (or sin) values
  };
  static ROTARY_KERNEL_INLINE Tail tail(int n) noexcept { return {S::pmask(2 * n), S::mask(n)}; }
  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg,
                                        const Tail& m) noexcept {
    return {S::load(cs.c + j, m.cm), S::flip(S::load(cs.s + j, m.cm), neg)};
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t, std::int64_t j, const Coef& k,
                                        const Tail& m) noexcept {
    V x0;
    V x1;
    S::load2(in + 2 * j, m.pm, x0, x1);
    S::store2(out + 2 * j, m.pm, S::fmsub(x0, k.c, S::mul(x1, k.s)), S::fmadd(x1, k.c, S::mul(x0, k.s)));
  }
};

// half_split, pair form (AVX-512 bf16): x0 = row[j..j+2L) and x1 = row[h+j..h+j+2L), each split by
// load2 into its even- and odd-indexed values; cos/sin split the same way once per token.
template <class Lanes>
struct HalfSplitPairs {
  using S = Lanes;
  using T = typename S::T;
  using C = typename S::C;
  using V = typename S::V;
  static constexpr int kPairs = 2 * S::L;
  static constexpr int kCoefVectors = 4;
  static constexpr bool kBlocked = false;
  struct Coef {
    V ce;
    V co;
    V se;
    V so;
  };
  static constexpr std::int64_t index(std::int64_t j) noexcept { return j; }
  static constexpr std::int64_t second(std::int64_t h) noexcept { return h; }

  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef_n(const CosSin<C>& cs, std::int64_t j, Sign neg, int n) noexcept {
    Coef k;
    S::load2(cs.c + j, n, k.ce, k.co);
    S::load2(cs.s + j, n, k.se, k.so);
    k.se = S::flip(k.se, neg);
    k.so = S::flip(k.so, neg);
    return k;
  }
  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg) noexcept {
    return coef_n(cs, j, neg, kPairs);
  }
  static ROTARY_KERNEL_INLINE void math(const Coef& k, V x0e, V x0o, V x1e, V x1o, V& y0e, V& y0o, V& y1e,
                                        V& y1o) noexcept {
    y0e = S::fmsub(x0e, k.ce, S::mul(x1e, k.se));
    y0o = S::fmsub(x0o, k.co, S::mul(x1o, k.so));
    y1e = S::fmadd(x1e, k.ce, S::mul(x0e, k.se));
    y1o = S::fmadd(x1o, k.co, S::mul(x0o, k.so));
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t h, std::int64_t j,
                                        const Coef& k) noexcept {
    V x0e, x0o, x1e, x1o, y0e, y0o, y1e, y1o;
    S::load2(in + j, x0e, x0o);
    S::load2(in + h + j, x1e, x1o);
    math(k, x0e, x0o, x1e, x1o, y0e, y0o, y1e, y1o);
    S::store2(out + j, y0e, y0o);
    S::store2(out + h + j, y1e, y1o);
  }
  // N consecutive steps from pair j (line_steps: 2), every load before any store: step by step, the
  // next step's loads waited on a step's stores for some alignments of the tensors (docs/benchmarks.md,
  // "Measurements behind kernel choices"). The coefficients come from rotate_registers' k[].
  static constexpr bool kLoadsFirst = true;
  using HeldCoefs = RegisterCoefs<Coef>;
  template <int N, class Coefs>
  static ROTARY_KERNEL_INLINE void block(const T* in, T* out, std::int64_t h, std::int64_t j,
                                         const Coefs& coefs) noexcept {
    V x0e[std::size_t{N}], x0o[std::size_t{N}], x1e[std::size_t{N}], x1o[std::size_t{N}];
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) {
      S::load2(in + j + std::int64_t{i} * kPairs, x0e[i], x0o[i]);
      S::load2(in + h + j + std::int64_t{i} * kPairs, x1e[i], x1o[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) {
      V y0e, y0o, y1e, y1o;
      math(coefs(j + std::int64_t{i} * kPairs, i), x0e[i], x0o[i], x1e[i], x1o[i], y0e, y0o, y1e, y1o);
      S::store2(out + j + std::int64_t{i} * kPairs, y0e, y0o);
      S::store2(out + h + j + std::int64_t{i} * kPairs, y1e, y1o);
    }
  }

  struct Tail {
    typename S::PMask pm;  // n stored values per half
    int n;
  };
  static ROTARY_KERNEL_INLINE Tail tail(int n) noexcept { return {S::pmask(n), n}; }
  template <class Sign>
  static ROTARY_KERNEL_INLINE Coef coef(const CosSin<C>& cs, std::int64_t j, Sign neg,
                                        const Tail& m) noexcept {
    return coef_n(cs, j, neg, m.n);
  }
  static ROTARY_KERNEL_INLINE void step(const T* in, T* out, std::int64_t h, std::int64_t j, const Coef& k,
                                        const Tail& m) noexcept {
    V x0e, x0o, x1e, x1o, y0e, y0o, y1e, y1o;
    S::load2(in + j, m.pm, x0e, x0o);
    S::load2(in + h + j, m.pm, x1e, x1o);
    math(k, x0e, x0o, x1e, x1o, y0e, y0o, y1e, y1o);
    S::store2(out + j, m.pm, y0e, y0o);
    S::store2(out + h + j, m.pm, y1e, y1o);
  }
};

// ---- building blocks ----------------------------------------------------------------------------

// Pass-through coordinates [rotary_dim, head_dim) when out of place: copied inline, because a call
// (memcpy) would spill the register-resident cos/sin of the token around it. Bits are moved, never
// converted: 16-bit storage goes through copy_u16, so a signalling NaN or a bf16 subnormal is
// copied as is.
template <class S>
ROTARY_KERNEL_INLINE void copy_pass_through(const typename S::T* in, typename S::T* out, std::int64_t n) noexcept {
  using T = typename S::T;
  if constexpr (sizeof(T) == 2) {
    copy_u16(in, out, n);
  } else {
    std::int64_t j = 0;
    for (; j + S::L <= n; j += S::L) S::store(out + j, S::load(in + j));
    if constexpr (S::kMasked) {
      if (j < n) {
        const auto m = S::mask(static_cast<int>(n - j));
        S::store(out + j, m, S::load(in + j, m));
      }
    } else {
      for (; j < n; ++j) std::memcpy(static_cast<void*>(out + j), static_cast<const void*>(in + j), sizeof(T));
    }
  }
}

// Pairs [j0, h) of one row by the scalar kernel's own formula and conversions (lanes without masks).
template <class P>
ROTARY_KERNEL_INLINE void scalar_pairs(const typename P::T* in, typename P::T* out, const CosSin<typename P::C>& cs,
                                       std::int64_t j0, std::int64_t h, typename P::C sign) noexcept {
  using T = typename P::T;
  using C = typename P::C;
  const std::int64_t second = P::second(h);
  for (std::int64_t j = j0; j < h; ++j) {
    const std::int64_t i0 = P::index(j);
    C y0;
    C y1;
    scalar::rotate_pair<C>(to_compute(in[i0]), to_compute(in[i0 + second]), cs.c[j], sign * cs.s[j], y0, y1);
    out[i0] = from_compute<T>(y0);
    out[i0 + second] = from_compute<T>(y1);
  }
}

// The last h - j0 < kPairs pairs of a row: one masked step, or the scalar formula.
template <class P, class Tail>
ROTARY_KERNEL_INLINE void tail_step(const typename P::T* in, typename P::T* out, const CosSin<typename P::C>& cs,
                                    std::int64_t h, std::int64_t j0, const typename P::Coef& k,
                                    const Tail& m, typename P::C sign) noexcept {
  if constexpr (P::S::kMasked)
    P::step(in, out, h, j0, k, m);
  else
    scalar_pairs<P>(in, out, cs, j0, h, sign);
}

// ---- kernels ------------------------------------------------------------------------------------

// 16-bit rows from beyond the caches (KernelArgs::prefetch) on an ISA that asks for them: the lines
// of the row kPrefetchRows16 on in its stream are asked for before each row (the conversions leave
// the out-of-order window fewer rows to overlap misses in). Gapped rows take rotate_stream; rows
// that follow on stay in rotate_registers, which decides once per call (a hint tested per row there
// would slow decode even when off).
template <class T>
inline bool prefetches(const KernelArgs<T>& a, Ahead kind) noexcept {
  return kPrefetchRows16 > 0 && a.prefetch == kind;
}

// Steps per block of rotate_registers: per 64-byte line for rows written a line at a time
// (HalfSplit::block): 16-bit storage in the half-split pairing, on an ISA whose kLineOrder16 says
// so, where a vector of it is narrower than a line; 2 for policies that load first (kLoadsFirst:
// HalfSplitPairs::block); 0 otherwise (step order).
template <class P, class = void>
struct LoadsFirst : std::false_type {};
template <class P>
struct LoadsFirst<P, std::void_t<decltype(P::kLoadsFirst)>> : std::bool_constant<P::kLoadsFirst> {};

template <class P>
constexpr int line_steps() noexcept {
  if constexpr (P::kBlocked && kLineOrder16 && sizeof(typename P::T) == 2) {
    constexpr int bytes = P::S::L * 2;
    return bytes < 64 ? 64 / bytes : 0;
  } else if constexpr (LoadsFirst<P>::value) {
    return 2;
  } else {
    return 0;
  }
}

// The masks of a last step of `rest` pairs (an empty stand-in for lanes without masks).
template <class P>
ROTARY_KERNEL_INLINE auto tail_of(int rest) noexcept {
  if constexpr (P::S::kMasked)
    return P::tail(rest);
  else
    return rest;
}

// h = K * kPairs + rest pairs (rest < kPairs): per token, the cos/sin of the K full steps (and of
// the masked last one) are loaded once into registers and all of the token's heads are swept.
// kAhead: each row first asks for the row kPrefetchRows16 on in its stream (Ahead::contiguous; an
// instantiation of its own, so that the decode kernel carries no hint code: deciding inside one
// function slows half-split decode).
template <class P, int K, bool kAhead = false>
ROTARY_KERNEL_TARGET void rotate_registers(const KernelArgs<typename P::T>& a, std::int64_t t0,
                                           std::int64_t t1) noexcept {
  using S = typename P::S;
  using T = typename P::T;
  using C = typename P::C;
  using Coef = typename P::Coef;
  constexpr std::int64_t kFull = std::int64_t{K} * P::kPairs;
  const CallStreams<T> rows(a);
  const std::int64_t h = a.rotary_dim / 2;
  const std::int64_t pass = a.head_dim - a.rotary_dim;
  const int rest = static_cast<int>(h - kFull);
  const auto m = tail_of<P>(rest);
  const auto neg = S::sign(a.inverse);
  const C sign = a.inverse ? C(-1) : C(1);
  [[maybe_unused]] const std::int64_t row_bytes = a.rotary_dim * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t t = t0; t < t1; ++t) {
    const CosSin<C> cs = a.cos_sin_row(t);
    Coef k[std::size_t{K} + 1];
#pragma GCC unroll 16
    for (int i = 0; i < K; ++i) k[i] = P::coef(cs, std::int64_t{i} * P::kPairs, neg);
    k[K] = Coef{};
    if constexpr (S::kMasked) {
      if (rest > 0) k[K] = P::coef(cs, kFull, neg, m);
    }
    for (TokenHeads<T> w(rows, t); w.next();) {
      const T* in = w.in();
      T* out = w.out();
      if constexpr (kAhead) w.prefetch_ahead(kPrefetchRows16, row_bytes);
      constexpr int kLine = line_steps<P>();
      constexpr int kLines = kLine > 0 ? K / kLine : 0;
      if constexpr (kLines > 0) {
#pragma GCC unroll 16
        for (int b = 0; b < kLines; ++b)
          P::template block<kLine>(in, out, h, std::int64_t{b} * kLine * P::kPairs,
                                   typename P::HeldCoefs{k + b * kLine});
      }
#pragma GCC unroll 16
      for (int i = kLines * kLine; i < K; ++i) P::step(in, out, h, std::int64_t{i} * P::kPairs, k[i]);
      if (rest > 0) tail_step<P>(in, out, cs, h, kFull, k[K], m, sign);
      if (pass > 0 && in != out) copy_pass_through<S>(in + a.rotary_dim, out + a.rotary_dim, pass);
    }
  }
}

// Any h: one step at a time, cos/sin reloaded per head and step from the (L1-resident) cache row.
template <class P>
ROTARY_KERNEL_TARGET void rotate_stream(const KernelArgs<typename P::T>& a, std::int64_t t0,
                                        std::int64_t t1) noexcept {
  using S = typename P::S;
  using T = typename P::T;
  using C = typename P::C;
  const CallStreams<T> rows(a);
  const std::int64_t h = a.rotary_dim / 2;
  const std::int64_t pass = a.head_dim - a.rotary_dim;
  const std::int64_t full = h - h % P::kPairs;
  const int rest = static_cast<int>(h - full);
  const auto m = tail_of<P>(rest);
  const auto neg = S::sign(a.inverse);
  const C sign = a.inverse ? C(-1) : C(1);
  constexpr std::int64_t kBlockPairs = std::int64_t{kVectorsPerBlock} * P::kPairs;
  const bool ahead = prefetches<T>(a, Ahead::gapped);
  const std::int64_t row_bytes = a.rotary_dim * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t t = t0; t < t1; ++t) {
    const CosSin<C> cs = a.cos_sin_row(t);
    for (TokenHeads<T> w(rows, t); w.next();) {
      const T* in = w.in();
      T* out = w.out();
      if (ahead) w.prefetch_ahead(kPrefetchRows16, row_bytes);
      std::int64_t j = 0;
      if constexpr (P::kBlocked) {
        const typename P::template RowCoefs<decltype(neg)> from_row{cs, neg};
        if (kBlockHalfBytes > 0 && h * static_cast<std::int64_t>(sizeof(T)) >= kBlockHalfBytes) {
          for (; j + kBlockPairs <= full; j += kBlockPairs) P::template block<kVectorsPerBlock>(in, out, h, j, from_row);
        }
        constexpr int kLine = line_steps<P>();
        if constexpr (kLine > 0) {
          for (; j + kLine * P::kPairs <= full; j += kLine * P::kPairs)
            P::template block<kLine>(in, out, h, j, from_row);
        }
      }
      for (; j < full; j += P::kPairs) P::step(in, out, h, j, P::coef(cs, j, neg));
      if (rest > 0) {
        if constexpr (S::kMasked)
          P::step(in, out, h, full, P::coef(cs, full, neg, m), m);
        else
          scalar_pairs<P>(in, out, cs, full, h, sign);
      }
      if (pass > 0 && in != out) copy_pass_through<S>(in + a.rotary_dim, out + a.rotary_dim, pass);
    }
  }
}

// ---- selection ----------------------------------------------------------------------------------

// The register-resident kernel for rows of exactly `full` full steps (K in [0, KMax]); false if none.
template <class P, int K = 0>
bool run_registers(const KernelArgs<typename P::T>& a, std::int64_t full, std::int64_t t0,
                   std::int64_t t1) noexcept {
  constexpr int KMax = 2 * kMaxRegs / P::kCoefVectors;
  if constexpr (K > KMax) {
    return false;
  } else {
    if (full == K) {
      // (power-of-two K only: rotary_dim 64, 128, 256, ...; every K would add to the compile time
      // of every TU that instantiates the kernels)
      if constexpr (sizeof(typename P::T) == 2 && kPrefetchRows16 > 0 && kAheadInRegisters && K >= 2 &&
                    (K & (K - 1)) == 0) {
        if (prefetches(a, Ahead::contiguous)) {
          rotate_registers<P, K, true>(a, t0, t1);
          return true;
        }
      }
      rotate_registers<P, K>(a, t0, t1);
      return true;
    }
    return run_registers<P, K + 1>(a, full, t0, t1);
  }
}

// Rows whose cos/sin fit in registers (full steps plus a masked last one) take rotate_registers,
// others rotate_stream; `only_registers`: return false instead of streaming.
template <class P>
bool run_policy(const KernelArgs<typename P::T>& a, std::int64_t t0, std::int64_t t1,
                bool only_registers) noexcept {
  const std::int64_t h = a.rotary_dim / 2;
  const std::int64_t full = h / P::kPairs;
  const bool tail = h % P::kPairs != 0;
  // coefficient sets that fit in the 2 * kMaxRegs registers set aside for cos/sin, a masked tail's
  // included
  constexpr int budget = 2 * kMaxRegs / P::kCoefVectors;
  // Half rows long enough for the blocked order stream their cos/sin (block() needs the registers).
  bool blocked = false;
  if constexpr (P::kBlocked && kBlockHalfBytes > 0)
    blocked = h * static_cast<std::int64_t>(sizeof(typename P::T)) >= kBlockHalfBytes;
  if (!blocked && !prefetches(a, Ahead::gapped) && full + (P::S::kMasked && tail ? 1 : 0) <= budget &&
      run_registers<P>(a, full, t0, t1))
    return true;
  if (only_registers) return false;
  rotate_stream<P>(a, t0, t1);
  return true;
}

// S with its full-vector stores non-temporal (S::stream): the stores of calls whose outputs go past
// the caches (KernelArgs::stream_out, on ISAs with kStreamStores). A plain store reads its line
// before writing it; a streaming store writes whole lines without reading them, so the call moves
// its output bytes once instead of twice. Masked stores stay plain. The driver's stream_pays admits
// only rows whose every full-vector store is aligned to its vector.
template <class Lanes>
struct Streamed : Lanes {
  using T = typename Lanes::T;
  using V = typename Lanes::V;
  using Lanes::store;
  static ROTARY_KERNEL_INLINE void store(T* p, V v) noexcept { Lanes::stream(p, v); }
};

// The register-resident kernel of P for rows of exactly `full` steps, K a power of two up to the
// register budget (the step counts of the rows stream_pays admits: rotary_dim a multiple of 128
// bytes); false for any other row. 16-bit streamed rows only: through rotate_stream (cos/sin
// loaded per head and step) interleaved rows lose much of what streaming gains
// (docs/simd-and-dispatch.md#streaming-stores). Only these few step counts are instantiated, so
// the TUs that instantiate the kernels do not pay for every K.
template <class P, int K = 2>
bool run_streamed_registers(const KernelArgs<typename P::T>& a, std::int64_t full, std::int64_t t0,
                            std::int64_t t1) noexcept {
  if constexpr (K > 2 * kMaxRegs / P::kCoefVectors) {
    return false;
  } else {
    if (full == K) {
      rotate_registers<P, K>(a, t0, t1);
      return true;
    }
    return run_streamed_registers<P, 2 * K>(a, full, t0, t1);
  }
}

// Tokens [t0, t1) of a call with stream_out set, with streaming stores, then the fence that orders
// them; false (nothing written) where this ISA or this row has no streamed kernel. f32 and f64 take
// rotate_stream (as fast as their register-resident kernels there, and one instantiation per
// pairing); 16-bit rows the register-resident kernels of their few step counts.
template <class S>
bool rotate_streamed(const KernelArgs<typename S::T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  if constexpr (!kStreamStores) {
    return false;
  } else {
    using W = Streamed<S>;
    using Interleaved = std::conditional_t<S::kInterleavedPairs, InterleavedPairs<W>, InterleavedDup<W>>;
    const bool half = a.pairing == Pairing::half_split;
    if constexpr (sizeof(typename S::T) >= 4) {
      if (half)
        rotate_stream<HalfSplit<W>>(a, t0, t1);
      else
        rotate_stream<Interleaved>(a, t0, t1);
    } else {
      const std::int64_t h = a.rotary_dim / 2;
      const bool done = half ? h % HalfSplit<W>::kPairs == 0 &&
                                   run_streamed_registers<HalfSplit<W>>(a, h / HalfSplit<W>::kPairs, t0, t1)
                             : h % Interleaved::kPairs == 0 &&
                                   run_streamed_registers<Interleaved>(a, h / Interleaved::kPairs, t0, t1);
      if (!done) return false;
    }
    store_fence();
    return true;
  }
}

// The lane ops of storage type T (f32, f64, f16, bf16; bf16 with the integer rounding).
template <class T>
using LanesOf = std::conditional_t<
    std::is_same_v<T, float>, F32,
    std::conditional_t<std::is_same_v<T, double>, F64, std::conditional_t<std::is_same_v<T, f16>, F16, BF16>>>;

// Tokens [t0, t1) of a call with lane ops S: the pairing's policy (the pair form first where S
// prefers it while a row fits in registers).
template <class S>
void rotate_tokens_impl(const KernelArgs<typename S::T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  if (a.stream_out && rotate_streamed<S>(a, t0, t1)) return;
  if (a.pairing == Pairing::half_split) {
    if constexpr (S::packed_pairs) {
      if (run_policy<HalfSplitPairs<S>>(a, t0, t1, true)) return;
    }
    run_policy<HalfSplit<S>>(a, t0, t1, false);
  } else {
    if constexpr (S::packed_pairs) {
      if (run_policy<InterleavedPairs<S>>(a, t0, t1, true)) return;
    }
    if constexpr (S::kInterleavedPairs)
      run_policy<InterleavedPairs<S>>(a, t0, t1, false);
    else
      run_policy<InterleavedDup<S>>(a, t0, t1, false);
  }
}

// Tokens [t0, t1) of a call in storage type T, on this ISA's lane ops F32, F64, F16 or BF16; same
// contract as scalar::rotate_tokens. Only call it where the ISA is supported (registry.hpp).
template <class T>
void rotate_tokens(const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) noexcept {
  static_assert(is_storage_type_v<T>, "f32, f64, f16 or bf16");
  rotate_tokens_impl<LanesOf<T>>(a, t0, t1);
  leave_kernel();
}
