"""circlerope.hf.registry: a checkpoint saved from a switched model names its geometry in its
model type, so that no loader runs it as M-RoPE without saying so.

What save_pretrained of a switched model writes (apply() gives the model's config a subclass of
its class, "<Base>SwitchedConfig", whose JSON says so; restore() gives the config its own class
back). The live config keeps its model_type: the model's code, PEFT's default target modules and
kernels that patch models by type read it.
- config.json's model_type is the base type with "_circlerope" appended ("qwen2_5_vl" becomes
  "qwen2_5_vl_circlerope"), and config.circlerope holds the geometry (apply() writes it);
- the text model's rope dict (rope_parameters, or rope_scaling before transformers 5.0) has
  rope_type (and "type", where the release writes one) "circlerope", the values it replaced kept
  under "circlerope_base" in the same dict.

How it loads:
- `import circlerope.hf` registers each "<base>_circlerope" type with AutoConfig, and, when the
  first such config is built, subclasses of the base type's model classes with every Auto class
  that maps the base type (AutoModel, AutoModelForImageTextToText, AutoModelForVision2Seq,
  AutoModelForMultimodalLM, ... as the release has them), and so with the pipelines, which load
  through the Auto classes. Each subclass (Qwen2_5_VLCircleRopeForConditionalGeneration, ...)
  switches every instance it builds to the geometry its config holds (apply(model)), from
  from_pretrained, from_config or its constructor. The config class puts the rope dict back as it
  was before transformers reads it;
- without circlerope imported, transformers does not know the model type, and AutoConfig,
  AutoModel* and pipelines refuse the checkpoint naming it ("qwen2_5_vl_circlerope");
- the base class itself (Qwen2_5_VLForConditionalGeneration.from_pretrained) warns that the
  checkpoint's type differs from its own, and its rotary embedding finds no rope type
  "circlerope" in transformers' table: it refuses to build (a KeyError 'circlerope' without
  circlerope imported; with it imported, a ValueError saying which class or function to load it
  with). circlerope.hf.from_pretrained(Qwen2_5_VLForConditionalGeneration, path) loads such a
  checkpoint through the subclass.
An engine that reads the rope dict and does not know the rope type "circlerope" cannot take it
for M-RoPE either (no serving engine is tested here).

Registration imports transformers' configuration modules of the registered types (not their
modeling modules) at `import circlerope.hf`; a release without a base type registers nothing for
it. apply() makes the circlerope config class of any other model it switches when it switches
one, so every switched model saves its circlerope type.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from typing import Optional

SUFFIX = "_circlerope"
ROPE_TYPE = "circlerope"
# The rope dict's own values that ROPE_TYPE replaced, kept beside it in the saved dict.
BASE_KEY = "circlerope_base"
_ROPE_DICTS = ("rope_parameters", "rope_scaling")
_BASES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

_CONFIGS: dict = {}   # base model_type -> its circlerope config class (a saved config's)
_SWITCHED: dict = {}  # base model_type -> the config class of a switched model
_MODELS: dict = {}    # base model class -> its circlerope subclass
_MODELS_DONE: set = set()  # base model types whose model classes are registered
_SWITCH = None        # circlerope.hf.apply, handed over by register() (model.py imports this module)


def base_type(model_type) -> Optional[str]:
    """The base model type of a circlerope type ("qwen2_5_vl_circlerope" -> "qwen2_5_vl"), None
    for any other."""
    if isinstance(model_type, str) and model_type.endswith(SUFFIX) and model_type[:-len(SUFFIX)] in _CONFIGS:
        return model_type[:-len(SUFFIX)]
    return None


# ---------------------------------------------------------------- rope dict ---

def _rope_dicts(config_dict: dict):
    """(holder, key) of each rope dict of a config's dict: its own and its text_config's, and
    inside one kept per layer type ({"full_attention": {...}, ...}) each layer type's."""
    for holder in (config_dict, config_dict.get("text_config")):
        if isinstance(holder, dict):
            for key in _ROPE_DICTS:
                rope = holder.get(key)
                if not isinstance(rope, dict):
                    continue
                nested = [k for k, v in rope.items() if isinstance(v, dict) and k != BASE_KEY]
                if nested and not ({"rope_type", "type"} & set(rope)):
                    rope = holder[key] = dict(rope)
                    for k in nested:
                        yield rope, k
                else:
                    yield holder, key


