// The CUDA kernels over the work items of rotary_device.h. Everything a thread computes
// lives there, shared with the CPU tests; this file only launches.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <mutex>

#include "launch.h"
#include "rotary_device.h"

namespace circlerope::gpu {

namespace {

// 128 threads per block: 0.5-1% faster than 256 on an H200 for the rotation (bench/cuda_variants.cu)
constexpr int kThreads = 128;

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

// One item per thread when the launch's indices fit in 32 bits (the grid then covers every
// item: at most 2^31 / 128 blocks); a grid-stride loop in 64 bits otherwise.
template <class S, bool kVector, int H, class I>
__global__ void __launch_bounds__(kThreads) rotate_kernel(const RotateLaunch job) {
  if constexpr (sizeof(I) == 4) {
    const std::uint32_t g = blockIdx.x * kThreads + threadIdx.x;
    if (g < static_cast<std::uint32_t>(job.items)) rotate_item_as<S, kVector, H, std::uint32_t>(job, g);
  } else {
    const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
    for (std::uint64_t g = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         g < job.items; g += stride)
      rotate_item_as<S, kVector, H, std::uint64_t>(job, g);
  }
}

template <class S, bool kVector, int H>
void launch_indexed(const RotateLaunch& job, cudaStream_t stream) {
  if (job.index32) rotate_kernel<S, kVector, H, std::uint32_t><<<blocks_for(job.items), kThreads, 0, stream>>>(job);
  else rotate_kernel<S, kVector, H, std::uint64_t><<<blocks_for(job.items), kThreads, 0, stream>>>(job);
}

template <class S, bool kVector>
int launch_path(const RotateLaunch& job, cudaStream_t stream) {
  switch (job.heads_per_item) {
    case 1: launch_indexed<S, kVector, 1>(job, stream); break;
    case 2: launch_indexed<S, kVector, 2>(job, stream); break;
    case 4: launch_indexed<S, kVector, 4>(job, stream); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

template <class S>
int launch_typed(const RotateLaunch& job, bool vector, cudaStream_t stream) {
  return vector ? launch_path<S, true>(job, stream) : launch_path<S, false>(job, stream);
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

bool stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

namespace {

constexpr int kReportDevices = 64;
std::mutex report_mutex;
unsigned long long* report_words = nullptr;  // [kReportDevices], mapped pinned host memory

}  // namespace

unsigned long long* report_word(int device, void* stream) {
  if (device < 0 || device >= kReportDevices) return nullptr;
  const std::lock_guard<std::mutex> lock(report_mutex);
  if (report_words == nullptr) {
    if (stream_capturing(stream)) return nullptr;
    void* p = nullptr;
    if (cudaHostAlloc(&p, kReportDevices * sizeof(unsigned long long),
                      cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    auto* words = static_cast<unsigned long long*>(p);
    for (int d = 0; d < kReportDevices; ++d) words[d] = 0;
    report_words = words;  // kept for the life of the process
  }
  // Unified addressing: the host address is the device address on every device.
  return report_words + device;
}

unsigned long long take_report(int device) {
  if (device < 0 || device >= kReportDevices) return 0;
  unsigned long long* words = nullptr;
  {
    const std::lock_guard<std::mutex> lock(report_mutex);
    words = report_words;
  }
  return words == nullptr ? 0 : __atomic_exchange_n(words + device, 0ull, __ATOMIC_SEQ_CST);
}

}  // namespace circlerope::gpu
