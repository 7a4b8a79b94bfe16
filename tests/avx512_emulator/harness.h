// The comparison both sides of the AVX-512 emulator test run: guest_main.cpp inside Bochs
// (avx512 against avx2, both emulated) and host_main.cpp natively (avx2 alone), from one seed.
// Every case is a random rotate call on the kernels' internal interface (kernel.h): dtype,
// pairing, direction, in or out of place, streaming stores on or off, head dims 2..256 with
// any rotary dim (every tail length of both pairings), contiguous, padded, [B,H,S,D] and
// dim-stride-2 views at misaligned addresses, outputs pre-filled with NaN. Two kernels run on
// identical copies; their output buffers must match byte for byte, and no byte outside the
// output view may change. Digests of the outputs (per dtype) let the host check that Bochs
// computes the avx2 results a real CPU computes.
//
// Freestanding: <cstdint> and memcpy/memcmp/memset only (the guest has no C library).
#pragma once

#include <cstdint>
#include <cstring>

#include "../../src/core/positions_simd.h"
#include "../../src/cpu/kernel.h"

namespace harness {

using circlerope::DType;
using circlerope::Pairing;
namespace cpu = circlerope::cpu;

using Print = void (*)(const char*);

// The run both sides make (about 20 s of Bochs on a 2-core Zen 3).
inline constexpr std::uint64_t kSeed = 0x2505164160000012ull;
inline constexpr int kCases = 1500;

inline void print_u64(Print print, std::uint64_t v, int base = 10) {
  char text[24];
  int n = 0;
  do {
    text[n++] = "0123456789abcdef"[v % static_cast<std::uint64_t>(base)];
    v /= static_cast<std::uint64_t>(base);
  } while (v);
  char out[24];
  for (int i = 0; i < n; ++i) out[i] = text[n - 1 - i];
  out[n] = 0;
  print(out);
}

struct Rng {
  std::uint64_t state;
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
};

// Memory the caller owns: four buffers of `bytes` each, plus one byte of marks per byte.
// `in_end` / `out_end`, when set, are the ends of regions followed by unmapped memory: some
// cases place their views so that the last row ends exactly there.
struct Arena {
  unsigned char* in = nullptr;
  unsigned char* out_a = nullptr;
  unsigned char* out_b = nullptr;
  unsigned char* before = nullptr;
  unsigned char* marks = nullptr;
  std::size_t bytes = 0;
  unsigned char* in_end = nullptr;
  unsigned char* out_end = nullptr;
};

struct Stats {
  std::uint64_t cases = 0, mismatches = 0, outside_writes = 0, elements = 0;
  // FNV-1a of the outputs of b (a if no b), per dtype: float32, bfloat16, float16.
  std::uint64_t digest[3] = {0xCBF29CE484222325ull, 0xCBF29CE484222325ull, 0xCBF29CE484222325ull};
};

inline void fnv(std::uint64_t& h, const unsigned char* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
}

inline std::uint32_t value_bits(DType dtype, Rng& rng) {
  const std::uint64_t r = rng.next();
  const std::uint32_t sign = (r & 1) ? 0x80000000u : 0;
  const int kind = static_cast<int>((r >> 1) % 32);
  switch (dtype) {
    case DType::float32: {
      if (kind == 0) return sign;
      const std::uint32_t e = 127 - 30 + static_cast<std::uint32_t>((r >> 8) % 61);
      return sign | (e << 23) | static_cast<std::uint32_t>((r >> 20) & 0x7FFFFF);
    }
    case DType::bfloat16: {
      if (kind == 0) return sign >> 16;
      if (kind == 1) return (sign >> 16) | static_cast<std::uint32_t>(1 + (r >> 8) % 0x7F);  // subnormal
      if (kind == 2) return (sign >> 16) | 0x7F70u | static_cast<std::uint32_t>((r >> 8) & 15);
      const std::uint32_t e = 127 - 30 + static_cast<std::uint32_t>((r >> 8) % 61);
      return (sign >> 16) | (e << 7) | static_cast<std::uint32_t>((r >> 20) & 0x7F);
    }
    case DType::float16: {
      if (kind == 0) return sign >> 16;
      if (kind == 1) return (sign >> 16) | static_cast<std::uint32_t>(1 + (r >> 8) % 0x3FF);  // subnormal
      const std::uint32_t e = 15 - 12 + static_cast<std::uint32_t>((r >> 8) % 16);
      return (sign >> 16) | (e << 10) | static_cast<std::uint32_t>((r >> 20) & 0x3FF);
    }
  }
  return 0;
}

inline void put(unsigned char* base, std::int64_t element, std::size_t size, std::uint32_t bits) {
  if (size == 4) {
    std::memcpy(base + element * 4, &bits, 4);
  } else {
    const auto h = static_cast<std::uint16_t>(bits);
    std::memcpy(base + element * 2, &h, 2);
  }
}

struct View {
  std::int64_t offset = 0;  // elements from the buffer start
  std::int64_t stride[4] = {};
  std::int64_t span = 0;    // elements from offset to one past the last element
};

// A random layout for [B, S, H, D]; kind 0 contiguous, 1 padded, 2 [B,H,S,D], 3 dim stride 2.
inline View make_view(int kind, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D, Rng& rng) {
  View v;
  std::int64_t row = D;
  if (kind == 1) row = D + 1 + rng.below(5);
  if (kind == 3) row = 2 * D + 1;
  const std::int64_t dim = kind == 3 ? 2 : 1;
  if (kind == 2) {
    v.stride[0] = H * S * row;
    v.stride[1] = row;
    v.stride[2] = S * row;
  } else {
    v.stride[0] = S * H * row + (kind == 1 ? rng.below(3) : 0);
    v.stride[1] = H * row;
    v.stride[2] = row;
  }
  v.stride[3] = dim;
  v.offset = kind == 0 ? 0 : rng.below(4);
  v.span = (B - 1) * v.stride[0] + (S - 1) * v.stride[1] + (H - 1) * v.stride[2] + (D - 1) * dim + 1;
  return v;
}

template <class F>
inline void for_each(const View& v, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D, const F& f) {
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t d = 0; d < D; ++d)
          f(v.offset + b * v.stride[0] + s * v.stride[1] + h * v.stride[2] + d * v.stride[3]);
}

