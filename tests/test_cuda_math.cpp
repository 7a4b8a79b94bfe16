// The CUDA backend's device code, run on the CPU: every work item of every planned launch
// executed by the same functions the kernels call (src/cuda/rotary_device.h), on host memory,
// checked against the float64 reference with the harness and tolerances the CPU kernels
// use. This runs on every build, with or without a GPU or even nvcc.
//
// What it covers: the launch plan (paths, target grouping, item counts), the decomposition
// of an item index into target/token/head/element (DivMod), the 16-byte packing of each
// dtype, bf16/fp16 rounding, the rotation of each pair, pass-through elements, in place and
// out of place, and the table entries' formula. What it cannot: the device's libm (pow and
// sincos in double), the launch configuration and real concurrency; tests/cuda/ checks
// those on a GPU. The file is compiled with -ffp-contract=off (tests/CMakeLists.txt), the
// rounding the device code asks for with __fmul_rn and friends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "../src/cpu/check.h"
#include "../src/cpu/convert.h"
#include "../src/cuda/plan.h"
#include "../src/cuda/rotary_device.h"
#include "circlerope/rotary.h"
#include "rotary_reference.h"

namespace {

using namespace circlerope;
namespace gpu = circlerope::gpu;
namespace ref = circlerope::reference;
namespace cvt = circlerope::cpu;

// ---- the emulator -------------------------------------------------------------------------

// Runs every item of a launch, in order or in the order `shuffle` draws.
template <class S, bool kVector>
void run_items(const gpu::RotateLaunch& job, std::mt19937_64* shuffle) {
  std::vector<std::uint64_t> order(job.items);
  std::iota(order.begin(), order.end(), std::uint64_t{0});
  if (shuffle) std::shuffle(order.begin(), order.end(), *shuffle);
  for (std::uint64_t g : order) gpu::rotate_item<S, kVector>(job, g);
}

void run_launch(const gpu::PlannedLaunch& l, std::mt19937_64* shuffle = nullptr) {
  switch (l.dtype) {
    case DType::float32:
      l.vector ? run_items<gpu::F32, true>(l.job, shuffle) : run_items<gpu::F32, false>(l.job, shuffle);
      break;
    case DType::bfloat16:
      l.vector ? run_items<gpu::BF16, true>(l.job, shuffle) : run_items<gpu::BF16, false>(l.job, shuffle);
      break;
    case DType::float16:
      l.vector ? run_items<gpu::F16, true>(l.job, shuffle) : run_items<gpu::F16, false>(l.job, shuffle);
      break;
  }
}

// What cuda::rotate does, minus the pointer checks, with the kernels run on the CPU.
// Returns the planned launches (tests look at their paths).
std::vector<gpu::PlannedLaunch> emulate_rotate(const RotaryTableView& table,
                                               std::span<const RotaryTarget> targets,
                                               const RotaryParams& params,
                                               std::mt19937_64* shuffle = nullptr,
                                               const gpu::PlanOptions& options = {}) {
  const auto checked = detail::check_rotate_targets(table, targets);
  auto launches = gpu::plan_rotate(table, checked, params.pairing, params.direction, options);
  for (const auto& l : launches) run_launch(l, shuffle);
  return launches;
}

std::vector<float> emulate_table(const RotaryConfig& config, const float* positions,
                                 std::int64_t batch, std::int64_t seq) {
  const std::int64_t tokens = detail::check_table_request(config, positions, batch, seq, 0, true);
  std::vector<float> values(static_cast<std::size_t>(tokens * config.rotary_dim));
  const gpu::TableLaunch job = gpu::plan_table(config, positions, batch, seq, values.data());
  EXPECT_EQ(static_cast<std::int64_t>(job.items), tokens * (config.rotary_dim / 2));
  for (std::uint64_t g = 0; g < job.items; ++g) gpu::table_item(job, g);
  return values;
}

// Counts the paths the harness's cases took, so that a test can insist both were covered.
struct PathCount {
  int vector = 0, scalar = 0;
};

ref::Rotator emulated_rotator(PathCount* paths = nullptr, bool flip_direction = false,
                              gpu::PlanOptions options = {}) {
  return [paths, flip_direction, options](const RotaryConfig& config, const float* positions,
                                 std::int64_t batch, std::int64_t seq,
                                 std::span<const ref::ComparisonTarget> targets, const RotaryParams& p) {
    const std::vector<float> table = emulate_table(config, positions, batch, seq);
    const RotaryTableView view{table.data(), batch, seq, config.rotary_dim};
    std::vector<RotaryTarget> views;
    for (const auto& t : targets) views.push_back(t.view);
    RotaryParams params = p;
    if (flip_direction)
      params.direction = p.direction == Direction::forward ? Direction::backward : Direction::forward;
    for (const auto& l : emulate_rotate(view, views, params, nullptr, options)) {
      if (!paths) continue;
      (l.vector ? paths->vector : paths->scalar) += l.job.target_count;
    }
  };
}

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// Distance in float32 ulps (same-sign finite values; +-0 are 0 apart).
std::int64_t ulps(float a, float b) {
  auto key = [](float f) {
    const auto u = static_cast<std::int64_t>(bits(f) & 0x7FFFFFFFu);
    return bits(f) >> 31 ? -u : u;
  };
  return std::llabs(key(a) - key(b));
}

// ---- storage conversions ------------------------------------------------------------------

// The device code's conversions are the CPU's (circlerope/detail/convert.h, one definition);
// these hold the device's names to independent models: widening by the formats' definitions,
// narrowing by reference::to_bfloat16 / to_float16 (round to nearest even in double).
TEST(CudaMathConvert, SixteenBitPatternsWidenByTheirDefinition) {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    ASSERT_EQ(bits(gpu::bf16_to_float(v)), h << 16) << h;  // bf16 is float32's upper half
    const std::uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (exponent == 0x1F) {  // inf or NaN: the payload moves to float32's top mantissa bits
      ASSERT_EQ(bits(gpu::f16_to_float(v)), ((h & 0x8000u) << 16) | 0x7F800000u | (mantissa << 13)) << h;
    } else {
      const double value = exponent == 0 ? std::ldexp(static_cast<double>(mantissa), -24)
                                         : std::ldexp(1.0 + mantissa / 1024.0, static_cast<int>(exponent) - 15);
      ASSERT_EQ(bits(gpu::f16_to_float(v)), bits(sign * static_cast<float>(value))) << h;
    }
  }
}

