// rotary_bench: the decode rows kernels.cpp registers beyond kShapes (bench_common.hpp), shared
// with report.cpp, which prints them as information lines:
//   a batch of 64 sequences decoding one token each, every token at its own position (scattered
//   over the Rope's cache, fixed seed), passed as a rotary::Positions array; and the checked entry
//   point against the unchecked one, at the decode shape and on that batch.
#pragma once

#include "bench_common.hpp"

namespace rotary_bench {

// 64 sequences x 1 token, 32 heads x 128. At this shape kernels.cpp registers only memcpy,
// dispatch (positions 0..63, for comparison), dispatch_scattered and checked_scattered.
constexpr Shape kScatteredShape = {64, 32, 128, 0};

// The seed of the scattered positions (uniform over [0, the Rope's cache size)).
constexpr unsigned kScatteredSeed = 20260316u;

}  // namespace rotary_bench
