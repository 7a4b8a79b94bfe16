// Rotary kernels (docs/spec.md §4): angle tables, the rotation on every code path, storage type,
// pairing and memory layout, against the float64 reference of src/reference; the storage
// conversions of src/cpu/convert.h bit for bit.
//
// Inputs are seeded (std::mt19937_64) and adversarial: fractional and negative positions,
// odd head and rotary dims, padded and strided views, outputs pre-filled with NaN, pass-through
// elements holding arbitrary (non-NaN) bit patterns, pairs with zeros and mixed magnitudes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../src/cpu/convert.h"
#include "circlerope/age.h"
#include "circlerope/rotary.h"
#include "rotary_reference.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;
using ::testing::HasSubstr;
namespace ref = circlerope::reference;
namespace cvt = circlerope::cpu;

using Shape = std::array<std::int64_t, 4>;

// A head dim and the rotary dim rotated in it (the rest passes through).
struct Dims {
  int head_dim;
  int rotary_dim;
};

constexpr std::array<DType, 3> kDTypes = {DType::float32, DType::bfloat16, DType::float16};
constexpr std::array<Pairing, 2> kPairings = {Pairing::neox, Pairing::gptj};
constexpr std::array<FrequencyLayout, 3> kLayouts = {
    FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single};

// Positions drawn like Circle-RoPE's: fractional, slightly negative, up to a long context.
constexpr float kMinPosition = -64.0f;
constexpr float kMaxPosition = 4096.0f;

// ---- tolerances ---------------------------------------------------------------------------

// fp32 accuracy: the spec's contract (docs/spec.md) is 1e-5 relative; each output is the exact rotation of
// fp32 inputs with table entries within half an ulp (2^-25 relative) and two or three fp32
// roundings (products, sum or a fused multiply-add): a few 2^-24 ~ 6e-8 of the pair norm.
// 1e-6 (the reference's kFloat32Tolerance) keeps a 4x margin over that and 10x under 1e-5.
constexpr double kFloat32Accuracy = ref::kFloat32Tolerance;
// bf16/fp16 outputs must be no worse than twice the error of the naive eager computation
// in the storage precision (the contract stated in src/reference/rotary_reference.h),
// measured on the same data.
constexpr double kNaiveFactor = 2.0;
// Forward then backward in fp32: two passes of the per-element error above (each <= ~3
// roundings of 2^-24 of the pair norm, ~2e-7), plus the table's cos^2 + sin^2 differing
// from 1 by <= 2^-23: under 5e-7 in all; 1e-6 keeps a 2x margin.
constexpr double kRoundTripFloat32 = 1e-6;
// Forward then backward in bf16/fp16: the backward pass of the rounded forward output is
// within one tolerance of the input (rotations keep distances), and adds its own rounding
// (one more tolerance) relative to a pair norm that grew by at most that rounding: 2 tol
// times (1 + tol) < 2.01 tol.
constexpr double kRoundTripFactor16 = 2.01;
// Relative-position property: each rotated vector is within kFloat32Accuracy of exact per
// pair (max of the two elements), so within sqrt(2) * 1e-6 of exact in norm; a dot product
// of two such vectors is within 2 sqrt(2) * 1e-6 * |q| |k|, and the difference of two dot
// products within 4 sqrt(2) * 1e-6 ~ 5.7e-6 of |q| |k|.
constexpr double kDotTolerance = 6.0 * kFloat32Accuracy;
// Moving one token by kAxisStep on one axis must change the score by far more than that
// tolerance, or the check that it does would be void. With theta 1e4 and D = 128 every
// frequency turns by theta^(-2i/D) >= 1.2e-4 radians per unit, so by >= 0.03 radians over
// 256 units (up to 256 radians on the fastest).
constexpr double kDotChange = 100.0 * kDotTolerance;
constexpr float kAxisStep = 256.0f;
// Table entries: the angle is computed in double and cos/sin rounded once to fp32, so each
// entry is within half an ulp of 1 (2^-25), the largest a cos/sin can have, of the double
// value (whose own error, ~1e-14 for the polynomial, is far below the next float). The
// per-entry check against float(libm) is EntriesMatchLibmRoundedToFloatButForRareNearTies.
constexpr double kTableTolerance = 0x1p-25 + 1e-15;

// ---- tensors that own their storage ----------------------------------------------------------

struct Tensor {
  std::vector<unsigned char> bytes;
  HeadTensor view;
};

// The view `shape`/`strides` over fresh storage with `lead` elements before it and `tail`
// after it; storage is zero.
Tensor make_tensor(DType dtype, Shape shape, Shape strides, std::int64_t lead = 0,
                   std::int64_t tail = 0) {
  std::int64_t last = 0;
  for (std::size_t i = 0; i < 4; ++i) last += (shape[i] - 1) * strides[i];
  Tensor t;
  t.bytes.assign(static_cast<std::size_t>(lead + last + 1 + tail) * dtype_size(dtype), 0);
  t.view = {t.bytes.data() + static_cast<std::size_t>(lead) * dtype_size(dtype), dtype, shape,
            strides};
  return t;
}

Tensor make_bshd(DType dtype, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D) {
  return make_tensor(dtype, {B, S, H, D}, {S * H * D, H * D, D, 1});
}

// A copy whose view points into its own storage.
Tensor clone(const Tensor& t) {
  Tensor c = t;
  c.view.data = c.bytes.data() + (static_cast<const unsigned char*>(t.view.data) - t.bytes.data());
  return c;
}

std::uint32_t raw_at(const HeadTensor& t, std::int64_t offset) {
  const auto* p = static_cast<const unsigned char*>(t.data) +
                  static_cast<std::size_t>(offset) * dtype_size(t.dtype);
  if (t.dtype == DType::float32) {
    std::uint32_t u;
    std::memcpy(&u, p, 4);
    return u;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

void set_raw(const HeadTensor& t, std::int64_t offset, std::uint32_t bits) {
  auto* p = static_cast<unsigned char*>(t.data) + static_cast<std::size_t>(offset) * dtype_size(t.dtype);
  if (t.dtype == DType::float32) {
    std::memcpy(p, &bits, 4);
  } else {
    const auto h = static_cast<std::uint16_t>(bits);
    std::memcpy(p, &h, 2);
  }
}

// Stores v rounded to nearest even in the view's storage type.
void set_value(const HeadTensor& t, std::int64_t offset, float v) {
  switch (t.dtype) {
    case DType::float32: set_raw(t, offset, std::bit_cast<std::uint32_t>(v)); break;
    case DType::bfloat16: set_raw(t, offset, cvt::float_to_bf16(v)); break;
    case DType::float16: set_raw(t, offset, cvt::float_to_f16(v)); break;
  }
}

double value_at(const HeadTensor& t, std::int64_t offset) { return ref::load(t.data, t.dtype, offset); }

bool is_nan_bits(DType dtype, std::uint32_t u) {
  switch (dtype) {
    case DType::float32: return (u & 0x7FFFFFFFu) > 0x7F800000u;
    case DType::bfloat16: return (u & 0x7FFFu) > 0x7F80u;
    case DType::float16: return (u & 0x7FFFu) > 0x7C00u;
  }
  return false;
}

std::uint32_t nan_bits(DType dtype) {
  return dtype == DType::float32 ? 0x7FC00000u : dtype == DType::bfloat16 ? 0x7FC0u : 0x7E00u;
}

// Fills every element of the storage (not just the view) with a quiet NaN.
void fill_nan(Tensor& t) {
  const std::size_t size = dtype_size(t.view.dtype);
  const std::uint32_t bits = nan_bits(t.view.dtype);
  for (std::size_t i = 0; i + size <= t.bytes.size(); i += size) std::memcpy(&t.bytes[i], &bits, size);
}

void fill_bytes(Tensor& t, std::mt19937_64& rng) {
  std::uint64_t r = 0;
  for (std::size_t i = 0; i < t.bytes.size(); ++i, r >>= 8) {
    if (i % 8 == 0) r = rng();
    t.bytes[i] = static_cast<unsigned char>(r);
  }
}

// Random data in the view: the first `rotary_dim` elements of each head normal values
// scaled by 2^-12 .. 2^12 (pairs of very different magnitudes), one in sixteen a signed zero;
// the rest arbitrary bit patterns except NaN (infinities, subnormals and -0 included), which
// must pass through bit for bit. fp16 keeps |x| in [2^-5, ~100]: no overflow, and no
// pair small enough for its outputs to be fp16 subnormals, whose fixed 2^-25 rounding is
// more than 2^-11 of such a pair's norm (the per-pair tolerance assumes normal outputs).
void fill_random(const HeadTensor& t, int rotary_dim, std::mt19937_64& rng) {
  const bool half = t.dtype == DType::float16;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int max_exponent = half ? 4 : 12;
  ref::for_each_element(t, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    const std::int64_t at = ref::element_offset(t, b, s, h, d);
    if (d < rotary_dim) {
      const std::uint64_t r = rng();
      if (r % 16 == 0) {
        set_value(t, at, r & 16 ? -0.0f : 0.0f);
        return;
      }
      float v = normal(rng);
      if (half) v = std::copysign(0.5f + std::fabs(v), v);
      const int e = static_cast<int>((r >> 8) % static_cast<std::uint64_t>(2 * max_exponent + 1)) - max_exponent;
      set_value(t, at, std::ldexp(v, e));
    } else {
      std::uint32_t u = static_cast<std::uint32_t>(rng());
      if (t.dtype != DType::float32) u &= 0xFFFFu;
      if (is_nan_bits(t.dtype, u)) u &= t.dtype == DType::float32 ? 0xFF800000u
                                       : t.dtype == DType::bfloat16 ? 0xFF80u : 0xFC00u;  // inf
      set_raw(t, at, u);
    }
  });
}

std::vector<float> random_positions(std::int64_t B, std::int64_t S, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> position(kMinPosition, kMaxPosition);
  std::vector<float> p(static_cast<std::size_t>(3 * B * S));
  for (float& v : p) v = position(rng);
  return p;
}

RotaryConfig random_config(int rotary_dim, FrequencyLayout layout, std::mt19937_64& rng) {
  RotaryConfig c;
  c.theta = std::array<double, 3>{1e4, 1e6, 5e5}[rng() % 3];
  c.rotary_dim = rotary_dim;
  c.layout = layout;
  const int half = rotary_dim / 2;
  const int st = static_cast<int>(rng() % static_cast<std::uint64_t>(half + 1));
  const int sh = static_cast<int>(rng() % static_cast<std::uint64_t>(half - st + 1));
  c.sections = {st, sh, half - st - sh};
  return c;
}

RotaryParams params_for(Isa isa, Pairing pairing, Direction direction = Direction::forward,
                        int threads = 0) {
  RotaryParams p;
  p.isa = isa;
  p.pairing = pairing;
  p.direction = direction;
  p.threads = threads;
  return p;
}

std::string describe(Isa isa, DType dtype, Pairing pairing) {
  return std::string(to_string(isa)) + " " + std::string(to_string(dtype)) + " " +
         std::string(to_string(pairing));
}

// `out` is the rotation of `in` (an untouched copy of the input) within the dtype's
// tolerance; no element of out is NaN (max_error alone misses some, see
// RotaryHarness.MaxErrorIsInfiniteForNaNInEitherElementOfAPair); every element past the
// rotary dim is a bit-identical copy of the input.
void expect_rotation_of(const RotaryConfig& config, const std::vector<float>& positions,
                        const HeadTensor& in, const HeadTensor& out, Pairing pairing,
                        Direction direction, const std::string& what) {
  const auto expected = ref::rotate(config, positions.data(), in, pairing, direction);
  const double error = ref::max_error(expected, in, out, config.rotary_dim, pairing);
  EXPECT_LE(error, ref::tolerance(in.dtype)) << what;
  std::int64_t nans = 0, changed = 0;
  ref::for_each_element(in, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    const std::uint32_t y = raw_at(out, ref::element_offset(out, b, s, h, d));
    if (is_nan_bits(out.dtype, y)) ++nans;
    else if (d >= config.rotary_dim && y != raw_at(in, ref::element_offset(in, b, s, h, d))) ++changed;
  });
  EXPECT_EQ(nans, 0) << what << ": NaN in the output";
  EXPECT_EQ(changed, 0) << what << ": pass-through elements changed";
}

