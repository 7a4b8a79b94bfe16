"""The Circle-RoPE options as declared once in the core (circlerope/options.h, kCircleOptions,
read through _core.circle_options()) against the Python package: CircleConfig's fields and
defaults. tests/test_option_table.cpp checks the C API and the command line."""
import dataclasses

import circlerope
from circlerope import _core

OPTIONS = _core.circle_options()  # (key, default, doc, example text)


def test_the_declaration_is_not_empty_and_names_each_option_once():
    keys = [key for key, *_ in OPTIONS]
    assert "radius" in keys and len(keys) == len(set(keys))


def test_circle_config_fields_are_the_declaration():
    fields = dataclasses.fields(circlerope.CircleConfig)
    assert [(f.name, f.default) for f in fields] == [(key, default) for key, default, *_ in OPTIONS]
    for key, *_ in OPTIONS:
        assert f"{key}:" in circlerope.CircleConfig.__doc__
