"""circlerope: Circle-RoPE positions and fused rotary embeddings for PyTorch.

Drop-in pieces for a Qwen2-VL / Qwen2.5-VL style model (arXiv 2505.16416):

    import circlerope
    position_ids, rope_deltas = circlerope.get_rope_index(
        input_ids, image_grid_thw, attention_mask=attention_mask)      # scheme="circle"
    q, k = circlerope.apply_multimodal_rotary(q, k, position_ids,
                                              sections=(16, 24, 24), theta=1e6)

AGE (a geometry per layer) with one angle table per distinct geometry:

    rope = circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", 36))
    angles = rope(input_ids, image_grid_thw, attention_mask=attention_mask)
    q, k = angles.apply(layer_index, q, k)

Everything runs through torch.ops.circlerope (the C++ operators); invalid input raises
ValueError with the core's message. Positions are computed on the CPU (and returned on
input_ids' device). Tables and rotation run on the CPU, and on CUDA tensors when the operator
library was built with the CUDA kernels against a CUDA libtorch (has_cuda_kernels()). CPU
kernel threads follow torch.get_num_threads(): set it with torch.set_num_threads().
"""

from __future__ import annotations

import dataclasses
import glob
import numbers
import os
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import _core

__version__ = _core.__version__

__all__ = [
    "CircleConfig", "VisionConfig", "RotaryConfig", "AgePlan", "CouplingMetrics",
    "get_rope_index", "rotary_table", "apply_rotary", "apply_multimodal_rotary", "cos_sin",
    "decode_position_ids", "RotaryEmbedding", "RotaryAngles", "ptd", "layout_positions",
    "has_cuda_kernels",
]


class CpuPath(NamedTuple):
    """The CPU code path of this process (circlerope/cpu_path.h): name is portable, avx2,
    avx512 or avx512bf16; reason says why, e.g. "forced by CIRCLEROPE_ISA=avx2"."""
    name: str
    reason: str


def cpu_path() -> CpuPath:
    """The CPU code path the rotation and the positions run in this process, and why. The
    environment variable CIRCLEROPE_ISA (portable, avx2, avx512, avx512bf16), read once per
    process, forces one; a value that is no path, or one this CPU lacks, makes ``import
    circlerope`` raise ValueError naming the value and the reason."""
    return CpuPath(*_core.cpu_path())


cpu_path()  # an unusable CIRCLEROPE_ISA is a ValueError here, at import, not at first use
__all__ += ["CpuPath", "cpu_path"]


def _load_operators() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libcirclerope_torch*.so")))
    if not found:
        raise ImportError(f"circlerope: the operator library libcirclerope_torch.so is not in {here}; "
                          "build the project with libtorch found (CIRCLEROPE_BUILD_TORCH)")
    torch.ops.load_library(found[0])


_load_operators()
_ops = torch.ops.circlerope

from . import _registration  # noqa: E402  (fake kernels and autograd: needs the operators loaded)

_registration.register()


def _operators_have_cuda() -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("circlerope::rotary_apply", "CUDA"))
    except (AttributeError, RuntimeError):  # a torch without the query: no way to tell, so no
        return False


_CUDA_KERNELS = _operators_have_cuda()


def has_cuda_kernels() -> bool:
    """Whether the operator library was built with the CUDA kernels (CIRCLEROPE_CUDA against a
    CUDA libtorch): then rotary_table and the rotation take CUDA tensors too. Says nothing
    about whether a GPU is present (torch.cuda.is_available())."""
    return _CUDA_KERNELS

def check_cuda_positions(device=None) -> None:
    """Raises the CPU's ValueError for a non-finite position that rotary_table met on a CUDA
    device, and clears it. On CUDA, rotary_table never waits for the device (so that it can be
    captured in a CUDA graph), so it cannot refuse such a position when called: that token's
    table entries become NaN, the kernel records the position, and the next rotary_table call
    on the device raises for it if the kernel has finished by then. This function waits for
    the device (torch.cuda.synchronize) and reports what every table queued so far recorded.
    device: a CUDA device or its index (default: the current one). Does nothing when the
    operators have no CUDA kernels."""
    if not _CUDA_KERNELS:
        return
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(
        "cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {_shown(str(device))}")
    index = torch.cuda.current_device() if device.index is None else device.index
    torch.cuda.synchronize(index)
    message = _ops.take_position_error(index)
    if message:
        raise ValueError(message)


__all__ += ["check_cuda_positions"]

Tensor = torch.Tensor


