// The one grammar of configuration values (circlerope/options.h) that the CLI, JSON
// requests, the C API and Python all call.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fuzz/grammar_oracle.h"
#include "message_check.h"
#include "test_support.h"
#include "circlerope/age.h"
#include "circlerope/detail/quote.h"
#include "circlerope/rotary.h"
#include "circlerope/options.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::AllOf;
using ::testing::HasSubstr;


TEST(Options, DecimalNumbersAreReadExactly) {
  const std::vector<std::pair<std::string, double>> good = {
      {"0", 0.0},         {"-0", -0.0},         {"+2", 2.0},   {"2.", 2.0},          {".5", 0.5},
      {"1e3", 1000.0},    {"1E-3", 1e-3},       {"-1.5e+10", -1.5e10}, {"0.1", 0.1},
      {"123456789012345678901234567890", 123456789012345678901234567890.0},
      {"1e-400", 0.0},  // underflow rounds to 0, like any decimal literal
  };
  for (const auto& [text, value] : good) {
    SCOPED_TRACE(text);
    EXPECT_EQ(parse_number(text, "x"), value);
    EXPECT_EQ(std::signbit(parse_number(text, "x")), std::signbit(value));
  }
}

TEST(Options, EverythingButDecimalIsRefusedWithTheText) {
  for (const char* text : {"", " 1", "1 ", "0x10", "0x1p1", "1_000", "inf", "-inf", "nan", "Infinity", "1e", "1e+",
                           ".", "+", "-", "1.2.3", "1,5", "--1", "+-1", "e5", "1e5.0", "\xd9\xa1"}) {
    SCOPED_TRACE(text);
    EXPECT_THAT(error_of([&] { parse_number(text, "--alpha"); }),
                AllOf(HasSubstr("--alpha must be a decimal number"), HasSubstr("'")));
  }
  // A NUL inside the text is not the end of it.
  EXPECT_THAT(error_of([] { parse_number(std::string("1\0" "5", 3), "x"); }), HasSubstr("\\x00"));
  EXPECT_THAT(error_of([] { parse_number("1e999", "x"); }), HasSubstr("beyond the range of a double"));
  EXPECT_THAT(error_of([] { parse_number("-1e999", "x"); }), HasSubstr("'-1e999'"));
}

TEST(Options, IntegersAreDecimalAndFitInt64) {
  EXPECT_EQ(parse_integer("42", "n"), 42);
  EXPECT_EQ(parse_integer("-7", "n"), -7);
  EXPECT_EQ(parse_integer("+3", "n"), 3);
  EXPECT_EQ(parse_integer("-9223372036854775808", "n"), std::numeric_limits<std::int64_t>::min());
  for (const char* text : {"", "1.0", "1e3", "0x10", " 1", "1_0", "-", "+", "+-1", "--1"}) {
    SCOPED_TRACE(text);
    EXPECT_THAT(error_of([&] { parse_integer(text, "--layers"); }), HasSubstr("--layers must be an integer"));
  }
  EXPECT_THAT(error_of([] { parse_integer("9223372036854775808", "n"); }),
              AllOf(HasSubstr("[-2^63, 2^63)"), HasSubstr("9223372036854775808")));
}

