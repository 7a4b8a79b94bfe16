// Block coordinates: the docs/spec.md §2 table and Circle-RoPE (docs/spec.md §3), in double; the
// reference computes in float32, and the tests hold us to it at 1e-4.
#include "circlerope/circle.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "block.h"
#include "circlerope/detail/fail.h"
#include "positions_simd.h"

namespace circlerope {

namespace {

struct Centre {
  double x = 0, y = 0;
};

Centre grid_centre(int64_t hm, int64_t wm, const CircleConfig& config) {
  if (!config.move_to_origin) return {};
  // docs/spec.md §3 step 2: subtract (max + min) / 2 of each axis.
  return {static_cast<double>(wm - 1) / 2.0, static_cast<double>(hm - 1) / 2.0};
}

// Sides first, then the cells against the cap of one call, before either sizes anything.
void check_grid(int64_t hm, int64_t wm) {
  if (hm < 1 || wm < 1) detail::fail("vision grid ", hm, "x", wm, " must have sides >= 1");
  int64_t cells = 0;
  if (__builtin_mul_overflow(hm, wm, &cells) || cells > kMaxTokens)
    detail::fail("vision grid ", hm, "x", wm, " has more than ", kMaxTokens, " cells, the limit of one call");
}

// atan2(y', x') of every cell, raster order (docs/spec.md §3 step 4). A centred grid is
// symmetric under q -> wm-1-q (x' -> -x') and r -> hm-1-r (y' -> -y'), and
// atan2(y, -x) = pi - atan2(y, x), atan2(-y, x) = -atan2(y, x) for y, x > 0
// (and the mirrors of an axis cell are itself), so one quadrant's atan2 gives
// all four: a quarter of the calls, within one ulp of calling it everywhere.
std::vector<double> polar_angles(int64_t hm, int64_t wm, const Centre& c, bool centred) {
  std::vector<double> polar(static_cast<size_t>(hm * wm));
  auto at = [&](int64_t r, int64_t q) -> double& { return polar[static_cast<size_t>(r * wm + q)]; };
  if (!centred) {
    for (int64_t r = 0; r < hm; ++r)
      for (int64_t q = 0; q < wm; ++q)
        at(r, q) = std::atan2(static_cast<double>(r) - c.y, static_cast<double>(q) - c.x);
    return polar;
  }
  constexpr double kPi = std::numbers::pi;
  for (int64_t r = hm / 2; r < hm; ++r)  // y' >= 0
    for (int64_t q = wm / 2; q < wm; ++q) {  // x' >= 0
      const double a = std::atan2(static_cast<double>(r) - c.y, static_cast<double>(q) - c.x);
      const int64_t mr = hm - 1 - r, mq = wm - 1 - q;
      at(r, q) = a;
      if (mq != q) at(r, mq) = kPi - a;
      if (mr != r) at(mr, q) = -a;
      if (mr != r && mq != q) at(mr, mq) = a - kPi;
    }
  return polar;
}

// docs/spec.md §3 step 7: whether to shift, and by how much. An offset of 0 is "no shift at all",
// like the reference's `if move_to_positive:`.
bool positive_shift(const CircleConfig& config, double lowest, double& shift) {
  const bool shift_up = config.move_to_positive == PositiveShift::automatic ||
                        (config.move_to_positive == PositiveShift::offset && config.positive_offset != 0);
  if (!shift_up) return false;
  const double offset = config.move_to_positive == PositiveShift::offset ? config.positive_offset : 0.0;
  // The reference shifts by |min|. P lies in the plane orthogonal to (1,1,1)
  // (its components sum to 0), so min <= 0 and |min| = -min: no special case.
  shift = std::fabs(lowest) + offset;
  return true;
}

// Every value of a ring, not its min/max (NaN passes any comparison): near DBL_MAX the ring
// point a/sqrt2 + b/sqrt6 overflows, and under dff_rate = 1 (1 - beta) * inf is NaN. Both the
// scalar and the vector ring call this (fuzz findings F4 and F5: F5 was the vector path).
void check_ring_cell(int64_t hm, int64_t wm, double radius, const CircleConfig& config, int64_t j, double t,
                     double h, double w) {
  if (std::isfinite(t) && std::isfinite(h) && std::isfinite(w)) return;
  detail::fail("Circle-RoPE ring of a ", hm, "x", wm, " grid with radius ", radius, ", dff_rate ", config.dff_rate,
               " and move_to_positive offset ", config.positive_offset, " is not finite at cell ", j, " (", t, ", ",
               h, ", ", w, "): the radius or the offset is too large");
}

// The ring of one frame by a vector kernel (positions_simd.h) straight into `frame`: the same
// steps as circle_ring, with their own atan2 and sincos, and the extremes of each axis.
void vector_ring(int64_t hm, int64_t wm, const CircleConfig& config,
                 void (*kernel)(detail::RingJob&), detail::FrameCoordinates& frame) {
  const double radius = circle_radius(hm, wm, config);  // validates
  const Centre c = grid_centre(hm, wm, config);
  detail::RingJob job;
  job.hm = hm;
  job.wm = wm;
  job.cx = c.x;
  job.cy = c.y;
  job.centred = config.move_to_origin;
  job.radius = radius;
  job.alpha = config.alpha;
  job.beta = config.dff_rate;
  job.t = frame.t.data();
  job.h = frame.h.data();
  job.w = frame.w.data();
  kernel(job);
  double shift = 0;
  if (positive_shift(config, job.lowest, shift)) {
    for (double& v : frame.t) v += shift;
    for (double& v : frame.h) v += shift;
    for (double& v : frame.w) v += shift;
    for (int a = 0; a < 3; ++a) {  // rounding is monotone: the extremes of the shifted values
      job.min[a] += shift;
      job.max[a] += shift;
    }
  }
  for (size_t j = 0; j < frame.cells(); ++j)
    check_ring_cell(hm, wm, radius, config, static_cast<int64_t>(j), frame.t[j], frame.h[j], frame.w[j]);
  frame.min = {job.min[0], job.min[1], job.min[2]};
  frame.max = {job.max[0], job.max[1], job.max[2]};
}

}  // namespace

double circle_radius(int64_t hm, int64_t wm, const CircleConfig& config) {
  validate(config);
  check_grid(hm, wm);
  if (config.radius_mode == RadiusMode::fixed) return config.radius;
  // docs/spec.md §3 step 3: the largest coordinate *value* over x', y' and z' (= 0 for a
  // frame), then its absolute value; not a norm.
  const Centre c = grid_centre(hm, wm, config);
  const double largest = std::max({static_cast<double>(wm - 1) - c.x,
                                   static_cast<double>(hm - 1) - c.y, 0.0});
  return config.radius_scale * std::fabs(largest);
}

std::vector<AxisTriple> circle_ring(int64_t hm, int64_t wm, const CircleConfig& config) {
  const double radius = circle_radius(hm, wm, config);  // validates
  const Centre c = grid_centre(hm, wm, config);
  const int64_t n = hm * wm;
  constexpr double kTwoPi = 2.0 * std::numbers::pi;

  const std::vector<double> polar = polar_angles(hm, wm, c, config.move_to_origin);
  const auto [lo_it, hi_it] = std::minmax_element(polar.begin(), polar.end());
  const double lo = *lo_it, hi = *hi_it;
  const double range = hi - lo;

  std::vector<AxisTriple> out(static_cast<size_t>(n));
  double lowest = std::numeric_limits<double>::infinity();
  // Multiplying by these instead of dividing per cell changes the last bit at
  // most; the reference computes in float32, 29 bits coarser.
  const double polar_scale = range > 0 ? kTwoPi / range : 0.0;
  const double raster_step = kTwoPi / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) {
    const double sa = range > 0 ? (polar[j] - lo) * polar_scale : polar[j];  // step 4
    const double ga = raster_step * static_cast<double>(j);
    const double theta = config.alpha * sa + (1.0 - config.alpha) * ga;
    double sin_theta = 0, cos_theta = 0;
    ::sincos(theta, &sin_theta, &cos_theta);  // one call for both: ~30% of the ring cost
    const double a = radius * cos_theta, b = radius * sin_theta;
    // step 5: P = a u + b v
    double px = -a * kInvSqrt2 - b * kInvSqrt6;
    double py = a * kInvSqrt2 - b * kInvSqrt6;
    double pz = 2.0 * b * kInvSqrt6;
    if (config.dff_rate > 0) {  // step 6: blend with the un-ringed, rotated grid
      const double x = static_cast<double>(j % wm) - c.x, y = static_cast<double>(j / wm) - c.y;
      const double beta = config.dff_rate;
      px = (1 - beta) * px + beta * (-x * kInvSqrt2 - y * kInvSqrt6);
      py = (1 - beta) * py + beta * (x * kInvSqrt2 - y * kInvSqrt6);
      pz = (1 - beta) * pz + beta * (2.0 * y * kInvSqrt6);
    }
    out[j] = {pz, py, px};  // step 8: t <- z, h <- y, w <- x
    lowest = std::min({lowest, px, py, pz});
  }
  double shift = 0;
  if (positive_shift(config, lowest, shift)) {
    for (AxisTriple& p : out) {
      p.t += shift;
      p.h += shift;
      p.w += shift;
    }
  }
  for (int64_t j = 0; j < n; ++j) check_ring_cell(hm, wm, radius, config, j, out[j].t, out[j].h, out[j].w);
  return out;
}

