// SVG pictures of positions (cli/svg_plot.h): standalone, well-formed, one dot per
// token, robust on degenerate rows, clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "circlerope/error.h"
#include "circlerope/positions.h"
#include "svg_plot.h"
#include "test_support.h"

namespace {

using circlerope::Error;
using circlerope::Geometry;
using circlerope::Positions;
using circlerope::Scheme;
using circlerope::VisionConfig;
using circlerope::cli::PlotPanel;
using circlerope::cli::render_svg;
using circlerope::test::from_layout;

constexpr const char* kSmallLayout = "text:5,image:6x6,text:4";
constexpr const char* kMixedLayout =
    "text:20,image:6x8,text:9,image:4x4,text:7,video:4x4x6,text:21";

std::string render_one(const Positions& positions, const std::string& title = "panel",
                       int64_t row = 0) {
  const PlotPanel panel{title, "subtitle", &positions, row};
  return render_svg(std::span<const PlotPanel>(&panel, 1));
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string trimmed(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  const auto end = text.find_last_not_of(" \t\r\n");
  return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
}

int64_t unmasked_tokens(const Positions& positions, int64_t row) {
  int64_t n = 0;
  for (int64_t s = 0; s < positions.seq_len; ++s)
    n += positions.token_block[static_cast<size_t>(row * positions.seq_len + s)] !=
         circlerope::kMaskedToken;
  return n;
}

// Crude well-formedness: one root, balanced groups and texts, self-closed leaves,
// only the five XML entities, nothing that needs a network or a script engine.
void expect_well_formed(const std::string& svg) {
  const std::string body = trimmed(svg);
  EXPECT_TRUE(body.rfind("<?xml", 0) == 0 || body.rfind("<svg", 0) == 0) << body.substr(0, 40);
  EXPECT_TRUE(body.size() >= 6 && body.compare(body.size() - 6, 6, "</svg>") == 0);
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "</svg>"), 1u);
  EXPECT_EQ(count(svg, "<g ") + count(svg, "<g>"), count(svg, "</g>"));
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_EQ(count(svg, "<title>"), count(svg, "</title>"));
  for (const char* leaf : {"<circle", "<ellipse", "<path", "<line", "<rect"}) {
    // Every leaf element closes itself before the next tag starts.
    for (size_t at = svg.find(leaf); at != std::string::npos; at = svg.find(leaf, at + 1)) {
      const size_t close = svg.find('>', at);
      ASSERT_NE(close, std::string::npos);
      EXPECT_EQ(svg[close - 1], '/') << svg.substr(at, close - at + 1);
      EXPECT_EQ(svg.find('<', at + 1) > close, true);
    }
  }
  const std::regex bad_entity("&(?!(amp|lt|gt|quot|apos);)");
  EXPECT_FALSE(std::regex_search(svg, bad_entity));
  const std::string low = lower(svg);
  EXPECT_EQ(low.find("nan"), std::string::npos);
  EXPECT_EQ(low.find("inf"), std::string::npos);
  EXPECT_EQ(low.find("<script"), std::string::npos);
  EXPECT_EQ(low.find("href"), std::string::npos);
  EXPECT_EQ(low.find("<image"), std::string::npos);
  EXPECT_EQ(low.find("@import"), std::string::npos);
}

TEST(SvgPlot, StandaloneWellFormedDocument) {
  const Positions pos = from_layout(kSmallLayout, Scheme::circle);
  const std::string svg = render_one(pos);
  expect_well_formed(svg);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("viewBox=\"0 0 "), std::string::npos);
}

TEST(SvgPlot, OneCirclePerUnmaskedTokenInEveryScheme) {
  for (const Scheme scheme : circlerope::kAllSchemes) {
    for (const char* text : {kSmallLayout, kMixedLayout}) {
      const Positions pos = from_layout(text, scheme);
      const std::string svg = render_one(pos);
      EXPECT_EQ(count(svg, "<circle"), static_cast<size_t>(unmasked_tokens(pos, 0)))
          << circlerope::to_string(scheme) << " " << text;
      expect_well_formed(svg);
    }
  }
  EXPECT_EQ(count(render_one(from_layout(kSmallLayout, Scheme::circle)), "<circle"), 5u + 36u + 4u);
}

