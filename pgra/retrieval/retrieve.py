"""``pgra retrieve``: top-k first-stage candidates for every input of a task, in the interchange JSONL.

Fixed chunks of ``query_batch_size`` inputs, chunk c on rank c mod N, ties by corpus position: the same bytes on
1 or N ranks (docs/beyond-one-machine.md)."""

from __future__ import annotations

import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import MAX_BATCH, MAX_ITEMS, SEED_MAX, check_config, option, recorded_settings
from ..core.errors import InputError, StaleArtifactError
from ..core.faults import fault_point
from ..core.progress import progress
from ..data.interchange import example_record, read_records, write_records
from ..data.itself import without_itself
from ..runtime.distributed import DistContext
from ..stages.runner import StageRun
from ..storage.artifacts import (
    MANIFEST,
    check_disjoint,
    read_json,
    sha256_file,
    write_json,
)
from ..tasks import get_task, load_task, task_names, task_paths
from .index import Index

CANDIDATES_KIND = "candidates"


@dataclass
class RetrieveConfig:
    """Everything ``pgra retrieve`` needs."""

    task: str = option("", io="in", suggest=task_names, help="registered task name or task YAML")
    index: str = option("", exists="dir", help="index folder from build-index")
    out: str = option("", help="candidates folder to write")
    k: int = option(150, flag="-k", min=1, max=MAX_ITEMS, help="candidates per input")
    splits: list[str] = option(path_segment=True, default_factory=lambda: ["train", "dev", "test"], help="comma-separated splits")
    data_dir: str = option("data", io="in", help="root of the task data")
    query_batch_size: int = option(256, min=1, max=MAX_BATCH, help="queries per search batch")
    exclude_query_text: bool = option(False, help="drop candidates whose text equals the query")
    exclude_ids: str = option("", io="in", help="file of corpus ids (one a line, e.g. the leakage audit's "
                                                 "analysis/<task>/leakage_ids.txt) never returned as candidates")
    max_examples: int = option(0, min=0, help="N inputs per split (smoke runs, demos); 0 = all")
    split_sizes: dict[str, int] = option(default_factory=dict, flag=False,
                                         help="N per split, overriding max_examples (e.g. {train: 48, test: 96})")
    subsample: str = option("first", choices=("first", "random"),
                            help="which N inputs: the first N, or N drawn at random (seeded; file order kept)")
    subsample_seed: int = option(13, min=0, max=SEED_MAX, help="seed of the random subsample")
    device: str = option("auto", cosmetic=True, help="auto, cpu, cuda ...")
    trust_remote_code: bool = option(False, help="let the index's encoder run its own code (its manifest never can)")
    show_progress: bool = option(True, cosmetic=True, help="progress bars (a line every 30 s in a log)")
    split_index_over_ranks: bool = option(False, cosmetic=True, omit_default=True, record_default=False,
                                          help="multi-process: each rank holds a part of a flat index built with "
                                               "dense.bounded_memory (its vector shards round-robin) and the top-k "
                                               "are merged across ranks; off: each rank holds all of it")


def write_candidates(cfg: RetrieveConfig, run: StageRun) -> dict[str, Any] | None:
    """The candidates stage's build in every process (each searches its share); the manifest's fields on rank 0."""
    check_config(cfg)
    for name in ("task", "index", "out"):
        if not getattr(cfg, name):
            raise InputError(f"no {name} given (--{name})", field=name)
    ctx = run.ctx
    task = get_task(cfg.task)
    check_disjoint({"out": cfg.out}, {"task": task_paths(task, cfg.data_dir)})
    data = load_task(task, cfg.data_dir, splits=tuple(cfg.splits))
    index = Index(cfg.index, device=cfg.device, trust_remote_code=cfg.trust_remote_code,
                  ranks=ctx if cfg.split_index_over_ranks else None)
    if cfg.split_index_over_ranks and ctx.world_size > 1 and not index.spans_ranks:
        raise InputError(f"index {cfg.index} cannot be split over ranks: only a flat index built with "
                         "dense.bounded_memory keeps its vectors as shards", field="split_index_over_ranks")
    qctx = DistContext() if index.spans_ranks else ctx  # who splits the queries: no one when ranks split the index
    excluded = read_excluded_ids(cfg.exclude_ids) if cfg.exclude_ids else set()  # a bad file: nothing written yet
    out = Path(cfg.out)
    if ctx.is_main:
        run.begin()
    ctx.barrier()
    parts = out / ".parts"
    counts: dict[str, int] = {}
    removed: dict[str, int] = {}
    for split in cfg.splits:
        n = int(cfg.split_sizes.get(split, cfg.max_examples))
        if n < 0:
            raise InputError(f"the size of split {split} must be >= 0 (0 = all), got {n}", field="split_sizes")
        examples = subsample(data[split], n, cfg.subsample, cfg.subsample_seed)
        counts[split] = len(examples)
        records, removed[split] = _search_share(cfg, index, examples, qctx, excluded,
                                                progress_bar=cfg.show_progress and ctx.is_main, split=split)
        if ctx.is_main or not index.spans_ranks:  # a split index: every rank found the same, rank 0 writes
            write_records(parts / f"{split}.{qctx.rank:05d}.jsonl", records)
        fault_point("retrieve.split")
    if ctx.is_main or not index.spans_ranks:
        write_json(parts / f"removed.{qctx.rank:05d}.json", removed)
    ctx.barrier()
    if not ctx.is_main:
        return None
    writers = qctx.world_size
    removed = {split: sum(read_json(parts / f"removed.{r:05d}.json")[split] for r in range(writers))
               for split in cfg.splits}
    for split in cfg.splits:
        shards = [list(read_records(parts / f"{split}.{r:05d}.jsonl")) for r in range(writers)]
        merged = [shards[r][j] for r, j in (chunk_place(i, cfg.query_batch_size, writers)
                                            for i in range(counts[split]))]
        run.split(split, lambda merged=merged: merged)
    shutil.rmtree(parts, ignore_errors=True)
    m = index.manifest
    run.task, run.config = task, recorded_settings(cfg)
    run.after = {"excluded": ({"file": str(Path(cfg.exclude_ids).resolve()), "sha256": sha256_file(cfg.exclude_ids),
                               "ids": len(excluded), "removed_from_top_k": removed} if cfg.exclude_ids else None)}
    return {"k": cfg.k, "counts": counts,
            "index": {"path": str(Path(cfg.index).resolve()), "build_key": m["build_key"],
                      "retriever": m["retriever"], "encoder": m.get("encoder"), "pooler": m.get("pooler"),
                      "corpus_content_sha256": m["corpus"]["content_sha256"], "corpus_size": m["size"]},
            "data_provenance": data.provenance}


