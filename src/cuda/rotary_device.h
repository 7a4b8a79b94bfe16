// Internal: everything one CUDA thread computes, as functions that compile for the host too.
//
// The kernels in kernels.cu run table_item / rotate_item_as for each work item g (one item
// per thread where the launch's indices fit in 32 bits, a grid-stride loop otherwise);
// nothing else runs on the device. The CPU tests (tests/test_cuda_math.cpp)
// call the same functions for every g of a launch on host memory, so the index arithmetic,
// the 16-byte packing, the storage rounding and the rotation of each pair are tested on a
// machine without a GPU. What they cannot test: the device's own libm (pow, sincos in
// double: CUDA documents <= 2 ulp), the launch configuration, and real concurrency (they run
// the items one after another and in shuffled orders; items write disjoint elements).
//
// Two promises make the host run equal the device run bit for bit:
//  - float arithmetic goes through mul_rn / add_rn / sub_rn (__fmul_rn etc. on the device),
//    which nvcc never fuses into FMAs, and the host test compiles with -ffp-contract=off;
//  - storage conversions are the CPU's own integer code (circlerope/detail/convert.h, no
//    __float2bfloat16 intrinsics): round to nearest even, and every NaN stored as the
//    canonical quiet NaN, fp32 0x7FC00000, bf16 0x7FC0, fp16 0x7E00 (the device's
//    arithmetic returns its own NaN 0x7FFFFFFF, which this replaces).
// nvcc's default -ftz=false keeps fp32 subnormals, as the host does.
//
// Work items of a rotate launch (up to kMaxLaunchTargets targets, one dtype, one pairing):
//   g -> target t (first_item prefix) -> local = g - first_item
//   local = ((token * groups) + group) * units + unit,   token = b * seq + s
// A unit is one rotation unit of heads_per_item heads (1, 2 or 4; heads group*H ..
// group*H+H-1):
//   vector path (16-byte loads; see plan.cpp for when it applies), L = 16 / sizeof(storage)
//     neox: elements [uL, uL+L) and [half+uL, half+uL+L), frequencies uL .. uL+L-1
//     gptj: elements [uL, uL+L), frequencies uL/2 .. uL/2+L/2-1
//   scalar path (any strides): pair u, i.e. (u, u+half) for neox, (2u, 2u+1) for gptj
// or, after rot_units rotation units, one pass-through element (out of place only).
// Consecutive items are consecutive units of one head group, so a warp's loads cover whole
// rows of a head. The divisions are multiply-high by precomputed magic numbers (DivMod); a
// launch whose indices and offsets all fit in 31 bits does them in 32-bit arithmetic (one
// IMAD.HI each; a 64-bit integer division would be a ~70-instruction subroutine).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "circlerope/detail/convert.h"
#include "circlerope/detail/frequency_axis.h"

#if defined(__CUDACC__)
#define CRP_HD __host__ __device__ __forceinline__
#define CRP_UNROLL _Pragma("unroll")
#else
#define CRP_HD inline
#define CRP_UNROLL
#endif

namespace circlerope::gpu {

// ---- float32 arithmetic, one IEEE rounding per operation, never fused ----------------------

CRP_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

CRP_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

CRP_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// ---- bf16 / fp16 storage: the conversions of circlerope/detail/convert.h, host and device ----

using detail::bf16_to_float;
using detail::bits_float;
using detail::f16_to_float;
using detail::float_bits;
using detail::float_to_bf16;
using detail::float_to_f16;
using detail::is_nan_bits;
using detail::quiet_nan;

// Storage types; kDType is DType's value.
struct F32 {
  using T = float;
  static constexpr int kDType = 0;
};
struct BF16 {
  using T = std::uint16_t;
  static constexpr int kDType = 1;
};
struct F16 {
  using T = std::uint16_t;
  static constexpr int kDType = 2;
};

template <class S>
CRP_HD float widen(typename S::T v) {
  if constexpr (std::is_same_v<S, F32>) return v;
  else if constexpr (std::is_same_v<S, BF16>) return bf16_to_float(v);
  else return f16_to_float(v);
}

template <class S>
CRP_HD typename S::T narrow(float v) {
  if constexpr (std::is_same_v<S, F32>) return quiet_nan(v);
  else if constexpr (std::is_same_v<S, BF16>) return float_to_bf16(v);
  else return float_to_f16(v);
}

// Elements in 16 bytes of storage S.
template <class S>
inline constexpr int kLanes = static_cast<int>(16 / sizeof(typename S::T));

// ---- 16- and 8-byte packs: one vector load or store on the device ---------------------------

struct alignas(16) Pack16 {
  std::uint32_t w[4];
};
struct alignas(8) Pack8 {
  std::uint32_t w[2];
};

// On the device through uint4 / uint2, and stores through __stwb (st.global.wb.v4: plain
// write-back caching): a struct assignment, and in the kernels even a uint4 one, compiled to
// four 32-bit stores (seen in the PTX). The caller guarantees the alignment.
template <class P>
CRP_HD P load_pack(const void* p) {
  P v;
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(P) == 16) {
    const uint4 u = *static_cast<const uint4*>(p);
    v.w[0] = u.x, v.w[1] = u.y, v.w[2] = u.z, v.w[3] = u.w;
  } else {
    const uint2 u = *static_cast<const uint2*>(p);
    v.w[0] = u.x, v.w[1] = u.y;
  }
#else
  std::memcpy(&v, p, sizeof v);
#endif
  return v;
}

