// libFuzzer target: the C positions API (c_api.h) with fuzzed structs: crp_rope_index and
// crp_decode_positions, NULL pointers, misaligned arrays, negative counts, out-of-range enums,
// non-finite doubles, short and absent error buffers.
//
// The harness owns every buffer, so it only claims sizes it allocated (batch <= 4,
// seq_len <= 24): it cannot pass a batch of 2^62 honestly, so the batch x seq_len limit with
// seq_len 0 is not reached here. Oracle: positions_oracle.h decides validity and the positions; outputs
// are pre-filled with a sentinel so that an unwritten value shows; the error message is
// checked for NUL termination, one line, and no write past error_size.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "circlerope/c_api.h"
#include "positions_oracle.h"

namespace {

using namespace circlerope;

constexpr size_t kGuard = 8;
constexpr char kGuardByte = 0x5A;
constexpr unsigned char kSentinel = 0xA5;  // 0xA5A5A5A5 as a float: -2.87e-16, never a position

double pick_double(FuzzedDataProvider& in, std::initializer_list<double> usual) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  const std::vector<double> v(usual);
  if (k < 200) return v[k % v.size()];
  if (k < 210) return std::numeric_limits<double>::quiet_NaN();
  if (k < 215) return std::numeric_limits<double>::infinity();
  if (k < 220) return -std::numeric_limits<double>::infinity();
  return in.ConsumeFloatingPoint<double>();
}

int64_t pick_int(FuzzedDataProvider& in, std::initializer_list<int64_t> usual) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  const std::vector<int64_t> v(usual);
  if (k < 230) return v[k % v.size()];
  return in.ConsumeIntegral<int64_t>();
}

// A shift that misaligns an array of `alignment`-byte elements: 1..alignment - 1, or that
// plus a whole element.
size_t misaligning_shift(FuzzedDataProvider& in, size_t alignment) {
  return in.ConsumeIntegralInRange<size_t>(1, alignment - 1) + (in.ConsumeBool() ? alignment : 0);
}

// One array argument moved off its alignment (c_api.h: refused): a copy of its bytes a
// misaligning shift into a buffer of its own, the rest of the buffer a sentinel that shows a
// write.
struct Misaligned {
  std::vector<unsigned char> bytes;
  const void* original = nullptr;
  size_t size = 0, shift = 0;
  // Moves `pointer` (when not NULL) to a misaligned copy of `values`.
  template <class T, class V>
  void move(FuzzedDataProvider& in, T*& pointer, const std::vector<V>& values) {
    if (!pointer) return;
    original = values.data(), size = values.size() * sizeof(V), shift = misaligning_shift(in, alignof(V));
    bytes.assign(size + 16, kSentinel);
    if (size > 0) std::memcpy(bytes.data() + shift, values.data(), size);
    pointer = reinterpret_cast<T*>(bytes.data() + shift);
  }
  bool unwritten() const {
    for (size_t i = 0; i < bytes.size(); ++i) {
      const bool copied = i >= shift && i < shift + size;
      if (bytes[i] != (copied ? static_cast<const unsigned char*>(original)[i - shift] : kSentinel)) return false;
    }
    return true;
  }
};

// An error buffer of 0, 1, a few or 256 bytes (or none), followed by guard bytes.
struct ErrorBuffer {
  std::vector<char> bytes;
  size_t size = 0;
  bool null = false;
  explicit ErrorBuffer(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: null = true; break;
      case 1: size = 0; break;
      case 2: size = 1; break;
      case 3: size = in.ConsumeIntegralInRange<size_t>(2, 24); break;
      default: size = 256; break;
    }
    bytes.assign(size + kGuard, kGuardByte);
  }
  char* data() { return null ? nullptr : bytes.data(); }
  // The message for a finding's line ("" when there is no room for one: size 0 has no NUL).
  const char* text() const { return null || size == 0 ? "" : bytes.data(); }
  void check(bool ok, const char* function) const {
    if (!null) fuzz::check_c_message(bytes.data(), size, kGuard, kGuardByte, ok, function);
  }
};

