// 64-byte aligned storage (cache-line and zmm aligned): a value-semantic vector for cos/sin tables,
// and uninitialized per-call scratch that needs no heap at decode sizes.
#ifndef ROTARY_DETAIL_ALIGNED_BUFFER_HPP
#define ROTARY_DETAIL_ALIGNED_BUFFER_HPP

#include "guard.hpp"

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace rotary::detail {

inline constexpr std::size_t kTableAlignment = 64;

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() noexcept = default;
  template <class U>  // the rebinding constructor is implicit, as in std::allocator
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kTableAlignment}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete(p, std::align_val_t{kTableAlignment});
  }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const AlignedAllocator<U>&) const noexcept {
    return false;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

#if defined(__SANITIZE_ADDRESS__)
#define ROTARY_DETAIL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ROTARY_DETAIL_ASAN 1
#endif
#endif

// Scratch values of one call, left uninitialized (every value is written before it is read):
// InlineBytes on the stack, so a decode step neither allocates nor zero-fills, else an aligned heap
// block of exactly n values (always the heap under AddressSanitizer, which then sees any overrun).
// T is an arithmetic type or Eigen's half / bfloat16 (trivially copyable; their constructors would
// only zero the bits the kernels overwrite).
template <class T, std::size_t InlineBytes = 8192>
class ScratchBuffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>, "scratch holds plain values");

 public:
  // inline_ is left uninitialized on purpose (zero-filling it is the cost this class removes)
  // cppcheck-suppress uninitMemberVar
  ScratchBuffer() noexcept = default;
  // cppcheck-suppress uninitMemberVar
  explicit ScratchBuffer(std::size_t n) { reset(n); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // Room for n values; earlier contents are not kept.
  void reset(std::size_t n) {
#ifdef ROTARY_DETAIL_ASAN
    constexpr std::size_t kInline = 0;
#else
    constexpr std::size_t kInline = InlineBytes;
#endif
    if (n * sizeof(T) <= kInline) {
      heap_.reset();
      data_ = reinterpret_cast<T*>(inline_);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
      return;
    }
    heap_.reset(static_cast<unsigned char*>(::operator new(n * sizeof(T), std::align_val_t{kTableAlignment})));
    data_ = reinterpret_cast<T*>(heap_.get());  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  }
  T* data() noexcept { return data_; }

 private:
  struct Free {
    void operator()(unsigned char* p) const noexcept { ::operator delete(p, std::align_val_t{kTableAlignment}); }
  };
  alignas(kTableAlignment) unsigned char inline_[InlineBytes];
  std::unique_ptr<unsigned char, Free> heap_;
  T* data_ = nullptr;
};

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_ALIGNED_BUFFER_HPP
