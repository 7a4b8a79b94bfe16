// Internal: the vector ring kernel, one template over the lane count N of GCC/clang vector
// extensions of doubles; positions_avx2.cpp instantiates N = 4 (ring_avx2) and
// positions_avx512.cpp N = 8 (ring_avx512), each compiled with its ISA's flags and
// -ffp-contract=fast (the same fused operations in every lane, so both give the same bits:
// the emulator test checks that). Free of the standard library and libm so that the
// freestanding emulator test runs it too.
//
// Per cell, as circle_ring does it (docs/spec.md §3 steps 1-6): x' = q - cx, y' = r - cy,
// theta_s = atan2(y', x'); theta_SA = (theta_s - min) 2pi / (max - min) when max > min;
// theta_GA = 2pi j / N; theta = alpha theta_SA + (1 - alpha) theta_GA; (a, b) = R (cos, sin);
// P = a u + b v, blended with G = x' u + y' v by beta. Three passes over the cells: the polar
// angles (and their range); cos and sin; the rest (each pass keeps its constants in registers).
#pragma once

#include <cstdint>

#include "positions_simd.h"

namespace circlerope::detail {
namespace {

// (GCC ignores a vector_size that depends on a template parameter: one type per width.)
template <int N>
struct RingLanes;
template <>
struct RingLanes<4> {
  using D = double __attribute__((vector_size(32)));
  using I = std::int64_t __attribute__((vector_size(32)));
};
template <>
struct RingLanes<8> {
  using D = double __attribute__((vector_size(64)));
  using I = std::int64_t __attribute__((vector_size(64)));
};

template <int N>
struct RingVectors {
  using D = typename RingLanes<N>::D;
  using I = typename RingLanes<N>::I;

  static D splat(double v) {
    D out;
    for (int i = 0; i < N; ++i) out[i] = v;
    return out;
  }
  static D iota() {
    D out;
    for (int i = 0; i < N; ++i) out[i] = i;
    return out;
  }
  template <class M>  // a comparison's result: lanes all ones or all zeros
  static D select(M mask, D a, D b) {
    const I m = reinterpret_cast<I>(mask);
    return reinterpret_cast<D>((m & reinterpret_cast<I>(a)) | (~m & reinterpret_cast<I>(b)));
  }
  static D abs(D v) { return reinterpret_cast<D>(reinterpret_cast<I>(v) & 0x7FFFFFFFFFFFFFFFll); }
  static D min(D a, D b) { return select(a < b, a, b); }
  static D max(D a, D b) { return select(a > b, a, b); }

  // atan2(y, x) for the ring's inputs: finite, never -0 (a difference of equal doubles is +0),
  // atan2(0, 0) = 0 as libm gives for +0. Reduction: t = min(|x|,|y|) / max(|x|,|y|) in [0, 1],
  // then atan(t) = atan(c) + atan((t - c) / (1 + t c)) with c = 0, tan(pi/8) or 1, chosen so
  // that |u| <= tan(pi/16) = 0.199; its Taylor series to u^21 then leaves under 4e-18.
  static D atan2(D y, D x) {
    constexpr double kPi = 3.141592653589793238462643383279502884;  // rounded as circle.cpp's
    constexpr double kTanPi16 = 0.19891236737965800691, kTan3Pi16 = 0.66817863791929891999;
    constexpr double kTanPi8 = 0.41421356237309504880;
    const D ax = abs(x), ay = abs(y);
    const auto swap = ay > ax;
    const D mn = select(swap, ax, ay), mx = select(swap, ay, ax);
    const auto upper = mn > mx * kTan3Pi16;
    const auto middle = ~upper & (mn > mx * kTanPi16);
    const D c = select(upper, splat(1.0), select(middle, splat(kTanPi8), splat(0.0)));
    const D base = select(upper, splat(kPi / 4), select(middle, splat(kPi / 8), splat(0.0)));
    const auto zero = mx == 0.0;
    const D u = (mn - c * mx) / select(zero, splat(1.0), mx + c * mn);
    const D z = u * u;
    // p(z) = 1/3 - z/5 + z^2/7 - ... - z^9/21 by Estrin's scheme: a depth of four products
    // instead of Horner's nine, so that successive cells overlap in the pipeline.
    const D z2 = z * z, z4 = z2 * z2, z8 = z4 * z4;
    const D p01 = (-1.0 / 5) * z + 1.0 / 3, p23 = (-1.0 / 9) * z + 1.0 / 7;
    const D p45 = (-1.0 / 13) * z + 1.0 / 11, p67 = (-1.0 / 17) * z + 1.0 / 15;
    const D p89 = (-1.0 / 21) * z + 1.0 / 19;
    const D p = (p23 * z2 + p01) + (p67 * z2 + p45) * z4 + p89 * z8;
    D a = base + (u - u * z * p);
    a = select(swap, kPi / 2 - a, a);
    a = select(x < 0.0, kPi - a, a);
    a = select(y < 0.0, -a, a);
    return select(zero, splat(0.0), a);
  }

