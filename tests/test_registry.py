"""The shared registry type: registration, decorator forms, built-in loading and the unknown-name error."""

from __future__ import annotations

import sys
import types

import pytest

from pgra.core.errors import InputError
from pgra.core.registry import Registry


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


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "x.y", "²", "café", "9lives", " pad", "a-b"])
def test_a_name_that_is_not_an_identifier_is_refused_naming_the_part(name):
    """A name becomes a folder, a config field and a flag: only an identifier is registered (H8)."""
    reg: Registry[type] = Registry("widget")
    with pytest.raises(InputError, match="test_registry:_Part registers the widget") as err:
        reg.register(_Part, name=name)
    assert repr(name) in str(err.value) and not reg
    hyphens: Registry[type] = Registry("encoder split", hyphens=True)  # a model type such as xlm-roberta
    assert hyphens.register(_Part, name="xlm-roberta") is _Part
    with pytest.raises(InputError, match="registers the encoder split '../x'"):
        hyphens.register(_Part, name="../x")


def test_a_plug_in_cannot_take_a_built_in_part_s_name_whichever_registers_first():
    """A plug-in's part under a built-in's name is one InputError naming the plug-in's file and class (the built-in
    stays); a plug-in replaces a plug-in, a built-in a built-in, as before."""
    from pgra.methods import METHODS, register_method
    from pgra.methods.knn_vote import KnnVote

    class Mine(KnnVote):
        pass

    with pytest.raises(InputError, match=r"test_registry:.*Mine registers the method 'knn_vote', the name of "
                                         r"pgra's own \(pgra.methods.knn_vote:KnnVote\)"):
        register_method(Mine)
    assert METHODS["knn_vote"] is KnnVote

    reg: Registry[type] = Registry("widget")
    builtin = type("Builtin", (), {"name": "alpha", "__module__": "pgra.widgets"})
    reg.register(_Part)  # the plug-in's first (a built-in module imported later, on the first lookup)
    with pytest.raises(InputError, match="test_registry:_Part registers the widget 'alpha'"):
        reg.register(builtin)
    assert reg["alpha"] is _Part
    assert Registry("widget").register(builtin) is builtin


def test_a_name_another_part_holds_is_refused_and_the_same_part_again_replaces_it():
    """Two parts defined apart never share a name (plug-in and plug-in, built-in and built-in): the second is one
    InputError naming both, the first stays; the same part registered again (its module imported again, a class
    made again by the same code) replaces it."""
    reg: Registry[type] = Registry("widget")
    reg.register(_Part)
    other = type("Other", (), {"name": "alpha", "__module__": "elsewhere"})
    with pytest.raises(InputError, match="elsewhere:Other registers the widget 'alpha', the name of "
                                         "test_registry:_Part"):
        reg.register(other)
    assert reg["alpha"] is _Part
    again = type("_Part", (), {"name": "alpha", "__module__": _Part.__module__})
    assert reg.register(again) is again and reg["alpha"] is again
    builtins: Registry[type] = Registry("widget")
    builtins.register(type("One", (), {"name": "alpha", "__module__": "pgra.one"}))
    with pytest.raises(InputError, match="pgra.two:Two registers the widget 'alpha', the name of pgra.one:One"):
        builtins.register(type("Two", (), {"name": "alpha", "__module__": "pgra.two"}))


def _registries():
    from pgra.analysis.base import ANALYSES
    from pgra.methods import METHODS
    from pgra.reader.split import SPLITS
    from pgra.rerank.base import RERANKERS
    from pgra.retrieval.base import RETRIEVERS
    from pgra.selection.base import STRATEGIES
    from pgra.stages import STAGES

    return [ANALYSES, METHODS, SPLITS, RERANKERS, RETRIEVERS, STAGES, STRATEGIES]


def test_a_part_of_the_wrong_type_is_refused_by_every_family():
    """A class that is not the family's interface (a reranker offered as a retriever, a bare class), or an object
    that is not one of its parts, is one InputError naming the part and the interface; nothing is registered."""
    for registry in _registries():
        wrong = type("Wrong", (), {"name": "toy_wrong", "family": "toy_wrong", "__module__": "elsewhere"})
        for part in (wrong, wrong()):
            with pytest.raises(InputError, match=f"elsewhere:Wrong registers the {registry.kind} 'toy_wrong', "
                                                 f"which is not (a|a subclass of) {registry.base.__module__}"):
                registry.register(part)
        assert "toy_wrong" not in registry
    reg: Registry[type] = Registry("widget", base=int)
    assert reg.register(bool, name="flag") is bool  # a subclass is one
    with pytest.raises(InputError, match="which is not a subclass of builtins.int"):
        reg.register(True, name="instance")  # an instance where classes belong: it would fail only when called
    counts: Registry[int] = Registry("count", base=int, instances=True)
    assert counts.register(3, name="three") == 3
    with pytest.raises(InputError, match="which is not a builtins.int"):
        counts.register(bool, name="a_class")  # a class where instances belong
    assert "instance" not in reg and "a_class" not in counts


def test_a_plug_in_s_own_method_may_replace_the_one_pgra_made_from_its_reranker():
    """``fid_<r>``, which pgra makes for a plug-in reranker once a method is looked up, is the plug-in's: the plug-in
    registering its own ``fid_<r>`` later replaces it (``fid_mmr``, made from a built-in, stays refused)."""
    from pgra.methods import METHODS, register_method
    from pgra.methods.fid_reranked import fid_method
    from pgra.rerank.base import RERANKERS, Reranker, register_reranker

    class Toy(Reranker):
        name = "toy_reg_reranker"

    register_reranker(Toy)
    try:
        assert "fid_toy_reg_reranker" in METHODS.names()
        own = type("Own", (fid_method("toy_reg_reranker"),), {"__module__": "elsewhere"})
        assert register_method(own) is own
        with pytest.raises(InputError, match="registers the method 'fid_mmr', the name of pgra's own"):
            register_method(type("Mine", (fid_method("mmr"),), {"__module__": "elsewhere"}))
    finally:
        RERANKERS.pop("toy_reg_reranker")
        METHODS.pop("fid_toy_reg_reranker")
