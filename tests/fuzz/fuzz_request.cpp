// libFuzzer target: a JSON request (what `circlerope positions --request` reads) through the
// parser, the positions of every scheme, the coupling metrics and positions_json.
//
// Oracle (positions_oracle.h, written from the spec (docs/spec.md)): the request is valid exactly when the
// oracle's split says so; valid positions match docs/spec.md §1-3; PTD and the RoPE kernel deviation
// match docs/spec.md §5 (its RoPE kernel deviation too); positions_json round-trips. The JSON strictness of the request reader
// is checked here too (NUL bytes, duplicate keys, integers beyond int64, loose "auto-k").
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "circlerope/ptd.h"
#include "positions_oracle.h"
#include "request.h"

namespace {

using namespace circlerope;
using nlohmann::json;

constexpr int64_t kFuzzMaxTokens = 256;  // batch x seq_len: keeps metrics (text x vision x D) fast
// Small on purpose: metrics cost grows with D; the layout does not matter to this target.
const RotaryConfig kRotary{1e4, 16, FrequencyLayout::chunked, {2, 3, 3}};

// Item 7: what a strict reader must refuse. Returns the reason or "", and the sub-class.
std::string lenient_json(const std::string& text, const char*& kind) {
  kind = "item7nul";
  if (text.find('\0') != std::string::npos) return "a NUL byte (the rest would be ignored)";
  std::vector<std::vector<std::string>> keys;  // one list per open object
  bool duplicate = false;
  json j;
  try {
    j = json::parse(text, [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) keys.emplace_back();
      else if (event == json::parse_event_t::object_end) keys.pop_back();
      else if (event == json::parse_event_t::key && !keys.empty()) {
        const std::string k = parsed.get<std::string>();
        for (const std::string& seen : keys.back()) duplicate = duplicate || seen == k;
        keys.back().push_back(k);
      }
      return true;
    });
  } catch (const json::exception&) {
    return "";  // not JSON at all: the library must refuse it anyway (checked elsewhere)
  }
  kind = "item7dup";
  if (duplicate) return "a duplicate key";
  kind = "item7int";
  auto huge = [](const json& v) {
    return v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  };
  auto any_huge_in_rows = [&](const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_array()) return false;
    for (const json& row : j[key])
      if (row.is_array())
        for (const json& v : row)
          if (huge(v)) return true;
    return false;
  };
  for (const char* key : {"input_ids", "attention_mask", "image_grid_thw", "video_grid_thw"})
    if (any_huge_in_rows(key)) return std::string("an integer beyond int64 in ") + key;
  if (j.is_object() && j.contains("vision") && j["vision"].is_object())
    for (const char* key : {"spatial_merge_size", "vision_start_token_id", "image_token_id", "video_token_id"})
      if (j["vision"].contains(key) && huge(j["vision"][key]))
        return std::string("an integer beyond int64 in vision.") + key;
  kind = "item7autok";
  if (j.is_object() && j.contains("circle") && j["circle"].is_object() && j["circle"].contains("radius") &&
      j["circle"]["radius"].is_string()) {
    const std::string r = j["circle"]["radius"].get<std::string>();
    if (r.rfind("auto-", 0) == 0) {
      const std::string k = r.substr(5);
      if (k.empty() || k.find_first_not_of("0123456789.eE+-") != std::string::npos)
        return "radius \"" + r + "\" (k is not a plain decimal number)";
    }
  }
  return "";
}

