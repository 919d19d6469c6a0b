// xPos: every output against an independent long double reference (rotation by the long double angle
// m*theta_j, decay by powl(zeta_j, (m - c)/B) with zeta_j = (2j/d + gamma)/(1 + gamma) written out
// here), the score identity <xq(q, n), xk(k, m)> = sum_j zeta_j^((n-m)/B) (pair j of q^T R_{m-n} k),
// centring invariance, inverse and adjoint, large positions, every dtype, and the errors.
//
// Error bound per output coordinate (pair (x0, x1), factor F = zeta^(+-(m-c)/B)):
//   |y - y_ref| <= (6 u_C + u_T + angle_err) * F * (|x0| + |x1|) + tiny_T
// u_C = unit roundoff of the compute type (2^-24 float, 2^-53 double): the row's one rounding (1/2 ulp
// = 1 u), the kernel's product and fma (2 ulp = 4 u, apply()'s bound), 1 u spare for the anchor and
// recurrence in the wide type. u_T = the storage type's unit roundoff (f16 2^-11, bf16 2^-8; 0 for
// f32/f64: there the kernel's rounding is the storage rounding). angle_err = the reference's own
// error: (long double)m * theta is rounded to 64 bits, |error| <= 2^-63 * m * theta + 2^-63.
// tiny_T covers subnormal results (factors near the range's ends): a few subnormal spacings of C,
// plus f16's subnormal spacing / bf16's flush-to-zero threshold.
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "support.hpp"

