// Circle-RoPE block coordinates (docs/spec.md §3): the ring, its radius, the mixed angle,
// dff blending, the positive shift, video frames, and the cone property that
// makes every text token equidistant from an image.
//
// `spec_ring` below is a second, deliberately naive implementation of docs/spec.md §3
// written from the text of the spec (docs/spec.md) (midpoints taken as (max + min) / 2 over the
// cells, the radius from the largest coordinate, u and v built from their
// definitions), in double.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "circlerope/circle.h"
#include "circlerope/positions.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using namespace circlerope::test;

// Two double implementations of the same formulas differ only by rounding of
// a few trig calls and sums: far below 1e-9 relative to the radius.
constexpr double kDoubleTol = 1e-9;
// Positions are float32: each of anchor + P rounds to 2^-24 of its magnitude;
// distances and sums of three such values stay under 8 * FLT_EPSILON relative
// to the magnitude |c| + R.
constexpr double kFloatTol = 8.0 * FLT_EPSILON;

struct Vec3 {
  double x = 0, y = 0, z = 0;
};
Vec3 operator+(Vec3 a, Vec3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
Vec3 operator*(double k, Vec3 a) { return {k * a.x, k * a.y, k * a.z}; }
Vec3 cross(Vec3 a, Vec3 b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
Vec3 normalized(Vec3 a) { return (1.0 / std::sqrt(a.x * a.x + a.y * a.y + a.z * a.z)) * a; }

// docs/spec.md §3 steps 1-8 for one frame (z = 0), result in output axis order (t, h, w).
std::vector<AxisTriple> spec_ring(int64_t hm, int64_t wm, const CircleConfig& c) {
  const int64_t n = hm * wm;
  std::vector<double> x(static_cast<size_t>(n)), y(static_cast<size_t>(n)), z(static_cast<size_t>(n), 0.0);
  for (int64_t j = 0; j < n; ++j) {  // step 1
    x[static_cast<size_t>(j)] = static_cast<double>(j % wm);
    y[static_cast<size_t>(j)] = static_cast<double>(j / wm);
  }
  if (c.move_to_origin) {  // step 2: subtract each axis's (max + min) / 2
    for (auto* axis : {&x, &y, &z}) {
      const auto [lo, hi] = std::minmax_element(axis->begin(), axis->end());
      const double mid = (*hi + *lo) / 2;
      for (double& v : *axis) v -= mid;
    }
  }
  double radius = c.radius;  // step 3
  if (c.radius_mode == RadiusMode::automatic) {
    double largest = -std::numeric_limits<double>::infinity();
    for (auto* axis : {&x, &y, &z})
      for (double v : *axis) largest = std::max(largest, v);
    radius = c.radius_scale * std::fabs(largest);
  }
  std::vector<double> ts(static_cast<size_t>(n));  // step 4
  for (size_t j = 0; j < ts.size(); ++j) ts[j] = std::atan2(y[j], x[j]);
  const auto [tlo, thi] = std::minmax_element(ts.begin(), ts.end());
  const double lo = *tlo, hi = *thi;
  const Vec3 nrm = normalized({1, 1, 1});  // step 5
  const Vec3 u = normalized({-1, 1, 0});
  const Vec3 v = cross(nrm, u);
  std::vector<Vec3> p(static_cast<size_t>(n));
  for (size_t j = 0; j < p.size(); ++j) {
    const double sa = hi - lo > 0 ? (ts[j] - lo) / (hi - lo) * 2 * std::numbers::pi : ts[j];
    const double ga = 2 * std::numbers::pi * static_cast<double>(j) / static_cast<double>(n);
    const double theta = c.alpha * sa + (1 - c.alpha) * ga;
    p[j] = radius * std::cos(theta) * u + radius * std::sin(theta) * v;
    const Vec3 g = x[j] * u + y[j] * v;  // step 6
    p[j] = (1 - c.dff_rate) * p[j] + c.dff_rate * g;
  }
  if (c.move_to_positive != PositiveShift::none) {  // step 7
    double lowest = std::numeric_limits<double>::infinity();
    for (const Vec3& q : p) lowest = std::min({lowest, q.x, q.y, q.z});
    const double shift =
        std::fabs(lowest) + (c.move_to_positive == PositiveShift::offset ? c.positive_offset : 0.0);
    for (Vec3& q : p) q = q + Vec3{shift, shift, shift};
  }
  std::vector<AxisTriple> out;  // step 8: t <- z, h <- y, w <- x
  for (const Vec3& q : p) out.push_back({q.z, q.y, q.x});
  return out;
}

double spec_radius(int64_t hm, int64_t wm, const CircleConfig& c) {
  if (c.radius_mode == RadiusMode::fixed) return c.radius;
  double largest = 0;  // z' = 0 is one of the coordinates
  for (int64_t r = 0; r < hm; ++r)
    for (int64_t q = 0; q < wm; ++q) {
      const double xs = c.move_to_origin ? q - (wm - 1) / 2.0 : q;
      const double ys = c.move_to_origin ? r - (hm - 1) / 2.0 : r;
      largest = std::max({largest, xs, ys});
    }
  return c.radius_scale * largest;
}

CircleConfig random_config(std::mt19937& rng, bool allow_dff, bool allow_shift) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  CircleConfig c;
  const double mode = unit(rng);
  c.radius_mode = mode < 0.5 ? RadiusMode::fixed : RadiusMode::automatic;
  c.radius = 0.25 + 30 * unit(rng);
  c.radius_scale = mode < 0.75 ? 1.0 : 0.1 + 4 * unit(rng);  // "auto" or "auto-k"
  const double a = unit(rng);
  c.alpha = a < 0.1 ? 0.0 : a < 0.2 ? 1.0 : unit(rng);
  c.move_to_origin = unit(rng) < 0.5;
  c.dff_rate = allow_dff && unit(rng) < 0.5 ? unit(rng) : 0.0;
  if (allow_shift) {
    const double s = unit(rng);
    c.move_to_positive = s < 0.33 ? PositiveShift::automatic
                         : s < 0.66 ? PositiveShift::offset
                                    : PositiveShift::none;
    c.positive_offset = -5 + 10 * unit(rng);
  }
  return c;
}

double norm3(double t, double h, double w) { return std::sqrt(t * t + h * h + w * w); }

// ----------------------------------------------------------------- ring ---

TEST(Circle, DefaultsArePapersRecommendedSetting) {
  const CircleConfig c;
  EXPECT_EQ(c.radius_mode, RadiusMode::fixed);
  EXPECT_EQ(c.radius, 10.0);
  EXPECT_EQ(c.alpha, 0.5);
  EXPECT_TRUE(c.move_to_origin);
  EXPECT_EQ(c.dff_rate, 0.0);
  EXPECT_EQ(c.move_to_positive, PositiveShift::none);
  EXPECT_EQ(Geometry{}.scheme, Scheme::circle);
}

TEST(Circle, RingMatchesAnIndependentReadingOfTheSpec) {
  std::mt19937 rng(31337);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t hm = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    const int64_t wm = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    const CircleConfig c = random_config(rng, true, true);
    const std::vector<AxisTriple> got = circle_ring(hm, wm, c);
    const std::vector<AxisTriple> want = spec_ring(hm, wm, c);
    ASSERT_EQ(got.size(), want.size());
    const double scale = 1 + spec_radius(hm, wm, c) + static_cast<double>(hm + wm) +
                         std::fabs(c.positive_offset);
    for (size_t j = 0; j < got.size(); ++j) {
      ASSERT_NEAR(got[j].t, want[j].t, kDoubleTol * scale) << hm << "x" << wm << " cell " << j;
      ASSERT_NEAR(got[j].h, want[j].h, kDoubleTol * scale) << hm << "x" << wm << " cell " << j;
      ASSERT_NEAR(got[j].w, want[j].w, kDoubleTol * scale) << hm << "x" << wm << " cell " << j;
    }
    EXPECT_DOUBLE_EQ(circle_radius(hm, wm, c), spec_radius(hm, wm, c));
  }
}

