// Scaling rules (HF semantics): each rule against values derived independently — the published
// formulas evaluated in long double here, literal values computed separately with python3 (double),
// and the snapshots HF's own tests (tests/utils/test_modeling_rope_utils.py) state — plus validation,
// engine quirks, and the precision of cos/sin under every rule at positions up to 2^31 - 1.
#include <cmath>
#include <cstdio>
#include <string>

#include "support.hpp"

namespace {

using rotary::EngineQuirks;
using rotary::Frequencies;
using rotary::RopeParameters;
using rotary::ScalingInput;

constexpr long double kPiL = 3.141592653589793238462643383279502884L;

// ---- independent long-double references, written from DESIGN.md §3 ------------------------------

long double ref_inv(std::int64_t d, long double base, std::int64_t i) {
  return std::pow(base, -2.0L * static_cast<long double>(i) / static_cast<long double>(d));
}

double rel_err(double got, long double want) {
  if (want == 0.0L) return std::fabs(got);
  return static_cast<double>(std::fabs((static_cast<long double>(got) - want) / want));
}

ScalingInput input(std::int64_t head_dim, std::int64_t L, std::optional<std::int64_t> seq = std::nullopt,
                   std::int64_t rotary_dim = 0) {
  ScalingInput in;
  in.head_dim = head_dim;
  in.rotary_dim = rotary_dim;
  in.max_position_embeddings = L;
  in.seq_len = seq;
  return in;
}

RopeParameters params(const std::string& type, double theta = 10000.0) {
  RopeParameters p;
  p.rope_type = type;
  p.rope_theta = theta;
  return p;
}

// Max relative error of f.theta against ref(i) over all pairs.
template <class Ref>
double worst_rel(const Frequencies& f, Ref ref) {
  double w = 0.0;
  for (std::size_t i = 0; i < f.theta.size(); ++i) w = std::max(w, rel_err(f.theta[i], ref(static_cast<std::int64_t>(i))));
  return w;
}

// HF test snapshots: LlamaConfig() (head_dim 128, rope_theta 1e4, max_position_embeddings 2048).
// Printed by HF with 5 significant digits, so compared at 1e-4 relative.
const double kHfDefault[64] = {
    1.0000e+00, 8.6596e-01, 7.4989e-01, 6.4938e-01, 5.6234e-01, 4.8697e-01, 4.2170e-01, 3.6517e-01,
    3.1623e-01, 2.7384e-01, 2.3714e-01, 2.0535e-01, 1.7783e-01, 1.5399e-01, 1.3335e-01, 1.1548e-01,
    1.0000e-01, 8.6596e-02, 7.4989e-02, 6.4938e-02, 5.6234e-02, 4.8697e-02, 4.2170e-02, 3.6517e-02,
    3.1623e-02, 2.7384e-02, 2.3714e-02, 2.0535e-02, 1.7783e-02, 1.5399e-02, 1.3335e-02, 1.1548e-02,
    1.0000e-02, 8.6596e-03, 7.4989e-03, 6.4938e-03, 5.6234e-03, 4.8697e-03, 4.2170e-03, 3.6517e-03,
    3.1623e-03, 2.7384e-03, 2.3714e-03, 2.0535e-03, 1.7783e-03, 1.5399e-03, 1.3335e-03, 1.1548e-03,
    1.0000e-03, 8.6596e-04, 7.4989e-04, 6.4938e-04, 5.6234e-04, 4.8697e-04, 4.2170e-04, 3.6517e-04,
    3.1623e-04, 2.7384e-04, 2.3714e-04, 2.0535e-04, 1.7783e-04, 1.5399e-04, 1.3335e-04, 1.1548e-04};
// dynamic, factor 10, seq_len 16384
const double kHfDynamic[64] = {
    1.0000e+00, 8.0931e-01, 6.5498e-01, 5.3008e-01, 4.2900e-01, 3.4720e-01, 2.8099e-01, 2.2741e-01,
    1.8404e-01, 1.4895e-01, 1.2055e-01, 9.7558e-02, 7.8955e-02, 6.3899e-02, 5.1714e-02, 4.1853e-02,
    3.3872e-02, 2.7413e-02, 2.2185e-02, 1.7955e-02, 1.4531e-02, 1.1760e-02, 9.5176e-03, 7.7027e-03,
    6.2339e-03, 5.0451e-03, 4.0831e-03, 3.3045e-03, 2.6744e-03, 2.1644e-03, 1.7517e-03, 1.4176e-03,
    1.1473e-03, 9.2852e-04, 7.5146e-04, 6.0817e-04, 4.9220e-04, 3.9834e-04, 3.2238e-04, 2.6091e-04,
    2.1115e-04, 1.7089e-04, 1.3830e-04, 1.1193e-04, 9.0585e-05, 7.3312e-05, 5.9332e-05, 4.8018e-05,
    3.8861e-05, 3.1451e-05, 2.5453e-05, 2.0600e-05, 1.6672e-05, 1.3492e-05, 1.0920e-05, 8.8374e-06,
    7.1522e-06, 5.7883e-06, 4.6845e-06, 3.7912e-06, 3.0683e-06, 2.4832e-06, 2.0097e-06, 1.6265e-06};
// yarn, factor 10, beta_fast 32, beta_slow 1
const double kHfYarn[64] = {
    1.0000e+00, 8.6596e-01, 7.4989e-01, 6.4938e-01, 5.6234e-01, 4.8697e-01, 4.2170e-01, 3.6517e-01,
    3.1623e-01, 2.7384e-01, 2.3714e-01, 2.0535e-01, 1.7783e-01, 1.5399e-01, 1.3335e-01, 1.1548e-01,
    1.0000e-01, 8.3479e-02, 6.9590e-02, 5.7925e-02, 4.8136e-02, 3.9931e-02, 3.3061e-02, 2.7315e-02,
    2.2515e-02, 1.8512e-02, 1.5177e-02, 1.2403e-02, 1.0101e-02, 8.1924e-03, 6.6143e-03, 5.3120e-03,
    4.2400e-03, 3.3599e-03, 2.6396e-03, 2.0520e-03, 1.5746e-03, 1.1882e-03, 8.7713e-04, 6.2810e-04,
    4.3007e-04, 2.7384e-04, 2.3714e-04, 2.0535e-04, 1.7783e-04, 1.5399e-04, 1.3335e-04, 1.1548e-04,
    1.0000e-04, 8.6596e-05, 7.4989e-05, 6.4938e-05, 5.6234e-05, 4.8697e-05, 4.2170e-05, 3.6517e-05,
    3.1623e-05, 2.7384e-05, 2.3714e-05, 2.0535e-05, 1.7783e-05, 1.5399e-05, 1.3335e-05, 1.1548e-05};
// llama3, factor 10, original_max_position_embeddings 2048, low_freq_factor 1, high_freq_factor 4
const double kHfLlama3[64] = {
    1.0000e+00, 8.6596e-01, 7.4989e-01, 6.4938e-01, 5.6234e-01, 4.8697e-01, 4.2170e-01, 3.6517e-01,
    3.1623e-01, 2.7384e-01, 2.3714e-01, 2.0535e-01, 1.7783e-01, 1.5399e-01, 1.3335e-01, 1.1548e-01,
    1.0000e-01, 8.6596e-02, 7.4989e-02, 6.4938e-02, 5.6234e-02, 4.8697e-02, 4.2170e-02, 3.6517e-02,
    3.1623e-02, 2.7384e-02, 2.3714e-02, 2.0535e-02, 1.7783e-02, 1.5399e-02, 1.3335e-02, 1.0730e-02,
    7.7785e-03, 5.6009e-03, 3.9991e-03, 2.8248e-03, 1.9675e-03, 1.3449e-03, 8.9549e-04, 5.7363e-04,
    3.4539e-04, 2.7384e-04, 2.3714e-04, 2.0535e-04, 1.7783e-04, 1.5399e-04, 1.3335e-04, 1.1548e-04,
    1.0000e-04, 8.6596e-05, 7.4989e-05, 6.4938e-05, 5.6234e-05, 4.8697e-05, 4.2170e-05, 3.6517e-05,
    3.1623e-05, 2.7384e-05, 2.3714e-05, 2.0535e-05, 1.7783e-05, 1.5399e-05, 1.3335e-05, 1.1548e-05};

void expect_snapshot(const Frequencies& f, const double (&want)[64], const char* what) {
  ASSERT_EQ(f.theta.size(), 64u) << what;
  double w = 0.0;
  for (std::size_t i = 0; i < 64; ++i) {
    const double r = rel_err(f.theta[i], want[i]);
    w = std::max(w, r);
    EXPECT_LE(r, 1e-4) << what << " i " << i << ": " << f.theta[i] << " vs HF " << want[i];
  }
  std::printf("%-8s vs HF test snapshot: max relative difference %.2e (snapshot printed to 5 digits)\n", what, w);
}

// ---- default, linear, NTK ------------------------------------------------------------------

TEST(Scaling, DefaultMatchesHfSnapshotAndDefaultFrequencies) {
  const auto f = rotary::scaled_frequencies(params("default"), input(128, 2048));
  expect_snapshot(f, kHfDefault, "default");
  EXPECT_EQ(f.theta, rotary::default_frequencies(128, 10000.0).theta);
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(Scaling, LinearDividesByFactor) {
  for (double s : {2.0, 10.0, 20.0}) {
    auto p = params("linear");
    p.factor = s;
    const auto f = rotary::scaled_frequencies(p, input(128, 2048));
    EXPECT_EQ(f.attention_factor, 1.0);
    EXPECT_LE(worst_rel(f, [&](std::int64_t i) { return ref_inv(128, 10000.0L, i) / s; }), 0x1p-52);
  }
}

TEST(Scaling, FixedNtkRaisesTheBase) {
  auto p = params("ntk");
  p.factor = 4.0;
  const auto f = rotary::scaled_frequencies(p, input(128, 4096, 100000));  // seq_len has no effect
  const long double b = 10000.0L * std::pow(4.0L, 128.0L / 126.0L);
  EXPECT_LE(worst_rel(f, [&](std::int64_t i) { return ref_inv(128, b, i); }), 0x1p-51);
  EXPECT_LE(rel_err(f.theta[10], 0.19029830587539176), 1e-14);  // python3: 1/(1e4*4**(128/126))**(20/128)
  EXPECT_EQ(f.attention_factor, 1.0);
}

// ---- dynamic NTK ---------------------------------------------------------------------------

TEST(Scaling, DynamicMatchesHfSnapshot) {
  auto p = params("dynamic");
  p.factor = 10.0;
  expect_snapshot(rotary::scaled_frequencies(p, input(128, 2048, 16384)), kHfDynamic, "dynamic");
}

TEST(Scaling, DynamicIsDefaultUpToLAndScalesAbove) {
  auto p = params("dynamic");
  p.factor = 4.0;
  const auto plain = rotary::default_frequencies(128, 10000.0);
  // At or below L (or without a length) the base is b * (s*L/L - (s-1))^x = b exactly.
  for (std::optional<std::int64_t> n : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{0},
                                        std::optional<std::int64_t>{1}, std::optional<std::int64_t>{4096}}) {
    const auto f = rotary::scaled_frequencies(p, input(128, 4096, n));
    EXPECT_LE(worst_rel(f, [&](std::int64_t i) { return ref_inv(128, 10000.0L, i); }), 0x1p-52);
  }
  // Just above L the base moves; at n = 2L it is b * (4*2 - 3)^(128/126).
  for (std::int64_t n : {4097, 8192, 1000000}) {
    const auto f = rotary::scaled_frequencies(p, input(128, 4096, n));
    const long double mult = 4.0L * n / 4096.0L - 3.0L;
    const long double b = 10000.0L * std::pow(mult, 128.0L / 126.0L);
    EXPECT_LE(worst_rel(f, [&](std::int64_t i) { return ref_inv(128, b, i); }), 0x1p-51) << "n " << n;
    EXPECT_LT(f.theta[63], plain.theta[63]) << "n " << n;
    EXPECT_EQ(f.theta[0], 1.0);
  }
  // python3: base' = 51293.78726815244; theta_1 = 0.8441220364885494, theta_63 = 2.3095639693789166e-05
  const auto f = rotary::scaled_frequencies(p, input(128, 4096, 8192));
  EXPECT_LE(rel_err(f.theta[1], 0.8441220364885494), 1e-14);
  EXPECT_LE(rel_err(f.theta[63], 2.3095639693789166e-05), 1e-13);
}

TEST(Scaling, DynamicVllmFixedTableQuirk) {
  auto p = params("dynamic");
  p.factor = 4.0;
  EngineQuirks q;
  q.vllm_dynamic_fixed_table = true;
  // vLLM: one table at n = L*s whatever the current length: base' = b*(s^2 - s + 1)^(d/(d-2)).
  const auto a = rotary::scaled_frequencies(p, input(128, 4096), q);
  const auto b = rotary::scaled_frequencies(p, input(128, 4096, 10), q);
  EXPECT_EQ(a.theta, b.theta);
  const auto hf = rotary::scaled_frequencies(p, input(128, 4096, 4096 * 4));  // HF at the same length agrees
  EXPECT_LE(worst_rel(a, [&](std::int64_t i) { return static_cast<long double>(hf.theta[static_cast<std::size_t>(i)]); }),
            0x1p-51);
  const long double base = 10000.0L * std::pow(13.0L, 128.0L / 126.0L);  // python3: 135401.97304176545
  EXPECT_LE(rel_err(static_cast<double>(base), 135401.97304176545), 1e-14);
  EXPECT_LE(worst_rel(a, [&](std::int64_t i) { return ref_inv(128, base, i); }), 0x1p-51);
}

// ---- yarn ----------------------------------------------------------------------------------

// YaRN from DESIGN.md §3 in long double.
long double ref_yarn(std::int64_t d, long double b, long double s, long double l0, long double bf, long double bs,
                     bool truncate, std::int64_t i) {
  const auto corr = [&](long double beta) {
    return static_cast<long double>(d) * std::log(l0 / (2.0L * kPiL * beta)) / (2.0L * std::log(b));
  };
  long double low = corr(bf);
  long double high = corr(bs);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0L);
  high = std::min(high, static_cast<long double>(d - 1));
  if (low == high) high += 0.001L;
  const long double ramp = std::clamp((static_cast<long double>(i) - low) / (high - low), 0.0L, 1.0L);
  const long double inv = ref_inv(d, b, i);
  return inv / s * ramp + inv * (1.0L - ramp);
}

