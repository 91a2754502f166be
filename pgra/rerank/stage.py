"""The generic reranking stage: any registered :class:`~pgra.rerank.base.Reranker` but the prompt-guided one (whose
stage keeps its demonstrations and caches, :mod:`pgra.rerank.reranker`).

Reads a candidates folder, cuts each query's candidates to the first k, lets the reranker score them split by
split, and writes ``<split>.jsonl`` (each query's top d, best first, with ``score``, ``retrieval_score`` and
``retrieval_rank``) and a ``reranked`` manifest: the reranker's name and options, its LM cost (``cost``), the
candidates it read. Readers, ``pgra evaluate`` and the analyses read it like a prompt-guided folder. Under several
processes rank 0 does the work (the other ranks wait).

Every second stage (this one, the prompt-guided reranker's in :mod:`pgra.rerank.reranker`, the full search's in
:mod:`pgra.rerank.full_search`) runs through one :class:`StageInputs`: its inputs read and checked before anything
is written, its folder opened, its splits written, and its manifest's shared blocks (the task, the candidates'
record, the config, the files' checksums) written last around the body's own fields.

A killed generic stage resumes split by split: each finished split is recorded in ``.splits_done.json`` (its file's record,
count and LM cost, under the stage's key: the reranker's settings and the candidates' fingerprint); a rerun with
the same key keeps a recorded split whose file is unchanged and scores only the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..artifacts import (
    MANIFEST,
    check_disjoint,
    file_record,
    read_json,
    read_manifest,
    sha256_text,
    write_json,
    write_manifest,
)
from ..causal_lm import LMCost
from ..config import check_config, to_dict
from ..corpus import CorpusId, CorpusStore
from ..errors import InputError, StaleArtifactError, shorten
from ..interchange import read_records, write_records
from ..provenance import folder_fingerprint, relative_path
from ..tasks import TaskSpec, task_from_manifest
from .base import DEFAULT

RERANKED_KIND = "reranked"
FULL_SEARCH_KIND = "full_search"  # pgra_full's folder (pgra.rerank.full_search), a reranked folder's twin
SPLITS_DONE = ".splits_done.json"


def index_path(cfg: Any, cand: dict[str, Any]) -> str | None:
    """The index folder a stage reads corpus rows from: ``cfg.index``, else the one the candidates record (None:
    candidates imported without one, ``pgra fid import``)."""
    return cfg.index or (cand.get("index") or {}).get("path")


def open_corpus(cfg: Any, cand: dict[str, Any]) -> CorpusStore | CandidateTexts:
    """The corpus store of the index the candidates were retrieved from (``cfg.index`` or the recorded one),
    refused when it is another corpus; for candidates imported without an index, their own texts
    (:func:`imported_corpus`)."""
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
    """The evidence imported candidates carry (``pgra fid import``: no first-stage index) as a corpus store: one
    row per distinct candidate id (``5`` and ``"5"`` are one id, as everywhere in pgra), in the order the
    folder's splits first name them, with the text it carries. ``base`` (a :class:`CorpusStore`): the rows are
    that corpus's own (``--index``), each id found there with the text the candidates carry."""

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
    """The evidence of candidates imported without an index: every split's candidates, each id with the one text
    it carries (an id carrying two texts is an InputError naming both places). With ``cfg.index``: that index's
    corpus rows, each candidate's id found there with the very text it carries (else an InputError naming it)."""
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
    """The candidates' ``index`` record as the rerankers read it: the first stage's; for imported candidates the
    record of ``--index`` (as ``pgra retrieve`` writes it), or without one a record of their own texts (no
    ``path``)."""
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
    """The candidates manifest as the rerankers read it: its :func:`index_record` and its ``k`` (imported
    candidates record none: their longest list)."""
    k = cand.get("k") or max((len(r["ctxs"]) for recs in data.values() for r in recs), default=0)
    return {**cand, "index": index_record(cfg, cand, store), "k": k}


def load_split(path: Path, task: TaskSpec, k: int) -> list[dict[str, Any]]:
    """A candidates split's records, each cut to its first ``k`` candidates (0: all); a query without candidates
    is an InputError naming its line."""
    records = []
    for line, rec in enumerate(read_records(path, labels=task.labels), start=1):
        if not rec.get("ctxs"):
            raise InputError("query has no candidates", path=path, line=line, field="ctxs")
        if k:
            rec["ctxs"] = rec["ctxs"][:k]
        records.append(rec)
    return records


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


def candidates_record(cand_dir: Path, out: Path, cand: dict[str, Any]) -> dict[str, Any]:
    """The ``candidates`` block of a second-stage folder's manifest (``out``, built from ``cand_dir`` whose manifest
    as the rerankers read it is ``cand``): where they are, absolute and relative to ``out``, their fingerprint and
    the first stage's index record (what replays and the provenance checks read)."""
    return {"path": str(cand_dir.resolve()), "relative": relative_path(cand_dir, out),
            "fingerprint": folder_fingerprint(cand_dir), "index": cand["index"]}