TEST(Circle, HandWorkedOneByTwoGrid) {
  // 1x2, R = 10, alpha 0.5, move_to_origin: x' = -0.5, 0.5, y' = 0.
  // theta_s = pi, 0 -> theta_SA = 2pi, 0; theta_GA = 0, pi; theta = pi, pi/2.
  // cell 0: (a, b) = (-10, 0): P = -10 u = (10/sqrt2, -10/sqrt2, 0)  (x, y, z)
  // cell 1: (a, b) = (0, 10):  P = 10 v = (-10/sqrt6, -10/sqrt6, 20/sqrt6)
  const std::vector<AxisTriple> p = circle_ring(1, 2, CircleConfig{});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_NEAR(p[0].t, 0.0, kDoubleTol);
  EXPECT_NEAR(p[0].h, -7.0710678118654752, kDoubleTol * 10);
  EXPECT_NEAR(p[0].w, 7.0710678118654752, kDoubleTol * 10);
  EXPECT_NEAR(p[1].t, 8.1649658092772603, kDoubleTol * 10);
  EXPECT_NEAR(p[1].h, -4.0824829046386302, kDoubleTol * 10);
  EXPECT_NEAR(p[1].w, -4.0824829046386302, kDoubleTol * 10);
}

TEST(Circle, SingleCellGrid) {
  // 1x1: theta_s = atan2(0, 0) = 0, no angular range -> theta_SA = 0, theta_GA = 0:
  // (a, b) = (R, 0) and P = R u = (-R/sqrt2, R/sqrt2, 0).
  for (const bool origin : {true, false}) {
    CircleConfig c;
    c.move_to_origin = origin;
    c.radius = 3;
    const std::vector<AxisTriple> p = circle_ring(1, 1, c);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_NEAR(p[0].t, 0.0, kDoubleTol);
    EXPECT_NEAR(p[0].h, 3 / std::sqrt(2.0), kDoubleTol);
    EXPECT_NEAR(p[0].w, -3 / std::sqrt(2.0), kDoubleTol);
    // "auto": the largest coordinate of a single cell is 0, so R = 0.
    c.radius_mode = RadiusMode::automatic;
    EXPECT_EQ(circle_radius(1, 1, c), 0.0);
    for (const AxisTriple& q : circle_ring(1, 1, c)) {
      EXPECT_EQ(q.t, 0.0);
      EXPECT_EQ(std::fabs(q.h), 0.0);
      EXPECT_EQ(std::fabs(q.w), 0.0);
    }
  }
  // Through the whole pipeline: S [1x1] T under circle, radius 10.
  const std::vector<int64_t> ids = {kStart, kImg, 5};
  const std::vector<GridTHW> images = {{1, 2, 2}};
  const Positions p = rope_index({ids, 1, 3, {}, images, {}, {}}, VisionConfig{}, Geometry{});
  EXPECT_FLOAT_EQ(p.at(0, 0, 1), 1.0f);
  EXPECT_FLOAT_EQ(p.at(1, 0, 1), static_cast<float>(1 + 10 / std::sqrt(2.0)));
  EXPECT_FLOAT_EQ(p.at(2, 0, 1), static_cast<float>(1 - 10 / std::sqrt(2.0)));
  // next = max(1 + 7.07...) + 1, rounded to float32 after the chunk
  const float next = static_cast<float>(1 + 10 / std::sqrt(2.0)) + 1.0f;
  EXPECT_FLOAT_EQ(p.at(0, 0, 2), next);
  EXPECT_FLOAT_EQ(p.rope_deltas[0], next + 1.0f - 3.0f);
}

