"""The options as declared once in the core (circlerope/options.h: kCircleOptions, kVisionOptions,
kRotaryOptions, read through _core.circle_options(), vision_options() and rotary_options())
against the Python package and the operators rope_index and rotary_table: the dataclasses'
fields and defaults, the op schemas' arguments (names and types), and every option's example
value carried through the package and the op to the same result as through _core.
tests/test_option_table.cpp checks the C API and the command line."""
import dataclasses
import inspect
import typing

import pytest
import torch

import circlerope
from circlerope import _core
from circlerope import config as config_module

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
    for key, _, doc, _ in OPTIONS:
        assert f"{key}: {doc}" in circlerope.CircleConfig.__doc__


@pytest.mark.parametrize("config", [circlerope.CircleConfig, circlerope.VisionConfig, circlerope.RotaryConfig])
def test_every_field_is_typed_and_its_default_fits_its_type(config):
    hints = typing.get_type_hints(config)
    for field in dataclasses.fields(config):
        assert hints[field.name] is not object, f"{config.__name__}.{field.name} has no type"
        assert config_module._fits(field.default, hints[field.name]), field.name
        assert f"{field.name}: " in config.__doc__, field.name


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


# ------------------------------------------------------------ vision options ---
# The vision options (kVisionOptions, through _core.vision_options()) against VisionConfig, whose
# fields are written out, and the op rope_index's vision arguments. VisionConfig holds every
# vision option but compat, which get_rope_index takes as an argument of its own (the behaviour
# of a call, not a constant of the model); the op takes it after the others.

VISION = _core.vision_options()  # (key, default, doc, example text)
CALL_ARGUMENTS = ("compat",)
SCHEMA_TYPES.update({int: "int", tuple: "List[int]"})


def typed_as(example: str, default):
    """An example in the grammar's text as a Python user gives the option: of its default's type."""
    if isinstance(default, bool):
        return example == "true"
    if isinstance(default, tuple):
        return tuple(int(x) for x in example.split(","))
    return type(default)(example)


def test_vision_config_fields_are_the_declaration():
    fields = [(f.name, f.default) for f in dataclasses.fields(circlerope.VisionConfig)]
    assert fields == [(key, default) for key, default, *_ in VISION if key not in CALL_ARGUMENTS]
    # get_rope_index(compat=None) is the declaration's default
    assert [default for key, default, *_ in VISION if key == "compat"] == ["none"]
    assert inspect.signature(circlerope.get_rope_index).parameters["compat"].default is None


def test_the_op_schema_takes_every_vision_option_by_name_and_type():
    arguments = torch.ops.circlerope.rope_index.default._schema.arguments
    first = [a.name for a in arguments].index("scheme") + 1 + len(OPTIONS)
    got = [(a.name, str(a.type)) for a in arguments[first:]]
    assert got == [(key, SCHEMA_TYPES[type(default)]) for key, default, *_ in VISION]
    assert arguments[-1].name == "compat" and arguments[-1].default_value == "none"


