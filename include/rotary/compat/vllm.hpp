// rotary — vLLM's rotary_embedding op (csrc/pos_encoding_kernels: the custom op behind
// RotaryEmbedding.forward_cuda / forward_cpu) with its semantics, on rotary's kernels.
//
//   positions      int64 [num_tokens]: the row of cos_sin_cache for each token
//   query          [num_tokens, num_heads * head_size], rotated in place
//   key            [num_tokens, num_kv_heads * head_size], rotated in place, or null
//   cos_sin_cache  [max_position, rot_dim]: per row rot_dim/2 cos values then rot_dim/2 sin values
//   rot_dim        <= head_size; coordinates [rot_dim, head_size) of each head pass through
//   is_neox        true: pairs (x[j], x[j + rot_dim/2]) (GPT-NeoX); false: (x[2j], x[2j+1]) (GPT-J)
// The cache may be f32, f64, f16 or bf16 (vLLM keeps it in the query's dtype); it is widened exactly
// to f32 (f64 for f64 vectors) and never narrowed. Query and key are rotated in one fused pass.
// Unlike the GPU kernel, positions are checked: one outside [0, max_position) throws rotary::error,
// as do null pointers, an odd or oversized rot_dim, a row stride shorter than a token's heads,
// query/key buffers that overlap and a cos_sin_cache that shares memory with query or key.
#ifndef ROTARY_COMPAT_VLLM_HPP
#define ROTARY_COMPAT_VLLM_HPP

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>

#include "../apply.hpp"
#include "../detail/driver/checks.hpp"
#include "../detail/format.hpp"
#include "../positions.hpp"
#include "../table.hpp"
#include "../types.hpp"

namespace rotary::vllm {

// The strided form: query row (token t, head h) at query + t * query_token_stride + h *
// query_head_stride (elements); likewise key. vLLM passes query.stride(-2) style strides for
// [num_tokens, num_heads, head_size] views of fused QKV buffers.
template <class T, class E>
void rotary_embedding_strided(const std::int64_t* positions, std::int64_t num_tokens, T* query,
                              std::int64_t num_heads, std::int64_t query_token_stride,
                              std::int64_t query_head_stride, T* key, std::int64_t num_kv_heads,
                              std::int64_t key_token_stride, std::int64_t key_head_stride, std::int64_t head_size,
                              const E* cos_sin_cache, std::int64_t max_position, std::int64_t rot_dim, bool is_neox) {
  using detail::concat;
  if (num_tokens < 0) throw error(concat("vllm::rotary_embedding: num_tokens (", num_tokens, ") must be >= 0"));
  if (num_tokens > 0 && positions == nullptr) throw error("vllm::rotary_embedding: null positions");
  if (num_tokens > 0 && query == nullptr) throw error("vllm::rotary_embedding: null query");
  if (cos_sin_cache == nullptr) throw error("vllm::rotary_embedding: null cos_sin_cache");
  if (key == nullptr && num_kv_heads != 0)
    throw error(concat("vllm::rotary_embedding: key is null but num_kv_heads is ", num_kv_heads));
  if (rot_dim <= 0 || rot_dim % 2 != 0)
    throw error(concat("vllm::rotary_embedding: rot_dim (", rot_dim, ") must be even and > 0"));
  namespace rd = rotary::detail;
  if (std::string m = rd::check_table_span("cos_sin_cache", max_position, rot_dim, rot_dim, sizeof(E));
      !m.empty())
    throw error(concat("vllm::rotary_embedding: ", m));
  const TableRope<T, E> rope(head_size, rot_dim, is_neox ? Pairing::half_split : Pairing::interleaved,
                             CosSinTableView<E>::concatenated(cos_sin_cache, max_position, rot_dim));
  const StridedLayout ql{num_tokens, num_heads, query_token_stride, query_head_stride};
  const StridedLayout kl = key == nullptr ? StridedLayout{num_tokens, 0, 0, 0}
                                          : StridedLayout{num_tokens, num_kv_heads, key_token_stride, key_head_stride};
  // Query and key are rewritten in place while the cache is read: neither may share memory with it.
  // The driver refuses that as well, in its own terms ("output of q and the cos table"); this names
  // the arguments. Views the driver will refuse are left to it; a null key (no key) has none to check.
  const rd::Extent cache = rd::StridedRows(cos_sin_cache, rot_dim, {{"row", max_position, rot_dim}}).extent();
  for (const auto& [x, l, name] : {std::tuple<const T*, StridedLayout, const char*>{query, ql, "query"},
                                   {key, kl, "key"}})
    if (x != nullptr &&
        rd::check_view(name, x, l.tokens, l.heads, l.token_stride, l.head_stride, head_size).empty() &&
        rd::overlap(cache, rd::token_rows(x, head_size, l.tokens, l.token_stride, l.heads, l.head_stride).extent()))
      throw error(concat("vllm::rotary_embedding: ", name, " overlaps cos_sin_cache: query and key must not share "
                         "memory with the cache (it is read while they are rotated in place)"));
  apply_qk_strided(rope, query, ql, query, ql, key, kl, key, kl, Positions(positions, num_tokens));
}

// Dense query [num_tokens, num_heads * head_size] and key [num_tokens, num_kv_heads * head_size]
// (key null: num_kv_heads is ignored).
template <class T, class E>
void rotary_embedding(const std::int64_t* positions, std::int64_t num_tokens, T* query, std::int64_t num_heads,
                      T* key, std::int64_t num_kv_heads, std::int64_t head_size, const E* cos_sin_cache,
                      std::int64_t max_position, std::int64_t rot_dim, bool is_neox) {
  const std::int64_t kv = key == nullptr ? 0 : num_kv_heads;
  // The dense token strides, refused where they overflow (negative counts: 0, which the strided
  // form's checks refuse by name)
  const auto row = [head_size](const char* name, std::int64_t heads) -> std::int64_t {
    std::uint64_t n = 0;
    if (heads < 0 || head_size < 0) return 0;
    if (!detail::product_fits(n, static_cast<std::uint64_t>(heads), static_cast<std::uint64_t>(head_size)))
      throw error(detail::concat("vllm::rotary_embedding: ", name, " (", heads, ") x head_size (", head_size,
                                 ") overflows ptrdiff_t: no buffer is that large"));
    return static_cast<std::int64_t>(n);
  };
  rotary_embedding_strided(positions, num_tokens, query, num_heads, row("num_heads", num_heads), head_size,
                           key, kv, row("num_kv_heads", kv), head_size, head_size, cos_sin_cache,
                           max_position, rot_dim, is_neox);
}

}  // namespace rotary::vllm

#endif  // ROTARY_COMPAT_VLLM_HPP