TEST(Circle, AutoRadiusIsTheLargestCoordinateValueNotANorm) {
  CircleConfig c;
  c.radius_mode = RadiusMode::automatic;
  c.move_to_origin = false;
  // 3 rows x 5 columns: x in 0..4, y in 0..2 -> max 4 (the L2 norm of (4, 2) would be 4.47)
  EXPECT_DOUBLE_EQ(circle_radius(3, 5, c), 4.0);
  EXPECT_DOUBLE_EQ(circle_radius(5, 3, c), 4.0);
  c.move_to_origin = true;
  // x' in -2..2, y' in -1..1 -> 2 (norm would be 2.236)
  EXPECT_DOUBLE_EQ(circle_radius(3, 5, c), 2.0);
  EXPECT_DOUBLE_EQ(circle_radius(7, 3, c), 3.0);
  EXPECT_DOUBLE_EQ(circle_radius(2, 2, c), 0.5);
  EXPECT_DOUBLE_EQ(circle_radius(1, 4, c), 1.5);
  c.radius_scale = 2.5;  // "auto-2.5"
  EXPECT_DOUBLE_EQ(circle_radius(3, 5, c), 5.0);
  c.move_to_origin = false;
  EXPECT_DOUBLE_EQ(circle_radius(3, 5, c), 10.0);
  // A fixed radius is used as is, whatever the grid.
  CircleConfig f;
  f.radius = 7.25;
  EXPECT_EQ(circle_radius(12, 1, f), 7.25);
  // The ring really has that radius.
  c.radius_scale = 1;
  c.move_to_origin = true;
  for (const AxisTriple& p : circle_ring(3, 5, c)) EXPECT_NEAR(norm3(p.t, p.h, p.w), 2.0, kDoubleTol);
}

