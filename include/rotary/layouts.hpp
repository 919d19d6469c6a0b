// rotary — batched tensor layouts and per-sequence positions, with the entry points that take them:
// shape.hpp (Layout, BatchShape, BatchStrides, BatchView, CuSeqlens), sequence_positions.hpp
// (SequencePositions, token_positions) and apply.hpp (apply_batch, apply_qk_batch, apply_varlen,
// apply_qk_varlen). Include those directly; this header gathers them.
#ifndef ROTARY_LAYOUTS_HPP
#define ROTARY_LAYOUTS_HPP

#include "apply.hpp"               // IWYU pragma: export
#include "sequence_positions.hpp"  // IWYU pragma: export
#include "shape.hpp"               // IWYU pragma: export

#endif  // ROTARY_LAYOUTS_HPP
