// circlerope reference — the rotation of docs/spec.md §4 in float64, one element at a time, written
// to be obviously right rather than fast. It shares nothing with the kernels but the core's
// frequency_axes / inverse_frequencies: no table, no staging, its own storage decoding.
// Used by the tests, `circlerope check` and the benchmarks' spot checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "circlerope/rotary.h"

namespace circlerope::reference {

// Value of element `offset` (in elements) of a buffer of the given dtype, exactly.
double load(const void* data, DType dtype, std::int64_t offset);

// Where element (b, s, h, d) of a view lives, in elements from its data pointer.
inline std::int64_t element_offset(const HeadTensor& t, std::int64_t b, std::int64_t s,
                                   std::int64_t h, std::int64_t d) {
  return b * t.strides[0] + s * t.strides[1] + h * t.strides[2] + d * t.strides[3];
}
// Its index in a dense [B][S][H][D] array of the view's shape (what rotate() returns).
inline std::size_t dense_index(const HeadTensor& t, std::int64_t b, std::int64_t s,
                               std::int64_t h, std::int64_t d) {
  return static_cast<std::size_t>(((b * t.shape[1] + s) * t.shape[2] + h) * t.shape[3] + d);
}
// f(b, s, h, d) for every element of the view, in dense order.
template <class F>
void for_each_element(const HeadTensor& t, const F& f) {
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t s = 0; s < t.shape[1]; ++s)
      for (std::int64_t h = 0; h < t.shape[2]; ++h)
        for (std::int64_t d = 0; d < t.shape[3]; ++d) f(b, s, h, d);
}

// Exact y = R(+-phi) x for every element of the view x ([B,S,H,D]): dense [B][S][H][D].
std::vector<double> rotate(const RotaryConfig& config, const float* position_ids,
                           const HeadTensor& x, Pairing pairing, Direction direction);

// ---- the bits a path writes -------------------------------------------------------------
// Storage rounding by the kernels' rule (src/cpu/convert.h), computed another way (in double,
// by nearbyint): round to nearest even, overflow to infinity, fp16 subnormals; every NaN is
// written as the canonical quiet NaN, sign clear: bf16 0x7FC0, fp16 0x7E00, fp32 0x7FC00000.
// The exact table entry (i < D/2: the cosine, else the sine of frequency i mod D/2) at
// position p, in long double (x87: a 64-bit significand, so the angle's error is |phi| 2^-63,
// far below the table's bound).
long double exact_table_entry(const RotaryConfig& config, float p, int i);
// The angle phi = p * theta^(-2f/D) of entry i, in double.
double table_angle(const RotaryConfig& config, float p, int i);
// The absolute bound every table entry keeps against exact_table_entry, on the CPU and on a
// GPU (docs/guides/cuda.md): half a float ulp of a value in [0.5, 1] (2^-25), plus the double angle's
// error (2^-47 |phi|), plus a few double ulps of the cos/sin. Absolute, not in ulps of the
// value: near a zero of cos or sin the value is tiny and its ulps say nothing about the
// rotation, which sees the error relative to the pair's norm, 1.
double table_entry_bound(double phi);

std::uint16_t to_bfloat16(float f);
std::uint16_t to_float16(float f);
std::uint32_t to_float32(float f);
// Bits of element `offset` of a buffer (the 16-bit types in the low half).
std::uint32_t load_bits(const void* data, DType dtype, std::int64_t offset);

// The bits every code path must write when it rotates x by the table's cos/sin values (any
// values, NaN included): the rotation in float32 as src/cpu/kernel_impl.h orders it,
// y0 = x0 c - (x1 s), y1 = x1 c + (x0 s), the product in parentheses rounded and the rest
// fused (`fused`: the FMA paths avx2, avx512, avx512bf16) or rounded twice (portable), then
// stored by the rule above; elements past the rotary dim keep the input's bits. Dense
// [B][S][H][D]; the table must match x's batch and seq.
std::vector<std::uint32_t> rotate_bits(const RotaryTableView& table, const HeadTensor& x, Pairing pairing,
                                       Direction direction, bool fused);