namespace {

using rotary::bf16;
using rotary::Direction;
using rotary::f16;
using rotary::Pairing;
using rotary::Positions;
using rotary::RowMatrix;
using rotary::XPos;
using rotary::reference::pair_first;
using rotary::reference::pair_second;
using rotary_test::random_rows;
using LD = long double;

template <class T>
double storage_unit() {
  if constexpr (std::is_same_v<T, f16>) return 0x1p-11;
  if constexpr (std::is_same_v<T, bf16>) return 0x1p-8;
  return 0.0;
}
template <class T>
double compute_unit() {
  return std::is_same_v<T, double> ? 0x1p-53 : 0x1p-24;
}
template <class T>
double tiny() {
  double t = std::is_same_v<T, double> ? 8 * std::numeric_limits<double>::denorm_min()
                                       : 8.0 * static_cast<double>(std::numeric_limits<float>::denorm_min());
  if constexpr (std::is_same_v<T, f16>) t += 0x1p-24;
  if constexpr (std::is_same_v<T, bf16>) t += 0x1p-125;
  return t;
}

template <class T>
LD to_ld(T v) {
  return static_cast<LD>(static_cast<double>(static_cast<rotary::compute_t<T>>(v)));
}

// The setting of one xPos, for the reference.
struct Setting {
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;
  Pairing pairing = Pairing::half_split;
  double base = 10000.0;
  double gamma = 0.4;
  double scale_base = 512.0;
  rotary::RotarySpec spec() const { return rotary::RotarySpec(head_dim, pairing, base, rotary_dim); }
};

LD zeta_ref(const Setting& s, std::int64_t j) {
  const LD d = static_cast<LD>(s.rotary_dim);
  return (2.0L * static_cast<LD>(j) / d + static_cast<LD>(s.gamma)) / (1.0L + static_cast<LD>(s.gamma));
}

// zeta_j^((m - c)/B): the query's forward factor.
LD query_factor(const Setting& s, std::int64_t j, std::int64_t m, double center) {
  return std::pow(zeta_ref(s, j),
                  (static_cast<LD>(m) - static_cast<LD>(center)) / static_cast<LD>(s.scale_base));
}

// The factor a role's forward/inverse map applies to pair j.
LD factor_of(const Setting& s, std::int64_t j, std::int64_t m, double center, bool query, Direction dir) {
  const LD f = query_factor(s, j, m, center);
  return (query == (dir == Direction::forward)) ? f : 1.0L / f;
}

struct RefRow {
  std::vector<LD> y;
  std::vector<LD> bound;  // per coordinate
};

// One head: reference output and error bound. cos/sin of the angle come from `cs` if given (pairs
// values each, as a cache row), else from the long double angle.
template <class T>
RefRow reference_row(const Setting& s, const std::vector<double>& theta, const T* x, std::int64_t m,
                     double center, bool query, Direction dir, const double* cache_row = nullptr,
                     double cache_err = 0.0) {
  const std::int64_t h = s.rotary_dim / 2;
  RefRow r;
  r.y.resize(static_cast<std::size_t>(s.head_dim));
  r.bound.assign(r.y.size(), 0.0L);
  for (std::int64_t i = 0; i < s.head_dim; ++i) r.y[static_cast<std::size_t>(i)] = to_ld(x[i]);
  const LD sign = dir == Direction::forward ? 1.0L : -1.0L;
  for (std::int64_t j = 0; j < h; ++j) {
    const std::int64_t ia = pair_first(s.pairing, j, h);
    const std::int64_t ib = pair_second(s.pairing, j, h);
    const LD x0 = to_ld(x[ia]);
    const LD x1 = to_ld(x[ib]);
    LD c = 0;
    LD sn = 0;
    LD angle_err = 0;
    const LD th = static_cast<LD>(theta[static_cast<std::size_t>(j)]);
    if (cache_row != nullptr) {
      c = cache_row[j];
      sn = sign * cache_row[h + j];
      angle_err = cache_err;
    } else {
      const LD angle = sign * static_cast<LD>(m) * th;
      c = std::cos(angle);
      sn = std::sin(angle);
      angle_err = 0x1p-63L * static_cast<LD>(m) * th + 0x1p-63L;
    }
    const LD f = factor_of(s, j, m, center, query, dir);
    const LD y0 = f * (c * x0 - sn * x1);
    const LD y1 = f * (sn * x0 + c * x1);
    r.y[static_cast<std::size_t>(ia)] = y0;
    r.y[static_cast<std::size_t>(ib)] = y1;
    const LD eps = 6.0L * compute_unit<T>() + storage_unit<T>() + angle_err;
    const LD b = eps * f * (std::fabs(x0) + std::fabs(x1)) + tiny<T>();
    r.bound[static_cast<std::size_t>(ia)] = b;
    r.bound[static_cast<std::size_t>(ib)] = b;
  }
  return r;
}

// The query's map or the key's, with the same arguments.
template <class T, class... Args>
void apply_role(const XPos<T>& xpos, bool query, double center, Args&&... args) {
  rotary::apply(query ? xpos.queries(center) : xpos.keys(center), std::forward<Args>(args)...);
}

// Positions for n tokens whose offsets from `center` stay within +-span (and >= 0).
std::vector<std::int64_t> positions_around(std::size_t n, double center, double span, std::mt19937_64& rng) {
  const auto lo = static_cast<std::int64_t>(std::max(0.0, std::ceil(center - span)));
  const auto hi = static_cast<std::int64_t>(std::floor(center + span));
  std::uniform_int_distribution<std::int64_t> d(lo, hi);
  std::vector<std::int64_t> v(n);
  for (auto& p : v) p = d(rng);
  if (n > 0) v[0] = lo;
  if (n > 1) v[1] = hi;
  return v;
}

template <class T>
class XPosTyped : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, double, f16, bf16>;
TYPED_TEST_SUITE(XPosTyped, StorageTypes, );

// Every role, direction, pairing, partial rotary, centre and position kind against the reference;
// pass-through coordinates bit-identical.
TYPED_TEST(XPosTyped, MatchesLongDoubleReference) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed());
  double worst = 0.0;  // |error| / bound
  long checked = 0;
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    for (const std::int64_t head_dim : {2, 8, 18, 64, 130}) {
      for (const double fraction : {1.0, 0.5}) {
        Setting s;
        s.head_dim = head_dim;
        s.rotary_dim = rotary_test::rotary_dim_for(head_dim, fraction);
        s.pairing = pairing;
        s.gamma = head_dim == 18 ? 1.5 : 0.4;
        s.scale_base = head_dim == 64 ? 128.0 : 512.0;
        const XPos<T> xpos(s.spec(), s.gamma, s.scale_base);
        const auto theta = rotary::compute_frequencies(s.spec()).theta;
        const double span = 0.8 * xpos.max_offset();  // f16: |y| <= 2^(0.8*16) * |x|_1 stays finite
        for (const double center : {0.0, 1000.5, 37.0, 2147483000.0}) {
          const auto pos = positions_around(9, center, span, rng);
          const std::int64_t heads = 2;
          const auto tokens = static_cast<std::int64_t>(pos.size());
          const RowMatrix<T> x = random_rows<T>(tokens * heads, head_dim, rng);
          for (const bool query : {true, false}) {
            for (const Direction dir : {Direction::forward, Direction::inverse}) {
              RowMatrix<T> y(x.rows(), x.cols());
              apply_role(xpos, query, center, x, y, Positions(pos), heads, dir);
              for (std::int64_t t = 0; t < tokens; ++t)
                for (std::int64_t hd = 0; hd < heads; ++hd) {
                  const Eigen::Index row = t * heads + hd;
                  const RefRow r = reference_row<T>(s, theta, x.row(row).data(),
                                                    pos[static_cast<std::size_t>(t)], center, query, dir);
                  for (std::int64_t i = 0; i < head_dim; ++i) {
                    const LD got = to_ld(y(row, i));
                    const LD err = std::fabs(got - r.y[static_cast<std::size_t>(i)]);
                    if (i >= s.rotary_dim) {
                      ASSERT_EQ(std::memcmp(&y(row, i), &x(row, i), sizeof(T)), 0) << "pass-through " << i;
                      continue;
                    }
                    const LD b = r.bound[static_cast<std::size_t>(i)];
                    worst = std::max(worst, static_cast<double>(err / b));
                    ++checked;
                    ASSERT_LE(err, b)
                        << rotary::dtype_name<T>() << " " << rotary::to_string(pairing) << " head_dim "
                        << head_dim << " rotary_dim " << s.rotary_dim << (query ? " query" : " key")
                        << (dir == Direction::forward ? " forward" : " inverse") << " position "
                        << pos[static_cast<std::size_t>(t)] << " center " << center << " coord " << i
                        << " got " << static_cast<double>(got) << " want "
                        << static_cast<double>(r.y[static_cast<std::size_t>(i)]) << " "
                        << rotary_test::seed_note();
                  }
                }
            }
          }
        }
      }
    }
  }
  std::printf("[ xpos %s ] %ld coordinates, max |error| / bound = %.3f\n", rotary::dtype_name<T>().data(),
              checked, worst);
}

