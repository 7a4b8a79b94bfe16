"""A two-layer attention toy trained for a few steps with the fused op and with the pure-PyTorch
formula: the same losses, step after step. AGE 'alternate': layer 0 Circle-RoPE, layer 1 M-RoPE."""
import copy

import pytest
import torch
import torch.nn.functional as F

import circlerope
from circlerope.hf import reference
from conftest import hf_cos_sin

START, IMAGE, END = 151652, 151655, 151653
VOCAB, DIM, HEADS, KV_HEADS, HEAD_DIM = 97, 64, 4, 2, 16
SECTIONS = (2, 3, 3)  # rotary dim 16 = head dim


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(DIM), torch.nn.LayerNorm(DIM)
        self.q = torch.nn.Linear(DIM, HEADS * HEAD_DIM)
        self.kv = torch.nn.Linear(DIM, 2 * KV_HEADS * HEAD_DIM)
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, DIM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 2 * DIM), torch.nn.GELU(), torch.nn.Linear(2 * DIM, DIM))

    def forward(self, x, rotate):
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)           # HF's bhsd views
        k, v = self.kv(h).view(b, s, 2, KV_HEADS, HEAD_DIM).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, k)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        scores = q @ k.transpose(-1, -2) / HEAD_DIM ** 0.5
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, -1))
        return x + self.mlp(self.norm2(x))


class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.layers = torch.nn.ModuleList([Layer(), Layer()])
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, ids, rotations):
        x = self.embed(ids % VOCAB)
        for layer, rotate in zip(self.layers, rotations):
            x = layer(x, rotate)
        return self.head(x)


def batch(generator):
    rows, grids = [], []
    for _ in range(3):
        text = torch.randint(0, 1000, (12,), generator=generator).tolist()
        rows.append(text[:5] + [START] + [IMAGE] * 12 + [END] + text[5:])
        grids.append([1, 6, 8])
    return torch.tensor(rows), torch.tensor(grids)


def train(model, ids, rotations, steps=6):
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        logits = model(ids[:, :-1], rotations)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), (ids[:, 1:] % VOCAB).reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_training_with_the_op_gives_the_losses_of_the_pure_pytorch_formula():
    generator = torch.Generator().manual_seed(3)
    ids, grids = batch(generator)
    torch.manual_seed(0)
    fused_model = Toy()
    pure_model = copy.deepcopy(fused_model)

    rope = circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", 2),
                                      rotary=circlerope.RotaryConfig(sections=SECTIONS))
    angles = rope(ids[:, :-1], grids)
    fused = [lambda q, k, l=l: angles.apply(l, q, k) for l in range(2)]

    def pure_rotation(scheme):
        position_ids, _ = circlerope.get_rope_index(ids[:, :-1], grids, scheme=scheme)
        cos, sin = hf_cos_sin(position_ids, 2 * sum(SECTIONS), SECTIONS)
        return lambda q, k: reference.apply_rotary_pos_emb(q, k, cos.float(), sin.float())

    pure = [pure_rotation("circle"), pure_rotation("mrope")]
    fused_losses = train(fused_model, ids, fused)
    pure_losses = train(pure_model, ids, pure)
    print("losses (fused):", [f"{x:.6f}" for x in fused_losses])
    print("losses (pure): ", [f"{x:.6f}" for x in pure_losses])
    assert fused_losses[-1] < fused_losses[0]  # it learns
    # docs/explanation/numerics.md says the two runs give identical losses to 6 digits: hold the test to that
    # (1e-4 let a 4th-digit difference pass). Measured: equal to all 9 printed digits.
    assert fused_losses == pytest.approx(pure_losses, rel=1e-6, abs=0)
    for a, b in zip(fused_model.parameters(), pure_model.parameters()):
        assert torch.allclose(a, b, atol=1e-4, rtol=0)


def test_the_two_geometries_really_differ_in_the_toy():
    # Guard against a test that cannot fail: the layers' tables are not the same angles.
    generator = torch.Generator().manual_seed(3)
    ids, grids = batch(generator)
    angles = circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", 2),
                                        rotary=circlerope.RotaryConfig(sections=SECTIONS))(ids, grids)
    assert not torch.equal(angles.table(0), angles.table(1))
