// Internal: the rotation kernel, one template source over the vector backends of simd.h.
// Each kernel_<isa>.cpp includes it once, compiled with that ISA's flags (no -march=native
// anywhere) and instantiates it with its backend, so every path runs this one algorithm.
//
// Two ways through a row (one head of one token):
//  - the vector path (contiguous rows, any rotary dim): L-lane loads that widen to fp32,
//    the rotation, rounding stores (streaming for large out-of-place outputs); the last
//    partial vector of a row is read and written under a lane mask, never past the row;
//  - the staged path (a dim stride other than 1): load and widen into a stack buffer,
//    rotate in fp32, round and store, which keeps the arithmetic loop free of aliasing.
// Both round the same way: y0 = x0 c - (x1 s) and y1 = x1 c + (x0 s), the product in
// parentheses rounded once and the rest fused (on paths with FMA), so every layout, stride
// and FMA path gives the same bits (RotaryPaths tests hold them to that).
// The table row (cos then sin, D/2 each) is read from cache: a thread walks a tile of
// tokens and rotates every head of every target within it. The table itself is built by
// table_range below, compiled per ISA the same way.
// Software prefetch (KernelJob::prefetch, chosen by size in dispatch.cpp): before each row
// of contiguous elements, the lines kPrefetchAhead bytes past its input are requested, so
// that DRAM latency overlaps the arithmetic; a hint, so the bits are the same either way.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "convert.h"
#include "kernel.h"
#include "simd.h"

