// Multimodal positions (docs/spec.md §1 and 2): text runs, vision blocks, padding, rope
// deltas, decoding, the allocation-free form and the token-free layout form.
//
// Every hand case below was worked out on paper from docs/spec.md §1/2 (the expected
// numbers are literals, never a second call into the library).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "circlerope/circle.h"
#include "circlerope/positions.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::HasSubstr;

using Triple = std::array<double, 3>;
Triple tri(double x) { return {x, x, x}; }

// A random text token: never a vision token; sometimes a lone vision start or
// a vision end, which are text when no vision token follows.
int64_t random_text_token(std::mt19937& rng, bool allow_markers = true) {
  std::uniform_int_distribution<int> pick(0, 9);
  const int k = pick(rng);
  if (allow_markers && k == 0) return kEnd;
  return std::uniform_int_distribution<int64_t>(0, 151000)(rng);
}

void expect_row(const Positions& p, int64_t row, const std::vector<Triple>& want) {
  ASSERT_EQ(p.seq_len, static_cast<int64_t>(want.size()));
  for (int64_t s = 0; s < p.seq_len; ++s)
    for (int a = 0; a < 3; ++a)
      EXPECT_EQ(p.at(a, row, s), static_cast<float>(want[static_cast<size_t>(s)][a]))
          << "row " << row << ", token " << s << ", axis " << a;
}

// Every field of every block, in order of appearance (BlockInfo: row, begin,
// t, hm, wm, is_video, grid_index, anchor).
void expect_blocks(const Positions& p, const std::vector<BlockInfo>& want) {
  ASSERT_EQ(p.blocks.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const BlockInfo &got = p.blocks[k], &w = want[k];
    EXPECT_EQ(got.row, w.row) << "block " << k;
    EXPECT_EQ(got.begin, w.begin) << "block " << k;
    EXPECT_EQ(got.t, w.t) << "block " << k;
    EXPECT_EQ(got.hm, w.hm) << "block " << k;
    EXPECT_EQ(got.wm, w.wm) << "block " << k;
    EXPECT_EQ(got.is_video, w.is_video) << "block " << k;
    EXPECT_EQ(got.grid_index, w.grid_index) << "block " << k;
    EXPECT_EQ(got.anchor, w.anchor) << "block " << k;
  }
}

Geometry random_geometry(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick_scheme(0, 3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Geometry g;
  g.scheme = kAllSchemes[static_cast<size_t>(pick_scheme(rng))];
  g.circle.radius_mode = unit(rng) < 0.5 ? RadiusMode::fixed : RadiusMode::automatic;
  g.circle.radius = 0.5 + 20 * unit(rng);
  g.circle.radius_scale = 0.25 + 3 * unit(rng);
  g.circle.alpha = unit(rng);
  g.circle.move_to_origin = unit(rng) < 0.5;
  g.circle.dff_rate = unit(rng) < 0.3 ? unit(rng) : 0.0;
  const double shift = unit(rng);
  g.circle.move_to_positive = shift < 0.3   ? PositiveShift::automatic
                              : shift < 0.5 ? PositiveShift::offset
                                            : PositiveShift::none;
  g.circle.positive_offset = 5 * unit(rng);
  return g;
}

// A random batch of text and vision blocks with random left/right padding.
// Pads hold vision token ids on purpose: masked tokens must be ignored.
Batch random_batch(std::mt19937& rng, int64_t m, bool with_mask) {
  std::uniform_int_distribution<int64_t> rows(1, 4), blocks(0, 3), text(0, 5), side(1, 4),
      frames(1, 3), pad(0, 4);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Batch b;
  b.batch = rows(rng);
  std::vector<std::vector<int64_t>> real(static_cast<size_t>(b.batch));
  for (auto& row : real) {
    const int64_t n = blocks(rng);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = text(rng); k > 0; --k) row.push_back(random_text_token(rng));
      const bool video = unit(rng) < 0.4;
      GridTHW g{video ? frames(rng) : 1, side(rng) * m, side(rng) * m};
      (video ? b.videos : b.images).push_back(g);
      if (video) b.seconds.push_back(std::round(unit(rng) * 30) / 10);  // 0.0 .. 3.0
      row.push_back(kStart);
      row.insert(row.end(), static_cast<size_t>(g.t * (g.h / m) * (g.w / m)), video ? kVid : kImg);
      if (unit(rng) < 0.7) row.push_back(kEnd);
    }
    for (int64_t k = text(rng); k > 0; --k) row.push_back(random_text_token(rng));
  }
  std::vector<int64_t> left(static_cast<size_t>(b.batch), 0);
  size_t longest = 0;
  for (size_t r = 0; r < real.size(); ++r) {
    if (with_mask) left[r] = pad(rng);
    longest = std::max(longest, real[r].size() + static_cast<size_t>(left[r]));
  }
  b.seq = static_cast<int64_t>(longest) + (with_mask ? pad(rng) : 0);
  if (!with_mask) {  // rows must have equal length without a mask: fill with text
    for (auto& row : real)
      while (static_cast<int64_t>(row.size()) < b.seq) row.push_back(random_text_token(rng));
  }
  for (size_t r = 0; r < real.size(); ++r) {
    std::vector<int64_t> ids(static_cast<size_t>(b.seq), kImg), mask(static_cast<size_t>(b.seq), 0);
    for (size_t i = 0; i < real[r].size(); ++i) {
      ids[static_cast<size_t>(left[r]) + i] = real[r][i];
      mask[static_cast<size_t>(left[r]) + i] = 1;
    }
    b.ids.insert(b.ids.end(), ids.begin(), ids.end());
    if (with_mask) b.mask.insert(b.mask.end(), mask.begin(), mask.end());
  }
  if (b.videos.empty()) b.seconds.clear();
  return b;
}

