"""Command line: bad values exit with one line; a micro run writes every output; a fixed seed
gives identical results twice."""

import io
import json
import os
import re
import select
import subprocess
import sys
import time
from contextlib import redirect_stderr

import pytest

from tiny_vlm import cli, data
from tiny_vlm.plan import resolve
from tiny_vlm.arms import ALL

BAD = [
    (["quick", "--arms", "mrope,helix"], "unknown arm 'helix'"),
    (["quick", "--steps", "-5"], "--steps must be an integer in [1, 1000000], got -5"),
    (["quick", "--steps", "ten"], "--steps must be an integer in [1, 1000000], got 'ten'"),
    (["quick", "--train-grids", "12x13"], "12x13 has w=13, not divisible by --merge 2"),
    (["quick", "--train-grids", "12x12", "--eval-grid", "9x12"], "--eval-grids: 9x12 has h=9, not divisible by --merge 2"),
    (["quick", "--gaps", "4,12"], "--gap-filler 8,16: fewer than 12 filler tokens cannot move 12 of them"),
    (["quick", "--gaps", "4,x"], "--gaps must be an integer in [0, 512], got 'x'"),
    (["quick", "--secondary-arms", "vanilla,circle"], "--secondary-arms: circle is also a primary arm"),
    (["quick", "--objects", "1,8"], "--objects 1,8: neighbour and relation questions need at least 2 objects"),
    (["quick", "--train-grids", "2x24"], "a 1x12-cell grid cannot hold two objects in different rows and columns"),
    (["quick", "--seeds", "3,3"], "--seeds 3,3: a seed is listed twice"),
    (["quick", "--attention", "flash"], "--attention 'flash' (expected sdpa, bmm or naive)"),
    (["quick", "--lr", "nan"], "--lr must be a finite number in (0, 1], got 'nan'"),
    (["quick", "--arms", "plan=CX"], "arm 'plan=CX'"),
    (["quick", "--arms", "plan=C:r=-1"], "arm 'plan=C:r=-1'"),
    (["quick", "--arms", "plan=C:a=2"], "arm 'plan=C:a=2'"),
    (["quick", "--arms", "mrope,mrope"], "listed twice"),
    (["quick", "--sections", "4,6,5"], "--sections 4,6,5"),
    (["quick", "--width", "100", "--heads", "3"], "--width 100"),
    (["quick", "--objects", "3,40"], "--objects must be an integer in [1, 32], got 40"),
    (["hourly"], "unknown preset 'hourly'"),
    (["quick", "--bogus", "1"], "unrecognized arguments: --bogus 1"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_values_give_one_line(argv, message):
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(argv)
    text = err.getvalue()
    assert code == 2
    assert text.count("\n") == 1 and text.startswith("tiny_vlm: error: "), text
    assert message in text, text


def test_bad_value_exit_code_from_the_command(env):
    p = subprocess.run([sys.executable, "-m", "tiny_vlm", "quick", "--arms", "nope"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "unknown arm 'nope'" in p.stderr


def test_named_arms_and_the_full_preset():
    assert ALL == ["vanilla", "unordered", "mrope", "circle", "age-alternate", "mrope-interleaved",
                   "circle-interleaved", "circle-small", "mrope-spread", "mrope-patchpos", "circle-patchpos"]
    plan = resolve(["full"])
    primary = ["mrope", "circle", "mrope-interleaved", "circle-interleaved", "age-alternate"]
    assert plan.primary == primary and [a.name for a in plan.arms] == primary + ["vanilla", "unordered"]
    assert len(plan.seeds) >= 12          # the declared contrasts' seeds (docs/experiment.md)
    runs = {(c.arm.name, c.seed) for c in plan.configs}
    assert all((a, s) in runs for a in primary for s in plan.seeds)
    # every declared contrast's arms are primary: paired on every seed
    from tiny_vlm.report import DECLARED
    assert {a for c in DECLARED for a in c.plus + c.minus} <= set(primary)


def test_micro_run_writes_every_output(tmp_path, env):
    out = tmp_path / "out"
    try:
        import matplotlib  # noqa: F401  (scripts/experiment.sh installs it; scripts/setup.sh does not)
        plots = True
    except ImportError:
        plots = False
    p = subprocess.run([sys.executable, "-m", "tiny_vlm", "micro", "--out", str(out), "--workers", "2"]
                       + ([] if plots else ["--no-plots"]), env=env, capture_output=True, text=True,
                       timeout=HANG_SECONDS)
    assert p.returncode == 0, p.stderr
    # The issue asks for a micro run under 60 s. Its time is mostly fixed costs (three
    # interpreters importing torch, the plots) and follows the machine's load: ~20 s of wall
    # time and ~40 CPU-s alone on a 2-core machine, 62 CPU-s with the other core busy (a shared
    # core slows even CPU time). So no time is asserted; what is held fixed is the work the
    # preset asks for (steps, batch, evaluated questions), which is what would make it slow.
    pngs = ("accuracy.png", "lookup_heatmaps.png", "loss_curves.png") if plots else ()
    for name in ("results.json", "results.md") + pngs:
        assert (out / name).stat().st_size > 0, name
        if name.endswith(".png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["git"]["commit"] and doc["meta"]["settings"]["steps"] == 4
    assert doc["meta"]["settings"]["batch"] == 8 and doc["meta"]["settings"]["eval_seqs"] == 8
    assert [r["arm"] for r in doc["runs"]] == ["mrope", "circle"]
    splits = {"train", "gap-0", "gap-2", "grid-6x6", "unseen-length", "question-before-image"}
    for r in doc["runs"]:
        assert len(r["loss"]) == 4 and r["tokens_per_second"] > 0
        assert set(r["splits"]) == splits
        for split in r["splits"].values():
            assert sum(split["questions"].values()) == 8 * 4   # eval_seqs x questions, one split
            assert set(split["accuracy"]) == set(data.QUESTION_TYPES)
            assert set(split["majority_baseline"]) == set(data.QUESTION_TYPES)
        assert set(r["drop"]) == splits - {"train"} and r["drop"]["gap-2"]["reference"] == "gap-0"
        assert r["coupling"]["train"]
        assert [layer["moved_tv"] is not None for layer in r["attention"]["layers"]] == [True] * 4
        ckpt = out / "checkpoints" / f"{r['arm']}-s0"
        assert (ckpt / "model.pt").stat().st_size > 0
        assert json.loads((ckpt / "run.json").read_text())["result"]["splits"]["train"]["accuracy"] == \
            r["splits"]["train"]["accuracy"]
    assert set(doc["content_baseline"]) == splits
    assert doc["content_baseline"]["train"]["accuracy"]["count"] == 1.0
    assert [c["key"] for c in doc["contrasts"]["declared"]] == ["C1", "C2", "C3", "C4", "C5"]
    assert doc["summary"]["circle"]["accuracy"]["grid-6x6"]["lookup"][0] is not None
    assert not (out / ".streams").exists()   # the shared batches are deleted with the seed's last run
    md = (out / "results.md").read_text()
    assert "| mrope |" in md and "*majority*" in md and "*content*" in md and "## Declared contrasts" in md


def test_fixed_seed_gives_identical_results_twice():
    import torch
    from tiny_vlm.train import train
    plan = resolve(["micro", "--arms", "age-alternate", "--steps", "3"])
    a = train(plan.configs[0])
    b = train(plan.configs[0])
    assert a["loss"] == b["loss"] and a["splits"] == b["splits"] and a["curve"] == b["curve"]
    c = train(resolve(["micro", "--arms", "age-alternate", "--steps", "3", "--seeds", "4,5"]).configs[0])
    assert c["loss"] != a["loss"]


# Hang guards, not speed requirements: a micro run takes ~20 s on an idle 2-core machine, up to
# ~200 s when the machine is oversubscribed five times (measured with two builds, both test
# suites and a busy loop on it). ctest's TIMEOUT of the whole suite (900 s) comes first anyway.
HANG_SECONDS = int(os.environ.get("TINY_VLM_TEST_HANG", "600"))  # a hang guard; shorter while reproducing a hang
PROGRESS = re.compile(r"(\S+): step (\d+), loss")     # the non-terminal log: a line per run every tenth of its steps


def _read_until(p, pattern, timeout=HANG_SECONDS):
    """Reads p's stderr (a binary pipe) until `pattern` is found in what was read (patterns are
    self-delimiting: tqdm ends its lines with a carriage return only), or the stream ends, or
    `timeout` seconds pass (a hang: the caller fails, showing what was read). Returns (text
    read, match or None)."""
    fd, data = p.stderr.fileno(), b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
            m = pattern.search(data.decode(errors="replace"))
            if m:
                return data.decode(errors="replace"), m
    return data.decode(errors="replace"), None


def _stop(p) -> None:
    if p.poll() is None:
        p.kill()
        p.wait()


def test_ctrl_c_saves_what_was_measured(tmp_path, env):
    import signal
    out, steps = tmp_path / "int", 100
    p = subprocess.Popen([sys.executable, "-m", "tiny_vlm", "micro", "--steps", str(steps), "--workers", "2",
                          "--no-plots", "--out", str(out)], env=env, stderr=subprocess.PIPE)
    try:
        # Ctrl-C when the first run reports step 10. The two runs go in parallel but not in step:
        # the other may be further, behind, or not started yet (under load it was at step 8),
        # so each run is held to what it reported itself.
        seen, first = _read_until(p, re.compile(r"(\S+): step 10, loss"))
        assert first, seen
        p.send_signal(signal.SIGINT)
        _, rest = p.communicate(timeout=HANG_SECONDS)
    finally:
        _stop(p)
    rest = rest.decode(errors="replace")
    log = seen + rest
    assert p.returncode == 130, log
    assert "interrupted" in rest
    reported = {}                       # the last step each run reported (before the driver saw Ctrl-C)
    for name, step in PROGRESS.findall(log):
        reported[name] = max(reported.get(name, 0), int(step))
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["complete"] is False
    runs = {f"{r['arm']}/s{r['seed']}": r for r in doc["runs"]}
    # Every run that had reported a step is saved (one still starting up may have none); the
    # one that reported step 10 was 90 steps from its end: stopped, with what it had measured.
    assert set(reported) <= set(runs), (sorted(runs), log)
    assert runs[first.group(1)]["interrupted"] and 10 <= runs[first.group(1)]["steps"] < steps
    for name, r in runs.items():
        assert len(r["loss"]) == r["steps"] >= reported.get(name, 0), (name, r["steps"], log)
        assert all(c["step"] <= r["steps"] for c in r["curve"]), name
        if r["interrupted"]:
            assert r["steps"] < steps and "splits" not in r, name
        else:                           # a run may have finished before the signal came
            assert r["steps"] == steps and "splits" in r, name
    assert "interrupted" in (out / "results.md").read_text()


def test_ctrl_c_exits_with_more_queued_runs_than_a_pipe_holds(tmp_path, env):
    # 80 queued runs are ~85 kB of pickled configs, more than a pipe's 64 kB: the queue's feeder
    # thread still holds some when Ctrl-C comes, and nobody will read them. The driver must
    # still exit (it hung at exit in a full run, joining that thread).
    import signal
    out = tmp_path / "many"
    p = subprocess.Popen([sys.executable, "-m", "tiny_vlm", "micro", "--seeds", "40", "--steps", "100",
                          "--workers", "2", "--no-plots", "--out", str(out)], env=env, stderr=subprocess.PIPE)
    try:
        seen, first = _read_until(p, re.compile(r"(\S+): step 10, loss"))
        assert first, seen
        p.send_signal(signal.SIGINT)
        try:
            _, rest = p.communicate(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the driver did not exit {HANG_SECONDS} s after Ctrl-C:\n{seen}")
    finally:
        _stop(p)
    assert p.returncode == 130, seen + rest.decode(errors="replace")
    assert json.loads((out / "results.json").read_text())["meta"]["complete"] is False


def die_with_the_test():
    """preexec_fn: a killed pytest (a ctest timeout) kills the driver, so no run leaks."""
    import ctypes
    import signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _children(pid: int):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:
        return ""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # exited, maybe not reaped
    except OSError:
        return True


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads worker pids from /proc (Linux)")
def test_workers_of_a_killed_driver_stop(tmp_path, env):
    """SIGKILL leaves no cleanup to the driver: its daemon workers used to train on as orphans."""
    import signal
    # Runs far longer than any wait below (an orphan would train for over two hours here, and
    # 15 min on a machine 10x faster), and the progress bar (TINY_VLM_PROGRESS=1), which counts
    # every step, instead of log lines every tenth of the steps: the driver is killed as soon
    # as a worker is inside its training loop.
    env = dict(env, TINY_VLM_PROGRESS="1")
    p = subprocess.Popen([sys.executable, "-m", "tiny_vlm", "micro", "--steps", "50000", "--workers", "2",
                          "--no-plots", "--out", str(tmp_path / "killed")], env=env, stderr=subprocess.PIPE,
                         preexec_fn=die_with_the_test)
    try:
        seen, m = _read_until(p, re.compile(r"\b([1-9]\d*)/100000 \["))   # tqdm: "n/total [" with n >= 1
        assert m, seen
        workers = [c for c in _children(p.pid) if "spawn_main" in _cmdline(c)]
        assert len(workers) == 2, (workers, seen)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=HANG_SECONDS)
    # A worker sees its parent gone at its next step (a fraction of a second); one still starting
    # up sees it before its first. Polled, with a deadline only against a hang: an orphan that
    # does not stop runs far beyond it.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not all(_gone(w) for w in workers):
        time.sleep(0.2)
    left = [w for w in workers if not _gone(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left, f"workers {left} still ran 300 s after their driver was killed"


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads worker pids from /proc (Linux)")
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_killed_worker_fails_its_run_and_the_results_say_so(tmp_path, env, sig):
    """A worker killed from outside (the OOM killer sends SIGKILL) made the driver exit 0 with
    meta.complete true and runs []. Its run fails, named with how its worker ended; the run it
    never started is listed as not run; the driver exits 1."""
    import signal
    number = int(getattr(signal, sig))
    out = tmp_path / "out"
    # One worker, two runs: the worker holds circle/s0 once it reports a step.
    p = subprocess.Popen([sys.executable, "-m", "tiny_vlm", "micro", "--arms", "circle", "--seeds", "2",
                          "--steps", "50000", "--workers", "1", "--no-plots", "--out", str(out)],
                         env=dict(env, TINY_VLM_PROGRESS="1"), stderr=subprocess.PIPE, preexec_fn=die_with_the_test)
    try:
        seen, m = _read_until(p, re.compile(r"\b([1-9]\d*)/100000 \["))
        assert m, seen
        workers = [c for c in _children(p.pid) if "spawn_main" in _cmdline(c)]
        assert len(workers) == 1, (workers, seen)
        os.kill(workers[0], number)
        _, rest = p.communicate(timeout=HANG_SECONDS)
    finally:
        _stop(p)
    log = seen + rest.decode(errors="replace")
    how = f"its worker was killed by signal {number} ({sig})"
    assert p.returncode == 1, log
    assert f"circle/s0 failed: {how}" in log and "1 run(s) not run: circle/s1" in log, log
    assert "Traceback" not in log, log
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["complete"] is False and doc["meta"]["interrupted"] is False
    assert doc["runs"] == []
    assert doc["meta"]["failed"] == [{"run": "circle/s0", "how": how}]
    assert doc["meta"]["not_run"] == ["circle/s1"]
    assert f"**incomplete**: circle/s0 failed: {how}; not run: circle/s1" in (out / "results.md").read_text()


def test_a_run_that_raises_fails_alone_and_the_others_go_on(tmp_path, env):
    """A run whose training raises (here: its seed's data stream holds a crafted chunk, refused
    by torch.load(weights_only=True)) fails with one line; the worker takes the next run."""
    import torch
    from tiny_vlm.stream import stream_id
    out = tmp_path / "out"
    argv = ["micro", "--arms", "circle", "--seeds", "2", "--steps", "4", "--workers", "1", "--no-plots", "--out", str(out)]
    bad = resolve(argv).configs[0]
    (out / ".streams" / stream_id(bad)).mkdir(parents=True)
    made = tmp_path / "created-by-the-pickle"

    class Creates:
        def __reduce__(self):
            return (open, (str(made), "w"))
    torch.save([Creates()], out / ".streams" / stream_id(bad) / "chunk00000.pt")
    p = subprocess.run([sys.executable, "-m", "tiny_vlm", *argv], env=dict(env, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1"),
                       capture_output=True, text=True, timeout=HANG_SECONDS)
    assert not made.exists()
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    doc = json.loads((out / "results.json").read_text())
    assert [f"{r['arm']}/s{r['seed']}" for r in doc["runs"]] == ["circle/s1"]
    [failed] = doc["meta"]["failed"]
    assert failed["run"] == "circle/s0" and failed["how"].startswith("raised InputError: "), failed
    assert "chunk00000.pt: refused by torch.load(weights_only=True)" in failed["how"], failed
    assert doc["meta"]["complete"] is False and doc["meta"]["not_run"] == []
    assert "circle/s0 failed: raised InputError" in p.stderr


def test_eval_reproduces_what_the_run_recorded(tmp_path, env):
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "tiny_vlm", "micro", "--arms", "circle", "--steps", "40", "--workers", "1",
                        "--eval-seqs", "24", "--no-plots", "--out", str(out)], env=env, capture_output=True, text=True,
                       timeout=HANG_SECONDS)
    assert p.returncode == 0, p.stderr
    run = json.loads((out / "results.json").read_text())["runs"][0]
    ckpt = out / "checkpoints" / "circle-s0"
    for options, split in ((["--grid", "12x12"], "grid-6x6"), ([], "train"),
                           (["--gap", "2", "--prefix", "2,6"], "gap-2"), (["--split", "question-before-image"],
                                                                           "question-before-image")):
        written = tmp_path / f"{split}.json"
        e = subprocess.run([sys.executable, "-m", "tiny_vlm", "eval", "--checkpoint", str(ckpt), *options,
                            "--content-samples", "4", "--out", str(written)], env=env, capture_output=True, text=True,
                           timeout=HANG_SECONDS)
        assert e.returncode == 0, e.stderr
        got = json.loads(written.read_text())
        assert got["recorded"]["split"] == split, (options, got["recorded"])
        assert got["accuracy"] == run["splits"][split]["accuracy"], (split, got["accuracy"])
        assert got["questions"] == run["splits"][split]["questions"]
        assert f"the run's split '{split}'" in e.stdout and "content" in e.stdout
    # the run learned something: the reproduced numbers are not all zero
    assert max(run["splits"]["train"]["accuracy"].values()) > 0.3, run["splits"]["train"]["accuracy"]
    # another split is another set of sequences
    e = subprocess.run([sys.executable, "-m", "tiny_vlm", "eval", "--checkpoint", str(ckpt), "--grid", "16x16",
                        "--questions", "lookup,count", "--content-samples", "0", "--out", str(tmp_path / "x.json")],
                       env=env, capture_output=True, text=True, timeout=HANG_SECONDS)
    assert e.returncode == 0, e.stderr
    got = json.loads((tmp_path / "x.json").read_text())
    assert got["recorded"] is None and set(got["accuracy"]) == {"lookup", "count"}


@pytest.mark.parametrize("argv,message", [
    (["--checkpoint", "/nonexistent"], "--checkpoint '/nonexistent': no model.pt there"),
])
def test_eval_bad_values_give_one_line(argv, message):
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["eval", *argv])
    assert code == 2 and err.getvalue().count("\n") == 1 and message in err.getvalue(), err.getvalue()


def test_a_folder_keeps_its_results_as_json_or_gzip(tmp_path):
    """report.load_results reads results.json, else results.json.gz (docs/experiment/full keeps
    the gzip), and names the folder when it holds neither."""
    import gzip
    import json

    import pytest
    from tiny_vlm.report import load_results

    doc = {"meta": {"preset": "x"}, "runs": [{"arm": "circle", "loss": [1.5, 0.25]}]}
    with gzip.open(tmp_path / "results.json.gz", "wt") as f:
        json.dump(doc, f)
    assert load_results(str(tmp_path)) == doc
    (tmp_path / "results.json").write_text(json.dumps({"runs": []}))
    assert load_results(str(tmp_path)) == {"runs": []}  # the plain file first
    with pytest.raises(FileNotFoundError, match="neither results.json nor results.json.gz"):
        load_results(str(tmp_path / "empty"))
