"""``pgra download-data``: LM-BFF's task files and Wiki1M (needs the internet; fails at once offline)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import option
from ..data.download import RESOURCES
from .command import Command


@dataclass
class DownloadOptions:
    what: list[str] = option(default_factory=lambda: ["lmbff", "wiki1m"], positional=True, choices=tuple(RESOURCES),
                             help="what to download")
    data_dir: str = option("data", help="where to put it")
    timeout: float = option(5.0, above=0, help="seconds to wait for a connection")


def run(opts: DownloadOptions) -> None:
    from ..data.download import download

    download(opts.what, opts.data_dir, timeout=opts.timeout)


COMMAND = Command("download-data", "download LM-BFF's task data and Wiki1M (needs the internet)",
                  f"{__name__}:DownloadOptions", run, from_yaml=False)
