"""The bench fits a plan prices with: each part's share (:class:`~pgra.reader.fits.ReaderFits`,
:class:`~pgra.rerank.prompt_guided.cost_model.RerankFits`) over :class:`~pgra.runtime.cost.Fits`, read from this checkout's
``bench/results`` for one device (on a GPU, the H100 runs ``gpu_plan_inputs.json`` and ``gpu_plan_cells.json`` name)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...reader.fits import ReaderFits
from ...rerank.prompt_guided.cost_model import RerankFits
from ...runtime.cost import CPU_CELL_COSTS, CpuCellCosts

GPU_PLAN_INPUTS = "gpu_plan_inputs.json"


@dataclass
class BenchFits(ReaderFits, RerankFits):
    """Cost fits from ``bench/results``, each part's None when its file is missing."""

    @classmethod
    def load(cls, results: Path | None = None, device: str | None = None) -> BenchFits:
        """The fits for ``device`` (``gpu`` / ``cpu``; default: whether CUDA is available) from ``results``
        (default: this checkout's ``bench/results``)."""
        results = Path(results) if results is not None else Path(__file__).resolve().parents[3] / "bench" / "results"
        if device is None:
            import torch

            device = "gpu" if torch.cuda.is_available() else "cpu"
        fits = cls(device)
        measured = gpu_measurements(results) if device == "gpu" else None
        if device == "cpu":
            fits.cpu_cells = CpuCellCosts.load(results / CPU_CELL_COSTS)
            if fits.cpu_cells is not None and fits.cpu_cells.threads:
                fits.bench_threads = fits.cpu_cells.threads
        fits.load_reader(results)
        fits.load_rerank(results, measured and measured["rerank"])
        return fits

    def text(self) -> str:
        """What the fits are, in a clause: the reader's and the reranker's sources."""
        if self.device == "gpu" and self.reader is None and self.rerank is None:
            return "; no GPU measurements found in bench/results"
        return f"; reader: {self.reader_source or 'no reader fit'}; reranker: {self.rerank_source or 'no fit'}"


def gpu_measurements(results: Path) -> dict[str, dict[str, Any]] | None:
    """The H100 measurements GPU plans use, as ``results/gpu_plan_inputs.json`` names them (None without it or
    one of the files it names):
    ``encoding`` (BERT-base sentences/s), ``index`` (the flat index of 1M vectors built and searched on the CPU
    cores) and ``rerank`` (the named reranker's texts/s); each with the ``source`` file its numbers come from."""
    path = Path(results) / GPU_PLAN_INPUTS
    if not path.is_file():
        return None
    names = json.loads(path.read_text())
    files = {part: path.parent / names[part]["file"] for part in ("encoding", "index", "rerank")}
    if not all(f.is_file() for f in files.values()):
        return None
    run = {part: json.loads(f.read_text()) for part, f in files.items()}
    source = {part: names[part]["file"] for part in run}
    rerank = next(r for r in run["rerank"]["rerank"] if r["model"] == names["rerank"]["model"])
    index = run["index"]["encoding"]
    return {"encoding": {**run["encoding"]["encoding"], "source": source["encoding"]},
            "index": {"index_vectors": index["index_vectors"], "index_build_s": index["index_build_s"],
                      "search_1000_queries_top150_s": index["search_1000_queries_top150_s"],
                      "source": source["index"]},
            "rerank": {**rerank, "source": source["rerank"]}}


__all__ = ["BenchFits", "gpu_measurements"]
