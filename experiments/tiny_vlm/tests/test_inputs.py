"""Every input is checked against the ranges of limits.py before any work, with one line (code 2):
the command line's flags, the presets, a checkpoint's run.json and model.pt, a results.json and a
seed's data stream. A file never runs code: torch.load(weights_only=True) everywhere."""

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from contextlib import redirect_stderr

import pytest
import torch

from tiny_vlm import cli, limits
from tiny_vlm.checkpoint import check_run, config_from_json, load, read_run
from tiny_vlm.plan import PRESETS, resolve
from tiny_vlm.train import config_json

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = os.path.join(HERE, "..", "..", "..", "docs", "experiment", "full", "checkpoints", "circle-s4")


class Creates:
    """Unpickling it would create the file `path` (what a crafted checkpoint would do)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def ckpt(tmp_path):
    """A copy of a checkpoint kept in the repository (the full run's circle, seed 4)."""
    folder = tmp_path / "ckpt"
    shutil.copytree(KEPT, folder)
    return folder


def run_eval(argv):
    """`tiny_vlm eval ARGV` in this process: (exit code, stderr)."""
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["eval", *argv])
    return code, err.getvalue()


def assert_one_line(code, text, *parts, prefix="tiny_vlm eval: error: "):
    assert code == 2, text
    assert text.count("\n") == 1 and text.startswith(prefix) and "Traceback" not in text, text
    for part in parts:
        assert part in text, text


