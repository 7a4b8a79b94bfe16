// Sizes that cannot fit get an Error naming the size before anything is allocated: one
// documented limit of tokens per call (positions.h kMaxTokens), on batch and seq_len each as
// well as on their product.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_support.h"
#include "circlerope/circle.h"
#include "circlerope/rotary.h"
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

// Threads are bounded: 100000 would segfault in libgomp and INT_MAX make it call exit(1).
// Above kMaxThreads is an Error (1024 threads are still fine).
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

// Counts that size a vector are checked against their cap first: a frame count or a grid of
// 2^40 cells asked the allocator before anything looked at it (std::bad_alloc, or an int64
// product that overflowed).
TEST(LimitsDeathTest, VisionGridsAndFrameCountsAreCappedBeforeAllocation) {
  const VisionConfig vision;
  const int64_t huge = int64_t{1} << 40;
  EXPECT_ERROR_IN_CHILD(frame_times(huge, true, 1.0, vision));
  EXPECT_THAT(error_of([&] { frame_times(huge, true, 1.0, vision); }),
              HasSubstr("1099511627776 frames has more than 16777216 tokens"));
  EXPECT_THAT(error_of([&] { frame_times(kMaxTokens + 1, false, 1.0, vision); }), HasSubstr("16777217 frames"));
  EXPECT_EQ(frame_times(kMaxTokens, false, 1.0, vision).size(), static_cast<size_t>(kMaxTokens));
  EXPECT_ERROR_IN_CHILD(circle_ring(huge, huge, CircleConfig{}));
  EXPECT_THAT(error_of([&] { circle_ring(huge, huge, CircleConfig{}); }),
              HasSubstr("vision grid 1099511627776x1099511627776 has more than 16777216 cells"));
  EXPECT_THAT(error_of([&] { circle_ring(4097, 4096, CircleConfig{}); }), HasSubstr("4097x4096 has more than"));
  const std::vector<int64_t> one_frame = {0};
  EXPECT_ERROR_IN_CHILD(block_coordinates(Geometry{}, 1, huge, 2, one_frame));
  const std::vector<int64_t> two_frames = {0, 0};
  EXPECT_THAT(error_of([&] { block_coordinates(Geometry{}, 2, 4096, 2049, two_frames); }),
              HasSubstr("vision block 2x4096x2049 has more than 16777216 tokens"));
}

// A size-1 dimension never steps, so its stride may be anything non-negative (torch's
// as_strided makes such views): the streaming test of rotate() multiplied it by the element
// size in int64 (undefined for INT64_MAX; UBSan aborts). Every path rotates such a view
// exactly as the same view with stride 0 there.
TEST(Limits, HugeStridesOfSizeOneDimensionsRotateLikeStrideZero) {
  std::mt19937_64 rng(0x57D1);
  const std::int64_t S = 3, H = 2, D = 16;
  std::vector<float> positions(3 * S);
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<float>(i) * 0.7f;
  for (Isa isa : available_isas())
    for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
      for (int round = 0; round < 20; ++round) {
        // batch 1 always; seq or heads 1 in some rounds, each with a huge stride
        const std::int64_t seq = round % 3 == 1 ? 1 : S, heads = round % 3 == 2 ? 1 : H;
        const RotaryTable table = make_rotary_table(RotaryConfig{.rotary_dim = D, .sections = {4, 2, 2}},
                                                    positions.data(), 1, seq);
        const std::int64_t huge[] = {std::numeric_limits<std::int64_t>::max(), std::int64_t{1} << 62,
                                     (std::int64_t{1} << 62) + 3, std::numeric_limits<std::int64_t>::max() / 4 + 1};
        const std::int64_t pick = huge[rng() % 4];
        const std::size_t n = static_cast<std::size_t>(seq * heads * D), size = dtype_size(dtype);
        std::vector<unsigned char> x(n * size), plain(n * size), odd(n * size);
        for (auto& b : x) b = static_cast<unsigned char>(rng() % 61);  // finite values in every dtype
        const HeadTensor in = bshd(x.data(), dtype, 1, seq, heads, D);
        HeadTensor out_plain = bshd(plain.data(), dtype, 1, seq, heads, D), out_odd = bshd(odd.data(), dtype, 1, seq, heads, D);
        HeadTensor in_odd = in;
        for (std::size_t d = 0; d < 3; ++d)
          if (in.shape[d] == 1) {
            out_plain.strides[d] = 0;
            in_odd.strides[d] = out_odd.strides[d] = pick;
          }
        RotaryParams params;
        params.isa = isa;
        const RotaryTarget a{in, out_plain}, b{in_odd, out_odd};
        rotate(table, std::span<const RotaryTarget>(&a, 1), params);
        ASSERT_NO_THROW(rotate(table, std::span<const RotaryTarget>(&b, 1), params)) << to_string(isa) << " stride " << pick;
        ASSERT_EQ(0, std::memcmp(plain.data(), odd.data(), plain.size())) << to_string(isa) << " stride " << pick;
      }
}

}  // namespace
