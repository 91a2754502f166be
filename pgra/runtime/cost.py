"""What a stage or cell spent: tokens each model ran, the hardware, and FLOPs from parameter counts.

Every model adds its tokens to the process-wide :data:`meter`; a run reads its difference (:func:`metered`).
FLOPs: 2 x parameters per forward token, 6 x per trained token (Kaplan et al. 2020)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import finite_number, whole_number

MODES = ("forward", "trained")
FLOPS_PER_TOKEN = {"forward": 2, "trained": 6}
# the parts a model folder's parameter counts price (parameter_counts: "all", and the weights' name prefixes); a
# part missing from a model's counts (an encoder-only model's "encoder") is priced as the whole model
WHOLE_MODEL_PARTS = ("all", "encoder", "decoder")


class TokenMeter:
    """Tokens run per (model, part, mode) in this process, and the sizes of parts the model folder does not tell."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.parameters: dict[tuple[str, str], int] = {}

    def add(self, model: str, tokens: int, part: str = "all", mode: str = "forward",
            parameters: int | None = None) -> None:
        """Count ``tokens`` of ``model``'s ``part`` run in ``mode`` (``parameters``: that part's size, for FLOPs)."""
        if tokens:
            self.counts[(str(model), part, mode)] += int(tokens)
            if parameters:
                self.parameters[(str(model), part)] = int(parameters)

    def snapshot(self) -> Counter[tuple[str, str, str]]:
        return Counter(self.counts)


meter = TokenMeter()


def _record(model: str, part: str, mode: str, tokens: int, parameters: int | None) -> dict[str, Any]:
    return {"model": model, "part": part, "mode": mode, "tokens": tokens,
            **({"parameters": parameters} if parameters else {})}


