"""The experiment's ranges, in one table, and the rules between values.

Every number the experiment reads is checked here before any work starts: a command-line flag
(plan.py, evaluate.py, bench.py), a preset's value (plan.py runs the presets through the flags'
checks), and every file it reads back: a checkpoint's run.json and model.pt (checkpoint.py), a
results.json (report.py) and a seed's data stream (stream.py). A value outside its range, of the
wrong type, or breaking a rule between values is refused with one line (InputError) naming the
flag, or the file and the key, and the range; the commands exit with code 2.
docs/experiment.md ("Ranges") lists the table and why each bound has its value.

Values a user wrote are shown by the library's quoting rule (include/circlerope/detail/quote.h,
through circlerope._core): at most 40 bytes, anything outside printable ASCII escaped.
"""

from __future__ import annotations

import math
import os
import re
from typing import Callable, Dict, Optional, Sequence, Tuple

from . import data


class InputError(ValueError):
    """A flag, a preset's value or a file outside its range or grammar: one line, exit code 2."""


# name: (lowest, highest), both included. Flags use these names (--steps, --eval-seqs ...);
# checkpoint.py maps each key of run.json to one of them.
INTS: Dict[str, Tuple[int, int]] = {
    "seed": (0, 2**32 - 1),            # a training seed, eval --seed, a run's evaluation seed
    "seeds": (1, 1000),                # how many seeds (--seeds N, or the length of a list)
    "secondary-seeds": (0, 1000),      # of the seeds, how many the secondary arms get
    "runs": (1, 1000),                 # runs of one invocation: seeds x arms (full: 64)
    "steps": (1, 1_000_000),           # ~26 CPU-h of one run at 0.094 CPU-s a step
    "batch": (1, 1024),
    "warmup": (0, 1_000_000),
    "curriculum": (0, 1_000_000),
    "curve-every": (0, 1_000_000),
    "questions": (1, 64),              # questions per sequence (eval --per-sequence)
    "objects": (1, len(data.COLOURS) * len(data.SHAPES)),   # distinct objects: 32
    "cells": (1, data.MAX_COORD),      # cells on a grid's side: row and column words 0-15
    "grids": (1, 64),                  # grids in one list
    "merge": (1, 8),                   # patches per cell side
    "filler": (0, 512),                # filler tokens per sequence (--filler, --prefix ...)
    "gap": (0, 512),
    "sequences": (1, 65536),           # --eval-seqs, eval --seqs, a run's curve and probe sizes
    "content-samples": (0, 4096),
    "probe-seqs": (1, 65536),
    "layers": (1, 16),
    "width": (2, 512),
    "heads": (1, 16),
    "mlp": (1, 2048),
    "sections": (0, 256),              # each; their sum is head_dim / 2
    "workers": (0, 64),                # processes, ~0.4 GB each
    "threads": (1, 1024),              # and at most the machine's cores (thread_range)
    "rounds": (1, 10_000),             # tiny_vlm.bench: steps per measurement
}
# name: (lowest, highest, lowest included)
NUMBERS: Dict[str, Tuple[float, float, bool]] = {
    "lr": (0.0, 1.0, False),
    "theta": (1.0, 2.0**126, True),    # the library's rope_theta range (docs/reference/limits.md)
    "mix": (0.0, 1e6, True),           # each weight; not all 0
    "weight-decay": (0.0, 1.0, True),
}
MAX_SPLIT_TOKENS = 1 << 23   # sequences x the longest sequence of one evaluated split (~0.8 GB of Python lists)
MAX_BATCH_TOKENS = 1 << 17   # batch x the longest training sequence (the attention mask is batch x S x S)
MAX_THREADS = 1024           # the library's kMaxThreads (docs/reference/limits.md)
MAX_NAME = 200               # characters of an arm or split name (names folders and tables)


