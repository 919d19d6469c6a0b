// rotary — an engine's KV cache as rotary writes into it: where each token's key and value rows go
// (the storage slot, never the rotation position), in what element type, with what scale.
//
//   KvCacheView<E>   one cache tensor (keys or values): blocks of block_size slots, each slot
//                    `heads` rows of head_dim elements of E at any strides. Factories:
//                      paged(data, blocks, block_size, heads, head_dim)       [blocks, block_size, heads, d]
//                      paged_hnd(data, blocks, block_size, heads, head_dim)   [blocks, heads, block_size, d]
//                      sequences_bhsd(data, batch, heads, max_seq, head_dim)  [B, heads, max_seq, d]
//                      sequences_bshd(data, batch, max_seq, heads, head_dim)  [B, max_seq, heads, d]
//                      strided(...)  any strides (DeepSeek MLA's [.., kv_lora_rank + rope_dim] rows)
//                    A per-sequence cache is a paged one with one block of max_seq slots per sequence.
//   Slots            token t's slot: slot_mapping[t] (vLLM; negative = padding, not written), or
//                    per-sequence offsets (FlashAttention's cache_seqlens): token t of a dense batch
//                    of S tokens per sequence goes to block t / S, slot cache_seqlens[t / S] + t % S.
//   write_kv_cache   the unfused write: rows of T into their slots (convert / quantize).
//
// Element types E and their rounding (one definition, used by the fused and the unfused writes):
//   float, f16, bf16 (and double for double vectors): round to nearest even (detail/convert.hpp).
//   std::int8_t: symmetric, one scale per (slot, head) row, written to scales[slot * heads + head]:
//                scale = absmax / 127 and inv = 127 / absmax, each correctly rounded to f32, and
//                q = round_half_even(x * inv) with the product rounded to f32: vLLM's dynamic per-token
//                int8 quantization (dynamic_scaled_int8_quant) bit for bit. Rows of absmax below
//                127 / FLT_MAX (~3.7e-37), whose f32 inv would overflow, are scaled by 127 / absmax in
//                double instead (vLLM's codes there are +-127 garbage); an all-zero row gets scale
//                0 and zeros; a row holding NaN or infinity gets scale NaN (it dequantizes to NaN,
//                never to plausible numbers) and zeros.
//   fp8_e4m3:    OCP FP8 E4M3 (bias 7, no infinities, max 448), one scale per head read from
//                scales[head] (the engine's calibrated k_scale / v_scale): x * (1 / scale) rounded to
//                nearest even, saturated to +-448 (infinities too), NaN kept as NaN (0x7f | sign).
// The row of a vector is rounded to its own storage type T first (the fused ops round exactly as
// rotating into a T tensor and then writing it would), then converted once to E. The int8, fp8 and
// 16-bit conversions are defined in detail/quantize.hpp and run in the active ISA's cache row kernel
// (kernels/registry.hpp: cache_row_kernel_for), which gives the scalar definition's bits.
#ifndef ROTARY_KV_CACHE_HPP
#define ROTARY_KV_CACHE_HPP

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "detail/convert.hpp"
#include "detail/driver/checks.hpp"
#include "detail/format.hpp"
#include "detail/fp.hpp"
#include "detail/kernels/registry.hpp"
#include "detail/quantize.hpp"
#include "dispatch.hpp"
#include "dtype.hpp"
#include "types.hpp"

