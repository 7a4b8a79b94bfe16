"""The model's attention through circlerope's op equals the same attention with the pure-PyTorch
Hugging Face rotary formula (Qwen2.5-VL chunked M-RoPE, Qwen3-VL interleaved), for each arm;
every attention formulation equals the textbook one; `unordered` sees no order inside an image;
the gap split moves every question k(1,1,1) away from the image; shared streams."""

import dataclasses

import pytest
import torch

from circlerope.hf import reference
from tiny_vlm import arms, data
from tiny_vlm.model import ATTENTION, ModelConfig, TinyVLM, causal_mask, collate, naive_attention, pack, unpack

# Hugging Face computes angles in float32 (phase error up to |position| * 2^-24, ~1e-5 rad
# here), we in double: the hidden states of a 4-layer float32 model then agree to ~1e-6.
TOLERANCE = 1e-4


def hf_rotate(model, angles, frequency_layout=None):
    """rotate(layer, q, k) for TinyVLM.hidden: the layer's geometry from the plan, Hugging Face's
    rotary embedding (float32 angles), section selection (the arm's frequency layout, or
    `frequency_layout`) and formula, from circlerope.hf.reference."""
    cfg = model.cfg

    def rotate(layer, q, k):  # q, k [B, S, H, D]
        pos = angles.position_ids[model.plan.layer_scheme(layer)]
        cos, sin = (reference.select_sections(t, cfg.sections, frequency_layout or model.arm.frequency_layout)
                    for t in reference.rotary_embedding(pos, cfg.head_dim, cfg.theta))
        return reference.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2)
    return rotate


def batch(seed=0, n=6, long=False):
    layout = data.Layout("t", ((4, 4), (6, 6), (4, 6)), questions=4, filler=(64, 128) if long else (0, 16))
    return collate(data.make_examples(seed, "t", 0, range(n), layout), 2)


@pytest.mark.parametrize("arm", arms.ALL + ["plan=CCMU:r=auto:a=0.25"])
def test_op_attention_equals_hugging_face_formula(arm):
    torch.manual_seed(0)
    model = TinyVLM(ModelConfig(), arms.parse_arm(arm)).eval()
    b = batch(long=True)
    with torch.no_grad():
        angles = model.angles(b)
        ours = model.hidden(b, angles=angles)
        hf = model.hidden(b, rotate=hf_rotate(model, angles))
    real = b.attention_mask.bool()
    err = (ours - hf)[real].abs().max().item()
    assert err < TOLERANCE, err
    # The comparison can fail: the other frequency layout changes the attention of every
    # geometry that moves patches off the text diagonal.
    if model.arm.plan not in ("V", "U"):
        other = "interleaved" if model.arm.frequency_layout == "chunked" else "chunked"
        with torch.no_grad():
            wrong = model.hidden(b, rotate=hf_rotate(model, angles, frequency_layout=other))
        assert (ours - wrong)[real].abs().max().item() > 100 * TOLERANCE


@pytest.mark.parametrize("impl", ["sdpa", "bmm"])
@pytest.mark.parametrize("per_example", [False, True])
def test_attention_formulations_equal_naive(impl, per_example):
    torch.manual_seed(1)
    q, k, v = (torch.randn(3, 37, 4, 32, requires_grad=True) for _ in range(3))
    mask = causal_mask(37)
    if per_example:  # [B, 1, S, S]: a different mask per row
        mask = mask.expand(3, 1, 37, 37).clone()
        mask[1, 0, 20:, 5:15] = False
        mask[2, 0, 3:9, 3:9] = True     # a bidirectional block
    a = ATTENTION[impl](q, k, v, mask)
    n = naive_attention(q, k, v, mask)
    assert (a - n).abs().max().item() < 1e-5
    g = torch.randn_like(a)
    ga = torch.autograd.grad(a, (q, k, v), g)
    gn = torch.autograd.grad(n, (q, k, v), g)
    for x, y in zip(ga, gn):
        assert (x - y).abs().max().item() < 1e-5


def test_positions_reach_the_model():
    # Same weights, same batch, another geometry: different states.
    torch.manual_seed(0)
    m = TinyVLM(ModelConfig(layers=2), arms.NAMED["mrope"]).eval()
    b = batch(seed=2)
    torch.manual_seed(0)
    c = TinyVLM(ModelConfig(layers=2), arms.NAMED["circle"]).eval()
    with torch.no_grad():
        assert (m.hidden(b) - c.hidden(b)).abs().max().item() > 1e-3


