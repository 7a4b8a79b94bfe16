"""A seed's training batches, made once and shared by every arm trained with that seed.

The runs of one seed see the same batches (data.make_examples is a function of the seed, the
step and the example's index), so the driver's workers share them through files instead of
each making them again: the batches of CHUNK consecutive steps are packed (model.pack: uint8
ids and a few int32 per row) into one file, written by the first run that needs it and read by
the others. A claim file, created exclusively, marks a chunk being made, so that it is made
once: a second run that needs it makes the next chunk meanwhile, then reads it; a claim whose
process has died is taken over. The driver deletes a seed's chunks once every run of that seed
has ended.

A chunk is read back as untrusted input (files.load_tensors: torch.load(weights_only=True), at
most the bytes such a chunk can take) and checked (check_chunk: its batches, their tensors'
dtypes and shapes, and every index in range) before a batch is made of it; a bad chunk fails
the run with one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Dict, List, Optional

import torch

from . import data
from .files import load_tensors
from .limits import InputError, longest

CHUNK = 50
# model.pack's tensors: dtype and dimensions
PACKED = {"feats": (torch.uint8, 3), "length": (torch.int32, 1), "prefix": (torch.int32, 1),
          "image_start": (torch.int32, 1), "grid": (torch.int32, 2), "ask": (torch.int32, 2),
          "targets": (torch.int32, 2)}


def chunk_bytes(cfg) -> int:
    """The most bytes a chunk of cfg's batches takes (its tensors, plus 1 MiB for the archive)."""
    per_row = longest(cfg.train) * data.FEATURES + 4 * (4 + 2 + 2 * cfg.train.questions)
    return CHUNK * (cfg.batch * per_row + 4096) + (1 << 20)


def check_chunk(path: str, batches, count: int, batch: int) -> List[Dict[str, torch.Tensor]]:
    """`count` batches of model.pack's tensors, `batch` rows each, every index in range."""
    def bad(why: str):
        raise InputError(f"{path}: not a chunk of this run's batches: {why}")
    if not isinstance(batches, list) or len(batches) != count:
        bad(f"expected a list of {count} batches")
    for b in batches:
        if not isinstance(b, dict) or set(b) != set(PACKED):
            bad(f"a batch is not a dict of {', '.join(PACKED)}")
        for key, (dtype, dim) in PACKED.items():
            t = b[key]
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.dim() != dim or t.layout != torch.strided \
                    or t.shape[0] != batch:
                bad(f"{key} is not a {dim}-d {dtype} tensor of {batch} rows")
        s = b["feats"].shape[1]
        length, prefix, start, grid = (b[k].long() for k in ("length", "prefix", "image_start", "grid"))
        ask, targets = b["ask"].long(), b["targets"].long()
        ok = (b["feats"].shape[2] == data.FEATURES and grid.shape[1] == 2 and ask.shape == targets.shape
              and (b["feats"].numel() == 0 or int(b["feats"].max()) < data.VOCAB_SIZE)
              and bool(((1 <= length) & (length <= s) & (0 <= prefix) & (prefix <= length)).all())
              and bool(((1 <= grid) & (grid <= data.MAX_COORD)).all())
              and bool(((0 <= start) & (start + 2 + grid[:, 0] * grid[:, 1] <= length)).all())
              and bool(((-1 <= ask) & (ask < s)).all()) and bool(((-1 <= targets) & (targets < data.VOCAB_SIZE)).all()))
        if not ok:
            bad("a value out of range")
    return batches


def stream_id(cfg) -> str:
    """Names what the batches depend on: seed, training layout (its gap range included, through
    Layout.key), batch size, curriculum, steps."""
    what = {"seed": cfg.seed, "layout": cfg.train.key(), "gap": cfg.train.gap, "batch": cfg.batch,
            "curriculum": cfg.curriculum, "steps": cfg.steps}
    return f"seed{cfg.seed}-" + hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return True


class Stream:
    """packed(step): the training batch of `step` as model.pack's tensors."""

    def __init__(self, root: str, cfg, make, should_stop=lambda: False):
        """make(step) -> the examples of batch `step` (the trainer's own generator)."""
        self.dir = os.path.join(root, stream_id(cfg))
        os.makedirs(self.dir, exist_ok=True)
        self.cfg, self.steps, self.make, self.should_stop = cfg, cfg.steps, make, should_stop
        self.chunk: Optional[int] = None
        self.batches: List[Dict[str, torch.Tensor]] = []
        self.made = 0          # chunks this process made (the others it read)

    def packed(self, step: int) -> Optional[Dict[str, torch.Tensor]]:
        """None when should_stop() turned true while waiting for another run's chunk."""
        c = step // CHUNK
        if self.chunk != c:
            batches = self._load(c)
            if batches is None:
                return None
            self.chunk, self.batches = c, batches
        return self.batches[step - c * CHUNK]

    def _load(self, c: int) -> Optional[List[Dict[str, torch.Tensor]]]:
        path = self._path(c)
        while True:
            if os.path.exists(path):
                return self._read(c)
            made = self._make(c)
            if made is not None:
                return made
            # Another run is making chunk c: make the next one meanwhile rather than wait idle.
            if (c + 1) * CHUNK < self.steps and not os.path.exists(self._path(c + 1)):
                self._make(c + 1)
            if self.should_stop():
                return None
            time.sleep(0.02)

    def _read(self, c: int) -> List[Dict[str, torch.Tensor]]:
        path = self._path(c)
        count = min(CHUNK, self.steps - c * CHUNK)
        return check_chunk(path, load_tensors(path, chunk_bytes(self.cfg), "a chunk of this run's batches"),
                           count, self.cfg.batch)

    def _path(self, c: int) -> str:
        return os.path.join(self.dir, f"chunk{c:05d}.pt")

    def _make(self, c: int) -> Optional[List[Dict[str, torch.Tensor]]]:
        """Makes and writes chunk c unless another live process holds its claim (then None)."""
        from .model import pack
        path = self._path(c)
        claim = path + ".claim"
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                with open(claim) as f:
                    owner = f.read().strip()
            except FileNotFoundError:   # released just now: the chunk exists, or claim it again
                return None
            if owner and not _alive(int(owner)):
                try:
                    os.remove(claim)
                except FileNotFoundError:
                    pass
            return None
        try:
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            if os.path.exists(path):   # written between our check and our claim
                return self._read(c)
            first = c * CHUNK
            batches = [pack(self.make(step)) for step in range(first, min(first + CHUNK, self.steps))]
            tmp = f"{path}.{os.getpid()}.tmp"
            torch.save(batches, tmp)
            os.replace(tmp, path)
            self.made += 1
            return batches
        finally:
            try:
                os.remove(claim)
            except FileNotFoundError:
                pass
