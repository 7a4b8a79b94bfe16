#!/usr/bin/env python3
"""Speed of circlerope's torch operators against transformers' own Qwen2.5-VL code, one run.

    PYTHONPATH=build/release/python .venv/bin/python bench/torch_ops.py [--threads 2]
        [--seq-lens 4096 ...] [--quick] [--json] [--no-compile]

The peers are imported from the installed transformers package, never re-typed
(bench/hf_rotary.py builds them from a tiny Qwen2_5_VLConfig; nothing is downloaded):

1. Rotation, forward + backward, at Qwen2.5-VL-3B shapes (batch 1, 16 query heads, 2 KV heads,
   head dim 128, mrope_section (16, 24, 24), theta 1e6; S = 4096 unless --seq-lens), float32
   and bfloat16, q/k in Hugging Face's [batch, heads, seq, head_dim] layout with
   requires_grad, M-RoPE integer positions of one text + image + text row. Each repetition is
   one forward and one backward with fixed upstream gradients. Two pairings:
     - angles built inside the timed call: circlerope.apply_rotary(q, k,
       circlerope.rotary_table(position_ids, ...)) against Qwen2_5_VLRotaryEmbedding(q,
       position_ids) -> cos, sin followed by
       apply_rotary_pos_emb(q, k, cos, sin) (transformers 5.x; apply_multimodal_rotary_pos_emb
       under 4.x);
     - angles prebuilt (once per forward pass in a model, shared by every layer):
       circlerope.rotary_table once + circlerope.apply_rotary against cos/sin once +
       apply_rotary_pos_emb.
   transformers' side runs eager and under torch.compile (inductor, dynamic=False; the fair
   peer: it fuses the formula's elementwise passes). First-call (compile) times are shown.
2. Positions on the benchmark batch (8 rows x 814 tokens, two images per row; the batch of
   bench/reference_loop.py): circlerope.get_rope_index(scheme="mrope", compat=the installed
   transformers') against transformers' Qwen2_5_VLModel.get_rope_index (a model built from the
   tiny config; its mm_token_type_ids from transformers' own ProcessorMixin method), values
   checked equal; beside them circlerope's scheme "circle", checked against the Circle-RoPE
   reference's loop (bench/reference_loop.py, re-typed from the paper's code: context only,
   not a transformers peer) and timed with it.

Every side is checked before anything is timed: each rotation against transformers' eager
formula (float32 5e-3 and bfloat16 0.1 absolute, on outputs and gradients), circlerope's
M-RoPE positions against transformers' exactly (their values: circlerope.get_rope_index gives
float32, transformers int64), Circle-RoPE's against the
reference loop's to 1e-4 relative. Timings are medians over
repetitions that run every side in turn, starting from a different side each time, so drift
hits all of them. The output names the CPU, the versions, the threads (--threads, default 2;
circlerope's kernels and torch's follow torch.set_num_threads) and /proc/loadavg at start
and end: other processes on the cores move every figure, ratios too, so compare runs made
under similar load. Any MALLOC_*
variables are shown too: glibc maps blocks of 32 MiB and more (a float32 q at S = 4096) afresh
on every allocation, and the page faults count in each side's time, most in the eager
formula's, which allocates most (MALLOC_MMAP_THRESHOLD_=268435456 makes them reuse memory).

--quick: few repetitions (a smoke test of the script, not a measurement; torch.compile still
compiles, which takes most of its time, less when inductor's cache under /tmp is warm);
--no-compile leaves the compiled peer out; --json prints one JSON object instead of tables.
It is a benchmark: CI does not run it.
"""
import argparse
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time
import types

import torch
import transformers
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as hf_modeling

import circlerope

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_rotary  # noqa: E402  (transformers' side, from the installed package)
from reference_loop import benchmark_request, reference_positions  # noqa: E402

HEADS_Q, HEADS_KV, HEAD_DIM = hf_rotary.HQ, hf_rotary.HK, hf_rotary.D
SECTIONS, THETA = hf_rotary.SECTIONS, hf_rotary.THETA
VISION_START, VISION_END, IMAGE, VIDEO = 151652, 151653, 151655, 151656
MERGE = 2
CIRCLE = circlerope.CircleConfig(radius=10.0, alpha=0.5, move_to_origin=True)
TOLERANCE = {torch.float32: 5e-3, torch.bfloat16: 0.1}


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


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def installed_compat():
    """circlerope's compat mode for the installed transformers (circlerope.hf.compat_for_version)."""
    import circlerope.hf
    return circlerope.hf.installed_compat()


