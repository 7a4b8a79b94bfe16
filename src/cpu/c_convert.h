// Internal: the C arguments of c_kernels.h's crp_table_fill and crp_rotate checked and turned
// into the C++ call, shared by the CPU C API (c_kernels.cpp) and the CUDA one
// (src/cuda/c_cuda.cpp), so that both refuse the same arguments with the same messages. Enum
// values are range-checked before they are cast (an out-of-range enum is undefined behaviour in
// C++), and counts before they size or index anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "circlerope/c_kernels.h"
#include "circlerope/detail/fail.h"
#include "circlerope/rotary.h"

namespace circlerope::detail {

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
static_assert(static_cast<int>(Isa::automatic) == CRP_ISA_AUTOMATIC && static_cast<int>(Isa::portable) == CRP_ISA_PORTABLE &&
                  static_cast<int>(Isa::avx2) == CRP_ISA_AVX2 && static_cast<int>(Isa::avx512) == CRP_ISA_AVX512 &&
                  static_cast<int>(Isa::avx512bf16) == CRP_ISA_AVX512BF16,
              "crp_isa values are cast to circlerope::Isa");
static_assert(CRP_MAX_THREADS == kMaxThreads && CRP_MAX_TARGETS == kMaxTargets,
              "the C header states the kernels' limits");

// Isa values a C caller may pass: automatic .. avx512bf16 (cpu_path.h; a path added there is
// added here and to crp_isa).
inline constexpr int kIsaCount = static_cast<int>(Isa::avx512bf16) + 1;

// `name` parts are only formatted into the message when the value is bad.
template <typename E, typename... Name>
E checked_enum(int value, int count, const Name&... name) {
  if (value < 0 || value >= count) fail(name..., " ", value, " is not one of 0..", count - 1);
  return static_cast<E>(value);
}

inline HeadTensor to_cpp(const crp_head_tensor& t, const char* what, int index) {
  HeadTensor out;
  out.data = t.data;
  out.dtype = checked_enum<DType>(t.dtype, 3, what, "[", index, "].dtype");
  for (int i = 0; i < 4; ++i) {
    out.shape[static_cast<std::size_t>(i)] = t.shape[i];
    out.strides[static_cast<std::size_t>(i)] = t.strides[i];
  }
  return out;
}

// config must not be NULL.
inline RotaryConfig to_cpp(const crp_rotary_config& config) {
  RotaryConfig c;
  c.theta = config.theta;
  c.rotary_dim = config.rotary_dim;
  c.layout = checked_enum<FrequencyLayout>(config.layout, 3, "layout");
  c.sections = {config.sections[0], config.sections[1], config.sections[2]};
  return c;
}

// NULL: the defaults. Threads are checked here, for the CPU and CUDA alike (CUDA runs no
// host threads, but the same params are valid for both).
inline RotaryParams to_cpp(const crp_rotary_params* c_params) {
  RotaryParams params;
  if (!c_params) return params;
  params.pairing = checked_enum<Pairing>(c_params->pairing, 2, "pairing");
  params.direction = checked_enum<Direction>(c_params->direction, 2, "direction");
  if (c_params->threads < 0 || c_params->threads > kMaxThreads)
    fail("threads must be in [0, ", kMaxThreads, "] (got ", c_params->threads, "; 0 = all cores)");
  params.threads = c_params->threads;
  params.isa = checked_enum<Isa>(c_params->isa, kIsaCount, "isa");
  return params;
}

// crp_table_fill's arguments: the config validated, the view's rotary_dim the config's, and
// the values as a span of the view's size (empty when the view's sizes are out of range: the
// table functions refuse those before they look at the values).
struct TableFill {
  RotaryConfig config;
  RotaryParams params;
  std::int64_t batch = 0;
  std::int64_t seq_len = 0;
  std::span<float> values;
};

inline TableFill table_fill(const crp_rotary_config* config, const crp_table_view* table,
                            const crp_rotary_params* params) {
  if (!config) fail("config is NULL");
  if (!table) fail("table is NULL");
  TableFill f{to_cpp(*config), to_cpp(params), table->batch, table->seq_len, {}};
  validate(f.config);
  if (table->rotary_dim != f.config.rotary_dim)
    fail("table: rotary_dim ", table->rotary_dim, " is not the config's rotary_dim ", f.config.rotary_dim);
  std::int64_t tokens = 0;
  if (f.batch >= 0 && f.seq_len >= 0 && f.batch <= kMaxTokens && f.seq_len <= kMaxTokens &&
      !__builtin_mul_overflow(f.batch, f.seq_len, &tokens) && tokens <= kMaxTokens)
    f.values = {table->values, static_cast<std::size_t>(tokens * f.config.rotary_dim)};
  return f;
}

// crp_rotate's arguments. The count is checked against the cap before in[] and out[] are read
// or anything is sized by it.
struct RotateCall {
  RotaryTableView table;
  std::vector<RotaryTarget> targets;
  RotaryParams params;
};

inline RotateCall rotate_call(const crp_table_view* table, const crp_head_tensor* in, const crp_head_tensor* out,
                              int count, const crp_rotary_params* params) {
  if (!table) fail("table is NULL");
  if (count < 0) fail("count ", count, " is negative");
  if (count > kMaxTargets) fail("at most ", kMaxTargets, " targets per call (got ", count, ")");
  if (count > 0 && (!in || !out)) fail("in or out is NULL with count ", count);
  RotateCall call{{table->values, table->batch, table->seq_len, table->rotary_dim}, {}, to_cpp(params)};
  call.targets.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) call.targets.push_back({to_cpp(in[i], "in", i), to_cpp(out[i], "out", i)});
  return call;
}

}  // namespace circlerope::detail
