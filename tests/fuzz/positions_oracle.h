// An independent second implementation of docs/spec.md §1, 2, 3 (checks only) and 5, written from the
// The spec (docs/spec.md) for the fuzz targets: which inputs are valid, what the positions of the 1-D and M-RoPE
// schemes are, which geometric facts every Circle-RoPE block satisfies, and what PTD and the
// RoPE kernel deviation are. It shares no code with src/core (only the plain input types), so
// an agreement is a real check. Sizes are small here (the targets bound them), so it is
// written for clarity, not speed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "circlerope/positions.h"
#include "circlerope/ptd.h"
#include "fuzz_support.h"

namespace fuzz::oracle {

using circlerope::CircleConfig;
using circlerope::GridTHW;
using circlerope::PositiveShift;
using circlerope::RadiusMode;
using circlerope::Scheme;
using circlerope::TimeMode;
using circlerope::VisionConfig;

struct Block {
  int64_t t = 1, hm = 0, wm = 0;
  bool video = false;
  int64_t grid_index = 0;
  double seconds = 1.0;
  int64_t tokens() const { return t * hm * wm; }
};

// `text` text tokens, then maybe one block (docs/spec.md §1's unit of "after each chunk").
struct Chunk {
  int64_t text = 0;
  bool has_block = false;
  Block block;
};

struct Row {
  std::vector<int64_t> real;  // padded index of each unmasked token, in order
  std::vector<Chunk> chunks;
};

// docs/spec.md §1/2 frame time, in float32 in the reference's order, truncated. NaN when it has no
// value (a second_per_grid_t beyond float32 times frame 0).
inline double frame_time(int64_t f, double seconds, const VisionConfig& v) {
  const float tau = v.time == TimeMode::index
                        ? static_cast<float>(f)
                        : static_cast<float>(f) * static_cast<float>(seconds) * static_cast<float>(v.tokens_per_second);
  if (!(tau < 2147483648.0f)) return std::numeric_limits<double>::quiet_NaN();
  return std::trunc(static_cast<double>(tau));
}

// "" when the vision config is valid, else why not (docs/spec.md §1 errors; tokens_per_second is read
// in float32 like the reference, positions.h).
inline std::string vision_problem(const VisionConfig& v) {
  if (v.spatial_merge_size < 1) return "spatial_merge_size < 1";
  const float tps = static_cast<float>(v.tokens_per_second);
  if (!(std::isfinite(tps) && v.tokens_per_second > 0)) return "tokens_per_second";
  if (v.vision_start_token_id == v.image_token_id || v.vision_start_token_id == v.video_token_id ||
      v.image_token_id == v.video_token_id)
    return "vision token ids not distinct";
  return "";
}

inline std::string circle_problem(const CircleConfig& c) {
  if (c.radius_mode == RadiusMode::fixed && !(std::isfinite(c.radius) && c.radius > 0)) return "radius";
  if (c.radius_mode == RadiusMode::automatic && !(std::isfinite(c.radius_scale) && c.radius_scale > 0))
    return "radius scale";
  if (!(c.alpha >= 0 && c.alpha <= 1)) return "alpha";
  if (!(c.dff_rate >= 0 && c.dff_rate <= 1)) return "dff_rate";
  if (c.move_to_positive == PositiveShift::offset && !std::isfinite(c.positive_offset))
    return "move_to_positive offset";
  return "";
}

// A batch in Qwen's token format, borrowed.
struct Batch {
  int64_t batch = 0, seq = 0;
  const int64_t* ids = nullptr;
  const int64_t* mask = nullptr;  // nullable: all ones
  std::vector<GridTHW> images, videos;
  std::vector<double> seconds;  // empty: 1.0 each
};

// Splits every row into chunks (docs/spec.md §1) and says whether the batch is valid: "" or the
// reason. Documented strictness beyond docs/spec.md §1's list (positions.cpp, docs/spec.md §1.8): an image or
// video token outside a block is an error, and the run of vision tokens after a start must
// have exactly the grid's size; a start not followed by a vision token is text.
inline std::string split(const Batch& in, const VisionConfig& v, std::vector<Row>& rows) {
  rows.clear();
  if (std::string p = vision_problem(v); !p.empty()) return p;
  if (in.batch < 0 || in.seq < 0) return "negative batch or seq_len";
  if (!in.seconds.empty() && in.seconds.size() != in.videos.size()) return "second_per_grid_ts count";
  for (double s : in.seconds)
    if (!(std::isfinite(s) && s >= 0)) return "second_per_grid_ts value";
  size_t images_used = 0, videos_used = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    Row row;
    std::vector<int64_t> ids;
    for (int64_t s = 0; s < in.seq; ++s) {
      const int64_t m = in.mask ? in.mask[b * in.seq + s] : 1;
      if (m != 0 && m != 1) return "mask value";
      if (m == 1) {
        row.real.push_back(s);
        ids.push_back(in.ids[b * in.seq + s]);
      }
    }
    const auto n = static_cast<int64_t>(ids.size());
    int64_t text = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t tok = ids[k];
      const bool vision_token = tok == v.image_token_id || tok == v.video_token_id;
      if (tok == v.vision_start_token_id && k + 1 < n &&
          (ids[k + 1] == v.image_token_id || ids[k + 1] == v.video_token_id)) {
        Chunk c;
        c.text = text + 1;  // the start marker is text
        c.has_block = true;
        Block& blk = c.block;
        blk.video = ids[k + 1] == v.video_token_id;
        size_t& used = blk.video ? videos_used : images_used;
        const std::vector<GridTHW>& grids = blk.video ? in.videos : in.images;
        if (used >= grids.size()) return "more blocks than grids";
        blk.grid_index = static_cast<int64_t>(used);
        const GridTHW g = grids[used++];
        const int64_t m = v.spatial_merge_size;
        if (g.t < 1 || g.h < 1 || g.w < 1) return "grid side < 1";
        if (g.h % m != 0 || g.w % m != 0) return "grid side not divisible by the merge size";
        blk.t = g.t;
        blk.hm = g.h / m;
        blk.wm = g.w / m;
        int64_t cells = 0, tokens = 0;
        if (__builtin_mul_overflow(blk.hm, blk.wm, &cells) || __builtin_mul_overflow(cells, blk.t, &tokens))
          return "grid token count overflows";
        if (blk.video) {
          blk.seconds = in.seconds.empty() ? 1.0 : in.seconds[static_cast<size_t>(blk.grid_index)];
          if (std::isnan(frame_time(blk.t - 1, blk.seconds, v))) return "frame time reaches 2^31";
        }
        int64_t run = 0;
        while (k + 1 + run < n && ids[k + 1 + run] == ids[k + 1]) ++run;
        if (run != tokens) return "vision token run differs from the grid";
        row.chunks.push_back(c);
        text = 0;
        k += tokens;
        continue;
      }
      if (vision_token) return "vision token outside a block";
      ++text;
    }
    if (text > 0) row.chunks.push_back(Chunk{text, false, {}});
    rows.push_back(std::move(row));
  }
  if (images_used != in.images.size() || videos_used != in.videos.size()) return "fewer blocks than grids";
  return "";
}

