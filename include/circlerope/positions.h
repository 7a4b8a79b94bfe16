// circlerope — multimodal 3-axis rotary positions (docs/spec.md §1–3).
//
// A row of tokens becomes positions on three axes (temporal, height, width):
//
//   text   text   [vision_start] [img img img img ...] [vision_end]  text ...
//   0,0,0  1,1,1   2,2,2          c+P(0) c+P(1) ...      next ...
//
// where the anchor c is the position the block's first token would have had as
// text and P is the scheme's block coordinate (docs/spec.md §2). After every chunk the
// next text position is max(all three axes of that chunk) + 1, so positions are
// fractional after a Circle-RoPE block.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "circlerope/error.h"

namespace circlerope {

// ----------------------------------------------------------------- limits ---

// Most tokens one call handles: batch x seq_len of a batch (and batch and seq_len each), the
// tokens of a layout, batch x count of decode positions (and batch and count each). Positions of this many tokens take
// 192 MiB (float32 [3][tokens]); anything larger is refused with an Error that names the
// size, before anything is allocated or written.
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;  // 16,777,216

// ---------------------------------------------------------------- schemes ---

// How a vision block's tokens are placed relative to its anchor (docs/spec.md §2).
enum class Scheme {
  vanilla,    // (j, j, j): 1-D RoPE, the paper's "hard embedding" (LLaVA)
  unordered,  // (0, 0, 0): every vision token shares one position (mPLUG-Owl3)
  mrope,      // (tau(f), r, q): Qwen2-VL / Qwen2.5-VL M-RoPE
  circle,     // Circle-RoPE ring in the plane orthogonal to (1,1,1) (docs/spec.md §3)
};
inline constexpr std::array<Scheme, 4> kAllSchemes = {Scheme::vanilla, Scheme::unordered,
                                                      Scheme::mrope, Scheme::circle};

std::string_view to_string(Scheme scheme);
// "vanilla" | "unordered" | "mrope" | "circle"; throws Error naming the text otherwise.
Scheme parse_scheme(std::string_view text);

// Frame time of a video (docs/spec.md §2).
enum class TimeMode {
  seconds,  // Qwen2.5-VL: tau(f) = floor(f * second_per_grid_t * tokens_per_second)
  index,    // Qwen2-VL:   tau(f) = f
};

// ------------------------------------------------------- Circle-RoPE config ---

enum class RadiusMode {
  fixed,  // `radius` is used as is
  automatic,  // R = radius_scale * |max(x', y', z')| ("auto", "auto-k")
};

enum class PositiveShift {
  none,    // absent, false or 0
  automatic,  // "auto": shift by |min| (offset 0)
  offset,  // a number o: shift by |min| + o (o = 0 means no shift, like the reference)
};

// Circle-RoPE options (docs/spec.md §3). Defaults are the paper's recommended setting
// (radius 10, alpha 0.5, move_to_origin); JSON requests read absent keys with the
// reference's meaning instead (see cli/request.h).
struct CircleConfig {
  RadiusMode radius_mode = RadiusMode::fixed;
  double radius = 10.0;       // fixed radius, finite and > 0
  double radius_scale = 1.0;  // k of "auto-k", finite and > 0 ("auto" is k = 1)
  double alpha = 0.5;         // weight of the polar angle vs the raster angle, in [0, 1]
  bool move_to_origin = true;  // centre the grid before taking angles
  double dff_rate = 0.0;      // beta in [0, 1]: blend towards the un-ringed grid (0 = off)
  PositiveShift move_to_positive = PositiveShift::none;
  double positive_offset = 0.0;  // the number of move_to_positive = number
};

// Throws Error naming the field if a value is not finite or out of range.
void validate(const CircleConfig& config);

// Scheme plus the options that only Circle-RoPE reads.
struct Geometry {
  Scheme scheme = Scheme::circle;
  CircleConfig circle = {};
};

// ------------------------------------------------ Hugging Face behaviours ---

// Whose positions to reproduce exactly, quirks included. M-RoPE positions of
// Hugging Face transformers' `get_rope_index` differ between releases; a model
// fine-tuned under one needs that one's positions. Each mode is one behaviour, named by the
// first release that has it, and was compared with every release of its range listed in
// docs/guides/compat.md (scripts/hf_matrix.sh). s is second_per_grid_t, tps tokens_per_second,
// S the padded row length, n the row's real (unmasked) tokens, c the block's anchor, m the
// merge size.
//
//   mode          releases        padded  rope_delta      video frame time tau(f)       text after a block
//   none          (this project)  1       max + 1 - S     trunc(f*s*tps), float32       max of the block + 1
//   hf-4.49       4.49-4.51       1       max + 1 - S (*) trunc(f*s*tps), float32       max of the block + 1
//   hf-4.52       4.52-5.1        1       max + 1 - S (*) f*trunc(s)*tps                max of the block + 1
//   hf-5.2        5.2             0       max + 1 - S (Q) f*trunc(s)*tps                max of the block + 1
//   hf-5.3-5.5.3  5.3-5.5.3       0       max + 1 - n     (B) below                     c + max(h, w)/m
//   hf-5.5.4      5.5.4           0       max + 1 - n     (B) below                     c + max(h, w)/m
//   hf-5.6        5.6-5.17        0       max + 1 - n     f*trunc(s)*tps                c + max(h, w)/m
//   hf-5.18       5.18 and later  0       max + 1 - n     trunc(f*(tps*s)), float32     c + max(h, w)/m
//
// "hf-5.3" is still read, as the name of hf-5.6 (this project called the rule of 5.6-5.17 so
// before it was run against the releases; 5.3-5.5.3 are hf-5.3-5.5.3).
// (*) A batch without any grid takes transformers' text-only branch, where the padded 1s
// count in the row maximum: a padded row with one real token gets 2 - S, not 1 - S.
// (Q) Qwen2-VL (time = index) clamps the delta at 0 in 5.2: max(max + 1 - S, 0).
// (B) M-RoPE blocks of 5.3-5.5.4 are placed by a rule later fixed: every token of a block gets
//     the temporal position c * i, where i is 1 for Qwen2-VL (time = index) and, for
//     Qwen2.5-VL, tps * trunc(s) of the next second_per_grid_ts entry; the height of the
//     token in frame f, row r is c + (f*hm + r) / t (integer division), its width c + column.
//     In 5.3-5.5.3 images and videos take the entries in turn, row after row (an image too
//     gets i = tps * trunc(s); without second_per_grid_ts every entry is 1, and there are S
//     of them); a batch whose blocks outnumber the entries is refused (transformers raises
//     StopIteration). 5.5.4 gives images i = 1 and videos their own entry. The other
//     schemes place blocks as hf-5.6 does under these two modes.
// The C API (crp_compat) numbers these in release order, the order of kAllCompats.
enum class Compat {
  none,
  hf_4_49,
  hf_4_52,
  hf_5_6,
  hf_5_2,
  hf_5_3_to_5_5_3,
  hf_5_5_4,
  hf_5_18,
  hf_5_3 = hf_5_6,  // the former name of hf_5_6
};
inline constexpr std::array<Compat, 8> kAllCompats = {Compat::none,    Compat::hf_4_49,         Compat::hf_4_52,
                                                      Compat::hf_5_2,  Compat::hf_5_3_to_5_5_3, Compat::hf_5_5_4,
                                                      Compat::hf_5_6,  Compat::hf_5_18};

// "none", "hf-4.49", "hf-4.52", "hf-5.2", "hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6", "hf-5.18".
std::string_view to_string(Compat compat);
// Those names, and "hf-5.3" (hf_5_6); throws Error naming the text for anything else.
Compat parse_compat(std::string_view text);
// The comma-separated list of the names parse_compat reads, for messages and help texts.
std::string_view compat_names();

// What a mode does (the table above), for the core and its callers.
bool compat_pads_with_zero(Compat compat);         // padded positions 0 (5.2 on), else 1
bool compat_deltas_count_real_tokens(Compat compat);  // max + 1 - n (5.3 on), else max + 1 - S
bool compat_continues_from_first_frame(Compat compat);  // text after a block at c + max(h, w)/m (5.3 on)

// --------------------------------------------------------- vision tokens ---

// Model constants of the Qwen2-VL / Qwen2.5-VL token convention.
struct VisionConfig {
  int64_t spatial_merge_size = 2;        // m: a block has t * (h/m) * (w/m) tokens
  double tokens_per_second = 2.0;        // Qwen2.5-VL: 2; read in float32 like the reference
  int64_t vision_start_token_id = 151652;
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;
  TimeMode time = TimeMode::seconds;
  Compat compat = Compat::none;          // which transformers behaviour to reproduce
};

void validate(const VisionConfig& config);

// One entry of image_grid_thw / video_grid_thw: patch grid before merging.
struct GridTHW {
  int64_t t = 1, h = 0, w = 0;
};

// --------------------------------------------------------------- inputs ---

// A batch in Qwen's format. Spans are borrowed for the duration of the call.
struct RopeIndexInput {
  std::span<const int64_t> input_ids;       // [batch][seq_len], row-major
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::span<const int64_t> attention_mask;  // [batch][seq_len] of 0/1, or empty = all 1
  std::span<const GridTHW> image_grid_thw;  // consumed in order, row after row
  std::span<const GridTHW> video_grid_thw;
  std::span<const double> second_per_grid_ts;  // one per video, or empty = 1.0 each
};

// Token-free form: a sequence of segments of one row (no vision markers added).
struct Segment {
  enum class Kind { text, image, video };
  Kind kind = Kind::text;
  int64_t tokens = 0;               // text: number of tokens
  int64_t t = 1, hm = 0, wm = 0;    // image/video: merged token grid (t = 1 for images)
  double second_per_grid_t = 1.0;   // video only
};

// Parses "text:5,image:6x6,video:4x6x6@0.5,text:4" (image:HxW and video:TxHxW are
// merged token grids; @s is seconds per grid, default 1). Throws Error naming the
// offending item.
std::vector<Segment> parse_layout(std::string_view layout);
std::string format_layout(std::span<const Segment> segments);

// -------------------------------------------------------------- outputs ---

// What each token of a row is, for metrics and pictures.
inline constexpr int32_t kMaskedToken = -2;
inline constexpr int32_t kTextToken = -1;  // otherwise: index into Positions::blocks

struct BlockInfo {
  int64_t row = 0;
  int64_t begin = 0;          // index of the first token in the padded row
  int64_t t = 1, hm = 0, wm = 0;  // merged grid
  bool is_video = false;
  int64_t grid_index = 0;     // index into image_grid_thw or video_grid_thw
  double anchor = 0.0;        // c (docs/spec.md §1)
  int64_t tokens() const { return t * hm * wm; }
};

struct Positions {
  Scheme scheme = Scheme::circle;  // the scheme that made them (rope_index, layout_positions)
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<float> position_ids;  // [3][batch][seq_len]; axis 0 temporal, 1 height, 2 width
  std::vector<float> rope_deltas;   // [batch]
  std::vector<int32_t> token_block;  // [batch][seq_len]: kMaskedToken, kTextToken or block
  std::vector<BlockInfo> blocks;     // in order of appearance, row after row
  std::vector<int64_t> real_tokens;  // [batch]: unmasked tokens of each row
  Compat compat = Compat::none;      // the behaviour these positions follow

