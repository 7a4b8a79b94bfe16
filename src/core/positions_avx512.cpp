// The Circle-RoPE ring in eight-lane AVX-512 double vectors (ring_impl.h); flags set per file in
// CMakeLists.txt, chosen at run time (positions_path.cpp). Executed by this project only under
// the Bochs emulator (tests/avx512_emulator), bit for bit against ring_avx2.
#include "ring_impl.h"

namespace circlerope::detail {

void ring_avx512(RingJob& job) { ring_vector<8>(job); }

}  // namespace circlerope::detail
