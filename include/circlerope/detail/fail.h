// circlerope — detail, not API: how the library builds the one-line message of a
// circlerope::Error. Public (installed) so that the kernels, the C APIs and future backends
// include only public headers (docs/design.md layering); no stability promise.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "circlerope/detail/quote.h"  // quoted(): user text inside a message
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
