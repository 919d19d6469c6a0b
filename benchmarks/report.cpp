// rotary_bench, the report and main(): runs the suite registered by kernels.cpp and layouts.cpp,
// then, after Google Benchmark's own report, a summary prints GB/s and the ratio to the memcpy of
// the same pairing, dtype and shape (layout table: and thread count) measured in the same run (the
// median when --benchmark_repetitions > 1), then evaluates the speed targets (targets.hpp) on those
// numbers (MET / NOT MET), followed by information lines (fused q+k, layouts, threads). Own flags
// (taken out before Google Benchmark sees the command line):
//   --rotary_key_repetitions=N    run each key case (the cases the targets read) N times, in N
//                                 interleaved rounds per shape, and report the median
//                                 (benchmarks/run.sh: 3). Repeated runs share one name.
//   --rotary_key_ratios_out=FILE  write dispatch/memcpy at 512 x 32 x 128 per pairing and dtype
//   --rotary_compare_with=FILE    instead of the targets, compare this run's ratios with such a file
//                                 (benchmarks/run.sh: the default-flags build against -march=native)
// With --benchmark_format=json or csv the summary goes to stderr, so stdout stays parseable.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench_common.hpp"
#include "targets.hpp"

namespace rotary_bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Every run of one name: Google Benchmark's repetitions of it, and its key-case rounds.
struct Result {
  std::string name;
  std::vector<double> bytes_per_second;   // one per run
  std::vector<double> median_aggregates;  // Google Benchmark's medians (one per registration)
  std::int64_t repetitions = 1;
  std::string error;

  // The median of the runs (or of the medians, when only aggregates were reported); < 0: none.
  double value() const {
    if (!bytes_per_second.empty()) return median(bytes_per_second);
    if (!median_aggregates.empty()) return median(median_aggregates);
    return -1;
  }
  std::size_t runs() const {
    if (!bytes_per_second.empty()) return bytes_per_second.size();
    return median_aggregates.size() * static_cast<std::size_t>(repetitions);
  }
};

// Forwards everything to the display reporter --benchmark_format asks for, and keeps the runs.
class RecordingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit RecordingReporter(benchmark::BenchmarkReporter* display) : display_(display) {}

  bool ReportContext(const Context& context) override {
    cpu_ = &context.cpu_info;
    return display_->ReportContext(context);
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const std::string name = run.run_name.function_name + "/" + run.run_name.args;
      Result& r = find(name);
      r.repetitions = std::max<std::int64_t>(r.repetitions, run.repetitions);
      if (run.error_occurred) {
        r.error = run.error_message;
        continue;
      }
      const auto bps = run.counters.find("bytes_per_second");
      if (bps == run.counters.end()) continue;
      if (run.run_type == Run::RT_Iteration)
        r.bytes_per_second.push_back(bps->second.value);
      else if (run.aggregate_name == "median")
        r.median_aggregates.push_back(bps->second.value);
    }
    display_->ReportRuns(runs);
  }

  void Finalize() override { display_->Finalize(); }

  const std::vector<Result>& results() const { return results_; }
  const benchmark::CPUInfo* cpu() const { return cpu_; }
  bool display_is_console() const {
    return dynamic_cast<benchmark::ConsoleReporter*>(display_) != nullptr;
  }

 private:
  Result& find(const std::string& name) {
    const auto it = index_.find(name);
    if (it != index_.end()) return results_[it->second];
    index_[name] = results_.size();
    results_.push_back(Result{name, {}, {}, 1, {}});
    return results_.back();
  }

  benchmark::BenchmarkReporter* display_;
  const benchmark::CPUInfo* cpu_ = nullptr;
  std::vector<Result> results_;
  std::map<std::string, std::size_t> index_;
};