def _search_share(cfg: RetrieveConfig, index: Index, examples: list, qctx: DistContext, excluded: set[str],
                  progress_bar: bool, split: str) -> tuple[list[dict], int]:
    """This rank's share of a split's queries, searched: their records and how many hits the exclusions removed."""
    size = cfg.query_batch_size
    mine = [examples[c * size:(c + 1) * size] for c in qctx.shard(query_chunks(len(examples), size))]
    records, removed = [], 0
    bar = progress(total=sum(map(len, mine)), desc=f"retrieving {split}", unit=" queries", disable=not progress_bar)
    for batch in mine:
        found = search_candidates(index, [ex.text for ex in batch], cfg.k, cfg.exclude_query_text, excluded)
        for ex, (ctxs, gone) in zip(batch, found, strict=True):
            removed += gone
            records.append(example_record(ex, ctxs))
        bar.update(len(batch))
    bar.close()
    return records, removed


def query_chunks(n: int, size: int) -> int:
    """How many fixed chunks of ``size`` queries ``n`` queries make (the last one may be shorter)."""
    return -(-n // size)


def chunk_place(i: int, size: int, writers: int) -> tuple[int, int]:
    """``(rank, row)`` of input ``i`` after a search in fixed chunks of ``size`` round-robin over ``writers`` ranks."""
    chunk = i // size
    return chunk % writers, (chunk // writers) * size + i % size


def by_score_then_position(scores: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each top-k row ordered by score (no rounding), then lower position; -1 positions (none found) last."""
    missing = positions < 0
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, positions), -np.asarray(scores, np.float64),
                        missing), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(positions, order, axis=1)


def ranked_hits(index: Index, texts: list[str], k: int) -> list[list[dict[str, Any]]]:
    """:meth:`Index.search_hits` ordered by score, then lower corpus position, whatever kernel or batch found them."""
    return index.hits(*by_score_then_position(*index.search(texts, k)))


def search_candidates(index: Index, texts: list[str], k: int, exclude_query_text: bool = False,
                      excluded: Collection[str] = frozenset()) -> list[tuple[list, int]]:
    """Per query: its top ``k`` without its own text and the ``excluded`` ids, and how many excluded ids were
    in its top k (asks k + at most k extra hits first, again for every excluded id when left short)."""
    own = 1 if exclude_query_text else 0
    full = k + own + len(excluded)
    first = min(full, k + own + min(len(excluded), k))

    def clean(text: str, hits: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        if exclude_query_text:
            hits = without_itself(text, hits)
        gone = sum(str(c["id"]) in excluded for c in hits[:k])
        return [c for c in hits if str(c["id"]) not in excluded][:k], gone

    hits = ranked_hits(index, texts, first)
    out = [clean(t, h) for t, h in zip(texts, hits, strict=True)]
    short = [i for i, (kept, _) in enumerate(out) if len(kept) < k and len(hits[i]) == first < full]
    if short:
        for i, h in zip(short, ranked_hits(index, [texts[i] for i in short], full), strict=True):
            out[i] = clean(texts[i], h)
    return out


def subsample(examples: list, n: int, how: str = "first", seed: int = 13) -> list:
    """``n`` of ``examples`` (all when ``n`` is 0 or larger): the first n, or n at random in their file order."""
    if not n or n >= len(examples):
        return list(examples)
    if how == "first":
        return list(examples[:n])
    if how != "random":
        raise InputError(f"unknown subsample '{how}' (first, random)", field="subsample")
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size=n, replace=False))
    return [examples[i] for i in keep.tolist()]


def read_excluded_ids(path: str | Path) -> set[str]:
    """The corpus ids of an exclusion file: one a line (blank lines and ``#`` comments skipped), as strings."""
    from ..storage.artifacts import read_utf8

    lines = read_utf8(path, "exclusion file", field="exclude_ids").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}


def recorded_exclusions(manifest: dict[str, Any], folder: str | Path) -> set[str]:
    """The ids a candidates folder's retrieval excluded, read again from the recorded, unchanged file."""
    record = manifest.get("excluded")
    if not record:
        return set()
    path = Path(record["file"])
    if not path.is_file():
        raise InputError(f"{folder} was retrieved without the ids in {path}, which is gone: put it back (the run "
                         "must never return evidence it excluded)", path=Path(folder) / MANIFEST, field="excluded")
    if sha256_file(path) != record["sha256"]:
        raise StaleArtifactError(f"{path} changed since {folder} was retrieved without its ids: restore it, or "
                                 "retrieve again")
    return read_excluded_ids(path)


__all__ = ["CANDIDATES_KIND", "RetrieveConfig", "by_score_then_position", "chunk_place", "query_chunks", "ranked_hits",
           "read_excluded_ids", "recorded_exclusions", "search_candidates", "write_candidates",
           "subsample"]
