// circlerope front end — pictures of 3-D positions as standalone SVG (see svg_plot.h).
#include "svg_plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <optional>
#include <string_view>
#include <vector>

#include "circlerope/detail/quote.h"
#include "circlerope/error.h"

namespace circlerope::cli {
namespace {

// ------------------------------------------------------------- constants ---

// Camera yaw away from the text axis. At 0 rings would be seen edge-on (lines) and at
// 90 degrees the text axis would be seen end-on (a dot); 30 degrees keeps the axis at
// cos(30) = 87 % of its length and shows rings as ellipses with a 1:2 aspect ratio.
constexpr double kCameraYawDegrees = 30.0;
constexpr double kPi = std::numbers::pi;
constexpr double kSqrt3 = std::numbers::sqrt3;

constexpr double kSinglePanelWidth = 640, kSinglePanelHeight = 440;  // one wide picture
constexpr double kPanelWidth = 480, kPanelHeight = 400;
constexpr double kPageMargin = 10, kPanelGap = 12;

constexpr double kTitleBaseline = 24, kSubtitleBaseline = 42, kPlotTop = 52;
constexpr double kTitleFontSize = 15, kSubtitleFontSize = 11.5, kSmallFontSize = 10.5;
// Rough average glyph widths of a sans-serif font, used to keep text inside a panel.
constexpr double kTitleCharWidth = 8.6, kSubtitleCharWidth = 6.2, kSmallCharWidth = 5.9;

constexpr double kSideMargin = 10;      // panel edge to plot area
constexpr double kPlotGap = 4;          // plot area to the bottom band
constexpr double kMinPlotHeight = 150;  // flat rows shrink their panels down to this
constexpr double kPlotPadding = 14;     // plot area edge to the outermost point
constexpr double kBandMinHeight = 64;   // legend / scale bar / gizmo strip at the bottom
constexpr double kLegendRowHeight = 16;
constexpr int kLegendMaxRows = 3;
constexpr double kLegendItemGap = 14;
constexpr double kGizmoBoxWidth = 70, kScaleBoxWidth = 110;
constexpr double kGizmoArrowLength = 22;

// Pixels per position unit when a panel has no extent at all (one point), and the
// most a short row may be blown up so a few tokens do not fill the panel.
constexpr double kFallbackScale = 24;
constexpr double kMaxScale = 48;
// Panels share one scale unless one would then be drawn this many times smaller than
// it could be, at which point it stops being readable.
constexpr double kMaxSharedScaleRatio = 2.0;

// A block with more tokens than this gets cone lines to every k-th token only, so
// large images do not blow up the file or turn the cone into a solid smear.
constexpr int64_t kMaxConeLines = 64;

// Okabe-Ito colours (colour-blind friendly), yellow left out: it vanishes on white.
constexpr std::array<std::string_view, 6> kPalette = {"#0072B2", "#D55E00", "#009E73",
                                                      "#CC79A7", "#E69F00", "#56B4E9"};
constexpr std::string_view kTextColour = "#222222";
constexpr std::string_view kAxisColour = "#9a9a9a";
constexpr std::string_view kMutedTextColour = "#555555";

// ------------------------------------------------------------- geometry ---

struct Vec2 {
  double x = 0, y = 0;  // screen units, y up (flipped when written to SVG)
};

struct Box {
  double min_x = std::numeric_limits<double>::infinity();
  double min_y = std::numeric_limits<double>::infinity();
  double max_x = -std::numeric_limits<double>::infinity();
  double max_y = -std::numeric_limits<double>::infinity();

  void add(Vec2 p) {
    min_x = std::min(min_x, p.x), max_x = std::max(max_x, p.x);
    min_y = std::min(min_y, p.y), max_y = std::max(max_y, p.y);
  }
  bool empty() const { return !(min_x <= max_x); }
  double width() const { return empty() ? 0 : max_x - min_x; }
  double height() const { return empty() ? 0 : max_y - min_y; }
  Vec2 centre() const { return empty() ? Vec2{} : Vec2{(min_x + max_x) / 2, (min_y + max_y) / 2}; }
};

// Orthographic camera. Screen x mixes the text direction n = (1,1,1)/sqrt3 with the
// in-plane direction v = (-1,-1,2)/sqrt6; screen y is the other in-plane direction
// u = (-1,1,0)/sqrt2 (docs/spec.md §3 step 5, (x, y, z) = (w, h, t)). Both screen axes are unit
// vectors, so lengths in the ring plane keep their scale and circles stay true
// ellipses of the projection.
class Camera {
 public:
  Camera()
      : cos_(std::cos(kCameraYawDegrees * kPi / 180)),
        sin_(std::sin(kCameraYawDegrees * kPi / 180)) {}

