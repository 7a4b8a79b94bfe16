/* circlerope — C API of the rotary kernels (rotary.h), for engines written in C or that
 * keep a C boundary. Link circlerope::kernels. Same conventions as c_api.h: every function
 * returns a crp_status and writes a one-line message into `error` (when not NULL); nothing
 * throws, aborts or prints.
 *
 * The hot path is two calls: crp_table_fill computes the cos/sin table of a batch's positions
 * into memory the caller owns, described by a crp_table_view; crp_rotate rotates queries and
 * keys with it. c_cuda.h has the same two calls on device memory, with the same parameters
 * and a stream.
 *
 *   crp_rotary_config config;
 *   crp_rotary_config_default(&config);
 *   crp_table_view table = {malloc(batch * seq_len * 128 * sizeof(float)), batch, seq_len, 128};
 *   crp_table_fill(&config, position_ids, &table, NULL, err, sizeof err);
 *   crp_head_tensor q = {q_ptr, CRP_DTYPE_BFLOAT16, {B, S, 16, 128}, {S*16*128, 16*128, 128, 1}};
 *   crp_rotate(&table, &q, &q, 1, NULL, err, sizeof err);  // in place, neox, forward
 */
#ifndef CIRCLEROPE_C_KERNELS_H
#define CIRCLEROPE_C_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "circlerope/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most threads a call may ask for (0 = all cores); more is CRP_INVALID_ARGUMENT. */
#define CRP_MAX_THREADS 1024
/* Most tensors one crp_rotate call takes (circlerope::kMaxTargets). */
#define CRP_MAX_TARGETS 64

typedef enum crp_frequency_layout {
  CRP_LAYOUT_CHUNKED = 0,     /* Qwen2-VL, Qwen2.5-VL */
  CRP_LAYOUT_INTERLEAVED = 1, /* Qwen3-VL */
  CRP_LAYOUT_SINGLE = 2       /* plain 1-D RoPE on axis 0 */
} crp_frequency_layout;

typedef enum crp_dtype { CRP_DTYPE_FLOAT32 = 0, CRP_DTYPE_BFLOAT16 = 1, CRP_DTYPE_FLOAT16 = 2 } crp_dtype;
typedef enum crp_pairing { CRP_PAIRING_NEOX = 0, CRP_PAIRING_GPTJ = 1 } crp_pairing;
typedef enum crp_direction { CRP_FORWARD = 0, CRP_BACKWARD = 1 } crp_direction;
/* Code paths (circlerope::Isa, circlerope/cpu_path.h). AUTOMATIC picks the best one this CPU
 * runs (avx512bf16, then avx512, then avx2, then portable), or the one the environment variable
 * CIRCLEROPE_ISA forces; the others force one, and forcing a path this CPU or build lacks (or
 * one above CIRCLEROPE_ISA's) is CRP_INVALID_ARGUMENT. AVX512BF16 converts bf16 with
 * VCVTNE2PS2BF16. An unusable CIRCLEROPE_ISA (no path's name, or a path this CPU lacks) makes
 * every call that chooses a path, crp_cpu_path included, CRP_INVALID_ARGUMENT with the message
 * naming the value and the reason. */
typedef enum crp_isa {
  CRP_ISA_AUTOMATIC = 0,
  CRP_ISA_PORTABLE = 1,
  CRP_ISA_AVX2 = 2,
  CRP_ISA_AVX512 = 3,
  CRP_ISA_AVX512BF16 = 4
} crp_isa;

/* How crp_table_fill and crp_rotate run (circlerope::RotaryParams); NULL: the defaults of
 * crp_rotary_params_default. Every field is checked by both calls; crp_table_fill uses threads
 * and isa only. */
typedef struct crp_rotary_params {
  int pairing;   /* crp_pairing */
  int direction; /* crp_direction */
  int threads;   /* 0 = all cores, at most CRP_MAX_THREADS */
  int isa;       /* crp_isa */
} crp_rotary_params;

/* The rotary options of circlerope/options.h (kRotaryOptions, where each is declared).
 * tests/test_option_table.cpp checks that this struct carries every option declared there. */
