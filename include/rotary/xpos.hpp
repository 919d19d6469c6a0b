// rotary — xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE whose pairs also decay
// exponentially with the query-key distance.
//
// Math. Pair j (j < d/2, d = rotary_dim) gets a decay base
//   zeta_j = (2j/d + gamma) / (1 + gamma)          in (0, 1) for gamma > 0; default gamma = 0.4
// and, at position p, the factor zeta_j^((p - center)/B) (B = scale_base, default 512). Queries are
// rotated and multiplied by it, keys rotated and divided by it:
//   xq(q, n) = D_n R_n q        xk(k, m) = D_m^-1 R_m k        D_p = diag over pairs of zeta_j^((p-c)/B)
// so that the score is RoPE's pair terms times a decay in the distance alone:
//   <xq(q, n), xk(k, m)> = sum_j zeta_j^((n - m)/B) * (pair j's term of q^T R_{m-n} k)
// The centre c cancels in every score; it only keeps the factors themselves in range (below). The
// rotation always uses the absolute position p; the pass-through coordinates [rotary_dim, head_dim)
// are neither rotated nor scaled.
//
// Centre conventions (c is an explicit argument of every call here, default 0 = the paper's formula):
//   torchscale (XPOS in torchscale/component/xpos_relative_position.py): the scale uses i - ceil(L/2)
//     for the rows i of the whole sequence so far (L = its length); in incremental decoding it keeps the
//     keys unscaled and re-applies xPos to all L keys at every step, so queries and keys always share the
//     current centre. Our c = ceil(L/2). (A variant file, component/xpos.py, builds a longer table,
//     max_pos = length + offset - min_pos, and keeps its last rows: other windows of positions.)
//   FlashAttention (flash_attn.layers.rotary.RotaryEmbedding with scale_base): the scale uses
//     i - floor(S/2), where S is the length of its cached cos/sin table (rebuilt only when a call needs
//     a longer one), computed as float32 pow. Our c = floor(S/2). Keys written to a KV cache by an
//     earlier call keep the centre that call's table had.
// Queries and keys that meet in a score must use the same centre: with c_q != c_k every pair term is
// off by the constant zeta_j^((c_k - c_q)/B), which differs per pair (not a common scalar).
//
// Range. zeta_0 = gamma/(1+gamma) is the smallest base, so the largest factor a call forms is
// zeta_0^(-|p - c|/B) (keys at p > c, queries at p < c). Checked entry points throw rotary::error when
// a factor (times the attention factor) exceeds the largest finite value of the storage type T:
// every input of magnitude >= 1 would come out infinite. max_offset() is the bound on |p - c| that
// guarantees this never happens. At the defaults (gamma 0.4, B 512, attention factor 1):
//   f32 / bf16  ~36,250      f64  ~290,000      f16  ~4,530
// so uncentred (c = 0) xPos in f32 overflows beyond position ~36k; centring at L/2 doubles the length
// that fits. An output can still overflow when |x| * factor exceeds T's range (data-dependent,
// unchecked). Factors below the smallest normal number lose relative precision and reach 0: that is
// not an error (those pairs' contributions are that small), but such outputs cannot be inverted.
//
// Exactness. Each cos/sin row is cos/sin(p*theta_j) * zeta_j^(+-(p-c)/B), formed in a wider type W
// (double for f32/f16/bf16, long double for f64) and rounded once to the compute type: cos/sin come
// from the exact angle reduction (detail/exact_angle.hpp) at the first token of every block of 32 and at
// any jump in positions, the factor from exp2(log2(zeta_j) * (p - c)/B) with p - c exact in integer
// arithmetic; consecutive tokens advance both by a recurrence in W. Rows are within about one ulp of
// the compute type at any int64 position (on platforms whose long double is double, f64 rows lose up to
// |log2 factor| * 2^-53 relative; where it is IEEE quad, as on AArch64, f64 rows are exact but slower).
// The rows then go through the same SIMD kernels as apply(), so outputs obey apply()'s bounds.
//
// Directions. Direction::inverse undoes the forward map exactly: un-scale and un-rotate, i.e.
// (D R)^-1 = R^T D^-1. The backward pass of a forward map is its adjoint (D R)^T = R^T D, which is the
// *other* role's inverse: the gradient of the query rotation is the key rotation's inverse
// (apply(xpos.keys(c), ..., Direction::inverse)) with the same positions and centre, and vice versa.
//
// Entry points: xpos.queries(center) and xpos.keys(center) are rotators, taken by every entry point of
// apply.hpp, checked and unchecked (batches, varlen, TensorMaps included):
//   rotary::apply(xpos.queries(c), x, positions, heads)             queries
//   rotary::apply(xpos.keys(c), in, out, positions, heads)          keys, out of place
//   rotary::apply_qk(xpos.queries(c), q, k, positions, q_heads, k_heads)   fused: k heads take the key role
// Checked: everything apply() checks, plus the centre (finite, |c| <= 2^62) and the factor range above
// (O(1) for contiguous positions, O(tokens) for arrays). Unchecked (rotary::unchecked::): none of it
// (ROTARY_ASSERT in debug builds); bad input, including an overflowing factor, is undefined behaviour.
#ifndef ROTARY_XPOS_HPP
#define ROTARY_XPOS_HPP

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "apply.hpp"
#include "config.hpp"
#include "detail/exact_angle.hpp"
#include "detail/format.hpp"
#include "detail/kernels/kernel_args.hpp"
#include "dtype.hpp"
#include "frequencies.hpp"
#include "parallel.hpp"
#include "positions.hpp"
#include "types.hpp"

