// Internal to the PyTorch operators (torch/) and the Python module (python/): configs cross
// the Python boundary as plain scalars, in one order, which these functions turn into the
// core's structs. Each validates with the core's own checks, so every front end reports the
// same message for the same bad value.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/rotary.h"

namespace circlerope::args {

// radius_mode: "fixed" (radius) | "auto" (radius_scale * |max|); positive: "none" | "auto" |
// "offset" (positive_offset; 0 means no shift, like the reference).
inline CircleConfig circle(const std::string& radius_mode, double radius, double radius_scale,
                           double alpha, bool move_to_origin, double dff_rate,
                           const std::string& positive, double positive_offset) {
  CircleConfig c;
  if (radius_mode == "fixed") c.radius_mode = RadiusMode::fixed;
  else if (radius_mode == "auto") c.radius_mode = RadiusMode::automatic;
  else throw Error("circle: radius mode '" + radius_mode + "' (expected fixed or auto)");
  c.radius = radius;
  c.radius_scale = radius_scale;
  c.alpha = alpha;
  c.move_to_origin = move_to_origin;
  c.dff_rate = dff_rate;
  if (positive == "none") c.move_to_positive = PositiveShift::none;
  else if (positive == "auto") c.move_to_positive = PositiveShift::automatic;
  else if (positive == "offset")
    c.move_to_positive = positive_offset == 0 ? PositiveShift::none : PositiveShift::offset;
  else throw Error("circle: move_to_positive mode '" + positive + "' (expected none, auto or offset)");
  c.positive_offset = positive_offset;
  validate(c);
  return c;
}

inline VisionConfig vision(std::int64_t spatial_merge_size, double tokens_per_second,
                           std::int64_t vision_start_token_id, std::int64_t image_token_id,
                           std::int64_t video_token_id, const std::string& time) {
  VisionConfig v;
  v.spatial_merge_size = spatial_merge_size;
  v.tokens_per_second = tokens_per_second;
  v.vision_start_token_id = vision_start_token_id;
  v.image_token_id = image_token_id;
  v.video_token_id = video_token_id;
  if (time == "seconds") v.time = TimeMode::seconds;
  else if (time == "index") v.time = TimeMode::index;
  else throw Error("vision: time '" + time + "' (expected seconds or index)");
  validate(v);
  return v;
}

inline RotaryConfig rotary(double theta, std::int64_t rotary_dim, const std::string& layout,
                           const std::vector<std::int64_t>& sections) {
  RotaryConfig r;
  r.theta = theta;
  // Only the narrowing to int is checked here; validate() judges the values themselves.
  auto narrow = [](std::int64_t v, const std::string& what) {
    if (v < INT32_MIN || v > INT32_MAX) throw Error("rotary: " + what + " " + std::to_string(v) + " is out of range");
    return static_cast<int>(v);
  };
  r.rotary_dim = narrow(rotary_dim, "rotary_dim");
  r.layout = parse_frequency_layout(layout);
  if (sections.size() != 3)
    throw Error("rotary: sections must have 3 entries [t, h, w], got " +
                std::to_string(sections.size()));
  for (std::size_t i = 0; i < 3; ++i) r.sections[i] = narrow(sections[i], "section " + std::to_string(i));
  validate(r);
  return r;
}

}  // namespace circlerope::args