def machine_facts(threads):
    # glibc serves blocks of 32 MiB and more (a float32 q here) with fresh mmaps, so their
    # page faults count in every side's times; MALLOC_* variables change that, so they are shown
    malloc = {k: v for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_")}
    try:
        import kernels  # noqa: F401  (the hub kernels package: HF could swap in other code)
        hub_kernels = True
    except ImportError:
        hub_kernels = False
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "threads": threads, "torch": torch.__version__,
            "transformers": transformers.__version__, "circlerope": circlerope.__version__,
            "python": platform.python_version(), "compat": installed_compat(),
            "hf_hub_kernels_installed": hub_kernels, "malloc_env": malloc}


# ------------------------------------------------------------------- timing ---

def median_ms_alternating(fns, min_reps, min_seconds, warmup):
    """Median milliseconds per call of each function in `fns` (name -> callable, or name ->
    (callable, calls per repetition)). Every repetition runs all of them, starting one further
    along each time; repetitions go on until there are min_reps of them and the loop has run
    len(fns) * min_seconds seconds in all. Returns ({name: ms}, repetitions)."""
    plan = [(name, *(f if isinstance(f, tuple) else (f, 1))) for name, f in fns.items()]
    for _, fn, calls in plan:
        for _ in range(warmup * calls):
            fn()
    runs = {name: [] for name, _, _ in plan}
    start, rep = time.perf_counter(), 0
    while rep < min_reps or time.perf_counter() - start < len(plan) * min_seconds:
        for i in range(len(plan)):
            name, fn, calls = plan[(rep + i) % len(plan)]
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            runs[name].append((time.perf_counter() - t) * 1e3 / calls)
        rep += 1
    return {name: statistics.median(r) for name, r in runs.items()}, rep


# ----------------------------------------------------------------- the peer ---

def hf_model():
    """transformers' Qwen2_5_VLModel from the tiny config (random weights, nothing downloaded):
    its get_rope_index and its text model's rotary embedding are the peers."""
    model = hf_modeling.Qwen2_5_VLModel(hf_rotary.tiny_config()).eval()
    rope = model.language_model.rotary_emb
    hf_rotary.check_rotary_embedding(rope)
    if not hasattr(model, "get_rope_index"):
        sys.exit(f"transformers {transformers.__version__}: Qwen2_5_VLModel has no get_rope_index")
    return model, rope


def hf_mm_token_type_ids(input_ids):
    """mm_token_type_ids as transformers' processors make them (0 text, 1 image, 2 video), by
    ProcessorMixin.create_mm_token_type_ids on an object holding just the token ids."""
    from transformers.processing_utils import ProcessorMixin
    holder = types.SimpleNamespace(image_token_ids=[IMAGE], video_token_ids=[VIDEO], audio_token_ids=[])
    return torch.tensor(ProcessorMixin.create_mm_token_type_ids(holder, input_ids))


def hf_get_rope_index(model, input_ids, image_grid_thw, attention_mask):
    """A call of the installed transformers' get_rope_index (5.x wants mm_token_type_ids, which
    a processor returns with input_ids: built here once, outside the timed call)."""
    kwargs = {"image_grid_thw": image_grid_thw, "attention_mask": attention_mask}
    if "mm_token_type_ids" in inspect.signature(model.get_rope_index).parameters:
        kwargs["mm_token_type_ids"] = hf_mm_token_type_ids(input_ids)
    return lambda: model.get_rope_index(input_ids, **kwargs)


# ----------------------------------------------------------------- rotation ---

