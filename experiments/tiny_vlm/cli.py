"""Command line: presets, validation, the worker pool / DDP driver, progress, Ctrl-C."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

PRESETS: Dict[str, dict] = {
    # Sized in docs/experiment.md ("How the presets were sized") for an idle 2-core machine
    # (2 vCPUs of one Zen 3 core): two runs in parallel, one thread each, each ~10k tokens/s,
    # i.e. ~0.19 s per step of 32 sequences (~1,900 tokens); evaluation adds ~20-30 s a run.
    # quick: 4 runs = 2 rounds of 2 parallel runs, 2 x (1,300 x 0.19 + eval) + start ~ 9 min.
    "quick": dict(arms="mrope,unordered,circle,mrope-interleaved", seeds=1, steps=1300, batch=32, lr=3e-3,
                  questions=12, train_grids="8x8,8x12,12x12", eval_grid="12x16", eval_seqs=192, curve_every=100),
    # full: 21 runs in 11 rounds x (2,200 x 0.19 + eval) ~ 85 min.
    "full": dict(arms="all", seeds=3, steps=2200, batch=32, lr=3e-3, questions=12,
                 train_grids="8x8,8x12,12x12", eval_grid="12x16", eval_seqs=384, curve_every=200),
    # For tests and smoke runs: seconds, not minutes.
    "micro": dict(arms="mrope,circle", seeds=1, steps=4, batch=8, lr=3e-3, questions=4,
                  train_grids="8x8,8x12", eval_grid="12x12", eval_seqs=8, curve_every=2),
}
DEFAULTS = dict(layers=4, width=64, heads=2, mlp=128, theta=1e4, sections="4,6,6", merge=2,
                filler="0,16", long_prefix="64,128", objects="3,8", curriculum=0, warmup=30,
                workers=0, threads=1, attention="fast", mix="1,1,1,1")


class CliError(ValueError):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        raise CliError(message)


def build_parser() -> Parser:
    p = Parser(prog="tiny_vlm", description="Train a tiny vision-language model with each rotary geometry "
               "(docs/experiment.md).")
    p.add_argument("preset", nargs="?", default="quick", help="quick (<= 10 min), full (<= 90 min) or micro")
    p.add_argument("--out", help="output folder (default results/<preset>/)")
    p.add_argument("--arms", help="comma-separated arms, or 'all' (see tiny_vlm/arms.py)")
    p.add_argument("--seeds", help="number of seeds (0..N-1), or a list such as 3,7")
    p.add_argument("--steps", help="training steps per run")
    p.add_argument("--batch", help="global batch in sequences (split over DDP processes)")
    p.add_argument("--lr", help="peak learning rate (AdamW, warm-up then cosine to 10%%)")
    p.add_argument("--warmup", help="warm-up steps")
    p.add_argument("--questions", help="questions per training sequence (each answer supervised)")
    p.add_argument("--mix", help="weights of neighbour,lookup,relation,count questions")
    p.add_argument("--train-grids", help="training image grids in patches HxW (Qwen's image_grid_thw); "
                   "the model sees (H/merge)x(W/merge) cells")
    p.add_argument("--eval-grid", help="the unseen evaluation grid in patches HxW")
    p.add_argument("--merge", help="spatial_merge_size (patches per cell side)")
    p.add_argument("--objects", help="objects per image, lo,hi")
    p.add_argument("--filler", help="filler tokens before the image in training, lo,hi")
    p.add_argument("--long-prefix", help="filler tokens of the long-prefix split, lo,hi")
    p.add_argument("--eval-seqs", help="evaluation sequences per split")
    p.add_argument("--curve-every", help="accuracy curve point every N steps (0: none)")
    p.add_argument("--curriculum", help="first N steps on the smallest training grid only")
    p.add_argument("--layers"); p.add_argument("--width"); p.add_argument("--heads")
    p.add_argument("--mlp", help="SwiGLU hidden width")
    p.add_argument("--theta", help="rotary base")
    p.add_argument("--sections", help="frequency pairs per axis t,h,w (sum = head_dim/2)")
    p.add_argument("--workers", help="runs in parallel processes (0: one per core, 1 under DDP)")
    p.add_argument("--threads", help="torch threads per process")
    p.add_argument("--attention", help="fast (default) or naive (for the speed comparison)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def _int(name: str, text, low: int = 1) -> int:
    try:
        v = int(str(text))
    except ValueError:
        raise CliError(f"--{name} must be an integer, got '{text}'") from None
    if v < low:
        raise CliError(f"--{name} must be >= {low}, got {v}")
    return v


def _float(name: str, text, positive: bool = True) -> float:
    try:
        v = float(str(text))
    except ValueError:
        raise CliError(f"--{name} must be a number, got '{text}'") from None
    if not (v == v and abs(v) != float("inf")) or (positive and v <= 0):
        raise CliError(f"--{name} must be a finite number{' > 0' if positive else ''}, got '{text}'")
    return v


def _pair(name: str, text, low: int = 0) -> Tuple[int, int]:
    parts = str(text).split(",")
    if len(parts) != 2:
        raise CliError(f"--{name} must be lo,hi, got '{text}'")
    lo, hi = (_int(name, x, low) for x in parts)
    if lo > hi:
        raise CliError(f"--{name} '{text}': lo > hi")
    return lo, hi


def _grids(name: str, text, merge: int) -> Tuple[Tuple[int, int], ...]:
    out = []
    for g in str(text).split(","):
        hw = g.lower().split("x")
        if len(hw) != 2:
            raise CliError(f"--{name}: '{g}' is not HxW")
        h, w = (_int(name, x) for x in hw)
        for side, v in (("h", h), ("w", w)):
            if v % merge:
                raise CliError(f"--{name}: {g} has {side}={v}, not divisible by --merge {merge}")
        if h // merge > 16 or w // merge > 16:
            raise CliError(f"--{name}: {g} has more than 16 cells on a side (rows and columns are digits 0-15)")
        out.append((h // merge, w // merge))
    return tuple(out)


@dataclasses.dataclass
class Plan:
    preset: str
    out: str
    arms: list
    seeds: List[int]
    configs: list          # RunConfig per (seed, arm), seed-major
    workers: int
    threads: int
    plots: bool
    settings: dict         # every resolved option, for results.json


def resolve(argv: List[str]) -> Plan:
    """Parses and validates everything before any work starts; raises CliError."""
    from . import arms as arms_mod, data
    from .model import ModelConfig
    from .train import RunConfig
    a = build_parser().parse_args(argv)
    if a.preset not in PRESETS:
        raise CliError(f"unknown preset '{a.preset}' (expected {', '.join(PRESETS)})")
    o = {**DEFAULTS, **PRESETS[a.preset]}
    for key, value in vars(a).items():
        if key in o and value is not None:
            o[key] = value
    try:
        arm_list = arms_mod.parse_arms(",".join(arms_mod.ALL) if o["arms"] == "all" else str(o["arms"]))
    except ValueError as e:
        raise CliError(str(e)) from None
    seeds_text = str(o["seeds"])
    seeds = ([_int("seeds", s, 0) for s in seeds_text.split(",")] if "," in seeds_text
             else list(range(_int("seeds", seeds_text))))
    merge = _int("merge", o["merge"])
    layers, width, heads = _int("layers", o["layers"]), _int("width", o["width"]), _int("heads", o["heads"])
    if width % heads or (width // heads) % 2:
        raise CliError(f"--width {width} must split into --heads {heads} heads of even size")
    sections = tuple(_int("sections", s, 0) for s in str(o["sections"]).split(","))
    if len(sections) != 3 or 2 * sum(sections) != width // heads:
        raise CliError(f"--sections {o['sections']}: three numbers summing to head_dim/2 = {width // heads // 2}")
    mix = tuple(_float("mix", x, positive=False) for x in str(o["mix"]).split(","))
    if len(mix) != 4 or min(mix) < 0 or sum(mix) <= 0:
        raise CliError(f"--mix '{o['mix']}': four weights >= 0 (neighbour,lookup,relation,count), not all 0")
    if o["attention"] not in ("fast", "naive"):
        raise CliError(f"--attention '{o['attention']}' (expected fast or naive)")
    mc = ModelConfig(layers=layers, width=width, heads=heads, mlp=_int("mlp", o["mlp"]),
                     theta=_float("theta", o["theta"]), sections=sections, merge=merge)
    train_grids = _grids("train-grids", o["train_grids"], merge)
    eval_grid = _grids("eval-grid", o["eval_grid"], merge)
    questions = _int("questions", o["questions"])
    objects = _pair("objects", o["objects"], 1)
    if objects[1] > 32:
        raise CliError(f"--objects {o['objects']}: at most 32 distinct objects (8 colours x 4 shapes)")
    if min(h * w for h, w in train_grids + eval_grid) < objects[1]:
        raise CliError(f"--objects {o['objects']}: a grid has fewer cells than the most objects")
    filler, long_prefix = _pair("filler", o["filler"]), _pair("long-prefix", o["long_prefix"])
    train_layout = data.Layout("train", train_grids, filler=filler, questions=questions, objects=objects, mix=mix)
    evals = {
        "train": train_layout,
        "long-prefix": dataclasses.replace(train_layout, name="long-prefix", filler=long_prefix),
        "question-first": dataclasses.replace(train_layout, name="question-first", questions=1, question_first=True),
        "unseen-grid": dataclasses.replace(train_layout, name="unseen-grid", grids=eval_grid),
    }
    import circlerope
    for arm in arm_list:  # the library validates plans, radii and alphas
        try:
            circlerope.AgePlan(arm.plan, layers)
            circlerope.CircleConfig(radius=arm.radius, alpha=arm.alpha)
        except ValueError as e:
            raise CliError(f"arm '{arm.name}': {e}") from None
    try:
        circlerope.RotaryConfig(sections=sections, theta=mc.theta)
    except ValueError as e:
        raise CliError(str(e)) from None
    steps, batch = _int("steps", o["steps"]), _int("batch", o["batch"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if batch % world:
        raise CliError(f"--batch {batch} is not divisible by the {world} DDP processes")
    common = dict(steps=steps, batch=batch, lr=_float("lr", o["lr"]), model=mc, train=train_layout, evals=evals,
                  eval_seqs=_int("eval-seqs", o["eval_seqs"]), curve_every=_int("curve-every", o["curve_every"], 0),
                  warmup=_int("warmup", o["warmup"], 0), attention=o["attention"],
                  curriculum=_int("curriculum", o["curriculum"], 0))
    configs = [RunConfig(arm=arm, seed=seed, **common) for seed in seeds for arm in arm_list]
    workers = _int("workers", o["workers"], 0)
    threads = _int("threads", o["threads"])
    plots = not a.no_plots
    if plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("the plots need python3-matplotlib (scripts/experiment.sh installs it), "
                           "or pass --no-plots") from None
    out = a.out or os.path.join("results", a.preset)
    settings = {k: o[k] for k in sorted(o)}
    return Plan(a.preset, out, arm_list, seeds, configs, workers, threads, plots, settings)


# ------------------------------------------------------------------ running ---
def _worker(jobs, events, stop, threads: int, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; we finish the step and report
    import torch
    torch.set_num_threads(threads)
    from .train import train

    def should_stop() -> bool:
        # A parent killed outside Python (SIGKILL) never stops us: daemon processes are ended
        # only by an exiting interpreter, so an orphan would train on for the rest of its runs.
        return stop.is_set() or os.getppid() != parent
    while True:
        try:
            index, cfg = jobs.get_nowait()
        except queue.Empty:
            return
        if should_stop():
            return

        def progress(step, loss, tps, index=index):
            events.put(("progress", index, step, loss, tps))
        try:
            result = train(cfg, progress, should_stop)
        except Exception as e:  # report, do not hang the parent
            events.put(("error", index, f"{type(e).__name__}: {e}"))
            return
        events.put(("done", index, result))


class Progress:
    """A tqdm bar on a terminal; otherwise (logs, CI) one line per run every tenth of its steps."""

    def __init__(self, plan: Plan, enabled: bool = True, log=None):
        total = sum(c.steps for c in plan.configs)
        self.every = max(1, plan.configs[0].steps // 10)
        self.total, self.done, self.started = total, 0, time.time()
        self.steps = {}
        self.state = {}
        self.bar = None
        self.log = log
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, smoothing=0.05)

    def update(self, index: int, name: str, step: int, loss: float, tps: float) -> None:
        delta = step - self.steps.get(index, 0)
        self.steps[index] = step
        self.state[index] = (name, loss, tps)
        self.done += delta
        if self.bar is None and self.log is not None and step % self.every == 0:
            elapsed = time.time() - self.started
            left = elapsed / max(self.done, 1) * (self.total - self.done)
            self.log(f"{name}: step {step}, loss {loss:.3f}, {tps:.0f} tokens/s; "
                     f"all runs {100 * self.done / self.total:.0f}%, about {left / 60:.0f} min left")
        if self.bar is not None:
            running = "; ".join(f"{n} {l:.3f}" for n, l, _ in self.state.values())
            self.bar.set_postfix_str(f"loss {running} | {sum(t for _, _, t in self.state.values()) / 1e3:.1f}k tok/s",
                                     refresh=False)
            self.bar.update(delta)

    def finish(self, index: int) -> None:
        self.state.pop(index, None)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_pool(plan: Plan, results: Dict[int, dict], log) -> bool:
    """Runs every config in `workers` processes; returns False when interrupted."""
    ctx = mp.get_context("spawn")
    jobs, events, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    for item in enumerate(plan.configs):
        jobs.put(item)
    n = min(plan.workers or os.cpu_count() or 1, len(plan.configs))
    procs = [ctx.Process(target=_worker, args=(jobs, events, stop, plan.threads, os.getpid()), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    progress = Progress(plan, sys.stderr.isatty() or os.environ.get("TINY_VLM_PROGRESS") == "1", log)
    names = {i: f"{c.arm.name}/s{c.seed}" for i, c in enumerate(plan.configs)}
    interrupted = False
    try:
        while len(results) < len(plan.configs):
            try:
                ev = events.get(timeout=1.0)
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    break
                continue
            if ev[0] == "progress":
                progress.update(ev[1], names[ev[1]], *ev[2:])
            elif ev[0] == "done":
                results[ev[1]] = ev[2]
                progress.finish(ev[1])
                r = ev[2]
                log(f"{names[ev[1]]}: {r['steps']} steps, final loss {r['loss'][-1] if r['loss'] else float('nan'):.3f}, "
                    f"{r['tokens_per_second']:.0f} tokens/s" + (" (interrupted)" if r["interrupted"] else ""))
            else:
                raise RuntimeError(f"run {names[ev[1]]} failed: {ev[2]}")
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        log("interrupted: finishing the current steps and saving what was measured")
        deadline = time.time() + 120
        while any(p.is_alive() for p in procs) and time.time() < deadline:
            try:
                ev = events.get(timeout=0.5)
            except queue.Empty:
                continue
            except KeyboardInterrupt:
                break
            if ev[0] == "done":
                results[ev[1]] = ev[2]
    finally:
        stop.set()
        progress.close()
        exited = True
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                exited = False
    if exited:
        # The loops above end when no worker is alive, but a worker's last event can still be
        # in the pipe after it exited (a driver busy saving, or descheduled, reads it late):
        # read what is left so that no finished or interrupted run is lost. Only when every
        # worker ended by itself: a terminated one may have left half a message.
        try:
            while True:
                ev = events.get_nowait()
                if ev[0] == "done" and ev[1] not in results:
                    results[ev[1]] = ev[2]
        except queue.Empty:
            pass
        except KeyboardInterrupt:
            interrupted = True
    return not interrupted


def run_ddp(plan: Plan, results: Dict[int, dict], log) -> bool:
    """Every config in turn; this process is one rank of a torchrun group."""
    import torch
    import torch.distributed as dist
    from .train import train
    torch.set_num_threads(plan.threads)
    rank = dist.get_rank()
    flag = {"stop": False}

    def on_signal(signum, frame):
        flag["stop"] = True
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    progress = Progress(plan, rank == 0 and (sys.stderr.isatty() or os.environ.get("TINY_VLM_PROGRESS") == "1"),
                        log if rank == 0 else None)
    try:
        for i, cfg in enumerate(plan.configs):
            name = f"{cfg.arm.name}/s{cfg.seed}"
            r = train(cfg, lambda s, l, t, i=i, name=name: progress.update(i, name, s, l, t), lambda: flag["stop"])
            results[i] = r
            progress.finish(i)
            if rank == 0:
                log(f"{name}: {r['steps']} steps, {r['tokens_per_second']:.0f} tokens/s on {r['world_size']} processes")
            if r["interrupted"]:
                return False
    finally:
        progress.close()
    return True


def git_commit() -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
        return {"commit": commit or None, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def machine() -> dict:
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": list(os.getloadavg())}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    try:
        plan = resolve(argv)
    except CliError as e:
        print(f"tiny_vlm: error: {e}", file=sys.stderr)
        return 2
    import torch
    rank = 0
    if distributed:
        import torch.distributed as dist
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("TINY_VLM_DEVICE") == "cuda" else "gloo"
        dist.init_process_group(backend)
        rank = dist.get_rank()

    def log(msg: str) -> None:
        if rank == 0:
            print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)

    from . import report
    started = time.time()
    before = machine()
    log(f"{plan.preset}: {len(plan.arms)} arms x {len(plan.seeds)} seeds, {plan.configs[0].steps} steps of "
        f"{plan.configs[0].batch} sequences; load average {before['load_average'][0]:.1f} on {before['cores']} cores; "
        f"output {plan.out}")
    git = git_commit()

    def save(complete: bool, final: bool) -> List[str]:
        meta = {"preset": plan.preset, "argv": argv, "settings": plan.settings, "complete": complete,
                "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
                "wall_seconds": time.time() - started, "machine_start": before, "machine_end": machine(),
                "git": git, "torch": torch.__version__, "distributed_world": int(os.environ.get("WORLD_SIZE", "1")),
                "workers": plan.workers, "threads": plan.threads}
        ordered = [results[i] for i in sorted(results)]
        return report.write(plan, ordered, meta, plots=final)

    class Saving(dict):
        """Writes results.json / results.md after every finished run: a run killed from
        outside (not by Ctrl-C) still leaves what was finished."""
        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            if rank == 0 and len(self) < len(plan.configs):
                save(False, False)

    results: Dict[int, dict] = Saving()
    if distributed:
        complete = run_ddp(plan, results, log)
    else:
        complete = run_pool(plan, results, log)
    if rank == 0:
        paths = save(complete, True)
        log(f"wrote {', '.join(paths)} in {time.time() - started:.0f} s" + ("" if complete else " (partial)"))
    if distributed:
        import torch.distributed as dist
        dist.destroy_process_group()
    return 0 if complete else 130
