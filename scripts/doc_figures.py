"""Every measured figure the README and the docs quote, rendered from the committed record it comes from (issue 71).

    python scripts/doc_figures.py            # list the pages whose figures differ from their records
    python scripts/doc_figures.py --check    # the same, exit 1 on any difference (tests/test_doc_figures.py)
    python scripts/doc_figures.py --write    # rewrite every figure, the CPU tables and the laptop table

A figure in a page is a span ``<!-- fig KIND key=value ... -->TEXT<!-- /fig -->``; ``--write`` replaces TEXT by what
KIND computes from the record the keys name (``file=`` a JSON record under ``bench/results/`` or ``docs/results/``;
a ``.jsonl`` file is the list of its lines' records):

- ``json file=F path=P [scale=X] [fmt=F]``: one number of the record (``path``: keys and list positions joined by
  ``.``; ``key=value`` picks the list element whose ``key`` is ``value``, ``a=x&b=y`` the one with both; ``~`` in a
  key or a value stands for a space), times ``scale``, formatted by ``fmt``
  (a Python format, ``{:.1f}`` unless given; ``_`` in it stands for a space).
- ``ratio file=F num=P den=P [den_file=F2] [scale=X] [fmt=F]``: one number of the record over another (of
  ``den_file``'s record where given: a run against an earlier one), times ``scale`` (``{:.1f}x`` unless given).
- ``default option=MODULE:CLASS.FIELD [fmt=F]``: a config option's default in the code (``{:,}`` unless given).
- ``plan n_inputs=N n_seeds=S field=F [disagreement=D] [seed_std=X] [scale=X] [fmt=F]``: one field (``mde``,
  ``se``, ``inputs_needed``, ``seeds_needed``) of the resolution pgra plans (pgra/evaluation/resolution.py's
  ``plan_resolution``, at its default assumptions unless given): a figure computed, not measured.
- ``table2 field=F [cells_per_gpu=N] [eager=1] [scale=X] [fmt=F]``: one field (``total_s``, ``rerank_s``,
  ``cells_s``, ``gpu_hours`` ...) of bench/plan_table2.py's plan of the paper's Table 2 grid on one 8-GPU node (the
  dry run's functions over the committed H100 records; ``eager=1``: with the config's former eager reader);
  ``path=P`` instead of ``field`` reaches into it (``estimates.label=mr/pgra/seed-1.seconds``: one cell's estimate,
  ``cell_s_by_method.fid.0``), and ``match=REGEX`` takes the first group of REGEX (``~`` for a space) in the text
  found (a part of a cell's ``source``, the planner's own breakdown).
- ``stat file=F path=P where=K=V field=F [of=mean|min|max] [scale=X] [fmt=F]``: the mean (the least, the
  largest) of ``field`` over the elements of the list at ``path`` that ``where`` picks (a strategy's seeds).
- ``dryrun run=NAME match=REGEX [fmt=F]``: the first group of ``REGEX`` (``~`` for a space) in the first line of
  ``docs/results/table2_dry_run.json``'s output of the dry run ``NAME`` that it matches (a figure a dry run prints).
- ``size folder=F [scale=X] [fmt=F]``: the bytes of the files under a committed folder (a bundle's size).
- ``expr value=EXPR NAME=FILE:PATH ... [fmt=F]``: arithmetic (``+ - * / **``, ``log10()``, numbers) over the numbers
  of records, each ``NAME`` the value at ``PATH`` of ``FILE`` (``table2:PATH``: of ``table2``'s plan, one cell per
  GPU): a figure worked out from measured ones.
- ``machines field=after_setup_s|with_setup_s|setup_s what=demo|test [commit=C] [cpu=C] [level=L] [cores=C]``:
  the one run of ``docs/results/machines.json`` the keys pick, as ``N min N s`` (``setup_s``: with less after);
  ``stat=min|max`` over every run they pick instead of exactly one.

The marked tables ``<!-- NAME -->`` ... ``<!-- /NAME -->`` are rendered here too, each by the function that made it:
``machine-times`` and ``demo-rows`` (scripts/machine_table.py, from docs/results/machines.json), ``selectors-table``
(bench/bench_selectors.py's ``table``, from bench/results/selectors_*.json), ``mechanism-table``
(scripts/mechanism_table.py, from docs/results/mechanism/*/analysis/analysis.json), ``rerankers-table``
(scripts/rerankers_table.py, from docs/results/rerankers-mr/analysis/analysis.json and
docs/results/rerankers-mr-intervals.json), ``table2-dry-run`` and
``table2-analyze-dry-run`` (the lines of docs/results/table2_dry_run.json's outputs that docs/tutorial-table2.md
quotes; ``--record-dry-run`` runs the dry runs again in a clone of known state and writes that record, and
tests/test_doc_figures.py runs them and compares); ``laptop-table`` by
scripts/laptop_table.py (a merge of the laptop bundles with a 10,000-resample bootstrap, checked by
tests/test_laptop_table.py), which ``--write`` runs last. A span names its record, so a
reader sees where a figure comes from in the page's source; one record's figure is shown on one page and linked from
the others (the test checks, keyed on ``identity``: the record and the value's place in it, whatever the span's
format, scale or path spelling).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import json
import math
import operator
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPAN = re.compile(r"<!-- fig (?P<spec>[a-z][^>\n]*?) -->(?P<text>[^\n]*?)<!-- /fig -->")  # a kind, on one line
MACHINES = "docs/results/machines.json"
DRY_RUN = "docs/results/table2_dry_run.json"
# the dry runs docs/tutorial-table2.md quotes: name -> the command, run in CLONE
DRY_RUNS = {"experiment": "pgra experiment --config configs/paper/experiment_table2.yaml --dry-run --workers 8",
            "local": "pgra experiment --config configs/paper/experiment_table2.yaml --dry-run --workers 8 "
                     "--launcher local",
            "analyze": "pgra analyze --config configs/paper/experiment_table2.yaml --dry-run",
            "demo": "pgra experiment --config configs/demo/experiment.yaml --dry-run",
            "laptop": "pgra experiment --config configs/laptop/experiment.yaml --dry-run"}
CLONE = ("a clone after `make prepare` (models/ and data/demo/ as it builds them) whose data/original/ holds MR "
         "alone (as `pgra prepare-demo` builds it): no LM-BFF data, no index, no runs/, an empty Hugging Face cache, "
         "no CUDA (CUDA_VISIBLE_DEVICES empty), on 2 cores (its CPU affinity) with no thread count or launch set "
         "in the environment")
DRY_RUN_CORES = 2  # the planner prices CPU work by the cores a worker gets: the record's, whatever runs it
# what would change those cores or the launch the planner sees (a test runner's OMP_NUM_THREADS among them)
RUN_ENV = ("HF_", "TRANSFORMERS_", "PGRA_", "OMP_", "MKL_", "SLURM_", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK",
           "LOCAL_RANK")


class FigureError(Exception):
    """A span that names no known kind, a missing key, or a record without the figure."""


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose figures are generated: the README, docs/ and bench/README.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "bench" / "README.md"]


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """``KIND key=value ...`` -> (kind, keys)."""
    kind, *pairs = spec.split()
    keys = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise FigureError(f"{spec!r}: {pair!r} is not key=value")
        keys[key] = value
    return kind, keys


def _need(keys: dict[str, str], name: str) -> str:
    if name not in keys:
        raise FigureError(f"no {name}=")
    return keys[name]


def _record(root: Path, rel: str) -> Any:
    path = root / rel
    if not path.is_file():
        raise FigureError(f"no record {rel}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":  # one record a line: a list
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def locate(record: Any, path: str) -> tuple[int | str, ...]:
    """Where ``path`` points in ``record``, as concrete keys and list positions (``rows.type=ivf`` -> ``("rows", 3)``):
    two spellings of one place give one location."""
    node, where = record, []
    for part in path.split("."):
        if "=" in part and isinstance(node, list):
            want = dict(pair.replace("~", " ").split("=", 1) for pair in part.split("&"))
            found = [i for i, x in enumerate(node)
                     if isinstance(x, dict) and all(str(x.get(k)) == v for k, v in want.items())]
            if len(found) != 1:
                raise FigureError(f"{path}: {len(found)} elements with {part}")
            step: int | str = found[0]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            step = int(part)
        elif isinstance(node, dict) and part.replace("~", " ") in node:
            step = part.replace("~", " ")
        else:
            raise FigureError(f"{path}: no {part!r}")
        node = node[step]
        where.append(step)
    return tuple(where)


def pluck(record: Any, path: str) -> Any:
    """The value at ``path`` (``a.0.b``, or ``docs=1000000`` for the list element whose ``docs`` is 1000000)."""
    node = record
    for step in locate(record, path):
        node = node[step]
    return node


def _fmt(keys: dict[str, str], default: str, value: Any) -> str:
    return keys.get("fmt", default).replace("_", " ").format(value)


def duration(seconds: float) -> str:
    return f"{int(seconds) // 60} min {int(seconds) % 60} s"


def _number(keys: dict[str, str], value: Any) -> str:
    if isinstance(value, str):  # a name the record gives (the machine, the model)
        return _fmt(keys, "{}", value)
    return _fmt(keys, "{:.1f}", value * float(keys["scale"]) if "scale" in keys else value)


def _json(root: Path, keys: dict[str, str]) -> str:
    return _number(keys, pluck(_record(root, _need(keys, "file")), _need(keys, "path")))


def _plan(root: Path, keys: dict[str, str]) -> str:
    """A field of pgra's planned resolution (``plan_resolution``) at ``n_inputs`` and ``n_seeds``."""
    from pgra.evaluation.resolution import plan_resolution

    shares = {k: float(keys[k]) for k in ("disagreement", "seed_std") if k in keys}
    plan = plan_resolution(int(_need(keys, "n_inputs")), int(_need(keys, "n_seeds")), **shares)
    field = _need(keys, "field")
    if plan.get(field) is None:
        raise FigureError(f"the plan has no {field!r} (or no number suffices)")
    return _number(keys, plan[field])


