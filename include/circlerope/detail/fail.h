// circlerope — detail, not API: how the library builds the one-line message of a
// circlerope::Error. Public (installed) so that the kernels, the C APIs and future backends
// include only public headers (DESIGN.md layering); no stability promise.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "circlerope/error.h"

namespace circlerope::detail {

// User text for a message: in single quotes, at most kQuoted characters (then "..."), bytes
// outside printable ASCII as \xNN. Messages never carry an unbounded value.
inline constexpr std::size_t kQuoted = 40;
inline std::string quoted(std::string_view s) {
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kQuoted; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", c);
      out += buffer;
    }
  }
  if (s.size() > kQuoted) out += "...";
  return out + "'";
}

template <typename... Args>
[[noreturn]] void fail(Args&&... parts) {
  std::ostringstream message;
  message.precision(10);
  (message << ... << std::forward<Args>(parts));
  throw Error(message.str());
}

}  // namespace circlerope::detail
