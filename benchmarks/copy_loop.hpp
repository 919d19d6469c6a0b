// rotary_bench: the second baseline of issue 16, an AVX-512 copy loop with the kernels' access
// pattern. It separates what a kernel costs from what its access pattern costs: memcpy (glibc)
// picks its own vector width, order and store kind per size; this loop moves exactly the bytes a
// rotary kernel moves, in the AVX-512 kernel's order, with plain 64-byte loads and stores and no
// arithmetic (the output equals the input):
//   per token, the token's cos/sin row of the Rope's cache (2 * pairs compute-type values, loaded
//   once, as the register-resident kernels do); then each head's row into the output row:
//   interleaved  front to back;
//   half_split   the two halves side by side, as the kernel pairs them: a vector of the first half,
//                then the one of the second half at the same offset (step order), or, for halves
//                of at least kBlockBytes, up to kBlockBytes of the first half, then of the second
//                (the kernel's blocked order); a half's last partial vector masked.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rotary_bench {

// What the loop does to each 16-bit value on its way (the third baseline, issue 16: the kernels' storage
// conversions without their arithmetic): nothing, or the f16 or bf16 kernels' widening to f32 and
// rounding back, instruction for instruction (f16: vcvtph2ps, vcvtps2ph; bf16: a shift and a mask,
// vcvtne2ps2bf16 and vpermw, as the AVX512_BF16 kernels). Exact for the benchmark's data.
enum class RoundTrip { none, f16, bf16 };

// True when this build has the loop (x86-64, GCC or Clang) and the CPU runs AVX-512F and BW (and VL,
// or AVX512_BF16, for the round trips).
bool copy_loop_available(RoundTrip trip = RoundTrip::none);

// tokens x heads rows of row_bytes each (even for half_split), contiguous, in -> out, in the
// pairing's order; token t's cos/sin row is the table_row_bytes at table + t * table_stride_bytes
// (only its bytes are read). Call only where copy_loop_available(trip).
void copy_loop(const void* in, void* out, std::int64_t tokens, std::int64_t heads, std::int64_t row_bytes,
               bool half_split, const void* table, std::int64_t table_row_bytes,
               std::int64_t table_stride_bytes, RoundTrip trip = RoundTrip::none);

// The half size from which the half-split order goes in blocks (the AVX-512 kernel's kBlockHalfBytes
// and its block of 8 vectors of 16 f32 values).
constexpr std::int64_t kBlockBytes = 512;

}  // namespace rotary_bench