// Contiguous positions exercise the recurrence (31 steps between anchors): same reference.
TYPED_TEST(XPosTyped, ContiguousRunsMatchReference) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed() + 1);
  Setting s;
  s.head_dim = 64;
  s.rotary_dim = 64;
  const XPos<T> xpos(s.spec());
  const auto theta = rotary::compute_frequencies(s.spec()).theta;
  double worst = 0.0;
  for (const std::int64_t start : {std::int64_t{0}, std::int64_t{100000}, std::int64_t{2000000000}}) {
    const std::int64_t tokens = 100;
    const double center = static_cast<double>(start) + 40.0;
    const RowMatrix<T> x = random_rows<T>(tokens, s.head_dim, rng);
    for (const bool query : {true, false}) {
      RowMatrix<T> y = x;
      apply_role(xpos, query, center, y, Positions::contiguous(start), 1);
      for (std::int64_t t = 0; t < tokens; ++t) {
        const RefRow r =
            reference_row<T>(s, theta, x.row(t).data(), start + t, center, query, Direction::forward);
        for (std::int64_t i = 0; i < s.head_dim; ++i) {
          const LD err = std::fabs(to_ld(y(t, i)) - r.y[static_cast<std::size_t>(i)]);
          worst = std::max(worst, static_cast<double>(err / r.bound[static_cast<std::size_t>(i)]));
          ASSERT_LE(err, r.bound[static_cast<std::size_t>(i)])
              << "token " << t << " start " << start << " coord " << i << " " << rotary_test::seed_note();
        }
      }
    }
  }
  std::printf("[ xpos %s contiguous ] max |error| / bound = %.3f\n", rotary::dtype_name<T>().data(), worst);
}

// <xq(q, n), xk(k, m)> computed from the outputs vs sum_j zeta_j^((n-m)/B) (pair j of q^T R_{m-n} k)
// + the pass-through dot product, all in long double. Bound: each output coordinate obeys
// |xq_i - yq_i| <= eq = e Fq |q_pair|_1 + tiny with |yq_i| <= Fq |q_pair|_1 (same for k), so a
// product is off by at most eq |yk_i| + ek |yq_i| + eq ek; e adds the reference angle's own error.
template <class T>
void check_scores(const Setting& s, const RowMatrix<T>& q, const RowMatrix<T>& k, const RowMatrix<T>& xq,
                  const RowMatrix<T>& xk, const std::vector<std::int64_t>& pos, double center,
                  double& worst) {
  const std::int64_t h = s.rotary_dim / 2;
  const auto theta = rotary::compute_frequencies(s.spec()).theta;
  const auto tokens = static_cast<std::int64_t>(pos.size());
  const LD eps = 6.0L * compute_unit<T>() + storage_unit<T>();
  for (std::int64_t n = 0; n < tokens; ++n)
    for (std::int64_t m = 0; m < tokens; ++m) {
      const std::int64_t pn = pos[static_cast<std::size_t>(n)];
      const std::int64_t pm = pos[static_cast<std::size_t>(m)];
      LD got = 0;
      for (std::int64_t i = 0; i < s.head_dim; ++i) got += to_ld(xq(n, i)) * to_ld(xk(m, i));
      LD want = 0;
      LD bound = 0;
      LD mag = 0;  // sum of |terms| on both sides: the long double sums' own rounding
      for (std::int64_t i = 0; i < s.head_dim; ++i) mag += std::fabs(to_ld(xq(n, i)) * to_ld(xk(m, i)));
      for (std::int64_t i = s.rotary_dim; i < s.head_dim; ++i)
        mag += std::fabs(to_ld(q(n, i)) * to_ld(k(m, i)));
      for (std::int64_t j = 0; j < h; ++j) {
        const std::int64_t a = pair_first(s.pairing, j, h);
        const std::int64_t b = pair_second(s.pairing, j, h);
        const LD qa = to_ld(q(n, a));
        const LD qb = to_ld(q(n, b));
        const LD ka = to_ld(k(m, a));
        const LD kb = to_ld(k(m, b));
        const LD th = static_cast<LD>(theta[static_cast<std::size_t>(j)]);
        const LD angle = static_cast<LD>(pm - pn) * th;
        const LD c = std::cos(angle);
        const LD sn = std::sin(angle);
        const LD decay = std::pow(zeta_ref(s, j), static_cast<LD>(pn - pm) / static_cast<LD>(s.scale_base));
        want += decay * (qa * (c * ka - sn * kb) + qb * (sn * ka + c * kb));
        const LD e = eps + 0x1p-63L * std::fabs(static_cast<LD>(pm - pn)) * th + 0x1p-63L;
        const LD fq = factor_of(s, j, pn, center, true, Direction::forward);
        const LD fk = factor_of(s, j, pm, center, false, Direction::forward);
        const LD ql = std::fabs(qa) + std::fabs(qb);
        const LD kl = std::fabs(ka) + std::fabs(kb);
        const LD eq = e * fq * ql + tiny<T>();
        const LD ek = e * fk * kl + tiny<T>();
        bound += 2.0L * (eq * fk * kl + ek * fq * ql + eq * ek);
        mag += decay * ql * kl;
      }
      bound += 0x1p-57L * mag;  // <= 2 * head_dim roundings of 2^-64 each, on each side
      for (std::int64_t i = s.rotary_dim; i < s.head_dim; ++i) want += to_ld(q(n, i)) * to_ld(k(m, i));
      const LD err = std::fabs(got - want);
      worst = std::max(worst, static_cast<double>(err / bound));
      ASSERT_LE(err, bound) << "n " << n << " (position " << pn << ") m " << m << " (position " << pm
                            << ") got " << static_cast<double>(got) << " want " << static_cast<double>(want)
                            << " " << rotary_test::seed_note();
    }
}

