// The Hugging Face transformers behaviours of get_rope_index (Compat in positions.h,
// docs/guides/compat.md): the golden values of tests/data/hf_mrope_positions.json, what the real releases returned
// (tests/data/hf_mrope_releases.json, written by scripts/hf_matrix.sh --record), and one small
// case per quirk, each small enough to check on paper.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
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

TEST(HfCompat, ModeNamesRoundTrip) {
  for (Compat c : kAllCompats) EXPECT_EQ(parse_compat(to_string(c)), c);
  std::vector<std::string> names;
  for (Compat c : kAllCompats) names.emplace_back(to_string(c));
  EXPECT_EQ(names, (std::vector<std::string>{"none", "hf-4.49", "hf-4.52", "hf-5.2", "hf-5.3-5.5.3", "hf-5.5.4",
                                             "hf-5.6", "hf-5.18"}));
  for (const std::string& name : names) EXPECT_NE(std::string(compat_names()).find(name), std::string::npos) << name;
  // the former name of hf-5.6
  EXPECT_EQ(parse_compat("hf-5.3"), Compat::hf_5_6);
  EXPECT_EQ(Compat::hf_5_3, Compat::hf_5_6);
  EXPECT_THROW(parse_compat("hf-4.50"), Error);
  EXPECT_THROW(parse_compat("HF-4.49"), Error);
  EXPECT_THROW(parse_compat("hf-5.3-5.5"), Error);
  EXPECT_THROW(parse_compat(""), Error);
}

TEST(HfCompat, WhatEachModeDoes) {
  for (Compat c : kAllCompats) {
    const bool v5_2_on = c != Compat::none && c != Compat::hf_4_49 && c != Compat::hf_4_52;
    EXPECT_EQ(compat_pads_with_zero(c), v5_2_on) << to_string(c);
    EXPECT_EQ(compat_deltas_count_real_tokens(c), v5_2_on && c != Compat::hf_5_2) << to_string(c);
    EXPECT_EQ(compat_continues_from_first_frame(c), compat_deltas_count_real_tokens(c)) << to_string(c);
  }
}

// ------------------------------------------------------------ real releases ---

std::string releases_file() {
  const std::string golden = CIRCLEROPE_HF_GOLDEN_FILE;
  return golden.substr(0, golden.find_last_of('/') + 1) + "hf_mrope_releases.json";
}

