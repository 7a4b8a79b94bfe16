// rotate() refuses targets whose memory overlaps (issue 9 item 6): decided on the bytes the
// strided views address (src/cpu/overlap.h), checked here against brute force.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "../src/cpu/overlap.h"
#include "circlerope/kernels.h"

namespace {

using namespace circlerope;
using ::testing::HasSubstr;

// Every byte address of a view, enumerated.
std::set<std::uintptr_t> bytes_of(const HeadTensor& t) {
  std::set<std::uintptr_t> out;
  const auto size = dtype_size(t.dtype);
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  for (std::int64_t a = 0; a < t.shape[0]; ++a)
    for (std::int64_t b = 0; b < t.shape[1]; ++b)
      for (std::int64_t c = 0; c < t.shape[2]; ++c)
        for (std::int64_t d = 0; d < t.shape[3]; ++d) {
          const std::int64_t e = a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3];
          for (std::size_t k = 0; k < size; ++k) out.insert(base + static_cast<std::uintptr_t>(e) * size + k);
        }
  return out;
}

bool brute_overlap(const HeadTensor& a, const HeadTensor& b) {
  const auto x = bytes_of(a), y = bytes_of(b);
  return std::any_of(x.begin(), x.end(), [&](std::uintptr_t v) { return y.count(v) > 0; });
}

HeadTensor view(char* base, std::int64_t offset_bytes, DType dtype, std::array<std::int64_t, 4> shape,
                std::array<std::int64_t, 4> strides) {
  return {base + offset_bytes, dtype, shape, strides};
}

TEST(Overlap, AgreesWithBruteForceOnRandomViews) {
  std::mt19937_64 rng(20261129);
  alignas(64) static char memory[1 << 16];
  int undecided = 0, shared = 0, cases = 0;
  for (int round = 0; round < 20000; ++round) {
    auto random_view = [&] {
      const DType dtype = rng() % 2 ? DType::float32 : DType::bfloat16;
      std::array<std::int64_t, 4> shape{}, strides{};
      for (int k = 0; k < 4; ++k) {
        shape[k] = 1 + static_cast<std::int64_t>(rng() % 4);
        strides[k] = static_cast<std::int64_t>(rng() % 5 == 0 ? 0 : rng() % 24);
      }
      // Often a structured layout: [B, S, H, D] slices of a wider row, like q/k of a fused qkv.
      if (rng() % 2) {
        const std::int64_t width = 4 + static_cast<std::int64_t>(rng() % 12);
        strides = {shape[1] * width, width, shape[3], 1};
      }
      return view(memory, static_cast<std::int64_t>(rng() % 64), dtype, shape, strides);
    };
    const HeadTensor a = random_view(), b = random_view();
    const bool truth = brute_overlap(a, b);
    const cpu::Overlap got = cpu::byte_overlap(a, b);
    ++cases;
    if (got == cpu::Overlap::undecided) {
      ++undecided;
      continue;
    }
    shared += truth;
    ASSERT_EQ(got == cpu::Overlap::shared, truth)
        << "round " << round << ": a strides " << a.strides[0] << "," << a.strides[1] << "," << a.strides[2] << ","
        << a.strides[3] << " b strides " << b.strides[0] << "," << b.strides[1] << "," << b.strides[2] << ","
        << b.strides[3];
  }
  EXPECT_GT(shared, cases / 10);                  // both answers are exercised
  EXPECT_LT(shared, cases - cases / 10);
  EXPECT_LT(undecided, cases / 1000) << undecided;  // the budget is for adversarial strides only
}

TEST(Overlap, FusedQkvViewsInterleaveWithoutSharingABytePerToken) {
  // [B, S, (Hq + 2 Hk) * D]: q, k and v of a token side by side; exact, in both orders.
  const std::int64_t batch = 2, seq = 33, hq = 16, hk = 2, d = 128, width = (hq + 2 * hk) * d;
  std::vector<float> qkv(static_cast<size_t>(batch * seq * width));
  char* base = reinterpret_cast<char*>(qkv.data());
  const HeadTensor q = view(base, 0, DType::float32, {batch, seq, hq, d}, {seq * width, width, d, 1});
  const HeadTensor k = view(base, hq * d * 4, DType::float32, {batch, seq, hk, d}, {seq * width, width, d, 1});
  const HeadTensor k_plus_one = view(base, (hq * d - 1) * 4, DType::float32, {batch, seq, hk, d}, {seq * width, width, d, 1});
  EXPECT_EQ(cpu::byte_overlap(q, k), cpu::Overlap::disjoint);
  EXPECT_EQ(cpu::byte_overlap(k, q), cpu::Overlap::disjoint);
  EXPECT_EQ(cpu::byte_overlap(q, k_plus_one), cpu::Overlap::shared);  // one float too far left
  EXPECT_EQ(cpu::byte_overlap(q, q), cpu::Overlap::shared);
}

