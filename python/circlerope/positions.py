"""Positions: the 3-D position ids of a batch (get_rope_index), of the tokens decoded after it
(decode_position_ids) and of a token-free layout (layout_positions).

Every position and delta is float32, whatever the scheme and the compat mode: Circle-RoPE's
positions are fractional, the other schemes' are integers held exactly (below 2^24), and
rotary_table takes them all. transformers' own dtypes (int64 for the integer schemes) are
circlerope.hf's business: the functions of circlerope.hf.rope_index_fn stand in for a
release's get_rope_index and return what it returns.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from . import _core
from ._checks import (MAX_TOKENS, check_count, check_tokens, cpu, grids_of, instance, integer, real_numbers,
                      seconds, tensor, text, tokens_of)
from ._ops import ops
from .config import DEFAULT_CIRCLE, DEFAULT_VISION, CircleConfig, VisionConfig

Tensor = torch.Tensor

# The transformers behaviours get_rope_index(compat=...) reproduces, in release order
# (docs/guides/compat.md; the core's compat option names them). "hf-5.3", the former name of
# "hf-5.6", is accepted wherever a mode is.
COMPAT_MODES = ("hf-4.49", "hf-4.52", "hf-5.2", "hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6", "hf-5.18")
# The modes whose rope_deltas count each row's real tokens only (transformers 5.3 on), so that a
# decoded token's position counts the real tokens before it, not the cache's length.
REAL_TOKEN_MODES = ("hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6", "hf-5.18")


def compat_mode(compat) -> str:
    """A compat argument as the core names it: "none" for None, a mode's current name for an
    alias ("hf-5.3" is "hf-5.6"); anything else refused in the core's words."""
    if compat is None:
        return "none"
    try:
        return _core.vision_option("compat", compat, "compat")
    except ValueError as e:
        raise (ValueError if isinstance(compat, str) else TypeError)(str(e)) from None