TEST(Scaling, YarnMatchesHfSnapshotAndDefaults) {
  auto p = params("yarn");
  p.factor = 10.0;
  p.beta_fast = 32.0;
  p.beta_slow = 1.0;
  const auto f = rotary::scaled_frequencies(p, input(128, 2048));  // L0 defaults to L
  expect_snapshot(f, kHfYarn, "yarn");
  EXPECT_LE(worst_rel(f, [](std::int64_t i) { return ref_yarn(128, 1e4L, 10.0L, 2048.0L, 32.0L, 1.0L, true, i); }),
            1e-15);
  // HF: attention factor defaults to 0.1 ln s + 1; an explicit one wins.
  for (double s : {2.0, 10.0, 20.0}) {
    RopeParameters q = params("yarn");
    q.factor = s;
    EXPECT_DOUBLE_EQ(rotary::scaled_frequencies(q, input(128, 2048)).attention_factor, 0.1 * std::log(s) + 1.0);
    q.attention_factor = 0.5;
    EXPECT_EQ(rotary::scaled_frequencies(q, input(128, 2048, 1)).attention_factor, 0.5);
  }
  // beta 0 is HF's `or` default: same as absent.
  RopeParameters z = params("yarn");
  z.factor = 10.0;
  z.beta_fast = 0.0;
  z.beta_slow = 0.0;
  EXPECT_EQ(rotary::scaled_frequencies(z, input(128, 2048)).theta, f.theta);
  // HF: beta_fast = 1000 interpolates all but the first frequency; the last 20 are inv/s.
  RopeParameters wide = params("yarn");
  wide.factor = 10.0;
  wide.beta_fast = 1000.0;
  const auto g = rotary::scaled_frequencies(wide, input(128, 2048));
  const auto plain = rotary::default_frequencies(128, 1e4);
  EXPECT_EQ(g.theta[0], 1.0);
  for (std::size_t i = 1; i < 64; ++i) EXPECT_LT(g.theta[i], plain.theta[i]) << i;
  for (std::size_t i = 44; i < 64; ++i) EXPECT_LE(rel_err(g.theta[i], plain.theta[i] / 10.0L), 1e-15) << i;
}

