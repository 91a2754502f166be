"""``pgra rerank``: stage 2, prompt-guided reranking of the candidates with a causal LM (Eq. 3)."""

from __future__ import annotations

from pathlib import Path

from ..artifacts import read_json
from .command import Command, run_distributed


def run(cfg) -> None:
    from ..rerank.reranker import rerank

    ctx, out = run_distributed(rerank, cfg)
    if ctx.is_main:
        m = read_json(Path(out) / "manifest.json")
        e = m["embedding"]
        print(f"reranked: {out} (top-{m['top_d']} of {m['k']}; " + ", ".join(f"{k} {v}" for k, v in m["counts"].items())
              + f"; {e['evidence_rows']} evidence sentences, {e['evidence_cache_hits']} from the cache, "
              f"{e['tokens_run']} LM tokens run, {e['truncated']} truncated)")


COMMAND = Command("rerank", "stage 2: prompt-guided reranking with a causal LM", "pgra.rerank.config:RerankConfig",
                  run, writes="out")
