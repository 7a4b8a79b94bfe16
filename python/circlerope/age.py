"""AGE, a geometry per layer (docs/spec.md §6): the plan (AgePlan), and the module level of the rotation,
RotaryEmbedding, whose forward gives the RotaryAngles of a batch: positions and one angle
table per distinct geometry of the plan, which every layer with that geometry shares.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from . import _core
from ._checks import instance, integer, plain, shown, text
from .config import DEFAULT_CIRCLE, DEFAULT_ROTARY, DEFAULT_VISION, CircleConfig, RotaryConfig, VisionConfig
from .positions import decode_position_ids, get_rope_index
from .rotary import apply_rotary, rotary_table

Tensor = torch.Tensor


class AgePlan:
    """A geometry per layer (docs/spec.md §6): "all", "lower", "upper", "alternate" (the paper's best),
    "strategy_1".."strategy_4", or a pattern of C/M/V/U letters repeated to `layers`
    (1..100000): AgePlan("alternate", 36)."""

    def __init__(self, spec: str, layers: int):
        # The core checks both (a plan is valid by construction).
        self.pattern, self.schemes, self._layer_geometry = _core.age_plan(
            text(spec, "AgePlan spec"), integer(layers, "AgePlan layers"))
        self.spec = spec

    def __len__(self) -> int:
        return len(self._layer_geometry)

    @property
    def layers(self) -> int:
        return len(self)

    def _check(self, layer: int) -> int:
        value = integer(layer, "layer")
        if not 0 <= value < len(self):
            raise ValueError(f"layer {value} is outside the plan's {len(self)} layers")
        return value

    def geometry(self, layer: int) -> int:
        """Index into `schemes` of the geometry layer `layer` uses."""
        return self._layer_geometry[self._check(layer)]

    def layer_scheme(self, layer: int) -> str:
        return self.schemes[self.geometry(layer)]

    def __repr__(self) -> str:
        return f"AgePlan({self.spec!r}, layers={len(self)}: {self.pattern})"

    def __eq__(self, other) -> bool:
        """Two plans are equal when every layer has the same geometry: AgePlan("alternate", 4)
        equals AgePlan("CMCM", 4) (their spellings differ, their layers do not)."""
        if not isinstance(other, AgePlan):
            return NotImplemented
        return [self.layer_scheme(i) for i in range(len(self))] == [other.layer_scheme(i) for i in range(len(other))]

    def __hash__(self) -> int:
        return hash(tuple(self.layer_scheme(i) for i in range(len(self))))


class RotaryAngles:
    """Positions and angle tables of one forward pass under an AGE plan: one table per
    distinct geometry, shared by its layers. Returned by RotaryEmbedding's forward."""

    def __init__(self, plan: AgePlan, rotary: RotaryConfig, position_ids: Dict[str, Tensor],
                 rope_deltas: Dict[str, Tensor]):
        self.plan, self.rotary = plan, rotary
        self.position_ids = position_ids  # scheme -> float32 [3, B, S]
        self.rope_deltas = rope_deltas    # scheme -> float32 [B, 1]
        self.tables = {s: rotary_table(p, rotary) for s, p in position_ids.items()}

    def table(self, layer: int) -> Tensor:
        """float32 [B, S, rotary_dim]: cos then sin, the angles layer `layer` uses."""
        return self.tables[self.plan.layer_scheme(layer)]

    def apply(self, layer: int, q: Tensor, k: Tensor, *, qk_layout: str = "bhsd") -> Tuple[Tensor, Tensor]:
        """q and k rotated by layer `layer`'s table (apply_rotary, with the config's pairing)."""
        return apply_rotary(q, k, self.table(layer), pairing=self.rotary.pairing, qk_layout=qk_layout)

    def decode(self, cache_position: int, count: int = 1) -> "RotaryAngles":
        """The angles of the next `count` tokens (decode_position_ids of each geometry's own
        rope_deltas; the reference gives every layer the Circle-RoPE deltas, see docs/explanation/differences.md)."""
        positions = {s: decode_position_ids(d, cache_position, count) for s, d in self.rope_deltas.items()}
        return RotaryAngles(self.plan, self.rotary, positions, self.rope_deltas)


class RotaryEmbedding(torch.nn.Module):
    """Per-layer rotary angles for an AGE plan. Holds no parameters.

    rope = RotaryEmbedding(AgePlan("alternate", 36), rotary=RotaryConfig())
    angles = rope(input_ids, image_grid_thw, attention_mask=mask)  # positions once per geometry
    q, k = angles.apply(layer, q, k)
    """

    def __init__(self, plan: AgePlan, *, rotary: Optional[RotaryConfig] = None,
                 circle: Optional[CircleConfig] = None, vision: Optional[VisionConfig] = None):
        super().__init__()
        if not isinstance(plan, AgePlan):
            raise TypeError(f"plan must be a circlerope.AgePlan, e.g. AgePlan('alternate', layers) (got "
                            f"{shown(plain(plan))})")
        self.plan = plan
        self.rotary = instance(rotary, RotaryConfig, "rotary", DEFAULT_ROTARY)
        self.circle = instance(circle, CircleConfig, "circle", DEFAULT_CIRCLE)
        self.vision = instance(vision, VisionConfig, "vision", DEFAULT_VISION)

    def forward(self, input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                attention_mask=None) -> RotaryAngles:
        positions, deltas = {}, {}
        for scheme in self.plan.schemes:
            positions[scheme], deltas[scheme] = get_rope_index(
                input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
                scheme=scheme, circle=self.circle, vision=self.vision)
        return RotaryAngles(self.plan, self.rotary, positions, deltas)

    def extra_repr(self) -> str:
        return f"plan={self.plan.pattern}, rotary={self.rotary}, circle={self.circle}"

