// The token-free layout string: "text:5,image:6x6,video:4x6x6@0.5,text:4".
#include <charconv>
#include <cmath>
#include <sstream>
#include <string>

#include "circlerope/positions.h"
#include "circlerope/detail/fail.h"

namespace circlerope {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_int(std::string_view s, int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= 1;
}

// "AxBxC" with exactly `count` positive integers.
bool parse_dims(std::string_view s, int count, int64_t* out) {
  for (int i = 0; i < count; ++i) {
    const size_t x = i + 1 < count ? s.find('x') : std::string_view::npos;
    if (i + 1 < count && x == std::string_view::npos) return false;
    if (!parse_int(s.substr(0, x), out[i])) return false;
    s = x == std::string_view::npos ? std::string_view{} : s.substr(x + 1);
  }
  return true;
}

}  // namespace

std::vector<Segment> parse_layout(std::string_view layout) {
  std::vector<Segment> out;
  if (trim(layout).empty()) detail::fail("layout is empty (example: \"text:5,image:6x6,text:4\")");
  size_t index = 0;
  while (true) {
    const size_t comma = layout.find(',');
    const std::string_view item = trim(layout.substr(0, comma));
    const size_t colon = item.find(':');
    const std::string_view kind = item.substr(0, colon);
    const std::string_view value = colon == std::string_view::npos ? "" : item.substr(colon + 1);
    auto bad = [&](const char* expected) {
      detail::fail("layout item ", index, " ", detail::quoted(item), ": expected ", expected,
                   " with positive integers");
    };
    Segment seg;
    if (kind == "text") {
      if (!parse_int(value, seg.tokens)) bad("text:N");
    } else if (kind == "image") {
      seg.kind = Segment::Kind::image;
      int64_t d[2];
      if (!parse_dims(value, 2, d)) bad("image:HxW (merged token grid)");
      seg.hm = d[0];
      seg.wm = d[1];
    } else if (kind == "video") {
      seg.kind = Segment::Kind::video;
      const size_t at = value.find('@');
      int64_t d[3];
      if (!parse_dims(value.substr(0, at), 3, d)) bad("video:TxHxW or video:TxHxW@SECONDS");
      seg.t = d[0];
      seg.hm = d[1];
      seg.wm = d[2];
      if (at != std::string_view::npos) {
        const std::string_view sec = value.substr(at + 1);
        const auto [end, ec] = std::from_chars(sec.data(), sec.data() + sec.size(), seg.second_per_grid_t);
        if (ec != std::errc() || end != sec.data() + sec.size() || !std::isfinite(seg.second_per_grid_t) ||
            seg.second_per_grid_t < 0)
          detail::fail("layout item ", index, " ", detail::quoted(item), ": seconds per grid ", detail::quoted(sec),
                       " must be a finite number >= 0");
      }
    } else {
      detail::fail("layout item ", index, " ", detail::quoted(item), ": unknown kind ", detail::quoted(kind),
                   " (expected text:N, image:HxW or video:TxHxW[@SECONDS])");
    }
    out.push_back(seg);
    if (comma == std::string_view::npos) break;
    layout.remove_prefix(comma + 1);
    ++index;
  }
  return out;
}

std::string format_layout(std::span<const Segment> segments) {
  std::ostringstream s;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    if (i) s << ',';
    switch (seg.kind) {
      case Segment::Kind::text: s << "text:" << seg.tokens; break;
      case Segment::Kind::image: s << "image:" << seg.hm << 'x' << seg.wm; break;
      case Segment::Kind::video:
        s << "video:" << seg.t << 'x' << seg.hm << 'x' << seg.wm;
        if (seg.second_per_grid_t != 1.0) {
          char buffer[32];  // shortest text that reads back as the same double
          const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, seg.second_per_grid_t);
          s << '@' << std::string_view(buffer, static_cast<size_t>(end - buffer));
        }
        break;
    }
  }
  return s.str();
}

}  // namespace circlerope
