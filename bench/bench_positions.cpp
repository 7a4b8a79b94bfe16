// Positions for the issue-2 benchmark batch (8 x 814 tokens, two images per row)
// under every scheme, plus the pieces: splitting token ids, ring construction
// and the metrics. `circlerope bench positions` times the same batch.
#include <benchmark/benchmark.h>

#include <vector>

#include "circlerope/circle.h"
#include "circlerope/ptd.h"
#include "workload.h"

namespace {

using namespace circlerope;

void positions(benchmark::State& state, Scheme scheme) {
  const Geometry g{scheme, CircleConfig{}};
  const cli::Request batch = cli::benchmark_batch(g, static_cast<int>(state.range(0)));
  std::vector<float> ids(static_cast<size_t>(3 * batch.batch * batch.seq_len));
  std::vector<float> deltas(static_cast<size_t>(batch.batch));
  for (auto _ : state) {
    rope_index_into(batch.input(), batch.vision, g, ids, deltas);
    benchmark::DoNotOptimize(ids.data());
    benchmark::ClobberMemory();
  }
  const double tokens = static_cast<double>(batch.batch * batch.seq_len);
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["out_GB/s"] = benchmark::Counter(tokens * 3 * sizeof(float),
                                                  benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(positions, circle, Scheme::circle)->Arg(8)->Arg(1);
BENCHMARK_CAPTURE(positions, mrope, Scheme::mrope)->Arg(8)->Arg(1);
BENCHMARK_CAPTURE(positions, vanilla, Scheme::vanilla)->Arg(8);
BENCHMARK_CAPTURE(positions, unordered, Scheme::unordered)->Arg(8);

// The full API (allocating Positions, token map and block list).
void positions_with_map(benchmark::State& state) {
  const Geometry g{Scheme::circle, CircleConfig{}};
  const cli::Request batch = cli::benchmark_batch(g, 8);
  for (auto _ : state) benchmark::DoNotOptimize(rope_index(batch.input(), batch.vision, g));
}
BENCHMARK(positions_with_map);

// One ring: the trigonometry that dominates a cold Circle-RoPE block.
void ring(benchmark::State& state) {
  const CircleConfig c;
  for (auto _ : state) benchmark::DoNotOptimize(circle_ring(state.range(0), state.range(1), c));
  state.SetItemsProcessed(state.iterations() * state.range(0) * state.range(1));
}
BENCHMARK(ring)->Args({16, 16})->Args({14, 22})->Args({64, 64});

void metrics(benchmark::State& state) {
  const Geometry g{Scheme::circle, CircleConfig{}};
  const cli::Request batch = cli::benchmark_batch(g, 1);
  const Positions p = rope_index(batch.input(), batch.vision, g);
  for (auto _ : state) benchmark::DoNotOptimize(coupling_metrics(p, RotaryConfig{}));
}
BENCHMARK(metrics)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
