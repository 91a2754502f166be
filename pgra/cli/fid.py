"""``pgra fid import|export``: FiD's and the PGRA paper's JSON files in, a data folder ``pgra train`` reads out;
and a data folder's splits out as such files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import option
from ..tasks import task_names
from .command import Command

IMPORT_KIND = "candidates"  # `pgra train`, `evaluate` and `icl` read it like `pgra retrieve`'s folder (no index)
EXPORT_KIND = "fid-export"
SPLITS = ("train", "dev", "test")


@dataclass
class FidOptions:
    action: str = option("import", positional=True, choices=("import", "export"),
                         help="import: FiD JSON files -> a data folder; export: a data folder -> FiD JSON files")
    task: str = option("", suggest=task_names, help="import: the task the examples belong to (its labels "
                       "and label words read the answers)")
    train: str = option("", exists="file", help="import: the training split, a FiD JSON array")
    dev: str = option("", exists="file", help="import: the dev split")
    test: str = option("", exists="file", help="import: the test split")
    data: str = option("", exists="dir", help="export: a candidates, reranked or task-data folder")
    out: str = option("", help="import: the data folder to write; export: the folder for <split>.json")


def _words(task: Any) -> dict[str, str]:
    """word -> label from the task's reader and demonstration words."""
    return {**{w: lab for lab, w in task.demo_words.items()}, **{w: lab for lab, w in task.reader_words.items()}}


def import_fid(opts: FidOptions) -> Path:
    """Write ``out/{split}.jsonl`` and a candidates manifest (no index) from FiD JSON files."""
    from ..core.config import to_dict
    from ..core.errors import InputError
    from ..data.interchange import read_fid, write_records
    from ..storage.artifacts import check_disjoint, claim_output, file_record, sha256_file, write_manifest
    from ..storage.ownership import claimed
    from ..tasks import get_task

    if not opts.task:
        raise InputError("`pgra fid import` needs --task NAME (or a task YAML)", field="task")
    if not opts.out:
        raise InputError("`pgra fid import` needs --out DIR", field="out")
    files = {s: getattr(opts, s) for s in SPLITS if getattr(opts, s)}
    for split in ("train", "dev"):
        if split not in files:
            raise InputError(f"`pgra fid import` needs --{split} FILE (pgra train reads train and dev)", field=split)
    check_disjoint({"out": opts.out}, {s: f for s, f in files.items()})
    task = get_task(opts.task)
    # all checked before writing; every split labelled, as the task loaders require: `pgra train` learns from
    # train and scores dev and its test_split (an item without an answer is named, not a KeyError after training)
    splits = {s: read_fid(f, task.labels, _words(task), require_labels=True) for s, f in files.items()}
    out = Path(opts.out)
    claim_output(out, IMPORT_KIND)
    with claimed(out, IMPORT_KIND):
        (out / "manifest.json").unlink(missing_ok=True)
        counts = {s: write_records(out / f"{s}.jsonl", recs) for s, recs in splits.items()}
        write_manifest(out, {
            "kind": IMPORT_KIND, "task": to_dict(task), "counts": counts, "index": None,
            "imported": {s: {"file": str(Path(f).resolve()), "sha256": sha256_file(f), "format": "fid"}
                         for s, f in files.items()},
            "files": {f"{s}.jsonl": file_record(out / f"{s}.jsonl") for s in splits}})
    print(f"imported {task.name} to {out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return out


def export_fid(opts: FidOptions) -> Path:
    """Write every ``<split>.jsonl`` of a data folder as ``out/<split>.json`` (labels as the reader's words)."""
    from ..core.errors import InputError
    from ..data.interchange import read_records, write_fid
    from ..storage.artifacts import check_disjoint, claim_output, read_manifest, write_manifest
    from ..storage.ownership import claimed
    from ..tasks import task_from_manifest

    if not opts.data or not opts.out:
        raise InputError("`pgra fid export` needs --data DIR and --out DIR", field="data" if not opts.data else "out")
    data, out = Path(opts.data), Path(opts.out)
    check_disjoint({"out": out}, {"data": data})
    manifest = read_manifest(data, ("candidates", "reranked", "task-data"))
    task = task_from_manifest(manifest, data / "manifest.json")
    splits = {split: list(read_records(data / f"{split}.jsonl", task.labels))  # all checked before writing
              for split in sorted(p.stem for p in data.glob("*.jsonl"))}
    claim_output(out, EXPORT_KIND)  # an index, a reranked folder, a cell ... keeps its manifest: refused
    counts = {}
    with claimed(out, EXPORT_KIND):  # a folder pgra made for another kind, or a user's files: refused
        for split, records in splits.items():
            counts[split] = write_fid(out / f"{split}.json", records, task.reader_words)
        write_manifest(out, {"kind": EXPORT_KIND, "task": task.name, "data": str(data.resolve()), "counts": counts})
    print(f"exported {data} to {out} (FiD JSON): " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return out


def run(opts: FidOptions) -> None:
    (import_fid if opts.action == "import" else export_fid)(opts)


COMMAND = Command("fid", "FiD / PGRA-code JSON files: `fid import` to a data folder, `fid export` from one",
                  f"{__name__}:FidOptions", run, from_yaml=False, writes="out")
