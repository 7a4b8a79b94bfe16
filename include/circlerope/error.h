// circlerope — the one error type the C++ API throws.
#pragma once

#include <stdexcept>
#include <string>

namespace circlerope {

// Thrown for any invalid input (docs/spec.md §1 "Errors"). The message is one line that
// names the offending value and where it is, e.g.
//   "image 2 of row 0: h=27 is not divisible by spatial_merge_size=2".
// The library never prints and never aborts; front ends turn this into an exit
// code (CLI), a status code (C API) or a Python exception.
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& message) : std::invalid_argument(message) {}
};

}  // namespace circlerope