def thread_range() -> Tuple[int, int]:
    """torch threads of one process: 1 to the machine's cores, never more than MAX_THREADS.
    (torch.set_num_threads(100000) is accepted by torch and ends in SIGSEGV at the first
    parallel op; more threads than cores only slow a run down.)"""
    return 1, max(1, min(MAX_THREADS, os.cpu_count() or 1))


def int_range(name: str) -> Tuple[int, int]:
    return thread_range() if name == "threads" else INTS[name]


def shown(value) -> str:
    """A value in a message: text quoted, anything else as its repr, by the library's rule."""
    from circlerope import _core
    return _core.quoted(value) if isinstance(value, str) else _core.escaped(repr(value))


def one_line(message: str) -> str:
    """Another library's message (torch's, json's) made one printable line."""
    from circlerope import _core
    return _core.one_line(str(message))


def _range_text(name: str) -> str:
    lo, hi = int_range(name)
    extra = " (at most this machine's cores)" if name == "threads" and hi < MAX_THREADS else ""
    return f"[{lo}, {hi}]{extra}"


# ----------------------------------------------------------------- one value ---
def check_int(where: str, value, name: str, high: Optional[int] = None) -> int:
    """value: an int (not a bool) in the range `name` (and <= high); else InputError."""
    lo, hi = int_range(name)
    if high is not None:
        hi = min(hi, high)
    if type(value) is not int or not lo <= value <= hi:
        rng = _range_text(name) if high is None or high >= int_range(name)[1] else f"[{lo}, {hi}]"
        raise InputError(f"{where} must be an integer in {rng}, got {shown(value)}")
    return value


def check_number(where: str, value, name: str) -> float:
    """value: a finite int or float (not a bool) in the range `name`; else InputError."""
    lo, hi, closed = NUMBERS[name]
    ok = type(value) in (int, float) and math.isfinite(value) and (lo <= value if closed else lo < value) \
        and value <= hi
    if not ok:
        raise _not_a_number(where, name, value)
    return float(value)


def _not_a_number(where: str, name: str, value) -> InputError:
    lo, hi, closed = NUMBERS[name]
    return InputError(f"{where} must be a finite number in {'[' if closed else '('}{lo:g}, {hi:g}], "
                      f"got {shown(value)}")


INTEGER = re.compile(r"[+-]?[0-9]{1,30}")
NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_int(where: str, text, name: str, high: Optional[int] = None) -> int:
    """A flag's integer ([+|-] digits) in the range `name`."""
    text = str(text)
    if not INTEGER.fullmatch(text):
        raise InputError(f"{where} must be an integer in {_range_text(name)}, got {shown(text)}")
    return check_int(where, int(text), name, high)


def parse_number(where: str, text, name: str) -> float:
    """A flag's number (the library's grammar: decimal, no inf/nan/hex/_) in the range `name`."""
    text = str(text)
    if len(text) > 100 or not NUMBER.fullmatch(text):
        raise _not_a_number(where, name, text)
    value = float(text)   # the grammar's text is a float, inf when it overflows
    if not math.isfinite(value):
        raise _not_a_number(where, name, text)
    return check_number(where, value, name)


def parse_pair(where: str, text, name: str) -> Tuple[int, int]:
    """lo,hi: two integers in the range `name`, lo <= hi."""
    parts = str(text).split(",")
    if len(parts) != 2:
        raise InputError(f"{where} must be lo,hi, got {shown(str(text))}")
    lo, hi = (parse_int(where, x, name) for x in parts)
    if lo > hi:
        raise InputError(f"{where} {shown(str(text))}: lo > hi")
    return lo, hi


