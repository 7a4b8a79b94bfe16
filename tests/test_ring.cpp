// The vectorised positions loops (src/core/positions_simd.h) against their scalar reference:
// the Circle-RoPE ring (double vectors with their own atan2 and sincos, against libm's), the
// token scans and the float32 placement. Each vector path this CPU lacks is SKIPPED with its
// name; the AVX-512 ring also runs under Bochs (tests/avx512_emulator).
//
// The ring's stated bound (positions_simd.h): every float32 position within 1 ulp of the
// scalar path's, almost always equal. Measured here on every golden case and on 1e5 random
// grid cells; the worst figures are printed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../src/core/block.h"
#include "../src/core/positions_simd.h"
#include "circlerope/circle.h"
#include "circlerope/detail/positions_path.h"
#include "circlerope/positions.h"
#include "golden_support.h"
#include "request.h"
#include "test_support.h"

namespace {

using namespace circlerope;
using nlohmann::json;

// Forces a positions path for the scope of a test; back to automatic afterwards.
class ScopedPath {
 public:
  explicit ScopedPath(Isa p) { detail::set_positions_path(p); }
  ~ScopedPath() { detail::set_positions_path(Isa::automatic); }
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;
};

class VectorPath : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!detail::positions_path_available(GetParam()))
      GTEST_SKIP() << "positions path " << to_string(GetParam())
                   << " NOT TESTED: this CPU or OS lacks it (CPUID/XGETBV)";
  }
};

std::string path_name(const testing::TestParamInfo<Isa>& info) { return std::string(to_string(info.param)); }

// |a - b| in units in the last place of float32 at magnitude max(|b|, scale). The scale floor
// (the ring's radius, or 1) matters for positions that are zero up to rounding: both paths
// compute those as differences of values of the radius' size, so they are exact only to
// ~1e-15 R, and counting their ulps at their own magnitude would measure noise.
double ulps(float a, float b, double scale = 1.0) {
  if (a == b) return 0;
  const double m = std::max(std::fabs(static_cast<double>(b)), scale);
  const double ulp = std::ldexp(1.0, std::ilogb(m) - 23);
  return std::fabs(static_cast<double>(a) - static_cast<double>(b)) / ulp;
}

// ---- the ring -------------------------------------------------------------------------

// A random configuration: every radius mode, alpha at and between its ends, centred or not,
// dff and both kinds of positive shift.
CircleConfig random_circle(std::mt19937_64& rng) {
  CircleConfig c;
  switch (rng() % 3) {
    case 0: c.radius_mode = RadiusMode::fixed; c.radius = std::uniform_real_distribution<double>(0.01, 200)(rng); break;
    case 1: c.radius_mode = RadiusMode::automatic; break;
    default: c.radius_mode = RadiusMode::automatic; c.radius_scale = std::uniform_real_distribution<double>(0.1, 5)(rng);
  }
  const double alphas[] = {0.0, 1.0, 0.5, std::uniform_real_distribution<double>(0, 1)(rng)};
  c.alpha = alphas[rng() % 4];
  c.move_to_origin = rng() % 4 != 0;
  c.dff_rate = rng() % 3 == 0 ? std::uniform_real_distribution<double>(0, 1)(rng) : 0.0;
  switch (rng() % 3) {
    case 0: c.move_to_positive = PositiveShift::none; break;
    case 1: c.move_to_positive = PositiveShift::automatic; break;
    default: c.move_to_positive = PositiveShift::offset; c.positive_offset = std::uniform_real_distribution<double>(-5, 50)(rng);
  }
  return c;
}

struct RingComparison {
  std::int64_t cells = 0, values = 0, differ = 0, visible = 0;  // any bit; >= half an ulp at scale
  double worst_ulps = 0;
  double worst_relative = 0;  // |vector - scalar| over max(radius, |value|), in double
};