  Vec2 project(double t, double h, double w) const {
    const double along_n = (w + h + t) / kSqrt3;
    const double along_u = (h - w) * kInvSqrt2;
    const double along_v = (2 * t - w - h) * kInvSqrt6;
    return {cos_ * along_n + sin_ * along_v, along_u};
  }

  // Screen length of one text step (1,1,1): the unit of the scale bar.
  double text_step() const { return kSqrt3 * cos_; }

  // Semi-axes of the image of a unit circle in the plane orthogonal to (1,1,1): u maps
  // to screen y unchanged and v to screen x shortened by sin(yaw), so the ellipse is
  // axis-aligned.
  Vec2 ring_semi_axes() const { return {sin_, 1}; }

 private:
  static constexpr double kInvSqrt2 = 0.70710678118654752440;
  static constexpr double kInvSqrt6 = 0.40824829046386301637;
  double cos_, sin_;
};

// ------------------------------------------------------- collected data ---

struct PlotToken {
  std::array<double, 3> position{};  // (t, h, w)
  Vec2 point;
  int64_t s = 0;               // index in the padded row
  int32_t block = kTextToken;  // kTextToken or index into Positions::blocks
  int64_t frame = 0;           // frame of a video token
};

// A frame whose tokens lie on one circle around the text axis (Circle-RoPE, with or
// without move_to_positive): drawn as the projected circle so the ring reads as one.
struct PlotRing {
  Vec2 centre;
  double radius = 0;  // in position units
  int64_t frame = 0;
};

struct PlotBlock {
  int32_t index = 0;           // into Positions::blocks
  std::vector<size_t> tokens;  // into PanelData::tokens, row order
  int64_t apex = -1;           // text token the cone starts at (into tokens), -1 = none
  Vec2 anchor;                 // (c, c, c)
  std::vector<PlotRing> rings;
};

struct PanelData {
  std::vector<PlotToken> tokens;  // unmasked tokens in row order
  std::vector<PlotBlock> blocks;  // in order of appearance in the row
  size_t text_tokens = 0;
  Box extent;  // of every point drawn, anchors included
};

[[noreturn]] void fail_panel(size_t index, const std::string& what) {
  throw Error("render_svg: panel " + std::to_string(index) + ": " + what);
}

void validate_panel(const PlotPanel& panel, size_t index) {
  const Positions* pos = panel.positions;
  if (pos == nullptr) fail_panel(index, "positions is null");
  if (pos->batch < 0 || pos->seq_len < 0) fail_panel(index, "positions have a negative shape");
  if (panel.row < 0 || panel.row >= pos->batch)
    fail_panel(index, "row " + std::to_string(panel.row) + " is out of range (batch " +
                          std::to_string(pos->batch) + ")");
  const auto cells = static_cast<size_t>(pos->batch * pos->seq_len);
  if (pos->position_ids.size() != 3 * cells)
    fail_panel(index, "position_ids has " + std::to_string(pos->position_ids.size()) +
                          " values, expected 3 * batch * seq_len = " + std::to_string(3 * cells));
  if (pos->token_block.size() != cells)
    fail_panel(index, "token_block is missing (use positions from rope_index or layout_positions)");
  for (int64_t s = 0; s < pos->seq_len; ++s) {
    const int32_t kind = pos->token_block[static_cast<size_t>(panel.row * pos->seq_len + s)];
    if (kind < kMaskedToken || (kind >= 0 && static_cast<size_t>(kind) >= pos->blocks.size()))
      fail_panel(index, "token_block[" + std::to_string(s) + "] = " + std::to_string(kind) +
                            " names no block (" + std::to_string(pos->blocks.size()) + " blocks)");
  }
}

// The cone starts at the text token nearest before the block (what the block follows
// in the prompt), or the first one after it when the block opens the row.
int64_t cone_apex(const std::vector<PlotToken>& tokens, size_t first_block_token) {
  for (size_t k = first_block_token; k-- > 0;)
    if (tokens[k].block == kTextToken) return static_cast<int64_t>(k);
  for (size_t k = first_block_token; k < tokens.size(); ++k)
    if (tokens[k].block == kTextToken) return static_cast<int64_t>(k);
  return -1;
}

// The frame's tokens form a ring around the text axis when they all have the same
// mean coordinate m (a plane orthogonal to (1,1,1)) and the same distance from
// (m, m, m). Positions are float32, hence the tolerance.
std::optional<PlotRing> ring_of(const std::vector<PlotToken>& tokens, std::span<const size_t> frame,
                                const Camera& camera) {
  if (frame.size() < 3) return std::nullopt;
  auto mean_of = [&](size_t k) {
    const auto& p = tokens[k].position;
    return (p[0] + p[1] + p[2]) / 3;
  };
  double m_min = mean_of(frame[0]), m_max = m_min, magnitude = 1;
  for (const size_t k : frame) {
    m_min = std::min(m_min, mean_of(k)), m_max = std::max(m_max, mean_of(k));
    for (const double value : tokens[k].position) magnitude = std::max(magnitude, std::fabs(value));
  }
  const double m = (m_min + m_max) / 2;
  double r_min = std::numeric_limits<double>::infinity(), r_max = 0;
  for (const size_t k : frame) {
    const auto& p = tokens[k].position;
    const double r =
        std::sqrt((p[0] - m) * (p[0] - m) + (p[1] - m) * (p[1] - m) + (p[2] - m) * (p[2] - m));
    r_min = std::min(r_min, r), r_max = std::max(r_max, r);
  }
  const double tolerance = 1e-3 * std::max(1.0, r_max) + 1e-5 * magnitude;
  if (r_min <= tolerance || r_max - r_min > tolerance || m_max - m_min > tolerance)
    return std::nullopt;
  return PlotRing{camera.project(m, m, m), (r_min + r_max) / 2, tokens[frame[0]].frame};
}

std::vector<PlotRing> find_rings(const std::vector<PlotToken>& tokens,
                                 const std::vector<size_t>& block_tokens, const Camera& camera) {
  std::vector<PlotRing> rings;
  size_t begin = 0;
  while (begin < block_tokens.size()) {
    size_t end = begin;
    while (end < block_tokens.size() &&
           tokens[block_tokens[end]].frame == tokens[block_tokens[begin]].frame)
      ++end;
    const std::span<const size_t> frame(block_tokens.data() + begin, end - begin);
    if (auto ring = ring_of(tokens, frame, camera)) rings.push_back(*ring);
    begin = end;
  }
  return rings;
}

PanelData collect_panel(const PlotPanel& panel, const Camera& camera) {
  const Positions& pos = *panel.positions;
  PanelData data;
  std::vector<int64_t> block_slot(pos.blocks.size(), -1);  // Positions block -> data.blocks
  std::vector<int64_t> seen_in_block(pos.blocks.size(), 0);
  for (int64_t s = 0; s < pos.seq_len; ++s) {
    const int32_t kind = pos.token_block[static_cast<size_t>(panel.row * pos.seq_len + s)];
    if (kind == kMaskedToken) continue;
    PlotToken token;
    token.position = {pos.at(0, panel.row, s), pos.at(1, panel.row, s), pos.at(2, panel.row, s)};
    token.point = camera.project(token.position[0], token.position[1], token.position[2]);
    token.s = s;
    token.block = kind;
    if (kind == kTextToken) {
      ++data.text_tokens;
    } else {
      const BlockInfo& info = pos.blocks[static_cast<size_t>(kind)];
      if (block_slot[static_cast<size_t>(kind)] < 0) {
        block_slot[static_cast<size_t>(kind)] = static_cast<int64_t>(data.blocks.size());
        const double c = info.anchor;
        data.blocks.push_back({kind, {}, -1, camera.project(c, c, c), {}});
        data.extent.add(data.blocks.back().anchor);
      }
      const int64_t frame_size = std::max<int64_t>(1, info.hm * info.wm);
      token.frame = seen_in_block[static_cast<size_t>(kind)]++ / frame_size;
      data.blocks[static_cast<size_t>(block_slot[static_cast<size_t>(kind)])].tokens.push_back(
          data.tokens.size());
    }
    data.extent.add(token.point);
    data.tokens.push_back(token);
  }
  const Vec2 semi = camera.ring_semi_axes();
  for (PlotBlock& block : data.blocks) {
    block.apex = cone_apex(data.tokens, block.tokens.front());
    block.rings = find_rings(data.tokens, block.tokens, camera);
    for (const PlotRing& ring : block.rings) {
      data.extent.add({ring.centre.x - semi.x * ring.radius, ring.centre.y - semi.y * ring.radius});
      data.extent.add({ring.centre.x + semi.x * ring.radius, ring.centre.y + semi.y * ring.radius});
    }
  }
  return data;
}

// ---------------------------------------------------------- SVG writing ---

// Pixel coordinates with one decimal: sub-pixel precision is invisible and every
// extra digit costs file size. Anything non-finite becomes 0 rather than "nan".
std::string num(double value) {
  if (!std::isfinite(value)) value = 0;
  const double rounded = std::round(value * 10) / 10;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", rounded == 0 ? 0.0 : rounded);
  std::string text = buffer;
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text;
}

// Escapes XML specials and drops control characters XML 1.0 does not allow.
std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(ch) >= 0x20 || ch == '\t') out += ch;
    }
  }
  return out;
}

