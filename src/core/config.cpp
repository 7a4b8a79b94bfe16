// Names and validation of the configuration types (docs/spec.md §1, 3, 4).
#include <cmath>
#include <cstdint>
#include <string>

#include "circlerope/positions.h"
#include "circlerope/rotary_config.h"
#include "circlerope/detail/fail.h"
#include "circlerope/detail/frequency_axis.h"

namespace circlerope {

using detail::fail;

std::string_view to_string(Scheme scheme) {
  switch (scheme) {
    case Scheme::vanilla: return "vanilla";
    case Scheme::unordered: return "unordered";
    case Scheme::mrope: return "mrope";
    case Scheme::circle: return "circle";
  }
  return "?";
}

Scheme parse_scheme(std::string_view text) {
  for (Scheme s : kAllSchemes)
    if (text == to_string(s)) return s;
  fail("unknown scheme ", detail::quoted(text), " (expected vanilla, unordered, mrope or circle)");
}

std::string_view to_string(Compat compat) {
  switch (compat) {
    case Compat::none: return "none";
    case Compat::hf_4_49: return "hf-4.49";
    case Compat::hf_4_52: return "hf-4.52";
    case Compat::hf_5_2: return "hf-5.2";
    case Compat::hf_5_3_to_5_5_3: return "hf-5.3-5.5.3";
    case Compat::hf_5_5_4: return "hf-5.5.4";
    case Compat::hf_5_6: return "hf-5.6";
    case Compat::hf_5_18: return "hf-5.18";
  }
  return "?";
}

std::string_view compat_names() {
  return "none, hf-4.49, hf-4.52, hf-5.2, hf-5.3-5.5.3, hf-5.5.4, hf-5.6 (or its former name hf-5.3), hf-5.18";
}

Compat parse_compat(std::string_view text) {
  for (Compat c : kAllCompats)
    if (text == to_string(c)) return c;
  if (text == "hf-5.3") return Compat::hf_5_6;  // the former name of hf-5.6
  fail("unknown compat mode ", detail::quoted(text), " (expected none; hf-4.49 for transformers 4.49-4.51, hf-4.52 for 4.52-5.1, "
       "hf-5.2 for 5.2, hf-5.3-5.5.3 for 5.3-5.5.3, hf-5.5.4 for 5.5.4, hf-5.6 for 5.6-5.17 (also read as hf-5.3), "
       "hf-5.18 for 5.18 and later)");
}

bool compat_pads_with_zero(Compat compat) {
  return compat != Compat::none && compat != Compat::hf_4_49 && compat != Compat::hf_4_52;
}

bool compat_deltas_count_real_tokens(Compat compat) {
  return compat_pads_with_zero(compat) && compat != Compat::hf_5_2;
}

bool compat_continues_from_first_frame(Compat compat) { return compat_deltas_count_real_tokens(compat); }

std::string_view to_string(FrequencyLayout layout) {
  switch (layout) {
    case FrequencyLayout::chunked: return "chunked";
    case FrequencyLayout::interleaved: return "interleaved";
    case FrequencyLayout::single: return "single";
  }
  return "?";
}

FrequencyLayout parse_frequency_layout(std::string_view text) {
  for (auto l : {FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single})
    if (text == to_string(l)) return l;
  fail("unknown frequency layout ", detail::quoted(text), " (expected chunked, interleaved or single)");
}

void validate(const CircleConfig& c) {
  if (c.radius_mode == RadiusMode::fixed && !(std::isfinite(c.radius) && c.radius > 0))
    fail("circle radius must be a finite number > 0, \"auto\" or \"auto-k\" (got ", c.radius, ")");
  if (c.radius_mode == RadiusMode::automatic &&
      !(std::isfinite(c.radius_scale) && c.radius_scale > 0))
    fail("circle radius scale k of \"auto-k\" must be finite and > 0 (got ", c.radius_scale, ")");
  if (!(c.alpha >= 0 && c.alpha <= 1))
    fail("circle alpha must be in [0, 1] (got ", c.alpha, ")");
  if (!(c.dff_rate >= 0 && c.dff_rate <= 1))
    fail("circle dff_rate must be in [0, 1] (got ", c.dff_rate, ")");
  if (c.move_to_positive == PositiveShift::offset && !std::isfinite(c.positive_offset))
    fail("circle move_to_positive offset must be finite (got ", c.positive_offset, ")");
}

void validate(const VisionConfig& v) {
  if (v.spatial_merge_size < 1)
    fail("spatial_merge_size must be >= 1 (got ", v.spatial_merge_size, ")");
  // It is read in float32, like the reference: it must be finite there too.
  if (!(std::isfinite(static_cast<float>(v.tokens_per_second)) && v.tokens_per_second > 0))
    fail("tokens_per_second must be finite (in float32) and > 0 (got ", v.tokens_per_second, ")");
  if (v.vision_start_token_id == v.image_token_id || v.vision_start_token_id == v.video_token_id ||
      v.image_token_id == v.video_token_id)
    fail("vision_start_token_id=", v.vision_start_token_id, ", image_token_id=", v.image_token_id,
         " and video_token_id=", v.video_token_id, " must be distinct");
}

void validate(const RotaryConfig& r) {
  // The one check of theta every front end goes through (rotary_config.h says why this range).
  if (!(r.theta >= kMinTheta && r.theta <= kMaxTheta))
    fail("rope_theta must be in [1, 2^126 = 8.507e37] (got ", r.theta,
         "): below 1 the frequencies theta^(-2i/D) exceed 1 and overflow for a tiny theta, above 2^126 the "
         "slowest is no normal float32");
  if (r.rotary_dim < 2 || r.rotary_dim > 1024 || r.rotary_dim % 2 != 0)
    fail("rotary dim must be even and in [2, 1024] (got ", r.rotary_dim, ")");
  if (r.layout == FrequencyLayout::single) return;
  const auto [st, sh, sw] = r.sections;
  // Summed in 64 bits: in int, 2147483647 + 2147483647 + 66 wraps to 64 and passed.
  if (st < 0 || sh < 0 || sw < 0 ||
      std::int64_t{st} + std::int64_t{sh} + std::int64_t{sw} != r.rotary_dim / 2)
    fail("mrope sections [", st, ", ", sh, ", ", sw, "] must be >= 0 and sum to rotary_dim/2 = ",
         r.rotary_dim / 2);
}

static_assert(static_cast<int>(FrequencyLayout::chunked) == 0 &&
                  static_cast<int>(FrequencyLayout::interleaved) == 1 &&
                  static_cast<int>(FrequencyLayout::single) == 2,
              "detail::frequency_axis takes the layout as these ints");

std::vector<int> frequency_axes(const RotaryConfig& r) {
  validate(r);
  const int half = r.rotary_dim / 2;
  const auto [st, sh, sw] = r.sections;
  std::vector<int> axes(static_cast<size_t>(half), 0);
  for (int i = 0; i < half; ++i)
    axes[static_cast<size_t>(i)] = detail::frequency_axis(static_cast<int>(r.layout), st, sh, sw, i);
  return axes;
}

std::vector<double> inverse_frequencies(const RotaryConfig& r) {
  validate(r);
  std::vector<double> inv(static_cast<size_t>(r.rotary_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = std::pow(r.theta, -2.0 * static_cast<double>(i) / r.rotary_dim);
  return inv;
}

}  // namespace circlerope
