"""Command line: the worker pool / DDP driver, progress, Ctrl-C (the options are read by plan.py)."""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

from .limits import InputError
from .plan import Plan, resolve

# ------------------------------------------------------------------ running ---
def _worker(jobs, events, stop, threads: int, parent: int, streams: Optional[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; we finish the step and report
    import torch
    torch.set_num_threads(threads)   # runs share the cores: one thread each by default
    torch.set_num_interop_threads(1)
    from .train import train

    def should_stop() -> bool:
        # A parent killed outside Python (SIGKILL) never stops us: daemon processes are ended
        # only by an exiting interpreter, so an orphan would train on for the rest of its runs.
        return stop.is_set() or os.getppid() != parent
    while True:
        try:
            index, cfg, save_to = jobs.get_nowait()
        except queue.Empty:
            return
        if should_stop():
            return

        def progress(step, loss, tps, index=index):
            events.put(("progress", index, step, loss, tps))
        try:
            result = train(cfg, progress, should_stop, stream_root=streams, save_to=save_to)
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
    from .stream import stream_id
    ctx = mp.get_context("spawn")
    jobs, events, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    for i, cfg in enumerate(plan.configs):
        jobs.put((i, cfg, plan.checkpoint(cfg)))
    n = min(plan.workers or os.cpu_count() or 1, len(plan.configs))
    # A seed's batches are made once for all its arms (stream.py) and deleted after its last run.
    pending: Dict[str, int] = {}
    for cfg in plan.configs:
        pending[stream_id(cfg)] = pending.get(stream_id(cfg), 0) + 1

    def finished(index: int) -> None:
        sid = stream_id(plan.configs[index])
        pending[sid] -= 1
        if not pending[sid]:
            shutil.rmtree(os.path.join(plan.streams, sid), ignore_errors=True)
    procs = [ctx.Process(target=_worker, args=(jobs, events, stop, plan.threads, os.getpid(), plan.streams), daemon=True)
             for _ in range(n)]
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
                finished(ev[1])
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
        # Runs still queued are dropped: more than a pipe holds (full's 64 configs are ~80 kB)
        # leaves them in the queue's feeder thread, which the interpreter would join at exit,
        # waiting forever for a worker to read them.
        jobs.cancel_join_thread()
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
    shutil.rmtree(plan.streams, ignore_errors=True)
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
            r = train(cfg, lambda s, l, t, i=i, name=name: progress.update(i, name, s, l, t), lambda: flag["stop"],
                      save_to=plan.checkpoint(cfg))
            results[i] = r
            progress.finish(i)
            if rank == 0:
                log(f"{name}: {r['steps']} steps, {r['tokens_per_second']:.0f} tokens/s on {r['world_size']} processes")
            if r["interrupted"]:
                return False
    finally:
        progress.close()
    return True


def content_baselines(plan: Plan, out: Dict[str, dict]) -> None:
    """content.baseline of every split's evaluation sequences into out[split] (in a thread)."""
    from . import content
    from .train import eval_examples, split_seqs
    cfg = plan.configs[0]
    for name, layout in cfg.evals.items():
        examples = eval_examples(cfg.eval_seed, layout, split_seqs(cfg, layout, cfg.eval_seqs))
        out[name] = content.baseline(examples, layout.key(), plan.content_samples)


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
    if argv[:1] == ["eval"]:
        from .evaluate import main as evaluate
        return evaluate(argv[1:])
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    try:
        plan = resolve(argv)
    except InputError as e:
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
    log(f"{plan.preset}: {len(plan.configs)} runs ({len(plan.primary)} primary arms x {len(plan.seeds)} seeds"
        + (f", {len(plan.arms) - len(plan.primary)} secondary arms x {len(plan.settings['secondary_seed_list'])} seeds"
           if len(plan.arms) > len(plan.primary) else "")
        + f"), {plan.configs[0].steps} steps of {plan.configs[0].batch} sequences; load average "
        f"{before['load_average'][0]:.1f} on {before['cores']} cores; output {plan.out}")
    git = git_commit()
    content: Dict[str, dict] = {}
    baselines = None
    if rank == 0:   # the content-only baseline of every split, beside the runs (the driver is idle)
        baselines = threading.Thread(target=content_baselines, args=(plan, content), daemon=True)
        baselines.start()

    def save(complete: bool, final: bool) -> List[str]:
        meta = {"preset": plan.preset, "argv": argv, "settings": plan.settings, "complete": complete,
                "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
                "wall_seconds": time.time() - started, "machine_start": before, "machine_end": machine(),
                "git": git, "torch": torch.__version__, "distributed_world": int(os.environ.get("WORLD_SIZE", "1")),
                "workers": plan.workers, "threads": plan.threads}
        ordered = [results[i] for i in sorted(results)]
        return report.write(plan, ordered, meta, dict(content), plots=final)

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
        if complete:
            baselines.join()
        paths = save(complete, True)
        log(f"wrote {', '.join(paths)} in {time.time() - started:.0f} s" + ("" if complete else " (partial)"))
    if distributed:
        import torch.distributed as dist
        dist.destroy_process_group()
    return 0 if complete else 130
