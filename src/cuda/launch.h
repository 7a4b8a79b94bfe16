// Internal: the boundary between host C++ (cuda.cpp, C++20, g++) and the kernels
// (kernels.cu, nvcc). Plain structs and ints only: no CUDA header, no exception crosses it.
#pragma once

#include "rotary_device.h"

namespace circlerope::gpu {

// Each returns the cudaError_t of the launch (0 = cudaSuccess); stream is a cudaStream_t.
int launch_table(const TableLaunch& job, void* stream);
// dtype: DType's value; vector: the 16-byte path.
int launch_rotate(const RotateLaunch& job, int dtype, bool vector, void* stream);

// cudaGetDeviceCount's count, or 0 on any error.
int device_count();
// cudaGetErrorName(code) + ": " + cudaGetErrorString(code), into a static string.
const char* error_text(int code);

// Where a pointer lives, for the argument checks: 1 device memory of device `device`,
// 0 host memory or unknown to CUDA, < 0 the negated cudaError_t of the query.
struct PointerInfo {
  int status = 0;
  int device = -1;
};
PointerInfo pointer_info(const void* p);
// cudaGetDevice, or the negated error.
int current_device();

// Whether work queued on `stream` now is being captured into a CUDA graph (an error counts
// as capturing: the caller then avoids anything a capture forbids).
bool stream_capturing(void* stream);

// The word where table kernels on `device` report a non-finite position (TableLaunch::report):
// host memory mapped into every device's address space, allocated on the first call that is
// not capturing a graph. Null when it cannot be had (device >= 64, an allocation failure, or
// not yet allocated during a capture): the table then has NaN entries and no report.
unsigned long long* report_word(int device, void* stream);
// The report word of `device` (0: none), set back to 0. No synchronisation.
unsigned long long take_report(int device);

}  // namespace circlerope::gpu