// Runs `cases` random rotate calls through kernels a and b. `b` may be null: a alone (the
// host side, for the digest).
inline Stats compare_kernels(cpu::RangeKernel a, cpu::RangeKernel b, std::uint64_t seed, int cases,
                             const Arena& arena, Print print) {
  Stats st;
  Rng rng{seed};
  static float table[2 * 9 * 256];
  for (int c = 0; c < cases; ++c) {
    const DType dtype = static_cast<DType>(rng.below(3));
    const std::size_t size = dtype == DType::float32 ? 4 : 2;
    const Pairing pairing = rng.below(2) ? Pairing::gptj : Pairing::neox;
    const bool backward = rng.below(2);
    const bool in_place = rng.below(3) == 0;
    const bool stream = !in_place && rng.below(2);
    const std::int64_t D = 2 + 2 * rng.below(128);
    const int rot = rng.below(2) ? static_cast<int>(D) : 2 + 2 * rng.below(static_cast<int>(D / 2));
    const std::int64_t B = 1 + rng.below(2), S = 1 + rng.below(9), H = 1 + rng.below(4);
    const int in_kind = rng.below(4), out_kind = in_place ? in_kind : rng.below(4);
    View vin = make_view(in_kind, B, S, H, D, rng);
    View vout = in_place ? vin : make_view(out_kind, B, S, H, D, rng);
    // Views that end where unmapped memory begins: masked tails must not read or write past
    // the last row (contiguous views only, whose last element ends the span).
    const bool end_draw = rng.below(3) == 0;  // drawn always: host and guest stay in step
    const bool at_end = arena.in_end && arena.out_end && in_kind == 0 && out_kind == 0 && end_draw;
    const std::int64_t sz = static_cast<std::int64_t>(size);
    const std::size_t in_bytes = static_cast<std::size_t>((vin.offset + vin.span) * sz + (at_end ? 0 : 64));
    const std::size_t out_bytes = static_cast<std::size_t>((vout.offset + vout.span) * sz + (at_end ? 0 : 64));
    if (in_bytes > arena.bytes || out_bytes > arena.bytes) {  // too large for the arena: draw again
      --c;
      continue;
    }
    unsigned char* in_base = at_end ? arena.in_end - in_bytes : arena.in;
    unsigned char* out_a_base = at_end ? arena.out_end - out_bytes : arena.out_a;
    unsigned char* out_b_base = arena.out_b;
    for (int i = 0; i < static_cast<int>(B * S) * rot; ++i) {
      const std::uint64_t r = rng.next();
      table[i] = static_cast<float>(static_cast<std::int64_t>(r >> 40) - (1ll << 23)) * 0x1p-23f;
    }
    // Input: values everywhere (pass-through elements are view elements too: they must be
    // copied exactly); no NaN, whose payloads the bit comparison would have to excuse.
    for (std::size_t i = 0; i < in_bytes / size; ++i) put(in_base, static_cast<std::int64_t>(i), size, value_bits(dtype, rng));
    unsigned char* outs[2] = {out_a_base, out_b_base};
    const std::size_t bytes = out_bytes;
    for (unsigned char* o : outs) {
      if (in_place) {
        std::memcpy(o, in_base, bytes);
      } else {
        for (std::size_t i = 0; i < bytes / size; ++i)
          put(o, static_cast<std::int64_t>(i), size, size == 4 ? 0x7FC00000u : dtype == DType::bfloat16 ? 0x7FC0u : 0x7E00u);
      }
    }
    std::memcpy(arena.before, out_a_base, bytes);
    // Two ranges per call, so that a range starting mid-batch is exercised too.
    const std::int64_t split = rng.below(static_cast<int>(B * S) + 1);
    cpu::RangeKernel kernels[2] = {a, b};
    for (int k = 0; k < (b ? 2 : 1); ++k) {
      cpu::TargetJob t;
      t.in = in_place ? outs[k] + vin.offset * sz : in_base + vin.offset * sz;
      t.out = outs[k] + vout.offset * sz;
      t.heads = H;
      t.head_dim = D;
      for (int d = 0; d < 4; ++d) {
        t.in_stride[d] = vin.stride[d];
        t.out_stride[d] = vout.stride[d];
      }
      t.in_place = in_place;
      t.stream = stream;
      cpu::KernelJob job;
      job.table = table;
      job.seq_len = S;
      job.half = rot / 2;
      job.dtype = dtype;
      job.pairing = pairing;
      job.backward = backward;
      job.targets = &t;
      job.target_count = 1;
      kernels[k](job, 0, split);
      kernels[k](job, split, B * S);
    }
    // Marks: 1 on every byte of the output view.
    std::memset(arena.marks, 0, bytes);
    for_each(vout, B, S, H, D, [&](std::int64_t e) { std::memset(arena.marks + e * static_cast<std::int64_t>(size), 1, size); });
    std::uint64_t outside = 0;
    for (std::size_t i = 0; i < bytes; ++i)
      if (!arena.marks[i] && out_a_base[i] != arena.before[i]) ++outside;
    const bool differ = b && std::memcmp(out_a_base, out_b_base, bytes) != 0;
    fnv(st.digest[static_cast<int>(dtype)], b ? out_b_base : out_a_base, bytes);
    ++st.cases;
    st.elements += static_cast<std::uint64_t>(B * S * H * D);
    if (outside) ++st.outside_writes;
    if (differ) ++st.mismatches;
    if ((differ || outside) && st.mismatches + st.outside_writes <= 10) {
      print("  MISMATCH case ");
      print_u64(print, static_cast<std::uint64_t>(c));
      print(differ ? ": outputs differ" : ": wrote outside the view");
      print(" (dtype ");
      print_u64(print, static_cast<std::uint64_t>(dtype));
      print(pairing == Pairing::neox ? ", neox" : ", gptj");
      print(backward ? ", backward" : ", forward");
      print(in_place ? ", in place" : stream ? ", streamed" : ", out of place");
      print(", D ");
      print_u64(print, static_cast<std::uint64_t>(D));
      print(", rot ");
      print_u64(print, static_cast<std::uint64_t>(rot));
      print(", layouts ");
      print_u64(print, static_cast<std::uint64_t>(in_kind));
      print("/");
      print_u64(print, static_cast<std::uint64_t>(out_kind));
      print(at_end ? ", at an unmapped page)\n" : ")\n");
    }
  }
  return st;
}

