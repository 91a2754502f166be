"""A toy stage registered from outside the package (a plug-in stage's whole file): ``toy_tail`` keeps each input's
last ``rerank.top_d`` first-stage candidates, the ones the first stage ranked lowest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgra.artifacts import file_record, read_manifest, write_manifest
from pgra.interchange import read_records, write_records
from pgra.stages import STAGES, Stage, StageRequest


@dataclass
class TailConfig:
    candidates: str
    out: str
    keep: int


@STAGES.register
class Tail(Stage):
    family = "toy_tail"
    kind = "toy_tail"
    score_name = "first-stage score (lowest first)"

    def config(self, request: StageRequest) -> TailConfig:
        return TailConfig(str(request.inputs["candidates"]), str(request.folder), request.settings.rerank.top_d)

    def key_record(self, request: StageRequest, config: TailConfig) -> dict[str, Any]:
        return {"toy_tail": {"keep": config.keep}, "candidates": request.keys["candidates"]}

    def run(self, config: TailConfig, ctx: Any) -> Path:
        out = Path(config.out)
        if ctx.is_main:  # the other ranks wait for it (the runner meets them after the run)
            cand = read_manifest(config.candidates, "candidates")
            out.mkdir(parents=True, exist_ok=True)
            counts = {}
            for split in cand["counts"]:
                records = read_records(Path(config.candidates) / f"{split}.jsonl")
                counts[split] = write_records(out / f"{split}.jsonl", [
                    {**r, "ctxs": r["ctxs"][-config.keep:][::-1]} for r in records])
            write_manifest(out, {"kind": self.kind, "task": cand["task"], "counts": counts, "keep": config.keep,
                                 "files": {f"{s}.jsonl": file_record(out / f"{s}.jsonl") for s in counts}})
        return out