namespace rotary {

template <class T>
class XPos;
template <class T>
class XPosView;
namespace detail {
template <class T>
struct XPosRows;
}  // namespace detail

template <class T>
class XPos {
  static_assert(is_storage_type_v<T>, "rotary stores f32, f64, f16 (Eigen::half) or bf16 (Eigen::bfloat16)");

 public:
  using compute_type = compute_t<T>;
  // The type rows are formed in before their one rounding to compute_type.
  using wide_type = std::conditional_t<std::is_same_v<compute_type, double>, long double, double>;

  static constexpr double kDefaultGamma = 0.4;
  static constexpr double kDefaultScaleBase = 512.0;

  // xPos over the frequencies `spec` defines. gamma > 0 and scale_base > 0, both finite.
  explicit XPos(const RotarySpec& spec, double gamma = kDefaultGamma, double scale_base = kDefaultScaleBase)
      : XPos(spec, compute_frequencies(spec), gamma, scale_base) {}

  // xPos over the spec's frequencies given explicitly: they must be compute_frequencies(spec) bit for
  // bit (scaled or custom ones go in spec.frequencies). Their attention factor a is folded into the
  // rows like a Rope's cache does (forward maps multiply by a, inverse ones divide by it).
  XPos(const RotarySpec& spec, const Frequencies& f, double gamma = kDefaultGamma,
       double scale_base = kDefaultScaleBase)
      : spec_(spec), freq_(f), gamma_(gamma), scale_base_(scale_base) {
    using detail::concat;
    spec_.validate();
    freq_.validate();
    if (freq_.rotary_dim() != spec_.effective_rotary_dim())
      throw error(concat("frequencies cover rotary_dim ", freq_.rotary_dim(), " but the spec says ",
                         spec_.effective_rotary_dim()));
    detail::check_frequencies_match(spec_, freq_.theta, freq_.attention_factor, "frequencies");
    if (!(gamma > 0.0) || !detail::finite(gamma))
      throw error(concat("xpos gamma (", gamma,
                         ") must be positive and finite (zeta_0 = gamma/(1+gamma) "
                         "must lie in (0, 1))"));
    if (!(scale_base > 0.0) || !detail::finite(scale_base))
      throw error(concat("xpos scale_base (", scale_base, ") must be positive and finite"));
    const std::int64_t h = pairs();
    const long double d = static_cast<long double>(rotary_dim());
    const long double g = gamma;
    zeta_.resize(static_cast<std::size_t>(h));
    log2_zeta_.resize(zeta_.size());
    zeta_step_.resize(zeta_.size());
    turns_.resize(zeta_.size());
    step_cos_.resize(zeta_.size());
    step_sin_.resize(zeta_.size());
    for (std::int64_t j = 0; j < h; ++j) {
      const auto u = static_cast<std::size_t>(j);
      // (2j/d + gamma)/(1 + gamma) = (2j + gamma d) / (d (1 + gamma)), in long double: one rounding.
      const long double z = (2.0L * static_cast<long double>(j) + g * d) / (d * (1.0L + g));
      zeta_[u] = static_cast<double>(z);
      log2_zeta_[u] = static_cast<wide_type>(std::log2(z));
      zeta_step_[u] = std::exp2(log2_zeta_[u] / static_cast<wide_type>(scale_base_));
      const double theta = freq_.theta[u];
      turns_[u] = detail::to_turns(theta);
      step_cos_[u] = std::cos(static_cast<wide_type>(theta));
      step_sin_[u] = std::sin(static_cast<wide_type>(theta));
    }
    log2_attention_ = std::log2(static_cast<wide_type>(freq_.attention_factor));
  }

