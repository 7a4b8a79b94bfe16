// circlerope — the rotary configuration (RotaryConfig): theta, rotary dim, and which position
// axis each rotary frequency reads (docs/spec.md §4).
//
// D = rotary dim, frequencies i = 0 .. D/2-1, inv_freq[i] = theta^(-2i/D).
// Axis read by each frequency (t = temporal, h = height, w = width), D = 16 drawn:
//
//   chunked [2,3,3]      (Qwen2-VL, Qwen2.5-VL)  i: 0 1 2 3 4 5 6 7
//                                                   t t h h h w w w
//   interleaved [4,2,2]  (Qwen3-VL)                 t h w t h w t t
//   single               (plain 1-D RoPE)           t t t t t t t t
//
// With neox pairing frequency i rotates the pair (i, i + D/2), so the head reads
// [tthhhwww tthhhwww]; with gptj pairing it rotates (2i, 2i + 1): [tttthhhhhhwwwwww].
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "circlerope/error.h"

namespace circlerope {

enum class FrequencyLayout { chunked, interleaved, single };

std::string_view to_string(FrequencyLayout layout);
FrequencyLayout parse_frequency_layout(std::string_view text);

// The valid range of rope_theta. With theta >= 1 the frequencies theta^(-2i/D) fall from 1
// to just above 1/theta (RoPE's ladder of wavelengths 2 pi .. 2 pi theta), so an angle is
// never larger than its position: finite for every finite position. Below 1 the ladder runs
// upwards and a tiny theta overflows it (a subnormal theta would make infinite angles and NaN
// tables). Above 2^126 the slowest frequency, just above 1/theta, is no longer a normal
// float32, which is what transformers computes inverse frequencies in (past 2^128 theta
// itself is infinite there and every frequency but the first is 0).
inline constexpr double kMinTheta = 1.0;
inline constexpr double kMaxTheta = 0x1p126;  // 8.507e37

struct RotaryConfig {
  double theta = 1e6;                        // rope_theta, in [kMinTheta, kMaxTheta]
  int rotary_dim = 128;                      // D, even, 2..1024
  FrequencyLayout layout = FrequencyLayout::chunked;
  std::array<int, 3> sections = {16, 24, 24};  // [st, sh, sw], sum D/2 (not read by `single`)
};

// Throws Error naming the field if the config is inconsistent.
void validate(const RotaryConfig& config);

// axis (0 = t, 1 = h, 2 = w) of every frequency i = 0 .. D/2-1.
std::vector<int> frequency_axes(const RotaryConfig& config);
// inv_freq[i] = theta^(-2i/D), in double.
std::vector<double> inverse_frequencies(const RotaryConfig& config);

}  // namespace circlerope