namespace rotary {

// OCP FP8 E4M3 ("e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; S.1111.111 is NaN, no
// infinities; largest finite 448, smallest subnormal 2^-9.
struct fp8_e4m3 {
  std::uint8_t bits = 0;
};

// x rounded to nearest even, saturated to +-448 (infinities included), NaN -> NaN.
inline fp8_e4m3 to_fp8_e4m3(float x) noexcept { return {detail::fp8_e4m3_code(x)}; }

inline float to_float(fp8_e4m3 v) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(v.bits & 0x80u) << 24;
  const std::uint32_t e = (v.bits >> 3) & 0x0fu;
  const std::uint32_t m = v.bits & 0x07u;
  if (e == 0x0fu && m == 0x07u) return detail::bits_float(sign | 0x7fc00000u);
  if (e == 0) return detail::bits_float(sign | detail::float_bits(static_cast<float>(m) / 512.0f));
  return detail::bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

template <class E>
inline constexpr bool is_cache_type_v =
    is_storage_type_v<E> || std::is_same_v<E, std::int8_t> || std::is_same_v<E, fp8_e4m3>;

// What the scales pointer of a cache of E holds.
enum class CacheScales {
  none,            // float, f16, bf16, double: scales must be null
  per_row,         // int8: one scale per (slot, head), written by every write
  per_head,        // fp8 e4m3: one scale per head, read
};
template <class E>
constexpr CacheScales cache_scales_of() noexcept {
  if constexpr (std::is_same_v<E, std::int8_t>) return CacheScales::per_row;
  else if constexpr (std::is_same_v<E, fp8_e4m3>) return CacheScales::per_head;
  else return CacheScales::none;
}

template <class E>
struct KvCacheView {
  static_assert(is_cache_type_v<E>, "a KV cache holds float, double, f16, bf16, std::int8_t or rotary::fp8_e4m3");
  E* data = nullptr;
  std::int64_t blocks = 0;
  std::int64_t block_size = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::ptrdiff_t block_stride = 0;  // elements
  std::ptrdiff_t slot_stride = 0;
  std::ptrdiff_t head_stride = 0;
  float* scales = nullptr;  // see CacheScales

  // Any strides; checked (rotary::error): sizes >= 1, strides >= 0 and nested so that no two rows
  // share memory, non-null data, scales present exactly for int8 and fp8.
  static KvCacheView strided(E* data, std::int64_t blocks, std::int64_t block_size, std::int64_t heads,
                             std::int64_t head_dim, std::ptrdiff_t block_stride, std::ptrdiff_t slot_stride,
                             std::ptrdiff_t head_stride, float* scales = nullptr) {
    KvCacheView c;
    c.data = data;
    c.blocks = blocks;
    c.block_size = block_size;
    c.heads = heads;
    c.head_dim = head_dim;
    c.block_stride = block_stride;
    c.slot_stride = slot_stride;
    c.head_stride = head_stride;
    c.scales = scales;
    const std::string m = c.check();
    if (!m.empty()) throw error(m);
    return c;
  }
  static KvCacheView paged(E* data, std::int64_t blocks, std::int64_t block_size, std::int64_t heads,
                           std::int64_t head_dim, float* scales = nullptr) {
    const std::ptrdiff_t block = dense_stride("paged", block_size, heads, head_dim);
    return strided(data, blocks, block_size, heads, head_dim, block, heads * head_dim, head_dim, scales);
  }
  static KvCacheView paged_hnd(E* data, std::int64_t blocks, std::int64_t block_size, std::int64_t heads,
                               std::int64_t head_dim, float* scales = nullptr) {
    const std::ptrdiff_t block = dense_stride("paged_hnd", block_size, heads, head_dim);
    return strided(data, blocks, block_size, heads, head_dim, block, head_dim, block_size * head_dim, scales);
  }
  static KvCacheView sequences_bhsd(E* data, std::int64_t batch, std::int64_t heads, std::int64_t max_seq,
                                    std::int64_t head_dim, float* scales = nullptr) {
    return paged_hnd(data, batch, max_seq, heads, head_dim, scales);
  }
  static KvCacheView sequences_bshd(E* data, std::int64_t batch, std::int64_t max_seq, std::int64_t heads,
                                    std::int64_t head_dim, float* scales = nullptr) {
    return paged(data, batch, max_seq, heads, head_dim, scales);
  }

  // A dense block's stride block_size x heads x head_dim (its factors are the inner strides, so
  // they fit too), refused where it exceeds PTRDIFF_MAX; 0 where a size is < 1, which strided()
  // then refuses by name.
  static std::ptrdiff_t dense_stride(const char* layout, std::int64_t block_size, std::int64_t heads,
                                     std::int64_t head_dim) {
    if (block_size < 1 || heads < 1 || head_dim < 1) return 0;
    std::uint64_t n = 0;
    if (!detail::product_fits(n, static_cast<std::uint64_t>(block_size), static_cast<std::uint64_t>(heads),
                              static_cast<std::uint64_t>(head_dim)))
      throw error(detail::concat(layout, " cache: block_size (", block_size, ") x heads (", heads,
                                 ") x head_dim (", head_dim,
                                 ") overflows ptrdiff_t (the block stride): no buffer is that large"));
    return static_cast<std::ptrdiff_t>(n);
  }

