"""``prompt_guided``: the paper's reranker (Eq. 3), the default of ``rerank.reranker``.

p_j = softmax_j(q . e_j) over a query's k candidates, q and e_j the LM's last-token embeddings of the query and of
each candidate under the same prompt of m demonstrations. Its options are the rerank config's own top-level
fields (``lm``, ``num_demos``, ``demo_selection``, ``demos``, ``cache_dir`` ... and the LM block), as before the
family: its stage key is exactly the one prompt-guided folders always had. It is a member like any other: its
stage (with the demonstrations' selection and the persistent embedding caches, :mod:`.rerank_stage`), its folder's
replay, what an export carries and its price are its class's; the in-memory scorer it shares with ``Pipeline`` is
:class:`~pgra.rerank.prompt_guided.in_memory.PromptGuidedReranker`. This module stays light (no torch at import).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import InputError
from ...core.registry import plug_in_key
from ...runtime.cost import Priced
from ...stages import Carried
from ...storage.artifacts import MANIFEST
from ..base import RERANKERS, Reranker


@RERANKERS.register
class PromptGuided(Reranker):
    """Scores = the softmax of Eq. 3 under one shared list of demonstrations (``demos``; the stage selects them
    with ``demo_selection`` and caches every embedding)."""

    name = "prompt_guided"
    folder = "reranked"  # its stage's folder, as always (every other reranker's: reranked-<name>)
    uses = ("k", "top_d", "splits", "lm")  # (its key_settings hold every defining field; "lm": it runs the LM)
    model_field = "lm"
    title = "PGRA (prompt-guided)"
    score_name = "probability"

    def __init__(self, cfg: Any, task, corpus=None, candidates=None, demos: Sequence[Any] = ()) -> None:
        super().__init__(cfg, task, corpus, candidates)
        self.demos = list(demos)
        self._inner = None

    def load(self) -> None:
        from .in_memory import PromptGuidedReranker as Inner

        self._inner = Inner.from_config(self.cfg, self.task, self.demos)

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        from .scoring import score_candidates

        if self._inner is None:
            self.load()
        q = self._inner.embed(list(queries), self.demos)
        out = []
        for i, cs in enumerate(candidates):
            e = self._inner.embed([c["text"] for c in cs], self.demos)
            out.append(score_candidates(q[i], e, len(cs))[1])
        return out

    def cost(self):
        from ...lm.causal_lm import LMCost

        return self._inner.embedder.stats if self._inner is not None else LMCost()

    @classmethod
    def build_stage(cls, cfg: Any, run: Any) -> dict[str, Any] | None:
        """Its stage's build, with the demonstrations and the embedding caches (:mod:`pgra.rerank.prompt_guided.rerank_stage`)."""
        from .rerank_stage import prompt_guided_stage

        return prompt_guided_stage(cfg, run)

    @classmethod
    def own_replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None,
                   trust_remote_code: bool, model: str | Path | None) -> Any:
        """Its folder's LM, demonstrations and prompt (:meth:`PromptGuidedReranker.load`; only a per-query strategy
        that embeds with the index's encoder is given the loaded one)."""
        from ...retrieval.base import recorded_encoder
        from .in_memory import PromptGuidedReranker

        per_query = bool(manifest.get("per_query_demonstrations"))
        encoder = index.encoder if per_query and recorded_encoder(index.manifest) else None
        return PromptGuidedReranker.load(folder, index.corpus, device, trust_remote_code, lm=model, encoder=encoder)

    @classmethod
    def own_carried(cls, folder: Path, manifest: dict[str, Any]) -> Carried:
        """Its demonstrations and LM (one set: a per-query selector refits on the training split, not carried)."""
        if manifest.get("per_query_demonstrations"):
            raise InputError("a reranking with per-query demonstrations refits its selector on the training split at "
                             "load time, which an export does not carry: export a run whose reranker shows one set "
                             "of demonstrations", path=folder / MANIFEST, field="per_query_demonstrations")
        return Carried(files=("demonstrations.json",), model=manifest["lm"], model_fingerprint=manifest["lm_fingerprint"],
                       title="prompt-guided reranking")

    @classmethod
    def price(cls, fits: Any, family: str, inputs: int | None, texts: int | None) -> Priced | None:
        """Its LM's ``texts`` at the bench's seconds per embedded sentence, plus on a CPU the stage's (``family``'s:
        the full search's too) measured fixed part and seconds per input."""
        if not texts:
            return None
        seconds = fits.rerank_seconds(texts)
        if seconds is None:
            return None
        source = f"{fits.rerank_source}, {texts} candidates"
        fixed = fits.cpu_price(family, inputs)
        if fixed is not None:
            seconds, source = max(seconds + fixed.seconds, 0.0), f"{source}; plus {fixed.source}"
        return Priced(seconds, source, fits.device)

    @classmethod
    def key_settings(cls, cfg: Any) -> dict[str, Any]:
        """Every defining field of the rerank config but the other rerankers' sections, and the demonstrations'
        settings by their own key: what prompt-guided stage keys always held (and a plug-in's modules: a subclass's,
        its demonstration strategy's)."""
        from ...core.config import result_settings
        from ...selection.base import STRATEGIES, settings_key

        others = tuple(f.name for f in fields(cfg) if f.name in RERANKERS and f.name != cls.name)
        return {**result_settings(cfg, without=("out", "candidates", *others)), "demos": settings_key(cfg.demos),
                **plug_in_key(cls), **plug_in_key(STRATEGIES.part(cfg.demo_selection), "demo_selection_plug_in")}


__all__ = ["PromptGuided"]
