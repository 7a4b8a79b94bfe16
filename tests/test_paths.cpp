// Every code path by name (portable, avx2, avx512, avx512bf16): each test below runs once per
// path and is SKIPPED, with the path and the reason in the message, where this machine cannot
// run it (`ctest` lists those as skipped). The AVX-512 paths are also executed under an
// emulator by tests/avx512_emulator (ctest avx512_emulator). Then the CPU detection and the one
// path decision (CIRCLEROPE_ISA included), on synthetic CPUID/XGETBV values and on this CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "circlerope/detail/cpu_features.h"
#include "circlerope/detail/cpu_probe.h"
#include "../src/cpu/kernel.h"
#include "../src/cpu/known_answer.h"
#include "circlerope/rotary.h"
#include "rotary_reference.h"

namespace {

using namespace circlerope;
using ::testing::HasSubstr;
namespace ref = circlerope::reference;

constexpr Isa kAllPaths[] = {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512bf16};

const IsaStatus& status_of(Isa isa) {
  static const std::vector<IsaStatus> all = isa_status();
  for (const IsaStatus& s : all)
    if (s.isa == isa) return s;
  ADD_FAILURE() << "no status for " << to_string(isa);
  return all.front();
}

class RotaryPath : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    const IsaStatus& s = status_of(GetParam());
    if (!s.available)
      GTEST_SKIP() << "path " << to_string(GetParam()) << " NOT TESTED on this machine: " << s.reason;
  }
  Isa isa() const { return GetParam(); }
};

std::string path_name(const testing::TestParamInfo<Isa>& info) { return std::string(to_string(info.param)); }

// ---- against the float64 reference ------------------------------------------------------

// The harness of `circlerope check` (NaN-filled outputs, guard elements around every view),
// restricted to this path: every dtype x pairing x frequency layout x memory layout x
// direction x in/out of place, with random sizes (RotaryHarness.RunCheckPassesForTwoSeeds
// adds sequences long enough for several threads, on every available path).
TEST_P(RotaryPath, EveryCombinationMatchesTheReference) {
  std::mt19937_64 rng(0xA11C0DE5);
  int cases = 0;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (Pairing pairing : {Pairing::neox, Pairing::gptj})
      for (FrequencyLayout layout : {FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single})
        for (const char* memory : {"bshd", "bhsd", "strided", "seq-major"})
          for (Direction direction : {Direction::forward, Direction::backward})
            for (bool in_place : {false, true}) {
              ref::ComparisonCase c{isa(), dtype, pairing, layout, memory, direction, in_place};
              c.head_dim = 2 + 2 * static_cast<std::int64_t>(rng() % 128);
              c.rotary_dim = rng() % 2 ? static_cast<int>(c.head_dim)
                                       : 2 + 2 * static_cast<int>(rng() % static_cast<std::uint64_t>(c.head_dim / 2));
              c.batch = 1 + static_cast<std::int64_t>(rng() % 2);
              c.seq = 1 + static_cast<std::int64_t>(rng() % 40);  // odd and even token counts
              c.q_heads = 1 + static_cast<std::int64_t>(rng() % 4);
              c.k_heads = 1 + static_cast<std::int64_t>(rng() % 2);
              const ref::ComparisonResult r = ref::compare_case(c, rng());
              ++cases;
              EXPECT_TRUE(r.pass()) << r.describe();
            }
  EXPECT_EQ(cases, 3 * 2 * 3 * 4 * 2 * 2);
}

// Every rotary dim 2..256 (every masked tail of both pairings: D/2 mod 16 takes every value)
// in contiguous rows, and the same in dim-stride-2 rows (the staged path), each dtype.
TEST_P(RotaryPath, EveryRotaryDimAndTailMatchesTheReference) {
  std::mt19937_64 rng(0x7A115);
  for (int rot = 2; rot <= 256; rot += 2)
    for (const char* memory : {"bshd", "strided"}) {
      ref::ComparisonCase c;
      c.isa = isa();
      c.dtype = static_cast<DType>(rot / 2 % 3);
      c.pairing = rot / 2 % 2 ? Pairing::gptj : Pairing::neox;
      c.layout = FrequencyLayout::chunked;
      c.memory = memory;
      c.direction = rot % 8 == 0 ? Direction::backward : Direction::forward;
      c.in_place = rot % 6 == 0;
      c.head_dim = rot + 2 * static_cast<std::int64_t>(rng() % 3);  // 0..4 pass-through elements
      c.rotary_dim = rot;
      c.batch = 1;
      c.seq = 1 + static_cast<std::int64_t>(rng() % 5);
      c.q_heads = 2;
      c.k_heads = 1;
      for (Pairing pairing : {Pairing::neox, Pairing::gptj}) {
        c.pairing = pairing;
        const ref::ComparisonResult r = ref::compare_case(c, rng());
        ASSERT_TRUE(r.pass()) << r.describe();
      }
    }
}