  std::int64_t slots() const noexcept { return blocks * block_size; }
  E* row(std::int64_t slot, std::int64_t head) const noexcept {
    return data + slot / block_size * block_stride + slot % block_size * slot_stride + head * head_stride;
  }
  // int8: the scale of row (slot, head); fp8: the scale of head; other types: null (no arithmetic on
  // their null scales pointer).
  float* row_scale(std::int64_t slot, std::int64_t head) const noexcept {
    if constexpr (cache_scales_of<E>() == CacheScales::per_row) return scales + slot * heads + head;
    else if constexpr (cache_scales_of<E>() == CacheScales::per_head) return scales + head;
    else return nullptr;
  }
  // The scales' floats (int8: one per (slot, head), written; fp8: one per head, read); none: empty.
  detail::Extent scales_extent() const noexcept {
    constexpr CacheScales kind = cache_scales_of<E>();
    if (kind == CacheScales::none || scales == nullptr) return {};
    const std::int64_t n = kind == CacheScales::per_row ? blocks * block_size * heads : heads;
    const auto lo = reinterpret_cast<std::uintptr_t>(scales);
    return {lo, lo + static_cast<std::uintptr_t>(n) * sizeof(float)};
  }
  // The scales a write stores: int8's; fp8's are only read, and may share memory with what is read.
  detail::Extent written_scales_extent() const noexcept {
    return cache_scales_of<E>() == CacheScales::per_row ? scales_extent() : detail::Extent{};
  }
  // First and one-past-last element the view spans.
  detail::Extent extent() const noexcept {
    if (data == nullptr) return {};
    const auto lo = reinterpret_cast<std::uintptr_t>(data);
    const std::int64_t last = (blocks - 1) * block_stride + (block_size - 1) * slot_stride +
                              (heads - 1) * head_stride + head_dim;
    return {lo, lo + static_cast<std::uintptr_t>(last) * sizeof(E)};
  }

  std::string check() const {
    using detail::concat;
    if (sound()) return {};
    if (blocks < 1 || block_size < 1 || heads < 1 || head_dim < 1)
      return concat("KV cache sizes (blocks ", blocks, ", block_size ", block_size, ", heads ", heads,
                    ", head_dim ", head_dim, ") must be >= 1");
    if (data == nullptr) return "KV cache data is null";
    if (block_stride < 0 || slot_stride < 0 || head_stride < 0)
      return concat("KV cache strides (block ", block_stride, ", slot ", slot_stride, ", head ", head_stride,
                    ") must be >= 0");
    if (!detail::span_fits({{blocks, block_stride}, {block_size, slot_stride}, {heads, head_stride}}, head_dim,
                           sizeof(E)))
      return "KV cache spans more than PTRDIFF_MAX bytes";
    if (!detail::StridedRows(data, head_dim, detail::StridedRows::Axis{"slot", block_size, slot_stride},
                             detail::StridedRows::Axis{"head", heads, head_stride})
             .rows_disjoint())
      return concat("KV cache rows of one block overlap (slot stride ", slot_stride, ", head stride ",
                    head_stride, ", head_dim ", head_dim, ")");
    const std::int64_t block_span = (block_size - 1) * slot_stride + (heads - 1) * head_stride + head_dim;
    if (blocks > 1 && block_stride < block_span)
      return concat("KV cache blocks overlap: block stride ", block_stride, " < the ", block_span,
                    " elements a block spans");
    constexpr CacheScales kind = cache_scales_of<E>();
    if (kind == CacheScales::none && scales != nullptr)
      return "KV cache scales given for a float/f16/bf16 cache (only int8 and fp8 caches have scales)";
    if (kind != CacheScales::none && scales == nullptr)
      return kind == CacheScales::per_row ? "int8 KV cache needs scales: one float per (slot, head)"
                                          : "fp8 KV cache needs scales: one float per head";
    if (kind == CacheScales::per_row && blocks * block_size * heads > std::numeric_limits<std::ptrdiff_t>::max() / 4)
      return "int8 KV cache has more rows than a scales array can hold";
    if (kind != CacheScales::none && detail::overlap(scales_extent(), extent()))
      return "KV cache scales share memory with its data";
    if (kind == CacheScales::per_head)
      for (std::int64_t h = 0; h < heads; ++h)
        if (!(detail::finite(scales[h]) && scales[h] >= std::numeric_limits<float>::min()))
          return concat("fp8 KV cache scales[", h, "] (", scales[h],
                        ") must be finite and > 0, and not subnormal (1 / scale must be finite)");
    return {};
  }

