"""The experiment's costs, measured in one run, as ratios that a busy machine does not distort.

    PYTHONPATH=build/release/python:experiments .venv/bin/python -m tiny_vlm.bench \
        [--baseline DIR] [--rounds N] [--preset quick]

Everything is CPU time of one thread (time.process_time), and every comparison alternates its
candidates step by step in one process, so that the machine's load drifts over all of them
alike. Measured on the preset's model and data (arm circle, batch 32):

- data per batch: making the batch (draw images and questions, pack them), what one run of a
  seed pays for the whole seed; reading it back from a seed's stream (stream.py), what every
  other arm pays; with --baseline DIR (a checkout's experiments/ folder holding an older
  tiny_vlm) also that version's generator and collate, and its draws per accepted image;
- a training step (forward, backward, AdamW) per attention formulation: sdpa
  (F.scaled_dot_product_attention, the trainer's), bmm (baddbmm/bmm on [B*H, S, D], the
  trainer's under torch 1.13), naive (matmul on [B, H, S, D] views);
- a whole step before and after (--baseline): the older version's data + step against a stream
  read + the sdpa step;
- one training step in each of two processes running at once against one process alone
  (per-process CPU-s: how much two parallel runs slow each other beyond sharing the cores);
- a run's evaluation (every split, coupling, the attention measure) and the content baseline
  of every split (once per experiment).

It ends with the presets' predicted wall time on an idle 2-core machine from these numbers.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional


def load_baseline(path: str):
    """An older tiny_vlm package (its data and model modules) imported as tiny_vlm_base."""
    root = os.path.join(path, "tiny_vlm")
    spec = importlib.util.spec_from_file_location("tiny_vlm_base", os.path.join(root, "__init__.py"),
                                                  submodule_search_locations=[root])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tiny_vlm_base"] = mod
    spec.loader.exec_module(mod)
    return importlib.import_module("tiny_vlm_base.data"), importlib.import_module("tiny_vlm_base.model")


def cpu(f):
    c0 = time.process_time()
    out = f()
    return time.process_time() - c0, out


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def measure(args) -> dict:
    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    from . import data, model as model_mod, plan as plan_mod
    from .stream import Stream
    from .train import build_model, train_examples
    plan = plan_mod.resolve([args.preset, "--arms", "circle", "--no-plots"])
    cfg = plan.configs[0]
    out: dict = {"preset": args.preset, "batch": cfg.batch, "rounds": args.rounds}

    # ---- data per batch
    base = load_baseline(args.baseline) if args.baseline else None
    tmp = tempfile.mkdtemp(prefix="tiny_vlm_bench_")
    stream = Stream(tmp, cfg, lambda step: train_examples(cfg, step, range(cfg.batch)))
    t_make, t_read, t_base, draws_new, draws_base, steps_base = [], [], [], [], [], 0
    for step in range(args.rounds * 2):
        dt, ex = cpu(lambda: train_examples(cfg, step, range(cfg.batch)))
        dt2, packed = cpu(lambda: model_mod.pack(ex))
        t_make.append(dt + dt2)
        draws_new += [e.draws for e in ex]
        if base is not None:
            count = [0]
            original = base[0].make_image

            def counting(*a, **k):
                count[0] += 1
                return original(*a, **k)
            base[0].make_image = counting
            layout = base[0].Layout("train", cfg.train.grids, filler=cfg.train.filler, questions=cfg.train.questions,
                                    objects=cfg.train.objects, mix=cfg.train.mix)
            dt, bex = cpu(lambda: base[1].collate(base[0].make_examples(cfg.seed, "train", step, range(cfg.batch), layout,
                                                                         one_grid=True), cfg.model.merge))
            base[0].make_image = original
            t_base.append(dt)
            draws_base.append(count[0] / cfg.batch)
    # reading: a chunk file loaded once for CHUNK steps, then one unpack per step
    c0 = time.process_time()
    n = 0
    for step in range(min(cfg.steps, 100)):
        model_mod.unpack(stream.packed(step), cfg.model.merge)
        n += 1
    made = stream.made
    stream2 = Stream(tmp, cfg, lambda step: train_examples(cfg, step, range(cfg.batch)))
    c0 = time.process_time()
    for step in range(n):
        model_mod.unpack(stream2.packed(step), cfg.model.merge)
    t_read = (time.process_time() - c0) / n
    assert stream2.made == 0 and made > 0
    out["data"] = {"make_cpu_s_per_batch": _median(t_make), "read_cpu_s_per_batch": t_read,
                   "draws_per_image": statistics.fmean(draws_new)}
    if base is not None:
        out["data"].update(baseline_cpu_s_per_batch=_median(t_base), baseline_draws_per_image=statistics.fmean(draws_base))

    # ---- training steps per attention formulation, alternated on the same batches
    batches = [model_mod.unpack(stream2.packed(step), cfg.model.merge) for step in range(args.rounds)]
    impls = ["sdpa", "bmm", "naive"]
    models = {}
    for impl in impls:
        torch.manual_seed(0)
        m = model_mod.TinyVLM(cfg.model, cfg.arm, attention_impl=impl)
        models[impl] = (m, torch.optim.AdamW(m.parameters(), lr=cfg.lr))
    times = {impl: [] for impl in impls}

    def train_step(m, opt, batch):
        loss = m.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for i, batch in enumerate(batches + batches[:2]):
        for impl in impls:
            dt, _ = cpu(lambda: train_step(*models[impl], batch))
            if i >= 2:
                times[impl].append(dt)
    tokens = statistics.fmean(b.tokens for b in batches)
    out["tokens_per_batch"] = tokens
    out["step"] = {impl: {"cpu_s": _median(t), "tokens_per_cpu_s": tokens / _median(t)} for impl, t in times.items()}

    # ---- a whole step, before and after
    if base is not None:
        bm = base[1].TinyVLM(cfg.model, cfg.arm)
        bopt = torch.optim.AdamW(bm.parameters(), lr=cfg.lr)
        layout = base[0].Layout("train", cfg.train.grids, filler=cfg.train.filler, questions=cfg.train.questions,
                                objects=cfg.train.objects, mix=cfg.train.mix)
        before, after, tok_before, tok_after = [], [], [], []
        m, opt = models["sdpa"]
        for step in range(args.rounds):
            def old_step():
                b = base[1].collate(base[0].make_examples(cfg.seed, "train", step, range(cfg.batch), layout, one_grid=True),
                                    cfg.model.merge)
                train_step(bm, bopt, b)
                return b.tokens

            def new_step():
                b = model_mod.unpack(stream2.packed(step), cfg.model.merge)
                train_step(m, opt, b)
                return b.tokens
            dt, t = cpu(old_step)
            before.append(dt)
            tok_before.append(t)
            dt, t = cpu(new_step)
            after.append(dt)
            tok_after.append(t)
        out["whole_step"] = {"before_cpu_s": _median(before), "after_cpu_s": _median(after),
                             "before_tokens_per_cpu_s": statistics.fmean(tok_before) / _median(before),
                             "after_tokens_per_cpu_s": statistics.fmean(tok_after) / _median(after)}

    # ---- a run's evaluation, and the content baseline of every split
    from .train import coupling, evaluate_split, eval_examples, split_seqs
    from .probe import attention_bias
    from . import content
    m = build_model(cfg)

    def evaluation():
        for name, layout in cfg.evals.items():
            evaluate_split(m, cfg, name, layout, cfg.eval_seqs)
            coupling(cfg, name, layout)
        here, moved = (eval_examples(cfg.eval_seed, cfg.evals[n], cfg.eval_seqs)[:cfg.probe_seqs] for n in cfg.probe)
        attention_bias(m, here, moved)
    for name, layout in cfg.evals.items():   # generated once per process: not a per-run cost
        eval_examples(cfg.eval_seed, layout, split_seqs(cfg, layout, cfg.eval_seqs))
    out["eval_cpu_s_per_run"], _ = cpu(evaluation)
    t_content = 0.0
    for name, layout in cfg.evals.items():
        ex = eval_examples(cfg.eval_seed, layout, split_seqs(cfg, layout, cfg.eval_seqs))
        dt, _ = cpu(lambda: content.baseline(ex[:max(1, len(ex) // 8)], layout.key(), plan.content_samples))
        t_content += dt * len(ex) / max(1, len(ex) // 8)
    out["content_cpu_s"] = t_content
    out["curve_cpu_s_per_point"], _ = cpu(lambda: evaluate_split(m, cfg, "curve", cfg.train, cfg.curve_seqs))
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def parallel(args) -> dict:
    """Per-process CPU-s of a training step with two processes at once, against one alone."""
    def run(k):
        env = dict(os.environ)
        procs = [subprocess.Popen([sys.executable, "-m", "tiny_vlm.bench", "--child-steps", str(args.rounds),
                                   "--preset", args.preset], stdout=subprocess.PIPE, text=True, env=env) for _ in range(k)]
        return [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    alone, both, alone2 = run(1), run(2), run(1)
    a = statistics.fmean([alone[0]["cpu_s"], alone2[0]["cpu_s"]])
    b = statistics.fmean([r["cpu_s"] for r in both])
    return {"alone_cpu_s": a, "two_cpu_s": b, "slowdown": b / a,
            "alone_wall_s": statistics.fmean([alone[0]["wall_s"], alone2[0]["wall_s"]]),
            "two_wall_s": statistics.fmean([r["wall_s"] for r in both])}


def child_steps(args) -> None:
    import torch
    torch.set_num_threads(1)
    from . import model as model_mod, plan as plan_mod
    from .train import build_model, train_examples
    cfg = plan_mod.resolve([args.preset, "--arms", "circle", "--no-plots"]).configs[0]
    batches = [model_mod.collate(train_examples(cfg, s, range(cfg.batch)), cfg.model.merge) for s in range(args.child_steps)]
    m = build_model(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=cfg.lr)
    ts, ws = [], []
    for b in batches + batches[:2]:
        c0, w0 = time.process_time(), time.perf_counter()
        loss = m.loss(b)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ts.append(time.process_time() - c0)
        ws.append(time.perf_counter() - w0)
    print(json.dumps({"cpu_s": _median(ts[2:]), "wall_s": _median(ws[2:])}))


def predict(presets, m: dict, par: Optional[dict]) -> dict:
    """Wall time of each preset on an idle 2-core machine, two runs at a time, from the costs
    measured on m["preset"] (evaluation and content baseline scaled by sequences and samples)."""
    from . import plan as plan_mod
    ref = plan_mod.resolve([m["preset"], "--no-plots"])
    out = {}
    slowdown = max(1.0, par["slowdown"]) if par else 1.0   # below 1 is noise: never predict a speed-up
    for name in presets:
        plan = plan_mod.resolve([name, "--no-plots"])
        cfg = plan.configs[0]
        seqs = cfg.eval_seqs / ref.configs[0].eval_seqs
        step = m["step"]["sdpa"]["cpu_s"] * slowdown + m["data"]["read_cpu_s_per_batch"]
        make = len(plan.seeds) * cfg.steps * m["data"]["make_cpu_s_per_batch"]
        curve = (cfg.steps // cfg.curve_every if cfg.curve_every else 0) * m["curve_cpu_s_per_point"] * slowdown
        per_run = cfg.steps * step + curve + m["eval_cpu_s_per_run"] * seqs * slowdown
        content = m["content_cpu_s"] * seqs * plan.content_samples / ref.content_samples
        total = len(plan.configs) * per_run + make + content
        out[name] = {"runs": len(plan.configs), "steps": cfg.steps, "cpu_s_per_run": per_run, "data_cpu_s": make,
                     "content_cpu_s": content, "cpu_s_total": total, "wall_min_idle_2_cores": total / 2 / 60}
    return out


def main() -> int:
    from .limits import InputError, parse_int
    from .plan import PRESETS, Parser
    p = Parser(prog="tiny_vlm.bench")
    p.add_argument("--preset", default="quick", help="whose model and data are measured")
    p.add_argument("--baseline", help="an older version's experiments/ folder, for the before/after comparisons")
    p.add_argument("--rounds", default="20", help="steps per measurement")
    p.add_argument("--no-parallel", action="store_true", help="skip the two-process measurement")
    p.add_argument("--child-steps", help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the numbers here")
    try:
        args = p.parse_args()
        if args.preset not in PRESETS:
            raise InputError(f"--preset: expected one of {', '.join(PRESETS)}")
        args.rounds = parse_int("--rounds", args.rounds, "rounds")
        if args.child_steps is not None:
            args.child_steps = parse_int("--child-steps", args.child_steps, "rounds")
    except InputError as e:
        print(f"tiny_vlm.bench: error: {e}", file=sys.stderr)
        return 2
    if args.child_steps:
        child_steps(args)
        return 0
    cpu_name = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    load0 = os.getloadavg()[0]
    started = time.perf_counter()
    m = measure(args)
    par = None if args.no_parallel else parallel(args)
    m["parallel"] = par
    m["predicted"] = predict(("quick", "full"), m, par)
    m["machine"] = {"cpu": cpu_name, "cores": os.cpu_count(), "load_average_start": load0,
                    "load_average_end": os.getloadavg()[0], "wall_s": time.perf_counter() - started}
    d = m["data"]
    print(f"{cpu_name}, {os.cpu_count()} cores, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}; "
          f"preset {args.preset}, batch {m['batch']} ({m['tokens_per_batch']:.0f} tokens), CPU-s of one thread, "
          f"median of {args.rounds}")
    print("data per batch:")
    if "baseline_cpu_s_per_batch" in d:
        print(f"  baseline generator + collate      {d['baseline_cpu_s_per_batch']:.4f} CPU-s "
              f"({d['baseline_draws_per_image']:.1f} images drawn per sequence)")
    print(f"  make (draw, pack), once per seed  {d['make_cpu_s_per_batch']:.4f} CPU-s "
          f"({d['draws_per_image']:.2f} placements drawn per image)")
    print(f"  read from the seed's stream       {d['read_cpu_s_per_batch']:.4f} CPU-s")
    print("training step (forward, backward, AdamW):")
    for impl, s in m["step"].items():
        print(f"  attention {impl:6s}                  {s['cpu_s']:.4f} CPU-s  {s['tokens_per_cpu_s']:8.0f} tokens/CPU-s")
    if "whole_step" in m:
        w = m["whole_step"]
        print(f"whole step, baseline (its data + its step)  {w['before_cpu_s']:.4f} CPU-s  "
              f"{w['before_tokens_per_cpu_s']:8.0f} tokens/CPU-s")
        print(f"whole step, now (stream read + sdpa step)   {w['after_cpu_s']:.4f} CPU-s  "
              f"{w['after_tokens_per_cpu_s']:8.0f} tokens/CPU-s  ({w['before_cpu_s'] / w['after_cpu_s']:.2f}x)")
    if par:
        print(f"two runs at once: {par['two_cpu_s']:.4f} CPU-s per step each against {par['alone_cpu_s']:.4f} alone "
              f"(x{par['slowdown']:.2f}); wall {par['two_wall_s']:.4f} s against {par['alone_wall_s']:.4f} s")
    print(f"evaluation of a run (every split, coupling, attention measure): {m['eval_cpu_s_per_run']:.1f} CPU-s; "
          f"a curve point: {m['curve_cpu_s_per_point']:.2f} CPU-s; content baseline of every split (once): "
          f"{m['content_cpu_s']:.0f} CPU-s")
    for name, pr in m["predicted"].items():
        print(f"predicted {name}: {pr['runs']} runs x {pr['cpu_s_per_run']:.0f} CPU-s + data and content = "
              f"{pr['cpu_s_total'] / 60:.1f} CPU-min -> {pr['wall_min_idle_2_cores']:.1f} min on 2 idle cores")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(m, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
