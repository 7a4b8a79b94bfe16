// `circlerope check` and `circlerope bench rotary`: the kernels against the float64
// reference, and their speed against this machine's copy bandwidth.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include <nlohmann/json.hpp>

#include "circlerope/rotary.h"

namespace circlerope::cli {

// The command `circlerope check`: the reference comparison (reference::compare_every_path) of
// every path this process runs; prints a summary to `out`, progress to `err`. Returns 0 when
// every case passes, 1 otherwise.
int run_check(std::uint64_t seed, int rounds, std::ostream& out, std::ostream& err);

struct RotaryBenchOptions {
  std::vector<std::int64_t> seq_lens = {1024, 4096, 16384};
  std::vector<DType> dtypes = {DType::float32, DType::bfloat16};
  double min_seconds = 0.25;  // per row
  int threads = 0;            // 0 = all cores (the copy baselines use the same count)
  std::vector<Isa> isas;      // empty: every path this machine runs
  int copy_mib = 256;  // size of the machine-wide copy streams; far beyond the caches by default
  Prefetch prefetch = Prefetch::automatic;  // the rotation's software prefetch
  bool prefetch_compare = false;  // measure every row without and with prefetch, alternately
  Pairing pairing = Pairing::neox;  // Qwen's is neox
};

// Qwen2.5-VL-3B attention shapes (Hq 16, Hk 2, head dim 128, sections 16/24/24, theta 1e6,
// batch 1): forward and backward, in place and out of place, on each path. Each row is
// compared with a fair copy of its own buffers, alternately measured: in place with an
// in-place read-modify-write of q and k, out of place with the better of memcpy and a
// streaming-store copy of q and k into the outputs. The JSON names the paths it skipped and
// why. Progress lines go to `err`; a forced path this machine lacks is an Error.
nlohmann::json bench_rotary(const RotaryBenchOptions& options, std::ostream& err);
void print_bench_rotary_table(const nlohmann::json& result, std::ostream& out);
// A bar chart of bench_rotary's rows against their copy bandwidth (docs/rotary_bench.svg).
std::string render_bandwidth_svg(const nlohmann::json& result);

// The demo's rotation section: an AGE plan's tables for a request, every layer's q and k
// rotated with Qwen2.5-VL-3B shapes, the error against the float64 reference, timings.
void demo_rotation(const RopeIndexInput& input, const VisionConfig& vision,
                   const CircleConfig& circle, std::ostream& out);


}  // namespace circlerope::cli
