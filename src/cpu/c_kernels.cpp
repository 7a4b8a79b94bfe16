// The kernels' C API: checks the C values, converts to the C++ types, and turns exceptions
// into status codes (c_guard.h).
#include "circlerope/c_kernels.h"

#include <algorithm>
#include <vector>

#include "c_convert.h"
#include "circlerope/detail/c_guard.h"
#include "circlerope/detail/fail.h"
#include "circlerope/rotary.h"
#include "circlerope/options.h"

struct crp_rotary_table {
  circlerope::RotaryTable table;
};

namespace {

using namespace circlerope;
using detail::fail;
using detail::guarded;
using detail::checked_enum;
using detail::to_cpp;

static_assert(static_cast<int>(Isa::automatic) == CRP_ISA_AUTOMATIC && static_cast<int>(Isa::portable) == CRP_ISA_PORTABLE &&
                  static_cast<int>(Isa::avx2) == CRP_ISA_AVX2 && static_cast<int>(Isa::avx512) == CRP_ISA_AVX512 &&
                  static_cast<int>(Isa::avx512bf16) == CRP_ISA_AVX512BF16,
              "crp_isa values are cast to circlerope::Isa");
static_assert(CRP_MAX_THREADS == kMaxThreads && CRP_MAX_TARGETS == kMaxTargets,
              "the C header states the kernels' limits");

// Isa values a C caller may pass: automatic .. avx512bf16 (cpu_path.h; a path added there is
// added here and to crp_isa).
constexpr int kIsaCount = static_cast<int>(Isa::avx512bf16) + 1;

void rotate_targets(const RotaryTableView& table, const crp_head_tensor* in, const crp_head_tensor* out, int count,
                    const crp_rotate_params* c_params) {
  if (count < 0) fail("count ", count, " is negative");
  // The cap of rotate() (rotary.h), checked before the count sizes anything here.
  if (count > kMaxTargets) fail("at most ", kMaxTargets, " targets per call (got ", count, ")");
  if (count > 0 && (!in || !out)) fail("in or out is NULL with count ", count);
  crp_rotate_params p{};
  if (c_params) p = *c_params;
  else crp_rotate_params_default(&p);
  RotaryParams params;
  params.pairing = checked_enum<Pairing>(p.pairing, 2, "pairing");
  params.direction = checked_enum<Direction>(p.direction, 2, "direction");
  params.threads = p.threads;
  params.isa = checked_enum<Isa>(p.isa, kIsaCount, "isa");
  std::vector<RotaryTarget> targets;
  targets.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) targets.push_back({to_cpp(in[i], "in", i), to_cpp(out[i], "out", i)});
  rotate(table, targets, params);
}

}  // namespace

extern "C" {

crp_status crp_rotary_config_default(crp_rotary_config* config) {
  if (!config) return CRP_INVALID_ARGUMENT;
  const RotaryConfig d;
  config->theta = d.theta;
  config->rotary_dim = d.rotary_dim;
  config->layout = static_cast<int>(d.layout);
  for (int i = 0; i < 3; ++i) config->sections[i] = d.sections[static_cast<std::size_t>(i)];
  return CRP_OK;
}

crp_status crp_rotate_params_default(crp_rotate_params* params) {
  if (!params) return CRP_INVALID_ARGUMENT;
  const RotaryParams d;
  *params = {static_cast<int>(d.pairing), static_cast<int>(d.direction), d.threads, static_cast<int>(d.isa)};
  return CRP_OK;
}

crp_status crp_isa_available(int isa, int* available, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!available) fail("crp_isa_available: available is NULL");
    const Isa wanted = checked_enum<Isa>(isa, kIsaCount, "isa");
    const std::vector<Isa> here = available_isas();
    *available = wanted == Isa::automatic || std::find(here.begin(), here.end(), wanted) != here.end();
  });
}

crp_status crp_cpu_path(int* isa, char* reason, size_t reason_size, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!isa) fail("crp_cpu_path: isa is NULL");
    const CpuPath chosen = cpu_path();
    *isa = static_cast<int>(chosen.isa);
    detail::write_error(reason, reason_size, chosen.reason.c_str());
  });
}

