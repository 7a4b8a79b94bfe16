// circlerope front end — the JSON request of `circlerope positions --request`
// (format: docs/spec.md) and the JSON of positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
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
// Limits of a request, checked while it is read and parsed (errors name them): its size, how
// deep arrays and objects nest (a request needs 3 levels), and how many values it holds
// (input_ids and attention_mask of kMaxTokens tokens, and room for the rest). Beyond them the
// core's kMaxTokens applies.
inline constexpr std::size_t kMaxRequestBytes = std::size_t{64} << 20;
inline constexpr int kMaxJsonDepth = 32;
inline constexpr std::size_t kMaxRequestValues = 2 * static_cast<std::size_t>(kMaxTokens) + (std::size_t{1} << 20);

// Text -> request; a JSON syntax error becomes an Error that says where. Refused: a NUL byte,
// a key twice in one object, integers beyond int64, and anything beyond the limits above.
Request parse_request_text(const std::string& text);
// Reads a request from `in` (a file, stdin), checking the size and for NUL bytes as it reads,
// so that /dev/zero or a huge file fails within the first bytes beyond the limit. `name`
// names the source in messages.
std::string read_request(std::istream& in, const std::string& name);

// {"position_ids": [3][B][S], "rope_deltas": [B]} (+ "decode_position_ids"
// [3][B][decode] when decode > 0: the next `decode` cache positions), one line, streamed to
// `out`. Throws before writing anything if `decode` is invalid.
// Under a compat mode (Positions::compat), positions of the integer schemes are written as
// JSON integers and decode positions follow that mode's rule (next_positions).
void write_positions_json(std::ostream& out, const Positions& positions, int64_t decode = 0);

}  // namespace circlerope::cli
