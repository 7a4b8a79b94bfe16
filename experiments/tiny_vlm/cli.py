"""Command line: the worker pool / DDP driver, progress, Ctrl-C (the options are read by plan.py)."""

from __future__ import annotations

import collections
import datetime
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

from . import limits
from .limits import InputError
from .plan import Plan, resolve

# ------------------------------------------------------------------ running ---
# The driver and each worker process talk over a pipe of their own: the worker asks for a run
# ("ready"), the driver answers with one (index, config, checkpoint folder) or None (no more);
# the worker reports ("progress", ...), ("done", index, result) or ("error", index, message); the
# driver may send "stop" (Ctrl-C) at any time. Nothing is shared between workers (no queue, lock
# or event that a worker killed while holding it would leave held), so the driver always knows
# which run each worker holds, and a worker that dies (OOM killer, a signal) is seen at once by
# its process sentinel: its run is recorded as failed, with how the worker ended.

def _worker(conn, threads: int, parent: int, streams: Optional[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; we finish the step and report
    import torch
    torch.set_num_threads(threads)   # runs share the cores: one thread each by default
    torch.set_num_interop_threads(1)
    from .train import train
    stopped = False

    def should_stop() -> bool:
        # A parent killed outside Python (SIGKILL) never stops us by a message: daemon processes
        # are ended only by an exiting interpreter, so an orphan would train on for the rest of
        # its runs. Its end of the pipe closes, and our parent changes.
        nonlocal stopped
        try:
            while not stopped and conn.poll():
                stopped = conn.recv() == "stop"
        except (EOFError, OSError):
            stopped = True
        return stopped or os.getppid() != parent
    try:
        while True:
            conn.send(("ready",))
            job = conn.recv()
            if not isinstance(job, tuple) or should_stop():
                return
            index, cfg, save_to = job

            def progress(step, loss, tps, index=index):
                conn.send(("progress", index, step, loss, tps))
            try:
                result = train(cfg, progress, should_stop, stream_root=streams, save_to=save_to)
            except Exception as e:  # noqa: BLE001 - report it, take the next run
                conn.send(("error", index, limits.one_line(f"{type(e).__name__}: {e}")))
                continue
            conn.send(("done", index, result))
    except (EOFError, OSError):   # the driver is gone
        return


def how_it_ended(exitcode: Optional[int]) -> str:
    """A worker process's end in words: killed by a signal (the OOM killer sends SIGKILL), or
    exited with a status."""
    if exitcode is None:
        return "did not end"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"its worker was killed by signal {-exitcode} ({name})"
    return f"its worker exited with status {exitcode} without finishing it"


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


class _Slot:
    """One worker process, the driver's end of its pipe, and the run it holds (None: none)."""

    def __init__(self, process, conn):
        self.process, self.conn = process, conn
        self.running: Optional[int] = None
        self.open = True      # the pipe, until it reads EOF
        self.ended = False    # the process, once the driver has seen it end


def run_pool(plan: Plan, results: Dict[int, dict], failed: Dict[int, str], log) -> bool:
    """Runs every config in `workers` processes; a run that raised or whose worker died goes
    into `failed` (index -> how), the others run on. Returns False when interrupted."""
    from multiprocessing.connection import wait
    from .stream import stream_id
    ctx = mp.get_context("spawn")
    queued = collections.deque(range(len(plan.configs)))
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
    slots = []
    for _ in range(n):
        here, there = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(there, plan.threads, os.getpid(), plan.streams), daemon=True)
        p.start()
        there.close()
        slots.append(_Slot(p, here))
    progress = Progress(plan, sys.stderr.isatty() or os.environ.get("TINY_VLM_PROGRESS") == "1", log)
    names = {i: f"{c.arm.name}/s{c.seed}" for i, c in enumerate(plan.configs)}
    state = {"stopping": False}

    def send(slot: _Slot, message) -> None:
        try:
            slot.conn.send(message)
        except OSError:   # the worker is gone: its sentinel tells how
            pass

    def fail(index: int, how: str) -> None:
        failed[index] = how
        finished(index)
        progress.finish(index)
        log(f"{names[index]} failed: {how}")

    def receive(slot: _Slot, message) -> None:
        kind = message[0]
        if kind == "ready":
            slot.running = None
            if queued and not state["stopping"]:
                slot.running = queued.popleft()
                send(slot, (slot.running, plan.configs[slot.running], plan.checkpoint(plan.configs[slot.running])))
            else:
                send(slot, None)
        elif kind == "progress":
            progress.update(message[1], names[message[1]], *message[2:])
        elif kind == "done":
            slot.running = None
            results[message[1]] = message[2]
            finished(message[1])
            progress.finish(message[1])
            r = message[2]
            log(f"{names[message[1]]}: {r['steps']} steps, final loss "
                f"{r['loss'][-1] if r['loss'] else float('nan'):.3f}, {r['tokens_per_second']:.0f} tokens/s"
                + (" (interrupted)" if r["interrupted"] else ""))
        elif kind == "error":
            slot.running = None
            fail(message[1], f"raised {message[2]}")

    def read(slot: _Slot) -> None:
        """Every message waiting in the slot's pipe."""
        try:
            while slot.open and slot.conn.poll():
                receive(slot, slot.conn.recv())
        except (EOFError, OSError):   # closed; a half-written message of a killed worker reads as EOF
            slot.open = False

    def serve(deadline: Optional[float] = None) -> None:
        """Answers and records the workers' messages until every worker has ended (or the
        deadline passes). A worker that ended holding a run fails that run."""
        while not all(s.ended for s in slots):
            if deadline is not None and time.time() > deadline:
                return
            live = [s for s in slots if not s.ended]
            ready = wait([s.conn for s in live if s.open] + [s.process.sentinel for s in live], timeout=1.0)
            for s in live:
                if s.conn in ready:
                    read(s)
                if s.process.sentinel in ready:
                    s.process.join()
                    read(s)   # what it sent before it ended
                    s.open, s.ended = False, True
                    if s.running is not None:
                        fail(s.running, how_it_ended(s.process.exitcode))
                        s.running = None
    interrupted = False
    try:
        serve()
    except KeyboardInterrupt:
        interrupted = True
        state["stopping"] = True
        log("interrupted: finishing the current steps and saving what was measured")
        for s in slots:
            send(s, "stop")
        try:
            serve(deadline=time.time() + 120)
        except KeyboardInterrupt:
            pass
    finally:
        state["stopping"] = True
        progress.close()
        for s in slots:
            send(s, "stop")
        for s in slots:
            s.process.join(timeout=5)
            if s.process.is_alive():
                s.process.terminate()
                s.process.join(timeout=5)
                if s.running is not None and s.running not in results:
                    failed[s.running] = "its worker did not stop within 120 s of Ctrl-C and was terminated"
            s.conn.close()
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

    names = [f"{c.arm.name}/s{c.seed}" for c in plan.configs]
    not_run: List[str] = []   # runs never started (every worker ended first): known at the end
    interrupted = [False]     # by Ctrl-C: known at the end

    def save(complete: bool, final: bool) -> List[str]:
        meta = {"preset": plan.preset, "argv": argv, "settings": plan.settings, "complete": complete,
                "interrupted": interrupted[0],
                "failed": [{"run": names[i], "how": failed[i]} for i in sorted(failed)], "not_run": not_run,
                "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
                "wall_seconds": time.time() - started, "machine_start": before, "machine_end": machine(),
                "git": git, "torch": torch.__version__, "distributed_world": int(os.environ.get("WORLD_SIZE", "1")),
                "workers": plan.workers, "threads": plan.threads}
        ordered = [results[i] for i in sorted(results)]
        return report.write(plan, ordered, meta, dict(content), plots=final)

    class Saving(dict):
        """Writes results.json / results.md after every finished or failed run: a run killed
        from outside (not by Ctrl-C) still leaves what was finished, and says what failed."""
        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            if rank == 0 and len(results) < len(plan.configs):
                save(False, False)

    results: Dict[int, dict] = Saving()     # index -> what the run measured
    failed: Dict[int, str] = Saving()       # index -> how it failed (raised, or its worker died)
    if distributed:
        finished = run_ddp(plan, results, log)
    else:
        finished = run_pool(plan, results, failed, log)
    # Complete: every run finished, none failed, none interrupted (not merely "no Ctrl-C").
    complete = finished and not failed and len(results) == len(plan.configs) \
        and not any(r["interrupted"] for r in results.values())
    not_run += [names[i] for i in range(len(plan.configs)) if i not in results and i not in failed]
    interrupted[0] = not finished
    if rank == 0:
        if finished:
            baselines.join()
        paths = save(complete, True)
        state = "" if complete else " (partial: interrupted)" if not finished else " (incomplete)"
        log(f"wrote {', '.join(paths)} in {time.time() - started:.0f} s" + state)
        if failed or (finished and not_run):
            log("incomplete: " + "; ".join([f"{names[i]} failed ({failed[i]})" for i in sorted(failed)]
                                            + ([f"{len(not_run)} run(s) not run: " + ", ".join(not_run[:10])
                                                + (" ..." if len(not_run) > 10 else "")] if not_run else [])))
    if distributed:
        import torch.distributed as dist
        dist.destroy_process_group()
    if not finished:
        return 130
    return 0 if complete else 1
