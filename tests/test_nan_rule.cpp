// The NaN rule of every store (src/cpu/convert.h): a NaN result is written as the canonical
// quiet NaN of its storage type (fp32 0x7FC00000, bf16 0x7FC0, fp16 0x7E00), on every code
// path, store kind (whole vectors, two-vector stores, masked tails, streaming stores, the
// staged scalar path) and in the CUDA device code; and every path writes the bits of the
// scalar model reference::rotate_bits, NaN payloads of inputs and table values included.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../src/cpu/convert.h"
#include "circlerope/rotary.h"
#include "rotary_reference.h"

namespace {

using namespace circlerope;
namespace ref = circlerope::reference;
namespace cvt = circlerope::cpu;

constexpr DType kDTypes[] = {DType::float32, DType::bfloat16, DType::float16};

std::uint32_t canonical_nan(DType dtype) {
  return dtype == DType::float32 ? 0x7FC00000u : dtype == DType::bfloat16 ? 0x7FC0u : 0x7E00u;
}

// NaN patterns of fp32 that each break a different shortcut: low payload bits (the bias of an
// integer rounding carries out of them), signalling ones, both signs, payloads only below bit
// 16 (truncated to bf16 they would read as infinity) or below bit 13 (likewise for fp16).
constexpr std::uint32_t kNanPatterns[] = {0x7FFFFFFFu, 0xFFFFFFFFu, 0x7F800001u, 0xFF800001u, 0x7F808000u,
                                          0x7F80FFFFu, 0x7FC00001u, 0x7FBFFFFFu, 0x7F801FFFu, 0xFFC00000u,
                                          0x7FC00000u, 0x7F807FFFu};

// One fp32 NaN of the patterns above or a random one.
std::uint32_t random_nan(std::mt19937_64& rng) {
  const std::uint64_t r = rng();
  if (r % 2) return kNanPatterns[(r >> 8) % std::size(kNanPatterns)];
  const std::uint32_t payload = static_cast<std::uint32_t>(r >> 16) & 0x7FFFFFu;
  return (static_cast<std::uint32_t>(r >> 40) & 0x80000000u) | 0x7F800000u | (payload ? payload : 1u);
}

// A NaN of the storage type, with a random payload and sign.
std::uint32_t random_nan_storage(DType dtype, std::mt19937_64& rng) {
  const std::uint32_t f = random_nan(rng);
  const std::uint32_t r = static_cast<std::uint32_t>(rng());
  switch (dtype) {
    case DType::float32: return f;
    case DType::bfloat16: return (r & 0x8000u) | 0x7F80u | ((r & 0x7Fu) ? (r & 0x7Fu) : 1u);
    case DType::float16: return (r & 0x8000u) | 0x7C00u | ((r & 0x3FFu) ? (r & 0x3FFu) : 1u);
  }
  return 0;
}

std::uint32_t storage_bits(DType dtype, float v) {
  return dtype == DType::float32 ? std::bit_cast<std::uint32_t>(v)
         : dtype == DType::bfloat16 ? cvt::float_to_bf16(v)
                                    : cvt::float_to_f16(v);
}

void put(void* data, DType dtype, std::int64_t offset, std::uint32_t bits) {
  if (dtype == DType::float32) std::memcpy(static_cast<float*>(data) + offset, &bits, 4);
  else {
    const auto h = static_cast<std::uint16_t>(bits);
    std::memcpy(static_cast<std::uint16_t*>(data) + offset, &h, 2);
  }
}

std::uint32_t get(const void* data, DType dtype, std::int64_t offset) {
  return ref::load_bits(data, dtype, offset);
}

std::string hex(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%X", v);
  return text;
}

// ---- regression: the bf16 store of the vector paths -----------------------------------------

// A user's table value 0x7FFFFFFF times 1.0 is that NaN; the avx2 and AVX-512 bf16 stores
// added their rounding bias to it and wrote -0 (0x8000), reported as success.
TEST(NanRule, TableNanWithLowPayloadBitsStaysNaNOnEveryPath) {
  constexpr int kHalf = 40;  // two 16-lane steps and a masked tail of 8
  std::vector<float> values(2 * kHalf, 0.0f);
  for (int i = 0; i < kHalf; ++i) values[static_cast<std::size_t>(i)] = std::bit_cast<float>(kNanPatterns[i % 12]);
  const RotaryTableView table{values.data(), 1, 1, 2 * kHalf};
  for (Isa isa : available_isas())
    for (DType dtype : kDTypes) {
      std::vector<std::uint32_t> storage(2 * kHalf);  // room for fp32
      void* x = storage.data();
      for (int d = 0; d < 2 * kHalf; ++d) put(x, dtype, d, storage_bits(dtype, 1.0f));
      RotaryParams params;
      params.isa = isa;
      const RotaryTarget target{bshd(x, dtype, 1, 1, 1, 2 * kHalf), bshd(x, dtype, 1, 1, 1, 2 * kHalf)};
      rotate(table, std::span<const RotaryTarget>(&target, 1), params);
      for (int d = 0; d < 2 * kHalf; ++d)
        ASSERT_EQ(get(x, dtype, d), canonical_nan(dtype))
            << to_string(isa) << " " << to_string(dtype) << " element " << d << " of a row whose cos is "
            << hex(kNanPatterns[d % kHalf % 12]) << " wrote " << hex(get(x, dtype, d));
    }
}

// ---- the scalar rule itself, three implementations ------------------------------------------

// Every upper half with the lower halves that decide rounding, every NaN class, random floats:
// convert.h (the kernels) and the reference (computed in double) write the same bits
// (test_cuda_math.cpp holds the CUDA device code to convert.h).
TEST(NanRule, ConversionsAgreeWithTheReferenceOnEveryClassOfFloat) {
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  auto check = [](std::uint32_t u) {
    const float f = std::bit_cast<float>(u);
    const std::uint16_t b = ref::to_bfloat16(f), h = ref::to_float16(f);
    ASSERT_EQ(cvt::float_to_bf16(f), b) << hex(u);
    ASSERT_EQ(cvt::float_to_f16(f), h) << hex(u);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(cvt::quiet_nan(f)), ref::to_float32(f)) << hex(u);
  };
  for (std::uint32_t hi = 0; hi <= 0xFFFF; ++hi)
    for (std::uint32_t lo : lows) check((hi << 16) | lo);
  std::mt19937_64 rng(19);
  for (int i = 0; i < 300000; ++i) check(static_cast<std::uint32_t>(rng()));
  for (int i = 0; i < 20000; ++i) check(random_nan(rng));
  EXPECT_EQ(ref::to_bfloat16(std::bit_cast<float>(0x7F7F8000u)), 0x7F80u) << "a tie above the largest bf16: infinity";
  EXPECT_EQ(ref::to_float16(65520.0f), 0x7C00u) << "a tie above the largest fp16: infinity";
  EXPECT_EQ(ref::to_float16(-0x1p-25f), 0x8000u) << "half the smallest fp16 subnormal: a tie to -0";
}

