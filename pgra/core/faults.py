"""Fault injection for the kill-and-resume tests: ``fault_point(name)`` ends the process like ``kill -9``
when ``PGRA_FAULT`` names that point (``index.shard_written@2``: the second time it is reached)."""

from __future__ import annotations

import os
import sys

ENV = "PGRA_FAULT"
KILLED_EXIT = 137  # what a shell reports for a process killed by SIGKILL
_hits: dict[str, int] = {}


def parse_fault(spec: str | None = None) -> tuple[str, int] | None:
    """``PGRA_FAULT`` (or ``spec``) as ``(point, n)``, None when unset; a malformed value is an InputError."""
    spec = os.environ.get(ENV) if spec is None else spec
    if not spec:
        return None
    from .errors import whole_number

    target, at, nth = spec.partition("@")
    if not target or (at and not (whole_number(nth) or 0) >= 1):
        from .errors import InputError, shorten

        raise InputError(f"{ENV}={shorten(spec)} is not <point>[@n] with n a whole number from 1 (e.g. "
                         "train.step@3); unset it to run normally", field=ENV)
    return target, int(nth or 1)


def fault_point(name: str) -> None:
    """Die here (exit 137, nothing cleaned up) if ``PGRA_FAULT`` names this point and its hit count."""
    if not os.environ.get(ENV):
        return
    target, nth = parse_fault()
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == nth:
        sys.stderr.write(f"[fault injection] killed at {name} (hit {_hits[name]})\n")
        sys.stderr.flush()
        os._exit(KILLED_EXIT)
