// Multi-axis RoPE (M-RoPE, interleaved M-RoPE, 2-D / 3-D axial) against references written here:
// the axis maps and frequencies against HF's definitions, position builders (get_rope_index), HF's
// Qwen2-VL / Qwen3-VL / Pixtral / vision-encoder code, and random shapes of every dtype against the
// explicit matrix and the complex form. Calls, properties and refusals: test_multi_axis_calls.
#include <algorithm>
#include <complex>
#include <cstring>
#include <functional>
#include <limits>

#include "support.hpp"

namespace {

using rotary::AxisFrequencies;
using rotary::AxisMap;
using rotary::AxisPositions;
using rotary::bf16;
using rotary::Direction;
using rotary::f16;
using rotary::MultiAxisRope;
using rotary::Pairing;
using rotary::Positions;
using rotary::RowMatrix;
using rotary_test::random_rows;
using rotary_test::to_d;

using ld = long double;

// ---- references ----------------------------------------------------------------------------------

// References:
//   matrix:  the explicit block-diagonal R(t) with block j = [[c, -s], [s, c]], c/s = cos/sin of
//            p_{a(j)}(t) * theta_j in long double (a = the axis map as the test builds it)
//   complex: z_j = x_first + i x_second times e^{+-i p theta_j} in std::complex<long double>
//   HF:      transcriptions of HF transformers' Qwen2-VL apply_multimodal_rotary_pos_emb (mrope
//            sections * 2 over cat(freqs, freqs) + rotate_half), Qwen3-VL apply_interleaved_mrope,
//            the Qwen2-VL vision encoder and Pixtral's 2-D frequencies, in long double
// Tolerances, per coordinate k of pair (x_a, x_b), m = the largest position of the token:
//   f32 compute: |y - y_ref| <= (2^-22 + m 2^-62) (|x_a| + |x_b|): cos/sin rounded to float (2^-25
//     each), two roundings in the kernel (2^-24 of |x_a c| + |x_b s|), and the reference's own long
//     double angle error (m theta 2^-64 rad, theta <= 1)
//   f64 compute: 1e-13 + m 2^-62 instead (test_kernels' bound: the reference angle dominates)
//   f16 / bf16 storage: plus 1/2 ulp of the storage type at y_ref (one final rounding)
//   pass-through coordinates: bit for bit. Equal streams vs 1-D apply: bit for bit.

struct Geometry {
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;
  Pairing pairing = Pairing::half_split;
  std::vector<double> theta;  // per pair
  std::vector<int> axis;      // per pair
};

std::int64_t first_of(const Geometry& g, std::int64_t j) {
  return g.pairing == Pairing::interleaved ? 2 * j : j;
}
std::int64_t second_of(const Geometry& g, std::int64_t j) {
  return g.pairing == Pairing::interleaved ? 2 * j + 1 : j + g.rotary_dim / 2;
}

ld angle_of(const Geometry& g, const std::vector<std::int64_t>& p, std::int64_t j, Direction dir) {
  const auto jj = static_cast<std::size_t>(j);
  const ld a = static_cast<ld>(p[static_cast<std::size_t>(g.axis[jj])]) * static_cast<ld>(g.theta[jj]);
  return dir == Direction::forward ? a : -a;
}

// R(t) from long double cos/sin of p_{a(j)} theta_j.
Eigen::MatrixXd matrix_ref(const Geometry& g, const std::vector<std::int64_t>& p, Direction dir) {
  Eigen::MatrixXd r = Eigen::MatrixXd::Identity(g.head_dim, g.head_dim);
  for (std::int64_t j = 0; j < g.rotary_dim / 2; ++j) {
    const ld a = angle_of(g, p, j, dir);
    const auto c = static_cast<double>(std::cos(a));
    const auto s = static_cast<double>(std::sin(a));
    const std::int64_t i0 = first_of(g, j);
    const std::int64_t i1 = second_of(g, j);
    r(i0, i0) = c;
    r(i0, i1) = -s;
    r(i1, i0) = s;
    r(i1, i1) = c;
  }
  return r;
}

Eigen::VectorXd complex_ref(const Geometry& g, const std::vector<std::int64_t>& p, Direction dir,
                            const Eigen::VectorXd& x) {
  Eigen::VectorXd y = x;
  for (std::int64_t j = 0; j < g.rotary_dim / 2; ++j) {
    const std::int64_t i0 = first_of(g, j);
    const std::int64_t i1 = second_of(g, j);
    const std::complex<ld> w = std::complex<ld>(x(i0), x(i1)) * std::polar(1.0L, angle_of(g, p, j, dir));
    y(i0) = static_cast<double>(w.real());
    y(i1) = static_cast<double>(w.imag());
  }
  return y;
}

template <class T>
double compute_tol(std::int64_t m) {
  const double angle = static_cast<double>(m) * 0x1p-62;
  return std::is_same_v<T, double> ? 1e-13 + angle : 0x1p-22 + angle;
}

// 1/2 ulp of the storage type at v (0 for f32/f64: their rounding is inside compute_tol).
template <class T>
double half_ulp_storage(double v) {
  if constexpr (std::is_same_v<T, f16>) return 0.5 * std::max(rotary_test::ulp<float>(v) * 8192.0, 0x1p-24);
  if constexpr (std::is_same_v<T, bf16>) return 0.5 * rotary_test::ulp<float>(v) * 65536.0;
  return 0.0;
}

template <class T>
std::uint64_t bits_of(T v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

// Checks output rows y (one head row each) against both references; returns the worst error in
// units of the bound. x, y: rows of head_dim values; token t's positions p[t] (one per stream).
template <class T>
double check_rows(const Geometry& g, Direction dir, const std::vector<std::vector<std::int64_t>>& p,
                  std::int64_t heads, const std::function<const T*(std::int64_t)>& x_row,
                  const std::function<const T*(std::int64_t)>& y_row, const std::string& what) {
  double worst = 0.0;
  const auto tokens = static_cast<std::int64_t>(p.size());
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::vector<std::int64_t>& pt = p[static_cast<std::size_t>(t)];
    const std::int64_t m = *std::max_element(pt.begin(), pt.end());
    const Eigen::MatrixXd r = matrix_ref(g, pt, dir);
    for (std::int64_t h = 0; h < heads; ++h) {
      const T* xr = x_row(t * heads + h);
      const T* yr = y_row(t * heads + h);
      Eigen::VectorXd x(g.head_dim);
      for (std::int64_t k = 0; k < g.head_dim; ++k) x(k) = to_d(xr[k]);
      const Eigen::VectorXd ym = r * x;
      const Eigen::VectorXd yc = complex_ref(g, pt, dir, x);
      for (std::int64_t j = 0; j < g.rotary_dim / 2; ++j) {
        const std::int64_t i0 = first_of(g, j);
        const std::int64_t i1 = second_of(g, j);
        const double scale = std::fabs(x(i0)) + std::fabs(x(i1));
        for (const std::int64_t k : {i0, i1}) {
          const double y = to_d(yr[k]);
          // the f32 result may sit up to compute_tol * scale above |y_ref|, in a larger binade
          const double f32_err = compute_tol<T>(m) * scale;
          const double bound = f32_err + half_ulp_storage<T>(std::fabs(ym(k)) + f32_err) + 1e-300;
          const double e = std::max(std::fabs(y - ym(k)), std::fabs(y - yc(k)));
          worst = std::max(worst, e / bound);
          if (e > bound) {
            ADD_FAILURE() << what << ": token " << t << " head " << h << " coordinate " << k << " got " << y
                          << " matrix " << ym(k) << " complex " << yc(k) << " bound " << bound << " "
                          << rotary_test::seed_note();
            return worst;
          }
        }
      }
      for (std::int64_t k = g.rotary_dim; k < g.head_dim; ++k)
        if (bits_of(yr[k]) != bits_of(xr[k])) {
          ADD_FAILURE() << what << ": pass-through coordinate " << k << " changed";
          return worst;
        }
    }
  }
  return worst;
}

// Per-token positions from an AxisPositions-shaped planar vector.
std::vector<std::vector<std::int64_t>> per_token(const std::vector<std::int64_t>& planar, int streams) {
  const std::size_t tokens = planar.size() / static_cast<std::size_t>(streams);
  std::vector<std::vector<std::int64_t>> p(tokens,
                                           std::vector<std::int64_t>(static_cast<std::size_t>(streams)));
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < static_cast<std::size_t>(streams); ++a) p[t][a] = planar[a * tokens + t];
  return p;
}

