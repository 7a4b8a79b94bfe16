// The C API: converts to the C++ types and turns exceptions into status codes.
#include "circlerope/c_api.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <vector>

#include "circlerope/detail/c_guard.h"
#include "circlerope/detail/fail.h"
#include "circlerope/age.h"
#include "circlerope/options.h"
#include "circlerope/positions.h"

struct crp_age_plan {
  circlerope::AgePlan plan;
};

namespace {

using namespace circlerope;

// The header states the project's version (CMake passes it here): they must not drift apart.
static_assert(CRP_VERSION_MAJOR == CIRCLEROPE_VERSION_MAJOR && CRP_VERSION_MINOR == CIRCLEROPE_VERSION_MINOR &&
                  CRP_VERSION_PATCH == CIRCLEROPE_VERSION_PATCH,
              "c_api.h's CRP_VERSION_* differ from project(VERSION) in CMakeLists.txt");

static_assert(static_cast<int>(Scheme::vanilla) == CRP_SCHEME_VANILLA &&
                  static_cast<int>(Scheme::unordered) == CRP_SCHEME_UNORDERED &&
                  static_cast<int>(Scheme::mrope) == CRP_SCHEME_MROPE &&
                  static_cast<int>(Scheme::circle) == CRP_SCHEME_CIRCLE,
              "crp_scheme values are cast to circlerope::Scheme");

using detail::guarded;

static_assert(CRP_MAX_TOKENS == kMaxTokens, "the C header states the core's limit");

static_assert(static_cast<int>(PositiveShift::none) == CRP_POSITIVE_NONE &&
                  static_cast<int>(PositiveShift::automatic) == CRP_POSITIVE_AUTO &&
                  static_cast<int>(PositiveShift::offset) == CRP_POSITIVE_OFFSET,
              "crp_positive_shift values are cast to circlerope::PositiveShift");

// The C struct as the C++ one; ints from C are range-checked before they become enums.
CircleConfig to_cpp(const crp_circle_config& c) {
  if (c.move_to_positive < CRP_POSITIVE_NONE || c.move_to_positive > CRP_POSITIVE_OFFSET)
    throw Error("crp_circle_config.move_to_positive must be a crp_positive_shift (0, 1 or 2; got " +
                std::to_string(c.move_to_positive) + ")");
  return {c.radius_auto ? RadiusMode::automatic : RadiusMode::fixed,
          c.radius,
          c.radius_scale,
          c.alpha,
          c.move_to_origin != 0,
          c.dff_rate,
          static_cast<PositiveShift>(c.move_to_positive),
          c.positive_offset};
}

crp_circle_config to_c(const CircleConfig& c) {
  return {c.radius_mode == RadiusMode::automatic ? 1 : 0, c.radius, c.radius_scale, c.alpha,
          c.move_to_origin ? 1 : 0, c.dff_rate, static_cast<int>(c.move_to_positive), c.positive_offset};
}

// crp_compat numbers the modes in release order, the order of kAllCompats: a C value is an
// index into it.
static_assert(kAllCompats[CRP_COMPAT_NONE] == Compat::none && kAllCompats[CRP_COMPAT_HF_4_49] == Compat::hf_4_49 &&
                  kAllCompats[CRP_COMPAT_HF_4_52] == Compat::hf_4_52 &&
                  kAllCompats[CRP_COMPAT_HF_5_2] == Compat::hf_5_2 &&
                  kAllCompats[CRP_COMPAT_HF_5_3_TO_5_5_3] == Compat::hf_5_3_to_5_5_3 &&
                  kAllCompats[CRP_COMPAT_HF_5_5_4] == Compat::hf_5_5_4 &&
                  kAllCompats[CRP_COMPAT_HF_5_6] == Compat::hf_5_6 &&
                  kAllCompats[CRP_COMPAT_HF_5_18] == Compat::hf_5_18 &&
                  kAllCompats.size() == CRP_COMPAT_HF_5_18 + 1,
              "crp_compat values index circlerope::kAllCompats");

int compat_to_c(Compat compat) {
  return static_cast<int>(std::find(kAllCompats.begin(), kAllCompats.end(), compat) - kAllCompats.begin());
}

VisionConfig to_cpp(const crp_vision_config& v) {
  if (v.compat < CRP_COMPAT_NONE || v.compat > CRP_COMPAT_HF_5_18)
    throw Error("crp_vision_config.compat must be a crp_compat (0..7; got " + std::to_string(v.compat) + ")");
  return {v.spatial_merge_size, v.tokens_per_second, v.vision_start_token_id, v.image_token_id,
          v.video_token_id, v.time_is_index ? TimeMode::index : TimeMode::seconds,
          kAllCompats[static_cast<size_t>(v.compat)]};
}

crp_vision_config to_c(const VisionConfig& v) {
  return {v.spatial_merge_size, v.tokens_per_second, v.vision_start_token_id, v.image_token_id,
          v.video_token_id, v.time == TimeMode::index ? 1 : 0, compat_to_c(v.compat)};
}

// An array the call reads or writes as T[] starts aligned to T (a misaligned load or store is
// undefined behaviour: refused, naming the argument and its address). NULL passes: the NULL
// checks are the callers'.
template <class T>
void require_aligned(const T* p, const char* function, const char* name, const char* type) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0)
    detail::fail(function, ": ", name, " ", static_cast<const void*>(p), " is not aligned to ", alignof(T), " bytes (",
                 type, ")");
}

