"""circlerope.hf: drop-in pieces for Hugging Face transformers' Qwen2-VL / Qwen2.5-VL models.

Switch a model to Circle-RoPE (only the geometry changes; its transformers version's
M-RoPE conventions stay):

    import circlerope.hf
    model.model.get_rope_index = circlerope.hf.rope_index_fn(model.config, scheme="circle")
    # transformers 4.49-4.51 keep the method on the outer model: model.get_rope_index = ...

`rope_index_fn` returns a function with the exact signature of the installed (or chosen)
transformers version's `get_rope_index`. Under scheme="mrope" it returns exactly what that
version returns (int64 positions and deltas), so a patched model computes the same logits.

Compat modes (`compat=`), see circlerope.get_rope_index and docs/hf_compat.md; each was
compared with the real releases of its range (scripts/hf_matrix.sh):
    "hf-4.49"       transformers 4.49-4.51 (and Qwen's own code)
    "hf-4.52"       transformers 4.52-5.1
    "hf-5.2"        transformers 5.2
    "hf-5.3-5.5.3"  transformers 5.3-5.5.3
    "hf-5.5.4"      transformers 5.5.4
    "hf-5.6"        transformers 5.6-5.17 ("hf-5.3", its former name, is still accepted)
    "hf-5.18"       transformers 5.18 and later

Rotation in Hugging Face's terms: `rotary_cos_sin` gives the (cos, sin) that
Qwen2_5_VLRotaryEmbedding returns, bit for bit, and `apply_multimodal_rotary_pos_emb` takes them
with `mrope_section` like transformers' function of that name: the fused operator for float32,
transformers' formula in q's dtype otherwise (fused=True: the operator for every dtype).

A whole model: apply(model, scheme | age=...) switches a loaded Qwen2-VL / Qwen2.5-VL / Qwen3-VL
model (every layer, generate(), packing, save/load), restore(model) undoes it.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

import torch

from . import (CircleConfig, RotaryConfig, VisionConfig, _fused_device, _plain, _shown, apply_rotary,
               decode_position_ids, get_rope_index)

__all__ = ["COMPAT_MODES", "compat_for_version", "installed_compat", "rope_index_fn",
           "decode_position_ids_hf", "rotary_config", "rotary_cos_sin",
           "apply_multimodal_rotary_pos_emb", "apply", "restore", "geometry", "pack", "from_pretrained"]

COMPAT_MODES = ("hf-4.49", "hf-4.52", "hf-5.2", "hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6", "hf-5.18")
# "hf-5.3" is the former name of "hf-5.6" (the rule of 5.6-5.17, which this project called
# 5.3's before it was run against the releases); it is accepted wherever a mode is.
_ALIASES = {"hf-5.3": "hf-5.6"}
# Modes whose get_rope_index takes mm_token_type_ids (5.3 on) and whose deltas count only
# each row's real tokens.
_TOKEN_TYPE_MODES = ("hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6", "hf-5.18")

Tensor = torch.Tensor


def _int_arg(value, name: str, low: int, high: int) -> int:
    value = _plain(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {_shown(value)}")
    if not low <= value <= high:
        raise ValueError(f"{name} = {value} is outside [{low}, {high}]")
    return value


# ------------------------------------------------------------------ versions ---

def compat_for_version(version: str) -> str:
    """The compat mode that reproduces transformers `version` ("4.51.3", "4.57.0.dev0",
    "5.5.4"): hf-4.49 below 4.52, hf-4.52 below 5.2, hf-5.2 for 5.2, hf-5.3-5.5.3 from 5.3
    to 5.5.3, hf-5.5.4 for 5.5.4 (and later 5.5 patches), hf-5.6 from 5.6 to 5.17, hf-5.18
    from 5.18 on (docs/hf_compat.md). A missing patch number reads as 0; a development
    version (5.6.0.dev0) maps with its release. Versions before 4.49 (Qwen2-VL only) share
    4.49's rule but were not compared against."""
    if not isinstance(version, str):
        raise ValueError(f"transformers version must be a string like '4.52.0', got {version!r}")
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        raise ValueError(f"transformers version {version!r} is not of the form MAJOR.MINOR[...]")
    release = (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    if release < (4, 45, 0):
        raise ValueError(f"transformers {version} predates Qwen2-VL's get_rope_index (4.45)")
    for first, mode in (((5, 18, 0), "hf-5.18"), ((5, 6, 0), "hf-5.6"), ((5, 5, 4), "hf-5.5.4"),
                        ((5, 3, 0), "hf-5.3-5.5.3"), ((5, 2, 0), "hf-5.2"), ((4, 52, 0), "hf-4.52")):
        if release >= first:
            return mode
    return "hf-4.49"


def installed_compat() -> str:
    """compat_for_version of the transformers this Python imports."""
    try:
        import transformers  # noqa: PLC0415 (optional dependency)
    except ImportError:
        raise ValueError("transformers is not installed here: pass compat= explicitly (one of "
                         f"{', '.join(COMPAT_MODES)})") from None
    return compat_for_version(transformers.__version__)


def _check_compat(compat) -> str:
    if compat is None:
        return installed_compat()
    if compat not in COMPAT_MODES and compat not in _ALIASES:
        raise ValueError(f"compat {compat!r} (expected one of {', '.join(COMPAT_MODES)}, or None for the "
                         "installed transformers)")
    return compat


def _canonical(compat: str) -> str:
    return _ALIASES.get(compat, compat)


# ------------------------------------------------------------------- configs ---

def _get(config, name, default=None):
    """config.name, or config[name] for a dict."""
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def _text_config(config):
    text = _get(config, "text_config")
    return text if text is not None else config


def _rope_field(config, name):
    """A rope field wherever a transformers version keeps it: config.rope_scaling (4.x),
    config.rope_parameters (5.x), on the config or its text_config."""
    for holder in (config, _text_config(config)):
        for key in ("rope_parameters", "rope_scaling"):
            params = _get(holder, key)
            if params is not None and _get(params, name) is not None:
                return _get(params, name)
        if _get(holder, name) is not None:
            return _get(holder, name)
    return None


def _model_type(config) -> str:
    model_type = _get(config, "model_type")
    if model_type not in ("qwen2_vl", "qwen2_5_vl"):
        raise ValueError(f"config.model_type {model_type!r}: circlerope.hf adapts qwen2_vl and qwen2_5_vl models")
    return model_type


def rotary_config(config) -> RotaryConfig:
    """The RotaryConfig of a transformers Qwen2-VL / Qwen2.5-VL config: mrope_section,
    rope_theta and the head dimension (hidden_size / num_attention_heads)."""
    sections = _rope_field(config, "mrope_section")
    if sections is None:
        raise ValueError("config has no mrope_section (in rope_scaling or rope_parameters)")
    theta = _rope_field(config, "rope_theta")
    text = _text_config(config)
    head_dim = _get(text, "head_dim")
    if head_dim is None and _get(text, "hidden_size") and _get(text, "num_attention_heads"):
        head_dim = _get(text, "hidden_size") // _get(text, "num_attention_heads")
    return RotaryConfig(sections=tuple(sections), theta=1e6 if theta is None else theta,
                        rotary_dim=head_dim)


# ------------------------------------------------------------------- adapter ---

def _expected_token_types(input_ids: Tensor, attention_mask, vision: VisionConfig) -> Tensor:
    types = torch.zeros_like(input_ids, dtype=torch.int64)
    types[input_ids == vision.image_token_id] = 1
    types[input_ids == vision.video_token_id] = 2
    if attention_mask is not None:
        types[torch.as_tensor(attention_mask).to(input_ids.device) == 0] = 0
    return types


def _check_token_types(mm_token_type_ids, input_ids, attention_mask, vision: VisionConfig) -> None:
    """transformers 5.3 finds vision tokens from mm_token_type_ids (1 image, 2 video); we find
    them from the token ids. Refuse the call where the two disagree instead of guessing."""
    if mm_token_type_ids is None or input_ids is None:
        return
    given = torch.as_tensor(mm_token_type_ids).to(input_ids.device).to(torch.int64)
    if given.shape != input_ids.shape:
        raise ValueError(f"mm_token_type_ids has shape {list(given.shape)} but input_ids {list(input_ids.shape)}")
    expected = _expected_token_types(input_ids, attention_mask, vision)
    if attention_mask is not None:
        given = given.masked_fill(torch.as_tensor(attention_mask).to(input_ids.device) == 0, 0)
    wrong = (given != expected).nonzero()
    if wrong.numel():
        b, s = (int(x) for x in wrong[0])
        raise ValueError(f"mm_token_type_ids[{b}][{s}] = {int(given[b, s])} but input_ids[{b}][{s}] = "
                         f"{int(input_ids[b, s])} (image tokens are type 1, video tokens type 2, text 0)")


def _with_signature(compute, compat: str, qwen2: bool):
    """compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
    mm_token_type_ids=None) behind the get_rope_index signature of `compat`'s releases (Qwen2-VL's
    when qwen2: no second_per_grid_ts)."""
    if _canonical(compat) in _TOKEN_TYPE_MODES:
        if qwen2:
            def get_rope_index_hf(input_ids, mm_token_type_ids, image_grid_thw=None,
                                  video_grid_thw=None, attention_mask=None, **kwargs):
                return compute(input_ids, image_grid_thw, video_grid_thw, None, attention_mask,
                               mm_token_type_ids)
        else:
            def get_rope_index_hf(input_ids, mm_token_type_ids, image_grid_thw=None,
                                  video_grid_thw=None, second_per_grid_ts=None, attention_mask=None,
                                  **kwargs):
                return compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts,
                               attention_mask, mm_token_type_ids)
    elif compat == "hf-5.2":
        if qwen2:
            def get_rope_index_hf(input_ids=None, image_grid_thw=None, video_grid_thw=None,
                                  attention_mask=None, **kwargs):
                return compute(input_ids, image_grid_thw, video_grid_thw, None, attention_mask)
        else:
            def get_rope_index_hf(input_ids=None, image_grid_thw=None, video_grid_thw=None,
                                  second_per_grid_ts=None, attention_mask=None, **kwargs):
                return compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts,
                               attention_mask)
    elif qwen2:
        def get_rope_index_hf(input_ids=None, image_grid_thw=None, video_grid_thw=None,
                              attention_mask=None):
            return compute(input_ids, image_grid_thw, video_grid_thw, None, attention_mask)
    else:
        def get_rope_index_hf(input_ids=None, image_grid_thw=None, video_grid_thw=None,
                              second_per_grid_ts=None, attention_mask=None):
            return compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask)

    return get_rope_index_hf


