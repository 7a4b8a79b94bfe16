// The rotation kernel compiled for the avx2 path; flags are set per file in CMakeLists.txt.
#include "kernel_impl.h"

namespace circlerope::cpu {

RangeKernel range_kernel_avx2() { return &rotate_range_any; }
TableKernel table_kernel_avx2() { return &table_range; }

}  // namespace circlerope::cpu
