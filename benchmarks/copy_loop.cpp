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

// Bytes [b, b + n) of a row, n <= 64 (n < 64: masked).
__attribute__((target("avx512f,avx512bw"))) inline void copy_part(const char* src, char* dst, std::int64_t b,
                                                                  std::int64_t n) {
  const __mmask64 m = tail_mask(n);
  _mm512_mask_storeu_epi8(dst + b, m, _mm512_maskz_loadu_epi8(m, src + b));
}

__attribute__((target("avx512f,avx512bw"))) inline void copy_full(const char* src, char* dst, std::int64_t b) {
  _mm512_storeu_si512(dst + b, _mm512_loadu_si512(src + b));
}

// One row in the kernel's order: Order 0 front to back; 1 the halves side by side, a vector of
// each in turn; 2 the halves side by side in blocks of kBlockBytes. The loop per mode is separate,
// so that the per-row overhead is a loop's, as in the kernels.
template <int Order>
__attribute__((target("avx512f,avx512bw"))) inline void copy_row(const char* src, char* dst, std::int64_t bytes) {
  if constexpr (Order == 0) {
    std::int64_t b = 0;
    for (; b + 64 <= bytes; b += 64) copy_full(src, dst, b);
    if (b < bytes) copy_part(src, dst, b, bytes - b);
  } else {
    const std::int64_t half = bytes / 2;
    std::int64_t b = 0;
    if constexpr (Order == 2) {
      for (; b + kBlockBytes <= half; b += kBlockBytes) {
        for (std::int64_t i = 0; i < kBlockBytes; i += 64) copy_full(src, dst, b + i);
        for (std::int64_t i = 0; i < kBlockBytes; i += 64) copy_full(src + half, dst + half, b + i);
      }
    }
    for (; b + 64 <= half; b += 64) {
      copy_full(src, dst, b);
      copy_full(src + half, dst + half, b);
    }
    if (b < half) {
      copy_part(src, dst, b, half - b);
      copy_part(src + half, dst + half, b, half - b);
    }
  }
}

template <int Order>
__attribute__((target("avx512f,avx512bw"))) void copy_rows(const char* src, char* dst, std::int64_t tokens,
                                                           std::int64_t heads, std::int64_t row_bytes, const char* cs,
                                                           std::int64_t table_row_bytes,
                                                           std::int64_t table_stride_bytes) {
  __m512i seen = _mm512_setzero_si512();  // keeps the table loads: the kernels keep them in registers
  for (std::int64_t t = 0; t < tokens; ++t) {
    const char* row = cs + t * table_stride_bytes;
    for (std::int64_t b = 0; b < table_row_bytes; b += 64)
      seen = _mm512_or_si512(seen, _mm512_maskz_loadu_epi8(tail_mask(table_row_bytes - b), row + b));
    for (std::int64_t h = 0; h < heads; ++h) {
      copy_row<Order>(src, dst, row_bytes);
      src += row_bytes;
      dst += row_bytes;
    }
  }
  const unsigned any = _mm512_test_epi32_mask(seen, seen);
  benchmark::DoNotOptimize(any);
}

}  // namespace

bool copy_loop_available() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }

void copy_loop(const void* in, void* out, std::int64_t tokens, std::int64_t heads, std::int64_t row_bytes,
               bool half_split, const void* table, std::int64_t table_row_bytes, std::int64_t table_stride_bytes) {
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const auto* cs = static_cast<const char*>(table);
  if (!half_split)
    copy_rows<0>(src, dst, tokens, heads, row_bytes, cs, table_row_bytes, table_stride_bytes);
  else if (row_bytes / 2 < kBlockBytes)
    copy_rows<1>(src, dst, tokens, heads, row_bytes, cs, table_row_bytes, table_stride_bytes);
  else
    copy_rows<2>(src, dst, tokens, heads, row_bytes, cs, table_row_bytes, table_stride_bytes);
}

#else

bool copy_loop_available() { return false; }

void copy_loop(const void*, void*, std::int64_t, std::int64_t, std::int64_t, bool, const void*, std::int64_t,
               std::int64_t) {}

#endif

}  // namespace rotary_bench