TEST(CudaMathConvert, FloatsRoundToBf16AndFp16AsTheReference) {
  // Every upper half with the lower halves around each rounding boundary, plus random floats:
  // ties, just-below and just-above ties, NaN payloads, overflow, fp16 subnormals.
  std::vector<std::uint32_t> lows = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2000,
                                     0x7FFF, 0x8000, 0x8001, 0xFFFF};
  std::mt19937_64 rng(7);
  std::int64_t compared = 0;
  for (std::uint32_t hi = 0; hi <= 0xFFFF; ++hi) {
    for (std::uint32_t lo : lows) {
      const float f = std::bit_cast<float>((hi << 16) | lo);
      ASSERT_EQ(gpu::float_to_bf16(f), ref::to_bfloat16(f)) << std::hex << bits(f);
      ASSERT_EQ(gpu::float_to_f16(f), ref::to_float16(f)) << std::hex << bits(f);
      ++compared;
    }
  }
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    ASSERT_EQ(gpu::float_to_bf16(f), ref::to_bfloat16(f)) << std::hex << bits(f);
    ASSERT_EQ(gpu::float_to_f16(f), ref::to_float16(f)) << std::hex << bits(f);
    // fp32 stores: every NaN the canonical one (the NaN rule), everything else kept
    ASSERT_EQ(bits(gpu::narrow<gpu::F32>(f)), std::isnan(f) ? 0x7FC00000u : bits(f)) << std::hex << bits(f);
  }
  EXPECT_EQ(compared, 65536 * 10);
}

TEST(CudaMathConvert, PacksHoldLanesLittleEndianAndRoundTrip) {
  float in[8] = {1.0f, -2.5f, 0.0f, -0.0f, 65504.0f, 1e-7f, 3.140625f, -1e30f};
  const gpu::Pack16 p = gpu::pack<gpu::BF16>(in);
  EXPECT_EQ(p.w[0] & 0xFFFFu, cvt::float_to_bf16(in[0]));
  EXPECT_EQ(p.w[0] >> 16, cvt::float_to_bf16(in[1]));
  EXPECT_EQ(p.w[3] >> 16, cvt::float_to_bf16(in[7]));
  float out[8];
  gpu::unpack<gpu::BF16>(p, out);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(bits(out[j]), bits(cvt::bf16_to_float(cvt::float_to_bf16(in[j])))) << j;
  const gpu::Pack16 h = gpu::pack<gpu::F16>(in);
  gpu::unpack<gpu::F16>(h, out);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(bits(out[j]), bits(cvt::f16_to_float(cvt::float_to_f16(in[j])))) << j;
  const gpu::Pack16 f = gpu::pack<gpu::F32>(in + 4);
  gpu::unpack<gpu::F32>(f, out);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(bits(out[j]), bits(in[4 + j])) << j;
}

// ---- division by magic numbers ------------------------------------------------------------

TEST(CudaMathDivMod, SmallDividendsAndDivisorsExhaustively) {
  for (std::uint64_t d = 1; d <= 600; ++d) {
    const gpu::DivMod m = gpu::make_divmod(d);
    for (std::uint64_t n = 0; n < 5000; ++n) ASSERT_EQ(gpu::quotient(m, n), n / d) << n << " / " << d;
  }
}