TEST(Circle, AlphaOneCanCollideDistinctCellsAndStillComputes) {
  // 3x3 centred: the centre cell (1,1) has atan2(0, 0) = 0 and the cell (1,2)
  // has atan2(0, 1) = 0: with alpha = 1 only the polar angle counts.
  CircleConfig c;
  c.alpha = 1.0;
  std::vector<AxisTriple> p;
  ASSERT_NO_THROW(p = circle_ring(3, 3, c));
  EXPECT_DOUBLE_EQ(p[4].t, p[5].t);
  EXPECT_DOUBLE_EQ(p[4].h, p[5].h);
  EXPECT_DOUBLE_EQ(p[4].w, p[5].w);
  // ... and the full angular range maps min and max polar angle to the same
  // point too (theta_SA = 0 and 2 pi).
  const std::vector<AxisTriple> q = circle_ring(2, 2, c);
  // 2x2 centred: angles -3pi/4 (cell 0), -pi/4 (1), 3pi/4 (2), pi/4 (3): min is
  // cell 0 (-> 0) and max cell 2 (-> 2 pi): the same point.
  EXPECT_NEAR(q[0].t, q[2].t, kDoubleTol * 10);
  EXPECT_NEAR(q[0].h, q[2].h, kDoubleTol * 10);
  EXPECT_NEAR(q[0].w, q[2].w, kDoubleTol * 10);
  // Through rope_index it is no error either.
  const std::vector<int64_t> ids = {kStart, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg, kImg};
  const std::vector<GridTHW> images = {{1, 6, 6}};
  EXPECT_NO_THROW(rope_index({ids, 1, 10, {}, images, {}, {}}, VisionConfig{}, {Scheme::circle, c}));
  // alpha = 0 never collides: raster angles 2 pi j / N are distinct.
  c.alpha = 0;
  const std::vector<AxisTriple> r = circle_ring(3, 3, c);
  for (size_t i = 0; i < r.size(); ++i)
    for (size_t j = i + 1; j < r.size(); ++j)
      EXPECT_GT(norm3(r[i].t - r[j].t, r[i].h - r[j].h, r[i].w - r[j].w), 1e-3) << i << " " << j;
}

