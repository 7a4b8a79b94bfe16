// circlerope — Alternating Geometry Encoding (SPEC 6): a geometry per layer.
//
//   plan        L = 6     reference name
//   all         CCCCCC    strategy_1 (and the reference's fallback)
//   lower       CCCMMM    strategy_2
//   upper       MMMCCC    strategy_3
//   alternate   CMCMCM    strategy_4 (the paper's best)
//   "CMM"       CMMCMM    a custom pattern, repeated; letters C M V U
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "circlerope/positions.h"

namespace circlerope {

struct AgePlan {
  std::vector<Scheme> schemes;      // distinct schemes, in order of first use
  std::vector<int> layer_geometry;  // [layers]: index into `schemes`
  int layers() const { return static_cast<int>(layer_geometry.size()); }
  Scheme layer_scheme(int layer) const;
  std::string pattern() const;  // one letter per layer, e.g. "CMCM"
};

// `spec`: all | lower | upper | alternate | strategy_1..4 | a pattern of C/M/V/U
// letters of length <= layers, repeated. Throws Error for anything else.
AgePlan make_age_plan(std::string_view spec, int layers);

// Positions and deltas of each distinct geometry, computed once each.
struct AgePositions {
  AgePlan plan;
  std::vector<Positions> geometries;  // parallel to plan.schemes
  const Positions& layer(int l) const;
};

// Circle layers use `circle`; the other schemes ignore it. Decoding positions
// of a layer come from that layer's own rope_deltas (the reference uses the
// Circle-RoPE deltas for every layer; see README "Deliberate differences").
AgePositions age_rope_index(const RopeIndexInput& input, const VisionConfig& vision,
                            const AgePlan& plan, const CircleConfig& circle);

}  // namespace circlerope
