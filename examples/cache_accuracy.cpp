// cache_accuracy: the error of cos/sin tables at large positions, rotary's exact reduction against
// the float-angle computation that HF transformers and ggml use (float(m) * float(theta)).
// Reference: long double angle and cosl/sinl (exact to ~1e-10 rad below 2^31 on x86-64).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include <rotary/rotary.hpp>

static int run() {
  const std::vector<std::int64_t> positions = {1 << 10, 1 << 20, 1 << 24, 2147483647};
  std::printf("max |cos/sin - exact| over base 1e4..1e7, rotary_dim 64..256\n");
  std::printf("%12s  %14s  %16s\n", "position", "rotary (f32)", "float angle (f32)");
  bool ok = true;
  for (const std::int64_t m : positions) {
    double ours = 0.0;
    double float_angle = 0.0;
    for (const double base : {1e4, 5e5, 1e6, 1e7}) {
      for (const std::int64_t d : {64, 128, 256}) {
        const rotary::Frequencies f = rotary::default_frequencies(d, base);
        const auto cache = rotary::CosSinCache<float>::for_positions(f, {m});
        for (std::int64_t j = 0; j < d / 2; ++j) {
          const double theta = f.theta[static_cast<std::size_t>(j)];
          const long double angle = static_cast<long double>(m) * theta;
          const double c = static_cast<double>(std::cos(angle));
          const double s = static_cast<double>(std::sin(angle));
          ours = std::max({ours, std::fabs(cache.cos(m)[j] - c), std::fabs(cache.sin(m)[j] - s)});
          const float fa = static_cast<float>(m) * static_cast<float>(theta);
          float_angle = std::max({float_angle, std::fabs(static_cast<double>(std::cos(fa)) - c),
                                  std::fabs(static_cast<double>(std::sin(fa)) - s)});
        }
      }
    }
    std::printf("%12lld  %14.3g  %16.3g\n", static_cast<long long>(m), ours, float_angle);
    ok = ok && ours <= 0x1p-24;
  }
  return ok ? 0 : 1;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {  // rotary::error and allocation failures: say what, exit 1
    std::fprintf(stderr, "cache_accuracy: %s\n", e.what());
    return 1;
  }
}