def work_since(before: Counter[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """The meter's work since ``before`` as ``[{"model", "part", "mode", "tokens"[, "parameters"]}]`` (sorted)."""
    diff = meter.counts - before
    return [_record(m, p, mode, n, meter.parameters.get((m, p))) for (m, p, mode), n in sorted(diff.items())]


def merge_work(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The work records of several processes (or runs), summed per (model, part, mode)."""
    total: Counter[tuple[str, str, str]] = Counter()
    sizes: dict[tuple[str, str], int] = {}
    for work in parts:
        for w in work:
            total[(w["model"], w["part"], w["mode"])] += int(w["tokens"])
            if w.get("parameters"):
                sizes[(w["model"], w["part"])] = int(w["parameters"])
    return [_record(m, p, mode, n, sizes.get((m, p))) for (m, p, mode), n in sorted(total.items())]


@dataclass
class Priced:
    """A stage or cell priced before it runs from the bench fits: ``seconds`` on ``device`` and where the figure
    came from; ``split_s``: of those, what the ranks of a ``parallel: ddp`` launch would split."""

    seconds: float
    source: str
    device: str = "cpu"
    device_s: float | None = None
    written_bytes: float = 0.0
    kept_bytes: float = 0.0
    split_s: float = 0.0


def hardware() -> dict[str, Any]:
    """The device the work ran on: accelerator name (or ``cpu``), CPU model, cores and torch threads."""
    import torch

    from .device import cpu_model

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"device": device, "cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()}


@contextlib.contextmanager
def metered(ctx=None) -> Iterator[dict[str, Any]]:
    """Measure a block: on exit the yielded dict holds ``elapsed_s``, ``processes``, ``devices`` (distinct GPUs, or
    one CPU per host), ``hardware`` and ``work`` (tokens summed over the processes of ``ctx``: all must enter)."""
    record: dict[str, Any] = {}
    before, start = meter.snapshot(), time.time()
    yield record
    work, tags = work_since(before), {_device_tag()}
    processes = int(getattr(ctx, "world_size", 1) or 1) if ctx is not None else 1
    if processes > 1:
        from .distributed import gather_objects

        gathered = gather_objects(ctx, (work, next(iter(tags))))
        work, tags = merge_work([w for w, _ in gathered]), {t for _, t in gathered}
    record.update(elapsed_s=round(time.time() - start, 1), processes=processes, devices=len(tags),
                  hardware={**hardware(), "cores_each": _cores_each()}, work=with_parameters(work))


def _whole(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def cost_problem(record: Any, timed: bool = False) -> tuple[str, str] | None:
    """What is wrong with a cost record read from a file, as ``(field, problem)``; None when it can be read (an
    ``elapsed_s`` from 0 when given or ``timed``, a ``work`` list of ``{model, part, mode, tokens[, parameters]}``)."""
    if not isinstance(record, dict):
        return "", f"must be an object, got {type(record).__name__}"
    if ("elapsed_s" in record or timed) and not (finite_number(record.get("elapsed_s")) and record["elapsed_s"] >= 0):
        return "elapsed_s", "must be a number of seconds from 0"
    work = record.get("work", [])
    if not isinstance(work, list):
        return "work", "must be a list"
    for i, w in enumerate(work):
        ok = isinstance(w, dict) and isinstance(w.get("model"), str) and isinstance(w.get("part"), str) and \
            w.get("mode") in MODES and _whole(w.get("tokens")) and (w.get("parameters") in (None, 0)
                                                                     or _whole(w.get("parameters"), 1))
        if not ok:
            return f"work[{i}]", f"must be {{model, part, mode ({'/'.join(MODES)}), tokens[, parameters]}}"
    return None


def on_gpu(record: dict[str, Any]) -> bool:
    """Whether a cost record's work ran on a GPU (its ``hardware.device`` names one, not ``cpu``)."""
    hardware = record.get("hardware")
    return isinstance(hardware, dict) and str(hardware.get("device", "cpu")) != "cpu"


def sharing(record: dict[str, Any]) -> int:
    """How many devices' time a cost record's wall-clock holds (GPU: its ``devices``; CPU: its processes), else 1."""
    value = record.get("devices", record.get("processes")) if on_gpu(record) else record.get("processes")
    return int(value) if finite_number(value) and value >= 1 else 1


def device_seconds(record: dict[str, Any]) -> float:
    """A record's seconds on one device: its wall-clock plus the part its devices split times their number - 1."""
    elapsed, shared = float(record["elapsed_s"]), sharing(record)
    return elapsed if shared == 1 else elapsed + split_seconds(record) * (shared - 1)


def split_seconds(record: dict[str, Any]) -> float:
    """Of a record's wall-clock, the seconds its processes split: a cell's ``split_s``, else all (a stage's)."""
    elapsed, split = float(record["elapsed_s"]), record.get("split_s")
    return float(split) if finite_number(split) and 0 <= split <= elapsed else elapsed


def _device_tag() -> str:
    """This process's device, as the processes of a launch tell theirs apart: host and GPU (or ``cpu``)."""
    import socket

    import torch

    gpu = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
    return f"{socket.gethostname()}/{gpu}"


def _cores_each() -> float:
    """The cores this process computed on: its torch threads, at most its share of the node's cores."""
    import torch

    from .device import core_sharers, node_cores

    return round(min(float(torch.get_num_threads()), node_cores() / core_sharers()), 3)


def local_folder(model: str) -> str:
    """A model folder, or the local copy of a hub id in the Hugging Face cache (never downloads)."""
    if Path(model).is_dir():
        return model
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(model, local_files_only=True)
    except Exception:  # not a hub id, or not cached here: no parameter count
        return model


def with_parameters(work: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``work`` with missing ``parameters`` filled from the model folder while it is here (a bundle holds none)."""
    counts: dict[str, dict[str, int] | None] = {}
    out = []
    for w in work:
        if not w.get("parameters") and w["part"] in WHOLE_MODEL_PARTS:
            if w["model"] not in counts:
                counts[w["model"]] = parameter_counts(local_folder(w["model"]))
            found = counts[w["model"]]
            n = (found.get(w["part"]) or found.get("all")) if found else None
            if n:
                w = {**w, "parameters": int(n)}
        out.append(w)
    return out


def _safetensors_shapes(path: Path) -> dict[str, list[int]]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100_000_000:
            raise ValueError(f"{path}: safetensors header of {n} bytes")
        header = json.loads(f.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def tensor_sizes(model: str | Path) -> dict[str, int] | None:
    """The elements of every weight of a model folder from its safetensors headers; None without them."""
    folder = Path(model)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    sizes: dict[str, int] = {}
    for file in files:
        try:
            shapes = _safetensors_shapes(file)
        except (OSError, ValueError):
            return None
        sizes.update((name, math.prod(int(d) for d in shape)) for name, shape in shapes.items())
    return sizes


def model_dim(model: str | Path) -> int | None:
    """The hidden size of a local model folder's ``config.json`` (None for a Hub name or an unreadable config)."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    dim = config.get("word_embed_proj_dim") or config.get("hidden_size") or config.get("d_model") \
        or config.get("n_embd")
    return int(dim) if isinstance(dim, int) and dim > 0 else None


def parameter_counts(model: str | Path) -> dict[str, int] | None:
    """A model folder's parameters from its safetensors headers: ``all``, ``encoder``, ``decoder``; None without."""
    sizes = tensor_sizes(model)
    if sizes is None:
        return None
    counts: Counter[str] = Counter()
    for name, n in sizes.items():
        counts["all"] += n
        for part in ("encoder", "decoder"):
            if name.startswith(f"{part}."):
                counts[part] += n
    return dict(counts)


def estimated_flops(work: list[dict[str, Any]], params: dict[str, dict[str, int] | None]) -> float | None:
    """``FLOPS_PER_TOKEN[mode] x parameters x tokens`` summed over ``work``; None where parameters are unknown."""
    total = 0.0
    for w in work:
        n = w.get("parameters")
        if not n:
            counts = params.get(w["model"])
            if counts is None or (w["part"] not in counts and w["part"] not in WHOLE_MODEL_PARTS):
                return None
            n = counts.get(w["part"]) or counts.get("all", 0)
        total += FLOPS_PER_TOKEN[w["mode"]] * n * int(w["tokens"])
    return total


# ----------------------------------------------------------------------------------------------- bench fits

def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def read_linear(points: list[tuple[int, float]], x: float) -> float:
    """``points`` (sorted by x) read at ``x``: linear between neighbours, the end values beyond them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return points[-1][1]


CPU_CELL_COSTS = "cpu_cell_costs.json"

# what a kind of cell or stage is priced by besides its fixed seconds (bench_cpu_cell_costs.py measures both)
CPU_KINDS = {"reader": "evaluated input (dev evaluations, the final dev and test predictions)",
             "icl": "predicted input", "cell": "input of every split", "candidates": "input of every split",
             "reranked": "input", "full_search": "input"}



@dataclass
class CpuCellCosts:
    """What a cell or stage spends on a CPU besides what the step and reranking fits price, per kind of
    :data:`CPU_KINDS` ``(fixed seconds, seconds per input)``, measured by ``bench/bench_cpu_cell_costs.py``."""

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



@dataclass
class Fits:
    """What every part's cost model reads of the bench fits (each part adds its own share): the ``device`` they
    price; on a CPU the measured fixed costs, the threads the benches ran with and those a planned worker has."""

    device: str
    cpu_cells: CpuCellCosts | None = None
    bench_threads: int = 2
    cpu_threads: float | None = None
    note: str = ""

    def thread_factor(self, measured_threads: float | None = None) -> float:
        """How much longer CPU work measured on ``measured_threads`` takes on ``cpu_threads`` (>= 1; 1 when unknown)."""
        measured = self.bench_threads if measured_threads is None else measured_threads
        if self.device != "cpu" or not self.cpu_threads or not measured or self.cpu_threads >= measured:
            return 1.0
        return measured / self.cpu_threads

    def cpu_price(self, kind: str, inputs: int | None, scale: float = 1.0) -> Priced | None:
        """``kind``'s measured fixed part plus ``inputs`` x seconds per input, x :meth:`thread_factor`; None: no fit."""
        if self.cpu_cells is None or self.device != "cpu":
            return None
        priced = self.cpu_cells.price(kind, inputs, scale)
        return Priced(priced[0] * self.thread_factor(), priced[1], self.device) if priced is not None else None



__all__ = ["CPU_CELL_COSTS", "CPU_KINDS", "FLOPS_PER_TOKEN", "CpuCellCosts", "Fits", "WHOLE_MODEL_PARTS", "Priced", "TokenMeter", "cost_problem", "device_seconds", "estimated_flops",
           "finite_number", "fit_line", "hardware", "local_folder", "merge_work", "meter", "metered", "model_dim", "on_gpu",
           "parameter_counts", "read_linear", "sharing", "split_seconds", "tensor_sizes", "with_parameters", "work_since"]
