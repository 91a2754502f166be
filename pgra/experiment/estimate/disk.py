"""What a grid holds on disk once done, each part sized by its own cost model (the index, each stage's lines, the
reranker's cache, each cell's predictions and what a trained cell keeps, the models it loads); what is done at its
size on disk. Training adds, for each trained cell running at once, its peak (a reader's checkpoints)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.errors import PgraError
from ...methods import get_stage
from ...rerank.prompt_guided.cost_model import cache_bytes, cache_text
from ...retrieval.cost_model import corpus_lines, index_disk
from ...runtime.sizes import folder_bytes, format_bytes, mean_line_bytes, model_bytes
from .inputs import stage_plans

if TYPE_CHECKING:
    from ..grid_view import GridView
    from ..layout import CellPlan

# line sizes where they cannot be measured, and the JSON around measured texts (bytes, about)
INPUT_BYTES = 200  # an input's record (id, text, label) when the task's files cannot be read
JSON_KEYS_BYTES = 50  # what an input's JSON record adds to its line in the task's own files
PREDICTION_BYTES = 160  # a predictions line's label, prediction, scores and keys besides the input's record
EVIDENCE_BYTES = 12  # an evidence id in a predictions line
CELL_RECORD_BYTES = 12_000  # a cell's cell.json (its settings, results, cost), manifest and metrics


@dataclass
class DiskPlan:
    """What a grid holds on disk once every cell is done (bytes; what is already there at its size on disk), by
    part, and the peak that training adds; each part with how it was reckoned (:func:`plan_disk`)."""

    index: float | None
    index_text: str
    stages: dict[str, float] = field(default_factory=dict)
    stage_text: dict[str, str] = field(default_factory=dict)
    cache: float = 0.0
    cache_text: str = ""
    cells: dict[str, list[float]] = field(default_factory=dict)
    cell_text: dict[str, str] = field(default_factory=dict)
    peak: float = 0.0
    peak_text: str = ""
    unknown: list[str] = field(default_factory=list)
    models: dict[str, float] = field(default_factory=dict)  # the models the grid loads, here or to download
    models_text: list[str] = field(default_factory=list)

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
        if self.models:
            out.append(f"  models: {format_bytes(sum(self.models.values()))} ({'; '.join(self.models_text)})")
        out.append(f"  total: {format_bytes(self.total)}" + (f"; peak while training: + {format_bytes(self.peak)} "
                                                             f"({self.peak_text})" if self.peak else ""))
        if self.models:
            out.append(f"  with the models: {format_bytes(self.total + sum(self.models.values()))}")
        if self.unknown:
            out.append(f"  not counted: {'; '.join(self.unknown)}")
        return out


def _task_input_bytes(exp: GridView, task: str) -> float:
    """The bytes of one input's JSON record (id, text, label): the mean line of the task's local data files plus
    the JSON keys, else :data:`INPUT_BYTES`."""
    from ...tasks.loaders import resolve_data_path
    from ..config import cell_settings

    spec = exp.tasks[task]
    try:
        base = resolve_data_path(spec.data, cell_settings(exp.cfg, task).data_dir)
    except (PgraError, OSError, ValueError):
        return INPUT_BYTES
    if not isinstance(base, Path):
        return INPUT_BYTES
    sizes = [m for f in spec.data.files.values() if (m := mean_line_bytes(base / f)) is not None]
    return sum(sizes) / len(sizes) + JSON_KEYS_BYTES if sizes else INPUT_BYTES


def plan_disk(exp: GridView, cells: list[CellPlan], splits: dict[str, dict[str, int] | None], workers: int,
              corpus: int | None = None) -> DiskPlan:
    """The disk a grid holds once done, by part (the module's): training adds, for each trained cell running at once
    (at most ``workers``), its peak. ``corpus``: the corpus's sentences where neither its file nor its index is here
    to count them (bench/plan_table2.py: Wiki1M's 1M), its copy at the assumed sentence size."""
    sentences, sentence, corpus_bytes = corpus_lines(exp.cfg.index)
    if sentences is None and corpus:
        sentences, corpus_bytes = corpus, int(corpus * sentence)
    plan = DiskPlan(*index_disk(exp.cfg.index, sentences, corpus_bytes))
    if plan.index is None:
        plan.unknown.append("the index")
    inputs = {t: _task_input_bytes(exp, t) for t in exp.cfg.tasks}
    _stages_disk(exp, plan, splits, inputs, sentences, sentence)
    _cells_disk(exp, plan, cells, splits, inputs, workers)
    add_models(plan, grid_models(exp, cells))
    return plan


def grid_models(exp: GridView, cells: list[CellPlan]) -> list[str]:
    """The models a grid loads, as its parts name them: the index's query encoder, each stage's and each cell's."""
    from ...core.errors import InputError
    from ...retrieval.base import get_retriever

    try:
        encoder = get_retriever(exp.cfg.index).query_encoder()
    except PgraError:  # a retriever the build will refuse: the plan says what it can
        encoder = None
    names = [str(encoder.encoder)] if encoder is not None else []
    for t in exp.cfg.tasks:
        for stage in exp.stages_needed():
            try:
                names += [m.name for m in get_stage(stage).models(exp.rerank_config(t))]
            except InputError:  # a stage no family names now
                continue
    return names + [m.name for c in cells for m in exp.method(c.task, c.method).models()]


def add_models(plan: DiskPlan, names: list[str]) -> None:
    """Each of ``names`` not yet in ``plan``: its size here, or its download (:func:`pgra.runtime.sizes.model_bytes`)."""
    for name in dict.fromkeys(names):
        size, text = model_bytes(name)
        if name in plan.models or text in plan.unknown:
            continue
        if size is None:
            plan.unknown.append(text)
        else:
            plan.models[name] = size
            plan.models_text.append(text)


def _stages_disk(exp: GridView, plan: DiskPlan, splits: dict[str, dict[str, int] | None], inputs: dict[str, float],
                 sentences: int | None, sentence: float) -> None:
    """Each stage's files and the reranker's embedding cache (the texts its stages embed and the queries, x the LM's
    dimension x 4 B: fp32 rows), as each stage plans them (:func:`stage_plans`)."""
    counted: dict[str, int] = {}  # input lines estimated, by stage
    built: dict[str, int] = {}  # tasks whose stage is done (counted at its size), by stage
    what: dict[str, tuple[str, set[int]]] = {}
    rows_all, dims = 0, set()
    for t in exp.cfg.tasks:
        name, n = exp.tasks[t].name, sum((splits.get(exp.tasks[t].name) or {}).values())
        rerank = exp.rerank_config(t)
        for stage, planned in stage_plans(exp, t, n or None, sentences, input_bytes=inputs[t],
                                          sentence_bytes=sentence).items():
            done = exp.stage_done(t, stage)
            if done:
                size = float(folder_bytes(exp.stage_dir(t, stage)))
                built[stage] = built.get(stage, 0) + 1
            elif not n:
                plan.unknown.append(f"{name}/{stage} (inputs unknown)")
                continue
            elif planned.disk is None:
                plan.unknown.append(f"{name}/{stage} (a plug-in stage: its size is its own)")
                continue
            else:
                size = planned.disk
                template, values = what.setdefault(stage, (planned.line[0], set()))
                values.add(planned.line[1])
            plan.stages[stage] = plan.stages.get(stage, 0.0) + size
            counted[stage] = counted.get(stage, 0) + (0 if done else n)
            rows = (planned.texts or 0) + (n if stage == "reranked" and planned.texts else 0)
            if stage in ("reranked", "full_search") and rows and not done:
                size, dim = cache_bytes(rerank, rows)
                if dim:
                    plan.cache, rows_all = plan.cache + size, rows_all + rows
                    dims.add(dim)
                elif (unknown := "the reranker's embedding cache (the LM's dimension is unknown here)") \
                        not in plan.unknown:
                    plan.unknown.append(unknown)
    for s in plan.stages:
        parts = [f"{built[s]} built, at its size"] if built.get(s) else []
        if counted[s]:
            template, values = what[s]
            parts.append(f"{counted[s]:,} input lines with {template.format('/'.join(map(str, sorted(values))))} "
                         f"of ~{sentence:.0f} B")
        plan.stage_text[s] = ", ".join(parts)
    plan.cache_text = cache_text(exp.cfg.rerank, plan.cache, rows_all, dims) if plan.cache else ""


def _cells_disk(exp: GridView, plan: DiskPlan, cells: list[CellPlan], splits: dict[str, dict[str, int] | None],
                inputs: dict[str, float], workers: int) -> None:
    """Every cell's predictions (the inputs of its splits x a line) and record, and what a trained cell keeps
    (:meth:`pgra.methods.Method.planned_disk`); a done cell at its size."""
    sizes: dict[str, list[float]] = {}
    done: dict[str, int] = {}
    lines, running, peak, widest = 0, 0, 0.0, None
    for c in cells:
        method = exp.method(c.task, c.method)
        n = sum((splits.get(exp.tasks[c.task].name) or {}).get(s, 0) for s in method.splits())
        disk = method.planned_disk()
        kind = disk.kind if disk is not None else "other cells"
        if c.status == "done":
            sizes.setdefault(kind, []).append(float(folder_bytes(c.directory)))
            done[kind] = done.get(kind, 0) + 1
            continue
        preds = n * (inputs[c.task] + PREDICTION_BYTES + EVIDENCE_BYTES * (disk.evidence if disk else 8)) \
            + CELL_RECORD_BYTES
        if disk is not None and disk.unknown:
            plan.unknown.append(f"{c.label} ({disk.unknown})")
            continue
        sizes.setdefault(kind, []).append(preds + (disk.kept if disk else 0.0))
        if disk is not None:
            lines, running = max(lines, n), running + 1
            if disk.peak > peak:
                peak, widest = disk.peak, disk
    for kind in sorted(sizes, key=lambda k: k != "reader cells"):
        plan.cells[kind] = sizes[kind]
        at_size = f"{done[kind]} done, at their size" if done.get(kind) else ""
        if kind == "other cells":
            plan.cell_text[kind] = "predictions, cell.json" + (f"; {at_size}" if at_size else "")
            continue
        texts = (widest.text, widest.kept_text) if widest else ("", "")
        plan.cell_text[kind] = "; ".join(x for x in (texts[0], f"predictions up to {lines:,} lines, cell.json, the "
                                                     "training log" if lines else "", texts[1], at_size) if x)
    concurrent = min(max(workers, 1), running)
    plan.peak = concurrent * peak
    if plan.peak:
        plan.peak_text = f"{concurrent} reader cell(s) at once x {format_bytes(peak)}: {widest.peak_text}"


__all__ = ["DiskPlan", "add_models", "grid_models", "plan_disk"]