def rope_index_fn(config, scheme: str = "circle", circle: Optional[CircleConfig] = None,
                  compat: Optional[str] = None):
    """A replacement for a Qwen2-VL / Qwen2.5-VL model's get_rope_index.

    config: the model's transformers config (or a dict with the same names). scheme: "circle",
    "mrope", "vanilla" or "unordered". circle: a circlerope.CircleConfig (the paper's setting
    by default). compat: the transformers behaviour to reproduce; None means the installed
    transformers' (compat_for_version).

    The returned function has that version's signature (names, order, which have defaults),
    checked against each release by python/tests/test_hf_versions.py:
        hf-4.49, hf-4.52: (input_ids=None, image_grid_thw=None, video_grid_thw=None,
                           second_per_grid_ts=None, attention_mask=None)
        hf-5.2:           the same and **kwargs (5.2's generate passes its model_kwargs)
        hf-5.3-5.5.3 on:  (input_ids, mm_token_type_ids, image_grid_thw=None,
                           video_grid_thw=None, second_per_grid_ts=None, attention_mask=None,
                           **kwargs)
    Qwen2-VL's have no second_per_grid_ts.
    and returns (position_ids [3, B, S], rope_deltas [B, 1]): int64 for integer schemes (as
    transformers does), float32 under "circle", whose positions are fractional.
    """
    compat = _check_compat(compat)
    model_type = _model_type(config)
    vision = VisionConfig.from_hf_config(config)
    if not isinstance(scheme, str):
        raise ValueError(f"scheme must be a string, got {scheme!r}")
    # Validate everything now, not at the model's first forward pass.
    get_rope_index(torch.zeros(1, 1, dtype=torch.int64), scheme=scheme, circle=circle, vision=vision,
                   compat=compat)

    def compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
                mm_token_type_ids=None):
        if input_ids is None:
            raise ValueError("get_rope_index: input_ids is required (circlerope places tokens by their ids)")
        _check_token_types(mm_token_type_ids, input_ids, attention_mask, vision)
        return get_rope_index(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
                              scheme=scheme, circle=circle, vision=vision, compat=compat)

    get_rope_index_hf = _with_signature(compute, compat, model_type == "qwen2_vl")
    get_rope_index_hf.__doc__ = (f"circlerope positions ({scheme}) with transformers {compat[3:]}'s "
                                 "get_rope_index signature and conventions")
    get_rope_index_hf.compat = compat
    get_rope_index_hf.scheme = scheme
    get_rope_index_hf.compute = compute  # (input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask, mm_token_type_ids=None)
    return get_rope_index_hf