TEST(Circle, DffRateOneIsTheRotatedGrid) {
  for (const bool origin : {true, false}) {
    CircleConfig c;
    c.dff_rate = 1.0;
    c.move_to_origin = origin;
    const int64_t hm = 3, wm = 4;
    const std::vector<AxisTriple> p = circle_ring(hm, wm, c);
    for (int64_t j = 0; j < hm * wm; ++j) {
      const double x = static_cast<double>(j % wm) - (origin ? 1.5 : 0.0);
      const double y = static_cast<double>(j / wm) - (origin ? 1.0 : 0.0);
      const AxisTriple& q = p[static_cast<size_t>(j)];
      // G = x u + y v, u = (-1, 1, 0)/sqrt2, v = (-1, -1, 2)/sqrt6 (in x, y, z)
      EXPECT_NEAR(q.w, -x / std::sqrt(2.0) - y / std::sqrt(6.0), kDoubleTol);
      EXPECT_NEAR(q.h, x / std::sqrt(2.0) - y / std::sqrt(6.0), kDoubleTol);
      EXPECT_NEAR(q.t, 2 * y / std::sqrt(6.0), kDoubleTol);
      // a rotation: lengths are kept
      EXPECT_NEAR(norm3(q.t, q.h, q.w), std::hypot(x, y), kDoubleTol);
    }
  }
}

TEST(Circle, MoveToPositiveShiftsTheMinimumToTheOffset) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t hm = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    const int64_t wm = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    CircleConfig c = random_config(rng, true, false);
    const std::vector<AxisTriple> plain = circle_ring(hm, wm, c);
    // Every P lies in the plane orthogonal to (1,1,1), so its components sum to
    // 0 and its minimum is <= 0: |min| = -min, and "the absolute value even when
    // the minimum is positive" (docs/spec.md §3 step 7) cannot arise from steps 1-6.
    double lowest = std::numeric_limits<double>::infinity();
    for (const AxisTriple& q : plain) {
      EXPECT_NEAR(q.t + q.h + q.w, 0.0, kDoubleTol * (1 + c.radius + hm + wm));
      lowest = std::min({lowest, q.t, q.h, q.w});
    }
    EXPECT_LE(lowest, kDoubleTol * (1 + c.radius + hm + wm));
    for (const double offset : {0.0, 2.5, -1.0, 1e-3 + 10 * unit(rng)}) {
      CircleConfig s = c;
      s.move_to_positive = offset == 0.0 ? PositiveShift::automatic : PositiveShift::offset;
      s.positive_offset = offset;
      const std::vector<AxisTriple> shifted = circle_ring(hm, wm, s);
      double low = std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < shifted.size(); ++j) {
        low = std::min({low, shifted[j].t, shifted[j].h, shifted[j].w});
        // the same shift on every component of every cell
        const double d = shifted[j].t - plain[j].t;
        EXPECT_NEAR(shifted[j].h - plain[j].h, d, kDoubleTol * (1 + c.radius));
        EXPECT_NEAR(shifted[j].w - plain[j].w, d, kDoubleTol * (1 + c.radius));
        EXPECT_NEAR(d, std::fabs(lowest) + offset, kDoubleTol * (1 + c.radius + hm + wm));
      }
      EXPECT_NEAR(low, offset, kDoubleTol * (1 + c.radius + hm + wm)) << hm << "x" << wm;
    }
  }
  // A 1x1 grid under "auto" radius has every component 0: min = 0, the shift is
  // just the offset (a negative offset moves the block below the anchor).
  CircleConfig z;
  z.radius_mode = RadiusMode::automatic;
  z.move_to_positive = PositiveShift::offset;
  z.positive_offset = -3;
  const std::vector<AxisTriple> one = circle_ring(1, 1, z);
  EXPECT_DOUBLE_EQ(one[0].t, -3);
  EXPECT_DOUBLE_EQ(one[0].h, -3);
  EXPECT_DOUBLE_EQ(one[0].w, -3);
}

