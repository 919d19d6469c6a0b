// rotary_bench, the report and main(): runs the suite registered by kernels.cpp and layouts.cpp,
// then, after Google Benchmark's own report, prints
//   1. the full table: GB/s and the ratio to the memcpy of the same pairing, dtype and shape (layout
//      table: and thread count) measured in the same run (the median of a name's runs);
//   2. the compact summary (under 100 lines; benchmarks/run.sh shows only this): the CPU, dispatch
//      and memcpy per dtype and pairing at every token count of 32 heads x 128, the speed targets
//      (targets.hpp) MET / NOT MET, one line per target and dtype (a group of them: one table), and
//      information lines (decode checked/unchecked, the AVX-512 copy loop, batched decode at
//      scattered positions, fused q+k, layouts, threads); with --rotary_compare_with, the build
//      comparison instead of targets and information.
// The CPU's name (cpu_name.hpp) and the build go into Google Benchmark's context too (JSON keys
// rotary_cpu, rotary_cpu_vendor, rotary_cpu_family, rotary_cpu_model, rotary_cpu_uarch, rotary_build).
// Own flags (taken out before Google Benchmark sees the command line):
//   --rotary_key_repetitions=N    run each key case (the cases the targets read) N times, in N
//                                 interleaved rounds per shape, and report the median
//                                 (benchmarks/run.sh: 3). Repeated runs share one name.
//   --rotary_key_ratios_out=FILE  write dispatch/memcpy at 512 x 32 x 128 per pairing and dtype
//   --rotary_compare_with=FILE    instead of the targets, compare this run's ratios with such a file
//                                 (benchmarks/run.sh: the default-flags build against -march=native)
//   --rotary_summary_out=FILE     also write the compact summary to FILE
//   --rotary_csv_out=FILE         one CSV row per case (columns: kCsvHeader)
//   --rotary_svg_out=FILE         plot GB/s against tokens, dispatch and memcpy, one panel per dtype
// With --benchmark_format=json or csv the summaries go to stderr, so stdout stays parseable.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench_common.hpp"
#include "cpu_name.hpp"
#include "decode_cases.hpp"
#include "fusion_summary.hpp"
#include "svg_plot.hpp"
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
  // where outputs are streamed past the caches (dispatch.hpp): decides the 8192-token rows
  try {
    const std::int64_t bytes = rotary::stream_min_bytes();
    char buf[96];
    if (bytes == rotary::kStreamNever)
      std::snprintf(buf, sizeof buf, "; outputs never streamed");
    else
      std::snprintf(buf, sizeof buf, "; outputs of %.0f MiB or more streamed", static_cast<double>(bytes) / 1048576.0);
    s += buf;
  } catch (const rotary::error& e) {
    s += std::string("; streaming: ") + e.what();
  }
#if ROTARY_X86_KERNELS
  // the caches rotary's cpuid reading found (its tuning reads them: the streaming threshold above and
  // the fused QK-norm's chunk); 0 where cpuid describes none
  {
    const auto& f = rotary::detail::cpu_features();
    char buf[96];
    std::snprintf(buf, sizeof buf, "; cpuid: L1d %lld KiB, largest cache %lld MiB",
                  static_cast<long long>(f.l1_data_cache_bytes / 1024),
                  static_cast<long long>(f.last_level_cache_bytes / 1048576));
    s += buf;
  }
#endif
  return s;
}

