// libFuzzer target, differential: the CUDA C API's host-side checks (c_cuda.h) against the CPU
// C API's (c_kernels.h), without a GPU or nvcc. Each input is one table fill and one rotation,
// made with the same arguments through crp_cuda_table_fill / crp_table_fill and
// crp_cuda_rotate / crp_rotate: fuzzed configs, views (sizes, NULL, misaligned or overlapping
// values), params (NULL, out-of-range enums and threads, forced code paths), positions (NULL,
// misaligned, non-finite, under the values) and up to 4 tensors in one arena, placed so that
// they overlap or are misaligned, plus counts past the cap over a shorter array.
//
// The CUDA C API's host side (src/cuda/c_cuda.cpp, cuda.cpp, plan.cpp) is compiled into this
// target; below it, the functions of src/cuda/launch.h (kernels.cu's, over the CUDA runtime)
// are replaced by a runtime that has no device, or, for half of the inputs, one device that
// none of this target's pointers belong to. Nothing is ever launched.
//
// Verdict (c_cuda.h: "the same checks and messages before any device call"):
//  - the CPU refuses: CUDA refuses with the same status and message, except where only the CPU
//    can see the problem (a non-finite position: the host does not read device memory; CUDA
//    must still not succeed) or CUDA has refused first for its own reason (a forced CPU code
//    path);
//  - the CPU accepts: CUDA refuses only for its own reasons (a forced CPU code path, host
//    memory, the missing device), and succeeds only when there is nothing to launch.
// Every CPU status is CRP_OK or CRP_INVALID_ARGUMENT. Numbers are fuzz_c_kernels's business.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "circlerope/c_cuda.h"
#include "circlerope/c_kernels.h"
#include "fuzz_support.h"
#include "launch.h"

// ---- the CUDA runtime of this target ----------------------------------------------------------
namespace circlerope::gpu {

namespace {
bool g_one_device = false;          // false: no device (or driver); true: device 0, current
constexpr int kNoDevice = 100;      // cudaErrorNoDevice
}  // namespace

int launch_table(const TableLaunch&, void*) { fuzz::finding("a table kernel was launched"); }
int launch_rotate(const RotateLaunch&, int, bool, void*) { fuzz::finding("a rotation kernel was launched"); }
int device_count() { return g_one_device ? 1 : 0; }
const char* error_text(int code) {
  return code == kNoDevice ? "cudaErrorNoDevice: no CUDA-capable device is detected"
                           : "cudaErrorUnknown: unknown error";
}
PointerInfo pointer_info(const void*) { return g_one_device ? PointerInfo{0, -1} : PointerInfo{-kNoDevice, -1}; }
int current_device() { return g_one_device ? 0 : -kNoDevice; }
bool stream_capturing(void*) { return false; }
unsigned long long* report_word(int, void*) { return nullptr; }
unsigned long long take_report(int) { return 0; }

}  // namespace circlerope::gpu

namespace {

int pick_int(FuzzedDataProvider& in, std::initializer_list<int> usual) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  const std::vector<int> v(usual);
  if (k < 240) return v[k % v.size()];
  return in.ConsumeIntegral<int>();
}

int64_t pick_int64(FuzzedDataProvider& in, std::initializer_list<int64_t> usual) {
  const std::vector<int64_t> v(usual);
  return v[in.ConsumeIntegralInRange<size_t>(0, v.size() - 1)];
}

double pick_double(FuzzedDataProvider& in, std::initializer_list<double> usual) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  const std::vector<double> v(usual);
  if (k < 230) return v[k % v.size()];
  if (k < 240) return NAN;
  return in.ConsumeFloatingPoint<double>();
}

struct Outcome {
  crp_status status = CRP_OK;
  std::string message;
};

