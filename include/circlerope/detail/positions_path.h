// circlerope — detail, not API: which loops compute the positions (src/core/positions_simd.h),
// for the tests and `circlerope bench positions`, which time the vectorised loops against the
// portable ones (the scalar reference) in one run. No stability promise.
#pragma once

#include "circlerope/cpu_path.h"

namespace circlerope::detail {

// The path comes from the process's one choice (cpu_path.h, CIRCLEROPE_ISA included):
// portable runs the reference loops (circle_ring's libm ring, plain loops), avx2 the AVX2 set,
// avx512 and avx512bf16 the AVX-512 ring with the rest of the AVX2 set. set_positions_path
// forces one process-wide (Isa::automatic: back to the choice); forcing one that is not
// available throws Error naming it and why, and changes nothing.
void set_positions_path(Isa path);
// The loops in use: portable, avx2 or avx512 (avx512bf16's loops are avx512's). Throws Error
// when CIRCLEROPE_ISA is unusable, like every call that computes positions.
Isa positions_path();
bool positions_path_available(Isa path);
// What `automatic` runs for the positions and why (cpu_path.h); throws as positions_path.
CpuPath positions_cpu_path();

}  // namespace circlerope::detail
