"""One way to register a part: :class:`Registry`, a name -> part mapping shared by every family of parts
(retrievers, rerankers, demonstration selectors, methods, analyses).

A family declares its registry once, with the modules of its built-in parts (one file per part, which registers
itself when imported)::

    RERANKERS: Registry[type[Reranker]] = Registry("reranker", "pgra.rerank", ("prompt_guided", "mmr"))

    @RERANKERS.register
    class MMR(Reranker):
        name = "mmr"

A plug-in (a user's file, a test) registers the same way from outside ``pgra/``. The registry is a ``dict``, so
``name in REG``, ``REG[name]`` and ``list(REG)`` work as before; :meth:`Registry.names` loads the built-in parts
first (a config's choices), :meth:`Registry.part` names the field and the choices when a name is unknown.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from .errors import InputError

T = TypeVar("T")
P = TypeVar("P")


class Registry(dict[str, T]):
    """Parts of one kind by name.

    ``kind``: what a part is, in messages ("reranker"); ``package`` and ``builtin``: the modules of the built-in
    parts (``package.module``), imported by :meth:`load_builtin`; ``field``: the config field that names a part
    (for errors); ``name_of``: how a part gives its name (its ``name`` attribute by default).
    """

    def __init__(self, kind: str, package: str | None = None, builtin: Iterable[str] = (), field: str | None = None,
                 name_of: Callable[[Any], str] | None = None) -> None:
        super().__init__()
        self.kind, self.package, self.builtin = kind, package, tuple(builtin)
        self.field = field or kind
        self._name_of = name_of or (lambda part: getattr(part, "name", ""))
        self._loaded = False

    @overload
    def register(self, part: P) -> P: ...
    @overload
    def register(self, part: None = None, *, name: str) -> Callable[[P], P]: ...

    def register(self, part: Any = None, *, name: str | None = None) -> Any:
        """Add ``part`` under ``name`` (default: its own name), replacing one of the same name; returns it, so it
        works as a decorator (``@REG.register`` or ``@REG.register(name="x")``)."""
        if part is None:
            return lambda p: self.register(p, name=name)
        key = name or self._name_of(part)
        if not key:
            raise ValueError(f"{part!r} has no name to register as a {self.kind}")
        self[key] = part
        return part

    def load_builtin(self) -> None:
        """Import (so register) the built-in parts; once."""
        if self._loaded or not self.package:
            return
        for module in self.builtin:
            importlib.import_module(f"{self.package}.{module}")
        self._loaded = True

    def names(self) -> tuple[str, ...]:
        """The registered names, the built-in ones loaded first (and any registered since), in registry order."""
        self.load_builtin()
        return tuple(self)

    def part(self, name: str, field: str | None = None) -> T:
        """The part registered as ``name`` (built-in parts loaded first); an unknown name is an
        :class:`~pgra.errors.InputError` naming ``field`` (default: the registry's) and the choices."""
        self.load_builtin()
        if name in self:
            return self[name]
        raise InputError(f"unknown {self.kind} '{name}', use one of {', '.join(self) or '(none registered)'}",
                         field=field or self.field)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self)})"


__all__ = ["Registry"]
