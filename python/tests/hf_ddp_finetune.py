"""A few SGD steps of a tiny Qwen2.5-VL switched to AGE by circlerope.hf.apply, under
torch.distributed (gloo) DistributedDataParallel, on a fixed global batch split across the
ranks; rank 0 saves the final weights. test_hf_models.py runs it with 1 and with 2 processes
(torchrun) and compares the weights.

    torchrun --nproc_per_node 2 python/tests/hf_ddp_finetune.py OUT.pt
"""

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_hf_models as t  # noqa: E402 (the tiny model and requests of the test)

import circlerope.hf as hf  # noqa: E402

GLOBAL_BATCH, STEPS = 4, 3


def batch_of(samples):
    """Same-length samples (one 2x2-merged image each) stacked into one batch."""
    out = {"input_ids": torch.cat([s["input_ids"] for s in samples]),
           "image_grid_thw": torch.cat([s["image_grid_thw"] for s in samples]),
           "pixel_values": torch.cat([s["pixel_values"] for s in samples])}
    return out


def main(out_path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if GLOBAL_BATCH % world:
        raise SystemExit(f"global batch {GLOBAL_BATCH} does not split over {world} processes")
    model = t.make_model("qwen2_5_vl", "eager", seed=0)
    hf.apply(model, age="alternate")
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(STEPS):
        samples = [t.request(("image",), seed=100 * step + i) for i in range(GLOBAL_BATCH)]
        local = samples[rank * GLOBAL_BATCH // world:(rank + 1) * GLOBAL_BATCH // world]
        batch = batch_of(local)
        # equal lengths: the mean over the ranks is the mean over the global batch
        loss = t.lm_loss(ddp(**batch).logits, batch["input_ids"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step + 1}/{STEPS}: loss {loss.item():.6f} (rank 0 of {world})", flush=True)
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
