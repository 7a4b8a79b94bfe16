"""get_rope_index against the reference cases and the circlerope command, decoding, AGE
plans and the coupling metrics, through the Python package."""
import json
import math
import os
import random
import subprocess

import numpy as np
import pytest
import torch

import circlerope
from conftest import golden_cases, request_arguments

START, END, IMAGE, VIDEO = 151652, 151653, 151655, 151656


@pytest.mark.parametrize("case", golden_cases(), ids=lambda c: c["name"])
def test_golden_positions_through_get_rope_index(case):
    args, kwargs = request_arguments(case["request"])
    position_ids, rope_deltas = circlerope.get_rope_index(*args, **kwargs)
    expected = torch.tensor(case["expected"]["position_ids"], dtype=torch.float64)
    expected_deltas = torch.tensor(case["expected"]["rope_deltas"], dtype=torch.float64)
    assert position_ids.dtype == torch.float32 and position_ids.shape == expected.shape
    assert rope_deltas.dtype == torch.float32 and rope_deltas.shape == (expected.shape[1], 1)
    # docs/spec.md: 1e-4 absolute or relative, whichever is larger (the reference computes in float32).
    for got, want in ((position_ids.double(), expected), (rope_deltas[:, 0].double(), expected_deltas)):
        bound = 1e-4 * torch.clamp(want.abs(), min=1.0)
        assert torch.all((got - want).abs() <= bound), (got - want).abs().max()


def random_request(r: random.Random):
    """A random batch: rows of text, images and videos, padding on either side, and random
    Circle-RoPE options (every option the request format has)."""
    rows, grids_i, grids_v, seconds, ids, masks = r.randint(1, 3), [], [], [], [], []
    for _ in range(rows):
        row = [r.randint(1, 1000) for _ in range(r.randint(0, 4))]
        for _ in range(r.randint(0, 3)):
            if r.random() < 0.7:
                hm, wm = r.randint(1, 5), r.randint(1, 5)
                grids_i.append([1, 2 * hm, 2 * wm])
                row += [START] + [IMAGE] * (hm * wm) + [END]
            else:
                t, hm, wm = r.randint(1, 3), r.randint(1, 3), r.randint(1, 3)
                grids_v.append([t, 2 * hm, 2 * wm])
                seconds.append(r.choice([0.5, 1.0, 2.3]))
                row += [START] + [VIDEO] * (t * hm * wm) + [END]
            row += [r.randint(1, 1000) for _ in range(r.randint(0, 3))]
        ids.append(row)
    width = max(len(x) for x in ids) + r.randint(0, 2)
    for i, row in enumerate(ids):
        pad = width - len(row)
        left = r.random() < 0.5
        ids[i] = [0] * pad + row if left else row + [0] * pad
        masks.append([0] * pad + [1] * len(row) if left else [1] * len(row) + [0] * pad)
    circle = {"radius": r.choice([10, 3.5, "auto", "auto-2.5"]), "alpha": r.choice([0.0, 0.5, 1.0, 0.3]),
              "move_to_origin": r.random() < 0.7, "method": "circle"}
    if r.random() < 0.4:
        circle["dff_rate"] = r.choice([0.25, 1.0])
    if r.random() < 0.4:
        circle["move_to_positive"] = r.choice(["auto", 3])
    return {"scheme": r.choice(["circle", "circle", "mrope", "vanilla", "unordered"]), "circle": circle,
            "vision": {"spatial_merge_size": 2, "tokens_per_second": 2, "vision_start_token_id": START,
                       "image_token_id": IMAGE, "video_token_id": VIDEO},
            "input_ids": ids, "attention_mask": masks, "image_grid_thw": grids_i,
            "video_grid_thw": grids_v, "second_per_grid_ts": seconds or None}


@pytest.mark.skipif(not os.environ.get("CIRCLEROPE_CLI"), reason="needs the circlerope command (ctest sets it)")
def test_python_and_the_cli_read_random_requests_into_the_same_core_call(tmp_path):
    """Both sides end in the same core rope_index, so equal outputs do not check the positions
    themselves (the golden cases and the C++ suites do): they check that the two front ends,
    the Python arguments and `circlerope positions --request`'s JSON reader, read the same
    inputs and options into that call, bit for bit."""
    r = random.Random(7)
    for i in range(40):
        request = random_request(r)
        path = tmp_path / f"request{i}.json"
        path.write_text(json.dumps(request))
        out = subprocess.run([os.environ["CIRCLEROPE_CLI"], "positions", "--request", str(path)],
                             capture_output=True, text=True, check=True)
        want = json.loads(out.stdout)
        args, kwargs = request_arguments(request)
        position_ids, rope_deltas = circlerope.get_rope_index(*args, **kwargs)
        assert torch.equal(position_ids, torch.tensor(want["position_ids"], dtype=torch.float32)), request
        assert torch.equal(rope_deltas[:, 0], torch.tensor(want["rope_deltas"], dtype=torch.float32)), request


