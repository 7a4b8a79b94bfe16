#!/usr/bin/env python3
"""Train-step time of a transformers Qwen2.5-VL text stack switched by circlerope.hf.apply.

One model (random weights, built from a config: nothing is downloaded) and one batch: a row of
S tokens holding one image. The variants, alternated within the run:

    unswitched             transformers' own model
    mrope                  apply(model, "mrope")
    circle                 apply(model, "circle")
    alternate              apply(model, age="alternate")  (AGE: two geometries, two tables)
    mrope+fused ...        the same three with apply(..., rotation="fused")

A step is forward + backward (cross-entropy of the next token; gradients set to None before
it, no optimizer step: the optimizer is the same for every variant and is left out). After
--warmup untimed rounds (default 1) the variants take turns, --steps steps each, --repeats
rounds; the report gives each variant's median step time over the rounds, the spread
(min-max of the rounds) and the ratio to the unswitched model's median.

What is timed, and what is not:
- the vision tower is not run: the batch carries input_ids with the image's placeholder tokens
  and image_grid_thw, but no pixel_values, so the placeholders are embedded as ordinary tokens
  and the text stack runs on the image's positions with the real shapes. Positions come from
  input_ids and the grid (transformers' get_rope_index for the unswitched model, circlerope's
  for every geometry of a switched one), and that work is part of each step, as it is in
  training;
- the vocabulary is cut to --vocab (default 1024 on the CPU, 4096 on the GPU), so that the
  lm_head and the loss, the same for every variant, do not drown the text layers (a real
  Qwen2.5-VL's 151,936 would add the same time to every variant).

- the warm-up round matters on the CPU: the first steps after the model is built ran up to 35
  times slower (allocations), which one untimed step per variant did not absorb.

Presets (--preset; each value can be overridden: --layers, --hidden, --heads, --kv_heads,
--intermediate, --sections T H W, --theta, --seq, --grid H W (merged tokens), --dtype, --attn,
--device, --vocab):
    cpu (default)  2 layers, hidden 256, 4 q heads / 2 kv heads (head_dim 64), intermediate
                   512, mrope_section [8, 12, 12], float32, sdpa, S 512 with one image of
                   16 x 16 merged tokens (image_grid_thw [1, 32, 32]); about 20 s on the
                   2-core CPU of this project's machine
    gpu            Qwen2.5-VL 3B's text layers: hidden 2048, 16 q heads / 2 kv heads (head_dim
                   128), intermediate 11008, mrope_section [16, 24, 24], rope_theta 1e6, 8
                   layers, bfloat16, sdpa, on cuda; one row of 4096 tokens holding a
                   1,280-token image (merged grid 32 x 40, image_grid_thw [1, 64, 80])

    PYTHONPATH=build/release/python .venv/bin/python bench/model_step.py [--preset gpu]
        [--repeats 7] [--steps 5] [--warmup 1] [--threads N] [--json PATH]

Prints the CPU model (/proc/cpuinfo) or the GPU's name, torch and transformers versions, and a
table; --json PATH writes the same as one JSON object.
"""
import argparse
import inspect
import json
import platform
import statistics
import sys
import time

import torch
import transformers

import circlerope
import circlerope.hf as hf

PRESETS = {
    "cpu": dict(layers=2, hidden=256, heads=4, kv_heads=2, intermediate=512, sections=(8, 12, 12), theta=1e6,
                seq=512, grid=(16, 16), dtype="float32", attn="sdpa", device="cpu", vocab=1024),
    "gpu": dict(layers=8, hidden=2048, heads=16, kv_heads=2, intermediate=11008, sections=(16, 24, 24), theta=1e6,
                seq=4096, grid=(32, 40), dtype="bfloat16", attn="sdpa", device="cuda", vocab=4096),
}
VARIANTS = [("unswitched", None, None), ("mrope", dict(scheme="mrope"), "transformers"),
            ("circle", dict(scheme="circle"), "transformers"), ("alternate", dict(age="alternate"), "transformers"),
            ("mrope+fused", dict(scheme="mrope"), "fused"), ("circle+fused", dict(scheme="circle"), "fused"),
            ("alternate+fused", dict(age="alternate"), "fused")]
MERGE = 2  # spatial_merge_size: image_grid_thw counts patches, the text holds (h / 2) * (w / 2) tokens


def version():
    return tuple(int(x) for x in transformers.__version__.split(".")[:2])


def build(s):
    """Qwen2_5_VLForConditionalGeneration from a config with the text layers of `s` and a tiny
    vision tower (never run here), in s["dtype"], on s["device"], in training mode."""
    head_dim = s["hidden"] // s["heads"]
    if 2 * sum(s["sections"]) != head_dim:
        raise SystemExit(f"mrope_section {s['sections']} must sum to head_dim / 2 = {head_dim // 2}")
    vocab = s["vocab"]
    ids = dict(vision_start_token_id=vocab - 4, vision_end_token_id=vocab - 3, image_token_id=vocab - 2,
               video_token_id=vocab - 1)
    text = dict(vocab_size=vocab, hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                max_position_embeddings=32768, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    rope = {"mrope_section": list(s["sections"])}
    if version() >= (5, 0):
        text["rope_parameters"] = dict(rope, rope_type="default", rope_theta=s["theta"])
    else:
        text["rope_scaling"], text["rope_theta"] = dict(rope, type="mrope"), s["theta"]
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=s["hidden"],
                  spatial_merge_size=MERGE, patch_size=2, temporal_patch_size=2, in_channels=3, tokens_per_second=2,
                  window_size=4, fullatt_block_indexes=[0])
    Config = transformers.Qwen2_5_VLConfig
    if "text_config" in (getattr(Config, "sub_configs", None) or {}):
        config = Config(text_config=text, vision_config=vision, **ids)
    else:
        config = Config(vision_config=vision, **text, **ids)
    dtype = getattr(torch, s["dtype"])
    kwargs = {"dtype" if version() >= (5, 0) else "torch_dtype": dtype}
    torch.manual_seed(0)
    model = transformers.Qwen2_5_VLForConditionalGeneration._from_config(config, attn_implementation=s["attn"],
                                                                         **kwargs)
    return model.to(s["device"]).train(), ids