def multimodal_request(seq):
    """One row of exactly `seq` tokens: text, vision start, an image of hm x wm merged tokens,
    vision end, text (a 32 x 40 image after 100 tokens where it fits). Returns (input_ids
    [1, seq], image_grid_thw [1, 3])."""
    hm, wm, prefix = 32, 40, 100
    if seq < prefix + 2 + hm * wm + 100:
        hm = wm = max(1, int(math.sqrt(seq / 2)))
        prefix = max(1, seq // 8)
    suffix = seq - prefix - 2 - hm * wm
    if suffix < 1:
        sys.exit(f"--seq-lens: {seq} tokens are too few for a text + image + text row")
    gen = torch.Generator().manual_seed(0)
    row = torch.cat([torch.randint(1000, 141000, (prefix,), generator=gen),
                     torch.tensor([VISION_START]), torch.full((hm * wm,), IMAGE),
                     torch.tensor([VISION_END]), torch.randint(1000, 141000, (suffix,), generator=gen)])
    return row.unsqueeze(0), torch.tensor([[1, MERGE * hm, MERGE * wm]])


def mrope_positions(model, seq, compat):
    """M-RoPE positions of one row from circlerope, checked equal to transformers' own."""
    input_ids, grid = multimodal_request(seq)
    mask = torch.ones_like(input_ids)
    ours, _ = circlerope.get_rope_index(input_ids, grid, attention_mask=mask, scheme="mrope", compat=compat)
    theirs, _ = hf_get_rope_index(model, input_ids, grid, mask)()
    if not torch.equal(ours, theirs.to(ours.dtype)):
        sys.exit(f"MISMATCH (S={seq}): circlerope's M-RoPE positions differ from transformers'")
    return ours


def rotation_inputs(dtype, seq):
    gen = torch.Generator().manual_seed(1)

    def randn(heads):
        return torch.randn(1, heads, seq, HEAD_DIM, generator=gen).to(dtype)

    q, k = randn(HEADS_Q).requires_grad_(), randn(HEADS_KV).requires_grad_()
    return q, k, randn(HEADS_Q), randn(HEADS_KV)


def forward_backward(rotary, q, k, gq, gk):
    """One forward and backward of rotary(q, k); returns the outputs and q's and k's gradients."""
    q.grad = k.grad = None
    qo, ko = rotary(q, k)
    torch.autograd.backward([qo, ko], [gq, gk])
    return qo, ko, q.grad, k.grad


def max_abs_diff(a, b):
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))


def rotation_sides(rope, position_ids, q, compiled):
    """name -> rotary(q, k) for every side (the compiled ones when `compiled` is given)."""
    def hf_inside(q, k, position_ids):
        cos, sin = hf_rotary.cos_sin(rope, q, position_ids)
        return hf_rotary.apply(q, k, cos, sin)

    table = circlerope.rotary_table(position_ids, sections=SECTIONS, theta=THETA)
    cos, sin = hf_rotary.cos_sin(rope, q, position_ids)  # q: for its dtype
    sides = {
        "circlerope": lambda q, k: circlerope.apply_rotary(
            q, k, circlerope.rotary_table(position_ids, sections=SECTIONS, theta=THETA)),
        "hf_eager": lambda q, k: hf_inside(q, k, position_ids),
        "circlerope_prebuilt": lambda q, k: circlerope.apply_rotary(q, k, table),
        "hf_eager_prebuilt": lambda q, k: hf_rotary.apply(q, k, cos, sin),
    }
    if compiled is not None:
        inside, prebuilt = compiled
        sides["hf_compiled"] = lambda q, k: inside(q, k, position_ids)
        sides["hf_compiled_prebuilt"] = lambda q, k: prebuilt(q, k, cos, sin)
    return sides


def bench_rotation(rope, compiled, dtype, position_ids, reps, seconds, warmup):
    seq = position_ids.shape[-1]
    q, k, gq, gk = rotation_inputs(dtype, seq)
    sides = rotation_sides(rope, position_ids, q, compiled)
    # every side once against transformers' eager formula; first calls (compiles) timed
    first_s, results = {}, {}
    for name, fn in sides.items():
        t = time.perf_counter()
        results[name] = [x.detach().clone() for x in forward_backward(fn, q, k, gq, gk)]
        first_s[name] = time.perf_counter() - t
    tol, base, diffs = TOLERANCE[dtype], results["hf_eager"], {}
    for name, got in results.items():
        diffs[name] = {"outputs": max_abs_diff(got[:2], base[:2]), "grads": max_abs_diff(got[2:], base[2:])}
        if diffs[name]["outputs"] > tol or diffs[name]["grads"] > tol:
            sys.exit(f"MISMATCH ({dtype}, S={seq}): {name} against hf_eager: outputs differ by "
                     f"{diffs[name]['outputs']:.3g}, gradients by {diffs[name]['grads']:.3g} (tolerance {tol})")
    del results
    ms, n = median_ms_alternating({name: (lambda fn=fn: forward_backward(fn, q, k, gq, gk)) for name, fn in sides.items()},
                                  reps, seconds, warmup)
    ratios = {f"{peer}/{ours}": ms[peer] / ms[ours]
              for peer, ours in (("hf_eager", "circlerope"), ("hf_compiled", "circlerope"),
                                 ("hf_eager_prebuilt", "circlerope_prebuilt"),
                                 ("hf_compiled_prebuilt", "circlerope_prebuilt")) if peer in ms}
    return {"dtype": str(dtype).replace("torch.", ""), "seq": seq, "ms": ms, "ratios": ratios, "reps": n,
            "first_call_s": first_s, "max_abs_diff_vs_hf_eager": diffs, "tolerance": tol}