// The score identity and centring invariance, through the fused GQA entry point.
TYPED_TEST(XPosTyped, ScoreIdentityAndCentringInvariance) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed() + 2);
  double worst = 0.0;
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    Setting s;
    s.head_dim = 40;
    s.rotary_dim = 32;
    s.pairing = pairing;
    s.scale_base = 64.0;  // strong decay: the identity's factor varies a lot over the positions
    const XPos<T> xpos(s.spec(), s.gamma, s.scale_base);
    // Tokens inside one window of max_offset around every centre tried.
    const double span = 0.4 * xpos.max_offset();  // |p - c| <= 2 span: f16 outputs stay finite
    const auto pos = positions_around(24, span, span, rng);
    const auto tokens = static_cast<std::int64_t>(pos.size());
    const RowMatrix<T> q = random_rows<T>(tokens, s.head_dim, rng);
    const RowMatrix<T> k = random_rows<T>(tokens, s.head_dim, rng);
    std::vector<RowMatrix<T>> by_center;
    for (const double center : {span, std::ceil(span / 2), 0.25 * span + 0.5}) {
      // GQA shape: 2 query heads per key head; check head 0 of each token (the others are the same math).
      RowMatrix<T> q2(2 * tokens, s.head_dim);
      for (std::int64_t t = 0; t < tokens; ++t) q2.row(2 * t) = q2.row(2 * t + 1) = q.row(t);
      RowMatrix<T> kk = k;
      rotary::apply_qk(xpos.queries(center), q2, kk, Positions(pos), 2, 1);
      RowMatrix<T> xq(tokens, s.head_dim);
      for (std::int64_t t = 0; t < tokens; ++t) {
        xq.row(t) = q2.row(2 * t);
        ASSERT_EQ(std::memcmp(q2.row(2 * t).data(), q2.row(2 * t + 1).data(), sizeof(T) * s.head_dim), 0);
      }
      check_scores<T>(s, q, k, xq, kk, pos, center, worst);
      by_center.push_back(xq);
    }
    // The centre does change the vectors (else the invariance above would be vacuous).
    double moved = 0.0;
    for (Eigen::Index i = 0; i < by_center[0].size(); ++i)
      moved = std::max(moved, std::fabs(static_cast<double>(to_ld(by_center[0].data()[i]) -
                                                            to_ld(by_center[1].data()[i]))));
    EXPECT_GT(moved, 0.1);
  }
  std::printf("[ xpos %s scores ] max |error| / bound = %.4f\n", rotary::dtype_name<T>().data(), worst);
}

// Queries and keys with different centres: pair j's term is off by zeta_j^((c_k - c_q)/B), as the
// header documents (one pair nonzero at a time, so the ratio isolates it).
TEST(XPos, MismatchedCentresScalePairTermsByZeta) {
  Setting s;
  s.head_dim = 16;
  s.rotary_dim = 16;
  s.scale_base = 256.0;
  const XPos<double> xpos(s.spec(), s.gamma, s.scale_base);
  const std::int64_t h = 8;
  const double cq = 100.0;
  const double ck = 300.0;
  for (std::int64_t j = 0; j < h; ++j) {
    RowMatrix<double> q = RowMatrix<double>::Zero(1, 16);
    RowMatrix<double> k = RowMatrix<double>::Zero(1, 16);
    q(0, j) = 1.0;
    k(0, j) = 0.75;
    RowMatrix<double> q_same = q;
    RowMatrix<double> k_same = k;
    RowMatrix<double> q_diff = q;
    RowMatrix<double> k_diff = k;
    const std::vector<std::int64_t> pq = {500};
    const std::vector<std::int64_t> pk = {420};
    rotary::apply(xpos.queries(cq), q_same, Positions(pq), 1);
    rotary::apply(xpos.keys(cq), k_same, Positions(pk), 1);
    rotary::apply(xpos.queries(cq), q_diff, Positions(pq), 1);
    rotary::apply(xpos.keys(ck), k_diff, Positions(pk), 1);
    const LD same = static_cast<LD>(q_same.row(0).dot(k_same.row(0)));
    const LD diff = static_cast<LD>(q_diff.row(0).dot(k_diff.row(0)));
    const LD want = std::pow(zeta_ref(s, j), static_cast<LD>(ck - cq) / static_cast<LD>(s.scale_base));
    EXPECT_NEAR(static_cast<double>(diff / same), static_cast<double>(want),
                1e-13 * static_cast<double>(want))
        << j;
  }
}