// The case: out[1] = out[0] + 1 float returned success with 511 of 512 results wrong.
TEST(Overlap, RotateRefusesOutsThatOverlapByOneFloat) {
  const std::int64_t seq = 4, heads = 2, dim = 64;
  std::vector<float> positions(3 * seq);
  for (std::int64_t s = 0; s < seq; ++s)
    for (int a = 0; a < 3; ++a) positions[static_cast<size_t>(a * seq + s)] = static_cast<float>(s + a);
  RotaryConfig config;
  config.rotary_dim = dim;
  config.sections = {8, 12, 12};
  const RotaryTable table = make_rotary_table(config, positions.data(), 1, seq);
  std::vector<float> in(static_cast<size_t>(seq * heads * dim), 1.0f), out(in.size() + 1);
  const HeadTensor x = bshd(in.data(), DType::float32, 1, seq, heads, dim);
  const HeadTensor y0 = bshd(out.data(), DType::float32, 1, seq, heads, dim);
  const HeadTensor y1 = bshd(out.data() + 1, DType::float32, 1, seq, heads, dim);
  const RotaryTarget targets[] = {{x, y0}, {x, y1}};
  try {
    rotate(table, targets);
    ADD_FAILURE() << "accepted overlapping outs";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("rotate target 1: out shares memory with target 0's out"));
  }
  // An out over another target's in (which that target reads) is refused as well.
  std::vector<float> other(in.size());
  const HeadTensor z = bshd(other.data(), DType::float32, 1, seq, heads, dim);
  const RotaryTarget reads_written[] = {{x, z}, {z, y0}};
  EXPECT_THROW(rotate(table, reads_written), Error);
  // Nothing was written by the refused calls.
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
}

TEST(Overlap, FusedQkvInPlaceAndInterleavedOutOfPlaceStillRotateCorrectly) {
  const std::int64_t seq = 9, hq = 4, hk = 2, d = 32, width = (hq + 2 * hk) * d;
  std::vector<float> positions(3 * seq);
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = 0.37f * static_cast<float>(i);
  RotaryConfig config;
  config.rotary_dim = d;
  config.sections = {4, 6, 6};
  const RotaryTable table = make_rotary_table(config, positions.data(), 1, seq);
  std::vector<float> qkv(static_cast<size_t>(seq * width));
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.1f * static_cast<float>(i));
  // Reference: q and k copied into their own tensors.
  std::vector<float> q(static_cast<size_t>(seq * hq * d)), k(static_cast<size_t>(seq * hk * d));
  for (std::int64_t s = 0; s < seq; ++s) {
    std::copy_n(&qkv[static_cast<size_t>(s * width)], hq * d, &q[static_cast<size_t>(s * hq * d)]);
    std::copy_n(&qkv[static_cast<size_t>(s * width + hq * d)], hk * d, &k[static_cast<size_t>(s * hk * d)]);
  }
  rotate(table, bshd(q.data(), DType::float32, 1, seq, hq, d));
  rotate(table, bshd(k.data(), DType::float32, 1, seq, hk, d));
  const HeadTensor qv{qkv.data(), DType::float32, {1, seq, hq, d}, {seq * width, width, d, 1}};
  const HeadTensor kv{qkv.data() + hq * d, DType::float32, {1, seq, hk, d}, {seq * width, width, d, 1}};
  // Out of place into the v slots of another fused buffer, interleaved with its own inputs.
  std::vector<float> fused = qkv;
  const HeadTensor q_in{fused.data(), DType::float32, {1, seq, hq / 2, d}, {seq * width, width, d, 1}};
  const HeadTensor q_out{fused.data() + (hq + hk) * d, DType::float32, {1, seq, hq / 2, d}, {seq * width, width, d, 1}};
  const RotaryTarget in_place[] = {{qv, qv}, {kv, kv}};
  rotate(table, in_place);
  for (std::int64_t s = 0; s < seq; ++s) {
    for (std::int64_t e = 0; e < hq * d; ++e)
      ASSERT_EQ(qkv[static_cast<size_t>(s * width + e)], q[static_cast<size_t>(s * hq * d + e)]);
    for (std::int64_t e = 0; e < hk * d; ++e)
      ASSERT_EQ(qkv[static_cast<size_t>(s * width + hq * d + e)], k[static_cast<size_t>(s * hk * d + e)]);
  }
  const RotaryTarget interleaved[] = {{q_in, q_out}};
  EXPECT_NO_THROW(rotate(table, interleaved));  // a bounding-box check refused this
  for (std::int64_t s = 0; s < seq; ++s)
    for (std::int64_t e = 0; e < hq / 2 * d; ++e)
      ASSERT_EQ(fused[static_cast<size_t>(s * width + (hq + hk) * d + e)], q[static_cast<size_t>(s * hq * d + e)]);
}

TEST(Overlap, AdversarialStridesEndUndecidedNotSlow) {
  // Strides whose lattices interleave over millions of periods: the budget ends the search.
  alignas(64) static float memory[16];
  const HeadTensor a{memory, DType::float32, {1, 1, 1000000, 2}, {0, 0, 1000003, 1}};
  const HeadTensor b{memory + 2, DType::float32, {1, 1, 1000000, 1}, {0, 0, 999983, 0}};
  EXPECT_NE(cpu::byte_overlap(a, b), cpu::Overlap::disjoint);
}

}  // namespace
