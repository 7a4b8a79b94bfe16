// circlerope — Alternating Geometry Encoding (docs/spec.md §6): a geometry per layer.
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

// Most layers a plan may have (the reference hard-codes 36; the limit only guards against
// absurd allocations).
inline constexpr int kMaxLayers = 100000;

// A geometry per layer, valid by construction: the constructor is the only way to make one
// (a hand-built plan could be indexed out of bounds), and the layer count is required.
class AgePlan {
 public:
  // `spec`: all | lower | upper | alternate | strategy_1..4 | a pattern of C/M/V/U letters of
  // length <= layers, repeated; layers in [1, kMaxLayers]. Throws Error for anything else.
  AgePlan(std::string_view spec, std::int64_t layers);

  int layers() const { return static_cast<int>(layer_geometry_.size()); }
  const std::vector<Scheme>& schemes() const { return schemes_; }  // distinct, in order of first use
  // Index into schemes() of layer `layer`; throws Error for a layer outside [0, layers()).
  int layer_geometry(int layer) const;
  Scheme layer_scheme(int layer) const { return schemes_[static_cast<size_t>(layer_geometry(layer))]; }
  std::string pattern() const;  // one letter per layer, e.g. "CMCM"

 private:
  std::vector<Scheme> schemes_;
  std::vector<int> layer_geometry_;  // [layers]: index into schemes_
};

// The same as AgePlan(spec, layers).
AgePlan make_age_plan(std::string_view spec, int layers);

// Positions and deltas of each distinct geometry, computed once each.
struct AgePositions {
  AgePlan plan;
  std::vector<Positions> geometries;  // parallel to plan.schemes()
  // Throws Error for a layer outside the plan, or geometries that do not match the plan.
  const Positions& layer(int l) const;
};

// Circle layers use `circle`; the other schemes ignore it. Decoding positions
// of a layer come from that layer's own rope_deltas (the reference uses the
// Circle-RoPE deltas for every layer; see docs/explanation/differences.md).
AgePositions age_rope_index(const RopeIndexInput& input, const VisionConfig& vision,
                            const AgePlan& plan, const CircleConfig& circle);

}  // namespace circlerope
