// Internal: the vector backends of the rotation kernel (kernel_impl.h). One backend per code
// path, each a struct of static functions over its own vector and mask types; the kernel is
// one template over them, so every path runs the same algorithm (lane layout, loop order,
// masked tails, the order of every rounding) and only these primitives differ:
//
//   backend    lanes  vector                 tails (mask)            path
//   Generic      8    GCC/clang vector ext.  staged scalar loop      portable (fp32 only)
//   Avx2x16     16    two __m256 halves      leading-lane count      avx2
//   Avx512      16    __m512                 __mmask16               avx512
//   Avx512Bf16  16    __m512                 __mmask16               avx512bf16 (bf16 stores by
//                                                                    VCVTNE(2)PS2BF16)
//
// Avx2x16 is the 16-lane AVX-512 algorithm built from two AVX2 halves: the machine this was
// written on has no AVX-512, so the production AVX2 path *is* the 16-lane algorithm, tested
// here against the float64 reference, and the AVX-512 backends differ from it only in the
// primitives below (tests/avx512_emulator runs them under Bochs, bit for bit against Avx2x16).
//
// Semantics every backend implements identically (the tests hold them to bit identity):
//  - load<T>(p) widens L elements of storage T to fp32 exactly, in T's lane order (element
//    order, except kSplitOrder<T>: see Avx2x16); load<T>(p, m) reads only the first m
//    elements and sets the other lanes to +0.
//  - store<T>(p, v) rounds to T to nearest even (bf16: the integer rounding of convert.h;
//    fp16: F16C's), taking v in T's lane order, after every NaN lane has been made the
//    canonical NaN, so that every store writes convert.h's NaN rule; store<T>(p, v, m)
//    writes only the first m elements. stream2 is store2 with non-temporal stores where the
//    address allows. Where kQuietPairs<T>, the unmasked stores (store, store2, stream1,
//    stream2) leave the NaN rule to quiet2(a, b), which the kernel runs on every step's two
//    output vectors before storing them; masked stores always see to it themselves.
//  - fmadd(a, b, c) = a*b + c and fmsub(a, b, c) = a*b - c with one rounding (FMA), mul one.
//  - dup_lo<T> / dup_hi<T> / swap_pairs<T> / flip_even<T>: the lane shuffles of the gptj
//    pairing, in T's lane order.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "convert.h"

// Internal linkage on purpose: see convert.h.
namespace circlerope::cpu {
namespace {

struct F32 { using Storage = float; };
struct BF16 { using Storage = std::uint16_t; };
struct F16 { using Storage = std::uint16_t; };

template <class T>
inline float widen(typename T::Storage v) {
  if constexpr (std::is_same_v<T, F32>) return v;
  else if constexpr (std::is_same_v<T, BF16>) return bf16_to_float(v);
  else return f16_to_float(v);
}

template <class T>
inline typename T::Storage narrow(float v) {
  if constexpr (std::is_same_v<T, F32>) return quiet_nan(v);
  else if constexpr (std::is_same_v<T, BF16>) return float_to_bf16(v);
  else return float_to_f16(v);
}

// ---- portable: eight lanes of GCC/clang vector extensions ----------------------------------
// SSE pairs on baseline x86-64 (or NEON elsewhere). Only fp32 takes the vector path: with SSE2
// alone the staged loop converts bf16/fp16 faster (measured), so those primitives are absent.
struct Generic {
  static constexpr int kLanes = 8;
  static constexpr bool kFma = false;
  static constexpr bool kUnroll2 = false;
  template <class T>
  static constexpr bool kVectorPath = std::is_same_v<T, F32>;
  template <class T>
  static constexpr bool kSplitOrder = false;  // lanes in element order (see Avx2x16)
  template <class T>
  static constexpr bool kDupTable = false;  // gptj duplicates its table in registers
  template <class T>
  static constexpr bool kQuietPairs = false;  // every store quiets its own vector
  using Vec = float __attribute__((vector_size(32)));
  using Mask = int;  // the number of leading lanes, 1..kLanes

