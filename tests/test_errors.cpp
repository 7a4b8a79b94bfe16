// Every error of docs/spec.md §1 ("Errors, never crashes or silent garbage") and of the
// configuration types: a circlerope::Error (std::invalid_argument) whose one-line
// message names what was wrong, the offending value and where.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "circlerope/age.h"
#include "circlerope/circle.h"
#include "circlerope/positions.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

static_assert(std::is_base_of_v<std::invalid_argument, Error>, "Error is the documented std::invalid_argument");


std::string rope_error(const Batch& b, const VisionConfig& v = {}, const Geometry& g = {Scheme::mrope, {}}) {
  return error_of([&] { rope_index(b.input(), v, g); });
}

// -------------------------------------------------------------- grids ---

TEST(Errors, GridSideNotDivisibleByMergeSize) {
  Batch b = one_row(cat({{1}, block(kImg, 4), {2}, block(kImg, 4)}));
  b.images = {{1, 4, 4}, {1, 5, 4}};  // second image: h = 5
  EXPECT_THAT(rope_error(b), AllOf(HasSubstr("h=5 is not divisible by spatial_merge_size=2"),
                                   HasSubstr("image_grid_thw[1]"), HasSubstr("row 0")));
  b.images = {{1, 4, 4}, {1, 4, 7}};
  EXPECT_THAT(rope_error(b), AllOf(HasSubstr("w=7 is not divisible by spatial_merge_size=2"),
                                   HasSubstr("image_grid_thw[1]")));
  // a video in the second row, merge size 3
  Batch v;
  v.batch = 2;
  v.seq = 6;
  v.ids = cat({{1, 2}, block(kImg, 2), block(kVid, 4)});
  v.images = {{1, 3, 6}};
  v.videos = {{1, 6, 8}};
  VisionConfig m3;
  m3.spatial_merge_size = 3;
  EXPECT_THAT(rope_error(v, m3), AllOf(HasSubstr("w=8 is not divisible by spatial_merge_size=3"),
                                       HasSubstr("video_grid_thw[0]"), HasSubstr("row 1")));
}

TEST(Errors, GridWithZeroOrNegativeSide) {
  for (const GridTHW g : {GridTHW{1, 0, 4}, GridTHW{1, 4, 0}, GridTHW{0, 4, 4}, GridTHW{1, -2, 4},
                          GridTHW{-1, 4, 4}, GridTHW{1, 4, -4}}) {
    Batch b = one_row(cat({{1}, block(kImg, 4)}));
    b.images = {g};
    const std::string m = rope_error(b);
    EXPECT_THAT(m, AllOf(HasSubstr(">= 1"), HasSubstr("image_grid_thw[0]"),
                         HasSubstr("[" + std::to_string(g.t) + ", " + std::to_string(g.h) + ", " +
                                   std::to_string(g.w) + "]")));
    Batch v = one_row(cat({{1}, block(kVid, 4)}));
    v.videos = {g};
    EXPECT_THAT(rope_error(v), AllOf(HasSubstr(">= 1"), HasSubstr("video_grid_thw[0]")));
  }
}

TEST(Errors, GridTooLargeForTheRowOrForInt64) {
  // t * (h/m) * (w/m) overflows int64, or simply exceeds the row: an Error
  // naming the grid, never a wrapped count.
  for (const GridTHW g : {GridTHW{1, int64_t{1} << 40, int64_t{1} << 40},
                          GridTHW{int64_t{1} << 62, 4, 4}, GridTHW{1, 200, 200}}) {
    Batch b = one_row(cat({{1}, block(kImg, 4)}));
    b.images = {g};
    EXPECT_THAT(rope_error(b), HasSubstr("image_grid_thw[0]"));
    Batch v = one_row(cat({{1}, block(kVid, 4)}));
    v.videos = {g};
    EXPECT_THAT(rope_error(v), HasSubstr("video_grid_thw[0]"));
  }
}

