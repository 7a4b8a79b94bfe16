// The CUDA backend on a GPU: tables against the CPU table, the rotation against the float64
// reference through the CPU kernels' own harness, the kernels against their CPU emulation
// bit for bit, Qwen2.5-VL shapes, a tensor beyond 2^31 elements, streams, managed memory,
// host pointers refused without poisoning the context. Tests that need a device skip with
// "no CUDA device" where cudaGetDeviceCount finds none (the build machines); the host-side
// checks (CudaHost.*) run everywhere.
//
// CudaSanitizer.* is the short run scripts/gpu_check.sh gives to compute-sanitizer.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../src/cpu/check.h"
#include "../../src/cpu/convert.h"
#include "../../src/cuda/plan.h"
#include "../../src/cuda/rotary_device.h"
#include "circlerope/cuda.h"
#include "circlerope/rotary.h"
#include "harness.h"
#include "rotary_reference.h"

namespace {

using namespace circlerope;
namespace gpu = circlerope::gpu;
namespace ref = circlerope::reference;

bool have_device() { return cuda::device_count() > 0; }

#define REQUIRE_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)"

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " " + cudaGetErrorString(e));
}

// Device memory that frees itself.
struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n, bool managed = false) : bytes(n) {
    cuda_ok(managed ? cudaMallocManaged(&p, std::max<std::size_t>(n, 1))
                    : cudaMalloc(&p, std::max<std::size_t>(n, 1)),
            "cudaMalloc");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
  void upload(const void* host) { cuda_ok(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "upload"); }
  void download(void* host) const { cuda_ok(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost), "download"); }
};

void sync() { cuda_ok(cudaDeviceSynchronize(), "kernel"); }

// ---- the harness's backend: table and rotation on the device --------------------------------

struct DeviceRun {
  std::vector<float> table;  // the device table, copied back (the emulation test reuses it)
  int vector_targets = 0;
};

// Copies the case's whole buffers (guards included) over, builds the table and rotates on
// the device, copies the out buffers back.
ref::Rotator device_rotator(DeviceRun* run = nullptr) {
  return [run](const RotaryConfig& config, const float* positions, std::int64_t batch,
               std::int64_t seq, std::span<const ref::ComparisonTarget> targets,
               const RotaryParams& params) {
    const std::int64_t tokens = batch * seq;
    DeviceBuffer pos(static_cast<std::size_t>(3 * tokens) * sizeof(float));
    pos.upload(positions);
    const auto n = static_cast<std::size_t>(tokens * config.rotary_dim);
    DeviceBuffer table(n * sizeof(float));
    cuda::make_rotary_table_into(config, pos.as<float>(), batch, seq, {table.as<float>(), n});
    std::vector<std::unique_ptr<DeviceBuffer>> buffers;
    std::vector<RotaryTarget> views;
    for (const ref::ComparisonTarget& t : targets) {
      auto rebase = [](HeadTensor v, std::span<unsigned char> host, const DeviceBuffer& dev) {
        v.data = dev.as<unsigned char>() + (static_cast<unsigned char*>(v.data) - host.data());
        return v;
      };
      buffers.push_back(std::make_unique<DeviceBuffer>(t.in_storage.size()));
      DeviceBuffer& in = *buffers.back();
      in.upload(t.in_storage.data());
      const bool same = t.in_storage.data() == t.out_storage.data();
      if (!same) {
        buffers.push_back(std::make_unique<DeviceBuffer>(t.out_storage.size()));
        buffers.back()->upload(t.out_storage.data());
      }
      const DeviceBuffer& out = *buffers.back();
      views.push_back({rebase(t.view.in, t.in_storage, in), rebase(t.view.out, t.out_storage, out)});
    }
    const RotaryTableView view{table.as<float>(), batch, seq, config.rotary_dim};
    RotaryParams p = params;
    p.isa = Isa::automatic;
    cuda::rotate(view, views, p);
    sync();
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const auto* base = static_cast<const unsigned char*>(views[i].out.data) -
                         (static_cast<unsigned char*>(targets[i].view.out.data) - targets[i].out_storage.data());
      cuda_ok(cudaMemcpy(targets[i].out_storage.data(), base, targets[i].out_storage.size(),
                         cudaMemcpyDeviceToHost), "download");
    }
    if (run) {
      run->table.resize(n);
      table.download(run->table.data());
      const auto checked = detail::check_rotate_targets(view, views);
      for (const auto& l : gpu::plan_rotate(view, checked, p.pairing, p.direction))
        if (l.vector) run->vector_targets += l.job.target_count;
    }
  };
}