def _ratio(root: Path, keys: dict[str, str]) -> str:
    record = _record(root, _need(keys, "file"))
    other = _record(root, keys["den_file"]) if "den_file" in keys else record
    value = pluck(record, _need(keys, "num")) / pluck(other, _need(keys, "den"))
    return _fmt(keys, "{:.1f}x", value * float(keys.get("scale", 1)))


def _default(root: Path, keys: dict[str, str]) -> str:
    module, _, attr = _need(keys, "option").partition(":")
    cls, _, field = attr.partition(".")
    try:
        value = getattr(getattr(importlib.import_module(module), cls)(), field)
    except (ImportError, AttributeError) as e:
        raise FigureError(f"option={keys['option']}: {e}") from None
    return _fmt(keys, "{:,}", value)


def _machines(root: Path, keys: dict[str, str]) -> str:
    field = _need(keys, "field")
    picks = {k: v.replace("_", " ") for k, v in keys.items() if k in ("what", "commit", "cpu", "level", "cores")}
    runs = [r for r in _record(root, MACHINES)["runs"] if all(str(r.get(k)) == v for k, v in picks.items())]
    if field == "setup_s":
        values = [r["with_setup_s"] - r["after_setup_s"] for r in runs if r["with_setup_s"] and r["after_setup_s"]]
    else:
        values = [r[field] for r in runs if r.get(field) is not None]
    stat = keys.get("stat")
    if stat in ("min", "max") and values:
        return duration(min(values) if stat == "min" else max(values))
    if stat is not None or len(values) != 1:
        raise FigureError(f"{len(values)} runs of {MACHINES} have {field} for {picks} (stat=min|max for several)")
    return duration(values[0])