// One frame on the scalar path and on `path`: the doubles, and the float32 positions they give
// at a few anchors (the library adds the anchor in double and rounds once).
void compare_frame(std::int64_t hm, std::int64_t wm, const CircleConfig& config, Isa path,
                   std::mt19937_64& rng, RingComparison& out) {
  const Geometry g{Scheme::circle, config};
  detail::FrameCoordinates scalar, vector;
  {
    ScopedPath p(Isa::portable);
    scalar = detail::frame_coordinates(g, hm, wm);
  }
  {
    ScopedPath p(path);
    vector = detail::frame_coordinates(g, hm, wm);
  }
  ASSERT_EQ(scalar.cells(), vector.cells());
  const double scale = std::max(circle_radius(hm, wm, config), 1.0);
  const double anchors[] = {0.0, std::uniform_real_distribution<double>(0, 64)(rng),
                            std::floor(std::uniform_real_distribution<double>(0, 100000)(rng))};
  const std::vector<double>* axes[2][3] = {{&scalar.t, &scalar.h, &scalar.w}, {&vector.t, &vector.h, &vector.w}};
  for (int a = 0; a < 3; ++a)
    for (std::size_t j = 0; j < scalar.cells(); ++j) {
      const double s = (*axes[0][a])[j], v = (*axes[1][a])[j];
      out.worst_relative = std::max(out.worst_relative, std::fabs(v - s) / std::max(scale, std::fabs(s)));
      for (double anchor : anchors) {
        const double d = ulps(static_cast<float>(anchor + v), static_cast<float>(anchor + s), scale);
        ++out.values;
        out.differ += d != 0;
        out.visible += d >= 0.5;
        out.worst_ulps = std::max(out.worst_ulps, d);
      }
    }
  // The extremes the placement reads (block ranges, next position): exactly the data's.
  EXPECT_EQ(vector.min.t, *std::min_element(vector.t.begin(), vector.t.end()));
  EXPECT_EQ(vector.max.t, *std::max_element(vector.t.begin(), vector.t.end()));
  EXPECT_EQ(vector.min.h, *std::min_element(vector.h.begin(), vector.h.end()));
  EXPECT_EQ(vector.max.h, *std::max_element(vector.h.begin(), vector.h.end()));
  EXPECT_EQ(vector.min.w, *std::min_element(vector.w.begin(), vector.w.end()));
  EXPECT_EQ(vector.max.w, *std::max_element(vector.w.begin(), vector.w.end()));
  out.cells += static_cast<std::int64_t>(scalar.cells());
}

// The stated bound: 1 float32 ulp (at the magnitude of the value or of the radius, whichever is
// larger); in double, far below what float32 could show.
constexpr double kMaxUlps = 1;
constexpr double kMaxRelative = 1e-13;

TEST_P(VectorPath, RingMatchesTheScalarReferenceOn100kRandomCells) {
  std::mt19937_64 rng(0x21C1E);
  RingComparison r;
  while (r.cells < 100000) {
    // Mostly model-sized grids, some long and thin, some single rows or columns.
    const std::int64_t hm = 1 + static_cast<std::int64_t>(rng() % (rng() % 4 ? 40 : 120));
    const std::int64_t wm = 1 + static_cast<std::int64_t>(rng() % (rng() % 4 ? 40 : 120));
    compare_frame(hm, wm, random_circle(rng), GetParam(), rng, r);
    if (HasFatalFailure()) return;
  }
  std::printf("ring, %s vs portable: %lld cells, %lld float32 positions, %lld differ in some bit, %lld by half "
              "an ulp or more (worst %.3g ulp at max(|value|, radius)); worst double difference %.3g of "
              "max(radius, |value|)\n",
              std::string(to_string(GetParam())).c_str(), static_cast<long long>(r.cells), static_cast<long long>(r.values),
              static_cast<long long>(r.differ), static_cast<long long>(r.visible), r.worst_ulps, r.worst_relative);
  EXPECT_LE(r.worst_ulps, kMaxUlps);
  EXPECT_LE(r.worst_relative, kMaxRelative);
  EXPECT_LE(r.visible, r.values / 10000) << "near-ties only";
}

