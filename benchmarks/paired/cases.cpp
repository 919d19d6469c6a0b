// rotary's paired timing harness (run.sh): the calls whose single runs a shared VM cannot resolve
// (one token, or 16), built twice, against two revisions' headers, into one program. Compiled with
// -DVARIANT=<namespace> -DMAKE=<function>, and for the older headers -Drotary=<another namespace>
// so that the two copies of every inline function keep apart. Everything of this file lives in
// VARIANT for the same reason: two identical template instances in one program are folded into one
// by the linker, and both variants would then time the same code.
//   apply/<pairing>/<dtype>/<checked|unchecked>/tokens:1      32 heads x 128, out of place
//   apply/<pairing>/<dtype>/onthefly/tokens:1                 the unchecked call, cache-free rows
//   apply/<pairing>/f16/table_onnx/tokens:1                   the same on ONNX's f16 cos/sin caches
//   <op>/<dtype>/<fused|unfused>/tokens:<1|16>                 32 q + 8 kv heads x 128, in place,
//       op: rope_kv_write, qkv_split_rope (paged caches [blocks, 16, 8, 128]), qk_norm_rope
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <rotary/fusion.hpp>
#include <rotary/rotary.hpp>

// main.cpp: n bytes of the arena, 64-byte aligned, never freed
void* paired_arena_take(std::size_t n);

namespace VARIANT {

using Runner = std::function<void()>;
constexpr std::int64_t kQ = 32, kKv = 8, kD = 128, kBlock = 16, kFirst = 1024;

// Values in [-1, 1) at the same address in both variants (main.cpp's arena, rewound between the two
// MAKE calls: both register the same cases in the same order), 64-byte aligned. Buffers of their own
// put the two variants' tensors at different offsets within a page, and on a Zen 4 that alone moved
// one case's time by 17% with the same headers on both sides (docs/benchmarks.md).
template <class T>
struct Buffer {
  T* p = nullptr;
  explicit Buffer(std::int64_t n)
      : p(static_cast<T*>(paired_arena_take(static_cast<std::size_t>(n) * sizeof(T)))) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = T(static_cast<float>(i * 7919 % 2001) / 1000.0f - 1.0f);
  }
};

template <class T>
void add_apply(std::map<std::string, Runner>& m, const std::string& dtype, rotary::Pairing pairing) {
  using namespace rotary;
  struct State {
    Rope<T> rope;
    Buffer<T> in{kQ * kD}, out{kQ * kD};
    explicit State(Pairing p) : rope(RotarySpec(kD, p), 4096) {}
  };
  auto s = std::make_shared<State>(pairing);
  const std::string name = "apply/" + std::string(to_string(pairing)) + "/" + dtype + "/";
  m[name + "checked/tokens:1"] = [s] {
    Eigen::Map<const RowMatrix<T>> x(s->in.p, kQ, kD);
    Eigen::Map<RowMatrix<T>> y(s->out.p, kQ, kD);
    apply(s->rope, x, y, Positions::contiguous(100), kQ);
  };
  m[name + "unchecked/tokens:1"] = [s] {
    Eigen::Map<const RowMatrix<T>> x(s->in.p, kQ, kD);
    Eigen::Map<RowMatrix<T>> y(s->out.p, kQ, kD);
    unchecked::apply(s->rope, x, y, Positions::contiguous(100), kQ);
  };
  auto fly = std::make_shared<const Rope<T>>(RotarySpec(kD, pairing), OnTheFly{});
  m[name + "onthefly/tokens:1"] = [s, fly] {
    Eigen::Map<const RowMatrix<T>> x(s->in.p, kQ, kD);
    Eigen::Map<RowMatrix<T>> y(s->out.p, kQ, kD);
    unchecked::apply(*fly, x, y, Positions::contiguous(100), kQ);
  };
}

// The same call on ONNX RotaryEmbedding's f16 cos_cache / sin_cache ([positions, 64] each: the
// Rope's rows rounded to f16), against apply/<pairing>/f16/checked/tokens:1 on rotary's own table.
void add_onnx_table(std::map<std::string, Runner>& m, rotary::Pairing pairing) {
  using namespace rotary;
  constexpr std::int64_t kRows = 4096, kH = kD / 2;
  struct State {
    std::vector<f16> cos, sin;
    TableRope<f16, f16> rope;
    Buffer<f16> in{kQ * kD}, out{kQ * kD};
    State(std::vector<f16> c, std::vector<f16> s, Pairing p)
        : cos(std::move(c)),
          sin(std::move(s)),
          rope(kD, kD, p, CosSinTableView<f16>::separate(cos.data(), sin.data(), kRows, kH)) {}
  };
  const Rope<f16> own(RotarySpec(kD, pairing), kRows);
  std::vector<f16> c, sn;
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t j = 0; j < kH; ++j) {
      c.push_back(f16(own.cache().row_at(r)[j]));
      sn.push_back(f16(own.cache().row_at(r)[kH + j]));
    }
  auto s = std::make_shared<State>(std::move(c), std::move(sn), pairing);
  m["apply/" + std::string(to_string(pairing)) + "/f16/table_onnx/tokens:1"] = [s] {
    Eigen::Map<const RowMatrix<f16>> x(s->in.p, kQ, kD);
    Eigen::Map<RowMatrix<f16>> y(s->out.p, kQ, kD);
    apply(s->rope, x, y, Positions::contiguous(100), kQ);
  };
}