void fuzz_rope_index(FuzzedDataProvider& in) {
  crp_vision_config vision;
  crp_vision_config_default(&vision);
  // Token ids: the defaults, or small numbers that may collide on purpose.
  if (in.ConsumeBool()) {
    vision.vision_start_token_id = in.ConsumeIntegralInRange<int64_t>(-1, 4);
    vision.image_token_id = in.ConsumeIntegralInRange<int64_t>(-1, 4);
    vision.video_token_id = in.ConsumeIntegralInRange<int64_t>(-1, 4);
  }
  vision.spatial_merge_size = pick_int(in, {2, 2, 1, 3, 0, -1});
  vision.tokens_per_second = pick_double(in, {2.0, 2.0, 0.5, 25.0, 0.0, -1.0, 1e39});
  vision.time_is_index = in.ConsumeIntegralInRange<int>(-1, 2);

  const int scheme = in.ConsumeIntegralInRange<int>(-1, 4);
  crp_circle_config circle;
  crp_circle_config_default(&circle);
  const bool circle_null = in.ConsumeIntegralInRange<int>(0, 9) == 0;
  if (in.ConsumeBool()) {
    circle.radius_auto = in.ConsumeIntegralInRange<int>(-1, 2);
    circle.radius = pick_double(in, {10.0, 0.5, 1e30, 0.0, -2.0, 1e-300});
    circle.radius_scale = pick_double(in, {1.0, 2.5, 0.0, -1.0, 1e35});
    circle.alpha = pick_double(in, {0.5, 0.0, 1.0, 1.5, -0.25});
    circle.move_to_origin = in.ConsumeIntegralInRange<int>(-1, 2);
    circle.dff_rate = pick_double(in, {0.0, 0.25, 1.0, 2.0, -0.5});
    circle.move_to_positive = in.ConsumeIntegralInRange<int>(-1, 3);
    circle.positive_offset = pick_double(in, {0.0, 3.0, -7.5, 1e38});
  }

  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(-1, 4);
  const int64_t seq = in.ConsumeIntegralInRange<int64_t>(-1, 24);
  const int64_t total = batch > 0 && seq > 0 ? batch * seq : 0;
  const int64_t palette[] = {vision.vision_start_token_id, vision.image_token_id, vision.image_token_id,
                             vision.video_token_id, 7, 151653};
  std::vector<int64_t> ids(static_cast<size_t>(total));
  for (int64_t& id : ids)
    id = in.ConsumeIntegralInRange<int>(0, 7) != 0 ? palette[in.ConsumeIntegralInRange<int>(0, 5)] : in.ConsumeIntegral<int64_t>();
  std::vector<int64_t> mask;
  const bool has_mask = in.ConsumeBool();
  if (has_mask) {
    mask.resize(static_cast<size_t>(total), 1);
    for (int64_t& m : mask)
      if (in.ConsumeIntegralInRange<int>(0, 3) == 0) m = pick_int(in, {0, 0, 0, 2, -1});
  }
  auto grids = [&](std::vector<int64_t>& thw) -> int64_t {
    const int64_t n = in.ConsumeIntegralInRange<int64_t>(-1, 3);
    thw.resize(static_cast<size_t>(std::max<int64_t>(n, 0) * 3));
    for (size_t i = 0; i < thw.size(); ++i)
      thw[i] = i % 3 == 0 ? pick_int(in, {1, 1, 2, 3, 0, -1}) : pick_int(in, {2, 4, 2, 6, 0, 3, -2, 1});
    return n;
  };
  std::vector<int64_t> images, videos;
  const int64_t n_images = grids(images), n_videos = grids(videos);
  std::vector<double> seconds(static_cast<size_t>(std::max<int64_t>(n_videos, 0)));
  for (double& s : seconds) s = pick_double(in, {1.0, 0.5, 2.0, 0.0, -1.0, 1e300});
  const bool seconds_null = in.ConsumeBool();

  crp_rope_index_input input{};
  input.input_ids = total > 0 || in.ConsumeBool() ? ids.data() : nullptr;
  input.batch = batch;
  input.seq_len = seq;
  input.attention_mask = has_mask ? mask.data() : nullptr;
  input.image_grid_thw = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : images.data();
  input.n_images = n_images;
  input.video_grid_thw = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : videos.data();
  input.n_videos = n_videos;
  input.second_per_grid_ts = seconds_null ? nullptr : seconds.data();

  const size_t n_pos = static_cast<size_t>(3 * total), n_deltas = static_cast<size_t>(std::max<int64_t>(batch, 0));
  std::vector<float> position_ids(n_pos + 4), deltas(n_deltas + 4);
  std::memset(position_ids.data(), kSentinel, position_ids.size() * sizeof(float));
  std::memset(deltas.data(), kSentinel, deltas.size() * sizeof(float));
  const int null_output = in.ConsumeIntegralInRange<int>(0, 19);
  ErrorBuffer error(in);

  if (std::getenv("CIRCLEROPE_FUZZ_VERBOSE")) {  // triage: what the call looks like
    std::fprintf(stderr, "vision: merge %lld tps %.17g ids %lld %lld %lld index %d; scheme %d\n",
                 (long long)vision.spatial_merge_size, vision.tokens_per_second,
                 (long long)vision.vision_start_token_id, (long long)vision.image_token_id,
                 (long long)vision.video_token_id, vision.time_is_index, scheme);
    std::fprintf(stderr, "circle%s: auto %d radius %.17g scale %.17g alpha %.17g origin %d dff %.17g positive %d offset %.17g\n",
                 circle_null ? " (NULL)" : "", circle.radius_auto, circle.radius, circle.radius_scale, circle.alpha,
                 circle.move_to_origin, circle.dff_rate, circle.move_to_positive, circle.positive_offset);
    std::fprintf(stderr, "batch %lld seq %lld mask %d images %lld videos %lld seconds %s\n", (long long)batch,
                 (long long)seq, has_mask, (long long)n_images, (long long)n_videos, seconds_null ? "NULL" : "given");
    for (int64_t i = 0; i < total; ++i)
      std::fprintf(stderr, "%lld%s%s", (long long)ids[static_cast<size_t>(i)],
                   has_mask && mask[static_cast<size_t>(i)] != 1 ? "(masked)" : "", (i + 1) % seq ? " " : "\n");
    for (size_t i = 0; i + 2 < images.size() + 2 && i < images.size(); i += 3)
      std::fprintf(stderr, "image [%lld %lld %lld]\n", (long long)images[i], (long long)images[i + 1], (long long)images[i + 2]);
    for (size_t i = 0; i < videos.size(); i += 3)
      std::fprintf(stderr, "video [%lld %lld %lld] seconds %g\n", (long long)videos[i], (long long)videos[i + 1],
                   (long long)videos[i + 2], seconds[i / 3]);
  }
  const crp_rope_index_input* input_arg = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? nullptr : &input;
  const crp_vision_config* vision_arg = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? nullptr : &vision;
  float* position_arg = null_output == 1 ? nullptr : position_ids.data();
  float* deltas_arg = null_output == 2 ? nullptr : deltas.data();
  // Drawn last, so that the inputs saved before this choice existed keep their meaning: one
  // array argument that is not NULL moved off its alignment, an input or an output.
  Misaligned moved;
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 9: moved.move(in, input.input_ids, ids); break;
    case 10: moved.move(in, input.attention_mask, mask); break;
    case 11: moved.move(in, input.image_grid_thw, images); break;
    case 12: moved.move(in, input.video_grid_thw, videos); break;
    case 13: moved.move(in, input.second_per_grid_ts, seconds); break;
    case 14: moved.move(in, position_arg, position_ids); break;
    case 15: moved.move(in, deltas_arg, deltas); break;
    default: break;
  }
  const bool misaligned = !moved.bytes.empty();
  const crp_status status = crp_rope_index(input_arg, vision_arg, scheme, circle_null ? nullptr : &circle,
                                           position_arg, deltas_arg, error.data(), error.size);
  FUZZ_CHECK(moved.unwritten(), "crp_rope_index wrote into a misaligned array");
  error.check(status == CRP_OK, "crp_rope_index");
  FUZZ_CHECK(status == CRP_OK || status == CRP_INVALID_ARGUMENT, "crp_rope_index returned status %d (%s)",
             static_cast<int>(status), error.text());
  FUZZ_CHECK(fuzz::all_bytes(position_ids.data() + n_pos, 4 * sizeof(float), kSentinel) &&
                 fuzz::all_bytes(deltas.data() + n_deltas, 4 * sizeof(float), kSentinel),
             "crp_rope_index wrote past its outputs");

  // --- oracle: the C fields, then the batch.
  std::string problem;
  if (!input_arg || !vision_arg || null_output == 1 || null_output == 2) problem = "NULL argument";
  else if (misaligned) problem = "a misaligned array";
  else if (scheme < 0 || scheme > 3) problem = "scheme";
  else if (scheme == CRP_SCHEME_CIRCLE && circle_null) problem = "NULL circle";
  else if (batch < 0 || seq < 0) problem = "negative size";
  else if (total > 0 && !input.input_ids) problem = "NULL input_ids";
  else if (n_images < 0 || (n_images > 0 && !input.image_grid_thw)) problem = "image grids";
  else if (n_videos < 0 || (n_videos > 0 && !input.video_grid_thw)) problem = "video grids";
  else if (!circle_null && (circle.move_to_positive < 0 || circle.move_to_positive > 2)) problem = "move_to_positive";
  VisionConfig v{vision.spatial_merge_size, vision.tokens_per_second, vision.vision_start_token_id,
                 vision.image_token_id, vision.video_token_id,
                 vision.time_is_index ? TimeMode::index : TimeMode::seconds};
  CircleConfig c;
  if (!circle_null)
    c = {circle.radius_auto ? RadiusMode::automatic : RadiusMode::fixed,
         circle.radius,
         circle.radius_scale,
         circle.alpha,
         circle.move_to_origin != 0,
         circle.dff_rate,
         circle.move_to_positive == 1   ? PositiveShift::automatic
         : circle.move_to_positive == 2 ? PositiveShift::offset
                                        : PositiveShift::none,
         circle.positive_offset};
  std::vector<fuzz::oracle::Row> rows;
  if (problem.empty()) {
    fuzz::oracle::Batch b{batch, seq, ids.data(), has_mask ? mask.data() : nullptr, {}, {}, {}};
    for (int64_t i = 0; i < n_images; ++i) b.images.push_back({images[3 * i], images[3 * i + 1], images[3 * i + 2]});
    for (int64_t i = 0; i < n_videos; ++i) b.videos.push_back({videos[3 * i], videos[3 * i + 1], videos[3 * i + 2]});
    if (!seconds_null) b.seconds = seconds;
    problem = fuzz::oracle::split(b, v, rows);
  }
  if (problem.empty() && scheme == CRP_SCHEME_CIRCLE) problem = fuzz::oracle::circle_problem(c);
  bool may_fail = !problem.empty();
  if (problem.empty() && scheme == CRP_SCHEME_CIRCLE) {
    double reach = 0;
    for (const auto& row : rows) {
      double r = 0;
      for (const auto& ch : row.chunks) {
        r += static_cast<double>(ch.text) + 1;
        if (ch.has_block) r += fuzz::oracle::block_reach(Scheme::circle, c, ch.block, 0, v) + 1;
      }
      reach = std::max(reach, r);
    }
    may_fail = !(reach < 1e37);
  }
  fuzz::count(status == CRP_OK ? "rope_index accepted" : "rope_index refused");
  if (status != CRP_OK) {
    FUZZ_CHECK(may_fail, "crp_rope_index refused a valid call: %s", error.text());
    // nothing is written when it fails
    FUZZ_CHECK(fuzz::all_bytes(position_ids.data(), position_ids.size() * sizeof(float), kSentinel) &&
                     fuzz::all_bytes(deltas.data(), deltas.size() * sizeof(float), kSentinel),
                 "crp_rope_index failed after writing into its outputs");
    return;
  }
  FUZZ_CHECK(problem.empty(), "crp_rope_index accepted an invalid call (%s)", problem.c_str());
  fuzz::oracle::check_positions(rows, v, static_cast<Scheme>(scheme), c,
                                {batch, seq, position_ids.data(), deltas.data(), nullptr, nullptr});
}

