// The rotation kernel compiled for the avx512 path (AVX-512 F + BW + VL, with FMA and F16C);
// flags are set per file in CMakeLists.txt. Executed natively on an AMD Zen 4 and under the
// Bochs emulator (tests/avx512_emulator), bit for bit against the avx2 path.
#include "kernel_impl.h"

namespace circlerope::cpu {

RangeKernel range_kernel_avx512() { return &rotate_range_any<Avx512>; }
TableKernel table_kernel_avx512() { return &table_range; }

}  // namespace circlerope::cpu