// "auto-0x1p1" and "auto- 2" (which std::stod reads) and "auto-2_0" (which Python's float()
// reads as 20) are refused by the one grammar, from every kind of source.
TEST(Options, RadiusFormsAreTheSameForTextAndTypedStrings) {
  struct Case {
    const char* text;
    RadiusMode mode;
    double value;  // radius or scale
  };
  for (const Case& c : {Case{"auto", RadiusMode::automatic, 1.0}, Case{"auto-2", RadiusMode::automatic, 2.0},
                        Case{"auto-2.5", RadiusMode::automatic, 2.5}, Case{"auto-1e-3", RadiusMode::automatic, 1e-3},
                        Case{"auto-.5", RadiusMode::automatic, 0.5}}) {
    for (const OptionValue& v : {OptionValue::text(c.text), OptionValue::string(c.text)}) {
      SCOPED_TRACE(c.text);
      CircleConfig config;
      set_circle_option(config, "radius", v, "radius");
      EXPECT_EQ(config.radius_mode, c.mode);
      EXPECT_EQ(config.radius_scale, c.value);
    }
  }
  for (const char* bad : {"auto-0x1p1", "auto- 2", "auto-2_0", "auto-", "autox", "auto-inf", "AUTO",
                          "auto-nan", "auto-2 ", " auto"}) {
    for (const OptionValue& v : {OptionValue::text(bad), OptionValue::string(bad)}) {
      SCOPED_TRACE(bad);
      CircleConfig config;
      const CircleConfig before = config;
      EXPECT_THAT(error_of([&] { set_circle_option(config, "radius", v, "request.circle.radius"); }),
                  HasSubstr("request.circle.radius must be a finite number > 0, \"auto\" or \"auto-k\""));
      EXPECT_EQ(config.radius_mode, before.radius_mode);
      EXPECT_EQ(config.radius_scale, before.radius_scale);
    }
  }
  CircleConfig config;
  for (const char* small : {"auto-0", "auto--1", "auto-0e5", "auto-1e-400"})
    EXPECT_THAT(error_of([&] { set_circle_option(config, "radius", OptionValue::text(small), "r"); }),
                HasSubstr("r: the scale k of \"auto-k\" must be a finite number > 0"))
        << small;
  // A number is a fixed radius: as a number, or as untyped text; a typed string is a name.
  set_circle_option(config, "radius", OptionValue::text("7.5"), "r");
  EXPECT_EQ(config.radius_mode, RadiusMode::fixed);
  EXPECT_EQ(config.radius, 7.5);
  set_circle_option(config, "radius", OptionValue::integer(3), "r");
  EXPECT_EQ(config.radius, 3.0);
  EXPECT_THAT(error_of([&] { set_circle_option(config, "radius", OptionValue::string("7.5"), "r"); }),
              HasSubstr("(got '7.5')"));
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    EXPECT_THAT(error_of([&] { set_circle_option(config, "radius", OptionValue::number(bad), "r"); }),
                HasSubstr("r must be a finite number > 0"));
}

TEST(Options, EveryCircleOption) {
  CircleConfig c;
  set_circle_option(c, "alpha", OptionValue::text("0.25"), "a");
  EXPECT_EQ(c.alpha, 0.25);
  EXPECT_THAT(error_of([&] { set_circle_option(c, "alpha", OptionValue::number(1.5), "--alpha"); }),
              HasSubstr("--alpha must be in [0, 1] (got 1.5)"));
  EXPECT_THAT(error_of([&] { set_circle_option(c, "alpha", OptionValue::string("0.3"), "alpha"); }),
              HasSubstr("(got '0.3')"));
  set_circle_option(c, "move_to_origin", OptionValue::text("false"), "m");
  EXPECT_FALSE(c.move_to_origin);
  set_circle_option(c, "move_to_origin", OptionValue::integer(1), "m");
  EXPECT_TRUE(c.move_to_origin);
  EXPECT_THAT(error_of([&] { set_circle_option(c, "move_to_origin", OptionValue::integer(2), "m"); }),
              HasSubstr("m must be true or false (got 2)"));
  set_circle_option(c, "dff_rate", OptionValue::boolean(true), "d");
  EXPECT_EQ(c.dff_rate, 1.0);
  set_circle_option(c, "dff_rate", OptionValue::null(), "d");
  EXPECT_EQ(c.dff_rate, 0.0);
  set_circle_option(c, "dff_rate", OptionValue::text("0.5"), "d");
  EXPECT_EQ(c.dff_rate, 0.5);
  for (const OptionValue& off : {OptionValue::null(), OptionValue::boolean(false), OptionValue::text("false"),
                                 OptionValue::text("0"), OptionValue::integer(0)}) {
    set_circle_option(c, "move_to_positive", OptionValue::text("auto"), "p");
    set_circle_option(c, "move_to_positive", off, "p");
    EXPECT_EQ(c.move_to_positive, PositiveShift::none) << off.shown();
  }
  set_circle_option(c, "move_to_positive", OptionValue::text("-3"), "p");
  EXPECT_EQ(c.move_to_positive, PositiveShift::offset);
  EXPECT_EQ(c.positive_offset, -3.0);
  for (const OptionValue& bad : {OptionValue::boolean(true), OptionValue::text("true"), OptionValue::string("3"),
                                 OptionValue::text("yes"), OptionValue::number(std::nan(""))})
    EXPECT_THAT(error_of([&] { set_circle_option(c, "move_to_positive", bad, "p"); }), HasSubstr("p must be false"))
        << bad.shown();
  set_circle_option(c, "method", OptionValue::string("circle"), "method");
  EXPECT_THAT(error_of([&] { set_circle_option(c, "method", OptionValue::string("ring"), "method"); }),
              HasSubstr("only \"circle\""));
  EXPECT_THAT(error_of([&] { set_circle_option(c, "raduis", OptionValue::integer(1), "request.circle.raduis"); }),
              AllOf(HasSubstr("request.circle.raduis is not a Circle-RoPE option"), HasSubstr("radius")));
}