def test_each_question_sees_the_image_and_itself_only():
    # Changing question 0 (and its answer-free ASK) must not move question 1's logits; under a
    # plain causal mask it would (checked below), so the test can fail.
    torch.manual_seed(0)
    model = TinyVLM(ModelConfig(layers=2), arms.NAMED["mrope"]).eval()
    layout = data.Layout("t", ((4, 4),), questions=3, filler=(0, 0))
    e = data.make_examples(1, "t", 0, range(1), layout)[0]
    f = dataclasses.replace(e, feats=list(e.feats))
    q0 = e.ask[0] - 1
    other = (data.Q_AT, data.ROW0 + 3, data.COL0 + 1, data.PAD, data.PAD)
    f.feats[q0] = other if e.feats[q0] != other else (data.Q_COUNT, data.COLOUR0, data.PAD, data.PAD, data.PAD)
    with torch.no_grad():
        a = model.answer_logits(collate([e], 2))
        b = model.answer_logits(collate([f], 2))
    assert (a[0] - b[0]).abs().max() > 1e-3            # question 0 itself changed
    assert (a[1:] - b[1:]).abs().max() < 1e-5          # the others did not
    plain = collate([e], 2)
    plain2 = collate([f], 2)
    plain.mask = plain2.mask = causal_mask(plain.mask.size(-1))   # no question blocks
    with torch.no_grad():
        assert (model.answer_logits(plain)[1:] - model.answer_logits(plain2)[1:]).abs().max() > 1e-4


@pytest.mark.parametrize("arm", ["mrope", "circle", "vanilla", "age-alternate"])
def test_every_question_has_the_positions_it_would_have_alone(arm):
    import circlerope
    model = TinyVLM(ModelConfig(layers=2), arms.NAMED[arm])
    layout = data.Layout("t", ((4, 6), (6, 6)), questions=4)
    examples = data.make_examples(3, "t", 0, range(3), layout)
    b = collate(examples, 2)
    angles = model.angles(b)
    for scheme, pos in angles.position_ids.items():
        for i, e in enumerate(examples):
            for k, ask in enumerate(e.ask):
                alone = e.tokens[:e.prefix] + e.tokens[ask - 1:ask + 1]   # prefix, question k, ASK
                ids = torch.tensor([[data.IMG if t in (data.EMPTY, data.OBJECT) else t for t in alone]])
                ref, _ = circlerope.get_rope_index(ids, b.grid_thw[i:i + 1], scheme=scheme,
                                                   circle=model.rope.circle, vision=model.rope.vision)
                got = torch.cat([pos[:, i, :e.prefix], pos[:, i, ask - 1:ask + 1]], dim=1)
                assert torch.equal(got, ref[:, 0]), (scheme, i, k)


def _permute_patches(e: data.Example, rng) -> data.Example:
    first, n = e.image_start + 1, e.grid[0] * e.grid[1]
    patches = e.feats[first:first + n]
    rng.shuffle(patches)
    return dataclasses.replace(e, feats=e.feats[:first] + patches + e.feats[first + n:])


@pytest.mark.parametrize("arm", ["unordered", "plan=UU", "mrope", "circle", "vanilla"])
def test_unordered_sees_no_order_inside_an_image(arm):
    # Under `unordered` every patch has one rotary position, and the image block is
    # bidirectional: the answers are a function of the image's contents, whatever their order.
    import random
    torch.manual_seed(0)
    model = TinyVLM(ModelConfig(), arms.parse_arm(arm)).eval()
    layout = data.Layout("t", ((4, 4), (6, 6), (4, 6)), questions=6)
    examples = data.make_examples(5, "t", 0, range(6), layout)
    rng = random.Random(1)
    moved = [_permute_patches(e, rng) for e in examples]
    with torch.no_grad():
        a = model.answer_logits(collate(examples, 2))
        b = model.answer_logits(collate(moved, 2))
        diff = (a - b).abs().max().item()
        if arm in ("unordered", "plan=UU"):
            assert diff < 1e-4, diff
            # With a causal image block (the control before), patch j still counts the patches
            # before it, and the order shows.
            causal_a, causal_b = collate(examples, 2), collate(moved, 2)
            for batch in (causal_a, causal_b):
                s = batch.mask.size(-1)
                batch.mask = batch.mask & causal_mask(s)
            assert (model.answer_logits(causal_a) - model.answer_logits(causal_b)).abs().max().item() > 1e-3
        else:
            assert diff > 1e-3, diff


