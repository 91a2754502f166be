"""A toy stage registered from outside the package (a plug-in stage's whole file, with options): ``toy_tail`` keeps
each input's last ``toy_tail.keep`` first-stage candidates, the ones the first stage ranked lowest. The one runner
opens its folder and the candidates it reads, resumes it split by split and writes its manifest: it builds, and
plans its files for the dry run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pgra.core.config import option
from pgra.data.interchange import read_records
from pgra.stages import CTX_BYTES, STAGES, PlanRequest, Stage, StagePlan, StageRequest


@dataclass
class TailOptions:
    """The toy stage's options (its section ``toy_tail:`` of an experiment config)."""

    keep: int = option(1, min=1, help="how many of each input's last candidates it keeps")


@dataclass
class TailConfig:
    candidates: str
    out: str
    toy_tail: TailOptions


@STAGES.register
class Tail(Stage):
    family = "toy_tail"
    kind = "toy_tail"
    score_name = "first-stage score (lowest first)"
    options = TailOptions

    def config(self, request: StageRequest) -> TailConfig:
        return TailConfig(str(request.inputs["candidates"]), str(request.folder), self.own_options(request.settings))

    def key_record(self, request: StageRequest, config: TailConfig) -> dict[str, Any]:
        return {"toy_tail": asdict(config.toy_tail), "candidates": request.keys["candidates"]}

    def build(self, config: TailConfig, inputs: dict[str, dict[str, Any]], run: Any) -> dict[str, Any]:
        keep = config.toy_tail.keep
        for split in inputs["candidates"]["counts"]:
            path = Path(config.candidates) / f"{split}.jsonl"
            run.split(split, lambda path=path: [{**r, "ctxs": r["ctxs"][-keep:][::-1]} for r in read_records(path)])
        return {"keep": keep}

    def plan(self, request: PlanRequest) -> StagePlan:
        """Its files before it runs (the dry run's): a line per input of its record and its last ``keep``
        candidates; no LM, and no price of its own."""
        keep = self.own_options(request.settings).keep
        line = request.input_bytes + keep * (request.sentence_bytes + CTX_BYTES)
        return StagePlan(disk=request.lines(line), line=("its last {} candidates", keep))
