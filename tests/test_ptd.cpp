// Coupling metrics (docs/spec.md §5, docs/spec.md §5). The frequency layouts they
// read are tested in test_rotary_config.cpp.
//
// Expected metric values are recomputed here by brute force from their
// definitions: PTD from explicit distances, the RoPE kernel from explicit sums
// of cos of per-frequency phase differences (the library uses a cos/sin feature
// dot product instead).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/ptd.h"
#include "circlerope/rotary.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::HasSubstr;

// Sums of a few hundred double terms in a different order: 1e-12 of the
// values involved (positions < 100, kernel values in [-1, 1]).
constexpr double kSumOrderTol = 1e-12;
// Circle-RoPE PTD is 0 in exact arithmetic; the positions are float32 values
// of magnitude ~|c| + R = 15, so distances carry ~FLT_EPSILON * 15 ~ 2e-6 of
// rounding at most (the brief's bound for the paper toy is 1e-6).
constexpr double kCirclePtdTol = 1e-6;

using P3 = std::array<double, 3>;

struct ToyRow {
  std::vector<P3> text;
  std::vector<std::vector<P3>> blocks;
};

double dist(const P3& a, const P3& b, bool one_dimensional) {
  if (one_dimensional) return std::fabs(a[0] - b[0]);
  return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) +
                   (a[2] - b[2]) * (a[2] - b[2]));
}

// docs/spec.md §5 literally: 1/(|T||I|) sum_t sum_i |d(t,i) - mean_i d(t,i)|.
double brute_ptd(const std::vector<P3>& text, const std::vector<P3>& block, bool one_d) {
  double total = 0;
  for (const P3& t : text) {
    double mean = 0;
    for (const P3& i : block) mean += dist(t, i, one_d);
    mean /= static_cast<double>(block.size());
    for (const P3& i : block) total += std::fabs(dist(t, i, one_d) - mean);
  }
  return total / static_cast<double>(text.size() * block.size());
}

int axis_of(int i, const RotaryConfig& r) {
  const auto [st, sh, sw] = r.sections;
  switch (r.layout) {
    case FrequencyLayout::chunked: return i < st ? 0 : i < st + sh ? 1 : 2;
    case FrequencyLayout::interleaved:
      if (i % 3 == 1 && i < 3 * sh) return 1;
      if (i % 3 == 2 && i < 3 * sw) return 2;
      return 0;
    case FrequencyLayout::single: return 0;
  }
  return -1;
}

// docs/spec.md §5: K(t,i) = (2/D) sum_k cos(dphi_k); per text token the mean absolute
// deviation of K(t, .) over the block; then the mean over text tokens.
double brute_kernel_deviation(const std::vector<P3>& text, const std::vector<P3>& block,
                              const RotaryConfig& r) {
  const int half = r.rotary_dim / 2;
  double total = 0;
  for (const P3& t : text) {
    std::vector<double> k(block.size(), 0.0);
    for (size_t i = 0; i < block.size(); ++i) {
      for (int f = 0; f < half; ++f) {
        const int a = axis_of(f, r);
        const double inv = std::pow(r.theta, -2.0 * f / r.rotary_dim);
        k[i] += std::cos((t[static_cast<size_t>(a)] - block[i][static_cast<size_t>(a)]) * inv);
      }
      k[i] *= 2.0 / r.rotary_dim;
    }
    double mean = 0;
    for (double v : k) mean += v;
    mean /= static_cast<double>(k.size());
    double dev = 0;
    for (double v : k) dev += std::fabs(v - mean);
    total += dev / static_cast<double>(k.size());
  }
  return total / static_cast<double>(text.size());
}

// Splits row `row` of `p` into text points and per-block points by the token
// map (the token map itself is checked in test_positions).
ToyRow split_row(const Positions& p, int64_t row) {
  ToyRow out;
  std::vector<std::vector<P3>> by_block(p.blocks.size());
  for (int64_t s = 0; s < p.seq_len; ++s) {
    const int32_t k = p.token_block[static_cast<size_t>(row * p.seq_len + s)];
    const P3 pt = {p.at(0, row, s), p.at(1, row, s), p.at(2, row, s)};
    if (k == kTextToken) out.text.push_back(pt);
    if (k >= 0) by_block[static_cast<size_t>(k)].push_back(pt);
  }
  for (size_t b = 0; b < by_block.size(); ++b)
    if (p.blocks[b].row == row) out.blocks.push_back(by_block[b]);
  return out;
}

