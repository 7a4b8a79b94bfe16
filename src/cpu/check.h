// Internal: the validation of rotate and table calls, shared by the CPU dispatcher
// (dispatch.cpp, table.cpp) and the CUDA backend (src/cuda/), so that both reject the same
// input with the same message. The checks are pointer arithmetic only: they never read the
// tensors' memory, so they hold for device pointers too (positions excepted, see below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "circlerope/rotary.h"

namespace circlerope::detail {

// A target that passed every check and has at least one element.
struct CheckedTarget {
  HeadTensor in;
  HeadTensor out;
  bool in_place = false;  // out is in itself (same data and strides)
  std::size_t index = 0;  // in the caller's list (empty targets are left out)
};

// The rules of rotary.h for rotate(): the table view's sizes, at most 64 targets, matching
// dtypes and shapes, sizes against the table, no overlap between in and out unless in place,
// no out that may write one element twice, no out shared by two targets, non-null data.
// Returns the non-empty targets in order; throws Error naming the target and the value.
std::vector<CheckedTarget> check_rotate_targets(const RotaryTableView& table,
                                                std::span<const RotaryTarget> targets);

// The config, sizes and thread count of a table request; returns batch * seq_len. When
// `positions_on_host` every position an axis in use reads must be finite (the CUDA backend
// passes false: its positions live in device memory, which the host cannot read cheaply).
std::int64_t check_table_request(const RotaryConfig& config, const float* position_ids,
                                 std::int64_t batch, std::int64_t seq_len, int threads,
                                 bool positions_on_host);

// The caller's output of a table request (make_rotary_table_into, CPU and CUDA): it holds
// exactly tokens x rotary_dim floats, is non-null unless empty, aligned to 4 bytes, and shares
// no byte with the positions it is computed from (detail/disjoint.h).
void check_table_output(const RotaryConfig& config, const float* position_ids, std::int64_t batch,
                        std::int64_t seq_len, std::int64_t tokens, std::span<float> values);

}  // namespace circlerope::detail
