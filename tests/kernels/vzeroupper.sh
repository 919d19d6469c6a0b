#!/usr/bin/env bash
# The AVX2 / AVX-512 kernels must hand control back to baseline code with the upper halves of the
# vector registers clean. A TU built without -m flags compiles rotary's shared helpers for its baseline
# (SSE2, legacy encodings); a kernel that jumps or calls into one of them, or returns to one, with
# dirty upper state makes every legacy SSE instruction that follows pay an SSE/AVX transition. Compilers
# put a vzeroupper before calls and returns, but g++ 12 left it out before a tail call (a jmp) from the
# row kernels into the out-of-line scalar tail (cache_codes): on a Xeon (Sapphire Rapids or later)
# int8 and fp8 cache writes ran ~3x slower than in a -march=native build.
#
# Usage: vzeroupper.sh OBJDUMP BINARY...
# Fails, listing them, if any function that uses ymm/zmm registers can reach a jump or call to a
# function that executes legacy SSE instructions and no ymm/zmm ones (or to a PLT entry other than
# __assert_fail, which does not return) along a path of its own instructions with a ymm/zmm
# instruction after the last vzeroupper.
set -euo pipefail
objdump=$1
shift
status=0
for binary in "$@"; do
  report=$("$objdump" -d --no-show-raw-insn "$binary" | awk '
    # One function at a time: its instructions, then a data flow over its own jumps (an instruction
    # is dirty after a ymm/zmm instruction, clean after vzeroupper, and otherwise as dirty as any of
    # its predecessors: the fall-through and the jumps to it), starting clean at the entry.
    function finish(   i, changed, d, t) {
      if (!fn_wide) { count = 0; return }
      for (i = 1; i <= count; ++i) din[i] = 0
      do {
        changed = 0
        for (i = 1; i <= count; ++i) {
          d = din[i]
          if (kind[i] == "wide") d = 1
          else if (kind[i] == "vz") d = 0
          if (falls[i] && i < count && d && !din[i + 1]) { din[i + 1] = 1; changed = 1 }
          t = jump_to[i]
          if (t != "" && (t in index_of) && d && !din[index_of[t]]) { din[index_of[t]] = 1; changed = 1 }
        }
      } while (changed)
      for (i = 1; i <= count; ++i)
        if (callee[i] != "" && din[i]) sites[++n] = fn "\t" callee[i]
      for (i = 1; i <= count; ++i) delete index_of[addr[i]]
      count = 0
    }
    /^[0-9a-f]+ <.*>:$/ {
      finish()
      fn = $0
      sub(/^[0-9a-f]+ </, "", fn)
      sub(/>:$/, "", fn)
      fn_wide = 0
      next
    }
    /^ +[0-9a-f]+:\t/ {
      ++count
      a = $1
      sub(/:$/, "", a)
      addr[count] = a
      index_of[a] = count
      kind[count] = ""
      callee[count] = ""
      jump_to[count] = ""
      falls[count] = 1
      if ($0 ~ /[yz]mm[0-9]/) { kind[count] = "wide"; fn_wide = 1; wide[fn] = 1 }
      if ($0 ~ /\tvzeroupper/) kind[count] = "vz"
      if ($0 ~ /%xmm[0-9]/ && $0 !~ /:\t+v/) legacy[fn] = 1
      if ($0 ~ /\t(jmp|ret|ud2)/) falls[count] = 0
      if ($0 ~ /\tj[a-z]+[ q]+[0-9a-f]+ </) {
        target = $0
        sub(/^.*\tj[a-z]+[ q]+/, "", target)
        sub(/ .*$/, "", target)
        jump_to[count] = target
      }
      if ($0 ~ /\t(jmp|call)[ q]+[0-9a-f]+ <[^>+]+>$/) {
        target = $0
        sub(/^.*</, "", target)
        sub(/>$/, "", target)
        # (a failed assertion aborts: what it runs cannot be slowed down)
        if (target != fn && target != "__assert_fail@plt") callee[count] = target
      }
    }
    END {
      finish()
      for (i = 1; i <= n; ++i) {
        split(sites[i], f, "\t")
        if (!wide[f[2]] && (legacy[f[2]] || f[2] ~ /@plt$/)) print "  " f[1] " -> " f[2]
      }
    }' | sort -u)
  if [ -n "$report" ]; then
    echo "$binary: AVX code enters non-AVX code with dirty upper state (no vzeroupper before the jump or call):"
    echo "$report"
    status=1
  else
    echo "$binary: every jump and call from AVX code to non-AVX code follows a vzeroupper"
  fi
done
exit "$status"
