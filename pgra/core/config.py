"""Dataclass configs loaded from YAML (a file may name a ``base`` it overrides), with ``key=value``
overrides; every option is declared once with :func:`option`, and the CLI's flags are made from it."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .errors import InputError, clip, is_number, shorten

T = TypeVar("T")
BASE_KEY = "base"
MAX_YAML_NODES = 100_000  # a YAML document expanding (aliases included) to more nodes is refused
MAX_YAML_DEPTH = 100  # brackets nested deeper ([[[[...) are refused while scanning, before PyYAML recurses
IO_ROLES = ("in", "out", "base", "store")
# undeclared fields with these names are input paths when they name something on disk (a model folder)
_INPUT_NAMES = ("model", "lm", "encoder", "corpus")
SEED_MAX = 2**32 - 1  # every seed option is declared option(min=0, max=SEED_MAX): what numpy's and torch's seeding take
# the largest values of the options that size memory: far above any use, far below what exhausts a machine
MAX_ITEMS = 100_000  # items one input or query holds at once: k, d, passages, demonstrations, candidates, examples
MAX_BATCH = 65_536  # texts or rows of one batch
MAX_TOKENS = 1_048_576  # a length in tokens (and a batch's token budget)
MAX_SHARD = 4_194_304  # texts of one index shard held in memory
MAX_HNSW_M = 1_024  # HNSW links per node (the graph holds 2 x this per vector)
MAX_BINS = 10_000  # bins of a histogram
MAX_RESAMPLES = 100_000  # bootstrap resamples (the resampled inputs are drawn at once: resamples x inputs)
MAX_WORKERS = 1_024  # workers (processes or jobs) of one grid
MAX_CELLS_PER_GPU = 64  # cells sharing one GPU


def option(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, help: str = "",
           choices: Any = None, suggest: Any = None, flag: str | bool | None = None, short: str | None = None,
           positional: bool = False, append: bool = False, metavar: str | None = None,
           min: float | None = None, max: float | None = None, above: float | None = None,
           exists: str | None = None, unique: bool = False, io: str | None = None,
           path_segment: bool | str = False, cosmetic: bool = False, omit_default: bool = False,
           record_default: bool = True) -> Any:
    """A config field together with its command-line declaration.

    Checked when a config is built (YAML, flags, ``key=value``): ``choices`` (a tuple, or a callable reading a
    registry), ``min`` / ``max`` / ``above`` (a bound to exceed), ``unique`` (list items differ),
    ``path_segment`` (the value names a file or folder: :func:`check_path_segments`; ``"optional"``: empty means
    none). Checked when a stage starts (:func:`check_config`): ``exists`` (``"dir"`` / ``"file"``) and ``io``, the
    part a path plays: ``"in"`` (an output may not be, hold or lie inside it), ``"base"`` (read; an output may lie
    inside it), ``"out"`` or ``"store"`` (a shared cache); see :func:`io_role`. Flags: ``suggest`` (listed, not
    enforced), ``flag`` (a nested field's flag, or ``False`` to hide one), ``short``, ``append``, ``positional``.
    Keys: ``cosmetic`` (never changes a result: no key hashes it), ``omit_default`` (keyed only when set), and
    ``record_default=False`` (not even recorded while at its default, so old manifests stay byte-identical).

        @dataclass
        class SearchConfig:
            k: int = option(10, help="hits per query", short="-k")
    """
    meta = {"help": help, "choices": choices, "suggest": suggest, "flag": flag, "short": short,
            "positional": positional, "append": append, "metavar": metavar, "min": min, "max": max,
            "above": above, "exists": exists, "unique": unique, "io": io, "path_segment": path_segment,
            "cosmetic": cosmetic, "omit_default": omit_default, "record_default": record_default}
    if io is not None and io not in IO_ROLES:
        raise ValueError(f"io must be one of {IO_ROLES}, not {io!r}")
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def result_settings(cfg: Any, without: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of ``cfg`` that define its result (not cosmetic, not ``omit_default`` at default, not ``without``)."""
    fields = dataclasses.fields(cfg)
    left_out = {f.name for f in fields if f.metadata.get("cosmetic")}
    left_out |= {f.name for f in fields if f.metadata.get("omit_default") and at_default(cfg, f)}
    return {k: v for k, v in to_dict(cfg).items() if k not in left_out and k not in without}


def at_default(cfg: Any, f: dataclasses.Field) -> bool:
    """Whether field ``f`` of config ``cfg`` holds its declared default (a ``default_factory``'s value too)."""
    default = f.default_factory() if f.default is dataclasses.MISSING and \
        f.default_factory is not dataclasses.MISSING else f.default
    return getattr(cfg, f.name) == default


def recorded_settings(cfg: Any, cosmetic: bool = True) -> dict[str, Any]:
    """``dataclasses.asdict(cfg)`` less the unrecorded fields at their default (``cosmetic=False``: less the
    cosmetic ones): so adding an option with a backward-compatible default changes no manifest or key."""
    out: dict[str, Any] = {}
    made = hasattr(type(cfg), "__section__")  # a section made from a registry (:func:`section_type`)
    for f in dataclasses.fields(cfg):
        unrecorded = f.metadata.get("record_default") is False or (made and f.metadata.get("omit_default"))
        if (unrecorded and at_default(cfg, f)) or (not cosmetic and f.metadata.get("cosmetic")):
            continue
        out[f.name] = _recorded_value(getattr(cfg, f.name), cosmetic)
    return out


def _recorded_value(value: Any, cosmetic: bool) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return recorded_settings(value, cosmetic)
    if isinstance(value, (list, tuple)):
        return type(value)(_recorded_value(v, cosmetic) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _recorded_value(v, cosmetic)) for k, v in value.items())
    return copy.deepcopy(value)