std::vector<int> axis_vector(const AxisMap& map) {
  return std::vector<int>(map.axis_of_pair().begin(), map.axis_of_pair().end());
}

template <class T>
bool same_bits(const RowMatrix<T>& a, const RowMatrix<T>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(T)) == 0;
}

// ---- maps and frequencies against HF's definitions --------------------------------------------------

TEST(MultiAxisMaps, Qwen2VlSections) {
  const AxisMap map = rotary::mrope_axis_map(128, {16, 24, 24});
  ASSERT_EQ(map.pairs(), 64);
  ASSERT_EQ(map.streams(), 3);
  for (std::int64_t j = 0; j < 64; ++j) EXPECT_EQ(map[j], j < 16 ? 0 : (j < 40 ? 1 : 2)) << j;
  EXPECT_EQ(map.runs().size(), 3u);
  EXPECT_EQ(map.count(0), 16);
  EXPECT_EQ(map.count(1), 24);
  EXPECT_EQ(map.count(2), 24);
}

TEST(MultiAxisMaps, Qwen3VlInterleaved) {
  // HF apply_interleaved_mrope: start from t everywhere, overwrite slice(1, 3*20, 3) with h and
  // slice(2, 3*20, 3) with w.
  std::vector<int> expected(64, 0);
  for (int i = 1; i < 60; i += 3) expected[static_cast<std::size_t>(i)] = 1;
  for (int i = 2; i < 60; i += 3) expected[static_cast<std::size_t>(i)] = 2;
  const AxisMap map = rotary::interleaved_mrope_axis_map(128, {24, 20, 20});
  EXPECT_EQ(axis_vector(map), expected);
  EXPECT_EQ(map.count(0), 24);
  EXPECT_EQ(map[60], 0);
  EXPECT_EQ(map[61], 0);  // ggml's IMROPE would send 61 and 62 to its 4th stream
  EXPECT_EQ(map[62], 0);
  // Qwen3-Omni style [11, 11, 10] over 32 pairs: every pair j -> j % 3
  const AxisMap small = rotary::interleaved_mrope_axis_map(64, {11, 11, 10});
  for (std::int64_t j = 0; j < 32; ++j) EXPECT_EQ(small[j], j % 3) << j;
}