bool is_real(const Batch& b, int64_t row, int64_t s) {
  return b.mask.empty() || b.mask[static_cast<size_t>(row * b.seq + s)] == 1;
}

// ------------------------------------------------------------ text only ---

TEST(PositionsText, TextOnlyIsZeroToSMinusOneOnEveryAxisUnderEveryScheme) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 40; ++trial) {
    Batch b;
    b.batch = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    b.seq = std::uniform_int_distribution<int64_t>(1, 41)(rng);
    for (int64_t i = 0; i < b.batch * b.seq; ++i) b.ids.push_back(random_text_token(rng));
    // A lone vision start at the very end of a row is text too.
    b.ids.back() = kStart;
    for (const bool with_mask : {false, true}) {
      b.mask.assign(with_mask ? static_cast<size_t>(b.batch * b.seq) : 0, 1);
      for (Scheme s : kAllSchemes) {
        Geometry g = random_geometry(rng);
        g.scheme = s;
        const Positions p = rope_index(b.input(), VisionConfig{}, g);
        ASSERT_EQ(p.position_ids.size(), static_cast<size_t>(3 * b.batch * b.seq));
        for (int64_t r = 0; r < b.batch; ++r) {
          EXPECT_EQ(p.rope_deltas[static_cast<size_t>(r)], 0.0f);
          for (int64_t i = 0; i < b.seq; ++i)
            for (int a = 0; a < 3; ++a)
              ASSERT_EQ(p.at(a, r, i), static_cast<float>(i))
                  << to_string(s) << " row " << r << " token " << i << " axis " << a;
        }
        EXPECT_TRUE(p.blocks.empty());
      }
    }
  }
}

TEST(PositionsText, LeftAndRightPaddingNumberRealTokensAndPutOneOnPads) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 40; ++trial) {
    Batch b;
    b.batch = std::uniform_int_distribution<int64_t>(1, 5)(rng);
    b.seq = std::uniform_int_distribution<int64_t>(1, 30)(rng);
    std::vector<int64_t> real_count;
    for (int64_t r = 0; r < b.batch; ++r) {
      const int64_t n = std::uniform_int_distribution<int64_t>(0, b.seq)(rng);
      const bool left = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
      real_count.push_back(n);
      for (int64_t s = 0; s < b.seq; ++s) {
        const bool real = left ? s >= b.seq - n : s < n;
        b.mask.push_back(real ? 1 : 0);
        // Pads carry vision ids: they must not be read.
        b.ids.push_back(real ? random_text_token(rng) : (s % 2 ? kImg : kStart));
      }
    }
    for (Scheme s : kAllSchemes) {
      const Positions p = rope_index(b.input(), VisionConfig{}, {s, {}});
      for (int64_t r = 0; r < b.batch; ++r) {
        int64_t k = 0;
        for (int64_t i = 0; i < b.seq; ++i) {
          const bool real = b.mask[static_cast<size_t>(r * b.seq + i)] == 1;
          const float want = real ? static_cast<float>(k++) : 1.0f;
          for (int a = 0; a < 3; ++a) ASSERT_EQ(p.at(a, r, i), want) << r << " " << i;
          EXPECT_EQ(p.token_block[static_cast<size_t>(r * b.seq + i)], real ? kTextToken : kMaskedToken);
        }
        // docs/spec.md §1: max + 1 - S; a fully masked row gets -S.
        EXPECT_EQ(p.rope_deltas[static_cast<size_t>(r)],
                  static_cast<float>(real_count[static_cast<size_t>(r)] - b.seq));
      }
    }
  }
}

TEST(PositionsText, EmptyBatchAndEmptyRows) {
  Batch empty;
  const Positions p0 = rope_index(empty.input(), VisionConfig{}, {});
  EXPECT_TRUE(p0.position_ids.empty());
  EXPECT_TRUE(p0.rope_deltas.empty());

  Batch zero_len;
  zero_len.batch = 3;
  const Positions p1 = rope_index(zero_len.input(), VisionConfig{}, {Scheme::mrope, {}});
  EXPECT_TRUE(p1.position_ids.empty());
  EXPECT_THAT(p1.rope_deltas, ::testing::ElementsAre(0.0f, 0.0f, 0.0f));
}

// -------------------------------------------------------- M-RoPE by hand ---

