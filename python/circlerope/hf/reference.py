"""transformers' rotary formulas in plain PyTorch, written once: the rotary embedding of a
Qwen2-VL / Qwen2.5-VL text model (cos and sin of position * theta^(-2i/D), halves repeated), the
M-RoPE section selection of Qwen2-VL / Qwen2.5-VL (chunked) and Qwen3-VL (interleaved), and the
rotation q * cos + rotate_half(q) * sin (GPT-J's adjacent pairs too, and a rotary part narrower
than the head as partial-rotary models rotate it).

circlerope.hf's functions in Hugging Face's terms run them where transformers' own rounding is
wanted; the tests, the benchmarks and the experiment compare circlerope's fused operator against
them (and against transformers' own functions where transformers is installed). Nothing here
imports circlerope or transformers.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch

Tensor = torch.Tensor


def inverse_frequencies(rotary_dim: int, theta: float, dtype: torch.dtype = torch.float32,
                        device=None) -> Tensor:
    """transformers' inv_freq, 1 / theta^(2i / D) for i < D / 2, computed in `dtype` (float32,
    as transformers does; float64 for the exact angles)."""
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64, device=device).to(dtype) / rotary_dim
    return 1.0 / (theta ** exponent)


def angles(position_ids: Tensor, rotary_dim: int, theta: float, dtype: torch.dtype = torch.float32) -> Tensor:
    """position * inv_freq, [..., rotary_dim / 2] for positions [...], computed in `dtype`:
    transformers' freqs (its matmul with K = 1 is this one product) in float32, the exact
    angles in float64."""
    return position_ids.detach().to(dtype)[..., None] * inverse_frequencies(rotary_dim, theta, dtype,
                                                                            position_ids.device)


def rotary_embedding(position_ids: Tensor, rotary_dim: int, theta: float, dtype: torch.dtype = torch.float32,
                     attention_scaling: float = 1.0) -> Tuple[Tensor, Tensor]:
    """(cos, sin) of the angles position * inv_freq, each [..., rotary_dim] for positions [...]
    (Qwen2-VL's [3, B, S]: every axis holding every frequency), halves repeated, times
    attention_scaling: what transformers 4.x's Qwen2_5_VLRotaryEmbedding returns before the cast
    to the activations' dtype. The angles are computed in `dtype` (angles()): float32 reproduces
    transformers bit for bit, float64 gives the exact angles."""
    freqs = angles(position_ids, rotary_dim, theta, dtype)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def select_sections(t: Tensor, sections: Sequence[int], frequency_layout: str = "chunked") -> Tensor:
    """From cos or sin [3, ..., D] (an axis per position axis t, h, w; halves repeated), the
    [..., D] whose every frequency reads its own axis: "chunked" is Qwen2-VL / Qwen2.5-VL's
    mrope_section split (chunk i of the doubled sections reads axis i % 3), "interleaved"
    Qwen3-VL's apply_interleaved_mrope (frequency f reads h where f % 3 == 1 and f < 3 * sections[1],
    w where f % 3 == 2 and f < 3 * sections[2], t elsewhere), "single" axis t throughout."""
    if frequency_layout == "chunked":
        return torch.cat([m[i % 3] for i, m in enumerate(t.split(list(sections) * 2, dim=-1))], dim=-1)
    if frequency_layout == "single":
        return t[0]
    if frequency_layout != "interleaved":
        raise ValueError(f"frequency_layout {frequency_layout!r}: chunked, interleaved or single")
    halves = []
    for half in t.chunk(2, dim=-1):
        picked = half[0].clone()
        for axis, offset in ((1, 1), (2, 2)):
            columns = slice(offset, sections[axis] * 3, 3)
            picked[..., columns] = half[axis, ..., columns]
        halves.append(picked)
    return torch.cat(halves, dim=-1)


def rotate_half(x: Tensor) -> Tensor:
    """transformers' rotate_half (Llama, Qwen; circlerope's "neox" pairing): column i pairs
    with column i + D / 2."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: Tensor) -> Tensor:
    """transformers' GPT-J rotate_every_two (circlerope's "gptj" pairing): column 2i pairs with
    column 2i + 1."""
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def apply_rotary_pos_emb(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1,
                         pairing: str = "neox") -> Tuple[Tensor, Tensor]:
    """transformers' apply_rotary_pos_emb: q * cos + rotate_half(q) * sin, and the same of k, in
    q's dtype (cos and sin are cast to it first, as the rotary embedding returns them in the
    activations' dtype). cos, sin: [B, S, D] as rotary_embedding and select_sections give them
    (halves repeated); unsqueeze_dim 1 for q, k [B, H, S, head_dim], 2 for [B, S, H, head_dim].
    pairing "gptj" rotates adjacent pairs (GPT-J: each angle's cos and sin repeated per pair).
    A head wider than D rotates its first D columns; the rest passes through."""
    rot = cos.shape[-1]
    if pairing == "gptj":
        cos, sin = (t[..., : rot // 2].repeat_interleave(2, -1) for t in (cos, sin))
        turn = rotate_every_two
    elif pairing == "neox":
        turn = rotate_half
    else:
        raise ValueError(f"pairing {pairing!r}: neox or gptj")
    cos, sin = cos.unsqueeze(unsqueeze_dim).to(q.dtype), sin.unsqueeze(unsqueeze_dim).to(q.dtype)

    def one(x: Tensor) -> Tensor:
        if x.shape[-1] == rot:
            return x * cos + turn(x) * sin
        part, rest = x[..., :rot], x[..., rot:]
        return torch.cat([part * cos + turn(part) * sin, rest], dim=-1)

    return one(q), one(k)