def decode_position_ids_hf(rope_deltas, cache_position, count: int = 1, *, compat: str,
                           attention_mask=None) -> Tensor:
    """Positions [3, B, count] of the tokens decoded at cache positions cache_position ..
    cache_position + count - 1, by the chosen behaviour's rule:

    hf-4.49, hf-4.52, hf-5.2: cache_position + rope_delta (the cache counts padding).
    hf-5.3-5.5.3 on (hf-5.6, hf-5.18 ...): the row's real tokens before the new one plus
        rope_delta (these deltas count real tokens only). attention_mask ([B, L], the
        prompt's or the running one) says which cached tokens are real; positions past its
        end count as real. Without it every cached token is real.

    These are the rules of each release's forward pass with a cache. generate() differs in
    4.54-4.56 (attention-mask cumsum + delta) and from 5.2 on (each axis's last prompt
    position + 1, below max + 1 after a video from 5.3 on): docs/hf_compat.md. A model patched
    with rope_index_fn runs its release's own decode code and needs none of this.

    int64 when the deltas are integers (M-RoPE), float32 otherwise (Circle-RoPE)."""
    compat = _check_compat(compat)
    deltas = torch.as_tensor(rope_deltas)
    integral = not deltas.is_floating_point() or bool((deltas == deltas.round()).all())
    first = _int_arg(cache_position, "cache_position (Hugging Face's cache_position[0])", 0, 2 ** 31)
    count = _int_arg(count, "count", 0, 2 ** 31)
    if _canonical(compat) not in _TOKEN_TYPE_MODES:
        out = decode_position_ids(deltas, first, count)
    else:
        flat = deltas.reshape(-1) if deltas.dim() == 2 and deltas.size(1) == 1 else deltas
        if flat.dim() != 1:
            raise ValueError(f"rope_deltas must have shape [batch, 1] or [batch], got {list(deltas.shape)}")
        if attention_mask is None:
            real_before = torch.full((flat.numel(),), first, dtype=torch.int64)
        else:
            mask = torch.as_tensor(attention_mask).to("cpu")
            if mask.dim() != 2 or mask.size(0) != flat.numel():
                raise ValueError(f"attention_mask must have shape [{flat.numel()}, L], got {list(mask.shape)}")
            seen = min(first, mask.size(1))
            real_before = (mask[:, :seen] != 0).sum(-1).to(torch.int64) + (first - seen)
        # One row at a time: the rule of a batch of one whose cache holds only real tokens.
        rows = [decode_position_ids(flat[b:b + 1].to("cpu"), int(real_before[b]), count)
                for b in range(flat.numel())]
        out = torch.cat(rows, dim=1) if rows else decode_position_ids(flat.to("cpu"), first, count)
        out = out.to(deltas.device)
    return out.round().to(torch.int64) if integral else out


