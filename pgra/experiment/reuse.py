"""Stage reuse in one place: a folder built by a stage is reused when it finished with the same key, else the
stage runs (metered) and the folder gets its cost record and its key, the key last (its completion mark).

The grid's shared stages (:meth:`pgra.experiment.grid.Experiment.build_stages`) and the analyses that build
folders of their own (the label-consistency analysis's reranking with another LM) reuse through it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runtime.cost import metered
from ..storage.artifacts import MANIFEST, write_json, write_text
from .layout import STAGE_COST_FILE


def finished_with(folder: Path, key_file: str, key: str) -> bool:
    """Whether ``folder`` holds a finished stage (its manifest) whose ``key_file`` holds ``key``."""
    stamp = folder / key_file
    return (folder / MANIFEST).exists() and stamp.exists() and stamp.read_text().strip() == key


def reuse_or_run(folder: Path, key_file: str, key: str, run: Callable[[], Any], ctx,
                 cost_file: str = STAGE_COST_FILE) -> bool:
    """Reuse ``folder`` when it finished with ``key``; else call ``run()`` (on every process of ``ctx``), then on the
    main process write ``cost_file`` (what the run spent, :func:`pgra.runtime.cost.metered`, with ``stage_key``) and
    ``key_file``. Returns True when the folder was reused."""
    folder = Path(folder)
    if finished_with(folder, key_file, key):
        return True
    with metered(ctx) as cost:
        run()
    ctx.barrier()
    if ctx.is_main:
        write_json(folder / cost_file, {"stage_key": key, **cost})
        write_text(folder / key_file, key)
    ctx.barrier()
    return False


__all__ = ["finished_with", "reuse_or_run"]