// "model name" from /proc/cpuinfo, with the x86 family/model numbers when present (virtual machines
// often report a generic name such as "AMD EPYC").
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string name;
  std::string family;
  std::string model;
  std::string line;
  auto value = [&line] {
    const auto colon = line.find(':');
    const auto start = colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  };
  while (std::getline(cpuinfo, line)) {  // first occurrence of each key (the first processor)
    if (name.empty() && (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0))
      name = value();
    else if (family.empty() && line.rfind("cpu family", 0) == 0)
      family = value();
    else if (model.empty() && (line.rfind("model\t", 0) == 0 || line.rfind("model ", 0) == 0))
      model = value();
  }
  if (name.empty()) name = "unknown CPU";
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

std::string build_description() {
  std::string s;
#if defined(__clang__)
  s += "clang++ " __clang_version__;
  while (!s.empty() && s.back() == ' ') s.pop_back();
#elif defined(__GNUC__)
  s += "g++ " __VERSION__;
#else
  s += "unknown compiler";
#endif
#if defined(__OPTIMIZE__)
  s += ", optimized";
#else
  s += ", NOT optimized";
#endif
#if defined(NDEBUG)
  s += ", NDEBUG";
#else
  s += ", assertions ON";
#endif
  s += ", compiled for";
#if defined(__AVX512F__)
  s += " AVX-512F";
#elif defined(__AVX2__)
  s += " AVX2";
#elif defined(__SSE2__)
  s += " SSE2 (baseline x86-64)";
#elif defined(__ARM_NEON)
  s += " NEON";
#else
  s += " generic";
#endif
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  s += " with FMA";
#else
  s += " without FMA instructions (std::fma is a libm call)";
#endif
  try {
    s += "; dispatch runs " + std::string(rotary::to_string(rotary::active_isa()));
  } catch (const rotary::error& e) {
    s += std::string("; dispatch: ") + e.what();
  }
#if ROTARY_X86_KERNELS
  s += ROTARY_BENCH_X86_HALF ? "; f16/bf16 avx2/avx512 impls on" : "; f16/bf16 avx2/avx512 impls off (ROTARY_BENCH_X86_HALF=0)";
#endif
  return s;
}

std::string machine_description(const benchmark::CPUInfo* cpu) {
  std::string s = cpu_model();
  if (cpu != nullptr) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ", %d CPUs @ %.0f MHz", cpu->num_cpus, cpu->cycles_per_second / 1e6);
    s += buf;
    for (const auto& cache : cpu->caches) {
      if (cache.type == "Instruction") continue;
      const int kib = cache.size / 1024;
      std::snprintf(buf, sizeof buf, ", L%d%s %d %s", cache.level, cache.level == 1 ? "d" : "",
                    kib >= 1024 ? kib / 1024 : kib, kib >= 1024 ? "MiB" : "KiB");
      s += buf;
    }
  }
  return s;
}

// The measured bytes/s of each case by (pairing, dtype, impl, shape); < 0 where it did not run.
class Measurements {
 public:
  void add(const CaseInfo& c, double bps) {
    bps_[key(c.pairing, c.dtype, c.impl, c.shape, c.layout, c.threads)] = bps;
  }
  double get(const std::string& pairing, const std::string& dtype, const std::string& impl,
             const Shape& s) const {
    return find(key(pairing, dtype, impl, s, std::string(), 0));
  }
  double get_batch(const std::string& pairing, const std::string& dtype, const std::string& impl,
                   const std::string& layout, const Shape& s, int threads) const {
    return find(key(pairing, dtype, impl, s, layout, threads));
  }

 private:
  double find(const std::string& k) const {
    const auto it = bps_.find(k);
    return it == bps_.end() ? -1 : it->second;
  }
  static std::string key(const std::string& pairing, const std::string& dtype, const std::string& impl,
                         const Shape& s, const std::string& layout, int threads) {
    return pairing + "/" + dtype + "/" + impl + "/" + layout + "/" + shape_args(s) + "/" + std::to_string(threads);
  }
  std::map<std::string, double> bps_;
};

const char* const kPairingNames[] = {"interleaved", "half_split"};

