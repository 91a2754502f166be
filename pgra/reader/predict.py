"""Predictions of a trained FiD reader: a label and a probability per label for every input.

``scoring`` (default) takes the label word of highest summed log-likelihood (always a valid label; softmax
probabilities); ``generate`` decodes like the paper's code (None where no label word comes out)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..core import choices
from ..core.errors import InputError
from ..results.metrics import compute_metric
from ..runtime.cost import meter
from ..storage.artifacts import MANIFEST, read_json, read_manifest
from ..tasks import TaskSpec, get_task, task_from_manifest
from .data import ReaderFormatter
from .encoded import EncodedInputs
from .fid import FID_CONFIG, FiDReader, load_tokenizer

PREDICT_MODES = ("scoring", "generate")


@dataclass
class Predictions:
    """Per input, in input order: the predicted label (None: generation named no label) and label probabilities."""

    labels: list[str | None]
    probabilities: list[dict[str, float] | None]


def predict_records(reader: FiDReader, fmt: ReaderFormatter, records: list[dict[str, Any]], batch_size: int,
                    mode: str = "scoring", autocast: Callable[[], Any] | None = None,
                    encoded: EncodedInputs | None = None) -> Predictions:
    """Predict ``records`` with ``reader`` batch by batch (``encoded``: their stored encoder states, scoring mode)."""
    if encoded is not None and (mode != "scoring" or len(encoded) != len(records)):
        raise ValueError("precomputed encoder outputs need scoring mode and one entry per record")
    if mode not in PREDICT_MODES:
        raise InputError(f"unknown predict_mode '{mode}' ({', '.join(PREDICT_MODES)})", field="predict_mode")
    device = next(reader.parameters()).device
    out = Predictions([], [])
    reader.eval()
    targets, target_mask = fmt.target_tensor.to(device), fmt.target_mask.to(device)
    for start in range(0, len(records), batch_size):
        end = min(start + batch_size, len(records))
        with autocast() if autocast is not None else contextlib.nullcontext():
            if encoded is not None:  # the stored states of the frozen layers; the top layers run here, if any
                states, mask = encoded.passages(range(start, end), device)
                with torch.no_grad():
                    enc, fused_mask = reader.encode_stored(states, mask)
                scores = reader.score_encoded(enc.last_hidden_state, fused_mask, targets, target_mask)
            else:
                batch = fmt.collate(records[start:end])
                ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
                if mode == "scoring":
                    scores = reader.score_targets(ids, mask, targets, target_mask)
            name = getattr(reader, "name_or_path", "reader")
            if encoded is None:
                meter.add(name, int(mask.sum()), "encoder")
            if mode == "scoring":
                meter.add(name, (end - start) * int(target_mask.sum()), "decoder")
                probs = torch.softmax(scores.float(), dim=-1).cpu()
                out.labels += [fmt.task.labels[i] for i in probs.argmax(-1).tolist()]
                out.probabilities += [dict(zip(fmt.task.labels, row, strict=True)) for row in probs.tolist()]
            else:
                generated = reader.generate(ids, mask, max_new_tokens=max(len(t) for t in fmt.targets))
                meter.add(name, generated.numel(), "decoder")
                out.labels += [fmt.word_of(t) for t in fmt.tok.batch_decode(generated, skip_special_tokens=False)]
                out.probabilities += [None] * ids.shape[0]
    return out


def score_predictions(task: TaskSpec, records: list[dict[str, Any]], labels: list[str | None]) -> float:
    """The task's metric of ``labels`` against the records' gold labels (no-label outputs count as wrong)."""
    gold = [str(r["label"]) for r in records]
    return compute_metric(task.metric, gold, [p if p is not None else "<invalid>" for p in labels], task.labels)


def prediction_lines(records: list[dict[str, Any]], preds: Predictions, n_passages: int) -> list[dict[str, Any]]:
    """``predictions_<split>.jsonl`` lines in the methods' schema (id, text, label, prediction, scores, evidence);
    with ``demo_labels`` when the records carry the reranker's demonstrations and the reader read evidence."""
    from ..results.predictions import prediction_line

    lines = []
    for rec, label, probs in zip(records, preds.labels, preds.probabilities, strict=True):
        line = prediction_line(rec, label, probs, [c["id"] for c in rec.get("ctxs", [])[:n_passages]])
        if n_passages and "demonstrations" in rec:
            line["demo_labels"] = [d["label"] for d in rec["demonstrations"]]
        lines.append(line)
    return lines


