// rotary/compat/ggml.hpp against an independent reference written here from ggml's documented
// ggml_rope_ext semantics (ggml-cpu rope_f32 / rope_yarn, ggml.c ggml_rope_yarn_corr_dims), in plain
// double: theta_extrap = base^(-2i/n_dims) / ff_i, theta_interp = freq_scale * theta_extrap, the
// YaRN ramp over floor/ceil corr dims mixed by ext_factor, mscale = attn_factor (times
// 1 + 0.1 ln(1/freq_scale) when ext_factor != 0), angles p*theta with std::cos/std::sin.
// Tolerance: |y - y_ref| <= 4 ulp(1.0f) * (|x0| + |x1|) * mscale, plus half an ulp of the storage
// type at y_ref for f16/bf16 (the table's cos/sin are rounded once, the kernel rounds twice; the
// bound has room for both). Pass-through coordinates must keep their bits.
// Shapes: ggml's test-backend-ops / test-rope rope cases ({ne0, heads}, n_dims: llama 7B/13B
// {128, 32|40} x 128, falcon {64, 71} x 64, phi-2 {80, 32} x 32, stablelm {80, 32} x 20) plus
// partial rotary 64 of 128, each in modes NORMAL and NEOX, 4 tokens at positions up to 2^15, f32,
// f16, bf16, table and cache-free Ropes, across parameter sets with and without YaRN,
// freq_factors and attn_factor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <rotary/compat/ggml.hpp>

#include "support.hpp"

