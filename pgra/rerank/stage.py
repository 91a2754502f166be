"""A reranked folder read back: its replay (:class:`Replay`), its candidates folder, its LM cost, its reranker and model, the line
``pgra rerank`` prints. Every reranker's stage (:meth:`pgra.rerank.base.Reranker.build_stage`) reads a candidates
folder through :class:`~pgra.retrieval.candidates_stage.StageInputs` and writes its own through the one runner of
every stage (:class:`pgra.stages.runner.StageRun`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.errors import InputError, StaleArtifactError
from ..lm.causal_lm import LMCost
from ..runtime.cost import Priced
from ..stages import CTX_BYTES, PlanRequest, StagePlan, StageRequest
from ..storage.artifacts import MANIFEST, read_json, read_manifest
from ..storage.provenance import check_unchanged, recorded_folder
from ..tasks import task_from_manifest
from .base import DEFAULT, reranker_class

RERANKED_KIND = "reranked"
FULL_SEARCH_KIND = "full_search"  # pgra_full's folder (prompt_guided/full_search.py), a reranked folder's twin
RERANKED_CTX_BYTES = 50  # a reranked candidate's retrieval score and rank on top of a candidate's keys
DEMO_BYTES = 35  # a demonstration's id and label in a reranked line


def second_stage_plan(request: PlanRequest, priced: Priced | None, texts: int | None, demos: int) -> StagePlan:
    """A second stage's plan: its files a line per input of its record, its top d and ``demos`` demonstrations."""
    r, d = request, request.rerank.top_d
    line = r.input_bytes + d * (r.sentence_bytes + CTX_BYTES + RERANKED_CTX_BYTES) + demos * DEMO_BYTES
    return StagePlan(priced, texts, r.lines(line), ("their top d={}", d))


def second_stage_config(request: StageRequest, reranker: str) -> Any:
    """The rerank config a second stage of the grid runs: the task's, over its candidates, into its folder."""
    s = request.settings
    return replace(s.rerank, candidates=str(request.inputs["candidates"]), out=str(request.folder), task="",
                   index=s.index.out, show_progress=s.show_progress, reranker=reranker)


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


class Replay:
    """A reranked folder's reranker (or its own replay, :meth:`Reranker.own_replay`), to rerank new texts as its
    stage did: each text's first k candidates (the folder's ``config.k``; 0: all), scored, the top d kept."""

    def __init__(self, reranker: Any, k: int) -> None:
        self.reranker, self.k = reranker, int(k or 0)

    @classmethod
    def load(cls, reranked: str | Path, index: Any, device: str | None = None, trust_remote_code: bool = False,
             model: str | Path | None = None) -> Any:
        """The reranker of ``reranked`` over the loaded first-stage ``index`` (its corpus and folder): its own
        replay, else built from the manifest's config, task and candidates record, its models loaded on ``device``
        and checked against the recorded fingerprints. ``trust_remote_code``: the caller lets its models run their
        own code; ``model``: its model's folder (:attr:`Reranker.model_field`) when not where the manifest says."""
        from ..core.config import from_dict
        from .config import rerank_config

        reranked = Path(reranked)
        m = read_manifest(reranked, RERANKED_KIND)
        kind = reranker_class(reranker_of(m), "reranker")
        own = kind.own_replay(reranked, m, index, device, trust_remote_code, model)
        if own is not None:
            return own
        values = dict(m.get("config") or {})
        if "trust_remote_code" in values:
            values["trust_remote_code"] = bool(trust_remote_code)
        if device is not None and "device" in values:
            values["device"] = device
        if model is not None and kind.model_field:
            values = _with_field(values, kind.model_field, str(model))
        if "index" in values:
            values["index"] = str(index.directory)
        cfg = from_dict(rerank_config(), values, source=str(reranked / MANIFEST))
        task = task_from_manifest(m, reranked / MANIFEST)
        recorded = (m.get("candidates") or {}).get("index")
        candidates = {"k": m.get("k"), "index": {**recorded, "path": str(index.directory)}
                      if isinstance(recorded, dict) else recorded}
        reranker = kind(cfg, task, index.corpus, candidates)
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


def candidates_of(reranked: Path, manifest: dict[str, Any]) -> Path:
    """The candidates folder a reranked folder was made from (relative to it when there: a moved experiment),
    refused when it no longer holds what the reranker read."""
    record = manifest.get("candidates")
    if not isinstance(record, dict) or "path" not in record:
        raise InputError(f"{reranked} records no candidates folder it was made from (its manifest's candidates block)",
                         path=reranked / MANIFEST, field="candidates")
    folder = recorded_folder(reranked, record["path"], record.get("relative"))
    check_unchanged(folder, record.get("fingerprint"), str(reranked),
                    "re-run the experiment (or pgra rerank) to rebuild both folders")
    return folder



def model_of(manifest: dict[str, Any]) -> tuple[str | None, str | None]:
    """The model folder a reranked folder's reranker loaded (its :attr:`Reranker.model_field` in the manifest's
    config) and that model's fingerprint as recorded; ``(None, None)`` for a reranker without one."""
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


__all__ = ["FULL_SEARCH_KIND", "RERANKED_KIND", "Replay", "candidates_of", "model_of", "reranked_cost",
           "reranker_of", "summary", "train_queries"]
