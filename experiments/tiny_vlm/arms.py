"""Arms: a per-layer geometry plan (AGE), the Circle-RoPE setting and a frequency layout (which
position axis each rotary frequency reads: circlerope.RotaryConfig.frequency_layout); and two
settings off in every arm but those named for them: a scale of the M-RoPE image block
(geometry.scale_blocks) and patch positions (a fixed 2-D feature of each patch's row and column,
model.patch_position_table).

Named arms (used verbatim in every output):

    vanilla             1-D raster positions in every layer
    unordered           every patch of an image at one position
    mrope               Qwen2-VL M-RoPE, chunked frequencies (t | h | w)
    circle              Circle-RoPE (R 10, alpha 0.5), chunked
    age-alternate       circle and mrope layers alternating (CMCM...), chunked
    mrope-interleaved   M-RoPE, interleaved frequencies (Qwen3-VL)
    circle-interleaved  Circle-RoPE, interleaved frequencies
    circle-small        Circle-RoPE with R = 2.661: a ring as spread as M-RoPE's grids (PTD 0)
    mrope-spread        M-RoPE with the image block scaled by 3.758: as spread as the R 10 ring,
                        not equidistant from the text
    mrope-patchpos      mrope, and every patch has patch positions
    circle-patchpos     circle, and every patch has patch positions

R = 2.661 and the scale 3.758 make the extents equal (geometry.matched_extent, docs/experiment.md
"The v3 design"): a block's extent is the largest range of its positions on one axis; over the
training grids (4x4, 4x6, 6x6 cells) M-RoPE's is 13/3 on average and the R 10 ring's 16.284, so
R = 10 x (13/3) / 16.284 and the scale is 16.284 / (13/3) (a test recomputes both).

Any other arm is a spec of key=value items joined by ':' (its name is the spec itself):
    plan=CCMM:r=5:a=0.25:frequency_layout=interleaved:s=2:patch=on
plan is an AGE plan (all/lower/upper/alternate or a C/M/V/U pattern), r the radius (a number
or auto / auto-k), a alpha, frequency_layout chunked or interleaved, s the scale of the M-RoPE
layers' image block (a number in (0, 1000], 1 unscaled; the plan needs an M layer), patch on or
off (patch positions).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Union

from .limits import NUMBER, shown


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    plan: str = "M"
    radius: Union[float, str] = 10.0
    alpha: float = 0.5
    frequency_layout: str = "chunked"
    scale: float = 1.0              # the M-RoPE image block's coordinates times this (geometry.scale_blocks)
    patch_positions: bool = False   # patches get a fixed 2-D feature of their row and column

    def describe(self) -> str:
        return (f"plan {self.plan}, radius {self.radius}, alpha {self.alpha}, {self.frequency_layout} frequencies"
                + (f", M-RoPE block x{self.scale:g}" if self.scale != 1 else "")
                + (", patch positions" if self.patch_positions else ""))


SMALL_RADIUS = 2.661   # geometry.matched_extent: the ring as spread as M-RoPE over the training grids
SPREAD_SCALE = 3.758   # and M-RoPE as spread as the R 10 ring


NAMED: Dict[str, Arm] = {a.name: a for a in [
    Arm("vanilla", plan="V"),
    Arm("unordered", plan="U"),
    Arm("mrope", plan="M"),
    Arm("circle", plan="C"),
    Arm("age-alternate", plan="alternate"),
    Arm("mrope-interleaved", plan="M", frequency_layout="interleaved"),
    Arm("circle-interleaved", plan="C", frequency_layout="interleaved"),
    Arm("circle-small", plan="C", radius=SMALL_RADIUS),
    Arm("mrope-spread", plan="M", scale=SPREAD_SCALE),
    Arm("mrope-patchpos", plan="M", patch_positions=True),
    Arm("circle-patchpos", plan="C", patch_positions=True),
]}
ALL = list(NAMED)


def parse_arm(spec: str) -> Arm:
    """A named arm or a key=value spec; raises ValueError naming the offending part."""
    if spec in NAMED:
        return NAMED[spec]
    if "=" not in spec:
        raise ValueError(f"unknown arm {shown(spec)} (named arms: {', '.join(ALL)}; or a spec such as "
                         "plan=CM:r=5:a=0.5:frequency_layout=interleaved:s=2:patch=on)")
    fields: Dict[str, object] = {}
    for item in spec.split(":"):
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise ValueError(f"arm {shown(spec)}: {shown(item)} is not key=value")
        if key == "plan":
            fields["plan"] = value
        elif key == "r":
            if value == "auto" or value.startswith("auto-"):
                fields["radius"] = value
            else:
                fields["radius"] = _number(spec, key, value)
        elif key == "a":
            fields["alpha"] = _number(spec, key, value)
        elif key == "frequency_layout":
            if value not in ("chunked", "interleaved"):
                raise ValueError(f"arm {shown(spec)}: frequency_layout {shown(value)} (expected chunked or interleaved)")
            fields["frequency_layout"] = value
        elif key == "s":
            fields["scale"] = _number(spec, key, value)
        elif key == "patch":
            if value not in ("on", "off"):
                raise ValueError(f"arm {shown(spec)}: patch {shown(value)} (expected on or off)")
            fields["patch_positions"] = value == "on"
        else:
            raise ValueError(f"arm {shown(spec)}: unknown key {shown(key)} "
                             "(expected plan, r, a, frequency_layout, s, patch)")
    return Arm(name=spec, **fields)


MAX_SCALE = 1000.0


def check_scale(arm: Arm, layers: int) -> None:
    """The scale: a number in (0, MAX_SCALE], and, when it is not 1, an M layer in the plan for it
    to act on; ValueError otherwise."""
    import circlerope
    if type(arm.scale) not in (int, float) or not 0 < arm.scale <= MAX_SCALE:
        raise ValueError(f"the scale s must be a number in (0, {MAX_SCALE:g}], got {shown(arm.scale)}")
    if arm.scale != 1 and "mrope" not in circlerope.AgePlan(arm.plan, layers).schemes:
        raise ValueError(f"s={arm.scale:g} scales M-RoPE image blocks, and plan {shown(arm.plan)} has no M layer")


def _number(spec: str, key: str, value: str) -> float:
    """A number by the library's grammar (decimal; no inf, nan, hex or '_'); its range is the
    library's (circlerope.CircleConfig, which plan.resolve and checkpoint.check_run call)."""
    if len(value) > 100 or not NUMBER.fullmatch(value):
        raise ValueError(f"arm {shown(spec)}: {key}={shown(value)} is not a number")
    return float(value)


def parse_arms(text: str) -> List[Arm]:
    names = [s.strip() for s in text.split(",")]
    if not text.strip() or any(not s for s in names):
        raise ValueError(f"--arms {shown(text)}: empty arm name")
    arms = [parse_arm(s) for s in names]
    if len({a.name for a in arms}) != len(arms):
        raise ValueError(f"--arms {shown(text)}: an arm is listed twice")
    return arms
