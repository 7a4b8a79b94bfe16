// circlerope front end — the one way the commands and the demo time things.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace circlerope::cli {

inline double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2),
                   values.end());
  return values[values.size() / 2];
}

// Median time of one call of `body` in ns: one warm-up call, then samples of at least
// ~10 ms each, or `min_seconds` where that is shorter (short calls are repeated inside a
// sample), at least 5 samples and `min_seconds` in all. The shorter samples are for smoke
// runs (tests that only check that a benchmark runs): with 10 ms samples a row cost at least
// 50 ms whatever `min_seconds` asked for.
template <typename F>
double median_ns(F&& body, double min_seconds = 0.2) {
  using clock = std::chrono::steady_clock;
  body();  // warm-up
  const double sample_seconds = std::min(0.01, min_seconds);
  int64_t per_sample = 1;
  for (;;) {
    const auto t0 = clock::now();
    for (int64_t i = 0; i < per_sample; ++i) body();
    if (std::chrono::duration<double>(clock::now() - t0).count() > sample_seconds || per_sample > (1 << 24)) break;
    per_sample *= 2;
  }
  std::vector<double> samples;
  const auto start = clock::now();
  while (samples.size() < 5 || std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    for (int64_t i = 0; i < per_sample; ++i) body();
    samples.push_back(std::chrono::duration<double, std::nano>(clock::now() - t0).count() /
                      static_cast<double>(per_sample));
  }
  return median(std::move(samples));
}

}  // namespace circlerope::cli
