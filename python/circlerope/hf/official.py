"""The `circle_rope` dict of the authors' published Circle-RoPE code, read and written.

A Qwen2.5-VL checkpoint fine-tuned with the authors' code carries its settings in the model
config as a dict named `circle_rope` (config class Qwen2_5_VLConfig_CircleRoPE; its example
config.json says model_type "qwen2_5_vl" and loads the class through auto_map, while ms-swift
registers the same code under the name "qwen2_5_vl_circle_rope"). Sources read:
github.com/lose4578/CircleRoPE code/{circle_rope.py, modular_qwen2_5_vl_circle_rope.py,
config.json} at 063fb2c4, and the same code in modelscope/ms-swift circle_rope/ at eabfe07d.

from_official_config(d, num_layers) gives (CircleConfig, AgePlan or None); to_official_config
is the inverse. A key or value that the official code would treat differently from what we
compute raises ValueError naming it (TypeError for an argument of the wrong type: a circle_rope that is
no dict, a CircleConfig or AgePlan that is none); nothing is dropped silently.

key               official default   meaning here
----------------  -----------------  ------------------------------------------------------
radius            -1 (!)             a number > 0, or "auto" / "auto-k" (k·|largest centred
                                     coordinate|). Absent means -1, a ring flipped by pi,
                                     which CircleConfig cannot express: refused, as is any
                                     radius <= 0. The official code calls float() on a
                                     number or a string ("10" is 10), and reads any string
                                     holding "auto" with exactly one "-" as auto-k with k the
                                     text after the "-", whatever precedes it; so k cannot
                                     be written with an exponent ("auto-1e-3" fails there).
                                     A boolean is refused (float(true) would be radius 1).
alpha             -1 (!)             a number in [0, 1]. Absent means -1: refused.
method            "circle"           "circle", or "no_circle": no ring, the centred grid
                                     turned into the plane, which is dff_rate 1 here (the
                                     official code then never reads alpha or the radius's
                                     value; we still check them if given).
move_to_origin    false (!)          true/false (also 0/1). The official code tests truth,
                                     so the string "false" would mean true: strings refused.
                                     CircleConfig and the READMEs default to true.
dff_rate          false              beta in [0, 1] blending the ring towards the turned
                                     grid; absent, null, false or 0: off; true: 1.
move_to_positive  false              absent, null, false or 0: off; "auto": shift by |min|;
                                     a number (or a numeric string): |min| + offset. true
                                     means offset 1.0 (float(true)), not "auto".
AGE_mode          absent             absent: every layer Circle-RoPE (there is no
                                     "strategy_1" key). "strategy_2" = lower, "strategy_3" =
                                     upper, "strategy_4" = alternate (even layers, 0-based,
                                     Circle-RoPE). The official lists are written out for
                                     36 layers (Qwen2.5-VL-3B): the authors' code asserts
                                     num_hidden_layers == 36, ms-swift's v1 model uses the
                                     first num_layers entries of the list instead. Other
                                     layer counts are refused.

Other keys are refused, among them ms-swift's v2 example keys circle_r, base and
mrope_section, which no official code reads (such a config runs with radius and alpha -1).

One difference stays: while decoding, the official code gives every layer the Circle-RoPE
rope_deltas, M-RoPE layers included; AgePlan keeps each geometry's own deltas (docs/spec.md §6).
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from typing import Mapping, Optional, Tuple

from .._checks import integer, shown
from ..age import AgePlan
from ..config import CircleConfig

OFFICIAL_LAYERS = 36  # the length of the official AGE lists
AGE_MODES = {"strategy_2": "lower", "strategy_3": "upper", "strategy_4": "alternate"}
KEYS = ("radius", "alpha", "method", "AGE_mode", "move_to_origin", "move_to_positive", "dff_rate")


def _fail(key: str, value, why: str):
    raise ValueError(f"circle_rope[{shown(key)}] = {shown(value)}: {why}")


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _float(value) -> Optional[float]:
    """float(value) as the official code reads a text or a number, or None where that fails:
    a text that is no number, or a number beyond a double's range (a 401-digit integer, whose
    float() raises OverflowError)."""
    try:
        return float(value)
    except (ValueError, OverflowError):
        return None


def _radius(value):
    key = "radius"
    if isinstance(value, str) and "auto" in value:
        if value == "auto":
            return "auto"
        parts = value.split("-")
        if len(parts) != 2:
            _fail(key, value, 'the official code reads "auto-k" as the text on both sides of one "-" '
                  f"(this has {len(parts) - 1}), and fails")
        k = _float(parts[1])
        if k is None or not math.isfinite(k) or k <= 0:
            _fail(key, value, "the scale k of auto-k must be a finite number > 0")
        return f"auto-{k!r}"
    if isinstance(value, bool):
        _fail(key, value, "a boolean (the official code would read it as radius 1 or 0); write a number")
    if not isinstance(value, str) and not _is_number(value):
        _fail(key, value, 'expected a number, "auto" or "auto-k"')
    r = _float(value)
    if r is None and isinstance(value, str):
        _fail(key, value, 'expected a number, "auto" or "auto-k"')
    if r is None or not math.isfinite(r) or r <= 0:
        _fail(key, value, "must be finite and > 0 (the official code takes a negative radius as a ring "
              "turned by pi, which CircleConfig cannot express)")
    return r


def _alpha(value) -> float:
    if not _is_number(value) or not 0 <= value <= 1 or _float(value) is None:
        _fail("alpha", value, "expected a number in [0, 1]")
    return _float(value)


def _flag(key: str, value) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if _is_number(value) and value in (0, 1):
        return bool(value)
    _fail(key, value, "expected true or false (the official code tests truth, so a string like "
          "'false' would mean true)")


def _dff_rate(value) -> float:
    if value is None or isinstance(value, bool):
        return 1.0 if value else 0.0
    if not _is_number(value) or not 0 <= value <= 1 or _float(value) is None:
        _fail("dff_rate", value, "expected false, true or a number in [0, 1]")
    return _float(value)


def _move_to_positive(value):
    key = "move_to_positive"
    if value is None or value is False:
        return None
    if isinstance(value, str) and value == "auto":
        return "auto"
    if value is True:
        return 1.0  # float(True) in the official code
    offset = _float(value) if isinstance(value, str) or _is_number(value) else None
    if offset is None or not math.isfinite(offset):
        _fail(key, value, 'expected false, "auto" or a finite number (the offset)')
    return None if offset == 0 else offset  # the official `if move_to_positive:` skips 0


def _layers(num_layers) -> int:
    return integer(num_layers, "num_layers", 1)


def from_official_config(circle_rope: Mapping, num_layers: int) -> Tuple[CircleConfig, Optional[AgePlan]]:
    """The official `circle_rope` dict as (CircleConfig, AgePlan or None); None means every
    layer uses Circle-RoPE. num_layers: the model's num_hidden_layers. Raises ValueError for
    keys or values the official code would read differently (see the module docstring)."""
    if not isinstance(circle_rope, Mapping):
        raise TypeError(f"circle_rope must be a dict (got {shown(circle_rope)})")
    layers = _layers(num_layers)
    for key in circle_rope:
        if not isinstance(key, str) or key not in KEYS:
            raise ValueError(f"circle_rope[{shown(key)}]: not a key of the official Circle-RoPE config (expected "
                             f"{', '.join(KEYS)})")

    method = circle_rope.get("method", "circle")
    if not isinstance(method, str) or method not in ("circle", "no_circle"):
        _fail("method", method, "expected 'circle' or 'no_circle'")
    ring = method == "circle"
    for key in ("radius", "alpha"):
        if ring and key not in circle_rope:
            raise ValueError(f"circle_rope[{shown(key)}] is absent: the official code then uses -1, which "
                             "CircleConfig cannot express; write it out")
    dff_rate = _dff_rate(circle_rope.get("dff_rate"))
    if not ring:
        dff_rate = 1.0  # no_circle blends the turned grid G with itself: (1 - b)·G + b·G = G
    defaults = CircleConfig()
    circle = CircleConfig(
        radius=_radius(circle_rope["radius"]) if "radius" in circle_rope else defaults.radius,
        alpha=_alpha(circle_rope["alpha"]) if "alpha" in circle_rope else defaults.alpha,
        move_to_origin=_flag("move_to_origin", circle_rope.get("move_to_origin")),
        dff_rate=dff_rate, move_to_positive=_move_to_positive(circle_rope.get("move_to_positive")))

    if "AGE_mode" not in circle_rope:
        return circle, None
    mode = circle_rope["AGE_mode"]
    if not isinstance(mode, str) or mode not in AGE_MODES:
        _fail("AGE_mode", mode, f"expected one of {', '.join(AGE_MODES)} (or no AGE_mode: every layer "
              "Circle-RoPE)")
    if layers != OFFICIAL_LAYERS:
        _fail("AGE_mode", mode, f"the official per-layer lists have {OFFICIAL_LAYERS} layers, the model "
              f"{layers} (the authors' code refuses that; for ms-swift's truncation give AgePlan a "
              "C/M pattern of the first layers instead)")
    return circle, AgePlan(AGE_MODES[mode], layers)


def _positional(x: float) -> str:
    """x without an exponent or a sign ("0.001", not "1e-03"): the official auto-k reader
    splits at "-"."""
    return format(Decimal(repr(float(x))), "f")


def to_official_config(circle: CircleConfig, plan: Optional[AgePlan] = None) -> dict:
    """The official `circle_rope` dict for a CircleConfig and an AGE plan (None: every layer
    Circle-RoPE). Raises ValueError for a plan the official format cannot name."""
    if not isinstance(circle, CircleConfig):
        raise TypeError(f"circle must be a circlerope.CircleConfig (got {shown(type(circle).__name__)})")
    radius = circle.radius
    if isinstance(radius, str):  # CircleConfig checked it: "auto" or "auto-k"
        radius = radius if radius == "auto" else f"auto-{_positional(float(radius[5:]))}"
    else:
        radius = float(radius)
    out = {"alpha": float(circle.alpha), "radius": radius, "method": "circle",
           "move_to_origin": bool(circle.move_to_origin)}
    if float(circle.dff_rate) != 0:
        out["dff_rate"] = float(circle.dff_rate)
    shift = circle.move_to_positive
    if isinstance(shift, str):
        if shift == "auto":
            out["move_to_positive"] = "auto"
        elif shift != "false":
            raise ValueError(f"move_to_positive {shown(shift)} is not a CircleConfig value")
    elif shift is not None and shift is not False and float(shift) != 0:
        out["move_to_positive"] = float(shift)

    if plan is None:
        return out
    if not isinstance(plan, AgePlan):
        raise TypeError(f"plan must be a circlerope.AgePlan or None (got {shown(type(plan).__name__)})")
    if set(plan.pattern) == {"C"}:
        return out  # no AGE_mode: every layer Circle-RoPE, at any layer count
    for mode, name in AGE_MODES.items():
        if len(plan) == OFFICIAL_LAYERS and plan.pattern == AgePlan(name, OFFICIAL_LAYERS).pattern:
            out["AGE_mode"] = mode
            return out
    raise ValueError(f"AGE plan {plan.pattern} ({len(plan)} layers) has no official AGE_mode: the official "
                     f"code names only lower, upper and alternate over {OFFICIAL_LAYERS} layers")
