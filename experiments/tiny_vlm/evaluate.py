"""`python -m tiny_vlm eval`: a saved run on any split the generator can make.

    python -m tiny_vlm eval --checkpoint results/full/checkpoints/circle-s3 \
        --grid 12x16 --gap 8 --prefix 8,16 --questions lookup,count

The split is the run's training layout with what the options change; its sequences are drawn
from the evaluation seed and the layout's parameters (data.Layout.key), exactly as the run drew
its own splits, so the same parameters give the same sequences and the same accuracy the run
recorded (shown beside, when the run had such a split). Prints a table and writes the same
metrics as a split of results.json (accuracy, majority, per-cell lookup, ...) plus the content
baseline to --out (default: <checkpoint>/eval-<split hash>.json).

Before any work, run.json and every option are checked against the ranges in limits.py (the ones
the presets and the command line have, so a file cannot ask for what a flag could not), and
model.pt is loaded with torch.load(weights_only=True) and checked against the model run.json
describes (checkpoint.py); a bad value or file exits with one line, code 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from typing import List, Optional

from . import data
from . import limits
from .limits import InputError
from .plan import Parser, parse_grids, parse_int, parse_objects, parse_pair


def build_parser() -> Parser:
    p = Parser(prog="tiny_vlm eval", description="Evaluate a saved run (a checkpoint folder of a tiny_vlm run) "
               "on any split.")
    p.add_argument("--checkpoint", required=True, help="a run's folder: model.pt and run.json")
    p.add_argument("--split", help="start from this split of the run (default: train), then apply the options")
    p.add_argument("--grid", help="image grids in patches HxW, comma-separated (the model sees (H/merge)x(W/merge))")
    p.add_argument("--prefix", help="filler tokens per sequence, N or lo,hi (before the image, less the gap)")
    p.add_argument("--gap", help="of those filler tokens, how many sit between the image and the questions "
                   "(default: the split's; a run trained with drawn gaps draws them as it did)")
    p.add_argument("--questions", help="question types asked, comma-separated: neighbour,lookup,relation,count")
    p.add_argument("--per-sequence", help="questions per sequence")
    p.add_argument("--question-first", action="store_true", help="the question before the image (one a sequence)")
    p.add_argument("--objects", help="objects per image, lo,hi")
    p.add_argument("--seqs", help="sequences (default: the run's evaluation size)")
    p.add_argument("--seed", help="evaluation seed (default: the run's)")
    p.add_argument("--content-samples", default="256", help="placements per sequence of the content baseline (0: skip)")
    p.add_argument("--threads", default="1", help="torch threads")
    p.add_argument("--out", help="where to write the metrics (JSON)")
    return p


def resolve(argv: List[str]):
    """(checkpoint folder, RunConfig, what the run recorded, split layout, seqs, seed, content
    samples, threads, out); InputError."""
    from .checkpoint import check_layout, read_run
    a = build_parser().parse_args(argv)
    folder = a.checkpoint
    for name in ("model.pt", "run.json"):
        if not os.path.isfile(os.path.join(folder, name)):
            raise InputError(f"--checkpoint {limits.shown(folder)}: no {name} there (a run's checkpoint folder "
                             "holds model.pt and run.json)")
    cfg, saved = read_run(folder)
    if a.split and a.split not in cfg.evals:
        raise InputError(f"--split {limits.shown(a.split)}: the run has {', '.join(cfg.evals)}")
    layout = cfg.evals[a.split or "train"]
    change = {}
    if a.grid:
        change["grids"] = parse_grids("grid", a.grid, cfg.model.merge)
    if a.prefix:
        text = a.prefix if "," in a.prefix else f"{a.prefix},{a.prefix}"
        change["filler"] = parse_pair("prefix", text)
    if a.gap:   # a fixed gap: a run trained with drawn gaps is evaluated at this one
        change.update(gap=parse_int("gap", a.gap), gap_range=(0, 0))
    if a.questions:
        kinds = [k.strip() for k in a.questions.split(",")]
        unknown = [k for k in kinds if k not in data.QUESTION_TYPES]
        if unknown or not a.questions.strip():
            raise InputError(f"--questions {limits.shown(a.questions)}: expected some of "
                             f"{','.join(data.QUESTION_TYPES)}")
        change["mix"] = tuple(1.0 if k in kinds else 0.0 for k in data.QUESTION_TYPES)
    if a.per_sequence:
        change["questions"] = parse_int("per-sequence", a.per_sequence)
    if a.question_first:
        change.update(question_first=True, questions=1)
    layout = dataclasses.replace(layout, **change)
    if layout.question_first and layout.questions != 1:
        raise InputError(f"--per-sequence {layout.questions}: a question-first sequence holds one question")
    layout = dataclasses.replace(layout, objects=parse_objects(a.objects or f"{layout.objects[0]},{layout.objects[1]}",
                                                               layout.grids, layout.mix))
    if layout.filler[0] < layout.gap:
        raise InputError(f"--gap {layout.gap}: more than the {layout.filler[0]} filler tokens of --prefix "
                         f"{layout.filler[0]},{layout.filler[1]} (the gap moves filler tokens, it adds none)")
    if layout.mix[2] > 0 and any(h < 2 or w < 2 for h, w in layout.grids):
        raise InputError("relation questions need grids of at least 2x2 cells")
    check_layout(layout, "the evaluated layout")   # as a run's splits are: what the options leave
    seqs = (parse_int("seqs", a.seqs) if a.seqs
            else cfg.eval_seqs * (cfg.train.questions if layout.question_first else 1))
    limits.check_split_size("--seqs" if a.seqs else "the run's evaluation size", layout, seqs)
    seed = limits.parse_int("--seed", a.seed, "seed") if a.seed else cfg.eval_seed
    samples, threads = parse_int("content-samples", a.content_samples), parse_int("threads", a.threads)
    out = a.out
    if out is None:
        out = os.path.join(folder, "eval-" + hashlib.sha1((layout.key() + f"/gap={layout.gap}/seqs={seqs}/seed={seed}")
                                                          .encode()).hexdigest()[:10] + ".json")
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out) or not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise InputError(f"{'--out ' if a.out else ''}{limits.shown(out)}: cannot be written "
                         f"({'a folder' if os.path.isdir(out) else 'no writable folder ' + limits.shown(parent)})"
                         + ("" if a.out else "; pass --out"))
    return folder, cfg, saved, layout, seqs, seed, samples, threads, out


def recorded_split(cfg, saved: dict, layout: data.Layout, seqs: int, seed: int) -> Optional[str]:
    """The run's split with exactly these sequences, if it had one."""
    if seed != cfg.eval_seed:
        return None
    for name, other in cfg.evals.items():
        same_seqs = seqs == cfg.eval_seqs * (cfg.train.questions if other.question_first else 1)
        if other.key() == layout.key() and other.gap == layout.gap and same_seqs and name in saved["splits"]:
            return name
    return None


