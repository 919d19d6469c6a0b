// CPU features the kernels need, detected once per process.
//
// x86-64 with a GCC-compatible compiler: cpuid for the instruction sets plus xgetbv for the OS side
// (a CPU may have AVX-512 while the OS does not save zmm/opmask state; the instructions then fault).
// Other architectures and compilers report no features: their builds run the scalar kernels.
#ifndef ROTARY_DETAIL_CPU_HPP
#define ROTARY_DETAIL_CPU_HPP

#include <cstdint>

#include "guard.hpp"

#if ROTARY_X86_KERNELS
#include <cpuid.h>
#endif

namespace rotary::detail {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512vl = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512bf16 = false;
  bool genuine_intel = false;  // the vendor string (which cpuid leaf describes the caches)
  // Bytes of the largest data or unified cache cpuid describes (the last level, usually L3), 0 if
  // it describes none. Tuning only: where outputs are written past the caches (dispatch.hpp's
  // stream_min_bytes).
  std::int64_t last_level_cache_bytes = 0;
  // Bytes of the level-1 data cache, 0 if cpuid describes none. Tuning only: PrologueRunner's chunk.
  std::int64_t l1_data_cache_bytes = 0;

  // The feature sets behind Isa::avx2 and Isa::avx512 (dispatch.hpp).
  bool avx2_set() const noexcept { return avx2 && fma && f16c; }
  bool avx512_set() const noexcept { return avx2_set() && avx512f && avx512vl && avx512bw && avx512dq; }
};

#if ROTARY_X86_KERNELS
inline unsigned long long read_xcr0() noexcept {
  unsigned lo = 0;
  unsigned hi = 0;
  __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// The largest data or unified cache of cpuid's deterministic cache parameters: leaf 4 (Intel) or
// 0x8000001D (AMD, with TOPOEXT); each subleaf one cache, ways x partitions x line x sets bytes,
// type 0 ending the list. 0 if the CPU describes none. With level_one, the level-1 data cache's.
inline std::int64_t largest_cache_bytes(unsigned leaf, bool level_one = false) noexcept {
  std::int64_t best = 0;
  for (unsigned sub = 0; sub < 16; ++sub) {
    unsigned a = 0;
    unsigned b = 0;
    unsigned c = 0;
    unsigned d = 0;
    __cpuid_count(leaf, sub, a, b, c, d);
    const unsigned type = a & 0x1Fu;  // 1 data, 2 instruction, 3 unified
    if (type == 0) break;
    if (type == 2) continue;
    if (level_one && (type != 1 || ((a >> 5) & 7u) != 1)) continue;
    const auto field = [](unsigned v, unsigned shift, unsigned mask) {
      return static_cast<double>((v >> shift) & mask) + 1;
    };
    // ways x partitions x line size x sets, in double: a hypervisor's fields may multiply past int64
    const double bytes = field(b, 22, 0x3FFu) * field(b, 12, 0x3FFu) * field(b, 0, 0xFFFu) * field(c, 0, ~0u);
    const std::int64_t capped = bytes < 0x1p62 ? static_cast<std::int64_t>(bytes) : std::int64_t{1} << 62;
    best = capped > best ? capped : best;
  }
  return best;
}

// AMD's legacy cache leaves, for CPUs and hypervisors that describe no caches in 0x8000001D (it needs
// TOPOEXT, which some hypervisors hide; without a fallback such a machine would have no cache
// described, so no output streamed and the level-1 choices defaulted): 0x80000005 ECX[31:24] the L1
// data cache in KiB; 0x80000006 ECX[31:16] the L2 in KiB and EDX[31:18] the L3 in 512 KiB units (0:
// none). The largest of L2 and L3, or with level_one the L1's.
constexpr std::int64_t amd_legacy_cache_bytes(unsigned l1_ecx, unsigned l2_ecx, unsigned l3_edx,
                                              bool level_one) noexcept {
  if (level_one) return static_cast<std::int64_t>((l1_ecx >> 24) & 0xFFu) * 1024;
  const auto l2 = static_cast<std::int64_t>((l2_ecx >> 16) & 0xFFFFu) * 1024;
  const auto l3 = static_cast<std::int64_t>((l3_edx >> 18) & 0x3FFFu) * 512 * 1024;
  return l2 > l3 ? l2 : l3;
}

inline std::int64_t detect_cache_bytes(bool intel, unsigned max_leaf, bool level_one) noexcept {
  if (intel) return max_leaf >= 4 ? largest_cache_bytes(4, level_one) : 0;
  const auto max_ext = static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr));
  unsigned a = 0;
  unsigned b = 0;
  unsigned c = 0;
  unsigned d = 0;
  if (max_ext >= 0x8000001Du) {
    __cpuid(0x80000001u, a, b, c, d);
    if (((c >> 22) & 1u) != 0) {  // TOPOEXT
      if (const std::int64_t bytes = largest_cache_bytes(0x8000001Du, level_one); bytes > 0) return bytes;
    }
  }
  if (max_ext < 0x80000006u) return 0;
  __cpuid(0x80000005u, a, b, c, d);
  const unsigned l1_ecx = c;
  __cpuid(0x80000006u, a, b, c, d);
  return amd_legacy_cache_bytes(l1_ecx, c, d, level_one);
}
#endif