def _run_task(run: Path, best: Path, fid_config: dict[str, Any], manifest: dict[str, Any] | None) -> TaskSpec:
    if manifest is not None:  # a finished run records its task in full
        return task_from_manifest(manifest, run / MANIFEST)
    if "task_spec" in fid_config:
        from ..core.config import from_dict

        return from_dict(TaskSpec, fid_config["task_spec"], source=str(best / FID_CONFIG))
    return get_task(fid_config["task"])


class Reader:
    """A trained FiD reader with its tokenizer, task and input settings, ready to predict.

        reader = pgra.Reader.load("runs/wiki_topic/demo/reader")   # the run folder (or its best/)
        records = [{"id": "q1", "text": "The planet orbits the sun", "ctxs": [{"id": 7, "text": "..."}]}]
        print(reader.predict(records)[0])   # {"id": "q1", "prediction": "physics", "scores": {...}}
    """

    def __init__(self, model: FiDReader, formatter: ReaderFormatter, predict_mode: str = "scoring",
                 directory: Path | None = None) -> None:
        self.model, self.formatter, self.predict_mode, self.directory = model, formatter, predict_mode, directory

    @property
    def task(self) -> TaskSpec:
        return self.formatter.task

    @classmethod
    def load(cls, run_dir: str | Path, device: str | None = None, predict_mode: str = "scoring",
             dtype: str | None = None) -> Reader:
        """Load ``run_dir/best`` (or ``run_dir`` itself when it is a checkpoint folder with ``fid_config.json``).

        ``dtype``: the precision it predicts in (``fp32``, ``bf16``, ``bf16-if-native``, ``auto``); None = the
        run's own ``eval_dtype`` (what its recorded dev and test predictions used; fp32 when it recorded none)."""
        from ..runtime.device import resolve_device, resolve_dtype

        run = Path(run_dir)
        best = run / "best" if (run / "best" / FID_CONFIG).exists() else run
        if not (best / FID_CONFIG).exists():
            raise InputError(f"no {FID_CONFIG} in {run} or {run / 'best'}: not a trained `pgra train` run",
                             path=run)
        fid_config = read_json(best / FID_CONFIG)
        manifest = read_manifest(run, "reader") if run != best and (run / MANIFEST).exists() else None
        task = _run_task(run, best, fid_config, manifest)
        if dtype is None:  # the run's own precision (a hand-edited value is refused below, naming the manifest)
            dtype = (manifest or {}).get("config", {}).get("eval_dtype", "fp32")
            source = {"path": run / MANIFEST, "field": "config.eval_dtype"} if manifest else {"field": "dtype"}
        else:
            source = {"field": "dtype"}
        if dtype not in choices.DTYPES:
            raise InputError(f"unknown precision {dtype!r}; use one of {', '.join(choices.DTYPES)}", **source)
        target = resolve_device(device)
        model = FiDReader.from_pretrained(str(best), dtype=torch.float32).to(target, resolve_dtype(dtype, target))
        fmt = ReaderFormatter(task, load_tokenizer(str(best)), fid_config["n_passages"],
                              fid_config["max_length"], fid_config["input_format"])
        return cls(model, fmt, predict_mode, best)

    def predict(self, records: list[dict[str, Any]], batch_size: int = 16) -> list[dict[str, Any]]:
        """Per record ``{"id", "prediction", "scores"}`` (scores: probability per label; None in generate mode)."""
        preds = predict_records(self.model, self.formatter, records, batch_size, self.predict_mode)
        return [{"id": r.get("id"), "prediction": label, "scores": probs}
                for r, label, probs in zip(records, preds.labels, preds.probabilities, strict=True)]
