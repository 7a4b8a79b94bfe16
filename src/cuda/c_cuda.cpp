// The CUDA backend's C API: the C values checked and converted as in c_kernels.cpp
// (src/cpu/c_convert.h), exceptions turned into status codes (c_guard.h).
#include "circlerope/c_cuda.h"

#include <vector>

#include "circlerope/detail/c_guard.h"
#include "circlerope/detail/fail.h"
#include "../cpu/c_convert.h"
#include "circlerope/cuda.h"

namespace {

using namespace circlerope;
using detail::checked_enum;
using detail::fail;
using detail::guarded;
using detail::to_cpp;

}  // namespace

extern "C" {

int crp_cuda_device_count(void) { return circlerope::cuda::device_count(); }

crp_status crp_cuda_rotary_table_fill(const crp_rotary_config* config, const float* position_ids,
                                      int64_t batch, int64_t seq_len, float* values,
                                      int64_t value_count, void* stream, char* error,
                                      size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!config) fail("config is NULL");
    if (value_count < 0) fail("value_count ", value_count, " is negative");
    cuda::make_rotary_table_into(to_cpp(*config), position_ids, batch, seq_len,
                                 {values, static_cast<std::size_t>(value_count)}, stream);
  });
}

crp_status crp_cuda_rotate(const crp_table_view* table, const crp_head_tensor* in,
                           const crp_head_tensor* out, int count, int pairing, int direction,
                           void* stream, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!table) fail("table is NULL");
    if (count < 0) fail("count ", count, " is negative");
    if (count > 0 && (!in || !out)) fail("in or out is NULL with count ", count);
    RotaryParams params;
    params.pairing = checked_enum<Pairing>(pairing, 2, "pairing");
    params.direction = checked_enum<Direction>(direction, 2, "direction");
    std::vector<RotaryTarget> targets;
    targets.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) targets.push_back({to_cpp(in[i], "in", i), to_cpp(out[i], "out", i)});
    cuda::rotate({table->values, table->batch, table->seq_len, table->rotary_dim}, targets, params,
                 stream);
  });
}

}  // extern "C"