// ---------------------------------------------------------- paper toy ---

TEST(Ptd, PaperToyAllFourSchemes) {
  const RotaryConfig rotary;
  const CouplingMetrics v =
      coupling_metrics(from_layout("text:5,image:3x3", Scheme::vanilla), Scheme::vanilla, rotary);
  EXPECT_NEAR(v.ptd, 20.0 / 9.0, kSumOrderTol);  // 2.222, not the 3-axis 3.849
  const CouplingMetrics u =
      coupling_metrics(from_layout("text:5,image:3x3", Scheme::unordered), Scheme::unordered, rotary);
  EXPECT_EQ(u.ptd, 0.0);
  EXPECT_NEAR(u.rope_kernel_deviation, 0.0, kSumOrderTol);
  const CouplingMetrics c =
      coupling_metrics(from_layout("text:5,image:3x3", Scheme::circle), Scheme::circle, rotary);
  EXPECT_NEAR(c.ptd, 0.0, kCirclePtdTol);
  // Circle-RoPE is PTD-free but not RoPE-kernel-free (docs/spec.md §5).
  EXPECT_GT(c.rope_kernel_deviation, 1e-3);
  const CouplingMetrics m =
      coupling_metrics(from_layout("text:5,image:3x3", Scheme::mrope), Scheme::mrope, rotary);
  const CouplingMetrics m2 =
      coupling_metrics(from_layout("image:3x3,text:5", Scheme::mrope), Scheme::mrope, rotary);

  // M-RoPE by hand: text (k,k,k), k = 0..4, image (5, 5 + r, 5 + q).
  std::vector<P3> text, image;
  for (int k = 0; k < 5; ++k) text.push_back({double(k), double(k), double(k)});
  for (int r = 0; r < 3; ++r)
    for (int q = 0; q < 3; ++q) image.push_back({5.0, 5.0 + r, 5.0 + q});
  EXPECT_NEAR(m.ptd, brute_ptd(text, image, false), kSumOrderTol);
  EXPECT_NEAR(m.ptd, 0.5876, 1e-4);
  // image first: (0, r, q), then text 3..7
  std::vector<P3> text2, image2;
  for (int k = 3; k < 8; ++k) text2.push_back({double(k), double(k), double(k)});
  for (int r = 0; r < 3; ++r)
    for (int q = 0; q < 3; ++q) image2.push_back({0.0, double(r), double(q)});
  EXPECT_NEAR(m2.ptd, brute_ptd(text2, image2, false), kSumOrderTol);
  EXPECT_NEAR(m2.ptd, 0.4844, 1e-4);
  // vanilla by hand too, and the 3-axis distance it must not use
  std::vector<P3> vimg;
  for (int j = 0; j < 9; ++j) vimg.push_back({5.0 + j, 5.0 + j, 5.0 + j});
  EXPECT_NEAR(brute_ptd(text, vimg, false), std::sqrt(3.0) * 20 / 9, kSumOrderTol);
  EXPECT_NE(std::round(v.ptd * 1000), std::round(std::sqrt(3.0) * 20 / 9 * 1000));

  for (const CouplingMetrics* x : {&v, &u, &c, &m, &m2}) {
    ASSERT_EQ(x->blocks.size(), 1u);
    EXPECT_EQ(x->blocks[0].text_tokens, 5);
    EXPECT_EQ(x->blocks[0].vision_tokens, 9);
    ASSERT_EQ(x->rows.size(), 1u);
    EXPECT_EQ(x->rows[0].blocks, 1);
    EXPECT_EQ(x->rows[0].ptd, x->blocks[0].ptd);
    EXPECT_EQ(x->ptd, x->blocks[0].ptd);
  }
}