// A target's case for one dtype and pairing: its bytes/s in this run, < 0 where it did not run.
double measured(const Measurements& m, const CaseRef& c, const char* dtype, const char* pairing, const Shape& s) {
  if (c.in_layout_table()) return m.get_batch(pairing, dtype, c.impl, c.layout, s, c.threads);
  return m.get(pairing, dtype, c.impl, s);
}

// Prints one line per dtype and pairing of each row of kTargets in the kernel table (layout_table
// false) or the layout table (true), and counts them in met / total.
void print_target_rows(const Measurements& m, bool layout_table, int& met, int& total, std::FILE* out) {
  for (const Target& t : kTargets) {
    if (t.measured.in_layout_table() != layout_table) continue;
    for (const char* d : t.dtypes) {
      if (d == nullptr) continue;
      for (const char* p : kPairingNames) {
        const double a = measured(m, t.measured, d, p, t.shape);
        const double b = measured(m, t.base, d, p, t.shape);
        if (a <= 0 || b <= 0) continue;
        const bool speed = t.measure == Measure::speed;
        const double r = speed ? a / b : b / a;
        const bool ok = speed ? r >= t.bound : r <= t.bound;
        ++total;
        met += ok ? 1 : 0;
        const std::string base = speed ? std::string(t.base.impl) : std::string(t.base.impl) + " time";
        std::fprintf(out, "  %-4s %-11s %-18s ", d, p, t.what);
        if (layout_table)
          std::fprintf(out, "%s/%-4s %5.2fx %s %d thr", t.measured.impl, t.measured.layout, r, base.c_str(),
                       t.measured.threads);
        else
          std::fprintf(out, "%s %6.2fx %-8s", t.measured.impl, r, base.c_str());
        std::fprintf(out, " (%6.2f vs %6.2f GB/s; target %s %g) %s\n", a / 1e9, b / 1e9, speed ? ">=" : "<=",
                     t.bound, ok ? "MET" : "NOT MET");
      }
    }
  }
}

// The speed targets (targets.hpp) evaluated on this run's numbers, with information lines between
// them. Targets whose cases were filtered out are skipped. Returns {met, evaluated}.
std::pair<int, int> print_targets(const Measurements& m, std::FILE* out) {
  int met = 0;
  int total = 0;
  std::fprintf(out, "\ntargets (dispatch impl unless named; ratios of GB/s on the same bytes, this run):\n");
  print_target_rows(m, false, met, total, out);
  // Fused q+k: no target, for information.
  bool header = false;
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      const double qk = m.get(p, d, "dispatch_qk", kGqaShape);
      const double two = m.get(p, d, "dispatch", kGqaShape);
      const double base = m.get(p, d, "memcpy", kGqaShape);
      if (qk <= 0 || two <= 0 || base <= 0) continue;
      if (!header) std::fprintf(out, "  (info) GQA 512 tok x (32 q + 8 kv) x 128, fused apply_qk vs two apply calls:\n");
      header = true;
      std::fprintf(out, "  %-4s %-11s dispatch_qk %5.2fx memcpy, two calls %5.2fx memcpy (%6.2f / %6.2f / %6.2f GB/s)\n",
                   d, p, qk / base, two / base, qk / 1e9, two / 1e9, base / 1e9);
    }
  }
  // Layouts, fused q+k and threads (layout table): ratio to the flat memcpy of the same bytes and
  // thread count.
  print_target_rows(m, true, met, total, out);
  const char* const layouts[] = {"rows", "bshd", "bhsd", "sbhd", "thd", "qkv"};
  header = false;
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      std::string line;
      bool any = false;
      for (const int threads : {1, 2}) {
        line += threads == 1 ? "" : " |";
        for (const char* l : layouts) {
          const double x = m.get_batch(p, d, "dispatch_qk", l, kGqaShape, threads);
          const double base = m.get_batch(p, d, "memcpy", "flat", kGqaShape, threads);
          char cell[16];
          if (x > 0 && base > 0) {
            std::snprintf(cell, sizeof cell, " %5.2f", x / base);
            any = true;
          } else {
            std::snprintf(cell, sizeof cell, " %5s", "-");
          }
          line += cell;
        }
      }
      if (!any) continue;
      if (!header)
        std::fprintf(out, "  (info) GQA 512 tok fused q+k per layout, x memcpy of the same bytes and threads:\n"
                          "                   rows  bshd  bhsd  sbhd   thd   qkv (1 thread) | the same, 2 threads\n");
      header = true;
      std::fprintf(out, "  %-4s %-11s%s\n", d, p, line.c_str());
    }
  }
  header = false;
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      const double one = m.get_batch(p, d, "dispatch", "rows", kDramShape, 1);
      const double two = m.get_batch(p, d, "dispatch", "rows", kDramShape, 2);
      const double c1 = m.get_batch(p, d, "memcpy", "flat", kDramShape, 1);
      const double c2 = m.get_batch(p, d, "memcpy", "flat", kDramShape, 2);
      if (one <= 0 || two <= 0 || c1 <= 0 || c2 <= 0) continue;
      if (!header) std::fprintf(out, "  (info) 8192 tok x 32 x 128, 2 threads against 1 (speed-up of dispatch and of memcpy):\n");
      header = true;
      std::fprintf(out, "  %-4s %-11s dispatch %5.2fx, memcpy %5.2fx (2 threads: %6.2f / %6.2f GB/s)\n", d, p,
                   two / one, c2 / c1, two / 1e9, c2 / 1e9);
    }
  }
  if (total > 0) std::fprintf(out, "  %d of %d targets MET\n", met, total);
  return {met, total};
}

