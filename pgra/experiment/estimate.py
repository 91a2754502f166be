"""What a grid will cost before it runs: per stage and cell, and the wall-clock on N workers.

Each estimate says where it came from (:attr:`Estimate.source`), the first that applies of:

1. ``done``: the stage or cell is finished with its key (nothing to spend);
2. ``recorded``: a cost record in the experiment folder (a stage's ``cost.json``, a cell's ``cell.json`` ``cost``):
   the same stage of the task built before (other settings), or a cell of the same task, method and settings
   (another seed); else the same stage or method on another task, scaled by the ratio of their input counts
   (the lines of the train, dev and test files of the task's candidates folder, or of its data files);
3. ``bench``: a fit of this repository's ``bench/results/*.json``. On a CPU: the reader's seconds per step against
   d (``reader_scale.json``: 0.24 s + 0.20 s per passage at batch 8 on a 2-core CPU) and the reranker's seconds
   per candidate sentence (``rerank_scale.json``), both measured on 2 threads, so that a worker computing on fewer
   (:func:`worker_threads`: the cores shared among the workers, at most ``OMP_NUM_THREADS``) takes proportionally
   longer (:meth:`BenchFits.thread_factor`; a cell's record likewise, by the cores it recorded, and its training
   loop x the processes that split it under ``parallel: ddp``). On a GPU (the H100 runs ``gpu_plan_inputs.json`` and
   ``gpu_plan_cells.json`` name): the reranker's texts/s, and a reader cell priced as what its config runs
   (:meth:`BenchFits.gpu_cell`): the measured step of its variant (``compile``, ``compile_mode``, ``adamw_impl``),
   scaled by d/16 and batch/8, plus the fixed per-step cost of pgra's training loop around it (the intercept), its
   compilation, its dev and final evaluations, its checkpoints and ``best/`` saves at their measured sizes, two
   model loads and the cell process's start; the estimate names the benchmark's model and device, which may not be
   the grid's;
4. none: no record and no fit (a kNN vote, in-context learning): left out of the totals, and counted.

Which fits (:func:`plan_device`): the GPU's where CUDA is here, where the config asks for GPUs (CUDA graphs, fp16, a
``cuda`` device, Slurm workers with GPUs) or where ``plan_device`` / ``PGRA_PLAN_DEVICE`` says ``cuda``; the plan
says which and why.

The wall-clock assumes the stages run one after another, each sharded over the workers (its single-process
seconds divided by their number, or by the GPUs' where ``cells_per_gpu`` workers share each: one rank a GPU builds
a stage, the others sharing it wait, :func:`pgra.distributed.stage_context`, and a local worker leaves the stages
to its GPU's first worker; a stage's record is its wall-clock under the ``processes`` that built it, so it is
first multiplied by them), then the cells side
by side, one per worker (those sharing a GPU each at most as fast as its device time times their number allows),
costliest first
(:func:`plan_wallclock`: longest-processing-time greedy); under ``parallel: ddp`` the cells one after another
instead, the seconds the ranks split (a reader's training steps) divided among the workers' GPUs as a stage's
are, the rest (loads, predictions, a kNN vote, in-context learning) whole.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..artifacts import read_json
from ..cost import Priced, device_seconds, finite_number, model_dim, on_gpu, sharing, split_seconds
from ..errors import PgraError, whole_number
from ..reader.cost_model import encoder_layers, evaluated_inputs, trained_layers
from .layout import STAGE_COST_FILE, STAGE_KEY_FILE, finished_cells

if TYPE_CHECKING:
    from .grid_view import GridView
    from .layout import CellPlan

STAGES = ("candidates", "reranked", "full_search")
SPLIT_FILES = ("train.jsonl", "dev.jsonl", "test.jsonl")


@dataclass
class Estimate:
    """The expected cost of one stage or cell: ``seconds`` (None: unknown) on ``device`` (``gpu`` / ``cpu``),
    and where the number came from."""

    label: str
    seconds: float | None
    source: str
    device: str = "cpu"
    # of ``seconds``, those the device is busy (None: unknown, all of them), and the bytes the cell writes to disk
    # (checkpoints, best/) and keeps at its end: known for a cell priced from the GPU fits
    device_s: float | None = None
    written_bytes: float = 0.0
    kept_bytes: float = 0.0
    # of ``seconds``, those the ranks of a ``parallel: ddp`` launch split among them (a reader's training steps); the
    # rest each rank, or the main one alone, spends whole (loads, predictions, a kNN vote, in-context learning)
    split_s: float = 0.0

    def text(self) -> str:
        if self.seconds is None:
            return f"cost unknown ({self.source})"
        if self.source == "done":
            return "done: nothing to spend"
        return f"~{format_seconds(self.seconds)} {self.device} ({self.source})"


def format_seconds(seconds: float) -> str:
    """``42 s``, ``12.5 min`` or ``3.20 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


# ----------------------------------------------------------------------------------------------- scheduling

def lpt_order(costs: list[float]) -> list[int]:
    """The indices of ``costs``, costliest first (ties in their given order): the order a scheduler hands out
    jobs in."""
    return sorted(range(len(costs)), key=lambda i: -costs[i])


def lpt_assign(costs: list[float], workers: int) -> list[int]:
    """The worker (0..workers-1) each job runs on: jobs costliest first, each to the worker that frees first
    (the lowest-numbered among equals). Workers beyond the jobs' count never get one: only as many are kept as
    there are jobs (a billion workers cost no memory)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    loads = [(0.0, w) for w in range(min(workers, len(costs)))]
    assigned = [0] * len(costs)
    for i in lpt_order(costs):
        load, w = heapq.heappop(loads)
        assigned[i] = w
        heapq.heappush(loads, (load + costs[i], w))
    return assigned


def plan_wallclock(costs: list[float], workers: int) -> float:
    """Wall-clock of ``costs`` (seconds of independent jobs) on ``workers`` workers under longest-processing-time
    greedy scheduling (costliest first, each to the least loaded worker): the largest worker's load."""
    loads = [0.0] * min(max(workers, 1), len(costs))
    for i, w in enumerate(lpt_assign(costs, workers)):
        loads[w] += costs[i]
    return max(loads) if costs else 0.0


# ----------------------------------------------------------------------------------------------- bench fits

def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


GPU_PLAN_CELLS = "gpu_plan_cells.json"
DEFAULT_GPU_VARIANT = "fused+compile"  # the variant of the loop measured around it


@dataclass
class GpuStep:
    """A measured variant of the bench reader's training step on the GPU (``variant``: parts joined by ``+``, as
    ``bench_gpu_scale.py`` names them): seconds a step at steady state, and the one-time part of its warm-up (the
    warm-up steps' time less that many steady steps: the compilation)."""

    variant: str
    s_per_step: float
    warmup_s: float
    source: str


@dataclass
class CellOverheads:
    """What a reader cell spends besides its steps, measured through pgra's code (``bench_cell_overheads.py``)."""

    process_start_s: float
    load_s: float
    checkpoint_s: float
    checkpoint_bytes: float
    best_s: float
    best_bytes: float
    source: str


@dataclass
class CellCost:
    """A cell priced from the fits: ``seconds`` in all, of them ``device_s`` on the device, by part; its source;
    the bytes it writes and keeps."""

    seconds: float
    device_s: float
    parts: dict[str, float]
    source: str
    written_bytes: float = 0.0
    kept_bytes: float = 0.0


CPU_CELL_COSTS = "cpu_cell_costs.json"
# what a kind of cell or stage is priced by besides its fixed seconds (bench_cpu_cell_costs.py measures both)
CPU_KINDS = {"reader": "evaluated input (dev evaluations, the final dev and test predictions)",
             "icl": "predicted input", "cell": "input of every split", "candidates": "input of every split",
             "reranked": "input", "full_search": "input"}


@dataclass
class CpuCellCosts:
    """What a cell or stage spends on a CPU besides what the step and reranking fits price, measured through
    pgra's own code (``bench/bench_cpu_cell_costs.py``: the tutorial's grid run at two sizes): per kind of
    :data:`CPU_KINDS`, ``(fixed seconds, seconds per input)``: the model loads, tokenizer and data set-up, the
    ``best/`` saves and checkpoints of a small reader, the report of the cell; in-context learning's per-input
    seconds at ``icl_demos`` demonstrations."""

    parts: dict[str, tuple[float, float]]
    icl_demos: int
    source: str
    threads: int | None = None  # the cores of the machine that measured them (torch's threads there)

    @classmethod
    def load(cls, path: Path) -> CpuCellCosts | None:
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        machine = data.get("machine", {})
        return cls({k: (float(v["fixed_s"]), float(v["per_input_s"])) for k, v in data["kinds"].items()},
                   int(data.get("icl_demos", 4)),
                   f"bench {path.name}: {machine.get('cpu', 'CPU')}, {machine.get('cpus', '?')} cores, "
                   f"{data.get('date', '')}".rstrip(", "),
                   whole_number(machine.get("cpus", "")))

    def price(self, kind: str, inputs: int | None, scale: float = 1.0) -> tuple[float, str] | None:
        """``(seconds, what)`` of ``kind``'s fixed part plus ``inputs`` x its per-input seconds x ``scale``."""
        if kind not in self.parts:
            return None
        fixed, per_input = self.parts[kind]
        n = int(inputs or 0)
        seconds = fixed + n * per_input * scale  # a negative fixed part corrects a fit that overprices
        return seconds, (f"{fixed:.1f} s fixed + {n} x {1000 * per_input * scale:.0f} ms per {CPU_KINDS[kind]} "
                         f"({self.source})")


def gpu_variant(reader: dict[str, Any]) -> str:
    """The bench's name of the step a reader's settings run: ``fused`` (``adamw_impl: fused``), ``compile``
    (``compile: true``) and ``cudagraphs`` (``compile_mode: reduce-overhead``) joined by ``+``, or ``eager``. (Other
    compile modes are priced as ``compile``; ``adamw_impl: auto`` is torch's foreach on a GPU.)"""
    parts = ["fused"] if reader.get("adamw_impl") == "fused" else []
    if reader.get("compile"):
        parts.append("compile")
        if reader.get("compile_mode") == "reduce-overhead":
            parts.append("cudagraphs")
    return "+".join(parts) or "eager"