// The 32-bit form (one multiply-high), for dividends below 2^31 and divisors up to 2^31.
TEST(CudaMathDivMod, ThirtyTwoBitQuotientsAreExactBelowTwoTo31) {
  for (std::uint32_t d = 1; d <= 600; ++d) {
    const gpu::DivMod m = gpu::make_divmod(d);
    for (std::uint32_t n = 0; n < 5000; ++n) ASSERT_EQ(gpu::quotient(m, n), n / d) << n << " / " << d;
  }
  std::mt19937_64 rng(12);
  std::vector<std::uint32_t> divisors = {1, 2, 3, 7, 127, 128, 129, 1000003, (1u << 30) + 1, (1u << 31) - 1, 1u << 31};
  for (int i = 0; i < 300; ++i) divisors.push_back(1 + static_cast<std::uint32_t>((rng() >> (rng() % 33)) % (1ull << 31)));
  const std::uint32_t top = (1u << 31) - 1;
  for (std::uint32_t d : divisors) {
    const gpu::DivMod m = gpu::make_divmod(d);
    ASSERT_NE(m.magic32, 0u) << d;
    std::vector<std::uint32_t> ns = {0, 1, d - 1, d, top, top - 1, top / d * d, top / d * d - 1};
    for (int i = 0; i < 3000; ++i) ns.push_back(static_cast<std::uint32_t>((rng() >> 33) >> (rng() % 31)));
    for (std::uint32_t n : ns) {
      if (n > top) continue;
      ASSERT_EQ(gpu::quotient(m, n), n / d) << n << " / " << d;
    }
  }
  EXPECT_EQ(gpu::make_divmod((1ull << 31) + 1).magic32, 0u);  // no 32-bit form: never asked for
}

TEST(CudaMathDivMod, LargeDividendsAndDivisorsAtTheEdges) {
  std::mt19937_64 rng(11);
  std::vector<std::uint64_t> divisors = {1, 2, 3, 7, 8, 9, 127, 128, 129, 1000003,
                                         (1ull << 31) - 1, 1ull << 31, (1ull << 31) + 1,
                                         (1ull << 32) - 1, 1ull << 32, (1ull << 32) + 1,
                                         (1ull << 62) + 12345, 1ull << 63};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + (rng() >> (rng() % 64)) % (1ull << 63));
  const std::uint64_t top = (1ull << 63) - 1;
  for (std::uint64_t d : divisors) {
    const gpu::DivMod m = gpu::make_divmod(d);
    std::vector<std::uint64_t> ns = {0, 1, d - 1, d, d + 1, top, top - 1, top - d, top / d * d,
                                     top / d * d - 1};
    for (int i = 0; i < 2000; ++i) ns.push_back((rng() >> 1) >> (rng() % 63));
    for (std::uint64_t n : ns) {
      if (n > top) continue;
      ASSERT_EQ(gpu::quotient(m, n), n / d) << n << " / " << d;
    }
  }
}

// ---- tables -------------------------------------------------------------------------------

// The device table's formula with the host's libm against the CPU kernels' table: one
// rounding of the same double value on both sides, so equal except where the double results
// straddle a float rounding boundary (then 1 ulp); and both within the absolute bound of the
// exact value (reference::table_entry_bound) that tests/cuda/ holds the device's table to. The device's own sin/cos/pow (<= 2 ulp of
// double) are checked against the CPU table on a GPU (tests/cuda/).
TEST(CudaMathTable, EntriesEqualTheCpuTableWithinOneUlpAndTheExactValueWithinTheBound) {
  std::mt19937_64 rng(3);
  std::int64_t entries = 0, differing = 0;
  for (FrequencyLayout layout :
       {FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single}) {
    for (int round = 0; round < 6; ++round) {
      RotaryConfig config;
      config.layout = layout;
      config.rotary_dim = 2 * (1 + static_cast<int>(rng() % 96));
      const int half = config.rotary_dim / 2;
      const int st = static_cast<int>(rng() % static_cast<std::uint64_t>(half + 1));
      const int sh = static_cast<int>(rng() % static_cast<std::uint64_t>(half - st + 1));
      config.sections = {st, sh, half - st - sh};
      config.theta = std::array<double, 3>{1e4, 1e6, 5e5}[round % 3];
      const std::int64_t batch = 1 + round % 2, seq = 37;
      std::vector<float> positions(static_cast<std::size_t>(3 * batch * seq));
      // fractional, negative, long-context and beyond the CPU's fast-angle limit (1e6 rad)
      const float scale = std::array<float, 3>{100.0f, 3e4f, 3e7f}[round % 3];
      std::uniform_real_distribution<float> pos(-scale, scale);
      for (float& p : positions) p = pos(rng);
      const RotaryTable cpu = make_rotary_table(config, positions.data(), batch, seq, 1);
      const std::vector<float> emulated = emulate_table(config, positions.data(), batch, seq);
      const std::vector<int> axes = frequency_axes(config);
      ASSERT_EQ(emulated.size() * sizeof(float), cpu.bytes());
      for (std::int64_t t = 0; t < batch * seq; ++t)
        for (int i = 0; i < config.rotary_dim; ++i) {
          const float a = cpu.row(t / seq, t % seq)[i];
          const float b = emulated[static_cast<std::size_t>(t * config.rotary_dim + i)];
          ASSERT_LE(ulps(a, b), 1) << "token " << t << " entry " << i << ": " << a << " vs " << b;
          // both within the absolute bound of the exact value that the device keeps too
          const float p = positions[static_cast<std::size_t>(
              axes[static_cast<std::size_t>(i % half)] * batch * seq + t)];
          const long double exact = ref::exact_table_entry(config, p, i);
          const double bound = ref::table_entry_bound(ref::table_angle(config, p, i));
          ASSERT_LE(static_cast<double>(fabsl(a - exact)), bound) << "CPU token " << t << " entry " << i;
          ASSERT_LE(static_cast<double>(fabsl(b - exact)), bound) << "emulated token " << t << " entry " << i;
          differing += a != b;
          ++entries;
        }
    }
  }
  // Near-ties are rare: a handful in 10^5 entries at most (the CPU's own polynomial differs
  // from libm in 1 of 8 million); more would mean a different formula, not rounding.
  EXPECT_LE(differing * 1000, entries) << differing << " of " << entries << " entries differ by an ulp";
}

