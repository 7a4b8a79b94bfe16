// circlerope front end — the fixed inputs of the benchmark and the demo, so the
// CLI, the Google Benchmark program and the tests time and check the same thing.
#pragma once

#include <string>

#include "request.h"

namespace circlerope::cli {

// The benchmark batch: `rows` rows, each 100 text + 16x16 image + 50
// text + 14x22 image + 100 text tokens (merged grids; the text counts include
// the vision start/end markers), as Qwen2.5-VL token ids. S = 814.
Request benchmark_batch(const Geometry& geometry, int rows = 8);
inline constexpr const char* kBenchmarkShape =
    "8 rows x (100 text + 16x16 image + 50 text + 14x22 image + 100 text) = 8 x 814 tokens";

// The demo: a Qwen-style chat prompt with two images and a video (batch 1).
Request demo_request(const Geometry& geometry);
inline constexpr const char* kDemoDescription =
    "Qwen2.5-VL chat prompt: system + user turn with image 0 (6x8 tokens), image 1 (4x4), "
    "video 0 (4 frames of 4x6, 1 s per grid) and a question";

}  // namespace circlerope::cli