// Key ratios (dispatch / memcpy at kKeyShape) for run.sh's default-vs-native comparison.
void write_key_ratios(const Measurements& m, const std::string& path) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "rotary_bench: cannot write %s\n", path.c_str());
    return;
  }
  f << "# build: " << build_description() << "\n";
  for (const char* d : kDtypeNames) {
    for (const char* p : kPairingNames) {
      const double a = m.get(p, d, "dispatch", kKeyShape);
      const double b = m.get(p, d, "memcpy", kKeyShape);
      if (a > 0 && b > 0) f << p << ' ' << d << ' ' << a << ' ' << b << '\n';
    }
  }
}

void print_comparison(const Measurements& m, const std::string& path, std::FILE* out) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(out, "\nrotary_bench: cannot read %s: no build comparison\n", path.c_str());
    return;
  }
  std::string line;
  std::fprintf(out,
               "\nbuild comparison, dispatch at 512 tok x 32 x 128 (each ratio to memcpy of its own run):\n"
               "  target: the build in %s (no -m flags) within %g%% of this build\n",
               path.c_str(), 100 * (1 - kNativeBuildBound));
  int met = 0;
  int total = 0;
  while (std::getline(f, line)) {
    if (line.rfind("# build: ", 0) == 0) {
      std::fprintf(out, "  that build: %s\n  this build: %s\n", line.c_str() + 9, build_description().c_str());
      continue;
    }
    std::istringstream in(line);
    std::string p;
    std::string d;
    double other_dispatch = 0;
    double other_memcpy = 0;
    if (!(in >> p >> d >> other_dispatch >> other_memcpy) || other_memcpy <= 0) continue;
    const double a = m.get(p, d, "dispatch", kKeyShape);
    const double b = m.get(p, d, "memcpy", kKeyShape);
    if (a <= 0 || b <= 0) continue;
    const double that_ratio = other_dispatch / other_memcpy;
    const double this_ratio = a / b;
    const double rel = that_ratio / this_ratio;
    const bool ok = rel >= kNativeBuildBound;
    ++total;
    met += ok ? 1 : 0;
    std::fprintf(out, "  %-4s %-11s default %.3fx memcpy, native %.3fx memcpy: default/native %.3f (target >= %g) %s\n",
                 d.c_str(), p.c_str(), that_ratio, this_ratio, rel, kNativeBuildBound, ok ? "MET" : "NOT MET");
  }
  if (total > 0)
    std::fprintf(out, "  %d of %d MET\n", met, total);
  else
    std::fprintf(out, "  no case in common (was the key shape filtered out of either run?)\n");
}

