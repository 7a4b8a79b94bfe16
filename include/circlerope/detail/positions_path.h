// circlerope — detail, not API: which loops compute the positions (src/core/positions_simd.h),
// for the tests and `circlerope bench positions`, which time the vectorised loops against the
// scalar reference in one run. No stability promise.
#pragma once

namespace circlerope::detail {

// `scalar` is the reference (circle_ring's libm ring, plain loops); `avx2` the AVX2 set;
// `avx512` the AVX-512 ring with the rest of the AVX2 set. `automatic` picks avx512, else avx2,
// else scalar, from CPUID and XGETBV (detail/cpu_features.h). set_positions_path forces one
// process-wide; forcing one this CPU lacks throws Error naming it and changes nothing.
enum class PositionsPath { automatic, scalar, avx2, avx512 };
void set_positions_path(PositionsPath path);
PositionsPath positions_path();  // what is in use: the forced path, or automatic's choice
const char* to_string(PositionsPath path);
bool positions_path_available(PositionsPath path);

}  // namespace circlerope::detail