template <class T>
void add_fusion(std::map<std::string, Runner>& m, const std::string& dtype, std::int64_t tokens) {
  using namespace rotary;
  struct State {
    Rope<T> rope{RotarySpec(kD, Pairing::half_split), kFirst + 1024};
    std::int64_t t;
    std::int64_t blocks;
    Buffer<T> q, k, v, qkv, kc, vc, w;
    std::vector<std::int64_t> slots;
    explicit State(std::int64_t tokens)
        : t(tokens),
          blocks((kFirst + tokens) / kBlock + 1),
          q(tokens * kQ * kD),
          k(tokens * kKv * kD),
          v(tokens * kKv * kD),
          qkv(tokens * (kQ + 2 * kKv) * kD),
          kc(blocks * kBlock * kKv * kD),
          vc(blocks * kBlock * kKv * kD),
          w(kD) {
      for (std::int64_t i = 0; i < tokens; ++i) slots.push_back(kFirst + i);
      for (std::int64_t i = 0; i < kD; ++i) w.p[i] = T(i % 3 == 0 ? -1.0f : 1.0f);  // |w| = 1: no drift
    }
    KvCacheView<T> k_cache() const { return KvCacheView<T>::paged(kc.p, blocks, kBlock, kKv, kD); }
    KvCacheView<T> v_cache() const { return KvCacheView<T>::paged(vc.p, blocks, kBlock, kKv, kD); }
  };
  auto s = std::make_shared<State>(tokens);
  const StridedLayout ql{tokens, kQ, kQ * kD, kD}, kl{tokens, kKv, kKv * kD, kD};
  const std::int64_t row = (kQ + 2 * kKv) * kD;
  const StridedLayout pql{tokens, kQ, row, kD}, pkl{tokens, kKv, row, kD};
  const Positions pos = Positions::contiguous(kFirst);
  const std::string tail = "/tokens:" + std::to_string(tokens);
  m["rope_kv_write/" + dtype + "/fused" + tail] = [s, ql, kl, pos] {
    rope_kv_write(s->rope, s->q.p, ql, s->k.p, kl, s->v.p, kl, pos, Slots(s->slots), s->k_cache(),
                  s->v_cache());
  };
  m["rope_kv_write/" + dtype + "/unfused" + tail] = [s, ql, kl, pos] {
    apply_qk_strided(s->rope, s->q.p, ql, s->q.p, ql, s->k.p, kl, s->k.p, kl, pos);
    write_kv_cache(s->k.p, kl, Slots(s->slots), s->k_cache());
    write_kv_cache(s->v.p, kl, Slots(s->slots), s->v_cache());
  };
  m["qkv_split_rope/" + dtype + "/fused" + tail] = [s, pos] {
    qkv_split_rope(s->rope, s->qkv.p, s->t, kQ, kKv, pos, Slots(s->slots), s->k_cache(), s->v_cache());
  };
  m["qkv_split_rope/" + dtype + "/unfused" + tail] = [s, pql, pkl, pos] {
    T* k = s->qkv.p + kQ * kD;
    apply_qk_strided(s->rope, s->qkv.p, pql, s->qkv.p, pql, k, pkl, k, pkl, pos);
    write_kv_cache(k, pkl, Slots(s->slots), s->k_cache());
    write_kv_cache(k + kKv * kD, pkl, Slots(s->slots), s->v_cache());
  };
  m["qk_norm_rope/" + dtype + "/fused" + tail] = [s, ql, kl, pos] {
    qk_norm_rope(s->rope, s->q.p, ql, s->k.p, kl, QkNorm<T>{s->w.p, s->w.p, 1e-6f}, pos);
  };
  m["qk_norm_rope/" + dtype + "/unfused" + tail] = [s, ql, kl, pos] {
    rms_norm(s->q.p, ql, s->q.p, ql, kD, HeadNorm<T>::rms(s->w.p, 1e-6f));
    rms_norm(s->k.p, kl, s->k.p, kl, kD, HeadNorm<T>::rms(s->w.p, 1e-6f));
    apply_qk_strided(s->rope, s->q.p, ql, s->q.p, ql, s->k.p, kl, s->k.p, kl, pos);
  };
}

}  // namespace VARIANT

std::map<std::string, std::function<void()>> MAKE() {
  using namespace VARIANT;
  std::map<std::string, Runner> m;
  for (const rotary::Pairing p : {rotary::Pairing::interleaved, rotary::Pairing::half_split}) {
    add_apply<float>(m, "f32", p);
    add_apply<rotary::f16>(m, "f16", p);
    add_apply<rotary::bf16>(m, "bf16", p);
    add_onnx_table(m, p);
  }
  for (const std::int64_t tokens : {1, 16}) {
    add_fusion<float>(m, "f32", tokens);
    add_fusion<rotary::bf16>(m, "bf16", tokens);
  }
  return m;
}