def _mark(config_dict: dict) -> None:
    """config_dict (to_dict's, changed in place): every rope dict's type "circlerope", its own
    kept under BASE_KEY."""
    for holder, key in _rope_dicts(config_dict):
        rope = dict(holder[key])
        if rope.get("rope_type") == ROPE_TYPE or rope.get("type") == ROPE_TYPE:
            continue
        kept = {name: rope[name] for name in ("rope_type", "type") if name in rope}
        rope[BASE_KEY] = kept
        rope["rope_type"] = ROPE_TYPE
        if "type" in rope:
            rope["type"] = ROPE_TYPE
        holder[key] = rope


def _unmarked(kwargs: dict) -> dict:
    """A config's keyword arguments with every rope dict as it was before _mark (copies; the
    caller's dicts stay as they are)."""
    kwargs = dict(kwargs)
    if isinstance(kwargs.get("text_config"), dict):
        kwargs["text_config"] = dict(kwargs["text_config"])
    for holder, key in list(_rope_dicts(kwargs)):
        rope = dict(holder[key])
        kept = rope.pop(BASE_KEY, None)
        if isinstance(kept, dict):
            for name in ("rope_type", "type"):
                if rope.get(name) == ROPE_TYPE:
                    del rope[name]
            rope.update(kept)
        holder[key] = rope
    return kwargs


def _refuse_plain_load(*args, **kwargs):
    """transformers' rope table entry for "circlerope": what a base class reaches when it builds
    a model from a circlerope checkpoint's config."""
    raise ValueError("this config was saved from a model switched by circlerope.hf (rope_type 'circlerope'): the "
                     "base class would run it as M-RoPE. Load it with transformers' Auto classes "
                     "(AutoModelForImageTextToText.from_pretrained) or circlerope.hf.from_pretrained(model_class, path), "
                     "after import circlerope.hf")


# ------------------------------------------------------------------ classes ---

def _with_base_config(model):
    """A context in which model.config has its base class (apply() checks the base type)."""
    config = model.config
    cls = type(config)
    base = getattr(cls, "circlerope_base_class", None)

    @contextlib.contextmanager
    def swapped():
        if base is None:
            yield
            return
        object.__setattr__(config, "__class__", base)
        try:
            yield
        except BaseException:
            object.__setattr__(config, "__class__", cls)
            raise

    return swapped()


def _switch_built(model) -> None:
    """apply(model) to the geometry its config holds, for a model a circlerope class just built
    (on whatever device transformers builds it: the positions apply() checks are made on the CPU)."""
    if _SWITCH is None:
        raise RuntimeError("circlerope.hf.registry: register(switch=circlerope.hf.apply) was not called")
    with _with_base_config(model), torch_cpu():
        _SWITCH(model)


def torch_cpu():
    """A context making new tensors on the CPU (transformers builds models under a meta device)."""
    import torch  # noqa: PLC0415

    return torch.device("cpu")


def _stem(base_config) -> str:
    name = base_config.__name__
    return name[:-len("Config")] if name.endswith("Config") else name


def _named(cls, name: str, doc: str):
    cls.__name__ = cls.__qualname__ = name
    cls.__module__ = __name__
    cls.__doc__ = doc
    setattr(sys.modules[__name__], name, cls)  # importable by name (pickle)
    return cls


def _make_config_class(base_config, base: str):
    """The class AutoConfig builds a saved circlerope config.json with (model_type
    "<base>_circlerope"): the rope dict put back as it was, the model classes registered."""

    class Config(base_config):
        model_type = base + SUFFIX
        circlerope_base_class = base_config

        def __init__(self, *args, **kwargs):
            _register_models(base)
            kwargs.pop("model_type", None)  # the class's (a saved config.json's would shadow it)
            super().__init__(*args, **_unmarked(kwargs))

    return _named(Config, _stem(base_config) + "CircleRopeConfig",
                  f"{base_config.__name__} of a saved circlerope checkpoint (model_type {base + SUFFIX!r}): "
                  "circlerope.hf.registry says what it saves and loads.")