TEST(Scaling, YarnWithFactorOneEqualsDefault) {
  for (std::int64_t d : {32, 64, 128}) {
    auto p = params("yarn", 500000.0);
    p.factor = 1.0;
    p.original_max_position_embeddings = 8192;
    const auto f = rotary::scaled_frequencies(p, input(d, 131072));
    EXPECT_EQ(f.attention_factor, 1.0);
    EXPECT_LE(worst_rel(f, [&](std::int64_t i) { return ref_inv(d, 500000.0L, i); }), 0x1p-52) << d;
  }
}

TEST(Scaling, YarnHandComputedCases) {
  // DeepSeek-like: d 64, b 1e4, s 40, L0 4096, mscale 1, mscale_all_dim 0.707 (python3 values).
  auto p = params("yarn");
  p.factor = 40.0;
  p.original_max_position_embeddings = 4096;
  p.mscale = 1.0;
  p.mscale_all_dim = 0.707;
  auto f = rotary::scaled_frequencies(p, input(64, 163840));
  EXPECT_LE(rel_err(f.attention_factor, 1.0857263992561355), 1e-15);
  // corr(32) = 10.47 -> low 10, corr(1) = 22.51 -> high 23
  EXPECT_EQ(f.theta[10], static_cast<double>(ref_inv(64, 1e4L, 10)));   // ramp 0: unscaled
  EXPECT_LE(rel_err(f.theta[11], 0.03900692656714386), 1e-14);
  EXPECT_LE(rel_err(f.theta[22], 0.0001778279410038922), 1e-14);
  EXPECT_LE(rel_err(f.theta[23], 3.33380358040831e-05), 1e-14);          // ramp 1: inv / s
  EXPECT_LE(worst_rel(f, [](std::int64_t i) { return ref_yarn(64, 1e4L, 40.0L, 4096.0L, 32.0L, 1.0L, true, i); }),
            1e-15);
  // Only one of mscale / mscale_all_dim set (or one of them 0): m(s, 1).
  p.mscale_all_dim = 0.0;
  EXPECT_DOUBLE_EQ(rotary::scaled_frequencies(p, input(64, 163840)).attention_factor, 0.1 * std::log(40.0) + 1.0);
  p.mscale_all_dim.reset();
  EXPECT_DOUBLE_EQ(rotary::scaled_frequencies(p, input(64, 163840)).attention_factor, 0.1 * std::log(40.0) + 1.0);

  // gpt-oss-like, truncate false: d 64, b 150000, s 32, L0 4096; low 8.0928, high 17.398 (not rounded).
  auto t = params("yarn", 150000.0);
  t.factor = 32.0;
  t.original_max_position_embeddings = 4096;
  t.truncate = false;
  f = rotary::scaled_frequencies(t, input(64, 131072));
  EXPECT_LE(rel_err(f.theta[8], 0.050813274815461475), 1e-14);
  EXPECT_LE(rel_err(f.theta[9], 0.03170569618466377), 1e-14);
  EXPECT_LE(rel_err(f.theta[12], 0.006794959489732219), 1e-14);
  EXPECT_LE(rel_err(f.theta[16], 0.00045648391922324086), 1e-14);
  EXPECT_LE(rel_err(f.theta[17], 0.00012931870124506317), 1e-14);
  EXPECT_LE(rel_err(f.theta[31], 3.0235114281192144e-07), 1e-14);
  EXPECT_LE(rel_err(f.attention_factor, 1.3465735902799727), 1e-15);
  EXPECT_LE(worst_rel(f, [](std::int64_t i) { return ref_yarn(64, 150000.0L, 32.0L, 4096.0L, 32.0L, 1.0L, false, i); }),
            1e-14);  // unrounded low/high carry the double rounding of the logs into the ramp
  // truncate true on the same config differs (ramp over [8, 18]).
  t.truncate = true;
  const auto g = rotary::scaled_frequencies(t, input(64, 131072));
  EXPECT_NE(g.theta[12], f.theta[12]);

  // factor absent: s = L/L0 = 32.
  t.truncate = false;
  t.factor.reset();
  const auto h = rotary::scaled_frequencies(t, input(64, 131072));
  EXPECT_EQ(h.theta, f.theta);
  EXPECT_EQ(h.attention_factor, f.attention_factor);
}

