"""The command line's plan: presets, the parser, and every option read and checked (resolve)
before any work starts, into a Plan of runs. Every value, a preset's too, is checked against its
range in limits.py, and every run's configuration by checkpoint.check_run, the check a
checkpoint's run.json gets when it is read back. The parsing helpers (parse_int, parse_pair,
parse_grids, parse_objects ...) serve `tiny_vlm eval` too (evaluate.py)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Dict, List, Optional, Tuple

from . import data, limits
from .limits import InputError

PRESETS: Dict[str, dict] = {
    # Sized in docs/experiment.md ("Cost, and how the presets are sized") from the costs that
    # tiny_vlm.bench measures: a training step ~0.094 CPU-s (one thread, batch 32, no padding,
    # data read from the seed's stream), a run's evaluation ~11 CPU-s at 384 sequences a split,
    # two runs at a time on an idle 2-core machine.
    # quick: 4 runs in 2 rounds, 2,000 steps each: ~7 min.
    "quick": dict(arms="mrope,circle,age-alternate,unordered", seeds=1, secondary_arms="", secondary_seeds=0,
                  steps=2000, batch=32, lr=3e-3, questions=12, train_grids="8x8,8x12,12x12",
                  eval_grids="10x10,12x16,16x16", eval_seqs=192, curve_every=100, content_samples=128),
    # full: the 5 arms of the declared contrasts x 12 seeds, vanilla and unordered x 2 seeds:
    # 64 runs of 1,400 steps, ~78 min. Seeds 1-12: seed 0 was seen while the design was made
    # (the trial and quick), so the declared contrasts are tested on seeds nobody has looked at.
    "full": dict(arms="mrope,circle,mrope-interleaved,circle-interleaved,age-alternate",
                 seeds=",".join(str(s) for s in range(1, 13)),
                 secondary_arms="vanilla,unordered", secondary_seeds=2,
                 steps=1400, batch=32, lr=3e-3, questions=12, train_grids="8x8,8x12,12x12",
                 eval_grids="10x10,12x16,16x16", eval_seqs=384, curve_every=100, content_samples=256),
    # v3 (docs/experiment.md, "The v3 design"): questions at gaps 0-12 from the image in training,
    # the arms that separate a ring's spread from its equidistance, patch positions on for one
    # pair; the declared contrasts P1-P5 (report.DESIGNS["v3"]) on 12 fresh seeds, 13-24 (seed 99
    # served the pilot that measured the cost). 8 arms x 12 seeds = 96 runs of 700 steps: 0.0966
    # CPU-s a step and ~7 CPU-s of evaluation a run on the dev machine's Xeon, ~62 min on 2 idle
    # cores (docs/experiment.md, "Cost of v3"; 1,100 steps would be ~93).
    "v3": dict(arms="mrope,circle,mrope-interleaved,circle-interleaved,circle-small,mrope-spread,mrope-patchpos,"
                    "circle-patchpos",
               seeds=",".join(str(s) for s in range(13, 25)), secondary_arms="", secondary_seeds=0,
               steps=700, batch=32, lr=3e-3, questions=12, train_grids="8x8,8x12,12x12",
               eval_grids="12x10,8x16,16x8,16x16", eval_seqs=384, curve_every=100, content_samples=256,
               train_gaps="0,12", gaps="0,4,8,12", gap_filler="12,16", unseen_gap=20, unseen_gap_filler="20,24",
               extra_splits="", design="v3"),
    # For tests and smoke runs: seconds, not minutes.
    "micro": dict(arms="mrope,circle", seeds=1, secondary_arms="", secondary_seeds=0, steps=4, batch=8, lr=3e-3,
                  questions=4, train_grids="8x8,8x12", eval_grids="12x12", eval_seqs=8, curve_every=2,
                  content_samples=8, gaps="0,2", gap_filler="2,6", probe_seqs=4),
}
DEFAULTS = dict(layers=4, width=64, heads=2, mlp=128, theta=1e4, sections="4,6,6", merge=2,
                filler="0,16", long_prefix="64,128", gaps="0,4,8", gap_filler="8,16", objects="3,8",
                curriculum=0, warmup=30, workers=0, threads=1, attention="sdpa", mix="1,1,1,1", probe_seqs=64,
                train_gaps="0,0", unseen_gap=0, unseen_gap_filler="20,24",
                extra_splits="unseen-length,question-before-image", design="v2")
EXTRA_SPLITS = ("unseen-length", "question-before-image")
DESIGNS = ("v2", "v3")   # which declared contrasts the report tests (report.DESIGNS)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        raise InputError(limits.one_line(message))


def build_parser() -> Parser:
    p = Parser(prog="tiny_vlm", description="Train a tiny vision-language model with each rotary geometry "
               "(docs/experiment.md).")
    p.add_argument("preset", nargs="?", default="quick", help="quick (<= 10 min), full or v3 (<= 90 min), or micro; "
                   "or 'eval --checkpoint DIR ...' to evaluate a saved run (python -m tiny_vlm eval --help)")
    p.add_argument("--out", help="output folder (default results/<preset>/)")
    p.add_argument("--arms", help="comma-separated primary arms, or 'all' (see tiny_vlm/arms.py)")
    p.add_argument("--seeds", help="number of seeds (0..N-1), or a list such as 3,7 (one seed: 99,)")
    p.add_argument("--secondary-arms", help="arms run on fewer seeds (shown, not in the declared contrasts); "
                   "'' for none")
    p.add_argument("--secondary-seeds", help="how many of the seeds (the first ones) the secondary arms get")
    p.add_argument("--steps", help="training steps per run")
    p.add_argument("--batch", help="global batch in sequences (split over DDP processes)")
    p.add_argument("--lr", help="peak learning rate (AdamW, warm-up then cosine to 10%%)")
    p.add_argument("--warmup", help="warm-up steps")
    p.add_argument("--questions", help="questions per training sequence (each answer supervised)")
    p.add_argument("--mix", help="weights of neighbour,lookup,relation,count questions")
    p.add_argument("--train-grids", help="training image grids in patches HxW (Qwen's image_grid_thw); "
                   "the model sees (H/merge)x(W/merge) cells")
    p.add_argument("--eval-grids", "--eval-grid", dest="eval_grids",
                   help="the unseen evaluation grids in patches HxW, comma-separated")
    p.add_argument("--merge", help="spatial_merge_size (patches per cell side)")
    p.add_argument("--objects", help="objects per image, lo,hi")
    p.add_argument("--filler", help="filler tokens before the image in training, lo,hi")
    p.add_argument("--train-gaps", help="training: of the filler tokens, how many sit between the image and the "
                   "questions, drawn per batch from lo..min(hi, the batch's filler tokens); 0,0: none")
    p.add_argument("--long-prefix", help="filler tokens before the image in the unseen-length split, lo,hi")
    p.add_argument("--gaps", help="the gap splits: filler tokens moved from before the image to between it and "
                   "the questions, comma-separated (0, the control, is always added)")
    p.add_argument("--gap-filler", help="filler tokens of the gap splits' sequences, lo,hi (lo >= the largest gap)")
    p.add_argument("--unseen-gap", help="a gap beyond --train-gaps: the splits unseen-gap-K and unseen-gap-0 (the "
                   "same sequences, every filler token before the image); 0: none")
    p.add_argument("--unseen-gap-filler", help="filler tokens of the unseen-gap splits' sequences, lo,hi "
                   "(lo >= --unseen-gap)")
    p.add_argument("--extra-splits", help="comma-separated, of unseen-length,question-before-image; '' for none")
    p.add_argument("--design", help="the declared contrasts the report tests: v2 (C1-C5) or v3 (P1-P5)")
    p.add_argument("--eval-seqs", help="evaluation sequences per split")
    p.add_argument("--content-samples", help="placements per sequence of the content-only baseline")
    p.add_argument("--probe-seqs", help="sequences of the attention measure (probe.py)")
    p.add_argument("--curve-every", help="accuracy curve point every N steps (0: none)")
    p.add_argument("--curriculum", help="first N steps on the smallest training grid only")
    p.add_argument("--layers"); p.add_argument("--width"); p.add_argument("--heads")
    p.add_argument("--mlp", help="SwiGLU hidden width")
    p.add_argument("--theta", help="rotary base")
    p.add_argument("--sections", help="frequency pairs per axis t,h,w (sum = head_dim/2)")
    p.add_argument("--workers", help="runs in parallel processes (0: one per core, 1 under DDP)")
    p.add_argument("--threads", help="torch threads per process")
    p.add_argument("--attention", help="sdpa (default), bmm or naive (for the speed comparison)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-checkpoints", action="store_true", help="do not keep each run's weights")
    return p


# A flag's range in limits.INTS / NUMBERS, where its name is not the flag's own.
RANGE_OF = {"eval-seqs": "sequences", "long-prefix": "filler", "gap-filler": "filler", "prefix": "filler",
            "gaps": "gap", "per-sequence": "questions", "seqs": "sequences", "train-gaps": "gap",
            "unseen-gap": "gap", "unseen-gap-filler": "filler"}


def parse_int(flag: str, text, high: Optional[int] = None) -> int:
    """--flag's integer in its range (limits.INTS)."""
    return limits.parse_int(f"--{flag}", text, RANGE_OF.get(flag, flag), high)


