// Internal: the vectorised hot loops of the positions (docs/spec.md §1-3) beside their scalar
// reference, chosen at run time:
//  - the Circle-RoPE ring of one frame (docs/spec.md §3 steps 1-6) in double-precision vectors, beside
//    circle_ring (circle.cpp: libm atan2 and sincos, one cell at a time);
//  - the search for the next vision token in a row of token ids, beside a plain loop.
//
// The vector ring (ring_impl.h, compiled per ISA in positions_avx2.cpp / positions_avx512.cpp)
// works in double precision like the reference, with its own atan2 and sincos: polynomials
// whose truncation error is below 1e-17 and whose rounding adds a few units of 2^-53, so a
// ring coordinate differs from the reference's by at most a few 1e-15 of max(R, |value|)
// (R the radius). Rounded to float32 (every position the library returns is float32) the two
// agree exactly unless the double value lies within that distance of a float32 rounding
// boundary. Stated bound, in float32 output units: |vector - scalar| <= 1 ulp of float32 at
// magnitude max(|value|, R), and equal almost always. (A position that is zero up to rounding,
// a difference of values of size R, is exact in neither path to better than ~1e-15 R; at its
// own magnitude its "ulps" would measure that noise.) tests/test_ring.cpp measures it on every
// golden case and on 1e5 random cells: worst 1.6e-15 R in double, no float32 difference
// beyond that noise.
#pragma once

#include <cstdint>

namespace circlerope::detail {

// One frame's ring before the move_to_positive shift: raster order, hm * wm cells.
struct RingJob {
  std::int64_t hm = 0, wm = 0;
  double cx = 0, cy = 0;  // subtracted from the column and row (docs/spec.md §3 step 2; 0 if not centred)
  bool centred = false;   // move_to_origin: cx = (wm - 1) / 2, cy = (hm - 1) / 2
  double radius = 0, alpha = 0, beta = 0;  // beta: dff_rate, 0 for none
  double* t = nullptr;  // P.z per cell (the temporal axis); also scratch for the polar angles
  double* h = nullptr;  // P.y
  double* w = nullptr;  // P.x
  // Out: per axis (t, h, w) the smallest and largest value, and the smallest of all.
  double min[3] = {}, max[3] = {};
  double lowest = 0;
};

// The hot loops of the positions, as one set per path (the scalar one is the reference).
struct PositionsKernels {
  // Writes job.t/h/w and the out fields; nullptr in the scalar set: circle_ring does it.
  void (*ring)(RingJob& job) = nullptr;
  // The first k in [from, n) whose id lies in [lowest, lowest + span] (compared as unsigned
  // 64-bit after subtracting `lowest`, so ids below `lowest` wrap far above), or n.
  std::int64_t (*scan)(const std::int64_t* ids, std::int64_t from, std::int64_t n,
                       std::uint64_t lowest, std::uint64_t span) = nullptr;
  // The first k in [from, n) with ids[k] != value, or n.
  std::int64_t (*run_end)(const std::int64_t* ids, std::int64_t from, std::int64_t n,
                          std::int64_t value) = nullptr;
  // out[j] = float(base + p[j]), j < n: a block's cells on one axis.
  void (*place_cells)(const double* p, double base, float* out, std::int64_t n) = nullptr;
  // t[i] = h[i] = w[i] = float(first + i), i < n: a text run.
  void (*place_text)(double first, std::int64_t n, float* t, float* h, float* w) = nullptr;
};

#if defined(CIRCLEROPE_HAVE_X86_POSITIONS)
void ring_avx2(RingJob& job);
void ring_avx512(RingJob& job);
extern const PositionsKernels kPositionsAvx2;  // ring, scan and placement in AVX2
#endif

const PositionsKernels& positions_kernels();  // of positions_path() (detail/positions_path.h)

}  // namespace circlerope::detail
