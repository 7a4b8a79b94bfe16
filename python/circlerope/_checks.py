"""Argument checks every module of the package shares, before anything reaches the core or the
operators.

Values are judged by the core, with the one grammar every front end shares (circlerope/options.h,
through _core), and in its words. What is checked here is what the core cannot see: numpy and
one-element tensor scalars become Python scalars; a tensor's layout and size are judged on its
shape before anything reads, converts or copies it; and the exception's class.

The exception follows Python and PyTorch: a TypeError when the argument's Python type is not one
the parameter takes (a str where a number belongs, a list where a tensor belongs, a dict where a
CircleConfig belongs), a ValueError when the type is right and the value is not (a radius of -1,
an unknown scheme, a tensor of the wrong dtype, shape, device or layout). Both name the argument
and show its value by the one quoting rule (circlerope/detail/quote.h): one short line.
"""

from __future__ import annotations

import numbers
from typing import Optional

import numpy as np
import torch

from . import _core

Tensor = torch.Tensor

MAX_TOKENS = _core.MAX_TOKENS  # circlerope::kMaxTokens, the limit of one call


def shown(value) -> str:
    """A value in a message by the one quoting rule of every front end (circlerope/detail/quote.h,
    through _core): a str in quotes, anything else as its repr(); at most 40 characters of it,
    bytes outside printable ASCII escaped, so a message stays one short line."""
    if isinstance(value, str):
        return _core.quoted(value)
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not replace the real error
        text = f"<{type(value).__name__}>"
    return _core.escaped(text if isinstance(text, str) else f"<{type(value).__name__}>")


def plain(value):
    """A numpy scalar or a one-element tensor as the Python scalar it holds."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def is_integer(value) -> bool:
    """An int that is not a bool (Python's bool is an int, but never a count or an index here)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def integer(value, name: str, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """An integer argument read by the core's grammar (an int, a numpy integer, a one-element
    integer tensor), in [low, high] when given."""
    value = plain(value)
    if is_integer(value):  # without the core: torch.compile traces this (a layer index per layer)
        result = int(value)
    else:
        try:  # the core's words for what it refuses
            result = _core.integer_option(value, name)
        except ValueError as e:
            raise TypeError(str(e)) from None
    if (low is not None and result < low) or (high is not None and result > high):
        bounds = f"in [{low}, {high}]" if low is not None and high is not None else (
            f">= {low}" if high is None else f"<= {high}")
        raise ValueError(f"{name} must be an integer {bounds} (got {shown(result)})")
    return result


def number(value, name: str) -> float:
    """A finite real number read by the core's grammar."""
    value = plain(value)
    try:
        return _core.number_option(value, name)
    except ValueError as e:
        raise (ValueError if is_number(value) else TypeError)(str(e)) from None


def boolean(value, name: str) -> bool:
    """A boolean read from a configuration file by the core's grammar for typed values
    (circlerope/options.h, boolean_option): true or false, or the integer 0 or 1, as the
    reference's configs sometimes write it. A string ("false" would be truthy), a list or a
    float is refused, as a ValueError: a file's value has no Python type a caller chose.
    (An argument a caller passes is a flag(): True or False only.)"""
    value = plain(value)
    if value is True or value is False:
        return value
    if is_integer(value) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be true or false (got {shown(value)})")


def flag(value, name: str, allow_none: bool = False) -> Optional[bool]:
    """True or False (or None where it means "choose for me"); 1 or a tensor is no flag."""
    if value is True or value is False or (allow_none and value is None):
        return value
    raise TypeError(f"{name} must be True{', False or None' if allow_none else ' or False'} (got {shown(value)})")


def text(value, name: str) -> str:
    """A str that the operators can take (torch refuses lone surrogates with a RuntimeError)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string (got {shown(value)})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} {shown(value)} is not UTF-8 text (it holds a lone surrogate)") from None
    return value


def instance(value, cls, name: str, default=None):
    """An argument that must be a `cls` (None means `default`), e.g. circle=CircleConfig()."""
    if value is None:
        return default
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a circlerope.{cls.__name__} (got {shown(type(value).__name__)})")
    return value


# ----------------------------------------------------------------- tensors ---

def check_tokens(name: str, batch: int, seq_len: int) -> None:
    """A [batch, seq_len] of tokens within the core's limit of one call, judged on the shape:
    an expand() view of 2^40 tokens costs nothing until something copies it, and the operators
    copy their inputs into their own layout before the core sees the size."""
    if batch > MAX_TOKENS or seq_len > MAX_TOKENS or batch * seq_len > MAX_TOKENS:
        raise ValueError(f"{name}: batch {batch} x seq_len {seq_len} is more than {MAX_TOKENS} tokens, "
                         "the limit of one call")


def check_count(name: str, t: Tensor, limit: int, what: str) -> None:
    """At most `limit` elements, judged on the shape (see check_tokens)."""
    if t.numel() > limit:
        raise ValueError(f"{name} has shape {list(t.shape)}: more than {limit} {what}, the limit of one call")


def check_layout(t: Tensor, name: str) -> None:
    """Sparse, mkldnn and other layouts without strides: the operators would fail on them with
    torch's dispatcher error, or read them as garbage."""
    if t.layout != torch.strided:
        raise ValueError(f"{name} is a {t.layout} tensor; circlerope takes dense (torch.strided) tensors "
                         f"({name}.to_dense() makes one)")


def tensor(value, name: str, dtype=None, required: bool = False) -> Optional[Tensor]:
    """None (unless required), a tensor, or anything torch.as_tensor takes (lists of grids, say):
    what torch cannot read is a TypeError or a ValueError as torch.as_tensor says. Meta tensors
    have no data to read, sparse and mkldnn ones no strides: refused here, before anything calls
    .cpu() on them."""
    if value is None:
        if required:
            raise TypeError(f"{name} is required (got None)")
        return None
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value, dtype=dtype)
        except Exception as e:  # noqa: BLE001 - whatever torch raises for a value it cannot read
            kind = TypeError if isinstance(e, TypeError) else ValueError
            raise kind(f"{name}: cannot be read as a tensor ({_core.one_line(str(e), 200)})") from None
    check_layout(value, name)
    if value.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor (it has no data to read)")
    return value