def test_the_image_block_is_bidirectional_and_nothing_else_is():
    layout = data.Layout("t", ((4, 6),), questions=3, filler=(4, 4), gap=2)
    e = data.make_examples(0, "t", 0, range(1), layout)[0]
    m = collate([e], 2).mask[0, 0]
    first, n = e.image_start + 1, 24
    assert m[first:first + n, first:first + n].all()
    before = m.clone()
    before[first:first + n, first:first + n] = causal_mask(n)
    s = len(e.feats)
    assert not (before[:s, :s] & ~causal_mask(s)).any()     # outside the image: causal
    assert m[first + n:s, first:first + n].all()            # VE, the gap and every question see every patch
    assert not m[:first, first:first + n].any()             # nothing before the image does


@pytest.mark.parametrize("scheme", ["vanilla", "unordered", "mrope", "circle"])
def test_the_gap_moves_every_question_k_111_from_the_image(scheme):
    # gap-k and gap-0 hold the same sequences; moving k filler tokens keeps the length and adds
    # exactly k(1, 1, 1) to every offset from an image token to a question or answer token.
    arm = arms.Arm(scheme, plan={"vanilla": "V", "unordered": "U", "mrope": "M", "circle": "C"}[scheme])
    model = TinyVLM(ModelConfig(layers=2), arm)
    k = 5
    base = data.Layout("t", ((4, 4), (6, 6), (4, 6)), questions=4, filler=(6, 12))
    moved = dataclasses.replace(base, gap=k)
    e0 = data.make_examples(9, base.key(), 0, range(5), base)
    ek = data.make_examples(9, moved.key(), 0, range(5), moved)
    b0, bk = collate(e0, 2), collate(ek, 2)
    p0 = model.angles(b0).position_ids[scheme].double()
    pk = model.angles(bk).position_ids[scheme].double()
    for i, (x, y) in enumerate(zip(e0, ek)):
        assert len(x.feats) == len(y.feats) and x.questions == y.questions and x.image == y.image
        assert y.image_start == x.image_start - k
        n = x.grid[0] * x.grid[1]
        img0 = p0[:, i, x.image_start:x.image_start + n + 2]        # VS, patches, VE
        imgk = pk[:, i, y.image_start:y.image_start + n + 2]
        for a0, ak in zip(x.ask, y.ask):
            assert ak == a0
            for t in (a0 - 1, a0):                                  # the question and its ASK
                off0 = p0[:, i, t:t + 1] - img0
                offk = pk[:, i, t:t + 1] - imgk
                assert torch.allclose(offk - off0, torch.full_like(off0, float(k)), atol=1e-4)


def test_a_seeds_stream_is_made_once_and_read_by_the_other_runs(tmp_path):
    from tiny_vlm.plan import resolve
    from tiny_vlm.stream import Stream
    from tiny_vlm.train import train_examples
    plan = resolve(["micro", "--steps", "120", "--no-plots"])
    cfg = plan.configs[0]
    make = lambda step: train_examples(cfg, step, range(cfg.batch))  # noqa: E731
    first, second = Stream(str(tmp_path), cfg, make), Stream(str(tmp_path), cfg, make)
    for step in (0, 1, 49, 50, 119):
        a, b = first.packed(step), second.packed(step)
        direct = pack(make(step))
        for key in direct:
            assert torch.equal(a[key], direct[key]) and torch.equal(b[key], direct[key]), (step, key)
    assert first.made == 3 and second.made == 0
    # the batch from the stream equals the collated one
    x, y = unpack(first.packed(7), 2), collate(make(7), 2)
    for f in ("feats", "short_ids", "position_index", "mask", "grid_thw", "ask_flat", "targets"):
        assert torch.equal(getattr(x, f), getattr(y, f)), f


def test_a_claim_left_by_a_dead_run_is_taken_over(tmp_path):
    import os
    import subprocess
    import sys
    from tiny_vlm.plan import resolve
    from tiny_vlm.stream import Stream
    from tiny_vlm.train import train_examples
    cfg = resolve(["micro", "--no-plots"]).configs[0]
    s = Stream(str(tmp_path), cfg, lambda step: train_examples(cfg, step, range(cfg.batch)))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with open(os.path.join(s.dir, "chunk00000.pt.claim"), "w") as f:
        f.write(dead.stdout.strip())
    assert s.packed(0) is not None and s.made == 1


def test_recorded_attention_is_the_attention_used():
    torch.manual_seed(0)
    model = TinyVLM(ModelConfig(layers=2), arms.NAMED["circle"]).eval()
    b = batch(seed=4)
    record = []
    with torch.no_grad():
        plain = model.hidden(b)
        recorded = model.hidden(b, record=record)
    assert (plain - recorded).abs().max().item() < 1e-5
    assert len(record) == 2 and record[0].shape[1] == model.cfg.heads
    rows = record[0].sum(-1)
    assert torch.allclose(rows, torch.ones_like(rows), atol=1e-5)
