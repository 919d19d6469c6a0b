// The kernels' entry points, declared: what the registry (and the driver's scalar fallback) needs to
// name a kernel. Their definitions live in scalar.hpp and in each ISA's lane-op header (which pulls in
// simd_body.hpp and the intrinsics headers). Under ROTARY_SEPARATE_KERNELS a TU sees only these
// declarations, so it parses no intrinsics header and compiles no kernel: the one TU that includes
// <rotary/instantiate_kernels.hpp> defines them all (docs/compile-time.md).
#ifndef ROTARY_DETAIL_KERNELS_ENTRIES_HPP
#define ROTARY_DETAIL_KERNELS_ENTRIES_HPP

#include "../guard.hpp"

#include <cstdint>

#include "../../dtype.hpp"
#include "../convert.hpp"  // the storage/compute conversions every kernel and its tests use
#include "../cpu.hpp"
#include "kernel_args.hpp"

// True where this TU only declares the kernels (ROTARY_SEPARATE_KERNELS, outside the TU that
// instantiates them).
#if defined(ROTARY_SEPARATE_KERNELS) && !defined(ROTARY_DETAIL_INSTANTIATING_KERNELS)
#define ROTARY_DETAIL_DECLARE_KERNELS_ONLY 1
#else
#define ROTARY_DETAIL_DECLARE_KERNELS_ONLY 0
#endif

// The linkage of the few kernel entry points that are plain functions: inline when every TU compiles
// the kernels (header-only), external when one TU defines them for all (separate kernels).
#if defined(ROTARY_SEPARATE_KERNELS) || defined(ROTARY_DETAIL_INSTANTIATING_KERNELS)
#define ROTARY_DETAIL_KERNEL_LINKAGE
#else
#define ROTARY_DETAIL_KERNEL_LINKAGE inline
#endif

namespace rotary::detail {

// Each kernel runs tokens [t0, t1) of a call (contract: scalar::rotate_tokens). Templates over the
// storage type T (f32, f64, f16, bf16); the instances are ROTARY_DETAIL_KERNEL_INSTANCES (registry.hpp).
// norm_rows: per-head RMSNorm rows (NormArgs; contract: scalar::norm_rows). cache_row: one KV-cache
// row in an int8, fp8, f16 or bf16 cache (CacheRowArgs; contract: scalar::cache_row).
namespace scalar {
template <class T>
void rotate_tokens(const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) noexcept;
template <class T>
void norm_rows(const NormArgs<T>& a) noexcept;
template <class T>
void cache_row(const CacheRowArgs<T>& a) noexcept;
}  // namespace scalar

#if ROTARY_X86_KERNELS
namespace avx2 {
template <class T>
void rotate_tokens(const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) noexcept;
template <class T>
void norm_rows(const NormArgs<T>& a) noexcept;
template <class T>
void cache_row(const CacheRowArgs<T>& a) noexcept;
}  // namespace avx2

namespace avx512 {
template <class T>
void rotate_tokens(const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) noexcept;
template <class T>
void norm_rows(const NormArgs<T>& a) noexcept;
template <class T>
void cache_row(const CacheRowArgs<T>& a) noexcept;

// bf16 with the integer rounding (the same as rotate_tokens<bf16>): every CPU with the avx512 set.
ROTARY_DETAIL_KERNEL_LINKAGE void rotate_tokens_bf16_integer(const KernelArgs<bf16>& a, std::int64_t t0,
                                                             std::int64_t t1) noexcept;
#if ROTARY_AVX512_BF16_KERNELS
// bf16 with vcvtneps2bf16: only on a CPU with the avx512 set and cpu_features().avx512bf16.
ROTARY_DETAIL_KERNEL_LINKAGE void rotate_tokens_bf16_hardware(const KernelArgs<bf16>& a, std::int64_t t0,
                                                              std::int64_t t1) noexcept;
#endif
// bf16 with vcvtneps2bf16 where the CPU has AVX512_BF16, else the integer rounding (the same bits):
// what dispatch runs. Only call it on a CPU with the avx512 feature set.
ROTARY_DETAIL_KERNEL_LINKAGE void rotate_tokens_bf16(const KernelArgs<bf16>& a, std::int64_t t0,
                                                     std::int64_t t1) noexcept;

// bf16 norm rows (NormArgs) with vcvtneps2bf16 where the CPU has AVX512_BF16, else the integer rounding.
ROTARY_DETAIL_KERNEL_LINKAGE void norm_rows_bf16(const NormArgs<bf16>& a) noexcept;

// True if rotate_tokens_bf16 uses vcvtneps2bf16 on this CPU (both variants give the same bits).
inline bool bf16_hardware_rounding() noexcept { return ROTARY_AVX512_BF16_KERNELS && cpu_features().avx512bf16; }
}  // namespace avx512
#endif

#if ROTARY_NEON_KERNELS
namespace neon {
template <class T>
void rotate_tokens(const KernelArgs<T>& a, std::int64_t t0, std::int64_t t1) noexcept;
template <class T>
void norm_rows(const NormArgs<T>& a) noexcept;
template <class T>
void cache_row(const CacheRowArgs<T>& a) noexcept;
}  // namespace neon
#endif

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_KERNELS_ENTRIES_HPP
