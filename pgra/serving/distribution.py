"""pgra as the receiver of an export installs it: the wheel of the pgra that is running, built from its checkout,
and the versions of torch and transformers a run used, as the install lines of its model card (docs/getting-pgra.md
says where pgra comes from)."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.errors import PgraError
from ..storage.artifacts import library_versions, sha256_file

SOURCES = ("pyproject.toml", "README.md", "LICENSE", "pgra")  # what setuptools builds the wheel from
PINNED = ("torch", "transformers")
WHEEL_DIR = "wheel"  # the export's folder that holds the wheel
VERSION = re.compile(r"[0-9][0-9A-Za-z.]{0,40}(\+[0-9A-Za-z.]{1,40})?")  # a version safe in a shell line
RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*")  # a final release: PyPI (or PyTorch's index) serves it
TORCH_BUILD = re.compile(r"cpu|cu[0-9]{2,4}|rocm[0-9]+(\.[0-9]+)*|xpu")  # a build PyTorch's index has, /whl/<tag>
BUILD = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
PREDICT = 'pgra predict --run . --text "A text to classify."'  # the card's line after the install lines
_BUILT: dict[str, tuple[str, bytes]] = {}  # the sources' digest -> (file name, bytes): one build per process


class WheelError(PgraError):
    """The running pgra's wheel cannot be built (no checkout, or setuptools failed)."""


def checkout() -> Path | None:
    """The folder of pgra's source when pgra runs from a checkout, else None (installed from a wheel)."""
    root = Path(__file__).resolve().parents[2]  # pgra/<room>/<module>.py
    project = root / "pyproject.toml"
    if project.is_file() and re.search(r'(?m)^name\s*=\s*"pgra"', project.read_text(encoding="utf-8")):
        return root
    return None


def wheel() -> tuple[str, bytes]:
    """The running pgra's wheel (file name, bytes), built from a copy of :func:`checkout`, or a WheelError."""
    if (root := checkout()) is None:
        raise WheelError("this pgra does not run from a checkout (it was installed from a wheel or an archive)")
    try:
        h = hashlib.sha256()
        for path in _sources(root):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + bytes.fromhex(sha256_file(path)) + b"\0")
        if h.hexdigest() not in _BUILT:
            _BUILT[h.hexdigest()] = _build(root)
    except (OSError, subprocess.SubprocessError) as e:  # an unreadable file, a full disk, a build past its time
        raise WheelError(f"it could not be built from {root} ({type(e).__name__}: {str(e)[:200]})") from None
    return _BUILT[h.hexdigest()]


def _sources(root: Path) -> Iterator[Path]:
    """The files of :data:`SOURCES` under ``root`` (those git tracks, in a checkout), never a link, in order."""
    tracked = _tracked(root)
    for name in SOURCES:
        path = root / name
        found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.is_file() else []
        yield from (p for p in found if not p.is_symlink() and "__pycache__" not in p.parts
                    and (tracked is None or p.relative_to(root).as_posix() in tracked))


def _tracked(root: Path) -> set[str] | None:
    """The files git tracks in ``root`` when ``root`` is the top of a git checkout, else None."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=30)
        if top.returncode or Path(top.stdout.strip()).resolve() != root.resolve():
            return None
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, timeout=60,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name}


def _build(root: Path) -> tuple[str, bytes]:
    """Build the wheel with setuptools' own hook (no download, no isolated environment)."""
    with tempfile.TemporaryDirectory(prefix="pgra-wheel.") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        for path in _sources(root):
            (src / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / path.relative_to(root))
        out.mkdir()
        done = subprocess.run([sys.executable, "-c", BUILD, str(out)], cwd=src, capture_output=True, text=True,
                              timeout=600)
        built = sorted(out.glob("pgra-*.whl"))
        if done.returncode or len(built) != 1:
            said = (done.stderr.strip().splitlines() or ["no wheel written"])[-1]
            raise WheelError(f"setuptools could not build it from {root} ({said[:300]})")
        return built[0].name, built[0].read_bytes()


def pinned(recorded: Any) -> dict[str, tuple[str, str]]:
    """The versions of :data:`PINNED` and whose: ``run`` (``recorded``) or ``here`` (this machine's)."""
    here, recorded = library_versions(), recorded if isinstance(recorded, dict) else {}
    out = {}
    for name in PINNED:
        value = recorded.get(name)
        if isinstance(value, str) and VERSION.fullmatch(value):
            out[name] = (value, "run")
        elif here.get(name):
            out[name] = (here[name], "here")
    return out


def requirement(name: str, version: str, source: str) -> str:
    """``pip install`` arguments for ``name`` at ``version`` and a comment saying whose it is: pinned where an index
    serves it (a torch build tag with PyTorch's ``--index-url``), else unpinned, the comment saying why."""
    whose = "the version the run used" if source == "run" else \
        "this machine's version when exported (the run recorded none)"
    release, _, build = version.partition("+")
    if not RELEASE.fullmatch(release) or (build and (name != "torch" or not TORCH_BUILD.fullmatch(build))):
        return f"{name}   # {version}, {whose}, cannot be pinned: a local or pre-release build that no index serves"
    if build:
        return f"{name}=={version} --index-url https://download.pytorch.org/whl/{build}   # {whose}"
    return f"{name}=={version}   # {whose}"


def install_lines(wheel_name: str | None, versions: dict[str, tuple[str, str]], why: str = "") -> list[str]:
    """The model card's install lines: torch and transformers :func:`pinned`, the wheel (or ``why`` none)."""
    lines = ["# in this folder (or a download of it from the Hub):"]
    lines += [f"pip install {requirement(name, *versions[name])}" for name in PINNED if name in versions]
    if wheel_name:
        return [*lines, f'pip install "./{WHEEL_DIR}/{wheel_name}[cpu]"'
                        "   # the pgra that made this export; [gpu] on a CUDA 12 machine"]
    return [*lines, f"# no wheel of pgra in this folder: {why}; pgra {__version__} from a clone of its repository or "
            "its release archive (docs/getting-pgra.md):", 'pip install "PATH/TO/pgra[cpu]"']


__all__ = ["PREDICT", "WheelError", "checkout", "install_lines", "pinned", "requirement", "wheel"]
