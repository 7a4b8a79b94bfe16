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
    with pytest.raises(ValueError, match="differs from the 3 layers"):
        circlerope.RotaryEmbedding(circlerope.AgePlan("all", 3), 4)
    assert len(circlerope.RotaryEmbedding("alternate", 6).plan) == 6
    assert circlerope.RotaryEmbedding(circlerope.AgePlan("CM", 4), 4).plan.pattern == "CMCM"
