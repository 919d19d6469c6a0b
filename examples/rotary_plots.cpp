// rotary-plots: figures of rotary/analysis.hpp as SVG files, with a minimal SVG writer of our own (no
// dependencies). Usage: rotary-plots [output_dir]   (default ./plots; created if missing)
//
//   decay_bases.svg         RoFormer's relative decay bound vs distance (log x), bases 1e4, 5e5, 1e6
//   decay_scaling.svg       the same for yarn (x4, theta 1e6, L0 32768) and llama3 (Llama-3.1) vs default
//   theta_spectra.svg       theta_j vs j (log y): default, linear, ntk, yarn, llama3, longrope-like rules
//   theta_ratio.svg         the same divided by the default theta_j (how each rule bends the spectrum)
//   attention_patterns.svg  a*(D)/a*(0), q = k = all ones, alpha in {0, 0.1, 0.5}, rho in {0, 1}
//   attention_envelope.svg  the envelope |a'(D) + i b'(D)| of a*(D) to D = 1e5, alpha in {0, 0.1, 0.5}
// Head dimension 128 throughout. The decay curves oscillate from one distance to the next, so each point
// is the mean over a log-spaced bin of distances (up to 64 distances sampled evenly inside the bin).
// Every series has at most 600 points and coordinates are written with 4 significant digits, so each
// file stays in the tens of kilobytes. Exit status 1 if a file cannot be written or a self-check fails.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <rotary/analysis.hpp>
#include <rotary/rotary.hpp>

namespace {

// ---- a minimal SVG line-plot writer -------------------------------------------------------------

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::string color;
  bool dashed = false;
};

struct Plot {
  std::string title, x_label, y_label;
  bool log_x = false;
  bool log_y = false;
  std::vector<Series> series;
};

constexpr std::size_t kMaxPoints = 600;

std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '&') {
      r += "&amp;";
    } else if (c == '<') {
      r += "&lt;";
    } else if (c == '>') {
      r += "&gt;";
    } else {
      r += c;
    }
  }
  return r;
}

std::string num(double v, const char* fmt = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Linear ticks at multiples of 1, 2 or 5 x 10^k, about five across [lo, hi].
std::vector<double> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = p;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * p;
    if (step >= raw) break;
  }
  // Count multiples of step (k * step, exactly 0 at k = 0) rather than adding step up, which
  // accumulates rounding and could drop the last tick.
  const auto k0 = static_cast<std::int64_t>(std::ceil(lo / step));
  const auto k1 = static_cast<std::int64_t>(std::floor(hi / step + 1e-9));
  std::vector<double> t;
  for (std::int64_t k = k0; k <= k1; ++k) t.push_back(static_cast<double>(k) * step);
  return t;
}

class Axis {
 public:
  // A log axis spans whole decades; a linear one is widened to ticks unless tight (then it spans the data).
  Axis(double lo, double hi, bool log, bool tight, double px0, double px1) : log_(log), px0_(px0), px1_(px1) {
    if (log) {
      lo_ = std::floor(std::log10(lo));
      hi_ = std::ceil(std::log10(hi));
    } else if (tight) {
      lo_ = lo;
      hi_ = hi;
    } else {
      const std::vector<double> t = linear_ticks(lo, hi);
      const double step = t.size() > 1 ? t[1] - t[0] : 1.0;
      lo_ = std::floor(lo / step) * step;
      hi_ = std::ceil(hi / step) * step;
    }
    if (hi_ <= lo_) hi_ = lo_ + 1.0;
  }
  double operator()(double v) const {
    const double u = log_ ? std::log10(v) : v;
    return px0_ + (u - lo_) / (hi_ - lo_) * (px1_ - px0_);
  }
  // (value, label, major) for every tick; log axes label decades and mark 2..9 as minor ticks (labelling
  // 2 and 5 too when the axis spans at most two decades).
  struct Tick {
    double value;
    std::string label;
    bool major;
  };
  std::vector<Tick> ticks() const {
    std::vector<Tick> t;
    if (log_) {
      for (auto e = static_cast<int>(lo_); e <= static_cast<int>(hi_); ++e) {
        const double v = std::pow(10.0, e);
        t.push_back({v,
                     e == 0   ? "1"
                     : e == 1 ? "10"
                              : "10<tspan dy=\"-6\" font-size=\"9\">" + std::to_string(e) + "</tspan>",
                     true});
        const bool few = hi_ - lo_ <= 2.0;
        if (e < static_cast<int>(hi_))
          for (int m = 2; m <= 9; ++m)
            t.push_back({m * v, few && (m == 2 || m == 5) ? num(m * v, "%g") : "", false});
      }
    } else {
      for (double v : linear_ticks(lo_, hi_)) t.push_back({v, num(v, "%g"), true});
    }
    return t;
  }