# ------------------------------------------------------------ value checks ---
# Configuration values are read and judged by the core, with the one grammar every front end
# shares (circlerope/options.h): the classes below hand the user's raw values to _core. What
# stays here is what the core cannot see: numpy and one-element tensor scalars become Python
# scalars, the Python-only arguments (layer indices) are checked, and tensors' layouts and
# sizes are checked on their shapes before anything reads, converts or copies them.
#
# Every invalid argument raises ValueError, a wrong type included (an int where a str belongs,
# a list where a tensor belongs): the package has one exception for "this call cannot be done
# with these arguments", named after the argument and its value. TypeError stays Python's own,
# for a call that does not fit the signature (a missing or unknown argument).

def _shown(value) -> str:
    """A value in a message by the one quoting rule of every front end (circlerope/detail/quote.h,
    through _core): a str in quotes, anything else as its repr(); at most 40 characters of it,
    bytes outside printable ASCII escaped, so a message stays one short line."""
    if isinstance(value, str):
        return _core.quoted(value)
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not replace the real error
        text = f"<{type(value).__name__}>"
    return _core.escaped(text if isinstance(text, str) else f"<{type(value).__name__}>")


_MAX_TOKENS = _core.MAX_TOKENS  # circlerope::kMaxTokens, the limit of one call


def _check_tokens(name: str, batch: int, seq_len: int) -> None:
    """A [batch, seq_len] of tokens within the core's limit of one call, judged on the shape:
    an expand() view of 2^40 tokens costs nothing until something copies it, and the operators
    copy their inputs into their own layout before the core sees the size."""
    if batch > _MAX_TOKENS or seq_len > _MAX_TOKENS or batch * seq_len > _MAX_TOKENS:
        raise ValueError(f"{name}: batch {batch} x seq_len {seq_len} is more than {_MAX_TOKENS} tokens, "
                         "the limit of one call")


def _check_count(name: str, t: Tensor, limit: int, what: str) -> None:
    """At most `limit` elements, judged on the shape (see _check_tokens)."""
    if t.numel() > limit:
        raise ValueError(f"{name} has shape {list(t.shape)}: more than {limit} {what}, the limit of one call")


def _check_layout(t: Tensor, name: str) -> None:
    """Sparse, mkldnn and other layouts without strides: the operators would fail on them with
    torch's dispatcher error, or read them as garbage."""
    if t.layout != torch.strided:
        raise ValueError(f"{name} is a {t.layout} tensor; circlerope takes dense (torch.strided) tensors "
                         f"({name}.to_dense() makes one)")