def _stat(root: Path, keys: dict[str, str]) -> str:
    """The mean (``of=min|max``: the least, the largest) of ``field`` over the elements of the list at ``path`` that
    ``where`` picks (``strategy=random``, ``a=x&b=y``): a figure over seeds."""
    rows = pluck(_record(root, _need(keys, "file")), _need(keys, "path"))
    want = dict(pair.replace("~", " ").split("=", 1) for pair in _need(keys, "where").split("&"))
    field = _need(keys, "field")
    values = [r[field] for r in rows if isinstance(r, dict) and field in r
              and all(str(r.get(k)) == v for k, v in want.items())] if isinstance(rows, list) else []
    ofs: dict[str, Callable[[list[float]], float]] = {"mean": lambda v: sum(v) / len(v), "min": min, "max": max}
    of = keys.get("of", "mean")
    if of not in ofs or not values:
        raise FigureError(f"of={of} (mean|min|max) of {field} over {len(values)} elements of {keys['path']}")
    return _number(keys, ofs[of](values))


@functools.cache
def _table2_plan(cells_per_gpu: int, eager: bool = False) -> dict[str, Any]:
    """bench/plan_table2.py's plan, its cells' estimates as dicts (a path reaches into them)."""
    module = _load("bench/plan_table2.py")
    plan = module.plan(8, cells_per_gpu=cells_per_gpu, overrides=module.EAGER if eager else None)
    return {**plan, "estimates": [dataclasses.asdict(e) for e in plan["estimates"]],
            "cell_s_by_method": {m: list(span) for m, span in plan["cell_s_by_method"].items()}}