def gpu_cell_measurements(results: Path) -> dict[str, Any] | None:
    """The GPU reader cell's measurements, as ``results/gpu_plan_cells.json`` names them (None without it or a file
    it names): ``steps`` (variant -> :class:`GpuStep`, each from its run file's ``readers``), ``loop_s`` (pgra's
    training loop's ``loop_overhead_s`` around the step it names), the bench reader's ``batch`` and ``passages``,
    and ``overheads`` (:class:`CellOverheads`)."""
    path = Path(results) / GPU_PLAN_CELLS
    if not path.is_file():
        return None
    names = json.loads(path.read_text())
    files = {n["file"] for n in names["steps"].values()} | {names["loop"]["file"], names["overheads"]["file"]}
    if not all((path.parent / f).is_file() for f in files):
        return None
    run = {f: json.loads((path.parent / f).read_text()) for f in files}
    steps = {}
    for variant, where in names["steps"].items():
        rows = {r["variant"]: r for r in run[where["file"]]["readers"]}
        r, w = rows[variant], rows[where.get("warmup_variant", variant)]
        warm = int(run[where["file"]]["args"]["warmup_steps"])
        steps[variant] = GpuStep(variant, float(r["s_per_step"]),
                                 max(float(w["warmup_s"]) - warm * float(w["s_per_step"]), 0.0), where["file"])
        batch, passages = int(r["batch"]), int(r["passages"])
    loop = next(r for r in run[names["loop"]["file"]]["loops"] if r["variant"] == names["loop"]["variant"])
    o = run[names["overheads"]["file"]]
    overheads = CellOverheads(float(o["process_start_median_s"]), float(o["load_median_s"]),
                              float(o["checkpoint_median_s"]), float(o["checkpoint_bytes"]), float(o["best_median_s"]),
                              float(o["best_bytes"]), f"measured on the {o['machine']['cpus']}-core dev machine, "
                                                      f"{names['overheads']['file']}")
    return {"steps": steps, "loop_s": float(loop["loop_overhead_s"]), "batch": batch, "passages": passages,
            "loop_source": f"{names['loop']['file']}, around {loop['variant']}", "overheads": overheads}