def compiled_peers(rope):
    """transformers' formula under torch.compile (inductor): (cos/sin built inside, cos/sin
    given), one compiled graph per dtype and shape (dynamic=False)."""
    for name in ("recompile_limit", "cache_size_limit"):  # one entry per dtype x S
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))

    def inside(q, k, position_ids):
        cos, sin = hf_rotary.cos_sin(rope, q, position_ids)
        return hf_rotary.apply(q, k, cos, sin)

    return torch.compile(inside, dynamic=False), torch.compile(hf_rotary.apply, dynamic=False)


# ---------------------------------------------------------------- positions ---

def max_rel_diff(a, b):
    return ((a.double() - b.double()).abs() / b.double().abs().clamp(min=1.0)).max().item()


def bench_positions(model, compat, reps, seconds, warmup):
    req = benchmark_request(rows=8)
    input_ids = torch.tensor(req["input_ids"])
    image_grid_thw = torch.tensor(req["image_grid_thw"])
    attention_mask = torch.tensor(req["attention_mask"])
    hf = hf_get_rope_index(model, input_ids, image_grid_thw, attention_mask)

    def mrope():
        return circlerope.get_rope_index(input_ids, image_grid_thw, attention_mask=attention_mask,
                                         scheme="mrope", compat=compat)

    def circle():
        return circlerope.get_rope_index(input_ids, image_grid_thw, attention_mask=attention_mask,
                                         scheme="circle", circle=CIRCLE)

    def loop():
        return reference_positions(req)

    (hf_ids, hf_deltas), (m_ids, m_deltas) = hf(), mrope()
    if not torch.equal(m_ids, hf_ids.to(m_ids.dtype)) or \
            not torch.equal(m_deltas.reshape(-1), hf_deltas.reshape(-1).to(m_deltas.dtype)):
        sys.exit(f"MISMATCH (positions): circlerope mrope/{compat} ({m_ids.dtype}) differs from transformers' "
                 f"get_rope_index ({hf_ids.dtype}): max |d position_ids| "
                 f"{(m_ids.double() - hf_ids.double()).abs().max().item():g}")
    (c_ids, c_deltas), (l_ids, l_deltas) = circle(), loop()
    ids_diff, deltas_diff = max_rel_diff(c_ids, l_ids), max_rel_diff(c_deltas, l_deltas)
    if ids_diff > 1e-4 or deltas_diff > 1e-4:
        sys.exit(f"MISMATCH (positions): circle position_ids differ from the reference loop's by {ids_diff:.3g}, "
                 f"rope_deltas by {deltas_diff:.3g} (relative, tolerance 1e-4)")
    # circlerope takes microseconds: several calls per repetition
    ms, n = median_ms_alternating({"hf_mrope": hf, "circlerope_mrope": (mrope, 20), "circlerope_circle": (circle, 20),
                                   "reference_loop_circle": loop}, reps, seconds, warmup)
    return {"shape": list(input_ids.shape), "compat": compat, "ms": ms, "reps": n,
            "ratio_hf_mrope_over_circlerope_mrope": ms["hf_mrope"] / ms["circlerope_mrope"],
            "ratio_hf_mrope_over_circlerope_circle": ms["hf_mrope"] / ms["circlerope_circle"],
            "ratio_loop_over_circlerope_circle": ms["reference_loop_circle"] / ms["circlerope_circle"],
            "mrope_equal": True, "position_ids_dtype": str(m_ids.dtype).replace("torch.", ""),
            "circle_max_rel_diff_vs_loop": {"position_ids": ids_diff, "rope_deltas": deltas_diff}}


# ------------------------------------------------------------------- report ---

SIDE_NAMES = [("circlerope", "circlerope fused (table inside)"), ("hf_eager", "HF eager (cos/sin inside)"),
              ("hf_compiled", "HF torch.compile (cos/sin inside)"),
              ("circlerope_prebuilt", "circlerope apply_rotary (table prebuilt)"),
              ("hf_eager_prebuilt", "HF eager (cos/sin prebuilt)"),
              ("hf_compiled_prebuilt", "HF torch.compile (cos/sin prebuilt)")]


