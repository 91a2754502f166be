"""The interface of a second-stage reranker and its registry.

A reranker is one file: a :class:`Reranker` subclass that scores each query's first-stage candidates
(:meth:`Reranker.scores`); the base sorts by score and keeps the top d (:meth:`Reranker.rerank`, :func:`ranked`),
so a subclass only scores. Its options are a dataclass of its own (:attr:`Reranker.options`), the section
``rerank.<name>`` of a rerank config (made from this registry, :mod:`pgra.rerank.config`); ``rerank.reranker``
picks it by ``name``. The file registers it with ``@RERANKERS.register``; a plug-in does the same from outside
``pgra/`` (its options are then a section of every rerank config read after it registered:
:func:`pgra.rerank.config.rerank_config`).

``pgra rerank`` runs the chosen reranker's stage (:meth:`Reranker.build_stage`: by default load, score each split,
write ``<split>.jsonl`` and a ``reranked`` manifest); its replay, what an export carries and its price are its own
too (:meth:`Reranker.own_replay`, :meth:`Reranker.own_carried`, :meth:`Reranker.price`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..core.registry import Registry, plug_in_key
from ..stages import ModelNeed

if TYPE_CHECKING:
    from ..data.corpus import CorpusStore
    from ..lm.causal_lm import LMCost
    from ..tasks import TaskSpec

DEFAULT = "prompt_guided"
# the rerankers that ship with pgra, one module each (importing one registers it)
BUILTIN = ("prompt_guided.reranker", "cross_encoder", "query_likelihood", "mmr", "random")


def ranked(ctxs: Sequence[dict[str, Any]], scores: np.ndarray, top_d: int) -> list[dict[str, Any]]:
    """The top-``top_d`` of a query's candidate ``ctxs`` by ``scores`` (ties keep first-stage order), best first,
    each with its score as ``score`` and its first-stage ``retrieval_score`` and ``retrieval_rank``."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(ctxs),):
        raise ValueError(f"{len(ctxs)} candidates but scores of shape {scores.shape}")
    order = np.argsort(-scores, kind="stable")[:top_d]
    return [{**ctxs[j], "score": float(scores[j]), "retrieval_score": ctxs[j].get("score"),
             "retrieval_rank": int(j) + 1} for j in order]