# ------------------------------------------------------------------ torch.load ---
@pytest.mark.parametrize("forced", [False, True], ids=["torch-default", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"])
@pytest.mark.parametrize("form", ["torch.save", "plain-pickle"])
def test_a_crafted_model_pt_runs_no_code(ckpt, tmp_path, env, forced, form):
    # Under the environment variable, a torch.load without weights_only=True runs the pickle;
    # under torch's default (weights_only=True since 2.6) it refused with a 23-line traceback.
    made = tmp_path / "created-by-the-pickle"
    if form == "torch.save":
        torch.save({"embed.weight": Creates(str(made))}, ckpt / "model.pt")
    else:
        (ckpt / "model.pt").write_bytes(pickle.dumps(Creates(str(made))))
    if forced:
        env = dict(env, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    p = subprocess.run([sys.executable, "-m", "tiny_vlm", "eval", "--checkpoint", str(ckpt), "--seqs", "2",
                        "--content-samples", "0", "--out", str(tmp_path / "e.json")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert not made.exists(), "the checkpoint's pickle ran"
    assert_one_line(p.returncode, p.stderr, str(ckpt / "model.pt"))
    assert p.stdout == "" and not (tmp_path / "e.json").exists()
    if form == "torch.save":
        assert "weights_only=True" in p.stderr and "unsupported" in p.stderr.lower(), p.stderr


def test_a_crafted_stream_chunk_runs_no_code(tmp_path, monkeypatch):
    from tiny_vlm.stream import Stream
    from tiny_vlm.train import train_examples
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    cfg = resolve(["micro", "--no-plots"]).configs[0]
    stream = Stream(str(tmp_path / "streams"), cfg, lambda step: train_examples(cfg, step, range(cfg.batch)))
    made = tmp_path / "created-by-the-pickle"
    torch.save([Creates(str(made))], stream._path(0))
    with pytest.raises(limits.InputError) as e:
        stream.packed(0)
    assert not made.exists()
    assert str(e.value).startswith(stream._path(0)) and "\n" not in str(e.value)


@pytest.mark.parametrize("change, why", [
    (lambda b: b.__setitem__("ask", b["ask"] + 1000), "a value out of range"),
    (lambda b: b.__setitem__("feats", b["feats"][:1]), "feats is not a 3-d torch.uint8 tensor of 8 rows"),
    (lambda b: b.pop("targets"), "a batch is not a dict"),
    (lambda b: b.__setitem__("grid", b["grid"] * 100), "a value out of range"),
])
def test_a_stream_chunk_is_checked_before_a_batch_is_made_of_it(tmp_path, change, why):
    from tiny_vlm.stream import Stream
    from tiny_vlm.train import train_examples
    cfg = resolve(["micro", "--no-plots"]).configs[0]
    stream = Stream(str(tmp_path), cfg, lambda step: train_examples(cfg, step, range(cfg.batch)))
    stream.packed(0)   # makes and writes chunk 0
    batches = stream._read(0)
    change(batches[1])
    torch.save(batches, stream._path(0))
    with pytest.raises(limits.InputError, match=why):
        Stream(str(tmp_path), cfg, lambda step: None).packed(0)


# --------------------------------------------------------------------- threads ---
def test_threads_are_bounded_like_the_library():
    lo, hi = limits.thread_range()
    assert lo == 1 and hi == min(1024, os.cpu_count())
    assert resolve(["micro", "--no-plots", "--threads", str(hi)]).threads == hi
    for bad in ("100000", "1025", str(hi + 1), "0", "-1", "1e3"):
        err = io.StringIO()
        with redirect_stderr(err):
            code = cli.main(["micro", "--no-plots", "--threads", bad])
        assert_one_line(code, err.getvalue(), f"--threads must be an integer in [1, {hi}]", prefix="tiny_vlm: error: ")


def test_eval_threads_are_bounded(ckpt, tmp_path):
    code, text = run_eval(["--checkpoint", str(ckpt), "--threads", "100000", "--out", str(tmp_path / "e.json")])
    assert_one_line(code, text, "--threads must be an integer in [1, ", "got 100000")
    assert not (tmp_path / "e.json").exists()


def test_eval_threads_at_the_bound_run(ckpt, tmp_path, env):
    hi = limits.thread_range()[1]
    p = subprocess.run([sys.executable, "-m", "tiny_vlm", "eval", "--checkpoint", str(ckpt), "--threads", str(hi),
                        "--seqs", "4", "--content-samples", "0", "--out", str(tmp_path / "e.json")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "e.json").read_text())["sequences"] == 4


# ------------------------------------------------------------- eval's options ---
@pytest.mark.parametrize("argv, message", [
    (["--prefix", "1000000000"], "--prefix must be an integer in [0, 512], got 1000000000"),
    (["--prefix", "8,1000000000"], "--prefix must be an integer in [0, 512], got 1000000000"),
    (["--per-sequence", "1000000000"], "--per-sequence must be an integer in [1, 64], got 1000000000"),
    (["--seqs", "1000000000000"], "--seqs must be an integer in [1, 65536], got 1000000000000"),
    (["--seqs", "65536", "--prefix", "512"], "--seqs: 65536 sequences of up to 575 tokens are 37,683,200 tokens"),
    (["--prefix", "512"], None),   # the run's 384 sequences of up to 575 tokens: within the range
    (["--grid", "4000x4000"], "--grid: 4000x4000 has more than 16 cells on a side"),
    (["--grid", ",".join(["8x8"] * 65)], "--grid: the number of grids must be an integer in [1, 64], got 65"),
    (["--gap", "600"], "--gap must be an integer in [0, 512], got 600"),
    (["--objects", "3,100"], "--objects must be an integer in [1, 32], got 100"),
    (["--seed", "-1"], "--seed must be an integer in [0, 4294967295], got -1"),
    (["--content-samples", "100000"], "--content-samples must be an integer in [0, 4096], got 100000"),
    (["--split", "nope\x1b[2J"], "--split 'nope\\x1b[2J': the run has train, gap-0"),
    (["--out", "/nonexistent/e.json"], "--out '/nonexistent/e.json': cannot be written"),
])
def test_eval_options_are_range_checked_before_any_work(ckpt, tmp_path, argv, message):
    out = ["--out", str(tmp_path / "e.json")] if "--out" not in argv else []
    if message is None:   # accepted: checked here without running it
        from tiny_vlm.evaluate import resolve as eval_resolve
        eval_resolve(["--checkpoint", str(ckpt), *argv, *out])
        return
    code, text = run_eval(["--checkpoint", str(ckpt), *argv, *out])
    assert_one_line(code, text, message)
    assert not (tmp_path / "e.json").exists()


def test_eval_refuses_a_read_only_checkpoint_folder_without_out(ckpt):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    os.chmod(ckpt, 0o555)
    try:
        code, text = run_eval(["--checkpoint", str(ckpt), "--seqs", "2"])
    finally:
        os.chmod(ckpt, 0o755)
    assert_one_line(code, text, "cannot be written", "pass --out")


# ------------------------------------------------------------------ run.json ---
def _set(path, value):
    """A change of run.json: sets doc[path...] (None: deletes the key)."""
    def change(doc):
        *parents, last = path
        for key in parents:
            doc = doc[key]
        if value is None:
            del doc[last]
        else:
            doc[last] = value
    return change


RUN_JSON = [
    # the keys
    (_set(["config", "arm", "colour"], 1), "config.arm: unknown key 'colour'"),
    (_set(["config"], None), "run.json: missing key 'config'"),
    (_set(["config", "model", "mlp"], None), "config.model: missing key 'mlp'"),
    (_set(["config", "evals", "train", "gaps"], 2), "config.evals.train: unknown key 'gaps'"),
    (_set(["result", "splits", "train", "accuracy", "colour"], 1.0), "result.splits.train.accuracy: unknown key"),
    (lambda d: d["config"]["arm"].update(frequency_layout="chunked"), "'layout' and 'frequency_layout' both give frequency_layout"),
    # the ranges the command line has
    (_set(["config", "model", "width"], 32768), "config.model.width must be an integer in [2, 512], got 32768"),
    (_set(["config", "evals", "train", "grids"], [[4000, 4000]]), "config.evals.train.grids: a side in cells must be "
                                                                  "an integer in [1, 16], got 4000"),
    (_set(["config", "evals", "train", "grids"], [[17, 4]]), "an integer in [1, 16], got 17"),
    (_set(["config", "train", "filler"], [0, 10**9]), "config.train.filler must be an integer in [0, 512]"),
    (_set(["config", "evals", "unseen-length", "filler"], [10**9, 10**9]), "config.evals.unseen-length.filler"),
    (_set(["config", "train", "questions"], 10**9), "config.train.questions must be an integer in [1, 64]"),
    (_set(["config", "evals", "grid-8x8", "questions"], 10**9), "config.evals.grid-8x8.questions"),
    (_set(["config", "eval_seqs"], 10**12), "config.eval_seqs must be an integer in [1, 65536]"),
    (_set(["config", "eval_seqs"], 65536), "config.evals.unseen-length: 65536 sequences of up to 191 tokens"),
    (_set(["config", "curve_seqs"], 10**9), "config.curve_seqs must be an integer in [1, 65536]"),
    (_set(["config", "probe_seqs"], 10**9), "config.probe_seqs must be an integer in [1, 65536]"),
    (_set(["config", "batch"], 10**6), "config.batch must be an integer in [1, 1024]"),
    (_set(["config", "model", "layers"], 10**5), "config.model.layers must be an integer in [1, 16]"),
    (_set(["config", "model", "theta"], 0.5), "config.model.theta must be a finite number in [1, 8.50706e+37]"),
    (_set(["config", "train", "objects"], [3, 40]), "config.train.objects must be an integer in [1, 32], got 40"),
    (_set(["config", "evals", "train", "mix"], [1, 1, 1, -1]), "config.evals.train.mix must be a finite number"),
    (_set(["config", "evals", "train", "mix"], [0, 0, 0, 0]), "config.evals.train.mix: four weights"),
    (_set(["config", "eval_seed"], -1), "config.eval_seed must be an integer in [0, 4294967295], got -1"),
    # the rules between values
    (_set(["config", "evals", "grid-5x5", "objects"], [3, 30]), "config.evals.grid-5x5.objects: a grid has fewer cells"),
    (_set(["config", "evals", "gap-8", "gap"], 20), "config.evals.gap-8.gap 20: more than the 8 filler tokens"),
    (_set(["config", "evals", "question-before-image", "questions"], 12), "a question-first sequence holds one"),
    (_set(["config", "model", "sections"], [4, 6, 5]), "config.model.sections 4,6,5: three numbers summing to"),
    (_set(["config", "model", "heads"], 3), "config.model.width 64 must split into"),
    (_set(["config", "evals", "train", "name"], "other"), "config.evals.train.name 'other' is not the split's name"),
    (_set(["config", "evals", "train"], None), "config.evals must map 1 to 256 split names, 'train' among them"),
    (_set(["config", "probe"], ["gap-0", "gap-9"]), "config.probe must be [] or two of the run's splits"),
    (_set(["result", "splits", "nope"], {}), "result.splits: 'nope' is not a split of the run"),
    (_set(["result", "steps"], 10**6), "result.steps must be an integer in [1, 1400]"),
    # the types
    (_set(["config", "seed"], True), "config.seed must be an integer in [0, 4294967295], got True"),
    (_set(["config", "steps"], "1400"), "config.steps must be an integer in [1, 1000000], got '1400'"),
    (_set(["config", "steps"], 1400.0), "config.steps must be an integer in [1, 1000000], got 1400.0"),
    (_set(["config", "train", "question_first"], 0), "config.train.question_first must be true or false, got 0"),
    (_set(["config", "train", "grids"], 4), "config.train.grids must be a list, got 4"),
    (_set(["config", "model"], []), "config.model must be an object, got []"),
    (_set(["config", "attention"], []), "config.attention must be one of sdpa, bmm, naive, got []"),
    (_set(["config", "probe"], [[1], "x"]), "config.probe must be [] or two of the run's splits"),
    (_set(["result", "splits", "train", "accuracy", "lookup"], 2), "result.splits.train.accuracy.lookup must be a number in [0, 1]"),
    # what the library checks
    (_set(["config", "arm", "radius"], "1" + "0" * 401), "config.arm: CircleConfig.radius must be"),
    (_set(["config", "arm", "plan"], "CX"), "config.arm.plan: "),
    (_set(["config", "arm", "layout"], "diagonal"), "config.arm.frequency_layout must be chunked or interleaved"),
]


@pytest.mark.parametrize("change, message", RUN_JSON)
def test_run_json_is_range_checked_before_any_work(ckpt, tmp_path, change, message):
    doc = json.loads((ckpt / "run.json").read_text())
    change(doc)
    (ckpt / "run.json").write_text(json.dumps(doc))
    code, text = run_eval(["--checkpoint", str(ckpt), "--content-samples", "0", "--out", str(tmp_path / "e.json")])
    assert_one_line(code, text, str(ckpt / "run.json"), message)
    assert not (tmp_path / "e.json").exists()


@pytest.mark.parametrize("text, message", [
    ('{"config": NaN}', "not valid JSON: NaN is not a number JSON allows"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ("{", "not valid JSON: Expecting property name"),
    ("\xff", "not UTF-8 text"),
    ("[]", "run.json must be an object, got []"),
])
def test_run_json_that_is_not_json(ckpt, tmp_path, text, message):
    (ckpt / "run.json").write_bytes(text.encode("latin-1"))
    code, err = run_eval(["--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")])
    assert_one_line(code, err, str(ckpt / "run.json"), message)


def test_a_run_json_too_big_is_not_read(ckpt, tmp_path):
    with open(ckpt / "run.json", "wb") as f:
        f.truncate(1 << 30)   # sparse: 1 GiB of NUL bytes
    code, err = run_eval(["--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")])
    assert_one_line(code, err, "run.json: 1,073,741,824 bytes, more than the 1,048,576 a run's run.json can take")


# ------------------------------------------------------------------- model.pt ---
def _weights(ckpt):
    return torch.load(ckpt / "model.pt", weights_only=True)


@pytest.mark.parametrize("change, message", [
    (lambda sd: sd.__setitem__("embed.weight", torch.zeros(3, 3)),
     "embed.weight is (3, 3) torch.float32, run.json's model has (110, 64) torch.float32"),
    (lambda sd: sd.__setitem__("embed.weight", sd["embed.weight"].double()), "embed.weight is (110, 64) torch.float64"),
    (lambda sd: sd.pop("norm.weight"), "not the weights of run.json's model: no 'norm.weight'"),
    (lambda sd: sd.__setitem__("extra", torch.zeros(1)), "unknown 'extra'"),
    (lambda sd: sd["norm.weight"].__setitem__(0, float("nan")), "norm.weight holds NaN or infinite values"),
    (lambda sd: sd.__setitem__("norm.weight", [1.0] * 64), "norm.weight is a list, run.json's model has (64,)"),
    (lambda sd: [1, 2], "holds a list, not a model's weights"),
])
def test_model_pt_must_be_the_weights_run_json_describes(ckpt, tmp_path, change, message):
    sd = _weights(ckpt)
    other = change(sd)
    torch.save(other if isinstance(other, list) else sd, ckpt / "model.pt")
    code, err = run_eval(["--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")])
    assert_one_line(code, err, str(ckpt / "model.pt"), message)


def test_weights_of_another_width_are_refused(ckpt, tmp_path):
    """run.json says width 32, model.pt holds width 64: the first weight's shape is named."""
    doc = json.loads((ckpt / "run.json").read_text())
    doc["config"]["model"].update(width=32, sections=[2, 3, 3])
    (ckpt / "run.json").write_text(json.dumps(doc))
    code, err = run_eval(["--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")])
    assert_one_line(code, err, "model.pt: embed.weight is (110, 64) torch.float32, run.json's model has (110, 32)")


@pytest.mark.parametrize("content, message", [
    (b"", "not a zip archive as torch.save writes"),
    (b"PK\x03\x04 not really", "not a zip archive as torch.save writes"),
])
def test_model_pt_that_is_not_a_torch_archive(ckpt, tmp_path, content, message):
    (ckpt / "model.pt").write_bytes(content)
    code, err = run_eval(["--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")])
    assert_one_line(code, err, message)


def test_a_model_pt_too_big_is_not_loaded(ckpt, tmp_path):
    with open(ckpt / "model.pt", "wb") as f:
        f.truncate(1 << 30)
    code, err = run_eval(["--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")])
    assert_one_line(code, err, "model.pt: 1,073,741,824 bytes, more than the")