// ---- emulation (tests/test_cuda_math.cpp runs the same on the CPU) ---------------------------

template <class S, bool kVector>
void run_items(const gpu::RotateLaunch& job) {
  for (std::uint64_t g = 0; g < job.items; ++g) gpu::rotate_item<S, kVector>(job, g);
}

void emulate(const RotaryTableView& table, std::span<const RotaryTarget> targets, const RotaryParams& params) {
  const auto checked = detail::check_rotate_targets(table, targets);
  for (const auto& l : gpu::plan_rotate(table, checked, params.pairing, params.direction)) {
    switch (l.dtype) {
      case DType::float32: l.vector ? run_items<gpu::F32, true>(l.job) : run_items<gpu::F32, false>(l.job); break;
      case DType::bfloat16: l.vector ? run_items<gpu::BF16, true>(l.job) : run_items<gpu::BF16, false>(l.job); break;
      case DType::float16: l.vector ? run_items<gpu::F16, true>(l.job) : run_items<gpu::F16, false>(l.job); break;
    }
  }
}

std::int64_t ulps(float a, float b) {
  auto key = [](float f) {
    const auto u = static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(f) & 0x7FFFFFFFu);
    return std::bit_cast<std::uint32_t>(f) >> 31 ? -u : u;
  };
  return std::llabs(key(a) - key(b));
}

// ---- host side: no device needed --------------------------------------------------------------

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an Error: ") + e.what();
  }
  return "(no exception)";
}

// The CUDA entry points reject bad arguments with the CPU functions' messages, before
// touching the device (these run, and pass, on a machine without one).
TEST(CudaHost, BadArgumentsGetTheCpuMessagesBeforeAnyDeviceCall) {
  std::vector<unsigned char> storage(4096);
  void* a = storage.data();
  void* b = storage.data() + 2048;
  float table_values[64] = {};
  const RotaryTableView table{table_values, 1, 2, 8};
  auto t = [](void* data, DType dtype, std::array<std::int64_t, 4> shape,
              std::array<std::int64_t, 4> strides) { return HeadTensor{data, dtype, shape, strides}; };
  const HeadTensor good = t(a, DType::float32, {1, 2, 3, 8}, {48, 24, 8, 1});
  const std::vector<std::vector<RotaryTarget>> bad = {
      {{good, t(b, DType::bfloat16, {1, 2, 3, 8}, {48, 24, 8, 1})}},                // dtype
      {{good, t(b, DType::float32, {1, 2, 4, 8}, {64, 32, 8, 1})}},                 // shape
      {{t(a, DType::float32, {1, 3, 3, 8}, {72, 24, 8, 1}), t(b, DType::float32, {1, 3, 3, 8}, {72, 24, 8, 1})}},  // seq
      {{t(a, DType::float32, {1, 2, 3, 6}, {36, 18, 6, 1}), t(b, DType::float32, {1, 2, 3, 6}, {36, 18, 6, 1})}},  // head_dim
      {{good, t(a, DType::float32, {1, 2, 3, 8}, {48, 24, 1, 3})}},                 // same data, other strides
      {{good, t(static_cast<unsigned char*>(a) + 16, DType::float32, {1, 2, 3, 8}, {48, 24, 8, 1})}},  // overlap
      {{good, t(b, DType::float32, {1, 2, 3, 8}, {0, 24, 8, 1})}},                  // harmless: batch 1
      {{good, t(b, DType::float32, {1, 2, 3, 8}, {48, 8, 8, 1})}},                  // writes twice
      {{good, t(nullptr, DType::float32, {1, 2, 3, 8}, {48, 24, 8, 1})}},           // null
      {{good, t(b, DType::float32, {1, 2, 3, 8}, {48, 24, 8, -1})}},                // negative stride
      {{good, good}, {t(b, DType::float32, {1, 2, 3, 8}, {48, 24, 8, 1}), good}},   // out twice
  };
  int compared = 0;
  for (const auto& targets : bad) {
    const std::string cpu = message_of([&] { rotate(table, targets); });
    const std::string gpu_msg = message_of([&] { cuda::rotate(table, targets); });
    if (cpu == "(no exception)") continue;  // the harmless case: valid, so it reaches the device
    EXPECT_EQ(gpu_msg, cpu);
    ++compared;
  }
  EXPECT_EQ(compared, 10);
  const RotaryTableView bad_table{table_values, 1, 2, 7};
  EXPECT_EQ(message_of([&] { cuda::rotate(bad_table, std::vector<RotaryTarget>{{good, good}}); }),
            message_of([&] { rotate(bad_table, std::vector<RotaryTarget>{{good, good}}); }));
  RotaryParams avx2;
  avx2.isa = Isa::avx2;
  EXPECT_NE(message_of([&] { cuda::rotate(table, std::vector<RotaryTarget>{{good, good}}, avx2); })
                .find("names a CPU path"),
            std::string::npos);

  RotaryConfig config;
  config.rotary_dim = 8;
  config.layout = FrequencyLayout::single;
  float positions[6] = {};
  std::vector<float> values(16);
  RotaryConfig odd = config;
  odd.rotary_dim = 7;
  EXPECT_EQ(message_of([&] { cuda::make_rotary_table_into(odd, positions, 1, 2, values); }),
            message_of([&] { make_rotary_table_into(odd, positions, 1, 2, values); }));
  EXPECT_EQ(message_of([&] { cuda::make_rotary_table_into(config, nullptr, 1, 2, values); }),
            message_of([&] { make_rotary_table_into(config, nullptr, 1, 2, values); }));
  EXPECT_EQ(message_of([&] { cuda::make_rotary_table_into(config, positions, 1, 2, std::span(values).first(15)); }),
            message_of([&] { make_rotary_table_into(config, positions, 1, 2, std::span(values).first(15)); }));
}