// ---- bit identity -----------------------------------------------------------------------

std::vector<unsigned char> random_bits(std::size_t elements, DType dtype, std::mt19937_64& rng) {
  std::vector<unsigned char> out(elements * dtype_size(dtype));
  std::normal_distribution<float> normal;
  for (std::size_t i = 0; i < elements; ++i) {
    const float v = std::ldexp(normal(rng), static_cast<int>(rng() % 17) - 8);
    const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
    if (dtype == DType::float32) std::memcpy(&out[4 * i], &u, 4);
    else {
      // Truncated to the top 16 bits (bf16) or an fp16 of similar magnitude: any finite
      // pattern is a valid input.
      const auto h = static_cast<std::uint16_t>(dtype == DType::bfloat16 ? u >> 16 : (0x3C00u + (u >> 20 & 0x07FF)) ^ (u >> 16 & 0x8000u));
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

// Contiguous rows take the vector path, dim-stride-2 rows the staged one; both round
// y0 = x0 c - (x1 s) and y1 = x1 c + (x0 s) alike (kernel_impl.h), so the bits match.
// Rotary dims above 256 take tiles of fewer tokens where the kernel re-lays the table
// (kernel_impl.h, relay_rows): 386 (10 tokens a tile, a tail of one pair) and 1024 (4).
TEST_P(RotaryPath, StagedAndVectorRowsGiveTheSameBits) {
  std::mt19937_64 rng(0x57A6ED);
  constexpr std::int64_t S = 11, H = 3;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (Pairing pairing : {Pairing::neox, Pairing::gptj})
      for (int rot : {2, 30, 64, 94, 128, 250, 386, 1024}) {
        RotaryConfig config;
        config.rotary_dim = rot;
        config.sections = {rot / 6, rot / 6, rot / 2 - 2 * (rot / 6)};
        std::vector<float> positions(3 * S);
        for (float& p : positions) p = static_cast<float>(rng() % 40000) * 0.1f - 50.0f;
        const RotaryTable table = make_rotary_table(config, positions.data(), 1, S, 1, isa());
        const std::size_t size = dtype_size(dtype);
        const auto dense_in = random_bits(static_cast<std::size_t>(S * H * rot), dtype, rng);
        std::vector<unsigned char> strided_in(dense_in.size() * 2, 0), dense_out(dense_in.size()), strided_out(strided_in.size());
        for (std::size_t e = 0; e < dense_in.size() / size; ++e) std::memcpy(&strided_in[2 * e * size], &dense_in[e * size], size);
        const HeadTensor a{const_cast<unsigned char*>(dense_in.data()), dtype, {1, S, H, rot}, {S * H * rot, H * rot, rot, 1}};
        const HeadTensor ao{dense_out.data(), dtype, {1, S, H, rot}, {S * H * rot, H * rot, rot, 1}};
        const HeadTensor b{strided_in.data(), dtype, {1, S, H, rot}, {2 * S * H * rot, 2 * H * rot, 2 * rot, 2}};
        const HeadTensor bo{strided_out.data(), dtype, {1, S, H, rot}, {2 * S * H * rot, 2 * H * rot, 2 * rot, 2}};
        RotaryParams params;
        params.isa = isa();
        params.pairing = pairing;
        const RotaryTarget ta{a, ao}, tb{b, bo};
        rotate(table, std::span<const RotaryTarget>(&ta, 1), params);
        rotate(table, std::span<const RotaryTarget>(&tb, 1), params);
        std::int64_t differ = 0;
        for (std::size_t e = 0; e < dense_out.size() / size; ++e)
          differ += std::memcmp(&dense_out[e * size], &strided_out[2 * e * size], size) != 0;
        EXPECT_EQ(differ, 0) << to_string(dtype) << " " << to_string(pairing) << " rot " << rot;
      }
}

// fp32 and 16-bit outputs of the AVX-512 paths equal avx2's bit for bit (the same algorithm,
// the same fused operations); here where both run natively, under Bochs everywhere else.
TEST_P(RotaryPath, EqualsAvx2BitForBit) {
  if (isa() == Isa::avx2 || isa() == Isa::portable)
    GTEST_SKIP() << "path " << to_string(isa()) << ": "
                 << (isa() == Isa::avx2 ? "is the path compared with" : "rounds without FMA, by design");
  if (!status_of(Isa::avx2).available) GTEST_SKIP() << "avx2 NOT AVAILABLE to compare with: " << status_of(Isa::avx2).reason;
  std::mt19937_64 rng(0xB17B17);
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (Pairing pairing : {Pairing::neox, Pairing::gptj})
      for (Direction direction : {Direction::forward, Direction::backward})
        for (int rot = 2; rot <= 256; rot += 14) {
          constexpr std::int64_t S = 7, H = 2;
          RotaryConfig config;
          config.rotary_dim = rot;
          config.sections = {rot / 2, 0, 0};
          std::vector<float> positions(3 * S);
          for (float& p : positions) p = static_cast<float>(rng() % 40000) * 0.1f;
          const RotaryTable table = make_rotary_table(config, positions.data(), 1, S, 1, Isa::avx2);
          auto in = random_bits(static_cast<std::size_t>(S * H * rot), dtype, rng);
          std::vector<unsigned char> x = in, y = in;
          const HeadTensor vx = bshd(x.data(), dtype, 1, S, H, rot), vy = bshd(y.data(), dtype, 1, S, H, rot);
          RotaryParams params;
          params.pairing = pairing;
          params.direction = direction;
          params.isa = isa();
          rotate(table, vx, params);
          params.isa = Isa::avx2;
          rotate(table, vy, params);
          EXPECT_EQ(x, y) << to_string(dtype) << " " << to_string(pairing) << " rot " << rot;
        }
}

// Software prefetch is a hint: with it forced on, off or left to the size gate, every byte of
// the outputs (NaN-filled beforehand, pass-through and gaps included) is the same, for every
// dtype, pairing, direction, in and out of place, in the layouts that reach the vector path
// (bshd, bhsd, padded rows), the staged one (dim stride 2) and the streaming stores (a
// separate, 16-byte aligned out of place call large enough for the streaming threshold).
TEST_P(RotaryPath, PrefetchOnAndOffGiveTheSameBits) {
  std::mt19937_64 rng(0x9F37C4);
  int cases = 0;
  auto run = [&](DType dtype, Pairing pairing, Direction direction, bool in_place, const char* layout,
                 std::int64_t S, std::int64_t H, int rot, std::int64_t head_dim, int threads) {
    RotaryConfig config;
    config.rotary_dim = rot;
    config.sections = {rot / 6, rot / 6, rot / 2 - 2 * (rot / 6)};
    std::vector<float> positions(static_cast<std::size_t>(3 * S));
    for (float& p : positions) p = static_cast<float>(rng() % 40000) * 0.1f - 50.0f;
    const RotaryTable table = make_rotary_table(config, positions.data(), 1, S, 1, isa());
    const std::size_t size = dtype_size(dtype);
    const std::int64_t step = std::string(layout) == "strided" ? 2 : 1;  // dim stride
    const std::int64_t row = step * head_dim + (std::string(layout) == "padded" ? 5 : 0);
    const std::size_t elements = static_cast<std::size_t>(S * H * row);
    const auto in = random_bits(elements, dtype, rng);
    std::vector<unsigned char> nan(elements * size);
    for (std::size_t e = 0; e < elements; ++e) {
      const std::uint32_t f = 0x7FC00DA7u;  // a quiet NaN with a payload, in every storage type
      const std::uint16_t h = dtype == DType::bfloat16 ? 0x7FC1 : 0x7E01;
      std::memcpy(&nan[e * size], size == 4 ? static_cast<const void*>(&f) : &h, size);
    }
    std::vector<unsigned char> out[3];
    const Prefetch modes[3] = {Prefetch::off, Prefetch::on, Prefetch::automatic};
    for (int m = 0; m < 3; ++m) {
      std::vector<unsigned char> x = in;
      out[m] = in_place ? in : nan;
      std::array<std::int64_t, 4> strides = {S * H * row, H * row, row, step};
      if (std::string(layout) == "bhsd") strides = {S * H * row, row, S * row, step};
      const HeadTensor vin{in_place ? out[m].data() : x.data(), dtype, {1, S, H, head_dim}, strides};
      const HeadTensor vout{out[m].data(), dtype, {1, S, H, head_dim}, strides};
      RotaryParams params;
      params.isa = isa();
      params.pairing = pairing;
      params.direction = direction;
      params.threads = threads;
      params.prefetch = modes[m];
      const RotaryTarget t{vin, vout};
      rotate(table, std::span<const RotaryTarget>(&t, 1), params);
      if (!in_place) {
        EXPECT_EQ(x, in) << "the input changed";
      }
    }
    EXPECT_EQ(out[0], out[1]) << to_string(dtype) << " " << to_string(pairing) << " " << to_string(direction) << " "
                              << layout << (in_place ? " in place" : " out of place") << " S " << S << " rot " << rot;
    EXPECT_EQ(out[0], out[2]) << "automatic " << to_string(dtype) << " " << layout;
    ++cases;
  };
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (Pairing pairing : {Pairing::neox, Pairing::gptj})
      for (Direction direction : {Direction::forward, Direction::backward})
        for (bool in_place : {false, true})
          for (const char* layout : {"bshd", "bhsd", "padded", "strided"}) {
            const int rot = 2 + 2 * static_cast<int>(rng() % 128);
            const std::int64_t head_dim = rot + (std::string(layout) == "padded" ? 2 * static_cast<std::int64_t>(rng() % 4) : 0);
            run(dtype, pairing, direction, in_place, layout, 1 + static_cast<std::int64_t>(rng() % 70),
                1 + static_cast<std::int64_t>(rng() % 5), rot, head_dim, 1 + static_cast<int>(rng() % 3));
          }
  // Out of place and over the streaming threshold (16 MiB of q and k in dispatch.cpp): the
  // non-temporal stores with prefetch, on two threads.
  for (DType dtype : {DType::float32, DType::bfloat16})
    run(dtype, Pairing::neox, Direction::forward, false, "bshd", dtype == DType::float32 ? 2100 : 4200, 16, 128, 128, 2);
  EXPECT_EQ(cases, 3 * 2 * 2 * 2 * 4 + 2);
}

// ---- memory -----------------------------------------------------------------------------

// Rows that end exactly where an unmapped page begins, in and out: a masked tail that reads
// or writes one element past its row faults (the test process dies: ctest reports it), and so
// would a software prefetch that is a real load.
TEST_P(RotaryPath, MaskedTailsStayInsideRowsEndingAtAnUnmappedPage) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  auto guarded = [&](std::size_t pages) {
    void* p = mmap(nullptr, (pages + 1) * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    EXPECT_EQ(mprotect(static_cast<unsigned char*>(p) + pages * page, page, PROT_NONE), 0);
    return static_cast<unsigned char*>(p);
  };
  constexpr std::size_t kPages = 4;
  unsigned char* in_region = guarded(kPages);
  unsigned char* out_region = guarded(kPages);
  std::mt19937_64 rng(0x9A6E);
  int rows = 0;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
    for (Pairing pairing : {Pairing::neox, Pairing::gptj})
      for (int half = 1; half <= 40; ++half)
        for (bool in_place : {false, true}) {
          const int rot = 2 * half;
          const std::int64_t S = 2, H = 1 + half % 2;
          RotaryConfig config;
          config.rotary_dim = rot;
          config.sections = {half, 0, 0};
          const std::vector<float> positions(3 * S, 7.25f);
          const RotaryTable table = make_rotary_table(config, positions.data(), 1, S, 1, isa());
          const std::size_t bytes = static_cast<std::size_t>(S * H * rot) * dtype_size(dtype);
          unsigned char* in = in_region + kPages * page - bytes;  // ends at the unmapped page
          unsigned char* out = out_region + kPages * page - bytes;
          const auto data = random_bits(static_cast<std::size_t>(S * H * rot), dtype, rng);
          std::memcpy(in, data.data(), bytes);
          std::memcpy(out, data.data(), bytes);
          const HeadTensor vin = bshd(in_place ? out : in, dtype, 1, S, H, rot), vout = bshd(out, dtype, 1, S, H, rot);
          RotaryParams params;
          params.isa = isa();
          params.pairing = pairing;
          // With prefetch, the last rows also prefetch addresses inside the unmapped page
          // and beyond: a hint, which must not fault.
          params.prefetch = half % 2 ? Prefetch::on : Prefetch::off;
          const RotaryTarget t{vin, vout};
          rotate(table, std::span<const RotaryTarget>(&t, 1), params);
          const auto expected = ref::rotate(config, positions.data(), bshd(const_cast<unsigned char*>(data.data()), dtype, 1, S, H, rot),
                                            pairing, Direction::forward);
          EXPECT_LE(ref::max_error(expected, bshd(const_cast<unsigned char*>(data.data()), dtype, 1, S, H, rot), vout, rot, pairing),
                    ref::tolerance(dtype))
              << to_string(dtype) << " " << to_string(pairing) << " half " << half;
          ++rows;
        }
  EXPECT_EQ(rows, 3 * 2 * 40 * 2);
  munmap(in_region, (kPages + 1) * page);
  munmap(out_region, (kPages + 1) * page);
}

INSTANTIATE_TEST_SUITE_P(EveryPath, RotaryPath, testing::ValuesIn(kAllPaths), path_name);

// ---- the paths this machine offers, and why not the others ---------------------------------

TEST(RotaryPaths, StatusListsEveryPathWithAReasonForEachMissingOne) {
  const auto status = isa_status();
  ASSERT_EQ(status.size(), 4u);
  std::vector<Isa> available;
  for (std::size_t i = 0; i < status.size(); ++i) {
    EXPECT_EQ(status[i].isa, kAllPaths[i]);
    EXPECT_EQ(status[i].available, status[i].reason.empty()) << to_string(status[i].isa) << ": " << status[i].reason;
    if (status[i].available) available.push_back(status[i].isa);
    else std::printf("path %s not available here: %s\n", std::string(to_string(status[i].isa)).c_str(), status[i].reason.c_str());
  }
  EXPECT_EQ(available, available_isas());
  EXPECT_TRUE(status[0].available) << "portable runs everywhere";
  const Isa automatic = automatic_isa();
  EXPECT_NE(std::find(available.begin(), available.end(), automatic), available.end());
  // The best of avx512bf16 > avx512 > avx2 > portable that is available.
  const Isa best = status_of(Isa::avx512bf16).available ? Isa::avx512bf16
                   : status_of(Isa::avx512).available   ? Isa::avx512
                   : status_of(Isa::avx2).available     ? Isa::avx2
                                                        : Isa::portable;
  EXPECT_EQ(automatic, best);
}

TEST(RotaryPaths, ForcingAMissingPathIsAOneLineErrorWithTheReason) {
  int missing = 0;
  for (Isa isa : kAllPaths) {
    const IsaStatus& s = status_of(isa);
    if (s.available) continue;
    ++missing;
    RotaryParams p;
    p.isa = isa;
    RotaryConfig config;
    config.rotary_dim = 8;
    config.sections = {4, 0, 0};
    const std::vector<float> positions(3, 1.0f);
    const RotaryTable table = make_rotary_table(config, positions.data(), 1, 1);
    std::vector<float> x(8, 1.0f);
    try {
      rotate(table, bshd(x.data(), DType::float32, 1, 1, 1, 8), p);
      ADD_FAILURE() << to_string(isa) << " did not throw";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_THAT(m, HasSubstr("code path '" + std::string(to_string(isa)) + "' is not available: " + s.reason));
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  if (missing == 0) GTEST_SKIP() << "every path runs on this machine";
}

TEST(RotaryPaths, NamesRoundTrip) {
  for (Isa isa : {Isa::automatic, Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512bf16})
    EXPECT_EQ(parse_isa(to_string(isa)), isa);
  try {
    parse_isa("avx512f");
    ADD_FAILURE() << "avx512f accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown code path 'avx512f' (expected automatic, portable, avx2, avx512 or avx512bf16)"));
  }
}

TEST(RotaryPaths, PrefetchNamesRoundTripAndAnInvalidValueIsRefused) {
  for (Prefetch p : {Prefetch::automatic, Prefetch::on, Prefetch::off}) EXPECT_EQ(parse_prefetch(to_string(p)), p);
  try {
    parse_prefetch("sometimes");
    ADD_FAILURE() << "sometimes accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown prefetch mode 'sometimes' (expected automatic, on or off)"));
  }
  // A value outside the enum (a cast from an integer) is an error, and nothing is written.
  const std::vector<float> positions(3, 1.5f);
  const RotaryTable table = make_rotary_table(RotaryConfig{}, positions.data(), 1, 1);
  std::vector<float> x(128, 1.0f);
  RotaryParams params;
  params.prefetch = static_cast<Prefetch>(7);
  try {
    rotate(table, bshd(x.data(), DType::float32, 1, 1, 1, 128), params);
    ADD_FAILURE() << "prefetch 7 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("prefetch 7 is not a Prefetch value (automatic, on or off)"));
  }
  EXPECT_EQ(x, std::vector<float>(128, 1.0f));
}

// The dispatcher's known-answer comparison (known_answer.h) accepts a kernel against itself and
// rejects one that rounds differently: without that it would guard nothing.
TEST(RotaryPaths, KnownAnswerComparisonCanFail) {
  EXPECT_TRUE(cpu::kernels_agree(cpu::range_kernel_portable(), cpu::range_kernel_portable()));
#if defined(CIRCLEROPE_HAVE_X86_KERNELS)
  if (!status_of(Isa::avx2).available) GTEST_SKIP() << "avx2 NOT AVAILABLE: " << status_of(Isa::avx2).reason;
  EXPECT_TRUE(cpu::kernels_agree(cpu::range_kernel_avx2(), cpu::range_kernel_avx2()));
  EXPECT_FALSE(cpu::kernels_agree(cpu::range_kernel_portable(), cpu::range_kernel_avx2()))
      << "portable rounds a*c - b*s without FMA: some bits must differ";
  EXPECT_TRUE(cpu::tables_agree(cpu::table_kernel_avx2(), cpu::table_kernel_avx2()));
  // A table one ulp off in a single entry of the last token is caught.
  const cpu::TableKernel off_by_one_ulp = [](const cpu::TableJob& job, std::int64_t begin, std::int64_t end) {
    cpu::table_kernel_avx2()(job, begin, end);
    if (end == job.tokens) {
      float& v = job.values[job.tokens * 2 * job.half - 1];
      v = std::nextafter(v, 2.0f);
    }
  };
  EXPECT_FALSE(cpu::tables_agree(off_by_one_ulp, cpu::table_kernel_avx2()));
#endif
}

// ---- CPU detection (circlerope/detail/cpu_features.h) ------------------------------------

using detail::CpuidWords;
using detail::decide_cpu_features;

// A Zen 4-like CPU: AVX2, FMA, F16C, AVX-512 F/BW/VL/DQ, AVX512_BF16, OSXSAVE.
CpuidWords zen4() {
  CpuidWords w;
  w.max_leaf = 16;
  w.leaf1_ecx = (1u << 12) | (1u << 27) | (1u << 28) | (1u << 29);
  w.leaf7_max_sub = 1;
  w.leaf7_ebx = (1u << 5) | (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
  w.leaf7_1_eax = 1u << 5;
  return w;
}

TEST(CpuFeatures, EveryRequirementIsChecked) {
  const auto all = decide_cpu_features(zen4(), 0xE7);
  EXPECT_TRUE(all.avx2 && all.avx512 && all.avx512_bf16);

  struct Case {
    const char* what;
    CpuidWords words;
    std::uint64_t xcr0;
    bool avx2, avx512, bf16;
    const char* reason;  // of the first missing level
  };
  auto with = [](auto change) {
    CpuidWords w = zen4();
    change(w);
    return w;
  };
  const Case cases[] = {
      {"XCR0 without opmask/ZMM", zen4(), 0x7, true, false, false, "XCR0 bits 5, 6, 7"},
      {"XCR0 without Hi16_ZMM", zen4(), 0x67, true, false, false, "XCR0 bits 5, 6, 7"},
      {"XCR0 without YMM", zen4(), 0x3, false, false, false, "XCR0 bits 1, 2"},
      {"no OSXSAVE (XCR0 unreadable)", with([](CpuidWords& w) { w.leaf1_ecx &= ~(1u << 27); }), 0xE7, false, false, false, "OSXSAVE"},
      {"no AVX", with([](CpuidWords& w) { w.leaf1_ecx &= ~(1u << 28); }), 0xE7, false, false, false, "no AVX"},
      {"no FMA", with([](CpuidWords& w) { w.leaf1_ecx &= ~(1u << 12); }), 0xE7, false, false, false, "no FMA"},
      {"no F16C", with([](CpuidWords& w) { w.leaf1_ecx &= ~(1u << 29); }), 0xE7, false, false, false, "no F16C"},
      {"no AVX2", with([](CpuidWords& w) { w.leaf7_ebx &= ~(1u << 5); }), 0xE7, false, false, false, "no AVX2"},
      {"no leaf 7", with([](CpuidWords& w) { w.max_leaf = 6; }), 0xE7, false, false, false, "no AVX2"},
      {"no AVX-512F", with([](CpuidWords& w) { w.leaf7_ebx &= ~(1u << 16); }), 0xE7, true, false, false, "no AVX-512F"},
      {"no AVX-512BW", with([](CpuidWords& w) { w.leaf7_ebx &= ~(1u << 30); }), 0xE7, true, false, false, "no AVX-512BW"},
      {"no AVX-512VL", with([](CpuidWords& w) { w.leaf7_ebx &= ~(1u << 31); }), 0xE7, true, false, false, "no AVX-512VL"},
      // avx512 does not need DQ; avx512bf16 does (its NaN-or-subnormal test is VFPCLASSPS).
      {"no AVX-512DQ", with([](CpuidWords& w) { w.leaf7_ebx &= ~(1u << 17); }), 0xE7, true, true, false, "no AVX-512DQ"},
      {"no AVX512_BF16", with([](CpuidWords& w) { w.leaf7_1_eax = 0; }), 0xE7, true, true, false, "no AVX512_BF16"},
      // Subleaf 1 does not exist: whatever its EAX would say is not read.
      {"leaf 7 has no subleaf 1", with([](CpuidWords& w) { w.leaf7_max_sub = 0; }), 0xE7, true, true, false, "no AVX512_BF16"},
  };
  for (const Case& c : cases) {
    const auto f = decide_cpu_features(c.words, c.xcr0);
    EXPECT_EQ(f.avx2, c.avx2) << c.what;
    EXPECT_EQ(f.avx512, c.avx512) << c.what;
    EXPECT_EQ(f.avx512_bf16, c.bf16) << c.what;
    const char* reason = !f.avx2 ? f.avx2_missing : !f.avx512 ? f.avx512_missing : f.avx512_bf16_missing;
    ASSERT_NE(reason, nullptr) << c.what;
    EXPECT_THAT(reason, HasSubstr(c.reason)) << c.what;
  }
}

// ---- the path decision: CPU, build, CIRCLEROPE_ISA and the known-answer check ---------------

detail::CpuProbe probe_of(const CpuidWords& words, std::uint64_t xcr0, const char* variable = nullptr,
                          bool vector_build = true) {
  detail::CpuProbe p;
  p.features = decide_cpu_features(words, xcr0);
  p.vector_build = vector_build;
  p.variable_set = variable != nullptr && *variable != '\0';
  if (p.variable_set) p.variable = variable;
  return p;
}

CpuidWords avx2_only() {
  CpuidWords w = zen4();
  w.leaf7_ebx &= ~(1u << 16);
  return w;
}

bool all_agree(Isa) { return true; }
enum class KnownAnswerCase { agree, bf16_disagrees };
bool bf16_disagrees(Isa isa) { return isa != Isa::avx512bf16; }

// What a caller sees: the resolved path, or the message it throws.
std::string outcome(const detail::CpuPaths& paths, Isa requested) {
  try {
    return std::string(to_string(paths.resolve(requested)));
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(CpuPaths, AutomaticTakesTheBestPathAndSaysWhy) {
  const auto zen = detail::decide_cpu_paths(probe_of(zen4(), 0xE7), &all_agree);
  EXPECT_EQ(zen.error, "");
  EXPECT_EQ(zen.automatic.isa, Isa::avx512bf16);
  EXPECT_FALSE(zen.automatic.forced);
  EXPECT_EQ(zen.automatic.reason,
            "automatic: avx512bf16, the CPU has AVX-512 F/BW/VL/DQ and AVX512_BF16 and the known-answer check passed");
  for (Isa isa : kAllPaths) EXPECT_EQ(outcome(zen, isa), to_string(isa));
  // The positions decide without the kernels' check, and do not claim it.
  EXPECT_EQ(detail::decide_cpu_paths(probe_of(zen4(), 0xE7)).automatic.reason,
            "automatic: avx512bf16, the CPU has AVX-512 F/BW/VL/DQ and AVX512_BF16");

  const auto avx2 = detail::decide_cpu_paths(probe_of(avx2_only(), 0xE7), &all_agree);
  EXPECT_EQ(avx2.automatic.isa, Isa::avx2);
  EXPECT_EQ(avx2.automatic.reason, "automatic: avx2, the CPU has AVX2, FMA and F16C; avx512 is not available: this "
                                   "CPU or OS lacks it: no AVX-512F (CPUID.7.0:EBX bit 16)");
  EXPECT_EQ(outcome(avx2, Isa::avx512),
            "code path 'avx512' is not available: this CPU or OS lacks it: no AVX-512F (CPUID.7.0:EBX bit 16)");

  const auto old = detail::decide_cpu_paths(probe_of(CpuidWords{}, 0), &all_agree);
  EXPECT_EQ(old.automatic.isa, Isa::portable);
  EXPECT_THAT(old.automatic.reason, HasSubstr("automatic: portable, avx2 is not available: this CPU or OS lacks it: no AVX"));

  const auto bad_bf16 = detail::decide_cpu_paths(probe_of(zen4(), 0xE7), &bf16_disagrees);
  EXPECT_EQ(bad_bf16.automatic.isa, Isa::avx512);
  EXPECT_EQ(bad_bf16.of(Isa::avx512bf16).reason, "its known-answer comparison with avx2 failed on this CPU");
  EXPECT_THAT(bad_bf16.automatic.reason, HasSubstr("known-answer check passed; avx512bf16 is not available: its known-answer"));

  const auto other = detail::decide_cpu_paths(probe_of(zen4(), 0xE7, nullptr, false), &all_agree);
  EXPECT_EQ(other.automatic.isa, Isa::portable);
  EXPECT_EQ(outcome(other, Isa::avx2), "code path 'avx2' is not available: not compiled into this build (x86-64 only)");
}

TEST(CpuPaths, TheVariableForcesAPathAndRulesOutTheOnesAfterIt) {
  for (const char* none : {"", "automatic"}) {
    const auto p = detail::decide_cpu_paths(probe_of(zen4(), 0xE7, none), &all_agree);
    EXPECT_EQ(p.automatic.isa, Isa::avx512bf16) << none;
    EXPECT_FALSE(p.automatic.forced) << none;
  }
  struct Case {
    const char* variable;
    Isa runs;
  };
  for (const Case c : {Case{"portable", Isa::portable}, Case{"avx2", Isa::avx2}, Case{"avx512", Isa::avx512},
                       Case{"avx512bf16", Isa::avx512bf16}}) {
    const auto p = detail::decide_cpu_paths(probe_of(zen4(), 0xE7, c.variable), &all_agree);
    EXPECT_EQ(p.error, "");
    EXPECT_EQ(p.automatic.isa, c.runs);
    EXPECT_TRUE(p.automatic.forced);
    EXPECT_EQ(p.automatic.reason, std::string("forced by CIRCLEROPE_ISA=") + c.variable);
    EXPECT_EQ(outcome(p, Isa::automatic), c.variable);
    for (Isa isa : kAllPaths) {
      const bool allowed = static_cast<int>(isa) <= static_cast<int>(c.runs);
      EXPECT_EQ(p.of(isa).available, allowed) << c.variable << " " << to_string(isa);
      EXPECT_EQ(outcome(p, isa), allowed ? std::string(to_string(isa))
                                         : "code path '" + std::string(to_string(isa)) +
                                               "' is not available: ruled out by CIRCLEROPE_ISA=" + c.variable);
    }
  }
}

TEST(CpuPaths, APathTheCpuLacksOrNoPathAtAllIsAnErrorForEveryChoice) {
  struct Case {
    CpuidWords words;
    const char* variable;
    KnownAnswerCase check;
    const char* error;
  };
  const Case cases[] = {
      {avx2_only(), "avx512", KnownAnswerCase::agree,
       "CIRCLEROPE_ISA=avx512 cannot be run here: this CPU or OS lacks it: no AVX-512F (CPUID.7.0:EBX bit 16)"},
      {avx2_only(), "avx512bf16", KnownAnswerCase::agree,
       "CIRCLEROPE_ISA=avx512bf16 cannot be run here: this CPU or OS lacks it: no AVX-512F (CPUID.7.0:EBX bit 16)"},
      {CpuidWords{}, "avx2", KnownAnswerCase::agree,
       "CIRCLEROPE_ISA=avx2 cannot be run here: this CPU or OS lacks it: no AVX (CPUID.1:ECX bit 28)"},
      {zen4(), "avx512bf16", KnownAnswerCase::bf16_disagrees,
       "CIRCLEROPE_ISA=avx512bf16 cannot be run here: its known-answer comparison with avx2 failed on this CPU"},
      {zen4(), "avx1024", KnownAnswerCase::agree,
       "CIRCLEROPE_ISA='avx1024' is not a code path (expected portable, avx2, avx512, avx512bf16 or automatic)"},
      {zen4(), "AVX2", KnownAnswerCase::agree, "CIRCLEROPE_ISA='AVX2' is not a code path"},
      {zen4(), " avx2", KnownAnswerCase::agree, "CIRCLEROPE_ISA=' avx2' is not a code path"},
      {zen4(), "avx2\n", KnownAnswerCase::agree, "CIRCLEROPE_ISA='avx2\\x0a' is not a code path"},
  };
  for (const Case& c : cases) {
    const auto p = detail::decide_cpu_paths(probe_of(c.words, 0xE7, c.variable),
                                            c.check == KnownAnswerCase::agree ? &all_agree : &bf16_disagrees);
    EXPECT_THAT(p.error, HasSubstr(c.error)) << c.variable;
    EXPECT_EQ(p.error.find('\n'), std::string::npos) << "one line: " << p.error;
    for (Isa isa : {Isa::automatic, Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512bf16})
      EXPECT_EQ(outcome(p, isa), p.error) << c.variable << ", asking for " << to_string(isa);
  }
  // The build lacks the vector paths: forcing one says so.
  const auto other = detail::decide_cpu_paths(probe_of(zen4(), 0xE7, "avx2", false), &all_agree);
  EXPECT_EQ(other.error, "CIRCLEROPE_ISA=avx2 cannot be run here: not compiled into this build (x86-64 only)");
}

// This process: the kernels' choice is the decision's on this CPU and environment.
TEST(CpuPaths, ThisProcessReportsItsChoice) {
  const CpuPath chosen = cpu_path();
  EXPECT_EQ(chosen.isa, automatic_isa());
  EXPECT_EQ(chosen.isa, available_isas().back());
  const auto expected = detail::decide_cpu_paths(detail::cpu_probe(), &all_agree);
  EXPECT_EQ(chosen.forced, expected.automatic.forced);
  if (!chosen.forced) {
    EXPECT_THAT(chosen.reason, testing::StartsWith("automatic: " + std::string(to_string(chosen.isa))));
  }
  std::printf("cpu path: %s (%s)\n", std::string(to_string(chosen.isa)).c_str(), chosen.reason.c_str());
}

// This CPU, against the compiler's own detection (libgcc/compiler-rt, a separate
// implementation that also checks XCR0).
TEST(CpuFeatures, AgreesWithTheCompilersDetectionOnThisCpu) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const auto f = detail::detect_cpu_features();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  const bool avx512_bf16 =
      avx512 && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bf16");
  EXPECT_EQ(f.avx2, avx2);
  EXPECT_EQ(f.avx512, avx512);
  EXPECT_EQ(f.avx512_bf16, avx512_bf16);
  std::printf("this CPU: avx2 %s, avx512 %s, avx512bf16 %s%s%s\n", f.avx2 ? "yes" : "no", f.avx512 ? "yes" : "no",
              f.avx512_bf16 ? "yes" : "no", f.avx512 ? "" : " (", f.avx512 ? "" : f.avx512_missing);
  if (!f.avx512) std::printf(")\n");
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

}  // namespace
