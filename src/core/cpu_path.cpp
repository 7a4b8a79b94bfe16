// The CPU code path (cpu_path.h): the one probe of the CPU and CIRCLEROPE_ISA, and the one
// decision that the positions and the rotary kernels both take their path from.
#include <cstdlib>
#include <string>

#include "circlerope/detail/cpu_probe.h"
#include "circlerope/detail/fail.h"

namespace circlerope {

std::string_view to_string(Isa v) {
  switch (v) {
    case Isa::automatic: return "automatic";
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512bf16: return "avx512bf16";
  }
  return "?";
}

Isa parse_isa(std::string_view text) {
  for (Isa isa : {Isa::automatic, Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512bf16})
    if (text == to_string(isa)) return isa;
  detail::fail("unknown code path ", detail::quoted(text), " (expected automatic, portable, avx2, avx512 or avx512bf16)");
}

namespace detail {

const CpuProbe& cpu_probe() {
  static const CpuProbe probe = [] {
    CpuProbe p;
#if defined(CIRCLEROPE_HAVE_X86_POSITIONS)
    p.features = detect_cpu_features();
    p.vector_build = true;
#endif
    const char* value = std::getenv(kIsaVariable);
    p.variable_set = value != nullptr && *value != '\0';
    if (p.variable_set) p.variable = value;
    return p;
  }();
  return probe;
}

namespace {

std::size_t index_of(Isa isa) {
  for (std::size_t i = 0; i < kCpuPaths.size(); ++i)
    if (kCpuPaths[i] == isa) return i;
  fail("code path ", static_cast<int>(isa), " is not one of portable, avx2, avx512, avx512bf16");
}

}  // namespace

const IsaStatus& CpuPaths::of(Isa isa) const { return status[index_of(isa)]; }

Isa CpuPaths::resolve(Isa requested) const {
  if (!error.empty()) throw Error(error);
  if (requested == Isa::automatic) return automatic.isa;
  const IsaStatus& s = of(requested);
  if (!s.available) fail("code path '", to_string(requested), "' is not available: ", s.reason);
  return requested;
}

CpuPaths decide_cpu_paths(const CpuProbe& probe, KnownAnswer known_answer) {
  const CpuFeatures& f = probe.features;
  struct Need {
    bool has;
    const char* missing;  // the CPU's first missing requirement
    const char* has_text;  // what the CPU has, for automatic's reason
  };
  const Need needs[] = {{true, nullptr, ""},
                        {f.avx2, f.avx2_missing, "AVX2, FMA and F16C"},
                        {f.avx512, f.avx512_missing, "AVX-512 F/BW/VL"},
                        {f.avx512_bf16, f.avx512_bf16_missing, "AVX-512 F/BW/VL/DQ and AVX512_BF16"}};
  CpuPaths out;
  for (std::size_t i = 0; i < kCpuPaths.size(); ++i) {
    const Isa isa = kCpuPaths[i];
    IsaStatus& s = out.status[i];
    s.isa = isa;
    if (isa != Isa::portable && !probe.vector_build) {
      s.reason = "not compiled into this build (x86-64 only)";
    } else if (!needs[i].has) {
      s.reason = std::string("this CPU or OS lacks it: ") + (needs[i].missing ? needs[i].missing : "?");
    } else if (known_answer && (isa == Isa::avx512 || isa == Isa::avx512bf16) && !known_answer(isa)) {
      s.reason = "its known-answer comparison with avx2 failed on this CPU";
    } else {
      s.available = true;
    }
  }

  Isa forced = Isa::automatic;
  const std::string variable = std::string(kIsaVariable) + "=";
  if (probe.variable_set) {
    bool known = false;
    for (Isa isa : {Isa::automatic, Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512bf16})
      if (probe.variable == to_string(isa)) {
        forced = isa;
        known = true;
      }
    if (!known) {
      out.error = variable + quoted(probe.variable) +
                  " is not a code path (expected portable, avx2, avx512, avx512bf16 or automatic)";
      return out;
    }
  }
  if (forced != Isa::automatic) {
    const std::size_t f_index = index_of(forced);
    if (!out.status[f_index].available) {
      out.error = variable + std::string(to_string(forced)) + " cannot be run here: " + out.status[f_index].reason;
      return out;
    }
    for (std::size_t i = f_index + 1; i < kCpuPaths.size(); ++i)
      if (out.status[i].available) {
        out.status[i].available = false;
        out.status[i].reason = "ruled out by " + variable + std::string(to_string(forced));
      }
    out.automatic = {forced, true, "forced by " + variable + std::string(to_string(forced))};
    return out;
  }

  std::size_t best = 0;
  for (std::size_t i = 0; i < kCpuPaths.size(); ++i)
    if (out.status[i].available) best = i;
  const Isa isa = kCpuPaths[best];
  std::string reason = "automatic: " + std::string(to_string(isa));
  if (best > 0) {
    reason += std::string(", the CPU has ") + needs[best].has_text;
    if (known_answer && (isa == Isa::avx512 || isa == Isa::avx512bf16)) reason += " and the known-answer check passed";
  }
  if (best + 1 < kCpuPaths.size())
    reason += (best > 0 ? "; " : ", ") + std::string(to_string(kCpuPaths[best + 1])) + " is not available: " +
              out.status[best + 1].reason;
  out.automatic = {isa, false, reason};
  return out;
}

}  // namespace detail
}  // namespace circlerope
