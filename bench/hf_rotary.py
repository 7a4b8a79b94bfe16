#!/usr/bin/env python3
"""Hugging Face's side of the rotation benchmarks: transformers' own Qwen2.5-VL rotary code,
imported from the installed package (nothing re-typed), on a tiny config built here.

bench/torch_ops.py imports it as the peer of circlerope's fused rotation. Run alone, it times
transformers' forward (eager PyTorch, cos/sin built once outside the timed region, as
circlerope's table is) on the shapes of `circlerope bench rotary`, next to that command's own
forward out-of-place numbers, in the same run:

    .venv/bin/python bench/hf_rotary.py build/release/circlerope [--threads 2]

Effective GB/s use circlerope's byte count: q and k read and written once plus a float32
table of D values per token. Needs torch and transformers (the project's .venv); not
circlerope's Python package.

In transformers 5.x the M-RoPE sections are picked inside Qwen2_5_VLRotaryEmbedding.forward
(cos/sin come back as [batch, seq, head_dim]) and the attention calls the plain
apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1); transformers 4.x returned
[3, batch, seq, head_dim] and picked them in apply_multimodal_rotary_pos_emb(q, k, cos, sin,
mrope_section). `apply` below is whichever the installed version has (the 4.x branch is
untested here: this project's .venv has transformers 5.x).
"""
import argparse
import json
import statistics
import subprocess
import time

import torch
import transformers
from transformers import Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as modeling

HQ, HK, D, SECTIONS, THETA = 16, 2, 128, (16, 24, 24), 1e6  # Qwen2.5-VL-3B's attention
# transformers 4.x: sections applied by the rotation; 5.x: by the rotary embedding
SECTIONS_IN_APPLY = hasattr(modeling, "apply_multimodal_rotary_pos_emb")


def tiny_config(heads=HQ, kv_heads=HK, head_dim=D, sections=SECTIONS, theta=THETA):
    """A Qwen2_5_VLConfig with Qwen2.5-VL-3B's attention shape (heads, head_dim, M-RoPE
    sections, theta, spatial merge 2, 2 tokens per second) and one tiny layer of everything
    else, so that a Qwen2_5_VLModel built from it takes a fraction of a second and ~40 MB."""
    text = dict(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                num_hidden_layers=1, intermediate_size=64, vocab_size=256, bos_token_id=None,
                eos_token_id=None)
    if SECTIONS_IN_APPLY:  # transformers 4.x
        text.update(rope_theta=theta, rope_scaling={"type": "mrope", "mrope_section": list(sections)})
    else:  # 5.x: rope_parameters (rope_scaling is still read, for old configs)
        text.update(rope_parameters={"rope_type": "default", "rope_theta": theta, "mrope_section": list(sections)})
    vision = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=heads * head_dim,
                  spatial_merge_size=2, tokens_per_second=2, fullatt_block_indexes=[0])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision)


def rotary_embedding(config=None):
    """transformers' Qwen2_5_VLRotaryEmbedding for the text model of `config`, checked to hold
    the intended theta, head dim and sections (config keys differ between versions)."""
    config = config if config is not None else tiny_config()
    rope = modeling.Qwen2_5_VLRotaryEmbedding(config=config.text_config)
    check_rotary_embedding(rope)
    return rope


def check_rotary_embedding(rope, head_dim=D, sections=SECTIONS, theta=THETA):
    want = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    got_sections = getattr(rope, "mrope_section", None)
    if got_sections is None:  # 4.x keeps them in the config only
        got_sections = rope.config.rope_scaling["mrope_section"]
    if rope.inv_freq.shape != want.shape or not torch.allclose(rope.inv_freq.float(), want) \
            or tuple(got_sections) != tuple(sections) or rope.attention_scaling != 1.0:
        raise SystemExit(f"transformers {transformers.__version__}: the rotary embedding did not take the config "
                         f"(inv_freq {tuple(rope.inv_freq.shape)}, sections {got_sections}, scaling "
                         f"{rope.attention_scaling})")


def cos_sin(rope, x, position_ids):
    """transformers' cos/sin for position_ids [3, batch, seq] (x gives device and dtype)."""
    return rope(x, position_ids)


def apply(q, k, cos, sin):
    """transformers' rotation of q, k [batch, heads, seq, head_dim] by cos/sin from cos_sin."""
    if SECTIONS_IN_APPLY:
        return modeling.apply_multimodal_rotary_pos_emb(q, k, cos, sin, list(SECTIONS), unsqueeze_dim=1)
    return modeling.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("circlerope", nargs="?", help="the circlerope command (build/release/circlerope)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, and the command's [2]")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rope = rotary_embedding()
    rows = []
    for dtype_name, dtype, size in [("float32", torch.float32, 4), ("bfloat16", torch.bfloat16, 2)]:
        for seq in (4096, 16384):
            pos = torch.arange(seq, dtype=torch.float32).mul(0.731).sub(9.5).expand(3, 1, seq)
            q = torch.randn(1, HQ, seq, D).to(dtype)
            k = torch.randn(1, HK, seq, D).to(dtype)
            cos, sin = cos_sin(rope, q, pos)
            ms = median_ms(lambda: apply(q, k, cos, sin))
            nbytes = 2 * (HQ + HK) * seq * D * size + seq * D * 4
            rows.append((dtype_name, seq, ms, nbytes / ms / 1e6))
    ours = {}
    if args.circlerope:
        out = subprocess.run([args.circlerope, "bench", "rotary", "--seq-lens", "4096", "16384", "--path", "automatic",
                              "--threads", str(args.threads), "--format", "json"],
                             check=True, capture_output=True, text=True)
        for r in json.loads(out.stdout)["results"]:
            if r["direction"] == "forward" and r["mode"] == "out-of-place":
                ours[(r["dtype"], r["seq_len"])] = r
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads; "
          "forward, out of place")
    print("dtype      seq_len   HF eager ms   GB/s   circlerope ms   GB/s   speed-up")
    for dtype_name, seq, ms, gbps in rows:
        line = f"{dtype_name:9} {seq:8} {ms:13.2f} {gbps:6.1f}"
        r = ours.get((dtype_name, seq))
        if r:
            line += f" {r['ms']:15.2f} {r['gbps']:6.1f} {ms / r['ms']:9.1f}x"
        print(line)


if __name__ == "__main__":
    main()
