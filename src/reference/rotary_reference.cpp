#include "rotary_reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string_view>

namespace circlerope::reference {

double load(const void* data, DType dtype, std::int64_t offset) {
  if (dtype == DType::float32) return static_cast<const float*>(data)[offset];
  const std::uint16_t h = static_cast<const std::uint16_t*>(data)[offset];
  if (dtype == DType::bfloat16) return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int e = (h >> 10) & 31;
  const int m = h & 1023;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

namespace {

std::int64_t pair_index(Pairing p, int i, int half, int which) {
  return p == Pairing::neox ? i + which * half : 2 * i + which;
}

// Rounds to `bits` significant bits, nearest even; fp16's subnormals when min_exponent says.
double round_to(double v, int bits, int min_exponent) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);  // v = m * 2^e, 0.5 <= |m| < 1
  if (e < min_exponent) e = min_exponent;
  const double scale = std::ldexp(1.0, bits - e);
  return std::nearbyint(v * scale) / scale;
}

double round_storage(double v, DType dtype) {
  switch (dtype) {
    case DType::float32: return static_cast<float>(v);
    case DType::bfloat16: return round_to(static_cast<float>(v), 8, -125);
    case DType::float16: return round_to(v, 11, -13);
  }
  return v;
}

template <class Rotate>
std::vector<double> rotate_with(const RotaryConfig& config, const float* position_ids,
                                const HeadTensor& x, Pairing pairing, Direction direction,
                                const Rotate& rotate_pair) {
  const auto axes = frequency_axes(config);
  const auto inv = inverse_frequencies(config);
  const int half = config.rotary_dim / 2;
  const std::int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  std::vector<double> out(static_cast<std::size_t>(B * S * H * D));
  const double sign = direction == Direction::forward ? 1.0 : -1.0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t d = config.rotary_dim; d < D; ++d)
          out[dense_index(x, b, s, h, d)] = load(x.data, x.dtype, element_offset(x, b, s, h, d));
      for (int i = 0; i < half; ++i) {
        const double pos = position_ids[(axes[static_cast<std::size_t>(i)] * B + b) * S + s];
        const double phi = pos * inv[static_cast<std::size_t>(i)];
        const double c = std::cos(phi), sn = sign * std::sin(phi);
        const auto i0 = pair_index(pairing, i, half, 0), i1 = pair_index(pairing, i, half, 1);
        for (std::int64_t h = 0; h < H; ++h) {
          const double x0 = load(x.data, x.dtype, element_offset(x, b, s, h, i0));
          const double x1 = load(x.data, x.dtype, element_offset(x, b, s, h, i1));
          rotate_pair(x0, x1, c, sn, out[dense_index(x, b, s, h, i0)], out[dense_index(x, b, s, h, i1)]);
        }
      }
    }
  return out;
}

}  // namespace

std::vector<double> rotate(const RotaryConfig& config, const float* position_ids,
                           const HeadTensor& x, Pairing pairing, Direction direction) {
  return rotate_with(config, position_ids, x, pairing, direction,
                     [](double x0, double x1, double c, double s, double& y0, double& y1) {
                       y0 = x0 * c - x1 * s;
                       y1 = x1 * c + x0 * s;
                     });
}

std::vector<double> rotate_in_storage_precision(const RotaryConfig& config,
                                                const float* position_ids, const HeadTensor& x,
                                                Pairing pairing, Direction direction) {
  const DType t = x.dtype;
  return rotate_with(config, position_ids, x, pairing, direction,
                     [t](double x0, double x1, double c, double s, double& y0, double& y1) {
                       c = round_storage(c, t);
                       s = round_storage(s, t);
                       y0 = round_storage(round_storage(x0 * c, t) - round_storage(x1 * s, t), t);
                       y1 = round_storage(round_storage(x1 * c, t) + round_storage(x0 * s, t), t);
                     });
}

