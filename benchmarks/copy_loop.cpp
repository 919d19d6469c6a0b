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

// [b, b + 64) of a span of `bytes` (its last vector masked).
__attribute__((target("avx512f,avx512bw"))) inline void copy_vector(const char* src, char* dst, std::int64_t b,
                                                                    std::int64_t bytes) {
  if (b + 64 <= bytes) {
    _mm512_storeu_si512(dst + b, _mm512_loadu_si512(src + b));
  } else {
    const __mmask64 m = tail_mask(bytes - b);
    _mm512_mask_storeu_epi8(dst + b, m, _mm512_maskz_loadu_epi8(m, src + b));
  }
}

}  // namespace

bool copy_loop_available() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }

__attribute__((target("avx512f,avx512bw"))) void copy_loop(const void* in, void* out, std::int64_t tokens,
                                                           std::int64_t heads, std::int64_t row_bytes,
                                                           bool half_split, const void* table,
                                                           std::int64_t table_row_bytes,
                                                           std::int64_t table_stride_bytes) {
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const auto* cs = static_cast<const char*>(table);
  const std::int64_t half = row_bytes / 2;
  const std::int64_t block = half_split && half >= kBlockBytes ? kBlockBytes : 64;
  __m512i seen = _mm512_setzero_si512();  // keeps the table loads: the kernels keep them in registers
  for (std::int64_t t = 0; t < tokens; ++t) {
    const char* row = cs + t * table_stride_bytes;
    for (std::int64_t b = 0; b < table_row_bytes; b += 64)
      seen = _mm512_or_si512(seen, _mm512_maskz_loadu_epi8(tail_mask(table_row_bytes - b), row + b));
    for (std::int64_t h = 0; h < heads; ++h) {
      if (half_split) {
        for (std::int64_t j = 0; j < half; j += block) {
          const std::int64_t end = j + block < half ? j + block : half;
          for (std::int64_t b = j; b < end; b += 64) copy_vector(src, dst, b, end);
          for (std::int64_t b = j; b < end; b += 64) copy_vector(src + half, dst + half, b, end);
        }
      } else {
        for (std::int64_t b = 0; b < row_bytes; b += 64) copy_vector(src, dst, b, row_bytes);
      }
      src += row_bytes;
      dst += row_bytes;
    }
  }
  const unsigned any = _mm512_test_epi32_mask(seen, seen);
  benchmark::DoNotOptimize(any);
}

#else

bool copy_loop_available() { return false; }

void copy_loop(const void*, void*, std::int64_t, std::int64_t, std::int64_t, bool, const void*, std::int64_t,
               std::int64_t) {}

#endif

}  // namespace rotary_bench
