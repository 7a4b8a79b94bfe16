// The one place where a rotate call is validated, a code path is chosen and work is threaded.
#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>

#include "circlerope/detail/cpu_probe.h"
#include "check.h"
#include "circlerope/detail/fail.h"
#include "circlerope/rotary.h"
#include "kernel.h"
#include "overlap.h"
#include "parallel.h"
#include "known_answer.h"

namespace circlerope {

using detail::fail;

std::string_view to_string(DType v) {
  switch (v) {
    case DType::float32: return "float32";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
  }
  return "?";
}

std::string_view to_string(Pairing v) { return v == Pairing::neox ? "neox" : "gptj"; }

std::string_view to_string(Direction v) {
  return v == Direction::forward ? "forward" : "backward";
}

std::string_view to_string(Prefetch v) {
  switch (v) {
    case Prefetch::automatic: return "automatic";
    case Prefetch::on: return "on";
    case Prefetch::off: return "off";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  if (text == "float32" || text == "fp32") return DType::float32;
  if (text == "bfloat16" || text == "bf16") return DType::bfloat16;
  if (text == "float16" || text == "fp16") return DType::float16;
  fail("unknown dtype ", detail::quoted(text), " (expected float32, bfloat16 or float16)");
}

Pairing parse_pairing(std::string_view text) {
  if (text == "neox") return Pairing::neox;
  if (text == "gptj") return Pairing::gptj;
  fail("unknown pairing ", detail::quoted(text), " (expected neox or gptj)");
}

Prefetch parse_prefetch(std::string_view text) {
  for (Prefetch p : {Prefetch::automatic, Prefetch::on, Prefetch::off})
    if (text == to_string(p)) return p;
  fail("unknown prefetch mode ", detail::quoted(text), " (expected automatic, on or off)");
}

std::size_t dtype_size(DType v) { return v == DType::float32 ? 4 : 2; }

namespace {

// The kernels' view of the process's one path choice (detail/cpu_probe.h): the same probe
// and CIRCLEROPE_ISA, plus the known-answer comparison of each AVX-512 path with avx2
// (known_answer.h), so that they never touch user data on a CPU where they disagree with avx2
// (they have run on real hardware on one CPU model, an AMD Zen 4; docs/development/simd.md). avx512bf16
// is avx512 with the hardware's bf16 rounding: the same bits, and bf16 rows 1.2-1.3x faster
// where the arithmetic bounds them (AMD Zen 4, docs/development/simd.md), so automatic prefers it.
bool known_answer(Isa isa) {
#if defined(CIRCLEROPE_HAVE_X86_KERNELS)
  if (isa == Isa::avx512)
    return cpu::kernels_agree(cpu::range_kernel_avx512(), cpu::range_kernel_avx2()) &&
           cpu::tables_agree(cpu::table_kernel_avx512(), cpu::table_kernel_avx2());
  if (isa == Isa::avx512bf16)
    return cpu::kernels_agree(cpu::range_kernel_avx512bf16(), cpu::range_kernel_avx2()) &&
           cpu::tables_agree(cpu::table_kernel_avx512bf16(), cpu::table_kernel_avx2());
#endif
  return isa == Isa::portable || isa == Isa::avx2;
}

// Asked on every rotate call (once per layer when decoding): decided once, then a lookup.
const detail::CpuPaths& paths() {
  static const detail::CpuPaths table = detail::decide_cpu_paths(detail::cpu_probe(), &known_answer);
  return table;
}

Isa resolve_isa(Isa isa) { return paths().resolve(isa); }

std::string shape_text(const std::array<std::int64_t, 4>& v) {
  std::string s = "[";
  for (int i = 0; i < 4; ++i) {
    if (i) s.append(", ");
    s.append(std::to_string(v[static_cast<std::size_t>(i)]));
  }
  s.append("]");
  return s;
}

constexpr std::int64_t kMaxOffset = std::numeric_limits<std::int64_t>::max() / 16;

// Largest element offset of the view plus one (0 for an empty view), overflow-checked.
// "rotate target 1 in", formatted only when a message is built: a valid call (a decode
// step, every layer) allocates no strings.
struct TargetName {
  std::size_t index;
  const char* part = "";
};
std::ostream& operator<<(std::ostream& o, const TargetName& n) {
  return o << "rotate target " << n.index << n.part;
}

std::int64_t span_elements(const HeadTensor& t, const TargetName& name) {
  std::int64_t last = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    if (t.shape[i] < 0) fail(name, ": shape ", shape_text(t.shape), " has a negative size");
    if (t.strides[i] < 0)
      fail(name, ": strides ", shape_text(t.strides), " have a negative stride (not supported)");
  }
  for (std::size_t i = 0; i < 4; ++i)
    if (t.shape[i] == 0) return 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const std::int64_t n = t.shape[i] - 1;
    if (t.strides[i] != 0 && n > (kMaxOffset - last) / t.strides[i])
      fail(name, ": shape ", shape_text(t.shape), " with strides ", shape_text(t.strides),
           " addresses more memory than this process can");
    last += n * t.strides[i];
  }
  if (t.data == nullptr) fail(name, ": data is null");
  // Kernels load elements as float / uint16_t: a pointer off the element size is undefined
  // behaviour (and a fault on some CPUs and every GPU), so it is refused, not read bytewise.
  const std::size_t size = dtype_size(t.dtype);
  if (reinterpret_cast<std::uintptr_t>(t.data) % size != 0)
    fail(name, ": data ", t.data, " is not aligned to its element size (", size, " bytes for ",
         to_string(t.dtype), ")");
  return last + 1;
}

// True unless every dimension (by increasing stride) steps past everything the smaller ones
// reach: the sufficient condition for distinct elements to have distinct addresses.
bool may_overlap_itself(const HeadTensor& t) {
  std::array<int, 4> order = {0, 1, 2, 3};
  std::sort(order.begin(), order.end(), [&](int a, int b) { return t.strides[a] < t.strides[b]; });
  std::int64_t reach = 0;  // largest offset reachable with the dims seen so far
  for (int d : order) {
    if (t.shape[d] <= 1) continue;
    if (t.strides[d] <= reach) return true;
    reach += (t.shape[d] - 1) * t.strides[d];
  }
  return false;
}

bool same_view(const HeadTensor& a, const HeadTensor& b) {
  return a.data == b.data && a.strides == b.strides;
}

// Throws the message parts unless the overlap decision (overlap.h) says disjoint.
template <typename... Parts>
void require_disjoint(cpu::Overlap decision, const Parts&... message) {
  switch (decision) {
    case cpu::Overlap::disjoint: return;
    case cpu::Overlap::shared: fail(message...);
    case cpu::Overlap::undecided:
      fail(message..., "? (undecided: their strides are too irregular to tell within the work limit; give "
                       "each its own buffer)");
  }
}
template <typename... Parts>
void require_disjoint(const HeadTensor& a, const HeadTensor& b, const Parts&... message) {
  require_disjoint(cpu::byte_overlap(a, b), message...);
}

}  // namespace

