/* The C API from C11 (no C++ in this translation unit): hand-checked positions,
 * status codes, error messages and their truncation, NULL arguments, decoding.
 * A plain main(): prints every failed check and returns nonzero if any failed.
 * The regression_* checks once aborted under -fsanitize=undefined or crashed. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "circlerope/c_api.h"

static int failures = 0;
static int checks = 0;

#include "c_check.h"


enum { kStart = 151652, kEnd = 151653, kImg = 151655, kVid = 151656 };

/* Circle-RoPE decoding goes through two float32 roundings of values ~10-20:
 * 4 * FLT_EPSILON * 32 bounds them. */
#define DECODE_TOL (4.0 * FLT_EPSILON * 32.0)

static void fill_nan(float* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = NAN;
}

static int contains(const char* haystack, const char* needle) { return strstr(haystack, needle) != NULL; }

/* Row 0: T S [2x2] E T          (image grid [1, 4, 4])
 * Row 1: P T S [1x2] E T T      (image grid [1, 2, 4], left padding) */
static const int64_t kIds[2 * 8] = {7, kStart, kImg, kImg, kImg, kImg, kEnd, 8,
                                    kImg, 9, kStart, kImg, kImg, kEnd, 10, 11};
static const int64_t kMask[2 * 8] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1};
static const int64_t kImages[2 * 3] = {1, 4, 4, 1, 2, 4};

/* An unmasked batch of `batch` rows of `seq_len` tokens without grids. */
static crp_rope_index_input text_batch(const int64_t* ids, int64_t batch, int64_t seq_len) {
  crp_rope_index_input in;
  memset(&in, 0, sizeof in);
  in.input_ids = ids;
  in.batch = batch;
  in.seq_len = seq_len;
  return in;
}

/* One row with one video: its grid [t, h, w] and seconds per grid (NULL: none). */
static crp_rope_index_input one_video_row(const int64_t* ids, int64_t seq_len, const int64_t* video,
                                          const double* secs) {
  crp_rope_index_input in = text_batch(ids, 1, seq_len);
  in.video_grid_thw = video;
  in.n_videos = 1;
  in.second_per_grid_ts = secs;
  return in;
}

static crp_rope_index_input small_batch(void) {
  crp_rope_index_input in = text_batch(kIds, 2, 8);
  in.attention_mask = kMask;
  in.image_grid_thw = kImages;
  in.n_images = 2;
  return in;
}

static void test_defaults(void) {
  crp_circle_config c;
  crp_vision_config v;
  crp_circle_config_default(&c);
  crp_vision_config_default(&v);
  CHECK(c.radius_auto == 0);
  CHECK(c.radius == 10.0);
  CHECK(c.alpha == 0.5);
  CHECK(c.move_to_origin == 1);
  CHECK(c.dff_rate == 0.0);
  CHECK(c.move_to_positive == 0);
  CHECK(v.spatial_merge_size == 2);
  CHECK(v.tokens_per_second == 2.0);
  CHECK(v.vision_start_token_id == kStart);
  CHECK(v.image_token_id == kImg);
  CHECK(v.video_token_id == kVid);
  CHECK(v.time_is_index == 0);
  CHECK(v.compat == CRP_COMPAT_NONE);
  CHECK(crp_circle_config_default(NULL) == CRP_INVALID_ARGUMENT); /* must not crash */
  CHECK(crp_vision_config_default(NULL) == CRP_INVALID_ARGUMENT);
}

static void test_mrope_hand_values(void) {
  const crp_rope_index_input in = small_batch();
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[3 * 2 * 8], deltas[2];
  char err[256] = "stale text";
  fill_nan(pos, 48);
  fill_nan(deltas, 2);
  const crp_status st = crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err);
  CHECK_MSG(st == CRP_OK, err);
  CHECK(err[0] == '\0'); /* success clears the message */
  /* [axis][row][token] */
  static const float want[3][2][8] = {
      {{0, 1, 2, 2, 2, 2, 4, 5}, {1, 0, 1, 2, 2, 4, 5, 6}},
      {{0, 1, 2, 2, 3, 3, 4, 5}, {1, 0, 1, 2, 2, 4, 5, 6}},
      {{0, 1, 2, 3, 2, 3, 4, 5}, {1, 0, 1, 2, 3, 4, 5, 6}},
  };
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 2; ++b)
      for (int s = 0; s < 8; ++s) {
        const float got = pos[(a * 2 + b) * 8 + s];
        if (got != want[a][b][s]) {
          ++failures;
          fprintf(stderr, "mrope axis %d row %d token %d: got %g, want %g\n", a, b, s, got, want[a][b][s]);
        }
        ++checks;
      }
  CHECK(deltas[0] == 6.0f - 8.0f);
  CHECK(deltas[1] == 7.0f - 8.0f);

  /* decoding continues at max + 1: 6 for row 0, 7 for row 1 */
  float dec[3 * 2 * 3];
  fill_nan(dec, 18);
  CHECK(crp_decode_positions(deltas, 2, 8, 3, dec, err, sizeof err) == CRP_OK);
  for (int a = 0; a < 3; ++a)
    for (int i = 0; i < 3; ++i) {
      CHECK(dec[(a * 2 + 0) * 3 + i] == 6.0f + (float)i);
      CHECK(dec[(a * 2 + 1) * 3 + i] == 7.0f + (float)i);
    }
}