def test_mrope_is_qwens_rule_on_a_hand_checked_row():
    # 2 text, start, 2x3 image (grid 1x4x6), end, 1 text: M-RoPE (t, h, w) = anchor + (0, r, q).
    ids = torch.tensor([[5, 6, START] + [IMAGE] * 6 + [END, 7]])
    pos, deltas = circlerope.get_rope_index(ids, torch.tensor([[1, 4, 6]]), scheme="mrope")
    t = [0, 1, 2] + [3] * 6 + [6, 7]
    h = [0, 1, 2] + [3, 3, 3, 4, 4, 4] + [6, 7]
    w = [0, 1, 2] + [3, 4, 5, 3, 4, 5] + [6, 7]
    assert pos[:, 0].tolist() == [t, h, w]
    assert deltas.tolist() == [[8 - 11]]


def test_inputs_as_lists_int32_and_bool_masks_give_the_same_positions():
    ids = [[5, START] + [IMAGE] * 4 + [END, 6, 0]]
    mask = [[1, 1, 1, 1, 1, 1, 1, 1, 0]]
    want = circlerope.get_rope_index(torch.tensor(ids), torch.tensor([[1, 4, 4]]),
                                     attention_mask=torch.tensor(mask))
    got = circlerope.get_rope_index(torch.tensor(ids, dtype=torch.int32), [[1, 4, 4]],
                                    attention_mask=torch.tensor(mask, dtype=torch.bool))
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    assert got[0][:, 0, -1].tolist() == [1.0, 1.0, 1.0]  # masked tokens get 1, as in Qwen


@pytest.mark.parametrize("convert", [lambda g: g.to(torch.int32), lambda g: g.to(torch.int16),
                                     lambda g: torch.stack([g, g], -1)[..., 0]],
                         ids=["int32", "int16", "non-contiguous"])
def test_grids_of_any_integer_dtype_and_layout_give_the_same_positions(convert):
    # Regression: a converted grid was read after its temporary copy had been freed.
    ids = torch.tensor([[5, START] + [IMAGE] * 6 + [END, START] + [VIDEO] * 8 + [END]])
    images, videos = torch.tensor([[1, 4, 6]]), torch.tensor([[2, 4, 4]])
    want = circlerope.get_rope_index(ids, images, videos)
    for _ in range(20):  # freed memory would not keep the values from call to call
        got = circlerope.get_rope_index(ids, convert(images), convert(videos))
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])


def test_non_contiguous_input_ids_are_read_correctly():
    ids = torch.tensor([[5, START] + [IMAGE] * 4 + [END, 6]] * 2).t().contiguous().t()  # column-major
    assert not ids.is_contiguous()
    want = circlerope.get_rope_index(ids.contiguous(), [[1, 4, 4]] * 2)
    got = circlerope.get_rope_index(ids, [[1, 4, 4]] * 2)
    assert torch.equal(want[0], got[0])


def test_decode_positions_continue_the_prompt_like_appended_text():
    prompt = [5, 6, START] + [IMAGE] * 6 + [END, 7]
    grid = torch.tensor([[1, 4, 6]])
    pos, deltas = circlerope.get_rope_index(torch.tensor([prompt]), grid)
    longer, _ = circlerope.get_rope_index(torch.tensor([prompt + [8, 9, 10]]), grid)
    step = circlerope.decode_position_ids(deltas, cache_position=len(prompt), count=3)
    assert step.shape == (3, 1, 3) and step.dtype == torch.float32
    assert torch.equal(step, longer[:, :, len(prompt):])


def test_rope_deltas_are_fractional_under_circle_and_minus_seq_len_for_masked_rows():
    ids = torch.tensor([[5, START] + [IMAGE] * 6 + [END], [0] * 9])
    mask = torch.tensor([[1] * 9, [0] * 9])
    _, deltas = circlerope.get_rope_index(ids, [[1, 4, 6]], attention_mask=mask)
    assert deltas[0, 0] != round(float(deltas[0, 0]))
    assert deltas[1, 0] == -9.0


