"""The reader's cost model: what a reader cell costs and holds on disk before it runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime.cost import Priced
from ..runtime.sizes import WEIGHT_FILES, count_text, format_bytes, model_parameters


def evaluated_inputs(reader: dict[str, Any], splits: dict[str, int] | None) -> int | None:
    """The inputs a reader cell evaluates at most (dev every ``eval_every`` steps, then dev and test); None: unknown."""
    if splits is None or splits.get("dev") is None:
        return None
    steps, eval_every = int(reader.get("max_steps", 0)), int(reader.get("eval_every", 0) or 0)
    evaluations = steps // eval_every if eval_every else 0
    cap = int(reader.get("max_eval_examples", 0) or 0)
    dev = min(splits["dev"], cap) if cap else splits["dev"]
    test = splits.get(str(reader.get("test_split", "test")) or "", 0) or 0
    return evaluations * dev + splits["dev"] + test


def encoder_layers(model: str) -> int | None:
    """The encoder layers of a reader folder's ``config.json``; None for a hub name or an unreadable config."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    layers = config.get("num_layers") or (config.get("encoder") or {}).get("num_hidden_layers") \
        or config.get("num_hidden_layers")
    return int(layers) if isinstance(layers, int) and layers > 0 else None


def trained_layers(reader: dict[str, Any]) -> int | None:
    """The encoder layers a reader trains: ``train_top_layers``, 0 with ``freeze_encoder``, else None (all)."""
    if reader.get("train_top_layers") is not None:
        return int(reader["train_top_layers"])
    return 0 if reader.get("freeze_encoder") else None


def reader_cell_price(fits: Any, reader: dict[str, Any], inputs: int | None, splits: dict[str, int] | None,
                      disk: dict[str, Any] | None = None) -> Priced | None:
    """A reader cell priced from ``fits`` (GPU: the whole cell; CPU: its steps plus a fixed part); None: no fit."""
    if fits.gpu_steps:
        cost = fits.gpu_cell({**reader, **(disk or {})}, splits)
        if cost is not None:
            return cost
    passages, layers = int(reader.get("n_passages", 0)), trained_layers(reader)
    total = encoder_layers(str(reader.get("model", ""))) if layers is not None else None
    precision = str(reader.get("mixed_precision", "no"))
    seconds = fits.reader_seconds(int(reader.get("max_steps", 0)), passages,
                                  int(reader.get("batch_size", fits.reader_batch)), layers, total, inputs, precision)
    if seconds is None:
        return None
    share = fits.top_layer_share(layers, passages, total)
    # what DDP ranks would split: the steps, not storing the frozen layers' outputs (every rank stores its all)
    store = fits.store_seconds(layers, passages, total) if share is not None else None
    steps = seconds - (store or 0.0) * (inputs or 0) * fits.thread_factor(1)
    source = fits.reader_source if share is None else (
        f"{fits.reader_source}, x {share:.2f} for {layers} of {total} encoder layers trained, plus storing "
        "the frozen layers' outputs of every input (bench reader_top_layers.json)")
    ratio = fits.bf16_ratio(precision, layers, passages, total)
    if ratio is not None:
        source += f", x {ratio:.2f} for bf16 autocast (bench reader_top_layers_bf16.json)"
    fixed = fits.cpu_price("reader", evaluated_inputs(reader, splits))
    if fixed is not None:
        seconds = max(seconds + fixed.seconds, 0.0)
        source += f"; plus {fixed.source}"
    return Priced(seconds, source, fits.device, split_s=min(steps, seconds))

WEIGHT_BYTES = 4  # best/ and the checkpoints hold fp32 weights (the master weights, whatever mixed_precision)
ADAMW_MOMENTS = 2  # a checkpoint adds AdamW's two fp32 moments of every trained weight
LOG_LINE_BYTES = 70  # a step's line of a reader's train_log.jsonl


@dataclass
class ReaderDisk:
    """What one reader cell writes, from its model's parameters: ``best/`` and a resumable checkpoint."""

    parameters: int
    trained: int
    other_bytes: int
    source: str

    @property
    def best_bytes(self) -> float:
        return self.parameters * WEIGHT_BYTES + self.other_bytes

    @property
    def checkpoint_bytes(self) -> float:
        return (self.parameters + ADAMW_MOMENTS * self.trained) * WEIGHT_BYTES