// A non-finite position: its token's entries of that axis's frequencies are NaN, the other
// entries are the finite table's, and the report word names it as the CPU's error does.
TEST(CudaMathTable, ANonFinitePositionGivesNanEntriesAndTheCpuErrorInTheReport) {
  RotaryConfig config;  // chunked 16/24/24: axis 1 owns frequencies 16..39
  const std::int64_t batch = 2, seq = 5, tokens = batch * seq;
  std::vector<float> positions(static_cast<std::size_t>(3 * tokens));
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<float>(i % 17) - 3.0f;
  const std::vector<float> finite = emulate_table(config, positions.data(), batch, seq);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> p = positions;
    const std::int64_t row = 1, token = 3;
    p[static_cast<std::size_t>(1 * tokens + row * seq + token)] = bad;
    std::string cpu = "(no exception)";
    try {
      make_rotary_table(config, p.data(), batch, seq, 1);
    } catch (const Error& e) {
      cpu = e.what();
    }
    std::vector<float> values(static_cast<std::size_t>(tokens * config.rotary_dim));
    unsigned long long report = 0;
    const gpu::TableLaunch job = gpu::plan_table(config, p.data(), batch, seq, values.data(), &report);
    for (std::uint64_t g = 0; g < job.items; ++g) gpu::table_item(job, g);
    ASSERT_NE(report, 0u);
    EXPECT_EQ(gpu::position_error_message(report), cpu);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (int i = 0; i < config.rotary_dim; ++i) {
        const std::size_t at = static_cast<std::size_t>(t * config.rotary_dim + i);
        const int f = i % (config.rotary_dim / 2);
        if (t == row * seq + token && f >= 16 && f < 40) EXPECT_TRUE(std::isnan(values[at])) << t << " " << i;
        else EXPECT_EQ(bits(values[at]), bits(finite[at])) << t << " " << i;
      }
  }
  // Finite positions report nothing.
  std::vector<float> values(static_cast<std::size_t>(tokens * config.rotary_dim));
  unsigned long long report = 0;
  const gpu::TableLaunch job = gpu::plan_table(config, positions.data(), batch, seq, values.data(), &report);
  for (std::uint64_t g = 0; g < job.items; ++g) gpu::table_item(job, g);
  EXPECT_EQ(report, 0u);
}

// ---- rotation against the float64 reference -----------------------------------------------

// The CPU kernels' harness (every dtype x pairing x layout x memory layout x direction x in
// place, random sizes, guard elements, outputs pre-filled with NaN), with the kernels'
// work items as the backend.
TEST(CudaMathRotate, EveryHarnessCasePassesTheCpuKernelsTolerances) {
  PathCount paths;
  const std::array<Isa, 1> isas = {Isa::portable};
  for (std::uint64_t seed : {20261129ull, 99ull}) {
    const auto cases = ref::comparison_cases(seed, 1, isas);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      ref::ComparisonCase c = cases[i];
      c.backend = "cuda-emulated";
      const ref::ComparisonResult r = ref::compare_case(c, seed + 0x9E3779B97F4A7C15ull * (i + 1), emulated_rotator(&paths));
      EXPECT_TRUE(r.pass()) << r.describe();
    }
  }
  // Both paths must have been exercised (bshd/bhsd rows of whole packs take the vector one).
  EXPECT_GT(paths.vector, 50);
  EXPECT_GT(paths.scalar, 50);
}

// Every way the plan can cut the work (heads per item 1, 2, 4; 32- or 64-bit index
// arithmetic) passes the same harness: what the default does not run is still correct.
TEST(CudaMathRotate, EveryPlanOptionPassesTheHarness) {
  const std::array<Isa, 1> isas = {Isa::portable};
  const auto cases = ref::comparison_cases(7, 1, isas);
  for (int heads : {1, 2, 4})
    for (bool index32 : {false, true}) {
      SCOPED_TRACE("heads_per_item " + std::to_string(heads) + (index32 ? ", 32-bit" : ", 64-bit"));
      const gpu::PlanOptions options{heads, index32};
      PathCount paths;
      for (std::size_t i = 0; i < cases.size(); i += 3) {  // a third of the cases, every combination
        ref::ComparisonCase c = cases[i];
        c.backend = "cuda-emulated";
        const ref::ComparisonResult r =
            ref::compare_case(c, 7 + 0x9E3779B97F4A7C15ull * (i + 1), emulated_rotator(&paths, false, options));
        ASSERT_TRUE(r.pass()) << r.describe();
      }
      EXPECT_GT(paths.vector, 10);
      EXPECT_GT(paths.scalar, 10);
    }
}