TEST(Circle, MoveToPositiveInARowMakesBlockMinimumEqualTheAnchorPlusOffset) {
  // min over the block of (p - c) == offset, measured on rope_index's output.
  for (const double offset : {0.0, 1.5}) {
    CircleConfig c;
    c.move_to_positive = offset == 0.0 ? PositiveShift::automatic : PositiveShift::offset;
    c.positive_offset = offset;
    const std::vector<int64_t> ids = cat({{3, 4}, block(kImg, 12)});
    const std::vector<GridTHW> images = {{1, 6, 8}};
    const Positions p = rope_index({ids, 1, static_cast<int64_t>(ids.size()), {}, images, {}, {}},
                                   VisionConfig{}, {Scheme::circle, c});
    ASSERT_EQ(p.blocks.size(), 1u);
    const double anchor = p.blocks[0].anchor;
    EXPECT_EQ(anchor, 3.0);
    double low = std::numeric_limits<double>::infinity();
    for (int64_t s = 3; s < 15; ++s)
      for (int a = 0; a < 3; ++a) low = std::min(low, static_cast<double>(p.at(a, 0, s)) - anchor);
    EXPECT_NEAR(low, offset, kFloatTol * (anchor + 20));
  }
}

// ------------------------------------------------- cone / equidistance ---

struct RowCase {
  std::vector<int64_t> ids;
  std::vector<GridTHW> images;
  int64_t before = 0, after = 0;  // text tokens around the block (markers included)
};

TEST(Circle, EveryImageTokenIsAtRadiusRInThePlaneAndEveryTextTokenIsEquidistant) {
  std::mt19937 rng(8080);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t hm = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    const int64_t wm = std::uniform_int_distribution<int64_t>(1, 12)(rng);
    const int64_t before = std::uniform_int_distribution<int64_t>(0, 6)(rng);
    const int64_t after = std::uniform_int_distribution<int64_t>(0, 6)(rng);
    const CircleConfig c = random_config(rng, false, false);  // dff 0, no shift
    std::vector<int64_t> ids(static_cast<size_t>(before), 17);
    ids.push_back(kStart);
    ids.insert(ids.end(), static_cast<size_t>(hm * wm), kImg);
    ids.insert(ids.end(), static_cast<size_t>(after), 18);
    const std::vector<GridTHW> images = {{1, 2 * hm, 2 * wm}};
    const int64_t seq = static_cast<int64_t>(ids.size());
    const Positions p = rope_index({ids, 1, seq, {}, images, {}, {}}, VisionConfig{}, {Scheme::circle, c});
    const double anchor = static_cast<double>(before + 1);  // the vision start marker is text
    ASSERT_EQ(p.blocks.size(), 1u);
    ASSERT_EQ(p.blocks[0].anchor, anchor);
    const double radius = spec_radius(hm, wm, c);
    const double scale = anchor + radius + 1;
    const int64_t first = before + 1, last = first + hm * wm;
    for (int64_t s = first; s < last; ++s) {
      const double dt = p.at(0, 0, s) - anchor, dh = p.at(1, 0, s) - anchor, dw = p.at(2, 0, s) - anchor;
      ASSERT_NEAR(norm3(dt, dh, dw), radius, kFloatTol * scale) << hm << "x" << wm << " token " << s;
      ASSERT_NEAR(dt + dh + dw, 0.0, kFloatTol * scale) << hm << "x" << wm << " token " << s;
    }
    // Text before and after: one distance to the whole block (the cone).
    for (int64_t s = 0; s < seq; ++s) {
      if (s >= first && s < last) continue;
      ASSERT_EQ(p.at(0, 0, s), p.at(1, 0, s));
      ASSERT_EQ(p.at(0, 0, s), p.at(2, 0, s));
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (int64_t i = first; i < last; ++i) {
        const double d = norm3(p.at(0, 0, s) - p.at(0, 0, i), p.at(1, 0, s) - p.at(1, 0, i),
                               p.at(2, 0, s) - p.at(2, 0, i));
        lo = std::min(lo, d);
        hi = std::max(hi, d);
      }
      ASSERT_NEAR(hi, lo, kFloatTol * (scale + static_cast<double>(seq) + radius)) << "text token " << s;
    }
    // The tokens are the spec ring, translated to the anchor.
    const std::vector<AxisTriple> ring = spec_ring(hm, wm, c);
    for (int64_t j = 0; j < hm * wm; ++j) {
      const AxisTriple& q = ring[static_cast<size_t>(j)];
      ASSERT_NEAR(p.at(0, 0, first + j), anchor + q.t, kFloatTol * scale);
      ASSERT_NEAR(p.at(1, 0, first + j), anchor + q.h, kFloatTol * scale);
      ASSERT_NEAR(p.at(2, 0, first + j), anchor + q.w, kFloatTol * scale);
    }
    // Text after the block starts at max(block) + 1 (float32).
    if (after > 0) {
      float high = -std::numeric_limits<float>::infinity();
      for (int64_t i = first; i < last; ++i)
        for (int a = 0; a < 3; ++a) high = std::max(high, p.at(a, 0, i));
      EXPECT_EQ(p.at(0, 0, last), high + 1.0f);
      EXPECT_EQ(p.rope_deltas[0], high + 1.0f + static_cast<float>(after - 1) + 1.0f - static_cast<float>(seq));
    }
  }
}

