#include "request.h"

#include <algorithm>
#include <charconv>
#include <ostream>
#include <cmath>
#include <cstring>
#include <istream>
#include <set>
#include <initializer_list>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "circlerope/detail/quote.h"
#include "circlerope/options.h"

namespace circlerope::cli {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw Error("request." + where + ": " + what);
}

// At most about kShown characters of `value` for a message, in JSON's punctuation with its
// strings and keys shown by the one quoting rule (detail/quote.h: single quotes, escaped
// bytes). Never dump() the whole value: a deep or huge one overflows the stack or takes memory
// in proportion to its size. Each level adds a character before it descends,
// so recursion stops within kShown levels whatever the value's depth.
constexpr std::size_t kShown = detail::kQuoted;

void append_shown(const json& v, std::string& out) {
  if (out.size() >= kShown) return;
  switch (v.type()) {
    case json::value_t::array: {
      out += '[';
      bool first = true;
      for (const json& item : v) {
        if (out.size() >= kShown) return;
        if (!first) out += ',';
        first = false;
        append_shown(item, out);
      }
      out += ']';
      return;
    }
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (out.size() >= kShown) return;
        if (!first) out += ',';
        first = false;
        out += detail::quoted(key) + ":";
        append_shown(item, out);
      }
      out += '}';
      return;
    }
    case json::value_t::string:
      out += detail::quoted(v.get_ref<const std::string&>());
      return;
    default: out += v.dump(); return;  // a scalar: a few characters
  }
}

std::string shown(const json& value) {
  std::string s;
  append_shown(value, s);
  if (s.size() > kShown) s = s.substr(0, kShown - 3) + "...";
  return s;
}

void only_keys(const json& object, const std::string& where,
               std::initializer_list<std::string_view> keys) {
  if (!object.is_object()) bad(where.empty() ? "(top level)" : where, "expected a JSON object, got " + shown(object));
  for (const auto& [key, value] : object.items()) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    std::string list;  // built only for the message
    for (std::string_view k : keys) list.append(list.empty() ? "" : ", ").append(k);
    bad(where.empty() ? detail::shown_name(key) : where + "." + detail::shown_name(key), "unknown key (expected one of: " + list + ")");
  }
}

int64_t integer(const json& v, const std::string& where) {
  if (!v.is_number_integer()) bad(where, "expected an integer, got " + shown(v));
  // nlohmann keeps 2^63 .. 2^64-1 as unsigned: get<int64_t>() would wrap them
  // (18446744073709551615 would read as -1).
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(where, "integer " + v.dump() + " is beyond the int64 range [-2^63, 2^63)");
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

// A JSON value as the core's OptionValue (options.h): JSON is a typed source, so strings
// stay strings (never read as numbers) and integers beyond int64 keep their digits.
OptionValue option_value(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return OptionValue::null();
    case json::value_t::boolean: return OptionValue::boolean(v.get<bool>());
    case json::value_t::number_integer: return OptionValue::integer(v.get<int64_t>());
    case json::value_t::number_unsigned: {
      const auto u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return OptionValue::integer(static_cast<int64_t>(u));
      return OptionValue::big_integer(std::to_string(u));
    }
    case json::value_t::number_float: return OptionValue::number(v.get<double>());
    case json::value_t::string: return OptionValue::string(v.get_ref<const std::string&>());
    default: return OptionValue::other(shown(v));
  }
}

