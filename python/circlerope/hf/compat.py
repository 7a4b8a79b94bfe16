"""transformers releases: which compat mode reproduces each (compat_for_version), how each keeps
a model's rotary settings in its config (rotary_config), and a model's get_rope_index with the
exact signature and dtypes of a release (rope_index_fn).

Compat modes (circlerope.get_rope_index's compat=, docs/guides/compat.md); each was compared with
the real releases of its range (scripts/hf_matrix.sh):
    "hf-4.49"       transformers 4.49-4.51 (and Qwen's own code)
    "hf-4.52"       transformers 4.52-5.1
    "hf-5.2"        transformers 5.2
    "hf-5.3-5.5.3"  transformers 5.3-5.5.3
    "hf-5.5.4"      transformers 5.5.4
    "hf-5.6"        transformers 5.6-5.17 ("hf-5.3", its former name, is still accepted)
    "hf-5.18"       transformers 5.18 and later
"""

from __future__ import annotations

import re
from typing import Optional

import torch

from .._checks import instance, integer, shown, tensor, text, tokens_of
from ..config import CircleConfig, RotaryConfig, VisionConfig, rotary_option
from ..positions import COMPAT_MODES, REAL_TOKEN_MODES, compat_mode, get_rope_index
from . import families

Tensor = torch.Tensor


# ------------------------------------------------------------------ versions ---

