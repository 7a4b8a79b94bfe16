// Uses the installed headers and libraries: positions of "text:2,image:2x2" under circle,
// then the rotation of one query head by those positions (forward, then backward).
#include <cmath>
#include <cstdio>
#include <vector>

#include <circlerope/kernels.h>  // the rotation's former header name still compiles
#include <circlerope/positions.h>
#include <circlerope/rotary.h>

int main() {
  const auto segments = circlerope::parse_layout("text:2,image:2x2,text:1");
  const auto p = circlerope::layout_positions(segments, {}, {});
  // The text token after the ring continues at max(ring) + 1 > 2; all positions finite.
  for (float v : p.position_ids)
    if (!std::isfinite(v)) return 1;
  if (p.seq_len != 7 || !(p.at(0, 0, 6) > 2.0f)) return 1;

  circlerope::RotaryConfig rotary;
  rotary.rotary_dim = 8;
  rotary.sections = {2, 1, 1};
  const auto table = circlerope::make_rotary_table(rotary, p);
  std::vector<float> q(7 * 8, 1.0f);
  const auto view = circlerope::bshd(q.data(), circlerope::DType::float32, 1, 7, 1, 8);
  circlerope::rotate(table, view);
  circlerope::RotaryParams back;
  back.direction = circlerope::Direction::backward;
  circlerope::rotate(table, view, back);
  for (float v : q)
    if (std::fabs(v - 1.0f) > 1e-5f) return 1;
  std::printf("consumer ok: last position %.4f, rotation round trip exact to 1e-5\n", p.at(0, 0, 6));
  return 0;
}
