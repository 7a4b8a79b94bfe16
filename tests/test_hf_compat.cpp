// The three Hugging Face transformers behaviours of get_rope_index (Compat in positions.h):
// the golden values transformers itself returned, and one small case per quirk, each small
// enough to check on paper.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "circlerope/age.h"
#include "circlerope/positions.h"
#include "golden_support.h"
#include "request.h"

namespace {

using namespace circlerope;
using circlerope::test::slurp;
using nlohmann::json;

json hf_cases() { return json::parse(slurp(CIRCLEROPE_HF_GOLDEN_FILE))["cases"]; }

TEST(HfCompat, CopyMatchesSharedOriginal) {
  const std::string shared = slurp(CIRCLEROPE_SHARED_HF_GOLDEN_FILE);
  if (shared.empty()) GTEST_SKIP() << "no ../shared/golden here (a CI clone); the copy in tests/data is used";
  EXPECT_EQ(json::parse(shared), json::parse(slurp(CIRCLEROPE_HF_GOLDEN_FILE)))
      << "tests/data/hf_mrope_positions.json is stale: copy ../shared/golden/hf_mrope_positions.json";
}

TEST(HfCompat, ModeNamesRoundTrip) {
  for (Compat c : kAllCompats) EXPECT_EQ(parse_compat(to_string(c)), c);
  EXPECT_THROW(parse_compat("hf-4.50"), Error);
  EXPECT_THROW(parse_compat("HF-4.49"), Error);
  EXPECT_THROW(parse_compat(""), Error);
}

// Every case in every mode equals what transformers returned, exactly (integers).
TEST(HfCompat, GoldenCasesInEveryModeAreExact) {
  const json cases = hf_cases();
  ASSERT_EQ(cases.size(), 24u);
  int checked = 0;
  for (const json& c : cases) {
    for (const auto& [mode, expected] : c["expected"].items()) {
      SCOPED_TRACE(c["name"].get<std::string>() + " " + mode);
      auto request = cli::parse_request(c["request"]);
      request.vision.compat = parse_compat(mode);
      const Positions p = rope_index(request.input(), request.vision, request.geometry);
      EXPECT_EQ(p.compat, request.vision.compat);
      int mismatches = 0;
      for (int axis = 0; axis < 3; ++axis)
        for (int64_t b = 0; b < p.batch; ++b)
          for (int64_t s = 0; s < p.seq_len; ++s) {
            const auto e = expected["position_ids"][axis][b][s].get<int64_t>();
            if (static_cast<double>(e) != p.at(axis, b, s) && ++mismatches <= 5)
              ADD_FAILURE() << "axis " << axis << " row " << b << " token " << s << ": transformers "
                            << e << ", ours " << p.at(axis, b, s);
          }
      EXPECT_EQ(mismatches, 0);
      for (int64_t b = 0; b < p.batch; ++b) {
        const json& d = expected["rope_deltas"][b];
        const auto e = (d.is_array() ? d[0] : d).get<int64_t>();
        EXPECT_EQ(static_cast<double>(e), p.rope_deltas[static_cast<size_t>(b)]) << "row " << b;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 72);
}

// The modes only differ where the golden README says; without one we are hf-4.49.
TEST(HfCompat, NoModeEqualsHf449OnTheGoldenCases) {
  for (const json& c : hf_cases()) {
    auto request = cli::parse_request(c["request"]);
    const Positions none = rope_index(request.input(), request.vision, request.geometry);
    request.vision.compat = Compat::hf_4_49;
    const Positions hf = rope_index(request.input(), request.vision, request.geometry);
    EXPECT_EQ(none.position_ids, hf.position_ids) << c["name"];
    EXPECT_EQ(none.rope_deltas, hf.rope_deltas) << c["name"];
  }
}

// ------------------------------------------------------------ hand-made cases ---

constexpr int64_t kStart = 151652, kImage = 151655, kVideo = 151656, kText = 7;

struct Case {
  std::vector<int64_t> ids, mask;
  int64_t batch = 1, seq = 0;
  std::vector<GridTHW> images, videos;
  std::vector<double> seconds;
  Positions run(Compat compat, Scheme scheme = Scheme::mrope) const {
    VisionConfig vision;
    vision.compat = compat;
    const RopeIndexInput in{ids, batch, seq, mask, images, videos, seconds};
    return rope_index(in, vision, {scheme, CircleConfig{}});
  }
};

std::vector<float> axis_row(const Positions& p, int axis, int64_t row = 0) {
  std::vector<float> out;
  for (int64_t s = 0; s < p.seq_len; ++s) out.push_back(p.at(axis, row, s));
  return out;
}

// text, <start>, a video of 3 frames of one merged cell (grid 3x2x2, merge 2), text.
// second_per_grid_t 0.5, tokens_per_second 2: tau(f) = trunc(f * 0.5 * 2) = f under 4.49,
// but f * trunc(0.5) * 2 = 0 under 4.52 and 5.3.
Case half_second_video() {
  Case c;
  c.ids = {kText, kStart, kVideo, kVideo, kVideo, kText};
  c.seq = 6;
  c.videos = {{3, 2, 2}};
  c.seconds = {0.5};
  return c;
}

TEST(HfCompat, Hf452TruncatesSecondsPerGridBeforeTheProduct) {
  const Case c = half_second_video();
  // positions: text 0, start 1, video anchored at 2: t = 2 + tau, h = w = 2, then text.
  EXPECT_EQ(axis_row(c.run(Compat::hf_4_49), 0), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(axis_row(c.run(Compat::hf_4_52), 0), (std::vector<float>{0, 1, 2, 2, 2, 3}));
  EXPECT_EQ(axis_row(c.run(Compat::hf_4_52), 1), (std::vector<float>{0, 1, 2, 2, 2, 3}));
  EXPECT_EQ(axis_row(c.run(Compat::none), 0), axis_row(c.run(Compat::hf_4_49), 0));
}

TEST(HfCompat, Hf53TextAfterAVideoContinuesFromItsFirstFrame) {
  Case c = half_second_video();
  c.seconds = {2.0};  // tau = 0, 4, 8 in every mode
  // 4.52: video t = 2, 6, 10; the text after it continues from the maximum, 10 + 1.
  EXPECT_EQ(axis_row(c.run(Compat::hf_4_52), 0), (std::vector<float>{0, 1, 2, 6, 10, 11}));
  // 5.3: from the start 2 plus max(h, w)/merge = 1, on all three axes: the last text token
  // gets 3, below the video's later frames (6, 10) on the time axis.
  const Positions p = c.run(Compat::hf_5_3);
  EXPECT_EQ(axis_row(p, 0), (std::vector<float>{0, 1, 2, 6, 10, 3}));
  EXPECT_EQ(axis_row(p, 1), (std::vector<float>{0, 1, 2, 2, 2, 3}));
  EXPECT_EQ(axis_row(p, 2), (std::vector<float>{0, 1, 2, 2, 2, 3}));
  // The delta still measures the row's maximum (10), against the 6 real tokens.
  EXPECT_EQ(p.rope_deltas[0], 10 + 1 - 6);
  EXPECT_EQ(c.run(Compat::hf_4_52).rope_deltas[0], 11 + 1 - 6);
}

TEST(Hf53, CircleVideoContinuesFromTheFirstFramesRing) {
  Case c = half_second_video();
  c.seconds = {2.0};
  const Positions p53 = c.run(Compat::hf_5_3, Scheme::circle);
  const Positions p52 = c.run(Compat::hf_4_52, Scheme::circle);
  // Frames are the same ring translated by tau (0, 4, 8) along (1,1,1); the text after the
  // video starts one past the first frame's largest coordinate under 5.3.
  const float first_frame_max = std::max({p53.at(0, 0, 2), p53.at(1, 0, 2), p53.at(2, 0, 2)});
  EXPECT_EQ(p53.at(0, 0, 5), first_frame_max + 1.0f);
  EXPECT_FLOAT_EQ(p52.at(0, 0, 5), first_frame_max + 8.0f + 1.0f);
  for (int64_t s = 0; s < 5; ++s)
    for (int axis = 0; axis < 3; ++axis) EXPECT_EQ(p53.at(axis, 0, s), p52.at(axis, 0, s));
}

// Left padding: two pads, then text, an image of one merged cell, text.
Case left_padded() {
  Case c;
  c.ids = {0, 0, kText, kStart, kImage, kText};
  c.mask = {0, 0, 1, 1, 1, 1};
  c.seq = 6;
  c.images = {{1, 2, 2}};
  return c;
}

TEST(HfCompat, Hf53PadsWithZeroAndCountsOnlyRealTokensInTheDelta) {
  const Case c = left_padded();
  const Positions old = c.run(Compat::hf_4_52);
  const Positions now = c.run(Compat::hf_5_3);
  // real tokens: text 0, start 1, image at 2 (t = h = w = 2), text 3
  EXPECT_EQ(axis_row(old, 1), (std::vector<float>{1, 1, 0, 1, 2, 3}));
  EXPECT_EQ(axis_row(now, 1), (std::vector<float>{0, 0, 0, 1, 2, 3}));
  EXPECT_EQ(old.rope_deltas[0], 3 + 1 - 6);  // against the padded length 6
  EXPECT_EQ(now.rope_deltas[0], 3 + 1 - 4);  // against the 4 real tokens
  EXPECT_EQ(now.real_tokens, (std::vector<int64_t>{4}));
}

TEST(HfCompat, DecodeRuleOfEachModeAfterLeftAndRightPadding) {
  Case left = left_padded();
  Case right = left;
  right.ids = {kText, kStart, kImage, kText, 0, 0};
  right.mask = {1, 1, 1, 1, 0, 0};
  for (const Case* c : {&left, &right})
    for (Compat mode : kAllCompats) {
      const Positions p = c->run(mode);
      const std::vector<float> next = next_positions(p, 2);
      ASSERT_EQ(next.size(), 6u);
      if (mode == Compat::hf_5_3) {
        // last prompt position (3) + 1, whatever the padding
        EXPECT_EQ(next[0], 4.0f) << to_string(mode);
        EXPECT_EQ(next[1], 5.0f) << to_string(mode);
      } else {
        // cache position 6, 7 (the padded row's length) + delta -2
        EXPECT_EQ(next[0], 6.0f - 2.0f) << to_string(mode);
        EXPECT_EQ(next[1], 7.0f - 2.0f) << to_string(mode);
      }
      EXPECT_EQ(next[2], next[0]);  // every axis
      EXPECT_EQ(next[4], next[0]);
    }
}

TEST(HfCompat, DecodeRulesAgreeWithoutPadding) {
  Case c = left_padded();
  c.mask.clear();
  c.ids = {kText, kText, kText, kStart, kImage, kText};
  for (Compat mode : kAllCompats)
    EXPECT_EQ(next_positions(c.run(mode), 3), next_positions(c.run(Compat::none), 3)) << to_string(mode);
}

// transformers' text-only branch (4.49-5.2): no grid in the batch, a mask. The padded 1s
// count in the row maximum, so a padded row whose only real token sits at 0 gets
// max(0, 1) + 1 - S.
TEST(HfCompat, TextOnlyBranchCountsPaddedOnesInTheDelta) {
  Case c;
  c.ids = {0, 0, kText, kText, kText, kText};
  c.mask = {0, 0, 1, 0, 0, 0};  // one real token
  c.seq = 6;
  EXPECT_EQ(c.run(Compat::none).rope_deltas[0], 0 + 1 - 6);
  EXPECT_EQ(c.run(Compat::hf_4_49).rope_deltas[0], 1 + 1 - 6);
  EXPECT_EQ(c.run(Compat::hf_4_52).rope_deltas[0], 1 + 1 - 6);
  EXPECT_EQ(c.run(Compat::hf_5_3).rope_deltas[0], 0 + 1 - 1);
  // With two real tokens the row maximum is 1 either way.
  c.mask = {0, 0, 1, 1, 0, 0};
  EXPECT_EQ(c.run(Compat::hf_4_49).rope_deltas[0], c.run(Compat::none).rope_deltas[0]);
  // A grid anywhere in the batch means the vision branch, which ignores padding: the same
  // row next to a row with an image keeps 0 + 1 - S.
  Case v;
  v.batch = 2;
  v.seq = 6;
  v.ids = {0, 0, kText, 0, 0, 0, /* row 1 */ kText, kStart, kImage, kText, kText, kText};
  v.mask = {0, 0, 1, 0, 0, 0, /* row 1 */ 1, 1, 1, 1, 1, 1};
  v.images = {{1, 2, 2}};
  EXPECT_EQ(v.run(Compat::hf_4_49).rope_deltas[0], 0 + 1 - 6);
}

TEST(HfCompat, LayoutsFollowTheModeToo) {
  VisionConfig vision;
  vision.compat = Compat::hf_5_3;
  const Positions p = layout_positions(parse_layout("text:2,video:3x1x1@2,text:1"), vision, {Scheme::mrope, {}});
  // video anchored at 2, tau = 0, 4, 8; the text after it at 2 + 1
  EXPECT_EQ(axis_row(p, 0), (std::vector<float>{0, 1, 2, 6, 10, 3}));
  EXPECT_EQ(p.rope_deltas[0], 10 + 1 - 6);
}

TEST(HfCompat, AgeGeometriesKeepTheMode) {
  Case c = left_padded();
  VisionConfig vision;
  vision.compat = Compat::hf_5_3;
  const RopeIndexInput in{c.ids, c.batch, c.seq, c.mask, c.images, c.videos, c.seconds};
  const AgePositions age = age_rope_index(in, vision, make_age_plan("alternate", 2), CircleConfig{});
  for (const Positions& p : age.geometries) {
    EXPECT_EQ(p.compat, Compat::hf_5_3);
    EXPECT_EQ(p.at(0, 0, 0), 0.0f);  // padded
  }
}

}  // namespace