  static Mask first(int n) { return n; }
  static Vec load(const float* p) {
    Vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static Vec load(const float* p, Mask n) {
    Vec v = {};
    std::memcpy(&v, p, static_cast<std::size_t>(n) * sizeof(float));
    return v;
  }
  template <class T> static Vec load(const float* p) { return load(p); }
  template <class T> static Vec load(const float* p, Mask n) { return load(p, n); }
  // Every NaN lane becomes convert.h's canonical NaN, decided on the bits (|bits| above
  // infinity's) in 16-byte integer halves: a compare on the whole 32-byte vector, wider than
  // SSE2's registers, is scalarised by GCC (a cmp and a cmov per lane, 3.7x the instructions
  // of the whole fp32 rotation).
  using Half = std::int32_t __attribute__((vector_size(16)));
  struct Halves {
    Half lo, hi;
  };
  static Half quiet(Half u) {
    const Half nan = (u & 0x7FFFFFFF) > 0x7F800000;
    return (u & ~nan) | (nan & static_cast<std::int32_t>(kQuietNanF32));
  }
  static Vec quiet(Vec v) {
    const Halves h = __builtin_bit_cast(Halves, v);
    return __builtin_bit_cast(Vec, Halves{quiet(h.lo), quiet(h.hi)});
  }
  template <class T> static void store(float* p, Vec v) {
    const Vec q = quiet(v);
    std::memcpy(p, &q, sizeof q);
  }
  template <class T> static void store(float* p, Vec v, Mask n) {
    const Vec q = quiet(v);
    std::memcpy(p, &q, static_cast<std::size_t>(n) * sizeof(float));
  }
  template <class T> static void store2(float* p, Vec a, Vec b) {
    store<T>(p, a);
    store<T>(p + kLanes, b);
  }
  template <class T> static void stream1(float* p, Vec v) { store<T>(p, v); }
  template <class T> static void stream2(float* p, Vec a, Vec b) { store2<T>(p, a, b); }
  static void fence() {}

  static Vec mul(Vec a, Vec b) { return a * b; }
  static Vec fmadd(Vec a, Vec b, Vec c) { return a * b + c; }
  static Vec fmsub(Vec a, Vec b, Vec c) { return a * b - c; }
  static Vec neg(Vec a) { return -a; }
  template <class T> static Vec dup_lo(Vec c) { return __builtin_shufflevector(c, c, 0, 0, 1, 1, 2, 2, 3, 3); }
  template <class T> static Vec dup_hi(Vec c) { return __builtin_shufflevector(c, c, 4, 4, 5, 5, 6, 6, 7, 7); }
  template <class T> static Vec swap_pairs(Vec v) { return __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6); }
  template <class T> static Vec flip_even(Vec v) {
    const Vec sign = {-1, 1, -1, 1, -1, 1, -1, 1};
    return v * sign;
  }
};

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// ---- avx2: sixteen lanes as two __m256 halves ------------------------------------------------
struct Avx2x16 {
  static constexpr int kLanes = 16;
  static constexpr bool kFma = true;
  // One 16-lane step already keeps 8 of the 16 ymm registers busy; two would spill.
  static constexpr bool kUnroll2 = false;
  template <class T>
  static constexpr bool kVectorPath = true;
  struct Vec {
    __m256 lo, hi;
  };
  using Mask = int;  // the number of leading lanes, 1..16

  static Mask first(int n) { return n; }
  // All-ones in lanes [0, n) of eight, n clamped to 0..8 by the comparison.
  static __m256i lanes8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  static Vec load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Vec load(const float* p, Mask n) {
    // The upper half is not touched at all when no lane of it is active.
    return {_mm256_maskload_ps(p, lanes8(n)),
            n > 8 ? _mm256_maskload_ps(p + 8, lanes8(n - 8)) : _mm256_setzero_ps()};
  }

