// The CUDA backend's host side: the CPU's argument checks (src/cpu/check.h), the checks only
// a device needs (where each pointer lives), the plan of launches, and CUDA errors turned
// into exceptions. Nothing here includes a CUDA header; kernels.cu does the launching.
#include "circlerope/cuda.h"

#include <string>

#include "circlerope/detail/fail.h"
#include "../cpu/check.h"
#include "launch.h"
#include "plan.h"

namespace circlerope::cuda {

using detail::fail;

namespace {

[[noreturn]] void cuda_fail(const char* what, int code) {
  throw CudaError(std::string("CUDA error ") + what + ": " + gpu::error_text(code));
}

int checked_current_device() {
  const int device = gpu::current_device();
  if (device < 0) cuda_fail("while finding the current device", -device);
  return device;
}

// `what` is reachable from kernels on `device`, or Error naming it.
template <class... Name>
void require_device_memory(const void* p, int device, const Name&... what) {
  const gpu::PointerInfo info = gpu::pointer_info(p);
  if (info.status < 0) cuda_fail("while asking where a pointer lives", -info.status);
  if (info.status == 0)
    fail(what..., " is not device memory (host or unregistered memory: copy it to the device first)");
  if (info.device >= 0 && info.device != device)
    fail(what..., " is memory of CUDA device ", info.device, " but the current device is ", device);
}

void table_into(const RotaryConfig& config, const float* position_ids, std::int64_t batch,
                std::int64_t seq_len, std::span<float> values, void* stream, bool check_pointers) {
  const std::int64_t tokens =
      detail::check_table_request(config, position_ids, batch, seq_len, 0, false);
  detail::check_table_output(config, position_ids, batch, seq_len, tokens, values);
  if (values.empty()) return;
  const int device = checked_current_device();
  if (check_pointers) {
    require_device_memory(position_ids, device, "rotary table: position_ids");
    require_device_memory(values.data(), device, "rotary table: the output");
  }
  const gpu::TableLaunch job = gpu::plan_table(config, position_ids, batch, seq_len, values.data(),
                                               gpu::report_word(device, stream));
  const int code = gpu::launch_table(job, stream);
  if (code != 0) cuda_fail("launching the table kernel", code);
}

void rotate_checked(const RotaryTableView& table, std::span<const RotaryTarget> targets,
                    const RotaryParams& params, void* stream, bool check_pointers) {
  if (params.isa != Isa::automatic)
    fail("code path '", to_string(params.isa), "' names a CPU path; the CUDA rotate takes automatic");
  const std::vector<detail::CheckedTarget> checked = detail::check_rotate_targets(table, targets);
  if (checked.empty()) return;
  if (check_pointers) {
    const int device = checked_current_device();
    require_device_memory(table.values, device, "table: values");
    for (const detail::CheckedTarget& c : checked) {
      require_device_memory(c.in.data, device, "rotate target ", c.index, " in");
      if (!c.in_place) require_device_memory(c.out.data, device, "rotate target ", c.index, " out");
    }
  }
  for (const gpu::PlannedLaunch& l : gpu::plan_rotate(table, checked, params.pairing, params.direction)) {
    const int code = gpu::launch_rotate(l.job, static_cast<int>(l.dtype), l.vector, stream);
    if (code != 0) cuda_fail("launching the rotation kernel", code);
  }
}

}  // namespace

int device_count() { return gpu::device_count(); }

void make_rotary_table_into(const RotaryConfig& config, const float* position_ids,
                            std::int64_t batch, std::int64_t seq_len, std::span<float> values,
                            void* stream) {
  table_into(config, position_ids, batch, seq_len, values, stream, true);
}

void rotate(const RotaryTableView& table, std::span<const RotaryTarget> targets,
            const RotaryParams& params, void* stream) {
  rotate_checked(table, targets, params, stream, true);
}

std::optional<std::string> take_position_error(int device) {
  const unsigned long long word = gpu::take_report(device);
  if (word == 0) return std::nullopt;
  return gpu::position_error_message(word);
}

namespace internal {

void make_rotary_table_into_device_memory(const RotaryConfig& config, const float* position_ids,
                                          std::int64_t batch, std::int64_t seq_len,
                                          std::span<float> values, void* stream) {
  table_into(config, position_ids, batch, seq_len, values, stream, false);
}

void rotate_device_memory(const RotaryTableView& table, std::span<const RotaryTarget> targets,
                          const RotaryParams& params, void* stream) {
  rotate_checked(table, targets, params, stream, false);
}

}  // namespace internal

}  // namespace circlerope::cuda