 private:
  bool log_;
  double lo_ = 0.0;
  double hi_ = 1.0;
  double px0_, px1_;
};

// At most kMaxPoints points, evenly spaced in index, first and last kept.
std::vector<std::size_t> sample(std::size_t n) {
  std::vector<std::size_t> idx;
  if (n <= kMaxPoints) {
    for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (std::size_t k = 0; k < kMaxPoints; ++k) idx.push_back(k * (n - 1) / (kMaxPoints - 1));
  }
  return idx;
}

// Characters, not bytes, of a UTF-8 string (for the legend's width).
std::size_t glyphs(const std::string& s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string render(const Plot& p) {
  std::size_t longest = 0;
  for (const Series& s : p.series) longest = std::max(longest, glyphs(s.name));
  const double right = 700;  // the legend sits to the right of the plot area
  const double width = right + 64 + 7.0 * static_cast<double>(longest);
  const double height = 460;
  const double left = 78;
  const double top = 44;
  const double bottom = 400;
  double xlo = 1e300, xhi = -1e300, ylo = 1e300, yhi = -1e300;
  for (const Series& s : p.series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if ((p.log_x && !(s.x[i] > 0)) || (p.log_y && !(s.y[i] > 0))) continue;
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
    }
  const Axis ax(xlo, xhi, p.log_x, true, left, right);
  const Axis ay(ylo, yhi, p.log_y, false, bottom, top);

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << ' ' << height
    << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<defs><clipPath id=\"plot\"><rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << right - left
    << "\" height=\"" << bottom - top << "\"/></clipPath></defs>\n"
    << "<text x=\"" << (left + right) / 2
    << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << escape(p.title)
    << "</text>\n";
  // Grid and ticks.
  o << "<g stroke=\"#000\" stroke-width=\"1\">\n";
  for (const Axis::Tick& t : ax.ticks()) {
    const double x = ax(t.value);
    if (x < left - 0.5 || x > right + 0.5) continue;
    if (t.major)
      o << "<line x1=\"" << num(x) << "\" y1=\"" << top << "\" x2=\"" << num(x) << "\" y2=\"" << bottom
        << "\" stroke=\"#e4e4e4\"/>\n";
    o << "<line x1=\"" << num(x) << "\" y1=\"" << bottom << "\" x2=\"" << num(x) << "\" y2=\""
      << bottom + (t.major ? 6 : 3) << "\"/>\n";
  }
  for (const Axis::Tick& t : ay.ticks()) {
    const double y = ay(t.value);
    if (y < top - 0.5 || y > bottom + 0.5) continue;
    if (t.major)
      o << "<line x1=\"" << left << "\" y1=\"" << num(y) << "\" x2=\"" << right << "\" y2=\"" << num(y)
        << "\" stroke=\"#e4e4e4\"/>\n";
    o << "<line x1=\"" << left - (t.major ? 6 : 3) << "\" y1=\"" << num(y) << "\" x2=\"" << left << "\" y2=\""
      << num(y) << "\"/>\n";
  }
  o << "</g>\n<g>\n";
  for (const Axis::Tick& t : ax.ticks()) {
    const double x = ax(t.value);
    if (!t.label.empty() && x >= left - 0.5 && x <= right + 0.5)
      o << "<text x=\"" << num(x) << "\" y=\"" << bottom + 20 << "\" text-anchor=\"middle\">" << t.label
        << "</text>\n";
  }
  for (const Axis::Tick& t : ay.ticks()) {
    const double y = ay(t.value);
    if (!t.label.empty() && y >= top - 0.5 && y <= bottom + 0.5)
      o << "<text x=\"" << left - 9 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">" << t.label
        << "</text>\n";
  }
  o << "</g>\n"
    << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << right - left << "\" height=\""
    << bottom - top << "\" fill=\"none\" stroke=\"#000\"/>\n"
    << "<text x=\"" << (left + right) / 2 << "\" y=\"" << bottom + 42
    << "\" text-anchor=\"middle\" font-size=\"13\">" << escape(p.x_label) << "</text>\n"
    << "<text transform=\"translate(20 " << (top + bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">" << escape(p.y_label) << "</text>\n";
  // Series, clipped to the plot area.
  o << "<g clip-path=\"url(#plot)\" fill=\"none\" stroke-width=\"1.6\" stroke-linejoin=\"round\">\n";
  for (const Series& s : p.series) {
    o << "<polyline stroke=\"" << s.color << '"' << (s.dashed ? " stroke-dasharray=\"6 4\"" : "")
      << " points=\"";
    bool first = true;
    for (std::size_t i : sample(s.x.size())) {
      if ((p.log_x && !(s.x[i] > 0)) || (p.log_y && !(s.y[i] > 0))) continue;
      o << (first ? "" : " ") << num(ax(s.x[i])) << ',' << num(ay(s.y[i]));
      first = false;
    }
    o << "\"/>\n";
  }
  o << "</g>\n";
  // Legend.
  double ly = top + 8;
  for (const Series& s : p.series) {
    o << "<line x1=\"" << right + 16 << "\" y1=\"" << ly << "\" x2=\"" << right + 46 << "\" y2=\"" << ly
      << "\" stroke=\"" << s.color << "\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6 4\"" : "")
      << "/>\n"
      << "<text x=\"" << right + 52 << "\" y=\"" << ly + 4 << "\">" << escape(s.name) << "</text>\n";
    ly += 20;
  }
  o << "</svg>\n";
  return o.str();
}

bool write(const std::filesystem::path& dir, const std::string& name, const Plot& p) {
  const std::string svg = render(p);
  std::ofstream f(dir / name, std::ios::binary);
  f << svg;
  f.close();
  if (!f) {
    std::cerr << "rotary-plots: cannot write " << (dir / name).string() << "\n";
    return false;
  }
  std::printf("wrote %s (%zu series, %zu bytes)\n", (dir / name).string().c_str(), p.series.size(),
              svg.size());
  return true;
}

// ---- the figures ------------------------------------------------------------------------------

const char* const kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};