TEST(Errors, MoreBlocksThanGrids) {
  Batch b = one_row(cat({block(kImg, 4), block(kImg, 1)}));
  b.images = {{1, 4, 4}};
  EXPECT_THAT(rope_error(b), AllOf(HasSubstr("image_grid_thw has only 1 entry"), HasSubstr("row 0")));
  // a video block with only image grids given
  Batch v = one_row(cat({block(kImg, 4), block(kVid, 1)}));
  v.images = {{1, 4, 4}};
  EXPECT_THAT(rope_error(v), HasSubstr("video_grid_thw has only 0 entries"));
  // grids run out in a later row
  Batch r;
  r.batch = 2;
  r.seq = 4;
  r.ids = cat({block(kImg, 1), {9}, block(kImg, 1), {9}});
  r.images = {{1, 2, 2}};
  EXPECT_THAT(rope_error(r), AllOf(HasSubstr("row 1"), HasSubstr("only 1 entry")));
}

TEST(Errors, FewerBlocksThanGrids) {
  Batch b = one_row(cat({{3}, block(kImg, 4)}));
  b.images = {{1, 4, 4}, {1, 2, 2}};
  EXPECT_THAT(rope_error(b), HasSubstr("image_grid_thw has 2 entries but input_ids hold 1 image block"));
  Batch v = one_row({1, 2, 3});
  v.videos = {{2, 2, 2}};
  EXPECT_THAT(rope_error(v), HasSubstr("video_grid_thw has 1 entry but input_ids hold 0 video blocks"));
  // a block hidden by the mask does not count
  Batch m = one_row(cat({{3}, block(kImg, 1)}));
  m.images = {{1, 2, 2}};
  m.mask = {1, 0, 0, 0};
  EXPECT_THAT(rope_error(m), HasSubstr("image_grid_thw has 1 entry but input_ids hold 0 image blocks"));
}

TEST(Errors, TooFewOrTooManyTokensAfterAVisionStart) {
  Batch few = one_row(cat({{1, 2}, block(kImg, 3)}));
  few.images = {{1, 4, 4}};
  EXPECT_THAT(rope_error(few), AllOf(HasSubstr("needs 4 image tokens"), HasSubstr("but 3 follow"),
                                     HasSubstr("row 0, position 2"), HasSubstr("too few")));
  Batch many = one_row(cat({{1, 2}, block(kImg, 5)}));
  many.images = {{1, 4, 4}};
  EXPECT_THAT(rope_error(many), AllOf(HasSubstr("needs 4 image tokens"), HasSubstr("but 5 follow")));
  // the row ends before the run is complete
  Batch end = one_row({1, kStart, kVid, kVid});
  end.videos = {{2, 2, 4}};
  EXPECT_THAT(rope_error(end), AllOf(HasSubstr("needs 4 video tokens"), HasSubstr("but 2 follow")));
  // the position reported is the one in the padded row
  Batch pad = one_row(cat({{0, 0}, block(kImg, 3)}));
  pad.mask = {0, 0, 1, 1, 1, 1, 1};
  pad.images = {{1, 4, 4}};
  EXPECT_THAT(rope_error(pad), HasSubstr("position 2"));
}

TEST(Errors, StrayVisionToken) {
  EXPECT_THAT(rope_error(one_row({1, kImg, 2})),
              AllOf(HasSubstr("outside a vision block"), HasSubstr("row 0, position 1"),
                    HasSubstr(std::to_string(kImg))));
  EXPECT_THAT(rope_error(one_row({1, 2, kVid})), AllOf(HasSubstr("video token"), HasSubstr("position 2")));
  // an image block followed directly by a video token (no start of its own)
  Batch b = one_row({kStart, kImg, kVid});
  b.images = {{1, 2, 2}};
  EXPECT_THAT(rope_error(b), AllOf(HasSubstr("video token"), HasSubstr("outside a vision block")));
  // a vision start separated from its run by text
  Batch c = one_row({kStart, 5, kImg});
  c.images = {{1, 2, 2}};
  EXPECT_THAT(rope_error(c), HasSubstr("outside a vision block"));
}

// --------------------------------------------------- input arrays ---

