// circlerope — how strongly a scheme couples text positions to image positions.
//
// PTD (docs/spec.md §5, the paper's Per-Token Distance): for text tokens T and a vision
// block I of the same row,
//   PTD = 1/(|T||I|) sum_t sum_i |d(t,i) - mean_i d(t,i)|.
// d is the distance in the scheme's own index space: Euclidean over the three
// axes for `mrope` and `circle`, and |difference of the single index| for the
// 1-D schemes `vanilla` and `unordered` (whose three axes are equal copies; the
// 3-axis Euclidean distance would scale them by sqrt 3 and give 3.849 instead of
// the paper's 2.222 for its toy).
//
// RoPE kernel deviation (docs/spec.md §5): K(t,i) = (2/D) sum_k cos(dphi_k(t,i)); per
// text token the mean absolute deviation of K(t,.) over the block, then the mean
// over text tokens. 0 exactly when RoPE cannot tell the block's tokens apart.
#pragma once

#include <cstdint>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/rotary_config.h"

namespace circlerope {

struct BlockMetrics {
  int64_t row = 0;
  int64_t block = 0;  // index into Positions::blocks
  int64_t text_tokens = 0;
  int64_t vision_tokens = 0;
  double ptd = 0;
  double rope_kernel_deviation = 0;
};

struct RowMetrics {
  int64_t row = 0;
  int64_t blocks = 0;  // blocks that have text in their row
  double ptd = 0;      // mean over those blocks
  double rope_kernel_deviation = 0;
};

struct CouplingMetrics {
  std::vector<BlockMetrics> blocks;  // one per block whose row has text tokens
  std::vector<RowMetrics> rows;      // rows with at least one such block
  double ptd = 0;  // mean over `blocks`; NaN when there is none
  double rope_kernel_deviation = 0;
};

// Limits of one coupling_metrics call, checked from the positions' sizes before anything is
// allocated or computed (the cost is text tokens x vision tokens x frequencies; at the token
// cap it would take months and ~17 GiB):
//  - work: the sum over blocks of (text tokens of its row) x (its tokens) x rotary_dim, at
//    most kMaxPtdWork = 2^32 (about 3 s on the 2-core build machine; text:8000,image:100x80
//    is 8.2e9 and refused);
//  - memory: the rotary features of the text tokens of a row and of one block, 8 x rotary_dim
//    bytes per token, plus the points, at most kMaxPtdBytes = 1 GiB.
inline constexpr int64_t kMaxPtdWork = int64_t{1} << 32;
inline constexpr int64_t kMaxPtdBytes = int64_t{1} << 30;

struct PtdCost {
  int64_t work = 0;   // text x vision x rotary_dim summed over blocks (INT64_MAX if beyond)
  int64_t bytes = 0;  // features and points held at once
};
// The cost of coupling_metrics(positions, rotary), from the sizes alone (one pass over the
// token map); throws Error for positions that are not rope_index/layout_positions output.
PtdCost ptd_cost(const Positions& positions, const RotaryConfig& rotary);

// The scheme the positions were made with (Positions::scheme) decides the distance (see
// above). Masked tokens are excluded. Throws Error past the limits above, naming the numbers.
CouplingMetrics coupling_metrics(const Positions& positions, const RotaryConfig& rotary);
// The same, for callers that also name the scheme: throws Error if `scheme` is not the one the
// positions were made with (a wrong scheme silently switched between the 1-D and the 3-axis
// distance: the vanilla toy's PTD became 3.849 instead of 2.222).
CouplingMetrics coupling_metrics(const Positions& positions, Scheme scheme,
                                 const RotaryConfig& rotary);

}  // namespace circlerope
