"""The reader's bench fits: CPU seconds per step against d (top layers, bf16 shares); GPU measured steps."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime.cost import Fits, fit_line, read_linear
from .gpu_cost import (
    DEFAULT_GPU_VARIANT,
    GPU_PLAN_CELLS,
    CellCost,
    CellOverheads,
    GpuStep,
    gpu_cell,
    gpu_cell_measurements,
)


@dataclass
class ReaderFits(Fits):
    """Reader seconds per step ``reader_a + reader_b x d`` at ``reader_batch``, scaled by the measured shares."""

    reader: tuple[float, float] | None = None
    reader_batch: int = 8
    reader_source: str = ""
    # per d, a step training only the top n encoder layers over one training all, and the CPU seconds per input
    # of storing the frozen layers' outputs (bench/results/reader_top_layers.json; n in the bench reader's layers)
    top_layers: dict[int, list[tuple[int, float]]] | None = None
    top_layers_store: dict[int, list[tuple[int, float]]] | None = None
    bench_layers: int = 6
    # per d, a CPU bf16-autocast step over the fp32 step (reader_top_layers_bf16.json, read only on a CPU with
    # bf16 hardware), n in that bench reader's bf16_layers
    bf16_ratios: dict[int, list[tuple[int, float]]] | None = None
    bf16_layers: int = 6
    # GPU: the bench reader's variants' measured steps, the loop's fixed cost a step, the per-cell costs
    gpu_steps: dict[str, GpuStep] | None = None
    bench_passages: int = 16
    loop_s: float = 0.0
    loop_source: str = ""
    overheads: CellOverheads | None = None

    def load_reader(self, results: Path) -> None:
        """The fits from ``results`` (on a GPU, the runs ``gpu_plan_cells.json`` names)."""
        if self.device == "gpu":
            self._load_gpu(results)
            return
        path = results / "reader_scale.json"
        if path.is_file():
            rows = json.loads(path.read_text())
            self.reader = fit_line([r["d"] for r in rows], [r["s_per_step"] for r in rows])
            self.reader_source = (f"bench {path.name}: {self.reader[0]:.2f} s + {self.reader[1]:.2f} s per passage "
                                  "per step, bert2bert-MiniLM at batch 8, 2-core CPU")
        path = results / "reader_top_layers.json"
        if path.is_file():
            rows = json.loads(path.read_text())
            self.top_layers, self.top_layers_store = top_layer_shares(rows), top_layer_store(rows)
            self.bench_layers = max(int(r["n"]) for r in rows)
        path = results / "reader_top_layers_bf16.json"
        from ..runtime import device as devices

        if path.is_file() and devices.cpu_has_native_bf16():  # emulated bf16 is slower than fp32: not measured
            self.bf16_ratios = bf16_step_ratios(json.loads(path.read_text())) or None
            if self.bf16_ratios:
                self.bf16_layers = max(n for points in self.bf16_ratios.values() for n, _ in points)

    def _load_gpu(self, results: Path) -> None:
        cells = gpu_cell_measurements(results)
        if cells is None:
            return
        self.gpu_steps, self.overheads = cells["steps"], cells["overheads"]
        self.loop_s, self.loop_source = cells["loop_s"], cells["loop_source"]
        self.reader_batch, self.bench_passages = cells["batch"], cells["passages"]
        base = self.gpu_steps.get(DEFAULT_GPU_VARIANT) or next(iter(self.gpu_steps.values()))
        self.reader = (self.loop_s, base.s_per_step / self.bench_passages)
        self.reader_source = (f"bench {GPU_PLAN_CELLS}: the H100's T5-base step of the reader's variant x "
                              f"d/{self.bench_passages} x batch/{self.reader_batch} + {self.loop_s:.3f} s of "
                              f"pgra's training loop a step ({self.loop_source})")

    def reader_seconds(self, steps: int, passages: int, batch: int, trained_layers: int | None = None,
                       encoder_layers: int | None = None, inputs: int | None = None,
                       mixed_precision: str = "no") -> float | None:
        """A reader cell's training time: ``steps`` x the step time, scaled by batch, trained layers and bf16."""
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
        """A CPU bf16-autocast step over the fp32 step at the nearest measured d; None where not measured."""
        if mixed_precision != "bf16" or self.device != "cpu" or not self.bf16_ratios:
            return None
        if trained_layers is None or not encoder_layers:
            n = float(self.bf16_layers)
        else:
            n = min(trained_layers, encoder_layers) * self.bf16_layers / encoder_layers
        return read_linear(self._nearest_d(self.bf16_ratios, passages), n)

    def _bench_layers(self, trained_layers: int | None, encoder_layers: int | None) -> float | None:
        if trained_layers is None or not encoder_layers or not self.top_layers:
            return None
        return min(trained_layers, encoder_layers) * self.bench_layers / encoder_layers

    def _nearest_d(self, table: dict[int, list[tuple[int, float]]], passages: int) -> list[tuple[int, float]]:
        return table[min(table, key=lambda m: (abs(m - max(passages, 1)), m))]

    def top_layer_share(self, trained_layers: int | None, passages: int, encoder_layers: int | None
                        ) -> float | None:
        """A step training the top ``trained_layers`` over one training all (interpolated); None: not measured."""
        n = self._bench_layers(trained_layers, encoder_layers)
        return None if n is None else read_linear(self._nearest_d(self.top_layers, passages), n)

    def store_seconds(self, trained_layers: int | None, passages: int, encoder_layers: int | None
                      ) -> float | None:
        """CPU seconds per input of storing the frozen layers' outputs (none when every layer trains)."""
        n = self._bench_layers(trained_layers, encoder_layers)
        if n is None or not self.top_layers_store:
            return None
        return read_linear(self._nearest_d(self.top_layers_store, passages) + [(self.bench_layers, 0.0)], n)

    def gpu_step(self, variant: str, passages: int, batch: int) -> tuple[float, float, GpuStep, str]:
        """One optimizer step of ``variant`` on the GPU: ``(seconds, model step's, measured step, stand-in)``."""
        step, instead = self.gpu_variant_step(variant)
        model = step.s_per_step * max(passages, 1) / self.bench_passages * batch / self.reader_batch
        return self.loop_s + model, model, step, instead

    def gpu_variant_step(self, variant: str) -> tuple[GpuStep, str]:
        """The measured step of ``variant`` (else its nearest measured stand-in) and a note of the stand-in."""
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
        """:func:`pgra.reader.gpu_cost.gpu_cell` with these fits."""
        return gpu_cell(self, reader, splits)