def _table2(root: Path, keys: dict[str, str]) -> str:
    """A field of bench/plan_table2.py's plan of the paper's Table 2 grid on one 8-GPU node."""
    plan = _table2_plan(int(keys.get("cells_per_gpu", "1")), keys.get("eager") == "1")
    if "path" in keys:
        value = pluck(plan, keys["path"])
    else:
        field = _need(keys, "field")
        if field not in plan:
            raise FigureError(f"the Table 2 plan has no {field!r}")
        value = plan[field]
    if "match" in keys:
        found = re.search(keys["match"].replace("~", " "), str(value))
        if found is None or not found.groups():
            raise FigureError(f"no group of {keys['match']!r} in {str(value)[:80]!r}")
        return _fmt(keys, "{}", found[1])
    return _number(keys, value)


def _dryrun(root: Path, keys: dict[str, str]) -> str:
    """The first group of ``match`` in the first line of the recorded output of the dry run ``run`` it matches."""
    run, match = _need(keys, "run"), _need(keys, "match").replace("~", " ")
    lines = _record(root, DRY_RUN)["runs"].get(run, {}).get("output", [])
    found = next((m for m in map(re.compile(match).search, lines) if m), None)
    if found is None or not found.groups():
        raise FigureError(f"no line of {DRY_RUN}'s {run!r} output has a group of {match!r}")
    return _fmt(keys, "{}", found[1])


def _size(root: Path, keys: dict[str, str]) -> str:
    """The bytes of the files under ``folder`` (a committed bundle)."""
    folder = root / _need(keys, "folder")
    if not folder.is_dir():
        raise FigureError(f"no folder {keys['folder']}")
    return _number(keys, sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()))


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.Pow: operator.pow}