std::string machine_description(const benchmark::CPUInfo* cpu) {
  std::string s = this_cpu().description();
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

// "dispatch", or "dispatch_qk/rows/2thr" for a case of the layout table.
std::string case_label(const CaseRef& c) {
  std::string s = c.impl;
  if (c.in_layout_table()) s += std::string("/") + c.layout + "/" + std::to_string(c.threads) + "thr";
  return s;
}

// a/b as "0.91", or "-" when either side did not run.
std::string ratio_text(double a, double b, const char* fmt = "%.2f") {
  if (a <= 0 || b <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, a / b);
  return buf;
}

// One target evaluated for one dtype on both pairings: the ratios ("a/b", "-" where a case did not
// run), how many pairings met it, and how many were evaluated.
struct Evaluation {
  std::string values;
  int met = 0;
  int total = 0;
};

Evaluation evaluate(const Measurements& m, const Target& t, const char* d) {
  Evaluation e;
  for (const char* p : kPairingNames) {
    const double a = measured(m, t.measured, d, p, t.shape);
    const double b = measured(m, t.base, d, p, t.shape);
    const bool speed = t.measure == Measure::speed;
    e.values += e.values.empty() ? "" : "/";
    if (a <= 0 || b <= 0) {
      e.values += "-";
      continue;
    }
    const double r = speed ? a / b : b / a;
    char cell[32];
    std::snprintf(cell, sizeof cell, "%.2f", r);
    e.values += cell;
    ++e.total;
    e.met += (speed ? r >= t.bound : r <= t.bound) ? 1 : 0;
  }
  return e;
}

std::string target_rule(const Target& t) {
  char bound[32];
  std::snprintf(bound, sizeof bound, "%g", t.bound);
  return case_label(t.measured) + (t.measure == Measure::speed ? " >= " : " time <= ") + bound + "x " +
         case_label(t.base);
}

// A group of targets (rows of kTargets with the same group, one after another): one table, a column
// per row (its token count), a line per dtype, and which columns missed.
std::string target_group(const Measurements& m, const Target* first, const Target* last, int& met,
                         int& total) {
  std::string head = std::string("  ") + first->group + ": " + target_rule(*first);
  for (const Target* t = first; t != last; ++t)
    if (t->bound != first->bound) {
      char bound[32];
      std::snprintf(bound, sizeof bound, "%g", t->bound);
      head += " (" + std::to_string(t->shape.tokens) +
              " tok: " + (t->measure == Measure::speed ? ">= " : "<= ") + bound + "x)";
    }
  std::string columns = "       tokens";
  for (const Target* t = first; t != last; ++t) {
    char cell[32];
    std::snprintf(cell, sizeof cell, " %11lld", static_cast<long long>(t->shape.tokens));
    columns += cell;
  }
  std::vector<std::string> lines;
  for (const char* d : kDtypeNames) {
    std::string line = "       " + std::string(d);
    line.resize(13, ' ');
    std::string missed;
    int row_total = 0;
    for (const Target* t = first; t != last; ++t) {
      const bool has = std::any_of(t->dtypes.begin(), t->dtypes.end(),
                                   [&](const char* x) { return x != nullptr && std::string(x) == d; });
      const Evaluation e = has ? evaluate(m, *t, d) : Evaluation{"-", 0, 0};
      char cell[32];
      std::snprintf(cell, sizeof cell, " %11s", e.values.c_str());
      line += cell;
      met += e.met;
      total += e.total;
      row_total += e.total;
      if (e.met < e.total) {
        missed += missed.empty() ? "" : ", ";
        missed += std::to_string(t->shape.tokens);
        missed += e.met > 0 ? " (one pairing)" : "";
      }
    }
    if (row_total == 0) continue;
    line += missed.empty() ? "  MET" : "  NOT MET at ";
    line += missed;
    lines.push_back(line);
  }
  if (lines.empty()) return {};
  std::string text = head + ":\n" + columns + "\n";
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

// The speed targets (targets.hpp) evaluated on this run's numbers: one line per row of kTargets and
// dtype, both pairings on it (interleaved/half_split), MET only if both are; rows of one group as a
// table (target_group). Generic over the rows, so a new row prints without code here.
// Evaluations whose cases did not run are skipped. Returns {met, evaluated} counted per pairing.
std::pair<int, int> print_targets(const Measurements& m, std::FILE* out) {
  int met = 0;
  int total = 0;
  std::size_t width = 0;
  for (const Target& t : kTargets)
    width = std::max(width, target_rule(t).size() + std::string(t.what).size() + 2);
  std::string text;
  const Target* const end = std::end(kTargets);
  for (const Target* t = std::begin(kTargets); t != end; ++t) {
    if (t->group != nullptr) {
      const Target* last = t + 1;
      while (last != end && last->group != nullptr && std::string(last->group) == t->group) ++last;
      text += target_group(m, t, last, met, total);
      t = last - 1;
      continue;
    }
    for (const char* d : t->dtypes) {
      if (d == nullptr) continue;
      const Evaluation e = evaluate(m, *t, d);
      if (e.total == 0) continue;
      met += e.met;
      total += e.total;
      const char* verdict = e.met == e.total ? "MET" : e.met == 0 ? "NOT MET" : "NOT MET (one pairing)";
      const std::string label = std::string(t->what) + ": " + target_rule(*t);
      char line[512];
      std::snprintf(line, sizeof line, "  %-4s %-*s %11s  %s\n", d, static_cast<int>(width), label.c_str(),
                    e.values.c_str(), verdict);
      text += line;
    }
  }
  if (!text.empty())
    std::fprintf(out, "\ntargets (ratios of GB/s on the same bytes, this run; interleaved/half_split):\n%s",
                 text.c_str());
  if (total > 0) std::fprintf(out, "  %d of %d targets MET (counted per dtype and pairing)\n", met, total);
  return {met, total};
}

// Information lines (no targets): decode checked vs unchecked, batched decode at scattered
// positions, fused q+k, layouts, threads. Each block prints only if its cases ran.
void print_information(const Measurements& m, std::FILE* out) {
  auto pair_of = [](auto&& value) {
    std::string s;
    for (const char* p : kPairingNames) s += (s.empty() ? "" : "/") + value(p);
    return s;
  };
  auto any_ran = [&](const char* d, const char* impl, const Shape& shape) {
    return m.get("interleaved", d, impl, shape) > 0 || m.get("half_split", d, impl, shape) > 0;
  };
  std::string decode;  // one entry per dtype: checked / unchecked time, and the unchecked call in us
  for (const char* d : kDtypeNames) {
    if (!any_ran(d, "checked", kDecodeShape) || !any_ran(d, "dispatch", kDecodeShape)) continue;
    const auto call_us = [&](const char* p) {
      const double bps = m.get(p, d, "dispatch", kDecodeShape);
      const double bytes = 2.0 * static_cast<double>(kDecodeShape.elements()) * (std::string(d) == "f32" ? 4 : 2);
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f", bps > 0 ? bytes / bps * 1e6 : 0.0);
      return std::string(bps > 0 ? buf : "-");
    };
    decode +=
        std::string(decode.empty() ? "  " : ", ") + d + " " + pair_of([&](const char* p) {
          return ratio_text(m.get(p, d, "dispatch", kDecodeShape), m.get(p, d, "checked", kDecodeShape));
        }) +
        " (" + pair_of(call_us) + " us)";
  }
  if (!decode.empty())
    std::fprintf(
        out,
        "(info) decode 1 tok x 32 x 128: time of checked apply / apply_unchecked (dispatch; the unchecked "
        "call):\n%s\n",
        decode.c_str());
  // The second and third baselines (issue 16): memcpy against a loop with the kernels' access pattern
  // (and their 16-bit conversions), and dispatch against that loop (the kernel's own cost, the access
  // pattern's, or the conversions', set aside).
  const auto baseline_line = [&](const char* d, const char* impl, const char* label) {
    std::string line;
    for (const Shape& s : {kDecodeShape, kKeyShape, kDramShape}) {
      const std::string loop =
          pair_of([&](const char* p) { return ratio_text(m.get(p, d, impl, s), m.get(p, d, "memcpy", s)); });
      const std::string kernel =
          pair_of([&](const char* p) { return ratio_text(m.get(p, d, "dispatch", s), m.get(p, d, impl, s)); });
      char cell[96];
      std::snprintf(cell, sizeof cell, "%s%lld tok %s, %s", line.empty() ? "" : "; ",
                    static_cast<long long>(s.tokens), loop.c_str(), kernel.c_str());
      line += cell;
    }
    std::fprintf(out, "  %-4s %-7s %s\n", d, label, line.c_str());
  };
  bool header = false;
  for (const char* d : kDtypeNames) {
    const bool copy = any_ran(d, "copy_loop", kKeyShape);
    const bool convert = any_ran(d, "convert_loop", kKeyShape);
    if (!copy && !convert) continue;
    if (!header)
      std::fprintf(out, "(info) AVX-512 loops with the kernels' access pattern (rows + cos/sin rows, no arithmetic): "
                        "loop x memcpy, dispatch x loop; copy: plain loads and stores, convert: with the kernels' "
                        "16-bit conversions (widen to f32, round back):\n");
    header = true;
    if (copy) baseline_line(d, "copy_loop", "copy");
    if (convert) baseline_line(d, "convert_loop", "convert");
  }
  header = false;
  for (const char* d : kDtypeNames) {
    if (!any_ran(d, "dispatch_scattered", kScatteredShape)) continue;
    if (!header)
      std::fprintf(out, "(info) batched decode, 64 seqs x 1 tok x 32 x 128 at scattered positions (int32 array), "
                        "x memcpy:\n");
    header = true;
    auto x_memcpy = [&](const char* impl) {
      return pair_of([&](const char* p) {
        return ratio_text(m.get(p, d, impl, kScatteredShape), m.get(p, d, "memcpy", kScatteredShape));
      });
    };
    std::fprintf(out, "  %-4s unchecked %s, checked %s, positions 0..63 %s\n", d,
                 x_memcpy("dispatch_scattered").c_str(), x_memcpy("checked_scattered").c_str(),
                 x_memcpy("dispatch").c_str());
  }
  // Layouts: ratio to the flat memcpy of the same bytes and thread count.
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
          if (threads == 1 && std::string(l) == "rows") {  // the same rows as two apply calls, q then k
            const double two = m.get(p, d, "dispatch", kGqaShape);
            const double copy = m.get(p, d, "memcpy", kGqaShape);
            if (two > 0 && copy > 0)
              std::snprintf(cell, sizeof cell, " %6.2f", two / copy);
            else
              std::snprintf(cell, sizeof cell, " %6s", "-");
            line += cell;
          }
        }
      }
      if (!any) continue;
      if (!header)
        std::fprintf(out, "(info) GQA 512 tok x (32 q + 8 kv) x 128, fused q+k (apply_qk) per layout, x memcpy of the "
                          "same bytes and threads; 2calls: the rows as two apply calls:\n"
                          "                   rows 2calls  bshd  bhsd  sbhd   thd   qkv (1 thread) | the same, 2 threads\n");
      header = true;
      std::fprintf(out, "  %-4s %-11s%s\n", d, p, line.c_str());
    }
  }
  // memcpy's own speed-up on 2 threads at 8192 tokens, beside the dispatch rows' (the 2-thread table
  // above): how far the memory system lets a second thread go on this machine
  std::string copies;
  for (const char* d : kDtypeNames) {
    const std::string copy = pair_of([&](const char* p) {
      return ratio_text(m.get_batch(p, d, "memcpy", "flat", kDramShape, 2),
                        m.get_batch(p, d, "memcpy", "flat", kDramShape, 1));
    });
    if (copy != "-/-") copies += std::string(copies.empty() ? "" : ", ") + d + " " + copy;
  }
  if (!copies.empty())
    std::fprintf(out, "(info) memcpy 8192 tok x 32 x 128, speed-up of 2 threads over 1: %s\n",
                 copies.c_str());
}

