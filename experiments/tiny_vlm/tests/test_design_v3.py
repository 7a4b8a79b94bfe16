"""The v3 design's pieces: the training gap drawn per batch (and the stream id that names it),
patch positions (the same in every arm that has them, off in the earlier presets), the arms that
separate a ring's spread from its equidistance (a small ring of PTD 0 as spread as M-RoPE; M-RoPE
scaled to the ring's spread, from the library's positions), and the preset's declared set."""

import dataclasses
import hashlib
import json
import random

import pytest
import torch

import circlerope
from tiny_vlm import arms, data, geometry
from tiny_vlm.model import ModelConfig, TinyVLM, collate
from tiny_vlm.plan import PRESETS, resolve
from tiny_vlm.stream import stream_id

TRAIN_CELLS = ((4, 4), (4, 6), (6, 6))   # the presets' training grids, in cells
LAYOUT = data.Layout("train", TRAIN_CELLS, filler=(0, 16), questions=4, gap_range=(0, 12))


def gap_of(e: data.Example) -> int:
    """Filler tokens between the image's VE and the first question."""
    return e.prefix - (e.image_start + 2 + e.grid[0] * e.grid[1])


# ------------------------------------------------------------------ gaps ---
def test_the_gap_is_drawn_per_batch():
    seen = set()
    for step in range(600):
        batch = data.make_examples(3, "train", step, range(3), LAYOUT, one_shape=True)
        gaps = {gap_of(e) for e in batch}
        fillers = {len(e.feats) - 1 - 2 - e.grid[0] * e.grid[1] - 2 * len(e.questions) for e in batch}
        assert len(gaps) == 1 and len(fillers) == 1        # one gap and one filler length a batch
        (g,), (f,) = gaps, fillers
        assert 0 <= g <= min(12, f)
        seen.add(g)
        # the shards of a batch (DDP ranks) draw the same gap
        assert {gap_of(e) for e in data.make_examples(3, "train", step, range(3, 5), LAYOUT, one_shape=True)} == {g}
    assert seen == set(range(13))
    # fresh (evaluation) sequences of such a layout draw the gap per sequence
    per_example = {gap_of(e) for e in data.make_examples(3, "eval", 0, range(40), LAYOUT)}
    assert len(per_example) > 5


def test_a_layout_without_a_gap_range_keeps_its_batches():
    """(0, 0) draws nothing more: the earlier presets' batches are those they always had (the
    batch's grid and filler from the step's generator, then each example from its own)."""
    layout = dataclasses.replace(LAYOUT, gap_range=(0, 0))
    assert "gaps=" not in layout.key()
    for step in range(5):
        rng = random.Random(f"3/train/{step}/grid")
        grid, filler = rng.choice(layout.grids), rng.randint(*layout.filler)
        fixed = dataclasses.replace(layout, grids=(grid,), filler=(filler, filler))
        before = [data.make_example(data.example_rng(3, "train", step, i), fixed) for i in range(4)]
        now = data.make_examples(3, "train", step, range(4), layout, one_shape=True)
        assert [e.feats for e in now] == [e.feats for e in before]
        assert all(gap_of(e) == 0 for e in now)


def test_the_stream_id_changes_with_the_gap_range():
    plain = resolve(["micro", "--no-plots"]).configs[0]
    # the earlier presets' ids, by the formula they were made with
    what = {"seed": plain.seed, "layout": plain.train.key(), "gap": 0, "batch": plain.batch, "curriculum": 0,
            "steps": plain.steps}
    assert stream_id(plain) == f"seed{plain.seed}-" + hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]
    ids = {stream_id(resolve(["micro", "--no-plots", "--train-gaps", g]).configs[0]) for g in ("0,0", "0,2", "0,4", "0,3")}
    assert len(ids) == 4 and stream_id(plain) in ids
    v3 = resolve(["v3", "--no-plots"]).configs[0]
    assert v3.train.gap_range == (0, 12) and "gaps=0-12" in v3.train.key()


def test_the_v3_splits():
    cfg = resolve(["v3", "--no-plots"]).configs[0]
    assert list(cfg.evals) == ["train", "gap-0", "gap-4", "gap-8", "gap-12", "unseen-gap-0", "unseen-gap-20",
                               "grid-6x5", "grid-4x8", "grid-8x4", "grid-8x8"]
    for name, layout in cfg.evals.items():
        examples = data.make_examples(cfg.eval_seed, layout.key(), 0, range(30), layout)
        gaps = {gap_of(e) for e in examples}
        if name.startswith(("gap-", "unseen-gap-")):
            assert gaps == {int(name.rsplit("-", 1)[1])} and layout.gap_range == (0, 0)
            lo, hi = (12, 16) if name.startswith("gap-") else (20, 24)
            assert all(lo <= len(e.feats) - 3 - e.grid[0] * e.grid[1] - 24 <= hi for e in examples)
        else:   # the training layout's gaps, drawn per sequence
            assert layout.gap_range == (0, 12) and max(gaps) <= 12 and len(gaps) > 3
    # the same sequences at each gap of a family (moved filler tokens, same length)
    a, b = (data.make_examples(cfg.eval_seed, cfg.evals[n].key(), 0, range(5), cfg.evals[n])
            for n in ("unseen-gap-0", "unseen-gap-20"))
    assert [sorted(e.feats) for e in a] == [sorted(e.feats) for e in b]


