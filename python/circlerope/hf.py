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
model (every layer, generate(), packing, save/load), restore(model) undoes it. With
rotation="fused" its text attention rotates q and k with the fused operator, from one
circlerope.rotary_table per geometry and forward (apply_multimodal_rotary_pos_emb above builds
a table from cos and sin at every call instead: it stands in for transformers' function where a
caller holds only cos and sin).

Errors: every argument this module cannot use raises ValueError naming the argument and its
value (by the package's quoting rule: one short line), a value of the wrong type included, as
everywhere in circlerope; Python's own TypeError remains for a call that does not fit the
signature. Tensors are checked on their shapes (layout, the limit of one call) before anything
reads or copies them.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Optional, Tuple

import torch

from . import (_MAX_TOKENS, CircleConfig, RotaryConfig, VisionConfig, _check_count, _check_tokens, _fused_device,
               _plain, _shown, _tensor, _text, _tokens_of, apply_rotary, decode_position_ids, get_rope_index)

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
        raise ValueError(f"{name} = {_shown(value)} is outside [{low}, {high}]")
    return value


def _number_arg(value, name: str, positive: bool = False) -> float:
    """A finite real number (> 0 if `positive`): a Python, numpy or one-element tensor scalar."""
    plain = _plain(value)
    if (isinstance(plain, bool) or not isinstance(plain, numbers.Real) or not math.isfinite(plain)
            or (positive and plain <= 0)):
        raise ValueError(f"{name} must be a finite number{' > 0' if positive else ''}, got {_shown(value)}")
    return float(plain)


def _flag(value, name: str, allow_none: bool = False) -> Optional[bool]:
    """True or False (or None where it means "choose for me"); a tensor or 1 is not a flag."""
    if value is True or value is False or (allow_none and value is None):
        return value
    raise ValueError(f"{name} must be True{', False or None' if allow_none else ' or False'}, got {_shown(value)}")


def _tensor_arg(value, name: str) -> Tensor:
    """A torch.Tensor with data (dense, not meta), as transformers' functions take."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {_shown(value)}")
    return _tensor(value, name)


def _sections(value, name: str = "mrope_section") -> list:
    """transformers' mrope_section: three integers >= 0 (t, h, w), as a list, tuple or 1-D
    integer tensor. A float (16.9 was read as 16) or a negative entry is refused."""
    items = value.tolist() if isinstance(value, torch.Tensor) and value.dim() == 1 and not (
        value.is_floating_point() or value.is_complex()) else value
    if not isinstance(items, (list, tuple)) or len(items) != 3:
        raise ValueError(f"{name} must be three integers >= 0 (t, h, w), got {_shown(value)}")
    out = []
    for x in items:
        x = _plain(x)
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise ValueError(f"{name} must be three integers >= 0 (t, h, w), got {_shown(value)}")
        out.append(x)
    return out


# ------------------------------------------------------------------ versions ---

def compat_for_version(version: str) -> str:
    """The compat mode that reproduces transformers `version` ("4.51.3", "4.57.0.dev0",
    "5.5.4"): hf-4.49 below 4.52, hf-4.52 below 5.2, hf-5.2 for 5.2, hf-5.3-5.5.3 from 5.3
    to 5.5.3, hf-5.5.4 for 5.5.4 (and later 5.5 patches), hf-5.6 from 5.6 to 5.17, hf-5.18
    from 5.18 on (docs/hf_compat.md). A missing patch number reads as 0; a development
    version (5.6.0.dev0) maps with its release. Versions before 4.49 (Qwen2-VL only) share
    4.49's rule but were not compared against."""
    if not isinstance(version, str):
        raise ValueError(f"transformers version must be a string like '4.52.0', got {_shown(version)}")
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        raise ValueError(f"transformers version {_shown(version)} is not of the form MAJOR.MINOR[...]")
    release = (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    if release < (4, 45, 0):
        raise ValueError(f"transformers {_shown(version)} predates Qwen2-VL's get_rope_index (4.45)")
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
    if not isinstance(compat, str) or (compat not in COMPAT_MODES and compat not in _ALIASES):
        raise ValueError(f"compat {_shown(compat)} (expected one of {', '.join(COMPAT_MODES)}, or None for the "
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
    if not isinstance(model_type, str) or model_type not in ("qwen2_vl", "qwen2_5_vl"):
        raise ValueError(f"config.model_type {_shown(model_type)}: circlerope.hf adapts qwen2_vl and qwen2_5_vl models")
    return model_type


def _even_head_dim(head_dim, name: str) -> int:
    """A head dimension RoPE can rotate: even, in [2, 1024]. transformers 5.x refuses an odd one
    in its config ("RoPE requires an even rotary dimension", above 4); 4.x computed ceil(d/2)
    frequencies over d and returned d + 1 columns, which then did not fit the d-wide head."""
    head_dim = _int_arg(head_dim, name, 2, 1024)
    if head_dim % 2:
        raise ValueError(f"{name} {head_dim} is odd: RoPE rotates pairs of columns (transformers 5.x refuses an odd "
                         f"head_dim too; 4.x returned {head_dim + 1} columns that do not fit the head)")
    return head_dim


def _head_dim(config) -> int:
    """The attention head width of a transformers config, as its rotary embedding reads it:
    head_dim, else hidden_size // num_attention_heads; even (_even_head_dim)."""
    text = _text_config(config)
    head_dim = _get(text, "head_dim")
    if head_dim is None:
        hidden, heads = _get(text, "hidden_size"), _get(text, "num_attention_heads")
        if hidden is None or heads is None:
            raise ValueError("config has no head_dim, nor hidden_size and num_attention_heads")
        head_dim = (_int_arg(hidden, "config hidden_size", 1, 1 << 30)
                    // _int_arg(heads, "config num_attention_heads", 1, 1 << 20))
    return _even_head_dim(head_dim, "config head dimension")


def rotary_config(config) -> RotaryConfig:
    """The RotaryConfig of a transformers Qwen2-VL / Qwen2.5-VL config: mrope_section,
    rope_theta and the head dimension (head_dim, or hidden_size / num_attention_heads; an odd
    one is refused, as transformers 5.x refuses it)."""
    sections = _rope_field(config, "mrope_section")
    if sections is None:
        raise ValueError("config has no mrope_section (in rope_scaling or rope_parameters)")
    theta = _rope_field(config, "rope_theta")
    head_dim = _head_dim(config)
    return RotaryConfig(sections=tuple(_sections(sections, "config mrope_section")),
                        theta=1e6 if theta is None else theta, rotary_dim=head_dim)


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
    them from the token ids. Refuse the call where the two disagree instead of guessing. Every
    shape is compared before anything is converted."""
    if mm_token_type_ids is None or input_ids is None:
        return
    input_ids = _tokens_of(_tensor(input_ids, "input_ids"), "input_ids")
    given = _tensor(mm_token_type_ids, "mm_token_type_ids")
    if given.shape != input_ids.shape:
        raise ValueError(f"mm_token_type_ids has shape {list(given.shape)} but input_ids {list(input_ids.shape)}")
    if given.is_floating_point() or given.is_complex():
        raise ValueError(f"mm_token_type_ids must hold integers, got {given.dtype}")
    if attention_mask is not None:
        attention_mask = _tensor(attention_mask, "attention_mask")
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask has shape {list(attention_mask.shape)} but input_ids "
                             f"{list(input_ids.shape)}")
    given = given.to(input_ids.device).to(torch.int64)
    expected = _expected_token_types(input_ids, attention_mask, vision)
    if attention_mask is not None:
        given = given.masked_fill(attention_mask.to(input_ids.device) == 0, 0)
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
    scheme = _text(scheme, "scheme")
    # Validate everything now, not at the model's first forward pass.
    get_rope_index(torch.zeros(1, 1, dtype=torch.int64), scheme=scheme, circle=circle, vision=vision,
                   compat=compat)

    def compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
                mm_token_type_ids=None):
        if input_ids is None:
            raise ValueError("get_rope_index: input_ids is required (circlerope places tokens by their ids)")
        input_ids = _tensor(input_ids, "input_ids")  # a list too, as get_rope_index takes it
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
    deltas = _tensor(rope_deltas, "rope_deltas", required=True)
    if deltas.is_complex() or deltas.dtype == torch.bool:
        raise ValueError(f"rope_deltas must hold real numbers, got {deltas.dtype}")
    _check_count("rope_deltas", deltas, _MAX_TOKENS, "rows")
    first = _int_arg(cache_position, "cache_position (Hugging Face's cache_position[0])", 0, 2 ** 31)
    count = _int_arg(count, "count", 0, 2 ** 31)
    integral = not deltas.is_floating_point() or bool((deltas == deltas.round()).all())
    if _canonical(compat) not in _TOKEN_TYPE_MODES:
        out = decode_position_ids(deltas, first, count)
    else:
        flat = deltas.reshape(-1) if deltas.dim() == 2 and deltas.size(1) == 1 else deltas
        if flat.dim() != 1:
            raise ValueError(f"rope_deltas must have shape [batch, 1] or [batch], got {list(deltas.shape)}")
        if attention_mask is None:
            real_before = torch.full((flat.numel(),), first, dtype=torch.int64)
        else:
            mask = _tensor(attention_mask, "attention_mask")
            if mask.dim() != 2 or mask.size(0) != flat.numel():
                raise ValueError(f"attention_mask must have shape [{flat.numel()}, L], got {list(mask.shape)}")
            _check_tokens("attention_mask", int(mask.size(0)), int(mask.size(1)))
            mask = mask.to("cpu")
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
    if rope_type is None or (isinstance(rope_type, str) and rope_type in ("default", "mrope")):
        return 1.0
    raise ValueError(f"rope_type {_shown(rope_type)}: pass attention_scaling= (the model's rotary_emb.attention_scaling)")


def rotary_cos_sin(position_ids, config=None, *, mrope_section=None, rope_theta=None, head_dim=None,
                   attention_scaling=None, dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    """What Qwen2_5_VLRotaryEmbedding(x, position_ids) of transformers 4.x returns, bit for bit:
    (cos, sin), each [3, B, S, head_dim], axis a holding every frequency at that axis's
    positions, halves repeated (rotate_half pairing), times attention_scaling, in `dtype`.
    Computed as transformers does: inverse frequencies and angles in float32. An odd head_dim
    is refused, as transformers 5.x refuses it. (From 5.x the module itself picks each
    frequency's axis: _select_sections(cos, mrope_section)[a] of this is what it returns.) Give
    a transformers `config`, or head_dim (even, 2..1024) and rope_theta;
    attention_scaling defaults to the config's (1.0 for the default rope type). mrope_section
    is not needed here (every axis holds every frequency): it is checked when given."""
    if mrope_section is not None:
        _sections(mrope_section)
    if config is not None:
        head_dim = _head_dim(config) if head_dim is None else head_dim
        if rope_theta is None:
            rope_theta = _rope_field(config, "rope_theta")
            rope_theta = 1e6 if rope_theta is None else rope_theta
        attention_scaling = _attention_scaling(config) if attention_scaling is None else attention_scaling
    if head_dim is None or rope_theta is None:
        raise ValueError("rotary_cos_sin needs a config, or head_dim and rope_theta")
    head_dim = _even_head_dim(head_dim, "head_dim")
    theta = _number_arg(rope_theta, "rope_theta", positive=True)
    scaling = 1.0 if attention_scaling is None else _number_arg(attention_scaling, "attention_scaling")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {_shown(dtype)}")
    position_ids = _tensor(position_ids, "position_ids", required=True)
    if position_ids.is_complex():
        raise ValueError(f"position_ids must hold real numbers, got {position_ids.dtype}")
    if position_ids.dim() == 2:
        position_ids = position_ids.unsqueeze(0).expand(3, -1, -1)
    if position_ids.dim() != 3 or position_ids.size(0) != 3:
        raise ValueError(f"position_ids must have shape [3, B, S] or [B, S], got {list(position_ids.shape)}")
    _tokens_of(position_ids, "position_ids")
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=position_ids.device).to(torch.float32) / head_dim
    inv_freq = 1.0 / (theta ** exponent)
    freqs = position_ids.detach().to(torch.float32)[..., None] * inv_freq  # one product: HF's K=1 matmul
    emb = torch.cat([freqs, freqs], -1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def _select_sections(t: Tensor, mrope_section) -> Tensor:
    """transformers' section selection: chunk i of the doubled sections reads axis i % 3."""
    sections = _sections(mrope_section) * 2
    if sum(sections) != t.size(-1):
        raise ValueError(f"mrope_section {sections[:3]} sums to {sum(sections) // 2}, but cos/sin "
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
    q, k, cos, sin = (_tensor_arg(x, name) for x, name in ((q, "q"), (k, "k"), (cos, "cos"), (sin, "sin")))
    if cos.dim() != 4 or cos.size(0) != 3 or sin.shape != cos.shape:
        raise ValueError(f"cos and sin must both have shape [3, B, S, D], got {list(cos.shape)} and {list(sin.shape)}")
    _tokens_of(cos[0, :, :, 0], "cos")
    if isinstance(unsqueeze_dim, bool) or not isinstance(unsqueeze_dim, int) or unsqueeze_dim not in (1, 2):
        raise ValueError(f"unsqueeze_dim must be 1 ([B, H, S, D]) or 2 ([B, S, H, D]), got {_shown(unsqueeze_dim)}")
    fused = _flag(fused, "fused", allow_none=True)
    seq_dim = 2 if unsqueeze_dim == 1 else 1
    for name, x in (("q", q), ("k", k)):
        if x.dim() != 4 or not x.is_floating_point():
            raise ValueError(f"{name} must be a floating 4-D tensor ([B, H, S, D] or [B, S, H, D]), got "
                             f"{x.dtype} {list(x.shape)}")
        if x.size(0) != cos.size(1) or x.size(seq_dim) != cos.size(2):
            raise ValueError(f"{name} has shape {list(x.shape)} (unsqueeze_dim {unsqueeze_dim}), but cos/sin are "
                             f"for batch {cos.size(1)} and seq_len {cos.size(2)}")
    cos_sel, sin_sel = _select_sections(cos, mrope_section), _select_sections(sin, mrope_section)
    half = cos_sel.size(-1) // 2
    use_fused = (q.dtype == torch.float32 and k.dtype == torch.float32) if fused is None else fused
    if use_fused and _fused_device(q) and _fused_device(k) and q.device == k.device == cos.device:
        table = torch.cat([cos_sel[..., :half], sin_sel[..., :half]], -1).to(torch.float32).contiguous()
        return apply_rotary(q, k, table, pairing="neox", qk_layout="bhsd" if unsqueeze_dim == 1 else "bshd")
    for name, x in (("q", q), ("k", k)):
        if x.size(-1) != cos.size(-1):
            raise ValueError(f"{name} has head_dim {x.size(-1)} but cos/sin {cos.size(-1)} columns (transformers' "
                             "formula multiplies them element by element)")
    cos_u, sin_u = cos_sel.unsqueeze(unsqueeze_dim).to(q.dtype), sin_sel.unsqueeze(unsqueeze_dim).to(q.dtype)
    return q * cos_u + _rotate_half(q) * sin_u, k * cos_u + _rotate_half(k) * sin_u



# ------------------------------------------------------------------- models ---

from ._hf_model import apply, from_pretrained, geometry, pack, restore  # noqa: E402 (needs the names above)