TEST(Scaling, YarnGgmlMagnitudeQuirk) {
  auto p = params("yarn");
  p.factor = 16.0;
  p.original_max_position_embeddings = 4096;
  p.attention_factor = 1.0;  // HF: explicit factor 1 (e.g. Qwen configs that disable the magnitude)
  EngineQuirks q;
  q.ggml_yarn_magnitude = true;
  const auto hf = rotary::scaled_frequencies(p, input(128, 65536));
  const auto gg = rotary::scaled_frequencies(p, input(128, 65536), q);
  EXPECT_EQ(hf.attention_factor, 1.0);
  EXPECT_DOUBLE_EQ(gg.attention_factor, 1.0 + 0.1 * std::log(16.0));
  EXPECT_EQ(hf.theta, gg.theta);
}

// ---- longrope ------------------------------------------------------------------------------

RopeParameters phi3_longrope(std::int64_t pairs) {
  auto p = params("longrope");
  p.original_max_position_embeddings = 4096;
  for (std::int64_t i = 0; i < pairs; ++i) {
    p.short_factor.push_back(1.0 + 0.01 * static_cast<double>(i));
    p.long_factor.push_back(1.0 + 0.5 * static_cast<double>(i));
  }
  return p;
}

TEST(Scaling, LongropeSwitchesAtL0) {
  const auto p = phi3_longrope(48);  // Phi-3-mini-128k geometry: head_dim 96, L0 4096, L 131072
  const auto check = [&](const Frequencies& f, const std::vector<double>& ext, const char* what) {
    EXPECT_LE(worst_rel(f, [&](std::int64_t i) { return ref_inv(96, 1e4L, i) / ext[static_cast<std::size_t>(i)]; }),
              0x1p-52)
        << what;
  };
  check(rotary::scaled_frequencies(p, input(96, 131072)), p.short_factor, "no seq_len");
  check(rotary::scaled_frequencies(p, input(96, 131072, 0)), p.short_factor, "seq_len 0");
  check(rotary::scaled_frequencies(p, input(96, 131072, 4096)), p.short_factor, "seq_len L0");
  check(rotary::scaled_frequencies(p, input(96, 131072, 4097)), p.long_factor, "seq_len L0+1");
  check(rotary::scaled_frequencies(p, input(96, 131072, 131072)), p.long_factor, "seq_len L");
  EngineQuirks q;
  q.vllm_longrope_always_long = true;
  check(rotary::scaled_frequencies(p, input(96, 131072, 10), q), p.long_factor, "vLLM quirk");
  check(rotary::scaled_frequencies(p, input(96, 131072), q), p.long_factor, "vLLM quirk, no seq_len");
}

