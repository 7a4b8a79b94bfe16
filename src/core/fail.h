// Internal: build the one-line message of a circlerope::Error.
#pragma once

#include <sstream>
#include <utility>

#include "circlerope/error.h"

namespace circlerope::detail {

template <typename... Args>
[[noreturn]] void fail(Args&&... parts) {
  std::ostringstream message;
  message.precision(10);
  (message << ... << std::forward<Args>(parts));
  throw Error(message.str());
}

}  // namespace circlerope::detail