def tensor_only(value, name: str) -> Tensor:
    """A torch.Tensor with data (dense, not meta), where a caller's API takes nothing else."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (got {shown(value)})")
    return tensor(value, name)


def tokens_of(t: Optional[Tensor], name: str) -> Optional[Tensor]:
    """t, after its last two dimensions ([batch, seq_len]) are checked against the limit of one
    call; a tensor of fewer dimensions is left to the operator's message."""
    if t is not None and t.dim() >= 2:
        check_tokens(name, int(t.shape[-2]), int(t.shape[-1]))
    return t


def grids_of(t: Optional[Tensor], name: str) -> Optional[Tensor]:
    """A grid list holds at most one grid per token of a call."""
    if t is not None:
        check_count(name, t, 3 * MAX_TOKENS, "values (three per grid, a grid per token at most)")
    return t


def seconds(value) -> Optional[Tensor]:
    """second_per_grid_ts as a float64 tensor (or None), one value per video at most per token."""
    out = tensor(value, "second_per_grid_ts", torch.float64)
    if out is not None:
        check_count("second_per_grid_ts", out, MAX_TOKENS, "values (one per video)")
    return out


def real_numbers(t: Tensor, name: str) -> Tensor:
    """A tensor of real numbers (not complex, not bool)."""
    if t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold real numbers, got {t.dtype}")
    return t


def cpu(t: Optional[Tensor]) -> Optional[Tensor]:
    """t on the CPU, detached (the operators take no gradient through positions)."""
    if t is None or (t.device.type == "cpu" and not t.requires_grad):
        return t
    return t.detach().cpu()
