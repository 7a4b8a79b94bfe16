// Multimodal positions (docs/spec.md §1): tokens -> chunks -> positions.
//
// Two sources share one placement routine: `RowSplitter::split` turns a row of
// Qwen token ids into chunks (text run + optional vision block),
// `layout_positions` turns segments into the same chunks, and
// `Placer::place_row` writes the positions of a row's chunks.
// Float32 rounding follows the reference where it decides visible values: the
// running "next" position is rounded to float32 after every chunk, as torch does.
// transformers (every hf-* compat mode) keeps M-RoPE, vanilla and unordered positions in
// int64 instead: there "next", the chunk maxima and the deltas are exact (double holds every
// integer these reach, below 2^53) and each value is rounded to float32 once, on output.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "block.h"
#include "circlerope/circle.h"
#include "circlerope/positions.h"
#include "circlerope/detail/disjoint.h"
#include "circlerope/detail/fail.h"
#include "positions_simd.h"

namespace circlerope {

using detail::fail;
using detail::region;

namespace {

// `text` tokens, then (optionally) one vision block.
struct Chunk {
  int64_t text = 0;
  bool has_block = false;
  bool is_video = false;
  int64_t t = 1, hm = 0, wm = 0;
  int64_t grid_index = 0;
  double seconds = 1.0;  // second_per_grid_t of a video
  double interval = 1.0;  // rule (B) of positions.h: temporal multiplier (flat_mrope_blocks)
};

// Each term is at most kMaxTokens when added, so the running sum cannot overflow.
void add_layout_tokens(int64_t& total, int64_t tokens, size_t segment) {
  if (tokens > kMaxTokens || total + tokens > kMaxTokens)
    fail("layout has more than ", kMaxTokens, " tokens, the limit of one call (segment ", segment, " adds ",
         tokens, " to ", total, ")");
  total += tokens;
}

int64_t checked_product(int64_t a, int64_t b, const char* what) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) fail(what, " ", a, " x ", b, " is out of range");
  return out;
}

std::string_view kind_name(bool is_video) { return is_video ? "video" : "image"; }

// Where a row's positions go: contiguous arrays of the row's unmasked tokens
// (the output row itself when there is no mask, scratch that is scattered
// afterwards when there is one). `real` maps the k-th unmasked token to its
// index in the padded row (nullptr: identity); it is only read per block.
struct RowOut {
  float* t = nullptr;
  float* h = nullptr;
  float* w = nullptr;
  int32_t* token_block = nullptr;  // optional
  const int64_t* real = nullptr;
  int64_t row = 0;
  int64_t padded_index(int64_t k) const { return real ? real[k] : k; }
};

class Placer {
 public:
  Placer(const Geometry& geometry, const VisionConfig& vision)
      : geometry_(geometry), vision_(vision), kernels_(detail::positions_kernels()),
        flat_(detail::flat_mrope_blocks(vision, geometry.scheme)),
        exact_(vision.compat != Compat::none && geometry.scheme != Scheme::circle) {}