// Everything below has internal linkage: see convert.h.
namespace circlerope::cpu {
namespace {

// One rotation pair in scalar code, rounded as the vector backends round it.
template <bool kFma>
inline float rotate_first(float x0, float x1, float c, float s) {  // x0 c - x1 s
  const float p = x1 * s;
  if constexpr (kFma) return __builtin_fmaf(x0, c, -p);
  else return x0 * c - p;
}
template <bool kFma>
inline float rotate_second(float x0, float x1, float c, float s) {  // x1 c + x0 s
  const float p = x0 * s;
  if constexpr (kFma) return __builtin_fmaf(x1, c, p);
  else return x1 * c + p;
}

// ---- the staged path ----------------------------------------------------------------------
// A row of any dim stride through stack buffers; the contiguous side (if any) converts whole
// vectors with the backend, the rest one element at a time.
template <class V, class T>
inline void load_row(const typename T::Storage* x, std::int64_t stride, float* a, int n) {
  int i = 0;
  if (stride != 1) {
    for (; i < n; ++i) a[i] = widen<T>(x[i * stride]);
    return;
  }
  if constexpr (V::template kVectorPath<T> && !std::is_same_v<T, F32> && !V::template kSplitOrder<T>)
    for (; i + V::kLanes <= n; i += V::kLanes) V::template store<F32>(a + i, V::template load<T>(x + i));
  for (; i < n; ++i) a[i] = widen<T>(x[i]);
}

template <class V, class T>
inline void store_row(const float* r, typename T::Storage* y, std::int64_t stride, int n) {
  int i = 0;
  if (stride != 1) {
    for (; i < n; ++i) y[i * stride] = narrow<T>(r[i]);
    return;
  }
  if constexpr (V::template kVectorPath<T> && !std::is_same_v<T, F32> && !V::template kSplitOrder<T>)
    for (; i + V::kLanes <= n; i += V::kLanes) V::template store<T>(y + i, V::load(r + i));
  for (; i < n; ++i) y[i] = narrow<T>(r[i]);
}

// fp32 rotation of one staged row, rounded into storage T (T = F32 writes floats).
// neox pairs (i, i + half), gptj pairs (2i, 2i + 1).
template <class T, Pairing P, bool kBackward, bool kFma>
inline void rotate_into(const float* __restrict a, typename T::Storage* __restrict y,
                        const float* __restrict cosv, const float* __restrict sinv, int half) {
  for (int i = 0; i < half; ++i) {
    const float c = cosv[i];
    const float s = kBackward ? -sinv[i] : sinv[i];
    const int i0 = P == Pairing::neox ? i : 2 * i;
    const int i1 = P == Pairing::neox ? i + half : 2 * i + 1;
    const float x0 = a[i0];
    const float x1 = a[i1];
    y[i0] = narrow<T>(rotate_first<kFma>(x0, x1, c, s));
    y[i1] = narrow<T>(rotate_second<kFma>(x0, x1, c, s));
  }
}

// Out of line: it is the path of strided rows only, and inlined into rotate_range (which GCC
// does once the vector path below is forced inline) it costs the contiguous rows 7-13% more
// instructions per element (callgrind, AVX2 path).
template <class V, class T, Pairing P, bool kBackward>
[[gnu::noinline]] void rotate_row(const TargetJob& t, const float* table_row, int half,
                       const typename T::Storage* x, typename T::Storage* y) {
  // The second buffer starts 64 bytes past a 4 KiB multiple from the first: loads from one
  // and stores to the other would otherwise alias in the 4 KiB store-forwarding check.
  alignas(64) float a[kMaxRotaryDim + 16];
  alignas(64) float r[kMaxRotaryDim];
  const int rot = 2 * half;
  load_row<V, T>(x, t.in_stride[3], a, rot);
  if (!std::is_same_v<T, F16> && t.out_stride[3] == 1) {
    // fp32 and bf16, contiguous: rotate and round straight into the output (fp16 goes
    // through `r` so that the backend converts whole vectors).
    rotate_into<T, P, kBackward, V::kFma>(a, y, table_row, table_row + half, half);
  } else {
    rotate_into<F32, P, kBackward, V::kFma>(a, r, table_row, table_row + half, half);
    store_row<V, T>(r, y, t.out_stride[3], rot);
  }
  if (!t.in_place) {  // the rest of the head passes through
    for (std::int64_t d = rot; d < t.head_dim; ++d) y[d * t.out_stride[3]] = x[d * t.in_stride[3]];
  }
}

// ---- angle tables ------------------------------------------------------------------------
// cos and sin of phi in double, branch-free so that the loop vectorises: Cody-Waite reduction
// by pi/2 with fdlibm's three 33-bit pieces (exact products for |k| < 2^20), Taylor
// polynomials to r^13 / r^14 on |r| <= pi/4 (truncation below 1e-14), quadrant by bit
// tricks. Rounded to float it equals the correctly rounded value except when the exact value
// lies within ~1e-14 of a rounding boundary (measured: 1 entry in 8 million differs by one
// ulp from float(std::cos)). Angles beyond kFastAngleLimit go to libm.
inline constexpr double kFastAngleLimit = 1e6;

inline void sincos_block(const double* __restrict phi, float* __restrict cosv,
                         float* __restrict sinv, int n) {
  constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
  constexpr double kPio2_1 = 0x1.921fb544p+0, kPio2_2 = 0x1.0b4611a6p-34;
  constexpr double kPio2_3 = 0x1.3198a2ep-69, kPio2_3t = 8.47842766036889956997e-32;
  constexpr double kRound = 0x1.8p52;  // adding it rounds to an integer kept in the low bits
  for (int i = 0; i < n; ++i) {
    const double x = phi[i];
    const double shifted = x * kTwoOverPi + kRound;
    const double k = shifted - kRound;
    const std::int64_t quadrant = std::bit_cast<std::int64_t>(shifted);
    const double r = (((x - k * kPio2_1) - k * kPio2_2) - k * kPio2_3) - k * kPio2_3t;
    const double r2 = r * r;
    const double sp =
        r + r * r2 *
                (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880 +
                 r2 * (-1.0 / 39916800 + r2 * (1.0 / 6227020800.0))))));
    const double cp =
        1.0 + r2 * (-0.5 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 +
              r2 * (-1.0 / 3628800 + r2 * (1.0 / 479001600.0 + r2 * (-1.0 / 87178291200.0)))))));
    const bool swap = quadrant & 1;
    const auto sin_sign = static_cast<std::uint64_t>(quadrant & 2) << 62;
    const auto cos_sign = static_cast<std::uint64_t>((quadrant + 1) & 2) << 62;
    const double s_abs = swap ? cp : sp;  // plain selects: GCC if-converts these, not
    const double c_abs = swap ? sp : cp;  // a conditional inside a bit_cast argument
    sinv[i] = static_cast<float>(std::bit_cast<double>(std::bit_cast<std::uint64_t>(s_abs) ^ sin_sign));
    cosv[i] = static_cast<float>(std::bit_cast<double>(std::bit_cast<std::uint64_t>(c_abs) ^ cos_sign));
  }
}