class Reranker(ABC):
    """One kind of reranker: ``scores(queries, candidates)`` gives each query's candidates a score (higher is
    better); :meth:`rerank` sorts and keeps the top d. ``load`` loads its models (once, before scoring); ``cost``
    is its LM work (:class:`~pgra.lm.causal_lm.LMCost`).

    Built from a rerank config (``cfg``: its ``top_d``, ``k``, its section ``cfg.<name>`` and, for those that run
    an LM, the LM block), the task, the corpus store of the index the candidates came from and the candidates
    manifest (its ``index`` record: where the first stage's files are).
    """

    name: ClassVar[str] = ""  # the config's ``rerank.reranker`` value, the manifest's ``reranker``
    title: ClassVar[str] = ""  # how reports name it (empty: the name)
    # what its ``score`` is, as results.html labels the evidence ("probability", "log-probability" ...)
    score_name: ClassVar[str] = "score"
    options: ClassVar[type | None] = None  # the dataclass of its section ``rerank.<name>`` (None: no options)
    # the fields of the rerank config its results depend on besides its own section (its stage key)
    uses: ClassVar[tuple[str, ...]] = ("k", "top_d", "splits")
    # the config field naming the one model folder it loads (dotted for its section's: ``cross_encoder.model``;
    # empty: none): what ``pgra export`` carries or points at, and ``Pipeline.load(..., lm=)`` replaces
    model_field: ClassVar[str] = ""
    folder: ClassVar[str] = ""  # its stage's folder ("": ``reranked-<name>``)

    def __init__(self, cfg: Any, task: TaskSpec, corpus: CorpusStore | None = None,
                 candidates: dict[str, Any] | None = None) -> None:
        self.cfg, self.task, self.corpus, self.candidates = cfg, task, corpus, candidates or {}
        # (a plug-in registered after the config class was made has no section there: its defaults)
        self.settings = (getattr(cfg, self.name, None) or self.options()) if self.options is not None else None
        self.top_d = int(cfg.top_d)

    def load(self) -> None:  # noqa: B027 (a hook: nothing to load by default)
        """Load its models (called once before the first :meth:`scores`)."""

    @abstractmethod
    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        """Per query, one score per candidate (``candidates[i]``: dicts with ``id``, ``text`` and the first-stage
        ``score``), higher is better."""

    def cost(self) -> LMCost:
        """The LM work it did so far (none by default)."""
        from ..lm.causal_lm import LMCost

        return LMCost()

    def describe(self) -> dict[str, Any]:
        """What its manifest records about it besides the config (its models' fingerprints ...)."""
        return {}

    def rerank(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        """Per query, its candidates' top d by :meth:`scores`, best first (fewer when it has fewer)."""
        return [ranked(c, s, self.top_d) for c, s in zip(candidates, self.scores(queries, candidates), strict=True)]

    @classmethod
    def build_stage(cls, cfg: Any, run: Any) -> dict[str, Any] | None:
        """Its stage's build (``pgra rerank``; ``run``: a :class:`~pgra.stages.runner.StageRun`): each requested split
        scored by rank 0, resumed under its settings and the candidates' fingerprint; returns the manifest's fields."""
        from ..retrieval.candidates_stage import StageInputs
        from ..storage.provenance import folder_fingerprint

        inputs = StageInputs.read(cfg, with_train=False)
        if not run.ctx.is_main:
            return None
        reranker = cls(cfg, inputs.task, inputs.store, inputs.cand)
        reranker.load()
        run.task, run.inputs = inputs.task, inputs.inputs()
        run.begin({"settings": cls.key_settings(cfg), "candidates": folder_fingerprint(inputs.cand_dir)})
        for split in inputs.splits:
            recs = inputs.data[split]
            run.split(split, lambda recs=recs: [{**{k: v for k, v in r.items() if k != "ctxs"}, "ctxs": c} for r, c
                                                in zip(recs, reranker.rerank([r["text"] for r in recs],
                                                                             [r["ctxs"] for r in recs]), strict=True)],
                      meter=reranker.cost)
        return {"reranker": cls.name, "reranker_settings": cls.key_settings(cfg), **reranker.describe(),
                "k": cfg.k or inputs.cand["k"], "top_d": cfg.top_d, "counts": run.counts,
                "queries_with_fewer_than_d": sum(len(r["ctxs"]) < cfg.top_d for s in inputs.splits
                                                 for r in inputs.data[s]),
                "cost": run.cost.as_dict()}

    @classmethod
    def own_replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None,
                   trust_remote_code: bool, model: str | Path | None) -> Any:
        """What reranks new texts as its folder recorded (None: :class:`~pgra.rerank.stage.Replay` rebuilds it)."""
        return None

    @classmethod
    def own_carried(cls, folder: Path, manifest: dict[str, Any]) -> Any:
        """What an export carries of its folder beyond its one model (None: that model)."""
        return None

    @classmethod
    def price(cls, fits: Any, family: str, inputs: int | None, texts: int | None) -> Any:
        """Its stage priced from the bench fits (:meth:`pgra.stages.Stage.price`; None: no fit)."""
        return None

    @classmethod
    def models(cls, rerank: Any) -> list[ModelNeed]:
        """The model its stage loads, from the rerank config: its :attr:`model_field`'s, else the LM block's when it
        uses ``lm`` (none otherwise)."""
        field = cls.model_field or ("lm" if "lm" in cls.uses else "")
        if not field:
            return []
        value = rerank
        for part in field.split("."):
            value = getattr(value, part)
        lm = field == "lm"  # the LM block, which says whether it may run its own code
        return [ModelNeed(f"rerank.{field}", str(value), f"{cls.name} reranker's LM" if lm else cls.title or cls.name,
                          bool(rerank.trust_remote_code) if lm else False)]

    @classmethod
    def key_settings(cls, cfg: Any) -> dict[str, Any]:
        """What its stage key holds of the rerank config ``cfg``: its name, the fields in :attr:`uses`, its
        section and a plug-in's module."""
        section = getattr(cfg, cls.name, None) if cls.options is not None else None
        return {"reranker": cls.name, **{f: getattr(cfg, f) for f in cls.uses},
                **({cls.name: asdict(section)} if is_dataclass(section) else {}), **plug_in_key(cls)}


RERANKERS: Registry[type[Reranker]] = Registry("reranker", __package__, BUILTIN, field="rerank.reranker",
                                             base=Reranker)
register_reranker = RERANKERS.register  # add a reranker class under its ``name``; works as a decorator
reranker_names = RERANKERS.names  # the registered rerankers' names (the config's choices)


def reranker_class(name: str, field: str = "reranker") -> type[Reranker]:
    """The reranker class registered as ``name``."""
    return RERANKERS.part(name, field)


__all__ = ["BUILTIN", "DEFAULT", "RERANKERS", "Reranker", "ranked", "register_reranker", "reranker_class",
           "reranker_names"]