TEST(Circle, PositiveShiftKeepsTheConeProperty) {
  // A shift along (1,1,1) moves the ring's centre along the text line: every
  // text token is still equidistant from the block.
  CircleConfig c;
  c.move_to_positive = PositiveShift::offset;
  c.positive_offset = 4;
  const std::vector<int64_t> ids = cat({{1, 2}, block(kImg, 20), {3, 4}});
  const std::vector<GridTHW> images = {{1, 8, 10}};
  const Positions p = rope_index({ids, 1, static_cast<int64_t>(ids.size()), {}, images, {}, {}},
                                 VisionConfig{}, {Scheme::circle, c});
  for (int64_t s : {0, 1, 2, 23, 24, 25}) {
    double lo = 1e300, hi = -1e300;
    for (int64_t i = 3; i < 23; ++i) {
      const double d = norm3(p.at(0, 0, s) - p.at(0, 0, i), p.at(1, 0, s) - p.at(1, 0, i),
                             p.at(2, 0, s) - p.at(2, 0, i));
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    EXPECT_NEAR(hi, lo, kFloatTol * 60) << s;
  }
}

// ---------------------------------------------------------------- video ---

TEST(Circle, VideoFramesAreRingsTranslatedAlongTheTextDirection) {
  std::mt19937 rng(606);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t t = std::uniform_int_distribution<int64_t>(1, 5)(rng);
    const int64_t hm = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    const int64_t wm = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    const double seconds = std::uniform_int_distribution<int>(0, 25)(rng) / 10.0;
    const CircleConfig c = random_config(rng, true, true);
    VisionConfig v;
    v.time = trial % 4 == 0 ? TimeMode::index : TimeMode::seconds;
    const std::vector<int64_t> ids = cat({{9}, block(kVid, t * hm * wm)});
    const std::vector<GridTHW> videos = {{t, 2 * hm, 2 * wm}};
    const std::vector<double> secs = {seconds};
    const int64_t seq = static_cast<int64_t>(ids.size());
    const Positions p =
        rope_index({ids, 1, seq, {}, {}, videos, secs}, v, {Scheme::circle, c});
    const double anchor = 2;
    const std::vector<AxisTriple> ring = spec_ring(hm, wm, c);
    const double scale = anchor + 3 * seconds * t + spec_radius(hm, wm, c) + hm + wm + 10;
    double high = -1e300;
    for (int64_t f = 0; f < t; ++f) {
      // tau(f) = trunc(float32(float32(f) * float32(s)) * float32(2)), or f for "index"
      const float scaled = static_cast<float>(f) * static_cast<float>(seconds);
      const double tau = v.time == TimeMode::index
                             ? static_cast<double>(f)
                             : static_cast<double>(static_cast<int64_t>(scaled * 2.0f));
      for (int64_t j = 0; j < hm * wm; ++j) {
        const int64_t s = 2 + f * hm * wm + j;
        const AxisTriple& q = ring[static_cast<size_t>(j)];
        ASSERT_NEAR(p.at(0, 0, s), anchor + tau + q.t, kFloatTol * scale) << "frame " << f << " cell " << j;
        ASSERT_NEAR(p.at(1, 0, s), anchor + tau + q.h, kFloatTol * scale) << "frame " << f << " cell " << j;
        ASSERT_NEAR(p.at(2, 0, s), anchor + tau + q.w, kFloatTol * scale) << "frame " << f << " cell " << j;
        high = std::max({high, anchor + tau + q.t, anchor + tau + q.h, anchor + tau + q.w});
      }
    }
    EXPECT_NEAR(p.at(0, 0, seq - 1), high + 1, kFloatTol * scale);
  }
}