 private:
  // Whether check() finds nothing, in straight-line arithmetic without a string (every checked
  // write tests its caches, valid ones nearly always). fp8's per-head scales (a loop over values)
  // answer false, and check() runs its tests in order.
  bool sound() const noexcept {
    constexpr CacheScales kind = cache_scales_of<E>();
    if constexpr (kind == CacheScales::per_head) {
      return false;
    } else {
      if (data == nullptr || blocks < 1 || block_size < 1 || heads < 1 || head_dim < 1 || block_stride < 0 ||
          slot_stride < 0 || head_stride < 0 || (kind == CacheScales::none) != (scales == nullptr))
        return false;
      using U = std::uint64_t;
      U a = 0;
      U b = 0;
      U c = 0;
      U span = 0;
      U bytes = 0;
      if (detail::mul_overflows(U(blocks - 1), U(block_stride), a) ||
          detail::mul_overflows(U(block_size - 1), U(slot_stride), b) ||
          detail::mul_overflows(U(heads - 1), U(head_stride), c) || detail::add_overflows(b, c, span) ||
          detail::add_overflows(span, U(head_dim), span) || detail::add_overflows(span, a, bytes) ||
          !detail::product_fits(bytes, bytes, sizeof(E)))
        return false;
      // span (b + c + head_dim) is one block's: the blocks follow one another
      if (!detail::two_axes_nest(block_size, slot_stride, heads, head_stride, head_dim) ||
          (blocks > 1 && U(block_stride) < span))
        return false;
      // int8: rows nest in a span that fits, so blocks x block_size x heads cannot overflow
      return kind == CacheScales::none ||
             (blocks * block_size * heads <= std::numeric_limits<std::ptrdiff_t>::max() / 4 &&
              !detail::overlap(scales_extent(), extent()));
    }
  }
};

// Token t's slot in a cache. Holds a pointer, not a copy: the array (or vector) must outlive every
// call it is passed to, and a Prologue filled with it.
class Slots {
 public:
  // vLLM's slot_mapping: one int64 per token, negative = padding (that token is not written).
  static Slots mapping(const std::int64_t* slot_mapping, std::int64_t tokens) noexcept {
    Slots s;
    s.map_ = slot_mapping;
    s.count_ = tokens;
    return s;
  }
  Slots(const std::vector<std::int64_t>& v) noexcept  // NOLINT(google-explicit-constructor)
      : map_(v.data()), count_(static_cast<std::int64_t>(v.size())) {}
  // Per-sequence caches: `batch` sequences of tokens_per_sequence new tokens each (dense, token t is
  // sequence t / S), written after the cache_seqlens[b] tokens sequence b already holds.
  static Slots sequences(const std::int32_t* cache_seqlens, std::int64_t batch,
                         std::int64_t tokens_per_sequence) noexcept {
    Slots s;
    s.sequences_ = true;
    s.seqlens32_ = cache_seqlens;
    s.count_ = batch;
    s.per_seq_ = tokens_per_sequence;
    return s;
  }
  static Slots sequences(const std::int64_t* cache_seqlens, std::int64_t batch,
                         std::int64_t tokens_per_sequence) noexcept {
    Slots s;
    s.sequences_ = true;
    s.seqlens64_ = cache_seqlens;
    s.count_ = batch;
    s.per_seq_ = tokens_per_sequence;
    return s;
  }

  bool is_mapping() const noexcept { return !sequences_; }
  // The caller's array the slots are read from (slot_mapping's tokens, or cache_seqlens' batch values):
  // no output of a call may overlap it.
  detail::Extent values_extent() const noexcept {
    const void* p = is_mapping() ? static_cast<const void*>(map_)
                    : seqlens64_ != nullptr ? static_cast<const void*>(seqlens64_)
                                            : static_cast<const void*>(seqlens32_);
    const std::size_t size = is_mapping() || seqlens64_ != nullptr ? sizeof(std::int64_t) : sizeof(std::int32_t);
    if (p == nullptr || count_ <= 0) return {};
    const auto lo = reinterpret_cast<std::uintptr_t>(p);
    return {lo, lo + static_cast<std::uintptr_t>(count_) * size};
  }
  // Unchecked: token t's slot in a cache of block_size slots per block; < 0: not written.
  std::int64_t slot(std::int64_t t, std::int64_t block_size) const noexcept {
    if (is_mapping()) return map_[t];
    const std::int64_t b = t / per_seq_;
    return b * block_size + seqlen(b) + t % per_seq_;
  }

