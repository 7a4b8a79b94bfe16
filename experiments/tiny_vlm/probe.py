"""Cross-modal positional bias where the answer is read: the attention of the answer token (ASK)
over the image's patches, layer by layer (head-averaged probabilities).

Per layer, over the questions of a split:

- image: the share of the answer token's attention on the image's patches;
- target: the share on the patches the question is about (data.targets); for lookup questions
  also by the target's raster quartile (its index j / N in [0, 1/4), [1/4, 1/2), ...), i.e.
  whether a cell is found as well early in the raster order as late;
- centroid: where in raster order the attention over the patches sits, sum_j p_j j / (N - 1)
  over the patches' normalised attention, minus 1/2 (positive: towards the later patches,
  which the sequence puts nearer the question);
- distance: the correlation, over a question's patches, between a patch's attention and its
  distance from the answer token in the layer's rotary positions (Euclidean over the three
  axes), averaged over the questions; None where every patch is equally far (Circle-RoPE,
  unordered): the geometry leaves attention nothing to correlate with;
- moved: the same questions with the image moved k tokens away (the gap split): the total
  variation distance between the two normalised attention distributions over the patches
  (0: the answer token reads the image the same way), and the change of the target share.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import torch

from . import data
from .model import collate


def _ask_rows(model, examples: Sequence[data.Example], chunk: int = 32) -> List[dict]:
    """Per question: the head-averaged attention of its ASK token over the image's patches
    per layer [L, N] and the patches' rotary distances to it per layer [L, N]."""
    rows = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(examples), chunk):
            part = list(examples[i:i + chunk])
            batch = collate(part, model.cfg.merge)
            angles = model.angles(batch)
            record: list = []
            model.hidden(batch, angles=angles, record=record)
            probs = torch.stack([p.mean(1) for p in record])            # [L, B, S, S]
            pos = {scheme: p.double() for scheme, p in angles.position_ids.items()}   # [3, B, S]
            schemes = [model.plan.layer_scheme(layer) for layer in range(len(record))]
            for b, e in enumerate(part):
                first = e.image_start + 1
                n = e.grid[0] * e.grid[1]
                for q, a in zip(e.questions, e.ask):
                    dist = torch.stack([(pos[s][:, b, first:first + n] - pos[s][:, b, a:a + 1]).pow(2).sum(0).sqrt()
                                        for s in schemes])
                    rows.append({"kind": q.kind, "targets": data.targets(e.image, q), "n": n,
                                 "p": probs[:, b, a, first:first + n].double(), "distance": dist})
    return rows


def _corr(x: torch.Tensor, y: torch.Tensor) -> Optional[float]:
    """Pearson correlation; None when y is constant up to the rounding of float32 positions."""
    scale = max(1.0, float(y.abs().max()))
    x, y = x - x.mean(), y - y.mean()
    sx, sy = x.pow(2).sum().sqrt(), y.pow(2).sum().sqrt()
    if sx < 1e-12 or sy < 1e-4 * math.sqrt(len(y)) * scale:
        return None
    return float((x * y).sum() / (sx * sy))


def attention_bias(model, examples: Sequence[data.Example], moved: Optional[Sequence[data.Example]] = None) -> dict:
    """The measures above for `examples`; `moved`: the same sequences with the image moved
    (the same questions in the same order)."""
    rows = _ask_rows(model, examples)
    rows_moved = _ask_rows(model, moved) if moved is not None else None
    layers = rows[0]["p"].shape[0] if rows else 0
    out: List[Dict[str, object]] = []
    for layer in range(layers):
        image, target, centroid, quart = [], [], [], [[] for _ in range(4)]
        corr = []
        for r in rows:
            p = r["p"][layer]
            mass = float(p.sum())
            norm = p / max(mass, 1e-30)
            t = float(p[r["targets"]].sum()) if r["targets"] else None
            image.append(mass)
            if t is not None:
                target.append(t)
            n = r["n"]
            centroid.append(float((norm * torch.arange(n, dtype=torch.float64)).sum()) / max(n - 1, 1) - 0.5)
            if r["kind"] == "lookup":
                quart[min(3, 4 * r["targets"][0] // n)].append(t)
            corr.append(_corr(norm, r["distance"][layer]))
        entry = {"image": _mean(image), "target": _mean(target), "centroid": _mean(centroid),
                 "lookup_target_by_quartile": [_mean(x) for x in quart],
                 "distance": _mean(corr)}
        if rows_moved is not None:
            tv, dt = [], []
            for r, m in zip(rows, rows_moved):
                p0, p1 = r["p"][layer], m["p"][layer]
                tv.append(0.5 * float((p0 / p0.sum() - p1 / p1.sum()).abs().sum()))
                if r["targets"]:
                    dt.append(float(p1[m["targets"]].sum() - p0[r["targets"]].sum()))
            entry["moved_tv"] = _mean(tv)
            entry["moved_target"] = _mean(dt)
        out.append(entry)
    return {"layers": out, "questions": len(rows), "schemes": [model.plan.layer_scheme(i) for i in range(layers)]}


def _mean(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else None