// SVG text never wraps: cut at a UTF-8 character boundary and add an ellipsis so long
// titles stay inside their panel.
std::string fit_text(std::string_view text, double width_px, double char_width_px) {
  const auto max_chars = static_cast<size_t>(std::max(1.0, width_px / char_width_px));
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;  // continuation byte
    if (++chars > max_chars) return std::string(text.substr(0, i)) + "\u2026";
  }
  return std::string(text);
}

void write_text(std::string& out, double x, double y, double size, std::string_view fill,
                std::string_view text, std::string_view extra = {}) {
  out += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\" fill=\"" +
         std::string(fill) + "\"";
  if (!extra.empty()) out += " " + std::string(extra);
  out += ">" + xml_escape(text) + "</text>\n";
}

std::string_view block_colour(size_t order) { return kPalette[order % kPalette.size()]; }

std::string block_label(const BlockInfo& info) {
  const std::string grid = std::to_string(info.hm) + "x" + std::to_string(info.wm);
  if (info.is_video)
    return "video " + std::to_string(info.grid_index) + ": " + std::to_string(info.t) + "x" + grid;
  return "image " + std::to_string(info.grid_index) + ": " + grid;
}

// --------------------------------------------------------------- layout ---

struct Rect {
  double x = 0, y = 0, width = 0, height = 0;
};

