"""Command-line flags generated from a config dataclass (each option is declared once, in its field).

A top-level field ``n_passages`` becomes ``--n-passages`` (or the ``flag`` its :func:`pgra.core.config.option`
names, plus an optional ``short`` alias); a nested field gets a flag only when its metadata names one
(``dense.encoder`` -> ``--encoder``). Every field, flagged or not, can be set as ``key=value`` on commands
that read YAML configs. The help shows the dataclass default, so it never drifts from the code.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..core.config import (
    field_choices,
    from_dict,
    load_config,
    merge,
    parse_overrides,
    resolve_values,
    section_type,
)

DEST_PREFIX = "opt__"


@dataclass(frozen=True)
class Leaf:
    """One leaf option of a config: its dotted key, field and (unwrapped) type."""

    key: str
    field: dataclasses.Field
    type: Any
    hidden: bool = False  # inside a section declared with flag=False: key=value only

    @property
    def meta(self) -> typing.Mapping[str, Any]:
        return self.field.metadata

    @property
    def dest(self) -> str:
        return DEST_PREFIX + self.key.replace(".", "__")

    @property
    def nested(self) -> bool:
        return "." in self.key

    def flags(self) -> list[str]:
        """The option strings of this field ([] when it is reachable only as key=value)."""
        flag = self.meta.get("flag")
        if self.hidden or flag is False or self.meta.get("positional") or (self.nested and not flag):
            return []
        names = [flag if isinstance(flag, str) else "--" + self.key.replace("_", "-")]
        if self.meta.get("short"):
            names.append(self.meta["short"])
        return names


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0]
    return tp


def leaves(cls: type, prefix: str = "", hidden: bool = False) -> Iterator[Leaf]:
    """Every leaf field of a (nested) config dataclass, depth first in declaration order.

    A nested section declared with ``option(..., flag=False)`` hides every flag below it (key=value only).
    """
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = section_type(_unwrap_optional(hints[f.name]))
        if dataclasses.is_dataclass(tp):
            yield from leaves(tp, f"{prefix}{f.name}.", hidden or f.metadata.get("flag") is False)
        else:
            yield Leaf(prefix + f.name, f, tp, hidden)


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _show(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def help_text(leaf: Leaf) -> str:
    """The field's help with its dataclass default (and registered values where they are suggestions)."""
    text = leaf.meta.get("help", "")
    suggest = resolve_values(leaf.meta.get("suggest"))
    if suggest:
        text += f" (registered: {', '.join(map(str, suggest))})"
    default = default_of(leaf.field)
    if default not in ("", None, []):
        text += f" (default: {_show(default)})"
    return text.replace("%", "%%")


def _argparse_kwargs(leaf: Leaf) -> dict[str, Any]:
    origin = typing.get_origin(leaf.type)
    kwargs: dict[str, Any] = {"help": help_text(leaf), "default": None}
    if leaf.type is not bool:
        kwargs["metavar"] = leaf.meta.get("metavar") or leaf.key.rsplit(".", 1)[-1].upper()
    allowed = field_choices(leaf.field)
    if leaf.type is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
        return kwargs
    if origin in (list, tuple):
        if leaf.meta.get("append"):
            kwargs["action"] = "append"
        elif leaf.meta.get("positional"):
            kwargs["nargs"] = "*"  # no argparse choices: an empty '*' fails them; the config loader checks
        else:
            kwargs["metavar"] = "A,B,..."  # comma-separated, split by the config loader
        return kwargs
    if leaf.type in (int, float):
        kwargs["type"] = leaf.type
    if allowed is not None:
        kwargs["choices"] = allowed
        kwargs.pop("metavar")  # argparse shows the choices
    if leaf.meta.get("positional"):
        kwargs["nargs"] = "?"
    return kwargs


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, from_yaml: bool) -> list[Leaf]:
    """Add one argument per flagged field of ``cls`` (plus ``--config`` and ``key=value`` when ``from_yaml``)."""
    if from_yaml:
        parser.add_argument("--config", metavar="FILE",
                            help="YAML config (may name a `base:` file it overrides); flags and key=value win")
    added = []
    for leaf in leaves(cls):
        flags = leaf.flags()
        if leaf.meta.get("positional"):
            parser.add_argument(leaf.dest, **_argparse_kwargs(leaf))
        elif flags:
            parser.add_argument(*flags, dest=leaf.dest, **_argparse_kwargs(leaf))
        else:
            continue
        added.append(leaf)
    if from_yaml:
        parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                            help="any config key, nested with dots (e.g. dense.faiss.nlist=4096)")
    return added


def flag_overrides(ns: argparse.Namespace, added: list[Leaf]) -> dict[str, Any]:
    """A nested dict of the flags given on the command line (flags left out are not in it)."""
    out: dict[str, Any] = {}
    for leaf in added:
        value = getattr(ns, leaf.dest, None)
        if value is None or (leaf.meta.get("positional") and value == []):
            continue
        node = out
        *parents, name = leaf.key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[name] = value
    return out


def config_from_args(cls: type, ns: argparse.Namespace, added: list[Leaf], from_yaml: bool) -> Any:
    """Build ``cls`` from ``--config`` (with its base chain), then ``key=value`` overrides, then flags."""
    flags = flag_overrides(ns, added)
    if not from_yaml:
        return from_dict(cls, flags, source="<command line>")
    overrides = merge(parse_overrides(ns.overrides or []), flags)
    return load_config(cls, ns.config, overrides)
