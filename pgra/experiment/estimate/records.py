"""Estimates, each with its source, the first that applies: ``done``; ``recorded`` (the same stage or cell's cost
record, else another task's scaled by inputs); the part's own cost model over the bench fits
(:meth:`pgra.stages.Stage.price`, :meth:`pgra.methods.Method.price`); none (left out of the totals, counted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...runtime.cost import Priced, device_seconds, finite_number, on_gpu, sharing, split_seconds
from .fits import BenchFits
from .schedule import Estimate


def _device(record: dict[str, Any]) -> str:
    name = str((record.get("hardware") or {}).get("device", "cpu"))
    return "cpu" if name == "cpu" else "gpu"


def _recorded_cells(fits: BenchFits | None, records: list[dict[str, Any]]) -> tuple[float, str, float]:
    """The mean of finished cells' recorded seconds as one worker of the plan would take them (:func:`_one_worker`),
    a clause saying how they were scaled, and the mean of those seconds that DDP ranks would split."""
    priced = [_one_worker(r["cost"], fits, cell=True) for r in records]
    seconds = sum(s for s, _, _ in priced) / len(priced)
    split = sum(x for _, _, x in priced) / len(priced)
    whys = {why for _, why, _ in priced}
    if len(whys) == 1:
        return seconds, whys.pop(), split
    recorded = sum(float(r["cost"]["elapsed_s"]) for r in records) / len(records)
    return seconds, f", x {seconds / recorded:.3g} for the processes and cores each ran on" if recorded else "", split


def _one_worker(record: dict[str, Any], fits: BenchFits | None, cell: bool = False) -> tuple[float, str, float]:
    """A recorded stage's or cell's seconds as one worker would take them (:func:`pgra.runtime.cost.device_seconds`; on a
    CPU x :meth:`~pgra.runtime.cost.Fits.thread_factor` at the cores each process had), a clause saying so, and of them the
    ones DDP ranks split (a ``cell``'s ``split_s``; all of a stage's)."""
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
    """A cell's cost from ``records`` (``(label, cell.json)``): the same task, method and settings, another method's
    with the same reader or in-context settings, the same method on another task scaled by ``inputs``; else its
    method's cost model (``splits``: inputs per split; ``disk``: the options it reads that no settings hold)."""
    label = f"{task}/{method}"
    settings = json.loads(json.dumps(settings, sort_keys=True, default=str))  # as cell.json holds them
    usable = [(lab, r) for lab, r in records if r.get("method") == method and r.get("cost")
              and not r["cost"].get("resumed")]
    same = [(lab, r) for lab, r in usable if r.get("task") == task and r.get("settings") == settings]
    if same:
        seconds, why, split = _recorded_cells(fits, [r for _, r in same])
        names = ", ".join(lab for lab, _ in same)
        return Estimate.at(label, seconds, f"recorded: {names}{why}", _device(same[0][1]["cost"]), split_s=split)
    shared = _sharing_part(task, method, settings, records)
    if shared:
        seconds, why, split = _recorded_cells(fits, [r for _, r in shared[1]])
        return Estimate.at(label, seconds, f"recorded: {', '.join(lab for lab, _ in shared[1])} (another "
                                                 f"method with the same {shared[0]} settings){why}",
                        _device(shared[1][0][1]["cost"]), split_s=split)
    for lab, r in usable:
        if r.get("task") != task:
            seconds, why, split = _recorded_cells(fits, [r])
            scaled = _scaled(seconds, lab, inputs.get(task), inputs.get(r.get("task", "")))
            if scaled:
                return Estimate.at(label, scaled[0], scaled[1] + why, _device(r["cost"]),
                                split_s=split * scaled[0] / seconds if seconds else 0.0)
    if fits is not None:  # the method's own cost model (a reader's steps, in-context prompts, a cell's inputs)
        priced = method_class(method, settings).price(fits, settings, inputs.get(task), (splits or {}).get(task), disk)
        if priced is not None:
            return Estimate.of(label, priced)
    return Estimate.at(label, None, "no record of this method, no bench fit")


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
                   inputs: dict[str, int | None], fits: BenchFits | None = None, priced: Priced | None = None
                   ) -> Estimate:
    """A shared stage's cost: 0 when ``done``; else its own earlier record, or the same stage of another task
    scaled by input counts (``records``: ``(task, stage, cost.json)``; on a CPU at the cores of ``fits``); else its
    own plan's price (``priced``: :meth:`pgra.stages.Stage.plan` over the bench fits); else unknown."""
    label = f"{task}/{stage}"
    if done:
        return Estimate.at(label, 0.0, "done")
    same = [r for t, s, r in records if s == stage and t == task]
    if same:
        seconds, why, _ = _one_worker(same[0], fits)
        return Estimate.at(label, seconds, f"recorded: {label} (earlier settings){why}", _device(same[0]))
    for t, s, r in records:
        if s == stage and t != task:
            seconds, why, _ = _one_worker(r, fits)
            scaled = _scaled(seconds, f"{t}/{s}", inputs.get(task), inputs.get(t))
            if scaled:
                return Estimate.at(label, scaled[0], scaled[1] + why, _device(r))
    if priced is not None:
        return Estimate.of(label, priced)
    return Estimate.at(label, None, "no record of this stage, no bench fit")


def method_class(method: str, settings: dict[str, Any]) -> type:
    """The class registered as ``method`` (whose :meth:`~pgra.methods.Method.price` is its cost model); for a name
    no method has (a record of a method since removed), the kind its settings show: a reader, in-context learning or
    any other cell; likewise for a method with no cost model of its own (:meth:`pgra.methods.Method.price`)."""
    from ...core.errors import InputError
    from ...methods import ICL, METHODS, Method
    from ...methods.reader_method import ReaderMethod

    shown = ReaderMethod if settings.get("reader") else ICL if settings.get("icl") else Method
    try:
        cls = METHODS.part(method)
    except InputError:
        return shown
    # a method without a cost model of its own whose settings are a reader's or in-context learning's: priced as one
    return shown if getattr(cls.price, "__func__", None) is Method.price.__func__ else cls


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
    from ...core.errors import InputError

    folders = [Path(p) for p in getattr(cfg, "plan_records", None) or []]
    for folder in folders:
        if not folder.is_dir():
            raise InputError(f"{folder} is not a folder (an experiment folder or a results bundle whose cost "
                             "records price the plan)", field="plan_records")
    return folders

