"""``pgra icl``: in-context learning on a task folder, and loading a finished run back to predict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import check_config, from_dict, result_settings, to_dict
from ..core.errors import InputError, StaleArtifactError
from ..core.registry import plug_in_key
from ..data.interchange import read_records, write_records
from ..lm.loading import remote_code_allowed
from ..results.predictions import Predictor
from ..selection.base import STRATEGIES, settings_key, with_index_encoder
from ..storage.artifacts import (
    MANIFEST,
    check_disjoint,
    read_json_object,
    read_manifest,
    sha256_file,
    write_json,
    write_manifest,
)
from ..storage.lock import locks_output
from ..storage.provenance import data_fields, run_data
from ..tasks import Example, TaskSpec, task_from_manifest
from .classify import ICLClassifier
from .config import ICLConfig

KIND = "icl"


def _data_manifest(data: Path) -> dict[str, Any]:
    if not (data / MANIFEST).exists():
        raise InputError(f"{data} has no {MANIFEST}: pass a folder written by `pgra retrieve` (or rerank)",
                         field="data")
    return read_json_object(data / MANIFEST)


def _classifier(cfg: ICLConfig, task: TaskSpec, data: Path, manifest: dict[str, Any]) -> ICLClassifier:
    train_file = data / "train.jsonl"
    if not train_file.exists():
        raise InputError(f"{data} has no train split to draw demonstrations from", path=train_file)
    train = [Example(str(r["id"]), r["text"], r.get("label")) for r in read_records(train_file, labels=task.labels)]
    if cfg.pool and cfg.pool < len(train):  # a fixed sample, in file order
        keep = np.sort(np.random.default_rng(cfg.pool_seed).choice(len(train), cfg.pool, replace=False))
        train = [train[i] for i in keep]
    index = manifest.get("index") or manifest.get("candidates", {}).get("index")
    return ICLClassifier(cfg, task, train, with_index_encoder(cfg.demos, index))


@locks_output(kind=KIND)
def run_icl(cfg: ICLConfig) -> dict[str, dict[str, Any]]:
    """Select demonstrations, predict every split in ``cfg.splits`` into ``cfg.out``; returns metrics per split."""
    from ..results.predictions import score_lines

    check_config(cfg)
    if not cfg.data or not cfg.out:
        raise InputError("icl needs --data and --out", field="data" if not cfg.data else "out")
    data, out = Path(cfg.data), Path(cfg.out)
    manifest = _data_manifest(data)
    index = manifest.get("index") or manifest.get("candidates", {}).get("index")
    check_disjoint({"out": cfg.out}, {"index": index.get("path") if isinstance(index, dict) else None})
    task = task_from_manifest(manifest, data / MANIFEST)
    missing = [s for s in cfg.splits if not (data / f"{s}.jsonl").exists()]
    if missing:
        raise InputError(f"{data} has no {missing[0]} split", field="splits")
    clf = _classifier(cfg, task, data, manifest)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    records = {split: list(read_records(data / f"{split}.jsonl", labels=task.labels)) for split in cfg.splits}
    clf.prepare([r for split in cfg.splits for r in records[split]])
    results = {}
    for split in cfg.splits:
        path = out / f"predictions_{split}.jsonl"
        write_records(path, clf.predict(records[split]))
        results[split] = score_lines(task, path)
    write_json(out / "metrics.json", {"task": task.name, "metric": task.metric, "results": results})
    write_manifest(out, {"kind": KIND, "task": to_dict(task), "config": to_dict(replace(cfg, demos=clf.selector.settings)),
                         "selection": clf.selector.describe(), **data_fields(data, out),
                         "train_sha256": sha256_file(data / "train.jsonl"), "cost": clf.cost(), "results": results})
    return results


class ICLPredictor(Predictor):
    """A finished ``icl`` run: the same LM, strategy and training set, ready to predict new records."""

    def __init__(self, run: Path, device: str | None = None, trust_remote_code: bool = False) -> None:
        self.run = Path(run)
        m = read_manifest(self.run, KIND)
        self.task = task_from_manifest(m, self.run / MANIFEST)
        cfg = from_dict(ICLConfig, m["config"], source=str(self.run / MANIFEST))
        # the LM runs its own code only when the caller allows it, never because the run's manifest says so
        cfg = replace(cfg, trust_remote_code=remote_code_allowed(cfg.lm, trust_remote_code, cfg.trust_remote_code,
                                                                 "run's LM", self.run / MANIFEST))
        if device:
            cfg = replace(cfg, device=device)
        self.data = run_data(self.run, m)
        train = self.data / "train.jsonl"
        if not train.exists() or sha256_file(train) != m["train_sha256"]:
            raise StaleArtifactError(f"the training split {train} the run {self.run} selected demonstrations from "
                                     "is missing or changed")
        self.classifier = _classifier(cfg, self.task, self.data, _data_manifest(self.data))
        self.texts = {ex.id: ex.text for ex in self.classifier.selector.train}

    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.classifier.predict(records)

    def default_data(self) -> Path | None:
        return self.data

    def evidence_of(self, record: dict[str, Any], line: dict[str, Any]) -> list[dict[str, Any]]:
        """The demonstrations, in prompt order (no score)."""
        return [{"id": i, "text": self.texts[str(i)], "score": None} for i in line["evidence"]]

    def cost(self) -> dict[str, Any] | None:
        return self.classifier.cost()


def icl_settings(cfg: ICLConfig) -> dict[str, Any]:
    """The settings that define an ICL run's predictions (no paths, seeds or progress bars)."""
    settings = result_settings(cfg, without=("data", "out", "seed", "splits"))
    settings["demos"] = settings_key(cfg.demos)
    return {**settings, **plug_in_key(STRATEGIES.part(cfg.selection), "selection_plug_in")}
