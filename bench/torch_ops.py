#!/usr/bin/python3
"""Speed of circlerope's torch operators against plain PyTorch, measured in one run.

Two ratios:

1. Rotation, forward + backward, at Qwen2.5-VL-3B shapes (batch 1, 16 query heads, 2 KV
   heads, head dim 128, S = 4096, M-RoPE sections (16, 24, 24), theta 1e6), float32 and
   bfloat16, q/k in Hugging Face's [batch, heads, seq, head_dim] layout with
   requires_grad. `circlerope.apply_multimodal_rotary` (angle table built from the
   Circle-RoPE position_ids inside the call) against Hugging Face's Qwen2.5-VL formula
   re-written here in eager PyTorch (cos/sin built from position_ids inside the timed
   region too). Each repetition is one forward and one backward with fixed upstream
   gradients. Target: >= 5x.
2. Positions: `circlerope.get_rope_index` (scheme "circle") against the reference's
   Python loop of small torch operations (bench/reference_loop.py) on its benchmark batch
   (8 rows x 814 tokens, two images per row). Target: >= 100x.

Both sides are checked to agree before they are timed; timings are medians over
repetitions that alternate the two sides, so drift hits both.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/torch_ops.py [--quick] [--json]

--quick runs a handful of repetitions (a smoke test of the script, not a measurement);
--json prints one JSON object instead of tables. Needs Debian's python3-torch. It is a
benchmark: CI does not run or time it.
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import sys
import time

import torch

import circlerope

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_rotary import apply as hf_apply, cos_sin as hf_cos_sin  # noqa: E402
from hf_rotary import D as HF_HEAD_DIM, SECTIONS as HF_SECTIONS, THETA as HF_THETA  # noqa: E402
from reference_loop import benchmark_request, reference_positions  # noqa: E402

HEADS_Q, HEADS_KV, HEAD_DIM, SEQ = 16, 2, 128, 4096
SECTIONS, THETA = (16, 24, 24), 1e6
VISION_START, VISION_END, IMAGE = 151652, 151653, 151655
MERGE = 2
CIRCLE = circlerope.CircleConfig(radius=10.0, alpha=0.5, move_to_origin=True)
TOLERANCE = {torch.float32: 5e-3, torch.bfloat16: 0.1}
assert (HF_HEAD_DIM, tuple(HF_SECTIONS), HF_THETA) == (HEAD_DIM, SECTIONS, THETA), "one shape for both sides"


# ------------------------------------------------------------------ machine ---

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts():
    # glibc serves blocks of 32 MiB and more (a float32 q here) with fresh mmaps, so their
    # page faults count in both sides' times; MALLOC_* variables change that, so they are shown
    malloc = {k: v for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_")}
    return {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
            "malloc_env": malloc}


# ------------------------------------------------------------------- timing ---

def median_ms_alternating(fns, min_reps, min_seconds, warmup):
    """Median milliseconds per call of each function in `fns` (name -> callable, or
    name -> (callable, calls per repetition)). Every repetition runs all of them in turn;
    repetitions go on until there are min_reps of them and the loop has run
    len(fns) * min_seconds seconds in all."""
    plan = {name: (f if isinstance(f, tuple) else (f, 1)) for name, f in fns.items()}
    for fn, calls in plan.values():
        for _ in range(warmup * calls):
            fn()
    runs = {name: [] for name in plan}
    start = time.perf_counter()
    while len(next(iter(runs.values()))) < min_reps or time.perf_counter() - start < len(plan) * min_seconds:
        for name, (fn, calls) in plan.items():
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            runs[name].append((time.perf_counter() - t) * 1e3 / calls)
    return {name: statistics.median(r) for name, r in runs.items()}, len(next(iter(runs.values())))


# ----------------------------------------------------------------- rotation ---

def multimodal_request(seq=SEQ, hm=32, wm=40, prefix=100):
    """One row of exactly `seq` tokens: text, vision start, an hm x wm merged image, vision
    end, text. Returns (input_ids [1, seq], image_grid_thw [1, 3])."""
    gen = torch.Generator().manual_seed(0)
    suffix = seq - prefix - 2 - hm * wm
    assert suffix > 0, "the image does not fit in the sequence"
    row = torch.cat([torch.randint(1000, 141000, (prefix,), generator=gen),
                     torch.tensor([VISION_START]), torch.full((hm * wm,), IMAGE),
                     torch.tensor([VISION_END]), torch.randint(1000, 141000, (suffix,), generator=gen)])
    return row.unsqueeze(0), torch.tensor([[1, MERGE * hm, MERGE * wm]])


def hf_rotary(q, k, position_ids):
    """The Hugging Face formula of bench/hf_rotary.py (the kernels' issue compared against it
    too), cos/sin built from position_ids inside the timed call."""
    cos, sin = hf_cos_sin(position_ids, q.dtype)
    return hf_apply(q, k, cos, sin)


def ours_rotary(q, k, position_ids):
    return circlerope.apply_multimodal_rotary(q, k, position_ids, sections=SECTIONS, theta=THETA)


def forward_backward(rotary, q, k, position_ids, gq, gk):
    """One forward and backward; returns the outputs and the gradients of q and k."""
    q.grad = k.grad = None
    qo, ko = rotary(q, k, position_ids)
    torch.autograd.backward([qo, ko], [gq, gk])
    return qo, ko, q.grad, k.grad


def rotation_inputs(dtype, position_ids):
    gen = torch.Generator().manual_seed(1)
    seq = position_ids.shape[-1]

    def randn(heads):
        return torch.randn(1, heads, seq, HEAD_DIM, generator=gen).to(dtype)

    q, k = randn(HEADS_Q).requires_grad_(), randn(HEADS_KV).requires_grad_()
    return q, k, randn(HEADS_Q), randn(HEADS_KV)


def max_abs_diff(a, b):
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))


def bench_rotation(dtype, position_ids, reps, seconds, warmup):
    q, k, gq, gk = rotation_inputs(dtype, position_ids)
    ours = forward_backward(ours_rotary, q, k, position_ids, gq, gk)
    ours = [t.detach().clone() for t in ours]
    base = forward_backward(hf_rotary, q, k, position_ids, gq, gk)
    out_diff, grad_diff = max_abs_diff(ours[:2], base[:2]), max_abs_diff(ours[2:], base[2:])
    tol = TOLERANCE[dtype]
    if out_diff > tol or grad_diff > tol:
        sys.exit(f"MISMATCH ({dtype}): outputs differ by {out_diff:.3g}, gradients by "
                 f"{grad_diff:.3g} (tolerance {tol})")
    ms, n = median_ms_alternating(
        {"baseline": lambda: forward_backward(hf_rotary, q, k, position_ids, gq, gk),
         "ours": lambda: forward_backward(ours_rotary, q, k, position_ids, gq, gk)},
        reps, seconds, warmup)
    return {"dtype": str(dtype).replace("torch.", ""), "seq": position_ids.shape[-1],
            "baseline_ms": ms["baseline"], "ours_ms": ms["ours"],
            "ratio": ms["baseline"] / ms["ours"], "reps": n,
            "max_abs_diff_outputs": out_diff, "max_abs_diff_grads": grad_diff, "tolerance": tol}


def breakdown(dtype, position_ids, reps):
    """Where our side's time goes, each part timed alone (median ms): the table, the forward
    op into fresh outputs, and first-touch filling of a fresh 32 MiB tensor (a float32 q)
    with 4 KiB pages and with MADV_HUGEPAGE, which the op requests for large outputs."""
    q, k, _, _ = rotation_inputs(dtype, position_ids)
    q, k = q.detach(), k.detach()
    table = circlerope.rotary_table(position_ids, sections=SECTIONS, theta=THETA)
    ms, _ = median_ms_alternating(
        {"table": lambda: circlerope.rotary_table(position_ids, sections=SECTIONS, theta=THETA),
         "forward": lambda: circlerope.apply_rotary(q, k, table)}, reps, 0.0, 2)
    return {"dtype": str(dtype).replace("torch.", ""), "table_ms": ms["table"], "forward_ms": ms["forward"]}


def fresh_fill_ms(reps):
    """Filling a fresh 32 MiB tensor: glibc maps it anew every time, so each 4 KiB page
    faults on first write, unless the range may use 2 MiB pages (THP `madvise` mode)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    madv_hugepage, huge = 14, 1 << 21

    def fill(advise):
        t = torch.empty(HEADS_Q * SEQ * HEAD_DIM)
        if advise:
            begin = (t.data_ptr() + huge - 1) & ~(huge - 1)
            end = (t.data_ptr() + 4 * t.numel()) & ~(huge - 1)
            libc.madvise(ctypes.c_void_p(begin), ctypes.c_size_t(end - begin), madv_hugepage)
        t.fill_(1.0)

    ms, _ = median_ms_alternating({"4k": lambda: fill(False), "huge": lambda: fill(True)}, reps, 0.0, 2)
    return {"fill_32mib_4k_pages_ms": ms["4k"], "fill_32mib_huge_pages_ms": ms["huge"]}


