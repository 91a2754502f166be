"""``pgra export --run RUN --out DIR [--push-to-hub REPO]``: a finished reader run as a self-contained folder
``Pipeline.load`` reads, optionally uploaded to the Hugging Face Hub."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import option
from .command import Command


@dataclass
class ExportOptions:
    run: str = option("", exists="dir", io="in", help="a finished reader run (pgra train --out, or an experiment "
                      "cell such as runs/demo-experiment/mr/pgra/seed-1)")
    out: str = option("", help="the folder to write (weights, tokenizer, configs, demonstrations, model card); "
                      "a re-run replaces its own export there, any other folder pgra wrote is refused")
    copy_index: bool = option(False, help="copy the first-stage index into the folder, and a dense index's encoder "
                              "folder (an encoder given as a hub id is recorded by it), and for a pgra_full run the "
                              "corpus pass's embeddings it searches (sentences x the LM's width x 4 bytes); else "
                              "pointers with the corpus fingerprint: Pipeline.load(DIR, index=PATH, encoder=PATH) "
                              "elsewhere")
    copy_lm: bool = option(False, help="copy the second stage's model folder into the folder (the reranking LM, a "
                           "cross-encoder's or UPR's model; else its recorded path or hub id with its fingerprint: "
                           "Pipeline.load(DIR, lm=PATH) elsewhere)")
    push_to_hub: str = option("", metavar="REPO", help="then upload the folder to this Hugging Face Hub model "
                              "repository (USER/NAME; created when missing) with the token of HF_TOKEN or "
                              "`hf auth login`")
    private: bool = option(False, help="with --push-to-hub: create the repository private")


def run(opts: ExportOptions) -> None:
    from ..core.errors import InputError
    from ..serving.export import export_run

    if not opts.run or not opts.out:
        raise InputError("`pgra export` needs --run RUN and --out DIR", field="run" if not opts.run else "out")
    if opts.private and not opts.push_to_hub:
        raise InputError("--private applies to --push-to-hub REPO only", field="private")
    api = None
    if opts.push_to_hub:
        from ..serving.hub import hub_client

        api = hub_client(opts.push_to_hub)  # the package and the token, before anything is written
    out = export_run(opts.run, opts.out, opts.copy_index, opts.copy_lm)
    print(f"exported {opts.run} to {out}: load it with pgra.Pipeline.load({str(out)!r}); model card: {out}/README.md")
    if api is not None:
        from ..serving.hub import push_to_hub

        url = push_to_hub(out, opts.push_to_hub, opts.private, api=api)
        print(f"uploaded {out} to {url}: load it anywhere with pgra.Pipeline.load({opts.push_to_hub!r})")


COMMAND = Command("export", "a trained run as a self-contained folder Pipeline.load reads, with a model card",
                  f"{__name__}:ExportOptions", run, from_yaml=False, writes="out")
