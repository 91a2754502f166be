"""The ``candidates`` stage (``pgra retrieve``) and a candidates folder as the second stages read it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.config import check_config
from ..core.errors import InputError, StaleArtifactError, shorten
from ..data.corpus import CorpusId, CorpusStore
from ..data.interchange import read_records
from ..stages import CTX_BYTES, STAGES, PlanRequest, Stage, StagePlan, StageRequest, defining
from ..stages.runner import StageRun, input_record
from ..storage.artifacts import MANIFEST, check_disjoint, read_manifest, sha256_file, sha256_text
from ..storage.ownership import PART_CHECKS
from ..tasks import TaskSpec, get_task, task_from_manifest, task_paths

if TYPE_CHECKING:
    from .retrieve import RetrieveConfig


@STAGES.register
class CandidatesStage(Stage):
    family = "candidates"
    kind = "candidates"  # CANDIDATES_KIND (pgra.retrieval.retrieve, which this light module does not import)
    reads = ()  # the index, shared by every task, is built before any stage (its build key: ``keys["index"]``)
    score_name = "first-stage score"
    every_rank = True

    def config(self, request: StageRequest) -> RetrieveConfig:
        s = request.settings
        # the index this config builds may run its encoder's code (this run's own config says so): so may retrieval
        trust = s.retrieve.trust_remote_code or s.index.trusts_remote_code()
        return replace(s.retrieve, task=request.task, index=s.index.out, out=str(request.folder),
                       data_dir=s.data_dir, show_progress=s.show_progress, trust_remote_code=trust)

    def key_record(self, request: StageRequest, config: RetrieveConfig) -> dict[str, Any]:
        settings = defining(config, ("out", "trust_remote_code", "exclude_ids"))
        if config.exclude_ids:  # by content (a key without it, when unset, stays what it was before the option)
            path = Path(config.exclude_ids)
            settings["exclude_ids"] = sha256_file(path) if path.is_file() else f"missing: {path}"
        # the task's content (labels, words, templates, metric, data files): every later key changes with it
        return {"retrieve": settings, "index": request.keys.get("index", "unbuilt"), "task": dict(request.task_content)}

    def build(self, config: RetrieveConfig, inputs: Any, run: StageRun) -> dict[str, Any] | None:
        """Every process searches its share of the queries (:func:`pgra.retrieval.retrieve.write_candidates`)."""
        from .retrieve import write_candidates

        return write_candidates(config, run)

    def plan(self, request: PlanRequest) -> StagePlan:
        """On a CPU: the measured fixed part plus seconds per input; its files: each input's record and k candidates."""
        r, k = request, request.retrieved_k
        priced = r.fits.cpu_price(self.family, r.inputs) if r.fits is not None and r.inputs else None
        return StagePlan(priced, disk=r.lines(r.input_bytes + k * (r.sentence_bytes + CTX_BYTES)),
                         line=("k={} candidates", k))


def _check_task_apart(out: Path, cfg: RetrieveConfig) -> None:
    """Refuse an output folder that is, holds or lies inside the task's own data (naming the task)."""
    check_disjoint({"out": str(out)}, {"task": task_paths(get_task(cfg.task), cfg.data_dir)})


PART_CHECKS[CandidatesStage.kind] = _check_task_apart  # before "a folder pgra did not make": the more precise error


def retrieve(cfg: RetrieveConfig, ctx: Any = None) -> Path:
    """``pgra retrieve``: the candidates of every requested split, written by the one runner; returns the folder."""
    return CandidatesStage().run(cfg, ctx)


def open_corpus(cfg: Any, cand: dict[str, Any]) -> CorpusStore | CandidateTexts:
    """The corpus store the candidates were retrieved from (refused when another), or for imported candidates
    their own texts (:func:`imported_corpus`)."""
    if cand.get("index") is None:
        return imported_corpus(cfg, cand)
    index_dir = Path(cfg.index or cand["index"]["path"])
    store = _index_store(index_dir)
    if store.fingerprint != cand["index"]["corpus_content_sha256"]:
        raise StaleArtifactError(
            f"the candidates in {cfg.candidates} were retrieved from another corpus than the one of index "
            f"{index_dir} (corpus fingerprints {cand['index']['corpus_content_sha256'][:12]}... vs "
            f"{store.fingerprint[:12]}...)")
    return store