@dataclass
class BenchFits:
    """Cost fits from ``bench/results``: reader seconds per step ``reader_a + reader_b x d`` at ``reader_batch``
    (scaled by the measured share of a step training only the top layers, and of a bf16-autocast step on a CPU with
    bf16 hardware), reranking seconds ``rerank_a + rerank_b x candidate sentences``; each None when its file is
    missing."""

    device: str
    reader: tuple[float, float] | None = None
    reader_batch: int = 8
    reader_source: str = ""
    rerank: tuple[float, float] | None = None
    rerank_source: str = ""
    # a step training only the top n encoder layers (n=0: freeze_encoder) over one training every weight, and the
    # one-time CPU seconds per input of storing the frozen layers' outputs, per d (bench/results/
    # reader_top_layers.json: {d: [(n, share)]}, {d: [(n, s)]}, n counted in the bench reader's layers)
    top_layers: dict[int, list[tuple[int, float]]] | None = None
    top_layers_store: dict[int, list[tuple[int, float]]] | None = None
    bench_layers: int = 6
    # a CPU step under bf16 autocast (reader.mixed_precision: bf16) over the fp32 step, per d: {d: [(n, ratio)]}
    # (bench/results/reader_top_layers_bf16.json, the same bench with --precisions fp32,bf16; read only on a CPU
    # with bf16 hardware), n counted in that bench reader's bf16_layers
    bf16_ratios: dict[int, list[tuple[int, float]]] | None = None
    bf16_layers: int = 6
    # GPU: the measured steps of the bench reader's variants, the training loop's fixed cost per step around them,
    # the per-cell costs besides the steps, and why these fits (plan_device)
    gpu_steps: dict[str, GpuStep] | None = None
    bench_passages: int = 16
    loop_s: float = 0.0
    loop_source: str = ""
    overheads: CellOverheads | None = None
    # CPU: what cells and stages spend besides the priced steps and reranking (cpu_cell_costs.json)
    cpu_cells: CpuCellCosts | None = None
    # CPU: the intra-op threads the CPU benches ran with (the dev machine's cores, torch's default there:
    # cpu_cell_costs.json's machine.cpus), and the cores each worker of the planned grid computes on (None: as many
    # as the benches; a fraction where workers outnumber the cores); fewer make every bench-priced CPU second
    # bench_threads / cpu_threads times longer (:meth:`thread_factor`); storing the frozen layers' outputs was
    # measured on one thread (bench_reader_top_layers.py --threads 1)
    bench_threads: int = 2
    cpu_threads: float | None = None
    note: str = ""

    @classmethod
    def load(cls, results: Path | None = None, device: str | None = None) -> BenchFits:
        """The fits for ``device`` (``gpu`` / ``cpu``; default: whether CUDA is available) from ``results``
        (default: this checkout's ``bench/results``)."""
        results = Path(results) if results is not None else Path(__file__).resolve().parents[2] / "bench" / "results"
        if device is None:
            import torch

            device = "gpu" if torch.cuda.is_available() else "cpu"
        fits = cls(device)
        if device == "gpu":
            gpu = gpu_measurements(results)
            if gpu is not None:
                reader, lm = gpu["reader"], gpu["rerank"]
                fits.reader, fits.reader_batch = (0.0, reader["s_per_step"] / reader["passages"]), int(reader["batch"])
                fits.reader_source = (f"bench {reader['source']}: {reader['model']} {reader['s_per_step']:.3f} s/step "
                                      f"at d={reader['passages']} in pgra's training loop ({reader['variant']}) on an "
                                      f"H100, x d/{reader['passages']}")
                fits.rerank = (0.0, 1.0 / lm["texts_per_s"])
                fits.rerank_source = f"bench {lm['source']}: {lm['model']} {lm['texts_per_s']:.0f} texts/s on an H100"
            cells = gpu_cell_measurements(results)
            if cells is not None:
                fits.gpu_steps, fits.overheads = cells["steps"], cells["overheads"]
                fits.loop_s, fits.loop_source = cells["loop_s"], cells["loop_source"]
                fits.reader_batch, fits.bench_passages = cells["batch"], cells["passages"]
                base = fits.gpu_steps.get(DEFAULT_GPU_VARIANT) or next(iter(fits.gpu_steps.values()))
                fits.reader = (fits.loop_s, base.s_per_step / fits.bench_passages)
                fits.reader_source = (f"bench {GPU_PLAN_CELLS}: the H100's T5-base step of the reader's variant x "
                                      f"d/{fits.bench_passages} x batch/{fits.reader_batch} + {fits.loop_s:.3f} s of "
                                      f"pgra's training loop a step ({fits.loop_source})")
            return fits
        fits.cpu_cells = CpuCellCosts.load(results / CPU_CELL_COSTS)
        if fits.cpu_cells is not None and fits.cpu_cells.threads:
            fits.bench_threads = fits.cpu_cells.threads
        path = results / "reader_scale.json"
        if path.is_file():
            rows = json.loads(path.read_text())
            fits.reader = _line([r["d"] for r in rows], [r["s_per_step"] for r in rows])
            fits.reader_source = (f"bench {path.name}: {fits.reader[0]:.2f} s + {fits.reader[1]:.2f} s per passage "
                                  "per step, bert2bert-MiniLM at batch 8, 2-core CPU")
        path = results / "reader_top_layers.json"
        if path.is_file():
            rows = json.loads(path.read_text())
            fits.top_layers, fits.top_layers_store = top_layer_shares(rows), top_layer_store(rows)
            fits.bench_layers = max(int(r["n"]) for r in rows)
        path = results / "reader_top_layers_bf16.json"
        from .. import device as devices

        if path.is_file() and devices.cpu_has_native_bf16():  # emulated bf16 is slower than fp32: not measured
            fits.bf16_ratios = bf16_step_ratios(json.loads(path.read_text())) or None
            if fits.bf16_ratios:
                fits.bf16_layers = max(n for points in fits.bf16_ratios.values() for n, _ in points)
        path = results / "rerank_scale.json"
        if path.is_file():
            rows = json.loads(path.read_text())
            fits.rerank = _line([r["distinct"] for r in rows], [r["seconds"] for r in rows])
            fits.rerank_source = (f"bench {path.name}: {fits.rerank[0]:.1f} s + {1000 * fits.rerank[1]:.0f} ms per "
                                  "candidate, SmolLM2-135M fp32, 2-core CPU")
        return fits

    def thread_factor(self, measured_threads: float | None = None) -> float:
        """How much longer CPU work measured on ``measured_threads`` (default: the benches') takes on a worker
        computing on ``cpu_threads`` cores: their ratio, never below 1 (more threads are not assumed faster), and 1
        on a GPU or where either is unknown."""
        measured = self.bench_threads if measured_threads is None else measured_threads
        if self.device != "cpu" or not self.cpu_threads or not measured or self.cpu_threads >= measured:
            return 1.0
        return measured / self.cpu_threads

    def cpu_price(self, kind: str, inputs: int | None, scale: float = 1.0) -> Priced | None:
        """``kind``'s measured fixed part plus ``inputs`` x its seconds per input (:meth:`CpuCellCosts.price`) on a
        CPU, x :meth:`thread_factor`; None on a GPU or without ``bench/results/cpu_cell_costs.json``."""
        if self.cpu_cells is None or self.device != "cpu":
            return None
        priced = self.cpu_cells.price(kind, inputs, scale)
        return Priced(priced[0] * self.thread_factor(), priced[1], self.device) if priced is not None else None

    def reader_seconds(self, steps: int, passages: int, batch: int, trained_layers: int | None = None,
                       encoder_layers: int | None = None, inputs: int | None = None,
                       mixed_precision: str = "no") -> float | None:
        """A reader cell's training time: ``steps`` x the step time at ``passages``, scaled by ``batch``; where the
        bench measured it, a reader training only the top ``trained_layers`` of its ``encoder_layers`` (0: the
        frozen encoder) costs that share of the step, plus storing the frozen layers' outputs of ``inputs``, and a
        CPU step under bf16 autocast (``mixed_precision``) its measured share of the fp32 step."""
        if self.reader is None:
            return None
        if self.gpu_steps:  # the loop's cost a step is fixed; the model step's scales with d and the batch
            return steps * self.gpu_step(DEFAULT_GPU_VARIANT, passages, batch)[0]
        a, b = self.reader
        seconds = steps * (a + b * max(passages, 1)) * batch / self.reader_batch
        seconds *= self.bf16_ratio(mixed_precision, trained_layers, passages, encoder_layers) or 1.0
        seconds *= self.thread_factor()
        share = self.top_layer_share(trained_layers, passages, encoder_layers)
        if share is None:
            return seconds
        store = self.store_seconds(trained_layers, passages, encoder_layers)  # measured on one thread
        return seconds * share + (store or 0.0) * (inputs or 0) * self.thread_factor(1)

    def bf16_ratio(self, mixed_precision: str, trained_layers: int | None, passages: int,
                   encoder_layers: int | None) -> float | None:
        """A CPU training step under bf16 autocast over the fp32 step, at the measured d nearest ``passages`` and
        the trained layers as a share of the bench reader's (every weight when ``trained_layers`` is None or the
        reader's layer count unknown, as the fp32 estimate then assumes); None for fp32 or fp16, on a GPU, or where
        not measured (a CPU without bf16 hardware)."""
        if mixed_precision != "bf16" or self.device != "cpu" or not self.bf16_ratios:
            return None
        if trained_layers is None or not encoder_layers:
            n = float(self.bf16_layers)
        else:
            n = min(trained_layers, encoder_layers) * self.bf16_layers / encoder_layers
        return _linear(self._nearest_d(self.bf16_ratios, passages), n)

    def _bench_layers(self, trained_layers: int | None, encoder_layers: int | None) -> float | None:
        if trained_layers is None or not encoder_layers or not self.top_layers:
            return None
        return min(trained_layers, encoder_layers) * self.bench_layers / encoder_layers

    def _nearest_d(self, table: dict[int, list[tuple[int, float]]], passages: int) -> list[tuple[int, float]]:
        return table[min(table, key=lambda m: (abs(m - max(passages, 1)), m))]

    def top_layer_share(self, trained_layers: int | None, passages: int, encoder_layers: int | None
                        ) -> float | None:
        """A step's cost training the top ``trained_layers`` of ``encoder_layers`` over one training every weight,
        at the measured d nearest ``passages`` (the layers as a share of the bench reader's, linear between
        measured counts); None when not measured or the layer count is unknown."""
        n = self._bench_layers(trained_layers, encoder_layers)
        return None if n is None else _linear(self._nearest_d(self.top_layers, passages), n)

    def store_seconds(self, trained_layers: int | None, passages: int, encoder_layers: int | None
                      ) -> float | None:
        """CPU seconds per input of storing the frozen layers' outputs (none when every layer trains)."""
        n = self._bench_layers(trained_layers, encoder_layers)
        if n is None or not self.top_layers_store:
            return None
        return _linear(self._nearest_d(self.top_layers_store, passages) + [(self.bench_layers, 0.0)], n)

    def rerank_seconds(self, candidates: int) -> float | None:
        """Reranking ``candidates`` candidate sentences (an upper bound: shared candidates embed once)."""
        if self.rerank is None:
            return None
        a, b = self.rerank
        return (a + b * candidates) * self.thread_factor()

    def gpu_step(self, variant: str, passages: int, batch: int) -> tuple[float, float, GpuStep, str]:
        """One optimizer step of ``variant`` at ``passages`` and ``batch`` inputs on the GPU: ``(seconds, of them
        the model step's, the measured step priced, what stands in for it)``: the measured step x max(d, 1) / the
        bench's d x ``batch`` / the bench's batch (no retrieval reads the input alone, one sequence), plus the training
        loop's fixed cost a step (collation, the scheduler, the loss read back: measured around ``fused+compile``,
        assumed the same around every variant)."""
        step, instead = self.gpu_variant_step(variant)
        model = step.s_per_step * max(passages, 1) / self.bench_passages * batch / self.reader_batch
        return self.loop_s + model, model, step, instead

    def gpu_variant_step(self, variant: str) -> tuple[GpuStep, str]:
        """The measured step of ``variant``, else of the same variant with the other AdamW kernels, else of the
        default variant; with a note of the stand-in (empty when measured)."""
        steps = self.gpu_steps or {}
        if variant in steps:
            return steps[variant], ""
        parts = [x for x in variant.split("+") if x != "eager"]
        other = [x for x in parts if x != "fused"] if "fused" in parts else ["fused", *parts]
        for name in ("+".join(other) or "eager", DEFAULT_GPU_VARIANT):
            if name in steps:
                return steps[name], f"{variant} not measured: priced as {name}"
        name, step = next(iter(steps.items()))
        return step, f"{variant} not measured: priced as {name}"

    def gpu_cell(self, reader: dict[str, Any], splits: dict[str, int] | None = None) -> CellCost | None:
        """A reader cell on the GPU as its settings run it (``reader``: the cell's reader settings): its steps
        (:meth:`gpu_step` of the variant its ``compile``, ``compile_mode`` and ``adamw_impl`` make, x ``grad_accum``),
        the variant's measured warm-up (its compilation, once), its dev evaluations (every ``eval_every`` steps) and
        the final dev and test evaluation (``splits``: inputs per split; a forward pass of the eager step at
        ``FLOPS_PER_TOKEN`` forward/trained of it an input), its checkpoints (every ``save_every``, else
        ``eval_every``, steps and at the end) and ``best/`` saves (at most one per evaluation), two model loads (the
        reader, then ``best/`` for the final evaluation) and the cell process's start, each at its measured time
        (:data:`GPU_PLAN_CELLS` names the runs); None without the GPU fits."""
        if not self.gpu_steps:
            return None
        from ..cost import FLOPS_PER_TOKEN

        variant = gpu_variant(reader)
        steps = int(reader.get("max_steps", 0))
        passages, accum = int(reader.get("n_passages", 0)), int(reader.get("grad_accum", 1) or 1)
        batch = int(reader.get("batch_size", self.reader_batch)) * accum
        step_s, model_s, step, instead = self.gpu_step(variant, passages, batch)
        eval_every, save_every = int(reader.get("eval_every", 0)), int(reader.get("save_every", 0))
        evaluations = steps // eval_every if eval_every else 0
        notes = [instead] if instead else []
        precision = str(reader.get("mixed_precision", "no"))
        if precision != "bf16":
            notes.append(f"measured under bf16 autocast, not {precision}")
        if not step.variant.endswith("cudagraphs") and passages < self.bench_passages:
            notes.append(f"a step at d={passages} launches its kernels from the host as at d={self.bench_passages}: "
                         "partly host-bound, so its linear scaling in d is an underestimate")
        if trained_layers(reader) is not None:
            notes.append("frozen encoder layers not measured on a GPU: priced as training every weight")
        if variant.endswith("cudagraphs") and int(reader.get("pad_to_multiple", 1)) <= 1:
            notes.append("CUDA graphs record a graph per batch width: unpadded (pad_to_multiple), up to max_length")
        parts = {"steps": steps * step_s, "warm-up": step.warmup_s}
        device = steps * model_s
        eager = (self.gpu_steps or {}).get("eager", step)
        per_input = (eager.s_per_step / self.reader_batch * FLOPS_PER_TOKEN["forward"] / FLOPS_PER_TOKEN["trained"]
                     * max(passages, 1) / self.bench_passages)
        evaluated = evaluated_inputs(reader, splits)
        if evaluated is not None:
            parts["evaluations"] = evaluated * per_input
            device += parts["evaluations"]
        else:
            notes.append("evaluations not priced: the split sizes are unknown")
        written = kept = 0.0
        o = self.overheads
        if o is not None:
            saves = math.ceil(steps / (save_every or eval_every or steps or 1)) if steps else 0
            best = max(evaluations, 1)
            keep = min(int(reader.get("keep_checkpoints", 1) or 1), saves)
            parts.update({"checkpoints": saves * o.checkpoint_s, "best/": best * o.best_s, "loads": 2 * o.load_s,
                          "start": o.process_start_s})
            # a finished cell keeps best/; its checkpoints are deleted unless keep_resume_state
            written = saves * o.checkpoint_bytes + best * o.best_bytes
            kept = (keep * o.checkpoint_bytes if reader.get("keep_resume_state") else 0.0) + o.best_bytes
        seconds = sum(parts.values())
        gb = lambda b: f"{b / 1e9:.1f} GB"  # noqa: E731
        text = [f"{steps} steps x ({step.variant} {step.s_per_step:.3f} s x {max(passages, 1)}/{self.bench_passages}"
                f" x {batch}/{self.reader_batch} + loop {self.loop_s:.3f} s) = {format_seconds(parts['steps'])}",
                f"warm-up {format_seconds(step.warmup_s)}"]
        if evaluated is not None:
            text.append(f"{evaluations} dev evaluations + final dev/test: {evaluated} inputs at "
                        f"{1000 * per_input:.1f} ms {format_seconds(parts['evaluations'])}")
        if o is not None:
            text.append(f"{saves} checkpoints x {gb(o.checkpoint_bytes)} {format_seconds(parts['checkpoints'])}, "
                        f"best/ at most {best} x {gb(o.best_bytes)} {format_seconds(parts['best/'])}, 2 loads "
                        f"{format_seconds(parts['loads'])}, process start {format_seconds(parts['start'])} "
                        f"({o.source})")
        source = f"bench H100, {GPU_PLAN_CELLS}: " + "; ".join(text + notes)
        return CellCost(seconds, device, parts, source, written, kept)


# ----------------------------------------------------------------------------------------------- estimates

GPU_PLAN_INPUTS = "gpu_plan_inputs.json"


def gpu_measurements(results: Path) -> dict[str, dict[str, Any]] | None:
    """The H100 measurements GPU plans use, as ``results/gpu_plan_inputs.json`` names them (None without it or
    one of the files it names):
    ``encoding`` (BERT-base sentences/s), ``index`` (the flat index of 1M vectors built and searched on the CPU
    cores), ``rerank`` (the named reranker's texts/s) and ``reader`` (a step of pgra's own training loop in the
    named variant); each with the ``source`` file its numbers come from."""
    path = Path(results) / GPU_PLAN_INPUTS
    if not path.is_file():
        return None
    names = json.loads(path.read_text())
    files = {part: path.parent / names[part]["file"] for part in ("encoding", "index", "rerank", "reader")}
    if not all(f.is_file() for f in files.values()):
        return None
    run = {part: json.loads(f.read_text()) for part, f in files.items()}
    source = {part: names[part]["file"] for part in run}
    rerank = next(r for r in run["rerank"]["rerank"] if r["model"] == names["rerank"]["model"])
    reader = next(r for r in run["reader"]["loops"] if r["variant"] == names["reader"]["loop_variant"])
    index = run["index"]["encoding"]
    return {"encoding": {**run["encoding"]["encoding"], "source": source["encoding"]},
            "index": {"index_vectors": index["index_vectors"], "index_build_s": index["index_build_s"],
                      "search_1000_queries_top150_s": index["search_1000_queries_top150_s"],
                      "source": source["index"]},
            "rerank": {**rerank, "source": source["rerank"]}, "reader": {**reader, "source": source["reader"]}}