# ---------------------------------------------------------------- positions ---

def max_rel_diff(a, b):
    return ((a - b).abs() / b.abs().clamp(min=1.0)).max().item()


def bench_positions(reps, seconds, warmup):
    req = benchmark_request(rows=8)
    input_ids = torch.tensor(req["input_ids"])
    image_grid_thw = torch.tensor(req["image_grid_thw"])
    attention_mask = torch.tensor(req["attention_mask"])

    def ours():
        return circlerope.get_rope_index(input_ids, image_grid_thw, attention_mask=attention_mask,
                                         scheme="circle", circle=CIRCLE)

    def loop():
        return reference_positions(req)

    (got_ids, got_deltas), (ref_ids, ref_deltas) = ours(), loop()
    ids_diff, deltas_diff = max_rel_diff(got_ids, ref_ids), max_rel_diff(got_deltas, ref_deltas)
    if ids_diff > 1e-4 or deltas_diff > 1e-4:
        sys.exit(f"MISMATCH (positions): position_ids differ by {ids_diff:.3g}, rope_deltas by "
                 f"{deltas_diff:.3g} (relative, tolerance 1e-4)")
    # ours takes microseconds: time it several times per repetition
    ms, n = median_ms_alternating({"loop": loop, "ours": (ours, 20)}, reps, seconds, warmup)
    return {"shape": list(input_ids.shape), "loop_ms": ms["loop"], "ours_us": ms["ours"] * 1e3,
            "ratio": ms["loop"] / ms["ours"], "reps": n,
            "max_rel_diff_position_ids": ids_diff, "max_rel_diff_rope_deltas": deltas_diff}


