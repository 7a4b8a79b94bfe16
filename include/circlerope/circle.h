// circlerope — block coordinates of one vision block (docs/spec.md §2 and 3).
//
// Circle-RoPE (arXiv 2505.16416) puts a block's Hm x Wm grid on a ring of radius R
// in the plane orthogonal to the text direction (1,1,1) through the anchor:
//
//        text axis (1,1,1)
//             ^
//             |   . ' ' .        every cell at distance R from the anchor,
//   apex (t) *---(  c  )--       so every text token is equidistant from all
//             |   ' . . '        cells of the block (a cone with the text token
//                                 as its apex)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "circlerope/positions.h"

namespace circlerope {

// A point in position space, in output axis order.
struct AxisTriple {
  double t = 0, h = 0, w = 0;
};

// u = (-1, 1, 0)/sqrt2 and v = n x u = (-1, -1, 2)/sqrt6 span the plane orthogonal
// to n = (1,1,1)/sqrt3 (docs/spec.md §3 step 5), written as (x, y, z) = (w, h, t) components.
inline constexpr double kInvSqrt2 = 0.70710678118654752440;
inline constexpr double kInvSqrt6 = 0.40824829046386301637;

// Radius the ring of an hm x wm frame grid gets (docs/spec.md §3 step 3).
double circle_radius(int64_t hm, int64_t wm, const CircleConfig& config);

// One frame's ring: P for every cell in raster order (docs/spec.md §3 steps 1–8, z = 0).
std::vector<AxisTriple> circle_ring(int64_t hm, int64_t wm, const CircleConfig& config);

// Frame times tau(f), f = 0..t-1 (docs/spec.md §2), computed in float32 in the reference's
// order: trunc(float(float(f) * s) * tokens_per_second). Images have tau = 0.
std::vector<int64_t> frame_times(int64_t t, bool is_video, double second_per_grid_t,
                                 const VisionConfig& vision);

// P of every token of a t x hm x wm block, raster order (frame, row, column).
// `frame_time` has t entries. Video under `circle` is this project's extension:
// P_f = ring + tau(f) * (1,1,1).
std::vector<AxisTriple> block_coordinates(const Geometry& geometry, int64_t t, int64_t hm,
                                          int64_t wm, std::span<const int64_t> frame_time);

}  // namespace circlerope
