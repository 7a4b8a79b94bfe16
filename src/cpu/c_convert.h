// Internal: C values of c_kernels.h turned into the C++ types, range-checked (an out-of-range
// enum is undefined behaviour in C++). Shared by the CPU C API (c_kernels.cpp) and the CUDA
// one (src/cuda/c_cuda.cpp).
#pragma once

#include "circlerope/c_kernels.h"
#include "circlerope/detail/fail.h"
#include "circlerope/rotary.h"

namespace circlerope::detail {

static_assert(static_cast<int>(FrequencyLayout::chunked) == CRP_LAYOUT_CHUNKED &&
                  static_cast<int>(FrequencyLayout::interleaved) == CRP_LAYOUT_INTERLEAVED &&
                  static_cast<int>(FrequencyLayout::single) == CRP_LAYOUT_SINGLE &&
                  static_cast<int>(DType::float32) == CRP_DTYPE_FLOAT32 &&
                  static_cast<int>(DType::bfloat16) == CRP_DTYPE_BFLOAT16 &&
                  static_cast<int>(DType::float16) == CRP_DTYPE_FLOAT16 &&
                  static_cast<int>(Pairing::neox) == CRP_PAIRING_NEOX &&
                  static_cast<int>(Pairing::gptj) == CRP_PAIRING_GPTJ &&
                  static_cast<int>(Direction::forward) == CRP_FORWARD &&
                  static_cast<int>(Direction::backward) == CRP_BACKWARD,
              "the C enums are cast to the C++ ones");

// `name` parts are only formatted into the message when the value is bad.
template <typename E, typename... Name>
E checked_enum(int value, int count, const Name&... name) {
  if (value < 0 || value >= count) fail(name..., " ", value, " is not one of 0..", count - 1);
  return static_cast<E>(value);
}

inline HeadTensor to_cpp(const crp_head_tensor& t, const char* what, int index) {
  HeadTensor out;
  out.data = t.data;
  out.dtype = checked_enum<DType>(t.dtype, 3, what, "[", index, "].dtype");
  for (int i = 0; i < 4; ++i) {
    out.shape[static_cast<std::size_t>(i)] = t.shape[i];
    out.strides[static_cast<std::size_t>(i)] = t.strides[i];
  }
  return out;
}

// config must not be NULL.
inline RotaryConfig to_cpp(const crp_rotary_config& config) {
  RotaryConfig c;
  c.theta = config.theta;
  c.rotary_dim = config.rotary_dim;
  c.layout = checked_enum<FrequencyLayout>(config.layout, 3, "layout");
  c.sections = {config.sections[0], config.sections[1], config.sections[2]};
  return c;
}

}  // namespace circlerope::detail