namespace {

using rotary::ggml::Mode;
using rotary::ggml::RopeExtParams;

constexpr std::int64_t kTokens = 4;
constexpr std::int64_t kMaxPosition = std::int64_t{1} << 15;
constexpr double kEps32 = 1.0 / 8388608.0;  // ulp(1.0f) = 2^-23

struct Geometry {
  const char* name;
  std::int64_t head_dim, heads, n_dims;
};

const std::vector<Geometry>& geometries() {
  static const std::vector<Geometry> v{
      {"llama7b", 128, 32, 128}, {"llama13b", 128, 40, 128}, {"falcon7b", 64, 71, 64},
      {"phi2", 80, 32, 32},      {"stablelm", 80, 32, 20},   {"partial_64_of_128", 128, 8, 64},
  };
  return v;
}

struct ParamSet {
  const char* name;
  double freq_base, freq_scale, ext_factor, attn_factor;
  std::int64_t n_ctx_orig;
  bool freq_factors;
};

// ln(4): the YaRN magnitude of freq_scale 1/4 is 1 + 0.1 ln 4.
const double kDeepSeekAttn = 1.0 / (1.0 + 0.1 * std::log(4.0));

const std::vector<ParamSet>& param_sets() {
  static const std::vector<ParamSet> v{
      {"default", 1e4, 1.0, 0.0, 1.0, 0, false},
      {"linear_x4", 1e4, 0.25, 0.0, 1.0, 0, false},
      {"attn_factor_no_yarn", 1e4, 1.0, 0.0, 1.4245, 0, false},
      {"yarn_x4", 1e4, 0.25, 1.0, 1.0, 4096, false},
      {"yarn_x4_attn_factor", 1e4, 0.25, 1.0, 1.4245, 4096, false},
      {"yarn_x4_deepseek_cancel", 1e4, 0.25, 1.0, kDeepSeekAttn, 4096, false},
      // test-backend-ops' fs / ef / af values, with a real corr range (ggml's test passes n_ctx_orig 0)
      {"backend_ops_fs_ef_af", 1e4, 1.4245, 0.7465, 1.4245, 512, false},
      {"freq_factors", 5e5, 1.0, 0.0, 1.0, 0, true},
      {"yarn_x4_freq_factors", 1e4, 0.25, 1.0, 1.0, 4096, true},
  };
  return v;
}

RopeExtParams make_params(const ParamSet& s, const Geometry& g, Mode mode, std::mt19937_64& rng) {
  RopeExtParams p;
  p.mode = mode;
  p.n_dims = g.n_dims;
  p.n_ctx_orig = s.n_ctx_orig;
  p.freq_base = s.freq_base;
  p.freq_scale = s.freq_scale;
  p.ext_factor = s.ext_factor;
  p.attn_factor = s.attn_factor;
  if (s.freq_factors) {  // test-backend-ops draws them in [0.9, 1.1]
    std::uniform_real_distribution<double> d(0.9, 1.1);
    p.freq_factors.resize(static_cast<std::size_t>(g.n_dims / 2));
    for (double& f : p.freq_factors) f = d(rng);
  }
  return p;
}

// ggml's theta_i and magnitude, in double, from the formulas alone.
struct Reference {
  std::vector<double> theta;
  double mscale = 1.0;
};

Reference reference(const RopeExtParams& p) {
  const double pi = 3.14159265358979323846;
  const double d = static_cast<double>(p.n_dims);
  const bool yarn = p.ext_factor != 0.0;
  double low = 0.0;
  double high = 0.0;
  if (yarn) {
    const auto corr = [&](double beta) {
      return d * std::log(static_cast<double>(p.n_ctx_orig) / (2.0 * pi * beta)) /
             (2.0 * std::log(p.freq_base));
    };
    low = std::max(0.0, std::floor(corr(p.beta_fast)));
    high = std::min(d - 1.0, std::ceil(corr(p.beta_slow)));
  }
  Reference r;
  for (std::int64_t i = 0; i < p.n_dims / 2; ++i) {
    const double ff = p.freq_factors.empty() ? 1.0 : p.freq_factors[static_cast<std::size_t>(i)];
    const double extrap = std::pow(p.freq_base, -2.0 * static_cast<double>(i) / d) / ff;
    const double interp = p.freq_scale * extrap;
    double theta = interp;
    if (yarn) {
      const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
      const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
      theta = interp * (1.0 - mix) + extrap * mix;
    }
    r.theta.push_back(theta);
  }
  r.mscale = p.attn_factor * (yarn ? 1.0 + 0.1 * std::log(1.0 / p.freq_scale) : 1.0);
  return r;
}

struct Worst {
  double of_bound = 0.0;   // max |y - y_ref| / bound
  double f32_units = 0.0;  // f32: max |y - y_ref| / (ulp(1.0f) * (|x0| + |x1|) * mscale)
  // f16/bf16: max |y - y_ref| / ulp_T(y_ref) where |y_ref| >= (|x0| + |x1|) * mscale / 16
  double storage_ulps = 0.0;
};

// Rotates random rows with `rope` and checks them against the reference.
template <class T>
void check_rope(const rotary::Rope<T>& rope, const Geometry& g, Mode mode, const Reference& ref,
                std::mt19937_64& rng, Worst& worst) {
  const std::int64_t rows = kTokens * g.heads;
  const rotary::RowMatrix<T> x = rotary_test::random_rows<T>(rows, g.head_dim, rng);
  std::vector<std::int32_t> pos;  // ggml's positions are int32
  for (const std::int64_t v : rotary_test::random_positions(kTokens, kMaxPosition, rng))
    pos.push_back(static_cast<std::int32_t>(v));
  rotary::RowMatrix<T> y(rows, g.head_dim);
  rotary::apply(rope, x, y, pos, g.heads);
  rotary::RowMatrix<T> in_place = x;
  rotary::apply(rope, in_place, pos, g.heads);
  ASSERT_EQ(std::memcmp(in_place.data(), y.data(), sizeof(T) * static_cast<std::size_t>(y.size())), 0)
      << "in place";

  const std::int64_t half = g.n_dims / 2;
  for (std::int64_t t = 0; t < kTokens; ++t) {
    const double p = static_cast<double>(pos[static_cast<std::size_t>(t)]);
    for (std::int64_t h = 0; h < g.heads; ++h) {
      const std::int64_t r = t * g.heads + h;
      for (std::int64_t i = 0; i < half; ++i) {
        const std::int64_t i0 = mode == Mode::normal ? 2 * i : i;
        const std::int64_t i1 = mode == Mode::normal ? 2 * i + 1 : i + half;
        const double a = rotary_test::to_d(x(r, i0));
        const double b = rotary_test::to_d(x(r, i1));
        const double angle = p * ref.theta[static_cast<std::size_t>(i)];
        const double c = ref.mscale * std::cos(angle);
        const double s = ref.mscale * std::sin(angle);
        const double scale = kEps32 * (std::abs(a) + std::abs(b)) * ref.mscale;
        const double want[2] = {a * c - b * s, a * s + b * c};
        const std::int64_t at[2] = {i0, i1};
        for (int k = 0; k < 2; ++k) {
          const double got = rotary_test::to_d(y(r, at[k]));
          const double err = std::abs(got - want[k]);
          double bound = 4.0 * scale;
          worst.f32_units = std::max(worst.f32_units, err / scale);
          if constexpr (!std::is_same_v<T, float>) {
            bound += rotary_test::ulp<T>(want[k]) / 2;
            if (std::abs(want[k]) >= scale / kEps32 / 16)  // not cancelled: the storage rounding dominates
              worst.storage_ulps = std::max(worst.storage_ulps, err / rotary_test::ulp<T>(want[k]));
          }
          worst.of_bound = std::max(worst.of_bound, err / bound);
          ASSERT_LE(err, bound) << "token " << t << " (position " << p << ") head " << h << " dim " << at[k]
                                << ": got " << got << ", want " << want[k] << " " << rotary_test::seed_note();
        }
      }
      for (std::int64_t i = g.n_dims; i < g.head_dim; ++i)  // pass-through, bit for bit
        ASSERT_TRUE(rotary_test::same_bits(y(r, i), x(r, i))) << "pass-through dim " << i;
    }
  }
}

template <class T>
void run_all(std::uint64_t salt) {
  std::mt19937_64 rng(rotary_test::seed() + salt);
  Worst worst;
  for (const Geometry& g : geometries())
    for (const Mode mode : {Mode::normal, Mode::neox})
      for (const ParamSet& s : param_sets()) {
        SCOPED_TRACE(std::string(g.name) + (mode == Mode::normal ? " normal " : " neox ") + s.name + " " +
                     std::string(rotary::dtype_name<T>()));
        const RopeExtParams p = make_params(s, g, mode, rng);
        const Reference ref = reference(p);
        check_rope(rotary::ggml::make_rope<T>(g.head_dim, p, rotary::OnTheFly{}), g, mode, ref, rng, worst);
        if (::testing::Test::HasFatalFailure()) return;
      }
  // The table path (one per geometry and mode: its 2^15 + 1 rows are the costly part), on the
  // parameter sets that change theta and the magnitude most. Under a user-mode emulator (the AArch64
  // build under qemu, where building these tables took 36 of the 37 s per dtype) each geometry
  // takes one mode and one set, both alternating, so each mode and set still meets a table: the
  // table's own exactness on AArch64 is test_cache's.
  std::size_t combination = 0;
  for (const Geometry& g : geometries())
    for (const Mode mode : {Mode::normal, Mode::neox})
      for (const ParamSet& s : {param_sets()[4], param_sets()[6]}) {
        const std::size_t k = combination++;
        if (rotary_test::kEmulated && k % 4 != (k / 4) % 4) continue;
        SCOPED_TRACE(std::string("table ") + g.name + (mode == Mode::normal ? " normal " : " neox ") +
                     s.name);
        const RopeExtParams p = make_params(s, g, mode, rng);
        check_rope(rotary::ggml::make_rope<T>(g.head_dim, p, kMaxPosition + 1), g, mode, reference(p), rng,
                   worst);
        if (::testing::Test::HasFatalFailure()) return;
      }
  const std::string name(rotary::dtype_name<T>());
  std::printf("ggml %s: max error %.5f of the bound", name.c_str(), worst.of_bound);
  if constexpr (std::is_same_v<T, float>) {
    std::printf("; %.3f ulp(1.0f) x (|x0| + |x1|) x mscale (bound 4)", worst.f32_units);
  } else {
    std::printf("; %.3f ulp of %s where |y| >= (|x0| + |x1|) x mscale / 16", worst.storage_ulps,
                name.c_str());
  }
  std::printf("\n");
}

TEST(Ggml, ReferenceF32) { run_all<float>(100); }
TEST(Ggml, ReferenceF16) { run_all<rotary::f16>(200); }
TEST(Ggml, ReferenceBf16) { run_all<rotary::bf16>(300); }

RopeExtParams yarn_x4() {
  RopeExtParams p;
  p.n_dims = 128;
  p.n_ctx_orig = 4096;
  p.freq_scale = 0.25;
  p.ext_factor = 1.0;
  return p;
}

// base 1e4, n_dims 128, n_ctx_orig 4096, beta 32/1: corr(32) = 20.94, corr(1) = 45.03 -> [20, 46].
TEST(Ggml, YarnCorrDims) {
  const rotary::ggml::CorrDims c = rotary::ggml::yarn_corr_dims(yarn_x4());
  EXPECT_EQ(c.low, 20.0);
  EXPECT_EQ(c.high, 46.0);
  // Observable in theta: pairs up to low keep base^(-2i/d) (extrapolation), pairs from high on are
  // interpolated (x freq_scale), the ones between lie strictly in between.
  const rotary::Frequencies f = rotary::compute_frequencies(rotary::ggml::spec(128, yarn_x4()));
  const rotary::Frequencies inv = rotary::default_frequencies(128, 1e4);
  for (std::size_t i = 0; i < 64; ++i) {
    if (i <= 20) {
      EXPECT_EQ(f.theta[i], inv.theta[i]) << i;
    } else if (i >= 46) {
      EXPECT_EQ(f.theta[i], 0.25 * inv.theta[i]) << i;
    } else {
      EXPECT_LT(f.theta[i], inv.theta[i]) << i;
      EXPECT_GT(f.theta[i], 0.25 * inv.theta[i]) << i;
    }
  }
}

// A corr range that clamps to low > high (a base near 1 pushes both corr dims past n_dims - 1):
// ggml's denominator max(0.001, high - low) makes every pair i < low extrapolated, where HF's
// (i - low) / (high - low) would interpolate them all.
TEST(Ggml, YarnCorrDimsInverted) {
  RopeExtParams p = yarn_x4();
  p.n_dims = 8;
  p.freq_base = 1.5;
  const rotary::ggml::CorrDims c = rotary::ggml::yarn_corr_dims(p);
  EXPECT_EQ(c.low, 29.0);
  EXPECT_EQ(c.high, 7.0);
  const rotary::Frequencies f = rotary::compute_frequencies(rotary::ggml::spec(8, p));
  const rotary::Frequencies inv = rotary::default_frequencies(8, 1.5);
  EXPECT_TRUE(rotary_test::same_bits(f.theta, inv.theta));
  const Reference ref = reference(p);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(ref.theta[i], std::pow(1.5, -2.0 * static_cast<double>(i) / 8.0));
}

// ext_factor 1 is rotary's yarn rule (factor 1/freq_scale, L0 n_ctx_orig, the same betas) bit for
// bit; ext_factor 0 is its linear rule. The magnitude is ggml's: attn_factor x (1 + 0.1 ln 4).
TEST(Ggml, MatchesRotaryScalingRules) {
  rotary::RopeParameters yarn;
  yarn.rope_type = "yarn";
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 4096;
  rotary::ScalingInput in;
  in.head_dim = 128;
  in.max_position_embeddings = 16384;
  rotary::EngineQuirks ggml_quirk;
  ggml_quirk.ggml_yarn_magnitude = true;
  const rotary::Frequencies want = rotary::scaled_frequencies(yarn, in, ggml_quirk);
  const rotary::RotarySpec s = rotary::ggml::spec(128, yarn_x4());
  EXPECT_TRUE(rotary_test::same_bits(s.frequencies.theta, want.theta));
  EXPECT_EQ(s.frequencies.attention_factor, want.attention_factor);
  EXPECT_EQ(s.pairing, rotary::Pairing::interleaved);
  EXPECT_EQ(s.effective_rotary_dim(), 128);

  // An explicit attn_factor multiplies the YaRN magnitude, in the spec and in the Rope's table.
  RopeExtParams p = yarn_x4();
  p.attn_factor = 1.4245;
  const auto rope = rotary::ggml::make_rope<float>(128, p, 8);
  EXPECT_EQ(rope.cache().attention_factor(), 1.4245 * (1.0 + 0.1 * std::log(4.0)));
  p.attn_factor = kDeepSeekAttn;  // llama.cpp's DeepSeek-V2/V3: cancels the magnitude
  EXPECT_NEAR(rotary::ggml::spec(128, p).frequencies.attention_factor, 1.0, 4e-16);
  p.ext_factor = 0.0;  // no YaRN: attn_factor alone
  EXPECT_EQ(rotary::ggml::spec(128, p).frequencies.attention_factor, kDeepSeekAttn);

  rotary::RopeParameters linear;
  linear.rope_type = "linear";
  linear.factor = 4.0;
  p.attn_factor = 1.0;
  p.mode = Mode::neox;
  const rotary::RotarySpec ls = rotary::ggml::spec(128, p);
  EXPECT_TRUE(rotary_test::same_bits(ls.frequencies.theta, rotary::scaled_frequencies(linear, in).theta));
  EXPECT_EQ(ls.pairing, rotary::Pairing::half_split);

  // freq_scale 1 and ext_factor 0: the plain spec (theta = base^(-2i/n_dims)), freq_factors on top.
  RopeExtParams plain;
  plain.n_dims = 64;
  plain.freq_base = 5e5;
  plain.freq_factors.assign(32, 2.0);
  const rotary::RotarySpec ps = rotary::ggml::spec(128, plain);
  EXPECT_TRUE(ps.frequencies.theta.empty());
  EXPECT_EQ(ps.rotary_dim, 64);
  const rotary::Frequencies pf = rotary::compute_frequencies(ps);
  const rotary::Frequencies inv = rotary::default_frequencies(64, 5e5);
  for (std::size_t i = 0; i < 32; ++i) EXPECT_EQ(pf.theta[i], inv.theta[i] / 2.0) << i;
}

TEST(Ggml, Modes) {
  EXPECT_EQ(rotary::ggml::mode_from_ggml(0), Mode::normal);
  EXPECT_EQ(rotary::ggml::mode_from_ggml(2), Mode::neox);
  EXPECT_EQ(rotary::ggml::pairing(Mode::normal), rotary::Pairing::interleaved);
  EXPECT_EQ(rotary::ggml::pairing(Mode::neox), rotary::Pairing::half_split);
  using rotary_test::expect_error;
  expect_error([] { rotary::ggml::mode_from_ggml(8); },
               {"mode 8", "MROPE", "not this front end's", "multi_axis"});
  expect_error([] { rotary::ggml::mode_from_ggml(24); }, {"mode 24", "VISION", "not this front end's"});
  expect_error([] { rotary::ggml::mode_from_ggml(40); }, {"mode 40", "IMROPE", "not this front end's"});
  for (const int m : {1, 3, 4, -1})
    expect_error([m] { rotary::ggml::mode_from_ggml(m); }, {"unknown", "NORMAL 0, NEOX 2"});
  RopeExtParams p;
  p.n_dims = 8;
  p.mode = static_cast<Mode>(8);
  expect_error([&] { rotary::ggml::spec(8, p); }, {"mode 8", "MROPE", "not this front end's"});
  p.mode = static_cast<Mode>(24);
  expect_error([&] { rotary::ggml::make_rope<float>(8, p, 4); }, {"mode 24", "VISION"});
}

TEST(Ggml, Refusals) {
  using rotary_test::expect_error;
  const auto refuse = [](RopeExtParams p, std::initializer_list<const char*> fragments,
                         std::int64_t head_dim = 128) {
    expect_error([&] { rotary::ggml::spec(head_dim, p); }, fragments);
    expect_error([&] { rotary::ggml::make_rope<rotary::f16>(head_dim, p, 4); }, fragments);
  };
  RopeExtParams ok = yarn_x4();
  ASSERT_NO_THROW(rotary::ggml::spec(128, ok));
  RopeExtParams p = ok;

  refuse(ok, {"head_dim (0)", "positive"}, 0);
  for (const std::int64_t n : {std::int64_t{7}, std::int64_t{0}, std::int64_t{-2}, std::int64_t{130}}) {
    p = ok;
    p.n_dims = n;
    refuse(p, {"n_dims (", "must be even, > 0 and <= head_dim (128)"});
  }
  for (const double b : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    p = ok;
    p.freq_base = b;
    refuse(p, {"freq_base (", "positive and finite"});
  }
  p = ok;
  p.freq_base = 1.0;
  refuse(p, {"freq_base (1)", "ln(freq_base)"});
  for (const double f : {0.0, -0.25, std::nan(""), HUGE_VAL}) {
    p = ok;
    p.freq_scale = f;
    refuse(p, {"freq_scale (", "positive and finite"});
  }
  p = ok;
  p.freq_scale = 3e4;  // 1 + 0.1 ln(1/3e4) < 0
  refuse(p, {"freq_scale (30000)", "YaRN magnitude", "<= 0"});
  for (const double e : {-0.5, 1.5, std::nan("")}) {
    p = ok;
    p.ext_factor = e;
    refuse(p, {"ext_factor (", "must be in [0, 1]"});
  }
  for (const double a : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    p = ok;
    p.attn_factor = a;
    refuse(p, {"attn_factor (", "positive and finite"});
  }
  p = ok;
  p.freq_factors.assign(63, 1.0);
  refuse(p, {"freq_factors has 63 entries", "n_dims/2 = 64"});
  p.freq_factors.assign(128, 1.0);  // one per dim, not per pair
  refuse(p, {"freq_factors has 128 entries"});
  p.freq_factors.assign(64, 1.0);
  p.freq_factors[5] = 0.0;
  refuse(p, {"freq_factors[5] (0)", "positive and finite"});
  p.freq_factors[5] = -1.0;
  refuse(p, {"freq_factors[5] (-1)"});
  p.freq_factors[5] = std::nan("");
  refuse(p, {"freq_factors[5] (nan)"});
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{-4096}}) {
    p = ok;
    p.n_ctx_orig = n;
    refuse(p, {"n_ctx_orig (", "must be positive when ext_factor (1) != 0"});
  }
  for (const auto& [fast, slow] : {std::pair<double, double>{1.0, 1.0},
                                   {1.0, 32.0},
                                   {32.0, 0.0},
                                   {32.0, -1.0},
                                   {HUGE_VAL, 1.0},
                                   {std::nan(""), 1.0}}) {
    p = ok;
    p.beta_fast = fast;
    p.beta_slow = slow;
    refuse(p, {"beta_fast (", "must be > beta_slow (", "when ext_factor != 0"});
  }
  // Without YaRN, n_ctx_orig and the betas are not used (as in ggml), so not checked either.
  p = ok;
  p.ext_factor = 0.0;
  p.n_ctx_orig = 0;
  p.beta_fast = 1.0;
  p.beta_slow = 1.0;
  EXPECT_NO_THROW(rotary::ggml::spec(128, p));
  p.freq_base = 1.0;
  EXPECT_NO_THROW(rotary::ggml::spec(128, p));
}

}  // namespace