TEST(MultiAxisMaps, Axial) {
  const AxisMap split = rotary::axial_axis_map(64, 2, rotary::AxialLayout::split);
  const AxisMap inter = rotary::axial_axis_map(64, 2, rotary::AxialLayout::interleaved);
  for (std::int64_t j = 0; j < 32; ++j) {
    EXPECT_EQ(split[j], j < 16 ? 0 : 1);
    EXPECT_EQ(inter[j], j % 2);
  }
  EXPECT_EQ(split, rotary::mrope_axis_map(64, {16, 16}));
  const AxisMap three = rotary::axial_axis_map(96, 3, rotary::AxialLayout::split);
  EXPECT_EQ(three, rotary::mrope_axis_map(96, {16, 16, 16}));
}

TEST(MultiAxisMaps, Frequencies) {
  const ld base = 10000.0L;
  // shared: base^(-2j/d) over the whole rotary_dim
  const AxisMap qwen = rotary::mrope_axis_map(128, {16, 24, 24});
  const rotary::Frequencies fs = rotary::axis_frequencies(qwen, 10000.0, AxisFrequencies::shared);
  for (std::size_t j = 0; j < 64; ++j)
    EXPECT_NEAR(fs.theta[j], static_cast<double>(std::pow(base, -2.0L * static_cast<ld>(j) / 128.0L)),
                1e-16 * fs.theta[j]);
  // per_axis on a 2-D split (Qwen2-VL vision, head_dim 80: HF VisionRotaryEmbedding(40), 20 freqs)
  const AxisMap vis = rotary::axial_axis_map(80, 2, rotary::AxialLayout::split);
  const rotary::Frequencies fv = rotary::axis_frequencies(vis, 10000.0, AxisFrequencies::per_axis);
  for (std::size_t j = 0; j < 40; ++j) {
    const auto k = static_cast<ld>(j % 20);
    EXPECT_NEAR(fv.theta[j], static_cast<double>(1.0L / std::pow(base, 2.0L * k / 40.0L)), 1e-16) << j;
  }
  // strided (Pixtral, head_dim 64): rows get freqs[::2], columns freqs[1::2] of base^(-2i/64)
  const AxisMap pix = rotary::axial_axis_map(64, 2, rotary::AxialLayout::split);
  const rotary::Frequencies fp = rotary::axis_frequencies(pix, 10000.0, AxisFrequencies::strided);
  for (std::size_t j = 0; j < 32; ++j) {
    const auto i = static_cast<ld>(j < 16 ? 2 * j : 2 * (j - 16) + 1);
    EXPECT_NEAR(fp.theta[j], static_cast<double>(1.0L / std::pow(base, 2.0L * i / 64.0L)), 1e-16) << j;
  }
}

// ---- positions ----------------------------------------------------------------------------------------

TEST(MultiAxisPositions, GridRasterAndMerge) {
  rotary::GridOptions o;
  o.start = 7;
  const std::vector<std::int64_t> g = rotary::grid_positions(2, 3, 4, 3, o);
  ASSERT_EQ(g.size(), 3u * 24u);
  for (std::int64_t f = 0; f < 2; ++f)
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t c = 0; c < 4; ++c) {
        const auto i = static_cast<std::size_t>(f * 12 + r * 4 + c);
        EXPECT_EQ(g[i], 7 + f);
        EXPECT_EQ(g[24 + i], 7 + r);
        EXPECT_EQ(g[48 + i], 7 + c);
      }
  // Qwen2-VL vision encoder order: hpos = arange(h)[:, None].expand(h, w)
  //   .reshape(h/m, m, w/m, m).permute(0, 2, 1, 3).flatten(), the same for wpos; repeat per frame.
  const std::int64_t h = 4;
  const std::int64_t w = 6;
  const std::int64_t m = 2;
  rotary::GridOptions om;
  om.merge = m;
  const std::vector<std::int64_t> v = rotary::grid_positions(2, h, w, 2, om);
  ASSERT_EQ(v.size(), 2u * 48u);
  std::vector<std::int64_t> hpos;
  std::vector<std::int64_t> wpos;
  for (std::int64_t a = 0; a < h / m; ++a)  // permuted dims: (h/m, w/m, m, m)
    for (std::int64_t b = 0; b < w / m; ++b)
      for (std::int64_t c = 0; c < m; ++c)
        for (std::int64_t d = 0; d < m; ++d) {
          const std::int64_t raster = (a * m + c) * w + (b * m + d);  // index into the (h, w) grid
          hpos.push_back(raster / w);
          wpos.push_back(raster % w);
        }
  for (std::size_t f = 0; f < 2; ++f)
    for (std::size_t i = 0; i < 24; ++i) {
      EXPECT_EQ(v[f * 24 + i], hpos[i]);
      EXPECT_EQ(v[48 + f * 24 + i], wpos[i]);
    }
  // Qwen2.5-VL temporal scaling: t = trunc(frame * second_per_grid * tokens_per_second)
  rotary::GridOptions ot;
  ot.temporal_scale = 0.5 * 2.0 * 1.5;
  const std::vector<std::int64_t> vt = rotary::grid_positions(4, 1, 1, 3, ot);
  EXPECT_EQ((std::vector<std::int64_t>{vt[0], vt[1], vt[2], vt[3]}), (std::vector<std::int64_t>{0, 1, 3, 4}));
}

