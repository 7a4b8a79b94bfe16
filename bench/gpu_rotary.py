#!/usr/bin/env python3
"""The rotation on a GPU, at Qwen2.5-VL-3B shapes, in one run:

  * GB/s of the fused forward and of the backward (the same kernel with -phi), each against
    a device-to-device copy of the same bytes measured in the same run (target >= 85%);
  * forward + backward through autograd against the Hugging Face formula in eager torch
    (Qwen2.5-VL's apply_multimodal_rotary_pos_emb: cos/sin from position_ids, q * cos +
    rotate_half(q) * sin), both building their angles inside the timed call ("full"), and
    both reusing angles built outside, as every layer of a model does ("layer") (target >= 5x);
  * the error of the fused result against the float64 formula, per rotation pair relative to
    the pair's norm, beside the CPU kernels' tolerances (src/reference/rotary_reference.h).

Shapes: batch 1, 16 query heads, 2 KV heads, head dim 128, sections (16, 24, 24), theta 1e6,
q/k in Hugging Face's layout (a [B, S, H, D] projection seen as [B, H, S, D]), Circle-RoPE
positions of a request with a 32 x 40 image. S 4096 and 16384, bfloat16 and float32.

    PYTHONPATH=build/gpu/python python3 bench/gpu_rotary.py [--json]
    PYTHONPATH=build/release/python .venv/bin/python bench/gpu_rotary.py --device cpu --quick

--device cpu runs the same code on the CPU with small shapes (a check of the script, not a
measurement). Times are medians of CUDA-event timings over repeated calls.
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

HEADS_Q, HEADS_KV, HEAD_DIM = 16, 2, 128
SECTIONS, THETA = (16, 24, 24), 1e6
VISION_START, VISION_END, IMAGE = 151652, 151653, 151655
CIRCLE = circlerope.CircleConfig(radius=10.0, alpha=0.5, move_to_origin=True)
# the CPU kernels' per-pair tolerances (rotary_reference.h): fp32 1e-6, 16-bit one rounding
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 2 ** -8 + 1e-6, torch.float16: 2 ** -11 + 1e-6}
TARGET_COPY_FRACTION, TARGET_SPEEDUP = 0.85, 5.0


def request(seq):
    """One row of `seq` tokens: text, a merged image between vision markers (32 x 40 when it
    fits, 4 x 5 for the short rows of --device cpu), text."""
    hm, wm = (32, 40) if seq >= 2000 else (4, 5)
    prefix = min(100, seq // 4)
    suffix = seq - prefix - 2 - hm * wm
    assert suffix >= 0, f"S={seq} is too short for the image"
    gen = torch.Generator().manual_seed(0)
    row = torch.cat([torch.randint(1000, 141000, (prefix,), generator=gen), torch.tensor([VISION_START]),
                     torch.full((hm * wm,), IMAGE), torch.tensor([VISION_END]),
                     torch.randint(1000, 141000, (suffix,), generator=gen)])
    return row.unsqueeze(0), torch.tensor([[1, 2 * hm, 2 * wm]])


# ---- the Hugging Face formula (Qwen2.5-VL), eager ------------------------------------------

def hf_cos_sin(position_ids, dtype):
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32, device=position_ids.device) / HEAD_DIM))
    freqs = position_ids[..., None].float() * inv_freq  # [3, B, S, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    split = list(SECTIONS) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(split, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(split, dim=-1))], dim=-1)
    return cos.unsqueeze(1).to(dtype), sin.unsqueeze(1).to(dtype)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def hf_rotary(q, k, position_ids):
    cos, sin = hf_cos_sin(position_ids, q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def ours_rotary(q, k, position_ids):
    return circlerope.apply_multimodal_rotary(q, k, position_ids, sections=SECTIONS, theta=THETA)


def exact(q, k, position_ids):
    """float64 formula on the device: the reference for the error."""
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64, device=q.device) / HEAD_DIM)
    axes = torch.tensor([0] * SECTIONS[0] + [1] * SECTIONS[1] + [2] * SECTIONS[2], device=q.device)
    freqs = position_ids.double()[..., None] * inv  # [3, B, S, D/2]
    freqs = freqs.gather(0, axes.view(1, 1, 1, -1).expand(1, *freqs.shape[1:]))[0]
    c, s = freqs.cos()[:, None], freqs.sin()[:, None]
    out = []
    for x in (q, k):
        x = x.double()
        a, b = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        out.append((a * c - b * s, b * c + a * s, a, b))
    return out


def pair_error(got, reference):
    """Largest |error| of a rotation pair over the pair's norm (rotary_reference.h's measure)."""
    worst = 0.0
    for g, (y0, y1, a, b) in zip(got, reference):
        g = g.double()
        e = torch.maximum((g[..., : HEAD_DIM // 2] - y0).abs(), (g[..., HEAD_DIM // 2:] - y1).abs())
        norm = torch.hypot(a, b)
        rel = torch.where(norm > 0, e / norm.clamp(min=1e-300), torch.where(e > 0, math.inf, 0.0))
        worst = max(worst, rel.max().item())
    return worst


# ---- timing ------------------------------------------------------------------------------------

class Timer:
    def __init__(self, device, reps, warmup, min_seconds):
        self.device, self.reps, self.warmup, self.min_seconds = device, reps, warmup, min_seconds

    def median_ms(self, fns):
        """Median ms per call of each function, repetitions alternating between them."""
        for fn in fns.values():
            for _ in range(self.warmup):
                fn()
        runs = {name: [] for name in fns}
        start = time.perf_counter()
        while min(len(r) for r in runs.values()) < self.reps or time.perf_counter() - start < self.min_seconds:
            for name, fn in fns.items():
                runs[name].append(self._once(fn))
        return {name: statistics.median(r) for name, r in runs.items()}

    def _once(self, fn):
        if self.device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            return begin.elapsed_time(end)
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3


def bench_case(dtype, seq, device, timer):
    input_ids, grid = request(seq)
    position_ids, _ = circlerope.get_rope_index(input_ids, grid, scheme="circle", circle=CIRCLE)
    position_ids = position_ids.to(device)
    gen = torch.Generator().manual_seed(1)

    def projection(heads):  # [B, S, H, D] memory seen as [B, H, S, D], as HF's q after transpose
        return torch.randn(1, seq, heads, HEAD_DIM, generator=gen).to(dtype).to(device).transpose(1, 2)

    q, k, gq, gk = projection(HEADS_Q), projection(HEADS_KV), projection(HEADS_Q), projection(HEADS_KV)
    table = circlerope.rotary_table(position_ids, sections=SECTIONS, theta=THETA)
    assert table.device == q.device, (table.device, q.device)
    element = q.element_size()
    qk_bytes = (HEADS_Q + HEADS_KV) * seq * HEAD_DIM * element
    table_bytes = seq * HEAD_DIM * 4
    moved = 2 * qk_bytes + table_bytes  # q, k read and written once, the table read once
    src = torch.empty(qk_bytes // element, dtype=dtype, device=device).normal_()
    dst = torch.empty_like(src)
    op = torch.ops.circlerope.rotary_apply

    # correctness first: forward against float64, backward against the inverse rotation
    qo, ko = op(q, k, table, "neox", "bhsd", False)
    forward_error = pair_error((qo, ko), exact(q, k, position_ids))
    qb, kb = op(qo, ko, table, "neox", "bhsd", True)
    round_trip = max((qb.float() - q.float()).abs().max().item(), (kb.float() - k.float()).abs().max().item())

    ms = timer.median_ms({
        "copy": lambda: dst.copy_(src),
        "forward": lambda: op(q, k, table, "neox", "bhsd", False),
        "backward": lambda: op(q, k, table, "neox", "bhsd", True),
        "table": lambda: circlerope.rotary_table(position_ids, sections=SECTIONS, theta=THETA),
    })
    copy_gbps = 2 * qk_bytes / ms["copy"] / 1e6
    result = {
        "dtype": str(dtype).replace("torch.", ""), "seq": seq, "device": str(device),
        "bytes_moved": moved, "copy_ms": ms["copy"], "copy_gbps": copy_gbps,
        "table_ms": ms["table"],
        "forward_error": forward_error, "tolerance": TOLERANCE[dtype],
        "within_tolerance": forward_error <= TOLERANCE[dtype], "round_trip_max_abs": round_trip,
    }
    for name in ("forward", "backward"):
        gbps = moved / ms[name] / 1e6
        result[f"{name}_ms"] = ms[name]
        result[f"{name}_gbps"] = gbps
        result[f"{name}_copy_fraction"] = gbps / copy_gbps

    # forward + backward through autograd, two ways:
    #  - "full": angles built from position_ids inside the call on both sides (as
    #    bench/torch_ops.py times the CPU op); ours then includes the table op's one
    #    synchronisation (its check for non-finite positions);
    #  - "layer": angles built once, outside (a model builds them once per forward pass and
    #    every layer reuses them): HF's q * cos + rotate_half(q) * sin against the fused op.
    leaves = [t.detach().clone().requires_grad_() for t in (q, k)]
    cos, sin = hf_cos_sin(position_ids, dtype)

    def step(rotary):
        for t in leaves:
            t.grad = None
        qo, ko = rotary(leaves[0], leaves[1])
        torch.autograd.backward([qo, ko], [gq, gk])

    variants = {
        "hf_full": lambda a, b: hf_rotary(a, b, position_ids),
        "ours_full": lambda a, b: ours_rotary(a, b, position_ids),
        "hf_layer": lambda a, b: (a * cos + rotate_half(a) * sin, b * cos + rotate_half(b) * sin),
        "ours_layer": lambda a, b: circlerope.apply_rotary(a, b, table),
    }
    grads = {}
    for name, rotary in variants.items():
        step(rotary)
        grads[name] = [t.grad.clone() for t in leaves]
    result["grad_max_abs_diff_vs_hf"] = max((a.float() - b.float()).abs().max().item()
                                            for a, b in zip(grads["ours_full"], grads["hf_full"]))
    ms = timer.median_ms({name: (lambda r=rotary: step(r)) for name, rotary in variants.items()})
    for name in variants:
        result[f"{name}_fwd_bwd_ms"] = ms[name]
    result["speedup_vs_hf"] = ms["hf_full"] / ms["ours_full"]
    result["speedup_vs_hf_layer"] = ms["hf_layer"] / ms["ours_layer"]
    result["meets_copy_target"] = min(result["forward_copy_fraction"], result["backward_copy_fraction"]) >= TARGET_COPY_FRACTION
    result["meets_speedup_target"] = min(result["speedup_vs_hf"], result["speedup_vs_hf_layer"]) >= TARGET_SPEEDUP
    return result


def device_facts(device):
    facts = {"torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        facts.update(name=p.name, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2 ** 30, 1),
                     cuda=torch.version.cuda)
    else:
        facts["name"] = "CPU (script check, not a measurement)"
    return facts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seqs", type=int, nargs="+")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--quick", action="store_true", help="few repetitions (a check of the script)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_rotary: no CUDA device")
    if device.type == "cuda" and not circlerope.has_cuda_kernels():
        sys.exit("gpu_rotary: this circlerope build has no CUDA kernels")
    seqs = args.seqs or ([4096, 16384] if device.type == "cuda" else [300])
    timer = Timer(device, *((3, 1, 0.0) if args.quick else (20, 3, 0.5)))
    results = [bench_case(getattr(torch, d), s, device, timer) for d in args.dtypes for s in seqs]
    report = {"facts": device_facts(device), "targets": {"copy_fraction": TARGET_COPY_FRACTION,
              "speedup_vs_hf": TARGET_SPEEDUP}, "results": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return report
    f = report["facts"]
    print(f"{f['name']}, torch {f['torch']}; q [1,{HEADS_Q},S,{HEAD_DIM}] k [1,{HEADS_KV},S,{HEAD_DIM}], HF layout")
    print("fwd+bwd ms: 'full' builds the angles from position_ids inside each call, 'layer' reuses them")
    print(f"{'dtype':>9} {'S':>6} {'copy GB/s':>10} {'fwd GB/s':>9} {'fwd/copy':>9} {'bwd GB/s':>9} "
          f"{'bwd/copy':>9} {'HF full':>8} {'ours':>7} {'x':>6} {'HF layer':>9} {'ours':>7} {'x':>6} {'error':>9}")
    for r in results:
        print(f"{r['dtype']:>9} {r['seq']:>6} {r['copy_gbps']:>10.0f} {r['forward_gbps']:>9.0f} "
              f"{r['forward_copy_fraction']:>8.0%} {r['backward_gbps']:>9.0f} {r['backward_copy_fraction']:>8.0%} "
              f"{r['hf_full_fwd_bwd_ms']:>8.3f} {r['ours_full_fwd_bwd_ms']:>7.3f} {r['speedup_vs_hf']:>5.1f}x "
              f"{r['hf_layer_fwd_bwd_ms']:>9.3f} {r['ours_layer_fwd_bwd_ms']:>7.3f} {r['speedup_vs_hf_layer']:>5.1f}x "
              f"{r['forward_error']:>9.2e}")
    return report


if __name__ == "__main__":
    main()