template <class P>
CRP_HD void store_pack(void* p, const P& v) {
#if defined(__CUDA_ARCH__)
  static_assert(sizeof(P) == 16, "only 16-byte packs are stored");
  __stwb(static_cast<uint4*>(p), make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]));
#else
  std::memcpy(p, &v, sizeof v);
#endif
}

// Lane j of a pack of storage S, widened (little-endian: element 2k is the low half of w[k]).
template <class S>
CRP_HD void unpack(const Pack16& v, float* x) {
CRP_UNROLL
  for (int j = 0; j < kLanes<S>; ++j) {
    if constexpr (std::is_same_v<S, F32>) {
      x[j] = bits_float(v.w[j]);
    } else {
      x[j] = widen<S>(static_cast<std::uint16_t>(v.w[j >> 1] >> ((j & 1) * 16)));
    }
  }
}

template <class S>
CRP_HD Pack16 pack(const float* y) {
  Pack16 v;
CRP_UNROLL
  for (int k = 0; k < 4; ++k) {
    if constexpr (std::is_same_v<S, F32>) {
      v.w[k] = float_bits(narrow<S>(y[k]));
    } else {
      v.w[k] = static_cast<std::uint32_t>(narrow<S>(y[2 * k])) |
               (static_cast<std::uint32_t>(narrow<S>(y[2 * k + 1])) << 16);
    }
  }
  return v;
}

// N consecutive table floats; p is 16-byte aligned when N % 4 == 0, 8-byte when N == 2.
template <int N>
CRP_HD void load_floats(const float* p, float* out) {
  if constexpr (N % 4 == 0) {
CRP_UNROLL
    for (int k = 0; k < N / 4; ++k) {
      const Pack16 v = load_pack<Pack16>(p + 4 * k);
CRP_UNROLL
      for (int j = 0; j < 4; ++j) out[4 * k + j] = bits_float(v.w[j]);
    }
  } else {
    static_assert(N == 2, "table loads are 2, 4 or 8 floats");
    const Pack8 v = load_pack<Pack8>(p);
    out[0] = bits_float(v.w[0]);
    out[1] = bits_float(v.w[1]);
  }
}

// ---- division by a run-time constant ------------------------------------------------------
// q = (mulhi(n, magic) + n) >> shift (Granlund & Montgomery 1994, the form of PyTorch's
// IntDivider), in two widths:
//  - 64-bit: exact for 0 <= n < 2^63 and 1 <= d <= 2^63 (a 64-bit multiply-high is several
//    instructions on the GPU);
//  - 32-bit (magic32, one IMAD.HI): exact for 0 <= n < 2^31 and 1 <= d <= 2^31; 0 when d is
//    larger, and the plan then never asks for it.
// The dispatcher only divides indices below the element count of a view, which validation
// keeps < 2^59; a launch takes 32-bit indices only when every index and offset of it fits.

struct DivMod {
  std::uint64_t divisor = 1;
  std::uint64_t magic = 1;
  std::uint32_t shift = 0;
  std::uint32_t magic32 = 1;
};

// Host only (128-bit arithmetic). d must be in [1, 2^63].
inline DivMod make_divmod(std::uint64_t d) {
  __extension__ typedef unsigned __int128 U128;
  DivMod m;
  m.divisor = d;
  std::uint32_t shift = 0;
  while (shift < 63 && (std::uint64_t{1} << shift) < d) ++shift;
  m.shift = shift;
  const U128 numerator = (U128{1} << 64) * ((U128{1} << shift) - d);
  m.magic = static_cast<std::uint64_t>(numerator / d) + 1;
  m.magic32 = d <= (std::uint64_t{1} << 31)
                  ? static_cast<std::uint32_t>((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d) / d + 1)
                  : 0;
  return m;
}

