// The rotation kernel compiled for the avx512bf16 path: avx512 with bf16 outputs rounded by
// VCVTNE(2)PS2BF16 (simd.h, Avx512Bf16); flags are set per file in CMakeLists.txt. Executed
// natively on an AMD Zen 4 (Bochs 2.7 lacks AVX512_BF16); fp32 and fp16 are the avx512 code,
// compiled again.
#include "kernel_impl.h"

namespace circlerope::cpu {

RangeKernel range_kernel_avx512bf16() { return &rotate_range_any<Avx512Bf16>; }
TableKernel table_kernel_avx512bf16() { return &table_range; }

}  // namespace circlerope::cpu