def vision_row(config: circlerope.VisionConfig):
    """A row with an image (1x8x8 patches) and a video (2x4x4 patches, 1.5 s per grid) under
    `config`: (input_ids, image grids, video grids, seconds per grid), and the same row as a
    token-free layout (its vision markers are text)."""
    m = config.spatial_merge_size
    ids = ([11, 12, config.vision_start_token_id] + [config.image_token_id] * (8 // m) ** 2 +
           [13, config.vision_start_token_id] + [config.video_token_id] * 2 * (4 // m) ** 2 + [14, 15])
    layout = f"text:3,image:{8 // m}x{8 // m},text:2,video:2x{4 // m}x{4 // m}@1.5,text:2"
    return (torch.tensor([ids]), torch.tensor([[1, 8, 8]]), torch.tensor([[2, 4, 4]]), torch.tensor([1.5])), layout


def positions_or_error(row):
    """The row's positions under the default config, or the message that refuses them."""
    try:
        return circlerope.get_rope_index(*row)[0]
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize("key,default,example", [(key, default, example) for key, default, _, example in VISION],
                         ids=[key for key, *_ in VISION])
def test_every_vision_option_reaches_the_op(key, default, example):
    value = typed_as(example, default)
    if key in CALL_ARGUMENTS:
        config, call = circlerope.VisionConfig(), {key: value}
    else:
        config, call = circlerope.VisionConfig(**{key: value}), {}
        # VisionConfig carries the value to its own place in the op's arguments, and nothing else
        expected = tuple(value if k == key else d for k, d, *_ in VISION if k not in CALL_ARGUMENTS)
        assert config._args() == expected, f"VisionConfig does not carry {key}"
    row, layout = vision_row(config)
    through_op = circlerope.get_rope_index(*row, vision=config, **call)[0]
    under_defaults = positions_or_error(row)  # the row made for the example, read under the defaults
    assert isinstance(under_defaults, str) or not torch.equal(through_op, under_defaults), \
        f"{key}={example} changes no position through the op"
    if not call:  # the token-free layout reads the same config through _core (it has no compat)
        through_core, _ = circlerope.layout_positions(layout, vision=config)
        assert torch.equal(through_op, through_core), f"the op reads {key} differently from the core"


# ------------------------------------------------------------ rotary options ---
# The rotary options (kRotaryOptions, through _core.rotary_options()) against RotaryConfig, whose
# fields are written out (with pairing, a setting of the rotation), and the op rotary_table's
# arguments.

ROTARY = _core.rotary_options()  # (key, default, doc, example text)
ROTARY_DEFAULTS = {key: default for key, default, *_ in ROTARY}
POSITIONS = torch.stack([torch.arange(12.0), 2 * torch.arange(12.0) + 1, torch.arange(12.0) / 2])[:, None, :]


def rotary_given(key: str, example: str) -> dict:
    """The option's example as RotaryConfig's argument. validate() checks rotary_dim against the
    sections (twice their sum), so rotary_dim's example comes with sections that fit it (as in
    tests/test_option_table.cpp); every other example is valid on the defaults."""
    given = {key: typed_as(example, ROTARY_DEFAULTS[key])}
    if key == "rotary_dim":
        half = given[key] // 2
        given["sections"] = (half - 2 * (half // 3), half // 3, half // 3)
    return given


def as_fields(given: dict) -> dict:
    """Options by key as RotaryConfig's keyword arguments."""
    return {ROTARY_FIELD[key]: value for key, value in given.items()}


# RotaryConfig's field of each rotary option: its key, but "frequency_layout" for "layout" (the
# op's argument: which position axis each frequency reads).
ROTARY_FIELD = {key: "frequency_layout" if key == "layout" else key for key in ROTARY_DEFAULTS}


def test_rotary_config_fields_are_the_declaration():
    fields = {f.name: f.default for f in dataclasses.fields(circlerope.RotaryConfig)}
    assert set(fields) == set(ROTARY_FIELD.values()) | {"pairing"}
    for key, default in ROTARY_DEFAULTS.items():
        if key == "rotary_dim":  # None: 2 * sum(sections), the declaration's default for the default sections
            assert fields[key] is None and circlerope.RotaryConfig().dim == default
        else:
            assert fields[ROTARY_FIELD[key]] == default, key


def test_the_rotary_table_op_takes_every_rotary_option_by_name_and_type():
    arguments = torch.ops.circlerope.rotary_table.default._schema.arguments
    assert arguments[0].name == "position_ids"
    got = {a.name: str(a.type) for a in arguments[1:]}
    assert got == {key: SCHEMA_TYPES[type(default)] for key, default in ROTARY_DEFAULTS.items()}


@pytest.mark.parametrize("key,example", [(key, example) for key, _, _, example in ROTARY],
                         ids=[key for key, *_ in ROTARY])
def test_every_rotary_option_reaches_the_op(key, example):
    given = rotary_given(key, example)
    config = circlerope.RotaryConfig(**as_fields(given))
    # RotaryConfig carries the values to their own places in the canonical tuple (table order)
    expected = dict(ROTARY_DEFAULTS, **given)
    if "rotary_dim" not in given:
        expected["rotary_dim"] = 2 * sum(expected["sections"])
    assert config._args() == tuple(expected[k] for k in ROTARY_DEFAULTS), f"RotaryConfig does not carry {key}"
    through_package = circlerope.rotary_table(POSITIONS, config)
    defaults = circlerope.rotary_table(POSITIONS)
    assert through_package.shape != defaults.shape or not torch.equal(through_package, defaults), \
        f"{key}={example} changes no angle through the op"
    # the op's arguments are named by the declaration's keys
    by_name = torch.ops.circlerope.rotary_table(POSITIONS, **dict(zip(ROTARY_DEFAULTS, config._args())))
    assert torch.equal(through_package, by_name), f"the package passes {key} to another argument of the op"