  // bf16 vectors are held in split order: `lo` has the even elements 0, 2, .., 14 and `hi`
  // the odd ones, which is where sixteen loaded bf16 already sit in the 32-bit lanes: a shift
  // widens the even ones and a mask the odd ones, and narrow16_bf16 rounds and interleaves
  // them back with 16-bit operations. Nothing crosses a 128-bit lane (VPMOVZXWD and VPERMQ
  // did; see kQuietPairs and narrow16_bf16 for the measured effects). The kernel reads its
  // neox table re-laid to match (relay_rows in kernel_impl.h); for gptj the even elements are
  // the pairs' first elements and the odd ones their second, so its shuffles only pick halves.
  template <class T>
  static constexpr bool kSplitOrder = std::is_same_v<T, BF16>;
  // fp16's gptj reads its table duplicated over pairs and with the first elements' sin
  // negated (relay_rows in kernel_impl.h) instead of duplicating it in registers (dup8).
  // Measured on a Zen 3 (bench/step_cycles.cpp, gptj cycles per 32 elements): fp16 9.8-9.9
  // with it, 18.2 with dup8's in-register shuffles. fp32 steps faster with it too (10.4
  // against 15.4) but its memory-bound rows (S = 4096 in place, prefetch on) ran 0.80-0.85x
  // as fast as with dup8 (bench/compare_builds.sh, --pairing gptj, one thread), for a reason
  // not found, so fp32 keeps dup8. In split order (bf16) dup8 costs nothing.
  template <class T>
  static constexpr bool kDupTable = std::is_same_v<T, F16>;
  template <class T>
  static Vec load(const typename T::Storage* p) {
    if constexpr (std::is_same_v<T, F32>) {
      return load(p);
    } else if constexpr (std::is_same_v<T, BF16>) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return {_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)),
              _mm256_castsi256_ps(_mm256_and_si256(h, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))))};
    } else {
      return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
    }
  }
  // Sixteen table values (natural order) in split order.
  static Vec split_order(Vec v) {
    const __m256 even = _mm256_shuffle_ps(v.lo, v.hi, 0x88), odd = _mm256_shuffle_ps(v.lo, v.hi, 0xDD);
    return {_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)),
            _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xD8))};
  }
  template <class T>
  static Vec load(const typename T::Storage* p, Mask n) {
    if constexpr (std::is_same_v<T, F32>) {
      return load(p, n);
    } else {  // no 16-bit masked load in AVX2: through a zeroed buffer
      alignas(32) std::uint16_t buf[16] = {};
      std::memcpy(buf, p, static_cast<std::size_t>(n) * sizeof(std::uint16_t));
      return load<T>(buf);
    }
  }

  // Every NaN lane becomes convert.h's canonical NaN. The fp32 stores and the masked stores
  // start with it. The 16-bit types quiet in pairs (kQuietPairs): two unordered compares of
  // halves tell whether any of a step's 32 output lanes is NaN, and the blends run only then.
  // Measured on a Zen 3 by bench/step_cycles.cpp (the step alone, cycles per 32 elements):
  // bf16 17.8-20.5 -> 12.5-13.6 together with an in-lane layout, fp16 9.3-11.7 ->
  // 8.9-10.7. fp32 is kept as it was, blending every vector and storing each as soon as it
  // is computed: paired, it took 11.5-13.8 against 8.5-12.0.
  template <class T>
  static constexpr bool kQuietPairs = !std::is_same_v<T, F32>;
  static __m256 quiet8(__m256 v) {
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kQuietNanF32))),
                            _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  static Vec quiet(Vec v) { return {quiet8(v.lo), quiet8(v.hi)}; }
  static void quiet2(Vec& a, Vec& b) {
    const __m256 any = _mm256_or_ps(_mm256_cmp_ps(a.lo, a.hi, _CMP_UNORD_Q), _mm256_cmp_ps(b.lo, b.hi, _CMP_UNORD_Q));
    if (__builtin_expect(!_mm256_testz_ps(any, any), 0)) {
      a = quiet(a);
      b = quiet(b);
    }
  }
  template <class T>
  static Vec quiet_unless_paired(Vec v) {
    if constexpr (kQuietPairs<T>) return v;
    else return quiet(v);
  }

  // Sixteen bf16 in element order from split order, rounded to nearest even as convert.h
  // rounds (hi16 + carry, carry = lo16 + 0x7FFF + (hi16 & 1) >= 2^16) but on 16-bit words:
  // two blends gather the upper words of all sixteen floats, already interleaved, and their
  // lower words; VPAVGW(lo16, 0x7FFE + (hi16 & 1)) = (lo16 + 0x7FFF + (hi16 & 1)) >> 1 without
  // overflow, so its top bit is the carry. 9 operations per 16 floats where rounding 32-bit
  // lanes and packing took 11. Measured (bench/step_cycles.cpp, neox bf16 cycles per 32
  // elements, Zen 3, three runs of each tree alternating): 12.6-12.7 -> 11.5.
  static __m256i narrow16_bf16(Vec v) {
    const __m256i even = _mm256_castps_si256(v.lo), odd = _mm256_castps_si256(v.hi);
    const __m256i upper = _mm256_blend_epi16(_mm256_srli_epi32(even, 16), odd, 0xAA);
    const __m256i lower = _mm256_blend_epi16(even, _mm256_slli_epi32(odd, 16), 0xAA);
    const __m256i bias = _mm256_or_si256(_mm256_and_si256(upper, _mm256_set1_epi16(1)), _mm256_set1_epi16(0x7FFE));
    return _mm256_add_epi16(upper, _mm256_srli_epi16(_mm256_avg_epu16(lower, bias), 15));
  }

  template <class T>
  static void store(typename T::Storage* p, Vec v) {
    v = quiet_unless_paired<T>(v);
    if constexpr (std::is_same_v<T, F32>) {
      _mm256_storeu_ps(p, v.lo);
      _mm256_storeu_ps(p + 8, v.hi);
    } else if constexpr (std::is_same_v<T, BF16>) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow16_bf16(v));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v.lo, _MM_FROUND_TO_NEAREST_INT));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(v.hi, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  template <class T>
  static void store(typename T::Storage* p, Vec v, Mask n) {
    v = quiet(v);
    if constexpr (std::is_same_v<T, F32>) {
      _mm256_maskstore_ps(p, lanes8(n), v.lo);
      if (n > 8) _mm256_maskstore_ps(p + 8, lanes8(n - 8), v.hi);
    } else {
      alignas(32) std::uint16_t buf[16];
      store<T>(buf, v);
      std::memcpy(p, buf, static_cast<std::size_t>(n) * sizeof(std::uint16_t));
    }
  }
  template <class T>
  static void store2(typename T::Storage* p, Vec a, Vec b) {
    store<T>(p, a);
    store<T>(p + 16, b);
  }

  // Non-temporal stores of 32 bytes where the address is 32-byte aligned, else 16 (the
  // dispatcher streams only rows whose every vector is 16-byte aligned; a misaligned one
  // would fault, so the check stays).
  static void stream_bytes32(void* p, __m256i v) {
    if ((reinterpret_cast<std::uintptr_t>(p) & 31) == 0) {
      _mm256_stream_si256(static_cast<__m256i*>(p), v);
    } else if ((reinterpret_cast<std::uintptr_t>(p) & 15) == 0) {
      _mm_stream_si128(static_cast<__m128i*>(p), _mm256_castsi256_si128(v));
      _mm_stream_si128(static_cast<__m128i*>(p) + 1, _mm256_extracti128_si256(v, 1));
    } else {
      _mm256_storeu_si256(static_cast<__m256i*>(p), v);
    }
  }
  static void stream_bytes16(void* p, __m128i v) {
    if ((reinterpret_cast<std::uintptr_t>(p) & 15) == 0) _mm_stream_si128(static_cast<__m128i*>(p), v);
    else _mm_storeu_si128(static_cast<__m128i*>(p), v);
  }
  template <class T>
  static void stream1(typename T::Storage* p, Vec v) {
    v = quiet_unless_paired<T>(v);
    if constexpr (std::is_same_v<T, F32>) {
      stream_bytes32(p, _mm256_castps_si256(v.lo));
      stream_bytes32(p + 8, _mm256_castps_si256(v.hi));
    } else if constexpr (std::is_same_v<T, BF16>) {
      stream_bytes32(p, narrow16_bf16(v));
    } else {
      stream_bytes16(p, _mm256_cvtps_ph(v.lo, _MM_FROUND_TO_NEAREST_INT));
      stream_bytes16(p + 8, _mm256_cvtps_ph(v.hi, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  template <class T>
  static void stream2(typename T::Storage* p, Vec a, Vec b) {
    stream1<T>(p, a);
    stream1<T>(p + 16, b);
  }
  static void fence() { _mm_sfence(); }

  static Vec mul(Vec a, Vec b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static Vec fmadd(Vec a, Vec b, Vec c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Vec fmsub(Vec a, Vec b, Vec c) {
    return {_mm256_fmsub_ps(a.lo, b.lo, c.lo), _mm256_fmsub_ps(a.hi, b.hi, c.hi)};
  }
  static Vec neg(Vec a) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    return {_mm256_xor_ps(a.lo, sign), _mm256_xor_ps(a.hi, sign)};
  }
  // The cos or sin of eight pairs (c: the lower or upper eight lanes) over the sixteen
  // elements of those pairs, in T's lane order: in element order [c0 c0 c1 c1 ... c7 c7], by
  // one cross-lane VPERMPD to [c0 c1 c4 c5 | c2 c3 c6 c7] and two in-lane unpacks (two
  // VPERMPS took 20.5 cycles per gptj fp32 step against 15.4, bench/step_cycles.cpp); in
  // split order both halves are c, as `lo` holds the pairs' first elements and `hi` their
  // second.
  template <class T>
  static Vec dup8(__m256 c) {
    if constexpr (kSplitOrder<T>) {
      return {c, c};
    } else {
      const __m256 x = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(c), 0xD8));
      return {_mm256_unpacklo_ps(x, x), _mm256_unpackhi_ps(x, x)};
    }
  }
  template <class T> static Vec dup_lo(Vec c) { return dup8<T>(c.lo); }
  template <class T> static Vec dup_hi(Vec c) { return dup8<T>(c.hi); }
  template <class T>
  static Vec swap_pairs(Vec v) {
    if constexpr (kSplitOrder<T>) return {v.hi, v.lo};
    else return {_mm256_permute_ps(v.lo, 0xB1), _mm256_permute_ps(v.hi, 0xB1)};
  }
  template <class T>
  static Vec flip_even(Vec v) {
    if constexpr (kSplitOrder<T>) {
      return {_mm256_xor_ps(v.lo, _mm256_set1_ps(-0.0f)), v.hi};
    } else {
      const __m256 sign = _mm256_castsi256_ps(_mm256_setr_epi32(
          INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0));
      return {_mm256_xor_ps(v.lo, sign), _mm256_xor_ps(v.hi, sign)};
    }
  }
};
#endif  // AVX2

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// ---- avx512: sixteen lanes in one zmm register, tails by opmask ------------------------------
struct Avx512 {
  static constexpr int kLanes = 16;
  static constexpr bool kFma = true;
  static constexpr bool kUnroll2 = true;  // 8 of 32 zmm registers per step
  template <class T>
  static constexpr bool kVectorPath = true;
  template <class T>
  static constexpr bool kSplitOrder = false;  // lanes in element order (see Avx2x16)
  template <class T>
  static constexpr bool kDupTable = false;  // gptj duplicates its table in registers
  template <class T>
  static constexpr bool kQuietPairs = false;  // every store quiets its own vector
  using Vec = __m512;
  using Mask = __mmask16;

  static Mask first(int n) { return static_cast<Mask>((1u << n) - 1u); }  // n in 1..16

  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }

  static Vec widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  template <class T>
  static Vec load(const typename T::Storage* p) {
    if constexpr (std::is_same_v<T, F32>) {
      return load(p);
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      if constexpr (std::is_same_v<T, BF16>) return widen_bf16(h);
      else return _mm512_cvtph_ps(h);
    }
  }
  template <class T>
  static Vec load(const typename T::Storage* p, Mask m) {
    if constexpr (std::is_same_v<T, F32>) {
      return load(p, m);
    } else {
      const __m256i h = _mm256_maskz_loadu_epi16(m, p);  // AVX512BW + VL
      if constexpr (std::is_same_v<T, BF16>) return widen_bf16(h);
      else return _mm512_cvtph_ps(h);
    }
  }

  // Every NaN lane becomes convert.h's canonical NaN; each store below starts with it.
  static Vec quiet(Vec v) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                              _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(kQuietNanF32))));
  }

  // bf16 rounding as in convert.h, to nearest even, as 32-bit lanes whose upper halves are
  // zero. Lanes must have passed quiet(): the bias added to a NaN with low payload bits
  // would carry into its exponent and sign (0x7FFFFFFF would round to -0).
  static __m512i round_bf16(Vec v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
  }
  static __m256i narrow16_bf16(Vec v) { return _mm512_cvtepi32_epi16(round_bf16(v)); }
  // Thirty-two bf16 in order: the in-lane pack interleaves 64-bit quarters of a and b.
  static __m512i narrow32_bf16(Vec a, Vec b) {
    const __m512i packed = _mm512_packus_epi32(round_bf16(a), round_bf16(b));
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), packed);
  }
  static __m256i narrow16_f16(Vec v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }

  template <class T>
  static void store(typename T::Storage* p, Vec v) {
    v = quiet(v);
    if constexpr (std::is_same_v<T, F32>) _mm512_storeu_ps(p, v);
    else if constexpr (std::is_same_v<T, BF16>) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow16_bf16(v));
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow16_f16(v));
  }
  template <class T>
  static void store(typename T::Storage* p, Vec v, Mask m) {
    v = quiet(v);
    if constexpr (std::is_same_v<T, F32>) _mm512_mask_storeu_ps(p, m, v);
    else if constexpr (std::is_same_v<T, BF16>) _mm256_mask_storeu_epi16(p, m, narrow16_bf16(v));
    else _mm256_mask_storeu_epi16(p, m, narrow16_f16(v));
  }
  template <class T>
  static void store2(typename T::Storage* p, Vec a, Vec b) {
    if constexpr (std::is_same_v<T, BF16>) {
      _mm512_storeu_si512(p, narrow32_bf16(quiet(a), quiet(b)));
    } else {
      store<T>(p, a);
      store<T>(p + 16, b);
    }
  }

  // Non-temporal stores in the widest piece the address allows (see Avx2x16).
  static void stream_bytes64(void* p, __m512i v) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    if ((at & 63) == 0) {
      _mm512_stream_si512(static_cast<__m512i*>(p), v);
    } else if ((at & 31) == 0) {
      _mm256_stream_si256(static_cast<__m256i*>(p), _mm512_castsi512_si256(v));
      _mm256_stream_si256(static_cast<__m256i*>(p) + 1, _mm512_extracti64x4_epi64(v, 1));
    } else if ((at & 15) == 0) {
      auto* q = static_cast<__m128i*>(p);
      _mm_stream_si128(q, _mm512_castsi512_si128(v));
      _mm_stream_si128(q + 1, _mm512_extracti32x4_epi32(v, 1));
      _mm_stream_si128(q + 2, _mm512_extracti32x4_epi32(v, 2));
      _mm_stream_si128(q + 3, _mm512_extracti32x4_epi32(v, 3));
    } else {
      _mm512_storeu_si512(p, v);
    }
  }
  static void stream_bytes32(void* p, __m256i v) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    if ((at & 31) == 0) {
      _mm256_stream_si256(static_cast<__m256i*>(p), v);
    } else if ((at & 15) == 0) {
      _mm_stream_si128(static_cast<__m128i*>(p), _mm256_castsi256_si128(v));
      _mm_stream_si128(static_cast<__m128i*>(p) + 1, _mm256_extracti128_si256(v, 1));
    } else {
      _mm256_storeu_si256(static_cast<__m256i*>(p), v);
    }
  }
  template <class T>
  static void stream1(typename T::Storage* p, Vec v) {
    v = quiet(v);
    if constexpr (std::is_same_v<T, F32>) stream_bytes64(p, _mm512_castps_si512(v));
    else if constexpr (std::is_same_v<T, BF16>) stream_bytes32(p, narrow16_bf16(v));
    else stream_bytes32(p, narrow16_f16(v));
  }
  template <class T>
  static void stream2(typename T::Storage* p, Vec a, Vec b) {
    a = quiet(a);
    b = quiet(b);
    if constexpr (std::is_same_v<T, F32>) {
      stream_bytes64(p, _mm512_castps_si512(a));
      stream_bytes64(p + 16, _mm512_castps_si512(b));
    } else if constexpr (std::is_same_v<T, BF16>) {
      stream_bytes64(p, narrow32_bf16(a, b));
    } else {
      stream_bytes32(p, narrow16_f16(a));
      stream_bytes32(p + 16, narrow16_f16(b));
    }
  }
  static void fence() { _mm_sfence(); }

  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec fmsub(Vec a, Vec b, Vec c) { return _mm512_fmsub_ps(a, b, c); }
  static Vec neg(Vec a) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
  }
  template <class T>
  static Vec dup_lo(Vec c) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), c);
  }
  template <class T>
  static Vec dup_hi(Vec c) {
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), c);
  }
  template <class T> static Vec swap_pairs(Vec v) { return _mm512_permute_ps(v, 0xB1); }
  template <class T> static Vec flip_even(Vec v) {
    return _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(v), _mm512_set1_epi64(static_cast<long long>(0x0000000080000000ull))));
  }
};