inline CpuFeatures detect_cpu_features() noexcept {
  CpuFeatures f;
#if ROTARY_X86_KERNELS
  unsigned a = 0;
  unsigned b = 0;
  unsigned c = 0;
  unsigned d = 0;
  // unsigned in GCC's <cpuid.h>, int in clang's
  const auto max_leaf = static_cast<unsigned>(__get_cpuid_max(0, nullptr));
  if (max_leaf < 1) return f;
  __cpuid(0, a, b, c, d);
  f.genuine_intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;  // "Genu" "ineI" "ntel"
  f.last_level_cache_bytes = detect_cache_bytes(f.genuine_intel, max_leaf, false);
  f.l1_data_cache_bytes = detect_cache_bytes(f.genuine_intel, max_leaf, true);
  __cpuid(1, a, b, c, d);
  const bool osxsave = (c >> 27) & 1u;
  const bool avx = (c >> 28) & 1u;
  const bool fma = (c >> 12) & 1u;
  const bool f16c = (c >> 29) & 1u;
  if (!osxsave || !avx) return f;
  const unsigned long long xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6u) == 0x6u;    // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xE6u) == 0xE6u;  // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_state) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  f.avx2 = (b >> 5) & 1u;
  if (zmm_state) {
    f.avx512f = (b >> 16) & 1u;
    f.avx512dq = (b >> 17) & 1u;
    f.avx512bw = (b >> 30) & 1u;
    f.avx512vl = (b >> 31) & 1u;
    if (max_subleaf >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512bf16 = (a >> 5) & 1u;
    }
  }
#endif
  return f;
}

// Detected on first use; thread-safe (a function-local static).
inline const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = detect_cpu_features();
  return features;
}

#if ROTARY_X86_KERNELS
// vzeroupper (zeroes the upper halves of ymm/zmm 0-15), run by every AVX2 / AVX-512 kernel entry
// point after its body: code built for baseline x86-64 (legacy SSE encodings) that runs while those
// halves are dirty pays an SSE/AVX transition on its SSE instructions, which on some CPUs costs
// more than the kernel itself. g++ inserts its own vzeroupper only at -O2 and above, and can miss it
// before a tail call even there.
// Only on CPUs with AVX (the entry points run nowhere else). The clobbers keep a caller built with
// -mavx from holding a ymm value across it.
inline void clear_upper_state() noexcept {
  __asm__ __volatile__("vzeroupper" ::
                           : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                             "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}
#endif

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_CPU_HPP
