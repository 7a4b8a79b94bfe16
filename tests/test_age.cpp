// Alternating Geometry Encoding (docs/spec.md §6): per-layer plans, one position table
// per distinct geometry, and per-geometry decoding offsets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "circlerope/age.h"
#include "circlerope/positions.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::HasSubstr;

// The plans written out from docs/spec.md §6, independently of the library.
std::string expected_pattern(const std::string& name, int layers) {
  std::string p;
  for (int l = 0; l < layers; ++l) {
    bool circle = true;
    if (name == "lower") circle = l < layers / 2;
    if (name == "upper") circle = l >= layers / 2;
    if (name == "alternate") circle = l % 2 == 0;
    p += circle ? 'C' : 'M';
  }
  return p;
}

Scheme scheme_of(char c) {
  return c == 'C' ? Scheme::circle : c == 'M' ? Scheme::mrope : c == 'V' ? Scheme::vanilla : Scheme::unordered;
}

void expect_plan(const AgePlan& plan, const std::string& pattern) {
  ASSERT_EQ(plan.layers(), static_cast<int>(pattern.size()));
  EXPECT_EQ(plan.pattern(), pattern);
  // schemes: distinct, in order of first use
  std::vector<Scheme> distinct;
  for (char c : pattern)
    if (std::find(distinct.begin(), distinct.end(), scheme_of(c)) == distinct.end())
      distinct.push_back(scheme_of(c));
  EXPECT_EQ(plan.schemes(), distinct) << pattern;
  for (int l = 0; l < plan.layers(); ++l) {
    EXPECT_EQ(plan.layer_scheme(l), scheme_of(pattern[static_cast<size_t>(l)])) << pattern << " layer " << l;
    EXPECT_EQ(plan.schemes()[static_cast<size_t>(plan.layer_geometry(l))],
              scheme_of(pattern[static_cast<size_t>(l)]));
  }
}

TEST(Age, NamedPlansAndTheirReferenceAliases) {
  const std::vector<std::pair<std::string, std::string>> names = {
      {"all", "strategy_1"}, {"lower", "strategy_2"}, {"upper", "strategy_3"}, {"alternate", "strategy_4"}};
  for (int layers : {1, 2, 3, 7, 36}) {
    for (const auto& [name, alias] : names) {
      SCOPED_TRACE(name + " L=" + std::to_string(layers));
      const std::string want = expected_pattern(name, layers);
      expect_plan(make_age_plan(name, layers), want);
      expect_plan(make_age_plan(alias, layers), want);
    }
  }
  // A few written out in full.
  EXPECT_EQ(make_age_plan("lower", 7).pattern(), "CCCMMMM");
  EXPECT_EQ(make_age_plan("upper", 7).pattern(), "MMMCCCC");
  EXPECT_EQ(make_age_plan("alternate", 7).pattern(), "CMCMCMC");
  EXPECT_EQ(make_age_plan("lower", 1).pattern(), "M");  // [0, 0) is empty
  EXPECT_EQ(make_age_plan("upper", 1).pattern(), "C");
  EXPECT_EQ(make_age_plan("alternate", 1).pattern(), "C");
  EXPECT_EQ(make_age_plan("upper", 2).pattern(), "MC");
  EXPECT_EQ(make_age_plan("upper", 7).schemes(), (std::vector<Scheme>{Scheme::mrope, Scheme::circle}));
  EXPECT_EQ(make_age_plan("all", 36).schemes(), (std::vector<Scheme>{Scheme::circle}));
}

TEST(Age, CustomPatternsAreRepeatedAndTruncated) {
  expect_plan(make_age_plan("CMM", 4), "CMMC");
  expect_plan(make_age_plan("CMM", 3), "CMM");
  expect_plan(make_age_plan("CMM", 7), "CMMCMMC");
  expect_plan(make_age_plan("M", 5), "MMMMM");
  expect_plan(make_age_plan("VU", 3), "VUV");
  std::string umcv;
  for (int i = 0; i < 9; ++i) umcv += "UMCV";
  expect_plan(make_age_plan("UMCV", 36), umcv);
  expect_plan(make_age_plan(umcv, 36), umcv);  // exactly L letters
  EXPECT_EQ(make_age_plan("MC", 36).layers(), 36);
}

