// Internal: a block's coordinates factor into one frame's cells plus a per-frame
// offset, so rings are computed once per grid shape, not once per frame or row.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "circlerope/circle.h"

namespace circlerope::detail {

// One array per axis (not an array of triples) so that placing a block is three
// unit-stride loops the compiler vectorises.
struct FrameCoordinates {
  std::vector<double> t, h, w;  // hm * wm each, raster order
  AxisTriple max;               // per-axis maximum over the cells
  AxisTriple min;               // per-axis minimum over the cells
  size_t cells() const { return t.size(); }
};

// Frame times and positions are float32 in the output; anything at or beyond
// 2^31 has no integer meaning left there (and would overflow the int64 cast).
inline constexpr float kLargestFrameTime = 2147483648.0f;

// tau(f) of a video frame (docs/spec.md §2). Qwen2.5-VL computes it in float32 in this
// order, then truncates (torch .long()); we do the same so that fractional
// second_per_grid_t lands on the same integer. Where transformers multiplies integers
// (4.52-5.17) the product is exact, past 2^24 too.
// Callers check the last frame with frame_time_fits() first, so the cast
// below stays defined (tau grows with f).
// transformers 4.52-5.17 cast second_per_grid_t to int64 first (0.5 s becomes 0):
// tau = f * trunc(s) * tokens_per_second, exact integers for an integral tokens_per_second
// (Qwen's 2), float32 otherwise, as torch computes an int64 tensor times a Python float.
// 5.18 and later multiply tokens_per_second by the float32 seconds first, in float32, then the
// frame index by that: trunc(f * (tps * s)), a different rounding than 4.49's (f * s) * tps.
// The M-RoPE blocks of hf-5.3-5.5.3 and hf-5.5.4 have no frame time (block_interval below);
// their other schemes use this 5.6 rule.
// The value before truncation, as a double: exact where transformers multiplies integers
// (below, the int64 branch), else the float32 value.
inline double frame_time_value(int64_t f, double second_per_grid_t, const VisionConfig& vision) {
  if (vision.time == TimeMode::index) return static_cast<double>(f);
  const float tps32 = static_cast<float>(vision.tokens_per_second);
  switch (vision.compat) {
    case Compat::none:
    case Compat::hf_4_49: {
      const float scaled = static_cast<float>(f) * static_cast<float>(second_per_grid_t);
      return scaled * tps32;
    }
    case Compat::hf_5_18: {
      const float interval = tps32 * static_cast<float>(second_per_grid_t);
      return static_cast<float>(f) * interval;
    }
    default: {  // hf-4.52, hf-5.2, hf-5.6 (and the other schemes of hf-5.3-5.5.3, hf-5.5.4)
      const double whole = std::trunc(second_per_grid_t);  // finite and >= 0 (validated)
      const double tps = vision.tokens_per_second;
      // int64 x int64 x int: exact in double below 2^53 (callers stop at 2^31)
      if (tps == std::trunc(tps)) return static_cast<double>(f) * whole * tps;
      return static_cast<float>(static_cast<double>(f) * whole) * static_cast<float>(tps);
    }
  }
}
// Whether M-RoPE blocks follow rule (B) of positions.h (transformers 5.3-5.5.4).
inline bool flat_mrope_blocks(const VisionConfig& vision, Scheme scheme) {
  return scheme == Scheme::mrope &&
         (vision.compat == Compat::hf_5_3_to_5_5_3 || vision.compat == Compat::hf_5_5_4);
}
// Rule (B)'s temporal multiplier i of a block: tokens_per_second * trunc(s) of the entry it
// takes (Qwen2.5-VL), 1 for Qwen2-VL.
inline double block_interval(double second_per_grid_t, const VisionConfig& vision) {
  if (vision.time == TimeMode::index) return 1.0;
  return vision.tokens_per_second * std::trunc(second_per_grid_t);
}
inline bool frame_time_fits(int64_t t, double second_per_grid_t, const VisionConfig& vision) {
  return frame_time_value(t - 1, second_per_grid_t, vision) < kLargestFrameTime;  // false for NaN
}
inline int64_t frame_time(int64_t f, double second_per_grid_t, const VisionConfig& vision) {
  return static_cast<int64_t>(frame_time_value(f, second_per_grid_t, vision));
}

FrameCoordinates frame_coordinates(const Geometry& geometry, int64_t hm, int64_t wm);

// Added to every cell of frame f (docs/spec.md §2 table; docs/spec.md §3 "Video" for circle).
inline AxisTriple frame_offset(Scheme scheme, int64_t f, int64_t cells_per_frame, int64_t tau) {
  switch (scheme) {
    case Scheme::vanilla: {
      const double j0 = static_cast<double>(f * cells_per_frame);
      return {j0, j0, j0};
    }
    case Scheme::unordered: return {0, 0, 0};
    case Scheme::mrope: return {static_cast<double>(tau), 0, 0};
    case Scheme::circle: {
      const double d = static_cast<double>(tau);
      return {d, d, d};
    }
  }
  return {};
}

}  // namespace circlerope::detail