_SERIALIZING = threading.local()  # ids of the switched configs being written as JSON


def _make_switched_class(base_config, base: str):
    """The class apply() gives a switched model's config: its own model_type (what the model's
    code, PEFT's target modules, kernels patching by type read), its JSON the circlerope type."""

    class Switched(base_config):
        circlerope_base_class = base_config

        def to_json_string(self, use_diff: bool = True) -> str:
            ids = getattr(_SERIALIZING, "ids", None)
            if ids is None:
                ids = _SERIALIZING.ids = set()
            ids.add(id(self))
            try:
                return super().to_json_string(use_diff)
            finally:
                ids.discard(id(self))

        def to_dict(self):
            out = super().to_dict()
            if id(self) in getattr(_SERIALIZING, "ids", ()) and getattr(self, "circlerope", None) is not None:
                out["model_type"] = base + SUFFIX
                _mark(out)
            return out

    return _named(Switched, _stem(base_config) + "SwitchedConfig",
                  f"{base_config.__name__} of a model switched by circlerope.hf: written as model_type "
                  f"{base + SUFFIX!r} (circlerope.hf.registry).")


def _make_model_class(base_model, circlerope_config):
    # Qwen2_5_VLForConditionalGeneration -> Qwen2_5_VLCircleRopeForConditionalGeneration,
    # Glm4vModel -> Glm4vCircleRopeModel
    found = re.match(r"(.*?)(For\w+|Model)$", base_model.__name__)
    name = found.group(1) + "CircleRope" + found.group(2) if found else base_model.__name__ + "CircleRope"

    class Model(base_model):
        config_class = circlerope_config

        def __init__(self, config, *args, **kwargs):
            super().__init__(config, *args, **kwargs)
            _switch_built(self)

        @classmethod
        def is_custom_code(cls) -> bool:
            # transformers' own modeling code: its weight conversions and initialisation apply
            return base_model.is_custom_code()

    Model.__name__ = Model.__qualname__ = name
    Model.__module__ = __name__
    Model.__doc__ = (f"{base_model.__name__} switched by circlerope.hf to the geometry its config saved "
                     "(circlerope.hf.registry).")
    setattr(sys.modules[__name__], name, Model)
    _copy_conversions(base_model.__name__, name)
    return Model


def _copy_conversions(base_key: str, key: str) -> None:
    """transformers 5 renames a checkpoint's weights by the model's class name or model type (its
    conversion mapping): the circlerope type and classes get the base's."""
    try:
        from transformers import conversion_mapping  # noqa: PLC0415 (transformers 5)
    except ImportError:
        return
    get = getattr(conversion_mapping, "get_checkpoint_conversion_mapping", None)
    put = getattr(conversion_mapping, "register_checkpoint_conversion_mapping", None)
    if get is None or put is None:
        return
    mapping = get(base_key)
    if mapping is not None:
        put(key, mapping, overwrite=True)


def _auto_classes():
    from transformers.models.auto import modeling_auto  # noqa: PLC0415

    for name in dir(modeling_auto):
        auto = getattr(modeling_auto, name)
        if name.startswith("AutoModel") and isinstance(auto, type) and getattr(auto, "_model_mapping", None) is not None:
            yield auto


def _register_models(base: str) -> None:
    """The circlerope subclasses of every model class an Auto class maps `base` to, registered
    with that Auto class (once per base type)."""
    if base in _MODELS_DONE:
        return
    _MODELS_DONE.add(base)
    config_class = _CONFIGS[base]
    base_config = config_class.circlerope_base_class
    for auto in _auto_classes():
        try:
            if base_config not in auto._model_mapping:
                continue
            target = auto._model_mapping[base_config]
        except Exception:  # noqa: BLE001 (a mapping whose module this release cannot import)
            continue
        # Only the classes built from the whole config (an Auto class may map it to a text-only
        # class of the text config: a causal LM of Qwen3.5).
        if isinstance(target, (list, tuple)) or not isinstance(target, type) \
                or getattr(target, "config_class", None) is not base_config:
            continue
        auto.register(config_class, model_class(target), exist_ok=True)


