// The kernels' C API: checks the C values, converts to the C++ types, and turns exceptions
// into status codes (c_guard.h).
#include "circlerope/c_kernels.h"

#include <vector>

#include "../core/c_guard.h"
#include "../core/fail.h"
#include "c_convert.h"
#include "circlerope/kernels.h"

struct crp_rotary_table {
  circlerope::RotaryTable table;
};

namespace {

using namespace circlerope;
using detail::fail;
using detail::guarded;
using detail::checked_enum;
using detail::to_cpp;

}  // namespace

extern "C" {

void crp_rotary_config_default(crp_rotary_config* config) {
  if (!config) return;
  const RotaryConfig d;
  config->theta = d.theta;
  config->rotary_dim = d.rotary_dim;
  config->layout = static_cast<int>(d.layout);
  for (int i = 0; i < 3; ++i) config->sections[i] = d.sections[static_cast<std::size_t>(i)];
}

crp_status crp_rotary_table_create(const crp_rotary_config* config, const float* position_ids,
                                   int64_t batch, int64_t seq_len, int threads,
                                   crp_rotary_table** table, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!table) fail("table (the output pointer) is NULL");
    *table = nullptr;
    if (!config) fail("config is NULL");
    auto* created =
        new crp_rotary_table{make_rotary_table(to_cpp(*config), position_ids, batch, seq_len, threads)};
    *table = created;
  });
}

void crp_rotary_table_destroy(crp_rotary_table* table) { delete table; }

crp_status crp_rotate(const crp_rotary_table* table, const crp_head_tensor* in,
                      const crp_head_tensor* out, int count, int pairing, int direction,
                      int threads, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!table) fail("table is NULL");
    if (count < 0) fail("count ", count, " is negative");
    if (count > 0 && (!in || !out)) fail("in or out is NULL with count ", count);
    RotaryParams params;
    params.pairing = checked_enum<Pairing>(pairing, 2, "pairing");
    params.direction = checked_enum<Direction>(direction, 2, "direction");
    params.threads = threads;
    std::vector<RotaryTarget> targets;
    targets.reserve(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) targets.push_back({to_cpp(in[i], "in", i), to_cpp(out[i], "out", i)});
    rotate(table->table, targets, params);
  });
}

}  // extern "C"
