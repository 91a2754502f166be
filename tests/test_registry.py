"""The shared registry type: registration, decorator forms, built-in loading and the unknown-name error."""

from __future__ import annotations

import sys
import types

import pytest

from pgra.errors import InputError
from pgra.registry import Registry


class _Part:
    name = "alpha"


def test_register_by_own_name_and_as_decorator_with_a_name():
    reg: Registry[type] = Registry("widget")
    assert reg.register(_Part) is _Part

    @reg.register(name="beta")
    class Other:
        pass

    assert list(reg) == ["alpha", "beta"] and reg["beta"] is Other
    assert reg.get("missing") is None  # dict semantics kept for callers that ask


def test_a_part_without_a_name_is_refused():
    with pytest.raises(ValueError, match="no name"):
        Registry("widget").register(object())


def test_builtins_are_loaded_once_before_names_and_lookups(monkeypatch):
    reg: Registry[type] = Registry("widget", "fakepkg_reg", ("one",), field="widgets.kind")
    calls = []
    pkg = types.ModuleType("fakepkg_reg")
    pkg.__path__ = []  # a package
    module = types.ModuleType("fakepkg_reg.one")
    monkeypatch.setitem(sys.modules, "fakepkg_reg", pkg)
    monkeypatch.setitem(sys.modules, "fakepkg_reg.one", module)
    import importlib

    real = importlib.import_module

    def counting(name, *a, **k):
        if name == "fakepkg_reg.one":
            calls.append(name)
            reg.register(_Part)
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", counting)
    assert reg.names() == ("alpha",)
    assert reg.part("alpha") is _Part
    assert calls == ["fakepkg_reg.one"]
    with pytest.raises(InputError, match="unknown widget 'nope', use one of alpha") as err:
        reg.part("nope")
    assert err.value.field == "widgets.kind"
