// Guard pages (tests/kernels/guard_pages.hpp says how) around the fused prologues of fusion.hpp and
// kv_cache.hpp on every ISA: the registry's RMSNorm kernels and rope_prologue with every buffer
// (q, k, v, norm weights, slot mapping, caches and scales) exact, against the unfused composition.
#include <gtest/gtest.h>

#include <cstring>

#include <rotary/rotary.hpp>

#include "guard_pages.hpp"

#if ROTARY_TEST_HAVE_MMAN

namespace guard_pages {

// got[0, want.size()) holds want's bits.
template <class E>
void expect_bytes(const std::string& what, const E* got, const std::vector<E>& want,
                         const char* whose) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(static_cast<const void*>(got + i), static_cast<const void*>(&want[i]), sizeof(E))) {
      ADD_FAILURE() << what << ": element " << i << " is not what " << whose << " "
                    << rotary_test::seed_note();
      return;
    }
}

// A guarded buffer of n elements of a cache type E, random bytes, and a copy of them.
template <class E>
struct CacheBuffer {
  CacheBuffer(std::size_t n, Flush flush, std::mt19937_64& rng) : buf(n, flush), before(n) {
    auto* bytes = reinterpret_cast<unsigned char*>(buf.data());
    for (std::size_t i = 0; i < n * sizeof(E); ++i) bytes[i] = static_cast<unsigned char>(rng());
    if (n > 0)
      std::memcpy(static_cast<void*>(before.data()), static_cast<const void*>(buf.data()), n * sizeof(E));
  }
  GuardedBuffer<E> buf;
  std::vector<E> before;
};

template <class E>
std::string cache_type_name() {
  if constexpr (std::is_same_v<E, std::int8_t>) {
    return "int8";
  } else if constexpr (std::is_same_v<E, rotary::fp8_e4m3>) {
    return "fp8_e4m3";
  } else {
    return std::string(rotary::dtype_name<E>());
  }
}

// detail/kernels/registry.hpp: this ISA's per-head RMSNorm kernel (norm_kernel_for, called
// directly) on 3 rows of n = head_dim values (the fused shapes: 64, 128 and 256 take the register
// form, the others the two-pass form with a scalar tail), dense or with padding between rows, in
// place and out of place, weightless and with a weight in the compute type (its own guarded
// buffer). Besides not faulting: the scalar kernel's bits on heap copies (test_fusion checks the
// scalar kernel against double), the padding, the weight and an out-of-place input unchanged.
template <class T>
void Fixture<T>::norm_rows() {
  using Cc = C<T>;
  const std::int64_t n = g_.head_dim;
  constexpr std::int64_t rows = 3;
  const rotary::detail::NormKernel<T> kernel = rotary::detail::norm_kernel_for<T>(isa_);
  if (kernel == nullptr) {
    ADD_FAILURE() << where("norm_rows") << ": no norm kernel for a supported ISA";
    return;
  }
  int call = 0;
  for (const bool weighted : {false, true})
    for (const bool in_place : {false, true}) {
      const bool padded = call == 1 || call == 2;  // each of in place / out of place both ways
      ++call;
      const std::ptrdiff_t in_stride = n + (padded ? 1 : 0);
      const std::ptrdiff_t out_stride = in_place ? in_stride : n + (padded ? 0 : 3);
      const auto span = [n](std::ptrdiff_t stride) {
        return static_cast<std::size_t>((rows - 1) * stride + n);
      };
      Tensor<T> in = tensor(span(in_stride));
      Tensor<T> out = tensor(in_place ? 0 : span(out_stride));
      GuardedBuffer<Cc> w(weighted ? static_cast<std::size_t>(n) : 0, flush_);
      for (std::size_t i = 0; i < w.size(); ++i)
        w.data()[i] = static_cast<Cc>(static_cast<double>(rng_() >> 11) * 0x1p-51 - 2.0);
      const std::vector<Cc> w_before(w.data(), w.data() + w.size());
      rotary::detail::NormArgs<T> a;
      a.in = in.data();
      a.in_stride = in_stride;
      a.out = in_place ? in.data() : out.data();
      a.out_stride = out_stride;
      a.rows = rows;
      a.n = n;
      a.weight = weighted ? w.data() : nullptr;
      a.eps = 1e-6;
      a.inv_n = 1.0 / static_cast<double>(n);
      // The scalar kernel on heap copies.
      std::vector<T> want = in_place ? in.before : out.before;
      const std::vector<T> heap_in = in.before;
      rotary::detail::NormArgs<T> r = a;
      r.in = in_place ? want.data() : heap_in.data();
      r.out = want.data();
      r.weight = weighted ? w_before.data() : nullptr;
      rotary::detail::scalar::norm_rows<T>(r);
      kernel(a);
      const std::string name = std::string("norm_rows n ") + std::to_string(n) +
                               (weighted ? " weighted" : "") + (padded ? " padded" : " dense") +
                               (in_place ? " in place" : " out of place");
      expect_bytes(where(name), a.out, want, "the scalar kernel on heap copies gave");
      if (!in_place) expect_untouched(where(name), in);
      expect_bytes(where(name + " weight"), w.data(), w_before, "it was before the call");
    }
}

