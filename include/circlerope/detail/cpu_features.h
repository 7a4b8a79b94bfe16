// circlerope — detail, not API: which vector instruction sets this CPU has *and* the OS lets a
// program use, from CPUID and XGETBV. Read by the process's one path probe (cpu_probe.h,
// src/core/cpu_path.cpp), whose decision the rotary kernels and the positions both take, and
// public like detail/fail.h (docs/design.md layering); no stability promise. Header-only and free
// of the standard library beyond <cstdint>, so that the freestanding AVX-512 emulator test
// (tests/avx512_emulator) runs exactly this code inside Bochs.
//
// A CPUID feature bit alone is not enough: the OS must save the registers' state on a context
// switch, which it announces in XCR0 (read with XGETBV, only allowed when CPUID.1:ECX.OSXSAVE
// is set). AVX needs XCR0 bits 1 (SSE) and 2 (YMM upper halves); AVX-512 also needs bits 5
// (opmask k0-k7), 6 (ZMM0-15 upper halves) and 7 (ZMM16-31).
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace circlerope::detail {

// The CPUID words the decision reads; zero when a leaf does not exist.
struct CpuidWords {
  std::uint32_t max_leaf = 0;      // leaf 0, EAX
  std::uint32_t leaf1_ecx = 0;     // FMA (12), OSXSAVE (27), AVX (28), F16C (29)
  std::uint32_t leaf7_max_sub = 0; // leaf 7 subleaf 0, EAX: highest subleaf
  std::uint32_t leaf7_ebx = 0;     // AVX2 (5), AVX512F (16), AVX512DQ (17), AVX512BW (30), AVX512VL (31)
  std::uint32_t leaf7_1_eax = 0;   // leaf 7 subleaf 1: AVX512_BF16 (5)
};

struct CpuFeatures {
  bool avx2 = false;        // AVX2 + FMA + F16C, YMM state enabled by the OS
  bool avx512 = false;      // AVX-512 F + BW + VL (and everything avx2 needs), ZMM state enabled
  bool avx512_bf16 = false; // avx512, AVX512DQ (VFPCLASSPS) and AVX512_BF16 (VCVTNE2PS2BF16)
  // Why a level is missing, for messages: the first missing requirement, or nullptr.
  const char* avx2_missing = nullptr;
  const char* avx512_missing = nullptr;
  const char* avx512_bf16_missing = nullptr;
};

inline constexpr std::uint64_t kXcr0Avx = (1u << 1) | (1u << 2);
inline constexpr std::uint64_t kXcr0Avx512 = kXcr0Avx | (1u << 5) | (1u << 6) | (1u << 7);

// The decision itself, a pure function so that tests can feed it any CPU.
// `xcr0` is ignored (may be anything) when leaf1_ecx says OSXSAVE is off.
constexpr CpuFeatures decide_cpu_features(const CpuidWords& w, std::uint64_t xcr0) {
  auto bit = [](std::uint32_t word, int b) { return ((word >> b) & 1u) != 0; };
  CpuFeatures f;
  const bool leaf7 = w.max_leaf >= 7;
  const bool osxsave = w.max_leaf >= 1 && bit(w.leaf1_ecx, 27);
  const std::uint64_t enabled = osxsave ? xcr0 : 0;
  if (w.max_leaf < 1 || !bit(w.leaf1_ecx, 28)) f.avx2_missing = "no AVX (CPUID.1:ECX bit 28)";
  else if (!osxsave) f.avx2_missing = "the OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE = 0)";
  else if ((enabled & kXcr0Avx) != kXcr0Avx) f.avx2_missing = "the OS does not save YMM state (XCR0 bits 1, 2)";
  else if (!bit(w.leaf1_ecx, 12)) f.avx2_missing = "no FMA (CPUID.1:ECX bit 12)";
  else if (!bit(w.leaf1_ecx, 29)) f.avx2_missing = "no F16C (CPUID.1:ECX bit 29)";
  else if (!leaf7 || !bit(w.leaf7_ebx, 5)) f.avx2_missing = "no AVX2 (CPUID.7.0:EBX bit 5)";
  f.avx2 = f.avx2_missing == nullptr;

  if (!f.avx2) f.avx512_missing = f.avx2_missing;
  else if (!bit(w.leaf7_ebx, 16)) f.avx512_missing = "no AVX-512F (CPUID.7.0:EBX bit 16)";
  else if (!bit(w.leaf7_ebx, 30)) f.avx512_missing = "no AVX-512BW (CPUID.7.0:EBX bit 30)";
  else if (!bit(w.leaf7_ebx, 31)) f.avx512_missing = "no AVX-512VL (CPUID.7.0:EBX bit 31)";
  else if ((enabled & kXcr0Avx512) != kXcr0Avx512)
    f.avx512_missing = "the OS does not save ZMM and opmask state (XCR0 bits 5, 6, 7)";
  f.avx512 = f.avx512_missing == nullptr;

  if (!f.avx512) f.avx512_bf16_missing = f.avx512_missing;
  else if (!bit(w.leaf7_ebx, 17)) f.avx512_bf16_missing = "no AVX-512DQ (CPUID.7.0:EBX bit 17)";
  else if (w.leaf7_max_sub < 1 || !bit(w.leaf7_1_eax, 5))
    f.avx512_bf16_missing = "no AVX512_BF16 (CPUID.7.1:EAX bit 5)";
  f.avx512_bf16 = f.avx512_bf16_missing == nullptr;
  return f;
}

#if defined(__x86_64__) || defined(__i386__)
inline CpuidWords read_cpuid() {
  CpuidWords w;
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid(0, a, b, c, d);
  w.max_leaf = a;
  if (w.max_leaf >= 1) {
    __cpuid(1, a, b, c, d);
    w.leaf1_ecx = c;
  }
  if (w.max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    w.leaf7_max_sub = a;
    w.leaf7_ebx = b;
    if (w.leaf7_max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      w.leaf7_1_eax = a;
    }
  }
  return w;
}

// XCR0; only call when CPUID.1:ECX.OSXSAVE is set (XGETBV faults otherwise). Raw bytes
// instead of _xgetbv so that no -mxsave flag is needed where this header is included.
inline std::uint64_t read_xcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));  // xgetbv
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

inline CpuFeatures detect_cpu_features() {
  const CpuidWords w = read_cpuid();
  const bool osxsave = w.max_leaf >= 1 && ((w.leaf1_ecx >> 27) & 1u);
  return decide_cpu_features(w, osxsave ? read_xcr0() : 0);
}
#else
inline CpuFeatures detect_cpu_features() { return decide_cpu_features(CpuidWords{}, 0); }
#endif

}  // namespace circlerope::detail
