// Include this in exactly one .cpp of a program whose other TUs define ROTARY_SEPARATE_KERNELS: it
// compiles every kernel (each ISA of this build x f32, f64, f16, bf16) once, here, so the other TUs
// only declare them and compile several times faster (docs/compile-time.md). CMake users link
// rotary::kernels instead, which is this TU and passes ROTARY_SEPARATE_KERNELS on to its users.
// The kernels carry their own target attributes, so this TU needs no -m flags; build it with
// optimisation (-O2 or more): it holds the whole hot path.
#ifndef ROTARY_INSTANTIATE_KERNELS_HPP
#define ROTARY_INSTANTIATE_KERNELS_HPP

#define ROTARY_DETAIL_INSTANTIATING_KERNELS
#include "config.hpp"
#include "detail/kernels/registry.hpp"
#include "apply.hpp"

namespace rotary::detail {
ROTARY_DETAIL_KERNEL_INSTANCES(template)
}  // namespace rotary::detail

namespace rotary {
ROTARY_DETAIL_API_INSTANCES(template)
}  // namespace rotary

#endif  // ROTARY_INSTANTIATE_KERNELS_HPP