// The main table condensed: dispatch GB/s and x memcpy per dtype and pairing, with memcpy's GB/s,
// at every token count measured with 32 heads x 128 (1 thread, no layout).
void print_key_table(const Measurements& m, const std::vector<std::int64_t>& tokens, std::FILE* out) {
  if (tokens.empty()) return;
  std::fprintf(out, "\ndispatch GB/s (x memcpy of the same bytes, this run), 32 heads x 128, 1 thread, out of place:\n");
  std::fprintf(out, "%-4s %-11s", "", "tokens");
  for (const std::int64_t t : tokens) std::fprintf(out, " %12lld", static_cast<long long>(t));
  std::fprintf(out, "\n");
  for (const char* d : kDtypeNames) {
    std::string memcpy_line;
    bool any = false;
    for (const std::int64_t t : tokens) {
      // memcpy ran once per pairing (each pairing's ratios use their own); show the mean.
      const Shape s{t, 32, 128, 0};
      const double a = m.get("interleaved", d, "memcpy", s);
      const double b = m.get("half_split", d, "memcpy", s);
      const double v = a > 0 && b > 0 ? 0.5 * (a + b) : std::max(a, b);
      char cell[24];
      if (v > 0)
        std::snprintf(cell, sizeof cell, " %12.2f", v / 1e9);
      else
        std::snprintf(cell, sizeof cell, " %12s", "-");
      memcpy_line += cell;
      any = any || v > 0;
    }
    if (!any) continue;
    std::fprintf(out, "%-4s %-11s%s\n", d, "memcpy", memcpy_line.c_str());
    for (const char* p : kPairingNames) {
      std::string line;
      for (const std::int64_t t : tokens) {
        const Shape s{t, 32, 128, 0};
        const double x = m.get(p, d, "dispatch", s);
        const double base = m.get(p, d, "memcpy", s);
        char cell[32];
        if (x > 0 && base > 0)
          std::snprintf(cell, sizeof cell, " %6.2f %4.2fx", x / 1e9, x / base);
        else if (x > 0)
          std::snprintf(cell, sizeof cell, " %6.2f %5s", x / 1e9, "");
        else
          std::snprintf(cell, sizeof cell, " %12s", "-");
        line += cell;
      }
      std::fprintf(out, "%-4s %-11s%s\n", d, p, line.c_str());
    }
  }
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

// The default build's key ratios (written by --rotary_key_ratios_out) against this run's: one line
// per dtype, both pairings on it.
void print_comparison(const Measurements& m, const std::string& path, std::FILE* out) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(out, "\nrotary_bench: cannot read %s: no build comparison\n", path.c_str());
    return;
  }
  std::fprintf(
      out,
      "\nbuild comparison, dispatch at 512 tok x 32 x 128 as x its build's memcpy (interleaved/half_split);\n"
      "  target: the default build (the build line above) within %g%% of the -march=native one\n",
      100 * (1 - kNativeBuildBound));
  std::map<std::string, std::pair<double, double>> other;  // "pairing dtype" -> (dispatch, memcpy)
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("# build: ", 0) == 0) {
      std::fprintf(out, "  native: %s\n", build_description().c_str());
      continue;
    }
    std::istringstream in(line);
    std::string p;
    std::string d;
    double other_dispatch = 0;
    double other_memcpy = 0;
    if (in >> p >> d >> other_dispatch >> other_memcpy) {
      p += ' ';
      p += d;
      other[p] = {other_dispatch, other_memcpy};
    }
  }
  int met = 0;
  int total = 0;
  for (const char* d : kDtypeNames) {
    std::string rel_text, default_text, native_text;
    int row_met = 0;
    int row_total = 0;
    for (const char* p : kPairingNames) {
      const auto it = other.find(std::string(p) + " " + d);
      const double a = m.get(p, d, "dispatch", kKeyShape);
      const double b = m.get(p, d, "memcpy", kKeyShape);
      const char* sep = rel_text.empty() ? "" : "/";
      if (it == other.end() || it->second.second <= 0 || a <= 0 || b <= 0) {
        rel_text += std::string(sep) + "-";
        default_text += std::string(sep) + "-";
        native_text += std::string(sep) + "-";
        continue;
      }
      const double that_ratio = it->second.first / it->second.second;
      const double this_ratio = a / b;
      const double rel = that_ratio / this_ratio;
      ++row_total;
      row_met += rel >= kNativeBuildBound ? 1 : 0;
      char buf[3][16];
      std::snprintf(buf[0], sizeof buf[0], "%.3f", rel);
      std::snprintf(buf[1], sizeof buf[1], "%.3f", that_ratio);
      std::snprintf(buf[2], sizeof buf[2], "%.3f", this_ratio);
      rel_text += sep + std::string(buf[0]);
      default_text += sep + std::string(buf[1]);
      native_text += sep + std::string(buf[2]);
    }
    if (row_total == 0) continue;
    met += row_met;
    total += row_total;
    std::fprintf(out, "  %-4s default/native %s (default %s, native %s x memcpy) %s\n", d, rel_text.c_str(),
                 default_text.c_str(), native_text.c_str(), row_met == row_total ? "MET" : "NOT MET");
  }
  if (total > 0)
    std::fprintf(out, "  %d of %d MET (target >= %g, per dtype and pairing)\n", met, total, kNativeBuildBound);
  else
    std::fprintf(out, "  no case in common (was the key shape filtered out of either run?)\n");
}