TEST(SvgPlot, SkipsMaskedTokensOfThePaddedRow) {
  // Row 0: text, a 2x2 image (4 merged tokens), text. Row 1: left padding, then text.
  const VisionConfig vision;
  const int64_t img = vision.image_token_id, start = vision.vision_start_token_id;
  const std::vector<int64_t> ids = {1, start, img, img, img, img, 2, 3, 0, 0, 0, 5, 6, 7, 8, 9};
  const std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1};
  const std::vector<circlerope::GridTHW> grids = {{1, 4, 4}};
  circlerope::RopeIndexInput input;
  input.input_ids = ids;
  input.batch = 2;
  input.seq_len = 8;
  input.attention_mask = mask;
  input.image_grid_thw = grids;
  const Positions pos = circlerope::rope_index(input, vision, Geometry{Scheme::circle, {}});

  EXPECT_EQ(count(render_one(pos, "row 0", 0), "<circle"), 8u);
  const std::string row1 = render_one(pos, "row 1", 1);
  EXPECT_EQ(count(row1, "<circle"), 5u);
  EXPECT_EQ(count(row1, "class=\"block-tokens\""), 0u);
  expect_well_formed(row1);
}

TEST(SvgPlot, EscapesTitleAndSubtitle) {
  const Positions pos = from_layout(kSmallLayout, Scheme::mrope);
  const PlotPanel panel{"a<b&c", "it's \"quoted\" > x\x01y", &pos, 0};
  const std::string svg = render_svg(std::span<const PlotPanel>(&panel, 1));
  EXPECT_NE(svg.find("a&lt;b&amp;c"), std::string::npos);
  EXPECT_EQ(svg.find("a<b&c"), std::string::npos);
  EXPECT_NE(svg.find("it&apos;s &quot;quoted&quot; &gt; xy"), std::string::npos);
  expect_well_formed(svg);
}

TEST(SvgPlot, LongTitlesAreCutToThePanel) {
  const Positions pos = from_layout(kSmallLayout, Scheme::circle);
  const std::string long_title(400, 'x');
  const std::string svg = render_one(pos, long_title);
  EXPECT_EQ(svg.find(long_title), std::string::npos);
  EXPECT_NE(svg.find("xxxxxxxxxx\u2026"), std::string::npos);
  expect_well_formed(svg);
}

TEST(SvgPlot, LegendNamesEveryBlock) {
  const std::string svg = render_one(from_layout(kMixedLayout, Scheme::circle));
  EXPECT_NE(svg.find("image 0: 6x8"), std::string::npos);
  EXPECT_NE(svg.find("image 1: 4x4"), std::string::npos);
  EXPECT_NE(svg.find("video 0: 4x4x6"), std::string::npos);
  EXPECT_NE(svg.find("text: 57"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"anchor\""), 3u);
  EXPECT_EQ(count(svg, "class=\"cone\""), 3u);
}

TEST(SvgPlot, ManyBlocksEndTheLegendWithMore) {
  // Labels of growing width ("image 9" then "image 10") in panels of two widths.
  std::string text = "text:2";
  for (int i = 0; i < 30; ++i) text += ",image:2x3,text:1";
  const Positions pos = from_layout(text, Scheme::mrope);
  for (const size_t panel_count : {size_t{1}, size_t{2}}) {
    const std::vector<PlotPanel> panels(panel_count, PlotPanel{"many", "", &pos, 0});
    const std::string svg = render_svg(panels);
    EXPECT_EQ(count(svg, " more</text>"), panel_count);
    EXPECT_EQ(count(svg, "<circle"), panel_count * static_cast<size_t>(unmasked_tokens(pos, 0)));
    expect_well_formed(svg);
    // Crude overlap check: no two labels start at the same spot of a panel.
    const size_t second = svg.find("class=\"panel\"", svg.find("class=\"panel\"") + 1);
    const std::string first_panel = svg.substr(0, second);
    std::set<std::string> anchors;
    const std::regex label("<text x=\"([-0-9.]+)\" y=\"([-0-9.]+)\"");
    for (auto it = std::sregex_iterator(first_panel.begin(), first_panel.end(), label);
         it != std::sregex_iterator(); ++it)
      EXPECT_TRUE(anchors.insert((*it)[1].str() + "," + (*it)[2].str()).second) << (*it)[0];
  }
}