def main(argv: List[str]) -> int:
    try:
        folder, cfg, saved, layout, seqs, seed, samples, threads, out = resolve(argv)
        import torch
        torch.set_num_threads(threads)
        from .checkpoint import load_weights
        model = load_weights(folder, cfg)
    except InputError as e:
        print(f"tiny_vlm eval: error: {e}", file=sys.stderr)
        return 2
    from . import content
    from .train import predict, records, summarise
    examples = data.make_examples(seed, layout.key(), 0, range(seqs), layout)
    metrics = summarise(records(examples, predict(model, examples)))
    if samples:
        metrics["content"] = content.baseline(examples, layout.key(), samples)
    name = recorded_split(cfg, saved, layout, seqs, seed)
    metrics["recorded"] = {"split": name, "accuracy": saved["splits"][name]["accuracy"]} if name else None
    metrics["layout"] = {**dataclasses.asdict(layout), "key": layout.key()}
    metrics.update(checkpoint=os.path.abspath(folder), arm=saved["arm"], seed=saved["seed"], steps=saved["steps"],
                   eval_seed=seed, sequences=seqs)
    grids = ", ".join(f"{h}x{w}" for h, w in layout.grids)
    print(f"checkpoint {folder} ({saved['arm']}, seed {saved['seed']}, {saved['steps']} steps"
          + (", interrupted" if saved["interrupted"] else "") + ")")
    gap = f"gaps {layout.gap_range[0]}-{layout.gap_range[1]}" if tuple(layout.gap_range) != (0, 0) else f"gap {layout.gap}"
    print(f"split: grids {grids} cells, filler {layout.filler[0]}-{layout.filler[1]} ({gap}), "
          f"{layout.questions} question(s) a sequence{', question first' if layout.question_first else ''}, "
          f"{seqs} sequences, seed {seed}" + (f"; the run's split '{name}'" if name else ""))
    print(f"{'type':10s} {'questions':>9s} {'accuracy':>8s} {'majority':>8s} {'content':>8s} {'recorded':>8s}")
    for kind in data.QUESTION_TYPES:
        if kind not in metrics["accuracy"]:
            continue
        cells = [metrics["accuracy"][kind], metrics["majority_baseline"][kind],
                 metrics.get("content", {}).get("accuracy", {}).get(kind),
                 metrics["recorded"]["accuracy"].get(kind) if name else None]
        print(f"{kind:10s} {metrics['questions'][kind]:9d} "
              + " ".join(f"{100 * c:8.1f}" if c is not None else f"{'–':>8s}" for c in cells))
    try:
        with open(out, "w") as f:
            json.dump(metrics, f, indent=1)
    except OSError as e:
        print(f"tiny_vlm eval: error: {limits.shown(out)}: {limits.one_line(e.strerror or e)}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0
