"""Training and evaluation of one arm with one seed (one process, or one DDP rank)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
import time
from collections import Counter, defaultdict
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.distributed as dist

import circlerope

from . import data
from .arms import Arm
from .model import ModelConfig, TinyVLM, collate, rotary_config, circle_config, unpack, vision_config

TRAIN_STREAM = "train"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    arm: Arm
    seed: int
    steps: int
    batch: int                              # global batch (sequences per step, all ranks)
    lr: float
    model: ModelConfig
    train: data.Layout
    evals: Dict[str, data.Layout]           # split name -> layout
    eval_seqs: int = 256                    # sequences per split (question-first: x questions)
    eval_seed: int = 1_000_003              # the same evaluation data for every arm and seed
    curve_every: int = 0                    # accuracy on a small train-layout set every N steps
    curve_seqs: int = 64
    warmup: int = 50
    weight_decay: float = 0.01
    attention: str = "sdpa"
    curriculum: int = 0                     # steps on the smallest training grid first
    probe: tuple = ()                       # (split, moved split): the attention measure (probe.py)
    probe_seqs: int = 64


def config_json(cfg: RunConfig) -> dict:
    """A RunConfig as JSON (what a checkpoint records; checkpoint.config_from_json reads it back)."""
    return dataclasses.asdict(cfg)


class Dist:
    """This process's place in a DistributedDataParallel group (or a lone process)."""

    def __init__(self):
        self.on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.on else 0
        self.world = dist.get_world_size() if self.on else 1

    def sum(self, values: Sequence[float]) -> List[float]:
        if not self.on:
            return list(values)
        t = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()

    def gather(self, obj) -> list:
        if not self.on:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out


