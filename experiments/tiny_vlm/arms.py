"""Arms: a per-layer geometry plan (AGE), the Circle-RoPE setting and a frequency layout (which
position axis each rotary frequency reads: circlerope.RotaryConfig.frequency_layout).

Named arms (used verbatim in every output):

    vanilla             1-D raster positions in every layer
    unordered           every patch of an image at one position
    mrope               Qwen2-VL M-RoPE, chunked frequencies (t | h | w)
    circle              Circle-RoPE (R 10, alpha 0.5), chunked
    age-alternate       circle and mrope layers alternating (CMCM...), chunked
    mrope-interleaved   M-RoPE, interleaved frequencies (Qwen3-VL)
    circle-interleaved  Circle-RoPE, interleaved frequencies

Any other arm is a spec of key=value items joined by ':' (its name is the spec itself):
    plan=CCMM:r=5:a=0.25:frequency_layout=interleaved
plan is an AGE plan (all/lower/upper/alternate or a C/M/V/U pattern), r the radius (a number
or auto / auto-k), a alpha, frequency_layout chunked or interleaved.
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

    def describe(self) -> str:
        return f"plan {self.plan}, radius {self.radius}, alpha {self.alpha}, {self.frequency_layout} frequencies"


NAMED: Dict[str, Arm] = {a.name: a for a in [
    Arm("vanilla", plan="V"),
    Arm("unordered", plan="U"),
    Arm("mrope", plan="M"),
    Arm("circle", plan="C"),
    Arm("age-alternate", plan="alternate"),
    Arm("mrope-interleaved", plan="M", frequency_layout="interleaved"),
    Arm("circle-interleaved", plan="C", frequency_layout="interleaved"),
]}
ALL = list(NAMED)


def parse_arm(spec: str) -> Arm:
    """A named arm or a key=value spec; raises ValueError naming the offending part."""
    if spec in NAMED:
        return NAMED[spec]
    if "=" not in spec:
        raise ValueError(f"unknown arm {shown(spec)} (named arms: {', '.join(ALL)}; or a spec such as "
                         "plan=CM:r=5:a=0.5:frequency_layout=interleaved)")
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
        else:
            raise ValueError(f"arm {shown(spec)}: unknown key {shown(key)} (expected plan, r, a, frequency_layout)")
    return Arm(name=spec, **fields)


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