// The radius of a frame's ring (docs/spec.md §3 step 3).
inline double ring_radius(const CircleConfig& c, int64_t hm, int64_t wm) {
  if (c.radius_mode == RadiusMode::fixed) return c.radius;
  const double div = c.move_to_origin ? 2.0 : 1.0;
  const double largest = std::max({static_cast<double>(wm - 1) / div, static_cast<double>(hm - 1) / div, 0.0});
  return c.radius_scale * largest;
}

// docs/spec.md §3 steps 1-8 for one frame's Hm x Wm cells, in double: offsets from the anchor
// (t, h, w) per cell in raster order, before the frame's tau.
struct Offset {
  double t, h, w;
};
inline std::vector<Offset> ring(const CircleConfig& c, int64_t hm, int64_t wm) {
  const int64_t n = hm * wm;
  const double cx = c.move_to_origin ? static_cast<double>(wm - 1) / 2 : 0.0;
  const double cy = c.move_to_origin ? static_cast<double>(hm - 1) / 2 : 0.0;
  const double radius = ring_radius(c, hm, wm);
  std::vector<double> polar(static_cast<size_t>(n));
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t j = 0; j < n; ++j) {
    const double x = static_cast<double>(j % wm) - cx, y = static_cast<double>(j / wm) - cy;
    polar[static_cast<size_t>(j)] = std::atan2(y, x);
    lo = std::min(lo, polar[static_cast<size_t>(j)]);
    hi = std::max(hi, polar[static_cast<size_t>(j)]);
  }
  const double two_pi = 2 * std::numbers::pi, s2 = std::sqrt(2.0), s6 = std::sqrt(6.0);
  std::vector<Offset> out(static_cast<size_t>(n));
  double lowest = std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const double ps = polar[static_cast<size_t>(j)];
    const double sa = hi - lo > 0 ? (ps - lo) / (hi - lo) * two_pi : ps;
    const double ga = two_pi * static_cast<double>(j) / static_cast<double>(n);
    const double theta = c.alpha * sa + (1 - c.alpha) * ga;
    const double a = radius * std::cos(theta), b = radius * std::sin(theta);
    // P = a u + b v, u = (-1, 1, 0)/sqrt 2, v = (-1, -1, 2)/sqrt 6
    double px = -a / s2 - b / s6, py = a / s2 - b / s6, pz = 2 * b / s6;
    if (c.dff_rate > 0) {
      const double x = static_cast<double>(j % wm) - cx, y = static_cast<double>(j / wm) - cy;
      const double gx = -x / s2 - y / s6, gy = x / s2 - y / s6, gz = 2 * y / s6;
      px = (1 - c.dff_rate) * px + c.dff_rate * gx;
      py = (1 - c.dff_rate) * py + c.dff_rate * gy;
      pz = (1 - c.dff_rate) * pz + c.dff_rate * gz;
    }
    out[static_cast<size_t>(j)] = {pz, py, px};
    lowest = std::min({lowest, px, py, pz});
  }
  const bool shift = c.move_to_positive == PositiveShift::automatic ||
                     (c.move_to_positive == PositiveShift::offset && c.positive_offset != 0);
  if (shift) {
    const double by = std::fabs(lowest) + (c.move_to_positive == PositiveShift::offset ? c.positive_offset : 0.0);
    for (Offset& o : out) {
      o.t += by;
      o.h += by;
      o.w += by;
    }
  }
  return out;
}