def _index_store(index_dir: Path) -> CorpusStore:
    if not (index_dir / "corpus" / "corpus.json").exists():
        raise InputError(f"index folder {index_dir} (needed for corpus ids) not found; pass --index",
                         field="index")
    return CorpusStore(index_dir / "corpus")


class CandidateTexts:
    """The texts imported candidates carry, as a corpus store: one row per distinct id (``5`` and ``"5"`` are one),
    in first-seen order; with ``base`` (``--index``) the rows are that corpus's own."""

    def __init__(self, ids: list[CorpusId], texts: list[str], base: CorpusStore | None = None,
                 positions: list[int] | None = None) -> None:
        self._ids, self._texts, self.base = ids, texts, base
        rows = positions if base is not None and positions is not None else range(len(ids))
        self._pos = {str(cid): int(row) for cid, row in zip(ids, rows, strict=True)}
        self.fingerprint = base.fingerprint if base is not None else sha256_text(json.dumps(
            [[str(cid), text] for cid, text in zip(ids, texts, strict=True)], ensure_ascii=False))

    def __len__(self) -> int:
        return len(self.base) if self.base is not None else len(self._ids)

    def position(self, cid: CorpusId) -> int:
        """The row of a candidate's id (a KeyError for an id no candidate carries)."""
        return self._pos[str(cid)]

    def text(self, pos: int) -> str:
        return self.base.text(pos) if self.base is not None else self._texts[int(pos)]

    def texts(self, positions: Iterable[int]) -> list[str]:
        if self.base is not None:
            return self.base.texts(positions)
        return [self._texts[int(p)] for p in positions]

    def external_ids(self, positions: Sequence[int]) -> list[CorpusId]:
        if self.base is not None:
            return self.base.external_ids(positions)
        return [self._ids[int(p)] for p in positions]


def _base_position(store: CorpusStore, cid: CorpusId) -> int | None:
    """The row of ``cid`` in an index's corpus (a FiD file's ``"5"`` is a txt corpus's line 5), or None."""
    tries: list[CorpusId] = [cid]
    if isinstance(cid, str) and cid.isascii() and cid.isdigit() and len(cid) < 19:
        tries.append(int(cid))
    elif isinstance(cid, int):
        tries.append(str(cid))
    for key in tries:
        try:
            return store.position(key)
        except (KeyError, TypeError):
            continue
    return None


def imported_corpus(cfg: Any, cand: dict[str, Any]) -> CandidateTexts:
    """The evidence of candidates imported without an index, each id with the one text it carries; with
    ``cfg.index`` each id must be found there with that very text (else an InputError naming it)."""
    folder = Path(cfg.candidates)
    seen: dict[str, tuple[str, Path, int]] = {}  # str(id) -> (text, file, line) where first carried
    ids: list[CorpusId] = []
    for split in sorted(cand.get("counts") or {}):
        path = folder / f"{split}.jsonl"
        for line, rec in enumerate(read_records(path), start=1):
            for j, c in enumerate(rec.get("ctxs", [])):
                key, first = str(c["id"]), seen.get(str(c["id"]))
                if first is None:
                    seen[key] = (c["text"], path, line)
                    ids.append(c["id"])
                elif first[0] != c["text"]:
                    raise InputError(f"ctxs[{j}] (id {shorten(c['id'], 60)}) carries another text than at "
                                     f"{first[1]}:{first[2]}: an id names one evidence text", path=path, line=line,
                                     field="ctxs")
    texts = [seen[str(cid)][0] for cid in ids]
    if not cfg.index:
        return CandidateTexts(ids, texts)
    store = _index_store(Path(cfg.index))
    positions = []
    for cid, text in zip(ids, texts, strict=True):
        row = _base_position(store, cid)
        _, path, line = seen[str(cid)]
        if row is None or store.text(row) != text:
            what = "is not in" if row is None else "has another text in"
            raise InputError(f"evidence id {shorten(cid, 60)} {what} the corpus of index {cfg.index}: these imported "
                             "candidates were not retrieved from it (leave out --index to rerank them by their own "
                             "texts)", path=path, line=line, field="ctxs")
        positions.append(row)
    return CandidateTexts(ids, texts, store, positions)


