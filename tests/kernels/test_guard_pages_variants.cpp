// Guard pages (tests/kernels/guard_pages.hpp says how) around every entry point of multi_axis.hpp,
// xpos.hpp, linear_attention.hpp, gradients.hpp (each call also on heap twins: the same bits) and
// convert_weights.hpp, on every ISA, position streams guarded too.
#include <gtest/gtest.h>

#include <rotary/gradients.hpp>
#include <rotary/linear_attention.hpp>
#include <rotary/multi_axis.hpp>
#include <rotary/rotary.hpp>
#include <rotary/xpos.hpp>

#include "guard_pages.hpp"

#if ROTARY_TEST_HAVE_MMAN

namespace guard_pages {

// The S position streams of a multi-axis call (values[a][t]) in guarded memory, in one of four
// layouts: 0 planar int32 [S x tokens], 1 planar int64, 2 token-major int32 [tokens x S], 3 one int64
// buffer per used stream, the streams no pair uses pointing into a guard page (multi_axis.hpp
// promises never to read them). The heap twin has the same values, type and layout (planar int64
// for layout 3).
class GuardedAxisPositions {
 public:
  GuardedAxisPositions(int kind, const rotary::AxisMap& map, std::vector<std::vector<std::int64_t>> values,
                       Flush flush)
      : kind_(kind), streams_(map.streams()), values_(std::move(values)) {
    tokens_ = static_cast<std::int64_t>(values_.front().size());
    std::vector<std::int64_t> flat;  // planar, or token-major for layout 2
    for (std::int64_t i = 0; i < streams_ * tokens_; ++i)
      flat.push_back(kind_ == 2 ? (*this)(static_cast<int>(i % streams_), i / streams_)
                                : (*this)(static_cast<int>(i / tokens_), i % tokens_));
    if (kind_ == 0 || kind_ == 2) {
      g32_ = guarded_array<std::int32_t>(flat, flush);
      h32_.assign(flat.begin(), flat.end());
    } else {
      h64_ = flat;
      if (kind_ == 1) g64_ = guarded_array<std::int64_t>(flat, flush);
    }
    if (kind_ == 3)
      for (int a = 0; a < streams_; ++a)
        per_stream_.push_back(guarded_array<std::int64_t>(
            map.uses(a) ? values_[static_cast<std::size_t>(a)]
                        : std::vector<std::int64_t>{},  // data() is in the guard page
            flush));
  }
  rotary::AxisPositions get(Mem m) const {
    using rotary::AxisPositions;
    switch (kind_) {
      case 0:
        return AxisPositions(m == Mem::guarded ? g32_->data() : h32_.data(), streams_, tokens_);
      case 1:
        return AxisPositions(m == Mem::guarded ? g64_->data() : h64_.data(), streams_, tokens_);
      case 2:
        return AxisPositions::token_major(m == Mem::guarded ? g32_->data() : h32_.data(), streams_, tokens_);
      default:
        if (m == Mem::heap) return AxisPositions(h64_.data(), streams_, tokens_);
        const auto s = [this](int a) -> const std::int64_t* {
          return per_stream_[static_cast<std::size_t>(a)]->data();
        };
        if (streams_ == 3) return AxisPositions::of_streams<std::int64_t>({s(0), s(1), s(2)}, tokens_);
        return AxisPositions::of_streams<std::int64_t>({s(0), s(1), s(2), s(3)}, tokens_);
    }
  }
  std::int64_t operator()(int axis, std::int64_t t) const {
    return values_[static_cast<std::size_t>(axis)][static_cast<std::size_t>(t)];
  }
  std::vector<std::int64_t> all() const {
    std::vector<std::int64_t> v;
    for (const auto& s : values_) v.insert(v.end(), s.begin(), s.end());
    return v;
  }
  const char* kind_name() const {
    static const char* const names[] = {"planar int32", "planar int64", "token-major int32",
                                        "separate int64 streams"};
    return names[kind_];
  }