def batch(s, ids):
    """One row of s["seq"] tokens: text, one image block (start, h/2 * w/2 placeholders, end),
    text; its image_grid_thw; no pixel_values (the vision tower is not timed)."""
    gh, gw = s["grid"]
    image = gh * gw
    before = 16
    after = s["seq"] - before - image - 2
    if after < 1:
        raise SystemExit(f"seq {s['seq']} cannot hold a {gh} x {gw} image and text")
    g = torch.Generator().manual_seed(1)
    text = torch.randint(3, s["vocab"] - 8, (before + after,), generator=g)
    row = torch.cat([text[:before], torch.tensor([ids["vision_start_token_id"]]),
                     torch.full((image,), ids["image_token_id"]), torch.tensor([ids["vision_end_token_id"]]),
                     text[before:]])
    return {"input_ids": row.view(1, -1).to(s["device"]),
            "image_grid_thw": torch.tensor([[1, gh * MERGE, gw * MERGE]], device=s["device"])}


def step(model, inputs):
    model.zero_grad(set_to_none=True)
    logits = model(**inputs).logits
    ids = inputs["input_ids"]
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def machine(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    for key, value in PRESETS["cpu"].items():
        if key in ("sections", "grid"):
            parser.add_argument(f"--{key}", type=int, nargs=3 if key == "sections" else 2, default=None)
        else:
            parser.add_argument(f"--{key}", type=type(value), default=None)
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds of all variants (default 7)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps of a variant per round (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--variants", nargs="+", default=[v[0] for v in VARIANTS],
                        choices=[v[0] for v in VARIANTS], help="which variants (default: all)")
    parser.add_argument("--json", help="write the results there")
    args = parser.parse_args(argv)
    s = dict(PRESETS[args.preset])
    for key in s:
        if getattr(args, key) is not None:
            s[key] = tuple(getattr(args, key)) if key in ("sections", "grid") else getattr(args, key)
    if args.threads:
        torch.set_num_threads(args.threads)
    if s["device"] == "cuda" and not torch.cuda.is_available():
        raise SystemExit("the gpu preset needs a CUDA device (torch.cuda.is_available() is False)")
    model, ids = build(s)
    inputs = batch(s, ids)
    plain = dict(inputs)
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # 5.3 on: the unswitched model needs them
        plain["mm_token_type_ids"] = (inputs["input_ids"] == ids["image_token_id"]).long()
    variants = [v for v in VARIANTS if v[0] in args.variants]

    def run(variant, steps):
        name, geometry, rotation = variant
        if geometry is not None:
            hf.apply(model, rotation=rotation, **geometry)
        try:
            sync(s["device"])
            start = time.perf_counter()
            for _ in range(steps):
                step(model, plain if geometry is None else inputs)
            sync(s["device"])
            return (time.perf_counter() - start) / steps
        finally:
            if geometry is not None:
                hf.restore(model)

    where = machine(s["device"])
    print(f"model_step: {where}; torch {torch.__version__} ({torch.get_num_threads()} CPU threads), transformers "
          f"{transformers.__version__}, circlerope CUDA kernels: {circlerope.has_cuda_kernels()}")
    print(f"  preset {args.preset}: {s['layers']} layers, hidden {s['hidden']}, heads {s['heads']}/{s['kv_heads']} "
          f"(head_dim {s['hidden'] // s['heads']}), intermediate {s['intermediate']}, {s['dtype']}, {s['attn']}, "
          f"{s['device']}; 1 x {s['seq']} tokens with a {s['grid'][0]} x {s['grid'][1]} image; vocab {s['vocab']}")
    print(f"  step = forward + backward (no optimizer); {args.repeats} rounds x {args.steps} steps, variants "
          "alternated", flush=True)
    for _ in range(args.warmup):  # untimed: allocations, kernel choices, first-call caches
        for variant in variants:
            run(variant, args.steps)
    samples = {v[0]: [] for v in variants}
    for _ in range(args.repeats):
        for variant in variants:
            samples[variant[0]].append(run(variant, args.steps) * 1e3)
    base = statistics.median(samples["unswitched"]) if "unswitched" in samples else None
    results = {}
    print(f"  {'variant':<16} {'median ms':>10} {'min':>9} {'max':>9} {'vs unswitched':>14}")
    for name, ms in samples.items():
        median = statistics.median(ms)
        results[name] = {"median_ms": median, "min_ms": min(ms), "max_ms": max(ms), "rounds_ms": ms,
                         "ratio_to_unswitched": None if base is None else median / base}
        ratio = "" if base is None else f"{median / base:.3f}x"
        print(f"  {name:<16} {median:>10.2f} {min(ms):>9.2f} {max(ms):>9.2f} {ratio:>14}")
    if args.json:
        report = {"machine": where, "device": s["device"], "torch": torch.__version__,
                  "transformers": transformers.__version__, "threads": torch.get_num_threads(),
                  "cuda_kernels": circlerope.has_cuda_kernels(), "preset": args.preset,
                  "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
                  "repeats": args.repeats, "steps": args.steps, "warmup_rounds": args.warmup,
                  "step": "forward + backward, no optimizer",
                  "results": results}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
