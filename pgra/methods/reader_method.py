"""What the three reader methods share: train a FiD reader on a task folder, predict with its best checkpoint."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.config import result_settings
from ..results.predictions import Predictor
from ..stages import ModelNeed, get_stage
from ..storage.artifacts import MANIFEST, iter_jsonl, read_json
from ..storage.provenance import run_data
from .base import FitResult, Method

if TYPE_CHECKING:
    from ..runtime.cost import Priced

# settings of a reader cell that do not change what it learns
_PER_CELL = ("data", "out", "seed")  # the cell gives these (its data folder, its folder, its seed)


class ReaderPredictor(Predictor):
    """A trained reader run (``pgra train``'s folder or an experiment cell) as a :class:`Predictor`."""

    def __init__(self, run: Path, device: str | None = None, batch_size: int = 16) -> None:
        from ..reader.predict import Reader

        self.run = Path(run)
        self.reader = Reader.load(self.run, device=device)
        self.task = self.reader.task
        self.batch_size = batch_size

    @property
    def n_passages(self) -> int:
        return self.reader.formatter.n_passages

    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from ..reader.predict import predict_records, prediction_lines

        r = self.reader
        preds = predict_records(r.model, r.formatter, records, self.batch_size, r.predict_mode)
        return prediction_lines(records, preds, self.n_passages)

    def default_data(self) -> Path | None:
        return run_data(self.run)


class ReaderMethod(Method):
    """A FiD reader trained on ``data`` with ``n_passages`` evidence sentences per input."""

    evidence = "corpus"

    def n_passages(self) -> int:
        return self.inputs.settings.reader.n_passages

    def train_config(self, out: Path, seed: int):
        s = self.inputs.settings
        return replace(s.reader, data=str(self.data_dir), out=str(out), seed=seed, n_passages=self.n_passages(),
                       task="", log_with=s.log_with, show_progress=s.show_progress)

    @classmethod
    def price(cls, fits: Any, settings: dict[str, Any], inputs: int | None, splits: dict[str, int] | None,
              disk: dict[str, Any] | None = None) -> Priced | None:
        """The reader's cost model (:func:`pgra.reader.cost_model.reader_cell_price`) at its settings' ``reader``."""
        from ..reader.cost_model import reader_cell_price

        reader = settings.get("reader")
        return reader_cell_price(fits, reader, inputs, splits, disk) if reader else None

    def cost_options(self) -> dict[str, Any] | None:
        from ..reader.cost_model import cosmetic

        return cosmetic(self.inputs.settings.reader)

    def models(self) -> list[ModelNeed]:
        return [ModelNeed("reader.model", str(self.inputs.settings.reader.model), "reader")]

    def planned_disk(self) -> Any:
        from ..reader.cost_model import cell_disk

        return cell_disk(self.inputs.settings.reader, self.n_passages())

    def settings(self) -> dict[str, Any]:
        reader = result_settings(self.inputs.settings.reader, without=_PER_CELL)
        # "data": the family of the stage it reads (the stage's own key, in the cell's upstream, names its reranker)
        return {"reader": {**reader, "n_passages": self.n_passages()}, "data": get_stage(self.data).family}

    def fit(self, out: Path, seed: int) -> FitResult:
        from ..reader.train import train
        from ..runtime.distributed import init_distributed

        cfg = self.train_config(out, seed)
        timing: dict[str, float] = {}
        train(cfg, keep_resume_state=True, timing=timing)  # until cell.json is written (finished): a killed cell resumes
        if not init_distributed().is_main:  # the main process wrote the metrics and predictions
            return FitResult()
        result = reader_fit_result(out, self.inputs.task.metric, ["dev", cfg.test_split])
        result.split_s = timing.get("loop_s")  # the training loop: what DDP ranks split
        if self.data != "candidates":  # the LM work behind the evidence: what the rerank (or search) stage ran
            from ..rerank.stage import reranked_cost

            result.cost = {**reranked_cost(read_json(self.data_dir / MANIFEST)).as_dict(), "shared_by_seeds": True}
        return result

    def finished(self, out: Path) -> None:
        """Delete the cell's resumable checkpoints unless ``reader.keep_resume_state``: ``best/``, the predictions,
        ``metrics.json`` and ``train_log.jsonl`` are what prediction, the report and the analyses read."""
        if not self.inputs.settings.reader.keep_resume_state:
            from ..runtime.training import drop_resume_state

            drop_resume_state(out)

    @classmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        return ReaderPredictor(out, device=device)  # a reader never runs code of its own


def reader_fit_result(out: Path, metric: str, splits: list[str]) -> FitResult:
    """Steps, best step and dev history of a finished reader run (``metrics.json`` + ``train_log.jsonl``)."""
    metrics = read_json(out / "metrics.json")
    history: dict[int, float] = {}
    steps = 0
    log = out / "train_log.jsonl"
    for _, rec in iter_jsonl(log) if log.exists() else ():  # a resumed run may repeat a step: the last line wins
        steps = max(steps, int(rec["step"]))
        if f"dev_{metric}" in rec:
            history[int(rec["step"])] = float(rec[f"dev_{metric}"])
    train = metrics.get("train_examples")
    return FitResult(steps=steps, best_step=int(metrics.get("best_step", 0)),
                     train_inputs=int(train) if isinstance(train, int) else None,
                     evaluations=[{"step": s, "dev": v} for s, v in sorted(history.items())],
                     predicted_splits=[s for s in splits if s in metrics.get("results", {})])
