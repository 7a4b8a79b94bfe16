// Internal: the axis read by rotary frequency i (docs/spec.md §4), in one definition for the core
// (frequency_axes) and the CUDA table kernel (src/cuda/rotary_device.h), which computes it
// per thread instead of receiving a table of axes. Plain C++17, no library calls.
#pragma once

#if defined(__CUDACC__)
#define CIRCLEROPE_AXIS_HD __host__ __device__
#else
#define CIRCLEROPE_AXIS_HD
#endif

namespace circlerope::detail {

// layout: 0 chunked, 1 interleaved, 2 single (FrequencyLayout's values); st/sh/sw: sections.
constexpr CIRCLEROPE_AXIS_HD int frequency_axis(int layout, int st, int sh, int sw, int i) {
  if (layout == 0) return i < st ? 0 : (i < st + sh ? 1 : 2);
  if (layout == 1) return (i % 3 == 1 && i < 3 * sh) ? 1 : ((i % 3 == 2 && i < 3 * sw) ? 2 : 0);
  return 0;
}

}  // namespace circlerope::detail