// The same harness must fail a backend that rotates the wrong way.
TEST(CudaMathRotate, TheHarnessCatchesAWrongDirection) {
  ref::ComparisonCase c;
  c.backend = "cuda-emulated";
  c.dtype = DType::bfloat16;
  c.memory = "bshd";
  c.seq = 5;
  c.q_heads = 3;
  c.head_dim = 64;
  c.rotary_dim = 64;
  EXPECT_TRUE(ref::compare_case(c, 5, emulated_rotator()).pass());
  EXPECT_FALSE(ref::compare_case(c, 5, emulated_rotator(nullptr, true)).pass());
}

// ---- work items ---------------------------------------------------------------------------

struct Owned {
  std::vector<unsigned char> bytes;
  HeadTensor view;
};

// A [B,S,H,D] view with `pad` extra elements per row and `lead` elements before it.
Owned make_owned(DType dtype, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D,
                 std::int64_t pad = 0, std::int64_t lead = 0, bool heads_first = false,
                 std::int64_t dim_stride = 1) {
  const std::int64_t row = D * dim_stride + pad;
  HeadTensor v{nullptr, dtype, {B, S, H, D}, {}};
  v.strides = heads_first ? std::array<std::int64_t, 4>{H * S * row, row, S * row, dim_stride}
                          : std::array<std::int64_t, 4>{S * H * row, H * row, row, dim_stride};
  Owned o;
  o.bytes.assign(static_cast<std::size_t>(lead + B * S * H * row + 8) * dtype_size(dtype), 0);
  // 16-byte aligned storage: vector-path eligibility then depends only on lead and strides.
  v.data = o.bytes.data() + static_cast<std::size_t>(lead) * dtype_size(dtype);
  o.view = v;
  return o;
}

// A copy whose view points into its own storage.
Owned clone(const Owned& o) {
  Owned c = o;
  c.view.data = c.bytes.data() + (static_cast<const unsigned char*>(o.view.data) - o.bytes.data());
  return c;
}

void fill(Owned& o, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ref::for_each_element(o.view, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    const std::int64_t at = ref::element_offset(o.view, b, s, h, d);
    const float v = normal(rng);
    switch (o.view.dtype) {
      case DType::float32: std::memcpy(static_cast<unsigned char*>(o.view.data) + at * 4, &v, 4); break;
      case DType::bfloat16: {
        const std::uint16_t h16 = cvt::float_to_bf16(v);
        std::memcpy(static_cast<unsigned char*>(o.view.data) + at * 2, &h16, 2);
        break;
      }
      case DType::float16: {
        const std::uint16_t h16 = cvt::float_to_f16(v);
        std::memcpy(static_cast<unsigned char*>(o.view.data) + at * 2, &h16, 2);
        break;
      }
    }
  });
}

std::vector<float> table_for(std::int64_t B, std::int64_t S, int rot, std::mt19937_64& rng) {
  RotaryConfig config;
  config.rotary_dim = rot;
  config.layout = FrequencyLayout::single;
  std::vector<float> positions(static_cast<std::size_t>(3 * B * S));
  std::uniform_real_distribution<float> pos(-50.0f, 3000.0f);
  for (float& p : positions) p = pos(rng);
  // 16 floats of slack: tests shift the view by one float to misalign it.
  std::vector<float> values = emulate_table(config, positions.data(), B, S);
  values.resize(values.size() + 16);
  return values;
}

// One shape of the disjointness test.
struct ItemCase {
  DType dtype;
  Pairing pairing;
  std::int64_t B, S, H, D;
  int rot;
  std::int64_t pad, lead;
  bool heads_first;
  bool expect_vector;
};

