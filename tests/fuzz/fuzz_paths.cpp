// libFuzzer target: every CPU code path (portable, avx2, avx512, avx512bf16: those this CPU
// runs) rotates fuzzed tensors with fuzzed table values and must write exactly the bits of
// one scalar model, NaN payloads included: inputs and table values are raw bit patterns
// (NaNs of every payload and sign, infinities, subnormals, signed zeros), sizes and strides
// reach every store of the kernels (two-vector steps, one-vector steps, masked tails, the
// staged path of strided rows, in place, unaligned outs).
//
// Oracle, independent of src/cpu and src/reference: the rotation of docs/spec.md §4 in float32 as
// rotary.h documents its rounding, y0 = x0 c - (x1 s) and y1 = x1 c + (x0 s), the product in
// parentheses rounded and the rest fused (std::fma: the FMA paths) or rounded twice
// (portable), then stored by the documented NaN rule: round to nearest even (done here by
// value, in double), every NaN the canonical quiet NaN of its type (fp32 0x7FC00000, bf16
// 0x7FC0, fp16 0x7E00). Elements past the rotary dim keep the input's bits; every byte of
// the arena outside the out view stays as it was.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "circlerope/rotary.h"
#include "fuzz_support.h"

namespace {

using namespace circlerope;

// ---- storage formats, by value (no library code) ------------------------------------------
float widen(std::uint32_t bits, DType dtype) {
  switch (dtype) {
    case DType::float32: return std::bit_cast<float>(bits);
    case DType::bfloat16: return std::bit_cast<float>(bits << 16);
    case DType::float16: {
      const int exponent = (bits >> 10) & 31, mantissa = bits & 1023;
      double v = exponent == 0    ? std::ldexp(mantissa, -24)
                 : exponent == 31 ? (mantissa ? std::numeric_limits<double>::quiet_NaN() : HUGE_VAL)
                                  : std::ldexp(mantissa + 1024, exponent - 25);
      return static_cast<float>((bits & 0x8000u) ? -v : v);
    }
  }
  return 0;
}

// Nearest even on the grid of `bits` significant bits with smallest normal exponent
// `min_exp` (frexp's), infinity from `overflow` on; NaN: the canonical one.
std::uint32_t narrow(float f, DType dtype) {
  if (std::isnan(f)) return dtype == DType::float32 ? 0x7FC00000u : dtype == DType::bfloat16 ? 0x7FC0u : 0x7E00u;
  if (dtype == DType::float32) return std::bit_cast<std::uint32_t>(f);
  const bool bf16 = dtype == DType::bfloat16;
  const int bits = bf16 ? 8 : 11, min_exp = bf16 ? -125 : -13;
  const double overflow = bf16 ? 0x1.FFp127 : 65520.0;  // the largest finite + half an ulp: a tie, to even
  const std::uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= overflow) return sign | (bf16 ? 0x7F80u : 0x7C00u);
  int e;
  std::frexp(a, &e);
  const double ulp = std::ldexp(1.0, std::max(e, min_exp) - bits);
  const double r = std::nearbyint(a / ulp) * ulp;  // exactly representable in the format
  if (bf16) return sign | (std::bit_cast<std::uint32_t>(static_cast<float>(r)) >> 16);
  if (r == 0) return sign;
  std::frexp(r, &e);
  if (e < -13) return sign | static_cast<std::uint32_t>(r * 0x1p24);  // subnormal: m 2^-24
  const auto mantissa = static_cast<std::uint32_t>(std::ldexp(r, 11 - e)) - 1024u;
  return sign | (static_cast<std::uint32_t>(e + 14) << 10) | mantissa;
}

float rounded(float v) {  // one float32 rounding, never fused with the next operation
  volatile float r = v;
  return r;
}

std::uint32_t get(const unsigned char* base, DType dtype, std::int64_t element) {
  if (dtype == DType::float32) {
    std::uint32_t u;
    std::memcpy(&u, base + 4 * element, 4);
    return u;
  }
  std::uint16_t h;
  std::memcpy(&h, base + 2 * element, 2);
  return h;
}
void put(unsigned char* base, DType dtype, std::int64_t element, std::uint32_t bits) {
  if (dtype == DType::float32) std::memcpy(base + 4 * element, &bits, 4);
  else {
    const auto h = static_cast<std::uint16_t>(bits);
    std::memcpy(base + 2 * element, &h, 2);
  }
}

