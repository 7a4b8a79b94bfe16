// The AVX-512 emulator test, guest side: runs inside Bochs (model "tigerlake": AVX-512 F, BW,
// VL, DQ, CD, ..., but not AVX512_BF16) on bare metal, started by mbr.S and start.S. Prints
// through Bochs' port 0xE9; the last line is "AVX512-EMULATOR: ALL OK" or "... FAILED".
//
//  1. CPU detection (circlerope/detail/cpu_features.h) on the emulated CPU, then again with XCR0
//     stripped of the AVX-512 state bits (the OS-support half of the check) and of YMM.
//  2. The dispatcher's known-answer comparison (src/cpu/known_answer.h): avx512 against avx2
//     must agree, portable (no FMA) against avx2 must not (the comparison can fail).
//  3. harness.h: random rotate calls, avx512 against avx2 byte for byte, some of them with
//     views that end right before an unmapped page (a #PF there ends the test: failure).
//  4. Angle tables: avx512 against avx2.
//  5. The positions' Circle-RoPE ring (src/core/ring_impl.h): avx512 against avx2.
// Compiled without the C library; the kernels are the library's own kernel_*.cpp files.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "circlerope/detail/cpu_features.h"
#include "../../src/cpu/known_answer.h"
#include "harness.h"

extern "C" {
void guest_shutdown();
extern const std::uint64_t guest_isr_table[];
extern const std::uint64_t guest_isr_count;
extern unsigned char __bss_start[], __bss_end[];
using Init = void (*)();
extern Init __init_array_start[], __init_array_end[];

// The C library functions the compiler may call, in string instructions: written as loops,
// the compiler would recognise them and call themselves.
void* memcpy(void* d, const void* s, std::size_t n) {
  void* dp = d;
  __asm__ volatile("rep movsb" : "+D"(dp), "+S"(s), "+c"(n) : : "memory");
  return d;
}
void* memmove(void* d, const void* s, std::size_t n) {
  if (d <= s || static_cast<const unsigned char*>(s) + n <= static_cast<unsigned char*>(d)) return memcpy(d, s, n);
  void* dp = static_cast<unsigned char*>(d) + n - 1;
  const void* sp = static_cast<const unsigned char*>(s) + n - 1;
  __asm__ volatile("std; rep movsb; cld" : "+D"(dp), "+S"(sp), "+c"(n) : : "memory");
  return d;
}
void* memset(void* d, int c, std::size_t n) {
  void* dp = d;
  __asm__ volatile("rep stosb" : "+D"(dp), "+c"(n) : "a"(c) : "memory");
  return d;
}
int memcmp(const void* a, const void* b, std::size_t n) {
  const volatile unsigned char* ap = static_cast<const unsigned char*>(a);
  const volatile unsigned char* bp = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < n; ++i)
    if (ap[i] != bp[i]) return ap[i] < bp[i] ? -1 : 1;
  return 0;
}
int bcmp(const void* a, const void* b, std::size_t n) { return memcmp(a, b, n); }  // clang's memcmp == 0
}