TEST(CudaHost, EmptyCallsSucceedWithoutADevice) {
  const RotaryTableView table{nullptr, 0, 0, 8};
  EXPECT_EQ(message_of([&] { cuda::rotate(table, {}); }), "(no exception)");
  const HeadTensor empty{nullptr, DType::bfloat16, {0, 0, 2, 8}, {0, 16, 8, 1}};
  EXPECT_EQ(message_of([&] { cuda::rotate(table, std::vector<RotaryTarget>{{empty, empty}}); }), "(no exception)");
  RotaryConfig config;
  EXPECT_EQ(message_of([&] { cuda::make_rotary_table_into(config, nullptr, 0, 5, {}); }), "(no exception)");
}

// Host memory is refused by name; without a device the same call fails as a CUDA error.
TEST(CudaHost, HostMemoryIsRefusedOrTheMissingDeviceIsReported) {
  std::vector<float> host(3 * 1 * 2 * 8 + 64);
  RotaryConfig config;
  config.rotary_dim = 8;
  config.layout = FrequencyLayout::single;
  const std::string table_msg =
      message_of([&] { cuda::make_rotary_table_into(config, host.data(), 1, 2, std::span(host).subspan(6, 16)); });
  HeadTensor x = bshd(host.data() + 32, DType::float32, 1, 2, 1, 8);
  const std::string rotate_msg =
      message_of([&] { cuda::rotate({host.data(), 1, 2, 8}, std::vector<RotaryTarget>{{x, x}}); });
  if (have_device()) {
    EXPECT_EQ(table_msg, "rotary table: position_ids is not device memory (host or unregistered memory: copy it to the device first)");
    EXPECT_EQ(rotate_msg, "table: values is not device memory (host or unregistered memory: copy it to the device first)");
  } else {
    EXPECT_EQ(table_msg.rfind("not an Error: CUDA error", 0), 0u) << table_msg;
    EXPECT_EQ(rotate_msg.rfind("not an Error: CUDA error", 0), 0u) << rotate_msg;
  }
}

// ---- on the device ------------------------------------------------------------------------------

TEST(CudaDevice, EveryHarnessCaseMatchesTheFloat64Reference) {
  REQUIRE_DEVICE();
  const std::array<Isa, 1> isas = {Isa::automatic};
  DeviceRun run;
  int cases = 0;
  for (std::uint64_t seed : {20261129ull, 4242ull}) {
    const auto all = ref::comparison_cases(seed, 1, isas);
    for (std::size_t i = 0; i < all.size(); ++i) {
      ref::ComparisonCase c = all[i];
      c.backend = "cuda";
      const ref::ComparisonResult r = ref::compare_case(c, seed + 0x9E3779B97F4A7C15ull * (i + 1), device_rotator(&run));
      EXPECT_TRUE(r.pass()) << r.describe();
      ++cases;
    }
  }
  EXPECT_GT(run.vector_targets, 50) << "the 16-byte path was hardly exercised";
  EXPECT_EQ(cases, 2 * 288);
}

