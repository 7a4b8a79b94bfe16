#!/usr/bin/env python3
"""circlerope from PyTorch: Circle-RoPE positions for a Qwen2.5-VL prompt, an AGE plan that
alternates Circle-RoPE and M-RoPE over the layers, the fused rotation with its gradient, and a
decode step.

    PYTHONPATH=build/release/python .venv/bin/python examples/pytorch_age.py
"""
import os

import torch

import circlerope

torch.set_num_threads(os.cpu_count() or 1)  # the kernels follow torch's thread count

START, END, IMAGE = 151652, 151653, 151655
# "<|im_start|>user <vision_start> 24 image tokens <vision_end> What is this?" (ids made up
# except the vision ones); the image is 8 x 12 patches, 4 x 6 tokens after the 2 x 2 merge.
input_ids = torch.tensor([[101, 102, START] + [IMAGE] * 24 + [END, 201, 202, 203]])
image_grid_thw = torch.tensor([[1, 8, 12]])

for scheme in ("mrope", "circle"):
    position_ids, rope_deltas = circlerope.get_rope_index(input_ids, image_grid_thw, scheme=scheme)
    metrics = circlerope.ptd(input_ids, image_grid_thw, scheme=scheme)
    print(f"{scheme:>6}: first image token at (t, h, w) = {position_ids[:, 0, 3].tolist()}, "
          f"rope_delta {rope_deltas.item():+.4f}, PTD {metrics.ptd:.4f}, "
          f"RoPE kernel deviation {metrics.rope_kernel_deviation:.4f}")

# A 4-layer model, Qwen2.5-VL rotary settings (head dim 128, sections 16/24/24, theta 1e6).
plan = circlerope.AgePlan("alternate", 4)
rope = circlerope.RotaryEmbedding(plan, rotary=circlerope.RotaryConfig(sections=(16, 24, 24), theta=1e6))
angles = rope(input_ids, image_grid_thw)  # positions and one angle table per geometry
print(f"{plan}: tables for {sorted(angles.tables)}, each {list(angles.table(0).shape)}")

seq = input_ids.shape[1]
q = torch.randn(1, 16, seq, 128, requires_grad=True)   # [batch, heads, seq, head_dim]
k = torch.randn(1, 2, seq, 128, requires_grad=True)    # 2 KV heads (GQA)
loss = 0
for layer in range(len(plan)):
    q_rot, k_rot = angles.apply(layer, q, k)
    loss = loss + (q_rot[:, :, -1:] @ k_rot.repeat_interleave(8, 1).transpose(-1, -2)).square().mean()
loss.backward()
print(f"gradient through 4 fused rotations: |dq| = {q.grad.norm():.4f}, |dk| = {k.grad.norm():.4f}")

step = angles.decode(cache_position=seq)  # each geometry continues from its own rope_deltas
for scheme, pos in step.position_ids.items():
    print(f"next token under {scheme}: position {pos[0, 0, 0].item():.4f}")