static void test_vanilla_unordered_and_circle(void) {
  const crp_rope_index_input in = small_batch();
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[48], deltas[2];
  char err[256];
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_VANILLA, NULL, pos, deltas, err, sizeof err) == CRP_OK);
  for (int a = 0; a < 3; ++a) {
    for (int s = 0; s < 8; ++s) CHECK(pos[(a * 2 + 0) * 8 + s] == (float)s);
    CHECK(pos[(a * 2 + 1) * 8 + 0] == 1.0f);
    for (int s = 1; s < 8; ++s) CHECK(pos[(a * 2 + 1) * 8 + s] == (float)(s - 1));
  }
  CHECK(deltas[0] == 0.0f);
  CHECK(deltas[1] == -1.0f);

  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_UNORDERED, NULL, pos, deltas, err, sizeof err) == CRP_OK);
  /* row 0: T0 S1 [2 2 2 2] E3 T4 */
  static const float row0[8] = {0, 1, 2, 2, 2, 2, 3, 4};
  for (int a = 0; a < 3; ++a)
    for (int s = 0; s < 8; ++s) CHECK(pos[(a * 2 + 0) * 8 + s] == row0[s]);
  CHECK(deltas[0] == 5.0f - 8.0f);

  /* Circle-RoPE with the paper's setting: image tokens at distance 10 from the
   * anchor (2, 2, 2), in the plane orthogonal to (1, 1, 1); decoding continues
   * at max + 1. */
  crp_circle_config c;
  crp_circle_config_default(&c);
  fill_nan(pos, 48);
  CHECK_MSG(crp_rope_index(&in, &v, CRP_SCHEME_CIRCLE, &c, pos, deltas, err, sizeof err) == CRP_OK, err);
  float high = -INFINITY;
  for (int s = 2; s < 6; ++s) {
    const double dt = pos[(0 * 2 + 0) * 8 + s] - 2.0, dh = pos[(1 * 2 + 0) * 8 + s] - 2.0,
                 dw = pos[(2 * 2 + 0) * 8 + s] - 2.0;
    CHECK(fabs(sqrt(dt * dt + dh * dh + dw * dw) - 10.0) < 1e-4);
    CHECK(fabs(dt + dh + dw) < 1e-4);
  }
  for (int a = 0; a < 3; ++a)
    for (int s = 0; s < 8; ++s) {
      CHECK(isfinite(pos[(a * 2 + 0) * 8 + s]));
      if (pos[(a * 2 + 0) * 8 + s] > high) high = pos[(a * 2 + 0) * 8 + s];
    }
  float dec[3 * 2 * 1];
  CHECK(crp_decode_positions(deltas, 2, 8, 1, dec, err, sizeof err) == CRP_OK);
  for (int a = 0; a < 3; ++a) CHECK(fabs((double)dec[a * 2 + 0] - ((double)high + 1.0)) < DECODE_TOL);

  /* a bad circle config is reported */
  c.alpha = 2.0;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_CIRCLE, &c, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "alpha"), err);
  crp_circle_config_default(&c);
  c.move_to_positive = 5;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_CIRCLE, &c, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "move_to_positive"), err);
}

static void test_video_seconds_and_index_time(void) {
  /* S [video 4 x 1x1] T, s = 0.7, tokens_per_second 2: tau = 0, 1, 2, 4 */
  static const int64_t ids[6] = {kStart, kVid, kVid, kVid, kVid, 5};
  static const int64_t videos[3] = {4, 2, 2};
  static const double secs[1] = {0.7};
  crp_rope_index_input in = one_video_row(ids, 6, videos, secs);
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[18], deltas[1];
  char err[256];
  CHECK_MSG(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_OK, err);
  static const float t_seconds[6] = {0, 1, 2, 3, 5, 6};
  for (int s = 0; s < 6; ++s) CHECK(pos[s] == t_seconds[s]);
  for (int s = 1; s < 5; ++s) CHECK(pos[6 + s] == 1.0f && pos[12 + s] == 1.0f);
  CHECK(deltas[0] == 7.0f - 6.0f);
  v.time_is_index = 1;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_OK);
  static const float t_index[6] = {0, 1, 2, 3, 4, 5};
  for (int s = 0; s < 6; ++s) CHECK(pos[s] == t_index[s]);
  /* no seconds: 1.0 each -> tau = 0, 2, 4, 6 */
  v.time_is_index = 0;
  in.second_per_grid_ts = NULL;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_OK);
  static const float t_default[6] = {0, 1, 3, 5, 7, 8};
  for (int s = 0; s < 6; ++s) CHECK(pos[s] == t_default[s]);
}

/* The transformers behaviours through C. The video above with s = 0.7: 4.52 and
 * later truncate s to 0 before f * s * tps, so every frame has tau = 0 and the text after
 * the video continues at 2 + 1; under 5.3 the padded value is 0. */
