"""Record the sizes of the local models `make prepare` and `make prepare-qwen` build, for docs/setup.md's figures
(scripts/doc_figures.py renders them from the record; issue 71).

    python scripts/record_model_sizes.py     # after make prepare and make prepare-qwen

Sizes and counts, not timings, the same on any machine for the same pinned packages: each folder under models/ (its
files' bytes, pgra.runtime.sizes.folder_bytes; its parameters, read from its safetensors headers,
pgra.runtime.sizes.model_parameters) and, for a model joined from wheels, the bytes of the wheels its
``.pgra-source.json`` names as ``make prepare-qwen`` downloaded them into .venv/wheels/qwen. Written to
docs/results/model_sizes.json, keyed by folder name with ``.`` written ``_`` (a figure's path splits on ``.``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = "docs/results/model_sizes.json"
WHEELS = ".venv/wheels/qwen"  # where the Makefile's prepare-qwen downloads the wheels


def model_record(folder: Path, root: Path = ROOT) -> dict[str, object]:
    """One model folder's bytes and parameters, and the bytes of the wheels it was joined from (where they are)."""
    from pgra.runtime.sizes import folder_bytes, model_parameters
    from pgra.storage.artifacts import read_json

    counts, _ = model_parameters(str(folder))
    if not counts:
        raise SystemExit(f"error: {folder}: no safetensors to count parameters in")
    out: dict[str, object] = {"folder": folder.relative_to(root).as_posix(), "bytes": folder_bytes(folder),
                              "parameters": counts["all"]}
    source = folder / ".pgra-source.json"
    parts = read_json(source).get("parts") if source.is_file() else None
    if parts:
        files = [root / WHEELS / p["wheel"] for p in parts]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise SystemExit(f"error: {WHEELS}: no {missing[0]} (run make prepare-qwen first)")
        out.update(wheels=len(files), wheels_bytes=sum(f.stat().st_size for f in files))
    return out


def record(root: Path = ROOT) -> dict[str, object]:
    folders = sorted(p for p in (root / "models").iterdir() if p.is_dir())
    return {"what": "the local models make prepare and make prepare-qwen build under models/ (docs/setup.md)",
            "how": "python scripts/record_model_sizes.py: each folder's files' bytes, its parameters from its "
                   "safetensors headers, and the bytes of the wheels a joined model came from; sizes, the same on "
                   "any machine for the same pinned packages",
            "models": {p.name.replace(".", "_"): model_record(p, root) for p in folders}}


def main() -> int:
    (ROOT / RECORD).write_text(json.dumps(record(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