TEST(MultiAxisPositions, BuilderFollowsGetRopeIndex) {
  // Qwen2-VL get_rope_index for [5 text, image grid (1, 2, 3), 2 text, video grid (2, 2, 2), 1 text]
  std::vector<std::vector<std::int64_t>> expected(3);
  std::int64_t st = 0;
  const auto text = [&](std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
      for (auto& s : expected) s.push_back(st + i);
    st += n;
  };
  const auto grid = [&](std::int64_t gt, std::int64_t gh, std::int64_t gw) {
    std::int64_t mx = 0;
    for (std::int64_t f = 0; f < gt; ++f)
      for (std::int64_t r = 0; r < gh; ++r)
        for (std::int64_t c = 0; c < gw; ++c) {
          expected[0].push_back(st + f);
          expected[1].push_back(st + r);
          expected[2].push_back(st + c);
          mx = std::max({mx, f, r, c});
        }
    st += mx + 1;  // llm_pos_ids_list[-1].max() + 1
  };
  text(5);
  grid(1, 2, 3);
  text(2);
  grid(2, 2, 2);
  text(1);
  rotary::MropePositionBuilder b;
  b.add_text(5).add_grid(1, 2, 3).add_text(2).add_grid(2, 2, 2).add_text(1);
  for (int a = 0; a < 3; ++a) EXPECT_EQ(b.stream(a), expected[static_cast<std::size_t>(a)]) << a;
  EXPECT_EQ(b.next_position(), st);
  EXPECT_EQ(b.tokens(), 5 + 6 + 2 + 8 + 1);
  EXPECT_EQ(b.rope_delta(), st - b.tokens());  // HF: max + 1 - len(input_ids)
  const AxisPositions p = b.positions();
  EXPECT_EQ(p.streams(), 3);
  EXPECT_EQ(p.tokens(), b.tokens());
  EXPECT_EQ(p(2, 6), expected[2][6]);
}

// Every way of passing the same positions gives the same bits.
TEST(MultiAxisPositions, LayoutsAgree) {
  std::mt19937_64 rng(rotary_test::seed());
  const rotary::RotarySpec spec(64, Pairing::half_split, 1e6);
  const MultiAxisRope<float> mrope(spec, rotary::mrope_axis_map(64, {8, 12, 12}), 1000);
  const std::int64_t tokens = 45;
  const std::int64_t heads = 3;
  std::vector<std::int64_t> planar(3 * tokens);
  for (auto& v : planar) v = static_cast<std::int64_t>(rng() % 1000);
  std::vector<std::int32_t> planar32(planar.begin(), planar.end());
  std::vector<std::int64_t> token_major(3 * tokens);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t a = 0; a < 3; ++a)
      token_major[static_cast<std::size_t>(t * 3 + a)] = planar[static_cast<std::size_t>(a * tokens + t)];
  Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm(3, tokens);
  Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic> cm(3, tokens);
  for (std::int64_t a = 0; a < 3; ++a)
    for (std::int64_t t = 0; t < tokens; ++t) {
      rm(a, t) = planar[static_cast<std::size_t>(a * tokens + t)];
      cm(a, t) = static_cast<std::int32_t>(rm(a, t));
    }
  const Eigen::Map<const Eigen::Matrix<std::int64_t, 3, Eigen::Dynamic>> cmap(token_major.data(), 3, tokens);
  const RowMatrix<float> x = random_rows<float>(tokens * heads, 64, rng);
  const std::vector<AxisPositions> forms = {
      AxisPositions(planar, 3),
      AxisPositions(planar32, 3),
      AxisPositions(planar.data(), 3, tokens),
      AxisPositions::token_major(token_major.data(), 3, tokens),
      AxisPositions::of_streams<std::int64_t>(
          {planar.data(), planar.data() + tokens, planar.data() + 2 * tokens}, tokens),
      AxisPositions(rm),
      AxisPositions(cm),
      AxisPositions(cmap),
  };
  RowMatrix<float> first;
  for (std::size_t i = 0; i < forms.size(); ++i) {
    RowMatrix<float> y(x.rows(), x.cols());
    rotary::apply(mrope, x, y, forms[i], heads);
    if (i == 0) {
      first = y;
      Geometry g{64, 64, Pairing::half_split, mrope.rope().cache().theta(), axis_vector(mrope.axis_map())};
      const double worst = check_rows<float>(
          g, Direction::forward, per_token(planar, 3), heads,
          [&x](std::int64_t r) { return x.row(r).data(); }, [&y](std::int64_t r) { return y.row(r).data(); },
          "planar");
      EXPECT_LE(worst, 1.0);
    } else {
      EXPECT_TRUE(same_bits(y, first)) << "form " << i;
    }
  }
}

// ---- model conventions, against transcriptions of the HF code ---------------------------------------

