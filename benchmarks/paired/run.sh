#!/usr/bin/env bash
# Paired A/B timing of the calls a shared VM's single runs cannot resolve (one token, 16): the
# working tree's headers against those of a revision, both in one program (cases.cpp, main.cpp),
# timed in alternating batches. A change to the decode path or the fused prologues is measured
# this way before the benchmark suite's summary can show it (docs/benchmarks.md).
#   bash benchmarks/paired/run.sh [REV [ROUNDS [FILTER]]]   (REV default HEAD, ROUNDS 300, FILTER a
#                                                             substring of the case names, e.g. "fused";
#                                                             with a trailing $ their end: "tokens:1$")
# Cases timed together run in turn, a batch of each per round, so a batch starts on the caches the
# case before it left: time a case alone (a whole name and $) to see it without the others.
# REV == the working tree's state gives the noise floor: ratios of 1 within their p25 - p75.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:-HEAD}
rounds=${2:-300}
filter=${3:-}
bash cmake/deps.sh bench >/dev/null
out=build/paired
rm -rf "$out/old"
mkdir -p "$out/old"
git archive "$rev" include | tar -x -C "$out/old"
cxx=${CXX:-g++}
flags=(-std=c++17 -O3 -DNDEBUG -isystem /usr/include/eigen3)
src=benchmarks/paired
"$cxx" "${flags[@]}" -I"$out/old/include" -Drotary=rotary_paired_old -DVARIANT=paired_old -DMAKE=make_old \
  -c "$src/cases.cpp" -o "$out/old.o" &
old_job=$!
"$cxx" "${flags[@]}" -Iinclude -DVARIANT=paired_new -DMAKE=make_new -c "$src/cases.cpp" -o "$out/new.o"
wait "$old_job"
"$cxx" "${flags[@]}" "$src/main.cpp" "$out/old.o" "$out/new.o" -o "$out/paired" -lpthread
echo "old: $rev ($(git rev-parse --short "$rev")), new: the working tree; $rounds rounds of 50 calls" >&2
"$out/paired" "$rounds" 50 "$filter"
