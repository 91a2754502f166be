"""What cells and stages spend on a CPU besides what the step and reranking fits price, and how close the dry run
comes to a small real run.

The tutorial's grid (``examples/own_task/experiment.yaml``: six methods, the packaged models) is run through the
``pgra experiment`` command at ``--limit`` sizes (default 4 and 16) after its index is built. For every finished cell
and stage, what it took (its ``cell.json`` / ``cost.json``) less what the plan prices without these costs (the
reader's steps and stored encoder outputs, the reranker's candidates) is its fixed part plus a per-input part; a
line over the sizes gives, per kind (reader, in-context learning, other cells, the candidates and reranked stages),
``fixed_s`` and ``per_input_s``, and the command's own seconds besides its stages and cells (imports, checks, the
report). ``pgra.experiment.estimate`` reads the result (``cpu_cell_costs.json``).

Then the check: the grid at ``--check`` inputs (default 8, the tutorial's smoke run), planned by the dry run's code
with these costs before it runs, then run; printed as the ratio planned / taken, per part and in all.

    python bench/bench_cpu_cell_costs.py --json bench/results/cpu_cell_costs.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

CONFIG = "examples/own_task/experiment.yaml"
CLI = "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))"


def pgra(args: list[str], cwd: Path) -> float:
    """Run ``pgra ARGS`` in ``cwd`` with this checkout's code; its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CLI, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"pgra {' '.join(args)} ended {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def experiment(work: Path, n: int, out: str):
    """The tutorial's grid at ``--limit n`` into ``out`` (an Experiment, not run)."""
    from pgra.analysis.config import AnalyzeConfig
    from pgra.core.config import load_config, parse_overrides
    from pgra.experiment import Experiment
    from pgra.experiment.config import apply_limit

    cwd = os.getcwd()
    os.chdir(work)
    try:
        cfg = load_config(AnalyzeConfig, Path(CONFIG), parse_overrides([f"limit={n}", f"out={out}", "show_progress=false"]))
        return Experiment(apply_limit(cfg))
    finally:
        os.chdir(cwd)


def plan(exp, work: Path, fits):
    from pgra.experiment.estimate import plan_costs

    cwd = os.getcwd()
    os.chdir(work)
    try:
        return plan_costs(exp, as_new=True, fits=fits, workers=1)
    finally:
        os.chdir(cwd)


def kind_inputs(exp, label: str, kind: str, splits: dict[str, int]) -> int:
    from pgra.reader.cost_model import evaluated_inputs

    if kind == "reader":
        task, method = label.split("/")[:2]
        reader = exp.method(next(t for t in exp.cfg.tasks if exp.tasks[t].name == task), method).settings()["reader"]
        return int(evaluated_inputs(json.loads(json.dumps(reader, default=str)), splits) or 0)
    if kind == "icl":
        return splits.get("test", 0)
    return sum(splits.values())


