// rotate() refuses targets whose memory overlaps: decided on the bytes the strided views
// address (src/cpu/overlap.h), checked here against brute force. Every other call that writes
// into caller memory refuses an output that shares a byte with another output or an input
// (include/circlerope/detail/disjoint.h): its pairs are checked on random offsets below.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "../src/cpu/overlap.h"
#include "circlerope/rotary.h"
#include "circlerope/positions.h"

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

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- regressions: outputs over the inputs of their own call ---------------------------------

// rotate (and crp_rotate) with the out laid over the table's values returned success with
// most values wrong (the values were read after the first rows had overwritten them).
TEST(Overlap, RotateRefusesAnOutOverTheTablesValues) {
  constexpr std::int64_t S = 5, H = 2, D = 8;
  std::vector<float> positions(3 * S);
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<float>(i % S);
  alignas(64) static float arena[S * H * D + S * D];
  make_rotary_table_into(RotaryConfig{.rotary_dim = D, .sections = {2, 1, 1}}, positions.data(), 1, S,
                         {arena, S * D});
  const RotaryTableView table{arena, 1, S, D};
  std::vector<float> q(S * H * D, 0.5f);
  for (std::int64_t at : {std::int64_t{0}, S * D - 1}) {
    const RotaryTarget over{bshd(q.data(), DType::float32, 1, S, H, D), bshd(arena + at, DType::float32, 1, S, H, D)};
    EXPECT_THAT(error_of([&] { rotate(table, std::span<const RotaryTarget>(&over, 1)); }),
                HasSubstr("rotate target 0: out shares memory with the table's values"))
        << at;
  }
  const RotaryTarget after{bshd(q.data(), DType::float32, 1, S, H, D), bshd(arena + S * D, DType::float32, 1, S, H, D)};
  EXPECT_EQ(error_of([&] { rotate(table, std::span<const RotaryTarget>(&after, 1)); }), "");
}

// make_rotary_table_into (and crp_table_fill) writing over its own positions returned success with most values
// wrong.
TEST(Overlap, TableComputedOverItsOwnPositionsIsRefused) {
  constexpr std::int64_t S = 6, D = 8;
  alignas(64) static float arena[S * D + 3 * S];
  for (std::size_t i = 0; i < std::size(arena); ++i) arena[i] = static_cast<float>(i % 7);
  for (std::int64_t at : {std::int64_t{0}, S * D - 1})
    EXPECT_THAT(error_of([&] {
                  make_rotary_table_into(RotaryConfig{.rotary_dim = D, .sections = {2, 1, 1}}, arena + at, 1, S,
                                         {arena, S * D});
                }),
                HasSubstr("rotary table: the output values shares memory with the input position_ids"))
        << at;
}

TEST(Overlap, RopeIndexAndDecodeOutputsOverTheirInputsAreRefused) {
  alignas(64) static std::int64_t arena[64];
  std::fill(std::begin(arena), std::end(arena), 7);  // text tokens
  RopeIndexInput in;
  in.input_ids = {arena, 8};
  in.batch = 2;
  in.seq_len = 4;
  auto* floats = reinterpret_cast<float*>(arena);
  EXPECT_THAT(error_of([&] {
                rope_index_into(in, VisionConfig{}, Geometry{}, {floats + 2, 24}, {floats + 40, 2});
              }),
              HasSubstr("rope_index: the output position_ids shares memory with the input input_ids"));
  EXPECT_THAT(error_of([&] {
                rope_index_into(in, VisionConfig{}, Geometry{}, {floats + 40, 24}, {floats + 63, 2});
              }),
              HasSubstr("rope_index: the output position_ids shares memory with the output rope_deltas"));
  const float deltas[2] = {0, 0};
  std::vector<float> out(3 * 2 * 4);
  std::memcpy(out.data(), deltas, sizeof deltas);
  EXPECT_THAT(error_of([&] { decode_positions_into({out.data() + 23, 1}, 5, 4, {out.data() + 12, 12}); }),
              HasSubstr("decode positions: the output out shares memory with the input rope_deltas"));
}

// ---- property: every output/input pair at random offsets ------------------------------------