TEST(PositionsMrope, SeveralImagesInOneRow) {
  // T T S [2x2] E T S [1x2] E T T S [2x3] E      (merge 2)
  Batch b = one_row({7, 8, kStart, kImg, kImg, kImg, kImg, kEnd, 9, kStart, kImg, kImg, kEnd, 10, 11,
                     kStart, kImg, kImg, kImg, kImg, kImg, kImg, kEnd});
  b.images = {{1, 4, 4}, {1, 2, 4}, {1, 4, 6}};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  // anchor 3: (0,r,q) + 3; max 4 -> E at 5; anchor 8; max 9 -> E 10; anchor 14
  // for the 2x3 grid: q runs fastest (raster order), max 16 -> E at 17.
  expect_row(p, 0,
             {tri(0), tri(1), tri(2), {3, 3, 3}, {3, 3, 4}, {3, 4, 3}, {3, 4, 4}, tri(5), tri(6),
              tri(7), {8, 8, 8}, {8, 8, 9}, tri(10), tri(11), tri(12), tri(13), {14, 14, 14},
              {14, 14, 15}, {14, 14, 16}, {14, 15, 14}, {14, 15, 15}, {14, 15, 16}, tri(17)});
  EXPECT_EQ(p.rope_deltas[0], 18.0f - 23.0f);
  // row, begin, t, hm, wm, is_video, grid_index, anchor
  expect_blocks(p, {{0, 3, 1, 2, 2, false, 0, 3.0},
                    {0, 10, 1, 1, 2, false, 1, 8.0},
                    {0, 16, 1, 2, 3, false, 2, 14.0}});
  for (int64_t s : {3, 4, 5, 6}) EXPECT_EQ(p.token_block[static_cast<size_t>(s)], 0);
  for (int64_t s : {0, 1, 2, 7, 8, 9}) EXPECT_EQ(p.token_block[static_cast<size_t>(s)], kTextToken);
}

TEST(PositionsMrope, VideosWithFractionalSecondsPerGridAcrossRows) {
  // One video per row; grids and seconds are consumed row after row.
  // Row r: T S V... E T (+ right padding in row 2). tokens_per_second = 2.
  // tau(f) = trunc(float(float(f) * float(s)) * 2):
  //   s = 0.5: 0, 1, 2, 3
  //   s = 0.7: 0, 1, 2 (1.4*2 = 2.8), 4 (2.1*2 = 4.2)
  //   s = 1.3: 0, 2 (2.6), 5 (5.2), 7 (7.8)
  Batch b;
  b.batch = 3;
  b.seq = 12;
  const std::vector<int64_t> eight(8, kVid);
  auto row = [&](std::vector<int64_t> vision, int64_t pad) {
    std::vector<int64_t> r = {5, kStart};
    r.insert(r.end(), vision.begin(), vision.end());
    r.push_back(kEnd);
    r.push_back(6);
    for (int64_t i = 0; i < pad; ++i) r.push_back(kVid);  // masked: ignored
    b.ids.insert(b.ids.end(), r.begin(), r.end());
    for (int64_t i = 0; i < 12; ++i) b.mask.push_back(i < 12 - pad ? 1 : 0);
  };
  row(eight, 0);
  row(eight, 0);
  row(std::vector<int64_t>(4, kVid), 4);
  b.videos = {{4, 2, 4}, {4, 2, 4}, {4, 2, 2}};
  b.seconds = {0.5, 0.7, 1.3};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  // anchor 2; the frame time goes on axis 0, rows (Hm = 1) on axis 1, columns on 2.
  expect_row(p, 0,
             {tri(0), tri(1), {2, 2, 2}, {2, 2, 3}, {3, 2, 2}, {3, 2, 3}, {4, 2, 2}, {4, 2, 3},
              {5, 2, 2}, {5, 2, 3}, tri(6), tri(7)});
  expect_row(p, 1,
             {tri(0), tri(1), {2, 2, 2}, {2, 2, 3}, {3, 2, 2}, {3, 2, 3}, {4, 2, 2}, {4, 2, 3},
              {6, 2, 2}, {6, 2, 3}, tri(7), tri(8)});
  expect_row(p, 2,
             {tri(0), tri(1), {2, 2, 2}, {4, 2, 2}, {7, 2, 2}, {9, 2, 2}, tri(10), tri(11), tri(1),
              tri(1), tri(1), tri(1)});
  EXPECT_EQ(p.rope_deltas[0], 8.0f - 12.0f);
  EXPECT_EQ(p.rope_deltas[1], 9.0f - 12.0f);
  EXPECT_EQ(p.rope_deltas[2], 12.0f - 12.0f);
  // row, begin, t, hm, wm, is_video, grid_index, anchor
  expect_blocks(p, {{0, 2, 4, 1, 2, true, 0, 2.0},
                    {1, 2, 4, 1, 2, true, 1, 2.0},
                    {2, 2, 4, 1, 1, true, 2, 2.0}});
}

TEST(PositionsMrope, FrameTimeIsTruncatedInFloat32) {
  // s = 2.3, 26 frames of one token: in float32 25 * 2.3f = 57.5f exactly after
  // rounding, times 2 = 115; the same product in double is 114.99999999999999
  // and would truncate to 114. docs/spec.md: float32, like the reference.
  Batch b = one_row(cat({{kStart}, std::vector<int64_t>(26, kVid)}));
  b.videos = {{26, 2, 2}};
  b.seconds = {2.3};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  const double anchor = 1;
  EXPECT_EQ(p.at(0, 0, 1 + 25), static_cast<float>(anchor + 115));
  for (int64_t f = 0; f < 26; ++f) {
    const float scaled = static_cast<float>(f) * 2.3f;  // the formula, spelled out
    const auto tau = static_cast<int64_t>(scaled * 2.0f);
    EXPECT_EQ(p.at(0, 0, 1 + f), static_cast<float>(anchor + static_cast<double>(tau))) << f;
    EXPECT_EQ(p.at(1, 0, 1 + f), 1.0f);
    EXPECT_EQ(p.at(2, 0, 1 + f), 1.0f);
  }
  EXPECT_EQ(p.rope_deltas[0], 117.0f - 27.0f);
  // frame_times exposes the same numbers.
  const std::vector<int64_t> tau = frame_times(26, true, 2.3, VisionConfig{});
  EXPECT_EQ(tau[25], 115);
  EXPECT_EQ(frame_times(4, true, 0.7, VisionConfig{}), (std::vector<int64_t>{0, 1, 2, 4}));
  EXPECT_EQ(frame_times(4, true, 1.3, VisionConfig{}), (std::vector<int64_t>{0, 2, 5, 7}));
  EXPECT_EQ(frame_times(3, false, 1.3, VisionConfig{}), (std::vector<int64_t>{0, 0, 0}));
}