TEST(Errors, SecondPerGridTsShorterOrLongerThanTheVideos) {
  Batch b = one_row(cat({block(kVid, 1), block(kVid, 1)}));
  b.videos = {{1, 2, 2}, {1, 2, 2}};
  b.seconds = {1.0};
  EXPECT_THAT(rope_error(b), HasSubstr("second_per_grid_ts has 1 entries but video_grid_thw has 2"));
  b.seconds = {1.0, 1.0, 1.0};
  EXPECT_THAT(rope_error(b), HasSubstr("second_per_grid_ts has 3 entries but video_grid_thw has 2"));
  for (double bad : {-0.5, kNaN, kInf, -kInf}) {
    b.seconds = {1.0, bad};
    EXPECT_THAT(rope_error(b), AllOf(HasSubstr("second_per_grid_ts[1]"), HasSubstr("finite and >= 0")))
        << bad;
  }
}

TEST(Errors, InputIdsAndMaskShapes) {
  Batch b;
  b.batch = 2;
  b.seq = 3;
  b.ids = {1, 2, 3, 4, 5};
  EXPECT_THAT(rope_error(b), AllOf(HasSubstr("input_ids has 5 values"), HasSubstr("2 x 3 = 6")));
  b.ids = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_THAT(rope_error(b), HasSubstr("input_ids has 7 values"));
  b.ids = {1, 2, 3, 4, 5, 6};
  b.mask = {1, 1, 1, 1, 1};
  EXPECT_THAT(rope_error(b), HasSubstr("attention_mask has 5 values but input_ids has 6"));
  b.mask = {1, 1, 1, 1, 1, 1, 1};
  EXPECT_THAT(rope_error(b), HasSubstr("attention_mask has 7 values"));
  b.mask = {1, 1, 1, 1, 1, 1};
  b.mask[5] = 2;
  EXPECT_THAT(rope_error(b), AllOf(HasSubstr("attention_mask[1][2] = 2"), HasSubstr("0 or 1")));
  b.mask[5] = -1;
  EXPECT_THAT(rope_error(b), HasSubstr("attention_mask[1][2] = -1"));
  Batch neg;
  neg.batch = -1;
  neg.seq = 3;
  EXPECT_THAT(rope_error(neg), HasSubstr("-1"));
  Batch huge;  // batch x seq_len overflows int64
  huge.batch = int64_t{1} << 40;
  huge.seq = int64_t{1} << 40;
  EXPECT_THAT(rope_error(huge), HasSubstr("is more than 16777216 tokens"));
}

// -------------------------------------------------------------- configs ---

TEST(Errors, CircleConfigValuesOutOfRange) {
  auto circle_error = [](const CircleConfig& c) {
    const std::string direct = error_of([&] { validate(c); });
    // rope_index under circle validates the same way, even without any block
    const Batch b = one_row({1, 2});
    const std::string via = error_of([&] { rope_index(b.input(), VisionConfig{}, {Scheme::circle, c}); });
    EXPECT_EQ(direct, via);
    return direct;
  };
  for (double r : {0.0, -1.0, kNaN, kInf, -kInf}) {
    CircleConfig c;
    c.radius = r;
    EXPECT_THAT(circle_error(c), HasSubstr("radius")) << r;
  }
  CircleConfig minus;
  minus.radius = -1;
  EXPECT_THAT(circle_error(minus), HasSubstr("-1"));
  CircleConfig nan_radius;
  nan_radius.radius = kNaN;
  EXPECT_THAT(circle_error(nan_radius), HasSubstr("nan"));
  for (double k : {0.0, -2.5, kNaN, kInf}) {
    CircleConfig c;
    c.radius_mode = RadiusMode::automatic;
    c.radius_scale = k;
    EXPECT_THAT(circle_error(c), AllOf(HasSubstr("scale"), HasSubstr("auto-k"))) << k;
  }
  for (double a : {-0.1, 1.1, kNaN, kInf}) {
    CircleConfig c;
    c.alpha = a;
    EXPECT_THAT(circle_error(c), AllOf(HasSubstr("alpha"), HasSubstr("[0, 1]"))) << a;
  }
  CircleConfig alpha;
  alpha.alpha = 1.1;
  EXPECT_THAT(circle_error(alpha), HasSubstr("1.1"));
  alpha.alpha = -0.1;
  EXPECT_THAT(circle_error(alpha), HasSubstr("-0.1"));
  for (double d : {-0.01, 1.5, kNaN, -kInf}) {
    CircleConfig c;
    c.dff_rate = d;
    EXPECT_THAT(circle_error(c), HasSubstr("dff_rate")) << d;
  }
  for (double o : {kInf, -kInf, kNaN}) {
    CircleConfig c;
    c.move_to_positive = PositiveShift::offset;
    c.positive_offset = o;
    EXPECT_THAT(circle_error(c), AllOf(HasSubstr("move_to_positive"), HasSubstr("finite"))) << o;
  }
  // Boundaries are valid.
  CircleConfig edge;
  edge.alpha = 0;
  edge.dff_rate = 1;
  EXPECT_NO_THROW(validate(edge));
  edge.alpha = 1;
  edge.dff_rate = 0;
  edge.radius = 1e-9;
  EXPECT_NO_THROW(validate(edge));
  // ... and so is an unused field (fixed radius: the scale is not read).
  edge.radius_scale = kNaN;
  EXPECT_NO_THROW(validate(edge));
  // Other schemes do not read the circle config.
  CircleConfig ignored;
  ignored.radius = -1;
  const Batch b = one_row({1, 2});
  EXPECT_NO_THROW(rope_index(b.input(), VisionConfig{}, {Scheme::mrope, ignored}));
}

