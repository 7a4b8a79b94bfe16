// libFuzzer target: the C kernels API (c_kernels.h): crp_table_fill and crp_rotate
// with fuzzed configs, positions, dtypes, pairings, directions and strided views, in place
// and out of place, several targets per call, all placed in one shared arena so that views
// can overlap the way callers' views do.
//
// Oracle, independent of src/cpu and src/reference: spec §4 (docs/spec.md) recomputed in
// float64 here (axes, inv_freq, angle, rotation), then the one rounding to the storage dtype
// done by hand, so a result is accepted exactly when it is what the fp32 kernel may produce:
// within 2^-21 of |x0| + |x1| of the exact value before that rounding (the table's two float
// roundings and the fp32 arithmetic stay under 4 * 2^-24). Every byte of the arena that no
// output element owns must be unchanged, and all of it when a call fails (rotary.h: nothing
// is written when it throws). Validity is decided from the element sets of the views:
// overlapping outputs, or an output over another target's input, must be refused.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "circlerope/c_kernels.h"
#include "fuzz_support.h"

namespace {

constexpr size_t kGuard = 8;
constexpr char kGuardByte = 0x5A;

// ---- storage formats, decoded and rounded by value (no library code) ----------------------
double decode(const unsigned char* p, int dtype) {
  if (dtype == CRP_DTYPE_FLOAT32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dtype == CRP_DTYPE_BFLOAT16) return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  const int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double v;
  if (exponent == 0) v = std::ldexp(mantissa, -24);
  else if (exponent == 31) v = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(mantissa + 1024, exponent - 25);
  return sign ? -v : v;
}

// Round to nearest even on a binary grid with `bits` fraction bits, smallest normal exponent
// `min_exp` (subnormals below it) and largest finite value `max`; beyond: infinity.
double round_to(double x, int bits, int min_exp, double max) {
  if (!std::isfinite(x) || x == 0) return x;
  int e;
  std::frexp(std::fabs(x), &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 1, min_exp) - bits);
  const double r = std::nearbyint(std::fabs(x) / ulp) * ulp;
  const double out = r > max ? std::numeric_limits<double>::infinity() : r;
  return std::copysign(out, x);
}
double round_f32(double x) { return round_to(x, 23, -126, FLT_MAX); }
double round_storage(double x, int dtype) {
  const double f = round_f32(x);  // the kernel computes in fp32, then rounds to storage
  if (dtype == CRP_DTYPE_BFLOAT16) return round_to(f, 7, -126, std::ldexp(255.0, 120));
  if (dtype == CRP_DTYPE_FLOAT16) return round_to(f, 10, -14, 65504.0);
  return f;
}
size_t dtype_bytes(int dtype) { return dtype == CRP_DTYPE_FLOAT32 ? 4 : 2; }

// ---- spec §4 -----------------------------------------------------------------------------
bool config_valid(const crp_rotary_config& c) {
  if (!(c.theta >= 1 && c.theta <= 0x1p126)) return false;  // rotary.h: [kMinTheta, kMaxTheta]
  if (c.rotary_dim < 2 || c.rotary_dim > 1024 || c.rotary_dim % 2 != 0) return false;
  if (c.layout < 0 || c.layout > 2) return false;
  if (c.layout == CRP_LAYOUT_SINGLE) return true;
  const int64_t st = c.sections[0], sh = c.sections[1], sw = c.sections[2];
  return st >= 0 && sh >= 0 && sw >= 0 && st + sh + sw == c.rotary_dim / 2;
}

std::vector<int> axes_of(const crp_rotary_config& c) {
  const int half = c.rotary_dim / 2;
  std::vector<int> axes(static_cast<size_t>(half), 0);
  const int64_t st = c.sections[0], sh = c.sections[1], sw = c.sections[2];
  for (int i = 0; i < half; ++i) {
    int a = 0;
    if (c.layout == CRP_LAYOUT_CHUNKED) a = i < st ? 0 : i < st + sh ? 1 : 2;
    else if (c.layout == CRP_LAYOUT_INTERLEAVED) a = (i % 3 == 1 && i < 3 * sh) ? 1 : (i % 3 == 2 && i < 3 * sw) ? 2 : 0;
    axes[static_cast<size_t>(i)] = a;
  }
  return axes;
}