def test_a_zip_whose_members_unpack_beyond_the_limit_is_not_loaded(ckpt, tmp_path):
    import zipfile
    with zipfile.ZipFile(ckpt / "model.pt", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data/0", b"\0" * (64 << 20))   # 64 MiB deflated to ~64 kB
    code, err = run_eval(["--checkpoint", str(ckpt), "--out", str(tmp_path / "e.json")])
    assert_one_line(code, err, "holds 67,108,864 bytes unpacked, more than the")


# ----------------------------------------------------- one set of ranges ---
def test_the_kept_checkpoints_read_back():
    root = os.path.dirname(KEPT)
    for name in sorted(os.listdir(root)):
        model, cfg, recorded = load(os.path.join(root, name))
        assert f"{cfg.arm.name}-s{cfg.seed}" == name and recorded["steps"] == cfg.steps


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_passes_the_check_a_checkpoint_gets(preset):
    """The presets' runs are what their checkpoints will hold: each passes check_run and reads
    back from its JSON unchanged."""
    plan = resolve([preset, "--no-plots"])
    for cfg in plan.configs:
        check_run(cfg, "config")
        assert config_from_json(json.loads(json.dumps(config_json(cfg))), "config") == cfg


def test_a_checkpoint_written_by_a_run_reads_back(tmp_path):
    from tiny_vlm.train import train
    cfg = resolve(["micro", "--no-plots", "--arms", "circle", "--steps", "2", "--eval-seqs", "2"]).configs[0]
    train(cfg, save_to=str(tmp_path))
    got, recorded = read_run(str(tmp_path))
    assert got == cfg and recorded["steps"] == 2


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "1000000000000"], "--seeds must be an integer in [1, 1000]"),
    (["--seeds", ",".join(map(str, range(1001)))], "--seeds: the number of seeds must be an integer in [1, 1000]"),
    (["--seeds", "1,4294967296"], "--seeds must be an integer in [0, 4294967295], got 4294967296"),
    (["--seeds", "1000", "--arms", "all"], "--arms and --seeds: 11000 runs; the number of runs must be"),
    (["--steps", "10000000"], "--steps must be an integer in [1, 1000000], got 10000000"),
    (["--questions", "1000000000"], "--questions must be an integer in [1, 64], got 1000000000"),
    (["--filler", "0,1000000000"], "--filler must be an integer in [0, 512], got 1000000000"),
    (["--long-prefix", "0,1000000000"], "--long-prefix must be an integer in [0, 512], got 1000000000"),
    (["--eval-seqs", "1000000000000"], "--eval-seqs must be an integer in [1, 65536]"),
    (["--eval-seqs", "60000"], "--eval-seqs 60000: split unseen-length: 60000 sequences of up to 163 tokens"),
    (["--batch", "1024", "--filler", "500,512"], "--batch 1024: 1024 sequences of up to"),
    (["--width", "32768"], "--width must be an integer in [2, 512], got 32768"),
    (["--mlp", "1000000"], "--mlp must be an integer in [1, 2048], got 1000000"),
    (["--train-grids", "4000x4000"], "--train-grids: 4000x4000 has more than 16 cells on a side"),
    (["--eval-grids", "8x+0"], "--eval-grids: '8x+0' is not HxW of two positive integers"),
    (["--mix", "1,1,1,1e400"], "--mix must be a finite number in [0, 1e+06], got '1e400'"),
    (["--mix", "1,1,1,1_0"], "--mix must be a finite number in [0, 1e+06], got '1_0'"),
    (["--theta", "0.5"], "--theta must be a finite number in [1, 8.50706e+37], got 0.5"),
    (["--workers", "100000"], "--workers must be an integer in [0, 64], got 100000"),
    (["--content-samples", "100000"], "--content-samples must be an integer in [0, 4096], got 100000"),
    (["--arms", "plan=C:r=1_0"], "arm 'plan=C:r=1_0': r='1_0' is not a number"),
    (["--arms", "plan=C:r=inf"], "arm 'plan=C:r=inf': r='inf' is not a number"),
    (["--arms", "mrope", "--steps", "5\x1b[2J"], "got '5\\x1b[2J'"),
])
def test_preset_options_are_range_checked(argv, message):
    err = io.StringIO()
    with redirect_stderr(err):
        code = cli.main(["micro", "--no-plots", *argv])
    assert_one_line(code, err.getvalue(), message, prefix="tiny_vlm: error: ")