  // Writes the row's unmasked positions; returns the rope delta (docs/spec.md §1; Compat in
  // positions.h for the transformers behaviours). `padded`: the row has masked tokens. With
  // out.t null it writes nothing and only runs the checks (the first pass of
  // rope_index_into), with the same arithmetic, so a row that passed it cannot fail when written.
  float place_row(std::span<const Chunk> chunks, const RowOut& out, int64_t seq_len, bool padded,
                  std::vector<BlockInfo>* blocks) {
    // The running values: float32 values like the reference's st_idx, or exact integers
    // (exact_: transformers' int64) rounded to float32 only where they are written.
    auto kept = [this](double v) { return exact_ ? v : static_cast<double>(static_cast<float>(v)); };
    double next = 0.0;
    double last_max = 0;  // of the last chunk: where the next one continues from
    double row_max = -std::numeric_limits<double>::infinity();
    int64_t k = 0;
    const bool write = out.t != nullptr;
    for (const Chunk& chunk : chunks) {
      if (write) kernels_.place_text(next, chunk.text, out.t + k, out.h + k, out.w + k);
      if (out.token_block) std::fill_n(out.token_block + k, chunk.text, kTextToken);
      k += chunk.text;
      if (chunk.text > 0) {
        last_max = kept(next + static_cast<double>(chunk.text - 1));
        row_max = std::max(row_max, last_max);
      }
      if (chunk.has_block) {
        const double anchor = next + static_cast<double>(chunk.text);
        const int64_t tokens = chunk.t * chunk.hm * chunk.wm;
        const BlockExtent extent = place_block(chunk, anchor, out, k);
        row_max = std::max(row_max, kept(extent.max));
        // transformers 5.3 and later continue after a block from its first frame (start +
        // max(h, w)/m under M-RoPE), reusing a video's later temporal positions; everyone
        // else from the block's maximum.
        last_max = kept(compat_continues_from_first_frame(vision_.compat) ? extent.first_frame_max : extent.max);
        if (blocks) {
          if (out.token_block) std::fill_n(out.token_block + k, tokens, static_cast<int32_t>(blocks->size()));
          blocks->push_back({out.row, out.padded_index(k), chunk.t, chunk.hm, chunk.wm, chunk.is_video,
                             chunk.grid_index, anchor});
        }
        k += tokens;
      }
      if (chunk.text > 0 || chunk.has_block)
        next = kept(last_max + 1.0);  // float32 like the reference's st_idx, or exact
    }
    const Compat compat = vision_.compat;
    // transformers' text-only branch (4.49-5.1, a batch without grids) takes the row
    // maximum over the padded positions too, whose value is 1.
    if (text_only_batch_ && padded && (compat == Compat::hf_4_49 || compat == Compat::hf_4_52))
      row_max = std::max(row_max, 1.0);
    const bool empty = row_max == -std::numeric_limits<double>::infinity();
    // (max + 1) - length: in float32 steps like the reference, or exactly, rounded once
    auto delta_from = [&](int64_t length) {
      if (exact_) return static_cast<float>(row_max + 1.0 - static_cast<double>(length));
      return (static_cast<float>(row_max) + 1.0f) - static_cast<float>(length);
    };
    if (compat_deltas_count_real_tokens(compat))  // deltas against the unpadded length
      return empty ? 0.0f : delta_from(k);
    float delta = empty ? static_cast<float>(-seq_len)  // empty row: decoding starts at 0
                        : delta_from(seq_len);
    // Qwen2-VL's get_rope_index of 5.2 returns max(delta, 0).
    if (compat == Compat::hf_5_2 && vision_.time == TimeMode::index) delta = std::max(delta, 0.0f);
    return delta;
  }

  // transformers' text-only branch applies (set by the caller: no grids in the batch).
  void set_text_only_batch(bool value) { text_only_batch_ = value; }

 private:
  const detail::FrameCoordinates& frame(int64_t hm, int64_t wm) {
    for (auto& [key, value] : cache_)
      if (key.first == hm && key.second == wm) return value;
    cache_.emplace_back(std::pair{hm, wm}, detail::frame_coordinates(geometry_, hm, wm));
    return cache_.back().second;
  }

  struct BlockExtent {
    double max = 0;              // over every axis of every token (exact: callers round)
    double first_frame_max = 0;  // over every axis of frame 0
  };

  BlockExtent place_block(const Chunk& chunk, double anchor, const RowOut& out, int64_t k) {
    if (flat_) return place_flat_block(chunk, anchor, out, k);
    const detail::FrameCoordinates& coords = frame(chunk.hm, chunk.wm);
    const auto cells = static_cast<int64_t>(coords.cells());
    const double* pt = coords.t.data();
    const double* ph = coords.h.data();
    const double* pw = coords.w.data();
    double high = -std::numeric_limits<double>::infinity(), low = -high, first_high = high;
    for (int64_t f = 0; f < chunk.t; ++f, k += cells) {
      const int64_t tau = chunk.is_video ? detail::frame_time(f, chunk.seconds, vision_) : 0;
      const AxisTriple o = detail::frame_offset(geometry_.scheme, f, cells, tau);
      const double bt = anchor + o.t, bh = anchor + o.h, bw = anchor + o.w;
      if (out.t) {
        kernels_.place_cells(pt, bt, out.t + k, cells);
        kernels_.place_cells(ph, bh, out.h + k, cells);
        kernels_.place_cells(pw, bw, out.w + k, cells);
      }
      high = std::max({high, bt + coords.max.t, bh + coords.max.h, bw + coords.max.w});
      low = std::min({low, bt + coords.min.t, bh + coords.min.h, bw + coords.min.w});
      if (f == 0) first_high = high;
    }
    if (!std::isfinite(static_cast<float>(high)) || !std::isfinite(static_cast<float>(low)))
      fail(kind_name(chunk.is_video), " ", chunk.grid_index, " of row ", out.row, ": positions reach ",
           std::fabs(high) > std::fabs(low) ? high : low,
           ", beyond float32 (is the radius or the move_to_positive offset too large?)");
    // rounding is monotone: rounded by the caller, the max of the rounded values
    return {high, first_high};
  }