def print_tables(facts, load, rotation, positions):
    print(f"CPU: {facts['cpu']} ({facts['cpus']} CPUs), {facts['threads']} threads; torch {facts['torch']}, "
          f"transformers {facts['transformers']}, circlerope {facts['circlerope']}, Python {facts['python']}")
    print(f"load average at start {load['start']}, at end {load['end']}"
          + ("; MALLOC: " + " ".join(f"{k}={v}" for k, v in facts["malloc_env"].items()) if facts["malloc_env"] else "")
          + ("; the `kernels` hub package is installed" if facts["hf_hub_kernels_installed"] else ""))
    print()
    print(f"rotation fwd+bwd, q [1,{HEADS_Q},S,{HEAD_DIM}], k [1,{HEADS_KV},S,{HEAD_DIM}], requires_grad, sections "
          f"{SECTIONS}, theta {THETA:g}, M-RoPE positions; median ms per forward+backward")
    for r in rotation:
        print(f"  {r['dtype']}, S = {r['seq']} ({r['reps']} alternating repetitions; tolerance {r['tolerance']:g})")
        print(f"    {'side':<42} {'ms':>9} {'first call s':>13} {'max|dout|':>10} {'max|dgrad|':>10}  (vs HF eager)")
        for key, label in SIDE_NAMES:
            if key in r["ms"]:
                d = r["max_abs_diff_vs_hf_eager"][key]
                print(f"    {label:<42} {r['ms'][key]:>9.2f} {r['first_call_s'][key]:>13.2f} "
                      f"{d['outputs']:>10.2e} {d['grads']:>10.2e}")
        print("    speed-up: " + ", ".join(f"{k} {v:.1f}x" for k, v in r["ratios"].items()))
    print("  (first call: the agreement check's call; under torch.compile it includes compiling, less with a warm "
          "inductor cache)")
    print()
    print(f"{'dtype':>9} {'S':>6} {'eager/fused':>12} {'compiled/fused':>15} {'eager/prebuilt':>15} "
          f"{'compiled/prebuilt':>18}")
    for r in rotation:
        x = r["ratios"]

        def cell(key, width):
            return f"{x[key]:>{width - 1}.1f}x" if key in x else f"{'-':>{width}}"
        print(f"{r['dtype']:>9} {r['seq']:>6} {cell('hf_eager/circlerope', 12)} {cell('hf_compiled/circlerope', 15)} "
              f"{cell('hf_eager_prebuilt/circlerope_prebuilt', 15)} "
              f"{cell('hf_compiled_prebuilt/circlerope_prebuilt', 18)}")
    print()
    p, ms = positions, positions["ms"]
    print(f"get_rope_index, batch {p['shape'][0]} x {p['shape'][1]} tokens, two images per row "
          f"({p['reps']} alternating repetitions)")
    print(f"  transformers Qwen2_5_VLModel.get_rope_index (mrope)   {ms['hf_mrope'] * 1e3:>10.1f} us")
    print(f"  circlerope scheme mrope, compat {p['compat']:<8}             {ms['circlerope_mrope'] * 1e3:>10.1f} us   "
          f"{p['ratio_hf_mrope_over_circlerope_mrope']:.1f}x faster, values equal ({p['position_ids_dtype']})")
    print(f"  circlerope scheme circle                             {ms['circlerope_circle'] * 1e3:>10.1f} us   "
          f"{p['ratio_hf_mrope_over_circlerope_circle']:.1f}x faster than HF's mrope (other positions: for scale)")
    d = p["circle_max_rel_diff_vs_loop"]
    print(f"  reference loop, circle (bench/reference_loop.py)     {ms['reference_loop_circle'] * 1e3:>10.1f} us   "
          f"circlerope's circle {p['ratio_loop_over_circlerope_circle']:.0f}x faster (max rel diff "
          f"{d['position_ids']:.1e} position_ids, {d['rope_deltas']:.1e} rope_deltas)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads [2]")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[4096], help="sequence lengths [4096]")
    parser.add_argument("--quick", action="store_true", help="few repetitions (smoke test only)")
    parser.add_argument("--no-compile", action="store_true", help="leave out transformers under torch.compile")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    load_start = loadavg()
    torch.set_num_threads(args.threads)
    reps, seconds, warmup = (2, 0.0, 1) if args.quick else (11, 1.0, 2)

    facts = machine_facts(torch.get_num_threads())
    model, rope = hf_model()
    compiled = None if args.no_compile else compiled_peers(rope)
    rotation = []
    for seq in args.seq_lens:
        position_ids = mrope_positions(model, seq, facts["compat"])
        for dtype in (torch.float32, torch.bfloat16):
            rotation.append(bench_rotation(rope, compiled, dtype, position_ids, reps, seconds, warmup))
    positions = bench_positions(model, facts["compat"], reps, seconds, warmup)
    load = {"start": load_start, "end": loadavg()}
    if args.json:
        print(json.dumps({"machine": facts, "loadavg": load, "quick": args.quick, "rotation": rotation,
                          "positions": positions}, indent=2))
    else:
        print_tables(facts, load, rotation, positions)


if __name__ == "__main__":
    main()