TEST(PositionsMrope, SecondsDefaultToOneAndZeroSecondsFreezeTime) {
  Batch b = one_row({kStart, kVid, kVid, kVid, kStart, kVid, kVid, kVid});
  b.videos = {{3, 2, 2}, {3, 2, 2}};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  // default 1 s/grid, 2 tokens/s: tau = 0, 2, 4; anchor 1 -> 1, 3, 5; next 6.
  expect_row(p, 0, {tri(0), {1, 1, 1}, {3, 1, 1}, {5, 1, 1}, tri(6), {7, 7, 7}, {9, 7, 7}, {11, 7, 7}});
  b.seconds = {0.0, 1.0};
  const Positions q = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  expect_row(q, 0, {tri(0), tri(1), tri(1), tri(1), tri(2), {3, 3, 3}, {5, 3, 3}, {7, 3, 3}});
}

TEST(PositionsMrope, TimeIndexModeUsesTheFrameNumber) {
  // Qwen2-VL: tau(f) = f whatever the seconds and tokens_per_second.
  Batch b = one_row({kStart, kVid, kVid, kVid, kVid, kVid, kVid, 3});
  b.videos = {{3, 2, 4}};  // 1x2 per frame
  b.seconds = {0.5};
  VisionConfig v;
  v.time = TimeMode::index;
  v.tokens_per_second = 7;
  const Positions p = rope_index(b.input(), v, {Scheme::mrope, {}});
  expect_row(p, 0, {tri(0), {1, 1, 1}, {1, 1, 2}, {2, 1, 1}, {2, 1, 2}, {3, 1, 1}, {3, 1, 2}, tri(4)});
  EXPECT_EQ(p.rope_deltas[0], 5.0f - 8.0f);
}

TEST(PositionsMrope, PaddedBatchConsumesGridsRowAfterRow) {
  // Row 0 (left padding):  P P P P T S [2x2] E T
  // Row 1 (right padding): T S [1x2] E S [video 2 x 1x2] E P
  // Row 2: fully masked (pads hold vision ids and must be ignored).
  Batch b;
  b.batch = 3;
  b.seq = 12;
  b.ids = {kImg, kStart, kImg, kVid, 4, kStart, kImg, kImg, kImg, kImg, kEnd, 5,   //
           6, kStart, kImg, kImg, kEnd, kStart, kVid, kVid, kVid, kVid, kEnd, kImg,  //
           kStart, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg};
  b.mask = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,  //
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  b.images = {{1, 4, 4}, {1, 2, 4}};
  b.videos = {{2, 2, 4}};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  expect_row(p, 0,
             {tri(1), tri(1), tri(1), tri(1), tri(0), tri(1), {2, 2, 2}, {2, 2, 3}, {2, 3, 2},
              {2, 3, 3}, tri(4), tri(5)});
  // video: 1 s/grid * 2 tokens/s -> tau = 0, 2
  expect_row(p, 1,
             {tri(0), tri(1), {2, 2, 2}, {2, 2, 3}, tri(4), tri(5), {6, 6, 6}, {6, 6, 7}, {8, 6, 6},
              {8, 6, 7}, tri(9), tri(1)});
  expect_row(p, 2, std::vector<Triple>(12, tri(1)));
  EXPECT_EQ(p.rope_deltas[0], 6.0f - 12.0f);
  EXPECT_EQ(p.rope_deltas[1], 10.0f - 12.0f);
  EXPECT_EQ(p.rope_deltas[2], -12.0f);
  // row, begin, t, hm, wm, is_video, grid_index, anchor
  expect_blocks(p, {{0, 6, 1, 2, 2, false, 0, 2.0},
                    {1, 2, 1, 1, 2, false, 1, 2.0},
                    {1, 6, 2, 1, 2, true, 0, 6.0}});
  for (int64_t s = 0; s < 12; ++s) EXPECT_EQ(p.token_block[static_cast<size_t>(24 + s)], kMaskedToken);
}

TEST(PositionsMrope, MaskedGapInsideABlockIsRemovedFirst) {
  // Blocks are found among the unmasked tokens: a masked token in the middle of
  // a run does not split it.
  Batch b = one_row({kStart, kImg, 42, kImg, kImg, kImg, 9});
  b.mask = {1, 1, 0, 1, 1, 1, 1};
  b.images = {{1, 4, 4}};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  expect_row(p, 0, {tri(0), {1, 1, 1}, tri(1), {1, 1, 2}, {1, 2, 1}, {1, 2, 2}, tri(3)});
  EXPECT_EQ(p.rope_deltas[0], 4.0f - 7.0f);
}