 private:
  int kind_;
  int streams_;
  std::int64_t tokens_ = 0;
  std::vector<std::vector<std::int64_t>> values_;
  std::shared_ptr<GuardedBuffer<std::int32_t>> g32_;
  std::shared_ptr<GuardedBuffer<std::int64_t>> g64_;
  std::vector<std::shared_ptr<GuardedBuffer<std::int64_t>>> per_stream_;
  std::vector<std::int32_t> h32_;
  std::vector<std::int64_t> h64_;
};

// Entry-point forms of multi_axis.hpp and xpos.hpp (their signatures mirror apply.hpp's): Eigen rows
// or raw pointers + StridedLayout, one tensor or fused q+k; checked or *_unchecked; in place or out
// of place; with a GQA key (1 head) or none (k_heads 0).
enum class Form { eigen, strided, qk_eigen, qk_strided };
struct Variant {
  Form form;
  bool unchecked;
  bool in_place;
  bool with_key;
};

std::string variant_name(const char* base, const Variant& v) {
  static const char* const forms[] = {"", "_strided", "_qk", "_qk_strided"};
  return std::string(base) + forms[static_cast<int>(v.form)] + (v.unchecked ? "_unchecked" : "") +
         (v.in_place ? " in place" : " out of place") +
         ((v.form == Form::qk_eigen || v.form == Form::qk_strided) && !v.with_key ? " no key" : "");
}

// Every form of a header whose signatures mirror apply.hpp's (multi_axis.hpp, xpos.hpp): each
// one-tensor form (Eigen rows, then strided) checked then unchecked, in place then out of place; then
// the fused q+k forms: Eigen rows in place with a key and without, out of place, and unchecked in
// place where the header has that form; strided out of place, in place without a key, and
// unchecked in place and out of place.
std::vector<Variant> every_form(bool unchecked_qk_eigen) {
  std::vector<Variant> v;
  for (const Form f : {Form::eigen, Form::strided})
    for (const bool unchecked : {false, true})
      for (const bool in_place : {true, false}) v.push_back({f, unchecked, in_place, false});
  v.push_back({Form::qk_eigen, false, true, true});
  v.push_back({Form::qk_eigen, false, true, false});
  v.push_back({Form::qk_eigen, false, false, true});
  if (unchecked_qk_eigen) v.push_back({Form::qk_eigen, true, true, true});
  v.push_back({Form::qk_strided, false, false, true});
  v.push_back({Form::qk_strided, false, true, false});
  v.push_back({Form::qk_strided, true, true, true});
  v.push_back({Form::qk_strided, true, false, true});
  return v;
}

// Rows of a tensor of tokens x heads, each row ld elements apart (what an Eigen row view describes).
StridedLayout rows_layout(std::int64_t tokens, std::int64_t heads, std::int64_t ld) {
  return {tokens, heads, heads * ld, ld};
}

// A tensor's input and output layouts for a form: Eigen forms need row views; strided forms go
// from head-major to token-major, both padded. Key layouts (1 head) are padded differently.
struct FormLayouts {
  StridedLayout qi, qo, ki, ko;
};
FormLayouts form_layouts(Form f, std::int64_t tokens, std::int64_t d, bool with_key) {
  FormLayouts l;
  if (f == Form::eigen || f == Form::qk_eigen) {
    l = {rows_layout(tokens, kHeads, d + 3), rows_layout(tokens, kHeads, d),
         rows_layout(tokens, kKeyHeads, d), rows_layout(tokens, kKeyHeads, d + 1)};
  } else {
    l = {{tokens, kHeads, d + 1, tokens * (d + 1)},
         {tokens, kHeads, kHeads * d + 2, d},
         {tokens, kKeyHeads, kKeyHeads * d + 1, d},
         {tokens, kKeyHeads, d + 2, tokens * (d + 2)}};
  }
  if (!with_key) l.ki = l.ko = {tokens, 0, 0, 0};
  return l;
}

std::vector<std::int64_t> token_indices(std::int64_t tokens) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) v[static_cast<std::size_t>(t)] = t;
  return v;
}

// ---- convert_weights.hpp (no kernels) -----------------------------------------------------------

// The permuted rows must be P W per head (half_split -> interleaved) or P^T W (back), with P from
// reference::pairing_permutation; W is a guarded row-major or column-major map, the bias a vector.
template <class T, int Order>
void convert_guarded(Flush flush, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim) {
  using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>;
  const Eigen::Index rows = heads * head_dim;
  const Eigen::Index cols = 5;
  GuardedBuffer<T> wb(static_cast<std::size_t>(rows * cols), flush);
  GuardedBuffer<T> bb(static_cast<std::size_t>(rows), flush);
  for (Eigen::Index i = 0; i < rows * cols; ++i)
    wb.data()[i] = static_cast<T>(static_cast<float>(i % 251) - 125.0f);
  for (Eigen::Index i = 0; i < rows; ++i) bb.data()[i] = static_cast<T>(static_cast<float>(i));
  const Eigen::Map<const Matrix> w(wb.data(), rows, cols);
  const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> bias(bb.data(), rows);
  const Eigen::MatrixXd p = rotary::reference::pairing_permutation(head_dim, rotary_dim);
  const auto source_row = [&p, head_dim](Eigen::Index i, bool to_interleaved) {
    const Eigen::Index head = i / head_dim;
    const Eigen::Index a = i % head_dim;
    for (Eigen::Index b = 0; b < head_dim; ++b)
      if ((to_interleaved ? p(a, b) : p(b, a)) == 1.0) return head * head_dim + b;
    return Eigen::Index{-1};
  };
  const Matrix wi = rotary::permute_rows_half_split_to_interleaved(w, heads, head_dim, rotary_dim);
  const Matrix wh = rotary::permute_rows_interleaved_to_half_split(w, heads, head_dim, rotary_dim);
  const Matrix wc =
      rotary::convert_pairing(w, Pairing::interleaved, Pairing::interleaved, heads, head_dim, rotary_dim);
  const Eigen::Matrix<T, Eigen::Dynamic, 1> bi =
      rotary::convert_pairing(bias, Pairing::half_split, Pairing::interleaved, heads, head_dim, rotary_dim);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const Eigen::Index si = source_row(i, true);
    const Eigen::Index sh = source_row(i, false);
    ASSERT_GE(si, 0);
    ASSERT_GE(sh, 0);
    for (Eigen::Index j = 0; j < cols; ++j) {
      ASSERT_TRUE(same_bits(wi(i, j), w(si, j))) << "half_split -> interleaved row " << i;
      ASSERT_TRUE(same_bits(wh(i, j), w(sh, j))) << "interleaved -> half_split row " << i;
      ASSERT_TRUE(same_bits(wc(i, j), w(i, j))) << "identity conversion row " << i;
    }
    ASSERT_TRUE(same_bits(bi(i), bias(si))) << "bias row " << i;
  }
  // probe_convention reads every row of W_q and W_k: same verdict as on heap copies.
  const Matrix wq_copy = w;
  const rotary::ConventionReport guarded =
      rotary::probe_convention(w, w.topRows(head_dim), heads, 1, head_dim, rotary_dim);
  const rotary::ConventionReport heap =
      rotary::probe_convention(wq_copy, wq_copy.topRows(head_dim), heads, 1, head_dim, rotary_dim);
  EXPECT_EQ(guarded.score_interleaved, heap.score_interleaved);
  EXPECT_EQ(guarded.score_half_split, heap.score_half_split);
  EXPECT_TRUE(std::isfinite(guarded.score_interleaved) && std::isfinite(guarded.score_half_split));
  const rotary::ConventionReport q_only =
      rotary::probe_convention(w, Eigen::Map<const Matrix>(nullptr, 0, cols), heads, 0, head_dim, rotary_dim);
  EXPECT_TRUE(std::isfinite(q_only.score_interleaved));
}

