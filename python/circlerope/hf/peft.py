"""circlerope.hf.peft: PEFT adapters of switched models.

apply(), restore() and geometry() take a PeftModel (get_peft_model's, or PeftModel.from_pretrained's)
as they take the model inside it: they switch its base model (peft_model.get_base_model()), whose
forward, generate and rotary the adapter's layers run through. Either order works: apply then
get_peft_model, or get_peft_model then apply.

An adapter is trained on one geometry; on another its logits differ, with no error. So:
- save_adapter(peft_model, path) saves it (peft_model.save_pretrained) and writes the geometry of
  the base model (what config.circlerope holds, or None for an unswitched base) into each
  adapter_config.json it wrote, as "circlerope";
- load_adapter(model, path) loads it onto `model` (PeftModel.from_pretrained) after checking that
  the adapter's geometry is the model's, refusing with both geometries otherwise (an adapter
  saved without a geometry record is taken as trained on whatever the model runs);
- PEFT itself, loading an adapter_config.json with "circlerope", warns that it ignores the key
  "circlerope" (its warning for keys it does not know): PeftModel.from_pretrained onto an
  unswitched base is not silent, but only circlerope's load_adapter refuses.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from .._checks import shown

CONFIG_NAME = "adapter_config.json"
KEY = "circlerope"


def is_peft_model(model) -> bool:
    """Whether `model` is a PEFT wrapper (PeftModel and its task classes)."""
    return callable(getattr(type(model), "get_base_model", None)) and hasattr(model, "peft_config")


def base_model(model):
    """The transformers model inside a PEFT wrapper; `model` itself otherwise."""
    return model.get_base_model() if is_peft_model(model) else model


def _saved_geometry(model) -> Optional[dict]:
    """What save_pretrained of `model` writes as config.circlerope (apply() sets it, and gives the
    config its circlerope class, which restore() takes back), as JSON reads it back; None for an
    unswitched model."""
    config = getattr(base_model(model), "config", None)
    if getattr(type(config), "circlerope_base_class", None) is None:
        return None
    return json.loads(json.dumps(getattr(config, KEY, None)))


def save_adapter(peft_model, path, **kwargs) -> None:
    """peft_model.save_pretrained(path, **kwargs), each adapter_config.json it wrote recording
    the base model's geometry as "circlerope" (None: an unswitched base)."""
    if not is_peft_model(peft_model):
        raise TypeError(f"save_adapter takes a PEFT model (get_peft_model's) (got {shown(peft_model)})")
    peft_model.save_pretrained(path, **kwargs)
    record = _saved_geometry(peft_model)
    for folder, _, files in os.walk(path):
        if CONFIG_NAME in files:
            name = os.path.join(folder, CONFIG_NAME)
            with open(name, encoding="utf-8") as f:
                config = json.load(f)
            config[KEY] = record
            with open(name, "w", encoding="utf-8") as f:
                json.dump(config, f, indent=2, sort_keys=True)


def adapter_geometry(path, subfolder: Optional[str] = None):
    """(recorded, geometry): whether the adapter at `path` records a geometry, and that geometry."""
    name = os.path.join(path, subfolder or "", CONFIG_NAME)
    if not os.path.isfile(name):
        raise ValueError(f"{shown(str(path))}: no {CONFIG_NAME} (circlerope.hf.peft reads local adapter folders)")
    with open(name, encoding="utf-8") as f:
        config = json.load(f)
    return KEY in config, config.get(KEY)


def _shown_geometry(saved: Optional[dict]) -> str:
    if saved is None:
        return "none (M-RoPE, unswitched)"
    what = saved.get("scheme") if saved.get("age") is None else f"AGE {saved.get('age')}"
    return f"{what} {json.dumps(saved, sort_keys=True)}"


def check_adapter(model, path, subfolder: Optional[str] = None) -> None:
    """Refuses (ValueError, both geometries named) an adapter recorded on another geometry than
    `model`'s."""
    recorded, saved = adapter_geometry(path, subfolder)
    if not recorded:
        return
    have = _saved_geometry(model)
    if saved != have:
        raise ValueError(f"the adapter at {shown(str(path))} was trained on the geometry {_shown_geometry(saved)}, "
                         f"but the model runs {_shown_geometry(have)}: load the base model on the adapter's "
                         "geometry (circlerope.hf.apply(model, ...) or a circlerope checkpoint) first")


def load_adapter(model, path, **kwargs):
    """peft.PeftModel.from_pretrained(model, path, **kwargs) once check_adapter passes."""
    check_adapter(model, path, kwargs.get("subfolder"))
    from peft import PeftModel  # noqa: PLC0415 (optional dependency)

    return PeftModel.from_pretrained(model, path, **kwargs)
