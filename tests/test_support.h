// Helpers shared by the GoogleTest suites (tests/test_*.cpp): token ids, the
// float32 tolerance, a batch that owns its arrays and a few ways to build one.
// Not a test source itself: tests/CMakeLists.txt globs only test_*.cpp.
#pragma once

#include <cfloat>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <functional>
#include <string>

#include "circlerope/error.h"
#include "circlerope/positions.h"

namespace circlerope::test {

// Qwen2.5-VL token ids (the VisionConfig{} defaults), spelled out so tests do not
// read them back from the library; kEnd (vision_end) is plain text for positions.
inline constexpr int64_t kStart = 151652;
inline constexpr int64_t kEnd = 151653;
inline constexpr int64_t kImg = 151655;
inline constexpr int64_t kVid = 151656;

// Circle-RoPE positions are float32 values of magnitude up to ~|c| + R (+ S when
// decoding); each float32 rounding is off by <= 2^-24 of it, and the at most four
// roundings on any path (ring, anchor add, running max, delta; or delta, then
// p + delta when decoding) stay under 4 * FLT_EPSILON of the largest magnitude.
inline constexpr double kFloatRoundings = 4.0 * FLT_EPSILON;

// A batch that owns its arrays (RopeIndexInput only views them); the default is
// the empty batch (0 rows of 0 tokens).
struct Batch {
  int64_t batch = 0, seq = 0;
  std::vector<int64_t> ids, mask;
  std::vector<GridTHW> images, videos;
  std::vector<double> seconds;
  RopeIndexInput input() const { return {ids, batch, seq, mask, images, videos, seconds}; }
};

// A batch of one unpadded row holding `ids` (grids, mask and seconds left empty).
inline Batch one_row(std::vector<int64_t> ids) {
  Batch b;
  b.batch = 1;
  b.seq = static_cast<int64_t>(ids.size());
  b.ids = std::move(ids);
  return b;
}

// A vision block as it stands in input_ids: start marker, n `token`s, end marker.
inline std::vector<int64_t> block(int64_t token, int64_t n) {
  std::vector<int64_t> v = {kStart};
  v.insert(v.end(), static_cast<size_t>(n), token);
  v.push_back(kEnd);
  return v;
}

// The concatenation of `parts`, to write a row as text runs and block(...)s.
inline std::vector<int64_t> cat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The positions of a token-free layout ("text:5,image:3x3") under one scheme,
// with the default VisionConfig.
inline Positions from_layout(std::string_view layout, Scheme scheme, const CircleConfig& circle = {}) {
  return layout_positions(parse_layout(layout), VisionConfig{}, {scheme, circle});
}

// Two rows with one image each, the second left-padded (the AGE tests' prompt):
// row 0: T T S [3x3] E T T; row 1: P P T S [2x2] E T T T T T
inline Batch two_padded_image_rows() {
  Batch p;
  p.batch = 2;
  p.seq = 15;
  p.ids = {1, 2, kStart, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kEnd, 3, 4,
           0, 0, 5, kStart, kImg, kImg, kImg, kImg, kEnd, 6, 7, 8, 9, 10, 11};
  p.mask.assign(30, 1);
  p.mask[15] = p.mask[16] = 0;
  p.images = {{1, 6, 6}, {1, 4, 4}};
  return p;
}

// The message of the circlerope::Error `f` throws; fails the test if it throws nothing or
// something else, or if the message is empty or not one line.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
    EXPECT_FALSE(m.empty());
    return m;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-circlerope exception: " << e.what();
    return std::string("<wrong type> ") + e.what();
  }
  ADD_FAILURE() << "no error";
  return "<no error>";
}

// Runs `statement` in a child process, so that a crash or an attempt to allocate terabytes
// fails this test only: exit 0 = threw circlerope::Error, 1 = threw something else
// (std::bad_alloc, std::length_error), 2 = threw nothing; a signal means it crashed.
#define EXPECT_ERROR_IN_CHILD(statement)         \
  EXPECT_EXIT(                                  \
      {                                         \
        try {                                   \
          statement;                            \
        } catch (const ::circlerope::Error&) {  \
          std::_Exit(0);                        \
        } catch (...) {                         \
          std::_Exit(1);                        \
        }                                       \
        std::_Exit(2);                          \
      },                                        \
      ::testing::ExitedWithCode(0), "")

}  // namespace circlerope::test
