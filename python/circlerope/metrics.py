"""Coupling metrics of a geometry: PTD, the paper's Per-Token Distance between text and image
tokens in index space, and the RoPE kernel deviation, what attention sees of it (docs/spec.md §5)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import torch

from . import _core
from ._checks import grids_of, instance, real_numbers, seconds, tensor, text, tokens_of
from .config import DEFAULT_CIRCLE, DEFAULT_ROTARY, DEFAULT_VISION, CircleConfig, RotaryConfig, VisionConfig


@dataclasses.dataclass(frozen=True)
class CouplingMetrics:
    """PTD (the paper's Per-Token Distance, index space) and the RoPE kernel deviation (what
    attention sees), means over blocks; `blocks` and `rows` hold the per-block and per-row
    figures. NaN when no row has both text and a vision block."""

    ptd: float
    rope_kernel_deviation: float
    blocks: list
    rows: list


def _int64_numpy(t, name: str, dims: int, grids: bool = False) -> Optional[np.ndarray]:
    t = tensor(t, name)
    if t is None:
        return None
    if t.is_floating_point() or t.is_complex():
        raise ValueError(f"{name} must hold integers, got {t.dtype}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimension(s), got shape {list(t.shape)}")
    if grids:
        grids_of(t, name)
    else:
        tokens_of(t, name)
    return np.ascontiguousarray(t.detach().cpu().to(torch.int64).numpy())


def ptd(input_ids=None, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
        attention_mask=None, *, layout: Optional[str] = None, scheme: str = "circle",
        circle: Optional[CircleConfig] = None, vision: Optional[VisionConfig] = None,
        rotary: Optional[RotaryConfig] = None) -> CouplingMetrics:
    """Coupling metrics of a batch (Qwen-style inputs) or of one token-free `layout`
    ("text:5,image:3x3"), under `scheme`. The paper's Table 1 toy:
    ptd(layout="text:5,image:3x3", scheme="vanilla").ptd == 2.222..."""
    c = instance(circle, CircleConfig, "circle", DEFAULT_CIRCLE)
    v = instance(vision, VisionConfig, "vision", DEFAULT_VISION)
    r = instance(rotary, RotaryConfig, "rotary", DEFAULT_ROTARY)
    scheme = text(scheme, "scheme")
    if layout is not None:
        text(layout, "ptd: layout")
        if input_ids is not None:
            raise TypeError("ptd: give either input_ids or layout, not both")
        out = _core.layout_metrics(layout, scheme, c._args(), v._args(), r._args())
    else:
        if input_ids is None:
            raise TypeError("ptd: input_ids or layout is required")
        per_grid = seconds(second_per_grid_ts)
        if per_grid is not None:
            real_numbers(per_grid, "second_per_grid_ts")
            if per_grid.dim() != 1:
                raise ValueError(f"second_per_grid_ts must be 1-D (one value per video), got shape "
                                 f"{list(per_grid.shape)}")
        out = _core.batch_metrics(
            _int64_numpy(input_ids, "input_ids", 2), _int64_numpy(attention_mask, "attention_mask", 2),
            _int64_numpy(image_grid_thw, "image_grid_thw", 2, grids=True),
            _int64_numpy(video_grid_thw, "video_grid_thw", 2, grids=True),
            None if per_grid is None else np.ascontiguousarray(per_grid.detach().cpu().to(torch.float64).numpy()),
            scheme, c._args(), v._args(), r._args())
    return CouplingMetrics(out["ptd"], out["rope_kernel_deviation"], out["blocks"], out["rows"])

