"""``pgra train``: stage 3, train and evaluate the Fusion-in-Decoder reader (accelerate)."""

from __future__ import annotations

from .command import Command


def run(cfg) -> None:
    from ..reader.train import train

    for split, r in train(cfg).items():
        extra = f", {r['invalid_predictions']} invalid" if r["invalid_predictions"] else ""
        print(f"{split}: " + ", ".join(f"{k} {v:.4f}" for k, v in r.items() if isinstance(v, float))
              + f" ({r['examples']} examples{extra})")


COMMAND = Command("train", "stage 3: train + evaluate the Fusion-in-Decoder reader (accelerate)",
                  "pgra.reader.config:TrainConfig", run, writes="out")
