// The token-free layout string "text:5,image:6x6,video:4x6x6@0.5,text:4":
// parse_layout and format_layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "circlerope/positions.h"

namespace {

using namespace circlerope;
using ::testing::AllOf;
using ::testing::HasSubstr;

bool same(const Segment& a, const Segment& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == Segment::Kind::text) return a.tokens == b.tokens;
  if (a.t != b.t || a.hm != b.hm || a.wm != b.wm) return false;
  return a.kind == Segment::Kind::image || a.second_per_grid_t == b.second_per_grid_t;
}

void expect_same(const std::vector<Segment>& a, const std::vector<Segment>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(a[i], b[i])) << "segment " << i;
}

std::string layout_error(const std::string& text) {
  try {
    parse_layout(text);
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  ADD_FAILURE() << "accepted '" << text << "'";
  return "";
}

TEST(Layout, ParsesTheDocumentedExample) {
  const std::vector<Segment> s = parse_layout("text:5,image:6x6,video:4x6x6@0.5,text:4");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].kind, Segment::Kind::text);
  EXPECT_EQ(s[0].tokens, 5);
  EXPECT_EQ(s[1].kind, Segment::Kind::image);
  EXPECT_EQ(s[1].t, 1);
  EXPECT_EQ(s[1].hm, 6);
  EXPECT_EQ(s[1].wm, 6);
  EXPECT_EQ(s[2].kind, Segment::Kind::video);
  EXPECT_EQ(s[2].t, 4);
  EXPECT_EQ(s[2].hm, 6);
  EXPECT_EQ(s[2].wm, 6);
  EXPECT_EQ(s[2].second_per_grid_t, 0.5);
  EXPECT_EQ(s[3].tokens, 4);
  // image HxW is rows x columns
  const std::vector<Segment> r = parse_layout("image:2x7");
  EXPECT_EQ(r[0].hm, 2);
  EXPECT_EQ(r[0].wm, 7);
  // seconds default to 1; integers and fractions are both fine
  EXPECT_EQ(parse_layout("video:2x3x3")[0].second_per_grid_t, 1.0);
  EXPECT_EQ(parse_layout("video:2x3x3@2")[0].second_per_grid_t, 2.0);
  EXPECT_EQ(parse_layout("video:2x3x3@0")[0].second_per_grid_t, 0.0);
  EXPECT_EQ(parse_layout("video:2x3x3@1.25")[0].second_per_grid_t, 1.25);
}

TEST(Layout, SpacesAroundItemsAreAccepted) {
  const std::vector<Segment> want = parse_layout("text:5,image:2x3,video:2x1x1@0.7,text:1");
  expect_same(parse_layout(" text:5 , image:2x3,\tvideo:2x1x1@0.7 ,text:1 "), want);
  expect_same(parse_layout("text:5,  image:2x3  ,video:2x1x1@0.7,   text:1"), want);
}

TEST(Layout, RejectsMalformedItemsNamingThem) {
  struct Case {
    const char* text;
    const char* item;  // what the message must quote
  };
  const Case cases[] = {
      {"text:0", "'text:0'"},
      {"text:-3", "'text:-3'"},
      {"text:", "'text:'"},
      {"text", "'text'"},
      {"text:5.0", "'text:5.0'"},
      {"text:5x", "'text:5x'"},
      {"image:6", "'image:6'"},
      {"image:6x", "'image:6x'"},
      {"image:x6", "'image:x6'"},
      {"image:0x3", "'image:0x3'"},
      {"image:3x0", "'image:3x0'"},
      {"image:2x2x2", "'image:2x2x2'"},
      {"image:99999999999999999999x2", "'image:99999999999999999999x2'"},
      {"video:2x3", "'video:2x3'"},
      {"video:0x3x3", "'video:0x3x3'"},
      {"video:2x3x3@-1", "'video:2x3x3@-1'"},
      {"video:2x3x3@abc", "'video:2x3x3@abc'"},
      {"video:2x3x3@", "'video:2x3x3@'"},
      {"video:2x3x3@inf", "'video:2x3x3@inf'"},
      {"video:2x3x3@nan", "'video:2x3x3@nan'"},
      {"video:2x3x3@1e999", "'video:2x3x3@1e999'"},
      {"video:2x3x3@1.5s", "'video:2x3x3@1.5s'"},
      {"foo:3", "'foo:3'"},
      {"Text:3", "'Text:3'"},
      {"image:2x2@1", "'image:2x2@1'"},
  };
  for (const Case& c : cases) EXPECT_THAT(layout_error(c.text), HasSubstr(c.item)) << c.text;
  // The kind of mistake is said too.
  EXPECT_THAT(layout_error("foo:3"), HasSubstr("unknown kind 'foo'"));
  EXPECT_THAT(layout_error("video:2x3x3@-1"), HasSubstr("-1"));
  EXPECT_THAT(layout_error("video:2x3x3@abc"), HasSubstr("abc"));
  EXPECT_THAT(layout_error("image:6"), HasSubstr("image:HxW"));
  // Later items are named with their index.
  EXPECT_THAT(layout_error("text:5,image:2x2,image:0x3"), AllOf(HasSubstr("item 2"), HasSubstr("'image:0x3'")));
}

