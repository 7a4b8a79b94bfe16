// The kernels' C API: checks the C values, converts to the C++ types, and turns exceptions
// into status codes (c_guard.h).
#include "circlerope/c_kernels.h"

#include <vector>

#include "../core/c_guard.h"
#include "../core/fail.h"
#include "circlerope/kernels.h"
#include "circlerope/options.h"

struct crp_rotary_table {
  circlerope::RotaryTable table;
};

namespace {

using namespace circlerope;
using detail::fail;
using detail::guarded;

static_assert(static_cast<int>(FrequencyLayout::chunked) == CRP_LAYOUT_CHUNKED &&
                  static_cast<int>(FrequencyLayout::interleaved) == CRP_LAYOUT_INTERLEAVED &&
                  static_cast<int>(FrequencyLayout::single) == CRP_LAYOUT_SINGLE &&
                  static_cast<int>(DType::float32) == CRP_DTYPE_FLOAT32 &&
                  static_cast<int>(DType::bfloat16) == CRP_DTYPE_BFLOAT16 &&
                  static_cast<int>(DType::float16) == CRP_DTYPE_FLOAT16 &&
                  static_cast<int>(Pairing::neox) == CRP_PAIRING_NEOX &&
                  static_cast<int>(Pairing::gptj) == CRP_PAIRING_GPTJ &&
                  static_cast<int>(Direction::forward) == CRP_FORWARD &&
                  static_cast<int>(Direction::backward) == CRP_BACKWARD,
              "the C enums are cast to the C++ ones");
static_assert(CRP_MAX_THREADS == kMaxThreads, "the C header states the kernels' limit");

// Ints from C are range-checked before they become enums (an out-of-range enum is UB).
// `name` parts are only formatted into the message when the value is bad.
template <typename E, typename... Name>
E checked_enum(int value, int count, const Name&... name) {
  if (value < 0 || value >= count) fail(name..., " ", value, " is not one of 0..", count - 1);
  return static_cast<E>(value);
}

HeadTensor to_cpp(const crp_head_tensor& t, const char* what, int index) {
  HeadTensor out;
  out.data = t.data;
  out.dtype = checked_enum<DType>(t.dtype, 3, what, "[", index, "].dtype");
  for (int i = 0; i < 4; ++i) {
    out.shape[static_cast<std::size_t>(i)] = t.shape[i];
    out.strides[static_cast<std::size_t>(i)] = t.strides[i];
  }
  return out;
}

RotaryConfig to_cpp(const crp_rotary_config& config) {
  RotaryConfig c;
  c.theta = config.theta;
  c.rotary_dim = config.rotary_dim;
  c.layout = checked_enum<FrequencyLayout>(config.layout, 3, "layout");
  c.sections = {config.sections[0], config.sections[1], config.sections[2]};
  return c;
}

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
  return guarded(error, error_size, [&] {
    if (!table) fail("table (the output pointer) is NULL");
    *table = nullptr;
    if (!config) fail("config is NULL");
    const RotaryConfig c = to_cpp(*config);
    auto* created = new crp_rotary_table{make_rotary_table(c, position_ids, batch, seq_len, threads)};
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
