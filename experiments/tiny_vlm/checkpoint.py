"""A run's checkpoint folder read back: run.json (the run's configuration and what it recorded on
each split) and model.pt (its weights), as train.save_checkpoint writes them.

Both are untrusted input, checked before any work (files.py reads them):
- run.json: every key of the configuration is known and present (the arm's frequency layout
  may be spelt `layout`, as the run.json files under docs/experiment/ do), of its JSON type, and
  in its range in limits.py, with the rules between values the command line applies
  (check_run, which plan.resolve also runs on every preset's configuration); what the run
  recorded is checked likewise;
- model.pt: torch.load(weights_only=True) of at most twice the bytes run.json's model takes
  (plus 1 MiB), then exactly the model's keys, shapes and dtypes, and finite values.
Anything else is refused with one line naming the file and the key (limits.InputError).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Tuple

from . import data, limits
from .arms import Arm, check_scale
from .files import expect_keys, load_tensors, read_json
from .limits import InputError, check_int, check_name, check_number, check_pair, shown
from .model import ATTENTION, ModelConfig
from .train import RunConfig, build_model

MAX_RUN_JSON = 1 << 20          # bytes; a run's run.json is ~8 kB
MAX_SPLITS = 256                # evaluated splits of one run (full: 10)
FREQUENCY_LAYOUTS = ("chunked", "interleaved")
# Keys a run.json may lack, at their defaults: those of settings added after runs were kept
# (docs/experiment/full/checkpoints/ predate them).
LATER_ARM_KEYS = ("scale", "patch_positions")
LATER_LAYOUT_KEYS = ("gap_range",)

def _fields(cls) -> Tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _list(where: str, value, n=None) -> tuple:
    if not isinstance(value, (list, tuple)) or (n is not None and len(value) != n):
        raise InputError(f"{where} must be a list{f' of {n}' if n is not None else ''}, got {shown(value)}")
    return tuple(value)


def _bool(where: str, value) -> bool:
    if type(value) is not bool:
        raise InputError(f"{where} must be true or false, got {shown(value)}")
    return value


# ------------------------------------------------------------ the configuration ---
def check_layout(layout, where: str) -> None:
    """A split's layout: every value in its range and the rules between them. where: how a
    message names the layout (its keys follow it after a dot)."""
    def at(key: str) -> str:
        return f"{where}.{key}"
    check_name(at("name"), layout.name)
    grids = _list(at("grids"), layout.grids)
    check_int(f"{at('grids')}: the number of grids", len(grids), "grids")
    for g in grids:
        h, w = _list(at("grids"), g, 2)
        check_int(f"{at('grids')}: a side in cells", h, "cells")
        check_int(f"{at('grids')}: a side in cells", w, "cells")
    filler = check_pair(at("filler"), layout.filler, "filler")
    questions = check_int(at("questions"), layout.questions, "questions")
    first = _bool(at("question_first"), layout.question_first)
    objects = check_pair(at("objects"), layout.objects, "objects")
    mix = _list(at("mix"), layout.mix, len(data.QUESTION_TYPES))
    for m in mix:
        check_number(at("mix"), m, "mix")
    limits.check_mix(at("mix"), mix)
    gap = check_int(at("gap"), layout.gap, "gap")
    if gap > filler[0]:
        raise InputError(f"{at('gap')} {gap}: more than the {filler[0]} filler tokens of {at('filler')}")
    gap_range = check_pair(at("gap_range"), layout.gap_range, "gap")
    if tuple(gap_range) != (0, 0):
        if gap:
            raise InputError(f"{at('gap_range')} {list(gap_range)}: a layout has a gap or a gap range, not both "
                             f"({at('gap')} {gap})")
        if gap_range[0] > filler[0]:
            raise InputError(f"{at('gap_range')} {list(gap_range)}: lo is more than the {filler[0]} filler tokens "
                             f"of {at('filler')}")
    if first and questions != 1:
        raise InputError(f"{at('questions')} {questions}: a question-first sequence holds one question")
    limits.check_objects(at("objects"), objects, grids, mix)
    limits.check_relation_grids(at("grids"), grids, mix)


def check_run(cfg: RunConfig, where: str) -> None:
    """A run's configuration (from a file, or built by plan.resolve): every value in its range in
    limits.py and the rules between values; InputError naming the key after `where` and a dot."""
    import circlerope

    def at(key: str) -> str:
        return f"{where}.{key}"
    arm = cfg.arm
    check_name(at("arm.name"), arm.name)
    if not isinstance(arm.plan, str):
        raise InputError(f"{at('arm.plan')} must be a string, got {shown(arm.plan)}")
    if not (isinstance(arm.radius, str) or type(arm.radius) in (int, float)):
        raise InputError(f"{at('arm.radius')} must be a number or auto / auto-k, got {shown(arm.radius)}")
    if type(arm.alpha) not in (int, float):
        raise InputError(f"{at('arm.alpha')} must be a number, got {shown(arm.alpha)}")
    if arm.frequency_layout not in FREQUENCY_LAYOUTS:
        raise InputError(f"{at('arm.frequency_layout')} must be chunked or interleaved, got {shown(arm.frequency_layout)}")
    _bool(at("arm.patch_positions"), arm.patch_positions)
    m = cfg.model
    layers = check_int(at("model.layers"), m.layers, "layers")
    width = check_int(at("model.width"), m.width, "width")
    heads = check_int(at("model.heads"), m.heads, "heads")
    check_int(at("model.mlp"), m.mlp, "mlp")
    theta = check_number(at("model.theta"), m.theta, "theta")
    sections = _list(at("model.sections"), m.sections, 3)
    for s in sections:
        check_int(at("model.sections"), s, "sections")
    check_int(at("model.merge"), m.merge, "merge")
    limits.check_model(lambda key: at(f"model.{key}"), width, heads, sections)
    for key, make in (("arm.plan", lambda: circlerope.AgePlan(arm.plan, layers)),
                      ("arm", lambda: circlerope.CircleConfig(radius=arm.radius, alpha=arm.alpha)),
                      ("model", lambda: circlerope.RotaryConfig(sections=tuple(sections), theta=theta,
                                                                frequency_layout=arm.frequency_layout))):
        try:
            make()
        except (TypeError, ValueError, OverflowError) as e:   # the library's own checks, one line
            raise InputError(f"{at(key)}: {limits.one_line(e)}") from None
    try:
        check_scale(arm, layers)
    except ValueError as e:
        raise InputError(f"{at('arm.scale')}: {limits.one_line(e)}") from None
    check_int(at("seed"), cfg.seed, "seed")
    check_int(at("steps"), cfg.steps, "steps")
    batch = check_int(at("batch"), cfg.batch, "batch")
    check_number(at("lr"), cfg.lr, "lr")
    check_int(at("warmup"), cfg.warmup, "warmup")
    check_number(at("weight_decay"), cfg.weight_decay, "weight-decay")
    check_int(at("curriculum"), cfg.curriculum, "curriculum")
    check_int(at("curve_every"), cfg.curve_every, "curve-every")
    check_int(at("curve_seqs"), cfg.curve_seqs, "sequences")
    eval_seqs = check_int(at("eval_seqs"), cfg.eval_seqs, "sequences")
    check_int(at("eval_seed"), cfg.eval_seed, "seed")
    check_int(at("probe_seqs"), cfg.probe_seqs, "probe-seqs")
    if not isinstance(cfg.attention, str) or cfg.attention not in ATTENTION:
        raise InputError(f"{at('attention')} must be one of {', '.join(ATTENTION)}, got {shown(cfg.attention)}")
    check_layout(cfg.train, at("train"))
    limits.check_split_size(at("curve_seqs"), cfg.train, cfg.curve_seqs)
    limits.check_batch_size(at("batch"), cfg.train, batch)
    if not isinstance(cfg.evals, dict) or not 0 < len(cfg.evals) <= MAX_SPLITS or "train" not in cfg.evals:
        raise InputError(f"{at('evals')} must map 1 to {MAX_SPLITS} split names, 'train' among them, to layouts")
    for name, layout in cfg.evals.items():
        check_layout(layout, at(f"evals.{name}"))
        if layout.name != name:
            raise InputError(f"{at(f'evals.{name}.name')} {shown(layout.name)} is not the split's name {shown(name)}")
        seqs = eval_seqs * (cfg.train.questions if layout.question_first else 1)
        limits.check_split_size(at(f"evals.{name}"), layout, seqs)
    probe = _list(at("probe"), cfg.probe)
    if probe and (len(probe) != 2 or any(not isinstance(p, str) or p not in cfg.evals for p in probe)):
        raise InputError(f"{at('probe')} must be [] or two of the run's splits, got {shown(list(probe))}")


def config_from_json(d, where: str) -> RunConfig:
    """run.json's "config" as a RunConfig, every key checked (check_run). where: how a message
    names it."""
    def at(key: str) -> str:
        return f"{where}.{key}"
    d = expect_keys(where, d, _fields(RunConfig))
    arm = expect_keys(at("arm"), d["arm"], [f for f in _fields(Arm) if f not in LATER_ARM_KEYS], LATER_ARM_KEYS,
                      aliases={"layout": "frequency_layout"})
    model = expect_keys(at("model"), d["model"], _fields(ModelConfig))
    model["sections"] = _list(at("model.sections"), model["sections"])

    def layout(name: str, x) -> data.Layout:
        x = expect_keys(at(name), x, [f for f in _fields(data.Layout) if f not in LATER_LAYOUT_KEYS],
                        LATER_LAYOUT_KEYS)
        for key in ("filler", "objects", "mix") + tuple(k for k in LATER_LAYOUT_KEYS if k in x):
            x[key] = _list(at(f"{name}.{key}"), x[key])
        x["grids"] = tuple(_list(at(f"{name}.grids"), g) for g in _list(at(f"{name}.grids"), x["grids"]))
        return data.Layout(**x)
    d["arm"] = Arm(**arm)
    d["model"] = ModelConfig(**model)
    d["train"] = layout("train", d["train"])
    if not isinstance(d["evals"], dict) or len(d["evals"]) > MAX_SPLITS:
        raise InputError(f"{at('evals')} must map at most {MAX_SPLITS} split names to layouts")
    d["evals"] = {k: layout(f"evals.{k}", v) for k, v in d["evals"].items()}
    d["probe"] = _list(at("probe"), d["probe"])
    cfg = RunConfig(**d)
    check_run(cfg, where)
    return cfg


def check_recorded(result, cfg: RunConfig, where: str) -> dict:
    """run.json's "result": what the run measured on each split."""
    def at(key: str) -> str:
        return f"{where}.{key}"
    result = expect_keys(where, result, ("arm", "seed", "steps", "interrupted", "splits"))
    check_name(at("arm"), result["arm"])
    check_int(at("seed"), result["seed"], "seed")
    check_int(at("steps"), result["steps"], "steps", cfg.steps)
    _bool(at("interrupted"), result["interrupted"])
    splits = result["splits"]
    if not isinstance(splits, dict):
        raise InputError(f"{at('splits')} must be an object, got {shown(splits)}")
    for name, s in splits.items():
        if name not in cfg.evals:
            raise InputError(f"{at('splits')}: {shown(name)} is not a split of the run")
        s = expect_keys(at(f"splits.{name}"), s, ("accuracy", "majority_baseline", "questions"))
        for key in ("accuracy", "majority_baseline", "questions"):
            values = expect_keys(at(f"splits.{name}.{key}"), s[key], (), data.QUESTION_TYPES)
            for kind, v in values.items():
                ok = (type(v) is int and 0 <= v < 2**31) if key == "questions" else \
                    (type(v) in (int, float) and 0 <= v <= 1)
                if not ok:
                    raise InputError(f"{at(f'splits.{name}.{key}.{kind}')} must be "
                                     + ("a count" if key == "questions" else "a number in [0, 1]")
                                     + f", got {shown(v)}")
    return result


