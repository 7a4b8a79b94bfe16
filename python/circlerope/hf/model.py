"""circlerope.hf.apply / restore / pack: a loaded transformers Qwen2-VL / Qwen2.5-VL / Qwen3-VL
model on a geometry (or one geometry per layer, AGE), and back.

How a switched model works. transformers computes one set of 3-D positions per forward, turns it
into one (cos, sin) pair in the text model's rotary embedding, and hands that pair to every
decoder layer. Its positions also drive its own bookkeeping: rope_deltas, generate()'s running
position_ids, the masks of packed sequences. apply() leaves that bookkeeping to transformers and
takes over what the layers see:

- the model's get_rope_index is replaced by circlerope's for the primary geometry (Circle-RoPE
  when the plan has it), with the installed release's signature and conventions, so that
  transformers' own code keeps working;
- the outer model's forward computes, before transformers does anything, the positions of
  every geometry of the plan from input_ids, the grids and the 2-D attention mask (the prefill),
  or continues each geometry's own positions after the prompt (a forward with a cache);
- the rotary embedding's forward turns each geometry's positions into its (cos, sin) with
  transformers' own formula (so M-RoPE stays bit-identical to the unpatched model, dtype of the
  cos/sin math included), and each decoder layer's forward receives its geometry's pair.

Each replaced method is an object (a stand-in) holding the switch and the method it replaced, not
a closure: copy.deepcopy of a switched model (TRL's reference model, an EMA copy) copies them with
the model, so the copy runs its own switch, weights and methods. A model is switched as a whole
and once: apply() refuses a model a part of which, or a model of which it is a part, is switched.
generate() may repeat each prompt row (num_beams, num_return_sequences) after get_rope_index ran
on the prompt; the positions kept for the first forward are repeated with them.

Positions reach the rotary as float32 and are computed inside the model from integer inputs, so
no dtype cast of floating inputs (Trainer under DeepSpeed) can reach them. Packed batches made
by pack() carry them as int32 bit patterns in an int64 tensor, for the same reason.

While decoding, the k-th token after a prompt of a row continues each geometry at the position
a text token appended to the prompt would get (computed by appending one, so it is the full
recompute's rule in every compat mode) plus k. transformers' own generate() rules (which differ
between releases, docs/guides/compat.md) do not reach the layers.

The rotation of q and k (apply(rotation=...)). "transformers" leaves it to the release's formula
(q * cos + rotate_half(q) * sin) on the (cos, sin) above. "fused" moves it to circlerope's fused
operator:

- the rotary embedding's forward builds one circlerope.rotary_table per geometry and forward (not
  per layer), from that geometry's positions on the hidden states' device, with the model's
  frequencies (theta, head dim, mrope_section; Qwen3-VL's interleaved layout). The (cos, sin) it
  returns are that table written out as the release's rotation function takes it (so anything
  that rotates with them anyway gets the same angles), each tensor marked with the table;
- the module-level function the release's text attention calls to rotate
  (apply_multimodal_rotary_pos_emb in Qwen2-VL / Qwen2.5-VL of 4.x and early 5.x,
  apply_rotary_pos_emb later and in Qwen3-VL) is replaced in its modeling module by a dispatcher:
  a marked cos/sin pair goes to circlerope.apply_rotary with its table, anything else to the
  function it replaced, so unswitched models, other instances and models switched with
  rotation="transformers" run the release's formula as before. The marks travel inside the
  layer's own arguments, so a layer recomputed under gradient checkpointing finds its table
  again. The dispatcher stays while any model switched with rotation="fused" uses it (a count per
  module); the last restore() (or the last such model being freed) puts the function back.

The table's angles are computed in double and rounded once, transformers' in float32, so the two
rotations agree within float32 rounding, not bit for bit.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import weakref
from typing import List, Mapping, Optional

import torch

from .. import rotary as circlerope_rotary
from .._checks import MAX_TOKENS, boolean, flag, is_integer, shown, tensor
from .._ops import fused_device
from ..age import AgePlan
from ..config import CircleConfig, RotaryConfig, VisionConfig
from ..positions import COMPAT_MODES, get_rope_index
from . import compat as hf_compat
from . import registry as hf_registry
from . import peft as hf_peft
from .masks import prompt_mask
from . import families
from .official import from_official_config

# rotary_table and apply_rotary are looked up on circlerope.rotary at each call, so that a spy (or
# a wrapper) set there sees the calls a switched model makes.

Tensor = torch.Tensor

_ATTR = "_circlerope_switch"
_SCHEMES = ("circle", "mrope", "vanilla", "unordered")
_ROTATIONS = ("transformers", "fused")
# The attribute of a cos / sin tensor that carries its _FusedTable (rotation="fused").
_MARK = "_circlerope_fused"
# The functions a release's text attention may call to rotate q and k, by the name it calls.
_ROTATION_FUNCTIONS = ("apply_multimodal_rotary_pos_emb", "apply_rotary_pos_emb")
# The config attribute save_pretrained writes and apply(model) with no geometry reads back.
CONFIG_KEY = "circlerope"


class _GeometryEmbeddings(tuple):
    """The (cos, sin) of the primary geometry, as transformers expects it, carrying every
    geometry's pair for the decoder layers. It travels with the layer's arguments, so a layer
    recomputed under gradient checkpointing finds its geometry again."""

    per_geometry: list

    def __new__(cls, per_geometry: list, primary: int):
        obj = super().__new__(cls, per_geometry[primary])
        obj.per_geometry = per_geometry
        return obj


@dataclasses.dataclass
class _Call:
    positions: Tensor       # [G, 3, B, S] float32, one set per geometry
    decoding: bool          # a forward after the prompt, with a cache


@dataclasses.dataclass
class _Switch:
    schemes: tuple          # distinct geometries; schemes[primary] is what transformers sees
    primary: int
    layer_geometry: List[int]
    circle: CircleConfig
    vision: VisionConfig
    compat: str
    official_decode: bool
    plan: Optional[AgePlan]
    qwen3: bool = False      # Qwen3-VL's rule: every video frame is a block of its own (below)
    family: Optional[families.Resolved] = None  # its ids as the core reads them (GLM's video frames)
    rotation: str = "transformers"
    fused: Optional["_FusedRotation"] = None  # rotation="fused": the table's settings and the patch
    undo: list = dataclasses.field(default_factory=list)   # (object, name, had own attribute, value)
    call: Optional[_Call] = None
    computed: Optional[dict] = None  # what the patched get_rope_index computed last
    prompt: Optional[dict] = None  # after a prefill: {"next": [G, B] float32, "length": S}
    model: object = dataclasses.field(default=None, repr=False, compare=False)  # the switched model

    def __deepcopy__(self, memo):
        """The switch of a copy of the model (copy.deepcopy of a switched model copies its switch
        through the stand-ins and the model's attribute): every field copied with the model,
        and under rotation="fused" one more user of the dispatcher, released with the copy."""
        new = copy.copy(self)
        memo[id(self)] = new
        for field in dataclasses.fields(self):
            if field.name != "fused":
                setattr(new, field.name, copy.deepcopy(getattr(self, field.name), memo))
        if self.fused is not None:
            new.fused = self.fused.for_model(new.model)
        return new

    def describe(self) -> dict:
        circle = {f.name: getattr(self.circle, f.name) for f in dataclasses.fields(self.circle)}
        return {"scheme": self.schemes[self.primary], "age": None if self.plan is None else self.plan.pattern,
                "circle": circle, "official_decode": self.official_decode}


class _FusedTable:
    """What the cos and sin of one geometry carry under rotation="fused" (as their _MARK
    attribute): the geometry's rotary_table and the sections it was built with."""

    __slots__ = ("table", "sections")

    def __init__(self, table: Tensor, sections: tuple):
        self.table = table
        self.sections = sections


@dataclasses.dataclass(eq=False)
class _Patch:
    """A dispatcher installed in place of a release's rotation function (namespace[name]: the
    modeling module's globals, where the attention's forward looks the name up), and how many
    switched models use it."""
    namespace: dict = dataclasses.field(repr=False)
    name: str
    original: object
    dispatcher: object
    users: int = 0


_PATCHES: dict = {}  # (id(namespace), name) -> the _Patch installed there


@dataclasses.dataclass(eq=False)
class _FusedRotation:
    rotary: RotaryConfig    # the model's frequencies, as rotary_table takes them
    multimodal: bool        # the rotation function takes cos/sin [3, B, S, D] (else [B, S, D])
    patch: _Patch           # the dispatcher this model uses
    release: object         # weakref.finalize: gives the patch back once (restore, or the model freed)

    @classmethod
    def acquire(cls, model, rotary: RotaryConfig, namespace: dict, function: str) -> "_FusedRotation":
        """The dispatcher in namespace[function], one more user of it until restore() or until
        `model` is freed."""
        patch = _acquire(namespace, function)
        release = weakref.finalize(model, _release, patch)
        release.atexit = False
        return cls(rotary, function == "apply_multimodal_rotary_pos_emb", patch, release)

    def for_model(self, model) -> "_FusedRotation":
        """The same rotation for another model (a copy of this one)."""
        return _FusedRotation.acquire(model, self.rotary, self.patch.namespace, self.patch.name)


def _fused_rotate(q, k, mark: _FusedTable, signature, args, kwargs):
    """A release's rotation call (q, k, cos, sin, *args, **kwargs) through the fused operator,
    with the table its cos/sin carry."""
    if signature is None:
        bound = dict(kwargs)
    else:
        try:
            bound = signature.bind(q, k, None, None, *args, **kwargs).arguments
        except TypeError as e:
            raise ValueError(f"the rotation of a model switched with rotation='fused' was called with arguments "
                             f"its release's function does not take: {e}") from None
    unsqueeze_dim = bound.get("unsqueeze_dim", 1)
    if unsqueeze_dim not in (1, 2) or isinstance(unsqueeze_dim, bool):
        raise ValueError(f"unsqueeze_dim {shown(unsqueeze_dim)}: the fused rotation takes q and k as [B, H, S, D] "
                         "(1) or [B, S, H, D] (2)")
    sections = bound.get("mrope_section")
    if sections is not None and (len(sections) != len(mark.sections) or any(
            not is_integer(x) or x != y for x, y in zip(sections, mark.sections))):
        raise ValueError(f"the attention rotates with mrope_section {shown(list(sections))}, but the table of the "
                         f"model switched with rotation='fused' was built with {list(mark.sections)}")
    return circlerope_rotary.apply_rotary(q, k, mark.table, pairing="neox",
                                          qk_layout="bhsd" if unsqueeze_dim == 1 else "bshd")


def _dispatcher(original):
    """original's stand-in: a cos/sin pair marked by a switched model's fused rotary goes through
    the fused operator, every other call to original, unchanged."""
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def rotate(q, k, cos, sin, *args, **kwargs):
        mark = getattr(cos, _MARK, None)
        if mark is None or getattr(sin, _MARK, None) is not mark:
            return original(q, k, cos, sin, *args, **kwargs)
        return _fused_rotate(q, k, mark, signature, args, kwargs)

    functools.update_wrapper(rotate, original)
    rotate.__circlerope_dispatcher__ = original
    return rotate


def _acquire(namespace: dict, name: str) -> _Patch:
    """The dispatcher in namespace[name], installed unless this module's is there already; one
    more user."""
    key = (id(namespace), name)
    patch = _PATCHES.get(key)
    if patch is None or namespace.get(name) is not patch.dispatcher:
        # Not ours, or replaced since by someone else: wrap what is there now.
        original = namespace[name]
        patch = _Patch(namespace, name, original, _dispatcher(original))
        namespace[name] = patch.dispatcher
        _PATCHES[key] = patch
    patch.users += 1
    return patch


def _release(patch: _Patch) -> None:
    """One user fewer; the last puts back what the dispatcher replaced (unless something else has
    replaced the dispatcher since: that is left in place)."""
    patch.users -= 1
    if patch.users > 0:
        return
    if patch.namespace.get(patch.name) is patch.dispatcher:
        patch.namespace[patch.name] = patch.original
    key = (id(patch.namespace), patch.name)
    if _PATCHES.get(key) is patch:
        del _PATCHES[key]


# ---------------------------------------------------------------- discovery ---

def _parts(model):
    """(holder of get_rope_index, text model) of a Qwen2-VL / Qwen2.5-VL model of any release:
    4.49-4.51 keep get_rope_index on the ForConditionalGeneration and the text model at .model;
    4.52 on keep both inside .model (get_rope_index) and .model.language_model."""
    families.family(getattr(model, "config", None))  # refuses, naming the families it switches
    inner = getattr(model, "model", None)
    holder = next((m for m in (model, inner) if m is not None and callable(getattr(m, "get_rope_index", None))), None)
    text = None
    for m in (getattr(inner, "language_model", None), inner, getattr(model, "language_model", None)):
        if m is not None and hasattr(m, "layers") and hasattr(m, "rotary_emb"):
            text = m
            break
    if holder is None or text is None:
        raise ValueError(f"{type(model).__name__}: found no get_rope_index and text model (layers, rotary_emb); "
                         "circlerope.hf.apply takes a family's ForConditionalGeneration (or its .model)")
    return holder, text


def _rotation_site(text):
    """(namespace, name): where the text attention's forward looks up the function it rotates q
    and k with (its modeling module's globals) and that function's name, the same in every layer."""
    sites = {}
    for layer in text.layers:
        attention = getattr(layer, "self_attn", None)
        forward = inspect.unwrap(getattr(type(attention), "forward", None) or (lambda: None))
        code, namespace = getattr(forward, "__code__", None), getattr(forward, "__globals__", None)
        names = [n for n in _ROTATION_FUNCTIONS if code is not None and n in code.co_names and n in namespace]
        if not names:
            raise ValueError(f"rotation='fused': the text attention {type(attention).__name__} calls none of "
                             f"{', '.join(_ROTATION_FUNCTIONS)} (this transformers release rotates q and k in a way "
                             "circlerope.hf does not know): use rotation='transformers'")
        sites[id(namespace), names[0]] = (namespace, names[0])
    if len(sites) != 1:
        raise ValueError(f"rotation='fused': the text layers rotate with {len(sites)} different functions")
    return next(iter(sites.values()))


def _fused_rotary(config, rotary, qwen3: bool) -> RotaryConfig:
    """The RotaryConfig whose table holds the angles of the model's rotary embedding `rotary`:
    its mrope_section (its own attribute where the release keeps one, else the config's),
    rope_theta and head dimension from the config, Qwen3-VL's interleaved layout. Refused unless
    the embedding computes the default rope type's angles (attention_scaling 1, the default
    inverse frequencies): a scaled or dynamic rope type is not a table of theta^(-2i/D)."""
    rope_type = getattr(rotary, "rope_type", "default")
    scaling = getattr(rotary, "attention_scaling", 1.0)
    if not isinstance(rope_type, str) or rope_type not in ("default", "mrope"):
        raise ValueError(f"rotation='fused' builds the default rope type's angles, but this model's rope_type is "
                         f"{shown(rope_type)}: use rotation='transformers'")
    if not isinstance(scaling, (int, float)) or scaling != 1.0:
        raise ValueError(f"rotation='fused' rotates without scaling cos and sin, but this model's rotary "
                         f"attention_scaling is {shown(scaling)}: use rotation='transformers'")
    base = hf_compat.rotary_config(config)
    sections = getattr(rotary, "mrope_section", None)
    sections = base.sections if sections is None else hf_compat.mrope_section(sections, "rotary mrope_section")
    cfg = RotaryConfig(sections=sections, theta=base.theta, frequency_layout="interleaved" if qwen3 else "chunked",
                       rotary_dim=base.rotary_dim)
    inv_freq = getattr(rotary, "inv_freq", None)
    if isinstance(inv_freq, torch.Tensor) and inv_freq.device.type != "meta":
        dim = cfg.dim
        want = 1.0 / (float(cfg.theta) ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))
        have = inv_freq.detach().to("cpu")
        # A model cast with model.to(dtype) holds its inverse frequencies rounded to that dtype
        # (transformers rotates with them); the table uses them unrounded.
        if have.shape != want.shape or not torch.allclose(have.to(torch.float32), want.to(have.dtype).to(torch.float32),
                                                          rtol=1e-6, atol=0):
            raise ValueError(f"rotation='fused' builds the angles theta^(-2i/D) of rope_theta {cfg.theta:g} and head "
                             f"dimension {dim}, but the model's rotary inv_freq ({list(have.shape)}) holds other "
                             "frequencies: use rotation='transformers'")
    return cfg