// ---- views in one arena ---------------------------------------------------------------------
struct View {
  int64_t offset = 0;  // in bytes from the arena start
  int dtype = 0;
  int64_t shape[4] = {};
  int64_t strides[4] = {};
  bool null = false;
  int64_t count() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  bool empty() const { return shape[0] == 0 || shape[1] == 0 || shape[2] == 0 || shape[3] == 0; }
  int64_t element(int64_t b, int64_t s, int64_t h, int64_t d) const {  // byte offset
    return offset + (b * strides[0] + s * strides[1] + h * strides[2] + d * strides[3]) *
                        static_cast<int64_t>(dtype_bytes(dtype));
  }
  int64_t reach() const {  // one past the last byte (views are non-negative here)
    int64_t last = 0;
    for (int i = 0; i < 4; ++i) last += (shape[i] - 1) * strides[i];
    return offset + (last + 1) * static_cast<int64_t>(dtype_bytes(dtype));
  }
};

// The library's documented sufficient test (rotary.h: "may write one element twice").
bool strides_safe(const View& v) {
  int order[4] = {0, 1, 2, 3};
  std::sort(order, order + 4, [&](int a, int b) { return v.strides[a] < v.strides[b]; });
  int64_t reach = 0;
  for (int d : order) {
    if (v.shape[d] <= 1) continue;
    if (v.strides[d] <= reach) return false;
    reach += (v.shape[d] - 1) * v.strides[d];
  }
  return true;
}

struct Target {
  View in, out;
  bool in_place() const {
    return in.offset == out.offset && !in.null && !out.null &&
           std::equal(in.strides, in.strides + 4, out.strides);
  }
};

// Strides that walk the dims in a fuzzed order with optional padding: never self-overlapping.
void dense_strides(FuzzedDataProvider& in, View& v) {
  int order[4] = {3, 2, 1, 0};
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) std::swap(order[1], order[2]);  // [B,H,S,D]
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) std::swap(order[0], order[in.ConsumeIntegralInRange<int>(1, 3)]);
  int64_t step = 1;
  for (int d : order) {
    v.strides[d] = step;
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) v.strides[d] += in.ConsumeIntegralInRange<int64_t>(0, 3);
    step = v.strides[d] * std::max<int64_t>(v.shape[d], 1) + (in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<int64_t>(1, 9) : 0);
  }
}

void raw_strides(FuzzedDataProvider& in, View& v) {
  for (int64_t& s : v.strides) s = in.ConsumeIntegralInRange<int64_t>(0, 40);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) v.strides[in.ConsumeIntegralInRange<int>(0, 3)] = -1;
}

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void fill(std::vector<unsigned char>& arena, int dtype, uint64_t seed) {
  const size_t size = dtype_bytes(dtype);
  for (size_t i = 0; i + size <= arena.size(); i += size) {
    const uint64_t r = splitmix(seed);
    if (dtype == CRP_DTYPE_FLOAT32) {
      float f;
      switch (r % 16) {
        case 0: {
          static const float specials[] = {0.0f, -0.0f, 1e30f, -3.4e38f, 1e-40f, NAN, INFINITY, -INFINITY, 65504.0f, 1e-8f};
          f = specials[(r >> 8) % 10];
          break;
        }
        case 1: f = std::bit_cast<float>(static_cast<uint32_t>(r >> 16)); break;
        default: f = static_cast<float>(static_cast<double>(r >> 11) * 0x1p-53 * 8.0 - 4.0);
      }
      std::memcpy(&arena[i], &f, 4);
    } else {
      uint16_t h = static_cast<uint16_t>(r >> 24);
      if (r % 4 != 0) {  // mostly ordinary magnitudes: exponent near the bias
        h = static_cast<uint16_t>((h & 0x807F) | ((dtype == CRP_DTYPE_BFLOAT16 ? 124 + (r >> 40) % 6 : 12 + (r >> 40) % 6)
                                                  << (dtype == CRP_DTYPE_BFLOAT16 ? 7 : 10)));
        if (dtype == CRP_DTYPE_FLOAT16) h = static_cast<uint16_t>((h & 0xFC00) | ((r >> 24) & 0x3FF));
      }
      std::memcpy(&arena[i], &h, 2);
    }
  }
}