struct SummaryOptions {
  std::string key_ratios_out;
  std::string compare_with;
};

void print_summary(const RecordingReporter& rec, const SummaryOptions& options, std::FILE* out) {
  struct Row {
    const CaseInfo* info;
    double bps;
    std::size_t runs;
    std::string error;
  };
  std::vector<Row> rows;
  Measurements measured;
  std::size_t min_runs = 0;
  std::size_t max_runs = 0;
  auto group_key = [](const CaseInfo& c) {
    std::string g = c.pairing + "/" + c.dtype + "/" + shape_args(c.shape);
    if (!c.layout.empty()) g += "/threads:" + std::to_string(c.threads);
    return g;
  };
  std::map<std::string, double> baseline;  // group -> memcpy bytes/s
  for (const Result& r : rec.results()) {
    const auto it = registered().find(r.name);
    if (it == registered().end()) {
      std::fprintf(out, "rotary_bench: warning: run '%s' matches no registered case\n", r.name.c_str());
      continue;
    }
    const double bps = r.value();
    const std::size_t runs = r.runs();
    min_runs = rows.empty() ? runs : std::min(min_runs, runs);
    max_runs = std::max(max_runs, runs);
    rows.push_back(Row{&it->second, bps, runs, r.error});
    if (bps > 0) measured.add(it->second, bps);
    if (it->second.impl == "memcpy" && bps > 0) baseline[group_key(it->second)] = bps;
  }
  if (rows.empty()) return;

  if (max_runs <= 1)
    std::fprintf(out, "\nrotary_bench summary: out of place, 1 thread unless a threads column says otherwise, single run each\n");
  else if (min_runs == max_runs)
    std::fprintf(out, "\nrotary_bench summary: out of place, 1 thread unless a threads column says otherwise, median of %zu runs each\n", max_runs);
  else
    std::fprintf(out, "\nrotary_bench summary: out of place, 1 thread unless a threads column says otherwise, median of the runs column (key cases: %zu)\n",
                 max_runs);
  std::fprintf(out, "  GB/s = 1e9 B/s of vectors read + written (cos/sin table not counted), per CPU time\n");
  std::fprintf(out, "  x memcpy = GB/s / memcpy GB/s of the same pairing, dtype and shape, in this run\n");
  std::fprintf(out, "  heads 40 = 32 query + 8 key heads per token, separate q and k arrays (fused shapes)\n");
  std::fprintf(out, "machine: %s\n", machine_description(rec.cpu()).c_str());
  std::fprintf(out, "build:   %s\n\n", build_description().c_str());
  auto ratio_columns = [&](const Row& row, const std::string& group) {
    if (!row.error.empty() || row.bps < 0) {
      std::fprintf(out, "%9s %9s  %s\n", "-", "-", row.error.empty() ? "no result" : row.error.c_str());
      return;
    }
    const auto base = baseline.find(group);
    if (base == baseline.end())
      std::fprintf(out, "%9.2f %9s\n", row.bps / 1e9, "-");
    else
      std::fprintf(out, "%9.2f %9.3f\n", row.bps / 1e9, row.bps / base->second);
  };
  auto mib = [](const CaseInfo& c) {
    return 2.0 * static_cast<double>(c.shape.elements()) * static_cast<double>(c.element_bytes) / (1024.0 * 1024.0);
  };
  std::fprintf(out, "%-12s %-5s %-11s %6s %5s %8s %9s %4s %9s %9s\n", "pairing", "dtype", "impl", "tokens",
               "heads", "head_dim", "MiB", "runs", "GB/s", "x memcpy");
  std::string previous_group;
  bool any_batch = false;
  for (const Row& row : rows) {
    const CaseInfo& c = *row.info;
    if (!c.layout.empty()) {
      any_batch = true;
      continue;
    }
    const std::string group = group_key(c);
    if (!previous_group.empty() && group != previous_group) std::fprintf(out, "\n");
    previous_group = group;
    std::fprintf(out, "%-12s %-5s %-11s %6lld %5lld %8lld %9.2f %4zu ", c.pairing.c_str(), c.dtype.c_str(),
                 c.impl.c_str(), static_cast<long long>(c.shape.tokens),
                 static_cast<long long>(c.shape.heads), static_cast<long long>(c.shape.head_dim), mib(c), row.runs);
    ratio_columns(row, group);
  }
  if (any_batch) {
    std::fprintf(out,
                 "\nlayouts, fused q+k and threads (apply/<pairing>/<dtype>/<impl>/<layout>/.../threads:N;\n"
                 "  x memcpy = against the flat memcpy of the same bytes with the same thread count):\n");
    std::fprintf(out, "%-12s %-5s %-11s %-6s %6s %5s %8s %7s %9s %4s %9s %9s\n", "pairing", "dtype", "impl",
                 "layout", "tokens", "heads", "head_dim", "threads", "MiB", "runs", "GB/s", "x memcpy");
    previous_group.clear();
    for (const Row& row : rows) {
      const CaseInfo& c = *row.info;
      if (c.layout.empty()) continue;
      const std::string group = group_key(c);
      if (!previous_group.empty() && group != previous_group) std::fprintf(out, "\n");
      previous_group = group;
      std::fprintf(out, "%-12s %-5s %-11s %-6s %6lld %5lld %8lld %7d %9.2f %4zu ", c.pairing.c_str(),
                   c.dtype.c_str(), c.impl.c_str(), c.layout.c_str(), static_cast<long long>(c.shape.tokens),
                   static_cast<long long>(c.shape.heads), static_cast<long long>(c.shape.head_dim), c.threads,
                   mib(c), row.runs);
      ratio_columns(row, group);
    }
  }
  if (options.compare_with.empty())
    print_targets(measured, out);
  else
    print_comparison(measured, options.compare_with, out);
  if (!options.key_ratios_out.empty()) write_key_ratios(measured, options.key_ratios_out);
  std::fflush(out);
}

