"""``knn_vote``: the majority label of the k nearest labelled training inputs (the paper's k-NN baseline).

Neighbours come from the experiment's first-stage retriever (the same encoder and pooler, or BM25) over the
task's training inputs; an input never votes for itself (identical text; ids are not compared, since
datasets number each split from 0). Ties go to the tied
label whose nearest voter ranks first. ``scores`` are the vote shares.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.config import MAX_ITEMS, option, to_dict
from ..core.errors import InputError
from ..data.interchange import read_records, write_records
from ..data.itself import without_itself
from ..results.predictions import Predictor, prediction_line
from ..storage.artifacts import read_json, read_manifest, write_json, write_manifest
from ..storage.provenance import data_fields, recorded_folder, relative_path, run_data
from ..tasks import TaskSpec, task_from_manifest
from .base import FitResult, Method

KIND = "knn_vote"


@dataclass
class KnnVoteConfig:
    """The ``knn_vote`` section of an experiment config."""

    k: int = option(16, min=1, max=MAX_ITEMS, help="labelled training inputs that vote")


def vote(task: TaskSpec, neighbour_labels: list[str]) -> tuple[str, dict[str, float]]:
    """Majority label of ``neighbour_labels`` (nearest first; ties -> the nearest tied label) and vote shares."""
    if not neighbour_labels:
        raise ValueError("no neighbours to vote")
    counts = Counter(neighbour_labels)
    top = max(counts.values())
    winner = next(lab for lab in neighbour_labels if counts[lab] == top)
    return winner, {lab: counts.get(lab, 0) / len(neighbour_labels) for lab in task.labels}


class KnnVotePredictor(Predictor):
    """A fitted kNN vote: the training-input index and its labels."""

    def __init__(self, run: Path, device: str | None = None, trust_remote_code: bool = False) -> None:
        from ..retrieval.index import Index

        self.run = Path(run)
        manifest = read_manifest(self.run, KIND)
        self.task = task_from_manifest(manifest, self.run / "manifest.json")
        self.k = int(manifest["k"])
        self.labels: dict[str, str] = read_json(self.run / "train_labels.json")
        self.texts: dict[str, str] = read_json(self.run / "train_texts.json")
        self.index = Index(recorded_folder(self.run, manifest["train_index"], manifest.get("train_index_relative")), device=device, trust_remote_code=trust_remote_code)
        self._data = run_data(self.run, manifest)

    def neighbours(self, records: list[dict[str, Any]]) -> list[list[str]]:
        """The ids of the k nearest training inputs of each record, nearest first, never the record itself."""
        hits = self.index.search_hits([r["text"] for r in records], min(self.k + 1, len(self.labels)))
        out = []
        for rec, row in zip(records, hits, strict=True):
            out.append([str(h["id"]) for h in without_itself(rec["text"], row)][: self.k])
        return out

    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines = []
        for rec, ids in zip(records, self.neighbours(records), strict=True):
            voters = [self.labels[i] for i in ids]
            label, shares = vote(self.task, voters) if ids else (None, None)
            lines.append({**prediction_line(rec, label, shares, ids), "demo_labels": voters})
        return lines

    def default_data(self) -> Path | None:
        return self._data

    def evidence_of(self, record: dict[str, Any], line: dict[str, Any]) -> list[dict[str, Any]]:
        """The voting training inputs, nearest first (no reranker score)."""
        return [{"id": i, "text": self.texts[str(i)], "score": None} for i in line["evidence"]]


class KnnVote(Method):
    name = KIND
    options = KnnVoteConfig
    data = "candidates"
    trained = False
    evidence = "training"  # the voting neighbours

    def settings(self) -> dict[str, Any]:
        from ..retrieval.base import get_retriever

        s = self.inputs.settings
        return {"k": s.knn_vote.k, "retriever": s.index.retriever,
                "index": get_retriever(s.index).search_settings()}

    def depends_on_seed(self) -> bool:
        return False  # nearest neighbours of a deterministic index, ties to the nearest: nothing is drawn

    def fit(self, out: Path, seed: int) -> FitResult:
        from ..retrieval.build import build_index

        k = self.own_options().k
        if k < 1:
            raise InputError("k must be at least 1", field="knn_vote.k")
        train = list(read_records(self.data_dir / "train.jsonl", labels=self.inputs.task.labels))
        labelled = [r for r in train if r.get("label") is not None]
        if len(labelled) < 2:
            raise InputError(f"{len(labelled)} labelled training inputs; a kNN vote needs at least 2",
                             path=self.data_dir / "train.jsonl")
        # the index of training inputs depends on the task's data and the retriever, not on the seed: shared
        shared = out.parent / "train-index"
        corpus = shared / "train_inputs.jsonl"
        write_records(corpus, [{"id": str(r["id"]), "text": r["text"]} for r in labelled])
        index_cfg = replace(self.inputs.settings.index, corpus=str(corpus), corpus_format="jsonl", text_field="text",
                            id_field="id", out=str(shared / "index"), overwrite=False,
                            show_progress=self.inputs.settings.show_progress)
        build_index(index_cfg)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "train_labels.json", {str(r["id"]): str(r["label"]) for r in labelled})
        write_json(out / "train_texts.json", {str(r["id"]): r["text"] for r in labelled})
        write_manifest(out, {"kind": KIND, "task": to_dict(self.inputs.task), "k": k,
                             "train_index": str((shared / "index").resolve()),
                             "train_index_relative": relative_path(shared / "index", out), "train_inputs": len(labelled),
                             **data_fields(self.data_dir, out), "seed": seed})
        return FitResult(train_inputs=len(labelled))

    @classmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        return KnnVotePredictor(out, device=device, trust_remote_code=trust_remote_code)