// `count` names the C field in messages. A count is checked against its cap before it sizes
// anything: more grids than the tokens of a call cannot all have a vision block.
std::vector<GridTHW> grids(const int64_t* thw, int64_t n, const char* name, const char* count) {
  if (n < 0 || (n > 0 && !thw)) throw Error(std::string(name) + ": NULL pointer or negative count");
  if (n > kMaxTokens)
    throw Error(std::string(count) + " " + std::to_string(n) + " is more than " + std::to_string(kMaxTokens) +
                " (CRP_MAX_TOKENS): a call holds no more vision blocks than tokens");
  std::vector<GridTHW> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = {thw[3 * i], thw[3 * i + 1], thw[3 * i + 2]};
  return out;
}

}  // namespace

extern "C" {

crp_status crp_version(int* major, int* minor, int* patch) {
  if (major) *major = CRP_VERSION_MAJOR;
  if (minor) *minor = CRP_VERSION_MINOR;
  if (patch) *patch = CRP_VERSION_PATCH;
  return CRP_OK;
}

crp_status crp_circle_config_default(crp_circle_config* c) {
  if (!c) return CRP_INVALID_ARGUMENT;
  *c = to_c(CircleConfig{});
  return CRP_OK;
}

crp_status crp_vision_config_default(crp_vision_config* v) {
  if (!v) return CRP_INVALID_ARGUMENT;
  *v = to_c(VisionConfig{});
  return CRP_OK;
}

crp_status crp_age_plan_create(const char* spec, int64_t layers, crp_age_plan** plan, char* error,
                               size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!plan) throw Error("crp_age_plan_create: plan (the output pointer) is NULL");
    *plan = nullptr;
    if (!spec) throw Error("crp_age_plan_create: spec is NULL");
    *plan = new crp_age_plan{AgePlan(spec, layers)};
  });
}

crp_status crp_age_plan_destroy(crp_age_plan* plan) {
  delete plan;
  return CRP_OK;
}

crp_status crp_age_plan_size(const crp_age_plan* plan, int* layers, int* geometries, char* error,
                             size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!plan) throw Error("crp_age_plan_size: plan is NULL");
    if (layers) *layers = plan->plan.layers();
    if (geometries) *geometries = static_cast<int>(plan->plan.schemes().size());
  });
}

crp_status crp_age_plan_geometry(const crp_age_plan* plan, int geometry, int* scheme, char* error,
                                 size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!plan || !scheme) throw Error("crp_age_plan_geometry: NULL argument");
    const auto& schemes = plan->plan.schemes();
    if (geometry < 0 || geometry >= static_cast<int>(schemes.size()))
      throw Error("crp_age_plan_geometry: geometry " + std::to_string(geometry) + " is out of range for a plan of " +
                  std::to_string(schemes.size()) + " geometries");
    *scheme = static_cast<int>(schemes[static_cast<size_t>(geometry)]);
  });
}

crp_status crp_age_plan_layer(const crp_age_plan* plan, int layer, int* geometry, char* error,
                              size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!plan || !geometry) throw Error("crp_age_plan_layer: NULL argument");
    *geometry = plan->plan.layer_geometry(layer);
  });
}

crp_status crp_circle_config_set(crp_circle_config* config, const char* key, const char* value,
                                 char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!config || !key || !value) throw Error("crp_circle_config_set: NULL argument");
    CircleConfig c = to_cpp(*config);
    set_circle_option(c, key, OptionValue::text(value), key);
    *config = to_c(c);
  });
}

