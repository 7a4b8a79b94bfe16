// The avx2 backend's bf16 store on chosen floats, for test_nan_rule.cpp: compiled with the
// avx2 kernel's flags (tests/CMakeLists.txt), and called only where the avx2 path is available.
// It exposes one plain function; everything it uses from simd.h and convert.h has internal
// linkage, so no AVX2-compiled inline function can stand in for the test binary's own.
#include <cstdint>
#include <cstring>

#include "../src/cpu/simd.h"

namespace circlerope::test {

std::uint64_t avx2_bf16_store_mismatches(const std::uint16_t* uppers, int upper_count, const std::uint16_t* lowers,
                                         int lower_count, std::uint32_t* first_mismatch) {
  using V = cpu::Avx2x16;
  std::uint64_t mismatches = 0;
  alignas(32) float in[16];
  alignas(32) std::uint16_t out[16];
  std::uint32_t bits[16];
  int n = 0;
  // Sixteen floats at a time, as a step's output reaches the store: in split order, quieted.
  auto flush = [&] {
    for (int j = n; j < 16; ++j) bits[j] = 0;
    for (int j = 0; j < 16; ++j) std::memcpy(&in[j], &bits[j], sizeof(float));
    V::store<cpu::BF16>(out, V::quiet(V::split_order(V::load(in))));
    for (int j = 0; j < n; ++j)
      if (out[j] != cpu::float_to_bf16(in[j]) && mismatches++ == 0) *first_mismatch = bits[j];
    n = 0;
  };
  for (int u = 0; u < upper_count; ++u)
    for (int l = 0; l < lower_count; ++l) {
      bits[n++] = static_cast<std::uint32_t>(uppers[u]) << 16 | lowers[l];
      if (n == 16) flush();
    }
  if (n > 0) flush();
  return mismatches;
}

}  // namespace circlerope::test