crp_status crp_rotary_config_set(crp_rotary_config* config, const char* key, const char* value,
                                 char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!config || !key || !value) fail("crp_rotary_config_set: NULL argument");
    RotaryConfig c = to_cpp(*config);
    set_rotary_option(c, key, OptionValue::text(value), key);
    config->theta = c.theta;
    config->rotary_dim = c.rotary_dim;
    config->layout = static_cast<int>(c.layout);
    for (int i = 0; i < 3; ++i) config->sections[i] = c.sections[static_cast<std::size_t>(i)];
  });
}

crp_status crp_rotary_table_create(const crp_rotary_config* config, const float* position_ids,
                                   int64_t batch, int64_t seq_len, int threads,
                                   crp_rotary_table** table, char* error, size_t error_size) {
  return crp_rotary_table_create_ex(config, position_ids, batch, seq_len, threads, CRP_ISA_AUTOMATIC, table, error,
                                    error_size);
}

crp_status crp_rotary_table_create_ex(const crp_rotary_config* config, const float* position_ids,
                                      int64_t batch, int64_t seq_len, int threads, int isa,
                                      crp_rotary_table** table, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!table) fail("table (the output pointer) is NULL");
    *table = nullptr;
    if (!config) fail("config is NULL");
    const RotaryConfig c = to_cpp(*config);
    const Isa path = checked_enum<Isa>(isa, kIsaCount, "isa");
    auto* created = new crp_rotary_table{make_rotary_table(c, position_ids, batch, seq_len, threads, path)};
    *table = created;
  });
}

crp_status crp_rotary_table_destroy(crp_rotary_table* table) {
  delete table;
  return CRP_OK;
}

crp_status crp_rotary_table_shape(const crp_rotary_table* table, int64_t* batch, int64_t* seq_len,
                                  int* rotary_dim, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!table) fail("crp_rotary_table_shape: table is NULL");
    if (batch) *batch = table->table.batch();
    if (seq_len) *seq_len = table->table.seq_len();
    if (rotary_dim) *rotary_dim = table->table.config().rotary_dim;
  });
}

crp_status crp_rotary_table_values(const crp_rotary_table* table, const float** values, char* error,
                                   size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!table || !values) fail("crp_rotary_table_values: NULL argument");
    *values = table->table.view().values;
  });
}

crp_status crp_rotary_table_compute(const crp_rotary_config* config, const float* position_ids,
                                    int64_t batch, int64_t seq_len, int threads, int isa, float* values,
                                    size_t value_count, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!config) fail("config is NULL");
    const RotaryConfig c = to_cpp(*config);
    make_rotary_table_into(c, position_ids, batch, seq_len, {values, value_count}, threads,
                           checked_enum<Isa>(isa, kIsaCount, "isa"));
  });
}

crp_status crp_rotate(const crp_rotary_table* table, const crp_head_tensor* in,
                      const crp_head_tensor* out, int count, int pairing, int direction,
                      int threads, char* error, size_t error_size) {
  const crp_rotate_params params{pairing, direction, threads, CRP_ISA_AUTOMATIC};
  return crp_rotate_ex(table, in, out, count, &params, error, error_size);
}

crp_status crp_rotate_ex(const crp_rotary_table* table, const crp_head_tensor* in,
                         const crp_head_tensor* out, int count, const crp_rotate_params* params,
                         char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!table) fail("table is NULL");
    rotate_targets(table->table.view(), in, out, count, params);
  });
}

crp_status crp_rotate_values(const float* values, int64_t batch, int64_t seq_len, int rotary_dim,
                             const crp_head_tensor* in, const crp_head_tensor* out, int count,
                             const crp_rotate_params* params, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    // rotate() checks the sizes and the values pointer
    rotate_targets({values, batch, seq_len, rotary_dim}, in, out, count, params);
  });
}

}  // extern "C"