// The storage bytes of `t` outside its view, with the bytes of the view zeroed.
std::vector<unsigned char> outside_view(const Tensor& t) {
  std::vector<unsigned char> out = t.bytes;
  const std::size_t size = dtype_size(t.view.dtype);
  const auto base = static_cast<std::size_t>(static_cast<const unsigned char*>(t.view.data) - t.bytes.data());
  ref::for_each_element(t.view, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    const auto at = base + static_cast<std::size_t>(ref::element_offset(t.view, b, s, h, d)) * size;
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(at),
              out.begin() + static_cast<std::ptrdiff_t>(at + size), 0);
  });
  return out;
}

// ================================================================ 1. the check harness ===

TEST(RotaryHarness, RunCheckPassesForTwoSeeds) {
  for (std::uint64_t seed : {0x5EED0001ull, 0xC1AC1E5ull}) {
    const auto results = ref::compare_every_path(seed, 1);
    // every ISA x 3 dtypes x 2 pairings x 3 frequency layouts x 4 memories x 2 directions
    // x in/out of place
    EXPECT_EQ(results.size(), available_isas().size() * 3 * 2 * 3 * 4 * 2 * 2);
    int failures = 0;
    for (const auto& r : results)
      if (!r.pass()) {
        ++failures;
        ADD_FAILURE() << "seed " << seed << ": " << r.describe();
      }
    EXPECT_EQ(failures, 0) << "seed " << seed;
  }
}

TEST(RotaryHarness, CompareCasePassesOnAHandBuiltCase) {
  for (Isa isa : available_isas()) {
    ref::ComparisonCase c;
    c.isa = isa;
    c.dtype = DType::bfloat16;
    c.pairing = Pairing::gptj;
    c.layout = FrequencyLayout::interleaved;
    c.memory = "strided";
    c.direction = Direction::backward;
    c.batch = 2;
    c.seq = 19;
    c.q_heads = 3;
    c.k_heads = 1;
    c.head_dim = 80;
    c.rotary_dim = 64;
    const auto r = ref::compare_case(c, 42);
    EXPECT_TRUE(r.pass()) << r.describe();
    EXPECT_TRUE(r.guard_intact);
  }
}

// A case rotated forward (best code path, neox) out of place, for the tests below to spoil.
struct SpoiltCase {
  RotaryConfig config;
  std::vector<float> positions;
  Tensor in, out;
};

SpoiltCase forward_case(DType dtype, int head_dim, int rotary_dim, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  SpoiltCase c{random_config(rotary_dim, FrequencyLayout::chunked, rng), random_positions(1, 5, rng),
               make_bshd(dtype, 1, 5, 2, head_dim), make_bshd(dtype, 1, 5, 2, head_dim)};
  fill_random(c.in.view, rotary_dim, rng);
  const RotaryTable table = make_rotary_table(c.config, c.positions.data(), 1, 5);
  const RotaryTarget target{c.in.view, c.out.view};
  rotate(table, std::span<const RotaryTarget>(&target, 1), params_for(Isa::automatic, Pairing::neox));
  return c;
}

TEST(RotaryHarness, CanFail) {
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    SpoiltCase c = forward_case(dtype, 12, 8, 7);
    const auto forward = ref::rotate(c.config, c.positions.data(), c.in.view, Pairing::neox, Direction::forward);
    const auto backward = ref::rotate(c.config, c.positions.data(), c.in.view, Pairing::neox, Direction::backward);
    const double tol = ref::tolerance(dtype);
    EXPECT_LE(ref::max_error(forward, c.in.view, c.out.view, 8, Pairing::neox), tol);
    // the wrong direction, and the wrong pairing, are far off
    const auto gptj = ref::rotate(c.config, c.positions.data(), c.in.view, Pairing::gptj, Direction::forward);
    EXPECT_GT(ref::max_error(backward, c.in.view, c.out.view, 8, Pairing::neox), 100 * tol);
    EXPECT_GT(ref::max_error(gptj, c.in.view, c.out.view, 8, Pairing::gptj), 100 * tol);
    // one element moved by 16 tolerances of its pair's norm (head 1 of token 3, element 5,
    // whose pair is (1, 5); any token whose pair is not zero would do)
    const std::int64_t at = ref::element_offset(c.out.view, 0, 3, 1, 5);
    const double norm = std::hypot(value_at(c.in.view, ref::element_offset(c.in.view, 0, 3, 1, 1)),
                                   value_at(c.in.view, at));
    ASSERT_GT(norm, 0.0);
    set_value(c.out.view, at, static_cast<float>(value_at(c.out.view, at) + 16 * tol * norm));
    EXPECT_GT(ref::max_error(forward, c.in.view, c.out.view, 8, Pairing::neox), tol);
  }
}

// rotary_reference.h promises "NaN anywhere gives +inf". max_error takes
// e = std::max(e0, e1) and then tests isnan(e); std::max(e0, NaN) returns e0, so a NaN in
// the second element of a pair (i + D/2 for neox, 2i + 1 for gptj) is dropped and the pair
// counts as correct: a kernel leaving those elements unwritten in a NaN-filled output would
// pass compare_every_path. Element 2 (first of its pair) is caught; element 6 is not.
TEST(RotaryHarness, MaxErrorIsInfiniteForNaNInEitherElementOfAPair) {
  const double inf = std::numeric_limits<double>::infinity();
  // neox, rotary dim 8: element 2 is the first element of pair (2, 6), element 6 the second.
  for (int element : {2, 6}) {
    SCOPED_TRACE("NaN at element " + std::to_string(element));
    SpoiltCase c = forward_case(DType::float32, 12, 8, 11);
    const auto forward = ref::rotate(c.config, c.positions.data(), c.in.view, Pairing::neox, Direction::forward);
    ASSERT_LE(ref::max_error(forward, c.in.view, c.out.view, 8, Pairing::neox), kFloat32Accuracy);
    set_raw(c.out.view, ref::element_offset(c.out.view, 0, 2, 0, element), nan_bits(DType::float32));
    EXPECT_EQ(ref::max_error(forward, c.in.view, c.out.view, 8, Pairing::neox), inf);
  }
}

TEST(RotaryHarness, MaxErrorIsInfiniteWhenAPassThroughElementDiffers) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : kDTypes) {
    SpoiltCase c = forward_case(dtype, 12, 8, 13);
    const auto forward = ref::rotate(c.config, c.positions.data(), c.in.view, Pairing::neox, Direction::forward);
    const std::int64_t at = ref::element_offset(c.out.view, 0, 4, 1, 10);
    set_raw(c.out.view, at, raw_at(c.out.view, at) ^ 1u);  // one ulp
    EXPECT_EQ(ref::max_error(forward, c.in.view, c.out.view, 8, Pairing::neox), inf)
        << to_string(dtype);
    set_raw(c.out.view, at, nan_bits(dtype));
    EXPECT_EQ(ref::max_error(forward, c.in.view, c.out.view, 8, Pairing::neox), inf)
        << to_string(dtype);
  }
}

// ============================================== 2. accuracy against the naive computation ===