namespace {

// fp16 bits of a magnitude that fp16 holds exactly (0 .. 65504): the pattern whose decoding
// equals it, found by bisection (decoded magnitudes grow with the pattern).
std::uint16_t f16_pattern_of(double magnitude) {
  std::uint16_t lo = 0, hi = 0x7BFF;
  while (lo < hi) {
    const auto mid = static_cast<std::uint16_t>((lo + hi) / 2);
    if (load(&mid, DType::float16, 0) < magnitude) lo = static_cast<std::uint16_t>(mid + 1);
    else hi = mid;
  }
  return lo;
}

// One float32 rounding that the compiler cannot fuse with the next operation.
float rounded(float v) {
  volatile float r = v;
  return r;
}

}  // namespace

std::uint16_t to_bfloat16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const double r = round_to(f, 8, -125);  // bf16: 8 significant bits, float32's exponents
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::fabs(r) >= 0x1p128) return sign | 0x7F80;  // past the largest finite: infinity
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(r)) >> 16);
}

std::uint16_t to_float16(float f) {
  if (std::isnan(f)) return 0x7E00;
  const double r = round_to(f, 11, -13);  // fp16: 11 significant bits, subnormals below 2^-14
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::fabs(r) >= 65536.0) return sign | 0x7C00;
  return static_cast<std::uint16_t>(sign | f16_pattern_of(std::fabs(r)));
}

std::uint32_t to_float32(float f) { return std::isnan(f) ? 0x7FC00000u : std::bit_cast<std::uint32_t>(f); }

std::uint32_t load_bits(const void* data, DType dtype, std::int64_t offset) {
  if (dtype == DType::float32) return std::bit_cast<std::uint32_t>(static_cast<const float*>(data)[offset]);
  return static_cast<const std::uint16_t*>(data)[offset];
}

std::vector<std::uint32_t> rotate_bits(const RotaryTableView& table, const HeadTensor& x, Pairing pairing,
                                       Direction direction, bool fused) {
  const int half = table.rotary_dim / 2;
  const std::int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  std::vector<std::uint32_t> out(static_cast<std::size_t>(B * S * H * D));
  auto value = [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    const std::uint32_t u = load_bits(x.data, x.dtype, element_offset(x, b, s, h, d));
    switch (x.dtype) {
      case DType::float32: return std::bit_cast<float>(u);
      case DType::bfloat16: return std::bit_cast<float>(u << 16);
      case DType::float16: return static_cast<float>(load(x.data, x.dtype, element_offset(x, b, s, h, d)));
    }
    return 0.0f;
  };
  auto store = [&](float v) -> std::uint32_t {
    switch (x.dtype) {
      case DType::float32: return to_float32(v);
      case DType::bfloat16: return to_bfloat16(v);
      case DType::float16: return to_float16(v);
    }
    return 0;
  };
  for_each_element(x, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    if (d >= 2 * half) out[dense_index(x, b, s, h, d)] = load_bits(x.data, x.dtype, element_offset(x, b, s, h, d));
  });
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      const float* row = table.values + (b * S + s) * 2 * half;
      for (int i = 0; i < half; ++i) {
        const float c = row[i];
        const float sn = direction == Direction::forward ? row[half + i] : -row[half + i];
        const auto i0 = pair_index(pairing, i, half, 0), i1 = pair_index(pairing, i, half, 1);
        for (std::int64_t h = 0; h < H; ++h) {
          const float x0 = value(b, s, h, i0), x1 = value(b, s, h, i1);
          const float p1 = rounded(x1 * sn), p0 = rounded(x0 * sn);
          const float y0 = fused ? std::fma(x0, c, -p1) : rounded(rounded(x0 * c) - p1);
          const float y1 = fused ? std::fma(x1, c, p0) : rounded(rounded(x1 * c) + p0);
          out[dense_index(x, b, s, h, i0)] = store(y0);
          out[dense_index(x, b, s, h, i1)] = store(y1);
        }
      }
    }
  return out;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::float32: return kFloat32Tolerance;
    case DType::bfloat16: return kBfloat16Tolerance;
    case DType::float16: return kFloat16Tolerance;
  }
  return 0;
}

