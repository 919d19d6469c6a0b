#!/usr/bin/env bash
# Runs one libFuzzer harness for a bounded time over a copy of its seed corpus, then prints its
# execution count. The copy (and any crash input, under artifacts/) lives in WORKDIR: the seed corpus
# in the source tree is never written. The environment variable ROTARY_FUZZ_SECONDS, if set, replaces
# SECONDS (tests/run.sh uses it to fuzz 30 s per harness without reconfiguring).
#   run_fuzzer.sh FUZZER SEED_DIR WORKDIR SECONDS RSS_MB [libFuzzer options...]
set -euo pipefail
if [ $# -lt 5 ]; then
  echo "usage: $0 FUZZER SEED_DIR WORKDIR SECONDS RSS_MB [libFuzzer options...]" >&2
  exit 2
fi
fuzzer=$1 seeds=$2 work=$3 seconds=${ROTARY_FUZZ_SECONDS:-$4} rss=$5
shift 5
name=$(basename "$fuzzer")
rm -rf "$work/corpus" "$work/artifacts"
mkdir -p "$work/corpus" "$work/artifacts"
cp -R "$seeds"/. "$work/corpus/"
log="$work/fuzz.log"
status=0
"$fuzzer" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb="$rss" -malloc_limit_mb="$rss" -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" >"$log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  tail -n 80 "$log"
  echo "rotary fuzz: $name FAILED (exit $status); inputs in $work/artifacts:" >&2
  ls -l "$work/artifacts" >&2 || true
  exit "$status"
fi
grep -E '^stat::' "$log" || true
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
corpus=$(find "$work/corpus" -type f | wc -l)
echo "rotary fuzz: $name: ${runs:-?} executions in ${seconds} s, corpus $(find "$seeds" -type f | wc -l) seeds -> $corpus inputs"
