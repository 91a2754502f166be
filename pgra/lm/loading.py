"""The one way pgra loads a Hugging Face model, tokenizer or config: a bad name is an InputError, not a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import InputError


def load_pretrained(loader: Any, name_or_path: str, what: str, field: str, **kwargs: Any) -> Any:
    """``loader.from_pretrained(name_or_path, **kwargs)``; a failure is an InputError naming it and the field."""
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


def has_own_code(name_or_path: str) -> bool:
    """Whether a model would run its own code: a folder whose configs have an ``auto_map``, or any hub id."""
    import json

    folder = Path(str(name_or_path)).expanduser()
    if not folder.is_dir():
        return True
    for name in ("config.json", "tokenizer_config.json"):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("auto_map"):
            return True
    return False


def remote_code_allowed(name_or_path: str, allowed: bool, recorded: Any, what: str, artifact: str | Path,
                        flag: str = "--trust-remote-code") -> bool:
    """The ``trust_remote_code`` to load an artifact's model with: the command's, never the manifest's."""
    if allowed:
        return True
    if recorded is True and has_own_code(name_or_path):
        raise InputError(f"the {what} '{name_or_path}' has code of its own, and this artifact records that it ran "
                         "with it (trust_remote_code: true); pgra runs a model's own code only when the command at "
                         f"hand allows it, never because a file it reads says so: pass {flag} if you trust that code",
                         path=artifact, field="trust_remote_code")
    return False
