// circlerope — detail, not API: the C APIs' one way of turning C++ exceptions into status
// codes and messages (c_api.h, c_kernels.h). Public (installed) so that both C APIs include
// only public headers; no stability promise.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>

#include "circlerope/c_api.h"
#include "circlerope/error.h"

namespace circlerope::detail {

inline void write_error(char* error, std::size_t size, const char* message) {
  if (!error || size == 0) return;
  const std::size_t n = std::min(size - 1, std::strlen(message));
  std::memcpy(error, message, n);
  error[n] = '\0';
}

template <typename F>
crp_status guarded(char* error, std::size_t size, F&& body) {
  try {
    body();
    write_error(error, size, "");
    return CRP_OK;
  } catch (const Error& e) {
    write_error(error, size, e.what());
    return CRP_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    write_error(error, size, "out of memory");
    return CRP_INTERNAL_ERROR;
  } catch (const std::exception& e) {
    write_error(error, size, e.what());
    return CRP_INTERNAL_ERROR;
  }
}

}  // namespace circlerope::detail
