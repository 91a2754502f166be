"""A toy method: every input gets the most frequent training label, or with its option ``rank`` the rank-th most
frequent (a plug-in with options, one file)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgra.core.config import option
from pgra.data.interchange import read_records
from pgra.methods import FitResult, Method
from pgra.results.predictions import Predictor, prediction_line
from pgra.storage.artifacts import read_json, write_json


class MajorityPredictor(Predictor):
    def __init__(self, out: Path) -> None:
        self.label = read_json(out / "majority.json")["label"]

    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [prediction_line(r, self.label, {self.label: 1.0}, []) for r in records]


@dataclass
class MajorityOptions:
    """The toy method's options (its section ``toy_majority:`` of an experiment config)."""

    rank: int = option(1, min=1, help="predict the rank-th most frequent training label")


class Majority(Method):
    name = "toy_majority"
    trained = False
    options = MajorityOptions

    def settings(self) -> dict[str, Any]:
        return {"rank": self.own_options().rank}

    def depends_on_seed(self) -> bool:
        return False

    def fit(self, out: Path, seed: int) -> FitResult:
        labels = [r["label"] for r in read_records(self.data_dir / "train.jsonl", labels=self.inputs.task.labels)]
        out.mkdir(parents=True, exist_ok=True)
        ranked = Counter(labels).most_common()
        write_json(out / "majority.json", {"label": ranked[min(self.own_options().rank, len(ranked)) - 1][0]})
        return FitResult()

    @classmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        return MajorityPredictor(out)