  // "" or what is wrong: one slot per token, inside the cache, no slot twice.
  std::string check(std::int64_t tokens, std::int64_t cache_slots, std::int64_t block_size) const {
    using detail::concat;
    if (is_mapping()) {
      if (count_ != tokens) return concat("slot_mapping has ", count_, " values for ", tokens, " tokens");
      if (tokens > 0 && map_ == nullptr) return concat("slot_mapping is null but ", tokens, " tokens are written");
      for (std::int64_t t = 0; t < tokens; ++t)
        if (map_[t] >= cache_slots)
          return concat("slot_mapping[", t, "] (", map_[t], ") is outside the cache's ", cache_slots, " slots");
      const auto twice = [](std::int64_t slot) {
        return concat("slot_mapping writes slot ", slot, " twice in one call (the result would depend on order)");
      };
      if (tokens <= kPairwiseDuplicateCheck) {  // decode-sized calls: no allocation
        for (std::int64_t t = 1; t < tokens; ++t) {
          if (map_[t] < 0) continue;  // padding may repeat
          for (std::int64_t u = 0; u < t; ++u)
            if (map_[u] == map_[t]) return twice(map_[t]);
        }
        return {};
      }
      std::vector<std::int64_t> used;
      used.reserve(static_cast<std::size_t>(tokens));
      for (std::int64_t t = 0; t < tokens; ++t)
        if (map_[t] >= 0) used.push_back(map_[t]);
      std::sort(used.begin(), used.end());
      const auto dup = std::adjacent_find(used.begin(), used.end());
      if (dup != used.end()) return twice(*dup);
      return {};
    }
    if (per_seq_ < 0 || count_ < 0)
      return concat("sequence slots: batch (", count_, ") and tokens per sequence (", per_seq_, ") must be >= 0");
    if (per_seq_ == 0 ? tokens != 0 : tokens % per_seq_ != 0 || tokens / per_seq_ != count_)  // no overflow
      return concat("sequence slots: ", count_, " sequences x ", per_seq_, " tokens != ", tokens, " tokens");
    if (tokens > 0 && seqlens32_ == nullptr && seqlens64_ == nullptr) return "cache_seqlens is null";
    if (count_ > cache_slots / block_size && tokens > 0)
      return concat("sequence slots: ", count_, " sequences but the cache holds ", cache_slots / block_size);
    for (std::int64_t b = 0; b < count_ && tokens > 0; ++b)
      if (seqlen(b) < 0 || seqlen(b) > block_size - per_seq_)
        return concat("cache_seqlens[", b, "] (", seqlen(b), ") + ", per_seq_, " new tokens does not fit the ",
                      block_size, " slots of a sequence");
    return {};
  }

