#!/usr/bin/env bash
# The main job: builds rotary_bench twice (preset `bench`: g++ -O3 -DNDEBUG, no -m flags; preset
# `bench-native`: the same plus -march=native), then
#   1. runs the default build's full suite: the main table (GB/s and ratio to memcpy of the same
#      bytes, measured in the same run) and the issue's targets, MET / NOT MET; the key cases the
#      targets read (fusion rows included) run 3 times in interleaved rounds and report the median;
#   2. runs the -march=native build on the key shape only (512 tokens x 32 heads x 128, memcpy and
#      dispatch) and compares, per pairing and dtype, the two builds' dispatch/memcpy ratios
#      (target: the default build within 5% of the native one).
# The terminal gets one progress line per stage and then the compact summary (CPU, key table,
# targets, information lines, build comparison; under 100 lines). Everything else goes to
# build/bench/results/ (see `results` below): the raw Google Benchmark output and the full tables
# (bench.log), Google Benchmark's JSON of each run, one CSV row per case, the summary as text and
# the throughput plot (SVG).
# Extra arguments go to the main run (step 1), after the defaults, so they win, e.g.
#   bash benchmarks/run.sh --benchmark_repetitions=3            every case 3 times (slow: ~4x)
#   bash benchmarks/run.sh --benchmark_filter=tokens:512/       a subset
set -euo pipefail
cd "$(dirname "$0")/.."

results=build/bench/results
log=$results/bench.log
mkdir -p "$results"
rm -f "$results"/{bench.log,bench.json,bench-native.json,results.csv,summary.txt,summary-main.txt,summary-native.txt,throughput.svg,key_ratios.txt}
: >"$log"

start=$SECONDS
# stage N "what" command...: one progress line, the command's output appended to the log; on
# failure, the end of the log and the exit status.
stage() {
  local n=$1 what=$2
  shift 2
  local t0=$SECONDS
  printf 'rotary: [%s/6] %s ... ' "$n" "$what" >&2
  echo "==== [$n/6] $what: $*" >>"$log"
  local status=0
  "$@" >>"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    echo "FAILED (exit status $status); the end of $log:" >&2
    tail -n 30 "$log" >&2
    exit "$status"
  fi
  echo "done ($((SECONDS - t0)) s)" >&2
}

stage 1 "dependencies (cmake/deps.sh bench)" bash cmake/deps.sh bench
bash cmake/clear_stale_build.sh build/bench build/bench-native
stage 2 "building build/bench (no -m flags)" cmake --workflow --preset bench
stage 3 "building build/bench-native (-march=native)" cmake --workflow --preset bench-native

stage 4 "running the main suite (raw output: $log)" \
  ./build/bench/benchmarks/rotary_bench --rotary_key_repetitions=3 \
  --rotary_key_ratios_out="$results/key_ratios.txt" \
  --rotary_summary_out="$results/summary-main.txt" \
  --rotary_csv_out="$results/results.csv" \
  --rotary_svg_out="$results/throughput.svg" \
  --benchmark_out="$results/bench.json" --benchmark_out_format=json \
  "$@"

stage 5 "running the -march=native comparison (key shape only)" \
  ./build/bench-native/benchmarks/rotary_bench --rotary_key_repetitions=3 \
  --benchmark_filter='/(memcpy|dispatch)/tokens:512/heads:32/head_dim:128$' \
  --rotary_compare_with="$results/key_ratios.txt" \
  --rotary_summary_out="$results/summary-native.txt" \
  --benchmark_out="$results/bench-native.json" --benchmark_out_format=json

write_results() {
  cat "$results/summary-main.txt" "$results/summary-native.txt" >"$results/summary.txt"
  rm -f "$results/summary-main.txt" "$results/summary-native.txt"
}
stage 6 "writing $results/summary.txt" write_results

echo >&2
cat "$results/summary.txt"
echo
echo "results in $results/ ($((SECONDS - start)) s in all): summary.txt (this summary), results.csv (one row per"
echo "  case: GB/s, x memcpy, CPU), throughput.svg (GB/s against tokens), bench.json and bench-native.json (Google"
echo "  Benchmark JSON), bench.log (raw output, full tables), key_ratios.txt (the build comparison's input)"
