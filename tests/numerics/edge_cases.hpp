// What test_edge_cases and test_edge_integers share: the storage types' compute type, bit-level
// comparison that lets NaN match NaN, and a Block of tokens rotated through the public entry point
// under one ISA or recomputed here from the documented pair formula with the table's cos/sin.
#ifndef ROTARY_TESTS_NUMERICS_EDGE_CASES_HPP
#define ROTARY_TESTS_NUMERICS_EDGE_CASES_HPP

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <rotary/rotary.hpp>

#include "support.hpp"

namespace edge_cases {

using rotary::Direction;
using rotary::Isa;
using rotary::Pairing;
using rotary::Positions;
using rotary::StridedLayout;
using rotary_test::IsaScope;
using rotary_test::narrow;
using rotary_test::same_bits;

// ---- values -------------------------------------------------------------------------------------

template <class T>
using C = rotary::compute_t<T>;

template <class T>
C<T> widen(T x) {
  return static_cast<C<T>>(x);
}

template <class T>
bool is_nan(T x) {
  return std::isnan(static_cast<double>(widen(x)));
}

// got equals want bit for bit, or both are NaN.
template <class T>
bool matches(T got, T want) {
  return is_nan(want) ? is_nan(got) : same_bits(got, want);
}

template <class T>
std::string show(T x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(widen(x)));
  return buf;
}

template <class T>
T from_bits(std::uint16_t b) {
  return Eigen::numext::bit_cast<T>(b);
}

// ---- running a call and recomputing it ------------------------------------------------------------

struct Block {
  std::int64_t heads;
  std::int64_t head_dim;
  std::vector<std::int64_t> positions;  // one per token
  std::int64_t tokens() const { return static_cast<std::int64_t>(positions.size()); }
  StridedLayout layout() const { return {tokens(), heads, heads * head_dim, head_dim}; }
};

// The public entry point under `isa`, out of place or in place (on a copy), int64 positions.
template <class T>
std::vector<T> rotate(Isa isa, const rotary::Rope<T>& rope, const Block& b, const std::vector<T>& x,
                      Direction dir, bool in_place) {
  const IsaScope scope(isa);
  std::vector<T> y = x;
  if (in_place) {
    rotary::apply_strided(rope, y.data(), b.layout(), Positions(b.positions), dir);
  } else {
    rotary::apply_strided(rope, x.data(), b.layout(), y.data(), b.layout(), Positions(b.positions), dir);
  }
  return y;
}

// The test's own evaluation of the documented formula with the table's cos/sin, per element.
template <class T>
void pair_formula(T x0, T x1, C<T> c, C<T> s, T& y0, T& y1) {
  const C<T> a = widen(x0);
  const C<T> b = widen(x1);
  y0 = narrow<T>(std::fma(a, c, -(b * s)));
  y1 = narrow<T>(std::fma(b, c, a * s));
}

template <class T>
std::vector<T> formula(const rotary::Rope<T>& rope, const Block& b, const std::vector<T>& x, Direction dir) {
  std::vector<T> y = x;
  const std::int64_t h = rope.rotary_dim() / 2;
  const bool il = rope.pairing() == Pairing::interleaved;
  for (std::int64_t t = 0; t < b.tokens(); ++t) {
    const C<T>* cs = rope.cache().row(b.positions[static_cast<std::size_t>(t)]);
    for (std::int64_t hd = 0; hd < b.heads; ++hd) {
      const std::size_t o = static_cast<std::size_t>((t * b.heads + hd) * b.head_dim);
      for (std::int64_t j = 0; j < h; ++j) {
        const std::size_t i0 = o + static_cast<std::size_t>(il ? 2 * j : j);
        const std::size_t i1 = o + static_cast<std::size_t>(il ? 2 * j + 1 : j + h);
        const C<T> s = dir == Direction::inverse ? -cs[h + j] : cs[h + j];
        pair_formula<T>(x[i0], x[i1], cs[j], s, y[i0], y[i1]);
      }
    }
  }
  return y;
}

// Every element of got against want (NaN-aware); reports the first few mismatches.
template <class T>
::testing::AssertionResult all_match(const std::vector<T>& got, const std::vector<T>& want) {
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!matches(got[i], want[i]) && bad++ < 4)
      r << "element " << i << ": got " << show(got[i]) << ", want " << show(want[i]) << "; ";
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << bad << " mismatches";
}

template <class T>
const char* dtype() {
  return rotary::dtype_name<T>().data();
}
}  // namespace edge_cases

#endif  // ROTARY_TESTS_NUMERICS_EDGE_CASES_HPP
