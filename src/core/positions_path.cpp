// Chooses the positions' loops (positions_simd.h): once per process from CPUID and XGETBV,
// or as a test or benchmark forces them.
#include <atomic>

#include "circlerope/detail/fail.h"
#include "circlerope/detail/cpu_features.h"
#include "positions_simd.h"

namespace circlerope::detail {

namespace {

std::atomic<PositionsPath> forced{PositionsPath::automatic};

struct Probe {
  bool avx2 = false, avx512 = false;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe out;
#if defined(CIRCLEROPE_HAVE_X86_POSITIONS)
    const CpuFeatures f = detect_cpu_features();
    out.avx2 = f.avx2;
    out.avx512 = f.avx512;
#endif
    return out;
  }();
  return p;
}

// The reference loops, one element at a time (the ring: circle_ring).
std::int64_t scan_scalar(const std::int64_t* ids, std::int64_t from, std::int64_t n,
                         std::uint64_t lowest, std::uint64_t span) {
  for (std::int64_t k = from; k < n; ++k)
    if (static_cast<std::uint64_t>(ids[k]) - lowest <= span) return k;  // wraps, no UB
  return n;
}
std::int64_t run_end_scalar(const std::int64_t* ids, std::int64_t from, std::int64_t n, std::int64_t value) {
  for (std::int64_t k = from; k < n; ++k)
    if (ids[k] != value) return k;
  return n;
}
void place_cells_scalar(const double* p, double base, float* out, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(base + p[j]);
}
void place_text_scalar(double first, std::int64_t n, float* t, float* h, float* w) {
  for (std::int64_t i = 0; i < n; ++i) t[i] = h[i] = w[i] = static_cast<float>(first + static_cast<double>(i));
}

const PositionsKernels kScalar = {nullptr, &scan_scalar, &run_end_scalar, &place_cells_scalar, &place_text_scalar};

}  // namespace

const char* to_string(PositionsPath path) {
  switch (path) {
    case PositionsPath::automatic: return "automatic";
    case PositionsPath::scalar: return "scalar";
    case PositionsPath::avx2: return "avx2";
    case PositionsPath::avx512: return "avx512";
  }
  return "?";
}

bool positions_path_available(PositionsPath path) {
  switch (path) {
    case PositionsPath::avx2: return probe().avx2;
    case PositionsPath::avx512: return probe().avx512;
    default: return true;
  }
}

void set_positions_path(PositionsPath path) {
  if (!positions_path_available(path))
    fail("positions path '", to_string(path), "' is not available on this CPU");
  forced.store(path, std::memory_order_relaxed);
}

PositionsPath positions_path() {
  const PositionsPath f = forced.load(std::memory_order_relaxed);
  if (f != PositionsPath::automatic) return f;
  return probe().avx512 ? PositionsPath::avx512 : probe().avx2 ? PositionsPath::avx2 : PositionsPath::scalar;
}

const PositionsKernels& positions_kernels() {
  switch (positions_path()) {
#if defined(CIRCLEROPE_HAVE_X86_POSITIONS)
    case PositionsPath::avx2: return kPositionsAvx2;
    case PositionsPath::avx512: {
      static const PositionsKernels avx512 = {&ring_avx512, kPositionsAvx2.scan, kPositionsAvx2.run_end,
                                              kPositionsAvx2.place_cells, kPositionsAvx2.place_text};
      return avx512;
    }
#endif
    default: return kScalar;
  }
}

}  // namespace circlerope::detail