// fusion.hpp: rope_prologue (checked; the named ops are Prologues filled in) on guarded buffers
// holding exactly their rows: q (rotated out of place, into padded token-major or head-major rows),
// k and v (a GQA pair of heads each), k rotated into a k output on some calls, the q_norm / k_norm
// weights, the slot mapping and the k and v caches (paged NHD and HND, exactly the cache: 2 blocks
// of 4 slots; the mapping {6, 7, 0, padding, 3} writes the first slot, a run into the last two and
// the last of block 0, so both ends of each cache are touched), for a cache of T and, for f32
// vectors, an int8 cache with its guarded per-row scales and an fp8 cache with guarded per-head
// scales (head 0 saturating). Without norm, RMSNorm before RoPE (w and 1 + w), the L2 norm after it,
// and both; one call of each set on 2 threads. The result must be, byte for byte (caches, scales,
// q and k outputs with their padding), what the unfused composition gives on heap copies on the
// scalar kernels (rms_norm, apply_strided, rms_norm weightless, write_kv_cache: test_fusion's
// contract), every input unchanged.
template <class T>
void Fixture<T>::prologue() {
  prologue_into<T>();
  if constexpr (std::is_same_v<T, float>) {
    prologue_into<std::int8_t>();
    prologue_into<rotary::fp8_e4m3>();
  }
}