// Largest magnitude a block's positions can reach, for deciding whether a block may
// legitimately overflow float32 (the library refuses that).
inline double block_reach(Scheme scheme, const CircleConfig& c, const Block& b, double anchor,
                          const VisionConfig& v) {
  const double tau = b.video ? frame_time(b.t - 1, b.seconds, v) : 0.0;
  double reach = std::fabs(anchor) + tau + static_cast<double>(b.tokens());
  if (scheme == Scheme::circle) {
    const double r = ring_radius(c, b.hm, b.wm);
    const double grid = static_cast<double>(std::max(b.hm, b.wm));
    reach += 2 * r + 2 * grid + (c.move_to_positive == PositiveShift::offset ? std::fabs(c.positive_offset) : 0.0);
  }
  return reach;
}

inline float ulp_f32(double x) {
  const float f = static_cast<float>(std::fabs(x));
  return std::nextafter(f, std::numeric_limits<float>::infinity()) - f;
}

// What a successful call must have produced. `at(axis, b, s)` reads position_ids.
// `token_block`/`blocks` (nullable) are the Positions extras, checked when present.
struct Produced {
  int64_t batch = 0, seq = 0;
  const float* position_ids = nullptr;
  const float* rope_deltas = nullptr;
  const int32_t* token_block = nullptr;
  const std::vector<circlerope::BlockInfo>* blocks = nullptr;
  float at(int axis, int64_t b, int64_t s) const { return position_ids[(axis * batch + b) * seq + s]; }
};

