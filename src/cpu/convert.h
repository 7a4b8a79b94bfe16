// Internal: the storage conversions of the CPU kernels, bf16 / fp16 <-> float32 with round to
// nearest even and the NaN rule of every store: one definition for host and device in
// circlerope/detail/convert.h, named here in the kernels' namespace.
#pragma once

#include "circlerope/detail/convert.h"

namespace circlerope::cpu {

using detail::bf16_to_float;
using detail::f16_to_float;
using detail::float_to_bf16;
using detail::float_to_f16;
using detail::kQuietNanBf16;
using detail::kQuietNanF16;
using detail::kQuietNanF32;
using detail::quiet_nan;

}  // namespace circlerope::cpu
