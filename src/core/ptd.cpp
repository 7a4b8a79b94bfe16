// PTD (docs/spec.md §5) and the RoPE kernel deviation (docs/spec.md §5), per block and per row.
#include "circlerope/ptd.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <limits>

#include "circlerope/detail/fail.h"

namespace circlerope {

namespace {

struct Point {
  double t, h, w;
};

// cos/sin features whose dot product is sum_k cos(dphi_k): K = (2/D) <f_a, f_b>.
void rope_features(const Point& p, const std::vector<int>& axes, const std::vector<double>& inv,
                   double* out) {
  const size_t half = inv.size();
  for (size_t k = 0; k < half; ++k) {
    const double pos = axes[k] == 0 ? p.t : (axes[k] == 1 ? p.h : p.w);
    out[k] = std::cos(pos * inv[k]);
    out[half + k] = std::sin(pos * inv[k]);
  }
}

double mean_abs_deviation(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double dev = 0;
  for (double x : v) dev += std::fabs(x - mean);
  return dev / static_cast<double>(v.size());
}

}  // namespace

// Tokens are at most kMaxTokens (2^24) and rotary_dim at most 1024, so a block's term is
// below 2^58; the sum over up to 2^24 blocks saturates. Blocks come row after row
// (rope_index, layout_positions); the metrics walk them with one cursor, so other orders are
// refused here.
PtdCost ptd_cost(const Positions& pos, const RotaryConfig& rotary) {
  validate(rotary);
  if (pos.batch < 0 || pos.seq_len < 0 || pos.batch > kMaxTokens || pos.seq_len > kMaxTokens ||
      pos.token_block.size() != static_cast<size_t>(pos.batch * pos.seq_len))
    detail::fail("coupling_metrics needs the token map of rope_index/layout_positions");
  const int64_t dim = rotary.rotary_dim;
  PtdCost cost;
  int64_t widest_row = 0, widest_block = 0;
  size_t next = 0;  // the first block of the row
  for (int64_t row = 0; row < pos.batch; ++row) {
    const int32_t* kind = pos.token_block.data() + row * pos.seq_len;
    int64_t text = 0;
    for (int64_t s = 0; s < pos.seq_len; ++s) text += kind[s] == kTextToken;
    for (; next < pos.blocks.size() && pos.blocks[next].row == row; ++next) {
      if (text == 0) continue;
      const int64_t tokens = std::clamp<int64_t>(pos.blocks[next].tokens(), 0, pos.seq_len);
      widest_block = std::max(widest_block, tokens);
      widest_row = std::max(widest_row, text);
      if (__builtin_add_overflow(cost.work, text * tokens * dim, &cost.work))
        cost.work = std::numeric_limits<int64_t>::max();
    }
  }
  if (next != pos.blocks.size())
    detail::fail("coupling_metrics: block ", next, " is out of row order (row ", pos.blocks[next].row,
                 "); use the positions of rope_index/layout_positions");
  // the features (cos and sin of every frequency, doubles) and the point of every text token
  // of a row and every token of a block, and one distance and kernel value per block token
  cost.bytes = (widest_row + widest_block) * (dim * 8 + static_cast<int64_t>(sizeof(Point))) + widest_block * 2 * 8;
  return cost;
}

CouplingMetrics coupling_metrics(const Positions& pos, Scheme scheme, const RotaryConfig& rotary) {
  if (scheme != pos.scheme)
    detail::fail("coupling_metrics: scheme ", to_string(scheme), " is not the scheme ", to_string(pos.scheme),
                 " the positions were made with");
  return coupling_metrics(pos, rotary);
}

CouplingMetrics coupling_metrics(const Positions& pos, const RotaryConfig& rotary) {
  const Scheme scheme = pos.scheme;
  const PtdCost cost = ptd_cost(pos, rotary);  // before anything is allocated
  if (cost.work > kMaxPtdWork)
    detail::fail("PTD of these positions costs ",
                 cost.work == std::numeric_limits<int64_t>::max() ? std::string("more than 2^63")
                                                                   : std::to_string(cost.work),
                 " text x vision x frequency terms (the text tokens of each block's row x the block's tokens x "
                 "rotary_dim ", rotary.rotary_dim, ", summed), more than ", kMaxPtdWork,
                 ", the limit of one call; use fewer tokens");
  if (cost.bytes > kMaxPtdBytes)
    detail::fail("PTD of these positions needs ", cost.bytes, " bytes of rotary features (rotary_dim ",
                 rotary.rotary_dim, "), more than ", kMaxPtdBytes, ", the limit of one call; use fewer tokens");
  const std::vector<int> axes = frequency_axes(rotary);
  const std::vector<double> inv = inverse_frequencies(rotary);
  const size_t feat = 2 * inv.size();
  const double kernel_scale = 2.0 / rotary.rotary_dim;
  // vanilla/unordered are 1-D schemes: their three axes are copies of one index.
  const bool one_dimensional = scheme == Scheme::vanilla || scheme == Scheme::unordered;
  auto distance = [&](const Point& a, const Point& b) {
    if (one_dimensional) return std::fabs(a.t - b.t);
    return std::sqrt((a.t - b.t) * (a.t - b.t) + (a.h - b.h) * (a.h - b.h) + (a.w - b.w) * (a.w - b.w));
  };

  CouplingMetrics out;
  std::vector<Point> text, vision;
  std::vector<double> text_feat, vision_feat, dist, kern;
  size_t next_block = 0;  // blocks come row after row (check_cost)
  for (int64_t row = 0; row < pos.batch; ++row) {
    auto point = [&](int64_t s) {
      return Point{pos.at(0, row, s), pos.at(1, row, s), pos.at(2, row, s)};
    };
    const size_t first_block = next_block;
    while (next_block < pos.blocks.size() && pos.blocks[next_block].row == row) ++next_block;
    if (first_block == next_block) continue;  // no block: nothing to measure (and no features)
    const int32_t* kind = pos.token_block.data() + row * pos.seq_len;
    text.clear();
    for (int64_t s = 0; s < pos.seq_len; ++s)
      if (kind[s] == kTextToken) text.push_back(point(s));
    if (text.empty()) continue;
    text_feat.resize(text.size() * feat);
    for (size_t i = 0; i < text.size(); ++i) rope_features(text[i], axes, inv, &text_feat[i * feat]);

    RowMetrics row_metrics{.row = row};
    for (size_t b = first_block; b < next_block; ++b) {
      vision.clear();
      // a block's tokens follow its first one (masked tokens may sit between them)
      const int64_t begin = pos.blocks[b].begin;
      const auto wanted = static_cast<size_t>(std::min(pos.blocks[b].tokens(), pos.seq_len));
      for (int64_t s = begin; s < pos.seq_len && vision.size() < wanted; ++s)
        if (kind[s] == static_cast<int32_t>(b)) vision.push_back(point(s));
      vision_feat.resize(vision.size() * feat);
      for (size_t i = 0; i < vision.size(); ++i)
        rope_features(vision[i], axes, inv, &vision_feat[i * feat]);

      BlockMetrics m{.row = row, .block = static_cast<int64_t>(b),
                     .text_tokens = static_cast<int64_t>(text.size()),
                     .vision_tokens = static_cast<int64_t>(vision.size())};
      dist.resize(vision.size());
      kern.resize(vision.size());
      for (size_t ti = 0; ti < text.size(); ++ti) {
        const double* ft = &text_feat[ti * feat];
        for (size_t vi = 0; vi < vision.size(); ++vi) {
          dist[vi] = distance(text[ti], vision[vi]);
          const double* fv = &vision_feat[vi * feat];
          double dot = 0;
          for (size_t k = 0; k < feat; ++k) dot += ft[k] * fv[k];
          kern[vi] = kernel_scale * dot;
        }
        m.ptd += mean_abs_deviation(dist);
        m.rope_kernel_deviation += mean_abs_deviation(kern);
      }
      m.ptd /= static_cast<double>(text.size());
      m.rope_kernel_deviation /= static_cast<double>(text.size());
      row_metrics.blocks += 1;
      row_metrics.ptd += m.ptd;
      row_metrics.rope_kernel_deviation += m.rope_kernel_deviation;
      out.ptd += m.ptd;
      out.rope_kernel_deviation += m.rope_kernel_deviation;
      out.blocks.push_back(m);
    }
    if (row_metrics.blocks > 0) {
      row_metrics.ptd /= static_cast<double>(row_metrics.blocks);
      row_metrics.rope_kernel_deviation /= static_cast<double>(row_metrics.blocks);
      out.rows.push_back(row_metrics);
    }
  }
  if (out.blocks.empty()) {
    out.ptd = out.rope_kernel_deviation = std::numeric_limits<double>::quiet_NaN();
  } else {
    out.ptd /= static_cast<double>(out.blocks.size());
    out.rope_kernel_deviation /= static_cast<double>(out.blocks.size());
  }
  return out;
}

}  // namespace circlerope
