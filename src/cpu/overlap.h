// Internal: whether two strided views share a byte, decided on the byte sets themselves (not
// their bounding boxes), so that q and k views of one fused qkv buffer, which interleave
// without sharing a byte, pass, and out[1] = out[0] + 1 float does not.
//
// A view's bytes are base + sum_k i_k * stride_k + [0, width), 0 <= i_k < count_k. Dimensions
// of count 1 or stride 0 do not change that set and are dropped; a dimension whose stride is at
// most the width joins it (its runs touch: one longer run).
//
// Decision (exact): let P be the largest stride of either view.
//  - Both have a dimension of stride P (A = U_i A' + iP, B = U_j B' + jP): they share a byte iff
//    A' + kP and B' do for some k = i - j in [-(m-1), n-1]; only the k whose bounding boxes meet
//    need a look (one or two when each view's other dimensions span less than P, as in every
//    tensor that does not overlap itself).
//  - Only A has it: A' + iP against B for the i whose bounding box meets B's.
// Each step removes a dimension; views with disjoint bounding boxes share nothing; two plain
// runs share a byte iff their boxes meet. A budget of steps bounds the work on adversarial
// strides: past it the answer is `undecided`, which callers refuse with a message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "circlerope/rotary.h"

namespace circlerope::cpu {

enum class Overlap { disjoint, shared, undecided };

// Views must have non-negative strides and sizes whose offsets fit (dispatch.cpp checks
// both before asking). An empty view shares nothing.
Overlap byte_overlap(const HeadTensor& a, const HeadTensor& b, int budget = 4096);
// A view against the contiguous bytes [data, data + bytes) (a rotary table's values).
Overlap byte_overlap(const HeadTensor& a, const void* data, std::size_t bytes, int budget = 4096);

}  // namespace circlerope::cpu
