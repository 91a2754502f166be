"""A reader cell on the GPU priced as its config runs it, from the runs ``gpu_plan_cells.json`` names."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.cost import Priced
from ..runtime.sizes import format_seconds
from .cost_model import evaluated_inputs, trained_layers

GPU_PLAN_CELLS = "gpu_plan_cells.json"
DEFAULT_GPU_VARIANT = "fused+compile"  # the variant of the loop measured around it


@dataclass
class GpuStep:
    """A measured variant of the bench reader's GPU training step: a steady step's seconds, its compilation's."""

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
class CellCost(Priced):
    """A cell priced from the GPU fits, with its seconds by part."""

    parts: dict[str, float] = field(default_factory=dict)


def gpu_variant(reader: dict[str, Any]) -> str:
    """The bench's name of a reader's step: ``fused``, ``compile``, ``cudagraphs`` joined by ``+``, or ``eager``."""
    parts = ["fused"] if reader.get("adamw_impl") == "fused" else []
    if reader.get("compile"):
        parts.append("compile")
        if reader.get("compile_mode") == "reduce-overhead":
            parts.append("cudagraphs")
    return "+".join(parts) or "eager"


def gpu_cell_measurements(results: Path) -> dict[str, Any] | None:
    """The GPU reader cell's measurements that ``gpu_plan_cells.json`` names (None without them)."""
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



def gpu_cell(fits: Any, reader: dict[str, Any], splits: dict[str, int] | None = None) -> CellCost | None:
    """A reader cell on the GPU as its settings run it (steps, warm-up, evaluations, saves, loads, start), or None."""
    if not fits.gpu_steps:
        return None
    variant, steps = gpu_variant(reader), int(reader.get("max_steps", 0))
    passages = int(reader.get("n_passages", 0))
    batch = int(reader.get("batch_size", fits.reader_batch)) * int(reader.get("grad_accum", 1) or 1)
    step_s, model_s, step, instead = fits.gpu_step(variant, passages, batch)
    parts = {"steps": steps * step_s, "warm-up": step.warmup_s}
    text = [f"{steps} steps x ({step.variant} {step.s_per_step:.3f} s x {max(passages, 1)}/{fits.bench_passages}"
            f" x {batch}/{fits.reader_batch} + loop {fits.loop_s:.3f} s) = {format_seconds(parts['steps'])}",
            f"warm-up {format_seconds(step.warmup_s)}"]
    notes = ([instead] if instead else []) + _notes(fits, reader, variant, step, passages)
    device = steps * model_s + _evaluations(fits, reader, splits, step, parts, text, notes)
    written, kept = _overheads(fits.overheads, reader, steps, parts, text)
    source = f"bench H100, {GPU_PLAN_CELLS}: " + "; ".join(text + notes)
    return CellCost(sum(parts.values()), source, "gpu", device, written, kept, parts["steps"], parts=parts)


def _notes(fits: Any, reader: dict[str, Any], variant: str, step: GpuStep, passages: int) -> list[str]:
    """Where the measured step stands in for what the settings run."""
    notes, precision = [], str(reader.get("mixed_precision", "no"))
    if precision != "bf16":
        notes.append(f"measured under bf16 autocast, not {precision}")
    if not step.variant.endswith("cudagraphs") and passages < fits.bench_passages:
        notes.append(f"a step at d={passages} launches its kernels from the host as at d={fits.bench_passages}: "
                     "partly host-bound, so its linear scaling in d is an underestimate")
    if trained_layers(reader) is not None:
        notes.append("frozen encoder layers not measured on a GPU: priced as training every weight")
    if variant.endswith("cudagraphs") and int(reader.get("pad_to_multiple", 1)) <= 1:
        notes.append("CUDA graphs record a graph per batch width: unpadded (pad_to_multiple), up to max_length")
    return notes


def _evaluations(fits: Any, reader: dict[str, Any], splits: dict[str, int] | None, step: GpuStep,
                 parts: dict[str, float], text: list[str], notes: list[str]) -> float:
    """Its dev and final evaluations added to ``parts`` and ``text``; returns their device seconds."""
    from ..runtime.cost import FLOPS_PER_TOKEN

    evaluated = evaluated_inputs(reader, splits)
    if evaluated is None:
        notes.append("evaluations not priced: the split sizes are unknown")
        return 0.0
    eager = fits.gpu_steps.get("eager", step)
    per_input = (eager.s_per_step / fits.reader_batch * FLOPS_PER_TOKEN["forward"] / FLOPS_PER_TOKEN["trained"]
                 * max(int(reader.get("n_passages", 0)), 1) / fits.bench_passages)
    parts["evaluations"] = evaluated * per_input
    every = int(reader.get("eval_every", 0))
    text.append(f"{int(reader.get('max_steps', 0)) // every if every else 0} dev evaluations + final dev/test: "
                f"{evaluated} inputs at {1000 * per_input:.1f} ms {format_seconds(parts['evaluations'])}")
    return parts["evaluations"]


def _overheads(o: CellOverheads | None, reader: dict[str, Any], steps: int, parts: dict[str, float],
               text: list[str]) -> tuple[float, float]:
    """Its checkpoints, saves, loads and start added to ``parts`` and ``text``; the bytes written and kept."""
    if o is None:
        return 0.0, 0.0
    eval_every, save_every = int(reader.get("eval_every", 0)), int(reader.get("save_every", 0))
    saves = math.ceil(steps / (save_every or eval_every or steps or 1)) if steps else 0
    best = max(steps // eval_every if eval_every else 0, 1)
    keep = min(int(reader.get("keep_checkpoints", 1) or 1), saves)
    parts.update({"checkpoints": saves * o.checkpoint_s, "best/": best * o.best_s, "loads": 2 * o.load_s,
                  "start": o.process_start_s})
    text.append(f"{saves} checkpoints x {o.checkpoint_bytes / 1e9:.1f} GB {format_seconds(parts['checkpoints'])}, "
                f"best/ at most {best} x {o.best_bytes / 1e9:.1f} GB {format_seconds(parts['best/'])}, 2 loads "
                f"{format_seconds(parts['loads'])}, process start {format_seconds(parts['start'])} ({o.source})")
    kept = (keep * o.checkpoint_bytes if reader.get("keep_resume_state") else 0.0) + o.best_bytes
    return saves * o.checkpoint_bytes + best * o.best_bytes, kept


__all__ = ["DEFAULT_GPU_VARIANT", "GPU_PLAN_CELLS", "CellCost", "CellOverheads", "GpuStep", "gpu_cell",
           "gpu_cell_measurements", "gpu_variant"]