double pick_double(FuzzedDataProvider& in, std::initializer_list<double> usual) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  const std::vector<double> v(usual);
  if (k < 220) return v[k % v.size()];
  if (k < 230) return std::numeric_limits<double>::quiet_NaN();
  if (k < 235) return std::numeric_limits<double>::infinity();
  return in.ConsumeFloatingPoint<double>();
}

int pick_int(FuzzedDataProvider& in, std::initializer_list<int> usual) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  const std::vector<int> v(usual);
  if (k < 240) return v[k % v.size()];
  return in.ConsumeIntegral<int>();
}

struct ErrorBuffer {
  std::vector<char> bytes;
  size_t size = 0;
  bool null = false;
  explicit ErrorBuffer(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: null = true; break;
      case 1: size = 0; break;
      case 2: size = in.ConsumeIntegralInRange<size_t>(1, 16); break;
      default: size = 256; break;
    }
    bytes.assign(size + kGuard, kGuardByte);
  }
  char* data() { return null ? nullptr : bytes.data(); }
  void check(bool ok, const char* function) const {
    if (!null) fuzz::check_c_message(bytes.data(), size, kGuard, kGuardByte, ok, function);
  }
  const char* text() const { return null || size == 0 ? "" : bytes.data(); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);

  // ---- the table ----
  crp_rotary_config config;
  crp_rotary_config_default(&config);
  config.theta = pick_double(in, {1e6, 1e4, 10.0, 1.5, 0.0, 1e-310, 1e300});
  config.rotary_dim = pick_int(in, {128, 64, 16, 8, 2, 6, 12, 32, 48, 24, 0, 3, -2, 1026, 130, 256});
  config.layout = pick_int(in, {0, 1, 2, 0, 1, -1, 3});
  const int half = config.rotary_dim / 2;
  if (in.ConsumeIntegralInRange<int>(0, 7) != 0 && half > 0) {
    config.sections[0] = in.ConsumeIntegralInRange<int>(0, half);
    config.sections[1] = in.ConsumeIntegralInRange<int>(0, half - config.sections[0]);
    config.sections[2] = half - config.sections[0] - config.sections[1];
  } else {
    for (int& s : config.sections) s = pick_int(in, {0, 1, -1, 16, 24, 2147483647, 33});
  }
  const bool table_config_null = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  // (sections summed in int would overflow and wrap into a "valid" sum; the oracle's
  // config_valid sums in 64 bits)
  const bool valid_config = !table_config_null && config_valid(config);

  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(-1, 2);
  const int64_t seq = in.ConsumeIntegralInRange<int64_t>(-1, 5);
  const int64_t tokens = batch > 0 && seq > 0 ? batch * seq : 0;
  std::vector<float> positions(static_cast<size_t>(3 * tokens));
  for (float& p : positions) {
    static const float usual[] = {0.0f, 1.0f, 2.5f, -3.0f, 17.0f, 1e4f, 1e7f, 3e38f, -1e-40f, 123.456f};
    const uint8_t k = in.ConsumeIntegral<uint8_t>();
    p = k < 200 ? usual[k % 10] : k < 215 ? NAN : k < 220 ? -INFINITY : in.ConsumeFloatingPoint<float>();
  }
  const bool positions_null = in.ConsumeIntegralInRange<int>(0, 31) == 0;
  const int table_threads = pick_int(in, {0, 1, 2, 1, -1});

  // Thread counts above CRP_MAX_THREADS are refused (pick_int gives any int now and then).
  bool table_must_fail = !valid_config || batch < 0 || seq < 0 || table_threads < 0 ||
                         table_threads > CRP_MAX_THREADS || (tokens > 0 && positions_null);
  std::vector<int> axes;
  std::vector<double> inv;
  if (!table_must_fail) {
    axes = axes_of(config);
    for (int i = 0; i < half; ++i) inv.push_back(std::pow(config.theta, -2.0 * i / config.rotary_dim));
    for (int a : axes)
      for (int64_t t = 0; t < tokens; ++t)
        if (!std::isfinite(positions[static_cast<size_t>(a * tokens + t)])) table_must_fail = true;
  }
  // The table's memory: its exact size when the call may be accepted (a valid config), none
  // otherwise (refused before the values are looked at). Sentinels show a write on failure.
  std::vector<float> values(valid_config ? static_cast<size_t>(tokens * config.rotary_dim) : 0, -7.0f);
  const crp_table_view table{values.data(), batch, seq, config.rotary_dim};
  crp_rotary_params table_params;
  crp_rotary_params_default(&table_params);
  table_params.threads = table_threads;
  ErrorBuffer table_error(in);
  const crp_status created = crp_table_fill(table_config_null ? nullptr : &config,
                                            positions_null ? nullptr : positions.data(), &table, &table_params,
                                            table_error.data(), table_error.size);
  if (std::getenv("CIRCLEROPE_FUZZ_VERBOSE")) {  // triage: the call, and its message in full
    std::fprintf(stderr, "table: theta %g dim %d layout %d sections [%d %d %d] batch %lld seq %lld threads %d%s%s\n",
                 config.theta, config.rotary_dim, config.layout, config.sections[0], config.sections[1],
                 config.sections[2], (long long)batch, (long long)seq, table_threads,
                 table_config_null ? " config NULL" : "", positions_null ? " positions NULL" : "");
    char full[512] = "";
    std::vector<float> again(values.size());
    const crp_table_view again_table{again.data(), batch, seq, config.rotary_dim};
    crp_table_fill(table_config_null ? nullptr : &config, positions_null ? nullptr : positions.data(), &again_table,
                   &table_params, full, sizeof full);
    std::fprintf(stderr, "table message: %s (oracle: must_fail %d)\n", full, table_must_fail);
  }
  table_error.check(created == CRP_OK, "crp_table_fill");
  fuzz::count(created == CRP_OK ? "table accepted" : "table refused");
  if (created != CRP_OK) {
    FUZZ_CHECK(table_must_fail, "crp_table_fill refused a valid call: %s", table_error.text());
    FUZZ_CHECK(std::all_of(values.begin(), values.end(), [](float v) { return v == -7.0f; }),
               "crp_table_fill failed after writing into the table");
    FUZZ_CHECK(created == CRP_INVALID_ARGUMENT, "crp_table_fill returned status %d", (int)created);
    // A NULL table must be refused too.
    crp_head_tensor t{};
    char message[64];
    FUZZ_CHECK(crp_rotate(nullptr, &t, &t, 1, nullptr, message, sizeof message) != CRP_OK,
               "crp_rotate accepted a NULL table");
    return 0;
  }
  FUZZ_CHECK(!table_must_fail, "crp_table_fill accepted an invalid call");
  const int rot = config.rotary_dim;

  // ---- the targets ----
  const int dtype = in.ConsumeIntegralInRange<int>(0, 2);
  const int count = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? in.ConsumeIntegralInRange<int>(-1, 0)
                                                                : in.ConsumeIntegralInRange<int>(1, 4);
  std::vector<Target> targets(static_cast<size_t>(std::max(count, 0)));
  int64_t arena_end = 0;
  std::vector<const View*> placed;
  auto place = [&](View& v) {
    const int choice = placed.empty() ? 0 : in.ConsumeIntegralInRange<int>(0, 9);
    if (choice < 7) {  // a fresh region, aligned or not
      v.offset = (arena_end + 63) / 64 * 64 + (in.ConsumeIntegralInRange<int>(0, 3) == 0 ? 2 * in.ConsumeIntegralInRange<int64_t>(1, 7) : 0);
    } else {  // on top of an earlier view, shifted by a few elements
      const View& other = *placed[in.ConsumeIntegralInRange<size_t>(0, placed.size() - 1)];
      v.offset = other.offset + in.ConsumeIntegralInRange<int64_t>(0, 6) * static_cast<int64_t>(dtype_bytes(v.dtype));
    }
    if (!v.empty() && v.reach() > arena_end) arena_end = v.reach();
    arena_end = std::max(arena_end, v.offset + 64);
    placed.push_back(&v);
  };
  for (Target& t : targets) {
    View& a = t.in;
    a.dtype = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? pick_int(in, {0, 1, 2, -1, 3}) : dtype;
    a.shape[0] = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? batch + 1 : batch;
    a.shape[1] = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? seq - 1 : seq;
    a.shape[2] = in.ConsumeIntegralInRange<int64_t>(in.ConsumeIntegralInRange<int>(0, 15) == 0 ? 0 : 1, 4);
    a.shape[3] = rot + (in.ConsumeIntegralInRange<int>(0, 31) == 0 ? -2 : in.ConsumeIntegralInRange<int64_t>(0, 3) % 3 == 0 ? 0 : in.ConsumeIntegralInRange<int64_t>(1, 3));
    if (a.dtype < 0 || a.dtype > 2) a.dtype = dtype;  // kept for the call; the C value stays invalid below
    if (in.ConsumeIntegralInRange<int>(0, 5) == 0) raw_strides(in, a);
    else dense_strides(in, a);
    a.null = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  }
  // The C dtype values actually passed (possibly out of range) are drawn separately.
  std::vector<int> in_dtype_value(targets.size()), out_dtype_value(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    in_dtype_value[i] = in.ConsumeIntegralInRange<int>(0, 63) == 0 ? pick_int(in, {-1, 3, 1, 2}) : targets[i].in.dtype;
    // A valid value is the dtype the library reads the view with, so the view (its element size
    // when placed, the oracle's decoding) takes it too; only an invalid value stays apart.
    if (in_dtype_value[i] >= 0 && in_dtype_value[i] <= 2) targets[i].in.dtype = in_dtype_value[i];
    targets[i].out = targets[i].in;
    View& o = targets[i].out;
    const int mode = in.ConsumeIntegralInRange<int>(0, 9);
    if (mode >= 4 && mode < 9) {  // out of place, own strides
      if (in.ConsumeIntegralInRange<int>(0, 5) == 0) raw_strides(in, o);
      else dense_strides(in, o);
    }
    if (mode == 9) o.dtype = pick_int(in, {0, 1, 2});
    out_dtype_value[i] = in.ConsumeIntegralInRange<int>(0, 63) == 0 ? pick_int(in, {-1, 3}) : o.dtype;
    o.null = in.ConsumeIntegralInRange<int>(0, 63) == 0;
    targets[i].out.offset = -1;
    if (mode < 4) o.offset = -2;  // in place: same offset as in, decided after placing
  }
  for (Target& t : targets) {
    if (t.in.strides[0] < 0 || t.in.strides[1] < 0 || t.in.strides[2] < 0 || t.in.strides[3] < 0) {
      t.in.offset = (arena_end + 63) / 64 * 64;
      arena_end = t.in.offset + 64;
    } else {
      place(t.in);
    }
  }
  for (Target& t : targets) {
    View& o = t.out;
    if (o.offset == -2) {
      o.offset = t.in.offset;
      continue;
    }
    const bool negative = o.strides[0] < 0 || o.strides[1] < 0 || o.strides[2] < 0 || o.strides[3] < 0;
    if (negative || in.ConsumeIntegralInRange<int>(0, 15) == 0) {  // negative strides, or same data as in
      o.offset = negative ? (arena_end + 63) / 64 * 64 : t.in.offset;
      arena_end = std::max(arena_end, o.offset + 64);
    } else {
      place(o);
    }
  }
  const int pairing = pick_int(in, {0, 1, 0, 1, -1, 2});
  const int direction = pick_int(in, {0, 1, 0, 1, -1, 2});
  const int threads = pick_int(in, {0, 1, 2, 1, -1});
  const bool in_null = in.ConsumeIntegralInRange<int>(0, 63) == 0, out_null = in.ConsumeIntegralInRange<int>(0, 63) == 0;
  ErrorBuffer error(in);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();

  std::vector<unsigned char> arena(static_cast<size_t>(arena_end) + 64);
  // The dtype of the call: target 0's (a valid call has only that one).
  const int call_dtype = targets.empty() ? dtype : targets[0].in.dtype;
  fill(arena, call_dtype, seed);
  const std::vector<unsigned char> before = arena;

  std::vector<crp_head_tensor> c_in(targets.size()), c_out(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    auto to_c = [&](const View& v, int dtype_value) {
      crp_head_tensor t{};
      t.data = v.null ? nullptr : arena.data() + v.offset;
      t.dtype = dtype_value;
      for (int d = 0; d < 4; ++d) {
        t.shape[d] = v.shape[d];
        t.strides[d] = v.strides[d];
      }
      return t;
    };
    c_in[i] = to_c(targets[i].in, in_dtype_value[i]);
    c_out[i] = to_c(targets[i].out, out_dtype_value[i]);
  }

  // ---- validity ----
  bool must_fail = pairing < 0 || pairing > 1 || direction < 0 || direction > 1 || threads < 0 ||
                   threads > CRP_MAX_THREADS || count < 0 ||
                   (count > 0 && (in_null || out_null));
  bool may_fail = false;
  bool outs_share = false, out_over_other_in = false;
  // Per arena byte: bit i = an element of target i's in, bit 4 + i = of its out.
  std::vector<uint8_t> owners(arena.size(), 0), writes(arena.size(), 0);
  std::vector<std::vector<int64_t>> written(targets.size());
  for (size_t i = 0; i < targets.size() && !must_fail; ++i) {
    const Target& t = targets[i];
    const View& a = t.in;
    const View& o = t.out;
    for (int d = 0; d < 4; ++d)
      if (a.shape[d] < 0 || a.strides[d] < 0 || o.strides[d] < 0) must_fail = true;
    if (in_dtype_value[i] != c_in[0].dtype || in_dtype_value[i] < 0 || in_dtype_value[i] > 2 ||
        out_dtype_value[i] != in_dtype_value[i])
      must_fail = true;
    if (a.shape[0] != std::max<int64_t>(batch, 0) || a.shape[1] != std::max<int64_t>(seq, 0) || a.shape[3] < rot)
      must_fail = true;
    if (must_fail || a.empty()) continue;
    if (a.null || o.null) must_fail = true;
    if (!t.in_place() && a.offset == o.offset) must_fail = true;  // same data, other strides
    if (must_fail) continue;
    if (!strides_safe(o)) may_fail = true;
    const auto in_bit = static_cast<uint8_t>(1u << i), out_bit = static_cast<uint8_t>(16u << i);
    for (int64_t b = 0; b < a.shape[0]; ++b)
      for (int64_t s = 0; s < a.shape[1]; ++s)
        for (int64_t h = 0; h < a.shape[2]; ++h)
          for (int64_t d = 0; d < a.shape[3]; ++d) {
            const int64_t ib = a.element(b, s, h, d);
            for (size_t k = 0; k < dtype_bytes(a.dtype); ++k) owners[static_cast<size_t>(ib) + k] |= in_bit;
            const int64_t ob = o.element(b, s, h, d);
            // The overlap rules are about the out *view* (rotary.h: "outs that share a byte
            // with another target's in or out"), pass-through elements of an in-place view
            // included, although in place those are not written (fuzz run of 2026-12-01: the
            // oracle had left them out and called a refused call valid).
            for (size_t k = 0; k < dtype_bytes(o.dtype); ++k) owners[static_cast<size_t>(ob) + k] |= out_bit;
            if (t.in_place() && d >= rot) continue;  // in place: the rest of the head is not written
            written[i].push_back(ob);
            for (size_t k = 0; k < dtype_bytes(o.dtype); ++k)
              if (++writes[static_cast<size_t>(ob) + k] > 1) must_fail = true;  // one element written twice
          }
    for (int64_t ob : written[i])
      for (size_t k = 0; k < dtype_bytes(o.dtype); ++k) writes[static_cast<size_t>(ob) + k] = 0;
    if (!t.in_place() && a.offset < o.reach() && o.offset < a.reach()) may_fail = true;  // hulls overlap
  }
  for (size_t i = 0; i < targets.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (!targets[i].out.empty() && targets[i].out.offset == targets[j].out.offset) may_fail = true;  // documented
  if (!must_fail)
    for (const uint8_t bits : owners) {
      const unsigned outs = bits >> 4, ins = bits & 15u;
      if (outs & (outs - 1)) outs_share = true;  // outputs of two targets share a byte
      for (unsigned w = 0; w < 4; ++w) {
        if (!(outs >> w & 1u)) continue;
        // An output over an input: fine only for its own in-place view. Over its own input
        // otherwise the library must refuse (documented); over another target's input the
        // result depends on the order of the work: F3.
        if (!targets[w].in_place() && (ins >> w & 1u)) must_fail = true;
        if (ins & ~(1u << w)) out_over_other_in = true;
      }
    }
  if (outs_share || out_over_other_in) must_fail = true;

  // Data not aligned to its element size (an fp32 view 2 bytes into a buffer) is refused
  // (rotary.h, c_kernels.h; finding F2, regressions/c_kernels/f2_misaligned_fp32, was read
  // with misaligned loads). The arena is malloc'd, so the offset decides. An empty view
  // (a size 0) is never read: other checks decide then.
  bool misaligned = false;
  for (const Target& t : targets)
    for (const View* v : {&t.in, &t.out})
      if (!v->null && !v->empty() && v->offset % static_cast<int64_t>(dtype_bytes(v->dtype)) != 0) misaligned = true;
  if (misaligned) must_fail = true;

  if (std::getenv("CIRCLEROPE_FUZZ_VERBOSE")) {  // triage: what the call looks like
    std::fprintf(stderr, "table: theta %g dim %d layout %d sections [%d %d %d] batch %lld seq %lld\n", config.theta,
                 config.rotary_dim, config.layout, config.sections[0], config.sections[1], config.sections[2],
                 (long long)batch, (long long)seq);
    std::fprintf(stderr, "rotate: count %d pairing %d direction %d threads %d in_null %d out_null %d\n", count,
                 pairing, direction, threads, in_null, out_null);
    for (size_t i = 0; i < targets.size(); ++i)
      for (const View* v : {&targets[i].in, &targets[i].out})
        std::fprintf(stderr, "  %zu %s: offset %lld dtype %d (C %d) shape [%lld %lld %lld %lld] strides [%lld %lld %lld %lld]%s\n",
                     i, v == &targets[i].in ? "in " : "out", (long long)v->offset, v->dtype,
                     v == &targets[i].in ? in_dtype_value[i] : out_dtype_value[i], (long long)v->shape[0],
                     (long long)v->shape[1], (long long)v->shape[2], (long long)v->shape[3], (long long)v->strides[0],
                     (long long)v->strides[1], (long long)v->strides[2], (long long)v->strides[3],
                     v->null ? " NULL" : "");
    std::fprintf(stderr, "oracle: must_fail %d may_fail %d outs_share %d out_over_other_in %d\n", must_fail, may_fail,
                 outs_share, out_over_other_in);
  }

  const crp_rotary_params params{pairing, direction, threads, CRP_ISA_AUTOMATIC};
  const crp_status status = crp_rotate(&table, in_null ? nullptr : c_in.data(), out_null ? nullptr : c_out.data(),
                                       count, &params, error.data(), error.size);
  error.check(status == CRP_OK, "crp_rotate");
  fuzz::count(status == CRP_OK ? "rotate accepted" : "rotate refused");
  if (status != CRP_OK) {
    FUZZ_CHECK(status == CRP_INVALID_ARGUMENT, "crp_rotate returned status %d: %s", (int)status, error.text());
    FUZZ_CHECK(must_fail || may_fail, "crp_rotate refused a valid call: %s", error.text());
    FUZZ_CHECK(arena == before, "crp_rotate failed after writing into the tensors: %s", error.text());
    return 0;
  }
  FUZZ_CHECK(!must_fail, "crp_rotate accepted an invalid call (%s)",
             outs_share ? "outputs of two targets overlap"
             : out_over_other_in  ? "an output overlaps another target's input (F3)"
                         : "an output overlaps its own input without being the same view, or itself");

  // ---- numbers ----
  std::vector<bool> owned(arena.size(), false);
  for (size_t i = 0; i < targets.size(); ++i)
    for (int64_t ob : written[i])
      for (size_t k = 0; k < dtype_bytes(call_dtype); ++k) owned[static_cast<size_t>(ob) + k] = true;
  for (size_t byte = 0; byte < arena.size(); ++byte)
    FUZZ_CHECK(owned[byte] || arena[byte] == before[byte], "crp_rotate changed arena byte %zu that no output owns",
               byte);
  const bool gptj = pairing == CRP_PAIRING_GPTJ;
  const double sign = direction == CRP_BACKWARD ? -1.0 : 1.0;
  // cos and sin of every (token, frequency), from the same double phase as spec §4
  std::vector<double> cosv(static_cast<size_t>(tokens * half)), sinv(cosv.size()), phis(cosv.size());
  for (int64_t tok = 0; tok < tokens; ++tok)
    for (int i = 0; i < half; ++i) {
      const double pos = positions[static_cast<size_t>(axes[static_cast<size_t>(i)] * tokens + tok)];
      const double phi = pos * inv[static_cast<size_t>(i)];
      const size_t at = static_cast<size_t>(tok * half + i);
      phis[at] = phi;
      cosv[at] = std::cos(phi);
      sinv[at] = sign * std::sin(phi);
    }
  for (size_t ti = 0; ti < targets.size(); ++ti) {
    const Target& t = targets[ti];
    const View& a = t.in;
    const View& o = t.out;
    if (a.empty()) continue;
    for (int64_t b = 0; b < a.shape[0]; ++b)
      for (int64_t s = 0; s < a.shape[1]; ++s)
        for (int64_t h = 0; h < a.shape[2]; ++h) {
          for (int i = 0; i < half; ++i) {
            const int64_t d0 = gptj ? 2 * i : i, d1 = gptj ? 2 * i + 1 : i + half;
            const size_t at = static_cast<size_t>((b * seq + s) * half + i);
            const double c = cosv[at], sn = sinv[at], phi = phis[at];
            const double x0 = decode(&before[static_cast<size_t>(a.element(b, s, h, d0))], call_dtype);
            const double x1 = decode(&before[static_cast<size_t>(a.element(b, s, h, d1))], call_dtype);
            const double e[2] = {x0 * c - x1 * sn, x1 * c + x0 * sn};
            const int64_t where[2] = {o.element(b, s, h, d0), o.element(b, s, h, d1)};
            const double err = (std::fabs(x0) + std::fabs(x1)) * 0x1p-21 + 0x1p-140;
            for (int k = 0; k < 2; ++k) {
              const double got = decode(&arena[static_cast<size_t>(where[k])], call_dtype);
              if (!std::isfinite(x0) || !std::isfinite(x1)) {
                FUZZ_CHECK(!std::isfinite(got), "crp_rotate: a non-finite input gave the finite %.9g", got);
                continue;
              }
              const double lo = round_storage(e[k] - err, call_dtype), hi = round_storage(e[k] + err, call_dtype);
              FUZZ_CHECK(got >= lo && got <= hi,
                         "crp_rotate: target %zu (%s, %s, %s%s) token (%lld, %lld) head %lld pair %d element %d: "
                         "%.9g, float64 gives %.9g (accepted [%.9g, %.9g]); x = (%.9g, %.9g), phi = %.17g",
                         ti, call_dtype == 0 ? "fp32" : call_dtype == 1 ? "bf16" : "fp16", gptj ? "gptj" : "neox",
                         direction ? "backward" : "forward", t.in_place() ? ", in place" : "", (long long)b,
                         (long long)s, (long long)h, i, k, got, e[k], lo, hi, x0, x1, phi);
            }
          }
          if (t.in_place()) continue;
          for (int64_t d = rot; d < a.shape[3]; ++d)  // the rest of the head passes through
            FUZZ_CHECK(std::memcmp(&arena[static_cast<size_t>(o.element(b, s, h, d))],
                                   &before[static_cast<size_t>(a.element(b, s, h, d))], dtype_bytes(call_dtype)) == 0,
                       "crp_rotate: element %lld beyond the rotary dim was not copied", (long long)d);
        }
  }
  return 0;
}
