// The avx2 rotation step alone: rotate_row_fast (src/cpu/kernel_impl.h) over 18 in-place rows
// of 128 elements (one token of Qwen2.5-VL-3B's q and k), L1-resident, forward, for each dtype
// and pairing (neox, gptj); prints the fastest of 24 timings as nanoseconds and as cycles per 32 elements, the
// cycles from a clock estimated here by a chain of dependent adds. It isolates the vector
// step from the row set-up, tiling, threads and memory that `circlerope bench rotary` times,
// which is how docs/development/simd.md found where the bf16 step's time went. Not part of the build (it
// includes the library's internal headers); from the repository root, with the avx2
// kernel's flags:
//   g++ -std=c++20 -O3 -ffp-contract=fast -mavx2 -mfma -mf16c -Isrc/cpu -Iinclude
//       bench/step_cycles.cpp -o /tmp/step_cycles && /tmp/step_cycles
// x86-64 with AVX2 only. Run it on an idle machine, a few times: the spread is the noise.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernel_impl.h"

namespace {

using namespace circlerope::cpu;
using circlerope::Pairing;
using Clock = std::chrono::steady_clock;

constexpr int kRows = 18, kHalf = 64, kReps = 100000;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Cycles per second: ten dependent adds per iteration retire at one per cycle.
double clock_hz() {
  constexpr long n = 100000000;
  const auto t0 = Clock::now();
  long x = 0;
  for (long i = 0; i < n; ++i)
    asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                 "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                 : "+r"(x));
  return 10.0 * n / seconds_since(t0);
}

// Nanoseconds per 32 elements of one timing of kReps passes over the rows.
template <class T, Pairing P>
double time_step(std::vector<typename T::Storage>& x, const float* cosv, const float* sinv) {
  const auto t0 = Clock::now();
  for (int r = 0; r < kReps; ++r)
    for (int k = 0; k < kRows; ++k) {
      typename T::Storage* row = x.data() + k * 2 * kHalf;
      rotate_row_fast<Avx2x16, T, P, false, false>(cosv, sinv, kHalf, row, row);
      asm volatile("" ::: "memory");
    }
  return seconds_since(t0) * 1e9 / (double(kReps) * kRows * 2 * kHalf / 32);
}

template <class T, Pairing P>
double fastest(int timings) {
  std::vector<typename T::Storage> x(kRows * 2 * kHalf);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = narrow<T>(0.001f * static_cast<float>(i % 977));
  // One token's table row, cos then sin of real angles, so that repeated rotation keeps the
  // rows' magnitude (a table with cos^2 + sin^2 < 1 would decay them into subnormals and
  // zeros); re-laid as the kernel re-lays it where the backend asks for that.
  std::vector<float> table(2 * kHalf), relaid(2 * relaid_part<Avx2x16, P>(kHalf));
  for (int i = 0; i < kHalf; ++i) {
    table[i] = std::cos(0.37f * static_cast<float>(i + 1));
    table[kHalf + i] = std::sin(0.37f * static_cast<float>(i + 1));
  }
  const float* cosv = table.data();
  const float* sinv = table.data() + kHalf;
  if constexpr (kRelaidTable<Avx2x16, T, P>) {
    const std::int64_t b = 0, s = 0;
    relay_rows<Avx2x16, T, P>(table.data(), 1, kHalf, &b, &s, 1, relaid.data());
    cosv = relaid.data();
    sinv = relaid.data() + relaid_part<Avx2x16, P>(kHalf);
  }
  double best = 1e30;
  for (int t = 0; t < timings; ++t) best = std::min(best, time_step<T, P>(x, cosv, sinv));
  return best;
}

}  // namespace

int main() {
  const double hz = clock_hz();
  std::printf("clock estimate %.2f GHz\n", hz * 1e-9);
  const double ns[2][3] = {{fastest<F32, Pairing::neox>(24), fastest<BF16, Pairing::neox>(24), fastest<F16, Pairing::neox>(24)},
                           {fastest<F32, Pairing::gptj>(24), fastest<BF16, Pairing::gptj>(24), fastest<F16, Pairing::gptj>(24)}};
  const char* names[3] = {"float32", "bfloat16", "float16"};
  for (int p = 0; p < 2; ++p)
    for (int d = 0; d < 3; ++d)
      std::printf("%s %-9s %.2f ns, %.1f cycles per 32 elements (fastest of 24)\n", p ? "gptj" : "neox", names[d],
                  ns[p][d], ns[p][d] * 1e-9 * hz);
  return 0;
}
