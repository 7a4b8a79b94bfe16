// The rotary configuration (docs/spec.md §4): which position axis each frequency reads in each
// frequency layout, the inverse frequencies, the range of theta, and the checks of
// validate(RotaryConfig).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/ptd.h"
#include "circlerope/rotary.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::HasSubstr;

// ---------------------------------------------------- frequency layouts ---

TEST(Rotary, ChunkedQwen25Axes) {
  const RotaryConfig r;  // D = 128, chunked [16, 24, 24]
  const std::vector<int> axes = frequency_axes(r);
  ASSERT_EQ(axes.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(axes[static_cast<size_t>(i)], i < 16 ? 0 : i < 40 ? 1 : 2) << i;
}

TEST(Rotary, InterleavedQwen3Axes) {
  RotaryConfig r;
  r.layout = FrequencyLayout::interleaved;
  r.sections = {24, 20, 20};
  const std::vector<int> axes = frequency_axes(r);
  ASSERT_EQ(axes.size(), 64u);
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 64; ++i) {
    const int want = (i % 3 == 1 && i < 60) ? 1 : (i % 3 == 2 && i < 60) ? 2 : 0;
    EXPECT_EQ(axes[static_cast<size_t>(i)], want) << i;
    ++counts[axes[static_cast<size_t>(i)]];
  }
  EXPECT_EQ(counts[0], 24);
  EXPECT_EQ(counts[1], 20);
  EXPECT_EQ(counts[2], 20);
  // The header's drawing: interleaved [4,2,2], D = 16 -> t h w t h w t t
  RotaryConfig small;
  small.layout = FrequencyLayout::interleaved;
  small.rotary_dim = 16;
  small.sections = {4, 2, 2};
  EXPECT_EQ(frequency_axes(small), (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 0}));
  small.layout = FrequencyLayout::chunked;
  small.sections = {2, 3, 3};
  EXPECT_EQ(frequency_axes(small), (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2}));
}

TEST(Rotary, SingleReadsAxisZeroAndIgnoresSections) {
  RotaryConfig r;
  r.layout = FrequencyLayout::single;
  r.rotary_dim = 10;
  r.sections = {99, -1, 0};
  EXPECT_EQ(frequency_axes(r), std::vector<int>(5, 0));
}

TEST(Rotary, InverseFrequencies) {
  RotaryConfig r;
  r.rotary_dim = 8;
  r.sections = {2, 1, 1};
  r.theta = 10000;
  const std::vector<double> inv = inverse_frequencies(r);
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_DOUBLE_EQ(inv[0], 1.0);
  EXPECT_DOUBLE_EQ(inv[1], 0.1);  // 10000^(-2/8)
  EXPECT_DOUBLE_EQ(inv[2], 0.01);
  EXPECT_DOUBLE_EQ(inv[3], 0.001);
}

TEST(Rotary, ValidateRejectsInconsistentConfigs) {
  auto message = [](const RotaryConfig& r) -> std::string {
    try {
      validate(r);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message(RotaryConfig{}), "");
  RotaryConfig odd;
  odd.rotary_dim = 127;
  EXPECT_THAT(message(odd), HasSubstr("127"));
  EXPECT_THAT(message(odd), HasSubstr("even"));
  for (int dim : {0, -2, 1, 1026}) {
    RotaryConfig r;
    r.rotary_dim = dim;
    r.layout = FrequencyLayout::single;
    EXPECT_THAT(message(r), HasSubstr(std::to_string(dim))) << dim;
  }
  RotaryConfig sum;
  sum.sections = {16, 24, 23};
  EXPECT_THAT(message(sum), HasSubstr("sections"));
  EXPECT_THAT(message(sum), HasSubstr("64"));
  RotaryConfig neg;
  neg.sections = {-8, 36, 36};
  EXPECT_THAT(message(neg), HasSubstr("sections"));
  RotaryConfig inter;
  inter.layout = FrequencyLayout::interleaved;
  inter.sections = {24, 20, 21};
  EXPECT_THAT(message(inter), HasSubstr("sections"));
  for (double theta : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    RotaryConfig r;
    r.theta = theta;
    EXPECT_THAT(message(r), HasSubstr("theta")) << theta;
  }
  EXPECT_THROW(frequency_axes(odd), Error);
  EXPECT_THROW(inverse_frequencies(sum), Error);
}

// ---- the range of theta ---------------------------------------------------------------

// A subnormal theta passed "finite and > 0": its frequencies theta^(-2i/D) reach 1e300 and
// the angles overflow, so the table held NaN and inf with success and PTD printed "n/a".
TEST(Rotary, SubnormalOrTinyThetaIsRefusedNotTurnedIntoNaN) {
  std::vector<float> positions(3 * 4, 3.0f);
  for (double theta : {1e-310, 5e-324, 1e-30, 0.5, std::nextafter(1.0, 0.0)}) {
    RotaryConfig r;
    r.theta = theta;
    EXPECT_THAT(error_of([&] { make_rotary_table(r, positions.data(), 1, 4); }), HasSubstr("rope_theta must be in [1, 2^126"))
        << theta;
    const Positions p = layout_positions(parse_layout("text:3,image:2x2,text:2"), VisionConfig{}, Geometry{});
    EXPECT_THAT(error_of([&] { coupling_metrics(p, r); }), HasSubstr("rope_theta")) << theta;
  }
}

// Property: every theta in [1, 2^126] (log-uniform, and both ends) gives finite
// frequencies and a finite table at any finite float32 position, FLT_MAX included; just
// outside the range is refused.
TEST(Rotary, ThetaRangeKeepsEveryFrequencyAndAngleFinite) {
  std::mt19937_64 rng(0x7E7A);
  std::uniform_real_distribution<double> exponent(0.0, 126.0);
  const float far = std::numeric_limits<float>::max();
  std::vector<float> positions = {0.0f, 1.0f, -far, 1e30f, far, -3.5f};  // [3][1][2]
  std::vector<double> thetas = {kMinTheta, kMaxTheta, 1e6, 5e5};
  for (int i = 0; i < 200; ++i) thetas.push_back(std::exp2(exponent(rng)));
  for (double theta : thetas)
    for (int dim : {2, 6, 128, 1024}) {
      RotaryConfig r;
      r.theta = theta;
      r.rotary_dim = dim;
      r.sections = {dim / 2, 0, 0};
      for (double inv : inverse_frequencies(r)) {
        ASSERT_TRUE(inv > 0 && inv <= 1) << theta << " " << dim << " " << inv;
        ASSERT_GE(static_cast<float>(inv), std::numeric_limits<float>::min()) << theta << " " << dim;
      }
      const RotaryTable t = make_rotary_table(r, positions.data(), 1, 2);
      for (float v : std::span<const float>(t.view().values, static_cast<std::size_t>(2 * dim)))
        ASSERT_TRUE(std::isfinite(v)) << theta << " " << dim;
    }
  for (double theta : {std::nextafter(kMinTheta, 0.0), std::nextafter(kMaxTheta, HUGE_VAL), 0x1p127, 1e300}) {
    RotaryConfig r;
    r.theta = theta;
    EXPECT_THAT(error_of([&] { validate(r); }), HasSubstr("rope_theta must be in [1, 2^126")) << theta;
  }
}

TEST(Rotary, LayoutNames) {
  for (auto l : {FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single})
    EXPECT_EQ(parse_frequency_layout(to_string(l)), l);
  EXPECT_EQ(to_string(FrequencyLayout::interleaved), "interleaved");
  try {
    parse_frequency_layout("chunky");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("chunky"));
  }
}

}  // namespace
