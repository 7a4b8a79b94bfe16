/* The kernels' C API from C11: a table from Circle-RoPE positions made through the C API,
 * fp32 values checked against cos/sin computed here, forward then backward returning the
 * input, bf16 in place, GQA in one call, and every argument error with its message.
 * A plain main(): prints every failed check and returns nonzero if any failed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "circlerope/c_api.h"
#include "circlerope/c_kernels.h"

static int failures = 0;
static int checks = 0;

#include "c_check.h"


enum { S = 7, HQ = 3, HK = 1, D = 16 };
/* fp32 math with float32 table entries: well under 1e-5 relative for values ~1 */
#define TOL 2e-6

static crp_head_tensor bshd(void* data, int dtype, int64_t heads) {
  crp_head_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape[0] = 1, t.shape[1] = S, t.shape[2] = heads, t.shape[3] = D;
  t.strides[0] = S * heads * D, t.strides[1] = heads * D, t.strides[2] = D, t.strides[3] = 1;
  return t;
}

static uint16_t to_bf16(float f) { /* truncation is enough for inputs */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

int main(void) {
  char err[256];
  /* positions: text:2, image 2x2 (merged), text:1 under circle, through the C API */
  const int64_t ids[S] = {5, 151652, 151655, 151655, 151655, 151655, 151653};
  const int64_t grid[3] = {1, 4, 4};
  crp_rope_index_input in;
  memset(&in, 0, sizeof in);
  in.input_ids = ids, in.batch = 1, in.seq_len = S, in.image_grid_thw = grid, in.n_images = 1;
  crp_vision_config vision;
  crp_vision_config_default(&vision);
  crp_circle_config circle;
  crp_circle_config_default(&circle);
  float pos[3 * S], deltas[1];
  CHECK_MSG(crp_rope_index(&in, &vision, CRP_SCHEME_CIRCLE, &circle, pos, deltas, err, sizeof err) == CRP_OK, err);
  float pos2[3 * S]; /* pos is spoiled by an error test below */
  memcpy(pos2, pos, sizeof pos);

  crp_rotary_config config;
  crp_rotary_config_default(&config);
  CHECK(config.theta == 1e6 && config.rotary_dim == 128 && config.sections[0] == 16);
  config.theta = 10000.0, config.rotary_dim = D, config.layout = CRP_LAYOUT_CHUNKED;
  config.sections[0] = 2, config.sections[1] = 3, config.sections[2] = 3;
  crp_rotary_table* table = NULL;
  CHECK_MSG(crp_rotary_table_create(&config, pos, 1, S, 0, &table, err, sizeof err) == CRP_OK, err);
  CHECK(table != NULL);

  /* fp32 q (3 heads) and k (1 head) out of place, in one call, against values computed here */
  float q[S * HQ * D], k[S * HK * D], q_out[S * HQ * D], k_out[S * HK * D], back[S * HQ * D];
  for (int i = 0; i < S * HQ * D; ++i) q[i] = (float)sin(0.37 * i + 1.0);
  for (int i = 0; i < S * HK * D; ++i) k[i] = (float)cos(0.11 * i);
  crp_head_tensor ins[2] = {bshd(q, CRP_DTYPE_FLOAT32, HQ), bshd(k, CRP_DTYPE_FLOAT32, HK)};
  crp_head_tensor outs[2] = {bshd(q_out, CRP_DTYPE_FLOAT32, HQ), bshd(k_out, CRP_DTYPE_FLOAT32, HK)};
  CHECK_MSG(crp_rotate(table, ins, outs, 2, CRP_PAIRING_NEOX, CRP_FORWARD, 0, err, sizeof err) == CRP_OK, err);
  double worst = 0;
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < D / 2; ++i) {
        const int axis = i < 2 ? 0 : (i < 5 ? 1 : 2);
        const double phi = pos[axis * S + s] * pow(10000.0, -2.0 * i / D);
        const float* x = q + (s * HQ + h) * D;
        const float* y = q_out + (s * HQ + h) * D;
        const double y0 = x[i] * cos(phi) - x[i + D / 2] * sin(phi);
        const double y1 = x[i + D / 2] * cos(phi) + x[i] * sin(phi);
        worst = fmax(worst, fmax(fabs(y[i] - y0), fabs(y[i + D / 2] - y1)));
      }
  CHECK(worst < TOL);
  /* backward of the forward returns the input */
  crp_head_tensor qo = outs[0], qb = bshd(back, CRP_DTYPE_FLOAT32, HQ);
  CHECK_MSG(crp_rotate(table, &qo, &qb, 1, CRP_PAIRING_NEOX, CRP_BACKWARD, 1, err, sizeof err) == CRP_OK, err);
  worst = 0;
  for (int i = 0; i < S * HQ * D; ++i) worst = fmax(worst, fabs(back[i] - q[i]));
  CHECK(worst < TOL);

  /* bf16 in place, gptj: close to the fp32 result computed the same way */
  uint16_t qb16[S * HQ * D];
  float q32[S * HQ * D], q32_out[S * HQ * D];
  for (int i = 0; i < S * HQ * D; ++i) qb16[i] = to_bf16(q[i]), q32[i] = from_bf16(qb16[i]);
  crp_head_tensor t16 = bshd(qb16, CRP_DTYPE_BFLOAT16, HQ), t32 = bshd(q32, CRP_DTYPE_FLOAT32, HQ),
                  t32o = bshd(q32_out, CRP_DTYPE_FLOAT32, HQ);
  CHECK_MSG(crp_rotate(table, &t16, &t16, 1, CRP_PAIRING_GPTJ, CRP_FORWARD, 0, err, sizeof err) == CRP_OK, err);
  CHECK_MSG(crp_rotate(table, &t32, &t32o, 1, CRP_PAIRING_GPTJ, CRP_FORWARD, 0, err, sizeof err) == CRP_OK, err);
  worst = 0;
  for (int i = 0; i < S * HQ * D; ++i) worst = fmax(worst, fabs(from_bf16(qb16[i]) - q32_out[i]));
  CHECK(worst <= 1.0 / 128); /* one bf16 rounding of values below 2 */

  /* errors: each names the offending value */
  CHECK(crp_rotate(table, ins, outs, 2, 2, CRP_FORWARD, 0, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "pairing 2 is not one of 0..1") != NULL, err);
  CHECK(crp_rotate(table, ins, outs, 2, CRP_PAIRING_NEOX, -1, 0, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "direction -1") != NULL, err);
  crp_head_tensor bad = ins[1];
  bad.dtype = 7;
  CHECK(crp_rotate(table, &bad, &bad, 1, 0, 0, 0, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "in[0].dtype 7 is not one of 0..2") != NULL, err);
  bad = ins[1];
  bad.shape[1] = S + 1;
  CHECK(crp_rotate(table, &bad, &bad, 1, 0, 0, 0, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "the table was built for batch 1 and seq 7") != NULL, err);
  CHECK(crp_rotate(NULL, ins, outs, 2, 0, 0, 0, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "table is NULL") != NULL, err);
  CHECK(crp_rotate(table, NULL, NULL, 1, 0, 0, 0, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_rotate(table, NULL, NULL, 0, 0, 0, 0, err, sizeof err) == CRP_OK);
  crp_rotary_table* other = (crp_rotary_table*)&other;
  config.layout = 5;
  CHECK(crp_rotary_table_create(&config, pos, 1, S, 0, &other, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "layout 5 is not one of 0..2") != NULL, err);
  CHECK(other == NULL); /* cleared on failure */
  config.layout = CRP_LAYOUT_CHUNKED, config.rotary_dim = 15;
  CHECK(crp_rotary_table_create(&config, pos, 1, S, 0, &other, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "rotary dim must be even") != NULL, err);
  config.rotary_dim = D;
  pos[3] = NAN;
  CHECK(crp_rotary_table_create(&config, pos, 1, S, 0, &other, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "positions must be finite") != NULL, err);
  CHECK(crp_rotary_table_create(&config, pos, 1, S, 0, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_rotary_table_create(NULL, pos, 1, S, 0, &other, err, sizeof err) == CRP_INVALID_ARGUMENT);

  /* Sections whose sum wraps in int (2147483647 + 2147483647 + 66 == 64 for rotary dim 128)
   * are refused; accepted, every frequency would read the temporal axis. */
  crp_rotary_config wrap;
  crp_rotary_config_default(&wrap);
  wrap.sections[0] = 2147483647, wrap.sections[1] = 2147483647, wrap.sections[2] = 66;
  other = NULL;
  CHECK(crp_rotary_table_create(&wrap, pos, 1, S, 0, &other, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "[2147483647, 2147483647, 66]") != NULL, err);
  CHECK(other == NULL);
  /* the same values from text, with the grammar every front end shares */
  crp_rotary_config_default(&wrap);
  CHECK_MSG(crp_rotary_config_set(&wrap, "sections", "2147483647,2147483647,66", err, sizeof err) == CRP_OK, err);
  CHECK(crp_rotary_table_create(&wrap, pos, 1, S, 0, &other, err, sizeof err) == CRP_INVALID_ARGUMENT);
  crp_rotary_config_default(&wrap);
  CHECK(crp_rotary_config_set(&wrap, "sections", "2147483648,0,64", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_rotary_config_set(&wrap, "theta", "0x1p20", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "theta must be a decimal number (got '0x1p20')") != NULL, err);
  CHECK(crp_rotary_config_set(&wrap, "layout", "interleaved", err, sizeof err) == CRP_OK);
  CHECK(wrap.layout == CRP_LAYOUT_INTERLEAVED);
  CHECK(crp_rotary_config_set(&wrap, "sections", "24,20,20", err, sizeof err) == CRP_OK);
  CHECK(wrap.sections[0] == 24 && wrap.sections[1] == 20 && wrap.sections[2] == 20);

  /* out[1] = out[0] + 1 float shares bytes with out[0] although the data pointers differ: the
   * byte sets are compared, so it is refused (a pointer comparison would let it through and
   * 511 of 512 results would be wrong). */
  {
    static float over[S * HQ * D + 1];
    crp_head_tensor outs2[2] = {bshd(over, CRP_DTYPE_FLOAT32, HQ), bshd(over + 1, CRP_DTYPE_FLOAT32, HQ)};
    crp_head_tensor ins2[2] = {bshd(q, CRP_DTYPE_FLOAT32, HQ), bshd(q, CRP_DTYPE_FLOAT32, HQ)};
    CHECK(crp_rotate(table, ins2, outs2, 2, CRP_PAIRING_NEOX, CRP_FORWARD, 0, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "rotate target 1: out shares memory with target 0's out") != NULL, err);
    int untouched = 1;
    for (int i = 0; i < S * HQ * D + 1; ++i) untouched = untouched && over[i] == 0.0f;
    CHECK(untouched);
  }

  /* Thread counts above CRP_MAX_THREADS are refused (libgomp segfaults at 100000 and exits at
   * INT_MAX). A table of 1024 tokens is large enough to be built in parallel. */
  {
    enum { T = 1024 };
    static float many[3 * T];
    for (int i = 0; i < 3 * T; ++i) many[i] = (float)(i % T);
    crp_rotary_config big;
    crp_rotary_config_default(&big);
    static const int bad_threads[] = {CRP_MAX_THREADS + 1, 100000, 2147483647, -1};
    for (size_t i = 0; i < sizeof bad_threads / sizeof *bad_threads; ++i) {
      crp_rotary_table* t = NULL;
      CHECK(crp_rotary_table_create(&big, many, 1, T, bad_threads[i], &t, err, sizeof err) == CRP_INVALID_ARGUMENT);
      CHECK_MSG(strstr(err, "threads must be in [0, 1024]") != NULL, err);
      CHECK(t == NULL);
      CHECK(crp_rotate(table, ins, outs, 2, CRP_PAIRING_NEOX, CRP_FORWARD, bad_threads[i], err, sizeof err) ==
            CRP_INVALID_ARGUMENT);
      CHECK_MSG(strstr(err, "threads must be in [0, 1024]") != NULL, err);
    }
    crp_rotary_table* t = NULL;
    CHECK_MSG(crp_rotary_table_create(&big, many, 1, T, CRP_MAX_THREADS, &t, err, sizeof err) == CRP_OK, err);
    crp_rotary_table_destroy(t);
  }

  /* What a GPU engine needs: the table's values read back, computed into its own memory, and
   * a rotation with values it holds; the code path forced through crp_rotate_params. */
  {
    int64_t tb = -1, ts = -1;
    int tr = -1;
    const float* values = NULL;
    CHECK(crp_rotary_table_shape(table, &tb, &ts, &tr, err, sizeof err) == CRP_OK);
    CHECK(tb == 1 && ts == S && tr == D);
    CHECK(crp_rotary_table_values(table, &values, err, sizeof err) == CRP_OK && values != NULL);
    /* cos then sin of token 3, frequency 1 (temporal axis: chunked [2, 3, 3]) */
    const double phi = pos2[0 * S + 3] * pow(10000.0, -2.0 * 1 / D);
    CHECK(fabs(values[3 * D + 1] - cos(phi)) < 1e-6 && fabs(values[3 * D + D / 2 + 1] - sin(phi)) < 1e-6);
    float mine[S * D];
    for (int i = 0; i < S * D; ++i) mine[i] = NAN;
    CHECK_MSG(crp_rotary_table_compute(&config, pos2, 1, S, 0, CRP_ISA_AUTOMATIC, mine, S * D, err, sizeof err) == CRP_OK, err);
    CHECK(memcmp(mine, values, sizeof mine) == 0);
    CHECK(crp_rotary_table_compute(&config, pos2, 1, S, 0, CRP_ISA_AUTOMATIC, mine, S * D - 1, err, sizeof err) ==
          CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "expected batch 1 x seq_len 7 x rotary_dim 16") != NULL, err);
    CHECK(crp_rotary_table_compute(&config, pos2, 1, S, 0, 9, mine, S * D, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "isa 9 is not one of 0..4") != NULL, err);

    crp_rotate_params params;
    CHECK(crp_rotate_params_default(&params) == CRP_OK);
    CHECK(params.pairing == CRP_PAIRING_NEOX && params.direction == CRP_FORWARD && params.threads == 0 &&
          params.isa == CRP_ISA_AUTOMATIC);
    CHECK(crp_rotate_params_default(NULL) == CRP_INVALID_ARGUMENT);
    static float by_table[S * HQ * D], by_values[S * HQ * D];
    crp_head_tensor qin = bshd(q, CRP_DTYPE_FLOAT32, HQ), o1 = bshd(by_table, CRP_DTYPE_FLOAT32, HQ),
                    o2 = bshd(by_values, CRP_DTYPE_FLOAT32, HQ);
    /* fp32: avx2, avx512 and avx512bf16 do the same arithmetic, bit for bit */
    static const int paths[] = {CRP_ISA_PORTABLE, CRP_ISA_AVX2, CRP_ISA_AVX512, CRP_ISA_AVX512BF16};
    for (int p = 0; p < 4; ++p) {
      int available = -1;
      CHECK(crp_isa_available(paths[p], &available, err, sizeof err) == CRP_OK);
      params.isa = paths[p];
      if (!available) {
        CHECK(crp_rotate_ex(table, &qin, &o1, 1, &params, err, sizeof err) == CRP_INVALID_ARGUMENT);
        continue;
      }
      CHECK_MSG(crp_rotate_ex(table, &qin, &o1, 1, &params, err, sizeof err) == CRP_OK, err);
      CHECK_MSG(crp_rotate_values(mine, 1, S, D, &qin, &o2, 1, &params, err, sizeof err) == CRP_OK, err);
      CHECK(memcmp(by_table, by_values, sizeof by_table) == 0);
      CHECK(memcmp(by_table, q_out, sizeof by_table) == 0 || p == 0); /* the automatic path is the best one */
    }
    int available = -1;
    CHECK(crp_isa_available(CRP_ISA_AUTOMATIC, &available, err, sizeof err) == CRP_OK && available == 1);
    CHECK(crp_isa_available(CRP_ISA_PORTABLE, &available, err, sizeof err) == CRP_OK && available == 1);
    CHECK(crp_isa_available(5, &available, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK(crp_isa_available(-1, &available, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK(crp_rotate_values(NULL, 1, S, D, &qin, &o2, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "values are null") != NULL, err);
    CHECK(crp_rotate_values(mine, (int64_t)1 << 40, (int64_t)1 << 40, D, &qin, &o2, 1, NULL, err, sizeof err) ==
          CRP_INVALID_ARGUMENT);
    CHECK(crp_rotate_ex(table, &qin, &o1, 1, NULL, err, sizeof err) == CRP_OK); /* NULL params: the defaults */

    /* An output laid over an input of the same call is refused (it used to return CRP_OK with
     * most values wrong): the rotation's out over the table's values, a table computed over
     * its own positions. */
    static float arena[S * D + S * HQ * D]; /* the values, then room for an out after them */
    CHECK_MSG(crp_rotary_table_compute(&config, pos2, 1, S, 0, CRP_ISA_AUTOMATIC, arena, S * D, err, sizeof err) ==
                  CRP_OK, err);
    crp_head_tensor over_values = bshd(arena, CRP_DTYPE_FLOAT32, HQ);
    CHECK(crp_rotate_values(arena, 1, S, D, &qin, &over_values, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "rotate target 0: out shares memory with the table's values") != NULL, err);
    over_values.data = arena + S * D - 1; /* the last value only */
    CHECK(crp_rotate_values(arena, 1, S, D, &qin, &over_values, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    over_values.data = arena + S * D; /* just past them: fine */
    CHECK_MSG(crp_rotate_values(arena, 1, S, D, &qin, &over_values, 1, NULL, err, sizeof err) == CRP_OK, err);
    memcpy(arena, pos2, sizeof pos2);
    CHECK(crp_rotary_table_compute(&config, arena, 1, S, 0, CRP_ISA_AUTOMATIC, arena, S * D, err, sizeof err) ==
          CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "rotary table: the output values shares memory with the input position_ids") != NULL, err);
    CHECK(crp_rotary_table_compute(&config, arena + S * D - 1, 1, S, 0, CRP_ISA_AUTOMATIC, arena, S * D, err,
                                   sizeof err) == CRP_INVALID_ARGUMENT);

    /* A target count past the cap of 64 is refused before anything is sized by it (INT_MAX
     * targets used to be reserved first: CRP_INTERNAL_ERROR "out of memory"). */
    CHECK(crp_rotate_ex(table, &qin, &o1, 2147483647, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "at most 64 targets per call (got 2147483647)") != NULL, err);
    CHECK(crp_rotate_values(mine, 1, S, D, &qin, &o2, 65, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "at most 64 targets per call (got 65)") != NULL, err);
    CHECK(crp_rotary_config_default(NULL) == CRP_INVALID_ARGUMENT);
    CHECK(crp_rotary_table_destroy(NULL) == CRP_OK);
  }

  CHECK(crp_rotary_table_destroy(table) == CRP_OK);
  crp_rotary_table_destroy(NULL);
  if (failures) {
    fprintf(stderr, "c_kernels_test: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("c_kernels_test: all %d checks passed\n", checks);
  return 0;
}
