"""The one way pgra loads a Hugging Face model, tokenizer or config: a bad name is an InputError, not a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import InputError


def load_pretrained(loader: Any, name_or_path: str, what: str, field: str, **kwargs: Any) -> Any:
    """``loader.from_pretrained(name_or_path, **kwargs)``; a folder or hub id that cannot be loaded (missing,
    incomplete, offline, not that kind of model) raises an :class:`InputError` naming it and the config field."""
    name = str(name_or_path)
    looks_local = name.startswith((".", "/", "~")) or name.count("/") > 1 or Path(name).expanduser().exists()
    if looks_local and not Path(name).expanduser().is_dir():
        raise InputError(f"cannot load the {what} '{name}': no such folder", field=field)
    if looks_local and not (Path(name).expanduser() / "config.json").exists():
        raise InputError(f"cannot load the {what} '{name}': the folder has no config.json, so it is not a saved "
                         "Hugging Face model", field=field)
    try:
        return loader.from_pretrained(name, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        text = str(e).strip()
        first = text.splitlines()[0].rstrip(":") if text else type(e).__name__
        raise InputError(f"cannot load the {what} '{name}': {first}", field=field) from None
