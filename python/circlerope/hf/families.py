"""The transformers model families circlerope.hf switches, and those it refuses, in one table.

A family is a transformers model_type whose get_rope_index places tokens by one of the rules
circlerope reproduces (each in every compat mode, docs/guides/compat.md):

    "qwen2_vl"    Qwen2-VL's: a vision block of t x h x w tokens takes its grid's positions, a
                  video's frames one temporal step apart; text after a block continues at its
                  start + max(h, w) / merge. No second_per_grid_ts.
    "qwen2_5_vl"  Qwen2.5-VL's: Qwen2-VL's, with a video's frames second_per_grid_ts *
                  tokens_per_second apart.
    "qwen3_vl"    Qwen3-VL's: Qwen2-VL's on blocks of one frame. The processor puts a timestamp
                  before every frame of a video, so each frame is a vision block of its own, and
                  a video_grid_thw [t, h, w] is read as t grids [1, h, w].

The rule decides get_rope_index's signature (Qwen2-VL's and Qwen3-VL's take no
second_per_grid_ts) and how video grids are read; apply(), restore(), pack(), rope_index_fn() and
the positions of each read the family from this table, so they agree on what is covered.

How a family marks its blocks (Family.block_start, Family.video_span). circlerope's core finds a
block as a vision start token right before a run of image or video tokens, and tells images from
videos by the token. The Qwen families open every block with vision_start_token_id. GLM-4V and
its relatives have no such id: every image, and every frame of a video, is
<|begin_of_image|> image tokens <|end_of_image|>, and a video's frames sit between
<|begin_of_video|> and <|end_of_video|>, holding the image token too (GLM's processor marks them
video in mm_token_type_ids). So for GLM the block start is image_start_token_id, and
Resolved.core_ids rewrites the image tokens inside a video span to video_token_id before the
core reads them, which makes the core's image/video split the processor's.

A family is covered where the installed transformers' get_rope_index follows its rule
(Family.since: GLM's follows Qwen3-VL's from 5.3, with mm_token_type_ids; before, GLM has a
get_rope_index of its own, which finds video frames between the span's tokens itself and was not
compared against, so it is refused there). python/tests/test_hf_families.py checks, for every
covered family the installed release has, that its M-RoPE positions equal the family's own
get_rope_index (values and dtypes), that switched M-RoPE gives the unswitched logits bit for bit,
and that Circle-RoPE and AGE run forward, backward, pack and a cached generate() equal to a full
recompute.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Tuple

import torch

from .._checks import shown
from ..config import VisionConfig
from ..positions import compat_mode

Tensor = torch.Tensor

RULES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
# The model type of a checkpoint saved from a switched model is its family's with this appended
# (circlerope.hf.registry); it is that family.
SAVED_SUFFIX = "_circlerope"


@dataclasses.dataclass(frozen=True)
class Family:
    model_type: str
    name: str                     # as its authors name it
    rule: str                     # one of RULES: whose get_rope_index it follows
    block_start: str = "vision_start_token_id"  # the config attribute of the token opening a block
    video_span: Optional[Tuple[str, str]] = None  # GLM: config attributes of a video's start and end
    since: Tuple[int, int] = (4, 45)  # the first transformers release whose get_rope_index follows rule
    # rotation="fused" checked against the release's rotation (test_hf_models.py, test_hf_families.py):
    # its table's layout is the rule's (Qwen3-VL's interleaved, the others chunked). Not GLM's
    # (it rotates interleaved pairs), Qwen3.5's (linear-attention layers have no q/k to rotate) or
    # Cohere Compass' (a rope type per layer type).
    fused: bool = False

    @property
    def qwen2_signature(self) -> bool:
        """get_rope_index takes no second_per_grid_ts (Qwen2-VL's and Qwen3-VL's signature)."""
        return self.rule != "qwen2_5_vl"

    @property
    def frames_are_blocks(self) -> bool:
        """Each video frame is a vision block of its own (Qwen3-VL's rule)."""
        return self.rule == "qwen3_vl"


_GLM_VIDEO = ("video_start_token_id", "video_end_token_id")
_GLM = dict(rule="qwen3_vl", block_start="image_start_token_id", video_span=_GLM_VIDEO, since=(5, 3))

FAMILIES = {f.model_type: f for f in (
    Family("qwen2_vl", "Qwen2-VL", "qwen2_vl", fused=True),
    Family("qwen2_5_vl", "Qwen2.5-VL", "qwen2_5_vl", fused=True),
    Family("qwen3_vl", "Qwen3-VL", "qwen3_vl", fused=True),
    Family("qwen3_vl_moe", "Qwen3-VL-MoE", "qwen3_vl", fused=True),
    Family("qwen3_5", "Qwen3.5", "qwen3_vl"),
    Family("qwen3_5_moe", "Qwen3.5-MoE", "qwen3_vl"),
    Family("cohere_compass", "Cohere Compass", "qwen3_vl"),
    Family("cosmos3_omni", "Cosmos3-Omni", "qwen3_vl", fused=True),
    # Qwen2-VL's get_rope_index on the video grids split into frames: Qwen3-VL's rule.
    Family("cosmos3_edge", "Cosmos3-Edge", "qwen3_vl", fused=True),
    Family("paddleocr_vl", "PaddleOCR-VL", "qwen2_vl", fused=True),
    Family("glm4v", "GLM-4.1V", **_GLM),
    Family("glm4v_moe", "GLM-4.5V", **_GLM),
    Family("glm46v", "GLM-4.6V", **_GLM),
    Family("glm_ocr", "GLM-OCR", **_GLM),
)}

# Families with a 3-D get_rope_index that circlerope.hf does not switch, and why.
REFUSED = {
    "qwen2_5_omni": "its thinker's get_rope_index also places audio, and interleaves a video's audio with its "
                    "frames (use_audio_in_video): circlerope's geometry has no audio blocks",
    "qwen2_5_omni_thinker": "it places audio too, and interleaves a video's audio with its frames "
                            "(use_audio_in_video): circlerope's geometry has no audio blocks",
    "qwen3_omni_moe": "its thinker's get_rope_index also places audio, and interleaves a video's audio with its "
                      "frames (use_audio_in_video): circlerope's geometry has no audio blocks",
    "qwen3_omni_moe_thinker": "it places audio too, and interleaves a video's audio with its frames "
                              "(use_audio_in_video): circlerope's geometry has no audio blocks",
    "ernie4_5_vl_moe": "its get_rope_index merges every temporal_merge_size video frames into one temporal "
                       "position, and opens images and videos with different start tokens",
    "glm_image": "its get_rope_index lays out the grids of images it generates, per sample "
                 "(images_per_sample), not Qwen-VL's blocks",
    "hunyuan_vl": "its get_rope_index gives a block (width, height, image index) axes, the image index "
                  "counting images, not Qwen-VL's (t, h, w) from the block's start",
    "hy_v4_vl": "each row of its vision blocks ends with a newline token, and text after a block continues "
                "at the block's largest position + 1, not at its start + max(h, w) / merge",
    "minicpmv4_7": "its get_rope_index lays out image crops on a canvas (target_sizes), not Qwen-VL's "
                   "grid blocks",
    "qwen4_exp": "its get_rope_index is Qwen3-VL's, but its token indexer rotates cached keys with the positions "
                 "of the whole cache, which the model keeps itself, where a switched model hands the rotary the "
                 "positions of the current call only",
    "qwen2_5_vl_circle_rope": "it is ms-swift's name for the official Circle-RoPE model: load the checkpoint as "
                              "qwen2_5_vl; its config's circle_rope dict is then read by circlerope.hf.apply(model)",
}


def _get(config, name, default=None):
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def _release() -> Optional[Tuple[int, int]]:
    try:
        import transformers  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return None
    match = re.match(r"(\d+)\.(\d+)", transformers.__version__)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _known(model_type: str) -> bool:
    """Whether the installed transformers has the model type (True without transformers)."""
    try:
        from transformers import CONFIG_MAPPING  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return True
    try:
        return model_type in CONFIG_MAPPING
    except Exception:  # noqa: BLE001 (a release whose mapping fails on a name does not have it)
        return False


def supported(release: Optional[Tuple[int, int]] = None) -> list:
    """The model types circlerope.hf switches: under the installed transformers (default), those
    it has whose get_rope_index follows their rule there; under `release` (major, minor), every
    family whose rule that release follows (the families it has are not known here)."""
    if release is not None:
        return [t for t, f in FAMILIES.items() if release >= f.since]
    release = _release()
    return [t for t, f in FAMILIES.items() if (release is None or release >= f.since) and _known(t)]


def _supported_text() -> str:
    return ", ".join(supported()) + " (Qwen2-VL's, Qwen2.5-VL's or Qwen3-VL's get_rope_index rule)"


def family(config) -> Family:
    """The Family of a transformers config (or a dict with model_type), or a ValueError naming
    what circlerope.hf switches and why this model type is not among them."""
    model_type = _get(config, "model_type")
    saved = isinstance(model_type, str) and model_type.endswith(SAVED_SUFFIX)
    if saved and model_type[:-len(SAVED_SUFFIX)] in FAMILIES:
        model_type = model_type[:-len(SAVED_SUFFIX)]  # a checkpoint saved from a switched model
    release = _release()
    where = f"config.model_type {shown(model_type)}"
    if isinstance(model_type, str) and model_type in FAMILIES:
        found = FAMILIES[model_type]
        if release is None or release >= found.since:
            return found
        import transformers  # noqa: PLC0415 (found above)
        own = f"{found.name}'s get_rope_index is its own" if _known(model_type) else f"there is no {found.name}"
        raise ValueError(f"{where}: under transformers {transformers.__version__} {own} (Qwen3-VL's rule from "
                         f"transformers {found.since[0]}.{found.since[1]} on); circlerope.hf switches "
                         f"{_supported_text()}")
    if isinstance(model_type, str) and model_type in REFUSED:
        raise ValueError(f"{where}: circlerope.hf does not switch it: {REFUSED[model_type]}; it switches "
                         f"{_supported_text()}")
    # Any other type (a text model, a name read from a file) is told the rule and where the list
    # is, in a line short enough for any value (the list alone is 200 characters).
    raise ValueError(f"{where}: not a model family circlerope.hf switches (those whose get_rope_index follows "
                     "Qwen2-VL's, Qwen2.5-VL's or Qwen3-VL's rule: circlerope.hf.families.supported() lists them)")


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A family with the token ids of one config: its VisionConfig for the core, and (GLM) the
    ids of a video's start and end tokens."""

    family: Family
    vision: VisionConfig
    video_span: Optional[Tuple[int, int]] = None

    def core_ids(self, input_ids: Tensor) -> Tensor:
        """input_ids as circlerope's core reads them: unchanged, or (GLM) with the image tokens
        between a video's start and end tokens replaced by video_token_id, along the last
        dimension (a row, or each row of a batch). Applying it twice changes nothing more."""
        if self.video_span is None or not isinstance(input_ids, Tensor) or input_ids.numel() == 0:
            return input_ids
        start, end = self.video_span
        inside = (input_ids == start).cumsum(-1) > (input_ids == end).cumsum(-1)
        return input_ids.masked_fill(inside & (input_ids == self.vision.image_token_id), self.vision.video_token_id)

    def token_types(self, input_ids: Tensor, attention_mask=None) -> Tensor:
        """The mm_token_type_ids transformers' processor makes for input_ids: 1 for an image
        token, 2 for a video token (GLM: an image token inside a video span), 0 for text and
        padding."""
        ids = self.core_ids(input_ids)
        types = torch.zeros_like(ids, dtype=torch.int64)
        types[ids == self.vision.image_token_id] = 1
        types[ids == self.vision.video_token_id] = 2
        if attention_mask is not None:
            types[torch.as_tensor(attention_mask).to(ids.device) == 0] = 0
        return types


def resolve(config, compat: Optional[str] = None) -> Resolved:
    """The Family of a config (family(config)) with its token ids, for compat mode `compat` (a
    release's, as circlerope.hf reads it)."""
    found = family(config)
    vision = vision_config(config, found, compat)
    span = None
    if found.video_span is not None:
        span = tuple(_get(config, name) for name in found.video_span)
        if any(not isinstance(x, int) for x in span):
            raise ValueError(f"{found.name}: the config has no {' / '.join(found.video_span)} (the tokens around a "
                             "video's frames)")
    return Resolved(found, vision, span)


def vision_config(config, found: Optional[Family] = None, compat: Optional[str] = None) -> VisionConfig:
    """The VisionConfig of a family's config: its block start token as vision_start_token_id
    (GLM: image_start_token_id), image and video token ids, spatial_merge_size and
    tokens_per_second of its vision_config; video time in frames ("index") for the Qwen2-VL
    rule, for Qwen3-VL's as its `compat` mode's Qwen3-VL places blocks (below), and as
    VisionConfig.from_hf_config reads it otherwise."""
    found = family(config) if found is None else found
    start = _get(config, found.block_start)
    if start is None:
        raise ValueError(f"{found.name}: the config has no {found.block_start} (the token opening a vision block)")
    fields = {"model_type": "qwen2_vl" if found.rule == "qwen2_vl" else found.model_type,
              "vision_start_token_id": start, "image_token_id": _get(config, "image_token_id"),
              "video_token_id": _get(config, "video_token_id"), "vision_config": _get(config, "vision_config")}
    vision = VisionConfig.from_hf_config(fields)
    if found.frames_are_blocks:
        # Qwen2-VL's rule on blocks of one frame (t = 1), whose time never moves a position,
        # except in two quirks the core ties to the time mode: hf-5.3-5.5.4 multiply a block's
        # start by the interval of "seconds" (Qwen3-VL's code takes Qwen2-VL's interval, 1:
        # "index"), and hf-5.2 clamps the deltas of "index" at 0 (its Qwen2-VL does, its Qwen3-VL
        # not: "seconds").
        seconds = compat is not None and compat_mode(compat) == "hf-5.2"
        vision = dataclasses.replace(vision, time="seconds" if seconds else "index")
    return vision


def linear_attention_layers(config) -> list:
    """The layers of a hybrid model (Qwen3.5) that are linear attention (config's layer_types,
    or its text_config's): they take no positions, and carry a recurrent state along the row."""
    text = _get(config, "text_config") or config
    kinds = _get(text, "layer_types") or []
    return [i for i, kind in enumerate(kinds) if kind == "linear_attention"]


def check_plan_reaches_attention(config, per_layer: list) -> None:
    """Refuses a plan (a scheme per layer) that gives a geometry to linear-attention layers only
    (which take no positions): AGE's "alternate" on Qwen3.5, whose attention layers are the 4th,
    8th, ... (odd indices), would leave every attention layer on M-RoPE and Circle-RoPE nowhere."""
    linear = set(linear_attention_layers(config))
    if not linear:
        return
    reached = {scheme for i, scheme in enumerate(per_layer) if i not in linear}
    missed = [scheme for scheme in dict.fromkeys(per_layer) if scheme not in reached]
    if missed:
        attention = [i for i in range(len(per_layer)) if i not in linear]
        raise ValueError(f"this plan puts {', '.join(missed)} on linear-attention layers only, which take no "
                         f"positions; the attention layers are {attention[:8]}{' ...' if len(attention) > 8 else ''}: "
                         "give them each geometry with a pattern (age='MMMCMMMM' * 4 alternates a 32-layer Qwen3.5's)")


def split_frames(video_grid_thw):
    """Qwen3-VL's rule: each video grid [t, h, w] as t grids [1, h, w] (None stays None)."""
    if video_grid_thw is None:
        return None
    grid = torch.as_tensor(video_grid_thw, dtype=torch.int64).reshape(-1, 3)
    grid = grid.repeat_interleave(grid[:, 0], dim=0)
    grid[:, 0] = 1
    return grid
