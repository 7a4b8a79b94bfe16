#!/usr/bin/env python3
"""Time the reference's way of computing Circle-RoPE positions against ours, in one run.

The authors' code (Circle-RoPE for Qwen2.5-VL) builds positions with a Python
loop over rows and vision blocks and a dozen small torch operations per block.
This script re-implements that procedure in torch, operation for operation as
docs/spec.md §1-3 describe it (float32 tensors, per-row argwhere/tolist/index, per-block
stack/amax/atan2/cos/sin/rotation, cat), runs it on the benchmark batch of
`circlerope bench positions` (8 rows x 814 tokens, two images per row), checks
that it gives the same positions as `circlerope positions --request` (1e-4, as
the golden cases), and prints both timings and their ratio.

Needs torch (the project venv .venv/):
    .venv/bin/python bench/reference_loop.py build/release/circlerope
It is a benchmark, not a test: CI does not run it.
"""
import json
import math
import os
import subprocess
import sys
import time

import torch

START, END, IMAGE, VIDEO = 151652, 151653, 151655, 151656
MERGE, TOKENS_PER_SECOND = 2, 2
CIRCLE = {"radius": 10.0, "alpha": 0.5, "move_to_origin": True}


def benchmark_request(rows=8):
    """The batch of cli/workload.cpp: 100 text + 16x16 image + 50 text + 14x22 image + 100 text."""
    gen = torch.Generator().manual_seed(0)

    def text(n):
        return torch.randint(1000, 141000, (n,), generator=gen).tolist()

    ids, grids = [], []
    for _ in range(rows):
        row = text(99) + [START] + [IMAGE] * 256 + [END] + text(48) + [START] + [IMAGE] * 308 + [END] + text(99)
        ids.append(row)
        grids += [[1, 32, 32], [1, 28, 44]]
    return {"scheme": "circle", "circle": dict(CIRCLE, method="circle"),
            "vision": {"spatial_merge_size": MERGE, "tokens_per_second": TOKENS_PER_SECOND,
                       "vision_start_token_id": START, "image_token_id": IMAGE, "video_token_id": VIDEO},
            "input_ids": ids, "attention_mask": [[1] * len(r) for r in ids],
            "image_grid_thw": grids, "video_grid_thw": [], "second_per_grid_ts": None}


def circle_block(t, h, w, time_tensor, cfg):
    """docs/spec.md §3 with torch ops on float32 tensors, as the reference applies them per block."""
    t_index = time_tensor.long().view(-1, h, w)
    h_index = torch.arange(h).view(1, -1, 1).expand(t, -1, w)
    w_index = torch.arange(w).view(1, 1, -1).expand(t, h, -1)
    coords = torch.stack((w_index, h_index, t_index), dim=0).float()
    if cfg["move_to_origin"]:
        centre = (torch.amax(coords, dim=(1, 2, 3)) + torch.amin(coords, dim=(1, 2, 3))) / 2.0
        coords = coords - centre.view(-1, 1, 1, 1)
    radius = float(cfg["radius"])
    x, y = coords[0, 0], coords[1, 0]
    polar = torch.atan2(y, x)
    lo, hi = polar.min(), polar.max()
    polar = (polar - lo) / (hi - lo) * (2 * math.pi) if hi - lo > 0 else polar
    raster = torch.arange(h * w, dtype=torch.float32).reshape(h, w) / (h * w) * (2 * math.pi)
    theta = cfg["alpha"] * polar + (1 - cfg["alpha"]) * raster
    a, b = radius * torch.cos(theta), radius * torch.sin(theta)
    n = torch.tensor([1.0, 1.0, 1.0]) / math.sqrt(3)
    u = torch.stack([-n[1], n[0], torch.tensor(0.0)])
    u = u / torch.norm(u)
    v = torch.cross(n, u, dim=0)
    v = v / torch.norm(v)
    p = torch.stack([a * u[0] + b * v[0], a * u[1] + b * v[1], a * u[2] + b * v[2]])
    return torch.stack([p[2].flatten(), p[1].flatten(), p[0].flatten()])


def reference_positions(req):
    """The per-row, per-block loop of Qwen2.5-VL's get_rope_index with the circle block."""
    input_ids = torch.tensor(req["input_ids"])
    mask = torch.tensor(req["attention_mask"]) == 1
    grids = torch.tensor(req["image_grid_thw"])
    position_ids = torch.ones(3, *input_ids.shape, dtype=torch.float)
    deltas, image_index = [], 0
    for i, row in enumerate(input_ids):
        row = row[mask[i]]
        starts = torch.argwhere(row == START).squeeze(1)
        images = int((row[starts + 1] == IMAGE).sum())
        tokens = row.tolist()
        pieces, st = [], 0
        for _ in range(images):
            ed = tokens.index(IMAGE, st)
            t, h, w = grids[image_index].tolist()
            image_index += 1
            h, w = h // MERGE, w // MERGE
            st_idx = pieces[-1].max() + 1 if pieces else 0
            pieces.append(torch.arange(ed - st).view(1, -1).expand(3, -1) + st_idx)
            time_tensor = torch.arange(t).view(-1, 1).expand(-1, h * w) * 0.0 * TOKENS_PER_SECOND
            pieces.append(circle_block(t, h, w, time_tensor, CIRCLE) + (ed - st) + st_idx)
            st = ed + t * h * w
        if st < len(tokens):
            st_idx = pieces[-1].max() + 1 if pieces else 0
            pieces.append(torch.arange(len(tokens) - st).view(1, -1).expand(3, -1) + st_idx)
        positions = torch.cat(pieces, dim=1).reshape(3, -1)
        position_ids[..., i, mask[i]] = positions
        deltas.append(positions.max() + 1 - len(input_ids[i]))
    return position_ids, torch.tensor(deltas).unsqueeze(1)


def median_seconds(fn, repeats=30):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main():
    cli = sys.argv[1] if len(sys.argv) > 1 else "build/release/circlerope"
    torch.set_num_threads(os.cpu_count() or 1)
    req = benchmark_request()

    ours = json.loads(subprocess.run([cli, "positions", "--request", "-"], input=json.dumps(req),
                                     capture_output=True, text=True, check=True).stdout)
    ref_ids, ref_deltas = reference_positions(req)
    got = torch.tensor(ours["position_ids"])
    worst = ((got - ref_ids).abs() / ref_ids.abs().clamp(min=1.0)).max().item()
    worst_delta = (torch.tensor(ours["rope_deltas"]) - ref_deltas.squeeze(1)).abs().max().item()
    print(f"agreement with the torch loop: max relative difference {worst:.2e} in positions, "
          f"{worst_delta:.2e} in rope_deltas (tolerance 1e-4)")
    if worst > 1e-4 or worst_delta > 1e-4:
        sys.exit("MISMATCH")

    ref_s = median_seconds(lambda: reference_positions(req))
    bench = json.loads(subprocess.run([cli, "bench", "positions", "--format", "json"], capture_output=True,
                                      text=True, check=True).stdout)
    ns = {r["scheme"]: r["ns_per_batch"] for r in bench["results"]}
    ours_ns = ns["circle"]
    print(f"batch: {bench['shape']}")
    print(f"torch loop (reference procedure, {torch.get_num_threads()} threads, torch {torch.__version__}): "
          f"{ref_s * 1e3:.2f} ms per batch (median of 30)")
    print(f"circlerope rope_index_into (1 thread): circle {ours_ns / 1e3:.1f} us, mrope {ns['mrope'] / 1e3:.1f} us per batch")
    print(f"ratio: {ref_s * 1e9 / ours_ns:.0f}x")


if __name__ == "__main__":
    main()