# ------------------------------------------------------------------ rotation ---

def _attention_scaling(config) -> float:
    """transformers' rotary attention_scaling: 1.0 for the default rope type, which Qwen2-VL /
    Qwen2.5-VL checkpoints use; other rope types compute it, so it must be given."""
    rope_type = _rope_field(config, "rope_type") or _rope_field(config, "type")
    if rope_type in (None, "default", "mrope"):
        return 1.0
    raise ValueError(f"rope_type {rope_type!r}: pass attention_scaling= (the model's rotary_emb.attention_scaling)")


def rotary_cos_sin(position_ids, config=None, *, mrope_section=None, rope_theta=None, head_dim=None,
                   attention_scaling=None, dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    """What Qwen2_5_VLRotaryEmbedding(x, position_ids) of transformers 4.x returns, bit for bit:
    (cos, sin), each [3, B, S, head_dim], axis a holding every frequency at that axis's
    positions, halves repeated (rotate_half pairing), times attention_scaling, in `dtype`.
    Computed as transformers does: inverse frequencies and angles in float32. (From 5.x the
    module itself picks each frequency's axis: _select_sections(cos, mrope_section)[a] of this
    is what it returns.) Give a transformers `config`, or head_dim and rope_theta;
    attention_scaling defaults to the config's (1.0 for the default rope type)."""
    if config is not None:
        rc = rotary_config(config)
        head_dim = rc.dim if head_dim is None else head_dim
        rope_theta = rc.theta if rope_theta is None else rope_theta
        attention_scaling = _attention_scaling(config) if attention_scaling is None else attention_scaling
    if head_dim is None or rope_theta is None:
        raise ValueError("rotary_cos_sin needs a config, or head_dim and rope_theta")
    scaling = 1.0 if attention_scaling is None else float(_plain(attention_scaling))
    position_ids = torch.as_tensor(position_ids)
    if position_ids.dim() == 2:
        position_ids = position_ids.unsqueeze(0).expand(3, -1, -1)
    if position_ids.dim() != 3 or position_ids.size(0) != 3:
        raise ValueError(f"position_ids must have shape [3, B, S] or [B, S], got {list(position_ids.shape)}")
    dim = 2 * (_int_arg(head_dim, "head_dim", 2, 1024) // 2)
    exponent = torch.arange(0, dim, 2, dtype=torch.int64, device=position_ids.device).to(torch.float32) / dim
    inv_freq = 1.0 / (float(rope_theta) ** exponent)
    freqs = position_ids.detach().to(torch.float32)[..., None] * inv_freq  # one product: HF's K=1 matmul
    emb = torch.cat([freqs, freqs], -1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def _select_sections(t: Tensor, mrope_section) -> Tensor:
    """transformers' section selection: chunk i of the doubled sections reads axis i % 3."""
    sections = [int(x) for x in mrope_section] * 2
    if sum(sections) != t.size(-1):
        raise ValueError(f"mrope_section {list(mrope_section)} sums to {sum(sections) // 2}, but cos/sin "
                         f"hold {t.size(-1)} values (expected head_dim / 2 = {t.size(-1) // 2})")
    return torch.cat([m[i % 3] for i, m in enumerate(t.split(sections, dim=-1))], dim=-1)


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


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
    if cos.dim() != 4 or cos.size(0) != 3 or sin.shape != cos.shape:
        raise ValueError(f"cos and sin must both have shape [3, B, S, D], got {list(cos.shape)} and {list(sin.shape)}")
    if unsqueeze_dim not in (1, 2):
        raise ValueError(f"unsqueeze_dim must be 1 ([B, H, S, D]) or 2 ([B, S, H, D]), got {unsqueeze_dim}")
    if fused not in (None, True, False):
        raise ValueError(f"fused must be None, True or False, got {_shown(fused)}")
    cos_sel, sin_sel = _select_sections(cos, mrope_section), _select_sections(sin, mrope_section)
    half = cos_sel.size(-1) // 2
    use_fused = (q.dtype == torch.float32 and k.dtype == torch.float32) if fused is None else fused
    if use_fused and _fused_device(q) and _fused_device(k) and q.device == k.device == cos.device:
        table = torch.cat([cos_sel[..., :half], sin_sel[..., :half]], -1).to(torch.float32).contiguous()
        return apply_rotary(q, k, table, pairing="neox", qk_layout="bhsd" if unsqueeze_dim == 1 else "bshd")
    cos_u, sin_u = cos_sel.unsqueeze(unsqueeze_dim).to(q.dtype), sin_sel.unsqueeze(unsqueeze_dim).to(q.dtype)
    return q * cos_u + _rotate_half(q) * sin_u, k * cos_u + _rotate_half(k) * sin_u



# ------------------------------------------------------------------- models ---

from ._hf_model import apply, from_pretrained, geometry, pack, restore  # noqa: E402 (needs the names above)