// A raw bit pattern or, half the time, a plain value (so that the arithmetic is exercised,
// not only the NaN and infinity cases).
std::uint32_t fuzzed_bits(FuzzedDataProvider& in, DType dtype) {
  if (in.ConsumeBool()) {
    const auto raw = in.ConsumeIntegral<std::uint32_t>();
    return dtype == DType::float32 ? raw : raw & 0xFFFFu;
  }
  const float v = static_cast<float>(in.ConsumeIntegralInRange<int>(-4096, 4096)) / 64.0f;
  return narrow(v, dtype);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const DType dtype = in.PickValueInArray({DType::float32, DType::bfloat16, DType::float16});
  const Pairing pairing = in.ConsumeBool() ? Pairing::gptj : Pairing::neox;
  const Direction direction = in.ConsumeBool() ? Direction::backward : Direction::forward;
  const std::int64_t B = in.ConsumeIntegralInRange<std::int64_t>(1, 2), S = in.ConsumeIntegralInRange<std::int64_t>(1, 3),
                     H = in.ConsumeIntegralInRange<std::int64_t>(1, 3);
  const int half = in.ConsumeIntegralInRange<int>(1, 70);  // 2 x 16 + 16 + tails, for both pairings
  const std::int64_t D = 2 * half + in.ConsumeIntegralInRange<int>(0, 2);
  const std::int64_t dim_stride = in.ConsumeBool() ? 1 : 2;  // 1: vector path; 2: staged path
  const bool in_place = in.ConsumeBool();
  const std::int64_t shift = in.ConsumeIntegralInRange<int>(0, 7);  // out's offset in elements

  std::vector<float> values(static_cast<std::size_t>(B * S * 2 * half));
  for (float& v : values) v = widen(fuzzed_bits(in, DType::float32), DType::float32);
  const RotaryTableView table{values.data(), B, S, 2 * half};
  const std::size_t esize = dtype_size(dtype);
  const std::int64_t elements = B * S * H * D * dim_stride;
  std::vector<unsigned char> x(static_cast<std::size_t>(elements) * esize);
  for (std::int64_t e = 0; e < elements; ++e) put(x.data(), dtype, e, fuzzed_bits(in, dtype));
  const std::array<std::int64_t, 4> shape{B, S, H, D};
  const std::array<std::int64_t, 4> strides{S * H * D * dim_stride, H * D * dim_stride, D * dim_stride, dim_stride};

  // The model's bits, dense [B][S][H][D], for the fused and the unfused rounding.
  std::vector<std::uint32_t> want[2];
  for (int fused = 0; fused < 2; ++fused) {
    auto& w = want[fused];
    w.resize(static_cast<std::size_t>(B * S * H * D));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t h = 0; h < H; ++h) {
          const std::int64_t row = ((b * S + s) * H + h) * D;
          auto at = [&](std::int64_t d) { return (b * strides[0] + s * strides[1] + h * strides[2] + d * strides[3]); };
          for (std::int64_t d = 2 * half; d < D; ++d) w[static_cast<std::size_t>(row + d)] = get(x.data(), dtype, at(d));
          const float* cs = values.data() + (b * S + s) * 2 * half;
          for (int i = 0; i < half; ++i) {
            const std::int64_t i0 = pairing == Pairing::neox ? i : 2 * i, i1 = pairing == Pairing::neox ? i + half : 2 * i + 1;
            const float x0 = widen(get(x.data(), dtype, at(i0)), dtype), x1 = widen(get(x.data(), dtype, at(i1)), dtype);
            const float c = cs[i], sn = direction == Direction::forward ? cs[half + i] : -cs[half + i];
            const float p1 = rounded(x1 * sn), p0 = rounded(x0 * sn);
            const float y0 = fused ? std::fma(x0, c, -p1) : rounded(rounded(x0 * c) - p1);
            const float y1 = fused ? std::fma(x1, c, p0) : rounded(rounded(x1 * c) + p0);
            w[static_cast<std::size_t>(row + i0)] = narrow(y0, dtype);
            w[static_cast<std::size_t>(row + i1)] = narrow(y1, dtype);
          }
        }
  }

  int compared = 0;
  for (Isa isa : available_isas()) {
    // the out in an arena with guard bytes around it, at a fuzzed element offset
    constexpr unsigned char kGuard = 0x5A;
    std::vector<unsigned char> arena(x.size() + static_cast<std::size_t>(16 + shift) * esize, kGuard);
    unsigned char* out_base = arena.data() + static_cast<std::size_t>(8 + shift) * esize;
    HeadTensor out{out_base, dtype, shape, strides};
    HeadTensor src{x.data(), dtype, shape, strides};
    if (in_place) {
      std::memcpy(out_base, x.data(), x.size());
      src = out;
    } else {
      for (std::int64_t e = 0; e < elements; ++e) put(out_base, dtype, e, dtype == DType::float32 ? 0x7FA00001u : 0x7D01u);
    }
    const std::vector<unsigned char> before = arena;
    RotaryParams params;
    params.isa = isa;
    params.pairing = pairing;
    params.direction = direction;
    params.threads = 1;
    const RotaryTarget target{src, out};
    try {
      rotate(table, std::span<const RotaryTarget>(&target, 1), params);
    } catch (const Error& e) {
      fuzz::finding("%s refused a valid call: %s", std::string(to_string(isa)).c_str(), e.what());
    }
    const auto& w = want[isa == Isa::portable ? 0 : 1];
    std::vector<bool> owned(arena.size(), false);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d) {
            const std::int64_t e = b * strides[0] + s * strides[1] + h * strides[2] + d * strides[3];
            const std::uint32_t got = get(out_base, dtype, e), expected = w[static_cast<std::size_t>(((b * S + s) * H + h) * D + d)];
            if (got != expected)
              fuzz::finding("%s %s %s %s, [%lld,%lld,%lld,%lld] rotary %d, dim stride %lld%s: element (%lld,%lld,%lld,%lld) "
                            "is 0x%X, the model says 0x%X",
                            std::string(to_string(isa)).c_str(), std::string(to_string(dtype)).c_str(),
                            std::string(to_string(pairing)).c_str(), std::string(to_string(direction)).c_str(),
                            static_cast<long long>(B), static_cast<long long>(S), static_cast<long long>(H),
                            static_cast<long long>(D), 2 * half, static_cast<long long>(dim_stride),
                            in_place ? " in place" : "", static_cast<long long>(b), static_cast<long long>(s),
                            static_cast<long long>(h), static_cast<long long>(d), got, expected);
            for (std::size_t k = 0; k < esize; ++k)
              owned[static_cast<std::size_t>(out_base - arena.data()) + static_cast<std::size_t>(e) * esize + k] = true;
          }
    for (std::size_t i = 0; i < arena.size(); ++i)
      if (!owned[i] && arena[i] != before[i])
        fuzz::finding("%s wrote byte %zu of the arena, outside the out view", std::string(to_string(isa)).c_str(), i);
    ++compared;
  }
  fuzz::count(compared > 0 ? "rotated and compared" : "no path to compare");
  return 0;
}