TEST(RotaryAccuracy, SixteenBitIsWithinTwiceTheNaiveErrorAndFloat32Within1e6) {
  constexpr std::int64_t B = 1, S = 64, H = 4, D = 128;
  double lowest_ratio = 1e300, highest_ratio = 0;  // naive error / ours, printed (docs/explanation/numerics.md)
  for (Isa isa : available_isas())
    for (DType dtype : kDTypes)
      for (Pairing pairing : kPairings) {
        const std::string what = describe(isa, dtype, pairing);
        std::mt19937_64 rng(0xACC0 + static_cast<std::uint64_t>(dtype));
        RotaryConfig config;  // Qwen2.5-VL: theta 1e6, D 128, chunked [16, 24, 24]
        const auto positions = random_positions(B, S, rng);
        Tensor in = make_bshd(dtype, B, S, H, D), out = make_bshd(dtype, B, S, H, D);
        fill_random(in.view, D, rng);
        fill_nan(out);
        const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
        const RotaryTarget target{in.view, out.view};
        rotate(table, std::span<const RotaryTarget>(&target, 1), params_for(isa, pairing));

        const auto exact = ref::rotate(config, positions.data(), in.view, pairing, Direction::forward);
        const double ours = ref::max_error(exact, in.view, out.view, D, pairing);
        if (dtype == DType::float32) {
          EXPECT_LT(ours, kFloat32Accuracy) << what;
          continue;
        }
        // The naive result is representable in the storage type: store it and measure it
        // with the same metric.
        const auto naive = ref::rotate_in_storage_precision(config, positions.data(), in.view,
                                                            pairing, Direction::forward);
        Tensor naive_out = make_bshd(dtype, B, S, H, D);
        ref::for_each_element(in.view, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
          const double v = naive[ref::dense_index(in.view, b, s, h, d)];
          const std::int64_t at = ref::element_offset(naive_out.view, b, s, h, d);
          set_value(naive_out.view, at, static_cast<float>(v));
          ASSERT_EQ(value_at(naive_out.view, at), v) << "naive value not representable";
        });
        const double naive_error = ref::max_error(exact, in.view, naive_out.view, D, pairing);
        EXPECT_LE(ours, kNaiveFactor * naive_error) << what << ": naive " << naive_error;
        EXPECT_LE(ours, ref::tolerance(dtype)) << what;
        // The comparison means something: rounding to storage is the floor of both.
        EXPECT_GT(naive_error, 0.0) << what;
        EXPECT_GT(ours, 0.0) << what;
        lowest_ratio = std::min(lowest_ratio, naive_error / ours);
        highest_ratio = std::max(highest_ratio, naive_error / ours);
      }
  std::printf("16-bit storage: the same math done in storage precision has %.2f-%.2fx our error\n",
              lowest_ratio, highest_ratio);
}

// ======================================================== 3. every head and rotary dim ===

TEST(RotaryOddSizes, EveryEvenHeadDimEveryIsaOutOfPlaceIntoNaN) {
  std::mt19937_64 rng(0x0DD5);
  for (Isa isa : available_isas())
    for (DType dtype : kDTypes)
      for (int D = 2; D <= 256; D += 2)
        for (std::int64_t S : {1, 3, 17}) {
          // The whole head rotated, and (D > 2) a random smaller rotary dim; the two take
          // opposite pairings, swapped from one D to the next, so that every D, S meets both.
          std::vector<int> rotary_dims = {D};
          if (D > 2) rotary_dims.push_back(2 + 2 * static_cast<int>(rng() % static_cast<std::uint64_t>(D / 2 - 1)));
          for (std::size_t variant = 0; variant < rotary_dims.size(); ++variant) {
            const int rot = rotary_dims[variant];
            const Pairing pairing = kPairings[(variant + static_cast<std::size_t>(D / 2)) % 2];
            const FrequencyLayout layout = kLayouts[rng() % 3];
            const Direction direction = rng() % 2 ? Direction::backward : Direction::forward;
            const RotaryConfig config = random_config(rot, layout, rng);
            const std::int64_t B = 1 + static_cast<std::int64_t>(rng() % 2);
            const auto positions = random_positions(B, S, rng);
            const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
            // q with 2 heads, k with 1 (GQA), both in padded rows: heads 1..3 elements apart
            std::vector<Tensor> ins, outs;
            std::vector<RotaryTarget> targets;
            for (std::int64_t H : {2, 1}) {
              const std::int64_t pad_in = 1 + static_cast<std::int64_t>(rng() % 3);
              const std::int64_t pad_out = 1 + static_cast<std::int64_t>(rng() % 3);
              Tensor in = make_tensor(dtype, {B, S, H, D},
                                      {S * H * (D + pad_in), H * (D + pad_in), D + pad_in, 1});
              fill_bytes(in, rng);
              fill_random(in.view, rot, rng);
              Tensor out = make_tensor(dtype, {B, S, H, D},
                                       {S * H * (D + pad_out), H * (D + pad_out), D + pad_out, 1}, 2, 2);
              fill_nan(out);
              targets.push_back({in.view, out.view});
              ins.push_back(std::move(in));
              outs.push_back(std::move(out));
            }
            std::vector<std::vector<unsigned char>> gaps;
            for (const Tensor& o : outs) gaps.push_back(outside_view(o));
            const std::vector<unsigned char> in0 = ins[0].bytes, in1 = ins[1].bytes;
            rotate(table, targets, params_for(isa, pairing, direction));
            const std::string what = describe(isa, dtype, pairing) + " D=" + std::to_string(D) +
                                     " rot=" + std::to_string(rot) + " S=" + std::to_string(S);
            for (std::size_t i = 0; i < 2; ++i) {
              expect_rotation_of(config, positions, ins[i].view, outs[i].view, pairing, direction,
                                 what + " target " + std::to_string(i));
              EXPECT_EQ(outside_view(outs[i]), gaps[i]) << what << ": wrote outside the view";
            }
            EXPECT_EQ(ins[0].bytes, in0) << what << ": input written";
            EXPECT_EQ(ins[1].bytes, in1) << what << ": input written";
            if (testing::Test::HasFailure()) return;  // one failing case is enough to read
          }
        }
}

// ============================================================== 4. strided views ===

TEST(RotaryStrided, QKSlicesOfAFusedQkvBufferInPlaceLeaveVUntouched) {
  constexpr std::int64_t B = 2, S = 5, Hq = 4, Hk = 2, Ht = Hq + 2 * Hk;
  for (Isa isa : available_isas())
    for (DType dtype : kDTypes)
      for (Pairing pairing : kPairings)
        for (const Dims dims : {Dims{64, 64}, Dims{64, 48}, Dims{40, 40}, Dims{42, 30}}) {
          const int D = dims.head_dim, rot = dims.rotary_dim;
          const std::string what = describe(isa, dtype, pairing) + " D=" + std::to_string(D) +
                                   " rot=" + std::to_string(rot);
          std::mt19937_64 rng(static_cast<std::uint64_t>(D * 1000 + rot));
          const RotaryConfig config = random_config(rot, FrequencyLayout::chunked, rng);
          const auto positions = random_positions(B, S, rng);
          const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
          Tensor qkv = make_bshd(dtype, B, S, Ht, D);
          fill_random(qkv.view, rot, rng);
          const Tensor original = clone(qkv);
          auto slice = [&](const Tensor& t, std::int64_t first, std::int64_t heads) {
            HeadTensor v = t.view;
            v.data = static_cast<unsigned char*>(v.data) + static_cast<std::size_t>(first * D) * dtype_size(dtype);
            v.shape[2] = heads;
            return v;
          };
          const HeadTensor q = slice(qkv, 0, Hq), k = slice(qkv, Hq, Hk);
          const std::vector<RotaryTarget> targets = {{q, q}, {k, k}};
          rotate(table, targets, params_for(isa, pairing));
          expect_rotation_of(config, positions, slice(original, 0, Hq), q, pairing, Direction::forward, what + " q");
          expect_rotation_of(config, positions, slice(original, Hq, Hk), k, pairing, Direction::forward, what + " k");
          const HeadTensor v_now = slice(qkv, Hq + Hk, Hk), v_before = slice(original, Hq + Hk, Hk);
          std::int64_t changed = 0;
          ref::for_each_element(v_now, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
            changed += raw_at(v_now, ref::element_offset(v_now, b, s, h, d)) != raw_at(v_before, ref::element_offset(v_before, b, s, h, d));
          });
          EXPECT_EQ(changed, 0) << what << ": v changed";
        }
}

TEST(RotaryStrided, DimStrideTwoOutOfPlaceAndInPlace) {
  constexpr std::int64_t B = 2, S = 7, H = 3;
  for (Isa isa : available_isas())
    for (DType dtype : kDTypes)
      for (Pairing pairing : kPairings)
        for (const Dims dims : {Dims{32, 32}, Dims{32, 16}, Dims{18, 14}}) {
          const int D = dims.head_dim, rot = dims.rotary_dim;
          const std::string what = describe(isa, dtype, pairing) + " D=" + std::to_string(D) +
                                   " rot=" + std::to_string(rot);
          std::mt19937_64 rng(static_cast<std::uint64_t>(0x5712 + D + rot));
          const RotaryConfig config = random_config(rot, FrequencyLayout::interleaved, rng);
          const auto positions = random_positions(B, S, rng);
          const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
          // Every other element of [B, S, H, 2D]: the odd elements belong to someone else.
          const Shape strides = {S * H * 2 * D, H * 2 * D, 2 * D, 2};
          Tensor in = make_tensor(dtype, {B, S, H, D}, strides);
          fill_bytes(in, rng);
          fill_random(in.view, rot, rng);
          const Tensor original = clone(in);
          // out of place into a dense view, and into another stride-2 view
          for (bool dense_out : {true, false}) {
            Tensor out = dense_out ? make_bshd(dtype, B, S, H, D) : make_tensor(dtype, {B, S, H, D}, strides);
            fill_nan(out);
            const auto gaps = outside_view(out);
            const RotaryTarget target{in.view, out.view};
            rotate(table, std::span<const RotaryTarget>(&target, 1), params_for(isa, pairing));
            expect_rotation_of(config, positions, in.view, out.view, pairing, Direction::forward,
                               what + (dense_out ? " into dense" : " into stride 2"));
            EXPECT_EQ(outside_view(out), gaps) << what;
          }
          EXPECT_EQ(in.bytes, original.bytes) << what << ": input written";
          // in place: the odd elements stay as they were
          rotate(table, in.view, params_for(isa, pairing));
          expect_rotation_of(config, positions, original.view, in.view, pairing, Direction::forward, what + " in place");
          EXPECT_EQ(outside_view(in), outside_view(original)) << what << ": in place wrote between elements";
        }
}

