// circlerope — detail, not API: the one probe behind cpu_path.h. The process reads the CPU
// (CPUID, XGETBV: cpu_features.h) and CIRCLEROPE_ISA once, here; decide_cpu_paths turns what
// it read into the paths' availability, automatic's choice and its reason. The positions
// (src/core/positions_path.cpp) decide with it as it is; the rotary kernels
// (src/cpu/dispatch.cpp) pass their known-answer comparison, which only they can run (core
// does not depend on the kernels), and which can only take an AVX-512 path away. Public like
// detail/fail.h, so that both layers include only public headers; no stability promise.
#pragma once

#include <array>
#include <string>

#include "circlerope/cpu_path.h"
#include "circlerope/detail/cpu_features.h"

namespace circlerope::detail {

// Everything the decision reads from the machine and the environment.
struct CpuProbe {
  CpuFeatures features;
  bool vector_build = false;  // the x86-64 vector paths are compiled into this build
  bool variable_set = false;  // CIRCLEROPE_ISA is set and not empty
  std::string variable;       // its value
};

// Read once per process (thread-safe), from this CPU and the environment.
const CpuProbe& cpu_probe();

// A known-answer comparison of one path with a trusted one, true when they agree; asked only
// for a path the build and CPU have.
using KnownAnswer = bool (*)(Isa);

// The paths portable, avx2, avx512, avx512bf16, in that order.
inline constexpr std::array<Isa, 4> kCpuPaths = {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512bf16};

struct CpuPaths {
  std::array<IsaStatus, 4> status;  // of kCpuPaths
  CpuPath automatic;                // what `automatic` runs and why
  std::string error;                // not empty: CIRCLEROPE_ISA is unusable, every choice throws this
  // The status of a path; Error for automatic or a value outside the enum.
  const IsaStatus& of(Isa isa) const;
  // `requested`, or automatic's choice for Isa::automatic. Throws Error with `error`, or
  // naming a path that is not available and why.
  Isa resolve(Isa requested) const;
};

// The decision, a pure function so that tests can feed it any CPU and any CIRCLEROPE_ISA.
CpuPaths decide_cpu_paths(const CpuProbe& probe, KnownAnswer known_answer = nullptr);

}  // namespace circlerope::detail