TEST(Scaling, LongropeAttentionFactor) {
  auto p = phi3_longrope(48);
  // s = L/L0 = 32: sqrt(1 + ln 32 / ln 4096) = 1.1902380714238083 (python3); same on both sides of L0.
  const auto a = rotary::scaled_frequencies(p, input(96, 131072, 10));
  const auto b = rotary::scaled_frequencies(p, input(96, 131072, 100000));
  EXPECT_LE(rel_err(a.attention_factor, 1.1902380714238083), 1e-15);
  EXPECT_EQ(a.attention_factor, b.attention_factor);
  // An explicit factor replaces L/L0 (newest HF); s <= 1 gives 1; an explicit attention factor wins.
  p.factor = 2.0;
  EXPECT_DOUBLE_EQ(rotary::scaled_frequencies(p, input(96, 131072)).attention_factor,
                   std::sqrt(1.0 + std::log(2.0) / std::log(4096.0)));
  p.factor = 1.0;
  EXPECT_EQ(rotary::scaled_frequencies(p, input(96, 131072)).attention_factor, 1.0);
  p.factor.reset();
  p.original_max_position_embeddings.reset();  // L0 = L: s = 1
  EXPECT_EQ(rotary::scaled_frequencies(p, input(96, 4096)).attention_factor, 1.0);
  p.attention_factor = 0.5;
  EXPECT_EQ(rotary::scaled_frequencies(p, input(96, 4096, 1)).attention_factor, 0.5);
}

// ---- llama3 --------------------------------------------------------------------------------

long double ref_llama3(std::int64_t d, long double b, long double s, long double lo, long double hi, long double l0,
                       std::int64_t i) {
  const long double inv = ref_inv(d, b, i);
  const long double wl = 2.0L * kPiL / inv;
  if (wl > l0 / lo) return inv / s;
  if (wl < l0 / hi) return inv;
  const long double sm = (l0 / wl - lo) / (hi - lo);
  return (1.0L - sm) * inv / s + sm * inv;
}

RopeParameters llama3(double s, double lo, double hi, std::int64_t l0, double theta) {
  auto p = params("llama3", theta);
  p.factor = s;
  p.low_freq_factor = lo;
  p.high_freq_factor = hi;
  p.original_max_position_embeddings = l0;
  return p;
}

TEST(Scaling, Llama3MatchesHfSnapshot) {
  const auto f = rotary::scaled_frequencies(llama3(10.0, 1.0, 4.0, 2048, 1e4), input(128, 2048));
  expect_snapshot(f, kHfLlama3, "llama3");
  EXPECT_EQ(f.attention_factor, 1.0);
  // HF: high_freq_factor 1000 makes every frequency "not high": all are scaled down.
  const auto g = rotary::scaled_frequencies(llama3(10.0, 1.0, 1000.0, 2048, 1e4), input(128, 2048));
  const auto plain = rotary::default_frequencies(128, 1e4);
  for (std::size_t i = 0; i < 64; ++i) EXPECT_LT(g.theta[i], plain.theta[i]) << i;
}

TEST(Scaling, Llama31Bands) {
  // Llama 3.1: b 5e5, d 128, s 8, low 1, high 4, L0 8192 -> pairs 0-28 high, 29-34 medium, 35-63 low.
  const auto f = rotary::scaled_frequencies(llama3(8.0, 1.0, 4.0, 8192, 500000.0), input(128, 131072));
  const auto plain = rotary::default_frequencies(128, 500000.0);
  for (std::size_t i = 0; i <= 28; ++i) EXPECT_EQ(f.theta[i], plain.theta[i]) << i;
  for (std::size_t i = 35; i < 64; ++i) EXPECT_EQ(f.theta[i], plain.theta[i] / 8.0) << i;
  for (std::size_t i = 29; i <= 34; ++i) {
    EXPECT_LT(f.theta[i], plain.theta[i]) << i;
    EXPECT_GT(f.theta[i], plain.theta[i] / 8.0) << i;
  }
  // python3 values in the medium band, and the long-double formula everywhere.
  EXPECT_LE(rel_err(f.theta[29], 0.002166570763503359), 1e-14);
  EXPECT_LE(rel_err(f.theta[30], 0.0013718935677611381), 1e-14);
  EXPECT_LE(rel_err(f.theta[31], 0.0008567514129196321), 1e-14);
  EXPECT_LE(rel_err(f.theta[63], 3.068925988914511e-07), 1e-14);
  EXPECT_LE(worst_rel(f, [](std::int64_t i) { return ref_llama3(128, 5e5L, 8.0L, 1.0L, 4.0L, 8192.0L, i); }), 1e-15);
}

