"""``pgra build-index``: stage 1, index a corpus with a dense encoder + faiss, or BM25."""

from __future__ import annotations

from pathlib import Path

from ..storage.artifacts import read_json
from .command import Command, run_distributed


def run(cfg) -> None:
    from ..retrieval.base import recorded_retriever
    from ..retrieval.build import build_index

    ctx, out = run_distributed(build_index, cfg)
    if ctx.is_main:
        m = read_json(Path(out) / "manifest.json")
        print(f"index ready: {out} ({m['size']} texts; {recorded_retriever(m).describe(m)})")


COMMAND = Command("build-index", "stage 1: index a corpus with a dense encoder + faiss, or BM25",
                  "pgra.retrieval.base:index_config", run, writes="out")