// What every release of scripts/hf_matrix.sh returned on the fixed requests, per mode: ours is
// the same, or refused where transformers raised.
TEST(HfReleases, EveryReleaseOutputIsReproducedByItsMode) {
  const std::string text = slurp(releases_file());
  ASSERT_FALSE(text.empty()) << releases_file() << " is missing (scripts/hf_matrix.sh --record writes it)";
  const json doc = json::parse(text);
  std::vector<std::string> modes;
  for (const auto& [mode, versions] : doc["releases"].items()) {
    modes.push_back(mode);
    EXPECT_FALSE(versions.empty()) << mode;
  }
  // every behaviour of positions.h's table was run
  for (Compat c : kAllCompats) {
    if (c != Compat::none) {
      EXPECT_NE(std::find(modes.begin(), modes.end(), std::string(to_string(c))), modes.end()) << to_string(c);
    }
  }
  int checked = 0, refused = 0;
  for (const json& c : doc["cases"]) {
    for (const auto& [mode, expected] : c["expected"].items()) {
      SCOPED_TRACE(c["name"].get<std::string>() + " " + mode);
      auto request = cli::parse_request(c["request"]);
      request.vision.compat = parse_compat(mode);
      if (expected.contains("error")) {
        EXPECT_THROW(rope_index(request.input(), request.vision, request.geometry), Error)
            << "transformers raised " << expected["error"];
        ++refused;
        continue;
      }
      EXPECT_EQ(expected["dtype"], (json{"torch.int64", "torch.int64"}));
      const Positions p = rope_index(request.input(), request.vision, request.geometry);
      int mismatches = 0;
      for (int axis = 0; axis < 3; ++axis)
        for (int64_t b = 0; b < p.batch; ++b)
          for (int64_t s = 0; s < p.seq_len; ++s) {
            const auto e = expected["position_ids"][axis][b][s].get<int64_t>();
            if (static_cast<double>(e) != p.at(axis, b, s) && ++mismatches <= 5)
              ADD_FAILURE() << "axis " << axis << " row " << b << " token " << s << ": transformers " << e
                            << ", ours " << p.at(axis, b, s);
          }
      EXPECT_EQ(mismatches, 0);
      for (int64_t b = 0; b < p.batch; ++b)
        EXPECT_EQ(static_cast<double>(expected["rope_deltas"][b].get<int64_t>()), p.rope_deltas[static_cast<size_t>(b)])
            << "row " << b;
      ++checked;
    }
  }
  EXPECT_GE(checked, 100);
  EXPECT_GE(refused, 1);  // 5.3-5.5.3 running out of second_per_grid_ts
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

// The modes only differ where docs/spec.md §8 says; without one we are hf-4.49.
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
      if (compat_deltas_count_real_tokens(mode)) {
        // the row's maximum + 1, whatever the padding: 3 + 1, but hf-5.3-5.5.3 puts the image
        // at temporal 2 * tokens_per_second = 4 (rule (B))
        const float top = mode == Compat::hf_5_3_to_5_5_3 ? 4.0f : 3.0f;
        EXPECT_EQ(next[0], top + 1.0f) << to_string(mode);
        EXPECT_EQ(next[1], top + 2.0f) << to_string(mode);
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
  // real tokens = seq_len: both rules give cache position + delta
  for (Compat mode : kAllCompats) {
    const Positions p = c.run(mode);
    EXPECT_EQ(next_positions(p, 3), decode_positions(p.rope_deltas, p.seq_len, 3)) << to_string(mode);
  }
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

// ------------------------------------------------------------------ 5.2 ---

TEST(Hf52, PadsWithZeroMeasuresThePaddedLengthAndHasNoTextOnlyBranch) {
  const Case c = left_padded();
  const Positions p = c.run(Compat::hf_5_2);
  EXPECT_EQ(axis_row(p, 1), (std::vector<float>{0, 0, 0, 1, 2, 3}));
  EXPECT_EQ(p.rope_deltas[0], 3 + 1 - 6);  // against the padded length, as 4.52
  // no text-only branch: the padded zeros do not count in the row maximum
  Case t;
  t.ids = {0, 0, kText, kText, kText, kText};
  t.mask = {0, 0, 1, 0, 0, 0};
  t.seq = 6;
  EXPECT_EQ(t.run(Compat::hf_5_2).rope_deltas[0], 0 + 1 - 6);
  EXPECT_EQ(t.run(Compat::hf_4_52).rope_deltas[0], 1 + 1 - 6);
  // frame times as 4.52 (seconds truncated), text after a video from the block's maximum
  const Case v = half_second_video();
  EXPECT_EQ(axis_row(v.run(Compat::hf_5_2), 0), axis_row(v.run(Compat::hf_4_52), 0));
}

TEST(Hf52, QwenTwoVlClampsItsDeltaAtZero) {
  Case c = left_padded();
  VisionConfig vision;
  vision.compat = Compat::hf_5_2;
  vision.time = TimeMode::index;  // Qwen2-VL
  const RopeIndexInput in{c.ids, c.batch, c.seq, c.mask, c.images, c.videos, c.seconds};
  EXPECT_EQ(rope_index(in, vision, {Scheme::mrope, {}}).rope_deltas[0], 0.0f);  // max(-2, 0)
  vision.time = TimeMode::seconds;  // Qwen2.5-VL does not
  EXPECT_EQ(rope_index(in, vision, {Scheme::mrope, {}}).rope_deltas[0], -2.0f);
}

// ------------------------------------------------------------- 5.3-5.5.4 ---

// text, <start>, a video of 2 frames of 2 x 1 merged cells (grid 2x4x2), text; second 1.0.
Case two_frame_video(std::vector<double> seconds = {1.0}) {
  Case c;
  c.ids = {kText, kStart, kVideo, kVideo, kVideo, kVideo, kText};
  c.seq = 7;
  c.videos = {{2, 4, 2}};
  c.seconds = std::move(seconds);
  return c;
}

TEST(Hf53To553, MropeBlocksAreFlatInTimeAndRowsRunAcrossFrames) {
  const Case c = two_frame_video({1.5});
  const Positions p = c.run(Compat::hf_5_3_to_5_5_3);
  // anchor 2, interval tps * trunc(1.5) = 2: temporal 4 for every token of the video
  EXPECT_EQ(axis_row(p, 0), (std::vector<float>{0, 1, 4, 4, 4, 4, 4}));
  // heights 2 + (f * hm + r) / t for (f, r) = (0, 0), (0, 1), (1, 0), (1, 1): 2, 2, 3, 3
  EXPECT_EQ(axis_row(p, 1), (std::vector<float>{0, 1, 2, 2, 3, 3, 4}));
  EXPECT_EQ(axis_row(p, 2), (std::vector<float>{0, 1, 2, 2, 2, 2, 4}));
  EXPECT_EQ(p.rope_deltas[0], 4 + 1 - 7);
  // the fixed rule of 5.6: tau = 0, 2; rows in raster order; text after at 2 + max(2, 1)
  const Positions fixed = c.run(Compat::hf_5_6);
  EXPECT_EQ(axis_row(fixed, 0), (std::vector<float>{0, 1, 2, 2, 4, 4, 4}));
  EXPECT_EQ(axis_row(fixed, 1), (std::vector<float>{0, 1, 2, 3, 2, 3, 4}));
  // 5.5.4 places this video as 5.3-5.5.3 does
  EXPECT_EQ(c.run(Compat::hf_5_5_4).position_ids, p.position_ids);
  // other schemes place blocks as hf-5.6 does
  EXPECT_EQ(c.run(Compat::hf_5_3_to_5_5_3, Scheme::circle).position_ids, c.run(Compat::hf_5_6, Scheme::circle).position_ids);
}

TEST(Hf53To553, ImagesTakeSecondsEntriesUntilTheyRunOut) {
  // an image, then a video: under 5.3-5.5.3 the image takes second_per_grid_ts[0]
  Case c;
  c.ids = {kStart, kImage, kText, kStart, kVideo, kText};
  c.seq = 6;
  c.images = {{1, 2, 2}};
  c.videos = {{1, 2, 2}};
  c.seconds = {3.0};
  EXPECT_THROW(c.run(Compat::hf_5_3_to_5_5_3), Error);  // transformers: StopIteration
  c.seconds.clear();  // without seconds every block takes a 1: interval tps = 2
  const Positions p = c.run(Compat::hf_5_3_to_5_5_3);
  // start 0; image at 1, temporal 1 * 2; text at 1 + 1 = 2; start 3; video at 4, temporal 8
  EXPECT_EQ(axis_row(p, 0), (std::vector<float>{0, 2, 2, 3, 8, 5}));
  EXPECT_EQ(axis_row(p, 1), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  // 5.5.4: an image has no interval, the video its own entry
  c.seconds = {3.0};
  const Positions q = c.run(Compat::hf_5_5_4);
  EXPECT_EQ(axis_row(q, 0), (std::vector<float>{0, 1, 2, 3, 4 * 6, 5}));
  // without seconds there are seq_len ones, shared by the batch: 3 rows of 2 tokens hold 3
  // images but only 2 entries
  Case many;
  many.batch = 2;
  many.seq = 2;
  many.ids = {kStart, kImage, kStart, kImage};
  many.images = {{1, 2, 2}, {1, 2, 2}};
  EXPECT_NO_THROW(many.run(Compat::hf_5_3_to_5_5_3));  // 2 blocks, 2 entries
  many.batch = 3;
  many.ids = {kStart, kImage, kStart, kImage, kStart, kImage};
  many.images.push_back({1, 2, 2});
  EXPECT_THROW(many.run(Compat::hf_5_3_to_5_5_3), Error);
  EXPECT_NO_THROW(many.run(Compat::hf_5_5_4));  // images take no entry there
}

TEST(Hf53To553, QwenTwoVlHasNoInterval) {
  Case c = two_frame_video({});
  VisionConfig vision;
  vision.compat = Compat::hf_5_3_to_5_5_3;
  vision.time = TimeMode::index;
  const RopeIndexInput in{c.ids, c.batch, c.seq, c.mask, c.images, c.videos, c.seconds};
  const Positions p = rope_index(in, vision, {Scheme::mrope, {}});
  EXPECT_EQ(axis_row(p, 0), (std::vector<float>{0, 1, 2, 2, 2, 2, 4}));
}

TEST(Hf53To553, LayoutsFollowRuleBToo) {
  VisionConfig vision;
  vision.compat = Compat::hf_5_3_to_5_5_3;
  const Positions p = layout_positions(parse_layout("text:1,image:1x1,video:2x2x1@1.5,text:1"), vision,
                                       {Scheme::mrope, {}});
  // image at 1: temporal 1 * tps (an image takes a 1); the video right after it at 1 + 1 = 2,
  // temporal 2 * tps * trunc(1.5) for both frames; the text at 2 + max(2, 1)
  EXPECT_EQ(axis_row(p, 0), (std::vector<float>{0, 2, 2 * 2, 2 * 2, 2 * 2, 2 * 2, 4}));
}

// ----------------------------------------------------------------- 5.18 ---

TEST(Hf518, FrameTimesMultiplyTokensPerSecondBySecondsFirst) {
  // seconds 0.7 (float32 0.699999988), tokens_per_second 25, frame 6: 4.49 computes
  // (6 * 0.7) * 25 = 104.99999 -> 104, 5.18 6 * (25 * 0.7) = 6 * 17.5 = 105, 5.6 6 * 0 * 25 = 0
  Case c;
  c.ids = {kStart};
  for (int i = 0; i < 7; ++i) c.ids.push_back(kVideo);
  c.seq = 8;
  c.videos = {{7, 2, 2}};
  c.seconds = {static_cast<double>(0.7f)};
  VisionConfig vision;
  vision.tokens_per_second = 25;
  const RopeIndexInput in{c.ids, c.batch, c.seq, c.mask, c.images, c.videos, c.seconds};
  auto last_frame = [&](Compat mode) {
    vision.compat = mode;
    return rope_index(in, vision, {Scheme::mrope, {}}).at(0, 0, 7) - 1.0f;  // minus the anchor
  };
  EXPECT_EQ(last_frame(Compat::hf_4_49), 104.0f);
  EXPECT_EQ(last_frame(Compat::hf_5_18), 105.0f);
  EXPECT_EQ(last_frame(Compat::hf_5_6), 0.0f);
}

// ---- int64 positions past 2^24 (hf-* modes) ------------------------------------------------

// transformers keeps M-RoPE positions in int64 (st_idx = max + 1, text at st_idx + k, deltas
// max + 1 - S); the hf-* modes rounded the running position to float32 after every chunk,
// so past 2^24 (an extreme second_per_grid_ts gets there) text tokens shared positions where
// transformers counts on, and the deltas were off by up to 32. Oracle: the int64 rule of
// transformers 4.51.3 / 4.52.4 (read from their get_rope_index), each value rounded once.
struct Int64Oracle {
  std::vector<int64_t> t, h, w;
  int64_t max = 0;
};

// One row: `before` text tokens, a video of `frames` x hm x wm with `seconds` per grid, `after`
// text tokens; tokens_per_second 2.
Int64Oracle transformers_int64(Compat compat, int64_t before, int64_t frames, int64_t hm, int64_t wm, double seconds,
                               int64_t after) {
  Int64Oracle o;
  auto text = [&](int64_t n, int64_t from) {
    for (int64_t k = 0; k < n; ++k) {
      o.t.push_back(from + k);
      o.h.push_back(from + k);
      o.w.push_back(from + k);
    }
  };
  text(before, 0);
  const int64_t c = before;
  int64_t block_max = c;
  for (int64_t f = 0; f < frames; ++f) {
    // 4.49-4.51: (arange * second_per_grid_t[float32]) * tokens_per_second, float32, .long();
    // 4.52-5.1: the seconds cast to int64 first, integer products
    const int64_t tau = compat == Compat::hf_4_49
                            ? static_cast<int64_t>(static_cast<float>(f) * static_cast<float>(seconds) * 2.0f)
                            : f * static_cast<int64_t>(seconds) * 2;
    for (int64_t r = 0; r < hm; ++r)
      for (int64_t q = 0; q < wm; ++q) {
        o.t.push_back(c + tau);
        o.h.push_back(c + r);
        o.w.push_back(c + q);
        block_max = std::max({block_max, c + tau, c + r, c + q});
      }
  }
  text(after, block_max + 1);
  o.max = after > 0 ? block_max + after : block_max;
  return o;
}

TEST(HfCompat, Int64PositionsPast2To24AreExactThenRoundedOnce) {
  std::mt19937_64 rng(0x2E24);
  int cases = 0;
  for (Compat compat : {Compat::hf_4_49, Compat::hf_4_52})
    for (int round = 0; round < 40; ++round) {
      const int64_t before = static_cast<int64_t>(rng() % 5), frames = 2 + static_cast<int64_t>(rng() % 3),
                    hm = 1 + static_cast<int64_t>(rng() % 3), wm = 1 + static_cast<int64_t>(rng() % 3),
                    after = 1 + static_cast<int64_t>(rng() % 60);
      // seconds from 2^23 (positions just past 2^24) to 2^28, integral or not
      const double seconds = std::ldexp(1.0 + static_cast<double>(rng() % 1000) / 1000.0, 23 + static_cast<int>(rng() % 5)) +
                             (rng() % 2 ? 0.5 : 0.0);
      const std::string layout = (before ? "text:" + std::to_string(before) + "," : std::string()) + "video:" +
                                 std::to_string(frames) + "x" + std::to_string(hm) + "x" + std::to_string(wm) + "@" +
                                 std::to_string(seconds) + ",text:" + std::to_string(after);
      VisionConfig vision;
      vision.compat = compat;
      const Positions p = layout_positions(parse_layout(layout), vision, Geometry{Scheme::mrope, {}});
      const Int64Oracle want =
          transformers_int64(compat, before, frames, hm, wm, std::stod(std::to_string(seconds)), after);
      ASSERT_EQ(static_cast<size_t>(p.seq_len), want.t.size()) << layout;
      for (int64_t s = 0; s < p.seq_len; ++s) {
        ASSERT_EQ(p.at(0, 0, s), static_cast<float>(want.t[static_cast<size_t>(s)])) << to_string(compat) << " " << layout << " token " << s;
        ASSERT_EQ(p.at(1, 0, s), static_cast<float>(want.h[static_cast<size_t>(s)])) << to_string(compat) << " " << layout << " token " << s;
        ASSERT_EQ(p.at(2, 0, s), static_cast<float>(want.w[static_cast<size_t>(s)])) << to_string(compat) << " " << layout << " token " << s;
      }
      ASSERT_EQ(p.rope_deltas[0], static_cast<float>(want.max + 1 - p.seq_len)) << to_string(compat) << " " << layout;
      ++cases;
    }
  EXPECT_EQ(cases, 80);
}

}  // namespace
