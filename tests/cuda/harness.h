// The CUDA device tests run where GoogleTest may be missing (a GPU machine with nothing but
// a pip PyTorch, nvcc and CMake). With CIRCLEROPE_USE_GTEST they are GoogleTest tests; without
// it this header supplies the few GoogleTest macros they use, with the same meaning:
// TEST, EXPECT_/ASSERT_ TRUE FALSE EQ NE LE LT GE GT NEAR, GTEST_SKIP, SCOPED_TRACE, a main()
// that takes --gtest_filter=A*:B.c (':'-separated globs), and exit code 1 on any failure.
// A run where every test skipped exits with 77 (ctest's SKIP_RETURN_CODE).
#pragma once

#if defined(CIRCLEROPE_USE_GTEST)
#include <gtest/gtest.h>
#else

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mini_test {

struct Registry {
  std::vector<std::pair<std::string, void (*)()>> tests;
  static Registry& get() {
    static Registry r;
    return r;
  }
};

struct State {
  bool failed = false;
  bool skipped = false;
  std::vector<std::string> traces;
  static State& get() {
    static State s;
    return s;
  }
};

struct Registrar {
  Registrar(const char* name, void (*fn)()) { Registry::get().tests.emplace_back(name, fn); }
};

struct Message {
  std::ostringstream text;
  Message() = default;
  Message(Message&& other) noexcept { text << other.text.str(); }
  template <class T>
  Message& operator<<(const T& v) {
    text << v;
    return *this;
  }
};

// `Reporter(...) = Message() << ...` prints the failure with the streamed message.
struct Reporter {
  const char* file;
  int line;
  std::string what;
  void operator=(const Message& m) const {
    State::get().failed = true;
    std::cout << file << ":" << line << ": Failure\n" << what << "\n";
    const std::string extra = m.text.str();
    if (!extra.empty()) std::cout << extra << "\n";
    for (const std::string& t : State::get().traces) std::cout << "  (trace: " << t << ")\n";
  }
};

struct Skipper {
  void operator=(const Message& m) const {
    State::get().skipped = true;
    std::cout << "[  SKIPPED ] " << m.text.str() << "\n";
  }
};

struct Trace {
  explicit Trace(const std::string& t) { State::get().traces.push_back(t); }
  ~Trace() { State::get().traces.pop_back(); }
};

template <class T>
std::string text_of(const T& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

struct Result {
  bool ok;
  std::string text;
};

template <class A, class B, class Op>
Result compare(const A& a, const B& b, const char* sa, const char* sb, const char* op, Op f) {
  if (f(a, b)) return {true, {}};
  std::ostringstream o;
  o << "Expected: (" << sa << ") " << op << " (" << sb << "), actual: " << a << " vs " << b;
  return {false, o.str()};
}

inline bool glob(const char* p, const char* s) {
  if (*p == '\0') return *s == '\0';
  if (*p == '*') return glob(p + 1, s) || (*s && glob(p, s + 1));
  return (*p == '?' ? *s != '\0' : *p == *s) && glob(p + 1, s + 1);
}

inline bool selected(const std::string& filter, const std::string& name) {
  if (filter.empty()) return true;
  std::stringstream parts(filter);
  std::string part;
  while (std::getline(parts, part, ':'))
    if (glob(part.c_str(), name.c_str())) return true;
  return false;
}

inline int run_all(int argc, char** argv) {
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--gtest_filter=", 0) == 0) filter = a.substr(15);
    if (a == "--gtest_list_tests") {
      for (auto& [name, fn] : Registry::get().tests) std::cout << name << "\n";
      return 0;
    }
  }
  int run = 0, failed = 0, skipped = 0;
  for (auto& [name, fn] : Registry::get().tests) {
    if (!selected(filter, name)) continue;
    State::get() = State{};
    std::cout << "[ RUN      ] " << name << std::endl;
    try {
      fn();
    } catch (const std::exception& e) {
      State::get().failed = true;
      std::cout << "unexpected exception: " << e.what() << "\n";
    }
    ++run;
    if (State::get().failed) {
      ++failed;
      std::cout << "[  FAILED  ] " << name << std::endl;
    } else if (State::get().skipped) {
      ++skipped;
      std::cout << "[  SKIPPED ] " << name << std::endl;
    } else {
      std::cout << "[       OK ] " << name << std::endl;
    }
  }
  std::cout << "[==========] " << run << " tests ran: " << run - failed - skipped << " passed, "
            << skipped << " skipped, " << failed << " failed" << std::endl;
  if (failed) return 1;
  return run > 0 && skipped == run ? 77 : 0;
}

}  // namespace mini_test

