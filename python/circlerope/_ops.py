"""The operator library: torch.ops.circlerope, loaded from the package's directory, with the fake
kernels of its operators registered (circlerope._registration); whether it has CUDA kernels;
and the CPU path its kernels run. The operators' schemas, device kernels and the autograd
formula of rotary_apply are C++ (torch/ops.cpp, torch/ops_cuda.cpp, torch/autograd.cpp).
"""

from __future__ import annotations

import glob
import os
from typing import NamedTuple

import torch

from . import _core, _registration


class CpuPath(NamedTuple):
    """The CPU code path of this process (circlerope/cpu_path.h): name is portable, avx2,
    avx512 or avx512bf16; reason says why, e.g. "forced by CIRCLEROPE_ISA=avx2"."""
    name: str
    reason: str


def cpu_path() -> CpuPath:
    """The CPU code path the rotation and the positions run in this process, and why. The
    environment variable CIRCLEROPE_ISA (portable, avx2, avx512, avx512bf16), read once per
    process, forces one; a value that is no path, or one this CPU lacks, makes ``import
    circlerope`` raise ValueError naming the value and the reason."""
    return CpuPath(*_core.cpu_path())


cpu_path()  # an unusable CIRCLEROPE_ISA is a ValueError here, at import, not at first use


def _load() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libcirclerope_torch*.so")))
    if not found:
        raise ImportError(f"circlerope: the operator library libcirclerope_torch.so is not in {here}; "
                          "build the project with libtorch found (CIRCLEROPE_BUILD_TORCH)")
    torch.ops.load_library(found[0])


_load()
ops = torch.ops.circlerope


_registration.register()  # the fake kernels, for the operators just loaded


# -------------------------------------------------------------------- CUDA ---

def _operators_have_cuda() -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("circlerope::rotary_apply", "CUDA"))
    except (AttributeError, RuntimeError):  # a torch without the query: no way to tell, so no
        return False


CUDA_KERNELS = _operators_have_cuda()


def has_cuda_kernels() -> bool:
    """Whether the operator library was built with the CUDA kernels (CIRCLEROPE_CUDA against a
    CUDA libtorch): then rotary_table and the rotation take CUDA tensors too. Says nothing
    about whether a GPU is present (torch.cuda.is_available())."""
    return CUDA_KERNELS


def fused_device(t: torch.Tensor) -> bool:
    """Whether the fused operators take tensors on t's device."""
    return t.device.type == "cpu" or (t.device.type == "cuda" and CUDA_KERNELS)