TEST(PositionsMrope, BlocksAtTheVeryStartAndTheVeryEndOfARow) {
  // S [2x2] T T S [1x2]   (the row ends on a vision token, no vision end)
  Batch b = one_row({kStart, kImg, kImg, kImg, kImg, 3, 4, kStart, kImg, kImg});
  b.images = {{1, 4, 4}, {1, 2, 4}};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  expect_row(p, 0,
             {tri(0), {1, 1, 1}, {1, 1, 2}, {1, 2, 1}, {1, 2, 2}, tri(3), tri(4), tri(5), {6, 6, 6},
              {6, 6, 7}});
  EXPECT_EQ(p.rope_deltas[0], 8.0f - 10.0f);
  // Without markers (layout form) a block can even sit at position 0.
  const Positions q = from_layout("image:2x2,text:2", Scheme::mrope);
  expect_row(q, 0, {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, tri(2), tri(3)});
  EXPECT_EQ(q.rope_deltas[0], 4.0f - 6.0f);
}

TEST(PositionsMrope, TwoBlocksBackToBack) {
  // S [1x2] S [video 1 x 1x2] E
  Batch b = one_row({kStart, kImg, kImg, kStart, kVid, kVid, kEnd});
  b.images = {{1, 2, 4}};
  b.videos = {{1, 2, 4}};
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::mrope, {}});
  expect_row(p, 0, {tri(0), {1, 1, 1}, {1, 1, 2}, tri(3), {4, 4, 4}, {4, 4, 5}, tri(6)});
  EXPECT_EQ(p.rope_deltas[0], 0.0f);
  // Truly adjacent blocks (layout form): the second anchor is the first's max + 1.
  const Positions q = from_layout("image:1x2,image:2x2", Scheme::mrope);
  expect_row(q, 0, {{0, 0, 0}, {0, 0, 1}, {2, 2, 2}, {2, 2, 3}, {2, 3, 2}, {2, 3, 3}});
  EXPECT_EQ(q.rope_deltas[0], 4.0f - 6.0f);
  ASSERT_EQ(q.blocks.size(), 2u);
  EXPECT_EQ(q.blocks[1].anchor, 2.0);
}

TEST(PositionsMrope, MergeSizeOneAndThree) {
  VisionConfig v1;
  v1.spatial_merge_size = 1;
  Batch b = one_row({kStart, kImg, kImg, kImg, kImg, kImg, kImg, 8});
  b.images = {{1, 2, 3}};
  const Positions p = rope_index(b.input(), v1, {Scheme::mrope, {}});
  expect_row(p, 0,
             {tri(0), {1, 1, 1}, {1, 1, 2}, {1, 1, 3}, {1, 2, 1}, {1, 2, 2}, {1, 2, 3}, tri(4)});
  VisionConfig v3;
  v3.spatial_merge_size = 3;
  b.images = {{1, 6, 9}};  // 2x3 merged
  const Positions q = rope_index(b.input(), v3, {Scheme::mrope, {}});
  expect_row(q, 0,
             {tri(0), {1, 1, 1}, {1, 1, 2}, {1, 1, 3}, {1, 2, 1}, {1, 2, 2}, {1, 2, 3}, tri(4)});
}

// ---------------------------------------------- vanilla / unordered by hand ---

// T S [2x2] E T, then S [video 2 x 1x2]
Batch image_then_video() {
  Batch b = one_row({3, kStart, kImg, kImg, kImg, kImg, kEnd, 4, kStart, kVid, kVid, kVid, kVid});
  b.images = {{1, 4, 4}};
  b.videos = {{2, 2, 4}};
  return b;
}

TEST(PositionsVanilla, HandCase) {
  Batch b = image_then_video();
  b.seconds = {3.0};  // vanilla ignores time
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::vanilla, {}});
  std::vector<Triple> want;
  for (int i = 0; i < 13; ++i) want.push_back(tri(i));
  expect_row(p, 0, want);
  EXPECT_EQ(p.rope_deltas[0], 0.0f);
}

TEST(PositionsUnordered, HandCase) {
  const Batch b = image_then_video();
  const Positions p = rope_index(b.input(), VisionConfig{}, {Scheme::unordered, {}});
  // T0 S1 [2 2 2 2] E3 T4 S5 [6 6 6 6]; max 6 -> delta 7 - 13
  expect_row(p, 0,
             {tri(0), tri(1), tri(2), tri(2), tri(2), tri(2), tri(3), tri(4), tri(5), tri(6), tri(6),
              tri(6), tri(6)});
  EXPECT_EQ(p.rope_deltas[0], 7.0f - 13.0f);
}

// ------------------------------------------------ a model of docs/spec.md §1 ---

// docs/spec.md §1 spelled out for one batch, in double: chunks of text + block, the
// anchor, next = max(chunk) + 1 (rounded to float32 like the running position
// of the reference), masked tokens 1.0. Block coordinates: the docs/spec.md §2 table for
// vanilla/unordered/mrope; the library's circle_ring (checked on its own
// against an independent docs/spec.md §3 implementation in test_circle) for circle.
struct Model {
  std::vector<double> pos;  // [3][B][S]
  std::vector<double> deltas;
};

