"""Markdown tables whose cells hold arbitrary text (labels, task names, input texts) without breaking the table."""

from __future__ import annotations

import re
from collections.abc import Iterable

_BREAK = re.compile(r"\r\n|\r|\n|\u2028|\u2029")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# in a table cell: what would end the cell (``|``), open a code span (a backtick), or make a link or an image of
# text (``](`` and ``][``); a backslash first, so that none of them is unescaped by one written before it
_CELL_MARKUP = re.compile(r"[\\`|]|\](?=[(\[])")


def md_cell(value: object) -> str:
    """``value`` (text from data) as one table cell's text: ``&``, and ``<`` / ``>`` where they could make a tag, as
    entities; backslash, backtick, ``|`` and ``]`` escaped; line breaks as ``<br>`` (emphasis left as it is)."""
    text = _CELL_MARKUP.sub(lambda m: "\\" + m.group(0), str(value))
    markup = "<" in text and ">" in text[text.index("<"):]
    return _BREAK.sub("<br>", "".join(_HTML.get(c, c) if markup or c == "&" else c for c in text))


_MARKUP = re.compile(r"[\\`*_\[\]|~]")


def md_text(value: object) -> str:
    """``value`` as plain text in a markdown line: ``&<>`` as entities, markup escaped, control characters as spaces."""
    text = _BREAK.sub(" ", str(value))
    text = "".join(" " if ord(c) < 32 or 127 <= ord(c) <= 159 else c for c in text)  # C0, DEL, C1 (NEL)
    text = _MARKUP.sub(lambda m: "\\" + m.group(0), text)
    return "".join(_HTML.get(c, c) for c in text)


def md_code(value: object) -> str:
    """``value`` as an inline code span, or as :func:`md_text` where it holds a backtick or a line break."""
    text = str(value)
    plain = text and "`" not in text and not _BREAK.search(text) and all(ord(c) >= 32 and c != "\x7f" for c in text)
    return f"`{text}`" if plain else md_text(text)


def md_fence(text: str, lang: str = "") -> list[str]:
    """The lines of a fenced code block holding ``text``, its fence longer than any backtick run in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, *text.split("\n"), fence]


def md_row(cells: Iterable[object]) -> str:
    """One table line ``| a | b |`` of ``cells``, each escaped by :func:`md_cell`."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def md_table(header: Iterable[object], rows: Iterable[Iterable[object]]) -> list[str]:
    """The lines of a table: ``header``, the delimiter line and one line per row."""
    head = [md_cell(h) for h in header]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *(md_row(r) for r in rows)]


__all__ = ["md_cell", "md_code", "md_fence", "md_row", "md_table", "md_text"]