TEST(Ptd, CirclePtdIsZeroForRandomConfigsWithoutDff) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    CircleConfig c;
    c.radius = 1 + 20 * unit(rng);
    c.alpha = unit(rng);
    c.move_to_origin = unit(rng) < 0.5;
    if (unit(rng) < 0.5) c.move_to_positive = PositiveShift::automatic;
    const int hm = std::uniform_int_distribution<int>(1, 8)(rng);
    const int wm = std::uniform_int_distribution<int>(1, 8)(rng);
    const std::string layout = "text:3,image:" + std::to_string(hm) + "x" + std::to_string(wm) + ",text:4";
    const CouplingMetrics m = coupling_metrics(from_layout(layout, Scheme::circle, c), Scheme::circle, {});
    // float32 positions of magnitude up to ~3 + 2R + shift
    EXPECT_NEAR(m.ptd, 0.0, 8 * FLT_EPSILON * (10 + 3 * c.radius)) << layout;
  }
}

// -------------------------------------------------- rows, masks, blocks ---

TEST(Ptd, MaskedTokensAreExcluded) {
  // The same row with and without left padding; pads sit at position 1.0 and
  // would change every distance if they counted as text.
  const std::vector<GridTHW> images = {{1, 6, 6}};
  std::vector<int64_t> row = {5, 6, 7, kStart};
  row.insert(row.end(), 9, kImg);
  row.push_back(8);
  const int64_t n = static_cast<int64_t>(row.size());
  std::vector<int64_t> padded(4, 0);
  padded.insert(padded.end(), row.begin(), row.end());
  std::vector<int64_t> mask(4, 0);
  mask.insert(mask.end(), row.size(), 1);
  for (Scheme s : kAllSchemes) {
    const Positions plain = rope_index({row, 1, n, {}, images, {}, {}}, VisionConfig{}, {s, {}});
    const Positions pad = rope_index({padded, 1, n + 4, mask, images, {}, {}}, VisionConfig{}, {s, {}});
    const CouplingMetrics a = coupling_metrics(plain, s, {});
    const CouplingMetrics b = coupling_metrics(pad, s, {});
    ASSERT_EQ(b.blocks.size(), 1u);
    EXPECT_EQ(b.blocks[0].text_tokens, 5);  // 3 text + start marker + 1 text
    EXPECT_EQ(b.blocks[0].vision_tokens, 9);
    EXPECT_DOUBLE_EQ(a.ptd, b.ptd) << to_string(s);
    EXPECT_DOUBLE_EQ(a.rope_kernel_deviation, b.rope_kernel_deviation) << to_string(s);
    // Sanity: counting the pads as text would have changed the M-RoPE value (a
    // vanilla PTD does not depend on where the text sits: d - mean = j - mean j).
    if (s == Scheme::mrope) {
      ToyRow r = split_row(pad, 0);
      for (int i = 0; i < 4; ++i) r.text.push_back({1, 1, 1});
      EXPECT_GT(std::fabs(brute_ptd(r.text, r.blocks[0], false) - b.ptd), 1e-3);
    }
  }
}