struct PageLayout {
  int columns = 1, rows = 1;
  double panel_width = kPanelWidth, panel_height = kPanelHeight;
  double page_width = 0, page_height = 0;
};

void set_panel_height(PageLayout& layout, double panel_height) {
  layout.panel_height = panel_height;
  layout.page_width =
      2 * kPageMargin + layout.columns * layout.panel_width + (layout.columns - 1) * kPanelGap;
  layout.page_height =
      2 * kPageMargin + layout.rows * layout.panel_height + (layout.rows - 1) * kPanelGap;
}

PageLayout page_layout(size_t panels) {
  PageLayout layout;
  layout.columns = panels == 1 ? 1 : panels <= 4 ? 2 : 3;
  layout.rows = static_cast<int>((panels + static_cast<size_t>(layout.columns) - 1) /
                                 static_cast<size_t>(layout.columns));
  if (panels == 1) layout.panel_width = kSinglePanelWidth, layout.panel_height = kSinglePanelHeight;
  set_panel_height(layout, layout.panel_height);
  return layout;
}

// The legend lists text first, then each block; it wraps into rows and ends in
// "+N more" when a row has more blocks than fit.
struct LegendItem {
  std::string label;
  std::string_view colour;  // of the swatch; empty: no swatch ("+N more")
};

std::vector<LegendItem> legend_items(const PanelData& data, const Positions& pos) {
  std::vector<LegendItem> items;
  if (data.text_tokens > 0)
    items.push_back({"text: " + std::to_string(data.text_tokens), kTextColour});
  for (size_t b = 0; b < data.blocks.size(); ++b)
    items.push_back(
        {block_label(pos.blocks[static_cast<size_t>(data.blocks[b].index)]), block_colour(b)});
  return items;
}

struct PlacedLegendItem {
  LegendItem item;
  double x = 0;
  int row = 0;
};

double legend_item_width(const LegendItem& item) {
  return 14 + static_cast<double>(item.label.size()) * kSmallCharWidth;
}

LegendItem more_item(size_t hidden) { return {"+" + std::to_string(hidden) + " more", {}}; }

// Invariant on the last row: after each item placed there, "+N more" for the rest
// still fits, so it can always take the place of the first item that does not.
std::vector<PlacedLegendItem> place_legend(std::vector<LegendItem> items, double width) {
  std::vector<PlacedLegendItem> placed;
  double x = 0;
  int row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t rest = items.size() - i;
    const double w = legend_item_width(items[i]);
    if (x > 0 && x + w > width) {
      if (row + 1 == kLegendMaxRows) {
        placed.push_back({more_item(rest), x, row});
        return placed;
      }
      x = 0, ++row;
    }
    const bool last_row = row + 1 == kLegendMaxRows;
    if (last_row && rest > 1 &&
        x + w + kLegendItemGap + legend_item_width(more_item(rest - 1)) > width) {
      placed.push_back({more_item(rest), x, row});
      return placed;
    }
    placed.push_back({std::move(items[i]), x, row});
    x += w + kLegendItemGap;
  }
  return placed;
}

int legend_rows(const std::vector<PlacedLegendItem>& placed) {
  return placed.empty() ? 0 : placed.back().row + 1;
}

// Where the parts of one panel go, in panel-local pixels.
struct PanelFrame {
  double width = 0, height = 0;
  Rect plot;    // points live here
  Rect legend;  // bottom left
  Rect scale;   // bottom middle: scale bar
  Rect gizmo;   // bottom right: axis directions
};

double band_height(int legend_row_count) {
  return std::max(kBandMinHeight, legend_row_count * kLegendRowHeight + 2 * kSideMargin);
}