TEST(Errors, VisionConfigValuesOutOfRange) {
  const Batch b = one_row({1, 2, 3});
  for (int64_t m : {0, -2}) {
    VisionConfig v;
    v.spatial_merge_size = m;
    EXPECT_THAT(rope_error(b, v), AllOf(HasSubstr("spatial_merge_size"), HasSubstr(std::to_string(m))));
  }
  for (double tps : {0.0, -2.0, kNaN, kInf}) {
    VisionConfig v;
    v.tokens_per_second = tps;
    EXPECT_THAT(rope_error(b, v), HasSubstr("tokens_per_second")) << tps;
  }
  VisionConfig same;
  same.image_token_id = same.video_token_id;
  EXPECT_THAT(rope_error(b, same), AllOf(HasSubstr("must be distinct"), HasSubstr(std::to_string(kVid))));
  VisionConfig start;
  start.vision_start_token_id = start.image_token_id;
  EXPECT_THAT(rope_error(b, start), HasSubstr("must be distinct"));
  VisionConfig start_video;
  start_video.vision_start_token_id = start_video.video_token_id;
  EXPECT_THAT(rope_error(b, start_video), HasSubstr("must be distinct"));
  // layout_positions validates the vision config too
  VisionConfig zero;
  zero.tokens_per_second = 0;
  EXPECT_THAT(error_of([&] { layout_positions(parse_layout("text:2"), zero, {}); }),
              HasSubstr("tokens_per_second"));
}

TEST(Errors, NamesOfSchemesAndLayouts) {
  EXPECT_THAT(error_of([] { parse_scheme("circel"); }), AllOf(HasSubstr("circel"), HasSubstr("scheme")));
  EXPECT_THAT(error_of([] { parse_scheme(""); }), HasSubstr("scheme"));
  for (Scheme s : kAllSchemes) EXPECT_EQ(parse_scheme(to_string(s)), s);
}

TEST(Errors, DecodeArguments) {
  const std::vector<float> d = {0.0f};
  EXPECT_THAT(error_of([&] { decode_positions(d, -1, 1); }), HasSubstr("-1"));
  EXPECT_THAT(error_of([&] { decode_positions(d, 0, -5); }), HasSubstr("-5"));
  // NaN or infinite deltas are refused, not turned into NaN / inf positions.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    const std::vector<float> deltas = {1.5f, bad};
    EXPECT_THAT(error_of([&] { decode_positions(deltas, 10, 3); }), HasSubstr("rope_deltas[1] = ")) << bad;
    EXPECT_THAT(error_of([&] { decode_positions(deltas, 10, 3); }), HasSubstr("is not finite"));
  }
  const std::vector<float> huge = {std::numeric_limits<float>::max()};
  for (float v : decode_positions(huge, (int64_t{1} << 31) - 1, 1)) EXPECT_TRUE(std::isfinite(v));
}

