"""``pgra_full``'s stage: prompt-guided retrieval without a first stage.

Each input's prompted embedding searches every corpus sentence's prompted embedding (a faiss flat inner-product
index over the corpus pass's vectors, :mod:`pgra.rerank.prompt_guided.corpus_pass`); its top d go to the reader.
Ranking by inner product is ranking by Eq. 3's probability over the whole corpus (a softmax keeps the order): the
reranker at k = the corpus. The folder is a reranked folder's twin (kind ``full_search``; ``score`` is the inner product).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import InputError
from ...lm.prompts import demo_prefix
from ...retrieval.candidates_stage import StageInputs
from ...runtime.distributed import gather_objects, main_computes
from ...stages.runner import StageRun
from ...storage.artifacts import MANIFEST, write_json
from ..config import RerankConfig, rerank_config
from ..stage import FULL_SEARCH_KIND, train_queries
from .cache import EmbeddingCache
from .corpus_pass import query_caches_of, run_corpus_pass
from .in_memory import PromptGuidedReranker, evidence_cache_key, prompt_key
from .rerank_stage import _select, demo_records

# what to do where a pgra_full run's corpus-pass embeddings are not found
WHERE_EMBEDDINGS = ("predict where the experiment ran, run its full_search stage here, or export the run with "
                    "--copy-index (which carries them)")


def search_corpus(vectors: np.ndarray, queries: np.ndarray, top_d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)``: each query's ``top_d`` corpus rows by inner product, best first (a faiss flat index)."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    scores, rows = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(top_d, len(vectors)))
    return scores, rows


def search_stage(cfg: RerankConfig, folder: StageRun) -> dict[str, Any] | None:
    """The full search's build (every process of ``folder.ctx`` embeds its share of the corpus pass, rank 0 searches):
    each input's top ``cfg.top_d`` of the whole corpus under the prompt-guided embedding, every requested split
    (``cfg.k`` is not read); returns the manifest's fields on rank 0."""
    run = StageInputs.read(replace(cfg, k=0))
    cand, task, store, data, splits = run.cand, run.task, run.store, run.data, run.splits
    ctx = folder.ctx
    selection = main_computes(ctx, lambda: _select(cfg, task, cand, data, splits))
    if selection["per_query"]:
        raise InputError(f"the search over the corpus needs one prompt for every text; demo_selection "
                         f"{cfg.demo_selection} gives each query its own", field="demo_selection")
    demos = selection["demos"]
    reranker = PromptGuidedReranker.from_config(cfg, task, demos)
    data["train"] = train_queries(cfg, data["train"], demos)
    corpus = run_corpus_pass(replace(cfg, corpus_pass="corpus"), ctx, task, store, cand, reranker, demos)
    queries = query_caches_of(cfg, ctx, task, data, splits, reranker, demos)  # all cached by the pass
    stats = gather_objects(ctx, reranker.embedder.stats.record())
    ctx.barrier()
    if not ctx.is_main:
        return None

    key = evidence_cache_key(prompt_key(reranker.embedder, cfg.lm, task, demos), cand["index"]["corpus_content_sha256"])
    evidence = EmbeddingCache(cfg.cache_dir, key, len(store), reranker.embedder.dim, create=False)
    vectors = evidence.get(np.arange(len(store)))
    folder.begin()
    for split in splits:
        recs = data[split]
        scores, rows = search_corpus(vectors, queries[split].get(np.arange(len(recs))), cfg.top_d)
        records = []
        for rec, s, r in zip(recs, scores, rows, strict=True):
            ids, texts = store.external_ids(r), store.texts(r)
            records.append({**{k: v for k, v in rec.items() if k != "ctxs"},
                            "ctxs": [{"id": i, "text": t, "score": float(x)} for i, t, x in zip(ids, texts, s, strict=True)],
                            "demonstrations": demo_records(demos)})
        folder.split(split, lambda records=records: records)
    write_json(folder.out / "demonstrations.json", [{"id": d.id, "text": d.text, "label": d.label} for d in demos])
    total = {k: sum(s[k] for s in stats) for k in stats[0]}
    folder.task, folder.inputs, folder.files = task, run.inputs(), ["demonstrations.json"]
    return {"lm": cfg.lm, "lm_fingerprint": reranker.embedder.fingerprint,
            "demo_selection": selection["describe"], "per_query_demonstrations": False,
            "demonstrations": [d.id for d in demos], "prompt_prefix": demo_prefix(task, demos), "top_d": cfg.top_d,
            "searched_rows": len(store), "counts": folder.counts, "embedding": {**total, "cache": str(evidence.directory)},
            "corpus_pass": corpus, "selection_cost": selection["cost"]}


