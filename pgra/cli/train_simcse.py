"""``pgra train-simcse``: train an unsupervised SimCSE encoder on a corpus (accelerate)."""

from __future__ import annotations

from .command import Command


def run(cfg) -> None:
    from ..simcse.train import train_simcse

    metrics = train_simcse(cfg)
    if metrics:  # the main process
        for when in ("before", "after"):
            g = metrics[when]
            print(f"{when:>6} training: alignment {g['alignment']:.4f}, uniformity {g['uniformity']:.4f} "
                  f"({g['sentences']} held-out sentences, cls_before_pooler)")
        if "retrieval" in metrics:
            from ..simcse.quality import format_rows

            print(format_rows(metrics["retrieval"]["before"] + metrics["retrieval"]["after"]))
        print(f"encoder ready: {cfg.out} (index it with --encoder {cfg.out} --pooler cls_before_pooler)")


COMMAND = Command("train-simcse", "train an unsupervised SimCSE sentence encoder on a corpus (accelerate)",
                  "pgra.simcse.config:SimCSEConfig", run, writes="out")
