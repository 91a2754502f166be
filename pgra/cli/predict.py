"""``pgra predict --run RUN --text ...``: retrieve, rerank and read raw texts with a finished run."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..core.config import MAX_BATCH, MAX_ITEMS, option
from .command import Command, read_texts


@dataclass
class PredictOptions:
    run: str = option("", exists="dir", help="a finished run (pgra train --out, or an experiment cell), or a folder "
                      "pgra export wrote")
    text: list[str] = option(default_factory=list, append=True, help="input text (repeatable)")
    input_file: str = option("", exists="file", help="file with one input a line")
    json: bool = option(False, help="JSON lines: text, prediction, scores, evidence")
    evidence: int = option(3, min=0, max=MAX_ITEMS, help="evidence sentences shown per input (text output)")
    batch_size: int = option(64, min=1, max=MAX_BATCH, help="inputs per batch")
    device: str = option("auto", help="auto, cpu, cuda ...")
    trust_remote_code: bool = option(False, help="let the run's encoder and LMs run their own code (its manifests "
                                                 "never can)")
    index: str = option("", help="an exported run's index on this machine, when the export holds no copy (refused "
                        "when its corpus differs)")
    encoder: str = option("", help="the index's query encoder on this machine (a folder or hub id), when the run's "
                          "or export's is not here (refused when its files differ from the one the index was built "
                          "with)")
    lm: str = option("", help="an exported run's reranking LM on this machine, when the export holds no copy "
                     "(refused when its files differ)")


def run(opts: PredictOptions) -> None:
    from ..core.errors import InputError
    from ..core.verbosity import verbose_output
    from ..serving.pipeline import Pipeline

    if not opts.run:
        raise InputError("no run given (--run)", field="run")
    texts = read_texts(opts.text, opts.input_file, "input", "--text", "--input-file")
    pipeline = Pipeline.load(opts.run, device=opts.device, trust_remote_code=opts.trust_remote_code,
                             index=opts.index or None, lm=opts.lm or None, encoder=opts.encoder or None,
                             verbose=verbose_output())  # pgra -v predict: everything
    results = pipeline.predict(texts, batch_size=opts.batch_size)
    words = pipeline.task.demo_words  # what a label means ("1" -> "positive"), when it is not the label itself
    for r in results:
        if opts.json:
            print(json.dumps(r, ensure_ascii=False))
            continue
        p = r["scores"].get(r["prediction"]) if r["scores"] and r["prediction"] is not None else None
        label = r["prediction"]
        named = f"{label} ({words[label]})" if label in words and words[label] != label else f"{label}"
        print(named + (f" p={p:.3f}" if p is not None else "") + f"  {r['text']}")
        for e in r["evidence"][: opts.evidence]:
            score = f"{e['score']:.4f}" if isinstance(e["score"], float) else "-"
            print(f"    [{e['id']}] {score}  {e['text']}")


COMMAND = Command("predict", "label raw texts with a finished run (retrieve -> rerank -> read)",
                  "pgra.cli.predict:PredictOptions", run, from_yaml=False)
