// Fused against unfused at one token, over buffer layouts (issue 40: "fused never slower"). A decode
// step of 32 query and 8 key/value heads of 128 values touches about 33 KiB in f32 (q 16 KiB, k, v and
// their two cache slots 4 KiB each, the cos/sin row), as much as a 32 KiB level-1 cache holds: which
// lines evict which then depends on where the buffers sit modulo 4 KiB, and one layout's ratio says
// little. This program places q, k and v at 16 page offsets (and the caches page-aligned), times the
// fused call and its unfused steps in alternating rounds for each layout, and prints the spread of
// unfused / fused over the layouts (above 1: fused faster).
//   bash benchmarks/floor/run.sh
#include <rotary/fusion.hpp>
#include <rotary/rotary.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <vector>

namespace {

using rotary::KvCacheView;
using rotary::Positions;
using rotary::Slots;
using rotary::StridedLayout;

constexpr std::int64_t kQ = 32, kKv = 8, kD = 128, kBlock = 16, kFirst = 1024;
constexpr std::size_t kPage = 4096;

// One layout: q, k, v (and the packed qkv row) at the given offsets into their own pages, caches
// page-aligned, all in one arena.
template <class T>
struct Layout {
  std::int64_t blocks = kFirst / kBlock + 2;
  std::size_t cache_bytes = static_cast<std::size_t>(blocks * kBlock * kKv * kD) * sizeof(T);
  std::unique_ptr<char, decltype(&std::free)> arena{nullptr, &std::free};
  T* q = nullptr;
  T* k = nullptr;
  T* v = nullptr;
  T* qkv = nullptr;
  T* kc = nullptr;
  T* vc = nullptr;

  Layout(std::size_t q_off, std::size_t k_off, std::size_t v_off) {
    const std::size_t region = 1 << 20;  // each buffer in its own MiB: offsets set their page offsets
    const std::size_t bytes = (4 * region + 2 * cache_bytes + kPage - 1) / kPage * kPage;  // whole pages
    arena.reset(static_cast<char*>(std::aligned_alloc(kPage, bytes)));
    if (arena == nullptr) throw std::bad_alloc();
    char* p = arena.get();
    q = reinterpret_cast<T*>(p + q_off);
    k = reinterpret_cast<T*>(p + region + k_off);
    v = reinterpret_cast<T*>(p + 2 * region + v_off);
    qkv = reinterpret_cast<T*>(p + 3 * region + q_off);
    kc = reinterpret_cast<T*>(p + 4 * region);
    vc = reinterpret_cast<T*>(p + 4 * region + cache_bytes);
    std::fill(q, q + kQ * kD, T(0.5f));
    std::fill(k, k + kKv * kD, T(0.25f));
    std::fill(v, v + kKv * kD, T(0.125f));
    std::fill(qkv, qkv + (kQ + 2 * kKv) * kD, T(0.5f));
    std::fill(kc, kc + 2 * cache_bytes / sizeof(T), T(0.0f));
  }
  KvCacheView<T> k_cache() const { return KvCacheView<T>::paged(kc, blocks, kBlock, kKv, kD); }
  KvCacheView<T> v_cache() const { return KvCacheView<T>::paged(vc, blocks, kBlock, kKv, kD); }
};

// Median over `rounds` of (time of 20 unfused calls) / (time of 20 fused calls), the two alternating.
double ratio(const std::function<void()>& fused, const std::function<void()>& unfused, int rounds) {
  using clock = std::chrono::steady_clock;
  std::vector<double> r;
  for (int i = 0; i < rounds; ++i) {
    const auto a = clock::now();
    for (int j = 0; j < 20; ++j) fused();
    const auto b = clock::now();
    for (int j = 0; j < 20; ++j) unfused();
    const auto c = clock::now();
    r.push_back(std::chrono::duration<double>(c - b).count() / std::chrono::duration<double>(b - a).count());
  }
  std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
  return r[r.size() / 2];
}

template <class T>
void sweep(const char* dtype) {
  const rotary::Rope<T> rope(rotary::RotarySpec(kD, rotary::Pairing::half_split), kFirst + 64);
  const std::vector<std::int64_t> slots{kFirst};
  const Positions pos = Positions::contiguous(kFirst);
  const StridedLayout ql{1, kQ, kQ * kD, kD}, kl{1, kKv, kKv * kD, kD};
  const std::int64_t row = (kQ + 2 * kKv) * kD;
  const StridedLayout pql{1, kQ, row, kD}, pkl{1, kKv, row, kD};
  std::vector<double> kv_write, split;
  for (std::size_t qo = 0; qo < kPage; qo += 1024)
    for (std::size_t ko = 0; ko < kPage; ko += 1024) {
      const Layout<T> l(qo, ko, (qo + 2 * ko + 512) % kPage);
      kv_write.push_back(ratio(
          [&] {
            rotary::rope_kv_write(rope, l.q, ql, l.k, kl, l.v, kl, pos, Slots(slots), l.k_cache(),
                                  l.v_cache());
          },
          [&] {
            rotary::apply_qk_strided(rope, l.q, ql, l.q, ql, l.k, kl, l.k, kl, pos);
            rotary::write_kv_cache(l.k, kl, Slots(slots), l.k_cache());
            rotary::write_kv_cache(l.v, kl, Slots(slots), l.v_cache());
          },
          301));
      if (std::getenv("ROTARY_LAYOUTS_DETAIL") != nullptr)
        std::printf("    %s q %4zu k %4zu: rope_kv_write %.3f\n", dtype, qo, ko, kv_write.back());
      T* const k = l.qkv + kQ * kD;  // the packed row's k heads, then v's
      split.push_back(ratio(
          [&] {
            rotary::qkv_split_rope(rope, l.qkv, 1, kQ, kKv, pos, Slots(slots), l.k_cache(), l.v_cache());
          },
          [&] {
            rotary::apply_qk_strided(rope, l.qkv, pql, l.qkv, pql, k, pkl, k, pkl, pos);
            rotary::write_kv_cache(k, pkl, Slots(slots), l.k_cache());
            rotary::write_kv_cache(k + kKv * kD, pkl, Slots(slots), l.v_cache());
          },
          301));
    }
  for (auto* r : {&kv_write, &split}) {
    std::sort(r->begin(), r->end());
    const auto at = [r](double f) {
      return (*r)[static_cast<std::size_t>(f * static_cast<double>(r->size() - 1))];
    };
    const auto met = std::count_if(r->begin(), r->end(), [](double x) { return x >= 0.97; });
    std::printf("  %-15s %-5s %5.3f %6.3f %6.3f %6.3f %6.3f   %2ld of %zu\n",
                r == &kv_write ? "rope_kv_write" : "qkv_split_rope", dtype, at(0), at(0.25), at(0.5),
                at(0.75), at(1), static_cast<long>(met), r->size());
  }
}

}  // namespace

int main() {
  std::printf(
      "fused vs unfused at 1 token, %ld q / %ld kv heads x %ld, over 16 buffer layouts (q, k, v page\n"
      "offsets); per layout the median of 301 alternating rounds of unfused / fused time:\n",
      static_cast<long>(kQ), static_cast<long>(kKv), static_cast<long>(kD));
  std::printf("  %-15s %-5s %5s %6s %6s %6s %6s   %s\n", "op", "dtype", "min", "p25", "median", "p75", "max",
              "layouts >= 0.97");
  sweep<float>("f32");
  sweep<rotary::bf16>("bf16");
  return 0;
}
