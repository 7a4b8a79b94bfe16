// circlerope front end — the JSON request of `circlerope positions --request`
// (format: ../shared/golden/README.md) and the JSON of positions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "circlerope/positions.h"

namespace circlerope::cli {

// A parsed request owns its arrays; input() lends them to the core.
struct Request {
  Geometry geometry;
  VisionConfig vision;
  int64_t batch = 0, seq_len = 0;
  std::vector<int64_t> input_ids, attention_mask;
  std::vector<GridTHW> image_grid_thw, video_grid_thw;
  std::vector<double> second_per_grid_ts;

  RopeIndexInput input() const;
};

// The "circle" object with the reference's meaning of absent keys
// (move_to_origin, dff_rate and move_to_positive off, alpha 0.5); `radius` is
// required. Throws Error("request.circle.<key>: ...").
CircleConfig parse_circle_config(const nlohmann::json& circle);

// The whole request. Unknown keys are errors (they are usually typos). A
// request without a "circle" object (or null) under scheme circle gets the
// paper's setting (CircleConfig{}).
Request parse_request(const nlohmann::json& request);
// Text -> request; a JSON syntax error becomes an Error that says where.
Request parse_request_text(const std::string& text);

// {"position_ids": [3][B][S], "rope_deltas": [B]} (+ "decode_position_ids"
// [3][B][decode] when decode > 0: the next `decode` cache positions).
nlohmann::json positions_json(const Positions& positions, int64_t decode = 0);

}  // namespace circlerope::cli