def _device(record: dict[str, Any]) -> str:
    name = str((record.get("hardware") or {}).get("device", "cpu"))
    return "cpu" if name == "cpu" else "gpu"


def _recorded_cells(fits: BenchFits | None, records: list[dict[str, Any]]) -> tuple[float, str, float]:
    """The mean of finished cells' recorded seconds (``records``: cell.json records) as one of the plan's workers
    would take them (:func:`_one_worker`: the training loop of a cell trained by several processes together, x
    their number; on a CPU, x :meth:`BenchFits.thread_factor` at the cores each had), a clause saying so (empty
    when nothing scaled), and the mean of those seconds that DDP ranks would split (a reader's training loop,
    ``split_s``; 0 for a cell that records none)."""
    priced = [_one_worker(r["cost"], fits, cell=True) for r in records]
    seconds = sum(s for s, _, _ in priced) / len(priced)
    split = sum(x for _, _, x in priced) / len(priced)
    whys = {why for _, why, _ in priced}
    if len(whys) == 1:
        return seconds, whys.pop(), split
    recorded = sum(float(r["cost"]["elapsed_s"]) for r in records) / len(records)
    return seconds, f", x {seconds / recorded:.3g} for the processes and cores each ran on" if recorded else "", split


def _one_worker(record: dict[str, Any], fits: BenchFits | None, cell: bool = False) -> tuple[float, str, float]:
    """A stage's or cell's recorded seconds as one worker of the plan would take them (the plan divides a stage by
    the workers, or on GPUs by the devices, that share it): :func:`pgra.cost.device_seconds` (its wall-clock, with
    the part its devices split x their number: a stage's all, a DDP-trained cell's training loop), on a CPU also x
    :meth:`BenchFits.thread_factor` at the cores each process had (``cores_each``, else its torch threads). Also a
    clause saying so (empty when 1), and of those seconds the ones DDP ranks split (a ``cell``'s ``split_s``, scaled
    alike, 0 where it records none; all of a stage's)."""
    shared, gpu = sharing(record), on_gpu(record)
    hardware = record.get("hardware") if isinstance(record.get("hardware"), dict) else {}
    threads = hardware.get("cores_each", hardware.get("torch_threads"))
    factor = fits.thread_factor(float(threads)) if (fits is not None and not gpu and finite_number(threads)
                                                    and threads > 0) else 1.0
    unit = "GPU(s)" if gpu else "process(es)"
    why = "" if shared == 1 else (f", its training loop x {shared} {unit} that split it" if cell else
                                  f", x {shared} {unit} that built it")
    if factor != 1.0:
        why += f", x {factor:.3g} for {fits.cpu_threads:.3g} core(s) a worker"  # type: ignore[union-attr]
    # a cell that records no split_s split nothing, unless it ran under several processes (a record edited by hand)
    split = (split_seconds(record) * shared if "split_s" in record or shared > 1 else 0.0) if cell else \
        device_seconds(record)
    return device_seconds(record) * factor, why, split * factor


def _scaled(seconds: float, label: str, inputs: int | None, their_inputs: int | None) -> tuple[float, str] | None:
    if not inputs or not their_inputs:
        return None
    return seconds * inputs / their_inputs, f"recorded: {label}, x {inputs}/{their_inputs} inputs"


def estimate_cell(task: str, method: str, settings: dict[str, Any], records: list[tuple[str, dict[str, Any]]],
                  inputs: dict[str, int | None], fits: BenchFits | None = None,
                  splits: dict[str, dict[str, int] | None] | None = None,
                  disk: dict[str, Any] | None = None) -> Estimate:
    """A cell's cost from ``records`` (``(label, cell.json)`` of finished cells): the same task, method and
    settings (their mean), else the same method on another task scaled by input counts (``inputs``: task name ->
    count), else the bench fit for a reader (``settings["reader"]``; on a GPU the whole cell as its settings run it,
    :meth:`BenchFits.gpu_cell`, with ``splits``: task name -> inputs per split, and ``disk``: the reader's cosmetic
    ``keep_checkpoints`` and ``keep_resume_state``, which no settings hold), else unknown."""
    label = f"{task}/{method}"
    settings = json.loads(json.dumps(settings, sort_keys=True, default=str))  # as cell.json holds them
    usable = [(lab, r) for lab, r in records if r.get("method") == method and r.get("cost")
              and not r["cost"].get("resumed")]
    same = [(lab, r) for lab, r in usable if r.get("task") == task and r.get("settings") == settings]
    if same:
        seconds, why, split = _recorded_cells(fits, [r for _, r in same])
        names = ", ".join(lab for lab, _ in same)
        return Estimate(label, seconds, f"recorded: {names}{why}", _device(same[0][1]["cost"]), split_s=split)
    shared = _sharing_part(task, method, settings, records)
    if shared:
        seconds, why, split = _recorded_cells(fits, [r for _, r in shared[1]])
        return Estimate(label, seconds, f"recorded: {', '.join(lab for lab, _ in shared[1])} (another "
                                                 f"method with the same {shared[0]} settings){why}",
                        _device(shared[1][0][1]["cost"]), split_s=split)
    for lab, r in usable:
        if r.get("task") != task:
            seconds, why, split = _recorded_cells(fits, [r])
            scaled = _scaled(seconds, lab, inputs.get(task), inputs.get(r.get("task", "")))
            if scaled:
                return Estimate(label, scaled[0], scaled[1] + why, _device(r["cost"]),
                                split_s=split * scaled[0] / seconds if seconds else 0.0)
    if fits is not None:  # the method's own cost model (a reader's steps, in-context prompts, a cell's inputs)
        priced = method_class(method, settings).price(fits, settings, inputs.get(task), (splits or {}).get(task), disk)
        if priced is not None:
            return Estimate(label, priced.seconds, priced.source, priced.device, priced.device_s,
                            priced.written_bytes, priced.kept_bytes, priced.split_s or 0.0)
    return Estimate(label, None, "no record of this method, no bench fit")


def _sharing_part(task: str, method: str, settings: dict[str, Any], records: list[tuple[str, dict[str, Any]]]
                  ) -> tuple[str, list[tuple[str, dict[str, Any]]]] | None:
    """Finished cells of other methods on ``task`` whose reader (or in-context) settings equal this cell's: ``(the
    part, those records)``, None when there are none. FiD's cell prices PGRA's (the same reader on other evidence of
    the same size); one in-context strategy's prices another's."""
    part = "reader" if settings.get("reader") else "icl" if settings.get("icl") else None
    if part is None:
        return None
    found = [(lab, r) for lab, r in records if r.get("task") == task and r.get("method") != method and r.get("cost")
             and not r["cost"].get("resumed") and (r.get("settings") or {}).get(part) == settings[part]]
    return (part, found) if found else None


def estimate_stage(task: str, stage: str, done: bool, records: list[tuple[str, str, dict[str, Any]]],
                   inputs: dict[str, int | None], fits: BenchFits | None = None, candidates: int | None = None
                   ) -> Estimate:
    """A shared stage's cost: 0 when ``done``; else its own earlier record, or the same stage of another task
    scaled by input counts (``records``: ``(task, stage, cost.json)``); else for ``reranked`` the bench fit over
    ``candidates`` (inputs x k); else unknown."""
    label = f"{task}/{stage}"
    if done:
        return Estimate(label, 0.0, "done")
    same = [r for t, s, r in records if s == stage and t == task]
    if same:
        seconds, why, _ = _one_worker(same[0], fits)
        return Estimate(label, seconds, f"recorded: {label} (earlier settings){why}", _device(same[0]))
    for t, s, r in records:
        if s == stage and t != task:
            seconds, why, _ = _one_worker(r, fits)
            scaled = _scaled(seconds, f"{t}/{s}", inputs.get(task), inputs.get(t))
            if scaled:
                return Estimate(label, scaled[0], scaled[1] + why, _device(r))
    if fits is not None:  # the stage's own cost model (the reranking LM's texts, the first stage's inputs)
        from ..errors import InputError
        from ..stages import get_stage

        try:
            priced = get_stage(stage).price(fits, inputs.get(task), candidates)
        except InputError:  # a record of a stage no family names now
            priced = None
        if priced is not None:
            return Estimate(label, priced.seconds, priced.source, priced.device)
    return Estimate(label, None, "no record of this stage, no bench fit")


def method_class(method: str, settings: dict[str, Any]) -> type:
    """The class registered as ``method`` (whose :meth:`~pgra.methods.Method.price` is its cost model); for a name
    no method has (a record of a method since removed), the kind its settings show: a reader, in-context learning or
    any other cell; likewise for a method with no cost model of its own (:meth:`pgra.methods.Method.price`)."""
    from ..errors import InputError
    from ..methods import ICL, METHODS, Method
    from ..methods.reader_method import ReaderMethod

    shown = ReaderMethod if settings.get("reader") else ICL if settings.get("icl") else Method
    try:
        cls = METHODS.part(method)
    except InputError:
        return shown
    # a method without a cost model of its own whose settings are a reader's or in-context learning's: priced as one
    return shown if getattr(cls.price, "__func__", None) is Method.price.__func__ else cls


def _corpus_size(exp: GridView) -> int | None:
    """The sentences of the experiment's index (what ``full_search`` embeds), None before it is built."""
    manifest = Path(exp.cfg.index.out) / "manifest.json"
    return int(read_json(manifest).get("size") or 0) or None if manifest.exists() else None


