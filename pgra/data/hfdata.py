"""The one way pgra opens a Hugging Face dataset split: a ``save_to_disk`` folder, or ``load_dataset``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import InputError

# files by which a folder is recognised as written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
SAVED_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")


class MissingSplitError(InputError):
    """The dataset has no such split (task loaders carve a dev split from train instead)."""

    def __init__(self, location: str | Path, split: str, available: list[str] | None = None) -> None:
        known = f" (splits: {available})" if available else ""
        super().__init__(f"split '{split}' not found{known}", path=location, field="split")
        self.split = split


def is_saved_dataset(location: str | Path) -> bool:
    path = Path(location)
    return path.is_dir() and any((path / m).exists() for m in SAVED_MARKERS)


def open_hf_dataset(location: str | Path, split: str, config_name: str | None = None) -> Any:
    """One split of a local ``save_to_disk`` folder, else of ``datasets.load_dataset(location)``."""
    import datasets

    if is_saved_dataset(location):
        ds = datasets.load_from_disk(str(location))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise MissingSplitError(location, split, list(ds))
            ds = ds[split]
        return ds
    try:
        return datasets.load_dataset(str(location), config_name or None, split=split)
    except ValueError as e:
        if "split" in str(e).lower():
            raise MissingSplitError(location, split) from None
        raise InputError(f"cannot load Hugging Face dataset ({e})", path=location) from None
    except (FileNotFoundError, ConnectionError, OSError) as e:
        raise InputError(f"cannot load Hugging Face dataset ({type(e).__name__}: {e})", path=location) from None
