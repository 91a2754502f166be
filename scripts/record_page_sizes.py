"""Record the size of the ``results.html`` page (and of ``results_data.js`` beside it, past the page's inline limit)
that `pgra report` writes for committed bundles, for docs/experiments.md's figures (scripts/doc_figures.py renders
them from the record; issue 71).

    python scripts/record_page_sizes.py

Sizes, not timings: each page is written by pgra's own ``write_report`` (its default bootstrap) into a temporary
folder from the committed bundles its entry names, and its files' bytes are recorded, with the commit of the code
that wrote them, in docs/results/page_sizes.json. ``mr-seed1``: one laptop bundle (MR, seed 1) alone; ``laptop``:
every laptop bundle merged (scripts/laptop_table.py's, the grid of docs/experiments.md's laptop table).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = "docs/results/page_sizes.json"
ONE = "docs/results/laptop/mr-seed1"


def page_bytes(sources: list[Path], out: Path) -> dict[str, object]:
    """What ``write_report`` writes into ``out`` for ``sources`` (paths relative to the repository): the cells, and the
    bytes of the page and of its data script (0 where the data is inside the page)."""
    from pgra.evaluation.page import DATA_SCRIPT, PAGE
    from pgra.evaluation.report import write_report

    write_report(out, sources=sources)
    report = json.loads((out / "results.json").read_text(encoding="utf-8"))
    data = out / DATA_SCRIPT
    return {"bundles": [p.as_posix() for p in sources], "cells": len(report["cells"]),
            "html_bytes": (out / PAGE).stat().st_size, "data_bytes": data.stat().st_size if data.is_file() else 0}


def record(root: Path = ROOT) -> dict[str, object]:
    sys.path.insert(0, str(root / "scripts"))
    from laptop_table import bundles

    os.chdir(root)  # the bundles are named relative to the repository, as the merged report names them
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = "+dirty" if subprocess.run(["git", "-C", str(root), "status", "--porcelain", "pgra"],
                                       capture_output=True, text=True).stdout.strip() else ""
    with tempfile.TemporaryDirectory(prefix="pgra-page.") as tmp:
        pages = {"mr-seed1": page_bytes([Path(ONE)], Path(tmp) / "mr-seed1"),
                 "laptop": page_bytes(bundles(), Path(tmp) / "laptop")}
    return {"what": "the results.html page (and results_data.js) pgra report writes for committed bundles "
                    "(docs/experiments.md)",
            "how": "python scripts/record_page_sizes.py: pgra's write_report into a temporary folder, its files' "
                   "bytes; sizes, the same on any machine for the same code and bundles",
            "commit": commit + dirty, "pages": pages}


def main() -> int:
    result = record()
    (ROOT / RECORD).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