// The device's double pow/sincos: every entry within its absolute bound of the exact value,
// and within an ulp or that bound of the CPU table (both round a double within a few ulps of
// the exact value once).
TEST(CudaDevice, TableEntriesAreWithinTheirAbsoluteBoundOfTheExactValue) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(3);
  std::int64_t entries = 0, differing = 0;
  double worst = 0;  // largest error over its bound
  for (int round = 0; round < 9; ++round) {
    RotaryConfig config;
    config.layout = std::array<FrequencyLayout, 3>{FrequencyLayout::chunked, FrequencyLayout::interleaved,
                                                   FrequencyLayout::single}[round % 3];
    config.rotary_dim = round == 0 ? 128 : 2 * (1 + static_cast<int>(rng() % 256));
    const int half = config.rotary_dim / 2;
    const int st = static_cast<int>(rng() % static_cast<std::uint64_t>(half + 1));
    const int sh = static_cast<int>(rng() % static_cast<std::uint64_t>(half - st + 1));
    config.sections = round == 0 ? std::array<int, 3>{16, 24, 24} : std::array<int, 3>{st, sh, half - st - sh};
    config.theta = std::array<double, 3>{1e6, 1e4, 5e5}[round % 3];
    const std::int64_t batch = 2, seq = 1000 + round;
    std::vector<float> positions(static_cast<std::size_t>(3 * batch * seq));
    const float scale = std::array<float, 3>{100.0f, 3e4f, 3e7f}[round / 3];
    std::uniform_real_distribution<float> pos(-scale, scale);
    for (float& p : positions) p = pos(rng);
    const RotaryTable cpu = make_rotary_table(config, positions.data(), batch, seq, 0);
    DeviceBuffer pos_d(positions.size() * sizeof(float));
    pos_d.upload(positions.data());
    const std::size_t n = cpu.bytes() / sizeof(float);
    DeviceBuffer table_d(n * sizeof(float));
    cuda::make_rotary_table_into(config, pos_d.as<float>(), batch, seq, {table_d.as<float>(), n});
    std::vector<float> got(n);
    table_d.download(got.data());
    const float* want = cpu.row(0, 0);
    const std::vector<int> axes = frequency_axes(config);
    const std::int64_t tokens = batch * seq;
    for (std::size_t k = 0; k < n; ++k) {
      const auto t = static_cast<std::int64_t>(k / static_cast<std::size_t>(config.rotary_dim));
      const int i = static_cast<int>(k % static_cast<std::size_t>(config.rotary_dim));
      const float p = positions[static_cast<std::size_t>(axes[static_cast<std::size_t>(i % half)] * tokens + t)];
      const long double exact = ref::exact_table_entry(config, p, i);
      const double bound = ref::table_entry_bound(ref::table_angle(config, p, i));
      const double error = static_cast<double>(fabsl(static_cast<long double>(got[k]) - exact));
      ASSERT_LE(error, bound) << "entry " << k << ": " << got[k] << " vs exact " << static_cast<double>(exact);
      worst = std::max(worst, error / bound);
      ASSERT_TRUE(ulps(got[k], want[k]) <= 1 || std::fabs(got[k] - want[k]) <= bound)
          << "entry " << k << ": " << got[k] << " vs the CPU's " << want[k];
      differing += got[k] != want[k];
      ++entries;
    }
  }
  std::printf("table: largest error %.3f of its bound; %lld of %lld entries differ from the CPU table\n", worst,
              static_cast<long long>(differing), static_cast<long long>(entries));
}