// ---- comparison -----------------------------------------------------------------------
// Errors are measured per rotation pair, relative to the pair's norm (a rotation keeps it),
// so cancellation inside one output element does not inflate them.
//
// float32: table entries are within half an ulp (6e-8) and the fp32 arithmetic adds a few
// ulp, so 1e-6 leaves margin while staying well under the 1e-5 contract.
inline constexpr double kFloat32Tolerance = 1e-6;
// bf16 / fp16: one rounding of the exact result to the storage type (2^-8, 2^-11 relative) is
// the best any output can do; we allow exactly that plus the fp32 error before it. The tests
// also show this is under twice the error of doing the same math in that precision.
inline constexpr double kBfloat16Tolerance = 0x1p-8 + kFloat32Tolerance;
inline constexpr double kFloat16Tolerance = 0x1p-11 + kFloat32Tolerance;
double tolerance(DType dtype);

// Largest pair error of `out` against `expected` (from reference::rotate of input `in`);
// elements past the rotary dim must equal the input exactly. NaN anywhere gives +inf.
double max_error(const std::vector<double>& expected, const HeadTensor& in,
                 const HeadTensor& out, int rotary_dim, Pairing pairing);

// Same math done naively in the storage precision, the way eager PyTorch does it in bf16:
// cos/sin rounded, each product rounded, the sum rounded. Its error against the reference
// is the yardstick for "no worse than twice the error of the same math in that precision".
std::vector<double> rotate_in_storage_precision(const RotaryConfig& config,
                                                const float* position_ids, const HeadTensor& x,
                                                Pairing pairing, Direction direction);

// ---- the reference comparison: what `circlerope check` and the tests run ----------------
// (Three things are called a check: the command `circlerope check`; this comparison of every
// path with the float64 reference, which the command runs; and the dispatcher's known-answer
// check, src/cpu/known_answer.h, an AVX-512 path against avx2 before it is used.)
struct ComparisonCase {
  Isa isa = Isa::portable;
  DType dtype = DType::float32;
  Pairing pairing = Pairing::neox;
  FrequencyLayout layout = FrequencyLayout::chunked;
  std::string memory;  // "bshd", "bhsd", "strided", "seq-major"
  Direction direction = Direction::forward;
  bool in_place = false;
  std::int64_t batch = 1, seq = 1, q_heads = 1, k_heads = 1, head_dim = 2;
  int rotary_dim = 2;
  const char* backend = nullptr;  // named in describe() instead of the isa when set ("cuda")
};

struct ComparisonResult {
  ComparisonCase c;
  double error = 0;      // worst over q and k
  double tolerance = 0;
  bool guard_intact = true;  // memory around the out view untouched
  bool pass() const { return error <= tolerance && guard_intact; }
  std::string describe() const;
};

// Every available ISA x dtype x pairing x frequency layout x memory layout x direction x
// in/out of place, `rounds` times, each with fresh random sizes and data from `seed`.
// `progress(done, total)` is called after each case when given.
std::vector<ComparisonResult> compare_every_path(std::uint64_t seed, int rounds,
                                   const std::function<void(int, int)>& progress = {});
// One case with data from `seed`.
ComparisonResult compare_case(const ComparisonCase& c, std::uint64_t seed);

// ---- the same harness for another backend (the CUDA kernels, their CPU emulation) ---------
// One target of a case: its views, and the whole host buffers behind them (the view plus
// the guard elements around it), which a device backend copies over and back. In place,
// both spans are the same buffer.
struct ComparisonTarget {
  RotaryTarget view;
  std::span<unsigned char> in_storage;
  std::span<unsigned char> out_storage;
};
// Builds the table of (config, positions [3][batch][seq]) its own way and rotates every
// target with it; must leave the results in the out buffers.
using Rotator = std::function<void(const RotaryConfig& config, const float* positions,
                                   std::int64_t batch, std::int64_t seq,
                                   std::span<const ComparisonTarget> targets, const RotaryParams& params)>;
// The CPU kernels: make_rotary_table and rotate on params.isa.
Rotator cpu_rotator();
ComparisonResult compare_case(const ComparisonCase& c, std::uint64_t seed, const Rotator& rotator);
// The cases compare_every_path draws (same sizes for the same seed), for the given ISAs.
std::vector<ComparisonCase> comparison_cases(std::uint64_t seed, int rounds, std::span<const Isa> isas);

}  // namespace circlerope::reference