PanelFrame panel_frame(const PageLayout& layout, int legend_row_count) {
  PanelFrame frame;
  frame.width = layout.panel_width;
  frame.height = layout.panel_height;
  const double band = band_height(legend_row_count);
  const double band_top = frame.height - band;
  frame.plot = {kSideMargin, kPlotTop, frame.width - 2 * kSideMargin,
                band_top - kPlotTop - kPlotGap};
  frame.gizmo = {frame.width - kSideMargin - kGizmoBoxWidth, band_top, kGizmoBoxWidth, band};
  frame.scale = {frame.gizmo.x - kScaleBoxWidth, band_top, kScaleBoxWidth, band};
  frame.legend = {kSideMargin + 4, band_top, frame.scale.x - kSideMargin - 8, band};
  return frame;
}

double legend_width(const PageLayout& layout) { return panel_frame(layout, 0).legend.width; }

// ---------------------------------------------------------------- scale ---

// Largest scale (pixels per position unit) that fits the extent into the plot area.
// A flat extent (everything on one line, or one point) is limited by the other
// direction only, or falls back to a fixed scale.
double fitted_scale(const Box& extent, const Rect& plot) {
  const double room_x = std::max(1.0, plot.width - 2 * kPlotPadding);
  const double room_y = std::max(1.0, plot.height - 2 * kPlotPadding);
  double scale = kMaxScale;
  constexpr double kFlat = 1e-9;
  if (extent.width() > kFlat) scale = std::min(scale, room_x / extent.width());
  if (extent.height() > kFlat) scale = std::min(scale, room_y / extent.height());
  if (!std::isfinite(scale) || scale <= 0) scale = kFallbackScale;
  return scale;
}

std::vector<double> panel_scales(const std::vector<double>& fitted) {
  const double smallest = *std::min_element(fitted.begin(), fitted.end());
  const double largest = *std::max_element(fitted.begin(), fitted.end());
  if (largest <= kMaxSharedScaleRatio * smallest)
    return std::vector<double>(fitted.size(), smallest);
  return fitted;  // too different to share: each panel fitted on its own
}

// Long rows are limited by the panel width and leave most of its height empty (rows
// of text are flat): shrink all panels to the tallest content. Scales are kept, as
// they were fitted to the full height and only the empty part is removed.
double compact_panel_height(const std::vector<PanelData>& data,
                            const std::vector<std::vector<PlacedLegendItem>>& legends,
                            const std::vector<double>& scales, double full_height) {
  double needed = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const double plot =
        std::max(kMinPlotHeight, data[i].extent.height() * scales[i] + 2 * kPlotPadding);
    needed = std::max(needed, kPlotTop + plot + kPlotGap + band_height(legend_rows(legends[i])));
  }
  return std::min(full_height, std::ceil(needed));
}

// Maps screen units to panel pixels: centred in the plot area, y flipped.
struct Viewport {
  Rect plot;
  Vec2 centre;
  double scale = 1;
  Vec2 operator()(Vec2 p) const {
    return {plot.x + plot.width / 2 + (p.x - centre.x) * scale,
            plot.y + plot.height / 2 - (p.y - centre.y) * scale};
  }
};

// A round number of text positions (1, 2 or 5 times a power of ten) whose bar is
// between roughly 30 and 110 pixels long.
double scale_bar_positions(double pixels_per_position) {
  const double target = 45 / std::max(pixels_per_position, 1e-9);
  for (double decade = 1e-3; decade < 1e7; decade *= 10)
    for (const double step : {1.0, 2.0, 5.0})
      if (step * decade >= target) return step * decade;
  return 1;
}

// ------------------------------------------------------------- drawing ---

void draw_text_axis(std::string& out, const Viewport& view, const Box& extent) {
  // The text axis passes through the origin's projection at screen y = 0.
  const Vec2 left = view({extent.min_x, 0});
  const Vec2 right = view({extent.max_x, 0});
  if (left.y < view.plot.y || left.y > view.plot.y + view.plot.height) return;
  const double reach = kPlotPadding;  // run past the outermost tokens: it is a line
  out += "<line class=\"text-axis\" x1=\"" + num(std::max(view.plot.x, left.x - reach)) +
         "\" y1=\"" + num(left.y) + "\" x2=\"" +
         num(std::min(view.plot.x + view.plot.width, right.x + reach)) + "\" y2=\"" + num(right.y) +
         "\" stroke=\"" + std::string(kAxisColour) + "\" stroke-width=\"1\"/>\n";
}

