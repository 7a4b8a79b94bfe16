// Internal: the contract between the dispatcher (dispatch.cpp, which validates and threads)
// and the per-ISA kernels (kernel_<isa>.cpp, one template source compiled with each ISA's
// flags). Everything here is already validated: sizes fit, strides are non-negative, outputs
// do not overlap their inputs unless they are the same view.
#pragma once

#include <cstdint>

#include "circlerope/rotary.h"

namespace circlerope::cpu {

// Largest rotary dim a kernel stages on its stack (RotaryConfig allows up to 1024).
inline constexpr int kMaxRotaryDim = 1024;

struct TargetJob {
  const void* in = nullptr;
  void* out = nullptr;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t in_stride[4] = {};   // batch, seq, head, dim; elements
  std::int64_t out_stride[4] = {};
  bool in_place = false;
  bool stream = false;  // non-temporal stores (out of place, 16-byte aligned rows)
};

struct KernelJob {
  const float* table = nullptr;  // RotaryTable rows: token (b, s) at (b * seq_len + s) * 2 * half
  std::int64_t seq_len = 0;
  int half = 0;                  // rotary dim / 2
  DType dtype = DType::float32;  // every target of one call has one dtype
  Pairing pairing = Pairing::neox;
  bool backward = false;
  const TargetJob* targets = nullptr;
  int target_count = 0;
  bool prefetch = false;  // software prefetch ahead of each row's input (kernel_impl.h)
};

// Rotates tokens [begin, end) of the flattened (batch, seq) index of every target.
using RangeKernel = void (*)(const KernelJob& job, std::int64_t begin, std::int64_t end);

struct TableJob {
  const float* positions = nullptr;  // [3][tokens]
  std::int64_t tokens = 0;
  const int* axes = nullptr;         // [half]
  const double* inv_freq = nullptr;  // [half]
  int half = 0;
  float* values = nullptr;           // [tokens][2 * half]: cos then sin
};
// Fills the table rows of tokens [begin, end).
using TableKernel = void (*)(const TableJob& job, std::int64_t begin, std::int64_t end);

RangeKernel range_kernel_portable();
TableKernel table_kernel_portable();
#if defined(CIRCLEROPE_HAVE_X86_KERNELS)
RangeKernel range_kernel_avx2();
TableKernel table_kernel_avx2();
RangeKernel range_kernel_avx512();
TableKernel table_kernel_avx512();
RangeKernel range_kernel_avx512bf16();
TableKernel table_kernel_avx512bf16();
#endif

// The kernels of a code path (dispatch.cpp); throws Error if this CPU cannot run it.
RangeKernel range_kernel(Isa isa);
TableKernel table_kernel(Isa isa);

}  // namespace circlerope::cpu