def measure(work: Path, n: int, fits) -> tuple[list[tuple[str, int, float]], float, float]:
    """Run the grid at ``--limit n``: ``([(kind, inputs, seconds beyond the priced parts)], the command's wall,
    the command's seconds beyond its stages and cells)``."""
    from pgra.methods import get_method
    from pgra.methods.icl import ICL
    from pgra.methods.reader_method import ReaderMethod

    out = f"runs/bench-{n}"
    exp = experiment(work, n, out)
    priced = {e.label: e.seconds or 0.0 for e in plan(exp, work, fits).stages + plan(exp, work, fits).cells}
    wall = pgra(["experiment", "--config", CONFIG, "--limit", str(n), f"out={out}", "show_progress=false"], work)
    root = work / f"{out}-limit{n}"
    points, inside = [], 0.0
    for task in exp.cfg.tasks:
        name = exp.tasks[task].name
        splits = {s: len((root / name / "candidates" / f"{s}.jsonl").read_text().splitlines())
                  for s in ("train", "dev", "test")}
        for stage in ("candidates", "reranked"):
            took = json.loads((root / name / stage / "cost.json").read_text())["elapsed_s"]
            inside += took
            points.append((stage, sum(splits.values()), took - priced.get(f"{name}/{stage}", 0.0)))
        for method in exp.cfg.methods:
            cls = get_method(method)
            kind = "reader" if issubclass(cls, ReaderMethod) else "icl" if issubclass(cls, ICL) else "cell"
            cell = json.loads((root / name / method / "seed-1" / "cell.json").read_text())
            took = float(cell["cost"]["elapsed_s"])
            inside += took
            label = f"{name}/{method}/seed-1"
            points.append((kind, kind_inputs(exp, label, kind, splits), took - priced.get(label, 0.0)))
    return points, wall, wall - inside


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """``(fixed, per input)`` of a least-squares line through ``points``; where the seconds do not grow with the
    inputs, their mean as the fixed part. The fixed part may be negative: a correction of a fit that overprices
    (the plan never prices a part below 0)."""
    from pgra.runtime.cost import fit_line

    a, b = fit_line([float(x) for x, _ in points], [y for _, y in points])
    if b < 0:
        a, b = sum(y for _, y in points) / len(points), 0.0
    return a, b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="4,16", help="--limit sizes the costs are fitted over")
    p.add_argument("--check", type=int, default=8, help="--limit size the plan is checked against")
    p.add_argument("--json", default="", help="write the result here")
    args = p.parse_args()

    from pgra.experiment.estimate import BenchFits, format_seconds
    from pgra.runtime.cost import CPU_CELL_COSTS, CpuCellCosts
    from pgra.runtime.device import cpu_model

    with tempfile.TemporaryDirectory(prefix="pgra-bench-cells-") as tmp:
        work = Path(tmp)
        for name in ("models", "examples", "configs"):
            (work / name).symlink_to(ROOT / name)
        pgra(["build-index", "--config", "configs/demo/index_minilm.yaml", f"corpus={CONFIG.rsplit('/', 1)[0]}/corpus.txt",
              "out=indexes/tickets-minilm"], work)
        bare = BenchFits.load(device="cpu")
        bare.cpu_cells = None
        by_kind: dict[str, list[tuple[int, float]]] = {}
        command = []
        for n in (int(x) for x in args.sizes.split(",")):
            points, wall, own = measure(work, n, bare)
            print(f"--limit {n}: {format_seconds(wall)} wall, the command's own {own:.1f} s", flush=True)
            command.append(own)
            for kind, inputs, extra in points:
                by_kind.setdefault(kind, []).append((inputs, extra))
        kinds = {k: dict(zip(("fixed_s", "per_input_s"), fit(v), strict=True)) | {"points": v}
                 for k, v in by_kind.items()}
        kinds["command"] = {"fixed_s": sum(command) / len(command), "per_input_s": 0.0, "points": command}
        result = {"machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform(),
                              "load_average": os.getloadavg()},
                  "date": datetime.date.today().isoformat(), "sizes": args.sizes, "config": CONFIG,
                  "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip(),
                  "icl_demos": 4, "kinds": kinds}
        for kind, v in kinds.items():
            print(f"  {kind}: {v['fixed_s']:.1f} s fixed + {1000 * v['per_input_s']:.1f} ms per input")

        fitted = Path(tmp) / CPU_CELL_COSTS
        fitted.write_text(json.dumps(result))
        fits = BenchFits.load(device="cpu")
        fits.cpu_cells = CpuCellCosts.load(fitted)
        exp = experiment(work, args.check, "runs/check")
        planned = plan(exp, work, fits)
        stages, cells = planned.wallclock()
        planned_s = stages + cells + planned.command_s
        wall = pgra(["experiment", "--config", CONFIG, "--limit", str(args.check), "out=runs/check",
                     "show_progress=false"], work)
        ratio = planned_s / wall
        print(f"check, --limit {args.check}: planned {format_seconds(planned_s)}, took {format_seconds(wall)}: "
              f"planned / taken = {ratio:.2f}")
        result["check"] = {"limit": args.check, "planned_s": planned_s, "taken_s": wall, "ratio": ratio,
                           "unpriced": [e.label for e in planned.stages + planned.cells if e.seconds is None]}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