def _evaluate(node: ast.AST, names: dict[str, float]) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_evaluate(node.left, names), _evaluate(node.right, names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "log10" \
            and len(node.args) == 1 and not node.keywords:
        return math.log10(_evaluate(node.args[0], names))
    raise FigureError(f"{ast.unparse(node)!r}: only numbers, + - * / **, log10() and the names given")


def _expr(root: Path, keys: dict[str, str]) -> str:
    """``value`` worked out over the record values its names stand for (``NAME=FILE:PATH``)."""
    names = {}
    for name, where in keys.items():
        if name not in ("value", "fmt", "scale"):
            file, sep, path = where.partition(":")
            if not sep:
                raise FigureError(f"{name}={where}: not FILE:PATH")
            names[name] = pluck(_table2_plan(1) if file == "table2" else _record(root, file), path)
    try:
        tree = ast.parse(_need(keys, "value"), mode="eval")
    except SyntaxError:
        raise FigureError(f"value={keys['value']}: not arithmetic") from None
    return _number(keys, _evaluate(tree.body, names))


KINDS: dict[str, Callable[[Path, dict[str, str]], str]] = {
    "json": _json, "ratio": _ratio, "default": _default, "machines": _machines, "plan": _plan,
    "table2": _table2, "stat": _stat, "dryrun": _dryrun, "expr": _expr,
    "size": _size}


def _load(rel: str):
    """A script of the repository (``scripts/x.py``, ``bench/x.py``) as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(rel).stem, ROOT / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _machine_blocks(root: Path) -> dict[str, str]:
    return _load("scripts/machine_table.py").render(_record(root, MACHINES))


def _selectors_table(root: Path) -> str:
    rows = [r for task in ("mr", "wiki_topic") for r in _record(root, f"bench/results/selectors_{task}.json")["rows"]]
    return _load("bench/bench_selectors.py").table(rows)


def _quoted(lines: list[str], starts: tuple[str, ...]) -> str:
    """The lines that begin with one of ``starts`` and every line of a ``disk, estimated`` section (its header and
    its lines indented by two), as a ``text`` block."""
    picked, section = [], False
    for line in lines:
        section = line.startswith("disk, estimated") or (section and line.startswith("  "))
        if (section and not line.startswith("    ")) or line.startswith(starts):
            picked.append(line)
    return "\n".join(["```text", *picked, "```"])


def _dry_run_block(root: Path, run: str, starts: tuple[str, ...]) -> str:
    record = _record(root, DRY_RUN)
    return _quoted(record["runs"][run]["output"], starts)


def dry_runs(root: Path = ROOT) -> dict[str, list[str]]:
    """What each of :data:`DRY_RUNS` prints now in :data:`CLONE` (made in a temporary folder from ``root``'s
    configs, models, demo data and MR data), line by line."""
    with tempfile.TemporaryDirectory(prefix="pgra-dry-run.") as tmp:
        work = Path(tmp)
        (work / "configs").symlink_to(root / "configs")
        (work / "models").symlink_to((root / "models").resolve())
        shutil.copytree(root / "data" / "original" / "mr", work / "data" / "original" / "mr")
        (work / "data" / "demo").symlink_to((root / "data" / "demo").resolve())
        env = {k: v for k, v in os.environ.items() if not k.startswith(RUN_ENV)}
        env.update(HF_HOME=str(work / "hf"), CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(root))
        cores = sorted(os.sched_getaffinity(0))[:DRY_RUN_CORES]
        if len(cores) < DRY_RUN_CORES:
            raise SystemExit(f"error: the dry runs are recorded on {DRY_RUN_CORES} cores; this process may use {len(cores)}")
        out = {}
        for name, command in DRY_RUNS.items():
            argv = [sys.executable, "-c", "import sys; from pgra.cli import main; sys.exit(main())",
                    *shlex.split(command)[1:]]
            done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=900,
                                  preexec_fn=lambda: os.sched_setaffinity(0, cores))
            if done.returncode:
                raise SystemExit(f"error: {command}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
            out[name] = done.stdout.splitlines()
    return out


def record_dry_runs(root: Path = ROOT) -> None:
    """Write :data:`DRY_RUN`: each dry run's command and output, the clone it ran in and the commit of the code."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True).stdout.strip()

    dirty = "+dirty" if git("status", "--porcelain", "pgra", "configs", "bench/results") else ""
    outputs = dry_runs(root)
    record = {"what": "the dry runs docs/tutorial-table2.md quotes and docs/experiments.md's disk figures come from "
                      "(python scripts/doc_figures.py --record-dry-run)",
              "commit": git("rev-parse", "--short", "HEAD") + dirty, "clone": CLONE,
              "runs": {name: {"command": DRY_RUNS[name], "output": outputs[name]} for name in DRY_RUNS}}
    (root / DRY_RUN).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


# the marked tables: name -> (what renders it from its records, the page that shows it)
BLOCKS: dict[str, tuple[Callable[[Path], str], str]] = {
    "machine-times": (lambda root: _machine_blocks(root)["machine-times"], "docs/experiments.md"),
    "demo-rows": (lambda root: _machine_blocks(root)["demo-rows"], "docs/experiments.md"),
    "selectors-table": (_selectors_table, "docs/selectors.md"),
    "mechanism-table": (lambda root: _load("scripts/mechanism_table.py").render(root), "docs/experiments.md"),
    "mechanism-ceiling": (lambda root: _load("scripts/mechanism_table.py").render_ceiling(root), "docs/experiments.md"),
    "rerankers-table": (lambda root: _load("scripts/rerankers_table.py").render(root), "docs/rerankers.md"),
    "table2-dry-run": (lambda root: _dry_run_block(root, "experiment", ("wall-clock on",)), "docs/tutorial-table2.md"),
    "table2-analyze-dry-run": (lambda root: _dry_run_block(root, "analyze", ("  sweep:", "  retrievers:",
                                                                             "analyses in all:")),
                               "docs/tutorial-table2.md"),
}


def _blocks(text: str, page: str, root: Path) -> str:
    """``text`` with each marked table of ``page`` rendered again from its records."""
    tables = {name: make(root) for name, (make, where) in BLOCKS.items() if where == page}
    return _load("scripts/machine_table.py").replace_blocks(text, tables, page) if tables else text


def render(spec: str, root: Path = ROOT) -> str:
    kind, keys = parse(spec)
    if kind not in KINDS:
        raise FigureError(f"unknown kind {kind!r} (one of {', '.join(KINDS)})")
    return KINDS[kind](root, keys)


def _file(rel: str) -> str:
    return Path(rel).as_posix().removeprefix("./")


def identity(spec: str, root: Path = ROOT) -> tuple[Any, ...]:
    """What a span shows, whatever its format or scale: ``(record, location)`` of a ``json`` span, the two locations
    of a ``ratio``, the keys of another kind (tests/test_doc_figures.py: one figure is shown on one page)."""
    kind, keys = parse(spec)
    if kind == "json":
        file = _need(keys, "file")
        return (_file(file), locate(_record(root, file), _need(keys, "path")))
    if kind == "ratio":
        file = _need(keys, "file")
        other = keys.get("den_file", file)
        return ("ratio", _file(file), locate(_record(root, file), _need(keys, "num")),
                _file(other), locate(_record(root, other), _need(keys, "den")))
    return (kind, *sorted((k, v) for k, v in keys.items() if k not in ("fmt", "scale")))


def regenerate(text: str, where: str, root: Path = ROOT) -> str:
    """``text`` with every span's figure rendered again; an unrenderable span, or one whose opening has no closing
    on its line, is an ``error:`` naming ``where``."""
    if len(re.findall(r"<!-- fig [a-z]", text)) != len(SPAN.findall(text)):
        raise SystemExit(f"error: {where}: a <!-- fig ... --> without its <!-- /fig --> on the same line")
    def one(m: re.Match[str]) -> str:
        try:
            return f"<!-- fig {m['spec']} -->{render(m['spec'], root)}<!-- /fig -->"
        except FigureError as e:
            raise SystemExit(f"error: {where}: <!-- fig {m['spec']} -->: {e}") from None
    return SPAN.sub(one, text)


def differences(root: Path = ROOT) -> list[str]:
    """Each figure a page shows that its record does not give, as ``page: spec: shown -> record``, and each marked
    table that differs from its records, as ``page: <!-- name --> differs``."""
    out = []
    for page in pages(root):
        rel, text = page.relative_to(root).as_posix(), page.read_text(encoding="utf-8")
        fresh = regenerate(text, rel, root)
        for old, new in zip(SPAN.finditer(text), SPAN.finditer(fresh), strict=True):
            if old["text"] != new["text"]:
                out.append(f"{rel}: {old['spec']}: {old['text']!r} -> {new['text']!r}")
        if _blocks(text, rel, root) != text:
            out.append(f"{rel}: a marked table differs from its records")
    return out


def write(root: Path = ROOT) -> None:
    """Every span and marked table of every page rendered again (the laptop table: ``main(["--write"])``)."""
    for page in pages(root):
        rel, text = page.relative_to(root).as_posix(), page.read_text(encoding="utf-8")
        fresh = _blocks(regenerate(text, rel, root), rel, root)
        if fresh != text:
            page.write_text(fresh, encoding="utf-8")




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a page's figure differs from its record")
    ap.add_argument("--write", action="store_true", help="rewrite the figures, the CPU tables and the laptop table")
    ap.add_argument("--record-dry-run", action="store_true",
                    help=f"run the dry runs docs/tutorial-table2.md quotes again and write {DRY_RUN} (then --write)")
    args = ap.parse_args(argv)
    if args.record_dry_run:
        record_dry_runs()
        print(f"wrote {DRY_RUN}")
        return 0
    if args.write:
        write()
        return _load("scripts/laptop_table.py").main(["--write"]) or 0
    found = differences()
    print("\n".join(found) or "every figure is its record's")
    return 1 if found and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