TEST(Options, CanonicalTextReadsBackToTheSameConfig) {
  for (const char* radius : {"10", "0.1", "1e-05", "auto", "auto-2.5", "auto-0.30000000000000004"}) {
    for (const char* positive : {"false", "auto", "3.5", "-0.1"}) {
      CircleConfig a;
      set_circle_option(a, "radius", OptionValue::text(radius), "r");
      set_circle_option(a, "move_to_positive", OptionValue::text(positive), "p");
      CircleConfig b;
      set_circle_option(b, "radius", OptionValue::text(radius_text(a)), "r");
      set_circle_option(b, "move_to_positive", OptionValue::text(move_to_positive_text(a)), "p");
      EXPECT_EQ(a.radius_mode, b.radius_mode) << radius;
      EXPECT_EQ(a.radius_mode == RadiusMode::fixed ? a.radius : a.radius_scale,
                b.radius_mode == RadiusMode::fixed ? b.radius : b.radius_scale)
          << radius;
      EXPECT_EQ(a.move_to_positive, b.move_to_positive) << positive;
      EXPECT_EQ(a.positive_offset, b.positive_offset) << positive;
    }
  }
}

TEST(Options, VisionOptions) {
  VisionConfig v;
  set_vision_option(v, "time", OptionValue::string("index"), "t");
  EXPECT_EQ(v.time, TimeMode::index);
  set_vision_option(v, "spatial_merge_size", OptionValue::text("3"), "m");
  EXPECT_EQ(v.spatial_merge_size, 3);
  EXPECT_THAT(error_of([&] { set_vision_option(v, "spatial_merge_size", OptionValue::number(2.0), "m"); }),
              HasSubstr("m must be an integer >= 1 (got 2)"));
  EXPECT_THAT(error_of([&] { set_vision_option(v, "image_token_id", OptionValue::big_integer("18446744073709551615"),
                                               "request.vision.image_token_id"); }),
              HasSubstr("18446744073709551615"));
  EXPECT_THAT(error_of([&] { set_vision_option(v, "tokens_per_second", OptionValue::number(1e300), "tps"); }),
              HasSubstr("float32"));
  EXPECT_THAT(error_of([&] { set_vision_option(v, "time", OptionValue::string("frames"), "t"); }),
              HasSubstr("'frames'"));
}

// The section sum is not taken in int: 2147483647 + 2147483647 + 66 would wrap to 64, pass
// for rotary dim 128, and make every frequency read the temporal axis.
TEST(Options, SectionSumsDoNotWrap) {
  RotaryConfig r;
  r.sections = {2147483647, 2147483647, 66};
  EXPECT_THAT(error_of([&] { validate(r); }), HasSubstr("[2147483647, 2147483647, 66]"));
  r.sections = {-2147483647 - 1, -2147483647 - 1, 64};
  EXPECT_THAT(error_of([&] { validate(r); }), HasSubstr("must be >= 0"));
  RotaryConfig t;
  set_rotary_option(t, "sections", OptionValue::text("2147483647,2147483647,66"), "--sections");
  EXPECT_THROW(validate(t), Error);
  EXPECT_THROW(frequency_axes(t), Error);
  EXPECT_THAT(error_of([&] { set_rotary_option(t, "sections", OptionValue::text("2147483648,0,64"), "--sections"); }),
              HasSubstr("each in [0, 2^31)"));
  EXPECT_THAT(error_of([&] { set_rotary_option(t, "sections", OptionValue::integers({16, 24}), "s"); }),
              HasSubstr("s must be three integers t,h,w (got [16, 24])"));
  for (const char* bad : {"16,24", "16,24,24,0", "16,,24", "16,24,24,", "16, 24, 24", "0x10,24,24", ""})
    EXPECT_THAT(error_of([&] { set_rotary_option(t, "sections", OptionValue::text(bad), "--sections"); }),
                HasSubstr("--sections must be three integers"))
        << bad;
  set_rotary_option(t, "sections", OptionValue::text("24,20,20"), "--sections");
  set_rotary_option(t, "layout", OptionValue::text("interleaved"), "--freq-layout");
  EXPECT_NO_THROW(validate(t));
  EXPECT_THAT(error_of([&] { set_rotary_option(t, "rotary_dim", OptionValue::integer(4294967424LL), "d"); }),
              HasSubstr("d must be in [2, 1024] (got 4294967424)"));
}

