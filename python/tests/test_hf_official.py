"""The official Circle-RoPE config dict (circle_rope) read into CircleConfig / AgePlan and
written back (circlerope.hf.official)."""

import math
import re

import pytest
import torch

import circlerope
from circlerope import AgePlan, CircleConfig
from circlerope.hf.official import from_official_config, to_official_config

from conftest import golden_cases, request_arguments

# The "circle_rope" entry of the example config.json shipped by the authors:
# github.com/lose4578/CircleRoPE, code/config.json at 063fb2c43c7a4718b9465b74494b58080da1c260
# (the same values in modelscope/ms-swift circle_rope/config.json and
# circle_rope/train/train_circle.json at eabfe07d0e404120253bedef083d4f691e269773);
# that config has "num_hidden_layers": 36.
SHIPPED = {"alpha": 0.5, "radius": 10, "method": "circle", "AGE_mode": "strategy_4", "move_to_origin": True}
SHIPPED_LAYERS = 36

# The official per-layer lists (True = Circle-RoPE) of modular_qwen2_5_vl_circle_rope.py, as C/M.
OFFICIAL_LISTS = {
    "strategy_2": "C" * 18 + "M" * 18,
    "strategy_3": "M" * 18 + "C" * 18,
    "strategy_4": "CM" * 18,
}

# A dict with every key the official code reads, none at a default.
FULL = {"radius": "auto-2.5", "alpha": 0.25, "method": "circle", "move_to_origin": True,
        "dff_rate": 0.25, "move_to_positive": 3, "AGE_mode": "strategy_2"}


def ring(**keys):
    """A minimal official dict: radius and alpha must be written out (the official default is -1)."""
    return {"radius": 10, "alpha": 0.5, **keys}


def positions(circle, scheme="circle"):
    """Positions of a small row (text, a 6x8 image, text) under `circle`."""
    ids = torch.tensor([[1, 2, 151652] + [151655] * 12 + [151653, 3, 4]])
    return circlerope.get_rope_index(ids, torch.tensor([[1, 6, 8]]), scheme=scheme, circle=circle)


# ---------------------------------------------------------- the shipped config ---

def test_shipped_config_is_the_paper_setting_with_alternate_layers():
    circle, plan = from_official_config(SHIPPED, SHIPPED_LAYERS)
    assert circle == CircleConfig(radius=10.0, alpha=0.5, move_to_origin=True, dff_rate=0.0,
                                  move_to_positive=None)
    assert circle == CircleConfig()  # the paper's recommended setting is our default
    assert plan.pattern == OFFICIAL_LISTS["strategy_4"] and plan.schemes == ["circle", "mrope"]
    assert to_official_config(circle, plan) == SHIPPED


@pytest.mark.parametrize("mode", sorted(OFFICIAL_LISTS))
def test_age_modes_give_the_official_lists(mode):
    circle, plan = from_official_config(ring(AGE_mode=mode), 36)
    assert plan.pattern == OFFICIAL_LISTS[mode]
    assert to_official_config(circle, plan)["AGE_mode"] == mode


def test_no_age_mode_means_every_layer_circle_at_any_layer_count():
    for layers in (1, 28, 36, 80):
        assert from_official_config(ring(), layers)[1] is None
    assert "AGE_mode" not in to_official_config(CircleConfig(), None)
    assert "AGE_mode" not in to_official_config(CircleConfig(), AgePlan("all", 28))


# ------------------------------------------------------------- the golden cases ---

@pytest.mark.parametrize("case", [c for c in golden_cases() if c["request"]["scheme"] == "circle"],
                         ids=lambda c: c["name"])