TEST(SvgPlot, CircleRingsAreDrawnPerFrameAndGridsAreNot) {
  EXPECT_EQ(count(render_one(from_layout(kSmallLayout, Scheme::circle)), "class=\"ring\""), 1u);
  // video:4x4x6 is 4 frames of a 4x6 grid: one ring per frame.
  EXPECT_EQ(
      count(render_one(from_layout("text:3,video:4x4x6,text:2", Scheme::circle)), "class=\"ring\""), 4u);
  EXPECT_EQ(count(render_one(from_layout(kMixedLayout, Scheme::mrope)), "class=\"ring\""), 0u);
  EXPECT_EQ(count(render_one(from_layout(kMixedLayout, Scheme::vanilla)), "class=\"ring\""), 0u);
  // dff_rate 1 puts the plain grid in the ring's plane: no longer a circle.
  circlerope::CircleConfig flat;
  flat.dff_rate = 1.0;
  EXPECT_EQ(count(render_one(from_layout(kSmallLayout, Scheme::circle, flat)), "class=\"ring\""), 0u);
  // move_to_positive shifts the ring along (1,1,1): still a ring around the text axis.
  circlerope::CircleConfig shifted;
  shifted.move_to_positive = circlerope::PositiveShift::automatic;
  EXPECT_EQ(count(render_one(from_layout(kSmallLayout, Scheme::circle, shifted)), "class=\"ring\""), 1u);
}

TEST(SvgPlot, ConeLinesAreCappedForLargeBlocks) {
  const std::string svg = render_one(from_layout("text:3,image:20x20,text:2", Scheme::circle));
  const size_t at = svg.find("class=\"cone\" d=\"");
  ASSERT_NE(at, std::string::npos);
  const size_t begin = at + 16, end = svg.find('"', begin);
  const std::string d = svg.substr(begin, end - begin);
  const size_t lines = count(d, "L");
  EXPECT_GE(lines, 40u);
  EXPECT_LE(lines, 64u);
  EXPECT_EQ(count(svg, "<circle"), 3u + 400u + 2u);
}

TEST(SvgPlot, NumbersKeepAtMostOneDecimal) {
  const Positions pos = from_layout(kMixedLayout, Scheme::circle);
  const std::string svg = render_one(pos, "circle");
  EXPECT_FALSE(std::regex_search(svg, std::regex("[0-9]\\.[0-9]{2,}")));
  // A 112-token row stays small.
  EXPECT_LT(svg.size(), 30000u);
}

TEST(SvgPlot, GridOfPanels) {
  std::vector<Positions> pos;
  for (const Scheme scheme : circlerope::kAllSchemes) pos.push_back(from_layout(kMixedLayout, scheme));
  auto panels_of = [&](size_t n) {
    std::vector<PlotPanel> panels;
    for (size_t i = 0; i < n; ++i) {
      std::string title = "p";  // append(): GCC 12 warns falsely (-Wrestrict) on "p" + std::string
      title.append(std::to_string(i));
      panels.push_back({title, "", &pos[i % pos.size()], 0});
    }
    return panels;
  };
  auto columns = [](const std::string& svg) {
    std::set<std::string> xs;
    const std::regex translate("translate\\(([0-9.]+),");
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), translate);
         it != std::sregex_iterator(); ++it)
      xs.insert((*it)[1]);
    return xs.size();
  };
  const std::vector<std::pair<size_t, size_t>> expected = {{1, 1}, {2, 2}, {3, 2}, {4, 2}, {7, 3}};
  for (const auto& [n, cols] : expected) {
    const std::string svg = render_svg(panels_of(n));
    expect_well_formed(svg);
    EXPECT_EQ(count(svg, "class=\"panel\""), n);
    EXPECT_EQ(columns(svg), cols) << n << " panels";
    size_t tokens = 0;
    for (size_t i = 0; i < n; ++i)
      tokens += static_cast<size_t>(unmasked_tokens(pos[i % pos.size()], 0));
    EXPECT_EQ(count(svg, "<circle"), tokens);
    for (size_t i = 0; i < n; ++i)
      EXPECT_NE(svg.find(">p" + std::to_string(i) + "</text>"), std::string::npos);
  }
}