namespace cpu {

RangeKernel range_kernel(Isa isa) {
  switch (resolve_isa(isa)) {
#if defined(CIRCLEROPE_HAVE_X86_KERNELS)
    case Isa::avx2: return range_kernel_avx2();
    case Isa::avx512: return range_kernel_avx512();
    case Isa::avx512bf16: return range_kernel_avx512bf16();
#endif
    default: return range_kernel_portable();
  }
}

TableKernel table_kernel(Isa isa) {
  switch (resolve_isa(isa)) {
#if defined(CIRCLEROPE_HAVE_X86_KERNELS)
    case Isa::avx2: return table_kernel_avx2();
    case Isa::avx512: return table_kernel_avx512();
    case Isa::avx512bf16: return table_kernel_avx512bf16();
#endif
    default: return table_kernel_portable();
  }
}

}  // namespace cpu

std::vector<Isa> available_isas() {
  paths().resolve(Isa::automatic);  // throws for an unusable CIRCLEROPE_ISA
  std::vector<Isa> out;
  for (const IsaStatus& s : paths().status)
    if (s.available) out.push_back(s.isa);
  return out;
}

Isa automatic_isa() { return paths().resolve(Isa::automatic); }

CpuPath cpu_path() {
  paths().resolve(Isa::automatic);
  return paths().automatic;
}

std::vector<IsaStatus> isa_status() { return {paths().status.begin(), paths().status.end()}; }

HeadTensor bshd(void* data, DType dtype, std::int64_t batch, std::int64_t seq,
                std::int64_t heads, std::int64_t head_dim) {
  return {data, dtype, {batch, seq, heads, head_dim},
          {seq * heads * head_dim, heads * head_dim, head_dim, 1}};
}

HeadTensor bhsd(void* data, DType dtype, std::int64_t batch, std::int64_t seq,
                std::int64_t heads, std::int64_t head_dim) {
  return {data, dtype, {batch, seq, heads, head_dim},
          {heads * seq * head_dim, head_dim, seq * head_dim, 1}};
}

