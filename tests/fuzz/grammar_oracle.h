// A second reading of the grammar's integers and numbers (circlerope/options.h) and of the
// quoting rule its messages use (detail/quote.h), shared by the libFuzzer target
// fuzz_grammar.cpp and test_options.cpp (not a target itself). It shares no code with src/ or
// include/: the forms are std::regex patterns written from the grammar's text, integer values
// are compared as digit strings, numbers come from std::strtod.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>

namespace oracle {

// integer := [+|-] digits, fitting in int64.
inline std::optional<std::int64_t> integer(const std::string& text) {
  static const std::regex form("([+-]?)([0-9]+)");
  std::smatch m;
  if (!std::regex_match(text, m, form)) return std::nullopt;
  const bool negative = m[1] == "-";
  std::string digits = m[2];
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  const std::string limit = negative ? "9223372036854775808" : "9223372036854775807";
  if (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit)) return std::nullopt;
  std::uint64_t magnitude = 0;
  for (const char c : digits) magnitude = magnitude * 10 + static_cast<std::uint64_t>(c - '0');
  return negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude);
}

// unsigned := digits, in [low, high].
inline std::optional<std::uint64_t> unsigned_in(const std::string& text, std::uint64_t low, std::uint64_t high) {
  static const std::regex form("[0-9]+");
  if (!std::regex_match(text, form)) return std::nullopt;
  std::string digits = text;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  const std::string max = "18446744073709551615";
  if (digits.size() > max.size() || (digits.size() == max.size() && digits > max)) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : digits) value = value * 10 + static_cast<std::uint64_t>(c - '0');
  if (value < low || value > high) return std::nullopt;
  return value;
}

// number := [+|-] ( digits [ "." [digits] ] | "." digits ) [ (e|E) [+|-] digits ], finite:
// strtod's value, subnormals kept and what rounds to 0 signed zero, as a decimal literal reads.
inline std::optional<double> number(const std::string& text) {
  static const std::regex form("[+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?");
  if (!std::regex_match(text, form)) return std::nullopt;
  const double value = std::strtod(text.c_str(), nullptr);
  if (std::isinf(value)) return std::nullopt;
  return value;
}

// The quoting rule (circlerope/detail/quote.h) as its comment states it: single quotes around
// the first 40 bytes, each byte outside printable ASCII and each ' and \ as \xNN, then "..."
// when there were more.
inline std::string quoted(const std::string& text) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') out += static_cast<char>(c);
    else out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
  }
  return out + (text.size() > 40 ? "...'" : "'");
}

}  // namespace oracle