TEST(RotaryStrided, BroadcastInputWithStrideZeroHeads) {
  // A stride-0 dimension is fine for the input (read only): every head reads one row.
  constexpr std::int64_t B = 1, S = 4, H = 3, D = 16;
  for (Isa isa : available_isas()) {
    std::mt19937_64 rng(0xB0);
    RotaryConfig config = random_config(D, FrequencyLayout::chunked, rng);
    const auto positions = random_positions(B, S, rng);
    const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
    Tensor in = make_tensor(DType::float32, {B, S, H, D}, {S * D, D, 0, 1});
    fill_random(in.view, D, rng);
    Tensor out = make_bshd(DType::float32, B, S, H, D);
    fill_nan(out);
    const RotaryTarget target{in.view, out.view};
    rotate(table, std::span<const RotaryTarget>(&target, 1), params_for(isa, Pairing::gptj));
    expect_rotation_of(config, positions, in.view, out.view, Pairing::gptj, Direction::forward,
                       std::string(to_string(isa)));
  }
}

TEST(RotaryStrided, BshdAndBhsdGiveBitIdenticalResults) {
  constexpr std::int64_t B = 2, S = 9, H = 3;
  for (Isa isa : available_isas())
    for (DType dtype : kDTypes)
      for (Pairing pairing : kPairings)
        for (const Dims dims : {Dims{64, 64}, Dims{64, 40}, Dims{38, 38}}) {
          const int D = dims.head_dim, rot = dims.rotary_dim;
          const std::string what = describe(isa, dtype, pairing) + " D=" + std::to_string(D) +
                                   " rot=" + std::to_string(rot);
          std::mt19937_64 rng(static_cast<std::uint64_t>(0xB5D + D + rot));
          const RotaryConfig config = random_config(rot, FrequencyLayout::interleaved, rng);
          const auto positions = random_positions(B, S, rng);
          const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
          Tensor a = make_bshd(dtype, B, S, H, D);
          Tensor b = make_tensor(dtype, {B, S, H, D}, {H * S * D, D, S * D, 1});
          ASSERT_EQ(b.view.strides, bhsd(nullptr, dtype, B, S, H, D).strides);
          fill_random(a.view, rot, rng);
          ref::for_each_element(a.view, [&](std::int64_t bb, std::int64_t s, std::int64_t h, std::int64_t d) {
            set_raw(b.view, ref::element_offset(b.view, bb, s, h, d), raw_at(a.view, ref::element_offset(a.view, bb, s, h, d)));
          });
          const Tensor original = clone(a);
          for (Direction direction : {Direction::forward, Direction::backward}) {
            rotate(table, a.view, params_for(isa, pairing, direction));
            rotate(table, b.view, params_for(isa, pairing, direction));
            std::int64_t differ = 0;
            ref::for_each_element(a.view, [&](std::int64_t bb, std::int64_t s, std::int64_t h, std::int64_t d) {
              differ += raw_at(a.view, ref::element_offset(a.view, bb, s, h, d)) != raw_at(b.view, ref::element_offset(b.view, bb, s, h, d));
            });
            EXPECT_EQ(differ, 0) << what << " " << to_string(direction);
            if (direction == Direction::forward) {
              EXPECT_NE(a.bytes, original.bytes) << what << ": nothing rotated";
            }
          }
        }
}

// ======================================================= 5. forward then backward ===

TEST(RotaryRoundTrip, BackwardUndoesForward) {
  constexpr std::int64_t B = 2, S = 9, H = 3;
  for (Isa isa : available_isas())
    for (DType dtype : kDTypes)
      for (Pairing pairing : kPairings)
        for (FrequencyLayout layout : kLayouts)
          for (bool head_major : {false, true})
            for (const Dims dims : {Dims{96, 96}, Dims{72, 56}}) {
              const int D = dims.head_dim, rot = dims.rotary_dim;
              const std::string what = describe(isa, dtype, pairing) + " " +
                                       std::string(to_string(layout)) + (head_major ? " bhsd" : " bshd") +
                                       " D=" + std::to_string(D) + " rot=" + std::to_string(rot);
              std::mt19937_64 rng(static_cast<std::uint64_t>(0x7217 + D));
              const RotaryConfig config = random_config(rot, layout, rng);
              const auto positions = random_positions(B, S, rng);
              const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
              auto make = [&] {
                return head_major ? make_tensor(dtype, {B, S, H, D}, {H * S * D, D, S * D, 1})
                                  : make_bshd(dtype, B, S, H, D);
              };
              Tensor in = make(), mid = make(), back = make();
              fill_random(in.view, rot, rng);
              fill_nan(mid);
              fill_nan(back);
              const RotaryTarget forward{in.view, mid.view}, backward{mid.view, back.view};
              rotate(table, std::span<const RotaryTarget>(&forward, 1), params_for(isa, pairing));
              rotate(table, std::span<const RotaryTarget>(&backward, 1), params_for(isa, pairing, Direction::backward));
              std::vector<double> original(static_cast<std::size_t>(B * S * H * D));
              ref::for_each_element(in.view, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
                original[ref::dense_index(in.view, b, s, h, d)] = value_at(in.view, ref::element_offset(in.view, b, s, h, d));
              });
              const double tol = dtype == DType::float32 ? kRoundTripFloat32 : kRoundTripFactor16 * ref::tolerance(dtype);
              EXPECT_LE(ref::max_error(original, in.view, back.view, rot, pairing), tol) << what;
              // and the forward pass did rotate (the round trip is not two copies)
              EXPECT_GT(ref::max_error(original, in.view, mid.view, rot, pairing), 10 * tol) << what;
            }
}

// ================================================= 6. the relative-position property ===

double dot_of_heads(const Tensor& a, std::int64_t sa, const Tensor& b, std::int64_t sb) {
  double sum = 0;
  for (std::int64_t d = 0; d < a.view.shape[3]; ++d)
    sum += value_at(a.view, ref::element_offset(a.view, 0, sa, 0, d)) * value_at(b.view, ref::element_offset(b.view, 0, sb, 0, d));
  return sum;
}

TEST(RotaryRelativePosition, ScoresDependOnlyOnThePerAxisOffset) {
  constexpr int D = 128;
  constexpr int kTrials = 40;
  for (Isa isa : available_isas())
    for (Pairing pairing : kPairings)
      for (FrequencyLayout layout : kLayouts) {
        const std::string what = describe(isa, DType::float32, pairing) + " " + std::string(to_string(layout));
        std::mt19937_64 rng(0xDE17A + static_cast<std::uint64_t>(layout));
        RotaryConfig config;
        config.theta = 1e4;
        config.rotary_dim = D;
        config.layout = layout;
        config.sections = layout == FrequencyLayout::interleaved ? std::array<int, 3>{24, 20, 20}
                                                                  : std::array<int, 3>{16, 24, 24};
        const auto axes = frequency_axes(config);
        const auto inv = inverse_frequencies(config);
        // Multiples of 1/8 below 2^13: p, p + delta, p + delta + kAxisStep are exact in
        // float32, so the exact angle differences of shifted tokens equal the original ones.
        std::uniform_int_distribution<int> eighths(-64 * 8, 2048 * 8);
        auto position = [&] { return static_cast<float>(eighths(rng)) / 8.0f; };
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (int trial = 0; trial < kTrials; ++trial) {
          // tokens: 0 = p, 1 = r, 2 = p + delta, 3 = r + delta, 4 = p + delta + kAxisStep e_axis
          constexpr std::int64_t S = 5;
          const int axis = layout == FrequencyLayout::single ? 0 : trial % 3;
          std::vector<float> positions(3 * S);
          for (std::size_t a = 0; a < 3; ++a) {
            const float p = position(), r = position(), delta = position();
            positions[a * S + 0] = p;
            positions[a * S + 1] = r;
            positions[a * S + 2] = p + delta;
            positions[a * S + 3] = r + delta;
            positions[a * S + 4] = p + delta + (static_cast<int>(a) == axis ? kAxisStep : 0.0f);
          }
          const RotaryTable table = make_rotary_table(config, positions.data(), 1, S);
          // q, k: one random vector each in every token; u: q again
          Tensor q = make_bshd(DType::float32, 1, S, 1, D), k = make_bshd(DType::float32, 1, S, 1, D);
          std::vector<double> qv(D);
          double q_norm2 = 0, k_norm2 = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            const float qd = normal(rng), kd = normal(rng);
            qv[static_cast<std::size_t>(d)] = qd;
            q_norm2 += static_cast<double>(qd) * qd;
            k_norm2 += static_cast<double>(kd) * kd;
            for (std::int64_t s = 0; s < S; ++s) {
              set_value(q.view, ref::element_offset(q.view, 0, s, 0, d), qd);
              set_value(k.view, ref::element_offset(k.view, 0, s, 0, d), kd);
            }
          }
          Tensor u = clone(q);
          const std::vector<RotaryTarget> targets = {{q.view, q.view}, {k.view, k.view}, {u.view, u.view}};
          rotate(table, targets, params_for(isa, pairing));

          // the same per-axis shift of both tokens keeps the score
          const double scale = std::sqrt(q_norm2 * k_norm2);
          EXPECT_NEAR(dot_of_heads(q, 2, k, 3), dot_of_heads(q, 0, k, 1), kDotTolerance * scale)
              << what << " trial " << trial;
          // a shift of one token only, on one axis, changes it: q against itself moved by
          // kAxisStep on `axis` scores sum over that axis's frequencies i of
          // |q pair i|^2 cos(kAxisStep inv_freq[i]) plus the other pairs' |q pair|^2, i.e.
          // |q|^2 less the drop below (and exactly |q|^2 unmoved).
          double drop = 0;
          for (int i = 0; i < D / 2; ++i) {
            if (axes[static_cast<std::size_t>(i)] != axis) continue;
            const std::size_t i0 = pairing == Pairing::neox ? static_cast<std::size_t>(i) : static_cast<std::size_t>(2 * i);
            const std::size_t i1 = pairing == Pairing::neox ? static_cast<std::size_t>(i + D / 2) : i0 + 1;
            drop += (qv[i0] * qv[i0] + qv[i1] * qv[i1]) *
                    (1 - std::cos(static_cast<double>(kAxisStep) * inv[static_cast<std::size_t>(i)]));
          }
          ASSERT_GT(drop, kDotChange * q_norm2) << what << ": the check below would be void";
          EXPECT_NEAR(dot_of_heads(q, 2, u, 2), q_norm2, kDotTolerance * q_norm2) << what << " trial " << trial;
          EXPECT_NEAR(dot_of_heads(q, 2, u, 4), q_norm2 - drop, kDotTolerance * q_norm2)
              << what << " trial " << trial << " axis " << axis;
        }
      }
}

