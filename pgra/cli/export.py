"""``pgra export --run RUN --out DIR``: a finished reader run as a self-contained folder ``Pipeline.load`` reads."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import option
from .command import Command


@dataclass
class ExportOptions:
    run: str = option("", exists="dir", io="in", help="a finished reader run (pgra train --out, or an experiment "
                      "cell such as runs/demo-experiment/mr/pgra/seed-1)")
    out: str = option("", help="the folder to write (weights, tokenizer, configs, demonstrations, model card)")
    copy_index: bool = option(False, help="copy the first-stage index into the folder (else a pointer with the "
                              "corpus fingerprint: Pipeline.load(DIR, index=PATH) elsewhere)")
    copy_lm: bool = option(False, help="copy the reranking LM's folder into the folder (else its recorded path "
                           "or hub id with its fingerprint: Pipeline.load(DIR, lm=PATH) elsewhere)")


def run(opts: ExportOptions) -> None:
    from ..errors import InputError
    from ..export import export_run

    if not opts.run or not opts.out:
        raise InputError("`pgra export` needs --run RUN and --out DIR", field="run" if not opts.run else "out")
    out = export_run(opts.run, opts.out, opts.copy_index, opts.copy_lm)
    print(f"exported {opts.run} to {out}: load it with pgra.Pipeline.load({str(out)!r}); model card: {out}/README.md")


COMMAND = Command("export", "a trained run as a self-contained folder Pipeline.load reads, with a model card",
                  f"{__name__}:ExportOptions", run, from_yaml=False, writes="out")