// One call on q rows (and k rows when l.ki.heads > 0) in the layouts l: makes the guarded buffers,
// runs call(mem, q_in, q_out, k_in, k_out) on them and then on their heap twins, and checks each
// output against its rows (verify: rotation, pass-through, padding, untouched input) and against
// the heap twin, bit for bit. In place: the out pointers are the in pointers, l.qo/l.ko unused.
template <class T>
template <class Call>
void Fixture<T>::check_call(const std::string& name, Direction dir, const std::vector<std::int64_t>& keys,
                            const CosSinRows<T>& q_rows, const CosSinRows<T>& k_rows, const FormLayouts& l,
                            bool in_place, const Call& call) {
  const std::int64_t d = g_.head_dim;
  const bool with_key = l.ki.heads > 0;
  // Absent buffers (no key, in place) are null: a mapping per call is what the sweep's time goes to.
  const auto make = [this, d](bool needed, const StridedLayout& sl) {
    return needed ? std::make_unique<Tensor<T>>(extent(sl, d), flush_, rng_) : nullptr;
  };
  const auto qi = make(true, l.qi);
  const auto qo = make(!in_place, l.qo);
  const auto ki = make(with_key, l.ki);
  const auto ko = make(with_key && !in_place, l.ko);
  Tensor<T>* q_out = in_place ? qi.get() : qo.get();
  Tensor<T>* k_out = in_place ? ki.get() : ko.get();
  const auto at = [](Tensor<T>* t, Mem m) { return t != nullptr ? t->at(m) : nullptr; };
  for (const Mem m : {Mem::guarded, Mem::heap})
    call(m, qi->at(m), q_out->at(m), at(ki.get(), m), at(k_out, m));
  const StridedLayout& qol = in_place ? l.qi : l.qo;
  const StridedLayout& kol = in_place ? l.ki : l.ko;
  verify<T>(where(name + " q"), g_, dir, q_rows, strided_jobs(l.qi, qol, keys), qi->before, qi->data(),
            q_out->before, q_out->data(), in_place);
  expect_same_as_heap(where(name + " q"), *q_out);
  if (!with_key) return;
  verify<T>(where(name + " k"), g_, dir, k_rows, strided_jobs(l.ki, kol, keys), ki->before, ki->data(),
            k_out->before, k_out->data(), in_place);
  expect_same_as_heap(where(name + " k"), *k_out);
}

// Position streams of a multi-axis call: each a random walk of +1 steps, repeats and jumps (the
// three row modes of the cache-free fill) in [0, limit).
template <class T>
std::vector<std::vector<std::int64_t>> Fixture<T>::axis_streams(int streams, std::int64_t tokens,
                                                                std::int64_t limit) {
  std::uniform_int_distribution<std::int64_t> anywhere(0, limit - 1);
  std::vector<std::vector<std::int64_t>> v(static_cast<std::size_t>(streams));
  for (auto& s : v) {
    s.push_back(anywhere(rng_));
    for (std::int64_t t = 1; t < tokens; ++t) {
      const std::uint64_t move = rng_() % 4;  // 0, 1: step; 2: repeat; 3: jump
      const std::int64_t next = move == 3 ? anywhere(rng_) : s.back() + (move < 2 ? 1 : 0);
      s.push_back(next < limit ? next : 0);
    }
  }
  return v;
}

