"""First-stage retrievers compared (the paper's Figure 6): FiD and PGRA over each retriever's candidates, each other
retriever run into ``analysis/retrievers/<name>/``."""

from __future__ import annotations

from typing import Any

from ..core.errors import InputError
from ..experiment import Experiment
from ..results.metrics import mean_std
from ..retrieval.base import get_retriever
from ..storage.artifacts import path_under
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .plots import grouped_bars
from .variants import run_variants, variant_config, variant_metric
from .writer import Writer, pct

COMPARED = ("fid", "pgra")


def retriever_name(index) -> str:
    """A short name of an index config, its retriever's (``bm25``, a dense encoder's folder name ...)."""
    return get_retriever(index).display_name()


def retriever_configs(runs: ExperimentRuns) -> dict[str, Any]:
    """The variant config of every compared retriever (its own index, FiD and PGRA over it), by name; nothing runs."""
    cfg = runs.cfg
    main = retriever_name(cfg.index)
    configs = {}
    for name, spec in cfg.analysis.retrievers.items():
        if not isinstance(spec, dict):
            raise InputError("must be a mapping of index settings", field=f"analysis.retrievers.{name}")
        if name == main:
            raise InputError(f"'{name}' is the experiment's own retriever; give the compared one another name",
                             field=f"analysis.retrievers.{name}")
        index = {"out": f"{cfg.index.out.rstrip('/')}-{name}", **spec}
        configs[name] = variant_config(cfg, path_under(runs.out, "retrievers", name), compared_methods(cfg),
                                       cfg.seeds, index=index)
    return configs


def compared_methods(cfg) -> list[str]:
    """FiD and PGRA, those of them the grid runs (both when it runs neither)."""
    return [m for m in COMPARED if m in cfg.methods] or list(COMPARED)


def retriever_variants(runs: ExperimentRuns) -> list[tuple[str, Experiment]]:
    """The compared retrievers' grids as :func:`compare_retrievers` would run them (for ``pgra analyze --dry-run``)."""
    return [(f"retriever {name}", Experiment(vcfg)) for name, vcfg in retriever_configs(runs).items()]


def compare_retrievers(runs: ExperimentRuns, ctx) -> list[dict[str, Any]]:
    """One row per retriever, task and method: the metric's mean ± std over seeds."""
    cfg = runs.cfg
    methods, main = compared_methods(cfg), retriever_name(cfg.index)
    configs = retriever_configs(runs)
    variants = dict(zip(configs, run_variants(runs, list(configs.values()), ctx, share_candidates=False),
                        strict=True))
    if not ctx.is_main:
        return []
    rows = []
    for task in cfg.tasks:
        for m in methods:
            if values := runs.metric_values(task, m):
                rows.append(_row(runs, task, main, m, values, cfg.index.out))
            for name, variant in variants.items():
                values = variant_metric(runs, variant, task, m)
                rows.append(_row(runs, task, name, m, values, variant.cfg.index.out))
    return rows


def _row(runs: ExperimentRuns, task: str, retriever: str, method: str, values: list[float], index: str) -> dict:
    mean, std = mean_std(values) if values else (float("nan"), 0.0)
    return {"task": runs.task_name(task), "retriever": retriever, "method": method, "mean": mean, "std": std,
            "seeds": len(values), "index": index, "metric": runs.task_spec(task).metric}


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    w.section("retrievers", rows, "First-stage retrievers",
              ("FiD and PGRA over each retriever's candidates (the paper's Figure 6)."),
              ["task", "retriever", "method", "metric (%)", "seeds"],
              lambda r: (r["task"], r["retriever"], r["method"], f"{pct(r['mean'])} ± {pct(r['std'])}", r["seeds"]))
    retrievers = list(dict.fromkeys(r["retriever"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    avg, err = {}, {}
    for m in methods:
        avg[m], err[m] = [], []
        for name in retrievers:
            sel = [r for r in rows if r["method"] == m and r["retriever"] == name and r["seeds"]]
            avg[m].append(sum(r["mean"] for r in sel) / len(sel) if sel else float("nan"))
            err[m].append(sel[0]["std"] if len(sel) == 1 else 0.0)
    tasks = sorted({r["task"] for r in rows})
    scope = tasks[0] if len(tasks) == 1 else f"average over {len(tasks)} tasks"
    path = grouped_bars(w.runs.out / "retrievers.png", retrievers, avg, f"FiD and PGRA by first-stage retriever ({scope})",
                        f"{w.runs.split} metric (%)", "first-stage retriever", err)
    w.figure(path, "Retriever comparison", f"{w.runs.split} metric of FiD and PGRA over each first-stage retriever "
             f"({scope}; error bars: std over seeds).")


register_analysis(Analysis("retrievers", compute=lambda runs, ctx: compare_retrievers(runs, ctx), render=render,
                           config=dict[str, Any],
                           help="first-stage retrievers compared with the experiment's: {name: {index settings}} (FiD and PGRA each)",
                           every_process=True, path_segment=True, variants=retriever_variants))


__all__ = ["compare_retrievers", "compared_methods", "retriever_configs", "retriever_name", "retriever_variants"]