# weights a frozen encoder's reader does not train besides the encoder's: the word embeddings and the output
# projection over the vocabulary (FiDReader.freeze_encoder), by their names in T5 and bert2bert checkpoints
FROZEN_WITH_THE_ENCODER = ("shared.", "embed_tokens.", "word_embeddings.", "lm_head.", "cls.predictions.decoder.",
                           "cls.predictions.bias")


def reader_disk(reader: Any) -> ReaderDisk | None:
    """:class:`ReaderDisk` of a reader config (optimizer state for the trained weights only); None: unknown."""
    from ..runtime.cost import tensor_sizes

    model = str(reader.model)
    counts, source = model_parameters(model)
    if not counts:
        return None
    total = int(counts["all"])
    layers = trained_layers({"train_top_layers": reader.train_top_layers, "freeze_encoder": reader.freeze_encoder})
    trained = total
    sizes = tensor_sizes(model) if layers is not None else None
    if sizes:
        encoder = sum(n for k, n in sizes.items() if k.startswith("encoder."))
        frozen = encoder + sum(n for k, n in sizes.items() if not k.startswith("encoder.")
                               and any(f".{part}" in f".{k}" for part in FROZEN_WITH_THE_ENCODER))
        of = encoder_layers(model)
        trained = max(total - frozen + (encoder * min(layers, of) // of if of else 0), 0)
    folder = Path(model)
    other = 0
    if folder.is_dir():
        other = sum(p.stat().st_size for p in folder.iterdir()
                    if p.is_file() and not p.name.endswith(WEIGHT_FILES))
    return ReaderDisk(total, trained, other, source)


@dataclass
class CellDisk:
    """What one trained cell keeps (``kept``) and adds at its peak (``peak``), or why it cannot be sized."""

    kind: str
    evidence: int
    kept: float = 0.0
    peak: float = 0.0
    text: str = ""
    kept_text: str = ""
    peak_text: str = ""
    unknown: str = ""


def cell_disk(reader: Any, evidence: int) -> CellDisk:
    """A reader cell's :class:`CellDisk`: what it keeps and its peak while training."""
    disk = reader_disk(reader)
    if disk is None:
        return CellDisk("reader cells", evidence, unknown=model_parameters(str(reader.model))[1])
    keep, ckpt = int(reader.keep_checkpoints), disk.checkpoint_bytes
    kept = keep * ckpt if reader.keep_resume_state else 0.0
    text = (f"best/ {format_bytes(disk.best_bytes)} = {count_text(disk.parameters)} parameters x 4 B "
            f"(fp32, {disk.source})" + (f" + tokenizer and configs {format_bytes(disk.other_bytes)}"
                                         if disk.other_bytes else ""))
    kept_text = (f"keeps {keep} resumable checkpoint(s) of {format_bytes(ckpt)} a cell (reader.keep_resume_state)"
                 if reader.keep_resume_state else
                 "its resumable checkpoints deleted once the cell is done (reader.keep_resume_state keeps them)")
    peak_text = (f"{keep + 1} resumable checkpoint(s) of {format_bytes(ckpt)}: the weights and AdamW's 2 moments of "
                 f"the {count_text(disk.trained)} trained, x 4 B; the next is written before the last is deleted"
                 + (", the kept ones counted above" if kept else ""))
    return CellDisk("reader cells", evidence, disk.best_bytes + kept + reader.max_steps * LOG_LINE_BYTES,
                    (keep + 1) * ckpt - kept, text, kept_text, peak_text)


def gpu_requests(reader: Any) -> list[str]:
    """What a reader config asks of a GPU (the plan then prices the GPU fits): CUDA graphs or fp16."""
    asks = {"reader.compile_mode=reduce-overhead (CUDA graphs)":
            reader.compile and reader.compile_mode == "reduce-overhead",
            "reader.mixed_precision=fp16": reader.mixed_precision == "fp16"}
    return [what for what, asked in asks.items() if asked]


def cosmetic(reader: Any) -> dict[str, Any]:
    """The reader settings a cell's disk follows that are in no key, so in no cell's settings."""
    return {"keep_checkpoints": reader.keep_checkpoints, "keep_resume_state": reader.keep_resume_state}



__all__ = ["CellDisk", "ReaderDisk", "cell_disk", "cosmetic", "encoder_layers", "gpu_requests", "reader_disk", "evaluated_inputs", "reader_cell_price", "trained_layers"]