void draw_cones(std::string& out, const Viewport& view, const PanelData& data) {
  for (size_t b = 0; b < data.blocks.size(); ++b) {
    const PlotBlock& block = data.blocks[b];
    if (block.apex < 0) continue;
    const Vec2 apex = view(data.tokens[static_cast<size_t>(block.apex)].point);
    const auto count = static_cast<int64_t>(block.tokens.size());
    const int64_t stride = (count + kMaxConeLines - 1) / kMaxConeLines;
    // One path per cone: far smaller than a <line> per token.
    std::string path;
    for (int64_t k = 0; k < count; k += stride) {
      const Vec2 tip = view(data.tokens[block.tokens[static_cast<size_t>(k)]].point);
      // append(), not "M" + ...: GCC 12 warns falsely (-Wrestrict) on that form
      path.append("M").append(num(apex.x)).append(" ").append(num(apex.y));
      path.append("L").append(num(tip.x)).append(" ").append(num(tip.y));
    }
    out += "<path class=\"cone\" d=\"" + path + "\" fill=\"none\" stroke=\"" +
           std::string(block_colour(b)) + "\" stroke-opacity=\"0.3\" stroke-width=\"0.7\"/>\n";
  }
}

void draw_dot(std::string& out, Vec2 p, double radius) {
  out += "<circle cx=\"" + num(p.x) + "\" cy=\"" + num(p.y) + "\" r=\"" + num(radius) + "\"/>\n";
}

// Video frames share the block colour and fade in with time: early frames light.
double frame_opacity(int64_t frame, int64_t frames) {
  if (frames <= 1) return 1;
  return 0.3 + 0.7 * static_cast<double>(std::clamp<int64_t>(frame, 0, frames - 1)) /
                   static_cast<double>(frames - 1);
}

void draw_rings(std::string& out, const Viewport& view, const PanelData& data, const Positions& pos,
                const Camera& camera) {
  const Vec2 semi = camera.ring_semi_axes();
  for (size_t b = 0; b < data.blocks.size(); ++b) {
    const PlotBlock& block = data.blocks[b];
    const int64_t frames = pos.blocks[static_cast<size_t>(block.index)].t;
    for (const PlotRing& ring : block.rings) {
      const Vec2 c = view(ring.centre);
      out += "<ellipse class=\"ring\" cx=\"" + num(c.x) + "\" cy=\"" + num(c.y) + "\" rx=\"" +
             num(semi.x * ring.radius * view.scale) + "\" ry=\"" +
             num(semi.y * ring.radius * view.scale) + "\" fill=\"none\" stroke=\"" +
             std::string(block_colour(b)) + "\" stroke-width=\"1\" stroke-opacity=\"" +
             num(0.6 * frame_opacity(ring.frame, frames)) + "\"/>\n";
    }
  }
}

void draw_block_tokens(std::string& out, const Viewport& view, const PanelData& data,
                       const Positions& pos, double radius) {
  for (size_t b = 0; b < data.blocks.size(); ++b) {
    const PlotBlock& block = data.blocks[b];
    const int64_t frames = std::max<int64_t>(1, pos.blocks[static_cast<size_t>(block.index)].t);
    // A white rim keeps overlapping dots (dense rings, collapsed blocks) apart.
    out += "<g class=\"block-tokens\" fill=\"" + std::string(block_colour(b)) +
           "\" stroke=\"#ffffff\" stroke-width=\"0.6\">\n";
    int64_t open_frame = -1;
    for (const size_t k : block.tokens) {
      const PlotToken& token = data.tokens[k];
      if (frames > 1 && token.frame != open_frame) {
        if (open_frame >= 0) out += "</g>\n";
        open_frame = token.frame;
        out += "<g fill-opacity=\"" + num(frame_opacity(token.frame, frames)) + "\">\n";
      }
      draw_dot(out, view(token.point), radius);
    }
    if (open_frame >= 0) out += "</g>\n";
    out += "</g>\n";
  }
}

// Text goes on top: it is the axis every picture is read against. A cone's apex gets
// a rim in its block's colour so the eye finds where the cone starts.
void draw_text_tokens(std::string& out, const Viewport& view, const PanelData& data,
                      double radius) {
  if (data.text_tokens == 0) return;
  std::vector<int64_t> apex_of(data.tokens.size(), -1);
  for (size_t b = data.blocks.size(); b-- > 0;)  // the first block wins a shared apex
    if (data.blocks[b].apex >= 0) apex_of[static_cast<size_t>(data.blocks[b].apex)] = int64_t(b);
  out += "<g class=\"text-tokens\" fill=\"" + std::string(kTextColour) +
         "\" stroke=\"#ffffff\" stroke-width=\"0.5\">\n";
  for (size_t k = 0; k < data.tokens.size(); ++k) {
    if (data.tokens[k].block != kTextToken) continue;
    if (apex_of[k] < 0) {
      draw_dot(out, view(data.tokens[k].point), radius);
      continue;
    }
    const Vec2 p = view(data.tokens[k].point);
    out += "<circle cx=\"" + num(p.x) + "\" cy=\"" + num(p.y) + "\" r=\"" + num(radius + 1) +
           "\" stroke=\"" + std::string(block_colour(static_cast<size_t>(apex_of[k]))) +
           "\" stroke-width=\"2\"/>\n";
  }
  out += "</g>\n";
}