// multi_axis.hpp: every entry point (Variant forms), over table and cache-free MultiAxisRopes of
// three maps: M-RoPE sections (Qwen2-VL; a section is empty when rotary_dim/2 = 2), interleaved
// M-RoPE (Qwen3-VL) and a scattered 4-stream map whose stream 2 drives no pair. Calls rotate
// through the maps and the four position layouts. Table rows: each pair's entry of the table row
// of its own axis' position, gathered here, exact. Cache-free rows: the same gather from an exact
// table of the same frequencies, within the cache-free bound of on_the_fly().
template <class T>
void Fixture<T>::multi_axis() {
  const std::int64_t h = g_.rotary_dim / 2;
  std::vector<std::uint8_t> scattered(static_cast<std::size_t>(h));
  for (std::int64_t j = 0; j < h; ++j) {
    static const std::uint8_t axes[] = {3, 0, 1, 1, 3};
    scattered[static_cast<std::size_t>(j)] = axes[(j * 3 + j / 5) % 5];
  }
  const rotary::AxisMap maps[] = {
      rotary::mrope_axis_map(g_.rotary_dim, {(h + 2) / 3, (h + 1) / 3, h / 3}),
      rotary::interleaved_mrope_axis_map(g_.rotary_dim, {h - 2 * (h / 3), h / 3, h / 3}),
      rotary::AxisMap(scattered, 4)};
  static const char* const map_names[] = {"mrope", "interleaved mrope", "scattered"};
  const rotary::Frequencies f = rotary::compute_frequencies(spec_);
  static const std::vector<Variant> table_calls = every_form(false);  // no unchecked Eigen q+k form
  // Cache-free: 35 tokens cross a 32-token row block; threads split them mid-block.
  static const Variant fly_calls[] = {{Form::strided, false, false, false},
                                      {Form::eigen, false, true, false},
                                      {Form::qk_strided, false, false, true}};
  const int n_table = static_cast<int>(table_calls.size());
  for (int i = 0; i < n_table + static_cast<int>(std::size(fly_calls)); ++i) {
    const bool fly = i >= n_table;
    const Variant& v = fly ? fly_calls[i - n_table] : table_calls[static_cast<std::size_t>(i)];
    const rotary::AxisMap& map = maps[i % 3];
    const rotary::MultiAxisRope<T> mrope(fly ? fly_ : rope_, map);
    const std::int64_t tokens = fly ? 35 : kTokens;
    const GuardedAxisPositions pos(
        i % 4, map, axis_streams(map.streams(), tokens, fly ? std::int64_t{1} << 30 : kCachePositions),
        flush_);
    std::unique_ptr<rotary::CosSinCache<C<T>>> exact;
    if (fly)
      exact = std::make_unique<rotary::CosSinCache<C<T>>>(
          rotary::CosSinCache<C<T>>::for_positions(f, pos.all()));
    const rotary::CosSinCache<C<T>>& table = fly ? *exact : rope_.cache();
    CosSinRows<T> rows{[&table, &pos, &map, h](std::int64_t t) {
                        std::vector<C<T>> r(static_cast<std::size_t>(2 * h));
                        for (std::int64_t j = 0; j < h; ++j) {
                          const C<T>* src = table.row(pos(map[j], t));
                          r[static_cast<std::size_t>(j)] = src[j];
                          r[static_cast<std::size_t>(h + j)] = src[h + j];
                        }
                        return r;
                      },
                      !fly, std::is_same_v<C<T>, double> ? 0x1p-45 : 0x1p-24};
    const Direction dir = dir_for(i);
    const rotary::ParallelFor parallel =
        fly && i % 2 == 0 ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
    const FormLayouts l = form_layouts(v.form, tokens, g_.head_dim, v.with_key);
    const std::string name =
        variant_name(fly ? "MultiAxisRope(OnTheFly) apply" : "MultiAxisRope apply", v) + " (" +
        map_names[i % 3] + " map, " + pos.kind_name() + " positions)";
    check_call(name, dir, token_indices(tokens), rows, rows, l, v.in_place,
               [&](Mem m, T* qi, T* qo, T* ki, T* ko) {
                 multi_axis_call(mrope, v, l, qi, qo, ki, ko, pos.get(m), dir, parallel);
               });
  }
}

