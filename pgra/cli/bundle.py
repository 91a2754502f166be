"""``pgra bundle EXPERIMENT --out DIR``: the small, shareable copy of an experiment's results (no weights, no stage
data), which ``pgra report`` reads alone or merged with other experiments and bundles."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import SEED_MAX, option
from .command import Command


@dataclass
class BundleOptions:
    experiment: str = option("", exists="dir", positional=True, metavar="EXPERIMENT",
                             help="experiment folder (pgra experiment --out)")
    out: str = option("", help="the bundle's folder (new, empty, or a bundle pgra wrote: replaced whole)")
    tasks: list[str] = option(default_factory=list, path_segment=True, help="only these tasks' cells (comma-separated folder names; "
                                                         "default all)")
    methods: list[str] = option(default_factory=list, path_segment=True, help="only these methods' cells (comma-separated; default all)")
    seeds: list[int] = option(default_factory=list, min=0, max=SEED_MAX, path_segment=True, help="only the cells at these seeds (comma-separated; "
                                                                "default all): one piece of a grid run in one folder")


def run(opts: BundleOptions) -> None:
    from pathlib import Path

    from ..core.errors import InputError
    from ..evaluation.bundle import CellFilter, write_bundle

    if not opts.experiment:
        raise InputError("no experiment folder given", field="experiment")
    if not opts.out:
        raise InputError("give the bundle's folder: --out DIR", field="out")
    only = CellFilter(tuple(opts.tasks), tuple(opts.methods), tuple(int(x) for x in opts.seeds))
    manifest = write_bundle(opts.experiment, opts.out, only)
    size = sum(f["size"] for f in manifest["files"].values())
    print(f"bundled {manifest['cells']} cells ({len(manifest['files'])} files, {size / 1e6:.2f} MB) into {opts.out}; "
          f"`pgra report {Path(opts.out)}` reports it, `pgra report A B --out DIR` merges it with others")
    if manifest.get("analyses_left_out"):
        print(f"the experiment's analyses were not bundled: {manifest['analyses_left_out']}")


COMMAND = Command("bundle", "a small, shareable copy of an experiment's results (cells, predictions, keys, "
                  "environment)", "pgra.cli.bundle:BundleOptions", run, from_yaml=False)
