"""The ``candidates`` stage: each input's first-stage top k (``pgra retrieve``) from the grid's index, the first
folder of every task; its key holds the retrieval settings, the index's build key and the task's content."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..artifacts import sha256_file
from ..cost import Priced
from ..stages import CTX_BYTES, STAGES, Stage, StageRequest, defining
from .retrieve import CANDIDATES_KIND, RetrieveConfig


@STAGES.register
class CandidatesStage(Stage):
    family = "candidates"
    kind = CANDIDATES_KIND
    reads = ()  # the index, shared by every task, is built before any stage (its build key: ``keys["index"]``)
    score_name = "first-stage score"

    def config(self, request: StageRequest) -> RetrieveConfig:
        s = request.settings
        # the index this config builds may run its encoder's code (this run's own config says so): so may retrieval
        trust = s.retrieve.trust_remote_code or s.index.trusts_remote_code()
        return replace(s.retrieve, task=request.task, index=s.index.out, out=str(request.folder),
                       data_dir=s.data_dir, show_progress=s.show_progress, trust_remote_code=trust)

    def key_record(self, request: StageRequest, config: RetrieveConfig) -> dict[str, Any]:
        settings = defining(config, ("out", "trust_remote_code", "exclude_ids"))
        if config.exclude_ids:  # by content (a key without it, when unset, stays what it was before the option)
            path = Path(config.exclude_ids)
            settings["exclude_ids"] = sha256_file(path) if path.is_file() else f"missing: {path}"
        # the task's content: its labels, label words, templates, metric and data files (every later stage and cell
        # reads them through the candidates, so their keys change with it)
        return {"retrieve": settings, "index": request.keys.get("index", "unbuilt"), "task": dict(request.task_content)}

    def run(self, config: RetrieveConfig, ctx: Any) -> Path:
        from .retrieve import retrieve

        return retrieve(config, ctx)

    def price(self, fits: Any, inputs: int | None, texts: int | None) -> Priced | None:
        """On a CPU: the measured fixed part of retrieving a task plus its seconds per input of every split."""
        return fits.cpu_price(self.family, inputs) if inputs else None

    def planned_line(self, rerank: Any, retrieved_k: int, input_bytes: float, sentence_bytes: float
                     ) -> tuple[float, str, int] | None:
        """The input's record and its k candidates."""
        return input_bytes + retrieved_k * (sentence_bytes + CTX_BYTES), "k={} candidates", retrieved_k


__all__ = ["CandidatesStage"]
