// rotary — configuration macros: assertions, architecture detection.
#ifndef ROTARY_CONFIG_HPP
#define ROTARY_CONFIG_HPP

#include <cassert>

// Unchecked fast paths verify their preconditions with ROTARY_ASSERT only. It follows NDEBUG like
// assert(); define ROTARY_ASSERT yourself before including rotary to route it elsewhere.
#ifndef ROTARY_ASSERT
#define ROTARY_ASSERT(condition) assert(condition)
#endif

// Unchecked entry points validate a whole call into a message ("" when valid: the text the checked
// entry points throw). ROTARY_ASSERT_MESSAGE(message) asserts through ROTARY_ASSERT that it is
// empty, and prints "rotary: <message>" to stderr just before a failing assertion, so that the
// failure says what is wrong rather than only which check failed. `message` is evaluated only where
// ROTARY_ASSERT evaluates its condition (with the default, never under NDEBUG). Define
// ROTARY_ASSERT_MESSAGE(message) yourself to receive the std::string instead.
#ifndef ROTARY_ASSERT_MESSAGE
#define ROTARY_ASSERT_MESSAGE(message) ROTARY_ASSERT(::rotary::detail::valid_or_report(message))
#endif

#if defined(__x86_64__) || defined(_M_X64)
#define ROTARY_ARCH_X86_64 1
#else
#define ROTARY_ARCH_X86_64 0
#endif

#if defined(__aarch64__) || defined(_M_ARM64)
#define ROTARY_ARCH_AARCH64 1
#else
#define ROTARY_ARCH_AARCH64 0
#endif

// ---- SIMD: which kernels exist, and the attributes that compile them without -m flags ----------
// The AVX2 and AVX-512 kernels live in every build for x86-64 with a GCC-compatible compiler
// (g++, clang++): each function carries a target attribute, so a TU built for baseline x86-64 still
// contains them, and runtime dispatch (dispatch.hpp) runs them only on CPUs that have the ISA.
// Define ROTARY_NO_X86_KERNELS to compile only the scalar kernels.
#if ROTARY_ARCH_X86_64 && defined(__GNUC__) && !defined(ROTARY_NO_X86_KERNELS)
#define ROTARY_X86_KERNELS 1
#else
#define ROTARY_X86_KERNELS 0
#endif

// The NEON kernels live in every AArch64 build with a GCC-compatible compiler: Advanced SIMD is a
// mandatory part of AArch64, so they need no target attribute and no runtime detection. Define
// ROTARY_NO_NEON_KERNELS to compile only the scalar kernels (-mgeneral-regs-only does it too).
#if ROTARY_ARCH_AARCH64 && defined(__GNUC__) && defined(__ARM_NEON) && !defined(ROTARY_NO_NEON_KERNELS)
#define ROTARY_NEON_KERNELS 1
#else
#define ROTARY_NEON_KERNELS 0
#endif

#if defined(__GNUC__)
#define ROTARY_ALWAYS_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define ROTARY_ALWAYS_INLINE __forceinline
#else
#define ROTARY_ALWAYS_INLINE inline
#endif

// Error paths (message building): out of line and laid out apart from the code that checks, so a
// valid call's checks stay small (a fused call of one token spent about a third of its time checking).
#if defined(__GNUC__)
#define ROTARY_COLD __attribute__((cold, noinline))
#elif defined(_MSC_VER)
#define ROTARY_COLD __declspec(noinline)
#else
#define ROTARY_COLD
#endif

// Target regions: empty when the TU's own flags already enable the whole feature set (the attribute
// would change nothing) or when there are no x86 kernels. The feature sets are exactly the ISAs of
// dispatch.hpp: avx2 = AVX2+FMA+F16C, avx512 = AVX-512 F+VL+BW+DQ (plus the avx2 set).
// Lambdas and std:: functions do not inherit a target: intrinsics stay inside attributed functions.
#if ROTARY_X86_KERNELS && !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define ROTARY_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define ROTARY_TARGET_AVX2
#endif
#if ROTARY_X86_KERNELS &&                                                                 \
    !(defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__) &&           \
      defined(__AVX512DQ__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define ROTARY_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")))
#else
#define ROTARY_TARGET_AVX512
#endif
// The avx512 set plus AVX512_BF16 (vcvtneps2bf16): only the bf16 kernels' hardware-rounding variant
// uses it, chosen at run time when cpu_features().avx512bf16. ROTARY_AVX512_BF16_KERNELS says whether
// the compiler knows the feature (g++ >= 10, clang++ >= 9); without it, or with ROTARY_NO_AVX512_BF16
// defined, the avx512 bf16 kernel always uses the integer rounding (the same bits).
#if ROTARY_X86_KERNELS && !defined(ROTARY_NO_AVX512_BF16) && \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10))
#define ROTARY_AVX512_BF16_KERNELS 1
#else
#define ROTARY_AVX512_BF16_KERNELS 0
#endif
#if ROTARY_AVX512_BF16_KERNELS &&                                                         \
    !(defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512VL__) &&         \
      defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX2__) && defined(__FMA__) && \
      defined(__F16C__))
#define ROTARY_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,avx512bf16")))
#else
#define ROTARY_TARGET_AVX512_BF16
#endif

// Value-unsafe flags (-ffast-math, -Ofast, -funsafe-math-optimizations, -fassociative-math,
// -fno-signed-zeros, -ffinite-math-only, -ffp-contract=fast) are supported: the exact angle
// reduction runs behind optimisation barriers, sign masks and finiteness checks read bit patterns
// (detail/fp.hpp), and the first table built checks known rows (detail/exact_angle.hpp) and throws
// rotary::error if a flag still got through. tests/flags builds the core tests under each set.
#endif  // ROTARY_CONFIG_HPP