def _linear(points: list[tuple[int, float]], x: float) -> float:
    """``points`` (sorted by x) read at ``x``: linear between neighbours, the end values beyond them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return points[-1][1]


def top_layer_store(rows: list[dict[str, Any]]) -> dict[int, list[tuple[int, float]]]:
    """``{d: [(n, CPU s per input storing the frozen layers' outputs), ...]}`` from the same rows (n sorted; the
    reader with every weight trained stores nothing and has no entry)."""
    by_d: dict[int, dict[int, float]] = {}
    for r in rows:
        if r.get("store_cpu_s_per_input") is not None and r.get("precision", "fp32") == "fp32":
            by_d.setdefault(int(r["d"]), {})[int(r["n"])] = float(r["store_cpu_s_per_input"])
    return {d: sorted(v.items()) for d, v in sorted(by_d.items())}


def bf16_step_ratios(rows: list[dict[str, Any]]) -> dict[int, list[tuple[int, float]]]:
    """``{d: [(n, bf16 step / fp32 step), ...]}`` from ``bench_reader_top_layers.py --precisions fp32,bf16`` rows
    (n sorted)."""
    by_d: dict[int, dict[int, float]] = {}
    for r in rows:
        if r.get("precision") == "bf16" and math.isfinite(float(r.get("ratio_to_fp32", "nan"))):
            by_d.setdefault(int(r["d"]), {})[int(r["n"])] = float(r["ratio_to_fp32"])
    return {d: sorted(v.items()) for d, v in sorted(by_d.items())}


def top_layer_shares(rows: list[dict[str, Any]]) -> dict[int, list[tuple[int, float]]]:
    """``{d: [(n, CPU s per step at n / at every layer), ...]}`` from ``bench_reader_top_layers.py``'s rows (n
    sorted; the largest n of each d is the reader with every weight trained)."""
    by_d: dict[int, dict[int, float]] = {}
    for r in rows:
        if r.get("precision", "fp32") == "fp32":
            by_d.setdefault(int(r["d"]), {})[int(r["n"])] = float(r["cpu_s_per_step"])
    return {d: [(n, steps[n] / steps[max(steps)]) for n in sorted(steps)] for d, steps in sorted(by_d.items())}


def stage_embeddings(rerank, retrieved_k: int, inputs: int | None, corpus: int | None, stages: list[str],
                     corpus_passed: bool = False) -> dict[str, int | None]:
    """The texts each stage's LM embeds (what the bench fit prices; None: unknown, or it runs none), as each stage
    counts them (:meth:`pgra.stages.Stage.embedded_texts`: a reranked stage's inputs x k at most the corpus, or the
    corpus; the full search's corpus, or only its queries after a corpus pass, ``corpus_passed``)."""
    from ..errors import InputError
    from ..stages import get_stage

    out: dict[str, int | None] = {}
    for stage in stages:
        try:
            out[stage] = get_stage(stage).embedded_texts(rerank, retrieved_k, inputs, corpus, stages, corpus_passed)
        except InputError:  # a stage no family names now: nothing to price
            out[stage] = None
    return out


def _reranked(stage: str) -> bool:
    """Whether ``stage`` is a reranker's (``reranked``, ``reranked-<name>``): what these estimates price."""
    return stage == "reranked" or stage.startswith("reranked-")


def _corpus_passed(exp: GridView, task: str, corpus: int | None) -> bool:
    """Whether ``task``'s reranked stage embeds (or embedded) the whole corpus: it is still to run with
    ``corpus_pass: corpus`` (and the corpus size is known), or its manifest records that pass."""
    if not exp.stage_done(task, "reranked"):
        return exp.rerank_config(task).corpus_pass == "corpus" and corpus is not None
    manifest = exp.stage_dir(task, "reranked") / "manifest.json"
    try:
        record = read_json(manifest) if manifest.is_file() else {}
    except (OSError, ValueError, PgraError):  # a hand-edited manifest: the plan says what it can
        return False
    passed = record.get("corpus_pass") if isinstance(record, dict) else None
    return isinstance(passed, dict) and passed.get("mode") == "corpus"


@dataclass
class Plan:
    """The estimates of a grid and its wall-clock on ``workers`` processes, ``cells_per_gpu`` of them sharing each
    GPU (the config's ``cells_per_gpu``: ``workers`` is then GPUs x that); ``note``: which fits priced it and why."""

    stages: list[Estimate]
    cells: list[Estimate]
    workers: int
    cells_per_gpu: int = 1
    note: str = ""
    disk: DiskPlan | None = None  # what the grid holds on disk (plan_disk)
    command_s: float = 0.0  # the command's own seconds besides its stages and cells (imports, checks, the report)
    # the workers are separate one-process jobs (--launcher local | slurm): a stage is built by the one job that
    # claims it, not sharded; the tasks' stages run side by side
    separate_jobs: bool = False
    # parallel: ddp: the cells run one after another, each by all the workers (a reader's split among them)
    ddp: bool = False

    @property
    def known(self) -> list[Estimate]:
        return [e for e in self.stages + self.cells if e.seconds is not None]

    def hours(self, device: str) -> float:
        return sum(e.seconds for e in self.known if e.device == device) / 3600  # type: ignore[misc]

    def shared_seconds(self, e: Estimate) -> float:
        """A cell's seconds when ``cells_per_gpu`` cells share its GPU. Not measured (no bench run shared a GPU): the
        planner's assumption is that the device runs one cell's work at a time while the others' host work (the
        loop's collation and loss reads, loads, checkpoint writes, the process start) overlaps it, so a cell takes
        the longer of its own time and ``cells_per_gpu`` x its device time (all of its time where that is
        unknown: no gain)."""
        seconds = e.seconds or 0.0
        if self.cells_per_gpu <= 1:
            return seconds
        device = seconds if e.device_s is None else e.device_s
        return max(seconds, self.cells_per_gpu * device)

    @property
    def gpus(self) -> int:
        """The devices under the workers: ``workers`` over ``cells_per_gpu`` (at least 1)."""
        return max(self.workers // max(self.cells_per_gpu, 1), 1)

    def wallclock(self) -> tuple[float, float]:
        """(stages, cells) seconds on the workers: stages one after another, each sharded over the GPUs (with
        ``separate_jobs``: each task's stages one after another in the job that claims them, the tasks side by side
        on the GPUs); cells side by side, one per worker (``cells_per_gpu`` sharing a GPU), costliest first, or
        with ``ddp`` one after another, the seconds the ranks split (:attr:`Estimate.split_s`: a reader's steps)
        divided among the GPUs as a stage is, the rest whole."""
        if self.separate_jobs:
            chains: dict[str, float] = {}
            for e in self.stages:  # labels are "<task>/<stage>"
                task = e.label.rsplit("/", 1)[0]
                chains[task] = chains.get(task, 0.0) + (e.seconds or 0.0)
            stages = plan_wallclock(list(chains.values()), self.gpus)
        else:
            stages = sum(e.seconds or 0.0 for e in self.stages) / self.gpus
        if self.ddp:
            split = [min(max(e.split_s, 0.0), e.seconds or 0.0) for e in self.cells]
            return stages, sum((e.seconds or 0.0) - s + s / self.gpus for e, s in zip(self.cells, split, strict=True))
        return stages, plan_wallclock([self.shared_seconds(e) for e in self.cells], self.workers)

    def summary(self) -> list[str]:
        stages, cells = self.wallclock()
        unknown = len(self.stages) + len(self.cells) - len(self.known)
        per_gpu = f", {self.cells_per_gpu} per GPU on {self.gpus}" if self.cells_per_gpu > 1 else ""
        lines = [f"fits: {self.note}"] if self.note else []
        lines += [f"expected cost: {format_seconds(sum(e.seconds for e in self.known))} of work "  # type: ignore[misc]
                  f"({self.hours('gpu'):.2f} GPU h, {self.hours('cpu'):.2f} CPU h)"]
        written = sum(e.written_bytes for e in self.cells)
        if written:
            lines.append(f"disk writes: the cells' checkpoints and best/ saves write at most {written / 1e12:.2f} TB "
                         f"(at the measured sizes); done, they keep {sum(e.kept_bytes for e in self.cells) / 1e9:.0f} "
                         "GB (best/; checkpoints deleted unless reader.keep_resume_state)")
        if self.cells_per_gpu > 1 and not self.ddp:
            lines.append(f"{self.cells_per_gpu} cells per GPU (assumed, not measured: each cell at the longer of its "
                         f"own time and {self.cells_per_gpu} x its device time)")
        own = f" + the command's own {format_seconds(self.command_s)}" if self.command_s else ""
        how = (f"each task's built by one job, the tasks side by side{', one a GPU' if self.cells_per_gpu > 1 else ''}"
               if self.separate_jobs else
               "each sharded over the GPUs, one rank a GPU" if self.cells_per_gpu > 1 else
               "each sharded over the workers")
        side = ("one after another (DDP): a reader's training split among the workers, the rest whole" if self.ddp else
                f"side by side{per_gpu}, costliest first")
        lines.append(f"wall-clock on {self.workers} worker(s): stages {format_seconds(stages)} ({how}) + cells {format_seconds(cells)} ({side}){own} = "
                     f"{format_seconds(stages + cells + self.command_s)}")
        if unknown:
            lines.append(f"  {unknown} stage(s)/cell(s) without an estimate, not counted")
        if self.disk is not None:
            lines += self.disk.lines()
        return lines


PLAN_DEVICES = ("auto", "cuda", "gpu", "cpu")


def gpu_requests(cfg: Any) -> list[str]:
    """What in an experiment config asks for GPUs (empty: nothing): Slurm workers with GPUs, a reader with CUDA
    graphs (``compile_mode: reduce-overhead``) or fp16, a ``cuda`` device for the index, retrieval, reranker or
    in-context LM."""
    from .config import cell_settings

    found: list[str] = []

    def say(text: str) -> None:
        if text not in found:
            found.append(text)

    if getattr(cfg, "launcher", "none") == "slurm" and int(getattr(cfg.slurm, "gpus_per_worker", 0) or 0) > 0:
        say(f"slurm.gpus_per_worker={cfg.slurm.gpus_per_worker}")
    for task in cfg.tasks:
        for method in cfg.methods:
            s = cell_settings(cfg, task, method)
            if s.reader.compile and s.reader.compile_mode == "reduce-overhead":
                say("reader.compile_mode=reduce-overhead (CUDA graphs)")
            if s.reader.mixed_precision == "fp16":
                say("reader.mixed_precision=fp16")
            index_options = getattr(s.index, s.index.retriever, None)  # the retriever's own section
            for field, value in ((f"index.{s.index.retriever}.device", getattr(index_options, "device", "")),
                                 ("retrieve.device", getattr(s.retrieve, "device", "")),
                                 ("rerank.device", getattr(s.rerank, "device", "")),
                                 ("icl.device", getattr(s.icl, "device", ""))):
                if str(value).startswith("cuda"):
                    say(f"{field}={value}")
    return found


def plan_device(cfg: Any) -> tuple[str, str]:
    """Which fits price the plan, ``gpu`` or ``cpu``, and why: ``plan_device`` of the config (when it has the
    option) or ``PGRA_PLAN_DEVICE`` (``cuda``/``gpu``, ``cpu``, ``auto``); on ``auto``, the GPU's where this machine
    has CUDA or the config asks for GPUs (:func:`gpu_requests`: a login node without CUDA then prices the GPU
    fits, and says so), else the CPU's."""
    import torch

    chosen = str(getattr(cfg, "plan_device", "") or os.environ.get("PGRA_PLAN_DEVICE", "") or "auto").lower()
    from ..errors import InputError, clip

    where = "plan_device" if getattr(cfg, "plan_device", "") else "PGRA_PLAN_DEVICE"
    if chosen not in PLAN_DEVICES:
        raise InputError(f"{clip(chosen)}: must be one of {', '.join(PLAN_DEVICES)}", field=where)
    if chosen in ("cuda", "gpu"):
        return "gpu", f"the GPU's, as {where}={chosen} asks"
    if chosen == "cpu":
        return "cpu", f"the CPU's, as {where}=cpu asks"
    if torch.cuda.is_available():
        return "gpu", "the GPU's (this machine has CUDA)"
    asks = gpu_requests(cfg)
    if asks:
        return "gpu", (f"the GPU's: this machine has no CUDA, but the config asks for GPUs ({', '.join(asks)}), so "
                       "the plan prices the GPU fits, not this machine (PGRA_PLAN_DEVICE=cpu prices the CPU's)")
    return "cpu", ("the CPU's (this machine has no CUDA and the config asks for no GPU; PGRA_PLAN_DEVICE=cuda prices "
                   "the GPU's)")


def default_workers() -> int:
    """The process count of the launch (``WORLD_SIZE``), 1 without a launcher."""
    return whole_number(os.environ.get("WORLD_SIZE", "")) or 1


def worker_threads(workers: int, launcher: str = "none", slurm: Any = None) -> float | None:
    """The cores each of ``workers`` CPU workers computes on: this machine's (:func:`pgra.device.node_cores`) shared
    among them (a fraction where they outnumber the cores), at most the ``OMP_NUM_THREADS`` a rank runs with (a
    user's, or what pgra makes of a launcher's default, :func:`pgra.device.launcher_threads`). Slurm jobs
    (``slurm``: the config's section) compute on their ``cpus_per_worker``; submitit's local cluster shares this
    machine. None where unknown."""
    from ..device import THREADS_ENV, launcher_threads, node_cores

    if launcher == "slurm" and getattr(slurm, "cluster", "slurm") != "local":
        cpus = int(getattr(slurm, "cpus_per_worker", 0) or 0)
        return float(cpus) if cpus > 0 else None
    share = node_cores() / max(workers, 1)
    given = launcher_threads()
    if given is None:
        given = whole_number(os.environ.get(THREADS_ENV, "")) or None
    return min(share, float(given)) if given else share


def count_lines(paths: list[Path]) -> int | None:
    """The lines of ``paths`` together; None when none of them is a file."""
    files = [p for p in paths if p.is_file()]
    if not files:
        return None
    total = 0
    for p in files:
        with open(p, "rb") as f:
            total += sum(1 for _ in f)
    return total


def task_splits(exp: GridView, name: str, task: str | None = None) -> dict[str, int] | None:
    """The inputs of a task of the experiment folder per split: the lines of its candidates folder's split files,
    else (a task of the config, ``task``) of its data files, each split at most its ``retrieve.split_sizes``, a dev
    split the task lacks carved from train (``dev_fraction``); None when none is found."""
    folder = exp.out / name / "candidates"
    found = {f.removesuffix(".jsonl"): count_lines([folder / f]) for f in SPLIT_FILES}
    if any(n is not None for n in found.values()) or task is None:
        counted = {k: n for k, n in found.items() if n is not None}
        return counted or None
    from ..tasks.loaders import resolve_data_path
    from .config import cell_settings

    settings = cell_settings(exp.cfg, task)
    spec = exp.tasks[task]
    base = resolve_data_path(spec.data, settings.data_dir)
    if not isinstance(base, Path):
        return None
    out: dict[str, int] = {}
    for split, file in spec.data.files.items():
        n = count_lines([base / file])
        if n is not None:
            cap = settings.retrieve.split_sizes.get(split, settings.retrieve.max_examples)
            out[split] = min(n, int(cap)) if cap else n
    if out and "dev" not in out and "train" in out:
        out["dev"] = int(round(out["train"] * spec.data.dev_fraction))
        out["train"] -= out["dev"]
    return out or None


def task_inputs(exp: GridView, name: str, task: str | None = None) -> int | None:
    """The inputs of a task of the experiment folder: the lines of its candidates folder's split files, else (a
    task of the config, ``task``) of its data files, each split at most its ``retrieve.split_sizes``."""
    splits = task_splits(exp, name, task)
    return None if splits is None else sum(splits.values())


def planned_test_inputs(exp: GridView, task: str, split: str = "test") -> tuple[int | None, str]:
    """The inputs a task of the grid is tested on (the report's ``split``), as :func:`task_splits` counts them
    before anything runs, or (None, why) when they are unknown: a task spec declares no size, so a task whose data
    is neither built nor in local files (a Hugging Face dataset) has none until its candidates stage has run."""
    splits = task_splits(exp, exp.tasks[task].name, task)
    if splits is None:
        return None, "its test inputs are unknown until its data is built (no local split files to count): skipped"
    if not splits.get(split):
        return None, f"no '{split}' inputs among its splits ({', '.join(sorted(splits))}): skipped"
    return splits[split], ""


def plan_costs(exp: GridView, cells: list[CellPlan] | None = None, workers: int | None = None,
               fits: BenchFits | None = None, cells_per_gpu: int | None = None, record_folders: tuple[Path, ...] = (),
               as_new: bool = False) -> Plan:
    """The estimates of every stage and planned cell of ``exp`` (``workers``: default the config's ``workers`` when it
    has one, else the process count; ``cells_per_gpu``: default the config's, else 1), priced by ``fits`` (default:
    this checkout's bench fits for :func:`plan_device`'s device, the plan's note saying which and why). The records
    are the finished cells and stages of ``exp``'s folder, of ``record_folders`` (an analysis's variant reads its
    experiment's) and of the config's ``plan_records`` (experiment folders or results bundles run elsewhere: a
    bundle keeps the cells' records and the stages' cost.json). ``as_new``: every stage and cell priced as if none
    had run (what the whole grid costs)."""
    cells = cells if cells is not None else exp.plan()
    if as_new:
        cells = [dataclasses.replace(c, status="todo") for c in cells]
    per_gpu = cells_per_gpu or int(getattr(exp.cfg, "cells_per_gpu", 0) or 0) or 1
    launcher = str(getattr(exp.cfg, "launcher", "none"))
    n = workers or int(getattr(exp.cfg, "workers", 0) or 0) or default_workers()
    if fits is None:
        device, why = plan_device(exp.cfg)
        fits = BenchFits.load(device=device)
        fits.note = why + _fits_text(fits)
        if fits.device == "cpu":
            fits.cpu_threads = worker_threads(n, launcher, getattr(exp.cfg, "slurm", None))
            if fits.thread_factor() > 1:
                fits.note += (f"; bench-priced CPU work x {fits.thread_factor():.3g}: each of the {n} worker(s) "
                              f"computes on {fits.cpu_threads:.3g} core(s), the benches on {fits.bench_threads} "
                              "(a cell's own record: x the cores each of its processes had over that, at least 1)")
    folders = list(dict.fromkeys([exp.out, *map(Path, record_folders), *record_sources(exp.cfg)]))
    # a record whose seconds are no number (edited by hand; a folder run elsewhere) prices nothing
    cell_records = [(label, _timed_cell(record)) for label, record in
                    (("/".join(p.parent.parts[-3:]), read_json(p)) for out in folders for p in finished_cells(out))
                    if isinstance(record, dict)]
    stage_records = []
    for stage in dict.fromkeys([*STAGES, *exp.stages_needed()]):
        for out in folders:
            for path in sorted(out.glob(f"*/{stage}/{STAGE_COST_FILE}")):
                record = read_json(path) if (path.parent / STAGE_KEY_FILE).exists() else None
                if isinstance(record, dict) and _timed(record):
                    stage_records.append((path.parent.parent.name, stage, record))
    names = {t: exp.tasks[t].name for t in exp.cfg.tasks}
    splits: dict[str, dict[str, int] | None] = {name: task_splits(exp, name, t) for t, name in names.items()}
    for name in {r.get("task", "") for _, r in cell_records} | {t for t, _, _ in stage_records}:
        if name and name not in splits:
            splits[name] = task_splits(exp, name)
    inputs = {name: None if n is None else sum(n.values()) for name, n in splits.items()}
    stages = []
    corpus = _corpus_size(exp)
    for t, name in names.items():
        needed = exp.stages_needed()
        passed = "reranked" in needed and _corpus_passed(exp, t, corpus)
        stages += [estimate_stage(name, stage, exp.stage_done(t, stage) and not as_new, stage_records, inputs, fits,
                                  candidates=embedded)
                   for stage, embedded in stage_embeddings(exp.rerank_config(t), exp.retrieve_config(t).k,
                                                           inputs.get(name), corpus, needed, passed).items()]
    estimates = []
    for c in cells:
        if c.status == "done":
            estimates.append(Estimate(c.label, 0.0, "done"))
            continue
        method = exp.method(c.task, c.method)
        reader = getattr(method.inputs.settings, "reader", None)
        # what a cell writes and keeps follows cosmetic reader settings, which are in no key and so in no settings
        disk = None if reader is None else {"keep_checkpoints": reader.keep_checkpoints,
                                            "keep_resume_state": reader.keep_resume_state}
        e = estimate_cell(names[c.task], c.method, method.settings(), cell_records, inputs, fits, splits, disk)
        e.label = c.label
        estimates.append(e)
    launched = launcher in ("local", "slurm")  # separate one-process jobs
    command = fits.cpu_cells.parts.get("command", (0.0, 0.0))[0] if fits.cpu_cells and fits.device == "cpu" else 0.0
    ddp = not launched and str(getattr(exp.cfg, "parallel", "cells")) == "ddp"  # one cell at a time, on all workers
    return Plan(stages, estimates, n, per_gpu, fits.note, plan_disk(exp, cells, splits, 1 if ddp else n), command,
                launched, ddp)


def _timed(record: Any) -> bool:
    """Whether a cost record's ``elapsed_s`` is a finite number of seconds (at least 0)."""
    return isinstance(record, dict) and finite_number(record.get("elapsed_s")) and record["elapsed_s"] >= 0


def _timed_cell(record: dict[str, Any]) -> dict[str, Any]:
    """A cell.json record, its ``cost`` dropped when that holds no readable seconds."""
    if record.get("cost") is not None and not _timed(record["cost"]):
        return {**record, "cost": None}
    return record


def record_sources(cfg: Any) -> list[Path]:
    """The folders of the config's ``plan_records`` (refused with an InputError naming the field when one is not a
    folder)."""
    from ..errors import InputError

    folders = [Path(p) for p in getattr(cfg, "plan_records", None) or []]
    for folder in folders:
        if not folder.is_dir():
            raise InputError(f"{folder} is not a folder (an experiment folder or a results bundle whose cost "
                             "records price the plan)", field="plan_records")
    return folders


# ----------------------------------------------------------------------------------------------- disk

WEIGHT_BYTES = 4  # best/ and the checkpoints hold fp32 weights (the master weights, whatever mixed_precision)
ADAMW_MOMENTS = 2  # a checkpoint adds AdamW's two fp32 moments of every trained weight
# parameters of the Hub readers the paper's configs name, for a model that is not here (its Hub card's count)
KNOWN_PARAMETERS = {"t5-small": 60_506_624, "t5-base": 222_903_552, "t5-large": 737_668_096}
SAMPLE_BYTES = 1 << 20  # a line size is measured on a file's first MiB
# line sizes where they cannot be measured, and the JSON around measured texts (bytes, about)
INPUT_BYTES = 200  # an input's record (id, text, label) when the task's files cannot be read
JSON_KEYS_BYTES = 50  # what an input's JSON record adds to its line in the task's own files
SENTENCE_BYTES = 150  # a corpus sentence when the corpus cannot be read
CTX_BYTES = 60  # a candidate's id, score and keys besides its text
RERANKED_CTX_BYTES = 50  # a reranked candidate's retrieval score and rank on top
DEMO_BYTES = 35  # a demonstration's id and label in a reranked line
PREDICTION_BYTES = 160  # a predictions line's label, prediction, scores and keys besides the input's record
EVIDENCE_BYTES = 12  # an evidence id in a predictions line
CELL_RECORD_BYTES = 12_000  # a cell's cell.json (its settings, results, cost), manifest and metrics
LOG_LINE_BYTES = 70  # a step's line of a reader's train_log.jsonl


def format_bytes(n: float) -> str:
    """``12.3 kB``, ``4.5 MB``, ``587 MB``, ``2.68 GB`` or ``1.20 TB`` (decimal units)."""
    if n < 1e6:
        return f"{n / 1e3:.1f} kB"
    if n < 1e9:
        return f"{n / 1e6:.1f} MB" if n < 1e8 else f"{n / 1e6:.0f} MB"
    if n < 1e12:
        return f"{n / 1e9:.2f} GB" if n < 1e11 else f"{n / 1e9:.0f} GB"
    return f"{n / 1e12:.2f} TB"


def mean_line_bytes(path: str | Path) -> float | None:
    """The mean bytes of a line of a text file, measured on its first MiB; None for no readable, non-empty file."""
    try:
        with open(path, "rb") as f:
            head = f.read(SAMPLE_BYTES)
    except OSError:
        return None
    lines = head.count(b"\n") or (1 if head else 0)
    return len(head) / lines if lines else None


def folder_bytes(folder: str | Path) -> int:
    """The bytes of the files under ``folder`` (0 when it is not there)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def model_parameters(model: str) -> tuple[dict[str, int] | None, str]:
    """A model's parameters (``all``, and ``encoder`` / ``decoder`` where its weights' names tell) and where the
    count came from: a local folder's safetensors headers (:func:`pgra.cost.parameter_counts`), the same of a Hub model
    in the local Hugging Face cache, or :data:`KNOWN_PARAMETERS`; (None, why) otherwise."""
    from ..cost import parameter_counts

    counts = parameter_counts(model)
    if counts:
        return counts, f"{model}'s safetensors"
    if not Path(model).exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model, "model.safetensors")
            counts = parameter_counts(Path(cached).parent) if isinstance(cached, str) else None
        except Exception:  # noqa: BLE001 - not a repo id, no hub library: only the plan's estimate is missed
            counts = None
        if counts:
            return counts, f"{model}'s safetensors (Hugging Face cache)"
    known = KNOWN_PARAMETERS.get(model.removeprefix("google-t5/"))
    if known:
        return {"all": known}, f"{model}: its Hub card's count"
    return None, f"{model}: parameters unknown (not a local folder, not in the Hugging Face cache)"


def _count(n: int) -> str:
    """``222.9M`` parameters, or all the digits of a small count (``46,592``)."""
    return f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n:,}"


@dataclass
class ReaderDisk:
    """What one reader cell writes, from its model's parameters: ``best/`` (the fp32 weights and the model folder's
    other files: tokenizer, configs) and a resumable checkpoint (the weights and AdamW's two moments of the trained
    ones)."""

    parameters: int
    trained: int
    other_bytes: int
    source: str

    @property
    def best_bytes(self) -> float:
        return self.parameters * WEIGHT_BYTES + self.other_bytes

    @property
    def checkpoint_bytes(self) -> float:
        return (self.parameters + ADAMW_MOMENTS * self.trained) * WEIGHT_BYTES


# weights a frozen encoder's reader does not train besides the encoder's: the word embeddings and the output
# projection over the vocabulary (FiDReader.freeze_encoder), by their names in T5 and bert2bert checkpoints
FROZEN_WITH_THE_ENCODER = ("shared.", "embed_tokens.", "word_embeddings.", "lm_head.", "cls.predictions.decoder.",
                           "cls.predictions.bias")


def reader_disk(reader: Any) -> ReaderDisk | None:
    """:class:`ReaderDisk` of a reader config (``reader``: a :class:`pgra.reader.config.TrainConfig`); None when its
    model's parameters are unknown. With a frozen encoder (``freeze_encoder``, ``train_top_layers``) the trained
    weights are all but the encoder's, the word embeddings and the output projection (by their names in the local
    safetensors), plus the top layers' share of the encoder's; every weight where the names cannot be read."""
    from ..cost import tensor_sizes

    counts, source = model_parameters(str(reader.model))
    if not counts:
        return None
    total = int(counts["all"])
    layers = trained_layers({"train_top_layers": reader.train_top_layers, "freeze_encoder": reader.freeze_encoder})
    trained = total
    sizes = tensor_sizes(str(reader.model)) if layers is not None else None
    if sizes:
        encoder = sum(n for k, n in sizes.items() if k.startswith("encoder."))
        frozen = encoder + sum(n for k, n in sizes.items() if not k.startswith("encoder.")
                               and any(f".{part}" in f".{k}" for part in FROZEN_WITH_THE_ENCODER))
        of = encoder_layers(str(reader.model))
        trained = max(total - frozen + (encoder * min(layers, of) // of if of else 0), 0)
    folder = Path(str(reader.model))
    other = 0
    if folder.is_dir():
        other = sum(p.stat().st_size for p in folder.iterdir()
                    if p.is_file() and not p.name.endswith((".safetensors", ".bin", ".pt", ".h5", ".msgpack")))
    return ReaderDisk(total, trained, other, source)


@dataclass
class DiskPlan:
    """What a grid holds on disk once every cell is done (bytes; what is already there at its size on disk), by
    part, and the peak that training adds; each part with how it was reckoned (:func:`plan_disk`)."""

    index: float | None
    index_text: str
    stages: dict[str, float]
    stage_text: dict[str, str]
    cache: float
    cache_text: str
    cells: dict[str, list[float]]
    cell_text: dict[str, str]
    peak: float
    peak_text: str
    unknown: list[str]

    @property
    def total(self) -> float:
        return (self.index or 0.0) + sum(self.stages.values()) + self.cache + \
            sum(sum(v) for v in self.cells.values())

    def lines(self) -> list[str]:
        out = ["disk, estimated (what the grid holds once every cell is done; what is already there at its size):",
               f"  index {self.index_text}"]
        if self.stages:
            out.append(f"  stages: {format_bytes(sum(self.stages.values()))} ("
                       + "; ".join(f"{s} {format_bytes(b)}, {self.stage_text[s]}" for s, b in self.stages.items())
                       + ")")
        if self.cache:
            out.append(f"  reranker's embedding cache: {self.cache_text}")
        for kind, sizes in self.cells.items():
            each = f"{len(sizes)} x {format_bytes(max(sizes))}" if len(set(sizes)) == 1 else \
                f"{len(sizes)}, up to {format_bytes(max(sizes))} each"
            out.append(f"  {kind}: {each} = {format_bytes(sum(sizes))} ({self.cell_text[kind]})")
        out.append(f"  total: {format_bytes(self.total)}" + (f"; peak while training: + {format_bytes(self.peak)} "
                                                             f"({self.peak_text})" if self.peak else ""))
        if self.unknown:
            out.append(f"  not counted: {'; '.join(self.unknown)}")
        return out


def _task_input_bytes(exp: GridView, task: str) -> float:
    """The bytes of one input's JSON record (id, text, label): the mean line of the task's local data files plus
    the JSON keys, else :data:`INPUT_BYTES`."""
    from ..tasks.loaders import resolve_data_path
    from .config import cell_settings

    spec = exp.tasks[task]
    try:
        base = resolve_data_path(spec.data, cell_settings(exp.cfg, task).data_dir)
    except (PgraError, OSError, ValueError):
        return INPUT_BYTES
    if not isinstance(base, Path):
        return INPUT_BYTES
    sizes = [m for f in spec.data.files.values() if (m := mean_line_bytes(base / f)) is not None]
    return sum(sizes) / len(sizes) + JSON_KEYS_BYTES if sizes else INPUT_BYTES


def _corpus_lines(exp: GridView) -> tuple[int | None, float, int]:
    """The corpus's sentences (the built index's count, else the local file's size over its mean line), a sentence's
    mean bytes and the file's size (0 when not a local file)."""
    corpus = Path(str(exp.cfg.index.corpus))
    mean = mean_line_bytes(corpus) if corpus.is_file() else None
    size = corpus.stat().st_size if corpus.is_file() else 0
    count = _corpus_size(exp) or (int(round(size / mean)) if mean else None)
    return count, (mean or SENTENCE_BYTES), size


