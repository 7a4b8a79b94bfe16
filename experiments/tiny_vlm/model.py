"""The tiny decoder: causal, pre-norm RMSNorm, SwiGLU, tied embeddings, rotary positions from
circlerope (positions by get_rope_index, rotation by the fused op through RotaryEmbedding with
an AGE plan: one angle table per geometry per batch).

Attention is causal for text and bidirectional inside an image: every patch sees every patch
of its image (as a vision encoder's output does), in every arm. So the only thing that tells
patches apart is their rotary position, and under `unordered`, where every patch has the same
one, the model is a function of the image's contents alone (tests: a permutation of the
patches leaves its answers unchanged).

Patch positions (an arm's `patch_positions`, off unless an arm names it): each patch's input also
gets a fixed 2-D sin-cos feature of its row and column inside the image (patch_position_table),
the same in every arm that has it, as a real VLM's vision encoder gives its patch features their
place before the language model sees them. It has no parameters, so an arm with it starts from the
same weights as one without.

An arm's `scale` (M-RoPE layers only) stretches the image block of the library's M-RoPE positions
(geometry.scale_blocks)."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import circlerope

from . import data, geometry
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
# q, k, v: [B, S, H, D] (any strides); mask: bool [B, 1, S, S] or [S, S], True where a query
# may attend a key. Every formulation returns [B, S, H*D].

def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """torch's fused scaled_dot_product_attention: the trainer's (fastest measured on this
    project's shapes, docs/experiment.md "Speed")."""
    b, s, h, d = q.shape
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    return out.transpose(1, 2).reshape(b, s, h * d)


def additive(mask: torch.Tensor) -> torch.Tensor:
    """A bool mask as an additive one: 0 where allowed, -inf elsewhere."""
    return torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))


def bmm_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Heads folded into the batch dimension, both products as torch.bmm on contiguous
    [B*H, S, D] blocks, the scale folded into q and the mask added by baddbmm: the fastest
    formulation under torch 1.13, kept for the speed comparison."""
    b, s, h, d = q.shape
    q = (q * (1.0 / math.sqrt(d))).transpose(1, 2).reshape(b * h, s, d)
    k = k.transpose(1, 2).reshape(b * h, s, d)
    v = v.transpose(1, 2).reshape(b * h, s, d)
    mask = additive(mask)
    if mask.dim() == 4:
        mask = mask.expand(b, h, s, s).reshape(b * h, s, s)
    p = torch.baddbmm(mask, q, k.transpose(1, 2)).softmax(-1)
    return torch.bmm(p, v).view(b, h, s, d).transpose(1, 2).reshape(b, s, h * d)


def attention_probabilities(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The textbook softmax(q k^T / sqrt(d) + mask) on [B, H, S, D] views: [B, H, S, S]."""
    d = q.shape[-1]
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    return (torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + additive(mask)).softmax(-1)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The textbook formulation, for the speed comparison and the tests."""
    b, s, h, d = q.shape
    return torch.matmul(attention_probabilities(q, k, mask), v.transpose(1, 2)).transpose(1, 2).reshape(b, s, h * d)


ATTENTION = {"sdpa": sdpa_attention, "bmm": bmm_attention, "naive": naive_attention}


def causal_mask(s: int) -> torch.Tensor:
    return torch.ones(s, s, dtype=torch.bool).tril()


def sequence_mask(length: torch.Tensor, prefix: torch.Tensor, image_start: torch.Tensor, patches: torch.Tensor,
                  s: int) -> torch.Tensor:
    """bool [B, 1, S, S] from per-row tensors [B]: causal; a question's tokens see the shared
    prefix and their own (question, ASK) pair only; the patches (image_start + 1 ..
    image_start + patches) see each other both ways. Padding (right) sees the prefix, so no
    row is empty."""
    pos = torch.arange(s)
    block = torch.where(pos[None, :] < prefix[:, None], -1, torch.div(pos[None, :] - prefix[:, None], 2,
                                                                       rounding_mode="floor"))
    same = (block[:, :, None] == block[:, None, :]) | (block[:, None, :] == -1)
    first = image_start[:, None] + 1
    patch = (pos[None, :] >= first) & (pos[None, :] < first + patches[:, None])
    mask = (same & causal_mask(s)) | (patch[:, :, None] & patch[:, None, :])
    return mask.unsqueeze(1)


def question_mask(examples: Sequence[data.Example], s: int) -> torch.Tensor:
    """sequence_mask of a list of examples."""
    t = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return sequence_mask(t([len(e.feats) for e in examples]), t([e.prefix for e in examples]),
                         t([e.image_start for e in examples]), t([e.grid[0] * e.grid[1] for e in examples]), s)


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

    def forward(self, x, layer: int, rotate: Rotate, mask, attend, record: Optional[list] = None) -> torch.Tensor:
        b, s, w = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads)
        q, k = rotate(layer, qkv[:, :, 0], qkv[:, :, 1])
        if record is None:
            out = attend(q, k, qkv[:, :, 2], mask)
        else:  # the probabilities themselves, kept: [B, H, S, S]
            p = attention_probabilities(q, k, mask)
            record.append(p)
            out = torch.matmul(p, qkv[:, :, 2].transpose(1, 2)).transpose(1, 2).reshape(b, s, w)
        x = x + self.proj(out)
        gate, up = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


def vision_config(cfg: ModelConfig) -> circlerope.VisionConfig:
    # Our own vocabulary's ids; spatial_merge_size as in Qwen2.5-VL (image_grid_thw counts
    # patches, the model sees one token per merged 2x2 patch = one cell).
    return circlerope.VisionConfig(spatial_merge_size=cfg.merge, vision_start_token_id=data.VS,
                                   image_token_id=data.IMG, video_token_id=data.VID)


def rotary_config(cfg: ModelConfig, arm: Arm) -> circlerope.RotaryConfig:
    return circlerope.RotaryConfig(sections=tuple(cfg.sections), theta=cfg.theta,
                                   frequency_layout=arm.frequency_layout)


def circle_config(arm: Arm) -> circlerope.CircleConfig:
    return circlerope.CircleConfig(radius=arm.radius, alpha=arm.alpha)


def sincos(positions: torch.Tensor, dims: int) -> torch.Tensor:
    """[n, dims]: the sines then the cosines of positions x 10000^(-k / f), k = 0 .. f - 1,
    f = dims // 2 (an odd dims ends with a 0): the 1-D half of ViT / MAE's 2-D sin-cos embedding."""
    f = dims // 2
    omega = 10000.0 ** (-torch.arange(f, dtype=torch.float64) / max(f, 1))
    angle = positions.double()[:, None] * omega[None, :]
    out = torch.cat([angle.sin(), angle.cos(), torch.zeros(len(positions), dims - 2 * f, dtype=torch.float64)], 1)
    return out.float()


