"""A toy method: every input gets the most frequent training label (a plug-in, one file)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pgra.artifacts import read_json, write_json
from pgra.interchange import read_records
from pgra.methods import FitResult, Method
from pgra.predictions import Predictor, prediction_line


class MajorityPredictor(Predictor):
    def __init__(self, out: Path) -> None:
        self.label = read_json(out / "majority.json")["label"]

    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [prediction_line(r, self.label, {self.label: 1.0}, []) for r in records]


class Majority(Method):
    name = "toy_majority"
    trained = False

    def settings(self) -> dict[str, Any]:
        return {}

    def depends_on_seed(self) -> bool:
        return False

    def fit(self, out: Path, seed: int) -> FitResult:
        labels = [r["label"] for r in read_records(self.data_dir / "train.jsonl", labels=self.inputs.task.labels)]
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "majority.json", {"label": Counter(labels).most_common(1)[0][0]})
        return FitResult()

    @classmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        return MajorityPredictor(out)
