// rotary_bench: a small SVG line-plot writer for the throughput figure (report.cpp). Side-by-side
// panels sharing a log x axis and a linear y axis from 0, one legend under them. Our own code with
// no dependency: the benchmark machines have only the Debian packages the project installs.
#pragma once

#include <string>
#include <vector>

namespace rotary_bench {

struct SvgSeries {
  std::string name;   // legend text (the legend lists the first panel's series)
  std::string color;  // any SVG color
  bool dashed = false;
  std::vector<double> x, y;  // x > 0 (log axis); points drawn as markers joined by a line
};

struct SvgPanel {
  std::string title;
  std::vector<SvgSeries> series;
};

struct SvgFigure {
  std::string title;
  std::vector<std::string> subtitles;  // one line each, under the title
  std::string x_label, y_label;
  std::vector<SvgPanel> panels;
};

// The figure as a standalone SVG document.
std::string render_svg(const SvgFigure& figure);

}  // namespace rotary_bench