TEST(Options, Schemes) {
  EXPECT_EQ(scheme_option(OptionValue::text("mrope"), "--scheme"), Scheme::mrope);
  EXPECT_THAT(error_of([] { scheme_option(OptionValue::integer(3), "request.scheme"); }),
              HasSubstr("request.scheme must be a scheme name"));
  EXPECT_THAT(error_of([] { scheme_option(OptionValue::string("spiral"), "--scheme"); }),
              HasSubstr("--scheme: unknown scheme 'spiral'"));
}

TEST(Options, MessagesShowBoundedValues) {
  const std::string long_text(100000, 'x');
  const std::string m = error_of([&] { parse_number(long_text, "n"); });
  EXPECT_LT(m.size(), 120u);
  EXPECT_LT(OptionValue::other(long_text).shown().size(), 80u);
  EXPECT_LT(OptionValue::big_integer(std::string(500, '9')).shown().size(), 50u);
}

// ------------------------------------ the quoting rule and the unsigned grammar ---

// Undoes quoted(): the bytes its escapes stand for; false if it holds anything else than
// printable ASCII other than ' and \, and \xNN escapes.
bool unquote(std::string_view body, std::string& out) {
  for (std::size_t i = 0; i < body.size(); ++i) {
    const auto c = static_cast<unsigned char>(body[i]);
    if (c == '\\') {
      if (i + 3 >= body.size()) return false;
      if (body[i + 1] != 'x' || !std::isxdigit(static_cast<unsigned char>(body[i + 2])) ||
          !std::isxdigit(static_cast<unsigned char>(body[i + 3])))
        return false;
      out += static_cast<char>(std::stoi(std::string(body.substr(i + 2, 2)), nullptr, 16));
      i += 3;
    } else if (c < 0x20 || c >= 0x7f || c == '\'') {
      return false;
    } else {
      out += static_cast<char>(c);
    }
  }
  return true;
}

// The one quoting rule every front end uses (detail/quote.h), on random bytes.
TEST(Quote, RandomBytesAreBoundedEscapedAndOnOneLine) {
  std::mt19937_64 random(19);
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const auto length = random() % (i % 4 ? 60 : 400);
    for (std::uint64_t k = 0; k < length; ++k) text += static_cast<char>(random() % (i % 2 ? 256 : 128));
    SCOPED_TRACE(detail::one_line(text));
    const bool cut = text.size() > detail::kQuoted;
    // quoted: the first 40 bytes exactly, escaped, then "..." when there were more
    const std::string q = detail::quoted(text);
    ASSERT_GE(q.size(), 2u);
    ASSERT_EQ(q.front(), '\'');
    ASSERT_EQ(q.back(), '\'');
    EXPECT_LE(q.size(), 2 + 4 * detail::kQuoted + 3);
    std::string body = q.substr(1, q.size() - 2), decoded;
    ASSERT_EQ(body.ends_with("..."), cut);
    if (cut) body.resize(body.size() - 3);
    ASSERT_TRUE(unquote(body, decoded)) << q;
    EXPECT_EQ(decoded, text.substr(0, detail::kQuoted));
    EXPECT_EQ(q, oracle::quoted(text));  // the rule as its comment states it, written again
    // escaped: the same bound and bytes, without quotes
    const std::string e = detail::escaped(text);
    EXPECT_TRUE(clean_message(e, text));
    EXPECT_LE(e.size(), 4 * detail::kQuoted + 3);
    // one_line: printable ASCII within its limit; printable text that fits is left as it is
    for (const std::size_t limit : {std::size_t{1000}, std::size_t{50}}) {
      const std::string l = detail::one_line(text, limit);
      EXPECT_TRUE(clean_message(l, ""));
      EXPECT_LE(l.size(), limit);
      const bool printable = std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
      if (printable && text.size() <= limit && !text.ends_with(" ")) {
        EXPECT_EQ(l, text);
      }
    }
    // shown_name: a plain name as it is, anything else quoted
    const std::string n = detail::shown_name(text);
    EXPECT_TRUE(n == text || n == q);
    EXPECT_TRUE(clean_message(n, text));
  }
  EXPECT_EQ(detail::quoted("it's a\\b\n\x1b[1m\x07"), "'it\\x27s a\\x5cb\\x0a\\x1b[1m\\x07'");
  EXPECT_EQ(detail::escaped("[1, 'a']\n"), "[1, 'a']\\x0a");
  EXPECT_EQ(detail::one_line("two\nlines\r\n\ttab \x1b[31m "), "two lines   tab \\x1b[31m");
  EXPECT_EQ(detail::one_line(std::string(10, 'x') + "\x01", 12), "xxxxxxxxx...");  // no escape cut in half
  EXPECT_EQ(detail::shown_name("request.circle.radius"), "request.circle.radius");
  EXPECT_EQ(detail::shown_name("a b"), "'a b'");
  EXPECT_EQ(detail::shown_name(""), "''");
  EXPECT_EQ(detail::shown_name(std::string(41, 'k')), "'" + std::string(40, 'k') + "...'");
}