def model_class(base_model):
    """The circlerope subclass of a base model class (Qwen2_5_VLForConditionalGeneration ->
    Qwen2_5_VLCircleRopeForConditionalGeneration); itself for a circlerope class."""
    if getattr(base_model, "config_class", None) in _CONFIGS.values():
        return base_model
    if base_model not in _MODELS:
        base = getattr(getattr(base_model, "config_class", None), "model_type", None)
        if base not in _CONFIGS and isinstance(base, str) and base:
            config_class(base, base_model.config_class)
        if base not in _CONFIGS:
            raise ValueError(f"{base_model.__name__}: no circlerope model type is registered for its model type "
                             f"{base!r}")
        _MODELS[base_model] = _make_model_class(base_model, _CONFIGS[base])
    return _MODELS[base_model]


def config_class(base: str, base_config=None):
    """The circlerope config class of a base model type (a subclass of base_config, by default
    the class AutoConfig maps the type to), registered with AutoConfig on first use."""
    if base not in _CONFIGS:
        from transformers import AutoConfig  # noqa: PLC0415
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: PLC0415

        if base_config is None:
            base_config = CONFIG_MAPPING[base]
        cls = _make_config_class(base_config, base)
        AutoConfig.register(cls.model_type, cls, exist_ok=True)
        _copy_conversions(base, cls.model_type)
        _CONFIGS[base] = cls
    return _CONFIGS[base]


def register(switch, bases=None) -> list:
    """Register the circlerope type of each base model type in `bases` (default: qwen2_vl,
    qwen2_5_vl, qwen3_vl) this transformers release has, its model classes switching what they
    build with `switch` (circlerope.hf.apply); returns the types registered. Done by
    `import circlerope.hf`. (apply() registers the type of any other model it switches when it
    first switches one, so saving works for every type; loading in a new process needs it here.)"""
    global _SWITCH
    _SWITCH = switch
    bases = _BASES if bases is None else bases
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: PLC0415
        from transformers import modeling_rope_utils  # noqa: PLC0415
    except ImportError:
        return []
    done = []
    for base in bases:
        if base in CONFIG_MAPPING:
            done.append(config_class(base).model_type)
    table = getattr(modeling_rope_utils, "ROPE_INIT_FUNCTIONS", None)
    if isinstance(table, dict):
        table.setdefault(ROPE_TYPE, _refuse_plain_load)
    return done


def mark_config(switch_undo: list, config) -> None:
    """apply(): the switched model's config becomes its circlerope class (save_pretrained then
    writes the circlerope model type), undone by restore() through switch_undo."""
    base = getattr(type(config), "circlerope_base_class", type(config))
    model_type = getattr(base, "model_type", None)
    if not isinstance(model_type, str) or not model_type:
        return  # a config without a type of its own (no save_pretrained to mark)
    config_class(model_type, base)  # its checkpoints load by type from now on
    if model_type not in _SWITCHED:
        _SWITCHED[model_type] = _make_switched_class(base, model_type)
    cls = _SWITCHED[model_type]
    switch_undo.append((config, "__class__", True, type(config)))
    object.__setattr__(config, "__class__", cls)


def loading_class(model_class_, path, kwargs: dict):
    """The class circlerope.hf.from_pretrained loads `path` with: the circlerope subclass of
    model_class_ where the checkpoint's config.json has a circlerope model type, else
    model_class_."""
    try:
        from transformers import PretrainedConfig  # noqa: PLC0415
    except ImportError:
        return model_class_
    hub = {k: kwargs[k] for k in ("cache_dir", "force_download", "local_files_only", "token", "revision",
                                  "subfolder") if k in kwargs}
    try:
        config_dict, _ = PretrainedConfig.get_config_dict(path, **hub)
    except (OSError, ValueError):
        return model_class_  # model_class_.from_pretrained says what is wrong
    if base_type(config_dict.get("model_type")) is None:
        return model_class_
    return model_class(model_class_)
