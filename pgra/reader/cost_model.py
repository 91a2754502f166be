"""The reader's cost model: what a reader cell costs before it runs, from the bench fits.

:meth:`pgra.methods.reader_method.ReaderMethod.price` asks :func:`reader_cell_price`; the fits themselves (the
bench results, read once) are :class:`pgra.experiment.estimate.BenchFits`, passed in. On a GPU a cell is priced as
what its config runs (``fits.gpu_cell``); on a CPU by the step fit at its d, the share of its trained encoder
layers (storing the frozen layers' outputs of every input), its bf16 ratio and the measured fixed part of a cell
with its evaluated inputs (``fits.cpu_cells``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..cost import Priced


def evaluated_inputs(reader: dict[str, Any], splits: dict[str, int] | None) -> int | None:
    """The inputs a reader cell evaluates: its dev split (at most ``max_eval_examples``) at every ``eval_every`` steps
    up to ``max_steps``, then the whole dev and test split once (None: the splits are unknown). An upper bound: early
    stopping ends a cell sooner."""
    if splits is None or splits.get("dev") is None:
        return None
    steps, eval_every = int(reader.get("max_steps", 0)), int(reader.get("eval_every", 0) or 0)
    evaluations = steps // eval_every if eval_every else 0
    cap = int(reader.get("max_eval_examples", 0) or 0)
    dev = min(splits["dev"], cap) if cap else splits["dev"]
    test = splits.get(str(reader.get("test_split", "test")) or "", 0) or 0
    return evaluations * dev + splits["dev"] + test


def encoder_layers(model: str) -> int | None:
    """The encoder layers of a reader folder's ``config.json`` (T5 ``num_layers``, an encoder-decoder's
    ``encoder.num_hidden_layers``); None for a hub name or an unreadable config."""
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
    """The encoder layers a reader's settings train: ``train_top_layers``, 0 with ``freeze_encoder``, else None
    (every weight)."""
    if reader.get("train_top_layers") is not None:
        return int(reader["train_top_layers"])
    return 0 if reader.get("freeze_encoder") else None


def reader_cell_price(fits: Any, reader: dict[str, Any], inputs: int | None, splits: dict[str, int] | None,
                      disk: dict[str, Any] | None = None) -> Priced | None:
    """A reader cell (its settings' ``reader`` block, as ``cell.json`` holds it) priced from ``fits``
    (:class:`~pgra.experiment.estimate.BenchFits`): on a GPU the whole cell as its settings run it, with ``splits``
    (inputs per split) and ``disk`` (the cosmetic ``keep_checkpoints`` / ``keep_resume_state``, which no settings
    hold); on a CPU its steps over ``inputs`` training inputs plus the fixed part of a cell. None: no fit applies."""
    if fits.gpu_steps:
        cost = fits.gpu_cell({**reader, **(disk or {})}, splits)
        if cost is not None:
            return Priced(cost.seconds, cost.source, fits.device, cost.device_s, cost.written_bytes, cost.kept_bytes,
                          cost.parts.get("steps", 0.0))
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


__all__ = ["encoder_layers", "evaluated_inputs", "reader_cell_price", "trained_layers"]