 private:
  static constexpr std::int64_t kPairwiseDuplicateCheck = 16;  // tokens: compared pairwise, not sorted
  Slots() = default;
  std::int64_t seqlen(std::int64_t b) const noexcept {
    return seqlens64_ != nullptr ? seqlens64_[b] : static_cast<std::int64_t>(seqlens32_[b]);
  }
  const std::int64_t* map_ = nullptr;
  const std::int32_t* seqlens32_ = nullptr;
  const std::int64_t* seqlens64_ = nullptr;
  std::int64_t count_ = 0;
  std::int64_t per_seq_ = 0;
  bool sequences_ = false;  // false: a mapping
};

namespace detail {

// The cache row kernel of this call's ISA for rows of T (registry.hpp), chosen once per call.
template <class T>
CacheRowKernel<T> select_cache_row_kernel() {
  const CacheRowKernel<T> k = cache_row_kernel_for<T>(active_isa());
  return k != nullptr ? k : &scalar::cache_row<T>;
}

// The code of a cache element type with one (int8, fp8, f16, bf16).
template <class E>
constexpr CacheCode cache_code_of() noexcept {
  if constexpr (std::is_same_v<E, std::int8_t>) return CacheCode::int8;
  else if constexpr (std::is_same_v<E, fp8_e4m3>) return CacheCode::fp8_e4m3;
  else if constexpr (std::is_same_v<E, f16>) return CacheCode::f16;
  else {
    static_assert(std::is_same_v<E, bf16>, "int8, fp8, f16 or bf16 (float and double caches take no code)");
    return CacheCode::bf16;
  }
}

// One row of n values of T into a cache row of E (see the header comment for the rounding). scale:
// int8 writes *scale; fp8 reads inv_scale (1 / the head's scale). kernel: select_cache_row_kernel<T>().
template <class T, class E>
void store_row(E* out, const T* in, std::int64_t n, float* scale, float inv_scale, CacheRowKernel<T> kernel) noexcept {
  static_assert(!std::is_same_v<E, double> || std::is_same_v<T, double>,
                "a double cache takes double vectors only (rotary never widens a rounded value into it)");
  static_assert(!std::is_same_v<T, double> || std::is_same_v<E, double> || std::is_same_v<E, float>,
                "double vectors go to a double or float cache (a 16-bit or 8-bit cache would round twice; "
                "convert to f32 first)");
  if constexpr (std::is_same_v<E, T>) {
    std::memcpy(out, in, static_cast<std::size_t>(n) * sizeof(T));
  } else if constexpr (std::is_same_v<E, float> || std::is_same_v<E, double>) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<E>(to_compute(in[i]));
  } else {
    CacheRowArgs<T> a;
    a.in = in;
    a.n = n;
    a.out = out;
    a.code = cache_code_of<E>();
    a.scale = scale;
    a.inv_scale = inv_scale;
    kernel(a);
  }
}

template <class E>
float inverse_head_scale(const KvCacheView<E>& c, std::int64_t h) noexcept {
  if constexpr (cache_scales_of<E>() == CacheScales::per_head) return exact_quotient(1.0f, c.scales[h]);
  else return 1.0f;
}

// Rows of a view of T ([tokens, heads] rows of head_dim) and a cache must not share memory, nor the
// view and the cache's scales where either is written: int8's scales always, fp8's (only read) when
// the view is an output of the call (`written`).
template <class T, class E>
std::string check_cache_apart(const Name& name, const T* p, const StridedLayout& l, std::int64_t head_dim,
                              const char* cache_name, const KvCacheView<E>& c, bool written = false) {
  const Extent x = token_rows_extent(p, head_dim, l.tokens, l.token_stride, l.heads, l.head_stride);
  if (overlap(x, c.extent()))
    return concat(name, " and ", cache_name, " share memory (the cache must be its own buffer)");
  if (overlap(x, written ? c.scales_extent() : c.written_scales_extent()))
    return concat(name, " and ", cache_name, "'s scales share memory (the scales must be their own buffer)");
  return {};
}

// A write's cache and slots on their own: the cache is sound, has x's heads, and (check_slots)
// holds every token's slot; (check_x) x's view, with the cache's head_dim. check_slots false: the
// caller has checked these slots against a cache of the same slots and block size (the result would
// be the same; at 512 tokens the duplicate check sorts a copy). check_x false: the caller has checked
// x's view.
template <class T, class E>
std::string check_cache_target(const Name& name, const T* x, const StridedLayout& l, const Slots& slots,
                               const char* cache_name, const KvCacheView<E>& c, bool check_slots = true,
                               bool check_x = true) {
  std::string m = c.check();
  if (!m.empty()) return concat(cache_name, ": ", m);
  if (l.heads != c.heads)
    return concat(name, " has ", l.heads, " heads but ", cache_name, " has ", c.heads);
  if (check_x) {
    if (std::string v = check_view(name, x, l.tokens, l.heads, l.token_stride, l.head_stride, c.head_dim);
        !v.empty())
      return v;
  }
  if (check_slots) {
    if (std::string s = slots.check(l.tokens, c.slots(), c.block_size); !s.empty()) return s;
  }
  return {};
}

// A write's buffers against one another (each sound on its own: check_cache_target): the slot
// values and x apart from the cache and its written scales.
template <class T, class E>
std::string check_cache_write_apart(const Name& name, const T* x, const StridedLayout& l, const Slots& slots,
                                    const char* cache_name, const KvCacheView<E>& c) {
  // Each token's slot is read again when its rows are written, after the earlier tokens' rows (and
  // int8 scales): written over the slot values, they would move a later token's slot, unchecked.
  // (A call of no tokens reads no slot; its sequence count may be anything.)
  if (l.tokens > 0) {
    const Extent values = slots.values_extent();
    if (overlap(values, c.extent()))
      return concat(cache_name, " and the slots share memory (a token's slot is read after earlier tokens' rows "
                    "are written)");
    if (overlap(values, c.written_scales_extent()))
      return concat(cache_name, "'s scales and the slots share memory (a token's slot is read after earlier "
                    "tokens' scales are written)");
  }
  return check_cache_apart(name, x, l, c.head_dim, cache_name, c);
}

// The whole of a write: rows [tokens, cache.heads] of cache.head_dim, one slot per token.
template <class T, class E>
std::string check_cache_write(const Name& name, const T* x, const StridedLayout& l, const Slots& slots,
                              const char* cache_name, const KvCacheView<E>& c) {
  if (std::string m = check_cache_target(name, x, l, slots, cache_name, c); !m.empty()) return m;
  return check_cache_write_apart(name, x, l, slots, cache_name, c);
}

// Writes tokens [t0, t1) of x into their slots.
template <class T, class E>
void write_rows(const T* x, const StridedLayout& l, const Slots& slots, const KvCacheView<E>& c, std::int64_t t0,
                std::int64_t t1) {
  const CacheRowKernel<T> kernel = select_cache_row_kernel<T>();
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t s = slots.slot(t, c.block_size);
    if (s < 0) continue;
    E* const first = c.row(s, 0);  // (one division per token, not per head)
    for (std::int64_t h = 0; h < c.heads; ++h)
      store_row(first + h * c.head_stride, x + t * l.token_stride + h * l.head_stride, c.head_dim,
                c.row_scale(s, h), inverse_head_scale(c, h), kernel);
  }
}

}  // namespace detail

