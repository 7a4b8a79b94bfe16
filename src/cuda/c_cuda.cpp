// The CUDA backend's C API: the C arguments checked and converted by the CPU C API's code
// (src/cpu/c_convert.h), so that both refuse the same arguments with the same messages; then
// what only CUDA refuses (a CPU code path, host memory); exceptions turned into status codes
// (c_guard.h).
#include "circlerope/c_cuda.h"

#include "circlerope/detail/c_guard.h"
#include "circlerope/detail/fail.h"
#include "../cpu/c_convert.h"
#include "circlerope/cuda.h"

namespace {

using namespace circlerope;
using detail::fail;
using detail::guarded;

// The CUDA calls take params->isa CRP_ISA_AUTOMATIC only: the others name CPU code paths.
void require_automatic(Isa isa) {
  if (isa != Isa::automatic)
    fail("isa ", static_cast<int>(isa), " (", to_string(isa),
         ") names a CPU code path; the CUDA functions take CRP_ISA_AUTOMATIC");
}

}  // namespace

extern "C" {

crp_status crp_cuda_device_count(int* count) {
  if (!count) return CRP_INVALID_ARGUMENT;
  *count = cuda::device_count();
  return CRP_OK;
}

crp_status crp_cuda_table_fill(const crp_rotary_config* config, const float* position_ids,
                               const crp_table_view* table, const crp_rotary_params* params,
                               void* stream, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    const detail::TableFill f = detail::table_fill(config, table, params);
    require_automatic(f.params.isa);
    cuda::make_rotary_table_into(f.config, position_ids, f.batch, f.seq_len, f.values, stream);
  });
}

crp_status crp_cuda_rotate(const crp_table_view* table, const crp_head_tensor* in,
                           const crp_head_tensor* out, int count, const crp_rotary_params* params,
                           void* stream, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    const detail::RotateCall call = detail::rotate_call(table, in, out, count, params);
    require_automatic(call.params.isa);
    cuda::rotate(call.table, call.targets, call.params, stream);
  });
}

}  // extern "C"