std::vector<int64_t> frame_times(int64_t t, bool is_video, double second_per_grid_t,
                                 const VisionConfig& vision) {
  if (t > kMaxTokens) detail::fail("a vision block of ", t, " frames has more than ", kMaxTokens, " tokens, the limit of one call");
  std::vector<int64_t> tau(static_cast<size_t>(std::max<int64_t>(t, 0)), 0);
  if (!is_video) return tau;
  if (t > 0 && !detail::frame_time_fits(t, second_per_grid_t, vision))
    detail::fail("frame times of a ", t, "-frame video with second_per_grid_t=", second_per_grid_t,
                 " and tokens_per_second=", vision.tokens_per_second, " reach 2^31");
  for (int64_t f = 0; f < t; ++f) tau[f] = detail::frame_time(f, second_per_grid_t, vision);
  return tau;
}

namespace detail {

FrameCoordinates frame_coordinates(const Geometry& geometry, int64_t hm, int64_t wm) {
  check_grid(hm, wm);
  const auto n = static_cast<size_t>(hm * wm);
  FrameCoordinates frame;
  frame.t.assign(n, 0.0);
  frame.h.assign(n, 0.0);
  frame.w.assign(n, 0.0);
  switch (geometry.scheme) {
    case Scheme::vanilla:
      for (size_t j = 0; j < n; ++j) frame.t[j] = frame.h[j] = frame.w[j] = static_cast<double>(j);
      break;
    case Scheme::unordered: break;
    case Scheme::mrope:
      for (int64_t r = 0; r < hm; ++r)
        for (int64_t q = 0; q < wm; ++q) {
          frame.h[static_cast<size_t>(r * wm + q)] = static_cast<double>(r);
          frame.w[static_cast<size_t>(r * wm + q)] = static_cast<double>(q);
        }
      break;
    case Scheme::circle: {
      if (const auto kernel = positions_kernels().ring) {
        vector_ring(hm, wm, geometry.circle, kernel, frame);
        return frame;  // extremes included
      }
      const std::vector<AxisTriple> ring = circle_ring(hm, wm, geometry.circle);  // reference
      for (size_t j = 0; j < n; ++j) {
        frame.t[j] = ring[j].t;
        frame.h[j] = ring[j].h;
        frame.w[j] = ring[j].w;
      }
      break;
    }
  }
  auto [t_lo, t_hi] = std::minmax_element(frame.t.begin(), frame.t.end());
  auto [h_lo, h_hi] = std::minmax_element(frame.h.begin(), frame.h.end());
  auto [w_lo, w_hi] = std::minmax_element(frame.w.begin(), frame.w.end());
  frame.max = {*t_hi, *h_hi, *w_hi};
  frame.min = {*t_lo, *h_lo, *w_lo};
  return frame;
}

}  // namespace detail