# ---------------------------------------------------------------- results.json ---
def _results(tmp_path, doc):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "results.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return folder


@pytest.mark.parametrize("doc, message", [
    ({"meta": {"argv": ["micro", "--steps", "10000000"]}, "runs": []},
     "results.json: meta.argv: --steps must be an integer in [1, 1000000], got 10000000"),
    ({"meta": {"argv": ["micro", "--threads", "100000"]}, "runs": []}, "meta.argv: --threads must be an integer"),
    ({"meta": {"argv": "micro"}, "runs": []}, "meta.argv must be the list of the run's arguments"),
    ({"meta": {"argv": ["micro"]}, "runs": [{"arm": "helix", "seed": 0}]}, "runs must be at most 2 runs of"),
    ({"meta": {"argv": ["micro"]}}, "results.json: missing key 'runs'"),
    ("[" * 100_000, "JSON nested too deeply"),
])
def test_report_reads_results_json_as_input(tmp_path, doc, message):
    from tiny_vlm import report
    folder = _results(tmp_path, doc)
    err = io.StringIO()
    with redirect_stderr(err):
        code = report.main([str(folder), "--no-plots"])
    assert_one_line(code, err.getvalue(), message, prefix="tiny_vlm.report: error: ")
    assert sorted(os.listdir(folder)) == ["results.json"]


