// circlerope — rotary kernels: angle tables and the rotation of queries and keys (docs/spec.md §4).
//
// Positions are real numbers (Circle-RoPE puts image tokens on a ring: negative, fractional),
// so nothing here takes integer positions. Two steps:
//
//   1. make_rotary_table(config, position_ids[3][B][S])  ->  per token, D/2 cos then D/2 sin,
//      float32, computed from the angle phi_i = pos[axis(i)] * theta^(-2i/D) in double.
//      Build it once per geometry and forward pass; every layer with that geometry reuses it
//      (make_rotary_plan does this for an AGE plan).
//   2. rotate(table, x, y, params): y = R(phi) x for every head of every token, fp32 math,
//      storage fp32 / bf16 / fp16, in place (y == x) or out of place, forward or backward.
//
// Pairing of the head's elements, D = 8 drawn, chunked sections [1,1,2] (t t h w w):
//
//   neox (Qwen, Llama; pair (i, i + D/2)):   head reads [t h w w t h w w]
//   gptj (adjacent;    pair (2i, 2i + 1)):   head reads [t t h h w w w w]
//
// neox: y[i] = x[i] cos - x[i+D/2] sin,  y[i+D/2] = x[i+D/2] cos + x[i] sin   (docs/spec.md §4)
// The backward pass (the gradient of the forward) is the same rotation with -sin.
// Elements of the head beyond the rotary dim pass through unchanged.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "circlerope/age.h"
#include "circlerope/cpu_path.h"
#include "circlerope/error.h"
#include "circlerope/rotary_config.h"

namespace circlerope {

// Most threads a call may ask for (0 = all cores). More is refused with an Error: libgomp
// segfaulted at 100000, exit()ed the process at INT_MAX, and no CPU has that many cores.
inline constexpr int kMaxThreads = 1024;
// Most targets one rotate call takes (q and k of every layer of a decode step fit).
inline constexpr int kMaxTargets = 64;

enum class DType { float32, bfloat16, float16 };
enum class Pairing { neox, gptj };
enum class Direction { forward, backward };
enum class Prefetch { automatic, on, off };

std::string_view to_string(DType v);
std::string_view to_string(Pairing v);
std::string_view to_string(Direction v);
std::string_view to_string(Prefetch v);
DType parse_dtype(std::string_view text);      // "float32"/"fp32", "bfloat16"/"bf16", "float16"/"fp16"
Pairing parse_pairing(std::string_view text);  // "neox", "gptj"
Prefetch parse_prefetch(std::string_view text);  // "automatic", "on", "off"
std::size_t dtype_size(DType v);

// Code paths (Isa, cpu_path.h): one template algorithm (src/cpu/kernel_impl.h) over per-ISA
// vector primitives (src/cpu/simd.h), each compiled with its own flags and chosen at run time.
// The kernels' view of the paths, with their known-answer comparisons. Paths this process
// runs, portable first, in the order of Isa (the last is what `automatic` picks), and the
// path `automatic` resolves to; both throw Error when CIRCLEROPE_ISA is unusable.
std::vector<Isa> available_isas();
Isa automatic_isa();
// automatic's path and why: "automatic: avx512bf16, the CPU has AVX-512 F/BW/VL and
// AVX512_BF16 and the known-answer check passed", "forced by CIRCLEROPE_ISA=avx2". Throws
// Error naming the value and the reason when CIRCLEROPE_ISA is unusable.
CpuPath cpu_path();
// Every path but `automatic`, in the order of Isa, and why it is not available (empty when
// it is). Never throws: the CPU's facts even when CIRCLEROPE_ISA is unusable.
std::vector<IsaStatus> isa_status();

// A strided view of a [batch, seq, heads, head_dim] tensor. Strides are in elements, any
// non-negative values: contiguous [B,S,H,D] (bshd), [B,H,S,D] seen as [B,S,H,D] (bhsd), a
// slice of a fused qkv projection, a transposed view. bf16 and fp16 are 16-bit storage.
// `data` must be aligned to the element size (4 bytes for float32, 2 for bf16 and fp16), as
// every allocator and torch tensor is; a misaligned pointer is refused with an error. Float
// pointers of tables and positions must be 4-byte aligned likewise.
struct HeadTensor {
  void* data = nullptr;
  DType dtype = DType::float32;
  std::array<std::int64_t, 4> shape{};    // batch, seq, heads, head_dim
  std::array<std::int64_t, 4> strides{};  // same order, in elements
};
HeadTensor bshd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                std::int64_t head_dim);
HeadTensor bhsd(void* data, DType dtype, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                std::int64_t head_dim);