std::vector<AxisTriple> block_coordinates(const Geometry& geometry, int64_t t, int64_t hm,
                                          int64_t wm, std::span<const int64_t> frame_time) {
  if (t < 1) detail::fail("vision block must have t >= 1 frames (got ", t, ")");
  if (static_cast<int64_t>(frame_time.size()) != t)
    detail::fail("block_coordinates: ", frame_time.size(), " frame times for t=", t);
  if (t > kMaxTokens / std::max<int64_t>(hm, 1) / std::max<int64_t>(wm, 1))  // before the frame is sized
    detail::fail("vision block ", t, "x", hm, "x", wm, " has more than ", kMaxTokens, " tokens, the limit of one call");
  const detail::FrameCoordinates frame = detail::frame_coordinates(geometry, hm, wm);
  const int64_t n = hm * wm;
  std::vector<AxisTriple> out;
  out.reserve(static_cast<size_t>(t * n));
  for (int64_t f = 0; f < t; ++f) {
    const AxisTriple o = detail::frame_offset(geometry.scheme, f, n, frame_time[f]);
    for (size_t j = 0; j < frame.cells(); ++j)
      out.push_back({frame.t[j] + o.t, frame.h[j] + o.h, frame.w[j] + o.w});
  }
  return out;
}

}  // namespace circlerope