def lr_at(step: int, cfg: RunConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def train_layout_at(step: int, cfg: RunConfig) -> data.Layout:
    if step < cfg.curriculum:
        smallest = min(cfg.train.grids, key=lambda g: g[0] * g[1])
        return dataclasses.replace(cfg.train, grids=(smallest,))
    return cfg.train


def build_model(cfg: RunConfig) -> TinyVLM:
    torch.manual_seed(cfg.seed)
    return TinyVLM(cfg.model, cfg.arm, attention_impl=cfg.attention)


def train_examples(cfg: RunConfig, step: int, indices: Sequence[int]) -> List[data.Example]:
    return data.make_examples(cfg.seed, TRAIN_STREAM, step, indices, train_layout_at(step, cfg), one_shape=True)


def train(cfg: RunConfig, progress: Optional[Callable[[int, float, float], None]] = None,
          should_stop: Callable[[], bool] = lambda: False,
          on_curve: Optional[Callable[[dict], None]] = None, keep: Optional[list] = None,
          stream_root: Optional[str] = None, save_to: Optional[str] = None) -> dict:
    """Trains one arm; returns every measured number (JSON-ready). An interrupted run returns
    what it has with "interrupted": True and no evaluation. stream_root: read the batches from
    the seed's shared stream there (stream.py; one process only); save_to: a checkpoint folder
    (model.pt, run.json)."""
    d = Dist()
    if cfg.batch % d.world:
        raise ValueError(f"--batch {cfg.batch} is not divisible by the {d.world} DDP processes")
    model = build_model(cfg)
    net = model
    if d.on:
        net = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith("embed")]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith("embed"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))
    per_rank = cfg.batch // d.world
    first = d.rank * per_rank
    answers = cfg.batch * cfg.train.questions   # every answer of the global batch weighs the same
    shared = None
    if stream_root is not None:
        if d.on:
            raise ValueError("a shared data stream serves one process, not a DDP group")
        from .stream import Stream
        shared = Stream(stream_root, cfg, lambda step: train_examples(cfg, step, range(cfg.batch)), should_stop)
    losses: List[float] = []
    curve: List[dict] = []
    tokens = 0
    train_seconds = 0.0
    cpu_seconds = 0.0
    data_cpu_seconds = 0.0
    interrupted = False
    step = 0
    for step in range(cfg.steps):
        stop = d.sum([1.0 if should_stop() else 0.0])[0] > 0 if d.on else should_stop()
        if stop:
            interrupted = True
            break
        t0, c0 = time.perf_counter(), time.process_time()
        if shared is not None:
            packed = shared.packed(step)
            if packed is None:
                interrupted = True
                break
            batch = unpack(packed, cfg.model.merge)
        else:
            batch = collate(train_examples(cfg, step, range(first, first + per_rank)), cfg.model.merge)
        data_cpu_seconds += time.process_time() - c0
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        model.train()
        # DDP averages gradients over ranks, so each rank's sum is scaled by world / answers.
        loss = net(batch, answers / d.world)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step_tokens, loss_sum = d.sum([batch.tokens, loss.item() * answers / d.world])
        train_seconds += time.perf_counter() - t0
        cpu_seconds += time.process_time() - c0
        tokens += int(step_tokens)
        losses.append(loss_sum / answers)
        if cfg.curve_every and ((step + 1) % cfg.curve_every == 0 or step + 1 == cfg.steps):
            acc = evaluate_split(model, cfg, "curve", cfg.train, cfg.curve_seqs, d)
            curve.append({"step": step + 1, "accuracy": acc["accuracy"], "loss": losses[-1],
                          "neighbour_by_direction": acc["neighbour_by_direction"]})
            if on_curve is not None:
                on_curve(curve[-1])
        if progress is not None:
            progress(step + 1, losses[-1], tokens / max(train_seconds, 1e-9))
    steps_done = len(losses)
    if keep is not None:
        keep.append(model)
    result = {
        "arm": cfg.arm.name, "arm_config": dataclasses.asdict(cfg.arm), "seed": cfg.seed,
        "plan": model.plan.pattern, "steps": steps_done, "interrupted": interrupted,
        "loss": losses, "curve": curve,
        "tokens": tokens, "train_seconds": train_seconds,
        "tokens_per_second": tokens / train_seconds if train_seconds else 0.0,
        "cpu_seconds_rank0": cpu_seconds,
        "tokens_per_cpu_second": tokens / d.world / cpu_seconds if cpu_seconds else 0.0,
        "data_cpu_seconds_per_step": data_cpu_seconds / steps_done if steps_done else 0.0,
        "data_chunks_made": shared.made if shared is not None else None,
        "world_size": d.world, "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if not interrupted:
        t0 = time.perf_counter()
        result["splits"] = {name: evaluate_split(model, cfg, name, layout, cfg.eval_seqs, d)
                            for name, layout in cfg.evals.items()}
        result["drop"] = layout_drops(cfg, result["splits"])
        result["coupling"] = {name: coupling(cfg, name, layout) for name, layout in cfg.evals.items()}
        if cfg.probe and d.rank == 0:
            from .probe import attention_bias
            here, moved = (eval_examples(cfg.eval_seed, cfg.evals[name], cfg.eval_seqs)[:cfg.probe_seqs]
                           for name in cfg.probe)
            result["attention"] = attention_bias(model, here, moved)
            result["attention"]["splits"] = list(cfg.probe)
        result["eval_seconds"] = time.perf_counter() - t0
    if save_to is not None and d.rank == 0 and steps_done:
        save_checkpoint(save_to, model, cfg, result)
    return result


def save_checkpoint(folder: str, model: TinyVLM, cfg: RunConfig, result: dict) -> None:
    """model.pt (the weights) and run.json (the configuration and what the run measured on
    each split), written whole or not at all; checkpoint.py reads them back."""
    os.makedirs(folder, exist_ok=True)
    recorded = {k: result[k] for k in ("arm", "seed", "steps", "interrupted")}
    recorded["splits"] = {name: {k: s[k] for k in ("accuracy", "majority_baseline", "questions")}
                          for name, s in result.get("splits", {}).items()}
    for name, obj in (("model.pt", model.state_dict()), ("run.json", {"config": config_json(cfg), "result": recorded})):
        tmp = os.path.join(folder, f".{name}.tmp")
        if name.endswith(".pt"):
            torch.save(obj, tmp)
        else:
            with open(tmp, "w") as f:
                json.dump(obj, f, indent=1)
        os.replace(tmp, os.path.join(folder, name))


# --------------------------------------------------------------- evaluation ---
@functools.lru_cache(maxsize=64)
def eval_examples(seed: int, layout: data.Layout, seqs: int, stream: str = "") -> List[data.Example]:
    """Evaluation sequences: a function of the seed and what they are drawn from (layout.key()),
    so every arm and seed, and a later `eval` of a checkpoint, see the same ones. Made once per
    process."""
    return data.make_examples(seed, stream + layout.key(), 0, range(seqs), layout)


@torch.no_grad()
def predict(model: TinyVLM, examples: Sequence[data.Example], chunk: int = 64) -> List[int]:
    """Predicted answer of every question, in order; batches of similar length (less padding)."""
    model.eval()
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].feats))
    per_example: Dict[int, List[int]] = {}
    for i in range(0, len(order), chunk):
        idx = order[i:i + chunk]
        batch = collate([examples[j] for j in idx], model.cfg.merge)
        flat = model.answer_logits(batch).argmax(-1).tolist()
        k = 0
        for j in idx:
            n = len(examples[j].questions)
            per_example[j] = flat[k:k + n]
            k += n
    return [p for j in range(len(examples)) for p in per_example[j]]


