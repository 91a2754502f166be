"""One way to register a part: :class:`Registry`, a name -> part mapping shared by every family of parts.

A family declares it once with its built-in modules; a part (a plug-in too) registers with ``@REGISTRY.register``
under a name no other part holds, and a plug-in's module enters its keys (:func:`plug_in_key`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar, overload

from .errors import InputError, clip, shorten

T = TypeVar("T")
P = TypeVar("P")


def defined_in(part: Any) -> str:
    """The module that defines ``part`` (a class's or function's own; an instance's class's)."""
    return getattr(part, "__module__", None) or ""


def is_builtin(module: str) -> bool:
    """Whether ``module`` is pgra's own (its parts are the built-in ones)."""
    return module == "pgra" or module.startswith("pgra.")


def plug_in_key(part: Any, field: str = "plug_in") -> dict[str, str]:
    """What a plug-in part adds to the key of what it makes (its module under ``field``); nothing for a built-in."""
    module = defined_in(part)
    return {} if is_builtin(module) else {field: module}


class Registry(dict[str, T]):
    """Parts of one kind by name.

    ``kind``: what a part is, in messages; ``package`` / ``builtin``: the built-in parts' modules; ``field``: the
    config field naming a part; ``name_of`` / ``module_of``: a part's name and defining module; ``hyphens``: a name
    may hold ``-``; ``base``: what a part must be (a subclass, or an instance, of it).
    """

    def __init__(self, kind: str, package: str | None = None, builtin: Iterable[str] = (), field: str | None = None,
                 name_of: Callable[[Any], str] | None = None, module_of: Callable[[Any], str] = defined_in,
                 hyphens: bool = False, base: type | None = None, instances: bool = False) -> None:
        super().__init__()
        self.kind, self.package, self.builtin, self.base = kind, package, tuple(builtin), base
        self.instances = instances  # its parts are instances of ``base`` (the analyses), else subclasses
        self.field = field or kind
        self._name_of = name_of or (lambda part: getattr(part, "name", ""))
        self._module_of, self.hyphens = module_of, hyphens
        self._loaded = False

    @overload
    def register(self, part: P) -> P: ...
    @overload
    def register(self, part: None = None, *, name: str) -> Callable[[P], P]: ...

    def register(self, part: Any = None, *, name: str | None = None) -> Any:
        """Add ``part`` under ``name`` (default: its own); returns it, so it works as a decorator. Refuses a part that
        is not a ``base``, a bad name, and a name another part holds (the same part again replaces itself)."""
        if part is None:
            return lambda p: self.register(p, name=name)
        key = name or self._name_of(part)
        if not key:
            raise ValueError(f"{part!r} has no name to register as a {self.kind}")
        if not (isinstance(key, str) and key.isascii() and
                (key.replace("-", "_") if self.hyphens else key).isidentifier()):
            raise InputError(f"{self._where(part)} registers the {self.kind} {shorten(key)}: a {self.kind}'s name "
                             f"holds ASCII letters, digits{', -' if self.hyphens else ''} and _, not starting with a "
                             "digit")
        if self.base is not None and not _is_a(part, self.base, self.instances):
            raise InputError(f"{self._where(part, defined_in)} registers the {self.kind} '{key}', which is not "
                             f"{'a' if self.instances else 'a subclass of'} {self.base.__module__}."
                             f"{self.base.__qualname__}")
        held = self.get(key)
        if held is not None and held is not part:
            self._check_clash(key, held, part)
        self[key] = part
        return part

    def _check_clash(self, key: str, held: Any, part: Any) -> None:
        """Refuse ``part`` under ``key``, held by another part, unless the same or :meth:`replaceable`."""
        held_builtin = is_builtin(self._module_of(held))
        if held_builtin != is_builtin(self._module_of(part)):
            plug_in, builtin = (part, held) if held_builtin else (held, part)
            raise InputError(f"{self._where(plug_in)} registers the {self.kind} '{key}', the name of pgra's own "
                             f"({self._where(builtin)}): a plug-in's part takes a name of its own")
        if self._identity(held) != self._identity(part) and not self.replaceable(held):
            raise InputError(f"{self._where(part)} registers the {self.kind} '{key}', the name of "
                             f"{self._where(held)}: a part takes a name no other part holds")

    def replaceable(self, held: Any) -> bool:
        """Whether a part registered under ``held``'s name replaces it (none by default)."""
        return False

    def _identity(self, part: Any, module_of: Callable[[Any], str] | None = None) -> str:
        """``module:qualname``: the part's file and class (the same for the same part imported again)."""
        qualname = getattr(part, "__qualname__", None) or getattr(type(part), "__qualname__", "")
        return f"{(module_of or self._module_of)(part) or '?'}:{qualname}"

    def _where(self, part: Any, module_of: Callable[[Any], str] | None = None) -> str:
        """A part as messages name it: its :meth:`_identity`, clipped."""
        return clip(self._identity(part, module_of), 120)

    def import_builtin(self) -> None:
        """Import (so register) the built-in parts only: what a module may do at its own import, while a plug-in
        that imports it back would find it half loaded."""
        for module in self.builtin if self.package else ():  # a failing import raises again on the next lookup
            importlib.import_module(f"{self.package}.{module}")

    def load_builtin(self) -> None:
        """Import (so register) the built-in parts, then every installed plug-in (:func:`load_plugins`); once."""
        if self._loaded:
            return
        self.import_builtin()
        self._loaded = True
        load_plugins()

    def plug_ins(self) -> list[str]:
        """The registered parts defined outside pgra, as ``module:qualname``, for a child process to register again."""
        named = ((key, getattr(p, "__module__", ""), getattr(p, "__qualname__", "")) for key, p in self.items())
        return [f"{key}={m}:{q}" for key, m, q in named if m and q and not is_builtin(m) and "<" not in q]

    def register_parts(self, specs: Iterable[str]) -> None:
        """Register again the parts :meth:`plug_ins` listed (``name=module:qualname``), importing their modules."""
        for spec in specs:
            key, _, where = spec.partition("=")
            module, _, qualname = where.partition(":")
            try:
                part: Any = importlib.import_module(module)
                for attr in qualname.split("."):
                    part = getattr(part, attr)
            except (Exception, SystemExit) as e:  # a part of the launching script's __main__, a module that fails
                raise InputError(f"the {self.kind} '{key}' registered in the launching process ({where}) cannot be "
                                 f"found here: {type(e).__name__}: {clip(str(e), 600)}; define it in an importable module (or a "
                                 "pgra.plugins entry point)", field=self.field) from None
            if self.get(key) is not part:
                self.register(part, name=key)

    def names(self) -> tuple[str, ...]:
        """The registered names, the built-in ones loaded first (and any registered since), in registry order."""
        self.load_builtin()
        return tuple(self)

    def part(self, name: str, field: str | None = None) -> T:
        """The part registered as ``name``; an unknown name is an InputError naming ``field`` and the choices."""
        self.load_builtin()
        if name in self:
            return self[name]
        raise InputError(f"unknown {self.kind} '{name}', use one of {', '.join(self) or '(none registered)'}",
                         field=field or self.field)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self)})"


