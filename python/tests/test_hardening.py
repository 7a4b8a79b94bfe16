"""Regression tests of issue 9 (hardening), one per item where the item reaches Python. Each
failed before its fix; the ones that crashed the interpreter run in a child process, so that a
crash fails the test instead of the whole suite."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import circlerope

START, IMAGE, VIDEO, END = 151652, 151655, 151656, 151653
IDS = torch.tensor([[5, START] + [IMAGE] * 4 + [END, 6]])
GRID = torch.tensor([[1, 4, 4]])


def run_child(code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with this one's import path (and sanitizer preload)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


# ---------------------------------------------------------------- item 1 ---

def test_ptd_reads_its_vision_config_before_releasing_the_gil():
    # The bindings released the GIL and then read the VisionConfig tuple: SIGSEGV.
    child = run_child("""
        import torch, circlerope
        ids = torch.tensor([[5, 6, 7]])
        try:
            circlerope.ptd(ids, [[1, 4, 4]], vision=circlerope.VisionConfig(vision_start_token_id=-1), scheme="mrope")
        except ValueError as e:
            print("ValueError:", e)
        m = circlerope.ptd(torch.tensor([[5, 151652] + [151655] * 4 + [6]]), [[1, 4, 4]],
                           vision=circlerope.VisionConfig(), scheme="mrope")
        print("ptd", m.ptd)
    """)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "image_grid_thw has 1 entry but input_ids hold 0 image blocks" in child.stdout
    assert "ptd " in child.stdout


# ---------------------------------------------------------------- item 5 ---

def test_sections_whose_sum_wraps_in_int_are_refused():
    # 2147483647 + 2147483647 + 66 wrapped to 64 in int: accepted for rotary dim 128.
    with pytest.raises(ValueError, match=r"sections \[2147483647, 2147483647, 66\] must be >= 0 and sum"):
        circlerope.RotaryConfig(sections=(2 ** 31 - 1, 2 ** 31 - 1, 66), rotary_dim=128)
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    with pytest.raises(ValueError, match=r"\[2147483647, 2147483647, 66\]"):
        torch.ops.circlerope.rotary_table(positions, 128, [2 ** 31 - 1, 2 ** 31 - 1, 66], 1e6, "chunked")
    with pytest.raises(ValueError, match="each in"):
        circlerope.RotaryConfig(sections=(2 ** 31, 0, 64), rotary_dim=128)


# ---------------------------------------------------------------- item 7 ---

@pytest.mark.parametrize("radius", ["auto-2_0", "auto- 2", "auto-0x1p1", "auto-inf", "auto-", "10", "0x10"])
def test_radius_text_follows_the_one_grammar_of_every_front_end(radius):
    # float() read "auto-2_0" as scale 20 and "auto- 2" as 2; the core's grammar refuses both.
    with pytest.raises(ValueError, match="CircleConfig.radius must be a finite number > 0"):
        circlerope.CircleConfig(radius=radius)


def test_numbers_of_every_python_kind_are_read_as_numbers():
    import numpy as np
    a = circlerope.CircleConfig(radius=5, alpha=0.25, dff_rate=True, move_to_positive=0)
    b = circlerope.CircleConfig(radius=np.float32(5), alpha=torch.tensor(0.25, dtype=torch.float64),
                                dff_rate=1.0, move_to_positive=False)
    assert a._args() == b._args() == ("5", 0.25, True, 1.0, "false")
    assert circlerope.CircleConfig(radius="auto-2.5", move_to_positive="auto")._args()[::4] == ("auto-2.5", "auto")


@pytest.mark.skipif(not os.environ.get("CIRCLEROPE_CLI"), reason="needs the circlerope command (ctest sets it)")
@pytest.mark.parametrize("options", [
    {"radius": "auto-2.5"}, {"radius": 3}, {"radius": "auto"}, {"radius": "auto-2_0"}, {"radius": "auto- 2"},
    {"radius": 10, "alpha": 1}, {"radius": 10, "alpha": 1.5}, {"radius": 10, "move_to_positive": "auto"},
    {"radius": 10, "move_to_positive": 0}, {"radius": 10, "move_to_positive": -2.5},
    {"radius": 10, "move_to_positive": "yes"}, {"radius": 10, "dff_rate": True}, {"radius": 10, "dff_rate": 0.3},
    {"radius": 10, "move_to_origin": 1}, {"radius": 10, "move_to_origin": "yes"}, {"radius": -1},
], ids=lambda o: json.dumps(o))
def test_python_and_the_json_request_accept_and_refuse_the_same_circle_values(options, tmp_path):
    request = {"scheme": "circle", "circle": options, "input_ids": IDS.tolist(), "image_grid_thw": GRID.tolist()}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    cli = subprocess.run([os.environ["CIRCLEROPE_CLI"], "positions", "--request", str(path)],
                         capture_output=True, text=True)
    # A request's absent keys mean the reference's defaults (no move_to_origin).
    kwargs = {"move_to_origin": False, **options}
    try:
        pos, _ = circlerope.get_rope_index(IDS, GRID, circle=circlerope.CircleConfig(**kwargs))
    except ValueError as e:
        assert cli.returncode == 2, f"Python refused ({e}) but the CLI accepted"
        key = cli.stderr.split("request.circle.")[1].split(" ")[0]
        assert f"CircleConfig.{key}" in str(e), (cli.stderr, str(e))
        return
    assert cli.returncode == 0, f"the CLI refused ({cli.stderr.strip()}) but Python accepted"
    assert torch.equal(pos, torch.tensor(json.loads(cli.stdout)["position_ids"], dtype=torch.float32))


# ---------------------------------------------------------------- item 8 ---

@pytest.mark.parametrize("delta", [float("nan"), float("inf"), -float("inf")])
def test_decode_positions_refuse_non_finite_deltas(delta):
    # NaN / inf deltas came back as NaN / inf positions.
    with pytest.raises(ValueError, match=r"rope_deltas\[1\] = (nan|inf|-inf) is not finite"):
        circlerope.decode_position_ids(torch.tensor([[0.5], [delta]]), 10, 2)


# ---------------------------------------------------------------- item 10 ---

def test_age_plans_need_their_layer_count():
    # AgePlan(spec) and RotaryEmbedding("all") built a one-layer plan silently.
    with pytest.raises(ValueError, match=r"AgePlan\('alternate'\) needs the layer count"):
        circlerope.AgePlan("alternate")
    for make in (lambda: circlerope.RotaryEmbedding("all"), lambda: circlerope.RotaryEmbedding(plan="alternate")):
        with pytest.raises(ValueError, match="needs the layer count"):
            make()
    with pytest.raises(ValueError, match="RotaryEmbedding needs a plan"):
        circlerope.RotaryEmbedding()
    with pytest.raises(ValueError, match="differs from the 3 layers"):
        circlerope.RotaryEmbedding(circlerope.AgePlan("all", 3), 4)
    assert len(circlerope.RotaryEmbedding("alternate", 6).plan) == 6
    assert circlerope.RotaryEmbedding(circlerope.AgePlan("CM", 4), 4).plan.pattern == "CMCM"


# ---------------------------------------------------------------- item 11 ---

def test_decode_counts_beyond_the_token_limit_are_refused_by_size():
    # decode_position_ids(torch.zeros(1), 0, 2**31 - 1) passed (first + count <= 2^31) and asked
    # for 24 GiB; angles.decode(10, 10**9) likewise.
    with pytest.raises(ValueError, match="decode positions: count 2147483647 is more than 16777216 tokens"):
        circlerope.decode_position_ids(torch.zeros(1), 0, 2 ** 31 - 1)
    angles = circlerope.RotaryEmbedding("CM", 2, rotary=circlerope.RotaryConfig(sections=(2, 3, 3)))(IDS, GRID)
    with pytest.raises(ValueError, match="count 1000000000 is more than 16777216 tokens"):
        angles.decode(10, 10 ** 9)
    assert angles.decode(10, 2).table(1).shape == (1, 2, 16)


# ---------------------------------------------------------------- item 13 ---

def _meta(t):
    return t.to("meta")


def test_meta_tensors_raise_value_error():
    # .cpu() of a meta tensor raised NotImplementedError.
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    for call in (lambda: circlerope.get_rope_index(_meta(IDS), GRID),
                 lambda: circlerope.get_rope_index(IDS, _meta(GRID)),
                 lambda: circlerope.get_rope_index(IDS, GRID, attention_mask=_meta(torch.ones_like(IDS))),
                 lambda: circlerope.rotary_table(_meta(positions)),
                 lambda: circlerope.decode_position_ids(_meta(torch.zeros(1, 1)), 3),
                 lambda: circlerope.ptd(_meta(IDS), GRID),
                 lambda: circlerope.apply_multimodal_rotary(torch.randn(1, 2, 8, 128), torch.randn(1, 2, 8, 128),
                                                            _meta(positions))):
        with pytest.raises(ValueError, match="meta"):
            call()


def test_missing_inputs_raise_value_error():
    # get_rope_index(None) raised AttributeError, sections=None TypeError.
    with pytest.raises(ValueError, match="input_ids is required"):
        circlerope.get_rope_index(None)
    positions = circlerope.get_rope_index(IDS, GRID)[0]
    q, k = torch.randn(1, 2, 8, 128), torch.randn(1, 2, 8, 128)
    with pytest.raises(ValueError, match="sections must be three integers"):
        circlerope.apply_multimodal_rotary(q, k, positions, sections=None)
    with pytest.raises(ValueError, match="position_ids is required"):
        circlerope.rotary_table(None)


GARBAGE = [None, "x", "", 3.5, -1, 2 ** 70, True, [], [[]], [["a"]], {}, {"a": 1}, object(), float("nan"),
           torch.tensor([]), torch.zeros(2, 2, 2, 2, 2), torch.zeros(3, dtype=torch.complex64),
           torch.zeros(1, 3).to("meta"), torch.zeros(1, 3, dtype=torch.bool), [1.5, 2.5], ("a", "b", "c"),
           "x" * 100000]


def _calls():
    """(name, function, positional args, keyword args) of every public entry point, valid as given."""
    positions, deltas = circlerope.get_rope_index(IDS, GRID)
    table = circlerope.rotary_table(positions)
    q, k = torch.randn(1, 2, IDS.shape[1], 128), torch.randn(1, 1, IDS.shape[1], 128)
    rope = circlerope.RotaryEmbedding("CM", 2)
    angles = rope(IDS, GRID)
    return [
        ("get_rope_index", circlerope.get_rope_index, [IDS, GRID, None, None, None],
         {"scheme": "circle", "circle": None, "vision": None}),
        ("decode_position_ids", circlerope.decode_position_ids, [deltas, 9, 2], {}),
        ("layout_positions", circlerope.layout_positions, ["text:2,image:2x2"], {"scheme": "mrope"}),
        ("rotary_table", circlerope.rotary_table, [positions],
         {"sections": (16, 24, 24), "theta": 1e6, "layout": "chunked", "rotary_dim": 128}),
        ("apply_rotary", circlerope.apply_rotary, [q, k, table], {"pairing": "neox", "qk_layout": "bhsd"}),
        ("apply_multimodal_rotary", circlerope.apply_multimodal_rotary, [q, k, positions],
         {"sections": (16, 24, 24), "theta": 1e6, "layout": "chunked", "pairing": "neox", "qk_layout": "bhsd",
          "rotary_dim": 128}),
        ("cos_sin", circlerope.cos_sin, [table, "neox"], {}),
        ("CircleConfig", circlerope.CircleConfig, [],
         {"radius": 10, "alpha": 0.5, "move_to_origin": True, "dff_rate": 0.0, "move_to_positive": None}),
        ("VisionConfig", circlerope.VisionConfig, [],
         {"spatial_merge_size": 2, "tokens_per_second": 2.0, "vision_start_token_id": START,
          "image_token_id": IMAGE, "video_token_id": VIDEO, "time": "seconds"}),
        ("RotaryConfig", circlerope.RotaryConfig, [],
         {"sections": (16, 24, 24), "theta": 1e6, "layout": "chunked", "rotary_dim": 128, "pairing": "neox"}),
        ("AgePlan", circlerope.AgePlan, ["alternate", 4], {}),
        ("RotaryEmbedding", circlerope.RotaryEmbedding, ["alternate", 4],
         {"rotary": None, "circle": None, "vision": None}),
        ("RotaryEmbedding.forward", rope, [IDS, GRID, None, None, None], {}),
        ("RotaryAngles.apply", angles.apply, [1, q, k], {"qk_layout": "bhsd"}),
        ("RotaryAngles.decode", angles.decode, [9, 2], {}),
        ("RotaryAngles.table", angles.table, [0], {}),
        ("RotaryAngles.cos_sin", angles.cos_sin, [1], {}),
        ("ptd", circlerope.ptd, [IDS, GRID, None, None, None],
         {"layout": None, "scheme": "circle", "circle": None, "vision": None, "rotary": None}),
        ("ptd layout", circlerope.ptd, [], {"layout": "text:3,image:2x2", "scheme": "vanilla"}),
    ]


def test_every_invalid_argument_raises_value_error():
    """Each argument of each entry point replaced by each garbage value: the call succeeds or
    raises ValueError (never TypeError, AttributeError, RuntimeError, NotImplementedError...)."""
    wrong = []
    for name, function, args, kwargs in _calls():
        function(*args, **kwargs)  # the base call is valid
        slots = [("arg", i) for i in range(len(args))] + [("kw", key) for key in kwargs]
        for kind, slot in slots:
            for value in GARBAGE:
                a, kw = list(args), dict(kwargs)
                if kind == "arg":
                    a[slot] = value
                else:
                    kw[slot] = value
                try:
                    function(*a, **kw)
                except ValueError as e:
                    if len(str(e)) > 1000:
                        wrong.append(f"{name} {slot}={type(value).__name__}: a {len(str(e))}-character message")
                except Exception as e:  # noqa: BLE001 - the point of the test
                    wrong.append(f"{name} {slot}={repr(value)[:40]}: {type(e).__name__}: {str(e)[:120]}")
    assert not wrong, "\n".join(wrong[:60]) + f"\n({len(wrong)} in all)"
