"""Reading back the files the experiment writes, as untrusted input: a checkpoint's run.json and
model.pt (checkpoint.py), a results.json (report.py), a seed's data stream (stream.py).

- JSON: at most a given size, checked before it is read; UTF-8; NaN and Infinity refused (the
  experiment never writes them); nesting too deep for the parser refused; one line.
- Tensors: torch.load(weights_only=True) only, which builds tensors and plain containers and
  refuses any other object, so a crafted file never runs code (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD
  does not override an explicit weights_only=True). Before it, the file must be the zip archive
  torch.save writes, its members' sizes summing to at most a given number of bytes (checked from
  the archive's directory, before anything is unpacked).

Every refusal is an InputError of one line naming the file.
"""

from __future__ import annotations

import gzip
import json
import os
import zipfile

from .limits import InputError, one_line, shown


def _size(path: str, limit: int, what: str) -> int:
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a file")
    if size > limit:
        raise InputError(f"{path}: {size:,} bytes, more than the {limit:,} {what} can take")
    return size


def _constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: str, limit: int, what: str = "such a file"):
    """The JSON document at `path` (at most `limit` bytes; a path ending in .gz: gzip, at most
    `limit` bytes unpacked, checked while unpacking); InputError otherwise."""
    _size(path, limit, what)
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise InputError(f"{path}: more than the {limit:,} bytes {what} can take, unpacked")
        return json.loads(raw.decode("utf-8"), parse_constant=_constant)
    except InputError:
        raise
    except (gzip.BadGzipFile, EOFError):
        raise InputError(f"{path}: not a whole gzip file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply") from None
    except (ValueError, OSError) as e:   # json.JSONDecodeError is a ValueError
        raise InputError(f"{path}: not valid JSON: {one_line(e)[:200]}") from None


def load_tensors(path: str, limit: int, what: str = "such a file"):
    """torch.load(path, weights_only=True) of a torch.save zip archive whose members hold at
    most `limit` bytes; InputError (one line, naming the file) for anything else."""
    import torch
    _size(path, limit, what)
    try:
        with zipfile.ZipFile(path) as z:
            unpacked = sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        raise InputError(f"{path}: not a zip archive as torch.save writes") from None
    if unpacked > limit:
        raise InputError(f"{path}: holds {unpacked:,} bytes unpacked, more than the {limit:,} {what} can take")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - whatever the unpickler refuses: the file's fault, one line
        # torch's message is a page: the advice to load with weights_only=False (never taken
        # here), then what was refused ("Unsupported global ...", "unsupported GLOBAL ...").
        lines = [line.strip() for line in str(e).splitlines()
                 if line.strip() and "weights_only" not in line and not line.startswith("Check the documentation")]
        reason = next((line for line in lines if "unsupported" in line.lower()),
                      lines[0] if lines else type(e).__name__)
        raise InputError(f"{path}: refused by torch.load(weights_only=True), which loads tensors only: "
                         f"{one_line(reason)[:200]}") from None


def expect_keys(where: str, value, required, optional=(), aliases=None) -> dict:
    """A JSON object with exactly the keys `required` (and any of `optional`); `aliases` maps an
    older spelling to the key. Returns it with the aliases renamed; InputError otherwise."""
    aliases = aliases or {}
    if not isinstance(value, dict):
        raise InputError(f"{where} must be an object, got {shown(value)}")
    out, given = {}, {}
    for key, v in value.items():
        name = aliases.get(key, key)
        if name not in required and name not in optional:
            raise InputError(f"{where}: unknown key {shown(key)} (expected {', '.join(list(required) + list(optional))})")
        if name in out:
            raise InputError(f"{where}: {shown(given[name])} and {shown(key)} both give {name}")
        out[name], given[name] = v, key
    missing = [k for k in required if k not in out]
    if missing:
        raise InputError(f"{where}: missing key {shown(missing[0])}")
    return out