Model model_rope_index(const Batch& b, const VisionConfig& v, const Geometry& g) {
  Model out;
  out.pos.assign(static_cast<size_t>(3 * b.batch * b.seq), 1.0);
  size_t next_image = 0, next_video = 0;
  for (int64_t r = 0; r < b.batch; ++r) {
    std::vector<int64_t> real;
    for (int64_t s = 0; s < b.seq; ++s)
      if (is_real(b, r, s)) real.push_back(s);
    auto id = [&](size_t k) { return b.ids[static_cast<size_t>(r * b.seq + real[k])]; };
    auto put = [&](size_t k, double t, double h, double w) {
      const int64_t s = real[k];
      out.pos[static_cast<size_t>((0 * b.batch + r) * b.seq + s)] = t;
      out.pos[static_cast<size_t>((1 * b.batch + r) * b.seq + s)] = h;
      out.pos[static_cast<size_t>((2 * b.batch + r) * b.seq + s)] = w;
    };
    double next = 0;
    bool any = false;
    size_t k = 0, text_begin = 0;
    auto close_chunk = [&](double high) {
      next = static_cast<double>(static_cast<float>(high) + 1.0f);
      any = true;
    };
    while (k <= real.size()) {
      const bool at_end = k == real.size();
      const bool opens = !at_end && id(k) == kStart && k + 1 < real.size() &&
                         (id(k + 1) == kImg || id(k + 1) == kVid);
      if (!at_end && !opens) {
        ++k;
        continue;
      }
      // text run [text_begin, k] (the start marker included when a block opens)
      const size_t text_end = at_end ? k : k + 1;
      double high = -1e300;
      for (size_t i = text_begin; i < text_end; ++i) {
        const double p = next + static_cast<double>(i - text_begin);
        put(i, p, p, p);
        high = p;
      }
      if (at_end) {
        if (text_end > text_begin) close_chunk(high);
        break;
      }
      const double anchor = next + static_cast<double>(text_end - text_begin);
      const bool video = id(k + 1) == kVid;
      const GridTHW grid = video ? b.videos[next_video] : b.images[next_image];
      const double secs = video && !b.seconds.empty() ? b.seconds[next_video] : 1.0;
      (video ? next_video : next_image)++;
      const int64_t hm = grid.h / v.spatial_merge_size, wm = grid.w / v.spatial_merge_size;
      std::vector<AxisTriple> ring;
      if (g.scheme == Scheme::circle) ring = circle_ring(hm, wm, g.circle);
      size_t i = text_end;
      for (int64_t f = 0; f < grid.t; ++f) {
        double tau = 0;
        if (video) {
          tau = v.time == TimeMode::index
                    ? static_cast<double>(f)
                    : static_cast<double>(static_cast<int64_t>(
                          static_cast<float>(static_cast<float>(f) * static_cast<float>(secs)) *
                          static_cast<float>(v.tokens_per_second)));
        }
        for (int64_t row = 0; row < hm; ++row)
          for (int64_t col = 0; col < wm; ++col, ++i) {
            const int64_t j = f * hm * wm + row * wm + col;
            double t = 0, h = 0, w = 0;
            switch (g.scheme) {
              case Scheme::vanilla: t = h = w = static_cast<double>(j); break;
              case Scheme::unordered: break;
              case Scheme::mrope: t = tau, h = static_cast<double>(row), w = static_cast<double>(col); break;
              case Scheme::circle: {
                const AxisTriple& q = ring[static_cast<size_t>(row * wm + col)];
                t = q.t + tau, h = q.h + tau, w = q.w + tau;
                break;
              }
            }
            put(i, anchor + t, anchor + h, anchor + w);
            high = std::max({high, static_cast<double>(static_cast<float>(anchor + t)),
                             static_cast<double>(static_cast<float>(anchor + h)),
                             static_cast<double>(static_cast<float>(anchor + w))});
          }
      }
      close_chunk(high);
      k = text_begin = i;
    }
    out.deltas.push_back(any ? next - static_cast<double>(b.seq) : -static_cast<double>(b.seq));
  }
  return out;
}

TEST(PositionsModel, RandomBatchesMatchASpecModel) {
  std::mt19937 rng(555);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 150; ++trial) {
    const int64_t m = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    VisionConfig v;
    v.spatial_merge_size = m;
    if (unit(rng) < 0.25) v.time = TimeMode::index;
    if (unit(rng) < 0.25) v.tokens_per_second = std::round(1 + 40 * unit(rng)) / 10;
    const Batch b = random_batch(rng, m, trial % 4 != 0);
    Geometry g = random_geometry(rng);
    for (Scheme s : kAllSchemes) {
      g.scheme = s;
      const Positions p = rope_index(b.input(), v, g);
      const Model want = model_rope_index(b, v, g);
      for (int64_t r = 0; r < b.batch; ++r) {
        double scale = static_cast<double>(b.seq) + 1;
        for (int64_t i = 0; i < b.seq; ++i)
          for (int a = 0; a < 3; ++a)
            scale = std::max(scale, std::fabs(want.pos[static_cast<size_t>((a * b.batch + r) * b.seq + i)]));
        // integer schemes: exact; circle: float32 roundings of values <= scale
        const double tol = s == Scheme::circle ? kFloatRoundings * scale : 0.0;
        for (int64_t i = 0; i < b.seq; ++i)
          for (int a = 0; a < 3; ++a)
            ASSERT_NEAR(p.at(a, r, i), want.pos[static_cast<size_t>((a * b.batch + r) * b.seq + i)], tol)
                << to_string(s) << " trial " << trial << " row " << r << " token " << i << " axis " << a;
        ASSERT_NEAR(p.rope_deltas[static_cast<size_t>(r)], want.deltas[static_cast<size_t>(r)], tol)
            << to_string(s) << " trial " << trial << " row " << r;
      }
    }
  }
}

