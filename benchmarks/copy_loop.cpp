// rotary_bench: the AVX-512 copy loop with the kernels' access pattern (copy_loop.hpp).
#include "copy_loop.hpp"

#include <benchmark/benchmark.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ROTARY_BENCH_COPY_LOOP 1
#else
#define ROTARY_BENCH_COPY_LOOP 0
#endif

namespace rotary_bench {

#if ROTARY_BENCH_COPY_LOOP

namespace {

// n bytes (n < 64 uses the low n byte lanes) as a mask of byte lanes.
__attribute__((target("avx512f,avx512bw"))) inline __mmask64 tail_mask(std::int64_t n) {
  return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

// All 16 lanes: the maskz forms with every lane compile to the plain instructions and keep g++ 12's
// -Wuninitialized quiet (its plain AVX-512 intrinsics start from _mm512_undefined_*(), GCC PR 105593).
constexpr __mmask16 kAll16 = 0xFFFF;

// What moves one vector (64 bytes, or the first n < 64 of them, masked): full(src, dst) and
// part(src, dst, n), both at byte offset 0 of their arguments.
struct Copy {  // plain loads and stores
  __attribute__((target("avx512f,avx512bw"))) static void full(const char* src, char* dst) {
    _mm512_storeu_si512(dst, _mm512_loadu_si512(src));
  }
  __attribute__((target("avx512f,avx512bw"))) static void part(const char* src, char* dst, std::int64_t n) {
    const __mmask64 m = tail_mask(n);
    _mm512_mask_storeu_epi8(dst, m, _mm512_maskz_loadu_epi8(m, src));
  }
};

// f16 through f32 and back, as the f16 kernels convert (vcvtph2ps on load, vcvtps2ph with round to
// nearest even on store), 16 values per conversion: exact both ways for every non-NaN value.
struct F16RoundTrip {
  // 16 values (32 bytes) there and back
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static __m256i convert(__m256i h) {
    return _mm512_maskz_cvtps_ph(kAll16, _mm512_maskz_cvtph_ps(kAll16, h),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static void full(const char* src, char* dst) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), convert(lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), convert(hi));
  }
  __attribute__((target("avx512f,avx512bw,avx512vl"))) static void part(const char* src, char* dst,
                                                                        std::int64_t n) {
    const auto values = static_cast<unsigned>(n / 2);  // n < 64 bytes, even: fewer than 32 values
    const auto mlo = static_cast<__mmask16>(values >= 16 ? 0xFFFFu : (1u << values) - 1u);
    const auto mhi = static_cast<__mmask16>(values > 16 ? (1u << (values - 16)) - 1u : 0u);
    _mm256_mask_storeu_epi16(dst, mlo, convert(_mm256_maskz_loadu_epi16(mlo, src)));
    _mm256_mask_storeu_epi16(dst + 32, mhi, convert(_mm256_maskz_loadu_epi16(mhi, src + 32)));
  }
};

// bf16 through f32 and back, as the AVX512_BF16 kernels convert: 32 values as even/odd f32 lanes
// (a shift and a mask), back with one vcvtne2ps2bf16 and one vpermw: exact both ways for every value
// that is not NaN or subnormal.
struct Bf16RoundTrip {
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static __m512i convert(__m512i u) {
    const __m512 even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, u, 16));
    const __m512 odd =
        _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                         22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_maskz_permutexvar_epi16(~__mmask32{0}, idx,
                                          reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even)));
  }
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void full(const char* src, char* dst) {
    _mm512_storeu_si512(dst, convert(_mm512_loadu_si512(src)));
  }
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void part(const char* src, char* dst,
                                                                          std::int64_t n) {
    const __mmask64 m = tail_mask(n);
    _mm512_mask_storeu_epi8(dst, m, convert(_mm512_maskz_loadu_epi8(m, src)));
  }
};

