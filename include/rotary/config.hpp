// rotary — configuration macros: assertions, architecture detection.
#ifndef ROTARY_CONFIG_HPP
#define ROTARY_CONFIG_HPP

#include <cassert>

// Unchecked fast paths verify their preconditions with ROTARY_ASSERT only. It follows NDEBUG like
// assert(); define ROTARY_ASSERT yourself before including rotary to route it elsewhere.
#ifndef ROTARY_ASSERT
#define ROTARY_ASSERT(condition) assert(condition)
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

// The exact cos/sin tables rely on IEEE double arithmetic with correctly rounded products and fma.
// -ffast-math lets the compiler reassociate the error-free transformations away.
#if defined(__FAST_MATH__) && !defined(ROTARY_ALLOW_FAST_MATH)
#error "rotary: -ffast-math breaks the exact angle reduction; compile rotary users without it " \
       "(or define ROTARY_ALLOW_FAST_MATH and accept inexact cos/sin tables)"
#endif

#endif  // ROTARY_CONFIG_HPP
