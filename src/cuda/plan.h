// Internal: turns a validated rotate call into kernel launches (rotary_device.h describes the
// work items). Host code only, no CUDA headers: the CPU tests run the planned launches item by
// item (tests/test_cuda_math.cpp) exactly as the device would.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../cpu/check.h"
#include "circlerope/rotary.h"
#include "rotary_device.h"

namespace circlerope::gpu {

struct PlannedLaunch {
  RotateLaunch job;
  bool vector = false;  // the 16-byte path (rotate_vector_unit) or the scalar one
  DType dtype = DType::float32;
};

// Whether a target takes the 16-byte path: unit dim strides, rows whose start and every
// batch/seq/head step are 16-byte aligned in both views, whole packs per rotary half (neox)
// or rotary dim (gptj), and a 16-byte aligned table (its rows then are too).
bool vector_path(const detail::CheckedTarget& target, int rotary_dim, Pairing pairing,
                 const float* table);

// Targets grouped by path, at most kMaxLaunchTargets per launch, in their order otherwise.
std::vector<PlannedLaunch> plan_rotate(const RotaryTableView& table,
                                       std::span<const detail::CheckedTarget> targets,
                                       Pairing pairing, Direction direction);

// The table launch for `tokens` tokens (config already validated).
TableLaunch plan_table(const RotaryConfig& config, const float* positions, std::int64_t tokens,
                       float* values);

}  // namespace circlerope::gpu