def top_layer_store(rows: list[dict[str, Any]]) -> dict[int, list[tuple[int, float]]]:
    """``{d: [(n, CPU s per input storing the frozen layers' outputs)]}`` from the same rows (n sorted)."""
    by_d: dict[int, dict[int, float]] = {}
    for r in rows:
        if r.get("store_cpu_s_per_input") is not None and r.get("precision", "fp32") == "fp32":
            by_d.setdefault(int(r["d"]), {})[int(r["n"])] = float(r["store_cpu_s_per_input"])
    return {d: sorted(v.items()) for d, v in sorted(by_d.items())}


def bf16_step_ratios(rows: list[dict[str, Any]]) -> dict[int, list[tuple[int, float]]]:
    """``{d: [(n, bf16 step / fp32 step), ...]}`` from ``bench_reader_top_layers.py`` rows (n sorted)."""
    by_d: dict[int, dict[int, float]] = {}
    for r in rows:
        if r.get("precision") == "bf16" and math.isfinite(float(r.get("ratio_to_fp32", "nan"))):
            by_d.setdefault(int(r["d"]), {})[int(r["n"])] = float(r["ratio_to_fp32"])
    return {d: sorted(v.items()) for d, v in sorted(by_d.items())}


def top_layer_shares(rows: list[dict[str, Any]]) -> dict[int, list[tuple[int, float]]]:
    """``{d: [(n, CPU s per step at n / at every layer)]}`` from ``bench_reader_top_layers.py``'s rows."""
    by_d: dict[int, dict[int, float]] = {}
    for r in rows:
        if r.get("precision", "fp32") == "fp32":
            by_d.setdefault(int(r["d"]), {})[int(r["n"])] = float(r["cpu_s_per_step"])
    return {d: [(n, steps[n] / steps[max(steps)]) for n in sorted(steps)] for d, steps in sorted(by_d.items())}


__all__ = ["ReaderFits", "bf16_step_ratios", "top_layer_shares", "top_layer_store"]