crp_status crp_vision_config_set(crp_vision_config* config, const char* key, const char* value,
                                 char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!config || !key || !value) throw Error("crp_vision_config_set: NULL argument");
    VisionConfig v = to_cpp(*config);
    set_vision_option(v, key, OptionValue::text(value), key);
    *config = to_c(v);
  });
}

crp_status crp_scheme_parse(const char* text, int* scheme, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!text || !scheme) throw Error("crp_scheme_parse: NULL argument");
    *scheme = static_cast<int>(scheme_option(OptionValue::text(text), "scheme"));
  });
}

crp_status crp_rope_index(const crp_rope_index_input* in, const crp_vision_config* vision,
                          int scheme, const crp_circle_config* circle, float* position_ids,
                          float* rope_deltas, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (!in || !vision || !position_ids || !rope_deltas || (scheme == CRP_SCHEME_CIRCLE && !circle))
      throw Error("crp_rope_index: NULL argument");
    if (scheme < CRP_SCHEME_VANILLA || scheme > CRP_SCHEME_CIRCLE)
      throw Error("crp_rope_index: unknown scheme " + std::to_string(scheme));
    // batch and seq_len bounded each on its own as well as their product: batch 2^62 with
    // seq_len 0 holds no token, but rope_deltas would have 2^62 entries.
    int64_t total = 0;
    if (in->batch < 0 || in->seq_len < 0 || in->batch > kMaxTokens || in->seq_len > kMaxTokens ||
        __builtin_mul_overflow(in->batch, in->seq_len, &total) || total > kMaxTokens)
      throw Error("crp_rope_index: batch " + std::to_string(in->batch) + " x seq_len " +
                  std::to_string(in->seq_len) + " is negative or more than " + std::to_string(kMaxTokens) +
                  " tokens (CRP_MAX_TOKENS), the limit of one call");
    if (total > 0 && !in->input_ids) throw Error("crp_rope_index: input_ids is NULL");
    const char* const self = "crp_rope_index";
    require_aligned(in->input_ids, self, "input_ids", "int64");
    require_aligned(in->attention_mask, self, "attention_mask", "int64");
    require_aligned(in->image_grid_thw, self, "image_grid_thw", "int64");
    require_aligned(in->video_grid_thw, self, "video_grid_thw", "int64");
    require_aligned(in->second_per_grid_ts, self, "second_per_grid_ts", "float64");
    require_aligned(position_ids, self, "position_ids", "float32");
    require_aligned(rope_deltas, self, "rope_deltas", "float32");
    const auto n = static_cast<size_t>(total);
    const std::vector<GridTHW> images = grids(in->image_grid_thw, in->n_images, "image_grid_thw", "n_images");
    const std::vector<GridTHW> videos = grids(in->video_grid_thw, in->n_videos, "video_grid_thw", "n_videos");
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
    const VisionConfig v = to_cpp(*vision);
    Geometry g{static_cast<Scheme>(scheme), {}};
    if (circle) g.circle = to_cpp(*circle);
    rope_index_into(input, v, g, {position_ids, 3 * n}, {rope_deltas, static_cast<size_t>(in->batch)});
  });
}

crp_status crp_decode_positions(const float* rope_deltas, int64_t batch, int64_t first, int64_t count,
                                float* out, char* error, size_t error_size) {
  return guarded(error, error_size, [&] {
    if (batch < 0 || batch > kMaxTokens || (batch > 0 && !rope_deltas))
      throw Error("crp_decode_positions: rope_deltas is NULL or batch " + std::to_string(batch) + " is out of range");
    // Checked before anything is computed, and written in place: no temporary of the whole
    // output is built before `out` is looked at.
    // Sizes the core refuses leave `n` at 0; the core then names them before it looks at `out`.
    int64_t total = 0;
    const bool sized = count >= 0 && !__builtin_mul_overflow(batch, count, &total) && total <= kMaxTokens;
    const size_t n = sized ? static_cast<size_t>(3 * total) : 0;
    if (n > 0 && !out) throw Error("crp_decode_positions: out is NULL");
    require_aligned(rope_deltas, "crp_decode_positions", "rope_deltas", "float32");
    require_aligned(out, "crp_decode_positions", "out", "float32");
    decode_positions_into({rope_deltas, static_cast<size_t>(batch)}, first, count, {out, n});
  });
}

}  // extern "C"