inline void table_range(const TableJob& job, std::int64_t begin, std::int64_t end) {
  alignas(64) double phi[kMaxRotaryDim / 2];
  const int half = job.half;
  for (std::int64_t t = begin; t < end; ++t) {
    const double p0 = job.positions[t], p1 = job.positions[job.tokens + t],
                 p2 = job.positions[2 * job.tokens + t];
    int large = 0;  // an integer OR vectorises; a max over doubles does not (NaN rules)
    for (int i = 0; i < half; ++i) {  // selects, not an indexed load: this loop vectorises
      const int axis = job.axes[i];
      phi[i] = (axis == 0 ? p0 : axis == 1 ? p1 : p2) * job.inv_freq[i];
      large |= std::fabs(phi[i]) > kFastAngleLimit;
    }
    float* cosv = job.values + t * 2 * half;
    float* sinv = cosv + half;
    sincos_block(phi, cosv, sinv, half);
    if (large) {
      for (int i = 0; i < half; ++i)
        if (!(std::fabs(phi[i]) <= kFastAngleLimit)) {
          cosv[i] = static_cast<float>(std::cos(phi[i]));
          sinv[i] = static_cast<float>(std::sin(phi[i]));
        }
    }
  }
}

// ---- the vector path: rows of contiguous elements ---------------------------------------
// In place is safe without staging: each step loads both elements of its pairs before
// storing either, and steps touch disjoint elements.
// A backend that holds T in split order (V::kSplitOrder<T>, Avx2x16's bf16) reads the neox
// table re-laid to match: cos then sin, each padded with zeros to a multiple of L lanes and
// every L values in split order (relay_rows), so that its masked tail reads L whole lanes.
// Where V::kDupTable<T> (Avx2x16's fp16), gptj reads its table re-laid with every
// cos and sin repeated over its pair's two elements and the sin of each first element negated
// (relay_rows), so that a step loads what it would otherwise shuffle into place.
// kRelaidTable: whether (V, T, pairing) reads either re-laid table instead of the table as
// built; the tiling, the re-lay and the steps' table loads all go by it.
template <class V, class T, Pairing P>
inline constexpr bool kRelaidTable = P == Pairing::neox ? V::template kSplitOrder<T> : V::template kDupTable<T>;
// Always inlined into rotate_range's row step: a row is a few vector steps, and inlined, the
// constants and pointers a call would set up again are kept across rows.
template <class V, class T, Pairing P, bool kBackward, bool kStream>
[[gnu::always_inline]] inline void rotate_row_fast(const float* cosv, const float* sinv, int half,
                            const typename T::Storage* x, typename T::Storage* y) {
  using Vec = typename V::Vec;
  using S = typename T::Storage;
  constexpr int L = V::kLanes;
  auto sine = [](Vec s) {
    if constexpr (kBackward) return V::neg(s);
    else return s;
  };
  constexpr bool kRelaid = kRelaidTable<V, T, P>;
  constexpr bool kPairs = V::template kQuietPairs<T>;
  auto put = [](S* p, Vec v) {
    if constexpr (kStream) V::template stream1<T>(p, v);
    else V::template store<T>(p, v);
  };
  auto put2 = [](S* p, Vec a, Vec b) {
    if constexpr (kPairs) V::quiet2(a, b);
    if constexpr (kStream) V::template stream2<T>(p, a, b);
    else V::template store2<T>(p, a, b);
  };
  // y0 = x0 c - (x1 s), y1 = x1 c + (x0 s): see rotate_first / rotate_second.
  auto first = [](Vec x0, Vec x1, Vec c, Vec s) { return V::fmsub(x0, c, V::mul(x1, s)); };
  auto second = [](Vec x0, Vec x1, Vec c, Vec s) { return V::fmadd(x1, c, V::mul(x0, s)); };
  if constexpr (P == Pairing::neox) {
    int i = 0;
    if constexpr (V::kUnroll2) {
      for (; i + 2 * L <= half; i += 2 * L) {
        const Vec c0 = V::load(cosv + i), c1 = V::load(cosv + i + L);
        const Vec s0 = sine(V::load(sinv + i)), s1 = sine(V::load(sinv + i + L));
        const Vec a0 = V::template load<T>(x + i), a1 = V::template load<T>(x + i + L);
        const Vec b0 = V::template load<T>(x + half + i), b1 = V::template load<T>(x + half + i + L);
        put2(y + i, first(a0, b0, c0, s0), first(a1, b1, c1, s1));
        put2(y + half + i, second(a0, b0, c0, s0), second(a1, b1, c1, s1));
      }
    }
    for (; i + L <= half; i += L) {
      const Vec c = V::load(cosv + i), s = sine(V::load(sinv + i));
      const Vec a = V::template load<T>(x + i), b = V::template load<T>(x + half + i);
      if constexpr (kPairs) {  // both outputs, then one NaN test for the two
        Vec f = first(a, b, c, s), g = second(a, b, c, s);
        V::quiet2(f, g);
        put(y + i, f);
        put(y + half + i, g);
      } else {  // each output stored as soon as it is computed (faster for Avx2x16's fp32)
        put(y + i, first(a, b, c, s));
        put(y + half + i, second(a, b, c, s));
      }
    }
    if (i < half) {  // the last 1..L-1 pairs, under a mask
      const auto m = V::first(half - i);
      const Vec c = kRelaid ? V::load(cosv + i) : V::load(cosv + i, m);
      const Vec s = sine(kRelaid ? V::load(sinv + i) : V::load(sinv + i, m));
      const Vec a = V::template load<T>(x + i, m), b = V::template load<T>(x + half + i, m);
      V::template store<T>(y + i, first(a, b, c, s), m);
      V::template store<T>(y + half + i, second(a, b, c, s), m);
    }
  } else {
    // Pairs are adjacent: each cos/sin over its pair's two elements, the pair's elements
    // swapped, and the sign of sin flipped on the first element: y = x c + swap(x) (-s, s).
    auto rotate_pairs = [](Vec v, Vec c, Vec flipped_s) {
      return V::fmadd(v, c, V::mul(V::template swap_pairs<T>(v), flipped_s));
    };
    // The cos and sin of pairs i .. i + n - 1 (n <= L) over their 2n elements, as the two
    // vectors of those elements: read from the duplicated table (kRelaid), or duplicated here.
    struct Tables {
      Vec c0, s0, c1, s1;
    };
    auto tables = [&](int i, int n) {
      if constexpr (kRelaid) {  // padded with zeros to whole vectors: no mask needed
        return Tables{V::load(cosv + 2 * i), sine(V::load(sinv + 2 * i)), V::load(cosv + 2 * i + L),
                      sine(V::load(sinv + 2 * i + L))};
      } else {
        const Vec c = n == L ? V::load(cosv + i) : V::load(cosv + i, V::first(n));
        const Vec s = sine(n == L ? V::load(sinv + i) : V::load(sinv + i, V::first(n)));
        return Tables{V::template dup_lo<T>(c), V::template flip_even<T>(V::template dup_lo<T>(s)),
                      V::template dup_hi<T>(c), V::template flip_even<T>(V::template dup_hi<T>(s))};
      }
    };
    int i = 0;
    for (; i + L <= half; i += L) {  // L pairs: 2L elements
      const Tables t = tables(i, L);
      const Vec v0 = V::template load<T>(x + 2 * i), v1 = V::template load<T>(x + 2 * i + L);
      put2(y + 2 * i, rotate_pairs(v0, t.c0, t.s0), rotate_pairs(v1, t.c1, t.s1));
    }
    if (i < half) {  // the last 1..L-1 pairs: 2..2L-2 elements in one or two masked vectors
      const int n = half - i;
      const Tables t = tables(i, n);
      const int n0 = 2 * n < L ? 2 * n : L, n1 = 2 * n - n0;
      const Vec v0 = V::template load<T>(x + 2 * i, V::first(n0));
      V::template store<T>(y + 2 * i, rotate_pairs(v0, t.c0, t.s0), V::first(n0));
      if (n1 > 0) {
        const Vec v1 = V::template load<T>(x + 2 * i + L, V::first(n1));
        V::template store<T>(y + 2 * i + L, rotate_pairs(v1, t.c1, t.s1), V::first(n1));
      }
    }
  }
}

