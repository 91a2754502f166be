"""PNG figures of the analyses (matplotlib, Agg backend): every one with a title, axis labels and a legend."""

from __future__ import annotations

import math
from pathlib import Path

from ..storage.artifacts import atomic_path

DPI = 120


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def grouped_bars(path: Path, groups: list[str], series: dict[str, list[float]], title: str, ylabel: str,
                 xlabel: str, errors: dict[str, list[float]] | None = None,
                 notes: dict[str, list[str]] | None = None) -> Path:
    """Bars of each series side by side per group (fractions as percent), labelled with values or ``notes``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(groups) * max(1, len(series)) / 2 + 2), 4))
    width = 0.8 / max(1, len(series))
    for j, (name, values) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ys = [v * 100.0 if v is not None and not math.isnan(v) else 0.0 for v in values]
        err = [e * 100.0 for e in errors[name]] if errors and name in errors else None
        bars = ax.bar(xs, ys, width, label=name, yerr=err, capsize=3 if err else 0)
        if notes and name in notes:
            ax.bar_label(bars, labels=notes[name], fontsize=8, padding=2)
        else:
            ax.bar_label(bars, fmt="%.1f", fontsize=8, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel, ylim=(0, 105))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def lines(path: Path, xs: dict[str, list[float]], ys: dict[str, list[float]], title: str, xlabel: str,
          ylabel: str, errors: dict[str, list[float]] | None = None) -> Path:
    """One line (with error bars) per series against its x values (fractions shown as percent)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name in ys:
        err = [e * 100.0 for e in errors[name]] if errors and name in errors else None
        ax.errorbar(xs[name], [y * 100.0 for y in ys[name]], yerr=err, marker="o", capsize=3, label=name)
    all_x = sorted({x for v in xs.values() for x in v})
    ax.set_xticks(all_x)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def interval_panels(path: Path, panels: dict[str, dict[str, list[tuple[float, float, float]]]], xlabels: list[str],
                    title: str, xlabel: str, ylabel: str) -> Path:
    """Panels sharing a categorical x axis, each a line per series of ``(value, low, high)`` as percent."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1.5, 3.6), sharey=True, squeeze=False)
    for ax, (name, series) in zip(axes[0], panels.items(), strict=True):
        for label, points in series.items():
            ys = [100 * v for v, _, _ in points]
            err = [[100 * (v - lo) for v, lo, _ in points], [100 * (hi - v) for v, _, hi in points]]
            ax.errorbar(range(len(points)), ys, yerr=err, marker="o", capsize=3, label=label)
        ax.set_xticks(range(len(xlabels)), xlabels, rotation=20, fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.suptitle(title)
    return _save(fig, path)


def histogram(path: Path, counts: dict[str, dict[int, int]], title: str, xlabel: str, ylabel: str,
              marker: float | None = None, marker_label: str = "") -> Path:
    """Shares (percent of each series' total) per integer value, as side-by-side bars; an optional vertical line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted({k for c in counts.values() for k in c})
    width = 0.8 / max(1, len(counts))
    for j, (name, c) in enumerate(counts.items()):
        total = sum(c.values()) or 1
        xs = [k + (j - (len(counts) - 1) / 2) * width for k in keys]
        ax.bar(xs, [100.0 * c.get(k, 0) / total for k in keys], width, label=f"{name} (n={sum(c.values())})")
    if marker is not None:
        ax.axvline(marker, color="black", linestyle="--", linewidth=1, label=marker_label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if len(keys) <= 30:
        ax.set_xticks(keys)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def reliability(path: Path, curves: dict[str, tuple[list[float], list[float], list[int]]], title: str) -> Path:
    """A reliability diagram: accuracy against mean confidence per non-empty bin, sized by its inputs."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.plot([0, 100], [0, 100], color="black", linestyle="--", linewidth=1, label="perfectly calibrated")
    for name, (conf, acc, n) in curves.items():
        total = sum(n) or 1
        (line,) = ax.plot([100 * c for c in conf], [100 * a for a in acc], linewidth=1, alpha=0.7)
        ax.scatter([100 * c for c in conf], [100 * a for a in acc], s=[10 + 300 * k / total for k in n], label=name,
                   color=line.get_color())
    ax.set(xlim=(0, 102), ylim=(0, 102), title=title, xlabel="confidence: probability of the predicted label (%)",
           ylabel="accuracy in the bin (%)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def pareto(path: Path, points: list[tuple[str, float, float, bool]], title: str, xlabel: str,
           ylabel: str) -> Path:
    """Score against cost, a labelled point per method; the frontier joined, dominated ones hollow."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    front = sorted((x, 100 * y) for _, x, y, d in points if not d)
    if front:
        ax.step([x for x, _ in front], [y for _, y in front], where="post", color="gray", linewidth=1,
                label="frontier (not dominated)")
    for name, x, y, dom in points:
        ax.scatter([x], [100 * y], s=40, facecolors="none" if dom else "C0", edgecolors="C0")
        ax.annotate(name, (x, 100 * y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if all(x > 0 for _, x, _, _ in points):
        ax.set_xscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


__all__ = ["grouped_bars", "histogram", "lines", "pareto", "reliability"]