CRP_HD std::uint64_t mul_hi(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  __extension__ typedef unsigned __int128 U128;
  return static_cast<std::uint64_t>((static_cast<U128>(a) * b) >> 64);
#endif
}

CRP_HD std::uint32_t mul_hi(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(a) * b) >> 32);
#endif
}

CRP_HD std::uint64_t quotient(const DivMod& d, std::uint64_t n) {
  return (mul_hi(n, d.magic) + n) >> d.shift;
}

CRP_HD std::uint32_t quotient(const DivMod& d, std::uint32_t n) {
  return (mul_hi(n, d.magic32) + n) >> d.shift;
}

// ---- angle tables ---------------------------------------------------------------------------

struct TableLaunch {
  const float* positions = nullptr;  // [3][tokens], device memory
  float* values = nullptr;           // [tokens][rotary_dim]: cos then sin
  std::int64_t tokens = 0;
  std::uint64_t items = 0;           // tokens * half
  DivMod half{};
  DivMod seq{};                      // tokens per batch row (for the report of a bad position)
  double theta = 0;
  int rotary_dim = 0;
  int layout = 0;                    // FrequencyLayout's value
  int sections[3] = {0, 0, 0};
  // Where a non-finite position is reported (PositionReport), or null: host memory mapped
  // into the device's address space, read by the host without a synchronisation.
  unsigned long long* report = nullptr;
};

// A non-finite position found by the table kernel, packed in one 64-bit word so that one
// store publishes all of it (several bad tokens race; each store is whole, the last one
// stays): bit 63 set, axis in bits 61-62, the kind in bits 59-60 (0 NaN, 1 +inf, 2 -inf),
// the row in bits 29-58 (30 bits) and the token in its row in bits 0-28 (29 bits). Rows and
// tokens are below 2^24, the limit of one call.
struct PositionReport {
  int axis = 0;
  int kind = 0;  // 0 NaN, 1 +inf, 2 -inf
  std::int64_t row = 0;
  std::int64_t token = 0;
};

CRP_HD unsigned long long encode_report(int axis, float value, std::uint64_t row, std::uint64_t token) {
  const std::uint32_t u = float_bits(value);
  const unsigned long long kind = is_nan_bits(u) ? 0 : (u >> 31 ? 2 : 1);
  return (1ull << 63) | (static_cast<unsigned long long>(axis) << 61) | (kind << 59) |
         ((row & ((1ull << 30) - 1)) << 29) | (token & ((1ull << 29) - 1));
}

inline PositionReport decode_report(unsigned long long word) {
  PositionReport r;
  r.axis = static_cast<int>((word >> 61) & 3);
  r.kind = static_cast<int>((word >> 59) & 3);
  r.row = static_cast<std::int64_t>((word >> 29) & ((1ull << 30) - 1));
  r.token = static_cast<std::int64_t>(word & ((1ull << 29) - 1));
  return r;
}

CRP_HD double pow_double(double a, double b) {
#if defined(__CUDA_ARCH__)
  return ::pow(a, b);
#else
  return std::pow(a, b);
#endif
}

CRP_HD void sincos_double(double x, double* s, double* c) {
#if defined(__CUDA_ARCH__)
  ::sincos(x, s, c);
#else
  *s = std::sin(x);
  *c = std::cos(x);
#endif
}

CRP_HD void publish_report(unsigned long long* report, unsigned long long word) {
#if defined(__CUDA_ARCH__)
  // A system-scope store to mapped host memory: visible to the host once the kernel is done.
  *reinterpret_cast<volatile unsigned long long*>(report) = word;
  __threadfence_system();
#else
  *report = word;
#endif
}

// Entry (token, i): the CPU table's formula (table.cpp, inverse_frequencies): the angle
// pos[axis(i)] * theta^(-2i/D) and its cos/sin in double, each rounded once to float. A
// non-finite position gives NaN entries (the sine and cosine of a NaN or an infinity) and,
// from the token's first frequency on that axis, a report.
CRP_HD void table_item(const TableLaunch& job, std::uint64_t g) {
  const std::uint64_t token = quotient(job.half, g);
  const int i = static_cast<int>(g - token * job.half.divisor);
  const int half = job.rotary_dim / 2;
  const int axis = detail::frequency_axis(job.layout, job.sections[0], job.sections[1],
                                          job.sections[2], i);
  const float p = job.positions[static_cast<std::int64_t>(axis) * job.tokens + static_cast<std::int64_t>(token)];
  if (job.report != nullptr && !(p - p == 0.0f)) {  // NaN or infinity
    const std::uint64_t row = quotient(job.seq, token);
    publish_report(job.report, encode_report(axis, p, row, token - row * job.seq.divisor));
  }
  const double inv_freq = pow_double(job.theta, -2.0 * static_cast<double>(i) / job.rotary_dim);
  double s, c;
  sincos_double(static_cast<double>(p) * inv_freq, &s, &c);
  float* row = job.values + token * static_cast<std::uint64_t>(job.rotary_dim);
  row[i] = static_cast<float>(c);
  row[half + i] = static_cast<float>(s);
}

