// The C API: converts to the C++ types and turns exceptions into status codes.
#include "circlerope/c_api.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <vector>

#include "c_guard.h"
#include "circlerope/positions.h"

namespace {

using namespace circlerope;

static_assert(static_cast<int>(Scheme::vanilla) == CRP_SCHEME_VANILLA &&
                  static_cast<int>(Scheme::unordered) == CRP_SCHEME_UNORDERED &&
                  static_cast<int>(Scheme::mrope) == CRP_SCHEME_MROPE &&
                  static_cast<int>(Scheme::circle) == CRP_SCHEME_CIRCLE,
              "crp_scheme values are cast to circlerope::Scheme");

using detail::guarded;

std::vector<GridTHW> grids(const int64_t* thw, int64_t n, const char* name) {
  if (n < 0 || (n > 0 && !thw)) throw Error(std::string(name) + ": NULL pointer or negative count");
  std::vector<GridTHW> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = {thw[3 * i], thw[3 * i + 1], thw[3 * i + 2]};
  return out;
}

}  // namespace

extern "C" {

void crp_circle_config_default(crp_circle_config* c) {
  if (!c) return;
  const CircleConfig d;
  *c = {0, d.radius, d.radius_scale, d.alpha, d.move_to_origin ? 1 : 0, d.dff_rate, 0, 0.0};
}

void crp_vision_config_default(crp_vision_config* v) {
  if (!v) return;
  const VisionConfig d;
  *v = {d.spatial_merge_size, d.tokens_per_second, d.vision_start_token_id, d.image_token_id,
        d.video_token_id, 0};
}

crp_status crp_rope_index(const crp_rope_index_input* in, const crp_vision_config* vision,
                          int scheme, const crp_circle_config* circle, float* position_ids,
                          float* rope_deltas, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!in || !vision || !position_ids || !rope_deltas || (scheme == CRP_SCHEME_CIRCLE && !circle))
      throw Error("crp_rope_index: NULL argument");
    if (scheme < CRP_SCHEME_VANILLA || scheme > CRP_SCHEME_CIRCLE)
      throw Error("crp_rope_index: unknown scheme " + std::to_string(scheme));
    int64_t total = 0;
    if (in->batch < 0 || in->seq_len < 0 || __builtin_mul_overflow(in->batch, in->seq_len, &total) ||
        total > (int64_t{1} << 40))
      throw Error("crp_rope_index: batch " + std::to_string(in->batch) + " x seq_len " +
                  std::to_string(in->seq_len) + " is negative or too large");
    if (total > 0 && !in->input_ids) throw Error("crp_rope_index: input_ids is NULL");
    const auto n = static_cast<size_t>(total);
    const std::vector<GridTHW> images = grids(in->image_grid_thw, in->n_images, "image_grid_thw");
    const std::vector<GridTHW> videos = grids(in->video_grid_thw, in->n_videos, "video_grid_thw");
    RopeIndexInput input{
        .input_ids = {in->input_ids, n},
        .batch = in->batch,
        .seq_len = in->seq_len,
        .attention_mask = in->attention_mask ? std::span<const int64_t>(in->attention_mask, n)
                                             : std::span<const int64_t>{},
        .image_grid_thw = images,
        .video_grid_thw = videos,
        .second_per_grid_ts = in->second_per_grid_ts
                                  ? std::span<const double>(in->second_per_grid_ts, videos.size())
                                  : std::span<const double>{}};
    const VisionConfig v{vision->spatial_merge_size, vision->tokens_per_second,
                         vision->vision_start_token_id, vision->image_token_id,
                         vision->video_token_id,
                         vision->time_is_index ? TimeMode::index : TimeMode::seconds};
    Geometry g{static_cast<Scheme>(scheme), {}};
    if (circle) {
      g.circle = {circle->radius_auto ? RadiusMode::automatic : RadiusMode::fixed,
                  circle->radius,
                  circle->radius_scale,
                  circle->alpha,
                  circle->move_to_origin != 0,
                  circle->dff_rate,
                  circle->move_to_positive == 1   ? PositiveShift::automatic
                  : circle->move_to_positive == 2 ? PositiveShift::offset
                                                  : PositiveShift::none,
                  circle->positive_offset};
      if (circle->move_to_positive < 0 || circle->move_to_positive > 2)
        throw Error("crp_circle_config.move_to_positive must be 0, 1 or 2 (got " +
                    std::to_string(circle->move_to_positive) + ")");
    }
    rope_index_into(input, v, g, {position_ids, 3 * n}, {rope_deltas, static_cast<size_t>(in->batch)});
  });
}

crp_status crp_decode_positions(const float* rope_deltas, int64_t batch, int64_t first, int64_t count,
                                float* out, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (batch < 0 || batch > (int64_t{1} << 40) || (batch > 0 && !rope_deltas))
      throw Error("crp_decode_positions: rope_deltas is NULL or batch " + std::to_string(batch) + " is out of range");
    const std::vector<float> d = decode_positions({rope_deltas, static_cast<size_t>(batch)}, first, count);
    if (!d.empty() && !out) throw Error("crp_decode_positions: out is NULL");
    std::copy(d.begin(), d.end(), out);
  });
}

}  // extern "C"