def index_record(cfg: Any, cand: dict[str, Any], store: CorpusStore | CandidateTexts) -> dict[str, Any]:
    """The candidates' ``index`` record as the rerankers read it (imported: ``--index``'s, or their own texts')."""
    if cand.get("index") is not None:
        return cand["index"]
    if cfg.index:
        m = read_manifest(cfg.index, "index")
        return {"path": str(Path(cfg.index).resolve()), "build_key": m.get("build_key"),
                "retriever": m.get("retriever"), "encoder": m.get("encoder"), "pooler": m.get("pooler"),
                "corpus_content_sha256": store.fingerprint, "corpus_size": len(store)}
    return {"path": None, "evidence": "the candidates' own texts", "corpus_content_sha256": store.fingerprint,
            "corpus_size": len(store)}


def effective_candidates(cfg: Any, cand: dict[str, Any], store: CorpusStore | CandidateTexts,
               data: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The candidates manifest as the rerankers read it, with its :func:`index_record` and ``k``."""
    k = cand.get("k") or max((len(r["ctxs"]) for recs in data.values() for r in recs), default=0)
    return {**cand, "index": index_record(cfg, cand, store), "k": k}


def load_split(path: Path, task: TaskSpec, k: int) -> list[dict[str, Any]]:
    """A candidates split's records cut to their first ``k`` candidates (0: all); a query without any is refused."""
    records = []
    for line, rec in enumerate(read_records(path, labels=task.labels), start=1):
        if not rec.get("ctxs"):
            raise InputError("query has no candidates", path=path, line=line, field="ctxs")
        if k:
            rec["ctxs"] = rec["ctxs"][:k]
        records.append(rec)
    return records


@dataclass
class StageInputs:
    """What a second stage reads of a candidates folder, checked before anything is written (:meth:`read`)."""

    cfg: Any
    cand_dir: Path
    out: Path
    cand: dict[str, Any]  # the candidates manifest as the rerankers read it (:func:`effective_candidates`)
    task: TaskSpec
    store: CorpusStore | CandidateTexts
    data: dict[str, list[dict[str, Any]]]  # the requested splits' records (and train's: ``with_train``)
    splits: list[str]  # the requested splits the candidates hold

    @classmethod
    def read(cls, cfg: Any, with_train: bool = True) -> StageInputs:
        """Read and check a stage's inputs before anything is written: config, candidates manifest, task, corpus, the
        requested splits (cut to ``cfg.k``) and, ``with_train``, the train split."""
        check_config(cfg)
        if not cfg.candidates or not cfg.out:
            raise InputError("rerank needs --candidates and --out", field="candidates" if not cfg.candidates else "out")
        cand = CandidatesStage.open(cfg.candidates)
        # the index it reads corpus rows from: cfg.index, else the one the candidates record (imported: none)
        check_disjoint({"out": cfg.out}, {"index": cfg.index or (cand.get("index") or {}).get("path")})
        cand_dir = Path(cfg.candidates)
        task = task_from_manifest(cand, cand_dir / MANIFEST, cfg.task)
        store = open_corpus(cfg, cand)  # imported candidates (no index): their own texts
        if with_train and "train" not in cand["counts"]:
            raise InputError(f"{cand_dir} has no train split to draw demonstrations from", field="splits")
        splits = [s for s in cfg.splits if s in cand["counts"]]
        if not splits and not with_train:
            raise InputError(f"{cand_dir} holds none of the splits {cfg.splits}", field="splits")
        names = dict.fromkeys(["train", *splits] if with_train else splits)
        data = {s: load_split(cand_dir / f"{s}.jsonl", task, cfg.k) for s in names}
        return cls(cfg, cand_dir, Path(cfg.out), effective_candidates(cfg, cand, store, data), task, store, data,
                   splits)

    def inputs(self) -> dict[str, Any]:
        """The manifest's record of the candidates it read (with the first stage's index record)."""
        return {"candidates": input_record(self.cand_dir, self.out, index=self.cand["index"])}


__all__ = ["CandidateTexts", "CandidatesStage", "StageInputs", "effective_candidates", "imported_corpus",
           "index_record", "load_split", "open_corpus", "retrieve"]
