// The floor of a 16-bit rotation on the core at hand (issue 40): minimal AVX-512 loops over rows held
// in L1 (32 rows of 128 values), timed in TSC cycles per 16 values, with nothing of rotary's around
// them: the convert-only loop (widen, round back, store: the benchmark suite's convert_loop), and the
// same loop with the rotation's arithmetic (half-split: a multiply and an FMA per 16 values;
// interleaved: a lane swap, a multiply and an fmaddsub). Where the two differ, the conversions and the
// arithmetic share the core's ports: a kernel built on these instructions, with its row bookkeeping
// on top, is not expected below this ratio, that core's floor for "dispatch / convert_loop".
//   bash benchmarks/floor/run.sh   (built with the AVX-512 flags; main checks the CPU before any loop)
#include <immintrin.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kD = 128;    // values per row
constexpr int kRows = 32;  // 8 KiB of 16-bit rows in, 8 KiB out: L1
constexpr int kHalf = kD / 2;

alignas(64) std::uint16_t g_in[kRows * kD];
alignas(64) std::uint16_t g_out[kRows * kD];
alignas(64) float g_cos_sin[2 * kHalf];  // half-split: cos of the kHalf pairs, then sin
alignas(64) float g_dup[2 * kD];         // interleaved: cos and sin once per value (c0 c0 c1 c1 ..)

#define FLOOR_LOOP __attribute__((noinline))

// f16 <-> f32 as the kernels convert: vcvtph2ps from memory; vcvtps2ph into a register, then a
// store (the maskz form with every lane keeps g++ from folding the two into the memory form)
inline __attribute__((always_inline)) __m512 widen_f16(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __attribute__((always_inline)) void narrow_f16(std::uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT));
}
// the alternative: vcvtps2ph straight to memory
inline __attribute__((always_inline)) void narrow_f16_to_memory(std::uint16_t* p, __m512 v) {
  asm volatile("vcvtps2ph $0, %1, %0" : "=m"(*reinterpret_cast<__m256i*>(p)) : "v"(v));
}

template <class Widen, class Narrow>
inline __attribute__((always_inline)) void convert_rows(Widen widen, Narrow narrow) {
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kD; j += 16) {
      __m512 a = widen(g_in + r * kD + j);
      asm volatile("" : "+v"(a));  // no arithmetic, but the value goes through a register
      narrow(g_out + r * kD + j, a);
    }
}

template <class Widen, class Narrow>
inline __attribute__((always_inline)) void half_split_rows(Widen widen, Narrow narrow) {
  for (int r = 0; r < kRows; ++r) {
    const std::uint16_t* x = g_in + r * kD;
    std::uint16_t* y = g_out + r * kD;
    for (int j = 0; j < kHalf; j += 16) {
      const __m512 a = widen(x + j);
      const __m512 b = widen(x + kHalf + j);
      const __m512 c = _mm512_loadu_ps(g_cos_sin + j);
      const __m512 s = _mm512_loadu_ps(g_cos_sin + kHalf + j);
      narrow(y + j, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
      narrow(y + kHalf + j, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
    }
  }
}

template <class Widen, class Narrow>
inline __attribute__((always_inline)) void interleaved_rows(Widen widen, Narrow narrow) {
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kD; j += 16) {
      const __m512 a = widen(g_in + r * kD + j);
      const __m512 c = _mm512_loadu_ps(g_dup + j);
      const __m512 s = _mm512_loadu_ps(g_dup + kD + j);
      const __m512 swapped = _mm512_permute_ps(a, 0xB1);
      narrow(g_out + r * kD + j, _mm512_fmaddsub_ps(a, c, _mm512_mul_ps(swapped, s)));
    }
}

FLOOR_LOOP void f16_convert() { convert_rows(widen_f16, narrow_f16); }
FLOOR_LOOP void f16_half_split() { half_split_rows(widen_f16, narrow_f16); }
FLOOR_LOOP void f16_interleaved() { interleaved_rows(widen_f16, narrow_f16); }
FLOOR_LOOP void f16_memory_convert() { convert_rows(widen_f16, narrow_f16_to_memory); }
FLOOR_LOOP void f16_memory_half_split() { half_split_rows(widen_f16, narrow_f16_to_memory); }
FLOOR_LOOP void f16_memory_interleaved() { interleaved_rows(widen_f16, narrow_f16_to_memory); }

// Median over 301 runs of 20 passes over the rows, in TSC cycles per 16 values.
double cycles_per_16(void (*f)()) {
  std::vector<double> t;
  for (int run = 0; run < 301; ++run) {
    const std::uint64_t a = __rdtsc();
    for (int pass = 0; pass < 20; ++pass) {
      f();
      asm volatile("" ::: "memory");  // each pass reads and writes the rows again
    }
    const std::uint64_t b = __rdtsc();
    t.push_back(static_cast<double>(b - a) / (20.0 * kRows * kD / 16));
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq")) {
    std::printf("rotate_floor: this CPU has no AVX-512 (F, BW, VL, DQ); nothing to measure\n");
    return 0;
  }
  for (int i = 0; i < kRows * kD; ++i)
    g_in[i] = static_cast<std::uint16_t>(0x3c00 + (i & 0xff));  // 1.0 .. 1.25
  for (int i = 0; i < kHalf; ++i) g_cos_sin[i] = 0.6f, g_cos_sin[kHalf + i] = 0.8f;
  for (int i = 0; i < kD; ++i) g_dup[i] = 0.6f, g_dup[kD + i] = 0.8f;
  std::printf("rows of %d values in L1 (%d rows), TSC cycles per 16 values, median of 301 runs:\n", kD,
              kRows);
  std::printf("  %-27s %9s %12s %12s   %s\n", "", "convert", "half_split", "interleaved",
              "(x convert: the floor of dispatch / convert_loop)");
  struct Row {
    const char* name;
    void (*convert)();
    void (*half_split)();
    void (*interleaved)();
  };
  for (const Row& r : {Row{"f16 (as the kernels)", f16_convert, f16_half_split, f16_interleaved},
                       Row{"f16 (vcvtps2ph to memory)", f16_memory_convert, f16_memory_half_split,
                           f16_memory_interleaved}}) {
    const double c = cycles_per_16(r.convert), h = cycles_per_16(r.half_split),
                 i = cycles_per_16(r.interleaved);
    std::printf("  %-27s %9.2f %7.2f %.2fx %7.2f %.2fx\n", r.name, c, h, h / c, i, i / c);
  }
  return 0;
}
