/* circlerope — C API of the CUDA kernels (cuda.h): the two calls of c_kernels.h's hot path on
 * device memory. Link circlerope::cuda. Same conventions as c_api.h / c_kernels.h: every
 * function returns a crp_status and writes a one-line message into `error` (when not NULL);
 * nothing throws, aborts or prints. No CUDA header is needed: a stream is a cudaStream_t passed
 * as void* (NULL: the legacy default stream). The pointers the calls take are device memory of
 * the current device (cudaSetDevice); kernels run asynchronously on `stream`.
 *
 *   crp_rotary_config config;  crp_rotary_config_default(&config);
 *   crp_table_view table = {NULL, batch, seq_len, 128};
 *   cudaMalloc((void**)&table.values, batch * seq_len * 128 * sizeof(float));
 *   crp_cuda_table_fill(&config, positions_d, &table, NULL, stream, err, sizeof err);
 *   crp_head_tensor q = {q_d, CRP_DTYPE_BFLOAT16, {B, S, 16, 128}, {S*16*128, 16*128, 128, 1}};
 *   crp_cuda_rotate(&table, &q, &q, 1, NULL, stream, err, sizeof err);
 *
 * crp_cuda_table_fill and crp_cuda_rotate take the parameters of crp_table_fill and crp_rotate,
 * plus the stream, and check them with the same checks and messages before any device call;
 * params->threads is checked and unused, and params->isa must be CRP_ISA_AUTOMATIC (the others
 * name CPU code paths). Then every pointer must be device memory of the current device ("... is
 * not device memory" otherwise). A non-finite position is not detected (the host does not read
 * device memory): its token gets NaN entries.
 *
 * Status: CRP_INVALID_ARGUMENT for anything wrong with the arguments; CRP_INTERNAL_ERROR with a
 * message starting "CUDA error" when the CUDA runtime fails (no device, no driver, a launch
 * error). */
#ifndef CIRCLEROPE_C_CUDA_H
#define CIRCLEROPE_C_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "circlerope/c_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Devices the CUDA runtime sees into *count; 0 without device or driver. NULL:
 * CRP_INVALID_ARGUMENT. */
crp_status crp_cuda_device_count(int* count);

/* crp_table_fill on device memory: position_ids and table->values on the device. */
crp_status crp_cuda_table_fill(const crp_rotary_config* config, const float* position_ids,
                               const crp_table_view* table, const crp_rotary_params* params,
                               void* stream, char* error, size_t error_size);

/* crp_rotate on device memory: table->values and every tensor's data on the device. */
crp_status crp_cuda_rotate(const crp_table_view* table, const crp_head_tensor* in,
                           const crp_head_tensor* out, int count, const crp_rotary_params* params,
                           void* stream, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* CIRCLEROPE_C_CUDA_H */
