"""The never-itself rule: a query never gets its own text back (compared stripped; ids are not compared)."""

from __future__ import annotations

from typing import Any


def same_text(query: str, candidate: str) -> bool:
    """Whether ``candidate`` is the query itself (the same text, stripped)."""
    return query.strip() == candidate.strip()


def without_itself(query: str, hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``hits`` (each with a ``text``) without those that are the query itself, in their order."""
    return [h for h in hits if not same_text(query, h["text"])]


__all__ = ["same_text", "without_itself"]
