#!/usr/bin/env python3
"""The q/k rotation on a GPU against its peers, side by side in one process, on the same tensors.

Implementations (each given angles built once, outside the timed call, as a model's layers are):
  hf_eager     Hugging Face's formula in eager torch: q * cos + rotate_half(q) * sin (Qwen2.5-VL's
               apply_multimodal_rotary_pos_emb with the sections already picked);
  hf_compiled  the same function under torch.compile (Inductor; dynamic shapes, compiled once);
  liger        Liger-Kernel's Triton qwen2vl_mrope (LigerQwen2VLMRopeFunction), when
               liger_kernel imports: in place, cos/sin [3, B, S, D] in q's dtype;
  ours         torch.ops.circlerope.rotary_apply: out of place, float32 table [B, S, D];
  ours_inplace torch.ops.circlerope.rotary_apply_: in place, as Liger's.

For each: forward, backward (the vector-Jacobian product alone: Liger's and our backward
kernels called directly, torch.autograd.grad of a kept graph for the formula) and fwd+bwd
through autograd (q and k made non-leaf by a multiply, as a projection makes them, for every
implementation), each
  * per call: CUDA-event time of many calls in a row over the number of calls (host time
    included wherever the host, not the device, is the slower: small shapes);
  * per kernel: device time from torch.profiler (CUPTI), the sum of the implementation's
    kernels per call, no launch gaps.
Beside them, a device-to-device copy of q and k (the bytes the rotation must read and write),
and each implementation's error against float64: the largest |error| of a rotation pair over
the pair's norm (src/reference/rotary_reference.h's measure), on the first tokens.

Every call reads buffers that the calls before it did not touch (sets of inputs taken in turn,
at least 512 MB apart in all): the L2 cache (50-60 MB) holds none of a call's input, so the
figures are DRAM figures, as in a model whose layers do other work between rotations.

Shapes: Qwen2.5-VL-3B (16 q / 2 kv heads) and -7B (28 / 4), head dim 128, sections (16, 24, 24),
theta 1e6, q/k in Hugging Face's layout ([B, S, H, D] memory seen as [B, H, S, D]), batch 1 and
4, S 4096, 16384 and 32768, bfloat16 and float32; Circle-RoPE positions of a row with a
32 x 40 merged image. Host time per call is measured apart, on one token.

    PYTHONPATH=build/gpu/python python3 bench/gpu_rotary.py [--json PATH] [--quick]
    PYTHONPATH=build/release/python .venv/bin/python bench/gpu_rotary.py --device cpu --quick

--device cpu runs the same code on the CPU with small shapes, without the profiler's device
times, torch.compile or Liger: a check of the script, not a measurement.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

import circlerope
from circlerope.hf import reference as hf_reference

SECTIONS, THETA, HEAD_DIM = (16, 24, 24), 1e6, 128
MODELS = {"3B": (16, 2), "7B": (28, 4)}
VISION_START, VISION_END, IMAGE = 151652, 151653, 151655
# the CPU kernels' per-pair tolerances (rotary_reference.h): fp32 1e-6, 16-bit one rounding
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 2 ** -8 + 1e-6, torch.float16: 2 ** -11 + 1e-6}
TARGETS = {"copy_fraction": 0.85, "host_us": 10.0}
COLD_BYTES = 512 << 20  # the buffers one round of calls walks through
ERROR_TOKENS = 2048     # tokens of batch row 0 compared against float64


def request(seq):
    """One row of `seq` tokens: text, a merged image between vision markers (32 x 40 when it
    fits, 4 x 5 for short rows), text."""
    hm, wm = (32, 40) if seq >= 2000 else (4, 5)
    prefix = min(100, seq // 4)
    suffix = seq - prefix - 2 - hm * wm
    assert suffix >= 0, f"S={seq} is too short for the image"
    gen = torch.Generator().manual_seed(0)
    row = torch.cat([torch.randint(1000, 141000, (prefix,), generator=gen), torch.tensor([VISION_START]),
                     torch.full((hm * wm,), IMAGE), torch.tensor([VISION_END]),
                     torch.randint(1000, 141000, (suffix,), generator=gen)])
    return row.unsqueeze(0), torch.tensor([[1, 2 * hm, 2 * wm]])


# ---- the peers' angles and formulas -----------------------------------------------------------

def hf_cos_sin_3d(position_ids):
    """Qwen2-VL's rotary embedding output: cos/sin [3, B, S, D] in float32, every frequency on
    every axis, halves repeated (transformers 4.x; what Liger's kernel takes)."""
    return hf_reference.rotary_embedding(position_ids, HEAD_DIM, THETA)


# Hugging Face's formula: q * cos + rotate_half(q) * sin, cos/sin [B, S, D] (sections picked)
hf_formula = hf_reference.apply_rotary_pos_emb


def float64_reference(q, k, position_ids, tokens):
    """The rotation in float64 of batch row 0's first `tokens` tokens: per head (y0, y1, x0, x1)."""
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64, device=q.device) / HEAD_DIM)
    axes = torch.tensor([0] * SECTIONS[0] + [1] * SECTIONS[1] + [2] * SECTIONS[2], device=q.device)
    pos = position_ids[:, :1, :tokens].double()
    freqs = (pos[..., None] * inv).gather(0, axes.view(1, 1, 1, -1).expand(1, *pos.shape[1:], -1))[0]
    c, s = freqs.cos()[:, None], freqs.sin()[:, None]
    out = []
    for x in (q, k):
        x = x[:1, :, :tokens].double()
        a, b = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        out.append((a * c - b * s, b * c + a * s, a, b))
    return out


