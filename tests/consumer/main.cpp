// Uses the installed headers and library: positions of "text:2,image:2x2" under circle.
#include <cmath>
#include <cstdio>

#include <circlerope/positions.h>

int main() {
  const auto segments = circlerope::parse_layout("text:2,image:2x2,text:1");
  const auto p = circlerope::layout_positions(segments, {}, {});
  // The text token after the ring continues at max(ring) + 1 > 2; all positions finite.
  for (float v : p.position_ids)
    if (!std::isfinite(v)) return 1;
  if (p.seq_len != 7 || !(p.at(0, 0, 6) > 2.0f)) return 1;
  std::printf("consumer ok: last position %.4f\n", p.at(0, 0, 6));
  return 0;
}