TEST(SvgPlot, DegenerateRowsStayFinite) {
  for (const Scheme scheme : circlerope::kAllSchemes) {
    for (const char* text : {"text:1", "text:6", "image:1x1", "image:3x3",
                             "text:2,image:1x1,text:2", "image:2x2,text:3", "video:3x1x1"}) {
      const Positions pos = from_layout(text, scheme);
      const std::string svg = render_one(pos);
      SCOPED_TRACE(std::string(circlerope::to_string(scheme)) + " " + text);
      expect_well_formed(svg);
      EXPECT_EQ(count(svg, "<circle"), static_cast<size_t>(unmasked_tokens(pos, 0)));
    }
  }
}

Positions hand_made(int64_t seq_len, std::vector<float> ids, std::vector<int32_t> kinds) {
  Positions pos;
  pos.batch = 1;
  pos.seq_len = seq_len;
  pos.position_ids = std::move(ids);
  pos.rope_deltas = {0};
  pos.token_block = std::move(kinds);
  return pos;
}

TEST(SvgPlot, FullyMaskedAndNonFiniteRowsStayFinite) {
  const Positions masked = hand_made(3, std::vector<float>(9, 1.0f), std::vector<int32_t>(3, -2));
  const std::string empty = render_one(masked);
  expect_well_formed(empty);
  EXPECT_EQ(count(empty, "<circle"), 0u);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Positions broken = hand_made(3, {0, nan, inf, 0, nan, -inf, 0, 1, 2}, {-1, -1, -1});
  const std::string svg = render_one(broken);
  expect_well_formed(svg);
  EXPECT_EQ(count(svg, "<circle"), 3u);
}

TEST(SvgPlot, RejectsBadInput) {
  EXPECT_THROW(render_svg({}), Error);

  const PlotPanel null_panel{"x", "", nullptr, 0};
  EXPECT_THROW(render_svg(std::span<const PlotPanel>(&null_panel, 1)), Error);

  const Positions pos = from_layout(kSmallLayout, Scheme::circle);
  for (const int64_t row : {int64_t{-1}, int64_t{1}, int64_t{100}}) {
    const PlotPanel bad_row{"x", "", &pos, row};
    try {
      render_svg(std::span<const PlotPanel>(&bad_row, 1));
      ADD_FAILURE() << "no error for row " << row;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("out of range"), std::string::npos) << error.what();
    }
  }

  Positions no_map = pos;
  no_map.token_block.clear();
  const PlotPanel missing{"x", "", &no_map, 0};
  try {
    render_svg(std::span<const PlotPanel>(&missing, 1));
    ADD_FAILURE() << "no error for a missing token_block";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("token_block"), std::string::npos) << error.what();
  }

  Positions bad_block = pos;
  bad_block.token_block[6] = 7;  // there is one block
  const PlotPanel dangling{"x", "", &bad_block, 0};
  EXPECT_THROW(render_svg(std::span<const PlotPanel>(&dangling, 1)), Error);

  Positions short_ids = pos;
  short_ids.position_ids.resize(3);
  const PlotPanel truncated{"x", "", &short_ids, 0};
  EXPECT_THROW(render_svg(std::span<const PlotPanel>(&truncated, 1)), Error);

  // The error names the panel, so a CLI user knows which one is wrong.
  const std::vector<PlotPanel> second_bad = {{"ok", "", &pos, 0}, {"bad", "", nullptr, 0}};
  try {
    render_svg(second_bad);
    ADD_FAILURE() << "no error for a null second panel";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("panel 1"), std::string::npos) << error.what();
  }
}

}  // namespace
