"""``python -m pgra.experiment.child grid|cell SPEC``: the entry point of the processes a grid starts (a local
worker, or a cell-parallel rank's cell).

A module of its own because ``pgra.experiment`` imports :mod:`.launch`: run with ``-m``, a module its package has
already imported is executed a second time, and runpy says so in a RuntimeWarning in every cell's output.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core.errors import PgraError
from .claims import WORKER_ENV
from .launch import run_cell_process, run_worker


def main(argv: list[str] | None = None) -> int:
    """Run a worker (``grid SPEC``) or one cell (``cell SPEC``); 2 with one error line for bad arguments, a spec it
    cannot read or a :class:`PgraError`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("grid", "cell"):
        print("usage: python -m pgra.experiment.child grid|cell SPEC", file=sys.stderr)
        return 2
    what, spec_file = args
    try:
        spec = json.loads(Path(spec_file).read_text())
    except (OSError, ValueError) as e:  # the spec a grid writes for its children: missing or not JSON
        print(f"error: cannot read the spec {spec_file}: {e}", file=sys.stderr)
        return 2
    try:
        if what == "cell":
            return run_cell_process(spec)
        return run_worker(spec, os.environ.get(WORKER_ENV, "local"))
    except PgraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