  const RotarySpec& spec() const noexcept { return spec_; }
  const Frequencies& frequencies() const noexcept { return freq_; }
  std::int64_t head_dim() const noexcept { return spec_.head_dim; }
  std::int64_t rotary_dim() const noexcept { return freq_.rotary_dim(); }
  std::int64_t pairs() const noexcept { return rotary_dim() / 2; }
  Pairing pairing() const noexcept { return spec_.pairing; }
  double gamma() const noexcept { return gamma_; }
  double scale_base() const noexcept { return scale_base_; }
  // zeta_j, j < rotary_dim/2 (rounded to double; the rows use log2(zeta_j) from long double).
  const std::vector<double>& zeta() const noexcept { return zeta_; }

  // The query factor zeta_j^((position - center)/B) (keys get its reciprocal), without the attention
  // factor, in long double: for inspection and decay plots.
  long double scale(std::int64_t j, std::int64_t position, double center = 0.0) const {
    if (j < 0 || j >= pairs())
      throw error(detail::concat("xpos pair index j (", j, ") must be in [0, ", pairs(), ")"));
    check_center_or_throw(center);
    return std::exp2(static_cast<long double>(log2_zeta_[static_cast<std::size_t>(j)]) *
                     offset_of<long double>(position, center) / static_cast<long double>(scale_base_));
  }

  // The largest |position - center| for which every factor, in either role and direction, stays
  // within the finite range of T (see the header comment); checked calls beyond it may throw.
  // +infinity where zeta_0 rounds to 1 (gamma so large that nothing decays); -1 where the attention
  // factor alone overflows T, so that no offset fits.
  double max_offset() const noexcept {
    const long double room =
        static_cast<long double>(log2_limit()) - std::fabs(static_cast<long double>(log2_attention_));
    if (room < 0) return -1.0;
    const long double decay = -static_cast<long double>(log2_zeta_.front());  // > 0 unless zeta_0 is 1
    if (!(decay > 0)) return std::numeric_limits<double>::infinity();
    return static_cast<double>(static_cast<long double>(scale_base_) * room / decay);
  }

  // This xPos as a rotator (apply.hpp) for the query or the key role, with centre `center`: every
  // entry point takes it (apply, apply_strided, apply_qk, apply_qk_strided, apply_batch,
  // apply_varlen, ...; checked and unchecked). In fused q+k calls the key heads take the key role.
  XPosView<T> queries(double center = 0.0) const noexcept { return XPosView<T>(*this, true, center); }
  XPosView<T> keys(double center = 0.0) const noexcept { return XPosView<T>(*this, false, center); }

 private:
  using C = compute_type;
  using W = wide_type;
  enum class Role { query, key };
  // Tokens per block of rows: the recurrences never run longer than this before re-anchoring (their
  // drift, < 32 roundings in W, stays far below one ulp of C), and rows stay in L1.
  static constexpr std::int64_t kBlock = 32;
  static constexpr double kMaxCenter = 0x1p62;

  static double storage_max() noexcept {
    return static_cast<double>(static_cast<C>(Eigen::NumTraits<T>::highest()));
  }

  // log2 of the largest factor allowed: T's largest finite value, less a margin of 2^-20 in the
  // exponent so that rounding the factor in W and then to C never crosses into infinity.
  static W log2_limit() noexcept {
    return std::log2(static_cast<W>(storage_max())) - static_cast<W>(0x1p-20);
  }

  static std::string check_center(double center) {
    if (!detail::finite(center) || std::fabs(center) > kMaxCenter)
      return detail::concat("xpos center (", center, ") must be finite with |center| <= 2^62");
    return {};
  }
  static void check_center_or_throw(double center) {
    const std::string m = check_center(center);
    if (!m.empty()) throw error(m);
  }

  // position - center, exact in integer arithmetic for the integer part of the centre.
  template <class U>
  static U offset_of(std::int64_t position, double center) noexcept {
    const double whole = std::floor(center);
    const auto ci = static_cast<std::int64_t>(whole);
    const U frac = static_cast<U>(center - whole);  // exact: |center| <= 2^62
    // position - ci in int64 where it fits (either sign of ci: scale() takes any position)
    if (ci >= 0 ? position >= std::numeric_limits<std::int64_t>::min() + ci
                : position <= std::numeric_limits<std::int64_t>::max() + ci)
      return static_cast<U>(position - ci) - frac;
    return static_cast<U>(position) - static_cast<U>(center);  // cannot be in range anyway
  }