void draw_anchors(std::string& out, const Viewport& view, const PanelData& data) {
  constexpr double kArm = 4;
  for (size_t b = 0; b < data.blocks.size(); ++b) {
    const Vec2 c = view(data.blocks[b].anchor);
    out += "<path class=\"anchor\" d=\"M" + num(c.x - kArm) + " " + num(c.y - kArm) + "L" +
           num(c.x + kArm) + " " + num(c.y + kArm) + "M" + num(c.x - kArm) + " " + num(c.y + kArm) +
           "L" + num(c.x + kArm) + " " + num(c.y - kArm) + "\" stroke=\"" +
           std::string(block_colour(b)) + "\" stroke-width=\"1.6\"/>\n";
  }
}

void draw_legend(std::string& out, const Rect& area, const std::vector<PlacedLegendItem>& placed) {
  const double top = area.y + kSideMargin;
  for (const PlacedLegendItem& entry : placed) {
    const double x = area.x + entry.x;
    const double y = top + entry.row * kLegendRowHeight;
    if (!entry.item.colour.empty())
      out += "<rect x=\"" + num(x) + "\" y=\"" + num(y + 2) +
             "\" width=\"9\" height=\"9\" fill=\"" + std::string(entry.item.colour) + "\"/>\n";
    write_text(out, x + 13, y + 10, kSmallFontSize, kTextColour, entry.item.label);
  }
}

void draw_scale_bar(std::string& out, const Rect& area, double pixels_per_position) {
  const double positions = scale_bar_positions(pixels_per_position);
  const double length = positions * pixels_per_position;
  const double y = area.y + area.height / 2 + 6;
  const double x0 = area.x + (area.width - length) / 2;
  const std::string ys = num(y);
  out += "<path d=\"M" + num(x0) + " " + num(y - 3) + "V" + num(y + 3) + "M" + num(x0) + " " + ys +
         "H" + num(x0 + length) + "M" + num(x0 + length) + " " + num(y - 3) + "V" + num(y + 3) +
         "\" stroke=\"" + std::string(kMutedTextColour) +
         "\" stroke-width=\"1.2\" fill=\"none\"/>\n";
  char label[48];
  std::snprintf(label, sizeof label, "%g position%s", positions, positions == 1 ? "" : "s");
  write_text(out, area.x + area.width / 2, y - 7, kSmallFontSize, kMutedTextColour, label,
             "text-anchor=\"middle\"");
}

// Unit t, h and w drawn through the same camera: shows which way each axis runs.
void draw_gizmo(std::string& out, const Rect& area, const Camera& camera) {
  const Vec2 origin{area.x + area.width / 2 - 6, area.y + area.height / 2 + 2};
  struct Axis {
    const char* name;
    Vec2 dir;
  };
  const std::array<Axis, 3> axes = {Axis{"t", camera.project(1, 0, 0)},
                                    Axis{"h", camera.project(0, 1, 0)},
                                    Axis{"w", camera.project(0, 0, 1)}};
  double longest = 0;
  for (const Axis& axis : axes) longest = std::max(longest, std::hypot(axis.dir.x, axis.dir.y));
  const double unit = kGizmoArrowLength / std::max(longest, 1e-9);
  for (const Axis& axis : axes) {
    const Vec2 tip{origin.x + axis.dir.x * unit, origin.y - axis.dir.y * unit};
    out += "<line x1=\"" + num(origin.x) + "\" y1=\"" + num(origin.y) + "\" x2=\"" + num(tip.x) +
           "\" y2=\"" + num(tip.y) + "\" stroke=\"" + std::string(kMutedTextColour) +
           "\" stroke-width=\"1.3\"/>\n";
    const double norm = std::max(std::hypot(axis.dir.x, axis.dir.y), 1e-9);
    const Vec2 label{tip.x + axis.dir.x / norm * 7, tip.y - axis.dir.y / norm * 7 + 3.5};
    write_text(out, label.x, label.y, kSmallFontSize, kTextColour, axis.name,
               "text-anchor=\"middle\" font-style=\"italic\"");
  }
}

