/* An inference engine's use of circlerope's C API, end to end: from a prompt's token ids to
 * rotated q and k while decoding, for a model whose layers alternate Circle-RoPE and M-RoPE
 * (AGE), as docs/guides/serving.md describes.
 *
 *   1. read the model's circlerope settings (as an engine reads its config file): circle
 *      options by key and value, the AGE plan;
 *   2. prefill: positions of the prompt once per distinct geometry (crp_rope_index), a table
 *      per geometry (crp_table_fill), every layer rotates its q and k with its geometry's table
 *      (crp_rotate). Positions are float32 and fractional under Circle-RoPE: an engine must
 *      not keep them in an integer buffer;
 *   3. decode: the k-th generated token of a geometry sits at cache position S + k, its
 *      position on every axis is (S + k) + rope_delta of that geometry (crp_decode_positions):
 *      a float, one per geometry; its table is one row.
 *
 * It checks itself, so CI runs it (ctest c_engine_example): every decode step's positions equal
 * a full recompute of the prompt with the generated text appended, and the q rotated at that
 * step equals the same q rotated by the recomputed table's row. Exit code 0 when all hold.
 *
 *   cc engine_decode.c -I<prefix>/include -L<prefix>/lib -lcirclerope_kernels -lcirclerope -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "circlerope/c_api.h"
#include "circlerope/c_kernels.h"

#define LAYERS 4
#define HEADS_Q 2
#define HEADS_KV 1
#define HEAD_DIM 16 /* sections 2, 3, 3: rotary_dim 16 */
#define PROMPT 24
#define STEPS 3
#define MAX_GEOMETRIES 4

static char error[512];

static void check(crp_status s, const char* what) {
  if (s != CRP_OK) {
    fprintf(stderr, "%s: %s\n", what, error);
    exit(1);
  }
}

/* A row of Qwen2.5-VL ids: text, <|vision_start|>, a 4x4 patch grid merged 2x2 (4 image tokens),
 * <|vision_end|>, text, padded with text to `length`. */
static void prompt_ids(int64_t* ids, int64_t length) {
  const int64_t layout[] = {101, 102, 103, 151652, 151655, 151655, 151655, 151655, 151653, 104, 105};
  const int64_t n = (int64_t)(sizeof layout / sizeof layout[0]);
  for (int64_t i = 0; i < length; ++i) ids[i] = i < n ? layout[i] : 200 + i;
}

/* q or k of one token sequence: [1][seq][heads][HEAD_DIM], float32, filled with a pattern. */
static crp_head_tensor heads(float* data, int64_t seq, int64_t n_heads, int seed) {
  for (int64_t i = 0; i < seq * n_heads * HEAD_DIM; ++i) data[i] = (float)sin(0.37 * (double)(i + 1) * (seed + 1));
  crp_head_tensor t;
  t.data = data;
  t.dtype = CRP_DTYPE_FLOAT32;
  t.shape[0] = 1, t.shape[1] = seq, t.shape[2] = n_heads, t.shape[3] = HEAD_DIM;
  t.strides[0] = seq * n_heads * HEAD_DIM, t.strides[1] = n_heads * HEAD_DIM, t.strides[2] = HEAD_DIM, t.strides[3] = 1;
  return t;
}

