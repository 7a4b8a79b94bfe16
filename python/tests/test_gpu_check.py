"""scripts/gpu_check.sh before any GPU sees it: its --cpu-dry-run on this build, the summary it
writes, a failing step recorded without stopping the others, and the Hugging Face check's
logic (scripts/hf_check.py) against a stand-in transformers model and adapter, since the real
ones are not installed here."""
import importlib.util
import json
import os
import subprocess
import sys
import types

import pytest
import torch

SOURCE_DIR = os.environ.get("CIRCLEROPE_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
# the build tree (python_tests' environment names it; an installed package has none)
BUILD_DIR = os.environ.get("CIRCLEROPE_BUILD_DIR")
SCRIPT = os.path.join(SOURCE_DIR, "scripts", "gpu_check.sh")


# The script's default budget (450 s, for the GPU machine) skips the steps left when it runs
# out, and a loaded CI machine stretches the dry run (~50 s idle): the tests that expect every
# step to run lift it (the budget itself is tested with --budget 1 below).
NO_BUDGET = ("--budget", "100000")


def dry_run(tmp_path, *extra, env=None):
    out = tmp_path / "summary.json"
    full_env = dict(os.environ, PYTHON=sys.executable, **(env or {}))
    done = subprocess.run([SCRIPT, "--cpu-dry-run", *extra] + ([] if "--json" in extra else ["--json", str(out)]),
                          env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    path = out if "--json" not in extra else extra[extra.index("--json") + 1]
    return done, json.loads(open(path).read())


@pytest.mark.skipif(BUILD_DIR is None, reason="needs the build tree (run through ctest)")
def test_dry_run_runs_every_cpu_part_and_says_why_the_rest_is_skipped(tmp_path):
    done, summary = dry_run(tmp_path, "--build-dir", BUILD_DIR, *NO_BUDGET)
    assert done.returncode == 0, done.stdout
    steps = summary["steps"]
    assert summary["mode"] == "cpu-dry-run" and summary["ok"] and summary["failed"] == []
    assert list(steps) == ["env", "build", "cuda_tests", "compute_sanitizer", "torch_tests", "benchmark", "hf_check"]
    for name, step in steps.items():
        assert step["status"] in ("pass", "skipped"), (name, step)
        assert step["reason"], name
    assert steps["env"]["status"] == "pass" and steps["env"]["facts"]["torch"] == torch.__version__
    assert steps["build"]["status"] == "skipped" and "--cpu-dry-run" in steps["build"]["reason"]
    # the CMake command of the GPU build, formed from this torch
    would = steps["build"]["would_run"]
    assert "-DCIRCLEROPE_CUDA=ON" in would and "-DCIRCLEROPE_BUILD_TORCH=ON" in would
    assert f"-DCIRCLEROPE_PYTHON={sys.executable}" in would  # torch's paths and ABI flag come from it
    if os.path.exists(os.path.join(BUILD_DIR, "tests", "cuda", "circlerope_cuda_tests")):
        assert steps["cuda_tests"]["status"] == "pass"
        assert "no CUDA device" in steps["cuda_tests"]["reason"]
        assert steps["cuda_tests"]["counts"]["failed"] == 0 and steps["cuda_tests"]["counts"]["passed"] >= 3
    else:  # a build without nvcc
        assert steps["cuda_tests"]["status"] == "skipped"
    assert steps["compute_sanitizer"]["status"] == "skipped" and "no CUDA device" in steps["compute_sanitizer"]["reason"]
    assert steps["torch_tests"]["status"] == "pass"
    bench = steps["benchmark"]
    assert bench["status"] == "pass" and "no GPU figure" in bench["reason"]
    rows = bench["report"]["results"]
    assert {(r["dtype"], r["seq"]) for r in rows} == {("bfloat16", 300), ("float32", 300)}
    for r in rows:
        assert r["within_tolerance"] and r["speedup_vs_hf"] > 0 and r["speedup_vs_hf_layer"] > 0
        assert r["forward_copy_fraction"] > 0 and r["grad_max_abs_diff_vs_hf"] < 0.1
        assert r["backward_gbps"] > 0 and r["round_trip_max_abs"] < 0.1
    assert steps["hf_check"]["status"] in ("pass", "skipped")


@pytest.mark.skipif(BUILD_DIR is None, reason="needs the build tree (run through ctest)")
def test_a_failing_step_is_recorded_and_the_others_still_run(tmp_path):
    empty = tmp_path / "no-build"
    empty.mkdir()
    # no package under --build-dir/python: every Python step fails to import circlerope,
    # and PYTHONPATH must not find the real one either
    env = {"PYTHONPATH": str(empty / "python")}
    done, summary = dry_run(tmp_path, "--build-dir", str(empty), *NO_BUDGET, env=env)
    assert done.returncode == 1
    assert not summary["ok"]
    assert summary["failed"] == ["torch_tests", "benchmark", "hf_check"]
    assert summary["steps"]["cuda_tests"]["status"] == "skipped"
    assert "is missing" in summary["steps"]["cuda_tests"]["reason"]


@pytest.mark.skipif(BUILD_DIR is None, reason="needs the build tree (run through ctest)")
def test_the_summary_goes_to_out_when_it_is_set(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(out))
    done = subprocess.run([SCRIPT, "--cpu-dry-run", "--build-dir", BUILD_DIR, "--budget", "1"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    summary = json.loads((out / "gpu_check.json").read_text())
    # a budget of one second: env runs, every later step is skipped for time, and says so
    assert summary["steps"]["env"]["status"] == "pass", done.stdout
    assert all(s["status"] == "skipped" and s["reason"] == "out of time budget"
               for n, s in summary["steps"].items() if n != "env")


# ---- the HF check's logic, with stand-ins ---------------------------------------------------

def load_hf_check():
    spec = importlib.util.spec_from_file_location("hf_check", os.path.join(SOURCE_DIR, "scripts", "hf_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeConfig:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def own_rope_index(input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                   attention_mask=None, **kwargs):
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.unsqueeze(0).expand(3, -1, -1), torch.zeros(input_ids.shape[0], 1)


class FakeInner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rope_deltas = None

    def get_rope_index(self, *args, **kwargs):
        return own_rope_index(*args, **kwargs)


class FakeModel(torch.nn.Module):
    """Enough of Qwen2_5_VLForConditionalGeneration (4.52 layout: get_rope_index and
    rope_deltas on .model): the logits depend on the positions get_rope_index returns."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = FakeInner()
        self.embed = torch.nn.Embedding(config.vocab_size, 8)
        self.head = torch.nn.Linear(8, config.vocab_size)

    def forward(self, input_ids, attention_mask, pixel_values, image_grid_thw, use_cache=False):
        pos, self.model.rope_deltas = self.model.get_rope_index(input_ids, image_grid_thw, None, None, attention_mask)
        angle = pos.float().sum(0)[..., None] * torch.linspace(0.1, 1.0, 8)
        hidden = self.embed(input_ids) * torch.cos(angle) + pixel_values.mean() * 0
        return types.SimpleNamespace(logits=self.head(hidden))


def fake_modules(mrope_shift=0.0):
    transformers = types.ModuleType("transformers")
    transformers.__version__ = "4.52.0"
    transformers.Qwen2_5_VLConfig = FakeConfig
    transformers.Qwen2_5_VLForConditionalGeneration = FakeModel
    hf = types.ModuleType("circlerope.hf")
    hf.compat_for_version = lambda version: "hf-4.52"

    def rope_index_fn(config, scheme="circle", circle=None, compat=None):
        shift = mrope_shift if scheme == "mrope" else 0.5

        def get_rope_index(input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                           attention_mask=None, **kwargs):
            pos, deltas = own_rope_index(input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts,
                                         attention_mask)
            return pos + shift if shift else pos, deltas
        return get_rope_index

    hf.rope_index_fn = rope_index_fn
    return transformers, hf


def use_adapter(monkeypatch, hf):
    """Make `import circlerope.hf` give `hf` (None: fail). Once the real submodule has been
    imported it is also an attribute of the package, which `import a.b as c` reads first."""
    import circlerope
    monkeypatch.setitem(sys.modules, "circlerope.hf", hf)
    if hf is None:
        monkeypatch.delattr(circlerope, "hf", raising=False)
    else:
        monkeypatch.setattr(circlerope, "hf", hf, raising=False)


def test_hf_check_passes_an_adapter_that_reproduces_mrope(monkeypatch):
    check = load_hf_check()
    transformers, hf = fake_modules()
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    use_adapter(monkeypatch, hf)
    result = check.run(torch.device("cpu"))
    assert result["status"] == "pass", result
    assert result["compat"] == "hf-4.52" and result["mrope"]["logits_equal"]
    assert result["mrope"]["adapter_called"] == 1 and result["circle"]["adapter_called"] == 1
    assert result["circle"]["grads_finite"] and result["circle"]["differs_from_mrope"]


def test_hf_check_fails_an_adapter_whose_mrope_positions_differ(monkeypatch):
    check = load_hf_check()
    transformers, hf = fake_modules(mrope_shift=1.0)
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    use_adapter(monkeypatch, hf)
    result = check.run(torch.device("cpu"))
    assert result["status"] == "fail"
    assert "mrope logits differ from the unpatched model's" in result["reason"]


def test_hf_check_skips_with_the_reason_when_the_adapter_is_missing(monkeypatch):
    check = load_hf_check()
    transformers, _ = fake_modules()
    monkeypatch.setitem(sys.modules, "transformers", transformers)
    use_adapter(monkeypatch, None)  # import raises ImportError
    result = check.run(torch.device("cpu"))
    assert result["status"] == "skipped" and "circlerope.hf is missing" in result["reason"]