def _is_a(part: Any, base: type, instances: bool) -> bool:
    """Whether ``part`` is an instance (``instances``) or a subclass of ``base``, never the other way round."""
    if isinstance(part, type):
        return not instances and issubclass(part, base)
    return instances and isinstance(part, base)


PLUGIN_GROUP = "pgra.plugins"  # the entry-point group a package's plug-in modules are declared in
_plugins_loaded = False


def load_plugins() -> list[str]:
    """Import, once per process, every ``pgra.plugins`` entry-point module; their names (a failure: InputError)."""
    global _plugins_loaded
    if _plugins_loaded:
        return []
    _plugins_loaded = True
    from importlib.metadata import entry_points

    names = []
    for ep in entry_points(group=PLUGIN_GROUP):
        _load_plugin(ep)
        names.append(ep.name)
    return names


def _load_plugin(ep: Any) -> None:
    """Import one plug-in's module; whatever goes wrong there (``sys.exit`` included) is its InputError."""
    where = f"the plug-in '{clip(ep.name, 80)}' ({clip(ep.value, 120)}, entry point group {PLUGIN_GROUP})"
    try:
        ep.load()
    except InputError as e:  # a part it registers is refused
        raise InputError(f"{where} is refused: {clip(str(e), 600)}", field=PLUGIN_GROUP) from None
    except SystemExit as e:
        raise InputError(f"{where} exited while being imported (code {shorten(e.code, 40)}): a plug-in's module "
                         "registers its parts and returns", field=PLUGIN_GROUP) from None
    except Exception as e:
        raise InputError(f"{where} cannot be imported: {type(e).__name__}: {clip(str(e), 600)}",
                         field=PLUGIN_GROUP) from e


class HandedOver(Generic[T]):
    """A registry that a lower module reads but may not import: its owner (``owner``, a package) hands it over when
    imported (:meth:`hand_over`), breaking an import circle; ``what`` names the parts, for the error."""

    def __init__(self, what: str, owner: str) -> None:
        self.what, self.owner = what, owner
        self._registry: Registry[T] | None = None

    def hand_over(self, registry: Registry[T]) -> None:
        self._registry = registry

    def __call__(self) -> Registry[T]:
        """The registry, its built-in parts loaded."""
        if self._registry is None:
            raise RuntimeError(f"no registry of {self.what} handed over (import {self.owner})")
        self._registry.load_builtin()
        return self._registry


__all__ = ["PLUGIN_GROUP", "HandedOver", "Registry", "defined_in", "is_builtin", "load_plugins", "plug_in_key"]
