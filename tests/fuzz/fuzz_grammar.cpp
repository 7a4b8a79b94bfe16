// libFuzzer target: random text through the one grammar's integers and numbers
// (circlerope/options.h: parse_integer, parse_unsigned in a range, parse_number), which every
// front end's counts, seeds and configuration values go through.
//
// Oracle (grammar_oracle.h, std::regex and digit strings, no code shared with src/): a text is
// accepted exactly when the grammar's regular expression matches it and its value fits, and
// then with the same value; refused otherwise. A refusal's message is printable ASCII and shows
// the text by the one quoting rule (its first 40 bytes, escaped, in quotes).
//
// Input: byte 0 chooses the function, bytes 1-2 the range of parse_unsigned (below), the rest is
// the text.
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "circlerope/options.h"
#include "fuzz_support.h"
#include "grammar_oracle.h"

namespace {

using namespace circlerope;

// A refusal names the function's name ("n") first and the text by the quoting rule.
void check_message(const char* what, const std::string& message, const std::string& text) {
  for (const char c : message)
    FUZZ_CHECK(c >= 0x20 && c < 0x7f, "%s: a byte 0x%02x outside printable ASCII in its message", what,
               static_cast<unsigned char>(c));
  FUZZ_CHECK(message.rfind("n must be", 0) == 0, "%s: the message does not start with the name: %.200s", what,
             message.c_str());
  FUZZ_CHECK(message.find(oracle::quoted(text)) != std::string::npos,
             "%s: the message does not show the text by the quoting rule: %.300s", what, message.c_str());
}

// Ranges of parse_unsigned that the CLI uses and their edges: [0, 2^64-1], [1, 100000], ...
std::uint64_t bound(std::uint8_t b) {
  switch (b % 8) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 1024;
    case 3: return 100000;
    case 4: return std::uint64_t{1} << 24;
    case 5: return std::numeric_limits<std::uint64_t>::max();
    case 6: return std::numeric_limits<std::uint64_t>::max() - 1;
    default: return b;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 3, size - 3);
  switch (data[0] % 3) {
    case 0: {
      const auto expected = oracle::integer(text);
      try {
        const std::int64_t got = parse_integer(text, "n");
        FUZZ_CHECK(expected.has_value(), "parse_integer accepted text the grammar refuses (read %lld)",
                   static_cast<long long>(got));
        FUZZ_CHECK(got == *expected, "parse_integer read %lld, the grammar %lld", static_cast<long long>(got),
                   static_cast<long long>(*expected));
        fuzz::count("integer accepted");
      } catch (const Error& e) {
        FUZZ_CHECK(!expected.has_value(), "parse_integer refused an integer of the grammar (%lld): %.200s",
                   static_cast<long long>(*expected), e.what());
        check_message("parse_integer", e.what(), text);
        fuzz::count("integer refused");
      }
      break;
    }
    case 1: {
      std::uint64_t low = bound(data[1]), high = bound(data[2]);
      if (low > high) std::swap(low, high);
      const auto expected = oracle::unsigned_in(text, low, high);
      try {
        const std::uint64_t got = parse_unsigned(text, "n", low, high);
        FUZZ_CHECK(expected.has_value(), "parse_unsigned accepted text outside the grammar or [%llu, %llu]",
                   static_cast<unsigned long long>(low), static_cast<unsigned long long>(high));
        FUZZ_CHECK(got == *expected, "parse_unsigned read %llu, the grammar %llu", static_cast<unsigned long long>(got),
                   static_cast<unsigned long long>(*expected));
        fuzz::count("unsigned accepted");
      } catch (const Error& e) {
        FUZZ_CHECK(!expected.has_value(), "parse_unsigned refused %llu in [%llu, %llu]: %.200s",
                   static_cast<unsigned long long>(*expected), static_cast<unsigned long long>(low),
                   static_cast<unsigned long long>(high), e.what());
        check_message("parse_unsigned", e.what(), text);
        fuzz::count("unsigned refused");
      }
      break;
    }
    default: {
      const auto expected = oracle::number(text);
      try {
        const double got = parse_number(text, "n");
        FUZZ_CHECK(expected.has_value(), "parse_number accepted text the grammar refuses (read %g)", got);
        FUZZ_CHECK(std::memcmp(&got, &*expected, sizeof got) == 0, "parse_number read %a, strtod %a", got, *expected);
        fuzz::count("number accepted");
      } catch (const Error& e) {
        FUZZ_CHECK(!expected.has_value(), "parse_number refused a number of the grammar (%a): %.200s", *expected,
                   e.what());
        check_message("parse_number", e.what(), text);
        fuzz::count("number refused");
      }
      break;
    }
  }
  return 0;
}
