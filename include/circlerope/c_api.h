/* circlerope — C API for inference engines: Circle-RoPE positions without C++.
 *
 * Every function returns a status; on failure `error` (if not NULL) receives the
 * one-line message, truncated to error_size - 1 bytes. Nothing throws, aborts or
 * prints. Layout of outputs as in positions.h: position_ids [3][batch][seq_len]
 * (temporal, height, width), rope_deltas [batch]. */
#ifndef CIRCLEROPE_C_API_H
#define CIRCLEROPE_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum crp_status { CRP_OK = 0, CRP_INVALID_ARGUMENT = 1, CRP_INTERNAL_ERROR = 2 } crp_status;

typedef enum crp_scheme {
  CRP_SCHEME_VANILLA = 0,
  CRP_SCHEME_UNORDERED = 1,
  CRP_SCHEME_MROPE = 2,
  CRP_SCHEME_CIRCLE = 3
} crp_scheme;

typedef struct crp_circle_config {
  int radius_auto;        /* 0: fixed `radius`; 1: radius_scale * |max coordinate| */
  double radius;
  double radius_scale;
  double alpha;
  int move_to_origin;
  double dff_rate;        /* 0 = off */
  int move_to_positive;   /* 0 none, 1 "auto", 2 offset (an offset of 0 is no shift) */
  double positive_offset;
} crp_circle_config;

typedef struct crp_vision_config {
  int64_t spatial_merge_size;
  double tokens_per_second;
  int64_t vision_start_token_id;
  int64_t image_token_id;
  int64_t video_token_id;
  int time_is_index;      /* 0: Qwen2.5-VL seconds; 1: Qwen2-VL frame index */
} crp_vision_config;

typedef struct crp_rope_index_input {
  const int64_t* input_ids;       /* [batch][seq_len] */
  int64_t batch;
  int64_t seq_len;
  const int64_t* attention_mask;  /* [batch][seq_len] or NULL */
  const int64_t* image_grid_thw;  /* [n_images][3] or NULL */
  int64_t n_images;
  const int64_t* video_grid_thw;  /* [n_videos][3] or NULL */
  int64_t n_videos;
  const double* second_per_grid_ts; /* [n_videos] or NULL (1.0 each) */
} crp_rope_index_input;

/* The paper's recommended setting (radius 10, alpha 0.5, move_to_origin). */
void crp_circle_config_default(crp_circle_config* config);
/* Qwen2.5-VL's constants. */
void crp_vision_config_default(crp_vision_config* config);

/* `scheme` is a crp_scheme value, taken as int so that any value a caller
 * passes is a reported error rather than an invalid enum (undefined in C++). */
crp_status crp_rope_index(const crp_rope_index_input* input, const crp_vision_config* vision,
                          int scheme, const crp_circle_config* circle,
                          float* position_ids, float* rope_deltas, char* error, size_t error_size);

/* out [3][batch][count]: cache positions first .. first + count - 1 of every row. */
crp_status crp_decode_positions(const float* rope_deltas, int64_t batch, int64_t first_cache_position,
                                int64_t count, float* out, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* CIRCLEROPE_C_API_H */
