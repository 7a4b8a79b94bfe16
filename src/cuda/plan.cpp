#include "plan.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace circlerope::gpu {

namespace {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The largest |offset| in elements from a view's data pointer to any of its elements, and to
// every partial sum of one (sum over dimensions of |stride| x (size - 1)).
std::int64_t offset_span(const HeadTensor& t) {
  std::int64_t span = 0;
  for (std::size_t d = 0; d < 4; ++d)
    span += (t.strides[d] < 0 ? -t.strides[d] : t.strides[d]) * (t.shape[d] > 0 ? t.shape[d] - 1 : 0);
  return span;
}

bool rows_aligned(const HeadTensor& t) {
  const auto size = static_cast<std::int64_t>(dtype_size(t.dtype));
  if (!aligned16(t.data) || t.strides[3] != 1) return false;
  for (std::size_t d = 0; d < 3; ++d)
    if (t.shape[d] > 1 && (t.strides[d] * size) % 16 != 0) return false;
  return true;
}

}  // namespace

bool vector_path(const detail::CheckedTarget& target, int rotary_dim, Pairing pairing,
                 const float* table) {
  const int lanes = static_cast<int>(16 / dtype_size(target.in.dtype));
  const int per_pack = pairing == Pairing::neox ? rotary_dim / 2 : rotary_dim;
  return per_pack % lanes == 0 && aligned16(table) && rows_aligned(target.in) &&
         rows_aligned(target.out);
}

std::vector<PlannedLaunch> plan_rotate(const RotaryTableView& table,
                                       std::span<const detail::CheckedTarget> targets,
                                       Pairing pairing, Direction direction,
                                       const PlanOptions& options) {
  if (options.heads_per_item != 0 && options.heads_per_item != 1 && options.heads_per_item != 2 &&
      options.heads_per_item != 4)
    throw std::invalid_argument("plan_rotate: heads_per_item must be 0 (by dtype), 1, 2 or 4");
  std::vector<PlannedLaunch> launches;
  // The largest table offset, and per launch the largest element offset of any view.
  const std::int64_t table_span = table.batch * table.seq_len * static_cast<std::int64_t>(table.rotary_dim);
  std::vector<std::int64_t> widest;
  const int half = table.rotary_dim / 2;
  for (const bool vector : {true, false}) {
    PlannedLaunch* current = nullptr;
    for (const detail::CheckedTarget& c : targets) {
      if (vector_path(c, table.rotary_dim, pairing, table.values) != vector) continue;
      const int per_item = options.heads_per_item != 0 ? options.heads_per_item
                           : c.in.dtype == DType::float32 ? 1 : 2;
      if (current == nullptr || current->job.target_count == kMaxLaunchTargets) {
        launches.emplace_back();
        current = &launches.back();
        current->vector = vector;
        current->dtype = c.in.dtype;
        current->job.table = table.values;
        current->job.seq = make_divmod(static_cast<std::uint64_t>(table.seq_len));
        current->job.half = half;
        current->job.gptj = pairing == Pairing::gptj;
        current->job.backward = direction == Direction::backward;
        current->job.heads_per_item = per_item;
        widest.push_back(table_span);
      }
      widest.back() = std::max({widest.back(), offset_span(c.in), offset_span(c.out)});
      RotateLaunch& job = current->job;
      TargetLaunch& t = job.targets[job.target_count++];
      t.in = c.in.data;
      t.out = c.out.data;
      for (std::size_t d = 0; d < 4; ++d) {
        t.in_stride[d] = c.in.strides[d];
        t.out_stride[d] = c.out.strides[d];
      }
      const int lanes = static_cast<int>(16 / dtype_size(c.in.dtype));
      t.rot_units = !vector ? half : pairing == Pairing::neox ? half / lanes : 2 * half / lanes;
      const std::int64_t tail = c.in_place ? 0 : c.in.shape[3] - 2 * half;
      const std::int64_t heads = c.in.shape[2];
      const std::int64_t groups = (heads + per_item - 1) / per_item;
      const std::int64_t units = t.rot_units + tail;
      t.heads = heads;
      t.units = make_divmod(static_cast<std::uint64_t>(units));
      t.groups = make_divmod(static_cast<std::uint64_t>(groups));
      t.first_item = job.items;
      job.items += static_cast<std::uint64_t>(c.in.shape[0] * c.in.shape[1] * groups * units);
    }
  }
  constexpr std::int64_t kLimit32 = (std::int64_t{1} << 31) - 1;
  for (std::size_t i = 0; i < launches.size(); ++i)
    launches[i].job.index32 = options.allow_index32 &&
                              launches[i].job.items <= static_cast<std::uint64_t>(kLimit32) &&
                              widest[i] <= kLimit32;
  return launches;
}

TableLaunch plan_table(const RotaryConfig& config, const float* positions, std::int64_t batch,
                       std::int64_t seq_len, float* values, unsigned long long* report) {
  TableLaunch t;
  const int half = config.rotary_dim / 2;
  const std::int64_t tokens = batch * seq_len;
  t.seq = make_divmod(static_cast<std::uint64_t>(seq_len > 0 ? seq_len : 1));
  t.report = report;
  t.positions = positions;
  t.values = values;
  t.tokens = tokens;
  t.items = static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(half);
  t.half = make_divmod(static_cast<std::uint64_t>(half));
  t.theta = config.theta;
  t.rotary_dim = config.rotary_dim;
  t.layout = static_cast<int>(config.layout);
  for (std::size_t i = 0; i < 3; ++i) t.sections[i] = config.sections[i];
  return t;
}

std::string position_error_message(unsigned long long report) {
  const PositionReport r = decode_report(report);
  const char* value = r.kind == 0 ? "nan" : r.kind == 1 ? "inf" : "-inf";
  return "rotary table: position of axis " + std::to_string(r.axis) + " at row " + std::to_string(r.row) +
         ", token " + std::to_string(r.token) + " is " + value + " (positions must be finite)";
}

}  // namespace circlerope::gpu
