// The JSON request reader of the command line (cli/request.h), in process: what it refuses,
// and that no input makes it crash, recurse without bound or quote a value without bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "request.h"

namespace {

using namespace circlerope;
using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

std::string error_of(const std::string& text) {
  try {
    cli::parse_request_text(text);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  return "<accepted>";
}

TEST(Request, TextAfterANulByteIsAnError) {
  // nlohmann stops at the NUL: the request below was read as {"input_ids": [[1]]}.
  const std::string text = std::string("{\"input_ids\": [[1]]}") + '\0' + "{\"scheme\": 7}";
  EXPECT_THAT(error_of(text), HasSubstr("NUL byte at offset 20"));
  std::istringstream in(text);
  EXPECT_THROW(cli::read_request(in, "on stdin"), Error);
}

TEST(Request, DuplicateKeysAreErrorsAtEveryLevel) {
  // The last one silently won.
  EXPECT_THAT(error_of(R"({"input_ids": [[1]], "input_ids": [[2]]})"),
              HasSubstr("the key 'input_ids' twice in one object"));
  EXPECT_THAT(error_of(R"({"scheme": "circle", "circle": {"radius": 10, "radius": 3}, "input_ids": [[1]]})"),
              HasSubstr("'radius' twice"));
  EXPECT_THAT(error_of(R"({"vision": {"time": "index", "time": "seconds"}, "input_ids": [[1]]})"),
              HasSubstr("twice"));
  // The same key in different objects is fine.
  EXPECT_NO_THROW(cli::parse_request_text(
      R"({"scheme": "circle", "circle": {"radius": 10, "method": "circle"}, "vision": {"time": "index"}, "input_ids": [[1]]})"));
}

TEST(Request, IntegersBeyondInt64DoNotWrap) {
  // 18446744073709551615 (2^64 - 1) was read as -1, 2^63 as INT64_MIN.
  EXPECT_THAT(error_of(R"({"input_ids": [[18446744073709551615]]})"),
              AllOf(HasSubstr("request.input_ids[0][0]"), HasSubstr("18446744073709551615 is beyond the int64 range")));
  EXPECT_THAT(error_of(R"({"input_ids": [[1, 2]], "attention_mask": [[1, 9223372036854775808]]})"),
              HasSubstr("9223372036854775808"));
  EXPECT_THAT(error_of(R"({"input_ids": [[1]], "image_grid_thw": [[1, 18446744073709551614, 2]]})"),
              HasSubstr("image_grid_thw[0][1]"));
  EXPECT_THAT(error_of(R"({"input_ids": [[1]], "vision": {"image_token_id": 18446744073709551615}})"),
              HasSubstr("request.vision.image_token_id must be an integer in [-2^63, 2^63)"));
  // 2^63 - 1 itself is an integer like any other.
  const cli::Request r = cli::parse_request_text(R"({"input_ids": [[9223372036854775807, -9223372036854775808]]})");
  EXPECT_EQ(r.input_ids[0], INT64_MAX);
  EXPECT_EQ(r.input_ids[1], INT64_MIN);
}

TEST(Request, DeepNestingIsRefusedWhileParsing) {
  // '[' * 100000 overflowed the stack (in json::dump() of the message). The depth is now
  // limited while parsing: top level, inside "scheme", inside an input_ids element.
  const int n = 100000;
  const std::string deep = std::string(n, '[') + std::string(n, ']');
  EXPECT_THAT(error_of(deep), HasSubstr("deeper than 32 levels"));
  EXPECT_THAT(error_of("{\"scheme\": " + deep + "}"), HasSubstr("deeper than 32 levels"));
  EXPECT_THAT(error_of("{\"input_ids\": [[1, " + deep + "]]}"), HasSubstr("deeper than 32 levels"));
  std::string objects;
  for (int i = 0; i < n; ++i) objects += "{\"a\":";
  EXPECT_THAT(error_of(objects + "1" + std::string(n, '}')), HasSubstr("deeper than 32 levels"));
  // 32 levels are still parsed (and then refused for what they are, with a short message).
  const std::string ok_depth = "{\"scheme\": " + std::string(30, '[') + std::string(30, ']') + "}";
  EXPECT_THAT(error_of(ok_depth), HasSubstr("request.scheme must be a scheme name"));
}

TEST(Request, MessagesQuoteBoundedExcerpts) {
  // Never the whole offending value: a long string, a huge array, a long number literal.
  const std::string cases[] = {
      "{\"scheme\": \"" + std::string(1000000, 'x') + "\"}",
      "{\"scheme\": [" + std::string(1000000, '1') + "]}",
      "{\"input_ids\": [[1]], \"scheme\": [" + [] {
        std::string s;
        for (int i = 0; i < 200000; ++i) s += "1,";
        return s + "1";
      }() + "]}",
      "{\"input_ids\": [[1]], \"circle\": {\"radius\": {\"" + std::string(100000, 'k') + "\": 1}}, \"scheme\": \"circle\"}",
      "{\"" + std::string(100000, 'q') + "\": 1}",
  };
  for (const std::string& text : cases) EXPECT_LT(error_of(text).size(), 400u) << error_of(text).substr(0, 400);
  // A deep value built in memory (not parsed): the message is still short and built
  // without unbounded recursion.
  json deep = 1;
  for (int i = 0; i < 100000; ++i) {
    json outer = json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  json request = {{"input_ids", {{1}}}};
  request["scheme"] = std::move(deep);
  try {
    cli::parse_request(request);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u);
  }
}

TEST(Request, SizeLimitsAreCheckedWhileReading) {
  // A request beyond 64 MiB is refused after 64 MiB, not after reading all of it.
  struct Endless : std::streambuf {
    std::size_t served = 0;
    char chunk[4096];
    Endless() { std::fill(std::begin(chunk), std::end(chunk), ' '); }
    int_type underflow() override {
      served += sizeof chunk;
      setg(chunk, chunk, chunk + sizeof chunk);
      return ' ';
    }
  } endless;
  std::istream in(&endless);
  try {
    cli::read_request(in, "on stdin");
    ADD_FAILURE() << "read without end";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("more than 67108864 bytes (64 MiB)"));
  }
  EXPECT_LE(endless.served, cli::kMaxRequestBytes + (1 << 17));
  EXPECT_THAT(error_of(std::string(cli::kMaxRequestBytes + 1, ' ')), HasSubstr("more than the limit of 67108864"));
}

}  // namespace