// The unfused cache write: token t's rows of x ([tokens, cache.heads] rows of cache.head_dim, at
// the layout's strides) into slot slots[t] of the cache. Checked: shapes, slots (inside the cache,
// none twice), scales, x apart from the cache and its int8 scales, the slot values (slot_mapping or
// cache_seqlens) apart from the cache and its int8 scales.
template <class T, class E>
void write_kv_cache(const T* x, const StridedLayout& layout, const Slots& slots, const KvCacheView<E>& cache) {
  const std::string m = detail::check_cache_write("x", x, layout, slots, "cache", cache);
  if (!m.empty()) throw error(m);
  detail::write_rows(x, layout, slots, cache, 0, layout.tokens);
}

// Unchecked (ROTARY_ASSERT in debug builds).
template <class T, class E>
void write_kv_cache_unchecked(const T* x, const StridedLayout& layout, const Slots& slots,
                              const KvCacheView<E>& cache) {
  ROTARY_ASSERT_MESSAGE(detail::check_cache_write("x", x, layout, slots, "cache", cache));
  detail::write_rows(x, layout, slots, cache, 0, layout.tokens);
}

// Row (slot, head) of a cache back in f32 (int8 and fp8 times their scale): for tests and readers.
// Checked: the view, slot and head inside it, out not null.
template <class E>
void read_cache_row(const KvCacheView<E>& c, std::int64_t slot, std::int64_t head, float* out) {
  using detail::concat;
  if (std::string m = c.check(); !m.empty()) throw error(m);
  if (slot < 0 || slot >= c.slots() || head < 0 || head >= c.heads)
    throw error(concat("read_cache_row: slot ", slot, ", head ", head, " is outside the cache's ", c.slots(),
                       " slots x ", c.heads, " heads"));
  if (out == nullptr) throw error("read_cache_row: out is null");
  const E* row = c.row(slot, head);
  for (std::int64_t i = 0; i < c.head_dim; ++i) {
    if constexpr (std::is_same_v<E, std::int8_t>) out[i] = static_cast<float>(row[i]) * *c.row_scale(slot, head);
    else if constexpr (std::is_same_v<E, fp8_e4m3>) out[i] = to_float(row[i]) * c.scales[head];
    else out[i] = static_cast<float>(detail::to_compute(row[i]));
  }
}

}  // namespace rotary

#endif  // ROTARY_KV_CACHE_HPP
