// rotary — umbrella header: the whole public API.
#ifndef ROTARY_ROTARY_HPP
#define ROTARY_ROTARY_HPP

#include "version.hpp"     // IWYU pragma: export
#include "config.hpp"      // IWYU pragma: export
#include "types.hpp"       // IWYU pragma: export
#include "frequencies.hpp" // IWYU pragma: export
#include "cache.hpp"       // IWYU pragma: export
#include "positions.hpp"   // IWYU pragma: export
#include "rope.hpp"        // IWYU pragma: export
#include "dtype.hpp"       // IWYU pragma: export
#include "parallel.hpp"    // IWYU pragma: export
#include "dispatch.hpp"    // IWYU pragma: export
#include "rotator.hpp"     // IWYU pragma: export
#include "shape.hpp"       // IWYU pragma: export
#include "sequence_positions.hpp" // IWYU pragma: export
#include "apply.hpp"       // IWYU pragma: export
#include "table.hpp"       // IWYU pragma: export
#include "reference.hpp"   // IWYU pragma: export
#include "hf_families.hpp" // IWYU pragma: export
#include "hf_config.hpp"   // IWYU pragma: export
#include "hf_layers.hpp"   // IWYU pragma: export
#include "scaling.hpp"     // IWYU pragma: export
#include "rerotate.hpp"    // IWYU pragma: export
#include "convert_weights.hpp" // IWYU pragma: export
#include "gradients.hpp"   // IWYU pragma: export
#include "analysis.hpp"    // IWYU pragma: export
#include "axis_map.hpp"    // IWYU pragma: export
#include "axis_positions.hpp" // IWYU pragma: export
#include "multi_axis.hpp"  // IWYU pragma: export
#include "xpos.hpp"        // IWYU pragma: export
#include "linear_attention.hpp" // IWYU pragma: export
#include "kv_cache.hpp"    // IWYU pragma: export
#include "prologue.hpp"    // IWYU pragma: export
#include "fusion.hpp"      // IWYU pragma: export

#endif  // ROTARY_ROTARY_HPP
