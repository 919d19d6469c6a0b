// rotary_bench: the SVG writer declared in svg_plot.hpp. Coordinates are written with one decimal
// (a tenth of a pixel), so a figure of a few hundred points stays small enough to commit.
#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace rotary_bench {
namespace {

std::string escape(const std::string& s) {
  std::string r;
  for (const char c : s) {
    if (c == '&')
      r += "&amp;";
    else if (c == '<')
      r += "&lt;";
    else if (c == '>')
      r += "&gt;";
    else if (c == '"')
      r += "&quot;";
    else
      r += c;
  }
  return r;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A step of 1, 2 or 5 x 10^k giving about five intervals over [0, hi].
double nice_step(double hi) {
  const double raw = hi / 5.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10.0 * p;
}

}  // namespace

std::string render_svg(const SvgFigure& f) {
  // Data range over every panel: one scale, so the panels compare at a glance.
  double xlo = 1e300, xhi = -1e300, yhi = 0;
  for (const SvgPanel& p : f.panels)
    for (const SvgSeries& s : p.series)
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!(s.x[i] > 0) || !std::isfinite(s.y[i])) continue;
        xlo = std::min(xlo, s.x[i]);
        xhi = std::max(xhi, s.x[i]);
        yhi = std::max(yhi, s.y[i]);
      }
  if (xlo > xhi) xlo = xhi = 1;
  const double decade_lo = std::floor(std::log10(xlo));
  const double decade_hi = std::max(decade_lo + 1, std::ceil(std::log10(xhi)));
  const double step = yhi > 0 ? nice_step(yhi) : 1.0;
  const double ytop = std::max(step, std::ceil(yhi / step) * step);
  const int decades = static_cast<int>(decade_hi - decade_lo);      // whole numbers: integer loop counters
  const int ysteps = static_cast<int>(std::lround(ytop / step));

  const double panel_w = 330, panel_h = 280, gap = 30, margin_left = 70;
  const double head = 40.0 + 16.0 * static_cast<double>(f.subtitles.size()) + 24;  // titles
  const double n = static_cast<double>(std::max<std::size_t>(1, f.panels.size()));
  const double width = margin_left + n * panel_w + (n - 1) * gap + 20;
  std::size_t legend_items = f.panels.empty() ? 0 : f.panels.front().series.size();
  const double legend_rows = std::ceil(static_cast<double>(legend_items) / 2.0);
  const double height = head + panel_h + 50 + 20 * legend_rows + 10;

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << ' ' << height
    << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << width / 2
    << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << escape(f.title)
    << "</text>\n";
  for (std::size_t i = 0; i < f.subtitles.size(); ++i)
    o << "<text x=\"" << width / 2 << "\" y=\"" << 44 + 16 * static_cast<double>(i)
      << "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#333\">" << escape(f.subtitles[i]) << "</text>\n";

  const double top = head;
  const double bottom = head + panel_h;
  for (std::size_t pi = 0; pi < f.panels.size(); ++pi) {
    const SvgPanel& p = f.panels[pi];
    const double left = margin_left + static_cast<double>(pi) * (panel_w + gap);
    const double right = left + panel_w;
    auto px = [&](double x) {
      return left + (std::log10(x) - decade_lo) / (decade_hi - decade_lo) * panel_w;
    };
    auto py = [&](double y) { return bottom - y / ytop * panel_h; };
    o << "<text x=\"" << (left + right) / 2 << "\" y=\"" << top - 8
      << "\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">" << escape(p.title) << "</text>\n";
    // Grid, ticks and their labels.
    o << "<g stroke=\"#000\">\n";
    for (int ei = 0; ei <= decades; ++ei) {
      const double e = decade_lo + ei;
      const double x = px(std::pow(10.0, e));
      o << "<line x1=\"" << num(x) << "\" y1=\"" << top << "\" x2=\"" << num(x) << "\" y2=\"" << bottom
        << "\" stroke=\"#e4e4e4\"/>\n<line x1=\"" << num(x) << "\" y1=\"" << bottom << "\" x2=\"" << num(x)
        << "\" y2=\"" << bottom + 6 << "\"/>\n";
      for (int m = 2; m <= 9 && e < decade_hi; ++m) {
        const double xm = px(m * std::pow(10.0, e));
        o << "<line x1=\"" << num(xm) << "\" y1=\"" << bottom << "\" x2=\"" << num(xm) << "\" y2=\""
          << bottom + 3 << "\"/>\n";
      }
    }
    for (int yi = 0; yi <= ysteps; ++yi) {
      const double y = yi * step;
      o << "<line x1=\"" << left << "\" y1=\"" << num(py(y)) << "\" x2=\"" << right << "\" y2=\""
        << num(py(y)) << "\" stroke=\"#e4e4e4\"/>\n<line x1=\"" << left - 6 << "\" y1=\"" << num(py(y))
        << "\" x2=\"" << left << "\" y2=\"" << num(py(y)) << "\"/>\n";
    }
    o << "</g>\n<g>\n";
    for (int ei = 0; ei <= decades; ++ei) {
      const double e = decade_lo + ei;
      char label[32];
      std::snprintf(label, sizeof label, "%.0f", std::pow(10.0, e));
      o << "<text x=\"" << num(px(std::pow(10.0, e))) << "\" y=\"" << bottom + 20
        << "\" text-anchor=\"middle\">" << label << "</text>\n";
    }
    if (pi == 0) {
      for (int yi = 0; yi <= ysteps; ++yi) {
        const double y = yi * step;
        char label[32];
        std::snprintf(label, sizeof label, "%g", y);
        o << "<text x=\"" << left - 9 << "\" y=\"" << num(py(y) + 4) << "\" text-anchor=\"end\">" << label
          << "</text>\n";
      }
    }
    o << "</g>\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << panel_w << "\" height=\""
      << panel_h << "\" fill=\"none\" stroke=\"#000\"/>\n"
      << "<text x=\"" << (left + right) / 2 << "\" y=\"" << bottom + 40
      << "\" text-anchor=\"middle\" font-size=\"13\">" << escape(f.x_label) << "</text>\n";
    // Series: a line through the points, and a marker on each.
    for (const SvgSeries& s : p.series) {
      std::string points;
      std::string markers;
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!(s.x[i] > 0) || !std::isfinite(s.y[i])) continue;
        const std::string x = num(px(s.x[i]));
        const std::string y = num(py(s.y[i]));
        if (!points.empty()) points += ' ';
        points += x;
        points += ',';
        points += y;
        markers += "<circle cx=\"";
        markers += x;
        markers += "\" cy=\"";
        markers += y;
        markers += "\" r=\"2.6\"/>";
      }
      o << "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"" << s.color << '"'
        << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"" << points << "\"/>\n"
        << "<g fill=\"" << s.color << "\">" << markers << "</g>\n";
    }
  }
  o << "<text transform=\"translate(20 " << (top + bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">" << escape(f.y_label) << "</text>\n";
  // Legend: the first panel's series, two per row.
  if (!f.panels.empty()) {
    const std::vector<SvgSeries>& series = f.panels.front().series;
    for (std::size_t i = 0; i < series.size(); ++i) {
      const double x = margin_left + static_cast<double>(i % 2) * 360;
      const double y = bottom + 62 + 20 * static_cast<double>(i / 2);  // NOLINT(bugprone-integer-division): rows
      const SvgSeries& s = series[i];
      o << "<line x1=\"" << x << "\" y1=\"" << y << "\" x2=\"" << x + 30 << "\" y2=\"" << y << "\" stroke=\""
        << s.color << "\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n"
        << "<text x=\"" << x + 38 << "\" y=\"" << y + 4 << "\">" << escape(s.name) << "</text>\n";
    }
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace rotary_bench