TEST(Errors, LayoutSegmentsBuiltByHand) {
  auto seg_error = [](std::vector<Segment> s) {
    return error_of([&] { layout_positions(s, VisionConfig{}, {Scheme::mrope, {}}); });
  };
  EXPECT_THAT(seg_error({{Segment::Kind::text, 0}}), HasSubstr("segment 0"));
  EXPECT_THAT(seg_error({{Segment::Kind::text, 2}, {Segment::Kind::image, 0, 1, 0, 3}}),
              AllOf(HasSubstr("segment 1"), HasSubstr("1x0x3")));
  EXPECT_THAT(seg_error({{Segment::Kind::image, 0, 2, 3, 3}}), HasSubstr("t = 1"));  // image with 2 frames
  EXPECT_THAT(seg_error({{Segment::Kind::video, 0, 2, 3, 3, -1.0}}), HasSubstr("seconds"));
  EXPECT_THAT(seg_error({{Segment::Kind::video, 0, 2, 3, 3, kNaN}}), HasSubstr("seconds"));
  EXPECT_THAT(seg_error({{Segment::Kind::video, 0, 0, 3, 3, 1.0}}), HasSubstr("segment 0"));
}

// ------------------------------------------------ nothing half-done ---

TEST(Errors, AnErrorLeavesNoStateBehind) {
  // A failed call returns nothing (it throws) and does not disturb the next one.
  Batch bad = one_row(cat({{1}, block(kImg, 3)}));
  bad.images = {{1, 4, 4}};
  Batch good = one_row(cat({{1}, block(kImg, 4)}));
  good.images = {{1, 4, 4}};
  const Positions before = rope_index(good.input(), VisionConfig{}, {});
  for (Scheme s : kAllSchemes) EXPECT_THROW(rope_index(bad.input(), VisionConfig{}, {s, {}}), Error);
  const Positions after = rope_index(good.input(), VisionConfig{}, {});
  EXPECT_EQ(before.position_ids, after.position_ids);
  EXPECT_EQ(before.rope_deltas, after.rope_deltas);
  // Errors detected after the last row (unused grids) still throw: no result.
  Batch extra = good;
  extra.images.push_back({1, 2, 2});
  EXPECT_THROW(rope_index(extra.input(), VisionConfig{}, {}), Error);
}

// rope_index_into writes nothing when it fails, like rotate: not the rows before the one that
// failed, nor every row when unused grids are found at the end.
TEST(Errors, RopeIndexIntoWritesNothingWhenItFails) {
  Batch ok_then_bad;  // row 0 is fine, row 1 fails
  ok_then_bad.batch = 2;
  ok_then_bad.seq = 7;
  ok_then_bad.ids = cat({{1}, block(kImg, 4), {2}, {3, 4}, block(kImg, 3), {5}});
  ok_then_bad.images = {{1, 4, 4}, {1, 4, 4}};  // row 1's run holds 3 tokens, not 4
  Batch extra_grid = one_row(cat({{1}, block(kImg, 4)}));
  extra_grid.images = {{1, 4, 4}, {1, 2, 2}};  // found only after the last row
  Batch bad_mask = ok_then_bad;
  bad_mask.ids = cat({{1}, block(kImg, 4), {2}, {3}, block(kImg, 4)});
  bad_mask.mask.assign(14, 1);
  bad_mask.mask[13] = 3;
  Batch far = one_row(cat({{1}, block(kImg, 4)}));
  far.images = {{1, 4, 4}};
  CircleConfig huge;
  huge.radius = 1e39;  // the block leaves float32
  const std::vector<std::pair<const Batch*, Geometry>> cases = {
      {&ok_then_bad, {Scheme::mrope, {}}}, {&extra_grid, {Scheme::mrope, {}}}, {&bad_mask, {Scheme::circle, {}}},
      {&far, {Scheme::circle, huge}}};
  for (const auto& [batch, geometry] : cases) {
    std::vector<float> pos(static_cast<size_t>(3 * batch->batch * batch->seq), -7.0f);
    std::vector<float> deltas(static_cast<size_t>(batch->batch), -7.0f);
    EXPECT_THROW(rope_index_into(batch->input(), VisionConfig{}, geometry, pos, deltas), Error);
    EXPECT_TRUE(std::all_of(pos.begin(), pos.end(), [](float v) { return v == -7.0f; })) << "positions written";
    EXPECT_TRUE(std::all_of(deltas.begin(), deltas.end(), [](float v) { return v == -7.0f; })) << "deltas written";
  }
}