struct SummaryOptions {
  std::string key_ratios_out;
  std::string compare_with;
  std::string summary_out;
  std::string csv_out;
  std::string svg_out;
};

// One measured case: what it is, the median of its runs, its memcpy baseline (same group).
struct Row {
  const CaseInfo* info;
  double bps;
  std::size_t runs;
  std::string error;
  double baseline;  // memcpy bytes/s of the same group, < 0 if none ran
};

std::string csv_quote(const std::string& s) {
  std::string r = "\"";
  for (const char c : s) r += c == '"' ? std::string("\"\"") : std::string(1, c);
  return r + "\"";
}

constexpr const char* kCsvHeader =
    "name,pairing,dtype,impl,layout,tokens,heads,head_dim,threads,gb_per_s,x_memcpy,runs,cpu";

// One row per case (the median of its runs); heads counts query + key heads on fused shapes
// (heads:40 = 32 + 8); layout and threads are empty / 0 in the kernel table; empty GB/s: no result.
bool write_csv(const std::vector<Row>& rows, const std::string& path) {
  std::ofstream f(path);
  const std::string cpu = csv_quote(this_cpu().description());
  f << kCsvHeader << "\n";
  for (const Row& row : rows) {
    const CaseInfo& c = *row.info;
    char values[64] = "";
    if (row.error.empty() && row.bps > 0) {
      if (row.baseline > 0)
        std::snprintf(values, sizeof values, "%.4f,%.4f", row.bps / 1e9, row.bps / row.baseline);
      else
        std::snprintf(values, sizeof values, "%.4f,", row.bps / 1e9);
    } else {
      std::snprintf(values, sizeof values, ",");
    }
    f << c.run_name() << ',' << c.pairing << ',' << c.dtype << ',' << c.impl << ',' << c.layout << ','
      << c.shape.tokens << ',' << c.shape.heads << ',' << c.shape.head_dim << ',' << c.threads << ',' << values
      << ',' << row.runs << ',' << cpu << '\n';
  }
  f.close();
  return static_cast<bool>(f);
}