# ------------------------------------------------------- patch positions ---
def test_patch_positions_are_off_in_the_earlier_presets():
    for preset in ("quick", "full", "micro"):
        assert not any(c.arm.patch_positions or c.arm.scale != 1 for c in resolve([preset, "--no-plots"]).configs)
    assert {a for a, arm in arms.NAMED.items() if arm.patch_positions} == {"mrope-patchpos", "circle-patchpos"}
    model = TinyVLM(ModelConfig(), arms.NAMED["circle"])
    assert model.patch_table is None


def test_patch_positions_are_the_same_in_every_arm():
    layout = data.Layout("t", TRAIN_CELLS + ((8, 8),), questions=4)
    b = collate(data.make_examples(0, "t", 0, range(6), layout), 2)
    models = {}
    for name in ("mrope-patchpos", "circle-patchpos", "plan=V:patch=on", "plan=CM:s=2:patch=on", "mrope", "circle"):
        torch.manual_seed(5)
        models[name] = TinyVLM(ModelConfig(), arms.parse_arm(name))
    with_pp = [m for m in models.values() if m.arm.patch_positions]
    feats = [m.patch_features(b.patch_rc) for m in with_pp]
    assert all(torch.equal(f, feats[0]) for f in feats)
    # no parameters: the same initial weights as the arms without them
    state = models["mrope"].state_dict()
    for m in models.values():
        assert m.state_dict().keys() == state.keys()
        assert all(torch.equal(v, state[k]) for k, v in m.state_dict().items())
    # the feature of each patch is the table at its (row, column); 0 elsewhere
    table = with_pp[0].patch_table
    for i, e in enumerate(b.examples):
        h, w = e.grid
        for p in range(b.feats.shape[1]):
            j = p - e.image_start - 1
            if 0 <= j < h * w:
                assert torch.equal(feats[0][i, p], table[j // w, j % w])
            else:
                assert not feats[0][i, p].any()
    # rows and columns are told apart, and the table is a function of them only
    assert len({tuple(table[r, c].tolist()) for r in range(16) for c in range(16)}) == 256
    # it reaches the model
    assert (models["mrope-patchpos"].hidden(b) - models["mrope"].hidden(b)).abs().max() > 1e-3


# ------------------------------------------------- spread and equidistance ---
def test_the_small_ring_is_ptd_0_with_mrope_extent():
    m = geometry.matched_extent(TRAIN_CELLS)
    assert m["mrope"] == pytest.approx(13 / 3)                 # (3 + 5 + 5) / 3
    assert round(m["radius"], 3) == arms.SMALL_RADIUS == arms.NAMED["circle-small"].radius
    assert round(m["scale"], 3) == arms.SPREAD_SCALE == arms.NAMED["mrope-spread"].scale
    small = [geometry.layout_extent(h, w, "circle", arms.SMALL_RADIUS) for h, w in TRAIN_CELLS]
    assert sum(small) / 3 == pytest.approx(13 / 3, abs=1e-3)
    for h, w in TRAIN_CELLS + ((8, 8),):
        ring = circlerope.ptd(layout=f"text:5,image:{h}x{w},text:3", scheme="circle",
                              circle=circlerope.CircleConfig(radius=arms.SMALL_RADIUS))
        assert abs(ring.ptd) < 1e-5
    spread = [geometry.layout_extent(h, w, "mrope", scale=arms.SPREAD_SCALE) for h, w in TRAIN_CELLS]
    assert sum(spread) / 3 == pytest.approx(m["circle"], abs=1e-2)


def test_the_spread_arm_scales_the_librarys_mrope_positions():
    layout = data.Layout("t", TRAIN_CELLS, filler=(0, 6), questions=2)
    b = collate(data.make_examples(1, "t", 0, range(5), layout), 2)
    vision = circlerope.VisionConfig(spatial_merge_size=2, vision_start_token_id=data.VS, image_token_id=data.IMG,
                                     video_token_id=data.VID)
    pos, deltas = circlerope.get_rope_index(b.short_ids, b.grid_thw, attention_mask=b.short_mask, scheme="mrope",
                                            vision=vision)
    same = geometry.scale_blocks(pos, deltas, b.short_ids, b.short_mask, data.IMG, 1.0)
    assert same[0] is pos and same[1] is deltas
    s = 2.5
    scaled, sdeltas = geometry.scale_blocks(pos, deltas, b.short_ids, b.short_mask, data.IMG, s)
    for i, e in enumerate(b.examples):
        h, w = e.grid
        c = e.image_start + 1.0                 # the anchor: the position after VS (no text before differs)
        for j in range(h * w):
            r, q = divmod(j, w)
            assert scaled[:, i, e.image_start + 1 + j].tolist() == pytest.approx([c, c + s * r, c + s * q])
        nxt = c + s * max(h - 1, w - 1) + 1     # VE: one more than the block's largest value
        n = int(b.short_mask[i].sum())
        for k, p in enumerate(range(e.image_start + 1 + h * w, n)):
            assert scaled[:, i, p].tolist() == pytest.approx([nxt + k] * 3)
        assert float(sdeltas[i, 0]) == pytest.approx(nxt + (n - 1 - (e.image_start + 1 + h * w)) + 1 - b.short_ids.shape[1])
        assert scaled[:, i, n:].eq(1.0).all()   # padding
    # the arm's model uses them, and its coupling is measured on them
    model = TinyVLM(ModelConfig(), arms.parse_arm(f"plan=M:s={s}"))
    index = b.position_index.unsqueeze(0).expand(3, -1, -1)
    assert torch.equal(model.angles(b).position_ids["mrope"], scaled.gather(2, index))
    rotary = circlerope.RotaryConfig(sections=(4, 6, 6), theta=1e4)
    plain, spread = (geometry.coupling(p, b.short_ids, b.short_mask, data.IMG, rotary) for p in (pos, scaled))
    assert spread["ptd"] > plain["ptd"] > 0.1
    block = geometry.block_mask(b.short_ids, b.short_mask, data.IMG)
    assert torch.allclose(geometry.extent(scaled, block), s * geometry.extent(pos, block), atol=1e-4)


@pytest.mark.parametrize("scheme", ["mrope", "circle"])
@pytest.mark.parametrize("layout", ["chunked", "interleaved"])
def test_coupling_on_positions_is_the_librarys(scheme, layout):
    """geometry.coupling (spec §5 on given positions) equals circlerope.ptd on the library's own."""
    lay = data.Layout("t", TRAIN_CELLS, filler=(0, 16), questions=4)
    b = collate(data.make_examples(5, "t", 0, range(12), lay), 2)
    vision = circlerope.VisionConfig(spatial_merge_size=2, vision_start_token_id=data.VS, image_token_id=data.IMG,
                                     video_token_id=data.VID)
    rotary = circlerope.RotaryConfig(sections=(4, 6, 6), theta=1e4, frequency_layout=layout)
    for radius in (10.0, arms.SMALL_RADIUS):
        circle = circlerope.CircleConfig(radius=radius)
        lib = circlerope.ptd(b.short_ids, b.grid_thw, attention_mask=b.short_mask, scheme=scheme, vision=vision,
                             rotary=rotary, circle=circle)
        pos, _ = circlerope.get_rope_index(b.short_ids, b.grid_thw, attention_mask=b.short_mask, scheme=scheme,
                                           vision=vision, circle=circle)
        ours = geometry.coupling(pos, b.short_ids, b.short_mask, data.IMG, rotary)
        assert ours["ptd"] == pytest.approx(lib.ptd, rel=1e-9, abs=1e-9)
        assert ours["rope_kernel_deviation"] == pytest.approx(lib.rope_kernel_deviation, rel=1e-9)


def test_a_scale_needs_an_m_layer_and_a_range():
    with pytest.raises(ValueError, match="has no M layer"):
        arms.check_scale(arms.parse_arm("plan=C:s=2"), 4)
    for bad in ("0", "-1", "1001"):
        with pytest.raises(ValueError, match=r"in \(0, 1000\]"):
            arms.check_scale(arms.parse_arm(f"plan=M:s={bad}"), 4)
    with pytest.raises(ValueError, match="expected on or off"):
        arms.parse_arm("plan=M:patch=yes")


# ------------------------------------------------------------- the preset ---
def test_the_v3_preset_declares_p1_to_p5_on_fresh_seeds():
    from tiny_vlm.report import DESIGNS
    plan = resolve(["v3", "--no-plots"])
    assert plan.seeds == list(range(13, 25)) and 99 not in plan.seeds
    assert plan.settings["design"] == "v3" and len(plan.configs) == 96
    declared = DESIGNS["v3"]
    assert [c.key for c in declared] == ["P1a", "P1b", "P2a", "P2b", "P2c", "P2d", "P3a", "P3b", "P4a", "P4b",
                                         "P4c", "P4d", "P4e", "P4f", "P5a", "P5b", "P5c", "P5d"]
    assert {a for c in declared for a in c.plus + c.minus} == set(plan.primary)
    # P5 is P1a, P2a, P2b and P3a with the patch-position arms
    p5 = [c for c in declared if c.key.startswith("P5")]
    twins = {c.key: c for c in declared}
    for c, twin in zip(p5, ("P1a", "P2a", "P2b", "P3a")):
        assert c.plus == ("circle-patchpos",) and c.minus == ("mrope-patchpos",)
        assert c.outcome == twins[twin].outcome and twins[twin].plus == ("circle",)
    assert PRESETS["full"]["seeds"] == ",".join(map(str, range(1, 13)))   # v2's seeds, disjoint from v3's
