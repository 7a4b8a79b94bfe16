/* circlerope — C API for inference engines: Circle-RoPE positions without C++.
 *
 * Every function returns a status; on failure `error` (if not NULL) receives the
 * one-line message, truncated to error_size - 1 bytes. Nothing throws, aborts or
 * prints. Layout of outputs as in positions.h: position_ids [3][batch][seq_len]
 * (temporal, height, width), rope_deltas [batch]. Every array pointer that is not NULL must
 * be aligned to its element type (8 bytes for int64_t and double, 4 for float): a misaligned
 * one is CRP_INVALID_ARGUMENT, the message naming the argument and its address. */
#ifndef CIRCLEROPE_C_API_H
#define CIRCLEROPE_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of these headers; crp_version() gives the library's (they differ when an
 * engine runs against another build than it was compiled with). */
#define CRP_VERSION_MAJOR 0
#define CRP_VERSION_MINOR 1
#define CRP_VERSION_PATCH 0

/* Most tokens one call handles (batch x seq_len, and each of them; batch x count, and each of
 * them, when decoding): larger sizes return CRP_INVALID_ARGUMENT naming them (circlerope::kMaxTokens). */
#define CRP_MAX_TOKENS ((int64_t)1 << 24)

typedef enum crp_status { CRP_OK = 0, CRP_INVALID_ARGUMENT = 1, CRP_INTERNAL_ERROR = 2 } crp_status;

typedef enum crp_scheme {
  CRP_SCHEME_VANILLA = 0,
  CRP_SCHEME_UNORDERED = 1,
  CRP_SCHEME_MROPE = 2,
  CRP_SCHEME_CIRCLE = 3
} crp_scheme;

/* Circle-RoPE's move_to_positive (docs/spec.md, §3 step 7). */
typedef enum crp_positive_shift {
  CRP_POSITIVE_NONE = 0,   /* absent, false or 0 */
  CRP_POSITIVE_AUTO = 1,   /* "auto": shift by |min| */
  CRP_POSITIVE_OFFSET = 2  /* a number o: shift by |min| + o (o = 0 means no shift) */
} crp_positive_shift;

/* The Circle-RoPE options of circlerope/options.h (kCircleOptions, where each is declared);
 * radius takes three fields, move_to_positive two. tests/test_option_table.cpp checks that
 * this struct carries every option declared there. */
typedef struct crp_circle_config {
  int radius_auto;        /* 0: fixed `radius`; 1: radius_scale * |max coordinate| */
  double radius;
  double radius_scale;
  double alpha;
  int move_to_origin;
  double dff_rate;        /* 0 = off */
  int move_to_positive;   /* a crp_positive_shift value (an int: any value is checked) */
  double positive_offset;
} crp_circle_config;

/* The vision options of circlerope/options.h (kVisionOptions, where each is declared); time is
 * time_is_index. tests/test_option_table.cpp checks that this struct carries every option
 * declared there. */
typedef struct crp_vision_config {
  int64_t spatial_merge_size;
  double tokens_per_second;
  int64_t vision_start_token_id;
  int64_t image_token_id;
  int64_t video_token_id;
  int time_is_index;      /* 0: Qwen2.5-VL seconds; 1: Qwen2-VL frame index */
  int compat;             /* crp_compat: which transformers get_rope_index to reproduce */
} crp_vision_config;

/* Whose positions to reproduce exactly (positions.h, Compat; docs/guides/compat.md): padded
 * value, delta convention, frame times, text after a block. Numbered in release order. Under
 * CRP_COMPAT_HF_5_3_TO_5_5_3, CRP_COMPAT_HF_5_5_4, CRP_COMPAT_HF_5_6 and CRP_COMPAT_HF_5_18
 * rope_deltas count only a row's real tokens: decode the k-th new token of row b at (real
 * tokens of b) + k + rope_deltas[b]; every other mode decodes at cache position +
 * rope_deltas[b]. */
typedef enum crp_compat {
  CRP_COMPAT_NONE = 0,            /* this project (equals transformers 4.49-4.51 for M-RoPE) */
  CRP_COMPAT_HF_4_49 = 1,         /* transformers 4.49-4.51, Qwen's own code */
  CRP_COMPAT_HF_4_52 = 2,         /* transformers 4.52-5.1 */
  CRP_COMPAT_HF_5_2 = 3,          /* transformers 5.2 */
  CRP_COMPAT_HF_5_3_TO_5_5_3 = 4, /* transformers 5.3-5.5.3 */
  CRP_COMPAT_HF_5_5_4 = 5,        /* transformers 5.5.4 */
  CRP_COMPAT_HF_5_6 = 6,          /* transformers 5.6-5.17 */
  CRP_COMPAT_HF_5_18 = 7          /* transformers 5.18 and later */
} crp_compat;

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