# ------------------------------------------------------------------- report ---

def print_tables(facts, rotation, positions, parts, fill):
    print(f"torch {facts['torch']}, {facts['threads']} threads ({facts['cpus']} CPUs), "
          f"CPU: {facts['cpu']}, Python {facts['python']}")
    if facts["malloc_env"]:
        print("malloc settings: " + " ".join(f"{k}={v}" for k, v in facts["malloc_env"].items()))
    print()
    print(f"rotation fwd+bwd, q [1,{HEADS_Q},S,{HEAD_DIM}], k [1,{HEADS_KV},S,{HEAD_DIM}], "
          f"sections {SECTIONS}, theta {THETA:g}, circle position_ids")
    print(f"{'dtype':>9} {'S':>6} {'baseline ms':>12} {'ours ms':>9} {'ratio':>7} {'reps':>5} "
          f"{'max|dout|':>10} {'max|dgrad|':>10}")
    for r in rotation:
        print(f"{r['dtype']:>9} {r['seq']:>6} {r['baseline_ms']:>12.3f} {r['ours_ms']:>9.3f} "
              f"{r['ratio']:>6.1f}x {r['reps']:>5} {r['max_abs_diff_outputs']:>10.2e} "
              f"{r['max_abs_diff_grads']:>10.2e}")
    print("  ours alone: " + ", ".join(f"{b['dtype']} table {b['table_ms']:.3f} ms, forward {b['forward_ms']:.3f} ms"
                                      for b in parts))
    print(f"  fresh 32 MiB filled: {fill['fill_32mib_4k_pages_ms']:.2f} ms with 4 KiB pages, "
          f"{fill['fill_32mib_huge_pages_ms']:.2f} ms with MADV_HUGEPAGE (the op asks for it on large outputs; "
          "measured at process start)")
    print()
    p = positions
    print(f"get_rope_index (circle), batch {p['shape'][0]} x {p['shape'][1]} tokens: torch loop "
          f"{p['loop_ms']:.2f} ms, circlerope {p['ours_us']:.1f} us, ratio {p['ratio']:.0f}x "
          f"({p['reps']} reps; max relative difference {p['max_rel_diff_position_ids']:.1e} in "
          f"position_ids, {p['max_rel_diff_rope_deltas']:.1e} in rope_deltas)")
    print()
    ratios = {r["dtype"]: r["ratio"] for r in rotation}
    print(f"rotation fwd+bwd S={SEQ} speed-up over the pure-PyTorch HF formula: "
          f"float32 {ratios['float32']:.1f}x, bfloat16 {ratios['bfloat16']:.1f}x (target >= 5x)")
    print(f"get_rope_index speed-up over the torch loop: {p['ratio']:.1f}x (target >= 100x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions (smoke test only)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    reps, seconds, warmup = (2, 0.0, 1) if args.quick else (11, 1.0, 3)

    # First, while glibc still maps large blocks afresh (later its thresholds and free lists
    # depend on what ran before, and the same fill can take 1 ms either way).
    fill = fresh_fill_ms(5 if args.quick else 15)
    input_ids, image_grid_thw = multimodal_request()
    position_ids, _ = circlerope.get_rope_index(input_ids, image_grid_thw, scheme="circle", circle=CIRCLE)
    assert position_ids.shape == (3, 1, SEQ) and position_ids.dtype == torch.float32

    facts = machine_facts()
    rotation = [bench_rotation(dtype, position_ids, reps, seconds, warmup)
                for dtype in (torch.float32, torch.bfloat16)]
    parts = [breakdown(dtype, position_ids, max(reps, 5)) for dtype in (torch.float32, torch.bfloat16)]
    positions = bench_positions(reps, seconds, warmup)
    if args.json:
        print(json.dumps({"machine": facts, "quick": args.quick, "rotation": rotation,
                          "breakdown": parts, "fresh_fill": fill, "positions": positions}, indent=2))
    else:
        print_tables(facts, rotation, positions, parts, fill)


if __name__ == "__main__":
    main()
