#include "request.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string_view>

#include <nlohmann/json.hpp>

namespace circlerope::cli {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw Error("request." + where + ": " + what);
}

std::string shown(const json& value) {
  std::string s = value.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

void only_keys(const json& object, const std::string& where,
               std::initializer_list<std::string_view> keys) {
  if (!object.is_object()) bad(where.empty() ? "(top level)" : where, "expected a JSON object, got " + shown(object));
  for (const auto& [key, value] : object.items()) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    std::string list;  // built only for the message
    for (std::string_view k : keys) list.append(list.empty() ? "" : ", ").append(k);
    bad(where.empty() ? key : where + "." + key, "unknown key (expected one of: " + list + ")");
  }
}

int64_t integer(const json& v, const std::string& where) {
  if (!v.is_number_integer()) bad(where, "expected an integer, got " + shown(v));
  return v.get<int64_t>();
}

double number(const json& v, const std::string& where) {
  if (!v.is_number()) bad(where, "expected a number, got " + shown(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) bad(where, "expected a finite number (got " + std::to_string(d) + ")");
  return d;
}

// [[...], ...] of integers with equal row lengths.
std::vector<int64_t> matrix(const json& v, const std::string& where, int64_t& rows, int64_t& cols) {
  if (!v.is_array()) bad(where, "expected an array of rows, got " + shown(v));
  std::vector<int64_t> out;
  rows = static_cast<int64_t>(v.size());
  cols = -1;
  for (size_t r = 0; r < v.size(); ++r) {
    const std::string row_where = where + "[" + std::to_string(r) + "]";
    if (!v[r].is_array()) bad(row_where, "expected an array of integers, got " + shown(v[r]));
    if (cols >= 0 && static_cast<int64_t>(v[r].size()) != cols)
      bad(row_where, "has " + std::to_string(v[r].size()) + " values but row 0 has " + std::to_string(cols));
    cols = static_cast<int64_t>(v[r].size());
    for (size_t c = 0; c < v[r].size(); ++c)
      out.push_back(integer(v[r][c], row_where + "[" + std::to_string(c) + "]"));
  }
  if (cols < 0) cols = 0;
  return out;
}

std::vector<GridTHW> grids(const json& request, const char* key) {
  std::vector<GridTHW> out;
  if (!request.contains(key) || request[key].is_null()) return out;
  const json& v = request[key];
  if (!v.is_array()) bad(key, "expected an array of [t, h, w], got " + shown(v));
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!v[i].is_array() || v[i].size() != 3) bad(where, "expected [t, h, w], got " + shown(v[i]));
    out.push_back({integer(v[i][0], where + "[0]"), integer(v[i][1], where + "[1]"),
                   integer(v[i][2], where + "[2]")});
  }
  return out;
}

VisionConfig parse_vision(const json& v) {
  VisionConfig out;
  if (v.is_null()) return out;
  only_keys(v, "vision",
            {"spatial_merge_size", "tokens_per_second", "vision_start_token_id", "image_token_id",
             "video_token_id", "time"});
  auto read_int = [&](const char* key, int64_t& field) {
    if (v.contains(key)) field = integer(v[key], std::string("vision.") + key);
  };
  read_int("spatial_merge_size", out.spatial_merge_size);
  read_int("vision_start_token_id", out.vision_start_token_id);
  read_int("image_token_id", out.image_token_id);
  read_int("video_token_id", out.video_token_id);
  if (v.contains("tokens_per_second"))
    out.tokens_per_second = number(v["tokens_per_second"], "vision.tokens_per_second");
  if (v.contains("time")) {
    const json& t = v["time"];
    if (t == "seconds") out.time = TimeMode::seconds;
    else if (t == "index") out.time = TimeMode::index;
    else bad("vision.time", "expected \"seconds\" (Qwen2.5-VL) or \"index\" (Qwen2-VL), got " + shown(t));
  }
  try {
    validate(out);
  } catch (const Error& e) {
    bad("vision", e.what());
  }
  return out;
}

}  // namespace