constexpr std::int64_t kHeadDim = 128;

std::vector<double> to_double(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

// Bin edges g_0 < g_1 < ... (log-spaced); point i is the mean of f over up to 64 distances in [g_i, g_{i+1}).
template <class F>
Series binned(const std::string& name, const std::vector<std::int64_t>& edges, const F& f) {
  Series s;
  s.name = name;
  for (std::size_t i = 0; i + 1 < edges.size(); ++i) {
    const std::int64_t lo = edges[i];
    const std::int64_t span = edges[i + 1] - lo;
    const std::int64_t step = std::max<std::int64_t>(1, span / 64);
    const std::vector<double> v = f(rotary::linear_distances(lo, edges[i + 1] - 1, step));
    double sum = 0.0;
    for (double b : v) sum += b;
    s.x.push_back(static_cast<double>(lo) + static_cast<double>(span - 1) / 2.0);
    s.y.push_back(sum / static_cast<double>(v.size()));
  }
  return s;
}

Series decay_series(const std::string& name, const std::vector<double>& theta,
                    const std::vector<std::int64_t>& edges) {
  return binned(name, edges,
                [&](const std::vector<std::int64_t>& d) { return rotary::decay_bound(theta, d); });
}

rotary::ScalingInput input(std::int64_t max_positions) {
  rotary::ScalingInput in;
  in.head_dim = kHeadDim;
  in.max_position_embeddings = max_positions;
  return in;
}

rotary::RopeParameters yarn(double theta, double factor, std::int64_t l0) {
  rotary::RopeParameters p;
  p.rope_type = "yarn";
  p.rope_theta = theta;
  p.factor = factor;
  p.original_max_position_embeddings = l0;
  return p;
}

rotary::RopeParameters llama31() {
  rotary::RopeParameters p;
  p.rope_type = "llama3";
  p.rope_theta = 500000.0;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 8192;
  return p;
}

void style(Plot& p) {
  for (std::size_t i = 0; i < p.series.size(); ++i) p.series[i].color = kColors[i % 7];
}

Plot decay_bases(const std::vector<std::int64_t>& edges) {
  Plot p{"Long-range decay of RoPE (RoFormer §3.4.3), head_dim 128",
         "relative distance Δ (mean over log-spaced bins)",
         "relative upper bound (1/(d/2)) Σ|S_j|",
         true,
         false,
         {}};
  for (const auto& [name, base] :
       {std::pair<const char*, double>{"base 1e4", 1e4}, {"base 5e5", 5e5}, {"base 1e6", 1e6}})
    p.series.push_back(decay_series(name, rotary::default_frequencies(kHeadDim, base).theta, edges));
  style(p);
  return p;
}

Plot decay_scaling(const std::vector<std::int64_t>& edges) {
  Plot p{"Decay bound under context-extension rules, head_dim 128",
         "relative distance Δ (mean over log-spaced bins)",
         "relative upper bound (1/(d/2)) Σ|S_j|",
         true,
         false,
         {}};
  p.series.push_back(decay_series("default, θ 1e6", rotary::default_frequencies(kHeadDim, 1e6).theta, edges));
  p.series.push_back(decay_series("yarn ×4, θ 1e6, L0 32768",
                                  rotary::scaled_frequencies(yarn(1e6, 4.0, 32768), input(131072)).theta,
                                  edges));
  p.series.push_back(decay_series("default, θ 5e5", rotary::default_frequencies(kHeadDim, 5e5).theta, edges));
  p.series.push_back(
      decay_series("llama3 (Llama-3.1)", rotary::scaled_frequencies(llama31(), input(131072)).theta, edges));
  style(p);
  p.series[2].dashed = true;
  p.series[3].dashed = true;
  return p;
}

// Every rule at factor 8 over L0 = 8192 with rope_theta 5e5, so the curves differ by the rule only.
std::vector<std::pair<std::string, std::vector<double>>> spectra() {
  const double theta = 500000.0;
  const double s = 8.0;
  const std::int64_t l0 = 8192;
  std::vector<std::pair<std::string, std::vector<double>>> v;
  rotary::RopeParameters p;
  p.rope_theta = theta;
  v.emplace_back("default", rotary::scaled_frequencies(p, input(l0)).theta);
  p.rope_type = "linear";
  p.factor = s;
  v.emplace_back("linear ×8", rotary::scaled_frequencies(p, input(l0)).theta);
  p.rope_type = "ntk";
  v.emplace_back("ntk ×8", rotary::scaled_frequencies(p, input(l0)).theta);
  v.emplace_back("yarn ×8", rotary::scaled_frequencies(yarn(theta, s, l0), input(l0 * 8)).theta);
  v.emplace_back("llama3 (Llama-3.1)", rotary::scaled_frequencies(llama31(), input(l0 * 16)).theta);
  rotary::RopeParameters lr;  // longrope with synthetic smooth factors rising from 1 to 8
  lr.rope_type = "longrope";
  lr.rope_theta = theta;
  lr.original_max_position_embeddings = l0;
  const std::int64_t pairs = kHeadDim / 2;
  for (std::int64_t j = 0; j < pairs; ++j) {
    const double u = static_cast<double>(j) / static_cast<double>(pairs - 1);
    lr.long_factor.push_back(1.0 + (s - 1.0) * u * u * (3.0 - 2.0 * u));
  }
  lr.short_factor = lr.long_factor;
  rotary::ScalingInput in = input(l0 * 8);
  in.seq_len = l0 * 8;
  v.emplace_back("longrope (synthetic factors 1→8)", rotary::scaled_frequencies(lr, in).theta);
  return v;
}

Plot theta_spectra(bool ratio) {
  Plot p{ratio ? "Frequencies relative to default, rope_theta 5e5, factor 8, L0 8192"
               : "Frequency spectra of the scaling rules, rope_theta 5e5, factor 8, L0 8192",
         "pair index j (head_dim 128)",
         ratio ? "θ_j / θ_j(default)" : "θ_j (radians per position)",
         false,
         true,
         {}};
  const auto v = spectra();
  for (const auto& [name, theta] : v) {
    Series s;
    s.name = name;
    for (std::size_t j = 0; j < theta.size(); ++j) {
      s.x.push_back(static_cast<double>(j));
      s.y.push_back(ratio ? theta[j] / v[0].second[j] : theta[j]);
    }
    p.series.push_back(std::move(s));
  }
  style(p);
  return p;
}

struct Variant {
  double alpha, rho;
};
const Variant kVariants[] = {{0.0, 1.0}, {0.1, 0.0}, {0.1, 1.0}, {0.5, 0.0}, {0.5, 1.0}};

std::string variant_name(const Variant& v) {
  if (v.alpha == 0.0) return "α = 0 (RoPE)";
  return "α = " + num(v.alpha, "%g") + ", ρ = " + num(v.rho, "%g");
}

rotary::RotarySpec variant_spec(const Variant& v) {
  rotary::RotarySpec spec(kHeadDim, rotary::Pairing::half_split, 10000.0);
  spec.receptive_field = rotary::ReceptiveField{v.alpha, v.rho};
  return spec;
}

Plot attention_patterns() {
  Plot p{"Attention pattern a*(Δ) of the α/ρ variant, q = k = 1, base 1e4, head_dim 128",
         "relative distance Δ",
         "a*(Δ) / a*(0)",
         false,
         false,
         {}};
  const std::vector<std::int64_t> d = rotary::linear_distances(0, 256);
  for (const Variant& v : kVariants) {
    const rotary::AttentionPattern a = rotary::attention_pattern(variant_spec(v), d);
    Series s;
    s.name = variant_name(v);
    s.x = to_double(d);
    for (double y : a.a_star) s.y.push_back(y / a.a_star[0]);
    p.series.push_back(std::move(s));
  }
  style(p);
  p.series[2].dashed = true;
  p.series[4].dashed = true;
  return p;
}

// a*(D) = Re(e^{i D phi} (a' + i b')): a carrier at phi modulating the RoPE score with frequencies
// (1 - alpha) theta_j, so |a' + i b'| is the envelope of a*; it depends on alpha only (rho sets the carrier).
Plot attention_envelope(const std::vector<std::int64_t>& edges) {
  Plot p{"Envelope |a'(Δ) + i b'(Δ)| of the α/ρ score (depends on α only), q = k = 1, base 1e4",
         "relative distance Δ (mean over log-spaced bins)",
         "envelope / a*(0)",
         true,
         true,
         {}};
  for (double alpha : {0.0, 0.1, 0.5}) {
    const rotary::RotarySpec spec = variant_spec({alpha, 1.0});
    p.series.push_back(binned("α = " + num(alpha, "%g"), edges, [&](const std::vector<std::int64_t>& d) {
      const rotary::AttentionPattern a = rotary::attention_pattern(spec, d);
      std::vector<double> r;
      for (std::size_t i = 0; i < d.size(); ++i)
        r.push_back(std::hypot(a.a_prime[i], a.b_prime[i]) / static_cast<double>(kHeadDim));  // a*(0) = d
      return r;
    }));
  }
  style(p);
  return p;
}

// Cheap checks that the numbers behind the figures are what the math says.
bool self_check() {
  bool ok = true;
  const std::vector<double> theta = rotary::default_frequencies(kHeadDim, 1e4).theta;
  const double n = static_cast<double>(theta.size());
  if (rotary::decay_bound(theta, 0) != (n + 1) / 2) {
    std::cerr << "self-check: decay bound at 0 is not (n+1)/2\n";
    ok = false;
  }
  const rotary::AttentionPattern a = rotary::attention_pattern(variant_spec({0.5, 0.0}), {0, 7, 1000});
  for (std::size_t i = 0; i < a.deltas.size(); ++i) {
    const double dphi = static_cast<double>(a.deltas[i]) * a.phi;
    if (std::fabs(a.a_star[i] - (std::cos(dphi) * a.a_prime[i] - std::sin(dphi) * a.b_prime[i])) >
        1e-10 * kHeadDim) {
      std::cerr << "self-check: a* = cos(D phi) a' - sin(D phi) b' fails at D = " << a.deltas[i] << "\n";
      ok = false;
    }
  }
  if (a.a_star[0] != static_cast<double>(kHeadDim)) {
    std::cerr << "self-check: a*(0) != head_dim for q = k = 1\n";
    ok = false;
  }
  return ok;
}

int run(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
    std::cerr << "usage: rotary-plots [output_dir]   (default ./plots)\n";
    return argc > 2 ? 2 : 0;
  }
  const std::filesystem::path dir = argc == 2 ? argv[1] : "plots";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "rotary-plots: cannot create " << dir.string() << ": " << ec.message() << "\n";
    return 1;
  }
  if (!self_check()) return 1;
  const std::vector<std::int64_t> decay_edges = rotary::log_distances(1, 1000000, 400);
  const std::vector<std::int64_t> pattern_edges = rotary::log_distances(1, 100000, 300);
  bool ok = true;
  ok &= write(dir, "decay_bases.svg", decay_bases(decay_edges));
  ok &= write(dir, "decay_scaling.svg", decay_scaling(decay_edges));
  ok &= write(dir, "theta_spectra.svg", theta_spectra(false));
  ok &= write(dir, "theta_ratio.svg", theta_spectra(true));
  ok &= write(dir, "attention_patterns.svg", attention_patterns());
  ok &= write(dir, "attention_envelope.svg", attention_envelope(pattern_edges));
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // rotary::error, filesystem and allocation failures: say what, exit 1
    std::cerr << "rotary-plots: " << e.what() << "\n";
    return 1;
  }
}
