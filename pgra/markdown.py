"""Markdown tables whose cells hold arbitrary text (labels, task names, input texts) without breaking the table."""

from __future__ import annotations

import re
from collections.abc import Iterable

_PIPE = re.compile(r"(\\*)\|")
_BREAK = re.compile(r"\r\n|\r|\n|\u2028|\u2029")


def md_cell(value: object) -> str:
    """``value`` as the text of one table cell: a ``|`` escaped (the backslashes right before it doubled, so that
    they stay text) and each line break written ``<br>``."""
    text = _PIPE.sub(lambda m: m.group(1) * 2 + "\\|", str(value))
    return _BREAK.sub("<br>", text)


_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKUP = re.compile(r"[\\`*_\[\]|~]")


def md_text(value: object) -> str:
    """``value`` as plain text inside a markdown line (a heading, a sentence): HTML's ``&``, ``<`` and ``>`` written
    as entities (no tag, comment or script reaches a renderer), markdown's markup characters (backslash, backtick,
    ``*``, ``_``, brackets, ``|``, ``~``) backslash-escaped, and every line break (and other control character) a
    space, so the text stays on its line and shows as written."""
    text = _BREAK.sub(" ", str(value))
    text = "".join(" " if ord(c) < 32 or 127 <= ord(c) <= 159 else c for c in text)  # C0, DEL, C1 (NEL)
    text = _MARKUP.sub(lambda m: "\\" + m.group(0), text)
    return "".join(_HTML.get(c, c) for c in text)


def md_row(cells: Iterable[object]) -> str:
    """One table line ``| a | b |`` of ``cells``, each escaped by :func:`md_cell`."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def md_table(header: Iterable[object], rows: Iterable[Iterable[object]]) -> list[str]:
    """The lines of a table: ``header``, the delimiter line and one line per row."""
    head = [md_cell(h) for h in header]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *(md_row(r) for r in rows)]


__all__ = ["md_cell", "md_row", "md_table", "md_text"]