def _plain(value):
    """A numpy scalar or a one-element tensor as the Python scalar it holds."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _text(value, name: str) -> str:
    """A str that the operators can take (torch refuses lone surrogates with a RuntimeError)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {_shown(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} {_shown(value)} is not UTF-8 text (it holds a lone surrogate)") from None
    return value


# ------------------------------------------------------------------ configs ---

def _circle_config_class():
    """CircleConfig, made from the declaration of the Circle-RoPE options in the core
    (circlerope/options.h, kCircleOptions): one field per option, in its order, with its default.
    The values are the user's, as given; the core reads and judges them once, here."""
    options = _core.circle_options()  # (key, default, doc, example)
    keys = tuple(key for key, *_ in options)

    def __post_init__(self):
        args = _core.circle_config(tuple(_plain(getattr(self, key)) for key in keys))
        object.__setattr__(self, "_cached_args", args)  # frozen: computed once

    def _args(self) -> tuple:
        """The op rope_index's circle arguments, in order."""
        return self._cached_args

    cls = dataclasses.make_dataclass(
        "CircleConfig", [(key, object, dataclasses.field(default=default)) for key, default, *_ in options],
        namespace={"__post_init__": __post_init__, "_args": _args}, frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = ("Circle-RoPE options (SPEC 3). Defaults: the paper's recommended setting.\n\n" +
                   "\n".join(f"    {key}: {doc} [default {default!r}]." for key, default, doc, _ in options))
    return cls


CircleConfig = _circle_config_class()


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """Token ids and constants of the Qwen2-VL / Qwen2.5-VL convention (Qwen2.5-VL defaults).

    time: "seconds" (Qwen2.5-VL: floor(f * second_per_grid_t * tokens_per_second)) or
    "index" (Qwen2-VL: frame index).
    """

    spatial_merge_size: int = 2
    tokens_per_second: float = 2.0
    vision_start_token_id: int = 151652
    image_token_id: int = 151655
    video_token_id: int = 151656
    time: str = "seconds"

    def __post_init__(self):
        # The core reads each field by its key (circlerope/options.h, kVisionOptions).
        args = _core.vision_config({f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)})
        object.__setattr__(self, "_cached_args", args)

    def _args(self) -> tuple:
        return self._cached_args

    @classmethod
    def from_hf_config(cls, config) -> "VisionConfig":
        """Reads the ids from a transformers Qwen2-VL / Qwen2.5-VL config (object or dict):
        vision_start_token_id, image_token_id, video_token_id, and vision_config's
        spatial_merge_size and tokens_per_second. Qwen2-VL (model_type "qwen2_vl", or no
        tokens_per_second) counts video time in frames ("index")."""
        def get(holder, name, default=None):
            if isinstance(holder, dict):
                return holder.get(name, default)
            return getattr(holder, name, default)

        vision = get(config, "vision_config")
        missing = [n for n in ("vision_start_token_id", "image_token_id", "video_token_id")
                   if get(config, n) is None]
        if missing:
            raise ValueError(f"VisionConfig.from_hf_config: the config has no {', '.join(missing)}")
        tps = get(vision, "tokens_per_second") if vision is not None else None
        qwen2 = get(config, "model_type") == "qwen2_vl" or tps is None
        merge = get(vision, "spatial_merge_size") if vision is not None else None
        return cls(
            spatial_merge_size=2 if merge is None else merge,
            tokens_per_second=2.0 if tps is None else tps,
            vision_start_token_id=get(config, "vision_start_token_id"),
            image_token_id=get(config, "image_token_id"),
            video_token_id=get(config, "video_token_id"),
            time="index" if qwen2 else "seconds")


@dataclasses.dataclass(frozen=True)
class RotaryConfig:
    """Which position axis each rotary frequency reads (SPEC 4).

    layout: "chunked" (Qwen2/2.5-VL, sections [t, h, w] summing to rotary_dim / 2),
    "interleaved" (Qwen3-VL) or "single" (1-D RoPE on the temporal axis).
    rotary_dim: defaults to 2 * sum(sections); heads may be wider (the rest passes through).
    pairing: "neox" (rotate_half, Qwen/Llama) or "gptj" (adjacent pairs).
    """

    sections: Tuple[int, int, int] = (16, 24, 24)
    theta: float = 1e6
    layout: str = "chunked"
    rotary_dim: Optional[int] = None
    pairing: str = "neox"

    def __post_init__(self):
        # pairing is a kernel setting, checked here by name (the operators read it again)
        if not isinstance(self.pairing, str) or self.pairing not in ("neox", "gptj"):
            raise ValueError(f"RotaryConfig.pairing must be 'neox' or 'gptj' (got {_shown(self.pairing)})")
        sections = self.sections
        if isinstance(sections, (tuple, list)):
            sections = tuple(_plain(x) for x in sections)
        # The core reads each field but pairing by its key (circlerope/options.h, kRotaryOptions).
        fields = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "pairing"}
        fields["sections"] = _plain(sections)
        args = _core.rotary_config(fields)
        object.__setattr__(self, "_cached_args", args)

    @property
    def dim(self) -> int:
        return self._cached_args[1]

    def _args(self) -> tuple:
        return self._cached_args


_DEFAULT_CIRCLE = CircleConfig()
_DEFAULT_VISION = VisionConfig()


def _config(value, cls, name: str, default):
    """A config argument: None means the default; anything but a `cls` is refused."""
    if value is None:
        return default
    if not isinstance(value, cls):
        raise ValueError(f"{name} must be a circlerope.{cls.__name__}, got {_shown(type(value).__name__)}")
    return value


def _circle(circle: Optional[CircleConfig]) -> CircleConfig:
    return _config(circle, CircleConfig, "circle", _DEFAULT_CIRCLE)


def _vision(vision: Optional[VisionConfig]) -> VisionConfig:
    return _config(vision, VisionConfig, "vision", _DEFAULT_VISION)


def _tensor(value, name: str, dtype=None, required: bool = False) -> Optional[Tensor]:
    """None (unless required), a tensor, or anything torch.as_tensor takes (lists of grids, say).
    Meta tensors have no data to read, sparse and mkldnn ones no strides: refused here, before
    anything calls .cpu() on them."""
    if value is None:
        if required:
            raise ValueError(f"{name} is required (got None)")
        return None
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value, dtype=dtype)
        except Exception as e:  # noqa: BLE001 - whatever torch raises for a value it cannot read
            raise ValueError(f"{name}: cannot be read as a tensor ({_core.one_line(str(e), 200)})") from None
    _check_layout(value, name)
    if value.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor (it has no data to read)")
    return value