// ============================================================== 7. threading ===

TEST(RotaryThreads, OneAndSeveralThreadsAreBitIdentical) {
  // 2 x 300 tokens x 8 heads x 128: ~4.7 MiB of fp32 traffic, far above the 256 KiB below
  // which a call runs on one thread; 300 is no multiple of the 16-token grain and the
  // batch boundary falls inside a chunk.
  constexpr std::int64_t B = 2, S = 300, H = 8, D = 128;
  for (Isa isa : available_isas())
    for (DType dtype : {DType::float32, DType::bfloat16})
      for (Pairing pairing : kPairings) {
        const std::string what = describe(isa, dtype, pairing);
        std::mt19937_64 rng(0x7777);
        const RotaryConfig config = random_config(D, FrequencyLayout::chunked, rng);
        const auto positions = random_positions(B, S, rng);
        const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
        Tensor in = make_bshd(dtype, B, S, H, D);
        fill_random(in.view, D, rng);
        std::vector<std::vector<unsigned char>> results;
        for (int threads : {1, 2, 0}) {
          Tensor out = make_bshd(dtype, B, S, H, D);
          fill_nan(out);
          const RotaryTarget target{in.view, out.view};
          rotate(table, std::span<const RotaryTarget>(&target, 1), params_for(isa, pairing, Direction::forward, threads));
          if (threads == 2 && dtype == DType::float32 && pairing == Pairing::neox)
            expect_rotation_of(config, positions, in.view, out.view, pairing, Direction::forward, what);
          results.push_back(out.bytes);
        }
        EXPECT_TRUE(results[0] == results[1]) << what << ": 1 vs 2 threads";
        EXPECT_TRUE(results[0] == results[2]) << what << ": 1 vs all threads";
      }
}

TEST(RotaryThreads, TablesAreBitIdenticalAcrossThreadCounts) {
  // 4096 tokens x 64 frequencies: above the 65536 entries where tables are built in parallel.
  constexpr std::int64_t B = 2, S = 2048;
  std::mt19937_64 rng(0x7AB1E);
  const RotaryConfig config = random_config(128, FrequencyLayout::interleaved, rng);
  const auto positions = random_positions(B, S, rng);
  const RotaryTable one = make_rotary_table(config, positions.data(), B, S, 1);
  const RotaryTable two = make_rotary_table(config, positions.data(), B, S, 2);
  ASSERT_EQ(one.bytes(), two.bytes());
  EXPECT_EQ(std::memcmp(one.row(0, 0), two.row(0, 0), one.bytes()), 0);
}

// ==================================================================== 8. AGE ===

TEST(RotaryAge, PlanBuildsOneTablePerDistinctGeometry) {
  const Batch in = two_padded_image_rows();
  const AgePlan plan = make_age_plan("alternate", 4);
  const AgePositions age = age_rope_index(in.input(), VisionConfig{}, plan, CircleConfig{});
  RotaryConfig config;
  config.theta = 1e4;
  config.rotary_dim = 16;
  config.sections = {2, 3, 3};
  const RotaryPlan rp = make_rotary_plan(age, config);
  ASSERT_EQ(rp.tables.size(), 2u);  // circle and mrope
  EXPECT_EQ(rp.plan.pattern(), "CMCM");
  EXPECT_EQ(&rp.layer(0), &rp.layer(2));
  EXPECT_EQ(&rp.layer(1), &rp.layer(3));
  EXPECT_NE(&rp.layer(0), &rp.layer(1));
  EXPECT_THROW(rp.layer(4), Error);
  EXPECT_THROW(rp.layer(-1), Error);

  const auto axes = frequency_axes(config);
  const auto inv = inverse_frequencies(config);
  const int half = config.rotary_dim / 2;
  for (int l = 0; l < 4; ++l) {
    const Positions& positions = age.layer(l);
    const RotaryTable& table = rp.layer(l);
    ASSERT_EQ(table.batch(), in.batch);
    ASSERT_EQ(table.seq_len(), in.seq);
    ASSERT_EQ(table.half(), half);
    const RotaryTable direct = make_rotary_table(config, positions);
    ASSERT_EQ(direct.bytes(), table.bytes());
    EXPECT_EQ(std::memcmp(direct.row(0, 0), table.row(0, 0), table.bytes()), 0) << "layer " << l;
    for (std::int64_t b = 0; b < in.batch; ++b)
      for (std::int64_t s = 0; s < in.seq; ++s)
        for (int i = 0; i < half; ++i) {
          const double phi = static_cast<double>(positions.at(axes[static_cast<std::size_t>(i)], b, s)) *
                             inv[static_cast<std::size_t>(i)];
          EXPECT_NEAR(table.row(b, s)[i], std::cos(phi), kTableTolerance) << l << " " << b << " " << s << " " << i;
          EXPECT_NEAR(table.row(b, s)[half + i], std::sin(phi), kTableTolerance) << l << " " << b << " " << s << " " << i;
        }
  }
  // the two geometries differ (on the image tokens), so their tables do
  EXPECT_NE(std::memcmp(rp.layer(0).row(0, 0), rp.layer(1).row(0, 0), rp.layer(0).bytes()), 0);
}

// The table's own sincos (kernel_impl.h) against float(std::cos / std::sin) of the same
// double angle, on every path: an entry may differ only when the exact value sits within
// ~1e-14 of a float rounding boundary, and then by one ulp. Positions up to 1e5 (the
// polynomial) and up to 1e7 (the libm fallback beyond |phi| = 1e6).
TEST(RotaryTable, EntriesMatchLibmRoundedToFloatButForRareNearTies) {
  constexpr std::int64_t S = 8192;
  RotaryConfig config;  // D 128, chunked [16, 24, 24], theta 1e6
  const auto axes = frequency_axes(config);
  const auto inv = inverse_frequencies(config);
  for (const float range : {1e5f, 1e7f}) {
    std::mt19937_64 rng(0x51C05);
    std::uniform_real_distribution<float> position(-range, range);
    std::vector<float> positions(3 * S);
    for (float& p : positions) p = position(rng);
    for (Isa isa : available_isas()) {
      const RotaryTable table = make_rotary_table(config, positions.data(), 1, S, 0, isa);
      const int half = table.half();
      std::int64_t entries = 0, differ = 0;
      for (std::int64_t s = 0; s < S; ++s)
        for (int i = 0; i < half; ++i) {
          const double phi = static_cast<double>(positions[static_cast<std::size_t>(axes[static_cast<std::size_t>(i)] * S + s)]) *
                             inv[static_cast<std::size_t>(i)];
          const float libm[2] = {static_cast<float>(std::cos(phi)), static_cast<float>(std::sin(phi))};
          const float ours[2] = {table.row(0, s)[i], table.row(0, s)[half + i]};
          for (int k = 0; k < 2; ++k, ++entries) {
            if (ours[k] == libm[k]) continue;
            ++differ;
            EXPECT_EQ(std::nextafter(libm[k], ours[k]), ours[k]) << "more than one ulp at phi " << phi;
          }
        }
      std::printf("table sincos (%s, |position| < %.0e): %lld of %lld entries differ from float(libm) by one ulp\n",
                  std::string(to_string(isa)).c_str(), static_cast<double>(range),
                  static_cast<long long>(differ), static_cast<long long>(entries));
      // Near ties are rare: allow 1 in 100 000 (measured: a few in a million).
      EXPECT_LE(differ, entries / 100000) << to_string(isa);
    }
  }
}

