"""``linear_probe``: a logistic regression on a frozen encoder's sentence embeddings (no retrieval, no LM).

The floor every results table needs: the training inputs are embedded once with the experiment's first-stage
encoder and pooler (the index's, by default), the features are standardised with the training set's mean and
standard deviation, and one scikit-learn ``LogisticRegression`` (L-BFGS, L2) is fitted per inverse regularisation
strength in ``c_grid``; the strength with the best dev score is kept (ties: the smaller one, the stronger
regularisation). A reader that cannot beat it is under-trained: the report marks it.

The fitted probe is stored as plain arrays (``probe.safetensors``: coef, intercept, mean, scale) and predicted
with numpy (sigmoid for two labels, softmax otherwise, as scikit-learn's ``predict_proba``); nothing is pickled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import option, to_dict
from ..core.errors import InputError
from ..data.interchange import read_records
from ..results.predictions import Predictor, prediction_line
from ..storage.artifacts import read_manifest, write_manifest
from ..storage.provenance import data_fields, run_data
from ..tasks import TaskSpec, task_from_manifest
from .base import FitResult, Method

KIND = "linear_probe"
WEIGHTS = "probe.safetensors"


@dataclass
class LinearProbeConfig:
    """The ``linear_probe`` section of an experiment config."""

    encoder: str = option("", help="HF encoder or folder; empty: the index's dense encoder")
    pooler: str = option("", help="cls, cls_before_pooler or mean; empty: the index's pooler")
    c_grid: list[float] = option(default_factory=lambda: [0.001, 0.01, 0.1, 1.0, 10.0],
                                 help="inverse regularisation strengths tried; the best on dev is kept")
    max_iter: int = option(2000, min=1, help="L-BFGS iterations per fit")


def probabilities(features: np.ndarray, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """Class probabilities ``(N, C)`` of a fitted logistic regression (scikit-learn's ``predict_proba``)."""
    z = features.astype(np.float64) @ coef.T.astype(np.float64) + intercept.astype(np.float64)
    if coef.shape[0] == 1:  # two classes: one weight vector for the second
        p1 = 1.0 / (1.0 + np.exp(-z[:, 0]))
        return np.stack([1.0 - p1, p1], axis=1)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class LinearProbePredictor(Predictor):
    """A fitted probe: the encoder settings, the standardisation and the regression's weights."""

    def __init__(self, run: Path, device: str | None = None) -> None:
        from safetensors.numpy import load_file

        self.run = Path(run)
        manifest = read_manifest(self.run, KIND)
        self.task = task_from_manifest(manifest, self.run / "manifest.json")
        self.encoder_settings = manifest["encoder"]
        self.classes: list[str] = manifest["classes"]
        self.arrays = load_file(str(self.run / WEIGHTS))
        self._data = run_data(self.run, manifest)
        self.device = device
        self._encoder = None

    def features(self, texts: list[str]) -> np.ndarray:
        """Standardised embeddings of ``texts``."""
        if self._encoder is None:
            self._encoder = make_encoder(self.encoder_settings, self.device)
        x = self._encoder.encode(texts)
        return (x - self.arrays["mean"]) / self.arrays["scale"]

    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        probs = probabilities(self.features([r["text"] for r in records]), self.arrays["coef"],
                              self.arrays["intercept"])
        lines = []
        for rec, row in zip(records, probs.tolist(), strict=True):
            scores = {lab: 0.0 for lab in self.task.labels}  # labels absent from training get 0
            scores.update(dict(zip(self.classes, row, strict=True)))
            lines.append(prediction_line(rec, max(self.task.labels, key=lambda lab: scores[lab]), scores, []))
        return lines

    def default_data(self) -> Path | None:
        return self._data


def make_encoder(settings: dict[str, Any], device: str | None = None):
    from ..retrieval.encoder import DenseEncoder

    return DenseEncoder(settings["encoder"], pooler=settings["pooler"], max_length=settings["max_length"],
                        batch_size=settings["batch_size"], device=device)


def fit_probe(task: TaskSpec, train_x: np.ndarray, train_y: list[str], dev_x: np.ndarray | None,
              dev_y: list[str] | None, c_grid: list[float], max_iter: int) -> dict[str, Any]:
    """Standardise, fit one regression per C, keep the best on dev (without dev: one fit, at the grid's median C)."""
    from sklearn.linear_model import LogisticRegression

    from ..results.metrics import compute_metric

    mean = train_x.mean(axis=0)
    scale = train_x.std(axis=0)
    scale[scale == 0] = 1.0
    xs = (train_x - mean) / scale
    best: dict[str, Any] | None = None
    scores: dict[str, float] = {}
    no_dev = dev_x is None or not dev_y
    grid = sorted(c_grid)
    for c in [grid[(len(grid) - 1) // 2]] if no_dev else grid:  # nothing to choose with: fit once
        model = LogisticRegression(C=c, max_iter=max_iter)
        model.fit(xs, train_y)
        if no_dev:
            best = {"c": c, "model": model}
            continue
        classes = [str(k) for k in model.classes_]
        probs = probabilities((dev_x - mean) / scale, model.coef_, model.intercept_)
        pred = [classes[i] for i in probs.argmax(axis=1)]
        scores[repr(c)] = compute_metric(task.metric, dev_y, pred, task.labels)
        if best is None or scores[repr(c)] > best["dev"]:
            best = {"c": c, "model": model, "dev": scores[repr(c)]}
    assert best is not None
    model = best["model"]
    return {"c": best["c"], "dev_scores": scores, "classes": [str(k) for k in model.classes_],
            "arrays": {"coef": model.coef_.astype(np.float64), "intercept": model.intercept_.astype(np.float64),
                       "mean": mean.astype(np.float32), "scale": scale.astype(np.float32)}}


class LinearProbe(Method):
    name = KIND
    options = LinearProbeConfig
    data = "candidates"
    trained = False  # no dev history: C is chosen on dev, but nothing trains in steps

    def depends_on_seed(self) -> bool:
        return False  # L-BFGS on fixed embeddings: the same probe whatever the seed

    def encoder_settings(self) -> dict[str, Any]:
        s = self.inputs.settings
        cfg, defaults = s.linear_probe, s.index.encoder_defaults()
        encoder = cfg.encoder or defaults.encoder
        if not encoder:
            raise InputError(f"linear_probe needs a dense encoder: the index's retriever ({s.index.retriever}) "
                             "has none, so set linear_probe.encoder", field="linear_probe.encoder")
        return {"encoder": encoder, "pooler": cfg.pooler or defaults.pooler, "max_length": defaults.max_length,
                "batch_size": defaults.batch_size}

    def settings(self) -> dict[str, Any]:
        cfg = self.own_options()
        return {"encoder": self.encoder_settings(), "c_grid": sorted(cfg.c_grid), "max_iter": cfg.max_iter}

    def fit(self, out: Path, seed: int) -> FitResult:
        from safetensors.numpy import save_file

        from ..storage.artifacts import atomic_path

        cfg, task = self.own_options(), self.inputs.task
        if not cfg.c_grid or any(not (c > 0 and np.isfinite(c)) for c in cfg.c_grid):
            raise InputError(f"c_grid must hold positive numbers, got {cfg.c_grid}", field="linear_probe.c_grid")
        splits = {}
        for split in ("train", "dev"):
            path = self.data_dir / f"{split}.jsonl"
            recs = list(read_records(path, labels=task.labels)) if path.exists() else []
            splits[split] = [r for r in recs if r.get("label") is not None]
        train = splits["train"]
        if len({str(r["label"]) for r in train}) < 2:
            raise InputError(f"{len(train)} labelled training inputs with fewer than 2 labels: nothing to fit",
                             path=self.data_dir / "train.jsonl")
        settings = self.encoder_settings()
        encoder = make_encoder(settings)
        dev = splits["dev"]
        probe = fit_probe(task, encoder.encode([r["text"] for r in train]), [str(r["label"]) for r in train],
                          encoder.encode([r["text"] for r in dev]) if dev else None,
                          [str(r["label"]) for r in dev] if dev else None, cfg.c_grid, cfg.max_iter)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / WEIGHTS) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in probe["arrays"].items()}, str(tmp))
        write_manifest(out, {"kind": KIND, "task": to_dict(task), "encoder": settings, "c": probe["c"],
                             "dev_scores": probe["dev_scores"], "classes": probe["classes"],
                             "train_inputs": len(train), **data_fields(self.data_dir, out), "seed": seed})
        return FitResult(train_inputs=len(train))

    @classmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        return LinearProbePredictor(out, device=device)  # its encoder never runs code of its own