// GB/s against tokens at 32 heads x 128 (1 thread, no layout): one panel per dtype, dispatch per
// pairing (solid) and the memcpy it is compared with (dashed, same color).
bool write_svg(const Measurements& m, const std::vector<std::int64_t>& tokens, const std::string& machine,
               std::size_t max_runs, const std::string& path) {
  SvgFigure fig;
  fig.title = "rotary apply (dispatch) vs memcpy of the same bytes: 32 heads x 128, 1 thread, out of place";
  fig.subtitles.push_back("CPU: " + machine);
  fig.subtitles.push_back("build: " + build_description());
  fig.subtitles.push_back("GB/s = 1e9 bytes of vectors read + written per second (cos/sin table not counted); " +
                          std::string(max_runs > 1 ? "key cases: median of " + std::to_string(max_runs) + " runs"
                                                   : "one run each"));
  fig.x_label = "tokens (log scale)";
  fig.y_label = "GB/s";
  const char* const colors[] = {"#1f77b4", "#d62728"};
  for (const char* d : kDtypeNames) {
    SvgPanel panel;
    panel.title = d;
    for (std::size_t pi = 0; pi < 2; ++pi) {
      const char* p = kPairingNames[pi];
      for (const char* impl : {"dispatch", "memcpy"}) {
        SvgSeries s;
        s.name = std::string(impl) + ", " + p + (impl[0] == 'm' ? " run" : "");
        s.color = colors[pi];
        s.dashed = impl[0] == 'm';
        for (const std::int64_t t : tokens) {
          const double v = m.get(p, d, impl, Shape{t, 32, 128, 0});
          if (v <= 0) continue;
          s.x.push_back(static_cast<double>(t));
          s.y.push_back(v / 1e9);
        }
        if (!s.x.empty()) panel.series.push_back(s);
      }
    }
    if (!panel.series.empty()) fig.panels.push_back(panel);
  }
  if (fig.panels.empty()) return true;
  std::ofstream f(path);
  f << render_svg(fig);
  f.close();
  return static_cast<bool>(f);
}