TEST(RotaryTable, EntriesAreWithinHalfAnUlpOfOneAcrossBatchRowsAtLargePositions) {
  // Angles up to ~1e6 radians: an fp32 angle would lose whole radians of phase here; the
  // table must still be the double cos/sin rounded once.
  std::mt19937_64 rng(0x7AB);
  RotaryConfig config;  // D 128, chunked [16, 24, 24]
  config.theta = 1e4;     // the fastest frequencies: one radian per unit of position
  std::uniform_real_distribution<float> position(-1e6f, 1e6f);
  constexpr std::int64_t B = 3, S = 50;
  std::vector<float> positions(3 * B * S);
  for (float& p : positions) p = position(rng);
  const RotaryTable table = make_rotary_table(config, positions.data(), B, S);
  const auto axes = frequency_axes(config);
  const auto inv = inverse_frequencies(config);
  const int half = table.half();
  double worst = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (int i = 0; i < half; ++i) {
        const double pos = positions[static_cast<std::size_t>((axes[static_cast<std::size_t>(i)] * B + b) * S + s)];
        const double phi = pos * inv[static_cast<std::size_t>(i)];
        worst = std::max({worst, std::fabs(table.row(b, s)[i] - std::cos(phi)),
                          std::fabs(table.row(b, s)[half + i] - std::sin(phi))});
      }
  EXPECT_LE(worst, kTableTolerance);
}

// ================================================================== 9. errors ===


// Non-finite inputs stay non-finite on every path and storage type: a NaN anywhere in a pair
// makes both outputs NaN, whatever its payload (the bf16 vector store relies on NaN low bits
// being zero; payloads with every low bit set are the ones that would round into -0 or inf).
TEST(RotaryNonFinite, NaNAndInfinityInputsGiveNonFiniteOutputsOnEveryPath) {
  constexpr std::int64_t S = 3, H = 2, D = 64;
  RotaryConfig config;
  config.rotary_dim = D;
  config.sections = {8, 12, 12};
  std::vector<float> positions(3 * S);
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = 1.5f * static_cast<float>(i) - 2.0f;
  const std::uint16_t bf16_specials[] = {0x7F81, 0x7FFF, 0xFFFF, 0xFFC1, 0x7FC0, 0x7F80, 0xFF80};
  const std::uint16_t f16_specials[] = {0x7C01, 0x7FFF, 0xFFFF, 0x7E00, 0x7C00, 0xFC00};
  for (Isa isa : available_isas()) {
    const RotaryTable table = make_rotary_table(config, positions.data(), 1, S, 1, isa);
    for (DType dtype : {DType::bfloat16, DType::float16, DType::float32}) {
      SCOPED_TRACE(std::string(to_string(isa)) + " " + std::string(to_string(dtype)));
      const std::size_t n = static_cast<std::size_t>(S * H * D);
      std::vector<std::uint16_t> x16(n, dtype == DType::bfloat16 ? 0x3F80 : 0x3C00);  // 1.0
      std::vector<float> x32(n, 1.0f);
      std::vector<bool> special(n, false);
      for (std::size_t i = 0, k = 0; i < n; i += 37, ++k) {
        special[i] = true;
        if (dtype == DType::bfloat16) x16[i] = bf16_specials[k % std::size(bf16_specials)];
        else if (dtype == DType::float16) x16[i] = f16_specials[k % std::size(f16_specials)];
        else x32[i] = k % 2 ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
      }
      void* data = dtype == DType::float32 ? static_cast<void*>(x32.data()) : static_cast<void*>(x16.data());
      RotaryParams params;
      params.isa = isa;
      rotate(table, bshd(data, dtype, 1, S, H, D), params);
      for (std::size_t row = 0; row < n / D; ++row)
        for (std::int64_t i = 0; i < D / 2; ++i) {
          const std::size_t a = row * D + static_cast<std::size_t>(i), b = a + D / 2;
          const double ya = ref::load(data, dtype, static_cast<std::int64_t>(a));
          const double yb = ref::load(data, dtype, static_cast<std::int64_t>(b));
          if (special[a] || special[b]) {
            EXPECT_FALSE(std::isfinite(ya)) << "element " << a;
            EXPECT_FALSE(std::isfinite(yb)) << "element " << b;
          } else {
            EXPECT_TRUE(std::isfinite(ya) && std::isfinite(yb)) << "elements " << a << ", " << b;
          }
        }
    }
  }
}

// Outputs of 16 MiB or more are written with streaming stores when out of place and aligned
// (dispatch.cpp). The small cases above never reach that path: compare it, bit for bit, with
// the in-place (cached) result of the same arithmetic, and with a misaligned out that falls
// back to cached stores.
TEST(RotaryStreaming, LargeOutOfPlaceEqualsInPlaceBitForBit) {
  constexpr std::int64_t S = 2048, H = 16, D = 128;  // 16 MiB of fp32 output: streams
  std::vector<float> positions(3 * S);
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = 0.37f * static_cast<float>(i % S) - 3.0f;
  const RotaryTable table = make_rotary_table(RotaryConfig{}, positions.data(), 1, S);
  std::mt19937_64 rng(0x57AE);
  std::normal_distribution<float> normal;
  for (DType dtype : {DType::float32, DType::bfloat16})
    for (Pairing pairing : kPairings)
      for (Isa isa : available_isas()) {
        SCOPED_TRACE(std::string(to_string(isa)) + " " + std::string(to_string(dtype)) + " " +
                     std::string(to_string(pairing)));
        const std::int64_t scale = dtype == DType::float32 ? 1 : 2;  // bf16: same bytes, twice S
        const std::size_t n = static_cast<std::size_t>(S * H * D * scale);
        const std::size_t bytes = n * dtype_size(dtype);
        std::vector<unsigned char> x(bytes + 64), in_place, out(bytes + 64, 0xFF), shifted(bytes + 64, 0xFF);
        for (std::size_t i = 0; i < n; ++i) {
          const float v = normal(rng);
          if (dtype == DType::float32) std::memcpy(&x[4 * i], &v, 4);
          else {
            const std::uint16_t h = cvt::float_to_bf16(v);
            std::memcpy(&x[2 * i], &h, 2);
          }
        }
        in_place = x;
        std::vector<float> pos2(3 * S * scale);
        for (std::size_t i = 0; i < pos2.size(); ++i) pos2[i] = positions[i % positions.size()];
        const RotaryTable& t = scale == 1 ? table : make_rotary_table(RotaryConfig{}, pos2.data(), 1, S * scale);
        RotaryParams params;
        params.pairing = pairing;
        params.isa = isa;
        const std::int64_t seq = S * scale;
        rotate(t, bshd(in_place.data(), dtype, 1, seq, H, D), params);
        const RotaryTarget streamed{bshd(x.data(), dtype, 1, seq, H, D), bshd(out.data(), dtype, 1, seq, H, D)};
        rotate(t, std::span<const RotaryTarget>(&streamed, 1), params);
        EXPECT_EQ(0, std::memcmp(out.data(), in_place.data(), bytes));
        // one element past a 16-byte boundary: cached stores, same values
        unsigned char* odd = shifted.data() + dtype_size(dtype);
        const RotaryTarget misaligned{bshd(x.data(), dtype, 1, seq, H, D), bshd(odd, dtype, 1, seq, H, D)};
        rotate(t, std::span<const RotaryTarget>(&misaligned, 1), params);
        EXPECT_EQ(0, std::memcmp(odd, in_place.data(), bytes));
      }
}

// Regression: the streaming decision once read the alignment of targets[i] for the i-th
// *non-empty* target, so an empty target before a large misaligned one made the kernel
// stream into an unaligned address (a crash). The misaligned out must take cached stores.
TEST(RotaryStreaming, AnEmptyTargetBeforeAMisalignedLargeOneDoesNotShiftTheDecision) {
  constexpr std::int64_t S = 2048, H = 16, D = 128;  // 16 MiB of fp32 output: streams
  std::vector<float> positions(3 * S);
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = 0.25f * static_cast<float>(i % S);
  const RotaryTable table = make_rotary_table(RotaryConfig{}, positions.data(), 1, S);
  const std::size_t n = static_cast<std::size_t>(S * H * D);
  std::vector<float> x(n, 1.0f), expected(n, 1.0f), out(n + 4, 0.0f);
  float* odd = out.data() + 1;  // 4 bytes past a 16-byte boundary
  if (reinterpret_cast<std::uintptr_t>(out.data()) % 16 != 0) odd = out.data();
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(odd) % 16, 0u);
  for (Isa isa : available_isas()) {
    SCOPED_TRACE(std::string(to_string(isa)));
    RotaryParams params;
    params.isa = isa;
    std::fill(expected.begin(), expected.end(), 1.0f);
    rotate(table, bshd(expected.data(), DType::float32, 1, S, H, D), params);  // in place: cached
    const RotaryTarget targets[2] = {
        {bshd(nullptr, DType::float32, 1, S, 0, D), bshd(nullptr, DType::float32, 1, S, 0, D)},
        {bshd(x.data(), DType::float32, 1, S, H, D), bshd(odd, DType::float32, 1, S, H, D)}};
    rotate(table, targets, params);
    EXPECT_EQ(0, std::memcmp(odd, expected.data(), n * sizeof(float)));
  }
}

