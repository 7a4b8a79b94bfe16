// What the one quoting rule (circlerope/detail/quote.h) promises of a message that echoes
// text a user gave, checked the same way for every front end: one line of printable ASCII (no
// ESC, BEL or line break of the input reaches a terminal), and never more than kQuoted (40)
// bytes of the input in a row. Not a test source itself (tests/CMakeLists.txt globs test_*.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "circlerope/detail/quote.h"

namespace circlerope::test {

// `message` without its trailing newline, if it has one.
inline ::testing::AssertionResult clean_message(std::string_view message, std::string_view input) {
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  for (std::size_t i = 0; i < message.size(); ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    if (!detail::printable_ascii(c))
      return ::testing::AssertionFailure() << "byte 0x" << std::hex << int{c} << " at " << std::dec << i
                                           << " of " << detail::quoted(message);
  }
  constexpr std::size_t window = detail::kQuoted + 1;
  for (std::size_t i = 0; i + window <= input.size(); ++i)
    if (message.find(input.substr(i, window)) != std::string_view::npos)
      return ::testing::AssertionFailure() << "more than " << detail::kQuoted << " bytes of the input from offset "
                                           << i << " in a row: " << detail::one_line(message);
  return ::testing::AssertionSuccess();
}

}  // namespace circlerope::test