template <class Call>
Outcome run(Call&& call) {
  char message[512];
  std::memset(message, 0x5A, sizeof message);
  Outcome o;
  o.status = call(message, sizeof message);
  FUZZ_CHECK(std::memchr(message, '\0', sizeof message) != nullptr, "a message without its NUL");
  o.message = message;
  return o;
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

bool cpu_path_refusal(const Outcome& o) {
  return o.status == CRP_INVALID_ARGUMENT &&
         contains(o.message, ") names a CPU code path; the CUDA functions take CRP_ISA_AUTOMATIC");
}

// CUDA's refusal of a call with something to launch: host memory on the machine with a device,
// the missing device on the other.
bool device_refusal(const Outcome& o, bool have_device) {
  if (have_device) return o.status == CRP_INVALID_ARGUMENT && contains(o.message, " is not device memory");
  return o.status == CRP_INTERNAL_ERROR && o.message.rfind("CUDA error while finding the current device", 0) == 0;
}

// `cpu_only`: the CPU's message names what only the CPU can see. `work`: the call has
// something to launch.
void compare(const char* call, const Outcome& cpu, const Outcome& cuda, bool forced_path, bool cpu_only, bool work,
             bool have_device) {
  FUZZ_CHECK(cpu.status == CRP_OK || cpu.status == CRP_INVALID_ARGUMENT, "%s (CPU) returned status %d: %s", call,
             static_cast<int>(cpu.status), cpu.message.c_str());
  if (forced_path && cpu_path_refusal(cuda)) return;
  FUZZ_CHECK(!cpu_path_refusal(cuda), "%s (CUDA) refused the automatic path: %s", call, cuda.message.c_str());
  if (cpu.status != CRP_OK) {
    if (cpu_only) {
      FUZZ_CHECK(cuda.status != CRP_OK, "%s (CUDA) succeeded where the CPU says: %s", call, cpu.message.c_str());
      return;
    }
    FUZZ_CHECK(cuda.status == cpu.status && cuda.message == cpu.message,
               "%s: the CPU API says %d \"%s\", the CUDA API %d \"%s\"", call, static_cast<int>(cpu.status),
               cpu.message.c_str(), static_cast<int>(cuda.status), cuda.message.c_str());
    return;
  }
  FUZZ_CHECK(!forced_path, "%s (CUDA) accepted a CPU code path", call);
  if (!work) {
    FUZZ_CHECK(cuda.status == CRP_OK, "%s: the CPU API accepts a call with nothing to do, the CUDA API says %d \"%s\"",
               call, static_cast<int>(cuda.status), cuda.message.c_str());
    return;
  }
  FUZZ_CHECK(device_refusal(cuda, have_device), "%s: the CPU API accepts what the CUDA API answers with %d \"%s\"",
             call, static_cast<int>(cuda.status), cuda.message.c_str());
}

// Regions of one arena: fresh ones (aligned, or a few bytes off) and ones laid over an earlier
// region. Extents are only claimed for sizes the harness keeps small, so that any call the
// library accepts stays inside the arena.
struct Arena {
  int64_t end = 0;
  std::vector<int64_t> starts;
  int64_t place(FuzzedDataProvider& in, int64_t extent) {
    int64_t at;
    const int choice = starts.empty() ? 0 : in.ConsumeIntegralInRange<int>(0, 9);
    if (choice < 7) {
      at = (end + 63) / 64 * 64;
      if (in.ConsumeIntegralInRange<int>(0, 7) == 0) at += in.ConsumeIntegralInRange<int64_t>(1, 3);
    } else {
      at = starts[in.ConsumeIntegralInRange<size_t>(0, starts.size() - 1)] +
           4 * in.ConsumeIntegralInRange<int64_t>(0, 8);
    }
    starts.push_back(at);
    end = std::max(end, at + std::max<int64_t>(extent, 0) + 4);
    return at;
  }
};

constexpr int64_t kHuge = int64_t{1} << 40;

struct Tensor {
  int64_t in_at = 0, out_at = 0;
  bool in_null = false, out_null = false;
  crp_head_tensor in{}, out{};
};

int64_t element_size(int dtype) { return dtype == CRP_DTYPE_BFLOAT16 || dtype == CRP_DTYPE_FLOAT16 ? 2 : 4; }

// Bytes from the first element to one past the last (0 when empty); negative strides are
// refused before anything is read, so they claim nothing.
int64_t extent(const crp_head_tensor& t) {
  int64_t last = 0;
  for (int d = 0; d < 4; ++d) {
    if (t.shape[d] <= 0) return 0;
    if (t.strides[d] > 0) last += (t.shape[d] - 1) * t.strides[d];
  }
  return (last + 1) * element_size(t.dtype);
}

void draw_strides(FuzzedDataProvider& in, crp_head_tensor& t) {
  if (in.ConsumeIntegralInRange<int>(0, 5) == 0) {
    for (int64_t& s : t.strides) s = in.ConsumeIntegralInRange<int64_t>(0, 40);
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) t.strides[in.ConsumeIntegralInRange<int>(0, 3)] = -1;
    return;
  }
  int order[4] = {3, 2, 1, 0};
  if (in.ConsumeBool()) std::swap(order[1], order[2]);  // [B, H, S, D]
  int64_t step = 1;
  for (int d : order) {
    t.strides[d] = step;
    step *= std::max<int64_t>(t.shape[d], 1);
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) step += in.ConsumeIntegralInRange<int64_t>(1, 5);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  circlerope::gpu::g_one_device = in.ConsumeBool();
  int devices = -1;
  FUZZ_CHECK(crp_cuda_device_count(&devices) == CRP_OK && devices == (circlerope::gpu::g_one_device ? 1 : 0),
             "crp_cuda_device_count gave %d", devices);
  const bool have_device = devices > 0;

  // ---- config, view, params ----
  crp_rotary_config config;
  crp_rotary_config_default(&config);
  config.theta = pick_double(in, {1e6, 1e4, 10.0, 0.5, 0.0});
  config.rotary_dim = pick_int(in, {16, 8, 4, 2, 6, 128, 0, 3, -2, 1026});
  config.layout = pick_int(in, {0, 1, 2, 0, -1, 3});
  const int half = config.rotary_dim / 2;
  if (in.ConsumeIntegralInRange<int>(0, 7) != 0 && half > 0 && half <= 512) {
    config.sections[0] = in.ConsumeIntegralInRange<int>(0, half);
    config.sections[1] = in.ConsumeIntegralInRange<int>(0, half - config.sections[0]);
    config.sections[2] = half - config.sections[0] - config.sections[1];
  } else {
    for (int& s : config.sections) s = pick_int(in, {0, 1, -1, 4, 2147483647});
  }
  const bool config_null = in.ConsumeIntegralInRange<int>(0, 31) == 0;

  const int64_t batch = in.ConsumeIntegralInRange<int>(0, 15) == 0
                            ? pick_int64(in, {-1, kHuge, CRP_MAX_TOKENS + 1, INT64_MAX})
                            : in.ConsumeIntegralInRange<int64_t>(0, 2);
  const int64_t seq = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? pick_int64(in, {-1, kHuge, INT64_MAX})
                                                                 : in.ConsumeIntegralInRange<int64_t>(0, 5);
  const int view_dim = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? pick_int(in, {0, 14, 15, 2048, -2})
                                                                  : config.rotary_dim;
  const bool table_null = in.ConsumeIntegralInRange<int>(0, 31) == 0;
  // Sizes the library may accept are small here; any other is refused before it is used.
  const bool small = batch >= 0 && batch <= 2 && seq >= 0 && seq <= 5;
  const int64_t tokens = small ? batch * seq : 0;
  const bool dim_ok = view_dim >= 2 && view_dim <= 1024;

  crp_rotary_params params;
  crp_rotary_params_default(&params);
  params.pairing = pick_int(in, {0, 1, 0, 1, -1, 2});
  params.direction = pick_int(in, {0, 1, 0, 1, -1, 2});
  params.threads = pick_int(in, {0, 1, 2, 1, -1, CRP_MAX_THREADS + 1});
  params.isa = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? pick_int(in, {1, 2, 3, 4, 5, -1}) : CRP_ISA_AUTOMATIC;
  const bool params_null = in.ConsumeIntegralInRange<int>(0, 7) == 0;
  const bool forced_path = !params_null && params.isa >= CRP_ISA_PORTABLE && params.isa <= CRP_ISA_AVX512BF16;

  // ---- the arena: positions, the table's values, the tensors ----
  Arena arena;
  const bool positions_null = in.ConsumeIntegralInRange<int>(0, 31) == 0;
  const int64_t positions_at = arena.place(in, 3 * tokens * 4);
  const bool values_null = in.ConsumeIntegralInRange<int>(0, 31) == 0;
  const int64_t values_at = arena.place(in, dim_ok ? tokens * view_dim * 4 : 0);
  std::vector<float> positions(static_cast<size_t>(3 * tokens));
  bool non_finite = false;
  for (float& p : positions) {
    const uint8_t k = in.ConsumeIntegral<uint8_t>();
    p = k < 240 ? static_cast<float>(k % 17) - 4.5f : k < 248 ? NAN : INFINITY;
    non_finite = non_finite || !std::isfinite(p);
  }

  const int dtype = in.ConsumeIntegralInRange<int>(0, 2);
  int count = in.ConsumeIntegralInRange<int>(0, 4);
  int tensors = count;
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: count = -1, tensors = 0; break;
    case 1: count = CRP_MAX_TARGETS + 1, tensors = in.ConsumeIntegralInRange<int>(0, 2); break;
    case 2: count = INT_MAX, tensors = in.ConsumeIntegralInRange<int>(0, 2); break;
    default: break;
  }
  const int64_t tensor_batch = small ? batch : 1, tensor_seq = small ? seq : 1;
  std::vector<Tensor> drawn(static_cast<size_t>(tensors));
  for (Tensor& t : drawn) {
    crp_head_tensor& a = t.in;
    a.dtype = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? pick_int(in, {0, 1, 2, -1, 3}) : dtype;
    a.shape[0] = tensor_batch + (in.ConsumeIntegralInRange<int>(0, 31) == 0 ? 1 : 0);
    a.shape[1] = tensor_seq - (in.ConsumeIntegralInRange<int>(0, 31) == 0 ? 1 : 0);
    a.shape[2] = in.ConsumeIntegralInRange<int64_t>(in.ConsumeIntegralInRange<int>(0, 15) == 0 ? 0 : 1, 3);
    a.shape[3] = std::clamp<int64_t>(view_dim, 0, 64) + in.ConsumeIntegralInRange<int64_t>(-1, 2) * 2;
    if (a.shape[3] < 0) a.shape[3] = 0;
    draw_strides(in, a);
    t.in_null = in.ConsumeIntegralInRange<int>(0, 63) == 0;
    t.in_at = arena.place(in, extent(a));
    t.out = a;
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      case 0: case 1: case 2: case 3: t.out_at = t.in_at; break;  // in place
      case 9: t.out.dtype = pick_int(in, {0, 1, 2, 7}); [[fallthrough]];
      default:
        draw_strides(in, t.out);
        t.out_at = arena.place(in, extent(t.out));
    }
    t.out_null = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  }
  const bool in_null = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  const bool out_null = in.ConsumeIntegralInRange<int>(0, 63) == 0;

  std::vector<unsigned char> bytes(static_cast<size_t>(arena.end) + 64, 0);
  unsigned char* base = bytes.data();
  if (!positions.empty()) std::memcpy(base + positions_at, positions.data(), positions.size() * sizeof(float));
  const float* position_ids = positions_null ? nullptr : reinterpret_cast<const float*>(base + positions_at);
  const crp_table_view table{values_null ? nullptr : reinterpret_cast<float*>(base + values_at), batch, seq, view_dim};
  // Exactly `tensors` elements on the heap: a count past them must not be read past them.
  std::vector<crp_head_tensor> ins(drawn.size()), outs(drawn.size());
  bool work = false;
  for (size_t i = 0; i < drawn.size(); ++i) {
    ins[i] = drawn[i].in;
    outs[i] = drawn[i].out;
    ins[i].data = drawn[i].in_null ? nullptr : base + drawn[i].in_at;
    outs[i].data = drawn[i].out_null ? nullptr : base + drawn[i].out_at;
    work = work || extent(ins[i]) > 0;
  }
  const crp_head_tensor* in_arg = in_null ? nullptr : ins.data();
  const crp_head_tensor* out_arg = out_null ? nullptr : outs.data();
  const crp_rotary_config* config_arg = config_null ? nullptr : &config;
  const crp_table_view* table_arg = table_null ? nullptr : &table;
  const crp_rotary_params* params_arg = params_null ? nullptr : &params;

  // ---- the fill, then the rotation: CUDA first (it writes nothing here), then the CPU ----
  const Outcome cuda_fill = run([&](char* e, size_t n) {
    return crp_cuda_table_fill(config_arg, position_ids, table_arg, params_arg, nullptr, e, n);
  });
  const Outcome cpu_fill =
      run([&](char* e, size_t n) { return crp_table_fill(config_arg, position_ids, table_arg, params_arg, e, n); });
  fuzz::count(cpu_fill.status == CRP_OK ? "fill accepted" : "fill refused");
  compare("table fill", cpu_fill, cuda_fill, forced_path,
          non_finite && contains(cpu_fill.message, "(positions must be finite)"), tokens > 0, have_device);

  const Outcome cuda_rotate = run([&](char* e, size_t n) {
    return crp_cuda_rotate(table_arg, in_arg, out_arg, count, params_arg, nullptr, e, n);
  });
  const Outcome cpu_rotate =
      run([&](char* e, size_t n) { return crp_rotate(table_arg, in_arg, out_arg, count, params_arg, e, n); });
  fuzz::count(cpu_rotate.status == CRP_OK ? "rotate accepted" : "rotate refused");
  compare("rotate", cpu_rotate, cuda_rotate, forced_path, false, work, have_device);
  return 0;
}
