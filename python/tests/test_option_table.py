"""The Circle-RoPE options as declared once in the core (circlerope/options.h, kCircleOptions,
read through _core.circle_options()) against the Python package and the operator rope_index:
CircleConfig's fields and defaults, the op schema's circle arguments (names and types), and every
option's example value carried through the op to the same positions as through _core.
tests/test_option_table.cpp checks the C API and the command line."""
import dataclasses

import pytest
import torch

import circlerope
from circlerope import _core

OPTIONS = _core.circle_options()  # (key, default, doc, example text)
START, IMAGE, END = 151652, 151655, 151653
IDS = torch.tensor([[11, 12, START] + [IMAGE] * 16 + [END, 13, 14]])
GRID = torch.tensor([[1, 8, 8]])
LAYOUT = "text:3,image:4x4,text:3"  # the same row without tokens: its markers are text
SCHEMA_TYPES = {str: "str", float: "float", bool: "bool"}


def typed(example: str):
    """An example in the grammar's text as a Python user gives it: a bool, a number or a str."""
    if example in ("true", "false"):
        return example == "true"
    try:
        return float(example)
    except ValueError:
        return example


def test_the_declaration_is_not_empty_and_names_each_option_once():
    keys = [key for key, *_ in OPTIONS]
    assert "radius" in keys and len(keys) == len(set(keys))


def test_circle_config_fields_are_the_declaration():
    fields = dataclasses.fields(circlerope.CircleConfig)
    assert [(f.name, f.default) for f in fields] == [(key, default) for key, default, *_ in OPTIONS]
    for key, *_ in OPTIONS:
        assert f"{key}:" in circlerope.CircleConfig.__doc__


def test_the_op_schema_takes_every_option_by_name_and_type():
    arguments = torch.ops.circlerope.rope_index.default._schema.arguments
    first = [a.name for a in arguments].index("scheme") + 1
    got = [(a.name, str(a.type)) for a in arguments[first:first + len(OPTIONS)]]
    canonical = circlerope.CircleConfig()._args()
    assert len(canonical) == len(OPTIONS)
    assert got == [(key, SCHEMA_TYPES[type(value)]) for (key, *_), value in zip(OPTIONS, canonical)]


@pytest.mark.parametrize("key,example", [(key, example) for key, _, _, example in OPTIONS],
                         ids=[key for key, *_ in OPTIONS])
def test_every_option_reaches_the_op(key, example):
    changed = circlerope.CircleConfig(**{key: typed(example)})
    through_op, _ = circlerope.get_rope_index(IDS, GRID, circle=changed)
    defaults, _ = circlerope.get_rope_index(IDS, GRID)
    assert not torch.equal(through_op, defaults), f"{key}={example} moves no position through the op"
    through_core, _ = circlerope.layout_positions(LAYOUT, circle=changed)
    assert torch.equal(through_op, through_core)