def compat_for_version(version: str) -> str:
    """The compat mode that reproduces transformers `version` ("4.51.3", "4.57.0.dev0",
    "5.5.4"): hf-4.49 below 4.52, hf-4.52 below 5.2, hf-5.2 for 5.2, hf-5.3-5.5.3 from 5.3
    to 5.5.3, hf-5.5.4 for 5.5.4 (and later 5.5 patches), hf-5.6 from 5.6 to 5.17, hf-5.18
    from 5.18 on (docs/guides/compat.md). A missing patch number reads as 0; a development
    version (5.6.0.dev0) maps with its release. Versions before 4.49 (Qwen2-VL only) share
    4.49's rule but were not compared against."""
    if not isinstance(version, str):
        raise TypeError(f"transformers version must be a string like '4.52.0' (got {shown(version)})")
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        raise ValueError(f"transformers version {shown(version)} is not of the form MAJOR.MINOR[...]")
    release = (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    if release < (4, 45, 0):
        raise ValueError(f"transformers {shown(version)} predates Qwen2-VL's get_rope_index (4.45)")
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


def release_compat(compat) -> str:
    """A compat argument of circlerope.hf: a mode (as given; the core reads it), or None for the
    installed transformers'. "none", this project's own behaviour, is no release's."""
    if compat is None:
        return installed_compat()
    if compat_mode(compat) == "none":
        raise ValueError(f"compat {shown(compat)}: circlerope.hf reproduces a transformers release (one of "
                         f"{', '.join(COMPAT_MODES)}), or None for the installed one")
    return compat


def counts_real_tokens(compat: str) -> bool:
    """Whether the mode's get_rope_index takes mm_token_type_ids and its deltas count each row's
    real tokens only (transformers 5.3 on)."""
    return compat_mode(compat) in REAL_TOKEN_MODES


# ------------------------------------------------------------------- configs ---

def _get(config, name, default=None):
    """config.name, or config[name] for a dict."""
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def _text_config(config):
    text_config = _get(config, "text_config")
    return text_config if text_config is not None else config


def rope_field(config, name):
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


def model_type(config) -> str:
    """config.model_type, one of the families circlerope.hf switches (circlerope.hf.families);
    any other is a ValueError naming those and why this one is not among them."""
    return families.family(config).model_type


def head_dim(config) -> int:
    """The attention head width of a transformers config, as its rotary embedding reads it:
    head_dim, else hidden_size // num_attention_heads; even, in [2, 1024], as the core reads a
    rotary dim. transformers 5.x refuses an odd one in its config ("RoPE requires an even
    rotary dimension", above 4); 4.x computed ceil(d/2) frequencies over d and returned d + 1
    columns, which then did not fit the d-wide head."""
    text_config = _text_config(config)
    value = _get(text_config, "head_dim")
    if value is None:
        hidden, heads = _get(text_config, "hidden_size"), _get(text_config, "num_attention_heads")
        if hidden is None or heads is None:
            raise ValueError("config has no head_dim, nor hidden_size and num_attention_heads")
        value = (integer(hidden, "config hidden_size", 1, 1 << 30)
                 // integer(heads, "config num_attention_heads", 1, 1 << 20))
    return rotary_option("rotary_dim", value, "config head dimension")


def rotary_config(config) -> RotaryConfig:
    """The RotaryConfig of a transformers Qwen2-VL / Qwen2.5-VL config: mrope_section,
    rope_theta and the head dimension (head_dim, or hidden_size / num_attention_heads; an odd
    one is refused, as transformers 5.x refuses it)."""
    sections = rope_field(config, "mrope_section")
    if sections is None:
        raise ValueError("config has no mrope_section (in rope_scaling or rope_parameters)")
    theta = rope_field(config, "rope_theta")
    return RotaryConfig(sections=mrope_section(sections, "config mrope_section"),
                        theta=rotary_option("theta", 1e6 if theta is None else theta, "config rope_theta"),
                        rotary_dim=head_dim(config))


def mrope_section(value, name: str = "mrope_section") -> tuple:
    """transformers' mrope_section, three integers >= 0 (t, h, w) as a list, a tuple or a 1-D
    integer tensor, read as the core reads RotaryConfig.sections."""
    if isinstance(value, torch.Tensor) and value.dim() == 1 and not (value.is_floating_point() or value.is_complex()):
        value = value.tolist()
    return rotary_option("sections", value, name)


def attention_scaling(config) -> float:
    """transformers' rotary attention_scaling: 1.0 for the default rope type, which Qwen2-VL /
    Qwen2.5-VL checkpoints use; other rope types compute it, so it must be given."""
    rope_type = rope_field(config, "rope_type") or rope_field(config, "type")
    if rope_type is None or (isinstance(rope_type, str) and rope_type in ("default", "mrope")):
        return 1.0
    raise ValueError(f"rope_type {shown(rope_type)}: pass attention_scaling= (the model's "
                     "rotary_emb.attention_scaling)")


# ------------------------------------------------------------------- adapter ---

def expected_token_types(input_ids: Tensor, attention_mask, vision: VisionConfig) -> Tensor:
    """transformers' mm_token_type_ids of input_ids (1 image, 2 video, 0 text and padding)."""
    types = torch.zeros_like(input_ids, dtype=torch.int64)
    types[input_ids == vision.image_token_id] = 1
    types[input_ids == vision.video_token_id] = 2
    if attention_mask is not None:
        types[torch.as_tensor(attention_mask).to(input_ids.device) == 0] = 0
    return types


def check_token_types(mm_token_type_ids, input_ids, attention_mask, vision: VisionConfig) -> None:
    """transformers 5.3 finds vision tokens from mm_token_type_ids (1 image, 2 video); we find
    them from the token ids. Refuse the call where the two disagree instead of guessing. Every
    shape is compared before anything is converted."""
    if mm_token_type_ids is None or input_ids is None:
        return
    input_ids = tokens_of(tensor(input_ids, "input_ids"), "input_ids")
    given = tensor(mm_token_type_ids, "mm_token_type_ids")
    if given.shape != input_ids.shape:
        raise ValueError(f"mm_token_type_ids has shape {list(given.shape)} but input_ids {list(input_ids.shape)}")
    if given.is_floating_point() or given.is_complex():
        raise ValueError(f"mm_token_type_ids must hold integers, got {given.dtype}")
    if attention_mask is not None:
        attention_mask = tensor(attention_mask, "attention_mask")
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask has shape {list(attention_mask.shape)} but input_ids "
                             f"{list(input_ids.shape)}")
    given = given.to(input_ids.device).to(torch.int64)
    expected = expected_token_types(input_ids, attention_mask, vision)
    if attention_mask is not None:
        given = given.masked_fill(attention_mask.to(input_ids.device) == 0, 0)
    wrong = (given != expected).nonzero()
    if wrong.numel():
        b, s = (int(x) for x in wrong[0])
        raise ValueError(f"mm_token_type_ids[{b}][{s}] = {int(given[b, s])} but input_ids[{b}][{s}] = "
                         f"{int(input_ids[b, s])} (image tokens are type 1, video tokens type 2, text 0)")


def transformers_dtypes(scheme: str, position_ids: Tensor, rope_deltas: Tensor):
    """get_rope_index's float32 results in a release's dtypes: int64 for the integer schemes, as
    transformers returns them (exact: integers below 2^24); float32 under "circle", whose
    positions are fractional."""
    if scheme == "circle":
        return position_ids, rope_deltas
    return position_ids.to(torch.int64), rope_deltas.to(torch.int64)


def with_signature(compute, compat: str, qwen2: bool):
    """compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
    mm_token_type_ids=None) behind the get_rope_index signature of `compat`'s releases (Qwen2-VL's
    when qwen2: no second_per_grid_ts)."""
    if counts_real_tokens(compat):
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
    """A replacement for the get_rope_index of a model of a family circlerope.hf switches
    (circlerope.hf.families: Qwen2-VL, Qwen2.5-VL, Qwen3-VL and the families that follow their
    rules; any other model type is a ValueError naming them, the same families apply() takes).

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
    Those of the Qwen2-VL and Qwen3-VL rules have no second_per_grid_ts; under Qwen3-VL's rule
    each video frame is a block of its own (a video_grid_thw [t, h, w] read as t grids [1, h, w]).
    It returns (position_ids [3, B, S], rope_deltas [B, 1]) in transformers' dtypes: int64 for
    the integer schemes, as transformers does, and float32 under "circle", whose positions are
    fractional (circlerope.get_rope_index itself always returns float32).
    """
    compat = release_compat(compat)
    resolved = families.resolve(config, compat)  # refuses a model type circlerope.hf does not switch
    vision, split = resolved.vision, resolved.family.frames_are_blocks
    scheme = text(scheme, "scheme")
    circle = instance(circle, CircleConfig, "circle")
    # Validate everything now, not at the model's first forward pass.
    get_rope_index(torch.zeros(1, 1, dtype=torch.int64), scheme=scheme, circle=circle, vision=vision,
                   compat=compat)

    def compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
                mm_token_type_ids=None):
        if input_ids is None:
            raise TypeError("get_rope_index: input_ids is required (circlerope places tokens by their ids)")
        input_ids = resolved.core_ids(tensor(input_ids, "input_ids"))  # a list too, as get_rope_index takes it
        check_token_types(mm_token_type_ids, input_ids, attention_mask, vision)
        if split:  # Qwen3-VL's rule: each frame a block of its own
            video_grid_thw, second_per_grid_ts = families.split_frames(video_grid_thw), None
        return transformers_dtypes(scheme, *get_rope_index(
            input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
            scheme=scheme, circle=circle, vision=vision, compat=compat))

    get_rope_index_hf = with_signature(compute, compat, resolved.family.qwen2_signature)
    get_rope_index_hf.__doc__ = (f"circlerope positions ({scheme}) with transformers {compat[3:]}'s "
                                 "get_rope_index signature and conventions")
    get_rope_index_hf.compat = compat
    get_rope_index_hf.scheme = scheme
    # compute(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask, mm_token_type_ids=None)
    get_rope_index_hf.compute = compute
    return get_rope_index_hf