void draw_panel(std::string& out, const PlotPanel& panel, const PanelData& data,
                const PanelFrame& frame, const std::vector<PlacedLegendItem>& legend, Vec2 offset,
                double scale, const Camera& camera) {
  out +=
      "<g class=\"panel\" transform=\"translate(" + num(offset.x) + "," + num(offset.y) + ")\">\n";
  out += "<rect x=\"0.5\" y=\"0.5\" width=\"" + num(frame.width - 1) + "\" height=\"" +
         num(frame.height - 1) + "\" rx=\"6\" fill=\"#ffffff\" stroke=\"#d0d0d0\"/>\n";
  const double text_width = frame.width - 2 * kSideMargin - 8;
  write_text(out, kSideMargin + 4, kTitleBaseline, kTitleFontSize, kTextColour,
             fit_text(panel.title, text_width, kTitleCharWidth), "font-weight=\"bold\"");
  if (!panel.subtitle.empty())
    write_text(out, kSideMargin + 4, kSubtitleBaseline, kSubtitleFontSize, kMutedTextColour,
               fit_text(panel.subtitle, text_width, kSubtitleCharWidth));

  const Viewport view{frame.plot, data.extent.centre(), scale};
  if (data.tokens.empty()) {
    write_text(out, frame.plot.x + frame.plot.width / 2, frame.plot.y + frame.plot.height / 2,
               kSubtitleFontSize, kMutedTextColour, "(no unmasked tokens)",
               "text-anchor=\"middle\"");
  } else {
    draw_text_axis(out, view, data.extent);
    draw_rings(out, view, data, *panel.positions, camera);
    draw_cones(out, view, data);
    draw_anchors(out, view, data);  // under the dots: unordered blocks sit on their anchor
    // Dots shrink with the scale so neighbouring text tokens stay apart.
    const double step = scale * camera.text_step();
    const double radius = std::clamp(0.3 * step, 1.6, 4.5);
    draw_block_tokens(out, view, data, *panel.positions, radius * 1.15);
    draw_text_tokens(out, view, data, radius);
  }
  draw_legend(out, frame.legend, legend);
  draw_scale_bar(out, frame.scale, scale * camera.text_step());
  draw_gizmo(out, frame.gizmo, camera);
  out += "</g>\n";
}

}  // namespace

std::string render_svg(std::span<const PlotPanel> panels) {
  if (panels.empty()) throw Error("render_svg: no panels to draw");
  for (size_t i = 0; i < panels.size(); ++i) validate_panel(panels[i], i);

  const Camera camera;
  PageLayout layout = page_layout(panels.size());
  std::vector<PanelData> data;
  std::vector<std::vector<PlacedLegendItem>> legends;
  std::vector<PanelFrame> frames;
  std::vector<double> fitted;
  for (const PlotPanel& panel : panels) {
    data.push_back(collect_panel(panel, camera));
    legends.push_back(
        place_legend(legend_items(data.back(), *panel.positions), legend_width(layout)));
    frames.push_back(panel_frame(layout, legend_rows(legends.back())));
    fitted.push_back(fitted_scale(data.back().extent, frames.back().plot));
  }
  const std::vector<double> scales = panel_scales(fitted);
  set_panel_height(layout, compact_panel_height(data, legends, scales, layout.panel_height));
  for (size_t i = 0; i < panels.size(); ++i)
    frames[i] = panel_frame(layout, legend_rows(legends[i]));

  std::string out;
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" +
         num(layout.page_width) + "\" height=\"" + num(layout.page_height) + "\" viewBox=\"0 0 " +
         num(layout.page_width) + " " + num(layout.page_height) +
         "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  out += "<title>circlerope positions</title>\n";
  const bool shared = std::all_of(scales.begin(), scales.end(),
                                  [&](double scale) { return scale == scales.front(); });
  out += shared ? "<desc>All panels share one scale.</desc>\n"
                : "<desc>Panels are scaled separately: their extents differ too much to share "
                  "one scale. Compare the scale bars.</desc>\n";
  // Opaque page: a transparent one shows dark text on GitHub's dark theme.
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#f7f7f7\"/>\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    const auto column = static_cast<int>(i % static_cast<size_t>(layout.columns));
    const auto row = static_cast<int>(i / static_cast<size_t>(layout.columns));
    const Vec2 offset{kPageMargin + column * (layout.panel_width + kPanelGap),
                      kPageMargin + row * (layout.panel_height + kPanelGap)};
    draw_panel(out, panels[i], data[i], frames[i], legends[i], offset, scales[i], camera);
  }
  out += "</svg>\n";
  return out;
}

void check_svg_path(const std::string& option, const std::string& path) {
  if (path.size() < 5 || path.compare(path.size() - 4, 4, ".svg") != 0)
    throw Error(option + " " + detail::quoted(path) + ": pictures are written as SVG; give a file name ending in .svg");
  // Opened for appending, which changes nothing in a file that exists; one made for the probe
  // is removed again. Asking access() instead would let root through where the write fails.
  std::error_code ignored;
  const bool existed = std::filesystem::exists(path, ignored);
  if (!std::ofstream(path, std::ios::binary | std::ios::app))
    throw Error(option + ": cannot write " + detail::quoted(path));
  if (!existed) std::filesystem::remove(path, ignored);
}

void write_svg(const std::string& option, const std::string& path, const std::string& svg) {
  check_svg_path(option, path);
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << svg) || !out.flush()) throw Error(option + ": cannot write " + detail::quoted(path));
}

}  // namespace circlerope::cli