// Two arrays placed at random (aligned) offsets of one arena: the call is refused exactly
// when their byte ranges meet, with a message naming both; otherwise it succeeds.
TEST(Overlap, EveryOutputAndInputPairIsRefusedExactlyWhenTheyShareAByte) {
  std::mt19937_64 rng(0x0E1A9);
  alignas(64) static unsigned char arena[8192];
  int refused = 0, accepted = 0;
  auto offset = [&](std::size_t align, std::size_t bytes) {
    return align * (rng() % ((sizeof arena - bytes) / align));
  };
  auto meet = [](std::size_t a, std::size_t an, std::size_t b, std::size_t bn) { return a < b + bn && b < a + an; };
  auto expect = [&](bool share, const std::string& error, const char* first, const char* second) {
    if (share) {
      ++refused;
      EXPECT_THAT(error, HasSubstr(first));
      EXPECT_THAT(error, HasSubstr(second));
      EXPECT_THAT(error, HasSubstr("shares memory"));
    } else {
      ++accepted;
      EXPECT_EQ(error, "") << first << " / " << second;
    }
  };
  const RotaryConfig config{.rotary_dim = 8, .sections = {2, 1, 1}};
  for (int round = 0; round < 3000; ++round) {
    std::memset(arena, 0, sizeof arena);  // zeros: text token ids, mask 0, finite positions
    const std::int64_t B = 1 + static_cast<std::int64_t>(rng() % 3), S = 1 + static_cast<std::int64_t>(rng() % 9);
    const auto n = static_cast<std::size_t>(B * S);
    switch (round % 4) {
      case 0: {  // rotate: out (strided, sometimes a head apart) against the table's values
        const std::int64_t H = 1 + static_cast<std::int64_t>(rng() % 3), pad = static_cast<std::int64_t>(rng() % 3);
        const std::size_t values = n * 8 * 4, out_bytes = n * static_cast<std::size_t>(H * (8 + pad)) * 4;
        const std::size_t v = offset(4, values), o = offset(4, out_bytes);
        const RotaryTableView table{reinterpret_cast<float*>(arena + v), B, S, 8};
        std::vector<float> q(n * static_cast<std::size_t>(H * 8), 1.0f);
        const HeadTensor out{arena + o, DType::float32, {B, S, H, 8}, {S * H * (8 + pad), H * (8 + pad), 8 + pad, 1}};
        const RotaryTarget t{bshd(q.data(), DType::float32, B, S, H, 8), out};
        // the bytes the view addresses, not its bounding box
        bool share = false;
        for (std::int64_t row = 0; row < B * S * H; ++row)
          share = share || meet(o + static_cast<std::size_t>(row * (8 + pad)) * 4, 32, v, values);
        expect(share, error_of([&] { rotate(table, std::span<const RotaryTarget>(&t, 1)); }), "out", "table's values");
        break;
      }
      case 1: {  // make_rotary_table_into: values against position_ids
        const std::size_t values = n * 8 * 4, positions = 3 * n * 4;
        const std::size_t v = offset(4, values), p = offset(4, positions);
        expect(meet(v, values, p, positions), error_of([&] {
                 make_rotary_table_into(config, reinterpret_cast<float*>(arena + p), B, S,
                                        {reinterpret_cast<float*>(arena + v), n * 8});
               }),
               "values", "position_ids");
        break;
      }
      case 2: {  // rope_index_into: one output against another array of the call
        const std::size_t ids = offset(8, n * 8), mask = offset(8, n * 8), pos = offset(4, 3 * n * 4),
                          deltas = offset(4, static_cast<std::size_t>(B) * 4);
        const bool masked = rng() % 2;
        RopeIndexInput in;
        in.input_ids = {reinterpret_cast<std::int64_t*>(arena + ids), n};
        in.batch = B;
        in.seq_len = S;
        if (masked) in.attention_mask = {reinterpret_cast<std::int64_t*>(arena + mask), n};
        const std::string error = error_of([&] {
          rope_index_into(in, VisionConfig{}, Geometry{},
                          {reinterpret_cast<float*>(arena + pos), 3 * n},
                          {reinterpret_cast<float*>(arena + deltas), static_cast<std::size_t>(B)});
        });
        const bool pos_deltas = meet(pos, 3 * n * 4, deltas, static_cast<std::size_t>(B) * 4);
        const bool pos_ids = meet(pos, 3 * n * 4, ids, n * 8), deltas_ids = meet(deltas, static_cast<std::size_t>(B) * 4, ids, n * 8);
        const bool pos_mask = masked && meet(pos, 3 * n * 4, mask, n * 8);
        const bool deltas_mask = masked && meet(deltas, static_cast<std::size_t>(B) * 4, mask, n * 8);
        // the first pair in the order the check walks them is named
        if (pos_deltas) expect(true, error, "position_ids", "rope_deltas");
        else if (pos_ids) expect(true, error, "position_ids", "input_ids");
        else if (pos_mask) expect(true, error, "position_ids", "attention_mask");
        else if (deltas_ids) expect(true, error, "rope_deltas", "input_ids");
        else if (deltas_mask) expect(true, error, "rope_deltas", "attention_mask");
        else expect(false, error, "rope_index", "");
        break;
      }
      case 3: {  // decode_positions_into: out against rope_deltas
        const std::size_t count = 1 + rng() % 5, out_bytes = 3 * static_cast<std::size_t>(B) * count * 4;
        const std::size_t o = offset(4, out_bytes), d = offset(4, static_cast<std::size_t>(B) * 4);
        expect(meet(o, out_bytes, d, static_cast<std::size_t>(B) * 4), error_of([&] {
                 decode_positions_into({reinterpret_cast<float*>(arena + d), static_cast<std::size_t>(B)}, 3,
                                       static_cast<std::int64_t>(count),
                                       {reinterpret_cast<float*>(arena + o), out_bytes / 4});
               }),
               "out", "rope_deltas");
        break;
      }
    }
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(accepted, 100);
}

}  // namespace