def resolve_values(spec: Any) -> list[Any] | None:
    """The values of a ``choices``/``suggest`` declaration (calling it when it reads a registry)."""
    if spec is None:
        return None
    return list(spec() if callable(spec) else spec)


def field_choices(f: dataclasses.Field) -> list[Any] | None:
    """The allowed values of a config field, or None when any value of its type is allowed."""
    return resolve_values(f.metadata.get("choices"))


def section_type(tp: Any) -> Any:
    """The dataclass a section's declared type stands for (made by its ``__section__``, where it has one)."""
    made = getattr(tp, "__section__", None)
    return made() if made is not None else tp


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: section_type(hints[f.name]) for f in dataclasses.fields(cls)}


def _unknown_key(key: str, known: list[str], source: str) -> InputError:
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else f" Known keys: {', '.join(sorted(known))}."
    return InputError(f"unknown config key {shorten(key)}.{hint}", path=source, field=clip(key, 100))


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in {"none", "null"}):
            return None
        return _coerce(value, args[0], key, source)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise InputError(f"expected a mapping, got {shorten(value)}", path=source, field=key)
        return from_dict(tp, value, source=source, prefix=f"{key}.")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise InputError(f"must be one of {list(typing.get_args(tp))}, got {shorten(value)}", path=source,
                             field=key)
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""]
        elif isinstance(value, (int, float)):  # `seeds=2` (or YAML `seeds: 2`) is the one-item list `seeds=2,`
            value = [value]
        elif not isinstance(value, (list, tuple)):
            raise InputError(f"expected a list (comma-separated on the command line, e.g. {key}=a,b), got "
                             f"{shorten(value)}", path=source, field=key)
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item_tp, key, source) for v in value]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise InputError(f"expected a mapping, got {shorten(value)}", path=source, field=key)
        key_tp, value_tp = typing.get_args(tp) or (Any, Any)  # dict[str, str]: `train: 5` is "5", `train: ~` an error
        out = {}
        for k, v in value.items():
            if v is None and value_tp in (str, int, float, bool):
                raise InputError(f"expected {value_tp.__name__}, got None", path=source, field=f"{key}.{clip(str(k), 100)}")
            out[_coerce(k, key_tp, key, source)] = _coerce(v, value_tp, f"{key}.{clip(str(k), 100)}", source)
        return out
    if tp is bool and not isinstance(value, bool):  # "no" (quoted) or 0 is no boolean: never read as one
        raise InputError(f"expected true or false (a YAML boolean, unquoted), got {shorten(value)}", path=source,
                         field=key)
    if tp in (int, float) and isinstance(value, bool):  # `k: true` is no number
        raise InputError(f"expected {tp.__name__}, got {shorten(value)}", path=source, field=key)
    try:
        if tp in (int, float, str) and not isinstance(value, tp):
            if tp is int and isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return tp(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: float(10**400)
        raise InputError(f"expected {tp.__name__}, got {shorten(value)}", path=source, field=key) from None
    return value


def _choice_word(f: dataclasses.Field, value: Any) -> Any:
    """YAML 1.1 reads no/off/yes/on as bools: where the field's choices hold such a word, the bool is that word."""
    allowed = field_choices(f)
    if not isinstance(value, bool) or allowed is None or value in allowed:
        return value
    words = [w for w in (("yes", "on", "true") if value else ("no", "off", "false")) if w in allowed]
    return words[0] if words else value


def _check_field(f: dataclasses.Field, value: Any, key: str, source: str | None, paths: bool = False) -> None:
    """The one place every declared constraint of a field is checked (its path's existence when ``paths``)."""
    allowed = field_choices(f)
    items = value if isinstance(value, list) else [value]  # a list's bounds hold for each item (seeds)
    for v in items:
        if allowed is not None and v not in allowed:
            raise InputError(f"must be one of {allowed}, got {shorten(v)}", path=source, field=key)
        if isinstance(v, float) and not math.isfinite(v):  # NaN passes every comparison: refused outright
            raise InputError(f"must be a finite number, got {v!r}", path=source, field=key)
    if f.metadata.get("unique") and isinstance(value, list):
        repeated = [v for i, v in enumerate(value) if v in value[:i]]
        if repeated:
            raise InputError(f"lists {shorten(repeated[0])} more than once ({shorten(value)}); each value may "
                             "appear once", path=source, field=key)
    low, high, above = (f.metadata.get(k) for k in ("min", "max", "above"))
    for v in filter(is_number, items):
        for bound, bad, words in ((low, low is not None and v < low, "at least"),
                                  (high, high is not None and v > high, "at most"),
                                  (above, above is not None and v <= above, "greater than")):
            if bad:
                shown = bound if isinstance(bound, int) else f"{bound:g}"
                raise InputError(f"must be {words} {shown}, got {v!r}", path=source, field=key)
    if f.metadata.get("path_segment"):
        check_path_segments(value, key, source, empty_ok=f.metadata["path_segment"] == "optional")
    if paths and isinstance(value, str) and value:
        _check_path(f, value, key, source)


def _check_path(f: dataclasses.Field, value: str, key: str, source: str | None) -> None:
    """A path option's ``exists`` and, for an output or store, that it is a folder or not there yet."""
    from ..storage.artifacts import describe_path

    kind = f.metadata.get("exists")
    if kind:
        path = Path(value).expanduser()
        ok = path.is_dir() if kind == "dir" else path.is_file() if kind == "file" else path.exists()
        if not ok:
            what = {"dir": "folder", "file": "file"}.get(kind, "path")
            found = describe_path(path)
            said = f"no such {what}: {value}" if found.startswith("not found") else \
                f"{value} is {found}, not a {what}" if not found.startswith("not ") else f"{value}: {found}"
            raise InputError(said, path=source, field=key)
    if io_role(f) in ("out", "store"):
        found = describe_path(Path(value).expanduser())
        if found not in ("a folder", "not found"):
            raise InputError(f"{value} is {found}, not a folder (this option names a folder pgra writes): "
                             "choose another path", path=source, field=key)


def check_path_segments(value: Any, field: str, source: str | Path | None = None, empty_ok: bool = False) -> None:
    """The one check of a value naming a file or folder: a string, each list item and each mapping key must be a
    :func:`pgra.storage.artifacts.safe_name` (an integer is one); ``empty_ok``: an empty string means none."""
    from ..storage.artifacts import safe_name

    if isinstance(value, dict):
        values, what = list(value), "a key"
    elif isinstance(value, (list, tuple)):
        values, what = list(value), "an item"
    else:
        if empty_ok and value == "":
            return
        values, what = [value], "a name"
    for v in values:
        if not (isinstance(v, int) and not isinstance(v, bool)):
            safe_name(v, field, source, what)


def io_role(f: dataclasses.Field) -> str | None:
    """The part a config field's path plays: ``in``, ``base``, ``out``, ``store`` or None (not a path)."""
    role = f.metadata.get("io")
    if role:
        return role
    if f.metadata.get("exists"):
        return "in"
    if f.name == "out":
        return "out"
    return "in" if f.name in _INPUT_NAMES else None


def _check_overlap(cfg: Any, prefix: str = "") -> tuple[dict[str, Any], set[str]]:
    """Refuse an output of ``cfg`` overlapping an input; returns the inputs and those outputs may lie inside."""
    outputs: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    may_hold: set[str] = set()
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            ins, holds = _check_overlap(value, f"{prefix}{f.name}.")
            inputs.update(ins)
            may_hold |= holds
            continue
        role = io_role(f)
        if role == "out":
            outputs[prefix + f.name] = value
        elif role in ("in", "base"):
            inputs[prefix + f.name] = value
            if role == "base":
                may_hold.add(prefix + f.name)
    from ..storage.artifacts import check_disjoint

    check_disjoint(outputs, inputs, may_hold)
    return inputs, may_hold


def check_config(cfg: Any, prefix: str = "") -> None:
    """Check a config when a stage starts: every field (paths included) and that no output overlaps an input."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            check_config(value, f"{prefix}{f.name}.")
            continue
        _check_field(f, value, prefix + f.name, None, paths=True)
    if not prefix:
        _check_overlap(cfg)


def from_dict(cls: type[T], data: dict[str, Any], source: str = "<config>", prefix: str = "") -> T:
    """Build dataclass ``cls`` from a (nested) dict, checking keys and types."""
    types_ = _field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise InputError(f"config keys are names, got {shorten(key)}", path=source, field=prefix.rstrip(".") or None)
        if key not in types_:
            raise _unknown_key(prefix + key, [prefix + k for k in types_], source)
        kwargs[key] = _coerce(_choice_word(fields[key], value), types_[key], prefix + key, source)
        _check_field(fields[key], kwargs[key], prefix + key, source)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise InputError(str(e), path=source) from None


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain dict of a dataclass config, as manifests record it (:func:`recorded_settings`)."""
    return recorded_settings(cfg)


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """Turn ``["a.b=1", "c=x"]`` into a nested dict; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise InputError(f"override '{item}' is not of the form key=value", field=item)
        key, raw = item.split("=", 1)
        try:
            value = safe_load_yaml(raw) if raw != "" else ""
        except yaml.YAMLError as e:
            raise InputError(f"invalid value {shorten(raw)} ({clip(str(e).splitlines()[0])})",
                             field=key.strip()) from None
        node = out
        *parents, leaf = key.strip().split(".")
        for i, p in enumerate(parents):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):  # `a=1 a.b=2`: a cannot be both a value and a section
                above = ".".join(parents[: i + 1])
                raise InputError(f"an earlier override sets '{clip(above, 100)}' to {shorten(node)}; it cannot also "
                                 "hold keys", field=clip(key.strip(), 100))
        node[leaf] = value
    return out


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; ``update`` wins."""
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


class YAMLTooLargeError(yaml.YAMLError):
    """A document that expands (aliases included) to more than MAX_YAML_NODES nodes."""


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` stands for once every alias is expanded (each node sized once), up to ``limit``."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # expanded, not yet sized: the path from the root (depth-first)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        if not ready:
            if id(node) in open_nodes:  # reached again below itself
                raise YAMLTooLargeError("the document holds itself (a recursive alias: an anchor used inside "
                                        "its own value); refused")
            open_nodes.add(id(node))
            stack.append((node, True))
            for c in children:
                if id(c) in open_nodes:
                    raise YAMLTooLargeError("the document holds itself (a recursive alias: an anchor used inside "
                                            "its own value); refused")
                if id(c) not in sizes:
                    stack.append((c, False))
            continue
        open_nodes.discard(id(node))
        sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
    return sizes[id(root)]


class DuplicateKeyError(yaml.YAMLError):
    """A mapping that sets one key twice (PyYAML would keep the last silently)."""

    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"duplicate key {shorten(key, 100)} on line {line} (first set on line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing more than MAX_YAML_DEPTH nested brackets and a key set twice."""

    def fetch_more_tokens(self) -> None:
        if self.flow_level > MAX_YAML_DEPTH:
            raise YAMLTooLargeError(f"the document is nested too deeply (more than {MAX_YAML_DEPTH} levels of "
                                    "brackets); refused")
        super().fetch_more_tokens()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise DuplicateKeyError(key, line, seen[key])
                    seen[key] = line
                except TypeError:  # an unhashable key: PyYAML's own error says so
                    continue
        return super().construct_mapping(node, deep=deep)


def safe_load_yaml(text: str, limit: int = MAX_YAML_NODES) -> Any:
    """``yaml.safe_load`` refusing a document whose aliases expand it past ``limit`` nodes ("billion laughs")."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, limit)
        if size > limit:
            raise YAMLTooLargeError(f"the document expands to more than {limit:,} values (aliases of aliases?); "
                                    "refused")
        return loader.construct_document(node)
    except RecursionError:  # PyYAML composes and constructs recursively: `[[[[...` thousands deep
        raise YAMLTooLargeError("the document is nested too deeply; refused") from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> dict[str, Any]:
    """One YAML file's mapping, as written (no ``base`` resolution); bounded (see :func:`safe_load_yaml`)."""
    from ..storage.artifacts import read_utf8

    text = read_utf8(path, "config file")
    path = Path(path)
    try:
        data = safe_load_yaml(text) or {}
    except DuplicateKeyError as e:
        raise InputError(f"duplicate key {shorten(e.key, 100)} (first set on line {e.first_line}): YAML would keep "
                         "only the last value; remove one", path=path, line=e.line, field=clip(str(e.key), 100)) from None
    except yaml.YAMLError as e:
        raise InputError(f"invalid YAML: {clip(str(e), 400)}", path=path) from None
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason} at byte {e.start})", path=path) from None
    if not isinstance(data, dict):
        raise InputError("a config file must hold a mapping at top level", path=path)
    return data


def resolve_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML config with its ``base`` chain (paths relative to the file, merged in order) under its own keys."""
    path = Path(path).resolve()
    if path in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path))
        raise InputError(f"config inheritance cycle: {chain}", path=path, field=BASE_KEY)
    data = load_yaml(path)
    bases = data.pop(BASE_KEY, None)
    if bases is None:
        return data
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) and b for b in bases):
        raise InputError("'base' must be a file name or a list of file names", path=path, field=BASE_KEY)
    from ..storage.artifacts import describe_path

    merged: dict[str, Any] = {}
    for base in bases:
        base_path = path.parent / base
        found = describe_path(base_path)  # not Path.is_file: that raises on a name too long for the file system
        if found != "a file":
            said = found if found.startswith("not ") else f"is {found}, not a file"
            raise InputError(f"base config {shorten(base)} {said} (looked for {clip(str(base_path))})", path=path,
                             field=BASE_KEY)
        merged = merge(merged, resolve_yaml(base_path, (*_seen, path)))
    return merge(merged, data)


def load_config(cls: type[T], path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                ) -> T:
    """Load ``cls`` from a YAML file (optional, ``base`` chain resolved) with overrides applied on top."""
    data = resolve_yaml(path) if path else {}
    if overrides:
        data = merge(data, overrides)
    return from_dict(cls, data, source=str(path) if path else "<command line>")