int main(void) {
  /* 1. the model's settings */
  crp_vision_config vision;
  crp_circle_config circle;
  check(crp_vision_config_default(&vision), "vision");
  check(crp_circle_config_default(&circle), "circle");
  check(crp_circle_config_set(&circle, "radius", "auto", error, sizeof error), "radius");
  check(crp_circle_config_set(&circle, "alpha", "0.5", error, sizeof error), "alpha");
  crp_rotary_config rotary;
  check(crp_rotary_config_default(&rotary), "rotary");
  rotary.rotary_dim = HEAD_DIM, rotary.sections[0] = 2, rotary.sections[1] = 3, rotary.sections[2] = 3;
  crp_age_plan* plan = NULL;
  check(crp_age_plan_create("alternate", LAYERS, &plan, error, sizeof error), "plan");
  int geometries = 0;
  check(crp_age_plan_size(plan, NULL, &geometries, error, sizeof error), "plan size");
  if (geometries > MAX_GEOMETRIES) return 1;

  /* 2. prefill */
  int64_t ids[PROMPT + STEPS];
  prompt_ids(ids, PROMPT + STEPS);
  const int64_t grid[3] = {1, 4, 4};
  crp_rope_index_input in;
  memset(&in, 0, sizeof in);
  in.input_ids = ids, in.batch = 1, in.seq_len = PROMPT, in.image_grid_thw = grid, in.n_images = 1;
  float positions[MAX_GEOMETRIES][3 * PROMPT], deltas[MAX_GEOMETRIES];
  float tables[MAX_GEOMETRIES][PROMPT * HEAD_DIM];
  crp_rotary_params params;
  check(crp_rotary_params_default(&params), "params");
  for (int g = 0; g < geometries; ++g) {
    int scheme = 0;
    check(crp_age_plan_geometry(plan, g, &scheme, error, sizeof error), "geometry");
    check(crp_rope_index(&in, &vision, scheme, &circle, positions[g], &deltas[g], error, sizeof error), "rope_index");
    const crp_table_view view = {tables[g], 1, PROMPT, HEAD_DIM};
    check(crp_table_fill(&rotary, positions[g], &view, &params, error, sizeof error), "table_fill");
  }
  static float q[PROMPT * HEADS_Q * HEAD_DIM], k[PROMPT * HEADS_KV * HEAD_DIM];
  for (int layer = 0; layer < LAYERS; ++layer) {
    int g = 0;
    check(crp_age_plan_layer(plan, layer, &g, error, sizeof error), "layer");
    const crp_head_tensor qt = heads(q, PROMPT, HEADS_Q, layer), kt = heads(k, PROMPT, HEADS_KV, layer + 7);
    const crp_head_tensor in_t[2] = {qt, kt};
    const crp_table_view view = {tables[g], 1, PROMPT, HEAD_DIM};
    check(crp_rotate(&view, in_t, in_t, 2, &params, error, sizeof error), "rotate (prefill, in place)");
  }
  printf("prefill: %d tokens, %d geometries; rope_delta", PROMPT, geometries);
  for (int g = 0; g < geometries; ++g) printf(" %.4f", deltas[g]);
  printf("\n");

  /* 3. decode, checked against a full recompute of the prompt with the generated text */
  int failures = 0;
  for (int step = 0; step < STEPS; ++step) {
    const int64_t cache_position = PROMPT + step;
    for (int g = 0; g < geometries; ++g) {
      int scheme = 0;
      check(crp_age_plan_geometry(plan, g, &scheme, error, sizeof error), "geometry");
      float now[3], row[HEAD_DIM];
      check(crp_decode_positions(&deltas[g], 1, cache_position, 1, now, error, sizeof error), "decode");
      const crp_table_view one = {row, 1, 1, HEAD_DIM};
      check(crp_table_fill(&rotary, now, &one, &params, error, sizeof error), "table_fill (decode)");

      /* the full recompute: the prompt and every generated token so far, as one prompt */
      crp_rope_index_input all = in;
      all.seq_len = cache_position + 1;
      float full[3 * (PROMPT + STEPS)], full_delta;
      check(crp_rope_index(&all, &vision, scheme, &circle, full, &full_delta, error, sizeof error), "recompute");
      const int64_t n = cache_position + 1;
      for (int a = 0; a < 3; ++a)
        if (fabsf(full[a * n + cache_position] - now[a]) > 1e-4f * fmaxf(1.0f, fabsf(now[a]))) {
          fprintf(stderr, "step %d geometry %d axis %d: decode %.6f, recompute %.6f\n", step, g, a, now[a],
                  full[a * n + cache_position]);
          ++failures;
        }
      float full_table[(PROMPT + STEPS) * HEAD_DIM];
      const crp_table_view full_view = {full_table, 1, n, HEAD_DIM};
      check(crp_table_fill(&rotary, full, &full_view, &params, error, sizeof error), "table_fill (recompute)");

      /* the new token's q, rotated out of place by both tables */
      float qn[HEADS_Q * HEAD_DIM], by_decode[HEADS_Q * HEAD_DIM], by_full[HEADS_Q * HEAD_DIM];
      const crp_head_tensor src = heads(qn, 1, HEADS_Q, 100 + step);
      crp_head_tensor out1 = src, out2 = src;
      out1.data = by_decode, out2.data = by_full;
      check(crp_rotate(&one, &src, &out1, 1, &params, error, sizeof error), "rotate (decode)");
      const crp_table_view last = {full_table + (n - 1) * HEAD_DIM, 1, 1, HEAD_DIM};
      check(crp_rotate(&last, &src, &out2, 1, &params, error, sizeof error), "rotate (recompute)");
      for (int i = 0; i < HEADS_Q * HEAD_DIM; ++i)
        if (fabsf(by_decode[i] - by_full[i]) > 1e-5f) {
          fprintf(stderr, "step %d geometry %d: rotated q[%d] %.7f against %.7f\n", step, g, i, by_decode[i],
                  by_full[i]);
          ++failures;
          break;
        }
      if (g == 0) printf("decode step %d: geometry %d position %.4f\n", step, g, now[0]);
    }
  }
  crp_age_plan_destroy(plan);
  if (failures) {
    fprintf(stderr, "%d mismatches between cached decoding and a full recompute\n", failures);
    return 1;
  }
  printf("cached decoding equals a full recompute for every geometry and step\n");
  return 0;
}
