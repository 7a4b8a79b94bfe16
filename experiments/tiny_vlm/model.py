"""The tiny decoder: causal, pre-norm RMSNorm, SwiGLU, tied embeddings, rotary positions from
circlerope (positions by get_rope_index, rotation by the fused op through RotaryEmbedding with
an AGE plan: one angle table per geometry per batch)."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import circlerope

from . import data
from .arms import Arm


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    layers: int = 4
    width: int = 64
    heads: int = 2               # of 32: 16 frequency pairs each
    mlp: int = 128               # SwiGLU hidden width
    theta: float = 1e4
    sections: tuple = (4, 6, 6)  # temporal / height / width frequency pairs (sum = head_dim / 2)
    merge: int = 2               # spatial_merge_size: the image grid is 2x the cell grid in patches

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


# ----------------------------------------------------------------- attention ---
# One function for the attention core; the formulation is the fastest one measured in torch
# 1.13 on this project's shapes (bench_attention.py; docs/experiment.md "Speed"): heads folded
# into the batch dimension, both products as torch.bmm on contiguous [B*H, S, D] blocks, the
# scale folded into q and the causal mask added by baddbmm.

def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q, k, v: [B, S, H, D] (any strides); mask: additive [B, 1, S, S] or [S, S].
    Returns [B, S, H*D]."""
    b, s, h, d = q.shape
    q = (q * (1.0 / math.sqrt(d))).transpose(1, 2).reshape(b * h, s, d)
    k = k.transpose(1, 2).reshape(b * h, s, d)
    v = v.transpose(1, 2).reshape(b * h, s, d)
    if mask.dim() == 4:
        mask = mask.expand(b, h, s, s).reshape(b * h, s, s)
    p = torch.baddbmm(mask, q, k.transpose(1, 2)).softmax(-1)
    return torch.bmm(p, v).view(b, h, s, d).transpose(1, 2).reshape(b, s, h * d)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The textbook formulation on [B, H, S, D] views, for the speed comparison."""
    b, s, h, d = q.shape
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + mask
    return torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(b, s, h * d)


ATTENTION = {"fast": attention, "naive": naive_attention}


def causal_mask(s: int) -> torch.Tensor:
    return torch.full((s, s), float("-inf")).triu(1)


def question_mask(examples: Sequence[data.Example], s: int) -> torch.Tensor:
    """Additive [B, 1, S, S]: causal, and a question's tokens see the shared prefix and their
    own question only. Padding (right) sees the prefix, so no row is empty."""
    out = torch.full((len(examples), 1, s, s), float("-inf"))
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    for i, e in enumerate(examples):
        block = torch.full((s,), -2, dtype=torch.long)
        block[:e.prefix] = -1
        for p in range(e.prefix, len(e.feats)):
            block[p] = e.block(p)
        same = (block[:, None] == block[None, :]) | (block[None, :] == -1)
        out[i, 0].masked_fill_(same & causal, 0.0)
    return out


# --------------------------------------------------------------------- model ---
class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


# rotate(layer, q, k) -> (q, k), q and k [B, S, H, D]
Rotate = Callable[[int, torch.Tensor, torch.Tensor], tuple]


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads = cfg.heads
        self.norm1 = RMSNorm(cfg.width)
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width, bias=False)
        self.proj = nn.Linear(cfg.width, cfg.width, bias=False)
        self.norm2 = RMSNorm(cfg.width)
        self.gate_up = nn.Linear(cfg.width, 2 * cfg.mlp, bias=False)
        self.down = nn.Linear(cfg.mlp, cfg.width, bias=False)

    def forward(self, x, layer: int, rotate: Rotate, mask, attend) -> torch.Tensor:
        b, s, w = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads)
        q, k = rotate(layer, qkv[:, :, 0], qkv[:, :, 1])
        x = x + self.proj(attend(q, k, qkv[:, :, 2], mask))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


def vision_config(cfg: ModelConfig) -> circlerope.VisionConfig:
    # Our own vocabulary's ids; spatial_merge_size as in Qwen2.5-VL (image_grid_thw counts
    # patches, the model sees one token per merged 2x2 patch = one cell).
    return circlerope.VisionConfig(spatial_merge_size=cfg.merge, vision_start_token_id=data.VS,
                                   image_token_id=data.IMG, video_token_id=data.VID)


def rotary_config(cfg: ModelConfig, arm: Arm) -> circlerope.RotaryConfig:
    return circlerope.RotaryConfig(sections=tuple(cfg.sections), theta=cfg.theta, layout=arm.layout)


def circle_config(arm: Arm) -> circlerope.CircleConfig:
    return circlerope.CircleConfig(radius=arm.radius, alpha=arm.alpha)


class TinyVLM(nn.Module):
    def __init__(self, cfg: ModelConfig, arm: Arm, attention_impl: str = "fast"):
        super().__init__()
        self.cfg, self.arm = cfg, arm
        self.attend = ATTENTION[attention_impl]
        self.embed = nn.Embedding(data.VOCAB_SIZE, cfg.width, padding_idx=data.PAD)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.width)
        self.plan = circlerope.AgePlan(arm.plan, cfg.layers)  # layer count always explicit
        self.rope = circlerope.RotaryEmbedding(self.plan, rotary=rotary_config(cfg, arm),
                                               circle=circle_config(arm), vision=vision_config(cfg))
        self._init()

    def _init(self) -> None:
        # Unit-scale embeddings and 1/sqrt(fan_in) weights (residual outputs further divided by
        # sqrt(2 * layers)); the tied read-out is scaled by 1/sqrt(width). Measured: GPT-2's
        # N(0, 0.02) everywhere sat on the answer prior for 500 steps (q.k logits start ~0 and
        # their gradients scale with the other side); this init left it after ~75 (docs).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 1.0 if name.startswith("embed") else 1.0 / math.sqrt(p.size(1))
                if name.endswith(("proj.weight", "down.weight")):
                    std /= math.sqrt(2 * self.cfg.layers)
                nn.init.normal_(p, 0.0, std)
        with torch.no_grad():
            self.embed.weight[data.PAD].zero_()

    def angles(self, batch) -> circlerope.RotaryAngles:
        """Positions of every geometry of the plan, one angle table each. Positions come from
        get_rope_index on the short rows (the shared prefix and one question): every question
        gets the positions it would have if it were asked alone after the image."""
        positions, deltas = {}, {}
        index = batch.position_index.unsqueeze(0).expand(3, -1, -1)
        for scheme in self.plan.schemes:
            short, deltas[scheme] = circlerope.get_rope_index(
                batch.short_ids, batch.grid_thw, attention_mask=batch.short_mask, scheme=scheme,
                circle=self.rope.circle, vision=self.rope.vision)
            positions[scheme] = short.gather(2, index)
        return circlerope.RotaryAngles(self.plan, self.rope.rotary, positions, deltas)

    def hidden(self, batch, angles: Optional[circlerope.RotaryAngles] = None,
               rotate: Optional[Rotate] = None) -> torch.Tensor:
        """Final hidden states [B, S, width]. rotate overrides the op (tests use the Hugging
        Face formula here)."""
        if rotate is None:
            angles = angles if angles is not None else self.angles(batch)
            rotate = lambda layer, q, k: angles.apply(layer, q, k, qk_layout="bshd")  # noqa: E731
        # Each position is a sum of embeddings (a patch: OBJECT + colour + shape, or EMPTY; a
        # question: its words); PAD's row is 0.
        x = self.embed(batch.feats).sum(2)
        mask = batch.mask
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, rotate, mask, self.attend)
        return self.norm(x)

    def answer_logits(self, batch, **kw) -> torch.Tensor:
        """Logits at the ASK positions only, [n_answers, vocab] (tied embeddings)."""
        h = self.hidden(batch, **kw).flatten(0, 1)[batch.ask_flat]
        return h @ self.embed.weight.t() * (1.0 / math.sqrt(self.cfg.width))

    def forward(self, batch, normaliser: Optional[float] = None) -> torch.Tensor:
        return self.loss(batch, normaliser)

    def loss(self, batch, normaliser: Optional[float] = None, **kw) -> torch.Tensor:
        logits = self.answer_logits(batch, **kw)
        total = F.cross_entropy(logits, batch.targets, reduction="sum")
        return total / (normaliser if normaliser is not None else batch.targets.numel())


# ------------------------------------------------------------------- batches ---
@dataclasses.dataclass
class Batch:
    feats: torch.Tensor          # [B, S, FEATURES] ids whose embeddings are summed per position
    short_ids: torch.Tensor      # [B, S'] the shared prefix and one question, IMG at patches:
    short_mask: torch.Tensor     # [B, S']  what get_rope_index reads
    position_index: torch.Tensor # [B, S] where each position's rotary position is in short_ids
    attention_mask: torch.Tensor # [B, S] 1 for real tokens (right padding)
    mask: torch.Tensor           # [B, 1, S, S] additive attention mask (question_mask)
    grid_thw: torch.Tensor       # [B, 3] in patches (cells * merge)
    ask_flat: torch.Tensor       # [n] flat index b * S + s of every ASK token
    targets: torch.Tensor        # [n] answer tokens
    examples: List[data.Example]

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum())


def collate(examples: Sequence[data.Example], merge: int) -> Batch:
    s = max(len(e.feats) for e in examples)
    b = len(examples)
    feats = torch.full((b, s, data.FEATURES), data.PAD, dtype=torch.long)
    mask = torch.zeros((b, s), dtype=torch.long)
    ask, targets = [], []
    for i, e in enumerate(examples):
        n = len(e.feats)
        feats[i, :n] = torch.tensor(e.feats)
        mask[i, :n] = 1
        ask += [i * s + p for p in e.ask]
        targets += [q.answer for q in e.questions]
    ids = feats[:, :, 0].clone()
    ids[(ids == data.EMPTY) | (ids == data.OBJECT)] = data.IMG
    lengths = [min(len(e.feats), e.prefix + 2) for e in examples]  # prefix + (question, ASK)
    short = max(lengths)
    short_ids = torch.full((b, short), data.PAD, dtype=torch.long)
    short_mask = torch.zeros((b, short), dtype=torch.long)
    index = torch.zeros((b, s), dtype=torch.long)
    for i, (e, n) in enumerate(zip(examples, lengths)):
        short_ids[i, :n] = ids[i, :n]
        short_mask[i, :n] = 1
        pos = torch.arange(len(e.feats))
        index[i, :len(e.feats)] = torch.where(pos < e.prefix, pos, e.prefix + (pos - e.prefix) % 2)
    grid = torch.tensor([[1, e.grid[0] * merge, e.grid[1] * merge] for e in examples], dtype=torch.long)
    return Batch(feats, short_ids, short_mask, index, mask, question_mask(examples, s), grid,
                 torch.tensor(ask, dtype=torch.long),
                 torch.tensor(targets, dtype=torch.long), list(examples))