// A non-finite position is not an error on the device (the host cannot see it without
// waiting): its token's entries of that axis are NaN, no other entry is, and the kernel
// records it: take_position_error gives the CPU's message once, then nothing.
TEST(CudaDevice, NonFinitePositionsGiveNaNEntriesAndARecordOfTheCpuError) {
  REQUIRE_DEVICE();
  RotaryConfig config;  // chunked 16/24/24: every axis in use
  int device = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda::take_position_error(device);  // whatever an earlier test left
  std::vector<float> positions(3 * 4, 1.5f);
  positions[1 * 4 + 2] = NAN;  // axis 1, token 2
  DeviceBuffer pos_d(positions.size() * sizeof(float));
  pos_d.upload(positions.data());
  DeviceBuffer table_d(4 * 128 * sizeof(float));
  cuda::make_rotary_table_into(config, pos_d.as<float>(), 1, 4, {table_d.as<float>(), 4 * 128});
  sync();
  std::vector<float> got(4 * 128);
  table_d.download(got.data());
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 64; ++i) {
      const bool height = i >= 16 && i < 40;
      EXPECT_EQ(std::isnan(got[static_cast<std::size_t>(t * 128 + i)]), t == 2 && height) << t << " " << i;
    }
  std::string cpu = "(no exception)";
  try {
    make_rotary_table(config, positions.data(), 1, 4, 1);
  } catch (const Error& e) {
    cpu = e.what();
  }
  EXPECT_EQ(cuda::take_position_error(device).value_or("(none)"), cpu);
  EXPECT_FALSE(cuda::take_position_error(device).has_value());
  // finite positions record nothing
  positions[1 * 4 + 2] = 2.0f;
  pos_d.upload(positions.data());
  cuda::make_rotary_table_into(config, pos_d.as<float>(), 1, 4, {table_d.as<float>(), 4 * 128});
  sync();
  EXPECT_FALSE(cuda::take_position_error(device).has_value());
}

// Same table, same inputs: the device equals the CPU emulation of its kernels bit for bit
// (every float operation is single-rounded on both; tests/test_cuda_math.cpp checks the
// emulation against the reference on every build).
TEST(CudaDevice, KernelsEqualTheirCpuEmulationBitForBit) {
  REQUIRE_DEVICE();
  const std::array<Isa, 1> isas = {Isa::automatic};
  const auto all = ref::comparison_cases(777, 1, isas);
  int compared = 0;
  for (std::size_t i = 0; i < all.size(); i += 3) {
    const ref::ComparisonCase& c = all[i];
    SCOPED_TRACE(ref::ComparisonResult{c}.describe());
    // Data as the harness draws it is not needed: any data works, so use a simple case.
    std::mt19937_64 rng(i);
    const std::int64_t H = c.q_heads, D = c.head_dim;
    const int rot = c.rotary_dim;
    RotaryConfig config;
    config.rotary_dim = rot;
    config.layout = FrequencyLayout::single;
    std::vector<float> positions(static_cast<std::size_t>(3 * c.batch * c.seq));
    for (float& p : positions) p = static_cast<float>(rng() % 100000) * 0.037f - 50.0f;
    DeviceBuffer pos_d(positions.size() * 4);
    pos_d.upload(positions.data());
    const auto n = static_cast<std::size_t>(c.batch * c.seq * rot);
    DeviceBuffer table_d(n * 4);
    cuda::make_rotary_table_into(config, pos_d.as<float>(), c.batch, c.seq, {table_d.as<float>(), n});
    std::vector<float> table(n);
    table_d.download(table.data());
    const std::size_t elements = static_cast<std::size_t>(c.batch * c.seq * H * D);
    const std::size_t bytes = elements * dtype_size(c.dtype);
    std::vector<unsigned char> in(bytes), out_host(bytes), out_dev(bytes);
    for (std::size_t k = 0; k < elements; ++k) {
      const float v = static_cast<float>(static_cast<std::int64_t>(rng() % 20001) - 10000) / 1000.0f;
      if (c.dtype == DType::float32) std::memcpy(&in[k * 4], &v, 4);
      else {
        const std::uint16_t h = c.dtype == DType::bfloat16 ? cpu::float_to_bf16(v) : cpu::float_to_f16(v);
        std::memcpy(&in[k * 2], &h, 2);
      }
    }
    DeviceBuffer in_d(bytes), out_d(bytes);
    in_d.upload(in.data());
    const HeadTensor hin = bshd(in.data(), c.dtype, c.batch, c.seq, H, D);
    const HeadTensor hout = bshd(out_host.data(), c.dtype, c.batch, c.seq, H, D);
    const HeadTensor din = bshd(in_d.p, c.dtype, c.batch, c.seq, H, D);
    const HeadTensor dout = bshd(out_d.p, c.dtype, c.batch, c.seq, H, D);
    RotaryParams params;
    params.pairing = c.pairing;
    params.direction = c.direction;
    cuda::rotate({table_d.as<float>(), c.batch, c.seq, rot}, std::vector<RotaryTarget>{{din, dout}}, params);
    sync();
    out_d.download(out_dev.data());
    emulate({table.data(), c.batch, c.seq, rot}, std::vector<RotaryTarget>{{hin, hout}}, params);
    EXPECT_TRUE(out_host == out_dev);
    ++compared;
  }
  EXPECT_GT(compared, 90);
}