// Every item, run alone on a fresh output, writes only elements no other item writes, and
// together they write every element of the view: the items partition the output, so their
// order (and the device's concurrency) cannot matter.
TEST(CudaMathItems, ItemsPartitionTheOutputOnBothPaths) {
  const ItemCase cases[] = {
      {DType::bfloat16, Pairing::neox, 2, 3, 5, 32, 32, 0, 0, false, true},    // 5 heads: groups 4 + 1
      {DType::float16, Pairing::gptj, 1, 4, 9, 24, 16, 0, 0, true, true},      // tail of 8, bhsd
      {DType::float32, Pairing::neox, 2, 2, 4, 16, 8, 0, 0, false, true},
      {DType::float32, Pairing::gptj, 1, 3, 3, 14, 12, 0, 0, false, false},    // 56-byte rows: not 16-aligned
      {DType::bfloat16, Pairing::neox, 1, 3, 2, 20, 10, 1, 0, false, false},   // odd half, padded rows
      {DType::float16, Pairing::neox, 2, 2, 6, 16, 16, 0, 1, false, false},    // misaligned start
  };
  std::mt19937_64 rng(21);
  for (const gpu::PlanOptions options : {gpu::PlanOptions{1, true}, gpu::PlanOptions{2, true},
                                         gpu::PlanOptions{4, true}, gpu::PlanOptions{2, false}})
  for (const ItemCase& ic : cases) {
    SCOPED_TRACE(std::string(to_string(ic.dtype)) + " " + std::string(to_string(ic.pairing)) +
                 " D=" + std::to_string(ic.D) + ", heads_per_item " + std::to_string(options.heads_per_item) +
                 (options.allow_index32 ? "" : ", 64-bit"));
    Owned in = make_owned(ic.dtype, ic.B, ic.S, ic.H, ic.D, ic.pad, ic.lead, ic.heads_first);
    fill(in, rng);
    Owned out = make_owned(ic.dtype, ic.B, ic.S, ic.H, ic.D, ic.pad, ic.lead, ic.heads_first);
    const std::vector<float> table = table_for(ic.B, ic.S, ic.rot, rng);
    const RotaryTableView view{table.data(), ic.B, ic.S, ic.rot};
    const RotaryTarget target{in.view, out.view};
    const auto checked = detail::check_rotate_targets(view, std::span(&target, 1));
    const auto launches = gpu::plan_rotate(view, checked, ic.pairing, Direction::forward, options);
    ASSERT_EQ(launches.size(), 1u);
    EXPECT_EQ(launches[0].vector, ic.expect_vector);
    EXPECT_EQ(launches[0].job.index32, options.allow_index32);
    EXPECT_EQ(launches[0].job.heads_per_item, options.heads_per_item);

    // Each item runs twice, on storage filled with 0xFF and then 0xFE bytes: a byte it
    // writes cannot equal both fills, so "differs from the fill in either run" is exactly
    // "written" (one fill alone would miss a written byte that happens to equal it).
    std::vector<int> writer(out.bytes.size(), -1);
    const gpu::RotateLaunch& job = launches[0].job;
    const bool vector = launches[0].vector;
    auto run_item = [&](std::uint64_t g) {
      switch (ic.dtype) {
        case DType::float32:
          vector ? gpu::rotate_item<gpu::F32, true>(job, g) : gpu::rotate_item<gpu::F32, false>(job, g);
          break;
        case DType::bfloat16:
          vector ? gpu::rotate_item<gpu::BF16, true>(job, g) : gpu::rotate_item<gpu::BF16, false>(job, g);
          break;
        case DType::float16:
          vector ? gpu::rotate_item<gpu::F16, true>(job, g) : gpu::rotate_item<gpu::F16, false>(job, g);
          break;
      }
    };
    for (std::uint64_t g = 0; g < job.items; ++g) {
      std::fill(out.bytes.begin(), out.bytes.end(), 0xFF);  // keeps out.view.data valid
      run_item(g);
      const std::vector<unsigned char> first = out.bytes;
      std::fill(out.bytes.begin(), out.bytes.end(), 0xFE);
      run_item(g);
      for (std::size_t i = 0; i < out.bytes.size(); ++i)
        if (first[i] != 0xFF || out.bytes[i] != 0xFE) {
          ASSERT_EQ(writer[i], -1) << "byte " << i << " written by items " << writer[i] << " and " << g;
          writer[i] = static_cast<int>(g);
        }
    }
    // Every byte of every element of the view, and nothing else.
    std::vector<bool> in_view(out.bytes.size(), false);
    const std::size_t size = dtype_size(ic.dtype);
    const auto base = static_cast<std::size_t>(static_cast<unsigned char*>(out.view.data) - out.bytes.data());
    ref::for_each_element(out.view, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
      for (std::size_t k = 0; k < size; ++k)
        in_view[base + static_cast<std::size_t>(ref::element_offset(out.view, b, s, h, d)) * size + k] = true;
    });
    for (std::size_t i = 0; i < out.bytes.size(); ++i)
      ASSERT_EQ(writer[i] >= 0, static_cast<bool>(in_view[i])) << "byte " << i;
  }
}

// In place, items read and write the same elements: any order gives the same bits.
TEST(CudaMathItems, InPlaceResultsDoNotDependOnTheOrderOfItems) {
  std::mt19937_64 rng(5);
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (Pairing pairing : {Pairing::neox, Pairing::gptj}) {
      Owned x = make_owned(dtype, 2, 7, 6, 64);
      fill(x, rng);
      Owned y = clone(x);
      const std::vector<float> table = table_for(2, 7, 64, rng);
      const RotaryTableView view{table.data(), 2, 7, 64};
      RotaryParams params;
      params.pairing = pairing;
      const RotaryTarget tx{x.view, x.view}, ty{y.view, y.view};
      const auto lx = emulate_rotate(view, std::span(&tx, 1), params);
      std::mt19937_64 shuffle(17);
      emulate_rotate(view, std::span(&ty, 1), params, &shuffle);
      ASSERT_TRUE(lx[0].vector);
      EXPECT_EQ(x.bytes, y.bytes) << to_string(dtype) << " " << to_string(pairing);
    }
}

