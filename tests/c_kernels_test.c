/* The kernels' C API from C11: a table filled from Circle-RoPE positions made through the C
 * API, its values and the fp32 rotation checked against cos/sin computed here, forward then
 * backward returning the input, bf16 in place, GQA in one call, every code path, and every
 * argument error with its message.
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

static crp_rotary_params params(int pairing, int direction, int threads) {
  crp_rotary_params p;
  crp_rotary_params_default(&p);
  p.pairing = pairing, p.direction = direction, p.threads = threads;
  return p;
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
  static float values[S * D];
  crp_table_view table = {values, 1, S, D};
  CHECK_MSG(crp_table_fill(&config, pos, &table, NULL, err, sizeof err) == CRP_OK, err);
  /* cos then sin of token 3, frequency 1 (temporal axis: chunked [2, 3, 3]) */
  {
    const double phi = pos[0 * S + 3] * pow(10000.0, -2.0 * 1 / D);
    CHECK(fabs(values[3 * D + 1] - cos(phi)) < 1e-6 && fabs(values[3 * D + D / 2 + 1] - sin(phi)) < 1e-6);
  }

  /* fp32 q (3 heads) and k (1 head) out of place, in one call, against values computed here */
  float q[S * HQ * D], k[S * HK * D], q_out[S * HQ * D], k_out[S * HK * D], back[S * HQ * D];
  for (int i = 0; i < S * HQ * D; ++i) q[i] = (float)sin(0.37 * i + 1.0);
  for (int i = 0; i < S * HK * D; ++i) k[i] = (float)cos(0.11 * i);
  crp_head_tensor ins[2] = {bshd(q, CRP_DTYPE_FLOAT32, HQ), bshd(k, CRP_DTYPE_FLOAT32, HK)};
  crp_head_tensor outs[2] = {bshd(q_out, CRP_DTYPE_FLOAT32, HQ), bshd(k_out, CRP_DTYPE_FLOAT32, HK)};
  crp_rotary_params neox = params(CRP_PAIRING_NEOX, CRP_FORWARD, 0);
  CHECK_MSG(crp_rotate(&table, ins, outs, 2, &neox, err, sizeof err) == CRP_OK, err);
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
  crp_rotary_params backward = params(CRP_PAIRING_NEOX, CRP_BACKWARD, 1);
  CHECK_MSG(crp_rotate(&table, &qo, &qb, 1, &backward, err, sizeof err) == CRP_OK, err);
  worst = 0;
  for (int i = 0; i < S * HQ * D; ++i) worst = fmax(worst, fabs(back[i] - q[i]));
  CHECK(worst < TOL);

  /* bf16 in place, gptj: close to the fp32 result computed the same way */
  uint16_t qb16[S * HQ * D];
  float q32[S * HQ * D], q32_out[S * HQ * D];
  for (int i = 0; i < S * HQ * D; ++i) qb16[i] = to_bf16(q[i]), q32[i] = from_bf16(qb16[i]);
  crp_head_tensor t16 = bshd(qb16, CRP_DTYPE_BFLOAT16, HQ), t32 = bshd(q32, CRP_DTYPE_FLOAT32, HQ),
                  t32o = bshd(q32_out, CRP_DTYPE_FLOAT32, HQ);
  crp_rotary_params gptj = params(CRP_PAIRING_GPTJ, CRP_FORWARD, 0);
  CHECK_MSG(crp_rotate(&table, &t16, &t16, 1, &gptj, err, sizeof err) == CRP_OK, err);
  CHECK_MSG(crp_rotate(&table, &t32, &t32o, 1, &gptj, err, sizeof err) == CRP_OK, err);
  worst = 0;
  for (int i = 0; i < S * HQ * D; ++i) worst = fmax(worst, fabs(from_bf16(qb16[i]) - q32_out[i]));
  CHECK(worst <= 1.0 / 128); /* one bf16 rounding of values below 2 */

  /* errors: each names the offending value */
  crp_rotary_params bad_params = params(2, CRP_FORWARD, 0);
  CHECK(crp_rotate(&table, ins, outs, 2, &bad_params, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "pairing 2 is not one of 0..1") != NULL, err);
  bad_params = params(CRP_PAIRING_NEOX, -1, 0);
  CHECK(crp_rotate(&table, ins, outs, 2, &bad_params, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "direction -1") != NULL, err);
  bad_params = params(CRP_PAIRING_NEOX, CRP_FORWARD, 0);
  bad_params.isa = 9;
  CHECK(crp_rotate(&table, ins, outs, 2, &bad_params, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "isa 9 is not one of 0..4") != NULL, err);
  crp_head_tensor bad = ins[1];
  bad.dtype = 7;
  CHECK(crp_rotate(&table, &bad, &bad, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "in[0].dtype 7 is not one of 0..2") != NULL, err);
  bad = ins[1];
  bad.shape[1] = S + 1;
  CHECK(crp_rotate(&table, &bad, &bad, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "the table was built for batch 1 and seq 7") != NULL, err);
  CHECK(crp_rotate(NULL, ins, outs, 2, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "table is NULL") != NULL, err);
  CHECK(crp_rotate(&table, NULL, NULL, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "in or out is NULL with count 1") != NULL, err);
  CHECK(crp_rotate(&table, NULL, NULL, 0, NULL, err, sizeof err) == CRP_OK);
  CHECK(crp_rotate(&table, ins, outs, -1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "count -1 is negative") != NULL, err);

  /* a refused fill writes nothing */
  static float spare[S * D];
  crp_table_view other = {spare, 1, S, D};
  for (int i = 0; i < S * D; ++i) spare[i] = -7.0f;
  config.layout = 5;
  CHECK(crp_table_fill(&config, pos, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "layout 5 is not one of 0..2") != NULL, err);
  config.layout = CRP_LAYOUT_CHUNKED, config.rotary_dim = 15;
  CHECK(crp_table_fill(&config, pos, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "rotary dim must be even") != NULL, err);
  config.rotary_dim = D;
  other.rotary_dim = D - 2; /* the view must be the config's */
  CHECK(crp_table_fill(&config, pos, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "table: rotary_dim 14 is not the config's rotary_dim 16") != NULL, err);
  other.rotary_dim = D;
  bad_params = params(CRP_PAIRING_NEOX, CRP_FORWARD, 0);
  bad_params.isa = 9;
  CHECK(crp_table_fill(&config, pos, &other, &bad_params, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "isa 9 is not one of 0..4") != NULL, err);
  pos[3] = NAN;
  CHECK(crp_table_fill(&config, pos, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "positions must be finite") != NULL, err);
  CHECK(crp_table_fill(&config, pos2, NULL, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "table is NULL") != NULL, err);
  CHECK(crp_table_fill(NULL, pos2, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "config is NULL") != NULL, err);
  CHECK(crp_table_fill(&config, NULL, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "position_ids is null") != NULL, err);
  other.values = NULL;
  CHECK(crp_table_fill(&config, pos2, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "the output is null") != NULL, err);
  other.values = spare;
  other.batch = -1;
  CHECK(crp_table_fill(&config, pos2, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "batch -1 and seq_len 7 must be >= 0") != NULL, err);
  other.batch = (int64_t)1 << 40, other.seq_len = (int64_t)1 << 40;
  CHECK(crp_table_fill(&config, pos2, &other, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "is more than 16777216 tokens") != NULL, err);
  other.batch = 1, other.seq_len = S;
  {
    int untouched = 1;
    for (int i = 0; i < S * D; ++i) untouched = untouched && spare[i] == -7.0f;
    CHECK(untouched);
  }

  /* Sections whose sum wraps in int (2147483647 + 2147483647 + 66 == 64 for rotary dim 128)
   * are refused; accepted, every frequency would read the temporal axis. */
  crp_rotary_config wrap;
  crp_rotary_config_default(&wrap);
  wrap.sections[0] = 2147483647, wrap.sections[1] = 2147483647, wrap.sections[2] = 66;
  static float wide[S * 128];
  crp_table_view wide_table = {wide, 1, S, 128};
  CHECK(crp_table_fill(&wrap, pos2, &wide_table, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(strstr(err, "[2147483647, 2147483647, 66]") != NULL, err);
  /* the same values from text, with the grammar every front end shares */
  crp_rotary_config_default(&wrap);
  CHECK_MSG(crp_rotary_config_set(&wrap, "sections", "2147483647,2147483647,66", err, sizeof err) == CRP_OK, err);
  CHECK(crp_table_fill(&wrap, pos2, &wide_table, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
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
    CHECK(crp_rotate(&table, ins2, outs2, 2, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "rotate target 1: out shares memory with target 0's out") != NULL, err);
    int untouched = 1;
    for (int i = 0; i < S * HQ * D + 1; ++i) untouched = untouched && over[i] == 0.0f;
    CHECK(untouched);
  }

  /* Thread counts above CRP_MAX_THREADS are refused (libgomp segfaults at 100000 and exits at
   * INT_MAX). A table of 1024 tokens is large enough to be built in parallel. */
  {
    enum { T = 1024 };
    static float many[3 * T], big_values[T * 128];
    for (int i = 0; i < 3 * T; ++i) many[i] = (float)(i % T);
    crp_rotary_config big;
    crp_rotary_config_default(&big);
    crp_table_view big_table = {big_values, 1, T, 128};
    static const int bad_threads[] = {CRP_MAX_THREADS + 1, 100000, 2147483647, -1};
    for (size_t i = 0; i < sizeof bad_threads / sizeof *bad_threads; ++i) {
      crp_rotary_params p = params(CRP_PAIRING_NEOX, CRP_FORWARD, bad_threads[i]);
      CHECK(crp_table_fill(&big, many, &big_table, &p, err, sizeof err) == CRP_INVALID_ARGUMENT);
      CHECK_MSG(strstr(err, "threads must be in [0, 1024]") != NULL, err);
      CHECK(big_values[0] == 0.0f); /* nothing written */
      CHECK(crp_rotate(&table, ins, outs, 2, &p, err, sizeof err) == CRP_INVALID_ARGUMENT);
      CHECK_MSG(strstr(err, "threads must be in [0, 1024]") != NULL, err);
    }
    crp_rotary_params p = params(CRP_PAIRING_NEOX, CRP_FORWARD, CRP_MAX_THREADS);
    CHECK_MSG(crp_table_fill(&big, many, &big_table, &p, err, sizeof err) == CRP_OK, err);
  }

  /* The code path forced through crp_rotary_params, for the fill and the rotation. */
  {
    crp_rotary_params p;
    CHECK(crp_rotary_params_default(&p) == CRP_OK);
    CHECK(p.pairing == CRP_PAIRING_NEOX && p.direction == CRP_FORWARD && p.threads == 0 && p.isa == CRP_ISA_AUTOMATIC);
    CHECK(crp_rotary_params_default(NULL) == CRP_INVALID_ARGUMENT);
    static float by_path[S * HQ * D], path_values[S * D];
    crp_head_tensor qin = bshd(q, CRP_DTYPE_FLOAT32, HQ), o1 = bshd(by_path, CRP_DTYPE_FLOAT32, HQ);
    crp_table_view path_table = {path_values, 1, S, D};
    /* fp32: avx2, avx512 and avx512bf16 do the same arithmetic, bit for bit */
    static const int paths[] = {CRP_ISA_PORTABLE, CRP_ISA_AVX2, CRP_ISA_AVX512, CRP_ISA_AVX512BF16};
    for (int i = 0; i < 4; ++i) {
      int available = -1;
      CHECK(crp_isa_available(paths[i], &available, err, sizeof err) == CRP_OK);
      p.isa = paths[i];
      if (!available) {
        CHECK(crp_rotate(&table, &qin, &o1, 1, &p, err, sizeof err) == CRP_INVALID_ARGUMENT);
        CHECK_MSG(strstr(err, "is not available") != NULL, err);
        CHECK(crp_table_fill(&config, pos2, &path_table, &p, err, sizeof err) == CRP_INVALID_ARGUMENT);
        CHECK_MSG(strstr(err, "is not available") != NULL, err);
        continue;
      }
      CHECK_MSG(crp_rotate(&table, &qin, &o1, 1, &p, err, sizeof err) == CRP_OK, err);
      CHECK(memcmp(by_path, q_out, sizeof by_path) == 0 || i == 0); /* the automatic path is the best one */
      /* every path's table: float cos/sin of the same double angles, within a float ulp */
      CHECK_MSG(crp_table_fill(&config, pos2, &path_table, &p, err, sizeof err) == CRP_OK, err);
      worst = 0;
      for (int j = 0; j < S * D; ++j) worst = fmax(worst, fabs(path_values[j] - values[j]));
      CHECK(worst <= 1.2e-7);
    }
    int available = -1;
    CHECK(crp_isa_available(CRP_ISA_AUTOMATIC, &available, err, sizeof err) == CRP_OK && available == 1);
    CHECK(crp_isa_available(CRP_ISA_PORTABLE, &available, err, sizeof err) == CRP_OK && available == 1);
    CHECK(crp_isa_available(5, &available, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK(crp_isa_available(-1, &available, err, sizeof err) == CRP_INVALID_ARGUMENT);
    crp_table_view no_values = {NULL, 1, S, D};
    CHECK(crp_rotate(&no_values, &qin, &o1, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "values are null") != NULL, err);
    crp_table_view huge = {values, (int64_t)1 << 40, (int64_t)1 << 40, D};
    CHECK(crp_rotate(&huge, &qin, &o1, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    crp_table_view misaligned = {(float*)((char*)values + 2), 1, S, D};
    CHECK(crp_rotate(&misaligned, &qin, &o1, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "are not aligned to 4 bytes") != NULL, err);
    CHECK(crp_table_fill(&config, pos2, &misaligned, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "the output") != NULL && strstr(err, "is not aligned to 4 bytes") != NULL, err);
    CHECK(crp_rotate(&table, &qin, &o1, 1, NULL, err, sizeof err) == CRP_OK); /* NULL params: the defaults */

    /* An output laid over an input of the same call is refused (it used to return CRP_OK with
     * most values wrong): the rotation's out over the table's values, a table filled over
     * its own positions. */
    static float arena[S * D + S * HQ * D]; /* the values, then room for an out after them */
    crp_table_view arena_table = {arena, 1, S, D};
    CHECK_MSG(crp_table_fill(&config, pos2, &arena_table, NULL, err, sizeof err) == CRP_OK, err);
    crp_head_tensor over_values = bshd(arena, CRP_DTYPE_FLOAT32, HQ);
    CHECK(crp_rotate(&arena_table, &qin, &over_values, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "rotate target 0: out shares memory with the table's values") != NULL, err);
    over_values.data = arena + S * D - 1; /* the last value only */
    CHECK(crp_rotate(&arena_table, &qin, &over_values, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    over_values.data = arena + S * D; /* just past them: fine */
    CHECK_MSG(crp_rotate(&arena_table, &qin, &over_values, 1, NULL, err, sizeof err) == CRP_OK, err);
    memcpy(arena, pos2, sizeof pos2);
    CHECK(crp_table_fill(&config, arena, &arena_table, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "rotary table: the output values shares memory with the input position_ids") != NULL, err);
    CHECK(crp_table_fill(&config, arena + S * D - 1, &arena_table, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);

    /* A target count past the cap of 64 is refused before in[] and out[] are read or anything
     * is sized by it (INT_MAX targets used to be reserved first: CRP_INTERNAL_ERROR "out of
     * memory"): one tensor with count 65 is not read past. */
    CHECK(crp_rotate(&table, &qin, &o1, 2147483647, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "at most 64 targets per call (got 2147483647)") != NULL, err);
    CHECK(crp_rotate(&table, &qin, &o1, 65, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "at most 64 targets per call (got 65)") != NULL, err);
    CHECK(crp_rotary_config_default(NULL) == CRP_INVALID_ARGUMENT);
  }

  if (failures) {
    fprintf(stderr, "c_kernels_test: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("c_kernels_test: all %d checks passed\n", checks);
  return 0;
}
