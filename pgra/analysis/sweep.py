"""k and d sweeps of PGRA, reusing the experiment's cached evidence embeddings (the reranker's size is the
consistency analysis's ``rerank_lms`` axis). Each point is a variant of the experiment; the points' stages run
from the largest k down, so the later ones find the embeddings cached. docs/analyses.md tells the rest."""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import MAX_ITEMS, SEED_MAX, option
from ..core.errors import InputError
from ..experiment import Experiment
from ..results.metrics import mean_std
from ..selection import STRATEGIES
from ..storage.artifacts import MANIFEST, read_json
from .base import Analysis, register_analysis
from .consistency import evidence_consistency, task_labeller
from .inputs import ExperimentRuns
from .plots import lines
from .variants import is_experiment, run_variants, variant_config, variant_metric
from .writer import Writer, pct


@dataclass
class SweepConfig:
    """PGRA with other k and d; the other value stays the experiment's."""

    k: list[int] = option(default_factory=lambda: [16, 50, 100, 150], max=MAX_ITEMS,
                          help="candidates reranked per input (at most the retrieved k)")
    d: list[int] = option(default_factory=lambda: [4, 8, 16, 24], max=MAX_ITEMS, help="evidence sentences the reader reads")
    seeds: list[int] = option(default_factory=list, min=0, max=SEED_MAX, path_segment=True,
                              help="seeds of each point (default: the experiment's)")


def sweep_points(ks: list[int], ds: list[int], k0: int, d0: int, k_max: int) -> list[tuple[int, int]]:
    """The (k, d) points of both sweeps (k with d0, d with k0), without repeats, largest k first."""
    for k in ks:
        if not 1 <= k <= k_max:
            raise InputError(f"k={k} is outside 1..{k_max} (the candidates' retrieve.k)", field="analysis.sweep.k")
        if k < d0:
            raise InputError(f"k={k} is below the experiment's d={d0}", field="analysis.sweep.k")
    for d in ds:
        if not 1 <= d <= k0:
            raise InputError(f"d={d} is outside 1..{k0} (the experiment's rerank.k)", field="analysis.sweep.d")
    points = dict.fromkeys([(k, d0) for k in ks] + [(k0, d) for d in ds])
    return sorted(points, key=lambda p: (-p[0], p[1]))


def _embedded(folder: Path) -> dict[str, int]:
    e = read_json(folder / MANIFEST)["embedding"]
    return {"embedded_texts": int(e["texts"]), "evidence_rows": int(e.get("evidence_rows", 0)),
            "evidence_cache_hits": int(e.get("evidence_cache_hits", 0))}


@dataclass
class SweepPoint:
    """One (k, d) point of a task's sweep: the variant config that runs it, and the experiment's own k0 and d0."""

    task: str
    k: int
    d: int
    k0: int
    d0: int
    cfg: Any


def sweep_plan(runs: ExperimentRuns, planning: bool = False) -> list[SweepPoint]:
    """Every task's points, largest k first, each a PGRA-only variant config (``planning``: before candidates)."""
    cfg = runs.cfg
    if "pgra" not in cfg.methods:
        raise InputError("the k and d sweeps vary PGRA: add pgra to methods", field="methods")
    seeds = cfg.analysis.sweep.seeds or cfg.seeds
    points = []
    for task in cfg.tasks:
        s = runs.settings(task, "pgra")
        manifest = runs.experiment.stage_dir(task, "candidates") / MANIFEST
        if manifest.exists():
            k_max = int(read_json(manifest)["k"])
        elif planning:
            k_max = runs.experiment.retrieve_config(task).k
        else:
            raise InputError(f"{manifest.parent} holds no candidates: run `pgra experiment` first",
                             path=manifest.parent)
        k0, d0 = s.rerank.k or k_max, s.reader.n_passages
        for k, d in sweep_points(cfg.analysis.sweep.k, cfg.analysis.sweep.d, k0, d0, k_max):
            out = runs.out / "sweep" / runs.task_name(task) / f"k{k}-d{d}"
            vcfg = variant_config(cfg, out, ["pgra"], seeds, {"rerank": {"k": k, "top_d": d},
                                                               "reader": {"n_passages": d}})
            vcfg.tasks = [task]
            points.append(SweepPoint(task, k, d, k0, d0, vcfg))
    return points


def sweep_variants(runs: ExperimentRuns) -> list[tuple[str, Experiment]]:
    """The sweep's grids as :func:`run_sweeps` would run them (for ``pgra analyze --dry-run``)."""
    return [(f"{runs.task_name(p.task)} k={p.k} d={p.d}", Experiment(p.cfg, candidates_from=runs.experiment))
            for p in sweep_plan(runs, planning=True)]