  float at(int axis, int64_t row, int64_t s) const {
    return position_ids[static_cast<size_t>((axis * batch + row) * seq_len + s)];
  }
};

// ------------------------------------------------------------ functions ---

// Positions of a batch (docs/spec.md §1–3). Throws Error for any invalid input.
Positions rope_index(const RopeIndexInput& input, const VisionConfig& vision,
                     const Geometry& geometry);

// For engines and the PyTorch op: writes position_ids [3][batch][seq_len] and
// rope_deltas [batch] into caller memory (scratch is only allocated for masked
// rows and ring tables). When it throws, nothing has been written.
void rope_index_into(const RopeIndexInput& input, const VisionConfig& vision,
                     const Geometry& geometry, std::span<float> position_ids,
                     std::span<float> rope_deltas);

// One row from segments (batch 1, no mask). `vision` supplies tokens_per_second
// and the time mode; token ids and the merge size are not used.
Positions layout_positions(std::span<const Segment> segments, const VisionConfig& vision,
                           const Geometry& geometry);

// Decoding (docs/spec.md §1): the token at cache position p of row b gets p + rope_deltas[b]
// on all three axes. Writes [3][batch][count] for cache positions
// first_cache_position .. first_cache_position + count - 1 of every row.
std::vector<float> decode_positions(std::span<const float> rope_deltas,
                                    int64_t first_cache_position, int64_t count);
// The same into caller memory, which must hold exactly 3 x batch x count floats; nothing is
// written when it throws.
void decode_positions_into(std::span<const float> rope_deltas, int64_t first_cache_position, int64_t count,
                           std::span<float> out);

// The next `count` tokens of every row after the prompt, by the decode rule of the
// behaviour that made `positions` ([3][batch][count]): cache positions seq_len ..
// seq_len + count - 1 plus rope_delta (docs/spec.md §1; none, hf-4.49, hf-4.52, hf-5.2), or, under the
// modes whose deltas count only real tokens (compat_deltas_count_real_tokens: hf-5.3-5.5.3
// on), real tokens + k + rope_delta. Both give the same positions where a row has no padding.
std::vector<float> next_positions(const Positions& positions, int64_t count);

}  // namespace circlerope