// One row in the kernel's order: Order 0 front to back; 1 the halves side by side, a vector of
// each in turn; 2 the halves side by side in blocks of kBlockBytes. The loop per mode is separate,
// so that the per-row overhead is a loop's, as in the kernels.
template <int Order, class Op>
__attribute__((target("avx512f,avx512bw"))) inline void copy_row(const char* src, char* dst,
                                                                 std::int64_t bytes) {
  if constexpr (Order == 0) {
    std::int64_t b = 0;
    for (; b + 64 <= bytes; b += 64) Op::full(src + b, dst + b);
    if (b < bytes) Op::part(src + b, dst + b, bytes - b);
  } else {
    const std::int64_t half = bytes / 2;
    std::int64_t b = 0;
    if constexpr (Order == 2) {
      for (; b + kBlockBytes <= half; b += kBlockBytes) {
        for (std::int64_t i = 0; i < kBlockBytes; i += 64) Op::full(src + b + i, dst + b + i);
        for (std::int64_t i = 0; i < kBlockBytes; i += 64) Op::full(src + half + b + i, dst + half + b + i);
      }
    }
    for (; b + 64 <= half; b += 64) {
      Op::full(src + b, dst + b);
      Op::full(src + half + b, dst + half + b);
    }
    if (b < half) {
      Op::part(src + b, dst + b, half - b);
      Op::part(src + half + b, dst + half + b, half - b);
    }
  }
}

template <int Order, class Op>
__attribute__((target("avx512f,avx512bw"))) void copy_rows(const char* src, char* dst, std::int64_t tokens,
                                                           std::int64_t heads, std::int64_t row_bytes,
                                                           const char* cs, std::int64_t table_row_bytes,
                                                           std::int64_t table_stride_bytes) {
  __m512i seen = _mm512_setzero_si512();  // keeps the table loads: the kernels keep them in registers
  for (std::int64_t t = 0; t < tokens; ++t) {
    const char* row = cs + t * table_stride_bytes;
    for (std::int64_t b = 0; b < table_row_bytes; b += 64)
      seen = _mm512_or_si512(seen, _mm512_maskz_loadu_epi8(tail_mask(table_row_bytes - b), row + b));
    for (std::int64_t h = 0; h < heads; ++h) {
      copy_row<Order, Op>(src, dst, row_bytes);
      src += row_bytes;
      dst += row_bytes;
    }
  }
  const unsigned any = _mm512_test_epi32_mask(seen, seen);
  benchmark::DoNotOptimize(any);
}

template <class Op>
void rows_in_order(const char* src, char* dst, std::int64_t tokens, std::int64_t heads,
                   std::int64_t row_bytes, bool half_split, const char* cs, std::int64_t table_row_bytes,
                   std::int64_t table_stride_bytes) {
  if (!half_split)
    copy_rows<0, Op>(src, dst, tokens, heads, row_bytes, cs, table_row_bytes, table_stride_bytes);
  else if (row_bytes / 2 < kBlockBytes)
    copy_rows<1, Op>(src, dst, tokens, heads, row_bytes, cs, table_row_bytes, table_stride_bytes);
  else
    copy_rows<2, Op>(src, dst, tokens, heads, row_bytes, cs, table_row_bytes, table_stride_bytes);
}

}  // namespace

bool copy_loop_available(RoundTrip trip) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) return false;
  if (trip == RoundTrip::f16) return __builtin_cpu_supports("avx512vl");  // 16-bit masks on ymm
  if (trip == RoundTrip::bf16) return __builtin_cpu_supports("avx512bf16");
  return true;
}

void copy_loop(const void* in, void* out, std::int64_t tokens, std::int64_t heads, std::int64_t row_bytes,
               bool half_split, const void* table, std::int64_t table_row_bytes,
               std::int64_t table_stride_bytes, RoundTrip trip) {
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const auto* cs = static_cast<const char*>(table);
  switch (trip) {
    case RoundTrip::none:
      return rows_in_order<Copy>(src, dst, tokens, heads, row_bytes, half_split, cs, table_row_bytes,
                                 table_stride_bytes);
    case RoundTrip::f16:
      return rows_in_order<F16RoundTrip>(src, dst, tokens, heads, row_bytes, half_split, cs, table_row_bytes,
                                         table_stride_bytes);
    case RoundTrip::bf16:
      return rows_in_order<Bf16RoundTrip>(src, dst, tokens, heads, row_bytes, half_split, cs, table_row_bytes,
                                          table_stride_bytes);
  }
}

#else

bool copy_loop_available(RoundTrip) { return false; }

void copy_loop(const void*, void*, std::int64_t, std::int64_t, std::int64_t, bool, const void*, std::int64_t,
               std::int64_t, RoundTrip) {}

#endif

}  // namespace rotary_bench
