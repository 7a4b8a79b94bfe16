// circlerope — detail, not API: the overlap rule of every call that writes into caller memory
// (rope_index_into, decode_positions_into, make_rotary_table_into, rotate's table). Public
// (installed) for the same reason as fail.h; no stability promise.
//
// An output must not share a byte with another output or with any input of the same call:
// the calls read their inputs while they write, so an output laid over an input is read
// back half rewritten (most values wrong, reported as success). Inputs may share memory with
// each other. Strided views (rotate's targets) are decided by src/cpu/overlap.h on the bytes
// they address; the arrays here are contiguous, so their byte ranges decide exactly.
// Only addresses are compared, never memory: the rule holds for device pointers too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "circlerope/detail/fail.h"

namespace circlerope::detail {

// `count` elements of `size` bytes from `data`; `name` says which argument it is.
struct Region {
  const void* data = nullptr;
  std::size_t count = 0;
  std::size_t size = 1;
  const char* name = "";
};

template <class T>
Region region(const T* data, std::size_t count, const char* name) {
  return {data, count, sizeof(T), name};
}

// Whether two regions share a byte (an empty region shares none). Distances, not ends, are
// compared, and a byte count that overflows saturates: no arithmetic here wraps.
inline bool regions_overlap(const Region& a, const Region& b) {
  if (a.count == 0 || b.count == 0 || a.data == nullptr || b.data == nullptr) return false;
  auto bytes = [](const Region& r) {
    std::size_t n = 0;
    return __builtin_mul_overflow(r.count, r.size, &n) ? SIZE_MAX : n;
  };
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data), b0 = reinterpret_cast<std::uintptr_t>(b.data);
  return a0 <= b0 ? b0 - a0 < bytes(a) : a0 - b0 < bytes(b);
}

// Throws Error "<call>: <output> shares memory with <other>" for the first output that
// overlaps a later output or any input.
inline void require_disjoint(const char* call, std::initializer_list<Region> outputs,
                             std::initializer_list<Region> inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    for (auto other = out + 1; other != outputs.end(); ++other)
      if (regions_overlap(*out, *other))
        fail(call, ": the output ", out->name, " shares memory with the output ", other->name,
             " (give each output its own buffer)");
    for (const Region& in : inputs)
      if (regions_overlap(*out, in))
        fail(call, ": the output ", out->name, " shares memory with the input ", in.name,
             " (it would be read after it is overwritten; give the output its own buffer)");
  }
}

}  // namespace circlerope::detail