TEST(Ptd, SeveralBlocksPerRowAreReportedEachAndAveraged) {
  // Row 0: T T S [2x2] T S [3x1] T ; row 1: S [1x3] T T ; row 2: text only.
  const std::vector<int64_t> ids = {
      1, 2, kStart, kImg, kImg, kImg, kImg, 3, kStart, kImg, kImg, kImg, 4,  //
      kStart, kImg, kImg, kImg, 5, 6, 7, 7, 7, 7, 7, 7, 7,                  //
      8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
  const std::vector<GridTHW> images = {{1, 4, 4}, {1, 6, 2}, {1, 2, 6}};
  RotaryConfig rotary;
  rotary.rotary_dim = 16;
  rotary.sections = {2, 3, 3};
  rotary.theta = 100;
  for (Scheme s : kAllSchemes) {
    const Positions p = rope_index({ids, 3, 13, {}, images, {}, {}}, VisionConfig{}, {s, {}});
    const CouplingMetrics m = coupling_metrics(p, s, rotary);
    ASSERT_EQ(m.blocks.size(), 3u);
    ASSERT_EQ(m.rows.size(), 2u);  // row 2 has no block
    const bool one_d = s == Scheme::vanilla || s == Scheme::unordered;
    std::vector<double> ptd, kern;
    for (int64_t row : {0, 1}) {
      const ToyRow r = split_row(p, row);
      for (const auto& block : r.blocks) {
        ptd.push_back(brute_ptd(r.text, block, one_d));
        kern.push_back(brute_kernel_deviation(r.text, block, rotary));
      }
    }
    ASSERT_EQ(ptd.size(), 3u);
    for (size_t b = 0; b < 3; ++b) {
      EXPECT_EQ(m.blocks[b].block, static_cast<int64_t>(b));
      EXPECT_NEAR(m.blocks[b].ptd, ptd[b], kSumOrderTol) << to_string(s) << " block " << b;
      EXPECT_NEAR(m.blocks[b].rope_kernel_deviation, kern[b], 1e-9) << to_string(s) << " block " << b;
    }
    EXPECT_EQ(m.blocks[0].row, 0);
    EXPECT_EQ(m.blocks[1].row, 0);
    EXPECT_EQ(m.blocks[2].row, 1);
    EXPECT_EQ(m.blocks[0].text_tokens, 6);
    EXPECT_EQ(m.blocks[1].vision_tokens, 3);
    EXPECT_EQ(m.rows[0].row, 0);
    EXPECT_EQ(m.rows[0].blocks, 2);
    EXPECT_NEAR(m.rows[0].ptd, (ptd[0] + ptd[1]) / 2, kSumOrderTol);
    EXPECT_NEAR(m.rows[0].rope_kernel_deviation, (kern[0] + kern[1]) / 2, 1e-9);
    EXPECT_EQ(m.rows[1].row, 1);
    EXPECT_EQ(m.rows[1].blocks, 1);
    EXPECT_NEAR(m.rows[1].ptd, ptd[2], kSumOrderTol);
    // overall: the mean over blocks (not over rows)
    EXPECT_NEAR(m.ptd, (ptd[0] + ptd[1] + ptd[2]) / 3, kSumOrderTol);
    EXPECT_NEAR(m.rope_kernel_deviation, (kern[0] + kern[1] + kern[2]) / 3, 1e-9);
  }
}

TEST(Ptd, RowWithoutTextIsSkippedAndNoBlockGivesNaN) {
  const CouplingMetrics only_image = coupling_metrics(from_layout("image:2x2", Scheme::mrope), Scheme::mrope, {});
  EXPECT_TRUE(only_image.blocks.empty());
  EXPECT_TRUE(only_image.rows.empty());
  EXPECT_TRUE(std::isnan(only_image.ptd));
  EXPECT_TRUE(std::isnan(only_image.rope_kernel_deviation));
  const CouplingMetrics only_text = coupling_metrics(from_layout("text:7", Scheme::circle), Scheme::circle, {});
  EXPECT_TRUE(only_text.blocks.empty());
  EXPECT_TRUE(std::isnan(only_text.ptd));
  EXPECT_TRUE(std::isnan(only_text.rope_kernel_deviation));
  // Two adjacent blocks and no text at all: still nothing to report.
  EXPECT_TRUE(std::isnan(
      coupling_metrics(from_layout("image:2x2,video:2x1x3", Scheme::vanilla), Scheme::vanilla, {}).ptd));
  // Row 0 text only, row 1 with a block: only row 1 is reported.
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, kStart, kImg, kImg, kImg, kImg};
  const std::vector<GridTHW> images = {{1, 4, 4}};
  const Positions p = rope_index({ids, 2, 5, {}, images, {}, {}}, VisionConfig{}, {Scheme::mrope, {}});
  const CouplingMetrics m = coupling_metrics(p, Scheme::mrope, {});
  ASSERT_EQ(m.rows.size(), 1u);
  EXPECT_EQ(m.rows[0].row, 1);
  ASSERT_EQ(m.blocks.size(), 1u);
  EXPECT_EQ(m.blocks[0].text_tokens, 1);
  // one text token: every |d - mean| sums to the spread of its distances
  const ToyRow r = split_row(p, 1);
  EXPECT_NEAR(m.ptd, brute_ptd(r.text, r.blocks[0], false), kSumOrderTol);
}

