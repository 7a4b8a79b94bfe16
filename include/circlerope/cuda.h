// circlerope — the rotary kernels on a CUDA GPU: the same tables and rotation as rotary.h,
// on device memory, asynchronously on a stream. Link circlerope::cuda (built when the project
// is configured with CIRCLEROPE_CUDA=ON, or AUTO and nvcc found). No CUDA header is needed:
// a stream is passed as void* (a cudaStream_t; nullptr is the legacy default stream).
//
//   std::vector<float> table_values(batch * seq * 128) -> a device buffer `table_d` instead
//   circlerope::cuda::make_rotary_table_into(config, positions_d, batch, seq, {table_d, n}, stream);
//   circlerope::RotaryTableView view{table_d, batch, seq, 128};
//   circlerope::RotaryTarget qk[] = {{q, q}, {k, k}};          // HeadTensor views of device memory
//   circlerope::cuda::rotate(view, qk, {circlerope::Pairing::neox}, stream);
//
// Every argument is validated on the host first, by the same checks and messages as the CPU
// functions (shapes, dtypes, overlap, null pointers): bad input throws circlerope::Error and
// launches nothing. Then each pointer must be device-accessible memory of the current device
// (cudaPointerGetAttributes: a host pointer would fault the kernel and poison the context);
// if not, Error again. Failures of the CUDA runtime itself (no device, a launch error) throw
// circlerope::cuda::CudaError. Kernel execution is asynchronous: errors it meets surface at the
// caller's next synchronisation, as with any CUDA library.
//
// Numbers (docs/cuda.md), by design and tested on the CPU; not yet measured on a GPU: table
// entries within one float32 ulp of the CPU table (both round the double angle's cos/sin once;
// CUDA documents its double sin/cos/pow within 2 ulp of double). Rotation is fp32 math with
// one rounding per operation, never fused, so for a given table each element equals the CPU
// emulation of the kernel (tests/test_cuda_math.cpp) bit for bit, and the error bound against
// the float64 reference is the CPU kernels' one.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "circlerope/rotary.h"

namespace circlerope::cuda {

// A failure of the CUDA runtime (not of the caller's arguments), with its message.
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& message) : std::runtime_error(message) {}
};

// Devices the CUDA runtime sees; 0 when there is no device or no driver. Never throws.
int device_count();

// The table of rotary.h (per token D/2 cos then D/2 sin, float32) computed on the current
// device into `values` (device memory, exactly batch * seq_len * rotary_dim floats) from
// `position_ids` (device memory, float32 [3][batch][seq_len]). Positions are not read on the
// host: unlike the CPU function, a non-finite position is not an error here, it gives NaN
// entries for its token (the PyTorch op checks positions itself before calling this).
void make_rotary_table_into(const RotaryConfig& config, const float* position_ids,
                            std::int64_t batch, std::int64_t seq_len, std::span<float> values,
                            void* stream = nullptr);

// rotary.h's rotate() on device memory: the table view and every target point to memory of
// the current device. params.threads is ignored; params.isa must be Isa::automatic (it names
// CPU code paths). Targets on the 16-byte path (contiguous 16-byte aligned rows) and the rest
// are launched separately, up to 8 targets per launch.
void rotate(const RotaryTableView& table, std::span<const RotaryTarget> targets,
            const RotaryParams& params = {}, void* stream = nullptr);

}  // namespace circlerope::cuda
