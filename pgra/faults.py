"""Fault injection for the kill-and-resume tests: ``fault_point(name)`` ends the process at once, like
``kill -9`` (no cleanup, no ``finally``), when the environment variable ``PGRA_FAULT`` names that point.

``PGRA_FAULT=index.shard_written@2`` kills at the second time the point is reached (``@1`` when left out).
Points are placed where a kill is most damaging: between writing data and marking it done, inside atomic
writes before the rename (``write:<file name>``), and before a manifest. Unset, a point costs one dict lookup.
"""

from __future__ import annotations

import os
import sys

ENV = "PGRA_FAULT"
KILLED_EXIT = 137  # what a shell reports for a process killed by SIGKILL
_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Die here (exit 137, nothing cleaned up) if ``PGRA_FAULT`` names this point and its hit count."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == int(nth or 1):
        sys.stderr.write(f"[fault injection] killed at {name} (hit {_hits[name]})\n")
        sys.stderr.flush()
        os._exit(KILLED_EXIT)