// coupling_metrics takes the scheme, which picks the 1-D or the 3-axis distance, from the
// positions, not from the caller: trusted, the vanilla toy's PTD would be 3.849 instead of
// 2.222 under "mrope".
TEST(Ptd, TheSchemeComesFromThePositions) {
  const Positions vanilla = from_layout("text:5,image:3x3", Scheme::vanilla);
  EXPECT_EQ(vanilla.scheme, Scheme::vanilla);
  EXPECT_NEAR(coupling_metrics(vanilla, RotaryConfig{}).ptd, 20.0 / 9.0, 1e-12);
  try {
    coupling_metrics(vanilla, Scheme::mrope, RotaryConfig{});
    ADD_FAILURE() << "a wrong scheme was trusted";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("scheme mrope is not the scheme vanilla the positions were made with"));
  }
  EXPECT_NEAR(coupling_metrics(vanilla, Scheme::vanilla, RotaryConfig{}).ptd, 20.0 / 9.0, 1e-12);
  // rope_index records it as well
  const std::vector<int64_t> ids = {1, 2};
  for (Scheme s : kAllSchemes)
    EXPECT_EQ(rope_index({ids, 1, 2, {}, {}, {}, {}}, VisionConfig{}, {s, {}}).scheme, s);
}

TEST(Ptd, NeedsTheTokenMap) {
  Positions p = from_layout("text:2,image:2x2", Scheme::mrope);
  p.token_block.clear();
  EXPECT_THROW(coupling_metrics(p, Scheme::mrope, {}), Error);
  RotaryConfig bad;
  bad.rotary_dim = 7;
  EXPECT_THROW(coupling_metrics(from_layout("text:2,image:2x2", Scheme::mrope), Scheme::mrope, bad), Error);
}

// ---------------------------------------------- RoPE kernel deviation ---

TEST(Ptd, RopeKernelDeviationMatchesBruteForceForEveryLayout) {
  std::vector<RotaryConfig> configs;
  for (auto layout : {FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single}) {
    RotaryConfig r;
    r.layout = layout;
    r.rotary_dim = 16;
    r.theta = 50;  // low theta: every frequency turns noticeably over a few positions
    r.sections = layout == FrequencyLayout::interleaved ? std::array<int, 3>{4, 2, 2}
                                                        : std::array<int, 3>{2, 3, 3};
    configs.push_back(r);
  }
  configs.push_back(RotaryConfig{});  // Qwen2.5-VL: D = 128, [16, 24, 24], theta 1e6
  RotaryConfig qwen3;
  qwen3.layout = FrequencyLayout::interleaved;
  qwen3.sections = {24, 20, 20};
  configs.push_back(qwen3);
  CircleConfig c;
  c.radius = 3;
  for (const RotaryConfig& r : configs)
    for (Scheme s : kAllSchemes)
      for (const char* layout : {"text:4,image:3x2,text:3", "text:2,video:3x2x2@0.5,text:1"}) {
        const Positions p = from_layout(layout, s, c);
        const CouplingMetrics m = coupling_metrics(p, s, r);
        const ToyRow row = split_row(p, 0);
        ASSERT_EQ(m.blocks.size(), 1u);
        const double want = brute_kernel_deviation(row.text, row.blocks[0], r);
        EXPECT_NEAR(m.rope_kernel_deviation, want, 1e-9)
            << to_string(r.layout) << " D=" << r.rotary_dim << " " << to_string(s) << " " << layout;
        if (s == Scheme::unordered) EXPECT_NEAR(m.rope_kernel_deviation, 0.0, kSumOrderTol);
        else EXPECT_GT(m.rope_kernel_deviation, 0.0);
      }
}

// ---- the cost limits of PTD ------------------------------------------------------------

// text:8000,image:100x80 took 7-21 s (four schemes) with no limit of its own, and at the
// token cap the same loops would run for months holding ~17 GiB: refused now before
// anything is allocated, naming the numbers.
TEST(PtdLimits, CostPastTheWorkLimitIsRefusedBeforeAnyWork) {
  const Positions p = layout_positions(parse_layout("text:8000,image:100x80"), VisionConfig{}, Geometry{});
  EXPECT_THAT(error_of([&] { coupling_metrics(p, RotaryConfig{}); }),
              HasSubstr("costs 8192000000 text x vision x frequency terms"));
  EXPECT_THAT(error_of([&] { coupling_metrics(p, RotaryConfig{}); }), HasSubstr("more than 4294967296"));
}