#if defined(__AVX512BF16__)
// ---- avx512bf16: Avx512 with the hardware's bf16 conversion ---------------------------------
// VCVTNEPS2BF16 / VCVTNE2PS2BF16 round to nearest even like round_bf16, with two differences:
// they treat fp32 subnormal inputs as zero, and they keep a NaN's upper payload. So a vector
// goes to the hardware only when none of its lanes is NaN or subnormal, which one VFPCLASSPS
// per vector tells (AVX512DQ, which the path requires); a vector with such a lane takes
// Avx512's integer rounding after quiet(), so the stored bits equal Avx512's for every input.
// Executed natively on an AMD Zen 4 and an Intel Xeon (family 6 model 207); Bochs 2.7 lacks
// AVX512_BF16. dispatch.cpp runs it only after a known-answer comparison with avx2 passes on
// the CPU at hand.
struct Avx512Bf16 : Avx512 {
  // VFPCLASSPS categories: 0x01 quiet NaN, 0x20 subnormal, 0x80 signalling NaN.
  static Mask nan_or_subnormal(Vec v) { return _mm512_fpclass_ps_mask(v, 0xA1); }
  // v straight from the arithmetic: NaN lanes are made canonical here, on the rare path.
  static __m256i narrow16_bf16(Vec v) {
    if (nan_or_subnormal(v)) return Avx512::narrow16_bf16(quiet(v));
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  }
  // _mm512_cvtne2ps_pbh(a, b) puts b's conversions in the lower 16 words.
  static __m512i narrow32_bf16(Vec a, Vec b) {
    if (nan_or_subnormal(a) | nan_or_subnormal(b)) return Avx512::narrow32_bf16(quiet(a), quiet(b));
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
  }