VisionConfig parse_vision(const json& v) {
  VisionConfig out;
  if (v.is_null()) return out;
  if (!v.is_object()) bad("vision", "expected a JSON object, got " + shown(v));
  for (const auto& [key, value] : v.items()) {
    if (key == "compat") bad("vision.compat", "give \"compat\" at the top level of the request");
    set_vision_option(out, key, option_value(value), "request.vision." + detail::shown_name(key));
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
  if (!c.is_object()) bad("circle", "expected a JSON object, got " + shown(c));
  CircleConfig out;
  out.move_to_origin = false;  // the reference's config.get(..., False)
  if (!c.contains("radius")) bad("circle.radius", "missing (a number > 0, \"auto\" or \"auto-k\")");
  for (const auto& [key, value] : c.items())
    set_circle_option(out, key, option_value(value), "request.circle." + detail::shown_name(key));
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
            {"scheme", "circle", "vision", "compat", "input_ids", "attention_mask", "image_grid_thw",
             "video_grid_thw", "second_per_grid_ts"});
  Request out;
  if (j.contains("scheme")) out.geometry.scheme = scheme_option(option_value(j["scheme"]), "request.scheme");
  if (j.contains("circle") && !j["circle"].is_null()) out.geometry.circle = parse_circle_config(j["circle"]);
  out.vision = parse_vision(j.contains("vision") ? j["vision"] : json());
  // Which transformers behaviour to reproduce: a property of the request, not of the model's
  // constants, so it sits at the top level (VisionConfig carries it in the core).
  if (j.contains("compat") && !j["compat"].is_null())
    set_vision_option(out.vision, "compat", option_value(j["compat"]), "request.compat");
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
  if (text.size() > kMaxRequestBytes)
    throw Error("request is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                std::to_string(kMaxRequestBytes) + " (64 MiB)");
  // nlohmann stops at a NUL and would ignore everything after it.
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error("request has a NUL byte at offset " + std::to_string(nul) + " (a request is JSON text)");
  // Checked while parsing, before any deep or huge value exists: nesting depth, duplicate
  // keys (the last one silently won), the number of values.
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::size_t values = 0;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw Error("request nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end: keys.pop_back(); break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(key).second)
          throw Error("request has the key " + shown(parsed) + " twice in one object");
        break;
      }
      case json::parse_event_t::value:
        if (++values > kMaxRequestValues)
          throw Error("request holds more than " + std::to_string(kMaxRequestValues) + " values, the limit");
        break;
      default: break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, check);
  } catch (const json::exception& e) {  // syntax errors, number overflow
    // nlohmann quotes the offending token whole (a 100 kB number literal, say, or control
    // bytes): the text between its first and last quote is shown by the quoting rule instead.
    std::string what = e.what();
    const std::size_t open = what.find('\''), close = what.rfind('\'');
    if (open != std::string::npos && close > open)
      what = what.substr(0, open) + detail::quoted(std::string_view(what).substr(open + 1, close - open - 1)) +
             what.substr(close + 1);
    throw Error("request is not valid JSON: " + detail::one_line(what));
  }
  return parse_request(j);
}

std::string read_request(std::istream& in, const std::string& name) {
  std::string text;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    const auto got = static_cast<std::size_t>(in.gcount());
    if (const void* nul = std::memchr(buffer, '\0', got))
      throw Error("request " + name + " has a NUL byte at offset " +
                  std::to_string(text.size() + static_cast<std::size_t>(static_cast<const char*>(nul) - buffer)) +
                  " (a request is JSON text)");
    if (text.size() + got > kMaxRequestBytes)
      throw Error("request " + name + " is more than " + std::to_string(kMaxRequestBytes) +
                  " bytes (64 MiB), the limit");
    text.append(buffer, got);
  }
  if (in.bad()) throw Error("cannot read request " + name);
  return text;
}

void write_positions_json(std::ostream& out, const Positions& p, int64_t decode) {
  // Everything that can fail happens before the first byte is written.
  if (decode < 0) throw Error("--decode " + std::to_string(decode) + " must be >= 0");
  const std::vector<float> next = decode > 0 ? next_positions(p, decode) : std::vector<float>{};
  // Under a transformers compat mode, integer schemes are written as integers, as
  // transformers returns int64 (Circle-RoPE positions stay fractional).
  const bool integers = p.compat != Compat::none && p.scheme != Scheme::circle;
  // Streamed, not built as a JSON document: at kMaxTokens tokens a document of the positions
  // takes gigabytes. Numbers are written as nlohmann writes them: the
  // shortest text that reads back as the same double, with ".0" on integral values.
  std::string line;
  auto number = [&](float v) {
    char buffer[32];
    if (integers) {  // exact: every such position is an integer below 2^24
      const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, static_cast<int64_t>(v));
      line.append(buffer, end);
      return;
    }
    const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, static_cast<double>(v));
    const std::string_view text(buffer, static_cast<std::size_t>(end - buffer));
    line.append(text);
    if (text.find_first_of(".en") == std::string_view::npos) line.append(".0");
  };
  auto cube = [&](const float* data, int64_t batch, int64_t len) {
    line += '[';
    for (int axis = 0; axis < 3; ++axis) {
      line += axis ? ",[" : "[";
      for (int64_t b = 0; b < batch; ++b) {
        line += b ? ",[" : "[";
        const float* row = data + (axis * batch + b) * len;
        for (int64_t s = 0; s < len; ++s) {
          if (s) line += ',';
          number(row[s]);
          if (line.size() > (1 << 16)) {
            out << line;
            line.clear();
          }
        }
        line += ']';
      }
      line += ']';
    }
    line += ']';
  };
  line += "{\"position_ids\":";
  cube(p.position_ids.data(), p.batch, p.seq_len);
  line += ",\"rope_deltas\":[";
  for (int64_t b = 0; b < p.batch; ++b) {
    if (b) line += ',';
    number(p.rope_deltas[static_cast<std::size_t>(b)]);
  }
  line += ']';
  if (decode > 0) {
    line += ",\"decode_position_ids\":";
    cube(next.data(), p.batch, decode);
  }
  line += "}\n";
  out << line;
}

}  // namespace circlerope::cli
