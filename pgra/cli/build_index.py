"""``pgra build-index``: stage 1, index a corpus with a dense encoder + faiss, or BM25."""

from __future__ import annotations

from pathlib import Path

from ..artifacts import read_json
from .command import Command, run_distributed


def run(cfg) -> None:
    from ..retrieval.index import build_index

    ctx, out = run_distributed(build_index, cfg)
    if ctx.is_main:
        m = read_json(Path(out) / "manifest.json")
        extra = (f"{m['encoder']} ({m['pooler']}), dim {m['dim']}, {m['index_type']}"
                 if m["retriever"] == "dense" else f"BM25 {m['bm25']['method']}")
        print(f"index ready: {out} ({m['size']} texts; {extra})")


COMMAND = Command("build-index", "stage 1: index a corpus with a dense encoder + faiss, or BM25",
                  "pgra.retrieval.index:IndexConfig", run, writes="out")