// Takes `--name=value` out of args (the last one wins); returns value or "".
std::string take_flag(std::vector<char*>& args, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  std::string value;
  for (auto it = args.begin(); it != args.end();) {
    if (*it != nullptr && std::string(*it).rfind(prefix, 0) == 0) {
      value = std::string(*it).substr(prefix.size());
      it = args.erase(it);
    } else {
      ++it;
    }
  }
  return value;
}

int run_suite(int argc, char** argv) {
  // The suite's default minimum time per benchmark; a --benchmark_min_time given by the user comes
  // later on the command line and wins.
  std::string min_time = std::string("--benchmark_min_time=") + ROTARY_BENCH_MIN_TIME;
  std::vector<char*> args;
  args.push_back(argv[0]);
  args.push_back(min_time.data());
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  SummaryOptions options;
  options.key_ratios_out = take_flag(args, "rotary_key_ratios_out");
  options.compare_with = take_flag(args, "rotary_compare_with");
  const std::string key_reps = take_flag(args, "rotary_key_repetitions");
  if (!key_reps.empty()) {
    char* end = nullptr;
    const long n = std::strtol(key_reps.c_str(), &end, 10);
    if (end == key_reps.c_str() || *end != '\0' || n < 1 || n > 100) {
      std::fprintf(stderr, "rotary_bench: --rotary_key_repetitions wants 1..100, got '%s'\n", key_reps.c_str());
      return 1;
    }
    key_repetitions() = static_cast<int>(n);
  }
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

  register_kernel_cases();
  register_layout_cases();

  RecordingReporter reporter(benchmark::CreateDefaultDisplayReporter());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::cout.flush();
  // Machine-readable output on stdout stays parseable: the summary goes to stderr then.
  print_summary(reporter, options, reporter.display_is_console() ? stdout : stderr);
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace rotary_bench

int main(int argc, char** argv) { return rotary_bench::run_suite(argc, argv); }