// A table's values in memory someone else owns (a torch tensor, an engine's buffer): per
// token (b, s), at values + (b * seq_len + s) * rotary_dim, D/2 cos values then D/2 sin values.
// The frequency layout and theta are baked into the values; rotate() needs only the sizes.
struct RotaryTableView {
  const float* values = nullptr;
  std::int64_t batch = 0;
  std::int64_t seq_len = 0;
  int rotary_dim = 0;  // even, 2..1024
};

// cos/sin of every frequency for every token of a batch; immutable once built.
class RotaryTable {
 public:
  const RotaryConfig& config() const { return config_; }
  std::int64_t batch() const { return batch_; }
  std::int64_t seq_len() const { return seq_len_; }
  int half() const { return config_.rotary_dim / 2; }
  // D/2 cos values then D/2 sin values of token (b, s).
  const float* row(std::int64_t b, std::int64_t s) const {
    return values_.data() + static_cast<std::size_t>((b * seq_len_ + s) * config_.rotary_dim);
  }
  std::size_t bytes() const { return values_.size() * sizeof(float); }
  RotaryTableView view() const { return {values_.data(), batch_, seq_len_, config_.rotary_dim}; }

 private:
  friend RotaryTable make_rotary_table(const RotaryConfig&, const float*, std::int64_t,
                                       std::int64_t, int, Isa);
  RotaryConfig config_;
  std::int64_t batch_ = 0;
  std::int64_t seq_len_ = 0;
  std::vector<float> values_;
};

// position_ids: float32 [3][batch][seq_len] (Positions::position_ids is this layout).
// threads: 0 = all cores, at most kMaxThreads; isa forces a code path as in RotaryParams.
// Throws Error for a bad
// config, sizes, or a non-finite position.
RotaryTable make_rotary_table(const RotaryConfig& config, const float* position_ids,
                              std::int64_t batch, std::int64_t seq_len, int threads = 0,
                              Isa isa = Isa::automatic);
RotaryTable make_rotary_table(const RotaryConfig& config, const Positions& positions,
                              int threads = 0, Isa isa = Isa::automatic);
// The same values written into caller memory: `values` must hold exactly
// batch * seq_len * rotary_dim floats (the PyTorch op keeps its tables in tensors this way).
// Nothing is written when it throws.
void make_rotary_table_into(const RotaryConfig& config, const float* position_ids,
                            std::int64_t batch, std::int64_t seq_len, std::span<float> values,
                            int threads = 0, Isa isa = Isa::automatic);

struct RotaryParams {
  Pairing pairing = Pairing::neox;           // which elements of a head form a pair
  Direction direction = Direction::forward;  // backward rotates by -phi (gradient of forward)
  int threads = 0;                           // 0 = all cores, <= kMaxThreads; small calls run on one
  Isa isa = Isa::automatic;                  // force a code path (testing, benchmarking)
  Prefetch prefetch = Prefetch::automatic;   // software prefetch: by size, or forced (same bits)
};

// One tensor to rotate: `out` may be `in` itself (same data and strides: in place) or must
// not share a byte with it. Shapes and dtypes must match; out must not overlap itself. An out
// must not share a byte with another target's out or in (the whole out view, including the elements
// past the rotary dim that pass through, even in place). Overlap is decided on the bytes the
// strided views address, not on their bounding boxes: q and k views of one fused qkv buffer
// interleave without sharing a byte and pass. (Views whose strides are so irregular that this
// takes more than a few thousand steps are refused as undecided.)
struct RotaryTarget {
  HeadTensor in;
  HeadTensor out;
};

// Rotates every target with the table's angles in one parallel pass (queries and keys of a
// layer share the token's table row while it is in cache). head_dim of each target must be
// >= the table's rotary dim; heads may differ between targets (GQA); at most kMaxTargets
// targets. No out may share a byte with another target's in or out, with its own in unless
// it is the same view (in place), or with the table's values. Throws Error naming the
// offending target and value; nothing is written when it throws.
void rotate(const RotaryTableView& table, std::span<const RotaryTarget> targets,
            const RotaryParams& params = {});
void rotate(const RotaryTable& table, std::span<const RotaryTarget> targets,
            const RotaryParams& params = {});
// Convenience: one tensor in place.
void rotate(const RotaryTable& table, const HeadTensor& x, const RotaryParams& params = {});

// AGE: the tables of a plan, built once per distinct geometry; layer l uses layer(l).
struct RotaryPlan {
  AgePlan plan;
  std::vector<RotaryTable> tables;  // parallel to plan.schemes()
  const RotaryTable& layer(int l) const;
};
RotaryPlan make_rotary_plan(const AgePositions& positions, const RotaryConfig& config,
                            int threads = 0);

}  // namespace circlerope