def pair_error(got, reference, tokens):
    worst = 0.0
    for g, (y0, y1, a, b) in zip(got, reference):
        g = g[:1, :, :tokens].double()
        e = torch.maximum((g[..., : HEAD_DIM // 2] - y0).abs(), (g[..., HEAD_DIM // 2:] - y1).abs())
        norm = torch.hypot(a, b)
        rel = torch.where(norm > 0, e / norm.clamp(min=1e-300), torch.where(e > 0, math.inf, 0.0))
        worst = max(worst, rel.max().item())
    return worst


# ---- timing ---------------------------------------------------------------------------------------

def per_call_ms(fn, calls, device, repeats=3):
    """Median over `repeats` of (time of `calls` calls in a row) / calls: CUDA events on a GPU."""
    fn(0)
    runs = []
    for _ in range(repeats):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for i in range(calls):
                fn(i)
            end.record()
            end.synchronize()
            runs.append(begin.elapsed_time(end) / calls)
        else:
            t = time.perf_counter()
            for i in range(calls):
                fn(i)
            runs.append((time.perf_counter() - t) * 1e3 / calls)
    return statistics.median(runs)


def device_ms(blocks, calls):
    """{name: device ms per call} for each fn of `blocks`: one profiler session, each block run
    `calls` times between synchronisations; every device event (kernel, memcpy, memset) that
    ran inside a block's window counts for it, whatever thread launched it (autograd's
    backward runs in its own)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for fn in blocks.values():
        fn(0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for name, fn in blocks.items():
            with record_function(f"crbench::{name}"):
                for i in range(calls):
                    fn(i)
                torch.cuda.synchronize()
            time.sleep(0.002)
    events = prof.events()
    windows = {e.name[len("crbench::"):]: (e.time_range.start, e.time_range.end) for e in events
               if e.name.startswith("crbench::") and e.device_type == torch.autograd.DeviceType.CPU}
    device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
              and not e.name.startswith("crbench::")]
    out = {}
    for name, (start, end) in windows.items():
        total = sum(e.time_range.end - e.time_range.start for e in device
                    if e.time_range.start >= start and e.time_range.end <= end)
        out[name] = total / 1e3 / calls if total > 0 else None  # None: the profiler saw no device event
    return out


def host_us_per_call(fn, calls=2000):
    """Host time of one call: the wall clock of `calls` calls in a row on one token, whose
    kernels take less time than their launch (the device never holds the host back)."""
    for _ in range(50):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return elapsed / calls * 1e6


# ---- one shape ------------------------------------------------------------------------------------

def load_liger():
    try:
        from liger_kernel.ops.qwen2vl_mrope import (LigerQwen2VLMRopeFunction, qwen2vl_mrope_backward,
                                                    qwen2vl_mrope_forward)
        import liger_kernel
        return {"function": LigerQwen2VLMRopeFunction, "forward": qwen2vl_mrope_forward,
                "backward": qwen2vl_mrope_backward, "version": getattr(liger_kernel, "__version__", None)}
    except Exception as e:  # noqa: BLE001 - any import failure means "not available", said in the report
        return {"error": f"{type(e).__name__}: {e}"}


def bench_case(model, batch, seq, dtype, device, peers, quick):
    hq, hk = MODELS[model]
    ids, grid = request(seq)
    pos1, _ = circlerope.get_rope_index(ids, grid, scheme="circle")
    position_ids = pos1.expand(3, batch, seq).contiguous().to(device)
    config = circlerope.RotaryConfig(sections=SECTIONS, theta=THETA)
    table = circlerope.rotary_table(position_ids, config)
    cos3, sin3 = hf_cos_sin_3d(position_ids)
    cos_hf = hf_reference.select_sections(cos3, SECTIONS).to(dtype)  # [B, S, D]: one layer's angles
    sin_hf = hf_reference.select_sections(sin3, SECTIONS).to(dtype)
    cos_liger, sin_liger = cos3.to(dtype).contiguous(), sin3.to(dtype).contiguous()
    element = torch.tensor([], dtype=dtype).element_size()
    qk_bytes = batch * seq * (hq + hk) * HEAD_DIM * element
    table_bytes = table.numel() * 4
    sets = max(2, min(16, COLD_BYTES // (2 * qk_bytes) + 1)) if device.type == "cuda" else 1
    gen = torch.Generator().manual_seed(1)

    def projection(heads):  # [B, S, H, D] memory seen as [B, H, S, D], as HF's q after transpose
        return torch.randn(batch, seq, heads, HEAD_DIM, generator=gen).to(dtype).to(device).transpose(1, 2)

    inputs = [(projection(hq), projection(hk)) for _ in range(sets)]
    grads = [(projection(hq), projection(hk)) for _ in range(sets)]

    def pick(i):
        return inputs[i % sets]

    op, op_inplace = torch.ops.circlerope.rotary_apply, torch.ops.circlerope.rotary_apply_
    impls = {
        "hf_eager": lambda q, k: hf_formula(q, k, cos_hf, sin_hf),
        "ours": lambda q, k: op(q, k, table, "neox", "bhsd", False),
    }
    if "compiled" in peers:
        impls["hf_compiled"] = lambda q, k: peers["compiled"](q, k, cos_hf, sin_hf)
    liger = peers.get("liger")
    if liger and "function" in liger:
        impls["liger"] = lambda q, k: liger["function"].apply(q, k, cos_liger, sin_liger, list(SECTIONS))
    impls["ours_inplace"] = lambda q, k: (op_inplace(q, k, table, "neox", "bhsd", False), (q, k))[1]

    result = {"model": model, "batch": batch, "seq": seq, "dtype": str(dtype).replace("torch.", ""),
              "q_heads": hq, "kv_heads": hk, "input_sets": sets, "bytes_qk": qk_bytes, "bytes_table": table_bytes,
              "impls": {}}
    # errors against float64, on a copy (the in-place peers overwrite their input)
    tokens = min(seq, ERROR_TOKENS)
    q0, k0 = inputs[0]
    reference = float64_reference(q0, k0, position_ids, tokens)
    failed = {}
    for name, fn in list(impls.items()):
        q, k = q0.clone(), k0.clone()
        try:
            result["impls"][name] = {"error": pair_error(fn(q, k), reference, tokens)}
        except Exception as e:  # noqa: BLE001 - a peer that fails is reported, not fatal
            failed[name] = f"{type(e).__name__}: {e}"[:300]
            del impls[name]
    result["failed"] = failed
    result["tolerance"] = TOLERANCE[dtype]

    calls = 5 if quick or batch * seq > 16384 else 10  # the large shapes: fewer calls, each long
    # forward, and the backward (vector-Jacobian product) alone
    fwd = {name: (lambda i, f=fn: f(*pick(i))) for name, fn in impls.items()}
    bwd = {"ours": lambda i: op(*grads[i % sets], table, "neox", "bhsd", True),
           "ours_inplace": lambda i: op_inplace(*grads[i % sets], table, "neox", "bhsd", True)}
    if "liger" in impls:
        bwd["liger"] = lambda i: liger["backward"](*grads[i % sets], cos_liger, sin_liger, list(SECTIONS))
    kept = {}  # a graph per set for the formula's backward

    def formula_backward(name):
        def run(i):
            key = (name, i % sets)
            if key not in kept:
                q, k = (x.detach().requires_grad_() for x in pick(i))
                kept[key] = (impls[name](q, k), (q, k))
            outs, leaves = kept[key]
            torch.autograd.grad(outs, leaves, grads[i % sets], retain_graph=True)
        return run

    for name in ("hf_eager", "hf_compiled"):
        if name in impls:
            bwd[name] = formula_backward(name)

    # fwd + bwd through autograd; a multiply makes q and k non-leaf, as a projection does
    leaves = [tuple(x.detach().requires_grad_() for x in pair) for pair in inputs]

    def train_step(fn):
        def run(i):
            lq, lk = leaves[i % sets]
            lq.grad = lk.grad = None
            qo, ko = fn(lq * 1.0, lk * 1.0)
            torch.autograd.backward([qo, ko], list(grads[i % sets]))
        return run

    both = {name: train_step(fn) for name, fn in impls.items() if name != "ours_inplace"}
    both["multiply_only"] = lambda i: (leaves[i % sets][0] * 1.0, leaves[i % sets][1] * 1.0)

    def copy(i):
        q, k = pick(i)
        q2, k2 = pick(i + 1)
        q2.copy_(q)
        k2.copy_(k)

    profiled = {}
    for mode, blocks in (("forward", fwd), ("backward", bwd), ("fwd_bwd", both)):
        for name, fn in blocks.items():
            entry = result["impls"].setdefault(name, {})
            try:
                entry[f"{mode}_call_ms"] = per_call_ms(fn, calls, device)
                profiled[f"{mode}:{name}"] = fn
            except Exception as e:  # noqa: BLE001 - reported, and left out of the profile
                failed[f"{name} {mode}"] = f"{type(e).__name__}: {e}"[:300]
    result["copy_call_ms"] = per_call_ms(copy, calls, device)
    profiled["copy:copy"] = copy
    if device.type == "cuda":  # one profiler session for every block of the shape
        for key, ms in device_ms(profiled, calls).items():
            mode, name = key.split(":")
            if mode == "copy":
                result["copy_device_ms"] = ms or result["copy_call_ms"]
            else:
                result["impls"][name][f"{mode}_device_ms"] = ms
    if device.type == "cuda":
        result["copy_device_ms"] = device_ms({"copy": copy}, calls)["copy"] or result["copy_call_ms"]
        moved = 2 * qk_bytes + table_bytes
        copy_gbps = 2 * qk_bytes / result["copy_device_ms"] / 1e6
        result["copy_gbps"] = copy_gbps
        for mode in ("forward", "backward"):
            for name in ("ours", "ours_inplace"):
                ms = result["impls"][name].get(f"{mode}_device_ms")
                if ms:
                    gbps = moved / ms / 1e6
                    result["impls"][name][f"{mode}_gbps"] = gbps
                    result["impls"][name][f"{mode}_copy_fraction"] = gbps / copy_gbps
        if "liger" in impls:
            for mode in ("forward", "backward"):
                liger_ms = result["impls"]["liger"].get(f"{mode}_device_ms")
                for name in ("ours", "ours_inplace"):
                    ms = result["impls"][name].get(f"{mode}_device_ms")
                    if ms and liger_ms:
                        result[f"{mode}_{name}_over_liger"] = ms / liger_ms
    return result


def host_overheads(device, peers):
    """Host microseconds of one call on one token, for the op, the public function and the peers."""
    pos, _ = circlerope.get_rope_index(torch.tensor([[1, 2, 3]]), scheme="mrope")
    pos = pos.to(device)
    table = circlerope.rotary_table(pos, circlerope.RotaryConfig(sections=SECTIONS, theta=THETA))
    q = torch.randn(1, 3, 16, HEAD_DIM, device=device, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(1, 3, 2, HEAD_DIM, device=device, dtype=torch.bfloat16).transpose(1, 2)
    qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    op = torch.ops.circlerope.rotary_apply
    out = {
        "op": host_us_per_call(lambda: op(q, k, table, "neox", "bhsd", False)),
        "op_requires_grad": host_us_per_call(lambda: op(qg, kg, table, "neox", "bhsd", False)),
        "apply_rotary": host_us_per_call(lambda: circlerope.apply_rotary(q, k, table)),
        "apply_rotary_requires_grad": host_us_per_call(lambda: circlerope.apply_rotary(qg, kg, table)),
        "op_inplace": host_us_per_call(lambda: torch.ops.circlerope.rotary_apply_(q, k, table, "neox", "bhsd", False)),
        "rotary_table_op": host_us_per_call(
            lambda: torch.ops.circlerope.rotary_table(pos, HEAD_DIM, list(SECTIONS), THETA, "chunked")),
        "torch_mul": host_us_per_call(lambda: q * 2.0),
    }
    liger = peers.get("liger")
    if liger and "function" in liger:
        cos, sin = (t.to(torch.bfloat16) for t in hf_cos_sin_3d(pos))
        out["liger"] = host_us_per_call(lambda: liger["function"].apply(q, k, cos, sin, list(SECTIONS)))
        out["liger_requires_grad"] = host_us_per_call(
            lambda: liger["function"].apply(qg * 1.0, kg * 1.0, cos, sin, list(SECTIONS)))
        out["torch_mul_twice"] = host_us_per_call(lambda: (qg * 1.0, kg * 1.0))
    return out


def device_facts(device):
    facts = {"torch": torch.__version__, "device": str(device), "circlerope": circlerope.__version__}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        facts.update(name=p.name, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2 ** 30, 1),
                     cuda=torch.version.cuda, multiprocessors=p.multi_processor_count)
        try:
            import triton
            facts["triton"] = triton.__version__
        except ImportError:
            facts["triton"] = None
    else:
        facts["name"] = "CPU (script check, not a measurement)"
    return facts


def print_table(report):
    f = report["facts"]
    print(f"{f['name']}, torch {f['torch']}; device ms per call (per kernel, profiler) unless marked; "
          "copy = q and k read and written")
    names = ["hf_eager", "hf_compiled", "liger", "ours", "ours_inplace"]
    head = f"{'shape':<18} {'dtype':>8} {'mode':>8} " + " ".join(f"{n:>12}" for n in names) + f" {'copy':>8} {'ours/copy':>9}"
    print(head)
    for r in report["results"]:
        shape = f"{r['model']} B{r['batch']} S{r['seq']}"
        for mode in ("forward", "backward", "fwd_bwd"):
            key = f"{mode}_device_ms" if f"{mode}_device_ms" in r["impls"]["ours" if mode != "fwd_bwd" else "ours"] \
                else f"{mode}_call_ms"
            cells = []
            for n in names:
                v = r["impls"].get(n, {}).get(key)
                cells.append(f"{v:>12.4f}" if v is not None else f"{'-':>12}")
            frac = r["impls"]["ours"].get(f"{mode}_copy_fraction")
            copy = r.get("copy_device_ms", r.get("copy_call_ms"))
            print(f"{shape:<18} {r['dtype']:>8} {mode:>8} " + " ".join(cells) +
                  f" {copy if mode != 'fwd_bwd' else float('nan'):>8.4f} " +
                  (f"{frac:>8.0%}" if frac is not None else f"{'-':>9}"))
    print("errors against float64 (largest pair error over the pair's norm):")
    for r in report["results"]:
        print(f"  {r['model']} B{r['batch']} S{r['seq']} {r['dtype']}: " +
              ", ".join(f"{n} {v['error']:.2e}" for n, v in r["impls"].items() if "error" in v))
    print("host us per call (one token): " + ", ".join(f"{k} {v:.1f}" for k, v in report["host_us"].items()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--batches", type=int, nargs="+")
    parser.add_argument("--seqs", type=int, nargs="+")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile's formula out")
    parser.add_argument("--quick", action="store_true", help="few calls (a check of the script)")
    parser.add_argument("--json", help="write the report there ('-': print it as the only output)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_rotary: no CUDA device")
    if device.type == "cuda" and not circlerope.has_cuda_kernels():
        sys.exit("gpu_rotary: this circlerope build has no CUDA kernels")
    on_gpu = device.type == "cuda"
    seqs = args.seqs or ([4096, 16384, 32768] if on_gpu else [300])
    batches = args.batches or ([1, 4] if on_gpu else [1])
    peers = {}
    if on_gpu:
        peers["liger"] = load_liger()
        if not args.no_compile:
            peers["compiled"] = torch.compile(hf_formula, dynamic=True)
    results = []
    cases = [(m, b, s, getattr(torch, d)) for d in args.dtypes for m in args.models for b in batches for s in seqs]
    started = time.perf_counter()
    report = {"facts": device_facts(device), "targets": TARGETS, "results": results, "host_us": {}}
    if "liger" in peers:
        report["facts"]["liger_kernel"] = peers["liger"].get("version") or peers["liger"].get("error")
    report["host_us"] = host_overheads(device, peers)
    for n, (m, b, s, d) in enumerate(cases, 1):
        results.append(bench_case(m, b, s, d, device, peers, args.quick))
        print(f"[gpu_rotary] {n}/{len(cases)} {m} B{b} S{s} {d} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
        if args.json and args.json != "-":  # what is done so far survives a timeout
            with open(args.json, "w") as f:
                json.dump(report, f, indent=2)
    if args.json == "-":
        print(json.dumps(report, indent=2))
        return report
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    print_table(report)
    return report


if __name__ == "__main__":
    main()