def test_report_rewrites_a_results_json_it_wrote(tmp_path):
    from tiny_vlm import report
    src = os.path.join(HERE, "..", "..", "..", "docs", "experiment", "quick", "results.json")
    folder = tmp_path / "quick"
    folder.mkdir()
    shutil.copy(src, folder / "results.json")
    assert report.main([str(folder), "--no-plots"]) == 0
    assert (folder / "results.md").stat().st_size > 0


# ------------------------------------------------------------ other front ends ---
@pytest.mark.parametrize("argv, message", [
    (["--rounds", "0"], "--rounds must be an integer in [1, 10000], got 0"),
    (["--rounds", "100000000"], "--rounds must be an integer in [1, 10000], got 100000000"),
    (["--preset", "hourly"], "--preset: expected one of quick, full, v3, micro"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bench_options_give_one_line(env, argv, message):
    p = subprocess.run([sys.executable, "-m", "tiny_vlm.bench", *argv], env=env, capture_output=True, text=True,
                       timeout=600)
    assert_one_line(p.returncode, p.stderr, message, prefix="tiny_vlm.bench: error: ")


@pytest.mark.parametrize("nproc", ["0", "65", "100000", "two"])
def test_experiment_sh_bounds_nproc_before_any_work(env, nproc):
    script = os.path.join(HERE, "..", "..", "..", "scripts", "experiment.sh")
    p = subprocess.run(["bash", script, "micro"], env=dict(env, NPROC=nproc), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == "experiment.sh: error: NPROC must be an integer in [1, 64]\n"
