"""Shared pieces of the Python tests: the pure-PyTorch Hugging Face rotary formula they
compare against, and the reference position cases."""
import json
import os

import pytest
import torch

import circlerope

# Every core by default; CIRCLEROPE_TEST_THREADS=1 where the suite runs in parallel processes
# (pytest-xdist workers, transformers releases side by side), which share the cores instead.
torch.set_num_threads(int(os.environ.get("CIRCLEROPE_TEST_THREADS", "0")) or os.cpu_count() or 1)

SOURCE_DIR = os.environ.get("CIRCLEROPE_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
GOLDEN_FILE = os.path.join(SOURCE_DIR, "tests", "data", "reference_positions.json")


def frequency_axes(half, sections, layout):
    """Axis (0 t, 1 h, 2 w) read by each frequency (SPEC 4), written independently of the core."""
    st, sh, sw = sections
    axes = []
    for i in range(half):
        if layout == "chunked":
            axes.append(0 if i < st else 1 if i < st + sh else 2)
        elif layout == "interleaved":
            axes.append(1 if (i % 3 == 1 and i < 3 * sh) else 2 if (i % 3 == 2 and i < 3 * sw) else 0)
        else:
            axes.append(0)
    return torch.tensor(axes)


def hf_cos_sin(position_ids, rotary_dim, sections=(16, 24, 24), theta=1e6, layout="chunked",
               angle_dtype=torch.float64):
    """Hugging Face's Qwen2.5-VL rotary embedding: cos/sin [B, S, rotary_dim] of
    cat(freqs, freqs), each frequency reading its section's axis. angle_dtype float32
    reproduces HF exactly (its inv_freq and angle are float32); float64 gives the exact angle."""
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(angle_dtype) / rotary_dim
    inv_freq = 1.0 / (theta ** exponent)
    freqs = position_ids.to(angle_dtype)[..., None] * inv_freq           # [3, B, S, D/2]
    axes = frequency_axes(rotary_dim // 2, sections, layout)
    freqs = freqs.gather(0, axes.view(1, 1, 1, -1).expand(1, *freqs.shape[1:]))[0]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def hf_apply(q, k, cos, sin, qk_layout="bhsd", pairing="neox"):
    """q * cos + rotate_half(q) * sin in q's dtype (cos/sin cast to it first, as HF does);
    the rotary part is the first cos.shape[-1] elements of each head, the rest passes through."""
    dim = 1 if qk_layout == "bhsd" else 2
    rot = cos.shape[-1]
    if pairing == "gptj":  # adjacent pairs: cat(c, c) becomes c0 c0 c1 c1 ...
        half = rot // 2
        cos = cos[..., :half].repeat_interleave(2, -1)
        sin = sin[..., :half].repeat_interleave(2, -1)
    cos, sin = cos.unsqueeze(dim), sin.unsqueeze(dim)

    def one(x):
        xr, rest = x[..., :rot], x[..., rot:]
        if pairing == "neox":
            turned = rotate_half(xr)
        else:
            turned = torch.stack([-xr[..., 1::2], xr[..., 0::2]], dim=-1).flatten(-2)
        out = xr * cos.to(x.dtype) + turned * sin.to(x.dtype)
        return torch.cat([out, rest], dim=-1)

    return one(q), one(k)


def golden_cases():
    with open(GOLDEN_FILE) as f:
        return json.load(f)["cases"]


def request_arguments(request):
    """A reference request (../shared/golden format) as get_rope_index arguments. Absent keys
    inside "circle" mean what they mean in the reference's config; no "circle" object means
    the paper's setting."""
    c = request.get("circle")
    circle = circlerope.CircleConfig() if c is None else circlerope.CircleConfig(
        radius=c["radius"], alpha=c.get("alpha", 0.5), move_to_origin=bool(c.get("move_to_origin", False)),
        dff_rate=c.get("dff_rate") or 0.0, move_to_positive=c.get("move_to_positive") or None)
    v = request.get("vision") or {}
    vision = circlerope.VisionConfig(**{k: v[k] for k in v})
    grids = lambda key: torch.tensor(request[key], dtype=torch.int64).view(-1, 3) if request.get(key) else None
    seconds = request.get("second_per_grid_ts")
    kwargs = dict(scheme=request.get("scheme", "circle"), circle=circle, vision=vision)
    args = (torch.tensor(request["input_ids"], dtype=torch.int64), grids("image_grid_thw"), grids("video_grid_thw"),
            None if seconds is None else torch.tensor(seconds, dtype=torch.float64),
            torch.tensor(request["attention_mask"], dtype=torch.int64) if request.get("attention_mask") is not None else None)
    return args, kwargs


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(20261129)


class BadRepr:
    """A value whose __repr__ raises: a message must still be built."""

    def __repr__(self):
        raise RuntimeError("a __repr__ that fails")


def attack(calls, garbage):
    """Each argument of each (name, function, args, kwargs) call replaced by each garbage value:
    the call succeeds or raises a ValueError of one short line of printable ASCII (never
    TypeError, AttributeError, RuntimeError, NotImplementedError, ...). Returns what did not."""
    wrong = []
    for name, function, args, kwargs in calls:
        function(*args, **kwargs)  # the base call is valid
        slots = [("arg", i) for i in range(len(args))] + [("kw", key) for key in kwargs]
        for kind, slot in slots:
            for value in garbage:
                a, kw = list(args), dict(kwargs)
                if kind == "arg":
                    a[slot] = value
                else:
                    kw[slot] = value
                shown = "BadRepr()" if isinstance(value, BadRepr) else repr(value)[:30]
                try:
                    function(*a, **kw)
                except ValueError as e:
                    message = str(e)
                    if len(message) > 500 or not all(32 <= ord(c) < 127 for c in message):
                        wrong.append(f"{name} {slot}={shown}: a {len(message)}-character or unclean message")
                except Exception as e:  # noqa: BLE001 - the point of the test
                    wrong.append(f"{name} {slot}={shown}: {type(e).__name__}: {str(e)[:100]}")
    return wrong