template <class T>
void Fixture<T>::multi_axis_call(const rotary::MultiAxisRope<T>& r, const Variant& v, const FormLayouts& l,
                                 T* qi, T* qo, T* ki, T* ko, const rotary::AxisPositions& p, Direction dir,
                                 const rotary::ParallelFor& parallel) const {
  switch (v.form) {
    case Form::eigen: {
      Map in = row_map(qi, l.qi);
      if (v.in_place) {
        if (v.unchecked) {
          rotary::unchecked::apply(r, in, p, kHeads, {dir, parallel});
        } else {
          rotary::apply(r, in, p, kHeads, {dir, parallel});
        }
      } else {
        Map out = row_map(qo, l.qo);
        if (v.unchecked) {
          rotary::unchecked::apply(r, in, out, p, kHeads, {dir, parallel});
        } else {
          rotary::apply(r, in, out, p, kHeads, {dir, parallel});
        }
      }
      break;
    }
    case Form::strided:
      if (v.unchecked) {
        rotary::unchecked::apply_strided(r, qi, l.qi, qo, v.in_place ? l.qi : l.qo, p, {dir, parallel});
      } else if (v.in_place) {
        rotary::apply_strided(r, qi, l.qi, p, {dir, parallel});
      } else {
        rotary::apply_strided(r, qi, l.qi, qo, l.qo, p, {dir, parallel});
      }
      break;
    case Form::qk_eigen: {  // no unchecked Eigen form for q+k
      Map q = row_map(qi, l.qi);
      Map k = row_map(ki, l.ki);
      const std::int64_t k_heads = l.ki.heads;
      if (v.in_place) {
        rotary::apply_qk(r, q, k, p, kHeads, k_heads, {dir, parallel});
      } else {
        Map q_out = row_map(qo, l.qo);
        Map k_out = row_map(ko, l.ko);
        rotary::apply_qk(r, q, q_out, k, k_out, p, kHeads, k_heads, {dir, parallel});
      }
      break;
    }
    default: {
      const StridedLayout& qol = v.in_place ? l.qi : l.qo;
      const StridedLayout& kol = v.in_place ? l.ki : l.ko;
      if (v.unchecked) {
        rotary::unchecked::apply_qk_strided(r, qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
      } else {
        rotary::apply_qk_strided(r, qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
      }
      break;
    }
  }
}

// xPos rows of one role, direction and centre from the definition (xpos.hpp's header):
// cos/sin(p theta_j) * zeta_j^(s (p - c)/B), zeta_j = (2j/d + gamma)/(1 + gamma), s = +1 for forward
// queries and inverse keys, else -1 (attention factor 1), formed in long double for f64 and in
// double otherwise and rounded once to the compute type. The library's rows are within about one
// ulp of the compute type, ours half an ulp; both scale with the factor (< 2 here: |p - c| < 300,
// zeta_0^(-300/512) = 1.9), and so do the kernel's two roundings of |x0| + |x1|: 16 ulp of the
// compute type at magnitude 1 bound the row and output differences together.
template <class T>
CosSinRows<T> Fixture<T>::xpos_rows(const rotary::XPos<T>& xp, bool query, Direction dir,
                                   double center) const {
  using R = std::conditional_t<std::is_same_v<C<T>, double>, long double, double>;
  const std::int64_t h = xp.pairs();
  const auto d = static_cast<R>(xp.rotary_dim());
  const auto gamma = static_cast<R>(xp.gamma());
  std::vector<R> log2_zeta(static_cast<std::size_t>(h));
  for (std::int64_t j = 0; j < h; ++j)
    log2_zeta[static_cast<std::size_t>(j)] =
        std::log2((2 * static_cast<R>(j) + gamma * d) / (d * (1 + gamma)));
  const R sign = query == (dir == Direction::forward) ? 1 : -1;
  const R scale_base = static_cast<R>(xp.scale_base());
  const std::vector<double>& theta = xp.frequencies().theta;
  return {[log2_zeta, sign, center, scale_base, &theta, h](std::int64_t p) {
            const R exponent = sign * (static_cast<R>(p) - static_cast<R>(center)) / scale_base;
            std::vector<C<T>> r(static_cast<std::size_t>(2 * h));
            for (std::int64_t j = 0; j < h; ++j) {
              const auto u = static_cast<std::size_t>(j);
              const R factor = std::exp2(log2_zeta[u] * exponent);
              const R angle = static_cast<R>(p) * static_cast<R>(theta[u]);  // exact in long double
              r[u] = static_cast<C<T>>(std::cos(angle) * factor);
              r[static_cast<std::size_t>(h + j)] = static_cast<C<T>>(std::sin(angle) * factor);
            }
            return r;
          },
          false, std::is_same_v<C<T>, double> ? 16 * 0x1p-53 : 16 * 0x1p-24};
}

// xpos.hpp: every member of XPos<T> (apply_q / apply_k / apply_qk, their _strided and _unchecked
// forms, in and out of place), contiguous / int32 / int64 guarded positions, centres 0, 100.5 and
// -7.25; the last two calls take 35 tokens over two threads (blocks anchored mid-range).
template <class T>
void Fixture<T>::xpos() {
  const rotary::XPos<T> xp(spec_);
  static const std::vector<Variant> calls = [] {
    std::vector<Variant> v = every_form(true);
    v.push_back({Form::qk_strided, false, false, true});  // these two: 35 tokens over two threads
    v.push_back({Form::eigen, false, true, false});
    return v;
  }();
  const int n_calls = static_cast<int>(calls.size());
  static const double centers[] = {0.0, 100.5, -7.25};
  for (int i = 0; i < n_calls; ++i) {
    const Variant& v = calls[static_cast<std::size_t>(i)];
    const bool many = i >= n_calls - 2;
    const std::int64_t tokens = many ? 35 : kTokens;
    const GuardedPositions pos = positions(i % 3, tokens);
    const double center = centers[(i / 3) % 3];
    const Direction dir = dir_for(i / 2);
    // One-tensor forms: queries or keys, swapped from one shape of this pairing to the next.
    const bool single = v.form == Form::eigen || v.form == Form::strided;
    const bool query = !single || (i + (flip_ ? 1 : 0)) % 2 == 0;
    const rotary::ParallelFor parallel = many ? rotary::thread_parallel_for(2) : rotary::ParallelFor{};
    const FormLayouts l = form_layouts(v.form, tokens, g_.head_dim, v.with_key);
    std::ostringstream name;
    name << variant_name(single ? (query ? "XPos::apply_q" : "XPos::apply_k") : "XPos::apply", v) << " ("
         << pos.kind_name() << " positions, center " << center << ")";
    check_call(name.str(), dir, pos.values(), xpos_rows(xp, query, dir, center),
               xpos_rows(xp, false, dir, center), l, v.in_place, [&](Mem m, T* qi, T* qo, T* ki, T* ko) {
                 xpos_call(xp, v, query, l, qi, qo, ki, ko, pos.get(m), center, dir, parallel);
               });
  }
}

template <class T>
void Fixture<T>::xpos_call(const rotary::XPos<T>& xp, const Variant& v, bool query, const FormLayouts& l,
                           T* qi, T* qo, T* ki, T* ko, const Positions& p, double c, Direction dir,
                           const rotary::ParallelFor& parallel) const {
  switch (v.form) {
    case Form::eigen: {
      Map in = row_map(qi, l.qi);
      if (v.in_place) {
        if (v.unchecked) {
          query ? rotary::unchecked::apply(xp.queries(c), in, p, kHeads, {dir, parallel})
                : rotary::unchecked::apply(xp.keys(c), in, p, kHeads, {dir, parallel});
        } else {
          query ? rotary::apply(xp.queries(c), in, p, kHeads, {dir, parallel}) : rotary::apply(xp.keys(c), in, p, kHeads, {dir, parallel});
        }
      } else {
        Map out = row_map(qo, l.qo);
        if (v.unchecked) {
          query ? rotary::unchecked::apply(xp.queries(c), in, out, p, kHeads, {dir, parallel})
                : rotary::unchecked::apply(xp.keys(c), in, out, p, kHeads, {dir, parallel});
        } else {
          query ? rotary::apply(xp.queries(c), in, out, p, kHeads, {dir, parallel})
                : rotary::apply(xp.keys(c), in, out, p, kHeads, {dir, parallel});
        }
      }
      break;
    }
    case Form::strided: {
      const StridedLayout& ol = v.in_place ? l.qi : l.qo;
      if (v.unchecked) {  // the unchecked forms take in and out (in place: the same buffer)
        query ? rotary::unchecked::apply_strided(xp.queries(c), qi, l.qi, qo, ol, p, {dir, parallel})
              : rotary::unchecked::apply_strided(xp.keys(c), qi, l.qi, qo, ol, p, {dir, parallel});
      } else if (v.in_place) {
        query ? rotary::apply_strided(xp.queries(c), qi, l.qi, p, {dir, parallel})
              : rotary::apply_strided(xp.keys(c), qi, l.qi, p, {dir, parallel});
      } else {
        query ? rotary::apply_strided(xp.queries(c), qi, l.qi, qo, ol, p, {dir, parallel})
              : rotary::apply_strided(xp.keys(c), qi, l.qi, qo, ol, p, {dir, parallel});
      }
      break;
    }
    case Form::qk_eigen: {
      Map q = row_map(qi, l.qi);
      Map k = row_map(ki, l.ki);
      const std::int64_t k_heads = l.ki.heads;
      if (v.in_place) {
        if (v.unchecked) {
          rotary::unchecked::apply_qk(xp.queries(c), q, k, p, kHeads, k_heads, {dir, parallel});
        } else {
          rotary::apply_qk(xp.queries(c), q, k, p, kHeads, k_heads, {dir, parallel});
        }
      } else {  // no unchecked out-of-place Eigen form
        Map q_out = row_map(qo, l.qo);
        Map k_out = row_map(ko, l.ko);
        rotary::apply_qk(xp.queries(c), q, q_out, k, k_out, p, kHeads, k_heads, {dir, parallel});
      }
      break;
    }
    default: {
      const StridedLayout& qol = v.in_place ? l.qi : l.qo;
      const StridedLayout& kol = v.in_place ? l.ki : l.ko;
      if (v.unchecked) {
        rotary::unchecked::apply_qk_strided(xp.queries(c), qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
      } else {
        rotary::apply_qk_strided(xp.queries(c), qi, l.qi, qo, qol, ki, l.ki, ko, kol, p, {dir, parallel});
      }
      break;
    }
  }
}

// linear_attention.hpp (float and double only): self and cross attention, causal and not, default
// and explicit feature maps, over guarded q, k, v row views with padding and guarded positions. No
// output buffer is the caller's (the result is a new matrix): the result must equal the heap
// twin's bit for bit, and q, k, v stay untouched.
template <class T>
void Fixture<T>::linear_attention() {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const std::int64_t d = g_.head_dim;
    const std::int64_t dv = 5;
    for (int variant = 0; variant < 4; ++variant) {
      const bool cross = variant >= 2;
      rotary::LinearAttentionOptions options;
      options.causal = variant % 2 == 1;
      const std::int64_t nk = 5;
      const std::int64_t nq = cross && !options.causal ? 3 : nk;  // causal needs nq == nk
      const GuardedPositions qpos = positions(variant % 3, nq);
      const GuardedPositions kpos = positions((variant + 1) % 3, nk);
      Tensor<T> q = tensor(extent(nq, 1, d + 1, 0, d));
      Tensor<T> k = tensor(extent(nk, 1, d, 0, d));
      Tensor<T> v = tensor(extent(nk, 1, dv + 2, 0, dv));
      rotary::RowMatrix<T> out[2];
      for (const Mem m : {Mem::guarded, Mem::heap}) {
        const ConstMap qm(q.at(m), nq, d, Eigen::OuterStride<>(d + 1));
        const ConstMap km(k.at(m), nk, d, Eigen::OuterStride<>(d));
        const ConstMap vm(v.at(m), nk, dv, Eigen::OuterStride<>(dv + 2));
        rotary::RowMatrix<T>& o = out[m == Mem::guarded ? 0 : 1];
        if (!cross) {
          o = variant == 0
                  ? rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), options)
                  : rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), options, rotary::Relu{});
        } else {
          o = variant == 2
                  ? rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), kpos.get(m), options)
                  : rotary::rope_linear_attention(rope_, qm, km, vm, qpos.get(m), kpos.get(m), options,
                                                  rotary::Relu{}, rotary::EluPlusOne{});
        }
      }
      const std::string name = where(std::string("rope_linear_attention ") + (cross ? "cross" : "self") +
                                         (options.causal ? " causal" : ""),
                                     &qpos);
      ASSERT_EQ(out[0].rows(), nq) << name;
      ASSERT_EQ(out[0].cols(), dv) << name;
      ASSERT_TRUE(out[0].allFinite()) << name;
      for (Eigen::Index r = 0; r < nq; ++r)
        for (Eigen::Index c = 0; c < dv; ++c)
          ASSERT_TRUE(same_bits(out[0](r, c), out[1](r, c)))
              << name << ": out(" << r << ", " << c << ") = " << out[0](r, c) << " but the heap twin gave "
              << out[1](r, c) << " " << rotary_test::seed_note();
      expect_untouched(name + " q", q);
      expect_untouched(name + " k", k);
      expect_untouched(name + " v", v);
    }
  }
}