def read_run(folder: str):
    """(RunConfig, what the run recorded) of FOLDER/run.json; InputError naming the file."""
    path = os.path.join(folder, "run.json")
    doc = read_json(path, MAX_RUN_JSON, "a run's run.json")
    doc = expect_keys(path, doc, ("config", "result"))
    cfg = config_from_json(doc["config"], f"{path}: config")
    return cfg, check_recorded(doc["result"], cfg, f"{path}: result")


def load_weights(folder: str, cfg: RunConfig):
    """The model run.json describes with FOLDER/model.pt's weights; InputError naming the file."""
    import torch
    path = os.path.join(folder, "model.pt")
    model = build_model(cfg)
    expected = model.state_dict()
    limit = 2 * sum(t.numel() * t.element_size() for t in expected.values()) + (1 << 20)
    state = load_tensors(path, limit, "the weights of run.json's model")
    if not isinstance(state, dict):
        raise InputError(f"{path}: holds a {type(state).__name__}, not a model's weights (a state_dict)")
    missing = [k for k in expected if k not in state]
    unknown = [k for k in state if k not in expected]
    if missing or unknown:
        raise InputError(f"{path}: not the weights of run.json's model: "
                         + (f"no {shown(missing[0])}" if missing else f"unknown {shown(unknown[0])}")
                         + f" ({len(missing)} missing, {len(unknown)} unknown of {len(expected)})")
    for key, want in expected.items():
        got = state[key]
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype \
                or got.layout != torch.strided:
            what = f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else f"a {type(got).__name__}"
            raise InputError(f"{path}: {key} is {what}, run.json's model has {tuple(want.shape)} {want.dtype}")
        if not bool(torch.isfinite(got).all()):
            raise InputError(f"{path}: {key} holds NaN or infinite values")
    model.load_state_dict(state)
    return model.eval()


def load(folder: str):
    """(model, RunConfig, what the run recorded) of a checkpoint folder; InputError naming the file."""
    cfg, recorded = read_run(folder)
    return load_weights(folder, cfg), cfg, recorded