#define MINI_TEST_NAME(suite, name) suite##_##name##_MiniTest
#define TEST(suite, name)                                                                  \
  static void MINI_TEST_NAME(suite, name)();                                               \
  static const ::mini_test::Registrar MINI_TEST_NAME(suite, name##_registrar)(             \
      #suite "." #name, &MINI_TEST_NAME(suite, name));                                     \
  static void MINI_TEST_NAME(suite, name)()

#define MINI_TEST_REPORT(text) ::mini_test::Reporter{__FILE__, __LINE__, text} = ::mini_test::Message()
#define MINI_TEST_CHECK(cond, text, fatal_return) \
  if (cond) {                                     \
  } else                                          \
    fatal_return MINI_TEST_REPORT(text)
#define EXPECT_TRUE(c) MINI_TEST_CHECK(static_cast<bool>(c), "Expected true: " #c, )
#define EXPECT_FALSE(c) MINI_TEST_CHECK(!static_cast<bool>(c), "Expected false: " #c, )
#define ASSERT_TRUE(c) MINI_TEST_CHECK(static_cast<bool>(c), "Expected true: " #c, return)
#define ASSERT_FALSE(c) MINI_TEST_CHECK(!static_cast<bool>(c), "Expected false: " #c, return)

#define MINI_TEST_CMP(a, b, op, fatal_return)                                                \
  if (const ::mini_test::Result mini_r_ = ::mini_test::compare(                              \
          (a), (b), #a, #b, #op, [](const auto& mini_a_, const auto& mini_b_) { return mini_a_ op mini_b_; });       \
      mini_r_.ok) {                                                                          \
  } else                                                                                     \
    fatal_return MINI_TEST_REPORT(mini_r_.text)
#define EXPECT_EQ(a, b) MINI_TEST_CMP(a, b, ==, )
#define EXPECT_NE(a, b) MINI_TEST_CMP(a, b, !=, )
#define EXPECT_LE(a, b) MINI_TEST_CMP(a, b, <=, )
#define EXPECT_LT(a, b) MINI_TEST_CMP(a, b, <, )
#define EXPECT_GE(a, b) MINI_TEST_CMP(a, b, >=, )
#define EXPECT_GT(a, b) MINI_TEST_CMP(a, b, >, )
#define ASSERT_EQ(a, b) MINI_TEST_CMP(a, b, ==, return)
#define ASSERT_NE(a, b) MINI_TEST_CMP(a, b, !=, return)
#define ASSERT_LE(a, b) MINI_TEST_CMP(a, b, <=, return)
#define ASSERT_LT(a, b) MINI_TEST_CMP(a, b, <, return)
#define ASSERT_GE(a, b) MINI_TEST_CMP(a, b, >=, return)
#define ASSERT_GT(a, b) MINI_TEST_CMP(a, b, >, return)
#define EXPECT_NEAR(a, b, tol)                                                               \
  MINI_TEST_CHECK(std::fabs(static_cast<double>(a) - static_cast<double>(b)) <= (tol),       \
                  "Expected " #a " within " #tol " of " #b, )
#define GTEST_SKIP() return ::mini_test::Skipper{} = ::mini_test::Message()
#define MINI_TEST_CONCAT2(a, b) a##b
#define MINI_TEST_CONCAT(a, b) MINI_TEST_CONCAT2(a, b)
#define SCOPED_TRACE(text) \
  const ::mini_test::Trace MINI_TEST_CONCAT(mini_trace_, __LINE__)(::mini_test::text_of(text))

#endif  // CIRCLEROPE_USE_GTEST
