// The rotation and its table on Qwen2.5-VL-3B attention shapes (batch 1, Hq 16, Hk 2, head
// dim 128, sections 16/24/24, theta 1e6), with GB/s and tokens/s counters; the decode step
// (S = 1) for call overhead. `circlerope bench rotary` adds the copy-bandwidth comparison.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "circlerope/rotary.h"

namespace {

using namespace circlerope;

constexpr std::int64_t kQHeads = 16, kKHeads = 2, kHeadDim = 128;

std::vector<float> fractional_positions(std::int64_t seq) {
  std::vector<float> p(static_cast<std::size_t>(3 * seq));
  for (std::int64_t i = 0; i < 3 * seq; ++i) p[static_cast<std::size_t>(i)] = static_cast<float>(i % seq) * 0.731f - 9.5f;
  return p;
}

// range(0): seq_len; range(1): 1 = in place, 0 = out of place.
void rotate_qk(benchmark::State& state, DType dtype, Direction direction, Isa isa) {
  const std::int64_t seq = state.range(0);
  const bool in_place = state.range(1) != 0;
  const auto positions = fractional_positions(seq);
  const RotaryTable table = make_rotary_table(RotaryConfig{}, positions.data(), 1, seq);
  const std::size_t size = dtype_size(dtype);
  std::vector<unsigned char> q(static_cast<std::size_t>(seq * kQHeads * kHeadDim) * size, 0x3C);
  std::vector<unsigned char> k(static_cast<std::size_t>(seq * kKHeads * kHeadDim) * size, 0x3C);
  std::vector<unsigned char> q_out(q.size(), 0), k_out(k.size(), 0);
  const HeadTensor qv = bshd(q.data(), dtype, 1, seq, kQHeads, kHeadDim);
  const HeadTensor kv = bshd(k.data(), dtype, 1, seq, kKHeads, kHeadDim);
  const RotaryTarget targets[2] = {
      {qv, in_place ? qv : bshd(q_out.data(), dtype, 1, seq, kQHeads, kHeadDim)},
      {kv, in_place ? kv : bshd(k_out.data(), dtype, 1, seq, kKHeads, kHeadDim)}};
  RotaryParams params;
  params.direction = direction;
  params.isa = isa;
  for (auto _ : state) {
    rotate(table, targets, params);
    benchmark::ClobberMemory();
  }
  const double bytes = 2.0 * static_cast<double>(q.size() + k.size()) + static_cast<double>(table.bytes());
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(seq),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  for (Isa isa : available_isas())
    for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
      for (Direction direction : {Direction::forward, Direction::backward}) {
        const std::string name = std::string("rotate_qk/") + std::string(to_string(isa)) + "/" +
                                 std::string(to_string(dtype)) + "/" + std::string(to_string(direction));
        benchmark::RegisterBenchmark(name.c_str(), rotate_qk, dtype, direction, isa)
            ->ArgNames({"S", "in_place"})
            ->ArgsProduct({{1, 1024, 4096, 16384}, {1, 0}})
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
}

void table(benchmark::State& state) {
  const std::int64_t seq = state.range(0);
  const auto positions = fractional_positions(seq);
  for (auto _ : state) benchmark::DoNotOptimize(make_rotary_table(RotaryConfig{}, positions.data(), 1, seq));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(seq),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(table)->ArgName("S")->Arg(1)->Arg(1024)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