// x*cos + rotate_half(x)*sin over width d, with cos/sin of the given angles (length d), long double.
Eigen::VectorXd hf_rotate_half(const Eigen::VectorXd& x, const std::vector<ld>& emb) {
  const auto d = static_cast<Eigen::Index>(emb.size());
  Eigen::VectorXd y = x;
  for (Eigen::Index i = 0; i < d; ++i) {
    const ld rh = i < d / 2 ? -static_cast<ld>(x(i + d / 2)) : static_cast<ld>(x(i - d / 2));
    const ld a = emb[static_cast<std::size_t>(i)];
    y(i) = static_cast<double>(static_cast<ld>(x(i)) * std::cos(a) + rh * std::sin(a));
  }
  return y;
}

// Runs mrope on one token per position triple in f64 and compares with hf(x, p) to 1e-12 absolute
// for |x| <= 2 (exact angles vs long double angles at positions < 2^12 differ by ~1e-16).
template <class Hf>
void compare_with_hf(const MultiAxisRope<double>& mrope, const std::vector<std::vector<std::int64_t>>& p,
                     const Hf& hf, const char* what) {
  std::mt19937_64 rng(rotary_test::seed());
  const auto tokens = static_cast<std::int64_t>(p.size());
  const int streams = mrope.streams();
  std::vector<std::int64_t> planar(static_cast<std::size_t>(streams * tokens));
  for (std::int64_t t = 0; t < tokens; ++t)
    for (int a = 0; a < streams; ++a)
      planar[static_cast<std::size_t>(a * tokens + t)] =
          p[static_cast<std::size_t>(t)][static_cast<std::size_t>(a)];
  const RowMatrix<double> x = random_rows<double>(tokens, mrope.head_dim(), rng);
  RowMatrix<double> y(tokens, mrope.head_dim());
  rotary::apply(mrope, x, y, AxisPositions(planar, streams), 1);
  double worst = 0.0;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const Eigen::VectorXd ref = hf(Eigen::VectorXd(x.row(t).transpose()), p[static_cast<std::size_t>(t)]);
    for (Eigen::Index k = 0; k < ref.size(); ++k) worst = std::max(worst, std::fabs(y(t, k) - ref(k)));
  }
  std::printf("%s: max |y - HF| = %.3g (f64, |x| <= 2)\n", what, worst);
  EXPECT_LE(worst, 1e-12) << what;
}

TEST(MultiAxisModels, Qwen2VlMatchesHfMultimodalRotary) {
  const std::int64_t d = 128;
  const std::vector<std::int64_t> section = {16, 24, 24};
  const rotary::RotarySpec spec(d, Pairing::half_split, 1e6);
  const MultiAxisRope<double> mrope(spec, rotary::mrope_axis_map(d, section), 4096);
  const std::vector<double>& inv_freq = mrope.rope().cache().theta();
  rotary::MropePositionBuilder b;
  b.add_text(3).add_grid(2, 3, 4).add_text(2);
  std::vector<std::vector<std::int64_t>> p;
  for (std::int64_t t = 0; t < b.tokens(); ++t) p.push_back({b.stream(0)[t], b.stream(1)[t], b.stream(2)[t]});
  p.push_back({4000, 17, 3});  // far apart streams
  const auto hf = [&](const Eigen::VectorXd& x, const std::vector<std::int64_t>& pt) {
    // emb[a] = cat(freqs, freqs) of position p_a; split(mrope_section * 2); chunk i from emb[i % 3]
    std::vector<ld> cos_angle(static_cast<std::size_t>(d));
    std::vector<std::int64_t> sections2 = section;
    sections2.insert(sections2.end(), section.begin(), section.end());
    std::size_t i = 0;
    for (std::size_t chunk = 0; chunk < sections2.size(); ++chunk)
      for (std::int64_t n = 0; n < sections2[chunk]; ++n, ++i) {
        const std::size_t f = i % static_cast<std::size_t>(d / 2);
        cos_angle[i] = static_cast<ld>(pt[chunk % 3]) * static_cast<ld>(inv_freq[f]);
      }
    return hf_rotate_half(x, cos_angle);
  };
  compare_with_hf(mrope, p, hf, "Qwen2-VL mrope [16,24,24]");
}

TEST(MultiAxisModels, Qwen3VlMatchesHfInterleavedMrope) {
  const std::int64_t d = 128;
  const std::vector<std::int64_t> section = {24, 20, 20};
  const rotary::RotarySpec spec(d, Pairing::half_split, 5e6);
  const MultiAxisRope<double> mrope(spec, rotary::interleaved_mrope_axis_map(d, section), 4096);
  const std::vector<double>& inv_freq = mrope.rope().cache().theta();
  std::vector<std::vector<std::int64_t>> p = {{0, 0, 0}, {5, 5, 5},   {7, 7, 9},
                                              {7, 8, 9}, {7, 12, 30}, {4000, 1, 2}};
  const auto hf = [&](const Eigen::VectorXd& x, const std::vector<std::int64_t>& pt) {
    std::vector<ld> freqs_t(static_cast<std::size_t>(d / 2));
    for (std::size_t k = 0; k < freqs_t.size(); ++k)
      freqs_t[k] = static_cast<ld>(pt[0]) * static_cast<ld>(inv_freq[k]);
    for (std::size_t dim = 1; dim <= 2; ++dim) {  // offset = dim, slice(offset, section[dim] * 3, 3)
      const auto length = static_cast<std::size_t>(section[dim] * 3);
      for (std::size_t k = dim; k < std::min(length, freqs_t.size()); k += 3)
        freqs_t[k] = static_cast<ld>(pt[dim]) * static_cast<ld>(inv_freq[k]);
    }
    std::vector<ld> emb = freqs_t;
    emb.insert(emb.end(), freqs_t.begin(), freqs_t.end());
    return hf_rotate_half(x, emb);
  };
  compare_with_hf(mrope, p, hf, "Qwen3-VL interleaved mrope [24,20,20]");
}