// ----------------------------------------------------------------- fuzz ---

TEST(Errors, RandomGarbageEitherWorksOrThrowsCircleropeError) {
  // Random token soup (stray vision tokens, broken runs), random grids (bad
  // sides, wrong counts), random masks (sometimes with 2s), random seconds:
  // the only acceptable outcomes are an Error or well-formed finite positions.
  std::mt19937 rng(4711);
  std::uniform_int_distribution<int> pick(0, 99);
  const int64_t vocab[] = {kStart, kImg, kVid, kEnd, 1, 2, 3};
  int ok = 0, errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Batch b;
    b.batch = std::uniform_int_distribution<int64_t>(0, 3)(rng);
    b.seq = std::uniform_int_distribution<int64_t>(0, 12)(rng);
    for (int64_t i = 0; i < b.batch * b.seq; ++i)
      b.ids.push_back(vocab[std::uniform_int_distribution<int>(0, 6)(rng)]);
    if (pick(rng) < 50)
      for (int64_t i = 0; i < b.batch * b.seq; ++i) b.mask.push_back(pick(rng) < 2 ? 2 : pick(rng) < 80);
    const int images = std::uniform_int_distribution<int>(0, 3)(rng);
    const int videos = std::uniform_int_distribution<int>(0, 3)(rng);
    auto side = [&] { return std::uniform_int_distribution<int64_t>(-1, 4)(rng); };
    for (int i = 0; i < images; ++i) b.images.push_back(GridTHW{pick(rng) < 90 ? int64_t{1} : side(), side(), side()});
    for (int i = 0; i < videos; ++i) b.videos.push_back(GridTHW{side(), side(), side()});
    if (pick(rng) < 50)
      for (int i = 0; i < videos + (pick(rng) < 10 ? 1 : 0); ++i)
        b.seconds.push_back(pick(rng) < 5 ? -1.0 : pick(rng) / 10.0);
    VisionConfig v;
    v.spatial_merge_size = std::uniform_int_distribution<int64_t>(1, 2)(rng);
    Geometry g;
    g.scheme = kAllSchemes[static_cast<size_t>(pick(rng) % 4)];
    g.circle.radius_mode = pick(rng) < 50 ? RadiusMode::fixed : RadiusMode::automatic;
    try {
      const Positions p = rope_index(b.input(), v, g);
      ++ok;
      ASSERT_EQ(p.position_ids.size(), static_cast<size_t>(3 * b.batch * b.seq));
      ASSERT_EQ(p.rope_deltas.size(), static_cast<size_t>(b.batch));
      for (float x : p.position_ids) ASSERT_TRUE(std::isfinite(x));
      for (float x : p.rope_deltas) ASSERT_TRUE(std::isfinite(x));
    } catch (const Error& e) {
      ++errors;
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    } catch (const std::exception& e) {
      FAIL() << "trial " << trial << ": non-circlerope exception " << e.what();
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(ok, 30);  // most soups are invalid; a few dozen valid ones still come up
  EXPECT_GT(errors, 100);
}

// ---------------------------------- values the float32 output cannot hold ---

TEST(Errors, SecondsPerGridTooLargeForAFrameTime) {
  // Regression: tau(f) = trunc(float32(f * s) * tps) is cast to int64 without a range
  // check. s = 1e30 (finite, >= 0, so accepted) gives tau(1) = 2e30, which no
  // int64 holds: the cast is undefined behaviour and on x86-64 yields
  // INT64_MIN, so the frames land at position -9.22e18 and rope_delta comes out
  // as -2 (observed: positions 0 1 -9.22337e+18 -9.22337e+18, delta -2).
  // docs/spec.md §1: "Errors, never crashes or silent garbage".
  Batch b = one_row({kStart, kVid, kVid, kVid});
  b.videos = {{3, 2, 2}};
  b.seconds = {1e30};
  EXPECT_THAT(rope_error(b), HasSubstr("second_per_grid_ts"));
}

TEST(Errors, TokensPerSecondTooLargeForFloat32) {
  // Regression: tokens_per_second = 1e300 is finite in double and accepted, but it is
  // read in float32 where it is +inf: tau(0) = trunc(0 * inf) = trunc(NaN) and
  // tau(1) = trunc(inf), both undefined casts (INT64_MIN on x86-64). Observed
  // positions 0 -9.22337e+18 -9.22337e+18 -9.22337e+18, delta -2.
  Batch b = one_row({kStart, kVid, kVid, kVid});
  b.videos = {{3, 2, 2}};
  VisionConfig v;
  v.tokens_per_second = 1e300;
  EXPECT_THAT(rope_error(b, v), HasSubstr("tokens_per_second"));
}

TEST(Errors, RadiusTooLargeForFloat32Positions) {
  // Regression (was accepted): radius 1e300 is "finite and > 0", but every
  // ring coordinate overflows float32 (positions came out as +-inf). The block
  // whose positions leave float32 is now named in an error.
  CircleConfig c;
  c.radius = 1e300;
  Batch b = one_row({kStart, kImg, kImg, kImg, kImg, 5});
  b.images = {{1, 4, 4}};
  EXPECT_THAT(error_of([&] { rope_index(b.input(), VisionConfig{}, {Scheme::circle, c}); }),
              AllOf(HasSubstr("image 0 of row 0"), HasSubstr("beyond float32")));
}

TEST(Errors, RingThatOverflowsDoubleIsRefusedNotNaN) {
  // Regression (fuzz finding F4, tests/fuzz/regressions/request/f4_nan_ring.json): with a
  // radius near DBL_MAX the ring point a/sqrt2 + b/sqrt6 overflows to +-inf, dff_rate 1 makes
  // (1 - beta) * inf = NaN, and the float32 range check (max/min over the block, which pass
  // over NaN) let NaN positions through with success.
  CircleConfig c;
  c.radius = 1.5e308;
  c.dff_rate = 1.0;
  c.move_to_origin = false;
  Batch b = one_row({1, kStart, kImg, kImg});
  b.images = {{1, 2, 4}};
  EXPECT_THAT(error_of([&] { rope_index(b.input(), VisionConfig{}, {Scheme::circle, c}); }),
              AllOf(HasSubstr("not finite"), HasSubstr("radius 1.5e+308")));
  EXPECT_THAT(error_of([&] { circle_ring(1, 2, c); }), HasSubstr("not finite"));
  // Below the overflow the same setting is fine: dff_rate 1 is the un-ringed grid.
  c.radius = 1e300;
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::circle, c});
  for (float v : p.position_ids) EXPECT_TRUE(std::isfinite(v));
}