TEST(Circle, BlockCoordinatesAndFrameTimes) {
  const std::vector<int64_t> tau = {0, 3};
  // vanilla: (j, j, j) over the whole block, frame-major
  const std::vector<AxisTriple> v = block_coordinates({Scheme::vanilla, {}}, 2, 1, 2, tau);
  ASSERT_EQ(v.size(), 4u);
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(v[j].t, static_cast<double>(j));
    EXPECT_EQ(v[j].h, static_cast<double>(j));
    EXPECT_EQ(v[j].w, static_cast<double>(j));
  }
  const std::vector<AxisTriple> u = block_coordinates({Scheme::unordered, {}}, 2, 1, 2, tau);
  for (const AxisTriple& q : u) EXPECT_TRUE(q.t == 0 && q.h == 0 && q.w == 0);
  const std::vector<AxisTriple> m = block_coordinates({Scheme::mrope, {}}, 2, 2, 2, tau);
  const std::vector<std::array<double, 3>> want = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                                                   {3, 0, 0}, {3, 0, 1}, {3, 1, 0}, {3, 1, 1}};
  ASSERT_EQ(m.size(), want.size());
  for (size_t j = 0; j < m.size(); ++j) {
    EXPECT_EQ(m[j].t, want[j][0]);
    EXPECT_EQ(m[j].h, want[j][1]);
    EXPECT_EQ(m[j].w, want[j][2]);
  }
  const std::vector<AxisTriple> c = block_coordinates(Geometry{}, 2, 2, 3, tau);
  const std::vector<AxisTriple> ring = spec_ring(2, 3, CircleConfig{});
  for (size_t j = 0; j < c.size(); ++j) {
    const double d = j < 6 ? 0.0 : 3.0;
    EXPECT_NEAR(c[j].t, ring[j % 6].t + d, kDoubleTol * 10);
    EXPECT_NEAR(c[j].h, ring[j % 6].h + d, kDoubleTol * 10);
    EXPECT_NEAR(c[j].w, ring[j % 6].w + d, kDoubleTol * 10);
  }
  EXPECT_THROW(block_coordinates(Geometry{}, 2, 2, 3, std::vector<int64_t>{0}), Error);
  EXPECT_THROW(block_coordinates(Geometry{}, 0, 2, 3, std::vector<int64_t>{}), Error);
  EXPECT_THROW(block_coordinates(Geometry{}, 1, 0, 3, std::vector<int64_t>{0}), Error);
  EXPECT_THROW(circle_ring(0, 3, CircleConfig{}), Error);
  EXPECT_THROW(circle_radius(3, -1, CircleConfig{}), Error);
}

TEST(Circle, NegativePositionsAreAllowed) {
  // docs/spec.md §3: "positions can be negative" - a big ring right after the first token.
  CircleConfig c;
  c.radius = 50;
  const std::vector<int64_t> ids = {kStart, kImg, kImg, kImg, kImg};
  const std::vector<GridTHW> images = {{1, 4, 4}};
  const Positions p = rope_index({ids, 1, 5, {}, images, {}, {}}, VisionConfig{}, {Scheme::circle, c});
  float low = 0;
  for (int64_t s = 1; s < 5; ++s)
    for (int a = 0; a < 3; ++a) low = std::min(low, p.at(a, 0, s));
  EXPECT_LT(low, -10.0f);
}

}  // namespace
