// rotary — positions of the tokens in a call: a start offset, or one int32/int64 value per token.
#ifndef ROTARY_POSITIONS_HPP
#define ROTARY_POSITIONS_HPP

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "config.hpp"

namespace rotary {

// A non-owning view. Token t of a call has position start + t (contiguous), or p[t] (array).
// The array must outlive the call it is passed to.
class Positions {
 public:
  enum class Kind { contiguous, int32, int64 };

  // Tokens at start, start+1, ... (prefill from an offset; decode with one token at `start`).
  static Positions contiguous(std::int64_t start = 0) noexcept {
    Positions p;
    p.start_ = start;
    return p;
  }
  Positions(const std::int32_t* values, std::int64_t count) noexcept
      : kind_(Kind::int32), p32_(values), count_(count) {}
  Positions(const std::int64_t* values, std::int64_t count) noexcept
      : kind_(Kind::int64), p64_(values), count_(count) {}
  // The container constructors are implicit on purpose: apply(rope, x, positions_vector, heads).
  Positions(const std::vector<std::int32_t>& v) noexcept  // NOLINT(google-explicit-constructor)
      : Positions(v.data(), static_cast<std::int64_t>(v.size())) {}
  Positions(const std::vector<std::int64_t>& v) noexcept  // NOLINT(google-explicit-constructor)
      : Positions(v.data(), static_cast<std::int64_t>(v.size())) {}
  // Contiguous Eigen vectors of int32/int64 (Matrix, Array, or Map without a stride). Strided
  // expressions do not convert: copy them into a vector first.
  template <class Derived, class = std::enable_if_t<Derived::IsVectorAtCompileTime>>
  Positions(const Eigen::PlainObjectBase<Derived>& v) noexcept  // NOLINT(google-explicit-constructor)
      : Positions(v.data(), static_cast<std::int64_t>(v.size())) {}
  template <class Plain, int Options>
  // NOLINTNEXTLINE(google-explicit-constructor)
  Positions(const Eigen::Map<Plain, Options, Eigen::Stride<0, 0>>& v) noexcept
      : Positions(v.data(), static_cast<std::int64_t>(v.size())) {}

  Kind kind() const noexcept { return kind_; }
  bool is_contiguous() const noexcept { return kind_ == Kind::contiguous; }
  std::int64_t start() const noexcept { return start_; }
  // Number of values of an array; -1 for contiguous positions (any number of tokens).
  std::int64_t count() const noexcept { return kind_ == Kind::contiguous ? -1 : count_; }

  // Whether an array's pointer is null (false for contiguous positions). Checked entry points reject
  // a null array of count() > 0 values; one of 0 values is empty (an empty std::vector's data() may
  // be null) and serves a call of 0 tokens.
  bool is_null() const noexcept {
    return (kind_ == Kind::int32 && p32_ == nullptr) || (kind_ == Kind::int64 && p64_ == nullptr);
  }

  // An array's first value and the bytes of one (nullptr and 0 for contiguous positions): where the
  // checked calls find the array, which no output may overlap.
  const void* data() const noexcept {
    return kind_ == Kind::int32 ? static_cast<const void*>(p32_) : static_cast<const void*>(p64_);
  }
  std::size_t element_size() const noexcept {
    return kind_ == Kind::int32 ? sizeof(std::int32_t) : kind_ == Kind::int64 ? sizeof(std::int64_t) : 0;
  }

  // The positions of tokens t, t + 1, ...: what a call over a sub-range starting at token t sees.
  // Unchecked (ROTARY_ASSERT in debug builds): 0 <= t <= count() for arrays.
  Positions skip(std::int64_t t) const noexcept {
    ROTARY_ASSERT(t >= 0 && (kind_ == Kind::contiguous || t <= count_));
    Positions p = *this;
    if (t == 0) return p;
    if (kind_ == Kind::contiguous) p.start_ += t;
    else if (kind_ == Kind::int32) p.p32_ += t;
    else p.p64_ += t;
    if (kind_ != Kind::contiguous) p.count_ -= t;
    return p;
  }

  // Unchecked (ROTARY_ASSERT in debug builds): t in [0, count()) of a non-null array.
  std::int64_t operator[](std::int64_t t) const noexcept {
    ROTARY_ASSERT(t >= 0 && (kind_ == Kind::contiguous || (t < count_ && !is_null())));
    switch (kind_) {
      case Kind::int32:
        return p32_[t];
      case Kind::int64:
        return p64_[t];
      default:
        return start_ + t;
    }
  }

 private:
  Positions() = default;
  Kind kind_ = Kind::contiguous;
  const std::int32_t* p32_ = nullptr;
  const std::int64_t* p64_ = nullptr;
  std::int64_t count_ = 0;
  std::int64_t start_ = 0;
};

}  // namespace rotary

#endif  // ROTARY_POSITIONS_HPP
