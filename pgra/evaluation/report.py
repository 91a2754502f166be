"""``pgra report DIR``: the paper's Table 2 layout over an experiment's cells, with seeds and significance
(``results.md``, ``results.json``, ``results.html``); docs/experiments.md tells how to read it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.errors import IncompleteArtifactError
from ..core.markdown import md_table, md_text
from ..methods import METHODS
from ..methods.reader_method import ReaderMethod
from ..results.metrics import mean_std
from ..results.predictions import cell_task, inputs_fingerprint
from ..runtime.environment import cells_environment
from ..storage.artifacts import read_json, write_json, write_text
from ..storage.ownership import check_replaceable, claim_folder, read_record, record_files
from ..tasks import task_names
from ..tasks.spec import TaskSpec
from .cells import REPORT_FILES, CellResult, drop_superseded
from .diagnostics import demonstration_diagnostics, format_histogram, mean_of
from .merge import merged_cells
from .page import analysis_figures, write_page
from .resolution import DEFAULT_ALPHA, DEFAULT_POWER, bootstrap_se, holm, minimum_detectable_effect
from .significance import average_replicates, paired_bootstrap
from .targets import compare, format_comparison

STILL_IMPROVING = "↑"
DETERMINISTIC = "(det.)"
NOT_SAME_INPUTS = "⚠"  # methods of a task trained on different numbers of inputs
# the floor every trained reader should beat: a logistic regression on frozen sentence embeddings (no retrieval,
# no LM); a reader below it on a task is marked BELOW_FLOOR
FLOOR_METHOD = "linear_probe"
BELOW_FLOOR = "▽"
BELOW_FLOOR_KEY = f"below_{FLOOR_METHOD}"
BELOW_RESOLUTION = "≈"  # a difference smaller than the comparison's minimum detectable effect
# below this many shared test inputs a bootstrap p-value is too coarse to star: the report shows the interval only
MIN_TEST_INPUTS = 30


def _order(names: list[str], preferred: list[str]) -> list[str]:
    return [n for n in preferred if n in names] + sorted(n for n in names if n not in preferred)


def _train_inputs_note(tasks: list[str], summary: dict[str, dict[str, Any]]) -> str | None:
    """The note on the training inputs of the methods that train, per task (None when none recorded)."""
    parts, differ = [], []
    for t in tasks:
        counts = {m: s[t]["train_inputs"] for m, s in summary.items() if s.get(t, {}).get("train_inputs")}
        missing = [m for m, s in summary.items() if s.get(t, {}).get("train_inputs_unrecorded")]
        if not counts:
            continue
        values = {v for vs in counts.values() for v in vs}
        if len(values) == 1 and not missing:
            parts.append(f"{t} {values.pop():,}")
            continue
        parts.append(f"{t}: " + ", ".join(f"{m} {'/'.join(f'{v:,}' for v in vs)}" for m, vs in counts.items())
                     + (f" (not recorded: {', '.join(missing)}, cells from before pgra recorded it)" if missing else ""))
        if len(values) > 1:
            differ.append(t)
    if not parts:
        return None
    note = "Training inputs of the methods that train: " + "; ".join(parts) + "."
    if differ:
        note += (f" {NOT_SAME_INPUTS} not the same inputs on {', '.join(differ)}: a gap between those methods is also "
                 "one of training data.")
    return note


def build_report(directory: str | Path | Sequence[str | Path], reference: str = "fid", split: str = "test",
                 n_resamples: int = 10000, seed: int = 0, min_inputs: int = MIN_TEST_INPUTS) -> dict[str, Any]:
    """The report's content (rows, summary, tests) over the cells of one or several folders or bundles, merged."""
    sources = [Path(directory)] if isinstance(directory, (str, Path)) else [Path(d) for d in directory]
    merged, merge_info = merged_cells(sources, split)
    cells, superseded = drop_superseded(merged)
    tasks = _order(list({c.task for c in cells}), task_names())  # the paper's task order, then the others
    methods = _order(list({c.method for c in cells}), list(METHODS))
    specs: dict[str, TaskSpec] = {}
    for c in cells:
        if c.task not in specs:
            specs[c.task] = cell_task(c.record)
    by: dict[tuple[str, str], list[CellResult]] = {}
    for c in sorted(cells, key=lambda c: c.seed):
        by.setdefault((c.task, c.method), []).append(c)
    rows = [{"task": c.task, "method": c.method, "seed": c.seed, "split": s, "metric": c.record["metric"],
             "value": r[c.record["metric"]]}
            for c in cells for s, r in c.record["results"].items()]
    tests = _significance(by, specs, tasks, methods, reference, n_resamples, seed) if reference in methods else {}
    _adjust_holm(tests, tasks)
    return {"directory": ", ".join(str(p) for p in sources), "sources": merge_info["sources"],
            "duplicates": merge_info["duplicates"], "split": split,
            "environment": cells_environment([c.record for c in cells]), "reference": reference, "tasks": tasks,
            "methods": methods, "summary": _summary(by, tasks, split), "significance": tests,
            "diagnostics": _diagnostics(by, specs, tasks, methods),
            "bootstrap": {"n_resamples": n_resamples, "seed": seed,
                          "protocol": "paired over the shared test inputs and seeds; two-sided, null-centred; a "
                                      "seed-independent run repeated for every seed of the other side"},
            "min_inputs": min_inputs,
            "resolution": {"alpha": DEFAULT_ALPHA, "power": DEFAULT_POWER,
                           "mde": "(z_{1-alpha/2} + z_power) x the standard deviation of the bootstrap's resampled "
                                  "differences (over the test inputs and seeds)",
                           "holm": {"p_holm_task": "family: the methods compared with the reference on one task",
                                    "p_holm_all": "family: every task x method comparison of the table (averages "
                                                  "over tasks left out)"}},
            "floor": FLOOR_METHOD, "rows": rows, "cells": [_cell_provenance(c) for c in cells],
            "ignored_cells": [{"path": str(c.path.parent), "used": f"seed-{by[(c.task, c.method)][0].seed}",
                               "reason": "a seed-independent method's cell at another seed (an older run)"}
                              for c in superseded]}