typedef struct crp_rotary_config {
  double theta;     /* rope_theta, in [1, 2^126] (circlerope::kMinTheta .. kMaxTheta) */
  int rotary_dim;   /* even */
  int layout;       /* crp_frequency_layout */
  int sections[3];  /* temporal, height, width; sum rotary_dim / 2 (unused by SINGLE) */
} crp_rotary_config;

/* A strided [batch, seq, heads, head_dim] view; strides in elements. `data` must be aligned
 * to the element size (4 bytes for FLOAT32, 2 for BFLOAT16 and FLOAT16): a misaligned pointer
 * is CRP_INVALID_ARGUMENT. Float pointers (position_ids, table values) must be 4-byte aligned. */
typedef struct crp_head_tensor {
  void* data;
  int dtype; /* crp_dtype */
  int64_t shape[4];
  int64_t strides[4];
} crp_head_tensor;

/* A rotary table in memory the caller owns: per token (b, s), at
 * values + (b * seq_len + s) * rotary_dim, rotary_dim / 2 cosines then rotary_dim / 2 sines,
 * float32 (the frequency layout and theta are baked in); batch * seq_len * rotary_dim floats
 * in all, 4-byte aligned. crp_table_fill writes it, crp_rotate reads it. */
typedef struct crp_table_view {
  float* values;
  int64_t batch;
  int64_t seq_len;
  int rotary_dim; /* the config's rotary_dim: even, 2..1024 */
} crp_table_view;

/* Qwen2.5-VL: theta 1e6, rotary dim 128, chunked [16, 24, 24]. NULL: CRP_INVALID_ARGUMENT. */
crp_status crp_rotary_config_default(crp_rotary_config* config);
/* neox, forward, all cores, automatic path. NULL: CRP_INVALID_ARGUMENT. */
crp_status crp_rotary_params_default(crp_rotary_params* params);
/* Whether this CPU and build run code path `isa` (a crp_isa; AUTOMATIC always runs). */
crp_status crp_isa_available(int isa, int* available, char* error, size_t error_size);
/* The path AUTOMATIC runs in this process (*isa, a crp_isa other than AUTOMATIC) and why, one
 * line into `reason` (NUL-terminated, cut to reason_size; NULL or 0: not written):
 * "automatic: avx2, the CPU has AVX2, FMA and F16C; avx512 is not available: ..." or
 * "forced by CIRCLEROPE_ISA=avx2". */
crp_status crp_cpu_path(int* isa, char* reason, size_t reason_size, char* error, size_t error_size);
/* One option from its text, with the grammar of every front end (circlerope/options.h); the
 * keys are those of kRotaryOptions there: theta ("1e6"), rotary_dim ("128"), layout
 * ("chunked", "interleaved", "single"), sections ("16,24,24"). On error the config is
 * unchanged. */
crp_status crp_rotary_config_set(crp_rotary_config* config, const char* key, const char* value,
                                 char* error, size_t error_size);

/* The table of `position_ids` (float32 [3][table->batch][table->seq_len]) written into
 * table->values; table->rotary_dim must be config->rotary_dim. Refused: a non-finite position,
 * values that share memory with the positions. params: threads and isa as in crp_rotate (NULL:
 * the defaults). Nothing is written on failure. */
crp_status crp_table_fill(const crp_rotary_config* config, const float* position_ids,
                          const crp_table_view* table, const crp_rotary_params* params, char* error,
                          size_t error_size);

/* Rotates `count` (0..CRP_MAX_TARGETS) tensors by `table`: in[i] into out[i], which is in[i]
 * itself (in place) or shares no memory with it, nor with another target's in or out, nor with
 * the table's values; every tensor is [table->batch, table->seq_len, heads, head_dim >=
 * table->rotary_dim] (heads may differ between targets). params: pairing, direction, threads
 * and the code path (NULL: crp_rotary_params_default's). Nothing is written on failure. */
crp_status crp_rotate(const crp_table_view* table, const crp_head_tensor* in,
                      const crp_head_tensor* out, int count, const crp_rotary_params* params,
                      char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* CIRCLEROPE_C_KERNELS_H */