TEST(ErrorsDeathTest, LayoutTokenCountOverflow) {
  // Regression: layout_positions adds segment sizes in int64 without an overflow check
  // (signed overflow: UB, and an abort under -fsanitize=undefined); without
  // the sanitizer the sum wraps negative, passes the 2^31 limit and the
  // resize throws std::length_error instead of circlerope::Error.
  EXPECT_ERROR_IN_CHILD(layout_positions(parse_layout("text:9223372036854775807,text:9223372036854775807"),
                                         VisionConfig{}, {Scheme::mrope, {}}));
  EXPECT_ERROR_IN_CHILD(layout_positions(
      parse_layout("image:3037000499x3037000499,image:3037000499x3037000499"), VisionConfig{}, {}));
}

TEST(ErrorsDeathTest, DecodeCountOverflow) {
  // Regression: decode_positions sizes its output as 3 * batch * count in int64
  // without a check. count = (2^64 + 2) / 3 = 6148914691236517206 makes
  // 3 * count wrap to 2: a 2-float vector, then count floats are written into
  // it - a heap overflow (crash). The C API reaches it with batch = count = 2^40
  // (segfault in decode_positions, positions.cpp, observed). count = INT64_MAX/2
  // ends in std::length_error instead of circlerope::Error, and
  // first_cache_position + i can overflow too.
  const std::vector<float> d = {0.0f};
  EXPECT_ERROR_IN_CHILD(decode_positions(d, 0, 6148914691236517206));
  EXPECT_ERROR_IN_CHILD(decode_positions(d, 0, std::numeric_limits<int64_t>::max() / 2));
  EXPECT_ERROR_IN_CHILD(decode_positions(d, std::numeric_limits<int64_t>::max(), 2));
}

}  // namespace
