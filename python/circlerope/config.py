"""The three configurations: CircleConfig (the Circle-RoPE geometry), VisionConfig (the token
convention of a Qwen2-VL / Qwen2.5-VL model) and RotaryConfig (the rotary frequencies).

Each is a frozen dataclass whose fields, defaults and docs come from the declaration of its
options in the core (circlerope/options.h: kCircleOptions, kVisionOptions, kRotaryOptions,
through _core), and the core reads and judges the values, once, when the dataclass is made: it
keeps them as the canonical tuple that the operators read (_args()). (RotaryConfig adds pairing,
a setting of the rotation that the kernels read, and takes rotary_dim None as 2 * sum(sections).)
A value the core refuses raises the core's message, as a TypeError where the value's Python type
is not the field's annotation (alpha="0.3", spatial_merge_size=2.7) and as a ValueError otherwise
(alpha=1.5). Where the core's grammar takes a value of another type, it is taken:
move_to_origin=1 is True, as in the reference's configs.

RotaryConfig.frequency_layout is the option the core names "layout" (the op rotary_table's
argument of that name): which position axis each frequency reads. "layout" alone, in this
package, is a token layout ("text:5,image:3x3"), and qk_layout the memory layout of q and k.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Optional, Tuple, Union

from . import _core
from ._checks import is_integer, is_number, plain


def _declared(options) -> dict:
    """{key: (default, doc)} of a table of options, in its order."""
    return {key: (default, doc) for key, default, doc, _ in options}


_CIRCLE = _declared(_core.circle_options())
_VISION = _declared(_core.vision_options())
_ROTARY = _declared(_core.rotary_options())
# RotaryConfig's field of each rotary option of the core: the key, but for the frequency layout.
_ROTARY_FIELDS = {"sections": "sections", "theta": "theta", "frequency_layout": "layout", "rotary_dim": "rotary_dim"}
_ROTARY_NAMES = {key: f"RotaryConfig.{field}" for field, key in _ROTARY_FIELDS.items()}


def _fits(value, annotation) -> bool:
    """Whether `value` has a Python type that the field's annotation names: float takes an int
    too, Tuple[int, ...] a list or tuple of ints; bool is neither an int nor a number here."""
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return is_integer(value)
    if annotation is float:
        return is_number(value)
    if annotation is str:
        return isinstance(value, str)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Union:
        return any(_fits(value, a) for a in args)
    if origin is tuple:
        return isinstance(value, (tuple, list)) and all(_fits(plain(x), args[0]) for x in value)
    return isinstance(value, annotation)


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _judge(config, values: dict, read) -> tuple:
    """The canonical tuple of `values` ({field: the user's value}) by the core's `read(values)`.
    A field whose type does not fit its annotation goes through the core alone first (the
    others at their defaults), so that its TypeError carries the core's message about it."""
    hints = _hints(type(config))
    for name, value in values.items():
        if not _fits(value, hints[name]):
            try:
                read({name: value})
            except ValueError as e:
                raise TypeError(str(e)) from None
    return read(values)


def _document(cls, summary: str, declared: dict, fields: dict) -> None:
    """cls.__doc__: the summary, then each field with the doc and default of its option."""
    lines = [summary, ""]
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for field, key in fields.items():
        lines.append(f"    {field}: {declared[key][1]} [default {defaults[field]!r}].")
    cls.__doc__ = "\n".join(lines)


def _read_circle(values: dict) -> tuple:
    """The core's reading of CircleConfig values (any of the fields; the others at their defaults),
    which takes them in the declaration's order."""
    given = {key: default for key, (default, _) in _CIRCLE.items()}
    given.update(values)
    return _core.circle_config(tuple(given.values()))


def _read_rotary(values: dict) -> tuple:
    """The core's reading of RotaryConfig's option fields (any of them), each by its key."""
    return _core.rotary_config({_ROTARY_FIELDS[field]: value for field, value in values.items()}, _ROTARY_NAMES)


@dataclasses.dataclass(frozen=True)
class CircleConfig:
    radius: Union[float, str] = _CIRCLE["radius"][0]
    alpha: float = _CIRCLE["alpha"][0]
    move_to_origin: bool = _CIRCLE["move_to_origin"][0]
    dff_rate: Union[float, bool] = _CIRCLE["dff_rate"][0]
    move_to_positive: Union[float, str, bool, None] = _CIRCLE["move_to_positive"][0]

    def __post_init__(self):
        values = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        object.__setattr__(self, "_cached_args", _judge(self, values, _read_circle))  # frozen: computed once

    def _args(self) -> tuple:
        """The op rope_index's circle arguments, in order."""
        return self._cached_args


_document(CircleConfig, "Circle-RoPE options (docs/spec.md §3). Defaults: the paper's recommended setting.", _CIRCLE,
          {key: key for key in _CIRCLE})


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    spatial_merge_size: int = _VISION["spatial_merge_size"][0]
    tokens_per_second: float = _VISION["tokens_per_second"][0]
    vision_start_token_id: int = _VISION["vision_start_token_id"][0]
    image_token_id: int = _VISION["image_token_id"][0]
    video_token_id: int = _VISION["video_token_id"][0]
    time: str = _VISION["time"][0]

    def __post_init__(self):
        # The core reads each field by its key (circlerope/options.h, kVisionOptions).
        values = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        object.__setattr__(self, "_cached_args", _judge(self, values, _core.vision_config))

    def _args(self) -> tuple:
        return self._cached_args

    @classmethod
    def from_hf_config(cls, config) -> "VisionConfig":
        """Reads the ids from a transformers Qwen2-VL / Qwen2.5-VL config (object or dict):
        vision_start_token_id, image_token_id, video_token_id, and vision_config's
        spatial_merge_size and tokens_per_second. Qwen2-VL (model_type "qwen2_vl", or no
        tokens_per_second) counts video time in frames ("index"). A GLM-4V config, which has
        no vision_start_token_id, gives its image_start_token_id (each image and video frame
        opens with it); its video frames hold image tokens, which circlerope.hf.rope_index_fn
        reads as video tokens (circlerope.get_rope_index takes them as video_token_id)."""
        def get(holder, name, default=None):
            if isinstance(holder, dict):
                return holder.get(name, default)
            return getattr(holder, name, default)

        vision = get(config, "vision_config")
        if get(config, "vision_start_token_id") is None and get(config, "image_start_token_id") is not None:
            # GLM-4V's configs: every image and video frame opens with image_start_token_id
            config = dict(vision_start_token_id=get(config, "image_start_token_id"), vision_config=vision,
                          **{n: get(config, n) for n in ("image_token_id", "video_token_id", "model_type")})
        missing = [n for n in ("vision_start_token_id", "image_token_id", "video_token_id")
                   if get(config, n) is None]
        if missing:
            raise ValueError(f"VisionConfig.from_hf_config: the config has no {', '.join(missing)}")
        tps = get(vision, "tokens_per_second") if vision is not None else None
        qwen2 = get(config, "model_type") == "qwen2_vl" or tps is None
        merge = get(vision, "spatial_merge_size") if vision is not None else None
        return cls(
            spatial_merge_size=cls.spatial_merge_size if merge is None else merge,
            tokens_per_second=cls.tokens_per_second if tps is None else tps,
            vision_start_token_id=get(config, "vision_start_token_id"),
            image_token_id=get(config, "image_token_id"),
            video_token_id=get(config, "video_token_id"),
            time="index" if qwen2 else "seconds")


_document(VisionConfig, "Token ids and constants of the Qwen2-VL / Qwen2.5-VL convention (Qwen2.5-VL "
          "defaults). (The option compat is get_rope_index's argument: the behaviour of a call, not a "
          "constant of the model.)", _VISION, {f.name: f.name for f in dataclasses.fields(VisionConfig)})


@dataclasses.dataclass(frozen=True)
class RotaryConfig:
    sections: Tuple[int, ...] = _ROTARY["sections"][0]
    theta: float = _ROTARY["theta"][0]
    frequency_layout: str = _ROTARY["layout"][0]
    rotary_dim: Optional[int] = None
    pairing: str = "neox"

    def __post_init__(self):
        values = {field: plain(getattr(self, field)) for field in _ROTARY_FIELDS}
        if isinstance(values["sections"], (tuple, list)):
            values["sections"] = tuple(plain(x) for x in values["sections"])
        args = _judge(self, values, _read_rotary)
        # pairing is a setting of the rotation, read by the kernels' own parser
        pairing = plain(self.pairing)
        try:
            _core.pairing(pairing, "RotaryConfig.pairing")
        except ValueError as e:
            raise (ValueError if isinstance(pairing, str) else TypeError)(str(e)) from None
        object.__setattr__(self, "_cached_args", args)

    @property
    def dim(self) -> int:
        """The rotary dimension: rotary_dim, or 2 * sum(sections) when that is None."""
        return self._cached_args[1]

    def _args(self) -> tuple:
        """The op rotary_table's settings in the declaration's order: theta, rotary_dim, the
        frequency layout, sections."""
        return self._cached_args


_document(RotaryConfig, "Which position axis each rotary frequency reads (docs/spec.md §4), and how the rotation pairs "
          "the dimensions.", _ROTARY, _ROTARY_FIELDS)
RotaryConfig.__doc__ += (
    "\n    (rotary_dim None is 2 * sum(sections). frequency_layout: chunked is Qwen2/2.5-VL's [t, h, w]"
    " sections, interleaved Qwen3-VL's, single 1-D RoPE on the temporal axis; heads may be wider"
    " than rotary_dim, the rest passes through.)"
    "\n    pairing: which dimensions rotate together: neox (rotate_half, Qwen/Llama) or gptj"
    " (adjacent pairs) [default 'neox'].")

def rotary_option(field: str, value, name: str):
    """One rotary setting (a RotaryConfig field but pairing) read by the core alone, named `name`
    in its messages, as circlerope.hf reads transformers' names for them (rope_theta, head_dim,
    mrope_section): its canonical value, or the core's message as a TypeError (a type the field's
    annotation does not name) or a ValueError."""
    key = _ROTARY_FIELDS[field]
    value = plain(value)
    if isinstance(value, (tuple, list)):
        value = tuple(plain(x) for x in value)
    given = {key: value} if key == "layout" else {key: value, "layout": "single"}  # no sum to match alone
    try:
        args = _core.rotary_config(given, {key: name})
    except ValueError as e:
        raise (ValueError if _fits(value, _hints(RotaryConfig)[field]) else TypeError)(str(e)) from None
    return args[list(_ROTARY).index(key)]


DEFAULT_CIRCLE = CircleConfig()
DEFAULT_VISION = VisionConfig()
DEFAULT_ROTARY = RotaryConfig()