def get_rope_index(input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                   attention_mask=None, *, scheme: str = "circle",
                   circle: Optional[CircleConfig] = None,
                   vision: Optional[VisionConfig] = None,
                   compat: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """Positions of a batch, with the shapes and meaning of Qwen2.5-VL's get_rope_index.

    Returns (position_ids, rope_deltas): float32 [3, batch, seq_len] (temporal, height, width;
    fractional under Circle-RoPE) and float32 [batch, 1], on input_ids' device, under every
    scheme and compat mode. Masked tokens get 1.0. While decoding, the token at cache position
    p of row b gets p + rope_deltas[b] on all three axes (decode_position_ids).

    scheme: "circle" (Circle-RoPE), "mrope" (Qwen's M-RoPE), "vanilla" (1-D) or "unordered".

    compat: reproduce a Hugging Face transformers release's positions exactly, quirks included:
    "hf-4.49" (4.49-4.51, Qwen's code), "hf-4.52" (4.52-5.1: second_per_grid_ts truncated to
    an integer first), "hf-5.2", "hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6" (5.6-5.17; "hf-5.3" is its
    former name) or "hf-5.18" (5.18 and later); docs/guides/compat.md lists what each differs in,
    and circlerope.hf.compat_for_version maps a release to its mode. None or "none": this
    project's behaviour (equal to hf-4.49 for M-RoPE, except the delta of a padded one-token
    row in a batch without images). circlerope.hf adapts a model, with transformers' dtypes.
    """
    was_tensor = isinstance(input_ids, torch.Tensor)
    input_ids = tensor(input_ids, "input_ids", required=True)
    if not was_tensor and input_ids.numel() == 0:  # [[]] reads as float; an empty batch has no dtype to get wrong
        input_ids = input_ids.to(torch.int64)
    scheme = text(scheme, "scheme")
    compat = text("none" if compat is None else compat, "compat (none or an hf-... mode)")
    c = instance(circle, CircleConfig, "circle", DEFAULT_CIRCLE)
    v = instance(vision, VisionConfig, "vision", DEFAULT_VISION)
    images = grids_of(tensor(image_grid_thw, "image_grid_thw"), "image_grid_thw")
    videos = grids_of(tensor(video_grid_thw, "video_grid_thw"), "video_grid_thw")
    seconds_per_grid = seconds(second_per_grid_ts)
    mask = tokens_of(tensor(attention_mask, "attention_mask"), "attention_mask")
    position_ids, rope_deltas = ops.rope_index(
        cpu(tokens_of(input_ids, "input_ids")), cpu(images), cpu(videos), cpu(seconds_per_grid), cpu(mask),
        scheme, *c._args(), *v._args(), compat)
    if input_ids.device.type != "cpu":
        return position_ids.to(input_ids.device), rope_deltas.to(input_ids.device)
    return position_ids, rope_deltas


def decode_position_ids(rope_deltas, cache_position: int, count: int = 1, *, compat: Optional[str] = None,
                        attention_mask=None) -> Tensor:
    """Positions [3, batch, count] of the tokens decoded at cache positions cache_position ..
    cache_position + count - 1 after a prompt whose get_rope_index gave rope_deltas ([batch, 1]
    or [batch]), float32, on rope_deltas' device; the same on all three axes.

    compat: the rule of get_rope_index's compat mode that made the deltas.
    None (this project's), hf-4.49, hf-4.52, hf-5.2: cache_position + rope_delta (the cache
        counts every token of the padded row).
    hf-5.3-5.5.3, hf-5.5.4, hf-5.6, hf-5.18: the row's real tokens before the new one plus
        rope_delta (these deltas count real tokens only). attention_mask ([batch, L], the
        prompt's or the running one; read by these modes only) says which cached tokens are
        real; positions past its end count as real. Without it every cached token is real.

    These are the rules of each release's forward pass with a cache. generate() differs in
    4.54-4.56 (attention-mask cumsum + delta) and from 5.2 on (each axis's last prompt
    position + 1, below max + 1 after a video from 5.3 on): docs/guides/compat.md. A model patched
    by circlerope.hf runs its release's own decode code and needs none of this.

    Floating deltas (circlerope's, float32) decode as the reference does, in float32:
    float(cache position) + delta. Integer deltas (transformers' int64 rope_deltas of the
    integer schemes) decode as transformers does, in exact integer arithmetic, and each
    position is rounded to float32 once (what transformers' rotary embedding computes with:
    position_ids.float()); past 2^24 a float32 cannot hold every integer, so 2^24 + 1 is
    2^24 there and here.

    cache_position: an integer (Hugging Face's cache_position[0], a one-element tensor, too)."""
    deltas = real_numbers(tensor(rope_deltas, "rope_deltas", required=True), "rope_deltas")
    check_count("rope_deltas", deltas, MAX_TOKENS, "rows")
    first, count = integer(cache_position, "cache_position"), integer(count, "count")
    mode = compat_mode(compat)
    flat = deltas[:, 0] if deltas.dim() == 2 and deltas.size(1) == 1 else deltas
    if flat.dim() != 1:
        raise ValueError(f"rope_deltas must have shape [batch, 1] or [batch], got {list(deltas.shape)}")
    rows = flat.numel()
    real_before = None  # each row's first position before its delta: the cache position
    if mode in REAL_TOKEN_MODES and rows and attention_mask is not None:
        mask = tensor(attention_mask, "attention_mask")
        if mask.dim() != 2 or mask.size(0) != rows:
            raise ValueError(f"attention_mask must have shape [{rows}, L], got {list(mask.shape)}")
        check_tokens("attention_mask", int(mask.size(0)), int(mask.size(1)))
        seen = max(0, min(first, mask.size(1)))
        real_before = [count_seen + (first - seen) for count_seen in (mask.to("cpu")[:, :seen] != 0).sum(-1).tolist()]
    if not deltas.is_floating_point():
        return _integer_positions(flat, first, count, real_before).to(deltas.device)
    values = np.ascontiguousarray(flat.detach().cpu().to(torch.float32).numpy())
    if real_before is None:
        return torch.from_numpy(_core.decode_positions(values, first, count)).to(deltas.device)
    # One row at a time: the rule of a batch of one whose cache holds only real tokens.
    parts = [_core.decode_positions(values[b:b + 1], int(real_before[b]), count) for b in range(rows)]
    return torch.from_numpy(np.concatenate(parts, axis=1)).to(deltas.device)


def _integer_positions(deltas: Tensor, first: int, count: int, real_before) -> Tensor:
    """decode_position_ids of integer deltas [batch]: start + i + delta in int64, as transformers
    adds them, rounded to float32 once; start is the cache position, or real_before[b]. The core
    checks the call (cache position, counts, sizes) on zero deltas first, and its result is the
    output's memory."""
    rows = deltas.numel()
    out = torch.from_numpy(_core.decode_positions(np.zeros(rows, np.float32), first, count))
    if out.numel() == 0:
        return out
    ints = deltas.detach().to("cpu", torch.int64)
    starts = torch.full((rows,), first, dtype=torch.int64) if real_before is None else torch.tensor(
        real_before, dtype=torch.int64)
    b = int(ints.argmax())
    if int(ints[b]) + int(starts.max()) + count - 1 >= 2 ** 63:
        raise ValueError(f"rope_deltas[{b}] = {int(ints[b])}: its decoded positions are beyond int64")
    out.copy_(((ints + starts)[:, None] + torch.arange(count, dtype=torch.int64)).to(torch.float32).expand(3, -1, -1))
    return out


def layout_positions(layout: str, *, scheme: str = "circle", circle: Optional[CircleConfig] = None,
                     vision: Optional[VisionConfig] = None) -> Tuple[Tensor, Tensor]:
    """Positions of one token-free row, e.g. "text:5,image:6x6,video:4x6x6@0.5,text:4"
    (merged token grids, no vision markers): float32 [3, 1, S] and [1, 1]."""
    c = instance(circle, CircleConfig, "circle", DEFAULT_CIRCLE)
    v = instance(vision, VisionConfig, "vision", DEFAULT_VISION)
    pos, deltas = _core.layout_positions(text(layout, "layout"), text(scheme, "scheme"), c._args(), v._args())
    return torch.from_numpy(pos), torch.from_numpy(deltas)
