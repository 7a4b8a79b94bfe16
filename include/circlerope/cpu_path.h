// circlerope — the CPU code path: one choice per process of the vector instructions that the
// rotary kernels (rotary.h) and the positions' loops (positions.h) run.
//
//   portable    the baseline ISA: the kernels' 8-lane portable vectors (no FMA), the
//               positions' scalar reference loops (libm ring, one element at a time)
//   avx2        AVX2 + FMA + F16C
//   avx512      AVX-512 F + BW + VL: the kernels in 512-bit registers with masked tails, the
//               positions' ring in 8-lane doubles (the rest of its loops are avx2's)
//   avx512bf16  avx512 with the kernels' bf16 outputs rounded by VCVTNE2PS2BF16 (AVX512_BF16);
//               the positions run avx512's loops
//
// A path is available when this build has it (the vector paths: x86-64 only), CPUID and
// XGETBV say the CPU has its instructions and the OS saves its registers, and, for the
// kernels' AVX-512 paths, their known-answer comparison with avx2 passed on this CPU
// (src/cpu/known_answer.h). `automatic` resolves to the last available path of the list.
// Every path gives the same bits but portable, which has no FMA.
//
// The environment variable CIRCLEROPE_ISA, read once per process, forces a path: portable,
// avx2, avx512 or avx512bf16 (unset, empty or "automatic": nothing forced). `automatic` then
// resolves to that path, and the paths after it in the list are not available ("ruled out by
// CIRCLEROPE_ISA=avx2"), so nothing in the process runs vector code beyond it; the paths
// before it stay available to a caller that names one. A value that is no path, or a path
// this CPU or build lacks, is no fallback: every call that chooses a path (the rotation, its
// tables, the positions, cpu_path()) throws circlerope::Error naming the value and the reason.
#pragma once

#include <string>
#include <string_view>

namespace circlerope {

enum class Isa { automatic, portable, avx2, avx512, avx512bf16 };

// "automatic", "portable", "avx2", "avx512", "avx512bf16"; parse_isa throws Error for
// anything else.
std::string_view to_string(Isa v);
Isa parse_isa(std::string_view text);

// The environment variable that forces a path.
inline constexpr const char* kIsaVariable = "CIRCLEROPE_ISA";

// One path (never automatic) and why it is not available (empty when it is):
// "not compiled into this build (x86-64 only)", "this CPU or OS lacks it: no AVX-512BW (...)",
// "ruled out by CIRCLEROPE_ISA=avx2", ...
struct IsaStatus {
  Isa isa = Isa::portable;
  bool available = false;
  std::string reason;
};

// The path `automatic` resolves to (never automatic) and why, one line:
// "automatic: avx2, the CPU has AVX2, FMA and F16C; avx512: this CPU or OS lacks it: ..." or
// "forced by CIRCLEROPE_ISA=avx2".
struct CpuPath {
  Isa isa = Isa::portable;
  bool forced = false;  // by CIRCLEROPE_ISA
  std::string reason;
};

}  // namespace circlerope
