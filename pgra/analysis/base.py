"""The interface of an analysis (one file: options, compute, render) and its registry."""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.registry import Registry, defined_in
from .config import use_analyses

if TYPE_CHECKING:
    from ..experiment import Experiment
    from .inputs import ExperimentRuns
    from .writer import Writer

Rows = list[dict[str, Any]]
READS = ("experiment", "results")  # what an analysis needs (Analysis.reads)


@dataclass(frozen=True)
class Analysis:
    """One analysis: ``compute(runs, ctx)`` gives its rows (a JSON table), ``render(writer, rows)`` writes them.

    ``every_process``: it runs models on every process (else the main one); ``config``: its options section's type;
    for ``pgra analyze --dry-run``, ``variants(runs)``: the grids it runs as ``(label, Experiment)``, ``reranks(runs)``:
    rerank stages outside any grid as ``(task, what, done, rerank config)``; ``reads="results"``: it runs on bundles."""

    name: str
    compute: Callable[[ExperimentRuns, Any], Rows]
    render: Callable[[Writer, Rows], None]
    config: Any = None
    help: str = ""
    every_process: bool = False
    render_empty: bool = False  # render (a link, a note) even when it has no rows
    path_segment: bool = False
    variants: Callable[[ExperimentRuns], list[tuple[str, Experiment]]] | None = None
    reranks: Callable[[ExperimentRuns], list[tuple[str, str, bool, Any]]] | None = None
    reads: str = "experiment"  # or "results": it runs on bundles too

    def __post_init__(self) -> None:
        if self.reads not in READS:
            raise ValueError(f"analysis {self.name!r}: reads must be one of {READS}, not {self.reads!r}")

    def default_options(self) -> Callable[[], Any]:
        """The default factory of its options section."""
        return typing.get_origin(self.config) or self.config


# the analyses that ship with pgra, one module each (importing one registers it), in the order they are shown
BUILTIN = ("consistency", "sweep", "retrievers", "differences", "calibration", "leakage", "attribution", "ceiling",
           "costs", "case_study")
SHOWN = ("consistency", "sweep", "retrievers", "differences", "calibration", "leakage", "attribution", "ceiling",
         "cost", "case_study")  # the analyses those modules register, in that order
ANALYSES: Registry[Analysis] = Registry("analysis", __package__, BUILTIN, field="analysis.analyses",
                                        module_of=lambda a: defined_in(a.compute), base=Analysis,
                                        instances=True)  # whose file computes it


def register_analysis(analysis: Analysis) -> Analysis:
    """Add ``analysis`` to the registry (a taken name refused), built-in ones first in ``SHOWN`` order."""
    ANALYSES.register(analysis)
    ordered = sorted(ANALYSES.values(), key=lambda a: SHOWN.index(a.name) if a.name in SHOWN else len(SHOWN))
    ANALYSES.clear()
    ANALYSES.update((a.name, a) for a in ordered)
    return analysis


load_builtin = ANALYSES.load_builtin  # import (so register) the built-in analyses
use_analyses(ANALYSES)  # the ``analysis:`` section is built from it (.config sits below: it is handed over)
analysis_names = ANALYSES.names  # the registered analyses, in the order ``pgra analyze`` runs and shows them


__all__ = ["ANALYSES", "BUILTIN", "READS", "Analysis", "Rows", "analysis_names", "load_builtin", "register_analysis"]