def test_golden_circle_cases_through_the_official_dict(case):
    """The reference cases carry the official settings: read them with from_official_config."""
    official = case["request"]["circle"]
    circle, plan = from_official_config(official, SHIPPED_LAYERS)
    assert plan is None
    args, kwargs = request_arguments(case["request"])
    kwargs["circle"] = circle
    position_ids, deltas = circlerope.get_rope_index(*args, **kwargs)
    expected = case["expected"]
    torch.testing.assert_close(position_ids, torch.tensor(expected["position_ids"], dtype=torch.float32),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(deltas.view(-1), torch.tensor(expected["rope_deltas"], dtype=torch.float32),
                               rtol=1e-4, atol=1e-4)


def test_golden_paper_case_uses_the_shipped_settings():
    case = next(c for c in golden_cases() if c["name"] == "paper_default_single_image")
    assert case["request"]["circle"] == {k: v for k, v in SHIPPED.items() if k != "AGE_mode"}


@pytest.mark.parametrize("case", golden_cases(), ids=lambda c: c["name"])
def test_golden_cases_per_layer_of_the_shipped_plan(case):
    """With AGE_mode strategy_4 the even layers get the case's positions when it is a
    Circle-RoPE case, the odd layers when it is an M-RoPE one."""
    request = case["request"]
    official = {**(request["circle"] or SHIPPED), "AGE_mode": "strategy_4"}
    circle, plan = from_official_config(official, SHIPPED_LAYERS)
    args, kwargs = request_arguments(request)
    layer = 0 if request["scheme"] == "circle" else 1
    kwargs.update(circle=circle, scheme=plan.layer_scheme(layer))
    position_ids, _ = circlerope.get_rope_index(*args, **kwargs)
    torch.testing.assert_close(position_ids, torch.tensor(case["expected"]["position_ids"], dtype=torch.float32),
                               rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------- each key ---

@pytest.mark.parametrize("value, radius", [
    (10, 10.0), (2.5, 2.5), ("10", 10.0), ("auto", "auto"), ("auto-2.5", "auto-2.5"), ("auto-2", "auto-2.0"),
    ("auto-0.001", "auto-0.001"),
    ("xauto-3", "auto-3.0"),  # the official reader ignores what precedes the "-"
])
def test_radius(value, radius):
    assert from_official_config(ring(radius=value), 36)[0].radius == radius


@pytest.mark.parametrize("alpha", [0, 0.25, 1])
def test_alpha(alpha):
    assert from_official_config(ring(alpha=alpha), 36)[0].alpha == alpha


@pytest.mark.parametrize("value, on", [(None, False), (False, False), (0, False), (True, True), (1, True)])
def test_move_to_origin(value, on):
    assert from_official_config(ring(move_to_origin=value), 36)[0].move_to_origin is on


def test_absent_move_to_origin_is_off_unlike_our_default():
    assert from_official_config(ring(), 36)[0].move_to_origin is False
    assert CircleConfig().move_to_origin is True
    assert to_official_config(CircleConfig())["move_to_origin"] is True  # always written out


@pytest.mark.parametrize("value, beta", [(None, 0.0), (False, 0.0), (0, 0.0), (True, 1.0), (0.25, 0.25), (1, 1.0)])
def test_dff_rate(value, beta):
    assert from_official_config(ring(dff_rate=value), 36)[0].dff_rate == beta


@pytest.mark.parametrize("value, shift", [
    (None, None), (False, None), (0, None), (0.0, None), ("0", None), ("auto", "auto"), (3, 3.0), ("3", 3.0),
    (-2, -2.0),
    (True, 1.0),  # float(True): an offset of 1, not "auto"
])
def test_move_to_positive(value, shift):
    assert from_official_config(ring(move_to_positive=value), 36)[0].move_to_positive == shift


def test_method_circle_is_the_default():
    assert from_official_config(ring(method="circle"), 36)[0] == from_official_config(ring(), 36)[0]


def test_no_circle_is_dff_rate_one_and_needs_no_radius_or_alpha():
    circle, _ = from_official_config({"method": "no_circle", "move_to_origin": True}, 36)
    assert circle.dff_rate == 1.0
    # a given blend changes nothing: (1 - b)·G + b·G
    assert from_official_config({"method": "no_circle", "dff_rate": 0.3}, 36)[0].dff_rate == 1.0
    assert from_official_config(ring(method="no_circle", radius="auto"), 36)[0].dff_rate == 1.0
    expressed = to_official_config(circle)
    assert expressed["method"] == "circle" and expressed["dff_rate"] == 1.0


def test_every_key_at_once():
    circle, plan = from_official_config(FULL, 36)
    assert circle == CircleConfig(radius="auto-2.5", alpha=0.25, move_to_origin=True, dff_rate=0.25,
                                  move_to_positive=3.0)
    assert plan.pattern == OFFICIAL_LISTS["strategy_2"]
    assert to_official_config(circle, plan) == {**FULL, "move_to_positive": 3.0}


# ----------------------------------------------------------------- round trips ---

CIRCLES = [
    CircleConfig(),
    CircleConfig(radius=3, alpha=0, move_to_origin=False),
    CircleConfig(radius="auto", alpha=1),
    CircleConfig(radius="auto-2", dff_rate=True),
    CircleConfig(radius="auto-1e-3", move_to_positive="auto"),
    CircleConfig(radius="auto-+4.5", move_to_positive=-1.5, dff_rate=0.5),
    CircleConfig(move_to_positive=0),
    CircleConfig(move_to_positive="false"),
]
PLANS = [None, AgePlan("all", 36), AgePlan("lower", 36), AgePlan("strategy_3", 36), AgePlan("CM", 36)]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.pattern[:6] if p else "none")
@pytest.mark.parametrize("circle", CIRCLES, ids=str)
def test_round_trip_ours_to_official_and_back(circle, plan):
    official = to_official_config(circle, plan)
    back, back_plan = from_official_config(official, 36)
    assert to_official_config(back, back_plan) == official
    for got, want in zip(positions(back), positions(circle)):
        assert torch.equal(got, want)
    want_pattern = "C" * 36 if plan is None else plan.pattern
    assert (back_plan.pattern if back_plan else "C" * 36) == want_pattern


def test_auto_k_is_written_without_exponent_or_minus():
    official = to_official_config(CircleConfig(radius="auto-1e-3"))
    assert official["radius"] == "auto-0.001"
    assert len(official["radius"].split("-")) == 2  # what the official reader needs
    assert to_official_config(CircleConfig(radius="auto-1e20"))["radius"] == "auto-100000000000000000000"


@pytest.mark.parametrize("official", [SHIPPED, FULL, ring(), ring(move_to_positive="auto", dff_rate=1),
                                      ring(radius="auto", move_to_origin=False, AGE_mode="strategy_3")])
def test_round_trip_official_to_ours_and_back(official):
    circle, plan = from_official_config(official, 36)
    again = to_official_config(circle, plan)
    assert from_official_config(again, 36)[0] == circle
    canonical = {k: v for k, v in official.items()}
    canonical.setdefault("method", "circle")
    canonical.setdefault("move_to_origin", False)
    if "move_to_positive" in canonical and canonical["move_to_positive"] != "auto":
        canonical["move_to_positive"] = float(canonical["move_to_positive"])
    assert again == canonical


# ---------------------------------------------------------------------- errors ---

@pytest.mark.parametrize("official, key", [
    ({"circle_r": 10000, "base": 10000, "mrope_section": [16, 24, 24], "AGE_mode": "strategy_2"}, "circle_r"),
    (ring(base=10000), "base"),
    (ring(Radius=10), "Radius"),
    ({"alpha": 0.5}, "radius"),                     # absent: the official -1
    ({"radius": 10}, "alpha"),                      # absent: the official -1
    (ring(radius=-1), "radius"), (ring(radius=0), "radius"), (ring(radius=math.nan), "radius"),
    (ring(radius=math.inf), "radius"), (ring(radius=True), "radius"), (ring(radius="ten"), "radius"),
    (ring(radius="nan"), "radius"), (ring(radius="auto-"), "radius"), (ring(radius="auto-1e-3"), "radius"),
    (ring(radius="auto--1"), "radius"), (ring(radius="auto-0"), "radius"), (ring(radius="auto-inf"), "radius"),
    (ring(radius="2-auto"), "radius"), (ring(radius=[10]), "radius"), (ring(radius=None), "radius"),
    (ring(alpha=-1), "alpha"), (ring(alpha=1.5), "alpha"), (ring(alpha="0.5"), "alpha"),
    (ring(alpha=True), "alpha"), (ring(alpha=math.nan), "alpha"), (ring(alpha=None), "alpha"),
    (ring(method="hybrid"), "method"), (ring(method=None), "method"), (ring(method=1), "method"),
    (ring(move_to_origin="false"), "move_to_origin"), (ring(move_to_origin=2), "move_to_origin"),
    (ring(move_to_origin=[]), "move_to_origin"),
    (ring(dff_rate=1.5), "dff_rate"), (ring(dff_rate=-0.1), "dff_rate"), (ring(dff_rate="0.5"), "dff_rate"),
    (ring(dff_rate=math.nan), "dff_rate"), ({"method": "no_circle", "dff_rate": "x"}, "dff_rate"),
    (ring(move_to_positive="auto-1"), "move_to_positive"), (ring(move_to_positive="false"), "move_to_positive"),
    (ring(move_to_positive=""), "move_to_positive"), (ring(move_to_positive=math.nan), "move_to_positive"),
    (ring(move_to_positive="inf"), "move_to_positive"), (ring(move_to_positive=[1]), "move_to_positive"),
    (ring(AGE_mode="strategy_1"), "AGE_mode"), (ring(AGE_mode="alternate"), "AGE_mode"),
    (ring(AGE_mode=None), "AGE_mode"), (ring(AGE_mode=4), "AGE_mode"),
    ({"method": "no_circle", "radius": -1}, "radius"),  # checked even where it cannot matter
])
def test_errors_name_the_key(official, key):
    with pytest.raises(ValueError, match=re.escape(repr(key))):
        from_official_config(official, 36)


@pytest.mark.parametrize("layers", [28, 35, 37, 80])
def test_age_mode_needs_the_official_36_layers(layers):
    with pytest.raises(ValueError, match="AGE_mode.*36 layers"):
        from_official_config(SHIPPED, layers)


@pytest.mark.parametrize("layers, error", [(0, ValueError), (-1, ValueError), (True, TypeError), (36.0, TypeError),
                                           ("36", TypeError), (None, TypeError)])
def test_num_layers_must_be_a_positive_integer(layers, error):
    with pytest.raises(error, match="num_layers must be an integer"):
        from_official_config(ring(), layers)


@pytest.mark.parametrize("official", [None, [], "radius=10"])
def test_the_dict_must_be_a_dict(official):
    with pytest.raises(TypeError, match="circle_rope must be a dict"):
        from_official_config(official, 36)


@pytest.mark.parametrize("plan", [AgePlan("CM", 28), AgePlan("lower", 28), AgePlan("CMM", 36), AgePlan("M", 36),
                                  AgePlan("CV", 36), AgePlan("MC", 36)], ids=lambda p: p.pattern[:8])
def test_plans_the_official_format_cannot_name(plan):
    with pytest.raises(ValueError, match="no official AGE_mode"):
        to_official_config(CircleConfig(), plan)


@pytest.mark.parametrize("circle, plan, match", [
    ({"radius": 10}, None, "CircleConfig"),
    (None, None, "CircleConfig"),
    (CircleConfig(), "alternate", "AgePlan"),
])
def test_to_official_checks_its_arguments(circle, plan, match):
    with pytest.raises(TypeError, match=match):
        to_official_config(circle, plan)