TEST(MultiAxisModels, Qwen2VlVisionEncoder2D) {
  // HF Qwen2-VL vision: VisionRotaryEmbedding(head_dim / 2) (inv_freq base^(-2k/(head_dim/2))),
  // per patch [row * inv_freq, col * inv_freq], emb = cat(that, that), rotate_half over head_dim.
  const std::int64_t d = 80;  // Qwen2-VL vision head_dim (1280 / 16)
  rotary::RotarySpec spec(d, Pairing::half_split, 10000.0);
  const AxisMap map = rotary::axial_axis_map(d, 2, rotary::AxialLayout::split);
  spec.frequencies = rotary::axis_frequencies(map, 10000.0, AxisFrequencies::per_axis);
  for (const bool otf : {false, true}) {
    const rotary::Frequencies f = spec.frequencies;
    const MultiAxisRope<double> mrope = otf ? MultiAxisRope<double>(spec, f, map, rotary::OnTheFly{})
                                            : MultiAxisRope<double>(spec, f, map, 64);
    rotary::GridOptions o;
    o.merge = 2;
    const std::vector<std::int64_t> g = rotary::grid_positions(2, 4, 6, 2, o);
    const auto hf = [&](const Eigen::VectorXd& x, const std::vector<std::int64_t>& pt) {
      const std::int64_t axis_dim = d / 2;  // each axis is a 1-D RoPE of dim head_dim / 2
      std::vector<ld> rpe;
      for (std::size_t a = 0; a < 2; ++a)
        for (std::int64_t k = 0; k < axis_dim / 2; ++k)
          rpe.push_back(static_cast<ld>(pt[a]) /
                        std::pow(10000.0L, 2.0L * static_cast<ld>(k) / static_cast<ld>(axis_dim)));
      std::vector<ld> emb = rpe;
      emb.insert(emb.end(), rpe.begin(), rpe.end());
      return hf_rotate_half(x, emb);
    };
    compare_with_hf(mrope, per_token(g, 2), hf,
                    otf ? "Qwen2-VL vision 2-D (on the fly)" : "Qwen2-VL vision 2-D");
  }
}

TEST(MultiAxisModels, Pixtral2D) {
  // mistral-inference precompute_freqs_cis_2d: freqs = base^(-2i/d); rows use freqs[::2], columns
  // freqs[1::2]; per patch [row angles | column angles]; complex multiply on (x[2j], x[2j+1]).
  const std::int64_t d = 64;
  rotary::RotarySpec spec(d, Pairing::interleaved, 10000.0);
  const AxisMap map = rotary::axial_axis_map(d, 2, rotary::AxialLayout::split);
  spec.frequencies = rotary::axis_frequencies(map, 10000.0, AxisFrequencies::strided);
  const MultiAxisRope<double> mrope(spec, map, 64);
  const std::vector<std::int64_t> g = rotary::grid_positions(1, 5, 7, 2);
  const auto ref = [&](const Eigen::VectorXd& x, const std::vector<std::int64_t>& pt) {
    Eigen::VectorXd y = x;
    const std::int64_t row_pairs = d / 4;  // pairs [0, d/4) rotate by the row, the rest by the column
    for (std::int64_t j = 0; j < d / 2; ++j) {
      const bool row = j < row_pairs;
      const ld i = row ? 2.0L * static_cast<ld>(j) : 2.0L * static_cast<ld>(j - row_pairs) + 1.0L;
      const ld a = static_cast<ld>(pt[row ? 0 : 1]) / std::pow(10000.0L, 2.0L * i / d);
      const std::complex<ld> z = std::complex<ld>(x(2 * j), x(2 * j + 1)) * std::polar(1.0L, a);
      y(2 * j) = static_cast<double>(z.real());
      y(2 * j + 1) = static_cast<double>(z.imag());
    }
    return y;
  };
  compare_with_hf(mrope, per_token(g, 2), ref, "Pixtral 2-D");
}