// Every golden case through the whole library on both paths: the float32 positions agree within
// the bound, and both are within the reference's contract.
TEST_P(VectorPath, GoldenCasesAgreeWithTheScalarPath) {
  std::int64_t values = 0, differ = 0;
  double worst_ulps = 0, worst_golden = 0;
  for (const json& c : test::golden_cases()) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto request = cli::parse_request(c["request"]);
    Positions scalar, vector;
    {
      ScopedPath p(Isa::portable);
      scalar = rope_index(request.input(), request.vision, request.geometry);
    }
    {
      ScopedPath p(GetParam());
      vector = rope_index(request.input(), request.vision, request.geometry);
    }
    ASSERT_EQ(scalar.position_ids.size(), vector.position_ids.size());
    for (std::size_t i = 0; i < scalar.position_ids.size(); ++i) {
      const double d = ulps(vector.position_ids[i], scalar.position_ids[i]);
      ++values;
      differ += d != 0;
      worst_ulps = std::max(worst_ulps, d);
    }
    EXPECT_EQ(scalar.rope_deltas, vector.rope_deltas);
    const json& expected = c["expected"]["position_ids"];
    for (int axis = 0; axis < 3; ++axis)
      for (std::int64_t b = 0; b < vector.batch; ++b)
        for (std::int64_t s = 0; s < vector.seq_len; ++s) {
          const double e = expected[axis][b][s].get<double>();
          EXPECT_PRED2(test::golden_close, e, vector.at(axis, b, s));
          worst_golden = std::max(worst_golden, std::fabs(vector.at(axis, b, s) - e) / std::max(1.0, std::fabs(e)));
        }
  }
  std::printf("golden cases, %s vs portable: %lld positions, %lld differ (worst %.3g ulp); %s vs reference: "
              "worst %.3g relative\n",
              std::string(to_string(GetParam())).c_str(), static_cast<long long>(values), static_cast<long long>(differ),
              worst_ulps, std::string(to_string(GetParam())).c_str(), worst_golden);
  EXPECT_LE(worst_ulps, kMaxUlps);
  EXPECT_LE(worst_golden, 2e-6);  // the contract of Golden.DeviationIsFloat32RoundingOnly
}

// ---- the other loops: exact, so equal bit for bit ---------------------------------------

TEST_P(VectorPath, ScansAndPlacementEqualTheScalarLoops) {
  detail::PositionsKernels scalar, vector;
  {
    ScopedPath p(Isa::portable);
    scalar = detail::positions_kernels();
  }
  {
    ScopedPath p(GetParam());
    vector = detail::positions_kernels();
  }
  std::mt19937_64 rng(0x5CA9);
  const std::int64_t lowest = 151652, span = 4;
  for (int round = 0; round < 2000; ++round) {
    const auto n = static_cast<std::int64_t>(rng() % 70);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    const std::int64_t value = lowest + static_cast<std::int64_t>(rng() % 5);
    for (auto& id : ids) {
      switch (rng() % 8) {  // around both ends of the range, wrapping negatives, huge ids
        case 0: id = lowest - 1 - static_cast<std::int64_t>(rng() % 3); break;
        case 1: id = lowest + span + 1 + static_cast<std::int64_t>(rng() % 3); break;
        case 2: id = lowest + static_cast<std::int64_t>(rng() % 5); break;
        case 3: id = -static_cast<std::int64_t>(rng() % 1000); break;
        case 4: id = std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(rng() % 3); break;
        default: id = rng() % 4 ? value : static_cast<std::int64_t>(rng() % 200000);
      }
    }
    for (std::int64_t from = 0; from <= n; ++from) {
      ASSERT_EQ(vector.scan(ids.data(), from, n, lowest, span), scalar.scan(ids.data(), from, n, lowest, span))
          << "n " << n << " from " << from;
      ASSERT_EQ(vector.run_end(ids.data(), from, n, value), scalar.run_end(ids.data(), from, n, value))
          << "n " << n << " from " << from;
    }
    // Placement: anchors of every size class (float32 values, as `next` always is).
    std::vector<double> cells(static_cast<std::size_t>(n));
    for (double& c : cells) c = std::uniform_real_distribution<double>(-300, 300)(rng);
    const double base = static_cast<float>(std::ldexp(std::uniform_real_distribution<double>(0, 1)(rng), static_cast<int>(rng() % 40) - 10));
    std::vector<float> a(static_cast<std::size_t>(3 * n) + 3, -1.0f), b = a;
    scalar.place_cells(cells.data(), base, a.data(), n);
    vector.place_cells(cells.data(), base, b.data(), n);
    ASSERT_EQ(a, b) << "place_cells n " << n;
    scalar.place_text(base, n, a.data(), a.data() + n, a.data() + 2 * n);
    vector.place_text(base, n, b.data(), b.data() + n, b.data() + 2 * n);
    ASSERT_EQ(a, b) << "place_text n " << n << " base " << base;
  }
}

