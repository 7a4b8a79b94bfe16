/* crp_cpu_path and CIRCLEROPE_ISA through the C APIs, run by ctest three times: without the
 * variable, with CIRCLEROPE_ISA=avx2 (automatic runs avx2, the AVX-512 paths are ruled out) and
 * with a value that is no path (every call that chooses a path is CRP_INVALID_ARGUMENT, the
 * positions' too, with the message naming the value). argv[1] says which: automatic, avx2 or
 * unknown. A plain main(): prints every failed check and returns nonzero if any failed. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "circlerope/c_api.h"
#include "circlerope/c_kernels.h"

static int failures = 0;
static int checks = 0;

#include "c_check.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s automatic|avx2|unknown\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  char err[512], reason[512];
  int isa = -1;
  const crp_status status = crp_cpu_path(&isa, reason, sizeof reason, err, sizeof err);

  /* A text-only batch's positions, and a table, both of which choose a path. */
  static const int64_t ids[4] = {1, 2, 3, 4};
  crp_rope_index_input in;
  memset(&in, 0, sizeof in);
  in.input_ids = ids;
  in.batch = 1;
  in.seq_len = 4;
  crp_vision_config vision;
  crp_circle_config circle;
  CHECK(crp_vision_config_default(&vision) == CRP_OK && crp_circle_config_default(&circle) == CRP_OK);
  float positions[3 * 4], deltas[1];
  char positions_err[512];
  const crp_status positions_status =
      crp_rope_index(&in, &vision, CRP_SCHEME_CIRCLE, &circle, positions, deltas, positions_err, sizeof positions_err);
  crp_rotary_config config;
  CHECK(crp_rotary_config_default(&config) == CRP_OK);
  float values[4 * 128];
  crp_table_view table = {values, 1, 4, 128};
  crp_rotary_params params;
  CHECK(crp_rotary_params_default(&params) == CRP_OK);
  params.threads = 1;
  char table_err[512];
  const crp_status table_status = crp_table_fill(&config, positions, &table, &params, table_err, sizeof table_err);

  if (strcmp(mode, "unknown") == 0) {
    CHECK_MSG(status == CRP_INVALID_ARGUMENT, err);
    CHECK_MSG(strstr(err, "CIRCLEROPE_ISA='avx1024' is not a code path") != NULL, err);
    CHECK(isa == -1);
    CHECK_MSG(positions_status == CRP_INVALID_ARGUMENT && strcmp(positions_err, err) == 0, positions_err);
    CHECK_MSG(table_status == CRP_INVALID_ARGUMENT && strcmp(table_err, err) == 0, table_err);
    int available = -1;
    CHECK(crp_isa_available(CRP_ISA_PORTABLE, &available, err, sizeof err) == CRP_INVALID_ARGUMENT);
  } else {
    CHECK_MSG(status == CRP_OK, err);
    CHECK_MSG(positions_status == CRP_OK, positions_err);
    CHECK_MSG(table_status == CRP_OK, table_err);
    CHECK(isa >= CRP_ISA_PORTABLE && isa <= CRP_ISA_AVX512BF16);
    if (strcmp(mode, "avx2") == 0) {
      CHECK(isa == CRP_ISA_AVX2);
      CHECK_MSG(strcmp(reason, "forced by CIRCLEROPE_ISA=avx2") == 0, reason);
      int available = -1;
      CHECK(crp_isa_available(CRP_ISA_AVX512, &available, err, sizeof err) == CRP_OK && available == 0);
      CHECK(crp_isa_available(CRP_ISA_PORTABLE, &available, err, sizeof err) == CRP_OK && available == 1);
      params.isa = CRP_ISA_AVX512;
      CHECK(crp_table_fill(&config, positions, &table, &params, err, sizeof err) == CRP_INVALID_ARGUMENT);
      /* The reason: the override where the CPU has the path (AVX-512 F, BW and VL, which the
         compiler's own CPU check, OS support included, tells), else the CPU, which the probe
         reports first. */
#if defined(__x86_64__) || defined(__i386__)
      const int cpu_has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl");
#else
      const int cpu_has_avx512 = 0;
#endif
      CHECK_MSG(strstr(err, cpu_has_avx512 ? "code path 'avx512' is not available: ruled out by CIRCLEROPE_ISA=avx2"
                                           : "code path 'avx512' is not available: this CPU or OS lacks it") != NULL,
                err);
    } else {
      CHECK_MSG(strncmp(reason, "automatic: ", 11) == 0, reason);
    }
    /* A short buffer gets a cut, terminated reason; NULL gets none. */
    char cut[8];
    CHECK(crp_cpu_path(&isa, cut, sizeof cut, err, sizeof err) == CRP_OK && strlen(cut) == 7);
    CHECK(crp_cpu_path(&isa, NULL, 0, err, sizeof err) == CRP_OK);
    CHECK(crp_cpu_path(NULL, reason, sizeof reason, err, sizeof err) == CRP_INVALID_ARGUMENT);
  }
  printf("c_cpu_path (%s): %d checks, %d failed\n", mode, checks, failures);
  return failures == 0 ? 0 : 1;
}
