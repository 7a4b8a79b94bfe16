// circlerope front end — pictures of 3-D positions as standalone SVG.
//
// Each panel draws one row of a Positions object: every unmasked token is the point
// (t, h, w) seen through one orthographic camera shared by all panels of a call. The
// camera looks slightly off the plane orthogonal to the text direction (1,1,1), so
//
//   - the text axis (1,1,1) is a horizontal line running left to right,
//   - a Circle-RoPE ring (a circle in the plane orthogonal to (1,1,1)) is an upright
//     ellipse, and the faint lines from a text token to a block's tokens form a cone,
//   - an M-RoPE grid is a tilted h x w lattice, vanilla is one line, unordered one dot.
//
// The document uses only SVG 1.1 basics (no scripts, no external fonts or images), so
// browsers, image viewers, rsvg-convert and GitHub READMEs all render it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "circlerope/positions.h"

namespace circlerope::cli {

struct PlotPanel {
  std::string title;                     // e.g. "circle"
  std::string subtitle;                  // e.g. "PTD 0.000 · RoPE kernel dev 0.231"
  const Positions* positions = nullptr;  // must have token_block/blocks (rope_index or layout_positions)
  int64_t row = 0;                       // which row of the batch to draw
};

// A standalone SVG document with one panel per entry, laid out in a grid (1 panel:
// one picture; 2: two columns; 3-4: 2 x 2; more: three columns).
//
// The document holds exactly one <circle> element per unmasked token of every panel
// (text and vision tokens alike), nothing else is drawn as a <circle>.
//
// Panels share one scale (so schemes can be compared by size) unless their extents
// differ by more than a factor of 2; then each panel is fitted on its own. Every
// panel carries a scale bar ("N positions" along the text axis) either way.
//
// Throws circlerope::Error if `panels` is empty, a panel has no positions, its row is
// out of range, or the positions lack token_block (or it does not match the blocks).
std::string render_svg(std::span<const PlotPanel> panels);

// Pictures are SVG files: throws Error naming `option` unless `path` ends in .svg and can be
// written (an existing file is left as it is). Check before long work, so that a typo or a
// missing directory fails at once instead of after a benchmark's progress lines.
void check_svg_path(const std::string& option, const std::string& path);
// check_svg_path, then writes `svg` to `path` (Error if it cannot).
void write_svg(const std::string& option, const std::string& path, const std::string& svg);

}  // namespace circlerope::cli