namespace detail {

std::vector<CheckedTarget> check_rotate_targets(const RotaryTableView& table,
                                                std::span<const RotaryTarget> targets) {
  const int rot = table.rotary_dim;
  if (rot < 2 || rot > 1024 || rot % 2 != 0)
    fail("table: rotary_dim ", rot, " must be even and in 2..1024");
  // Tables hold at most kMaxTokens tokens (make_rotary_table); a view from elsewhere too, so
  // that batch x seq_len cannot overflow.
  if (table.batch < 0 || table.seq_len < 0 || table.batch > kMaxTokens || table.seq_len > kMaxTokens ||
      table.batch * table.seq_len > kMaxTokens)
    fail("table: batch ", table.batch, " and seq_len ", table.seq_len, " must be >= 0 and hold at most ",
         kMaxTokens, " tokens");
  if (table.values == nullptr && table.batch * table.seq_len > 0) fail("table: values are null");
  if (reinterpret_cast<std::uintptr_t>(table.values) % alignof(float) != 0)
    fail("table: values ", static_cast<const void*>(table.values), " are not aligned to 4 bytes (float32)");
  std::vector<CheckedTarget> checked;
  if (targets.empty()) return checked;
  if (targets.size() > static_cast<std::size_t>(kMaxTargets))
    fail("at most ", kMaxTargets, " targets per call (got ", targets.size(), ")");

  for (std::size_t i = 0; i < targets.size(); ++i) {
    const HeadTensor& in = targets[i].in;
    const HeadTensor& out = targets[i].out;
    const TargetName name{i};
    if (in.dtype != targets[0].in.dtype)
      fail(name, ": dtype ", to_string(in.dtype), " differs from target 0's ",
           to_string(targets[0].in.dtype), " (rotate one dtype per call)");
    if (out.dtype != in.dtype)
      fail(name, ": out dtype ", to_string(out.dtype), " differs from in dtype ",
           to_string(in.dtype));
    if (out.shape != in.shape)
      fail(name, ": out shape ", shape_text(out.shape), " differs from in shape ",
           shape_text(in.shape));
    if (in.shape[0] != table.batch || in.shape[1] != table.seq_len)
      fail(name, ": shape ", shape_text(in.shape), " has batch ", in.shape[0], " and seq ",
           in.shape[1], " but the table was built for batch ", table.batch, " and seq ",
           table.seq_len);
    if (in.shape[3] < rot)
      fail(name, ": head_dim ", in.shape[3], " is smaller than the rotary dim ", rot);
    const std::int64_t in_span = span_elements(in, {i, " in"});
    span_elements(out, {i, " out"});  // validates out's sizes and strides
    if (in_span == 0) continue;
    const bool in_place = same_view(in, out);
    if (!in_place) {
      if (in.data == out.data)
        fail(name, ": out has the same data as in but strides ", shape_text(out.strides),
             " instead of ", shape_text(in.strides), " (in place needs the same view)");
      require_disjoint(in, out, name, ": out overlaps in without being the same view (in place needs the same data "
                       "and strides)");
    }
    // Writes must not reach what another target writes or reads (overlap.h decides on the
    // bytes, so q and k views of one fused qkv buffer pass; out[1] = out[0] + 1 float, which
    // only a check of the data pointers let through, does not).
    for (std::size_t j = 0; j < i; ++j) {
      if (targets[j].out.data == out.data)  // the cheap, common mistake: one tensor passed twice
        fail(name, ": out has the same data as target ", j, "'s out (each would be rotated twice)");
      require_disjoint(targets[j].out, out, name, ": out shares memory with target ", j, "'s out");
    }
    for (std::size_t j = 0; j < targets.size(); ++j) {
      if (j == i || span_elements(targets[j].in, {j, " in"}) == 0) continue;
      if (!same_view(targets[j].in, targets[j].out))  // an in place target's in is its out, checked above
        require_disjoint(targets[j].in, out, name, ": out shares memory with target ", j,
                         "'s in (target ", j, " would read what target ", i, " writes)");
    }
    if (may_overlap_itself(out))
      fail(name, ": out strides ", shape_text(out.strides), " for shape ",
           shape_text(out.shape), " may write one element twice");
    // The table is read while the outs are written (bounded sizes: at most 2^24 tokens x
    // 1024 floats).
    const auto table_bytes = static_cast<std::size_t>(table.batch * table.seq_len * rot) * sizeof(float);
    require_disjoint(cpu::byte_overlap(out, table.values, table_bytes), name,
                     ": out shares memory with the table's values (they are read while out is written)");
    checked.push_back({in, out, in_place, i});
  }
  return checked;
}

}  // namespace detail

