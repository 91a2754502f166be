"""Error types naming the file, line and field that is wrong, and helpers that read and echo a user's text."""

from __future__ import annotations

import math
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


ECHO_LIMIT = 200  # characters of a user's value repeated in an error message


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def whole_number(text: object) -> int | None:
    """The whole number ``text`` spells in at most 18 ASCII digits (spaces around allowed), else None."""
    text = str(text).strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def is_number(value: object) -> bool:
    """Whether ``value`` is an int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    try:
        return is_number(value) and math.isfinite(value)
    except OverflowError:  # an int too large for a float (400 digits)
        return False


def shorten(value: object, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error line never echoes a 480 KB value back."""
    return clip(repr(value), limit)


def os_error_message(error: OSError, writing: str | Path | None = None) -> str:
    """One line for an OSError (full disk, permission ...), naming the path and what to do about it."""
    import errno

    where = f"{error.filename}: " if error.filename else f"while writing {writing}: " if writing else ""
    code = error.errno
    reason = error.strerror or str(error) or type(error).__name__
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        hint = "free some space (or write elsewhere) and run the same command again: finished work is kept and a " \
               "re-run resumes"
    elif code in (errno.EACCES, errno.EPERM):
        hint = "check the permissions of that path (ls -l), or choose another path"
    elif code == errno.EROFS:
        hint = "that file system is read-only: choose another path"
    elif code in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        hint = "a file stands where a folder is needed, or the reverse: choose another path"
    else:
        hint = "check the path and the disk, then run the same command again"
    return clip(f"{where}{reason} ({hint})", 600)


def os_error_of(error: BaseException) -> OSError | None:
    """``error`` as an OSError when it is one or a library wraps one (``... (os error 28)``); else None."""
    import os
    import re

    if isinstance(error, OSError):
        return error
    if type(error).__name__ != "SafetensorError":
        return None
    code = re.search(r"\(os error (\d+)\)", str(error))
    if code is None:
        return None
    at = re.search(r'at path "([^"]+)"', str(error))  # a temporary file in the folder being written
    return OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(Path(at.group(1)).parent) if at else None)