// The 16-byte path and the scalar path do the same float operations per element: the same
// bits. A table shifted by one float (so not 16-byte aligned) forces the scalar path.
TEST(CudaMathItems, VectorAndScalarPathsAreBitIdentical) {
  std::mt19937_64 rng(8);
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (Pairing pairing : {Pairing::neox, Pairing::gptj})
      for (Direction direction : {Direction::forward, Direction::backward}) {
        Owned in = make_owned(dtype, 1, 9, 5, 72);  // rot 64 of 72: a pass-through tail
        fill(in, rng);
        Owned a = make_owned(dtype, 1, 9, 5, 72), b = clone(a);
        std::vector<float> table = table_for(1, 9, 64, rng);
        std::vector<float> shifted(table.size());
        std::copy(table.begin(), table.end() - 1, shifted.begin() + 1);
        RotaryParams params;
        params.pairing = pairing;
        params.direction = direction;
        const RotaryTarget ta{in.view, a.view}, tb{in.view, b.view};
        const auto la = emulate_rotate({table.data(), 1, 9, 64}, std::span(&ta, 1), params);
        const auto lb = emulate_rotate({shifted.data() + 1, 1, 9, 64}, std::span(&tb, 1), params);
        ASSERT_TRUE(la[0].vector);
        ASSERT_FALSE(lb[0].vector);
        EXPECT_EQ(a.bytes, b.bytes) << to_string(dtype) << " " << to_string(pairing) << " "
                                    << to_string(direction);
      }
}

// ---- the plan -----------------------------------------------------------------------------

TEST(CudaMathPlan, TargetsAreGroupedByPathAtMostEightPerLaunch) {
  std::mt19937_64 rng(1);
  const std::vector<float> table = table_for(1, 3, 16, rng);
  std::vector<Owned> owned;
  std::vector<RotaryTarget> targets;
  for (int i = 0; i < 20; ++i) {
    // every third target misaligned (scalar path); heads 1..5
    owned.push_back(make_owned(DType::bfloat16, 1, 3, 1 + i % 5, 16, 0, i % 3 == 2 ? 1 : 0));
  }
  for (Owned& o : owned) targets.push_back({o.view, o.view});
  const RotaryTableView view{table.data(), 1, 3, 16};
  const auto checked = detail::check_rotate_targets(view, targets);
  const auto launches = gpu::plan_rotate(view, checked, Pairing::neox, Direction::forward);
  // 14 vector targets (8 + 6), then 6 scalar ones
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_TRUE(launches[0].vector);
  EXPECT_EQ(launches[0].job.target_count, 8);
  EXPECT_TRUE(launches[1].vector);
  EXPECT_EQ(launches[1].job.target_count, 6);
  EXPECT_FALSE(launches[2].vector);
  EXPECT_EQ(launches[2].job.target_count, 6);
  for (const auto& l : launches) {
    std::uint64_t first = 0;
    for (int t = 0; t < l.job.target_count; ++t) {
      const gpu::TargetLaunch& tg = l.job.targets[t];
      EXPECT_EQ(tg.first_item, first);
      const std::uint64_t groups = (static_cast<std::uint64_t>(tg.heads) + 1) / 2;  // 2 heads per item
      EXPECT_EQ(tg.groups.divisor, groups);
      EXPECT_EQ(tg.units.divisor, static_cast<std::uint64_t>(l.vector ? 1 : 8));  // 8 / 8 lanes
      first += 3 * groups * tg.units.divisor;
    }
    EXPECT_EQ(l.job.items, first);
  }
  // Running all of them equals rotating each target alone.
  std::vector<Owned> copies;
  for (const Owned& o : owned) copies.push_back(clone(o));
  for (const auto& l : launches) run_launch(l);
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const RotaryTarget one{copies[i].view, copies[i].view};
    emulate_rotate(view, std::span(&one, 1), {});
    EXPECT_EQ(copies[i].bytes, owned[i].bytes) << "target " << i;
  }
}

// 32-bit index arithmetic only where every item index, element offset and table offset of a
// launch is below 2^31; the views are never dereferenced by the plan.
TEST(CudaMathPlan, ThirtyTwoBitIndicesOnlyWhereEveryOffsetFits) {
  std::vector<float> table(2 * 16, 0.0f);
  std::vector<std::uint16_t> storage(64);
  auto launch_for = [&](std::int64_t seq_stride) {
    HeadTensor v{storage.data(), DType::bfloat16, {1, 2, 2, 16}, {2 * seq_stride, seq_stride, 16, 1}};
    const RotaryTarget t{v, v};
    const RotaryTableView view{table.data(), 1, 2, 16};
    const auto checked = detail::check_rotate_targets(view, std::span(&t, 1));
    return gpu::plan_rotate(view, checked, Pairing::neox, Direction::forward).at(0).job;
  };
  EXPECT_TRUE(launch_for(32).index32);
  EXPECT_TRUE(launch_for((std::int64_t{1} << 31) - 64).index32);  // span 2^31 - 64 + 16 + 15 < 2^31
  EXPECT_FALSE(launch_for(std::int64_t{1} << 31).index32);
  EXPECT_FALSE(launch_for(std::int64_t{1} << 40).index32);
}

