"""``pgra_full``: Fusion-in-Decoder on the top d of the whole corpus under the prompt-guided embedding, without a
first stage (an ablation: does the first stage matter?). The evidence is the ``full_search`` stage's
(:func:`pgra.rerank.prompt_guided.full_search.full_search`), built with the experiment's rerank settings."""

from __future__ import annotations

from .reader_method import ReaderMethod


class PGRAFull(ReaderMethod):
    name = "pgra_full"
    data = "full_search"