def run_sweeps(runs: ExperimentRuns, ctx) -> list[dict[str, Any]]:
    """Run (or reuse) every point, largest k first; one row per task and point (k, d, metric, embedded)."""
    cfg = runs.cfg
    plan = sweep_plan(runs)
    if ctx.is_main:
        for task in dict.fromkeys(p.task for p in plan):
            s = runs.settings(task, "pgra")
            if STRATEGIES[s.rerank.demo_selection].per_query:
                warnings.warn(f"rerank.demo_selection={s.rerank.demo_selection} gives each query its own prompt, "
                              "cached per query and candidate list: every k of the sweep embeds its texts again",
                              stacklevel=2)
    variants = run_variants(runs, [p.cfg for p in plan], ctx, share_candidates=True)
    if not ctx.is_main:
        return []
    rows = []
    labellers: dict[str, Any] = {}  # loaded once the points' cells have run (no model held beside theirs)
    for p, variant in zip(plan, variants, strict=True):
        task, k, d = p.task, p.k, p.d
        if task not in labellers:
            labellers[task] = _labeller(runs, task)
        labeller = labellers[task]
        own = not is_experiment(runs, variant)  # not a leftover folder of an earlier sweep at this point
        folder = variant.stage_dir(task, "reranked") if own else runs.experiment.stage_dir(task, "reranked")
        embedded = _embedded(folder)
        consistency = (evidence_consistency(labeller, list(runs.records(task, folder).values()), d)["share"]
                       if labeller else None)
        values = variant_metric(runs, variant, task, "pgra")
        mean, std = mean_std(values) if values else (float("nan"), 0.0)
        rows.append({"task": runs.task_name(task), "k": k, "d": d, "sweep": _which(k, d, p.k0, p.d0, cfg),
                     "mean": mean, "std": std, "seeds": len(values), "metric": runs.task_spec(task).metric,
                     "consistency": consistency,
                     "experiment_cell": not own, **({"embedded_texts": 0} if not own else embedded)})
    return rows


def _labeller(runs: ExperimentRuns, task: str):
    """The no-retrieval reader labelling the sweep's evidence; None, with a warning, without its cell."""
    seed = runs.cfg.analysis.consistency.labeller_seed or runs.cfg.seeds[0]
    if "no_retrieval" not in runs.cfg.methods:
        return None
    if runs.cell(task, "no_retrieval", seed) is None:
        warnings.warn(f"the sweep reports no label consistency for {runs.task_name(task)}: its no_retrieval cell at "
                      f"seed {seed} is not finished", stacklevel=2)
        return None
    return task_labeller(runs, task)


def _which(k: int, d: int, k0: int, d0: int, cfg) -> list[str]:
    sweeps = cfg.analysis.sweep
    return [name for name, on in (("k", d == d0 and k in sweeps.k), ("d", k == k0 and d in sweeps.d)) if on]


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    w.section("sweep", rows, "k and d sweeps (PGRA)",
              ("Each point reranks the first k candidates and reads the top d; "
               "`embedded` counts the texts the reranker's LM embedded for that point (0: all from the cache; "
               "`experiment` marks a point that is the experiment's own cell)."),
              ["task", "k", "d", "metric (%)", "seeds", "label consistency (%)", "embedded"],
              lambda r: (r["task"], r["k"], r["d"], f"{pct(r['mean'])} ± {pct(r['std'])}", r["seeds"],
                         "n/a" if r.get("consistency") is None else pct(r["consistency"]),
                         "experiment" if r["experiment_cell"] else r["embedded_texts"]))
    w.md += [f"Texts embedded by the sweep: {sum(r['embedded_texts'] for r in rows)}.", ""]
    for axis, fixed in (("k", "d"), ("d", "k")):
        sel = [r for r in rows if axis in r["sweep"]]
        if not sel:
            continue
        xs, ys, es = defaultdict(list), defaultdict(list), defaultdict(list)
        for r in sorted(sel, key=lambda r: r[axis]):
            label = f"{r['task']} ({fixed}={r[fixed]})"
            xs[label].append(r[axis])
            ys[label].append(r["mean"])
            es[label].append(r["std"])
        metric = sel[0]["metric"]
        path = lines(w.runs.out / f"sweep_{axis}.png", dict(xs), dict(ys),
                     f"PGRA against {axis} ({'candidates reranked' if axis == 'k' else 'evidence read'})",
                     f"{axis} ({'candidates reranked per input' if axis == 'k' else 'evidence sentences per input'})",
                     f"{w.runs.split} {metric} (%)", dict(es))
        w.figure(path, f"Sweep over {axis}", f"PGRA's {w.runs.split} {metric} (mean ± std over seeds) against {axis}, "
                 f"{fixed} fixed at the experiment's value.")
    _consistency_figure(w, [r for r in rows if "k" in r["sweep"] and r.get("consistency") is not None])


def _consistency_figure(w: Writer, rows: list[dict[str, Any]]) -> None:
    """The k sweep's label consistency against k, one line per task (none without a no-retrieval cell)."""
    if not rows:
        return
    xs, ys = defaultdict(list), defaultdict(list)
    for r in sorted(rows, key=lambda r: r["k"]):
        label = f"{r['task']} (d={r['d']})"
        xs[label].append(r["k"])
        ys[label].append(r["consistency"])
    path = lines(w.runs.out / "sweep_k_consistency.png", dict(xs), dict(ys), "Label consistency of PGRA's evidence "
                 "against k", "k (candidates reranked per input)", f"{w.runs.split} consistent evidence (%)")
    w.figure(path, "Label consistency against k", "Share of the top d evidence whose no-retrieval pseudo-label "
             "equals the input's gold label, per k of the sweep.")


register_analysis(Analysis("sweep", compute=lambda runs, ctx: run_sweeps(runs, ctx), render=render,
                           config=SweepConfig, help='k and d sweeps of PGRA', every_process=True,
                           variants=sweep_variants))


__all__ = ["SweepPoint", "run_sweeps", "sweep_plan", "sweep_points", "sweep_variants"]