  // Exponent signs of a call: a role's rows carry a^delta * zeta^(sigma * (p - c)/B).
  static int sigma(Role r, Direction dir) noexcept {
    return (r == Role::query) == (dir == Direction::forward) ? 1 : -1;
  }
  static int delta(Direction dir) noexcept { return dir == Direction::forward ? 1 : -1; }

  // log2 of the largest factor (over pairs) at offset `off` for exponent signs (s, dl).
  W log2_max_factor(W off, int s, int dl) const noexcept {
    const W b = static_cast<W>(scale_base_);
    const W lo = static_cast<W>(s) * off * log2_zeta_.front() / b;
    const W hi = static_cast<W>(s) * off * log2_zeta_.back() / b;
    return static_cast<W>(dl) * log2_attention_ + std::max(lo, hi);
  }

  // The factor range of a call (positions already validated: counts and >= 0).
  std::string check_range(const Positions& p, std::int64_t tokens, double center, Direction dir, bool query,
                          bool key) const {
    if (tokens == 0) return {};
    std::int64_t lo = 0;
    std::int64_t hi = 0;
    if (p.is_contiguous()) {
      lo = p.start();
      hi = p.start() + (tokens - 1);
    } else {
      lo = hi = p[0];
      for (std::int64_t t = 1; t < tokens; ++t) {
        lo = std::min(lo, p[t]);
        hi = std::max(hi, p[t]);
      }
    }
    const W limit = log2_limit();
    for (const Role r : {Role::query, Role::key}) {
      if ((r == Role::query && !query) || (r == Role::key && !key)) continue;
      for (const std::int64_t pos : {lo, hi}) {
        const W l2 = log2_max_factor(offset_of<W>(pos, center), sigma(r, dir), delta(dir));
        if (!(l2 <= limit))
          return detail::concat("xpos ", r == Role::query ? "query" : "key", " scale factor 2^",
                                static_cast<double>(l2), " at position ", pos, " (center ", center,
                                ") overflows ", dtype_name<T>(), " (max 2^", static_cast<double>(limit),
                                "): keep |position - center| <= max_offset() = ", max_offset(), " (gamma ",
                                gamma_, ", scale_base ", scale_base_, ")");
      }
    }
    return {};
  }

  // Rows of tokens [t0, t1) for the roles asked (null: not needed), in the cache layout, token t's at
  // (t - from) rows from the start. The state is anchored at token `from` (<= t0, t1 - from <= kBlock)
  // and advanced from there: with `from` the start of the aligned block holding t0, every token's
  // row is the same bits however the tokens are split over threads. state: 3 * pairs() values of W.
  void fill(const Positions& p, std::int64_t from, std::int64_t t0, std::int64_t t1, double center,
            Direction dir, C* q_rows, C* k_rows, W* state) const noexcept {
    const std::int64_t h = pairs();
    W* c = state;
    W* s = state + h;
    W* f = state + 2 * h;  // zeta_j^((p - c)/B)
    const W b = static_cast<W>(scale_base_);
    const W a = std::exp2(static_cast<W>(delta(dir)) * log2_attention_);
    const bool q_up = sigma(Role::query, dir) > 0;  // the query rows use a*f, the key rows a/f (else swapped)
    std::int64_t prev = 0;
    for (std::int64_t t = from; t < t1; ++t) {
      const std::int64_t m = p[t];
      if (t == from || m - 1 != prev) {  // m >= 0: m - 1 cannot overflow
        const W off = offset_of<W>(m, center);
        for (std::int64_t j = 0; j < h; ++j) {
          const auto u = static_cast<std::size_t>(j);
          double sd = 0.0;
          double cd = 0.0;
          detail::exact_sincos(m, turns_[u], sd, cd);
          c[j] = cd;
          s[j] = sd;
          f[j] = std::exp2(log2_zeta_[u] * off / b);
        }
      } else {
        for (std::int64_t j = 0; j < h; ++j) {
          const auto u = static_cast<std::size_t>(j);
          const W nc = c[j] * step_cos_[u] - s[j] * step_sin_[u];
          const W ns = s[j] * step_cos_[u] + c[j] * step_sin_[u];
          c[j] = nc;
          s[j] = ns;
          f[j] *= zeta_step_[u];
        }
      }
      prev = m;
      if (t < t0) continue;
      const std::int64_t r = (t - from) * 2 * h;
      // Only the factor a row needs: the other may be 0 or inf where this one is in range.
      if (q_rows != nullptr) write_row(c, s, f, h, a, q_up, q_rows + r);
      if (k_rows != nullptr) write_row(c, s, f, h, a, !q_up, k_rows + r);
    }
  }

