"""The scaling curves of bench/README.md in one PNG, with the fits that say how each cost grows.

Reads the rows the scaling benchmarks wrote (``--json``) and draws, against corpus size, the index build time,
its peak memory and the search time per query (BM25 ``okapi`` / ``lucene`` from ``bench_bm25_scale.py``, dense
MiniLM from ``bench_dense_scale.py``, every ``dense_scale*.json``), reranking time against k (``bench_rerank_scale.py``) and the reader's step
time against d (``bench_reader.py``). Each series gets a least-squares line; for the corpus-size series it prints
the size at which the build's peak memory reaches ``--memory-gib`` (24 GiB: this project's machine).

    python bench/plot_scaling.py --results bench/results --out bench/results/scaling.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = intercept + slope * x``; returns (intercept, slope)."""
    slope, intercept = np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)
    return float(intercept), float(slope)


def size_at(limit: float, intercept: float, slope: float) -> float | None:
    """Where a growing line reaches ``limit`` (None when it does not grow)."""
    return (limit - intercept) / slope if slope > 0 else None


def corpus_series(results: Path) -> dict[str, dict[str, list[float]]]:
    """Per corpus-size series name: sizes, build seconds, build peak GiB, search ms per query."""
    series: dict[str, dict[str, list[float]]] = {}

    def add(name: str, size: float, build: float, memory: float, search_ms: float) -> None:
        s = series.setdefault(name, {"size": [], "build_s": [], "memory_gib": [], "search_ms": []})
        for key, value in zip(s, (size, build, memory, search_ms), strict=True):
            s[key].append(value)

    bm25 = results / "bm25_scale.json"
    for row in json.loads(bm25.read_text()) if bm25.exists() else []:
        for method in ("okapi", "lucene"):
            add(f"BM25 {method}", row["docs"], row[f"{method}_build_s"], row["peak_rss_gib"],
                1e3 * row[f"{method}_compiled_s"] / row["queries"])
    rows = [row for path in sorted(results.glob("dense_scale*.json")) for row in json.loads(path.read_text())]
    for row in sorted(rows, key=lambda r: r["docs"]):
        add(f"MiniLM {row['dtype']}", row["docs"], row["build_s"], row["build_peak_rss_gib"],
            1e3 * row["search_s"] / row["queries"])
    return series


def summary(series: dict[str, dict[str, list[float]]], memory_gib: float) -> list[str]:
    """One line per corpus-size series: build time and memory as lines in the size, where memory hits the limit."""
    lines = []
    for name, s in series.items():
        if len(s["size"]) < 2:
            continue
        b0, b1 = line_fit(s["size"], s["build_s"])
        m0, m1 = line_fit(s["size"], s["memory_gib"])
        q0, q1 = line_fit(s["size"], s["search_ms"])
        limit = size_at(memory_gib, m0, m1)
        lines.append(f"{name}: build {b0:.1f} s + {1e6 * b1:.1f} s per million sentences; peak memory "
                     f"{m0:.2f} GiB + {1e6 * m1:.2f} GiB per million; search {q0:.2f} ms + {1e6 * q1:.2f} ms per "
                     f"million per query; {memory_gib:g} GiB reached at "
                     + (f"about {limit / 1e6:.1f}M sentences" if limit else "no size (memory does not grow)"))
    return lines


def plot(results: Path, out: Path, memory_gib: float) -> list[str]:
    """Draw the PNG; returns the summary lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = corpus_series(results)
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    panels = (("build_s", "index build (s)"), ("memory_gib", "peak memory of the build (GiB)"),
              ("search_ms", "search per query, top-150 (ms)"))
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        for name, s in series.items():
            ax.plot(s["size"], s[key], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("corpus sentences")
        ax.set_ylabel(label)
        ax.set_title(label.split(" (")[0])
        ax.grid(True, which="both", alpha=0.3)
        if key == "memory_gib":
            ax.axhline(memory_gib, color="red", linestyle="--", label=f"{memory_gib:g} GiB machine")
        ax.legend(fontsize=8)
    rerank = results / "rerank_scale.json"
    ax = axes[1][0]
    if rerank.exists():
        rows = json.loads(rerank.read_text())
        ax.plot([r["k"] for r in rows], [r["seconds"] for r in rows], marker="o", label="seconds")
        ax2 = ax.twinx()
        ax2.plot([r["k"] for r in rows], [r["distinct"] for r in rows], marker="s", color="gray",
                 label="distinct sentences")
        ax2.set_ylabel("distinct candidate sentences")
        ax.set_title(f"reranking {rows[0]['inputs']} inputs (SmolLM2-135M)")
        ax.legend(loc="upper left", fontsize=8)
        ax2.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("k (candidates per input)")
    ax.set_ylabel("seconds")
    reader = results / "reader_scale.json"
    for ax, key, label in ((axes[1][1], "s_per_step", "seconds per training step"),
                           (axes[1][2], "peak_rss_gib", "peak memory (GiB)")):
        if reader.exists():
            rows = json.loads(reader.read_text())
            ax.plot([r["d"] for r in rows], [r[key] for r in rows], marker="o", label="bert2bert-MiniLM, batch 8")
            ax.legend(fontsize=8)
        ax.set_xlabel("d (evidence passages per input)")
        ax.set_ylabel(label)
        ax.set_title(f"FiD reader: {label.split(' (')[0]}")
        ax.grid(True, alpha=0.3)
    fig.suptitle("pgra scaling on 2 CPU cores")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return summary(series, memory_gib)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "bench/results"))
    ap.add_argument("--out", default=str(ROOT / "bench/results/scaling.png"))
    ap.add_argument("--memory-gib", type=float, default=24.0)
    args = ap.parse_args()
    for line in plot(Path(args.results), Path(args.out), args.memory_gib):
        print(line)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
