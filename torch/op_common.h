// Internal to the PyTorch operators (ops.cpp, and ops_cuda.cpp in CUDA builds): what both
// devices' kernels read from their arguments the same way.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "circlerope/options.h"
#include "circlerope/rotary.h"

namespace circlerope::torch_ops {

inline std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// The rotary options of rotary_table, read with the grammar every front end shares.
inline RotaryConfig rotary_config_of(std::int64_t rotary_dim, const std::vector<std::int64_t>& sections,
                                     double theta, const std::string& layout) {
  RotaryConfig config;
  set_rotary_option(config, "rotary_dim", OptionValue::integer(rotary_dim), "rotary_dim");
  set_rotary_option(config, "sections", OptionValue::integers(sections), "sections");
  set_rotary_option(config, "theta", OptionValue::number(theta), "theta");
  set_rotary_option(config, "layout", OptionValue::string(layout), "layout");
  validate(config);
  return config;
}

}  // namespace circlerope::torch_ops