TEST(Scaling, Llama3BandEdges) {
  // Put a band edge exactly on pair j's wavelength by choosing low/high_freq_factor = L0 / lambda_j,
  // then nudge it by one part in 1e12 either way: the rule is continuous at both edges (sm = 0 at
  // lambda_low gives inv/s, sm = 1 at lambda_high gives inv), and the classification flips.
  const std::int64_t j = 40;
  const double inv = rotary::default_frequencies(128, 500000.0).theta[j];
  const double lambda = 2.0 * 3.141592653589793 / inv;
  const double edge = 8192.0 / lambda;  // the factor that puts the edge on lambda_j
  for (double nudge : {1.0 - 1e-12, 1.0, 1.0 + 1e-12}) {
    // low edge at lambda_j (high factor far away)
    const auto lo = rotary::scaled_frequencies(llama3(8.0, edge * nudge, edge * 100.0, 8192, 500000.0), input(128, 131072));
    EXPECT_LE(rel_err(lo.theta[j], static_cast<long double>(inv) / 8.0L), 1e-10) << "low edge, nudge " << nudge;
    // high edge at lambda_j (low factor far below)
    const auto hi = rotary::scaled_frequencies(llama3(8.0, edge / 100.0, edge * nudge, 8192, 500000.0), input(128, 131072));
    EXPECT_LE(rel_err(hi.theta[j], static_cast<long double>(inv)), 1e-10) << "high edge, nudge " << nudge;
  }
  // Strictly outside the band the values are exact: lambda_j > lambda_low -> inv/s exactly.
  const auto out = rotary::scaled_frequencies(llama3(8.0, edge * 1.001, edge * 100.0, 8192, 500000.0), input(128, 131072));
  EXPECT_EQ(out.theta[j], inv / 8.0);
  const auto in = rotary::scaled_frequencies(llama3(8.0, edge / 100.0, edge * 0.999, 8192, 500000.0), input(128, 131072));
  EXPECT_EQ(in.theta[j], inv);
}

TEST(Scaling, Llama3EqualFactorsHaveNoBand) {
  // Llama 4 Scout: low_freq_factor == high_freq_factor == 1, factor 16, L0 8192, b 5e5. HF accepts it
  // (it only warns): wavelengths above L0 are divided by 16, the others kept, no smoothing band.
  const auto f = rotary::scaled_frequencies(llama3(16.0, 1.0, 1.0, 8192, 500000.0), input(128, 10485760));
  const auto plain = rotary::default_frequencies(128, 500000.0);
  std::size_t scaled = 0;
  for (std::size_t i = 0; i < 64; ++i) {
    const double wavelen = 2.0 * 3.141592653589793 / plain.theta[i];
    EXPECT_EQ(f.theta[i], wavelen > 8192.0 ? plain.theta[i] / 16.0 : plain.theta[i]) << i;
    scaled += wavelen > 8192.0;
  }
  EXPECT_EQ(scaled, 29u);  // python3: sum(2*pi*5e5**(2*i/128) > 8192 for i in range(64)) = 29
  EXPECT_EQ(f.attention_factor, 1.0);
}

// ---- proportional --------------------------------------------------------------------------

TEST(Scaling, ProportionalZeroesTheTail) {
  auto p = params("proportional", 1e6);
  p.partial_rotary_factor = 0.25;
  p.factor = 8.0;
  const auto f = rotary::scaled_frequencies(p, input(256, 131072));
  ASSERT_EQ(f.theta.size(), 128u);  // the whole head
  for (std::size_t i = 0; i < 32; ++i)
    EXPECT_LE(rel_err(f.theta[i], ref_inv(256, 1e6L, static_cast<std::int64_t>(i)) / 8.0L), 0x1p-52) << i;
  for (std::size_t i = 32; i < 128; ++i) EXPECT_EQ(f.theta[i], 0.0) << i;
  EXPECT_LE(rel_err(f.theta[31], 0.004403368314341377), 1e-14);  // python3
  // Without a factor: s = 1; without partial_rotary_factor: every pair rotates (= linear over head_dim).
  p.factor.reset();
  p.partial_rotary_factor.reset();
  const auto g = rotary::scaled_frequencies(p, input(256, 131072));
  EXPECT_EQ(g.theta, rotary::default_frequencies(256, 1e6).theta);
  // Zero-frequency pairs pass through: cos 1, sin 0 at any position.
  const auto cache = rotary::CosSinCache<float>::for_positions(f, {0, 12345, 2147483647});
  for (std::int64_t m : {0, 12345, 2147483647})
    for (std::int64_t i = 32; i < 128; ++i) {
      EXPECT_EQ(cache.cos(m)[i], 1.0f);
      EXPECT_EQ(cache.sin(m)[i], 0.0f);
    }
}

// ---- composition, attention factor fold/separate --------------------------------------------

TEST(Scaling, ComposesWithPerPairFactorsAndReceptiveField) {
  auto p = params("yarn");
  p.factor = 8.0;
  const auto scaled = rotary::scaled_frequencies(p, input(8, 4096));
  rotary::RotarySpec spec(8);
  spec.freq_factors = {1.0, 2.0, 4.0, 0.5};
  spec.receptive_field = rotary::ReceptiveField{0.25, 0.5};
  const auto f = rotary::finish_frequencies(spec, scaled);
  const double phi = 0.25 / std::sqrt(10000.0);
  for (std::size_t j = 0; j < 4; ++j)
    EXPECT_DOUBLE_EQ(f.theta[j], phi + 0.75 * (scaled.theta[j] / spec.freq_factors[j])) << j;
  EXPECT_EQ(f.attention_factor, scaled.attention_factor);
}