TEST(RotaryErrors, BadTargetsThrowAndWriteNothing) {
  constexpr std::int64_t B = 1, S = 4, H = 2, D = 8;
  std::mt19937_64 rng(0xE4404);
  const RotaryConfig config = random_config(D, FrequencyLayout::chunked, rng);
  const auto positions = random_positions(B, S, rng);
  const RotaryTable table = make_rotary_table(config, positions.data(), B, S);

  // Target 0 is always valid (out of place into NaN); target 1 is spoilt in each case.
  Tensor q = make_bshd(DType::float32, B, S, H, D), q_out = make_bshd(DType::float32, B, S, H, D);
  fill_random(q.view, D, rng);
  fill_nan(q_out);
  Tensor k = make_bshd(DType::float32, B, S, H, D), k_out = make_bshd(DType::float32, B, S, H, D);
  fill_random(k.view, D, rng);
  fill_nan(k_out);
  Tensor wide = make_bshd(DType::float32, 2, S, H, D), short_seq = make_bshd(DType::float32, B, 3, H, D);
  Tensor narrow = make_bshd(DType::float32, B, S, H, 6), k16 = make_bshd(DType::bfloat16, B, S, H, D);
  Tensor fused = make_bshd(DType::float32, B, S, 2 * H, D);  // k and an overlapping out in one
  const std::vector<unsigned char> q_before = q_out.bytes, k_before = k_out.bytes,
                                   fused_before = fused.bytes;

  auto expect_error = [&](RotaryTarget bad, const std::string& text, RotaryParams params = {}) {
    SCOPED_TRACE(text);
    const std::vector<RotaryTarget> targets = {{q.view, q_out.view}, bad};
    EXPECT_THROW(rotate(table, targets, params), Error);
    EXPECT_THAT(error_of([&] { rotate(table, targets, params); }), HasSubstr(text));
    EXPECT_EQ(q_out.bytes, q_before) << "target 0 written before the error";
    EXPECT_EQ(k_out.bytes, k_before) << "target 1 written";
    EXPECT_EQ(fused.bytes, fused_before) << "target 1 written";
  };
  // valid as a pair: the fixture is right
  {
    Tensor q2 = clone(q_out), k2 = clone(k_out);
    const std::vector<RotaryTarget> ok = {{q.view, q2.view}, {k.view, k2.view}};
    EXPECT_NO_THROW(rotate(table, ok));
  }

  HeadTensor view = wide.view;
  expect_error({view, view}, "rotate target 1: shape [2, 4, 2, 8] has batch 2 and seq 4 but the table was built for batch 1 and seq 4");
  view = short_seq.view;
  expect_error({view, view}, "has batch 1 and seq 3");
  view = narrow.view;
  expect_error({view, view}, "head_dim 6 is smaller than the rotary dim 8");
  expect_error({k.view, k16.view}, "out dtype bfloat16 differs from in dtype float32");
  expect_error({k16.view, k16.view}, "dtype bfloat16 differs from target 0's float32");
  view = k_out.view;
  view.shape[2] = 1;
  expect_error({k.view, view}, "out shape [1, 4, 1, 8] differs from in shape [1, 4, 2, 8]");
  // partially overlapping: out starts one element into in
  HeadTensor fk = fused.view, fo = fused.view;
  fk.shape[2] = fo.shape[2] = H;
  fo.data = static_cast<float*>(fo.data) + 1;
  expect_error({fk, fo}, "out overlaps in without being the same view");
  fo.data = static_cast<float*>(fk.data) + D;  // one head in: rows interleave with in's
  expect_error({fk, fo}, "out overlaps in without being the same view");
  // same data, other strides: not "in place"
  fo = fk;
  fo.strides = {S * H * D, D, S * D, 1};
  expect_error({fk, fo}, "same data as in but strides");
  // out with a stride-0 head dimension of size 2 writes each element twice
  view = k_out.view;
  view.strides[2] = 0;
  expect_error({k.view, view}, "may write one element twice");
  view = k_out.view;
  view.strides = {S * H * D, H * D, 1, 1};  // heads one element apart: rows overlap
  expect_error({k.view, view}, "may write one element twice");
  view = k.view;
  view.data = nullptr;
  expect_error({view, k_out.view}, "rotate target 1 in: data is null");
  view = k_out.view;
  view.data = nullptr;
  expect_error({k.view, view}, "rotate target 1 out: data is null");
  view = k.view;
  view.strides[1] = -H * D;
  expect_error({view, view}, "negative stride");
  view = k.view;
  view.shape[2] = -1;
  expect_error({view, view}, "shape [1, 4, -1, 8] has a negative size");
  // target 0's output passed again as target 1's: it would be rotated twice
  expect_error({k.view, q_out.view}, "out has the same data as target 0's out");
  RotaryParams threads;
  threads.threads = -1;
  expect_error({k.view, k_out.view}, "threads must be in [0, 1024] (got -1; 0 = all cores)", threads);

  view = k.view;
  view.strides[1] = std::numeric_limits<std::int64_t>::max() / 8;
  expect_error({view, view}, "addresses more memory than this process can");
  const std::vector<unsigned char> k_in = k.bytes;
  std::vector<RotaryTarget> many(65, RotaryTarget{k.view, k.view});
  EXPECT_THAT(error_of([&] { rotate(table, many); }), HasSubstr("at most 64 targets per call (got 65)"));
  EXPECT_EQ(k.bytes, k_in);
}

TEST(RotaryErrors, EmptyViewsNeedNoData) {
  // Zero tokens or zero heads: nothing to read or write, so null data is fine.
  RotaryConfig config;
  config.rotary_dim = 8;
  config.sections = {2, 1, 1};
  const RotaryTable empty = make_rotary_table(config, nullptr, 2, 0);
  EXPECT_EQ(empty.bytes(), 0u);
  EXPECT_NO_THROW(rotate(empty, bshd(nullptr, DType::bfloat16, 2, 0, 4, 8)));
  std::vector<float> positions(3 * 3, 1.0f);
  const RotaryTable table = make_rotary_table(config, positions.data(), 1, 3);
  EXPECT_NO_THROW(rotate(table, bshd(nullptr, DType::float32, 1, 3, 0, 8)));
  EXPECT_NO_THROW(rotate(table, std::span<const RotaryTarget>()));
}

TEST(RotaryErrors, InPlaceConvenienceWritesNothingWhenItThrows) {
  std::mt19937_64 rng(0xE4405);
  const RotaryConfig config = random_config(8, FrequencyLayout::chunked, rng);
  const auto positions = random_positions(1, 4, rng);
  const RotaryTable table = make_rotary_table(config, positions.data(), 1, 4);
  Tensor x = make_bshd(DType::float16, 1, 4, 2, 8);
  fill_random(x.view, 8, rng);
  const std::vector<unsigned char> before = x.bytes;
  HeadTensor overlapping = x.view;
  overlapping.strides[2] = 4;  // heads half a row apart
  EXPECT_THAT(error_of([&] { rotate(table, overlapping); }), HasSubstr("may write one element twice"));
  EXPECT_EQ(x.bytes, before);
}

TEST(RotaryErrors, TableRejectsNonFinitePositionsAndBadSizes) {
  RotaryConfig config;
  config.rotary_dim = 8;
  config.sections = {2, 1, 1};
  std::vector<float> positions(3 * 2 * 3, 1.5f);
  EXPECT_NO_THROW(make_rotary_table(config, positions.data(), 2, 3));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()})
    for (int axis = 0; axis < 3; ++axis) {
      std::vector<float> p = positions;
      p[static_cast<std::size_t>(axis * 6 + 4)] = bad;  // row 1, token 1
      EXPECT_THROW(make_rotary_table(config, p.data(), 2, 3), Error);
      const std::string message = error_of([&] { make_rotary_table(config, p.data(), 2, 3); });
      EXPECT_THAT(message, HasSubstr("positions must be finite"));
      EXPECT_THAT(message, HasSubstr("axis " + std::to_string(axis) + " at row 1, token 1"));
    }
  EXPECT_THAT(error_of([&] { make_rotary_table(config, positions.data(), -1, 3); }), HasSubstr("must be >= 0"));
  EXPECT_THAT(error_of([&] { make_rotary_table(config, nullptr, 2, 3); }), HasSubstr("position_ids is null"));
  EXPECT_THAT(error_of([&] { make_rotary_table(config, positions.data(), 2, 3, -2); }), HasSubstr("threads"));
  RotaryConfig odd = config;
  odd.rotary_dim = 7;
  EXPECT_THAT(error_of([&] { make_rotary_table(odd, positions.data(), 2, 3); }), HasSubstr("rotary dim"));
  RotaryConfig sections = config;
  sections.sections = {2, 2, 2};
  EXPECT_THAT(error_of([&] { make_rotary_table(sections, positions.data(), 2, 3); }), HasSubstr("sections"));
  RotaryConfig theta = config;
  theta.theta = 0;
  EXPECT_THAT(error_of([&] { make_rotary_table(theta, positions.data(), 2, 3); }), HasSubstr("rope_theta"));
  Positions wrong;
  wrong.batch = 2;
  wrong.seq_len = 3;
  wrong.position_ids.assign(17, 0.0f);
  EXPECT_THAT(error_of([&] { make_rotary_table(config, wrong); }), HasSubstr("expected 3 x 2 x 3"));
}

