// The rotation kernel's ways of cutting the work, timed side by side on one GPU, against a
// device-to-device copy of the same bytes: heads per work item (1, 2, 4), 32- or 64-bit index
// arithmetic, threads per block. src/cuda/plan.h's PlanOptions holds the defaults this chose;
// docs/guides/cuda.md has the figures. Same device code as the library (src/cuda/rotary_device.h),
// its own launches.
//
//   nvcc -std=c++20 -O3 -arch=sm_90 -Iinclude bench/cuda_variants.cu src/cuda/plan.cpp \
//        src/cpu/check.cpp ... (scripts/gpu_check.py builds it with the library: see there)
//   build/gpu/bench/circlerope_cuda_variants [--quick] > variants.tsv
//
// Shapes: Qwen2.5-VL 3B (16 q / 2 kv heads) and 7B (28 / 4), head dim 128, batch 1 and 4,
// S 4096, 16384, 32768, bf16 and fp32, q and k in Hugging Face's layout (bshd memory), in
// place and out of place, forward. Every launch reads buffers the previous launches did not
// touch (sets of buffers in turn, at least 512 MB apart in all), so the L2 cache (50-60 MB)
// holds none of its input: the figures are DRAM figures. Times are medians of CUDA-event
// timings of 20 launches in a row (device time: launches queue faster than they run).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../src/cpu/check.h"
#include "../src/cuda/plan.h"
#include "../src/cuda/rotary_device.h"
#include "circlerope/rotary.h"