namespace {

void out(char c) { __asm__ volatile("outb %0, $0xe9" : : "a"(c)); }
void print(const char* s) {
  while (*s) out(*s++);
}
void print_u64(std::uint64_t v, int base = 10) { harness::print_u64(&print, v, base); }

bool all_ok = true;
void check(bool ok, const char* what) {
  print(ok ? "  ok    " : "  FAIL  ");
  print(what);
  print("\n");
  all_ok = all_ok && ok;
}

void set_xcr0(std::uint64_t v) {
  __asm__ volatile("xsetbv" : : "c"(0), "a"(static_cast<std::uint32_t>(v)), "d"(static_cast<std::uint32_t>(v >> 32)));
}

// ---- exceptions: report and stop ---------------------------------------------------------
struct IdtEntry {
  std::uint16_t offset0, selector;
  std::uint8_t ist, type;
  std::uint16_t offset1;
  std::uint32_t offset2, zero;
};
alignas(16) IdtEntry idt[32];

void install_idt() {
  for (std::uint64_t v = 0; v < guest_isr_count; ++v) {
    const std::uint64_t at = guest_isr_table[v];
    idt[v] = {static_cast<std::uint16_t>(at), 0x08, 0, 0x8E, static_cast<std::uint16_t>(at >> 16),
              static_cast<std::uint32_t>(at >> 32), 0};
  }
  struct __attribute__((packed)) {
    std::uint16_t limit;
    std::uint64_t base;
  } desc = {sizeof idt - 1, reinterpret_cast<std::uint64_t>(idt)};
  __asm__ volatile("lidt %0" : : "m"(desc));
}

// ---- a 4 KiB-paged 2 MiB region whose last page is unmapped ---------------------------------
// The boot code maps the first GiB in 2 MiB pages from the page directory at 0x3000. Two
// regions (inputs, outputs) get a 4 KiB page table each, with the final page not present.
alignas(4096) std::uint64_t guard_tables[2][512];
constexpr std::uint64_t kRegion[2] = {0x4000000, 0x4200000};  // 64 and 66 MiB, past the guest's data

void install_guard_pages() {
  auto* pd = reinterpret_cast<volatile std::uint64_t*>(0x3000);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 512; ++i)
      guard_tables[r][i] = i == 511 ? 0 : (kRegion[r] + static_cast<std::uint64_t>(i) * 4096) | 0x3;
    pd[kRegion[r] >> 21] = reinterpret_cast<std::uint64_t>(guard_tables[r]) | 0x3;
  }
  std::uint64_t cr3;
  __asm__ volatile("mov %%cr3, %0" : "=r"(cr3));
  __asm__ volatile("mov %0, %%cr3" : : "r"(cr3) : "memory");
}

constexpr std::size_t kArena = 1u << 20;
unsigned char arena_in[kArena], arena_a[kArena], arena_b[kArena], arena_before[kArena], arena_marks[kArena];

// One VCVTPS2PH of a tie, in the avx2 kernel's instruction form (target attribute: this
// file is compiled for the baseline ISA).
__attribute__((target("avx2,f16c"), noinline)) std::uint16_t f16_tie_probe() {
  const __m256 v = _mm256_castsi256_ps(_mm256_set1_epi32(0x3B0B1000));
  return static_cast<std::uint16_t>(_mm_extract_epi16(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT), 0));
}

}  // namespace

extern "C" void guest_exception(const std::uint64_t* frame) {
  // frame: vector, error code (0 if none), rip, cs, rflags, rsp, ss
  std::uint64_t cr2;
  __asm__ volatile("mov %%cr2, %0" : "=r"(cr2));
  print("\nEXCEPTION ");
  print_u64(frame[0]);
  print(" at rip 0x");
  print_u64(frame[2], 16);
  print(", error code 0x");
  print_u64(frame[1], 16);
  print(", cr2 0x");
  print_u64(cr2, 16);
  print("\nAVX512-EMULATOR: FAILED\n");
  guest_shutdown();
}

