// Internal: the known-answer check, a comparison of two rotation kernels that the dispatcher
// runs before it lets an AVX-512 path (executed on real hardware on one CPU model only, an AMD Zen 4) touch
// user data: the candidate must give the same bits as a trusted kernel (avx2) on a small set of
// rows that reach every branch of the vector path (the two-vector and one-vector steps, masked
// tails of both pairings, pass-through, streaming stores at every alignment, in place), with
// values that make the bf16 rounding decide ties, subnormals and overflow, and NaNs of every
// kind in inputs and table (the NaN rule of convert.h). A few microseconds,
// once per process. Header-only and allocation-free so that the freestanding emulator test
// (tests/avx512_emulator) runs this very function under Bochs.
//
// Not to be confused with the two other checks: `circlerope check`, the command, and the
// reference comparison it runs (reference::compare_every_path: every path against the float64
// reference on random cases).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernel.h"

namespace circlerope::cpu {

namespace known_answer_detail {

inline constexpr int kHalf = 61;         // 2 x 16 + 16 + 13 lanes; gptj: 3 x 16 + 13 pairs
inline constexpr int kHeadDim = 126;     // 4 pass-through elements
inline constexpr int kHeadStride = 128;  // rows 64-byte aligned for every dtype
inline constexpr int kTokens = 3, kHeads = 2;
inline constexpr int kElements = kTokens * kHeads * kHeadStride;

inline std::uint32_t next(std::uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<std::uint32_t>(state >> 32);
}

// Input element k as raw storage bits: mostly ordinary values of many magnitudes, some
// exact zeros, some NaNs with random payloads and signs and, for bf16, subnormals (whose
// rotation gives fp32 subnormals) and values next to the largest finite one (whose rotation
// can round to infinity).
inline std::uint32_t input_bits(DType dtype, std::uint64_t& state) {
  const std::uint32_t r = next(state);
  const std::uint32_t sign = r & 0x80000000u;
  if (r % 37 == 0) {  // NaN: all-ones exponent, a payload that is not zero
    const std::uint32_t payload = next(state) | 1u;
    return dtype == DType::float32 ? sign | 0x7F800000u | (payload & 0x7FFFFFu)
           : dtype == DType::bfloat16 ? (sign >> 16) | 0x7F80u | (payload & 0x7Fu)
                                      : (sign >> 16) | 0x7C00u | (payload & 0x3FFu);
  }
  switch (dtype) {
    case DType::float32: {
      const std::uint32_t exponent = 127 - 20 + (r >> 8) % 41;  // 2^-20 .. 2^20
      return (r % 23 == 0) ? sign : sign | (exponent << 23) | (next(state) & 0x7FFFFFu);
    }
    case DType::bfloat16: {
      const std::uint32_t kind = r % 16;
      if (kind == 0) return sign >> 16;                                // +-0
      if (kind == 1) return (sign >> 16) | (1 + (r >> 8) % 0x7F);      // subnormal
      if (kind == 2) return (sign >> 16) | 0x7F70u | ((r >> 8) & 15);  // near the largest
      const std::uint32_t exponent = 127 - 20 + (r >> 8) % 41;
      return (sign >> 16) | (exponent << 7) | ((r >> 4) & 0x7F);
    }
    case DType::float16: {
      const std::uint32_t exponent = 15 - 6 + (r >> 8) % 12;  // 2^-6 .. 2^5: no overflow
      return (r % 23 == 0) ? sign >> 16 : (sign >> 16) | (exponent << 10) | ((r >> 4) & 0x3FF);
    }
  }
  return 0;
}

// Table row entries: |c|, |s| <= 1 mostly; every third token instead multiplies by
// 1 + k 2^-8 with s = 0, which puts fp32 results of bf16 inputs exactly halfway between two
// bf16 values (ties to even decide them). A few are NaNs whose low payload bits make an
// unguarded integer rounding carry into the sign (0x7FFFFFFF) or the exponent.
inline float table_value(int token, int i, bool is_sin, std::uint64_t& state) {
  if (token % 3 == 2) return is_sin ? 0.0f : 1.0f + static_cast<float>(1 + 2 * (i % 64)) * 0x1p-8f;
  const std::uint32_t r = next(state);
  if (r % 29 == 0) {
    const std::uint32_t nan = (r & 64) ? 0x7FFFFFFFu : 0xFF808001u;
    float f;
    std::memcpy(&f, &nan, sizeof f);
    return f;
  }
  const float unit = static_cast<float>(r >> 8) * 0x1p-24f;  // [0, 1)
  return (r & 1) ? -unit : unit;
}

}  // namespace known_answer_detail

// True when `candidate` writes exactly the bytes `trusted` writes, over every dtype, pairing,
// direction, in and out of place, with and without streaming stores.
inline bool kernels_agree(RangeKernel candidate, RangeKernel trusted) {
  using namespace known_answer_detail;
  alignas(64) float table[kTokens * 2 * kHalf];
  alignas(64) unsigned char in[kElements * 4 + 64];
  alignas(64) unsigned char out_a[kElements * 4 + 64];
  alignas(64) unsigned char out_b[kElements * 4 + 64];
  std::uint64_t state = 0x2505164160000001ull;
  for (int t = 0; t < kTokens; ++t)
    for (int i = 0; i < 2 * kHalf; ++i)
      table[t * 2 * kHalf + i] = table_value(t, i % kHalf, i >= kHalf, state);
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float16}) {
    const std::size_t size = dtype == DType::float32 ? 4 : 2;
    for (int e = 0; e < kElements; ++e) {
      const std::uint32_t bits = input_bits(dtype, state);
      if (size == 4) std::memcpy(in + 4 * e, &bits, 4);
      else {
        const auto h = static_cast<std::uint16_t>(bits);
        std::memcpy(in + 2 * e, &h, 2);
      }
    }
    for (Pairing pairing : {Pairing::neox, Pairing::gptj})
      for (bool backward : {false, true})
        for (int mode = 0; mode < 4; ++mode) {  // in place; out of place; streamed at +0, +16 bytes
          const bool in_place = mode == 0;
          const std::size_t shift = mode == 3 ? 16 : 0;
          for (unsigned char* out : {out_a, out_b}) {
            if (in_place) std::memcpy(out, in, sizeof in);
            else std::memset(out, 0xA5, sizeof out_a);
          }
          RangeKernel kernels[2] = {candidate, trusted};
          unsigned char* outs[2] = {out_a, out_b};
          for (int k = 0; k < 2; ++k) {
            TargetJob target;
            target.in = in_place ? static_cast<const void*>(outs[k]) : in;
            target.out = outs[k] + shift;
            target.heads = kHeads;
            target.head_dim = kHeadDim;
            const std::int64_t strides[4] = {kTokens * kHeads * kHeadStride, kHeads * kHeadStride,
                                             kHeadStride, 1};
            for (int d = 0; d < 4; ++d) target.in_stride[d] = target.out_stride[d] = strides[d];
            target.in_place = in_place;
            target.stream = mode >= 2;
            KernelJob job;
            job.table = table;
            job.seq_len = kTokens;
            job.half = kHalf;
            job.dtype = dtype;
            job.pairing = pairing;
            job.backward = backward;
            job.targets = &target;
            job.target_count = 1;
            kernels[k](job, 0, kTokens);
          }
          if (std::memcmp(out_a, out_b, sizeof out_a) != 0) return false;
        }
  }
  return true;
}

