#include "workload.h"

#include <cstdint>
#include <vector>

namespace circlerope::cli {

namespace {

// Builds a row of Qwen token ids; text ids are arbitrary but deterministic.
class RowBuilder {
 public:
  explicit RowBuilder(const VisionConfig& vision) : vision_(vision) {}

  void text(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
      ids.push_back(static_cast<int64_t>(1000 + (state_ >> 33) % 140000));
    }
  }
  // <|vision_start|> then t*hm*wm vision tokens then <|vision_end|>.
  void vision(bool video, int64_t t, int64_t hm, int64_t wm) {
    ids.push_back(vision_.vision_start_token_id);
    ids.insert(ids.end(), static_cast<size_t>(t * hm * wm),
               video ? vision_.video_token_id : vision_.image_token_id);
    ids.push_back(vision_.vision_start_token_id + 1);  // <|vision_end|> = 151653 in Qwen
  }

  std::vector<int64_t> ids;

 private:
  const VisionConfig& vision_;
  uint64_t state_ = 42;
};

}  // namespace

Request benchmark_batch(const Geometry& geometry, int rows) {
  Request r;
  r.geometry = geometry;
  const int64_t m = r.vision.spatial_merge_size;
  for (int b = 0; b < rows; ++b) {
    RowBuilder row(r.vision);
    row.text(99);  // + vision start = 100 text tokens
    row.vision(false, 1, 16, 16);
    row.text(48);  // vision end + 48 + vision start = 50
    row.vision(false, 1, 14, 22);
    row.text(99);  // vision end + 99 = 100
    r.input_ids.insert(r.input_ids.end(), row.ids.begin(), row.ids.end());
    r.seq_len = static_cast<int64_t>(row.ids.size());
    r.image_grid_thw.push_back({1, 16 * m, 16 * m});
    r.image_grid_thw.push_back({1, 14 * m, 22 * m});
  }
  r.batch = rows;
  return r;
}

Request demo_request(const Geometry& geometry) {
  Request r;
  r.geometry = geometry;
  const int64_t m = r.vision.spatial_merge_size;
  RowBuilder row(r.vision);
  row.text(24);  // <|im_start|>system ... <|im_end|> <|im_start|>user
  row.vision(false, 1, 6, 8);
  r.image_grid_thw.push_back({1, 6 * m, 8 * m});
  row.text(9);
  row.vision(false, 1, 4, 4);
  r.image_grid_thw.push_back({1, 4 * m, 4 * m});
  row.text(7);
  row.vision(true, 4, 4, 6);
  r.video_grid_thw.push_back({4, 4 * m, 6 * m});
  r.second_per_grid_ts.push_back(1.0);
  row.text(21);  // the question, <|im_end|>, <|im_start|>assistant
  r.input_ids = row.ids;
  r.batch = 1;
  r.seq_len = static_cast<int64_t>(row.ids.size());
  return r;
}

}  // namespace circlerope::cli
