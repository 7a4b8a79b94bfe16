/* circlerope — C API of the CUDA kernels (cuda.h), beside c_kernels.h. Link circlerope::cuda.
 * Same conventions as c_api.h / c_kernels.h: every function returns a crp_status and writes a
 * one-line message into `error` (when not NULL); nothing throws, aborts or prints. No CUDA
 * header is needed: a stream is a cudaStream_t passed as void* (NULL: the legacy default
 * stream). All pointers below are device memory of the current device (cudaSetDevice);
 * kernels run asynchronously on `stream`.
 *
 *   float* table_d;  cudaMalloc(&table_d, batch * seq_len * 128 * sizeof(float));
 *   crp_rotary_config config;  crp_rotary_config_default(&config);
 *   crp_cuda_rotary_table_fill(&config, positions_d, batch, seq_len, table_d,
 *                              batch * seq_len * 128, stream, err, sizeof err);
 *   crp_table_view view = {table_d, batch, seq_len, 128};
 *   crp_head_tensor q = {q_d, CRP_DTYPE_BFLOAT16, {B, S, 16, 128}, {S*16*128, 16*128, 128, 1}};
 *   crp_cuda_rotate(&view, &q, &q, 1, CRP_PAIRING_NEOX, CRP_FORWARD, stream, err, sizeof err);
 *
 * Status: CRP_INVALID_ARGUMENT for anything wrong with the arguments (the CPU API's checks and
 * messages, plus "... is not device memory"); CRP_INTERNAL_ERROR with a message starting
 * "CUDA error" when the CUDA runtime fails (no device, no driver, a launch error). */
#ifndef CIRCLEROPE_C_CUDA_H
#define CIRCLEROPE_C_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "circlerope/c_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A table in device memory: per token (b, s), at values + (b * seq_len + s) * rotary_dim,
 * rotary_dim / 2 cos values then rotary_dim / 2 sin values (float32). */
typedef struct crp_table_view {
  const float* values;
  int64_t batch;
  int64_t seq_len;
  int rotary_dim; /* even, 2..1024 */
} crp_table_view;

/* Devices the CUDA runtime sees; 0 without device or driver. */
int crp_cuda_device_count(void);

/* values: exactly batch * seq_len * rotary_dim floats (value_count says how many it holds);
 * position_ids: float32 [3][batch][seq_len]. A non-finite position is not detected here (the
 * host does not read device memory): its token gets NaN entries. */
crp_status crp_cuda_rotary_table_fill(const crp_rotary_config* config, const float* position_ids,
                                      int64_t batch, int64_t seq_len, float* values,
                                      int64_t value_count, void* stream, char* error,
                                      size_t error_size);

/* Rotates `count` tensors as crp_rotate does: out[i] may be in[i] (in place) or must not
 * overlap it. pairing: crp_pairing; direction: crp_direction. */
crp_status crp_cuda_rotate(const crp_table_view* table, const crp_head_tensor* in,
                           const crp_head_tensor* out, int count, int pairing, int direction,
                           void* stream, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* CIRCLEROPE_C_CUDA_H */
