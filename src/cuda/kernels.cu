// The CUDA kernels: grid-stride loops over the work items of rotary_device.h. Everything a
// thread computes lives there, shared with the CPU tests; this file only launches.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "launch.h"
#include "rotary_device.h"

namespace circlerope::gpu {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::uint64_t items) {
  // A grid-stride loop covers the rest when there are more items than 2^31 - 1 blocks hold.
  const std::uint64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 0x7FFFFFFFull ? blocks : 0x7FFFFFFFull);
}

__global__ void __launch_bounds__(kThreads) table_kernel(const TableLaunch job) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t g = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       g < job.items; g += stride)
    table_item(job, g);
}

template <class S, bool kVector>
__global__ void __launch_bounds__(kThreads) rotate_kernel(const RotateLaunch job) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t g = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       g < job.items; g += stride)
    rotate_item<S, kVector>(job, g);
}

template <class S>
int launch_typed(const RotateLaunch& job, bool vector, cudaStream_t stream) {
  if (vector) rotate_kernel<S, true><<<blocks_for(job.items), kThreads, 0, stream>>>(job);
  else rotate_kernel<S, false><<<blocks_for(job.items), kThreads, 0, stream>>>(job);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch_table(const TableLaunch& job, void* stream) {
  if (job.items == 0) return 0;
  table_kernel<<<blocks_for(job.items), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(job);
  return static_cast<int>(cudaGetLastError());
}

int launch_rotate(const RotateLaunch& job, int dtype, bool vector, void* stream) {
  if (job.items == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case F32::kDType: return launch_typed<F32>(job, vector, s);
    case BF16::kDType: return launch_typed<BF16>(job, vector, s);
    case F16::kDType: return launch_typed<F16>(job, vector, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear it: "no device" must not stick to the next call
    return 0;
  }
  return n;
}

const char* error_text(int code) {
  thread_local char text[256];
  const auto e = static_cast<cudaError_t>(code);
  snprintf(text, sizeof text, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  return text;
}

PointerInfo pointer_info(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return {-static_cast<int>(e), -1};
  }
  // Device memory belongs to one device; managed memory and mapped pinned host memory (same
  // address on host and device) are reachable from every device: -1, no device to match.
  if (a.type == cudaMemoryTypeDevice) return {1, a.device};
  const bool reachable = a.type == cudaMemoryTypeManaged ||
                         (a.type == cudaMemoryTypeHost && a.devicePointer == p);
  return {reachable ? 1 : 0, -1};
}

int current_device() {
  int d = -1;
  const cudaError_t e = cudaGetDevice(&d);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return -static_cast<int>(e);
  }
  return d;
}

}  // namespace circlerope::gpu
