"""Reranker prompts exactly as the PGRA paper's code assembles them (one shared prefix per query)."""

from __future__ import annotations

from collections.abc import Sequence

from ..tasks.loaders import Example
from ..tasks.spec import TaskSpec

HEADER = "Follow the demonstrations:\n"
ANSWER_CUE = "\nThe answer is"


def render_demo(task: TaskSpec, ex: Example) -> str:
    if ex.label is None:
        raise ValueError(f"demonstration {ex.id} has no label")
    return task.render(ex.text).replace("\n\n", "\n") + ANSWER_CUE + " " + task.demo_words[ex.label]


def demo_prefix(task: TaskSpec, demos: Sequence[Example]) -> str:
    """Everything before P(t): the header and the demonstrations, each followed by a blank line."""
    return HEADER + "".join(render_demo(task, d) + "\n\n" for d in demos)


def build_prompt(task: TaskSpec, demos: Sequence[Example], text: str) -> str:
    """The full reranker prompt for ``text``."""
    return demo_prefix(task, demos) + task.render(text) + ANSWER_CUE