// An unsigned (counts, indices, seeds: what the command's integer flags read) is decimal
// digits in the caller's range; CLI11 read them with base 0 ("010" was 8, "0x24" 36).
TEST(Options, UnsignedIsDigitsOnlyInTheCallersRange) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(parse_unsigned("010", "--layers", 1, 100000), 10u);
  EXPECT_EQ(parse_unsigned("0", "n", 0, 0), 0u);
  EXPECT_EQ(parse_unsigned("00000000000000000000000000036", "n", 0, 100), 36u);
  EXPECT_EQ(parse_unsigned("18446744073709551615", "--seed", 0, kMax), kMax);
  for (const char* text : {"", "+1", "-1", "-0", " 1", "1 ", "0x24", "1e3", "1.0", "1_0", "\xd9\xa3", "1\n",
                           "18446744073709551616", "99999999999999999999999", "100001", "0"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(error_of([&] { parse_unsigned(text, "--layers", 1, 100000); }),
              "--layers must be an integer in [1, 100000] (got " + detail::quoted(text) + ")");
  }
  EXPECT_EQ(error_of([] { parse_unsigned("-1", "--seed", 0, kMax); }),
            "--seed must be an integer in [0, 18446744073709551615] (got '-1')");
}

// Random text through the grammar's integers and numbers, against a second reading written
// from the grammar's text (the fuzz target fuzz_grammar runs the same property unbounded).
TEST(Options, RandomTextAgreesWithTheGrammarsRegularExpressions) {
  std::mt19937_64 random(1919);
  const std::string alphabet = "00112233445566778899+-. eEx_";
  const std::uint64_t bounds[] = {0, 1, 10, 1024, 100000, std::uint64_t{1} << 24,
                                  std::numeric_limits<std::uint64_t>::max()};
  int accepted = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string text;
    const auto length = random() % (i % 10 ? 6 : 24);
    for (std::uint64_t k = 0; k < length; ++k) text += alphabet[random() % alphabet.size()];
    SCOPED_TRACE(text);
    const auto integer = oracle::integer(text);
    try {
      const std::int64_t got = parse_integer(text, "n");
      EXPECT_EQ(got, integer.value());
      ++accepted;
    } catch (const Error& e) {
      EXPECT_FALSE(integer.has_value());
      EXPECT_THAT(e.what(), HasSubstr(oracle::quoted(text)));
    } catch (const std::bad_optional_access&) {
      ADD_FAILURE() << "parse_integer accepted text the grammar refuses";
    }
    std::uint64_t low = bounds[random() % 7], high = bounds[random() % 7];
    if (low > high) std::swap(low, high);
    const auto count = oracle::unsigned_in(text, low, high);
    try {
      const std::uint64_t got = parse_unsigned(text, "n", low, high);
      EXPECT_EQ(got, count.value());
    } catch (const Error& e) {
      EXPECT_FALSE(count.has_value()) << low << " " << high;
      EXPECT_THAT(e.what(), HasSubstr(oracle::quoted(text)));
    } catch (const std::bad_optional_access&) {
      ADD_FAILURE() << "parse_unsigned accepted text outside the grammar or [" << low << ", " << high << "]";
    }
    const auto number = oracle::number(text);
    try {
      const double got = parse_number(text, "n");
      EXPECT_TRUE(number.has_value() && std::memcmp(&got, &*number, sizeof got) == 0) << got;
    } catch (const Error& e) {
      EXPECT_FALSE(number.has_value());
      EXPECT_THAT(e.what(), HasSubstr(oracle::quoted(text)));
    }
  }
  EXPECT_GT(accepted, 300);
}