// ------------------------------------------------------------- decoding ---

TEST(PositionsDecode, ContinuesExactlyAfterThePromptForEveryScheme) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t m = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    VisionConfig v;
    v.spatial_merge_size = m;
    const Batch b = random_batch(rng, m, trial % 3 != 0);
    Geometry g = random_geometry(rng);
    for (Scheme s : kAllSchemes) {
      g.scheme = s;
      const Positions p = rope_index(b.input(), v, g);
      constexpr int64_t kCount = 3;
      const std::vector<float> d = decode_positions(p.rope_deltas, b.seq, kCount);
      ASSERT_EQ(d.size(), static_cast<size_t>(3 * b.batch * kCount));
      for (int64_t r = 0; r < b.batch; ++r) {
        double high = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (int64_t i = 0; i < b.seq; ++i)
          if (is_real(b, r, i)) {
            any = true;
            for (int a = 0; a < 3; ++a) high = std::max(high, static_cast<double>(p.at(a, r, i)));
          }
        const double first = any ? high + 1 : 0.0;  // fully masked: decoding starts at 0
        const double tol = s == Scheme::circle
                               ? kFloatRoundings * (std::fabs(high) + static_cast<double>(b.seq) + 1)
                               : 0.0;  // integer schemes are exact
        for (int a = 0; a < 3; ++a)
          for (int64_t i = 0; i < kCount; ++i)
            ASSERT_NEAR(d[static_cast<size_t>((a * b.batch + r) * kCount + i)],
                        first + static_cast<double>(i), tol)
                << to_string(s) << " trial " << trial << " row " << r << " axis " << a;
      }
    }
  }
}

TEST(PositionsDecode, LayoutIsAxisBatchCount) {
  const std::vector<float> deltas = {-3.0f, 2.5f};
  const std::vector<float> d = decode_positions(deltas, 10, 2);
  EXPECT_THAT(d, ::testing::ElementsAre(7, 8, 12.5f, 13.5f, 7, 8, 12.5f, 13.5f, 7, 8, 12.5f, 13.5f));
  EXPECT_TRUE(decode_positions(deltas, 0, 0).empty());
  EXPECT_TRUE(decode_positions({}, 5, 4).empty());
  EXPECT_THROW(decode_positions(deltas, -1, 2), Error);
  EXPECT_THROW(decode_positions(deltas, 0, -1), Error);
}

// ------------------------------------------------------- rope_index_into ---

TEST(PositionsInto, MatchesRopeIndexBitForBit) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t m = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    VisionConfig v;
    v.spatial_merge_size = m;
    const Batch b = random_batch(rng, m, trial % 2 == 0);
    const Geometry g = random_geometry(rng);
    const Positions p = rope_index(b.input(), v, g);
    std::vector<float> ids(static_cast<size_t>(3 * b.batch * b.seq), std::nanf(""));
    std::vector<float> deltas(static_cast<size_t>(b.batch), std::nanf(""));
    rope_index_into(b.input(), v, g, ids, deltas);
    ASSERT_EQ(ids.size(), p.position_ids.size());
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], p.position_ids[i]) << i;
    for (size_t i = 0; i < deltas.size(); ++i) ASSERT_EQ(deltas[i], p.rope_deltas[i]) << i;
  }
}

TEST(PositionsInto, RejectsWrongOutputSizes) {
  Batch b;
  b.batch = 2;
  b.seq = 3;
  b.ids = {1, 2, 3, 4, 5, 6};
  std::vector<float> ok_ids(18), ok_deltas(2);
  EXPECT_NO_THROW(rope_index_into(b.input(), {}, {}, ok_ids, ok_deltas));
  for (size_t n : {0u, 17u, 19u, 6u}) {
    std::vector<float> ids(n);
    try {
      rope_index_into(b.input(), {}, {}, ids, ok_deltas);
      ADD_FAILURE() << "accepted position_ids of " << n;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("position_ids"));
      EXPECT_THAT(e.what(), HasSubstr(std::to_string(n)));
    }
  }
  for (size_t n : {0u, 1u, 3u}) {
    std::vector<float> deltas(n);
    try {
      rope_index_into(b.input(), {}, {}, ok_ids, deltas);
      ADD_FAILURE() << "accepted rope_deltas of " << n;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("rope_deltas"));
    }
  }
}

// ------------------------------------------------------ layout_positions ---

TEST(PositionsLayout, PaperToyHasNoMarkers) {
  const Positions p = from_layout("text:5,image:3x3", Scheme::mrope);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.seq_len, 14);
  std::vector<Triple> want = {tri(0), tri(1), tri(2), tri(3), tri(4)};
  for (int r = 0; r < 3; ++r)
    for (int q = 0; q < 3; ++q) want.push_back({5, 5.0 + r, 5.0 + q});
  expect_row(p, 0, want);
  EXPECT_EQ(p.rope_deltas[0], 8.0f - 14.0f);
}

