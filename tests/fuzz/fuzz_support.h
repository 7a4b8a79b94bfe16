// Shared by the libFuzzer targets of tests/fuzz (not a target itself).
//
// A target's verdict on one input:
//  - a documented error (circlerope::Error, a C status other than CRP_OK) is fine;
//  - anything else is a finding: a crash or sanitizer report, or a check below that fails
//    (wrong numbers, success on an input that must be refused, a refusal of an input that
//    must be accepted). finding() prints one line naming the check and aborts, which
//    libFuzzer reports as a crash and saves the input.
#pragma once

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fuzz {

// Parking a finding that is not fixed yet: give its input class a predicate named after it
// ("F5") and skip it with `if (fuzz::skip_known("F5") && ...)`, so that a long run does not
// stop at it again and again; save its minimised input under regressions/ and list it in
// regressions/OPEN (which keeps its ctest entry disabled) until the fix lands. No class is
// parked today: every finding so far (README.md's list, F1-F4) is fixed and its skip removed.
// Skipping off runs every check, which is how the regression inputs run under ctest. The
// default is the CMake option CIRCLEROPE_FUZZ_SKIP_KNOWN; the environment variable of the
// same name overrides it at run time: 0 (check everything), 1 (skip every parked class) or a
// comma-separated list of the classes to skip, e.g. "F5,F6".
#if defined(CIRCLEROPE_FUZZ_SKIP_KNOWN) && CIRCLEROPE_FUZZ_SKIP_KNOWN
inline constexpr bool kSkipKnownDefault = true;
#else
inline constexpr bool kSkipKnownDefault = false;
#endif
inline bool skip_known(const char* id, const char* family = nullptr) {
  static const std::string setting = [] {
    const char* v = std::getenv("CIRCLEROPE_FUZZ_SKIP_KNOWN");
    return std::string(v && *v ? v : kSkipKnownDefault ? "1" : "0");
  }();
  if (setting == "1") return true;
  if (setting == "0") return false;
  const std::string padded = "," + setting + ",";
  auto listed = [&](const char* name) { return name && padded.find("," + std::string(name) + ",") != std::string::npos; };
  return listed(id) || listed(family);
}

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void finding(const char* format, ...) {
  std::fputs("circlerope fuzz finding: ", stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

// Outcome counters, printed at exit when CIRCLEROPE_FUZZ_STATS is set: how many inputs
// reached each verdict (a target that never reaches "accepted" checks little).
struct Stats {
  static constexpr int kMax = 16;
  const char* names[kMax] = {};
  unsigned long long counts[kMax] = {};
  ~Stats() {
    if (!std::getenv("CIRCLEROPE_FUZZ_STATS")) return;
    for (int i = 0; i < kMax && names[i]; ++i) std::fprintf(stderr, "stat::%s: %llu\n", names[i], counts[i]);
  }
};
inline void count(const char* name) {
  static Stats stats;
  for (int i = 0; i < Stats::kMax; ++i) {
    if (!stats.names[i]) stats.names[i] = name;
    if (std::strcmp(stats.names[i], name) == 0) {
      ++stats.counts[i];
      return;
    }
  }
}

#define FUZZ_CHECK(condition, ...)                   \
  do {                                               \
    if (!(condition)) ::fuzz::finding(__VA_ARGS__); \
  } while (0)

// A message of the C API: NUL-terminated inside `size` bytes, one line, and empty exactly
// when the call succeeded. `buffer` holds `size` bytes plus guard bytes set to `guard`
// that must be left alone.
inline void check_c_message(const char* buffer, std::size_t size, std::size_t guard_bytes,
                            char guard, bool ok, const char* function) {
  for (std::size_t i = 0; i < guard_bytes; ++i)
    FUZZ_CHECK(buffer[size + i] == guard, "%s wrote past error_size=%zu", function, size);
  if (size == 0) return;
  const std::size_t length = strnlen(buffer, size);
  FUZZ_CHECK(length < size, "%s left the message without a NUL inside error_size=%zu", function, size);
  FUZZ_CHECK(std::memchr(buffer, '\n', length) == nullptr, "%s message is not one line: %s",
             function, buffer);
  if (ok) FUZZ_CHECK(length == 0, "%s succeeded with a message: %s", function, buffer);
  else if (size > 1) FUZZ_CHECK(length > 0, "%s failed with an empty message", function);
}

// Every byte of a region equals `value`.
inline bool all_bytes(const void* p, std::size_t n, unsigned char value) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != value) return false;
  return true;
}

}  // namespace fuzz