TEST(Age, InvalidPlansAreErrors) {
  auto message = [](const std::string& spec, int layers) -> std::string {
    try {
      make_age_plan(spec, layers);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(message("", 4), HasSubstr("AGE plan"));
  EXPECT_THAT(message("CMMCC", 4), HasSubstr("CMMCC"));  // longer than the layers
  EXPECT_THAT(message("CMMCC", 4), HasSubstr("4"));
  EXPECT_THAT(message("CXM", 4), HasSubstr("'X'"));
  EXPECT_THAT(message("cm", 4), HasSubstr("'c'"));  // letters are upper case
  EXPECT_THAT(message("C M", 4), HasSubstr("' '"));
  EXPECT_THAT(message("strategy_5", 36), HasSubstr("strategy_5"));
  EXPECT_THAT(message("ALL", 36), HasSubstr("ALL"));
  EXPECT_THAT(message("all", 0), HasSubstr("0"));
  EXPECT_THAT(message("all", -3), HasSubstr("-3"));
  EXPECT_THAT(message("C", 0), HasSubstr("layers"));
  const AgePlan plan = make_age_plan("alternate", 4);
  EXPECT_THROW(plan.layer_scheme(4), Error);
  EXPECT_THROW(plan.layer_scheme(-1), Error);
  // An empty plan cannot be made at all any more (it was the only invalid plan this line could
  // build); hand-built AgePositions whose geometries do not match the plan are refused.
  static_assert(!std::is_default_constructible_v<AgePlan>);
  AgePositions mismatched{make_age_plan("CM", 2), {}};
  EXPECT_THROW(mismatched.layer(0), Error);
}

TEST(Age, EachDistinctGeometryIsComputedOnceAndLayersShareIt) {
  const Batch in = two_padded_image_rows();
  CircleConfig circle;
  circle.radius = 4;
  for (const char* spec : {"alternate", "lower", "all", "CMVU", "UUM"}) {
    SCOPED_TRACE(spec);
    const AgePlan plan = make_age_plan(spec, 6);
    const AgePositions age = age_rope_index(in.input(), VisionConfig{}, plan, circle);
    ASSERT_EQ(age.geometries.size(), plan.schemes().size());
    EXPECT_EQ(age.plan.pattern(), plan.pattern());
    for (int l = 0; l < 6; ++l) {
      const Scheme s = plan.layer_scheme(l);
      const Positions& got = age.layer(l);
      // the table of the layer's geometry, shared (same object) by its layers
      EXPECT_EQ(&got, &age.geometries[static_cast<size_t>(plan.layer_geometry(l))]);
      const Positions want = rope_index(in.input(), VisionConfig{}, {s, circle});
      EXPECT_EQ(got.position_ids, want.position_ids) << "layer " << l;
      EXPECT_EQ(got.rope_deltas, want.rope_deltas) << "layer " << l;
    }
    EXPECT_THROW(age.layer(6), Error);
    EXPECT_THROW(age.layer(-1), Error);
  }
}

TEST(Age, CircleLayersUseTheGivenCircleConfig) {
  const Batch in = two_padded_image_rows();
  CircleConfig a, b;
  a.radius = 2;
  b.radius = 9;
  const AgePlan plan = make_age_plan("CM", 2);
  const AgePositions x = age_rope_index(in.input(), VisionConfig{}, plan, a);
  const AgePositions y = age_rope_index(in.input(), VisionConfig{}, plan, b);
  EXPECT_NE(x.layer(0).position_ids, y.layer(0).position_ids);
  EXPECT_EQ(x.layer(1).position_ids, y.layer(1).position_ids);  // M-RoPE ignores it
}

TEST(Age, DecodingUsesEachGeometrysOwnDeltas) {
  const Batch in = two_padded_image_rows();
  const AgePlan plan = make_age_plan("alternate", 4);
  const AgePositions age = age_rope_index(in.input(), VisionConfig{}, plan, CircleConfig{});
  const Positions& circle = age.layer(0);
  const Positions& mrope = age.layer(1);
  // M-RoPE by hand: row 0: T0 T1 S2 [3x3 at 3: max 5] E6 T7 T8 -> delta 9 - 15
  // row 1: P P T0 S1 [2x2 at 2: max 3] E4 T5..T10 -> delta 11 - 15
  EXPECT_EQ(mrope.rope_deltas, (std::vector<float>{9.0f - 15.0f, 11.0f - 15.0f}));
  // The Circle-RoPE deltas are different (fractional) numbers.
  EXPECT_NE(circle.rope_deltas[0], mrope.rope_deltas[0]);
  EXPECT_NE(circle.rope_deltas[0], std::round(circle.rope_deltas[0]));
  for (int l = 0; l < plan.layers(); ++l) {
    const Positions& g = age.layer(l);
    const std::vector<float> d = decode_positions(g.rope_deltas, in.seq, 2);
    for (int64_t row = 0; row < 2; ++row) {
      double high = -1e300;
      for (int64_t s = 0; s < in.seq; ++s)
        if (in.mask[static_cast<size_t>(row * in.seq + s)] == 1)
          for (int a = 0; a < 3; ++a) high = std::max(high, static_cast<double>(g.at(a, row, s)));
      const double tol = kFloatRoundings * (high + static_cast<double>(in.seq));
      for (int a = 0; a < 3; ++a)
        for (int64_t i = 0; i < 2; ++i)
          EXPECT_NEAR(d[static_cast<size_t>((a * 2 + row) * 2 + i)], high + 1 + static_cast<double>(i), tol)
              << "layer " << l << " row " << row << " axis " << a;
    }
  }
  // The M-RoPE layer decoded with its own deltas continues its own prompt:
  // first decode position 9 for row 0, 11 for row 1 (with Circle-RoPE deltas,
  // as the reference does, it would not).
  const std::vector<float> d = decode_positions(mrope.rope_deltas, in.seq, 1);
  EXPECT_EQ(d[0], 9.0f);
  EXPECT_EQ(d[1], 11.0f);
  EXPECT_NE(decode_positions(circle.rope_deltas, in.seq, 1)[0], 9.0f);
}

}  // namespace