  // Rule (B) of positions.h (M-RoPE, transformers 5.3-5.5.4): temporal c * interval for every
  // token, height c + (f * hm + r) / t, width c + column; the text after it continues at
  // c + max(hm, wm) whatever the temporal position is.
  BlockExtent place_flat_block(const Chunk& chunk, double anchor, const RowOut& out, int64_t k) {
    const double temporal = anchor * chunk.interval;
    if (!std::isfinite(static_cast<float>(temporal)))
      fail(kind_name(chunk.is_video), " ", chunk.grid_index, " of row ", out.row, ": its temporal position ",
           temporal, " is beyond float32");
    if (out.t) {
      const auto t32 = static_cast<float>(temporal);
      for (int64_t f = 0; f < chunk.t; ++f)
        for (int64_t r = 0; r < chunk.hm; ++r) {
          const auto h = static_cast<float>(anchor + static_cast<double>((f * chunk.hm + r) / chunk.t));
          for (int64_t c = 0; c < chunk.wm; ++c, ++k) {
            out.t[k] = t32;
            out.h[k] = h;
            out.w[k] = static_cast<float>(anchor + static_cast<double>(c));
          }
        }
    }
    const double side = anchor + static_cast<double>(std::max(chunk.hm, chunk.wm) - 1);
    return {std::max(temporal, side), side};
  }

  const Geometry& geometry_;
  const VisionConfig& vision_;
  const detail::PositionsKernels& kernels_;
  const bool flat_;   // rule (B): detail::flat_mrope_blocks
  const bool exact_;  // integer positions kept exact (transformers' int64), see the top
  bool text_only_batch_ = false;
  std::vector<std::pair<std::pair<int64_t, int64_t>, detail::FrameCoordinates>> cache_;
};

// Token ids of one row -> chunks (docs/spec.md §1 "Sequences"), consuming grids from the
// running counters. Strict where the reference would silently misplace blocks.
class RowSplitter {
 public:
  RowSplitter(const RopeIndexInput& input, const VisionConfig& vision, Scheme scheme)
      : input_(input), vision_(vision), kernels_(detail::positions_kernels()),
        flat_(detail::flat_mrope_blocks(vision, scheme)) {}

  // `ids`: the row's unmasked tokens, contiguous; `real`: their padded indices
  // (nullptr: identity), only used in messages.
  void split(int64_t row, const int64_t* ids, int64_t n, const int64_t* real, std::vector<Chunk>& chunks) {
    chunks.clear();
    auto where = [&](int64_t k) { return real ? real[k] : k; };
    const int64_t start = vision_.vision_start_token_id, image = vision_.image_token_id,
                  video = vision_.video_token_id;
    // One unsigned range test rejects almost every text token (the three ids
    // are adjacent in Qwen's vocabulary); the exact tests run inside it.
    const int64_t lowest = std::min({start, image, video});
    const uint64_t span = static_cast<uint64_t>(std::max({start, image, video})) - static_cast<uint64_t>(lowest);
    int64_t text_start = 0, block_in_row = 0;
    // The scan jumps to the next token in the range (positions_simd.h): a plain loop, or 16 ids
    // per vector test.
    const auto scan = kernels_.scan;
    for (int64_t k = scan(ids, 0, n, static_cast<uint64_t>(lowest), span); k < n;
         k = scan(ids, k + 1, n, static_cast<uint64_t>(lowest), span)) {
      const int64_t tok = ids[k];
      if (tok != start && tok != image && tok != video) continue;
      const bool opens = tok == start && k + 1 < n && (ids[k + 1] == image || ids[k + 1] == video);
      if (!opens) {
        if (tok == start) continue;  // a vision start with no vision token after it is text
        fail("row ", row, ", position ", where(k), ": ", kind_name(tok == video), " token ", tok,
             " outside a vision block (no vision_start_token_id=", start, " right before its run)");
      }
      const bool is_video = ids[k + 1] == video;
      Chunk chunk = take_grid(row, block_in_row++, is_video);
      chunk.text = k + 1 - text_start;  // the vision start marker is text
      const int64_t needed = chunk.t * chunk.hm * chunk.wm;
      const int64_t vision_token = is_video ? video : image;
      const int64_t run = kernels_.run_end(ids, k + 2, n, vision_token) - (k + 1);
      if (run != needed)
        fail(grid_name(is_video, chunk.grid_index), " needs ", needed, " ", kind_name(is_video),
             " tokens after the vision start at row ", row, ", position ", where(k), ", but ", run,
             " follow", run < needed ? " (too few tokens for the grid)" : " (the grid is too small for them)");
      chunks.push_back(chunk);
      text_start = k + 1 + needed;
      k = text_start - 1;
    }
    if (n > text_start) chunks.push_back(Chunk{.text = n - text_start});
  }

