// Sizes that cannot fit get an Error naming the size before anything is allocated: one
// documented limit of tokens per call (positions.h kMaxTokens), on batch and seq_len each as
// well as on their product (issue 9 items 4 and 11).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_support.h"
#include "circlerope/kernels.h"
#include "circlerope/positions.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::HasSubstr;


TEST(LimitsDeathTest, BatchAndSeqLenAreBoundedEachAsWellAsTogether) {
  // batch 2^62 x seq_len 0 holds no token: the product check passed and 2^62 deltas were
  // allocated (rope_index) or written (rope_index_into, the C API: a segfault).
  RopeIndexInput in;
  in.batch = int64_t{1} << 62;
  in.seq_len = 0;
  EXPECT_ERROR_IN_CHILD(rope_index(in, VisionConfig{}, {Scheme::mrope, {}}));
  std::vector<float> none;
  EXPECT_ERROR_IN_CHILD(rope_index_into(in, VisionConfig{}, {Scheme::mrope, {}}, none, none));
  EXPECT_THAT(error_of([&] { rope_index(in, VisionConfig{}, {Scheme::mrope, {}}); }),
              HasSubstr("batch 4611686018427387904 x seq_len 0 is more than 16777216 tokens"));
  in.batch = 0;
  in.seq_len = kMaxTokens + 1;
  EXPECT_THAT(error_of([&] { rope_index(in, VisionConfig{}, {Scheme::mrope, {}}); }), HasSubstr("16777217"));
  // the limit itself is allowed
  in.batch = kMaxTokens;
  in.seq_len = 0;
  EXPECT_EQ(rope_index(in, VisionConfig{}, {Scheme::mrope, {}}).rope_deltas.size(), static_cast<size_t>(kMaxTokens));
}

TEST(LimitsDeathTest, LayoutTokens) {
  // text:2147483648 passed the old 2^31 limit and then asked for 24 GiB.
  EXPECT_ERROR_IN_CHILD(layout_positions(parse_layout("text:2147483648"), VisionConfig{}, {}));
  EXPECT_THAT(error_of([] { layout_positions(parse_layout("text:2147483648"), VisionConfig{}, {}); }),
              HasSubstr("more than 16777216 tokens, the limit of one call (segment 0 adds 2147483648"));
  EXPECT_THAT(error_of([] { layout_positions(parse_layout("text:16777216,image:1x1"), VisionConfig{}, {}); }),
              HasSubstr("segment 1 adds 1 to 16777216"));
}

TEST(LimitsDeathTest, DecodeCounts) {
  // count 2^31 - 1 for one row passed (first + count <= 2^31) and asked for 24 GiB.
  const std::vector<float> deltas = {0.5f};
  EXPECT_ERROR_IN_CHILD(decode_positions(deltas, 0, (int64_t{1} << 31) - 1));
  EXPECT_THAT(error_of([&] { decode_positions(deltas, 0, (int64_t{1} << 31) - 1); }),
              HasSubstr("count 2147483647 is more than 16777216 tokens"));
  const std::vector<float> many(2, 0.0f);
  EXPECT_THAT(error_of([&] { decode_positions(many, 0, kMaxTokens); }), HasSubstr("batch 2 x count 16777216"));
}

TEST(LimitsDeathTest, RotaryTables) {
  RotaryConfig config;
  const float position = 0;
  EXPECT_ERROR_IN_CHILD(make_rotary_table(config, &position, int64_t{1} << 30, int64_t{1} << 30));
  EXPECT_THAT(error_of([&] { make_rotary_table(config, &position, kMaxTokens + 1, 0); }),
              HasSubstr("batch 16777217 x seq_len 0 is more than 16777216 tokens"));
}

// Issue 9 item 3: threads were unbounded: 100000 segfaulted in libgomp, INT_MAX made it
// call exit(1). Above kMaxThreads is an Error now (1024 threads are still fine).
TEST(Limits, ThreadCounts) {
  RotaryConfig config;
  const std::int64_t tokens = 1024;  // enough for the table to be built in parallel
  std::vector<float> positions(3 * tokens, 1.0f);
  for (int threads : {kMaxThreads + 1, 100000, std::numeric_limits<int>::max(), -1})
    EXPECT_THAT(error_of([&] { make_rotary_table(config, positions.data(), 1, tokens, threads); }),
                HasSubstr("threads must be in [0, 1024] (got " + std::to_string(threads)));
  const RotaryTable table = make_rotary_table(config, positions.data(), 1, tokens, kMaxThreads);
  std::vector<float> q(static_cast<size_t>(tokens) * 2 * 128, 0.5f);
  const HeadTensor view = bshd(q.data(), DType::float32, 1, tokens, 2, 128);
  RotaryParams params;
  for (int threads : {kMaxThreads + 1, 100000, std::numeric_limits<int>::max()}) {
    params.threads = threads;
    EXPECT_THAT(error_of([&] { rotate(table, view, params); }), HasSubstr("threads must be in [0, 1024]"));
  }
  params.threads = kMaxThreads;
  EXPECT_NO_THROW(rotate(table, view, params));
}

}  // namespace
