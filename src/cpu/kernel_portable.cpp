// The rotation kernel compiled for the portable path; flags are set per file in CMakeLists.txt.
#include "kernel_impl.h"

namespace circlerope::cpu {

RangeKernel range_kernel_portable() { return &rotate_range_any<Generic>; }
TableKernel table_kernel_portable() { return &table_range; }

}  // namespace circlerope::cpu