// True when two table kernels (table_range compiled per ISA: the compiler vectorises it)
// write the same floats for a few tokens of positions up to a long context, every axis.
inline bool tables_agree(TableKernel candidate, TableKernel trusted) {
  constexpr int kTableTokens = 7, kTableHalf = 67;  // odd sizes: the vector loops' tails
  float positions[3 * kTableTokens];
  int axes[kTableHalf];
  double inv_freq[kTableHalf];
  float a[kTableTokens * 2 * kTableHalf], b[kTableTokens * 2 * kTableHalf];
  std::uint64_t state = 0x7AB1E5ull;
  for (float& p : positions)
    p = static_cast<float>(known_answer_detail::next(state) % 400000) * 0.0731f - 64.0f;
  for (int i = 0; i < kTableHalf; ++i) {
    axes[i] = i % 3;
    inv_freq[i] = 1.0 / static_cast<double>(1 + i * i * 97);
  }
  TableJob job;
  job.positions = positions;
  job.tokens = kTableTokens;
  job.axes = axes;
  job.inv_freq = inv_freq;
  job.half = kTableHalf;
  job.values = a;
  candidate(job, 0, kTableTokens);
  job.values = b;
  trusted(job, 0, kTableTokens);
  return std::memcmp(a, b, sizeof a) == 0;
}

}  // namespace circlerope::cpu