def _set(switch: _Switch, obj, name: str, value) -> None:
    had = name in vars(obj)
    switch.undo.append((obj, name, had, vars(obj).get(name)))
    setattr(obj, name, value)


# ---------------------------------------------------------------- positions ---

def _vision_mask(input_ids: Tensor, vision: VisionConfig) -> Tensor:
    return (input_ids == vision.image_token_id) | (input_ids == vision.video_token_id)


def _opens_block(input_ids: Tensor, vision: VisionConfig) -> bool:
    """A vision start followed by an image or video token: a block (docs/spec.md §1). A lone image token
    (a model may generate one) is text, as a full recompute would read it."""
    if input_ids.size(-1) < 2:
        return False
    start = input_ids[..., :-1] == vision.vision_start_token_id
    return bool((start & _vision_mask(input_ids[..., 1:], vision)).any())


def _token_types(input_ids: Tensor, switch: _Switch) -> Tensor:
    """The mm_token_type_ids of input_ids, as the family's processor makes them."""
    if switch.family is not None:
        return switch.family.token_types(input_ids)
    return hf_compat.expected_token_types(input_ids, None, switch.vision)


def _filler(vision: VisionConfig) -> int:
    special = {vision.vision_start_token_id, vision.image_token_id, vision.video_token_id}
    return next(i for i in range(4) if i not in special)


