#!/usr/bin/env python3
"""The Hugging Face drop-in against the real transformers: a tiny, randomly initialised
Qwen2.5-VL (from a config, no weights) patched with circlerope.hf.rope_index_fn.

  1. scheme="mrope" in the compat mode of the installed transformers
     (circlerope.hf.compat_for_version): the logits must equal the unpatched model's, bit
     for bit, on a batch with an image in each row and a left-padded row.
  2. scheme="circle": forward and backward run on the device, every gradient is finite, the
     patched function was called, and the logits differ from M-RoPE's (the geometry took).

Prints one JSON object: {"status": "pass" | "fail" | "skipped", "reason": ..., ...}. Exit code
0 unless a check failed. Skipped (exit 0) when transformers or circlerope.hf is missing.

    PYTHONPATH=build/gpu/python python3 scripts/hf_check.py [--device cuda]
"""
import argparse
import inspect
import json
import sys
import time
import traceback

import torch

VOCAB, VISION_START, IMAGE, VIDEO, VISION_END = 256, 250, 251, 252, 253
GRID = (1, 4, 4)  # t, h, w in patches: 2 x 2 merged tokens
IMAGE_TOKENS = GRID[0] * GRID[1] * GRID[2] // 4


def tiny_config(transformers):
    """Qwen2.5-VL, 2 text layers of width 64 (4 heads of 16, 2 KV heads, M-RoPE sections
    [2, 3, 3]) and a 1-block vision tower. Top-level text arguments: transformers 4.49 reads
    them directly, 4.52 and 5.x pass them on to the text config."""
    return transformers.Qwen2_5_VLConfig(
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[0], in_channels=3, tokens_per_second=2),
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, rope_theta=1e6,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, tie_word_embeddings=False)


def batch(device):
    """Two rows with one image each; row 1 left-padded by two tokens."""
    image = [VISION_START] + [IMAGE] * IMAGE_TOKENS + [VISION_END]
    rows = [[5, 6] + image + [7, 8, 9], [0, 0, 10] + image + [11, 12]]
    input_ids = torch.tensor(rows, device=device)
    mask = torch.ones_like(input_ids)
    mask[1, :2] = 0
    gen = torch.Generator().manual_seed(3)
    patches = 2 * GRID[0] * GRID[1] * GRID[2]
    pixel_values = torch.randn(patches, 3 * 2 * 14 * 14, generator=gen).to(device)
    grid = torch.tensor([GRID, GRID], device=device)
    return dict(input_ids=input_ids, attention_mask=mask, pixel_values=pixel_values, image_grid_thw=grid)


def rope_owners(model):
    """The modules whose get_rope_index the forward calls (the model itself in 4.49-4.51,
    model.model from 4.52), and which cache rope_deltas."""
    owners = [m for m in (model, getattr(model, "model", None)) if m is not None and hasattr(m, "get_rope_index")]
    return owners


def forward(model, inputs):
    for m in (model, getattr(model, "model", None)):
        if m is not None and hasattr(m, "rope_deltas"):
            m.rope_deltas = None  # cached by the previous forward: positions must be recomputed
    inputs = dict(inputs)
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        # transformers 5.3 finds vision tokens by type (1 image, 2 video), as its processor
        # returns them, and refuses grids without them.
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == IMAGE).to(torch.int32)
    return model(**inputs, use_cache=False).logits


def patch(model, fn):
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    for m in rope_owners(model):
        m.get_rope_index = counted
    return calls


def unpatch(model):
    for m in rope_owners(model):
        if "get_rope_index" in vars(m):
            del m.get_rope_index


def run(device):
    result = {"device": str(device)}
    import circlerope  # noqa: F401  (a package that does not import is a failure, whatever else is missing)
    try:
        import transformers
    except ImportError as e:
        return {**result, "status": "skipped", "reason": f"transformers is not installed ({e})"}
    result["transformers"] = transformers.__version__
    try:
        import circlerope.hf as hf
    except ImportError as e:
        return {**result, "status": "skipped",
                "reason": f"circlerope.hf is missing (the adapter of the compatibility issue): {e}"}
    compat = hf.compat_for_version(transformers.__version__)
    result["compat"] = compat
    torch.manual_seed(0)
    config = tiny_config(transformers)
    model = transformers.Qwen2_5_VLForConditionalGeneration(config).to(device).float().eval()
    if not rope_owners(model):
        return {**result, "status": "fail", "reason": "the model has no get_rope_index to patch"}
    inputs = batch(device)

    with torch.no_grad():
        reference = forward(model, inputs)
        mrope_calls = patch(model, hf.rope_index_fn(config, scheme="mrope", compat=compat))
        patched = forward(model, inputs)
    unpatch(model)
    diff = (patched.double() - reference.double()).abs().max().item()
    result["mrope"] = {"logits_equal": bool(torch.equal(patched, reference)), "max_abs_diff": diff,
                       "adapter_called": len(mrope_calls)}

    circle_calls = patch(model, hf.rope_index_fn(config, scheme="circle", compat=compat))
    model.zero_grad(set_to_none=True)
    logits = forward(model, inputs)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(),
                                             inputs["input_ids"][:, 1:].reshape(-1))
    loss.backward()
    unpatch(model)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    with_grad = [g for g in grads if g is not None]
    result["circle"] = {
        "loss": loss.item(), "adapter_called": len(circle_calls),
        "logits_on": str(logits.device), "params_with_grad": len(with_grad), "params": len(grads),
        "grads_finite": all(bool(torch.isfinite(g).all()) for g in with_grad),
        "grads_on_device": all(g.device.type == torch.device(device).type for g in with_grad),
        "differs_from_mrope": not torch.equal(logits.detach(), reference),
    }
    problems = []
    if not result["mrope"]["logits_equal"]:
        problems.append(f"mrope logits differ from the unpatched model's by up to {diff:.3g}")
    if not result["mrope"]["adapter_called"] or not result["circle"]["adapter_called"]:
        problems.append("the patched get_rope_index was not called")
    c = result["circle"]
    if not (c["grads_finite"] and c["grads_on_device"] and c["params_with_grad"] > 0 and torch.isfinite(torch.tensor(c["loss"]))):
        problems.append("circle forward/backward: non-finite or missing gradients")
    if not c["differs_from_mrope"]:
        problems.append("circle logits equal mrope's: the circle positions did not reach the model")
    result["status"] = "fail" if problems else "pass"
    result["reason"] = "; ".join(problems) if problems else (
        f"mrope ({compat}) logits equal the unpatched model's; circle forward+backward ran on {device}")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        result = {"status": "skipped", "reason": "no CUDA device"}
    else:
        try:
            result = run(device)
        except Exception as e:  # noqa: BLE001 - report, do not crash the GPU check
            result = {"status": "fail", "reason": f"{type(e).__name__}: {e}",
                      "traceback": traceback.format_exc().splitlines()[-12:]}
    result["seconds"] = round(time.perf_counter() - start, 2)
    print(json.dumps(result, indent=2))
    return 1 if result["status"] == "fail" else 0


if __name__ == "__main__":
    sys.exit(main())