def _summary(by: dict[tuple[str, str], list[CellResult]], tasks: list[str], split: str) -> dict[str, dict[str, Any]]:
    """Per method and task: mean and std over seeds, still improving, training inputs; per method its average."""
    summary: dict[str, dict[str, Any]] = {}
    for (task, method), group in by.items():
        values = [g.record["results"][split][g.record["metric"]] for g in group]
        mean, std = mean_std(values)
        flags = [g.record.get("still_improving") for g in group]
        recorded = [g.record.get("train_inputs") for g in group]
        trained = sorted({v for v in recorded if isinstance(v, int) and not isinstance(v, bool)})
        # a reader's cell written before cells recorded their training inputs
        unrecorded = method in METHODS and issubclass(METHODS[method], ReaderMethod) and None in recorded
        summary.setdefault(method, {})[task] = {
            "train_inputs": trained, **({"train_inputs_unrecorded": True} if unrecorded else {}),
            "mean": mean, "std": std, "n": len(values), "seeds": [g.seed for g in group],
            "metric": group[0].record["metric"], "still_improving": sum(bool(f) for f in flags),
            "improvement_checked": sum(f is not None for f in flags),
            "seed_independent": all(g.seed_independent for g in group)}
    _compare_with_floor(summary, METHODS)
    for per_task in summary.values():
        if all(t in per_task for t in tasks):
            per_task["average"] = {"mean": sum(per_task[t]["mean"] for t in tasks) / len(tasks),
                                   "n": min(per_task[t]["n"] for t in tasks)}
    return summary


def _paired_runs(a: list[CellResult], b: list[CellResult]) -> tuple[list, list, bool]:
    """The runs of two methods as the bootstrap pairs them, and whether their seeds pair: a seed-independent
    method's one run is repeated once per seed of the other side (two such runs pair with each other)."""
    runs_a, runs_b = ([[p["prediction"] for p in c.predictions] for c in g] for g in (a, b))
    seeds_a, seeds_b = [c.seed for c in a], [c.seed for c in b]
    fixed_a, fixed_b = all(c.seed_independent for c in a), all(c.seed_independent for c in b)
    if fixed_a and fixed_b:
        seeds_a = seeds_b = seeds_b[:1]
    elif fixed_a:
        runs_a, seeds_a = runs_a[:1] * len(runs_b), seeds_b
    elif fixed_b:
        runs_b, seeds_b = runs_b[:1] * len(runs_a), seeds_a
    return runs_a, runs_b, seeds_a == seeds_b