def records(examples: Sequence[data.Example], predicted: Sequence[int]) -> List[tuple]:
    """(type, correct, answer, predicted, grid, cell, direction) per question."""
    rec, k = [], 0
    for e in examples:
        for q in e.questions:
            direction = data.DIRECTIONS[q.tokens[0] - data.Q_DIR] if q.kind == "neighbour" else None
            rec.append((q.kind, int(predicted[k] == q.answer), q.answer, predicted[k], e.grid, q.cell, direction))
            k += 1
    return rec


def evaluate_split(model: TinyVLM, cfg: RunConfig, split: str, layout: data.Layout, seqs: int,
                   d: Optional[Dist] = None) -> dict:
    d = d or Dist()
    examples = eval_examples(cfg.eval_seed, layout, split_seqs(cfg, layout, seqs), "curve/" if split == "curve" else "")
    mine = examples[d.rank::d.world]
    rec = records(mine, predict(model, mine))
    rec = [r for part in d.gather(rec) for r in part]
    return summarise(rec)


def split_seqs(cfg: RunConfig, layout: data.Layout, seqs: int) -> int:
    """Sequences of a split: question-first ones hold one question each, so they get as many
    sequences as the others have questions."""
    return seqs * cfg.train.questions if layout.question_first else seqs


def summarise(rec: Sequence[tuple]) -> dict:
    by_type: Dict[str, list] = defaultdict(list)
    for r in rec:
        by_type[r[0]].append(r)
    out = {"accuracy": {}, "majority_baseline": {}, "questions": {}, "answers": {}}
    for kind in data.QUESTION_TYPES:
        rs = by_type.get(kind, [])
        if not rs:
            continue
        answers = Counter(data.TOKEN_NAMES[r[2]] for r in rs)
        out["accuracy"][kind] = sum(r[1] for r in rs) / len(rs)
        out["majority_baseline"][kind] = answers.most_common(1)[0][1] / len(rs)
        out["questions"][kind] = len(rs)
        out["answers"][kind] = dict(answers)
    nb = by_type.get("neighbour", [])
    out["neighbour_by_direction"] = {
        dname: _mean([r[1] for r in nb if r[6] == dname]) for dname in data.DIRECTIONS}
    cells: Dict[str, Dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
    for r in by_type.get("lookup", []):
        cells[f"{r[4][0]}x{r[4][1]}"][r[5]].append(r[1])
    out["lookup_cells"] = {}
    for grid, per_cell in sorted(cells.items()):
        h, w = map(int, grid.split("x"))
        acc = [[_mean(per_cell.get((i, j), [])) for j in range(w)] for i in range(h)]
        n = [[len(per_cell.get((i, j), [])) for j in range(w)] for i in range(h)]
        rows = [_mean([x for c, v in per_cell.items() if c[0] == i for x in v]) for i in range(h)]
        cols = [_mean([x for c, v in per_cell.items() if c[1] == j for x in v]) for j in range(w)]
        out["lookup_cells"][grid] = {
            "accuracy": acc, "questions": n, "rows": rows, "columns": cols,
            "row_spread": _std(rows), "column_spread": _std(cols)}
    return out


def _mean(xs: Sequence[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def _std(xs: Sequence[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.pstdev(xs) if len(xs) > 1 else None


def reference_split(evals: Dict[str, data.Layout], name: str) -> Optional[str]:
    """What a split is compared with: the split of the same sequences without the gap (a gap
    split), else the training layout's split."""
    layout = evals[name]
    if layout.gap:
        return next((n for n, other in evals.items() if not other.gap and other.key() == layout.key()), None)
    return "train" if name != "train" and "train" in evals else None


def layout_drops(cfg: RunConfig, splits: Dict[str, dict]) -> dict:
    """Accuracy lost from each split's reference (reference_split) to the split, per type."""
    out = {}
    for name in splits:
        ref = reference_split(cfg.evals, name)
        if ref is not None and ref in splits:
            base = splits[ref]["accuracy"]
            out[name] = {"reference": ref, **{k: base[k] - v for k, v in splits[name]["accuracy"].items() if k in base}}
    return out


def coupling(cfg: RunConfig, split: str, layout: data.Layout, seqs: int = 64) -> dict:
    """PTD, RoPE kernel deviation and extent (geometry.extent, the mean over the sequences) of the
    evaluated sequences (the shared prefix and one question: what each question sees), per
    geometry of the arm's plan, with the arm's frequency layout: measured by circlerope.ptd, or,
    for a scaled M-RoPE (which the library does not have), by geometry.coupling on the scaled
    positions."""
    from . import geometry
    examples = eval_examples(cfg.eval_seed, layout, split_seqs(cfg, layout, cfg.eval_seqs))[:seqs]
    batch = collate(examples, cfg.model.merge)
    plan = circlerope.AgePlan(cfg.arm.plan, cfg.model.layers)
    rotary, vision, circle = rotary_config(cfg.model, cfg.arm), vision_config(cfg.model), circle_config(cfg.arm)
    block = geometry.block_mask(batch.short_ids, batch.short_mask, data.IMG)
    out = {}
    for scheme in plan.schemes:
        pos, deltas = circlerope.get_rope_index(batch.short_ids, batch.grid_thw, attention_mask=batch.short_mask,
                                                scheme=scheme, circle=circle, vision=vision)
        if scheme == "mrope" and cfg.arm.scale != 1:
            pos, _ = geometry.scale_blocks(pos, deltas, batch.short_ids, batch.short_mask, data.IMG, cfg.arm.scale)
            metrics = geometry.coupling(pos, batch.short_ids, batch.short_mask, data.IMG, rotary)
        else:
            m = circlerope.ptd(batch.short_ids, batch.grid_thw, attention_mask=batch.short_mask,
                               scheme=scheme, circle=circle, vision=vision, rotary=rotary)
            metrics = {"ptd": m.ptd, "rope_kernel_deviation": m.rope_kernel_deviation}
        metrics["extent"] = float(geometry.extent(pos, block).mean())
        out[scheme] = metrics
    return out
