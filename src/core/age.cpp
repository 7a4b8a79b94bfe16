// AGE plans (SPEC 6).
#include "circlerope/age.h"

#include "fail.h"

namespace circlerope {

namespace {

char letter(Scheme s) {
  switch (s) {
    case Scheme::circle: return 'C';
    case Scheme::mrope: return 'M';
    case Scheme::vanilla: return 'V';
    case Scheme::unordered: return 'U';
  }
  return '?';
}

}  // namespace

Scheme AgePlan::layer_scheme(int layer) const {
  if (layer < 0 || layer >= layers())
    detail::fail("layer ", layer, " is out of range for a plan of ", layers(), " layers");
  return schemes[static_cast<size_t>(layer_geometry[static_cast<size_t>(layer)])];
}

std::string AgePlan::pattern() const {
  std::string s;
  for (int g : layer_geometry) s += letter(schemes[static_cast<size_t>(g)]);
  return s;
}

AgePlan make_age_plan(std::string_view spec, int layers) {
  if (layers < 1 || layers > 100000) detail::fail("AGE plan needs 1..100000 layers (got ", layers, ")");
  std::string pattern(static_cast<size_t>(layers), 'C');
  const int half = layers / 2;  // integer division, as SPEC 6 says
  if (spec == "all" || spec == "strategy_1") {
  } else if (spec == "lower" || spec == "strategy_2") {
    for (int l = half; l < layers; ++l) pattern[l] = 'M';
  } else if (spec == "upper" || spec == "strategy_3") {
    for (int l = 0; l < half; ++l) pattern[l] = 'M';
  } else if (spec == "alternate" || spec == "strategy_4") {
    for (int l = 1; l < layers; l += 2) pattern[l] = 'M';
  } else {
    if (spec.empty() || spec.size() > static_cast<size_t>(layers))
      detail::fail("AGE plan ", detail::quoted(spec), ": expected all, lower, upper, alternate, strategy_1..4, or a "
                   "pattern of C/M/V/U letters no longer than the ", layers, " layers");
    for (size_t i = 0; i < spec.size(); ++i)
      if (spec[i] != 'C' && spec[i] != 'M' && spec[i] != 'V' && spec[i] != 'U')
        detail::fail("AGE plan ", detail::quoted(spec), ": letter ", i, " ", detail::quoted(spec.substr(i, 1)),
                     "' is not C (circle), M (mrope), V (vanilla) or U (unordered)");
    for (int l = 0; l < layers; ++l) pattern[l] = spec[static_cast<size_t>(l) % spec.size()];
  }
  AgePlan plan;
  for (char c : pattern) {
    const Scheme s = c == 'C' ? Scheme::circle
                   : c == 'M' ? Scheme::mrope
                   : c == 'V' ? Scheme::vanilla
                              : Scheme::unordered;
    int index = 0;
    while (index < static_cast<int>(plan.schemes.size()) && plan.schemes[index] != s) ++index;
    if (index == static_cast<int>(plan.schemes.size())) plan.schemes.push_back(s);
    plan.layer_geometry.push_back(index);
  }
  return plan;
}

const Positions& AgePositions::layer(int l) const {
  plan.layer_scheme(l);  // range check
  return geometries[static_cast<size_t>(plan.layer_geometry[static_cast<size_t>(l)])];
}

AgePositions age_rope_index(const RopeIndexInput& input, const VisionConfig& vision,
                            const AgePlan& plan, const CircleConfig& circle) {
  if (plan.layer_geometry.empty()) detail::fail("AGE plan has no layers (use make_age_plan)");
  AgePositions out{plan, {}};
  for (Scheme s : plan.schemes) out.geometries.push_back(rope_index(input, vision, {s, circle}));
  return out;
}

}  // namespace circlerope
