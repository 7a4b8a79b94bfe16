// The AVX-512 emulator test, host side: the same random rotate calls as the guest
// (harness.h), through this CPU's real avx2 kernel, printing the digest of the outputs. The
// runner (run.sh) requires the guest's avx2 digest, computed by Bochs, to equal this one: the
// emulator computes what this CPU computes, on the very cases where avx512 was compared.
#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

#include "circlerope/detail/cpu_features.h"
#include "harness.h"

namespace {

void print(const char* s) { std::fputs(s, stdout); }

// `bytes` of read-write memory followed by one page of none; returns its start.
unsigned char* region(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<unsigned char*>(p);
  if (mprotect(base + bytes, page, PROT_NONE) != 0) return nullptr;
  return base;
}

}  // namespace

int main() {
  if (!circlerope::detail::detect_cpu_features().avx2) {
    std::printf("host: this CPU has no avx2 path; nothing to compare the emulator with\n");
    return 77;
  }
  constexpr std::size_t kArena = 1u << 20, kGuard = 2u << 20;
  unsigned char* in = region(kArena);
  unsigned char* a = region(kArena);
  unsigned char* b = region(kArena);
  unsigned char* before = region(kArena);
  unsigned char* marks = region(kArena);
  unsigned char* in_guard = region(kGuard);
  unsigned char* out_guard = region(kGuard);
  if (!in || !a || !b || !before || !marks || !in_guard || !out_guard) {
    std::printf("host: mmap failed\n");
    return 1;
  }
  const harness::Arena arena{in, a, b, before, marks, kArena, in_guard + kGuard, out_guard + kGuard};
  const harness::Stats st = harness::compare_kernels(circlerope::cpu::range_kernel_avx2(), nullptr,
                                                     harness::kSeed, harness::kCases, arena, &print);
  std::printf("  host: %" PRIu64 " cases, %" PRIu64 " elements, %" PRIu64 " wrote outside their view\n",
              st.cases, st.elements, st.outside_writes);
  harness::print_digests(&print, st);
  std::uint64_t ring_digest = 0xCBF29CE484222325ull;
  harness::compare_rings(&circlerope::detail::ring_avx2, nullptr, harness::kSeed, harness::kRingRounds, ring_digest);
  harness::print_ring_digest(&print, ring_digest);
  return st.outside_writes == 0 ? 0 : 1;
}
