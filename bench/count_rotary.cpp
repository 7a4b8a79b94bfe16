// Rotates q and k of Qwen2.5-VL-3B shape (S = 512, Hq 16, Hk 2, D 128) in place a given
// number of times on one thread and nothing else, so that valgrind --tool=callgrind can
// count instructions per element (bench/instructions.sh).
// Usage: circlerope_count_rotary float32|bfloat16|float16 CALLS [portable|avx2|avx512|avx512bf16
//        [automatic|on|off]]   (the last: software prefetch; automatic leaves it off at this size)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "circlerope/rotary.h"

int main(int argc, char** argv) {
  using namespace circlerope;
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: %s DTYPE CALLS [PATH [PREFETCH]]\n", argv[0]);
    return 2;
  }
  try {
    constexpr std::int64_t S = 512, HQ = 16, HK = 2, D = 128;
    const DType dtype = parse_dtype(argv[1]);
    RotaryParams params;
    params.threads = 1;
    if (argc >= 4) params.isa = parse_isa(argv[3]);
    if (argc == 5) params.prefetch = parse_prefetch(argv[4]);
    std::vector<float> positions(3 * S);
    for (std::int64_t i = 0; i < 3 * S; ++i) positions[static_cast<std::size_t>(i)] = 0.37f * static_cast<float>(i % S);
    const RotaryTable table = make_rotary_table(RotaryConfig{}, positions.data(), 1, S, 1);
    const std::size_t size = dtype_size(dtype);
    std::vector<unsigned char> q(static_cast<std::size_t>(S * HQ * D) * size, 0x3C);
    std::vector<unsigned char> k(static_cast<std::size_t>(S * HK * D) * size, 0x3C);
    const HeadTensor qv = bshd(q.data(), dtype, 1, S, HQ, D), kv = bshd(k.data(), dtype, 1, S, HK, D);
    const RotaryTarget targets[2] = {{qv, qv}, {kv, kv}};
    for (long i = 0, n = std::atol(argv[2]); i < n; ++i) rotate(table, targets, params);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