#if defined(CIRCLEROPE_HAVE_X86_KERNELS)
}  // namespace
namespace circlerope::test {
std::uint64_t avx2_bf16_store_mismatches(const std::uint16_t* uppers, int upper_count, const std::uint16_t* lowers,
                                         int lower_count, std::uint32_t* first_mismatch);  // avx2_bf16_store.cpp
}  // namespace circlerope::test
namespace {

// The avx2 bf16 store rounds on 16-bit words (simd.h, narrow16_bf16), a different computation
// from convert.h's; random rotation outputs rarely hit its edges, so they are chosen here:
// every upper half with the lower halves at and around the tie, and the upper halves at
// each class boundary (zero, subnormal, one, the largest finite, infinity, NaN, both signs,
// odd and even) with every lower half.
TEST(NanRule, Avx2Bf16StoreRoundsEveryEdgeAsConvertH) {
  for (const IsaStatus& st : isa_status())
    if (st.isa == Isa::avx2 && !st.available) GTEST_SKIP() << "avx2 NOT AVAILABLE: " << st.reason;
  std::vector<std::uint16_t> every(0x10000);
  for (std::uint32_t i = 0; i < every.size(); ++i) every[i] = static_cast<std::uint16_t>(i);
  const std::uint16_t ties[] = {0x0000, 0x0001, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0x8002, 0xFFFE, 0xFFFF};
  std::vector<std::uint16_t> edges;
  for (std::uint16_t e : {0x0000, 0x0001, 0x007F, 0x0080, 0x0081, 0x3F7F, 0x3F80, 0x3F81, 0x7F7E, 0x7F7F, 0x7F80,
                          0x7F81, 0x7FBF, 0x7FC0, 0x7FFF}) {
    edges.push_back(e);
    edges.push_back(static_cast<std::uint16_t>(e | 0x8000));
  }
  std::uint32_t first = 0;
  EXPECT_EQ(test::avx2_bf16_store_mismatches(every.data(), 0x10000, ties, std::size(ties), &first), 0u) << hex(first);
  EXPECT_EQ(test::avx2_bf16_store_mismatches(edges.data(), static_cast<int>(edges.size()), every.data(), 0x10000, &first), 0u)
      << hex(first);
}
#endif

// ---- every path, every store kind, against the scalar model ---------------------------------

struct Layout {
  const char* name;
  std::int64_t dim_stride;  // 1: the vector path; 2: the staged path
  bool in_place;
};
constexpr Layout kLayouts[] = {{"contiguous", 1, false}, {"contiguous in place", 1, true},
                               {"dim stride 2", 2, false}, {"dim stride 2 in place", 2, true}};

// Random inputs and table values with NaNs of random payloads sprinkled in (about one in
// eight of each), random odd sizes; the output pre-filled with another NaN. The kernels'
// bits must equal reference::rotate_bits: FMA paths fused, portable unfused.
TEST(NanRule, EveryPathWritesTheScalarModelsBitsWithNaNsInInputsAndTable) {
  std::mt19937_64 rng(0x19A);
  std::normal_distribution<float> normal;
  std::int64_t cases = 0, nan_outputs = 0;
  for (int round = 0; round < 6; ++round)
    for (Isa isa : available_isas())
      for (DType dtype : kDTypes)
        for (Pairing pairing : {Pairing::neox, Pairing::gptj})
          for (Direction direction : {Direction::forward, Direction::backward})
            for (const Layout& layout : kLayouts) {
              const std::int64_t B = 1 + static_cast<std::int64_t>(rng() % 2), S = 1 + static_cast<std::int64_t>(rng() % 3),
                                 H = 1 + static_cast<std::int64_t>(rng() % 3);
              const int half = 1 + static_cast<int>(rng() % 70);  // tails of every length
              const std::int64_t D = 2 * half + static_cast<std::int64_t>(rng() % 3);
              std::vector<float> values(static_cast<std::size_t>(B * S * 2 * half));
              for (float& v : values) v = rng() % 8 == 0 ? std::bit_cast<float>(random_nan(rng)) : normal(rng);
              const RotaryTableView table{values.data(), B, S, 2 * half};
              const std::int64_t stride = layout.dim_stride;
              const std::int64_t elements = B * S * H * D * stride;
              std::vector<std::uint32_t> in_buf(static_cast<std::size_t>(elements)), out_buf(in_buf.size());
              HeadTensor in{in_buf.data(), dtype, {B, S, H, D}, {S * H * D * stride, H * D * stride, D * stride, stride}};
              for (std::int64_t e = 0; e < elements; ++e)
                put(in.data, dtype, e, rng() % 8 == 0 ? random_nan_storage(dtype, rng) : storage_bits(dtype, normal(rng)));
              const std::vector<std::uint32_t> want = ref::rotate_bits(table, in, pairing, direction, isa != Isa::portable);
              HeadTensor out = in;
              if (!layout.in_place) {
                out.data = out_buf.data();
                for (std::int64_t e = 0; e < elements; ++e) put(out.data, dtype, e, canonical_nan(dtype) ^ 0x0001u);
              }
              RotaryParams params;
              params.isa = isa;
              params.pairing = pairing;
              params.direction = direction;
              const RotaryTarget target{in, out};
              rotate(table, std::span<const RotaryTarget>(&target, 1), params);
              ref::for_each_element(out, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
                const std::uint32_t got = get(out.data, dtype, ref::element_offset(out, b, s, h, d));
                const std::uint32_t expected = want[ref::dense_index(out, b, s, h, d)];
                nan_outputs += d < 2 * half && expected == canonical_nan(dtype);
                ASSERT_EQ(got, expected) << to_string(isa) << " " << to_string(dtype) << " " << to_string(pairing)
                                         << " " << to_string(direction) << " " << layout.name << " [" << B << "," << S
                                         << "," << H << "," << D << "] rotary " << 2 * half << " at (" << b << "," << s
                                         << "," << h << "," << d << ")";
              });
              ++cases;
            }
  EXPECT_GT(nan_outputs, cases) << "the inputs must give NaN outputs in most cases";
}