// Tables of random positions: kernels a and b must write the same floats.
inline bool compare_tables(cpu::TableKernel a, cpu::TableKernel b, std::uint64_t seed, int rounds) {
  Rng rng{seed};
  static float positions[3 * 64];
  static int axes[512];
  static double inv_freq[512];
  static float va[64 * 1024], vb[64 * 1024];
  for (int round = 0; round < rounds; ++round) {
    const int tokens = 1 + rng.below(64), half = 1 + rng.below(512);
    for (int i = 0; i < 3 * tokens; ++i)
      positions[i] = static_cast<float>(static_cast<std::int64_t>(rng.next() >> 44) - 4096) * 0.37f;
    for (int i = 0; i < half; ++i) {
      axes[i] = rng.below(3);
      inv_freq[i] = 1.0 / static_cast<double>(1 + rng.below(100000));
    }
    cpu::TableJob job;
    job.positions = positions;
    job.tokens = tokens;
    job.axes = axes;
    job.inv_freq = inv_freq;
    job.half = half;
    job.values = va;
    a(job, 0, tokens);
    job.values = vb;
    b(job, 0, tokens);
    if (std::memcmp(va, vb, static_cast<std::size_t>(tokens) * 2 * static_cast<std::size_t>(half) * sizeof(float)) != 0)
      return false;
  }
  return true;
}

}  // namespace harness

