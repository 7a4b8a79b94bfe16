"""Training speed: the trainer against the naive formulation, on this machine, one run.

    PYTHONPATH=build/release/python:experiments .venv/bin/python -m tiny_vlm.bench [--steps N]

Each configuration runs in a fresh process (OpenMP settings are read when torch starts) and
trains the quick preset's model on the quick preset's data for N steps after 2 warm-up steps.
Reported: real (unpadded) tokens per wall second and per CPU-second of the process, and the
load average. "naive" is the textbook attention on [B, H, S, D] views with torch.matmul, the
Hugging Face rotary formula, 2 torch threads with OpenMP's default (spinning) wait policy.
Also times the attention core alone in every formulation measured while choosing one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CONFIGS = [
    # name, env, threads, attention, rotary
    ("naive: matmul attention + HF rotary, 2 threads", {}, 2, "naive", "hf"),
    ("naive attention + op rotary, 2 threads", {}, 2, "naive", "op"),
    ("trainer, 2 threads, OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}, 2, "fast", "op"),
    ("trainer, 1 thread", {}, 1, "fast", "op"),
]


def child(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    from . import cli, model as model_mod
    plan = cli.resolve([args.preset, "--arms", "circle", "--attention", args.attention])
    cfg = plan.configs[0]
    from .train import build_model, lr_at, TRAIN_STREAM
    from . import data
    m = build_model(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=cfg.lr)
    rotate = None
    if args.rotary == "hf":
        from .hf_rotary import hf_rotate
    tokens, wall, cpu = 0, 0.0, 0.0
    for step in range(args.steps + 2):
        t0, c0 = time.perf_counter(), time.process_time()
        batch = model_mod.collate(data.make_examples(0, TRAIN_STREAM, step, range(cfg.batch), cfg.train), cfg.model.merge)
        kw = {}
        if args.rotary == "hf":
            kw["rotate"] = hf_rotate(m, m.angles(batch))
        loss = m.loss(batch, **kw)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= 2:
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
            tokens += batch.tokens
    print(json.dumps({"tokens_per_second": tokens / wall, "tokens_per_cpu_second": tokens / cpu,
                      "steps": args.steps, "tokens": tokens}))


def attention_core(threads: int) -> dict:
    """fwd+bwd of the attention core alone, [B=64, H=4, S=110, D=32], per formulation."""
    import torch
    torch.set_num_threads(threads)
    from .model import causal_mask
    b, h, s, d = 64, 4, 110, 32
    x = torch.randn(b, s, 3, h, d, requires_grad=True)
    mask = causal_mask(s)

    def split():
        return x[:, :, 0], x[:, :, 1], x[:, :, 2]

    def bhsd_matmul():
        q, k, v = (t.transpose(1, 2) for t in split())
        p = (q @ k.transpose(-1, -2) / d ** 0.5 + mask).softmax(-1)
        return (p @ v).transpose(1, 2).reshape(b, s, h * d)

    def einsum_bshd():
        q, k, v = split()
        p = (torch.einsum("bshd,bthd->bhst", q, k) / d ** 0.5 + mask).softmax(-1)
        return torch.einsum("bhst,bthd->bshd", p, v).reshape(b, s, h * d)

    def per_head_einsum():
        q, k, v = split()
        out = []
        for i in range(h):
            p = (torch.einsum("bsd,btd->bst", q[:, :, i], k[:, :, i]) / d ** 0.5 + mask).softmax(-1)
            out.append(torch.einsum("bst,btd->bsd", p, v[:, :, i]))
        return torch.cat(out, -1)

    def grouped_conv1d():
        q, k, v = split()
        kin = k.permute(0, 2, 3, 1).reshape(1, b * h * d, s)
        w = q.permute(0, 2, 1, 3).reshape(b * h * s, d, 1)
        p = (torch.nn.functional.conv1d(kin, w, groups=b * h).view(b, h, s, s) / d ** 0.5 + mask).softmax(-1)
        pin = p.transpose(2, 3).reshape(1, b * h * s, s)
        wv = v.permute(0, 2, 3, 1).reshape(b * h * d, s, 1)
        o = torch.nn.functional.conv1d(pin, wv, groups=b * h).view(b, h, d, s)
        return o.permute(0, 3, 1, 2).reshape(b, s, h * d)

    from .model import attention

    def trainer():
        q, k, v = split()
        return attention(q, k, v, mask)

    out = {}
    for name, f in [("matmul on [B,H,S,D] views", bhsd_matmul), ("einsum on [B,S,H,D]", einsum_bshd),
                    ("einsum per head", per_head_einsum), ("grouped conv1d (oneDNN)", grouped_conv1d),
                    ("trainer: baddbmm/bmm on contiguous [B*H,S,D]", trainer)]:
        best = float("inf")
        for rep in range(4):
            t0 = time.perf_counter()
            y = f()
            y.backward(torch.ones_like(y))
            x.grad = None
            if rep:
                best = min(best, time.perf_counter() - t0)
        out[name] = best * 1e3
    return out


def main() -> int:
    p = argparse.ArgumentParser(prog="tiny_vlm.bench")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--preset", default="quick")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--attention", default="fast")
    p.add_argument("--rotary", default="op")
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    if args.core:
        print(json.dumps(attention_core(args.core)))
        return 0
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"{cpu}, {os.cpu_count()} cores; torch trainer speed, {args.preset} preset model and data, "
          f"{args.steps} steps per configuration")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env0 = dict(os.environ)
    env0["PYTHONPATH"] = os.pathsep.join([here] + [x for x in env0.get("PYTHONPATH", "").split(os.pathsep) if x])
    print(f"{'configuration':52s} {'tokens/s':>9s} {'tok/CPU-s':>10s} {'load':>5s}")
    for name, extra, threads, att, rot in CONFIGS:
        load = os.getloadavg()[0]
        r = subprocess.run([sys.executable, "-m", "tiny_vlm.bench", "--child", "--steps", str(args.steps),
                            "--preset", args.preset, "--threads", str(threads), "--attention", att, "--rotary", rot],
                           env={**env0, **extra}, capture_output=True, text=True)
        if r.returncode:
            print(f"{name}: failed: {r.stderr.strip().splitlines()[-1:]}")
            continue
        m = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{name:52s} {m['tokens_per_second']:9.0f} {m['tokens_per_cpu_second']:10.0f} {load:5.1f}", flush=True)
    # two workers of one thread each, as the presets run: aggregate throughput
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "tiny_vlm.bench", "--child", "--steps", str(args.steps),
                               "--preset", args.preset, "--threads", "1"], env=env0, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    res = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    print(f"{'trainer, 2 workers x 1 thread (sum of both)':52s} {sum(r['tokens_per_second'] for r in res):9.0f} "
          f"{sum(r['tokens_per_cpu_second'] for r in res) / 2:10.0f} {load:5.1f}")
    print("\nattention core alone, fwd+bwd ms, [B=64, H=4, S=110, D=32] (best of 3)")
    for threads, extra in ((1, {}), (2, {}), (2, {"OMP_WAIT_POLICY": "PASSIVE"})):
        r = subprocess.run([sys.executable, "-m", "tiny_vlm.bench", "--core", str(threads)],
                           env={**env0, **extra}, capture_output=True, text=True)
        if r.returncode:
            print(f"threads {threads}: failed {r.stderr[-300:]}")
            continue
        label = f"{threads} thread(s)" + (" PASSIVE" if extra else "")
        for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items():
            print(f"  {label:20s} {k:48s} {v:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
