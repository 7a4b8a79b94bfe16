/* The CUDA backend's C API from C11. Everywhere: argument errors with their messages and
 * status codes, before any device call; without a device, a valid call reports the CUDA
 * error as CRP_INTERNAL_ERROR. With a device: a table filled and q/k rotated on the GPU,
 * equal to the CPU C API's result within float32 rounding. Returns nonzero on any failure. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "circlerope/c_cuda.h"
#include "circlerope/c_kernels.h"

static int failures = 0;
static int checks = 0;

#include "c_check.h"

enum { S = 5, H = 3, D = 16 };

static crp_head_tensor bshd(void* data, int dtype) {
  crp_head_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape[0] = 1, t.shape[1] = S, t.shape[2] = H, t.shape[3] = D;
  t.strides[0] = S * H * D, t.strides[1] = H * D, t.strides[2] = D, t.strides[3] = 1;
  return t;
}

int main(void) {
  char err[256];
  crp_rotary_config config;
  crp_rotary_config_default(&config);
  config.rotary_dim = D;
  config.layout = CRP_LAYOUT_SINGLE;
  static float host[S * H * D];
  float table_host[S * D];
  crp_table_view view = {table_host, 1, S, D};
  crp_head_tensor x = bshd(host, CRP_DTYPE_FLOAT32);

  /* argument errors: no device needed */
  CHECK(crp_cuda_rotate(NULL, &x, &x, 1, 0, 0, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "table is NULL") == 0, err);
  CHECK(crp_cuda_rotate(&view, &x, &x, -1, 0, 0, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "count -1 is negative") == 0, err);
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, 2, 0, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "pairing 2 is not one of 0..1") == 0, err);
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, 0, 7, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "direction 7 is not one of 0..1") == 0, err);
  crp_head_tensor bad = x;
  bad.dtype = 9;
  CHECK(crp_cuda_rotate(&view, &bad, &bad, 1, 0, 0, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "in[0].dtype 9 is not one of 0..2") == 0, err);
  bad = x;
  bad.shape[3] = 8;
  CHECK(crp_cuda_rotate(&view, &bad, &bad, 1, 0, 0, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "rotate target 0: head_dim 8 is smaller than the rotary dim 16") == 0, err);
  CHECK(crp_cuda_rotate(&view, NULL, NULL, 0, 0, 0, NULL, err, sizeof err) == CRP_OK); /* nothing to do */
  CHECK(crp_cuda_rotary_table_fill(NULL, host, 1, S, table_host, S * D, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "config is NULL") == 0, err);
  CHECK(crp_cuda_rotary_table_fill(&config, host, 1, S, table_host, S * D - 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "the output holds 79 floats, expected") != NULL, err);
  config.rotary_dim = 15;
  CHECK(crp_cuda_rotary_table_fill(&config, host, 1, S, table_host, S * D, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "rotary dim must be even") != NULL, err);
  config.rotary_dim = D;

  if (crp_cuda_device_count() == 0) {
    /* valid arguments: the missing device is a CUDA error, reported, not a crash */
    CHECK(crp_cuda_rotate(&view, &x, &x, 1, 0, 0, NULL, err, sizeof err) == CRP_INTERNAL_ERROR);
    CHECK_MSG(strncmp(err, "CUDA error", 10) == 0, err);
    CHECK(crp_cuda_rotary_table_fill(&config, host, 1, S, table_host, S * D, NULL, err, sizeof err) == CRP_INTERNAL_ERROR);
    CHECK_MSG(strncmp(err, "CUDA error", 10) == 0, err);
    printf("c_cuda: no CUDA device: %d argument checks passed, device part skipped (%d failures)\n", checks, failures);
    return failures ? 1 : 0;
  }

  /* host memory is refused by name */
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, 0, 0, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "is not device memory") != NULL, err);

  /* a real rotation, against the CPU C API */
  float positions[3 * S];
  for (int i = 0; i < 3 * S; ++i) positions[i] = 0.75f * (float)i - 2.0f;
  for (int i = 0; i < S * H * D; ++i) host[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  float *pos_d = NULL, *table_d = NULL, *x_d = NULL;
  CHECK(cudaMalloc((void**)&pos_d, sizeof positions) == cudaSuccess);
  CHECK(cudaMalloc((void**)&table_d, sizeof table_host) == cudaSuccess);
  CHECK(cudaMalloc((void**)&x_d, sizeof host) == cudaSuccess);
  CHECK(cudaMemcpy(pos_d, positions, sizeof positions, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(x_d, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK_MSG(crp_cuda_rotary_table_fill(&config, pos_d, 1, S, table_d, S * D, NULL, err, sizeof err) == CRP_OK, err);
  crp_table_view dview = {table_d, 1, S, D};
  crp_head_tensor dx = bshd(x_d, CRP_DTYPE_FLOAT32);
  CHECK_MSG(crp_cuda_rotate(&dview, &dx, &dx, 1, CRP_PAIRING_GPTJ, CRP_FORWARD, NULL, err, sizeof err) == CRP_OK, err);
  static float got[S * H * D];
  CHECK(cudaMemcpy(got, x_d, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);

  crp_rotary_table* cpu = NULL;
  CHECK_MSG(crp_rotary_table_create(&config, positions, 1, S, 1, &cpu, err, sizeof err) == CRP_OK, err);
  CHECK_MSG(crp_rotate(cpu, &x, &x, 1, CRP_PAIRING_GPTJ, CRP_FORWARD, 1, err, sizeof err) == CRP_OK, err);
  crp_rotary_table_destroy(cpu);
  double worst = 0;
  for (int i = 0; i < S * H * D; ++i) worst = fmax(worst, fabs((double)got[i] - host[i]));
  CHECK(worst < 1e-5); /* |x| <= 1, fp32 math: a few 1e-7 */
  printf("c_cuda: %d checks, %d failures; device vs CPU max |diff| %.3g\n", checks, failures, worst);
  cudaFree(pos_d);
  cudaFree(table_d);
  cudaFree(x_d);
  return failures ? 1 : 0;
}