def _significance(by: dict[tuple[str, str], list[CellResult]], specs: dict[str, Any], tasks: list[str],
                  methods: list[str], reference: str, n_resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """Per method and task (and their average), the paired bootstrap of its difference from ``reference``."""
    tests: dict[str, dict[str, Any]] = {}
    for method in (m for m in methods if m != reference):
        per_task, results = {}, []
        for task in tasks:
            if (task, method) not in by or (task, reference) not in by:
                continue
            a, b = by[(task, method)], by[(task, reference)]
            runs_a, runs_b, paired = _paired_runs(a, b)
            spec = specs[task]
            gold = [str(p["label"]) for p in a[0].predictions]
            res = paired_bootstrap(gold, runs_a, runs_b, spec.labels, spec.metric, n_resamples=n_resamples,
                                   seed=seed, paired_seeds=paired)
            results.append(res)
            per_task[task] = {"delta": res.delta, "p_value": res.p_value, "ci": [res.ci_low, res.ci_high],
                              "seeds": [c.seed for c in a], "paired_seeds": paired,
                              "seed_independent": {"method": all(c.seed_independent for c in a),
                                                   "reference": all(c.seed_independent for c in b)},
                              "inputs": len(gold), **_resolution(res)}
        if len(results) == len(tasks) and len(tasks) > 1:
            avg = average_replicates(results)
            per_task["average"] = {"delta": avg.delta, "p_value": avg.p_value, "ci": [avg.ci_low, avg.ci_high],
                                   "inputs": min(per_task[t]["inputs"] for t in tasks), **_resolution(avg)}
        if per_task:
            tests[method] = per_task
    return tests


def _resolution(res) -> dict[str, Any]:
    """A comparison's minimum detectable effect (None under 2 resamples) and whether its difference is below it."""
    if res.n_resamples < 2:
        return {"se": None, "mde": None, "below_resolution": None}
    se = bootstrap_se(res.replicates)
    mde = minimum_detectable_effect(se, DEFAULT_ALPHA, DEFAULT_POWER)
    return {"se": se, "mde": mde, "below_resolution": abs(res.delta) < mde}


def _adjust_holm(tests: dict[str, dict[str, Any]], tasks: list[str]) -> None:
    """Add Holm-adjusted p-values to every per-task test: per task (``p_holm_task``) and table (``p_holm_all``)."""
    def adjust(members: list[tuple[str, str]], field: str) -> None:
        for (m, t), p in zip(members, holm([tests[m][t]["p_value"] for m, t in members]), strict=True):
            tests[m][t][field] = p

    every = [(m, t) for m in tests for t in tasks if t in tests[m]]
    for task in tasks:
        adjust([(m, t) for m, t in every if t == task], "p_holm_task")
    adjust(every, "p_holm_all")


def _compare_with_floor(summary: dict[str, dict[str, Any]], registry: dict[str, Any]) -> None:
    """Mark, per task, every trained method whose mean is below the floor method's (``below_<floor>``)."""
    floor = summary.get(FLOOR_METHOD, {})
    for method, per_task in summary.items():
        cls = registry.get(method)
        if method == FLOOR_METHOD or cls is None or not cls.trained:
            continue
        for task, s in per_task.items():
            if task in floor and task != "average":
                s[BELOW_FLOOR_KEY] = s["mean"] < floor[task]["mean"]


def _diagnostics(by, specs, tasks: list[str], methods: list[str]) -> dict[str, dict[str, Any]]:
    """Per method and task, averaged over seeds: the demonstrations' numbers and the LM cost."""
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        for task in tasks:
            group = by.get((task, method), [])
            demos = [d for c in group if (d := demonstration_diagnostics(c.predictions, specs[task].labels))]
            costs = [c.record["lm_cost"] for c in group if c.record.get("lm_cost")]
            if not demos and not costs:
                continue
            entry: dict[str, Any] = {"seeds": len(group)}
            if demos:
                entry["demonstrations"] = mean_of(demos)
            if costs:
                entry["lm_calls"] = sum(c["lm_calls"] for c in costs) / len(costs)
                entry["lm_tokens"] = sum(c["lm_tokens"] for c in costs) / len(costs)
            out.setdefault(method, {})[task] = entry
    return out


def _format_resolution(report: dict[str, Any]) -> list[str]:
    """The table of minimum detectable effects (points) of every comparison with the reference."""
    tests, tasks, res = report["significance"], report["tasks"], report["resolution"]
    lines = ["", f"## What the grid can resolve: minimum detectable effect against {report['reference']} (points)", "",
             f"The smallest true difference a two-sided test at alpha = {res['alpha']:g} finds with power "
             f"{res['power']:g}: 2.80 x the standard error of the difference (the spread of the bootstrap's resampled "
             "differences, over the test inputs and the seeds). More test inputs or seeds make it smaller. With "
             "several seeds it is conservative: resampling inputs and seeds both counts the input x seed interaction "
             "twice (on the laptop grid's 3 seeds the MDEs are about 20-30% larger than the crossed design's standard "
             "error gives).", ""]

    def mde(r: dict[str, Any] | None) -> str:
        return "–" if not r or r.get("mde") is None else f"{100 * r['mde']:.1f}"

    rows = [[m, *(mde(tests[m].get(t)) for t in [*tasks, "average"])] for m in report["methods"] if tests.get(m)]
    return lines + md_table(["method", *tasks, "avg"], rows)


def _format_environment(report: dict[str, Any]) -> list[str]:
    """Where the cells ran, as they recorded it: each distinct hardware and library set with its cells' count."""
    env = report.get("environment") or {}
    if not env.get("cells"):
        return []
    lines = ["", "## Environment", "", "Where the cells ran, as each recorded it (cells in parentheses):", ""]
    for h in env.get("hardware", []):
        v = h["value"]
        lines.append(f"- hardware: {md_text(str(v.get('device') or '?'))}, CPU {md_text(str(v.get('cpu') or '?'))}, "
                     f"{v.get('cores') or '?'} cores ({h['cells']})")
    for entry in env.get("versions", []):
        v = entry["value"] or {}
        shown = ", ".join(f"{k} {v[k]}" for k in ("python", "torch", "transformers", "faiss-cpu", "faiss-gpu-cu12")
                          if k in v)
        lines.append(f"- versions: {md_text(shown or 'not recorded')} ({entry['cells']})")
    precision = [f"{p['value'] or 'not recorded'} ({p['cells']})" for p in env.get("reader_precision", [])]
    if precision:
        lines.append(f"- reader precision: {md_text(', '.join(precision))}")
    return lines


def _format_diagnostics(report: dict[str, Any]) -> list[str]:
    if not (diag := report.get("diagnostics") or {}):
        return []
    lines = ["", "## Demonstrations and LM cost", "",
             "Per method, the demonstrations its predictions were made from (in-context learning: the prompt's; "
             "PGRA: the reranker's prompt; kNN vote: the voters), averaged over seeds: the label histogram, how "
             "often the prediction is their majority label (a tie counts when the prediction is one of the tied "
             "labels: a balanced prompt such as PGRA's ties them all), how often the gold label is among them; "
             "and the LM inputs and tokens the method ran (Skill-KNN's rewrites and PGRA's reranking included; "
             "cached work counts what it cost when made, except reranking, which counts what its stage ran).", ""]

    def cells(e: dict[str, Any]) -> list[str]:
        d = e.get("demonstrations")
        return ([f"{d['demos_per_input']:.1f}", format_histogram(d["label_histogram"]), _pct(d["majority_agreement"]),
                 _pct(d["gold_in_demos"])] if d else ["–"] * 4) + \
            ([f"{e['lm_calls']:,.0f}", f"{e['lm_tokens']:,.0f}"] if "lm_calls" in e else ["–", "–"])

    return lines + md_table(["method", "task", "demos / input", "demonstration labels", "prediction = majority",
                             "gold among them", "LM inputs", "LM tokens"],
                            ([m, t, *cells(e)] for m in report["methods"] for t, e in diag.get(m, {}).items()))


def _cell_provenance(c: CellResult) -> dict[str, Any]:
    r = c.record
    return {"task": c.task, "method": c.method, "seed": c.seed, "path": str(c.path.parent),
            "settings": r.get("settings"), "config": r.get("config"), "git_commit": r.get("git_commit"),
            "versions": r.get("versions"), "data": r.get("data"), "steps": r.get("steps"),
            "best_step": r.get("best_step"), "still_improving": r.get("still_improving"),
            "inputs_sha256": inputs_fingerprint(c.predictions)}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def format_markdown(report: dict[str, Any]) -> str:
    """``results.md``: the results table and the significance table, with notes."""
    ref = report["reference"]
    lines = [f"# Results on {report['split']} ({report['directory']})", "",
             "Mean ± standard deviation over seeds (number of seeds), in percent.", "", *_results_table(report)]
    if report["significance"]:
        lines += _differences_table(report) + _format_resolution(report)
    elif ref not in report["methods"]:
        lines += ["", f"No significance tests: the reference method '{ref}' has no runs here (--reference)."]
    lines += _format_diagnostics(report) + format_comparison(report) + _format_environment(report)
    commits = sorted({str(c["git_commit"]) for c in report["cells"]})
    lines += ["", f"{len(report['cells'])} runs; pgra commit(s): {', '.join(commits)}. Configs, seeds, versions and "
              "data fingerprints: results.json."]
    return "\n".join(lines) + "\n"


def _results_table(report: dict[str, Any]) -> list[str]:
    """The results table (a method a row, a task a column) and the notes on its marks."""
    tasks, summary = report["tasks"], report["summary"]
    metrics = {t: next(summary[m][t]["metric"] for m in summary if t in summary[m]) for t in tasks}
    header = ["method", *[f"{t} ({'MCC' if metrics[t] == 'mcc' else metrics[t]})" for t in tasks], "avg"]
    rows = [[m, *(_mean_cell(summary[m].get(t)) for t in tasks),
             _pct(avg["mean"]) if (avg := summary[m].get("average")) else "–"] for m in report["methods"]]
    lines = md_table(header, rows)
    shown = [s for m in report["methods"] for t in tasks if (s := summary[m].get(t))]
    notes = []
    if any(s.get("seed_independent") for s in shown):
        notes.append(f"{DETERMINISTIC} deterministic: the seed cannot change this method's predictions, so it ran "
                     "once per task (no spread over seeds); significance tests pair that run with every seed of "
                     "the other method.")
    if any(s.get(BELOW_FLOOR_KEY) for s in shown):
        notes.append(f"{BELOW_FLOOR} below the linear probe on frozen embeddings ({FLOOR_METHOD}): the reader is "
                     "under-trained or the task's signal is in the sentence embedding alone.")
    if any(s["still_improving"] for s in shown):
        notes.append(f"{STILL_IMPROVING} the run's best dev score came at its last evaluation: still improving, more "
                     "steps would change the number (k/n: k of n seeds).")
    if trained := _train_inputs_note(tasks, summary):
        notes.append(trained)
    if report.get("ignored_cells"):
        notes.append(f"{len(report['ignored_cells'])} cell(s) of seed-independent methods at other seeds (older "
                     "runs) left out: results.json lists them (ignored_cells).")
    for note in notes:
        lines += ["", note]
    return lines


def _mean_cell(s: dict[str, Any] | None) -> str:
    """A results-table cell: mean ± std (seeds), or the one run of a seed-independent method, with its marks."""
    if s is None:
        return "–"
    text = f"{_pct(s['mean'])} {DETERMINISTIC}" if s.get("seed_independent") else \
        f"{_pct(s['mean'])} ± {_pct(s['std'])} ({s['n']})"
    text += f" {BELOW_FLOOR}" if s.get(BELOW_FLOOR_KEY) else ""
    if s["still_improving"]:
        text += f" {STILL_IMPROVING}" + ("" if s["still_improving"] == s["n"] else f"{s['still_improving']}/{s['n']}")
    return text


def _differences_table(report: dict[str, Any]) -> list[str]:
    """Each method's difference from the reference with its p-value (or, on too few inputs, its interval)."""
    tasks, tests, ref, b = report["tasks"], report["significance"], report["reference"], report["bootstrap"]
    min_inputs = report.get("min_inputs", MIN_TEST_INPUTS)
    lines = ["", f"## Difference from {ref} (percentage points) and p-value",
             "", f"Paired bootstrap over the shared {report['split']} inputs and seeds ({b['n_resamples']} "
             "resamples, two-sided; the smallest p a bootstrap of B resamples gives is 1/(B+1), printed as a bound); "
             "Holm: the p-value adjusted for every task x method comparison of this table (results.json also "
             "has each task's family); * Holm-adjusted p < 0.05 (the average over tasks, no member of the "
             f"family: its own p < 0.05), the rule of every table of the docs; {BELOW_RESOLUTION} the difference is "
             "smaller than the minimum detectable effect (next table): the grid had less than 80% power to find a true "
             "difference of this size, so a gap this small says little either way, starred or not.", ""]

    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "–"
        below = f" {BELOW_RESOLUTION}" if r.get("below_resolution") else ""
        if r.get("inputs", min_inputs) < min_inputs:  # too few inputs for a p-value: the interval only
            lo, hi = (100 * x for x in r["ci"])
            return f"{100 * r['delta']:+.1f} [{lo:+.1f}, {hi:+.1f}] (n={r['inputs']}){below}"
        star = "*" if r.get("p_holm_all", r["p_value"]) < 0.05 else ""
        holm = f", Holm {p_text(r['p_holm_all'], b['n_resamples']).lstrip('=')}" if "p_holm_all" in r else ""
        return f"{100 * r['delta']:+.1f} (p{p_text(r['p_value'], b['n_resamples'])}{holm}){star}{below}"

    columns = [*tasks, "average"]
    lines += md_table(["method", *tasks, "avg"], ([m, *(["reference"] * len(columns) if m == ref else
                                                        [cell(tests.get(m, {}).get(t)) for t in columns])]
                                                  for m in report["methods"]))
    few = any(r.get("inputs", min_inputs) < min_inputs for m, row in tests.items() if m != ref for r in row.values())
    if few:
        lines += ["", f"[low, high] (n=N): fewer than {min_inputs} shared test inputs, too few for a p-value "
                      "(a bootstrap over so few inputs has few distinct resamples): the 95% interval of the "
                      "difference only, no test (pgra report --min-inputs)."]
    return lines


def p_text(p: float, n_resamples: int) -> str:
    """A bootstrap p-value as printed: ``=0.042``, ``=0.0003`` below 0.001, and at its floor 1/(B+1) a bound
    (``<0.0001`` for B = 10,000): never ``=0.000``."""
    floor = 1 / (n_resamples + 1)
    if p <= floor * (1 + 1e-9):
        digits = max(0, -math.floor(math.log10(floor)))
        return "<" + f"{math.ceil(floor * 10 ** digits) / 10 ** digits:.{digits}f}".rstrip("0").rstrip(".")
    return f"={p:.3f}" if p >= 0.001 else f"={p:.1g}"


def write_report(directory: str | Path, reference: str = "fid", split: str = "test", n_resamples: int = 10000,
                 seed: int = 0, targets: dict[str, Any] | None = None,
                 sources: Sequence[str | Path] | None = None, min_inputs: int = MIN_TEST_INPUTS) -> Path:
    """Write ``results.md``, ``results.json`` and ``results.html`` into ``directory`` (of its own cells, or of
    ``sources`` merged); returns the markdown's path. ``targets``: published numbers shown beside each cell."""
    directory = Path(directory)
    sources = [directory] if sources is None else [Path(s) for s in sources]
    if own := any(directory.resolve() == Path(s).resolve() for s in sources):
        check_report_files(directory, "directory")
    report = build_report(sources, reference, split, n_resamples, seed, min_inputs)  # nothing written if refused
    figures = figure_index(directory)  # its index read (and refused) before anything is written
    if not own:
        claim_folder(directory, "report")
        check_report_files(directory, "out")
    if targets is not None:
        report["compare"] = compare(report, targets)
    write_json(directory / "results.json", report)
    md = directory / "results.md"
    write_text(md, format_markdown(report) + figures)
    write_page(directory, report)
    # this run's bytes: the next report may replace them
    record_files(directory, REPORT_FILES, kind="experiment" if own else "report")
    return md


def check_report_files(directory: str | Path, field: str = "out") -> None:
    """Refuse when a report file in ``directory`` is not the one pgra last wrote there (edited by hand)."""
    directory = Path(directory)
    if not (read_record(directory) or {}).get("files") and _older_report(directory / "results.json"):
        return
    check_replaceable(directory, REPORT_FILES, field=field)


def _older_report(path: Path) -> bool:
    try:
        report = read_json(path)
    except IncompleteArtifactError:
        return False
    return isinstance(report, dict) and isinstance(report.get("bootstrap"), dict) and \
        "protocol" in report["bootstrap"] and "rows" in report and "significance" in report


def figure_index(directory: Path) -> str:
    """The ``## Figures`` section linking what ``pgra analyze`` wrote (empty before any analysis)."""
    found = analysis_figures(directory)
    if not found["pages"] and not found["figures"]:  # none, or none it may show (a linked analysis/)
        return ""
    lines = ["", "## Figures", "", "Written by `pgra analyze` into `analysis/`:", ""]
    lines += [f"- [{md_text(page['title'])}](analysis/{page['file']})" for page in found["pages"]]
    lines += [f"- [{md_text(fig['title'])}](analysis/{fig['file']}): {md_text(fig['caption'])}"
              for fig in found["figures"]]
    return "\n".join(lines) + "\n"


__all__ = ["REPORT_FILES", "CellResult", "build_report", "check_report_files", "figure_index",
           "format_markdown", "write_report"]