// inverse(forward(x)) == x, for both roles; and the backward pass: apply_k(., inverse) is the adjoint
// of apply_q (and vice versa): <apply_q(x), y> == <x, apply_k(y, inverse)>.
TYPED_TEST(XPosTyped, InverseAndAdjoint) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed() + 3);
  Setting s;
  s.head_dim = 34;
  s.rotary_dim = 30;
  s.pairing = Pairing::interleaved;
  const XPos<T> xpos(s.spec());
  const double center = 5000.0;
  const auto pos = positions_around(20, center, 0.8 * xpos.max_offset(), rng);
  const auto tokens = static_cast<std::int64_t>(pos.size());
  const std::int64_t heads = 3;
  const RowMatrix<T> x = random_rows<T>(tokens * heads, s.head_dim, rng);
  const RowMatrix<T> yv = random_rows<T>(tokens * heads, s.head_dim, rng);
  // Round trip: the factor cancels; each pass adds its relative error (f16/bf16: the stored rounding).
  const double eps = 2.0 * (6.0 * compute_unit<T>() + storage_unit<T>());
  double worst = 0.0;
  for (const bool query : {true, false}) {
    RowMatrix<T> z = x;
    apply_role(xpos, query, center, z, Positions(pos), heads);
    apply_role(xpos, query, center, z, Positions(pos), heads, Direction::inverse);
    const std::int64_t h = s.rotary_dim / 2;
    for (Eigen::Index r = 0; r < x.rows(); ++r)
      for (std::int64_t j = 0; j < h; ++j) {
        const std::int64_t a = pair_first(s.pairing, j, h);
        const std::int64_t b = pair_second(s.pairing, j, h);
        // A factor below the normal range rounds the intermediate absolutely: allow tiny / F.
        const LD f =
            factor_of(s, j, pos[static_cast<std::size_t>(r / heads)], center, query, Direction::forward);
        const LD bound = eps * (std::fabs(to_ld(x(r, a))) + std::fabs(to_ld(x(r, b)))) + 2.0L * tiny<T>() / f;
        for (const std::int64_t i : {a, b}) {
          const LD err = std::fabs(to_ld(z(r, i)) - to_ld(x(r, i)));
          worst = std::max(worst, static_cast<double>(err / bound));
          ASSERT_LE(err, bound) << (query ? "query" : "key") << " row " << r << " coord " << i;
        }
      }
  }
  // Adjoint, in long double. Per pair, lhs is off by <= e1 F |x|_1 |y|_1 (+ tiny |y|_1) and rhs by the
  // same with the roles of x and y swapped, F being the forward factor (the other role's inverse
  // applies the same F).
  const double e1 = 6.0 * compute_unit<T>() + storage_unit<T>();
  for (const bool query : {true, false}) {
    RowMatrix<T> fx = x;
    RowMatrix<T> gy = yv;
    apply_role(xpos, query, center, fx, Positions(pos), heads);
    apply_role(xpos, !query, center, gy, Positions(pos), heads, Direction::inverse);  // the other role
    const std::int64_t h = s.rotary_dim / 2;
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
      LD lhs = 0;
      LD rhs = 0;
      for (std::int64_t i = 0; i < s.head_dim; ++i) {
        lhs += to_ld(fx(r, i)) * to_ld(yv(r, i));
        rhs += to_ld(x(r, i)) * to_ld(gy(r, i));
      }
      LD bound = 0;
      for (std::int64_t j = 0; j < h; ++j) {
        const std::int64_t a = pair_first(s.pairing, j, h);
        const std::int64_t b = pair_second(s.pairing, j, h);
        const LD xl = std::fabs(to_ld(x(r, a))) + std::fabs(to_ld(x(r, b)));
        const LD yl = std::fabs(to_ld(yv(r, a))) + std::fabs(to_ld(yv(r, b)));
        const LD f =
            factor_of(s, j, pos[static_cast<std::size_t>(r / heads)], center, query, Direction::forward);
        bound += 2.0L * (e1 * f * xl * yl) + 2.0L * tiny<T>() * (xl + yl);
      }
      EXPECT_LE(std::fabs(lhs - rhs), bound) << (query ? "query" : "key") << " row " << r;
    }
  }
  std::printf("[ xpos %s round trip ] max |error| / bound = %.3f\n", rotary::dtype_name<T>().data(), worst);
}

// Positions up to 2^62 (centre nearby): the reference takes cos/sin from the exact cache
// (CosSinCache::for_positions, each entry within 1/2 ulp of the exact value, test_cache) and the factor
// from powl, so the long double angle's own error does not limit the check.
template <class T>
void check_large_positions() {
  using C = rotary::compute_t<T>;
  std::mt19937_64 rng(rotary_test::seed() + 4);
  Setting s;
  s.head_dim = 64;
  s.rotary_dim = 48;
  for (const Pairing pairing : {Pairing::half_split, Pairing::interleaved}) {
    s.pairing = pairing;
    const XPos<T> xpos(s.spec());
    const auto freqs = rotary::compute_frequencies(s.spec());
    double worst = 0.0;
    // Centres exact in double (|center| <= 2^62 is the documented limit).
    for (const std::int64_t base_pos :
         {std::int64_t{1} << 31, std::int64_t{1} << 40, (std::int64_t{1} << 61) + 12288}) {
      const double center = static_cast<double>(base_pos);
      const double span = 0.8 * xpos.max_offset();
      std::vector<std::int64_t> pos;
      for (const double off : {-span, -1000.0, -1.0, 0.0, 1.0, 999.0, span}) {
        pos.push_back(static_cast<std::int64_t>(center) + static_cast<std::int64_t>(off));
      }
      for (std::int64_t t = 0; t < 40; ++t)
        pos.push_back(static_cast<std::int64_t>(center) - 20 + t);  // a run
      const auto cache = rotary::CosSinCache<C>::for_positions(freqs, pos);
      const auto tokens = static_cast<std::int64_t>(pos.size());
      const RowMatrix<T> x = random_rows<T>(tokens, s.head_dim, rng);
      for (const bool query : {true, false}) {
        RowMatrix<T> y(x.rows(), x.cols());
        apply_role(xpos, query, center, x, y, Positions(pos), 1);
        for (std::int64_t t = 0; t < tokens; ++t) {
          std::vector<double> cs_cos;
          std::vector<double> cs_sin;
          rotary_test::cache_row(cache, pos[static_cast<std::size_t>(t)], cs_cos, cs_sin);
          std::vector<double> row(cs_cos);
          row.insert(row.end(), cs_sin.begin(), cs_sin.end());
          const RefRow r = reference_row<T>(s, freqs.theta, x.row(t).data(), pos[static_cast<std::size_t>(t)],
                                            center, query, Direction::forward, row.data(), compute_unit<T>());
          for (std::int64_t i = 0; i < s.rotary_dim; ++i) {
            const LD err = std::fabs(to_ld(y(t, i)) - r.y[static_cast<std::size_t>(i)]);
            worst = std::max(worst, static_cast<double>(err / r.bound[static_cast<std::size_t>(i)]));
            ASSERT_LE(err, r.bound[static_cast<std::size_t>(i)])
                << "position " << pos[static_cast<std::size_t>(t)] << " coord " << i;
          }
        }
      }
    }
    std::printf("[ xpos %s large positions, %s ] max |error| / bound = %.3f\n",
                rotary::dtype_name<T>().data(), rotary::to_string(pairing).data(), worst);
  }
}

