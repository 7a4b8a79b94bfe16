// circlerope — detail, not API: the one rule for text a user gave inside a message, shared by
// every front end: the library's errors (detail::fail), the C APIs, the `circlerope` command,
// the PyTorch operators, and the Python module (python/bindings.cpp exposes these functions as
// _core.quoted, _core.escaped and _core.one_line). Public (installed) like detail/fail.h, so that
// every layer includes only public headers; no stability promise.
//
//   escaped(text)     at most kQuoted (40) bytes of text, then "..." when there were more; every
//                     byte outside printable ASCII written as \xNN. The result is one line of
//                     printable ASCII: no control byte (ESC, BEL, CR, LF) of the text reaches a
//                     terminal, and 40 bytes of text take at most 163 characters. For text that
//                     is already a display (Python's repr of a value).
//   quoted(text)      the same in single quotes, with ' and \ escaped too (\x27, \x5c), so that
//                     the quotes delimit it: the form messages show user text in.
//   shown_name(text)  a name the user chose (a JSON key, a C API key) where a message names it:
//                     as is when it is 1 to 40 letters, digits and _ . - [ ], else quoted.
//   one_line(message) the last guard before a message is printed or returned: tabs and line
//                     breaks become spaces, other bytes outside printable ASCII \xNN, and at
//                     most kLongestMessage (1000) bytes of it are kept (then "..."). For
//                     messages of other libraries (CLI11, nlohmann, torch) that quote whole.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace circlerope::detail {

inline constexpr std::size_t kQuoted = 40;
inline constexpr std::size_t kLongestMessage = 1000;

inline bool printable_ascii(unsigned char c) { return c >= 0x20 && c < 0x7f; }

inline void append_escaped_byte(std::string& out, unsigned char c) {
  constexpr char kHex[] = "0123456789abcdef";
  out += '\\';
  out += 'x';
  out += kHex[c >> 4];
  out += kHex[c & 0xf];
}

inline void append_escaped(std::string& out, std::string_view text, bool quotes) {
  const std::size_t n = text.size() < kQuoted ? text.size() : kQuoted;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (printable_ascii(c) && !(quotes && (c == '\\' || c == '\''))) out += static_cast<char>(c);
    else append_escaped_byte(out, c);
  }
  if (text.size() > kQuoted) out += "...";
}

inline std::string escaped(std::string_view text) {
  std::string out;
  append_escaped(out, text, false);
  return out;
}

inline std::string quoted(std::string_view text) {
  std::string out = "'";
  append_escaped(out, text, true);
  return out + "'";
}

inline std::string shown_name(std::string_view text) {
  bool plain = !text.empty() && text.size() <= kQuoted;
  for (const char c : text)
    plain = plain && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '.' || c == '-' || c == '[' || c == ']');
  return plain ? std::string(text) : quoted(text);
}

inline std::string one_line(std::string_view message, std::size_t limit = kLongestMessage) {
  std::string out;
  out.reserve(message.size() < limit ? message.size() : limit);
  std::size_t cut = 0;  // the output of the bytes that leave room for "..." (no escape cut in half)
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (printable_ascii(c)) out += ch;
    else if (c == '\n' || c == '\r' || c == '\t') out += ' ';
    else append_escaped_byte(out, c);
    if (out.size() + 3 <= limit) cut = out.size();
    if (out.size() > limit) {
      out.resize(cut);
      out += "...";
      break;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace circlerope::detail
