// Guard pages (tests/kernels/guard_pages.hpp says how) around the registry's kernels, called
// directly, and every entry point of apply.hpp, table.hpp (a caller's cos/sin table), layouts.hpp,
// tensor_map.hpp and rerotate.hpp, on every ISA: no access outside the views, and every row right.
#include <gtest/gtest.h>

#include <rotary/rotary.hpp>
#include <rotary/tensor_map.hpp>

#include "guard_pages.hpp"

#if ROTARY_TEST_HAVE_MMAN

namespace guard_pages {

// Sequence positions of a batch of `batch` sequences of `seq` tokens, and the positions the test
// expects (memory order b * seq + t), computed here from the definitions in layouts.hpp.
struct BatchPositions {
  SequencePositions sp;
  std::vector<std::int64_t> expected;
  std::shared_ptr<GuardedPositions> array;
  std::string name;
};

// detail/kernels/registry.hpp: the kernels of this ISA, called directly (no dispatch) - every
// kernel_variants<T>() row of the ISA that runs here: its kernel and, for avx512 bf16, each
// rounding pinned on its own. Rows packed up to the guard page (dense token-major input; the
// output head-major with padding, or in place), positions contiguous or in guarded int32 / int64
// arrays. Besides verify(): the scalar kernel's bits on heap copies (test_simd's contract).
template <class T>
void Fixture<T>::kernels() {
  const std::int64_t d = g_.head_dim;
  const StridedLayout il{kTokens, kHeads, kHeads * d, d};
  const StridedLayout hl{kTokens, kHeads, d + 1, kTokens * (d + 1)};
  int call = 0;
  for (const auto& v : rotary::detail::kernel_variants<T>()) {
    if (v.isa != isa_ || !v.runs) continue;
    for (const bool in_place : {false, true}) {
      const GuardedPositions pos = positions(static_cast<int>(rng_() % 3), kTokens);
      const Direction dir = dir_for(call++);
      const StridedLayout& ol = in_place ? il : hl;
      Tensor<T> in = tensor(extent(il, d));
      Tensor<T> out = tensor(in_place ? 0 : extent(ol, d));
      T* got = in_place ? in.data() : out.data();
      const std::vector<T>& before = in_place ? in.before : out.before;
      std::vector<T> want = before;  // the scalar kernel's result on heap copies
      std::vector<T> heap_in = in.before;
      rotary::detail::scalar::rotate_tokens<T>(
          kernel_args(il, in_place ? want.data() : heap_in.data(), ol, want.data(), pos.get(), dir), 0,
          kTokens);
      v.kernel(kernel_args(il, in.data(), ol, got, pos.get(), dir), 0, kTokens);
      const std::string name = "kernel " + v.name + (in_place ? " in place" : " out of place");
      verify<T>(where(name, &pos), g_, dir, cache_rows<T>(rope_.cache()), strided_jobs(il, ol, pos),
                in.before, in.data(), before, got, in_place);
      for (std::size_t i = 0; i < want.size(); ++i)
        if (!same_bits(got[i], want[i])) {
          ADD_FAILURE() << where(name, &pos) << ": element " << i << " is "
                        << static_cast<double>(widen(got[i])) << " but the scalar kernel gave "
                        << static_cast<double>(widen(want[i])) << " " << rotary_test::seed_note();
          break;
        }
    }
  }
}

// apply / apply_unchecked over Eigen rows with an outer stride (padding between rows).
template <class T>
void Fixture<T>::apply_eigen() {
  const std::int64_t rows = kTokens * kHeads;
  const std::int64_t d = g_.head_dim;
  for (int variant = 0; variant < 4; ++variant) {
    const std::int64_t ld_in = d + (variant % 2 == 0 ? 0 : 3);
    const std::int64_t ld_out = d + (variant % 2 == 0 ? 5 : 0);
    const GuardedPositions pos = positions(variant % 3, kTokens);
    const Direction dir = dir_for(variant);
    const bool unchecked = variant >= 2;
    const StridedLayout il{kTokens, kHeads, ld_in * kHeads, ld_in};
    const StridedLayout ol{kTokens, kHeads, ld_out * kHeads, ld_out};
    {  // in place
      Tensor<T> x = tensor(extent(kTokens, kHeads, il.token_stride, il.head_stride, d));
      Map m(x.data(), rows, d, Eigen::OuterStride<>(ld_in));
      if (unchecked) {
        rotary::unchecked::apply(rope_, m, pos.get(), kHeads, dir);
      } else {
        rotary::apply(rope_, m, pos.get(), kHeads, dir);
      }
      verify<T>(where(unchecked ? "apply_unchecked in place" : "apply in place", &pos), g_, dir,
                cache_rows<T>(rope_.cache()), strided_jobs(il, il, pos), x.before, x.data(), x.before,
                x.data(), true);
    }
    {  // out of place
      Tensor<T> in = tensor(extent(kTokens, kHeads, il.token_stride, il.head_stride, d));
      Tensor<T> out = tensor(extent(kTokens, kHeads, ol.token_stride, ol.head_stride, d));
      const ConstMap mi(in.data(), rows, d, Eigen::OuterStride<>(ld_in));
      Map mo(out.data(), rows, d, Eigen::OuterStride<>(ld_out));
      if (unchecked) {
        rotary::unchecked::apply(rope_, mi, mo, pos.get(), kHeads, dir);
      } else {
        rotary::apply(rope_, mi, mo, pos.get(), kHeads, dir);
      }
      verify<T>(where(unchecked ? "apply_unchecked out of place" : "apply out of place", &pos), g_, dir,
                cache_rows<T>(rope_.cache()), strided_jobs(il, ol, pos), in.before, in.data(), out.before,
                out.data(), false);
    }
  }
}

// apply_strided (both overloads) and apply_strided_unchecked; token-major and head-major layouts
// with padding.
template <class T>
void Fixture<T>::apply_strided() {
  const std::int64_t d = g_.head_dim;
  const StridedLayout token_major{kTokens, kHeads, kHeads * d + 2, d};
  const StridedLayout head_major{kTokens, kHeads, d + 1, kTokens * (d + 1)};
  for (int variant = 0; variant < 3; ++variant) {
    const GuardedPositions pos = positions((variant + 1) % 3, kTokens);
    const Direction dir = dir_for(variant + 1);
    const StridedLayout& il = variant == 1 ? token_major : head_major;
    const StridedLayout& ol = variant == 1 ? head_major : token_major;
    Tensor<T> in = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
    Tensor<T> out = tensor(extent(ol.tokens, ol.heads, ol.token_stride, ol.head_stride, d));
    if (variant == 2) {
      rotary::unchecked::apply_strided(rope_, in.data(), il, out.data(), ol, pos.get(), dir);
    } else {
      rotary::apply_strided(rope_, in.data(), il, out.data(), ol, pos.get(), dir);
    }
    verify<T>(where(variant == 2 ? "apply_strided_unchecked" : "apply_strided out of place", &pos), g_, dir,
              cache_rows<T>(rope_.cache()), strided_jobs(il, ol, pos), in.before, in.data(), out.before,
              out.data(), false);
    Tensor<T> x = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
    if (variant == 2) {
      rotary::unchecked::apply_strided(rope_, x.data(), il, x.data(), il, pos.get(), dir);
    } else {
      rotary::apply_strided(rope_, x.data(), il, pos.get(), dir);
    }
    verify<T>(where("apply_strided in place", &pos), g_, dir, cache_rows<T>(rope_.cache()),
              strided_jobs(il, il, pos), x.before, x.data(), x.before, x.data(), true);
  }
}

// A caller's table (table.hpp): TableRope over separate cos and sin tables, each in its own
// guarded buffer holding exactly rows [p_min, p_max] of the call's positions (the Rope's own
// values, so the Rope's rows are the reference): Flush::end puts the last row's sin against the
// guard page, Flush::begin the first row's cos. Token-major and head-major layouts, out of place
// and in place, with a thread hook.
template <class T>
void Fixture<T>::caller_table() {
  using Cc = C<T>;
  const std::int64_t d = g_.head_dim;
  const std::int64_t h = g_.rotary_dim / 2;
  const StridedLayout token_major{kTokens, kHeads, kHeads * d + 2, d};
  const StridedLayout head_major{kTokens, kHeads, d + 1, kTokens * (d + 1)};
  for (int variant = 0; variant < 3; ++variant) {
    const GuardedPositions pos = positions(variant, kTokens);
    const auto [lo, hi] = std::minmax_element(pos.values().begin(), pos.values().end());
    const std::int64_t rows = *hi - *lo + 1;
    GuardedBuffer<Cc> cos(static_cast<std::size_t>(rows * h), flush_);
    GuardedBuffer<Cc> sin(static_cast<std::size_t>(rows * h), flush_);
    for (std::int64_t r = 0; r < rows; ++r) {
      const Cc* row = rope_.cache().row(*lo + r);
      std::copy(row, row + h, cos.data() + r * h);
      std::copy(row + h, row + 2 * h, sin.data() + r * h);
    }
    const rotary::TableRope<T, Cc> rope(
        d, g_.rotary_dim, g_.pairing,
        rotary::CosSinTableView<Cc>::separate(cos.data(), sin.data(), rows, h).with_first_position(*lo));
    const Direction dir = dir_for(variant);
    const StridedLayout& il = variant == 1 ? token_major : head_major;
    const StridedLayout& ol = variant == 1 ? head_major : token_major;
    Tensor<T> in = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
    Tensor<T> out = tensor(extent(ol.tokens, ol.heads, ol.token_stride, ol.head_stride, d));
    rotary::apply_strided(rope, in.data(), il, out.data(), ol, pos.get(), {dir, rotary::thread_parallel_for(2)});
    verify<T>(where("caller table out of place", &pos), g_, dir, cache_rows<T>(rope_.cache()),
              strided_jobs(il, ol, pos), in.before, in.data(), out.before, out.data(), false);
    Tensor<T> x = tensor(extent(il.tokens, il.heads, il.token_stride, il.head_stride, d));
    rotary::apply_strided(rope, x.data(), il, pos.get(), dir);
    verify<T>(where("caller table in place", &pos), g_, dir, cache_rows<T>(rope_.cache()),
              strided_jobs(il, il, pos), x.before, x.data(), x.before, x.data(), true);
  }
}

// apply_qk over Eigen rows: in place and out of place, with a GQA key (1 head) and without key.
template <class T>
void Fixture<T>::apply_qk_eigen() {
  const std::int64_t d = g_.head_dim;
  const StridedLayout ql{kTokens, kHeads, kHeads * d, d};
  const StridedLayout kl{kTokens, kKeyHeads, kKeyHeads * d, d};
  for (int variant = 0; variant < 4; ++variant) {
    const bool with_key = variant < 2;
    const GuardedPositions pos = positions(variant % 3, kTokens);
    const Direction dir = dir_for(variant);
    const std::int64_t k_heads = with_key ? kKeyHeads : 0;
    const std::int64_t k_rows = kTokens * k_heads;
    {  // in place
      Tensor<T> q = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> k = tensor(extent(kTokens, k_heads, kl.token_stride, kl.head_stride, d));
      Map mq(q.data(), kTokens * kHeads, d, Eigen::OuterStride<>(d));
      Map mk(k.data(), k_rows, d, Eigen::OuterStride<>(d));
      rotary::apply_qk(rope_, mq, mk, pos.get(), kHeads, k_heads, dir);
      const CosSinRows<T> rows = cache_rows<T>(rope_.cache());
      verify<T>(where("apply_qk in place q", &pos), g_, dir, rows, strided_jobs(ql, ql, pos), q.before,
                q.data(), q.before, q.data(), true);
      if (with_key)
        verify<T>(where("apply_qk in place k", &pos), g_, dir, rows, strided_jobs(kl, kl, pos), k.before,
                  k.data(), k.before, k.data(), true);
    }
    {  // out of place
      Tensor<T> qi = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> qo = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> ki = tensor(extent(kTokens, k_heads, kl.token_stride, kl.head_stride, d));
      Tensor<T> ko = tensor(extent(kTokens, k_heads, kl.token_stride, kl.head_stride, d));
      const ConstMap mqi(qi.data(), kTokens * kHeads, d, Eigen::OuterStride<>(d));
      Map mqo(qo.data(), kTokens * kHeads, d, Eigen::OuterStride<>(d));
      const ConstMap mki(ki.data(), k_rows, d, Eigen::OuterStride<>(d));
      Map mko(ko.data(), k_rows, d, Eigen::OuterStride<>(d));
      rotary::apply_qk(rope_, mqi, mqo, mki, mko, pos.get(), kHeads, k_heads, dir);
      const CosSinRows<T> rows = cache_rows<T>(rope_.cache());
      verify<T>(where("apply_qk out of place q", &pos), g_, dir, rows, strided_jobs(ql, ql, pos), qi.before,
                qi.data(), qo.before, qo.data(), false);
      if (with_key)
        verify<T>(where("apply_qk out of place k", &pos), g_, dir, rows, strided_jobs(kl, kl, pos),
                  ki.before, ki.data(), ko.before, ko.data(), false);
    }
  }
}

// apply_qk_strided and apply_qk_strided_unchecked; q head-major with padding, k token-major.
template <class T>
void Fixture<T>::apply_qk_strided() {
  const std::int64_t d = g_.head_dim;
  const StridedLayout ql{kTokens, kHeads, d + 2, kTokens * (d + 2)};
  const StridedLayout kl{kTokens, kKeyHeads, kKeyHeads * d + 1, d};
  const StridedLayout none{kTokens, 0, 0, 0};
  for (int variant = 0; variant < 4; ++variant) {
    const bool with_key = variant != 3;
    const bool unchecked = variant == 1;
    const bool in_place = variant == 2;
    const GuardedPositions pos = positions((variant + 2) % 3, kTokens);
    const Direction dir = dir_for(variant + 1);
    const StridedLayout& kla = with_key ? kl : none;
    Tensor<T> qi = tensor(extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
    Tensor<T> qo = tensor(in_place ? 0 : extent(kTokens, kHeads, ql.token_stride, ql.head_stride, d));
    Tensor<T> ki = tensor(with_key ? extent(kTokens, kKeyHeads, kl.token_stride, kl.head_stride, d) : 0);
    Tensor<T> ko =
        tensor(with_key && !in_place ? extent(kTokens, kKeyHeads, kl.token_stride, kl.head_stride, d) : 0);
    T* q_out = in_place ? qi.data() : qo.data();
    T* k_out = in_place ? ki.data() : ko.data();
    if (unchecked) {
      rotary::unchecked::apply_qk_strided(rope_, qi.data(), ql, q_out, ql, ki.data(), kla, k_out, kla,
                                         pos.get(), dir);
    } else {
      rotary::apply_qk_strided(rope_, qi.data(), ql, q_out, ql, ki.data(), kla, k_out, kla, pos.get(), dir);
    }
    const std::string name = std::string(unchecked ? "apply_qk_strided_unchecked" : "apply_qk_strided") +
                             (in_place ? " in place" : " out of place") + (with_key ? "" : " no key");
    const CosSinRows<T> rows = cache_rows<T>(rope_.cache());
    verify<T>(where(name + " q", &pos), g_, dir, rows, strided_jobs(ql, ql, pos), qi.before, qi.data(),
              in_place ? qi.before : qo.before, q_out, in_place);
    if (with_key)
      verify<T>(where(name + " k", &pos), g_, dir, rows, strided_jobs(kl, kl, pos), ki.before, ki.data(),
                in_place ? ki.before : ko.before, k_out, in_place);
  }
}

// A Rope over a cache built from a position list (CosSinCache::for_positions), read through
// guarded int32 and int64 position arrays.
template <class T>
void Fixture<T>::listed_cache() {
  const rotary::Frequencies f = rotary::compute_frequencies(spec_);
  const std::vector<std::int64_t> listed = {7, 1000003, 2147483647, 123456789012, 5};
  const rotary::Rope<T> rope(spec_, rotary::CosSinCache<C<T>>::for_positions(f, listed));
  const std::int64_t d = g_.head_dim;
  const StridedLayout l{kTokens, kHeads, kHeads * d, d};
  for (int kind = 1; kind <= 2; ++kind) {
    const GuardedPositions pos(kind,
                               kind == 1 ? std::vector<std::int64_t>{2147483647, 7, 1000003}
                                         : std::vector<std::int64_t>{123456789012, 5, 2147483647},
                               flush_);
    Tensor<T> x = tensor(extent(kTokens, kHeads, l.token_stride, l.head_stride, d));
    rotary::apply_strided(rope, x.data(), l, pos.get(), dir_for(kind));
    verify<T>(where("apply_strided on a for_positions cache", &pos), g_, dir_for(kind),
              cache_rows<T>(rope.cache()), strided_jobs(l, l, pos), x.before, x.data(), x.before, x.data(),
              true);
  }
}

// Cache-free Rope: 35 tokens cross a 32-token row block; with and without a ParallelFor.
template <class T>
void Fixture<T>::on_the_fly() {
  const std::int64_t tokens = 35;
  const std::int64_t d = g_.head_dim;
  const StridedLayout l{tokens, 1, d, d};
  const rotary::Frequencies f = rotary::compute_frequencies(spec_);
  for (int kind = 0; kind < 3; ++kind) {
    const GuardedPositions pos = positions(kind, tokens, std::int64_t{1} << 40);
    const auto table = rotary::CosSinCache<C<T>>::for_positions(f, pos.values());
    CosSinRows<T> rows = cache_rows<T>(table);
    // Recurrence rows: in f32 1 ulp from the table on near-ties; in f64 the double recurrence
    // drifts a few ulp per step over a 32-token block (rows_on_the_fly.hpp: ~1e-14).
    rows.exact = false;
    rows.row_error = std::is_same_v<C<T>, double> ? 0x1p-45 : 0x1p-24;
    Tensor<T> in = tensor(extent(tokens, 1, d, d, d));
    Tensor<T> out = tensor(extent(tokens, 1, d, d, d));
    const rotary::ParallelFor parallel = kind == 1 ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
    rotary::apply_strided(fly_, in.data(), l, out.data(), l, pos.get(), {dir_for(kind), parallel});
    verify<T>(where("OnTheFly apply_strided", &pos), g_, dir_for(kind), rows, strided_jobs(l, l, pos),
              in.before, in.data(), out.before, out.data(), false);
    Tensor<T> x = tensor(extent(tokens, 1, d, d, d));
    Map m(x.data(), tokens, d, Eigen::OuterStride<>(d));
    rotary::apply(fly_, m, pos.get(), 1, {dir_for(kind + 1), parallel});
    verify<T>(where("OnTheFly apply in place", &pos), g_, dir_for(kind + 1), rows, strided_jobs(l, l, pos),
              x.before, x.data(), x.before, x.data(), true);
  }
}

template <class T>
BatchPositions Fixture<T>::batch_positions(int mode, std::int64_t batch, std::int64_t seq) {
  const std::int64_t n = batch * seq;
  std::vector<std::int64_t> e(static_cast<std::size_t>(n));
  const int kind = mode % 4;
  switch (kind) {
    case 0: {  // one start per sequence
      std::vector<std::int64_t> starts(static_cast<std::size_t>(batch));
      for (std::int64_t b = 0; b < batch; ++b) starts[static_cast<std::size_t>(b)] = 11 * b + 3;
      for (std::int64_t i = 0; i < n; ++i) e[static_cast<std::size_t>(i)] = 11 * (i / seq) + 3 + i % seq;
      return {SequencePositions::starts(starts), e, nullptr, "starts"};
    }
    case 1:
    case 2: {  // per-token int32 / int64 arrays in guarded memory
      auto p = std::make_shared<GuardedPositions>(positions(kind, n));
      return {SequencePositions::per_token(p->get()), p->values(), p,
              kind == 1 ? "per_token int32" : "per_token int64"};
    }
    default: {  // context parallel, contiguous split: rank 1 of 3 holds tokens [seq, 2 seq) of each
                // sequence
      for (std::int64_t i = 0; i < n; ++i) e[static_cast<std::size_t>(i)] = 20 + seq + i % seq;
      return {SequencePositions::context_parallel(rotary::ContextSplit::contiguous, 1, 3, {20}), e, nullptr,
              "context_parallel"};
    }
  }
}

// apply_batch: the dense-layout overload, the in-place view overload, the out-of-place view
// overload (a layout change on the way out) and apply_batch_unchecked.
template <class T>
void Fixture<T>::batch() {
  const BatchShape sh{3, kTokens, kHeads, g_.head_dim};
  int mode = 0;
  for (const Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    const BatchStrides st = rotary::dense_strides(layout, sh);
    const Direction dir = dir_for(mode);
    {
      BatchPositions bp = batch_positions(mode++, sh.batch, sh.seq);
      Tensor<T> x = tensor(extent(sh, st));
      rotary::apply_batch(rope_, layout, x.data(), sh, bp.sp, dir);
      verify<T>(where("apply_batch " + std::string(rotary::to_string(layout)) + " " + bp.name), g_, dir,
                cache_rows<T>(rope_.cache()), batch_jobs(sh, st, st, bp.expected), x.before, x.data(),
                x.before, x.data(), true);
    }
    {
      BatchPositions bp = batch_positions(mode++, sh.batch, sh.seq);
      Tensor<T> x = tensor(extent(sh, st));
      rotary::apply_batch(rope_, BatchView<T>(x.data(), sh, st), bp.sp, dir);
      verify<T>(
          where("apply_batch view in place " + std::string(rotary::to_string(layout)) + " " + bp.name), g_,
          dir, cache_rows<T>(rope_.cache()), batch_jobs(sh, st, st, bp.expected), x.before, x.data(),
          x.before, x.data(), true);
    }
    for (const bool unchecked : {false, true}) {
      BatchPositions bp = batch_positions(mode++, sh.batch, sh.seq);
      // Output padded: a gap of 2 elements after every row.
      const BatchStrides ost{sh.seq * sh.heads * (g_.head_dim + 2), sh.heads * (g_.head_dim + 2),
                             g_.head_dim + 2};
      Tensor<T> in = tensor(extent(sh, st));
      Tensor<T> out = tensor(extent(sh, ost));
      const BatchView<const T> iv(in.data(), sh, st);
      const BatchView<T> ov(out.data(), sh, ost);
      if (unchecked) {
        rotary::unchecked::apply_batch(rope_, iv, ov, bp.sp, dir);
      } else {
        rotary::apply_batch(rope_, iv, ov, bp.sp, dir);
      }
      verify<T>(where(std::string(unchecked ? "apply_batch_unchecked " : "apply_batch out of place ") +
                      std::string(rotary::to_string(layout)) + " " + bp.name),
                g_, dir, cache_rows<T>(rope_.cache()), batch_jobs(sh, st, ost, bp.expected), in.before,
                in.data(), out.before, out.data(), false);
    }
  }
}

// apply_qk_batch: dense overload (with and without key), view overloads in and out of place,
// apply_qk_batch_unchecked.
template <class T>
void Fixture<T>::qk_batch() {
  const BatchShape qs{3, kTokens, kHeads, g_.head_dim};
  const BatchShape ks{3, kTokens, kKeyHeads, g_.head_dim};
  int mode = 1;
  for (const Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    const BatchStrides qst = rotary::dense_strides(layout, qs);
    const BatchStrides kst = rotary::dense_strides(layout, ks);
    const CosSinRows<T> rows = cache_rows<T>(rope_.cache());
    const std::string ln(rotary::to_string(layout));
    for (const bool with_key : {true, false}) {
      BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
      const Direction dir = dir_for(mode);
      Tensor<T> q = tensor(extent(qs, qst));
      Tensor<T> k = tensor(with_key ? extent(ks, kst) : 0);
      rotary::apply_qk_batch(rope_, layout, q.data(), qs, k.data(), with_key ? kKeyHeads : 0, bp.sp, dir);
      const std::string name = "apply_qk_batch " + ln + (with_key ? " " : " no key ") + bp.name;
      verify<T>(where(name + " q"), g_, dir, rows, batch_jobs(qs, qst, qst, bp.expected), q.before,
                q.data(), q.before, q.data(), true);
      if (with_key)
        verify<T>(where(name + " k"), g_, dir, rows, batch_jobs(ks, kst, kst, bp.expected), k.before,
                  k.data(), k.before, k.data(), true);
    }
    {
      BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
      const Direction dir = dir_for(mode);
      Tensor<T> q = tensor(extent(qs, qst));
      Tensor<T> k = tensor(extent(ks, kst));
      rotary::apply_qk_batch(rope_, BatchView<T>(q.data(), qs, qst), BatchView<T>(k.data(), ks, kst), bp.sp,
                             dir);
      verify<T>(where("apply_qk_batch view in place " + ln + " q " + bp.name), g_, dir, rows,
                batch_jobs(qs, qst, qst, bp.expected), q.before, q.data(), q.before, q.data(), true);
      verify<T>(where("apply_qk_batch view in place " + ln + " k " + bp.name), g_, dir, rows,
                batch_jobs(ks, kst, kst, bp.expected), k.before, k.data(), k.before, k.data(), true);
    }
    for (const bool unchecked : {false, true}) {
      BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
      const Direction dir = dir_for(mode);
      Tensor<T> qi = tensor(extent(qs, qst));
      Tensor<T> qo = tensor(extent(qs, qst));
      Tensor<T> ki = tensor(extent(ks, kst));
      Tensor<T> ko = tensor(extent(ks, kst));
      const BatchView<const T> qiv(qi.data(), qs, qst);
      const BatchView<T> qov(qo.data(), qs, qst);
      const BatchView<const T> kiv(ki.data(), ks, kst);
      const BatchView<T> kov(ko.data(), ks, kst);
      if (unchecked) {
        rotary::unchecked::apply_qk_batch(rope_, qiv, qov, kiv, kov, bp.sp, dir);
      } else {
        rotary::apply_qk_batch(rope_, qiv, qov, kiv, kov, bp.sp, dir);
      }
      const std::string name =
          std::string(unchecked ? "apply_qk_batch_unchecked " : "apply_qk_batch out of place ") + ln + " " +
          bp.name;
      verify<T>(where(name + " q"), g_, dir, rows, batch_jobs(qs, qst, qst, bp.expected), qi.before,
                qi.data(), qo.before, qo.data(), false);
      verify<T>(where(name + " k"), g_, dir, rows, batch_jobs(ks, kst, kst, bp.expected), ki.before,
                ki.data(), ko.before, ko.data(), false);
    }
  }
}

// apply_varlen and apply_qk_varlen (both overloads each) with guarded int32 and int64 cu_seqlens
// that include an empty sequence.
template <class T>
void Fixture<T>::varlen() {
  const std::vector<std::int64_t> cu = {0, 2, 2, 5};
  const std::int64_t total = 5;
  const std::int64_t d = g_.head_dim;
  const StridedLayout ql{total, kHeads, kHeads * d + 1, d};
  const StridedLayout kl{total, kKeyHeads, d, d};
  const CosSinRows<T> rows = cache_rows<T>(rope_.cache());
  for (int variant = 0; variant < 4; ++variant) {
    const bool i32 = variant % 2 == 0;
    const auto cu32 = guarded_array<std::int32_t>(cu, flush_);
    const auto cu64 = guarded_array<std::int64_t>(cu, flush_);
    const CuSeqlens c = i32 ? CuSeqlens(cu32->data(), 4) : CuSeqlens(cu64->data(), 4);
    // restart (each sequence from 0), or per-token positions in guarded memory.
    std::shared_ptr<GuardedPositions> arr;
    SequencePositions sp = SequencePositions::restart();
    std::vector<std::int64_t> expected = {0, 1, 0, 1, 2};
    if (variant >= 2) {
      arr = std::make_shared<GuardedPositions>(positions(variant - 1, total));
      sp = SequencePositions::per_token(arr->get());
      expected = arr->values();
    }
    const GuardedPositions pos(0, expected, flush_);  // expected values only (contiguous kind unused)
    const Direction dir = dir_for(variant);
    const std::string cn =
        std::string(i32 ? " int32" : " int64") + " cu_seqlens" + (variant >= 2 ? " per_token" : " restart");
    {
      Tensor<T> in = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> out = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
      rotary::apply_varlen(rope_, in.data(), ql, out.data(), ql, c, sp, dir);
      verify<T>(where("apply_varlen out of place" + cn), g_, dir, rows, strided_jobs(ql, ql, pos),
                in.before, in.data(), out.before, out.data(), false);
      Tensor<T> x = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
      rotary::apply_varlen(rope_, x.data(), ql, c, sp, dir);
      verify<T>(where("apply_varlen in place" + cn), g_, dir, rows, strided_jobs(ql, ql, pos), x.before,
                x.data(), x.before, x.data(), true);
    }
    {
      Tensor<T> qi = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> qo = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> ki = tensor(extent(total, kKeyHeads, kl.token_stride, kl.head_stride, d));
      Tensor<T> ko = tensor(extent(total, kKeyHeads, kl.token_stride, kl.head_stride, d));
      rotary::apply_qk_varlen(rope_, qi.data(), ql, qo.data(), ql, ki.data(), kl, ko.data(), kl, c, sp,
                              dir);
      verify<T>(where("apply_qk_varlen out of place q" + cn), g_, dir, rows, strided_jobs(ql, ql, pos),
                qi.before, qi.data(), qo.before, qo.data(), false);
      verify<T>(where("apply_qk_varlen out of place k" + cn), g_, dir, rows, strided_jobs(kl, kl, pos),
                ki.before, ki.data(), ko.before, ko.data(), false);
      Tensor<T> q = tensor(extent(total, kHeads, ql.token_stride, ql.head_stride, d));
      Tensor<T> k = tensor(extent(total, kKeyHeads, kl.token_stride, kl.head_stride, d));
      rotary::apply_qk_varlen(rope_, q.data(), ql, k.data(), kl, c, sp, dir);
      verify<T>(where("apply_qk_varlen in place q" + cn), g_, dir, rows, strided_jobs(ql, ql, pos),
                q.before, q.data(), q.before, q.data(), true);
      verify<T>(where("apply_qk_varlen in place k" + cn), g_, dir, rows, strided_jobs(kl, kl, pos),
                k.before, k.data(), k.before, k.data(), true);
    }
  }
}

// tensor_map.hpp: apply_batch / apply_qk_batch over TensorMap4, apply_varlen over TensorMap3.
template <class T>
void Fixture<T>::tensor_maps() {
  const BatchShape qs{3, kTokens, kHeads, g_.head_dim};
  const BatchShape ks{3, kTokens, kKeyHeads, g_.head_dim};
  const CosSinRows<T> rows = cache_rows<T>(rope_.cache());
  int mode = 2;
  for (const Layout layout : {Layout::bshd, Layout::bhsd, Layout::sbhd}) {
    const auto dims = [layout](const BatchShape& s) -> Eigen::array<Eigen::Index, 4> {
      switch (layout) {
        case Layout::bhsd:
          return {s.batch, s.heads, s.seq, s.head_dim};
        case Layout::sbhd:
          return {s.seq, s.batch, s.heads, s.head_dim};
        default:
          return {s.batch, s.seq, s.heads, s.head_dim};
      }
    };
    const BatchStrides qst = rotary::dense_strides(layout, qs);
    const BatchStrides kst = rotary::dense_strides(layout, ks);
    const std::string ln(rotary::to_string(layout));
    {
      BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
      Tensor<T> x = tensor(extent(qs, qst));
      rotary::apply_batch(rope_, layout, rotary::TensorMap4<T>(x.data(), dims(qs)), bp.sp, dir_for(mode));
      verify<T>(where("apply_batch(TensorMap4) " + ln + " " + bp.name), g_, dir_for(mode), rows,
                batch_jobs(qs, qst, qst, bp.expected), x.before, x.data(), x.before, x.data(), true);
    }
    {
      BatchPositions bp = batch_positions(mode++, qs.batch, qs.seq);
      Tensor<T> q = tensor(extent(qs, qst));
      Tensor<T> k = tensor(extent(ks, kst));
      rotary::apply_qk_batch(rope_, layout, rotary::TensorMap4<T>(q.data(), dims(qs)),
                             rotary::TensorMap4<T>(k.data(), dims(ks)), bp.sp, dir_for(mode));
      verify<T>(where("apply_qk_batch(TensorMap4) " + ln + " q " + bp.name), g_, dir_for(mode), rows,
                batch_jobs(qs, qst, qst, bp.expected), q.before, q.data(), q.before, q.data(), true);
      verify<T>(where("apply_qk_batch(TensorMap4) " + ln + " k " + bp.name), g_, dir_for(mode), rows,
                batch_jobs(ks, kst, kst, bp.expected), k.before, k.data(), k.before, k.data(), true);
    }
  }
  const std::vector<std::int64_t> cu = {0, 3, 3, 4};
  const auto cu32 = guarded_array<std::int32_t>(cu, flush_);
  const std::int64_t total = 4;
  const StridedLayout l{total, kHeads, kHeads * g_.head_dim, g_.head_dim};
  Tensor<T> x = tensor(extent(total, kHeads, l.token_stride, l.head_stride, g_.head_dim));
  rotary::apply_varlen(rope_, rotary::TensorMap3<T>(x.data(), total, kHeads, g_.head_dim),
                       CuSeqlens(cu32->data(), 4), SequencePositions::start(40), Direction::inverse);
  const GuardedPositions pos(0, {40, 41, 42, 40}, flush_);
  verify<T>(where("apply_varlen(TensorMap3)"), g_, Direction::inverse, rows, strided_jobs(l, l, pos),
            x.before, x.data(), x.before, x.data(), true);
}

// rerotate.hpp: shift_keys (one delta, per-token deltas), their strided forms, rerotate_keys and
// rerotate_keys_strided.
template <class T>
void Fixture<T>::rerotate() {
  const std::int64_t d = g_.head_dim;
  const std::int64_t rows_n = kTokens * kHeads;
  const StridedLayout dense{kTokens, kHeads, kHeads * d, d};
  const StridedLayout padded{kTokens, kHeads, d + 3, kTokens * (d + 3)};
  const rotary::Frequencies fa = rotary::compute_frequencies(spec_);
  // The rows below are double values rounded once to the compute type: half an ulp, plus the
  // double composition for the change of frequencies (a few 1e-16).
  const double eps = std::is_same_v<C<T>, double> ? 0x1p-50 : 0x1p-24;
  // Rows of a rotation by delta * theta (any sign), from a double table at |delta|.
  const auto shift_rows = [&fa, eps]() {
    return CosSinRows<T>{
        [&fa](std::int64_t delta) {
          const auto t = rotary::CosSinCache<double>::for_positions(fa, {delta < 0 ? -delta : delta});
          const double* r = t.row(delta < 0 ? -delta : delta);
          const std::int64_t h = t.pairs();
          std::vector<C<T>> v(static_cast<std::size_t>(2 * h));
          for (std::int64_t j = 0; j < h; ++j) {
            v[static_cast<std::size_t>(j)] = static_cast<C<T>>(r[j]);
            v[static_cast<std::size_t>(h + j)] = static_cast<C<T>>(delta < 0 ? -r[h + j] : r[h + j]);
          }
          return v;
        },
        false, 4.0 * eps};
  };
  {  // one delta for every token, Eigen rows and strided
    const std::int64_t delta = -1234567;
    const GuardedPositions same(0, std::vector<std::int64_t>(kTokens, delta), flush_);
    Tensor<T> x = tensor(extent(kTokens, kHeads, dense.token_stride, dense.head_stride, d));
    Map m(x.data(), rows_n, d, Eigen::OuterStride<>(d));
    rotary::shift_keys(rope_, m, delta, kHeads);
    verify<T>(where("shift_keys(delta)"), g_, Direction::forward, shift_rows(),
              strided_jobs(dense, dense, same), x.before, x.data(), x.before, x.data(), true);
    Tensor<T> y = tensor(extent(kTokens, kHeads, padded.token_stride, padded.head_stride, d));
    rotary::shift_keys_strided(rope_, y.data(), padded, delta, rotary::thread_parallel_for(2));
    verify<T>(where("shift_keys_strided(delta)"), g_, Direction::forward, shift_rows(),
              strided_jobs(padded, padded, same), y.before, y.data(), y.before, y.data(), true);
  }
  for (int kind = 1; kind <= 2; ++kind) {  // per-token deltas in guarded int32 / int64 arrays
    const GuardedPositions deltas(kind, {-5, 77, kind == 1 ? -2147483647 : std::int64_t{1} << 45}, flush_);
    Tensor<T> x = tensor(extent(kTokens, kHeads, dense.token_stride, dense.head_stride, d));
    Map m(x.data(), rows_n, d, Eigen::OuterStride<>(d));
    rotary::shift_keys(rope_, m, deltas.get(), kHeads);
    verify<T>(where("shift_keys(deltas)", &deltas), g_, Direction::forward, shift_rows(),
              strided_jobs(dense, dense, deltas), x.before, x.data(), x.before, x.data(), true);
    Tensor<T> y = tensor(extent(kTokens, kHeads, padded.token_stride, padded.head_stride, d));
    rotary::shift_keys_strided(rope_, y.data(), padded, deltas.get());
    verify<T>(where("shift_keys_strided(deltas)", &deltas), g_, Direction::forward, shift_rows(),
              strided_jobs(padded, padded, deltas), y.before, y.data(), y.before, y.data(), true);
  }
  // From the spec's base to another base (both without attention factor): the rotation by
  // m * (thetaB - thetaA), from double tables of both.
  rotary::RotarySpec other = spec_;
  other.base = 500000.0;
  const rotary::Rope<T> to(other, rotary::OnTheFly{});
  const rotary::Frequencies fb = rotary::compute_frequencies(other);
  const CosSinRows<T> change{
      [&fa, &fb](std::int64_t m) {
        const auto ta = rotary::CosSinCache<double>::for_positions(fa, {m});
        const auto tb = rotary::CosSinCache<double>::for_positions(fb, {m});
        const double* a = ta.row(m);
        const double* b = tb.row(m);
        const std::int64_t h = ta.pairs();
        std::vector<C<T>> v(static_cast<std::size_t>(2 * h));
        for (std::int64_t j = 0; j < h; ++j) {
          v[static_cast<std::size_t>(j)] = static_cast<C<T>>(b[j] * a[j] + b[h + j] * a[h + j]);
          v[static_cast<std::size_t>(h + j)] = static_cast<C<T>>(b[h + j] * a[j] - b[j] * a[h + j]);
        }
        return v;
      },
      false, 4.0 * eps};
  for (int kind = 0; kind < 3; ++kind) {
    const GuardedPositions pos = positions(kind, kTokens, 1 << 20);
    Tensor<T> x = tensor(extent(kTokens, kHeads, dense.token_stride, dense.head_stride, d));
    Map m(x.data(), rows_n, d, Eigen::OuterStride<>(d));
    rotary::rerotate_keys(rope_, to, m, pos.get(), kHeads);
    verify<T>(where("rerotate_keys", &pos), g_, Direction::forward, change, strided_jobs(dense, dense, pos),
              x.before, x.data(), x.before, x.data(), true);
    Tensor<T> y = tensor(extent(kTokens, kHeads, padded.token_stride, padded.head_stride, d));
    rotary::rerotate_keys_strided(rope_, to, y.data(), padded, pos.get());
    verify<T>(where("rerotate_keys_strided", &pos), g_, Direction::forward, change,
              strided_jobs(padded, padded, pos), y.before, y.data(), y.before, y.data(), true);
  }
}

// The KernelArgs dispatch builds for one tensor of rows (input layout il, output layout ol) read
// through this fixture's cache.
template <class T>
rotary::detail::KernelArgs<T> Fixture<T>::kernel_args(const StridedLayout& il, const T* in,
                                                      const StridedLayout& ol, T* out, const Positions& p,
                                                      Direction dir) const {
  rotary::detail::KernelArgs<T> a;
  a.tokens = il.tokens;
  a.q.heads = il.heads;
  a.head_dim = g_.head_dim;
  a.rotary_dim = g_.rotary_dim;
  a.pairing = g_.pairing;
  a.inverse = dir == Direction::inverse;
  a.rows = rotary::detail::CosSinRows<C<T>>::table(rope_.cache(), p);
  a.q.in = in;
  a.q.out = out;
  a.q.in_token_stride = il.token_stride;
  a.q.in_head_stride = il.head_stride;
  a.q.out_token_stride = ol.token_stride;
  a.q.out_head_stride = ol.head_stride;
  return a;
}

// The rows of this file: the registry's kernels and every entry point of apply.hpp, table.hpp,
// layouts.hpp, tensor_map.hpp and rerotate.hpp.
const std::vector<EntryPoint>& entry_points() {
  using P = Pairings;
  static const std::vector<EntryPoint> table = {
      // detail kernels from the registry, every variant of the ISA (avx512 bf16: both roundings)
      row("kernels", 0, Shapes::every, P::both, Isas::every, [](auto& f) { f.kernels(); }),
      // apply.hpp
      row("apply", 1, Shapes::tails, P::both, Isas::every, [](auto& f) { f.apply_eigen(); }),
      row("apply_strided", 2, Shapes::every, P::both, Isas::every, [](auto& f) { f.apply_strided(); }),
      row("apply_qk", 3, Shapes::tails, P::both, Isas::every, [](auto& f) { f.apply_qk_eigen(); }),
      row("apply_qk_strided", 4, Shapes::tails, P::both, Isas::every, [](auto& f) { f.apply_qk_strided(); }),
      row("for_positions_cache", 5, Shapes::tails, P::both, Isas::every, [](auto& f) { f.listed_cache(); }),
      row("on_the_fly", 6, Shapes::tails, P::both, Isas::every, [](auto& f) { f.on_the_fly(); }),
      // table.hpp
      row("caller_table", 7, Shapes::tails, P::both, Isas::every, [](auto& f) { f.caller_table(); }),
      // layouts.hpp and tensor_map.hpp
      row("apply_batch", 8, Shapes::tails, P::both, Isas::every, [](auto& f) { f.batch(); }),
      row("apply_qk_batch", 9, Shapes::tails, P::both, Isas::every, [](auto& f) { f.qk_batch(); }),
      row("varlen", 10, Shapes::tails, P::both, Isas::every, [](auto& f) { f.varlen(); }),
      row("tensor_map", 11, Shapes::tails, P::both, Isas::every, [](auto& f) { f.tensor_maps(); }),
      // rerotate.hpp
      row("rerotate", 12, Shapes::tails, P::both, Isas::every, [](auto& f) { f.rerotate(); }),
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