def parse_float(flag: str, text) -> float:
    """--flag's number in its range (limits.NUMBERS)."""
    return limits.parse_number(f"--{flag}", text, RANGE_OF.get(flag, flag))


def parse_pair(flag: str, text) -> Tuple[int, int]:
    """--flag lo,hi in its range."""
    return limits.parse_pair(f"--{flag}", text, RANGE_OF.get(flag, flag))


def parse_grids(flag: str, text, merge: int) -> Tuple[Tuple[int, int], ...]:
    """HxW[,HxW..] in patches, each side divisible by merge: the (H/merge, W/merge) cell grids."""
    where = f"--{flag}"
    limits.check_int(f"{where}: the number of grids", str(text).count(",") + 1, "grids")
    out = []
    for g in str(text).split(","):
        hw = g.lower().split("x")
        if len(hw) != 2:
            raise InputError(f"{where}: {limits.shown(g)} is not HxW")
        if not all(limits.INTEGER.fullmatch(x) and int(x) > 0 for x in hw):
            raise InputError(f"{where}: {limits.shown(g)} is not HxW of two positive integers")
        h, w = (int(x) for x in hw)
        if -(-h // merge) > data.MAX_COORD or -(-w // merge) > data.MAX_COORD:
            raise InputError(f"{where}: {g} has more than {data.MAX_COORD} cells on a side "
                             f"(rows and columns are digits 0-{data.MAX_COORD - 1})")
        for side, v in (("h", h), ("w", w)):
            if v % merge:
                raise InputError(f"{where}: {g} has {side}={v}, not divisible by --merge {merge}")
        out.append((h // merge, w // merge))
    limits.check_grids(where, out)
    return tuple(out)


@dataclasses.dataclass
class Plan:
    preset: str
    out: str
    arms: list             # primary arms, then secondary ones
    seeds: List[int]
    configs: list          # RunConfig per (seed, arm), seed-major
    workers: int
    threads: int
    plots: bool
    settings: dict         # every resolved option, for results.json
    primary: List[str] = dataclasses.field(default_factory=list)   # names of the primary arms
    checkpoints: bool = True
    content_samples: int = 256

    def checkpoint(self, cfg) -> Optional[str]:
        if not self.checkpoints:
            return None
        name = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in cfg.arm.name)
        return os.path.join(self.out, "checkpoints", f"{name}-s{cfg.seed}")

    @property
    def streams(self) -> str:
        return os.path.join(self.out, ".streams")


def resolve(argv: List[str]) -> Plan:
    """Parses and validates everything before any work starts, every value against its range in
    limits.py (a preset's values too); raises InputError."""
    from . import arms as arms_mod
    from .checkpoint import check_run
    from .model import ModelConfig
    from .train import RunConfig
    a = build_parser().parse_args(argv)
    if a.preset not in PRESETS:
        raise InputError(f"unknown preset {limits.shown(a.preset)} (expected {', '.join(PRESETS)})")
    o = {**DEFAULTS, **PRESETS[a.preset]}
    for key, value in vars(a).items():
        if key in o and value is not None:
            o[key] = value
    try:
        arm_list = arms_mod.parse_arms(",".join(arms_mod.ALL) if o["arms"] == "all" else str(o["arms"]))
        secondary = arms_mod.parse_arms(str(o["secondary_arms"])) if str(o["secondary_arms"]).strip() else []
    except ValueError as e:
        raise InputError(limits.one_line(e)) from None
    for arm in arm_list + secondary:
        limits.check_name("--arms: an arm's name", arm.name)
    both = {a.name for a in arm_list} & {a.name for a in secondary}
    if both:
        raise InputError(f"--secondary-arms: {', '.join(sorted(both))} is also a primary arm")
    seeds_text = str(o["seeds"])
    if "," in seeds_text:   # a list; one seed is written with a comma after it: 99,
        listed = seeds_text[:-1] if seeds_text.endswith(",") and seeds_text.count(",") == 1 else seeds_text
        limits.check_int("--seeds: the number of seeds", listed.count(",") + 1, "seeds")
        seeds = [limits.parse_int("--seeds", s, "seed") for s in listed.split(",")]
    else:
        seeds = list(range(parse_int("seeds", seeds_text)))
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {seeds_text}: a seed is listed twice")
    secondary_seeds = seeds[:parse_int("secondary-seeds", o["secondary_seeds"])]   # more than --seeds: all
    merge = parse_int("merge", o["merge"])
    layers, width = parse_int("layers", o["layers"]), parse_int("width", o["width"])
    heads = parse_int("heads", o["heads"])
    limits.check_int("--sections: the number of sections", str(o["sections"]).count(",") + 1, "sections")
    sections = tuple(parse_int("sections", s) for s in str(o["sections"]).split(","))
    limits.check_model(lambda key: f"--{key}", width, heads, sections)
    mix = parse_mix(o["mix"])
    if o["attention"] not in ("sdpa", "bmm", "naive"):
        raise InputError(f"--attention {limits.shown(str(o['attention']))} (expected sdpa, bmm or naive)")
    mc = ModelConfig(layers=layers, width=width, heads=heads, mlp=parse_int("mlp", o["mlp"]),
                     theta=parse_float("theta", o["theta"]), sections=sections, merge=merge)
    train_grids = parse_grids("train-grids", o["train_grids"], merge)
    eval_grids = parse_grids("eval-grids", o["eval_grids"], merge)
    questions = parse_int("questions", o["questions"])
    objects = parse_objects(o["objects"], train_grids + eval_grids, mix)
    filler, long_prefix = parse_pair("filler", o["filler"]), parse_pair("long-prefix", o["long_prefix"])
    limits.check_int("--gaps: the number of gaps", str(o["gaps"]).count(",") + 1, "grids")
    gaps = sorted({0} | {parse_int("gaps", g) for g in str(o["gaps"]).split(",")})
    gap_filler = parse_pair("gap-filler", o["gap_filler"])
    if gap_filler[0] < gaps[-1]:
        raise InputError(f"--gap-filler {o['gap_filler']}: fewer than {gaps[-1]} filler tokens cannot move "
                         f"{gaps[-1]} of them (--gaps {o['gaps']})")
    limits.check_relation_grids("", train_grids + eval_grids, mix)
    train_gaps = parse_pair("train-gaps", o["train_gaps"])
    if train_gaps[0] > filler[0]:
        raise InputError(f"--train-gaps {o['train_gaps']}: lo is more than the {filler[0]} filler tokens of "
                         f"--filler {o['filler']}")
    unseen_gap = parse_int("unseen-gap", o["unseen_gap"])
    unseen_filler = parse_pair("unseen-gap-filler", o["unseen_gap_filler"])
    if unseen_gap and unseen_gap <= train_gaps[1]:
        raise InputError(f"--unseen-gap {unseen_gap}: a gap that training draws (--train-gaps {o['train_gaps']})")
    if unseen_gap and unseen_filler[0] < unseen_gap:
        raise InputError(f"--unseen-gap-filler {o['unseen_gap_filler']}: fewer than {unseen_gap} filler tokens "
                         f"cannot move {unseen_gap} of them (--unseen-gap {unseen_gap})")
    extra = [x.strip() for x in str(o["extra_splits"]).split(",") if x.strip()]
    if any(x not in EXTRA_SPLITS for x in extra) or len(set(extra)) != len(extra):
        raise InputError(f"--extra-splits {limits.shown(str(o['extra_splits']))}: expected some of "
                         f"{','.join(EXTRA_SPLITS)}, each once, or ''")
    design = str(o["design"])
    if design not in DESIGNS:
        raise InputError(f"--design {limits.shown(design)} (expected {' or '.join(DESIGNS)})")
    train_layout = data.Layout("train", train_grids, filler=filler, questions=questions, objects=objects, mix=mix,
                               gap_range=train_gaps)
    evals = {"train": train_layout}
    for k in gaps:
        evals[f"gap-{k}"] = dataclasses.replace(train_layout, name=f"gap-{k}", filler=gap_filler, gap=k,
                                                gap_range=(0, 0))
    if unseen_gap:
        for k in (0, unseen_gap):
            evals[f"unseen-gap-{k}"] = dataclasses.replace(train_layout, name=f"unseen-gap-{k}", filler=unseen_filler,
                                                           gap=k, gap_range=(0, 0))
    for g in eval_grids:
        if g not in train_grids:
            evals[f"grid-{g[0]}x{g[1]}"] = dataclasses.replace(train_layout, name=f"grid-{g[0]}x{g[1]}", grids=(g,))
    if "unseen-length" in extra:
        evals["unseen-length"] = dataclasses.replace(train_layout, name="unseen-length", filler=long_prefix)
    if "question-before-image" in extra:
        evals["question-before-image"] = dataclasses.replace(train_layout, name="question-before-image",
                                                             questions=1, question_first=True)
    import circlerope
    for arm in arm_list + secondary:  # the library validates plans, radii and alphas
        try:
            circlerope.AgePlan(arm.plan, layers)
            circlerope.CircleConfig(radius=arm.radius, alpha=arm.alpha)
            arms_mod.check_scale(arm, layers)
        except (TypeError, ValueError) as e:
            raise InputError(f"arm {limits.shown(arm.name)}: {limits.one_line(e)}") from None
    try:
        circlerope.RotaryConfig(sections=sections, theta=mc.theta)
    except (TypeError, ValueError) as e:
        raise InputError(limits.one_line(e)) from None
    steps, batch = parse_int("steps", o["steps"]), parse_int("batch", o["batch"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if batch % world:
        raise InputError(f"--batch {batch} is not divisible by the {world} DDP processes")
    limits.check_batch_size(f"--batch {batch}", train_layout, batch)
    eval_seqs = parse_int("eval-seqs", o["eval_seqs"])
    for name, layout in evals.items():
        limits.check_split_size(f"--eval-seqs {eval_seqs}: split {name}", layout,
                                eval_seqs * (questions if layout.question_first else 1))
    common = dict(steps=steps, batch=batch, lr=parse_float("lr", o["lr"]), model=mc, train=train_layout, evals=evals,
                  eval_seqs=eval_seqs, curve_every=parse_int("curve-every", o["curve_every"]),
                  warmup=parse_int("warmup", o["warmup"]), attention=o["attention"],
                  curriculum=parse_int("curriculum", o["curriculum"]),
                  probe=("gap-0", f"gap-{gaps[-1]}") if gaps[-1] else (),
                  probe_seqs=parse_int("probe-seqs", o["probe_seqs"]))
    runs = sum(len(arm_list) + (len(secondary) if seed in secondary_seeds else 0) for seed in seeds)
    limits.check_int(f"--arms and --seeds: {runs} runs; the number of runs", runs, "runs")
    configs = [RunConfig(arm=arm, seed=seed, **common) for seed in seeds
               for arm in arm_list + (secondary if seed in secondary_seeds else [])]
    for cfg in {cfg.arm.name: cfg for cfg in configs}.values():   # what each arm's checkpoints will hold
        check_run(cfg, f"preset {a.preset}, run {cfg.arm.name}/s{cfg.seed}: config")
    workers = parse_int("workers", o["workers"])
    threads = parse_int("threads", o["threads"])
    content_samples = parse_int("content-samples", o["content_samples"])
    plots = not a.no_plots
    if plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError("the plots need python3-matplotlib (scripts/experiment.sh installs it), "
                             "or pass --no-plots") from None
    out = a.out or os.path.join("results", a.preset)
    settings = {k: o[k] for k in sorted(o)}
    settings["secondary_seed_list"] = secondary_seeds
    return Plan(a.preset, out, arm_list + (secondary if secondary_seeds else []), seeds, configs, workers, threads,
                plots, settings, [a.name for a in arm_list], not a.no_checkpoints, content_samples)


def parse_mix(text) -> Tuple[float, ...]:
    mix = tuple(parse_float("mix", x) for x in str(text).split(",")[:5])
    limits.check_mix(f"--mix {limits.shown(str(text))}", mix)
    return mix


def parse_objects(text, grids, mix) -> Tuple[int, int]:
    objects = parse_pair("objects", text)
    limits.check_objects(f"--objects {text}", objects, grids, mix)
    return objects