// Whole batches of every scheme but circle use no ring: the paths give the same bits.
TEST_P(VectorPath, NonCircleSchemesGiveIdenticalPositions) {
  std::mt19937_64 rng(0xB47C);
  for (Scheme scheme : {Scheme::mrope, Scheme::vanilla, Scheme::unordered}) {
    for (int round = 0; round < 20; ++round) {
      // Rows of text and images of random sizes, some left-padded.
      test::Batch batch;
      batch.batch = 2;
      std::vector<std::vector<std::int64_t>> rows(2);
      for (auto& row : rows) {
        const int blocks = static_cast<int>(rng() % 3);
        for (int k = 0; k < blocks; ++k) {
          for (int t = 0, n = static_cast<int>(rng() % 40); t < n; ++t) row.push_back(1000 + static_cast<std::int64_t>(rng() % 5000));
          const std::int64_t h = 1 + static_cast<std::int64_t>(rng() % 9), w = 1 + static_cast<std::int64_t>(rng() % 9);
          batch.images.push_back({1, 2 * h, 2 * w});
          const auto block = test::block(test::kImg, h * w);
          row.insert(row.end(), block.begin(), block.end());
        }
        for (int t = 0, n = static_cast<int>(1 + rng() % 30); t < n; ++t) row.push_back(7);
      }
      batch.seq = static_cast<std::int64_t>(std::max(rows[0].size(), rows[1].size()));
      batch.mask.assign(static_cast<std::size_t>(2 * batch.seq), 1);
      for (int r = 0; r < 2; ++r) {
        const auto pad = static_cast<std::size_t>(batch.seq) - rows[static_cast<std::size_t>(r)].size();
        for (std::size_t i = 0; i < pad; ++i) {
          batch.ids.push_back(0);
          batch.mask[static_cast<std::size_t>(r * batch.seq) + i] = 0;
        }
        batch.ids.insert(batch.ids.end(), rows[static_cast<std::size_t>(r)].begin(), rows[static_cast<std::size_t>(r)].end());
      }
      Positions a, b;
      {
        ScopedPath p(Isa::portable);
        a = rope_index(batch.input(), VisionConfig{}, {scheme, {}});
      }
      {
        ScopedPath p(GetParam());
        b = rope_index(batch.input(), VisionConfig{}, {scheme, {}});
      }
      ASSERT_EQ(a.position_ids, b.position_ids) << to_string(scheme) << " round " << round;
      ASSERT_EQ(a.rope_deltas, b.rope_deltas);
    }
  }
}

// Regression (fuzz finding F5, tests/fuzz/regressions/c_positions/f5_nan_vector_ring): the
// finiteness check of F4 sat in the scalar circle_ring only, so the vector ring returned NaN
// positions with success for a radius near DBL_MAX under dff_rate 1. Every path must refuse.
TEST_P(VectorPath, RingThatOverflowsDoubleIsRefusedOnEveryPath) {
  CircleConfig c;
  c.radius = 1.3888059911354332e+308;
  c.dff_rate = 1.0;
  c.move_to_origin = true;
  c.move_to_positive = PositiveShift::offset;
  c.positive_offset = -7.5;
  for (auto [hm, wm] : {std::pair<int64_t, int64_t>{2, 1}, {1, 2}, {2, 4}, {3, 5}}) {
    ScopedPath p(GetParam());
    try {
      (void)detail::frame_coordinates({Scheme::circle, c}, hm, wm);
      ADD_FAILURE() << "a " << hm << "x" << wm << " ring near DBL_MAX was accepted on path "
                    << to_string(GetParam());
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr("not finite"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Positions, VectorPath, testing::Values(Isa::avx2, Isa::avx512), path_name);

TEST(PositionsPaths, AutomaticPicksTheBestAvailableAndForcingAMissingOneThrows) {
  const Isa best = detail::positions_path_available(Isa::avx512) ? Isa::avx512
                   : detail::positions_path_available(Isa::avx2) ? Isa::avx2
                                                                 : Isa::portable;
  EXPECT_EQ(detail::positions_path(), best);
  EXPECT_TRUE(detail::positions_path_available(Isa::portable));
  for (Isa p : {Isa::avx2, Isa::avx512, Isa::avx512bf16}) {
    if (detail::positions_path_available(p)) continue;
    try {
      detail::set_positions_path(p);
      ADD_FAILURE() << to_string(p) << " accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr("code path '" + std::string(to_string(p)) + "' is not available: "));
    }
    EXPECT_EQ(detail::positions_path(), best) << "a failed force changes nothing";
  }
}

}  // namespace
