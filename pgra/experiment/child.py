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

from ..errors import PgraError
from .claims import WORKER_ENV
from .launch import run_cell_process, run_worker


def main(argv: list[str] | None = None) -> int:
    """Run a worker (``grid SPEC``) or one cell (``cell SPEC``); 2 with an error line for a bad spec."""
    what, spec_file = (sys.argv[1:] if argv is None else argv)[:2]
    try:
        if what == "cell":
            return run_cell_process(spec_file)
        return run_worker(json.loads(Path(spec_file).read_text()), os.environ.get(WORKER_ENV, "local"))
    except PgraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:  # the spec a grid writes for its children: missing or not JSON
        print(f"error: cannot read the spec {spec_file}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
