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
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
SANITIZED = os.environ.get("CIRCLEROPE_SANITIZED") == "1"  # test_hf_models.py skips itself then


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
    assert list(steps) == ["env", "build", "cuda_tests", "compute_sanitizer", "torch_tests", "kernel_variants",
                           "benchmark", "model_step", "hf_models", "hf_check", "ncu"]
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
    assert {(r["model"], r["dtype"], r["seq"]) for r in rows} == {
        (m, d, 300) for m in ("3B", "7B") for d in ("bfloat16", "float32")}
    for r in rows:
        ours = r["impls"]["ours"]
        assert ours["error"] <= r["tolerance"] and r["impls"]["ours_inplace"]["error"] <= r["tolerance"]
        assert r["impls"]["hf_eager"]["error"] < 2e-2  # the formula rounds in the storage dtype
        for mode in ("forward", "backward", "fwd_bwd"):
            assert ours[f"{mode}_call_ms"] > 0 and r["impls"]["hf_eager"][f"{mode}_call_ms"] > 0
    assert bench["report"]["host_us"]["apply_rotary_requires_grad"] > 0
    for step in ("kernel_variants", "model_step", "ncu"):
        assert steps[step]["status"] == "skipped", step
    assert steps["hf_check"]["status"] in ("pass", "skipped")
    # test_hf_models.py asked for cuda skips itself, and the step says why (under the
    # sanitizers it skips itself for them first)
    hf_models = steps["hf_models"]
    assert hf_models["status"] == "skipped", hf_models
    if steps["env"]["facts"]["transformers"]:
        why = "the sanitizer tree leaves" if SANITIZED else "CIRCLEROPE_HF_TEST_DEVICE=cuda, but no CUDA device"
        assert why in hf_models["reason"], hf_models
        assert [r["setting"] for r in hf_models["runs"]] == ["bfloat16, fused rotation"]
        assert hf_models["runs"][0]["counts"] == {"skipped": 1}


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
    # hf_models runs test_hf_models.py, which cannot import circlerope either (without
    # transformers the step skips before running it)
    expected = ["torch_tests", "benchmark"] + (["hf_models"] if HAS_TRANSFORMERS else []) + ["hf_check"]
    assert summary["failed"] == expected
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


# ---- the hf_models step on a GPU, with pytest's outputs given --------------------------------

def load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SOURCE_DIR, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GPU_FACTS = {"cuda_available": True, "pytest": "8.3.5", "transformers": "5.24.0", "xdist": "3.6.1", "cpus": 16}
PASSED = (0, "4 workers [62 items]\n....s.........\n=== short test summary info ===\n"
             "SKIPPED [1] python/tests/test_hf_models.py:640: flash_attn is not importable (No module named "
             "'flash_attn'): transformers' flash_attention_2 needs it\n61 passed, 1 skipped in 40.1s\n")
FAILED = (1, "..F..\nFAILED python/tests/test_hf_models.py::test_x - AssertionError\n"
             "1 failed, 60 passed, 1 skipped in 42.0s\n")
MODULE_SKIPPED = (0, "s\n=== short test summary info ===\nSKIPPED [1] python/tests/test_hf_models.py:58: "
                     "CIRCLEROPE_HF_TEST_ROTATION=fused on cuda, but this circlerope was built without its CUDA "
                     "kernels\n1 skipped in 3.0s\n")


def hf_models_on_a_gpu(*outputs, budget=1000.0):
    """step_hf_models on a pretend GPU machine whose pytest prints `outputs` (rc, text), one per run."""
    gpu_check = load_script("gpu_check")
    run = gpu_check.Run(types.SimpleNamespace(cpu_dry_run=False, budget=budget))
    run.package_dir = "/nowhere/python"
    calls = []

    def sh(cmd, timeout, env=None, cwd=None):
        calls.append({"cmd": cmd, "env": env, "timeout": timeout})
        return outputs[len(calls) - 1]
    run.sh = sh
    gpu_check.step_hf_models(run, GPU_FACTS)
    return run.steps["hf_models"], calls, gpu_check


