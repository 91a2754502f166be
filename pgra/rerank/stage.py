"""The generic reranking stage: any registered :class:`~pgra.rerank.base.Reranker` but the prompt-guided one (whose
stage keeps its demonstrations and caches, :mod:`pgra.rerank.reranker`).

Reads a candidates folder, cuts each query's candidates to the first k, lets the reranker score them split by
split, and writes ``<split>.jsonl`` (each query's top d, best first, with ``score``, ``retrieval_score`` and
``retrieval_rank``) and a ``reranked`` manifest: the reranker's name and options, its LM cost (``cost``), the
candidates it read. Readers, ``pgra evaluate`` and the analyses read it like a prompt-guided folder. Under several
processes rank 0 does the work (the other ranks wait).

Every second stage (this one, the prompt-guided reranker's in :mod:`pgra.rerank.reranker`, the full search's in
:mod:`pgra.rerank.full_search`) reads its inputs through one :class:`~pgra.retrieval.candidates_stage.StageInputs` (what a second stage reads of a
candidates folder, read and checked before anything is written) and writes its
folder through the one runner of every stage (:class:`pgra.stages.runner.StageRun`: opened, split by split, the
manifest last).

A killed generic stage resumes split by split under the reranker's settings and the candidates' fingerprint (the
runner's ``.splits_done.json``, :class:`pgra.stages.runner.StageRun`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..artifacts import MANIFEST, read_json, read_manifest
from ..causal_lm import LMCost
from ..corpus import CorpusStore
from ..errors import InputError, StaleArtifactError
from ..provenance import folder_fingerprint
from ..retrieval.candidates_stage import StageInputs
from ..tasks import task_from_manifest
from .base import DEFAULT

RERANKED_KIND = "reranked"
FULL_SEARCH_KIND = "full_search"  # pgra_full's folder (pgra.rerank.full_search), a reranked folder's twin


def train_queries(cfg: Any, train: list[dict[str, Any]], demos: Sequence[Any]) -> list[dict[str, Any]]:
    """The train split's queries a shared-prompt stage reranks and writes: all of them (the inputs every compared
    reader trains on) unless ``cfg.demos_in_train`` is off, which drops the prompt's demonstrations."""
    if getattr(cfg, "demos_in_train", True):
        return train
    demo_ids = {str(d.id) for d in demos}
    return [r for r in train if str(r["id"]) not in demo_ids]


def reranked_cost(manifest: dict[str, Any]) -> LMCost:
    """The LM work behind a reranked folder (its manifest): a prompt-guided folder's embedding plus its
    demonstrations' selection, another reranker's recorded ``cost``."""
    if "embedding" not in manifest:
        return LMCost.from_dict(manifest.get("cost"))
    e = manifest["embedding"]
    return LMCost(e["texts"], e["tokens_run"]) + LMCost.from_dict(manifest.get("selection_cost"))


def reranker_of(manifest: dict[str, Any]) -> str:
    """The reranker a reranked folder's manifest records (folders written before the family: prompt_guided)."""
    return str(manifest.get("reranker", DEFAULT))


def generic_stage(cls: type, cfg: Any, ctx: Any = None) -> Path:
    """Rerank every requested split of ``cfg.candidates`` with the reranker class ``cls`` into ``cfg.out`` (resumed
    split by split under the reranker's settings and the candidates' fingerprint)."""
    from ..distributed import init_distributed

    run = StageInputs.read(cfg, with_train=False)
    ctx = ctx or init_distributed()
    if not ctx.is_main:
        return run.out
    reranker = cls(cfg, run.task, run.store, run.cand)
    reranker.load()
    folder = run.begin({"settings": cls.key_settings(cfg), "candidates": folder_fingerprint(run.cand_dir)})
    for split in run.splits:
        recs = run.data[split]
        folder.split(split, lambda recs=recs: [{**{k: v for k, v in r.items() if k != "ctxs"}, "ctxs": c} for r, c in
                                               zip(recs, reranker.rerank([r["text"] for r in recs],
                                                                         [r["ctxs"] for r in recs]), strict=True)],
                     meter=reranker.cost, tally=lambda recs: {"short": sum(len(r["ctxs"]) < cfg.top_d for r in recs)})
    return folder.finish(RERANKED_KIND, run.task, {
        "reranker": cls.name, "reranker_settings": cls.key_settings(cfg), **reranker.describe(),
        "k": cfg.k or run.cand["k"], "top_d": cfg.top_d, "counts": folder.counts,
        "queries_with_fewer_than_d": folder.tally.get("short", 0), "cost": folder.cost.as_dict()},
        run.inputs(), cfg, splits=run.splits)