// Tokens are walked in tiles so that a tile's table rows stay in L1 while every head of every
// target is rotated; inside a tile the loop with the smaller stride is innermost.
inline constexpr std::int64_t kTileTokens = 16;

// How far ahead of a row's input its prefetch reaches: rows are visited in increasing
// address order within a target (bshd: the next token's row of the same head for a 4 KiB
// token; bhsd: the same head one tile later), and 4 KiB is more than DRAM latency times
// one core's share of bandwidth (~100 ns x 25 GB/s).
inline constexpr std::int64_t kPrefetchAhead = 4096;

// Requests the cache lines of [p, p + bytes), four per step: a span of 256 bytes or less
// (a bf16 row of 128) is one step without a loop-carried branch.
[[gnu::always_inline]] inline void prefetch_bytes(const void* p, std::int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (std::int64_t at = 0; at < bytes; at += 256) {
    prefetch_read(c + at);
    prefetch_read(c + at + 64);
    prefetch_read(c + at + 128);
    prefetch_read(c + at + 192);
  }
}

// The re-laid table of a tile (see rotate_row_fast): at most this many floats on the stack,
// so a rotary dim above 256 (neox) or 128 (gptj) takes tiles of fewer tokens.
inline constexpr int kRelayFloats = kTileTokens * 256;
static_assert(kRelayFloats >= 2 * kMaxRotaryDim + 4 * 16, "a tile must hold one re-laid row of the largest rotary dim");