def _mask_2d(mask, input_ids: Tensor) -> Optional[Tensor]:
    if mask is None:
        return None
    if isinstance(mask, torch.Tensor):
        tensor(mask, "attention_mask")  # dense, with data
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.shape != input_ids.shape:
        shape = list(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise (ValueError if isinstance(mask, torch.Tensor) else TypeError)(
            f"attention_mask {shape}: a model switched by circlerope.hf needs the 2-D [batch, seq] "
            f"mask of input_ids {list(input_ids.shape)} (or none) to place its prompt tokens")
    return mask


def _positions(switch: _Switch, input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, mask):
    """Every geometry's positions [G, 3, B, S] (float32) and the next text position of each row
    [G, B]: the position of a text token appended to the prompt."""
    if switch.qwen3:
        video_grid_thw, second_per_grid_ts = families.split_frames(video_grid_thw), None
    if switch.family is not None:
        input_ids = switch.family.core_ids(input_ids)
    b = input_ids.size(0)
    ext_ids = torch.cat([input_ids, torch.full((b, 1), _filler(switch.vision), dtype=input_ids.dtype,
                                               device=input_ids.device)], 1)
    ext_mask = None if mask is None else torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
    positions, following = [], []
    for scheme in switch.schemes:
        common = dict(scheme=scheme, circle=switch.circle, vision=switch.vision, compat=switch.compat)
        pos, _ = get_rope_index(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, mask, **common)
        ext, _ = get_rope_index(ext_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, ext_mask, **common)
        positions.append(pos.to("cpu", torch.float32))
        following.append(ext[0, :, -1].to("cpu", torch.float32))
    return torch.stack(positions), torch.stack(following)


def _real(mask, input_ids: Tensor) -> Tensor:
    """Which tokens are real (generate() drops an all-ones mask before the first forward)."""
    return torch.ones_like(input_ids, dtype=torch.bool) if mask is None else mask != 0


def _cache_length(cache, cache_position=None) -> int:
    if cache is None:
        return 0
    if getattr(cache, "is_compileable", False) and isinstance(cache_position, torch.Tensor) and cache_position.numel():
        # A static cache before transformers 5.3 counts the nonzero keys of row 0 (fewer than
        # its tokens where row 0 is padded); the releases that build one pass where the tokens go.
        return int(cache_position.reshape(-1)[0])
    if hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    if isinstance(cache, (tuple, list)) and cache and cache[0] is not None:  # legacy ((k, v), ...)
        return int(cache[0][0].shape[-2])
    return 0


def _carried(value, switch: _Switch, shape) -> Tensor:
    """pack()'s circlerope_positions (int64 holding float32 bit patterns, [G, 3, B, S])."""
    want = [len(switch.schemes), 3, *shape]
    if isinstance(value, torch.Tensor):
        tensor(value, "circlerope_positions")  # dense, with data (a meta or sparse one has none to read)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or list(value.shape) != want:
        got = f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else shown(value)
        raise (ValueError if isinstance(value, torch.Tensor) else TypeError)(
            f"circlerope_positions must be the int64 {want} tensor circlerope.hf.pack makes for this "
            f"model's geometries {list(switch.schemes)}, got {got}")
    return value.to("cpu", torch.int32).view(torch.float32)


def _check_given(position_ids, primary: Tensor, mask) -> None:
    """position_ids handed to forward must be the primary geometry's (transformers' generate()
    passes the ones our get_rope_index made): the layers take circlerope's, and different ones
    would mean that transformers' masks and the layers disagree."""
    if not isinstance(position_ids, torch.Tensor):
        return
    tensor(position_ids, "position_ids")  # dense, with data
    given = position_ids[-3:] if position_ids.dim() == 3 else position_ids.unsqueeze(0).expand(3, -1, -1)
    if given.shape != primary.shape:
        raise ValueError(f"position_ids {list(position_ids.shape)} do not fit the batch {list(primary.shape[1:])}")
    real = torch.ones(primary.shape[1:], dtype=torch.bool) if mask is None else mask.to("cpu") != 0
    differ = (given.to("cpu", torch.float32) != primary) & real
    if differ.any():
        a, b, s = (int(x) for x in differ.nonzero()[0])
        raise ValueError(f"position_ids[..., {b}, {s}] = {float(given[a, b, s])} on axis {a}, but the model's geometry "
                         f"puts that token at {float(primary[a, b, s])}: leave position_ids out (circlerope computes "
                         "them), or pack the batch with circlerope.hf.pack")


# ----------------------------------------------------------------- wrappers ---

class _StandIn:
    """What apply() sets in place of one of a model's methods (the outer forward and generate,
    get_rope_index, the rotary embedding's and the layers' forward). An object rather than a
    closure: copy.deepcopy copies a function as itself, so a copied model would keep calling the
    original's switch and methods (TRL's reference model and EMA copies are made so); a stand-in
    is copied with the attributes named in _COPIED (the switch, the replaced bound method), which
    deepcopy's memo maps to the copy's own, and shares the rest (signatures, documentation)."""

    _COPIED: tuple = ()

    def __deepcopy__(self, memo):
        new = copy.copy(self)
        memo[id(self)] = new
        for name in self._COPIED:
            setattr(new, name, copy.deepcopy(getattr(self, name), memo))
        return new


def _expanded(done: Optional[dict], ids: Tensor, mask) -> Optional[tuple]:
    """(positions, next) of what get_rope_index computed for `done`'s prompt, for the forward of
    `ids`: the same rows, or each row repeated k times in place, as generate() expands the batch
    after get_rope_index for num_beams or num_return_sequences (repeat_interleave); None if
    `ids` is another batch."""
    if done is None or done["input_ids"].dim() != 2 or ids.dim() != 2:
        return None
    rows = done["input_ids"].size(0)
    if rows == 0 or ids.size(0) % rows or ids.size(1) != done["input_ids"].size(1):
        return None
    k = ids.size(0) // rows
    if not (torch.equal(done["input_ids"].repeat_interleave(k, 0), ids)
            and torch.equal(_real(done["mask"], done["input_ids"]).repeat_interleave(k, 0), _real(mask, ids))):
        return None
    return done["positions"].repeat_interleave(k, 2), done["next"].repeat_interleave(k, 1)


class _OuterForward(_StandIn):
    """The outer model's forward: every geometry's positions of the call, for the layers."""

    _COPIED = ("switch", "original")

    def __init__(self, switch: _Switch, original):
        self.switch, self.original = switch, original
        self.signature = inspect.signature(original)
        params = self.signature.parameters
        self.var_keyword = next((n for n, p in params.items() if p.kind is p.VAR_KEYWORD), "")
        self.__signature__ = self.signature.replace(parameters=[
            *[p for p in params.values() if p.kind is not p.VAR_KEYWORD],
            inspect.Parameter("circlerope_positions", inspect.Parameter.KEYWORD_ONLY, default=None),
            *[p for p in params.values() if p.kind is p.VAR_KEYWORD]])
        self.__doc__ = original.__doc__

    def __call__(self, *args, circlerope_positions=None, **kwargs):
        switch, params = self.switch, self.signature.parameters
        bound = self.signature.bind_partial(*args, **kwargs)
        arg = bound.arguments
        extra = arg.get(self.var_keyword, {})

        def get(name):
            return arg[name] if name in arg else extra.get(name)

        input_ids, embeds = get("input_ids"), get("inputs_embeds")
        if input_ids is not None:
            input_ids = tensor(input_ids, "input_ids")
        cache = get("cache") if get("cache") is not None else get("past_key_values")
        past = _cache_length(cache, get("cache_position"))
        ref = input_ids if input_ids is not None else embeds
        if ref is None:
            raise ValueError("forward of a model switched by circlerope.hf needs input_ids or inputs_embeds")
        batch, seq = int(ref.shape[0]), int(ref.shape[1])
        if past == 0:
            switch.prompt = None
            if circlerope_positions is not None:
                positions = _carried(circlerope_positions, switch, (batch, seq))
            elif input_ids is None:
                raise ValueError("a model switched by circlerope.hf places its prompt tokens by their ids: pass "
                                 "input_ids (inputs_embeds alone hold no image positions)")
            else:
                # generate() with a static cache passes its built masks (a dict): hf/masks.py
                mask = _mask_2d(prompt_mask(get("attention_mask"), input_ids, switch.computed), input_ids)
                cpu_ids, cpu_mask = input_ids.to("cpu"), None if mask is None else mask.to("cpu")
                grids = [get(n) for n in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")]
                done, switch.computed = switch.computed, None  # used by this forward at most
                # generate() ran get_rope_index on this prompt (or on its rows before it repeated
                # them for beams), with its grids, and passes none here.
                known = _expanded(done, cpu_ids, cpu_mask) if grids[0] is None and grids[1] is None else None
                positions, following = known if known is not None else _positions(switch, cpu_ids, *grids, cpu_mask)
                _check_given(get("position_ids"), positions[switch.primary], mask)
                switch.prompt = {"next": following, "length": seq}
                # The release reads mm_token_type_ids only with grids: testing for grids, not the
                # tokens' values, keeps a compiled forward in one graph (no host read).
                if ("mm_token_type_ids" in params and get("mm_token_type_ids") is None
                        and (grids[0] is not None or grids[1] is not None)):
                    arg["mm_token_type_ids"] = _token_types(input_ids, switch).to(input_ids.device)
            decoding = False
        else:
            prompt = switch.prompt
            if prompt is None:
                raise ValueError(f"a forward with a cache of {past} tokens, but this model saw no prompt since it was "
                                 "switched by circlerope.hf (run the prompt through it first)")
            if circlerope_positions is not None:
                raise ValueError("circlerope_positions (packed training batches) cannot be given with a cache")
            if input_ids is not None and _opens_block(input_ids, switch.vision):
                raise NotImplementedError("an image or video block after the prompt of a cached generation: "
                                          "circlerope.hf continues text only; run the whole sequence without a cache")
            if past < prompt["length"]:
                raise ValueError(f"a cache of {past} tokens is shorter than the prompt of {prompt['length']} that "
                                 "circlerope saw: feed the prompt in one forward")
            following = prompt["next"]
            if batch != following.size(1):
                if batch % following.size(1):
                    raise ValueError(f"batch {batch} after a prompt batch of {following.size(1)}")
                following = following.repeat_interleave(batch // following.size(1), dim=1)
            step = torch.arange(past - prompt["length"], past - prompt["length"] + seq, dtype=torch.float32)
            positions = (following[:, :, None] + step).unsqueeze(1).expand(-1, 3, -1, -1)
            decoding = True
        switch.call = _Call(positions, decoding)
        # No try/finally: torch.compile cannot resume a frame inside one after a graph break in
        # the wrapped forward (transformers' vision tower has many), so it would split here too.
        # A forward that raises leaves its call set until the next forward replaces it.
        out = self.original(*bound.args, **bound.kwargs)
        switch.call = None
        return out


def _fused_pair(fused: _FusedRotation, x: Tensor, positions: Tensor):
    """One geometry's (cos, sin) under rotation="fused": its table, built once here, written out
    as the release's rotation function takes cos and sin (the table's angles in x's dtype,
    halves repeated; [3, B, S, D] with every axis the same where it picks sections itself),
    each tensor marked with the table for the dispatcher."""
    table = circlerope_rotary.rotary_table(positions, fused.rotary)
    cos, sin = (torch.cat((half, half), -1).to(x.dtype) for half in table.chunk(2, -1))
    if fused.multimodal:
        cos, sin = cos.expand(3, *cos.shape), sin.expand(3, *sin.shape)
    mark = _FusedTable(table, fused.rotary.sections)
    setattr(cos, _MARK, mark)
    setattr(sin, _MARK, mark)
    return cos, sin


class _RotaryForward(_StandIn):
    """The text model's rotary embedding: each geometry's (cos, sin) of the outer forward's call."""

    _COPIED = ("switch", "original")

    def __init__(self, switch: _Switch, original):
        self.switch, self.original = switch, original

    def __call__(self, x, position_ids, *args, **kwargs):
        switch = self.switch
        call = switch.call
        if call is None:
            raise RuntimeError("the rotary embedding of a model switched by circlerope.hf ran outside the model's "
                               "own forward (call the model, not its text model)")
        positions = call.positions.to(x.device)
        if switch.fused is not None:
            if not fused_device(x):
                raise ValueError(f"rotation='fused': the model runs on {x.device}, for which this circlerope has no "
                                 "fused kernels (CPU, and CUDA when built with CIRCLEROPE_CUDA=ON): use "
                                 "rotation='transformers'")
            fused = switch.fused

            def embed(x, pos, *unused_args, **unused_kwargs):
                return _fused_pair(fused, x, pos)
        else:
            embed = self.original
        if call.decoding and switch.official_decode:
            # The reference's decode: every layer on Circle-RoPE's positions.
            return embed(x, positions[switch.schemes.index("circle")], *args, **kwargs)
        pairs = [embed(x, positions[g], *args, **kwargs) for g in range(len(switch.schemes))]
        if len(pairs) == 1:
            return pairs[0]
        return _GeometryEmbeddings(pairs, switch.primary)


class _LayerForward(_StandIn):
    """A decoder layer's forward under AGE: its geometry's (cos, sin) of the rotary's pairs."""

    _COPIED = ("switch", "original")

    def __init__(self, switch: _Switch, geometry: int, original):
        self.switch, self.geometry, self.original = switch, geometry, original
        self.signature = inspect.signature(original)
        self.var_keyword = next((n for n, p in self.signature.parameters.items() if p.kind is p.VAR_KEYWORD), None)
        self.__signature__ = self.signature

    def __call__(self, *args, **kwargs):
        pe = kwargs.get("position_embeddings")
        if isinstance(pe, _GeometryEmbeddings):
            kwargs["position_embeddings"] = tuple(pe.per_geometry[self.geometry])
            return self.original(*args, **kwargs)
        if "position_embeddings" not in kwargs:  # passed by position (4.x gradient checkpointing)
            bound = self.signature.bind_partial(*args, **kwargs)
            pe = bound.arguments.get("position_embeddings")
            if pe is None and self.var_keyword:
                pe = bound.arguments.get(self.var_keyword, {}).get("position_embeddings")
            if isinstance(pe, _GeometryEmbeddings):
                bound.arguments["position_embeddings"] = tuple(pe.per_geometry[self.geometry])
                return self.original(*bound.args, **bound.kwargs)
        return self.original(*args, **kwargs)


class _Generate(_StandIn):
    """The model's generate: mm_token_type_ids from the token ids where the release reads them."""

    _COPIED = ("switch", "original")

    def __init__(self, switch: _Switch, original, accepts_token_types: bool):
        self.switch, self.original, self.accepts_token_types = switch, original, accepts_token_types
        self.__signature__ = inspect.signature(original)
        self.__doc__ = original.__doc__

    def __call__(self, *args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args and isinstance(args[0], torch.Tensor) else None)
        if (self.accepts_token_types and kwargs.get("mm_token_type_ids") is None and ids is not None
                and bool(_vision_mask(tensor(ids, "input_ids"), self.switch.vision).any())):
            kwargs["mm_token_type_ids"] = _token_types(ids, self.switch).to(ids.device)
        return self.original(*args, **kwargs)


class _RopeIndex(_StandIn):
    """The model's get_rope_index, with its release's signature (compat's): the primary
    geometry's positions in transformers' dtypes, after which every geometry's positions are
    kept for the forward that follows (generate() from 5.x runs the vision tower and
    get_rope_index before the first forward and hands that forward no grids)."""

    _COPIED = ("switch",)

    def __init__(self, switch: _Switch, primary, qwen2_signature: bool, doc: str):
        self.switch, self.primary = switch, primary
        self.__signature__ = inspect.signature(hf_compat.with_signature(None, switch.compat, qwen2_signature))
        self.__doc__, self.compat, self.scheme = doc, switch.compat, switch.schemes[switch.primary]

    def __call__(self, *args, **kwargs):
        given = self.__signature__.bind(*args, **kwargs).arguments
        input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask, mm_token_type_ids = (
            given.get(name) for name in ("input_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts",
                                         "attention_mask", "mm_token_type_ids"))
        switch = self.switch
        if switch.qwen3:
            input_ids = tensor(input_ids, "input_ids", required=True)
            core_ids = input_ids if switch.family is None else switch.family.core_ids(input_ids)
            hf_compat.check_token_types(mm_token_type_ids, core_ids, attention_mask, switch.vision)
            result = hf_compat.transformers_dtypes(self.scheme, *get_rope_index(
                core_ids, image_grid_thw, families.split_frames(video_grid_thw), None, attention_mask,
                scheme=self.scheme, circle=switch.circle, vision=switch.vision, compat=switch.compat))
        else:
            result = self.primary(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask,
                                  mm_token_type_ids)
        mask = None if attention_mask is None else torch.as_tensor(attention_mask).to("cpu")
        ids = tensor(input_ids, "input_ids", required=True).to("cpu")
        positions, following = _positions(switch, ids, image_grid_thw, video_grid_thw, second_per_grid_ts, mask)
        switch.computed = {"input_ids": ids.clone(), "mask": None if mask is None else mask.clone(),
                           "positions": positions, "next": following}
        return result


# --------------------------------------------------------------------- API ---

def _geometry_from_config(config, layers: int):
    """(scheme, circle, age, official_decode) from config.circlerope (what apply() stores), or
    from the official code's config.circle_rope dict (circlerope.hf.official: its quirks)."""
    saved = getattr(config, CONFIG_KEY, None)
    official = getattr(config, "circle_rope", None)
    if saved is None and official is not None:
        circle, plan = from_official_config(official, layers)
        return "circle", circle, plan, False
    if saved is None:
        raise ValueError("circlerope.hf.apply(model) without a scheme reads the geometry that save_pretrained "
                         f"stored in config.{CONFIG_KEY} (or the official code's config.circle_rope), and this "
                         "config has neither: pass scheme= (and age=)")
    return _saved_geometry(saved, layers)


_SAVED_KEYS = ("scheme", "age", "circle", "official_decode")


def _saved_geometry(saved, layers: int):
    """(scheme, circle, age, official_decode) of a saved config.circlerope, the dict apply()
    writes (Switch.describe): {"scheme", "age", "circle": CircleConfig's fields,
    "official_decode"}, for a model of `layers` layers. Read as strictly as the official
    code's dict is (circlerope.hf.official): every key must be one of these ("scheme"
    required; an absent "age", "circle" or "official_decode" means no plan, the default
    circle, false; an absent circle field its default), every value is read by the core's
    grammar (the circle by CircleConfig, the plan by AgePlan, official_decode as a boolean:
    true, false, 0 or 1), and the scheme of a plan must be the plan's primary geometry, as
    apply() writes it. Anything else is a ValueError naming the key: nothing is dropped or
    defaulted silently ("false" or [0] is no boolean, [] no circle). With a plan the scheme
    returned is None (the plan names each layer's geometry)."""
    where = f"config.{CONFIG_KEY}"
    if not isinstance(saved, Mapping):
        raise ValueError(f"{where} = {shown(saved)} is not a geometry circlerope.hf.apply wrote (a dict with "
                         f"{', '.join(_SAVED_KEYS)})")
    for key in saved:
        if not isinstance(key, str) or key not in _SAVED_KEYS:
            raise ValueError(f"{where}[{shown(key)}]: not a key circlerope.hf.apply writes (expected "
                             f"{', '.join(_SAVED_KEYS)})")
    if "scheme" not in saved:
        raise ValueError(f"{where} has no 'scheme': it is not a geometry circlerope.hf.apply wrote")
    scheme = saved["scheme"]
    if not isinstance(scheme, str) or scheme not in _SCHEMES:
        raise ValueError(f"{where}['scheme'] = {shown(scheme)}: expected one of {', '.join(_SCHEMES)}")
    fields = saved.get("circle", {})
    if not isinstance(fields, Mapping):
        raise ValueError(f"{where}['circle'] = {shown(fields)}: expected a dict of CircleConfig's fields")
    names = [f.name for f in dataclasses.fields(CircleConfig)]
    for key in fields:
        if not isinstance(key, str) or key not in names:
            raise ValueError(f"{where}['circle'][{shown(key)}]: not a field of CircleConfig (expected "
                             f"{', '.join(names)})")
    try:
        circle = CircleConfig(**fields)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}['circle']: {e}") from None
    official_decode = boolean(saved.get("official_decode", False), f"{where}['official_decode']")
    age = saved.get("age")
    if age is None:
        return scheme, circle, None, official_decode
    try:
        plan = AgePlan(age, layers)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}['age'] = {shown(age)}: {e}") from None
    primary = "circle" if "circle" in plan.schemes else plan.schemes[0]
    if scheme != primary:
        raise ValueError(f"{where}['scheme'] = {shown(scheme)}, but its AGE plan {plan.pattern} makes "
                         f"{shown(primary)} the primary geometry (what apply() writes)")
    return None, circle, plan, official_decode


def _check_not_switched(model, holder, text) -> None:
    """Refuses a model a part of which is switched (apply(model.model, ...) before), or which is a
    part of a switched model (apply(model.model, ...) after apply(model, ...)), naming which: the
    two switches would wrap each other's methods, the forward would equal neither geometry and
    the restores could not undo them. A model is switched as a whole, once."""
    for path, module in model.named_modules() if isinstance(model, torch.nn.Module) else ():
        if path and vars(module).get(_ATTR) is not None:
            raise ValueError(f"its part model.{path} ({type(module).__name__}) is already switched by "
                             f"circlerope.hf.apply: call circlerope.hf.restore(model.{path}) first (a model is "
                             "switched as a whole, once)")
    targets = [(model, "forward", "forward"), (model, "generate", "generate"),
               (holder, "get_rope_index", "get_rope_index"), (text.rotary_emb, "forward", "rotary embedding")]
    targets += [(layer, "forward", f"layer {i}") for i, layer in enumerate(text.layers)]
    for obj, name, what in targets:
        stand_in = getattr(obj, "__dict__", {}).get(name)
        if isinstance(stand_in, _StandIn):
            owner = stand_in.switch.model
            raise ValueError(f"its {what} is already switched by circlerope.hf.apply, as part of a "
                             f"{type(owner).__name__}: restore that model first (a model is switched as a whole, "
                             "once)")


def _signature_shape(function) -> list:
    """(name, kind, required) of each parameter of a get_rope_index, self left out."""
    return [(p.name, p.kind, p.default is inspect.Parameter.empty)
            for p in inspect.signature(function).parameters.values() if p.name != "self"]


def _shown_signature(shape: list) -> str:
    return "(" + ", ".join(("**" if kind is inspect.Parameter.VAR_KEYWORD else "") + name
                           for name, kind, _ in shape) + ")"


def _check_compat_fits(holder, compat: str, qwen2: bool) -> None:
    """Refuses a compat mode whose get_rope_index signature is not the one the installed
    transformers calls (names, order, which are required, **kwargs): its own forward and
    generate would call the stand-in with arguments it does not take, and every forward fail
    (hf-4.49 on 5.24: a TypeError about mm_token_type_ids). The modes that fit are named."""
    try:
        theirs = _signature_shape(holder.get_rope_index)
    except (TypeError, ValueError):  # no signature to compare with: the release's calls decide
        return
    ours = _signature_shape(hf_compat.with_signature(None, compat, qwen2))
    if ours == theirs:
        return
    fitting = [mode for mode in COMPAT_MODES if _signature_shape(hf_compat.with_signature(None, mode, qwen2)) == theirs]
    try:
        import transformers  # noqa: PLC0415 (optional dependency; a model of it is at hand)
        release = f"transformers {transformers.__version__}"
    except ImportError:
        release = "this transformers"
    advice = (f"use compat=None (the installed release's mode) or one of {', '.join(fitting)}" if fitting
              else "no compat mode fits this release's get_rope_index")
    raise ValueError(f"compat {shown(compat)}: its get_rope_index takes {_shown_signature(ours)}, but {release} "
                     f"calls get_rope_index{_shown_signature(theirs)}, so every forward would fail: {advice}")


def _check_rotation(rotation) -> str:
    if not isinstance(rotation, str) or rotation not in _ROTATIONS:
        raise (ValueError if isinstance(rotation, str) else TypeError)(
            f"rotation {shown(rotation)} (expected one of {', '.join(_ROTATIONS)})")
    return rotation


def apply(model, scheme: Optional[str] = None, *, circle: Optional[CircleConfig] = None, age=None,
          compat: Optional[str] = None, official_decode: bool = False, rotation: str = "transformers"):
    """Switch a loaded transformers Qwen2-VL / Qwen2.5-VL / Qwen3-VL model to a geometry, in place;
    returns the model. restore(model) undoes it. Qwen3-VL separates a video's frames with
    timestamp tokens: each frame is a vision block of its own, so under Circle-RoPE each frame
    gets its own ring.

    scheme: "circle" (Circle-RoPE), "mrope" (the model's own M-RoPE, bit-identical), "vanilla"
        or "unordered". None: the geometry saved in the model's config (save_pretrained of a
        switched model stores it in config.circlerope), or else the official code's
        config.circle_rope dict (a checkpoint fine-tuned with the authors' code; mapped by
        circlerope.hf.official, which documents its quirks and refuses what it cannot
        reproduce).
    circle: circlerope.CircleConfig (the paper's setting by default).
    age: None (every layer on `scheme`), or a geometry per layer: an AgePlan, or its spec
        ("alternate", "lower", "upper", "all", "strategy_1".."strategy_4", a C/M/V/U pattern),
        built for the model's layer count. Each geometry keeps its own positions while decoding.
    compat: the transformers behaviour to reproduce (default: the installed release's); a mode
        whose get_rope_index signature is not the one the installed release calls (hf-4.49
        under 5.x) is refused, naming the modes that fit.
    official_decode: decode as the reference repository does (every layer on Circle-RoPE's
        positions after the prompt), to compare against its numbers; a cached generate() then
        differs from a full recompute under AGE.
    rotation: how the text attention rotates q and k, a runtime choice (not saved in the config):
        "transformers" (default): the release's own formula on its (cos, sin); M-RoPE is then the
            unswitched model bit for bit.
        "fused": circlerope's fused operator (circlerope.apply_rotary; CPU kernels, and CUDA ones in
            a CUDA build), with one circlerope.rotary_table per geometry and forward shared by the
            layers. Equal to "transformers" within float32 rounding (the table's angles are
            rounded once from double, transformers' computed in float32); in bfloat16 q and k are
            rounded once instead of after each of the formula's operations. Only for the default
            rope type (attention_scaling 1): other rope types are refused. The module docstring
            says how it reaches the layers.
    """
    if hf_peft.is_peft_model(model):  # its base model, through which the adapter's layers run
        apply(hf_peft.base_model(model), scheme, circle=circle, age=age, compat=compat,
              official_decode=official_decode, rotation=rotation)
        return model
    if getattr(model, _ATTR, None) is not None:
        raise ValueError("this model is already switched by circlerope.hf.apply: call circlerope.hf.restore(model) "
                         "first")
    official_decode = flag(official_decode, "official_decode")
    rotation = _check_rotation(rotation)
    compat = hf_compat.release_compat(compat)
    holder, text = _parts(model)
    _check_not_switched(model, holder, text)
    config = model.config
    family = families.resolve(config, compat)
    # Qwen3-VL's get_rope_index has Qwen2-VL's signature (no second_per_grid_ts).
    qwen2_signature = family.family.qwen2_signature
    _check_compat_fits(holder, compat, qwen2_signature)
    layers = len(text.layers)
    if scheme is None and age is None:
        scheme, saved_circle, age, saved_official = _geometry_from_config(config, layers)
        circle = saved_circle if circle is None else circle
        official_decode = official_decode or saved_official
    if age is not None:
        if scheme is not None and (not isinstance(scheme, str) or scheme != "circle"):
            raise ValueError(f"scheme={shown(scheme)} with age={shown(age)}: an AGE plan names each layer's geometry "
                             "itself")
        plan = age if isinstance(age, AgePlan) else AgePlan(age, layers)
        if len(plan) != layers:
            raise ValueError(f"the AGE plan has {len(plan)} layers but the model {layers}")
        per_layer = [plan.layer_scheme(i) for i in range(layers)]
    else:
        plan = None
        if not isinstance(scheme, str) or scheme not in _SCHEMES:
            raise (ValueError if isinstance(scheme, str) else TypeError)(
                f"scheme {shown(scheme)} (expected one of {', '.join(_SCHEMES)})")
        per_layer = [scheme] * layers
    schemes = tuple(dict.fromkeys(per_layer))
    families.check_plan_reaches_attention(config, per_layer)
    if official_decode and "circle" not in schemes:
        raise ValueError("official_decode=True puts every layer on Circle-RoPE while decoding, but no layer uses it")
    if circle is not None and not isinstance(circle, CircleConfig):
        raise TypeError(f"circle must be a circlerope.CircleConfig (got {shown(circle)})")
    # Qwen3-VL's get_rope_index is its release's Qwen2-VL rule on blocks of one frame (the video
    # grids split, below), so it takes its release's compat mode like the others.
    qwen3 = family.family.frames_are_blocks
    if rotation == "fused" and not family.family.fused:
        fused = ", ".join(t for t, f in families.FAMILIES.items() if f.fused)
        raise ValueError(f"rotation='fused' is checked on {fused} "
                         f"models, not on {family.family.name}'s rotary: use rotation='transformers'")
    if rotation == "fused":  # everything it needs is checked before the model is touched
        namespace, function = _rotation_site(text)
        fused_rotary = _fused_rotary(config, text.rotary_emb, qwen3)
    switch = _Switch(schemes=schemes, primary=schemes.index("circle") if "circle" in schemes else 0,
                     layer_geometry=[schemes.index(s) for s in per_layer], circle=circle or CircleConfig(),
                     vision=family.vision, compat=compat,
                     official_decode=bool(official_decode), plan=plan, qwen3=qwen3, rotation=rotation, family=family)
    # The primary geometry's get_rope_index (rope_index_fn validates the settings now, not at the
    # first forward). Qwen3-VL's signature is Qwen2-VL's (no second_per_grid_ts).
    if qwen3:
        get_rope_index(torch.zeros(1, 1, dtype=torch.int64), scheme=schemes[switch.primary], circle=switch.circle,
                       vision=switch.vision, compat=compat)  # validates the settings now
        primary, doc = None, (f"circlerope positions ({schemes[switch.primary]}) with Qwen3-VL's get_rope_index "
                              f"signature ({compat})")
    else:
        primary_fn = hf_compat.rope_index_fn(config, scheme=schemes[switch.primary], circle=switch.circle,
                                             compat=compat)
        primary, doc = primary_fn.compute, primary_fn.__doc__
    # Everything is checked; from here on the model is changed.
    switch.model = model
    _set(switch, holder, "get_rope_index", _RopeIndex(switch, primary, qwen2_signature, doc))
    _set(switch, model, "forward", _OuterForward(switch, model.forward))
    rotary = text.rotary_emb
    _set(switch, rotary, "forward", _RotaryForward(switch, rotary.forward))
    if len(schemes) > 1:
        for i, layer in enumerate(text.layers):
            _set(switch, layer, "forward", _LayerForward(switch, switch.layer_geometry[i], layer.forward))
    if callable(getattr(model, "generate", None)):
        accepts = "mm_token_type_ids" in inspect.signature(model.forward).parameters
        _set(switch, model, "generate", _Generate(switch, model.generate, accepts))
    for obj in (model, holder):
        if getattr(obj, "rope_deltas", None) is not None:
            _set(switch, obj, "rope_deltas", None)
    _set(switch, config, CONFIG_KEY, switch.describe())
    hf_registry.mark_config(switch.undo, config)  # save_pretrained writes the circlerope model type
    if rotation == "fused":
        switch.fused = _FusedRotation.acquire(model, fused_rotary, namespace, function)
    object.__setattr__(model, _ATTR, switch)
    return model


def restore(model):
    """Undo apply(model): the model runs transformers' own code again (and its config no longer
    names a circlerope geometry). Returns the model."""
    if hf_peft.is_peft_model(model):
        restore(hf_peft.base_model(model))
        return model
    switch = getattr(model, _ATTR, None)
    if switch is None:
        raise ValueError("this model is not switched by circlerope.hf.apply")
    for obj, name, had, value in reversed(switch.undo):
        if had:
            setattr(obj, name, value)
        elif name in vars(obj):
            delattr(obj, name)
    if switch.fused is not None:
        switch.fused.release()  # the rotation function back in its module if no other model uses it
        switch.fused = None
    object.__delattr__(model, _ATTR)
    return model


def geometry(model) -> Optional[dict]:
    """What apply() set on `model` (scheme, age pattern, circle options, official_decode, and the
    rotation, which is not saved with the geometry), or None."""
    switch = getattr(model, _ATTR, None)
    return None if switch is None else dict(switch.describe(), schemes=list(switch.schemes),
                                            layer_geometry=list(switch.layer_geometry), compat=switch.compat,
                                            rotation=switch.rotation)


def from_pretrained(model_class, path, *, rotation: str = "transformers", **kwargs):
    """model_class.from_pretrained(path, **kwargs), switched to the geometry its config saved
    (config.circlerope, written by save_pretrained of a switched model, or the official code's
    config.circle_rope) with apply(model, rotation=rotation); unswitched when it names none, which
    rotation="fused" refuses (it needs a switched model: apply(model, scheme, rotation="fused"))."""
    if not callable(getattr(model_class, "from_pretrained", None)):
        raise TypeError(f"model_class must be a transformers model class (with from_pretrained) (got "
                        f"{shown(model_class)})")
    rotation = _check_rotation(rotation)
    # A checkpoint of a switched model (model_type "<base>_circlerope") loads through the base
    # class's circlerope subclass, which switches what it builds (circlerope.hf.registry).
    model = hf_registry.loading_class(model_class, path, kwargs).from_pretrained(path, **kwargs)
    if getattr(model, _ATTR, None) is not None:
        if rotation != "transformers":
            apply(restore(model), rotation=rotation)
    elif getattr(model.config, CONFIG_KEY, None) is not None or getattr(model.config, "circle_rope", None) is not None:
        apply(model, rotation=rotation)
    elif rotation != "transformers":
        raise ValueError(f"rotation={shown(rotation)}: the config at {shown(str(path))} names no circlerope "
                         "geometry, so the model is not switched; switch it with circlerope.hf.apply(model, scheme, "
                         f"rotation={shown(rotation)})")
    return model


def pack(model, samples, *, flash_attention_kwargs: bool = False) -> dict:
    """One padding-free row from several samples, for a model switched by apply().

    samples: dicts with "input_ids" (one row: [S] or [1, S]) and optionally "image_grid_thw",
    "video_grid_thw", "second_per_grid_ts", "pixel_values", "pixel_values_videos", "labels"
    (one per token: [S] or [1, S]). At most circlerope's token limit of one call in all.
    Returns the model's keyword arguments:
    - input_ids [1, T];
    - circlerope_positions: every geometry's float32 positions as int32 bit patterns in int64
      [G, 3, 1, T], which the layers take, and which no dtype cast of floating inputs reaches;
    - what the installed transformers needs to keep the samples apart: from 5.0,
      position_ids int64 [4, 1, T], each row restarting at 0 per sample (transformers reads
      the first and builds a block-diagonal mask from it, without an attention mask or a
      cache: use_cache=False); before 5.0, which does not read packed position_ids outside
      flash-attention, a 4-D block-diagonal causal attention_mask [1, 1, T, T] (0 where a
      token may attend, the dtype's minimum elsewhere, in the model's dtype) and position_ids
      int64 [3, 1, T];
    - the concatenated grids, pixels and labels;
    - with flash_attention_kwargs, the cu_seq_lens_q/k and max_length_q/k of flash-attention's
      varlen path (not run here: no flash-attention on a CPU). A hybrid model's linear-attention
      layers (Qwen3.5) keep samples apart only with them, so pack refuses such a model without
      flash_attention_kwargs=True."""
    switch = getattr(model, _ATTR, None)
    if switch is None:
        raise ValueError("circlerope.hf.pack needs a model switched by circlerope.hf.apply")
    flash_attention_kwargs = flag(flash_attention_kwargs, "flash_attention_kwargs")
    linear = families.linear_attention_layers(model.config)
    if linear and not flash_attention_kwargs:
        raise ValueError(f"circlerope.hf.pack: layers {linear} of this model are linear attention, whose state runs "
                         "from one packed sample into the next unless it gets the cu_seq_lens kwargs: pass "
                         "flash_attention_kwargs=True (with flash-linear-attention installed: transformers' "
                         "fallback mixes the samples or refuses)")
    import transformers  # noqa: PLC0415

    v5 = int(transformers.__version__.split(".")[0]) >= 5
    if not isinstance(samples, (list, tuple)):
        raise TypeError(f"samples must be a list of dicts (one per sample) (got {shown(samples)})")
    if not samples:
        raise ValueError("circlerope.hf.pack: no samples")
    ids, text_rows, positions, lengths = [], [], [], []
    grids = {"image_grid_thw": [], "video_grid_thw": [], "second_per_grid_ts": []}
    concat = {"pixel_values": [], "pixel_values_videos": [], "labels": []}
    for n, sample in enumerate(samples):
        if not isinstance(sample, dict) or "input_ids" not in sample:
            raise (TypeError if not isinstance(sample, dict) else ValueError)(
                f"sample {n} must be a dict with input_ids (got {shown(sample)})")
        row = tensor(sample["input_ids"], f"sample {n} input_ids", required=True)
        if row.is_floating_point() or row.is_complex():
            raise ValueError(f"sample {n} input_ids must hold integers, got {row.dtype}")
        if row.dim() not in (1, 2) or (row.dim() == 2 and row.size(0) != 1):
            raise ValueError(f"sample {n} input_ids has shape {list(row.shape)}: a sample is one row, [S] or [1, S] "
                             "(give each row of a batch as a sample of its own)")
        if row.numel() > MAX_TOKENS:
            raise ValueError(f"sample {n} has {row.numel()} tokens, more than {MAX_TOKENS}, the limit of one call")
        row = row.reshape(1, -1).to(torch.int64)
        if row.size(1) == 0:
            raise ValueError(f"sample {n} has no tokens")
        if sum(lengths) + row.size(1) > MAX_TOKENS:  # before its positions are computed
            raise ValueError(f"samples 0..{n} hold {sum(lengths) + row.size(1)} tokens, more than {MAX_TOKENS} in "
                             "one packed row, the limit of one call")
        img, vid, sec = (sample.get(k) for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts"))
        pos, _ = _positions(switch, row, img, vid, sec, None)
        ids.append(row)
        positions.append(pos)
        text_rows.append(torch.arange(row.size(1)))
        lengths.append(row.size(1))
        for key, value in (("image_grid_thw", img), ("video_grid_thw", vid)):
            if value is not None and len(value):
                grids[key].append(torch.as_tensor(value, dtype=torch.int64).reshape(-1, 3))
        if sec is not None and len(sec):
            grids["second_per_grid_ts"].append(torch.as_tensor(sec, dtype=torch.float32).reshape(-1))
        for key in concat:
            if sample.get(key) is not None:
                value = tensor(sample[key], f"sample {n} {key}")
                if key == "labels":
                    if list(value.shape) not in ([row.size(1)], [1, row.size(1)]):
                        raise ValueError(f"sample {n} labels has shape {list(value.shape)}: one label per token, "
                                         f"[{row.size(1)}] or [1, {row.size(1)}], expected")
                    value = value.reshape(1, -1)
                else:  # a row per patch of the sample's grids, as the vision tower reads them
                    # ([patches, C, P, P] for PaddleOCR-VL's SigLIP tower)
                    grid = img if key == "pixel_values" else vid
                    patches = 0 if grid is None else int(torch.as_tensor(grid, dtype=torch.int64).prod(-1).sum())
                    if value.dim() < 2 or value.size(0) != patches:
                        raise ValueError(f"sample {n} {key} has shape {list(value.shape)}: a row per patch of its "
                                         f"{'image' if key == 'pixel_values' else 'video'}_grid_thw ({patches}) "
                                         "expected")
                concat[key].append(value)
    all_pos = torch.cat(positions, dim=3)
    text_row = torch.cat(text_rows).view(1, 1, -1)
    out = {"input_ids": torch.cat(ids, 1),
           "position_ids": text_row.expand(4 if v5 else 3, -1, -1).contiguous(),
           "circlerope_positions": all_pos.contiguous().view(torch.int32).to(torch.int64)}
    if not v5:
        sample_of = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
        total = int(sample_of.numel())
        allowed = (sample_of[:, None] == sample_of[None, :]) & torch.ones(total, total, dtype=torch.bool).tril()
        dtype = getattr(model, "dtype", torch.float32)
        out["attention_mask"] = torch.zeros(1, 1, total, total, dtype=dtype).masked_fill(
            ~allowed, torch.finfo(dtype).min)
    for key, parts in {**grids, **concat}.items():
        if parts:
            if key == "labels" and len(parts) != len(samples):
                raise ValueError("labels: give them for every sample or for none")
            out[key] = torch.cat(parts, 1 if key == "labels" else 0)
    if flash_attention_kwargs:
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        out.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(lengths), max_length_k=max(lengths))
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        out["mm_token_type_ids"] = _token_types(out["input_ids"], switch)
    # transformers 5 looks for packed sequences only without a cache (and without an attention mask).
    out["use_cache"] = False
    return out