def check_pair(where: str, value, name: str) -> Tuple[int, int]:
    """A file's [lo, hi]: two integers in the range `name`, lo <= hi."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InputError(f"{where} must be [lo, hi], got {shown(value)}")
    lo, hi = (check_int(where, x, name) for x in value)
    if lo > hi:
        raise InputError(f"{where} {shown(value)}: lo > hi")
    return lo, hi


# ----------------------------------------------------------- rules of values ---
def check_grids(where: str, grids: Sequence[Tuple[int, int]]) -> None:
    """A list of 1-64 grids of 1-16 cells a side (the row and column words are 0-15)."""
    check_int(f"{where}: the number of grids", len(grids), "grids")
    lo, hi = INTS["cells"]
    for h, w in grids:
        if not (lo <= h <= hi and lo <= w <= hi):
            raise InputError(f"{where}: a {h}x{w}-cell grid; a side holds {lo} to {hi} cells "
                             f"(rows and columns are the words 0-{hi - 1})")


def check_model(where: Callable[[str], str], width: int, heads: int, sections: Sequence[int]) -> None:
    """width splits into heads of even size; three sections summing to head_dim / 2.
    where(key) names a value in the message."""
    if width % heads or (width // heads) % 2:
        raise InputError(f"{where('width')} {width} must split into {where('heads')} {heads} heads of even size")
    if len(sections) != 3 or 2 * sum(sections) != width // heads:
        raise InputError(f"{where('sections')} {','.join(map(str, sections))}: three numbers summing to "
                         f"head_dim/2 = {width // heads // 2}")


def check_mix(where: str, mix: Sequence[float]) -> None:
    if len(mix) != len(data.QUESTION_TYPES) or sum(mix) <= 0:
        raise InputError(f"{where}: four weights >= 0 (neighbour,lookup,relation,count), not all 0")


def check_objects(where: str, objects: Tuple[int, int], grids, mix) -> None:
    """At most 32 distinct objects and the smallest grid's cells; 2 for neighbour or relation."""
    if objects[1] > INTS["objects"][1]:
        raise InputError(f"{where}: at most {INTS['objects'][1]} distinct objects (8 colours x 4 shapes)")
    if min(h * w for h, w in grids) < objects[1]:
        raise InputError(f"{where}: a grid has fewer cells than the most objects")
    spatial = [k for k, m in zip(("neighbour", "relation"), (mix[0], mix[2])) if m > 0]
    if spatial and objects[0] < 2:
        raise InputError(f"{where}: {' and '.join(spatial)} questions need at least 2 objects")


def check_relation_grids(where: str, grids, mix) -> None:
    """Relation questions need two objects in different rows and columns: 2x2 cells at least."""
    for h, w in grids:
        if mix[2] > 0 and (h < 2 or w < 2):
            raise InputError(f"{where + ': ' if where else ''}a {h}x{w}-cell grid cannot hold two objects in different rows and columns "
                             "(relation questions); drop relation from --mix or use another grid")


def longest(layout) -> int:
    """The most tokens a sequence of `layout` has: BOS, filler, VS, the patches, VE and a
    (question, ASK) pair per question."""
    cells = max(h * w for h, w in layout.grids)
    return 1 + layout.filler[1] + 2 + cells + 2 * layout.questions


def check_split_size(where: str, layout, seqs: int) -> None:
    """One evaluated split: its sequences x its longest sequence <= MAX_SPLIT_TOKENS."""
    tokens = seqs * longest(layout)
    if tokens > MAX_SPLIT_TOKENS:
        raise InputError(f"{where}: {seqs} sequences of up to {longest(layout)} tokens are {tokens:,} tokens, "
                         f"more than the {MAX_SPLIT_TOKENS:,} one evaluated split may hold")


def check_batch_size(where: str, layout, batch: int) -> None:
    """A training batch: batch x the longest training sequence <= MAX_BATCH_TOKENS."""
    tokens = batch * longest(layout)
    if tokens > MAX_BATCH_TOKENS:
        raise InputError(f"{where}: {batch} sequences of up to {longest(layout)} tokens are {tokens:,} tokens a "
                         f"step, more than {MAX_BATCH_TOKENS:,}")


def check_name(where: str, value) -> str:
    """An arm's or a split's name: 1 to MAX_NAME printable characters."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME or not value.isprintable():
        raise InputError(f"{where} must be a name of 1 to {MAX_NAME} printable characters, got {shown(value)}")
    return value