TEST(Layout, RejectsEmptyStringsAndEmptyItems) {
  EXPECT_THAT(layout_error(""), HasSubstr("empty"));
  EXPECT_THAT(layout_error("   "), HasSubstr("empty"));
  EXPECT_THAT(layout_error("text:5,,image:2x2"), AllOf(HasSubstr("item 1"), HasSubstr("''")));
  EXPECT_THAT(layout_error("text:5,"), HasSubstr("item 1"));
  EXPECT_THAT(layout_error(",text:5"), HasSubstr("item 0"));
}

TEST(Layout, FormatWritesTheCanonicalForm) {
  const std::vector<Segment> s = parse_layout(" text:5 , image:6x6,video:4x6x6@0.5 ,video:2x1x1@1,text:4");
  EXPECT_EQ(format_layout(s), "text:5,image:6x6,video:4x6x6@0.5,video:2x1x1,text:4");
  EXPECT_EQ(format_layout(std::vector<Segment>{}), "");
}

TEST(Layout, FormatParseRoundTrip) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int64_t> side(1, 64), kind(0, 2);
  // Seconds with a short decimal form (what people write in layouts).
  const double seconds[] = {0.0, 0.5, 0.7, 1.0, 1.3, 2.0, 2.3, 0.25, 10.0, 0.125};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Segment> segs;
    const int n = std::uniform_int_distribution<int>(1, 8)(rng);
    for (int i = 0; i < n; ++i) {
      Segment s;
      switch (kind(rng)) {
        case 0: s.kind = Segment::Kind::text; s.tokens = side(rng) * side(rng); break;
        case 1: s.kind = Segment::Kind::image; s.hm = side(rng); s.wm = side(rng); break;
        default:
          s.kind = Segment::Kind::video;
          s.t = side(rng);
          s.hm = side(rng);
          s.wm = side(rng);
          s.second_per_grid_t = seconds[std::uniform_int_distribution<int>(0, 9)(rng)];
      }
      segs.push_back(s);
    }
    const std::string text = format_layout(segs);
    expect_same(parse_layout(text), segs);
    EXPECT_EQ(format_layout(parse_layout(text)), text);
  }
}

TEST(Layout, FormatKeepsEverySecondsValue) {
  // Regression: format_layout writes seconds with the default 6 significant digits,
  // so parse(format(x)) != x for seconds such as 1/3 ("0.333333") or
  // 0.1 + 0.2 ("0.3"): the round trip loses the value. Shortest round-trip
  // formatting (std::to_chars) fixes it.
  for (double s : {1.0 / 3.0, 0.1 + 0.2, 0.123456789, 1e-9, 12345678.9}) {
    Segment v;
    v.kind = Segment::Kind::video;
    v.t = 2;
    v.hm = 3;
    v.wm = 3;
    v.second_per_grid_t = s;
    const std::vector<Segment> segs = {v};
    const std::vector<Segment> back = parse_layout(format_layout(segs));
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0].second_per_grid_t, s) << format_layout(segs);
  }
}

TEST(Layout, LargeButValidNumbers) {
  const std::vector<Segment> s = parse_layout("text:9223372036854775807");
  EXPECT_EQ(s[0].tokens, 9223372036854775807);
  EXPECT_EQ(format_layout(s), "text:9223372036854775807");
  // layout_positions refuses more than 2^31 tokens with an Error, not a crash
  EXPECT_THROW(layout_positions(parse_layout("image:65536x65536"), VisionConfig{}, {}), Error);
  EXPECT_THROW(layout_positions(s, VisionConfig{}, {}), Error);
}

}  // namespace