def test_layout_positions_and_the_papers_table_1_toy():
    pos, deltas = circlerope.layout_positions("text:3,image:2x3,text:2")
    assert pos.shape == (3, 1, 11) and deltas.shape == (1, 1)
    assert pos[:, 0, 2].tolist() == [2.0, 2.0, 2.0]
    toy = {s: circlerope.ptd(layout="text:5,image:3x3", scheme=s).ptd for s in ("vanilla", "unordered", "mrope", "circle")}
    assert toy["vanilla"] == pytest.approx(20 / 9)
    assert toy["unordered"] == 0.0
    assert toy["circle"] < 1e-5
    assert 0.48 <= toy["mrope"] <= 0.59


def test_ptd_of_a_batch_reports_blocks_and_rows():
    ids = torch.tensor([[5, 6, START] + [IMAGE] * 9 + [END, 7, 8]])
    m = circlerope.ptd(ids, [[1, 6, 6]], scheme="circle")
    assert len(m.blocks) == 1 and len(m.rows) == 1
    assert m.blocks[0]["vision_tokens"] == 9 and m.blocks[0]["text_tokens"] == 6
    assert m.ptd < 1e-5 and m.rope_kernel_deviation > 0.01  # equidistant, not RoPE-identical
    v = circlerope.ptd(ids, [[1, 6, 6]], scheme="vanilla")
    assert v.ptd > 1.0
    none = circlerope.ptd(torch.tensor([[5, 6, 7]]))
    assert math.isnan(none.ptd) and none.blocks == []


def test_age_plans_use_the_references_numbering():
    assert circlerope.AgePlan("alternate", 6).pattern == "CMCMCM"
    assert circlerope.AgePlan("strategy_2", 6).pattern == "CCCMMM"
    assert circlerope.AgePlan("upper", 5).pattern == "MMCCC"
    assert circlerope.AgePlan("all", 3).schemes == ["circle"]
    plan = circlerope.AgePlan("CMV", 7)
    assert plan.pattern == "CMVCMVC" and len(plan) == 7
    assert [plan.layer_scheme(l) for l in range(3)] == ["circle", "mrope", "vanilla"]


def test_age_plans_are_equal_when_their_layers_are():
    assert circlerope.AgePlan("alternate", 4) == circlerope.AgePlan("CMCM", 4)
    assert hash(circlerope.AgePlan("alternate", 4)) == hash(circlerope.AgePlan("CM", 4))
    assert circlerope.AgePlan("alternate", 4) != circlerope.AgePlan("alternate", 6)
    assert circlerope.AgePlan("CM", 4) != circlerope.AgePlan("MC", 4)
    assert circlerope.AgePlan("all", 2) != "all"


def test_rotary_embedding_builds_one_table_per_geometry_and_decodes_per_geometry():
    ids = torch.tensor([[5, 6, START] + [IMAGE] * 6 + [END, 7]])
    grid = torch.tensor([[1, 4, 6]])
    rope = circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", 4),
                                      rotary=circlerope.RotaryConfig(sections=(2, 3, 3)))
    angles = rope(ids, grid)
    assert set(angles.tables) == {"circle", "mrope"}
    circle_pos, circle_deltas = circlerope.get_rope_index(ids, grid, scheme="circle")
    mrope_pos, mrope_deltas = circlerope.get_rope_index(ids, grid, scheme="mrope")
    assert torch.equal(angles.table(0), circlerope.rotary_table(circle_pos, sections=(2, 3, 3)))
    assert torch.equal(angles.table(3), circlerope.rotary_table(mrope_pos, sections=(2, 3, 3)))
    assert angles.table(0) is angles.table(2)
    step = angles.decode(cache_position=ids.shape[1], count=2)
    assert torch.equal(step.position_ids["mrope"], circlerope.decode_position_ids(mrope_deltas, ids.shape[1], 2))
    assert torch.equal(step.position_ids["circle"], circlerope.decode_position_ids(circle_deltas, ids.shape[1], 2))
    assert step.table(1).shape == (1, 2, 16)


def test_vision_config_reads_a_hugging_face_config():
    from types import SimpleNamespace
    qwen25 = SimpleNamespace(vision_start_token_id=1, image_token_id=2, video_token_id=3,
                             vision_config=SimpleNamespace(spatial_merge_size=2, tokens_per_second=4))
    v = circlerope.VisionConfig.from_hf_config(qwen25)
    assert (v.vision_start_token_id, v.image_token_id, v.video_token_id) == (1, 2, 3)
    assert v.tokens_per_second == 4 and v.time == "seconds"
    qwen2 = SimpleNamespace(vision_start_token_id=1, image_token_id=2, video_token_id=3,
                            vision_config=SimpleNamespace(spatial_merge_size=2))
    assert circlerope.VisionConfig.from_hf_config(qwen2).time == "index"  # Qwen2-VL: frame index
