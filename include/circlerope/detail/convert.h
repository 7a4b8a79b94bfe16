// circlerope — detail, not API: bf16 / fp16 <-> float32, round to nearest even, in one
// definition for the CPU kernels (src/cpu/convert.h) and the CUDA device code
// (src/cuda/rotary_device.h), host and device. Branch-free integer forms, so that compilers
// vectorise them on any ISA (CPU kernels compiled with F16C use the hardware conversion for
// fp16 instead: src/cpu/simd.h), and so that a device computes the bits a host does (no
// __float2bfloat16 intrinsics, whose rounding and NaNs are the device's own). Plain C++17
// where nvcc compiles it, no library calls.
//
// The NaN rule of every store (these functions, every backend of src/cpu/simd.h, the CUDA
// device code, and reference::to_bfloat16 / to_float16 that the tests hold them to): a NaN
// result is written as the canonical quiet NaN of its storage type, sign bit clear, payload
// zero:
//
//   float32 0x7FC00000    bfloat16 0x7FC0    float16 0x7E00
//
// (bfloat16's is what PyTorch's own float -> bfloat16 conversion writes for every NaN.) A
// payload is not kept because the fp32 arithmetic before the store does not fix one: which of
// two NaN operands survives depends on the operand order of the instruction the compiler
// picks (x86 has three FMA forms), negation flips a NaN's sign on some paths and not on
// others, and GPUs return their own canonical NaN (0x7FFFFFFF). One fixed NaN makes every
// path and backend write the same bits.
#pragma once

#include <cstdint>
#include <cstring>
#if __cplusplus >= 202002L
#include <bit>
#endif

#if defined(__CUDACC__)
#define CIRCLEROPE_CONVERT_HD __host__ __device__ __forceinline__
#else
#define CIRCLEROPE_CONVERT_HD inline
#endif

namespace circlerope::detail {
// Internal linkage on purpose: every per-ISA kernel file compiles its own copy with its own
// flags, and the linker must never swap one for another.
namespace {

CIRCLEROPE_CONVERT_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#elif defined(__cpp_lib_bit_cast)
  return std::bit_cast<std::uint32_t>(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

CIRCLEROPE_CONVERT_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#elif defined(__cpp_lib_bit_cast)
  return std::bit_cast<float>(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

constexpr std::uint32_t kQuietNanF32 = 0x7FC00000u;
constexpr std::uint16_t kQuietNanBf16 = 0x7FC0u;
constexpr std::uint16_t kQuietNanF16 = 0x7E00u;

CIRCLEROPE_CONVERT_HD bool is_nan_bits(std::uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

// fp32 stores: any NaN becomes the canonical one, everything else is kept.
CIRCLEROPE_CONVERT_HD float quiet_nan(float f) {
  const std::uint32_t u = float_bits(f);
  return bits_float(is_nan_bits(u) ? kQuietNanF32 : u);
}

CIRCLEROPE_CONVERT_HD float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

CIRCLEROPE_CONVERT_HD std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  // Add half an ulp of bf16, plus one when the kept part is odd: ties go to even.
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  // A NaN would round into another NaN, infinity or a sign flip: it is written canonical.
  return static_cast<std::uint16_t>(is_nan_bits(u) ? kQuietNanBf16 : rounded);
}

CIRCLEROPE_CONVERT_HD float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t magnitude = h & 0x7FFFu;
  if (magnitude >= 0x7C00u)  // inf or NaN: all-ones exponent, mantissa kept
    return bits_float(sign | 0x7F800000u | ((magnitude & 0x03FFu) << 13));
  if (magnitude >= 0x0400u)  // normal: rebias the exponent from 15 to 127
    return bits_float(sign | ((magnitude << 13) + ((127u - 15u) << 23)));
  // zero or subnormal: the value is magnitude * 2^-24, exact in float (one rounding-free
  // product: nothing to fuse)
  const float value = static_cast<float>(magnitude) * 0x1p-24f;
  return bits_float(sign | float_bits(value));
}

CIRCLEROPE_CONVERT_HD std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  std::uint32_t out;
  if (a > 0x7F800000u) {
    return kQuietNanF16;  // the canonical NaN, sign clear
  } else if (a >= 0x477FF000u) {
    out = 0x7C00u;  // rounds to 65536 or more: infinity
  } else if (a < 0x38800000u) {
    // below the smallest normal fp16 (2^-14): adding 0.5 makes the float's rounding put the
    // subnormal fp16 mantissa, rounded to nearest even, in the low bits (a lone addition:
    // nothing to fuse)
    const float shifted = bits_float(a) + 0.5f;
    out = float_bits(shifted) - float_bits(0.5f);
  } else {
    const std::uint32_t odd = (a >> 13) & 1u;
    out = (a + 0x0FFFu + odd - ((127u - 15u) << 23)) >> 13;
  }
  return static_cast<std::uint16_t>(sign | out);
}

}  // namespace
}  // namespace circlerope::detail