def _index_disk(exp: GridView, sentences: int | None, corpus_bytes: int) -> tuple[float | None, str]:
    """The shared index: its size on disk when built, else a flat (or IVF, HNSW) dense index's vectors (sentences x
    dim x 4 B; ivfsq8 1 B a dim, ivfpq its sub-quantisers' bytes) and the copy of the corpus it stores; None for
    another retriever before it is built."""
    index = exp.cfg.index
    if (Path(index.out) / "manifest.json").exists():
        size = folder_bytes(index.out)
        return float(size), f"{index.out} (shared): {format_bytes(size)}, built"
    from ..retrieval.base import get_retriever

    if sentences is None:
        return None, f"{index.out} (shared): to build, size not estimated (the corpus size is unknown here)"
    try:
        vectors, how = get_retriever(index).estimated_index_bytes(sentences)
    except PgraError as e:  # e.g. a pq_m the build will refuse: the plan says so
        return None, f"{index.out} (shared): to build, size not estimated ({e})"
    if vectors is None:
        return None, f"{index.out} (shared): to build, size not estimated ({how})"
    text = (f"{index.out} (shared): {format_bytes(vectors + corpus_bytes)} to build ({how}"
            + (f", + the corpus copy {format_bytes(corpus_bytes)})" if corpus_bytes else ")"))
    return float(vectors + corpus_bytes), text