// Qwen2.5-VL-3B at S = 4096 in Hugging Face's layout (q transposed over bshd memory), in
// place, forward then backward, every dtype: the forward within the CPU kernels' tolerance
// of the reference, the round trip back to the input within two roundings.
TEST(CudaDevice, QwenShapeForwardAndBackwardInPlace) {
  REQUIRE_DEVICE();
  const std::int64_t S = 4096, Hq = 16, Hk = 2, D = 128;
  RotaryConfig config;
  std::mt19937_64 rng(9);
  std::vector<float> positions(static_cast<std::size_t>(3 * S));
  std::uniform_real_distribution<float> pos(-30.0f, 6000.0f);
  for (float& p : positions) p = pos(rng);
  DeviceBuffer pos_d(positions.size() * 4);
  pos_d.upload(positions.data());
  DeviceBuffer table_d(static_cast<std::size_t>(S * D) * 4);
  cuda::make_rotary_table_into(config, pos_d.as<float>(), 1, S, {table_d.as<float>(), static_cast<std::size_t>(S * D)});
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(to_string(dtype));
    std::vector<std::vector<unsigned char>> host;
    std::vector<std::unique_ptr<DeviceBuffer>> dev;
    std::vector<RotaryTarget> targets;
    std::vector<HeadTensor> originals;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t H : {Hq, Hk}) {
      const std::size_t elements = static_cast<std::size_t>(S * H * D);
      host.emplace_back(elements * dtype_size(dtype));
      for (std::size_t k = 0; k < elements; ++k) {
        const float v = normal(rng);
        if (dtype == DType::float32) std::memcpy(&host.back()[k * 4], &v, 4);
        else {
          const std::uint16_t h = dtype == DType::bfloat16 ? cpu::float_to_bf16(v) : cpu::float_to_f16(v);
          std::memcpy(&host.back()[k * 2], &h, 2);
        }
      }
      dev.push_back(std::make_unique<DeviceBuffer>(host.back().size()));
      dev.back()->upload(host.back().data());
      // HF: [B, H, S, D] view of bshd memory = bshd strides in our [B, S, H, D] order
      const HeadTensor v = bshd(dev.back()->p, dtype, 1, S, H, D);
      targets.push_back({v, v});
      originals.push_back(bshd(host.back().data(), dtype, 1, S, H, D));
    }
    const RotaryTableView view{table_d.as<float>(), 1, S, 128};
    cuda::rotate(view, targets, {});
    sync();
    for (std::size_t t = 0; t < 2; ++t) {
      std::vector<unsigned char> got(host[t].size());
      dev[t]->download(got.data());
      HeadTensor out = originals[t];
      out.data = got.data();
      const auto expected = ref::rotate(config, positions.data(), originals[t], Pairing::neox, Direction::forward);
      EXPECT_LE(ref::max_error(expected, originals[t], out, 128, Pairing::neox), ref::tolerance(dtype));
    }
    RotaryParams back;
    back.direction = Direction::backward;
    cuda::rotate(view, targets, back);
    sync();
    for (std::size_t t = 0; t < 2; ++t) {
      std::vector<unsigned char> got(host[t].size());
      dev[t]->download(got.data());
      HeadTensor out = originals[t];
      out.data = got.data();
      std::vector<double> identity;
      ref::for_each_element(originals[t], [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
        identity.push_back(ref::load(originals[t].data, dtype, ref::element_offset(originals[t], b, s, h, d)));
      });
      EXPECT_LE(ref::max_error(identity, originals[t], out, 128, Pairing::neox), 2.01 * ref::tolerance(dtype) + 1e-6);
    }
  }
}

