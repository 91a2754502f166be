"""``pgra download-data``: fetch LM-BFF's task files and Wiki1M (offline: fails at once, saying what goes where)."""

from __future__ import annotations

import os
import shutil
import socket
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from ..core.errors import PgraError
from ..core.progress import progress
from ..storage.artifacts import atomic_path


@dataclass(frozen=True)
class Resource:
    name: str
    url: str
    target: str  # relative to the data dir
    what: str


RESOURCES = {
    "lmbff": Resource("lmbff", "https://nlp.cs.princeton.edu/projects/lm-bff/datasets.tar", "original",
                      "LM-BFF's datasets.tar (its original/ folder holds SST-2, sst-5, CoLA, trec, cr, mr, mpqa, subj)"),
    "wiki1m": Resource("wiki1m", "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"
                       "wiki1m_for_simcse.txt", "wiki1m_for_simcse.txt",
                       "SimCSE's wiki1m_for_simcse.txt (1,000,000 Wikipedia sentences, one a line)"),
}


def _manual_instructions(res: Resource, data_dir: Path) -> str:
    if res.name == "lmbff":
        return (f"download {res.url}, extract it, and move the folders of its 'original' folder into "
                f"{data_dir / 'original'} (so that {data_dir / 'original' / 'SST-2' / 'train.tsv'} exists; its mr/ "
                f"replaces the MR that `pgra prepare-demo` rebuilds from PyPI packages)")
    return f"download {res.url} to {data_dir / res.target}"


def _online(url: str, timeout: float) -> bool:
    if os.environ.get("PGRA_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    host = urlparse(url).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def download(names: list[str], data_dir: str | Path = "data", timeout: float = 5.0) -> list[Path]:
    """Download the named resources into ``data_dir`` (skipping ones already there)."""
    data_dir = Path(data_dir)
    unknown = [n for n in names if n not in RESOURCES]
    if unknown:
        raise PgraError(f"unknown resource(s) {unknown}; choose from {list(RESOURCES)}")
    done = []
    for name in names:
        res = RESOURCES[name]
        target = data_dir / res.target
        # LM-BFF's folder counts as present once SST-2 is there: `pgra prepare-demo` may have put MR alone in it
        if (target / "SST-2" if res.name == "lmbff" else target).exists():
            print(f"{res.name}: already present at {target}")
            done.append(target)
            continue
        if not _online(res.url, timeout):
            raise PgraError(f"cannot reach {urlparse(res.url).hostname} (offline?). To get {res.what} by hand: "
                            + _manual_instructions(res, data_dir))
        data_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(data_dir / (Path(urlparse(res.url).path).name + ".part")) as tmp:
            _fetch(res.url, tmp, timeout)
            if res.name == "lmbff":
                _extract_original(tmp, data_dir)
            else:
                shutil.move(tmp, target)
                tmp.touch()
        done.append(target)
        print(f"{res.name}: saved to {target}")
    return done


def _fetch(url: str, dest: Path, timeout: float) -> None:
    with urllib.request.urlopen(url, timeout=timeout) as r, open(dest, "wb") as f:
        total = int(r.headers.get("Content-Length") or 0) or None
        with progress(total=total, unit="B", unit_scale=True, desc=Path(urlparse(url).path).name) as bar:
            while chunk := r.read(1 << 20):
                f.write(chunk)
                bar.update(len(chunk))


def _extract_original(tar_path: Path, data_dir: Path) -> None:
    staging = data_dir / ".lmbff-extract"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(tar_path) as tar:
        tar.extractall(staging, filter="data")
    found = next((p for p in staging.rglob("original") if p.is_dir()), None)
    if found is None:
        raise PgraError(f"{tar_path}: no 'original' folder in LM-BFF's archive")
    dest = data_dir / "original"
    if not dest.exists():
        found.rename(dest)
    else:  # holds prepare-demo's MR (or a partial copy): LM-BFF's own folders replace theirs
        for child in sorted(found.iterdir()):
            there = dest / child.name
            if there.is_dir():
                shutil.rmtree(there)
            elif there.exists():
                there.unlink()
            child.rename(there)
    shutil.rmtree(staging, ignore_errors=True)
