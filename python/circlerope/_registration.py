"""Fake (meta) kernels of the torch.ops.circlerope operators.

The operators' schemas, device kernels and the autograd formula of rotary_apply are C++
(torch/ops.cpp, torch/ops_cuda.cpp, torch/autograd.cpp); the fake kernels are registered here,
as PyTorch's custom-operator API takes them from Python, so that fake tensors, torch.compile,
torch.export and torch.library.opcheck see each operator's output shapes and dtypes without
running it. The operator library names this module as theirs (torch/ops.cpp:
set_python_module("circlerope._registration")), and torch checks that they are defined here.
circlerope._ops calls register() once it has loaded the library; torch imports this module when
a fake tensor reaches an operator before anything imported circlerope, which imports the package
first, and so _ops.

Output shapes depend only on input shapes: rope_index gives float32 [3, batch, seq_len] and
[batch, 1], rotary_table float32 [batch, seq_len, rotary_dim], rotary_apply tensors shaped and
strided like q and k. The value checks stay in C++ and run when the operator runs.
"""

import torch

from . import _core

_REGISTERED = False


def _rope_index_fake(input_ids, *arguments, **named_arguments):
    # The other arguments (grids, mask, scheme, the Circle-RoPE options of the core's
    # declaration, the vision constants) do not change the shapes.
    torch._check(input_ids.dim() == 2, lambda: f"input_ids must have 2 dimensions, got {input_ids.dim()}")
    batch, seq_len = input_ids.shape
    positions = input_ids.new_empty((3, batch, seq_len), dtype=torch.float32)
    deltas = input_ids.new_empty((batch, 1), dtype=torch.float32)
    return positions, deltas


def _rotary_table_fake(position_ids, rotary_dim, sections, theta, layout):
    # The settings are constants of the graph: checked here, at trace time, by the core's
    # grammar, as the kernel checks them when it runs. (The op's argument `layout` is the
    # frequency layout, RotaryConfig.frequency_layout.)
    _core.rotary_config({"sections": tuple(sections), "theta": theta, "layout": layout, "rotary_dim": rotary_dim})
    torch._check(position_ids.dim() == 3, lambda: "position_ids must have shape [3, batch, seq_len]")
    return position_ids.new_empty((position_ids.shape[1], position_ids.shape[2], rotary_dim),
                                  dtype=torch.float32)


def _rotary_apply_fake(q, k, table, pairing, qk_layout, backward):
    # empty_like: the CPU and CUDA kernels keep a dense input's strides too
    return torch.empty_like(q), torch.empty_like(k)


def _rotary_apply_inplace_fake(q, k, table, pairing, qk_layout, backward):
    return None


def register() -> None:
    """Registers the fake kernels, once per process."""
    global _REGISTERED
    if _REGISTERED:
        return
    library = torch.library
    library.register_fake("circlerope::rope_index")(_rope_index_fake)
    library.register_fake("circlerope::rotary_table")(_rotary_table_fake)
    library.register_fake("circlerope::rotary_apply")(_rotary_apply_fake)
    library.register_fake("circlerope::rotary_apply_")(_rotary_apply_inplace_fake)
    _REGISTERED = True