namespace {

using namespace circlerope;
namespace gpu = circlerope::gpu;

#define CHECK(call)                                                                       \
  do {                                                                                    \
    const cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

template <class S, int H, class I, int kThreads, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) rotate_variant(const gpu::RotateLaunch job) {
  if constexpr (sizeof(I) == 4) {
    const std::uint32_t g = blockIdx.x * kThreads + threadIdx.x;
    if (g < static_cast<std::uint32_t>(job.items)) gpu::rotate_item_as<S, true, H, std::uint32_t>(job, g);
  } else {
    const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
    for (std::uint64_t g = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < job.items;
         g += stride)
      gpu::rotate_item_as<S, true, H, std::uint64_t>(job, g);
  }
}

struct Variant {
  const char* name;
  int heads;
  bool index32;
  int threads;
  // launches job (whose heads_per_item and index32 match) on dtype
  void (*launch)(const gpu::RotateLaunch&, DType, cudaStream_t);
};

template <int H, class I, int T, int M>
void launch(const gpu::RotateLaunch& job, DType dtype, cudaStream_t stream) {
  std::uint64_t blocks = (job.items + T - 1) / T;
  if (sizeof(I) == 8) blocks = std::min<std::uint64_t>(blocks, 0x7FFFFFFF);
  const auto b = static_cast<unsigned>(blocks);
  switch (dtype) {
    case DType::float32: rotate_variant<gpu::F32, H, I, T, M><<<b, T, 0, stream>>>(job); break;
    case DType::bfloat16: rotate_variant<gpu::BF16, H, I, T, M><<<b, T, 0, stream>>>(job); break;
    case DType::float16: rotate_variant<gpu::F16, H, I, T, M><<<b, T, 0, stream>>>(job); break;
  }
}

const Variant kVariants[] = {
    {"h4-64bit-256", 4, false, 256, launch<4, std::uint64_t, 256, 1>},  // the kernel before the change
    {"h1-32bit-256", 1, true, 256, launch<1, std::uint32_t, 256, 1>},
    {"h2-32bit-256", 2, true, 256, launch<2, std::uint32_t, 256, 1>},
    {"h4-32bit-256", 4, true, 256, launch<4, std::uint32_t, 256, 1>},
    {"h2-32bit-128", 2, true, 128, launch<2, std::uint32_t, 128, 1>},
    {"h2-32bit-512", 2, true, 512, launch<2, std::uint32_t, 512, 1>},
    {"h1-32bit-128", 1, true, 128, launch<1, std::uint32_t, 128, 1>},
    {"h2-32bit-256-occ6", 2, true, 256, launch<2, std::uint32_t, 256, 6>},  // registers capped for 6 blocks/SM
    {"h2-64bit-256", 2, false, 256, launch<2, std::uint64_t, 256, 1>},
};

struct Shape {
  const char* model;
  int q_heads, kv_heads;
  std::int64_t batch, seq;
  DType dtype;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  // --quick: two shapes, few launches. --one-each: each variant launched once on one shape
  // (3B, batch 1, S 16384, bf16, in place), for Nsight Compute to profile every variant.
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool one_each = argc > 1 && std::strcmp(argv[1], "--one-each") == 0;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, L2 %d MB; medians of %d launches; GB/s counts bytes read + written\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, quick ? 5 : 20);
  std::printf("model\tbatch\tseq\tdtype\tmode\tvariant\tus\tGBps\tcopy_GBps\tfraction_of_copy\n");
  std::vector<Shape> shapes;
  for (DType dtype : {DType::bfloat16, DType::float32})
    for (const Shape& model : {Shape{"3B", 16, 2, 0, 0, dtype}, Shape{"7B", 28, 4, 0, 0, dtype}})
      for (std::int64_t batch : {1, 4})
        for (std::int64_t seq : {4096, 16384, 32768})
          shapes.push_back({model.model, model.q_heads, model.kv_heads, batch, seq, dtype});
  if (quick) shapes.resize(2);
  if (one_each) shapes = {Shape{"3B", 16, 2, 1, 16384, DType::bfloat16}};
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const int reps = one_each ? 1 : quick ? 5 : 20;
  const int runs = one_each ? 1 : 3, warmup = one_each ? 0 : 2;
  for (const Shape& sh : shapes) {
    const std::int64_t D = 128, tokens = sh.batch * sh.seq;
    const std::size_t es = dtype_size(sh.dtype);
    const std::size_t q_bytes = static_cast<std::size_t>(tokens * sh.q_heads * D) * es;
    const std::size_t k_bytes = static_cast<std::size_t>(tokens * sh.kv_heads * D) * es;
    const std::size_t table_bytes = static_cast<std::size_t>(tokens * D) * 4;
    const std::size_t set_bytes = 2 * (q_bytes + k_bytes) + table_bytes;  // in, out, table
    const int sets = static_cast<int>(std::clamp<std::size_t>((std::size_t{512} << 20) / set_bytes + 1, 2, 16));
    std::vector<void*> buffers;
    auto alloc = [&](std::size_t n) {
      void* p = nullptr;
      CHECK(cudaMalloc(&p, n));
      CHECK(cudaMemset(p, 0x3C, n));  // finite values in every dtype (not zeros: see METHOD)
      buffers.push_back(p);
      return p;
    };
    struct Set {
      void *q, *k, *qo, *ko;
      float* table;
    };
    std::vector<Set> all;
    for (int i = 0; i < sets; ++i)
      all.push_back({alloc(q_bytes), alloc(k_bytes), alloc(q_bytes), alloc(k_bytes),
                     static_cast<float*>(alloc(table_bytes))});
    const char* dname = sh.dtype == DType::bfloat16 ? "bf16" : "fp32";
    // the copy of the same bytes q + k read and written, as cudaMemcpyAsync does it
    std::vector<float> copy_ms;
    for (int r = 0; r < runs; ++r) {
      CHECK(cudaEventRecord(start, stream));
      for (int i = 0; i < reps; ++i) {
        const Set& s = all[static_cast<std::size_t>(i % sets)];
        CHECK(cudaMemcpyAsync(s.qo, s.q, q_bytes, cudaMemcpyDeviceToDevice, stream));
        CHECK(cudaMemcpyAsync(s.ko, s.k, k_bytes, cudaMemcpyDeviceToDevice, stream));
      }
      CHECK(cudaEventRecord(stop, stream));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      copy_ms.push_back(ms / reps);
    }
    const double copy_gbps = 2.0 * static_cast<double>(q_bytes + k_bytes) / (median(copy_ms) * 1e6);
    const double moved_out_of_place = 2.0 * static_cast<double>(q_bytes + k_bytes) + static_cast<double>(table_bytes);
    for (const bool in_place : {true, false})
      for (const Variant& v : kVariants) {
        if (one_each && !in_place) continue;
        std::vector<gpu::RotateLaunch> jobs;
        for (const Set& s : all) {
          const HeadTensor q = bshd(s.q, sh.dtype, sh.batch, sh.seq, sh.q_heads, D);
          const HeadTensor k = bshd(s.k, sh.dtype, sh.batch, sh.seq, sh.kv_heads, D);
          const HeadTensor qo = bshd(in_place ? s.q : s.qo, sh.dtype, sh.batch, sh.seq, sh.q_heads, D);
          const HeadTensor ko = bshd(in_place ? s.k : s.ko, sh.dtype, sh.batch, sh.seq, sh.kv_heads, D);
          const RotaryTarget targets[] = {{q, qo}, {k, ko}};
          const RotaryTableView view{s.table, sh.batch, sh.seq, static_cast<int>(D)};
          const auto checked = detail::check_rotate_targets(view, targets);
          const auto launches = gpu::plan_rotate(view, checked, Pairing::neox, Direction::forward,
                                                 gpu::PlanOptions{v.heads, v.index32});
          if (launches.size() != 1 || !launches[0].vector || launches[0].job.index32 != v.index32) {
            std::fprintf(stderr, "unexpected plan for %s\n", v.name);
            return 1;
          }
          jobs.push_back(launches[0].job);
        }
        std::vector<float> ms_runs;
        for (int r = 0; r < runs; ++r) {
          for (int i = 0; i < warmup; ++i) v.launch(jobs[static_cast<std::size_t>(i % sets)], sh.dtype, stream);
          CHECK(cudaEventRecord(start, stream));
          for (int i = 0; i < reps; ++i) v.launch(jobs[static_cast<std::size_t>(i % sets)], sh.dtype, stream);
          CHECK(cudaEventRecord(stop, stream));
          CHECK(cudaEventSynchronize(stop));
          CHECK(cudaGetLastError());
          float ms = 0;
          CHECK(cudaEventElapsedTime(&ms, start, stop));
          ms_runs.push_back(ms / reps);
        }
        const double ms = median(ms_runs);
        const double gbps = moved_out_of_place / (ms * 1e6);
        std::printf("%s\t%lld\t%lld\t%s\t%s\t%s\t%.2f\t%.0f\t%.0f\t%.3f\n", sh.model, static_cast<long long>(sh.batch),
                    static_cast<long long>(sh.seq), dname, in_place ? "inplace" : "outofplace", v.name, ms * 1e3, gbps,
                    copy_gbps, gbps / copy_gbps);
      }
    for (void* p : buffers) CHECK(cudaFree(p));
    std::fflush(stdout);
  }
  return 0;
}