TEST(XPos, LargePositionsF32) { check_large_positions<float>(); }
TEST(XPos, LargePositionsF64) { check_large_positions<double>(); }

// Every way in gives the same bits: fused GQA == separate q and k, strided == Eigen, in place == out
// of place, unchecked == checked, threads == serial, and every ISA == scalar.
TYPED_TEST(XPosTyped, EntryPointsAgreeBitForBit) {
  using T = TypeParam;
  std::mt19937_64 rng(rotary_test::seed() + 5);
  Setting s;
  s.head_dim = 70;
  s.rotary_dim = 66;
  const XPos<T> xpos(s.spec(), 0.7, 300.0);
  const std::int64_t tokens = 77;
  const std::int64_t qh = 4;
  const std::int64_t kh = 2;
  const double center = 38.5;
  const std::vector<std::int32_t> pos32 = [&] {
    std::vector<std::int32_t> v(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t)
      v[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t < 40 ? t : 3 * t);
    return v;
  }();
  const Positions positions(pos32);
  const RowMatrix<T> q = random_rows<T>(tokens * qh, s.head_dim, rng);
  const RowMatrix<T> k = random_rows<T>(tokens * kh, s.head_dim, rng);
  const auto same = [](const RowMatrix<T>& a, const RowMatrix<T>& b) {
    return a.rows() == b.rows() && a.cols() == b.cols() &&
           std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.size())) == 0;
  };
  for (const Direction dir : {Direction::forward, Direction::inverse}) {
    RowMatrix<T> q_sep(q.rows(), q.cols());
    RowMatrix<T> k_sep(k.rows(), k.cols());
    rotary::apply(xpos.queries(center), q, q_sep, positions, qh, dir);
    rotary::apply(xpos.keys(center), k, k_sep, positions, kh, dir);
    // fused, in place
    RowMatrix<T> qf = q;
    RowMatrix<T> kf = k;
    rotary::apply_qk(xpos.queries(center), qf, kf, positions, qh, kh, dir);
    EXPECT_TRUE(same(qf, q_sep));
    EXPECT_TRUE(same(kf, k_sep));
    // fused, out of place; unchecked
    RowMatrix<T> qo(q.rows(), q.cols());
    RowMatrix<T> ko(k.rows(), k.cols());
    rotary::apply_qk(xpos.queries(center), q, qo, k, ko, positions, qh, kh, dir);
    EXPECT_TRUE(same(qo, q_sep));
    EXPECT_TRUE(same(ko, k_sep));
    RowMatrix<T> qu = q;
    RowMatrix<T> ku = k;
    rotary::unchecked::apply_qk(xpos.queries(center), qu, ku, positions, qh, kh, dir);
    EXPECT_TRUE(same(qu, q_sep));
    EXPECT_TRUE(same(ku, k_sep));
    RowMatrix<T> qu2 = q;
    rotary::unchecked::apply(xpos.queries(center), qu2, positions, qh, dir);
    EXPECT_TRUE(same(qu2, q_sep));
    // strided, padded rows and head-major token stride for k: element (t, h) at h*tokens*pad + t*pad
    const std::int64_t pad = s.head_dim + 5;
    std::vector<T> kbuf(static_cast<std::size_t>(kh * tokens * pad), T(0));
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t hh = 0; hh < kh; ++hh)
        std::memcpy(&kbuf[static_cast<std::size_t>(hh * tokens * pad + t * pad)], k.row(t * kh + hh).data(),
                    sizeof(T) * static_cast<std::size_t>(s.head_dim));
    const rotary::StridedLayout kl{tokens, kh, pad, tokens * pad};
    const rotary::StridedLayout ql{tokens, qh, qh * s.head_dim, s.head_dim};
    RowMatrix<T> qs = q;
    rotary::apply_qk_strided(xpos.queries(center), qs.data(), ql, qs.data(), ql, kbuf.data(), kl, kbuf.data(), kl, positions, dir);
    EXPECT_TRUE(same(qs, q_sep));
    bool k_ok = true;
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t hh = 0; hh < kh; ++hh)
        k_ok = k_ok && std::memcmp(&kbuf[static_cast<std::size_t>(hh * tokens * pad + t * pad)],
                                   k_sep.row(t * kh + hh).data(),
                                   sizeof(T) * static_cast<std::size_t>(s.head_dim)) == 0;
    EXPECT_TRUE(k_ok);
    RowMatrix<T> ks(k.rows(), k.cols());
    const rotary::StridedLayout kd{tokens, kh, kh * s.head_dim, s.head_dim};
    rotary::unchecked::apply_strided(xpos.keys(center), k.data(), kd, ks.data(), kd, positions, dir);
    EXPECT_TRUE(same(ks, k_sep));
    // threads
    RowMatrix<T> qt = q;
    RowMatrix<T> kt = k;
    {
      const rotary_test::SplitAlways split;  // small enough that the gate would keep it on one thread
      rotary::apply_qk(xpos.queries(center), qt, kt, positions, qh, kh, {dir, rotary::thread_parallel_for(3)});
    }
    EXPECT_TRUE(same(qt, q_sep));
    EXPECT_TRUE(same(kt, k_sep));
    // every ISA against scalar
    RowMatrix<T> qsc = q;
    RowMatrix<T> ksc = k;
    {
      const rotary_test::IsaScope scalar(rotary::Isa::scalar);
      rotary::apply_qk(xpos.queries(center), qsc, ksc, positions, qh, kh, dir);
    }
    const std::string_view isa = rotary::to_string(rotary::active_isa());  // what q_sep, k_sep ran on
    EXPECT_TRUE(same(qsc, q_sep)) << "scalar vs " << isa;
    EXPECT_TRUE(same(ksc, k_sep)) << "scalar vs " << isa;
  }
  // int64 positions and contiguous positions give the rows the int32 array gives.
  std::vector<std::int64_t> pos64(pos32.begin(), pos32.end());
  RowMatrix<T> a = q;
  RowMatrix<T> b = q;
  rotary::apply(xpos.queries(center), a, positions, qh);
  rotary::apply(xpos.queries(center), b, Positions(pos64), qh);
  EXPECT_TRUE(same(a, b));
  RowMatrix<T> c1 = q.topRows(40 * qh);
  RowMatrix<T> c2 = c1;
  rotary::apply(xpos.queries(center), c1, Positions::contiguous(0), qh);
  rotary::apply(xpos.queries(center), c2, Positions(pos64.data(), 40), qh);
  EXPECT_TRUE(same(c1, c2));
}