// Outputs of 16 MiB or more are written by streaming stores (dispatch.cpp); their NaNs follow
// the rule too: streamed bits equal the in-place (cached) bits, whose NaNs are canonical.
TEST(NanRule, StreamingStoresWriteTheCanonicalNaN) {
  constexpr std::int64_t S = 2048, H = 16, D = 128;
  std::mt19937_64 rng(0x5719);
  std::normal_distribution<float> normal;
  for (DType dtype : kDTypes) {
    const std::int64_t seq = dtype == DType::float32 ? S : 2 * S;  // 16 MiB of output either way
    std::vector<float> values(static_cast<std::size_t>(seq * D));
    for (float& v : values) v = rng() % 64 == 0 ? std::bit_cast<float>(random_nan(rng)) : normal(rng);
    const RotaryTableView table{values.data(), 1, seq, static_cast<int>(D)};
    const std::size_t n = static_cast<std::size_t>(seq * H * D), bytes = n * dtype_size(dtype);
    std::vector<unsigned char> x(bytes + 64);
    for (std::size_t i = 0; i < n; ++i)
      put(x.data(), dtype, static_cast<std::int64_t>(i),
          rng() % 64 == 0 ? random_nan_storage(dtype, rng) : storage_bits(dtype, normal(rng)));
    for (Isa isa : available_isas()) {
      std::vector<unsigned char> in_place = x, out(bytes + 64, 0xFF);
      RotaryParams params;
      params.isa = isa;
      const RotaryTarget cached{bshd(in_place.data(), dtype, 1, seq, H, D), bshd(in_place.data(), dtype, 1, seq, H, D)};
      rotate(table, std::span<const RotaryTarget>(&cached, 1), params);
      const RotaryTarget streamed{bshd(x.data(), dtype, 1, seq, H, D), bshd(out.data(), dtype, 1, seq, H, D)};
      rotate(table, std::span<const RotaryTarget>(&streamed, 1), params);
      ASSERT_EQ(0, std::memcmp(out.data(), in_place.data(), bytes)) << to_string(isa) << " " << to_string(dtype);
      std::int64_t nans = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t u = get(in_place.data(), dtype, static_cast<std::int64_t>(i));
        const bool nan = dtype == DType::float32  ? (u & 0x7FFFFFFFu) > 0x7F800000u
                         : dtype == DType::bfloat16 ? (u & 0x7FFFu) > 0x7F80u
                                                   : (u & 0x7FFFu) > 0x7C00u;
        if (nan) {
          ASSERT_EQ(u, canonical_nan(dtype)) << to_string(isa) << " " << to_string(dtype) << " element " << i;
          ++nans;
        }
      }
      EXPECT_GT(nans, 1000) << to_string(isa) << " " << to_string(dtype);
    }
  }
}

}  // namespace
