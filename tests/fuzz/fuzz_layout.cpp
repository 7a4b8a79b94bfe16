// libFuzzer target: a token-free layout ("text:5,image:6x6,video:4x6x6@0.5") through
// parse_layout, format_layout, layout_positions of every scheme (both time modes) and the
// coupling metrics.
//
// Oracle: an accepted layout has only items the grammar allows (sides and counts >= 1,
// seconds finite and >= 0), and format_layout's text parses back to the same segments;
// positions and metrics are checked against positions_oracle.h (docs/spec.md §1-3, 5).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/ptd.h"
#include "positions_oracle.h"

namespace {

using namespace circlerope;

constexpr int64_t kFuzzMaxTokens = 256;  // keeps metrics (text x vision x D) fast
const RotaryConfig kRotary{1e4, 16, FrequencyLayout::interleaved, {4, 2, 2}};

bool same(const Segment& a, const Segment& b) {
  return a.kind == b.kind && a.tokens == b.tokens && a.t == b.t && a.hm == b.hm && a.wm == b.wm &&
         a.second_per_grid_t == b.second_per_grid_t;
}

// The circle options come from the input's length so that one layout sees several of them
// without spending fuzz bytes on a second grammar.
CircleConfig circle_for(size_t size) {
  CircleConfig c;
  switch (size % 4) {
    case 0: break;  // the paper's setting
    case 1: c.radius_mode = RadiusMode::automatic; c.radius_scale = 2.5; c.alpha = 1; break;
    case 2: c.alpha = 0; c.move_to_origin = false; c.dff_rate = 0.25; break;
    case 3: c.move_to_positive = PositiveShift::offset; c.positive_offset = -3.5; c.radius = 0.125; break;
  }
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<Segment> segments;
  try {
    segments = parse_layout(text);
  } catch (const Error&) {
    fuzz::count("layout refused");
    return 0;
  }
  fuzz::count("layout parsed");
  FUZZ_CHECK(!segments.empty(), "parse_layout accepted a layout without items");
  size_t commas = 0;
  for (char c : text) commas += c == ',';
  FUZZ_CHECK(segments.size() == commas + 1, "parse_layout made %zu items from %zu commas", segments.size(), commas);
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    const bool text_item = s.kind == Segment::Kind::text;
    FUZZ_CHECK(text_item ? s.tokens >= 1 : (s.t >= 1 && s.hm >= 1 && s.wm >= 1),
               "parse_layout accepted item %zu with a count or side < 1", i);
    FUZZ_CHECK(s.kind == Segment::Kind::video || s.t == 1, "parse_layout gave image item %zu t=%lld", i,
               (long long)s.t);
    FUZZ_CHECK(std::isfinite(s.second_per_grid_t) && s.second_per_grid_t >= 0,
               "parse_layout accepted seconds %g in item %zu", s.second_per_grid_t, i);
  }
  const std::string formatted = format_layout(segments);
  std::vector<Segment> again;
  try {
    again = parse_layout(formatted);
  } catch (const Error& e) {
    fuzz::finding("format_layout wrote \"%s\", which parse_layout refuses: %s", formatted.c_str(), e.what());
  }
  FUZZ_CHECK(again.size() == segments.size(), "format_layout round trip changed the item count");
  for (size_t i = 0; i < again.size(); ++i)
    FUZZ_CHECK(same(again[i], segments[i]), "format_layout round trip changed item %zu (\"%s\")", i,
               formatted.c_str());

  // The oracle's chunks: text accumulates until a block takes it.
  std::vector<fuzz::oracle::Row> rows(1);
  int64_t total = 0, images = 0, videos = 0;
  fuzz::oracle::Chunk pending;
  for (const Segment& s : segments) {
    if (s.kind == Segment::Kind::text) {
      pending.text += s.tokens;
      total += s.tokens;
    } else {
      // Sides can be up to 2^63: bound each factor before multiplying.
      if (s.t > kFuzzMaxTokens || s.hm > kFuzzMaxTokens || s.wm > kFuzzMaxTokens) return -1;
      pending.has_block = true;
      pending.block = {s.t, s.hm, s.wm, s.kind == Segment::Kind::video,
                       s.kind == Segment::Kind::video ? videos++ : images++, s.second_per_grid_t};
      total += pending.block.tokens();
      rows[0].chunks.push_back(pending);
      pending = {};
    }
    if (total > kFuzzMaxTokens) return -1;  // also keeps known item 11 (text:2147483648) out
  }
  if (pending.text > 0) rows[0].chunks.push_back(pending);
  for (int64_t s = 0; s < total; ++s) rows[0].real.push_back(s);

  for (TimeMode time : {TimeMode::seconds, TimeMode::index}) {
    VisionConfig vision;
    vision.time = time;
    bool frames_fit = true;
    for (const auto& c : rows[0].chunks)
      if (c.has_block && c.block.video && std::isnan(fuzz::oracle::frame_time(c.block.t - 1, c.block.seconds, vision)))
        frames_fit = false;
    for (Scheme scheme : kAllSchemes) {
      const Geometry geometry{scheme, circle_for(size)};
      const char* sn = fuzz::oracle::name(scheme);
      Positions p;
      try {
        p = layout_positions(segments, vision, geometry);
      } catch (const Error& e) {
        fuzz::count("positions refused");
        FUZZ_CHECK(!frames_fit, "%s: layout_positions refused a valid layout: %s", sn, e.what());
        continue;
      }
      FUZZ_CHECK(frames_fit, "%s: layout_positions accepted a video whose frame times reach 2^31", sn);
      FUZZ_CHECK(p.batch == 1 && p.seq_len == total && p.position_ids.size() == static_cast<size_t>(3 * total) &&
                     p.rope_deltas.size() == 1 && p.token_block.size() == static_cast<size_t>(total),
                 "%s: Positions of a layout has the wrong sizes", sn);
      const fuzz::oracle::Produced produced{1, total, p.position_ids.data(), p.rope_deltas.data(),
                                            p.token_block.data(), &p.blocks};
      fuzz::count("positions accepted");
      fuzz::oracle::check_positions(rows, vision, scheme, geometry.circle, produced);
      if (time == TimeMode::index) continue;  // metrics once per scheme: they cost text x vision x D
      CouplingMetrics metrics;
      try {
        metrics = coupling_metrics(p, scheme, kRotary);
      } catch (const Error& e) {
        fuzz::finding("%s: coupling_metrics refused positions of layout_positions: %s", sn, e.what());
      }
      fuzz::oracle::check_metrics(rows, scheme, kRotary, produced, metrics);
    }
  }
  return 0;
}