extern "C" void guest_main() {
  memset(__bss_start, 0, static_cast<std::size_t>(__bss_end - __bss_start));
  for (Init* f = __init_array_start; f < __init_array_end; ++f) (*f)();
  install_idt();
  print("AVX512-EMULATOR: guest running\n");
  namespace cpu = circlerope::cpu;
  using circlerope::detail::CpuFeatures;

  // 1. detection
  const circlerope::detail::CpuidWords words = circlerope::detail::read_cpuid();
  print("  CPUID.7.0:EBX 0x");
  print_u64(words.leaf7_ebx, 16);
  print(", XCR0 0x");
  print_u64(circlerope::detail::read_xcr0(), 16);
  print("\n");
  const CpuFeatures full = circlerope::detail::detect_cpu_features();
  check(full.avx2 && full.avx512, "detection: avx2 and avx512 available with XCR0 = 0xE7");
  check(!full.avx512_bf16 && full.avx512_bf16_missing != nullptr,
        "detection: no avx512bf16 on this model (Bochs has no AVX512_BF16)");
  set_xcr0(0x7);  // x87, SSE, AVX: no opmask or ZMM state
  const CpuFeatures no_zmm = circlerope::detail::detect_cpu_features();
  check(no_zmm.avx2 && !no_zmm.avx512, "detection: XCR0 = 0x7 leaves avx2 only");
  if (no_zmm.avx512_missing) {
    print("        (");
    print(no_zmm.avx512_missing);
    print(")\n");
  }
  set_xcr0(0x3);  // x87, SSE
  const CpuFeatures no_ymm = circlerope::detail::detect_cpu_features();
  check(!no_ymm.avx2 && !no_ymm.avx512, "detection: XCR0 = 0x3 leaves neither");
  set_xcr0(0xE7);

  // 2. the dispatcher's known-answer comparison
  check(cpu::kernels_agree(cpu::range_kernel_avx512(), cpu::range_kernel_avx2()),
        "known-answer comparison: avx512 agrees with avx2");
  check(!cpu::kernels_agree(cpu::range_kernel_portable(), cpu::range_kernel_avx2()),
        "known-answer comparison: portable (no FMA) disagrees with avx2 (the comparison can fail)");
  check(cpu::tables_agree(cpu::table_kernel_avx512(), cpu::table_kernel_avx2()),
        "known-answer comparison: avx512 tables agree with avx2");

  // Bochs 2.7 rounds VCVTPS2PH ties away from zero where the hardware (and convert.h) rounds
  // them to even: 0x3B0B1000 lies halfway between fp16 0x1858 and 0x1859. Both emulated paths
  // share that, so the fp16 digest is compared with the host's only where the emulator rounds
  // like the hardware.
  const bool f16_ties_even = f16_tie_probe() == 0x1858;
  print(f16_ties_even ? "  emulator: VCVTPS2PH rounds ties to even\n"
                      : "  emulator: VCVTPS2PH rounds ties away from zero (not as the hardware does): "
                        "fp16 results are compared between the emulated paths only\n");

  // 3. random rotate calls
  install_guard_pages();
  harness::Arena arena{arena_in, arena_a, arena_b, arena_before, arena_marks, kArena,
                       reinterpret_cast<unsigned char*>(kRegion[0] + (2u << 20) - 4096),
                       reinterpret_cast<unsigned char*>(kRegion[1] + (2u << 20) - 4096)};
  const harness::Stats st = harness::compare_kernels(cpu::range_kernel_avx512(), cpu::range_kernel_avx2(),
                                                     harness::kSeed, harness::kCases, arena, &print);
  print("  rotate: ");
  print_u64(st.cases);
  print(" cases, ");
  print_u64(st.elements);
  print(" elements, ");
  print_u64(st.mismatches);
  print(" differ, ");
  print_u64(st.outside_writes);
  print(" wrote outside their view\n");
  harness::print_digests(&print, st);
  check(st.cases == harness::kCases && st.mismatches == 0 && st.outside_writes == 0,
        "rotate: avx512 equals avx2 byte for byte, nothing written outside the views");

  // 4. tables
  check(harness::compare_tables(cpu::table_kernel_avx512(), cpu::table_kernel_avx2(), harness::kSeed, 40),
        "tables: avx512 equals avx2 bit for bit");

  // 5. the positions' ring
  std::uint64_t ring_digest = 0xCBF29CE484222325ull;
  check(harness::compare_rings(&circlerope::detail::ring_avx512, &circlerope::detail::ring_avx2, harness::kSeed,
                               harness::kRingRounds, ring_digest),
        "positions ring: avx512 equals avx2 bit for bit (coordinates and extremes)");
  harness::print_ring_digest(&print, ring_digest);

  print(all_ok ? "AVX512-EMULATOR: ALL OK\n" : "AVX512-EMULATOR: FAILED\n");
}

// The kernels call libm only for angles beyond 1e6 radians, which no case here reaches.
extern "C" double cos(double) {
  print("cos called\nAVX512-EMULATOR: FAILED\n");
  guest_shutdown();
  return 0;
}
extern "C" double sin(double) {
  print("sin called\nAVX512-EMULATOR: FAILED\n");
  guest_shutdown();
  return 0;
}
extern "C" void sincos(double, double*, double*) {
  print("sincos called\nAVX512-EMULATOR: FAILED\n");
  guest_shutdown();
}
