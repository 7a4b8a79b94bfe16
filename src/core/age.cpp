// AGE plans (docs/spec.md §6).
#include "circlerope/age.h"

#include "circlerope/detail/fail.h"

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

int AgePlan::layer_geometry(int layer) const {
  if (layer < 0 || layer >= layers())
    detail::fail("layer ", layer, " is out of range for a plan of ", layers(), " layers");
  return layer_geometry_[static_cast<size_t>(layer)];
}

std::string AgePlan::pattern() const {
  std::string s;
  for (int g : layer_geometry_) s += letter(schemes_[static_cast<size_t>(g)]);
  return s;
}

AgePlan::AgePlan(std::string_view spec, std::int64_t layers) {
  if (layers < 1 || layers > kMaxLayers)
    detail::fail("AGE plan needs 1..", kMaxLayers, " layers (got ", layers, ")");
  const auto n = static_cast<int>(layers);
  std::string pattern(static_cast<size_t>(n), 'C');
  const int half = n / 2;  // integer division, as docs/spec.md §6 says
  if (spec == "all" || spec == "strategy_1") {
  } else if (spec == "lower" || spec == "strategy_2") {
    for (int l = half; l < n; ++l) pattern[static_cast<size_t>(l)] = 'M';
  } else if (spec == "upper" || spec == "strategy_3") {
    for (int l = 0; l < half; ++l) pattern[static_cast<size_t>(l)] = 'M';
  } else if (spec == "alternate" || spec == "strategy_4") {
    for (int l = 1; l < n; l += 2) pattern[static_cast<size_t>(l)] = 'M';
  } else {
    if (spec.empty() || spec.size() > static_cast<size_t>(n))
      detail::fail("AGE plan ", detail::quoted(spec), ": expected all, lower, upper, alternate, strategy_1..4, or a "
                   "pattern of C/M/V/U letters no longer than the ", n, " layers");
    for (size_t i = 0; i < spec.size(); ++i)
      if (spec[i] != 'C' && spec[i] != 'M' && spec[i] != 'V' && spec[i] != 'U')
        detail::fail("AGE plan ", detail::quoted(spec), ": letter ", i, " ", detail::quoted(spec.substr(i, 1)),
                     " is not C (circle), M (mrope), V (vanilla) or U (unordered)");
    for (int l = 0; l < n; ++l) pattern[static_cast<size_t>(l)] = spec[static_cast<size_t>(l) % spec.size()];
  }
  for (char c : pattern) {
    const Scheme s = c == 'C' ? Scheme::circle
                   : c == 'M' ? Scheme::mrope
                   : c == 'V' ? Scheme::vanilla
                              : Scheme::unordered;
    int index = 0;
    while (index < static_cast<int>(schemes_.size()) && schemes_[static_cast<size_t>(index)] != s) ++index;
    if (index == static_cast<int>(schemes_.size())) schemes_.push_back(s);
    layer_geometry_.push_back(index);
  }
}

AgePlan make_age_plan(std::string_view spec, int layers) { return AgePlan(spec, layers); }

const Positions& AgePositions::layer(int l) const {
  const int g = plan.layer_geometry(l);  // range check
  if (geometries.size() != plan.schemes().size())
    detail::fail("AGE positions hold ", geometries.size(), " geometries for a plan of ", plan.schemes().size(),
                 " (use age_rope_index)");
  return geometries[static_cast<size_t>(g)];
}

AgePositions age_rope_index(const RopeIndexInput& input, const VisionConfig& vision,
                            const AgePlan& plan, const CircleConfig& circle) {
  AgePositions out{plan, {}};
  for (Scheme s : plan.schemes()) out.geometries.push_back(rope_index(input, vision, {s, circle}));
  return out;
}

}  // namespace circlerope