double max_error(const std::vector<double>& expected, const HeadTensor& in,
                 const HeadTensor& out, int rotary_dim, Pairing pairing) {
  const double inf = std::numeric_limits<double>::infinity();
  const int half = rotary_dim / 2;
  double worst = 0;
  for (std::int64_t b = 0; b < in.shape[0]; ++b)
    for (std::int64_t s = 0; s < in.shape[1]; ++s)
      for (std::int64_t h = 0; h < in.shape[2]; ++h) {
        for (int i = 0; i < half; ++i) {
          const auto i0 = pair_index(pairing, i, half, 0), i1 = pair_index(pairing, i, half, 1);
          const double norm = std::hypot(load(in.data, in.dtype, element_offset(in, b, s, h, i0)),
                                         load(in.data, in.dtype, element_offset(in, b, s, h, i1)));
          const double e0 = std::fabs(load(out.data, out.dtype, element_offset(out, b, s, h, i0)) -
                                      expected[dense_index(in, b, s, h, i0)]);
          const double e1 = std::fabs(load(out.data, out.dtype, element_offset(out, b, s, h, i1)) -
                                      expected[dense_index(in, b, s, h, i1)]);
          if (std::isnan(e0) || std::isnan(e1)) return inf;  // std::max would drop a NaN e1
          const double e = std::max(e0, e1);
          if (e > 0) worst = std::max(worst, norm > 0 ? e / norm : inf);
        }
        for (std::int64_t d = rotary_dim; d < in.shape[3]; ++d) {
          const double y = load(out.data, out.dtype, element_offset(out, b, s, h, d));
          if (!(y == expected[dense_index(in, b, s, h, d)])) return inf;
        }
      }
  return worst;
}

// ---- check -------------------------------------------------------------------------------

namespace {

struct Buffer {
  std::vector<unsigned char> bytes;
  HeadTensor view;
};

// The view of memory layout `memory` over a fresh buffer with guard elements around it.
Buffer make_buffer(const std::string& memory, DType dtype, std::int64_t B, std::int64_t S,
                   std::int64_t H, std::int64_t D) {
  HeadTensor v{nullptr, dtype, {B, S, H, D}, {}};
  std::int64_t lead = 3;  // guard elements before the view
  if (memory == "bshd") {
    v.strides = {S * H * D, H * D, D, 1};
    lead = 0;
  } else if (memory == "bhsd") {
    v.strides = {H * S * D, D, S * D, 1};
    lead = 0;
  } else if (memory == "seq-major") {  // [S, B, H, D], as some engines keep the cache
    v.strides = {H * D, B * H * D, D, 1};
  } else {  // "strided": every other element of a padded row, padded heads and tokens
    const std::int64_t row = 2 * D + 3;
    v.strides = {S * (H + 1) * row + 5, (H + 1) * row, row, 2};
  }
  std::int64_t last = 0;
  for (int i = 0; i < 4; ++i) last += (v.shape[static_cast<std::size_t>(i)] - 1) * v.strides[static_cast<std::size_t>(i)];
  const std::int64_t elements = lead + last + 1 + 4;
  Buffer buf;
  buf.bytes.resize(static_cast<std::size_t>(elements) * dtype_size(dtype));
  v.data = buf.bytes.data() + static_cast<std::size_t>(lead) * dtype_size(dtype);
  buf.view = v;
  return buf;
}

void store(void* data, DType dtype, std::int64_t offset, double v) {
  const float f = static_cast<float>(v);
  if (dtype == DType::float32) {
    static_cast<float*>(data)[offset] = f;
    return;
  }
  // Inputs only: truncating to bf16/fp16 bits is fine, any bit pattern is a valid input.
  std::uint16_t h;
  if (dtype == DType::bfloat16) {
    h = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16);
  } else {
    int e;
    const double m = std::frexp(std::fabs(v), &e);  // |v| = m 2^e
    std::uint16_t bits = 0;
    if (v != 0 && e >= -13 && e <= 15)
      bits = static_cast<std::uint16_t>(((e + 14) << 10) | (static_cast<int>(m * 2048) & 1023));
    h = static_cast<std::uint16_t>((v < 0 ? 0x8000 : 0) | bits);
  }
  static_cast<std::uint16_t*>(data)[offset] = h;
}

void fill_random(Buffer& buf, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  const HeadTensor& v = buf.view;
  for_each_element(v, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    store(v.data, v.dtype, element_offset(v, b, s, h, d), normal(rng));
  });
}

