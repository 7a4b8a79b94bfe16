// Internal: the rotation kernel, one template source. Each kernel_<isa>.cpp includes it once,
// compiled with that ISA's flags (no -march=native anywhere), so the vector code is the
// compiler's for that ISA and the scalar semantics are identical on every path.
//
// Two ways through a row (one head of one token):
//  - the vector path (contiguous rows, D/2 a multiple of 8): 8-lane loads that widen to
//    fp32, the rotation, rounding stores (streaming for large out-of-place outputs);
//  - the staged path (any dim stride or size): load and widen into a stack buffer, rotate
//    in fp32, round and store, which keeps the arithmetic loop free of aliasing.
// The table row (cos then sin, D/2 each) is read from cache: a thread walks a tile of
// tokens and rotates every head of every target within it. The table itself is built by
// table_range below, compiled per ISA the same way.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "convert.h"
#include "kernel.h"

// Everything below has internal linkage: see convert.h.
namespace circlerope::cpu {
namespace {

struct F32 { using Storage = float; };
struct BF16 { using Storage = std::uint16_t; };
struct F16 { using Storage = std::uint16_t; };

// ---- eight lanes at a time -----------------------------------------------------------------
// Eight lanes as GCC vector extensions: SSE pairs on the portable path, one ymm register on
// AVX2. No staging: each step loads both halves of its pairs before storing either, and
// steps touch disjoint elements, so in place is safe.
using V8F = float __attribute__((vector_size(32)));
using V8U = std::uint32_t __attribute__((vector_size(32)));
using V8I = std::int32_t __attribute__((vector_size(32)));
using V8H = std::uint16_t __attribute__((vector_size(16)));

inline V8F load8f(const float* p) {
  V8F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
inline V8F load8(const typename T::Storage* p) {
  if constexpr (std::is_same_v<T, F32>) {
    return load8f(p);
  } else if constexpr (std::is_same_v<T, BF16>) {
#if defined(__AVX2__)  // one widening load and a shift (GCC splits the generic form in two)
    return reinterpret_cast<V8F>(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#else
    V8H h;
    std::memcpy(&h, p, sizeof h);
    return reinterpret_cast<V8F>(__builtin_convertvector(h, V8U) << 16);
#endif
  } else {
#if defined(__F16C__)
    return reinterpret_cast<V8F>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
    V8F v;
    for (int i = 0; i < 8; ++i) v[i] = f16_to_float(p[i]);
    return v;
#endif
  }
}

template <class T, bool kStream = false>
inline void store8(typename T::Storage* p, V8F v) {
#if defined(__AVX2__)
  if constexpr (kStream) {
    if constexpr (std::is_same_v<T, F32>) {
      const __m256 m = reinterpret_cast<__m256>(v);
      _mm_stream_ps(p, _mm256_castps256_ps128(m));
      _mm_stream_ps(p + 4, _mm256_extractf128_ps(m, 1));
    } else if constexpr (std::is_same_v<T, BF16>) {
      const V8U u = reinterpret_cast<V8U>(v);
      const V8U out = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
      const __m256i packed = _mm256_packus_epi32(reinterpret_cast<__m256i>(out), reinterpret_cast<__m256i>(out));
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
    } else {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(reinterpret_cast<__m256>(v), _MM_FROUND_TO_NEAREST_INT));
    }
    return;
  }
#endif
  if constexpr (std::is_same_v<T, F32>) {
    std::memcpy(p, &v, sizeof v);
  } else if constexpr (std::is_same_v<T, BF16>) {
    // float_to_bf16 (convert.h), eight lanes at a time, without its NaN guard: here every
    // NaN comes from a bf16 input (low 16 bits zero; arithmetic keeps the payload) or is
    // the hardware's default NaN (low bits zero too), the table holds no NaN, so adding
    // the rounding bias can never carry out of a NaN's low half. Saves 4 of ~13 ops per
    // 8 lanes on the path where bf16 is compute-bound (RotaryNonFinite tests NaN inputs).
    const V8U u = reinterpret_cast<V8U>(v);
    const V8U out = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
#if defined(__AVX2__)  // every lane fits 16 bits: pack without masking, then join the halves
    const __m256i packed = _mm256_packus_epi32(reinterpret_cast<__m256i>(out), reinterpret_cast<__m256i>(out));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
#else
    const V8H h = __builtin_convertvector(out, V8H);
    std::memcpy(p, &h, sizeof h);
#endif
  } else {
#if defined(__F16C__)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(reinterpret_cast<__m256>(v), _MM_FROUND_TO_NEAREST_INT));
#else
    for (int i = 0; i < 8; ++i) p[i] = float_to_f16(v[i]);
#endif
  }
}

// Sixteen consecutive outputs. For bf16 on AVX2 one pack and one lane fix-up serve both
// halves (store8 needs one of each per eight lanes).
template <class T, bool kStream>
inline void store16(typename T::Storage* p, V8F a, V8F b) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, BF16>) {
    const V8U ua = reinterpret_cast<V8U>(a), ub = reinterpret_cast<V8U>(b);
    const V8U ra = (ua + 0x7FFFu + ((ua >> 16) & 1u)) >> 16;  // see store8
    const V8U rb = (ub + 0x7FFFu + ((ub >> 16) & 1u)) >> 16;
    const __m256i packed = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(reinterpret_cast<__m256i>(ra), reinterpret_cast<__m256i>(rb)), 0xD8);
    auto* q = reinterpret_cast<__m128i*>(p);
    if constexpr (kStream) {  // rows are 16-byte aligned, not necessarily 32
      _mm_stream_si128(q, _mm256_castsi256_si128(packed));
      _mm_stream_si128(q + 1, _mm256_extracti128_si256(packed, 1));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
    }
    return;
  }
#endif
  store8<T, kStream>(p, a);
  store8<T, kStream>(p + 8, b);
}


