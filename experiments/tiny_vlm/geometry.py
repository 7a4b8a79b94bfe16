"""What the experiment does with the library's positions beyond the library: the extent of an
image block, the ring radius and M-RoPE scale that make two geometries equally spread, an M-RoPE
whose image block is scaled, and the coupling metrics of such positions.

circlerope has no scaled M-RoPE (docs/spec.md §2: a block's coordinate is (τ, r, q)), and its
metrics (circlerope.ptd) take a scheme, not positions. So `scale_blocks` starts from the
library's own M-RoPE positions (circlerope.get_rope_index) and only stretches each image block
about its anchor, moving what follows as the library's placement rule does (spec §1.3: `next` is
one more than the largest value so far); `coupling` is spec §5 on given positions, and a test
checks it against circlerope.ptd on the library's positions of every scheme the arms use.
"""

from __future__ import annotations

import functools
from typing import Dict, Sequence, Tuple

import torch

import circlerope

AXES = ("t", "h", "w")


def block_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor, image_token: int) -> torch.Tensor:
    """bool [B, S]: the real tokens of each row's image block."""
    return (input_ids == image_token) & (attention_mask != 0)


def _one_block(block: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(has a block [B], its first index [B], its last index [B]); ValueError when a row's block
    is not one contiguous run (the experiment's sequences hold one image)."""
    s = block.shape[1]
    has = block.any(1)
    first = block.long().argmax(1)
    last = s - 1 - block.flip(1).long().argmax(1)
    if bool((has & (block.sum(1) != last - first + 1)).any()):
        raise ValueError("scale_blocks: a row holds more than one image block")
    return has, first, last


def scale_blocks(position_ids: torch.Tensor, rope_deltas: torch.Tensor, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor, image_token: int, scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE positions [3, B, S] and deltas [B, 1] of circlerope.get_rope_index(scheme="mrope")
    with each row's image block stretched about its anchor c: a block token at c + P gets
    c + scale * P, and every real token after the block moves by (scale - 1) * m, m the block's
    largest coordinate on any axis, so that the text after it starts at one more than the
    block's largest value, as the library places text after a block (spec §1.3); the deltas move
    with it. Padding keeps its 1.0. scale 1 returns the inputs."""
    if scale == 1:
        return position_ids, rope_deltas
    block = block_mask(input_ids, attention_mask, image_token)
    has, first, last = _one_block(block)
    pos = position_ids.double()
    anchor = pos[0].gather(1, first[:, None])                         # [B, 1]: τ = 0 for an image
    offset = pos - anchor[None]                                       # [3, B, S]
    largest = torch.where(block[None], offset, torch.full_like(offset, -torch.inf)).amax((0, 2))
    largest = torch.where(has, largest, torch.zeros_like(largest))    # [B]
    index = torch.arange(pos.shape[2])
    after = (index[None, :] > last[:, None]) & has[:, None] & (attention_mask != 0)
    shift = ((scale - 1) * largest)[:, None]                         # [B, 1]
    out = torch.where(block[None], anchor[None] + scale * offset, torch.where(after[None], pos + shift[None], pos))
    deltas = rope_deltas.double() + shift * has[:, None]
    return out.to(position_ids.dtype), deltas.to(rope_deltas.dtype)


def extent(position_ids: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """The extent of each row's block [B]: the largest range (max - min) of its positions on one
    axis (0 for a row without a block)."""
    pos = position_ids.double()
    hi = torch.where(block[None], pos, torch.full_like(pos, -torch.inf)).amax(2)
    lo = torch.where(block[None], pos, torch.full_like(pos, torch.inf)).amin(2)
    span = (hi - lo).amax(0)
    return torch.where(block.any(1), span, torch.zeros_like(span))


def layout_extent(h: int, w: int, scheme: str, radius: float = 10.0, scale: float = 1.0) -> float:
    """The extent of one h x w (cells) image after a text token, by circlerope.layout_positions
    (under mrope, scaled by `scale`)."""
    pos, _ = circlerope.layout_positions(f"text:1,image:{h}x{w},text:1", scheme=scheme,
                                         circle=circlerope.CircleConfig(radius=radius))
    block = torch.zeros(1, pos.shape[2], dtype=torch.bool)
    block[0, 1:1 + h * w] = True
    return float(extent(pos, block)[0]) * (scale if scheme == "mrope" else 1.0)


def matched_extent(grids: Sequence[Tuple[int, int]], radius: float = 10.0) -> Dict[str, float]:
    """The mean extent over `grids` (cells) of M-RoPE (E_m) and of the ring of `radius` (E_c), and
    what makes them equal: the ring radius radius * E_m / E_c (a ring's positions are the radius
    times those of the unit ring, so its extent is proportional to it) and the M-RoPE block scale
    E_c / E_m."""
    e_m = sum(layout_extent(h, w, "mrope") for h, w in grids) / len(grids)
    e_c = sum(layout_extent(h, w, "circle", radius) for h, w in grids) / len(grids)
    return {"mrope": e_m, "circle": e_c, "radius": radius * e_m / e_c, "scale": e_c / e_m}


# ------------------------------------------------------------ coupling metrics ---
@functools.lru_cache(maxsize=16)
def frequencies(sections: Tuple[int, int, int], theta: float, layout: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """(inverse frequency [D/2], axis index 0/1/2 [D/2]) of spec §4: inv_freq[i] = theta^(-2i/D);
    chunked: the first sections[0] read t, the next sections[1] h, the rest w; interleaved: i
    reads h if i mod 3 = 1 and i < 3 sections[1], w if i mod 3 = 2 and i < 3 sections[2], else t."""
    half = sum(sections)
    i = torch.arange(half, dtype=torch.float64)
    inv = theta ** (-2.0 * i / (2 * half))
    if layout == "chunked":
        axis = torch.tensor([0] * sections[0] + [1] * sections[1] + [2] * sections[2])
    elif layout == "interleaved":
        axis = torch.tensor([1 if k % 3 == 1 and k < 3 * sections[1] else 2 if k % 3 == 2 and k < 3 * sections[2]
                             else 0 for k in range(half)])
    else:
        raise ValueError(f"frequencies: layout {layout!r} (expected chunked or interleaved)")
    return inv, axis


def coupling(position_ids: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, image_token: int,
             rotary: circlerope.RotaryConfig) -> Dict[str, float]:
    """PTD and RoPE kernel deviation (spec §5) of given 3-axis positions [3, B, S], one image
    block per row, distances Euclidean over the three axes (the spec's measure for mrope and
    circle): per block, over the row's real text tokens t and the block's tokens i,
    PTD = mean_t mean_i |d(t, i) - mean_i d(t, i)| and the kernel deviation the same of
    K(t, i) = mean_k cos(Δφ_k(t, i)); means over the rows that have both. What
    circlerope.ptd computes from a scheme (a test compares them)."""
    block = block_mask(input_ids, attention_mask, image_token)
    text = (attention_mask != 0) & ~block
    inv, axis = frequencies(tuple(rotary.sections), float(rotary.theta), rotary.frequency_layout)
    pos = position_ids.double()
    ptds, kernels = [], []
    for b in range(pos.shape[1]):
        t, i = pos[:, b, text[b]], pos[:, b, block[b]]                  # [3, T], [3, N]
        if t.shape[1] == 0 or i.shape[1] == 0:
            continue
        diff = t[:, :, None] - i[:, None, :]                            # [3, T, N]
        d = diff.pow(2).sum(0).sqrt()
        ptds.append(float((d - d.mean(1, keepdim=True)).abs().mean()))
        k = torch.cos(diff[axis] * inv[:, None, None]).mean(0)          # [T, N]
        kernels.append(float((k - k.mean(1, keepdim=True)).abs().mean()))
    if not ptds:
        return {"ptd": float("nan"), "rope_kernel_deviation": float("nan")}
    return {"ptd": sum(ptds) / len(ptds), "rope_kernel_deviation": sum(kernels) / len(kernels)}