def patch_position_table(width: int) -> torch.Tensor:
    """[MAX_COORD, MAX_COORD, width]: the feature added to the patch at (row, column): the sin-cos
    of the row in the first width // 2 dimensions and of the column in the rest (MAE's 2-D sin-cos
    position embedding). Fixed; defined for every row and column the questions can name (0-15),
    so unseen grids get the same function's values."""
    coord = torch.arange(data.MAX_COORD)
    rows, cols = sincos(coord, width // 2), sincos(coord, width - width // 2)
    return torch.cat([rows[:, None, :].expand(-1, data.MAX_COORD, -1), cols[None, :, :].expand(data.MAX_COORD, -1, -1)],
                     -1).contiguous()


class TinyVLM(nn.Module):
    def __init__(self, cfg: ModelConfig, arm: Arm, attention_impl: str = "sdpa"):
        super().__init__()
        self.cfg, self.arm = cfg, arm
        self.attend = ATTENTION[attention_impl]
        self.embed = nn.Embedding(data.VOCAB_SIZE, cfg.width, padding_idx=data.PAD)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.width)
        self.plan = circlerope.AgePlan(arm.plan, cfg.layers)  # layer count always explicit
        self.rope = circlerope.RotaryEmbedding(self.plan, rotary=rotary_config(cfg, arm),
                                               circle=circle_config(arm), vision=vision_config(cfg))
        # Not in the state_dict (a fixed table, no parameters): checkpoints keep their keys.
        self.register_buffer("patch_table", patch_position_table(cfg.width) if arm.patch_positions else None,
                             persistent=False)
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
            if scheme == "mrope":
                short, deltas[scheme] = geometry.scale_blocks(short, deltas[scheme], batch.short_ids, batch.short_mask,
                                                              data.IMG, self.arm.scale)
            positions[scheme] = short.gather(2, index)
        return circlerope.RotaryAngles(self.plan, self.rope.rotary, positions, deltas)

    def hidden(self, batch, angles: Optional[circlerope.RotaryAngles] = None,
               rotate: Optional[Rotate] = None, record: Optional[list] = None) -> torch.Tensor:
        """Final hidden states [B, S, width]. rotate overrides the op (tests use the Hugging
        Face formula here); record, a list, receives every layer's attention probabilities
        [B, H, S, S] (computed explicitly then)."""
        if rotate is None:
            angles = angles if angles is not None else self.angles(batch)
            rotate = lambda layer, q, k: angles.apply(layer, q, k, qk_layout="bshd")  # noqa: E731
        # Each position is a sum of embeddings (a patch: OBJECT + colour + shape, or EMPTY; a
        # question: its words); PAD's row is 0.
        x = self.embed(batch.feats).sum(2)
        if self.patch_table is not None:
            x = x + self.patch_features(batch.patch_rc)
        mask = batch.mask
        for layer, block in enumerate(self.blocks):
            x = block(x, layer, rotate, mask, self.attend, record)
        return self.norm(x)

    def patch_features(self, patch_rc: torch.Tensor) -> torch.Tensor:
        """[B, S, width]: patch_position_table at each patch's (row, column), 0 elsewhere."""
        rc = patch_rc.clamp(min=0)
        return self.patch_table[rc[..., 0], rc[..., 1]] * (patch_rc[..., :1] >= 0)

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
    mask: torch.Tensor           # [B, 1, S, S] bool attention mask (sequence_mask)
    grid_thw: torch.Tensor       # [B, 3] in patches (cells * merge)
    ask_flat: torch.Tensor       # [n] flat index b * S + s of every ASK token
    targets: torch.Tensor        # [n] answer tokens
    examples: List[data.Example]
    patch_rc: torch.Tensor = None  # [B, S, 2] each patch's (row, column) in its image, -1 elsewhere

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum())