  void finish() const {
    check_count(false, images_used_, input_.image_grid_thw.size());
    check_count(true, videos_used_, input_.video_grid_thw.size());
  }

 private:
  std::string grid_name(bool is_video, int64_t index) const {
    const GridTHW& g = is_video ? input_.video_grid_thw[index] : input_.image_grid_thw[index];
    return std::string(is_video ? "video_grid_thw[" : "image_grid_thw[") + std::to_string(index) +
           "] = [" + std::to_string(g.t) + ", " + std::to_string(g.h) + ", " + std::to_string(g.w) + "]";
  }

  Chunk take_grid(int64_t row, int64_t block_in_row, bool is_video) {
    auto& used = is_video ? videos_used_ : images_used_;
    const auto grids = is_video ? input_.video_grid_thw : input_.image_grid_thw;
    if (used >= static_cast<int64_t>(grids.size()))
      fail("row ", row, ": ", kind_name(is_video), " block ", block_in_row, " of the row is ",
           kind_name(is_video), " ", used, " of the batch, but ", kind_name(is_video),
           "_grid_thw has only ", grids.size(), " entr", grids.size() == 1 ? "y" : "ies");
    const int64_t index = used++;
    const GridTHW& g = grids[index];
    const int64_t m = vision_.spatial_merge_size;
    auto bad = [&](auto&&... what) {
      fail(grid_name(is_video, index), " (", kind_name(is_video), " block ", block_in_row, " of row ",
           row, "): ", what...);
    };
    if (g.t < 1 || g.h < 1 || g.w < 1) bad("every side must be >= 1");
    if (g.h % m != 0) bad("h=", g.h, " is not divisible by spatial_merge_size=", m);
    if (g.w % m != 0) bad("w=", g.w, " is not divisible by spatial_merge_size=", m);
    Chunk chunk{.has_block = true, .is_video = is_video, .t = g.t, .hm = g.h / m, .wm = g.w / m,
                .grid_index = index};
    int64_t frame_tokens = 0, tokens = 0;
    if (__builtin_mul_overflow(chunk.hm, chunk.wm, &frame_tokens) ||
        __builtin_mul_overflow(frame_tokens, chunk.t, &tokens) || tokens > input_.seq_len)
      bad("needs more tokens than a row of ", input_.seq_len, " holds");
    if (is_video && !input_.second_per_grid_ts.empty())
      chunk.seconds = input_.second_per_grid_ts[static_cast<size_t>(index)];
    if (is_video && !detail::frame_time_fits(chunk.t, chunk.seconds, vision_))
      bad("second_per_grid_ts[", index, "]=", chunk.seconds, " makes frame times reach 2^31 (tokens_per_second=",
          vision_.tokens_per_second, ")");
    if (flat_) chunk.interval = flat_interval(row, block_in_row, is_video, chunk.seconds);
    return chunk;
  }

  // Rule (B) of positions.h: which second_per_grid_ts entry the block takes, and so its
  // temporal multiplier. 5.3-5.5.3 hand the entries to images and videos in turn (an iterator
  // over the batch, or over seq_len ones without second_per_grid_ts); 5.5.4 to videos only.
  double flat_interval(int64_t row, int64_t block_in_row, bool is_video, double own_seconds) {
    if (vision_.time == TimeMode::index) return 1.0;  // Qwen2-VL: no time interval
    if (vision_.compat == Compat::hf_5_5_4) return is_video ? detail::block_interval(own_seconds, vision_) : 1.0;
    const auto entries = input_.second_per_grid_ts.empty() ? static_cast<size_t>(input_.seq_len)
                                                           : input_.second_per_grid_ts.size();
    const size_t entry = entries_used_++;
    if (entry >= entries)
      fail("row ", row, ": ", kind_name(is_video), " block ", block_in_row, " of the row is block ", entry,
           " of the batch, but ", input_.second_per_grid_ts.empty() ? "the seq_len = " : "second_per_grid_ts' ",
           entries, " entries", input_.second_per_grid_ts.empty() ? " of ones" : "",
           " are used up: transformers 5.3-5.5.3 (hf-5.3-5.5.3) takes one per image and video, and raises "
           "StopIteration here");
    const double seconds = input_.second_per_grid_ts.empty() ? 1.0 : input_.second_per_grid_ts[entry];
    return detail::block_interval(seconds, vision_);
  }

