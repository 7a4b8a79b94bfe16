// Runs rope_index_into on the benchmark batch a given number of times and
// nothing else, so that valgrind --tool=callgrind can count instructions per
// batch (bench/instructions.sh): a repeatable measure on a machine whose wall
// time drifts.  Usage: circlerope_count_positions circle|mrope|vanilla|unordered CALLS
// [portable|avx2|avx512]   (the positions path, positions_simd.h; default: automatic)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "circlerope/cpu_path.h"
#include "circlerope/detail/positions_path.h"
#include "workload.h"

int main(int argc, char** argv) {
  using namespace circlerope;
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s SCHEME CALLS [portable|avx2|avx512]\n", argv[0]);
    return 2;
  }
  try {
    if (argc == 4) {
      detail::set_positions_path(parse_isa(argv[3]));
    }
    const Geometry g{parse_scheme(argv[1]), CircleConfig{}};
    const cli::Request batch = cli::benchmark_batch(g);
    std::vector<float> ids(static_cast<size_t>(3 * batch.batch * batch.seq_len));
    std::vector<float> deltas(static_cast<size_t>(batch.batch));
    for (long i = 0, n = std::atol(argv[2]); i < n; ++i)
      rope_index_into(batch.input(), batch.vision, g, ids, deltas);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