// 3-D (t, h, w) video patches: 3 frames of 4 x 5 with temporal scale 2, under an axial 3-D map with
// per-axis frequencies and under M-RoPE sections, table and cache-free, against both references.
TEST(MultiAxisModels, Video3D) {
  std::mt19937_64 rng(rotary_test::seed());
  const std::int64_t d = 96;
  rotary::GridOptions o;
  o.start = 11;
  o.temporal_scale = 2.0;
  const std::vector<std::int64_t> g = rotary::grid_positions(3, 4, 5, 3, o);
  const std::int64_t tokens = 60;
  const std::int64_t heads = 2;
  const std::vector<AxisMap> maps = {rotary::axial_axis_map(d, 3, rotary::AxialLayout::split),
                                     rotary::mrope_axis_map(d, {16, 16, 16})};
  for (const AxisMap& map : maps)
    for (const bool otf : {false, true}) {
      rotary::RotarySpec spec(d, Pairing::half_split, 1e4);
      const rotary::Frequencies f = rotary::axis_frequencies(map, 1e4, AxisFrequencies::per_axis);
      spec.frequencies = f;
      const MultiAxisRope<float> mrope = otf ? MultiAxisRope<float>(spec, f, map, rotary::OnTheFly{})
                                             : MultiAxisRope<float>(spec, f, map, 64);
      const RowMatrix<float> x = random_rows<float>(tokens * heads, d, rng);
      RowMatrix<float> y(x.rows(), d);
      rotary::apply(mrope, x, y, AxisPositions(g, 3), heads);
      Geometry geo{d, d, Pairing::half_split, f.theta, axis_vector(map)};
      const double worst = check_rows<float>(
          geo, Direction::forward, per_token(g, 3), heads, [&x](std::int64_t r) { return x.row(r).data(); },
          [&y](std::int64_t r) { return y.row(r).data(); }, otf ? "video on the fly" : "video table");
      EXPECT_LE(worst, 1.0);
    }
  EXPECT_EQ(per_token(g, 3)[59],
            (std::vector<std::int64_t>{11 + 4, 11 + 3, 11 + 4}));  // frame 2, row 3, col 4
}

// ---- random shapes, every dtype, both modes, against matrix and complex references ---------------

struct RandomCase {
  std::int64_t head_dim;
  std::int64_t rotary_dim;
  std::int64_t tokens;
  std::int64_t heads;
  std::int64_t pad;
  std::size_t misalign;
  Direction dir;
};

// A random map: sections, interleaved, axial, or an arbitrary per-pair map (some with an unused
// stream, whose positions are garbage and must never be read).
AxisMap random_map(std::int64_t rotary_dim, std::mt19937_64& rng, bool& unused_stream) {
  const std::int64_t pairs = rotary_dim / 2;
  unused_stream = false;
  switch (rng() % 4) {
    case 0: {
      const std::int64_t s0 = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(pairs + 1));
      const std::int64_t s1 = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(pairs - s0 + 1));
      return rotary::mrope_axis_map(rotary_dim, {s0, s1, pairs - s0 - s1});
    }
    case 1:
      if (pairs % 2 == 0) return rotary::axial_axis_map(rotary_dim, 2, rotary::AxialLayout::interleaved);
      return rotary::mrope_axis_map(rotary_dim, {pairs});
    case 2: {
      std::vector<std::uint8_t> a(static_cast<std::size_t>(pairs));
      for (auto& v : a) v = static_cast<std::uint8_t>(rng() % 3);
      unused_stream = true;
      return AxisMap(a, 4);  // stream 3 unused
    }
    default: {
      std::vector<std::uint8_t> a(static_cast<std::size_t>(pairs));
      for (auto& v : a) v = static_cast<std::uint8_t>(rng() % 8);
      return AxisMap(a, 8);
    }
  }
}