def plan_disk(exp: GridView, cells: list[CellPlan], splits: dict[str, dict[str, int] | None], workers: int
              ) -> DiskPlan:
    """The disk a grid holds once done, by part: the shared index (:func:`_index_disk`); each stage's JSONL files
    (inputs x a line: the input's record and its k candidates, or its top d and demonstrations, each a corpus
    sentence and its keys); the prompt-guided reranker's embedding cache (the texts its stages embed,
    :func:`stage_embeddings`, and the queries, x the LM's dimension x 4 B: fp32 rows); every cell: a reader's
    ``best/`` (:func:`reader_disk`), and every cell's predictions (the inputs of its splits x a line) and records.
    What is done is counted at its size on disk. Training adds, for each reader cell running
    at once (at most ``workers``), ``keep_checkpoints`` + 1 resumable checkpoints (the next is written before the
    last is deleted); a done cell keeps none unless ``reader.keep_resume_state``."""
    from ..methods.reader_method import ReaderMethod

    names = {t: exp.tasks[t].name for t in exp.cfg.tasks}
    sentences, sentence, corpus_bytes = _corpus_lines(exp)
    index, index_text = _index_disk(exp, sentences, corpus_bytes)
    unknown = [] if index is not None else ["the index"]
    inputs = {t: _task_input_bytes(exp, t) for t in exp.cfg.tasks}
    stages: dict[str, float] = {}
    counted: dict[str, int] = {}  # input lines estimated, by stage
    built: dict[str, int] = {}  # tasks whose stage is done (counted at its size), by stage
    cache, cache_rows, cache_dims = 0.0, 0, set()
    for t in exp.cfg.tasks:
        n = sum((splits.get(names[t]) or {}).values())
        rerank = exp.rerank_config(t)
        k = exp.retrieve_config(t).k
        needed = exp.stages_needed()
        embedded = stage_embeddings(rerank, k, n or None, sentences, needed,
                                    "reranked" in needed and _corpus_passed(exp, t, sentences))
        dim = model_dim(str(rerank.lm))
        for stage in needed:
            done = exp.stage_done(t, stage)
            if done:
                size = float(folder_bytes(exp.stage_dir(t, stage)))
                built[stage] = built.get(stage, 0) + 1
            elif not n:
                unknown.append(f"{names[t]}/{stage} (inputs unknown)")
                continue
            elif stage == "candidates":
                size = n * (inputs[t] + k * (sentence + CTX_BYTES))
            elif stage != "full_search" and not _reranked(stage):
                unknown.append(f"{names[t]}/{stage} (a plug-in stage: its size is its own)")
                continue
            else:
                demos = rerank.num_demos * DEMO_BYTES if stage != "full_search" else 0
                size = n * (inputs[t] + rerank.top_d * (sentence + CTX_BYTES + RERANKED_CTX_BYTES) + demos)
            stages[stage] = stages.get(stage, 0.0) + size
            counted[stage] = counted.get(stage, 0) + (0 if done else n)
            rows = embedded.get(stage)
            if stage == "reranked" and rows:
                rows += n  # the queries' own cache, once per input
            if stage in ("reranked", "full_search") and rows and not done:
                if dim:
                    cache += rows * dim * 4
                    cache_rows += rows
                    cache_dims.add(dim)
                elif "the reranker's embedding cache (the LM's dimension is unknown here)" not in unknown:
                    unknown.append("the reranker's embedding cache (the LM's dimension is unknown here)")
    k_text = sorted({exp.retrieve_config(t).k for t in exp.cfg.tasks})
    d_text = sorted({exp.rerank_config(t).top_d for t in exp.cfg.tasks})
    stage_text = {}
    for s in stages:
        parts = [f"{built[s]} built, at its size"] if built.get(s) else []
        if counted[s]:
            parts.append(f"{counted[s]:,} input lines with " + (f"k={'/'.join(map(str, k_text))} candidates"
                         if s == "candidates" else f"their top d={'/'.join(map(str, d_text))}")
                         + f" of ~{sentence:.0f} B")
        stage_text[s] = ", ".join(parts)
    cache_text = (f"up to {format_bytes(cache)} ({cache_rows:,} texts x {'/'.join(map(str, sorted(cache_dims)))} dims "
                  f"x 4 B; shared, {exp.cfg.rerank.cache_dir})") if cache else ""
    readers: list[float] = []
    others: list[float] = []
    models: dict[str, ReaderDisk | None] = {}
    peak_cell, peak_text, running, kept_text = 0.0, "", 0, ""
    reader_text = ""
    predictions = 0
    for c in cells:
        method = exp.method(c.task, c.method)
        lines = sum((splits.get(names[c.task]) or {}).get(s, 0) for s in method.splits())
        is_reader = isinstance(method, ReaderMethod)
        evidence = method.n_passages() if is_reader else 8
        preds = lines * (inputs[c.task] + PREDICTION_BYTES + EVIDENCE_BYTES * evidence) + CELL_RECORD_BYTES
        if c.status == "done":
            (readers if is_reader else others).append(float(folder_bytes(c.directory)))
            continue
        if not is_reader:
            others.append(preds)
            continue
        reader = method.inputs.settings.reader
        if reader.model not in models:
            models[reader.model] = reader_disk(reader)
        disk = models[reader.model]
        if disk is None:
            unknown.append(f"{c.label} ({model_parameters(str(reader.model))[1]})")
            continue
        keep = int(reader.keep_checkpoints)
        kept = keep * disk.checkpoint_bytes if reader.keep_resume_state else 0.0
        readers.append(disk.best_bytes + preds + kept + reader.max_steps * LOG_LINE_BYTES)
        predictions = max(predictions, lines)
        running += 1
        # while it trains a cell holds keep_checkpoints checkpoints and, for a moment, the next one (written before
        # the oldest is deleted; best/'s replacement, a second best/ for a moment, is smaller and never at once)
        cell_peak = (keep + 1) * disk.checkpoint_bytes - kept
        if cell_peak > peak_cell:
            peak_cell = cell_peak
            peak_text = (f"{keep + 1} resumable checkpoint(s) of {format_bytes(disk.checkpoint_bytes)}: the weights "
                         f"and AdamW's 2 moments of the {_count(disk.trained)} trained, x 4 B; the next is written "
                         "before the last is deleted" + (", the kept ones counted above" if kept else ""))
            reader_text = (f"best/ {format_bytes(disk.best_bytes)} = {_count(disk.parameters)} parameters x 4 B "
                           f"(fp32, {disk.source})" + (f" + tokenizer and configs {format_bytes(disk.other_bytes)}"
                                                        if disk.other_bytes else ""))
            kept_text = (f"keeps {keep} resumable checkpoint(s) of {format_bytes(disk.checkpoint_bytes)} a cell "
                         "(reader.keep_resume_state)" if reader.keep_resume_state else
                         "its resumable checkpoints deleted once the cell is done (reader.keep_resume_state keeps them)")
    cells_out: dict[str, list[float]] = {}
    cell_text: dict[str, str] = {}
    if readers:
        cells_out["reader cells"] = readers
        done = sum(c.status == "done" for c in cells if isinstance(exp.method(c.task, c.method), ReaderMethod))
        parts = [x for x in (reader_text, f"predictions up to {predictions:,} lines, cell.json, the training log"
                             if predictions else "", kept_text,
                             f"{done} done, at their size" if done else "") if x]
        cell_text["reader cells"] = "; ".join(parts)
    if others:
        cells_out["other cells"] = others
        done = sum(c.status == "done" for c in cells if not isinstance(exp.method(c.task, c.method), ReaderMethod))
        cell_text["other cells"] = "predictions, cell.json" + (f"; {done} done, at their size" if done else "")
    concurrent = min(max(workers, 1), running)
    peak = concurrent * peak_cell
    return DiskPlan(index, index_text, stages, stage_text, cache, cache_text, cells_out, cell_text, peak,
                    f"{concurrent} reader cell(s) at once x {format_bytes(peak_cell)}: {peak_text}" if peak else "",
                    unknown)