def pack(examples: Sequence[data.Example]) -> Dict[str, torch.Tensor]:
    """The few small tensors a batch is made from (what a data stream stores): ids as uint8,
    per-row lengths, prefix, image start and grid, ASK positions and answers (-1: none)."""
    s = max(len(e.feats) for e in examples)
    nq = max(len(e.ask) for e in examples)
    b = len(examples)
    feats = torch.zeros((b, s, data.FEATURES), dtype=torch.uint8)   # PAD = 0
    ask = torch.full((b, nq), -1, dtype=torch.int32)
    targets = torch.full((b, nq), -1, dtype=torch.int32)
    for i, e in enumerate(examples):
        feats[i, :len(e.feats)] = torch.tensor(e.feats, dtype=torch.uint8)
        ask[i, :len(e.ask)] = torch.tensor(e.ask, dtype=torch.int32)
        targets[i, :len(e.ask)] = torch.tensor([q.answer for q in e.questions], dtype=torch.int32)
    rows = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
    return {"feats": feats, "length": rows([len(e.feats) for e in examples]),
            "prefix": rows([e.prefix for e in examples]), "image_start": rows([e.image_start for e in examples]),
            "grid": rows([list(e.grid) for e in examples]), "ask": ask, "targets": targets}


def unpack(packed: Dict[str, torch.Tensor], merge: int, examples: Sequence[data.Example] = ()) -> Batch:
    """The batch of `pack`'s tensors: every index computed on whole tensors."""
    assert data.PAD == 0 and data.VOCAB_SIZE <= 256
    feats = packed["feats"].long()
    b, s, _ = feats.shape
    length, prefix = packed["length"].long(), packed["prefix"].long()
    image_start, grid = packed["image_start"].long(), packed["grid"].long()
    pos = torch.arange(s)
    attention_mask = (pos[None, :] < length[:, None]).long()
    ids = feats[:, :, 0].clone()
    ids[(ids == data.EMPTY) | (ids == data.OBJECT)] = data.IMG
    short_len = torch.minimum(length, prefix + 2)   # the prefix and (question, ASK)
    short = int(short_len.max())
    short_mask = (pos[None, :short] < short_len[:, None]).long()
    short_ids = ids[:, :short] * short_mask
    index = torch.where(pos[None, :] < prefix[:, None], pos[None, :], prefix[:, None] + (pos[None, :] - prefix[:, None]) % 2)
    index = index * attention_mask
    ask = packed["ask"].long()
    real = ask >= 0
    ask_flat = (torch.arange(b)[:, None] * s + ask)[real]
    targets = packed["targets"].long()[real]
    grid_thw = torch.cat([torch.ones(b, 1, dtype=torch.long), grid * merge], dim=1)
    mask = sequence_mask(length, prefix, image_start, grid[:, 0] * grid[:, 1], s)
    j = pos[None, :] - image_start[:, None] - 1                       # raster index inside the image
    inside = (j >= 0) & (j < grid[:, :1] * grid[:, 1:])
    patch_rc = torch.where(inside[..., None], torch.stack([j // grid[:, 1:], j % grid[:, 1:]], -1), -1)
    return Batch(feats, short_ids, short_mask, index, attention_mask, mask, grid_thw, ask_flat, targets, list(examples),
                 patch_rc)


def collate(examples: Sequence[data.Example], merge: int) -> Batch:
    return unpack(pack(examples), merge, examples)