  // sin and cos: Cody-Waite reduction by pi/2 with the first two of fdlibm's 33-bit pieces
  // (exact products for |k| < 2^20; the ring's angles lie within [-pi, 2pi], so |k| <= 4 and
  // the dropped third piece, 2e-21 k, is far below the 1e-17 aimed at), Taylor polynomials to
  // r^17 / r^18 on |r| <= pi/4 (truncation under 1e-19) by Estrin's scheme, quadrant by bit
  // tricks.
  static void sincos(D x, D& s, D& c) {
    constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
    constexpr double kPio2_1 = 0x1.921fb544p+0, kPio2_2 = 0x1.0b4611a6p-34;
    constexpr double kRound = 0x1.8p52;  // adding it rounds to an integer kept in the low bits
    const D shifted = x * kTwoOverPi + kRound;
    const D k = shifted - kRound;
    const I quadrant = reinterpret_cast<I>(shifted);
    const D r = (x - k * kPio2_1) - k * kPio2_2;
    const D r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    constexpr double f3 = 6.0, f5 = 120.0, f7 = 5040.0, f9 = 362880.0, f11 = 39916800.0,
                     f13 = 6227020800.0, f15 = 1307674368000.0, f17 = 355687428096000.0;
    constexpr double f2 = 2.0, f4 = 24.0, f6 = 720.0, f8 = 40320.0, f10 = 3628800.0,
                     f12 = 479001600.0, f14 = 87178291200.0, f16 = 20922789888000.0,
                     f18 = 6402373705728000.0;
    // sin r = r - r^3 (1/3! - r^2/5! + ... + r^14/17!), the bracket in powers of r^2.
    const D s01 = (-1.0 / f5) * r2 + 1.0 / f3, s23 = (-1.0 / f9) * r2 + 1.0 / f7;
    const D s45 = (-1.0 / f13) * r2 + 1.0 / f11, s67 = (-1.0 / f17) * r2 + 1.0 / f15;
    const D sp = r - r * r2 * ((s23 * r4 + s01) + s67 * (r4 * r8) + s45 * r8);
    // cos r = 1 - r^2 (1/2! - r^2/4! + ... + r^16/18!).
    const D c01 = (-1.0 / f4) * r2 + 1.0 / f2, c23 = (-1.0 / f8) * r2 + 1.0 / f6;
    const D c45 = (-1.0 / f12) * r2 + 1.0 / f10, c67 = (-1.0 / f16) * r2 + 1.0 / f14;
    const D c8 = splat(1.0 / f18);
    const D cp = 1.0 - r2 * ((c23 * r4 + c01) + (c67 * r4 + c45) * r8 + c8 * (r8 * r8));
    const auto swap = (quadrant & 1) != 0;
    const I sin_sign = (quadrant & 2) << 62;
    const I cos_sign = ((quadrant + 1) & 2) << 62;
    s = reinterpret_cast<D>(reinterpret_cast<I>(select(swap, cp, sp)) ^ sin_sign);
    c = reinterpret_cast<D>(reinterpret_cast<I>(select(swap, sp, cp)) ^ cos_sign);
  }
};

// The cells in raster order, N at a time: `body(x', y', j, at, lanes)` with lanes < N only in
// the last vector (its other lanes hold cells past the grid, to be ignored). Row and column
// of cell j come from j in double: r = floor((j + 0.5) / wm), exact because (j + 0.5) / wm
// is at least 0.5 / wm away from an integer, far more than the rounding; q = j - r wm.
template <int N, class Body>
inline void for_each_vector(const RingJob& job, const Body& body) {
  using V = RingVectors<N>;
  using D = typename V::D;
  constexpr double kRound = 0x1.8p52;  // x + kRound - kRound: x rounded to an integer
  const D iota = V::iota();
  const double wm = static_cast<double>(job.wm), inv_wm = 1.0 / wm;
  const std::int64_t n = job.hm * job.wm;
  for (std::int64_t at = 0; at < n; at += N) {
    const D j = iota + static_cast<double>(at);
    const D rows = (j + 0.5) * inv_wm;
    D r = (rows + kRound) - kRound;
    r = V::select(r > rows, r - 1.0, r);  // floor
    const D q = j - r * wm;
    body(q - job.cx, r - job.cy, j, at, static_cast<int>(n - at < N ? n - at : N));
  }
}

template <int N>
void ring_vector(RingJob& job) {
  using V = RingVectors<N>;
  using D = typename V::D;
  constexpr double kTwoPi = 6.283185307179586476925286766559005768;
  constexpr double kInvSqrt2 = 0.70710678118654752440, kInvSqrt6 = 0.40824829046386301637;
  const double inf = __builtin_inf();
  // Pass 1: polar angles into t. A centred grid is symmetric under q -> wm-1-q (x' -> -x') and
  // r -> hm-1-r (y' -> -y'): as circle_ring does, one quadrant's atan2 gives all four cells
  // (pi - a, -a, a - pi, the axis cells once), a quarter of the work.
  double* const pt = job.t;
  const double kPi = 3.141592653589793238462643383279502884;
  if (job.centred) {
    const D iota = V::iota();
    for (std::int64_t r = job.hm / 2; r < job.hm; ++r) {
      const D y = V::splat(static_cast<double>(r) - job.cy);
      const std::int64_t mr = job.hm - 1 - r;
      for (std::int64_t q0 = job.wm / 2; q0 < job.wm; q0 += N) {
        const D a = V::atan2(y, (iota + static_cast<double>(q0)) - job.cx);
        const std::int64_t lanes = job.wm - q0 < N ? job.wm - q0 : N;
        for (std::int64_t i = 0; i < lanes; ++i) {
          const std::int64_t q = q0 + i, mq = job.wm - 1 - q;
          pt[r * job.wm + q] = a[i];
          if (mq != q) pt[r * job.wm + mq] = kPi - a[i];
          if (mr != r) pt[mr * job.wm + q] = -a[i];
          if (mr != r && mq != q) pt[mr * job.wm + mq] = a[i] - kPi;
        }
      }
    }
  } else {
    for_each_vector<N>(job, [&](D x, D y, D, std::int64_t at, int lanes) {
      const D a = V::atan2(y, x);
      if (lanes == N) __builtin_memcpy(pt + at, &a, sizeof a);
      else for (int i = 0; i < lanes; ++i) pt[at + i] = a[i];
    });
  }
  // ... and their range.
  D lo = V::splat(inf), hi = V::splat(-inf);
  const std::int64_t n = job.hm * job.wm;
  std::int64_t k = 0;
  for (; k + N <= n; k += N) {
    D a;
    __builtin_memcpy(&a, pt + k, sizeof a);
    lo = V::min(lo, a);
    hi = V::max(hi, a);
  }
  for (; k < n; ++k) {
    lo[0] = pt[k] < lo[0] ? pt[k] : lo[0];
    hi[0] = pt[k] > hi[0] ? pt[k] : hi[0];
  }
  double low = inf, high = -inf;
  for (int i = 0; i < N; ++i) {
    low = lo[i] < low ? lo[i] : low;
    high = hi[i] > high ? hi[i] : high;
  }
  const double range = high - low;
  // As circle_ring: multiplying by these instead of dividing per cell.
  const double polar_scale = range > 0 ? kTwoPi / range : 0.0;
  const double raster_step = kTwoPi / static_cast<double>(job.hm * job.wm);
  const double alpha = job.alpha, beta = job.beta;
  // Pass 2: cos and sin of the mixed angle, into h and w (few live registers: no spills).
  double* const ph = job.h;
  double* const pw = job.w;
  for_each_vector<N>(job, [&](D, D, D j, std::int64_t at, int lanes) {
    D polar = V::splat(0.0);  // lanes past the grid: any finite angle
    if (lanes == N) __builtin_memcpy(&polar, pt + at, sizeof polar);
    else for (int i = 0; i < lanes; ++i) polar[i] = pt[at + i];
    const D sa = range > 0 ? (polar - low) * polar_scale : polar;  // step 4
    const D ga = raster_step * j;
    const D theta = alpha * sa + (1.0 - alpha) * ga;
    D sin_theta, cos_theta;
    V::sincos(theta, sin_theta, cos_theta);
    if (lanes == N) {
      __builtin_memcpy(ph + at, &cos_theta, sizeof cos_theta);
      __builtin_memcpy(pw + at, &sin_theta, sizeof sin_theta);
    } else {
      for (int i = 0; i < lanes; ++i) {
        ph[at + i] = cos_theta[i];
        pw[at + i] = sin_theta[i];
      }
    }
  });
  // Pass 3: the point on the ring in the plane, the dff blend, the extremes of each axis.
  const double radius = job.radius;
  D tmin = V::splat(inf), hmin = tmin, wmin = tmin, tmax = V::splat(-inf), hmax = tmax, wmax = tmax;
  for_each_vector<N>(job, [&](D x, D y, D, std::int64_t at, int lanes) {
    D cos_theta = V::splat(0.0), sin_theta = cos_theta;
    if (lanes == N) {
      __builtin_memcpy(&cos_theta, ph + at, sizeof cos_theta);
      __builtin_memcpy(&sin_theta, pw + at, sizeof sin_theta);
    } else {
      for (int i = 0; i < lanes; ++i) {
        cos_theta[i] = ph[at + i];
        sin_theta[i] = pw[at + i];
      }
    }
    const D a = radius * cos_theta, b = radius * sin_theta;
    D px = -a * kInvSqrt2 - b * kInvSqrt6;  // step 5: P = a u + b v
    D py = a * kInvSqrt2 - b * kInvSqrt6;
    D pz = 2.0 * b * kInvSqrt6;
    if (beta > 0) {  // step 6
      px = (1 - beta) * px + beta * (-x * kInvSqrt2 - y * kInvSqrt6);
      py = (1 - beta) * py + beta * (x * kInvSqrt2 - y * kInvSqrt6);
      pz = (1 - beta) * pz + beta * (2.0 * y * kInvSqrt6);
    }
    if (lanes == N) {
      __builtin_memcpy(pt + at, &pz, sizeof pz);
      __builtin_memcpy(ph + at, &py, sizeof py);
      __builtin_memcpy(pw + at, &px, sizeof px);
    } else {
      for (int i = 0; i < lanes; ++i) {
        pt[at + i] = pz[i];
        ph[at + i] = py[i];
        pw[at + i] = px[i];
      }
      for (int i = lanes; i < N; ++i) {  // cells past the grid must not count
        px[i] = px[0];
        py[i] = py[0];
        pz[i] = pz[0];
      }
    }
    tmin = V::min(tmin, pz);
    tmax = V::max(tmax, pz);
    hmin = V::min(hmin, py);
    hmax = V::max(hmax, py);
    wmin = V::min(wmin, px);
    wmax = V::max(wmax, px);
  });
  const D* mins[3] = {&tmin, &hmin, &wmin};
  const D* maxs[3] = {&tmax, &hmax, &wmax};
  for (int a = 0; a < 3; ++a) {
    job.min[a] = inf;
    job.max[a] = -inf;
    for (int i = 0; i < N; ++i) {
      job.min[a] = (*mins[a])[i] < job.min[a] ? (*mins[a])[i] : job.min[a];
      job.max[a] = (*maxs[a])[i] > job.max[a] ? (*maxs[a])[i] : job.max[a];
    }
  }
  job.lowest = job.min[0] < job.min[1] ? job.min[0] : job.min[1];
  job.lowest = job.min[2] < job.lowest ? job.min[2] : job.lowest;
}

}  // namespace
}  // namespace circlerope::detail