// max_offset() against its closed form B * log2(max_T) / -log2(gamma/(1+gamma)), and the checked range
// rule on both sides of it.
TYPED_TEST(XPosTyped, RangeLimit) {
  using T = TypeParam;
  Setting s;
  s.head_dim = 16;
  s.rotary_dim = 16;
  const XPos<T> xpos(s.spec());
  const double max_t = static_cast<double>(static_cast<float>(Eigen::NumTraits<T>::highest()));
  const double max_used = std::is_same_v<T, double> ? std::numeric_limits<double>::max() : max_t;
  const double want = 512.0 * std::log2(max_used) / -std::log2(0.4 / 1.4);
  EXPECT_NEAR(xpos.max_offset(), want, 1e-5 * want);
  std::printf("[ xpos %s ] max_offset = %.1f\n", rotary::dtype_name<T>().data(), xpos.max_offset());
  const auto inside = static_cast<std::int64_t>(std::floor(xpos.max_offset())) - 1;
  const auto outside = static_cast<std::int64_t>(std::ceil(xpos.max_offset())) + 1;
  RowMatrix<T> x = RowMatrix<T>::Ones(1, 16);
  // keys at p > c and queries at p < c grow
  EXPECT_NO_THROW(rotary::apply(xpos.keys(0.0), x, Positions::contiguous(inside), 1));
  rotary_test::expect_error([&] { rotary::apply(xpos.keys(0.0), x, Positions::contiguous(outside), 1); },
                            {"xpos key scale factor", "overflows", "max_offset()"});
  rotary_test::expect_error(
      [&] { rotary::apply(xpos.queries(static_cast<double>(outside)), x, Positions::contiguous(0), 1); },
      {"xpos query scale factor", "position 0"});
  EXPECT_NO_THROW(rotary::apply(xpos.queries(static_cast<double>(inside)), x, Positions::contiguous(0), 1));
  // The inverse swaps the roles.
  rotary_test::expect_error(
      [&] { rotary::apply(xpos.queries(0.0), x, Positions::contiguous(outside), 1, Direction::inverse); }, {"xpos query"});
  // Fused calls check both roles; arrays are scanned for their extremes.
  RowMatrix<T> k = RowMatrix<T>::Ones(1, 16);
  const std::vector<std::int64_t> pos = {outside};
  rotary_test::expect_error([&] { rotary::apply_qk(xpos.queries(0.0), x, k, Positions(pos), 1, 1); }, {"xpos key"});
  RowMatrix<T> x3 = RowMatrix<T>::Ones(3, 16);
  const std::vector<std::int64_t> pos3 = {5, outside, 7};
  const std::string where = "at position " + std::to_string(outside);
  rotary_test::expect_error([&] { rotary::apply(xpos.keys(0.0), x3, Positions(pos3), 1); }, {"xpos key", where.c_str()});
  // Queries at p > c only shrink: far beyond the limit is fine (and underflows to 0).
  RowMatrix<T> far = RowMatrix<T>::Ones(1, 16);
  rotary::apply(xpos.queries(0.0), far, Positions::contiguous(std::int64_t{1} << 40), 1);
  EXPECT_EQ(static_cast<double>(static_cast<float>(far(0, 0))), 0.0);
}