// Copies everything written to `from` (a temporary file) to `to`.
void copy_stream(std::FILE* from, std::FILE* to) {
  std::rewind(from);
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, from)) > 0) std::fwrite(buf, 1, n, to);
}

// The compact summary (see the top of the file): the machine, then the key table, targets and
// information lines, or, with --rotary_compare_with, the build comparison.
void print_compact(const Measurements& measured, const std::vector<std::int64_t>& tokens,
                   const std::map<std::string, double>& fusion, const std::string& machine, std::size_t min_runs,
                   std::size_t max_runs, const SummaryOptions& options, std::FILE* out) {
  if (!options.compare_with.empty()) {
    print_comparison(measured, options.compare_with, out);
    return;
  }
  std::fprintf(out, "rotary_bench summary (%s)\n",
               max_runs <= 1             ? "one run per case"
               : min_runs == max_runs    ? "median of the runs of each case"
                                         : "key cases: median of their runs, others one run");
  std::fprintf(out, "cpu:   %s\n", machine.c_str());
  std::fprintf(out, "build: %s\n", build_description().c_str());
  if (const rotary::ThreadPool* pool = pool_for(2)) {
    const rotary::HandOffCost& h = pool->hand_off();
    std::fprintf(out,
                 "threads: the 2-thread pool's hand-off (measured when it started): round trip %.0f ns, ",
                 h.round_trip_ns);
    std::fprintf(out, "split overhead %.0f ns, copy %.0f B/ns\n", h.split_overhead_ns, h.copy_bytes_per_ns);
    std::fprintf(
        out, "  -> a call is split only into parts of >= %lld KiB (3 x the larger of the two x copy speed)\n",
        static_cast<long long>(h.min_part_bytes / 1024));
  }
  std::fprintf(out, "GB/s = 1e9 B/s of vectors read + written (cos/sin table not counted)\n");
  print_key_table(measured, tokens, out);
  print_targets(measured, out);
  print_fusion_summary(out, [&fusion](const std::string& name) {
    const auto it = fusion.find(name);
    return it == fusion.end() ? 0.0 : it->second;
  });
  std::fprintf(out, "\n");
  print_information(measured, out);
}