std::vector<unsigned char> nan_pattern(std::size_t n, DType dtype) {
  std::vector<unsigned char> out(n);
  const std::uint32_t f = 0x7FC00000u;
  const std::uint16_t h = dtype == DType::bfloat16 ? 0x7FC0 : 0x7E00;
  for (std::size_t i = 0; i < n; i += dtype_size(dtype)) {
    if (dtype == DType::float32) std::memcpy(&out[i], &f, 4);
    else std::memcpy(&out[i], &h, 2);
  }
  return out;
}

// Whether every element outside the view still holds its bytes from `before`.
bool guard_intact(const Buffer& buf, const std::vector<unsigned char>& before) {
  std::vector<bool> in_view(buf.bytes.size(), false);
  const HeadTensor& v = buf.view;
  const std::size_t size = dtype_size(v.dtype);
  const auto base = static_cast<std::size_t>(static_cast<const unsigned char*>(v.data) - buf.bytes.data());
  for_each_element(v, [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    for (std::size_t k = 0; k < size; ++k)
      in_view[base + static_cast<std::size_t>(element_offset(v, b, s, h, d)) * size + k] = true;
  });
  for (std::size_t i = 0; i < before.size(); ++i)
    if (!in_view[i] && buf.bytes[i] != before[i]) return false;
  return true;
}

}  // namespace

std::string ComparisonResult::describe() const {
  std::ostringstream o;
  o << (c.backend ? std::string_view(c.backend) : to_string(c.isa)) << ' ' << to_string(c.dtype)
    << ' ' << to_string(c.pairing) << ' '
    << to_string(c.layout) << ' ' << c.memory << ' ' << to_string(c.direction) << ' '
    << (c.in_place ? "in-place" : "out-of-place") << " B=" << c.batch << " S=" << c.seq
    << " Hq=" << c.q_heads << " Hk=" << c.k_heads << " D=" << c.head_dim
    << " rot=" << c.rotary_dim << ": error " << error << (pass() ? " <= " : " > ")
    << "tolerance " << tolerance << (guard_intact ? "" : ", wrote outside the view");
  return o.str();
}

Rotator cpu_rotator() {
  return [](const RotaryConfig& config, const float* positions, std::int64_t batch,
            std::int64_t seq, std::span<const ComparisonTarget> targets, const RotaryParams& params) {
    const RotaryTable table = make_rotary_table(config, positions, batch, seq, 0, params.isa);
    std::vector<RotaryTarget> views;
    for (const ComparisonTarget& t : targets) views.push_back(t.view);
    rotate(table, views, params);
  };
}

ComparisonResult compare_case(const ComparisonCase& c, std::uint64_t seed) {
  return compare_case(c, seed, cpu_rotator());
}

ComparisonResult compare_case(const ComparisonCase& c, std::uint64_t seed, const Rotator& rotator) {
  std::mt19937_64 rng(seed);
  RotaryConfig config;
  config.theta = std::array<double, 3>{1e4, 1e6, 5e5}[rng() % 3];
  config.rotary_dim = c.rotary_dim;
  config.layout = c.layout;
  const int half = c.rotary_dim / 2;
  const int st = static_cast<int>(rng() % static_cast<std::uint64_t>(half + 1));
  const int sh = static_cast<int>(rng() % static_cast<std::uint64_t>(half - st + 1));
  config.sections = {st, sh, half - st - sh};

  const std::int64_t tokens = c.batch * c.seq;
  std::vector<float> positions(static_cast<std::size_t>(3 * tokens));
  std::uniform_real_distribution<float> pos(-64.0f, 4096.0f);
  for (float& p : positions) p = pos(rng);

  ComparisonResult result{c, 0, tolerance(c.dtype), true};
  std::vector<Buffer> inputs, outputs;
  std::vector<std::vector<unsigned char>> before;
  for (std::int64_t heads : {c.q_heads, c.k_heads}) {
    Buffer in = make_buffer(c.memory, c.dtype, c.batch, c.seq, heads, c.head_dim);
    for (auto& byte : in.bytes) byte = static_cast<unsigned char>(rng());
    fill_random(in, rng);
    Buffer out = in;  // in place: rotate a copy, keep `in` as the original
    out.view.data = out.bytes.data() + (static_cast<unsigned char*>(in.view.data) - in.bytes.data());
    if (!c.in_place) {  // copy into place: the view points into this storage
      const auto nan = nan_pattern(out.bytes.size(), c.dtype);
      std::copy(nan.begin(), nan.end(), out.bytes.begin());
    }
    before.push_back(out.bytes);
    inputs.push_back(std::move(in));
    outputs.push_back(std::move(out));
  }
  std::vector<ComparisonTarget> targets;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Buffer& in = c.in_place ? outputs[i] : inputs[i];
    targets.push_back({{in.view, outputs[i].view}, in.bytes, outputs[i].bytes});
  }
  RotaryParams params;
  params.pairing = c.pairing;
  params.direction = c.direction;
  params.isa = c.isa;
  rotator(config, positions.data(), c.batch, c.seq, targets, params);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto expected = reference::rotate(config, positions.data(), inputs[i].view, c.pairing,
                                            c.direction);
    result.error = std::max(result.error, max_error(expected, inputs[i].view, outputs[i].view,
                                                    c.rotary_dim, c.pairing));
    result.guard_intact = result.guard_intact && guard_intact(outputs[i], before[i]);
  }
  return result;
}