TEST(PositionsLayout, VideoSecondsAndTimeModeComeFromTheLayout) {
  const std::vector<Segment> seg = parse_layout("text:1,video:4x1x1@1.3");
  const Positions p = layout_positions(seg, VisionConfig{}, {Scheme::mrope, {}});
  expect_row(p, 0, {tri(0), {1, 1, 1}, {3, 1, 1}, {6, 1, 1}, {8, 1, 1}});
  VisionConfig index;
  index.time = TimeMode::index;
  const Positions q = layout_positions(seg, index, {Scheme::mrope, {}});
  expect_row(q, 0, {tri(0), {1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {4, 1, 1}});
}

// The token row and its layout: every vision start / end marker is counted as
// text in the layout; blocks keep their grids and seconds.
TEST(PositionsLayout, EqualsRopeIndexOnTheEquivalentTokenRow) {
  std::mt19937 rng(4242);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 80; ++trial) {
    const int64_t m = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    VisionConfig v;
    v.spatial_merge_size = m;
    if (unit(rng) < 0.2) v.time = TimeMode::index;
    if (unit(rng) < 0.3) v.tokens_per_second = 0.25 + 4 * unit(rng);
    Batch b;
    std::vector<int64_t> row;
    std::vector<Segment> layout;
    int64_t pending = 0;
    auto flush = [&] {
      if (pending > 0) layout.push_back({Segment::Kind::text, pending});
      pending = 0;
    };
    const int blocks = std::uniform_int_distribution<int>(0, 4)(rng);
    for (int i = 0; i < blocks; ++i) {
      const int64_t text = std::uniform_int_distribution<int64_t>(0, 4)(rng);
      for (int64_t k = 0; k < text; ++k) row.push_back(random_text_token(rng, false));
      pending += text;
      const bool video = unit(rng) < 0.4;
      Segment s;
      s.kind = video ? Segment::Kind::video : Segment::Kind::image;
      s.t = video ? std::uniform_int_distribution<int64_t>(1, 4)(rng) : 1;
      s.hm = std::uniform_int_distribution<int64_t>(1, 5)(rng);
      s.wm = std::uniform_int_distribution<int64_t>(1, 5)(rng);
      s.second_per_grid_t = video ? std::round(unit(rng) * 40) / 10 : 1.0;
      row.push_back(kStart);
      ++pending;
      flush();
      layout.push_back(s);
      row.insert(row.end(), static_cast<size_t>(s.t * s.hm * s.wm), video ? kVid : kImg);
      if (video) {
        b.videos.push_back({s.t, s.hm * m, s.wm * m});
        b.seconds.push_back(s.second_per_grid_t);
      } else {
        b.images.push_back({1, s.hm * m, s.wm * m});
      }
      if (unit(rng) < 0.6) {
        row.push_back(kEnd);
        ++pending;
      }
    }
    const int64_t tail = std::uniform_int_distribution<int64_t>(blocks == 0 ? 1 : 0, 4)(rng);
    for (int64_t k = 0; k < tail; ++k) row.push_back(random_text_token(rng, false));
    pending += tail;
    flush();

    // The row sits in a batch of 2 behind random left padding; the other row is
    // text only.
    const int64_t left = std::uniform_int_distribution<int64_t>(0, 3)(rng);
    b.batch = 2;
    b.seq = static_cast<int64_t>(row.size()) + left;
    b.ids.assign(static_cast<size_t>(left), kImg);
    b.ids.insert(b.ids.end(), row.begin(), row.end());
    for (int64_t i = 0; i < b.seq; ++i) b.ids.push_back(11);
    b.mask.assign(static_cast<size_t>(2 * b.seq), 1);
    std::fill_n(b.mask.begin(), left, 0);

    Geometry g = random_geometry(rng);
    for (Scheme s : kAllSchemes) {
      g.scheme = s;
      const Positions tok = rope_index(b.input(), v, g);
      const Positions lay = layout_positions(layout, v, g);
      ASSERT_EQ(lay.seq_len, static_cast<int64_t>(row.size())) << format_layout(layout);
      for (int64_t i = 0; i < lay.seq_len; ++i)
        for (int a = 0; a < 3; ++a)
          ASSERT_EQ(lay.at(a, 0, i), tok.at(a, 0, left + i))
              << to_string(s) << " " << format_layout(layout) << " token " << i << " axis " << a;
      // Same maximum: max + 1 = delta + S in both forms (float32 deltas).
      const double lay_next = static_cast<double>(lay.rope_deltas[0]) + static_cast<double>(lay.seq_len);
      const double tok_next = static_cast<double>(tok.rope_deltas[0]) + static_cast<double>(b.seq);
      EXPECT_NEAR(lay_next, tok_next, kFloatRoundings * (std::fabs(tok_next) + static_cast<double>(b.seq)));
      ASSERT_EQ(lay.blocks.size(), static_cast<size_t>(blocks));
      for (size_t k = 0; k < lay.blocks.size(); ++k) {
        EXPECT_EQ(lay.blocks[k].anchor, tok.blocks[k].anchor);
        EXPECT_EQ(lay.blocks[k].begin + left, tok.blocks[k].begin);
      }
    }
  }
}

}  // namespace