  void check_count(bool is_video, int64_t used, size_t given) const {
    if (used != static_cast<int64_t>(given))
      fail(kind_name(is_video), "_grid_thw has ", given, " entr", given == 1 ? "y" : "ies", " but input_ids hold ",
           used, " ", kind_name(is_video), " block", used == 1 ? "" : "s",
           " (vision_start_token_id followed by ", kind_name(is_video), "_token_id)");
  }

  const RopeIndexInput& input_;
  const VisionConfig& vision_;
  const detail::PositionsKernels& kernels_;
  const bool flat_;  // rule (B): detail::flat_mrope_blocks
  int64_t images_used_ = 0, videos_used_ = 0;
  size_t entries_used_ = 0;  // of second_per_grid_ts under hf-5.3-5.5.3
};

void validate_input(const RopeIndexInput& in) {
  if (in.batch < 0 || in.seq_len < 0)
    fail("batch and seq_len must be >= 0 (got ", in.batch, " x ", in.seq_len, ")");
  // Each bounded on its own too: batch 2^62 with seq_len 0 holds no token but 2^62 deltas.
  int64_t total = 0;
  if (in.batch > kMaxTokens || in.seq_len > kMaxTokens ||
      __builtin_mul_overflow(in.batch, in.seq_len, &total) || total > kMaxTokens)
    fail("batch ", in.batch, " x seq_len ", in.seq_len, " is more than ", kMaxTokens,
         " tokens, the limit of one call");
  if (static_cast<int64_t>(in.input_ids.size()) != total)
    fail("input_ids has ", in.input_ids.size(), " values but batch x seq_len = ", in.batch, " x ",
         in.seq_len, " = ", total);
  if (!in.attention_mask.empty() && static_cast<int64_t>(in.attention_mask.size()) != total)
    fail("attention_mask has ", in.attention_mask.size(), " values but input_ids has ", total,
         " (", in.batch, " x ", in.seq_len, ")");
  if (!in.second_per_grid_ts.empty() && in.second_per_grid_ts.size() != in.video_grid_thw.size())
    fail("second_per_grid_ts has ", in.second_per_grid_ts.size(), " entries but video_grid_thw has ",
         in.video_grid_thw.size(), " (one per video)");
  for (size_t i = 0; i < in.second_per_grid_ts.size(); ++i)
    if (!(std::isfinite(in.second_per_grid_ts[i]) && in.second_per_grid_ts[i] >= 0))
      fail("second_per_grid_ts[", i, "] must be finite and >= 0 (got ", in.second_per_grid_ts[i], ")");
}

void validate_geometry(const Geometry& geometry) {
  if (geometry.scheme == Scheme::circle) validate(geometry.circle);
}

// Everything that can be checked before any output is sized or written.
void validate_call(const RopeIndexInput& input, const VisionConfig& vision, const Geometry& geometry) {
  validate(vision);
  validate_geometry(geometry);
  validate_input(input);
}