TEST(PtdLimitsDeathTest, AtTheTokenCapItIsRefusedWithoutAllocating) {
  // 2^23 text tokens and a 2^23-token image: 2^53 terms, ~17 GiB of features
  const Positions p =
      layout_positions(parse_layout("text:8388608,image:4096x2048"), VisionConfig{}, Geometry{Scheme::mrope, {}});
  EXPECT_ERROR_IN_CHILD(coupling_metrics(p, RotaryConfig{}));
  EXPECT_THAT(error_of([&] { coupling_metrics(p, RotaryConfig{}); }), HasSubstr("costs 9007199254740992"));
  // many text tokens with a one-token block: little work, but the features of 2^24 - 1 text
  // tokens would take 2.3 GiB
  const Positions wide =
      layout_positions(parse_layout("text:16777215,image:1x1"), VisionConfig{}, Geometry{Scheme::mrope, {}});
  RotaryConfig small;
  small.rotary_dim = 128;
  EXPECT_EQ(ptd_cost(wide, small).work, int64_t{16777215} * 128);
  EXPECT_THAT(error_of([&] { coupling_metrics(wide, small); }), HasSubstr("bytes of rotary features"));
}

// Property: ptd_cost is the formula of ptd.h on random layouts, and coupling_metrics is
// refused exactly when it is past a limit (the runs that pass are small and fast).
TEST(PtdLimits, CostIsTheDocumentedFormulaAndDecidesRefusal) {
  std::mt19937_64 rng(0x97D);
  for (int round = 0; round < 200; ++round) {
    std::string layout;
    int64_t text_total = 0;
    std::vector<int64_t> blocks;
    const int segments = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < segments; ++i) {
      if (!layout.empty()) layout += ",";
      if (rng() % 2) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
        layout += "text:" + std::to_string(n);
        text_total += n;
      } else {
        const int64_t h = 1 + static_cast<int64_t>(rng() % 60), w = 1 + static_cast<int64_t>(rng() % 60);
        layout += "image:" + std::to_string(h) + "x" + std::to_string(w);
        blocks.push_back(h * w);
      }
    }
    RotaryConfig r;
    r.rotary_dim = std::array<int, 4>{2, 16, 128, 1024}[rng() % 4];
    r.sections = {r.rotary_dim / 2, 0, 0};
    const Positions p = layout_positions(parse_layout(layout), VisionConfig{}, Geometry{Scheme::mrope, {}});
    int64_t work = 0, widest = 0;
    for (int64_t b : blocks) {
      work += text_total > 0 ? text_total * b * r.rotary_dim : 0;
      widest = std::max(widest, text_total > 0 ? b : 0);
    }
    const int64_t bytes = (text_total > 0 && !blocks.empty() ? text_total + widest : 0) * (r.rotary_dim * 8 + 24) + widest * 16;
    const PtdCost cost = ptd_cost(p, r);
    ASSERT_EQ(cost.work, work) << layout;
    ASSERT_EQ(cost.bytes, bytes) << layout;
    const bool over = work > kMaxPtdWork || bytes > kMaxPtdBytes;
    if (over || work < (int64_t{1} << 24)) {  // run only the small ones
      bool refused = false;
      try {
        coupling_metrics(p, r);
      } catch (const Error& e) {
        refused = true;
        EXPECT_THAT(e.what(), HasSubstr("the limit of one call")) << layout;
      }
      EXPECT_EQ(refused, over) << layout;
    }
  }
  // at the work limit exactly, and one text token past it (rotary_dim 2: 2^31 pairs)
  RotaryConfig two;
  two.rotary_dim = 2;
  two.sections = {1, 0, 0};
  const Positions at = layout_positions(parse_layout("text:32768,image:256x256"), VisionConfig{}, Geometry{Scheme::mrope, {}});
  EXPECT_EQ(ptd_cost(at, two).work, kMaxPtdWork);
  EXPECT_LE(ptd_cost(at, two).bytes, kMaxPtdBytes);
  const Positions past = layout_positions(parse_layout("text:32769,image:256x256"), VisionConfig{}, Geometry{Scheme::mrope, {}});
  EXPECT_THAT(error_of([&] { coupling_metrics(past, two); }), HasSubstr("costs 4295098368 text x vision"));
}

}  // namespace