TEST(CudaMathPlan, VectorPathNeedsAlignedRowsWholePacksAndUnitDimStride) {
  std::mt19937_64 rng(2);
  const std::vector<float> table = table_for(1, 2, 16, rng);
  auto path = [&](const Owned& o, Pairing pairing, const float* t, int rot = 16) {
    detail::CheckedTarget c{o.view, o.view, true, 0};
    return gpu::vector_path(c, rot, pairing, t);
  };
  EXPECT_TRUE(path(make_owned(DType::bfloat16, 1, 2, 3, 16), Pairing::neox, table.data()));
  EXPECT_TRUE(path(make_owned(DType::bfloat16, 1, 2, 3, 16, 0, 0, true), Pairing::neox, table.data()));
  EXPECT_FALSE(path(make_owned(DType::bfloat16, 1, 2, 3, 16), Pairing::neox, table.data() + 1));
  EXPECT_TRUE(path(make_owned(DType::bfloat16, 1, 2, 3, 16, 0, 8), Pairing::neox, table.data()));  // 16 bytes in
  EXPECT_FALSE(path(make_owned(DType::bfloat16, 1, 2, 3, 16, 0, 4), Pairing::neox, table.data()));
  EXPECT_FALSE(path(make_owned(DType::bfloat16, 1, 2, 3, 16, 4), Pairing::neox, table.data()));  // 40-byte rows
  EXPECT_FALSE(path(make_owned(DType::bfloat16, 1, 2, 3, 16, 0, 0, false, 2), Pairing::neox, table.data()));
  // neox needs half (8 here) to be whole packs of 8 bf16; gptj needs the rotary dim to be.
  EXPECT_FALSE(path(make_owned(DType::bfloat16, 1, 2, 3, 16), Pairing::neox, table.data(), 8));
  EXPECT_TRUE(path(make_owned(DType::bfloat16, 1, 2, 3, 16), Pairing::gptj, table.data(), 8));
  EXPECT_TRUE(path(make_owned(DType::float32, 1, 2, 3, 16), Pairing::neox, table.data(), 8));
  EXPECT_TRUE(path(make_owned(DType::float32, 1, 2, 3, 16), Pairing::gptj, table.data(), 4));
  EXPECT_FALSE(path(make_owned(DType::float32, 1, 2, 3, 16), Pairing::gptj, table.data(), 2));
}

// Qwen2.5-VL-3B's shape in Hugging Face's layout (q transposed to [B, H, S, D] over bshd
// memory), GQA, bf16, forward then backward: against the reference, and back to the input.
TEST(CudaMathRotate, QwenShapeHfLayoutForwardAndBackward) {
  std::mt19937_64 rng(31);
  const std::int64_t S = 96;
  RotaryConfig config;  // Qwen2.5-VL defaults: 128, chunked 16/24/24, theta 1e6
  std::vector<float> positions(static_cast<std::size_t>(3 * S));
  std::uniform_real_distribution<float> pos(-20.0f, 5000.0f);
  for (float& p : positions) p = pos(rng);
  const std::vector<float> table = emulate_table(config, positions.data(), 1, S);
  Owned q = make_owned(DType::bfloat16, 1, S, 16, 128), k = make_owned(DType::bfloat16, 1, S, 2, 128);
  fill(q, rng);
  fill(k, rng);
  Owned q0 = clone(q), k0 = clone(k);
  const RotaryTableView view{table.data(), 1, S, 128};
  const RotaryTarget targets[] = {{q.view, q.view}, {k.view, k.view}};
  const auto launches = emulate_rotate(view, targets, {});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_TRUE(launches[0].vector);
  const HeadTensor q0v = q0.view, k0v = k0.view;
  for (auto [orig, now] : {std::pair{q0v, q.view}, std::pair{k0v, k.view}}) {
    const auto expected = ref::rotate(config, positions.data(), orig, Pairing::neox, Direction::forward);
    EXPECT_LE(ref::max_error(expected, orig, now, 128, Pairing::neox), ref::kBfloat16Tolerance);
  }
  RotaryParams back;
  back.direction = Direction::backward;
  emulate_rotate(view, targets, back);
  // Two bf16 roundings of the pair norm at most.
  for (auto [orig, now] : {std::pair{q0v, q.view}, std::pair{k0v, k.view}}) {
    std::vector<double> identity;
    ref::for_each_element(orig, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
      identity.push_back(ref::load(orig.data, orig.dtype, ref::element_offset(orig, b, s, h, d)));
    });
    EXPECT_LE(ref::max_error(identity, orig, now, 128, Pairing::neox), 2.01 * ref::kBfloat16Tolerance);
  }
}

}  // namespace
