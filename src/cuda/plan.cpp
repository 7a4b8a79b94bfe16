#include "plan.h"

#include <cstdint>

namespace circlerope::gpu {

namespace {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

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
                                       Pairing pairing, Direction direction) {
  std::vector<PlannedLaunch> launches;
  const int half = table.rotary_dim / 2;
  for (const bool vector : {true, false}) {
    PlannedLaunch* current = nullptr;
    for (const detail::CheckedTarget& c : targets) {
      if (vector_path(c, table.rotary_dim, pairing, table.values) != vector) continue;
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
      }
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
      const std::int64_t groups = (heads + kHeadsPerItem - 1) / kHeadsPerItem;
      const std::int64_t units = t.rot_units + tail;
      t.heads = heads;
      t.units = make_divmod(static_cast<std::uint64_t>(units));
      t.groups = make_divmod(static_cast<std::uint64_t>(groups));
      t.first_item = job.items;
      job.items += static_cast<std::uint64_t>(c.in.shape[0] * c.in.shape[1] * groups * units);
    }
  }
  return launches;
}

TableLaunch plan_table(const RotaryConfig& config, const float* positions, std::int64_t tokens,
                       float* values) {
  TableLaunch t;
  const int half = config.rotary_dim / 2;
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

}  // namespace circlerope::gpu
