"""Every seed option of every command (nested sections, the task spec and the analyses included) is declared
``option(min=0, max=SEED_MAX)``: numpy and torch take seeds 0 .. 2**32 - 1, and a seed outside is one error line
(the bad-input matrix runs one per command), never a library's traceback."""

from __future__ import annotations

import dataclasses
import typing

from pgra.cli import COMMANDS
from pgra.core.config import SEED_MAX
from pgra.tasks.spec import TaskSpec


def _seed_fields(cls: type, prefix: str = "", seen: set | None = None):
    seen = set() if seen is None else seen
    if cls in seen:
        return
    seen.add(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _seed_fields(tp, f"{prefix}{f.name}.", seen)
        elif "seed" in f.name:
            yield f"{prefix}{f.name}", f


def test_every_seed_option_is_declared_in_range():
    from pgra.analysis.config import analyze_config

    classes = {c.config_class() for c in COMMANDS.values()} | {analyze_config(), TaskSpec}
    found = {(cls.__name__, name): f for cls in classes for name, f in _seed_fields(cls)}
    assert len(found) >= 15  # train, rerank, icl (2), retrieve, dense, experiment (and its sections), report ...
    wrong = [key for key, f in found.items() if (f.metadata.get("min"), f.metadata.get("max")) != (0, SEED_MAX)]
    assert not wrong, wrong
    assert SEED_MAX == 2**32 - 1