def _tokens_of(t: Optional[Tensor], name: str) -> Optional[Tensor]:
    """t, after its last two dimensions ([batch, seq_len]) are checked against the limit of one
    call; a tensor of fewer dimensions is left to the operator's message."""
    if t is not None and t.dim() >= 2:
        _check_tokens(name, int(t.shape[-2]), int(t.shape[-1]))
    return t


def _grids_of(t: Optional[Tensor], name: str) -> Optional[Tensor]:
    """A grid list holds at most one grid per token of a call."""
    if t is not None:
        _check_count(name, t, 3 * _MAX_TOKENS, "values (three per grid, a grid per token at most)")
    return t


def _seconds(value) -> Optional[Tensor]:
    """second_per_grid_ts as a float64 tensor (or None), one value per video at most per token."""
    seconds = _tensor(value, "second_per_grid_ts", torch.float64)
    if seconds is not None:
        _check_count("second_per_grid_ts", seconds, _MAX_TOKENS, "values (one per video)")
    return seconds


def _cpu(t: Optional[Tensor]) -> Optional[Tensor]:
    if t is None or (t.device.type == "cpu" and not t.requires_grad):
        return t
    return t.detach().cpu()


def _table_device(t: Tensor) -> Tensor:
    """Positions for rotary_table: kept on a CUDA device when the operators have CUDA kernels
    (the table is then built there), else on the CPU."""
    if _CUDA_KERNELS and t.device.type == "cuda":
        return t.detach()
    return _cpu(t)


# ---------------------------------------------------------------- positions ---