void fuzz_decode(FuzzedDataProvider& in) {
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(-1, 4);
  const int64_t first = pick_int(in, {0, 5, 100, 2147483647, 2147483648LL, -1, int64_t{1} << 40});
  const int64_t count = pick_int(in, {0, 1, 3, 8, -1, 2147483648LL, int64_t{1} << 33});
  std::vector<float> deltas(static_cast<size_t>(std::max<int64_t>(batch, 0)));
  for (float& d : deltas) d = static_cast<float>(pick_double(in, {0.0, -3.0, 12.5, -2.25e6, 1e30}));
  const bool deltas_null = in.ConsumeIntegralInRange<int>(0, 15) == 0;
  // The harness can only give `out` the room it allocates: 3 x batch x count when small.
  const bool small = batch >= 0 && count >= 0 && count <= 64;
  const size_t n_out = small ? static_cast<size_t>(3 * batch * count) : 0;
  std::vector<float> out(n_out + 4);
  std::memset(out.data(), kSentinel, out.size() * sizeof(float));
  const bool out_null = !small || in.ConsumeIntegralInRange<int>(0, 15) == 0;
  ErrorBuffer error(in);

  bool deltas_finite = true;
  for (float d : deltas) deltas_finite = deltas_finite && std::isfinite(d);
  // (`out` is checked before anything is computed: a NULL out with a huge count must not
  // allocate gigabytes first; -rss_limit_mb catches it if it does)

  if (std::getenv("CIRCLEROPE_FUZZ_VERBOSE")) {  // triage: the call, and its message in full
    std::fprintf(stderr, "decode: batch %lld first %lld count %lld deltas %s out %s error_size %zu%s\n",
                 (long long)batch, (long long)first, (long long)count, deltas_null ? "NULL" : "given",
                 out_null ? "NULL" : "given", error.size, error.null ? " (NULL)" : "");
    for (float d : deltas) std::fprintf(stderr, "  delta %.9g\n", d);
    char full[512] = "";
    crp_decode_positions(deltas_null ? nullptr : deltas.data(), batch, first, count, nullptr, full, sizeof full);
    std::fprintf(stderr, "  with out NULL: %s\n", full);
  }
  // Drawn last (see fuzz_rope_index): rope_deltas or out moved off its alignment.
  const float* deltas_arg = deltas_null ? nullptr : deltas.data();
  float* out_arg = out_null ? nullptr : out.data();
  Misaligned moved;
  const int move = in.ConsumeIntegralInRange<int>(0, 7);
  if (move == 6) moved.move(in, deltas_arg, deltas);
  else if (move == 7) moved.move(in, out_arg, out);
  const bool misaligned = !moved.bytes.empty();
  const crp_status status = crp_decode_positions(deltas_arg, batch, first, count, out_arg, error.data(), error.size);
  FUZZ_CHECK(moved.unwritten(), "crp_decode_positions wrote into a misaligned array");
  error.check(status == CRP_OK, "crp_decode_positions");
  FUZZ_CHECK(status == CRP_OK || status == CRP_INVALID_ARGUMENT, "crp_decode_positions returned status %d",
             static_cast<int>(status));
  FUZZ_CHECK(fuzz::all_bytes(out.data() + n_out, 4 * sizeof(float), kSentinel),
             "crp_decode_positions wrote past out");

  const bool empty = batch == 0 || count == 0;
  std::string problem;
  if (batch < 0) problem = "negative batch";
  else if (batch > 0 && deltas_null) problem = "NULL rope_deltas";
  else if (first < 0 || count < 0) problem = "negative position or count";
  else if (!empty && out_null) problem = "NULL out";
  else if (misaligned) problem = "a misaligned array";
  // A call that computes nothing (count 0) need not look at the deltas (the library reads
  // them only when count > 0, as it reads `out` only when there is something to write).
  else if (!deltas_finite && count > 0) problem = "non-finite rope delta";
  // Cache positions beyond 2^31 have no exact float32 value: refusing them is allowed. So is
  // a count above CRP_MAX_TOKENS even for batch 0 (c_api.h: batch and count each, and their
  // product).
  const bool may_fail = !problem.empty() || first > (int64_t{1} << 31) || count > (int64_t{1} << 31) - first ||
                        count > CRP_MAX_TOKENS || !deltas_finite;
  fuzz::count(status == CRP_OK ? "decode accepted" : "decode refused");
  if (status != CRP_OK) {
    FUZZ_CHECK(may_fail, "crp_decode_positions refused a valid call: %s", error.text());
    FUZZ_CHECK(fuzz::all_bytes(out.data(), n_out * sizeof(float), kSentinel),
               "crp_decode_positions wrote into out and failed");
    return;
  }
  FUZZ_CHECK(problem.empty(), "crp_decode_positions accepted an invalid call (%s)", problem.c_str());
  for (int axis = 0; axis < 3; ++axis)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(first + i) + deltas[static_cast<size_t>(b)];
        const float got = out[static_cast<size_t>((axis * batch + b) * count + i)];
        FUZZ_CHECK(got == want || (std::isnan(got) && std::isnan(want)),
                   "crp_decode_positions: (%d, %lld, %lld) is %.9g, spec §1.6 says %.9g", axis, (long long)b,
                   (long long)i, got, want);
      }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeBool()) fuzz_rope_index(in);
  else fuzz_decode(in);
  return 0;
}