class Replay:
    """A reranked folder's reranker (any but the prompt-guided one, whose replay is
    :meth:`pgra.rerank.core.PromptGuidedReranker.load`), to rerank new texts' candidates as its stage did: each text's first k
    candidates (the folder's ``config.k``; 0: all), scored, the top d kept."""

    def __init__(self, reranker: Any, k: int) -> None:
        self.reranker, self.k = reranker, int(k or 0)

    @classmethod
    def load(cls, reranked: str | Path, corpus: CorpusStore | None, device: str | None = None,
             trust_remote_code: bool = False, model: str | Path | None = None,
             index: str | Path | None = None) -> Replay:
        """The reranker of ``reranked`` (a folder the generic stage wrote) built from its manifest's config, task
        and candidates record, its models loaded on ``device`` (default: the recorded one) and checked against the
        fingerprints the manifest recorded (a model whose files changed is refused). ``trust_remote_code``: the
        caller lets its models run their own code (what the manifest recorded never does). ``model``: its model's
        folder (:attr:`Reranker.model_field`) when not where the manifest says (an export's copy); ``index``: the
        first stage's index folder, for a reranker that reads it (``mmr``), when not where the candidates were."""
        from ..config import from_dict
        from .base import reranker_class
        from .config import rerank_config

        reranked = Path(reranked)
        m = read_manifest(reranked, RERANKED_KIND)
        name = reranker_of(m)
        if name == DEFAULT:
            raise InputError(f"{reranked} was reranked by the prompt-guided reranker: load it with "
                             "pgra.rerank.core.PromptGuidedReranker.load", path=reranked / MANIFEST, field="reranker")
        kind = reranker_class(name, "reranker")
        values = dict(m.get("config") or {})
        if "trust_remote_code" in values:
            values["trust_remote_code"] = bool(trust_remote_code)
        if device is not None and "device" in values:
            values["device"] = device
        if model is not None and kind.model_field:
            values = _with_field(values, kind.model_field, str(model))
        if index is not None and "index" in values:
            values["index"] = str(index)
        cfg = from_dict(rerank_config(), values, source=str(reranked / MANIFEST))
        task = task_from_manifest(m, reranked / MANIFEST)
        recorded = (m.get("candidates") or {}).get("index")
        candidates = {"k": m.get("k"), "index": {**recorded, "path": str(index)} if index is not None and
                      isinstance(recorded, dict) else recorded}
        reranker = kind(cfg, task, corpus, candidates)
        reranker.load()
        now = reranker.describe()  # its models' fingerprints: hashed once
        moved = model_of(m)[0] if model is not None else None  # given elsewhere: its recorded path may differ
        changed = [k for k, v in now.items() if k in m and m[k] != v and not (moved is not None and m[k] == moved)]
        if changed:
            raise StaleArtifactError(f"{reranked} was reranked with other files than those given "
                                     f"({', '.join(changed)} differs): its reranking cannot be replayed with them")
        return cls(reranker, cfg.k)

    def rerank(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        """Per query, the top d of its first k candidates."""
        cut = [list(c[: self.k]) if self.k else list(c) for c in candidates]
        return self.reranker.rerank(list(queries), cut)


def model_of(manifest: dict[str, Any]) -> tuple[str | None, str | None]:
    """The model folder a reranked folder's reranker loaded (its :attr:`Reranker.model_field` in the manifest's
    config) and that model's fingerprint as recorded; ``(None, None)`` for a reranker without one."""
    from .base import reranker_class

    field = reranker_class(reranker_of(manifest), "reranker").model_field
    if not field:
        return None, None
    value: Any = manifest.get("config") or {}
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    own = f"{field.rsplit('.', 1)[-1]}_fingerprint"  # as describe() records it: model_fingerprint, lm_fingerprint
    fingerprint = manifest.get(own) if isinstance(manifest.get(own), str) else \
        next((v for k, v in manifest.items() if k.endswith("_fingerprint") and isinstance(v, str)), None)
    return (str(value) if value else None), fingerprint


def _with_field(values: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    """``values`` (a config as a dict) with the dotted ``field`` set to ``value`` (its sections copied, not changed)."""
    head, _, rest = field.partition(".")
    if not rest:
        return {**values, head: value}
    section = values.get(head) if isinstance(values.get(head), dict) else {}
    return {**values, head: _with_field(section, rest, value)}


def summary(out: str | Path) -> str:
    """The line ``pgra rerank`` prints about a finished folder."""
    m = read_json(Path(out) / MANIFEST)
    counts = ", ".join(f"{k} {v}" for k, v in m["counts"].items())
    head = f"reranked: {out} ({reranker_of(m)}, top-{m['top_d']} of {m['k']}; {counts}"
    if "embedding" in m:
        e = m["embedding"]
        return head + (f"; {e['evidence_rows']} evidence sentences, {e['evidence_cache_hits']} from the cache, "
                       f"{e['tokens_run']} LM tokens run, {e['truncated']} truncated)")
    return head + f"; {m['cost']['lm_tokens']} LM tokens run)"


__all__ = ["FULL_SEARCH_KIND", "RERANKED_KIND", "Replay", "generic_stage", "model_of", "reranked_cost", "reranker_of",
           "summary", "train_queries"]