  // One row of rotary_dim values: cos, sin times a*f (up) or a/f.
  static void write_row(const W* c, const W* s, const W* f, std::int64_t h, W a, bool up, C* row) noexcept {
    if (up) {
      for (std::int64_t j = 0; j < h; ++j) {
        const W g = a * f[j];
        row[j] = static_cast<C>(c[j] * g);
        row[h + j] = static_cast<C>(s[j] * g);
      }
    } else {
      for (std::int64_t j = 0; j < h; ++j) {
        const W g = a / f[j];
        row[j] = static_cast<C>(c[j] * g);
        row[h + j] = static_cast<C>(s[j] * g);
      }
    }
  }

  template <class>
  friend struct detail::XPosRows;

  RotarySpec spec_;
  Frequencies freq_;
  double gamma_ = kDefaultGamma;
  double scale_base_ = kDefaultScaleBase;
  std::vector<double> zeta_;
  std::vector<W> log2_zeta_;
  std::vector<W> zeta_step_;  // zeta_j^(1/B): the factor's step between consecutive positions
  std::vector<detail::Turns> turns_;
  std::vector<W> step_cos_;  // e^{i theta_j}: the rotation's step
  std::vector<W> step_sin_;
  W log2_attention_ = 0;
};

// An XPos in one role (queries or keys) with one centre: a rotator (apply.hpp). XPos::queries() and
// XPos::keys() make them; the XPos must outlive the view.
template <class T>
class XPosView {
 public:
  XPosView(const XPos<T>& xpos, bool queries, double center) noexcept
      : xpos_(&xpos), queries_(queries), center_(center) {}
  const XPos<T>& xpos() const noexcept { return *xpos_; }
  bool queries() const noexcept { return queries_; }
  double center() const noexcept { return center_; }
  std::int64_t head_dim() const noexcept { return xpos_->head_dim(); }
  std::int64_t rotary_dim() const noexcept { return xpos_->rotary_dim(); }
  Pairing pairing() const noexcept { return xpos_->pairing(); }

 private:
  const XPos<T>* xpos_;
  bool queries_;
  double center_;
};

namespace detail {

// The driver's row source of an xPos call: per block, the rotation times the role's decay factors;
// a query view's fused keys get key rows of their own.
template <class T>
struct XPosRows {
  using X = XPos<T>;
  using C = typename X::compute_type;
  static constexpr bool kTable = false;
  static constexpr std::int64_t kBlock = X::kBlock;
  using Scratch = std::vector<typename X::wide_type>;
  const X* xpos;
  Positions positions;
  double center;
  Direction dir;
  bool queries;

  std::string check(std::int64_t tokens, bool fused) const {
    std::string m = check_positions(positions, tokens, static_cast<const CosSinCache<C>*>(nullptr));
    if (m.empty()) m = X::check_center(center);
    if (m.empty()) m = xpos->check_range(positions, tokens, center, dir, queries, !queries || fused);
    return m;
  }
  detail::ReadExtents reads(std::int64_t tokens) const noexcept { return detail::positions_read(positions, tokens); }
  Scratch scratch() const { return Scratch(static_cast<std::size_t>(3 * xpos->pairs())); }
  bool separate_key_rows() const noexcept { return queries; }
  void fill(std::int64_t from, std::int64_t t0, std::int64_t t1, C* rows, C* key_rows,
            Scratch& scratch) const noexcept {
    xpos->fill(positions, from, t0, t1, center, dir, queries ? rows : nullptr, queries ? key_rows : rows,
               scratch.data());
  }
};

}  // namespace detail

template <class T>
struct rotator_traits<XPosView<T>> {
  using value_type = T;
  using positions_type = Positions;
  template <class F>
  static void with_rows(const XPosView<T>& v, const Positions& p, Direction dir, F&& f) {
    f(detail::XPosRows<T>{&v.xpos(), p, v.center(), dir, v.queries()});
  }
};

}  // namespace rotary

#endif  // ROTARY_XPOS_HPP
