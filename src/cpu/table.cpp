// Angle tables (docs/spec.md §4) and their AGE plan.
#include <cmath>
#include <cstdint>
#include <limits>

#include "check.h"
#include "circlerope/detail/disjoint.h"
#include "circlerope/detail/fail.h"
#include "circlerope/rotary.h"
#include "kernel.h"
#include "parallel.h"

namespace circlerope {

using detail::fail;
using detail::region;
using detail::require_disjoint;

namespace detail {

std::int64_t check_table_request(const RotaryConfig& config, const float* position_ids,
                                 std::int64_t batch, std::int64_t seq_len, int threads,
                                 bool positions_on_host) {
  validate(config);
  if (batch < 0 || seq_len < 0)
    fail("rotary table: batch ", batch, " and seq_len ", seq_len, " must be >= 0");
  if (threads < 0 || threads > kMaxThreads)
    fail("rotary table: threads must be in [0, ", kMaxThreads, "] (got ", threads, "; 0 = all cores)");
  // The core's limit of one call (positions.h), on each size and on their product.
  std::int64_t tokens = 0;
  if (batch > kMaxTokens || seq_len > kMaxTokens || __builtin_mul_overflow(batch, seq_len, &tokens) ||
      tokens > kMaxTokens)
    fail("rotary table: batch ", batch, " x seq_len ", seq_len, " is more than ", kMaxTokens,
         " tokens, the limit of one call");
  if (tokens > 0 && position_ids == nullptr) fail("rotary table: position_ids is null");
  if (reinterpret_cast<std::uintptr_t>(position_ids) % alignof(float) != 0)
    fail("rotary table: position_ids ", static_cast<const void*>(position_ids),
         " are not aligned to 4 bytes (float32)");
  if (!positions_on_host) return tokens;

  bool uses_axis[3] = {false, false, false};
  for (int a : frequency_axes(config)) uses_axis[a] = true;
  for (int a = 0; a < 3; ++a) {
    if (!uses_axis[a]) continue;
    const float* p = position_ids + a * tokens;
    for (std::int64_t t = 0; t < tokens; ++t)
      if (!std::isfinite(p[t]))
        fail("rotary table: position of axis ", a, " at row ", t / seq_len, ", token ",
             t % seq_len, " is ", p[t], " (positions must be finite)");
  }
  return tokens;
}

void check_table_output(const RotaryConfig& config, const float* position_ids, std::int64_t batch,
                        std::int64_t seq_len, std::int64_t tokens, std::span<float> values) {
  const auto expected = static_cast<std::size_t>(tokens * config.rotary_dim);
  if (values.size() != expected)
    fail("rotary table: the output holds ", values.size(), " floats, expected batch ", batch,
         " x seq_len ", seq_len, " x rotary_dim ", config.rotary_dim, " = ", expected);
  if (expected > 0 && values.data() == nullptr) fail("rotary table: the output is null");
  if (reinterpret_cast<std::uintptr_t>(values.data()) % alignof(float) != 0)
    fail("rotary table: the output ", static_cast<const void*>(values.data()), " is not aligned to 4 bytes (float32)");
  require_disjoint("rotary table", {region(values.data(), values.size(), "values")},
                   {region(position_ids, static_cast<std::size_t>(3 * tokens), "position_ids")});
}

}  // namespace detail

namespace {

void fill_table(const RotaryConfig& config, const float* position_ids, std::int64_t tokens,
                float* values, int threads, cpu::TableKernel kernel) {
  const std::vector<int> axes = frequency_axes(config);
  const std::vector<double> inv_freq = inverse_frequencies(config);
  const int half = config.rotary_dim / 2;
  // The angle and its cos/sin in double, rounded once to float (kernel_impl.h says how
  // close): the reference computes the angle in float32 and loses up to |phi| * 2^-24 of
  // phase at large positions; we do not reproduce that on purpose.
  cpu::TableJob job;
  job.positions = position_ids;
  job.tokens = tokens;
  job.axes = axes.data();
  job.inv_freq = inv_freq.data();
  job.half = half;
  job.values = values;
  cpu::parallel_for(tokens, 256, tokens * half < 65536 ? 1 : cpu::resolve_threads(threads),
                    [&](std::int64_t begin, std::int64_t end) { kernel(job, begin, end); });
}

}  // namespace

RotaryTable make_rotary_table(const RotaryConfig& config, const float* position_ids,
                              std::int64_t batch, std::int64_t seq_len, int threads, Isa isa) {
  const std::int64_t tokens = detail::check_table_request(config, position_ids, batch, seq_len, threads, true);
  const cpu::TableKernel kernel = cpu::table_kernel(isa);
  RotaryTable table;
  table.config_ = config;
  table.batch_ = batch;
  table.seq_len_ = seq_len;
  table.values_.resize(static_cast<std::size_t>(tokens * config.rotary_dim));
  fill_table(config, position_ids, tokens, table.values_.data(), threads, kernel);
  return table;
}

void make_rotary_table_into(const RotaryConfig& config, const float* position_ids,
                            std::int64_t batch, std::int64_t seq_len, std::span<float> values,
                            int threads, Isa isa) {
  const std::int64_t tokens = detail::check_table_request(config, position_ids, batch, seq_len, threads, true);
  const cpu::TableKernel kernel = cpu::table_kernel(isa);
  detail::check_table_output(config, position_ids, batch, seq_len, tokens, values);
  fill_table(config, position_ids, tokens, values.data(), threads, kernel);
}

RotaryTable make_rotary_table(const RotaryConfig& config, const Positions& positions,
                              int threads, Isa isa) {
  const auto expected = static_cast<std::size_t>(3 * positions.batch * positions.seq_len);
  if (positions.position_ids.size() != expected)
    fail("rotary table: positions hold ", positions.position_ids.size(), " values, expected 3 x ",
         positions.batch, " x ", positions.seq_len);
  return make_rotary_table(config, positions.position_ids.data(), positions.batch,
                           positions.seq_len, threads, isa);
}

const RotaryTable& RotaryPlan::layer(int l) const {
  const int g = plan.layer_geometry(l);  // range check with the plan's message
  if (tables.size() != plan.schemes().size())
    fail("rotary plan: ", tables.size(), " tables for ", plan.schemes().size(), " geometries (use make_rotary_plan)");
  return tables[static_cast<std::size_t>(g)];
}

RotaryPlan make_rotary_plan(const AgePositions& positions, const RotaryConfig& config,
                            int threads) {
  if (positions.geometries.size() != positions.plan.schemes().size())
    fail("rotary plan: ", positions.geometries.size(), " geometries for ",
         positions.plan.schemes().size(), " schemes (use age_rope_index)");
  RotaryPlan out{positions.plan, {}};
  out.tables.reserve(positions.geometries.size());
  for (const Positions& p : positions.geometries)
    out.tables.push_back(make_rotary_table(config, p, threads));
  return out;
}

}  // namespace circlerope
