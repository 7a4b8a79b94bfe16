// The rotation kernel compiled for the avx2 path (AVX2 + FMA + F16C): the 16-lane algorithm of
// the AVX-512 paths on two AVX2 halves (simd.h). Flags are set per file in CMakeLists.txt.
#include "kernel_impl.h"

namespace circlerope::cpu {

RangeKernel range_kernel_avx2() { return &rotate_range_any<Avx2x16>; }
TableKernel table_kernel_avx2() { return &table_range; }

}  // namespace circlerope::cpu
