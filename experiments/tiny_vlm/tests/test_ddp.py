"""A 2-process gloo DistributedDataParallel run (torch.distributed.run --nproc_per_node 2)
gives the same loss curve as a 1-process run with the same global batch."""

import json
import subprocess
import sys

from tiny_vlm import cli
from tiny_vlm.plan import resolve
from tiny_vlm.train import train

# Each rank makes its own half of the global batch from per-example seeds, so both runs see
# the same data. What differs is float32 summation order: matrix products over a half batch
# and the averaged gradients. Over 6 steps that moves the loss by ~1e-6; 1e-4 is two orders
# of magnitude above it and far below the per-step change of the loss (~1e-2).
TOLERANCE = 1e-4

# Debian's torch 1.13 launcher cannot parse its own default "--redirects 0 --tee 0" under
# Python 3.11 (Std.from_str iterates an IntFlag, which no longer yields NONE): it dies with
# "'NoneType' object has no attribute 'get'". Any non-zero value parses.
LAUNCH = ["-m", "torch.distributed.run", "--standalone", "--redirects", "1", "--tee", "1", "--nproc_per_node", "2"]


def test_two_process_ddp_matches_one_process(tmp_path, env):
    argv = ["micro", "--arms", "circle", "--steps", "6", "--batch", "8", "--eval-seqs", "4", "--no-plots"]
    out = tmp_path / "ddp"
    p = subprocess.run([sys.executable, *LAUNCH, "-m", "tiny_vlm", *argv, "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)  # a hang guard (~40 s idle)
    assert p.returncode == 0, p.stderr[-3000:]
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["world_size"] == 2 and run["steps"] == 6
    single = train(resolve(argv).configs[0])
    assert single["world_size"] == 1
    diff = max(abs(a - b) for a, b in zip(run["loss"], single["loss"]))
    assert len(run["loss"]) == len(single["loss"]) == 6
    assert diff < TOLERANCE, (diff, run["loss"], single["loss"])
    assert run["loss"][0] != run["loss"][-1]   # it trained
    # Evaluation is sharded over the ranks and gathered: every question counted once.
    for split, s in run["splits"].items():
        assert s["questions"] == single["splits"][split]["questions"], split


def test_ddp_rejects_a_batch_that_does_not_split(monkeypatch, capsys):
    # Checked before any process group starts: every rank prints the same one line.
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert cli.main(["micro", "--batch", "7"]) == 2
    err = capsys.readouterr().err
    assert err == "tiny_vlm: error: --batch 7 is not divisible by the 2 DDP processes\n"
