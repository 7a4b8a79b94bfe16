#!/usr/bin/python3
"""The Hugging Face way of applying M-RoPE (Qwen2.5-VL's apply_multimodal_rotary_pos_emb,
re-written here from its formula), timed in eager PyTorch on the shapes of
`circlerope bench rotary`, next to `circlerope bench rotary` itself in the same run.

    /usr/bin/python3 bench/hf_rotary.py build/release/circlerope

Needs python3-torch (Debian). Effective GB/s use the same byte count as circlerope: q and k
read and written once plus a float32 table of D values per token. The cos/sin tensors are
built once outside the timed region, as circlerope's table is.
"""
import json
import statistics
import subprocess
import sys
import time

import torch

HQ, HK, D, SECTIONS, THETA = 16, 2, 128, [16, 24, 24], 1e6


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def cos_sin(position_ids, dtype):
    """[3, B, S] positions -> cos, sin [B, 1, S, D] with the sections picked per axis."""
    inv_freq = 1.0 / (THETA ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = position_ids[..., None].float() * inv_freq  # [3, B, S, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    split = SECTIONS * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(split, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(split, dim=-1))], dim=-1)
    return cos.unsqueeze(1).to(dtype), sin.unsqueeze(1).to(dtype)


def apply(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def median_ms(fn, min_seconds=0.5):
    fn()
    runs = []
    start = time.perf_counter()
    while len(runs) < 5 or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1e3


def main():
    torch.set_num_threads(2)
    rows = []
    for dtype_name, dtype, size in [("float32", torch.float32, 4), ("bfloat16", torch.bfloat16, 2)]:
        for seq in (4096, 16384):
            pos = torch.arange(seq, dtype=torch.float32).mul(0.731).sub(9.5).expand(3, 1, seq)
            cos, sin = cos_sin(pos, dtype)
            q = torch.randn(1, HQ, seq, D).to(dtype)
            k = torch.randn(1, HK, seq, D).to(dtype)
            ms = median_ms(lambda: apply(q, k, cos, sin))
            nbytes = 2 * (HQ + HK) * seq * D * size + seq * D * 4
            rows.append((dtype_name, seq, ms, nbytes / ms / 1e6))
    ours = {}
    if len(sys.argv) > 1:
        out = subprocess.run([sys.argv[1], "bench", "rotary", "--seq-lens", "4096", "16384", "--path", "automatic",
                              "--format", "json"], check=True, capture_output=True, text=True)
        for r in json.loads(out.stdout)["results"]:
            if r["direction"] == "forward" and r["mode"] == "out-of-place":
                ours[(r["dtype"], r["seq_len"])] = r
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; forward, out of place")
    print("dtype      seq_len   HF eager ms   GB/s   circlerope ms   GB/s   speed-up")
    for dtype_name, seq, ms, gbps in rows:
        line = f"{dtype_name:9} {seq:8} {ms:13.2f} {gbps:6.1f}"
        r = ours.get((dtype_name, seq))
        if r:
            line += f" {r['ms']:15.2f} {r['gbps']:6.1f} {ms / r['ms']:9.1f}x"
        print(line)


if __name__ == "__main__":
    main()
