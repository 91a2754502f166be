"""How big things are, and how the plans write it: seconds, bytes, folders, lines, models and downloads."""

from __future__ import annotations

import os
from pathlib import Path

# the Hub models the paper's configs name, for a model that is not here: (parameters, by its Hub card; bytes a
# parameter in its checkpoint, by its config's torch_dtype; hidden size, what a row of an embedding cache holds)
KNOWN_MODELS = {"t5-small": (60_506_624, 4, 512), "t5-base": (222_903_552, 4, 768), "t5-large": (737_668_096, 4, 1024),
                "bert-base-uncased": (109_482_240, 4, 768),
                "princeton-nlp/unsup-simcse-bert-base-uncased": (109_482_240, 4, 768),
                "facebook/opt-350m": (331_196_416, 2, 512), "facebook/opt-1.3b": (1_315_758_080, 2, 2048),
                "facebook/opt-2.7b": (2_651_596_800, 2, 2560), "facebook/opt-6.7b": (6_658_473_984, 2, 4096),
                "facebook/opt-13b": (12_853_473_280, 2, 5120)}
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".h5", ".msgpack")
SAMPLE_BYTES = 1 << 20  # a line size is measured on a file's first MiB


def format_seconds(seconds: float) -> str:
    """``42 s``, ``12.5 min`` or ``3.20 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def format_bytes(n: float) -> str:
    """``12.3 kB``, ``4.5 MB``, ``587 MB``, ``2.68 GB`` or ``1.20 TB`` (decimal units)."""
    if n < 1e6:
        return f"{n / 1e3:.1f} kB"
    if n < 1e9:
        return f"{n / 1e6:.1f} MB" if n < 1e8 else f"{n / 1e6:.0f} MB"
    if n < 1e12:
        return f"{n / 1e9:.2f} GB" if n < 1e11 else f"{n / 1e9:.0f} GB"
    return f"{n / 1e12:.2f} TB"


def mean_line_bytes(path: str | Path) -> float | None:
    """The mean bytes of a line of a text file, measured on its first MiB; None for no readable, non-empty file."""
    try:
        with open(path, "rb") as f:
            head = f.read(SAMPLE_BYTES)
    except OSError:
        return None
    lines = head.count(b"\n") or (1 if head else 0)
    return len(head) / lines if lines else None


def folder_bytes(folder: str | Path) -> int:
    """The bytes of the files under ``folder`` (0 when it is not there)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def model_parameters(model: str) -> tuple[dict[str, int] | None, str]:
    """A model's parameters (``all``, ``encoder``, ``decoder``) and where the count came from; (None, why)."""
    from .cost import parameter_counts

    folder = _here(model)
    counts = parameter_counts(folder) if folder is not None else None
    if counts:
        return counts, f"{model}'s safetensors" + ("" if folder == Path(model) else " (Hugging Face cache)")
    known = _known(model)
    if known:
        return {"all": known[0]}, f"{model}: its Hub card's count"
    return None, f"{model}: parameters unknown (not a local folder, not in the Hugging Face cache)"


def count_text(n: int) -> str:
    """``12.85B`` or ``222.9M`` parameters, or all the digits of a small count (``46,592``)."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n:,}"


def _known(model: str) -> tuple[int, int, int] | None:
    return KNOWN_MODELS.get(str(model).removeprefix("google-t5/"))


def hidden_size(model: str) -> int | None:
    """A model's hidden size: its local folder's config (:func:`pgra.runtime.cost.model_dim`), else a known Hub model's."""
    from .cost import model_dim

    known = _known(model)
    return model_dim(model) or (known[2] if known else None)


def _here(model: str) -> Path | None:
    """The folder holding a model's weights here: its local folder, or its snapshot in the Hugging Face cache."""
    if Path(model).is_dir():
        return Path(model)
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - not a repo id, no hub library: not here
        return None
    folder = Path(cached).parent if isinstance(cached, str) else None
    return folder if folder is not None and any(p.name.endswith(WEIGHT_FILES) for p in folder.iterdir()) else None


def model_bytes(model: str) -> tuple[float | None, str]:
    """What a model takes on disk and how that was reckoned (its files, else parameters x bytes each), or None."""
    folder = _here(model)
    if folder is not None:
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        return float(size), f"{model} {format_bytes(size)} (here)"
    known = _known(model)
    if known is None:
        return None, f"{model} (not here; its size is unknown)"
    n, width, _ = known
    return float(n * width), f"{model} {format_bytes(n * width)} to download ({count_text(n)} x {width} B)"


__all__ = ["KNOWN_MODELS", "count_text", "folder_bytes", "format_bytes", "format_seconds", "hidden_size",
           "mean_line_bytes", "model_bytes", "model_parameters"]