class FullSearchReplay:
    """``pgra_full``'s search on new texts, as its stage did it: each text embedded under the folder's prompt (its
    demonstrations) and the top d of the whole corpus by inner product with the corpus pass's vectors."""

    def __init__(self, reranker: PromptGuidedReranker, demos: list, vectors: np.ndarray, corpus, top_d: int) -> None:
        self.reranker, self.demos, self.vectors, self.corpus, self.top_d = reranker, demos, vectors, corpus, top_d

    @classmethod
    def load(cls, folder: str | Path, corpus, device: str | None = None, trust_remote_code: bool = False,
             lm: str | Path | None = None, store: str | Path | None = None) -> FullSearchReplay:
        """The search of a ``full_search`` folder: its LM (refused if its files changed), demonstrations and d, and
        the corpus pass's embeddings of ``corpus`` (the index's store), read from the cache the folder records: a
        cache that is gone (another machine) or incomplete is an InputError saying so. ``lm``: the LM's folder when
        not where the manifest says (an export's copy); ``store``: the folder holding the cache (an export's copy,
        ``store/``), the same vectors or refused."""
        from ...core.config import from_dict
        from ...core.errors import StaleArtifactError
        from ...lm.loading import remote_code_allowed
        from ...storage.artifacts import read_json, read_manifest
        from ...tasks import Example, task_from_manifest
        from .embedder import LMEmbedder

        folder = Path(folder)
        m = read_manifest(folder, FULL_SEARCH_KIND)
        if lm is not None:
            m = {**m, "lm": str(lm)}
        task = task_from_manifest(m, folder / MANIFEST)
        trust = remote_code_allowed(m["lm"], trust_remote_code, m["config"].get("trust_remote_code"), "reranking LM",
                                    folder / MANIFEST)
        cfg = from_dict(rerank_config(), m["config"], source=str(folder / MANIFEST))
        embedder = LMEmbedder(m["lm"], **{**cfg.lm_settings(), "device": device}, trust_remote_code=trust)
        if embedder.fingerprint != m["lm_fingerprint"]:
            raise StaleArtifactError(f"the LM at {m['lm']} is not the one {folder} searched with (its files changed)")
        demos = [Example(str(d["id"]), d["text"], d["label"]) for d in read_json(folder / "demonstrations.json")]
        key = evidence_cache_key(prompt_key(embedder, m["lm"], task, demos), corpus.fingerprint)
        if store is not None:  # a copy: its key names the LM as the machine that copied it did
            key = _stored_key(Path(store), key, folder)
        recorded = (m.get("embedding") or {}).get("cache") if isinstance(m.get("embedding"), dict) else None
        if store is None and not recorded:
            raise InputError(f"names no cache of the corpus pass's embeddings it searched: {WHERE_EMBEDDINGS}",
                             path=folder / MANIFEST, field="embedding.cache")
        where = Path(store) if store is not None else Path(recorded).parent
        rows = np.arange(len(corpus))
        try:
            cache = EmbeddingCache(where, key, len(corpus), embedder.dim, create=False, read_only=True)
            vectors = cache.get(rows)
        except Exception as e:  # gone, another corpus, never completed
            raise InputError(f"pgra_full searches the corpus pass's embeddings of every corpus sentence, which are not "
                             f"in {where} ({type(e).__name__}): {WHERE_EMBEDDINGS}", path=folder / MANIFEST,
                             field="embedding") from None
        reranker = PromptGuidedReranker(task, embedder, int(m["top_d"]), 0, demos, prefix_cache=cfg.prefix_cache)
        return cls(reranker, demos, vectors, corpus, int(m["top_d"]))

    def rerank(self, queries, candidates=None) -> list[list[dict]]:
        """Per query, the corpus's top d under the prompt-guided embedding (``candidates``, the first stage's, are
        not read: the search covers the whole corpus)."""
        q = self.reranker.embed(list(queries), self.demos)
        scores, rows = search_corpus(self.vectors, q, self.top_d)
        return [[{"id": i, "text": t, "score": float(x)}
                 for i, t, x in zip(self.corpus.external_ids(r), self.corpus.texts(r), s, strict=True)]
                for s, r in zip(scores, rows, strict=True)]


def complete_store(cache: str | Path) -> dict:
    """The ``key.json`` record of the corpus pass's cache folder ``cache`` (a full_search folder's
    ``embedding.cache``) when every row of it is filled; an InputError saying what is missing otherwise."""
    from ...storage.artifacts import read_json

    cache = Path(cache)
    try:  # read only: the exporter may not own the cache
        meta = read_json(cache / "key.json")
        size, dim = int(meta["size"]), int(meta["dim"])
        vectors = np.load(cache / "vectors.npy", mmap_mode="r", allow_pickle=False)
        done = np.load(cache / "done.npy", mmap_mode="r", allow_pickle=False)
        if vectors.shape != (size, dim) or done.shape != (size,):
            raise ValueError(f"shapes {vectors.shape} and {done.shape}, not ({size}, {dim})")
    except Exception as e:  # gone, damaged, another key
        raise InputError(f"the corpus pass's embeddings pgra_full searches are not readable in {cache} "
                         f"({type(e).__name__}): run the experiment's full_search stage again", field="embedding") \
            from None
    if not bool(np.all(done)):
        raise InputError(f"{int((done == 0).sum()):,} of the corpus's {len(done):,} rows are missing from {cache}: "
                         "run the experiment's full_search stage again", field="embedding")
    return meta


def _stored_key(store: Path, key: dict, folder: Path) -> dict:
    """The key of the cache in ``store`` (an export's copy) that holds ``key``'s vectors: the same in every part but
    the name the LM had (``lm_name``, a path of the machine the cache was made on); an InputError when none does."""
    from ...storage.artifacts import read_json

    want = {k: v for k, v in json.loads(json.dumps(key)).items() if k != "lm_name"}
    for meta_path in sorted(store.glob("*/key.json")):
        try:
            found = read_json(meta_path)["key"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(found, dict) and {k: v for k, v in found.items() if k != "lm_name"} == want:
            return found
    raise InputError(f"pgra_full searches the corpus pass's embeddings of every corpus sentence, and {store} holds "
                     f"none of this corpus under the prompt and LM {folder} searched with: {WHERE_EMBEDDINGS}",
                     path=folder / MANIFEST, field="embedding")


__all__ = ["FULL_SEARCH_KIND", "FullSearchReplay", "complete_store", "search_corpus", "search_stage"]
