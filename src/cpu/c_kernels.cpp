// The kernels' C API: the C arguments checked and converted by c_convert.h (shared with the
// CUDA C API, src/cuda/c_cuda.cpp), exceptions turned into status codes (c_guard.h).
#include "circlerope/c_kernels.h"

#include <algorithm>
#include <vector>

#include "c_convert.h"
#include "circlerope/detail/c_guard.h"
#include "circlerope/detail/fail.h"
#include "circlerope/rotary.h"
#include "circlerope/options.h"

namespace {

using namespace circlerope;
using detail::checked_enum;
using detail::fail;
using detail::guarded;
using detail::kIsaCount;
using detail::to_cpp;

crp_rotary_config to_c(const RotaryConfig& c) {
  return {c.theta, c.rotary_dim, static_cast<int>(c.layout), {c.sections[0], c.sections[1], c.sections[2]}};
}

}  // namespace

extern "C" {

crp_status crp_rotary_config_default(crp_rotary_config* config) {
  if (!config) return CRP_INVALID_ARGUMENT;
  *config = to_c(RotaryConfig{});
  return CRP_OK;
}

crp_status crp_rotary_params_default(crp_rotary_params* params) {
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
    *config = to_c(c);
  });
}

crp_status crp_table_fill(const crp_rotary_config* config, const float* position_ids, const crp_table_view* table,
                          const crp_rotary_params* params, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    const detail::TableFill f = detail::table_fill(config, table, params);
    make_rotary_table_into(f.config, position_ids, f.batch, f.seq_len, f.values, f.params.threads, f.params.isa);
  });
}

crp_status crp_rotate(const crp_table_view* table, const crp_head_tensor* in, const crp_head_tensor* out, int count,
                      const crp_rotary_params* params, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    const detail::RotateCall call = detail::rotate_call(table, in, out, count, params);
    rotate(call.table, call.targets, call.params);
  });
}

}  // extern "C"