  template <class T>
  static void store(typename T::Storage* p, Vec v) {
    if constexpr (std::is_same_v<T, BF16>) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow16_bf16(v));
    else Avx512::store<T>(p, v);
  }
  template <class T>
  static void store(typename T::Storage* p, Vec v, Mask m) {
    if constexpr (std::is_same_v<T, BF16>) _mm256_mask_storeu_epi16(p, m, narrow16_bf16(v));
    else Avx512::store<T>(p, v, m);
  }
  template <class T>
  static void store2(typename T::Storage* p, Vec a, Vec b) {
    if constexpr (std::is_same_v<T, BF16>) _mm512_storeu_si512(p, narrow32_bf16(a, b));
    else Avx512::store2<T>(p, a, b);
  }
  template <class T>
  static void stream1(typename T::Storage* p, Vec v) {
    if constexpr (std::is_same_v<T, BF16>) stream_bytes32(p, narrow16_bf16(v));
    else Avx512::stream1<T>(p, v);
  }
  template <class T>
  static void stream2(typename T::Storage* p, Vec a, Vec b) {
    if constexpr (std::is_same_v<T, BF16>) stream_bytes64(p, narrow32_bf16(a, b));
    else Avx512::stream2<T>(p, a, b);
  }
};
#endif  // AVX512_BF16
#endif  // AVX-512

// ---- software prefetch (every backend) ----------------------------------------------------
// A hint that never faults (an address past the end of a buffer is fine) and never changes a
// result: PREFETCHT0 on x86, the line holding p into every cache level.
inline void prefetch_read(const void* p) { __builtin_prefetch(p, 0, 3); }

}  // namespace
}  // namespace circlerope::cpu
