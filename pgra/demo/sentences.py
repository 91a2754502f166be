"""A small rule-based sentence splitter for Wikipedia summaries (no model downloads)."""

from __future__ import annotations

import re

_ABBREV = {"c", "ca", "st", "dr", "mr", "mrs", "ms", "jr", "sr", "vs", "no", "vol", "inc", "ltd", "co", "corp",
           "gen", "col", "lt", "sgt", "prof", "rev", "fr", "mt", "ft", "approx", "est", "fl", "e.g", "i.e",
           "etc", "al", "u.s", "u.k", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
           "nov", "dec"}
_BOUNDARY = re.compile(r"([.!?][\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split a paragraph at sentence ends, keeping abbreviations and initials ("J. R. R. Tolkien") intact."""
    text = " ".join(text.split())
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if m.group(1) == ".":
            last = text[start:m.start()].rsplit(" ", 1)[-1].lower()
            if last in _ABBREV or (len(last) == 1 and last.isalpha()):
                continue
        out.append(text[start:m.end(1)].strip())
        start = m.end()
    if tail := text[start:].strip():
        out.append(tail)
    return [s for s in out if s]