namespace harness {

// Random rings (positions_simd.h): kernels a and b (b may be null) must write the same doubles
// and extremes; returns false on the first difference. `digest` gets b's (else a's) outputs.
inline bool compare_rings(void (*a)(circlerope::detail::RingJob&), void (*b)(circlerope::detail::RingJob&),
                          std::uint64_t seed, int rounds, std::uint64_t& digest) {
  using circlerope::detail::RingJob;
  Rng rng{seed};
  static double out[2][3][128 * 128];
  for (int round = 0; round < rounds; ++round) {
    RingJob job[2];
    const std::int64_t hm = 1 + rng.below(rng.below(4) ? 40 : 128), wm = 1 + rng.below(rng.below(4) ? 40 : 128);
    const bool centred = rng.below(4) != 0;
    const double unit = static_cast<double>(rng.next() >> 11) * 0x1p-53;  // [0, 1)
    for (int k = 0; k < 2; ++k) {
      job[k].hm = hm;
      job[k].wm = wm;
      job[k].cx = centred ? static_cast<double>(wm - 1) / 2.0 : 0.0;
      job[k].cy = centred ? static_cast<double>(hm - 1) / 2.0 : 0.0;
      job[k].centred = centred;
      job[k].radius = 0.5 + 100 * unit;
      job[k].alpha = round % 3 == 0 ? 1.0 : round % 3 == 1 ? 0.5 : unit;
      job[k].beta = round % 2 ? unit : 0.0;
      job[k].t = out[k][0];
      job[k].h = out[k][1];
      job[k].w = out[k][2];
    }
    a(job[0]);
    if (b) b(job[1]);
    const int last = b ? 1 : 0;
    for (int axis = 0; axis < 3; ++axis)
      fnv(digest, reinterpret_cast<const unsigned char*>(out[last][axis]), static_cast<std::size_t>(hm * wm) * sizeof(double));
    fnv(digest, reinterpret_cast<const unsigned char*>(job[last].min), sizeof job[last].min);
    fnv(digest, reinterpret_cast<const unsigned char*>(job[last].max), sizeof job[last].max);
    if (!b) continue;
    if (std::memcmp(out[0], out[1], sizeof out[0]) != 0 || std::memcmp(job[0].min, job[1].min, sizeof job[0].min) != 0 ||
        std::memcmp(job[0].max, job[1].max, sizeof job[0].max) != 0 || job[0].lowest != job[1].lowest)
      return false;
  }
  return true;
}

inline constexpr int kRingRounds = 300;

// "  avx2 digests: float32 0x... bfloat16 0x... float16 0x..." (run.sh reads this line).
inline void print_digests(Print print, const Stats& st) {
  print("  avx2 digests:");
  const char* names[3] = {" float32 0x", " bfloat16 0x", " float16 0x"};
  for (int d = 0; d < 3; ++d) {
    print(names[d]);
    print_u64(print, st.digest[d], 16);
  }
  print("\n");
}

// "  avx2 ring digest: 0x..." (run.sh reads this line).
inline void print_ring_digest(Print print, std::uint64_t digest) {
  print("  avx2 ring digest: 0x");
  print_u64(print, digest, 16);
  print("\n");
}

}  // namespace harness
