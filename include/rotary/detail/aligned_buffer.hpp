// A minimal 64-byte aligned, value-semantic buffer for cos/sin tables (cache-line and zmm aligned).
#ifndef ROTARY_DETAIL_ALIGNED_BUFFER_HPP
#define ROTARY_DETAIL_ALIGNED_BUFFER_HPP

#include "guard.hpp"

#include <cstddef>
#include <new>
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

}  // namespace rotary::detail

#endif  // ROTARY_DETAIL_ALIGNED_BUFFER_HPP