// gradients.hpp. theta_gradient, accumulate_theta_gradient, theta_gradient_qk (GQA key, no key)
// and accumulate_theta_gradient_strided read y and dy from guarded views (Eigen rows with padding,
// or head-major / token-major layouts) with positions of either sign: the gradient must equal the
// heap twin's bit for bit and the sum of gradients.hpp's formula taken here in long double within
// its rounding bound, and y, dy stay untouched. input_gradient (both forms) is the rotation in the
// opposite direction: check_call with the cache's rows.
template <class T>
void Fixture<T>::gradients() {
  const std::int64_t d = g_.head_dim;
  const std::int64_t pairs = g_.rotary_dim / 2;
  const auto signed_positions = [this](int kind, std::int64_t tokens) {
    if (kind == 0) return GuardedPositions::contiguous(-5, tokens);
    std::uniform_int_distribution<std::int64_t> any(-3000, 3000);
    std::vector<std::int64_t> v(static_cast<std::size_t>(tokens));
    for (auto& p : v) p = any(rng_);
    return GuardedPositions(kind, std::move(v), flush_);
  };
  for (int variant = 0; variant < 5; ++variant) {
    const GuardedPositions pos = signed_positions((variant + 1) % 3, kTokens);
    const Direction dir = dir_for(variant);
    const bool qk = variant == 2 || variant == 3;
    const std::int64_t k_heads = variant == 2 ? kKeyHeads : 0;
    // variant 4 is the strided form: y head-major, dy token-major, both padded.
    const StridedLayout yl = variant == 4 ? StridedLayout{kTokens, kHeads, d + 2, kTokens * (d + 2)}
                                          : rows_layout(kTokens, kHeads, d + 2);
    const StridedLayout dl =
        variant == 4 ? StridedLayout{kTokens, kHeads, kHeads * d + 1, d} : rows_layout(kTokens, kHeads, d);
    const StridedLayout kl = rows_layout(kTokens, k_heads, d + 1);
    Tensor<T> y = tensor(extent(yl, d));
    Tensor<T> dy = tensor(extent(dl, d));
    std::unique_ptr<Tensor<T>> ky;
    std::unique_ptr<Tensor<T>> kdy;
    if (k_heads > 0) {
      ky = std::make_unique<Tensor<T>>(extent(kl, d), flush_, rng_);
      kdy = std::make_unique<Tensor<T>>(extent(kl, d), flush_, rng_);
    }
    const auto at = [](const std::unique_ptr<Tensor<T>>& t, Mem m) { return t ? t->at(m) : nullptr; };
    std::vector<double> start(static_cast<std::size_t>(pairs));
    for (std::int64_t j = 0; j < pairs; ++j)
      start[static_cast<std::size_t>(j)] = 0.25 * static_cast<double>(j) - 1.0;
    const bool accumulates = variant == 1 || variant == 4;
    std::vector<double> grad[2];
    for (const Mem m : {Mem::guarded, Mem::heap}) {
      std::vector<double>& gr = grad[m == Mem::guarded ? 0 : 1];
      const auto rows = [d](const T* x, const StridedLayout& l) {
        return ConstMap(x, l.tokens * l.heads, d, Eigen::OuterStride<>(l.head_stride));
      };
      if (variant == 0) {
        gr = rotary::theta_gradient(spec_, rows(y.at(m), yl), rows(dy.at(m), dl), pos.get(m), kHeads, dir);
      } else if (variant == 1) {
        gr = start;
        rotary::accumulate_theta_gradient(spec_, rows(y.at(m), yl), rows(dy.at(m), dl), pos.get(m), kHeads,
                                          gr, dir);
      } else if (qk) {
        gr = rotary::theta_gradient_qk(spec_, rows(y.at(m), yl), rows(dy.at(m), dl), rows(at(ky, m), kl),
                                       rows(at(kdy, m), kl), pos.get(m), kHeads, k_heads, dir);
      } else {
        gr = start;
        rotary::accumulate_theta_gradient_strided(spec_, y.at(m), yl, dy.at(m), dl, pos.get(m), gr, dir);
      }
    }
    static const char* const names[] = {"theta_gradient", "accumulate_theta_gradient", "theta_gradient_qk",
                                        "theta_gradient_qk no key", "accumulate_theta_gradient_strided"};
    const std::string name = where(names[variant], &pos);
    // gradients.hpp's sum in long double, and the sum of the absolute values of its terms: each term
    // is formed in double (3 roundings), summed over heads, scaled by m_t and summed over tokens,
    // so 4 * (rows + 2) unit roundoffs of that sum bound the library's error (rows = head rows).
    std::vector<long double> want(static_cast<std::size_t>(pairs), 0.0L);
    std::vector<long double> mag(static_cast<std::size_t>(pairs), 0.0L);
    if (accumulates)
      for (std::size_t j = 0; j < want.size(); ++j) {
        want[j] = start[j];
        mag[j] = std::fabs(start[j]);
      }
    theta_reference(y.data(), yl, dy.data(), dl, pos.values(), dir, want, mag);
    if (k_heads > 0) theta_reference(ky->data(), kl, kdy->data(), kl, pos.values(), dir, want, mag);
    const double rows_n = static_cast<double>(kTokens * (kHeads + k_heads));
    ASSERT_EQ(grad[0].size(), static_cast<std::size_t>(pairs)) << name;
    for (std::int64_t j = 0; j < pairs; ++j) {
      const auto u = static_cast<std::size_t>(j);
      ASSERT_EQ(std::memcmp(&grad[0][u], &grad[1][u], sizeof(double)), 0)
          << name << ": grad[" << j << "] = " << grad[0][u] << " but the heap twin gave " << grad[1][u];
      const double bound = 4.0 * (rows_n + 2.0) * 0x1p-53 * static_cast<double>(mag[u]);
      ASSERT_LE(std::fabs(static_cast<double>(static_cast<long double>(grad[0][u]) - want[u])), bound)
          << name << ": grad[" << j << "] = " << grad[0][u] << ", long double sum "
          << static_cast<double>(want[u]) << " " << rotary_test::seed_note();
    }
    expect_untouched(name + " y", y);
    expect_untouched(name + " dy", dy);
    if (k_heads > 0) {
      expect_untouched(name + " k y", *ky);
      expect_untouched(name + " k dy", *kdy);
    }
  }
  // input_gradient: dL/dx = R^T dL/dy, i.e. the table's rows in the opposite direction.
  const CosSinRows<T> rows = cache_rows<T>(rope_.cache());
  for (const bool in_place : {false, true}) {
    const GuardedPositions pos = positions(in_place ? 2 : 1, kTokens);
    const Direction forward_dir = in_place ? Direction::forward : Direction::inverse;
    const FormLayouts l = form_layouts(Form::eigen, kTokens, d, false);
    check_call(std::string("input_gradient ") + (in_place ? "in place" : "out of place") + " (" +
                   pos.kind_name() + " positions)",
               rotary::opposite(forward_dir), pos.values(), rows, rows, l, in_place,
               [&](Mem m, T* gi, T* go, T*, T*) {
                 if (in_place) {
                   Map g(gi, kTokens * kHeads, d, Eigen::OuterStride<>(l.qi.head_stride));
                   rotary::input_gradient(rope_, g, pos.get(m), kHeads, forward_dir);
                 } else {
                   const ConstMap dy(gi, kTokens * kHeads, d, Eigen::OuterStride<>(l.qi.head_stride));
                   Map dx(go, kTokens * kHeads, d, Eigen::OuterStride<>(l.qo.head_stride));
                   rotary::input_gradient(rope_, dy, dx, pos.get(m), kHeads, forward_dir,
                                          rotary::thread_parallel_for(2));
                 }
               });
  }
}