// ---- rotation -------------------------------------------------------------------------------

inline constexpr int kMaxLaunchTargets = 8;
// Heads one work item rotates (RotateLaunch::heads_per_item is 1, 2 or 4): each head's loads
// are issued before any store, and the unit's cos/sin are loaded once for all of them.
inline constexpr int kMaxHeadsPerItem = 4;

struct TargetLaunch {
  const void* in = nullptr;
  void* out = nullptr;
  std::int64_t in_stride[4] = {0, 0, 0, 0};   // batch, seq, head, dim; elements
  std::int64_t out_stride[4] = {0, 0, 0, 0};
  std::uint64_t first_item = 0;  // of this target, in the launch's item numbering
  DivMod units{};                // work units per (token, head group)
  DivMod groups{};               // head groups per token
  std::int64_t heads = 0;
  std::int32_t rot_units = 0;    // the first rot_units units rotate, the rest copy one element
};

struct RotateLaunch {
  TargetLaunch targets[kMaxLaunchTargets];
  std::int32_t target_count = 0;
  std::uint64_t items = 0;
  const float* table = nullptr;  // [tokens][2 * half]
  DivMod seq{};                  // tokens per batch row
  std::int32_t half = 0;
  std::int32_t heads_per_item = kMaxHeadsPerItem;  // 1, 2 or 4
  // Every item index, element offset and table offset of the launch is below 2^31: the
  // kernel then does its index arithmetic in 32 bits (fewer registers and instructions).
  bool index32 = false;
  bool gptj = false;
  bool backward = false;
};

CRP_HD float rotated_first(float x0, float x1, float c, float s) {
  return sub_rn(mul_rn(x0, c), mul_rn(x1, s));
}
CRP_HD float rotated_second(float x0, float x1, float c, float s) {
  return add_rn(mul_rn(x1, c), mul_rn(x0, s));
}

// Vector unit u of heads [0, hn) of a group (hn <= H): in/out point at the group's first head.
template <class S, int H, class Off>
CRP_HD void rotate_vector_unit(const RotateLaunch& job, const float* row, Off unit, int hn, Off is,
                               Off os, const typename S::T* in, typename S::T* out) {
  constexpr int L = kLanes<S>;
  const Off e0 = unit * L;
  const Off half = job.half;
  if (!job.gptj) {
    float c[L], s[L];
    load_floats<L>(row + e0, c);
    load_floats<L>(row + half + e0, s);
    Pack16 a[H], b[H];
CRP_UNROLL
    for (int h = 0; h < H; ++h)  // every load before any store: in place is safe
      if (h < hn) {              // and the loads are in flight together
        a[h] = load_pack<Pack16>(in + h * is + e0);
        b[h] = load_pack<Pack16>(in + h * is + half + e0);
      }
CRP_UNROLL
    for (int h = 0; h < H; ++h)
      if (h < hn) {
        float x0[L], x1[L], y0[L], y1[L];
        unpack<S>(a[h], x0);
        unpack<S>(b[h], x1);
CRP_UNROLL
        for (int j = 0; j < L; ++j) {
          const float sj = job.backward ? -s[j] : s[j];
          y0[j] = rotated_first(x0[j], x1[j], c[j], sj);
          y1[j] = rotated_second(x0[j], x1[j], c[j], sj);
        }
        store_pack(out + h * os + e0, pack<S>(y0));
        store_pack(out + h * os + half + e0, pack<S>(y1));
      }
  } else {
    constexpr int P = L / 2;  // pairs per pack
    float c[P], s[P];
    load_floats<P>(row + e0 / 2, c);
    load_floats<P>(row + half + e0 / 2, s);
    Pack16 a[H];
CRP_UNROLL
    for (int h = 0; h < H; ++h)
      if (h < hn) a[h] = load_pack<Pack16>(in + h * is + e0);
CRP_UNROLL
    for (int h = 0; h < H; ++h)
      if (h < hn) {
        float x[L], y[L];
        unpack<S>(a[h], x);
CRP_UNROLL
        for (int j = 0; j < P; ++j) {
          const float sj = job.backward ? -s[j] : s[j];
          y[2 * j] = rotated_first(x[2 * j], x[2 * j + 1], c[j], sj);
          y[2 * j + 1] = rotated_second(x[2 * j], x[2 * j + 1], c[j], sj);
        }
        store_pack(out + h * os + e0, pack<S>(y));
      }
  }
}