// The C APIs name a value by its key: an unknown key was echoed whole (and its bytes raw).
TEST(Options, UnknownKeysOfTheCApisAreShownByTheQuotingRule) {
  const std::string long_key(100000, 'k'), control_key = "a\x1b[31m\x07z";
  for (const std::string& key : {long_key, control_key}) {
    CircleConfig c;
    VisionConfig v;
    RotaryConfig r;
    for (const std::string& m :
         {error_of([&] { set_circle_option(c, key, OptionValue::text("1"), key); }),
          error_of([&] { set_vision_option(v, key, OptionValue::text("1"), key); }),
          error_of([&] { set_rotary_option(r, key, OptionValue::text("1"), key); })}) {
      EXPECT_TRUE(clean_message(m, key));
      EXPECT_THAT(m, HasSubstr("' is not a"));
    }
  }
  CircleConfig c;
  EXPECT_THAT(error_of([&] { set_circle_option(c, "colour", OptionValue::text("red"), "colour"); }),
              HasSubstr("colour is not a Circle-RoPE option"));
  EXPECT_THAT(error_of([&] { set_circle_option(c, control_key, OptionValue::text("1"), control_key); }),
              HasSubstr("'a\\x1b[31m\\x07z' is not a Circle-RoPE option"));
}

// Every function of the core that reads text names a refused value by the one rule: an
// unknown compat mode gave a 100,132-character message.
TEST(Options, EveryTextEntryPointNamesItsValueByTheQuotingRule) {
  EXPECT_LT(error_of([] { parse_compat(std::string(100000, 'x')); }).size(), 1000u);
  std::mt19937_64 random(191919);
  std::vector<std::function<void(const std::string&)>> readers = {
      [](const std::string& t) { parse_number(t, "n"); },
      [](const std::string& t) { parse_integer(t, "n"); },
      [](const std::string& t) { parse_unsigned(t, "n", 0, 9); },
      [](const std::string& t) { parse_boolean(t, "n"); },
      [](const std::string& t) { parse_time_mode(t); },
      [](const std::string& t) { parse_scheme(t); },
      [](const std::string& t) { parse_frequency_layout(t); },
      [](const std::string& t) { parse_compat(t); },
      [](const std::string& t) { parse_layout(t); },
      [](const std::string& t) { parse_layout("text:2," + t); },
      [](const std::string& t) { AgePlan(t, 4); },
      [](const std::string& t) { parse_dtype(t); },
      [](const std::string& t) { parse_pairing(t); },
      [](const std::string& t) { parse_isa(t); },
      [](const std::string& t) { scheme_option(OptionValue::text(t), "s"); },
      [](const std::string& t) { scheme_option(OptionValue::other(t), "s"); },
      [](const std::string& t) { scheme_option(OptionValue::integer(1).shown_as(t), "s"); },
      [](const std::string& t) { set_rotary_option(*std::make_unique<RotaryConfig>(), "sections", OptionValue::text(t), "s"); },
      [](const std::string& t) { set_vision_option(*std::make_unique<VisionConfig>(), "image_token_id", OptionValue::big_integer(t), "i"); },
  };
  for (const char* key : {"radius", "alpha", "move_to_origin", "dff_rate", "move_to_positive", "method"})
    readers.push_back([key](const std::string& t) {
      CircleConfig c;
      set_circle_option(c, key, OptionValue::text(t), key);
      set_circle_option(c, key, OptionValue::string(t), key);
    });
  for (const char* key : {"spatial_merge_size", "tokens_per_second", "vision_start_token_id", "time", "compat"})
    readers.push_back([key](const std::string& t) {
      VisionConfig v;
      set_vision_option(v, key, OptionValue::text(t), key);
      set_vision_option(v, key, OptionValue::string(t), key);
    });
  for (const char* key : {"theta", "rotary_dim", "layout", "sections"})
    readers.push_back([key](const std::string& t) {
      RotaryConfig r;
      set_rotary_option(r, key, OptionValue::text(t), key);
    });
  for (std::size_t reader = 0; reader < readers.size(); ++reader)
    for (int i = 0; i < 200; ++i) {
      std::string text;
      const auto length = 1 + random() % (i % 2 ? 20 : 300);
      for (std::uint64_t k = 0; k < length; ++k) text += static_cast<char>(random() % 256);
      SCOPED_TRACE("reader " + std::to_string(reader) + ": " + detail::one_line(text));
      try {
        readers[reader](text);
      } catch (const Error& e) {
        EXPECT_TRUE(clean_message(e.what(), text));
      }
    }
}

}  // namespace
