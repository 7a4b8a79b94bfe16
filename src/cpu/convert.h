// Internal: bf16 / fp16 <-> float32, round to nearest even. Branch-free integer forms so that
// the compiler vectorises them on any ISA; kernels compiled with F16C use the hardware
// conversion for fp16 instead (simd.h).
//
// The NaN rule of every store (these functions, every backend of simd.h, the CUDA device code
// in src/cuda/rotary_device.h, and reference::to_bfloat16 / to_float16 that the tests hold
// them to): a NaN result is written as the canonical quiet NaN of its storage type, sign bit
// clear, payload zero:
//
//   float32 0x7FC00000    bfloat16 0x7FC0    float16 0x7E00
//
// (bfloat16's is what PyTorch's own float -> bfloat16 conversion writes for every NaN.) A
// payload is not kept because the fp32 arithmetic before the store does not fix one: which of
// two NaN operands survives depends on the operand order of the instruction the compiler
// picks (x86 has three FMA forms), negation flips a NaN's sign on some paths and not on
// others, and GPUs return their own canonical NaN. One fixed NaN makes every path and
// backend write the same bits.
#pragma once

#include <bit>
#include <cstdint>

// Internal linkage on purpose: every per-ISA kernel file compiles its own copy with its own
// flags, and the linker must never swap one for another.
namespace circlerope::cpu {
namespace {

inline float bf16_to_float(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline constexpr std::uint32_t kQuietNanF32 = 0x7FC00000u;
inline constexpr std::uint16_t kQuietNanBf16 = 0x7FC0u;
inline constexpr std::uint16_t kQuietNanF16 = 0x7E00u;

// fp32 stores: any NaN becomes the canonical one, everything else is kept.
inline float quiet_nan(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  return std::bit_cast<float>((u & 0x7FFFFFFFu) > 0x7F800000u ? kQuietNanF32 : u);
}

inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  // Add half an ulp of bf16, plus one when the kept part is odd: ties go to even.
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  // A NaN would round into another NaN, infinity or a sign flip: it is written canonical.
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(nan ? kQuietNanBf16 : rounded);
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t magnitude = h & 0x7FFFu;
  if (magnitude >= 0x7C00u)  // inf or NaN: all-ones exponent, mantissa kept
    return std::bit_cast<float>(sign | 0x7F800000u | ((magnitude & 0x03FFu) << 13));
  if (magnitude >= 0x0400u)  // normal: rebias the exponent from 15 to 127
    return std::bit_cast<float>(sign | ((magnitude << 13) + ((127u - 15u) << 23)));
  // zero or subnormal: the value is magnitude * 2^-24, exact in float
  const float value = static_cast<float>(magnitude) * 0x1p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(value));
}

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  std::uint32_t out;
  if (a > 0x7F800000u) {
    return kQuietNanF16;  // the canonical NaN, sign clear
  } else if (a >= 0x477FF000u) {
    out = 0x7C00u;  // rounds to 65536 or more: infinity
  } else if (a < 0x38800000u) {
    // below the smallest normal fp16 (2^-14): adding 0.5 makes the float's rounding put the
    // subnormal fp16 mantissa, rounded to nearest even, in the low bits.
    const float shifted = std::bit_cast<float>(a) + 0.5f;
    out = std::bit_cast<std::uint32_t>(shifted) - std::bit_cast<std::uint32_t>(0.5f);
  } else {
    const std::uint32_t odd = (a >> 13) & 1u;
    out = (a + 0x0FFFu + odd - ((127u - 15u) << 23)) >> 13;
  }
  return static_cast<std::uint16_t>(sign | out);
}

}  // namespace
}  // namespace circlerope::cpu