// Scalar unit = pair u, any strides.
template <class S, class Off>
CRP_HD void rotate_scalar_unit(const RotateLaunch& job, const float* row, Off unit, int hn, Off is,
                               Off os, Off ids, Off ods, const typename S::T* in, typename S::T* out) {
  const Off half = job.half;
  const float c = row[unit];
  const float s = job.backward ? -row[half + unit] : row[half + unit];
  const Off i0 = job.gptj ? 2 * unit : unit;
  const Off i1 = job.gptj ? 2 * unit + 1 : unit + half;
  for (int h = 0; h < hn; ++h) {
    const typename S::T* x = in + h * is;
    typename S::T* y = out + h * os;
    const float x0 = widen<S>(x[i0 * ids]);
    const float x1 = widen<S>(x[i1 * ids]);
    y[i0 * ods] = narrow<S>(rotated_first(x0, x1, c, s));
    y[i1 * ods] = narrow<S>(rotated_second(x0, x1, c, s));
  }
}

// Item g of a launch whose heads_per_item is H, with index arithmetic in I (std::uint32_t
// when job.index32, else std::uint64_t). What each kernel instance runs for each of its items.
template <class S, bool kVector, int H, class I>
CRP_HD void rotate_item_as(const RotateLaunch& job, I g) {
  using T = typename S::T;
  using Off = std::conditional_t<sizeof(I) == 4, std::int32_t, std::int64_t>;
  int t = 0;
  while (t + 1 < job.target_count && g >= static_cast<I>(job.targets[t + 1].first_item)) ++t;
  const TargetLaunch& tg = job.targets[t];
  const I local = g - static_cast<I>(tg.first_item);
  const I unit_row = quotient(tg.units, local);
  const auto unit = static_cast<Off>(local - unit_row * static_cast<I>(tg.units.divisor));
  const I token = quotient(tg.groups, unit_row);
  const auto group = static_cast<Off>(unit_row - token * static_cast<I>(tg.groups.divisor));
  const I bi = quotient(job.seq, token);
  const auto b = static_cast<Off>(bi);
  const auto s = static_cast<Off>(token - bi * static_cast<I>(job.seq.divisor));
  const Off h0 = group * H;
  const auto heads = static_cast<Off>(tg.heads);
  const int hn = static_cast<int>(heads - h0 < H ? heads - h0 : H);
  const Off is = static_cast<Off>(tg.in_stride[2]), os = static_cast<Off>(tg.out_stride[2]);
  const Off ids = static_cast<Off>(tg.in_stride[3]), ods = static_cast<Off>(tg.out_stride[3]);
  const T* in = static_cast<const T*>(tg.in) + b * static_cast<Off>(tg.in_stride[0]) +
                s * static_cast<Off>(tg.in_stride[1]) + h0 * is;
  T* out = static_cast<T*>(tg.out) + b * static_cast<Off>(tg.out_stride[0]) +
           s * static_cast<Off>(tg.out_stride[1]) + h0 * os;
  if (unit >= tg.rot_units) {  // pass-through element, bit for bit
    const Off e = 2 * static_cast<Off>(job.half) + (unit - tg.rot_units);
    for (int h = 0; h < hn; ++h) out[h * os + e * ods] = in[h * is + e * ids];
    return;
  }
  const float* row = job.table + static_cast<Off>(token) * static_cast<Off>(2 * job.half);
  if constexpr (kVector) rotate_vector_unit<S, H, Off>(job, row, unit, hn, is, os, in, out);
  else rotate_scalar_unit<S, Off>(job, row, unit, hn, is, os, ids, ods, in, out);
}

// Item g of any launch, as the kernel that the launch's settings select runs it (the CPU
// emulation in the tests runs every item through this).
template <class S, bool kVector>
inline void rotate_item(const RotateLaunch& job, std::uint64_t g) {
  auto run = [&](auto heads) {
    constexpr int H = decltype(heads)::value;
    if (job.index32) rotate_item_as<S, kVector, H, std::uint32_t>(job, static_cast<std::uint32_t>(g));
    else rotate_item_as<S, kVector, H, std::uint64_t>(job, g);
  };
  switch (job.heads_per_item) {
    case 1: run(std::integral_constant<int, 1>{}); break;
    case 2: run(std::integral_constant<int, 2>{}); break;
    default: run(std::integral_constant<int, 4>{}); break;
  }
}

}  // namespace circlerope::gpu
