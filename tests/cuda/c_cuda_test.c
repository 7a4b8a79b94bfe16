/* The CUDA backend's C API from C11. Everywhere: argument errors with their messages and
 * status codes, before any device call; without a device, a valid call reports the CUDA
 * error as CRP_INTERNAL_ERROR. With a device: host memory refused by name, a table filled and
 * q rotated on the GPU, equal to the CPU C API's results within float32 rounding. Returns
 * nonzero on any failure. (tests/fuzz/fuzz_c_cuda.cpp compares every argument error with the
 * CPU API's.) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

static crp_rotary_params params(int pairing, int direction) {
  crp_rotary_params p;
  crp_rotary_params_default(&p);
  p.pairing = pairing, p.direction = direction;
  return p;
}

int main(void) {
  char err[256];
  crp_rotary_config config;
  crp_rotary_config_default(&config);
  config.rotary_dim = D;
  config.layout = CRP_LAYOUT_SINGLE;
  static float host[S * H * D];
  static float table_host[S * D];
  crp_table_view view = {table_host, 1, S, D};
  crp_head_tensor x = bshd(host, CRP_DTYPE_FLOAT32);
  crp_rotary_params p;

  /* argument errors: no device needed */
  CHECK(crp_cuda_rotate(NULL, &x, &x, 1, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "table is NULL") == 0, err);
  CHECK(crp_cuda_rotate(&view, &x, &x, -1, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "count -1 is negative") == 0, err);
  p = params(2, 0);
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, &p, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "pairing 2 is not one of 0..1") == 0, err);
  p = params(0, 7);
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, &p, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "direction 7 is not one of 0..1") == 0, err);
  p = params(0, 0);
  p.threads = CRP_MAX_THREADS + 1; /* checked as on the CPU, though unused */
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, &p, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "threads must be in [0, 1024] (got 1025; 0 = all cores)") == 0, err);
  p = params(0, 0);
  p.isa = 9;
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, &p, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "isa 9 is not one of 0..4") == 0, err);
  p.isa = CRP_ISA_PORTABLE; /* a CPU code path */
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, &p, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "isa 1 (portable) names a CPU code path; the CUDA functions take CRP_ISA_AUTOMATIC") == 0, err);
  CHECK(crp_cuda_table_fill(&config, host, &view, &p, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "isa 1 (portable) names a CPU code path; the CUDA functions take CRP_ISA_AUTOMATIC") == 0, err);
  crp_head_tensor bad = x;
  bad.dtype = 9;
  CHECK(crp_cuda_rotate(&view, &bad, &bad, 1, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "in[0].dtype 9 is not one of 0..2") == 0, err);
  bad = x;
  bad.shape[3] = 8;
  CHECK(crp_cuda_rotate(&view, &bad, &bad, 1, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "rotate target 0: head_dim 8 is smaller than the rotary dim 16") == 0, err);
  CHECK(crp_cuda_rotate(&view, NULL, NULL, 0, NULL, NULL, err, sizeof err) == CRP_OK); /* nothing to do */
  CHECK(crp_cuda_table_fill(NULL, host, &view, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "config is NULL") == 0, err);
  CHECK(crp_cuda_table_fill(&config, host, NULL, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "table is NULL") == 0, err);
  view.rotary_dim = D - 2;
  CHECK(crp_cuda_table_fill(&config, host, &view, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strcmp(err, "table: rotary_dim 14 is not the config's rotary_dim 16") == 0, err);
  view.rotary_dim = D;
  config.rotary_dim = 15;
  CHECK(crp_cuda_table_fill(&config, host, &view, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "rotary dim must be even") != NULL, err);
  config.rotary_dim = D;

  /* Regression: a count past the cap of 64 with one tensor read in[1..64] and out[1..64] past
   * the caller's arrays before the cap was checked, and INT_MAX reserved room for INT_MAX
   * targets first (CRP_INTERNAL_ERROR "out of memory"); crp_rotate refuses both as arguments.
   * Under ASan the first read past `one` would abort. */
  {
    crp_head_tensor* one = (crp_head_tensor*)malloc(sizeof *one);
    *one = x;
    CHECK(crp_cuda_rotate(&view, one, one, 65, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strcmp(err, "at most 64 targets per call (got 65)") == 0, err);
    CHECK(crp_cuda_rotate(&view, one, one, 2147483647, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strcmp(err, "at most 64 targets per call (got 2147483647)") == 0, err);
    char cpu_err[256];
    CHECK(crp_rotate(&view, one, one, 65, NULL, cpu_err, sizeof cpu_err) == CRP_INVALID_ARGUMENT);
    CHECK(crp_cuda_rotate(&view, one, one, 65, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strcmp(err, cpu_err) == 0, err); /* the CPU API's status and message */
    free(one);
  }

  int devices = -1;
  CHECK(crp_cuda_device_count(&devices) == CRP_OK && devices >= 0);
  CHECK(crp_cuda_device_count(NULL) == CRP_INVALID_ARGUMENT);
  if (devices == 0) {
    /* valid arguments: the missing device is a CUDA error, reported, not a crash */
    CHECK(crp_cuda_rotate(&view, &x, &x, 1, NULL, NULL, err, sizeof err) == CRP_INTERNAL_ERROR);
    CHECK_MSG(strncmp(err, "CUDA error", 10) == 0, err);
    CHECK(crp_cuda_table_fill(&config, host, &view, NULL, NULL, err, sizeof err) == CRP_INTERNAL_ERROR);
    CHECK_MSG(strncmp(err, "CUDA error", 10) == 0, err);
    printf("c_cuda: no CUDA device: %d argument checks passed, device part skipped (%d failures)\n", checks, failures);
    return failures ? 1 : 0;
  }

  /* host memory is refused by name */
  CHECK(crp_cuda_rotate(&view, &x, &x, 1, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "is not device memory") != NULL, err);
  CHECK(crp_cuda_table_fill(&config, host, &view, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "is not device memory") != NULL, err);

  /* a real table and rotation, against the CPU C API */
  float positions[3 * S];
  for (int i = 0; i < 3 * S; ++i) positions[i] = 0.75f * (float)i - 2.0f;
  for (int i = 0; i < S * H * D; ++i) host[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  float *pos_d = NULL, *table_d = NULL, *x_d = NULL;
  CHECK(cudaMalloc((void**)&pos_d, sizeof positions) == cudaSuccess);
  CHECK(cudaMalloc((void**)&table_d, sizeof table_host) == cudaSuccess);
  CHECK(cudaMalloc((void**)&x_d, sizeof host) == cudaSuccess);
  CHECK(cudaMemcpy(pos_d, positions, sizeof positions, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(x_d, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess);
  crp_table_view dview = {table_d, 1, S, D};
  CHECK_MSG(crp_cuda_table_fill(&config, pos_d, &dview, NULL, NULL, err, sizeof err) == CRP_OK, err);
  crp_head_tensor dx = bshd(x_d, CRP_DTYPE_FLOAT32);
  p = params(CRP_PAIRING_GPTJ, CRP_FORWARD);
  CHECK_MSG(crp_cuda_rotate(&dview, &dx, &dx, 1, &p, NULL, err, sizeof err) == CRP_OK, err);
  static float got[S * H * D], got_table[S * D];
  CHECK(cudaMemcpy(got, x_d, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(cudaMemcpy(got_table, table_d, sizeof got_table, cudaMemcpyDeviceToHost) == cudaSuccess);

  CHECK_MSG(crp_table_fill(&config, positions, &view, NULL, err, sizeof err) == CRP_OK, err);
  CHECK_MSG(crp_rotate(&view, &x, &x, 1, &p, err, sizeof err) == CRP_OK, err);
  double worst = 0, worst_table = 0;
  for (int i = 0; i < S * H * D; ++i) worst = fmax(worst, fabs((double)got[i] - host[i]));
  for (int i = 0; i < S * D; ++i) worst_table = fmax(worst_table, fabs((double)got_table[i] - table_host[i]));
  CHECK(worst < 1e-5);        /* |x| <= 1, fp32 math: a few 1e-7 */
  CHECK(worst_table < 1.2e-7); /* each a float rounding of cos/sin of the same double angle */
  printf("c_cuda: %d checks, %d failures; device vs CPU max |diff| %.3g (table %.3g)\n", checks, failures, worst,
         worst_table);
  cudaFree(pos_d);
  cudaFree(table_d);
  cudaFree(x_d);
  return failures ? 1 : 0;
}
