// Internal: turns a validated rotate call into kernel launches (rotary_device.h describes the
// work items). Host code only, no CUDA headers: the CPU tests run the planned launches item by
// item (tests/test_cuda_math.cpp) exactly as the device would.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../cpu/check.h"
#include "circlerope/rotary.h"
#include "rotary_device.h"

namespace circlerope::gpu {

// How the rotation's work is cut; the defaults are what cuda::rotate uses. bench/cuda_variants.cu
// plans with others to compare: on an H200 (docs/guides/cuda.md) 2 heads per item was fastest for
// 16-bit storage and 1 for float32 (by 1-3% over the other 32-bit variants), 32-bit index
// arithmetic 4-18% faster than 64-bit.
struct PlanOptions {
  int heads_per_item = 0;     // 1, 2 or 4; 0: 2 for bfloat16 and float16, 1 for float32
  bool allow_index32 = true;  // 32-bit index arithmetic where every index of a launch fits
};

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
                                       Pairing pairing, Direction direction,
                                       const PlanOptions& options = {});

// The table launch for batch x seq_len tokens (config already validated); `report` is where
// the kernel reports a non-finite position (TableLaunch::report), or null.
TableLaunch plan_table(const RotaryConfig& config, const float* positions, std::int64_t batch,
                       std::int64_t seq_len, float* values, unsigned long long* report = nullptr);

// The CPU table's error message for the position a report word describes (decode_report):
// "rotary table: position of axis a at row b, token s is nan (positions must be finite)".
std::string position_error_message(unsigned long long report);

}  // namespace circlerope::gpu