template <class T>
inline float widen(typename T::Storage v) {
  if constexpr (std::is_same_v<T, F32>) return v;
  else if constexpr (std::is_same_v<T, BF16>) return bf16_to_float(v);
  else return f16_to_float(v);
}

template <class T>
inline typename T::Storage narrow(float v) {
  if constexpr (std::is_same_v<T, F32>) return v;
  else if constexpr (std::is_same_v<T, BF16>) return float_to_bf16(v);
  else return float_to_f16(v);
}

// Staged rows: the contiguous case is its own loop so that it vectorises; fp16 with F16C
// converts eight at a time in hardware.
template <class T>
inline void load_row(const typename T::Storage* x, std::int64_t stride, float* a, int n) {
  int i = 0;
  if (stride != 1) {
    for (; i < n; ++i) a[i] = widen<T>(x[i * stride]);
    return;
  }
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, F16>)
    for (; i + 8 <= n; i += 8) {
      const V8F v = load8<T>(x + i);
      std::memcpy(a + i, &v, sizeof v);
    }
#endif
  for (; i < n; ++i) a[i] = widen<T>(x[i]);
}

template <class T>
inline void store_row(const float* r, typename T::Storage* y, std::int64_t stride, int n) {
  int i = 0;
  if (stride != 1) {
    for (; i < n; ++i) y[i * stride] = narrow<T>(r[i]);
    return;
  }
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, F16>)
    for (; i + 8 <= n; i += 8) store8<T>(y + i, load8f(r + i));
#endif
  for (; i < n; ++i) y[i] = narrow<T>(r[i]);
}

// fp32 rotation of one staged row, rounded into storage T (T = F32 writes floats).
// neox pairs (i, i + half), gptj pairs (2i, 2i + 1).
template <class T, Pairing P, bool kBackward>
inline void rotate_into(const float* __restrict a, typename T::Storage* __restrict y,
                        const float* __restrict cosv, const float* __restrict sinv, int half) {
  for (int i = 0; i < half; ++i) {
    const float c = cosv[i];
    const float s = kBackward ? -sinv[i] : sinv[i];
    const int i0 = P == Pairing::neox ? i : 2 * i;
    const int i1 = P == Pairing::neox ? i + half : 2 * i + 1;
    const float x0 = a[i0];
    const float x1 = a[i1];
    y[i0] = narrow<T>(x0 * c - x1 * s);
    y[i1] = narrow<T>(x1 * c + x0 * s);
  }
}