// The shared body of rope_index and rope_index_into; the caller ran validate_call.
// Two passes, so that nothing is written when the input is invalid (rotate has the same
// contract): the first splits every row into chunks and runs every check of the
// placement without writing; the second writes. Only rows with a vision block keep their
// chunks between the passes (a text-only row is one run of its unmasked tokens).
void build(const RopeIndexInput& input, const VisionConfig& vision, const Geometry& geometry,
           float* position_ids, float* rope_deltas, int32_t* token_block,
           std::vector<BlockInfo>* blocks, int64_t* real_tokens) {
  const int64_t batch = input.batch, seq = input.seq_len;
  Placer placer(geometry, vision);
  placer.set_text_only_batch(input.image_grid_thw.empty() && input.video_grid_thw.empty());
  // transformers 5.2 and later start from zeros; everyone else, the reference included, from ones.
  const float padding = compat_pads_with_zero(vision.compat) ? 0.0f : 1.0f;
  RowSplitter splitter(input, vision, geometry.scheme);
  std::vector<Chunk> chunks, kept;               // this row's; every block row's, in order
  std::vector<uint32_t> kept_count(static_cast<size_t>(batch), 0);  // 0: a text-only row
  std::vector<int64_t> real, compact_ids;
  auto all_real = [&](const int64_t* mask) { return std::all_of(mask, mask + seq, [](int64_t m) { return m == 1; }); };

  // Pass 1: checks only.
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* ids = input.input_ids.data() + b * seq;
    const int64_t* mask = input.attention_mask.empty() ? nullptr : input.attention_mask.data() + b * seq;
    if (!mask || all_real(mask)) {
      // No padding in this row (every row of an unpadded batch): no compaction.
      splitter.split(b, ids, seq, nullptr, chunks);
    } else {
      real.clear();
      compact_ids.clear();
      for (int64_t s = 0; s < seq; ++s) {
        if (mask[s] == 1) {
          real.push_back(s);
          compact_ids.push_back(ids[s]);
        } else if (mask[s] != 0) {
          fail("attention_mask[", b, "][", s, "] = ", mask[s], " (expected 0 or 1)");
        }
      }
      splitter.split(b, compact_ids.data(), static_cast<int64_t>(real.size()), real.data(), chunks);
    }
    if (std::none_of(chunks.begin(), chunks.end(), [](const Chunk& c) { return c.has_block; })) continue;
    placer.place_row(chunks, RowOut{.row = b}, seq, false, nullptr);  // the float32 range of its blocks
    kept.insert(kept.end(), chunks.begin(), chunks.end());
    kept_count[static_cast<size_t>(b)] = static_cast<uint32_t>(chunks.size());
  }
  splitter.finish();

  // Pass 2: writes; nothing in it can fail.
  std::vector<float> scratch;
  std::vector<int32_t> scratch_map;
  size_t next_kept = 0;
  for (int64_t b = 0; b < batch; ++b) {
    float* row_t = position_ids + (0 * batch + b) * seq;
    float* row_h = position_ids + (1 * batch + b) * seq;
    float* row_w = position_ids + (2 * batch + b) * seq;
    int32_t* row_map = token_block ? token_block + b * seq : nullptr;
    const int64_t* mask = input.attention_mask.empty() ? nullptr : input.attention_mask.data() + b * seq;
    const bool compact = mask && !all_real(mask);
    real.clear();
    if (compact)
      for (int64_t s = 0; s < seq; ++s)
        if (mask[s] == 1) real.push_back(s);
    const int64_t n = compact ? static_cast<int64_t>(real.size()) : seq;
    if (real_tokens) real_tokens[b] = n;
    const uint32_t count = kept_count[static_cast<size_t>(b)];
    Chunk text_only{.text = n};
    const std::span<const Chunk> row_chunks =
        count ? std::span<const Chunk>(kept.data() + next_kept, count) : std::span<const Chunk>(&text_only, n > 0);
    next_kept += count;
    if (!compact) {
      rope_deltas[b] =
          placer.place_row(row_chunks, {row_t, row_h, row_w, row_map, nullptr, b}, seq, false, blocks);
      continue;
    }
    scratch.resize(static_cast<size_t>(3 * n));
    scratch_map.resize(row_map ? static_cast<size_t>(n) : 0);
    const RowOut out{scratch.data(), scratch.data() + n, scratch.data() + 2 * n,
                     row_map ? scratch_map.data() : nullptr, real.data(), b};
    rope_deltas[b] = placer.place_row(row_chunks, out, seq, true, blocks);
    for (int64_t s = 0; s < seq; ++s)
      if (mask[s] == 0) {
        row_t[s] = row_h[s] = row_w[s] = padding;  // docs/spec.md §1: masked tokens get 1 (hf-5.2 on: 0)
        if (row_map) row_map[s] = kMaskedToken;
      }
    for (int64_t k = 0; k < n; ++k) {
      row_t[real[k]] = out.t[k];
      row_h[real[k]] = out.h[k];
      row_w[real[k]] = out.w[k];
      if (row_map) row_map[real[k]] = out.token_block[k];
    }
  }
}

}  // namespace

Positions rope_index(const RopeIndexInput& input, const VisionConfig& vision,
                     const Geometry& geometry) {
  validate_call(input, vision, geometry);
  Positions out;
  out.scheme = geometry.scheme;
  out.batch = input.batch;
  out.seq_len = input.seq_len;
  const auto n = static_cast<size_t>(input.batch * input.seq_len);
  out.position_ids.resize(3 * n);
  out.rope_deltas.resize(static_cast<size_t>(input.batch));
  out.token_block.resize(n);
  out.real_tokens.resize(static_cast<size_t>(input.batch));
  out.compat = vision.compat;
  build(input, vision, geometry, out.position_ids.data(), out.rope_deltas.data(),
        out.token_block.data(), &out.blocks, out.real_tokens.data());
  return out;
}