// Tables in caller memory (the PyTorch op keeps them in tensors): the same bits as an owned
// table, the same rotation through a view, and the sizes checked before anything is written.
TEST(RotaryTableView, IntoCallerMemoryEqualsTheOwnedTableAndRotatesTheSame) {
  std::mt19937_64 rng(77);
  const RotaryConfig config = random_config(24, FrequencyLayout::chunked, rng);
  const std::int64_t B = 2, S = 37;
  const std::vector<float> positions = random_positions(B, S, rng);
  const RotaryTable owned = make_rotary_table(config, positions.data(), B, S);
  std::vector<float> values(static_cast<std::size_t>(B * S * 24), -7.0f);
  make_rotary_table_into(config, positions.data(), B, S, values);
  EXPECT_EQ(0, std::memcmp(values.data(), owned.row(0, 0), values.size() * sizeof(float)));

  Tensor x = make_bshd(DType::float32, B, S, 3, 24);
  fill_random(x.view, 24, rng);
  Tensor a = clone(x), b = clone(x);
  rotate(owned, a.view);
  const RotaryTableView view{values.data(), B, S, 24};
  const RotaryTarget target{b.view, b.view};
  rotate(view, std::span<const RotaryTarget>(&target, 1));
  EXPECT_EQ(a.bytes, b.bytes);

  std::vector<float> wrong(values.size() - 1, -7.0f);
  EXPECT_THAT(error_of([&] { make_rotary_table_into(config, positions.data(), B, S, wrong); }),
              HasSubstr("holds 1775 floats, expected batch 2 x seq_len 37 x rotary_dim 24 = 1776"));
  EXPECT_EQ(wrong, std::vector<float>(values.size() - 1, -7.0f));
  std::vector<float> p = positions;
  p[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(error_of([&] { make_rotary_table_into(config, p.data(), B, S, values); }),
              HasSubstr("positions must be finite"));

  const Tensor before = clone(x);
  for (const RotaryTableView& bad : {RotaryTableView{values.data(), B, S, 23},
                                     RotaryTableView{values.data(), B, S, 0},
                                     RotaryTableView{nullptr, B, S, 24},
                                     RotaryTableView{values.data(), B, S + 1, 24}}) {
    const RotaryTarget t{x.view, x.view};
    EXPECT_THROW(rotate(bad, std::span<const RotaryTarget>(&t, 1)), Error);
  }
  EXPECT_EQ(x.bytes, before.bytes);
  const RotaryTarget t{x.view, x.view};
  EXPECT_THAT(error_of([&] { rotate(RotaryTableView{values.data(), B, S, 23}, std::span<const RotaryTarget>(&t, 1)); }),
              HasSubstr("rotary_dim 23 must be even"));
  EXPECT_THAT(error_of([&] { rotate(RotaryTableView{nullptr, B, S, 24}, std::span<const RotaryTarget>(&t, 1)); }),
              HasSubstr("values are null"));
}

TEST(RotaryErrors, ForcingAnUnavailableIsaThrows) {
  const auto isas = available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::portable);
  RotaryConfig config;
  config.rotary_dim = 8;
  config.sections = {2, 1, 1};
  std::vector<float> positions(3, 2.0f);
  const RotaryTable table = make_rotary_table(config, positions.data(), 1, 1);
  Tensor x = make_bshd(DType::float32, 1, 1, 1, 8);
  int missing = 0;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512bf16}) {
    if (std::find(isas.begin(), isas.end(), isa) != isas.end()) continue;
    ++missing;
    RotaryParams p;
    p.isa = isa;
    EXPECT_THAT(error_of([&] { rotate(table, x.view, p); }), HasSubstr("is not available"));
  }
  if (missing == 0) GTEST_SKIP() << "every code path runs on this CPU";
}

// ============================================================= 10. conversions ===

// Exact value of v rounded to nearest even with `bits` significant bits, exponents clamped
// below at `min_exponent` (frexp convention: subnormals), +-inf past `max_finite`.
double round_reference(double v, int bits, int min_exponent, double max_finite) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);
  e = std::max(e, min_exponent);
  const double scale = std::ldexp(1.0, bits - e);
  const double r = std::nearbyint(v * scale) / scale;
  if (std::fabs(r) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), v);
  return r;
}

constexpr double kF16Max = 65504.0;
constexpr double kBf16Max = 0x1.FEp127;

double f16_value(std::uint16_t h) { return ref::load(&h, DType::float16, 0); }

TEST(ConvertF16, EveryPatternDecodesExactlyAndRoundTrips) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = cvt::f16_to_float(h);
    const double want = f16_value(h);  // the reference's own decoding
    if (is_nan_bits(DType::float16, h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(cvt::float_to_f16(f), 0x7E00u) << std::hex << i << ": every NaN is stored canonical (convert.h)";
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << i;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << i;
    ASSERT_EQ(cvt::float_to_f16(f), h) << std::hex << i;
  }
}

TEST(ConvertBf16, EveryPatternRoundTrips) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = cvt::bf16_to_float(h);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f), i << 16);
    if (is_nan_bits(DType::bfloat16, h)) {
      ASSERT_EQ(cvt::float_to_bf16(f), 0x7FC0u) << std::hex << i << ": every NaN is stored canonical (convert.h)";
      continue;
    }
    ASSERT_EQ(cvt::float_to_bf16(f), h) << std::hex << i;
  }
}

TEST(ConvertBf16, RoundsToNearestEven) {
  struct Case {
    std::uint32_t in;
    std::uint16_t out;
  };
  for (const Case c : {Case{0x3F808000u, 0x3F80u},   // tie, kept part even: down
                       Case{0x3F818000u, 0x3F82u},   // tie, kept part odd: up
                       Case{0x3F808001u, 0x3F81u},   // just past the tie: up
                       Case{0x3F807FFFu, 0x3F80u},   // just below: down
                       Case{0xBF818000u, 0xBF82u},   // negative tie, odd: away from zero
                       Case{0x3F80FFFFu, 0x3F81u},
                       Case{0x3FFF8000u, 0x4000u},   // carries into the exponent
                       Case{0x7F7F7FFFu, 0x7F7Fu},   // largest finite stays finite
                       Case{0x7F7F8000u, 0x7F80u},   // tie above the largest bf16: infinity
                       Case{0x7F7FFFFFu, 0x7F80u},   // FLT_MAX: infinity
                       Case{0x00008000u, 0x0000u},   // subnormal tie to even zero
                       Case{0x00018000u, 0x0002u},
                       Case{0x7F800000u, 0x7F80u},   // inf stays inf
                       Case{0x80000000u, 0x8000u}})  // -0
    EXPECT_EQ(cvt::float_to_bf16(std::bit_cast<float>(c.in)), c.out) << std::hex << c.in;
  // NaNs whose payload lies in the dropped bits stay NaN (never round into infinity)
  for (std::uint32_t nan : {0x7F800001u, 0x7F80FFFFu, 0xFF800001u, 0x7FFFFFFFu})
    EXPECT_TRUE(is_nan_bits(DType::bfloat16, cvt::float_to_bf16(std::bit_cast<float>(nan)))) << std::hex << nan;
}

TEST(ConvertBf16, RandomFloatsMatchTheReferenceRounding) {
  std::mt19937_64 rng(0xBF16);
  for (int i = 0; i < 20000; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng());
    if (i % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // exact ties
    const float f = std::bit_cast<float>(u);
    const std::uint16_t got = cvt::float_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(is_nan_bits(DType::bfloat16, got)) << std::hex << u;
      continue;
    }
    const double want = round_reference(f, 8, -125, kBf16Max);
    const float back = cvt::bf16_to_float(got);
    EXPECT_EQ(static_cast<double>(back), want) << std::hex << u;
    EXPECT_EQ(std::signbit(back), std::signbit(f)) << std::hex << u;
  }
}

TEST(ConvertF16, RoundsToNearestEvenIncludingSubnormalsAndOverflow) {
  EXPECT_EQ(cvt::float_to_f16(65520.0f), 0x7C00u);   // tie between 65504 and 65536: inf
  EXPECT_EQ(cvt::float_to_f16(65519.0f), 0x7BFFu);   // below the tie: 65504
  EXPECT_EQ(cvt::float_to_f16(-65520.0f), 0xFC00u);
  EXPECT_EQ(cvt::float_to_f16(65504.0f), 0x7BFFu);
  EXPECT_EQ(cvt::float_to_f16(1e9f), 0x7C00u);
  EXPECT_EQ(cvt::float_to_f16(0x1p-24f), 0x0001u);   // smallest subnormal
  EXPECT_EQ(cvt::float_to_f16(0x1p-25f), 0x0000u);   // tie to even: zero
  EXPECT_EQ(cvt::float_to_f16(0x1.8p-24f), 0x0002u);  // tie to even: 2
  EXPECT_EQ(cvt::float_to_f16(0x1.000002p-25f), 0x0001u);  // just past the tie
  EXPECT_EQ(cvt::float_to_f16(0x1.FFCp-15f), 0x0400u);  // rounds up into the smallest normal
  EXPECT_EQ(cvt::float_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(cvt::float_to_f16(1.0f + 0x1p-11f), 0x3C00u);  // tie, even: down
  EXPECT_EQ(cvt::float_to_f16(1.0f + 0x1.8p-10f), 0x3C02u);  // tie, odd: up

  std::mt19937_64 rng(0xF16);
  std::uniform_int_distribution<int> exponent(-27, 17);  // below the subnormals .. past overflow
  std::uniform_int_distribution<std::uint32_t> mantissa(0, 0x7FFFFF);
  for (int i = 0; i < 40000; ++i) {
    float f;
    switch (i % 4) {
      case 0:  // any finite or not float
        f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
        break;
      case 1: {  // exact ties between two fp16 neighbours (normal or subnormal)
        const std::uint16_t h = static_cast<std::uint16_t>(rng() % 0x7BFF);
        f = static_cast<float>((f16_value(h) + f16_value(static_cast<std::uint16_t>(h + 1))) / 2);
        break;
      }
      default:  // the fp16 range and its edges
        f = std::ldexp(1.0f + static_cast<float>(mantissa(rng)) * 0x1p-23f, exponent(rng));
        if (rng() % 2) f = -f;
    }
    const std::uint16_t got = cvt::float_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(is_nan_bits(DType::float16, got)) << std::hex << std::bit_cast<std::uint32_t>(f);
      continue;
    }
    const double want = round_reference(f, 11, -13, kF16Max);
    EXPECT_EQ(f16_value(got), want) << std::hexfloat << f;
    EXPECT_EQ((got & 0x8000u) != 0, std::signbit(f)) << std::hexfloat << f;
  }
}

}  // namespace