void print_summary(const RecordingReporter& rec, const SummaryOptions& options, std::FILE* out) {
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
  std::vector<std::int64_t> tokens;        // token counts of 32 heads x 128 (the key table's columns)
  std::map<std::string, double> fusion;    // fusion/ cases (fusion.cpp): bytes/s by name
  for (const Result& r : rec.results()) {
    if (r.name.rfind("fusion/", 0) == 0) {  // registered without arguments: the name ends in "/"
      fusion[r.name.back() == '/' ? r.name.substr(0, r.name.size() - 1) : r.name] = r.value();
      continue;
    }
    const auto it = registered().find(r.name);
    if (it == registered().end()) {
      std::fprintf(out, "rotary_bench: warning: run '%s' matches no registered case\n", r.name.c_str());
      continue;
    }
    const CaseInfo& c = it->second;
    const double bps = r.value();
    const std::size_t runs = r.runs();
    min_runs = rows.empty() ? runs : std::min(min_runs, runs);
    max_runs = std::max(max_runs, runs);
    rows.push_back(Row{&c, bps, runs, r.error, -1});
    if (bps > 0) measured.add(c, bps);
    if (c.impl == "memcpy" && bps > 0) baseline[group_key(c)] = bps;
    if (c.layout.empty() && c.impl == "dispatch" && c.shape.heads == 32 && c.shape.head_dim == 128 &&
        !c.shape.fused() && bps > 0)
      tokens.push_back(c.shape.tokens);
  }
  if (rows.empty()) return;
  for (Row& row : rows) {
    const auto base = baseline.find(group_key(*row.info));
    if (base != baseline.end()) row.baseline = base->second;
  }
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  const std::string machine = machine_description(rec.cpu());

  // 1. The full table.
  if (max_runs <= 1)
    std::fprintf(out, "\nrotary_bench full table: out of place, 1 thread unless a threads column says otherwise, single run each\n");
  else if (min_runs == max_runs)
    std::fprintf(out, "\nrotary_bench full table: out of place, 1 thread unless a threads column says otherwise, median of %zu runs each\n", max_runs);
  else
    std::fprintf(out, "\nrotary_bench full table: out of place, 1 thread unless a threads column says otherwise, median of the runs column (key cases: %zu)\n",
                 max_runs);
  std::fprintf(out, "  GB/s = 1e9 B/s of vectors read + written (cos/sin table not counted), per CPU time\n");
  std::fprintf(out, "  x memcpy = GB/s / memcpy GB/s of the same pairing, dtype and shape, in this run\n");
  std::fprintf(out, "  heads 40 = 32 query + 8 key heads per token, separate q and k arrays (fused shapes)\n");
  std::fprintf(out, "machine: %s\n", machine.c_str());
  std::fprintf(out, "build:   %s\n\n", build_description().c_str());
  auto ratio_columns = [&](const Row& row) {
    if (!row.error.empty() || row.bps < 0) {
      std::fprintf(out, "%9s %9s  %s\n", "-", "-", row.error.empty() ? "no result" : row.error.c_str());
      return;
    }
    if (row.baseline <= 0)
      std::fprintf(out, "%9.2f %9s\n", row.bps / 1e9, "-");
    else
      std::fprintf(out, "%9.2f %9.3f\n", row.bps / 1e9, row.bps / row.baseline);
  };
  auto mib = [](const CaseInfo& c) {
    return 2.0 * static_cast<double>(c.shape.elements()) * static_cast<double>(c.element_bytes) / (1024.0 * 1024.0);
  };
  std::fprintf(out, "%-12s %-5s %-18s %6s %5s %8s %9s %4s %9s %9s\n", "pairing", "dtype", "impl", "tokens",
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
    std::fprintf(out, "%-12s %-5s %-18s %6lld %5lld %8lld %9.2f %4zu ", c.pairing.c_str(), c.dtype.c_str(),
                 c.impl.c_str(), static_cast<long long>(c.shape.tokens),
                 static_cast<long long>(c.shape.heads), static_cast<long long>(c.shape.head_dim), mib(c), row.runs);
    ratio_columns(row);
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
      ratio_columns(row);
    }
  }

  // 2. The compact summary, to `out` and to --rotary_summary_out.
  std::FILE* compact = std::tmpfile();
  if (compact == nullptr) compact = out;  // no temporary file: print only
  std::fprintf(out, "\n");
  print_compact(measured, tokens, fusion, machine, min_runs, max_runs, options, compact);
  if (compact != out) {
    copy_stream(compact, out);
    if (!options.summary_out.empty()) {
      std::FILE* f = std::fopen(options.summary_out.c_str(), "w");
      if (f == nullptr) {
        std::fprintf(stderr, "rotary_bench: cannot write %s\n", options.summary_out.c_str());
      } else {
        copy_stream(compact, f);
        std::fclose(f);
      }
    }
    std::fclose(compact);
  }
  if (!options.key_ratios_out.empty()) write_key_ratios(measured, options.key_ratios_out);
  if (!options.csv_out.empty() && !write_csv(rows, options.csv_out))
    std::fprintf(stderr, "rotary_bench: cannot write %s\n", options.csv_out.c_str());
  if (!options.svg_out.empty() && !write_svg(measured, tokens, machine, max_runs, options.svg_out))
    std::fprintf(stderr, "rotary_bench: cannot write %s\n", options.svg_out.c_str());
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
  options.summary_out = take_flag(args, "rotary_summary_out");
  options.csv_out = take_flag(args, "rotary_csv_out");
  options.svg_out = take_flag(args, "rotary_svg_out");
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
  register_fusion_cases();

  // Which machine and build the numbers are from, in every output format (JSON: "context").
  const CpuName& cpu = this_cpu();
  benchmark::AddCustomContext("rotary_cpu", cpu.description());
  benchmark::AddCustomContext("rotary_cpu_vendor", cpu.vendor);
  benchmark::AddCustomContext("rotary_cpu_family", std::to_string(cpu.family));
  benchmark::AddCustomContext("rotary_cpu_model", std::to_string(cpu.model));
  benchmark::AddCustomContext("rotary_cpu_uarch", cpu.uarch.empty() ? "unknown" : cpu.uarch);
  benchmark::AddCustomContext("rotary_build", build_description());

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
