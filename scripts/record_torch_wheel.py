"""Record the size of the CPU torch wheel `make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs, for
the README's and docs/setup.md's figure (scripts/doc_figures.py renders it from the record; issue 71).

    python scripts/record_torch_wheel.py PATH/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl

A size, not a timing: the wheel file's bytes and SHA-256, read from the file given (the one the index serves for
the pin in the Makefile), written to docs/results/torch_cpu_wheel.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = "docs/results/torch_cpu_wheel.json"


def pinned_torch(root: Path = ROOT) -> str:
    """The torch version the Makefile's set-up installs (``torch==X``)."""
    found = re.search(r"install torch==([0-9][^ \n]*)", (root / "Makefile").read_text(encoding="utf-8"))
    if found is None:
        raise SystemExit("error: Makefile: no `install torch==VERSION` line")
    return found[1]


def record(wheel: Path, root: Path = ROOT) -> dict[str, object]:
    """The record of ``wheel``: its name, bytes and SHA-256, and how they were read."""
    pin = pinned_torch(root)
    if not wheel.is_file():
        raise SystemExit(f"error: {wheel}: no such file")
    if not wheel.name.startswith(f"torch-{pin}+cpu-"):
        raise SystemExit(f"error: {wheel.name}: not the CPU wheel of the Makefile's torch=={pin}")
    from pgra.storage.artifacts import sha256_file

    return {"what": f"the CPU build of torch=={pin} (the Makefile's pin), the wheel `make setup "
                    "TORCH_INDEX=https://download.pytorch.org/whl/cpu` downloads for the Python and platform its "
                    "name gives",
            "how": "python scripts/record_torch_wheel.py WHEEL: the given file's bytes (os.stat) and SHA-256; a "
                   "size, the same on any machine",
            "file": wheel.name, "bytes": wheel.stat().st_size, "sha256": sha256_file(wheel)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path, help="the CPU torch wheel file")
    args = ap.parse_args(argv)
    (ROOT / RECORD).write_text(json.dumps(record(args.wheel), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
