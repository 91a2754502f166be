"""``pgra peek``: the first inputs of an interchange file (candidates or reranked) with their evidence."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.config import MAX_ITEMS, option
from .command import Command


@dataclass
class PeekOptions:
    path: str = option("", positional=True, help="a .jsonl file, or a candidates/reranked folder")
    split: str = option("test", path_segment=True, help="split file to read from a folder")
    inputs: int = option(2, short="-n", min=0, max=MAX_ITEMS, help="inputs to show")
    evidence: int = option(3, short="-d", min=0, max=MAX_ITEMS, help="evidence sentences per input")


def run(opts: PeekOptions) -> None:
    from ..core.errors import InputError
    from ..data.interchange import read_records

    if not opts.path:
        raise InputError("pass a .jsonl file or a candidates/reranked folder", field="path")
    path = Path(opts.path)
    if path.is_dir():
        path = path / f"{opts.split}.jsonl"
    for n, rec in enumerate(read_records(path)):
        if n == opts.inputs:
            break
        label = f"  [label {rec['label']}]" if "label" in rec else ""
        print(f"{rec['id']}: {rec['text']}{label}")
        for j, c in enumerate(rec.get("ctxs", [])[: opts.evidence], start=1):
            first = f" (first-stage rank {c['retrieval_rank']})" if "retrieval_rank" in c else ""
            print(f"  {j:>3}. [{c['id']}] {float(c.get('score', 0)):.4f}{first}  {c['text']}")
        print()


COMMAND = Command("peek", "print the first inputs of an interchange file with their evidence",
                  f"{__name__}:PeekOptions", run, from_yaml=False)
