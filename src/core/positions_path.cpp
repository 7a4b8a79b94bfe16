// Chooses the positions' loops (positions_simd.h): the process's one path (cpu_probe.h), or
// one a test or benchmark forces.
#include <atomic>

#include "circlerope/detail/cpu_probe.h"
#include "circlerope/detail/fail.h"
#include "circlerope/detail/positions_path.h"
#include "positions_simd.h"

namespace circlerope::detail {

namespace {

std::atomic<Isa> forced{Isa::automatic};

const CpuPaths& paths() {
  static const CpuPaths p = decide_cpu_paths(cpu_probe());
  return p;
}

Isa loops_of(Isa isa) { return isa == Isa::avx512bf16 ? Isa::avx512 : isa; }

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

bool positions_path_available(Isa path) {
  return path == Isa::automatic || paths().of(path).available;
}

void set_positions_path(Isa path) {
  // A path that is not available, or an unusable CIRCLEROPE_ISA, throws here; automatic is
  // checked when it is used.
  if (path != Isa::automatic) paths().resolve(path);
  forced.store(path, std::memory_order_relaxed);
}

Isa positions_path() { return loops_of(paths().resolve(forced.load(std::memory_order_relaxed))); }

CpuPath positions_cpu_path() {
  CpuPath p = paths().automatic;
  p.isa = loops_of(paths().resolve(Isa::automatic));
  if (p.isa != paths().automatic.isa) p.reason += " (the positions run avx512's loops)";
  return p;
}

const PositionsKernels& positions_kernels() {
  switch (positions_path()) {
#if defined(CIRCLEROPE_HAVE_X86_POSITIONS)
    case Isa::avx2: return kPositionsAvx2;
    case Isa::avx512: {
      static const PositionsKernels avx512 = {&ring_avx512, kPositionsAvx2.scan, kPositionsAvx2.run_end,
                                              kPositionsAvx2.place_cells, kPositionsAvx2.place_text};
      return avx512;
    }
#endif
    default: return kScalar;
  }
}

}  // namespace circlerope::detail
