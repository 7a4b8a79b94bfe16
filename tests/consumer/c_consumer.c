/* Uses the installed C headers and libraries from C: the positions of a prompt with one image
 * under circle (crp_rope_index), their rotary table filled into this program's memory
 * (crp_table_fill), and one query head rotated forward, then back (crp_rotate). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <circlerope/c_api.h>
#include <circlerope/c_kernels.h>

enum { S = 7, D = 8 };

int main(void) {
  char err[256];
  /* text, vision start, a 4x4 image merged to 2x2, vision end */
  static const int64_t ids[S] = {5, 151652, 151655, 151655, 151655, 151655, 151653};
  static const int64_t grid[3] = {1, 4, 4};
  crp_rope_index_input in;
  memset(&in, 0, sizeof in);
  in.input_ids = ids, in.batch = 1, in.seq_len = S, in.image_grid_thw = grid, in.n_images = 1;
  crp_vision_config vision;
  crp_circle_config circle;
  crp_vision_config_default(&vision);
  crp_circle_config_default(&circle);
  float positions[3 * S], deltas[1];
  if (crp_rope_index(&in, &vision, CRP_SCHEME_CIRCLE, &circle, positions, deltas, err, sizeof err) != CRP_OK) {
    fprintf(stderr, "crp_rope_index: %s\n", err);
    return 1;
  }

  crp_rotary_config config;
  crp_rotary_config_default(&config);
  config.rotary_dim = D;
  config.sections[0] = 2, config.sections[1] = 1, config.sections[2] = 1;
  float values[S * D];
  const crp_table_view table = {values, 1, S, D};
  if (crp_table_fill(&config, positions, &table, NULL, err, sizeof err) != CRP_OK) {
    fprintf(stderr, "crp_table_fill: %s\n", err);
    return 1;
  }
  float q[S * D];
  for (int i = 0; i < S * D; ++i) q[i] = 1.0f;
  const crp_head_tensor x = {q, CRP_DTYPE_FLOAT32, {1, S, 1, D}, {S * D, D, D, 1}};
  crp_rotary_params params;
  crp_rotary_params_default(&params);
  if (crp_rotate(&table, &x, &x, 1, &params, err, sizeof err) != CRP_OK) {
    fprintf(stderr, "crp_rotate: %s\n", err);
    return 1;
  }
  params.direction = CRP_BACKWARD;
  if (crp_rotate(&table, &x, &x, 1, &params, err, sizeof err) != CRP_OK) {
    fprintf(stderr, "crp_rotate (backward): %s\n", err);
    return 1;
  }
  for (int i = 0; i < S * D; ++i)
    if (q[i] < 1.0f - 1e-5f || q[i] > 1.0f + 1e-5f) return 1;
  /* a refused call says why */
  params.pairing = 7;
  if (crp_rotate(&table, &x, &x, 1, &params, err, sizeof err) != CRP_INVALID_ARGUMENT ||
      strcmp(err, "pairing 7 is not one of 0..1") != 0)
    return 1;
  printf("c consumer ok: last position %.4f, rotation round trip exact to 1e-5\n", positions[S - 1]);
  return 0;
}
