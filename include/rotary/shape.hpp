// rotary — the shape of batched activations: memory layouts (BSHD, BHSD, SBHD, packed THD), batch
// shapes and strides, strided 4-d views, and cu_seqlens offsets. Types only; the entry points that
// take them are in apply.hpp.
#ifndef ROTARY_SHAPE_HPP
#define ROTARY_SHAPE_HPP

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "detail/checked_math.hpp"
#include "types.hpp"

namespace rotary {

// Memory order of a 4-d activation tensor (outermost first; head_dim is innermost, stride 1).
//   bshd: [batch, seq, heads, head_dim]   (HF / flash-attn q before transpose)
//   bhsd: [batch, heads, seq, head_dim]   (HF after transpose(1, 2), SDPA)
//   sbhd: [seq, batch, heads, head_dim]   (Megatron)
//   thd:  [total_tokens, heads, head_dim] packed variable-length sequences (apply_varlen). As a
//         dense batch of equal-length sequences it is laid out exactly as bshd.
enum class Layout { bshd, bhsd, sbhd, thd };

constexpr std::string_view to_string(Layout l) noexcept {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::bhsd: return "bhsd";
    case Layout::sbhd: return "sbhd";
    default: return "thd";
  }
}

struct BatchShape {
  std::int64_t batch = 0;
  std::int64_t seq = 0;  // tokens per sequence (a rank's local tokens under context parallelism)
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
};

// Element strides of the batch, sequence and head axes (head_dim has stride 1).
struct BatchStrides {
  std::ptrdiff_t batch = 0;
  std::ptrdiff_t seq = 0;
  std::ptrdiff_t head = 0;
};

// Strides of a dense (contiguous) tensor in `layout`. Throws rotary::error where one exceeds
// PTRDIFF_MAX (no buffer is that large; the products would overflow); with a size < 0 the strides are
// 0, and the view's checks refuse that size by name.
inline BatchStrides dense_strides(Layout layout, const BatchShape& s) {
  if (s.batch < 0 || s.seq < 0 || s.heads < 0 || s.head_dim < 0) return {};
  // The outermost stride is the product of the three other sizes: if it fits, every stride does.
  const std::int64_t outer = layout == Layout::sbhd ? s.batch : layout == Layout::bhsd ? s.heads : s.seq;
  const std::int64_t middle = layout == Layout::bhsd ? s.seq : s.heads;
  std::uint64_t n = 0;
  if (!detail::product_fits(n, static_cast<std::uint64_t>(outer), static_cast<std::uint64_t>(middle),
                            static_cast<std::uint64_t>(s.head_dim)))
    throw error("a dense " + std::string(to_string(layout)) + " tensor of batch " + std::to_string(s.batch) +
                ", seq " + std::to_string(s.seq) + ", heads " + std::to_string(s.heads) + ", head_dim " +
                std::to_string(s.head_dim) + " has a stride past PTRDIFF_MAX: no buffer is that large");
  const std::ptrdiff_t d = s.head_dim;
  switch (layout) {
    case Layout::bhsd: return {s.heads * s.seq * d, d, s.seq * d};
    case Layout::sbhd: return {s.heads * d, s.batch * s.heads * d, d};
    default: return {s.seq * s.heads * d, s.heads * d, d};  // bshd, thd
  }
}

// Sequence b of a batch: element offset of its first row and its tokens x heads layout, for use
// with apply_strided / apply_qk_strided directly.
inline std::ptrdiff_t batch_offset(const BatchStrides& st, std::int64_t b) noexcept { return st.batch * b; }
inline StridedLayout sequence_layout(const BatchShape& s, const BatchStrides& st) noexcept {
  return StridedLayout{s.seq, s.heads, st.seq, st.head};
}
inline std::ptrdiff_t batch_offset(Layout layout, const BatchShape& s, std::int64_t b) {
  return batch_offset(dense_strides(layout, s), b);
}
inline StridedLayout layout_of(Layout layout, const BatchShape& s) {
  return sequence_layout(s, dense_strides(layout, s));
}

// A strided 4-d view: data, shape and strides. BatchView<T> converts to BatchView<const T>.
template <class T>
struct BatchView {
  T* data = nullptr;
  BatchShape shape;
  BatchStrides strides;

  BatchView() = default;
  BatchView(T* d, const BatchShape& s, const BatchStrides& st) noexcept : data(d), shape(s), strides(st) {}
  BatchView(T* d, Layout layout, const BatchShape& s)
      : data(d), shape(s), strides(dense_strides(layout, s)) {}
  // Implicit, like T* to const T*: a mutable view passes where a read-only one is expected.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  BatchView(const BatchView<U>& v) noexcept  // NOLINT(google-explicit-constructor)
      : data(v.data), shape(v.shape), strides(v.strides) {}
};

// Offsets to cu_seqlens-style boundaries: batch + 1 non-decreasing values from 0 to total tokens.
// A non-owning view of int32 or int64 values.
class CuSeqlens {
 public:
  CuSeqlens(const std::int32_t* v, std::int64_t count) noexcept : p32_(v), count_(count), wide_(false) {}
  CuSeqlens(const std::int64_t* v, std::int64_t count) noexcept : p64_(v), count_(count), wide_(true) {}
  // Implicit on purpose, like Positions: apply_varlen(..., cu_seqlens_vector, ...).
  CuSeqlens(const std::vector<std::int32_t>& v) noexcept  // NOLINT(google-explicit-constructor)
      : CuSeqlens(v.data(), static_cast<std::int64_t>(v.size())) {}
  CuSeqlens(const std::vector<std::int64_t>& v) noexcept  // NOLINT(google-explicit-constructor)
      : CuSeqlens(v.data(), static_cast<std::int64_t>(v.size())) {}
  std::int64_t count() const noexcept { return count_; }
  // Whether the pointer is null; checked entry points reject that for count() > 0.
  bool is_null() const noexcept { return wide_ ? p64_ == nullptr : p32_ == nullptr; }
  // The caller's values (int32 or int64, element_size() bytes each), for overlap checks.
  const void* data() const noexcept { return wide_ ? static_cast<const void*>(p64_) : static_cast<const void*>(p32_); }
  std::size_t element_size() const noexcept { return wide_ ? sizeof(std::int64_t) : sizeof(std::int32_t); }
  // Unchecked (ROTARY_ASSERT in debug builds): i in [0, count()) of a non-null array.
  std::int64_t operator[](std::int64_t i) const noexcept {
    ROTARY_ASSERT(i >= 0 && i < count_ && !is_null());
    return wide_ ? p64_[i] : p32_[i];
  }

 private:
  // The width is a flag, not "whichever pointer is non-null": an empty std::vector may give a null
  // data(), which must still read as that vector's width.
  const std::int32_t* p32_ = nullptr;
  const std::int64_t* p64_ = nullptr;
  std::int64_t count_ = 0;
  bool wide_ = false;
};

}  // namespace rotary

#endif  // ROTARY_SHAPE_HPP