template <class T>
using StridedMap = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
void random_cases(Pairing pairing, bool on_the_fly) {
  std::mt19937_64 rng(rotary_test::seed() + (on_the_fly ? 7u : 0u) +
                      (pairing == Pairing::interleaved ? 13u : 0u));
  double worst = 0.0;
  long cases = 0;
  for (const std::int64_t head_dim : rotary_test::head_dims()) {
    for (const double fraction : {1.0, 0.5}) {
      RandomCase c;
      c.head_dim = head_dim;
      c.rotary_dim = rotary_test::rotary_dim_for(head_dim, fraction);
      c.tokens = std::array<std::int64_t, 4>{1, 3, 17, 40}[rng() % 4];
      c.heads = std::array<std::int64_t, 3>{1, 2, 3}[rng() % 3];
      c.pad = static_cast<std::int64_t>(rng() % 3) * 5;
      c.misalign = rng() % 3;
      c.dir = rng() % 2 ? Direction::inverse : Direction::forward;
      bool unused = false;
      const AxisMap map = random_map(c.rotary_dim, rng, unused);
      const int streams = map.streams();
      // positions: int64 up to 2^40 on the fly; int32-range values listed in the table otherwise
      const std::int64_t max_pos = on_the_fly ? (std::int64_t{1} << 40) : 2147483647;
      std::vector<std::int64_t> planar(static_cast<std::size_t>(streams * c.tokens));
      for (int a = 0; a < streams; ++a)
        for (std::int64_t t = 0; t < c.tokens; ++t) {
          std::int64_t v = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_pos));
          if (t > 0 && rng() % 3 == 0) v = planar[static_cast<std::size_t>(a * c.tokens + t - 1)];  // repeat
          if (t > 0 && rng() % 3 == 0)
            v = planar[static_cast<std::size_t>(a * c.tokens + t - 1)] + 1;  // step
          if (unused && a == 3) v = -12345;
          planar[static_cast<std::size_t>(a * c.tokens + t)] = v;
        }
      if (c.tokens > 1) planar[1] = max_pos - 1;
      const rotary::RotarySpec spec(c.head_dim, pairing, std::array<double, 3>{1e4, 5e5, 1e6}[rng() % 3],
                                    c.rotary_dim);
      std::vector<std::int64_t> listed;
      for (int a = 0; a < streams; ++a)
        if (map.uses(a))
          listed.insert(listed.end(), planar.begin() + a * c.tokens, planar.begin() + (a + 1) * c.tokens);
      using C = rotary::compute_t<T>;
      const MultiAxisRope<T> mrope =
          on_the_fly ? MultiAxisRope<T>(spec, map, rotary::OnTheFly{})
                     : MultiAxisRope<T>(rotary::Rope<T>(spec, rotary::CosSinCache<C>::for_positions(
                                                                  rotary::compute_frequencies(spec), listed)),
                                        map);
      const std::int64_t rows = c.tokens * c.heads;
      const std::int64_t stride = c.head_dim + c.pad;
      const std::size_t n = static_cast<std::size_t>(rows * stride) + c.misalign;
      std::vector<T> in_buf(n);
      std::uniform_real_distribution<double> dist(-2.0, 2.0);
      for (auto& v : in_buf) v = static_cast<T>(dist(rng));
      std::vector<T> out_buf(n, T(0));
      std::vector<T> inplace_buf = in_buf;
      const StridedMap<T> in(in_buf.data() + c.misalign, rows, c.head_dim, Eigen::OuterStride<>(stride));
      StridedMap<T> out(out_buf.data() + c.misalign, rows, c.head_dim, Eigen::OuterStride<>(stride));
      StridedMap<T> inplace(inplace_buf.data() + c.misalign, rows, c.head_dim, Eigen::OuterStride<>(stride));
      const AxisPositions positions(planar, streams);
      rotary::apply(mrope, in, out, positions, c.heads, c.dir);
      rotary::apply(mrope, inplace, positions, c.heads, c.dir);
      for (std::int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(std::memcmp(out.row(r).data(), inplace.row(r).data(),
                              static_cast<std::size_t>(c.head_dim) * sizeof(T)),
                  0)
            << "in place != out of place, row " << r;
      if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
        // f16/bf16: the f32 computation on the same (widened) inputs and rows, rounded once
        const MultiAxisRope<float> mrope32(on_the_fly ? rotary::Rope<float>(spec, rotary::OnTheFly{})
                                                      : rotary::Rope<float>(spec, mrope.rope().cache()),
                                           map);
        const RowMatrix<float> in32 = in.template cast<float>();
        RowMatrix<float> out32(rows, c.head_dim);
        rotary::apply(mrope32, in32, out32, positions, c.heads, c.dir);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t k = 0; k < c.head_dim; ++k)
            ASSERT_EQ(bits_of(out(r, k)), bits_of(static_cast<T>(out32(r, k)))) << "row " << r << " k " << k;
      }
      Geometry g{c.head_dim, c.rotary_dim, pairing, mrope.rope().cache().theta(), axis_vector(map)};
      std::vector<std::vector<std::int64_t>> p = per_token(planar, streams);
      if (unused)
        for (auto& pt : p) pt[3] = 0;  // never used by the map; keeps max() meaningful
      const std::string what = rotary::detail::concat(
          "head_dim ", c.head_dim, " rotary_dim ", c.rotary_dim, " tokens ", c.tokens, " heads ", c.heads,
          " streams ", streams, c.dir == Direction::inverse ? " inverse" : " forward");
      worst = std::max(worst, check_rows<T>(
                                  g, c.dir, p, c.heads, [&in](std::int64_t r) { return in.row(r).data(); },
                                  [&out](std::int64_t r) { return out.row(r).data(); }, what));
      ++cases;
      if (::testing::Test::HasFailure()) return;
    }
  }
  std::printf("%s %s %s: %ld cases, max error %.3f of the bound\n",
              std::string(rotary::dtype_name<T>()).c_str(), std::string(rotary::to_string(pairing)).c_str(),
              on_the_fly ? "on-the-fly" : "table", cases, worst);
}

const char* dtype_label(int dtype) {
  static constexpr std::array<const char*, 4> kNames{"f32", "f64", "f16", "bf16"};
  return kNames.at(static_cast<std::size_t>(dtype));
}

class MultiAxisRandomShapes : public ::testing::TestWithParam<std::tuple<int, Pairing, bool>> {};

TEST_P(MultiAxisRandomShapes, MatchMatrixAndComplexReferences) {
  const auto [dtype, pairing, otf] = GetParam();
  switch (dtype) {
    case 0:
      random_cases<float>(pairing, otf);
      break;
    case 1:
      random_cases<double>(pairing, otf);
      break;
    case 2:
      random_cases<f16>(pairing, otf);
      break;
    default:
      random_cases<bf16>(pairing, otf);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(All, MultiAxisRandomShapes,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(Pairing::interleaved, Pairing::half_split),
                                            ::testing::Bool()),
                         [](const auto& p) {
                           return std::string(dtype_label(std::get<0>(p.param))) + "_" +
                                  std::string(rotary::to_string(std::get<1>(p.param))) +
                                  (std::get<2>(p.param) ? "_onthefly" : "_table");
                         });

}  // namespace
