"""The rotation in Hugging Face's terms: rotary_cos_sin gives the (cos, sin) that a Qwen2-VL /
Qwen2.5-VL rotary embedding returns, bit for bit, and apply_multimodal_rotary_pos_emb takes them
with mrope_section like transformers' function of that name: the fused operator for float32,
transformers' formula in q's dtype otherwise. It stands in for transformers' function where a
caller holds only cos and sin (it builds a table from them at every call); a model switched by
apply(rotation="fused") builds one table per geometry and forward instead.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from .._checks import flag, number, plain, real_numbers, shown, tensor, tensor_only, tokens_of
from .._ops import fused_device
from ..config import rotary_option
from ..rotary import apply_rotary
from . import reference
from .compat import attention_scaling as config_attention_scaling
from .compat import head_dim as config_head_dim
from .compat import mrope_section as read_mrope_section
from .compat import rope_field

Tensor = torch.Tensor

_FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def rotary_cos_sin(position_ids, config=None, *, mrope_section=None, rope_theta=None, head_dim=None,
                   attention_scaling=None, dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    """What Qwen2_5_VLRotaryEmbedding(x, position_ids) of transformers 4.x returns, bit for bit:
    (cos, sin), each [3, B, S, head_dim], axis a holding every frequency at that axis's
    positions, halves repeated (rotate_half pairing), times attention_scaling, in `dtype`.
    Computed as transformers does (circlerope.hf.reference.rotary_embedding): inverse
    frequencies and angles in float32. (From 5.x the module itself picks each frequency's axis:
    reference.select_sections(cos, mrope_section) of this is what it returns.) Give a
    transformers `config`, or head_dim and rope_theta, which the core reads as a RotaryConfig's
    rotary_dim (even, 2..1024: an odd head_dim is refused, as transformers 5.x refuses it) and
    theta (in [1, 2^126]); attention_scaling defaults to the config's (1.0 for the default rope
    type). mrope_section is not needed here (every axis holds every frequency): it is checked
    when given. position_ids: [3, B, S], or [B, S] for every axis at once."""
    if mrope_section is not None:
        read_mrope_section(mrope_section)
    if config is not None:
        head_dim = config_head_dim(config) if head_dim is None else head_dim
        if rope_theta is None:
            rope_theta = rope_field(config, "rope_theta")
            rope_theta = 1e6 if rope_theta is None else rope_theta
        attention_scaling = config_attention_scaling(config) if attention_scaling is None else attention_scaling
    if head_dim is None or rope_theta is None:
        raise TypeError("rotary_cos_sin needs a config, or head_dim and rope_theta")
    head_dim = rotary_option("rotary_dim", head_dim, "head_dim")
    theta = rotary_option("theta", rope_theta, "rope_theta")
    scaling = 1.0 if attention_scaling is None else number(attention_scaling, "attention_scaling")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype (got {shown(dtype)})")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype}")
    position_ids = real_numbers(tensor(position_ids, "position_ids", required=True), "position_ids")
    if position_ids.dim() == 2:
        position_ids = position_ids.unsqueeze(0).expand(3, -1, -1)
    if position_ids.dim() != 3 or position_ids.size(0) != 3:
        raise ValueError(f"position_ids must have shape [3, B, S] or [B, S], got {list(position_ids.shape)}")
    tokens_of(position_ids, "position_ids")
    cos, sin = reference.rotary_embedding(position_ids, head_dim, theta, torch.float32, scaling)
    return cos.to(dtype), sin.to(dtype)


def _selected(t: Tensor, mrope_section: tuple) -> Tensor:
    """transformers' section selection (its sizes checked by the caller)."""
    return reference.select_sections(t, mrope_section)


