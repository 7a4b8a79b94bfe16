"""The rotation: the angle table of a batch's positions (rotary_table) and q and k rotated by it in
one fused operator (apply_rotary), on the CPU and, with the CUDA kernels, on a GPU
(check_cuda_positions reports what a CUDA table could not refuse when it was built).

The table holds, per token, rotary_dim / 2 cosines then rotary_dim / 2 sines of the angles
position * theta^(-2i/D), computed in double and rounded once: cos, sin = table.chunk(2, -1).
Hugging Face's (cos, sin) of a model's rotary embedding are circlerope.hf.rotary_cos_sin.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from ._checks import (MAX_TOKENS, check_layout, check_tokens, cpu, flag, instance, is_integer, is_number, shown,
                      tensor, text, tokens_of)
from ._ops import CUDA_KERNELS, ops
from .config import DEFAULT_ROTARY, RotaryConfig

Tensor = torch.Tensor


def rotary_table(position_ids, rotary: Optional[RotaryConfig] = None, *, sections=None, theta=None,
                 frequency_layout=None, rotary_dim=None) -> Tensor:
    """cos/sin of every frequency for every token: float32 [batch, seq_len, rotary_dim], per
    token rotary_dim/2 cosines then rotary_dim/2 sines. The angle pos * theta^(-2i/D) is
    computed in double and rounded once. position_ids: [3, batch, seq_len] (or [batch,
    seq_len] for 1-D positions), on the CPU, or on a CUDA device where the operators have CUDA
    kernels (the table is then built there). Build it once per geometry and forward pass; every
    layer with that geometry reuses it.

    The frequencies: a RotaryConfig, or its settings as keywords (sections, theta,
    frequency_layout, rotary_dim; the others at RotaryConfig's defaults), not both."""
    given = {key: value for key, value in (("sections", sections), ("theta", theta),
                                           ("frequency_layout", frequency_layout), ("rotary_dim", rotary_dim))
             if value is not None}
    if rotary is not None:
        if given:
            raise TypeError(f"rotary_table takes a RotaryConfig or its settings as keywords, not both (got rotary "
                            f"and {', '.join(given)}): put them in the RotaryConfig")
        args = instance(rotary, RotaryConfig, "rotary")._args()
    elif torch.compiler.is_compiling():
        args = _traced_args(given)
    else:
        args = RotaryConfig(**given)._args()
    return _table(position_ids, args)


def _traced_args(given: dict) -> tuple:
    """The op's settings (theta, rotary_dim, frequency layout, sections) while torch.compile
    traces. It cannot trace the core (_core), so the settings go to the operator as plain
    values, whose fake kernel checks them with the core when the graph is traced and whose
    kernel checks them again when it runs. Only values whose conversion to those plain values
    is exact are taken: sections integers (the core counts them), theta a real number, rotary_dim an integer or
    None, the frequency layout a str, none of them a bool. Anything else, which eager reads
    with RotaryConfig (and refuses, as sections=(1.9, 1, 2) or (True, 1, 2)), is refused here
    too, never truncated: under fullgraph=True torch reports this TypeError; otherwise the
    call runs eagerly, with eager's message."""
    defaults = DEFAULT_ROTARY
    sections = given.get("sections", defaults.sections)
    theta = given.get("theta", defaults.theta)
    dim = given.get("rotary_dim")
    frequency_layout = given.get("frequency_layout", defaults.frequency_layout)
    if not (isinstance(sections, (tuple, list)) and all(is_integer(x) for x in sections)
            and (isinstance(theta, float) or (is_number(theta) and abs(theta) < 2 ** 53))
            and (dim is None or is_integer(dim)) and isinstance(frequency_layout, str)):
        raise TypeError("rotary_table under torch.compile: sections must be three integers, theta a number, "
                        "rotary_dim an integer or None and frequency_layout a string, as eager reads them (give a "
                        "RotaryConfig made outside the compiled code for any other spelling)")
    sections = [int(x) for x in sections]
    return (float(theta), 2 * sum(sections) if dim is None else int(dim), frequency_layout, sections)


def _table(position_ids, args: tuple) -> Tensor:
    """rotary_table's operator call for checked settings (theta, rotary_dim, frequency layout,
    sections)."""
    position_ids = tokens_of(tensor(position_ids, "position_ids", required=True), "position_ids")
    if position_ids.dim() == 2:
        position_ids = position_ids.unsqueeze(0).expand(3, -1, -1)
    theta, dim, frequency_layout, sections = args
    # Positions stay on a CUDA device where the operators have CUDA kernels.
    on_device = position_ids.detach() if CUDA_KERNELS and position_ids.device.type == "cuda" else cpu(position_ids)
    return ops.rotary_table(on_device, dim, sections, theta, frequency_layout)


def _check_device(q, k, table) -> None:
    # The common call, decided with the cheapest attribute reads (one rotation per layer: its
    # host time counts); anything else takes the checks below, which name the problem.
    if (type(q) is Tensor and type(k) is Tensor and type(table) is Tensor and q.layout == k.layout ==
            table.layout == torch.strided and table.dim() == 3 and table.shape[0] * table.shape[1] <= MAX_TOKENS
            and ((q.is_cpu and k.is_cpu and table.is_cpu)
                 or (CUDA_KERNELS and q.is_cuda and k.device == q.device and table.device == q.device))):
        return
    named = (("q", q), ("k", k), ("table", table))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (got {shown(type(t).__name__)})")
        check_layout(t, name)
        if name == "table" and t.dim() == 3:
            check_tokens("table", int(t.shape[0]), int(t.shape[1]))
    for name, t in named:
        if t.device.type == "cpu":
            continue
        if t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}; circlerope's operators take CPU or CUDA tensors")
        if not CUDA_KERNELS:
            raise ValueError(f"{name} is on {t.device}; this build of circlerope's operators takes CPU "
                             "tensors (configure with CIRCLEROPE_CUDA=ON against a CUDA libtorch for CUDA)")
    for name, t in named[1:]:
        if t.device != q.device:
            raise ValueError(f"q is on {q.device} but {name} is on {t.device}; q, k and the table must be on "
                             "one device (build the table from position_ids on q's device)")


