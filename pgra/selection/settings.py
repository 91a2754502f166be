"""The ``demos`` section of a stage that selects demonstrations, made from the registered strategies' options."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from ..core.registry import HandedOver

_made: dict[tuple[type, ...], type] = {}
# the registry the section is built from, handed over by .base when imported (.base imports this module)
_registry: HandedOver[Any] = HandedOver("demonstration strategies", "pgra.selection")
use_strategies = _registry.hand_over


def _same(a: dataclasses.Field, b: dataclasses.Field, ta: Any, tb: Any) -> bool:
    return ta == tb and a.default == b.default and a.default_factory == b.default_factory


def _build(options: tuple[tuple[str, type], ...]) -> type:
    seen: dict[str, tuple[str, dataclasses.Field, Any]] = {}
    for strategy, cls in options:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in seen:
                owner, first, tp = seen[f.name]
                if not _same(first, f, tp, hints[f.name]):
                    raise ValueError(f"demonstration strategies {owner} and {strategy} both declare the option "
                                     f"'{f.name}', differently: one option of the demos section, declared alike "
                                     "(or give one another name)")
                continue
            seen[f.name] = (strategy, f, hints[f.name])
    ordered = sorted(seen.items(), key=lambda item: bool(item[1][1].metadata.get("cosmetic")))  # stable
    fields = []
    for name, (_, f, tp) in ordered:
        kwargs: dict[str, Any] = {"metadata": f.metadata}
        if f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        else:
            kwargs["default"] = f.default
        fields.append((name, tp, dataclasses.field(**kwargs)))
    made = dataclasses.make_dataclass("DemoSettings", fields, bases=(SelectorSettings,))
    made.__module__ = __name__
    made.__doc__ = "The options of the registered demonstration strategies (the ``demos`` section)."
    return made


def selector_settings() -> type:
    """The dataclass of the ``demos`` section for the strategies registered now (built-in ones loaded first)."""
    options: dict[type, str] = {}
    for name, strategy in _registry().items():
        if strategy.options is not None:
            options.setdefault(strategy.options, name)
    key = tuple(options)
    if key not in _made:
        _made[key] = _build(tuple((name, cls) for cls, name in options.items()))
    return _made[key]


class _Section(type):
    """``SelectorSettings(...)`` builds the section of the strategies registered now."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is SelectorSettings:
            return selector_settings()(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class SelectorSettings(metaclass=_Section):
    """The ``demos`` section: ``SelectorSettings(encoder=..., metric=...)`` is an instance of the dataclass made
    from the registered strategies' options (:func:`selector_settings`); every instance is a SelectorSettings."""

    @classmethod
    def __section__(cls) -> type:
        return selector_settings()

    @classmethod
    def __section_parts__(cls) -> tuple[type, ...]:
        """The option classes the section is made from (the registered strategies' ``options``)."""
        return tuple(dict.fromkeys(s.options for s in _registry().values() if s.options is not None))


def __getattr__(name: str) -> type:
    if name == "DemoSettings":  # the made class, by the name it carries (copies, pickles)
        return selector_settings()
    raise AttributeError(name)


__all__ = ["SelectorSettings", "selector_settings"]
