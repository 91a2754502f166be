"""What an analysis renders into: markdown sections of ``analysis.md``, JSON tables and PNG figures."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.markdown import md_table

if TYPE_CHECKING:
    from .inputs import ExperimentRuns


def pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal (``–`` for a missing value)."""
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def mean_or_none(xs: Sequence[float]) -> float | None:
    """The mean of ``xs`` (None when there are none)."""
    return statistics.fmean(xs) if xs else None


def number(x: float | None, spec: str) -> str:
    """``x`` formatted with ``spec`` (``–`` for a missing value)."""
    return "–" if x is None else format(x, spec)


def signed(x: float | None) -> str:
    """A fraction as signed percentage points (``–`` for a missing value)."""
    return "–" if x is None else f"{100 * x:+.1f}"


class Writer:
    """Collects markdown sections (``md``), JSON tables (``tables``) and figures of the analyses."""

    def __init__(self, runs: ExperimentRuns) -> None:
        self.runs = runs
        self.md: list[str] = [f"# Analyses of {runs.root}", "",
                              f"Split: {runs.split}. Figures are PNG files beside this one.", ""]
        self.tables: dict[str, Any] = {}
        self.figures: list[dict[str, str]] = []

    def section(self, name: str, rows: list[dict[str, Any]], title: str, text: str, columns: list[str],
                cells: Callable[[dict[str, Any]], Sequence[Any]]) -> None:
        """Start ``name``'s section: its JSON ``rows``, a heading, ``text`` and a table of ``cells(row)``."""
        self.tables[name] = rows
        self.md += [f"## {title}", "", text, "", *md_table(columns, (cells(r) for r in rows))]
        self.md.append("")

    def figure(self, path: Path, title: str, caption: str) -> None:
        """Add the PNG at ``path`` (written beside ``analysis.md``) with its title and caption."""
        name = path.name
        self.figures.append({"file": name, "title": title, "caption": caption})
        self.md += [f"![{title}]({name})", "", f"*{caption}*", ""]


__all__ = ["Writer", "number", "pct", "signed"]
