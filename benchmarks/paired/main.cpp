// rotary's paired timing harness (run.sh): every case of cases.cpp in both variants, timed in
// alternating batches of calls (the order reversed every round), so that the machine's drift falls on
// both sides of each ratio alike. Prints per case the median time of a call in each variant, and the
// median, 25th and 75th percentile of the per-round ratio new / old; then, per variant, unfused /
// fused for every op (>= 1: the fused call is as fast).
//   paired [rounds [calls per batch [filter]]]     (filter: a substring of the case names)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

std::map<std::string, std::function<void()>> make_old();
std::map<std::string, std::function<void()>> make_new();

// The cases' tensors: one arena, rewound before the second variant makes its cases, so that each
// case's tensors sit at the same addresses in both (cases.cpp's Buffer).
namespace {
constexpr std::size_t kArenaBytes = std::size_t{1} << 28;
unsigned char* g_arena = nullptr;
std::size_t g_arena_used = 0;
}  // namespace

void* paired_arena_take(std::size_t n) {
  if (g_arena == nullptr) g_arena = static_cast<unsigned char*>(std::aligned_alloc(4096, kArenaBytes));
  const std::size_t at = (g_arena_used + 63) / 64 * 64;
  if (g_arena == nullptr || at + n > kArenaBytes) {
    std::fprintf(stderr, "paired: the arena (%zu bytes) is too small\n", kArenaBytes);
    std::exit(2);
  }
  g_arena_used = at + n;
  return g_arena + at;
}

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 300;
  const int batch = argc > 2 ? std::atoi(argv[2]) : 50;
  const std::string filter = argc > 3 ? argv[3] : "";
  auto old_cases = make_old();
  g_arena_used = 0;
  auto new_cases = make_new();
  // a substring of the names, or with a trailing '$' their end ("tokens:1$": not tokens:16)
  const bool at_end = !filter.empty() && filter.back() == '$';
  const std::string part = at_end ? filter.substr(0, filter.size() - 1) : filter;
  const auto matches = [&](const std::string& name) {
    if (!at_end) return name.find(part) != std::string::npos;
    return name.size() >= part.size() && name.compare(name.size() - part.size(), part.size(), part) == 0;
  };
  std::vector<std::string> names;
  for (const auto& entry : new_cases)
    if (old_cases.count(entry.first) != 0 && matches(entry.first)) names.push_back(entry.first);
  if (names.empty() || rounds < 1 || batch < 1) {
    std::fprintf(stderr, "paired: no case matches '%s' (or rounds / batch < 1)\n", filter.c_str());
    return 2;
  }
  const auto time_batch = [batch](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) f();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / batch;
  };
  for (const std::string& n : names)  // warm up: pages, caches, predictors
    for (int i = 0; i < 100; ++i) {
      old_cases[n]();
      new_cases[n]();
    }
  std::map<std::string, std::vector<double>> t_old, t_new, ratio;
  for (int r = 0; r < rounds; ++r)
    for (const std::string& n : names) {
      double a = 0, b = 0;
      if (r % 2 == 0) {
        a = time_batch(old_cases[n]);
        b = time_batch(new_cases[n]);
      } else {
        b = time_batch(new_cases[n]);
        a = time_batch(old_cases[n]);
      }
      t_old[n].push_back(a);
      t_new[n].push_back(b);
      ratio[n].push_back(b / a);
    }
  std::printf("%-40s %9s %9s   new / old (p25 - p75)\n", "case (ns a call, medians)", "old", "new");
  for (const std::string& n : names)
    std::printf("%-40s %9.1f %9.1f   %.3f (%.3f - %.3f)\n", n.c_str(), quantile(t_old[n], 0.5),
                quantile(t_new[n], 0.5), quantile(ratio[n], 0.5), quantile(ratio[n], 0.25),
                quantile(ratio[n], 0.75));
  bool header = false;
  for (const std::string& n : names) {
    const std::size_t at = n.find("/fused/");
    if (at == std::string::npos) continue;
    const std::string u = n.substr(0, at) + "/unfused/" + n.substr(at + 7);
    if (t_old.count(u) == 0) continue;
    if (!header) std::printf("\n%-40s %9s %9s\n", "unfused / fused (medians)", "old", "new");
    header = true;
    std::printf("%-40s %9.3f %9.3f\n", n.c_str(), quantile(t_old[u], 0.5) / quantile(t_old[n], 0.5),
                quantile(t_new[u], 0.5) / quantile(t_new[n], 0.5));
  }
  return 0;
}