template <class T>
template <class E>
void Fixture<T>::prologue_into() {
  using rotary::CacheScales;
  using rotary::HeadNorm;
  using rotary::KvCacheView;
  using rotary::NormWeight;
  constexpr CacheScales kScales = rotary::cache_scales_of<E>();
  const std::int64_t d = g_.head_dim;
  const std::int64_t tokens = 5;
  const std::int64_t kv = 2;
  const std::int64_t blocks = 2;
  const std::int64_t block_size = 4;
  const std::vector<std::int64_t> mapping = {6, 7, 0, -1, 3};
  const auto cache_size = static_cast<std::size_t>(blocks * block_size * kv * d);
  const StridedLayout ql{tokens, kHeads, kHeads * d, d};
  const StridedLayout kl{tokens, kv, kv * d, d};
  for (int variant = 0; variant < 4; ++variant) {
    const bool pre = variant % 2 == 1;
    const bool post = variant >= 2;
    const bool k_out = variant == 1 || variant == 2;
    const bool hnd = variant == 1 || variant == 3;
    const NormWeight convention = variant == 3 ? NormWeight::unit_offset : NormWeight::plain;
    const StridedLayout qol = variant % 2 == 0 ? StridedLayout{tokens, kHeads, kHeads * (d + 1) + 2, d + 1}
                                               : StridedLayout{tokens, kHeads, d, tokens * d};
    const GuardedPositions pos = positions(variant % 3, tokens);
    Tensor<T> q = tensor(extent(ql, d));
    Tensor<T> qo = tensor(extent(qol, d));
    Tensor<T> k = tensor(extent(kl, d));
    Tensor<T> ko = tensor(k_out ? extent(kl, d) : 0);
    Tensor<T> v = tensor(extent(kl, d));
    Tensor<T> wq = tensor(pre ? static_cast<std::size_t>(d) : 0);
    Tensor<T> wk = tensor(pre ? static_cast<std::size_t>(d) : 0);
    const auto slots = guarded_array<std::int64_t>(mapping, flush_);
    CacheBuffer<E> kc(cache_size, flush_, rng_);
    CacheBuffer<E> vc(cache_size, flush_, rng_);
    // int8: one scale per (slot, head), written; fp8: one per head, read (head 0 saturates).
    std::size_t scale_count = 0;
    if (kScales == CacheScales::per_row) scale_count = static_cast<std::size_t>(blocks * block_size * kv);
    if (kScales == CacheScales::per_head) scale_count = static_cast<std::size_t>(kv);
    GuardedBuffer<float> ks(scale_count, flush_);
    GuardedBuffer<float> vs(scale_count, flush_);
    for (std::size_t i = 0; i < scale_count; ++i) {
      const auto f = static_cast<float>(i);
      ks.data()[i] = kScales == CacheScales::per_row ? -7.0f : (i == 0 ? 0.002f : 0.01f * f);
      vs.data()[i] = kScales == CacheScales::per_row ? -5.0f : 0.004f * (f + 1.0f);
    }
    const std::vector<float> ks_before(ks.data(), ks.data() + scale_count);
    const std::vector<float> vs_before(vs.data(), vs.data() + scale_count);
    const auto view = [&](E* data, float* scales) {
      return hnd ? KvCacheView<E>::paged_hnd(data, blocks, block_size, kv, d,
                                             scale_count > 0 ? scales : nullptr)
                 : KvCacheView<E>::paged(data, blocks, block_size, kv, d,
                                         scale_count > 0 ? scales : nullptr);
    };
    const auto rms = [&](const T* w, float eps) { return HeadNorm<T>::rms(w, eps, convention); };
    const HeadNorm<T> l2 = HeadNorm<T>::weightless(1e-6f);

    rotary::Prologue<T, E, T> c;
    c.q = q.data();
    c.q_layout = ql;
    c.q_out = qo.data();
    c.q_out_layout = qol;
    c.write_kv(k.data(), kl, v.data(), kl, view(kc.buf.data(), ks.data()), view(vc.buf.data(), vs.data()),
               rotary::Slots::mapping(slots->data(), tokens));
    if (k_out) {
      c.k_out = ko.data();
      c.k_out_layout = kl;
    }
    if (pre) {
      c.q_norm = rms(wq.data(), 1e-6f);
      c.k_norm = rms(wk.data(), 1e-5f);
    }
    if (post) c.l2_after = l2;
    const rotary::ParallelFor parallel =
        variant == 3 ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
    rotary::rope_prologue(rope_, c, pos.get(), parallel);

    // The unfused composition on heap copies, on the scalar kernels.
    std::vector<T> q_want = qo.before;
    std::vector<T> k_want(k.size());
    std::vector<E> kc_want = kc.before;
    std::vector<E> vc_want = vc.before;
    std::vector<float> ks_want = ks_before;
    std::vector<float> vs_want = vs_before;
    {
      const IsaScope scalar(Isa::scalar);
      std::vector<T> qn = q.before;
      std::vector<T> kn = k.before;
      if (pre) {
        rotary::rms_norm(q.before.data(), ql, qn.data(), ql, d, rms(wq.before.data(), 1e-6f));
        rotary::rms_norm(k.before.data(), kl, kn.data(), kl, d, rms(wk.before.data(), 1e-5f));
      }
      rotary::apply_strided(rope_, qn.data(), ql, q_want.data(), qol, Positions(pos.values()));
      rotary::apply_strided(rope_, kn.data(), kl, k_want.data(), kl, Positions(pos.values()));
      if (post) {
        rotary::rms_norm(q_want.data(), qol, q_want.data(), qol, d, l2);
        rotary::rms_norm(k_want.data(), kl, k_want.data(), kl, d, l2);
      }
      rotary::write_kv_cache(k_want.data(), kl, rotary::Slots(mapping),
                             view(kc_want.data(), ks_want.data()));
      rotary::write_kv_cache(v.before.data(), kl, rotary::Slots(mapping),
                             view(vc_want.data(), vs_want.data()));
    }

    const std::string name =
        "rope_prologue into a " + cache_type_name<E>() + (hnd ? " HND" : " NHD") + " cache" +
        (pre ? (variant == 3 ? ", norm (1 + w) before" : ", norm before") : "") +
        (post ? ", l2 after" : "") + (k_out ? ", k out" : "") + (variant == 3 ? ", 2 threads" : "");
    const char* whose = "the unfused composition on heap copies gave";
    expect_bytes(where(name + ": q output", &pos), qo.data(), q_want, whose);
    if (k_out) expect_bytes(where(name + ": k output", &pos), ko.data(), k_want, whose);
    expect_bytes(where(name + ": k cache", &pos), kc.buf.data(), kc_want, whose);
    expect_bytes(where(name + ": v cache", &pos), vc.buf.data(), vc_want, whose);
    expect_bytes(where(name + ": k scales", &pos), ks.data(), ks_want, whose);
    expect_bytes(where(name + ": v scales", &pos), vs.data(), vs_want, whose);
    for (const Tensor<T>* input : {&q, &k, &v, &wq, &wk}) expect_untouched(where(name, &pos), *input);
    expect_bytes(where(name + ": slot mapping", &pos), slots->data(), mapping, "it was before the call");
  }
}

// The rows of this file: fusion.hpp and kv_cache.hpp, the norm kernels of the registry and the fused
// prologue.
const std::vector<EntryPoint>& entry_points() {
  using P = Pairings;
  static const std::vector<EntryPoint> table = {
      row("norm_rows", 17, Shapes::fused, P::first, Isas::every, [](auto& f) { f.norm_rows(); }),
      row("prologue", 18, Shapes::fused, P::both, Isas::every, [](auto& f) { f.prologue(); }),
  };
  return table;
}

TEST_P(GuardPages, Sweep) { sweep_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(EntryPoints, GuardPages, ::testing::ValuesIn(all_cases(entry_points())),
                         [](const ::testing::TestParamInfo<GuardCase>& p) { return case_name(p.param); });

}  // namespace guard_pages

#else
TEST(GuardPages, NeedsMmap) { GTEST_SKIP() << "no mmap/mprotect on this platform"; }
#endif
