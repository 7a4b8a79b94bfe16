// Reading the published reference positions, shared by test_golden.cpp (the
// library) and test_cli.cpp (the command). Kept apart from test_support.h so
// that only these two suites pull in nlohmann/json.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

namespace circlerope::test {

// docs/spec.md §8: 1e-4 absolute or relative, whichever is larger (the
// reference computes in float32; we compute in double and round once).
inline constexpr double kGoldenTolerance = 1e-4;

// The whole content of a file; empty when it cannot be read.
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The cases of tests/data/reference_positions.json (request + expected output).
inline nlohmann::json golden_cases() { return nlohmann::json::parse(slurp(CIRCLEROPE_GOLDEN_FILE))["cases"]; }

// Whether `got` is within kGoldenTolerance of the reference value `expected`.
inline bool golden_close(double expected, double got) {
  return std::fabs(expected - got) <= kGoldenTolerance * std::max(1.0, std::fabs(expected));
}

}  // namespace circlerope::test
