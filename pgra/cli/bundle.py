"""``pgra bundle EXPERIMENT --out DIR``: the small, shareable copy of an experiment's results (no weights, no stage
data), which ``pgra report`` reads alone or merged with other experiments and bundles."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import option
from .command import Command


@dataclass
class BundleOptions:
    experiment: str = option("", exists="dir", positional=True, metavar="EXPERIMENT",
                             help="experiment folder (pgra experiment --out)")
    out: str = option("", help="the bundle's folder (new, empty, or a bundle pgra wrote: replaced whole)")


def run(opts: BundleOptions) -> None:
    from pathlib import Path

    from ..errors import InputError
    from ..evaluation.bundle import write_bundle

    if not opts.experiment:
        raise InputError("no experiment folder given", field="experiment")
    if not opts.out:
        raise InputError("give the bundle's folder: --out DIR", field="out")
    manifest = write_bundle(opts.experiment, opts.out)
    size = sum(f["size"] for f in manifest["files"].values())
    print(f"bundled {manifest['cells']} cells ({len(manifest['files'])} files, {size / 1e6:.2f} MB) into {opts.out}; "
          f"`pgra report {Path(opts.out)}` reports it, `pgra report A B --out DIR` merges it with others")


COMMAND = Command("bundle", "a small, shareable copy of an experiment's results (cells, predictions, keys, "
                  "environment)", "pgra.cli.bundle:BundleOptions", run, from_yaml=False)
