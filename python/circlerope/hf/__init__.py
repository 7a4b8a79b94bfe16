"""circlerope.hf: drop-in pieces for Hugging Face transformers' Qwen2-VL / Qwen2.5-VL / Qwen3-VL
models, and the families following their get_rope_index rules (circlerope.hf.families).

A whole model: apply(model, scheme | age=...) switches a loaded model to a geometry (every layer,
generate(), packing with pack(), save/load with from_pretrained), restore(model) undoes it,
geometry(model) says what it was switched to. With rotation="fused" its text attention rotates
q and k with circlerope's fused operator, from one circlerope.rotary_table per geometry and
forward.

Only get_rope_index, for a model's code that calls it (only the geometry changes; its
transformers version's M-RoPE conventions stay):

    import circlerope.hf
    model.model.get_rope_index = circlerope.hf.rope_index_fn(model.config, scheme="circle")
    # transformers 4.49-4.51 keep the method on the outer model: model.get_rope_index = ...

rope_index_fn returns a function with the exact signature and dtypes of the installed (or chosen)
transformers version's get_rope_index. Under scheme="mrope" it returns exactly what that
version returns (int64 positions and deltas), so a patched model computes the same logits.

The rotation in Hugging Face's terms: rotary_cos_sin gives the (cos, sin) of a model's rotary
embedding, bit for bit, and apply_multimodal_rotary_pos_emb takes them like transformers'
function of that name. circlerope.hf.reference holds transformers' formulas themselves.

The checkpoints of the authors' own code: from_official_config / to_official_config read and
write their config's circle_rope dict (circlerope.hf.official documents its quirks).

The modules, each depending only on those before it (and on circlerope's own):
    reference   transformers' rotary formulas in plain PyTorch
    families    the model families switched (whose get_rope_index follows Qwen2-VL's, Qwen2.5-VL's
                or Qwen3-VL's rule) and those refused, with why
    compat      compat modes and transformers releases, their configs, rope_index_fn
    rotation    rotary_cos_sin, apply_multimodal_rotary_pos_emb
    official    the authors' circle_rope config
    registry    the model types of saved switched models, registered with transformers
    model       apply, restore, geometry, pack, from_pretrained

Errors follow circlerope's rule: TypeError for an argument of a type the parameter does not take,
ValueError for a value it cannot use, naming the argument and its value in one short line.
"""

from ..positions import COMPAT_MODES
from .compat import compat_for_version, installed_compat, rope_index_fn, rotary_config
from .model import CONFIG_KEY, apply, from_pretrained, geometry, pack, restore
from .official import from_official_config, to_official_config
from .rotation import apply_multimodal_rotary_pos_emb, rotary_cos_sin
from . import registry as _registry
from .families import FAMILIES as _FAMILIES

# Checkpoints saved from switched models have their own model types ("qwen2_5_vl_circlerope"):
# registered with transformers' Auto classes here (circlerope.hf.registry), where transformers is.
_registry.register(apply, tuple(_FAMILIES))

__all__ = ["COMPAT_MODES", "compat_for_version", "installed_compat", "rope_index_fn", "rotary_config",
           "rotary_cos_sin", "apply_multimodal_rotary_pos_emb", "apply", "restore", "geometry", "pack",
           "from_pretrained", "CONFIG_KEY", "from_official_config", "to_official_config"]
