// Data pointers off their element size are refused (fuzz finding F2,
// tests/fuzz/regressions/c_kernels/f2_misaligned_fp32): the kernels load float / uint16_t
// elements, and a misaligned load is undefined behaviour (UBSan reported it; GPUs fault).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "test_support.h"
#include "circlerope/c_kernels.h"
#include "circlerope/rotary.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::HasSubstr;


struct Fixture {
  static constexpr std::int64_t kSeq = 3, kHeads = 2, kDim = 8;
  std::vector<float> positions = std::vector<float>(3 * kSeq, 1.0f);
  RotaryConfig config = [] {
    RotaryConfig c;
    c.rotary_dim = static_cast<int>(kDim);
    c.sections = {2, 1, 1};
    return c;
  }();
  RotaryTable table = make_rotary_table(config, positions.data(), 1, kSeq);
};

TEST(Alignment, RotateRefusesDataOffItsElementSize) {
  Fixture f;
  const std::size_t n = static_cast<std::size_t>(Fixture::kSeq * Fixture::kHeads * Fixture::kDim);
  // 8-byte aligned storage, viewed from byte offsets 0..3
  std::vector<std::uint64_t> in_store(n), out_store(n);
  auto* in_bytes = reinterpret_cast<unsigned char*>(in_store.data());
  auto* out_bytes = reinterpret_cast<unsigned char*>(out_store.data());
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16}) {
    const std::size_t size = dtype_size(dtype);
    for (std::size_t shift = 1; shift < 4; ++shift) {
      const HeadTensor aligned = bshd(out_bytes, dtype, 1, Fixture::kSeq, Fixture::kHeads, Fixture::kDim);
      const HeadTensor off = bshd(in_bytes + shift, dtype, 1, Fixture::kSeq, Fixture::kHeads, Fixture::kDim);
      std::fill(out_store.begin(), out_store.end(), 0);
      const RotaryTarget out_of_place[] = {{off, aligned}};
      const RotaryTarget in_place[] = {{off, off}};
      if (shift % size == 0) {  // aligned for 16-bit types at offset 2
        EXPECT_NO_THROW(rotate(f.table, out_of_place)) << to_string(dtype) << " +" << shift;
        continue;
      }
      EXPECT_THAT(error_of([&] { rotate(f.table, out_of_place); }),
                  AllOf(HasSubstr("rotate target 0 in: data"), HasSubstr("is not aligned to its element size"),
                        HasSubstr(std::to_string(size) + " bytes")))
          << to_string(dtype) << " +" << shift;
      EXPECT_THAT(error_of([&] { rotate(f.table, in_place); }), HasSubstr("not aligned"));
      // nothing was written
      EXPECT_TRUE(std::all_of(out_store.begin(), out_store.end(), [](std::uint64_t v) { return v == 0; }));
      // an aligned in with a misaligned out is refused too
      const HeadTensor off_out = bshd(out_bytes + shift, dtype, 1, Fixture::kSeq, Fixture::kHeads, Fixture::kDim);
      const HeadTensor in_ok = bshd(in_bytes, dtype, 1, Fixture::kSeq, Fixture::kHeads, Fixture::kDim);
      const RotaryTarget bad_out[] = {{in_ok, off_out}};
      EXPECT_THAT(error_of([&] { rotate(f.table, bad_out); }),
                  AllOf(HasSubstr("rotate target 0 out: data"), HasSubstr("not aligned")));
    }
  }
}

TEST(Alignment, TablesRefuseMisalignedFloatPointers) {
  Fixture f;
  std::vector<std::uint64_t> store(64);
  auto* bytes = reinterpret_cast<unsigned char*>(store.data());
  std::memcpy(bytes + 1, f.positions.data(), f.positions.size() * sizeof(float));
  const auto* off_positions = reinterpret_cast<const float*>(bytes + 1);
  EXPECT_THAT(error_of([&] { make_rotary_table(f.config, off_positions, 1, Fixture::kSeq); }),
              AllOf(HasSubstr("position_ids"), HasSubstr("not aligned to 4 bytes")));
  std::vector<std::uint64_t> x(static_cast<std::size_t>(Fixture::kSeq * Fixture::kHeads * Fixture::kDim));
  const HeadTensor t = bshd(x.data(), DType::float32, 1, Fixture::kSeq, Fixture::kHeads, Fixture::kDim);
  const RotaryTarget targets[] = {{t, t}};
  const RotaryTableView view{reinterpret_cast<const float*>(bytes + 2), 1, Fixture::kSeq,
                             static_cast<int>(Fixture::kDim)};
  EXPECT_THAT(error_of([&] { rotate(view, targets); }), HasSubstr("table: values"));
}

TEST(Alignment, CApiSaysSoInItsMessage) {
  Fixture f;
  crp_rotary_config config{};
  ASSERT_EQ(crp_rotary_config_default(&config), CRP_OK);
  config.rotary_dim = static_cast<int>(Fixture::kDim);
  config.sections[0] = 2;
  config.sections[1] = 1;
  config.sections[2] = 1;
  char error[256] = "";
  std::vector<float> values(static_cast<std::size_t>(Fixture::kSeq * Fixture::kDim));
  const crp_table_view table = {values.data(), 1, Fixture::kSeq, static_cast<int>(Fixture::kDim)};
  ASSERT_EQ(crp_table_fill(&config, f.positions.data(), &table, nullptr, error, sizeof error), CRP_OK) << error;
  std::vector<std::uint64_t> store(64);
  auto* bytes = reinterpret_cast<unsigned char*>(store.data());
  crp_head_tensor x = {bytes + 2, CRP_DTYPE_FLOAT32, {1, Fixture::kSeq, Fixture::kHeads, Fixture::kDim},
                       {Fixture::kSeq * Fixture::kHeads * Fixture::kDim, Fixture::kHeads * Fixture::kDim,
                        Fixture::kDim, 1}};
  EXPECT_EQ(crp_rotate(&table, &x, &x, 1, nullptr, error, sizeof error), CRP_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(error), HasSubstr("not aligned to its element size"));
}

}  // namespace