// More than 2^31 elements in one tensor (4.3 GB of bf16): 64-bit offsets and item indices.
// Checks the last tokens' last heads against the reference.
TEST(CudaDevice, ATensorOfMoreThan2To31Elements) {
  REQUIRE_DEVICE();
  std::size_t free_bytes = 0, total = 0;
  cuda_ok(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  const std::int64_t S = 131072, H = 129, D = 128;  // 2^31 + 2^24 elements
  const auto bytes = static_cast<std::size_t>(S * H * D) * 2;
  if (free_bytes < bytes + (std::size_t{2} << 30)) GTEST_SKIP() << "needs " << bytes / (1 << 20) << " MiB of device memory";
  RotaryConfig config;
  std::vector<float> positions(static_cast<std::size_t>(3 * S));
  for (std::int64_t s = 0; s < S; ++s)
    for (int a = 0; a < 3; ++a) positions[static_cast<std::size_t>(a * S + s)] = static_cast<float>(s) * 0.5f + a;
  DeviceBuffer pos_d(positions.size() * 4);
  pos_d.upload(positions.data());
  DeviceBuffer table_d(static_cast<std::size_t>(S * D) * 4);
  cuda::make_rotary_table_into(config, pos_d.as<float>(), 1, S, {table_d.as<float>(), static_cast<std::size_t>(S * D)});
  DeviceBuffer x(bytes);
  // every element 1.0 in bf16 (0x3F80): one token uploaded, then doubled device to device
  std::vector<std::uint16_t> ones(static_cast<std::size_t>(H * D), 0x3F80);
  cuda_ok(cudaMemcpy(x.p, ones.data(), ones.size() * 2, cudaMemcpyHostToDevice), "fill");
  for (std::size_t done = ones.size() * 2; done < bytes; done *= 2)
    cuda_ok(cudaMemcpy(x.as<unsigned char>() + done, x.p, std::min(done, bytes - done), cudaMemcpyDeviceToDevice), "fill");
  const HeadTensor v = bshd(x.p, DType::bfloat16, 1, S, H, D);
  cuda::rotate({table_d.as<float>(), 1, S, 128}, std::vector<RotaryTarget>{{v, v}}, {});
  sync();
  for (std::int64_t s : {S - 1, S - 2, S / 2 + 1}) {
    std::vector<std::uint16_t> got(static_cast<std::size_t>(H * D));
    cuda_ok(cudaMemcpy(got.data(), x.as<std::uint16_t>() + s * H * D, got.size() * 2, cudaMemcpyDeviceToHost), "read");
    const HeadTensor one_in = bshd(ones.data(), DType::bfloat16, 1, 1, H, D);
    const HeadTensor one_out = bshd(got.data(), DType::bfloat16, 1, 1, H, D);
    const float p3[3] = {positions[static_cast<std::size_t>(s)], positions[static_cast<std::size_t>(S + s)],
                         positions[static_cast<std::size_t>(2 * S + s)]};
    const auto expected = ref::rotate(config, p3, one_in, Pairing::neox, Direction::forward);
    EXPECT_LE(ref::max_error(expected, one_in, one_out, 128, Pairing::neox), ref::kBfloat16Tolerance) << "token " << s;
  }
}

// Host memory refused by name, and the context still works afterwards (no kernel faulted).
TEST(CudaDevice, HostPointersAreRefusedAndTheContextSurvives) {
  REQUIRE_DEVICE();
  std::vector<float> host(2 * 8);
  DeviceBuffer table_d(2 * 8 * 4), x_d(2 * 8 * 4);
  const HeadTensor host_view = bshd(host.data(), DType::float32, 1, 2, 1, 8);
  const HeadTensor dev_view = bshd(x_d.p, DType::float32, 1, 2, 1, 8);
  EXPECT_EQ(message_of([&] { cuda::rotate({table_d.as<float>(), 1, 2, 8}, std::vector<RotaryTarget>{{host_view, dev_view}}); }),
            "rotate target 0 in is not device memory (host or unregistered memory: copy it to the device first)");
  EXPECT_EQ(message_of([&] { cuda::rotate({table_d.as<float>(), 1, 2, 8}, std::vector<RotaryTarget>{{dev_view, host_view}}); }),
            "rotate target 0 out is not device memory (host or unregistered memory: copy it to the device first)");
  cuda_ok(cudaMemset(table_d.p, 0, table_d.bytes), "memset");
  EXPECT_EQ(message_of([&] { cuda::rotate({table_d.as<float>(), 1, 2, 8}, std::vector<RotaryTarget>{{dev_view, dev_view}}); }),
            "(no exception)");
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// A stream of the caller's, managed memory, and mapped pinned host memory all work.
TEST(CudaDevice, StreamsManagedAndMappedMemory) {
  REQUIRE_DEVICE();
  RotaryConfig config;
  config.rotary_dim = 16;
  config.layout = FrequencyLayout::single;
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  DeviceBuffer pos(3 * 5 * 4, true), table(5 * 16 * 4, true), x(5 * 3 * 16 * 4, true);
  for (int i = 0; i < 15; ++i) pos.as<float>()[i] = static_cast<float>(i);
  for (int i = 0; i < 5 * 3 * 16; ++i) x.as<float>()[i] = 1.0f;
  cuda::make_rotary_table_into(config, pos.as<float>(), 1, 5, {table.as<float>(), 80}, stream);
  const HeadTensor v = bshd(x.p, DType::float32, 1, 5, 3, 16);
  float* pinned = nullptr;
  cuda_ok(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 5 * 3 * 16 * 4, cudaHostAllocMapped), "pinned");
  const HeadTensor p = bshd(pinned, DType::float32, 1, 5, 3, 16);
  cuda::rotate({table.as<float>(), 1, 5, 16}, std::vector<RotaryTarget>{{v, p}}, {}, stream);
  cuda_ok(cudaStreamSynchronize(stream), "stream sync");
  // token 0 sits at position 0: identity
  for (int d = 0; d < 16; ++d) EXPECT_EQ(pinned[d], 1.0f);
  // token 1, frequency 0: angle 1 rad
  EXPECT_NEAR(pinned[3 * 16 + 0], std::cos(1.0) - std::sin(1.0), 1e-6);
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
}

// ---- the short run for compute-sanitizer ------------------------------------------------------

// Every kernel instance (3 dtypes x vector/scalar, neox/gptj, in/out of place, tails, GQA, a
// strided view, more than 8 targets) on tiny shapes, each checked against the reference.
TEST(CudaSanitizer, EveryKernelOnTinyShapes) {
  REQUIRE_DEVICE();
  const std::array<Isa, 1> isas = {Isa::automatic};
  const auto all = ref::comparison_cases(31337, 1, isas);
  int ran = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    ref::ComparisonCase c = all[i];
    if (i % 4 != 0) continue;  // a quarter of the matrix keeps it short under the sanitizer
    c.backend = "cuda";
    c.seq = std::min<std::int64_t>(c.seq, 5);
    c.head_dim = std::min<std::int64_t>(c.head_dim, 40);
    c.rotary_dim = std::min<int>(c.rotary_dim, static_cast<int>(c.head_dim));
    const ref::ComparisonResult r = ref::compare_case(c, 100 + i, device_rotator());
    EXPECT_TRUE(r.pass()) << r.describe();
    ++ran;
  }
  EXPECT_EQ(ran, 72);
  // More targets than one launch holds.
  const std::int64_t S = 3;
  RotaryConfig config;
  config.rotary_dim = 16;
  config.layout = FrequencyLayout::single;
  DeviceBuffer pos(3 * S * 4), table(S * 16 * 4);
  std::vector<float> positions = {0, 1, 2, 0, 1, 2, 0, 1, 2};
  pos.upload(positions.data());
  cuda::make_rotary_table_into(config, pos.as<float>(), 1, S, {table.as<float>(), S * 16});
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<RotaryTarget> targets;
  for (int t = 0; t < 19; ++t) {
    bufs.push_back(std::make_unique<DeviceBuffer>(S * (1 + t % 5) * 16 * 2));
    cuda_ok(cudaMemset(bufs.back()->p, 0, bufs.back()->bytes), "memset");
    const HeadTensor v = bshd(bufs.back()->p, DType::bfloat16, 1, S, 1 + t % 5, 16);
    targets.push_back({v, v});
  }
  cuda::rotate({table.as<float>(), 1, S, 16}, targets, {});
  sync();
}

}  // namespace

#if !defined(CIRCLEROPE_USE_GTEST)
int main(int argc, char** argv) { return mini_test::run_all(argc, argv); }
#endif
