// Internal: the one parallel loop of the kernels (OpenMP when the build has it).
#pragma once

#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace circlerope::cpu {

inline int resolve_threads(int requested) {
#if defined(_OPENMP)
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

// Calls body(begin, end) over [0, n) in chunks of `grain`; each thread gets one contiguous
// run of chunks (static schedule), so a thread streams through memory in order.
template <class Body>
void parallel_for(std::int64_t n, std::int64_t grain, int threads, const Body& body) {
  if (n <= 0) return;
  const std::int64_t chunks = (n + grain - 1) / grain;
  if (threads > chunks) threads = static_cast<int>(chunks);  // no thread without work
  if (threads <= 1 || chunks == 1) {
    body(std::int64_t{0}, n);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * grain;
    body(begin, n - begin < grain ? n : begin + grain);
  }
#else
  body(std::int64_t{0}, n);
#endif
}

}  // namespace circlerope::cpu
