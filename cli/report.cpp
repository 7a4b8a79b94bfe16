#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "circlerope/circle.h"

namespace circlerope::cli {

using nlohmann::json;

std::string fixed(double value, int decimals) {
  if (!std::isfinite(value)) return "n/a";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

namespace {

std::string pad(const std::string& s, size_t width, bool left_align = false) {
  if (s.size() >= width) return s;
  return left_align ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

std::string grid_text(const BlockInfo& b) {
  std::string g = std::to_string(b.hm) + "x" + std::to_string(b.wm);
  return b.is_video ? std::to_string(b.t) + "x" + g : g;
}

std::string block_name(const BlockInfo& b) {
  return std::string(b.is_video ? "video " : "image ") + std::to_string(b.grid_index);
}

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

std::string describe(const Geometry& g) {
  std::string s(to_string(g.scheme));
  if (g.scheme != Scheme::circle) return s;
  const CircleConfig& c = g.circle;
  std::ostringstream o;
  o << s << " (radius ";
  if (c.radius_mode == RadiusMode::fixed) o << c.radius;
  else if (c.radius_scale == 1.0) o << "auto";
  else o << "auto-" << c.radius_scale;
  o << ", alpha " << c.alpha;
  if (c.move_to_origin) o << ", move_to_origin";
  if (c.dff_rate > 0) o << ", dff_rate " << c.dff_rate;
  if (c.move_to_positive == PositiveShift::automatic) o << ", move_to_positive auto";
  if (c.move_to_positive == PositiveShift::offset) o << ", move_to_positive " << c.positive_offset;
  o << ")";
  return o.str();
}

std::string positions_table(const Positions& p, const Geometry& geometry, int64_t row) {
  std::ostringstream o;
  o << "# " << describe(geometry) << ", row " << row << " of " << p.batch << ", " << p.seq_len
    << " tokens, rope_delta " << fixed(p.rope_deltas.at(static_cast<size_t>(row)), 4) << "\n";
  o << pad("token", 6) << "  " << pad("kind", 24, true) << pad("t", 11) << pad("h", 11) << pad("w", 11)
    << "\n";
  int32_t current = kTextToken;
  int64_t j = 0;  // index of the token within its block; padding may sit inside a block
  for (int64_t s = 0; s < p.seq_len; ++s) {
    const int32_t k = p.token_block[static_cast<size_t>(row * p.seq_len + s)];
    std::string kind = "text";
    if (k == kMaskedToken) {
      kind = "(padding)";
    } else if (k >= 0) {
      j = k == current ? j + 1 : 0;
      current = k;
      const BlockInfo& b = p.blocks[static_cast<size_t>(k)];
      const int64_t cells = b.hm * b.wm;
      const int64_t f = j / cells, r = (j % cells) / b.wm, q = j % b.wm;
      kind = block_name(b) + (b.is_video ? " f" + std::to_string(f) : std::string()) + " (" +
             std::to_string(r) + "," + std::to_string(q) + ")";
    }
    o << pad(std::to_string(s), 6) << "  " << pad(kind, 24, true) << pad(fixed(p.at(0, row, s), 4), 11)
      << pad(fixed(p.at(1, row, s), 4), 11) << pad(fixed(p.at(2, row, s), 4), 11) << "\n";
  }
  return o.str();
}

std::string blocks_table(const Positions& p, const Geometry& geometry) {
  std::ostringstream o;
  o << pad("row", 4) << "  " << pad("block", 9, true) << pad("grid", 8, true) << pad("tokens", 7)
    << pad("first", 7) << pad("anchor", 10) << "   " << pad("t range", 19, true) << pad("h range", 19, true)
    << pad("w range", 19, true);
  if (geometry.scheme == Scheme::circle) o << pad("radius", 8);
  o << "\n";
  for (const BlockInfo& b : p.blocks) {
    const auto id = static_cast<int32_t>(&b - p.blocks.data());
    double lo[3], hi[3];
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::numeric_limits<double>::infinity();
      hi[a] = -lo[a];
      for (int64_t s = b.begin; s < p.seq_len; ++s) {  // padding may sit inside a block
        if (p.token_block[static_cast<size_t>(b.row * p.seq_len + s)] != id) continue;
        lo[a] = std::min(lo[a], double(p.at(a, b.row, s)));
        hi[a] = std::max(hi[a], double(p.at(a, b.row, s)));
      }
    }
    o << pad(std::to_string(b.row), 4) << "  " << pad(block_name(b), 9, true) << pad(grid_text(b), 8, true)
      << pad(std::to_string(b.tokens()), 7) << pad(std::to_string(b.begin), 7) << pad(fixed(b.anchor, 3), 10)
      << "   ";
    for (int a = 0; a < 3; ++a) o << pad(fixed(lo[a], 2) + " .. " + fixed(hi[a], 2), 19, true);
    if (geometry.scheme == Scheme::circle) o << pad(fixed(circle_radius(b.hm, b.wm, geometry.circle), 3), 8);
    o << "\n";
  }
  return o.str();
}

std::string metrics_table(const std::vector<SchemeMetrics>& rows) {
  std::ostringstream o;
  o << pad("scheme", 11, true) << pad("PTD", 10) << pad("RoPE kernel dev", 17) << "   per block (PTD / kernel dev)\n";
  for (const SchemeMetrics& r : rows) {
    o << pad(std::string(to_string(r.geometry.scheme)), 11, true) << pad(fixed(r.metrics.ptd, 4), 10)
      << pad(fixed(r.metrics.rope_kernel_deviation, 4), 17) << "   ";
    for (size_t i = 0; i < r.metrics.blocks.size(); ++i)
      o << (i ? ", " : "") << fixed(r.metrics.blocks[i].ptd, 3) << " / "
        << fixed(r.metrics.blocks[i].rope_kernel_deviation, 3);
    o << "\n";
  }
  return o.str();
}

json metrics_json(const std::vector<SchemeMetrics>& rows) {
  json out = json::object();
  for (const SchemeMetrics& r : rows) {
    json blocks = json::array();
    for (const BlockMetrics& b : r.metrics.blocks) {
      const BlockInfo& info = r.positions.blocks.at(static_cast<size_t>(b.block));
      blocks.push_back({{"row", b.row},
                        {"block", b.block},
                        {"kind", info.is_video ? "video" : "image"},
                        {"grid", {info.t, info.hm, info.wm}},
                        {"text_tokens", b.text_tokens},
                        {"vision_tokens", b.vision_tokens},
                        {"ptd", finite_or_null(b.ptd)},
                        {"rope_kernel_deviation", finite_or_null(b.rope_kernel_deviation)}});
    }
    json per_row = json::array();
    for (const RowMetrics& m : r.metrics.rows)
      per_row.push_back({{"row", m.row}, {"blocks", m.blocks}, {"ptd", m.ptd},
                         {"rope_kernel_deviation", m.rope_kernel_deviation}});
    out[std::string(to_string(r.geometry.scheme))] = {
        {"ptd", finite_or_null(r.metrics.ptd)},
        {"rope_kernel_deviation", finite_or_null(r.metrics.rope_kernel_deviation)},
        {"blocks", blocks},
        {"rows", per_row}};
  }
  return out;
}

}  // namespace circlerope::cli
