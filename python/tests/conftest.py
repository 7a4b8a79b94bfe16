"""Shared pieces of the Python tests: Hugging Face's cos/sin of positions (from
circlerope.hf.reference, the one copy of transformers' formulas, which the tests rotate with), the
reference position cases, and the garbage-argument attack."""
import json
import os

import pytest
import torch

import circlerope
from circlerope.hf import reference

# Every core by default; CIRCLEROPE_TEST_THREADS=1 where the suite runs in parallel processes
# (pytest-xdist workers, transformers releases side by side), which share the cores instead.
torch.set_num_threads(int(os.environ.get("CIRCLEROPE_TEST_THREADS", "0")) or os.cpu_count() or 1)

SOURCE_DIR = os.environ.get("CIRCLEROPE_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
GOLDEN_FILE = os.path.join(SOURCE_DIR, "tests", "data", "reference_positions.json")


def hf_cos_sin(position_ids, rotary_dim, sections=(16, 24, 24), theta=1e6, frequency_layout="chunked",
               angle_dtype=torch.float64):
    """Hugging Face's cos/sin [B, S, rotary_dim] of positions [3, B, S]: its rotary embedding and
    section selection (circlerope.hf.reference). angle_dtype float32 reproduces transformers
    exactly (its inv_freq and angles are float32); float64 gives the exact angles."""
    return tuple(reference.select_sections(t, sections, frequency_layout)
                 for t in reference.rotary_embedding(position_ids, rotary_dim, theta, angle_dtype))


def golden_cases():
    with open(GOLDEN_FILE) as f:
        return json.load(f)["cases"]


def request_arguments(request):
    """A reference request (tests/data/reference_positions.json's format) as get_rope_index arguments. Absent keys
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


def _kind(value):
    """A value's type, and its items' for a tuple or list ((16, 24, 24) is not ('a', 'b', 'c'))."""
    if isinstance(value, (tuple, list)):
        return type(value), tuple(_kind(x) for x in value)
    return type(value)


def attack(calls, garbage):
    """Each argument of each (name, function, args, kwargs) call replaced by each garbage value:
    the call succeeds, or raises a ValueError, or a TypeError where the garbage's type (its items'
    too) is not the valid argument's (a value of the valid argument's own type is wrong by its
    value: ValueError),
    of one short line of printable ASCII (never AttributeError, RuntimeError, NotImplementedError,
    ...). Returns what did not."""
    wrong = []
    for name, function, args, kwargs in calls:
        function(*args, **kwargs)  # the base call is valid
        slots = [("arg", i) for i in range(len(args))] + [("kw", key) for key in kwargs]
        for kind, slot in slots:
            valid = args[slot] if kind == "arg" else kwargs[slot]
            for value in garbage:
                a, kw = list(args), dict(kwargs)
                if kind == "arg":
                    a[slot] = value
                else:
                    kw[slot] = value
                shown = "BadRepr()" if isinstance(value, BadRepr) else repr(value)[:30]
                try:
                    function(*a, **kw)
                except (ValueError, TypeError) as e:
                    message = str(e)
                    if isinstance(e, TypeError) and _kind(value) == _kind(valid):
                        wrong.append(f"{name} {slot}={shown}: a TypeError for a value of the argument's own type "
                                     f"({type(value).__name__}): {message[:100]}")
                    elif len(message) > 500 or not all(32 <= ord(c) < 127 for c in message):
                        wrong.append(f"{name} {slot}={shown}: a {len(message)}-character or unclean message")
                except Exception as e:  # noqa: BLE001 - the point of the test
                    wrong.append(f"{name} {slot}={shown}: {type(e).__name__}: {str(e)[:100]}")
    return wrong
