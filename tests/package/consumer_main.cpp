// rotary packaging tests: the one program every consumer project builds (add_subdirectory,
// FetchContent, find_package), header-only and (find_package's consumer_kernels) linking rotary::kernels;
// ROTARY_CONSUMER_MODE names the mode.
// Exits non-zero if rotating 2 tokens x 2 heads of 64 changes any row's norm (relative 1e-5), or
// changes nothing at all.
#include <rotary/rotary.hpp>

// The consumer_kernels programs link rotary::kernels, whose interface must define this.
#if defined(ROTARY_CONSUMER_EXPECT_SEPARATE_KERNELS) && !defined(ROTARY_SEPARATE_KERNELS)
#error "rotary::kernels did not pass ROTARY_SEPARATE_KERNELS on to its user"
#endif

#include <cmath>
#include <cstdio>
#include <exception>

int main() {
  try {
    const rotary::Rope<float> rope(rotary::RotarySpec(64), /*max_position=*/16);
    rotary::RowMatrix<float> x(4, 64);  // 2 tokens x 2 heads, head_dim 64
    for (Eigen::Index r = 0; r < x.rows(); ++r)
      for (Eigen::Index c = 0; c < x.cols(); ++c)
        x(r, c) = static_cast<float>(std::sin(0.37 * static_cast<double>(r * x.cols() + c) + 0.1));
    const rotary::RowMatrix<float> before = x;

    rotary::apply(rope, x, rotary::Positions::contiguous(0), /*heads=*/2);

    int failures = 0;
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
      const double n0 = before.row(r).cast<double>().norm();
      const double n1 = x.row(r).cast<double>().norm();
      const double rel = std::abs(n1 - n0) / n0;
      if (!(rel <= 1e-5)) {
        std::fprintf(stderr, "row %d: norm %.9g -> %.9g (relative change %.3g > 1e-5)\n",
                     static_cast<int>(r), n0, n1, rel);
        ++failures;
      }
    }
    // Rows 2 and 3 are token 1 (position 1): an apply() that did nothing must not pass.
    const float moved = (x.bottomRows(2) - before.bottomRows(2)).cwiseAbs().maxCoeff();
    if (!(moved > 1e-3f)) {
      std::fprintf(stderr, "position 1 rows did not rotate (max change %g)\n", static_cast<double>(moved));
      ++failures;
    }
    std::printf("rotary %d.%d.%d via " ROTARY_CONSUMER_MODE ": %s\n", ROTARY_VERSION_MAJOR, ROTARY_VERSION_MINOR,
                ROTARY_VERSION_PATCH, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exception: %s\n", e.what());
    return 1;
  }
}