static void test_compat_modes(void) {
  static const int64_t ids[6] = {kStart, kVid, kVid, kVid, kVid, 5};
  static const int64_t videos[3] = {4, 2, 2};
  static const double secs[1] = {0.7};
  crp_rope_index_input in = one_video_row(ids, 6, videos, secs);
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[18], deltas[1];
  char err[256];
  CHECK_MSG(crp_vision_config_set(&v, "compat", "hf-4.52", err, sizeof err) == CRP_OK, err);
  CHECK(v.compat == CRP_COMPAT_HF_4_52);
  CHECK_MSG(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_OK, err);
  static const float t_truncated[6] = {0, 1, 1, 1, 1, 2};
  for (int s = 0; s < 6; ++s) CHECK(pos[s] == t_truncated[s]);
  CHECK(deltas[0] == 3.0f - 6.0f);
  /* a left-padded row under 5.3: the pad gets 0, the delta counts the 5 real tokens */
  static const int64_t mask[6] = {0, 1, 1, 1, 1, 1};
  static const int64_t padded_ids[6] = {0, kStart, kVid, kVid, kVid, 5};
  static const int64_t three_frames[3] = {3, 2, 2};
  crp_rope_index_input p = one_video_row(padded_ids, 6, three_frames, NULL);
  p.attention_mask = mask;
  v.compat = CRP_COMPAT_HF_5_6;
  CHECK_MSG(crp_rope_index(&p, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_OK, err);
  /* tau = 0, 2, 4 with s = 1.0; the text after the video at start 1 + max(h, w)/m = 2 */
  static const float t_56[6] = {0, 0, 1, 3, 5, 2};
  for (int s = 0; s < 6; ++s) CHECK(pos[s] == t_56[s]);
  CHECK(deltas[0] == 5.0f + 1.0f - 5.0f);
  /* 5.2, numbered just below: the text after the video continues at the block's max + 1 and
   * the delta counts the padded row's 6 tokens */
  v.compat = CRP_COMPAT_HF_5_2;
  CHECK_MSG(crp_rope_index(&p, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_OK, err);
  static const float t_52[6] = {0, 0, 1, 3, 5, 6};
  for (int s = 0; s < 6; ++s) CHECK(pos[s] == t_52[s]);
  CHECK(deltas[0] == 6.0f + 1.0f - 6.0f);
  v.compat = 8;
  CHECK(crp_rope_index(&p, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "compat"), err);
  v.compat = -1;
  CHECK(crp_rope_index(&p, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "compat must be a crp_compat (0..7; got -1)"), err);
  v.compat = CRP_COMPAT_NONE;
  CHECK(crp_vision_config_set(&v, "compat", "hf-4.50", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "hf-4.50"), err);

  /* The modes are numbered in release order; every name reads as its value, "hf-5.3" as
   * hf-5.6's, and each value survives a round trip through the setter. */
  static const char* names[8] = {"none",         "hf-4.49",  "hf-4.52", "hf-5.2",
                                 "hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6",  "hf-5.18"};
  static const int values[8] = {CRP_COMPAT_NONE,     CRP_COMPAT_HF_4_49, CRP_COMPAT_HF_4_52,
                                CRP_COMPAT_HF_5_2,   CRP_COMPAT_HF_5_3_TO_5_5_3, CRP_COMPAT_HF_5_5_4,
                                CRP_COMPAT_HF_5_6,   CRP_COMPAT_HF_5_18};
  for (int i = 0; i < 8; ++i) {
    CHECK(values[i] == i);
    crp_vision_config_default(&v);
    CHECK_MSG(crp_vision_config_set(&v, "compat", names[i], err, sizeof err) == CRP_OK, err);
    CHECK_MSG(v.compat == i, names[i]);
    /* another option set afterwards keeps the mode */
    CHECK(crp_vision_config_set(&v, "spatial_merge_size", "2", err, sizeof err) == CRP_OK);
    CHECK_MSG(v.compat == i, names[i]);
  }
  CHECK(crp_vision_config_set(&v, "compat", "hf-5.3", err, sizeof err) == CRP_OK);
  CHECK(v.compat == CRP_COMPAT_HF_5_6);
}

static void test_errors_and_truncation(void) {
  static const int64_t odd_images[3] = {1, 5, 4}; /* h = 5, merge 2 */
  crp_rope_index_input in = small_batch();
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[48], deltas[2];
  char err[256];
  static int64_t two[6];
  memcpy(two, odd_images, sizeof odd_images);
  memcpy(two + 3, kImages + 3, 3 * sizeof(int64_t));
  in.image_grid_thw = two;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "h=5 is not divisible by spatial_merge_size=2"), err);
  const size_t full = strlen(err);
  CHECK(full > 10);

  /* truncated to error_size - 1 bytes, always NUL-terminated */
  char small[8];
  memset(small, 'x', sizeof small);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, small, sizeof small) == CRP_INVALID_ARGUMENT);
  CHECK(small[7] == '\0');
  CHECK(strlen(small) == 7);
  CHECK(strncmp(small, err, 7) == 0);
  char one[1] = {'x'};
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, one, 1) == CRP_INVALID_ARGUMENT);
  CHECK(one[0] == '\0');
  char untouched[4] = {'a', 'b', 'c', '\0'};
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, untouched, 0) == CRP_INVALID_ARGUMENT);
  CHECK(strcmp(untouched, "abc") == 0);
  /* no buffer at all: the status still says what happened */
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, NULL, 64) == CRP_INVALID_ARGUMENT);

  /* other reasons, each named */
  in = small_batch();
  in.n_images = 1; /* two blocks, one grid */
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "image_grid_thw has only 1 entry"), err);
  in = small_batch();
  static int64_t mask2[16];
  memcpy(mask2, kMask, sizeof kMask);
  mask2[3] = 2;
  in.attention_mask = mask2;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "attention_mask[0][3] = 2"), err);
  in = small_batch();
  static int64_t stray[16];
  memcpy(stray, kIds, sizeof kIds);
  stray[0] = kVid;
  in.input_ids = stray;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "outside a vision block"), err);
  in = small_batch();
  v.spatial_merge_size = 0;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "spatial_merge_size"), err);
  crp_vision_config_default(&v);
  v.tokens_per_second = NAN;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "tokens_per_second"), err);
  crp_vision_config_default(&v);
  /* NaN seconds for a video */
  {
    static const int64_t ids[3] = {kStart, kVid, 5};
    static const int64_t videos[3] = {1, 2, 2};
    static const double secs[1] = {NAN};
    const crp_rope_index_input vin = one_video_row(ids, 3, videos, secs);
    CHECK(crp_rope_index(&vin, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(contains(err, "second_per_grid_ts[0]"), err);
  }
}

/* Regression: an unknown scheme value from C (any int fits a C enum) is loaded as a
 * C++ `crp_scheme`, whose valid values are 0..3: undefined behaviour before the
 * range check runs (UBSan: "c_api.cpp:69: load of value 7, which is not a valid
 * value for type 'crp_scheme'"), and a compiler may drop the check (e.g. with
 * -fstrict-enums). Reading the argument through an integer type fixes it. */
static void regression_unknown_scheme(void) {
  const crp_rope_index_input in = small_batch();
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[48], deltas[2];
  char err[256];
  CHECK(crp_rope_index(&in, &v, (crp_scheme)7, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "scheme"), err);
  CHECK(crp_rope_index(&in, &v, (crp_scheme)-1, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
}

static void test_null_arguments(void) {
  const crp_rope_index_input in = small_batch();
  crp_vision_config v;
  crp_vision_config_default(&v);
  crp_circle_config c;
  crp_circle_config_default(&c);
  float pos[48], deltas[2];
  char err[256];
  CHECK(crp_rope_index(NULL, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "NULL"), err);
  CHECK(crp_rope_index(&in, NULL, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, NULL, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_CIRCLE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "NULL"), err);
  /* the circle config is only needed by circle */
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_VANILLA, NULL, pos, deltas, err, sizeof err) == CRP_OK);
  crp_rope_index_input no_ids = in;
  no_ids.input_ids = NULL;
  CHECK(crp_rope_index(&no_ids, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "input_ids"), err);
  crp_rope_index_input no_grids = in;
  no_grids.image_grid_thw = NULL;
  CHECK(crp_rope_index(&no_grids, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "image_grid_thw"), err);
  crp_rope_index_input neg = in;
  neg.n_images = -1;
  CHECK(crp_rope_index(&neg, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  /* Counts beyond any call's tokens are refused before anything is sized by them (2^40 grids
   * used to be allocated first: CRP_INTERNAL_ERROR "out of memory"). */
  crp_rope_index_input huge = in;
  huge.n_images = (int64_t)1 << 40;
  CHECK(crp_rope_index(&huge, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "n_images 1099511627776 is more than 16777216"), err);
  huge = in;
  huge.n_videos = INT64_MAX;
  huge.video_grid_thw = in.image_grid_thw;
  CHECK(crp_rope_index(&huge, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "n_videos 9223372036854775807 is more than 16777216"), err);
  huge = in;
  huge.n_images = CRP_MAX_TOKENS + 1; /* just past the cap */
  CHECK(crp_rope_index(&huge, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "n_images 16777217 is more than 16777216"), err);
  crp_rope_index_input neg_batch = in;
  neg_batch.batch = -2;
  CHECK(crp_rope_index(&neg_batch, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  /* no mask = every token real */
  static const int64_t ids[3] = {1, 2, 3};
  const crp_rope_index_input text = text_batch(ids, 1, 3);
  float p3[9], d1[1];
  CHECK(crp_rope_index(&text, &v, CRP_SCHEME_CIRCLE, &c, p3, d1, err, sizeof err) == CRP_OK);
  for (int a = 0; a < 3; ++a)
    for (int s = 0; s < 3; ++s) CHECK(p3[a * 3 + s] == (float)s);
  CHECK(d1[0] == 0.0f);
  /* an empty batch needs no arrays */
  crp_rope_index_input empty;
  memset(&empty, 0, sizeof empty);
  CHECK(crp_rope_index(&empty, &v, CRP_SCHEME_MROPE, NULL, p3, d1, err, sizeof err) == CRP_OK);
}

static void test_decode(void) {
  const float deltas[2] = {-2.0f, 0.5f};
  float out[3 * 2 * 2];
  char err[128];
  fill_nan(out, 12);
  CHECK(crp_decode_positions(deltas, 2, 10, 2, out, err, sizeof err) == CRP_OK);
  static const float want[12] = {8, 9, 10.5f, 11.5f, 8, 9, 10.5f, 11.5f, 8, 9, 10.5f, 11.5f};
  for (int i = 0; i < 12; ++i) CHECK(out[i] == want[i]);
  CHECK(crp_decode_positions(deltas, 2, 10, -1, out, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "-1"), err);
  CHECK(crp_decode_positions(deltas, 2, -1, 1, out, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_decode_positions(NULL, 2, 0, 1, out, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "NULL"), err);
  CHECK(crp_decode_positions(deltas, 2, 0, 1, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_decode_positions(deltas, -1, 0, 1, out, err, sizeof err) == CRP_INVALID_ARGUMENT);
  /* nothing to write: NULL output is fine */
  CHECK(crp_decode_positions(deltas, 2, 0, 0, NULL, err, sizeof err) == CRP_OK);
  CHECK(crp_decode_positions(NULL, 0, 0, 5, NULL, err, sizeof err) == CRP_OK);
}

/* Regression: crp_rope_index multiplies batch * seq_len before any overflow check
 * (c_api.cpp: `in->batch * in->seq_len > 0`), which is signed overflow (UB;
 * an abort under -fsanitize=undefined) for batch = seq_len = 2^40. The core's
 * own check would report "out of range" if it got there. Same pattern in
 * crp_decode_positions (`batch * count`). */
static void regression_size_overflow(void) {
  static const int64_t ids[1] = {1};
  const crp_rope_index_input in = text_batch(ids, (int64_t)1 << 40, (int64_t)1 << 40);
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[3], deltas[1];
  char err[256];
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  const float d[1] = {0.0f};
  float out[3];
  CHECK(crp_decode_positions(d, (int64_t)1 << 40, 0, (int64_t)1 << 40, out, err, sizeof err) ==
        CRP_INVALID_ARGUMENT);
}

/* Options from text, with the grammar every front end shares: an engine
 * reading a model's config passes each value's text. */
static void test_options_from_text(void) {
  crp_circle_config c;
  crp_circle_config_default(&c);
  char err[256];
  CHECK_MSG(crp_circle_config_set(&c, "radius", "auto-2.5", err, sizeof err) == CRP_OK, err);
  CHECK(c.radius_auto == 1 && c.radius_scale == 2.5);
  CHECK_MSG(crp_circle_config_set(&c, "radius", "12", err, sizeof err) == CRP_OK, err);
  CHECK(c.radius_auto == 0 && c.radius == 12.0);
  CHECK(crp_circle_config_set(&c, "move_to_positive", "auto", err, sizeof err) == CRP_OK);
  CHECK(c.move_to_positive == CRP_POSITIVE_AUTO);
  CHECK(crp_circle_config_set(&c, "move_to_positive", "3", err, sizeof err) == CRP_OK);
  CHECK(c.move_to_positive == CRP_POSITIVE_OFFSET && c.positive_offset == 3.0);
  CHECK(crp_circle_config_set(&c, "move_to_positive", "0", err, sizeof err) == CRP_OK);
  CHECK(c.move_to_positive == CRP_POSITIVE_NONE);
  CHECK(crp_circle_config_set(&c, "move_to_positive", "false", err, sizeof err) == CRP_OK);
  CHECK(c.move_to_positive == CRP_POSITIVE_NONE);
  CHECK(crp_circle_config_set(&c, "alpha", "0.25", err, sizeof err) == CRP_OK && c.alpha == 0.25);
  CHECK(crp_circle_config_set(&c, "move_to_origin", "false", err, sizeof err) == CRP_OK && c.move_to_origin == 0);
  CHECK(crp_circle_config_set(&c, "dff_rate", "true", err, sizeof err) == CRP_OK && c.dff_rate == 1.0);
  /* refused, naming the key and the text; the config is left as it was */
  const crp_circle_config before = c;
  static const char* bad_radius[] = {"auto-0x1p1", "auto- 2", "auto-2_0", "0x10", "inf", "nan", "", " 5", "5 "};
  for (size_t i = 0; i < sizeof bad_radius / sizeof *bad_radius; ++i) {
    CHECK(crp_circle_config_set(&c, "radius", bad_radius[i], err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(contains(err, "radius must be a finite number > 0"), err);
  }
  CHECK(crp_circle_config_set(&c, "alpha", "1.5", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "alpha must be in [0, 1] (got 1.5)"), err);
  CHECK(crp_circle_config_set(&c, "move_to_positive", "true", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_circle_config_set(&c, "colour", "red", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "colour is not a Circle-RoPE option"), err);
  CHECK(memcmp(&before, &c, sizeof c) == 0);
  CHECK(crp_circle_config_set(NULL, "radius", "1", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_circle_config_set(&c, NULL, "1", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_circle_config_set(&c, "radius", NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
  /* an invalid enum value in the struct is reported, not cast */
  c.move_to_positive = 7;
  CHECK(crp_circle_config_set(&c, "alpha", "0.5", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "crp_positive_shift"), err);

  crp_vision_config v;
  crp_vision_config_default(&v);
  CHECK(crp_vision_config_set(&v, "time", "index", err, sizeof err) == CRP_OK && v.time_is_index == 1);
  CHECK(crp_vision_config_set(&v, "spatial_merge_size", "3", err, sizeof err) == CRP_OK && v.spatial_merge_size == 3);
  CHECK(crp_vision_config_set(&v, "image_token_id", "9223372036854775808", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "9223372036854775808"), err);
  CHECK(crp_vision_config_set(&v, "spatial_merge_size", "2.0", err, sizeof err) == CRP_INVALID_ARGUMENT);

  int scheme = -1;
  CHECK(crp_scheme_parse("mrope", &scheme, err, sizeof err) == CRP_OK && scheme == CRP_SCHEME_MROPE);
  CHECK(crp_scheme_parse("MRoPE", &scheme, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "unknown scheme 'MRoPE'"), err);
  /* the enum keeps the ABI values of the old magic int */
  CHECK(CRP_POSITIVE_NONE == 0 && CRP_POSITIVE_AUTO == 1 && CRP_POSITIVE_OFFSET == 2);
}

/* batch = 2^62 with seq_len = 0 passes a check of the product alone (0 tokens), and 2^62
 * rope_deltas would be written: batch and seq_len are bounded each on its own. */
static void regression_batch_without_tokens(void) {
  crp_rope_index_input in;
  memset(&in, 0, sizeof in);
  in.batch = (int64_t)1 << 62;
  in.seq_len = 0;
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[3], deltas[4];
  char err[256];
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "4611686018427387904"), err);
  in.batch = 0;
  in.seq_len = (int64_t)1 << 62;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  in.batch = CRP_MAX_TOKENS + 1;
  in.seq_len = 0;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "16777216"), err);
  const float d[1] = {0.0f};
  CHECK(crp_decode_positions(d, 1, 0, (int64_t)1 << 30, pos, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "1073741824"), err);
}

/* NaN deltas are refused, not turned into NaN positions. */
static void regression_non_finite_deltas(void) {
  const float deltas[2] = {0.5f, NAN};
  float out[3 * 2 * 2];
  char err[256];
  fill_nan(out, 12);
  out[0] = 7.0f;
  CHECK(crp_decode_positions(deltas, 2, 3, 2, out, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "rope_deltas[1] = nan is not finite"), err);
  CHECK(out[0] == 7.0f); /* nothing written */
  const float inf[1] = {INFINITY};
  CHECK(crp_decode_positions(inf, 1, 3, 2, out, err, sizeof err) == CRP_INVALID_ARGUMENT);
}

/* On failure nothing is written (not even row 0 when row 1 fails). */
static void regression_nothing_written_on_failure(void) {
  crp_rope_index_input in = small_batch();
  static const int64_t short_grid[6] = {1, 4, 4, 1, 4, 4}; /* row 1's block holds 2 tokens, not 4 */
  in.image_grid_thw = short_grid;
  crp_vision_config v;
  crp_vision_config_default(&v);
  float pos[48], deltas[2];
  char err[256];
  for (int i = 0; i < 48; ++i) pos[i] = -7.0f;
  deltas[0] = deltas[1] = -7.0f;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  int untouched = deltas[0] == -7.0f && deltas[1] == -7.0f;
  for (int i = 0; i < 48; ++i) untouched = untouched && pos[i] == -7.0f;
  CHECK_MSG(untouched, err);
}

/* The C API's completeness: a version query, AGE plans, statuses everywhere. */
static void test_version_plans_and_statuses(void) {
  int major = -1, minor = -1, patch = -1;
  CHECK(crp_version(&major, &minor, &patch) == CRP_OK);
  CHECK(major == CRP_VERSION_MAJOR && minor == CRP_VERSION_MINOR && patch == CRP_VERSION_PATCH);
  CHECK(crp_version(NULL, NULL, NULL) == CRP_OK);
  CHECK(crp_circle_config_default(NULL) == CRP_INVALID_ARGUMENT);
  CHECK(crp_vision_config_default(NULL) == CRP_INVALID_ARGUMENT);

  char err[256];
  crp_age_plan* plan = NULL;
  CHECK_MSG(crp_age_plan_create("alternate", 5, &plan, err, sizeof err) == CRP_OK, err);
  int layers = 0, geometries = 0, scheme = -1, geometry = -1;
  CHECK(crp_age_plan_size(plan, &layers, &geometries, err, sizeof err) == CRP_OK);
  CHECK(layers == 5 && geometries == 2);
  CHECK(crp_age_plan_geometry(plan, 0, &scheme, err, sizeof err) == CRP_OK && scheme == CRP_SCHEME_CIRCLE);
  CHECK(crp_age_plan_geometry(plan, 1, &scheme, err, sizeof err) == CRP_OK && scheme == CRP_SCHEME_MROPE);
  CHECK(crp_age_plan_geometry(plan, 2, &scheme, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "geometry 2 is out of range"), err);
  static const int want[5] = {0, 1, 0, 1, 0};
  for (int l = 0; l < 5; ++l) CHECK(crp_age_plan_layer(plan, l, &geometry, err, sizeof err) == CRP_OK && geometry == want[l]);
  CHECK(crp_age_plan_layer(plan, 5, &geometry, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "layer 5 is out of range"), err);
  CHECK(crp_age_plan_destroy(plan) == CRP_OK);
  CHECK(crp_age_plan_destroy(NULL) == CRP_OK);
  crp_age_plan* bad = (crp_age_plan*)&bad;
  CHECK(crp_age_plan_create("CMX", 4, &bad, err, sizeof err) == CRP_INVALID_ARGUMENT && bad == NULL);
  CHECK_MSG(contains(err, "'X'"), err);
  CHECK(crp_age_plan_create("all", 0, &bad, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_age_plan_create("all", (int64_t)1 << 40, &bad, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "1099511627776"), err);
  CHECK(crp_age_plan_create(NULL, 4, &bad, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK(crp_age_plan_size(NULL, &layers, NULL, err, sizeof err) == CRP_INVALID_ARGUMENT);
}

/* What the one quoting rule promises of a message that echoes `input`: printable ASCII only
 * (no ESC, BEL or line break reaches a terminal) and at most 40 bytes of the input in a row. */
static int clean_message(const char* message, const char* input) {
  const size_t n = strlen(message), m = strlen(input);
  for (size_t i = 0; i < n; ++i)
    if ((unsigned char)message[i] < 0x20 || (unsigned char)message[i] >= 0x7f) return 0;
  for (size_t i = 0; i + 41 <= m; ++i) {
    char window[42];
    memcpy(window, input + i, 41);
    window[41] = '\0';
    if (strstr(message, window)) return 0;
  }
  return 1;
}

/* The setters echoed an unknown key whole and its bytes raw; names and values of every call
 * that reads text are shown by the one rule (bounded, escaped, one line). */
static void regression_echoed_text_is_bounded_and_escaped(void) {
  enum { kLong = 100000 };
  char* long_text = malloc(kLong + 1);
  memset(long_text, 'k', kLong);
  long_text[kLong] = '\0';
  static const char control[] = "a\x1b[31m\x07\x1b]0;title\x07z";
  const char* texts[] = {long_text, control};
  char err[4096];
  for (int i = 0; i < 2; ++i) {
    const char* t = texts[i];
    crp_circle_config c;
    crp_vision_config v;
    crp_circle_config_default(&c);
    crp_vision_config_default(&v);
    int scheme = 0;
    crp_age_plan* plan = NULL;
    CHECK(crp_circle_config_set(&c, t, "1", err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(clean_message(err, t) && contains(err, "' is not a Circle-RoPE option"), err);
    CHECK(crp_vision_config_set(&v, t, "1", err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(clean_message(err, t) && contains(err, "' is not a vision option"), err);
    CHECK(crp_circle_config_set(&c, "radius", t, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(clean_message(err, t), err);
    CHECK(crp_vision_config_set(&v, "compat", t, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(clean_message(err, t) && strlen(err) < 1000, err);
    CHECK(crp_vision_config_set(&v, "time", t, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(clean_message(err, t), err);
    CHECK(crp_scheme_parse(t, &scheme, err, sizeof err) == CRP_INVALID_ARGUMENT);
    CHECK_MSG(clean_message(err, t), err);
    CHECK(crp_age_plan_create(t, 4, &plan, err, sizeof err) == CRP_INVALID_ARGUMENT && plan == NULL);
    CHECK_MSG(clean_message(err, t), err);
  }
  crp_circle_config c;
  crp_circle_config_default(&c);
  CHECK(crp_circle_config_set(&c, control, "1", err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(contains(err, "'a\\x1b[31m\\x07\\x1b]0;title\\x07z' is not a Circle-RoPE option"), err);
  free(long_text);
}

/* Random bytes as keys and values of every setter: one clean line each. */
static void test_random_text_through_the_setters(void) {
  static const char* circle_keys[] = {"radius", "alpha", "move_to_origin", "dff_rate", "move_to_positive", "method"};
  static const char* vision_keys[] = {"spatial_merge_size", "tokens_per_second", "vision_start_token_id",
                                      "image_token_id", "video_token_id", "time", "compat"};
  uint64_t state = 19;
  char text[301], err[4096];
  for (int i = 0; i < 3000; ++i) {
    const size_t length = 1 + (size_t)((state = state * 6364136223846793005u + 1442695040888963407u) >> 33) % 300;
    for (size_t k = 0; k < length; ++k) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      text[k] = (char)(1 + (state >> 33) % 255);
    }
    text[length] = '\0';
    crp_circle_config c;
    crp_vision_config v;
    crp_circle_config_default(&c);
    crp_vision_config_default(&v);
    crp_status status = crp_circle_config_set(&c, i % 2 ? text : circle_keys[i % 6], i % 2 ? "1" : text, err, sizeof err);
    if (status != CRP_OK) CHECK_MSG(clean_message(err, text), err);
    status = crp_vision_config_set(&v, i % 2 ? text : vision_keys[i % 7], i % 2 ? "1" : text, err, sizeof err);
    if (status != CRP_OK) CHECK_MSG(clean_message(err, text), err);
  }
}

/* An array `bytes` into a buffer, copied there: a pointer one byte off its element type. */
static void* shifted(unsigned char* buffer, size_t bytes, const void* data, size_t size) {
  memcpy(buffer + bytes, data, size);
  return buffer + bytes;
}

/* The message names the function, the argument and its address. */
static int names_misaligned(const char* err, const char* function, const char* name, const void* address,
                            const char* alignment) {
  char want[256];
  snprintf(want, sizeof want, "%s: %s %p is not aligned to %s", function, name, address, alignment);
  return contains(err, want);
}

/* Regression: misaligned input_ids (1 byte off), attention_mask, grids, seconds, position_ids
 * and rope_deltas of crp_rope_index, and rope_deltas and out of crp_decode_positions, were
 * read and written as they came: success in a release build, an abort under UBSan (load of
 * misaligned address). Refused, naming the argument and its address; nothing is written. */
static void regression_misaligned_pointers(void) {
  _Alignas(8) static unsigned char ids_buffer[2 * 8 * 8 + 8], mask_buffer[2 * 8 * 8 + 8], grid_buffer[6 * 8 + 8],
      seconds_buffer[8 + 8], pos_buffer[48 * 4 + 8], deltas_buffer[2 * 4 + 8];
  crp_vision_config v;
  crp_vision_config_default(&v);
  _Alignas(8) static float pos[48], deltas[2];
  char err[256];
  static const int64_t videos[3] = {2, 2, 2};
  static const int64_t video_ids[4] = {kStart, kVid, kVid, 5};
  static const double seconds[1] = {1.0};

  crp_rope_index_input in = small_batch();
  in.input_ids = (const int64_t*)shifted(ids_buffer, 1, kIds, sizeof kIds);
  for (int i = 0; i < 48; ++i) pos[i] = -7.0f;
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_rope_index", "input_ids", in.input_ids, "8 bytes (int64)"), err);
  CHECK(pos[0] == -7.0f && pos[47] == -7.0f);
  for (size_t off = 2; off < 8; off += 2) { /* every offset that is not a multiple of 8 */
    in.input_ids = (const int64_t*)shifted(ids_buffer, off, kIds, sizeof kIds);
    CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  }
  in = small_batch();
  in.attention_mask = (const int64_t*)shifted(mask_buffer, 4, kMask, sizeof kMask);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_rope_index", "attention_mask", in.attention_mask, "8 bytes (int64)"), err);
  in = small_batch();
  in.image_grid_thw = (const int64_t*)shifted(grid_buffer, 3, kImages, sizeof kImages);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_rope_index", "image_grid_thw", in.image_grid_thw, "8 bytes (int64)"), err);
  in = one_video_row(video_ids, 4, (const int64_t*)shifted(grid_buffer, 5, videos, sizeof videos), seconds);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_rope_index", "video_grid_thw", in.video_grid_thw, "8 bytes (int64)"), err);
  in = one_video_row(video_ids, 4, videos, (const double*)shifted(seconds_buffer, 1, seconds, sizeof seconds));
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_rope_index", "second_per_grid_ts", in.second_per_grid_ts,
                             "8 bytes (float64)"),
            err);
  in = one_video_row(video_ids, 4, videos, seconds); /* the same row, aligned: fine */
  CHECK_MSG(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, deltas, err, sizeof err) == CRP_OK, err);
  in = small_batch();
  float* odd_pos = (float*)(pos_buffer + 1);
  float* odd_deltas = (float*)(deltas_buffer + 2);
  memset(pos_buffer, 0x5A, sizeof pos_buffer);
  memset(deltas_buffer, 0x5A, sizeof deltas_buffer);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, odd_pos, deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_rope_index", "position_ids", odd_pos, "4 bytes (float32)"), err);
  CHECK(crp_rope_index(&in, &v, CRP_SCHEME_MROPE, NULL, pos, odd_deltas, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_rope_index", "rope_deltas", odd_deltas, "4 bytes (float32)"), err);
  int untouched = 1;
  for (size_t i = 0; i < sizeof pos_buffer; ++i) untouched = untouched && pos_buffer[i] == 0x5A;
  for (size_t i = 0; i < sizeof deltas_buffer; ++i) untouched = untouched && deltas_buffer[i] == 0x5A;
  CHECK(untouched);

  static const float two_deltas[2] = {-2.0f, 0.5f};
  const float* odd_in = (const float*)shifted(deltas_buffer, 1, two_deltas, sizeof two_deltas);
  CHECK(crp_decode_positions(odd_in, 2, 10, 2, pos, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_decode_positions", "rope_deltas", odd_in, "4 bytes (float32)"), err);
  memset(pos_buffer, 0x5A, sizeof pos_buffer);
  CHECK(crp_decode_positions(two_deltas, 2, 10, 2, odd_pos, err, sizeof err) == CRP_INVALID_ARGUMENT);
  CHECK_MSG(names_misaligned(err, "crp_decode_positions", "out", odd_pos, "4 bytes (float32)"), err);
  untouched = 1;
  for (size_t i = 0; i < sizeof pos_buffer; ++i) untouched = untouched && pos_buffer[i] == 0x5A;
  CHECK(untouched);
  CHECK_MSG(crp_decode_positions(two_deltas, 2, 10, 2, pos, err, sizeof err) == CRP_OK, err);
}

int main(void) {
  test_defaults();
  test_mrope_hand_values();
  test_vanilla_unordered_and_circle();
  test_video_seconds_and_index_time();
  test_compat_modes();
  test_errors_and_truncation();
  test_null_arguments();
  test_decode();
  regression_unknown_scheme();
  regression_size_overflow();
  test_options_from_text();
  regression_batch_without_tokens();
  regression_non_finite_deltas();
  regression_nothing_written_on_failure();
  test_version_plans_and_statuses();
  regression_echoed_text_is_bounded_and_escaped();
  test_random_text_through_the_setters();
  regression_misaligned_pointers();
  if (failures) {
    fprintf(stderr, "c_api_test: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("c_api_test: all %d checks passed\n", checks);
  return 0;
}