def apply_rotary(q: Tensor, k: Tensor, table: Tensor, *, pairing: str = "neox",
                 qk_layout: str = "bhsd", inplace: bool = False) -> Tuple[Tensor, Tensor]:
    """Rotates q and k by a table from rotary_table (differentiable in q and k).

    qk_layout: "bhsd" ([batch, heads, seq, head_dim], Hugging Face after transpose(1, 2); any
    strides) or "bshd". q and k may have different head counts (GQA); head_dim may exceed
    the rotary dim (the rest passes through). dtypes: float32, bfloat16, float16 (fused
    kernels, float32 math) and float64 (a scalar path, for gradcheck). pairing: "neox"
    (rotate_half) or "gptj" (adjacent pairs).

    inplace=True writes the result into q and k themselves and returns them (no new memory;
    for inference: it has no gradient, and refuses inputs that need one).
    """
    _check_device(q, k, table)
    # the operator judges both names; a non-string would be torch's RuntimeError
    pairing, qk_layout = text(pairing, "pairing"), text(qk_layout, "qk_layout")
    if inplace is False:
        return ops.rotary_apply(q, k, table, pairing, qk_layout, False)
    if flag(inplace, "inplace"):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            raise ValueError("apply_rotary(inplace=True) has no gradient, and q or k requires one; rotate "
                             "out of place (inplace=False) for training, or run under torch.no_grad()")
        ops.rotary_apply_(q, k, table, pairing, qk_layout, False)
        return q, k
    return ops.rotary_apply(q, k, table, pairing, qk_layout, False)


def check_cuda_positions(device=None) -> None:
    """Raises the CPU's ValueError for a non-finite position that rotary_table met on a CUDA
    device, and clears it. On CUDA, rotary_table never waits for the device (so that it can be
    captured in a CUDA graph), so it cannot refuse such a position when called: that token's
    table entries become NaN, the kernel records the position, and the next rotary_table call
    on the device raises for it if the kernel has finished by then. This function waits for
    the device (torch.cuda.synchronize) and reports what every table queued so far recorded.
    device: a CUDA device or its index (default: the current one). Does nothing when the
    operators have no CUDA kernels."""
    if not CUDA_KERNELS:
        return
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(
        "cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {shown(str(device))}")
    index = torch.cuda.current_device() if device.index is None else device.index
    torch.cuda.synchronize(index)
    message = ops.take_position_error(index)
    if message:
        raise ValueError(message)