void rotate(const RotaryTableView& table, std::span<const RotaryTarget> targets,
            const RotaryParams& params) {
  if (params.threads < 0 || params.threads > kMaxThreads)
    fail("threads must be in [0, ", kMaxThreads, "] (got ", params.threads, "; 0 = all cores)");
  if (params.prefetch != Prefetch::automatic && params.prefetch != Prefetch::on && params.prefetch != Prefetch::off)
    fail("prefetch ", static_cast<int>(params.prefetch), " is not a Prefetch value (automatic, on or off)");
  const cpu::RangeKernel kernel = cpu::range_kernel(params.isa);
  const std::vector<detail::CheckedTarget> checked = detail::check_rotate_targets(table, targets);
  if (checked.empty()) return;
  const int rot = table.rotary_dim;

  std::vector<cpu::TargetJob> jobs;
  std::int64_t bytes = 0;
  for (const detail::CheckedTarget& c : checked) {
    const HeadTensor& in = c.in;
    const HeadTensor& out = c.out;
    cpu::TargetJob job;
    job.in = in.data;
    job.out = out.data;
    job.heads = in.shape[2];
    job.head_dim = in.shape[3];
    for (std::size_t d = 0; d < 4; ++d) {
      job.in_stride[d] = in.strides[d];
      job.out_stride[d] = out.strides[d];
    }
    job.in_place = c.in_place;
    // Streaming stores (below) need an out of place target with 16-byte aligned rows. A
    // dimension of size 1 never steps, so its stride (any value: the spans ignore it) is not
    // looked at, and no stride is multiplied: 16 bytes are 16 / size elements.
    const auto size = static_cast<std::int64_t>(dtype_size(out.dtype));
    bool aligned = reinterpret_cast<std::uintptr_t>(out.data) % 16 == 0;
    for (std::size_t d = 0; d < 3; ++d)
      aligned = aligned && (out.shape[d] <= 1 || out.strides[d] % (16 / size) == 0);
    job.stream = !c.in_place && aligned;
    jobs.push_back(job);
    // An out's elements have distinct offsets below kMaxOffset (checked), so one target's
    // traffic is below 2^62 bytes; the sum over targets saturates.
    const std::int64_t traffic = 2 * in.shape[0] * in.shape[1] * in.shape[2] * in.shape[3] * size;
    if (__builtin_add_overflow(bytes, traffic, &bytes)) bytes = std::numeric_limits<std::int64_t>::max();
  }
  // Out of place and larger than a last-level cache slice: write around the cache. A cached
  // write first reads the line it fills (three streams instead of two); measured on S=16384
  // fp32 out of place, 16.4 -> 10.8 ms. Smaller outputs stay cached for the attention that
  // reads them next.
  constexpr std::int64_t kStreamBytes = std::int64_t{16} << 20;
  if (bytes / 2 < kStreamBytes)
    for (cpu::TargetJob& j : jobs) j.stream = false;
  // Software prefetch ahead of every row (kernel_impl.h) once q and k are too large for the
  // caches to keep between calls; below that the hardware prefetchers keep up and its
  // instructions only cost time.
  constexpr std::int64_t kPrefetchBytes = std::int64_t{16} << 20;

  cpu::KernelJob job;
  job.table = table.values;
  job.seq_len = table.seq_len;
  job.half = rot / 2;
  job.dtype = checked[0].in.dtype;
  job.pairing = params.pairing;
  job.backward = params.direction == Direction::backward;
  job.targets = jobs.data();
  job.target_count = static_cast<int>(jobs.size());
  job.prefetch = params.prefetch == Prefetch::on ||
                 (params.prefetch == Prefetch::automatic && bytes / 2 >= kPrefetchBytes);

  // Below this much traffic a fork/join costs more than it saves (decode steps).
  constexpr std::int64_t kSerialBytes = 256 * 1024;
  const int threads = bytes < kSerialBytes ? 1 : cpu::resolve_threads(params.threads);
  cpu::parallel_for(table.batch * table.seq_len, 16, threads,
                    [&](std::int64_t begin, std::int64_t end) { kernel(job, begin, end); });
}

void rotate(const RotaryTable& table, std::span<const RotaryTarget> targets,
            const RotaryParams& params) {
  rotate(table.view(), targets, params);
}

void rotate(const RotaryTable& table, const HeadTensor& x, const RotaryParams& params) {
  const RotaryTarget target{x, x};
  rotate(table.view(), std::span<const RotaryTarget>(&target, 1), params);
}

}  // namespace circlerope
