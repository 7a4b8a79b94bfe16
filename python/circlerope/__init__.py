"""circlerope: Circle-RoPE positions and fused rotary embeddings for PyTorch.

Drop-in pieces for a Qwen2-VL / Qwen2.5-VL style model (arXiv 2505.16416):

    import circlerope
    position_ids, rope_deltas = circlerope.get_rope_index(
        input_ids, image_grid_thw, attention_mask=attention_mask)      # scheme="circle"
    table = circlerope.rotary_table(position_ids, sections=(16, 24, 24), theta=1e6)
    q, k = circlerope.apply_rotary(q, k, table)                        # every layer, one table

AGE (a geometry per layer) with one angle table per distinct geometry:

    rope = circlerope.RotaryEmbedding(circlerope.AgePlan("alternate", 36))
    angles = rope(input_ids, image_grid_thw, attention_mask=attention_mask)
    q, k = angles.apply(layer_index, q, k)

Hugging Face transformers models: circlerope.hf.

The modules, each depending only on those before it:
    _checks     argument checks, the exception rule and the quoting of values in messages
    _ops        the operator library torch.ops.circlerope, its fake kernels, has_cuda_kernels,
                cpu_path
    config      CircleConfig, VisionConfig, RotaryConfig (fields from the core's declaration)
    positions   get_rope_index, decode_position_ids, layout_positions
    rotary      rotary_table, apply_rotary, check_cuda_positions
    age         AgePlan, RotaryEmbedding, RotaryAngles
    metrics     ptd, CouplingMetrics
    hf          circlerope.hf, on all of the above (imported on its own: import circlerope.hf)
(_core is the C++ core's Python module; _registration is the name the operator library gives
torch for the fake kernels.)

Errors: an argument whose Python type the parameter does not take raises TypeError (a str where
a number belongs, a list where a tensor belongs); an argument of the right type whose value
cannot be used raises ValueError (a radius of -1, an unknown scheme, a tensor of the wrong dtype,
shape or device). Both name the argument and its value in one short line; values are judged by
the core, in its words. Positions are computed on the CPU (and returned on input_ids' device).
Tables and rotation run on the CPU, and on CUDA tensors when the operator library was built with
the CUDA kernels against a CUDA libtorch (has_cuda_kernels()). CPU kernel threads follow
torch.get_num_threads(): set it with torch.set_num_threads().
"""

from . import _core
from ._ops import CpuPath, cpu_path, has_cuda_kernels
from .age import AgePlan, RotaryAngles, RotaryEmbedding
from .config import CircleConfig, RotaryConfig, VisionConfig
from .metrics import CouplingMetrics, ptd
from .positions import decode_position_ids, get_rope_index, layout_positions
from .rotary import apply_rotary, check_cuda_positions, rotary_table

__version__ = _core.__version__

__all__ = [
    "CircleConfig", "VisionConfig", "RotaryConfig", "AgePlan", "CouplingMetrics",
    "get_rope_index", "decode_position_ids", "layout_positions",
    "rotary_table", "apply_rotary", "check_cuda_positions",
    "RotaryEmbedding", "RotaryAngles", "ptd",
    "has_cuda_kernels", "CpuPath", "cpu_path",
]