def test_hf_models_runs_bfloat16_with_the_cuda_kernel_then_float32_and_keeps_the_skip_reasons():
    step, calls, gpu_check = hf_models_on_a_gpu(PASSED, PASSED)
    assert step["status"] == "pass", step
    settings = [(c["env"]["CIRCLEROPE_HF_TEST_DEVICE"], c["env"]["CIRCLEROPE_HF_TEST_DTYPE"],
                 c["env"]["CIRCLEROPE_HF_TEST_ROTATION"]) for c in calls]
    assert settings == [("cuda", "bfloat16", "fused"), ("cuda", "float32", "transformers")]
    for call in calls:
        assert call["cmd"][-2:] == ["-n", "4"] and gpu_check.HF_MODELS_SUBSET in call["cmd"]
        assert call["timeout"] == gpu_check.HF_MODELS_SECONDS
        assert call["env"]["PYTHONPATH"].startswith("/nowhere/python")
    run = step["runs"][0]
    assert run["counts"] == {"passed": 61, "skipped": 1} and run["reason"] == "61 passed, 1 skipped"
    assert run["skip_reasons"] == ["flash_attn is not importable (No module named 'flash_attn'): transformers' "
                                   "flash_attention_2 needs it"]


def test_hf_models_fails_on_a_failed_check_and_still_runs_the_other_setting():
    step, calls, _ = hf_models_on_a_gpu(FAILED, PASSED)
    assert step["status"] == "fail" and len(calls) == 2
    assert [r["status"] for r in step["runs"]] == ["fail", "pass"]
    assert step["runs"][0]["reason"] == "exit 1: 1 failed, 0 errors"
    assert "bfloat16, fused rotation: fail" in step["reason"]


def test_hf_models_on_a_gpu_fails_when_the_file_skips_itself_or_runs_out_of_time():
    step, _, _ = hf_models_on_a_gpu(MODULE_SKIPPED, (124, "....\n(timed out after 150 s)"))
    assert step["status"] == "fail"
    assert "built without its CUDA kernels" in step["runs"][0]["reason"]
    assert step["runs"][1]["reason"].startswith("timed out")
    step, calls, _ = hf_models_on_a_gpu(budget=30.0)  # under 40 s left: no run starts
    assert step["status"] == "skipped" and not calls
    assert [r["reason"] for r in step["runs"]] == ["out of time budget"] * 2


@pytest.mark.skipif(not HAS_TRANSFORMERS or SANITIZED,
                    reason="collects test_hf_models.py: needs transformers, and the file skips itself "
                    "under the sanitizers")
def test_the_gpu_subset_selects_every_kind_of_check_of_test_hf_models():
    """HF_MODELS_SUBSET against the file's real test names: a renamed test must not drop out
    of the GPU run unnoticed."""
    gpu_check = load_script("gpu_check")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                           os.path.join(SOURCE_DIR, "python", "tests", "test_hf_models.py"),
                           "-k", gpu_check.HF_MODELS_SUBSET],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    selected = [line for line in done.stdout.splitlines() if "::" in line]
    kinds = {"test_switched_mrope_is_the_unswitched_model_bit_for_bit": 12,
             "test_circle_and_age_equal_the_layer_by_layer_transcription": 10,
             "test_each_layer_receives_its_geometrys_cos_sin_from_float32_positions": 2,
             "test_cached_generate_equals_a_full_recompute_at_every_step": 4,
             "test_official_decode_gives_every_layer_circle_positions_after_the_prompt": 1,
             "test_packed_samples_give_each_samples_own_logits": 4,
             "test_packed_positions_survive_a_floating_point_cast": 1,
             "test_flash_attention_2_keeps_packed_samples_apart_with_the_varlen_kwargs_of_pack": 1,
             "test_the_fused_rotation_inside_a_model_equals_transformers_formula": 2,
             "test_rotary_cos_sin_equals_the_releases_rotary_embedding_bit_for_bit": 2,
             "test_gradients_are_the_same_with_gradient_checkpointing": 1}
    for kind, at_least in kinds.items():  # Qwen3-VL's share depends on the release
        assert sum(f"::{kind}" in line for line in selected) >= at_least, kind
    assert len(selected) < 100, len(selected)  # a subset: the file has about 130


# ---- the HF check's logic, with stand-ins ---------------------------------------------------

def load_hf_check():
    return load_script("hf_check")


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