def get_rope_index(input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                   attention_mask=None, *, scheme: str = "circle",
                   circle: Optional[CircleConfig] = None,
                   vision: Optional[VisionConfig] = None,
                   compat: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """Positions of a batch, with the shapes and meaning of Qwen2.5-VL's get_rope_index.

    Returns (position_ids, rope_deltas): float32 [3, batch, seq_len] (temporal, height, width;
    fractional under Circle-RoPE) and float32 [batch, 1], on input_ids' device. Masked tokens
    get 1.0. While decoding, the token at cache position p of row b gets p + rope_deltas[b]
    on all three axes (decode_position_ids).

    scheme: "circle" (Circle-RoPE), "mrope" (Qwen's M-RoPE), "vanilla" (1-D) or "unordered".

    compat: reproduce a Hugging Face transformers release's behaviour exactly, quirks included:
    "hf-4.49" (4.49-4.51, Qwen's code), "hf-4.52" (4.52-5.1: second_per_grid_ts truncated to
    an integer first), "hf-5.2", "hf-5.3-5.5.3", "hf-5.5.4", "hf-5.6" (5.6-5.17; "hf-5.3" is its
    former name) or "hf-5.18" (5.18 and later); docs/hf_compat.md lists what each differs in,
    and circlerope.hf.compat_for_version maps a release to its mode. Under a compat mode the
    integer schemes return int64 tensors, as transformers does; Circle-RoPE stays float32.
    None or "none": this project's behaviour (equal to hf-4.49 for M-RoPE, except the delta of
    a padded one-token row in a batch without images). circlerope.hf adapts a model.
    """
    was_tensor = isinstance(input_ids, torch.Tensor)
    input_ids = _tensor(input_ids, "input_ids", required=True)
    if not was_tensor and input_ids.numel() == 0:  # [[]] reads as float; an empty batch has no dtype to get wrong
        input_ids = input_ids.to(torch.int64)
    scheme = _text(scheme, "scheme")
    compat = _text("none" if compat is None else compat, "compat (none or an hf-... mode, docs/hf_compat.md)")
    c, v = _circle(circle), _vision(vision)
    images = _grids_of(_tensor(image_grid_thw, "image_grid_thw"), "image_grid_thw")
    videos = _grids_of(_tensor(video_grid_thw, "video_grid_thw"), "video_grid_thw")
    seconds = _seconds(second_per_grid_ts)
    mask = _tokens_of(_tensor(attention_mask, "attention_mask"), "attention_mask")
    position_ids, rope_deltas = _ops.rope_index(
        _cpu(_tokens_of(input_ids, "input_ids")), _cpu(images), _cpu(videos), _cpu(seconds), _cpu(mask),
        scheme, *c._args(), *v._args(), compat)
    if compat != "none" and scheme != "circle":  # transformers' int64 (exact: integers < 2^24)
        position_ids, rope_deltas = position_ids.to(torch.int64), rope_deltas.to(torch.int64)
    if input_ids.device.type != "cpu":
        return position_ids.to(input_ids.device), rope_deltas.to(input_ids.device)
    return position_ids, rope_deltas


def decode_position_ids(rope_deltas, cache_position: int, count: int = 1) -> Tensor:
    """Positions of the next `count` decoded tokens from cache position `cache_position`
    (counting every token of the padded row): p + rope_deltas[b] on all three axes, in
    float32 like the reference. Returns float32 [3, batch, count] on rope_deltas' device."""
    rope_deltas = _tensor(rope_deltas, "rope_deltas", required=True)
    _check_count("rope_deltas", rope_deltas, _MAX_TOKENS, "rows")
    if rope_deltas.is_complex():
        raise ValueError(f"rope_deltas must hold real numbers, got {rope_deltas.dtype}")
    if rope_deltas.dim() == 2 and rope_deltas.size(1) == 1:
        rope_deltas = rope_deltas[:, 0]
    if rope_deltas.dim() != 1:
        raise ValueError(f"rope_deltas must have shape [batch, 1] or [batch], got {list(rope_deltas.shape)}")
    deltas = np.ascontiguousarray(rope_deltas.detach().cpu().to(torch.float32).numpy())
    # cache_position: an integer, Hugging Face's cache_position[0] (a one-element tensor) too
    return torch.from_numpy(_core.decode_positions(deltas, _plain(cache_position), _plain(count))).to(
        rope_deltas.device)


def layout_positions(layout: str, *, scheme: str = "circle", circle: Optional[CircleConfig] = None,
                     vision: Optional[VisionConfig] = None) -> Tuple[Tensor, Tensor]:
    """Positions of one token-free row, e.g. "text:5,image:6x6,video:4x6x6@0.5,text:4"
    (merged token grids, no vision markers): float32 [3, 1, S] and [1, 1]."""
    c, v = _circle(circle), _vision(vision)
    pos, deltas = _core.layout_positions(layout, scheme, c._args(), v._args())
    return torch.from_numpy(pos), torch.from_numpy(deltas)


# ----------------------------------------------------------------- rotation ---

def _rotary(rotary: Optional[RotaryConfig], **overrides) -> RotaryConfig:
    if rotary is None:
        return RotaryConfig(**{k: v for k, v in overrides.items() if v is not None})
    return _config(rotary, RotaryConfig, "rotary", None)


def rotary_table(position_ids, rotary: Optional[RotaryConfig] = None, *, sections=None, theta=None,
                 layout=None, rotary_dim=None) -> Tensor:
    """cos/sin of every frequency for every token: float32 [batch, seq_len, rotary_dim], per
    token rotary_dim/2 cosines then rotary_dim/2 sines. The angle pos * theta^(-2i/D) is
    computed in double and rounded once. position_ids: [3, batch, seq_len] (or [batch,
    seq_len] for 1-D positions). Build it once per geometry and forward pass; every layer
    with that geometry reuses it."""
    r = _rotary(rotary, sections=sections, theta=theta, layout=layout, rotary_dim=rotary_dim)
    return _table(position_ids, r._args())


def _table(position_ids, args: tuple) -> Tensor:
    """rotary_table's operator call for checked arguments (theta, rotary_dim, layout, sections)."""
    position_ids = _tokens_of(_tensor(position_ids, "position_ids", required=True), "position_ids")
    if position_ids.dim() == 2:
        position_ids = position_ids.unsqueeze(0).expand(3, -1, -1)
    theta, dim, layout, sections = args
    return _ops.rotary_table(_table_device(position_ids), dim, sections, theta, layout)


def _fused_device(t: Tensor) -> bool:
    """Whether the fused operators take tensors on t's device."""
    return t.device.type == "cpu" or (t.device.type == "cuda" and _CUDA_KERNELS)


def _check_device(*tensors: Tensor) -> None:
    q, k, table = tensors
    # The common call, decided with the cheapest attribute reads (one rotation per layer: its
    # host time counts); anything else takes the checks below, which name the problem.
    if (type(q) is Tensor and type(k) is Tensor and type(table) is Tensor and q.layout == k.layout ==
            table.layout == torch.strided and table.dim() == 3 and table.shape[0] * table.shape[1] <= _MAX_TOKENS
            and ((q.is_cpu and k.is_cpu and table.is_cpu)
                 or (_CUDA_KERNELS and q.is_cuda and k.device == q.device and table.device == q.device))):
        return
    named = list(zip(("q", "k", "table"), tensors))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {_shown(type(t).__name__)}")
        _check_layout(t, name)
        if name == "table" and t.dim() == 3:
            _check_tokens("table", int(t.shape[0]), int(t.shape[1]))
    for name, t in named:
        if t.device.type == "cpu":
            continue
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; circlerope's operators take CPU or CUDA tensors")
        if not _CUDA_KERNELS:
            raise ValueError(f"{name} is on {t.device}; this build of circlerope's operators takes CPU "
                             "tensors (configure with CIRCLEROPE_CUDA=ON against a CUDA libtorch for CUDA)")
    device = tensors[0].device
    for name, t in named[1:]:
        if t.device != device:
            raise ValueError(f"q is on {device} but {name} is on {t.device}; q, k and the table must be on "
                             "one device (build the table from position_ids on q's device)")


def apply_rotary(q: Tensor, k: Tensor, table: Tensor, *, pairing: str = "neox",
                 qk_layout: str = "bhsd", inplace: bool = False) -> Tuple[Tensor, Tensor]:
    """Rotates q and k by a table from rotary_table (differentiable in q and k).

    qk_layout: "bhsd" ([batch, heads, seq, head_dim], Hugging Face after transpose(1, 2); any
    strides) or "bshd". q and k may have different head counts (GQA); head_dim may exceed
    the rotary dim (the rest passes through). dtypes: float32, bfloat16, float16 (fused
    kernels, float32 math) and float64 (a scalar path, for gradcheck).

    inplace=True writes the result into q and k themselves and returns them (no new memory;
    for inference: it has no gradient, and refuses inputs that need one).
    """
    _check_device(q, k, table)
    # the operator reads both names; a non-string would be torch's RuntimeError
    pairing, qk_layout = _text(pairing, "pairing"), _text(qk_layout, "qk_layout")
    if inplace is False:
        return _ops.rotary_apply(q, k, table, pairing, qk_layout, False)
    if not isinstance(inplace, bool):
        raise ValueError(f"inplace must be True or False, got {_shown(inplace)}")
    if inplace:
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            raise ValueError("apply_rotary(inplace=True) has no gradient, and q or k requires one; rotate "
                             "out of place (inplace=False) for training, or run under torch.no_grad()")
        _ops.rotary_apply_(q, k, table, pairing, qk_layout, False)
        return q, k
    return _ops.rotary_apply(q, k, table, pairing, qk_layout, False)


def apply_multimodal_rotary(q: Tensor, k: Tensor, position_ids, *, sections=(16, 24, 24),
                            theta: float = 1e6, layout: str = "chunked", pairing: str = "neox",
                            qk_layout: str = "bhsd",
                            rotary_dim: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Hugging Face's apply_multimodal_rotary_pos_emb from position_ids in one fused op:
    builds the table (rotary_table) and rotates q and k (apply_rotary). Use RotaryEmbedding
    to share one table across the layers of a forward pass."""
    if _CUDA_KERNELS and isinstance(q, torch.Tensor) and q.device.type == "cuda":
        position_ids = _tensor(position_ids, "position_ids").to(q.device)  # the table is built there
    table = _table(position_ids, _rotary_args(
        tuple(sections) if isinstance(sections, list) else sections, theta, layout, rotary_dim, pairing))
    return apply_rotary(q, k, table, pairing=pairing, qk_layout=qk_layout)


def _rotary_args(sections, theta, layout, rotary_dim, pairing) -> tuple:
    """RotaryConfig's operator arguments (theta, rotary_dim, layout, sections) for these values.
    Eagerly the core checks them here. torch.compile cannot trace the core (_core), so while
    compiling the plain values go to the operator, whose fake kernel checks them with the core
    when the graph is traced and whose kernel checks them again when it runs."""
    if torch.compiler.is_compiling():
        if pairing not in ("neox", "gptj"):
            raise ValueError(f"pairing must be 'neox' or 'gptj' (got {_shown(pairing)})")
        sections = [int(x) for x in sections]
        dim = rotary_dim if rotary_dim is not None else 2 * sum(sections)
        return float(theta), int(dim), layout, sections
    return RotaryConfig(sections=sections, theta=theta, layout=layout, rotary_dim=rotary_dim,
                        pairing=pairing)._args()


def cos_sin(table: Tensor, pairing: str = "neox") -> Tuple[Tensor, Tensor]:
    """A table as Hugging Face's (cos, sin), each [batch, seq_len, rotary_dim], so that
    q * cos + rotate_half(q) * sin (neox) gives the same rotation; for gptj each value is
    repeated per adjacent pair instead."""
    if not isinstance(table, torch.Tensor) or table.dim() != 3 or table.size(-1) % 2:
        raise ValueError("table must be a [batch, seq_len, rotary_dim] tensor from rotary_table, got "
                         + (f"shape {list(table.shape)}" if isinstance(table, torch.Tensor) else _shown(table)))
    _check_layout(table, "table")
    _check_tokens("table", int(table.shape[0]), int(table.shape[1]))
    half = table.size(-1) // 2
    cos, sin = table[..., :half], table[..., half:]
    if pairing == "neox":
        return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    if pairing == "gptj":
        return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    raise ValueError(f"pairing {_shown(pairing)} (expected 'neox' or 'gptj')")


# ---------------------------------------------------------------------- AGE ---

_SCHEME_LETTER = {"circle": "C", "mrope": "M", "vanilla": "V", "unordered": "U"}


class AgePlan:
    """A geometry per layer (SPEC 6): "all", "lower", "upper", "alternate" (the paper's best),
    "strategy_1".."strategy_4", or a pattern of C/M/V/U letters repeated to `layers` (required,
    1..100000): AgePlan("alternate", 36)."""

    def __init__(self, spec: str, layers: int = None):
        if layers is None:  # AgePlan(spec) built a one-layer plan silently
            raise ValueError(f"AgePlan({_shown(spec)}) needs the layer count: AgePlan(spec, layers)")
        # The core checks both (a plan is valid by construction).
        self.pattern, self.schemes, self._layer_geometry = _core.age_plan(spec, _plain(layers))
        self.spec = spec

    def __len__(self) -> int:
        return len(self._layer_geometry)

    @property
    def layers(self) -> int:
        return len(self)

    def _check(self, layer: int) -> int:
        value = _plain(layer)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise ValueError(f"layer must be an integer, got {_shown(layer)}")
        if not 0 <= int(value) < len(self):
            raise ValueError(f"layer {int(value)} is outside the plan's {len(self)} layers")
        return int(value)

    def geometry(self, layer: int) -> int:
        """Index into `schemes` of the geometry layer `layer` uses."""
        return self._layer_geometry[self._check(layer)]

    def layer_scheme(self, layer: int) -> str:
        return self.schemes[self.geometry(layer)]

    def __repr__(self) -> str:
        return f"AgePlan({self.spec!r}, layers={len(self)}: {self.pattern})"


class RotaryAngles:
    """Positions and angle tables of one forward pass under an AGE plan: one table per
    distinct geometry, shared by its layers. Returned by RotaryEmbedding.__call__."""

    def __init__(self, plan: AgePlan, rotary: RotaryConfig, position_ids: dict, rope_deltas: dict):
        self.plan, self.rotary = plan, rotary
        self.position_ids = position_ids  # scheme -> float32 [3, B, S]
        self.rope_deltas = rope_deltas    # scheme -> float32 [B, 1]
        self.tables = {s: rotary_table(p, rotary) for s, p in position_ids.items()}

    def table(self, layer: int) -> Tensor:
        """float32 [B, S, rotary_dim]: cos then sin, the angles layer `layer` uses."""
        return self.tables[self.plan.layer_scheme(layer)]

    def cos_sin(self, layer: int) -> Tuple[Tensor, Tensor]:
        """The layer's angles as Hugging Face's (cos, sin) [B, S, rotary_dim]."""
        return cos_sin(self.table(layer), self.rotary.pairing)

    def apply(self, layer: int, q: Tensor, k: Tensor, *, qk_layout: str = "bhsd") -> Tuple[Tensor, Tensor]:
        return apply_rotary(q, k, self.table(layer), pairing=self.rotary.pairing, qk_layout=qk_layout)

    def decode(self, cache_position: int, count: int = 1) -> "RotaryAngles":
        """Angles of the next `count` tokens; every geometry uses its own rope_deltas (the
        reference uses the Circle-RoPE deltas for every layer; see the README)."""
        positions = {s: decode_position_ids(d, cache_position, count) for s, d in self.rope_deltas.items()}
        return RotaryAngles(self.plan, self.rotary, positions, self.rope_deltas)


class RotaryEmbedding(torch.nn.Module):
    """Per-layer rotary angles for an AGE plan. Holds no parameters.

    rope = RotaryEmbedding(AgePlan("alternate", 36), rotary=RotaryConfig())
    angles = rope(input_ids, image_grid_thw, attention_mask=mask)  # positions once per geometry
    q, k = angles.apply(layer, q, k)
    """

    def __init__(self, plan: Union[AgePlan, str] = None, layers: Optional[int] = None, *,
                 rotary: Optional[RotaryConfig] = None, circle: Optional[CircleConfig] = None,
                 vision: Optional[VisionConfig] = None):
        super().__init__()
        if plan is None:  # it used to default to a one-layer "all"
            raise ValueError("RotaryEmbedding needs a plan: RotaryEmbedding(AgePlan(spec, layers)) or "
                             "RotaryEmbedding(spec, layers)")
        if isinstance(plan, str):
            if layers is None:  # a one-layer plan was built silently
                raise ValueError(f"RotaryEmbedding({_shown(plan)}) needs the layer count: RotaryEmbedding(plan, "
                                 "layers) or RotaryEmbedding(AgePlan(spec, layers))")
            plan = AgePlan(plan, layers)
        elif not isinstance(plan, AgePlan):
            raise ValueError(f"plan must be an AgePlan or a plan string, got {type(plan).__name__}")
        elif layers is not None and _plain(layers) != len(plan):
            raise ValueError(f"layers={_shown(layers)} differs from the {len(plan)} layers of the plan")
        self.plan = plan
        self.rotary = _rotary(rotary)
        self.circle, self.vision = _circle(circle), _vision(vision)

    def forward(self, input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                attention_mask=None) -> RotaryAngles:
        positions, deltas = {}, {}
        for scheme in self.plan.schemes:
            positions[scheme], deltas[scheme] = get_rope_index(
                input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
                scheme=scheme, circle=self.circle, vision=self.vision)
        return RotaryAngles(self.plan, self.rotary, positions, deltas)

    def extra_repr(self) -> str:
        return f"plan={self.plan.pattern}, rotary={self.rotary}, circle={self.circle}"


# ------------------------------------------------------------------ metrics ---

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
    t = _tensor(t, name)
    if t is None:
        return None
    if t.is_floating_point() or t.is_complex():
        raise ValueError(f"{name} must hold integers, got {t.dtype}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimension(s), got shape {list(t.shape)}")
    if grids:
        _grids_of(t, name)
    else:
        _tokens_of(t, name)
    return np.ascontiguousarray(t.detach().cpu().to(torch.int64).numpy())


def ptd(input_ids=None, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
        attention_mask=None, *, layout: Optional[str] = None, scheme: str = "circle",
        circle: Optional[CircleConfig] = None, vision: Optional[VisionConfig] = None,
        rotary: Optional[RotaryConfig] = None) -> CouplingMetrics:
    """Coupling metrics of a batch (Qwen-style inputs) or of one token-free `layout`
    ("text:5,image:3x3"), under `scheme`. The paper's Table 1 toy:
    ptd(layout="text:5,image:3x3", scheme="vanilla").ptd == 2.222..."""
    c, v, r = _circle(circle), _vision(vision), _rotary(rotary)
    if layout is not None:
        _text(layout, "ptd: layout")
        if input_ids is not None:
            raise ValueError("ptd: give either input_ids or layout, not both")
        out = _core.layout_metrics(layout, scheme, c._args(), v._args(), r._args())
    else:
        if input_ids is None:
            raise ValueError("ptd: input_ids or layout is required")
        seconds = _seconds(second_per_grid_ts)
        if seconds is not None and (seconds.is_complex() or seconds.dtype == torch.bool):
            raise ValueError(f"second_per_grid_ts must hold real numbers, got {seconds.dtype}")
        if seconds is not None and seconds.dim() != 1:
            raise ValueError(f"second_per_grid_ts must be 1-D (one value per video), got shape {list(seconds.shape)}")
        out = _core.batch_metrics(
            _int64_numpy(input_ids, "input_ids", 2), _int64_numpy(attention_mask, "attention_mask", 2),
            _int64_numpy(image_grid_thw, "image_grid_thw", 2, grids=True),
            _int64_numpy(video_grid_thw, "video_grid_thw", 2, grids=True),
            None if seconds is None else np.ascontiguousarray(seconds.detach().cpu().to(torch.float64).numpy()),
            scheme, c._args(), v._args(), r._args())
    return CouplingMetrics(out["ptd"], out["rope_kernel_deviation"], out["blocks"], out["rows"])
