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
// Numbers (docs/guides/cuda.md; tested on the CPU emulation and on a GPU): a table entry is the
// double angle's cos/sin rounded once to float, so it is within an absolute
// 2^-25 + 2^-47 |phi| + 2^-50 of the exact cos/sin of phi = position * theta^(-2i/D) (half a
// float ulp of a value in [0.5, 1], plus the double angle's error, which CUDA's pow and sincos
// keep within a few double ulps): 6e-8 for |phi| < 2^22. An absolute bound, not one in ulps
// of the value: near a zero of cos or sin the value is tiny and a double error far below
// 2^-25 is many of its ulps; what the rotation sees is the error relative to the pair's norm,
// 1. Rotation is fp32 math with one rounding per operation, never fused, so for a given table
// each element equals the CPU emulation of the kernel (tests/test_cuda_math.cpp) bit for bit,
// and the error bound against the float64 reference is the CPU kernels' one.
#pragma once

#include <cstdint>
#include <optional>
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
// `position_ids` (device memory, float32 [3][batch][seq_len]). Nothing here waits for the
// device, so the call can be captured in a CUDA graph. Positions are not read on the host:
// unlike the CPU function, a non-finite position is not an error here. Its token gets NaN
// entries for the frequencies of that axis, and the kernel records it (one record per device,
// the last one found) for take_position_error.
void make_rotary_table_into(const RotaryConfig& config, const float* position_ids,
                            std::int64_t batch, std::int64_t seq_len, std::span<float> values,
                            void* stream = nullptr);

// The CPU function's error message for a non-finite position that a table kernel on `device`
// recorded since the last call ("rotary table: position of axis a at row b, token s is nan
// (positions must be finite)"), and clears the record; std::nullopt when there is none. It
// does not synchronise: a kernel that has not finished yet has not recorded anything, so
// synchronise the stream first to cover every table queued so far. Tables made while the
// first table of the process was being captured into a CUDA graph record nothing (the record's
// host memory is allocated outside captures).
std::optional<std::string> take_position_error(int device);

// rotary.h's rotate() on device memory: the table view and every target point to memory of
// the current device. params.threads is ignored; params.isa must be Isa::automatic (it names
// CPU code paths). Targets on the 16-byte path (contiguous 16-byte aligned rows) and the rest
// are launched separately, up to 8 targets per launch.
void rotate(const RotaryTableView& table, std::span<const RotaryTarget> targets,
            const RotaryParams& params = {}, void* stream = nullptr);

namespace internal {
// The two functions above without the pointer checks (cudaPointerGetAttributes per pointer,
// about a microsecond each), for callers whose pointers are device memory of the current
// device by construction: the PyTorch operators, whose CUDA tensors are. Every other check
// stays.
void make_rotary_table_into_device_memory(const RotaryConfig& config, const float* position_ids,
                                          std::int64_t batch, std::int64_t seq_len,
                                          std::span<float> values, void* stream);
void rotate_device_memory(const RotaryTableView& table, std::span<const RotaryTarget> targets,
                          const RotaryParams& params, void* stream);
}  // namespace internal

}  // namespace circlerope::cuda