inline const char* name(Scheme s) {
  switch (s) {
    case Scheme::vanilla: return "vanilla";
    case Scheme::unordered: return "unordered";
    case Scheme::mrope: return "mrope";
    case Scheme::circle: return "circle";
  }
  return "?";
}

// Calls finding() at the first check that fails.
inline void check_positions(const std::vector<Row>& rows, const VisionConfig& v, Scheme scheme,
                            const CircleConfig& c, const Produced& p) {
  const char* sn = name(scheme);
  // A successful call returns finite positions (docs/spec.md §1: out of range is an error).
  for (int64_t i = 0; i < 3 * p.batch * p.seq; ++i)
    // (finding F4, regressions/request/f4_nan_ring.json: a ring that overflowed double gave
    // NaN, which a max/min range check passes over)
    FUZZ_CHECK(std::isfinite(p.position_ids[i]), "%s: position_ids[%lld] is %g and the call succeeded", sn,
               (long long)i, p.position_ids[i]);
  for (int64_t b = 0; b < p.batch; ++b)
    FUZZ_CHECK(std::isfinite(p.rope_deltas[b]), "%s: rope_deltas[%lld] is %g and the call succeeded", sn,
               (long long)b, p.rope_deltas[b]);
  size_t block_counter = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const Row& row = rows[static_cast<size_t>(b)];
    // masked tokens: 1.0 everywhere
    std::vector<bool> unmasked(static_cast<size_t>(p.seq), false);
    for (int64_t s : row.real) unmasked[static_cast<size_t>(s)] = true;
    for (int64_t s = 0; s < p.seq; ++s) {
      if (unmasked[static_cast<size_t>(s)]) continue;
      for (int a = 0; a < 3; ++a)
        FUZZ_CHECK(p.at(a, b, s) == 1.0f, "%s: masked token %lld of row %lld has %g on axis %d (docs/spec.md §1: 1.0)",
                   sn, (long long)s, (long long)b, p.at(a, b, s), a);
      if (p.token_block)
        FUZZ_CHECK(p.token_block[b * p.seq + s] == circlerope::kMaskedToken, "%s: token map of masked token", sn);
    }
    // The reference (Qwen2.5-VL get_rope_index): st_idx = llm_pos_ids_list[-1].max() + 1, the
    // last piece appended being the block when there is one (its text before it does not
    // count), and rope_delta = llm_positions.max() + 1 - S over the whole row. docs/spec.md §1 says
    // "max of that chunk", which is the same unless a block lies below its own text (a
    // negative move_to_positive offset).
    float next = 0.0f;
    float row_max = -std::numeric_limits<float>::infinity();
    size_t k = 0;  // index into row.real
    bool any = false;
    for (const Chunk& chunk : row.chunks) {
      float chunk_max = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < chunk.text; ++i, ++k) {
        const int64_t s = row.real[k];
        const auto want = static_cast<float>(static_cast<double>(next) + static_cast<double>(i));
        for (int a = 0; a < 3; ++a)
          FUZZ_CHECK(p.at(a, b, s) == want, "%s: text token %lld of row %lld: axis %d is %.9g, docs/spec.md §1 says %.9g",
                     sn, (long long)s, (long long)b, a, p.at(a, b, s), want);
        if (p.token_block)
          FUZZ_CHECK(p.token_block[b * p.seq + s] == circlerope::kTextToken, "%s: token map of text token %lld",
                     sn, (long long)s);
        chunk_max = std::max(chunk_max, want);
      }
      row_max = std::max(row_max, chunk_max);
      if (chunk.has_block) {
        chunk_max = -std::numeric_limits<float>::infinity();  // st_idx follows the block alone
        const Block& blk = chunk.block;
        const double anchor = static_cast<double>(next) + static_cast<double>(chunk.text);
        const int64_t cells = blk.hm * blk.wm;
        if (p.blocks) {
          FUZZ_CHECK(block_counter < p.blocks->size(), "%s: Positions::blocks misses a block", sn);
          const circlerope::BlockInfo& info = (*p.blocks)[block_counter];
          FUZZ_CHECK(info.row == b && info.begin == row.real[k] && info.t == blk.t && info.hm == blk.hm &&
                         info.wm == blk.wm && info.is_video == blk.video && info.grid_index == blk.grid_index &&
                         info.anchor == anchor,
                     "%s: BlockInfo %zu differs from docs/spec.md §1 (row %lld begin %lld t %lld grid %lldx%lld anchor %.17g)",
                     sn, block_counter, (long long)b, (long long)row.real[k], (long long)blk.t,
                     (long long)blk.hm, (long long)blk.wm, anchor);
        }
        const double radius = scheme == Scheme::circle ? ring_radius(c, blk.hm, blk.wm) : 0.0;
        const double offset = c.move_to_positive == PositiveShift::offset ? c.positive_offset : 0.0;
        const std::vector<Offset> cells_ring = scheme == Scheme::circle ? ring(c, blk.hm, blk.wm) : std::vector<Offset>{};
        for (int64_t f = 0; f < blk.t; ++f) {
          const double tau = blk.video ? frame_time(f, blk.seconds, v) : 0.0;
          const double centre = anchor + tau;
          const double scale = std::fabs(centre) + 4 * radius + std::fabs(offset) + 4.0 * static_cast<double>(std::max(blk.hm, blk.wm));
          const double tol = scale * 0x1p-20 + 1e-300;  // float32 rounding of |positions| <= scale, 8x
          for (int64_t j = 0; j < cells; ++j, ++k) {
            const int64_t s = row.real[k];
            const float pt = p.at(0, b, s), ph = p.at(1, b, s), pw = p.at(2, b, s);
            chunk_max = std::max({chunk_max, pt, ph, pw});
            if (p.token_block)
              FUZZ_CHECK(p.token_block[b * p.seq + s] == static_cast<int32_t>(block_counter),
                         "%s: token map of vision token %lld", sn, (long long)s);
            const int64_t r = j / blk.wm, q = j % blk.wm;
            float wt = 0, wh = 0, ww = 0;
            switch (scheme) {
              case Scheme::vanilla:
                wt = wh = ww = static_cast<float>(anchor + static_cast<double>(f * cells + j));
                break;
              case Scheme::unordered: wt = wh = ww = static_cast<float>(anchor); break;
              case Scheme::mrope:
                wt = static_cast<float>(anchor + tau);
                wh = static_cast<float>(anchor + static_cast<double>(r));
                ww = static_cast<float>(anchor + static_cast<double>(q));
                break;
              case Scheme::circle: break;
            }
            if (scheme != Scheme::circle) {
              // one float32 ulp: the sum's order may differ in the last bit of a double
              FUZZ_CHECK(std::fabs(pt - wt) <= ulp_f32(wt) && std::fabs(ph - wh) <= ulp_f32(wh) &&
                             std::fabs(pw - ww) <= ulp_f32(ww),
                         "%s: vision token %lld of row %lld (frame %lld, cell %lld): (%.9g, %.9g, %.9g), docs/spec.md §2 "
                         "says (%.9g, %.9g, %.9g)",
                         sn, (long long)s, (long long)b, (long long)f, (long long)j, pt, ph, pw, wt, wh, ww);
              continue;
            }
            // Circle-RoPE (docs/spec.md §3): the frame's ring, translated by tau along (1,1,1).
            const Offset& o = cells_ring[static_cast<size_t>(j)];
            const double want[3] = {centre + o.t, centre + o.h, centre + o.w};
            const float got[3] = {pt, ph, pw};
            for (int a = 0; a < 3; ++a)
              FUZZ_CHECK(std::fabs(got[a] - want[a]) <= tol,
                         "circle: vision token %lld of row %lld (frame %lld, cell %lld of %lldx%lld), axis %d: "
                         "%.9g, docs/spec.md §3 says %.9g (tolerance %.3g)",
                         (long long)s, (long long)b, (long long)f, (long long)j, (long long)blk.hm,
                         (long long)blk.wm, a, got[a], want[a], tol);
          }
        }
        ++block_counter;
      }
      if (chunk.text > 0 || chunk.has_block) {
        any = true;
        next = chunk_max + 1.0f;  // float32, like the reference's st_idx
        row_max = std::max(row_max, chunk_max);
      }
    }
    const float want_delta = any ? (row_max + 1.0f) - static_cast<float>(p.seq) : -static_cast<float>(p.seq);
    // (finding F1, regressions/request/f1_delta_below_row_max.json: the delta came from the last
    // chunk's maximum, below the row's when a negative move_to_positive offset puts the last
    // block under earlier tokens)
    FUZZ_CHECK(p.rope_deltas[b] == want_delta, "%s: rope_delta of row %lld is %.9g, docs/spec.md §1 (max of the row + 1 - S) says %.9g", sn,
               (long long)b, p.rope_deltas[b], want_delta);
  }
  if (p.blocks)
    FUZZ_CHECK(block_counter == p.blocks->size(), "%s: Positions::blocks has %zu blocks, docs/spec.md §1 finds %zu", sn,
               p.blocks->size(), block_counter);
}