// Floats of one part (cos or sin) of a re-laid table row: half rounded up to L, twice that
// where gptj's cos and sin are repeated over their pairs.
template <class V, Pairing P>
constexpr int relaid_part(int half) {
  const int padded = (half + V::kLanes - 1) / V::kLanes * V::kLanes;
  return P == Pairing::gptj ? 2 * padded : padded;
}

// Table rows of tokens (tile_b[k], tile_s[k]), k < count, re-laid for rotate_row_fast: row k
// at out + k * 2 * part, cos then sin, `part` (relaid_part) floats each; neox in V's split
// order, gptj with each value over its pair's two elements in T's lane order and the sin of
// each first element negated. The zero padding is what the masked tails read.
template <class V, class T, Pairing P>
void relay_rows(const float* table, std::int64_t seq, int half, const std::int64_t* tile_b,
                const std::int64_t* tile_s, int count, float* out) {
  constexpr int L = V::kLanes;
  const int part = relaid_part<V, P>(half);
  for (int k = 0; k < count; ++k) {
    const float* row = table + (tile_b[k] * seq + tile_s[k]) * 2 * half;
    for (int p = 0; p < 2; ++p) {
      const float* from = row + p * half;
      float* to = out + (2 * k + p) * part;
      for (int i = 0; i < half; i += L) {
        const auto v = i + L <= half ? V::load(from + i) : V::load(from + i, V::first(half - i));
        if constexpr (P == Pairing::neox) {
          V::template store<F32>(to + i, V::split_order(v));
        } else {
          auto lo = V::template dup_lo<T>(v), hi = V::template dup_hi<T>(v);
          if (p == 1) {
            lo = V::template flip_even<T>(lo);
            hi = V::template flip_even<T>(hi);
          }
          V::template store<F32>(to + 2 * i, lo);
          V::template store<F32>(to + 2 * i + L, hi);
        }
      }
    }
  }
}