void rope_index_into(const RopeIndexInput& input, const VisionConfig& vision,
                     const Geometry& geometry, std::span<float> position_ids,
                     std::span<float> rope_deltas) {
  validate_call(input, vision, geometry);
  const auto n = static_cast<size_t>(input.batch * input.seq_len);
  if (position_ids.size() != 3 * n)
    fail("position_ids output has ", position_ids.size(), " floats, expected 3 x ", input.batch,
         " x ", input.seq_len, " = ", 3 * n);
  if (rope_deltas.size() != static_cast<size_t>(input.batch))
    fail("rope_deltas output has ", rope_deltas.size(), " floats, expected batch = ", input.batch);
  detail::require_disjoint(
      "rope_index",
      {region(position_ids.data(), position_ids.size(), "position_ids"),
       region(rope_deltas.data(), rope_deltas.size(), "rope_deltas")},
      {region(input.input_ids.data(), input.input_ids.size(), "input_ids"),
       region(input.attention_mask.data(), input.attention_mask.size(), "attention_mask"),
       region(input.image_grid_thw.data(), input.image_grid_thw.size(), "image_grid_thw"),
       region(input.video_grid_thw.data(), input.video_grid_thw.size(), "video_grid_thw"),
       region(input.second_per_grid_ts.data(), input.second_per_grid_ts.size(), "second_per_grid_ts")});
  build(input, vision, geometry, position_ids.data(), rope_deltas.data(), nullptr, nullptr, nullptr);
}

Positions layout_positions(std::span<const Segment> segments, const VisionConfig& vision,
                           const Geometry& geometry) {
  validate(vision);
  validate_geometry(geometry);
  std::vector<Chunk> chunks;
  int64_t total = 0, images = 0, videos = 0, pending_text = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    if (seg.kind == Segment::Kind::text) {
      if (seg.tokens < 1) fail("segment ", i, ": text needs at least 1 token (got ", seg.tokens, ")");
      add_layout_tokens(total, seg.tokens, i);
      pending_text += seg.tokens;
      continue;
    }
    const bool is_video = seg.kind == Segment::Kind::video;
    if (seg.t < 1 || seg.hm < 1 || seg.wm < 1 || (!is_video && seg.t != 1))
      fail("segment ", i, ": ", kind_name(is_video), " grid ", seg.t, "x", seg.hm, "x", seg.wm,
           " must have sides >= 1", is_video ? "" : " and t = 1");
    if (!(std::isfinite(seg.second_per_grid_t) && seg.second_per_grid_t >= 0))
      fail("segment ", i, ": seconds per grid must be finite and >= 0 (got ", seg.second_per_grid_t, ")");
    const std::string where = "segment " + std::to_string(i);
    add_layout_tokens(total, checked_product(checked_product(seg.t, seg.hm, where.c_str()), seg.wm, where.c_str()), i);
    if (is_video && !detail::frame_time_fits(seg.t, seg.second_per_grid_t, vision))
      fail("segment ", i, ": frame times reach 2^31 (seconds per grid ", seg.second_per_grid_t, ")");
    chunks.push_back(Chunk{.text = pending_text, .has_block = true, .is_video = is_video, .t = seg.t,
                           .hm = seg.hm, .wm = seg.wm, .grid_index = is_video ? videos++ : images++,
                           .seconds = seg.second_per_grid_t});
    // Rule (B) in a layout: a video takes its own seconds; an image 1 under hf-5.3-5.5.3 (as
    // without second_per_grid_ts), no interval under hf-5.5.4.
    if (detail::flat_mrope_blocks(vision, geometry.scheme))
      chunks.back().interval = is_video || vision.compat == Compat::hf_5_3_to_5_5_3
                                   ? detail::block_interval(is_video ? seg.second_per_grid_t : 1.0, vision)
                                   : 1.0;
    pending_text = 0;
  }
  if (pending_text > 0) chunks.push_back(Chunk{.text = pending_text});

  Positions out;
  out.scheme = geometry.scheme;
  out.batch = 1;
  out.seq_len = total;
  out.position_ids.resize(static_cast<size_t>(3 * total));
  out.rope_deltas.resize(1);
  out.token_block.resize(static_cast<size_t>(total));
  float* base = out.position_ids.data();
  const RowOut row{base, base + total, base + 2 * total, out.token_block.data(), nullptr, 0};
  out.real_tokens = {total};
  out.compat = vision.compat;
  Placer placer(geometry, vision);
  out.rope_deltas[0] = placer.place_row(chunks, row, total, false, &out.blocks);
  return out;
}