def apply_multimodal_rotary_pos_emb(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, mrope_section,
                                    unsqueeze_dim: int = 1, *, fused: Optional[bool] = None) -> Tuple[Tensor, Tensor]:
    """transformers' apply_multimodal_rotary_pos_emb: cos/sin [3, B, S, D] (from the model's
    rotary embedding or rotary_cos_sin), q/k [B, H, S, D] (unsqueeze_dim=1) or [B, S, H, D]
    (unsqueeze_dim=2).

    fused=None (default): float32 q and k go through circlerope's fused operator (float32 math,
    as transformers' formula then does; equal to it within float32 rounding), other dtypes take
    transformers' formula in q's dtype, so bf16 results are transformers' bit for bit.
    fused=True: the fused operator for every dtype (float32 math, rounded once to q's dtype:
    more exact than transformers' bf16 formula, not equal to it). fused=False: the formula.
    Tensors on a device without circlerope kernels always take the formula."""
    q, k, cos, sin = (tensor_only(x, name) for x, name in ((q, "q"), (k, "k"), (cos, "cos"), (sin, "sin")))
    if cos.dim() != 4 or cos.size(0) != 3 or sin.shape != cos.shape:
        raise ValueError(f"cos and sin must both have shape [3, B, S, D], got {list(cos.shape)} and {list(sin.shape)}")
    tokens_of(cos[0, :, :, 0], "cos")
    unsqueeze = plain(unsqueeze_dim)
    if not (isinstance(unsqueeze, int) and not isinstance(unsqueeze, bool)):
        raise TypeError(f"unsqueeze_dim must be 1 ([B, H, S, D]) or 2 ([B, S, H, D]) (got {shown(unsqueeze_dim)})")
    if unsqueeze not in (1, 2):
        raise ValueError(f"unsqueeze_dim must be 1 ([B, H, S, D]) or 2 ([B, S, H, D]) (got {shown(unsqueeze_dim)})")
    fused = flag(fused, "fused", allow_none=True)
    sections = read_mrope_section(mrope_section)
    seq_dim = 2 if unsqueeze == 1 else 1
    for name, x in (("q", q), ("k", k)):
        if x.dim() != 4 or not x.is_floating_point():
            raise ValueError(f"{name} must be a floating 4-D tensor ([B, H, S, D] or [B, S, H, D]), got "
                             f"{x.dtype} {list(x.shape)}")
        if x.size(0) != cos.size(1) or x.size(seq_dim) != cos.size(2):
            raise ValueError(f"{name} has shape {list(x.shape)} (unsqueeze_dim {unsqueeze}), but cos/sin are "
                             f"for batch {cos.size(1)} and seq_len {cos.size(2)}")
    # Every size is checked before the section selection and the table allocate anything (cos
    # and sin may be expand() views of any size).
    if 2 * sum(sections) != cos.size(-1):
        raise ValueError(f"mrope_section {list(sections)} sums to {sum(sections)}, but cos/sin "
                         f"hold {cos.size(-1)} values (expected head_dim / 2 = {cos.size(-1) // 2})")
    # the rotary dim of either path: even, within the core's limit (as rotary_cos_sin reads head_dim)
    rotary_option("rotary_dim", int(cos.size(-1)), "cos/sin's last dimension (the rotary dim)")
    use_fused = (q.dtype == torch.float32 and k.dtype == torch.float32) if fused is None else fused
    if use_fused and fused_device(q) and fused_device(k) and q.device == k.device == cos.device:
        # what the operator checks of q and k against the table, before the table is built
        if q.dtype != k.dtype or q.dtype not in _FUSED_DTYPES:
            raise ValueError(f"the fused rotation takes q and k of one dtype, float32, bfloat16, float16 or float64, "
                             f"got {q.dtype} and {k.dtype}")
        for name, x in (("q", q), ("k", k)):
            if x.size(-1) < cos.size(-1):
                raise ValueError(f"{name} has head_dim {x.size(-1)}, smaller than the rotary dim {cos.size(-1)} of "
                                 "cos/sin")
        cos_sel, sin_sel = _selected(cos, sections), _selected(sin, sections)
        half = cos_sel.size(-1) // 2
        table = torch.cat([cos_sel[..., :half], sin_sel[..., :half]], -1).to(torch.float32).contiguous()
        return apply_rotary(q, k, table, pairing="neox", qk_layout="bhsd" if unsqueeze == 1 else "bshd")
    for name, x in (("q", q), ("k", k)):
        if x.size(-1) != cos.size(-1):
            raise ValueError(f"{name} has head_dim {x.size(-1)} but cos/sin {cos.size(-1)} columns (transformers' "
                             "formula multiplies them element by element)")
    return reference.apply_rotary_pos_emb(q, k, _selected(cos, sections), _selected(sin, sections), unsqueeze)