// docs/spec.md §4 axis of each frequency and inv_freq (same double expression as the spec (docs/spec.md)).
inline std::vector<int> spec_axes(const circlerope::RotaryConfig& r) {
  const int half = r.rotary_dim / 2;
  std::vector<int> axes(static_cast<size_t>(half), 0);
  const int64_t st = r.sections[0], sh = r.sections[1], sw = r.sections[2];
  for (int i = 0; i < half; ++i) {
    switch (r.layout) {
      case circlerope::FrequencyLayout::chunked: axes[static_cast<size_t>(i)] = i < st ? 0 : i < st + sh ? 1 : 2; break;
      case circlerope::FrequencyLayout::interleaved:
        axes[static_cast<size_t>(i)] = (i % 3 == 1 && i < 3 * sh) ? 1 : (i % 3 == 2 && i < 3 * sw) ? 2 : 0;
        break;
      case circlerope::FrequencyLayout::single: break;
    }
  }
  return axes;
}

// docs/spec.md §5 PTD and the RoPE kernel deviation of §5, from the produced positions.
inline void check_metrics(const std::vector<Row>& rows, Scheme scheme, const circlerope::RotaryConfig& rotary,
                          const Produced& p, const circlerope::CouplingMetrics& m) {
  const char* sn = name(scheme);
  const std::vector<int> axes = spec_axes(rotary);
  std::vector<double> inv(axes.size());
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = std::pow(rotary.theta, -2.0 * static_cast<double>(i) / rotary.rotary_dim);
  const bool one_d = scheme == Scheme::vanilla || scheme == Scheme::unordered;
  size_t block_index = 0, reported = 0;
  double sum_ptd = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const Row& row = rows[static_cast<size_t>(b)];
    std::vector<int64_t> text;
    std::vector<std::vector<int64_t>> blocks;
    size_t k = 0;
    for (const Chunk& c : row.chunks) {
      for (int64_t i = 0; i < c.text; ++i) text.push_back(row.real[k++]);
      if (c.has_block) {
        blocks.emplace_back();
        for (int64_t i = 0; i < c.block.tokens(); ++i) blocks.back().push_back(row.real[k++]);
      }
    }
    for (const std::vector<int64_t>& vis : blocks) {
      ++block_index;
      if (text.empty()) continue;
      FUZZ_CHECK(reported < m.blocks.size(), "%s: coupling_metrics misses block %zu", sn, block_index - 1);
      const circlerope::BlockMetrics& got = m.blocks[reported++];
      double ptd = 0, dev = 0, largest = 0, phase = 0;
      std::vector<double> d(vis.size()), kern(vis.size());
      for (int64_t t : text) {
        for (size_t i = 0; i < vis.size(); ++i) {
          double sq = 0, kk = 0;
          for (int a = 0; a < 3; ++a) {
            const double diff = static_cast<double>(p.at(a, b, t)) - p.at(a, b, vis[i]);
            sq += diff * diff;
            largest = std::max(largest, std::fabs(static_cast<double>(p.at(a, b, t))) + std::fabs(p.at(a, b, vis[i])));
          }
          d[i] = one_d ? std::fabs(static_cast<double>(p.at(0, b, t)) - p.at(0, b, vis[i])) : std::sqrt(sq);
          for (size_t f = 0; f < axes.size(); ++f) {
            const double dphi = (static_cast<double>(p.at(axes[f], b, t)) - p.at(axes[f], b, vis[i])) * inv[f];
            kk += std::cos(dphi);
          }
          kern[i] = 2.0 / rotary.rotary_dim * kk;
        }
        auto mad = [](const std::vector<double>& x) {
          double mean = 0;
          for (double e : x) mean += e;
          mean /= static_cast<double>(x.size());
          double s = 0;
          for (double e : x) s += std::fabs(e - mean);
          return s / static_cast<double>(x.size());
        };
        ptd += mad(d);
        dev += mad(kern);
      }
      for (size_t f = 0; f < axes.size(); ++f) phase = std::max(phase, largest * inv[f]);
      ptd /= static_cast<double>(text.size());
      dev /= static_cast<double>(text.size());
      FUZZ_CHECK(got.row == b && got.text_tokens == static_cast<int64_t>(text.size()) &&
                     got.vision_tokens == static_cast<int64_t>(vis.size()),
                 "%s: BlockMetrics of block %zu has row %lld, %lld text and %lld vision tokens; docs/spec.md §5 counts "
                 "row %lld, %zu and %zu",
                 sn, block_index - 1, (long long)got.row, (long long)got.text_tokens,
                 (long long)got.vision_tokens, (long long)b, text.size(), vis.size());
      const double ptd_tol = 1e-9 * (largest + 1);
      FUZZ_CHECK(std::fabs(got.ptd - ptd) <= ptd_tol, "%s: PTD of block %zu is %.17g, docs/spec.md §5 gives %.17g", sn,
                 block_index - 1, got.ptd, ptd);
      // cos(a) cos(b) + sin(a) sin(b) vs cos(a - b): equal up to the phases' rounding.
      if (phase < 0x1p20)
        FUZZ_CHECK(std::fabs(got.rope_kernel_deviation - dev) <= 1e-9 + phase * 0x1p-40,
                   "%s: RoPE kernel deviation of block %zu is %.17g, docs/spec.md §5's formula gives %.17g", sn,
                   block_index - 1, got.rope_kernel_deviation, dev);
      if (scheme == Scheme::unordered)
        FUZZ_CHECK(got.ptd <= ptd_tol, "unordered: PTD %.17g is not 0 (docs/spec.md §5)", got.ptd);
      sum_ptd += got.ptd;
    }
  }
  FUZZ_CHECK(reported == m.blocks.size(), "%s: coupling_metrics reports %zu blocks, docs/spec.md §5 has %zu", sn,
             m.blocks.size(), reported);
  if (reported == 0)
    FUZZ_CHECK(std::isnan(m.ptd), "%s: PTD without any block is %g, ptd.h says NaN", sn, m.ptd);
  else
    FUZZ_CHECK(std::fabs(m.ptd - sum_ptd / static_cast<double>(reported)) <= 1e-9 * (std::fabs(m.ptd) + 1),
               "%s: overall PTD %.17g is not the mean of its blocks %.17g", sn, m.ptd,
               sum_ptd / static_cast<double>(reported));
}

}  // namespace fuzz::oracle
