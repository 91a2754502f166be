"""``pgra rerank``: stage 2, prompt-guided reranking of the candidates with a causal LM (Eq. 3)."""

from __future__ import annotations

from .command import Command, run_distributed


def run(cfg) -> None:
    from ..rerank.stage import summary
    from ..rerank.stages import rerank

    ctx, out = run_distributed(rerank, cfg)
    if ctx.is_main:
        print(summary(out))


COMMAND = Command("rerank", "stage 2: reranking (prompt-guided with a causal LM, or rerank.reranker=...)", "pgra.rerank.config:rerank_config",
                  run, writes="out")
