"""The model's attention through circlerope's op equals the same attention with the pure-PyTorch
Hugging Face rotary formula (Qwen2.5-VL chunked M-RoPE, Qwen3-VL interleaved), for each arm;
the fast attention formulation equals the textbook one."""

import dataclasses

import pytest
import torch

from tiny_vlm import arms, data
from tiny_vlm.hf_rotary import hf_rotate
from tiny_vlm.model import ModelConfig, TinyVLM, attention, causal_mask, collate, naive_attention, question_mask

# Hugging Face computes angles in float32 (phase error up to |position| * 2^-24, ~1e-5 rad
# here), we in double: the hidden states of a 4-layer float32 model then agree to ~1e-6.
TOLERANCE = 1e-4


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
        other = "interleaved" if model.arm.layout == "chunked" else "chunked"
        with torch.no_grad():
            wrong = model.hidden(b, rotate=hf_rotate(model, angles, layout=other))
        assert (ours - wrong)[real].abs().max().item() > 100 * TOLERANCE


@pytest.mark.parametrize("per_example", [False, True])
def test_fast_attention_equals_naive(per_example):
    torch.manual_seed(1)
    q, k, v = (torch.randn(3, 37, 4, 32, requires_grad=True) for _ in range(3))
    mask = causal_mask(37)
    if per_example:  # [B, 1, S, S]: a different mask per row
        mask = mask.expand(3, 1, 37, 37).clone()
        mask[1, 0, 20:, 5:15] = float("-inf")
    a = attention(q, k, v, mask)
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
    plain.mask = plain2.mask = causal_mask(plain.mask.size(-1))
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
