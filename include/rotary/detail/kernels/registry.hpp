// The kernel registry: for each row of dispatch.hpp's kIsaTable and each storage type, the kernel
// that runs it, plus the named variants a test or benchmark may pin (the two bf16 roundings of
// avx512). Dispatch (apply.hpp), the tests' ISA sweeps and the benchmark's kernel list read it.
#ifndef ROTARY_DETAIL_KERNELS_REGISTRY_HPP
#define ROTARY_DETAIL_KERNELS_REGISTRY_HPP

#include "../guard.hpp"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../../dispatch.hpp"
#include "../../dtype.hpp"
#include "entries.hpp"
#include "kernel_args.hpp"
#if !ROTARY_DETAIL_DECLARE_KERNELS_ONLY  // the definitions; separate kernels: one TU has them
#include "avx2.hpp"
#include "avx512.hpp"
#include "neon.hpp"
#include "scalar.hpp"
#endif

namespace rotary::detail {

// Tokens [t0, t1) of a call (see scalar::rotate_tokens for the contract).
template <class T>
using Kernel = void (*)(const KernelArgs<T>&, std::int64_t, std::int64_t) noexcept;

// The kernel for `isa` and storage type T; nullptr where this build has none. Only call a kernel
// whose ISA is isa_supported().
template <class T>
constexpr Kernel<T> kernel_for(Isa isa) noexcept {
  static_assert(is_storage_type_v<T>, "f32, f64, f16 or bf16");
  switch (isa) {
    case Isa::scalar:
      return &scalar::rotate_tokens<T>;
#if ROTARY_X86_KERNELS
    case Isa::avx2:
      return &avx2::rotate_tokens<T>;
    case Isa::avx512:  // bf16: vcvtneps2bf16 or the integer rounding, picked per call
      if constexpr (std::is_same_v<T, bf16>)
        return &avx512::rotate_tokens_bf16;
      else
        return &avx512::rotate_tokens<T>;
#endif
#if ROTARY_NEON_KERNELS
    case Isa::neon:
      return &neon::rotate_tokens<T>;
#endif
    default:
      return nullptr;
  }
}

// Per-head RMSNorm rows (NormArgs); every ISA's gives scalar::norm_rows' bits.
template <class T>
using NormKernel = void (*)(const NormArgs<T>&) noexcept;

template <class T>
constexpr NormKernel<T> norm_kernel_for(Isa isa) noexcept {
  static_assert(is_storage_type_v<T>, "f32, f64, f16 or bf16");
  switch (isa) {
    case Isa::scalar:
      return &scalar::norm_rows<T>;
#if ROTARY_X86_KERNELS
    case Isa::avx2:
      return &avx2::norm_rows<T>;
    case Isa::avx512:  // bf16: vcvtneps2bf16 or the integer rounding, picked per call
      if constexpr (std::is_same_v<T, bf16>)
        return &avx512::norm_rows_bf16;
      else
        return &avx512::norm_rows<T>;
#endif
#if ROTARY_NEON_KERNELS
    case Isa::neon:
      return &neon::norm_rows<T>;
#endif
    default:
      return nullptr;
  }
}

// One KV-cache row (CacheRowArgs); every ISA's gives scalar::cache_row's bits.
template <class T>
using CacheRowKernel = void (*)(const CacheRowArgs<T>&) noexcept;

template <class T>
constexpr CacheRowKernel<T> cache_row_kernel_for(Isa isa) noexcept {
  static_assert(is_storage_type_v<T>, "f32, f64, f16 or bf16");
  switch (isa) {
    case Isa::scalar:
      return &scalar::cache_row<T>;
#if ROTARY_X86_KERNELS
    case Isa::avx2:
      return &avx2::cache_row<T>;
    case Isa::avx512:  // bf16 input: widening only, no rounding variant to pick
      return &avx512::cache_row<T>;
#endif
#if ROTARY_NEON_KERNELS
    case Isa::neon:
      return &neon::cache_row<T>;
#endif
    default:
      return nullptr;
  }
}

// A kernel a test or benchmark can run: its name ("avx512", "avx512.bf16_integer", ...), ISA and
// whether this build and CPU run it.
template <class T>
struct KernelVariant {
  std::string name;
  Isa isa;
  Kernel<T> kernel;
  bool runs;
};

// Every ISA's kernel for T in kIsaTable's order (runs = false where this build or CPU cannot), then
// the extra variants: bf16 on avx512 with each rounding on its own.
template <class T>
std::vector<KernelVariant<T>> kernel_variants() {
  std::vector<KernelVariant<T>> out;
  for (const IsaInfo& row : kIsaTable) {
    const Kernel<T> k = kernel_for<T>(row.isa);
    out.push_back({std::string(row.name), row.isa, k, k != nullptr && row.runs()});
  }
#if ROTARY_X86_KERNELS
  if constexpr (std::is_same_v<T, bf16>) {
    const bool avx512 = isa_supported(Isa::avx512);
    out.push_back({"avx512.bf16_integer", Isa::avx512, &avx512::rotate_tokens_bf16_integer, avx512});
#if ROTARY_AVX512_BF16_KERNELS
    out.push_back({"avx512.bf16_hardware", Isa::avx512, &avx512::rotate_tokens_bf16_hardware,
                   avx512 && avx512::bf16_hardware_rounding()});
#endif
  }
#endif
  return out;
}

// ---- compiled once (optional) ----------------------------------------------------------------------
// Every kernel template above, as a list of declarations: KW is `extern template` (declare only) or
// `template` (define here). ROTARY_SEPARATE_KERNELS, defined in every TU of a program, declares them
// only (entries.hpp, without the ISA headers), so no TU but one compiles them: the one that includes
// <rotary/instantiate_kernels.hpp> (CMake: link rotary::kernels, which is that TU and defines the macro
// for its users). That TU also defines the plain-function entry points (avx512's bf16 variants).
// NOLINTBEGIN(bugprone-macro-parentheses): T is a type, KW a keyword
#define ROTARY_DETAIL_KERNEL_SIGNATURE(T) (const KernelArgs<T>&, std::int64_t, std::int64_t) noexcept
#define ROTARY_DETAIL_NORM_SIGNATURE(T) (const NormArgs<T>&) noexcept
#define ROTARY_DETAIL_CACHE_ROW_SIGNATURE(T) (const CacheRowArgs<T>&) noexcept
#if ROTARY_X86_KERNELS
#define ROTARY_DETAIL_X86_INSTANCES(KW, T)                                  \
  KW void avx2::rotate_tokens<T> ROTARY_DETAIL_KERNEL_SIGNATURE(T); \
  KW void avx512::rotate_tokens<T> ROTARY_DETAIL_KERNEL_SIGNATURE(T); \
  KW void avx2::norm_rows<T> ROTARY_DETAIL_NORM_SIGNATURE(T);       \
  KW void avx512::norm_rows<T> ROTARY_DETAIL_NORM_SIGNATURE(T);       \
  KW void avx2::cache_row<T> ROTARY_DETAIL_CACHE_ROW_SIGNATURE(T);    \
  KW void avx512::cache_row<T> ROTARY_DETAIL_CACHE_ROW_SIGNATURE(T);
#else
#define ROTARY_DETAIL_X86_INSTANCES(KW, T)
#endif
#if ROTARY_NEON_KERNELS
#define ROTARY_DETAIL_NEON_INSTANCE(KW, T)                         \
  KW void neon::rotate_tokens<T> ROTARY_DETAIL_KERNEL_SIGNATURE(T); \
  KW void neon::norm_rows<T> ROTARY_DETAIL_NORM_SIGNATURE(T);       \
  KW void neon::cache_row<T> ROTARY_DETAIL_CACHE_ROW_SIGNATURE(T);
#else
#define ROTARY_DETAIL_NEON_INSTANCE(KW, T)
#endif
#define ROTARY_DETAIL_TYPE_INSTANCES(KW, T)                            \
  KW void scalar::rotate_tokens<T> ROTARY_DETAIL_KERNEL_SIGNATURE(T); \
  KW void scalar::norm_rows<T> ROTARY_DETAIL_NORM_SIGNATURE(T);       \
  KW void scalar::cache_row<T> ROTARY_DETAIL_CACHE_ROW_SIGNATURE(T);   \
  ROTARY_DETAIL_X86_INSTANCES(KW, T)                                  \
  ROTARY_DETAIL_NEON_INSTANCE(KW, T)
#define ROTARY_DETAIL_KERNEL_INSTANCES(KW)    \
  ROTARY_DETAIL_TYPE_INSTANCES(KW, float)     \
  ROTARY_DETAIL_TYPE_INSTANCES(KW, double)    \
  ROTARY_DETAIL_TYPE_INSTANCES(KW, ::rotary::f16) \
  ROTARY_DETAIL_TYPE_INSTANCES(KW, ::rotary::bf16)
// NOLINTEND(bugprone-macro-parentheses)

#if ROTARY_DETAIL_DECLARE_KERNELS_ONLY
ROTARY_DETAIL_KERNEL_INSTANCES(extern template)
#endif

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_KERNELS_REGISTRY_HPP
