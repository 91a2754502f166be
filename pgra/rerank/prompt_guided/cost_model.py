"""The reranker's cost model: its LM's seconds per embedded text, fitted from the bench results (on a CPU
``rerank_scale.json``, on a GPU the texts/s of the H100 run ``gpu_plan_inputs.json`` names), and the bytes its
embedding cache holds. The stages that embed (:mod:`pgra.rerank.stages`) price themselves with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import PgraError
from ...runtime.cost import Fits, fit_line
from ...runtime.sizes import format_bytes, hidden_size
from ...storage.artifacts import read_json


@dataclass
class RerankFits(Fits):
    """Reranking seconds ``rerank_a + rerank_b x candidate sentences`` (None: no fit)."""

    rerank: tuple[float, float] | None = None
    rerank_source: str = ""

    def load_rerank(self, results: Path, measured: dict[str, Any] | None = None) -> None:
        """The fit from ``results`` (on a GPU, ``measured``: the reranker's H100 run, or None)."""
        if self.device == "gpu":
            if measured is not None:
                self.rerank = (0.0, 1.0 / measured["texts_per_s"])
                self.rerank_source = (f"bench {measured['source']}: {measured['model']} "
                                      f"{measured['texts_per_s']:.0f} texts/s on an H100")
            return
        path = results / "rerank_scale.json"
        if path.is_file():
            rows = json.loads(path.read_text())
            self.rerank = fit_line([r["distinct"] for r in rows], [r["seconds"] for r in rows])
            self.rerank_source = (f"bench {path.name}: {self.rerank[0]:.1f} s + {1000 * self.rerank[1]:.0f} ms per "
                                  "candidate, SmolLM2-135M fp32, 2-core CPU")

    def rerank_seconds(self, candidates: int) -> float | None:
        """Reranking ``candidates`` candidate sentences (an upper bound: shared candidates embed once)."""
        if self.rerank is None:
            return None
        a, b = self.rerank
        return (a + b * candidates) * self.thread_factor()


def cache_bytes(rerank: Any, texts: int) -> tuple[float, int | None]:
    """The embedding cache of ``texts`` rows of the reranker's LM (fp32: its dimension x 4 B each) and that
    dimension (:func:`pgra.runtime.sizes.hidden_size`); (0, None) where it is unknown."""
    dim = hidden_size(str(rerank.lm))
    return (float(texts * dim * 4), dim) if dim else (0.0, None)


def cache_text(rerank: Any, size: float, texts: int, dims: set[int]) -> str:
    """How the plan's embedding cache was reckoned."""
    return (f"up to {format_bytes(size)} ({texts:,} texts x {'/'.join(map(str, sorted(dims)))} dims x 4 B; shared, "
            f"{rerank.cache_dir})")


def corpus_passed(rerank: Any, folder: Path, done: bool, corpus: int | None) -> bool:
    """Whether a task's reranked stage (``folder``) embeds or embedded the whole corpus: still to run with
    ``corpus_pass: corpus`` (and the corpus size known), or its manifest records that pass."""
    if not done:
        return rerank.corpus_pass == "corpus" and corpus is not None
    manifest = folder / "manifest.json"
    try:
        record = read_json(manifest) if manifest.is_file() else {}
    except (OSError, ValueError, PgraError):  # a hand-edited manifest: the plan says what it can
        return False
    passed = record.get("corpus_pass") if isinstance(record, dict) else None
    return isinstance(passed, dict) and passed.get("mode") == "corpus"


__all__ = ["RerankFits", "cache_bytes", "cache_text", "corpus_passed"]
