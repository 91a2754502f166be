"""``pgra evaluate --run RUN``: re-evaluate a finished run on a split of its own or another data folder."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import MAX_BATCH, option
from .command import Command


@dataclass
class EvaluateOptions:
    run: str = option("", exists="dir", io="base", help="a finished run (pgra train --out, or an experiment cell)")
    split: str = option("test", path_segment=True, help="split to evaluate")
    data: str = option("", exists="dir", help="a candidates or reranked folder of the same task (default: the run's own)")
    out: str = option("", help="where predictions and metrics go (default: RUN/evaluations/<data>-<hash>)")
    batch_size: int = option(16, min=1, max=MAX_BATCH, help="inputs per batch")
    device: str = option("auto", help="auto, cpu, cuda ...")
    trust_remote_code: bool = option(False, help="let the run's encoder or LM run its own code (its manifest never "
                                                 "can)")


def run(opts: EvaluateOptions) -> None:
    from ..evaluation.evaluate import evaluate_run

    result = evaluate_run(opts.run, opts.split, opts.data or None, opts.out or None, opts.batch_size, opts.device,
                          trust_remote_code=opts.trust_remote_code)
    metric = result["metric"]
    print(f"{result['split']}: {metric} {result[metric]:.4f} ({result['examples']} examples"
          + (f", {result['invalid_predictions']} invalid" if result["invalid_predictions"] else "") + ")")
    print(f"written: {result['predictions']}")


COMMAND = Command("evaluate", "re-evaluate a finished run on a split or another data folder of its task",
                  "pgra.cli.evaluate:EvaluateOptions", run, from_yaml=False)