TEST(Scaling, AttentionFactorFoldedOrSeparate) {
  auto p = params("yarn");
  p.factor = 16.0;
  const auto f = rotary::scaled_frequencies(p, input(64, 4096));
  const double a = f.attention_factor;
  const rotary::CosSinCache<double> fold(f, 0, 100, rotary::AttentionFactor::fold);
  const rotary::CosSinCache<double> sep(f, 0, 100, rotary::AttentionFactor::separate);
  EXPECT_TRUE(fold.attention_factor_folded());
  EXPECT_FALSE(sep.attention_factor_folded());
  EXPECT_EQ(sep.attention_factor(), a);
  for (std::int64_t m : {0, 7, 99})
    for (std::int64_t i = 0; i < 32; ++i) {
      EXPECT_NEAR(fold.cos(m)[i], a * sep.cos(m)[i], 4e-16);
      EXPECT_NEAR(fold.sin(m)[i], a * sep.sin(m)[i], 4e-16);
    }
}

// ---- validation ----------------------------------------------------------------------------

void expect_error(const RopeParameters& p, const ScalingInput& in, const std::string& fragment) {
  try {
    rotary::validate(p, in);
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const rotary::error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
  EXPECT_THROW(rotary::scaled_frequencies(p, in), rotary::error);
}

TEST(Scaling, ValidationErrors) {
  expect_error(params("su"), input(128, 4096), "unknown rope_type 'su'");
  expect_error(params("linear"), input(128, 4096), "requires 'factor'");
  expect_error(params("dynamic"), input(128, 4096), "requires 'factor'");
  expect_error(params("llama3"), input(128, 4096), "requires 'factor'");
  auto l3 = llama3(8.0, 1.0, 4.0, 8192, 5e5);
  l3.low_freq_factor.reset();
  expect_error(l3, input(128, 131072), "requires 'low_freq_factor'");
  l3 = llama3(8.0, 1.0, 4.0, 8192, 5e5);
  l3.original_max_position_embeddings.reset();
  expect_error(l3, input(128, 131072), "requires 'original_max_position_embeddings'");
  expect_error(llama3(8.0, 4.0, 1.0, 8192, 5e5), input(128, 131072), "high_freq_factor (1) must be >= low_freq_factor (4)");
  auto lr = phi3_longrope(48);
  lr.long_factor.clear();
  expect_error(lr, input(96, 131072), "requires 'long_factor'");
  lr = phi3_longrope(47);
  expect_error(lr, input(96, 131072), "short_factor has 47 entries; rotary_dim/2 = 48");
  lr = phi3_longrope(48);
  lr.long_factor[5] = 0.0;
  expect_error(lr, input(96, 131072), "long_factor[5]");
  lr = phi3_longrope(48);
  lr.short_factor[0] = std::nan("");
  expect_error(lr, input(96, 131072), "short_factor[0]");
  // odd dims
  expect_error(params("default"), input(127, 4096), "odd (fully rotated head)");
  expect_error(params("default"), input(128, 4096, std::nullopt, 33), "rotary_dim (33) is odd");
  expect_error(params("default"), input(128, 4096, std::nullopt, 130), "<= head_dim");
  expect_error(params("default"), input(0, 4096), "head_dim (0)");
  // non-positive / non-finite values
  expect_error(params("default", 0.0), input(128, 4096), "rope_theta");
  expect_error(params("default", INFINITY), input(128, 4096), "rope_theta");
  auto y = params("yarn");
  y.factor = -2.0;
  expect_error(y, input(128, 4096), "factor (-2)");
  y.factor = NAN;
  expect_error(y, input(128, 4096), "factor (nan)");
  y.factor = 0.25;
  expect_error(y, input(128, 4096), "must be >= 1");
  y.factor = 4.0;
  y.attention_factor = 0.0;
  expect_error(y, input(128, 4096), "attention_factor (0)");
  y.attention_factor.reset();
  y.beta_fast = 1.0;
  y.beta_slow = 32.0;
  expect_error(y, input(128, 4096), "beta_fast (1) must be >= beta_slow (32)");
  y.beta_fast = -1.0;
  expect_error(y, input(128, 4096), "beta_fast (-1)");
  y.beta_fast.reset();
  y.beta_slow.reset();
  y.rope_theta = 0.5;  // ln(base) < 0: the correction range would invert (no pair interpolated, no error before)
  expect_error(y, input(128, 4096), "rope_theta (0.5) must be > 1");
  y.rope_theta = 1.0;  // ln(base) = 0: NaN frequencies
  expect_error(y, input(128, 4096), "rope_theta (1) must be > 1");
  y.rope_theta = 10000.0;
  y.mscale = INFINITY;
  expect_error(y, input(128, 4096), "mscale (inf)");
  y.mscale.reset();
  y.original_max_position_embeddings = 0;
  expect_error(y, input(128, 4096), "original_max_position_embeddings (0)");
  y.original_max_position_embeddings.reset();
  expect_error(y, input(128, 0), "needs original_max_position_embeddings or max_position_embeddings");
  auto dyn = params("dynamic");
  dyn.factor = 2.0;
  expect_error(dyn, input(128, 0), "max_position_embeddings (L) > 0");
  expect_error(dyn, input(128, 4096, -1), "seq_len (-1)");
  auto prop = params("proportional");
  prop.partial_rotary_factor = 1.5;
  expect_error(prop, input(256, 4096), "partial_rotary_factor (1.5)");
  prop.partial_rotary_factor = 0.25;
  expect_error(prop, input(256, 4096, std::nullopt, 64), "must equal head_dim");
  // Permissive where HF is: llama3 L0 >= L; yarn factor != L/L0; unused keys.
  EXPECT_NO_THROW(rotary::validate(llama3(8.0, 1.0, 4.0, 8192, 5e5), input(128, 4096)));
  auto yy = params("yarn");
  yy.factor = 4.0;
  yy.original_max_position_embeddings = 4096;
  yy.short_factor = {1.0};
  EXPECT_NO_THROW(rotary::validate(yy, input(128, 32768)));
}

// ---- precision of cos/sin under every rule ----------------------------------------------------

struct NamedRule {
  std::string name;
  RopeParameters p;
  ScalingInput in;
};

std::vector<NamedRule> every_rule() {
  std::vector<NamedRule> v;
  v.push_back({"default", params("default", 5e5), input(128, 8192)});
  auto lin = params("linear");
  lin.factor = 4.0;
  v.push_back({"linear", lin, input(128, 16384)});
  auto dyn = params("dynamic", 1e6);
  dyn.factor = 4.0;
  v.push_back({"dynamic", dyn, input(128, 32768, 100000)});
  auto ntk = params("ntk");
  ntk.factor = 8.0;
  v.push_back({"ntk", ntk, input(64, 4096)});
  auto yarn = params("yarn", 1e6);  // Qwen2.5-style: factor 4, L0 32768
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 32768;
  v.push_back({"yarn", yarn, input(128, 131072)});
  auto lr = phi3_longrope(48);
  v.push_back({"longrope-short", lr, input(96, 131072, 100)});
  v.push_back({"longrope-long", lr, input(96, 131072, 100000)});
  v.push_back({"llama3", llama3(8.0, 1.0, 4.0, 8192, 500000.0), input(128, 131072)});
  auto prop = params("proportional", 1e6);
  prop.partial_rotary_factor = 0.25;
  prop.factor = 8.0;
  v.push_back({"proportional", prop, input(256, 131072)});
  return v;
}

TEST(ScalingPrecision, CosSinExactAtLargePositionsUnderEveryRule) {
  std::mt19937_64 rng(rotary_test::seed());
  std::vector<std::int64_t> positions = {0, 1, 4095, 8192, 65535, 1 << 20, 1 << 24, (1 << 24) + 1, 2147483647};
  const auto extra = rotary_test::random_positions(16, 2147483647, rng);
  positions.insert(positions.end(), extra.begin(), extra.end());
  std::printf("cos/sin (CosSinCache<float>, separate factor) vs long double at positions up to 2^31-1 %s\n",
              rotary_test::seed_note().c_str());
  std::printf("  %-15s %14s %14s %14s\n", "rule", "max err", "at 2^24", "at 2^31-1");
  for (const auto& r : every_rule()) {
    const Frequencies f = rotary::scaled_frequencies(r.p, r.in);
    const auto cache = rotary::CosSinCache<float>::for_positions(f, positions, rotary::AttentionFactor::separate);
    const auto folded = rotary::CosSinCache<float>::for_positions(f, positions, rotary::AttentionFactor::fold);
    double worst = 0.0;
    double at24 = 0.0;
    double at31 = 0.0;
    for (const std::int64_t m : positions) {
      double here = 0.0;
      for (std::int64_t j = 0; j < cache.pairs(); ++j) {
        const long double angle = static_cast<long double>(m) * static_cast<long double>(f.theta[static_cast<std::size_t>(j)]);
        const long double c = std::cos(angle);
        const long double s = std::sin(angle);
        const double ec = static_cast<double>(std::fabs(cache.cos(m)[j] - c));
        const double es = static_cast<double>(std::fabs(cache.sin(m)[j] - s));
        here = std::max({here, ec, es});
        // folded: a*cos rounded once: within half an ulp of a*cos, i.e. <= 2^-24 * a
        const long double a = f.attention_factor;
        EXPECT_LE(static_cast<double>(std::fabs(folded.cos(m)[j] - a * c)), 0x1p-24 * static_cast<double>(a))
            << r.name << " m " << m << " j " << j;
        EXPECT_LE(static_cast<double>(std::fabs(folded.sin(m)[j] - a * s)), 0x1p-24 * static_cast<double>(a))
            << r.name << " m " << m << " j " << j;
      }
      EXPECT_LE(here, 0x1p-24) << r.name << " m " << m;
      worst = std::max(worst, here);
      if (m == (1 << 24)) at24 = here;
      if (m == 2147483647) at31 = here;
    }
    std::printf("  %-15s %14.3e %14.3e %14.3e   (2^-24 = %.3e, attention factor %.6f)\n", r.name.c_str(), worst,
                at24, at31, 0x1p-24, f.attention_factor);
  }
}

// What the f32-angle pipelines (HF, ggml: float(m) * float(theta)) give at the same positions, for
// the closing note's comparison.
TEST(ScalingPrecision, FloatAngleBaselineForYarnAndLlama3) {
  for (const auto& r : every_rule()) {
    if (r.name != "yarn" && r.name != "llama3") continue;
    const Frequencies f = rotary::scaled_frequencies(r.p, r.in);
    for (const std::int64_t m : {std::int64_t{1} << 24, std::int64_t{2147483647}}) {
      double worst = 0.0;
      for (const double th : f.theta) {
        const float angle = static_cast<float>(m) * static_cast<float>(th);
        const long double exact = static_cast<long double>(m) * static_cast<long double>(th);
        worst = std::max({worst, static_cast<double>(std::fabs(std::cos(angle) - std::cos(exact))),
                          static_cast<double>(std::fabs(std::sin(angle) - std::sin(exact)))});
      }
      std::printf("  f32-angle baseline %-7s m = %-10lld max |err| %.3e\n", r.name.c_str(),
                  static_cast<long long>(m), worst);
    }
  }
}

}  // namespace