std::vector<ComparisonCase> comparison_cases(std::uint64_t seed, int rounds, std::span<const Isa> isas) {
  std::vector<ComparisonCase> cases;
  std::mt19937_64 rng(seed);
  for (Isa isa : isas)
    for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
      for (Pairing pairing : {Pairing::neox, Pairing::gptj})
        for (FrequencyLayout layout :
             {FrequencyLayout::chunked, FrequencyLayout::interleaved, FrequencyLayout::single})
          for (const char* memory : {"bshd", "bhsd", "strided", "seq-major"})
            for (Direction direction : {Direction::forward, Direction::backward})
              for (bool in_place : {false, true})
                for (int r = 0; r < rounds; ++r) {
                  ComparisonCase c{isa, dtype, pairing, layout, memory, direction, in_place};
                  c.head_dim = 2 + 2 * static_cast<std::int64_t>(rng() % 128);  // 2..256
                  c.rotary_dim = rng() % 2 ? static_cast<int>(c.head_dim)
                                           : 2 + 2 * static_cast<int>(rng() % static_cast<std::uint64_t>(c.head_dim / 2));
                  c.batch = 1 + static_cast<std::int64_t>(rng() % 2);
                  // Every fourth round is large enough to run on several threads.
                  c.seq = r % 4 == 3 ? 300 + static_cast<std::int64_t>(rng() % 200)
                                     : 1 + static_cast<std::int64_t>(rng() % 33);
                  c.q_heads = 1 + static_cast<std::int64_t>(rng() % 4);
                  c.k_heads = 1 + static_cast<std::int64_t>(rng() % 2);
                  cases.push_back(c);
                }
  return cases;
}

std::vector<ComparisonResult> compare_every_path(std::uint64_t seed, int rounds,
                                   const std::function<void(int, int)>& progress) {
  const std::vector<ComparisonCase> cases = comparison_cases(seed, rounds, available_isas());
  std::vector<ComparisonResult> results;
  results.reserve(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    results.push_back(compare_case(cases[i], seed + 0x9E3779B97F4A7C15ull * (i + 1)));
    if (progress) progress(static_cast<int>(i + 1), static_cast<int>(cases.size()));
  }
  return results;
}

long double exact_table_entry(const RotaryConfig& config, float p, int i) {
  const int half = config.rotary_dim / 2, f = i % half;
  const long double phi =
      static_cast<long double>(p) * powl(static_cast<long double>(config.theta), -2.0L * f / config.rotary_dim);
  return i < half ? cosl(phi) : sinl(phi);
}

double table_angle(const RotaryConfig& config, float p, int i) {
  const int half = config.rotary_dim / 2;
  return static_cast<double>(p) * std::pow(config.theta, -2.0 * (i % half) / config.rotary_dim);
}

double table_entry_bound(double phi) { return 0x1p-25 + 0x1p-47 * std::fabs(phi) + 0x1p-50; }

}  // namespace circlerope::reference