void check_json(const Positions& p, int64_t decode) {
  std::ostringstream text;
  cli::write_positions_json(text, p, decode);
  const std::string line = text.str();
  FUZZ_CHECK(!line.empty() && line.find('\n') == line.size() - 1, "write_positions_json: not one line");
  const json out = json::parse(line);
  const json& ids = out.at("position_ids");
  FUZZ_CHECK(ids.size() == 3, "positions_json: %zu axes", ids.size());
  for (int a = 0; a < 3; ++a) {
    FUZZ_CHECK(ids[a].size() == static_cast<size_t>(p.batch), "positions_json: rows of axis %d", a);
    for (int64_t b = 0; b < p.batch; ++b) {
      FUZZ_CHECK(ids[a][b].size() == static_cast<size_t>(p.seq_len), "positions_json: tokens of a row");
      for (int64_t s = 0; s < p.seq_len; ++s)
        FUZZ_CHECK(ids[a][b][s].get<double>() == static_cast<double>(p.at(a, b, s)),
                   "positions_json: position (%d, %lld, %lld) does not round-trip", a, (long long)b, (long long)s);
    }
  }
  const json& dec = out.at("decode_position_ids");
  for (int a = 0; a < 3; ++a)
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < decode; ++i) {
        // docs/spec.md §1: cache position S + i plus the row's delta. The 5.3-on modes (positions.h's
        // table, not in the spec (docs/spec.md)) measure their deltas against the real tokens: real tokens + i + delta.
        const int64_t cache = compat_deltas_count_real_tokens(p.compat) ? p.real_tokens.at(static_cast<size_t>(b)) : p.seq_len;
        const float want = static_cast<float>(cache + i) + p.rope_deltas[static_cast<size_t>(b)];
        FUZZ_CHECK(dec.at(a).at(b).at(i).get<double>() == static_cast<double>(want),
                   "positions_json: decode position (%d, %lld, %lld) is %.9g, docs/spec.md §1 says %.9g", a, (long long)b,
                   (long long)i, dec.at(a).at(b).at(i).get<double>(), want);
      }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cli::Request request;
  try {
    request = cli::parse_request_text(text);
  } catch (const Error&) {
    fuzz::count("request refused");
    return 0;
  }
  fuzz::count("request parsed");
  {  // a strict reader refuses these
    const char* kind = "";
    const std::string lenient = lenient_json(text, kind);
    if (!lenient.empty()) fuzz::finding("request with %s was accepted (%s)", lenient.c_str(), kind);
  }
  if (request.batch * request.seq_len > kFuzzMaxTokens) return -1;

  fuzz::oracle::Batch batch{request.batch, request.seq_len, request.input_ids.data(),
                            request.attention_mask.empty() ? nullptr : request.attention_mask.data(),
                            request.image_grid_thw, request.video_grid_thw, request.second_per_grid_ts};
  std::vector<fuzz::oracle::Row> rows;
  const std::string problem = fuzz::oracle::split(batch, request.vision, rows);

  for (Scheme scheme : kAllSchemes) {
    const Geometry geometry{scheme, request.geometry.circle};
    const char* sn = fuzz::oracle::name(scheme);
    bool must_fail = !problem.empty();
    bool may_fail = must_fail;
    if (problem.empty() && scheme == Scheme::circle) {
      must_fail = !fuzz::oracle::circle_problem(geometry.circle).empty();
      // A ring far beyond float32 is refused ("positions reach ..."): bound the reach.
      double reach = 0;
      for (const auto& row : rows) {
        double r = 0;
        for (const auto& c : row.chunks) {
          r += static_cast<double>(c.text) + 1;
          if (c.has_block) r += fuzz::oracle::block_reach(scheme, geometry.circle, c.block, 0, request.vision) + 1;
        }
        reach = std::max(reach, r);
      }
      may_fail = must_fail || !(reach < 1e37);
    }
    Positions p;
    try {
      p = rope_index(request.input(), request.vision, geometry);
    } catch (const Error& e) {
      fuzz::count("positions refused");
      FUZZ_CHECK(may_fail, "%s: a valid request was refused: %s", sn, e.what());
      continue;
    }
    FUZZ_CHECK(!must_fail, "%s: an invalid request (%s) was accepted", sn,
               problem.empty() ? fuzz::oracle::circle_problem(geometry.circle).c_str() : problem.c_str());
    FUZZ_CHECK(p.batch == request.batch && p.seq_len == request.seq_len &&
                   p.position_ids.size() == static_cast<size_t>(3 * p.batch * p.seq_len) &&
                   p.rope_deltas.size() == static_cast<size_t>(p.batch) &&
                   p.token_block.size() == static_cast<size_t>(p.batch * p.seq_len),
               "%s: Positions has the wrong sizes", sn);
    const fuzz::oracle::Produced produced{p.batch, p.seq_len, p.position_ids.data(), p.rope_deltas.data(),
                                          p.token_block.data(), &p.blocks};
    FUZZ_CHECK(p.scheme == scheme && p.compat == request.vision.compat, "%s: Positions records another scheme or compat", sn);
    fuzz::count("positions accepted");
    if (request.vision.compat == Compat::none) {
      fuzz::oracle::check_positions(rows, request.vision, scheme, geometry.circle, produced);
    } else {
      // The transformers compat modes are not in the spec (docs/spec.md) (positions.h documents them): their
      // numbers are not checked here, only that they are finite; metrics and JSON still are.
      fuzz::count("compat positions (numbers not checked)");
      for (float v : p.position_ids) FUZZ_CHECK(std::isfinite(v), "%s: a non-finite position and success", sn);
      for (float v : p.rope_deltas) FUZZ_CHECK(std::isfinite(v), "%s: a non-finite rope delta and success", sn);
    }
    CouplingMetrics metrics;
    try {
      metrics = coupling_metrics(p, scheme, kRotary);
    } catch (const Error& e) {
      fuzz::finding("%s: coupling_metrics refused positions of rope_index: %s", sn, e.what());
    }
    fuzz::oracle::check_metrics(rows, scheme, kRotary, produced, metrics);
    check_json(p, 3);
  }
  return 0;
}