template <class V, class T, Pairing P, bool kBackward>
void rotate_range(const KernelJob& job, std::int64_t begin, std::int64_t end) {
  using S = typename T::Storage;
  constexpr bool kRelay = kRelaidTable<V, T, P>;
  const int half = job.half;
  const std::int64_t seq = job.seq_len;
  const int part = relaid_part<V, P>(half);
  const std::int64_t tile_tokens =
      kRelay && 2 * part * kTileTokens > kRelayFloats ? kRelayFloats / (2 * part) : kTileTokens;
  alignas(64) float relaid[kRelay ? kRelayFloats : 1];
  std::int64_t tile_b[kTileTokens], tile_s[kTileTokens];
  bool streamed = false;
  for (std::int64_t tile = begin; tile < end; tile += tile_tokens) {
    const int count = static_cast<int>(end - tile < tile_tokens ? end - tile : tile_tokens);
    for (int k = 0; k < count; ++k) {  // one division per token, not per row
      tile_b[k] = (tile + k) / seq;
      tile_s[k] = (tile + k) % seq;
    }
    if constexpr (kRelay) relay_rows<V, T, P>(job.table, seq, half, tile_b, tile_s, count, relaid);
    for (int ti = 0; ti < job.target_count; ++ti) {
      const TargetJob& t = job.targets[ti];
      const S* in = static_cast<const S*>(t.in);
      S* out = static_cast<S*>(t.out);
      // The vector path needs contiguous rows; any rotary dim (the tail is masked).
      const bool fast = V::template kVectorPath<T> && t.in_stride[3] == 1 && t.out_stride[3] == 1;
      const bool stream = fast && t.stream;
      streamed = streamed || stream;
      const bool pass_through = !t.in_place && t.head_dim > 2 * half;
      // Row addresses from copies held in registers, not through the job on every row.
      const std::int64_t ib = t.in_stride[0], is = t.in_stride[1], ih = t.in_stride[2];
      const std::int64_t ob = t.out_stride[0], os = t.out_stride[1], oh = t.out_stride[2];
      const float* const table = job.table;
      // Bytes to prefetch per row: the ones it reads (in place, the rotary dims only), when
      // they are contiguous; 0 = no prefetch.
      const std::int64_t prefetch_span =
          job.prefetch && t.in_stride[3] == 1
              ? (t.in_place ? 2 * half : t.head_dim) * static_cast<std::int64_t>(sizeof(S))
              : 0;
      // Always inlined (with the prefetch in its body GCC would otherwise call it per row).
      auto row = [&, in, out, ib, is, ih, ob, os, oh, table](int k, std::int64_t h) __attribute__((always_inline)) {
        const std::int64_t b = tile_b[k], s = tile_s[k];
        const S* x = in + b * ib + s * is + h * ih;
        S* y = out + b * ob + s * os + h * oh;
        const float* cs = table + (b * seq + s) * 2 * half;
        if (prefetch_span) prefetch_bytes(reinterpret_cast<const char*>(x) + kPrefetchAhead, prefetch_span);
        if constexpr (V::template kVectorPath<T>) {
          if (fast) {
            const float* cosv = kRelay ? relaid + k * 2 * part : cs;
            const float* sinv = kRelay ? cosv + part : cs + half;
            if (stream) rotate_row_fast<V, T, P, kBackward, true>(cosv, sinv, half, x, y);
            else rotate_row_fast<V, T, P, kBackward, false>(cosv, sinv, half, x, y);
            if (pass_through)
              std::memcpy(y + 2 * half, x + 2 * half,
                          static_cast<std::size_t>(t.head_dim - 2 * half) * sizeof(S));
            return;
          }
        }
        rotate_row<V, T, P, kBackward>(t, cs, half, x, y);
      };
      if (t.in_stride[2] <= t.in_stride[1]) {
        for (int k = 0; k < count; ++k)
          for (std::int64_t h = 0; h < t.heads; ++h) row(k, h);
      } else {
        for (std::int64_t h = 0; h < t.heads; ++h)
          for (int k = 0; k < count; ++k) row(k, h);
      }
    }
  }
  if (streamed) V::fence();  // streaming stores are weakly ordered: publish them first
}

template <class V, class T>
void rotate_range_dtype(const KernelJob& job, std::int64_t begin, std::int64_t end) {
  if (job.pairing == Pairing::neox) {
    if (job.backward) rotate_range<V, T, Pairing::neox, true>(job, begin, end);
    else rotate_range<V, T, Pairing::neox, false>(job, begin, end);
  } else {
    if (job.backward) rotate_range<V, T, Pairing::gptj, true>(job, begin, end);
    else rotate_range<V, T, Pairing::gptj, false>(job, begin, end);
  }
}

// The one switch from run-time choices to template instances.
template <class V>
void rotate_range_any(const KernelJob& job, std::int64_t begin, std::int64_t end) {
  switch (job.dtype) {
    case DType::float32: rotate_range_dtype<V, F32>(job, begin, end); break;
    case DType::bfloat16: rotate_range_dtype<V, BF16>(job, begin, end); break;
    case DType::float16: rotate_range_dtype<V, F16>(job, begin, end); break;
  }
}

}  // namespace
}  // namespace circlerope::cpu
