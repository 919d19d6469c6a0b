// rotary_bench: the fused attention prologue cases (fusion.cpp) and their summary lines.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <cstdio>
#include <string>

namespace rotary_bench {

// One op at one dtype and shape: its fused, unfused and memcpy rows share bytes and names
// fusion/<op>/<dtype>/<variant>/<tail>.
struct FusionCase {
  std::string op;
  std::string dtype;
  std::string tail;  // tokens:T/...
  std::int64_t tokens;
  std::int64_t bytes;  // per call, what the fused op reads and writes
  // per call, what the unfused composition reads and writes, counted the same way: unfused_bytes /
  // bytes is the speed-up to expect where both are bound by the bytes they move
  std::int64_t unfused_bytes;

  std::string run_name(const char* variant) const { return "fusion/" + op + "/" + dtype + "/" + variant + "/" + tail; }
};

// Registers every fusion/ case (after the apply/ tables).
void register_fusion_cases();

const std::map<std::string, FusionCase>& registered_fusion_cases();

// The targets (issue 40), one line per op, dtype and shape: fused >= 0.97x unfused at 1, 16 and 512
// tokens; at 512 tokens qk_norm_rope >= 1.6x unfused and >= 0.85x memcpy of its bytes, the
// cache-writing ops >= 0.9x their byte cap (unfused_bytes / bytes). From bytes/s by run name (0: the
// case did not run, its cell shows "-"). Returns the number of lines NOT MET.
int print_fusion_summary(std::FILE* out, const std::function<double(const std::string&)>& bytes_per_second);

}  // namespace rotary_bench
