// circlerope front end — human-readable tables and the metrics JSON.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "circlerope/ptd.h"

namespace circlerope::cli {

// "circle (radius 10, alpha 0.5, move_to_origin)" and the like.
std::string describe(const Geometry& geometry);

// One line per token of row `row`: index, what it is, t, h, w.
std::string positions_table(const Positions& positions, const Geometry& geometry, int64_t row = 0);

// One line per vision block: grid, anchor, range of each axis, radius under circle.
std::string blocks_table(const Positions& positions, const Geometry& geometry);

// One scheme's positions of an input and their metrics.
struct SchemeMetrics {
  Geometry geometry;
  Positions positions;
  CouplingMetrics metrics;
};

// Scheme | PTD | RoPE kernel deviation, then the per-block values.
std::string metrics_table(const std::vector<SchemeMetrics>& rows);
// {"vanilla": {"ptd": .., "rope_kernel_deviation": .., "blocks": [..], "rows": [..]}, ..}
nlohmann::json metrics_json(const std::vector<SchemeMetrics>& rows);

// "12.3" / "n/a" for NaN.
std::string fixed(double value, int decimals);

}  // namespace circlerope::cli