namespace {

// Checks a decode call and returns 3 x batch x count (the number of output floats).
size_t checked_decode(std::span<const float> rope_deltas, int64_t first_cache_position, int64_t count) {
  // Cache positions are float32 in the output: beyond 2^31 they mean nothing.
  constexpr int64_t kMaxCachePosition = int64_t{1} << 31;
  if (first_cache_position < 0 || count < 0 || first_cache_position > kMaxCachePosition ||
      count > kMaxCachePosition - first_cache_position)
    fail("decode positions need 0 <= first_cache_position and first_cache_position + count <= 2^31 (got ",
         first_cache_position, ", ", count, ")");
  const auto batch = static_cast<int64_t>(rope_deltas.size());
  int64_t total = 0;
  // batch and count each, then their product (as batch and seq_len in rope_index)
  if (batch > kMaxTokens) fail("decode positions: batch ", batch, " is more than ", kMaxTokens, " rows, the limit of one call");
  if (count > kMaxTokens) fail("decode positions: count ", count, " is more than ", kMaxTokens, " tokens, the limit of one call");
  if (__builtin_mul_overflow(batch, count, &total) || total > kMaxTokens)
    fail("decode positions: batch ", batch, " x count ", count, " is more than ", kMaxTokens,
         " tokens, the limit of one call");
  // Deltas of rope_index are finite; NaN or inf from elsewhere would give NaN or inf
  // positions, so they are refused. A finite delta keeps p + delta finite: p <= 2^31 is far below half an
  // ulp of FLT_MAX.
  for (int64_t b = 0; b < batch && count > 0; ++b)
    if (!std::isfinite(rope_deltas[static_cast<size_t>(b)]))
      fail("decode positions: rope_deltas[", b, "] = ", rope_deltas[static_cast<size_t>(b)], " is not finite");
  return static_cast<size_t>(3 * total);
}

void fill_decode(std::span<const float> rope_deltas, int64_t first_cache_position, int64_t count, float* out) {
  const auto batch = static_cast<int64_t>(rope_deltas.size());
  for (int axis = 0; axis < 3; ++axis)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < count; ++i)
        // float32 like the reference's cache_position + rope_deltas
        out[static_cast<size_t>((axis * batch + b) * count + i)] =
            static_cast<float>(first_cache_position + i) + rope_deltas[static_cast<size_t>(b)];
}

}  // namespace

std::vector<float> decode_positions(std::span<const float> rope_deltas,
                                    int64_t first_cache_position, int64_t count) {
  std::vector<float> out(checked_decode(rope_deltas, first_cache_position, count));
  fill_decode(rope_deltas, first_cache_position, count, out.data());
  return out;
}

void decode_positions_into(std::span<const float> rope_deltas, int64_t first_cache_position, int64_t count,
                           std::span<float> out) {
  const size_t expected = checked_decode(rope_deltas, first_cache_position, count);
  if (out.size() != expected)
    fail("decode positions: the output holds ", out.size(), " floats, expected 3 x ", rope_deltas.size(), " x ",
         count, " = ", expected);
  if (expected > 0 && out.data() == nullptr) fail("decode positions: the output is null");
  detail::require_disjoint("decode positions", {region(out.data(), out.size(), "out")},
                           {region(rope_deltas.data(), rope_deltas.size(), "rope_deltas")});
  fill_decode(rope_deltas, first_cache_position, count, out.data());
}

std::vector<float> next_positions(const Positions& p, int64_t count) {
  if (!compat_deltas_count_real_tokens(p.compat)) return decode_positions(p.rope_deltas, p.seq_len, count);
  if (p.real_tokens.size() != p.rope_deltas.size())
    fail("next_positions: positions hold ", p.real_tokens.size(), " real-token counts for ",
         p.rope_deltas.size(), " rows");
  // hf-5.3-5.5.3 on: row b continues at real_tokens[b] + rope_delta[b] (its maximum + 1). Each
  // row is the decode rule of a batch of one whose cache holds only the real tokens.
  std::vector<float> out;
  const auto batch = static_cast<int64_t>(p.rope_deltas.size());
  std::vector<std::vector<float>> rows;
  rows.reserve(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    rows.push_back(decode_positions({&p.rope_deltas[static_cast<size_t>(b)], 1},
                                    p.real_tokens[static_cast<size_t>(b)], count));
  out.resize(static_cast<size_t>(3 * batch * count));
  for (int axis = 0; axis < 3; ++axis)
    for (int64_t b = 0; b < batch; ++b)
      std::copy_n(rows[static_cast<size_t>(b)].begin() + axis * count, count,
                  out.begin() + (axis * batch + b) * count);
  return out;
}

}  // namespace circlerope
