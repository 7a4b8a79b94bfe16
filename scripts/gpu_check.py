#!/usr/bin/env python3
"""Everything the CUDA backend needs checked on a GPU, in one run (scripts/gpu_check.sh).

Steps, each recorded as pass / fail / skipped with its reason and time; a failure does not
stop the next step, so one run tells everything:

  env                versions: torch, CUDA, the device, nvcc, compute-sanitizer, transformers
  build              the project's one CMake build against the torch this interpreter imports
                     (its paths and ABI flag read from torch itself, not from torch's CMake
                     package), the CUDA kernels for this GPU's architecture only
  cuda_tests         tests/cuda: the C++ device tests and the C API test
  compute_sanitizer  memcheck and initcheck on the short test CudaSanitizer.*
  torch_tests        python/tests/test_cuda.py (pytest when installed): the ops against the CPU
                     ops, tables against their bound, CUDA-graph capture and replay,
                     torch.compile(mode="reduce-overhead")
  kernel_variants    bench/cuda_variants.cu: the rotation kernel's ways of cutting the work
                     (heads per item, index width, block size) against a device copy, every
                     Qwen shape; the table goes to $OUT/cuda_variants.tsv
  benchmark          bench/gpu_rotary.py: ours against Hugging Face's formula (eager and
                     torch.compile) and Liger-Kernel's Triton kernel (when liger_kernel
                     imports), per call and per kernel, forward, backward, fwd+bwd; the copy
                     fraction; errors against float64; host time per call
  model_step         bench/model_step.py --preset gpu: a train step of a switched transformers
                     Qwen2.5-VL (3B-shaped text layers), each geometry, rotation="fused" or not
  hf_check           scripts/hf_check.py: a tiny Qwen2.5-VL from a config, patched
  hf_models          python/tests/test_hf_models.py (circlerope.hf.apply / pack on tiny random
                     Qwen2-VL / Qwen2.5-VL / Qwen3-VL) on the GPU: bfloat16 with the models' q/k
                     rotation through circlerope's CUDA kernel, then float32 with transformers'
                     own rotation, each a subset (HF_MODELS_SUBSET) in at most HF_MODELS_SECONDS
  ncu                Nsight Compute on each kernel variant once (3B, batch 1, S 16384, bf16, in
                     place): registers, occupancy, DRAM throughput, into the summary

The summary goes to $OUT/gpu_check.json when $OUT is set, else build/gpu_check.json (or
--json PATH); the benchmarks' full reports go beside it. --steps NAME... runs those steps only
(env always). Exit code 0 when no step failed.

--cpu-dry-run runs every part that can run without a GPU, on the CPU, from an existing build
(--build-dir, default build/release): the CUDA test binaries (their device tests skip), the
Python CUDA tests (skip), the benchmark and the HF check on CPU tensors with small shapes. The
build and compute-sanitizer steps are skipped with the reason (the CMake command the build would
run is still recorded); hf_models runs its test file with CIRCLEROPE_HF_TEST_DEVICE=cuda, which
skips it for want of a device, and records that reason. ctest runs this mode
(scripts/tests/test_gpu_check.py).
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUDGET_SECONDS = 465  # 8 minutes on one H200, the machine's start-up apart


class Run:
    def __init__(self, args):
        self.args = args
        self.start = time.perf_counter()
        self.steps = {}
        self.build_dir = None  # tree with tests/cuda/*
        self.package_dir = None  # PYTHONPATH root holding circlerope/
        self.python = sys.executable

    def left(self):
        return self.args.budget - (time.perf_counter() - self.start)

    def record(self, name, status, reason, started, **details):
        self.steps[name] = {"status": status, "reason": reason,
                            "seconds": round(time.perf_counter() - started, 1), **details}
        print(f"[gpu_check] {name}: {status} - {reason} ({self.steps[name]['seconds']} s)", flush=True)

    def sh(self, cmd, timeout, env=None, cwd=ROOT):
        """Runs cmd; returns (returncode, output). A timeout is returncode 124."""
        timeout = max(5, min(timeout, self.left() - 10))
        full_env = dict(os.environ, **(env or {}))
        try:
            done = subprocess.run(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout)
            return done.returncode, done.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            return 124, out + f"\n(timed out after {timeout:.0f} s)"
        except OSError as e:
            return 127, str(e)

    def pyenv(self):
        return {"PYTHONPATH": self.package_dir + os.pathsep + os.environ.get("PYTHONPATH", "")}


def tail(text, lines=25):
    return "\n".join(text.strip().splitlines()[-lines:])


# ---- steps ---------------------------------------------------------------------------------------

def step_env(run):
    t = time.perf_counter()
    facts = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        import torch
        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        facts["cxx11_abi"] = bool(torch.compiled_with_cxx11_abi())
        facts["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            facts["device"] = p.name
            facts["capability"] = f"{p.major}.{p.minor}"
            facts["device_memory_gib"] = round(p.total_memory / 2 ** 30, 1)
    except Exception as e:  # noqa: BLE001
        run.record("env", "fail", f"torch does not import: {e}", t, facts=facts)
        return facts
    for module in ("triton", "transformers", "pytest", "xdist", "flash_attn", "pybind11"):
        try:
            facts[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001
            facts[module] = None
    nvcc = find_nvcc()
    facts["nvcc"] = nvcc
    if nvcc:
        rc, out = run.sh([nvcc, "--version"], 30)
        m = re.search(r"release ([0-9.]+)", out)
        facts["nvcc_version"] = m.group(1) if m else None
    facts["compute_sanitizer"] = find_tool("compute-sanitizer")
    # flags CMake takes from the environment (a static libstdc++ in them broke a build once)
    facts["environment_flags"] = {k: os.environ.get(k) for k in ("CFLAGS", "CXXFLAGS", "LDFLAGS", "CUDAFLAGS",
                                                                  "LIBRARY_PATH", "LD_LIBRARY_PATH")}
    rc, out = run.sh(["c++", "--version"], 30)
    facts["cxx"] = out.splitlines()[0] if rc == 0 and out else None
    for name in ("libstdc++.so", "libstdc++.so.6", "libstdc++.a"):  # which runtime a link would find
        rc, out = run.sh(["c++", f"-print-file-name={name}"], 30)
        facts[f"cxx_finds_{name}"] = out.strip() if rc == 0 else None
    for tool in ("cmake", "ninja", "make"):
        facts[tool] = shutil.which(tool)
    if facts["cmake"]:
        rc, out = run.sh(["cmake", "--version"], 30)
        facts["cmake_version"] = out.split()[2] if rc == 0 and len(out.split()) > 2 else None
    run.record("env", "pass", facts.get("device") or "no CUDA device", t, facts=facts)
    return facts


def cuda_home():
    try:
        from torch.utils import cpp_extension
        return cpp_extension.CUDA_HOME
    except Exception:  # noqa: BLE001
        return None


def find_nvcc():
    home = cuda_home()
    for candidate in ([os.path.join(home, "bin", "nvcc")] if home else []) + [shutil.which("nvcc") or ""]:
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def find_tool(name):
    found = shutil.which(name)
    if found:
        return found
    for home in filter(None, (cuda_home(), "/usr/local/cuda")):
        for sub in ("bin", os.path.join("compute-sanitizer")):
            p = os.path.join(home, sub, name)
            if os.path.exists(p):
                return p
    return None


def cmake_command(build_dir, facts):
    """The one CMake build (the same that pip install . drives), against this interpreter's
    torch (cmake/CircleropeTorch.cmake reads its paths and C++ ABI flag), CUDA kernels for this
    GPU's architecture only."""
    arch = facts.get("capability", "9.0").replace(".", "")
    cmd = ["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja" if facts.get("ninja") else "Unix Makefiles",
           "-DCMAKE_BUILD_TYPE=Release", "-DCIRCLEROPE_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}",
           "-DCIRCLEROPE_BUILD_CLI=OFF", "-DCIRCLEROPE_BUILD_TESTS=OFF", "-DCIRCLEROPE_BUILD_BENCH=OFF",
           "-DCIRCLEROPE_BUILD_TORCH=ON", f"-DCIRCLEROPE_PYTHON={sys.executable}"]
    nvcc = facts.get("nvcc")
    if nvcc:
        cmd += [f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCUDAToolkit_ROOT={os.path.dirname(os.path.dirname(nvcc))}"]
    return cmd


def step_build(run, facts):
    t = time.perf_counter()
    if run.args.cpu_dry_run:
        run.build_dir = os.path.abspath(run.args.build_dir)
        run.package_dir = os.path.join(run.build_dir, "python")
        run.record("build", "skipped", f"--cpu-dry-run uses the existing build in {run.build_dir}", t,
                   would_run=cmake_command(os.path.join(ROOT, "build", "gpu"), facts))
        return
    if not facts.get("cuda_available"):
        run.record("build", "skipped", "no CUDA device: nothing to build for", t)
        return
    if not facts.get("cmake") or not facts.get("nvcc"):
        run.record("build", "fail", f"needs cmake and nvcc (cmake: {facts.get('cmake')}, nvcc: {facts.get('nvcc')})", t)
        return
    jobs = str(os.cpu_count() or 4)
    gpu = os.path.join(ROOT, "build", "gpu")
    attempts = []
    rc, out = run.sh(cmake_command(gpu, facts), 180)
    attempts.append({"route": "configure", "rc": rc, "tail": tail(out, 15)})
    if rc == 0:
        rc, out = run.sh(["cmake", "--build", gpu, "-j", jobs], 300)
        attempts.append({"route": "build", "rc": rc, "tail": tail(out, 15)})
    if rc != 0:
        run.record("build", "fail", "the CMake build against this torch failed", t, attempts=attempts)
        return
    run.build_dir, run.package_dir = gpu, os.path.join(gpu, "python")
    # Each library links the process's one libstdc++: an exported copy of its internals (a
    # static libstdc++) makes iostreams of two copies meet, which crashed once.
    exported = {}
    for lib in ("libcirclerope.so", "libcirclerope_kernels.so", os.path.join("python", "circlerope", "libcirclerope_torch.so")):
        rc_nm, out_nm = run.sh(["nm", "-D", "--defined-only", os.path.join(gpu, lib)], 30)
        exported[lib] = len(re.findall(r"codecvt|ios_base4Init", out_nm)) if rc_nm == 0 else None
    if any(exported.values()):
        run.record("build", "fail", f"a library exports libstdc++'s own symbols (a static libstdc++): {exported}", t,
                   attempts=attempts, exported_libstdcxx=exported)
        return
    run.record("build", "pass", "CMake against this interpreter's torch (cmake/CircleropeTorch.cmake)", t,
               attempts=attempts, exported_libstdcxx=exported)


def summarize_tests(out):
    counts = {}
    for key, pattern in (("ran", r"\[==========\] (\d+) tests"), ("passed", r"\[  PASSED  \] (\d+) test"),
                         ("skipped", r"\[  SKIPPED \] (\d+) test"), ("failed", r"(\d+) FAILED TEST")):
        m = re.search(pattern, out)
        if m:
            counts[key] = int(m.group(1))
    m = re.search(r"(\d+) tests ran: (\d+) passed, (\d+) skipped, (\d+) failed", out)  # harness.h
    if m:
        counts = dict(zip(("ran", "passed", "skipped", "failed"), map(int, m.groups())))
    return counts


def step_cuda_tests(run, facts):
    t = time.perf_counter()
    if not run.build_dir:
        run.record("cuda_tests", "skipped", "no build", t)
        return
    binary = os.path.join(run.build_dir, "tests", "cuda", "circlerope_cuda_tests")
    c_test = os.path.join(run.build_dir, "tests", "cuda", "circlerope_c_cuda_test")
    if not os.path.exists(binary):
        run.record("cuda_tests", "skipped" if run.args.cpu_dry_run else "fail",
                   f"{binary} is missing (CUDA off in that build?)", t)
        return
    rc, out = run.sh([binary], 120)
    counts = summarize_tests(out)
    rc_c, out_c = run.sh([c_test], 60) if os.path.exists(c_test) else (0, "c_cuda test not built")
    details = {"counts": counts, "tail": tail(out, 20), "c_api": tail(out_c, 3)}
    device = facts.get("cuda_available")
    if rc not in (0, 77) or rc_c != 0:
        run.record("cuda_tests", "fail", f"exit {rc} (C API test: exit {rc_c})", t, **details)
    elif device and counts.get("skipped"):
        run.record("cuda_tests", "fail", f"{counts['skipped']} device tests skipped on a machine with a GPU", t, **details)
    elif not device:
        run.record("cuda_tests", "pass", "host-side tests passed; device tests skipped: no CUDA device", t, **details)
    else:
        run.record("cuda_tests", "pass", f"{counts.get('passed', counts.get('ran'))} tests passed on {facts.get('device')}", t, **details)


def step_compute_sanitizer(run, facts):
    t = time.perf_counter()
    tool = facts.get("compute_sanitizer")
    if run.args.cpu_dry_run or not facts.get("cuda_available"):
        run.record("compute_sanitizer", "skipped", "no CUDA device" + ("" if tool else "; compute-sanitizer not found"), t)
        return
    if not tool:
        run.record("compute_sanitizer", "skipped", "compute-sanitizer not found", t)
        return
    binary = os.path.join(run.build_dir or "", "tests", "cuda", "circlerope_cuda_tests")
    if not run.build_dir or not os.path.exists(binary):
        run.record("compute_sanitizer", "skipped", "no CUDA test binary", t)
        return
    results = {}
    ok = True
    for check in ("memcheck", "initcheck"):
        rc, out = run.sh([tool, "--tool", check, "--error-exitcode", "3", binary,
                          "--gtest_filter=CudaSanitizer.*:CudaHost.*"], 150)
        m = re.search(r"ERROR SUMMARY: (\d+) error", out)
        results[check] = {"rc": rc, "errors": int(m.group(1)) if m else None, "tail": tail(out, 12)}
        ok = ok and rc == 0 and m is not None and m.group(1) == "0"
    run.record("compute_sanitizer", "pass" if ok else "fail",
               "memcheck and initcheck: 0 errors" if ok else "see the tails", t, **results)


def step_torch_tests(run, facts):
    t = time.perf_counter()
    if not run.package_dir:
        run.record("torch_tests", "skipped", "no build", t)
        return
    test = os.path.join(ROOT, "python", "tests", "test_cuda.py")
    has_pytest = facts.get("pytest") is not None
    cmd = ([run.python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test] if has_pytest
           else [run.python, test, "--no-pytest"])
    rc, out = run.sh(cmd, 240, env=run.pyenv())
    skipped = len(re.findall(r"SKIPPED", out))
    details = {"runner": "pytest" if has_pytest else "plain", "tail": tail(out, 20)}
    if rc not in (0, 77, 5):
        run.record("torch_tests", "fail", f"exit {rc}", t, **details)
    elif facts.get("cuda_available") and skipped:
        run.record("torch_tests", "fail", f"{skipped} tests skipped on a machine with a GPU", t, **details)
    else:
        run.record("torch_tests", "pass", "CUDA tests skipped: no CUDA device" if not facts.get("cuda_available")
                   else "operators on CUDA tensors equal the CPU operators", t, **details)


def run_json_script(run, cmd, timeout):
    rc, out = run.sh(cmd, timeout, env=run.pyenv())
    start = out.find("{")
    try:
        return rc, json.loads(out[start:]) if start >= 0 else None, out
    except json.JSONDecodeError:
        return rc, None, out


def out_dir(run):
    """Where the full reports go: $OUT on the GPU machine, else beside the summary."""
    path = os.environ.get("OUT") or os.path.dirname(os.path.abspath(run.args.json or
                                                                    os.path.join(ROOT, "build", "gpu_check.json")))
    os.makedirs(path, exist_ok=True)
    return path


def step_kernel_variants(run, facts):
    t = time.perf_counter()
    binary = os.path.join(run.build_dir or "", "bench", "circlerope_cuda_variants")
    if not run.build_dir or not os.path.exists(binary):
        run.record("kernel_variants", "skipped", "no variants binary (CUDA off in that build?)", t)
        return
    if not facts.get("cuda_available") or run.args.cpu_dry_run:
        run.record("kernel_variants", "skipped", "no CUDA device", t)
        return
    rc, out = run.sh([binary], 120)
    path = os.path.join(out_dir(run), "cuda_variants.tsv")
    with open(path, "w") as f:
        f.write(out)
    rows = [line.split("\t") for line in out.splitlines() if line and not line.startswith(("#", "model"))]
    best = {}
    for r in rows:
        if len(r) != 10:
            continue
        key = " ".join(r[:5])
        if key not in best or float(r[6]) < float(best[key][1]):
            best[key] = (r[5], r[6], r[9])
    wins = {}
    for variant, _, _ in best.values():
        wins[variant] = wins.get(variant, 0) + 1
    run.record("kernel_variants", "pass" if rc == 0 and rows else "fail",
               f"{len(rows)} timings; fastest per shape: {wins}" if rc == 0 else f"exit {rc}", t,
               best=best, tail=tail(out, 6), tsv=path)


def step_benchmark(run, facts):
    t = time.perf_counter()
    if not run.package_dir:
        run.record("benchmark", "skipped", "no build", t)
        return
    script = os.path.join(ROOT, "bench", "gpu_rotary.py")
    on_gpu = facts.get("cuda_available") and not run.args.cpu_dry_run
    path = os.path.join(out_dir(run), "gpu_rotary.json")
    # Within the budget: bfloat16 at batch 1 and 4, S 4096 and 16384, both models (about 10 s a
    # shape with the peers and the profiler); bench/gpu_rotary.py alone runs every shape, and
    # the kernel_variants step covers float32 and S 32768.
    subset = ["--dtypes", "bfloat16", "--seqs", "4096", "16384"]
    cmd = [run.python, script, "--json", path] + (subset if on_gpu else ["--device", "cpu", "--quick"])
    rc, out = run.sh(cmd, 110, env=run.pyenv())
    report = json.load(open(path)) if os.path.exists(path) else None
    if report is None or not report["results"]:
        run.record("benchmark", "fail", f"exit {rc}", t, tail=tail(out, 20))
        return
    results = report["results"]
    accurate = all(r["impls"]["ours"]["error"] <= r["tolerance"] for r in results)
    details = {"report": report, "table": tail(out, 100)}
    if on_gpu:
        big = [r for r in results if r["seq"] >= 16384]
        details["targets_met"] = {
            "copy_fraction_at_least_85_percent_at_S_16384_on": all(
                r["impls"]["ours"].get(f"{m}_copy_fraction", 0) >= 0.85 for r in big for m in ("forward", "backward")),
            "ours_inplace_device_time_at_most_liger": all(
                r.get(f"{m}_ours_inplace_over_liger", math.inf) <= 1.0 for r in results for m in ("forward", "backward")),
            "host_us_at_most_10": report["host_us"]["apply_rotary_requires_grad"] <= 10.0}
    reason = ("errors within the CPU kernels' tolerances" if accurate else "an error beyond the tolerance") + \
        ("" if on_gpu else "; CPU tensors, small shapes: a check of the script, no GPU figure") + \
        ("" if rc == 0 else f"; exit {rc} after {len(results)} shapes")
    run.record("benchmark", "pass" if accurate and rc == 0 else "fail", reason, t, **details)


def step_model_step(run, facts):
    t = time.perf_counter()
    script = os.path.join(ROOT, "bench", "model_step.py")
    if not run.package_dir or not os.path.exists(script):
        run.record("model_step", "skipped", "no build" if not run.package_dir else "bench/model_step.py is missing", t)
        return
    if not facts.get("transformers"):
        run.record("model_step", "skipped", "transformers is not installed", t)
        return
    on_gpu = facts.get("cuda_available") and not run.args.cpu_dry_run
    if not on_gpu:
        run.record("model_step", "skipped", "no CUDA device (the CPU preset runs in CI as its own test)", t)
        return
    path = os.path.join(out_dir(run), "model_step.json")
    rc, out = run.sh([run.python, script, "--preset", "gpu", "--json", path], 60, env=run.pyenv())
    report = json.load(open(path)) if rc == 0 and os.path.exists(path) else None
    run.record("model_step", "pass" if report is not None else "fail",
               "train step per geometry and rotation" if report is not None else f"exit {rc}", t,
               report=report, tail=tail(out, 30))


def step_ncu(run, facts):
    t = time.perf_counter()
    ncu = shutil.which("ncu") or find_tool("ncu")
    binary = os.path.join(run.build_dir or "", "bench", "circlerope_cuda_variants")
    if not facts.get("cuda_available") or run.args.cpu_dry_run:
        run.record("ncu", "skipped", "no CUDA device", t)
        return
    if not ncu or not os.path.exists(binary):
        run.record("ncu", "skipped", f"ncu: {ncu}, variants binary: {os.path.exists(binary)}", t)
        return
    metrics = ["launch__registers_per_thread", "sm__warps_active.avg.pct_of_peak_sustained_active",
               "sm__maximum_warps_per_active_cycle_pct", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "gpu__time_duration.sum", "launch__grid_size", "launch__block_size"]
    cmd = [ncu, "--clock-control", "none", "--kernel-name", "regex:rotate_variant", "--metrics", ",".join(metrics),
           "--csv", binary, "--one-each"]
    rc, out = run.sh(cmd, 90)
    lines = [line for line in out.splitlines() if line.startswith('"')]
    run.record("ncu", "pass" if rc == 0 and lines else "fail", f"{len(lines)} metric rows" if rc == 0 else f"exit {rc}",
               t, csv=lines[:200], tail=tail(out, 10))


def step_hf_check(run, facts):
    t = time.perf_counter()
    if not run.package_dir:
        run.record("hf_check", "skipped", "no build", t)
        return
    device = "cuda" if facts.get("cuda_available") and not run.args.cpu_dry_run else "cpu"
    rc, report, out = run_json_script(run, [run.python, os.path.join(ROOT, "scripts", "hf_check.py"),
                                            "--device", device], 180)
    if report is None:
        run.record("hf_check", "fail", f"exit {rc}, no JSON", t, tail=tail(out, 20))
        return
    run.record("hf_check", report.get("status", "fail"), report.get("reason", ""), t, report=report)


# The checks of test_hf_models.py that the GPU run makes (pytest -k), in each setting: M-RoPE
# through apply() bit for bit (video, padded batches; eager and sdpa), Circle-RoPE + M-RoPE (AGE
# "alternate") against the layer-by-layer forward, the per-layer spy, cached generate against a
# full recompute, official_decode, packing (and flash-attention's varlen kwargs), the fused
# rotation inside the models, the rotary's cos/sin, gradients under checkpointing, Qwen3-VL's
# per-frame rings, the fused rotation's checks. 66 of the file's 171 (with Qwen3-VL); the rest
# repeats these on other requests and geometries, or checks configs and errors that do not
# depend on the device.
HF_MODELS_SUBSET = " or ".join([
    "(unswitched_model_bit_for_bit and (video or padded))", "(transcription and alternate)",
    "each_layer_receives", "(cached_generate and (alternate or circle))", "official_decode",
    "packed_samples", "packed_positions", "flash_attention_2", "fused_rotation", "releases_rotary_embedding",
    "(gradients_are_the_same and False)", "qwen3_vl_video"])
# (dtype, rotation) of each run, in order: bfloat16 and the CUDA kernel first (the ask).
HF_MODELS_RUNS = (("bfloat16", "fused"), ("float32", "transformers"))
# One run at most. The subset (54 checks with Qwen3-VL) took 118 s (bfloat16, fused) and 88 s
# (float32) on the CPU of a loaded 2-core AMD EPYC; on the GPU machine pytest-xdist (when
# installed) spreads it over 4 processes. A run that would start with under 40 s left is skipped.
HF_MODELS_SECONDS = 90


def pytest_outcome(out):
    """The counts of pytest's last summary line, and its skip reasons (-rs)."""
    counts = {}
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary[-1] if summary else ""):
        counts["error" if what.startswith("error") else what] = int(n)
    reasons = sorted(set(re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", out, re.M)))
    return counts, reasons


def step_hf_models(run, facts):
    t = time.perf_counter()
    if not run.package_dir:
        run.record("hf_models", "skipped", "no build", t)
        return
    if not facts.get("pytest"):
        run.record("hf_models", "skipped",
                   "pytest is not installed (put one on PYTHONPATH): test_hf_models.py needs it", t)
        return
    if not facts.get("transformers"):
        run.record("hf_models", "skipped", "transformers is not installed", t)
        return
    test = os.path.join(ROOT, "python", "tests", "test_hf_models.py")
    on_gpu = bool(facts.get("cuda_available")) and not run.args.cpu_dry_run
    workers = min(4, (facts.get("cpus") or 2) // 2) if facts.get("xdist") else 0
    runs = []
    # The dry run has no GPU: the file must skip itself, saying so (one run shows it).
    for dtype, rotation in HF_MODELS_RUNS if on_gpu else HF_MODELS_RUNS[:1]:
        name = f"{dtype}, {rotation} rotation"
        if run.left() < 40:
            runs.append({"setting": name, "status": "skipped", "reason": "out of time budget"})
            continue
        cmd = [run.python, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", test, "-k", HF_MODELS_SUBSET]
        if workers > 1 and on_gpu:
            cmd += ["-n", str(workers)]
        # CUBLAS_WORKSPACE_CONFIG: cuBLAS deterministic under the gradient tests' deterministic mode.
        env = dict(run.pyenv(), CIRCLEROPE_HF_TEST_DEVICE="cuda", CIRCLEROPE_HF_TEST_DTYPE=dtype,
                   CIRCLEROPE_HF_TEST_ROTATION=rotation, CIRCLEROPE_TEST_THREADS="2",
                   CUBLAS_WORKSPACE_CONFIG=":4096:8")
        started = time.perf_counter()
        rc, out = run.sh(cmd, HF_MODELS_SECONDS, env=env)
        counts, reasons = pytest_outcome(out)
        entry = {"setting": name, "rc": rc, "seconds": round(time.perf_counter() - started, 1), "counts": counts,
                 "skip_reasons": reasons, "tail": tail(out, 30)}
        if rc == 124:
            entry.update(status="fail", reason=f"timed out after {entry['seconds']} s")
        elif rc not in (0, 5) or counts.get("failed") or counts.get("error"):
            entry.update(status="fail",
                         reason=f"exit {rc}: {counts.get('failed', 0)} failed, {counts.get('error', 0)} errors")
        elif not counts.get("passed"):
            # Skipped as a whole (no CUDA device, no CUDA kernels in the build): on a GPU a failure.
            entry.update(status="fail" if on_gpu else "skipped",
                         reason="; ".join(reasons) or f"nothing ran (exit {rc})")
        else:
            entry.update(status="pass", reason=f"{counts['passed']} passed, {counts.get('skipped', 0)} skipped")
        runs.append(entry)
    statuses = [r["status"] for r in runs]
    status = "fail" if "fail" in statuses else "pass" if "pass" in statuses else "skipped"
    reason = "; ".join(f"{r['setting']}: {r['status']} ({r['reason']})" for r in runs)
    run.record("hf_models", status, reason, t, runs=runs)


# In order of running: what the others need first, then the measurements, then the long test
# runs (each within what is left of the budget).
STEPS = (step_build, step_cuda_tests, step_compute_sanitizer, step_torch_tests, step_kernel_variants, step_benchmark,
         step_model_step, step_hf_models, step_hf_check, step_ncu)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="run what a CPU can, from an existing build")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--json", help="summary path (default $OUT/gpu_check.json or build/gpu_check.json)")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="seconds for the whole run")
    parser.add_argument("--steps", nargs="+", choices=[f.__name__[5:] for f in STEPS],
                        help="run only these steps (env always runs)")
    args = parser.parse_args(argv)
    run = Run(args)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    facts = step_env(run)
    for step in STEPS:
        name = step.__name__[5:]
        if args.steps and name not in args.steps:
            run.steps[name] = {"status": "skipped", "reason": "not asked for (--steps)", "seconds": 0}
            continue
        if run.left() < 15:
            run.steps[name] = {"status": "skipped", "reason": "out of time budget", "seconds": 0}
            continue
        try:
            step(run, facts)
        except Exception as e:  # noqa: BLE001 - one broken step must not hide the others
            run.steps.setdefault(name, {"status": "fail", "reason": f"{type(e).__name__}: {e}", "seconds": 0})
    failed = [n for n, s in run.steps.items() if s["status"] == "fail"]
    summary = {"script": "scripts/gpu_check.sh", "mode": "cpu-dry-run" if args.cpu_dry_run else "gpu",
               "started": started, "seconds": round(time.perf_counter() - run.start, 1),
               "ok": not failed, "failed": failed, "steps": run.steps}
    path = args.json or (os.path.join(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT")
                         else os.path.join(ROOT, "build", "gpu_check.json"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"[gpu_check] {'ok' if not failed else 'FAILED: ' + ', '.join(failed)}; "
          f"{summary['seconds']} s; summary in {path}", flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
