"""Error types that tell the user which file, line and field is wrong."""

from __future__ import annotations

from pathlib import Path


class PgraError(Exception):
    """Base class for errors the CLI reports as a one-line message (no traceback)."""


class InputError(PgraError):
    """Bad user input: names the file and, where known, the line and field."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            if field is not None:
                where += f" (field '{field}')"
            where += ": "
        elif field is not None:
            where = f"field '{field}': "
        super().__init__(where + message)
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field


class StaleArtifactError(PgraError):
    """An artifact on disk does not match what the current stage expects (other corpus, model or config)."""


class IncompleteArtifactError(PgraError):
    """An artifact directory holds a partial, interrupted or corrupted result."""