// gamma so large that zeta_0 = gamma/(1+gamma) rounds to 1 in x86's 64-bit-mantissa long double:
// nothing decays, and every offset fits (max_offset() was -inf, from 0 / -0, before). AArch64's
// quad long double still resolves zeta_0 < 1: a finite bound past any position (~4.5e24).
TEST(XPos, HugeGammaHasNoRangeLimit) {
  const XPos<float> xpos(rotary::RotarySpec(8, Pairing::half_split), 1e20);
  EXPECT_GT(xpos.max_offset(), 0x1p62);
  if (std::numeric_limits<long double>::digits <= 64) {
    EXPECT_EQ(xpos.max_offset(), std::numeric_limits<double>::infinity());
  }
  RowMatrix<float> x = RowMatrix<float>::Ones(2, 8);
  EXPECT_NO_THROW(rotary::apply(xpos.keys(0.0), x, Positions::contiguous(std::int64_t{1} << 40), 1));
  EXPECT_TRUE(x.allFinite());
}

TEST(XPos, InvalidArguments) {
  const rotary::RotarySpec spec(8, Pairing::half_split);
  for (const double g : {0.0, -0.5, std::nan(""), std::numeric_limits<double>::infinity()})
    rotary_test::expect_error([&] { XPos<float> x(spec, g); }, {"xpos gamma ("});
  for (const double b : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    rotary_test::expect_error([&] { XPos<float> x(spec, 0.4, b); }, {"xpos scale_base ("});
  rotary_test::expect_error([&] { XPos<float> x(rotary::RotarySpec(8, Pairing::half_split, 10000.0, 7)); },
                            {"rotary_dim (7)"});
  rotary::Frequencies f = rotary::default_frequencies(4, 10000.0);
  rotary_test::expect_error([&] { XPos<float> x(spec, f); }, {"rotary_dim 4", "spec says 8"});

  const XPos<float> xpos(spec);
  RowMatrix<float> x = RowMatrix<float>::Ones(4, 8);
  RowMatrix<float> k = RowMatrix<float>::Ones(2, 8);
  for (const double c : {std::nan(""), std::numeric_limits<double>::infinity(), 0x1p63})
    rotary_test::expect_error([&] { rotary::apply(xpos.queries(c), x, Positions::contiguous(0), 1); }, {"xpos center ("});
  rotary_test::expect_error([&] { (void)xpos.scale(0, 0, std::nan("")); }, {"xpos center"});
  rotary_test::expect_error([&] { (void)xpos.scale(4, 0); }, {"pair index j (4)"});
  RowMatrix<float> wide = RowMatrix<float>::Ones(4, 10);
  rotary_test::expect_error([&] { rotary::apply(xpos.queries(), wide, Positions::contiguous(0), 1); },
                            {"x has 10 columns", "head_dim is 8"});
  rotary_test::expect_error([&] { rotary::apply(xpos.keys(), x, Positions::contiguous(0), 3); },
                            {"not a multiple of heads (3)"});
  const std::vector<std::int64_t> three = {0, 1, 2};
  rotary_test::expect_error([&] { rotary::apply(xpos.queries(), x, Positions(three), 1); },
                            {"positions has 3 values for 4 tokens"});
  const std::vector<std::int64_t> negative = {0, 1, -2, 3};
  rotary_test::expect_error([&] { rotary::apply(xpos.queries(), x, Positions(negative), 1); }, {"positions[2] (-2)"});
  rotary_test::expect_error([&] { rotary::apply_qk(xpos.queries(), x, k, Positions::contiguous(0), 1, 1); },
                            {"q has 4 tokens but k has 2"});
  RowMatrix<float> y(3, 8);
  rotary_test::expect_error([&] { rotary::apply(xpos.queries(), x, y, Positions::contiguous(0), 1); }, {"shape mismatch"});
  // A fused call whose key output is the query buffer.
  rotary_test::expect_error([&] { rotary::apply_qk(xpos.queries(), x, x, Positions::contiguous(0), 1, 1); }, {"overlap"});
}

// scale() is the query's forward factor, from its own formula.
TEST(XPos, ScaleAccessor) {
  const rotary::RotarySpec spec(32, Pairing::interleaved);
  const XPos<double> xpos(spec, 0.25, 100.0);
  Setting s;
  s.head_dim = 32;
  s.rotary_dim = 32;
  s.gamma = 0.25;
  s.scale_base = 100.0;
  for (std::int64_t j = 0; j < 16; ++j) {
    EXPECT_NEAR(xpos.zeta()[static_cast<std::size_t>(j)], static_cast<double>(zeta_ref(s, j)), 1e-16);
    for (const std::int64_t p : {std::int64_t{0}, std::int64_t{7}, std::int64_t{12345}}) {
      const LD want = query_factor(s, j, p, 50.5);
      EXPECT_NEAR(static_cast<double>(xpos.scale(j, p, 50.5) / want), 1.0, 1e-15) << j << " " << p;
    }
  }
}

}  // namespace