@dataclass
class StageInputs:
    """One second-stage folder's run over a candidates folder (the one runner every second stage's body shares:
    the prompt-guided reranker's, the generic stage's, the full search's): what it reads, checked before anything
    is written (:meth:`read`), and its output folder, opened (:meth:`begin`), written split by split
    (:meth:`write_split`) and finished by its manifest, last (:meth:`finish`: the blocks every second-stage manifest
    holds, the candidates' record, the config and the files' checksums, around the body's own fields)."""

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
        """Read and check a stage's inputs: its config, the candidates' manifest, the task, the corpus (refused
        when another than the candidates were retrieved from, and the output folder disjoint from the index), the
        records of the requested splits (each cut to the first ``cfg.k`` candidates; every input checked before
        anything runs) and, ``with_train``, the train split (what demonstrations are drawn from: required)."""
        from ..retrieval.retrieve import read_candidates_manifest

        check_config(cfg)
        if not cfg.candidates or not cfg.out:
            raise InputError("rerank needs --candidates and --out", field="candidates" if not cfg.candidates else "out")
        cand = read_candidates_manifest(cfg.candidates)
        check_disjoint({"out": cfg.out}, {"index": index_path(cfg, cand)})  # recorded with the candidates
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

    def begin(self) -> None:
        """Open the output folder: made, and its manifest removed (unfinished until :meth:`finish` writes one)."""
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / MANIFEST).unlink(missing_ok=True)

    def write_split(self, split: str, records: Iterable[dict[str, Any]]) -> int:
        """Write ``<split>.jsonl`` (atomically); returns its record count."""
        return write_records(self.out / f"{split}.jsonl", records)

    def finish(self, kind: str, fields: dict[str, Any], files: Sequence[str] = (),
               after: dict[str, Any] | None = None, config: Any = None) -> Path:
        """Write the manifest, last: ``kind``, the task, the body's ``fields``, the candidates' record, the config
        (``config``, default the one the inputs were read with) and the checksums of the split files and
        ``files``, then ``after``; returns the folder."""
        write_manifest(self.out, {
            "kind": kind, "task": to_dict(self.task), **fields,
            "candidates": candidates_record(self.cand_dir, self.out, self.cand),
            "config": to_dict(self.cfg if config is None else config),
            "files": {n: file_record(self.out / n) for n in [f"{s}.jsonl" for s in self.splits] + list(files)},
            **(after or {}),
        })
        return self.out


def run_stage(cls: type, cfg: Any, ctx: Any = None) -> Path:
    """Rerank every requested split of ``cfg.candidates`` with the reranker class ``cls`` into ``cfg.out``."""
    from ..distributed import init_distributed

    run = StageInputs.read(cfg, with_train=False)
    ctx = ctx or init_distributed()
    if not ctx.is_main:
        return run.out
    reranker = cls(cfg, run.task, run.store, run.cand)
    reranker.load()
    run.begin()
    out = run.out
    key = _stage_key(cls.key_settings(cfg), folder_fingerprint(run.cand_dir))
    done = _splits_done(out, key)
    counts, short, cost = {}, 0, LMCost()
    for split in run.splits:
        path = out / f"{split}.jsonl"
        kept = _kept(done["splits"].get(split), path)
        if kept is not None:  # finished before a kill: kept
            counts[split], short, cost = kept["count"], short + kept["short"], cost + LMCost.from_dict(kept["cost"])
            continue
        recs, before = run.data[split], reranker.cost()
        top = reranker.rerank([r["text"] for r in recs], [r["ctxs"] for r in recs])
        counts[split] = run.write_split(split, [{**{k: v for k, v in r.items() if k != "ctxs"}, "ctxs": c}
                                                for r, c in zip(recs, top, strict=True)])
        spent = reranker.cost()
        spent = LMCost(spent.calls - before.calls, spent.tokens - before.tokens)
        done["splits"][split] = {"file": file_record(path), "count": counts[split], "cost": spent.as_dict(),
                                 "short": sum(len(r["ctxs"]) < cfg.top_d for r in recs)}
        short, cost = short + done["splits"][split]["short"], cost + spent
        write_json(out / SPLITS_DONE, done)
    return run.finish(RERANKED_KIND, {
        "reranker": cls.name, "reranker_settings": cls.key_settings(cfg), **reranker.describe(),
        "k": cfg.k or run.cand["k"], "top_d": cfg.top_d, "counts": counts, "queries_with_fewer_than_d": short,
        "cost": cost.as_dict()})


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


def _stage_key(settings: dict[str, Any], candidates: str) -> str:
    """What a killed run's finished splits are kept under: the reranker's settings and its candidates' fingerprint."""
    return sha256_text(json.dumps({"settings": settings, "candidates": candidates}, sort_keys=True,
                                  default=str))[:20]


def _splits_done(out: Path, key: str) -> dict[str, Any]:
    """The splits a killed run of this stage (the same ``key``) finished, or none."""
    path = out / SPLITS_DONE
    try:
        done = read_json(path) if path.is_file() else {}
    except (OSError, ValueError):
        done = {}
    if not isinstance(done, dict) or done.get("key") != key or not isinstance(done.get("splits"), dict):
        return {"key": key, "splits": {}}
    return done


def _kept(record: Any, path: Path) -> dict[str, Any] | None:
    """A split's record in ``.splits_done.json`` when it is whole and its file is the one it recorded (a record
    edited by hand into anything else counts as no record: the split is scored again)."""
    try:
        if path.is_file() and file_record(path) == record["file"]:
            return {"count": int(record["count"]), "short": int(record["short"]), "cost": dict(record["cost"])}
    except (KeyError, TypeError, ValueError):
        pass
    return None


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


__all__ = ["FULL_SEARCH_KIND", "RERANKED_KIND", "CandidateTexts", "candidates_record", "model_of", "Replay", "effective_candidates", "imported_corpus", "index_path", "train_queries",
           "index_record", "load_split", "open_corpus", "reranked_cost", "reranker_of", "run_stage", "StageInputs", "summary"]