template <class T, Pairing P, bool kBackward>
inline void rotate_row(const TargetJob& t, const float* table_row, int half,
                       const typename T::Storage* x, typename T::Storage* y) {
  // The second buffer starts 64 bytes past a 4 KiB multiple from the first: loads from one
  // and stores to the other would otherwise alias in the 4 KiB store-forwarding check.
  alignas(64) float a[kMaxRotaryDim + 16];
  alignas(64) float r[kMaxRotaryDim];
  const int rot = 2 * half;
  load_row<T>(x, t.in_stride[3], a, rot);
  if (!std::is_same_v<T, F16> && t.out_stride[3] == 1) {
    // fp32 and bf16, contiguous: rotate and round straight into the output (fp16 goes
    // through `r` so that F16C converts eight at a time).
    rotate_into<T, P, kBackward>(a, y, table_row, table_row + half, half);
  } else {
    rotate_into<F32, P, kBackward>(a, r, table_row, table_row + half, half);
    store_row<T>(r, y, t.out_stride[3], rot);
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

// ---- the fast path: rows of whole vectors (helpers above) ------------------------------
template <class T, Pairing P, bool kBackward, bool kStream = false>
inline void rotate_row_fast(const float* cosv, const float* sinv, int half,
                            const typename T::Storage* x, typename T::Storage* y) {
  auto sine = [&](int i) { return kBackward ? -load8f(sinv + i) : load8f(sinv + i); };
  if constexpr (P == Pairing::neox) {
    int i = 0;
    for (; i + 16 <= half; i += 16) {
      const V8F c0 = load8f(cosv + i), c1 = load8f(cosv + i + 8);
      const V8F s0 = sine(i), s1 = sine(i + 8);
      const V8F a0 = load8<T>(x + i), a1 = load8<T>(x + i + 8);
      const V8F b0 = load8<T>(x + i + half), b1 = load8<T>(x + i + half + 8);
      store16<T, kStream>(y + i, a0 * c0 - b0 * s0, a1 * c1 - b1 * s1);
      store16<T, kStream>(y + i + half, b0 * c0 + a0 * s0, b1 * c1 + a1 * s1);
    }
    for (; i < half; i += 8) {
      const V8F c = load8f(cosv + i), s = sine(i);
      const V8F a = load8<T>(x + i), b = load8<T>(x + i + half);
      store8<T, kStream>(y + i, a * c - b * s);
      store8<T, kStream>(y + i + half, b * c + a * s);
    }
  } else {
    // Pairs are adjacent: duplicate each cos/sin over its pair, swap the pair's elements,
    // and give sin the sign pattern (-, +): y = x * c + swap(x) * (-s, s).
    // __builtin_shufflevector (constant lane indices): GCC >= 12 and clang both have it.
    const V8F sign = {-1, 1, -1, 1, -1, 1, -1, 1};
    for (int i = 0; i < half; i += 8) {
      const V8F c = load8f(cosv + i), s = sine(i);
      const V8F v0 = load8<T>(x + 2 * i);
      const V8F v1 = load8<T>(x + 2 * i + 8);
      const V8F c0 = __builtin_shufflevector(c, c, 0, 0, 1, 1, 2, 2, 3, 3);
      const V8F c1 = __builtin_shufflevector(c, c, 4, 4, 5, 5, 6, 6, 7, 7);
      const V8F s0 = __builtin_shufflevector(s, s, 0, 0, 1, 1, 2, 2, 3, 3) * sign;
      const V8F s1 = __builtin_shufflevector(s, s, 4, 4, 5, 5, 6, 6, 7, 7) * sign;
      store16<T, kStream>(y + 2 * i, v0 * c0 + __builtin_shufflevector(v0, v0, 1, 0, 3, 2, 5, 4, 7, 6) * s0,
                          v1 * c1 + __builtin_shufflevector(v1, v1, 1, 0, 3, 2, 5, 4, 7, 6) * s1);
    }
  }
}

// Tokens are walked in tiles so that a tile's table rows stay in L1 while every head of every
// target is rotated; inside a tile the loop with the smaller stride is innermost.
inline constexpr std::int64_t kTileTokens = 16;

// The vector path pays off where the vector unit converts 16-bit storage in a few
// instructions; with SSE2 alone the staged loop is faster for bf16 and fp16 (measured).
template <class T>
inline constexpr bool kVectorPath =
#if defined(__AVX2__)
    true;
#else
    std::is_same_v<T, F32>;
#endif

template <class T, Pairing P, bool kBackward>
void rotate_range(const KernelJob& job, std::int64_t begin, std::int64_t end) {
  using S = typename T::Storage;
  const int half = job.half;
  const std::int64_t seq = job.seq_len;
  std::int64_t tile_b[kTileTokens], tile_s[kTileTokens];
  for (std::int64_t tile = begin; tile < end; tile += kTileTokens) {
    const int count = static_cast<int>(end - tile < kTileTokens ? end - tile : kTileTokens);
    for (int k = 0; k < count; ++k) {  // one division per token, not per row
      tile_b[k] = (tile + k) / seq;
      tile_s[k] = (tile + k) % seq;
    }
    for (int ti = 0; ti < job.target_count; ++ti) {
      const TargetJob& t = job.targets[ti];
      const S* in = static_cast<const S*>(t.in);
      S* out = static_cast<S*>(t.out);
      // The vector path needs contiguous rows and whole vectors.
      const bool fast = kVectorPath<T> && t.in_stride[3] == 1 && t.out_stride[3] == 1 &&
                        half % 8 == 0;
      const bool pass_through = !t.in_place && t.head_dim > 2 * half;
      auto row = [&](int k, std::int64_t h) {
        const std::int64_t b = tile_b[k], s = tile_s[k];
        const S* x = in + b * t.in_stride[0] + s * t.in_stride[1] + h * t.in_stride[2];
        S* y = out + b * t.out_stride[0] + s * t.out_stride[1] + h * t.out_stride[2];
        const float* cs = job.table + (b * seq + s) * 2 * half;
        if (fast) {
          if (t.stream) rotate_row_fast<T, P, kBackward, true>(cs, cs + half, half, x, y);
          else rotate_row_fast<T, P, kBackward>(cs, cs + half, half, x, y);
          if (pass_through)
            std::memcpy(y + 2 * half, x + 2 * half,
                        static_cast<std::size_t>(t.head_dim - 2 * half) * sizeof(S));
        } else {
          rotate_row<T, P, kBackward>(t, cs, half, x, y);
        }
      };
      // Inside a tile the loop with the smaller stride is innermost.
      if (t.in_stride[2] <= t.in_stride[1]) {
        for (int k = 0; k < count; ++k)
          for (std::int64_t h = 0; h < t.heads; ++h) row(k, h);
      } else {
        for (std::int64_t h = 0; h < t.heads; ++h)
          for (int k = 0; k < count; ++k) row(k, h);
      }
    }
  }
#if defined(__AVX2__)
  _mm_sfence();  // streaming stores are weakly ordered: publish them before returning
#endif
}

template <class T>
void rotate_range_dtype(const KernelJob& job, std::int64_t begin, std::int64_t end) {
  if (job.pairing == Pairing::neox) {
    if (job.backward) rotate_range<T, Pairing::neox, true>(job, begin, end);
    else rotate_range<T, Pairing::neox, false>(job, begin, end);
  } else {
    if (job.backward) rotate_range<T, Pairing::gptj, true>(job, begin, end);
    else rotate_range<T, Pairing::gptj, false>(job, begin, end);
  }
}

// The one switch from run-time choices to template instances.
inline void rotate_range_any(const KernelJob& job, std::int64_t begin, std::int64_t end) {
  switch (job.dtype) {
    case DType::float32: rotate_range_dtype<F32>(job, begin, end); break;
    case DType::bfloat16: rotate_range_dtype<BF16>(job, begin, end); break;
    case DType::float16: rotate_range_dtype<F16>(job, begin, end); break;
  }
}

}  // namespace
}  // namespace circlerope::cpu