def _fits_text(fits: BenchFits) -> str:
    """What the fits of a plan are, in a clause: the reader's and the reranker's sources."""
    if fits.device == "gpu" and fits.reader is None and fits.rerank is None:
        return "; no GPU measurements found in bench/results"
    reader = fits.reader_source or "no reader fit"
    return f"; reader: {reader}; reranker: {fits.rerank_source or 'no fit'}"


def plan_order(exp: GridView, cells: list[CellPlan], plan: Plan | None = None) -> list[CellPlan]:
    """``cells`` costliest first by the plan (what a first run, with no cost records yet, hands out first): trained
    methods (readers) before fixed rules, then by their planned seconds (unknown last), then in plan order."""
    from ..methods import get_method

    plan = plan if plan is not None else plan_costs(exp, cells)
    seconds = {e.label: e.seconds for e in plan.cells}

    def key(item: tuple[int, CellPlan]) -> tuple[int, float, int]:
        i, cell = item
        planned = seconds.get(cell.label)
        return (-int(get_method(cell.method).trained), -(planned if planned is not None else -1.0), i)

    return [c for _, c in sorted(enumerate(cells), key=key)]


__all__ = ["BenchFits", "CellCost", "CellOverheads", "CpuCellCosts", "DiskPlan", "Estimate", "GpuStep", "Plan", "ReaderDisk",
           "bf16_step_ratios", "default_workers", "record_sources", "encoder_layers", "estimate_cell", "estimate_stage", "evaluated_inputs", "format_bytes",
           "format_seconds", "gpu_cell_measurements", "gpu_measurements", "gpu_requests", "gpu_variant", "lpt_assign",
           "lpt_order", "model_parameters", "plan_costs", "plan_device", "plan_disk", "plan_order", "plan_wallclock",
           "reader_disk", "stage_embeddings", "task_inputs", "task_splits", "top_layer_shares", "top_layer_store",
           "worker_threads"]