/* The library's version (see CRP_VERSION_*); any pointer may be NULL. */
crp_status crp_version(int* major, int* minor, int* patch);

/* The paper's recommended setting (radius 10, alpha 0.5, move_to_origin). NULL:
 * CRP_INVALID_ARGUMENT. */
crp_status crp_circle_config_default(crp_circle_config* config);
/* Qwen2.5-VL's constants. NULL: CRP_INVALID_ARGUMENT. */
crp_status crp_vision_config_default(crp_vision_config* config);

/* One option from its text, read with the grammar every circlerope front end shares
 * (circlerope/options.h), for engines that read a model's config file; the keys are those of
 * kCircleOptions there, and method:
 *   radius            "10", "auto", "auto-2.5"
 *   alpha, dff_rate   a decimal number in [0, 1] ("0.5"); dff_rate also "false" / "true"
 *   move_to_origin    "true" / "false"
 *   move_to_positive  "false", "auto" or a decimal offset ("3")
 *   method            "circle"
 * Numbers are decimal only (no hex, inf, nan, spaces or '_'). On error the config is
 * unchanged and the message names the key and the value. */
crp_status crp_circle_config_set(crp_circle_config* config, const char* key, const char* value,
                                 char* error, size_t error_size);
/* The same for the vision options; the keys are those of kVisionOptions in
 * circlerope/options.h:
 *   spatial_merge_size, vision_start_token_id, image_token_id, video_token_id
 *                     a decimal integer ("2")
 *   tokens_per_second a decimal number ("2")
 *   time              "seconds" or "index"
 *   compat            "none", "hf-4.49", "hf-4.52", "hf-5.2", "hf-5.3-5.5.3", "hf-5.5.4",
 *                     "hf-5.6" (also read as "hf-5.3"), "hf-5.18" (crp_compat) */
crp_status crp_vision_config_set(crp_vision_config* config, const char* key, const char* value,
                                 char* error, size_t error_size);
/* "vanilla", "unordered", "mrope", "circle" -> a crp_scheme value. */
crp_status crp_scheme_parse(const char* text, int* scheme, char* error, size_t error_size);

/* `scheme` is a crp_scheme value, taken as int so that any value a caller
 * passes is a reported error rather than an invalid enum (undefined in C++). */
crp_status crp_rope_index(const crp_rope_index_input* input, const crp_vision_config* vision,
                          int scheme, const crp_circle_config* circle,
                          float* position_ids, float* rope_deltas, char* error, size_t error_size);

/* out [3][batch][count]: cache positions first .. first + count - 1 of every row. */
crp_status crp_decode_positions(const float* rope_deltas, int64_t batch, int64_t first_cache_position,
                                int64_t count, float* out, char* error, size_t error_size);

/* ---- AGE plans (docs/spec.md, §6): a geometry per layer ------------------------------
 * An engine computes positions (crp_rope_index) and a rotary table once per distinct
 * geometry g = 0 .. geometries - 1, with scheme crp_age_plan_geometry(g), and rotates layer l
 * with the table of geometry crp_age_plan_layer(l). Each geometry keeps its own rope_deltas
 * for decoding. */
typedef struct crp_age_plan crp_age_plan; /* opaque */

/* spec: "all", "lower", "upper", "alternate", "strategy_1".."strategy_4", or a pattern of
 * C/M/V/U letters repeated to `layers` (1..100000). *plan is NULL on failure. */
crp_status crp_age_plan_create(const char* spec, int64_t layers, crp_age_plan** plan, char* error,
                               size_t error_size);
crp_status crp_age_plan_destroy(crp_age_plan* plan); /* NULL is fine */
/* Number of layers and of distinct geometries; either pointer may be NULL. */
crp_status crp_age_plan_size(const crp_age_plan* plan, int* layers, int* geometries, char* error,
                             size_t error_size);
/* The crp_scheme of distinct geometry `geometry` (in order of first use). */
crp_status crp_age_plan_geometry(const crp_age_plan* plan, int geometry, int* scheme, char* error,
                                 size_t error_size);
/* The geometry (index) layer `layer` uses. */
crp_status crp_age_plan_layer(const crp_age_plan* plan, int layer, int* geometry, char* error,
                              size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* CIRCLEROPE_C_API_H */
