// rotary — what one fused prologue call does (fusion.hpp runs it): the per-head norms (HeadNorm,
// QkNorm) and Prologue, the q / k / v views, slots, caches and options of one call.
#ifndef ROTARY_PROLOGUE_HPP
#define ROTARY_PROLOGUE_HPP

#include <cstdint>
#include <string>

#include "apply.hpp"
#include "kv_cache.hpp"

namespace rotary {

// y = x / sqrt(mean(x^2) + eps) * w, or * (1 + w) (Gemma's convention, weights stored as w - 1).
enum class NormWeight { plain, unit_offset };

// A per-head RMSNorm over head_dim (q and k each have their own weight, head_dim values each).
// weight == nullptr: weightless.
template <class W>
struct HeadNorm {
  const W* weight = nullptr;
  float eps = 1e-6f;
  NormWeight convention = NormWeight::plain;
  bool enabled = false;

  static HeadNorm rms(const W* weight, float eps, NormWeight convention = NormWeight::plain) noexcept {
    return {weight, eps, convention, true};
  }
  static HeadNorm weightless(float eps) noexcept { return {nullptr, eps, NormWeight::plain, true}; }
};

namespace detail {

template <class W>
std::string check_norm(const char* name, const HeadNorm<W>& n, bool needs_weight_ok = true) {
  if (!n.enabled) return {};
  if (!(finite(n.eps) && n.eps > 0.0f))
    return concat(name, " eps (", n.eps, ") must be finite and > 0 (a zero row would give NaN)");
  if (!needs_weight_ok && n.weight != nullptr) return concat(name, " takes no weight");
  return {};
}

}  // namespace detail

// The QK-norm weights of a model (Qwen3, Gemma 3: q_norm / k_norm, one weight of head_dim each).
template <class W>
struct QkNorm {
  const W* q_weight;
  const W* k_weight;
  float eps;
  NormWeight convention = NormWeight::plain;
};

// What one fused call does. Layouts are [tokens, heads] rows (StridedLayout, element strides); a
// tensor with heads == 0 is absent. The rotator's head_dim is the row length of q and k; v rows
// are v_cache.head_dim long. k is rotated into k_out (if k_out_layout.heads > 0) and into k_cache
// (if k_cache.data) at each token's slot; v is written to v_cache (if v_cache.data).
template <class T, class E = T, class W = T>
struct Prologue {
  const T* q = nullptr;
  StridedLayout q_layout{};
  T* q_out = nullptr;  // may be q with the same layout: in place
  StridedLayout q_out_layout{};
  const T* k = nullptr;
  StridedLayout k_layout{};
  T* k_out = nullptr;
  StridedLayout k_out_layout{};
  const T* v = nullptr;
  StridedLayout v_layout{};
  KvCacheView<E> k_cache{};
  KvCacheView<E> v_cache{};
  Slots slots = Slots::mapping(nullptr, 0);
  HeadNorm<W> q_norm{};  // before RoPE
  HeadNorm<W> k_norm{};
  HeadNorm<W> l2_after{};  // weightless, after RoPE, q and k (Llama 4's qk_norm)
  bool deinterleave = false;  // rows (x0, x1), (x2, x3).. in, rotated and stored half-split (DeepSeek HF)

  // The parts of the common calls.
  void rotate_q_in_place(T* x, const StridedLayout& l) noexcept {
    q = x;
    q_layout = l;
    q_out = x;
    q_out_layout = l;
  }
  void write_kv(const T* k_in, const StridedLayout& kl, const T* v_in, const StridedLayout& vl,
                const KvCacheView<E>& kc, const KvCacheView<E>& vc, const Slots& s) noexcept {
    k = k_in;
    k_layout = kl;
    v = v_in;
    v_layout = vl;
    k_cache = kc;
    v_cache = vc;
    slots = s;
  }
  void norm_before_rope(const QkNorm<W>& n) noexcept {
    q_norm = HeadNorm<W>::rms(n.q_weight, n.eps, n.convention);
    k_norm = HeadNorm<W>::rms(n.k_weight, n.eps, n.convention);
  }

  std::int64_t tokens() const noexcept {
    return q_layout.heads > 0 ? q_layout.tokens : k_layout.heads > 0 ? k_layout.tokens : v_layout.tokens;
  }
  bool has_k_cache() const noexcept { return k_cache.data != nullptr; }
  bool has_v_cache() const noexcept { return v_cache.data != nullptr; }
};

}  // namespace rotary

#endif  // ROTARY_PROLOGUE_HPP