CircleConfig parse_circle_config(const json& c) {
  only_keys(c, "circle",
            {"radius", "alpha", "method", "move_to_origin", "dff_rate", "move_to_positive"});
  CircleConfig out;
  out.move_to_origin = false;  // the reference's config.get(..., False)
  if (!c.contains("radius")) bad("circle.radius", "missing (a number > 0, \"auto\" or \"auto-k\")");
  const json& r = c["radius"];
  if (r.is_string()) {
    const std::string s = r.get<std::string>();
    out.radius_mode = RadiusMode::automatic;
    if (s != "auto") {
      size_t used = 0;
      try {
        if (s.rfind("auto-", 0) != 0) throw 0;
        out.radius_scale = std::stod(s.substr(5), &used);
        if (used != s.size() - 5) throw 0;
      } catch (...) {
        bad("circle.radius", "expected a number, \"auto\" or \"auto-k\" with a number k, got " + shown(r));
      }
    }
  } else {
    out.radius = number(r, "circle.radius");
  }
  if (c.contains("alpha")) out.alpha = number(c["alpha"], "circle.alpha");
  if (c.contains("method") && c["method"] != "circle")
    bad("circle.method", "only \"circle\" is supported, got " + shown(c["method"]));
  if (c.contains("move_to_origin")) {
    const json& m = c["move_to_origin"];
    if (m.is_boolean()) out.move_to_origin = m.get<bool>();
    else if (m.is_number_integer() && (m == 0 || m == 1)) out.move_to_origin = m == 1;
    else bad("circle.move_to_origin", "expected true or false, got " + shown(m));
  }
  if (c.contains("dff_rate")) {
    const json& d = c["dff_rate"];
    if (d.is_boolean()) out.dff_rate = d.get<bool>() ? 1.0 : 0.0;  // true means beta = 1
    else if (!d.is_null()) out.dff_rate = number(d, "circle.dff_rate");
  }
  if (c.contains("move_to_positive")) {
    const json& p = c["move_to_positive"];
    if (p == false || p.is_null()) {
    } else if (p == "auto") {
      out.move_to_positive = PositiveShift::automatic;
    } else if (p.is_number() && !p.is_boolean()) {
      out.positive_offset = number(p, "circle.move_to_positive");
      // the reference's `if move_to_positive:` skips a 0 entirely
      out.move_to_positive = out.positive_offset == 0 ? PositiveShift::none : PositiveShift::offset;
    } else {
      bad("circle.move_to_positive", "expected false, \"auto\" or a number, got " + shown(p));
    }
  }
  try {
    validate(out);
  } catch (const Error& e) {
    bad("circle", e.what());
  }
  return out;
}

RopeIndexInput Request::input() const {
  return {input_ids, batch, seq_len, attention_mask, image_grid_thw, video_grid_thw, second_per_grid_ts};
}

Request parse_request(const json& j) {
  only_keys(j, "",
            {"scheme", "circle", "vision", "input_ids", "attention_mask", "image_grid_thw",
             "video_grid_thw", "second_per_grid_ts"});
  Request out;
  if (j.contains("scheme")) {
    if (!j["scheme"].is_string()) bad("scheme", "expected a string, got " + shown(j["scheme"]));
    try {
      out.geometry.scheme = parse_scheme(j["scheme"].get<std::string>());
    } catch (const Error& e) {
      bad("scheme", e.what());
    }
  }
  if (j.contains("circle") && !j["circle"].is_null()) out.geometry.circle = parse_circle_config(j["circle"]);
  out.vision = parse_vision(j.contains("vision") ? j["vision"] : json());
  if (!j.contains("input_ids")) bad("input_ids", "missing");
  out.input_ids = matrix(j["input_ids"], "input_ids", out.batch, out.seq_len);
  if (j.contains("attention_mask") && !j["attention_mask"].is_null()) {
    int64_t rows = 0, cols = 0;
    out.attention_mask = matrix(j["attention_mask"], "attention_mask", rows, cols);
    if (rows != out.batch || cols != out.seq_len)
      bad("attention_mask", "shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                "] does not match input_ids [" + std::to_string(out.batch) + ", " +
                                std::to_string(out.seq_len) + "]");
  }
  out.image_grid_thw = grids(j, "image_grid_thw");
  out.video_grid_thw = grids(j, "video_grid_thw");
  if (j.contains("second_per_grid_ts") && !j["second_per_grid_ts"].is_null()) {
    const json& s = j["second_per_grid_ts"];
    if (!s.is_array()) bad("second_per_grid_ts", "expected an array of numbers, got " + shown(s));
    // An explicit list (even an empty one) must cover every video; only an
    // absent or null list means 1.0 each.
    if (s.size() != out.video_grid_thw.size())
      bad("second_per_grid_ts", "has " + std::to_string(s.size()) + " entries but video_grid_thw has " +
                                    std::to_string(out.video_grid_thw.size()) + " (one per video)");
    for (size_t i = 0; i < s.size(); ++i)
      out.second_per_grid_ts.push_back(number(s[i], "second_per_grid_ts[" + std::to_string(i) + "]"));
  }
  return out;
}

Request parse_request_text(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // syntax errors, number overflow
    throw Error("request is not valid JSON: " + std::string(e.what()));
  }
  return parse_request(j);
}

json positions_json(const Positions& p, int64_t decode) {
  auto cube = [](const float* data, int64_t batch, int64_t len) {
    json axes = json::array();
    for (int axis = 0; axis < 3; ++axis) {
      json rows = json::array();
      for (int64_t b = 0; b < batch; ++b) {
        const float* row = data + (axis * batch + b) * len;
        rows.push_back(std::vector<double>(row, row + len));
      }
      axes.push_back(std::move(rows));
    }
    return axes;
  };
  json out;
  out["position_ids"] = cube(p.position_ids.data(), p.batch, p.seq_len);
  out["rope_deltas"] = std::vector<double>(p.rope_deltas.begin(), p.rope_deltas.end());
  if (decode > 0) {
    const std::vector<float> d = decode_positions(p.rope_deltas, p.seq_len, decode);
    out["decode_position_ids"] = cube(d.data(), p.batch, decode);
  }
  return out;
}

}  // namespace circlerope::cli
