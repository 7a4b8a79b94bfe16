"""Random configs through both readers of a config file's geometry: `config.circlerope` (what
circlerope.hf.apply saves) and the official `circle_rope` dict of the authors' checkpoints.

A fuzzer's contract, checked on seeded random documents (values of every JSON type and the
troublesome numbers: huge integers, nan, inf, -0.0, whole-valued floats, numeric strings):
each reader either returns a geometry that the library itself accepts, or raises ValueError
naming the config key it refused. Any other exception (TypeError, OverflowError, KeyError,
RecursionError) or a message that names no key is a defect. What is accepted must also survive
a round trip: written back and read again, it is the same geometry.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

circlerope = pytest.importorskip("circlerope")
hf_model = pytest.importorskip("circlerope.hf.model")
from circlerope.hf.official import KEYS, OFFICIAL_LAYERS, from_official_config, to_official_config  # noqa: E402

LAYERS = 4
CIRCLE_FIELDS = [f.name for f in dataclasses.fields(circlerope.CircleConfig)]
OFFICIAL_KEYS = list(KEYS)

NUMBERS = [0, 1, -1, 2, 0.5, 1.0, -0.0, 1e300, 1e-300, 10 ** 400, -(10 ** 400), 2 ** 63, float("nan"),
           float("inf"), float("-inf"), 3.25, 10.0, 1e20]
STRINGS = ["", "auto", "auto-2", "auto-0", "auto-x", "auto-2-3", "10", "1e400", "nan", "inf", "true", "false",
           "0", "1", "circle", "mrope", "vanilla", "alternate", "all", "CM", "CCMM", "X", "on", "off",
           "a" * 300, "\u00e9", " 1", "0x10", "1_0"]


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return rng.choice(NUMBERS)
    if kind == 1:
        return rng.choice(STRINGS)
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return rng.uniform(-20, 20)
    if kind == 4:
        return rng.randrange(-5, 40)
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(CIRCLE_FIELDS + OFFICIAL_KEYS + ["x", 1]): _value(rng, depth + 1)
            for _ in range(rng.randrange(4))}


def _saved_document(rng: random.Random) -> dict:
    """Mostly well-formed config.circlerope dicts with one or two keys disturbed."""
    doc = {"scheme": rng.choice(["circle", "mrope", "vanilla", "unordered"]),
           "circle": {name: getattr(circlerope.CircleConfig(), name) for name in CIRCLE_FIELDS
                      if rng.random() < 0.5},
           "official_decode": rng.choice([True, False])}
    if rng.random() < 0.5:
        doc["age"] = rng.choice(["alternate", "lower", "upper", "all", "CMCM", "MMCC"])
    for _ in range(rng.randrange(1, 3)):
        where = rng.randrange(3)
        if where == 0:
            doc[rng.choice(["scheme", "age", "circle", "official_decode", "extra"])] = _value(rng)
        elif where == 1 and isinstance(doc.get("circle"), dict):
            doc["circle"][rng.choice(CIRCLE_FIELDS + ["radious"])] = _value(rng)
        else:
            doc.pop(rng.choice(list(doc)), None)
    return doc


def _official_document(rng: random.Random) -> dict:
    doc = {"radius": rng.choice([10, "auto", "auto-2", 2.5]), "alpha": rng.choice([0.5, 0, 1])}
    if rng.random() < 0.5:
        doc["AGE_mode"] = rng.choice(["strategy_2", "strategy_3", "strategy_4"])
    for _ in range(rng.randrange(1, 3)):
        if rng.random() < 0.8:
            doc[rng.choice(OFFICIAL_KEYS + ["circle_r"])] = _value(rng)
        else:
            doc.pop(rng.choice(list(doc)) if doc else "radius", None)
    return doc


def _names_a_key(message: str, keys) -> bool:
    return any(str(k) in message for k in keys) or "config" in message or "circle" in message


@pytest.mark.parametrize("seed", range(4))
def test_random_saved_geometries_are_read_or_refused_naming_the_key(seed):
    rng = random.Random(1000 + seed)
    accepted = refused = 0
    for _ in range(2500):
        doc = _saved_document(rng)
        text = json.dumps(doc, default=str)   # what a config.json can hold
        try:
            scheme, circle, plan, official = hf_model._saved_geometry(json.loads(text), LAYERS)
        except ValueError as e:
            assert "config.circlerope" in str(e), (doc, str(e))
            refused += 1
            continue
        accepted += 1
        assert isinstance(circle, circlerope.CircleConfig)
        assert official in (True, False)
        given = json.loads(text).get("official_decode", False)
        assert type(given) in (bool, int) and given in (0, 1) and official == bool(given), (doc, official)
        assert (scheme is None) == (plan is not None)
        # The geometry read back is one the library takes, and reads back as itself.
        again = {"scheme": scheme if plan is None else
                 ("circle" if "circle" in plan.schemes else plan.schemes[0]),
                 "circle": {f: getattr(circle, f) for f in CIRCLE_FIELDS}, "official_decode": official}
        if plan is not None:
            again["age"] = plan.pattern
        assert hf_model._saved_geometry(json.loads(json.dumps(again)), LAYERS) == (scheme, circle, plan, official)
    assert accepted > 100 and refused > 100, (accepted, refused)


@pytest.mark.parametrize("seed", range(4))
def test_random_official_dicts_are_read_or_refused_naming_the_key(seed):
    rng = random.Random(2000 + seed)
    accepted = refused = 0
    for _ in range(2500):
        doc = _official_document(rng)
        try:
            circle, plan = from_official_config(doc, OFFICIAL_LAYERS)
        except ValueError as e:
            assert _names_a_key(str(e), list(doc) + OFFICIAL_KEYS), (doc, str(e))
            refused += 1
            continue
        accepted += 1
        assert isinstance(circle, circlerope.CircleConfig)
        # Written in the official form and read again: the same geometry.
        assert from_official_config(to_official_config(circle, plan), OFFICIAL_LAYERS) == (circle, plan)
    assert accepted > 100 and refused > 100, (accepted, refused)