// convert_weights.hpp (no kernels): row permutations of weights and biases (row- and column-major,
// 3 heads and 1) and probe_convention, on guarded W and bias buffers.
template <class T>
void Fixture<T>::convert_weights() {
  convert_guarded<T, Eigen::RowMajor>(flush_, 3, g_.head_dim, g_.rotary_dim);
  convert_guarded<T, Eigen::ColMajor>(flush_, 1, g_.head_dim, g_.rotary_dim);
}

// Adds sign * sum_t m_t sum_h (g1 y0 - g0 y1) per pair to want, and the same sum of absolute
// values to mag, in long double (gradients.hpp's formula; pairs as the pairing defines them).
template <class T>
void Fixture<T>::theta_reference(const T* y, const StridedLayout& yl, const T* dy, const StridedLayout& dl,
                                 const std::vector<std::int64_t>& pos, Direction dir,
                                 std::vector<long double>& want, std::vector<long double>& mag) const {
  const std::int64_t h = g_.rotary_dim / 2;
  const long double sign = dir == Direction::forward ? 1.0L : -1.0L;
  for (std::int64_t t = 0; t < yl.tokens; ++t)
    for (std::int64_t hd = 0; hd < yl.heads; ++hd)
      for (std::int64_t j = 0; j < h; ++j) {
        const std::int64_t a = g_.pairing == Pairing::interleaved ? 2 * j : j;
        const std::int64_t b = g_.pairing == Pairing::interleaved ? 2 * j + 1 : j + h;
        const auto at = [t, hd](const T* x, const StridedLayout& l, std::int64_t i) {
          return static_cast<long double>(widen(x[t * l.token_stride + hd * l.head_stride + i]));
        };
        const long double m = static_cast<long double>(pos[static_cast<std::size_t>(t)]);
        const long double p1 = at(dy, dl, b) * at(y, yl, a);
        const long double p0 = at(dy, dl, a) * at(y, yl, b);
        want[static_cast<std::size_t>(j)] += sign * m * (p1 - p0);
        mag[static_cast<std::size_t>(j)] += std::fabs(m) * (std::fabs(p1) + std::fabs(p0));
      }
}

// The rows of this file: multi_axis.hpp, xpos.hpp, linear_attention.hpp and gradients.hpp (every
// shape, one pairing each, alternating), and convert_weights.hpp (no kernels).
const std::vector<EntryPoint>& entry_points() {
  using P = Pairings;
  static const std::vector<EntryPoint> table = {
      row("multi_axis", 13, Shapes::tails, P::alternate, Isas::every, [](auto& f) { f.multi_axis(); }),
      row("xpos", 14, Shapes::tails, P::alternate, Isas::every, [](auto& f) { f.xpos(); }),
      row("linear_attention", 15, Shapes::tails, P::alternate, Isas::every,
          [](auto& f) { f.linear_attention(); }),
      row("gradients", 16, Shapes::tails, P::alternate, Isas::every, [](auto& f) { f.gradients(); }),
      // convert_weights.hpp (no kernels)
      row("convert_weights", 19, Shapes::tails, P::first, Isas::none, [](auto& f) { f.convert_weights(); }),
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
